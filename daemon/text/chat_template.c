/*
 * chat_template.c - native renders of the SmolLM3 and SmolLM2 chat templates.
 *
 * Design: every supported template is a C function that mirrors the Jinja
 * source statement by statement (see chat_template.h for the behaviour).
 * The Jinja expressions the templates use are reproduced with Python's
 * semantics where they differ from C: str.rstrip() strips Unicode
 * whitespace, str.replace() is left-to-right non-overlapping, and
 * `tool | string` is Python's repr() of the dict json.loads() would build
 * (insertion order, single quotes unless the text has ' and no ", escapes
 * for non-printable code points from Python's Unicode table, shortest
 * round-trip floats: pyrepr.c).  Inputs are validated up front (roles, UTF-8, date,
 * tools type) so the render itself can only fail on memory.  Every byte
 * copied from the request goes through emit_user() / span_add(), which record
 * it as an untrusted span (smol_chat_render_spans) for the tokenizer.
 */
#include "daemon/text/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ============================================================= spans */

void smol_chat_spans_init(struct smol_chat_spans *s)
{
    s->v = NULL;
    s->src = NULL;
    s->n = s->cap = 0;
}

void smol_chat_spans_deinit(struct smol_chat_spans *s)
{
    if (!s) return;
    free(s->v);
    free(s->src);
    smol_chat_spans_init(s);
}

void smol_chat_spans_reset(struct smol_chat_spans *s)
{
    s->n = 0;
}

/* Records [off, off + len) of the output as caller text; no-op without sp. */
static int span_add(struct smol_chat_spans *sp, size_t off, size_t len, int32_t msg, int32_t tool,
                    enum smol_chat_field field)
{
    if (!sp) return 0;
    if (sp->n == sp->cap) {
        size_t cap = sp->cap ? sp->cap * 2 : 16;
        struct smol_span *v = realloc(sp->v, cap * sizeof *v);
        if (!v) return -1;
        sp->v = v;
        struct smol_chat_span_src *src = realloc(sp->src, cap * sizeof *src);
        if (!src) return -1;
        sp->src = src;
        sp->cap = cap;
    }
    sp->v[sp->n] = (struct smol_span){.off = off, .len = len};
    sp->src[sp->n] = (struct smol_chat_span_src){.msg = msg, .tool = tool, .field = field};
    sp->n++;
    return 0;
}

/* Appends caller text s[0..n) to the output and records its span. */
static int emit_user(struct smol_chat_buf *o, struct smol_chat_spans *sp, const char *s, size_t n, int32_t msg,
                     int32_t tool, enum smol_chat_field field)
{
    size_t off = o->len;
    return smol_chat_buf_append(o, s, n) || span_add(sp, off, n, msg, tool, field) ? -1 : 0;
}

/* ============================================================ unicode */

/* Decodes the code point at s (valid UTF-8 assumed); returns its length. */

