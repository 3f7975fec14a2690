/*
 * anthropic.c - Anthropic's Messages API: POST /v1/messages (streaming and
 * not) and POST /v1/messages/count_tokens, in the wire shapes of the
 * `anthropic` SDK (anthropic/types/: MessageCreateParams, Message,
 * RawMessageStreamEvent, MessageTokensCount, ErrorResponse).
 *
 * Request: the body becomes the GenerateRequest the chat endpoint builds
 * (anthropic.h): the daemon renders it with the same template, so a
 * conversation sent to either endpoint is the same prompt.  Every field is
 * honoured, metadata (accepted, type-checked, changes nothing) or refused
 * with a 400 naming it; unknown fields are refused unless
 * --ignore-unknown-fields.  Block-level fields are checked the same way.
 *
 * Response: daemon events become content blocks in the order they come:
 * reasoning tokens a `thinking` block (signature ""), content tokens a
 * `text` block, each ToolCall a `tool_use` block (input: the arguments
 * object).  Streaming: message_start, ping, content_block_start / delta
 * (text_delta, thinking_delta, input_json_delta) / stop, message_delta
 * (stop_reason, stop_sequence, usage), message_stop; an error after the
 * stream began is an `error` event.  Usage follows Anthropic's split:
 * input_tokens are the prompt tokens computed for this request,
 * cache_read_input_tokens those reused from the KV cache (their sum is the
 * whole prompt, what count_tokens returns).
 *
 * count_tokens sends the rendered request with max_tokens 1 and cancels it
 * at `started`, whose prompt_tokens is the count: exactly the prompt
 * /v1/messages would run (the template lives in the daemon).
 */
#include "gateway/anthropic.h"
#include "gateway/core.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/text/text.h"        /* smol_chat_json_dump: Python's json.dumps, as the daemon writes arguments */

#define MAX_MESSAGES 4096           /* as the chat endpoint */
#define MAX_CHAT_MESSAGES 16384     /* after splitting tool results into their own messages */
#define MAX_TOOLS 128

enum { BLK_NONE, BLK_TEXT, BLK_THINKING };

/* ---- the field table -------------------------------------------------------- */

enum disp { HONOURED, METADATA, REFUSED };

#define CREATE GW_AN_MESSAGES
#define COUNT GW_AN_COUNT_TOKENS
#define BOTH (GW_AN_MESSAGES | GW_AN_COUNT_TOKENS)

static const struct field {
    const char *name;
    unsigned eps;
    enum disp d;
} fields[] = {
    { "model", BOTH, HONOURED },            /* any name: the one model answers, and says so */
    { "messages", BOTH, HONOURED },
    { "system", BOTH, HONOURED },
    { "max_tokens", CREATE, HONOURED },     /* required */
    { "stop_sequences", CREATE, HONOURED },
    { "stream", CREATE, HONOURED },
    { "temperature", CREATE, HONOURED },
    { "top_p", CREATE, HONOURED },
    { "top_k", CREATE, HONOURED },
    { "tools", BOTH, HONOURED },
    { "tool_choice", BOTH, HONOURED },
    { "thinking", BOTH, HONOURED },
    { "output_config", BOTH, HONOURED },    /* format: the structured-output engine; effort: metadata */
    { "service_tier", CREATE, HONOURED },   /* auto (priority where the key has it), standard_only */
    { "speed", BOTH, HONOURED },            /* "standard"; "fast" refused */
    { "metadata", CREATE, METADATA },       /* user_id */
    { "cache_control", BOTH, METADATA },    /* the prefix cache is automatic */
    { "inference_geo", CREATE, METADATA },
    { "user_profile_id", BOTH, METADATA },
    { "workspace_id", BOTH, METADATA },
    { "container", CREATE, REFUSED },       /* code execution containers */
    { "diagnostics", CREATE, REFUSED },
    { "mcp_servers", BOTH, REFUSED },
    { "context_management", BOTH, REFUSED },
};

static const struct field *field_of(const char *name, unsigned ep)
{
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        if ((fields[i].eps & ep) && !strcmp(fields[i].name, name)) return &fields[i];
    return NULL;
}

/* ---- storage ------------------------------------------------------------------ */

static char *own(struct gw_anthropic_parsed *p, char *s)
{
    return gw_own(&p->strs, s);
}

void gw_anthropic_parsed_deinit(struct gw_anthropic_parsed *p)
{
    gw_owned_free(&p->strs);
    free(p->msgs);
    free(p->msgp);
    json_decref(p->tool_names);
    gw_params_deinit(&p->prm);
    json_decref(p->root);
    p->msgs = NULL;
    p->msgp = NULL;
    p->tool_names = p->root = NULL;
    p->n_msgs = 0;
}

/* A new chat message (role a literal); NULL when out of memory or over the
 * limit.  The pointer is valid until the next call. */
static Smollm3__ChatMessage *new_msg(struct gw_anthropic_parsed *p, const char *role)
{
    if (p->n_msgs == p->cap_msgs) {
        size_t cap = p->cap_msgs ? p->cap_msgs * 2 : 8;
        if (p->n_msgs >= MAX_CHAT_MESSAGES) return NULL;
        Smollm3__ChatMessage *n = realloc(p->msgs, cap * sizeof *n);
        if (!n) return NULL;
        p->msgs = n;
        p->cap_msgs = cap;
    }
    Smollm3__ChatMessage *m = &p->msgs[p->n_msgs++];
    smollm3__chat_message__init(m);
    m->role = (char *)role;
    m->content = "";
    return m;
}

/* The buffer's text as an owned string ("" when empty); the buffer is taken. */
static char *take(struct gw_anthropic_parsed *p, struct gw_buf *b)
{
    if (!b->p) return "";
    char *s = b->p;
    memset(b, 0, sizeof *b);
    return own(p, s);
}

/* ---- parsing helpers ------------------------------------------------------------ */

#define FAIL(key, ...)                                                        \
    do {                                                                      \
        snprintf(p->prm.err.param, sizeof p->prm.err.param, "%s", key);               \
        snprintf(why, wn, __VA_ARGS__);                                       \
        return -1;                                                            \
    } while (0)


#define get gw_get

/* The first key of object o not in known (NULL-terminated), unless unknown
 * fields are ignored. */
