/* SmolLM3 chat UI — model text as safe HTML (window.SmolMarkdown).
 *
 * marked renders the markdown with raw HTML shown as text; code blocks are
 * highlighted by highlight.js (its "common" build: ~35 languages) inside marked's
 * code renderer; math ($…$, $$…$$, \(…\), \[…\]) is taken out by a marked
 * extension before any markdown rule can touch it.  The HTML goes through
 * DOMPurify (PURIFY_CONFIG); math placeholders are then typeset by KaTeX and its
 * output sanitized again on its own rules (MATH_PURIFY) before it is put in
 * place as DOM nodes.  Code blocks get a language label and a Copy button. */
(function () {
  'use strict';

  function $all(sel, root) { return Array.prototype.slice.call((root || document).querySelectorAll(sel)); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  }


  function escapeHtml(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c];
    });
  }

  /* Code blocks are highlighted by highlight.js (its "common" build: ~35 languages)
   * inside marked's renderer; math ($…$, $$…$$, \(…\), \[…\]) is taken out by a
   * marked extension before any markdown rule can touch it (so `_` and `*` in TeX
   * are not emphasis, and math inside code stays code), left as
   * <span class="math-inline|math-display">TeX</span>, and typeset by KaTeX only
   * after the markdown HTML has been sanitized.  KaTeX's own output is sanitized
   * again (MATH_PURIFY: its classes, inline sizes, svg paths and MathML, nothing
   * else) before it is put in place. */
  var markedReady = false;
  var purifyMode = 'markdown';   // which rules the attribute hook applies: 'markdown' or 'math'

  function highlightCode(text, lang) {
    var hl = window.hljs;
    if (hl && lang && hl.getLanguage(lang)) {
      try { return hl.highlight(text, { language: lang, ignoreIllegals: true }).value; } catch (e) { /* plain */ }
    }
    return escapeHtml(text);
  }

  // $…$ needs a non-space after the opening and before the closing dollar, and no
  // digit right after it (pandoc's rule): "$5 and $10" stays text; nor a backtick
  // inside ("$10 and `$x`": the code span wins).
  var MATH_INLINE = [
    [/^\$\$([^$]+?)\$\$/, true],
    [/^\\\[([\s\S]+?)\\\]/, true],
    [/^\\\(([\s\S]+?)\\\)/, false],
    [/^\$(?!\s)((?:\\.|[^\\$\n`])+?)(?<!\s)\$(?!\d)/, false]
  ];
  var mathExtensions = [{
    name: 'mathBlock', level: 'block',
    start: function (src) { var m = /(^|\n)[ ]{0,3}(\$\$|\\\[)/.exec(src); return m ? m.index + m[1].length : undefined; },
    tokenizer: function (src) {
      var m = /^[ ]{0,3}(?:\$\$([\s\S]+?)\$\$|\\\[([\s\S]+?)\\\])[ \t]*(?:\n+|$)/.exec(src);
      if (m) return { type: 'mathBlock', raw: m[0], text: (m[1] != null ? m[1] : m[2]).trim(), display: true };
    },
    renderer: function (t) { return '<p><span class="math-display">' + escapeHtml(t.text) + '</span></p>\n'; }
  }, {
    name: 'mathInline', level: 'inline',
    start: function (src) { var m = /\$|\\[([]/.exec(src); return m ? m.index : undefined; },
    tokenizer: function (src) {
      for (var i = 0; i < MATH_INLINE.length; i++) {
        var m = MATH_INLINE[i][0].exec(src);
        if (m && m[1].trim()) return { type: 'mathInline', raw: m[0], text: m[1].trim(), display: MATH_INLINE[i][1] };
      }
    },
    renderer: function (t) {
      return '<span class="' + (t.display ? 'math-display' : 'math-inline') + '">' + escapeHtml(t.text) + '</span>';
    }
  }];

  var CSS_SAFE = /^(\s*[a-z-]+\s*:\s*[-+#\w.%, ]+\s*;?)*\s*$/;   // KaTeX's sizes and colours: no url(), no escapes

  function setupMarkdown() {
    if (markedReady || !window.marked || !window.DOMPurify) return markedReady;
    window.marked.use({
      gfm: true,
      breaks: true,
      extensions: mathExtensions,
      renderer: {
        // Raw HTML in model output is shown as text, never interpreted.
        html: function (token) { return escapeHtml(token && typeof token === 'object' ? token.text : token); },
        code: function (token) {
          var lang = (/^\S{1,32}/.exec(token.lang || '') || [''])[0].toLowerCase();
          var cls = /^[\w+#.-]+$/.test(lang) ? ' class="language-' + lang + '"' : '';
          var text = String(token.text || '').replace(/\n$/, '');
          return '<pre><code' + cls + '>' + highlightCode(text, lang) + '</code></pre>\n';
        }
      }
    });
    window.DOMPurify.addHook('uponSanitizeAttribute', function (node, data) {
      var v = data.attrValue;
      if (purifyMode === 'math') {
        // KaTeX: class names, and inline sizes/colours with nothing that loads or escapes
        if (data.attrName === 'class' && !/^[\w -]*$/.test(v)) data.keepAttr = false;
        if (data.attrName === 'style' && (!CSS_SAFE.test(v) || /url|expression|\\/i.test(v))) data.keepAttr = false;
        return;
      }
      if (data.attrName !== 'class') return;
      // markdown: `class` only as a code block's language, highlight.js's token
      // spans inside code, and the math placeholders our extension writes
      var ok = (node.nodeName === 'CODE' && /^language-[\w+#.-]{1,32}$/.test(v)) ||
        (node.nodeName === 'SPAN' && node.closest && node.closest('code') && /^(hljs-[\w-]+|[a-z]+_)( (hljs-[\w-]+|[a-z]+_))*$/.test(v)) ||
        (node.nodeName === 'SPAN' && (v === 'math-inline' || v === 'math-display'));
      if (!ok) data.keepAttr = false;
    });
    window.DOMPurify.addHook('afterSanitizeAttributes', function (node) {
      if (node.tagName === 'A') {
        node.setAttribute('target', '_blank');
        node.setAttribute('rel', 'noopener noreferrer nofollow');
      }
    });
    markedReady = true;
    return true;
  }

  var PURIFY_CONFIG = {
    USE_PROFILES: { html: true },
    FORBID_TAGS: ['style', 'img', 'svg', 'math', 'form', 'input', 'button', 'textarea', 'select',
      'iframe', 'object', 'embed', 'video', 'audio', 'source', 'link', 'meta', 'base'],
    FORBID_ATTR: ['style', 'id', 'srcset'],
    ALLOW_DATA_ATTR: false
  };
  // KaTeX's output: spans with classes and sizes, svg paths (roots, arrows), MathML for screen readers
  var MATH_PURIFY = {
    USE_PROFILES: { html: true, svg: true, mathMl: true },
    ADD_TAGS: ['semantics', 'annotation'],     // the TeX source, as text (never annotation-xml)
    FORBID_TAGS: ['a', 'img', 'image', 'use', 'foreignObject', 'style', 'script', 'form', 'input', 'button',
      'iframe', 'object', 'embed', 'video', 'audio', 'source', 'link', 'meta', 'base', 'animate', 'set'],
    FORBID_ATTR: ['id', 'href', 'xlink:href', 'srcset', 'src', 'action'],
    ALLOW_DATA_ATTR: false,
    RETURN_DOM_FRAGMENT: true
  };

  function typesetMath(root) {
    $all('span.math-inline, span.math-display', root).forEach(function (span) {
      var tex = span.textContent;
      if (!window.katex) return;            // KaTeX missing: the TeX stays as text
      var html;
      try {
        html = window.katex.renderToString(tex, {
          displayMode: span.className === 'math-display', throwOnError: false, output: 'htmlAndMathml',
          trust: false, strict: 'ignore', maxSize: 20, maxExpand: 500
        });
      } catch (e) { return; }
      purifyMode = 'math';
      var frag;
      try { frag = window.DOMPurify.sanitize(html, MATH_PURIFY); } finally { purifyMode = 'markdown'; }
      span.textContent = '';
      span.appendChild(frag);
    });
  }

  /** Markdown text -> sanitized DOM inside target (math typeset). */
  function renderInto(target, text) {
    text = String(text == null ? '' : text);
    if (!setupMarkdown()) { target.textContent = text; return; }
    var html = window.marked.parse(text, { async: false });
    target.innerHTML = window.DOMPurify.sanitize(html, PURIFY_CONFIG);
    typesetMath(target);
  }

  /** Markdown text -> sanitized HTML string (what renderInto puts in place). */
  function renderMarkdown(text) {
    var d = document.createElement('div');
    renderInto(d, text);
    return d.innerHTML;
  }

  /** Adds a language label and a copy button to code blocks inside root. */
  function decorateCode(root) {
    $all('pre > code', root).forEach(function (code) {
      var pre = code.parentNode;
      if (pre.parentNode && pre.parentNode.classList && pre.parentNode.classList.contains('codeblock')) return;
      var wrap = el('div', 'codeblock');
      var head = el('div', 'codehead');
      var m = /(?:^|\s)language-([\w+#.-]+)/.exec(code.getAttribute('class') || '');
      head.appendChild(el('span', 'lang', m ? m[1] : 'code'));
      var copy = el('button', 'btn tiny copy', 'Copy');
      copy.type = 'button';
      copy.setAttribute('aria-label', 'Copy code');
      head.appendChild(copy);
      pre.parentNode.insertBefore(wrap, pre);
      wrap.appendChild(head);
      wrap.appendChild(pre);
    });
  }

  function setMarkdown(target, text) {
    renderInto(target, text);
    decorateCode(target);
  }

  window.SmolMarkdown = { escapeHtml: escapeHtml, setup: setupMarkdown, render: renderMarkdown, set: setMarkdown };
})();