/* Python's str.isspace(). */
static int py_isspace(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Length of s[0..n) after Python's str.rstrip() (valid UTF-8 assumed). */
static size_t py_rstrip_len(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    while (n > 0) {
        size_t st = n - 1;
        while (st > 0 && (s[st] & 0xC0) == 0x80) st--;
        uint32_t cp;
        smol_chat_utf8_decode(s + st, &cp);
        if (!py_isspace(cp)) break;
        n = st;
    }
    return n;
}

/* Appends s[0..n) with every occurrence of pat removed (Python
 * s.replace(pat, ""), left to right, non-overlapping). */
static int append_removing(struct smol_chat_buf *b, const char *s, size_t n, const char *pat)
{
    size_t pl = strlen(pat), i = 0, run = 0;
    while (i < n) {
        if (n - i >= pl && !memcmp(s + i, pat, pl)) {
            if (smol_chat_buf_append(b, s + run, i - run)) return -1;
            i += pl;
            run = i;
        } else {
            i++;
        }
    }
    return smol_chat_buf_append(b, s + run, n - run);
}

/* ============================================================== dates */

static const char *const month_names[12] = {
    "January", "February", "March", "April", "May", "June", "July",
    "August", "September", "October", "November", "December",
};

int smol_chat_date_check(const char *d)
{
    if (!d || strlen(d) < 10) return -1;
    if (d[0] < '0' || d[0] > '3' || d[1] < '0' || d[1] > '9' || d[2] != ' ') return -1;
    int day = (d[0] - '0') * 10 + (d[1] - '0');
    if (day < 1 || day > 31) return -1;
    for (int m = 0; m < 12; m++) {
        size_t ml = strlen(month_names[m]);
        if (strncmp(d + 3, month_names[m], ml) || d[3 + ml] != ' ') continue;
        const char *y = d + 4 + ml;
        if (strlen(y) != 4) return -1;
        for (int i = 0; i < 4; i++)
            if (y[i] < '0' || y[i] > '9') return -1;
        return 0;
    }
    return -1;
}

int smol_chat_date_format(int year, int month, int day, char *out, size_t cap)
{
    if (year < 1 || year > 9999 || month < 1 || month > 12 || day < 1 || day > 31) return -1;
    int n = snprintf(out, cap, "%02d %s %04d", day, month_names[month - 1], year);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* ========================================================= detection */

/* FNV-1a 64 of a template's text with trailing whitespace removed (every
 * known template ends in a whitespace-trimming tag, so it cannot matter). */
static const struct known_tpl {
    uint64_t fnv;
    size_t len;
    enum smol_chat_tpl tpl;
    const char *what;
} known_tpls[] = {
    {0xe4ad24fd095ae0d5ull, 5598, SMOL_CHAT_TPL_SMOLLM3, "SmolLM3-3B chat_template.jinja (sha256 3e0e275a...)"},
    {0x45ec583d4d25bc3aull, 368, SMOL_CHAT_TPL_SMOLLM2, "SmolLM2-Instruct ChatML"},
};

const char *smol_chat_tpl_name(enum smol_chat_tpl t)
{
    switch (t) {
    case SMOL_CHAT_TPL_SMOLLM3: return "smollm3";
    case SMOL_CHAT_TPL_SMOLLM2: return "smollm2";
    case SMOL_CHAT_TPL_CHATML: return "chatml";
    }
    return "?";
}

enum smol_err smol_chat_tpl_detect(const char *text, size_t len, int allow_chatml_fallback,
                                   enum smol_chat_tpl *out, char *err)
{
    while (len > 0 && (text[len - 1] == ' ' || text[len - 1] == '\n' || text[len - 1] == '\t' ||
                       text[len - 1] == '\r'))
        len--;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)text[i];
        h *= 0x100000001b3ull;
    }
    for (size_t i = 0; i < sizeof known_tpls / sizeof known_tpls[0]; i++) {
        if (known_tpls[i].fnv == h && known_tpls[i].len == len) {
            *out = known_tpls[i].tpl;
            return SMOL_OK;
        }
    }
    if (allow_chatml_fallback) {
        *out = SMOL_CHAT_TPL_CHATML;
        return SMOL_OK;
    }
    return smol_errf(err, SMOL_ETEMPLATE,
                     "unrecognised chat template (%zu bytes, fnv1a64 %016llx): only the SmolLM3 and "
                     "SmolLM2 templates are supported; enable the ChatML fallback to render anyway",
                     len, (unsigned long long)h);
}

/* ========================================================= validation */

static const char *role_name(enum smol_chat_role r)
{
    switch (r) {
    case SMOL_CHAT_SYSTEM: return "system";
    case SMOL_CHAT_USER: return "user";
    case SMOL_CHAT_ASSISTANT: return "assistant";
    case SMOL_CHAT_TOOL: return "tool";
    }
    return NULL;
}

static enum smol_err check_str(const char *s, size_t i, const char *field, char *err)
{
    if (s && !smol_utf8_valid(s, strlen(s)))
        return smol_errf(err, SMOL_EUTF8, "messages[%zu].%s is not valid UTF-8", i, field);
    return SMOL_OK;
}

static int json_depth(const json_t *v)
{
    int d = 0;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            int dx = json_depth(x);
            if (dx > d) d = dx;
            if (d > 512) break;
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v) && d <= 512; i++) {
            int dx = json_depth(json_array_get(v, i));
            if (dx > d) d = dx;
        }
    } else {
        return 0;
    }
    return d + 1;
}

