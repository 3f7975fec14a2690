/*
 * main.c - smollm3-gateway: flags, the listening socket, the one epoll loop
 * and shutdown.
 *
 *   smollm3-gateway --listen unix:PATH | 127.0.0.1:PORT --daemon ENDPOINT [--daemon ENDPOINT…]
 *                   [--model-name NAME] [--max-body-bytes N] [--max-connections N]
 *                   [--request-timeout S] [--max-inflight N] [--ping-interval S]
 *                   [--ignore-unknown-fields] [--api-key-file FILE] [--tenant-secret-file FILE]
 *                   [--responses-store N]
 *                   [--responses-store-mb MB] [--ui-unclaimed-max N] [--ui-unclaimed-per-key N]
 *                   [--resume-timeout S] [--curve-key-file FILE] [--curve-server-keys FILE]
 *                   [--allow-plain-tcp] [--config FILE]
 *
 * The loop watches MHD's epoll fd, the daemon socket's ZMQ_FD (edge-
 * triggered: drained after every wake-up and every send), a signalfd for
 * SIGTERM/SIGINT and each connection's fd for EPOLLRDHUP (http.c).  It
 * wakes at least every 100 ms for timers: daemon health/stats probes and
 * liveness, `: ping` on idle streams (15 s), unclaimed UI streams (30 s).
 *
 * SIGHUP: the API keys are read again (auth.c): a key added is served from
 * the next request, a revoked one's next request is a 401 and its running
 * streams go on to their end; a bad file changes nothing (logged).
 *
 * SIGTERM/SIGINT: stop accepting (MHD_quiesce_daemon, the socket closed and
 * a Unix socket unlinked), end every stream with an error event, give the
 * connections up to 5 s to drain, resume all, MHD_stop_daemon, exit 0.
 */
#include "gateway/routes.h"
#include "gateway/auth.h"
#include "gateway/config.h"
#include "gateway/daemon.h"
#include "gateway/http.h"
#include "gateway/metrics.h"
#include "gateway/responses.h"
#include "gateway/ui.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <netinet/in.h>
#include <signal.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

struct gw G;

static char unix_path[108];

static void usage(FILE *f)
{
    fprintf(f,
        "usage: smollm3-gateway --listen unix:PATH|127.0.0.1:PORT --daemon ENDPOINT [--daemon ENDPOINT...] [options]\n"
        "  --daemon ENDPOINT        a daemon (ipc://PATH or tcp://HOST:PORT); several: a pool, each\n"
        "                           request on the live daemon rendezvous hashing of its tenant and\n"
        "                           session (else its prompt's start) picks; config: daemon = A, B\n"
        "  --resume-timeout S       a stream whose daemon went away waits this long for a live one\n"
        "                           and continues there after what it already sent (default 30, 0 = off)\n"
        "  --curve-key-file FILE    tcp:// daemons over CURVE: the gateway's secret key (40 Z85 characters;\n"
        "                           its public key goes in each daemon's curve_clients_file as 'KEY gateway')\n"
        "  --curve-server-keys FILE each tcp:// daemon's public key, 'ENDPOINT KEY' a line\n"
        "  --allow-plain-tcp        use a tcp:// daemon that has no key there, unauthenticated\n"
        "  --model-name NAME        name reported by /v1/models (default: the daemon's)\n"
        "  --max-body-bytes N       request body limit (default 1048576); at most the daemon's\n"
        "                           max_request_bytes (its health reply says; over it: not served)\n"
        "  --max-connections N      open connections before 503 (default 512)\n"
        "  --request-timeout S      idle connection timeout in seconds (default 60)\n"
        "  --max-inflight N         generations in flight before 429 (default 256)\n"
        "  --ping-interval S        ': ping' on streams idle this long (default 15)\n"
        "  --ignore-unknown-fields  accept request fields the gateway does not know (default: 400)\n"
        "  --api-key-file FILE      require a key ('Authorization: Bearer KEY' or 'x-api-key: KEY')\n"
        "                           on /v1/*, /ui/* (but GET /ui/stream/SID: its SID admits it),\n"
        "                           /tokenize and /detokenize; /health and /metrics stay open. One key\n"
        "                           per line: KEY [NAME] [tenant=TENANT], # comments. Each key acts\n"
        "                           for a tenant (tenant=, else derived from the key under the\n"
        "                           secret): its sessions, cached prefixes, stored responses and UI\n"
        "                           streams are its own. SIGHUP reads the file again\n"
        "  --tenant-secret-file FILE the deployment's secret (64 hex digits, mode 0600) under which\n"
        "                           a key's tenant id is derived; required with --api-key-file\n"
        "  --responses-store N      /v1/responses (store: true) generating here at once, held for\n"
        "                           GET and cancel until the daemon stores them (the daemon keeps\n"
        "                           them: its responses_store_mb, responses_ttl); default 1024,\n"
        "                           0 = none are stored\n"
        "  --responses-store-mb MB  the memory those may hold (default 256); with keys, each key\n"
        "                           gets an equal share of both limits\n"
        "  --ui-unclaimed-max N     web UI chats waiting for their stream's GET (default 64)\n"
        "  --ui-unclaimed-per-key N of them, one key's (default 8; with --api-key-file)\n"
        "  --config FILE            settings under [gateway]: the flags above as key = value\n"
        "                           (api_key_file = FILE, ...); flags given here override them\n");
}

