/*
 * chat_parse.c - incremental reasoning / content / tool-call parser.
 *
 * Design: text pieces are appended to `pend` and scanned for the tags that
 * matter in the current state; text before a tag goes out as a segment
 * fragment, the tag switches state, and a tail that is a proper prefix of a
 * tag (or an incomplete UTF-8 sequence) waits for the next piece.  Segment
 * trimming holds trailing whitespace in `ws` until more text shows it was
 * inner whitespace.  Tool-call bodies accumulate in `call` and are parsed
 * once closed.  Output is identical however the input is split (tests feed
 * every split point).  Rules: see chat_parse.h.
 */
#include "daemon/text/chat_parse.h"

#include <jansson.h>
#include <string.h>

enum { ST_CONTENT, ST_REASONING, ST_TOOL, ST_PLAIN };

static const char TAG_THINK[] = "<think>", TAG_END_THINK[] = "</think>";
static const char TAG_CALL[] = "<tool_call>", TAG_END_CALL[] = "</tool_call>";

void smol_chat_parser_init(struct smol_chat_parser *p, enum smol_chat_start start, smol_chat_emit_fn emit, void *ud)
{
    memset(p, 0, sizeof *p);
    p->state = start == SMOL_CHAT_START_REASONING ? ST_REASONING : start == SMOL_CHAT_START_PLAIN ? ST_PLAIN : ST_CONTENT;
    p->at_start = start == SMOL_CHAT_START_CONTENT;
    smol_chat_buf_init(&p->pend);
    smol_chat_buf_init(&p->ws);
    smol_chat_buf_init(&p->call);
    smol_chat_buf_init(&p->scratch);
    p->emit = emit;
    p->ud = ud;
}

void smol_chat_parser_deinit(struct smol_chat_parser *p)
{
    if (!p) return;
    smol_chat_buf_deinit(&p->pend);
    smol_chat_buf_deinit(&p->ws);
    smol_chat_buf_deinit(&p->call);
    smol_chat_buf_deinit(&p->scratch);
}

/* ============================================================ emitting */

static void emit_text(struct smol_chat_parser *p, enum smol_chat_ev_kind kind, const char *s, size_t n)
{
    if (!n) return;
    struct smol_chat_event ev = {.kind = kind, .text = s, .len = n};
    p->emit(p->ud, &ev);
}

