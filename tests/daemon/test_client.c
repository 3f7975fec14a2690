/*
 * test_client.c - Check suite for daemon/client/client.h, run against a real
 * smollm3d by tests/daemon/test_daemon.py (which passes the endpoint in
 * $SMOLLM3D_TEST_ENDPOINT).  The first tests need no daemon; the others
 * print SKIPPED and pass when no endpoint is given.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/client/client.h"

static const char *endpoint(void)
{
    const char *e = getenv("SMOLLM3D_TEST_ENDPOINT");
    return e && *e ? e : NULL;
}

#define NEED_DAEMON()                                                            \
    do {                                                                         \
        if (!endpoint()) {                                                       \
            printf("SKIPPED: %s: SMOLLM3D_TEST_ENDPOINT not set\n", __func__);   \
            return;                                                              \
        }                                                                        \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct smol_client *open_client(void)
{
    struct smol_client *c = NULL;
    char err[SMOL_ERRLEN] = "";
    enum smol_err r = smol_client_open(&c, endpoint(), NULL, err);
    ck_assert_msg(r == SMOL_OK, "open %s: %s", endpoint(), err);
    return c;
}

/* ---- no daemon needed -------------------------------------------------- */

START_TEST(t_ids_unique)
{
    struct smol_client *c = NULL, *d = NULL;
    char err[SMOL_ERRLEN];
    ck_assert_int_eq(smol_client_open(&c, "ipc:///nonexistent/smol-test.sock", NULL, err), SMOL_OK);
    ck_assert_int_eq(smol_client_open(&d, "ipc:///nonexistent/smol-test.sock", NULL, err), SMOL_OK);
    uint64_t prev = smol_client_next_id(c);
    ck_assert(prev != 0);
    for (int i = 0; i < 10000; i++) {
        uint64_t id = smol_client_next_id(c);
        ck_assert(id != 0 && id != prev);
        prev = id;
    }
    /* two clients start at unrelated random points */
    ck_assert(smol_client_next_id(d) != smol_client_next_id(c));
    smol_client_close(&c);
    smol_client_close(&d);
    ck_assert_ptr_null(c);
    smol_client_close(&c);               /* NULL is fine */
    smol_client_close(NULL);
}
END_TEST

START_TEST(t_default_endpoint)
{
    char buf[256];
    setenv("RUNTIME_DIRECTORY", "/run/a:/run/b", 1);
    ck_assert_str_eq(smol_client_default_endpoint(buf, sizeof buf), "ipc:///run/a/smollm3d.sock");
    unsetenv("RUNTIME_DIRECTORY");
    setenv("XDG_RUNTIME_DIR", "/run/user/7", 1);
    ck_assert_str_eq(smol_client_default_endpoint(buf, sizeof buf), "ipc:///run/user/7/smollm3d.sock");
    unsetenv("XDG_RUNTIME_DIR");
    ck_assert_str_eq(smol_client_default_endpoint(buf, sizeof buf), "ipc:///run/smollm3d/smollm3d.sock");
    ck_assert_int_eq(smol_client_endpoint_exists("ipc:///nonexistent/x.sock"), 0);
    ck_assert_int_eq(smol_client_endpoint_exists("tcp://127.0.0.1:1"), 1);
}
END_TEST

START_TEST(t_no_daemon_timeouts)
{
    struct smol_client_opts o;
    struct smol_client *c = NULL;
    Smollm3__Event *ev = (Smollm3__Event *)1;
    char err[SMOL_ERRLEN];
    smol_client_opts_default(&o);
    o.send_timeout_ms = 200;
    ck_assert_int_eq(smol_client_open(&c, "ipc:///nonexistent/smol-test.sock", &o, err), SMOL_OK);
    double t0 = now_s();
    ck_assert_int_eq(smol_client_recv(c, 200, NULL, &ev, err), SMOL_EIO);
    ck_assert_ptr_null(ev);
    ck_assert_msg(strstr(err, "timed out"), "%s", err);
    double dt = now_s() - t0;
    ck_assert_msg(dt >= 0.15 && dt < 2.0, "recv timeout took %.3f s", dt);
    t0 = now_s();
    ck_assert_int_eq(smol_client_health(c, 200, &ev, err), SMOL_EIO);   /* send times out */
    ck_assert_ptr_null(ev);
    ck_assert_msg(now_s() - t0 < 2.0, "send timeout too slow");
    ck_assert_int_eq(smol_client_connected(c), 0);
    smol_client_close(&c);
    /* a bad endpoint is an error, not a crash */
    ck_assert_int_ne(smol_client_open(&c, "bogus://x", NULL, err), SMOL_OK);
    ck_assert_ptr_null(c);
}
END_TEST

