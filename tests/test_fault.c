/*
 * test_fault.c - fault injection, SQLite style (issue 28): the daemon's
 * engine and RPC threads, with its grammar cache and KV spill, run in-process
 * on the fixture model behind a real ROUTER socket, and a scripted workload
 * (generate, streaming chat with a session and follow-up turns, a cancel, a
 * client that vanishes mid-stream, a JSON-schema request, a drain that
 * writes the sessions to the spill directory, a restart that reads one back)
 * runs once per N with the Nth call of a class of calls failing:
 *
 *   alloc  malloc, calloc, realloc, strdup, strndup, posix_memalign,
 *          zmq_msg_init_size, jansson's allocations: NULL / ENOMEM
 *   zmq    zmq_send, zmq_msg_send (the first frame of a message: libzmq
 *          takes a multipart message whole or not at all): EAGAIN when
 *          non-blocking (a full pipe), EINTR when blocking (a signal)
 *   io     open/openat (ENOSPC when creating, EIO else), write (ENOSPC),
 *          read/pread (EIO), fsync (EIO), renameat (EIO), on regular files
 *
 * N = 1, 2, 3, ... (strided, see below) until a run makes fewer calls than N
 * (it completed with no injected failure).  After each run: no crash; every
 * request got its terminal event (Done or Error) and no route or queued
 * frame is left in the RPC thread (no stream left open, the vanished
 * client's included); the restarted engine, the fault cleared, gives a fresh
 * request the same greedy tokens as a clean run; the spill directory holds
 * no temporary file and only files a fresh index accepts (nothing
 * half-written); under ASan, LSan finds no leak (checked after every run).
 *
 * The layer: the test binary is linked with -Wl,--wrap= for each function
 * above (Makefile, FAULT_WRAP), so the library's calls come here first; the
 * product binaries are untouched.  Calls count only on the threads the
 * library runs (engine, RPC, spill writer, grammar index, thread pool); this
 * thread (the clients, start and stop) is exempt.
 *
 * Stride: each class is swept on its own; a class with C calls in the clean
 * run is swept at N = 1..DENSE, then every S-th N with S = C / RUNS (about
 * RUNS runs; the first DENSE calls are where start-up paths live).
 * SMOL_FAULT_FULL=1: every N (S = 1).  SMOL_FAULT_CLASSES=alloc,zmq,io picks
 * classes (default those three, RUNS 60, 30 with SMOL_TEST_QUICK); "all" is one
 * countdown over every point of the three.  SMOL_FAULT_N=n runs that N alone
 * (with SMOL_FAULT_TRACE=1: the stack of the call that failed).  Cost: about
 * 150 runs, 20 s of CPU in the normal build; 100 runs, 70 s under ASan
 * (SMOL_TEST_QUICK); the full sweep of one class about 1,400 runs (alloc).
 * zmq_msg_send is never failed: the RPC loop sends it as the second frame of
 * a message (after the routing id), which libzmq cannot refuse.  Each run prints nothing unless it fails (then N, the point that
 * failed, and what was wrong); the summary prints every point's visits.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "daemon/model/model.h"
#include "daemon/server/engine.h"
#include "daemon/server/engine_wire.h"
#include "daemon/server/grammar_cache.h"
#include "daemon/server/log.h"
#include "daemon/server/request.h"
#include "daemon/server/rpc.h"
#include "daemon/server/spill.h"
#include "daemon/text/tokenizer.h"
#include "smollm3.pb-c.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#define FAULT_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FAULT_LSAN 1
#endif
#endif
#ifdef FAULT_LSAN
#include <sanitizer/common_interface_defs.h>
#include <sanitizer/lsan_interface.h>
#endif
#include <signal.h>

/* ================================================================ the layer */

enum { FC_ALLOC = 1, FC_ZMQ = 2, FC_IO = 4 };

enum point {
    P_MALLOC, P_CALLOC, P_REALLOC, P_STRDUP, P_STRNDUP, P_MEMALIGN, P_MSG_INIT, P_JSON,
    P_ZMQ_SEND, P_ZMQ_MSG_SEND,
    P_OPEN, P_WRITE, P_READ, P_FSYNC, P_RENAME,
    P_N
};
static const char *const point_name[P_N] = {
    "malloc", "calloc", "realloc", "strdup", "strndup", "posix_memalign", "zmq_msg_init_size", "jansson alloc",
    "zmq_send", "zmq_msg_send",
    "open", "write", "read", "fsync", "renameat",
};

static atomic_int f_mask;           /* classes counted now */
static atomic_long f_target;        /* the call that fails (1-based); 0 = none */
static atomic_long f_calls;         /* counted calls since armed */
static atomic_int f_fired = -1;     /* the point that failed, -1 = none yet */
static atomic_long f_visits[P_N];   /* counted calls per point, over the whole test */
static __thread int f_exempt;       /* this thread's calls never count */
static void *f_trace[24];           /* where the failed call was made (SMOL_FAULT_TRACE) */
static int f_trace_n, f_tracing;