static int is_ws_c(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

static int is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Text of the current state: appended to the call body, passed through
 * (plain), or emitted trimmed as part of a reasoning/content segment. */
static int seg_text(struct smol_chat_parser *p, const char *s, size_t n)
{
    if (!n) return 0;
    if (p->state == ST_TOOL) return smol_chat_buf_append(&p->call, s, n);
    if (p->state == ST_PLAIN) {
        emit_text(p, SMOL_CHAT_EV_CONTENT, s, n);
        return 0;
    }
    enum smol_chat_ev_kind kind = p->state == ST_REASONING ? SMOL_CHAT_EV_REASONING : SMOL_CHAT_EV_CONTENT;
    size_t end = n;
    while (end > 0 && is_ws(s[end - 1])) end--;
    if (end == 0) {     /* all whitespace: leading (dropped) or maybe inner (held) */
        return p->seg_started ? smol_chat_buf_append(&p->ws, s, n) : 0;
    }
    size_t start = 0;
    if (!p->seg_started) {
        while (is_ws(s[start])) start++;
        p->seg_started = 1;
    } else {
        emit_text(p, kind, p->ws.data, p->ws.len);
    }
    p->at_start = 0;
    smol_chat_buf_reset(&p->ws);
    emit_text(p, kind, s + start, end - start);
    return smol_chat_buf_append(&p->ws, s + end, n - end);
}

static void seg_end(struct smol_chat_parser *p)
{
    smol_chat_buf_reset(&p->ws);
    p->seg_started = 0;
}

/* ========================================================== tool calls */

/* Where the value of the body's top-level "arguments" key lies, byte for
 * byte as the model wrote it (so the call renders back to the same text:
 * chat_template.c).  1 when found and it parses to a value equal to args,
 * else 0 (the caller then serialises args). */
static int raw_arguments(const char *body, size_t len, const json_t *args, size_t *off, size_t *n)
{
    static const char key[] = "\"arguments\"";
    const size_t kl = sizeof key - 1;
    for (size_t i = 0; i + kl <= len; i++) {
        if (memcmp(body + i, key, kl)) continue;
        size_t j = i + kl;
        while (j < len && is_ws_c(body[j])) j++;
        if (j >= len || body[j] != ':') continue;
        j++;
        while (j < len && is_ws_c(body[j])) j++;
        json_error_t je;
        json_t *v = json_loadb(body + j, len - j, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &je);
        int same = v && json_equal(v, args);
        json_decref(v);
        if (!same) continue;
        size_t e = j + (size_t)je.position;
        if (e > len) continue;
        while (e > j && is_ws_c(body[e - 1])) e--;
        *off = j;
        *n = e - j;
        return 1;
    }
    return 0;
}

/* Parses the call body; emits a TOOL_CALL or, when malformed, the raw text. */
static int call_end(struct smol_chat_parser *p, int closed)
{
    const char *body = p->call.data ? p->call.data : "";
    json_t *j = json_loadb(body, p->call.len, 0, NULL);
    json_t *name = json_object_get(j, "name");
    json_t *args = json_object_get(j, "arguments");
    int rc = 0;
    smol_chat_buf_reset(&p->scratch);
    if (json_is_string(name) && json_string_length(name) > 0 &&
        strlen(json_string_value(name)) == json_string_length(name)) {
        size_t raw_off, raw_len;
        if (!args) rc = smol_chat_buf_puts(&p->scratch, "{}");
        else if (json_is_string(args)) rc = smol_chat_buf_append(&p->scratch, json_string_value(args), json_string_length(args));
        else if (raw_arguments(body, p->call.len, args, &raw_off, &raw_len))
            rc = smol_chat_buf_append(&p->scratch, body + raw_off, raw_len);
        else rc = smol_chat_json_dump(&p->scratch, args);
        if (!rc) {
            struct smol_chat_event ev = {.kind = SMOL_CHAT_EV_TOOL_CALL, .name = json_string_value(name),
                                         .arguments = p->scratch.data ? p->scratch.data : "", .index = p->n_tool_calls++};
            p->emit(p->ud, &ev);
        }
    } else {
        p->n_malformed++;
        emit_text(p, SMOL_CHAT_EV_CONTENT, TAG_CALL, sizeof TAG_CALL - 1);
        emit_text(p, SMOL_CHAT_EV_CONTENT, body, p->call.len);
        if (closed) emit_text(p, SMOL_CHAT_EV_CONTENT, TAG_END_CALL, sizeof TAG_END_CALL - 1);
    }
    json_decref(j);
    smol_chat_buf_reset(&p->call);
    p->state = ST_CONTENT;
    return rc;
}

/* ================================================================ tags */

/* Tags that act in the current state (NULL-terminated list). */
static void active_tags(const struct smol_chat_parser *p, const char *tags[3])
{
    int n = 0;
    switch (p->state) {
    case ST_CONTENT:
        if (p->at_start) tags[n++] = TAG_THINK;
        tags[n++] = TAG_CALL;
        break;
    case ST_REASONING: tags[n++] = TAG_END_THINK; break;
    case ST_TOOL: tags[n++] = TAG_END_CALL; break;
    }
    tags[n] = NULL;
}

/* Applies an active tag. */
static int on_tag(struct smol_chat_parser *p, const char *tag)
{
    p->at_start = 0;
    seg_end(p);
    if (tag == TAG_THINK) p->state = ST_REASONING;
    else if (tag == TAG_END_THINK) p->state = ST_CONTENT;
    else if (tag == TAG_CALL) p->state = ST_TOOL;
    else return call_end(p, 1);
    return 0;
}

/* First occurrence of tag in s[0..n), or NULL. */
static const char *find_tag(const char *s, size_t n, const char *tag)
{
    size_t tl = strlen(tag);
    for (const char *c = s; n >= tl && (c = memchr(c, '<', n - tl + 1 - (size_t)(c - s))); c++)
        if (!memcmp(c, tag, tl)) return c;
    return NULL;
}

/* Bytes at the end of s[0..n) to hold back: an incomplete UTF-8 sequence. */
static size_t utf8_tail(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = s[n - k];
        if ((c & 0xC0) == 0x80) continue;   /* continuation: look further back */
        size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        return need > k ? k : 0;
    }
    return 0;
}