static enum smol_err validate(enum smol_chat_tpl tpl, const struct smol_chat_request *req, char *err)
{
    enum smol_err e;
    if (!req || !req->msgs || req->n_msgs == 0)
        return smol_errf(err, SMOL_EINVAL, "messages must be a non-empty list");
    for (size_t i = 0; i < req->n_msgs; i++) {
        const struct smol_chat_msg *m = &req->msgs[i];
        if (!role_name(m->role))
            return smol_errf(err, SMOL_EINVAL, "messages[%zu].role: unknown role %d", i, (int)m->role);
        if ((e = check_str(m->content, i, "content", err)) ||
            (e = check_str(m->reasoning_content, i, "reasoning_content", err)) ||
            (e = check_str(m->tool_call_id, i, "tool_call_id", err)) || (e = check_str(m->name, i, "name", err)))
            return e;
        if (m->tool_calls && !json_is_array(m->tool_calls))
            return smol_errf(err, SMOL_EINVAL, "messages[%zu].tool_calls must be a list", i);
        for (size_t k = 0; tpl == SMOL_CHAT_TPL_SMOLLM3 && m->tool_calls && k < json_array_size(m->tool_calls); k++) {
            const json_t *fn = json_object_get(json_array_get(m->tool_calls, k), "function");
            const json_t *nm = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
            if (m->role != SMOL_CHAT_ASSISTANT)
                return smol_errf(err, SMOL_EINVAL, "messages[%zu].tool_calls: only assistant messages carry tool calls", i);
            if (!json_is_object(fn) || !json_is_string(nm) || !json_string_length(nm) ||
                strlen(json_string_value(nm)) != json_string_length(nm) ||
                !smol_utf8_valid(json_string_value(nm), json_string_length(nm)))
                return smol_errf(err, SMOL_EINVAL, "messages[%zu].tool_calls[%zu].function.name must be a non-empty string",
                                 i, k);
            if (args && !json_is_null(args) && !json_is_object(args) &&
                !(json_is_string(args) && strlen(json_string_value(args)) == json_string_length(args) &&
                  smol_utf8_valid(json_string_value(args), json_string_length(args))))
                return smol_errf(err, SMOL_EINVAL, "messages[%zu].tool_calls[%zu].function.arguments must be a JSON "
                                 "string or an object", i, k);
            if (json_depth(args) > 256)
                return smol_errf(err, SMOL_EINVAL, "messages[%zu].tool_calls[%zu] nested deeper than 256 levels", i, k);
        }
        if (!m->content && (tpl != SMOL_CHAT_TPL_SMOLLM3 || (i == 0 && m->role == SMOL_CHAT_SYSTEM)))
            return smol_errf(err, SMOL_ETEMPLATE, "messages[%zu].content: the %s template needs string content in a %s message",
                             i, smol_chat_tpl_name(tpl), role_name(m->role));
    }
    if (req->tools && !json_is_array(req->tools) && !json_is_null(req->tools))
        return smol_errf(err, SMOL_EINVAL, "'tools' must be a list");
    if (req->tools && json_depth(req->tools) > 256)
        return smol_errf(err, SMOL_EINVAL, "'tools' are nested deeper than 256 levels");
    int has_tools = req->tools && json_is_array(req->tools) && json_array_size(req->tools) > 0;
    if (tpl == SMOL_CHAT_TPL_SMOLLM3) {
        if (smol_chat_date_check(req->date))
            return smol_errf(err, SMOL_EINVAL, "'date' must read \"DD Month YYYY\" (e.g. \"09 July 2025\"), got \"%.40s\"",
                             req->date ? req->date : "(none)");
    } else if (has_tools) {
        return smol_errf(err, SMOL_EUNSUPPORTED, "tools: the %s chat template does not support tools (this model "
                         "cannot call them); to try tools and agents, serve SmolLM3-3B: `make model` then `make run`, "
                         "or MODEL=path to a SmolLM3 GGUF", smol_chat_tpl_name(tpl));
    }
    return SMOL_OK;
}

