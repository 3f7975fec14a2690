/*
 * completions.c - POST /v1/completions (raw prompt text or token ids, no
 * chat template), POST /tokenize and POST /detokenize (llama.cpp server's
 * shapes), GET /v1/models/{id}.
 *
 * A completion is a GenerateRequest with `text` (special tokens in the
 * prompt are parsed, as llama.cpp's /completion does: the prompt is the
 * caller's own) or `tokens` input; its events become text_completion
 * objects in openai.c.  The daemon parses no reasoning or tool-call tags in
 * raw prompts, so the text comes back byte for byte.  Tokenize and
 * detokenize are one-reply daemon queries (a GW_QUERY stream): the reply
 * becomes the response body here.
 */
#include "gateway/completions.h"
#include "gateway/openai.h"
#include "gateway/params.h"

#include <stdlib.h>
#include <string.h>

/* ---- /v1/completions ------------------------------------------------------ */

/* A refusal (params.h's convention) with code (FAILC) or SMOL_EINVAL (FAIL). */
#define FAILC(code, key, ...)                                                 \
    do {                                                                      \
        gw_error_set(&p->err, code, key, __VA_ARGS__);                        \
        snprintf(why, wn, "%s", p->err.msg);                                  \
        return -1;                                                            \
    } while (0)
#define FAIL(key, ...) FAILC(SMOL_EINVAL, key, __VA_ARGS__)

/* prompt: a string, an array of token ids, or a one-element array of
 * either (a batch of several prompts is refused: send one request each). */
static int parse_prompt(struct gw_params *p, json_t *root, Smollm3__TokenInput *ti, int32_t **ids,
                        char *why, size_t wn)
{
    json_t *x = json_object_get(root, "prompt");
    if (json_is_array(x) && json_array_size(x) == 1 &&
        (json_is_string(json_array_get(x, 0)) || json_is_array(json_array_get(x, 0))))
        x = json_array_get(x, 0);
    if (json_is_string(x)) {
        char m[SMOL_ERRLEN];
        enum smol_err e;
        if (!*json_string_value(x)) FAIL("prompt", "'prompt' must not be empty");
        if ((e = smol_rule_prompt_bytes(strlen(json_string_value(x)), m))) FAILC(e, "prompt", "%s", m);
        p->gen.input_case = SMOLLM3__GENERATE_REQUEST__INPUT_TEXT;
        p->gen.text = (char *)json_string_value(x);
        return 0;
    }
    if (!json_is_array(x) || !json_array_size(x))
        FAIL("prompt", "'prompt' must be a non-empty string or array of token ids");
    size_t n = json_array_size(x);
    if (json_is_string(json_array_get(x, 0)) || json_is_array(json_array_get(x, 0)))
        FAILC(SMOL_EUNSUPPORTED, "prompt", "'prompt' with %zu prompts is not supported (one prompt per request)", n);
    if (!(*ids = malloc(n * sizeof **ids))) FAILC(SMOL_ENOMEM, "", "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(x, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            FAIL("prompt", "'prompt[%zu]' must be a token id (a non-negative integer)", i);
        (*ids)[i] = (int32_t)json_integer_value(v);
    }
    smollm3__token_input__init(ti);
    ti->n_ids = n;
    ti->ids = *ids;
    p->gen.input_case = SMOLLM3__GENERATE_REQUEST__INPUT_TOKENS;
    p->gen.tokens = ti;
    return 0;
}

static int parse_completion(struct gw_params *p, json_t *root, Smollm3__TokenInput *ti, int32_t **ids,
                            char *why, size_t wn)
{
    if (gw_params_parse(p, root, GW_API_COMPLETIONS, G.cfg.ignore_unknown, why, wn)) return -1;
    if (parse_prompt(p, root, ti, ids, why, wn)) return -1;
    json_t *x = json_object_get(root, "echo");
    if (x && !json_is_null(x) && !json_is_boolean(x)) FAIL("echo", "'echo' must be a boolean");
    if (json_is_true(x)) FAILC(SMOL_EUNSUPPORTED, "echo", "'echo': true is not supported");
    x = json_object_get(root, "suffix");
    if (x && !json_is_null(x) && !(json_is_string(x) && !*json_string_value(x)))
        FAILC(SMOL_EUNSUPPORTED, "suffix", "'suffix' is not supported (no fill-in-the-middle)");
    x = json_object_get(root, "best_of");
    long long n = p->gen.n ? p->gen.n : 1;
    if (x && !json_is_null(x) && !(json_is_integer(x) && json_integer_value(x) == n))
        FAILC(SMOL_EUNSUPPORTED, "best_of", "'best_of' other than n is not supported (no server-side ranking)");
    return 0;
}

