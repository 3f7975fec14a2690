/*
 * test_rpc.c - the RPC side of smollm3d without a model: request decoding
 * and validation (malformed protobuf, oversized frames, unknown kinds,
 * invalid UTF-8, absurd sampling, bad session ids, stops, token ids, JSON),
 * and the loop's routing and backpressure against a fake engine on the
 * inproc PAIR and real DEALER clients, all driven from this one thread with
 * smol_rpc_poll_once.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "daemon/model/gguf.h"
#include "daemon/server/engine.h"
#include "daemon/server/grammar_cache.h"
#include "daemon/server/log.h"
#include "daemon/server/rpc.h"
#include "daemon/text/tokenizer.h"
#include "testutil.h"

static const struct smol_rpc_limits LIM = {4096, 1000, 512, NULL};

/* ------------------------------------------------------------ helpers --- */

static uint8_t *pack_req(const Smollm3__Request *rq, size_t *n)
{
    *n = smollm3__request__get_packed_size(rq);
    uint8_t *b = malloc(*n + 1);
    smollm3__request__pack(rq, b);
    return b;
}

/* A generate request with one user message "hi" (fields set by the caller). */
struct gen {
    Smollm3__Request rq;
    Smollm3__GenerateRequest g;
    Smollm3__ChatInput ci;
    Smollm3__ChatMessage m, *mp[1];
    Smollm3__SamplingParams sp;
};

static void gen_init(struct gen *x, uint64_t id)
{
    Smollm3__Request rq = SMOLLM3__REQUEST__INIT;
    Smollm3__GenerateRequest g = SMOLLM3__GENERATE_REQUEST__INIT;
    Smollm3__ChatInput ci = SMOLLM3__CHAT_INPUT__INIT;
    Smollm3__ChatMessage m = SMOLLM3__CHAT_MESSAGE__INIT;
    Smollm3__SamplingParams sp = SMOLLM3__SAMPLING_PARAMS__INIT;
    x->rq = rq; x->g = g; x->ci = ci; x->m = m; x->sp = sp;
    x->m.role = "user";
    x->m.content = "hi";
    x->mp[0] = &x->m;
    x->ci.n_messages = 1;
    x->ci.messages = x->mp;
    x->g.input_case = SMOLLM3__GENERATE_REQUEST__INPUT_CHAT;
    x->g.chat = &x->ci;
    x->g.sampling = &x->sp;
    x->rq.request_id = id;
    x->rq.kind_case = SMOLLM3__REQUEST__KIND_GENERATE;
    x->rq.generate = &x->g;
}

static enum smol_err build(struct gen *x, struct smol_request **r, char *err)
{
    return smol_rpc_build_request(&x->g, x->rq.request_id, &LIM, r, err);
}

/* Expects build to fail with code e. */
static void build_fails(struct gen *x, enum smol_err e)
{
    struct smol_request *r = NULL;
    char err[SMOL_ERRLEN] = "";
    enum smol_err got = build(x, &r, err);
    ck_assert_msg(got == e, "expected %s, got %s (%s)", smol_err_name(e), smol_err_name(got), err);
    ck_assert_ptr_null(r);
    ck_assert(err[0]);
}

/* --------------------------------------------------------- decoding --- */

START_TEST(decode_malformed_and_oversized)
{
    Smollm3__Request *rq;
    uint64_t id;
    char err[SMOL_ERRLEN];
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff};
    ck_assert_int_eq(smol_rpc_decode(junk, sizeof junk, &LIM, &rq, &id, err), SMOL_EFORMAT);
    ck_assert_ptr_null(rq);
    ck_assert_uint_eq(id, 0);
    static const uint8_t trunc[] = {0x10, 0x80};   /* varint cut short */
    ck_assert_int_eq(smol_rpc_decode(trunc, sizeof trunc, &LIM, &rq, &id, err), SMOL_EFORMAT);
    uint8_t *big = calloc(1, LIM.max_request_bytes + 1);
    ck_assert_int_eq(smol_rpc_decode(big, LIM.max_request_bytes + 1, &LIM, &rq, &id, err), SMOL_ETOOLARGE);
    ck_assert_uint_eq(id, 0);
    free(big);
    /* empty frame: parses as a Request with no kind */
    ck_assert_int_eq(smol_rpc_decode("", 0, &LIM, &rq, &id, err), SMOL_EINVAL);
}
END_TEST