static void fault_arm(int mask, long target)
{
    atomic_store(&f_calls, 0);
    atomic_store(&f_fired, -1);
    atomic_store(&f_target, target);
    atomic_store(&f_mask, mask);
}

static void fault_disarm(void) { atomic_store(&f_mask, 0); }

static int armed(int cls) { return !f_exempt && (atomic_load_explicit(&f_mask, memory_order_relaxed) & cls); }

/* 1 when this call is to fail */
static int fault(enum point p, int cls)
{
    if (!armed(cls)) return 0;
    atomic_fetch_add_explicit(&f_visits[p], 1, memory_order_relaxed);
    long n = atomic_fetch_add(&f_calls, 1) + 1;
    if (n != atomic_load(&f_target)) return 0;
    atomic_store(&f_fired, (int)p);
    if (f_tracing) f_trace_n = backtrace(f_trace, 24);
    return 1;
}

static int is_regular(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t s);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
int __real_zmq_msg_init_size(zmq_msg_t *m, size_t n);
int __real_zmq_send(void *s, const void *b, size_t n, int flags);
int __real_zmq_msg_send(zmq_msg_t *m, void *s, int flags);
int __real_open(const char *path, int flags, ...);
int __real_openat(int dfd, const char *path, int flags, ...);
ssize_t __real_write(int fd, const void *b, size_t n);
ssize_t __real_read(int fd, void *b, size_t n);
ssize_t __real_pread(int fd, void *b, size_t n, off_t off);
int __real_fsync(int fd);
int __real_renameat(int a, const char *from, int b, const char *to);

void *__wrap_malloc(size_t n)
{
    if (fault(P_MALLOC, FC_ALLOC)) { errno = ENOMEM; return NULL; }
    return __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t s)
{
    if (fault(P_CALLOC, FC_ALLOC)) { errno = ENOMEM; return NULL; }
    return __real_calloc(n, s);
}
void *__wrap_realloc(void *p, size_t n)
{
    if (fault(P_REALLOC, FC_ALLOC)) { errno = ENOMEM; return NULL; }
    return __real_realloc(p, n);
}
char *__wrap_strdup(const char *s)
{
    if (fault(P_STRDUP, FC_ALLOC)) { errno = ENOMEM; return NULL; }
    return __real_strdup(s);
}
char *__wrap_strndup(const char *s, size_t n)
{
    if (fault(P_STRNDUP, FC_ALLOC)) { errno = ENOMEM; return NULL; }
    return __real_strndup(s, n);
}
int __wrap_posix_memalign(void **p, size_t a, size_t n)
{
    if (fault(P_MEMALIGN, FC_ALLOC)) return ENOMEM;
    return __real_posix_memalign(p, a, n);
}
/* libzmq keeps a message of up to 33 bytes inside the zmq_msg_t (a "very small
 * message", 64-bit): it never allocates, so it never fails */
int __wrap_zmq_msg_init_size(zmq_msg_t *m, size_t n)
{
    if (n > 33 && fault(P_MSG_INIT, FC_ALLOC)) { errno = ENOMEM; return -1; }
    return __real_zmq_msg_init_size(m, n);
}
static void *json_alloc(size_t n)
{
    if (fault(P_JSON, FC_ALLOC)) return NULL;
    return __real_malloc(n);
}

/* A socket with a multipart message under way on this thread: its next
 * frames are not failed (libzmq queues a message whole or refuses its first
 * frame: ROUTER_MANDATORY's EHOSTUNREACH, EAGAIN at the high-water mark). */
static __thread void *f_more_sock;

static int zmq_fault(void *s, int flags, enum point p)
{
    if (f_more_sock == s || !fault(p, FC_ZMQ)) return 0;
    errno = flags & ZMQ_DONTWAIT ? EAGAIN : EINTR;
    return 1;
}
int __wrap_zmq_send(void *s, const void *b, size_t n, int flags)
{
    if (zmq_fault(s, flags, P_ZMQ_SEND)) return -1;
    int rc = __real_zmq_send(s, b, n, flags);
    if (rc >= 0) f_more_sock = flags & ZMQ_SNDMORE ? s : NULL;
    return rc;
}
int __wrap_zmq_msg_send(zmq_msg_t *m, void *s, int flags)
{
    if (zmq_fault(s, flags, P_ZMQ_MSG_SEND)) return -1;
    int rc = __real_zmq_msg_send(m, s, flags);
    if (rc >= 0) f_more_sock = flags & ZMQ_SNDMORE ? s : NULL;
    return rc;
}

