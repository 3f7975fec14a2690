/*
 * test_engine.c - the engine thread in-process: continuous batching gives
 * the same greedy tokens as running alone (and as the model directly),
 * session turns reuse the KV prefix, cancel, KV budget and queue limits.
 * Talks to the engine exactly as the RPC thread does: an inproc PAIR.
 */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>
#include <string.h>
#include <zmq.h>

#include "daemon/server/engine.h"
#include "daemon/server/engine_wire.h"
#include "daemon/server/grammar_cache.h"
#include "daemon/server/request.h"
#include "daemon/server/spill.h"
#include "daemon/server/step_budget.h"
#include "daemon/model/model.h"
#include "daemon/text/tokenizer.h"
#include "smollm3.pb-c.h"
#include "testutil.h"

/* Allocations counted (malloc, calloc, realloc) on every thread but those
 * that set alloc_exempt: the engine's decode path, its pools, libzmq's,
 * jansson's (t_allocs_per_token).  Not under a sanitizer, which has its own
 * malloc. */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define COUNT_ALLOCS 1
#include <stdatomic.h>
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
static atomic_long n_allocs;
static _Thread_local int alloc_exempt;
void *malloc(size_t n)
{
    if (!alloc_exempt) atomic_fetch_add_explicit(&n_allocs, 1, memory_order_relaxed);
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t size)
{
    if (!alloc_exempt) atomic_fetch_add_explicit(&n_allocs, 1, memory_order_relaxed);
    return __libc_calloc(n, size);
}
void *realloc(void *p, size_t n)
{
    if (!alloc_exempt) atomic_fetch_add_explicit(&n_allocs, 1, memory_order_relaxed);
    return __libc_realloc(p, n);
}
#endif

struct rig {
    void *ctx, *sock;
    struct smol_model *m;
    struct smol_tokenizer *tok;
    struct smol_engine *e;
    uint64_t next_id;
};

static int rig_backend_sampling; /* the next rig's engine option backend_sampling */
static int rig_sample_threads;  /* the next rig's engine option sample_threads (0: the default) */
static double rig_queue_timeout_s = 2; /* and queue_timeout_s */
static int rig_max_sessions = 1024, rig_max_sessions_per_key; /* and the session caps */
static struct smol_spill *rig_spill;    /* and the spill directory (NULL: none) */
static int rig_tier;                    /* the next submitted request's service tier (then 0) */
static int rig_background;  /* the next submitted request's GenerateRequest.background (one-shot) */
static double rig_step_budget_ms;       /* and the step budget (0: off) */
static double (*rig_step_ms_fn)(int, int); /* and its fake clock (NULL: measured) */
static double rig_handover_grace_s = 10;  /* and handover_grace_s */

static int rig_open(struct rig *g, const char *fixture, size_t kv_budget, int max_running, int max_queued)
{
    memset(g, 0, sizeof *g);
    const char *p = fixture_path(fixture);
    if (!p) return 0;
    char err[SMOL_ERRLEN];
    struct smol_model_settings set;
    smol_model_settings_default(&set);
    set.n_threads = 2;
    set.quiet = 1;
    set.n_ctx = 1024;
    set.max_tokens = 128;
    set.kv_budget = kv_budget;
    ck_assert_msg(smol_model_open(&g->m, p, &set, err) == SMOL_OK, "%s", err);
    ck_assert_msg(smol_tokenizer_new(&g->tok, g->m->gguf, err) == SMOL_OK, "%s", err);
    g->ctx = zmq_ctx_new();
    g->sock = zmq_socket(g->ctx, ZMQ_PAIR);
    ck_assert(zmq_bind(g->sock, "inproc://engine-test") == 0);
    struct smol_engine_config cfg;
    smol_engine_config_default(&cfg);
    cfg.max_running = max_running;
    cfg.max_queued = max_queued;
    cfg.step_tokens = 64;
    cfg.queue_timeout_s = rig_queue_timeout_s;
    cfg.backend_sampling = rig_backend_sampling;
    cfg.sample_threads = rig_sample_threads;
    cfg.max_sessions = rig_max_sessions;
    cfg.max_sessions_per_key = rig_max_sessions_per_key;
    cfg.spill = rig_spill;
    cfg.step_budget_ms = rig_step_budget_ms;
    cfg.step_ms_fn = rig_step_ms_fn;
    cfg.handover_grace_s = rig_handover_grace_s;
    cfg.speculative_calibrate = 0;      /* the default verify costs: draft lengths (and prediction counts)
                                           independent of this machine's speed and build */
    ck_assert_msg(smol_engine_start(&g->e, g->ctx, "inproc://engine-test", g->m, g->tok, &cfg, err) == SMOL_OK, "%s", err);
    g->next_id = 1;
    return 1;
}

static void rig_close(struct rig *g)
{
    if (g->e) {
        smol_engine_send_stop(g->sock);
        smol_engine_stop(&g->e);
    }
    zmq_close(g->sock);
    zmq_ctx_term(g->ctx);
    smol_tokenizer_free(&g->tok);
    smol_model_close(&g->m);
}

/* A token request (greedy unless temp > 0), stamped as the RPC thread stamps it: the queue
 * timeout counts from here.  r belongs to the engine once sent. */
static uint64_t submit_tokens_of(struct rig *g, const char *tenant, const int32_t *ids, int n, int max_tokens,
                                 const char *session, float temp, float top_p, uint64_t seed, int logprobs)
{
    struct smol_request *r = calloc(1, sizeof *r);
    r->id = g->next_id++;
    r->client_id = 1000 + r->id;
    r->kind = SMOL_INPUT_TOKENS;
    r->ids = malloc(n * sizeof *ids);
    memcpy(r->ids, ids, n * sizeof *ids);
    r->n_ids = n;
    r->sp = smol_sampler_defaults();
    r->sp.temperature = temp;
    r->sp.top_p = top_p;
    r->sp.seed = seed;
    r->logprobs = logprobs;
    r->max_tokens = max_tokens;
    r->tier = rig_tier;
    rig_tier = 0;
    r->background = rig_background;
    rig_background = 0;
    r->t_received = smol_mono_s();
    if (session) snprintf(r->session, sizeof r->session, "%s", session);
    snprintf(r->tenant, sizeof r->tenant, "%s", tenant);
    const uint64_t id = r->id;
    ck_assert(smol_engine_send_submit(g->sock, r) == 0);
    return id;
}

static uint64_t submit_tokens(struct rig *g, const int32_t *ids, int n, int max_tokens, const char *session,
                              float temp, float top_p, uint64_t seed, int logprobs)
{
    return submit_tokens_of(g, "", ids, n, max_tokens, session, temp, top_p, seed, logprobs);
}

static uint64_t submit_ids(struct rig *g, const int32_t *ids, int n, int max_tokens, const char *session)
{
    return submit_tokens(g, ids, n, max_tokens, session, 0.0f, smol_sampler_defaults().top_p, 0, 0);
}

/* Receives one event; returns its internal id, fills *flags, unpacks. */
static uint64_t recv_event(struct rig *g, unsigned *flags, Smollm3__Event **ev)
{
    uint64_t id = 0;
    uint8_t fl = 0;
    char buf[1 << 16];
    zmq_pollitem_t it = {.socket = g->sock, .events = ZMQ_POLLIN};
    ck_assert_msg(zmq_poll(&it, 1, 60000) == 1, "no event from the engine within 60 s");
    SMOL_HB_RECV();     /* before zmq_recv: it copies and frees the engine's buffers (engine_wire.h) */
    ck_assert(zmq_recv(g->sock, &id, 8, 0) == 8);
    ck_assert(zmq_recv(g->sock, &fl, 1, 0) == 1);
    int n = zmq_recv(g->sock, buf, sizeof buf, 0);
    ck_assert(n >= 0 && n < (int)sizeof buf);
    *flags = fl;
    *ev = smollm3__event__unpack(NULL, n, (uint8_t *)buf);
    ck_assert(*ev);
    return id;
}

struct result { int32_t ids[256]; int n; int done; int finish; int prompt, cached; int err;
                int drafted, accepted, pred_acc, pred_rej, steps; };

/* Runs until every request in [first, first+n) has ended. */
static void collect(struct rig *g, uint64_t first, int n, struct result *res)
{
    int open = n;
    while (open > 0) {
        unsigned fl;
        Smollm3__Event *ev;
        uint64_t id = recv_event(g, &fl, &ev);
        ck_assert(id >= first && id < first + n);
        struct result *r = &res[id - first];
        ck_assert_int_eq(ev->request_id, 1000 + id);
        switch (ev->kind_case) {
        case SMOLLM3__EVENT__KIND_STARTED: r->prompt = ev->started->prompt_tokens; r->cached = ev->started->cached_tokens; break;
        case SMOLLM3__EVENT__KIND_TOKEN: if (ev->token->token_id >= 0 && r->n < 256) r->ids[r->n++] = ev->token->token_id; break;
        case SMOLLM3__EVENT__KIND_DONE:
            r->done = 1;
            r->finish = ev->done->finish_reason;
            if (ev->done->usage) {
                r->drafted = ev->done->usage->drafted_tokens;
                r->accepted = ev->done->usage->accepted_tokens;
                r->pred_acc = ev->done->usage->prediction_accepted_tokens;
                r->pred_rej = ev->done->usage->prediction_rejected_tokens;
                r->steps = ev->done->usage->decode_steps;
            }
            break;
        case SMOLLM3__EVENT__KIND_ERROR: r->err = ev->error->code; break;
        default: break;
        }
        if (fl & SMOL_EV_TERMINAL) open--;
        smollm3__event__free_unpacked(ev, NULL);
    }
}

static void prompt_of(int k, int32_t *ids, int *n)
{
    *n = 5 + 7 * k;
    for (int i = 0; i < *n; i++) ids[i] = 100 + (i * 31 + k * 977) % 20000;
}

/* Batched == sequential == the model run directly. */
START_TEST(t_batched_equals_sequential)
{
    struct rig g;
    if (!rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 8, 16)) { printf("SKIPPED: fixture missing\n"); return; }
    enum { N = 8, GEN = 12 };
    struct result batched[N], alone[N];
    memset(batched, 0, sizeof batched);
    memset(alone, 0, sizeof alone);
    int32_t ids[64];
    int n;
    uint64_t first = g.next_id;
    for (int k = 0; k < N; k++) { prompt_of(k, ids, &n); submit_ids(&g, ids, n, GEN, NULL); }
    collect(&g, first, N, batched);
    for (int k = 0; k < N; k++) {
        prompt_of(k, ids, &n);
        /* perturb nothing, but defeat the prefix cache: a fresh id order */
        uint64_t id = submit_ids(&g, ids, n, GEN, NULL);
        collect(&g, id, 1, &alone[k]);
    }
    for (int k = 0; k < N; k++) {
        ck_assert_msg(batched[k].done && alone[k].done, "request %d did not finish", k);
        ck_assert_int_eq(batched[k].n, GEN);
        ck_assert_int_eq(alone[k].n, GEN);
        for (int i = 0; i < GEN; i++)
            ck_assert_msg(batched[k].ids[i] == alone[k].ids[i], "req %d token %d: batched %d alone %d", k, i,
                          batched[k].ids[i], alone[k].ids[i]);
        ck_assert_int_eq(batched[k].finish, SMOLLM3__FINISH_REASON__FINISH_REASON_LENGTH);
    }
    /* and both equal greedy decoding on the model directly (engine stopped first: one owner) */
    smol_engine_send_stop(g.sock);
    smol_engine_stop(&g.e);
    float *lg = malloc((size_t)g.m->cfg.vocab * 4);
    char err[SMOL_ERRLEN];
    for (int k = 0; k < N; k++) {
        prompt_of(k, ids, &n);
        struct smol_kv_seq seq;
        smol_kv_seq_init(&seq);
        ck_assert(smol_model_eval(g.m, &seq, ids, n, 0, lg, err) == SMOL_OK);
        for (int i = 0; i < GEN; i++) {
            int am = 0;
            for (int v = 1; v < g.m->cfg.vocab; v++) if (lg[v] > lg[am]) am = v;
            ck_assert_msg(am == batched[k].ids[i], "req %d token %d: engine %d, direct %d", k, i, batched[k].ids[i], am);
            int32_t t = am;
            ck_assert(smol_model_eval(g.m, &seq, &t, 1, 0, lg, err) == SMOL_OK);
        }
        smol_kv_seq_deinit(&g.m->kv, &seq);
    }
    free(lg);
    rig_close(&g);
}
END_TEST

/* Predicted Outputs: a prediction equal to the greedy output is drafted
 * whole and accepted (each step 7 drafts + 1: the counts follow exactly),
 * an unrelated one is rejected; the output is the same as without one. */
static uint64_t submit_pred(struct rig *g, const int32_t *ids, int n, int max_tokens, const char *pred)
{
    struct smol_request *r = calloc(1, sizeof *r);
    r->id = g->next_id++;
    r->client_id = 1000 + r->id;
    r->kind = SMOL_INPUT_TOKENS;
    r->ids = malloc(n * sizeof *ids);
    memcpy(r->ids, ids, n * sizeof *ids);
    r->n_ids = n;
    r->sp = smol_sampler_defaults();
    r->sp.temperature = 0;
    r->max_tokens = max_tokens;
    r->speculative = pred ? -1 : 0;     /* the baseline: no speculation at all */
    if (pred) {
        r->prediction = strdup(pred);
        r->prediction_len = strlen(pred);
    }
    r->t_received = smol_mono_s();
    uint64_t id = r->id;
    ck_assert(smol_engine_send_submit(g->sock, r) == 0);
    return id;
}

START_TEST(t_prediction)
{
    struct rig g;
    if (!rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16)) { printf("SKIPPED: fixture missing\n"); return; }
    enum { GEN = 48 };
    int32_t ids[64];
    int n, checked_exact = 0;
    for (int k = 0; k < 6; k++) {
        prompt_of(k, ids, &n);
        struct result base = {0}, same = {0}, other = {0};
        uint64_t id = submit_pred(&g, ids, n, GEN, NULL);
        collect(&g, id, 1, &base);
        ck_assert_int_eq(base.n, GEN);
        ck_assert_int_eq(base.drafted, 0);
        /* the output's text, and whether the daemon's tokenization of it gives its tokens back */
        char text[8192];
        size_t len = 0;
        for (int i = 0; i < base.n; i++) {
            size_t pl = 0;
            const char *pc = smol_tokenizer_piece(g.tok, base.ids[i], &pl);
            ck_assert(len + pl < sizeof text);
            memcpy(text + len, pc, pl);
            len += pl;
        }
        text[len] = 0;
        struct smol_ids back = {0};
        char err[SMOL_ERRLEN];
        ck_assert(smol_tokenizer_encode(g.tok, text, len, 0, &back, err) == SMOL_OK);
        int round_trip = (int)back.n == base.n && !memcmp(back.v, base.ids, back.n * sizeof *back.v) &&
                         strlen(text) == len;
        smol_ids_free(&back);
        if (strlen(text) != len) continue;   /* a NUL byte in a piece: not a prediction text */

        id = submit_pred(&g, ids, n, GEN, text);
        collect(&g, id, 1, &same);
        ck_assert_int_eq(same.n, GEN);
        for (int i = 0; i < GEN; i++) ck_assert_int_eq(same.ids[i], base.ids[i]);
        ck_assert_int_le(same.pred_acc + same.pred_rej, same.drafted);
        ck_assert_int_le(same.pred_acc, same.accepted);
        ck_assert_int_le(same.accepted, same.drafted);
        if (round_trip) {
            /* every draft came from the prediction and was accepted: each step (the
             * prefill's included) gave its drafts + 1 */
            ck_assert_int_eq(same.pred_rej, 0);
            ck_assert_int_eq(same.pred_acc, same.drafted);
            ck_assert_int_eq(same.pred_acc + same.steps, GEN);
            ck_assert_int_ge(same.pred_acc, GEN / 2);
            const int acc = same.pred_acc;
            checked_exact++;

            /* edits: " zebra" inserted after every 4th token from the 8th on: a draft
             * running into one is rejected there (the rest of it too), the copy
             * resumes after it; some draft must run into one, as a draft that
             * ends just before it is followed by a token that departs */
            struct result edit = {0};
            char text2[16384];
            size_t w = 0;
            for (int i = 0; i < base.n; i++) {
                size_t pl = 0;
                const char *pc = smol_tokenizer_piece(g.tok, base.ids[i], &pl);
                memcpy(text2 + w, pc, pl);
                w += pl;
                if (i >= 8 && i % 4 == 0) {
                    memcpy(text2 + w, " zebra", 6);
                    w += 6;
                }
            }
            text2[w] = 0;
            id = submit_pred(&g, ids, n, GEN, text2);
            collect(&g, id, 1, &edit);
            ck_assert_int_eq(edit.n, GEN);
            for (int i = 0; i < GEN; i++) ck_assert_int_eq(edit.ids[i], base.ids[i]);
            ck_assert_int_gt(edit.pred_rej, 0);
            ck_assert_int_gt(edit.pred_acc, 0);
            ck_assert_int_lt(edit.pred_acc, acc);
            ck_assert_int_le(edit.pred_acc + edit.pred_rej, edit.drafted);
        }

        /* an unrelated prediction: the output is unchanged; its first token is not the
         * prediction's and no 2 tokens of it occur there: nothing is drafted from it */
        id = submit_pred(&g, ids, n, GEN, "\xe2\x88\x80 zebra quantum \xe2\x88\x80 zebra quantum \xe2\x88\x80 zebra quantum");
        collect(&g, id, 1, &other);
        ck_assert_int_eq(other.n, GEN);
        for (int i = 0; i < GEN; i++) ck_assert_int_eq(other.ids[i], base.ids[i]);
        ck_assert_int_le(other.pred_acc + other.pred_rej, other.drafted);
        ck_assert_int_eq(other.pred_acc, 0);
        ck_assert_int_eq(other.pred_rej, 0);
    }
    ck_assert_msg(checked_exact > 0, "no fixture output round-tripped through the tokenizer: exact counts unchecked");
    rig_close(&g);
}
END_TEST