/* ============================================================ SmolLM3 */

static const char persona_think[] =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face. Your role as an assistant involves "
    "thoroughly exploring questions through a systematic thinking process before providing the final precise and "
    "accurate solutions. This requires engaging in a comprehensive cycle of analysis, summarizing, exploration, "
    "reassessment, reflection, backtracking, and iteration to develop well-considered thinking process. Please "
    "structure your response into two main sections: Thought and Solution using the specified format: <think> "
    "Thought section </think> Solution section. In the Thought section, detail your reasoning process in steps. "
    "Each step should include detailed considerations such as analysing questions, summarizing relevant "
    "findings, brainstorming new ideas, verifying the accuracy of the current steps, refining any errors, and "
    "revisiting previous steps. In the Solution section, based on various attempts, explorations, and "
    "reflections from the Thought section, systematically present the final solution that you deem correct. "
    "The Solution section should be logical, accurate, and concise and detail necessary steps needed to reach "
    "the conclusion.\n\n";
static const char persona_no_think[] = "You are a helpful AI assistant named SmolLM, trained by Hugging Face.\n\n";
static const char tools_head[] =
    "You may call one or more functions to assist with the user query.\nYou are provided with function "
    "signatures within <tools></tools> XML tags:\n\n<tools>\n";
static const char tools_tail[] =
    "</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>";
static const char no_think_prefill[] = "<think>\n\n</think>\n";

/* The system header, up to and including its optional <|im_end|>. */
static int smollm3_system(struct smol_chat_buf *o, struct smol_chat_spans *sp, const struct smol_chat_request *req,
                          int *think)
{
    const struct smol_chat_msg *m0 = &req->msgs[0];
    struct smol_chat_buf ci;    /* custom_instructions */
    int rc = -1;
    smol_chat_buf_init(&ci);
    *think = req->enable_thinking != 0;
    if (smol_chat_buf_puts(o, "<|im_start|>system\n")) return -1;
    if (m0->role == SMOL_CHAT_SYSTEM) {
        const char *sm = m0->content;
        if (strstr(sm, "/no_think")) *think = 0;
        else if (strstr(sm, "/think")) *think = 1;
        struct smol_chat_buf t;
        smol_chat_buf_init(&t);
        if (append_removing(&t, sm, strlen(sm), "/no_think") ||
            append_removing(&ci, t.data ? t.data : "", t.len, "/think")) {
            smol_chat_buf_deinit(&t);
            goto out;
        }
        smol_chat_buf_deinit(&t);
        ci.len = py_rstrip_len(ci.data ? ci.data : "", ci.len);
        if (strstr(sm, "/system_override")) {
            struct smol_chat_buf ov;
            smol_chat_buf_init(&ov);
            int bad = append_removing(&ov, ci.data ? ci.data : "", ci.len, "/system_override") ||
                      emit_user(o, sp, ov.data ? ov.data : "", py_rstrip_len(ov.data ? ov.data : "", ov.len), 0, -1,
                                SMOL_CHAT_FIELD_SYSTEM) ||
                      smol_chat_buf_puts(o, "<|im_end|>\n");
            smol_chat_buf_deinit(&ov);
            rc = bad ? -1 : 0;
            goto out;
        }
    }
    if (smol_chat_buf_puts(o, "## Metadata\n\nKnowledge Cutoff Date: June 2025\nToday Date: ") ||
        emit_user(o, sp, req->date, strlen(req->date), -1, -1, SMOL_CHAT_FIELD_DATE) ||
        smol_chat_buf_puts(o, "\nReasoning Mode: ") ||
        smol_chat_buf_puts(o, *think ? "/think" : "/no_think") ||
        smol_chat_buf_puts(o, "\n\n## Custom Instructions\n\n"))
        goto out;
    if (ci.len > 0) {
        if (emit_user(o, sp, ci.data, ci.len, 0, -1, SMOL_CHAT_FIELD_SYSTEM) || smol_chat_buf_puts(o, "\n\n"))
            goto out;
    } else if (smol_chat_buf_puts(o, *think ? persona_think : persona_no_think)) {
        goto out;
    }
    if (req->tools && json_is_array(req->tools) && json_array_size(req->tools) > 0) {
        if (smol_chat_buf_puts(o, "### Tools\n\n") || smol_chat_buf_puts(o, tools_head)) goto out;
        for (size_t i = 0; i < json_array_size(req->tools); i++) {
            const json_t *t = json_array_get(req->tools, i);
            size_t off = o->len;
            int bad = json_is_string(t) ? smol_chat_buf_append(o, json_string_value(t), json_string_length(t))
                                        : smol_chat_pyrepr(o, t);
            if (bad || span_add(sp, off, o->len - off, -1, (int32_t)i, SMOL_CHAT_FIELD_TOOL) ||
                smol_chat_buf_puts(o, "\n"))
                goto out;
        }
        if (smol_chat_buf_puts(o, tools_tail) || smol_chat_buf_puts(o, "\n\n<|im_end|>\n")) goto out;
    }
    rc = 0;
out:
    smol_chat_buf_deinit(&ci);
    return rc;
}

