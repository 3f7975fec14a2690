/*
 * fault_shim.c - fault injection for smollm3-gateway (SQLite-style), linked only into the test
 * binary BUILD/tests/smollm3-gateway-fault (Makefile: the gateway's objects + this file, with
 * -Wl,--wrap for the calls below); never into a product binary.
 *
 * Points, by class:
 *   alloc  malloc calloc realloc strdup strndup posix_memalign of the gateway's own code, jansson's
 *          included (the gateway gives jansson an allocator of its own: gw_json_init)
 *   zmq    zmq_msg_init_size, zmq_send, zmq_msg_send, zmq_msg_recv: the daemon link
 *   http   MHD_create_response_from_buffer / _from_callback, MHD_queue_response,
 *          MHD_add_response_header: libmicrohttpd refusing a response
 * The environment:
 *   SMOL_FAULT_N=n         the n-th counted call fails (once); 0 or unset: count only
 *   SMOL_FAULT_CLASSES=... a comma list of the classes above (default: all)
 *   SMOL_FAULT_REPORT=path at exit: "calls N\nfired POINT\n" and "visit POINT COUNT" lines
 *   SMOL_FAULT_TRACE=1     the failing call's stack to stderr (the gateway's log)
 * Counting starts at SIGUSR2 (the driver sends it once the gateway answers /health), so start-up
 * is never failed: a gateway that cannot start is a different test (its flags and the daemon).
 * Driver: tests/gateway/test_fault.py.
 */
#include <errno.h>
#include <execinfo.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

enum point {
    P_MALLOC, P_CALLOC, P_REALLOC, P_STRDUP, P_STRNDUP, P_MEMALIGN,
    P_ZMQ_INIT, P_ZMQ_SEND, P_ZMQ_MSG_SEND, P_ZMQ_RECV,
    P_MHD_BUFFER, P_MHD_CALLBACK, P_MHD_QUEUE, P_MHD_HEADER, P_N
};
enum { C_ALLOC = 1, C_ZMQ = 2, C_HTTP = 4 };
static const char *const point_name[P_N] = {
    "malloc", "calloc", "realloc", "strdup", "strndup", "posix_memalign",
    "zmq_msg_init_size", "zmq_send", "zmq_msg_send", "zmq_msg_recv",
    "MHD_create_response_from_buffer", "MHD_create_response_from_callback", "MHD_queue_response",
    "MHD_add_response_header",
};
static const int point_class[P_N] = {
    C_ALLOC, C_ALLOC, C_ALLOC, C_ALLOC, C_ALLOC, C_ALLOC,
    C_ZMQ, C_ZMQ, C_ZMQ, C_ZMQ,
    C_HTTP, C_HTTP, C_HTTP, C_HTTP,
};

static volatile sig_atomic_t armed;     /* SIGUSR2 seen */
static int mask = C_ALLOC | C_ZMQ | C_HTTP;
static long target;                     /* the call that fails, 1-based; 0 = none */
static long calls;                      /* counted calls since armed */
static int fired = -1;                  /* the point that failed */
static long visits[P_N];
static const char *report;
static int tracing;