#undef FAIL

enum MHD_Result gw_completions(struct gw_req *r)
{
    json_error_t je;
    json_t *root = json_loadb(r->body.p ? r->body.p : "", r->body.len, JSON_REJECT_DUPLICATES, &je);
    struct gw_error e;
    if (!root) {
        gw_error_json(&e, &je);
        return gw_queue_gw_error(r, &e);
    }
    struct gw_params p = { 0 };
    Smollm3__TokenInput ti;
    int32_t *ids = NULL;
    char why[256];
    enum MHD_Result ret;
    if (parse_completion(&p, root, &ti, &ids, why, sizeof why)) {
        ret = gw_params_error(r, &p, why);
        goto out;
    }
    ret = gw_openai_start(r, GW_API_COMPLETIONS, &p);
out:
    gw_params_deinit(&p);
    free(ids);
    json_decref(root);
    return ret;
}

/* ---- /tokenize, /detokenize ---------------------------------------------- */

static void query_event(struct gw_stream *s, const Smollm3__Event *ev);
static enum MHD_Result query_finish(struct gw_req *r, struct gw_stream *s);
/* A query's reply: kept as the response (no error event: a refusal is the HTTP error). */
static const struct gw_proto query_proto = { "query", query_event, NULL, query_finish, NULL };

/* Sends a one-reply query and waits; the reply comes to query_event (below).  Admitted as every
 * request to the daemon is (gw_core_admit): it counts in flight until its reply. */
static enum MHD_Result send_query(struct gw_req *r, Smollm3__Request *req)
{
    enum MHD_Result ret;
    if (!gw_core_admit(r, &ret)) return ret;
    struct gw_stream *s = gw_stream_new(GW_QUERY);
    if (s) s->proto = &query_proto;
    if (!s) return gw_queue_error(r, 500, "server_error", "out_of_memory", "out of memory");
    req->protocol_version = SMOLLM3__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
    req->request_id = s->rid;
    s->packed_len = smollm3__request__get_packed_size(req);
    s->packed = malloc(s->packed_len ? s->packed_len : 1);
    if (!s->packed) {
        gw_stream_free(s);
        return gw_queue_error(r, 500, "server_error", "out_of_memory", "out of memory");
    }
    smollm3__request__pack(req, s->packed);
    return gw_req_send(r, s);
}

static json_t *body_object(struct gw_req *r, enum MHD_Result *ret)
{
    json_error_t je;
    json_t *root = json_loadb(r->body.p ? r->body.p : "", r->body.len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        struct gw_error e;
        gw_error_json(&e, &je);
        *ret = gw_queue_gw_error(r, &e);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        *ret = gw_queue_error(r, 400, "invalid_request_error", "invalid_argument", "the request body must be a JSON object");
        return NULL;
    }
    return root;
}

/* Unknown keys of a small fixed set: refused unless --ignore-unknown-fields. */
static const char *unknown_key(json_t *root, const char *const *known)
{
    const char *k;
    json_t *v;
    if (G.cfg.ignore_unknown) return NULL;
    json_object_foreach(root, k, v) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++) ok = !strcmp(known[i], k);
        if (!ok) return k;
    }
    return NULL;
}

static int opt_bool(json_t *root, const char *key, int dflt, int *out)
{
    json_t *x = json_object_get(root, key);
    if (!x || json_is_null(x)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_boolean(x)) return -1;
    *out = json_is_true(x);
    return 0;
}

enum MHD_Result gw_tokenize(struct gw_req *r)
{
    enum MHD_Result ret;
    json_t *root = body_object(r, &ret);
    if (!root) return ret;
    static const char *const known[] = { "content", "add_special", "parse_special", "with_pieces", NULL };
    const char *bad = unknown_key(root, known);
    json_t *c = json_object_get(root, "content");
    Smollm3__TokenizeRequest t = SMOLLM3__TOKENIZE_REQUEST__INIT;
    int add, parse, pieces;
    if (bad) {
        ret = gw_queue_error_param(r, 400, "invalid_request_error", "invalid_argument", bad, "unknown field '%.40s'", bad);
    } else if (!json_is_string(c)) {
        ret = gw_queue_error_param(r, 400, "invalid_request_error", "invalid_argument", "content", "'content' must be a string");
    } else if (opt_bool(root, "add_special", 0, &add) || opt_bool(root, "parse_special", 1, &parse) ||
               opt_bool(root, "with_pieces", 0, &pieces)) {
        ret = gw_queue_error(r, 400, "invalid_request_error", "invalid_argument",
                             "'add_special', 'parse_special' and 'with_pieces' must be booleans");
    } else {
        t.content = (char *)json_string_value(c);
        t.add_special = add;
        t.parse_special = parse;
        t.with_pieces = pieces;
        Smollm3__Request req = SMOLLM3__REQUEST__INIT;
        req.kind_case = SMOLLM3__REQUEST__KIND_TOKENIZE;
        req.tokenize = &t;
        ret = send_query(r, &req);
    }
    json_decref(root);
    return ret;
}