int __wrap_open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = flags & (O_CREAT | O_TMPFILE) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    if (fault(P_OPEN, FC_IO)) { errno = flags & O_CREAT ? ENOSPC : EIO; return -1; }
    return __real_open(path, flags, mode);
}
int __wrap_openat(int dfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = flags & (O_CREAT | O_TMPFILE) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    if (fault(P_OPEN, FC_IO)) { errno = flags & O_CREAT ? ENOSPC : EIO; return -1; }
    return __real_openat(dfd, path, flags, mode);
}
ssize_t __wrap_write(int fd, const void *b, size_t n)
{
    if (armed(FC_IO) && is_regular(fd) && fault(P_WRITE, FC_IO)) { errno = ENOSPC; return -1; }
    return __real_write(fd, b, n);
}
ssize_t __wrap_read(int fd, void *b, size_t n)
{
    if (armed(FC_IO) && is_regular(fd) && fault(P_READ, FC_IO)) { errno = EIO; return -1; }
    return __real_read(fd, b, n);
}
ssize_t __wrap_pread(int fd, void *b, size_t n, off_t off)
{
    if (armed(FC_IO) && is_regular(fd) && fault(P_READ, FC_IO)) { errno = EIO; return -1; }
    return __real_pread(fd, b, n, off);
}
int __wrap_fsync(int fd)
{
    if (fault(P_FSYNC, FC_IO)) { errno = EIO; return -1; }
    return __real_fsync(fd);
}
int __wrap_renameat(int a, const char *from, int b, const char *to)
{
    if (fault(P_RENAME, FC_IO)) { errno = EIO; return -1; }
    return __real_renameat(a, from, b, to);
}

/* ============================================================ the daemon */

#define ENGINE_EP "inproc://fault-engine"
#define ROUTER_EP "inproc://fault-router"
#define WAIT_S 30.0         /* for any one event (ASan is slow) */

struct world {              /* what lives across runs */
    struct smol_model *m;
    struct smol_tokenizer *tok;
    char dir[64];           /* the spill directory */
    int32_t ref[16];        /* the fresh request's greedy tokens, clean */
    int n_ref;
    struct result *clean;   /* [9]: each request of the clean run, by request id */
    struct smol_grammar_cache *gc;  /* kept across runs (its vocabulary is costly to build);
                                       each run's schema is new to it (its description) */
    long run;               /* runs so far */
};

struct daemon {             /* one start of the daemon: context, RPC thread, engine, spill, grammars */
    void *ctx;
    struct smol_rpc *rpc;
    struct smol_engine *eng;
    struct smol_spill *spill;
    struct smol_grammar_cache *gc;
    pthread_t th;
    int pipe[2];            /* 'd': drain, 'q': quit */
    atomic_int done;
    struct smol_rpc_counters ctr;   /* at the end of the loop */
};

static char fail_msg[512];  /* the first thing wrong in this run */
#define FAILF(...) do { if (!fail_msg[0]) snprintf(fail_msg, sizeof fail_msg, __VA_ARGS__); } while (0)

static void on_pipe(struct smol_rpc *rpc, void *user)
{
    struct daemon *d = user;
    char c;
    while (read(d->pipe[0], &c, 1) == 1) {
        if (c == 'd') smol_rpc_drain(rpc);
        else smol_rpc_quit(rpc);
    }
}

static void *rpc_main(void *arg)
{
    struct daemon *d = arg;
    smol_rpc_run(d->rpc, d->pipe[0], on_pipe, d);
    smol_rpc_get_counters(d->rpc, &d->ctr);
    atomic_store(&d->done, 1);
    return NULL;
}

static void daemon_start(struct world *w, struct daemon *d)
{
    char err[SMOL_ERRLEN];
    memset(d, 0, sizeof *d);
    ck_assert(pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC) == 0);
    d->gc = w->gc;
    ck_assert_msg(smol_spill_open(&d->spill, w->dir, 0, w->m, err) == SMOL_OK, "%s", err);
    d->ctx = zmq_ctx_new();
    int32_t nv = smol_tokenizer_n_vocab(w->tok);
    if (w->m->cfg.vocab < nv) nv = w->m->cfg.vocab;
    struct smol_rpc_config rc = {
        .lim = {.max_request_bytes = 1 << 20, .n_vocab = nv, .n_ctx = w->m->cfg.n_ctx, .grammars = d->gc},
        .sndhwm = 1000, .rcvhwm = 1000, .pause_frames = 256, .socket_mode = 0660, .drain_grace_ms = 3000,
        .max_routes = 256, .model_name = "fixture",
    };
    ck_assert_msg(smol_rpc_new(&d->rpc, d->ctx, &rc, err) == SMOL_OK, "%s", err);
    ck_assert_msg(smol_rpc_bind_engine(d->rpc, ENGINE_EP, err) == SMOL_OK, "%s", err);
    ck_assert_msg(smol_rpc_bind(d->rpc, ROUTER_EP, err) == SMOL_OK, "%s", err);
    struct smol_engine_config ec;
    smol_engine_config_default(&ec);
    ec.max_running = 4;
    ec.max_queued = 16;
    ec.step_tokens = 64;
    ec.queue_timeout_s = 5;
    ec.spill = d->spill;
    ec.grammars = d->gc;
    ec.spill_when_idle = 1;
    ec.speculative_calibrate = 0;
    ec.model_name = "fixture";
    ck_assert_msg(smol_engine_start(&d->eng, d->ctx, ENGINE_EP, w->m, w->tok, &ec, err) == SMOL_OK, "%s", err);
    smol_rpc_set_ready(d->rpc, 1);
    ck_assert(pthread_create(&d->th, NULL, rpc_main, d) == 0);
}

