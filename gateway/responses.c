/*
 * responses.c - OpenAI's Responses API: POST /v1/responses (streaming and
 * not), GET and DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel,
 * GET /v1/responses/{id}/input_items (items.c: the request's input, paged).
 *
 * A request becomes the same chat GenerateRequest /v1/chat/completions
 * sends: `instructions` the system message, `input` (a string or a list of
 * items: messages with input_text / output_text parts, function_call,
 * function_call_output, reasoning) the messages, function_call items an
 * assistant message's tool_calls (rendered back as the model wrote them:
 * daemon/text/chat_template.h), function_call_output items tool messages;
 * `tools` (type function) in chat's shape, `tool_choice`, `text.format`
 * (json_schema / json_object / text: the structured-output constraint),
 * `reasoning.effort` (none / minimal: SmolLM3's /no_think, else think with
 * chat's thinking budget for that effort, gw_effort_budget),
 * `max_output_tokens`, `temperature`, `top_p`.  Every field of the SDK's
 * ResponseCreateParams is in the table below: honoured, metadata (echoed,
 * changes nothing) or refused with a 400 naming it; unknown fields are
 * refused unless --ignore-unknown-fields.
 *
 * Stored responses (store, default true) are the daemon's, not the
 * gateway's (proto StoredResponse: the daemon keeps them in kv_spill_dir,
 * shared by the fleet, or in its memory, per tenant bounded and with a
 * TTL), so any gateway of the fleet, and this one after a restart, answers
 * GET / DELETE and previous_response_id.  When a response ends, its record
 * goes to the daemon (response_store) and the final event (the JSON answer)
 * waits for the daemon's Ack: a client that has the answer finds it stored.
 * A record holds what its turn added (the new input as chat messages, the
 * answer), the daemon session of its conversation ("resp-" + the first
 * response's id), the Response object and the request's input; its
 * predecessor is referenced by id (StoredResponse.previous_response_id),
 * so a chain of N turns stores O(N) bytes.  A follow-up first asks the
 * daemon for the chain (response_get with chain), joins the turns oldest
 * first into the whole history (without the instructions, which OpenAI does
 * not carry over) and sends it on that session: the daemon finds its
 * recorded history as a prefix of the render and continues from the
 * session's own tokens, computing only the new ones
 * (usage.input_tokens_details.cached_tokens).  Records are the request's
 * tenant's: another key's id is not found, with the same answer, byte for
 * byte, as an id that never existed.
 *
 * The gateway keeps only what dies with a connection: the responses
 * generating now (and waiting for their Ack), in a list bounded by
 * --responses-store / --responses-store-mb in per-key shares, so that
 * cancel, and a GET on this gateway, see them in progress.
 *
 * Daemon events become the Responses stream (event: TYPE / data: JSON, each
 * with sequence_number): response.created, response.in_progress, per item
 * response.output_item.added, response.content_part.added,
 * response.output_text.delta / response.reasoning_text.delta /
 * response.function_call_arguments.delta, their .done events,
 * response.content_part.done, response.output_item.done, then
 * response.completed (response.incomplete when max_output_tokens cut it,
 * error + response.failed on a failure).  Without stream the same items are
 * collected into one Response object.
 */
#include "gateway/responses.h"
#include "gateway/auth.h"
#include "gateway/items.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ITEMS 4096
#define GW_API_RESPONSES 4      /* gw_stream.api of a /v1/responses stream (beside params.h's) */
#define MAX_METADATA 16

/* ---- the field table ------------------------------------------------------ */

enum disp { OWN, METADATA, REFUSED };

static const struct { const char *name; enum disp d; } fields[] = {
    { "model", OWN },                   /* any name: the one model answers, and says so */
    { "input", OWN },
    { "instructions", OWN },
    { "tools", OWN },
    { "tool_choice", OWN },
    { "parallel_tool_calls", OWN },
    { "text", OWN },
    { "reasoning", OWN },
    { "max_output_tokens", OWN },
    { "temperature", OWN },
    { "top_p", OWN },
    { "stream", OWN },
    { "stream_options", OWN },
    { "store", OWN },
    { "previous_response_id", OWN },
    { "metadata", OWN },                /* echoed in the response */
    { "include", OWN },                 /* [] only */
    { "truncation", OWN },              /* "disabled" only */
    { "service_tier", OWN },            /* auto, default, flex, priority: the scheduling class */
    { "background", OWN },              /* false only */
    { "top_logprobs", OWN },            /* 0 only */
    { "user", METADATA },
    { "safety_identifier", METADATA },
    { "prompt_cache_key", METADATA },   /* the prefix cache is automatic */
    { "prompt_cache_retention", METADATA },
    { "prompt_cache_options", METADATA },
    { "conversation", REFUSED },        /* use previous_response_id */
    { "prompt", REFUSED },              /* stored prompt templates */
    { "max_tool_calls", REFUSED },
    { "context_management", REFUSED },
    { "moderation", REFUSED },
};

/* ---- the store -------------------------------------------------------------- */

struct gw_resp {
    struct gw_resp *prev, *next;        /* most recently used first */
    char id[48];
    char session[64];                   /* daemon session of the conversation, "" = none */
    const char *tenant;                 /* its owner (gw_auth_tenant of the request's key) */
    int slot;                           /* its key's share of the store (S.bytes, S.count) */
    size_t bytes;                       /* what it holds (json_cost), counted in S.bytes[slot] */
    json_t *obj;                        /* the Response object */
    json_t *input;                      /* the request's input items (items.c), for input_items */
    struct gw_stream *live;             /* generating now */
    struct gw_stream *owner;            /* the stream whose state points here (generating, or waiting for
                                           the daemon to store it) */
};

/* Per-stream state (gw_stream.rs). */
struct gw_resp_state {
    struct gw_resp *stored;             /* its store entry, NULL with store false (or deleted) */
    json_t *echo;                       /* request fields echoed in the Response object */
    json_t *turn;                       /* the chat messages this turn added (the record's) */
    json_t *input;                      /* the request's input, as sent (the record's: input_items) */
    char session[64];
    char prev_id[48];
    int store;
    const char *final_ev;               /* the final event, held until the daemon stored the record */
    json_t *final_obj;                  /* its Response object (kept for the JSON answer) */
    unsigned seq;                       /* next sequence_number */
    json_t *output;                     /* finished items */
    int open;                           /* 0 none, 1 message, 2 reasoning */
    int open_index;
    char open_id[64];
    struct gw_buf text;                 /* the open item's text */
    struct gw_buf content;              /* all content text (history) */
    json_t *calls;                      /* tool calls made (history) */
    int n_items;
    const char *status;                 /* final status, NULL while running */
    json_t *error;                      /* failed: {code, message} */
};

static struct {
    struct gw_resp *head, *tail;
    size_t n, total;                    /* entries, and the bytes they hold */
    size_t *bytes, *count;              /* per key (slot): [n_slots] */
    int n_slots;
} S;

/* The share of a key: slot 0 with keys off (one tenant) and for key 0. */
static int slot_of(int key)
{
    return key >= 0 ? key : 0;
}

/* The per-key counters, for every key index handed out so far (a reload adds indexes: auth.c). */
static int slots_ready(void)
{
    int n = gw_auth_n_keys() > 0 ? gw_auth_n_keys() : 1;
    if (S.bytes && S.n_slots >= n) return 0;
    size_t *b = realloc(S.bytes, (size_t)n * sizeof *b);
    if (b) S.bytes = b;
    size_t *c = b ? realloc(S.count, (size_t)n * sizeof *c) : NULL;
    if (c) S.count = c;
    if (!b || !c) return -1;
    for (int i = S.n_slots; i < n; i++) S.bytes[i] = S.count[i] = 0;
    S.n_slots = n;
    return 0;
}

/* Each key's equal share: of the keys the file holds now (revoked ones keep only what they have). */
static size_t n_shares(void) { return (size_t)(gw_auth_n_live() > 0 ? gw_auth_n_live() : 1); }

static size_t share_bytes(void) { return G.cfg.responses_store_bytes / n_shares(); }

static size_t share_count(void)
{
    size_t c = G.cfg.responses_store / n_shares();
    return c ? c : 1;
}

/* Bytes the allocator holds for v, estimated from jansson's structures (json_t headers, string
 * copies, hash table entries and keys, array slots) with malloc's rounding: an upper bound
 * for the shapes a request can build, whatever the mix of many small and few large values. */
static size_t json_cost(json_t *v)
{
    const size_t node = 48;             /* a json_t with its type's struct, rounded */
    size_t c = node, i;
    const char *k;
    json_t *x;
    if (!v) return 0;                   /* not built (out of memory): holds nothing */
    switch (json_typeof(v)) {
    case JSON_STRING:
        return c + json_string_length(v) + 1 + 16;
    case JSON_ARRAY:
        c += 8 * json_array_size(v) + 16;
        json_array_foreach(v, i, x) c += json_cost(x);
        return c;
    case JSON_OBJECT:
        c += 64;                        /* the hash table */
        json_object_foreach(v, k, x) c += 64 + strlen(k) + json_cost(x);
        return c;
    default:
        return c;
    }
}