/* An assistant turn's tool calls as the model writes them (a departure
 * from the official template, which drops them; see chat_template.h):
 * "\n" after non-empty content, then each call as
 *     <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>
 * with "\n" between calls; NAME is the JSON string of the name, ARGS the
 * `arguments` string verbatim (the chat parser reports the bytes the model
 * wrote, so a call renders back to the tokens it came from) or, given as
 * an object, its json.dumps.  The tags are template text; NAME and ARGS are
 * untrusted spans (SMOL_CHAT_FIELD_TOOL_CALL). */
static int tool_calls_smollm3(struct smol_chat_buf *o, struct smol_chat_spans *sp, const struct smol_chat_msg *m,
                              int32_t i, int had_content)
{
    size_t n = m->tool_calls ? json_array_size(m->tool_calls) : 0;
    for (size_t k = 0; k < n; k++) {
        const json_t *fn = json_object_get(json_array_get(m->tool_calls, k), "function");
        const json_t *args = json_object_get(fn, "arguments");
        if (((k || had_content) && smol_chat_buf_puts(o, "\n")) || smol_chat_buf_puts(o, "<tool_call>\n{\"name\": "))
            return -1;
        size_t off = o->len;
        if (smol_chat_json_dump(o, json_object_get(fn, "name")) ||
            span_add(sp, off, o->len - off, i, -1, SMOL_CHAT_FIELD_TOOL_CALL) ||
            smol_chat_buf_puts(o, ", \"arguments\": "))
            return -1;
        off = o->len;
        int bad = json_is_string(args) ? smol_chat_buf_append(o, json_string_value(args), json_string_length(args))
                  : json_is_object(args) ? smol_chat_json_dump(o, args)
                                         : smol_chat_buf_puts(o, "{}");
        if (bad || span_add(sp, off, o->len - off, i, -1, SMOL_CHAT_FIELD_TOOL_CALL) ||
            smol_chat_buf_puts(o, "}\n</tool_call>"))
            return -1;
    }
    return 0;
}

static int render_smollm3(struct smol_chat_buf *o, struct smol_chat_spans *sp, const struct smol_chat_request *req,
                          int *think)
{
    if (smollm3_system(o, sp, req, think)) return -1;
    for (size_t i = 0; i < req->n_msgs; i++) {
        const struct smol_chat_msg *m = &req->msgs[i];
        const char *c = m->content ? m->content : "";
        switch (m->role) {
        case SMOL_CHAT_USER:
        case SMOL_CHAT_TOOL:    /* tool results are user turns */
            if (smol_chat_buf_puts(o, "<|im_start|>user\n") ||
                emit_user(o, sp, c, strlen(c), (int32_t)i, -1, SMOL_CHAT_FIELD_CONTENT) ||
                smol_chat_buf_puts(o, "<|im_end|>\n"))
                return -1;
            break;
        case SMOL_CHAT_ASSISTANT:
            while (*c == '\n') c++;
            if (smol_chat_buf_puts(o, "<|im_start|>assistant\n") ||
                (!*think && smol_chat_buf_puts(o, no_think_prefill)) ||
                emit_user(o, sp, c, strlen(c), (int32_t)i, -1, SMOL_CHAT_FIELD_CONTENT) ||
                tool_calls_smollm3(o, sp, m, (int32_t)i, *c != '\0') || smol_chat_buf_puts(o, "<|im_end|>\n"))
                return -1;
            break;
        case SMOL_CHAT_SYSTEM:  /* only messages[0] counts, in the header */
            break;
        }
    }
    if (req->add_generation_prompt) {
        if (smol_chat_buf_puts(o, "<|im_start|>assistant\n") || (!*think && smol_chat_buf_puts(o, no_think_prefill)))
            return -1;
    }
    return 0;
}