/* Drains (the engine writes its sessions), waits for the loop to end, stops
 * everything.  Checks that no route or queued frame was left. */
static void daemon_stop(struct daemon *d, const char *phase)
{
    ck_assert(write(d->pipe[1], "d", 1) == 1);
    double t0 = smol_mono_s();
    while (!atomic_load(&d->done) && smol_mono_s() - t0 < WAIT_S) usleep(2000);
    if (!atomic_load(&d->done)) {
        FAILF("%s: the drain never ended (no DRAINED from the engine, or a stream left open)", phase);
        ck_assert(write(d->pipe[1], "q", 1) == 1);
    }
    pthread_join(d->th, NULL);
    if (d->ctr.routes || d->ctr.queued_frames)
        FAILF("%s: %llu routes and %llu queued frames left after the drain (a stream never ended)", phase,
              (unsigned long long)d->ctr.routes, (unsigned long long)d->ctr.queued_frames);
    zmq_ctx_shutdown(d->ctx);      /* wakes the engine thread (ETERM) instead of its 1 s idle poll */
    smol_engine_stop(&d->eng);
    smol_spill_close(&d->spill);
    smol_rpc_free(&d->rpc);
    zmq_ctx_term(d->ctx);
    close(d->pipe[0]);
    close(d->pipe[1]);
}

/* ============================================================= clients */

static void *cli_new(struct daemon *d)
{
    void *s = zmq_socket(d->ctx, ZMQ_DEALER);
    ck_assert_ptr_nonnull(s);
    int z = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &z, sizeof z);
    ck_assert_int_eq(zmq_connect(s, ROUTER_EP), 0);
    return s;
}

static void cli_close(void *s) { zmq_close(s); }

struct msg { const char *role, *content; };

struct genreq {
    uint64_t id;
    const char *text;               /* text input, or chat: */
    const struct msg *msgs;
    int n_msgs;
    const char *session, *schema;
    int max_tokens;
};

static void send_gen(void *s, const struct genreq *g)
{
    Smollm3__Request rq = SMOLLM3__REQUEST__INIT;
    Smollm3__GenerateRequest gr = SMOLLM3__GENERATE_REQUEST__INIT;
    Smollm3__ChatInput ci = SMOLLM3__CHAT_INPUT__INIT;
    Smollm3__SamplingParams sp = SMOLLM3__SAMPLING_PARAMS__INIT;
    Smollm3__ChatMessage m[8], *mp[8];
    rq.protocol_version = SMOL_PROTOCOL_VERSION;
    rq.request_id = g->id;
    rq.kind_case = SMOLLM3__REQUEST__KIND_GENERATE;
    rq.generate = &gr;
    if (g->text) {
        gr.input_case = SMOLLM3__GENERATE_REQUEST__INPUT_TEXT;
        gr.text = (char *)g->text;
    } else {
        for (int i = 0; i < g->n_msgs; i++) {
            smollm3__chat_message__init(&m[i]);
            m[i].role = (char *)g->msgs[i].role;
            m[i].content = (char *)g->msgs[i].content;
            mp[i] = &m[i];
        }
        ci.n_messages = (size_t)g->n_msgs;
        ci.messages = mp;
        gr.input_case = SMOLLM3__GENERATE_REQUEST__INPUT_CHAT;
        gr.chat = &ci;
        gr.enable_thinking_opt_case = SMOLLM3__GENERATE_REQUEST__ENABLE_THINKING_OPT_ENABLE_THINKING;
        gr.enable_thinking = 0;
        gr.date = "26 November 2026";
    }
    sp.temperature_opt_case = SMOLLM3__SAMPLING_PARAMS__TEMPERATURE_OPT_TEMPERATURE;
    sp.temperature = 0;
    gr.sampling = &sp;
    gr.max_tokens = (uint32_t)g->max_tokens;
    if (g->session) gr.session_id = (char *)g->session;
    if (g->schema) {
        gr.constraint_case = SMOLLM3__GENERATE_REQUEST__CONSTRAINT_JSON_SCHEMA;
        gr.json_schema = (char *)g->schema;
    }
    uint8_t buf[4096];
    size_t n = smollm3__request__get_packed_size(&rq);
    ck_assert(n <= sizeof buf);
    smollm3__request__pack(&rq, buf);
    ck_assert_int_eq(zmq_send(s, buf, n, 0), (int)n);
}