static const char *unknown_key(json_t *o, const char *const *known)
{
    const char *k;
    json_t *v;
    if (G.cfg.ignore_unknown) return NULL;
    json_object_foreach(o, k, v) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++) ok = !strcmp(known[i], k);
        if (!ok) return k;
    }
    return NULL;
}

/* Joins text: parts of one turn are separated by a blank line. */
static int join(struct gw_buf *b, const char *s)
{
    if (b->len && gw_buf_str(b, "\n\n")) return -1;
    if (!b->p && gw_buf_add(b, "", 0)) return -1;
    return gw_buf_str(b, s);
}

/* A text block {type: "text", text, cache_control?, citations?} appended to b. */
static int text_block(struct gw_anthropic_parsed *p, json_t *blk, const char *at, struct gw_buf *b, const char *param,
                      char *why, size_t wn)
{
    static const char *const known[] = { "type", "text", "cache_control", "citations", NULL };
    const char *bad = unknown_key(blk, known);
    if (bad) FAIL(param, "%s: unknown field '%.40s'", at, bad);
    json_t *t = json_object_get(blk, "text");
    if (!json_is_string(t)) FAIL(param, "%s.text must be a string", at);
    if (join(b, json_string_value(t))) FAIL("", "out of memory");
    return 0;
}

/* Why a block type is refused where it is. */
static int refuse_block(struct gw_anthropic_parsed *p, const char *type, const char *at, const char *param, char *why,
                        size_t wn)
{
    if (!strcmp(type, "image") || !strcmp(type, "document"))
        FAIL(param, "%s: '%s' blocks are not supported (the model reads text only)", at, type);
    FAIL(param, "%s: '%.40s' blocks are not supported here", at, type);
}

/* A string or an array of text blocks, joined into *out (owned). */
static int text_of(struct gw_anthropic_parsed *p, json_t *c, const char *at, const char *param, const char **out,
                   char *why, size_t wn)
{
    if (json_is_string(c)) {
        *out = json_string_value(c);
        return 0;
    }
    if (!json_is_array(c)) FAIL(param, "%s must be a string or an array of text blocks", at);
    struct gw_buf b = { 0 };
    size_t j;
    json_t *blk;
    char where[96];
    json_array_foreach(c, j, blk) {
        snprintf(where, sizeof where, "%s[%zu]", at, j);
        const char *type = json_string_value(json_object_get(blk, "type"));
        int rc;
        if (!json_is_object(blk) || !type) {
            snprintf(p->prm.err.param, sizeof p->prm.err.param, "%s", param);
            snprintf(why, wn, "%s must be a block with a 'type'", where);
            rc = -1;
        } else if (strcmp(type, "text")) {
            rc = refuse_block(p, type, where, param, why, wn);
        } else {
            rc = text_block(p, blk, where, &b, param, why, wn);
        }
        if (rc) {
            gw_buf_deinit(&b);
            return -1;
        }
    }
    if (!(*out = take(p, &b))) FAIL("", "out of memory");
    return 0;
}

/* ---- messages ------------------------------------------------------------------- */

/* A user turn: text blocks become one user message; each tool_result its
 * own tool message (tool_call_id, the name of the tool_use it answers,
 * content "Error: ..." when is_error), in the order they come. */
static int user_blocks(struct gw_anthropic_parsed *p, json_t *c, size_t i, char *why, size_t wn)
{
    struct gw_buf text = { 0 };
    size_t j, before = p->n_msgs;
    json_t *blk;
    char at[64];
    int rc = 0;
    json_array_foreach(c, j, blk) {
        snprintf(at, sizeof at, "messages[%zu].content[%zu]", i, j);
        const char *type = json_string_value(json_object_get(blk, "type"));
        if (!json_is_object(blk) || !type) {
            snprintf(p->prm.err.param, sizeof p->prm.err.param, "messages");
            snprintf(why, wn, "%s must be a block with a 'type'", at);
            rc = -1;
            break;
        }
        if (!strcmp(type, "text")) {
            if ((rc = text_block(p, blk, at, &text, "messages", why, wn))) break;
            continue;
        }
        if (strcmp(type, "tool_result")) {
            if (!strcmp(type, "thinking") || !strcmp(type, "redacted_thinking") || !strcmp(type, "tool_use")) {
                snprintf(p->prm.err.param, sizeof p->prm.err.param, "messages");
                snprintf(why, wn, "%s: '%s' blocks belong in assistant messages", at, type);
                rc = -1;
            } else {
                rc = refuse_block(p, type, at, "messages", why, wn);
            }
            break;
        }
        static const char *const known[] = { "type", "tool_use_id", "content", "is_error", "cache_control",
                                             "toolset_name", NULL };
        const char *bad = unknown_key(blk, known);
        json_t *id = json_object_get(blk, "tool_use_id"), *err = get(blk, "is_error");
        const char *content = "";
        char where[80];
        snprintf(where, sizeof where, "%s.content", at);
        if (bad) {
            snprintf(p->prm.err.param, sizeof p->prm.err.param, "messages");
            snprintf(why, wn, "%s: unknown field '%.40s'", at, bad);
            rc = -1;
        } else if (!json_is_string(id) || !json_string_length(id)) {
            snprintf(p->prm.err.param, sizeof p->prm.err.param, "messages");
            snprintf(why, wn, "%s.tool_use_id must be a non-empty string", at);
            rc = -1;
        } else if (err && !json_is_boolean(err)) {
            snprintf(p->prm.err.param, sizeof p->prm.err.param, "messages");
            snprintf(why, wn, "%s.is_error must be a boolean", at);
            rc = -1;
        } else if (get(blk, "content")) {
            rc = text_of(p, get(blk, "content"), where, "messages", &content, why, wn);
        }
        if (rc) break;
        if (json_is_true(err)) {
            char *e = NULL;
            if (asprintf(&e, "Error: %s", content) < 0 || !(content = own(p, e))) {
                rc = -1;
                snprintf(why, wn, "out of memory");
                break;
            }
        }
        if (text.len) {         /* text before the result: its own user turn, first */
            Smollm3__ChatMessage *m = new_msg(p, "user");
            if (!m || !(m->content = take(p, &text))) {
                rc = -1;
                snprintf(why, wn, m ? "out of memory" : "too many messages");
                break;
            }
        }
        Smollm3__ChatMessage *m = new_msg(p, "tool");
        if (!m) {
            rc = -1;
            snprintf(why, wn, "too many messages (max %d after splitting tool results)", MAX_CHAT_MESSAGES);
            break;
        }
        m->content = (char *)content;
        m->tool_call_id = (char *)json_string_value(id);
        const char *name = json_string_value(json_object_get(p->tool_names, json_string_value(id)));
        if (name) m->name = (char *)name;
    }
    if (!rc && (text.len || p->n_msgs == before)) {
        Smollm3__ChatMessage *m = new_msg(p, "user");
        if (!m || !(m->content = take(p, &text))) {
            rc = -1;
            snprintf(why, wn, m ? "out of memory" : "too many messages");
        }
    }
    gw_buf_deinit(&text);
    return rc;
}