static void account(struct gw_resp *e, int sign)
{
    size_t b = e->bytes;
    if (sign > 0) {
        S.bytes[e->slot] += b;
        S.count[e->slot]++;
        S.total += b;
    } else {
        S.bytes[e->slot] -= b;
        S.count[e->slot]--;
        S.total -= b;
    }
}

/* e's size measured again (its object and history changed). */
static void remeasure(struct gw_resp *e)
{
    account(e, -1);
    e->bytes = sizeof *e + json_cost(e->obj) + json_cost(e->input);
    account(e, +1);
}

static void store_unlink(struct gw_resp *e)
{
    account(e, -1);
    if (e->prev) e->prev->next = e->next;
    else S.head = e->next;
    if (e->next) e->next->prev = e->prev;
    else S.tail = e->prev;
    e->prev = e->next = NULL;
    S.n--;
}

static void store_front(struct gw_resp *e)
{
    account(e, +1);
    e->next = S.head;
    e->prev = NULL;
    if (S.head) S.head->prev = e;
    S.head = e;
    if (!S.tail) S.tail = e;
    S.n++;
}

static void entry_free(struct gw_resp *e)
{
    if (!e) return;
    if (e->owner && e->owner->rs) e->owner->rs->stored = NULL;
    json_decref(e->obj);
    json_decref(e->input);
    free(e);
}

static void store_remove(struct gw_resp *e)
{
    store_unlink(e);
    entry_free(e);
}

/* The entry id of tenant's, or NULL: another tenant's is not found. */
static struct gw_resp *store_find(const char *id, const char *tenant)
{
    for (struct gw_resp *e = S.head; e; e = e->next)
        if (!strcmp(e->id, id) && !strcmp(e->tenant, tenant)) {
            store_unlink(e);    /* used: to the front */
            store_front(e);
            return e;
        }
    return NULL;
}

/* Evicts the least recently used finished entries of keep's key (never keep, never another
 * key's) until the key is within its share: 0, or -1 when it still is not (keep alone, or with
 * the key's entries still generating, is over it). */
static int store_fit(struct gw_resp *keep)
{
    const int k = keep->slot;
    struct gw_resp *v = S.tail;
    while ((S.bytes[k] > share_bytes() || S.count[k] > share_count()) && v) {
        struct gw_resp *p = v->prev;
        if (v->slot == k && !v->live && v != keep) {
            store_remove(v);
            gw_metrics_store_evicted();
        }
        v = p;
    }
    return S.bytes[k] > share_bytes() || S.count[k] > share_count() ? -1 : 0;
}

/* Adds e (generating: kept while it runs, measured again when it ends). */
static void store_add(struct gw_resp *e)
{
    e->bytes = sizeof *e + json_cost(e->obj) + json_cost(e->input);
    store_front(e);
    store_fit(e);
}

size_t gw_responses_store_count(void) { return S.n; }
size_t gw_responses_store_bytes(void) { return S.total; }

static int id_ok(const char *id);

/* ---- request parsing ---------------------------------------------------------- */

/* Everything the GenerateRequest points into. */
struct parsed {
    struct gw_params prm;               /* gen, sampling; prm.err: a core rule's refusal */
    Smollm3__ChatInput chat;
    Smollm3__ChatMessage *msgs;
    Smollm3__ChatMessage **msgp;
    json_t *root;
    json_t *messages;                   /* chat messages (owned) */
    json_t *tools;                      /* chat-shaped tools (owned) */
    json_t *echo;                       /* echoed fields (owned) */
    json_t *all;                        /* the messages sent: instructions + history + input (owned) */
    json_t *dumps;                      /* tool_calls_json strings (owned) */
    struct gw_owned strs;               /* owned strings */
    int stream, store;
    char prev_id[48];                   /* previous_response_id, "" = none */
    json_t *prev_history;               /* its conversation (the daemon's chain), NULL = not fetched yet */
    size_t n_prev;                      /* of p->messages, those from prev_history */
    const char *tenant;                 /* of the request's key: previous_response_id must be its own */
    char param[64];
};

#define FAIL(key, ...)                                                        \
    do {                                                                      \
        snprintf(p->param, sizeof p->param, "%s", key);                       \
        snprintf(why, wn, __VA_ARGS__);                                       \
        return -1;                                                            \
    } while (0)

/* A refusal of the core's (core.h) in p->prm.err: its field and message. */
#define CORE(call)                                                            \
    do {                                                                      \
        if (call) FAIL(p->prm.err.param, "%s", p->prm.err.msg);               \
    } while (0)

#define get gw_get

static void parsed_deinit(struct parsed *p)
{
    free(p->msgs);
    free(p->msgp);
    gw_owned_free(&p->strs);
    gw_params_deinit(&p->prm);
    json_decref(p->messages);
    json_decref(p->tools);
    json_decref(p->echo);
    json_decref(p->all);
    json_decref(p->dumps);
    json_decref(p->root);
}

static int check_fields(struct parsed *p, json_t *root, char *why, size_t wn)
{
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        int found = -1;
        for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
            if (!strcmp(fields[i].name, key)) found = (int)i;
        if (found < 0) {
            if (G.cfg.ignore_unknown) continue;
            FAIL(key, "unknown field '%.40s' (the gateway refuses fields it does not know; "
                 "--ignore-unknown-fields accepts them)", key);
        }
        if (json_is_null(v)) continue;
        if (fields[found].d == REFUSED) FAIL(key, "'%s' is not supported", key);
        if (fields[found].d == METADATA && strcmp(key, "prompt_cache_options") && !json_is_string(v))
            FAIL(key, "'%s' must be a string", key);
        if (!strcmp(key, "prompt_cache_options") && !json_is_object(v))
            FAIL(key, "'%s' must be an object", key);
    }
    return 0;
}

/* The text of a content value: a string or a list of text parts. */
static int text_of(struct parsed *p, json_t *c, const char *where, struct gw_buf *b, char *why, size_t wn)
{
    if (json_is_string(c)) return gw_buf_add(b, json_string_value(c), json_string_length(c)) ? -1 : 0;
    if (!json_is_array(c)) FAIL("input", "%s must be a string or a list of content parts", where);
    size_t k;
    json_t *part;
    json_array_foreach(c, k, part) {
        const char *t = json_string_value(json_object_get(part, "type"));
        json_t *tx = json_object_get(part, "text");
        if (!json_is_object(part) || !t)
            FAIL("input", "%s[%zu] must be an object with a 'type'", where, k);
        if (!strcmp(t, "refusal")) tx = json_object_get(part, "refusal");
        else if (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text") &&
                 strcmp(t, "reasoning_text") && strcmp(t, "summary_text"))
            FAIL("input", "%s[%zu]: content of type '%.32s' is not supported (text only)", where, k, t);
        if (!json_is_string(tx)) FAIL("input", "%s[%zu].text must be a string", where, k);
        if (gw_buf_add(b, json_string_value(tx), json_string_length(tx))) FAIL("", "out of memory");
    }
    return 0;
}

static json_t *last_assistant_open(json_t *msgs)
{
    size_t n = json_array_size(msgs);
    json_t *m = n ? json_array_get(msgs, n - 1) : NULL;
    const char *role = json_string_value(json_object_get(m, "role"));
    return role && !strcmp(role, "assistant") ? m : NULL;
}