static void send_cancel(void *s, uint64_t id, uint64_t target)
{
    Smollm3__Request rq = SMOLLM3__REQUEST__INIT;
    Smollm3__CancelRequest cr = SMOLLM3__CANCEL_REQUEST__INIT;
    rq.protocol_version = SMOL_PROTOCOL_VERSION;
    rq.request_id = id;
    rq.kind_case = SMOLLM3__REQUEST__KIND_CANCEL;
    rq.cancel = &cr;
    cr.target_request_id = target;
    uint8_t buf[64];
    size_t n = smollm3__request__pack(&rq, buf);
    ck_assert_int_eq(zmq_send(s, buf, n, 0), (int)n);
}

/* The next event, or NULL after WAIT_S. */
static Smollm3__Event *recv_ev(void *s)
{
    zmq_pollitem_t it = {.socket = s, .events = ZMQ_POLLIN};
    if (zmq_poll(&it, 1, (long)(WAIT_S * 1000)) != 1) return NULL;
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, s, 0) < 0) { zmq_msg_close(&m); return NULL; }
    Smollm3__Event *ev = smollm3__event__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
    zmq_msg_close(&m);
    ck_assert_ptr_nonnull(ev);
    return ev;
}

struct result {
    int ended, done, err, finish;   /* err: the Error's code */
    int started, cached, restored;
    int completion;                 /* Done's completion_tokens */
    int32_t ids[64];
    int n;
    char text[1024];
};

static void take(struct result *r, const Smollm3__Event *ev)
{
    switch (ev->kind_case) {
    case SMOLLM3__EVENT__KIND_STARTED:
        r->started = 1;
        r->cached = (int)ev->started->cached_tokens;
        r->restored = (int)ev->started->restored_tokens;
        break;
    case SMOLLM3__EVENT__KIND_TOKEN:
        if (r->n < 64) r->ids[r->n++] = ev->token->token_id;
        if (ev->token->text && ev->token->channel == SMOLLM3__CHANNEL__CHANNEL_CONTENT) {
            size_t have = strlen(r->text);
            snprintf(r->text + have, sizeof r->text - have, "%s", ev->token->text);
        }
        break;
    case SMOLLM3__EVENT__KIND_DONE:
        r->ended = r->done = 1;
        r->finish = ev->done->finish_reason;
        r->completion = ev->done->usage ? (int)ev->done->usage->completion_tokens : -1;
        break;
    case SMOLLM3__EVENT__KIND_ERROR: r->ended = 1; r->err = ev->error->code ? ev->error->code : -1; break;
    default: break;
    }
}

/* Reads events of request id until its terminal one; 0, or -1 (noted) when
 * none came within WAIT_S or an event of another request came. */
static int collect(void *s, uint64_t id, struct result *r, const char *what)
{
    while (!r->ended) {
        Smollm3__Event *ev = recv_ev(s);
        if (!ev) { FAILF("%s: no terminal event within %.0f s (a stream left open)", what, WAIT_S); return -1; }
        if (ev->request_id != id) {
            FAILF("%s: an event of request %llu (kind %d) in its stream", what, (unsigned long long)ev->request_id,
                  ev->kind_case);
            smollm3__event__free_unpacked(ev, NULL);
            return -1;
        }
        take(r, ev);
        smollm3__event__free_unpacked(ev, NULL);
    }
    return 0;
}

/* ============================================================ workload */

static const char *SCHEMA = "{\"description\":\"fault run %ld\",\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                            "\"b\":{\"type\":\"string\",\"maxLength\":8}},\"required\":[\"a\"]}";
static const char *FRESH = "Once upon a time";

struct run {
    int clean;                      /* the reference run: every request must succeed */
    struct result res[9];           /* by request id (the vanishing client's is not kept) */
    struct result fresh;            /* the fresh request after the fault was cleared */
};

/* Phase 1: generate, a session's first turn, a cancel, a vanishing client, a
 * schema, the session's second turn; the drain writes the session. */
