// Headless Chromium test of the chat UI's features beyond one plain turn (web/):
// highlighting, math, edit/branch/regenerate, per-conversation settings, copy on a
// phone, export/import, search, attachments, speed and context shown.
//   node tests/web/features.test.mjs URL SHOTDIR
// Runs against the same stack as ui.test.mjs (tests/web/run.sh).  Most turns are
// answered by a canned stream (page.route on /ui/stream/*: the POST still goes to the
// real gateway, which validates every field) so each check is exact and fast; the
// settings turn is answered by the real daemon (max_tokens must cut the answer).
// Prints "N passed, N failed"; exits 1 on any failure.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync, mkdirSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const BASE = (process.argv[2] || process.env.UI_URL || 'http://127.0.0.1:8080').replace(/\/$/, '');
const SHOTS = process.argv[3] || 'build';
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const STEP_TIMEOUT = +(process.env.UI_TEST_TIMEOUT_MS || 30000);
const ONLY = process.env.UI_TEST_ONLY ? new RegExp(process.env.UI_TEST_ONLY) : null;

let passed = 0, failed = 0;
const failures = [];
async function test(name, fn) {
  if (ONLY && !ONLY.test(name)) return;
  const t0 = Date.now();
  try {
    await fn();
    passed++;
    console.log(`ok   - ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failed++;
    failures.push(name);
    console.log(`FAIL - ${name}: ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`);
  }
}
function assert(cond, msg) { if (!cond) throw new Error(msg || 'assertion failed'); }

const profile = mkdtempSync(join(tmpdir(), 'smollm3-ui-feat-'));
const ctx = await chromium.launchPersistentContext(profile, {
  executablePath: CHROMIUM,
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1280, height: 800 },
  colorScheme: 'light',
  permissions: ['clipboard-read', 'clipboard-write'],
  acceptDownloads: true,
});
const page = ctx.pages()[0] || await ctx.newPage();
page.setDefaultTimeout(STEP_TIMEOUT);
const dialogs = [];
page.on('dialog', async (d) => { dialogs.push(d.message()); await d.dismiss().catch(() => {}); });
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(String(e)));
const cspViolations = [];
page.on('console', (m) => {
  if (m.type() === 'error') console.log(`  [browser error] ${m.text()}`);
  if (/Content Security Policy/i.test(m.text())) cspViolations.push(m.text());
});
const chatPosts = [];
page.on('request', (r) => {
  if (r.method() === 'POST' && new URL(r.url()).pathname === '/ui/chat') chatPosts.push(new URLSearchParams(r.postData() || ''));
});

const state = () => page.evaluate(() => JSON.parse(JSON.stringify(window.SmolUI.state())));
const conv = async () => { const s = await state(); return s.conversations.find((c) => c.id === s.currentId); };
async function waitIdle() {
  await page.waitForFunction(() => window.SmolUI && !window.SmolUI.state().busy &&
    !document.querySelector('#messages .msg.assistant.streaming'), null, { timeout: STEP_TIMEOUT });
}
async function ready() {
  await page.waitForFunction(() => document.documentElement.classList.contains('ready') &&
    document.getElementById('model-name').textContent !== '—');
}
async function newChat() {   // an empty chat is reused (app.js newChat), else a new one is made
  const c = await conv();
  await page.keyboard.press('Control+Shift+O');            // the button is in the closed drawer on a phone
  if (c && c.messages.length) await page.waitForFunction((id) => window.SmolUI.state().currentId !== id, c.id);
}

// The SSE body the gateway would send for this answer (gateway/UI_API.md): HTML-escaped
// deltas, one data: line per line, then done with usage.
const esc = (t) => t.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
  .replace(/"/g, '&quot;').replace(/'/g, '&#39;').replace(/\r/g, '&#13;');
const ev = (name, data) => `event: ${name}\n` + data.split(/\r\n|\r|\n/).map((l) => 'data: ' + l + '\n').join('') + '\n';
function sseBody(answer, usage) {
  const parts = answer.match(/[\s\S]{1,7}/g) || [];
  return parts.map((p) => ev('content', esc(p))).join('') +
    ev('done', JSON.stringify({ finish_reason: 'stop', usage: Object.assign({ prompt_tokens: 12,
      completion_tokens: parts.length, total_tokens: 12 + parts.length, cached_tokens: 0, reasoning_tokens: 0 }, usage || {}) }));
}
/** Runs `act` (which sends something) with the next stream answered by `answer`. */
async function withAnswer(answer, act, usage) {
  let served = 0;
  await page.route('**/ui/stream/*', (route) => {
    served++;
    return route.fulfill({ status: 200, headers: { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' },
      body: sseBody(answer, usage) });
  });
  try {
    await act();
    await page.waitForFunction(() => !!document.querySelector('#messages .msg.assistant'));
    await page.waitForFunction(() => window.SmolUI.state().busy === false);
    await waitIdle();
    assert(served === 1, `stream served ${served} times`);
  } finally {
    await page.unroute('**/ui/stream/*');
  }
}
async function sendMessage(text) {
  const box = page.locator('#message');
  await box.click();
  await box.fill(text);
  await box.press('Enter');
}
const ask = (text, answer, usage) => withAnswer(answer, () => sendMessage(text), usage);
const last = () => page.locator('#messages .msg.assistant').last();

try {
  await page.goto(BASE + '/', { waitUntil: 'load' });
  await ready();
  // thinking off: the real turns below are short
  if (await page.locator('#think').isChecked()) await page.locator('label.switch').click();

  await test('syntax highlighting: a fenced block is coloured by language, HTML in it stays text', async () => {
    await ask('Show code', 'Here:\n\n```python\ndef add(a, b):\n    return a + b  # sum\n```\n\n' +
      '```html\n<img src=x onerror=alert(1)>\n```\n');
    const kw = last().locator('pre code.language-python span.hljs-keyword').first();
    assert(await kw.count() === 1, 'no hljs keyword span: ' + await last().locator('.md').innerHTML());
    assert((await kw.textContent()) === 'def', 'keyword span holds ' + await kw.textContent());
    assert(await last().locator('pre code.language-python span.hljs-comment').count() === 1, 'comment not marked');
    const colours = await last().locator('pre code.language-python').evaluate((c) => ({
      kw: getComputedStyle(c.querySelector('.hljs-keyword')).color, plain: getComputedStyle(c).color }));
    assert(colours.kw !== colours.plain, 'keyword not coloured: ' + JSON.stringify(colours));
    assert((await last().locator('.codehead .lang').first().textContent()) === 'python', 'language label');
    assert(await page.locator('#messages img, #messages script').count() === 0, 'an <img> was created from the html block');
    assert((await last().locator('pre code.language-html').textContent()).includes('<img src=x onerror=alert(1)>'), 'html block text');
    // copying a highlighted block copies its text, not markup
    await last().locator('.codeblock .copy').first().click();
    const clip = await page.evaluate(() => navigator.clipboard.readText());
    assert(clip === 'def add(a, b):\n    return a + b  # sum', 'copied ' + JSON.stringify(clip));
  });

  await test('math: $…$, $$…$$, \\(…\\), \\[…\\] typeset by KaTeX; currency, code and markdown untouched; nothing unsafe', async () => {
    await newChat();
    const answer = 'Euler: $e^{i\\pi}+1=0$ and \\(a_1 + b_2\\) inline.\n\n' +
      '$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$\n\n\\[\\sqrt{2} \\approx 1.414\\]\n\n' +
      'Prices: $5 and $10. Code `$x_1$` stays. *emph* after.\n\n' +
      'Unsafe: $\\href{javascript:alert(1)}{x}$ $\\htmlStyle{background:url(x)}{y}$';
    await ask('Math please', answer);
    const md = last().locator('.md');
    const r = await md.evaluate((m) => ({
      katex: m.querySelectorAll('.katex').length,
      display: m.querySelectorAll('.katex-display').length,
      mathml: m.querySelectorAll('.katex math annotation').length,
      text: m.textContent,
      code: [...m.querySelectorAll('code')].map((c) => c.textContent),
      em: [...m.querySelectorAll('em')].map((e) => e.textContent),
      links: m.querySelectorAll('a').length,
      styled: [...m.querySelectorAll('[style]')].map((e) => e.getAttribute('style')).filter((s) => /url|javascript/i.test(s)),
      sqrtSvg: m.querySelectorAll('.katex svg path').length,
    }));
    assert(r.katex >= 6 && r.display === 2, 'typeset: ' + JSON.stringify(r));
    assert(r.mathml >= 4, 'no MathML for screen readers: ' + JSON.stringify(r));
    assert(r.text.includes('Prices: $5 and $10.'), 'currency changed: ' + r.text);
    assert(r.code.includes('$x_1$'), 'math typeset inside code: ' + JSON.stringify(r.code));
    assert(r.em.length === 1 && r.em[0] === 'emph', 'underscores in TeX became emphasis: ' + JSON.stringify(r.em));
    assert(r.links === 0 && r.styled.length === 0, 'unsafe output: ' + JSON.stringify(r));
    assert(r.sqrtSvg >= 1, 'the root sign (svg) was dropped');
    const tex = await md.locator('.katex annotation').first().textContent();
    assert(tex === 'e^{i\\pi}+1=0', 'TeX source ' + tex);
    // stored as the model wrote it
    assert((await conv()).messages[1].content === answer, 'stored content changed');
  });

  await test('branches: regenerate any answer and edit any message keep the old versions; < n/m > switches; reload keeps them', async () => {
    await newChat();
    await ask('First question', 'Answer A1');
    await ask('Second question', 'Answer B1');
    const texts = async () => (await conv()).messages.map((m) => m.content);
    const label = (loc) => loc.locator('.ver-label').textContent();
    // regenerate the FIRST answer: a new version of slot 1, the old tail kept
    const posts0 = chatPosts.length;
    await withAnswer('Answer A2', () => page.locator('#messages .msg.assistant').first().locator('.regen-msg').click());
    const p1 = chatPosts[posts0];
    assert(p1.get('message') === 'First question' && p1.get('history') === '[]', 'regenerate sent ' + p1.toString());
    assert(JSON.stringify(await texts()) === JSON.stringify(['First question', 'Answer A2']), 'after regenerate: ' + await texts());
    assert(await page.locator('#messages .msg').count() === 2, 'the user message shown twice');
    const a0 = page.locator('#messages .msg.assistant').first();
    assert(await label(a0) === '2/2', 'switch label ' + await label(a0));
    await a0.locator('.ver-prev').click();
    assert(JSON.stringify(await texts()) === JSON.stringify(['First question', 'Answer A1', 'Second question', 'Answer B1']), 'prev: ' + await texts());
    assert(await label(page.locator('#messages .msg.assistant').first()) === '1/2', 'label after prev');
    assert(await page.locator('#messages .msg').count() === 4, 'old tail not shown');
    await page.locator('#messages .msg.assistant').first().locator('.ver-next').click();
    assert(JSON.stringify(await texts()) === JSON.stringify(['First question', 'Answer A2']), 'next: ' + await texts());
    // edit the first user message: a new version of slot 0
    await page.locator('#messages .msg-tools').first().locator('.edit-msg').click();
    const box = page.locator('#messages .msg-edit textarea');
    assert((await box.inputValue()) === 'First question', 'editor holds ' + await box.inputValue());
    const posts1 = chatPosts.length;
    await withAnswer('Answer E1', async () => { await box.fill('First question, edited'); await box.press('Enter'); });
    const p2 = chatPosts[posts1];
    assert(p2.get('message') === 'First question, edited' && p2.get('history') === '[]', 'edit sent ' + p2.toString());
    assert(JSON.stringify(await texts()) === JSON.stringify(['First question, edited', 'Answer E1']), 'after edit: ' + await texts());
    assert(await label(page.locator('#messages .msg-tools').first()) === '2/2', 'user switch label');
    // back to the first version of slot 0: its own versions (A1 / A2) are still there
    await page.locator('#messages .msg-tools').first().locator('.ver-prev').click();
    assert(JSON.stringify(await texts()) === JSON.stringify(['First question', 'Answer A2']), 'slot 0 v1: ' + await texts());
    assert(await label(page.locator('#messages .msg.assistant').first()) === '2/2', 'nested versions lost');
    await page.reload({ waitUntil: 'load' });
    await ready();
    await page.locator('#messages .msg.assistant').first().locator('.ver-prev').click();
    assert(JSON.stringify(await texts()) === JSON.stringify(['First question', 'Answer A1', 'Second question', 'Answer B1']), 'after reload: ' + await texts());
    // a continued turn goes on from the version shown; its history is that path
    const posts2 = chatPosts.length;
    await ask('Third question', 'Answer C1');
    const h = JSON.parse(chatPosts[posts2].get('history'));
    assert(h.map((m) => m.content).join('|') === 'First question|Answer A1|Second question|Answer B1', 'history ' + JSON.stringify(h));
    // a regenerate the server refuses puts the shown version back
    await page.route('**/ui/chat', (route) => route.fulfill({ status: 503, contentType: 'text/html',
      body: '<div class="msg error">the model is not available right now</div>' }));
    try {
      await page.locator('#messages .msg.assistant').last().locator('.regen-msg').click();
      await page.locator('#messages .msg.error').waitFor();
      await waitIdle();
    } finally { await page.unroute('**/ui/chat'); }
    assert((await texts()).join('|') === 'First question|Answer A1|Second question|Answer B1|Third question|Answer C1',
      'a refused regenerate lost the answer: ' + await texts());
    assert(!(await conv()).fork, 'a fork left pending');
    // a page closed while a regenerate was on its way: the next load puts the shown version back
    await page.evaluate(() => {
      const all = JSON.parse(localStorage.getItem('smollm3.conversations.v1'));
      const c = all.find((x) => x.id === window.SmolUI.state().currentId);
      const tail = c.messages.splice(5);
      c.fork = { at: 5, others: [tail], prev: 0 };
      localStorage.setItem('smollm3.conversations.v1', JSON.stringify(all));
    });
    await page.reload({ waitUntil: 'load' });
    await ready();
    assert((await texts()).length === 6 && !(await conv()).fork, 'a pending fork not resolved on load: ' + await texts());
  });

  await test('settings per conversation: max tokens and top-p sent and honoured by the daemon; each chat keeps its own', async () => {
    const setNum = async (sel, v) => {
      if (!(await page.locator('#system-box').evaluate((d) => d.open))) await page.locator('#system-box > summary').click();
      await page.locator(sel).fill(String(v));
    };
    await newChat();
    const idA = (await state()).currentId;
    await page.locator('#system-box > summary').click();
    await setNum('#max-tokens', 4);
    await setNum('#top-p', 0.5);
    await page.locator('#temperature').fill('0.3');
    await page.locator('#system-box > summary').click();
    const posts0 = chatPosts.length;
    await sendMessage('Tell me a long story.');              // the real daemon answers this one
    await page.locator('#messages .msg.assistant').first().waitFor();
    await waitIdle();
    const p = chatPosts[posts0];
    assert(p.get('max_tokens') === '4' && p.get('top_p') === '0.5' && p.get('temperature') === '0.30',
      'sent ' + p.toString());
    const m = (await conv()).messages[1];
    assert(m.finish === 'length' && m.usage && m.usage.completion_tokens > 0 && m.usage.completion_tokens <= 4,
      'max_tokens not honoured: ' + JSON.stringify({ finish: m.finish, usage: m.usage }));
    assert(/token limit/.test(await last().locator('.meta').textContent()), 'no "cut off" note');
    // a second chat with its own settings
    await newChat();
    const idB = (await state()).currentId;
    assert(idB !== idA, 'no new chat');
    assert((await page.locator('#max-tokens').inputValue()) === '4', 'a new chat does not start from the last settings');
    await setNum('#max-tokens', 7);
    await setNum('#top-p', '');
    await page.locator(`#conv-list .conv[data-id="${idA}"] .conv-open`).click();
    assert((await page.locator('#max-tokens').inputValue()) === '4' && (await page.locator('#top-p').inputValue()) === '0.5' &&
      (await page.locator('#temperature-value').textContent()) === '0.30', 'chat A lost its settings');
    await page.reload({ waitUntil: 'load' });
    await ready();
    assert((await page.locator('#max-tokens').inputValue()) === '4', 'settings lost on reload');
    await page.locator(`#conv-list .conv[data-id="${idB}"] .conv-open`).click();
    assert((await page.locator('#max-tokens').inputValue()) === '7' && (await page.locator('#top-p').inputValue()) === '',
      'chat B: ' + await page.locator('#max-tokens').inputValue());
    const posts1 = chatPosts.length;
    await ask('Hi', 'Hello');
    const q = chatPosts[posts1];
    assert(q.get('max_tokens') === '7' && !q.has('top_p'), 'chat B sent ' + q.toString());
    // out of range is not kept
    await setNum('#max-tokens', 0);
    assert((await conv()).settings.max_tokens === 7, 'an invalid max tokens was stored');
    await setNum('#max-tokens', '');
    await page.locator('#system-box > summary').click();
  });

  await test('tokens/s and context used shown under an answer', async () => {
    await newChat();
    await ask('Count', 'One two three four five six seven eight nine ten.', { prompt_tokens: 1200, completion_tokens: 48 });
    const meta = await last().locator('.meta-text').textContent();
    assert(/48 tokens · [\d.]+ tok\/s/.test(meta), 'meta ' + meta);
    assert(meta.includes('context 1,248 / 4,096 (30%)'), 'context not shown: ' + meta);
    await page.reload({ waitUntil: 'load' });
    await ready();
    await page.waitForFunction(() => /context 1,248/.test(document.querySelector('#messages .msg.assistant .meta-text').textContent));
  });

  await test('attach a text file: sent inside the message as a fenced block; binary and oversized files refused', async () => {
    await newChat();
    const text = 'alpha\nbeta ``` gamma\n';
    await page.locator('#attach-file').setInputFiles({ name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from(text) });
    await page.locator('#attachments .chip').waitFor();
    assert((await page.locator('#attachments .chip-name').textContent()) === 'notes.txt', 'chip');
    await page.locator('#attach-file').setInputFiles({ name: 'x.bin', mimeType: 'application/octet-stream', buffer: Buffer.from([0, 1, 2, 255, 254]) });
    await page.waitForFunction(() => /not a text file/.test(document.getElementById('toast-text').textContent));
    await page.locator('#attach-file').setInputFiles({ name: 'big.txt', mimeType: 'text/plain', buffer: Buffer.alloc(70 * 1024, 'a') });
    await page.waitForFunction(() => /too large/.test(document.getElementById('toast-text').textContent));
    assert(await page.locator('#attachments .chip').count() === 1, 'a refused file was attached');
    await page.keyboard.press('Escape');                  // the toast sits over the composer
    const posts0 = chatPosts.length;
    await ask('Summarize the file.', 'It lists three words.');
    const msg = chatPosts[posts0].get('message');
    assert(msg === 'File: notes.txt\n````\nalpha\nbeta ``` gamma\n````\n\nSummarize the file.', 'sent ' + JSON.stringify(msg));
    assert(await page.locator('#attachments').isHidden(), 'attachment not cleared after sending');
    assert((await conv()).messages[0].content === msg, 'stored message');
    // a file alone, nothing typed, can be sent too
    await page.locator('#attach-file').setInputFiles({ name: 'a.md', mimeType: 'text/markdown', buffer: Buffer.from('# hi') });
    await page.locator('#attachments .chip').waitFor();
    const posts1 = chatPosts.length;
    await withAnswer('ok', () => page.locator('#send').click());
    assert(chatPosts[posts1].get('message') === 'File: a.md\n```\n# hi\n```', 'file alone: ' + chatPosts[posts1].get('message'));
  });

  await test('search over titles and message text (every branch); Esc clears', async () => {
    await newChat();
    await ask('Tell me about zebras', 'Zebras have unique stripes, like a barcode.');
    const zebra = (await state()).currentId;
    const all = await page.locator('#conv-list .conv').count();
    const search = page.locator('#search');
    await search.fill('BARCODE');                         // in an answer only
    assert(await page.locator('#conv-list .conv').count() === 1, 'answer-text search: ' + await page.locator('#conv-list .conv').count());
    assert(await page.locator(`#conv-list .conv[data-id="${zebra}"]`).count() === 1, 'wrong match');
    await search.fill('zebras tell');                     // title words, any order
    assert(await page.locator('#conv-list .conv').count() === 1, 'title search');
    await search.fill('Answer A1');                       // a version not shown (branches test)
    assert(await page.locator('#conv-list .conv').count() === 1, 'hidden branch text not found');
    await search.fill('nothing-like-this');
    assert(await page.locator('#conv-list .conv').count() === 0 && await page.locator('#conv-list .conv-none').isVisible(), 'no "no match" note');
    await search.press('Escape');
    assert((await search.inputValue()) === '' && await page.locator('#conv-list .conv').count() === all, 'Esc did not clear');
  });

  await test('export JSON (all chats, branches) and Markdown (this chat); import both back; hostile files shown as text', async () => {
    const before = (await state()).conversations;
    const [dl] = await Promise.all([page.waitForEvent('download'), page.locator('#export-json').click()]);
    const json = JSON.parse(readFileSync(await dl.path(), 'utf8'));
    assert(json.format === 'smollm3-chats' && json.conversations.length === before.length, 'JSON export ' + JSON.stringify(json).slice(0, 200));
    assert(JSON.stringify(json.conversations).includes('"others"'), 'branches missing from the export');
    const [dl2] = await Promise.all([page.waitForEvent('download'), page.locator('#export-md').click()]);
    const md = readFileSync(await dl2.path(), 'utf8');
    assert(dl2.suggestedFilename().endsWith('.md') && md.startsWith('# Tell me about zebras') &&
      md.includes('### User\n\nTell me about zebras\n\n### Assistant\n\nZebras have unique stripes'), 'markdown export ' + JSON.stringify(md));
    // import the JSON back: every chat again, with new ids (the old ones are taken), branches kept
    const jpath = join(profile, 'chats.json');
    writeFileSync(jpath, JSON.stringify(json));
    await page.locator('#import-file').setInputFiles(jpath);
    await page.waitForFunction((n) => window.SmolUI.state().conversations.length === n, before.length * 2);
    const after = (await state()).conversations;
    assert(new Set(after.map((c) => c.id)).size === after.length, 'duplicate ids after import');
    const again = after.slice(before.length);
    const canon = (v) => JSON.stringify(v, (k, x) => x && typeof x === 'object' && !Array.isArray(x)
      ? Object.fromEntries(Object.keys(x).sort().map((key) => [key, x[key]])) : x);
    const a1 = canon(again.map((c) => c.messages)), a0 = canon(json.conversations.map((c) => c.messages));
    let at = 0;
    while (at < a1.length && a1[at] === a0[at]) at++;
    assert(a1 === a0, 'messages changed by the round trip, at ' + at + ': ' + a0.slice(at - 80, at + 80) + ' -> ' + a1.slice(at - 80, at + 80));
    // the Markdown back
    const mpath = join(profile, 'zebra.md');
    writeFileSync(mpath, md);
    await page.locator('#import-file').setInputFiles(mpath);
    await page.waitForFunction((n) => window.SmolUI.state().conversations.length === n, after.length + 1);
    const c = await conv();
    assert(c.title === 'Tell me about zebras' && c.messages.length === 2 && c.messages[1].content === 'Zebras have unique stripes, like a barcode.',
      'markdown import ' + JSON.stringify(c));
    // a hostile file: markup shown as text, bad entries dropped, no script
    const evil = { conversations: [{ id: 'bad id!', title: '<img src=x onerror=alert(1)>', messages: [
      { role: 'system', content: 'dropped' }, { role: 'user', content: '<script>alert(2)</script>' },
      { role: 'assistant', content: '<img src=x onerror=alert(3)> [x](javascript:alert(4))', usage: { prompt_tokens: 'x' } },
      { role: 'user', content: 5 }] }, 'junk'] };
    writeFileSync(jpath, JSON.stringify(evil));
    await page.locator('#import-file').setInputFiles(jpath);
    await page.waitForFunction(() => /Imported 1 chat/.test(document.getElementById('toast-text').textContent));
    const e = await conv();
    assert(/^[A-Za-z0-9_-]+$/.test(e.id) && e.messages.length === 2 && !e.messages[1].usage, 'hostile import kept ' + JSON.stringify(e));
    assert(await page.locator('#messages img, #messages script, #conv-list img, #messages a[href^="javascript"]').count() === 0, 'markup from a file ran');
    assert((await page.locator('#conv-title').textContent()) === '<img src=x onerror=alert(1)>', 'title not shown as text');
    writeFileSync(jpath, '{"nope": 1}');
    await page.locator('#import-file').setInputFiles(jpath);
    await page.waitForFunction(() => /Import failed: no conversations/.test(document.getElementById('toast-text').textContent));
    await page.keyboard.press('Escape');
  });

  await test('390 px (a phone, no hover): copy and regenerate shown on every answer, a tap copies; screenshots', async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await newChat();
    await ask('Quick answer', 'The **answer** is $x^2$:\n\n```js\nconst x = 2;\n```');
    await page.mouse.move(5, 5);
    const copy = last().locator('.meta .copy-msg');
    const op = await copy.evaluate((b) => getComputedStyle(b).opacity);
    const box = await copy.boundingBox();
    assert(op === '1' && box && box.height >= 28 && box.x + box.width <= 390, 'copy button not shown for touch: ' + JSON.stringify({ op, box }));
    assert(await last().locator('.meta .regen-msg').evaluate((b) => getComputedStyle(b).opacity) === '1', 'regenerate hidden');
    assert(await page.locator('#messages .msg-tools .edit-msg').last().evaluate((b) => getComputedStyle(b).opacity) === '1', 'edit hidden');
    await copy.click();
    const clip = await page.evaluate(() => navigator.clipboard.readText());
    assert(clip === 'The **answer** is $x^2$:\n\n```js\nconst x = 2;\n```', 'copied ' + JSON.stringify(clip));
    assert(await page.evaluate(() => document.documentElement.scrollWidth <= 390), 'page scrolls sideways');
    mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: join(SHOTS, 'web-features-390.png') });
    await page.locator('#sidebar-toggle').click();
    await page.locator('#search').waitFor({ state: 'visible' });
    await page.waitForFunction(() => document.getElementById('sidebar').getBoundingClientRect().x > -1);
    await page.waitForTimeout(300);
    await page.screenshot({ path: join(SHOTS, 'web-features-390-menu.png') });
    await page.keyboard.press('Escape');
    await page.setViewportSize({ width: 1280, height: 800 });
  });

  await test('screenshot at 1280 px: highlighting, math, versions, settings', async () => {
    await newChat();
    await ask('Show me everything', 'Euler: $e^{i\\pi}+1=0$, and\n\n$$\\sum_{k=1}^{n} k = \\frac{n(n+1)}{2}$$\n\n' +
      '```python\ndef tri(n):\n    """Triangle number."""\n    return n * (n + 1) // 2\n```', { prompt_tokens: 40, completion_tokens: 60 });
    await withAnswer('A second version: $\\sqrt{2}$ is irrational.\n\n```c\nint main(void) { return 0; }\n```',
      () => last().locator('.regen-msg').click(), { prompt_tokens: 40, completion_tokens: 22 });
    await last().locator('.ver-prev').click();
    await page.locator('#attach-file').setInputFiles({ name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('x') });
    await page.locator('#system-box > summary').click();
    await page.screenshot({ path: join(SHOTS, 'web-features-1280.png') });
    await page.locator('#system-box > summary').click();
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.screenshot({ path: join(SHOTS, 'web-features-1280-dark.png') });
    await page.emulateMedia({ colorScheme: 'light' });
    await page.locator('#attachments .chip-remove').click();
  });

  // API keys on (UI_KEY_URL: a gateway with --api-key-file): the daemon keeps the key's
  // conversations, so a second browser with the same key lists and continues them, and the
  // first one sees the continuation; the open site (keys off) shares nothing.
  const KEY_URL = (process.env.UI_KEY_URL || '').replace(/\/$/, '');
  const KEY = process.env.UI_API_KEY || '';
  await test('API keys on: conversations kept by the daemon for the key; a second browser lists and continues them', async () => {
    assert(KEY_URL && KEY, 'UI_KEY_URL / UI_API_KEY not set (tests/web/run.sh sets them)');
    const open = async () => {
      const dir = mkdtempSync(join(tmpdir(), 'smollm3-ui-keyed-'));
      const c = await chromium.launchPersistentContext(dir, { executablePath: CHROMIUM, headless: true,
        args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'], viewport: { width: 1280, height: 800 } });
      const p = c.pages()[0] || await c.newPage();
      p.setDefaultTimeout(STEP_TIMEOUT);
      p.on('dialog', (d) => d.accept(KEY).catch(() => {}));
      const posts = [];
      p.on('request', (r) => { if (r.method() === 'POST' && new URL(r.url()).pathname === '/ui/chat') posts.push(new URLSearchParams(r.postData() || '')); });
      await p.goto(KEY_URL + '/', { waitUntil: 'load' });
      await p.waitForFunction(() => !['—', 'offline?'].includes(document.getElementById('model-name').textContent));
      return { c, p, dir, posts };
    };
    const turn = async (p, text) => {
      const n = await p.locator('#messages .msg.assistant').count();
      await p.locator('#message').fill(text);
      await p.locator('#message').press('Enter');
      await p.waitForFunction((k) => document.querySelectorAll('#messages .msg.assistant').length === k + 1, n);
      await p.waitForFunction(() => !window.SmolUI.state().busy && !document.querySelector('#messages .msg.assistant.streaming'));
    };
    const st = (p) => p.evaluate(() => JSON.parse(JSON.stringify(window.SmolUI.state())));
    const A = await open(), B = { c: null };
    try {
      if (await A.p.locator('#think').isChecked()) await A.p.locator('label.switch').click();
      await A.p.locator('#system-box > summary').click();
      await A.p.locator('#max-tokens').fill('6');                 // a short real answer
      await A.p.locator('#system-box > summary').click();
      await turn(A.p, 'Hello from browser A');
      const sa = await st(A.p);
      const convA = sa.conversations.find((c) => c.id === sa.currentId);
      Object.assign(B, await open());
      await B.p.waitForFunction((id) => window.SmolUI.state().conversations.some((c) => c.id === id), convA.id);
      await B.p.locator(`#conv-list .conv[data-id="${convA.id}"] .conv-open`).click();
      const sb = await st(B.p);
      const got = sb.conversations.find((c) => c.id === convA.id);
      assert(JSON.stringify(got.messages.map((m) => [m.role, m.content])) === JSON.stringify(convA.messages.map((m) => [m.role, m.content])),
        'B got ' + JSON.stringify(got.messages) + ', A has ' + JSON.stringify(convA.messages));
      assert(await B.p.locator('#messages .msg.user').first().textContent() === 'Hello from browser A', 'not shown in B');
      // B continues it: its history is A's turn, on the same daemon session
      if (await B.p.locator('#think').isChecked()) await B.p.locator('label.switch').click();
      await B.p.locator('#system-box > summary').click();
      await B.p.locator('#max-tokens').fill('6');
      await B.p.locator('#system-box > summary').click();
      await turn(B.p, 'And B goes on');
      const post = B.posts[B.posts.length - 1];
      assert(post.get('conversation') === convA.id && JSON.parse(post.get('history')).length === 2, 'B sent ' + post.toString());
      // A comes back to the tab: the turn made in B is there
      await A.p.evaluate(() => document.dispatchEvent(new Event('visibilitychange')));
      await A.p.waitForFunction((id) => window.SmolUI.state().conversations.find((c) => c.id === id).messages.length === 4, convA.id);
      assert(await A.p.locator('#messages .msg.user').last().textContent() === 'And B goes on', 'A does not show B\'s turn');
    } finally {
      for (const b of [A, B]) if (b.c) { await b.c.close().catch(() => {}); rmSync(b.dir, { recursive: true, force: true }); }
    }
    // keys off (this page's site): nothing shared
    const r = await page.evaluate(() => fetch('/ui/sessions').then((x) => x.json()));
    assert(r.shared === false && r.conversations.length === 0, 'keys off shares ' + JSON.stringify(r));
  });

  await test('no dialogs and no page errors', async () => {
    assert(dialogs.length === 0, 'dialogs: ' + dialogs.join(','));
    assert(!pageErrors.length, 'page errors: ' + pageErrors.join('; '));
    assert(!cspViolations.length, 'blocked by the Content-Security-Policy: ' + cspViolations.join('; '));
  });
} finally {
  await ctx.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
}

console.log(`${passed} passed, ${failed} failed`);
if (failed) console.log('failed: ' + failures.join('; '));
process.exit(failed ? 1 : 0);