/* A second request sharing a prefix reuses it (cached_tokens), with or
 * without a session. */
START_TEST(t_prefix_reuse)
{
    struct rig g;
    if (!rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16)) { printf("SKIPPED: fixture missing\n"); return; }
    int32_t ids[120];
    for (int i = 0; i < 120; i++) ids[i] = 500 + i * 13;
    struct result r1 = {0}, r2 = {0}, r3 = {0}, r4 = {0};
    uint64_t a = submit_ids(&g, ids, 80, 4, "sess-1");
    collect(&g, a, 1, &r1);
    ck_assert_int_eq(r1.cached, 0);
    /* the session continues: its history (prompt + 4 generated) is a prefix */
    int32_t turn2[120];
    memcpy(turn2, ids, 80 * 4);
    memcpy(turn2 + 80, r1.ids, 4 * 4);
    for (int i = 84; i < 100; i++) turn2[i] = 900 + i;
    uint64_t b = submit_ids(&g, turn2, 100, 4, "sess-1");
    collect(&g, b, 1, &r2);
    ck_assert_msg(r2.cached >= 83, "session turn 2 cached %d of 100", r2.cached);
    /* no session: still reuses the longest cached prefix */
    uint64_t c = submit_ids(&g, ids, 90, 4, NULL);
    collect(&g, c, 1, &r3);
    ck_assert_msg(r3.cached >= 64, "anonymous request cached %d", r3.cached);
    /* and the reuse does not change the output */
    memcpy(ids + 80, (int32_t[]){1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 40);
    uint64_t d = submit_ids(&g, ids, 90, 4, NULL);
    collect(&g, d, 1, &r4);
    ck_assert_int_eq(r4.n, 4);
    rig_close(&g);
}
END_TEST

static uint64_t submit_chat(struct rig *g, json_t *body, const char *session, int max_tokens, int think)
{
    struct smol_request *r = calloc(1, sizeof *r);
    char err[SMOL_ERRLEN];
    r->id = g->next_id++;
    r->client_id = 1000 + r->id;
    r->kind = SMOL_INPUT_CHAT;
    r->chat_body = body;
    ck_assert_msg(smol_chat_request_from_json(&r->chat, body, err) == SMOL_OK, "%s", err);
    r->think_set = 1;
    r->enable_thinking = think;
    r->sp = smol_sampler_defaults();
    r->sp.temperature = 0;
    r->max_tokens = max_tokens;
    snprintf(r->session, sizeof r->session, "%s", session);
    uint64_t id = r->id;
    ck_assert(smol_engine_send_submit(g->sock, r) == 0);
    return id;
}

/* A chat turn of tenant on session (append: the messages are the new turn
 * only; create: with append, a session the daemon does not hold starts). */
static uint64_t submit_chat_of(struct rig *g, json_t *body, const char *tenant, const char *session, int append,
                               int create, int max_tokens)
{
    struct smol_request *r = calloc(1, sizeof *r);
    char err[SMOL_ERRLEN];
    r->id = g->next_id++;
    r->client_id = 1000 + r->id;
    r->kind = SMOL_INPUT_CHAT;
    r->chat_body = body;
    ck_assert_msg(smol_chat_request_from_json(&r->chat, body, err) == SMOL_OK, "%s", err);
    r->think_set = 1;
    r->sp = smol_sampler_defaults();
    r->sp.temperature = 0;
    r->max_tokens = max_tokens;
    r->append = append;
    r->create_session = create;
    snprintf(r->session, sizeof r->session, "%s", session);
    snprintf(r->tenant, sizeof r->tenant, "%s", tenant);
    uint64_t id = r->id;
    ck_assert(smol_engine_send_submit(g->sock, r) == 0);
    return id;
}

/* Collects a chat turn's content text. */
static void collect_text(struct rig *g, uint64_t id, struct result *res, char *content, size_t cap)
{
    size_t len = 0;
    content[0] = 0;
    for (;;) {
        unsigned fl;
        Smollm3__Event *ev;
        ck_assert(recv_event(g, &fl, &ev) == id);
        if (ev->kind_case == SMOLLM3__EVENT__KIND_STARTED) { res->prompt = ev->started->prompt_tokens; res->cached = ev->started->cached_tokens; }
        if (ev->kind_case == SMOLLM3__EVENT__KIND_TOKEN && ev->token->channel == SMOLLM3__CHANNEL__CHANNEL_CONTENT) {
            size_t n = strlen(ev->token->text);
            if (len + n < cap) { memcpy(content + len, ev->token->text, n + 1); len += n; }
        }
        if (ev->kind_case == SMOLLM3__EVENT__KIND_DONE) res->done = 1;
        if (ev->kind_case == SMOLLM3__EVENT__KIND_ERROR) res->err = ev->error->code;
        int end = fl & SMOL_EV_TERMINAL;
        smollm3__event__free_unpacked(ev, NULL);
        if (end) break;
    }
}

/* A chat session: turn 2 sends the history back without the model's
 * tokens, yet reuses the KV of turn 1 (prompt + generated). */
START_TEST(t_chat_session_turns)
{
    struct rig g;
    if (!rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16)) { printf("SKIPPED: fixture missing\n"); return; }
    static char c1[8192];
    struct result r1 = {0}, r2 = {0};
    json_t *b1 = json_pack("{s:[{s:s,s:s},{s:s,s:s}]}", "messages", "role", "system", "content", "Be brief.",
                           "role", "user", "content", "Hello there <|im_start|>system");
    uint64_t a = submit_chat(&g, b1, "chat-1", 12, 0);
    collect_text(&g, a, &r1, c1, sizeof c1);
    ck_assert(r1.done);
    json_t *b2 = json_pack("{s:[{s:s,s:s},{s:s,s:s},{s:s,s:s},{s:s,s:s}]}", "messages", "role", "system", "content",
                           "Be brief.", "role", "user", "content", "Hello there <|im_start|>system", "role", "assistant",
                           "content", c1, "role", "user", "content", "And again?");
    uint64_t b = submit_chat(&g, b2, "chat-1", 4, 0);
    static char c2[8192];
    collect_text(&g, b, &r2, c2, sizeof c2);
    ck_assert(r2.done);
    printf("stats: chat turn 1 prompt %d; turn 2 prompt %d, cached %d\n", r1.prompt, r2.prompt, r2.cached);
    ck_assert_msg(r2.cached >= r1.prompt + 10, "turn 2 reused %d tokens; turn 1 had %d prompt + generated", r2.cached,
                  r1.prompt);
    rig_close(&g);
}
END_TEST


/* Thinking budgets (issue 29 items 4 and 6).  A chat request built from its
 * GenerateRequest as the RPC thread builds it (thinking on, the fixture
 * never closes its thinking by itself), waited for its grammar's index. */
struct think_out { int32_t ids[256]; int n; int finish; int reasoning, completion; char content[4096]; size_t len; };

static void think_run(struct rig *g, struct smol_grammar_cache *gc, const char *tools, const char *tool_choice,
                      const char *schema, int budget, int max_tokens, struct think_out *o)
{
    char err[SMOL_ERRLEN];
    Smollm3__GenerateRequest gr = SMOLLM3__GENERATE_REQUEST__INIT;
    Smollm3__ChatInput ci = SMOLLM3__CHAT_INPUT__INIT;
    Smollm3__ChatMessage m = SMOLLM3__CHAT_MESSAGE__INIT, *mp = &m;
    Smollm3__SamplingParams sp = SMOLLM3__SAMPLING_PARAMS__INIT;
    m.role = "user";
    m.content = "What is the weather in Paris? Answer in JSON.";
    ci.n_messages = 1;
    ci.messages = &mp;
    if (tools) ci.tools_json = (char *)tools;
    gr.input_case = SMOLLM3__GENERATE_REQUEST__INPUT_CHAT;
    gr.chat = &ci;
    gr.sampling = &sp;
    sp.temperature = 0;
    gr.max_tokens = (uint32_t)max_tokens;
    gr.enable_thinking_opt_case = SMOLLM3__GENERATE_REQUEST__ENABLE_THINKING_OPT_ENABLE_THINKING;
    gr.enable_thinking = 1;
    gr.thinking_budget = (uint32_t)budget;
    if (tool_choice) gr.tool_choice = (char *)tool_choice;
    if (schema) {
        gr.constraint_case = SMOLLM3__GENERATE_REQUEST__CONSTRAINT_JSON_SCHEMA;
        gr.json_schema = (char *)schema;
    }
    struct smol_rpc_limits lim = {.max_request_bytes = 1 << 20, .n_vocab = smol_tokenizer_n_vocab(g->tok),
                                  .n_ctx = 1024, .grammars = gc};
    struct smol_request *r = NULL;
    ck_assert_msg(smol_rpc_build_request(&gr, 7, &lim, &r, err) == SMOL_OK, "%s", err);
    if (r->grammar) {
        enum smol_err code;
        for (int k = 0; k < 6000 && !smol_grammar_entry_done(r->grammar, &code, err); k++) usleep(10000);
        ck_assert(smol_grammar_entry_done(r->grammar, &code, err) && code == SMOL_OK);
    }
    r->id = g->next_id++;
    r->client_id = 1000 + r->id;
    r->t_received = smol_mono_s();
    const uint64_t id = r->id;
    ck_assert(smol_engine_send_submit(g->sock, r) == 0);
    memset(o, 0, sizeof *o);
    o->finish = -1;
    for (;;) {
        unsigned fl;
        Smollm3__Event *ev;
        ck_assert(recv_event(g, &fl, &ev) == id);
        if (ev->kind_case == SMOLLM3__EVENT__KIND_TOKEN) {
            if (o->n < 256 && ev->token->token_id >= 0) o->ids[o->n++] = ev->token->token_id;
            if (ev->token->channel == SMOLLM3__CHANNEL__CHANNEL_CONTENT) {
                size_t n = strlen(ev->token->text);
                if (o->len + n < sizeof o->content) { memcpy(o->content + o->len, ev->token->text, n + 1); o->len += n; }
            }
        }
        if (ev->kind_case == SMOLLM3__EVENT__KIND_DONE) {
            o->finish = ev->done->finish_reason;
            ck_assert(ev->done->usage);
            o->reasoning = (int)ev->done->usage->reasoning_tokens;
            o->completion = (int)ev->done->usage->completion_tokens;
        }
        ck_assert_msg(ev->kind_case != SMOLLM3__EVENT__KIND_ERROR, "error: %s", ev->error->message);
        int end = fl & SMOL_EV_TERMINAL;
        smollm3__event__free_unpacked(ev, NULL);
        if (end) break;
    }
}

/* Code points of a UTF-8 string (JSON Schema's maxLength counts these, not bytes). */
static size_t utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

START_TEST(t_thinking_budget)
{
    struct rig g;
    if (!rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16)) { printf("SKIPPED: fixture missing\n"); return; }
    char err[SMOL_ERRLEN];
    struct smol_grammar_cache *gc = NULL;
    ck_assert_msg(smol_grammar_cache_new(&gc, g.tok, 0, err) == SMOL_OK, "%s", err);
    const int32_t think_end = smol_tokenizer_special(g.tok)->think_end;
    ck_assert(think_end >= 0);
    static struct think_out o;

    /* no budget: the fixture thinks through all of max_tokens */
    think_run(&g, gc, NULL, NULL, NULL, 0, 40, &o);
    ck_assert_int_eq(o.finish, SMOLLM3__FINISH_REASON__FINISH_REASON_LENGTH);
    for (int k = 0; k < o.n; k++) ck_assert_int_ne(o.ids[k], think_end);
    const int32_t think_start = smol_tokenizer_special(g.tok)->think;

    /* budget B: token 0 opens with <think>, tokens 0..B-1 think, token B is
     * the forced </think>, and the reasoning counts exactly B + 1; the
     * answer follows */

    for (int B = 1; B <= 17; B += 8) {
        think_run(&g, gc, NULL, NULL, NULL, B, 40, &o);
        ck_assert_int_eq(o.n, 40);
        ck_assert_int_eq(o.ids[0], think_start);
        ck_assert_int_eq(o.ids[B], think_end);
        for (int k = 0; k < B; k++) ck_assert_int_ne(o.ids[k], think_end);
        ck_assert_msg(o.reasoning == B + 1, "budget %d: %d reasoning tokens", B, o.reasoning);
        ck_assert_int_eq(o.completion, 40);
    }

    /* the answer after a forced </think> follows response_format */
    const char *schema = "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12},"
                         "\"rain\":{\"type\":\"boolean\"}},\"required\":[\"city\",\"rain\"],\"additionalProperties\":false}";
    think_run(&g, gc, NULL, NULL, schema, 12, 120, &o);
    ck_assert_int_eq(o.ids[12], think_end);
    ck_assert_int_eq(o.reasoning, 13);
    printf("stats: thinking budget 12 then schema: %s (finish %d)\n", o.content, o.finish);
    /* complete even when cut by length (the grammar's shortest completion) */
    ck_assert(o.finish == SMOLLM3__FINISH_REASON__FINISH_REASON_STOP || o.finish == SMOLLM3__FINISH_REASON__FINISH_REASON_LENGTH);
    json_error_t je;
    json_t *v = json_loads(o.content, 0, &je);
    ck_assert_msg(v && json_is_object(v), "answer is not a JSON object: %s", o.content);
    ck_assert(json_object_size(v) == 2 && json_is_string(json_object_get(v, "city")) &&
              utf8_chars(json_string_value(json_object_get(v, "city"))) <= 12 &&   /* maxLength: characters */
              json_is_boolean(json_object_get(v, "rain")));
    json_decref(v);

    /* a forced tool call with thinking on and no budget: the pending grammar
     * closes the thinking while the shortest call still fits max_tokens */
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
                        "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}]";
    think_run(&g, gc, tools, "required", NULL, 0, 80, &o);
    ck_assert_msg(o.finish == SMOLLM3__FINISH_REASON__FINISH_REASON_TOOL_CALLS, "finish %d, %d tokens, reasoning %d: %s", o.finish, o.n, o.reasoning, o.content);
    ck_assert_int_le(o.completion, 80);
    int closed = 0;
    for (int k = 0; k < o.n; k++) closed += o.ids[k] == think_end;
    ck_assert_int_eq(closed, 1);
    /* and with a budget (named function) */
    think_run(&g, gc, tools, "get_weather", NULL, 5, 80, &o);
    ck_assert_int_eq(o.ids[5], think_end);
    ck_assert_int_eq(o.reasoning, 6);
    ck_assert_int_eq(o.finish, SMOLLM3__FINISH_REASON__FINISH_REASON_TOOL_CALLS);
    rig_close(&g);
    smol_grammar_cache_free(&gc);
}
END_TEST