static void phase1(struct world *w, struct run *run, char *turn1, char *turn2)
{
    struct daemon d;
    daemon_start(w, &d);
    void *a = cli_new(&d);
    struct result *r = run->res;

    send_gen(a, &(struct genreq){.id = 1, .text = "The quick brown fox", .max_tokens = 8});
    collect(a, 1, &r[1], "generate");

    struct msg m1[] = {{"system", "Be brief."}, {"user", "Hello there"}};
    send_gen(a, &(struct genreq){.id = 2, .msgs = m1, .n_msgs = 2, .session = "s1", .max_tokens = 6});
    collect(a, 2, &r[2], "session turn 1");
    snprintf(turn1, 1024, "%s", r[2].text);

    /* cancel after the first token (or whatever comes first) */
    send_gen(a, &(struct genreq){.id = 3, .text = "Count with me: one, two,", .max_tokens = 200});
    Smollm3__Event *ev = recv_ev(a);
    if (!ev) FAILF("cancel: no first event");
    else { take(&r[3], ev); smollm3__event__free_unpacked(ev, NULL); }
    send_cancel(a, 4, 3);
    int acked = 0;
    while (!fail_msg[0] && (!r[3].ended || !acked)) {
        if (!(ev = recv_ev(a))) { FAILF("cancel: no %s within %.0f s", acked ? "terminal event" : "Ack", WAIT_S); break; }
        if (ev->request_id == 4 && ev->kind_case == SMOLLM3__EVENT__KIND_ACK) acked = 1;
        else if (ev->request_id == 4) { acked = 1; take(&r[4], ev); }   /* its own error (out of memory) */
        else if (ev->request_id == 3) take(&r[3], ev);
        else FAILF("cancel: an event of request %llu", (unsigned long long)ev->request_id);
        smollm3__event__free_unpacked(ev, NULL);
    }

    /* an acknowledged cancel is honoured: the stream ends cancelled (or
     * with an error), not after all its tokens */
    if (!fail_msg[0] && acked && !r[4].ended && r[3].done && r[3].finish != SMOLLM3__FINISH_REASON__FINISH_REASON_CANCELLED)
        FAILF("cancel: acknowledged, yet the stream ran to its end (finish reason %d, %d tokens)", r[3].finish, r[3].n);

    /* a client vanishes after its first event */
    void *v = cli_new(&d);
    send_gen(v, &(struct genreq){.id = 1, .text = "Tell me a long story about", .max_tokens = 48});
    if (!(ev = recv_ev(v))) FAILF("vanishing client: no first event");
    else smollm3__event__free_unpacked(ev, NULL);
    cli_close(v);

    struct msg m5[] = {{"user", "Give me a JSON object."}};
    char schema[512];
    snprintf(schema, sizeof schema, SCHEMA, ++w->run);
    send_gen(a, &(struct genreq){.id = 5, .msgs = m5, .n_msgs = 1, .schema = schema, .max_tokens = 24});
    collect(a, 5, &r[5], "json schema");

    struct msg m6[] = {{"system", "Be brief."}, {"user", "Hello there"}, {"assistant", turn1}, {"user", "And again?"}};
    send_gen(a, &(struct genreq){.id = 6, .msgs = m6, .n_msgs = 4, .session = "s1", .max_tokens = 4});
    collect(a, 6, &r[6], "session turn 2");
    snprintf(turn2, 1024, "%s", r[6].text);

    cli_close(a);
    daemon_stop(&d, "phase 1");
    if (run->clean && !fail_msg[0]) {
        for (int i = 1; i <= 6; i++)
            if (i != 4 && r[i].err) FAILF("clean run: request %d ended with error %d", i, r[i].err);
        if (r[3].finish != SMOLLM3__FINISH_REASON__FINISH_REASON_CANCELLED)
            FAILF("clean run: the cancelled request finished with reason %d", r[3].finish);
        if (r[6].cached <= 0) FAILF("clean run: session turn 2 reused no KV");
    }
}

/* Phase 2: a restart; the session's third turn (its KV read back from the
 * spill directory), then, the fault cleared, a fresh request. */
static void phase2(struct world *w, struct run *run, const char *turn1, const char *turn2)
{
    struct daemon d;
    daemon_start(w, &d);
    void *a = cli_new(&d);
    struct result *rr = &run->res[7];
    struct msg m7[] = {{"system", "Be brief."}, {"user", "Hello there"}, {"assistant", turn1}, {"user", "And again?"},
                       {"assistant", turn2}, {"user", "Once more."}};
    send_gen(a, &(struct genreq){.id = 7, .msgs = m7, .n_msgs = 6, .session = "s1", .max_tokens = 4});
    collect(a, 7, rr, "session turn 3 (restored)");
    if (run->clean && !fail_msg[0] && (rr->err || rr->restored <= 0))
        FAILF("clean run: session turn 3 error %d, %d tokens restored from the spill directory", rr->err, rr->restored);

    fault_disarm();
    send_gen(a, &(struct genreq){.id = 8, .text = FRESH, .max_tokens = 12});
    collect(a, 8, &run->fresh, "the fresh request after the fault");
    cli_close(a);
    daemon_stop(&d, "phase 2");
}

/* Nothing half-written: no temporary left, and a fresh index of the
 * directory rejects no file. */
static void check_spill_dir(struct world *w)
{
    DIR *dir = opendir(w->dir);
    ck_assert_ptr_nonnull(dir);
    struct dirent *de;
    int files = 0;
    while ((de = readdir(dir))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (!strncmp(de->d_name, ".tmp-", 5)) FAILF("spill: a temporary file left: %s", de->d_name);
        files++;
    }
    closedir(dir);
    char err[SMOL_ERRLEN];
    struct smol_spill *sp = NULL;
    ck_assert_msg(smol_spill_open(&sp, w->dir, 0, w->m, err) == SMOL_OK, "%s", err);
    struct smol_spill_stats st;
    smol_spill_get_stats(sp, &st);
    smol_spill_close(&sp);
    if (st.rejected || (int)st.files != files)
        FAILF("spill: %d files, %u indexed, %llu rejected (half-written)", files, st.files,
              (unsigned long long)st.rejected);
}