START_TEST(decode_version_and_kinds)
{
    Smollm3__Request rq = SMOLLM3__REQUEST__INIT, *out;
    Smollm3__HealthRequest h = SMOLLM3__HEALTH_REQUEST__INIT;
    Smollm3__SessionGetRequest sg = SMOLLM3__SESSION_GET_REQUEST__INIT;
    uint64_t id;
    size_t n;
    char err[SMOL_ERRLEN];
    rq.request_id = 42;
    rq.kind_case = SMOLLM3__REQUEST__KIND_HEALTH;
    rq.health = &h;
    uint8_t *b = pack_req(&rq, &n);
    ck_assert_int_eq(smol_rpc_decode(b, n, &LIM, &out, &id, err), SMOL_OK);
    ck_assert_uint_eq(id, 42);
    smollm3__request__free_unpacked(out, NULL);
    free(b);
    rq.protocol_version = 2;
    b = pack_req(&rq, &n);
    ck_assert_int_eq(smol_rpc_decode(b, n, &LIM, &out, &id, err), SMOL_EUNSUPPORTED);
    ck_assert_uint_eq(id, 42);
    free(b);
    /* an unknown kind (a future field 99) is skipped by protobuf: no kind */
    static const uint8_t fut[] = {0x10, 0x07, 0x9a, 0x06, 0x00};     /* request_id 7, field 99 len 0 */
    ck_assert_int_eq(smol_rpc_decode(fut, sizeof fut, &LIM, &out, &id, err), SMOL_EINVAL);
    ck_assert_uint_eq(id, 7);
    rq.protocol_version = 1;
    rq.kind_case = SMOLLM3__REQUEST__KIND_SESSION_GET;
    rq.session_get = &sg;
    const char *bad[] = {"", "a/b", "with space", "\xc3\x28"};
    enum smol_err want[] = {SMOL_EINVAL, SMOL_EINVAL, SMOL_EINVAL, SMOL_EUTF8};
    for (int i = 0; i < 4; i++) {
        sg.session_id = (char *)bad[i];
        b = pack_req(&rq, &n);
        ck_assert_int_eq(smol_rpc_decode(b, n, &LIM, &out, &id, err), want[i]);
        free(b);
    }
    sg.session_id = "user-1:chat.2_x";
    b = pack_req(&rq, &n);
    ck_assert_int_eq(smol_rpc_decode(b, n, &LIM, &out, &id, err), SMOL_OK);
    smollm3__request__free_unpacked(out, NULL);
    free(b);
    /* the session queries' tenant, by the same rule as a generate request's */
    Smollm3__SessionListRequest sl = SMOLLM3__SESSION_LIST_REQUEST__INIT;
    Smollm3__SessionDeleteRequest sd = SMOLLM3__SESSION_DELETE_REQUEST__INIT;
    sd.session_id = "s";
    for (int kind = 0; kind < 3; kind++) {
        rq.kind_case = kind == 0 ? SMOLLM3__REQUEST__KIND_SESSION_GET : kind == 1 ? SMOLLM3__REQUEST__KIND_SESSION_LIST
                                                                                  : SMOLLM3__REQUEST__KIND_SESSION_DELETE;
        if (kind == 0) rq.session_get = &sg;
        else if (kind == 1) rq.session_list = &sl;
        else rq.session_delete = &sd;
        const char *tenants[] = {"", "key-1.a_B", "a/b", "x:y"};
        for (int i = 0; i < 4; i++) {
            sg.tenant = sl.tenant = sd.tenant = (char *)tenants[i];
            b = pack_req(&rq, &n);
            err[0] = 0;
            enum smol_err got = smol_rpc_decode(b, n, &LIM, &out, &id, err);
            ck_assert_msg(got == (i < 2 ? SMOL_OK : SMOL_EINVAL), "kind %d tenant %s: %s", kind, tenants[i], err);
            if (got == SMOL_OK) smollm3__request__free_unpacked(out, NULL);
            else ck_assert_msg(strstr(err, ".tenant' must be at most 64"), "%s", err);
            free(b);
        }
    }
}
END_TEST

/* ------------------------------------------------------ validation --- */

START_TEST(build_chat_ok)
{
    struct gen x;
    gen_init(&x, 9);
    struct smol_request *r = NULL, *r2 = NULL;
    char err[SMOL_ERRLEN] = "";
    x.g.session_id = "s1";
    x.g.max_tokens = 4000000000u;   /* over the rules' 1000000: refused */
    ck_assert_int_eq(build(&x, &r, err), SMOL_EINVAL);
    ck_assert_msg(strstr(err, "max_tokens"), "%s", err);
    x.g.max_tokens = SMOL_RULE_MAX_TOKENS;   /* within the rules: capped to the context */
    x.g.enable_thinking_opt_case = SMOLLM3__GENERATE_REQUEST__ENABLE_THINKING_OPT_ENABLE_THINKING;
    x.g.enable_thinking = 0;
    x.ci.tools_json = "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]";
    ck_assert_msg(build(&x, &r, err) == SMOL_OK, "%s", err);
    ck_assert_uint_eq(r->client_id, 9);
    ck_assert_int_eq(r->kind, SMOL_INPUT_CHAT);
    ck_assert_str_eq(r->session, "s1");
    ck_assert_int_eq(r->chat.n_msgs, 1);
    ck_assert_int_eq(r->chat.msgs[0].role, SMOL_CHAT_USER);
    ck_assert_str_eq(r->chat.msgs[0].content, "hi");
    ck_assert_ptr_null(r->chat.date);
    ck_assert_ptr_nonnull(r->chat.tools);
    ck_assert_int_eq(r->chat.enable_thinking, 0);
    ck_assert_int_eq(r->think_set, 1);
    ck_assert_int_eq(r->chat.add_generation_prompt, 1);
    ck_assert_int_eq(r->max_tokens, LIM.n_ctx);
    ck_assert(fabsf(r->sp.temperature - 0.6f) < 1e-6f);
    ck_assert_msg(build(&x, &r2, err) == SMOL_OK, "%s", err);
    ck_assert_uint_ne(r->sp.seed, r2->sp.seed);     /* a random seed per request */
    smol_request_free(&r);
    smol_request_free(&r2);
    x.sp.seed_opt_case = SMOLLM3__SAMPLING_PARAMS__SEED_OPT_SEED;
    x.sp.seed = 1234;
    x.sp.temperature_opt_case = SMOLLM3__SAMPLING_PARAMS__TEMPERATURE_OPT_TEMPERATURE;
    x.sp.temperature = 0;
    x.g.date = "09 July 2025";
    x.m.tool_calls_json = "[]";
    ck_assert_msg(build(&x, &r, err) == SMOL_OK, "%s", err);
    ck_assert_uint_eq(r->sp.seed, 1234);
    ck_assert(r->sp.temperature == 0.0f);
    ck_assert_str_eq(r->chat.date, "09 July 2025");
    smol_request_free(&r);
}
END_TEST