START_TEST(t_chat_build)
{
    struct smol_client_chat p;
    const char *stops[] = { "END" };
    smol_client_chat_init(&p);
    p.system = "be brief";
    p.user = "hi";
    p.session_id = "s-1";
    p.thinking = 0;
    p.has_temperature = 1;
    p.temperature = 0;
    p.has_seed = 1;
    p.seed = 42;
    p.max_tokens = 7;
    p.stops = stops;
    p.n_stops = 1;
    Smollm3__GenerateRequest *g = smol_client_chat_build(&p);
    ck_assert_int_eq(g->input_case, SMOLLM3__GENERATE_REQUEST__INPUT_CHAT);
    ck_assert_int_eq(g->chat->n_messages, 2);
    ck_assert_str_eq(g->chat->messages[0]->role, "system");
    ck_assert_str_eq(g->chat->messages[1]->content, "hi");
    ck_assert_str_eq(g->session_id, "s-1");
    ck_assert_int_eq(g->enable_thinking_opt_case,
                     SMOLLM3__GENERATE_REQUEST__ENABLE_THINKING_OPT_ENABLE_THINKING);
    ck_assert_int_eq(g->enable_thinking, 0);
    ck_assert_int_eq(g->sampling->temperature_opt_case,
                     SMOLLM3__SAMPLING_PARAMS__TEMPERATURE_OPT_TEMPERATURE);
    ck_assert_int_eq(g->sampling->top_p_opt_case, SMOLLM3__SAMPLING_PARAMS__TOP_P_OPT__NOT_SET);
    ck_assert_int_eq(g->max_tokens, 7);
    ck_assert_int_eq(g->n_stop, 1);
    /* round trip through the wire format */
    Smollm3__Request req = SMOLLM3__REQUEST__INIT;
    req.kind_case = SMOLLM3__REQUEST__KIND_GENERATE;
    req.generate = g;
    uint8_t buf[512];
    size_t n = smollm3__request__get_packed_size(&req);
    ck_assert(n < sizeof buf);
    smollm3__request__pack(&req, buf);
    Smollm3__Request *back = smollm3__request__unpack(NULL, n, buf);
    ck_assert_ptr_nonnull(back);
    ck_assert_int_eq(back->generate->sampling->seed, 42);
    ck_assert_str_eq(back->generate->stop[0], "END");
    /* a session's turn continues the conversation: appended, not created; the default tenant */
    ck_assert(back->generate->chat->append_to_session);
    ck_assert(!back->generate->chat->create_session);
    ck_assert_str_eq(back->generate->tenant, "");
    smollm3__request__free_unpacked(back, NULL);
    /* the turn that starts it creates it; a tenant is sent as given */
    p.create_session = 1;
    p.tenant = "team-a";
    g = smol_client_chat_build(&p);
    ck_assert(g->chat->append_to_session && g->chat->create_session);
    ck_assert_str_eq(g->tenant, "team-a");
    /* no session: neither (create_session means nothing without one) */
    p.session_id = NULL;
    g = smol_client_chat_build(&p);
    ck_assert(!g->chat->append_to_session && !g->chat->create_session);
    ck_assert_str_eq(g->session_id, "");
}
END_TEST

/* ---- against the daemon ------------------------------------------------ */

START_TEST(t_health_stats)
{
    NEED_DAEMON();
    struct smol_client *c = open_client();
    Smollm3__Event *ev = NULL;
    char err[SMOL_ERRLEN];
    ck_assert_int_eq(smol_client_health(c, 10000, &ev, err), SMOL_OK);
    ck_assert_int_eq(ev->kind_case, SMOLLM3__EVENT__KIND_HEALTH);
    ck_assert(ev->health->ready);
    ck_assert_int_eq(ev->health->protocol_version, 1);
    smol_client_event_free(&ev);
    ck_assert_ptr_null(ev);
    ck_assert_int_eq(smol_client_stats(c, 10000, &ev, err), SMOL_OK);
    ck_assert_int_eq(ev->kind_case, SMOLLM3__EVENT__KIND_STATS);
    ck_assert(ev->stats->kv_tokens_total > 0);
    smol_client_event_free(&ev);
    ck_assert_int_eq(smol_client_connected(c), 1);
    smol_client_close(&c);
}
END_TEST

