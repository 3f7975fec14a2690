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
async function newChat() {
  const id0 = (await state()).currentId;
  await page.locator('#new-chat').click();
  await page.waitForFunction((id) => window.SmolUI.state().currentId !== id, id0).catch(() => {});
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