static int parse_uint(const char *s, unsigned long long lo, unsigned long long hi,
                      unsigned long long *out)
{
    char *e;
    errno = 0;
    unsigned long long v = strtoull(s, &e, 10);
    if (errno || *e || !*s || v < lo || v > hi || *s == '-') return -1;
    *out = v;
    return 0;
}

/* Creates, binds and listens; returns the fd or -1. */
static int open_listen(const char *spec)
{
    int fd;
    if (!strncmp(spec, "unix:", 5)) {
        const char *path = spec + 5;
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        if (!*path || strlen(path) >= sizeof a.sun_path) {
            gw_log(3, "--listen: bad unix socket path '%s'", path);
            return -1;
        }
        strcpy(a.sun_path, path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) return -1;
        unlink(path);
        mode_t old = umask(0117);
        int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
        umask(old);
        if (rc) {
            gw_log(3, "bind %s: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
        chmod(path, 0660);
        struct group *g = getgrnam("www-data");
        if (g && chown(path, (uid_t)-1, g->gr_gid))
            gw_log(4, "chown %s to group www-data: %s", path, strerror(errno));
        snprintf(unix_path, sizeof unix_path, "%s", path);
    } else {
        char host[64];
        const char *colon = strrchr(spec, ':');
        unsigned long long port;
        if (!colon || (size_t)(colon - spec) >= sizeof host || parse_uint(colon + 1, 0, 65535, &port)) {
            gw_log(3, "--listen: expected unix:PATH or HOST:PORT, got '%s'", spec);
            return -1;
        }
        memcpy(host, spec, (size_t)(colon - spec));
        host[colon - spec] = 0;
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
        if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
            gw_log(3, "--listen: '%s' is not an IPv4 address", host);
            return -1;
        }
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) return -1;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, (struct sockaddr *)&a, sizeof a)) {
            gw_log(3, "bind %s: %s", spec, strerror(errno));
            close(fd);
            return -1;
        }
    }
    if (listen(fd, 4096)) {
        gw_log(3, "listen %s: %s", spec, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* --config FILE (or --config=FILE) on the command line, or NULL. */
static const char *config_path(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) path = argv[++i];
        else if (!strncmp(argv[i], "--config=", 9)) path = argv[i] + 9;
    }
    return path;
}

/* The config file as flags (its strings back G.cfg until exit) and the
 * argv they were merged into. */
static char **cfg_args, **cfg_argv;
static int n_cfg_args;