START_TEST(build_text_and_tokens)
{
    struct gen x;
    gen_init(&x, 1);
    struct smol_request *r = NULL;
    char err[SMOL_ERRLEN] = "";
    x.g.input_case = SMOLLM3__GENERATE_REQUEST__INPUT_TEXT;
    x.g.text = "Once upon";
    ck_assert_msg(build(&x, &r, err) == SMOL_OK, "%s", err);
    ck_assert_int_eq(r->kind, SMOL_INPUT_TEXT);
    ck_assert_str_eq(r->text, "Once upon");
    ck_assert_uint_eq(r->text_len, 9);
    smol_request_free(&r);
    x.g.text = "";
    build_fails(&x, SMOL_EINVAL);
    x.g.text = "bad \xff utf8";
    build_fails(&x, SMOL_EUTF8);
    int32_t ids[3] = {1, 2, 999};
    Smollm3__TokenInput ti = SMOLLM3__TOKEN_INPUT__INIT;
    ti.n_ids = 3;
    ti.ids = ids;
    x.g.input_case = SMOLLM3__GENERATE_REQUEST__INPUT_TOKENS;
    x.g.tokens = &ti;
    ck_assert_msg(build(&x, &r, err) == SMOL_OK, "%s", err);
    ck_assert_int_eq(r->n_ids, 3);
    ck_assert_int_eq(r->ids[2], 999);
    smol_request_free(&r);
    ids[2] = 1000;                  /* == n_vocab */
    build_fails(&x, SMOL_EINVAL);
    ids[2] = -1;
    build_fails(&x, SMOL_EINVAL);
    ti.n_ids = 0;
    build_fails(&x, SMOL_EINVAL);
    int32_t *many = calloc(LIM.n_ctx, sizeof *many);
    ti.ids = many;
    ti.n_ids = LIM.n_ctx;
    build_fails(&x, SMOL_ECONTEXT);
    free(many);
    x.g.input_case = SMOLLM3__GENERATE_REQUEST__INPUT__NOT_SET;
    build_fails(&x, SMOL_EINVAL);
}
END_TEST

START_TEST(build_bad_chat)
{
    struct gen x;
    gen_init(&x, 1);
    x.m.role = "wizard";
    build_fails(&x, SMOL_EINVAL);
    x.m.role = "user";
    x.m.content = "caf\xc3";
    build_fails(&x, SMOL_EUTF8);
    x.m.content = "hi";
    x.m.name = "\xed\xa0\x80";      /* a UTF-16 surrogate encoded in UTF-8 */
    build_fails(&x, SMOL_EUTF8);
    x.m.name = "";
    x.m.tool_calls_json = "[{";
    build_fails(&x, SMOL_EINVAL);
    x.m.tool_calls_json = "{}";
    build_fails(&x, SMOL_EINVAL);
    x.m.tool_calls_json = "";
    x.ci.tools_json = "not json";
    build_fails(&x, SMOL_EINVAL);
    x.ci.tools_json = "{\"a\":1}";
    build_fails(&x, SMOL_EINVAL);
    x.ci.tools_json = "[1]";
    build_fails(&x, SMOL_EINVAL);
    x.ci.tools_json = "[{\"a\":1,\"a\":2}]";  /* duplicate keys */
    build_fails(&x, SMOL_EINVAL);
    x.ci.tools_json = "";
    x.ci.n_messages = 0;
    build_fails(&x, SMOL_EINVAL);
    x.ci.n_messages = 1;
    x.g.date = "July 9th";
    build_fails(&x, SMOL_EINVAL);
}
END_TEST