/* input items -> chat messages appended to p->messages. */
static int parse_input(struct parsed *p, json_t *root, char *why, size_t wn)
{
    json_t *in = get(root, "input");
    json_t *msgs = p->messages;
    if (!in) {
        if (!p->prev_id[0]) FAIL("input", "'input' is required (a string or a list of items)");
        return 0;
    }
    if (json_is_string(in)) {
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", in));
        return 0;
    }
    if (!json_is_array(in) || !json_array_size(in)) FAIL("input", "'input' must be a string or a non-empty list of items");
    if (json_array_size(in) > MAX_ITEMS) FAIL("input", "too many input items (max %d)", MAX_ITEMS);
    const char *pending_reasoning = NULL;
    struct gw_buf rbuf = { 0 };
    size_t i;
    json_t *it;
    char where[64];
    json_array_foreach(in, i, it) {
        if (!json_is_object(it)) { gw_buf_deinit(&rbuf); FAIL("input", "input[%zu] must be an object", i); }
        const char *type = json_string_value(json_object_get(it, "type"));
        const char *role = json_string_value(json_object_get(it, "role"));
        if (!type && role) type = "message";
        if (!type) { gw_buf_deinit(&rbuf); FAIL("input", "input[%zu] needs a 'type' (or a 'role')", i); }
        snprintf(where, sizeof where, "input[%zu].content", i);
        if (!strcmp(type, "message")) {
            if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") &&
                          strcmp(role, "developer"))) {
                gw_buf_deinit(&rbuf);
                FAIL("input", "input[%zu].role must be user, assistant, system or developer", i);
            }
            struct gw_buf b = { 0 };
            if (text_of(p, json_object_get(it, "content"), where, &b, why, wn)) {
                gw_buf_deinit(&b);
                gw_buf_deinit(&rbuf);
                return -1;
            }
            int sys = !strcmp(role, "system") || !strcmp(role, "developer");
            if (sys && json_array_size(msgs) > 0) {
                gw_buf_deinit(&b);
                gw_buf_deinit(&rbuf);
                FAIL("input", "input[%zu]: a %s message is only supported first (the model's template has one "
                     "system block; or use 'instructions')", i, role);
            }
            json_t *m = json_pack("{s:s,s:s}", "role", sys ? "system" : role, "content", b.p ? b.p : "");
            if (!strcmp(role, "assistant") && pending_reasoning)
                json_object_set_new(m, "reasoning_content", json_string(pending_reasoning));
            pending_reasoning = NULL;
            json_array_append_new(msgs, m);
            gw_buf_deinit(&b);
        } else if (!strcmp(type, "function_call")) {
            json_t *cid = json_object_get(it, "call_id"), *name = json_object_get(it, "name"),
                   *args = json_object_get(it, "arguments");
            if (!json_is_string(cid) || !json_is_string(name) || !json_is_string(args)) {
                gw_buf_deinit(&rbuf);
                FAIL("input", "input[%zu]: a function_call needs string 'call_id', 'name' and 'arguments'", i);
            }
            json_t *m = last_assistant_open(msgs);
            if (!m) {
                m = json_pack("{s:s,s:s}", "role", "assistant", "content", "");
                if (pending_reasoning) json_object_set_new(m, "reasoning_content", json_string(pending_reasoning));
                pending_reasoning = NULL;
                json_array_append_new(msgs, m);
            }
            json_t *tc = json_object_get(m, "tool_calls");
            if (!tc) json_object_set_new(m, "tool_calls", tc = json_array());
            json_array_append_new(tc, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", cid, "type", "function", "function",
                                                "name", name, "arguments", args));
        } else if (!strcmp(type, "function_call_output")) {
            json_t *cid = json_object_get(it, "call_id");
            struct gw_buf b = { 0 };
            snprintf(where, sizeof where, "input[%zu].output", i);
            if (!json_is_string(cid) || text_of(p, json_object_get(it, "output"), where, &b, why, wn)) {
                gw_buf_deinit(&b);
                gw_buf_deinit(&rbuf);
                if (!json_is_string(cid))
                    FAIL("input", "input[%zu]: a function_call_output needs a string 'call_id' and 'output'", i);
                return -1;
            }
            json_array_append_new(msgs, json_pack("{s:s,s:O,s:s}", "role", "tool", "tool_call_id", cid, "content",
                                                  b.p ? b.p : ""));
            gw_buf_deinit(&b);
        } else if (!strcmp(type, "reasoning")) {
            /* kept as the next assistant message's reasoning_content; the
             * template does not render it (the session keeps the real tokens) */
            json_t *c = json_object_get(it, "content");
            gw_buf_reset(&rbuf);
            if (c && !json_is_null(c) && text_of(p, c, where, &rbuf, why, wn)) {
                gw_buf_deinit(&rbuf);
                return -1;
            }
            pending_reasoning = rbuf.len ? rbuf.p + rbuf.off : "";
        } else {
            gw_buf_deinit(&rbuf);
            FAIL("input", "input[%zu]: items of type '%.40s' are not supported (message, function_call, "
                 "function_call_output, reasoning)", i, type);
        }
    }
    gw_buf_deinit(&rbuf);
    return 0;
}

/* tools (function only) in chat's shape; tool_choice; parallel_tool_calls. */
static int parse_tools(struct parsed *p, json_t *root, char *why, size_t wn)
{
    json_t *tools = get(root, "tools");
    size_t n = 0;
    if (tools) {
        if (!json_is_array(tools)) FAIL("tools", "'tools' must be an array");
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            const char *type = json_string_value(json_object_get(t, "type"));
            if (!json_is_object(t) || !type) FAIL("tools", "tools[%zu] must be an object with a 'type'", i);
            if (strcmp(type, "function"))
                FAIL("tools", "tools[%zu]: tools of type '%.40s' are not supported (function only)", i, type);
            const char *name = json_string_value(json_object_get(t, "name"));
            if (!gw_tool_name_ok(name)) FAIL("tools", "tools[%zu].name must be 1-64 of [a-zA-Z0-9_-]", i);
            json_t *fn = json_pack("{s:s}", "name", name);
            json_t *d = get(t, "description"), *par = get(t, "parameters"), *strict = get(t, "strict");
            if (d && !json_is_string(d)) { json_decref(fn); FAIL("tools", "tools[%zu].description must be a string", i); }
            if (par && !json_is_object(par)) { json_decref(fn); FAIL("tools", "tools[%zu].parameters must be an object", i); }
            if (strict && !json_is_boolean(strict)) { json_decref(fn); FAIL("tools", "tools[%zu].strict must be a boolean", i); }
            if (d) json_object_set(fn, "description", d);
            if (par) json_object_set(fn, "parameters", par);
            json_array_append_new(p->tools, json_pack("{s:s,s:o}", "type", "function", "function", fn));
            n++;
        }
        json_object_set(p->echo, "tools", tools);
    }
    json_t *tc = get(root, "tool_choice");
    int none = 0;
    const char *forced = NULL;
    if (tc) {
        const char *v = json_string_value(tc);
        if (v && !strcmp(v, "none")) none = 1;
        else if (v && !strcmp(v, "required")) forced = "required";
        else if (v && !strcmp(v, "auto")) ;
        else if (json_is_object(tc) && json_is_string(json_object_get(tc, "type")) &&
                 !strcmp(json_string_value(json_object_get(tc, "type")), "function")) {
            forced = json_string_value(json_object_get(tc, "name"));
            if (!gw_tool_name_ok(forced)) FAIL("tool_choice", "'tool_choice.name' must be 1-64 of [a-zA-Z0-9_-]");
        } else {
            FAIL("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                 "\"name\": ...} (hosted and allowed_tools choices are not supported)");
        }
        CORE(gw_field_forced_needs_tools(forced, n, &p->prm.err));
        json_object_set(p->echo, "tool_choice", tc);
    }
    CORE(gw_field_parallel_tool_calls(root, &p->prm.err));
    if (gw_field_tools(&p->prm.gen, &p->chat, &p->strs, p->tools, forced, none)) FAIL("", "out of memory");
    return 0;
}

/* text.format -> the constraint; reasoning.effort -> thinking. */
static int parse_text_reasoning(struct parsed *p, json_t *root, char *why, size_t wn)
{
    json_t *text = get(root, "text");
    if (text) {
        if (!json_is_object(text)) FAIL("text", "'text' must be an object");
        const char *k;
        json_t *v;
        json_object_foreach(text, k, v) {
            if (json_is_null(v)) continue;
            if (!strcmp(k, "verbosity")) {
                if (!json_is_string(v) || strcmp(json_string_value(v), "medium"))
                    FAIL("text.verbosity", "'text.verbosity' other than \"medium\" is not supported");
            } else if (strcmp(k, "format")) {
                FAIL("text", "unknown field 'text.%.40s'", k);
            }
        }
        json_t *f = get(text, "format");
        if (f) {
            const char *t = json_string_value(json_object_get(f, "type"));
            if (!json_is_object(f) || !t) FAIL("text.format", "'text.format' must be an object with a 'type'");
            if (!strcmp(t, "json_object")) {
                gw_field_json_object(&p->prm.gen);
            } else if (!strcmp(t, "json_schema")) {
                json_t *sch = json_object_get(f, "schema"), *strict = json_object_get(f, "strict");
                if (!json_is_string(json_object_get(f, "name")))
                    FAIL("text.format", "'text.format' of type json_schema needs a 'name'");
                if (!json_is_object(sch) && !json_is_boolean(sch))
                    FAIL("text.format", "'text.format.schema' must be a JSON Schema object");
                if (strict && !json_is_null(strict) && !json_is_boolean(strict))
                    FAIL("text.format", "'text.format.strict' must be a boolean");
                if (gw_field_json_schema(&p->prm.gen, &p->strs, sch)) FAIL("", "out of memory");
            } else if (strcmp(t, "text")) {
                FAIL("text.format", "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\", not "
                     "\"%.20s\"", t);
            }
        }
        json_object_set(p->echo, "text", text);
    }
    json_t *r = get(root, "reasoning");
    if (r) {
        if (!json_is_object(r)) FAIL("reasoning", "'reasoning' must be an object");
        const char *k;
        json_t *v;
        json_object_foreach(r, k, v) {
            if (json_is_null(v) || !strcmp(k, "effort")) continue;
            FAIL("reasoning", "'reasoning.%.40s' is not supported (the reasoning text comes back as reasoning_text; "
                 "only 'effort' is honoured)", k);
        }
        json_t *e = get(r, "effort");
        if (e) {
            int on;
            unsigned budget;    /* low 512 ... xhigh 16384 (util.h) */
            CORE(gw_field_effort(e, "reasoning.effort", "reasoning", 0, &on, &budget, &p->prm.err));
            CORE(gw_field_thinking_supported(on, G.thinking, "reasoning.effort", "reasoning", &p->prm.err));
            gw_field_thinking(&p->prm.gen, on, budget);
        }
        json_object_set(p->echo, "reasoning", r);
    }
    return 0;
}