/* An assistant turn: text blocks its content, thinking blocks its
 * reasoning_content (signatures ignored; redacted_thinking dropped),
 * tool_use blocks its tool_calls, their arguments the input object as
 * Python's json.dumps writes it (what the daemon reports as a call's
 * arguments: a call sent back is the bytes the model produced). */
static int assistant_blocks(struct gw_anthropic_parsed *p, json_t *c, size_t i, char *why, size_t wn)
{
    struct gw_buf text = { 0 }, think = { 0 };
    json_t *calls = json_array();
    size_t j;
    json_t *blk;
    char at[64];
    int rc = 0;
    if (!calls) FAIL("", "out of memory");
    json_array_foreach(c, j, blk) {
        snprintf(at, sizeof at, "messages[%zu].content[%zu]", i, j);
        const char *type = json_string_value(json_object_get(blk, "type"));
        const char *bad = NULL;
        rc = -1;
        snprintf(p->prm.err.param, sizeof p->prm.err.param, "messages");
        if (!json_is_object(blk) || !type) {
            snprintf(why, wn, "%s must be a block with a 'type'", at);
            break;
        }
        if (!strcmp(type, "text")) {
            if (text_block(p, blk, at, &text, "messages", why, wn)) break;
        } else if (!strcmp(type, "thinking")) {
            static const char *const known[] = { "type", "thinking", "signature", NULL };
            json_t *t = json_object_get(blk, "thinking"), *sig = get(blk, "signature");
            if ((bad = unknown_key(blk, known))) {
                snprintf(why, wn, "%s: unknown field '%.40s'", at, bad);
                break;
            }
            if (!json_is_string(t) || (sig && !json_is_string(sig))) {
                snprintf(why, wn, "%s: 'thinking' and 'signature' must be strings", at);
                break;
            }
            if (join(&think, json_string_value(t))) {
                snprintf(why, wn, "out of memory");
                break;
            }
        } else if (!strcmp(type, "redacted_thinking")) {
            static const char *const known[] = { "type", "data", NULL };
            if ((bad = unknown_key(blk, known))) {
                snprintf(why, wn, "%s: unknown field '%.40s'", at, bad);
                break;
            }
            if (!json_is_string(json_object_get(blk, "data"))) {
                snprintf(why, wn, "%s.data must be a string", at);
                break;
            }
        } else if (!strcmp(type, "tool_use")) {
            static const char *const known[] = { "type", "id", "name", "input", "cache_control", "caller",
                                                 "toolset_name", NULL };
            json_t *id = json_object_get(blk, "id"), *name = json_object_get(blk, "name");
            json_t *input = json_object_get(blk, "input");
            if ((bad = unknown_key(blk, known))) {
                snprintf(why, wn, "%s: unknown field '%.40s'", at, bad);
                break;
            }
            if (!json_is_string(id) || !json_string_length(id) || !json_is_string(name) ||
                !json_string_length(name) || !json_is_object(input)) {
                snprintf(why, wn, "%s: a tool_use block needs a string 'id' and 'name' and an object 'input'", at);
                break;
            }
            struct smol_chat_buf args;
            smol_chat_buf_init(&args);
            if (smol_chat_json_dump(&args, input)) {
                smol_chat_buf_deinit(&args);
                snprintf(why, wn, "%s.input: nested too deep or out of memory", at);
                break;
            }
            json_t *call = json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", id, "type", "function", "function", "name",
                                     name, "arguments", args.data ? args.data : "{}");
            smol_chat_buf_deinit(&args);
            if (!call || json_array_append_new(calls, call) ||
                json_object_set(p->tool_names, json_string_value(id), name)) {
                snprintf(why, wn, "out of memory");
                break;
            }
        } else {
            if (!strcmp(type, "tool_result")) {
                snprintf(why, wn, "%s: 'tool_result' blocks belong in user messages", at);
                break;
            }
            refuse_block(p, type, at, "messages", why, wn);
            break;
        }
        rc = 0;
    }
    if (!rc) {
        Smollm3__ChatMessage *m = new_msg(p, "assistant");
        if (!m) {
            rc = -1;
            snprintf(why, wn, "too many messages");
        } else {
            int had_think = think.len > 0;
            m->content = take(p, &text);
            if (had_think) m->reasoning_content = take(p, &think);
            if (json_array_size(calls)) m->tool_calls_json = own(p, json_dumps(calls, JSON_COMPACT));
            if (!m->content || (had_think && !m->reasoning_content) ||
                (json_array_size(calls) && !m->tool_calls_json)) {
                rc = -1;
                snprintf(why, wn, "out of memory");
            }
        }
    }
    gw_buf_deinit(&text);
    gw_buf_deinit(&think);
    json_decref(calls);
    return rc;
}

static int parse_system(struct gw_anthropic_parsed *p, json_t *root, struct gw_buf *sys, char *why, size_t wn)
{
    json_t *x = get(root, "system");
    if (!x) return 0;
    const char *t;
    if (text_of(p, x, "system", "system", &t, why, wn)) return -1;
    if (join(sys, t)) FAIL("", "out of memory");
    return 0;
}

