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
page.on('console', (m) => { if (m.type() === 'error') console.log(`  [browser error] ${m.text()}`); });
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
  await page.locator('#new-chat').click();
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

  await test('no dialogs and no page errors', async () => {
    assert(dialogs.length === 0, 'dialogs: ' + dialogs.join(','));
    assert(!pageErrors.length, 'page errors: ' + pageErrors.join('; '));
  });
} finally {
  await ctx.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
}

console.log(`${passed} passed, ${failed} failed`);
if (failed) console.log('failed: ' + failures.join('; '));
process.exit(failed ? 1 : 0);
