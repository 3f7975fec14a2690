/* SmolLM3 chat UI — conversations as files, and search over them (window.SmolChats).
 * Pure functions: no DOM, no storage; app.js does the clicking and saving.
 *
 * JSON export: {"format":"smollm3-chats","version":1,"exported":ms,"conversations":[…]}
 * with each conversation as localStorage holds it (web/README.md: Storage), branches
 * included.  Markdown export: the shown path of one conversation, as
 *   # Title
 *   ### User
 *   text
 *   ### Assistant
 *   text
 * Import takes either (or a bare JSON array of conversations) and trusts nothing in
 * it: every conversation, message and setting is checked and copied field by field;
 * anything else is dropped.  Imported text is shown the way model text is (escaped,
 * or markdown through DOMPurify), never as markup. */
(function () {
  'use strict';

  var ID_RE = /^[A-Za-z0-9_-]{1,64}$/;
  var MAX_DEPTH = 32;          // nested branches
  var FINISH = ['stop', 'length', 'cancelled', 'tool_calls', 'error'];

  function str(v, max) { return typeof v === 'string' ? (max && v.length > max ? v.slice(0, max) : v) : undefined; }
  function num(v) { return typeof v === 'number' && isFinite(v) && v >= 0 ? v : undefined; }

  function cleanUsage(u) {
    if (!u || typeof u !== 'object') return undefined;
    var out = {}, any = false;
    ['prompt_tokens', 'completion_tokens', 'total_tokens', 'cached_tokens', 'reasoning_tokens'].forEach(function (k) {
      if (num(u[k]) !== undefined) { out[k] = Math.floor(u[k]); any = true; }
    });
    return any ? out : undefined;
  }

  /** One message, or null; its other versions (branches) checked to MAX_DEPTH. */
  function cleanMessage(m, depth) {
    if (!m || typeof m !== 'object' || (m.role !== 'user' && m.role !== 'assistant')) return null;
    var content = str(m.content);
    if (content === undefined) return null;
    var out = { role: m.role, content: content };
    if (m.role === 'assistant') {
      ['reasoning', 'error'].forEach(function (k) { if (str(m[k]) !== undefined) out[k] = m[k]; });
      if (FINISH.indexOf(m.finish) >= 0) out.finish = m.finish;
      if (cleanUsage(m.usage)) out.usage = cleanUsage(m.usage);
      ['ms', 'thinkMs', 'genMs'].forEach(function (k) { if (num(m[k]) !== undefined) out[k] = m[k]; });
    } else if (Array.isArray(m.files)) {
      out.files = m.files.filter(function (f) { return f && typeof f.name === 'string'; })
        .map(function (f) { return { name: f.name.slice(0, 255), bytes: num(f.bytes) || 0 }; });
    }
    if (Array.isArray(m.others) && depth < MAX_DEPTH) {
      var others = m.others.map(function (t) { return cleanPath(t, depth + 1); })
        .filter(function (t) { return t.length; });
      if (others.length) {
        out.others = others;
        out.ver = Math.min(Math.max(0, Math.floor(num(m.ver) || 0)), others.length);
      }
    }
    return out;
  }

  function cleanPath(msgs, depth) {
    if (!Array.isArray(msgs)) return [];
    var out = [];
    for (var i = 0; i < msgs.length; i++) {
      var m = cleanMessage(msgs[i], depth);
      if (m) out.push(m);
    }
    return out;
  }

  function cleanSettings(s) {
    if (!s || typeof s !== 'object') return undefined;
    var out = {};
    if (typeof s.think === 'boolean') out.think = s.think;
    if (typeof s.system === 'string') out.system = s.system;
    if (s.temperature === null || (num(s.temperature) !== undefined && s.temperature <= 2)) out.temperature = s.temperature;
    if (s.top_p === null || (num(s.top_p) !== undefined && s.top_p > 0 && s.top_p <= 1)) out.top_p = s.top_p;
    if (s.max_tokens === null || (num(s.max_tokens) >= 1 && s.max_tokens <= 1000000 && s.max_tokens % 1 === 0)) out.max_tokens = s.max_tokens;
    return out;
  }

  /** A conversation from a file, or null.  newId() names it when its id is missing or taken. */
  function cleanConversation(c, taken, newId) {
    if (!c || typeof c !== 'object') return null;
    var msgs = cleanPath(c.messages, 0);
    var id = typeof c.id === 'string' && ID_RE.test(c.id) && !taken(c.id) ? c.id : newId();
    var now = Date.now();
    var out = {
      id: id, title: (str(c.title, 200) || '').trim() || 'Imported chat', titleSet: true,
      created: num(c.created) || now, updated: num(c.updated) || now, messages: msgs
    };
    var s = cleanSettings(c.settings);
    if (s) out.settings = s;
    return out;
  }

  function toJSON(convs) {
    return JSON.stringify({ format: 'smollm3-chats', version: 1, exported: Date.now(), conversations: convs }, null, 2);
  }

  // a line that would read as one of our headings gets a zero-width space after its hashes
  function escapeHeadings(text) { return String(text).replace(/^(#{1,6})( (?:User|Assistant)\s*$)/gm, '$1\u200b$2'); }

  function toMarkdown(c) {
    var out = ['# ' + String(c.title || 'Chat').replace(/\s+/g, ' '), ''];
    c.messages.forEach(function (m) {
      out.push(m.role === 'user' ? '### User' : '### Assistant', '', escapeHeadings(m.content), '');
    });
    return out.join('\n');
  }

  function fromMarkdown(text) {
    var lines = String(text).replace(/\r\n?/g, '\n').split('\n');
    var title = '', msgs = [], cur = null, body = [];
    function flush() {
      if (cur) msgs.push({ role: cur, content: body.join('\n').replace(/^\n+|\n+$/g, '').replace(/^(#{1,6})\u200b/gm, '$1') });
      body = [];
    }
    lines.forEach(function (l) {
      var h = /^### (User|Assistant)\s*$/.exec(l);
      if (h) { flush(); cur = h[1] === 'User' ? 'user' : 'assistant'; return; }
      if (!cur && !title && /^# /.test(l)) { title = l.slice(2).trim(); return; }
      if (cur) body.push(l);
    });
    flush();
    return msgs.length ? { title: title || 'Imported chat', messages: msgs } : null;
  }

  /** Conversations in a file's text (JSON or Markdown): {conversations:[…]} or {error}. */
  function parseImport(text, name, taken, newId) {
    var data = null, list;
    var isJson = /\.json$/i.test(name || '') || /^\s*[[{]/.test(text);
    if (isJson) {
      try { data = JSON.parse(text); } catch (e) { return { error: 'not valid JSON: ' + e.message }; }
      list = Array.isArray(data) ? data : (data && Array.isArray(data.conversations) ? data.conversations : null);
      if (!list) return { error: 'no conversations in this JSON file' };
    } else {
      var md = fromMarkdown(text);
      if (!md) return { error: 'no "### User" / "### Assistant" sections in this file' };
      list = [md];
    }
    var ids = {}, out = [];
    list.forEach(function (c) {
      var cc = cleanConversation(c, function (id) { return ids[id] || taken(id); }, newId);
      if (cc) { ids[cc.id] = 1; out.push(cc); }
    });
    return out.length ? { conversations: out } : { error: 'no usable conversations in this file' };
  }

  /** Every text of c (title, and all messages of every branch), lower-cased, for search. */
  function textOf(c) {
    var parts = [c.title || ''];
    (function walk(msgs, depth) {
      msgs.forEach(function (m) {
        parts.push(m.content || '');
        if (m.others && depth < MAX_DEPTH) m.others.forEach(function (t) { walk(t, depth + 1); });
      });
    })(c.messages || [], 0);
    return parts.join('\n').toLowerCase();
  }

  /** Whether c matches query: every word of it appears in the title or a message. */
  function matches(c, query) {
    var words = String(query || '').toLowerCase().split(/\s+/).filter(Boolean);
    if (!words.length) return true;
    var t = textOf(c);
    return words.every(function (w) { return t.indexOf(w) >= 0; });
  }

  window.SmolChats = { toJSON: toJSON, toMarkdown: toMarkdown, parseImport: parseImport, matches: matches };
})();