START_TEST(build_bad_sampling_session_stops)
{
    struct gen x;
    gen_init(&x, 1);
    x.sp.temperature_opt_case = SMOLLM3__SAMPLING_PARAMS__TEMPERATURE_OPT_TEMPERATURE;
    float bad_t[] = {-1.0f, NAN, INFINITY};
    for (int i = 0; i < 3; i++) { x.sp.temperature = bad_t[i]; build_fails(&x, SMOL_EINVAL); }
    x.sp.temperature_opt_case = 0;
    x.sp.top_p_opt_case = SMOLLM3__SAMPLING_PARAMS__TOP_P_OPT_TOP_P;
    x.sp.top_p = 7;
    build_fails(&x, SMOL_EINVAL);
    x.sp.top_p = 0;
    build_fails(&x, SMOL_EINVAL);
    x.sp.top_p_opt_case = 0;
    x.sp.top_k_opt_case = SMOLLM3__SAMPLING_PARAMS__TOP_K_OPT_TOP_K;
    x.sp.top_k = -5;
    build_fails(&x, SMOL_EINVAL);
    x.sp.top_k_opt_case = 0;
    x.sp.repetition_penalty_opt_case = SMOLLM3__SAMPLING_PARAMS__REPETITION_PENALTY_OPT_REPETITION_PENALTY;
    x.sp.repetition_penalty = 0;
    build_fails(&x, SMOL_EINVAL);
    x.sp.repetition_penalty_opt_case = 0;
    x.sp.presence_penalty_opt_case = SMOLLM3__SAMPLING_PARAMS__PRESENCE_PENALTY_OPT_PRESENCE_PENALTY;
    x.sp.presence_penalty = 1e30f;
    build_fails(&x, SMOL_EINVAL);
    x.sp.presence_penalty_opt_case = 0;

    char longid[SMOL_SESSION_ID_MAX + 2];
    memset(longid, 'a', sizeof longid - 1);
    longid[sizeof longid - 1] = 0;
    x.g.session_id = longid;
    build_fails(&x, SMOL_EINVAL);
    longid[SMOL_SESSION_ID_MAX] = 0;    /* exactly the maximum: fine */
    struct smol_request *r = NULL;
    char err[SMOL_ERRLEN];
    ck_assert_msg(build(&x, &r, err) == SMOL_OK, "%s", err);
    smol_request_free(&r);
    x.g.session_id = "../etc";
    build_fails(&x, SMOL_EINVAL);
    x.g.session_id = "\xc3\xa9t\xc3\xa9";   /* valid UTF-8, not in the charset */
    build_fails(&x, SMOL_EINVAL);
    x.g.session_id = "";

    /* the tenant (issue 38): [A-Za-z0-9._-], at most 64 bytes, "" the default */
    static const char *const bad_tenants[] = {"a/b", "a:b", "with space", "\xc3\xa9", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    for (size_t i = 0; i < sizeof bad_tenants / sizeof *bad_tenants; i++) {
        x.g.tenant = (char *)bad_tenants[i];
        ck_assert_int_eq(build(&x, &r, err), SMOL_EINVAL);
        ck_assert_msg(strstr(err, "'tenant' must be at most 64 characters of [A-Za-z0-9._-]"), "%s", err);
    }
    x.g.tenant = "key-0f3a.B_9";
    x.g.session_id = "s1";
    x.ci.append_to_session = 1;
    x.ci.create_session = 1;
    ck_assert_msg(build(&x, &r, err) == SMOL_OK, "%s", err);
    ck_assert_str_eq(r->tenant, "key-0f3a.B_9");
    ck_assert(r->append && r->create_session);
    smol_request_free(&r);
    x.ci.create_session = 0;
    ck_assert_msg(build(&x, &r, err) == SMOL_OK, "%s", err);
    ck_assert(r->append && !r->create_session);
    smol_request_free(&r);
    x.g.tenant = "";
    x.g.session_id = "";
    x.ci.append_to_session = 0;

    char *stops[SMOL_MAX_STOPS + 1];
    for (int i = 0; i <= SMOL_MAX_STOPS; i++) stops[i] = "END";
    x.g.stop = stops;
    x.g.n_stop = SMOL_MAX_STOPS + 1;
    build_fails(&x, SMOL_EINVAL);
    x.g.n_stop = SMOL_MAX_STOPS;
    ck_assert_msg(build(&x, &r, err) == SMOL_OK, "%s", err);
    ck_assert_int_eq(r->n_stops, SMOL_MAX_STOPS);
    smol_request_free(&r);
    x.g.n_stop = 1;
    stops[0] = "";
    build_fails(&x, SMOL_EINVAL);
    char longstop[SMOL_STOP_MAX_LEN + 2];
    memset(longstop, 'x', sizeof longstop - 1);
    longstop[sizeof longstop - 1] = 0;
    stops[0] = longstop;
    build_fails(&x, SMOL_EINVAL);
    longstop[SMOL_STOP_MAX_LEN] = 0;    /* exactly the maximum: fine */
    ck_assert_msg(build(&x, &r, err) == SMOL_OK, "%s", err);
    smol_request_free(&r);
    stops[0] = "\x80";
    build_fails(&x, SMOL_EUTF8);
}
END_TEST

/* ------------------------------------------------ loop: fake engine --- */

struct rig {
    void *ctx, *eng, *cli;
    struct smol_rpc *rpc;
    char ep[64];
};

static void rig_init_with(struct rig *g, int sndhwm, int pause_frames, struct smol_grammar_cache *grammars)
{
    static int k;
    char err[SMOL_ERRLEN];
    g->ctx = zmq_ctx_new();
    struct smol_rpc_limits lim = LIM;
    lim.grammars = grammars;
    struct smol_rpc_config c = {
        .lim = lim, .sndhwm = sndhwm, .rcvhwm = 100, .pause_frames = pause_frames, .heartbeat_ivl_ms = 0,
        .heartbeat_timeout_ms = 0, .socket_mode = 0660, .drain_grace_ms = 500, .max_routes = 100,
        .model_name = "fake",
    };
    ck_assert_msg(smol_rpc_new(&g->rpc, g->ctx, &c, err) == SMOL_OK, "%s", err);
    ck_assert_int_eq(smol_rpc_bind_engine(g->rpc, "inproc://eng", err), SMOL_OK);
    snprintf(g->ep, sizeof g->ep, "inproc://rtr%d", k++);
    ck_assert_msg(smol_rpc_bind(g->rpc, g->ep, err) == SMOL_OK, "%s", err);
    smol_rpc_set_ready(g->rpc, 1);
    g->eng = zmq_socket(g->ctx, ZMQ_PAIR);
    ck_assert_int_eq(zmq_connect(g->eng, "inproc://eng"), 0);
    g->cli = zmq_socket(g->ctx, ZMQ_DEALER);
    int one = 1;
    zmq_setsockopt(g->cli, ZMQ_RCVHWM, &one, sizeof one);
    ck_assert_int_eq(zmq_connect(g->cli, g->ep), 0);
}

static void rig_init(struct rig *g, int sndhwm, int pause_frames)
{
    rig_init_with(g, sndhwm, pause_frames, NULL);
}

static void rig_free(struct rig *g)
{
    int z = 0;
    if (g->cli) { zmq_setsockopt(g->cli, ZMQ_LINGER, &z, sizeof z); zmq_close(g->cli); }
    zmq_setsockopt(g->eng, ZMQ_LINGER, &z, sizeof z);
    zmq_close(g->eng);
    smol_rpc_free(&g->rpc);
    zmq_ctx_term(g->ctx);
}

static void pump(struct rig *g, int n)
{
    for (int i = 0; i < n; i++) smol_rpc_poll_once(g->rpc, 1, -1, NULL, NULL);
}

static void cli_send(struct rig *g, const Smollm3__Request *rq)
{
    size_t n;
    uint8_t *b = pack_req(rq, &n);
    ck_assert_int_eq(zmq_send(g->cli, b, n, 0), (int)n);
    free(b);
}

/* Next event for the client (pumping the loop meanwhile); NULL if none. */
static Smollm3__Event *cli_recv(struct rig *g)
{
    for (int i = 0; i < 200; i++) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, g->cli, ZMQ_DONTWAIT) >= 0) {
            Smollm3__Event *ev = smollm3__event__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
            zmq_msg_close(&m);
            ck_assert_ptr_nonnull(ev);
            return ev;
        }
        zmq_msg_close(&m);
        pump(g, 1);
    }
    return NULL;
}