static void free_cfg_args(void)
{
    for (int i = 0; i < n_cfg_args; i++) free(cfg_args[i]);
    free(cfg_args);
    free(cfg_argv);
}

static int parse_args(int argc, char **argv)
{
    /* the config file's settings become flags ahead of the command line's,
     * which override them (config.c) */
    const char *conf = config_path(argc, argv);
    int n_cfg = 0;
    if (conf) {
        if (gw_config_args(conf, &cfg_args, &n_cfg_args)) return -1;
        n_cfg = n_cfg_args;
        cfg_argv = malloc((size_t)(argc + n_cfg + 1) * sizeof *cfg_argv);
        if (!cfg_argv) return -1;
        cfg_argv[0] = argv[0];
        memcpy(cfg_argv + 1, cfg_args, (size_t)n_cfg * sizeof *cfg_argv);
        memcpy(cfg_argv + 1 + n_cfg, argv + 1, (size_t)argc * sizeof *cfg_argv);    /* with the NULL */
        argv = cfg_argv;
        argc += n_cfg;
    }
    static const struct option opts[] = {
        { "listen", required_argument, 0, 'l' },
        { "daemon", required_argument, 0, 'd' },
        { "model-name", required_argument, 0, 'm' },
        { "max-body-bytes", required_argument, 0, 'b' },
        { "max-connections", required_argument, 0, 'c' },
        { "request-timeout", required_argument, 0, 't' },
        { "max-inflight", required_argument, 0, 'i' },
        { "ping-interval", required_argument, 0, 'p' },
        { "ignore-unknown-fields", no_argument, 0, 'u' },
        { "api-key-file", required_argument, 0, 'k' },
        { "tenant-secret-file", required_argument, 0, 'S' },
        { "responses-store", required_argument, 0, 'r' },
        { "responses-store-mb", required_argument, 0, 'R' },
        { "ui-unclaimed-max", required_argument, 0, 'U' },
        { "ui-unclaimed-per-key", required_argument, 0, 'K' },
        { "resume-timeout", required_argument, 0, 'T' },
        { "curve-key-file", required_argument, 0, 'C' },
        { "curve-server-keys", required_argument, 0, 'V' },
        { "allow-plain-tcp", no_argument, 0, 'P' },
        { "config", required_argument, 0, 'f' },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    struct gw_config *c = &G.cfg;
    c->max_body = 1 << 20;
    c->max_connections = 512;
    c->request_timeout = 60;
    c->max_inflight = 256;
    c->ping_interval = 15;
    c->responses_store = 1024;
    c->responses_store_bytes = (size_t)256 << 20;
    c->ui_unclaimed_max = 64;
    c->ui_unclaimed_per_key = 8;
    c->resume_timeout = 30;
    int daemons_from_cli = 0;
    int o;
    unsigned long long v;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'l': c->listen = optarg; break;
        case 'd':
            /* the command line's list replaces the config file's */
            if (optind - 1 > n_cfg && !daemons_from_cli) {
                daemons_from_cli = 1;
                c->n_daemons = 0;
            }
            if (c->n_daemons == GW_MAX_DAEMONS || (strncmp(optarg, "ipc://", 6) && strncmp(optarg, "tcp://", 6)))
                goto bad;
            c->daemons[c->n_daemons++] = optarg;
            break;
        case 'T':
            if (parse_uint(optarg, 0, 3600, &v)) goto bad;
            c->resume_timeout = (unsigned)v;
            break;
        case 'm': c->model_name = optarg; break;
        case 'b':
            if (parse_uint(optarg, 1024, 1ull << 30, &v)) goto bad;
            c->max_body = (size_t)v;
            break;
        case 'c':
            if (parse_uint(optarg, 1, 100000, &v)) goto bad;
            c->max_connections = (unsigned)v;
            break;
        case 't':
            if (parse_uint(optarg, 1, 86400, &v)) goto bad;
            c->request_timeout = (unsigned)v;
            break;
        case 'i':
            if (parse_uint(optarg, 1, 100000, &v)) goto bad;
            c->max_inflight = (unsigned)v;
            break;
        case 'p':
            if (parse_uint(optarg, 1, 3600, &v)) goto bad;
            c->ping_interval = (unsigned)v;
            break;
        case 'r':
            if (parse_uint(optarg, 0, 1000000, &v)) goto bad;
            c->responses_store = (size_t)v;
            break;
        case 'R':
            if (parse_uint(optarg, 0, 1 << 20, &v)) goto bad;
            c->responses_store_bytes = (size_t)v << 20;
            break;
        case 'U':
            if (parse_uint(optarg, 0, 100000, &v)) goto bad;
            c->ui_unclaimed_max = (unsigned)v;
            break;
        case 'K':
            if (parse_uint(optarg, 0, 100000, &v)) goto bad;
            c->ui_unclaimed_per_key = (unsigned)v;
            break;
        case 'u': c->ignore_unknown = 1; break;
        case 'C': c->curve_key_file = optarg; break;
        case 'V': c->curve_server_keys = optarg; break;
        case 'P': c->allow_plain_tcp = 1; break;
        case 'k': c->api_key_file = optarg; break;
        case 'S': c->tenant_secret_file = optarg; break;
        case 'f': break;                        /* read first (config_path) */
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
        continue;
    bad: {
        const char *name = "?";
        for (const struct option *x = opts; x->name; x++)
            if (x->val == o) name = x->name;
        fprintf(stderr, "smollm3-gateway: bad value '%s' for --%s%s%s\n", optarg, name,
                optind - 1 <= n_cfg ? " in " : "", optind - 1 <= n_cfg ? conf : "");
        return -1;
    }
    }
    if (optind < argc || !c->listen || !c->n_daemons) {
        usage(stderr);
        return -1;
    }
    return 0;
}