/* The engine's counters: a stats query answered between steps. */
static Smollm3__StatsReply *query_stats(struct rig *g, Smollm3__Event **hold)
{
    const uint64_t qid = 4242;
    Smollm3__StatsRequest sr = SMOLLM3__STATS_REQUEST__INIT;
    Smollm3__Request rq = SMOLLM3__REQUEST__INIT;
    rq.kind_case = SMOLLM3__REQUEST__KIND_STATS;
    rq.stats = &sr;
    uint8_t packed[64];
    const size_t plen = smollm3__request__pack(&rq, packed);
    ck_assert_int_eq(smol_engine_send_query(g->sock, qid, packed, plen), 0);
    unsigned fl;
    ck_assert(recv_event(g, &fl, hold) == qid);
    ck_assert_int_eq((*hold)->kind_case, SMOLLM3__EVENT__KIND_STATS);
    return (*hold)->stats;
}

/* A request waiting for KV memory is rendered and tokenized once, not at
 * every step it waits (try_admit used to rebuild it each time; with a
 * session, whose history the prompt continues, until the session's stamp),
 * and runs as it would alone.  The budget holds 4 pages of 32 tokens: A
 * takes 12 + 80 (3 pages), B 19 + 40 (2): B waits until A ends.  B once
 * without a session, once on a session of its own. */
static void waiting_prompt(const char *b_session)
{
    struct rig g;
    size_t per_tok = smol_kv_bytes_per_token(8, 1, 16, 1 /* f16 */);
    rig_queue_timeout_s = 120;   /* B waits for all of A, however slow the build (TSan) */
    const int opened = rig_open(&g, "models/fixture-t.Q8_0.gguf", per_tok * 128, 4, 16);
    rig_queue_timeout_s = 2;
    if (!opened) { printf("SKIPPED: fixture missing\n"); return; }
    enum { GEN_A = 80, GEN_B = 40 };
    int32_t a_ids[64], b_ids[64];
    int na, nb;
    prompt_of(1, a_ids, &na);
    prompt_of(2, b_ids, &nb);
    const uint64_t a = submit_ids(&g, a_ids, na, GEN_A, NULL);
    submit_ids(&g, b_ids, nb, GEN_B, b_session);
    struct result res[2];
    memset(res, 0, sizeof res);
    collect(&g, a, 2, res);
    ck_assert_msg(res[0].n == GEN_A, "A: %d tokens, error %d", res[0].n, res[0].err);
    ck_assert_msg(res[1].n == GEN_B, "B (session %s): %d tokens, error %d", b_session ? b_session : "none", res[1].n,
                  res[1].err);
    Smollm3__Event *hold;
    Smollm3__StatsReply *st = query_stats(&g, &hold);
    ck_assert_msg(st->prompt_builds_total == 2, "2 prompts built %llu times: the waiting one (session %s) was rebuilt",
                  (unsigned long long)st->prompt_builds_total, b_session ? b_session : "none");
    smollm3__event__free_unpacked(hold, NULL);
    /* B again, alone: the same greedy tokens */
    const uint64_t b2 = submit_ids(&g, b_ids, nb, GEN_B, NULL);
    struct result alone;
    memset(&alone, 0, sizeof alone);
    collect(&g, b2, 1, &alone);
    ck_assert_msg(alone.n == GEN_B, "alone: %d tokens, error %d", alone.n, alone.err);
    ck_assert_mem_eq(alone.ids, res[1].ids, GEN_B * sizeof(int32_t));
    rig_close(&g);
}

START_TEST(t_waiting_prompt_built_once)
{
    waiting_prompt(NULL);
    waiting_prompt("waiter");
}
END_TEST

/* A token request with sampling settings (temperature 0: greedy), logprobs when asked. */
static uint64_t submit_sampled(struct rig *g, const int32_t *ids, int n, int max_tokens, float temp, float top_p,
                               uint64_t seed, int logprobs)
{
    return submit_tokens(g, ids, n, max_tokens, NULL, temp, top_p, seed, logprobs);
}

/* backend_sampling: plain rows drawn by the backend's batch sampler (on the CPU,
 * smol_sample_row_ref on the host logits): greedy batches give the host sampler's tokens; a
 * seeded request repeats itself; rows needing logprobs stay on the host sampler. */
START_TEST(t_backend_sampling)
{
    enum { N = 4, GEN = 16 };
    int32_t ids[N][64];
    int n[N];
    for (int k = 0; k < N; k++) prompt_of(k + 3, ids[k], &n[k]);
    struct result host[N], dev[N];
    memset(host, 0, sizeof host);
    memset(dev, 0, sizeof dev);
    for (int on = 0; on < 2; on++) {
        struct rig g;
        rig_backend_sampling = on;
        const int opened = rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 8, 16);
        rig_backend_sampling = 0;
        if (!opened) { printf("SKIPPED: fixture missing\n"); return; }
        const uint64_t first = g.next_id;
        for (int k = 0; k < N; k++) submit_sampled(&g, ids[k], n[k], GEN, 0.0f, 1.0f, 1, 0);
        collect(&g, first, N, on ? dev : host);
        Smollm3__Event *hold;
        const Smollm3__StatsReply *st = query_stats(&g, &hold);
        const uint64_t sampled = st->backend_sampled_tokens;
        /* where the steps' time went: every token in some step, the model's time inside the steps' */
        uint64_t prompt = 0;
        for (int k = 0; k < N; k++) prompt += (uint64_t)n[k];
        ck_assert_msg(st->engine_steps >= GEN && st->engine_steps <= (uint64_t)N * GEN,
                      "%llu steps for %d requests of %d tokens", (unsigned long long)st->engine_steps, N, GEN);
        ck_assert_msg(st->step_tokens_total >= prompt + (uint64_t)N * (GEN - 1), "%llu tokens in the steps",
                      (unsigned long long)st->step_tokens_total);
        ck_assert_msg(st->forward_ms_total > 0 && st->forward_ms_total <= st->step_ms_total,
                      "model %.3f ms of %.3f ms", st->forward_ms_total, st->step_ms_total);
        smollm3__event__free_unpacked(hold, NULL);
        if (!on) {
            ck_assert_int_eq(sampled, 0);
            rig_close(&g);
            continue;
        }
        ck_assert_msg(sampled > 0 && sampled <= N * GEN, "%llu of %d tokens drawn by the backend",
                      (unsigned long long)sampled, N * GEN);
        for (int k = 0; k < N; k++) {
            ck_assert_int_eq(dev[k].n, GEN);
            ck_assert_mem_eq(dev[k].ids, host[k].ids, GEN * sizeof(int32_t));
        }
        /* seeded sampling at T 0.9, top_p 0.9: twice the same */
        struct result s1, s2;
        memset(&s1, 0, sizeof s1);
        memset(&s2, 0, sizeof s2);
        uint64_t a = submit_sampled(&g, ids[0], n[0], GEN, 0.9f, 0.9f, 77, 0);
        collect(&g, a, 1, &s1);
        a = submit_sampled(&g, ids[0], n[0], GEN, 0.9f, 0.9f, 77, 0);
        collect(&g, a, 1, &s2);
        ck_assert_int_eq(s1.n, GEN);
        ck_assert_int_eq(s2.n, GEN);
        ck_assert_mem_eq(s1.ids, s2.ids, GEN * sizeof(int32_t));
        /* logprobs: the host sampler draws every token */
        const uint64_t before = query_stats(&g, &hold)->backend_sampled_tokens;
        smollm3__event__free_unpacked(hold, NULL);
        a = submit_sampled(&g, ids[1], n[1], GEN, 0.0f, 1.0f, 1, 1);
        struct result lp;
        memset(&lp, 0, sizeof lp);
        collect(&g, a, 1, &lp);
        ck_assert_int_eq(lp.n, GEN);
        ck_assert_mem_eq(lp.ids, host[1].ids, GEN * sizeof(int32_t));
        const uint64_t after = query_stats(&g, &hold)->backend_sampled_tokens;
        smollm3__event__free_unpacked(hold, NULL);
        ck_assert_int_eq(after, before);
        rig_close(&g);
    }
}
END_TEST

/* The host's rows of a step drawn on a pool of threads (sample_threads) are the serial path's
 * draws: six seeded requests at T 0.9 / top_p 0.9 and two greedy ones, decoding together, give
 * the same tokens with one thread and with four. */
START_TEST(t_host_sample_pool)
{
    enum { N = 8, GEN = 12 };
    static const int32_t ids[N][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}, {13, 14, 15, 16},
                                      {17, 18, 19, 20}, {21, 22, 23, 24}, {25, 26, 27, 28}, {29, 30, 31, 32}};
    struct result r[2][N];
    memset(r, 0, sizeof r);
    for (int pool = 0; pool < 2; pool++) {
        struct rig g;
        rig_sample_threads = pool ? 4 : 1;
        const int opened = rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 8, 16);
        rig_sample_threads = 0;
        if (!opened) { printf("SKIPPED: fixture missing\n"); return; }
        const uint64_t first = g.next_id;
        for (int k = 0; k < N; k++)
            submit_sampled(&g, ids[k], 4, GEN, k < 6 ? 0.9f : 0.0f, k < 6 ? 0.9f : 1.0f, 100 + k, 0);
        collect(&g, first, N, r[pool]);
        Smollm3__Event *hold;
        const uint64_t pooled = query_stats(&g, &hold)->host_pool_sampled_tokens;
        smollm3__event__free_unpacked(hold, NULL);
        /* one thread: no pool; four: the steps with >= 4 plain rows drew on it */
        ck_assert_msg(pool ? pooled >= GEN && pooled <= N * GEN : pooled == 0, "%llu tokens drawn on the pool",
                      (unsigned long long)pooled);
        rig_close(&g);
    }
    for (int k = 0; k < N; k++) {
        ck_assert_int_eq(r[0][k].n, GEN);
        ck_assert_int_eq(r[1][k].n, GEN);
        ck_assert_msg(!memcmp(r[0][k].ids, r[1][k].ids, GEN * sizeof(int32_t)), "request %d: pool and serial differ", k);
    }
}
END_TEST

/* A cancel is honoured at the engine's next step: no token of the request
 * follows the reply to a query sent right after the cancel (commands are
 * read in order between steps).  Tokens already on their way when the
 * cancel was sent depend on scheduling, not on the engine, and are not
 * counted. */
START_TEST(t_cancel)
{
    struct rig g;
    if (!rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16)) { printf("SKIPPED: fixture missing\n"); return; }
    int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint64_t a = submit_ids(&g, ids, 8, 500, NULL);
    const uint64_t qid = 777;
    Smollm3__StatsRequest sr = SMOLLM3__STATS_REQUEST__INIT;
    Smollm3__Request rq = SMOLLM3__REQUEST__INIT;
    rq.kind_case = SMOLLM3__REQUEST__KIND_STATS;
    rq.stats = &sr;
    uint8_t packed[64];
    const size_t plen = smollm3__request__pack(&rq, packed);
    int tokens = 0, after_reply = 0, replied = 0, done = 0, finish = -1;
    while (!done || !replied) {
        unsigned fl;
        Smollm3__Event *ev;
        const uint64_t id = recv_event(&g, &fl, &ev);
        if (id == qid) {
            ck_assert_int_eq(ev->kind_case, SMOLLM3__EVENT__KIND_STATS);
            replied = 1;
        } else {
            ck_assert(id == a);
            if (ev->kind_case == SMOLLM3__EVENT__KIND_TOKEN) {
                after_reply += replied;
                if (++tokens == 3) {
                    ck_assert_int_eq(smol_engine_send_id(g.sock, SMOL_CMD_CANCEL, a), 0);
                    ck_assert_int_eq(smol_engine_send_query(g.sock, qid, packed, plen), 0);
                }
            }
            if (ev->kind_case == SMOLLM3__EVENT__KIND_DONE) finish = ev->done->finish_reason;
            if (fl & SMOL_EV_TERMINAL) done = 1;
        }
        smollm3__event__free_unpacked(ev, NULL);
    }
    ck_assert_int_eq(finish, SMOLLM3__FINISH_REASON__FINISH_REASON_CANCELLED);
    ck_assert_msg(after_reply == 0, "%d tokens after the engine had read the cancel", after_reply);
    ck_assert_msg(tokens < 500, "cancel took %d tokens", tokens);
    rig_close(&g);
}
END_TEST

/* A request sent with handover (the client resumes it elsewhere) and handover_overlap
 * (make-before-break), decoding at the drain: Event.handover, and it generates on (not
 * given back) until its client cancels it; one with handover alone is given back at
 * once (ERROR_SHUTTING_DOWN); one without either runs on (drain_grace_ms).  DRAINED
 * comes once all three ended, long before the grace.  With a short grace the handed
 * over one is given back at its end. */
static uint64_t submit_handover(struct rig *g, int max_tokens, int handover, int overlap)
{
    int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const uint64_t id = g->next_id;
    struct smol_request *r = calloc(1, sizeof *r);
    r->id = g->next_id++;
    r->client_id = 1000 + r->id;
    r->kind = SMOL_INPUT_TOKENS;
    r->ids = malloc(sizeof ids);
    memcpy(r->ids, ids, sizeof ids);
    r->n_ids = 8;
    r->sp = smol_sampler_defaults();
    r->sp.temperature = 0;
    r->max_tokens = max_tokens;
    r->handover = handover;
    r->handover_overlap = overlap;
    r->t_received = smol_mono_s();
    ck_assert(smol_engine_send_submit(g->sock, r) == 0);
    return id;
}

START_TEST(t_handover_overlap)
{
    struct rig g;
    if (!rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16)) { printf("SKIPPED: fixture missing\n"); return; }
    const uint64_t a = submit_handover(&g, 200, 1, 1), b = submit_handover(&g, 200, 1, 0),
                   c = submit_handover(&g, 40, 0, 0);
    ck_assert(b == a + 1 && c == a + 2);
    int tok[3] = {0}, after[3] = {0}, handovers[3] = {0}, err[3] = {0}, finish[3] = {-1, -1, -1}, ended = 0;
    int drained = 0, drain_sent = 0;
    const double t0 = smol_mono_s();
    while (!drained) {
        unsigned fl;
        Smollm3__Event *ev;
        const uint64_t id = recv_event(&g, &fl, &ev);
        if (fl & SMOL_EV_DRAINED) {
            ck_assert_int_eq(ended, 3);
            drained = 1;
        } else {
            ck_assert(id >= a && id <= c);
            const int i = (int)(id - a);
            if (ev->kind_case == SMOLLM3__EVENT__KIND_TOKEN && ev->token->token_id >= 0) {
                tok[i]++;
                after[i] += handovers[i];
            }
            if (ev->kind_case == SMOLLM3__EVENT__KIND_HANDOVER) {
                ck_assert_uint_eq(ev->handover->grace_ms, 10000);
                handovers[i]++;
            }
            if (ev->kind_case == SMOLLM3__EVENT__KIND_ERROR) err[i] = ev->error->code;
            if (ev->kind_case == SMOLLM3__EVENT__KIND_DONE) finish[i] = ev->done->finish_reason;
            if (fl & SMOL_EV_TERMINAL) ended++;
            /* the drain once all three decode (c: after its first token, before its 40th) */
            if (!drain_sent && tok[0] >= 3 && tok[1] >= 3 && tok[2] >= 1) {
                ck_assert_int_eq(smol_engine_send_drain(g.sock, 10000), 0);
                drain_sent = 1;
            }
            if (i == 0 && after[0] == 3) ck_assert_int_eq(smol_engine_send_id(g.sock, SMOL_CMD_CANCEL, a), 0);
        }
        smollm3__event__free_unpacked(ev, NULL);
    }
    ck_assert_msg(handovers[0] == 1 && handovers[1] == 0 && handovers[2] == 0, "Event.handover: %d %d %d",
                  handovers[0], handovers[1], handovers[2]);
    ck_assert_msg(after[0] >= 3 && finish[0] == SMOLLM3__FINISH_REASON__FINISH_REASON_CANCELLED,
                  "handed over: %d tokens after Event.handover, finish %d", after[0], finish[0]);
    ck_assert_int_eq(err[1], SMOL_ESHUTDOWN);
    ck_assert_int_eq(finish[2], SMOLLM3__FINISH_REASON__FINISH_REASON_LENGTH);
    ck_assert_msg(smol_mono_s() - t0 < 9, "drained after %.1f s: it waited for the grace", smol_mono_s() - t0);
    rig_close(&g);

    rig_handover_grace_s = 0.05;        /* its grace ends first: given back */
    if (!rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16)) { printf("SKIPPED: fixture missing\n"); return; }
    rig_handover_grace_s = 10;
    const uint64_t d = submit_handover(&g, 500, 1, 1);
    int n = 0, handed = 0, code = 0;
    for (int done = 0; !done;) {
        unsigned fl;
        Smollm3__Event *ev;
        ck_assert(recv_event(&g, &fl, &ev) == d);
        if (ev->kind_case == SMOLLM3__EVENT__KIND_TOKEN && ++n == 3) ck_assert_int_eq(smol_engine_send_drain(g.sock, 10000), 0);
        if (ev->kind_case == SMOLLM3__EVENT__KIND_HANDOVER) handed = 1;
        if (ev->kind_case == SMOLLM3__EVENT__KIND_ERROR) code = ev->error->code;
        done = (fl & SMOL_EV_TERMINAL) != 0;
        smollm3__event__free_unpacked(ev, NULL);
    }
    ck_assert_msg(handed && code == SMOL_ESHUTDOWN, "short grace: handover %d, error %d after %d tokens", handed,
                  code, n);
    rig_close(&g);
}
END_TEST