/* Next command to the engine: returns cmd, *id (SUBMIT: the request's id,
 * the request is freed; client id in *cid). 0 if none. */
static int eng_recv(struct rig *g, uint64_t *id, uint64_t *cid)
{
    for (int i = 0; i < 200; i++) {
        uint8_t cmd;
        if (zmq_recv(g->eng, &cmd, 1, ZMQ_DONTWAIT) == 1) {
            uint8_t buf[4096];
            int n = 0, more = 1;
            size_t ms = sizeof more;
            zmq_getsockopt(g->eng, ZMQ_RCVMORE, &more, &ms);
            if (more) n = zmq_recv(g->eng, buf, sizeof buf, 0);
            zmq_getsockopt(g->eng, ZMQ_RCVMORE, &more, &ms);
            while (more) { zmq_recv(g->eng, buf + 8, sizeof buf - 8, 0); zmq_getsockopt(g->eng, ZMQ_RCVMORE, &more, &ms); }
            if (cmd == SMOL_CMD_SUBMIT) {
                struct smol_request *r;
                ck_assert_int_eq(n, (int)sizeof r);
                memcpy(&r, buf, sizeof r);
                *id = r->id;
                if (cid) *cid = r->client_id;
                smol_request_free(&r);
            } else if (n >= 8) {
                memcpy(id, buf, 8);
            }
            return cmd;
        }
        pump(g, 1);
    }
    return 0;
}

static void eng_send(struct rig *g, uint64_t id, uint8_t flags, uint64_t client_id, uint32_t token)
{
    Smollm3__Event ev = SMOLLM3__EVENT__INIT;
    Smollm3__Token t = SMOLLM3__TOKEN__INIT;
    Smollm3__Done d = SMOLLM3__DONE__INIT;
    ev.request_id = client_id;
    if (flags & SMOL_EV_TERMINAL) { ev.kind_case = SMOLLM3__EVENT__KIND_DONE; ev.done = &d; }
    else { ev.kind_case = SMOLLM3__EVENT__KIND_TOKEN; ev.token = &t; t.token_id = (int32_t)token; }
    uint8_t buf[256];
    size_t n = smollm3__event__pack(&ev, buf);
    zmq_send(g->eng, &id, 8, ZMQ_SNDMORE);
    zmq_send(g->eng, &flags, 1, ZMQ_SNDMORE);
    zmq_send(g->eng, buf, n, 0);
}

START_TEST(loop_routes_stream_and_replies)
{
    struct rig g;
    rig_init(&g, 1000, 64);
    Smollm3__Request rq = SMOLLM3__REQUEST__INIT;
    Smollm3__HealthRequest h = SMOLLM3__HEALTH_REQUEST__INIT;
    rq.request_id = 5;
    rq.kind_case = SMOLLM3__REQUEST__KIND_HEALTH;
    rq.health = &h;
    cli_send(&g, &rq);
    Smollm3__Event *ev = cli_recv(&g);
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(ev->kind_case, SMOLLM3__EVENT__KIND_HEALTH);
    ck_assert(ev->health->ready);
    ck_assert_str_eq(ev->health->model, "fake");
    /* the largest Request frame it decodes: the bound of the gateway's --max-body-bytes */
    ck_assert_uint_eq(ev->health->max_request_bytes, LIM.max_request_bytes);
    smollm3__event__free_unpacked(ev, NULL);

    struct gen x;
    gen_init(&x, 77);
    cli_send(&g, &x.rq);
    uint64_t id = 0, cid = 0;
    ck_assert_int_eq(eng_recv(&g, &id, &cid), SMOL_CMD_SUBMIT);
    ck_assert_uint_eq(cid, 77);
    ck_assert_uint_ne(id, 0);
    /* the same request_id again while in flight: refused */
    cli_send(&g, &x.rq);
    ev = cli_recv(&g);
    ck_assert_int_eq(ev->kind_case, SMOLLM3__EVENT__KIND_ERROR);
    ck_assert_int_eq(ev->error->code, SMOLLM3__ERROR_CODE__ERROR_INVALID_ARGUMENT);
    smollm3__event__free_unpacked(ev, NULL);
    /* cancel of an unknown id: Ack, nothing sent to the engine */
    Smollm3__CancelRequest cr = SMOLLM3__CANCEL_REQUEST__INIT;
    rq.request_id = 6;
    rq.kind_case = SMOLLM3__REQUEST__KIND_CANCEL;
    rq.cancel = &cr;
    cr.target_request_id = 12345;
    cli_send(&g, &rq);
    ev = cli_recv(&g);
    ck_assert_int_eq(ev->kind_case, SMOLLM3__EVENT__KIND_ACK);
    ck_assert_uint_eq(ev->request_id, 6);
    smollm3__event__free_unpacked(ev, NULL);
    uint64_t cid2;
    ck_assert_int_eq(eng_recv(&g, &cid2, NULL), 0);
    /* cancel of the live one: CANCEL with the internal id */
    cr.target_request_id = 77;
    cli_send(&g, &rq);
    uint64_t cancelled = 0;
    ck_assert_int_eq(eng_recv(&g, &cancelled, NULL), SMOL_CMD_CANCEL);
    ck_assert_uint_eq(cancelled, id);
    ev = cli_recv(&g);
    ck_assert_int_eq(ev->kind_case, SMOLLM3__EVENT__KIND_ACK);
    smollm3__event__free_unpacked(ev, NULL);
    /* events flow back in order; the terminal one removes the route */
    for (uint32_t t = 0; t < 5; t++) eng_send(&g, id, 0, 77, t);
    eng_send(&g, id, SMOL_EV_TERMINAL, 77, 0);
    for (uint32_t t = 0; t < 5; t++) {
        ev = cli_recv(&g);
        ck_assert_ptr_nonnull(ev);
        ck_assert_uint_eq(ev->request_id, 77);
        ck_assert_int_eq(ev->token->token_id, (int32_t)t);
        smollm3__event__free_unpacked(ev, NULL);
    }
    ev = cli_recv(&g);
    ck_assert_int_eq(ev->kind_case, SMOLLM3__EVENT__KIND_DONE);
    smollm3__event__free_unpacked(ev, NULL);
    struct smol_rpc_counters c;
    smol_rpc_get_counters(g.rpc, &c);
    ck_assert_uint_eq(c.routes, 0);
    ck_assert_uint_eq(c.submitted, 1);
    rig_free(&g);
}
END_TEST