/* ---- timers ------------------------------------------------------------- */

static void ping_idle(double now)
{
    for (struct gw_stream *s = G.streams; s; s = s->next) {
        if (!s->req || s->req->waiting || !s->req->responded || s->ended) continue;
        if (now - s->last_write >= (double)G.cfg.ping_interval) {
            gw_buf_str(&s->out, s->kind == GW_ANTHROPIC_SSE ? "event: ping\ndata: {\"type\":\"ping\"}\n\n"
                                                            : ": ping\n\n");
            gw_stream_push(s);
        }
    }
}

/* ---- shutdown ----------------------------------------------------------- */

static void begin_stop(void)
{
    G.stopping = 1;
    gw_log(6, "stopping: no new connections, ending streams");
    MHD_socket lfd = MHD_quiesce_daemon(G.mhd);
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
    if (unix_path[0]) unlink(unix_path);
    struct gw_stream *s = G.streams, *next;
    for (; s; s = next) {
        next = s->next;
        if (!s->req) {          /* unclaimed UI stream */
            gw_stream_free(s);
            continue;
        }
        gw_daemon_cancel(s);    /* marks it terminal: later daemon events are dropped */
        struct gw_error e;
        gw_error_http(&e, 503, "server_error", "shutting_down", NULL, "the gateway is shutting down");
        gw_stream_fail(s, &e);
    }
}

/* With no connection open, hand the heap's free pages back to the kernel (at
 * most once a second).  glibc keeps freed chunks of a busy minute in its
 * arena, so RSS otherwise shows the high-water mark of past traffic (a 1 MiB
 * request body stays resident) rather than what is live; the soak's "RSS
 * flat" check reads live memory.  Streams do not count: with no connection
 * the only ones left are UI streams nobody has claimed yet, which wait up to
 * 30 s for their GET (a client that went away, or was refused a 429 by nginx)
 * and must not keep the heap at its high-water mark meanwhile. */
static void trim_when_idle(double now)
{
    static double last;
    if (G.n_conns != 0 || now - last < 1.0) return;
    last = now;
    malloc_trim(0);
}