static int parse_scalars(struct parsed *p, json_t *root, char *why, size_t wn)
{
    CORE(gw_field_model(root, &p->prm.err));
    CORE(gw_field_stream_flag(root, &p->stream, &p->prm.err));
    json_t *x = get(root, "stream_options");
    if (x) {
        const char *k;
        json_t *v;
        if (!json_is_object(x)) FAIL("stream_options", "'stream_options' must be an object");
        json_object_foreach(x, k, v) {
            if (strcmp(k, "include_obfuscation")) FAIL("stream_options", "unknown field 'stream_options.%.40s'", k);
            if (json_is_true(v))
                FAIL("stream_options", "'stream_options.include_obfuscation': true is not supported");
        }
    }
    x = get(root, "store");
    if (x && !json_is_boolean(x)) FAIL("store", "'store' must be a boolean");
    p->store = !json_is_false(x);
    x = get(root, "background");
    if (x && !json_is_boolean(x)) FAIL("background", "'background' must be a boolean");
    if (json_is_true(x)) FAIL("background", "'background': true is not supported (stream, or wait for the answer)");
    x = get(root, "include");
    if (x && (!json_is_array(x) || json_array_size(x)))
        FAIL("include", "'include' is not supported (only [] : the reasoning text is always included)");
    x = get(root, "truncation");
    if (x && (!json_is_string(x) || strcmp(json_string_value(x), "disabled")))
        FAIL("truncation", "'truncation' other than \"disabled\" is not supported (a prompt over the context is "
             "refused)");
    CORE(gw_field_service_tier(root, 0, &p->prm.gen.service_tier, &p->prm.err));
    x = get(root, "top_logprobs");
    if (x && (!json_is_integer(x) || json_integer_value(x) != 0))
        FAIL("top_logprobs", "'top_logprobs' is not supported on /v1/responses (use /v1/chat/completions)");
    x = get(root, "max_output_tokens");
    if (x) {
        CORE(gw_field_max_tokens(x, "max_output_tokens", &p->prm.gen, &p->prm.err));
        json_object_set(p->echo, "max_output_tokens", x);
    }
    x = get(root, "temperature");
    if (x) {
        CORE(gw_field_temperature(x, 2, &p->prm.sampling, &p->prm.err));
        json_object_set(p->echo, "temperature", x);
    }
    x = get(root, "top_p");
    if (x) {
        CORE(gw_field_top_p(x, &p->prm.sampling, &p->prm.err));
        json_object_set(p->echo, "top_p", x);
    }
    x = get(root, "metadata");
    if (x) {
        const char *k;
        json_t *v;
        if (!json_is_object(x) || json_object_size(x) > MAX_METADATA)
            FAIL("metadata", "'metadata' must be an object of at most %d string values", MAX_METADATA);
        json_object_foreach(x, k, v)
            if (strlen(k) > 64 || !json_is_string(v) || json_string_length(v) > 512)
                FAIL("metadata", "'metadata' keys are at most 64 characters, values strings of at most 512");
        json_object_set(p->echo, "metadata", x);
    }
    x = get(root, "instructions");
    if (x) {
        if (!json_is_string(x)) FAIL("instructions", "'instructions' must be a string");
        json_object_set(p->echo, "instructions", x);
    }
    x = get(root, "previous_response_id");
    if (x) {
        if (!json_is_string(x)) FAIL("previous_response_id", "'previous_response_id' must be a string");
        /* found in the daemon's store once the rest is known good (gw_responses_create) */
        struct gw_resp *here = id_ok(json_string_value(x)) ? store_find(json_string_value(x), p->tenant) : NULL;
        if (here && here->live)
            FAIL("previous_response_id", "Previous response with id '%.60s' is still in progress", json_string_value(x));
        if (!id_ok(json_string_value(x)))
            FAIL("previous_response_id", "Previous response with id '%.60s' not found (stored responses are "
                 "kept in a bounded store, the oldest dropped first)", json_string_value(x));
        snprintf(p->prev_id, sizeof p->prev_id, "%s", json_string_value(x));
        json_object_set(p->echo, "previous_response_id", x);
    }
    return 0;
}

/* The chat messages as the protobuf's ChatMessages (pointing into p->messages). */
static int to_chat(struct parsed *p, char *why, size_t wn)
{
    json_t *all = p->all = json_array();
    json_t *ins = get(p->root, "instructions");
    json_t *m0 = json_array_get(p->messages, 0);
    const char *r0 = json_string_value(json_object_get(m0, "role"));
    if (ins && r0 && !strcmp(r0, "system")) {
        /* one system block (the template's): the instructions, then the input's system text */
        char *both = NULL;
        if (asprintf(&both, "%s\n\n%s", json_string_value(ins), json_string_value(json_object_get(m0, "content"))) < 0)
            FAIL("", "out of memory");
        json_array_append_new(all, json_pack("{s:s,s:s}", "role", "system", "content", both));
        free(both);
        for (size_t i = 1; i < json_array_size(p->messages); i++)
            json_array_append(all, json_array_get(p->messages, i));
    } else {
        if (ins) json_array_append_new(all, json_pack("{s:s,s:O}", "role", "system", "content", ins));
        json_array_extend(all, p->messages);
    }
    size_t n = json_array_size(all);
    if (!n) FAIL("input", "nothing to answer: 'input' is empty");
    p->msgs = calloc(n, sizeof *p->msgs);
    p->msgp = calloc(n, sizeof *p->msgp);
    if (!p->msgs || !p->msgp) FAIL("", "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(all, i);
        Smollm3__ChatMessage *cm = &p->msgs[i];
        smollm3__chat_message__init(cm);
        p->msgp[i] = cm;
        cm->role = (char *)json_string_value(json_object_get(m, "role"));
        cm->content = (char *)json_string_value(json_object_get(m, "content"));
        if (!cm->content) cm->content = "";
        json_t *rc = json_object_get(m, "reasoning_content");
        if (json_is_string(rc)) cm->reasoning_content = (char *)json_string_value(rc);
        json_t *tcid = json_object_get(m, "tool_call_id");
        if (json_is_string(tcid)) cm->tool_call_id = (char *)json_string_value(tcid);
        json_t *tc = json_object_get(m, "tool_calls");
        if (tc) {
            char *d = json_dumps(tc, JSON_COMPACT);
            json_t *js = d ? json_string(d) : NULL;
            free(d);
            if (!js || json_array_append_new(p->dumps, js)) FAIL("", "out of memory");
            cm->tool_calls_json = (char *)json_string_value(js);
        }
    }
    p->chat.messages = p->msgp;
    p->chat.n_messages = n;
    p->chat.append_to_session = 0;
    return 0;
}

/* prev_history: previous_response_id's conversation, fetched from the daemon; NULL before (a
 * request naming one is then checked but not made into chat messages: p->prev_id says to fetch). */
static int parse_request(struct parsed *p, const char *body, size_t len, const char *tenant, json_t *prev_history,
                         char *why, size_t wn)
{
    json_error_t je;
    memset(p, 0, sizeof *p);
    p->tenant = tenant;
    p->prev_history = prev_history;
    smollm3__generate_request__init(&p->prm.gen);
    smollm3__sampling_params__init(&p->prm.sampling);
    smollm3__chat_input__init(&p->chat);
    p->prm.gen.sampling = &p->prm.sampling;
    p->messages = json_array();
    p->tools = json_array();
    p->echo = json_object();
    p->dumps = json_array();
    p->root = json_loadb(body ? body : "", body ? len : 0, JSON_REJECT_DUPLICATES, &je);
    if (!p->root) {
        snprintf(why, wn, "invalid JSON at line %d column %d: %s", je.line, je.column, je.text);
        snprintf(p->param, sizeof p->param, "\x01json");
        return -1;
    }
    if (!json_is_object(p->root)) FAIL("", "the request body must be a JSON object");
    if (check_fields(p, p->root, why, wn) || parse_scalars(p, p->root, why, wn)) return -1;
    if (p->prev_id[0] && prev_history) {
        json_t *h = json_deep_copy(prev_history);
        if (!h || json_array_extend(p->messages, h)) {
            json_decref(h);
            snprintf(why, wn, "out of memory");
            return -1;
        }
        json_decref(h);
        p->n_prev = json_array_size(p->messages);
    }
    p->prm.gen.input_case = SMOLLM3__GENERATE_REQUEST__INPUT_CHAT;
    p->prm.gen.chat = &p->chat;
    if (parse_input(p, p->root, why, wn) || parse_tools(p, p->root, why, wn) ||
        parse_text_reasoning(p, p->root, why, wn))
        return -1;
    if (p->prev_id[0] && !prev_history) return 0;   /* the rest once the history is there */
    return to_chat(p, why, wn);
}