/* ============================================================= ChatML */

static int render_chatml(struct smol_chat_buf *o, struct smol_chat_spans *sp, const struct smol_chat_request *req,
                         int smollm2)
{
    if (smollm2 && req->msgs[0].role != SMOL_CHAT_SYSTEM &&
        smol_chat_buf_puts(o, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                              "Hugging Face<|im_end|>\n"))
        return -1;
    for (size_t i = 0; i < req->n_msgs; i++) {
        const struct smol_chat_msg *m = &req->msgs[i];
        if (smol_chat_buf_puts(o, "<|im_start|>") || smol_chat_buf_puts(o, role_name(m->role)) ||
            smol_chat_buf_puts(o, "\n") ||
            emit_user(o, sp, m->content, strlen(m->content), (int32_t)i, -1, SMOL_CHAT_FIELD_CONTENT) ||
            smol_chat_buf_puts(o, "<|im_end|>\n"))
            return -1;
    }
    if (req->add_generation_prompt && smol_chat_buf_puts(o, "<|im_start|>assistant\n")) return -1;
    return 0;
}

enum smol_err smol_chat_render_spans(enum smol_chat_tpl tpl, const struct smol_chat_request *req,
                                     struct smol_chat_buf *out, struct smol_chat_spans *spans, int *thinking,
                                     char *err)
{
    enum smol_err e = validate(tpl, req, err);
    if (e) return e;
    if (req->n_msgs > INT32_MAX || (req->tools && json_is_array(req->tools) && json_array_size(req->tools) > INT32_MAX))
        return smol_errf(err, SMOL_EINVAL, "too many messages or tools");
    size_t len0 = out->len, n0 = spans ? spans->n : 0;
    int think = 0, rc;
    switch (tpl) {
    case SMOL_CHAT_TPL_SMOLLM3: rc = render_smollm3(out, spans, req, &think); break;
    case SMOL_CHAT_TPL_SMOLLM2: rc = render_chatml(out, spans, req, 1); break;
    case SMOL_CHAT_TPL_CHATML: rc = render_chatml(out, spans, req, 0); break;
    default: return smol_errf(err, SMOL_EINVAL, "unknown template kind %d", (int)tpl);
    }
    if (rc) {
        out->len = len0;
        if (out->data) out->data[len0] = '\0';
        if (spans) spans->n = n0;
        return smol_errf(err, SMOL_ENOMEM, "out of memory rendering the chat template");
    }
    if (thinking) *thinking = think;
    return SMOL_OK;
}

enum smol_err smol_chat_render(enum smol_chat_tpl tpl, const struct smol_chat_request *req,
                               struct smol_chat_buf *out, int *thinking, char *err)
{
    return smol_chat_render_spans(tpl, req, out, NULL, thinking, err);
}

/* ============================================================ request */

/* *out = the string value of obj[key]; NULL when absent or null. */
static enum smol_err get_opt_str(const json_t *obj, const char *key, size_t i, const char **out, char *err)
{
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v)) return SMOL_OK;
    if (!json_is_string(v))
        return smol_errf(err, SMOL_EINVAL, "messages[%zu].%s must be a string", i, key);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return smol_errf(err, SMOL_EINVAL, "messages[%zu].%s contains a NUL character", i, key);
    *out = json_string_value(v);
    return SMOL_OK;
}

static enum smol_err get_opt_bool(const json_t *obj, const char *key, const char *where, int *out, char *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return SMOL_OK;
    if (!json_is_boolean(v)) return smol_errf(err, SMOL_EINVAL, "%s%s must be true or false", where, key);
    *out = json_is_true(v);
    return SMOL_OK;
}

