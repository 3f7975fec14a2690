// Headless Chromium test of the chat UI (web/) through nginx + gateway + daemon.
//   node tests/web/ui.test.mjs URL SCREENSHOT.png
// Uses playwright-core with Debian's /usr/bin/chromium (never downloads a browser).
// Prints "N passed, N failed"; exits 1 on any failure.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';

const BASE = (process.argv[2] || process.env.UI_URL || 'http://127.0.0.1:8080').replace(/\/$/, '');
const SHOT = process.argv[3] || 'build/web-screenshot.png';
const SHOT_PHONE = SHOT.replace(/\.png$/, '') + '-390.png';          // sidebar closed
const SHOT_PHONE_MENU = SHOT.replace(/\.png$/, '') + '-390-menu.png'; // sidebar open over the chat
const SHOT_FIRST = (w) => SHOT.replace(/\.png$/, '') + `-first-${w}.png`; // first load, a long model name
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const STEP_TIMEOUT = +(process.env.UI_TEST_TIMEOUT_MS || 60000);

let passed = 0, failed = 0;
const failures = [];
async function test(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    passed++;
    console.log(`ok   - ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failed++;
    failures.push(name);
    console.log(`FAIL - ${name}: ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`);
    if (process.env.UI_TEST_DEBUG) {
      const html = await page.locator('#messages').innerHTML().catch(() => '?');
      console.log('  #messages: ' + html.slice(-1500));
      console.log('  state: ' + JSON.stringify(await page.evaluate(() => window.SmolUI.state()).catch(() => '?')).slice(0, 800));
    }
  }
}
function assert(cond, msg) { if (!cond) throw new Error(msg || 'assertion failed'); }

const profile = mkdtempSync(join(tmpdir(), 'smollm3-ui-'));
const ctx = await chromium.launchPersistentContext(profile, {
  executablePath: CHROMIUM,
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1280, height: 800 },
  colorScheme: 'light',
});
const page = ctx.pages()[0] || await ctx.newPage();
page.setDefaultTimeout(STEP_TIMEOUT);

const dialogs = [];
page.on('dialog', async (d) => { dialogs.push(d.message()); await d.dismiss().catch(() => {}); });
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(String(e)));
page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') console.log(`  [browser ${m.type()}] ${m.text()}`); });
const chatPosts = [];
page.on('request', (r) => {
  if (r.method() === 'POST' && new URL(r.url()).pathname === '/ui/chat') chatPosts.push(r.postData() || '');
});

// Instrumentation: every SSE message and every `done`, with whether the bubble was still streaming.
await page.addInitScript(() => {
  window.__sse = [];
  window.__closed = 0;
  document.addEventListener('htmx:sseMessage', (e) => {
    const b = e.target.closest && e.target.closest('.msg.assistant');
    window.__sse.push({
      type: e.detail && e.detail.type, t: performance.now(),
      sid: b && b.getAttribute('data-stream'), streaming: !!(b && b.classList.contains('streaming')),
      textLen: b ? (b.querySelector('.content').textContent.length + b.querySelector('.reasoning').textContent.length) : 0,
      mdLen: b && b.querySelector('.md') ? b.querySelector('.md').textContent.length : 0,
    });
  });
  document.addEventListener('htmx:sseClose', () => { window.__closed++; });
});

const lastAssistant = () => page.locator('#messages .msg.assistant').last();
async function waitIdle() {
  await page.waitForFunction(() => window.SmolUI && !window.SmolUI.state().busy &&
    !document.querySelector('#messages .msg.assistant.streaming'), null, { timeout: STEP_TIMEOUT });
}
async function setThink(on) {
  const cb = page.locator('#think');
  if ((await cb.isChecked()) !== on) await page.locator('label.switch').click();
  assert((await cb.isChecked()) === on, 'think switch did not toggle');
}
async function setTemperature(v) {
  await page.locator('#temperature').fill(String(v));   // range inputs accept fill()
  const shown = await page.locator('#temperature-value').textContent();
  assert(Math.abs(parseFloat(shown) - v) < 1e-6, `temperature shows ${shown}`);
}
async function sendMessage(text) {
  const box = page.locator('#message');
  await box.click();
  await box.fill(text);
  await box.press('Enter');
}
const state = () => page.evaluate(() => JSON.parse(JSON.stringify(window.SmolUI.state())));

try {
  await test('page loads with assets from node_modules and no script errors', async () => {
    const resp = await page.goto(BASE + '/', { waitUntil: 'load' });
    assert(resp && resp.ok(), `GET / -> ${resp && resp.status()}`);
    await page.waitForFunction(() => document.documentElement.classList.contains('ready'));
    const libs = await page.evaluate(() => ({
      htmx: !!window.htmx && htmx.version, marked: !!window.marked, purify: !!window.DOMPurify,
      sse: !!(window.htmx && htmx.createEventSource),
    }));
    assert(libs.htmx && String(libs.htmx).startsWith('2.'), 'htmx 2 not loaded: ' + JSON.stringify(libs));
    assert(libs.marked && libs.purify && libs.sse, 'libraries missing: ' + JSON.stringify(libs));
    assert(await page.locator('#message').evaluate((e) => e === document.activeElement), 'message box not focused');
    await page.waitForFunction(() => document.getElementById('model-name').textContent !== '—', null, { timeout: 10000 });
    assert(!pageErrors.length, 'page errors: ' + pageErrors.join('; '));
  });

  await test('1280 px: the sidebar is a column beside the chat, and no menu button (it is shown already)', async () => {
    const sb = await page.locator('#sidebar').boundingBox();
    const main = await page.locator('#main').boundingBox();
    assert(await page.locator('#sidebar').isVisible(), 'sidebar hidden at 1280 px');
    assert(sb && main && sb.x === 0 && sb.width > 200 && main.x >= sb.x + sb.width - 1,
      `sidebar ${JSON.stringify(sb)} should sit left of the chat ${JSON.stringify(main)}`);
    assert(await page.locator('#sidebar-toggle').isHidden(), 'a menu button beside a sidebar already shown');
    assert(await page.locator('#scrim').isHidden(), 'scrim shown on a wide screen');
  });

  // A fresh page with the model name `make run` serves by default (SmolLM2's, long): the
  // message box's placeholder is never cut off -- one line, its text all inside the box --
  // at a phone's width and a desktop's; the desktop's names the model.  /ui/config is the
  // live one with only the name replaced.
  await test('first load with a long model name: the placeholder fits at 390 and 1280 px; the menu button only on the phone', async () => {
    const NAME = 'SmolLM2-135M-Instruct.Q4_1';
    await page.route('**/ui/config', async (route) => {
      const r = await route.fetch();
      await route.fulfill({ response: r, json: Object.assign(await r.json(), { model: NAME }) });
    });
    try {
      for (const [w, h] of [[390, 844], [1280, 800]]) {
        await page.setViewportSize({ width: w, height: h });
        await page.goto(BASE + '/', { waitUntil: 'load' });
        await page.waitForFunction((n) => document.getElementById('model-name').textContent === n, NAME);
        await page.locator('#message').fill('');
        const m = await page.locator('#message').evaluate((t) => {
          const cs = getComputedStyle(t);
          return { ph: t.placeholder, sh: t.scrollHeight, ch: t.clientHeight, lh: parseFloat(cs.lineHeight),
            pad: parseFloat(cs.paddingTop) + parseFloat(cs.paddingBottom) };
        });
        assert(m.sh <= m.ch + 1, `${w} px: the placeholder is cut off: ${JSON.stringify(m)}`);
        assert(m.ch - m.pad < 1.5 * m.lh, `${w} px: the empty box is more than one line: ${JSON.stringify(m)}`);
        assert(m.ph === 'Message ' + NAME + '\u2026' || (w < 768 && m.ph === 'Message\u2026'),
          `${w} px: placeholder ${JSON.stringify(m.ph)}`);
        if (w >= 768) assert(m.ph.includes(NAME), 'the model is not named where it fits: ' + m.ph);
        assert(await page.locator('#sidebar-toggle').isVisible() === (w < 768),
          `${w} px: the menu button should be ${w < 768 ? 'shown' : 'hidden'}`);
        mkdirSync(dirname(SHOT), { recursive: true });
        await page.screenshot({ path: SHOT_FIRST(w) });
      }
    } finally {
      await page.unroute('**/ui/config');
    }
    await page.goto(BASE + '/', { waitUntil: 'load' });
    await page.waitForFunction(() => document.documentElement.classList.contains('ready'));
  });

  const xssUser = 'Hi <img src=x onerror=alert(1)> & <script>alert(2)</script>';
  await test('chat one turn: streamed tokens appear before done; user text escaped', async () => {
    await setThink(false);
    await setTemperature(0.8);
    await sendMessage(xssUser);
    await page.locator('#messages .msg.assistant').first().waitFor();
    await waitIdle();
    const ev = await page.evaluate(() => window.__sse);
    const early = ev.filter((e) => (e.type === 'content' || e.type === 'reasoning') && e.streaming && e.textLen > 0);
    assert(early.length >= 2, `expected streamed deltas before done, got ${early.length} (events ${ev.length})`);
    const user = page.locator('#messages .msg.user').first();
    assert((await user.textContent()) === xssUser, 'user message not shown verbatim: ' + await user.textContent());
    assert((await page.locator('#messages img, #messages script').count()) === 0, 'an <img>/<script> element was created');
    const a = lastAssistant();
    assert(((await a.locator('.md').textContent()) || '').trim().length > 0, 'assistant answer is empty');
    assert(!(await a.getAttribute('sse-connect')), 'stream still attached after done');
    assert((await page.locator('#message').inputValue()) === '', 'message box not cleared');
    const s = await state();
    const conv = s.conversations.find((c) => c.id === s.currentId);
    assert(conv.messages.length === 2 && conv.messages[1].role === 'assistant', 'turn not stored');
    assert(conv.title.startsWith('Hi <img'), 'title not taken from first message: ' + conv.title);
    assert(dialogs.length === 0, 'a dialog fired: ' + dialogs.join(','));
  });

  await test('second turn sends history (user + assistant content, no reasoning)', async () => {
    await sendMessage('And a follow-up?');
    await page.waitForFunction(() => document.querySelectorAll('#messages .msg.assistant').length === 2);
    await waitIdle();
    const body = new URLSearchParams(chatPosts[chatPosts.length - 1]);
    const hist = JSON.parse(body.get('history'));
    assert(Array.isArray(hist) && hist.length === 2, 'history length ' + (hist && hist.length));
    assert(hist[0].role === 'user' && hist[0].content === xssUser, 'history[0] wrong');
    assert(hist[1].role === 'assistant' && typeof hist[1].content === 'string' && !('reasoning' in hist[1]), 'history[1] wrong');
    assert(body.get('message') === 'And a follow-up?', 'message field wrong');
    assert(body.get('think') === '0', 'think should be 0, got ' + body.get('think'));
    assert(body.get('temperature') === '0.80', 'temperature field ' + body.get('temperature'));
    assert(/^[A-Za-z0-9_-]{1,64}$/.test(body.get('conversation') || ''), 'conversation id');
  });

  let firstId, stopId, thirdId;
  await test('stop a generation mid-stream (Stop button); the stream closes', async () => {
    // a fresh conversation: the fixture model's random answers are long, and two
    // full ones as history would not fit its 4096-token context
    firstId = (await state()).currentId;
    await page.locator('#new-chat').click();
    await page.waitForFunction((id) => window.SmolUI.state().currentId !== id, firstId);
    stopId = (await state()).currentId;
    await setThink(true);
    await setTemperature(2);
    const n0 = (await page.evaluate(() => window.__sse.length));
    const closed0 = await page.evaluate(() => window.__closed);
    await sendMessage('Write a very long story about a lighthouse keeper, with many chapters.');
    await page.waitForFunction((n) => window.__sse.length >= n + 4, n0);
    assert(await page.locator('#stop').isVisible(), 'stop button not visible while streaming');
    await page.locator('#stop').click();
    await waitIdle();
    const s = await state();
    const conv = s.conversations.find((c) => c.id === s.currentId);
    const last = conv.messages[conv.messages.length - 1];
    assert(last.role === 'assistant' && last.finish === 'cancelled', 'finish_reason ' + last.finish);
    assert(/stopped/.test(await lastAssistant().locator('.meta').textContent()), 'no "stopped" note');
    const sid = await lastAssistant().getAttribute('data-stream');
    const nAfter = await page.evaluate((sid) => window.__sse.filter((e) => e.sid === sid).length, sid);
    await page.waitForTimeout(600);
    const nLater = await page.evaluate((sid) => window.__sse.filter((e) => e.sid === sid).length, sid);
    assert(nLater === nAfter, 'events kept arriving after stop');
    assert((await page.evaluate(() => window.__closed)) > closed0, 'EventSource not closed');
    assert(await page.locator('#send').isVisible(), 'send button not back');
    // thinking is shown apart from the answer, in a collapsible block
    const det = lastAssistant().locator('details.thinking');
    if (await det.isVisible()) assert(((await det.locator('.reasoning').textContent()) || '').length > 0, 'empty thinking block');
  });

  await test('Esc stops a generation', async () => {
    const n0 = await page.evaluate(() => window.__sse.length);
    await sendMessage('Another long story please, in great detail.');
    await page.waitForFunction((n) => window.__sse.length >= n + 3, n0);
    await page.keyboard.press('Escape');
    await waitIdle();
    const s = await state();
    const conv = s.conversations.find((c) => c.id === s.currentId);
    assert(conv.messages[conv.messages.length - 1].finish === 'cancelled', 'not cancelled');
  });

  await test('new conversation (Ctrl+Shift+O), switch back, reload keeps all', async () => {
    await setThink(false);
    await setTemperature(0.6);
    await page.locator(`#conv-list .conv[data-id="${firstId}"] .conv-open`).click();
    assert((await state()).currentId === firstId, 'did not switch to the first conversation');
    const firstCount = await page.locator('#messages .msg').count();
    await page.keyboard.press('Control+Shift+O');
    await page.waitForFunction((id) => window.SmolUI.state().currentId !== id, firstId);
    assert((await page.locator('#messages .msg').count()) === 0, 'new chat not empty');
    assert(await page.locator('#message').evaluate((e) => e === document.activeElement), 'focus not in message box');
    await sendMessage('Second conversation here');
    await page.locator('#messages .msg.assistant').first().waitFor();
    await waitIdle();
    const secondId = (await state()).currentId;
    assert((await page.locator('#conv-list .conv').count()) === 3, 'expected 3 conversations in the list');
    await page.locator(`#conv-list .conv[data-id="${firstId}"] .conv-open`).click();
    assert((await state()).currentId === firstId, 'did not switch back');
    assert((await page.locator('#messages .msg').count()) === firstCount, 'messages of the first conversation not restored');
    assert((await page.locator('#messages .msg.user').first().textContent()) === xssUser, 'first user message changed');
    await page.reload({ waitUntil: 'load' });
    await page.waitForFunction(() => document.documentElement.classList.contains('ready'));
    assert((await page.locator('#conv-list .conv').count()) === 3, 'conversations lost on reload');
    assert((await state()).currentId === firstId, 'current conversation lost on reload');
    assert((await page.locator('#messages .msg').count()) === firstCount, 'messages lost on reload');
    assert((await page.locator('#messages img, #messages script').count()) === 0, 'markup injected on reload');
    assert(await page.locator(`#conv-list .conv[data-id="${secondId}"]`).count() === 1, 'second conversation missing');
    thirdId = secondId;
  });

  await test('rename (survives reload) and delete (with undo)', async () => {
    const li = page.locator(`#conv-list .conv[data-id="${firstId}"]`);
    await li.hover();
    await li.locator('.rename').click();
    const input = li.locator('input.conv-rename');
    await input.fill('Lighthouse stories');
    await input.press('Enter');
    assert((await li.locator('.conv-open').textContent()) === 'Lighthouse stories', 'not renamed');
    assert((await page.locator('#conv-title').textContent()) === 'Lighthouse stories', 'header title not updated');
    await page.reload({ waitUntil: 'load' });
    await page.waitForFunction(() => document.documentElement.classList.contains('ready'));
    assert((await page.locator(`#conv-list .conv[data-id="${firstId}"] .conv-open`).textContent()) === 'Lighthouse stories', 'rename lost on reload');
    // delete the conversation made by Ctrl+Shift+O
    const row = page.locator(`#conv-list .conv[data-id="${thirdId}"]`);
    await row.hover();
    await row.locator('.delete').click();
    assert((await page.locator('#conv-list .conv').count()) === 2, 'not deleted');
    assert(await page.locator('#toast').isVisible(), 'no undo toast');
    await page.locator('#toast-undo').click();
    assert((await page.locator('#conv-list .conv').count()) === 3, 'undo did not restore');
    await row.hover();
    await row.locator('.delete').click();
    assert((await page.locator('#conv-list .conv').count()) === 2, 'not deleted (2nd time)');
    const stored = await page.evaluate(() => JSON.parse(localStorage.getItem('smollm3.conversations.v1')).map((c) => c.id));
    assert(stored.length === 2 && !stored.includes(thirdId), 'storage not updated: ' + stored);
  });

  await test('regenerate the last answer', async () => {
    await page.locator(`#conv-list .conv[data-id="${stopId}"] .conv-open`).click();
    const before = await page.locator('#messages .msg').count();
    const posts0 = chatPosts.length;
    const n0 = await page.evaluate(() => window.__sse.length);
    await page.locator('#regenerate').click();
    await page.waitForFunction((n) => window.__sse.length > n, n0);
    await waitIdle();
    assert(chatPosts.length === posts0 + 1, 'no new POST');
    const body = new URLSearchParams(chatPosts[chatPosts.length - 1]);
    assert(body.get('message') === 'Another long story please, in great detail.', 'regenerated the wrong message: ' + body.get('message'));
    assert(JSON.parse(body.get('history')).length === 2, 'history for regenerate should hold the earlier turn only');
    assert((await page.locator('#messages .msg').count()) === before, 'message count changed');
    const s = await state();
    const conv = s.conversations.find((c) => c.id === s.currentId);
    assert(conv.messages.length === before && conv.messages[before - 1].role === 'assistant', 'store not updated');
  });

  await test('XSS: markdown render of malicious model text shows it as text, nothing executes', async () => {
    const evil = 'Look: <img src=x onerror=alert(1)> and <script>alert(2)</script>\n\n' +
      '<a href="javascript:alert(3)">click</a> [link](javascript:alert(4)) <svg onload=alert(5)>\n\n' +
      '```html\n<img src=x onerror=alert(6)>\n```\n\n**bold** `<b>code</b>`';
    const out = await page.evaluate((evil) => {
      const html = window.SmolUI.renderMarkdown(evil);
      const div = document.createElement('div');
      div.className = 'md';
      div.innerHTML = html;
      document.getElementById('messages').appendChild(div);
      return {
        html, text: div.textContent,
        dangerous: div.querySelectorAll('img, script, svg, iframe, [onerror], [onload], a[href^="javascript"]').length,
        strong: div.querySelectorAll('strong').length, pre: div.querySelectorAll('pre code').length,
      };
    }, evil);
    await page.waitForTimeout(500);
    assert(out.dangerous === 0, 'dangerous elements created: ' + out.html);
    assert(out.text.includes('<img src=x onerror=alert(1)>'), 'payload not shown as text: ' + out.text);
    assert(out.text.includes('<script>alert(2)</script>'), 'script not shown as text');
    assert(out.strong === 1 && out.pre === 1, 'markdown not rendered: ' + out.html);
    assert(!/javascript:/i.test(out.html.replace(/&[a-z]+;|&#\d+;/g, '').replace(/[^\x20-\x7e]/g, '').replace(/>[^<]*</g, '><')),
      'javascript: URL survived in an attribute: ' + out.html);
    assert(dialogs.length === 0, 'a dialog fired: ' + dialogs.join(','));
    await page.evaluate(() => document.querySelectorAll('#messages > div.md').forEach((d) => d.remove()));
  });

  await test('model text with CRs (CRLF, a lone CR) is shown and stored byte for byte', async () => {
    // The stream as the gateway writes it for such text (gateway/util.c: gw_buf_html writes a CR as
    // &#13;, gw_buf_sse_event gives each line its own data: line; test_gateway.py fake_ui_cr checks
    // the gateway's own bytes are these), served for this turn's stream: the bubble's text, and
    // the answer stored, must be the model's text with every CR where it was.
    const reasoning = ['think\r\nhard\r', '\n'];
    const content = ['a\r\nb', '\r', 'c\rd', '\r\r', 'x\r\revent: done\rdata: {}\r\r', 'e\r', '\nf & <g>\r\n', 'tail'];
    const html = (t) => t.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
      .replace(/"/g, '&quot;').replace(/'/g, '&#39;').replace(/\r/g, '&#13;');
    const ev = (name, data) => `event: ${name}\n` + data.split(/\r\n|\r|\n/).map((l) => 'data: ' + l + '\n').join('') + '\n';
    const body = reasoning.map((t) => ev('reasoning', html(t))).join('') + content.map((t) => ev('content', html(t))).join('') +
      ev('done', JSON.stringify({ finish_reason: 'stop', usage: { prompt_tokens: 3, completion_tokens: 10,
        total_tokens: 13, cached_tokens: 0, reasoning_tokens: 2 } }));
    let served = 0;
    await page.route('**/ui/stream/*', (route) => {
      served++;
      return route.fulfill({ status: 200, headers: { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' }, body });
    });
    try {
      const id0 = (await state()).currentId;
      await page.locator('#new-chat').click();
      await page.waitForFunction((id) => window.SmolUI.state().currentId !== id, id0);
      await sendMessage('Text with carriage returns, please.');
      await page.waitForFunction(() => {
        const s = window.SmolUI.state();
        const c = s.conversations.find((x) => x.id === s.currentId);
        return c && c.messages.length === 2;
      });
      await waitIdle();
      assert(served === 1, `stream served ${served} times`);
      const s = await state();
      const m = s.conversations.find((c) => c.id === s.currentId).messages[1];
      const want = content.join(''), wantR = reasoning.join('');
      assert(m.role === 'assistant' && m.finish === 'stop', 'answer ' + JSON.stringify(m));
      assert(m.content === want, `content ${JSON.stringify(m.content)}, sent ${JSON.stringify(want)}`);
      assert(m.reasoning === wantR, `reasoning ${JSON.stringify(m.reasoning)}, sent ${JSON.stringify(wantR)}`);
      const shown = await lastAssistant().locator('.content').evaluate((e) => e.textContent);
      assert(shown === want, 'bubble text ' + JSON.stringify(shown));
      const stored = await page.evaluate(() => JSON.parse(localStorage.getItem('smollm3.conversations.v1')));
      const sm = stored.find((c) => c.id === s.currentId).messages[1];
      assert(sm.content === want && sm.reasoning === wantR, 'localStorage ' + JSON.stringify(sm));
    } finally {
      await page.unroute('**/ui/stream/*');
    }
  });

  await test('no dialogs and no page errors overall; screenshot', async () => {
    assert(dialogs.length === 0, 'dialogs: ' + dialogs.join(','));
    assert(!pageErrors.length, 'page errors: ' + pageErrors.join('; '));
    // a final turn with thinking on, so the screenshot shows the thinking block
    await setThink(true);
    await setTemperature(0.6);
    const n0 = await page.evaluate(() => window.__sse.length);
    await sendMessage('Summarize our chat in **markdown**, please.');
    await page.waitForFunction((n) => window.__sse.length >= n + 12, n0);
    await page.keyboard.press('Escape');
    await waitIdle();
    await page.evaluate(() => { const d = document.querySelector('#messages .msg.assistant:last-of-type details.thinking'); if (d) d.open = true; });
    await page.locator('#message').fill('Ask me anything…');
    mkdirSync(dirname(SHOT), { recursive: true });
    await page.screenshot({ path: SHOT });
    await page.locator('#message').fill('');
  });
  await test('390 px (a phone): chat usable, sidebar closed until the menu button, then over the chat, and closes', async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(BASE + '/', { waitUntil: 'load' });
    await page.waitForFunction(() => document.documentElement.classList.contains('ready'));
    const sidebar = page.locator('#sidebar'), toggle = page.locator('#sidebar-toggle');
    assert(await sidebar.isHidden(), 'sidebar visible at 390 px before the menu button');
    assert(await toggle.getAttribute('aria-expanded') === 'false', 'aria-expanded should be false');
    // the chat has the whole width and its input is on screen and on top
    const main = await page.locator('#main').boundingBox();
    assert(main.x < 1 && main.width > 385, 'chat not full width: ' + JSON.stringify(main));
    const box = await page.locator('#message').boundingBox();
    assert(box && box.x >= 0 && box.x + box.width <= 390 && box.y + box.height <= 844 && box.width > 150,
      'message box off screen or too small: ' + JSON.stringify(box));
    const onTop = await page.evaluate(() => {
      const r = document.getElementById('message').getBoundingClientRect();
      return document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2) === document.getElementById('message');
    });
    assert(onTop, 'the message box is covered');
    assert(await page.evaluate(() => document.documentElement.scrollWidth <= 390), 'page scrolls sideways');
    mkdirSync(dirname(SHOT_PHONE), { recursive: true });
    await page.screenshot({ path: SHOT_PHONE });
    // a turn on the phone
    const n0 = await page.locator('#messages .msg.assistant').count();
    await sendMessage('Hello from a phone');
    await page.waitForFunction((n) => document.querySelectorAll('#messages .msg.assistant').length === n + 1, n0);
    await waitIdle();
    const a = await lastAssistant().boundingBox();
    assert(a && a.x >= 0 && a.x + a.width <= 390, 'answer overflows the screen: ' + JSON.stringify(a));
    // the menu button opens the list OVER the chat (the chat keeps its width), with a scrim
    await toggle.click();
    await sidebar.waitFor({ state: 'visible' });
    await page.waitForFunction(() => document.getElementById('sidebar').getBoundingClientRect().x > -1);
    const sb = await sidebar.boundingBox();
    const main2 = await page.locator('#main').boundingBox();
    assert(sb.x > -1 && sb.width <= 390 * 0.85 + 1 && sb.width > 200, 'sidebar geometry: ' + JSON.stringify(sb));
    assert(main2.x < 1 && main2.width > 385, 'the chat moved instead of being overlaid: ' + JSON.stringify(main2));
    assert(await toggle.getAttribute('aria-expanded') === 'true', 'aria-expanded should be true');
    assert(await page.locator('#scrim').isVisible(), 'no scrim behind the open sidebar');
    const over = await page.evaluate(() => {
      const r = document.getElementById('sidebar').getBoundingClientRect();
      return document.getElementById('sidebar').contains(document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2));
    });
    assert(over, 'the sidebar is not on top of the chat');
    await page.screenshot({ path: SHOT_PHONE_MENU });
    // closes: on the scrim, with Esc, and when a conversation is picked
    await page.mouse.click(380, 400);
    await sidebar.waitFor({ state: 'hidden' });
    assert(await toggle.getAttribute('aria-expanded') === 'false', 'scrim: aria-expanded should be false');
    await toggle.click();
    await sidebar.waitFor({ state: 'visible' });
    await page.keyboard.press('Escape');
    await sidebar.waitFor({ state: 'hidden' });
    await toggle.click();
    await sidebar.waitFor({ state: 'visible' });
    await page.locator('#conv-list .conv-open').first().click();
    await sidebar.waitFor({ state: 'hidden' });
    assert(await page.locator('#scrim').isHidden(), 'scrim left behind');
    // back to a wide window: the sidebar is a column again
    await page.setViewportSize({ width: 1280, height: 800 });
    await sidebar.waitFor({ state: 'visible' });
    assert(!pageErrors.length, 'page errors: ' + pageErrors.join('; '));
  });

  // A gateway with --api-key-file (UI_KEY_URL, through nginx): a fresh browser
  // profile (nothing stored) must be asked for the key once, keep it, chat.
  const KEY_URL = (process.env.UI_KEY_URL || '').replace(/\/$/, '');
  const KEY = process.env.UI_API_KEY || '';
  await test('API key: asked once on the 401, stored, sent, then a chat succeeds; a wrong stored key is asked again', async () => {
    assert(KEY_URL && KEY, 'UI_KEY_URL / UI_API_KEY not set (tests/web/run.sh sets them)');
    const kprofile = mkdtempSync(join(tmpdir(), 'smollm3-ui-key-'));
    const kctx = await chromium.launchPersistentContext(kprofile, {
      executablePath: CHROMIUM, headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync'],
      viewport: { width: 1280, height: 800 },
    });
    try {
      const kp = kctx.pages()[0] || await kctx.newPage();
      kp.setDefaultTimeout(STEP_TIMEOUT);
      let answer = KEY;
      const asked = [];
      kp.on('dialog', async (d) => { asked.push(d.type() + ': ' + d.message()); await d.accept(answer).catch(() => {}); });
      const errs = [];
      kp.on('pageerror', (e) => errs.push(String(e)));
      const statuses = [];   // [path, status, Authorization sent], as responses arrive
      kp.on('response', (r) => {
        const u = new URL(r.url());
        if (u.pathname.startsWith('/ui/')) statuses.push([u.pathname, r.status(), r.request().headers().authorization || '']);
      });
      // the response events come on their own: wait (bounded) for the one a check needs
      const seen = async (pred, what) => {
        for (let t = 0; t < 100 && !statuses.some(pred); t++) await kp.waitForTimeout(100);
        assert(statuses.some(pred), what + ': ' + JSON.stringify(statuses));
      };
      await kp.goto(KEY_URL + '/', { waitUntil: 'load' });
      await kp.waitForFunction(() => !['—', 'offline?'].includes(document.getElementById('model-name').textContent), null, { timeout: 20000 });
      assert(asked.length === 1 && asked[0].startsWith('prompt: '), 'asked ' + JSON.stringify(asked));
      await seen(([p, st, a]) => p === '/ui/config' && st === 401 && !a, 'no 401 without a key');
      await seen(([p, st, a]) => p === '/ui/config' && st === 200 && a === 'Bearer ' + KEY, 'config not fetched again with the key');
      assert(await kp.evaluate(() => localStorage.getItem('smollm3.apiKey.v1')) === KEY, 'key not stored');
      // a chat turn (thinking off: short): POST /ui/chat carries the key, the stream (SID) needs none
      if (await kp.locator('#think').isChecked()) await kp.locator('label.switch').click();
      const box = kp.locator('#message');
      await box.click();
      await box.fill('Hello with a key');
      await box.press('Enter');
      await kp.locator('#messages .msg.assistant').first().waitFor();
      await kp.waitForFunction(() => window.SmolUI && !window.SmolUI.state().busy &&
        !document.querySelector('#messages .msg.assistant.streaming'), null, { timeout: STEP_TIMEOUT });
      const a = kp.locator('#messages .msg.assistant').last();
      const text = (await a.locator('.content').textContent()) + (await a.locator('.reasoning').textContent());
      assert(text.trim().length > 0, 'empty answer');
      assert(await kp.locator('#messages .msg.error').count() === 0, 'an error bubble: ' +
        await kp.locator('#messages .msg.error').first().textContent().catch(() => ''));
      await seen(([p, st, k]) => p === '/ui/chat' && st === 200 && k === 'Bearer ' + KEY, 'POST /ui/chat not 200 with the key');
      await seen(([p, st]) => p.startsWith('/ui/stream/') && st === 200, 'no stream');
      // reload: the stored key is used, no question
      await kp.reload({ waitUntil: 'load' });
      await kp.waitForFunction(() => !['—', 'offline?'].includes(document.getElementById('model-name').textContent), null, { timeout: 20000 });
      assert(asked.length === 1, 'asked again after a reload: ' + JSON.stringify(asked));
      // a wrong stored key (revoked): asked once more, the new answer stored
      await kp.evaluate(() => localStorage.setItem('smollm3.apiKey.v1', 'sk-revoked'));
      statuses.length = 0;
      await kp.reload({ waitUntil: 'load' });
      await kp.waitForFunction(() => !['—', 'offline?'].includes(document.getElementById('model-name').textContent), null, { timeout: 20000 });
      assert(asked.length === 2, 'a wrong key was not asked for again: ' + JSON.stringify(asked));
      await seen(([p, st, k]) => p === '/ui/config' && st === 401 && k === 'Bearer sk-revoked', 'the revoked key was not refused');
      assert(await kp.evaluate(() => localStorage.getItem('smollm3.apiKey.v1')) === KEY, 'new key not stored');
      assert(!errs.length, 'page errors: ' + errs.join('; '));
    } finally {
      await kctx.close().catch(() => {});
      rmSync(kprofile, { recursive: true, force: true });
    }
  });
} finally {
  await ctx.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
}

console.log(`${passed} passed, ${failed} failed`);
if (failed) console.log('failed: ' + failures.join('; '));
process.exit(failed ? 1 : 0);