/* 1 when this call is to fail (the gateway is single-threaded: plain counters) */
static int fault(enum point p)
{
    if (!armed || !(mask & point_class[p])) return 0;
    visits[p]++;
    if (++calls != target) return 0;
    fired = p;
    if (tracing) {                  /* SMOL_FAULT_TRACE=1: where it failed, to the gateway's log */
        void *bt[24];
        int n = backtrace(bt, 24);
        backtrace_symbols_fd(bt, n, 2);
    }
    return 1;
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
int __real_zmq_msg_recv(zmq_msg_t *m, void *s, int flags);
struct MHD_Response *__real_MHD_create_response_from_buffer(size_t size, void *buffer,
                                                            enum MHD_ResponseMemoryMode mode);
struct MHD_Response *__real_MHD_create_response_from_callback(uint64_t size, size_t block_size,
                                                              MHD_ContentReaderCallback crc, void *crc_cls,
                                                              MHD_ContentReaderFreeCallback crfc);
enum MHD_Result __real_MHD_queue_response(struct MHD_Connection *c, unsigned int status, struct MHD_Response *r);
enum MHD_Result __real_MHD_add_response_header(struct MHD_Response *r, const char *h, const char *v);

void *__wrap_malloc(size_t n) { return fault(P_MALLOC) ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t s) { return fault(P_CALLOC) ? NULL : __real_calloc(n, s); }
void *__wrap_realloc(void *p, size_t n) { return fault(P_REALLOC) ? NULL : __real_realloc(p, n); }
char *__wrap_strdup(const char *s) { return fault(P_STRDUP) ? NULL : __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n) { return fault(P_STRNDUP) ? NULL : __real_strndup(s, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n)
{
    return fault(P_MEMALIGN) ? ENOMEM : __real_posix_memalign(p, a, n);
}

int __wrap_zmq_msg_init_size(zmq_msg_t *m, size_t n)
{
    if (fault(P_ZMQ_INIT)) {
        errno = ENOMEM;
        return -1;
    }
    return __real_zmq_msg_init_size(m, n);
}

int __wrap_zmq_send(void *s, const void *b, size_t n, int flags)
{
    if (fault(P_ZMQ_SEND)) {
        errno = EAGAIN;
        return -1;
    }
    return __real_zmq_send(s, b, n, flags);
}

int __wrap_zmq_msg_send(zmq_msg_t *m, void *s, int flags)
{
    if (fault(P_ZMQ_MSG_SEND)) {
        errno = EAGAIN;
        return -1;
    }
    return __real_zmq_msg_send(m, s, flags);
}

/* a receive that fails before taking the message: EINTR, as a signal would make it; the message
 * stays queued for the next call */
int __wrap_zmq_msg_recv(zmq_msg_t *m, void *s, int flags)
{
    if (fault(P_ZMQ_RECV)) {
        errno = EINTR;
        return -1;
    }
    return __real_zmq_msg_recv(m, s, flags);
}

struct MHD_Response *__wrap_MHD_create_response_from_buffer(size_t size, void *buffer,
                                                            enum MHD_ResponseMemoryMode mode)
{
    return fault(P_MHD_BUFFER) ? NULL : __real_MHD_create_response_from_buffer(size, buffer, mode);
}

struct MHD_Response *__wrap_MHD_create_response_from_callback(uint64_t size, size_t block_size,
                                                              MHD_ContentReaderCallback crc, void *crc_cls,
                                                              MHD_ContentReaderFreeCallback crfc)
{
    return fault(P_MHD_CALLBACK) ? NULL
                                 : __real_MHD_create_response_from_callback(size, block_size, crc, crc_cls, crfc);
}

enum MHD_Result __wrap_MHD_queue_response(struct MHD_Connection *c, unsigned int status, struct MHD_Response *r)
{
    return fault(P_MHD_QUEUE) ? MHD_NO : __real_MHD_queue_response(c, status, r);
}

enum MHD_Result __wrap_MHD_add_response_header(struct MHD_Response *r, const char *h, const char *v)
{
    return fault(P_MHD_HEADER) ? MHD_NO : __real_MHD_add_response_header(r, h, v);
}

static void on_arm(int sig)
{
    (void)sig;
    armed = 1;
}

static void write_report(void)
{
    if (!report) return;
    armed = 0;              /* the report's own stdio allocations are not counted */
    FILE *f = fopen(report, "w");
    if (!f) return;
    fprintf(f, "calls %ld\nfired %s\n", calls, fired >= 0 ? point_name[fired] : "none");
    for (int p = 0; p < P_N; p++) fprintf(f, "visit %s %ld\n", point_name[p], visits[p]);
    fclose(f);
}

__attribute__((constructor)) static void shim_init(void)
{
    const char *n = getenv("SMOL_FAULT_N"), *cls = getenv("SMOL_FAULT_CLASSES");
    target = n ? strtol(n, NULL, 10) : 0;
    if (cls && *cls) {
        mask = 0;
        if (strstr(cls, "alloc")) mask |= C_ALLOC;
        if (strstr(cls, "zmq")) mask |= C_ZMQ;
        if (strstr(cls, "http")) mask |= C_HTTP;
    }
    report = getenv("SMOL_FAULT_REPORT");
    tracing = getenv("SMOL_FAULT_TRACE") != NULL;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_arm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &sa, NULL);
    atexit(write_report);
}