static int parse_messages(struct gw_anthropic_parsed *p, json_t *root, char *why, size_t wn)
{
    json_t *msgs = json_object_get(root, "messages");
    struct gw_buf sys = { 0 };
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        FAIL("messages", "'messages' must be a non-empty array");
    size_t n = json_array_size(msgs);
    if (n > MAX_MESSAGES) FAIL("messages", "too many messages (max %d)", MAX_MESSAGES);
    if (!(p->tool_names = json_object())) FAIL("", "out of memory");
    if (parse_system(p, root, &sys, why, wn)) goto fail;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        static const char *const known[] = { "role", "content", NULL };
        const char *role = json_string_value(json_object_get(m, "role")), *bad;
        json_t *c = json_object_get(m, "content");
        snprintf(p->prm.err.param, sizeof p->prm.err.param, "messages");
        if (!json_is_object(m)) {
            snprintf(why, wn, "messages[%zu] must be an object", i);
            goto fail;
        }
        if ((bad = unknown_key(m, known))) {
            snprintf(why, wn, "messages[%zu]: unknown field '%.40s'", i, bad);
            goto fail;
        }
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system"))) {
            snprintf(why, wn, "messages[%zu].role must be \"user\", \"assistant\" or \"system\"", i);
            goto fail;
        }
        if (!json_is_string(c) && !json_is_array(c)) {
            snprintf(why, wn, "messages[%zu].content must be a string or an array of blocks", i);
            goto fail;
        }
        if (!strcmp(role, "system")) {      /* the template has one system turn: joined with 'system' */
            char at[40];
            const char *t;
            snprintf(at, sizeof at, "messages[%zu].content", i);
            if (text_of(p, c, at, "messages", &t, why, wn)) goto fail;
            if (join(&sys, t)) {
                snprintf(why, wn, "out of memory");
                goto fail;
            }
            continue;
        }
        if (json_is_string(c)) {
            Smollm3__ChatMessage *cm = new_msg(p, role);
            if (!cm) {
                snprintf(why, wn, "too many messages");
                goto fail;
            }
            cm->content = (char *)json_string_value(c);
            continue;
        }
        if (!strcmp(role, "user") ? user_blocks(p, c, i, why, wn) : assistant_blocks(p, c, i, why, wn)) goto fail;
    }
    if (p->n_msgs && !strcmp(p->msgs[p->n_msgs - 1].role, "assistant")) {
        gw_buf_deinit(&sys);
        FAIL("messages", "the last message is from the assistant: prefill (continuing a partial assistant "
             "answer) is not supported; end with a user message");
    }
    if (!p->n_msgs) {
        gw_buf_deinit(&sys);
        FAIL("messages", "'messages' holds no user or assistant message");
    }
    int has_sys = sys.p != NULL;
    smollm3__chat_message__init(&p->sys);
    p->sys.role = "system";
    if (has_sys && !(p->sys.content = take(p, &sys))) FAIL("", "out of memory");
    size_t total = p->n_msgs + (size_t)has_sys;
    if (!(p->msgp = calloc(total, sizeof *p->msgp))) FAIL("", "out of memory");
    size_t k = 0;
    if (has_sys) p->msgp[k++] = &p->sys;
    for (size_t i = 0; i < p->n_msgs; i++) p->msgp[k++] = &p->msgs[i];
    p->chat.n_messages = total;
    p->chat.messages = p->msgp;
    p->chat.append_to_session = 0;
    return 0;
fail:
    gw_buf_deinit(&sys);
    return -1;
}

/* ---- tools ------------------------------------------------------------------------ */

/* tools -> OpenAI function tools ({"type": "function", "function": {name,
 * description, parameters: input_schema}}), the shape the template renders
 * and the tool-call grammar reads; tool_choice -> the GenerateRequest's. */