struct rec {
    int n_events, n_started, n_tokens, n_ids, n_done, n_error;
    int order_ok;                /* started first, nothing after the terminal */
    int cancel_after;            /* return 1 after this many tokens (0 = never) */
    volatile sig_atomic_t *flag; /* set instead of returning 1 */
    int finish;
    uint32_t completion;
    int err_code;
};

static int rec_event(const Smollm3__Event *ev, void *user)
{
    struct rec *r = user;
    if (r->n_events == 0 && ev->kind_case != SMOLLM3__EVENT__KIND_STARTED &&
        ev->kind_case != SMOLLM3__EVENT__KIND_ERROR)
        r->order_ok = 0;
    if (r->n_done || r->n_error) r->order_ok = 0;
    r->n_events++;
    switch (ev->kind_case) {
    case SMOLLM3__EVENT__KIND_STARTED: r->n_started++; break;
    case SMOLLM3__EVENT__KIND_TOKEN:
        r->n_tokens++;
        if (ev->token->token_id >= 0) r->n_ids++;
        break;
    case SMOLLM3__EVENT__KIND_DONE:
        r->n_done++;
        r->finish = ev->done->finish_reason;
        r->completion = ev->done->usage ? ev->done->usage->completion_tokens : 0;
        break;
    case SMOLLM3__EVENT__KIND_ERROR: r->n_error++; r->err_code = ev->error->code; break;
    default: break;
    }
    if (r->cancel_after && r->n_tokens >= r->cancel_after) {
        if (r->flag) { *r->flag = 1; return 0; }
        return 1;
    }
    return 0;
}

/* usage.completion_tokens counts every generated token; the end-of-generation
 * token need not be streamed */
static int completion_ok(const struct rec *r)
{
    if (r->completion == (uint32_t)r->n_ids) return 1;
    return r->finish != SMOLLM3__FINISH_REASON__FINISH_REASON_LENGTH &&
           r->completion == (uint32_t)r->n_ids + 1;
}

static Smollm3__GenerateRequest *chat(struct smol_client_chat *p, const char *msg, uint32_t n)
{
    smol_client_chat_init(p);
    p->user = msg;
    p->has_temperature = 1;
    p->temperature = 0;
    p->max_tokens = n;
    return smol_client_chat_build(p);
}

START_TEST(t_stream)
{
    NEED_DAEMON();
    struct smol_client *c = open_client();
    struct smol_client_chat p;
    struct rec r = { .order_ok = 1 };
    char err[SMOL_ERRLEN];
    uint64_t id = 0;
    enum smol_err e = smol_client_stream(c, chat(&p, "Hello from C", 6), 30000, 5000, NULL,
                                         rec_event, &r, &id, err);
    ck_assert_msg(e == SMOL_OK, "stream: %s", err);
    ck_assert(id != 0);
    ck_assert(r.order_ok);
    ck_assert_int_eq(r.n_started, 1);
    ck_assert_int_eq(r.n_done, 1);
    ck_assert(r.n_tokens >= 1);
    ck_assert(completion_ok(&r));
    ck_assert(r.completion <= 6);
    smol_client_close(&c);
}
END_TEST

static void check_cancel(int use_flag)
{
    struct smol_client *c = open_client();
    struct smol_client_chat p;
    volatile sig_atomic_t flag = 0;
    struct rec r = { .order_ok = 1, .cancel_after = 3, .flag = use_flag ? &flag : NULL };
    char err[SMOL_ERRLEN];
    double t0 = now_s();
    enum smol_err e = smol_client_stream(c, chat(&p, "Count to a thousand", 3000), 30000, 10000,
                                         &flag, rec_event, &r, NULL, err);
    ck_assert_msg(e == SMOL_OK || e == SMOL_ECANCELLED, "stream: %d %s", e, err);
    ck_assert(r.order_ok);
    if (e == SMOL_OK) ck_assert_int_eq(r.finish, SMOLLM3__FINISH_REASON__FINISH_REASON_CANCELLED);
    else ck_assert_int_eq(r.err_code, SMOLLM3__ERROR_CODE__ERROR_CANCELLED);
    ck_assert_msg(r.n_tokens < 2500, "cancel was not honoured (%d tokens)", r.n_tokens);
    ck_assert_msg(now_s() - t0 < 20, "cancel took too long");
    smol_client_close(&c);
}

START_TEST(t_stream_cancel_callback) { NEED_DAEMON(); check_cancel(0); }
END_TEST
START_TEST(t_stream_cancel_flag) { NEED_DAEMON(); check_cancel(1); }
END_TEST