static enum smol_err parse_msg(struct smol_chat_msg *m, const json_t *j, size_t i, char *err)
{
    enum smol_err e;
    if (!json_is_object(j)) return smol_errf(err, SMOL_EINVAL, "messages[%zu] must be an object", i);
    const json_t *role = json_object_get(j, "role");
    if (!json_is_string(role)) return smol_errf(err, SMOL_EINVAL, "messages[%zu].role must be a string", i);
    const char *r = json_string_value(role);
    if (!strcmp(r, "system")) m->role = SMOL_CHAT_SYSTEM;
    else if (!strcmp(r, "user")) m->role = SMOL_CHAT_USER;
    else if (!strcmp(r, "assistant")) m->role = SMOL_CHAT_ASSISTANT;
    else if (!strcmp(r, "tool")) m->role = SMOL_CHAT_TOOL;
    else return smol_errf(err, SMOL_EINVAL, "messages[%zu].role: unknown role \"%.32s\" (system, user, assistant, tool)", i, r);
    const json_t *c = json_object_get(j, "content");
    if (json_is_array(c))
        return smol_errf(err, SMOL_EINVAL, "messages[%zu].content: a list of content parts is not supported by "
                         "this model's template; send a string", i);
    if (c && !json_is_null(c) && !json_is_string(c))
        return smol_errf(err, SMOL_EINVAL, "messages[%zu].content must be a string or null", i);
    if ((e = get_opt_str(j, "content", i, &m->content, err))) return e;
    const char *rkey = json_object_get(j, "reasoning_content") ? "reasoning_content" : "reasoning";
    if ((e = get_opt_str(j, rkey, i, &m->reasoning_content, err)) ||
        (e = get_opt_str(j, "tool_call_id", i, &m->tool_call_id, err)) ||
        (e = get_opt_str(j, "name", i, &m->name, err)))
        return e;
    const json_t *tc = json_object_get(j, "tool_calls");
    if (tc && !json_is_null(tc) && !json_is_array(tc))
        return smol_errf(err, SMOL_EINVAL, "messages[%zu].tool_calls must be a list", i);
    m->tool_calls = json_is_array(tc) ? tc : NULL;
    return SMOL_OK;
}

enum smol_err smol_chat_request_from_json(struct smol_chat_request *req, const json_t *body, char *err)
{
    enum smol_err e;
    memset(req, 0, sizeof *req);
    req->enable_thinking = 1;
    req->add_generation_prompt = 1;
    if (!json_is_object(body)) return smol_errf(err, SMOL_EINVAL, "request body must be a JSON object");
    const json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return smol_errf(err, SMOL_EINVAL, "messages must be a non-empty list");
    const json_t *tools = json_object_get(body, "tools");
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return smol_errf(err, SMOL_EINVAL, "'tools' must be a list");
    req->tools = json_is_array(tools) ? tools : NULL;
    if ((e = get_opt_bool(body, "add_generation_prompt", "", &req->add_generation_prompt, err))) return e;
    const json_t *kw = json_object_get(body, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) return smol_errf(err, SMOL_EINVAL, "chat_template_kwargs must be an object");
        if ((e = get_opt_bool(kw, "enable_thinking", "chat_template_kwargs.", &req->enable_thinking, err)))
            return e;
    }
    size_t n = json_array_size(msgs);
    req->msgs = calloc(n, sizeof *req->msgs);
    if (!req->msgs) return smol_errf(err, SMOL_ENOMEM, "out of memory for %zu messages", n);
    req->n_msgs = n;
    req->msgs_owned = 1;
    for (size_t i = 0; i < n; i++) {
        if ((e = parse_msg(&req->msgs[i], json_array_get(msgs, i), i, err))) {
            smol_chat_request_deinit(req);
            return e;
        }
    }
    return SMOL_OK;
}

void smol_chat_request_deinit(struct smol_chat_request *req)
{
    if (!req) return;
    if (req->msgs_owned) free(req->msgs);
    req->msgs = NULL;
    req->n_msgs = 0;
    req->msgs_owned = 0;
}