static int parse_tools(struct gw_anthropic_parsed *p, json_t *root, char *why, size_t wn)
{
    json_t *tools = get(root, "tools"), *conv = NULL;
    if (tools && !json_is_array(tools)) FAIL("tools", "'tools' must be an array");
    size_t n = tools ? json_array_size(tools) : 0;
    if (n > MAX_TOOLS) FAIL("tools", "too many tools (max %d)", MAX_TOOLS);
    if (n && !(conv = json_array())) FAIL("", "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(tools, i);
        static const char *const known[] = { "type", "name", "description", "input_schema", "cache_control",
                                             "strict", "input_examples", "eager_input_streaming",
                                             "defer_loading", "allowed_callers", NULL };
        const char *type = json_string_value(get(t, "type")), *bad, *name;
        json_t *schema = json_object_get(t, "input_schema"), *desc = get(t, "description");
        snprintf(p->prm.err.param, sizeof p->prm.err.param, "tools");
        if (!json_is_object(t)) {
            snprintf(why, wn, "tools[%zu] must be an object", i);
            goto fail;
        }
        if (type && strcmp(type, "custom")) {
            snprintf(why, wn, "tools[%zu]: server tools ('%.40s') are not supported: only custom tools "
                     "(name, description, input_schema)", i, type);
            goto fail;
        }
        if (get(t, "type") && !type) {
            snprintf(why, wn, "tools[%zu].type must be \"custom\"", i);
            goto fail;
        }
        if ((bad = unknown_key(t, known))) {
            snprintf(why, wn, "tools[%zu]: unknown field '%.40s'", i, bad);
            goto fail;
        }
        name = json_string_value(json_object_get(t, "name"));
        if (!name || !gw_tool_name_ok(name)) {   /* Anthropic's are 1-128: the engine takes 64 */
            snprintf(why, wn, "tools[%zu].name must be 1-64 of [a-zA-Z0-9_-]", i);
            goto fail;
        }
        for (size_t k = 0; k < i; k++)
            if (!strcmp(name, json_string_value(json_object_get(json_object_get(json_array_get(conv, k),
                                                                                  "function"), "name")))) {
                snprintf(why, wn, "tools[%zu].name '%s' is used twice", i, name);
                goto fail;
            }
        if (!json_is_object(schema)) {
            snprintf(why, wn, "tools[%zu].input_schema must be a JSON Schema object", i);
            goto fail;
        }
        if (desc && !json_is_string(desc)) {
            snprintf(why, wn, "tools[%zu].description must be a string", i);
            goto fail;
        }
        json_t *x = get(t, "defer_loading");
        if (json_is_true(x)) {
            snprintf(why, wn, "tools[%zu].defer_loading: true is not supported (no tool search)", i);
            goto fail;
        }
        const char *bools[] = { "strict", "eager_input_streaming", "defer_loading" };
        for (int b = 0; b < 3; b++)
            if ((x = get(t, bools[b])) && !json_is_boolean(x)) {
                snprintf(why, wn, "tools[%zu].%s must be a boolean", i, bools[b]);
                goto fail;
            }
        json_t *fn = json_pack("{s:s}", "name", name);
        if (!fn || (desc && json_object_set(fn, "description", desc)) || json_object_set(fn, "parameters", schema) ||
            json_array_append_new(conv, json_pack("{s:s,s:o}", "type", "function", "function", fn))) {
            snprintf(why, wn, "out of memory");
            goto fail;
        }
    }

    json_t *tc = get(root, "tool_choice");
    const char *forced = NULL;  /* "required" or the tool's name */
    int none = 0;
    if (tc) {
        static const char *const known[] = { "type", "name", "disable_parallel_tool_use", NULL };
        const char *type = json_string_value(json_object_get(tc, "type")), *bad;
        json_t *dp = get(tc, "disable_parallel_tool_use");
        snprintf(p->prm.err.param, sizeof p->prm.err.param, "tool_choice");
        if (!json_is_object(tc) || !type) {
            snprintf(why, wn, "'tool_choice' must be an object with a 'type' (auto, any, tool, none)");
            goto fail;
        }
        if ((bad = unknown_key(tc, known))) {
            snprintf(why, wn, "'tool_choice': unknown field '%.40s'", bad);
            goto fail;
        }
        if (dp && !json_is_boolean(dp)) {
            snprintf(why, wn, "'tool_choice.disable_parallel_tool_use' must be a boolean");
            goto fail;
        }
        if (!strcmp(type, "auto")) {
            forced = NULL;
        } else if (!strcmp(type, "none")) {
            none = 1;
        } else if (!strcmp(type, "any")) {
            /* one call of any tool when there is one tool; several otherwise */
            forced = n == 1 && json_is_true(dp) ? json_string_value(json_object_get(
                                                      json_object_get(json_array_get(conv, 0), "function"), "name"))
                                                : "required";
        } else if (!strcmp(type, "tool")) {
            const char *name = json_string_value(json_object_get(tc, "name"));
            int found = 0;
            for (size_t k = 0; name && k < n; k++)
                found |= !strcmp(name, json_string_value(json_object_get(
                                           json_object_get(json_array_get(conv, k), "function"), "name")));
            if (!name || !found) {
                snprintf(why, wn, "'tool_choice.name' must name one of the tools");
                goto fail;
            }
            forced = name;      /* exactly one call */
        } else {
            snprintf(why, wn, "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\"");
            goto fail;
        }
        if (json_is_true(dp) && (!strcmp(type, "auto") || (forced && !strcmp(forced, "required")))) {
            snprintf(why, wn, "'tool_choice.disable_parallel_tool_use': true is not supported with \"%s\" (the "
                     "model may call several tools in one answer; use {\"type\": \"tool\", \"name\": ...})", type);
            goto fail;
        }
        if ((forced || !strcmp(type, "any")) && !n) {
            snprintf(why, wn, "'tool_choice' \"%s\" needs a non-empty 'tools' list", type);
            goto fail;
        }
    }
    if (gw_field_tools(&p->prm.gen, &p->chat, &p->strs, conv, forced, none)) {
        snprintf(why, wn, "out of memory");
        goto fail;
    }
    json_decref(conv);
    return 0;
fail:
    json_decref(conv);
    return -1;
}

/* ---- thinking, output_config ------------------------------------------------------ */

/* thinking: absent or {type: disabled} -> thinking mode off (Anthropic's
 * default); {type: enabled, budget_tokens} and {type: adaptive} -> on.
 * budget_tokens is checked (>= 1, < max_tokens) and kept: the engine has no
 * thinking budget of its own yet, so thinking spends from max_tokens. */
static int parse_thinking(struct gw_anthropic_parsed *p, json_t *root, unsigned ep, char *why, size_t wn)
{
    Smollm3__GenerateRequest *g = &p->prm.gen;
    json_t *x = get(root, "thinking");
    int on = 0;
    if (x) {
        const char *type = json_string_value(json_object_get(x, "type")), *bad;
        if (!json_is_object(x) || !type) FAIL("thinking", "'thinking' must be an object with a 'type'");
        json_t *disp = get(x, "display");
        if (!strcmp(type, "enabled") || !strcmp(type, "adaptive")) {
            static const char *const k_en[] = { "type", "budget_tokens", "display", NULL };
            static const char *const k_ad[] = { "type", "display", NULL };
            if ((bad = unknown_key(x, type[0] == 'e' ? k_en : k_ad)))
                FAIL("thinking", "'thinking': unknown field '%.40s'", bad);
            if (type[0] == 'e') {
                json_t *b = json_object_get(x, "budget_tokens");
                if (!json_is_integer(b) || json_integer_value(b) < 1 || json_integer_value(b) > 1000000)
                    FAIL("thinking", "'thinking.budget_tokens' must be an integer in [1, 1000000]");
                p->budget_tokens = json_integer_value(b);
                g->thinking_budget = (uint32_t)p->budget_tokens;   /* the daemon forces </think> after it */
                if (ep == GW_AN_MESSAGES && g->max_tokens && p->budget_tokens >= g->max_tokens)
                    FAIL("thinking", "'thinking.budget_tokens' (%lld) must be less than 'max_tokens' (%u)",
                         p->budget_tokens, g->max_tokens);
            }
            if (disp && (!json_is_string(disp) || (strcmp(json_string_value(disp), "summarized") &&
                                                   strcmp(json_string_value(disp), "omitted"))))
                FAIL("thinking", "'thinking.display' must be \"summarized\" or \"omitted\"");
            p->thinking_omitted = disp && !strcmp(json_string_value(disp), "omitted");
            on = 1;
        } else if (!strcmp(type, "disabled")) {
            static const char *const k_dis[] = { "type", NULL };
            if ((bad = unknown_key(x, k_dis))) FAIL("thinking", "'thinking': unknown field '%.40s'", bad);
        } else {
            FAIL("thinking", "'thinking.type' \"%.40s\" is not supported (enabled, adaptive, disabled)", type);
        }
    }
    if (gw_field_thinking_supported(on, G.thinking, "thinking", "thinking", &p->prm.err))
        FAIL("thinking", "%s", p->prm.err.msg);
    gw_field_thinking(g, on, 0);     /* the budget: budget_tokens above */
    return 0;
}