enum MHD_Result gw_detokenize(struct gw_req *r)
{
    enum MHD_Result ret;
    json_t *root = body_object(r, &ret);
    if (!root) return ret;
    static const char *const known[] = { "tokens", NULL };
    const char *bad = unknown_key(root, known);
    json_t *a = json_object_get(root, "tokens");
    if (bad || !json_is_array(a)) {
        ret = bad ? gw_queue_error_param(r, 400, "invalid_request_error", "invalid_argument", bad, "unknown field '%.40s'", bad)
                  : gw_queue_error_param(r, 400, "invalid_request_error", "invalid_argument", "tokens",
                                         "'tokens' must be an array of token ids");
        json_decref(root);
        return ret;
    }
    size_t n = json_array_size(a);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    int ok = ids != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        json_t *v = json_array_get(a, i);
        ok = json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= INT32_MAX;
        if (ok) ids[i] = (int32_t)json_integer_value(v);
    }
    if (!ok) {
        ret = gw_queue_error_param(r, 400, "invalid_request_error", "invalid_argument", "tokens",
                                   "'tokens' must be an array of token ids (non-negative integers)");
    } else {
        Smollm3__DetokenizeRequest d = SMOLLM3__DETOKENIZE_REQUEST__INIT;
        d.n_ids = n;
        d.ids = ids;
        Smollm3__Request req = SMOLLM3__REQUEST__INIT;
        req.kind_case = SMOLLM3__REQUEST__KIND_DETOKENIZE;
        req.detokenize = &d;
        ret = send_query(r, &req);
    }
    free(ids);
    json_decref(root);
    return ret;
}

/* A piece as llama.cpp shows it: its text when it is valid UTF-8, else its bytes. */
static json_t *piece_json(const ProtobufCBinaryData *b)
{
    struct gw_buf t = { 0 };
    gw_utf8_lossy(&t, b->data, b->len);
    json_t *j;
    if (t.len == b->len && (!b->len || !memcmp(t.p, b->data, b->len))) {
        j = json_string(t.p ? t.p : "");
    } else {
        j = json_array();
        for (size_t i = 0; i < b->len; i++) json_array_append_new(j, json_integer(b->data[i]));
    }
    gw_buf_deinit(&t);
    return j;
}

/* The daemon's reply to a query stream: kept as the response body. */
static void query_event(struct gw_stream *s, const Smollm3__Event *ev)
{
    if (ev->kind_case == SMOLLM3__EVENT__KIND_TOKENIZED) {
        const Smollm3__TokenizeReply *t = ev->tokenized;
        json_t *a = json_array();
        for (size_t i = 0; i < t->n_ids; i++)
            json_array_append_new(a, i < t->n_pieces ? json_pack("{s:i,s:o}", "id", (int)t->ids[i], "piece",
                                                                 piece_json(&t->pieces[i]))
                                                     : json_integer(t->ids[i]));
        s->reply = json_pack("{s:o}", "tokens", a);
    } else if (ev->kind_case == SMOLLM3__EVENT__KIND_DETOKENIZED) {
        struct gw_buf t = { 0 };
        gw_utf8_lossy(&t, ev->detokenized->content.data, ev->detokenized->content.len);
        s->reply = json_pack("{s:s}", "content", t.p ? t.p : "");
        gw_buf_deinit(&t);
    } else {
        gw_error_http(&s->err, 500, "server_error", "internal", NULL, "unexpected reply from the daemon");
    }
}

static enum MHD_Result query_finish(struct gw_req *r, struct gw_stream *s)
{
    json_t *body = s->reply ? json_incref(s->reply) : json_object();
    int st = s->err.status ? s->err.status : 200;
    r->stream = NULL;
    s->req = NULL;
    gw_stream_free(s);
    return gw_queue_json(r, st, body);
}

/* ---- /v1/models/{id} ------------------------------------------------------ */

enum MHD_Result gw_models_one(struct gw_req *r, const char *id)
{
    if (strcmp(id, G.model))
        return gw_queue_error_param(r, 404, "invalid_request_error", "model_not_found", "model",
                                    "The model '%.200s' does not exist (this server serves '%s')", id, G.model);
    return gw_queue_json(r, 200, json_pack("{s:s,s:s,s:I,s:s}", "id", G.model, "object", "model", "created",
                                           (json_int_t)0, "owned_by", "smollm3d"));
}