#undef FAIL

int gw_responses_parse(const char *body, size_t len, void (*check)(Smollm3__GenerateRequest *g), char *param,
                       size_t pn, char *why, size_t wn)
{
    struct parsed p;
    json_t *chain = json_pack("[{s:s,s:s},{s:s,s:s}]", "role", "user", "content", "Hi", "role", "assistant",
                              "content", "Hello.");
    if (!chain) {
        snprintf(why, wn, "out of memory");
        snprintf(param, pn, "%s", "");
        return -1;
    }
    int rc = parse_request(&p, body, len, "", chain, why, wn);
    snprintf(param, pn, "%s", p.param);
    if (!rc && check) check(&p.prm.gen);
    parsed_deinit(&p);
    json_decref(chain);
    return rc;
}

/* ---- the Response object -------------------------------------------------------- */

static json_t *usage_json(const struct gw_stream *s)
{
    return json_pack("{s:i,s:{s:i,s:i},s:i,s:{s:i},s:i}", "input_tokens", (int)s->prompt_tokens,
                     "input_tokens_details", "cached_tokens", (int)s->cached_tokens, "cache_write_tokens", 0,
                     "output_tokens", (int)s->completion_tokens, "output_tokens_details", "reasoning_tokens",
                     (int)s->reasoning_tokens, "total_tokens", (int)(s->prompt_tokens + s->completion_tokens));
}

static json_t *response_json(const struct gw_stream *s, const char *status, int with_usage)
{
    const struct gw_resp_state *rs = s->rs;
    json_t *e = rs->echo;
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:O,s:b,s:b,s:s,s:b}", "id", s->id, "object", "response",
                          "created_at", (json_int_t)s->created, "status", status, "model", G.model, "output",
                          rs->output, "parallel_tool_calls", 1, "store", rs->store, "truncation", "disabled",
                          "background", 0);
    static const char *const echoed[] = { "instructions", "metadata", "temperature", "top_p", "max_output_tokens",
                                          "previous_response_id", "reasoning", "text" };
    for (size_t i = 0; i < sizeof echoed / sizeof *echoed; i++) {
        json_t *v = json_object_get(e, echoed[i]);
        json_object_set(o, echoed[i], v ? v : json_null());
    }
    if (!json_object_get(e, "text")) json_object_set_new(o, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
    if (!json_object_get(e, "reasoning"))
        json_object_set_new(o, "reasoning", json_pack("{s:n,s:n}", "effort", "summary"));
    if (!json_object_get(e, "metadata")) json_object_set_new(o, "metadata", json_object());
    json_t *tc = json_object_get(e, "tool_choice");
    json_object_set_new(o, "tool_choice", tc ? json_incref(tc) : json_string("auto"));
    json_t *tools = json_object_get(e, "tools");
    json_object_set_new(o, "tools", tools ? json_incref(tools) : json_array());
    json_object_set_new(o, "error", rs->error ? json_incref(rs->error) : json_null());
    json_object_set_new(o, "incomplete_details", !strcmp(status, "incomplete")
                                                     ? json_pack("{s:s}", "reason", "max_output_tokens")
                                                     : json_null());
    json_object_set_new(o, "usage", with_usage ? usage_json(s) : json_null());
    json_object_set_new(o, "service_tier", json_string(gw_field_service_tier_name(s->tier, 0)));
    if (strcmp(status, "in_progress") && strcmp(status, "queued"))
        json_object_set_new(o, "completed_at", json_integer((json_int_t)time(NULL)));
    return o;
}

/* ---- events ------------------------------------------------------------------------ */

/* Writes one SSE event (streams only) with its type and sequence number; consumes d. */
static void emit(struct gw_stream *s, const char *type, json_t *d)
{
    struct gw_resp_state *rs = s->rs;
    if (s->kind != GW_OPENAI_SSE || !d) {
        json_decref(d);
        return;
    }
    json_object_set_new(d, "type", json_string(type));
    json_object_set_new(d, "sequence_number", json_integer(rs->seq++));
    char *txt = json_dumps(d, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(d);
    if (txt) gw_buf_printf(&s->out, "event: %s\ndata: %s\n\n", type, txt);
    free(txt);
}

static void item_id(struct gw_stream *s, const char *prefix, char *out, size_t n)
{
    /* unique and unguessable enough: the response id's random part + the index */
    snprintf(out, n, "%s_%s_%d", prefix, s->id + 5, s->rs->n_items);
}

static void close_item(struct gw_stream *s, const char *status)
{
    struct gw_resp_state *rs = s->rs;
    if (!rs->open) return;
    const char *t = rs->text.p ? rs->text.p : "";
    json_t *item;
    if (rs->open == 1) {
        emit(s, "response.output_text.done", json_pack("{s:s,s:i,s:i,s:s,s:[]}", "item_id", rs->open_id,
                                                       "output_index", rs->open_index, "content_index", 0, "text", t,
                                                       "logprobs"));
        json_t *part = json_pack("{s:s,s:s,s:[],s:[]}", "type", "output_text", "text", t, "annotations", "logprobs");
        emit(s, "response.content_part.done", json_pack("{s:s,s:i,s:i,s:O}", "item_id", rs->open_id, "output_index",
                                                        rs->open_index, "content_index", 0, "part", part));
        item = json_pack("{s:s,s:s,s:s,s:s,s:[o]}", "id", rs->open_id, "type", "message", "role", "assistant",
                         "status", status, "content", part);
    } else {
        emit(s, "response.reasoning_text.done", json_pack("{s:s,s:i,s:i,s:s}", "item_id", rs->open_id,
                                                          "output_index", rs->open_index, "content_index", 0, "text",
                                                          t));
        json_t *part = json_pack("{s:s,s:s}", "type", "reasoning_text", "text", t);
        emit(s, "response.content_part.done", json_pack("{s:s,s:i,s:i,s:O}", "item_id", rs->open_id, "output_index",
                                                        rs->open_index, "content_index", 0, "part", part));
        item = json_pack("{s:s,s:s,s:[],s:[o],s:s}", "id", rs->open_id, "type", "reasoning", "summary", "content",
                         part, "status", status);
    }
    emit(s, "response.output_item.done", json_pack("{s:i,s:O}", "output_index", rs->open_index, "item", item));
    json_array_append_new(rs->output, item);
    rs->open = 0;
    gw_buf_reset(&rs->text);
}

static void open_item(struct gw_stream *s, int kind)
{
    struct gw_resp_state *rs = s->rs;
    close_item(s, "completed");
    rs->open = kind;
    rs->open_index = (int)json_array_size(rs->output);
    item_id(s, kind == 1 ? "msg" : "rs", rs->open_id, sizeof rs->open_id);
    rs->n_items++;
    if (kind == 1) {
        emit(s, "response.output_item.added", json_pack("{s:i,s:{s:s,s:s,s:s,s:s,s:[]}}", "output_index",
                                                        rs->open_index, "item", "id", rs->open_id, "type", "message",
                                                        "role", "assistant", "status", "in_progress", "content"));
        emit(s, "response.content_part.added",
             json_pack("{s:s,s:i,s:i,s:{s:s,s:s,s:[],s:[]}}", "item_id", rs->open_id, "output_index", rs->open_index,
                       "content_index", 0, "part", "type", "output_text", "text", "", "annotations", "logprobs"));
    } else {
        emit(s, "response.output_item.added", json_pack("{s:i,s:{s:s,s:s,s:[],s:[],s:s}}", "output_index",
                                                        rs->open_index, "item", "id", rs->open_id, "type",
                                                        "reasoning", "summary", "content", "status", "in_progress"));
        emit(s, "response.content_part.added",
             json_pack("{s:s,s:i,s:i,s:{s:s,s:s}}", "item_id", rs->open_id, "output_index", rs->open_index,
                       "content_index", 0, "part", "type", "reasoning_text", "text", ""));
    }
}

static void on_tool_call(struct gw_stream *s, const Smollm3__ToolCall *tc)
{
    struct gw_resp_state *rs = s->rs;
    close_item(s, "completed");
    char id[64];
    item_id(s, "fc", id, sizeof id);
    rs->n_items++;
    int idx = (int)json_array_size(rs->output);
    const char *name = tc->name ? tc->name : "", *args = tc->arguments_json ? tc->arguments_json : "";
    const char *cid = tc->id ? tc->id : "";
    emit(s, "response.output_item.added",
         json_pack("{s:i,s:{s:s,s:s,s:s,s:s,s:s,s:s}}", "output_index", idx, "item", "id", id, "type", "function_call",
                   "call_id", cid, "name", name, "arguments", "", "status", "in_progress"));
    emit(s, "response.function_call_arguments.delta",
         json_pack("{s:s,s:i,s:s}", "item_id", id, "output_index", idx, "delta", args));
    emit(s, "response.function_call_arguments.done",
         json_pack("{s:s,s:i,s:s,s:s}", "item_id", id, "output_index", idx, "name", name, "arguments", args));
    json_t *item = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "id", id, "type", "function_call", "call_id", cid, "name",
                             name, "arguments", args, "status", "completed");
    emit(s, "response.output_item.done", json_pack("{s:i,s:O}", "output_index", idx, "item", item));
    json_array_append_new(rs->output, item);
    if (!rs->calls) rs->calls = json_array();
    json_array_append_new(rs->calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", cid, "type", "function", "function",
                                               "name", name, "arguments", args));
}