/* output_config: format {type: json_schema, schema} constrains the answer
 * (the structured-output engine, as response_format json_schema on chat);
 * effort is accepted and changes nothing. */
static int parse_output_config(struct gw_anthropic_parsed *p, json_t *root, char *why, size_t wn)
{
    json_t *x = get(root, "output_config");
    if (!x) return 0;
    static const char *const known[] = { "effort", "format", NULL };
    const char *bad;
    if (!json_is_object(x)) FAIL("output_config", "'output_config' must be an object");
    if ((bad = unknown_key(x, known))) FAIL("output_config", "'output_config': unknown field '%.40s'", bad);
    json_t *e = get(x, "effort");
    if (e) {
        static const char *const levels[] = { "low", "medium", "high", "xhigh", "max" };
        int ok = 0;
        for (int i = 0; i < 5 && json_is_string(e); i++) ok |= !strcmp(json_string_value(e), levels[i]);
        if (!ok) FAIL("output_config", "'output_config.effort' must be one of low, medium, high, xhigh, max");
    }
    json_t *f = get(x, "format");
    if (f) {
        static const char *const kf[] = { "type", "schema", NULL };
        const char *type = json_string_value(json_object_get(f, "type"));
        json_t *schema = json_object_get(f, "schema");
        if (!json_is_object(f) || !type || strcmp(type, "json_schema"))
            FAIL("output_config", "'output_config.format' must be {\"type\": \"json_schema\", \"schema\": {...}}");
        if ((bad = unknown_key(f, kf))) FAIL("output_config", "'output_config.format': unknown field '%.40s'", bad);
        if (!json_is_object(schema)) FAIL("output_config", "'output_config.format.schema' must be a JSON Schema object");
        if (gw_field_json_schema(&p->prm.gen, &p->strs, schema)) FAIL("", "out of memory");
    }
    return 0;
}

/* ---- the request ------------------------------------------------------------------- */

static int check_fields(struct gw_anthropic_parsed *p, json_t *root, unsigned ep, char *why, size_t wn)
{
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        const struct field *f = field_of(key, ep);
        if (!f) {
            if (G.cfg.ignore_unknown) continue;
            FAIL(key, "unknown field '%.40s' (the gateway refuses fields it does not know; "
                 "--ignore-unknown-fields accepts them)", key);
        }
        if (f->d == REFUSED && !json_is_null(v)) FAIL(key, "'%s' is not supported", key);
        if (f->d != METADATA || json_is_null(v)) continue;
        if (!strcmp(key, "metadata")) {
            static const char *const known[] = { "user_id", NULL };
            const char *bad;
            if (!json_is_object(v)) FAIL(key, "'metadata' must be an object");
            if ((bad = unknown_key(v, known))) FAIL(key, "'metadata': unknown field '%.40s' (only user_id)", bad);
            json_t *u = get(v, "user_id");
            if (u && !json_is_string(u)) FAIL(key, "'metadata.user_id' must be a string");
        } else if (!strcmp(key, "cache_control")) {
            if (!json_is_object(v)) FAIL(key, "'cache_control' must be an object");
        } else if (!json_is_string(v)) {
            FAIL(key, "'%s' must be a string", key);
        }
    }
    return 0;
}

static int parse_sampling(struct gw_anthropic_parsed *p, json_t *root, unsigned ep, char *why, size_t wn)
{
    Smollm3__GenerateRequest *g = &p->prm.gen;
    Smollm3__SamplingParams *sp = &p->prm.sampling;
    GW_FIELD_REFUSE(gw_field_model(root, &p->prm.err));
    if (ep != GW_AN_MESSAGES) return 0;
    json_t *x = get(root, "max_tokens");
    if (!x) FAIL("max_tokens", "'max_tokens' is required");
    GW_FIELD_REFUSE(gw_field_max_tokens(x, "max_tokens", g, &p->prm.err));
    GW_FIELD_REFUSE(gw_field_stream_flag(root, &p->prm.stream, &p->prm.err));
    if ((x = get(root, "temperature"))) GW_FIELD_REFUSE(gw_field_temperature(x, 1, sp, &p->prm.err));
    if ((x = get(root, "top_p"))) GW_FIELD_REFUSE(gw_field_top_p(x, sp, &p->prm.err));
    x = get(root, "top_k");
    if (x) {
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > (1 << 20))
            FAIL("top_k", "'top_k' must be an integer in [0, %d] (0: off)", 1 << 20);
        sp->top_k_opt_case = SMOLLM3__SAMPLING_PARAMS__TOP_K_OPT_TOP_K;
        sp->top_k = (int32_t)json_integer_value(x);
    }
    x = get(root, "stop_sequences");
    if (x) {
        size_t k;
        json_t *s;
        if (!json_is_array(x) || json_array_size(x) > GW_MAX_STOPS)
            FAIL("stop_sequences", "'stop_sequences' must be an array of up to %d strings", GW_MAX_STOPS);
        json_array_foreach(x, k, s) {
            if (!json_is_string(s) || !json_string_length(s))
                FAIL("stop_sequences", "'stop_sequences' entries must be non-empty strings");
            p->prm.stops[g->n_stop++] = (char *)json_string_value(s);
        }
        g->stop = p->prm.stops;
    }
    GW_FIELD_REFUSE(gw_field_service_tier(root, 1, &g->service_tier, &p->prm.err));
    return 0;
}

static int parse_request(struct gw_anthropic_parsed *p, json_t *root, unsigned ep, char *why, size_t wn)
{
    Smollm3__GenerateRequest *g = &p->prm.gen;
    smollm3__generate_request__init(g);
    smollm3__sampling_params__init(&p->prm.sampling);
    smollm3__chat_input__init(&p->chat);
    g->sampling = &p->prm.sampling;
    if (!json_is_object(root)) FAIL("", "the request body must be a JSON object");
    if (check_fields(p, root, ep, why, wn) || parse_sampling(p, root, ep, why, wn)) return -1;
    json_t *x = get(root, "speed");
    if (x && (!json_is_string(x) || strcmp(json_string_value(x), "standard")))
        FAIL("speed", "'speed' must be \"standard\" (there is no fast mode)");
    if (parse_messages(p, root, why, wn) || parse_tools(p, root, why, wn) || parse_thinking(p, root, ep, why, wn) ||
        parse_output_config(p, root, why, wn))
        return -1;
    g->input_case = SMOLLM3__GENERATE_REQUEST__INPUT_CHAT;
    g->chat = &p->chat;
    return 0;
}