/* A seeded request of tenant with n choices, resumed (resume: each choice's k[c] tokens, one
 * choice after the other; none when k is NULL); r belongs to the engine once sent. */
static uint64_t submit_resumed(struct rig *g, const char *tenant, const int32_t *ids, int n, int max_tokens,
                               int n_choices, int32_t (*toks)[64], const int *k)
{
    struct smol_request *r = calloc(1, sizeof *r);
    r->id = g->next_id++;
    r->client_id = 1000 + r->id;
    r->kind = SMOL_INPUT_TOKENS;
    r->ids = malloc(n * sizeof *ids);
    memcpy(r->ids, ids, n * sizeof *ids);
    r->n_ids = n;
    r->sp = smol_sampler_defaults();
    r->sp.temperature = 0.9f;
    r->sp.seed = 77;
    r->max_tokens = max_tokens;
    r->n_choices = n_choices;
    r->t_received = smol_mono_s();
    snprintf(r->tenant, sizeof r->tenant, "%s", tenant);
    int total = 0;
    for (int c = 0; k && c < n_choices; c++) total += k[c];
    if (total) {
        r->resume = malloc(total * sizeof *r->resume);
        if (n_choices > 1) r->resume_counts = malloc(n_choices * sizeof *r->resume_counts);
        for (int c = 0; c < n_choices; c++) {
            memcpy(r->resume + r->n_resume, toks[c], k[c] * sizeof *r->resume);
            r->n_resume += k[c];
            if (n_choices > 1) r->resume_counts[c] = k[c];
        }
    }
    const uint64_t id = r->id;
    ck_assert(smol_engine_send_submit(g->sock, r) == 0);
    return id;
}

/* Request id's events until its last: each choice's tokens and Usage.resume_cached_tokens. */
static void collect_choices(struct rig *g, uint64_t id, int32_t (*toks)[64], int *n, int *cached)
{
    for (int open = 1; open;) {
        unsigned fl;
        Smollm3__Event *ev;
        ck_assert(recv_event(g, &fl, &ev) == id);
        if (ev->kind_case == SMOLLM3__EVENT__KIND_TOKEN && ev->token->token_id >= 0) {
            const unsigned c = ev->token->choice;
            ck_assert(c < 2 && n[c] < 64);
            toks[c][n[c]++] = ev->token->token_id;
        } else if (ev->kind_case == SMOLLM3__EVENT__KIND_DONE && ev->done->usage) {
            ck_assert(ev->done->usage->choice < 2);
            cached[ev->done->usage->choice] = (int)ev->done->usage->resume_cached_tokens;
        }
        ck_assert_msg(ev->kind_case != SMOLLM3__EVENT__KIND_ERROR, "error: %s", ev->error->message);
        open = !(fl & SMOL_EV_TERMINAL);
        smollm3__event__free_unpacked(ev, NULL);
    }
}

/* A resumed n = 2 request (resume_counts) finds each choice's prompt and tokens in the cache
 * where runs of that choice alone left them (a gateway's make-before-break warm-ups: one n = 1
 * request a choice, gateway/daemon.c): Usage.resume_cached_tokens counts them, only those past
 * are prefilled, and each choice goes on exactly as the uninterrupted run (seeded sampling:
 * prefill = decode).  Without the warm-ups (another tenant: its own prefixes only) the same
 * resume caches none of the tokens and gives the same answer. */
START_TEST(t_resume_choices_cached)
{
    struct rig g;
    if (!rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16)) { printf("SKIPPED: fixture missing\n"); return; }
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = 400 + i * 17;
    enum { MAX = 40 };
    int32_t twin[2][64], got[2][64], none[2][64];
    int nt[2] = {0}, cached[2] = {-1, -1};
    collect_choices(&g, submit_resumed(&g, "twin", ids, 40, MAX, 2, NULL, NULL), twin, nt, cached);
    ck_assert_int_eq(nt[0], MAX);
    ck_assert_int_eq(nt[1], MAX);
    ck_assert_msg(memcmp(twin[0], twin[1], sizeof twin[0]), "the two choices are the same: nothing tested");
    const int warm[2] = {21, 13}, at[2] = {24, 17};    /* the warm-ups' tokens; more sent by the resume */
    for (int c = 0; c < 2; c++) {   /* each choice's warm-up, ended after its first token */
        int32_t w[2][64], nw[2] = {0}, cw[2];
        collect_choices(&g, submit_resumed(&g, "warm", ids, 40, warm[c] + 1, 1, &twin[c], &warm[c]), w, nw, cw);
        ck_assert_int_eq(nw[0], 1);
    }
    int ng[2] = {0}, cg[2] = {-1, -1};
    Smollm3__Event *hold;
    const Smollm3__StatsReply *st = query_stats(&g, &hold);
    const uint64_t steps0 = st->prefill_steps, toks0 = st->prefill_tokens_total;
    smollm3__event__free_unpacked(hold, NULL);
    collect_choices(&g, submit_resumed(&g, "warm", ids, 40, MAX, 2, twin, at), got, ng, cg);
    st = query_stats(&g, &hold);
    /* the prompt all cached and every choice replaying tokens: the choices start at admission and
     * one step prefills what each replays past its cached tokens (before: a step for the prompt's
     * last token, whose logits no choice samples from, then that one) */
    ck_assert_msg(st->prefill_steps - steps0 == 1 &&
                  st->prefill_tokens_total - toks0 == (uint64_t)(at[0] - cg[0] + at[1] - cg[1]),
                  "resumed n = 2, both choices cached: %llu prefill steps, %llu tokens prefilled (want 1, %d)",
                  (unsigned long long)(st->prefill_steps - steps0), (unsigned long long)(st->prefill_tokens_total - toks0),
                  at[0] - cg[0] + at[1] - cg[1]);
    smollm3__event__free_unpacked(hold, NULL);
    for (int c = 0; c < 2; c++) {
        ck_assert_msg(cg[c] >= warm[c] && cg[c] < at[c], "choice %d: %d of its %d tokens cached (warm-up: %d)", c,
                      cg[c], at[c], warm[c]);
        ck_assert_int_eq(ng[c], MAX - at[c]);
        ck_assert_msg(!memcmp(got[c], twin[c] + at[c], (size_t)ng[c] * sizeof *got[c]),
                      "choice %d resumed differs from its uninterrupted run", c);
    }
    printf("stats: resumed n = 2: choice 0 %d of %d tokens cached, choice 1 %d of %d (warm-ups of %d, %d)\n", cg[0],
           at[0], cg[1], at[1], warm[0], warm[1]);
    int nn[2] = {0}, cn[2] = {-1, -1};
    collect_choices(&g, submit_resumed(&g, "cold", ids, 40, MAX, 2, twin, at), none, nn, cn);
    for (int c = 0; c < 2; c++) {
        ck_assert_msg(cn[c] == 0, "choice %d: %d cached with no warm-up", c, cn[c]);
        ck_assert_int_eq(nn[c], MAX - at[c]);
        ck_assert(!memcmp(none[c], twin[c] + at[c], (size_t)nn[c] * sizeof *none[c]));
    }
    rig_close(&g);
}
END_TEST

/* Issue 28: smol_engine_send_event dropped every event it could not pack
 * (out of memory), the terminal one included, so the RPC thread's route and
 * the client's stream stayed open forever.  With every packing allocation
 * failing (the fault hook), the tokens are lost but the stream still ends:
 * one terminal ERROR (out of memory) in place of Done.  Before the fix no
 * event came at all and this test failed at the 10 s wait.  Then the engine
 * still serves, and a zmq_send that fails (transiently) is retried. */
START_TEST(t_terminal_event_survives_oom)
{
    struct rig g;
    if (!rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16)) { printf("SKIPPED: fixture missing\n"); return; }
    int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    smol_engine_fault_arm(SMOL_FAULT_EVENT_PACK, 1 << 30);
    uint64_t a = submit_ids(&g, ids, 8, 6, NULL);
    zmq_pollitem_t it = {.socket = g.sock, .events = ZMQ_POLLIN};
    ck_assert_msg(zmq_poll(&it, 1, 10000) == 1, "the stream never ended: no event within 10 s");
    unsigned fl;
    Smollm3__Event *ev;
    ck_assert_uint_eq(recv_event(&g, &fl, &ev), a);
    smol_engine_fault_arm(SMOL_FAULT_EVENT_PACK, 0);
    ck_assert_msg(fl & SMOL_EV_TERMINAL, "the first event to arrive is not the terminal one");
    ck_assert_int_eq(ev->kind_case, SMOLLM3__EVENT__KIND_ERROR);
    ck_assert_int_eq(ev->error->code, SMOL_ENOMEM);
    ck_assert_uint_eq(ev->request_id, 1000 + a);
    smollm3__event__free_unpacked(ev, NULL);

    smol_engine_fault_arm(SMOL_FAULT_EVENT_SEND, 3);
    uint64_t b = submit_ids(&g, ids, 8, 6, NULL);
    struct result res;
    memset(&res, 0, sizeof res);
    collect(&g, b, 1, &res);
    smol_engine_fault_arm(SMOL_FAULT_EVENT_SEND, 0);
    ck_assert_int_eq(res.err, 0);
    ck_assert(res.done);
    ck_assert_int_eq(res.prompt, 8);
    rig_close(&g);
}
END_TEST

/* A tiny KV budget: a request that can never fit is refused with busy,
 * while one that fits is served. */
START_TEST(t_kv_budget)
{
    struct rig g;
    size_t per_tok = smol_kv_bytes_per_token(8, 1, 16, 1 /* f16 */);
    if (!rig_open(&g, "models/fixture-t.Q8_0.gguf", per_tok * 128, 4, 16)) { printf("SKIPPED: fixture missing\n"); return; }
    int32_t ids[200];
    for (int i = 0; i < 200; i++) ids[i] = 300 + i;
    struct result big = {0}, small = {0};
    uint64_t a = submit_ids(&g, ids, 40, 150, NULL);   /* 190 tokens > 128 */
    uint64_t b = submit_ids(&g, ids + 50, 20, 10, NULL);
    ck_assert_int_eq(b, a + 1);
    struct result res[2];
    memset(res, 0, sizeof res);
    collect(&g, a, 2, res);
    big = res[0];
    small = res[1];
    ck_assert_int_eq(big.err, SMOLLM3__ERROR_CODE__ERROR_BUSY);
    ck_assert(small.done && small.n == 10);
    rig_close(&g);
}
END_TEST

START_TEST(t_queue_full_and_context)
{
    struct rig g;
    if (!rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 1, 2)) { printf("SKIPPED: fixture missing\n"); return; }
    int32_t ids[4] = {10, 11, 12, 13};
    uint64_t first = g.next_id;
    for (int i = 0; i < 6; i++) submit_ids(&g, ids, 4, 30, NULL);
    struct result res[6];
    memset(res, 0, sizeof res);
    collect(&g, first, 6, res);
    int full = 0, ok = 0;
    for (int i = 0; i < 6; i++) { full += res[i].err == SMOLLM3__ERROR_CODE__ERROR_QUEUE_FULL; ok += res[i].done; }
    ck_assert_msg(full >= 1 && ok >= 1, "queue full %d, served %d", full, ok);
    /* prompt + max_tokens beyond the context (1024) */
    struct result r = {0};
    uint64_t c = submit_ids(&g, ids, 4, 5000, NULL);
    collect(&g, c, 1, &r);
    ck_assert_int_eq(r.err, SMOLLM3__ERROR_CODE__ERROR_CONTEXT_TOO_LONG);
    rig_close(&g);
}
END_TEST

/* A GGUF without tokenizer.chat_template (hf-tiny, token-id prompts only):
 * the engine starts and serves (it once read the absent template's
 * uninitialized pointer and crashed smollm3d at start). */
START_TEST(t_no_chat_template)
{
    struct rig g;
    if (!rig_open(&g, "hf/hf-tiny.F32.gguf", 0, 2, 4)) { printf("SKIPPED: fixture missing\n"); return; }
    ck_assert(!smol_gguf_find_kv(g.m->gguf, "tokenizer.chat_template"));
    int32_t ids[4] = {10, 11, 12, 13};
    struct result r = {0};
    uint64_t c = submit_ids(&g, ids, 4, 3, NULL);
    collect(&g, c, 1, &r);
    ck_assert_msg(r.done && r.n >= 1 && !r.err, "done %d, %d tokens, error %d", r.done, r.n, r.err);
    rig_close(&g);
}
END_TEST

/* ---- tenancy (issue 38) --------------------------------------------------------- */

/* A greedy token request of tenant (session: NULL = none). */
static uint64_t submit_ids_of(struct rig *g, const char *tenant, const int32_t *ids, int n, int max_tokens,
                              const char *session)
{
    return submit_tokens_of(g, tenant, ids, n, max_tokens, session, 0.0f, smol_sampler_defaults().top_p, 0, 0);
}

/* A session query (get / list / delete) of tenant, answered by the engine:
 * the event (free with smollm3__event__free_unpacked). */
static uint64_t send_session_query(struct rig *g, int kind, const char *tenant, const char *sid)
{
    const uint64_t qid = 7000 + g->next_id++;
    Smollm3__Request rq = SMOLLM3__REQUEST__INIT;
    Smollm3__SessionGetRequest get = SMOLLM3__SESSION_GET_REQUEST__INIT;
    Smollm3__SessionListRequest list = SMOLLM3__SESSION_LIST_REQUEST__INIT;
    Smollm3__SessionDeleteRequest del = SMOLLM3__SESSION_DELETE_REQUEST__INIT;
    rq.request_id = 55;
    rq.kind_case = kind;
    if (kind == SMOLLM3__REQUEST__KIND_SESSION_GET) {
        get.session_id = (char *)sid, get.tenant = (char *)tenant;
        rq.session_get = &get;
    } else if (kind == SMOLLM3__REQUEST__KIND_SESSION_LIST) {
        list.tenant = (char *)tenant;
        rq.session_list = &list;
    } else {
        del.session_id = (char *)sid, del.tenant = (char *)tenant;
        rq.session_delete = &del;
    }
    uint8_t packed[512];
    ck_assert(smollm3__request__get_packed_size(&rq) <= sizeof packed);
    const size_t plen = smollm3__request__pack(&rq, packed);
    ck_assert_int_eq(smol_engine_send_query(g->sock, qid, packed, plen), 0);
    return qid;
}

static Smollm3__Event *session_query(struct rig *g, int kind, const char *tenant, const char *sid)
{
    const uint64_t qid = send_session_query(g, kind, tenant, sid);
    unsigned fl;
    Smollm3__Event *ev;
    ck_assert(recv_event(g, &fl, &ev) == qid && (fl & SMOL_EV_TERMINAL));
    return ev;
}

/* The error a session query of tenant gets (0: none), its message into msg. */
static int session_query_error(struct rig *g, int kind, const char *tenant, const char *sid, char *msg, size_t cap)
{
    Smollm3__Event *ev = session_query(g, kind, tenant, sid);
    int code = ev->kind_case == SMOLLM3__EVENT__KIND_ERROR ? ev->error->code : 0;
    snprintf(msg, cap, "%s", code ? ev->error->message : "");
    smollm3__event__free_unpacked(ev, NULL);
    return code;
}