START_TEST(loop_bad_frames)
{
    struct rig g;
    rig_init(&g, 1000, 64);
    zmq_send(g.cli, "\xff\xff", 2, 0);
    Smollm3__Event *ev = cli_recv(&g);
    ck_assert_int_eq(ev->error->code, SMOLLM3__ERROR_CODE__ERROR_BAD_FORMAT);
    ck_assert_uint_eq(ev->request_id, 0);
    smollm3__event__free_unpacked(ev, NULL);
    char *big = calloc(1, LIM.max_request_bytes + 10);
    zmq_send(g.cli, big, LIM.max_request_bytes + 10, 0);
    free(big);
    ev = cli_recv(&g);
    ck_assert_int_eq(ev->error->code, SMOLLM3__ERROR_CODE__ERROR_TOO_LARGE);
    smollm3__event__free_unpacked(ev, NULL);
    zmq_send(g.cli, "a", 1, ZMQ_SNDMORE);       /* three frames */
    zmq_send(g.cli, "b", 1, ZMQ_SNDMORE);
    zmq_send(g.cli, "c", 1, 0);
    ev = cli_recv(&g);
    ck_assert_int_eq(ev->error->code, SMOLLM3__ERROR_CODE__ERROR_BAD_FORMAT);
    smollm3__event__free_unpacked(ev, NULL);
    /* an empty delimiter first (REQ style) is tolerated and mirrored */
    struct gen x;
    gen_init(&x, 3);
    x.sp.top_p_opt_case = SMOLLM3__SAMPLING_PARAMS__TOP_P_OPT_TOP_P;
    x.sp.top_p = 5;
    size_t n;
    uint8_t *b = pack_req(&x.rq, &n);
    zmq_send(g.cli, "", 0, ZMQ_SNDMORE);
    zmq_send(g.cli, b, n, 0);
    free(b);
    char d[8];
    for (int i = 0; i < 100 && zmq_recv(g.cli, d, sizeof d, ZMQ_DONTWAIT) < 0; i++) pump(&g, 1);
    int more;
    size_t ms = sizeof more;
    zmq_getsockopt(g.cli, ZMQ_RCVMORE, &more, &ms);
    ck_assert(more);
    ev = cli_recv(&g);
    ck_assert_int_eq(ev->error->code, SMOLLM3__ERROR_CODE__ERROR_INVALID_ARGUMENT);
    ck_assert_uint_eq(ev->request_id, 3);
    smollm3__event__free_unpacked(ev, NULL);
    rig_free(&g);
}
END_TEST

/* A client that does not read: its events queue up (none dropped), the
 * engine is told PAUSE, and RESUME once the client caught up. */
START_TEST(loop_backpressure)
{
    struct rig g;
    rig_init(&g, 2, 8);
    struct gen x;
    gen_init(&x, 1);
    cli_send(&g, &x.rq);
    uint64_t id;
    ck_assert_int_eq(eng_recv(&g, &id, NULL), SMOL_CMD_SUBMIT);
    enum { N = 300 };
    for (uint32_t t = 0; t < N; t++) eng_send(&g, id, 0, 1, t);
    eng_send(&g, id, SMOL_EV_TERMINAL, 1, 0);
    uint64_t pid = 0;
    ck_assert_int_eq(eng_recv(&g, &pid, NULL), SMOL_CMD_PAUSE);
    ck_assert_uint_eq(pid, id);
    struct smol_rpc_counters c;
    smol_rpc_get_counters(g.rpc, &c);
    ck_assert_uint_gt(c.queued_frames, 8);
    ck_assert_uint_eq(c.paused, 1);
    for (uint32_t t = 0; t < N; t++) {
        Smollm3__Event *ev = cli_recv(&g);
        ck_assert_msg(ev != NULL, "event %u lost", t);
        ck_assert_int_eq(ev->token->token_id, (int32_t)t);
        smollm3__event__free_unpacked(ev, NULL);
    }
    Smollm3__Event *ev = cli_recv(&g);
    ck_assert_int_eq(ev->kind_case, SMOLLM3__EVENT__KIND_DONE);
    smollm3__event__free_unpacked(ev, NULL);
    /* the terminal event arrived while paused: no RESUME needed, route gone */
    smol_rpc_get_counters(g.rpc, &c);
    ck_assert_uint_eq(c.routes, 0);
    ck_assert_uint_eq(c.queued_frames, 0);
    ck_assert_uint_eq(c.paused, 0);
    rig_free(&g);
}
END_TEST