/* Scans pend: emits text, applies tags, keeps a possible partial tag (and
 * partial UTF-8) unless flush. */
static int scan(struct smol_chat_parser *p, int flush)
{
    size_t pos = 0;
    for (;;) {
        const char *s = (p->pend.data ? p->pend.data : "") + pos;
        size_t n = p->pend.len - pos;
        if (p->state == ST_PLAIN) {
            size_t hold = flush ? 0 : utf8_tail(s, n);
            if (seg_text(p, s, n - hold)) return -1;
            pos += n - hold;
            break;
        }
        const char *tags[3];
        active_tags(p, tags);
        const char *best = NULL, *at = NULL;
        for (int t = 0; tags[t]; t++) {
            const char *f = find_tag(s, n, tags[t]);
            if (f && (!at || f < at)) { at = f; best = tags[t]; }
        }
        if (best == TAG_THINK) {
            size_t k = 0;
            while (s + k < at && is_ws(s[k])) k++;
            if (s + k < at) {   /* text came first: <think> is literal from now on */
                if (seg_text(p, s, (size_t)(at - s))) return -1;
                pos += (size_t)(at - s);
                continue;
            }
        }
        if (best) {
            if (seg_text(p, s, (size_t)(at - s)) || on_tag(p, best)) return -1;
            pos += (size_t)(at - s) + strlen(best);
            continue;
        }
        size_t hold = 0;
        if (!flush) {
            for (int t = 0; tags[t]; t++) {
                size_t tl = strlen(tags[t]);
                for (size_t k = tl - 1; k > hold; k--)
                    if (k <= n && !memcmp(s + n - k, tags[t], k)) { hold = k; break; }
            }
            if (!hold) hold = utf8_tail(s, n);
        }
        if (seg_text(p, s, n - hold)) return -1;
        pos += n - hold;
        break;
    }
    if (pos) {
        memmove(p->pend.data, p->pend.data + pos, p->pend.len - pos);
        p->pend.len -= pos;
        p->pend.data[p->pend.len] = '\0';
    }
    return 0;
}

/* =============================================================== feed */

enum smol_err smol_chat_parser_feed(struct smol_chat_parser *p, const char *text, size_t len, int special)
{
    if (p->finished) return SMOL_EINVAL;
    if (!special) {
        if (smol_chat_buf_append(&p->pend, text, len) || scan(p, 0)) return SMOL_ENOMEM;
        return SMOL_OK;
    }
    /* A special piece ends any partial text tag before it. */
    if (scan(p, 1)) return SMOL_ENOMEM;
    static const char *const known[] = {TAG_THINK, TAG_END_THINK, TAG_CALL, TAG_END_CALL};
    const char *tag = NULL;
    for (int i = 0; i < 4; i++)
        if (len == strlen(known[i]) && !memcmp(text, known[i], len)) tag = known[i];
    if (!tag || p->state == ST_PLAIN) return SMOL_OK;   /* other specials are not text */
    const char *tags[3];
    active_tags(p, tags);
    for (int t = 0; tags[t]; t++)
        if (tags[t] == tag) return on_tag(p, tag) ? SMOL_ENOMEM : SMOL_OK;
    return seg_text(p, text, len) ? SMOL_ENOMEM : SMOL_OK;   /* literal where it means nothing */
}

enum smol_err smol_chat_parser_finish(struct smol_chat_parser *p)
{
    if (p->finished) return SMOL_OK;
    if (scan(p, 1)) return SMOL_ENOMEM;
    p->finished = 1;
    if (p->state == ST_REASONING) p->unclosed_think = 1;
    if (p->state == ST_TOOL && call_end(p, 0)) return SMOL_ENOMEM;
    seg_end(p);
    return SMOL_OK;
}