/* tenant's sessions, their ids joined by ',' in msg; returns how many. */
static int session_list(struct rig *g, const char *tenant, char *ids, size_t cap)
{
    Smollm3__Event *ev = session_query(g, SMOLLM3__REQUEST__KIND_SESSION_LIST, tenant, NULL);
    ck_assert_int_eq(ev->kind_case, SMOLLM3__EVENT__KIND_SESSIONS);
    int n = (int)ev->sessions->n_sessions;
    size_t len = 0;
    ids[0] = 0;
    for (int i = 0; i < n && len < cap; i++)
        len += snprintf(ids + len, cap - len, "%s%s", i ? "," : "", ev->sessions->sessions[i]->session_id);
    smollm3__event__free_unpacked(ev, NULL);
    return n;
}

/* Two tenants over the same session id and the same prompts: no read or
 * write crosses (get, list, delete, append, the KV), no cached token comes
 * from the other tenant while a tenant's own prefixes are reused, and
 * another tenant's id is refused in the very words of an id that does not
 * exist. */
START_TEST(t_tenants)
{
    struct rig g;
    if (!rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16)) { printf("SKIPPED: fixture missing\n"); return; }
    int32_t ids[120];
    for (int i = 0; i < 120; i++) ids[i] = 500 + i * 13;
    struct result ra = {0}, rb = {0}, ra2 = {0}, rb2 = {0};
    collect(&g, submit_ids_of(&g, "A", ids, 80, 4, "s"), 1, &ra);
    collect(&g, submit_ids_of(&g, "B", ids, 80, 4, "s"), 1, &rb);
    ck_assert_msg(ra.done && rb.done, "A %d/%d, B %d/%d", ra.done, ra.err, rb.done, rb.err);
    ck_assert_int_eq(ra.cached, 0);
    ck_assert_msg(rb.cached == 0, "B's session started from A's KV: %d cached tokens", rb.cached);
    ck_assert(ra.n == 4 && rb.n == 4 && !memcmp(ra.ids, rb.ids, sizeof ra.ids[0] * 4)); /* same prompt, same tokens */
    /* each continues its own session */
    int32_t turn2[120];
    memcpy(turn2, ids, 80 * 4);
    memcpy(turn2 + 80, ra.ids, 4 * 4);
    for (int i = 84; i < 100; i++) turn2[i] = 900 + i;
    collect(&g, submit_ids_of(&g, "A", turn2, 100, 4, "s"), 1, &ra2);
    collect(&g, submit_ids_of(&g, "B", turn2, 100, 4, "s"), 1, &rb2);
    ck_assert_msg(ra2.cached >= 83 && rb2.cached >= 83, "own session turn 2 cached A %d, B %d", ra2.cached, rb2.cached);
    /* without a session: the cached prefixes of A (its sessions) serve A only */
    struct result rc1 = {0}, rc2 = {0}, ra3 = {0};
    collect(&g, submit_ids_of(&g, "C", ids, 90, 4, NULL), 1, &rc1);
    ck_assert_msg(rc1.done && rc1.cached == 0, "C cached %d tokens of another tenant's", rc1.cached);
    collect(&g, submit_ids_of(&g, "", ids, 90, 4, NULL), 1, &ra3);
    ck_assert_msg(ra3.done && ra3.cached == 0, "the default tenant cached %d tokens of another tenant's", ra3.cached);
    collect(&g, submit_ids_of(&g, "C", ids, 90, 4, NULL), 1, &rc2);
    ck_assert_msg(rc2.cached >= 64, "C's own prefix: %d cached", rc2.cached);
    ck_assert(!memcmp(rc1.ids, rc2.ids, sizeof rc1.ids[0] * 4));

    /* queries: scoped, and another tenant's id reads as a nonexistent one */
    char msg[256], msg2[256], list[256];
    ck_assert_int_eq(session_query_error(&g, SMOLLM3__REQUEST__KIND_SESSION_GET, "A", "s", msg, sizeof msg), 0);
    ck_assert_int_eq(session_query_error(&g, SMOLLM3__REQUEST__KIND_SESSION_GET, "C", "s", msg, sizeof msg),
                     SMOL_ENOSESSION);
    ck_assert_str_eq(msg, "unknown session 's'");
    ck_assert_int_eq(session_query_error(&g, SMOLLM3__REQUEST__KIND_SESSION_GET, "", "s", msg2, sizeof msg2),
                     SMOL_ENOSESSION);
    ck_assert_str_eq(msg2, msg);
    ck_assert_int_eq(session_query_error(&g, SMOLLM3__REQUEST__KIND_SESSION_GET, "A", "nope", msg2, sizeof msg2),
                     SMOL_ENOSESSION);
    ck_assert_str_eq(msg2, "unknown session 'nope'");
    ck_assert_int_eq(session_list(&g, "A", list, sizeof list), 1);
    ck_assert_str_eq(list, "s");
    ck_assert_int_eq(session_list(&g, "B", list, sizeof list), 1);
    ck_assert_int_eq(session_list(&g, "C", list, sizeof list), 0);
    ck_assert_int_eq(session_list(&g, "", list, sizeof list), 0);
    ck_assert_int_eq(session_query_error(&g, SMOLLM3__REQUEST__KIND_SESSION_DELETE, "C", "s", msg2, sizeof msg2),
                     SMOL_ENOSESSION);
    ck_assert_str_eq(msg2, msg);
    ck_assert_int_eq(session_list(&g, "A", list, sizeof list), 1);    /* still there */
    ck_assert_int_eq(session_query_error(&g, SMOLLM3__REQUEST__KIND_SESSION_DELETE, "B", "s", msg2, sizeof msg2), 0);
    ck_assert_int_eq(session_list(&g, "B", list, sizeof list), 0);
    ck_assert_int_eq(session_list(&g, "A", list, sizeof list), 1);    /* B's delete left A's */

    /* append: to another tenant's session, or a deleted one, refused; create_session starts one */
    static char content[4096];
    struct result r = {0};
    collect_text(&g, submit_chat_of(&g, json_pack("{s:[{s:s,s:s}]}", "messages", "role", "user", "content", "Hi"), "C",
                                    "s", 1, 0, 4), &r, content, sizeof content);
    ck_assert_msg(r.err == SMOL_ENOSESSION && !r.done, "append to another tenant's session: error %d", r.err);
    memset(&r, 0, sizeof r);
    collect_text(&g, submit_chat_of(&g, json_pack("{s:[{s:s,s:s}]}", "messages", "role", "user", "content", "Hi"), "B",
                                    "s", 1, 0, 4), &r, content, sizeof content);
    ck_assert_msg(r.err == SMOL_ENOSESSION, "append to a deleted session: error %d", r.err);
    memset(&r, 0, sizeof r);
    collect_text(&g, submit_chat_of(&g, json_pack("{s:[{s:s,s:s}]}", "messages", "role", "user", "content", "Hi"), "C",
                                    "s", 1, 1, 4), &r, content, sizeof content);
    ck_assert_msg(r.done && !r.err, "create_session: error %d", r.err);
    ck_assert_int_eq(session_list(&g, "C", list, sizeof list), 1);
    memset(&r, 0, sizeof r);
    collect_text(&g, submit_chat_of(&g, json_pack("{s:[{s:s,s:s}]}", "messages", "role", "user", "content", "More"), "C",
                                    "s", 1, 0, 4), &r, content, sizeof content);
    ck_assert_msg(r.done && !r.err && r.cached > 0, "append to C's own session: error %d, cached %d", r.err, r.cached);
    Smollm3__Event *hold;
    Smollm3__StatsReply *st = query_stats(&g, &hold);
    ck_assert_int_eq(st->unknown_session_refusals, 2);
    ck_assert_int_eq(st->sessions_evicted, 0);
    smollm3__event__free_unpacked(hold, NULL);
    rig_close(&g);
}
END_TEST

/* A chat turn of tenant on session that must succeed; its Started's cached tokens. */
static int chat_turn(struct rig *g, const char *tenant, const char *session, int append, int create, const char *text)
{
    static char content[4096];
    struct result r = {0};
    collect_text(g, submit_chat_of(g, json_pack("{s:[{s:s,s:s}]}", "messages", "role", "user", "content", text), tenant,
                                   session, append, create, 4), &r, content, sizeof content);
    ck_assert_msg(r.done && !r.err, "%s/%s: error %d", tenant, session, r.err);
    return r.cached;
}

static int chat_turn_error(struct rig *g, const char *tenant, const char *session)
{
    static char content[4096];
    struct result r = {0};
    collect_text(g, submit_chat_of(g, json_pack("{s:[{s:s,s:s}]}", "messages", "role", "user", "content", "x"), tenant,
                                   session, 1, 0, 4), &r, content, sizeof content);
    return r.err;
}

/* Sessions never vanish silently: a tenant over max_sessions_per_key loses
 * its own oldest session, a full table the heaviest tenant's; an append to
 * an evicted session is ERROR_UNKNOWN_SESSION without a spill directory,
 * and continues from its file with one; all counted in the stats. */
START_TEST(t_session_eviction)
{
    struct rig g;
    rig_max_sessions = 4;
    rig_max_sessions_per_key = 2;
    int ok = rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16);
    if (!ok) { rig_max_sessions = 1024, rig_max_sessions_per_key = 0; printf("SKIPPED: fixture missing\n"); return; }
    char list[256];
    chat_turn(&g, "A", "a1", 1, 1, "one");
    chat_turn(&g, "A", "a2", 1, 1, "two");
    chat_turn(&g, "B", "b1", 1, 1, "bee");
    chat_turn(&g, "A", "a3", 1, 1, "three");      /* A at its cap: a1 goes */
    ck_assert_int_eq(session_list(&g, "A", list, sizeof list), 2);
    ck_assert_str_eq(list, "a3,a2");
    ck_assert_int_eq(session_list(&g, "B", list, sizeof list), 1);
    ck_assert_int_eq(chat_turn_error(&g, "A", "a1"), SMOL_ENOSESSION);
    chat_turn(&g, "C", "c1", 1, 1, "sea");        /* 4: the table is full */
    chat_turn(&g, "C", "c2", 1, 1, "sea two");    /* A (2) gives up a2; B's one stays */
    ck_assert_int_eq(session_list(&g, "A", list, sizeof list), 1);
    ck_assert_str_eq(list, "a3");
    ck_assert_int_eq(session_list(&g, "B", list, sizeof list), 1);
    ck_assert_int_eq(session_list(&g, "C", list, sizeof list), 2);
    ck_assert_int_eq(chat_turn_error(&g, "A", "a2"), SMOL_ENOSESSION);
    Smollm3__Event *hold;
    Smollm3__StatsReply *st = query_stats(&g, &hold);
    ck_assert_int_eq(st->sessions_evicted, 2);
    ck_assert_int_eq(st->sessions_evicted_per_key, 1);
    ck_assert_int_eq(st->unknown_session_refusals, 2);
    smollm3__event__free_unpacked(hold, NULL);
    rig_close(&g);

    /* with a spill directory an evicted session comes back, its KV reused */
    char dir[] = "/tmp/smol-engine-spill-XXXXXX", err[SMOL_ERRLEN];
    ck_assert(mkdtemp(dir));
    struct smol_model_settings set;
    smol_model_settings_default(&set);
    set.quiet = 1;
    set.n_ctx = 1024;
    struct smol_model *m = NULL;
    ck_assert(smol_model_open(&m, fixture_path("models/fixture-t.Q8_0.gguf"), &set, err) == SMOL_OK);
    ck_assert_msg(smol_spill_open(&rig_spill, dir, 0, m, err) == SMOL_OK, "%s", err);
    ck_assert(rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16));
    const int first = chat_turn(&g, "A", "a1", 1, 1, "one");
    chat_turn(&g, "A", "a2", 1, 1, "two");
    chat_turn(&g, "A", "a3", 1, 1, "three");      /* a1 evicted to its file */
    ck_assert_int_eq(session_list(&g, "A", list, sizeof list), 2);
    const int again = chat_turn(&g, "A", "a1", 1, 0, "one more");
    ck_assert_msg(again > first + 8, "a1 restored: %d cached tokens (its first turn: %d)", again, first);
    ck_assert_int_eq(chat_turn_error(&g, "B", "a1"), SMOL_ENOSESSION);  /* A's file is not B's */
    st = query_stats(&g, &hold);
    ck_assert_int_eq(st->spill_sessions_restored, 1);
    ck_assert_int_eq(st->unknown_session_refusals, 1);
    ck_assert(st->sessions_evicted >= 2);
    smollm3__event__free_unpacked(hold, NULL);
    rig_close(&g);
    smol_spill_close(&rig_spill);
    smol_model_close(&m);
    rig_max_sessions = 1024, rig_max_sessions_per_key = 0;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert(system(cmd) == 0);
}
END_TEST


/* The fixture model and rig_spill on dir as a node of a fleet (a shared
 * directory: leases) for a shared-spill test; NULL (SKIPPED said) without
 * the fixture.  shared_node_close undoes it and removes dir. */
static struct smol_model *shared_node(const char *dir)
{
    char err[SMOL_ERRLEN];
    struct smol_model_settings set;
    smol_model_settings_default(&set);
    set.quiet = 1;
    set.n_ctx = 1024;
    struct smol_model *m = NULL;
    if (smol_model_open(&m, fixture_path("models/fixture-t.Q8_0.gguf"), &set, err) != SMOL_OK) {
        printf("SKIPPED: fixture missing\n");
        return NULL;
    }
    ck_assert_msg(smol_spill_open_shared(&rig_spill, dir, 0, 1, m, err) == SMOL_OK, "%s", err);
    return m;
}

static void shared_node_close(struct smol_model **m, const char *dir)
{
    smol_spill_close(&rig_spill);
    smol_model_close(m);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert(system(cmd) == 0);
}

/* A shared spill directory: a session deleted while its turn runs gives its
 * lease back (under its name) when it becomes anonymous, so another node can
 * take the session id at once (it stayed locked until the process exited). */
START_TEST(t_delete_busy_shared)
{
    char dir[] = "/tmp/smol-engine-shared-XXXXXX", err[SMOL_ERRLEN];
    ck_assert(mkdtemp(dir));
    struct smol_model *m = shared_node(dir);
    if (!m) return;
    struct smol_spill *other = NULL;
    ck_assert_msg(smol_spill_open_shared(&other, dir, 0, 1, m, err) == SMOL_OK, "%s", err);
    struct rig g;
    ck_assert(rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16));
    int32_t ids[12];
    for (int i = 0; i < 12; i++) ids[i] = 400 + 9 * i;
    const uint64_t id = submit_ids(&g, ids, 12, 400, "busy");
    unsigned fl;
    Smollm3__Event *ev;
    int started = 0;
    while (!started) {          /* the turn runs: this node holds the lease */
        ck_assert(recv_event(&g, &fl, &ev) == id && !(fl & SMOL_EV_TERMINAL));
        started = ev->kind_case == SMOLLM3__EVENT__KIND_STARTED;
        smollm3__event__free_unpacked(ev, NULL);
    }
    ck_assert_int_eq(smol_spill_lease(other, "busy"), SMOL_LEASE_ELSEWHERE);
    const uint64_t qid = send_session_query(&g, SMOLLM3__REQUEST__KIND_SESSION_DELETE, "", "busy");
    int open = 2;
    while (open > 0) {          /* the delete's ack and the cancelled turn's end, in either order */
        const uint64_t got = recv_event(&g, &fl, &ev);
        ck_assert(got == id || got == qid);
        if (got == qid) ck_assert_int_eq(ev->kind_case, SMOLLM3__EVENT__KIND_ACK);
        if (fl & SMOL_EV_TERMINAL) open--;
        smollm3__event__free_unpacked(ev, NULL);
    }
    int lease = SMOL_LEASE_ELSEWHERE;   /* (the file's removal, on the writer thread, holds it a moment) */
    for (int i = 0; i < 500 && (lease = smol_spill_lease(other, "busy")) == SMOL_LEASE_ELSEWHERE; i++)
        usleep(10000);
    ck_assert_msg(lease == SMOL_LEASE_HELD || lease == SMOL_LEASE_CHANGED,
                  "the deleted session's lease still held by its node after 5 s (%d)", lease);
    smol_spill_unlease(other, "busy");
    rig_close(&g);
    smol_spill_close(&other);
    shared_node_close(&m, dir);
}
END_TEST