/* The assistant message of this answer (its text and tool calls). */
static json_t *answer_message(struct gw_resp_state *rs)
{
    json_t *m = json_pack("{s:s,s:s}", "role", "assistant", "content", rs->content.p ? rs->content.p : "");
    if (m && rs->calls) json_object_set(m, "tool_calls", rs->calls);
    return m;
}

/* Sends s's record to the daemon (response_store, a follow-up of the stream): the turn's new
 * messages (and the answer, when there is one), the session, the Response object, the input.
 * 0 when sent (the Ack comes to gw_responses_event), -1 when not. */
static int persist(struct gw_stream *s, json_t *obj, const char *status)
{
    struct gw_resp_state *rs = s->rs;
    json_t *msgs = rs->turn ? json_deep_copy(rs->turn) : json_array();
    if (msgs && (!strcmp(status, "completed") || !strcmp(status, "incomplete")))
        json_array_append_new(msgs, answer_message(rs));
    json_t *rec = msgs ? json_pack("{s:i,s:O,s:o,s:s,s:O?}", "v", 1, "response", obj, "messages", msgs, "session",
                                   rs->session, "input", rs->input)
                       : NULL;
    char *d = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
    json_decref(rec);
    if (!d) return -1;
    Smollm3__StoredResponse sr = SMOLLM3__STORED_RESPONSE__INIT;
    sr.id = s->id;
    sr.previous_response_id = rs->prev_id;
    sr.record.data = (uint8_t *)d;
    sr.record.len = strlen(d);
    Smollm3__ResponseStoreRequest st = SMOLLM3__RESPONSE_STORE_REQUEST__INIT;
    st.tenant = (char *)s->tenant;
    st.response = &sr;
    Smollm3__Request req = SMOLLM3__REQUEST__INIT;
    req.kind_case = SMOLLM3__REQUEST__KIND_RESPONSE_STORE;
    req.response_store = &st;
    int rc = gw_daemon_send_follow(s, &req);
    free(d);
    return rc;
}

/* The final event (consumes obj; SSE: the stream then ends). */
static void final_emit(struct gw_stream *s, const char *ev, json_t *obj)
{
    emit(s, ev, json_pack("{s:o}", "response", obj));
    if (s->kind == GW_OPENAI_SSE) s->ended = 1;
}

/* The end: status, the local entry's object, the record to the daemon; the final event follows
 * once the daemon stored it (stored()), or now when nothing is stored. */
static void finish(struct gw_stream *s, const char *status)
{
    struct gw_resp_state *rs = s->rs;
    if (rs->status) return;
    rs->status = status;
    close_item(s, !strcmp(status, "completed") ? "completed" : "incomplete");
    json_t *obj = response_json(s, status, strcmp(status, "failed") != 0);
    const char *ev = !strcmp(status, "completed")    ? "response.completed"
                     : !strcmp(status, "incomplete") ? "response.incomplete"
                                                     : "response.failed";
    if (rs->stored) {
        json_decref(rs->stored->obj);
        rs->stored->obj = json_incref(obj);
        rs->stored->live = NULL;
        remeasure(rs->stored);
        if (!persist(s, obj, status)) {
            rs->final_ev = ev;
            rs->final_obj = obj;
            return;
        }
        gw_log(4, "response %s: its record could not be sent to the daemon: not stored", s->id);
        store_remove(rs->stored);
    }
    final_emit(s, ev, obj);
}

/* The daemon's answer to persist: the final event goes out (stored or not: the answer stands). */
static void stored(struct gw_stream *s, const Smollm3__Event *ev)
{
    struct gw_resp_state *rs = s->rs;
    if (ev->kind_case == SMOLLM3__EVENT__KIND_ERROR)
        gw_log(4, "response %s not stored: %s", s->id,
               ev->error && ev->error->message ? ev->error->message : "error");
    if (rs->stored) store_remove(rs->stored);   /* the daemon's now (or lost): not this gateway's */
    const char *fe = rs->final_ev;
    rs->final_ev = NULL;
    if (s->kind == GW_OPENAI_SSE) {
        final_emit(s, fe, rs->final_obj);
        rs->final_obj = NULL;
    }
}

void gw_responses_event(struct gw_stream *s, const Smollm3__Event *ev)
{
    struct gw_resp_state *rs = s->rs;
    if (rs && rs->final_ev && (ev->kind_case == SMOLLM3__EVENT__KIND_ACK || ev->kind_case == SMOLLM3__EVENT__KIND_ERROR)) {
        stored(s, ev);          /* the daemon's answer to the record's write (persist) */
        return;
    }
    if (!rs || rs->status) return;
    switch (ev->kind_case) {
    case SMOLLM3__EVENT__KIND_STARTED:
        emit(s, "response.created", json_pack("{s:o}", "response", response_json(s, "in_progress", 0)));
        emit(s, "response.in_progress", json_pack("{s:o}", "response", response_json(s, "in_progress", 0)));
        break;
    case SMOLLM3__EVENT__KIND_TOKEN: {
        const Smollm3__Token *tk = ev->token;
        const char *t = tk->text ? tk->text : "";
        if (!*t) break;
        int kind = tk->channel == SMOLLM3__CHANNEL__CHANNEL_REASONING ? 2 : 1;
        if (rs->open != kind) open_item(s, kind);
        gw_buf_str(&rs->text, t);
        if (kind == 1) gw_buf_str(&rs->content, t);
        emit(s, kind == 1 ? "response.output_text.delta" : "response.reasoning_text.delta",
             kind == 1 ? json_pack("{s:s,s:i,s:i,s:s,s:[]}", "item_id", rs->open_id, "output_index", rs->open_index,
                                   "content_index", 0, "delta", t, "logprobs")
                       : json_pack("{s:s,s:i,s:i,s:s}", "item_id", rs->open_id, "output_index", rs->open_index,
                                   "content_index", 0, "delta", t));
        break;
    }
    case SMOLLM3__EVENT__KIND_TOOL_CALL:
        on_tool_call(s, ev->tool_call);
        break;
    case SMOLLM3__EVENT__KIND_DONE: {
        const char *f = smol_client_finish_name(ev->done->finish_reason);
        finish(s, !strcmp(f, "length") ? "incomplete" : !strcmp(f, "cancelled") ? "cancelled" : "completed");
        break;
    }
    default:
        break;
    }
}

/* A failure after the stream started (or of a non-streaming request, which
 * then answers with the plain HTTP error: daemon.c's err_status). */
void gw_responses_error(struct gw_stream *s, const struct gw_error *e)
{
    struct gw_resp_state *rs = s->rs;
    const char *code = e->code ? e->code : "internal";
    if (s->kind == GW_OPENAI_SSE && rs && !rs->status) {
        emit(s, "error", json_pack("{s:s,s:s,s:n}", "code", code, "message", e->msg, "param"));
        json_decref(rs->error);
        rs->error = json_pack("{s:s,s:s}", "code", code, "message", e->msg);
        finish(s, "failed");
    } else if (s->kind != GW_OPENAI_SSE) {
        s->err = *e;
    }
    if (!(rs && rs->final_ev)) s->ended = 1;  /* else once the record is stored */
}

enum MHD_Result gw_responses_finish_json(struct gw_req *r, struct gw_stream *s)
{
    struct gw_resp_state *rs = s->rs;
    if (!rs->status) finish(s, s->finish && !strcmp(s->finish, "length") ? "incomplete" : "completed");
    json_t *obj = rs->final_obj  ? json_incref(rs->final_obj)
                  : rs->stored ? json_incref(rs->stored->obj)
                               : response_json(s, rs->status, 1);
    r->stream = NULL;
    s->req = NULL;
    gw_stream_free(s);
    return gw_queue_json(r, 200, obj);
}