#undef FAIL

int gw_anthropic_parse(struct gw_anthropic_parsed *p, const char *body, size_t len, enum gw_anthropic_ep ep,
                       char *why, size_t wn)
{
    json_error_t je;
    memset(p, 0, sizeof *p);
    p->root = json_loadb(body ? body : "", body ? len : 0, JSON_REJECT_DUPLICATES, &je);
    if (!p->root) {
        snprintf(why, wn, "invalid JSON at line %d column %d: %s", je.line, je.column, je.text);
        return GW_AN_BAD_JSON;
    }
    return parse_request(p, p->root, (unsigned)ep, why, wn) ? GW_AN_BAD_VALUE : GW_AN_OK;
}

/* ---- errors ---------------------------------------------------------------------------- */

/* Anthropic's error types by HTTP status. */
static const char *error_type(int status)
{
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

json_t *gw_anthropic_error_body(int status, const char *msg)
{
    return json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", error_type(status), "message", msg);
}

/* ---- the endpoints ------------------------------------------------------------------- */

static enum MHD_Result handle(struct gw_req *r, enum gw_anthropic_ep ep)
{
    struct gw_anthropic_parsed p;
    char why[256];
    int rc = gw_anthropic_parse(&p, r->body.p ? r->body.p : "", r->body.len, ep, why, sizeof why);
    if (rc) {
        enum MHD_Result ret = gw_core_refuse(r, rc == GW_AN_BAD_JSON, p.prm.err.param, why);
        gw_anthropic_parsed_deinit(&p);
        return ret;
    }
    enum MHD_Result ret;
    if (!gw_core_admit(r, &ret)) {
        gw_anthropic_parsed_deinit(&p);
        return ret;
    }
    Smollm3__GenerateRequest *g = &p.prm.gen;
    enum gw_kind kind = GW_ANTHROPIC_JSON;
    if (ep == GW_AN_COUNT_TOKENS) {
        /* the prompt only: no constraint to compile, one token at most, cancelled at `started` */
        kind = GW_ANTHROPIC_COUNT;
        g->max_tokens = 1;
        g->tool_choice = (char *)protobuf_c_empty_string;
        g->constraint_case = SMOLLM3__GENERATE_REQUEST__CONSTRAINT__NOT_SET;
        g->speculative_opt_case = SMOLLM3__GENERATE_REQUEST__SPECULATIVE_OPT_SPECULATIVE;
        g->speculative = 0;
    } else if (p.prm.stream) {
        kind = GW_ANTHROPIC_SSE;
    }
    struct gw_stream *s = gw_core_stream(r, &gw_proto_anthropic, kind, g, 1, "msg_", 24, "message", &ret);
    if (s) s->an_thinking_omitted = p.thinking_omitted;
    gw_anthropic_parsed_deinit(&p);
    return s ? gw_req_send(r, s) : ret;
}

enum MHD_Result gw_anthropic_messages(struct gw_req *r)
{
    return handle(r, GW_AN_MESSAGES);
}

enum MHD_Result gw_anthropic_count_tokens(struct gw_req *r)
{
    return handle(r, GW_AN_COUNT_TOKENS);
}

/* ---- events -> Anthropic -------------------------------------------------------------- */

static json_t *usage_json(const struct gw_stream *s, int final)
{
    uint32_t fresh = s->prompt_tokens > s->cached_tokens ? s->prompt_tokens - s->cached_tokens : 0;
    json_t *u = json_pack("{s:i,s:i,s:i,s:i}", "input_tokens", (int)fresh, "cache_creation_input_tokens", 0,
                          "cache_read_input_tokens", (int)s->cached_tokens, "output_tokens",
                          final ? (int)s->completion_tokens : 0);
    if (u && final)
        json_object_set_new(u, "output_tokens_details", json_pack("{s:i}", "thinking_tokens",
                                                                   (int)s->reasoning_tokens));
    if (u) json_object_set_new(u, "service_tier", json_string(gw_field_service_tier_name(s->tier, 1)));
    return u;
}

static void emit(struct gw_stream *s, const char *event, json_t *data)
{
    if (!data) return;
    char *txt = json_dumps(data, JSON_COMPACT);
    json_decref(data);
    if (!txt) return;
    gw_buf_printf(&s->out, "event: %s\ndata: %s\n\n", event, txt);
    free(txt);
}

static const char *stop_reason(const struct gw_stream *s)
{
    const char *f = s->finish ? s->finish : "stop";
    if (!strcmp(f, "length")) return "max_tokens";
    if (!strcmp(f, "tool_calls")) return "tool_use";
    return s->an_stop ? "stop_sequence" : "end_turn";
}

/* Non-streaming: the open text / thinking block's accumulated text as a block. */
static void flush_block(struct gw_stream *s)
{
    struct gw_choice *c = &s->ch[0];
    if (!c->tool_calls) c->tool_calls = json_array();
    if (s->an_block == BLK_TEXT)
        json_array_append_new(c->tool_calls, json_pack("{s:s,s:s}", "type", "text", "text",
                                                       c->content.p ? c->content.p : ""));
    else if (s->an_block == BLK_THINKING)
        json_array_append_new(c->tool_calls, json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking",
                                                       c->reasoning.p ? c->reasoning.p : "", "signature", ""));
    gw_buf_reset(&c->content);
    gw_buf_reset(&c->reasoning);
    s->an_block = BLK_NONE;
}