/* A shared spill directory, issue 46's second row: another node holds
 * session A's lease (its turn runs there); a turn of A waits for it, and a
 * turn of an unrelated session B, queued behind, is admitted and answered
 * meanwhile (it waited behind A until A's lease came or queue_timeout).
 * A second turn of A queued behind B stays behind the first (one session's
 * turns in order: never started before it; refused as busy while it runs,
 * as without a shared spill).  Once the other node gives A back, A's turn
 * runs. */
START_TEST(t_lease_wait_alone)
{
    char dir[] = "/tmp/smol-engine-hol-XXXXXX", err[SMOL_ERRLEN];
    ck_assert(mkdtemp(dir));
    struct smol_model *m = shared_node(dir);
    if (!m) return;
    struct smol_spill *other = NULL;
    ck_assert_msg(smol_spill_open_shared(&other, dir, 0, 1, m, err) == SMOL_OK, "%s", err);
    ck_assert_int_eq(smol_spill_lease(other, "hol-a"), SMOL_LEASE_HELD);
    const double saved_timeout = rig_queue_timeout_s;
    rig_queue_timeout_s = 20;
    struct rig g;
    ck_assert(rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16));
    int32_t ids[12];
    for (int i = 0; i < 12; i++) ids[i] = 300 + 7 * i;
    const uint64_t a = submit_ids(&g, ids, 12, 4, "hol-a");
    const uint64_t b = submit_ids(&g, ids, 12, 4, "hol-b");
    const uint64_t a2 = submit_ids(&g, ids, 12, 4, "hol-a");
    unsigned fl;
    Smollm3__Event *ev;
    uint64_t got;
    /* B's whole turn comes first, while A waits for its lease */
    const double t0 = smol_mono_s();
    do {
        got = recv_event(&g, &fl, &ev);
        ck_assert_msg(got == b, "an event of request %llu before B's end (A waits for its lease)",
                      (unsigned long long)got);
        smollm3__event__free_unpacked(ev, NULL);
    } while (!(fl & SMOL_EV_TERMINAL));
    ck_assert_msg(smol_mono_s() - t0 < 10, "B answered after %.1f s", smol_mono_s() - t0);
    /* A asks for its lease again with a backoff (2 ms doubling to 50 ms), not
     * every 2 ms: the lock file is not opened 500 times a second */
    struct smol_spill_stats st0, st1;
    smol_spill_get_stats(rig_spill, &st0);
    usleep(1000000);
    smol_spill_get_stats(rig_spill, &st1);
    ck_assert_msg(st1.lease_refused - st0.lease_refused <= 40, "%llu lease asks in 1 s of waiting",
                  (unsigned long long)(st1.lease_refused - st0.lease_refused));
    ck_assert_int_ge(st1.lease_refused - st0.lease_refused, 10);
    smol_spill_unlease(other, "hol-a");         /* the other node's turn ends */
    int open = 2, a_started = 0;
    while (open > 0) {
        got = recv_event(&g, &fl, &ev);
        ck_assert(got == a || got == a2);
        if (ev->kind_case == SMOLLM3__EVENT__KIND_STARTED) {
            if (got == a) a_started = 1;
            else ck_assert_msg(a_started, "A's second turn started before its first");
        }
        if (fl & SMOL_EV_TERMINAL) {
            if (got == a) ck_assert_int_ne(ev->kind_case, SMOLLM3__EVENT__KIND_ERROR);
            else if (ev->kind_case == SMOLLM3__EVENT__KIND_ERROR) ck_assert(a_started);
            open--;
        }
        smollm3__event__free_unpacked(ev, NULL);
    }
    rig_close(&g);
    rig_queue_timeout_s = saved_timeout;
    smol_spill_close(&other);
    shared_node_close(&m, dir);
}
END_TEST

/* fcntl() comes here first (Makefile: test_engine linked with --wrap=fcntl):
 * with slow_lock_ms set, taking an OFD lock takes that long, as on a slow
 * or unreachable NFS server. */
#include <stdarg.h>
static atomic_int slow_lock_ms, slow_stat_ms;

/* Filesystem calls of the spill on the engine thread ("smol-engine",
 * engine.c): a lock (fcntl), a stat, an open under a directory descriptor
 * (the spill's: a file read, a lock file); issue 46 wants none. */
static atomic_int engine_fs_calls;

static void fs_call(void)
{
    char name[16] = "";
    pthread_getname_np(pthread_self(), name, sizeof name);
    if (!strcmp(name, "smol-engine")) atomic_fetch_add(&engine_fs_calls, 1);
}

int __real_openat(int dirfd, const char *path, int flags, ...);
int __wrap_openat(int dirfd, const char *path, int flags, ...)
{
    int mode = 0;
    if (flags & O_CREAT) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, int);
        va_end(ap);
    }
    if (dirfd != AT_FDCWD) fs_call();
    return __real_openat(dirfd, path, flags, mode);
}

/* with fail_fsync set, a file's fsync fails (EIO): a spill write that
 * cannot finish, tried again (fsync_failures counts them) */
static atomic_int fail_fsync, fsync_failures;
int __real_fsync(int fd);
int __wrap_fsync(int fd)
{
    struct stat st;
    if (atomic_load(&fail_fsync) && !fstat(fd, &st) && S_ISREG(st.st_mode)) {
        atomic_fetch_add(&fsync_failures, 1);
        errno = EIO;
        return -1;
    }
    return __real_fsync(fd);
}

int __real_fstatat(int dirfd, const char *path, struct stat *st, int flags);
int __wrap_fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
    fs_call();
    if (atomic_load(&slow_stat_ms) && strlen(path) == 35 && !strcmp(path + 32, ".kv"))
        usleep(1000 * atomic_load(&slow_stat_ms));
    return __real_fstatat(dirfd, path, st, flags);
}
int __real_fcntl(int fd, int cmd, ...);
int __wrap_fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (cmd == F_OFD_SETLK || cmd == F_OFD_GETLK) fs_call();
    if (cmd == F_OFD_SETLK && atomic_load(&slow_lock_ms)) usleep(1000 * atomic_load(&slow_lock_ms));
    return __real_fcntl(fd, cmd, arg);
}

/* The lease is asked on the spill's lease thread, not the engine's: while
 * session A's lock, and a stat of its session file, take 3 s each to
 * answer (a slow file server), a turn of session B, queued behind it, is
 * answered (the engine thread was blocked in fcntl for A's 3 s, and B
 * with it; then in fstatat, looking for A's file); then A runs. */
START_TEST(t_lease_off_engine_thread)
{
    char dir[] = "/tmp/smol-engine-slowlock-XXXXXX";
    ck_assert(mkdtemp(dir));
    struct smol_model *m = shared_node(dir);
    if (!m) return;
    const double saved_timeout = rig_queue_timeout_s;
    rig_queue_timeout_s = 20;
    struct rig g;
    ck_assert(rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16));
    rig_queue_timeout_s = saved_timeout;
    int32_t ids[12];
    for (int i = 0; i < 12; i++) ids[i] = 200 + 5 * i;
    atomic_store(&slow_lock_ms, 3000);
    atomic_store(&slow_stat_ms, 3000);          /* and a session file's stat as slow */
    const double t0 = smol_mono_s();
    const uint64_t a = submit_ids(&g, ids, 12, 4, "slow-a");
    usleep(100000);                             /* A's lease is being asked */
    const uint64_t b = submit_ids(&g, ids, 12, 4, NULL);
    unsigned fl;
    Smollm3__Event *ev;
    uint64_t got;
    double b_done = 0;
    int open = 2;
    while (open > 0) {
        got = recv_event(&g, &fl, &ev);
        ck_assert(got == a || got == b);
        if (fl & SMOL_EV_TERMINAL) {
            ck_assert_msg(ev->kind_case != SMOLLM3__EVENT__KIND_ERROR, "request %llu: %s", (unsigned long long)got, ev->error->message);
            if (got == b) b_done = smol_mono_s() - t0;
            if (got == a) atomic_store(&slow_lock_ms, 0), atomic_store(&slow_stat_ms, 0);
            open--;
        }
        smollm3__event__free_unpacked(ev, NULL);
    }
    atomic_store(&slow_lock_ms, 0);
    atomic_store(&slow_stat_ms, 0);
    ck_assert_msg(b_done < 2.0, "B answered %.2f s after A's slow lease began", b_done);
    /* once a turn holds its lease, looking for its session's file asks the
     * index the lease brought up to date, not the file server: a stat as
     * slow blocks no other turn */
    atomic_store(&slow_stat_ms, 3000);
    const uint64_t a2 = submit_ids(&g, ids, 12, 4, "slow-a2");
    for (int i = 0; i < 5000 && !smol_spill_holds(rig_spill, "slow-a2"); i++) usleep(1000);
    ck_assert(smol_spill_holds(rig_spill, "slow-a2"));
    const double t1 = smol_mono_s();
    const uint64_t b2 = submit_ids(&g, ids, 12, 4, NULL);
    for (open = 2; open > 0;) {
        got = recv_event(&g, &fl, &ev);
        ck_assert(got == a2 || got == b2);
        if (fl & SMOL_EV_TERMINAL) {
            if (got == b2) b_done = smol_mono_s() - t1;
            open--;
        }
        smollm3__event__free_unpacked(ev, NULL);
    }
    atomic_store(&slow_stat_ms, 0);
    ck_assert_msg(b_done < 2.0, "B answered %.2f s after A held its lease (a slow stat)", b_done);
    rig_close(&g);
    shared_node_close(&m, dir);
}
END_TEST

/* A turn whose session file is being read (on the spill's writer thread)
 * keeps the lease it took while it waits: not given back and asked again
 * each time the queue is looked at (a lock and a stat, round trips to a
 * file server, each time).  Its cancel while it waits gives the lease
 * back: another node takes the session at once. */
START_TEST(t_lease_kept_while_read)
{
    char dir[] = "/tmp/smol-engine-kept-XXXXXX", err[SMOL_ERRLEN];
    ck_assert(mkdtemp(dir));
    struct smol_model *m = shared_node(dir);
    if (!m) return;
    struct smol_spill *other = NULL;
    ck_assert_msg(smol_spill_open_shared(&other, dir, 0, 1, m, err) == SMOL_OK, "%s", err);
    int32_t ids[12];
    for (int i = 0; i < 12; i++) ids[i] = 300 + 7 * i;
    unsigned fl;
    Smollm3__Event *ev;
    struct rig g;
    ck_assert(rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16));
    uint64_t id = submit_ids(&g, ids, 12, 4, "kept");     /* the session's file, written through */
    while (recv_event(&g, &fl, &ev) == id && !(fl & SMOL_EV_TERMINAL)) smollm3__event__free_unpacked(ev, NULL);
    smollm3__event__free_unpacked(ev, NULL);
    rig_close(&g);              /* a new engine on the same node: the session only on disk */
    smol_spill_flush(rig_spill);
    ck_assert(rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16));
    smol_spill_pause(rig_spill, 1);     /* its read never ends */
    id = submit_ids(&g, ids, 12, 4, "kept");
    for (int i = 0; i < 2000 && !smol_spill_holds(rig_spill, "kept"); i++) usleep(1000);
    ck_assert(smol_spill_holds(rig_spill, "kept"));
    int held = 0;
    for (int i = 0; i < 150; i++, usleep(2000)) held += smol_spill_holds(rig_spill, "kept"); /* (the queue looked at
                                                                                              many times meanwhile) */
    ck_assert_msg(held == 150, "the waiting turn held its lease %d times of 150 (given back, asked again)", held);
    ck_assert_int_eq(smol_spill_lease(other, "kept"), SMOL_LEASE_ELSEWHERE);
    ck_assert_int_eq(smol_engine_send_id(g.sock, SMOL_CMD_CANCEL, id), 0);
    while (recv_event(&g, &fl, &ev) == id && !(fl & SMOL_EV_TERMINAL)) smollm3__event__free_unpacked(ev, NULL);
    smollm3__event__free_unpacked(ev, NULL);
    int lease = SMOL_LEASE_ELSEWHERE;
    for (int i = 0; i < 200 && (lease = smol_spill_lease(other, "kept")) == SMOL_LEASE_ELSEWHERE; i++) usleep(10000);
    ck_assert_msg(lease == SMOL_LEASE_HELD || lease == SMOL_LEASE_CHANGED,
                  "the cancelled turn's lease still held (%d)", lease);
    ck_assert(!smol_spill_holds(rig_spill, "kept"));
    smol_spill_unlease(other, "kept");
    smol_spill_pause(rig_spill, 0);
    rig_close(&g);
    smol_spill_close(&other);
    shared_node_close(&m, dir);
}
END_TEST

/* A shared directory: a DELETE of a session only on disk is answered
 * once the spill's writer found the file (it stats and removes it there,
 * not the engine thread): an Ack and the file gone; one of a session with
 * no file: ERROR_UNKNOWN_SESSION; while the writer cannot run, the DELETE
 * waits and other requests are answered meanwhile; a 17th waiting DELETE
 * is refused at once (SMOL_EBUSY), not looked up on the engine thread. */
START_TEST(t_delete_on_disk_shared)
{
    char dir[] = "/tmp/smol-engine-deldisk-XXXXXX", err[SMOL_ERRLEN];
    ck_assert(mkdtemp(dir));
    struct smol_model *m = shared_node(dir);
    if (!m) return;
    struct smol_spill *other = NULL;
    ck_assert_msg(smol_spill_open_shared(&other, dir, 0, 1, m, err) == SMOL_OK, "%s", err);
    int32_t ids[12];
    for (int i = 0; i < 12; i++) ids[i] = 500 + 3 * i;
    unsigned fl;
    Smollm3__Event *ev;
    struct rig g;
    ck_assert(rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16));
    uint64_t id = submit_ids(&g, ids, 12, 4, "dd");
    while (recv_event(&g, &fl, &ev) == id && !(fl & SMOL_EV_TERMINAL)) smollm3__event__free_unpacked(ev, NULL);
    smollm3__event__free_unpacked(ev, NULL);
    rig_close(&g);              /* a new engine: the session only on disk */
    smol_spill_flush(rig_spill);
    ck_assert(smol_spill_has(other, "dd"));
    ck_assert(rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16));
    smol_spill_pause(rig_spill, 1);
    const uint64_t q1 = send_session_query(&g, SMOLLM3__REQUEST__KIND_SESSION_DELETE, "", "dd");
    const uint64_t q2 = send_session_query(&g, SMOLLM3__REQUEST__KIND_SESSION_DELETE, "", "no-such");
    for (int i = 0; i < 14; i++) {  /* 16 waiting: a 17th is refused (retry), not looked up here */
        char sid[32];
        snprintf(sid, sizeof sid, "no-such-%d", i);
        send_session_query(&g, SMOLLM3__REQUEST__KIND_SESSION_DELETE, "", sid);
    }
    const uint64_t q17 = send_session_query(&g, SMOLLM3__REQUEST__KIND_SESSION_DELETE, "", "no-such-17");
    ck_assert(recv_event(&g, &fl, &ev) == q17 && (fl & SMOL_EV_TERMINAL));
    ck_assert_msg(ev->kind_case == SMOLLM3__EVENT__KIND_ERROR && (int)ev->error->code == (int)SMOL_EBUSY,
                  "a 17th DELETE waiting: %d (not refused with SMOL_EBUSY)",
                  ev->kind_case == SMOLLM3__EVENT__KIND_ERROR ? (int)ev->error->code : -1);
    smollm3__event__free_unpacked(ev, NULL);
    id = submit_ids(&g, ids, 12, 4, NULL);    /* answered while the DELETEs wait */
    int done = 0;
    while (!done) {
        const uint64_t got = recv_event(&g, &fl, &ev);
        ck_assert_msg(got == id, "a DELETE answered before the writer ran (%llu)", (unsigned long long)got);
        done = !!(fl & SMOL_EV_TERMINAL);
        smollm3__event__free_unpacked(ev, NULL);
    }
    smol_spill_pause(rig_spill, 0);
    int acked = 0, unknown = 0, others = 0;
    for (int open = 16; open > 0; open--) {
        const uint64_t got = recv_event(&g, &fl, &ev);
        ck_assert(fl & SMOL_EV_TERMINAL);
        if (got == q1) acked = ev->kind_case == SMOLLM3__EVENT__KIND_ACK;
        else if (got == q2) unknown = ev->kind_case == SMOLLM3__EVENT__KIND_ERROR;
        else if (got > q2 && got < q17 && ev->kind_case == SMOLLM3__EVENT__KIND_ERROR) others++;
        else ck_abort_msg("event of %llu", (unsigned long long)got);
        smollm3__event__free_unpacked(ev, NULL);
    }
    ck_assert_msg(acked, "the DELETE of the session on disk was not acknowledged");
    ck_assert_msg(unknown, "the DELETE of a session without a file was not refused");
    ck_assert_int_eq(others, 14);
    ck_assert(!smol_spill_has(other, "dd"));
    rig_close(&g);
    smol_spill_close(&other);
    shared_node_close(&m, dir);
}
END_TEST