void gw_responses_stream_free(struct gw_stream *s)
{
    struct gw_resp_state *rs = s->rs;
    if (!rs) return;
    /* generating, or waiting for its Ack: either way only this connection's, never kept here */
    if (rs->stored) store_remove(rs->stored);
    json_decref(rs->echo);
    json_decref(rs->turn);
    json_decref(rs->input);
    json_decref(rs->final_obj);
    json_decref(rs->output);
    json_decref(rs->calls);
    json_decref(rs->error);
    gw_buf_deinit(&rs->text);
    gw_buf_deinit(&rs->content);
    free(rs);
    s->rs = NULL;
}

/* ---- questions to the daemon's store -------------------------------------------------- */

/* What a store query stream (GW_QUERY, s->api) asks for. */
enum { Q_GET = 1, Q_DELETE, Q_CANCEL, Q_PREV, Q_ITEMS };
#define MAX_CHAIN 4096          /* turns of a conversation fetched for previous_response_id */

/* The daemon's reply, kept in s->reply: {"ok": bool, "code", "msg", "records": [{id, prev, rec}]}. */
static void query_event(struct gw_stream *s, const Smollm3__Event *ev)
{
    json_t *res = json_object();
    if (ev->kind_case == SMOLLM3__EVENT__KIND_ERROR) {
        json_object_set_new(res, "code", json_integer(ev->error ? (int)ev->error->code : SMOL_EINTERNAL));
        json_object_set_new(res, "msg", json_string(ev->error && ev->error->message ? ev->error->message : ""));
    } else {
        json_t *recs = json_array();
        for (size_t i = 0; ev->kind_case == SMOLLM3__EVENT__KIND_RESPONSES && i < ev->responses->n_responses; i++) {
            const Smollm3__StoredResponse *sr = ev->responses->responses[i];
            json_t *rec = json_loadb((const char *)sr->record.data, sr->record.len, 0, NULL);
            json_array_append_new(recs, json_pack("{s:s,s:s,s:o*}", "id", sr->id, "prev", sr->previous_response_id,
                                                  "rec", rec));
        }
        json_object_set_new(res, "records", recs);
        json_object_set_new(res, "ok", json_true());
    }
    json_decref(s->reply);
    s->reply = res;
}

static enum MHD_Result not_found(struct gw_req *r, const char *id)
{
    return gw_queue_error_param(r, 404, "invalid_request_error", "not_found", "response_id",
                                "Response with id '%.60s' not found (stored responses are kept in a bounded "
                                "store, the oldest dropped first)", id);
}

static enum MHD_Result create(struct gw_req *r, json_t *prev_history, const char *prev_session);
static enum MHD_Result input_items(struct gw_req *r, json_t *items);

/* previous_response_id's conversation: the chain's turns (newest first in recs), oldest first, as
 * chat messages, and the session of the conversation; NULL when the chain is broken (a turn no
 * longer stored) or a record is not one of ours. */
static json_t *chain_history(json_t *recs, char *session, size_t sn)
{
    size_t n = json_array_size(recs);
    json_t *last = json_array_get(recs, n - 1);
    if (!n || *json_string_value(json_object_get(last, "prev"))) return NULL;   /* broken */
    json_t *h = json_array();
    for (size_t i = n; h && i-- > 0;) {
        json_t *m = json_object_get(json_object_get(json_array_get(recs, i), "rec"), "messages");
        if (!json_is_array(m) || json_array_extend(h, m)) {
            json_decref(h);
            return NULL;
        }
    }
    const char *ses = json_string_value(json_object_get(json_object_get(json_array_get(recs, 0), "rec"), "session"));
    snprintf(session, sn, "%s", ses ? ses : "");
    return h;
}

/* The daemon answered: the HTTP answer (or, for previous_response_id, the generation). */
static enum MHD_Result query_finish(struct gw_req *r, struct gw_stream *s)
{
    json_t *res = json_incref(s->reply);
    const int mode = s->api;
    char id[64];
    snprintf(id, sizeof id, "%s", s->id);
    r->stream = NULL;
    s->req = NULL;
    gw_stream_free(s);
    enum MHD_Result ret;
    json_t *recs = json_object_get(res, "records");
    json_t *rec = json_object_get(json_array_get(recs, 0), "rec");
    int code = (int)json_integer_value(json_object_get(res, "code"));
    if (!json_is_true(json_object_get(res, "ok")) && code != SMOL_ENOSESSION) {
        struct gw_error e;      /* the store failed (I/O, the daemon gone): the daemon's code and words */
        gw_error_set(&e, code > 0 && code < SMOL_ERR_COUNT ? (enum smol_err)code : SMOL_EINTERNAL, NULL, "%s",
                     json_string_value(json_object_get(res, "msg")));
        ret = gw_queue_gw_error(r, &e);
    } else if (mode == Q_PREV) {
        char session[64] = "";
        json_t *h = rec ? chain_history(recs, session, sizeof session) : NULL;
        if (!h)
            ret = gw_core_refuse(r, 0, "previous_response_id",
                                 rec ? "Previous response's conversation is no longer stored whole (an earlier "
                                       "turn was deleted or dropped)"
                                     : "Previous response not found (stored responses are kept in a bounded "
                                       "store, the oldest dropped first)");
        else
            ret = create(r, h, session);
        json_decref(h);
    } else if (!json_is_true(json_object_get(res, "ok")) || (mode != Q_DELETE && !json_is_object(rec))) {
        ret = not_found(r, id);
    } else if (mode == Q_DELETE) {
        ret = gw_queue_json(r, 200, json_pack("{s:s,s:s,s:b}", "id", id, "object", "response", "deleted", 1));
    } else if (mode == Q_ITEMS) {
        char stem[64];          /* the items' ids, as made when it was stored (items.h) */
        snprintf(stem, sizeof stem, "%s", id + 5);
        json_t *items = gw_items_from_input(json_object_get(rec, "input"), stem);
        ret = items ? input_items(r, items) : gw_queue_error(r, 500, "server_error", "out_of_memory", "out of memory");
        json_decref(items);
    } else if (mode == Q_CANCEL) {
        ret = gw_queue_error(r, 400, "invalid_request_error", "not_cancellable",
                             "Response '%s' is not in progress (status %s): nothing to cancel", id,
                             json_string_value(json_object_get(json_object_get(rec, "response"), "status")));
    } else {
        ret = gw_queue_json(r, 200, json_incref(json_object_get(rec, "response")));
    }
    json_decref(res);
    return ret;
}

static const struct gw_proto query_proto = { "responses-store", query_event, NULL, query_finish, NULL };

/* Asks the daemon's store (mode: Q_*) about id for r's tenant; the answer comes to query_finish. */
static enum MHD_Result ask_store(struct gw_req *r, int mode, const char *id)
{
    enum MHD_Result ret;
    if (!gw_core_admit(r, &ret)) return ret;
    Smollm3__Request req = SMOLLM3__REQUEST__INIT;
    Smollm3__ResponseGetRequest get = SMOLLM3__RESPONSE_GET_REQUEST__INIT;
    Smollm3__ResponseDeleteRequest del = SMOLLM3__RESPONSE_DELETE_REQUEST__INIT;
    get.tenant = del.tenant = (char *)gw_auth_tenant(r->key);
    get.id = del.id = (char *)id;
    get.chain = mode == Q_PREV ? MAX_CHAIN : 0;
    if (mode == Q_DELETE) {
        req.kind_case = SMOLLM3__REQUEST__KIND_RESPONSE_DELETE;
        req.response_delete = &del;
    } else {
        req.kind_case = SMOLLM3__REQUEST__KIND_RESPONSE_GET;
        req.response_get = &get;
    }
    struct gw_stream *s = gw_stream_new(GW_QUERY);
    if (!s) return gw_queue_error(r, 500, "server_error", "out_of_memory", "out of memory");
    s->proto = &query_proto;
    s->api = mode;
    snprintf(s->id, sizeof s->id, "%s", id);
    s->terminal = 1;            /* nothing generates: only the follow-up's reply is awaited */
    s->req = r;
    s->key = r->key;
    r->stream = s;
    if (gw_daemon_send_follow(s, &req)) {
        r->stream = NULL;
        s->req = NULL;
        gw_stream_free(s);
        return gw_queue_error(r, 503, "server_error", "daemon_unavailable", "the inference daemon is not reachable");
    }
    r->waiting = 1;
    return gw_req_wait(r);
}

/* ---- the endpoints ------------------------------------------------------------------ */

static int id_ok(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n < 6 || n > 47 || strncmp(id, "resp_", 5)) return 0;
    for (size_t i = 5; i < n; i++)
        if (!isalnum((unsigned char)id[i])) return 0;
    return 1;
}

enum MHD_Result gw_responses_create(struct gw_req *r)
{
    return create(r, NULL, NULL);
}