/* Streaming: closes the open block. */
static void close_block(struct gw_stream *s)
{
    if (s->an_block == BLK_NONE) return;
    emit(s, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", s->an_next - 1));
    s->an_block = BLK_NONE;
}

static void on_token(struct gw_stream *s, const Smollm3__Token *tk)
{
    const char *t = tk->text ? tk->text : "";
    if (!*t || tk->choice) return;
    int want = tk->channel == SMOLLM3__CHANNEL__CHANNEL_REASONING ? BLK_THINKING : BLK_TEXT;
    int sse = s->kind == GW_ANTHROPIC_SSE;
    if (s->an_block != want) {
        if (sse) {
            close_block(s);
            json_t *blk = want == BLK_TEXT ? json_pack("{s:s,s:s}", "type", "text", "text", "")
                                           : json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "",
                                                       "signature", "");
            emit(s, "content_block_start", json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index",
                                                     s->an_next, "content_block", blk));
            s->an_next++;
        } else {
            flush_block(s);
        }
        s->an_block = want;
    }
    if (want == BLK_THINKING && s->an_thinking_omitted) return;
    if (!sse) {
        gw_buf_str(want == BLK_TEXT ? &s->ch[0].content : &s->ch[0].reasoning, t);
        return;
    }
    json_t *delta = want == BLK_TEXT ? json_pack("{s:s,s:s}", "type", "text_delta", "text", t)
                                     : json_pack("{s:s,s:s}", "type", "thinking_delta", "thinking", t);
    emit(s, "content_block_delta", json_pack("{s:s,s:i,s:o}", "type", "content_block_delta", "index",
                                             s->an_next - 1, "delta", delta));
}

/* A tool call: a tool_use block whose input is the arguments object (a
 * call whose arguments are not an object, possible only without a forced
 * tool_choice, gets input {}). */
static void on_tool_call(struct gw_stream *s, const Smollm3__ToolCall *tc)
{
    json_t *args = json_loads(tc->arguments_json ? tc->arguments_json : "", 0, NULL);
    int obj = json_is_object(args);
    if (!obj) {
        json_decref(args);
        args = json_object();
    }
    const char *id = tc->id ? tc->id : "", *name = tc->name ? tc->name : "";
    if (s->kind != GW_ANTHROPIC_SSE) {
        flush_block(s);
        json_array_append_new(s->ch[0].tool_calls, json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", id,
                                                             "name", name, "input", args));
        return;
    }
    json_decref(args);
    close_block(s);
    int idx = s->an_next++;
    emit(s, "content_block_start", json_pack("{s:s,s:i,s:{s:s,s:s,s:s,s:{}}}", "type", "content_block_start",
                                             "index", idx, "content_block", "type", "tool_use", "id", id, "name",
                                             name, "input"));
    emit(s, "content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index", idx,
                                             "delta", "type", "input_json_delta", "partial_json",
                                             obj ? tc->arguments_json : "{}"));
    emit(s, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", idx));
}

void gw_anthropic_event(struct gw_stream *s, const Smollm3__Event *ev)
{
    int sse = s->kind == GW_ANTHROPIC_SSE;
    switch (ev->kind_case) {
    case SMOLLM3__EVENT__KIND_STARTED:
        if (s->kind == GW_ANTHROPIC_COUNT) {    /* the count is known: stop it before it runs */
            gw_daemon_cancel(s);
            break;
        }
        if (!sse) break;
        emit(s, "message_start", json_pack("{s:s,s:{s:s,s:s,s:s,s:[],s:s,s:n,s:n,s:o}}", "type", "message_start",
                                           "message", "id", s->id, "type", "message", "role", "assistant",
                                           "content", "model", G.model, "stop_reason", "stop_sequence", "usage",
                                           usage_json(s, 0)));
        emit(s, "ping", json_pack("{s:s}", "type", "ping"));
        break;
    case SMOLLM3__EVENT__KIND_TOKEN:
        if (s->kind != GW_ANTHROPIC_COUNT) on_token(s, ev->token);
        break;
    case SMOLLM3__EVENT__KIND_TOOL_CALL:
        if (s->kind != GW_ANTHROPIC_COUNT) on_tool_call(s, ev->tool_call);
        break;
    case SMOLLM3__EVENT__KIND_DONE: {
        const char *stop = ev->done->stop_string;
        if (stop && *stop && !s->an_stop) s->an_stop = strdup(stop);
        if (!sse) {
            if (s->kind == GW_ANTHROPIC_JSON) flush_block(s);
            break;
        }
        close_block(s);
        json_t *u = usage_json(s, 1);
        emit(s, "message_delta", json_pack("{s:s,s:{s:s,s:o},s:o}", "type", "message_delta", "delta",
                                           "stop_reason", stop_reason(s), "stop_sequence",
                                           s->an_stop ? json_string(s->an_stop) : json_null(), "usage", u));
        emit(s, "message_stop", json_pack("{s:s}", "type", "message_stop"));
        s->ended = 1;
        break;
    }
    default:
        break;
    }
}

/* An error after the response started: an `error` event ends the stream. */
void gw_anthropic_error(struct gw_stream *s, const struct gw_error *e)
{
    if (s->kind == GW_ANTHROPIC_SSE) emit(s, "error", gw_anthropic_error_body(e->status ? e->status : 500, e->msg));
    else s->err = *e;       /* queued in Anthropic's shape (http.c: the endpoint's) */
    s->ended = 1;
}

/* Non-streaming: the finished message; count_tokens: the count. */
enum MHD_Result gw_anthropic_finish(struct gw_req *r, struct gw_stream *s)
{
    json_t *body;
    if (s->kind == GW_ANTHROPIC_COUNT) {
        body = json_pack("{s:i}", "input_tokens", (int)s->prompt_tokens);
    } else {
        flush_block(s);
        body = json_pack("{s:s,s:s,s:s,s:O,s:s,s:s,s:o,s:o}", "id", s->id, "type", "message", "role", "assistant",
                         "content", s->ch[0].tool_calls, "model", G.model, "stop_reason", stop_reason(s),
                         "stop_sequence", s->an_stop ? json_string(s->an_stop) : json_null(), "usage",
                         usage_json(s, 1));
    }
    r->stream = NULL;
    s->req = NULL;
    gw_stream_free(s);
    if (!body) return gw_queue_error(r, 500, "server_error", "out_of_memory", "out of memory");
    return gw_queue_json(r, 200, body);
}

const struct gw_proto gw_proto_anthropic = { "anthropic", gw_anthropic_event, gw_anthropic_error, gw_anthropic_finish,
                                             NULL };
