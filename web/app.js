/* SmolLM3 chat UI — no build step.  Talks to the gateway per gateway/UI_API.md:
 * POST /ui/chat (HTMX form) returns a fragment whose assistant bubble opens an
 * SSE stream (htmx-ext-sse) with named events reasoning/content/done/error.
 * Conversations live in localStorage; each POST carries the conversation's
 * earlier turns as `history` (user + assistant content, never the reasoning).
 *
 * Security: model output is never executed.  Streaming deltas arrive
 * HTML-escaped from the gateway (inserted by htmx as text); the markdown view is
 * marked output with raw HTML escaped, then sanitized by DOMPurify. */
(function () {
  'use strict';

  var LS_CONVS = 'smollm3.conversations.v1';
  var LS_CURRENT = 'smollm3.current.v1';
  var LS_SETTINGS = 'smollm3.settings.v1';
  var LS_API_KEY = 'smollm3.apiKey.v1';   // set when the gateway answered 401 (--api-key-file)
  var STOP_GRACE_MS = 4000;

  function $(sel, root) { return (root || document).querySelector(sel); }
  function $all(sel, root) { return Array.prototype.slice.call((root || document).querySelectorAll(sel)); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  }

  /* ------------------------------------------------------------ markdown */

  // markdown.js: marked + highlight.js + KaTeX, every output through DOMPurify
  var escapeHtml = window.SmolMarkdown.escapeHtml;
  var setupMarkdown = window.SmolMarkdown.setup;
  var renderMarkdown = window.SmolMarkdown.render;
  var setMarkdown = window.SmolMarkdown.set;

  /* ------------------------------------------------------------- storage */

  function loadJSON(key, fallback) {
    try {
      var v = JSON.parse(localStorage.getItem(key));
      return v == null ? fallback : v;
    } catch (e) { return fallback; }
  }
  function saveJSON(key, value) {
    try { localStorage.setItem(key, JSON.stringify(value)); return true; } catch (e) {
      announce('Could not save to browser storage (full?)');
      return false;
    }
  }

  var convs = [];
  function loadConvs() {
    var v = loadJSON(LS_CONVS, []);
    convs = Array.isArray(v) ? v.filter(function (c) {
      return c && typeof c.id === 'string' && /^[A-Za-z0-9_-]{1,64}$/.test(c.id) && Array.isArray(c.messages);
    }) : [];
  }
  function saveConvs() { saveJSON(LS_CONVS, convs); }

  function newId() {
    var r = '';
    if (window.crypto && crypto.getRandomValues) {
      var a = new Uint8Array(9);
      crypto.getRandomValues(a);
      for (var i = 0; i < a.length; i++) r += ('0' + a[i].toString(16)).slice(-2);
    } else {
      r = Math.random().toString(36).slice(2, 14);
    }
    return 'c' + Date.now().toString(36) + r;
  }

  function findConv(id) {
    for (var i = 0; i < convs.length; i++) if (convs[i].id === id) return convs[i];
    return null;
  }

  var currentId = null;
  function current() { return findConv(currentId); }

  function createConv() {
    var c = { id: newId(), title: 'New chat', titleSet: false, created: Date.now(), updated: Date.now(), messages: [],
      settings: convSettings(null) };
    convs.push(c);
    saveConvs();
    return c;
  }

  /** Earlier turns for the `history` field: complete user/assistant pairs only,
   *  assistant content without reasoning. */
  function historyOf(conv) {
    var out = [];
    var msgs = conv ? conv.messages : [];
    for (var i = 0; i < msgs.length; i++) {
      var m = msgs[i];
      if (m.role !== 'user') continue;
      var a = msgs[i + 1];
      if (!a || a.role !== 'assistant' || !a.content || !a.content.trim()) continue;
      out.push({ role: 'user', content: m.content });
      out.push({ role: 'assistant', content: a.content });
      i++;
    }
    return out;
  }

  function titleFrom(text) {
    var t = String(text).replace(/\s+/g, ' ').trim();
    return t.length > 48 ? t.slice(0, 47) + '…' : (t || 'New chat');
  }

  /* ------------------------------------------------------------ branches */

  /* A conversation's `messages` is the path shown (what `history` is built from).
   * Editing message i or regenerating answer i keeps what was there: the old tail
   * messages[i..] becomes another *version* of slot i.  The first message of the
   * shown tail holds the others: `others` (an array of tails, each an array of
   * messages in this same format, so branches nest) and `ver` (its own place among
   * all of them).  Until the new tail has its first message (the POST is on its
   * way) the old versions wait in `conv.fork` = {at, others, prev}; a request that
   * fails before anything arrived puts the previous version back. */
  function versionsAt(c, i) {
    var m = c && c.messages[i];
    if (!m || !m.others || !m.others.length) return null;
    return { n: m.others.length + 1, cur: m.ver || 0 };
  }

  /** Moves messages[i..] aside as a version of slot i; the next message pushed starts a new one. */
  function fork(c, i) {
    var m = c.messages[i];
    if (!m) return;
    var others = m.others || [], cur = m.ver || 0;
    delete m.others;
    delete m.ver;
    var tail = c.messages.splice(i);
    others.splice(cur, 0, tail);
    c.fork = { at: i, others: others, prev: cur };
    saveConvs();
  }

  /** After a push: the new tail's first message takes the waiting versions. */
  function attachFork(c) {
    var f = c && c.fork;
    if (!f || c.messages.length <= f.at) return;
    var m = c.messages[f.at];
    m.others = f.others;
    m.ver = f.others.length;
    delete c.fork;
  }

  /** The request that was to start a new version failed before anything arrived: put the old one back. */
  function abandonFork(c) {
    var f = c && c.fork;
    if (!f || c.messages.length > f.at) return;
    delete c.fork;
    var tail = f.others.splice(f.prev, 1)[0] || [];
    if (tail[0] && f.others.length) { tail[0].others = f.others; tail[0].ver = f.prev; }
    Array.prototype.push.apply(c.messages, tail);
    saveConvs();
  }

  /** Shows version b (0-based) of slot i. */
  function switchVersion(c, i, b) {
    var m = c.messages[i], v = versionsAt(c, i);
    if (!v || b < 0 || b >= v.n || b === v.cur) return;
    var all = m.others;
    delete m.others;
    delete m.ver;
    all.splice(v.cur, 0, c.messages.splice(i));
    var tail = all.splice(b, 1)[0];
    tail[0].others = all;
    tail[0].ver = b;
    Array.prototype.push.apply(c.messages, tail);
    c.updated = Date.now();
    saveConvs();
  }

  /* ------------------------------------------------------------ settings */

  /* Settings are per conversation (conv.settings); `settings` holds the last ones
   * chosen, which a new conversation starts from.  null: the server's default. */
  var settings = { think: true, temperature: null, system: '', top_p: null, max_tokens: null };
  var SETTING_KEYS = ['think', 'temperature', 'system', 'top_p', 'max_tokens'];
  function validSetting(k, v) {
    if (k === 'think') return typeof v === 'boolean';
    if (k === 'system') return typeof v === 'string';
    if (v === null) return true;
    if (typeof v !== 'number' || !isFinite(v)) return false;
    if (k === 'temperature') return v >= 0 && v <= 2;
    if (k === 'top_p') return v > 0 && v <= 1;
    return k === 'max_tokens' && v >= 1 && v <= 1000000 && v === Math.floor(v);
  }
  /** The settings conversation c runs with. */
  function convSettings(c) {
    var out = {};
    SETTING_KEYS.forEach(function (k) {
      var own = c && c.settings && validSetting(k, c.settings[k]) && Object.prototype.hasOwnProperty.call(c.settings, k);
      out[k] = own ? c.settings[k] : settings[k];
    });
    return out;
  }
  /** Sets one for the current conversation (and as the default of new ones). */
  function setSetting(k, v) {
    if (!validSetting(k, v)) return;
    settings[k] = v;
    saveSettings();
    var c = current();
    if (c) { c.settings = c.settings || {}; c.settings[k] = v; saveConvs(); }
  }
  var serverConfig = { model: '', thinking_supported: true, default_temperature: 0.6, context_length: 0 };

  /* API key: asked once, when the gateway answers 401, kept in localStorage
   * and sent as `Authorization: Bearer` on every /ui/ request afterwards
   * (the SSE stream needs none: its id was issued to an authorised POST). */
  function apiKey() {
    try { return localStorage.getItem(LS_API_KEY) || ''; } catch (e) { return ''; }
  }
  function withKey(headers) {
    var k = apiKey();
    if (k) headers.Authorization = 'Bearer ' + k;
    return headers;
  }
  var askedKey = false;
  function askKey() {
    if (askedKey) return false;           // once per page load: no prompt loops
    askedKey = true;
    var k = window.prompt('This server needs an API key:', '');
    k = (k || '').trim();
    try {
      if (k) localStorage.setItem(LS_API_KEY, k);
      else localStorage.removeItem(LS_API_KEY);
    } catch (e) { /* ignore */ }
    return !!k;
  }

  function loadSettings() {
    var s = loadJSON(LS_SETTINGS, {});
    if (s && typeof s === 'object') {
      if (typeof s.think === 'boolean') settings.think = s.think;
      if (typeof s.temperature === 'number' && s.temperature >= 0 && s.temperature <= 2) settings.temperature = s.temperature;
      if (typeof s.system === 'string') settings.system = s.system;
      if (validSetting('top_p', s.top_p)) settings.top_p = s.top_p;
      if (validSetting('max_tokens', s.max_tokens)) settings.max_tokens = s.max_tokens;
    }
  }
  function saveSettings() { saveJSON(LS_SETTINGS, settings); }

  function temperature(c) {
    var t = convSettings(c || current()).temperature;
    if (t == null) t = serverConfig.default_temperature;
    if (typeof t !== 'number' || !(t >= 0 && t <= 2)) t = 0.6;
    return t;
  }

  function applySettingsToControls() {
    var cs = convSettings(current());
    var think = $('#think');
    think.checked = cs.think && serverConfig.thinking_supported !== false;
    think.disabled = serverConfig.thinking_supported === false;
    /* a model without a thinking mode (SmolLM2): no Think switch at all */
    var sw = think.closest('label');
    if (sw) sw.hidden = serverConfig.thinking_supported === false;
    var t = temperature();
    $('#temperature').value = String(t);
    $('#temperature-value').textContent = t.toFixed(2);
    $('#system').value = cs.system;
    $('#top-p').value = cs.top_p == null ? '' : String(cs.top_p);
    $('#max-tokens').value = cs.max_tokens == null ? '' : String(cs.max_tokens);
  }

  /* ------------------------------------------------------------- UI refs */

  var ui = {};
  function bindRefs() {
    ['app', 'sidebar', 'conv-list', 'new-chat', 'conv-title', 'messages', 'empty-hint', 'status', 'composer',
      'message', 'send', 'stop', 'regenerate', 'think', 'temperature', 'system', 'system-box', 'toast',
      'toast-text', 'toast-undo', 'model-name', 'sidebar-toggle', 'scrim', 'top-p', 'max-tokens', 'search',
      'export-json', 'export-md', 'import', 'import-file', 'attach', 'attach-file', 'attachments'].forEach(function (id) {
      ui[id.replace(/-(\w)/g, function (_, c) { return c.toUpperCase(); })] = document.getElementById(id);
    });
  }

  var announceTimer = 0;
  function announce(text) {
    if (!ui.status) return;
    ui.status.textContent = text;
    clearTimeout(announceTimer);
    if (text) announceTimer = setTimeout(function () { ui.status.textContent = ''; }, 6000);
  }

  /* ------------------------------------------------------ sidebar / list */

  var SVG_OPEN = '<svg aria-hidden="true" width="15" height="15" viewBox="0 0 24 24" fill="none" stroke="currentColor" ' +
    'stroke-width="2" stroke-linecap="round" stroke-linejoin="round">';
  var ICON_EDIT = SVG_OPEN + '<path d="M12 20h9"/><path d="M16.5 3.5a2.1 2.1 0 0 1 3 3L7 19l-4 1 1-4z"/></svg>';
  var ICON_TRASH = SVG_OPEN + '<path d="M3 6h18"/><path d="M8 6V4h8v2"/><path d="M19 6l-1 14H6L5 6"/>' +
    '<path d="M10 11v6M14 11v6"/></svg>';

  function renderList() {
    var list = ui.convList;
    var focusedId = document.activeElement && document.activeElement.closest &&
      document.activeElement.closest('.conv') ? document.activeElement.closest('.conv').dataset.id : null;
    list.textContent = '';
    var q = ui.search ? ui.search.value : '';
    var sorted = convs.slice().sort(function (a, b) { return b.updated - a.updated; })
      .filter(function (c) { return !q.trim() || !window.SmolChats || window.SmolChats.matches(c, q); });
    if (!sorted.length && q.trim()) list.appendChild(el('li', 'conv-none', 'No chats match “' + q.trim() + '”'));
    sorted.forEach(function (c) {
      var li = el('li', 'conv' + (c.id === currentId ? ' active' : ''));
      li.dataset.id = c.id;
      var open = el('button', 'conv-open', c.title || 'New chat');
      open.type = 'button';
      open.title = c.title || 'New chat';
      if (c.id === currentId) open.setAttribute('aria-current', 'page');
      if (active && active.convId === c.id) li.classList.add('busy');
      li.appendChild(open);
      var acts = el('span', 'conv-actions');
      var ren = el('button', 'btn icon tiny rename');
      ren.innerHTML = ICON_EDIT;   // static markup, no user data
      ren.type = 'button';
      ren.title = 'Rename (F2)';
      ren.setAttribute('aria-label', 'Rename conversation: ' + (c.title || 'New chat'));
      var del = el('button', 'btn icon tiny delete');
      del.innerHTML = ICON_TRASH;  // static markup, no user data
      del.type = 'button';
      del.title = 'Delete (Delete key)';
      del.setAttribute('aria-label', 'Delete conversation: ' + (c.title || 'New chat'));
      acts.appendChild(ren);
      acts.appendChild(del);
      li.appendChild(acts);
      list.appendChild(li);
    });
    if (focusedId) {
      var f = $('.conv[data-id="' + focusedId + '"] .conv-open', list);
      if (f) f.focus();
    }
    var c = current();
    ui.convTitle.textContent = c ? (c.title || 'New chat') : 'New chat';
    document.title = (c && c.titleSet !== undefined && c.messages.length ? c.title + ' — ' : '') + 'SmolLM3 Chat';
  }

  function startRename(id) {
    var li = $('.conv[data-id="' + id + '"]', ui.convList);
    var c = findConv(id);
    if (!li || !c) return;
    var open = $('.conv-open', li);
    var input = el('input', 'conv-rename');
    input.type = 'text';
    input.value = c.title || '';
    input.maxLength = 120;
    input.setAttribute('aria-label', 'New name for the conversation');
    li.replaceChild(input, open);
    li.classList.add('editing');
    input.focus();
    input.select();
    var done = false;
    function finish(commit) {
      if (done) return;
      done = true;
      if (commit) {
        var t = input.value.replace(/\s+/g, ' ').trim();
        if (t) { c.title = t.slice(0, 120); c.titleSet = true; saveConvs(); }
      }
      renderList();
      var b = $('.conv[data-id="' + id + '"] .conv-open', ui.convList);
      if (b) b.focus();
    }
    input.addEventListener('keydown', function (e) {
      if (e.key === 'Enter') { e.preventDefault(); finish(true); }
      else if (e.key === 'Escape') { e.preventDefault(); e.stopPropagation(); finish(false); }
    });
    input.addEventListener('blur', function () { finish(true); });
  }

  var undoState = null;
  function deleteConv(id) {
    var idx = -1;
    for (var i = 0; i < convs.length; i++) if (convs[i].id === id) idx = i;
    if (idx < 0) return;
    if (active && active.convId === id) stopActive('deleted');
    var sortedBefore = convs.slice().sort(function (a, b) { return b.updated - a.updated; });
    var pos = sortedBefore.findIndex(function (c) { return c.id === id; });
    var removed = convs.splice(idx, 1)[0];
    saveConvs();
    undoState = { conv: removed, wasCurrent: id === currentId };
    if (id === currentId) {
      var rest = convs.slice().sort(function (a, b) { return b.updated - a.updated; });
      if (rest.length) switchTo(rest[Math.min(pos, rest.length - 1)].id, { focus: false });
      else switchTo(createConv().id, { focus: false });
    } else {
      renderList();
    }
    showToast('Deleted “' + (removed.title || 'New chat') + '”');
    var next = $all('.conv .conv-open', ui.convList)[Math.max(0, pos - (pos >= convs.length ? 1 : 0))];
    (next || ui.message).focus();
  }

  var toastTimer = 0;
  function showToast(text) {
    ui.toastText.textContent = text;
    ui.toastUndo.hidden = !undoState;
    ui.toast.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(hideToast, 7000);
  }
  function hideToast() { ui.toast.hidden = true; undoState = null; }
  /** A message in the toast, with nothing to undo. */
  function notify(text) { undoState = null; showToast(text); }
  function undoDelete() {
    if (!undoState) return;
    var u = undoState;
    hideToast();
    // drop an untouched empty chat created only to replace the deleted one
    var cur = current();
    if (u.wasCurrent && cur && !cur.messages.length && !cur.titleSet) convs.splice(convs.indexOf(cur), 1);
    convs.push(u.conv);
    saveConvs();
    if (u.wasCurrent) switchTo(u.conv.id);
    else renderList();
  }

  /* -------------------------------------------------------- message view */

  function atBottom() {
    var m = ui.messages;
    return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
  }
  function scrollToBottom(force) {
    if (force || stickToBottom) ui.messages.scrollTop = ui.messages.scrollHeight;
  }
  var stickToBottom = true;

  function userBubble(text) {
    var d = el('div', 'msg user', text);
    d.dataset.role = 'user';
    return d;
  }

  function iconBtn(cls, label, text) {
    var b = el('button', 'btn tiny ghost ' + cls, text);
    b.type = 'button';
    b.setAttribute('aria-label', label);
    b.title = label;
    return b;
  }

  /** "< 2/3 >" for slot i, or nothing. */
  function versionSwitch(c, i) {
    var v = versionsAt(c, i);
    if (!v) return null;
    var w = el('span', 'versions');
    w.setAttribute('role', 'group');
    w.setAttribute('aria-label', 'Versions');
    var prev = iconBtn('ver-prev', 'Previous version', '\u2039');
    var next = iconBtn('ver-next', 'Next version', '\u203a');
    prev.disabled = v.cur === 0;
    next.disabled = v.cur === v.n - 1;
    w.appendChild(prev);
    w.appendChild(el('span', 'ver-label', (v.cur + 1) + '/' + v.n));
    w.appendChild(next);
    return w;
  }

  /** The row under a user message: Edit, and its versions. */
  function userTools(c, i) {
    var t = el('div', 'msg-tools');
    t.dataset.index = String(i);
    t.appendChild(iconBtn('edit-msg', 'Edit message', 'Edit'));
    var v = versionSwitch(c, i);
    if (v) t.appendChild(v);
    return t;
  }

  /** Indexes the bubbles of the shown path and gives each its tools (after a turn, or a render). */
  function refreshTools() {
    var c = current();
    if (!c) return;
    $all('.msg-tools', ui.messages).forEach(function (t) { t.remove(); });
    var bubbles = $all('.msg.user, .msg.assistant', ui.messages).filter(function (b) { return !b.classList.contains('streaming'); });
    if (bubbles.length !== c.messages.length) return;   // a turn in flight or a stray fragment: leave them
    bubbles.forEach(function (b, i) {
      b.dataset.index = String(i);
      if (b.classList.contains('user')) {
        b.parentNode.insertBefore(userTools(c, i), b.nextSibling);
      } else {
        var meta = $('.meta', b);
        if (meta) meta.remove();
        b.appendChild(metaLine(c.messages[i], c, i));
      }
    });
  }

  function assistantBubble(m) {
    var d = el('div', 'msg assistant js-md');
    d.dataset.role = 'assistant';
    var det = el('details', 'thinking');
    var sum = el('summary', null, m.thinkMs ? 'Thought for ' + fmtSecs(m.thinkMs) : 'Thinking');
    det.appendChild(sum);
    det.appendChild(el('div', 'reasoning', m.reasoning || ''));
    if (!m.reasoning) det.hidden = true;
    d.appendChild(det);
    d.appendChild(el('div', 'content', m.content || ''));
    var md = el('div', 'md');
    setMarkdown(md, m.content || '');
    d.appendChild(md);
    var err = el('div', 'error', m.error || '');
    d.appendChild(err);
    return d;
  }

  function fmtSecs(ms) { return (ms / 1000).toFixed(ms < 10000 ? 1 : 0) + ' s'; }

  function metaLine(m, c, i) {
    var meta = el('div', 'meta');
    var bits = [];
    if (m.finish === 'cancelled') bits.push('stopped');
    else if (m.finish === 'length') bits.push('cut off at the token limit');
    var u = m.usage;
    if (u && u.completion_tokens) {
      var s = u.completion_tokens + ' tokens';
      // from the first token to done (the prompt's time is not generation speed)
      var ms = m.genMs > 0 ? m.genMs : m.ms;
      if (ms > 0 && u.completion_tokens > 1) s += ' · ' + ((u.completion_tokens - (m.genMs > 0 ? 1 : 0)) / (ms / 1000)).toFixed(1) + ' tok/s';
      bits.push(s);
    }
    if (u && serverConfig.context_length > 0 && (u.prompt_tokens || u.completion_tokens)) {
      var used = (u.prompt_tokens || 0) + (u.completion_tokens || 0), n = serverConfig.context_length;
      bits.push('context ' + used.toLocaleString('en-US') + ' / ' + n.toLocaleString('en-US') +
        ' (' + Math.min(100, Math.round(100 * used / n)) + '%)');
    }
    meta.appendChild(el('span', 'meta-text', bits.join(' · ')));
    if (m.content) meta.appendChild(iconBtn('copy-msg', 'Copy answer', 'Copy'));
    if (c) {
      meta.appendChild(iconBtn('regen-msg', 'Regenerate this answer', 'Regenerate'));
      var v = versionSwitch(c, i);
      if (v) meta.appendChild(v);
    }
    return meta;
  }

  function renderConversation() {
    var c = current();
    ui.messages.textContent = '';
    if (c) {
      c.messages.forEach(function (m) {
        ui.messages.appendChild(m.role === 'user' ? userBubble(m.content) : assistantBubble(m));
      });
      refreshTools();
    }
    updateEmpty();
    stickToBottom = true;
    scrollToBottom(true);
    updateButtons();
  }

  function updateEmpty() {
    var c = current();
    var empty = !ui.messages.querySelector('.msg');
    ui.emptyHint.hidden = !empty;
    ui.app.classList.toggle('is-empty', empty && !(c && c.messages.length));
  }

  function updateButtons() {
    var streaming = !!active;
    ui.stop.hidden = !streaming;
    ui.send.hidden = streaming;
    var c = current();
    ui.regenerate.disabled = streaming || inFlight || !c || !c.messages.length;
    ui.send.disabled = inFlight;
    ui.app.classList.toggle('streaming', streaming);
  }

  /* ---------------------------------------------------------- switching */

  function switchTo(id, opts) {
    opts = opts || {};
    if (active && active.convId !== id) stopActive('switched');
    if (!findConv(id)) return;
    currentId = id;
    try { localStorage.setItem(LS_CURRENT, id); } catch (e) { /* ignore */ }
    applySettingsToControls();
    renderList();
    renderConversation();
    if (isNarrow()) setSidebar(false);
    if (opts.focus !== false) ui.message.focus();
  }

  function newChat() {
    var c = current();
    if (c && !c.messages.length && !active) {
      if (isNarrow()) setSidebar(false);
      ui.message.focus();
      return;
    }
    // reuse an untouched empty chat instead of piling them up
    var empty = convs.filter(function (x) { return !x.messages.length && !x.titleSet; })[0];
    switchTo((empty || createConv()).id);
    if (empty) { empty.updated = Date.now(); saveConvs(); renderList(); }
  }

  // Wide (>= 768 px): the sidebar is a column, always shown (no menu button:
  // style.css hides it there).  Narrow (phones): it starts closed and opens
  // OVER the chat (a drawer with a scrim); picking a conversation, the scrim,
  // Esc or the menu button close it.
  var narrowQuery = window.matchMedia ? window.matchMedia('(max-width: 767.98px)') : null;
  function isNarrow() { return !!(narrowQuery && narrowQuery.matches); }
  function sidebarOpen() {
    return isNarrow() ? ui.app.classList.contains('sidebar-open') : true;
  }
  function setSidebar(open) {
    if (!isNarrow()) open = true;
    ui.app.classList.toggle('sidebar-open', isNarrow() && open);
    ui.sidebarToggle.setAttribute('aria-expanded', String(open));
    ui.scrim.hidden = !(open && isNarrow());
  }
  function onWidthChange() {
    ui.app.classList.remove('sidebar-open');   // a phone always starts with the chat
    setSidebar(!isNarrow());
    fitPlaceholder();
  }

  /* ----------------------------------------------------------- streaming */

  var active = null;     // {convId, sid, bubble, source, userText, t0, tFirstContent, stopTimer}
  var inFlight = false;  // POST /ui/chat pending
  var outgoing = null;   // {message, convId, fromComposer}: the POST being prepared
  var lastRequest = null; // the POST whose fragment (and stream) is awaited
  var renderQueued = false;

  function onStreamOpened(url, source) {
    var bubble = null;
    $all('[sse-connect]', ui.messages).forEach(function (b) { if (b.getAttribute('sse-connect') === url) bubble = b; });
    if (!bubble) return;
    var req = lastRequest;
    lastRequest = null;
    var c = findConv(req && req.convId) || current();
    var userText = req ? req.message : '';
    // regenerating: the user's turn is stored already, drop the fragment's copy of it
    var echo = bubble.previousElementSibling;
    if (req && req.reuse && echo && echo.classList.contains('user') && !echo.dataset.index) echo.remove();
    active = {
      convId: c ? c.id : currentId, sid: bubble.getAttribute('data-stream') || '', bubble: bubble,
      source: source, userText: userText, t0: Date.now(), tThinkEnd: 0, finished: false
    };
    bubble.classList.add('js-md', 'streaming');
    bubble.setAttribute('aria-busy', 'true');
    var content = $('.content', bubble);
    if (content && !$('.md', bubble)) {
      var md = el('div', 'md');
      content.parentNode.insertBefore(md, content.nextSibling);
    }
    var det = $('details.thinking', bubble);
    if (det) { det.hidden = true; $('summary', det).textContent = 'Thinking…'; }
    // the user's turn is part of the conversation from now on
    if (c && !(req && req.reuse)) {
      c.messages.push({ role: 'user', content: userText });
      attachFork(c);
      if (!c.titleSet && c.messages.filter(function (m) { return m.role === 'user'; }).length === 1) c.title = titleFrom(userText);
      c.updated = Date.now();
      saveConvs();
    }
    source.addEventListener('done', function (ev) {
      var info = {};
      try { info = JSON.parse(ev.data) || {}; } catch (e) { info = {}; }
      finishStream(bubble, info.finish_reason || 'stop', info.usage || null, null);
    });
    renderList();
    updateButtons();
    announce('Generating…');
  }

  /** Open/close a <details> without it counting as the user's choice. */
  function setOpen(det, open) {
    if (det.open === open) return;
    det.dataset.autoToggle = '1';
    det.open = open;
  }

  function scheduleRender() {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(function () {
      renderQueued = false;
      if (!active) return;
      var content = $('.content', active.bubble);
      var md = $('.md', active.bubble);
      if (content && md) setMarkdown(md, content.textContent);
      scrollToBottom();
    });
  }

  function finishStream(bubble, finish, usage, errorText) {
    if (!active || active.bubble !== bubble || active.finished) return;
    var a = active;
    a.finished = true;
    clearTimeout(a.stopTimer);
    try { a.source && a.source.close(); } catch (e) { /* ignore */ }
    bubble.removeAttribute('sse-connect');   // never let the extension reconnect
    bubble.classList.remove('streaming');
    bubble.removeAttribute('aria-busy');
    var stopBtn = $('button.stop', bubble);
    if (stopBtn) stopBtn.remove();
    var content = $('.content', bubble);
    var reasoning = $('.reasoning', bubble);
    var errDiv = $('.error', bubble);
    if (errorText && errDiv && !errDiv.textContent.trim()) errDiv.textContent = errorText;
    var msg = {
      role: 'assistant',
      content: content ? content.textContent : '',
      reasoning: reasoning ? reasoning.textContent : '',
      finish: finish,
      usage: usage,
      ms: Date.now() - a.t0
    };
    if (a.tFirst) msg.genMs = Date.now() - a.tFirst;
    if (a.tThinkEnd) msg.thinkMs = a.tThinkEnd - a.t0;
    else if (msg.reasoning) msg.thinkMs = msg.ms;
    if (errDiv && errDiv.textContent.trim()) msg.error = errDiv.textContent.trim();
    var md = $('.md', bubble);
    if (md) setMarkdown(md, msg.content);
    var det = $('details.thinking', bubble);
    if (det) {
      det.hidden = !msg.reasoning;
      $('summary', det).textContent = msg.thinkMs ? 'Thought for ' + fmtSecs(msg.thinkMs) : 'Thinking';
    }
    var oldMeta = $('.meta', bubble);
    if (oldMeta) oldMeta.remove();
    bubble.appendChild(metaLine(msg));
    var c = findConv(a.convId);
    if (c) {
      c.messages.push(msg);
      attachFork(c);
      c.updated = Date.now();
      saveConvs();
    }
    active = null;
    if (c && c.id === currentId) refreshTools();
    renderList();
    updateButtons();
    announce(finish === 'cancelled' ? 'Stopped' : (msg.error ? 'Error: ' + msg.error : 'Answer complete'));
    scrollToBottom();
    if (document.activeElement === document.body || !document.activeElement ||
        (document.activeElement.closest && document.activeElement.closest('.msg'))) ui.message.focus();
  }

  /** Stop the running generation.  reason: 'user' (Stop button/Esc) waits for the
   *  gateway's `done`; 'switched'/'deleted' end it locally right away. */
  function stopActive(reason) {
    if (!active) return;
    var a = active;
    var btn = $('button.stop', a.bubble);
    if (btn && window.htmx) {
      htmx.trigger(btn, 'click');           // hx-post /ui/stop/SID per the contract
      btn.disabled = true;
    } else if (a.sid) {
      fetch('/ui/stop/' + encodeURIComponent(a.sid), { method: 'POST', headers: withKey({}) }).catch(function () {});
    }
    if (reason === 'user') {
      announce('Stopping…');
      a.stopTimer = setTimeout(function () { finishStream(a.bubble, 'cancelled', null, null); }, STOP_GRACE_MS);
    } else {
      finishStream(a.bubble, 'cancelled', null, null);
    }
  }

  function send(text, fromComposer, reuse) {
    text = String(text || '');
    if (!text.trim() || active || inFlight) return false;
    if (!current()) switchTo(createConv().id, { focus: false });
    outgoing = { message: text, convId: currentId, fromComposer: !!fromComposer, reuse: !!reuse,
      typed: fromComposer ? ui.message.value : null };
    stickToBottom = true;
    if (fromComposer) {
      ui.composer.requestSubmit ? ui.composer.requestSubmit() : htmx.trigger(ui.composer, 'submit');
    } else {
      htmx.ajax('POST', '/ui/chat', {
        // not the form as source: its `required` box may be empty (validation would abort)
        source: ui.messages, target: '#messages', swap: 'beforeend', values: { message: text }
      });
    }
    return true;
  }

  /** Answer i again (i: an assistant message, or the end after an unanswered user
   *  message): the old answer and all after it stay as a version of slot i. */
  function regenerateAt(i) {
    var c = current();
    if (!c || active || inFlight) return;
    var msgs = c.messages;
    var user = msgs[i - 1];
    if (!user || user.role !== 'user') return;
    if (i < msgs.length) fork(c, i);
    renderConversation();
    send(user.content, false, true);
  }

  function regenerate() {
    var c = current();
    if (!c || !c.messages.length) return;
    var n = c.messages.length;
    regenerateAt(c.messages[n - 1].role === 'assistant' ? n - 1 : n);
  }

  /** Message i (a user's) sent again as text: the old one and all after it stay as a version. */
  function editAt(i, text) {
    var c = current();
    if (!c || active || inFlight || !String(text).trim()) return;
    if (!c.messages[i] || c.messages[i].role !== 'user') return;
    fork(c, i);
    renderConversation();
    send(text, false);
  }

  function openEditor(tools) {
    var i = +tools.dataset.index, c = current();
    if (!c || !c.messages[i] || active || inFlight) return;
    var bubble = tools.previousElementSibling;
    var box = el('div', 'msg-edit');
    var ta = el('textarea', 'edit-box');
    ta.value = c.messages[i].content;
    ta.rows = Math.min(10, ta.value.split('\n').length + 1);
    ta.setAttribute('aria-label', 'Edit message');
    var row = el('div', 'msg-edit-actions');
    var cancel = el('button', 'btn ghost edit-cancel', 'Cancel');
    cancel.type = 'button';
    var save = el('button', 'btn primary edit-send', 'Send');
    save.type = 'button';
    row.appendChild(cancel);
    row.appendChild(save);
    box.appendChild(ta);
    box.appendChild(row);
    if (bubble) bubble.hidden = true;
    tools.replaceWith(box);
    cancel.addEventListener('click', function () { renderConversation(); });
    save.addEventListener('click', function () { editAt(i, ta.value); });
    ta.addEventListener('keydown', function (e) {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); editAt(i, ta.value); }
      else if (e.key === 'Escape') { e.preventDefault(); e.stopPropagation(); renderConversation(); }
    });
    ta.focus();
  }

  /* ---------------------------------------------------------- attachments */

  /* Text files attached to the next message: each is sent inside the message as
   *   File: NAME
   *   ```` (a fence longer than any backtick run in the file)
   *   TEXT
   *   ````
   * before what was typed.  Only UTF-8 text without NUL bytes; the whole message
   * must stay under the gateway's 64 KiB (gateway/UI_API.md). */
  var MAX_MESSAGE_BYTES = 60 * 1024;
  var attachments = [];   // [{name, text, bytes}]

  function utf8Bytes(t) { return new TextEncoder().encode(t).length; }

  function fileBlock(f) {
    var runs = f.text.match(/`+/g) || [];
    var n = Math.max(3, runs.reduce(function (a, r) { return Math.max(a, r.length + 1); }, 0));
    var fence = new Array(n + 1).join('`');
    return 'File: ' + f.name + '\n' + fence + '\n' + f.text.replace(/\n$/, '') + '\n' + fence;
  }

  function composerText() {
    var typed = ui.message.value;
    if (!attachments.length) return typed;
    return attachments.map(fileBlock).join('\n\n') + (typed.trim() ? '\n\n' + typed : '');
  }

  function renderAttachments() {
    ui.attachments.textContent = '';
    attachments.forEach(function (f, i) {
      var chip = el('span', 'chip');
      chip.appendChild(el('span', 'chip-name', f.name));
      chip.appendChild(el('span', 'chip-size', fmtBytes(f.bytes)));
      var x = iconBtn('chip-remove', 'Remove ' + f.name, '\u00d7');
      x.dataset.i = String(i);
      chip.appendChild(x);
      ui.attachments.appendChild(chip);
    });
    ui.attachments.hidden = !attachments.length;
  }
  function clearAttachments() { attachments = []; renderAttachments(); }

  function fmtBytes(n) { return n < 1024 ? n + ' B' : (n / 1024).toFixed(n < 10240 ? 1 : 0) + ' KB'; }

  function attachFiles(files) {
    Array.prototype.forEach.call(files, function (file) {
      if (file.size > MAX_MESSAGE_BYTES) {
        notify('“' + file.name + '” is too large to attach (' + fmtBytes(file.size) + '; a message holds at most ' +
          fmtBytes(MAX_MESSAGE_BYTES) + ')');
        return;
      }
      file.arrayBuffer().then(function (buf) {
        var text;
        try { text = new TextDecoder('utf-8', { fatal: true }).decode(buf); } catch (e) { text = null; }
        if (text == null || text.indexOf('\u0000') >= 0) {
          notify('“' + file.name + '” is not a text file (only UTF-8 text can be attached)');
          return;
        }
        var f = { name: file.name.replace(/[\r\n]/g, ' ').slice(0, 200), text: text, bytes: buf.byteLength };
        if (utf8Bytes(composerText()) + utf8Bytes(fileBlock(f)) + 2 > MAX_MESSAGE_BYTES) {
          notify('“' + file.name + '” does not fit: a message holds at most ' + fmtBytes(MAX_MESSAGE_BYTES));
          return;
        }
        attachments.push(f);
        renderAttachments();
        ui.message.focus();
      });
    });
  }

  /* ---------------------------------------------- conversations on the server */

  /* With API keys on, the daemon keeps each conversation of the key as its session
   * (ui-CONV) with the messages of its last turn (GET /ui/sessions, gateway/UI_API.md):
   * another browser with the same key lists them here and continues them.  A
   * conversation this browser lacks is added; one it has whose shown branch is an
   * earlier part of the server's gets the later turns.  Keys off: nothing shared. */
  var syncing = false;
  function syncServer() {
    if (syncing || active || inFlight || !apiKey()) return;
    syncing = true;
    fetch('/ui/sessions', { headers: withKey({ Accept: 'application/json' }) }).then(function (r) {
      return r.ok ? r.json() : null;
    }).then(function (j) {
      if (!j || !j.shared || !Array.isArray(j.conversations)) return null;
      return Promise.all(j.conversations.filter(function (x) {
        return x && typeof x.id === 'string' && /^[A-Za-z0-9_-]{1,64}$/.test(x.id);
      }).map(function (x) {
        return fetch('/ui/sessions/' + encodeURIComponent(x.id), { headers: withKey({ Accept: 'application/json' }) })
          .then(function (r) { return r.ok ? r.json() : null; }).catch(function () { return null; });
      }));
    }).then(function (list) {
      if (!list || active || inFlight) return;
      var changed = false, added = 0;
      list.forEach(function (sc) {
        if (!sc || typeof sc.id !== 'string' || !Array.isArray(sc.messages)) return;
        var msgs = sc.messages.filter(function (m) {
          return m && (m.role === 'user' || m.role === 'assistant') && typeof m.content === 'string';
        }).map(function (m) { return { role: m.role, content: m.content }; });
        if (!msgs.length) return;
        var c = findConv(sc.id);
        if (!c) {
          var first = msgs.filter(function (m) { return m.role === 'user'; })[0];
          c = { id: sc.id, title: titleFrom(first ? first.content : 'Chat'), titleSet: false, created: Date.now(),
            updated: Date.now(), messages: msgs, settings: convSettings(null), server: true };
          convs.push(c);
          changed = true;
          added++;
        } else if (!c.fork && msgs.length > c.messages.length && c.messages.every(function (m, i) {
          return m.role === msgs[i].role && m.content === msgs[i].content;
        })) {
          Array.prototype.push.apply(c.messages, msgs.slice(c.messages.length));
          c.updated = Date.now();
          changed = true;
        }
      });
      if (!changed) return;
      saveConvs();
      renderList();
      renderConversation();
      if (added) announce(added + (added === 1 ? ' chat' : ' chats') + ' from the server');
    }).catch(function () { /* offline: the local list stays */ }).then(function () { syncing = false; });
  }

  /* ------------------------------------------------------ export / import */

  function download(name, text, type) {
    var url = URL.createObjectURL(new Blob([text], { type: type }));
    var a = el('a');
    a.href = url;
    a.download = name;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(function () { URL.revokeObjectURL(url); }, 10000);
  }

  function fileStem(title) {
    return (String(title || 'chat').replace(/[^\w.-]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 60) || 'chat');
  }

  function exportJSON() {
    download('smollm3-chats-' + new Date().toISOString().slice(0, 10) + '.json', window.SmolChats.toJSON(convs), 'application/json');
  }
  function exportMarkdown() {
    var c = current();
    if (c) download(fileStem(c.title) + '.md', window.SmolChats.toMarkdown(c), 'text/markdown');
  }

  function importFile(file) {
    file.text().then(function (text) {
      var r = window.SmolChats.parseImport(text, file.name, function (id) { return !!findConv(id); }, newId);
      if (r.error) { notify('Import failed: ' + r.error); return; }
      r.conversations.forEach(function (c) { convs.push(c); });
      saveConvs();
      switchTo(r.conversations[0].id);
      notify('Imported ' + r.conversations.length + (r.conversations.length === 1 ? ' chat' : ' chats'));
    }, function () { notify('Import failed: the file could not be read'); });
  }

  /* -------------------------------------------------------- htmx wiring */

  function wireHtmx() {
    // Open streams through our factory so we can see `done` (with its data).
    htmx.createEventSource = function (url) {
      var es = new EventSource(url);
      // called from htmx:afterProcessNode: the bubble is already in the DOM
      onStreamOpened(url, es);
      return es;
    };

    var body = document.body;

    body.addEventListener('htmx:configRequest', function (e) {
      if (/^\/ui\//.test(e.detail.path || '')) withKey(e.detail.headers);
      if (e.detail.path !== '/ui/chat') return;
      var c = findConv(outgoing && outgoing.convId) || current();
      var p = e.detail.parameters;
      var msg = outgoing ? outgoing.message : composerText();
      p.message = msg;
      p.conversation = c ? c.id : newId();
      p.history = JSON.stringify(historyOf(c));
      var cs = convSettings(c);
      p.think = cs.think && serverConfig.thinking_supported !== false ? '1' : '0';
      p.temperature = temperature(c).toFixed(2);
      var sys = cs.system.trim();
      if (sys) p.system = sys;
      else if (typeof p.delete === 'function') p.delete('system');
      if (cs.top_p != null) p.top_p = String(cs.top_p);
      else if (typeof p.delete === 'function') p.delete('top_p');
      if (cs.max_tokens != null) p.max_tokens = String(cs.max_tokens);
      else if (typeof p.delete === 'function') p.delete('max_tokens');
    });

    body.addEventListener('htmx:beforeRequest', function (e) {
      if (e.detail.requestConfig && e.detail.requestConfig.path === '/ui/chat' || (e.detail.pathInfo && e.detail.pathInfo.requestPath === '/ui/chat')) {
        if (active || inFlight) { e.preventDefault(); return; }
        if (!outgoing) {
          var v = composerText();
          if (!v.trim()) { e.preventDefault(); return; }
          outgoing = { message: v, typed: ui.message.value, convId: currentId, fromComposer: true };
        }
        inFlight = true;
        lastRequest = outgoing;
        ui.emptyHint.hidden = true;
        ui.app.classList.remove('is-empty');
        updateButtons();
      }
    });

    body.addEventListener('htmx:beforeSwap', function (e) {
      var path = e.detail.pathInfo && e.detail.pathInfo.requestPath;
      if (path === '/ui/chat' && e.detail.xhr && e.detail.xhr.status === 401) {
        e.detail.shouldSwap = true;
        e.detail.isError = false;
        e.detail.serverResponse = '<div class="msg error">' +
          escapeHtml(askKey() ? 'API key saved: send your message again.' : 'This server needs an API key.') +
          '</div>';
      } else if (path === '/ui/chat' && e.detail.xhr && e.detail.xhr.status >= 400) {
        // the gateway answers errors with a small `<div class="msg error">` fragment
        e.detail.shouldSwap = true;
        e.detail.isError = false;
        if (!/class="msg error"/.test(e.detail.serverResponse || '')) {
          e.detail.serverResponse = '<div class="msg error">' +
            escapeHtml('Request failed (' + e.detail.xhr.status + ')') + '</div>';
        }
      }
    });

    body.addEventListener('htmx:afterRequest', function (e) {
      var path = e.detail.pathInfo && e.detail.pathInfo.requestPath;
      if (path !== '/ui/chat') return;
      var o = outgoing;
      inFlight = false;
      var ok = e.detail.successful && e.detail.xhr && e.detail.xhr.status < 300;
      if (ok && o && o.fromComposer) {
        if (ui.message.value === o.typed) { ui.message.value = ''; clearAttachments(); }
        autosize();
      }
      if (!ok && !(e.detail.xhr && e.detail.xhr.status)) {
        announce('Could not reach the server');
        var d = el('div', 'msg error', 'Could not reach the server. Is the gateway running?');
        ui.messages.appendChild(d);
      }
      outgoing = null;
      // no stream to wait for: forget the request (else onStreamOpened claims it)
      if (!ok || !/sse-connect/.test((e.detail.xhr && e.detail.xhr.responseText) || '')) {
        lastRequest = null;
        var fc = findConv(o && o.convId);
        if (fc && fc.fork) {
          abandonFork(fc);
          if (fc.id === currentId) { var errs = $all('.msg.error', ui.messages); renderConversation(); errs.forEach(function (x) { ui.messages.appendChild(x); }); }
        }
      }
      updateEmpty();
      updateButtons();
      scrollToBottom(true);
    });

    body.addEventListener('htmx:sseBeforeMessage', function (e) {
      // A network error also reaches `error` listeners: only swap real messages.
      if (typeof e.detail.data !== 'string') { e.preventDefault(); return; }
      var bubble = e.target.closest && e.target.closest('.msg.assistant');
      if (!active || bubble !== active.bubble || active.finished) { e.preventDefault(); }
    });

    body.addEventListener('htmx:sseMessage', function (e) {
      if (!active) return;
      if (!active.tFirst) active.tFirst = Date.now();   // tokens/s counts from the first token
      var t = e.target;
      if (!t.classList) return;
      if (t.classList.contains('reasoning')) {
        var det = t.closest('details.thinking');
        if (det && det.hidden) { det.hidden = false; if (!det.dataset.userToggled) setOpen(det, true); }
      } else if (t.classList.contains('content')) {
        if (!active.tThinkEnd) {
          active.tThinkEnd = Date.now();
          var d2 = $('details.thinking', active.bubble);
          if (d2 && !d2.hidden) {
            $('summary', d2).textContent = 'Thought for ' + fmtSecs(active.tThinkEnd - active.t0);
            if (!d2.dataset.userToggled) setOpen(d2, false);
          }
        }
        scheduleRender();
      }
      scrollToBottom();
    });

    body.addEventListener('htmx:sseError', function (e) {
      var bubble = e.target && e.target.closest ? e.target.closest('.msg.assistant') : null;
      var src = e.detail && e.detail.source;
      // the gateway's named `error` event also reaches EventSource.onerror: it is a
      // message (shown by sse-swap="error"; `done` follows), not a broken connection
      if (e.detail && e.detail.error && typeof e.detail.error.data === 'string') return;
      if (src) try { src.close(); } catch (x) { /* ignore */ }
      if (bubble) bubble.removeAttribute('sse-connect');
      if (active && bubble === active.bubble && !active.finished) {
        finishStream(bubble, 'error', null, 'Connection to the server was lost.');
      }
    });

    body.addEventListener('htmx:sendError', function () { inFlight = false; updateButtons(); });
  }

  /* ------------------------------------------------------------ events */

  function autosize() {
    var t = ui.message;
    t.style.height = 'auto';
    t.style.height = Math.min(t.scrollHeight, Math.round(window.innerHeight * 0.4)) + 'px';
  }

  // The placeholder names the model ("Message SmolLM2-135M-Instruct.Q4_1…") where that
  // fits on the box's one line, else (and until the model is known) it is just
  // "Message…": never a placeholder cut off (the model's name is in the sidebar too).
  // Measured: an empty textarea's scrollHeight is its placeholder's.  Again when the
  // width changes.
  var SHORT_PLACEHOLDER = 'Message\u2026';
  function fitPlaceholder() {
    var t = ui.message;
    if (!t) return;
    var full = serverConfig.model ? 'Message ' + serverConfig.model + '\u2026' : SHORT_PLACEHOLDER;
    if (t.value) { t.placeholder = full; return; }
    t.style.height = 'auto';
    t.placeholder = SHORT_PLACEHOLDER;
    var one = t.scrollHeight;
    t.placeholder = full;
    if (t.scrollHeight > one) t.placeholder = SHORT_PLACEHOLDER;
    autosize();
  }

  function copyText(text, btn) {
    function ok() { var o = btn.textContent; btn.textContent = 'Copied'; setTimeout(function () { btn.textContent = o; }, 1200); }
    if (navigator.clipboard && navigator.clipboard.writeText) navigator.clipboard.writeText(text).then(ok, function () {});
  }

  function wireUi() {
    ui.newChat.addEventListener('click', newChat);
    ui.sidebarToggle.addEventListener('click', function () { setSidebar(!sidebarOpen()); });
    ui.scrim.addEventListener('click', function () { setSidebar(false); ui.sidebarToggle.focus(); });

    ui.convList.addEventListener('click', function (e) {
      var li = e.target.closest('.conv');
      if (!li) return;
      var id = li.dataset.id;
      if (e.target.closest('.rename')) startRename(id);
      else if (e.target.closest('.delete')) deleteConv(id);
      else if (e.target.closest('.conv-open')) switchTo(id);
    });
    ui.convList.addEventListener('dblclick', function (e) {
      var li = e.target.closest('.conv');
      if (li && e.target.closest('.conv-open')) startRename(li.dataset.id);
    });
    ui.convList.addEventListener('keydown', function (e) {
      var li = e.target.closest('.conv');
      if (!li || e.target.tagName === 'INPUT') return;
      var items = $all('.conv .conv-open', ui.convList);
      var i = items.indexOf($('.conv-open', li));
      if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
        e.preventDefault();
        var n = items[Math.max(0, Math.min(items.length - 1, i + (e.key === 'ArrowDown' ? 1 : -1)))];
        if (n) n.focus();
      } else if (e.key === 'F2') {
        e.preventDefault(); startRename(li.dataset.id);
      } else if (e.key === 'Delete' && e.target.classList.contains('conv-open')) {
        e.preventDefault(); deleteConv(li.dataset.id);
      }
    });

    ui.message.addEventListener('keydown', function (e) {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && e.keyCode !== 229) {
        e.preventDefault();
        if (!active && !inFlight && composerText().trim()) send(composerText(), true);
      }
    });
    ui.message.addEventListener('input', autosize);

    ui.composer.addEventListener('submit', function (e) {
      // htmx handles the POST; we only make sure our bookkeeping runs first.
      if (active || inFlight || !composerText().trim()) { e.preventDefault(); return; }
      if (!outgoing) outgoing = { message: composerText(), typed: ui.message.value, convId: currentId, fromComposer: true };
    }, true);

    ui.stop.addEventListener('click', function () { stopActive('user'); ui.message.focus(); });
    ui.regenerate.addEventListener('click', regenerate);

    ui.think.addEventListener('change', function () { setSetting('think', ui.think.checked); });
    ui.temperature.addEventListener('input', function () {
      var v = parseFloat(ui.temperature.value);
      setSetting('temperature', v);
      ui['temperatureValue'] = ui['temperatureValue'] || $('#temperature-value');
      ui.temperatureValue.textContent = v.toFixed(2);
    });
    ui.system.addEventListener('input', function () { setSetting('system', ui.system.value); });
    // empty: the server's default; a value out of range is not kept (the box shows :invalid)
    [['topP', 'top_p', parseFloat], ['maxTokens', 'max_tokens', Number]].forEach(function (f) {
      ui[f[0]].addEventListener('input', function () {
        var raw = ui[f[0]].value.trim();
        setSetting(f[1], raw === '' ? null : f[2](raw));
      });
    });

    ui.toastUndo.addEventListener('click', undoDelete);

    ui.search.addEventListener('input', renderList);
    ui.search.addEventListener('keydown', function (e) {
      if (e.key === 'Escape' && ui.search.value) { e.preventDefault(); e.stopPropagation(); ui.search.value = ''; renderList(); }
    });
    ui.exportJson.addEventListener('click', exportJSON);
    ui.exportMd.addEventListener('click', exportMarkdown);
    ui.import.addEventListener('click', function () { ui.importFile.click(); });
    ui.importFile.addEventListener('change', function () {
      if (ui.importFile.files[0]) importFile(ui.importFile.files[0]);
      ui.importFile.value = '';
    });
    ui.attach.addEventListener('click', function () { ui.attachFile.click(); });
    ui.attachFile.addEventListener('change', function () { attachFiles(ui.attachFile.files); ui.attachFile.value = ''; });
    ui.attachments.addEventListener('click', function (e) {
      var b = e.target.closest('.chip-remove');
      if (b) { attachments.splice(+b.dataset.i, 1); renderAttachments(); ui.message.focus(); }
    });

    ui.messages.addEventListener('click', function (e) {
      var b = e.target.closest('button');
      if (!b) return;
      if (b.classList.contains('copy')) {
        var code = b.closest('.codeblock') && $('code', b.closest('.codeblock'));
        if (code) copyText(code.textContent, b);
      } else if (b.classList.contains('copy-msg')) {
        var msg = b.closest('.msg.assistant');
        if (msg) copyText($('.content', msg).textContent, b);
      } else if (b.classList.contains('regen-msg')) {
        var am = b.closest('.msg.assistant');
        if (am && am.dataset.index) regenerateAt(+am.dataset.index);
      } else if (b.classList.contains('edit-msg')) {
        openEditor(b.closest('.msg-tools'));
      } else if (b.classList.contains('ver-prev') || b.classList.contains('ver-next')) {
        var holder = b.closest('.msg-tools') || b.closest('.msg.assistant');
        var c = current(), idx = holder && +holder.dataset.index, v = c && versionsAt(c, idx);
        if (!v || active || inFlight) return;
        switchVersion(c, idx, v.cur + (b.classList.contains('ver-next') ? 1 : -1));
        renderConversation();
        var again = $('[data-index="' + idx + '"] .' + (b.classList.contains('ver-next') ? 'ver-next' : 'ver-prev'), ui.messages);
        if (again && !again.disabled) again.focus();
      }
    });
    ui.messages.addEventListener('toggle', function (e) {
      if (e.target.dataset && e.target.dataset.autoToggle) { delete e.target.dataset.autoToggle; return; }
      if (e.target.classList && e.target.classList.contains('thinking') && active &&
          e.target.closest('.msg') === active.bubble) e.target.dataset.userToggled = '1';
    }, true);
    ui.messages.addEventListener('scroll', function () { stickToBottom = atBottom(); }, { passive: true });

    document.addEventListener('keydown', function (e) {
      var mod = e.ctrlKey || e.metaKey;
      if (mod && e.shiftKey && (e.key === 'O' || e.key === 'o' || e.code === 'KeyO')) {
        e.preventDefault();
        newChat();
      } else if (e.key === 'Escape') {
        if (isNarrow() && sidebarOpen()) { e.preventDefault(); setSidebar(false); ui.sidebarToggle.focus(); }
        else if (active) { e.preventDefault(); stopActive('user'); }
        else if (ui.systemBox.open) { ui.systemBox.open = false; $('summary', ui.systemBox).focus(); }
        else if (!ui.toast.hidden) hideToast();
      }
    });

    window.addEventListener('storage', function (e) {
      if (e.key !== LS_CONVS || active) return;
      loadConvs();
      if (!current()) { currentId = (convs[0] || createConv()).id; }
      renderList();
      renderConversation();
    });
    document.addEventListener('visibilitychange', function () { if (!document.hidden) syncServer(); });
    window.addEventListener('beforeunload', function () {
      if (active && active.source) try { active.source.close(); } catch (e) { /* ignore */ }
    });
  }

  function loadConfig() {
    fetch('/ui/config', { headers: withKey({ Accept: 'application/json' }) }).then(function (r) {
      if (r.status === 401 && askKey()) { loadConfig(); return null; }
      return r.ok ? r.json() : null;
    }).then(function (cfg) {
      if (!cfg || typeof cfg !== 'object') return;
      if (typeof cfg.model === 'string') serverConfig.model = cfg.model;
      if (typeof cfg.thinking_supported === 'boolean') serverConfig.thinking_supported = cfg.thinking_supported;
      if (typeof cfg.default_temperature === 'number') serverConfig.default_temperature = cfg.default_temperature;
      if (typeof cfg.context_length === 'number' && cfg.context_length > 0) {
        serverConfig.context_length = cfg.context_length;
        if (!active) refreshTools();            // answers already shown get their context share
      }
      ui.modelName.textContent = serverConfig.model || '—';
      syncServer();
      fitPlaceholder();
      ui.modelName.title = 'Model: ' + (serverConfig.model || 'unknown');
      applySettingsToControls();
    }).catch(function () { ui.modelName.textContent = 'offline?'; });
  }

  function init() {
    bindRefs();
    setupMarkdown();
    loadSettings();
    applySettingsToControls();
    loadConvs();
    // a regenerate/edit the page was closed during: its new version started, or it never did
    convs.forEach(function (c) {
      if (!c.fork) return;
      if (c.messages.length > c.fork.at) { attachFork(c); saveConvs(); } else abandonFork(c);
    });
    var saved = null;
    try { saved = localStorage.getItem(LS_CURRENT); } catch (e) { /* ignore */ }
    currentId = findConv(saved) ? saved : null;
    if (!currentId) {
      var sorted = convs.slice().sort(function (a, b) { return b.updated - a.updated; });
      currentId = (sorted[0] || createConv()).id;
    }
    if (window.htmx) wireHtmx();
    wireUi();
    renderList();
    renderConversation();
    onWidthChange();
    if (narrowQuery) {
      if (narrowQuery.addEventListener) narrowQuery.addEventListener('change', onWidthChange);
      else if (narrowQuery.addListener) narrowQuery.addListener(onWidthChange);
    }
    var fitTimer = null;
    window.addEventListener('resize', function () {
      clearTimeout(fitTimer);
      fitTimer = setTimeout(fitPlaceholder, 100);
    });
    autosize();
    loadConfig();
    ui.message.focus();
    document.documentElement.classList.add('ready');
  }

  // Exposed for tests and debugging.
  window.SmolUI = {
    renderMarkdown: renderMarkdown,
    escapeHtml: escapeHtml,
    historyOf: historyOf,
    state: function () { return { currentId: currentId, conversations: convs, streaming: !!active, busy: !!active || inFlight || !!lastRequest }; }
  };

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