int main(int argc, char **argv)
{
    atexit(free_cfg_args);
    if (parse_args(argc, argv)) return 2;
    if (G.cfg.tenant_secret_file && gw_auth_secret_load(G.cfg.tenant_secret_file)) return 1;
    if (G.cfg.api_key_file && gw_auth_load(G.cfg.api_key_file)) return 1;
    if (!G.cfg.api_key_file)
        gw_log(4, "no API keys (--api-key-file): every client is one tenant (cached_tokens tells one client what "
                  "another sent); serve on loopback only, or add keys first (gateway/README.md#api-keys-and-rate-limits)");
    signal(SIGPIPE, SIG_IGN);
    snprintf(G.model, sizeof G.model, "%s", G.cfg.model_name ? G.cfg.model_name : "smollm3");
    G.thinking = 1;             /* until the daemon's health reply says */
    gw_json_init();
    gw_metrics_init();

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

    G.epfd = epoll_create1(EPOLL_CLOEXEC);
    int lfd = open_listen(G.cfg.listen);
    if (lfd < 0 || G.epfd < 0 || sfd < 0) return 1;
    gw_daemon_open();
    G.mhd = gw_http_start(lfd, gw_route);
    if (!G.mhd) {
        gw_log(3, "cannot start the HTTP server");
        return 1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(G.mhd, MHD_DAEMON_INFO_EPOLL_FD);
    int mfd = di ? di->epoll_fd : -1;
    static int tag_mhd, tag_zmq, tag_sig;
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &tag_mhd };
    epoll_ctl(G.epfd, EPOLL_CTL_ADD, mfd, &ev);
    for (unsigned i = 0; i < G.n_links; i++) {      /* every daemon's socket: drained together */
        ev = (struct epoll_event){ .events = EPOLLIN | EPOLLET, .data.ptr = &tag_zmq };
        epoll_ctl(G.epfd, EPOLL_CTL_ADD, smol_client_fd(G.links[i].cli), &ev);
    }
    ev = (struct epoll_event){ .events = EPOLLIN, .data.ptr = &tag_sig };
    epoll_ctl(G.epfd, EPOLL_CTL_ADD, sfd, &ev);
    gw_log(6, "listening on %s, daemon %s%s", G.cfg.listen, G.cfg.daemons[0], G.n_links > 1 ? " and others" : "");

    double stop_deadline = 0;
    for (;;) {
        int timeout = 100;
        MHD_UNSIGNED_LONG_LONG mt;
        if (MHD_get_timeout(G.mhd, &mt) == MHD_YES && mt < (MHD_UNSIGNED_LONG_LONG)timeout)
            timeout = (int)mt;
        struct epoll_event evs[64];
        int n = epoll_wait(G.epfd, evs, 64, timeout);
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &tag_sig) {
                struct signalfd_siginfo si;
                while (read(sfd, &si, sizeof si) == sizeof si) {
                    if (si.ssi_signo == SIGHUP) {
                        if (!G.stopping) gw_auth_reload();
                    } else if (!G.stopping) {
                        begin_stop();
                        stop_deadline = smol_mono_s() + 5.0;
                    }
                }
            } else if (p != &tag_mhd && p != &tag_zmq) {
                gw_conn_rdhup(p);
            }
        }
        double now = smol_mono_s();
        gw_daemon_drain();
        if (!G.stopping) {
            gw_daemon_tick(now);
            ping_idle(now);
            gw_ui_expire(now);
            trim_when_idle(now);
        }
        MHD_run(G.mhd);
        gw_daemon_drain();
        if (G.stopping && (G.n_conns == 0 || now > stop_deadline)) break;
    }
    gw_http_resume_all();
    MHD_run(G.mhd);
    MHD_stop_daemon(G.mhd);
    while (G.streams) gw_stream_free(G.streams);
    gw_daemon_close();
    close(G.epfd);
    close(sfd);
    gw_log(6, "stopped");
    return 0;
}