/* Issue 46: a session whose file was not read ahead is not read on the
 * engine thread: its turn asks for the read and waits alone while other
 * requests run.  Here a turn's append of session S fails (fsync: EIO,
 * retried), S leaves memory (a new engine), the spill's writer is paused:
 * S's next turn waits (its file cannot be read), a turn of another
 * session runs to its end meanwhile, and no filesystem call is made on
 * the engine thread; once the writer runs, S is restored (its file, then
 * the queued append) and answered from its KV. */
START_TEST(t_restore_waits_alone)
{
    char dir[] = "/tmp/smol-engine-rdwait-XXXXXX";
    ck_assert(mkdtemp(dir));
    struct smol_model *m = shared_node(dir);   /* (turns written through) */
    if (!m) return;
    smol_spill_set_retry(rig_spill, 0.02, 0.05);
    const double saved_timeout = rig_queue_timeout_s;
    rig_queue_timeout_s = 20;
    int32_t ids[100], other[12];
    for (int i = 0; i < 100; i++) ids[i] = 100 + 3 * i;
    for (int i = 0; i < 12; i++) other[i] = 700 + 5 * i;
    struct rig g;
    struct result res[1];
    ck_assert(rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16));
    uint64_t s = submit_ids(&g, ids, 100, 4, "rw");        /* S's file: a base */
    memset(res, 0, sizeof res);
    collect(&g, s, 1, res);
    ck_assert(!res[0].err);
    int files = 0;                                          /* (written through once the turn is over) */
    for (int i = 0; i < 5000 && !files; i++, usleep(1000)) {
        DIR *d = opendir(dir);
        for (struct dirent *de; d && (de = readdir(d));) files += strlen(de->d_name) == 35; /* (<hash>.kv) */
        if (d) closedir(d);
    }
    ck_assert_msg(files == 1, "S's file not written");
    smol_spill_flush(rig_spill);
    atomic_store(&fsync_failures, 0);
    atomic_store(&fail_fsync, 1);
    s = submit_ids(&g, ids, 100, 4, "rw");                 /* its next turn: an append, failing */
    memset(res, 0, sizeof res);
    collect(&g, s, 1, res);
    ck_assert(!res[0].err);
    for (int i = 0; i < 5000 && atomic_load(&fsync_failures) < 2; i++) usleep(1000);
    ck_assert_msg(atomic_load(&fsync_failures) >= 2, "the append was not tried (%d)", atomic_load(&fsync_failures));
    rig_close(&g);                                          /* S only on disk (and in the queue) */
    smol_spill_pause(rig_spill, 1);
    ck_assert(rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16));
    atomic_store(&engine_fs_calls, 0);
    s = submit_ids(&g, ids, 100, 4, "rw");
    const uint64_t b = submit_ids(&g, other, 12, 4, "rw-other");
    unsigned fl;
    Smollm3__Event *ev;
    uint64_t got;
    do {                                                    /* B's whole turn while S waits */
        got = recv_event(&g, &fl, &ev);
        ck_assert_msg(got == b, "an event of request %llu before B's end (S waits for its file)",
                      (unsigned long long)got);
        ck_assert(ev->kind_case != SMOLLM3__EVENT__KIND_ERROR);
        smollm3__event__free_unpacked(ev, NULL);
    } while (!(fl & SMOL_EV_TERMINAL));
    ck_assert_msg(atomic_load(&engine_fs_calls) == 0, "%d filesystem calls on the engine thread",
                  atomic_load(&engine_fs_calls));
    atomic_store(&fail_fsync, 0);
    smol_spill_pause(rig_spill, 0);
    memset(res, 0, sizeof res);
    collect(&g, s, 1, res);
    ck_assert(!res[0].err);
    ck_assert_msg(res[0].cached >= 96, "S restored with %d cached tokens", res[0].cached);
    ck_assert_msg(atomic_load(&engine_fs_calls) == 0, "%d filesystem calls on the engine thread",
                  atomic_load(&engine_fs_calls));
    rig_close(&g);
    rig_queue_timeout_s = saved_timeout;
    shared_node_close(&m, dir);
}
END_TEST

/* The engine sweeps its spill directory at start (then every minute):
 * a file nobody wrote or read for the TTL (kv_spill_ttl, at least
 * session_ttl: 3600 s here) goes with its lock file; a fresh one stays. */
START_TEST(t_spill_sweep_at_start)
{
    char dir[] = "/tmp/smol-engine-sweep-XXXXXX", old[128], oldlk[128], fresh[128];
    ck_assert(mkdtemp(dir));
    snprintf(old, sizeof old, "%s/0123456789abcdef0123456789abcdef.kv", dir);
    snprintf(oldlk, sizeof oldlk, "%s/0123456789abcdef0123456789abcdef.lock", dir);
    snprintf(fresh, sizeof fresh, "%s/fedcba9876543210fedcba9876543210.kv", dir);
    const char *files[] = {old, oldlk, fresh};
    for (int i = 0; i < 3; i++) {
        FILE *f = fopen(files[i], "wb");
        ck_assert(f && fputs("x", f) >= 0 && fclose(f) == 0);
    }
    struct timespec ts[2];
    clock_gettime(CLOCK_REALTIME, &ts[0]);
    ts[0].tv_sec -= 7200;
    ts[1] = ts[0];
    ck_assert(utimensat(AT_FDCWD, old, ts, 0) == 0 && utimensat(AT_FDCWD, oldlk, ts, 0) == 0);
    struct smol_model *m = shared_node(dir);
    if (!m) return;
    ck_assert(access(old, F_OK) == 0);      /* (not ours to judge at open: another model's, maybe) */
    struct rig g;
    ck_assert(rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16));
    /* both gone (the file, then its lock: waiting for the first alone raced the second); 30 s
     * for a loaded machine under a sanitizer, done as soon as they are */
    for (int i = 0; i < 3000 && (access(old, F_OK) == 0 || access(oldlk, F_OK) == 0); i++) usleep(10000);
    ck_assert_msg(access(old, F_OK) != 0 && access(oldlk, F_OK) != 0, "a file unused for 2 h kept after 30 s");
    ck_assert(access(fresh, F_OK) == 0);
    rig_close(&g);
    shared_node_close(&m, dir);
}
END_TEST

#ifdef COUNT_ALLOCS
/* The decode path's allocations per generated token (engine.c's header):
 * two runs alike but for the tokens they generate, each between two stats
 * queries (so that the engine is idle at both counts); their difference
 * over the difference in tokens.  A Token event's text was a malloc of its
 * own (engine_wire.c), now a reused buffer: what is left is amortized
 * growth (libzmq's pipe chunks, the history arrays). */
START_TEST(t_allocs_per_token)
{
    alloc_exempt = 1;       /* this thread: the test's own receiving and unpacking */
    const int want[2] = {8, 88};
    long count[2];
    int got[2];
    for (int run = 0; run < 2; run++) {
        struct rig g;
        if (!rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 2, 4)) { printf("SKIPPED: fixture missing\n"); return; }
        int32_t warm[12], ids[12];
        for (int i = 0; i < 12; i++) warm[i] = 300 + 7 * i, ids[i] = 700 + 11 * i;
        struct result w = {0}, r = {0};
        collect(&g, submit_ids(&g, warm, 12, 4, NULL), 1, &w);     /* the engine's first-use allocations */
        Smollm3__Event *hold;
        query_stats(&g, &hold);
        smollm3__event__free_unpacked(hold, NULL);
        const long a0 = atomic_load(&n_allocs);
        collect(&g, submit_ids(&g, ids, 12, want[run], NULL), 1, &r);
        query_stats(&g, &hold);
        smollm3__event__free_unpacked(hold, NULL);
        count[run] = atomic_load(&n_allocs) - a0;
        got[run] = r.n;
        ck_assert_msg(r.done && r.n > 0, "run %d: %d tokens, error %d", run, r.n, r.err);
        rig_close(&g);
    }
    ck_assert_msg(got[1] >= got[0] + 40, "the runs generated %d and %d tokens", got[0], got[1]);
    const double per = (double)(count[1] - count[0]) / (got[1] - got[0]);
    printf("stats: %.3f allocations per decoded token (%ld for %d tokens, %ld for %d)\n", per, count[0], got[0],
           count[1], got[1]);
    ck_assert_msg(per < 0.5, "%.3f allocations per decoded token", per);
}
END_TEST
#endif

/* The estimator alone, on a CPU-like machine where the cost is not linear:
 * a step costs 300 ms + 2 ms per decode row + 20 ms per prompt token.
 * Fed its own steps, the chunk settles where a step takes the budget
 * (700 ms beside 4 rows: (700 - 300 - 8) / 20 = 19.6 tokens), within 10%,
 * and follows a slow-down;
 * with no decode row (nobody waits) a step takes the whole cap; a prompt
 * always advances by min_chunk, or by fewer (one at least) where those
 * would cost over a quarter of the decode rows' time (cpu3b_ms: a prompt
 * token costs a row's time, as a 3B's on a 2-core CPU); budget 0 is off. */
static double cpu_like_ms(int rows, int prompt) { return 300 + 2.0 * rows + 20.0 * prompt; }
static double cpu3b_ms(int rows, int prompt) { return 20 + 90.0 * rows + 100.0 * prompt; }
START_TEST(t_step_budget_estimator)
{
    struct smol_step_budget b;
    smol_step_budget_init(&b, 700);
    ck_assert_int_eq(smol_step_budget_chunk(&b, 0, 256), 256);
    for (int i = 0; i < 3; i++) smol_step_budget_observe(&b, 4, 0, cpu_like_ms(4, 0));  /* decode-only steps */
    double step = 0;
    for (int i = 0; i < 40; i++) {
        const int chunk = smol_step_budget_chunk(&b, 4, 252);
        step = cpu_like_ms(4, chunk);
        smol_step_budget_observe(&b, 4, chunk, step);
    }
    ck_assert_msg(step > 630 && step <= 700, "a step settles at %.0f ms (budget 700; row %.2f, token %.2f ms)", step,
                  b.row_ms, b.tok_ms);
    /* the machine gets twice as slow at prompts: the chunk follows within a few steps */
    for (int i = 0; i < 20; i++) {
        const int chunk = smol_step_budget_chunk(&b, 4, 252);
        step = 300 + 8 + 40.0 * chunk;
        smol_step_budget_observe(&b, 4, chunk, step);
    }
    ck_assert_msg(step > 630 && step <= 700, "after a slow-down a step takes %.0f ms", step);
    /* decode rows alone over the budget: the prompt still advances */
    ck_assert_int_eq(smol_step_budget_chunk(&b, 400, 252), b.min_chunk);
    ck_assert_int_eq(smol_step_budget_chunk(&b, 4, 5), 5);
    /* a 3B on a 2-core CPU: a prompt token costs what a decode row does (~100 ms), so 8 of them
     * beside 3 streams' rows would double the step: the chunk is what the budget leaves (2), and
     * where the rows alone are over it, a quarter of their time's worth (one token at least) */
    smol_step_budget_init(&b, 500);
    ck_assert_int_eq(smol_step_budget_chunk(&b, 3, 252), b.first_chunk);
    for (int i = 0; i < 5; i++) smol_step_budget_observe(&b, 4, 0, cpu3b_ms(4, 0));
    ck_assert_msg(smol_step_budget_chunk(&b, 3, 252) <= 2, "first mixed step: a prompt token priced as a row");
    for (int i = 0; i < 30; i++) {
        const int chunk = smol_step_budget_chunk(&b, 3, 252);
        step = cpu3b_ms(3, chunk);
        smol_step_budget_observe(&b, 3, chunk, step);
        ck_assert_msg(chunk >= 1 && step <= 500 + 10, "3 rows + %d prompt tokens: %.0f ms (budget 500)", chunk, step);
    }
    const int c16 = smol_step_budget_chunk(&b, 16, 252);
    ck_assert_msg(c16 >= 1 && cpu3b_ms(16, c16) <= 1.25 * cpu3b_ms(16, 0) + 10,
                  "16 rows (over the budget) + %d prompt tokens: %.0f ms against %.0f ms of rows", c16,
                  cpu3b_ms(16, c16), cpu3b_ms(16, 0));
    smol_step_budget_init(&b, 0);
    smol_step_budget_observe(&b, 4, 10, 1000);
    ck_assert_int_eq(smol_step_budget_chunk(&b, 4, 60), 60);
}
END_TEST

/* The engine under a fake clock: a step "takes" 1 ms per decode row and
 * 1 ms per prompt token (budget_fake_ms), the budget is 20 ms.  Two streams
 * decode while a 400-token prompt is read: every step that reads a chunk
 * of it also carries both streams' rows, the chunks stay within what the
 * budget leaves (20 - 2 = 18 tokens, not the 62 the cap of 64 would allow),
 * and the streams get a token each step of it: about 400 / 18 each before
 * the long prompt's first token, where the cap alone gives them 7. */
enum { BUDGET_MAX_STEPS = 4096 };
static int budget_rows[BUDGET_MAX_STEPS], budget_prompt[BUDGET_MAX_STEPS], budget_steps;
static double budget_fake_ms(int rows, int prompt)
{
    if (budget_steps < BUDGET_MAX_STEPS) {
        budget_rows[budget_steps] = rows;
        budget_prompt[budget_steps++] = prompt;
    }
    return rows + prompt;
}

/* Runs A (two streams) then B (a long prompt; `background`: a warm-up's,
 * GenerateRequest.background) under the fake clock; the tokens each A
 * stream got between B's Started and B's first token. */
static void budget_run(double budget_ms, int background, int a_tokens[2])
{
    struct rig g;
    budget_steps = 0;
    rig_step_budget_ms = budget_ms;
    rig_step_ms_fn = budget_fake_ms;
    const int ok = rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 8);
    rig_step_budget_ms = 0;
    rig_step_ms_fn = NULL;
    ck_assert_msg(ok, "fixture missing");
    int32_t a[2][8], lp[400];
    for (int i = 0; i < 8; i++) a[0][i] = 200 + i, a[1][i] = 900 + 3 * i;
    for (int i = 0; i < 400; i++) lp[i] = 100 + (i * 37) % 20000;
    const uint64_t a0 = submit_ids(&g, a[0], 8, 200, NULL);
    submit_ids(&g, a[1], 8, 200, NULL);
    int got[2] = {0, 0}, b_started = 0, b_first = 0, open = 3;
    uint64_t b = 0;
    a_tokens[0] = a_tokens[1] = 0;
    while (open > 0) {
        unsigned fl;
        Smollm3__Event *ev;
        const uint64_t id = recv_event(&g, &fl, &ev);
        if (id == a0 || id == a0 + 1) {
            const int k = (int)(id - a0);
            if (ev->kind_case == SMOLLM3__EVENT__KIND_TOKEN) {
                got[k]++;
                if (b_started && !b_first) a_tokens[k]++;
                if (!b && got[0] >= 2 && got[1] >= 2) {  /* both decode */
                    rig_background = background;
                    b = submit_ids(&g, lp, 400, 2, NULL);
                }
            }
        } else {
            ck_assert(b && id == b);
            if (ev->kind_case == SMOLLM3__EVENT__KIND_STARTED) b_started = 1;
            if (ev->kind_case == SMOLLM3__EVENT__KIND_TOKEN) b_first = 1;
            ck_assert_msg(ev->kind_case != SMOLLM3__EVENT__KIND_ERROR, "B failed: %s", ev->error->message);
        }
        if (fl & SMOL_EV_TERMINAL) open--;
        smollm3__event__free_unpacked(ev, NULL);
    }
    rig_close(&g);  /* the engine thread joined: budget_* are ours to read */
}

/* The steps of budget_run that read B's prompt beside both A streams' rows
 * stay within `within` ms of the fake clock (the first mixed one, sized
 * before a prompt token's cost is known, excepted), and there are at least
 * 400 / (within - 2) of them. */