/* Two streams and a call on one client: everything arrives, in order per
 * request, nothing is lost to the parking FIFO. */
START_TEST(t_interleaved)
{
    NEED_DAEMON();
    struct smol_client *c = open_client();
    struct smol_client_chat p1, p2;
    uint64_t id[2];
    char err[SMOL_ERRLEN];
    ck_assert_int_eq(smol_client_send_generate(c, chat(&p1, "first stream", 5), &id[0], err), SMOL_OK);
    ck_assert_int_eq(smol_client_send_generate(c, chat(&p2, "second stream", 5), &id[1], err), SMOL_OK);
    ck_assert(id[0] != id[1]);
    Smollm3__Event *ev = NULL;
    ck_assert_int_eq(smol_client_health(c, 10000, &ev, err), SMOL_OK);
    ck_assert_int_eq(ev->kind_case, SMOLLM3__EVENT__KIND_HEALTH);
    smol_client_event_free(&ev);
    struct rec r[2] = { { .order_ok = 1 }, { .order_ok = 1 } };
    int open_streams = 2;
    while (open_streams) {
        enum smol_err e = smol_client_recv(c, 30000, NULL, &ev, err);
        ck_assert_msg(e == SMOL_OK, "recv: %s", err);
        int k = ev->request_id == id[0] ? 0 : ev->request_id == id[1] ? 1 : -1;
        ck_assert_msg(k >= 0, "event for unknown id %llu", (unsigned long long)ev->request_id);
        rec_event(ev, &r[k]);
        if (smol_client_event_is_terminal(ev)) open_streams--;
        smol_client_event_free(&ev);
    }
    for (int k = 0; k < 2; k++) {
        ck_assert(r[k].order_ok);
        ck_assert_int_eq(r[k].n_started, 1);
        ck_assert_int_eq(r[k].n_done, 1);
        ck_assert(completion_ok(&r[k]));
    }
    smol_client_close(&c);
}
END_TEST

START_TEST(t_bad_frames_and_unknowns)
{
    NEED_DAEMON();
    struct smol_client *c = open_client();
    Smollm3__Event *ev = NULL;
    char err[SMOL_ERRLEN];
    /* garbage: an error about request 0, or silence; never a dead daemon */
    static const unsigned char junk[] = { 0x12, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01 };
    ck_assert_int_eq(smol_client_send_raw(c, junk, sizeof junk, err), SMOL_OK);
    enum smol_err e = smol_client_recv(c, 2000, NULL, &ev, err);
    if (e == SMOL_OK) {
        ck_assert_int_eq(ev->kind_case, SMOLLM3__EVENT__KIND_ERROR);
        ck_assert_int_eq(ev->request_id, 0);
        smol_client_event_free(&ev);
    }
    /* unknown session */
    e = smol_client_session_get(c, NULL, "no-such-session-c", 10000, &ev, err);
    ck_assert_int_eq(e, SMOL_ENOSESSION);
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(ev->kind_case, SMOLLM3__EVENT__KIND_ERROR);
    smol_client_event_free(&ev);
    e = smol_client_session_delete(c, NULL, "no-such-session-c", 10000, &ev, err);
    ck_assert_int_eq(e, SMOL_ENOSESSION);
    smol_client_event_free(&ev);
    /* cancel of an id never used: ack, error, or nothing */
    uint64_t cid;
    ck_assert_int_eq(smol_client_send_cancel(c, 0x7777777777ull, &cid, err), SMOL_OK);
    e = smol_client_recv(c, 1000, NULL, &ev, err);
    if (e == SMOL_OK) {
        ck_assert(ev->request_id == cid);
        smol_client_event_free(&ev);
    }
    ck_assert_int_eq(smol_client_health(c, 10000, &ev, err), SMOL_OK);
    smol_client_event_free(&ev);
    smol_client_close(&c);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("client");
    TCase *tc = tcase_create("offline");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, t_ids_unique);
    tcase_add_test(tc, t_default_endpoint);
    tcase_add_test(tc, t_no_daemon_timeouts);
    tcase_add_test(tc, t_chat_build);
    suite_add_tcase(s, tc);
    tc = tcase_create("daemon");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, t_health_stats);
    tcase_add_test(tc, t_stream);
    tcase_add_test(tc, t_stream_cancel_callback);
    tcase_add_test(tc, t_stream_cancel_flag);
    tcase_add_test(tc, t_interleaved);
    tcase_add_test(tc, t_bad_frames_and_unknowns);
    suite_add_tcase(s, tc);
    return s;
}