/* prev_history, prev_session: previous_response_id's conversation, once fetched (query_finish). */
static enum MHD_Result create(struct gw_req *r, json_t *prev_history, const char *prev_session)
{
    struct parsed p;
    char why[320];
    enum MHD_Result ret;
    if (parse_request(&p, r->body.p ? r->body.p : "", r->body.len, gw_auth_tenant(r->key), prev_history, why,
                      sizeof why)) {
        ret = gw_core_refuse(r, !strcmp(p.param, "\x01json"), p.param, why);
        parsed_deinit(&p);
        return ret;
    }
    if (p.prev_id[0] && !prev_history) {
        /* the conversation so far is the daemon's: fetched, then this again (query_finish) */
        char prev[48];
        snprintf(prev, sizeof prev, "%s", p.prev_id);
        parsed_deinit(&p);
        return ask_store(r, Q_PREV, prev);
    }
    if (!gw_core_admit(r, &ret)) {
        parsed_deinit(&p);
        return ret;
    }
    /* a follow-up runs on its conversation's daemon session (below) */
    if (prev_session && *prev_session) p.prm.gen.session_id = (char *)prev_session;
    struct gw_stream *s = gw_core_stream(r, &gw_proto_responses, p.stream ? GW_OPENAI_SSE : GW_OPENAI_JSON,
                                         &p.prm.gen, 1, "resp_", 32, "response", &ret);
    if (!s) {
        parsed_deinit(&p);
        return ret;
    }
    struct gw_resp_state *rs = s->rs = calloc(1, sizeof *rs);
    if (!rs) {
        gw_stream_free(s);
        parsed_deinit(&p);
        return gw_queue_error(r, 500, "server_error", "out_of_memory", "out of memory");
    }
    s->api = GW_API_RESPONSES;
    rs->store = p.store;
    rs->echo = json_incref(p.echo);
    rs->output = json_array();
    /* this turn's own messages: a chain is stored by reference, each record its turn */
    rs->turn = json_array();
    for (size_t i = p.n_prev; i < json_array_size(p.messages); i++)
        json_array_append(rs->turn, json_array_get(p.messages, i));
    rs->input = json_incref(get(p.root, "input"));
    snprintf(rs->prev_id, sizeof rs->prev_id, "%s", p.prev_id);
    /* the daemon session of the conversation, "resp-" + its first response's
     * id: the first response runs without one (the daemon keeps its KV and
     * history as a cached prefix, which a client sending the whole history
     * back also hits), its follow-ups on it (a new session starts from that
     * prefix and persists, on disk too with kv_spill_dir) */
    if (prev_session && *prev_session) snprintf(rs->session, sizeof rs->session, "%s", prev_session);
    else snprintf(rs->session, sizeof rs->session, "resp-%s", s->id + 5);
    if (p.store && G.cfg.responses_store && G.cfg.responses_store_bytes) {
        struct gw_resp *e = slots_ready() ? NULL : calloc(1, sizeof *e);
        if (!e) {
            gw_stream_free(s);
            parsed_deinit(&p);
            return gw_queue_error(r, 500, "server_error", "out_of_memory", "out of memory");
        }
        snprintf(e->id, sizeof e->id, "%s", s->id);
        snprintf(e->session, sizeof e->session, "%s", rs->session);
        e->tenant = s->tenant;
        e->slot = slot_of(s->key);
        e->live = e->owner = s;
        e->input = gw_items_from_input(get(p.root, "input"), s->id + 5);
        e->obj = response_json(s, "in_progress", 0);
        store_add(e);
        rs->stored = e;
    }
    parsed_deinit(&p);
    return gw_req_send(r, s);
}

/* GET /v1/responses/{id}/input_items: a page of items (the stored input, made whole) (query: limit, order, after,
 * before, as OpenAI's lists; include is refused, as in the body). */
static enum MHD_Result input_items(struct gw_req *r, json_t *items)
{
    const char *q_limit = MHD_lookup_connection_value(r->mc, MHD_GET_ARGUMENT_KIND, "limit");
    const char *param = NULL;   /* set by a refusal; NULL after a NULL page: out of memory */
    char why[160] = "", *end;
    long limit = 20;
    if (q_limit) {
        limit = strtol(q_limit, &end, 10);
        if (!*q_limit || *end) limit = 0;   /* not a number: refused below */
    }
    if (MHD_lookup_connection_value(r->mc, MHD_GET_ARGUMENT_KIND, "include") ||
        MHD_lookup_connection_value(r->mc, MHD_GET_ARGUMENT_KIND, "include[]"))
        return gw_queue_error_param(r, 400, "invalid_request_error", "unsupported_parameter", "include",
                                    "'include' is not supported (the items are listed whole)");
    json_t *page = gw_items_page(items, limit, MHD_lookup_connection_value(r->mc, MHD_GET_ARGUMENT_KIND, "order"),
                                 MHD_lookup_connection_value(r->mc, MHD_GET_ARGUMENT_KIND, "after"),
                                 MHD_lookup_connection_value(r->mc, MHD_GET_ARGUMENT_KIND, "before"), &param, why,
                                 sizeof why);
    if (!page && !param) return gw_queue_error(r, 500, "server_error", "out_of_memory", "out of memory");
    if (!page) return gw_queue_error_param(r, 400, "invalid_request_error", "invalid_value", param, "%s", why);
    return gw_queue_json(r, 200, page);
}

/* GET / DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel, GET
 * /v1/responses/{id}/input_items: a response generating on this gateway is answered here, any
 * other by the daemon's store. */
enum MHD_Result gw_responses_one(struct gw_req *r, const char *method, const char *arg)
{
    char id[64];
    const char *slash = strchr(arg, '/');
    size_t n = slash ? (size_t)(slash - arg) : strlen(arg);
    int cancel = slash && !strcmp(slash, "/cancel");
    int items = slash && !strcmp(slash, "/input_items");
    if (slash && !cancel && !items)
        return gw_queue_error(r, 404, "not_found_error", "not_found", "unknown route");
    if (n >= sizeof id) return gw_queue_error(r, 404, "not_found_error", "not_found", "unknown route");
    memcpy(id, arg, n);
    id[n] = 0;
    const char *want = cancel ? "POST" : NULL;
    if (items && strcmp(method, "GET") && strcmp(method, "HEAD"))
        return gw_queue_error(r, 405, "invalid_request_error", "method_not_allowed", "method %s not allowed here",
                              method);
    if (!items && (want ? strcmp(method, want) : (strcmp(method, "GET") && strcmp(method, "HEAD") && strcmp(method, "DELETE"))))
        return gw_queue_error(r, 405, "invalid_request_error", "method_not_allowed", "method %s not allowed here",
                              method);
    /* another key's response is not found: the same answer as an id never stored */
    if (!id_ok(id)) return not_found(r, id);
    struct gw_resp *e = store_find(id, gw_auth_tenant(r->key));
    const int del = !strcmp(method, "DELETE");
    if (!e || (del && !e->live)) {
        /* not generating here: the daemon's (a DELETE of one waiting for its Ack goes after the
         * write on the same link, so it removes what was written) */
        if (e) store_remove(e);
        return ask_store(r, cancel ? Q_CANCEL : del ? Q_DELETE : items ? Q_ITEMS : Q_GET, id);
    }
    if (items) return input_items(r, e->input);
    if (cancel) {
        /* only a response still generating can be cancelled; background
         * mode (the only one OpenAI cancels) is not offered */
        if (!e->live)
            return gw_queue_error(r, 400, "invalid_request_error", "not_cancellable",
                                  "Response '%s' is not in progress (status %s): nothing to cancel", id,
                                  json_string_value(json_object_get(e->obj, "status")));
        struct gw_stream *s = e->live;
        gw_daemon_cancel(s);
        json_t *out;
        if (s->rs) {
            finish(s, "cancelled");
            out = s->rs->final_obj ? json_incref(s->rs->final_obj)
                  : s->rs->stored  ? json_incref(s->rs->stored->obj)
                                   : response_json(s, "cancelled", 1);
        } else {
            out = json_incref(e->obj);
        }
        if (s->req) gw_req_resume(s->req);
        return gw_queue_json(r, 200, out);
    }
    if (del) {                  /* generating: it finishes without being stored */
        struct gw_stream *s = e->live;
        s->rs->stored = NULL;
        e->live = e->owner = NULL;
        store_remove(e);
        return gw_queue_json(r, 200, json_pack("{s:s,s:s,s:b}", "id", id, "object", "response", "deleted", 1));
    }
    return gw_queue_json(r, 200, json_incref(e->obj));
}

/* Test and shutdown: frees every stored response. */
void gw_responses_store_clear(void)
{
    while (S.head) store_remove(S.head);
    free(S.bytes);
    free(S.count);
    S.bytes = S.count = NULL;
    S.n_slots = 0;
}

const struct gw_proto gw_proto_responses = { "responses", gw_responses_event, gw_responses_error,
                                             gw_responses_finish_json, gw_responses_stream_free };