static void budget_check(int within, const int a_tokens[2])
{
    /* B's prompt is read in the last run of steps that read a prompt (A's
     * two 8-token prompts come before both A streams decode, so before B's
     * submission: when A's second request arrives a step late, its prompt
     * rides beside A's first decode row, a mixed step that is not B's) */
    int last = budget_steps - 1, first;
    while (last >= 0 && !budget_prompt[last]) last--;
    ck_assert_msg(last >= 0, "no step read a prompt");
    for (first = last; first > 0 && budget_prompt[first - 1]; first--) {}
    int prefill = 0, over = 0;
    for (int i = first; i <= last; i++) {
        if (!budget_rows[i]) continue;
        prefill++;
        /* the first mixed step runs before the prompt's cost is measured (first_chunk) */
        if (budget_rows[i] + budget_prompt[i] > within + 1 && prefill > 1) over++;
        ck_assert_msg(budget_rows[i] == 2, "step %d: %d decode rows beside %d prompt tokens", i, budget_rows[i],
                      budget_prompt[i]);
    }
    ck_assert_msg(over == 0, "%d of %d steps over the budget (%d ms)", over, prefill, within);
    ck_assert_msg(prefill >= 400 / (within - 2), "the prompt read in %d steps", prefill);
    for (int k = 0; k < 2; k++)
        ck_assert_msg(a_tokens[k] >= 400 / (within - 2) - 1, "stream %d got %d tokens while the prompt was read", k,
                      a_tokens[k]);
}

START_TEST(t_step_budget)
{
    int budgeted[2], capped[2];
    budget_run(20, 0, budgeted);
    budget_check(20, budgeted);
    budget_run(0, 0, capped);  /* off: the cap alone */
    int max_chunk = 0;
    for (int i = 0; i < budget_steps; i++) if (budget_prompt[i] > max_chunk) max_chunk = budget_prompt[i];
    ck_assert_msg(max_chunk >= 60, "without a budget the largest chunk was %d", max_chunk);
    printf("stats: tokens per stream while a 400-token prompt is read: %d, %d with a 20 ms budget; %d, %d without\n",
           budgeted[0], budgeted[1], capped[0], capped[1]);
}
END_TEST

/* The same with B a background request (GenerateRequest.background: a
 * gateway's make-before-break warm-up, which no client waits on): its
 * chunks beside the streams' rows are sized to a quarter of the budget, 5
 * ms (2 rows + 3 prompt tokens), where a client's prompt took 20; so the
 * streams get about 400 / 3 tokens while it is read, not 400 / 18.  Before
 * GenerateRequest.background, B's steps took the whole 20 ms and this
 * failed. */
START_TEST(t_step_budget_background)
{
    int bg[2];
    budget_run(20, 1, bg);
    budget_check(5, bg);
    printf("stats: tokens per stream while a 400-token background prompt is read: %d, %d (20 ms budget)\n", bg[0],
           bg[1]);
}
END_TEST

/* What the scheduler tests watch of a request: when it started and ended
 * (the index of its Started / terminal event among all events), and its
 * Done. */
struct sched_obs { int started, ended, tokens, done, err, preemptions, tier, finish; };

/* Records events until every request in [first, first + n) has ended, or,
 * when until_tokens > 0, until request `watch` has that many tokens. */
static void sched_watch(struct rig *g, uint64_t first, int n, struct sched_obs *o, int *seq, uint64_t watch,
                        int until_tokens)
{
    int open = 0;
    for (int i = 0; i < n; i++) open += !o[i].ended;
    while (open > 0) {
        if (until_tokens > 0 && o[watch - first].tokens >= until_tokens) return;
        unsigned fl;
        Smollm3__Event *ev;
        const uint64_t id = recv_event(g, &fl, &ev);
        ck_assert(id >= first && id < first + n);
        struct sched_obs *x = &o[id - first];
        ++*seq;
        switch (ev->kind_case) {
        case SMOLLM3__EVENT__KIND_STARTED: x->started = *seq; break;
        case SMOLLM3__EVENT__KIND_TOKEN: x->tokens++; break;
        case SMOLLM3__EVENT__KIND_DONE:
            x->done = 1;
            x->preemptions = ev->done->preemptions;
            x->tier = ev->done->service_tier;
            x->finish = ev->done->finish_reason;
            break;
        case SMOLLM3__EVENT__KIND_ERROR: x->err = ev->error->code; break;
        default: break;
        }
        if (fl & SMOL_EV_TERMINAL) { x->ended = *seq; open--; }
        smollm3__event__free_unpacked(ev, NULL);
    }
}

static uint64_t submit_tier(struct rig *g, const char *tenant, int tier, int k, int max_tokens)
{
    int32_t ids[8];
    for (int i = 0; i < 8; i++) ids[i] = 300 + 53 * k + 7 * i;
    rig_tier = tier;
    return submit_tokens_of(g, tenant, ids, 8, max_tokens, NULL, 0.0f, 1.0f, 0, 0);
}

/* Issue 47: one tenant's backlog no longer starves another.  4 slots; A
 * fills them and queues 4 more, then B asks once: B starts before any of
 * A's backlog and before any of A's streams ends (one of A's is preempted,
 * its KV kept, to give B its share of 4 / 2 slots), and every one of A's
 * streams still completes, whole (paused, not failed).  First come first
 * served started B after A's whole backlog. */
START_TEST(t_fair_tenants)
{
    struct rig g;
    if (!rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 4, 16)) { printf("SKIPPED: fixture missing\n"); return; }
    enum { NA = 8, GEN = 100 };
    struct sched_obs o[NA + 1];
    memset(o, 0, sizeof o);
    int seq = 0;
    const uint64_t first = g.next_id;
    for (int k = 0; k < NA; k++) submit_tier(&g, "a", 0, k, GEN);
    sched_watch(&g, first, NA + 1, o, &seq, first + 3, 2);     /* A's first four decode */
    const uint64_t b = submit_tier(&g, "b", 0, 99, 4);
    ck_assert_int_eq(b, first + NA);
    sched_watch(&g, first, NA + 1, o, &seq, 0, 0);
    int preempted = 0;
    for (int k = 0; k < NA; k++) {
        ck_assert_msg(o[k].done && !o[k].err, "A's request %d: done %d, error %d", k, o[k].done, o[k].err);
        ck_assert_msg(o[k].tokens == GEN || o[k].finish == SMOLLM3__FINISH_REASON__FINISH_REASON_STOP,
                      "A's request %d got %d tokens", k, o[k].tokens);
        if (k >= 4) ck_assert_msg(o[NA].started < o[k].started, "A's queued %d started before B", k);
        ck_assert_msg(o[NA].started < o[k].ended, "A's request %d ended before B started", k);
        preempted += o[k].preemptions;
    }
    ck_assert_msg(o[NA].done && !o[NA].err, "B: error %d", o[NA].err);
    ck_assert_msg(preempted >= 1, "no request of A was preempted");
    Smollm3__Event *hold;
    const Smollm3__StatsReply *st = query_stats(&g, &hold);
    ck_assert_uint_eq(st->preemptions_total, (uint64_t)preempted);
    int seen = 0;
    for (size_t i = 0; i < st->n_tenants; i++) {
        const Smollm3__TenantStats *t = st->tenants[i];
        if (!strcmp(t->tenant, "a")) {
            seen++;
            ck_assert_uint_eq(t->preemptions_total, (uint64_t)preempted);
            ck_assert(t->tokens_served >= (uint64_t)NA * (8 + GEN - 1));
            ck_assert(t->kv_bytes > 0);     /* its cached prefixes */
        }
        if (!strcmp(t->tenant, "b")) { seen++; ck_assert_uint_eq(t->preemptions_total, 0); }
        ck_assert_uint_eq(t->running + t->queued + t->preempted, 0);
    }
    ck_assert_int_eq(seen, 2);
    smollm3__event__free_unpacked(hold, NULL);
    rig_close(&g);
}
END_TEST

/* Service tiers, one slot, one tenant: behind a running request, priority
 * is admitted before default and flex after both (whatever their arrival),
 * and Done echoes each one's tier; a default request preempts a running
 * flex one (which then completes). */
START_TEST(t_service_tiers)
{
    struct rig g;
    if (!rig_open(&g, "models/fixture-t.Q8_0.gguf", 0, 1, 16)) { printf("SKIPPED: fixture missing\n"); return; }
    const int D = SMOLLM3__SERVICE_TIER__SERVICE_TIER_DEFAULT, P = SMOLLM3__SERVICE_TIER__SERVICE_TIER_PRIORITY,
              F = SMOLLM3__SERVICE_TIER__SERVICE_TIER_FLEX;
    struct sched_obs o[6];
    memset(o, 0, sizeof o);
    int seq = 0;
    const uint64_t x = submit_tier(&g, "t", D, 0, 200);
    sched_watch(&g, x, 4, o, &seq, x, 2);
    submit_tier(&g, "t", F, 1, 3);
    submit_tier(&g, "t", D, 2, 3);
    submit_tier(&g, "t", P, 3, 3);
    sched_watch(&g, x, 4, o, &seq, 0, 0);
    for (int i = 0; i < 4; i++) ck_assert_msg(o[i].done && !o[i].err, "request %d: error %d", i, o[i].err);
    ck_assert_msg(o[0].ended < o[3].started && o[3].started < o[2].started && o[2].started < o[1].started,
                  "started: default %d, flex %d, default %d, priority %d", o[0].started, o[1].started, o[2].started,
                  o[3].started);
    ck_assert_int_eq(o[0].tier, D);
    ck_assert_int_eq(o[1].tier, F);
    ck_assert_int_eq(o[3].tier, P);
    ck_assert_int_eq(o[0].preemptions + o[1].preemptions + o[2].preemptions + o[3].preemptions, 0);
    /* flex running, default arrives: flex gives up its slot, then completes */
    memset(o, 0, sizeof o);
    const uint64_t f = submit_tier(&g, "t", F, 4, 200);
    sched_watch(&g, f, 2, o, &seq, f, 2);
    submit_tier(&g, "t", D, 5, 3);
    sched_watch(&g, f, 2, o, &seq, 0, 0);
    ck_assert_msg(o[1].ended < o[0].ended, "default ended at %d, flex at %d", o[1].ended, o[0].ended);
    ck_assert_int_eq(o[0].preemptions, 1);
    ck_assert_msg(o[0].done && !o[0].err && (o[0].tokens == 200 || o[0].finish == SMOLLM3__FINISH_REASON__FINISH_REASON_STOP),
                  "flex: %d tokens, error %d", o[0].tokens, o[0].err);
    rig_close(&g);
}
END_TEST

/* KV pressure takes from the heaviest tenant first.  8 pages of 32 tokens:
 * B leaves one cached prefix (the least recently used entry), A five; C
 * then needs 4 pages with 2 free.  Least recently used first evicted B's
 * prefix; now two of A's go, and B's next request still finds its own. */
START_TEST(t_kv_heaviest_evicted)
{
    struct rig g;
    const size_t per_tok = smol_kv_bytes_per_token(8, 1, 16, 1 /* f16 */);
    if (!rig_open(&g, "models/fixture-t.Q8_0.gguf", per_tok * 256, 4, 16)) { printf("SKIPPED: fixture missing\n"); return; }
    int32_t ids[24];
    struct result r;
#define RUN(tenant, k, gen)                                                                   \
    do {                                                                                      \
        for (int i = 0; i < 20; i++) ids[i] = 500 + 97 * (k) + 3 * i;                         \
        memset(&r, 0, sizeof r);                                                              \
        collect(&g, submit_tokens_of(&g, tenant, ids, 20, gen, NULL, 0.0f, 1.0f, 0, 0), 1, &r); \
        ck_assert_msg(r.done && !r.err, "%s %d: error %d", tenant, k, r.err);                 \
    } while (0)
    RUN("b", 0, 10);
    for (int k = 1; k <= 5; k++) RUN("a", k, 10);
    RUN("c", 6, 100);
    RUN("b", 0, 10);
    ck_assert_msg(r.cached > 0, "B's cached prefix was evicted (cached %d): A holds the most", r.cached);
#undef RUN
    rig_close(&g);
}
END_TEST

/* Preemption frees a batch slot, not KV: a tenant whose request waits for
 * KV memory that another tenant's running requests hold does not pause
 * them for nothing.  2 slots, 8 pages of 32 tokens: A's two requests hold
 * 4 pages each; B (1 page) waits until one of A's ends, and neither of A's
 * was preempted.  (Before: one of A's stayed preempted while B waited.) */
START_TEST(t_preempt_not_for_kv)
{
    struct rig g;
    const size_t per_tok = smol_kv_bytes_per_token(8, 1, 16, 1 /* f16 */);
    if (!rig_open(&g, "models/fixture-t.Q8_0.gguf", per_tok * 256, 2, 16)) { printf("SKIPPED: fixture missing\n"); return; }
    struct sched_obs o[3];
    memset(o, 0, sizeof o);
    int seq = 0;
    const uint64_t a = submit_tier(&g, "a", 0, 1, 100);
    submit_tier(&g, "a", 0, 2, 100);
    sched_watch(&g, a, 3, o, &seq, a + 1, 2);
    submit_tier(&g, "b", 0, 3, 10);
    sched_watch(&g, a, 3, o, &seq, 0, 0);
    for (int i = 0; i < 3; i++) ck_assert_msg(o[i].done && !o[i].err, "request %d: error %d", i, o[i].err);
    ck_assert_msg(o[0].preemptions + o[1].preemptions == 0, "A preempted %d + %d times for a request waiting for KV",
                  o[0].preemptions, o[1].preemptions);
    ck_assert_msg(o[2].started > o[0].ended || o[2].started > o[1].ended, "B started before A freed KV");
    rig_close(&g);
}
END_TEST

/* The scheduler's tests keep requests queued behind others by design: a
 * queue timeout of 2 s would fail them when a slow build (TSan, ASan on a
 * loaded machine) makes the requests ahead take longer.  None of them
 * tests the timeout. */
static void sched_setup(void) { rig_queue_timeout_s = 120; }
static void sched_teardown(void) { rig_queue_timeout_s = 2; }

Suite *test_suite(void)
{
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("engine");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, t_batched_equals_sequential);
    tcase_add_test(tc, t_prediction);
    tcase_add_test(tc, t_prefix_reuse);
    tcase_add_test(tc, t_cancel);
    tcase_add_test(tc, t_handover_overlap);
    tcase_add_test(tc, t_resume_choices_cached);
    tcase_add_test(tc, t_waiting_prompt_built_once);
    tcase_add_test(tc, t_backend_sampling);
    tcase_add_test(tc, t_host_sample_pool);
    tcase_add_test(tc, t_chat_session_turns);
    tcase_add_test(tc, t_thinking_budget);
    tcase_add_test(tc, t_kv_budget);
    tcase_add_test(tc, t_queue_full_and_context);
    tcase_add_test(tc, t_no_chat_template);
    tcase_add_test(tc, t_terminal_event_survives_oom);
    tcase_add_test(tc, t_tenants);
    tcase_add_test(tc, t_session_eviction);
    tcase_add_test(tc, t_delete_busy_shared);
#ifdef COUNT_ALLOCS
    tcase_add_test(tc, t_allocs_per_token);
#endif
    suite_add_tcase(s, tc);
    TCase *tl = tcase_create("lease");  /* CK_RUN_CASE=lease: a shared spill's lease waits */
    tcase_set_timeout(tl, 60);
    tcase_add_test(tl, t_lease_wait_alone);
    tcase_add_test(tl, t_spill_sweep_at_start);
    tcase_add_test(tl, t_lease_off_engine_thread);
    tcase_add_test(tl, t_lease_kept_while_read);
    tcase_add_test(tl, t_delete_on_disk_shared);
    tcase_add_test(tl, t_restore_waits_alone);
    suite_add_tcase(s, tl);
    TCase *sc = tcase_create("sched");     /* the scheduler: step budget, tenants' shares, tiers */
    tcase_set_timeout(sc, 240);
    tcase_add_checked_fixture(sc, sched_setup, sched_teardown);
    tcase_add_test(sc, t_step_budget_estimator);
    tcase_add_test(sc, t_step_budget);
    tcase_add_test(sc, t_step_budget_background);
    tcase_add_test(sc, t_fair_tenants);
    tcase_add_test(sc, t_service_tiers);
    tcase_add_test(sc, t_kv_heaviest_evicted);
    tcase_add_test(sc, t_preempt_not_for_kv);
    suite_add_tcase(s, sc);
    return s;
}