static void clear_dir(const char *path)
{
    DIR *dir = opendir(path);
    ck_assert_ptr_nonnull(dir);
    struct dirent *de;
    char p[512];
    while ((de = readdir(dir)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", path, de->d_name);
            unlink(p);
        }
    closedir(dir);
}

/* One run with the target-th call of mask failing (0: none, counting only).
 * Returns the calls counted; fail_msg says what went wrong. */
static long one_run(struct world *w, int mask, long target, int clean)
{
    static char turn1[1024], turn2[1024];
    struct run run;
    memset(&run, 0, sizeof run);
    run.clean = clean;
    fail_msg[0] = 0;
    clear_dir(w->dir);
    fault_arm(mask, target);
    phase1(w, &run, turn1, turn2);
    phase2(w, &run, turn1, turn2);
    long calls = atomic_load(&f_calls);
    fault_disarm();
    check_spill_dir(w);
    if (!fail_msg[0]) {
        struct result *f = &run.fresh;
        if (!f->done || f->err) FAILF("the fresh request after the fault: done %d, error %d", f->done, f->err);
        else if (w->n_ref >= 0 && (f->n != w->n_ref || memcmp(f->ids, w->ref, sizeof(int32_t) * (size_t)f->n)))
            FAILF("the fresh request after the fault: %d tokens, not the clean run's %d greedy tokens", f->n, w->n_ref);
    }
    /* a request that ended with Done gave what the clean run gave (greedy),
     * when its prompt was the clean run's: a fault ends a stream with an
     * error or not at all, never with lost or different text */
    static const struct { int id, dep1, dep2; } cmp[] = {{1, 0, 0}, {2, 0, 0}, {5, 0, 0}, {6, 2, 0}, {7, 2, 6}};
    for (size_t i = 0; !clean && !fail_msg[0] && i < sizeof cmp / sizeof cmp[0]; i++) {
        const struct result *g = &run.res[cmp[i].id], *c = &w->clean[cmp[i].id];
        int same_prompt = 1;
        for (int k = 1; k <= 2; k++) {
            int dep = k == 1 ? cmp[i].dep1 : cmp[i].dep2;
            if (dep && strcmp(run.res[dep].text, w->clean[dep].text)) same_prompt = 0;
        }
        /* a session turn whose history was not kept (recording it, writing or reading its
         * file failed) is tokenized from the text and may legitimately differ: compared when
         * it reused what the clean run reused */
        if (!g->done || !same_prompt || g->cached != c->cached || g->restored != c->restored) continue;
        if (g->finish != c->finish || g->completion != c->completion || strcmp(g->text, c->text))
        {
            size_t k = 0;
            while (g->text[k] && g->text[k] == c->text[k]) k++;
            FAILF("request %d ended Done (reason %d, %d tokens, \"%.60s\") but the clean run gave reason %d, %d tokens, "
                  "\"%.60s\" (texts differ from byte %zu)", cmp[i].id, g->finish, g->completion, g->text + k, c->finish,
                  c->completion, c->text + k, k);
        }
    }
    if (clean) memcpy(w->clean, run.res, sizeof run.res);
    if (clean && w->n_ref < 0) {
        w->n_ref = run.fresh.n < 16 ? run.fresh.n : 16;
        memcpy(w->ref, run.fresh.ids, sizeof(int32_t) * (size_t)w->n_ref);
    }
#ifdef FAULT_LSAN
    /* LSan reports every leak still there, so once a run leaked, the later runs would all
     * report it again: the leak check stops at the first run that leaks */
    static int leaked;
    if (!leaked && __lsan_do_recoverable_leak_check()) {
        leaked = 1;
        FAILF("LeakSanitizer found leaks (above; no leak check in the later runs)");
    }
#endif
    return calls;
}

/* A crash names the run it happened in. */
static char crash_note[128];
ssize_t __real_write(int fd, const void *b, size_t n);

static void note_crash(void)
{
    if (__real_write(2, crash_note, strlen(crash_note)) < 0) {}
}

#ifndef FAULT_LSAN
static void on_crash(int sig)
{
    note_crash();
    raise(sig);     /* SA_RESETHAND: the default action now */
}
#endif

static void catch_crashes(void)
{
#ifdef FAULT_LSAN
    __sanitizer_set_death_callback(note_crash);     /* ASan reports the crash itself */
#else
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_crash;
    sa.sa_flags = SA_RESETHAND;
    int sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
#endif
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sweep(struct world *w, const char *name, int mask, int runs, int full, int *failures)
{
    double t0 = now_s();
    snprintf(crash_note, sizeof crash_note, "\nfault %s: the clean run crashed\n", name);
    long calls = one_run(w, mask, 0, 1);
    ck_assert_msg(!fail_msg[0], "%s: the clean run failed: %s", name, fail_msg);
    enum { DENSE = 16 };
    long stride = full || calls <= runs ? 1 : (calls + runs - 1) / runs;
    int n_runs = 0, fired = 0;
    const char *only = getenv("SMOL_FAULT_N");     /* N or FROM-TO, every N (reproducing a failure) */
    long from = 1, to = -1;
    if (only) {
        char *end;
        from = to = strtol(only, &end, 10);
        if (*end == '-') to = strtol(end + 1, NULL, 10);
        stride = 1;
    }
    for (long n = from;; n = n < DENSE || only ? n + 1 : n + stride) {
        snprintf(crash_note, sizeof crash_note, "\nfault %s N=%ld: crashed (the Nth call of the class failed)\n", name, n);
        long got = one_run(w, mask, n, 0);
        crash_note[0] = 0;
        n_runs++;
        int p = atomic_load(&f_fired);
        if (p >= 0) fired++;
        if (f_tracing && p >= 0) {
            printf("trace %s N=%ld: %s failed: %s\n", name, n, point_name[p], fail_msg[0] ? fail_msg : "ok");
            fflush(stdout);
            backtrace_symbols_fd(f_trace, f_trace_n, 1);
        }
        if (fail_msg[0]) {
            printf("fault %s N=%ld (%s failed): %s\n", name, n, p >= 0 ? point_name[p] : "none", fail_msg);
            fflush(stdout);
            ++*failures;
        }
        if (got < n || (only && n >= to)) break;     /* the run completed with no injected failure */
    }
    printf("stats: fault %s: %ld calls in the clean run, %d runs (N = 1..%d, then every %ld), %d injected, %.1f s\n",
           name, calls, n_runs, DENSE, stride, fired, now_s() - t0);
    fflush(stdout);
}

/* "alloc,io" has "io", not "all" */
static int has_word(const char *list, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = list; (p = strstr(p, w)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}

START_TEST(t_fault_sweep)
{
    f_exempt = 1;
    catch_crashes();
    const char *p = fixture_path("models/fixture-t.Q8_0.gguf");
    if (!p) { printf("SKIPPED: fixture missing\n"); return; }
    const char *verbose = getenv("SMOL_FAULT_VERBOSE");
    smol_log_init("test_fault", verbose && *verbose ? SMOL_LOG_DEBUG : (enum smol_log_level)2);
    json_set_alloc_funcs(json_alloc, free);
    struct world w;
    memset(&w, 0, sizeof w);
    w.n_ref = -1;
    w.clean = calloc(9, sizeof *w.clean);
    char err[SMOL_ERRLEN];
    struct smol_model_settings set;
    smol_model_settings_default(&set);
    set.n_threads = 2;
    set.quiet = 1;
    set.n_ctx = 1024;
    set.max_tokens = 64;
    set.kv_budget = 2u << 20;
    ck_assert_msg(smol_model_open(&w.m, p, &set, err) == SMOL_OK, "%s", err);
    ck_assert_msg(smol_tokenizer_new(&w.tok, w.m->gguf, err) == SMOL_OK, "%s", err);
    ck_assert_msg(smol_grammar_cache_new(&w.gc, w.tok, 0, err) == SMOL_OK, "%s", err);
    snprintf(w.dir, sizeof w.dir, "/tmp/smol-fault-XXXXXX");
    ck_assert(mkdtemp(w.dir));

    const char *tr = getenv("SMOL_FAULT_TRACE");
    f_tracing = tr && *tr && strcmp(tr, "0");
    const char *cls = getenv("SMOL_FAULT_CLASSES");
    const char *full = getenv("SMOL_FAULT_FULL");
    int is_full = full && *full && strcmp(full, "0");
    int quick = getenv("SMOL_TEST_QUICK") != NULL;
    int failures = 0;
    struct { const char *name; int mask, runs; } cl[] = {
        {"alloc", FC_ALLOC, quick ? 30 : 60}, {"zmq", FC_ZMQ, quick ? 30 : 60}, {"io", FC_IO, 1000},
        {"all", FC_ALLOC | FC_ZMQ | FC_IO, quick ? 30 : 60},   /* one countdown over every point: on demand */
    };
    for (size_t i = 0; i < sizeof cl / sizeof cl[0]; i++)
        if (cls ? has_word(cls, cl[i].name) : cl[i].mask != (FC_ALLOC | FC_ZMQ | FC_IO))
            sweep(&w, cl[i].name, cl[i].mask, cl[i].runs, is_full, &failures);

    printf("stats: fault points visited:");
    for (int i = 0; i < P_N; i++) printf(" %s %ld", point_name[i], atomic_load(&f_visits[i]));
    printf("\n");
    json_set_alloc_funcs(malloc, free);
    clear_dir(w.dir);
    rmdir(w.dir);
    smol_grammar_cache_free(&w.gc);
    smol_tokenizer_free(&w.tok);
    smol_model_close(&w.m);
    free(w.clean);
    ck_assert_msg(failures == 0, "%d fault runs failed (above)", failures);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("fault");
    TCase *tc = tcase_create("fault");
    tcase_set_timeout(tc, 1800);
    tcase_add_test(tc, t_fault_sweep);
    suite_add_tcase(s, tc);
    return s;
}