START_TEST(loop_resume_before_end)
{
    struct rig g;
    rig_init(&g, 2, 8);
    struct gen x;
    gen_init(&x, 1);
    cli_send(&g, &x.rq);
    uint64_t id, got;
    ck_assert_int_eq(eng_recv(&g, &id, NULL), SMOL_CMD_SUBMIT);
    for (uint32_t t = 0; t < 50; t++) eng_send(&g, id, 0, 1, t);
    ck_assert_int_eq(eng_recv(&g, &got, NULL), SMOL_CMD_PAUSE);
    for (uint32_t t = 0; t < 50; t++) {
        Smollm3__Event *ev = cli_recv(&g);
        ck_assert_ptr_nonnull(ev);
        smollm3__event__free_unpacked(ev, NULL);
    }
    ck_assert_int_eq(eng_recv(&g, &got, NULL), SMOL_CMD_RESUME);
    ck_assert_uint_eq(got, id);
    rig_free(&g);
}
END_TEST

/* The client vanishes: the next event finds it unreachable, the request is
 * cancelled and its events are discarded until the terminal one. */
START_TEST(loop_peer_gone)
{
    struct rig g;
    rig_init(&g, 1000, 64);
    struct gen x;
    gen_init(&x, 1);
    cli_send(&g, &x.rq);
    uint64_t id, got = 0;
    ck_assert_int_eq(eng_recv(&g, &id, NULL), SMOL_CMD_SUBMIT);
    int z = 0;
    zmq_setsockopt(g.cli, ZMQ_LINGER, &z, sizeof z);
    zmq_close(g.cli);
    g.cli = NULL;
    int cmd = 0;
    for (int i = 0; i < 200 && cmd != SMOL_CMD_CANCEL; i++) {
        eng_send(&g, id, 0, 1, (uint32_t)i);
        pump(&g, 2);
        uint8_t c;
        while (zmq_recv(g.eng, &c, 1, ZMQ_DONTWAIT) == 1) {
            uint8_t buf[64];
            zmq_recv(g.eng, buf, sizeof buf, 0);
            if (c == SMOL_CMD_CANCEL) { cmd = c; memcpy(&got, buf, 8); }
        }
    }
    ck_assert_int_eq(cmd, SMOL_CMD_CANCEL);
    ck_assert_uint_eq(got, id);
    eng_send(&g, id, SMOL_EV_TERMINAL, 1, 0);
    pump(&g, 5);
    struct smol_rpc_counters c;
    smol_rpc_get_counters(g.rpc, &c);
    ck_assert_uint_eq(c.routes, 0);
    ck_assert_uint_eq(c.queued_frames, 0);
    rig_free(&g);
}
END_TEST

/* A schema whose token index takes seconds to build (32 strings with
 * distinct maxLength, as in the daemon suite): its request stays parked. */
static char *slow_schema(void)
{
    static char buf[4096];
    size_t n = (size_t)snprintf(buf, sizeof buf, "{\"type\":\"object\",\"required\":[\"s0\"],\"properties\":{");
    for (int i = 0; i < 32; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s\"s%d\":{\"type\":\"string\",\"maxLength\":%d}",
                              i ? "," : "", i, 117 + i);
    snprintf(buf + n, sizeof buf - n, "}}");
    return buf;
}

/* Issue 28: a parked request (its grammar's index still building) is
 * cancelled and handing it to the engine fails (the fault hook).  Before
 * the fix, submit() freed the route: on a client's CANCEL the stream ended
 * with no terminal event (the first half fails: no ERROR), and when the
 * client vanished peer_gone then wrote r->gone into the freed route (the
 * second half: heap-use-after-free under ASan, build/asan/tests/test_rpc).
 * Now the route ends with an error event and is removed exactly once. */
START_TEST(loop_parked_handoff_fails)
{
    const char *p = fixture_path("models/fixture-t.Q8_0.gguf");
    ck_assert_msg(p != NULL, "tests/fixtures/models/fixture-t.Q8_0.gguf missing");
    char err[SMOL_ERRLEN];
    struct smol_gguf *gg = NULL;
    struct smol_tokenizer *tok = NULL;
    struct smol_grammar_cache *gc = NULL;
    ck_assert_msg(smol_gguf_open(&gg, p, err) == SMOL_OK, "%s", err);
    ck_assert_msg(smol_tokenizer_new(&tok, gg, err) == SMOL_OK, "%s", err);
    ck_assert_msg(smol_grammar_cache_new(&gc, tok, 0, err) == SMOL_OK, "%s", err);
    struct rig g;
    rig_init_with(&g, 1000, 64, gc);
    struct smol_rpc_counters c;

    /* 1. the client cancels its parked request; the hand-off fails: Ack,
     * then the stream's terminal ERROR, and no route is left */
    struct gen x;
    gen_init(&x, 1);
    x.g.constraint_case = SMOLLM3__GENERATE_REQUEST__CONSTRAINT_JSON_SCHEMA;
    x.g.json_schema = slow_schema();
    cli_send(&g, &x.rq);
    pump(&g, 20);
    smol_rpc_get_counters(g.rpc, &c);
    ck_assert_uint_eq(c.parked, 1);
    ck_assert_uint_eq(c.routes, 1);
    smol_engine_fault_arm(SMOL_FAULT_SUBMIT, 1);
    Smollm3__Request rq = SMOLLM3__REQUEST__INIT;
    Smollm3__CancelRequest cr = SMOLLM3__CANCEL_REQUEST__INIT;
    rq.request_id = 9;
    rq.kind_case = SMOLLM3__REQUEST__KIND_CANCEL;
    rq.cancel = &cr;
    cr.target_request_id = 1;
    cli_send(&g, &rq);
    int acked = 0, ended = 0;
    for (int i = 0; i < 2; i++) {
        Smollm3__Event *ev = cli_recv(&g);
        ck_assert_msg(ev != NULL, "no %s event", acked ? "terminal" : "Ack or terminal");
        if (ev->kind_case == SMOLLM3__EVENT__KIND_ACK) {
            ck_assert_uint_eq(ev->request_id, 9);
            acked = 1;
        } else {
            ck_assert_int_eq(ev->kind_case, SMOLLM3__EVENT__KIND_ERROR);
            ck_assert_uint_eq(ev->request_id, 1);
            ck_assert_int_eq(ev->error->code, SMOLLM3__ERROR_CODE__ERROR_INTERNAL);
            ended = 1;
        }
        smollm3__event__free_unpacked(ev, NULL);
    }
    ck_assert(acked && ended);
    pump(&g, 5);
    smol_rpc_get_counters(g.rpc, &c);
    ck_assert_uint_eq(c.routes, 0);
    uint64_t id;
    ck_assert_int_eq(eng_recv(&g, &id, NULL), 0);   /* the engine never heard of it */

    /* 2. another parked request and a running one; the client vanishes, the
     * running one's next event finds it gone: peer_gone cancels both, and
     * the parked one's hand-off fails */
    x.rq.request_id = 2;
    cli_send(&g, &x.rq);
    struct gen y;
    gen_init(&y, 3);
    cli_send(&g, &y.rq);
    uint64_t cid = 0;
    ck_assert_int_eq(eng_recv(&g, &id, &cid), SMOL_CMD_SUBMIT);
    ck_assert_msg(cid == 3, "request %llu submitted first: the slow index was built already", (unsigned long long)cid);
    smol_rpc_get_counters(g.rpc, &c);
    ck_assert_uint_eq(c.routes, 2);
    int z = 0;
    zmq_setsockopt(g.cli, ZMQ_LINGER, &z, sizeof z);
    zmq_close(g.cli);
    g.cli = NULL;
    smol_engine_fault_arm(SMOL_FAULT_SUBMIT, 1);
    int cancelled = 0;
    for (int i = 0; i < 200 && !cancelled; i++) {
        eng_send(&g, id, 0, 3, (uint32_t)i);
        pump(&g, 2);
        uint8_t cmd;
        while (zmq_recv(g.eng, &cmd, 1, ZMQ_DONTWAIT) == 1) {
            uint8_t buf[64];
            uint64_t got = 0;
            ck_assert_int_eq(zmq_recv(g.eng, buf, sizeof buf, 0), 8);
            memcpy(&got, buf, 8);
            ck_assert_int_eq(cmd, SMOL_CMD_CANCEL);  /* never a SUBMIT: that hand-off failed */
            ck_assert_uint_eq(got, id);
            cancelled = 1;
        }
    }
    smol_engine_fault_arm(SMOL_FAULT_SUBMIT, 0);
    ck_assert(cancelled);
    smol_rpc_get_counters(g.rpc, &c);
    ck_assert_uint_eq(c.peers_gone, 1);
    ck_assert_uint_eq(c.routes, 1);     /* the running one, until its terminal event */
    eng_send(&g, id, SMOL_EV_TERMINAL, 3, 0);
    pump(&g, 5);
    smol_rpc_get_counters(g.rpc, &c);
    ck_assert_uint_eq(c.routes, 0);
    ck_assert_uint_eq(c.queued_frames, 0);
    rig_free(&g);
    smol_grammar_cache_free(&gc);
    smol_tokenizer_free(&tok);
    smol_gguf_close(&gg);
}
END_TEST

START_TEST(loop_drain)
{
    struct rig g;
    rig_init(&g, 1000, 64);
    smol_rpc_drain(g.rpc);
    uint64_t v;
    ck_assert_int_eq(eng_recv(&g, &v, NULL), SMOL_CMD_DRAIN);
    struct gen x;
    gen_init(&x, 4);
    cli_send(&g, &x.rq);
    Smollm3__Event *ev = cli_recv(&g);
    ck_assert_int_eq(ev->error->code, SMOLLM3__ERROR_CODE__ERROR_SHUTTING_DOWN);
    smollm3__event__free_unpacked(ev, NULL);
    ck_assert_int_eq(smol_rpc_poll_once(g.rpc, 1, -1, NULL, NULL), 1);
    uint64_t zero = 0;
    uint8_t fl = SMOL_EV_DRAINED;
    zmq_send(g.eng, &zero, 8, ZMQ_SNDMORE);
    zmq_send(g.eng, &fl, 1, ZMQ_SNDMORE);
    zmq_send(g.eng, "", 0, 0);
    int alive = 1;
    for (int i = 0; i < 50 && alive; i++) alive = smol_rpc_poll_once(g.rpc, 1, -1, NULL, NULL);
    ck_assert_int_eq(alive, 0);
    rig_free(&g);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("rpc");
    TCase *tv = tcase_create("validation");
    tcase_add_test(tv, decode_malformed_and_oversized);
    tcase_add_test(tv, decode_version_and_kinds);
    tcase_add_test(tv, build_chat_ok);
    tcase_add_test(tv, build_text_and_tokens);
    tcase_add_test(tv, build_bad_chat);
    tcase_add_test(tv, build_bad_sampling_session_stops);
    suite_add_tcase(s, tv);
    TCase *tl = tcase_create("loop");
    tcase_set_timeout(tl, 30);
    tcase_add_test(tl, loop_routes_stream_and_replies);
    tcase_add_test(tl, loop_bad_frames);
    tcase_add_test(tl, loop_backpressure);
    tcase_add_test(tl, loop_resume_before_end);
    tcase_add_test(tl, loop_peer_gone);
    tcase_add_test(tl, loop_drain);
    tcase_add_test(tl, loop_parked_handoff_fails);
    suite_add_tcase(s, tl);
    return s;
}

void test_init(SRunner *sr)
{
    smol_log_init("test_rpc", SMOL_LOG_ERR);
}
