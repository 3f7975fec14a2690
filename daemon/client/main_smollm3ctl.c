/*
 * main_smollm3ctl.c - smollm3ctl, the command-line client of smollm3d.
 *
 *   smollm3ctl [--connect ENDPOINT] [--timeout SECONDS] [--tenant ID] [--json] COMMAND [ARGS]
 *
 * The global options may come before or after the command.
 * A thin shell around daemon/client/client.h: it parses flags, builds one request
 * and prints the events.  The output formats are a contract checked from
 * outside (tests/daemon/, the gateway's tests): with --json, exactly one
 * compact JSON object per line, written by jansson (so strings are escaped
 * correctly).  Exit status: 0 success, 1 failure (an error event, no
 * daemon, a timeout, not ready, unknown session), 2 usage error, 130 when
 * a generate was cancelled with Ctrl-C.
 *
 * Ctrl-C during generate sends Cancel and waits (up to 10 s) for the
 * terminal event, so the daemon frees the request at once; a second Ctrl-C
 * quits without waiting.
 */
#include <fcntl.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "daemon/client/client.h"

#define EXIT_USAGE 2
#define EXIT_INTERRUPTED 130
#define CANCEL_WAIT_MS 10000
#define GENERATE_IDLE_DEFAULT_MS 600000   /* between two events, unless --timeout */
#define MAX_STOPS 16

static volatile sig_atomic_t g_interrupted;

static void on_signal(int sig)
{
    if (g_interrupted) {                 /* second Ctrl-C: give up waiting */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    g_interrupted = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: smollm3ctl [--connect ENDPOINT] [--timeout SECONDS] [--tenant ID] [--json] COMMAND [ARGS]\n"
        "\n"
        "commands:\n"
        "  generate [--new-session ID | --session ID] [--no-think|--think] [--system TEXT] [--temp T]\n"
        "           [--top-p P] [--top-k K] [--seed S] [-n N] [--stop STR]... [--logprobs]\n"
        "           [--no-speculative] [--resume-tokens ID,ID,...]\n"
        "           [--json] MESSAGE...      one chat turn, streamed (MESSAGE '-' = stdin)\n"
        "  stats [--json]                    daemon counters\n"
        "  health [--json]                   exit 0 when the daemon is ready, 1 otherwise\n"
        "  curve-keygen FILE                 a CURVE key pair for tcp://: the secret key into FILE\n"
        "                                    (mode 0600), the public key on stdout\n"
        "  sessions [--json]                 list sessions (id, tokens, idle, busy)\n"
        "  session ID [--json]               one session\n"
        "  delete ID                         delete a session (exit 1 if unknown)\n"
        "\n"
        "sessions (the daemon keeps the history): --new-session ID starts a conversation,\n"
        "--session ID continues it (a session the daemon no longer holds -- deleted, or\n"
        "evicted -- is an error then, not a silent fresh start)\n"
        "\n"
        "options (before or after the command):\n"
        "  --connect ENDPOINT  default ipc://$RUNTIME_DIRECTORY/smollm3d.sock, else\n"
        "                      ipc://$XDG_RUNTIME_DIR/smollm3d.sock, else\n"
        "                      ipc:///run/smollm3d/smollm3d.sock\n"
        "  --timeout SECONDS   reply timeout (default 30); for generate, the longest\n"
        "                      wait between two events (default 600)\n"
        "  --tenant ID         the sessions' namespace (generate, sessions, session,\n"
        "                      delete); default: the default one\n"
        "  --json              one JSON object per line\n"
        "\n"
        "exit status: 0 ok, 1 failure, 2 usage error, 130 generate cancelled by Ctrl-C\n");
}

/* ---- JSON output ------------------------------------------------------- */

/* A JSON string from bytes that should be UTF-8; invalid sequences become
 * U+FFFD instead of making the whole line unprintable. */
static json_t *jstr(const char *s)
{
    if (!s) s = "";
    json_t *j = json_string(s);
    if (j) return j;
    size_t n = strlen(s);
    char *out = malloc(n * 3 + 1);
    if (!out) return json_string("");
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                : (c & 0xF8) == 0xF0 ? 4 : 0;
        int ok = len > 0 && i + len <= n;
        for (int k = 1; ok && k < len; k++) ok = ((unsigned char)s[i + k] & 0xC0) == 0x80;
        if (ok && len > 1) {             /* let jansson judge overlongs and surrogates */
            char tmp[5] = {0};
            memcpy(tmp, s + i, len);
            json_t *t = json_string(tmp);
            ok = t != NULL;
            json_decref(t);
        }
        if (ok) {
            memcpy(out + o, s + i, len);
            o += len;
            i += len;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    out[o] = 0;
    j = json_string(out);
    free(out);
    return j ? j : json_string("");
}

/* Prints obj as one compact line and frees it; -1 if stdout failed. */
static int jprint(json_t *obj)
{
    int r = json_dumpf(obj, stdout, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(obj);
    if (r == 0) r = fputc('\n', stdout) == EOF ? -1 : 0;
    if (r == 0) r = fflush(stdout) ? -1 : 0;
    return r;
}

static json_t *jerror(const char *code, const char *msg)
{
    return json_pack("{s:s, s:s, s:o}", "event", "error", "code", code, "message", jstr(msg));
}

/* ---- generate ---------------------------------------------------------- */

struct gen_state {
    int json;
    int tty;                     /* stdout is a terminal: reasoning dimmed */
    int channel;                 /* channel of the last token printed, -1 none */
    int at_line_start;
    int failed_output;           /* stdout went away: cancel */
    int error_event;             /* the stream ended with an error event */
    int cancelled;               /* done with finish_reason cancelled */
};

static int out_text(struct gen_state *st, const char *s)
{
    size_t n = strlen(s);
    if (n == 0) return 0;
    if (fwrite(s, 1, n, stdout) != n) return -1;
    st->at_line_start = s[n - 1] == '\n';
    return 0;
}

static void switch_channel(struct gen_state *st, int ch)
{
    if (ch == st->channel) return;
    if (st->channel == SMOLLM3__CHANNEL__CHANNEL_REASONING) {
        if (st->tty) fputs("\033[0m", stdout);
        else {
            if (!st->at_line_start) fputc('\n', stdout);
            fputs("[/thinking]", stdout);
        }
        fputc('\n', stdout);
        st->at_line_start = 1;
    }
    if (ch == SMOLLM3__CHANNEL__CHANNEL_REASONING) {
        if (st->tty) fputs("\033[2m", stdout);
        else fputs("[thinking] ", stdout);
        st->at_line_start = 0;
    }
    st->channel = ch;
}

static int on_event_json(const Smollm3__Event *ev, struct gen_state *st)
{
    json_t *o = NULL;
    switch (ev->kind_case) {
    case SMOLLM3__EVENT__KIND_STARTED: {
        const Smollm3__Started *s = ev->started;
        o = json_pack("{s:s, s:I, s:I, s:I, s:o, s:b}", "event", "started",
                      "prompt_tokens", (json_int_t)s->prompt_tokens,
                      "cached_tokens", (json_int_t)s->cached_tokens,
                      "restored_tokens", (json_int_t)s->restored_tokens,
                      "session_id", jstr(s->session_id), "thinking", (int)s->thinking);
        break;
    }
    case SMOLLM3__EVENT__KIND_TOKEN: {
        const Smollm3__Token *t = ev->token;
        o = json_pack("{s:s, s:o, s:I, s:s}", "event", "token", "text", jstr(t->text),
                      "token_id", (json_int_t)t->token_id,
                      "channel", smol_client_channel_name(t->channel));
        if (o && t->logprob_opt_case == SMOLLM3__TOKEN__LOGPROB_OPT_LOGPROB)
            json_object_set_new(o, "logprob", json_real(t->logprob));
        break;
    }
    case SMOLLM3__EVENT__KIND_TOOL_CALL: {
        const Smollm3__ToolCall *t = ev->tool_call;
        o = json_pack("{s:s, s:I, s:o, s:o, s:o}", "event", "tool_call",
                      "index", (json_int_t)t->index, "id", jstr(t->id), "name", jstr(t->name),
                      "arguments", jstr(t->arguments_json));
        break;
    }
    case SMOLLM3__EVENT__KIND_DONE: {
        const Smollm3__Done *d = ev->done;
        const Smollm3__Usage *u = d->usage;
        const Smollm3__Timings *t = d->timings;
        json_t *usage = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
                                  "prompt_tokens", (json_int_t)(u ? u->prompt_tokens : 0),
                                  "cached_tokens", (json_int_t)(u ? u->cached_tokens : 0),
                                  "completion_tokens", (json_int_t)(u ? u->completion_tokens : 0),
                                  "reasoning_tokens", (json_int_t)(u ? u->reasoning_tokens : 0),
                                  "drafted_tokens", (json_int_t)(u ? u->drafted_tokens : 0),
                                  "accepted_tokens", (json_int_t)(u ? u->accepted_tokens : 0),
                                  "decode_steps", (json_int_t)(u ? u->decode_steps : 0));
        o = json_pack("{s:s, s:s, s:o}", "event", "done",
                      "finish_reason", smol_client_finish_name(d->finish_reason), "usage", usage);
        if (o && t)
            json_object_set_new(o, "timings",
                json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "queue_ms", t->queue_ms,
                          "prompt_ms", t->prompt_ms, "generation_ms", t->generation_ms,
                          "ttft_ms", t->ttft_ms, "prompt_tokens_per_s", t->prompt_tokens_per_s,
                          "generation_tokens_per_s", t->generation_tokens_per_s));
        if (o && d->stop_string && *d->stop_string)
            json_object_set_new(o, "stop_string", jstr(d->stop_string));
        break;
    }
    case SMOLLM3__EVENT__KIND_ERROR:
        o = jerror(smol_client_error_name(ev->error->code), ev->error->message);
        break;
    default:
        o = json_pack("{s:s, s:i}", "event", "unexpected", "kind", (int)ev->kind_case);
        break;
    }
    return o ? jprint(o) : -1;
}

static int on_event_text(const Smollm3__Event *ev, struct gen_state *st)
{
    switch (ev->kind_case) {
    case SMOLLM3__EVENT__KIND_TOKEN:
        if (!ev->token->text || !*ev->token->text) return 0;
        switch_channel(st, ev->token->channel);
        if (out_text(st, ev->token->text)) return -1;
        break;
    case SMOLLM3__EVENT__KIND_TOOL_CALL:
        switch_channel(st, SMOLLM3__CHANNEL__CHANNEL_CONTENT);
        printf("%s[tool_call %s(%s)]\n", st->at_line_start ? "" : "\n", ev->tool_call->name,
               ev->tool_call->arguments_json);
        st->at_line_start = 1;
        break;
    case SMOLLM3__EVENT__KIND_DONE: {
        switch_channel(st, SMOLLM3__CHANNEL__CHANNEL_CONTENT);
        if (!st->at_line_start) fputc('\n', stdout);
        const Smollm3__Usage *u = ev->done->usage;
        const Smollm3__Timings *t = ev->done->timings;
        if (isatty(STDERR_FILENO) && u)
            fprintf(stderr, "[%s: %u prompt tokens (%u cached), %u generated, %.1f tok/s]\n",
                    smol_client_finish_name(ev->done->finish_reason), u->prompt_tokens,
                    u->cached_tokens, u->completion_tokens,
                    t ? t->generation_tokens_per_s : 0.0);
        break;
    }
    case SMOLLM3__EVENT__KIND_ERROR:
        switch_channel(st, SMOLLM3__CHANNEL__CHANNEL_CONTENT);
        if (!st->at_line_start) fputc('\n', stdout);
        break;
    default:
        break;
    }
    return fflush(stdout) ? -1 : 0;
}

static int on_event(const Smollm3__Event *ev, void *user)
{
    struct gen_state *st = user;
    if (ev->kind_case == SMOLLM3__EVENT__KIND_ERROR) st->error_event = 1;
    if (ev->kind_case == SMOLLM3__EVENT__KIND_DONE &&
        ev->done->finish_reason == SMOLLM3__FINISH_REASON__FINISH_REASON_CANCELLED)
        st->cancelled = 1;
    if (st->failed_output) return 1;
    int r = st->json ? on_event_json(ev, st) : on_event_text(ev, st);
    if (r) st->failed_output = 1;
    return r ? 1 : 0;
}

static int parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end) return -1;
    *out = v;
    return 0;
}

static int parse_u64(const char *s, unsigned long long *out)
{
    char *end;
    errno = 0;
    if (*s == '-') return -1;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end) return -1;
    *out = v;
    return 0;
}

/* Reads all of stdin into a NUL-terminated buffer (strips one final '\n'). */
static char *read_stdin(void)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (;;) {
        if (len + 1 >= cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); return NULL; }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len - 1, stdin);
        if (n == 0) break;
        len += n;
    }
    if (len && buf[len - 1] == '\n') len--;
    buf[len] = 0;
    return buf;
}

/* Opens a client to endpoint, or reports why not (as an error line with
 * --json) and returns NULL.  A missing ipc:// socket file fails at once
 * instead of waiting out the send timeout. */
static struct smol_client *connect_daemon(const char *endpoint, int timeout_ms, int json)
{
    struct smol_client_opts o;
    struct smol_client *c = NULL;
    char err[SMOL_ERRLEN];
    if (!smol_client_endpoint_exists(endpoint)) {
        char msg[4200];
        snprintf(msg, sizeof msg, "no daemon at %s (socket file missing)", endpoint);
        if (json) jprint(jerror("io_error", msg));
        else fprintf(stderr, "smollm3ctl: %s\n", msg);
        return NULL;
    }
    smol_client_opts_default(&o);
    o.send_timeout_ms = timeout_ms;
    if (smol_client_open(&c, endpoint, &o, err)) {
        if (json) jprint(jerror(smol_err_name(SMOL_EIO), err));
        else fprintf(stderr, "smollm3ctl: %s\n", err);
        return NULL;
    }
    return c;
}

static int cmd_generate(const char *endpoint, const char *tenant, int argc, char **argv, int timeout_set,
                        int timeout_ms, int json)
{
    struct smol_client *c = NULL;
    struct smol_client_chat p;
    const char *stops[MAX_STOPS];
    struct gen_state st = { .json = json, .channel = -1, .at_line_start = 1 };
    char *message = NULL, err[SMOL_ERRLEN];
    size_t mlen = 0, n_resume = 0;
    int rc = 1, from_stdin = 0, opts_done = 0;
    static int32_t resume[8192];        /* --resume-tokens: the answer's first token ids (resume_tokens) */

    smol_client_chat_init(&p);
    p.stops = stops;
    p.tenant = tenant;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
        unsigned long long u;
        if (opts_done || a[0] != '-' || !strcmp(a, "-")) {
            if (!strcmp(a, "-") && !opts_done && !from_stdin && !message) {
                from_stdin = 1;
                if (!(message = read_stdin())) goto oom;
                mlen = strlen(message);
                continue;
            }
            size_t al = strlen(a);
            char *nm = realloc(message, mlen + al + 2);
            if (!nm) goto oom;
            message = nm;
            if (mlen) message[mlen++] = ' ';
            memcpy(message + mlen, a, al + 1);
            mlen += al;
        } else if (!strcmp(a, "--")) {
            opts_done = 1;
        } else if (!strcmp(a, "--json")) {
            st.json = 1;
        } else if (!strcmp(a, "--no-think")) {
            p.thinking = 0;
        } else if (!strcmp(a, "--think")) {
            p.thinking = 1;
        } else if (!strcmp(a, "--logprobs")) {
            p.logprobs = 1;
        } else if (!strcmp(a, "--no-speculative")) {
            p.speculative = 0;
        } else if ((!strcmp(a, "--session") || !strcmp(a, "--new-session")) && v) {
            if (p.session_id) {
                fprintf(stderr, "smollm3ctl generate: one of --session or --new-session, once\n");
                goto usage;
            }
            p.session_id = v; i++;
            p.create_session = !strcmp(a, "--new-session");
        } else if (!strcmp(a, "--system") && v) {
            p.system = v; i++;
        } else if (!strcmp(a, "--temp") && v && !parse_double(v, &d)) {
            p.has_temperature = 1; p.temperature = (float)d; i++;
        } else if (!strcmp(a, "--top-p") && v && !parse_double(v, &d)) {
            p.has_top_p = 1; p.top_p = (float)d; i++;
        } else if (!strcmp(a, "--top-k") && v && !parse_double(v, &d) && d == (int32_t)d) {
            p.has_top_k = 1; p.top_k = (int32_t)d; i++;
        } else if (!strcmp(a, "--seed") && v && !parse_u64(v, &u)) {
            p.has_seed = 1; p.seed = u; i++;
        } else if ((!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) && v && !parse_u64(v, &u) &&
                   u <= UINT32_MAX) {
            p.max_tokens = (uint32_t)u; i++;
        } else if (!strcmp(a, "--stop") && v && p.n_stops < MAX_STOPS) {
            stops[p.n_stops++] = v; i++;
        } else if (!strcmp(a, "--resume-tokens") && v) {
            /* the token ids of the answer so far, replayed by the daemon (GenerateRequest.resume_tokens) */
            const char *s = v;
            n_resume = 0;
            while (*s) {
                char *end;
                long t = strtol(s, &end, 10);
                if (end == s || t < 0 || t > INT32_MAX || n_resume == sizeof resume / sizeof *resume ||
                    (*end && *end != ',')) {
                    fprintf(stderr, "smollm3ctl generate: bad --resume-tokens: %s\n", v);
                    goto usage;
                }
                resume[n_resume++] = (int32_t)t;
                s = *end ? end + 1 : end;
            }
            i++;
        } else {
            fprintf(stderr, "smollm3ctl generate: bad option or value: %s%s%s\n", a,
                    v ? " " : "", v ? v : "");
            goto usage;
        }
    }
    if (!message) {
        fprintf(stderr, "smollm3ctl generate: MESSAGE is missing\n");
        goto usage;
    }
    p.user = message;
    if (!(c = connect_daemon(endpoint, timeout_ms, st.json))) {
        free(message);
        return 1;
    }
    st.tty = isatty(STDOUT_FILENO);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;          /* no SA_RESTART: the poll wakes up */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    Smollm3__GenerateRequest *gen = smol_client_chat_build(&p);
    gen->n_resume_tokens = n_resume;
    gen->resume_tokens = resume;
    enum smol_err r = smol_client_stream(c, gen,
                                         timeout_set ? timeout_ms : GENERATE_IDLE_DEFAULT_MS,
                                         CANCEL_WAIT_MS, &g_interrupted, on_event, &st, NULL, err);
    if (r == SMOL_OK) {
        rc = g_interrupted && st.cancelled ? EXIT_INTERRUPTED : 0;
    } else if (st.error_event) {
        if (!st.json) fprintf(stderr, "smollm3ctl: error %s\n", err);
        if (!st.json && r == SMOL_ENOSESSION && p.session_id && !p.create_session)
            fprintf(stderr, "smollm3ctl: session '%s' is not held by the daemon (never started, deleted, "
                    "or evicted): its history is gone; --new-session %s starts it anew\n", p.session_id,
                    p.session_id);
        rc = g_interrupted && r == SMOL_ECANCELLED ? EXIT_INTERRUPTED : 1;
    } else {
        if (st.json) jprint(jerror(smol_err_name(r), err));
        else fprintf(stderr, "smollm3ctl: generate: %s\n", err);
        rc = 1;
    }
    if (st.failed_output && rc == 0) rc = 1;
    smol_client_close(&c);
    free(message);
    return rc;
oom:
    fprintf(stderr, "smollm3ctl: out of memory\n");
    free(message);
    return 1;
usage:
    free(message);
    return EXIT_USAGE;
}

/* ---- one-shot commands -------------------------------------------------- */

/* Reports a failed call (error event or library error); returns 1. */
static int call_failed(const char *what, enum smol_err r, const char *err, int json)
{
    if (json) jprint(jerror(smol_err_name(r), err));
    else fprintf(stderr, "smollm3ctl: %s: %s\n", what, err);
    return 1;
}

static int cmd_health(struct smol_client *c, int timeout_ms, int json)
{
    Smollm3__Event *ev = NULL;
    char err[SMOL_ERRLEN];
    enum smol_err r = smol_client_health(c, timeout_ms, &ev, err);
    int rc;
    if (r || ev->kind_case != SMOLLM3__EVENT__KIND_HEALTH) {
        if (!r) snprintf(err, sizeof err, "unexpected reply kind %d", (int)ev->kind_case);
        rc = call_failed("health", r ? r : SMOL_EINTERNAL, err, json);
    } else {
        const Smollm3__HealthReply *h = ev->health;
        if (json)
            jprint(json_pack("{s:b, s:o, s:o, s:I, s:b}", "ready", (int)h->ready, "model", jstr(h->model),
                             "status", jstr(h->status), "protocol_version",
                             (json_int_t)h->protocol_version, "thinking_supported", (int)h->thinking_supported));
        else
            printf("ready: %s\nmodel: %s\nstatus: %s\nprotocol_version: %u\nthinking_supported: %s\n",
                   h->ready ? "yes" : "no", h->model, h->status, h->protocol_version,
                   h->thinking_supported ? "yes" : "no");
        rc = h->ready ? 0 : 1;
    }
    smol_client_event_free(&ev);
    return rc;
}

static int cmd_stats(struct smol_client *c, int timeout_ms, int json)
{
    Smollm3__Event *ev = NULL;
    char err[SMOL_ERRLEN];
    enum smol_err r = smol_client_stats(c, timeout_ms, &ev, err);
    if (r || ev->kind_case != SMOLLM3__EVENT__KIND_STATS) {
        if (!r) snprintf(err, sizeof err, "unexpected reply kind %d", (int)ev->kind_case);
        smol_client_event_free(&ev);
        return call_failed("stats", r ? r : SMOL_EINTERNAL, err, json);
    }
    const Smollm3__StatsReply *s = ev->stats;
    struct { const char *name; unsigned long long v; } rows[] = {
        { "requests_active", s->requests_active },
        { "requests_queued", s->requests_queued },
        { "sessions", s->sessions },
        { "kv_tokens_used", s->kv_tokens_used },
        { "kv_tokens_total", s->kv_tokens_total },
        { "requests_total", s->requests_total },
        { "prompt_tokens_total", s->prompt_tokens_total },
        { "cached_tokens_total", s->cached_tokens_total },
        { "generated_tokens_total", s->generated_tokens_total },
        { "prefix_cache_hits", s->prefix_cache_hits },
        { "requests_rejected", s->requests_rejected },
        { "requests_cancelled", s->requests_cancelled },
        { "context_length", s->context_length },
        { "kv_bytes_per_token", s->kv_bytes_per_token },
        { "kv_bytes_total", s->kv_bytes_total },
        { "kv_bytes_used", s->kv_bytes_used },
        { "spill_sessions_written", s->spill_sessions_written },
        { "spill_sessions_restored", s->spill_sessions_restored },
        { "spill_prefixes_written", s->spill_prefixes_written },
        { "spill_prefixes_restored", s->spill_prefixes_restored },
        { "spill_tokens_restored", s->spill_tokens_restored },
        { "spill_files_rejected", s->spill_files_rejected },
        { "spill_files", s->spill_files },
        { "spill_bytes", s->spill_bytes },
        { "prefill_tokens_total", s->prefill_tokens_total },
        { "shared_choices_total", s->shared_choices_total },
        { "spec_drafted_tokens", s->spec_drafted_tokens },
        { "spec_accepted_tokens", s->spec_accepted_tokens },
        { "spec_verify_steps", s->spec_verify_steps },
        { "decode_steps", s->decode_steps },
        { "grammar_cache_hits", s->grammar_cache_hits },
        { "grammar_compiles", s->grammar_compiles },
        { "grammar_tokens", s->grammar_tokens },
        { "grammar_forced_tokens", s->grammar_forced_tokens },
        { "prompt_builds_total", s->prompt_builds_total },
        { "backend_sampled_tokens", s->backend_sampled_tokens },
        { "engine_steps", s->engine_steps },
        { "step_tokens_total", s->step_tokens_total },
        { "host_pool_sampled_tokens", s->host_pool_sampled_tokens },
        { "prefill_steps", s->prefill_steps },
        { "mixed_steps", s->mixed_steps },
        { "preemptions_total", s->preemptions_total },
        { "spill_lease_refusals", s->spill_lease_refusals },
        { "spill_leases_lost", s->spill_leases_lost },
        { "spill_unleased_refused", s->spill_unleased_refused },
        { "sessions_stale_dropped", s->sessions_stale_dropped },
        { "spill_history_restored", s->spill_history_restored },
    };
    size_t n = sizeof rows / sizeof rows[0];
    if (json) {
        json_t *o = json_object();
        for (size_t i = 0; i < n; i++)
            json_object_set_new(o, rows[i].name, json_integer((json_int_t)rows[i].v));
        json_object_set_new(o, "uptime_s", json_real(s->uptime_s));
        json_object_set_new(o, "step_ms_total", json_real(s->step_ms_total));
        json_object_set_new(o, "forward_ms_total", json_real(s->forward_ms_total));
        json_object_set_new(o, "step_budget_ms", json_real(s->step_budget_ms));
        json_object_set_new(o, "step_row_ms", json_real(s->step_row_ms));
        json_object_set_new(o, "step_prompt_token_ms", json_real(s->step_prompt_token_ms));
        json_object_set_new(o, "spill_restore_ms_total", json_real(s->spill_restore_ms_total));
        json_object_set_new(o, "spill_write_ms_total", json_real(s->spill_write_ms_total));
        json_object_set_new(o, "kv_type", json_string(s->kv_type ? s->kv_type : ""));
        json_t *ts = json_array();     /* the fair shares, by tenant id */
        for (size_t i = 0; i < s->n_tenants; i++) {
            const Smollm3__TenantStats *t = s->tenants[i];
            json_array_append_new(ts, json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "tenant", t->tenant ? t->tenant : "",
                                                "queued", (json_int_t)t->queued, "running", (json_int_t)t->running,
                                                "preempted", (json_int_t)t->preempted, "preemptions_total",
                                                (json_int_t)t->preemptions_total, "kv_bytes", (json_int_t)t->kv_bytes,
                                                "tokens_served", (json_int_t)t->tokens_served));
        }
        json_object_set_new(o, "tenants", ts);
        jprint(o);
    } else {
        for (size_t i = 0; i < n; i++) printf("%-24s %llu\n", rows[i].name, rows[i].v);
        printf("%-24s %.1f\n", "uptime_s", s->uptime_s);
        printf("%-24s %.1f\n", "step_ms_total", s->step_ms_total);
        printf("%-24s %.1f\n", "forward_ms_total", s->forward_ms_total);
        printf("%-24s %.1f\n", "step_budget_ms", s->step_budget_ms);
        printf("%-24s %.3f\n", "step_row_ms", s->step_row_ms);
        printf("%-24s %.3f\n", "step_prompt_token_ms", s->step_prompt_token_ms);
        printf("%-24s %.1f\n", "spill_restore_ms_total", s->spill_restore_ms_total);
        printf("%-24s %.1f\n", "spill_write_ms_total", s->spill_write_ms_total);
        printf("%-24s %s\n", "kv_type", s->kv_type ? s->kv_type : "");
        if (s->n_tenants) printf("%-34s %6s %7s %9s %11s %12s %12s\n", "TENANT", "QUEUED", "RUNNING", "PREEMPTED",
                                 "PREEMPTIONS", "KV_BYTES", "TOKENS");
        for (size_t i = 0; i < s->n_tenants; i++) {
            const Smollm3__TenantStats *t = s->tenants[i];
            printf("%-34s %6u %7u %9u %11llu %12llu %12llu\n", t->tenant && *t->tenant ? t->tenant : "\"\"",
                   t->queued, t->running, t->preempted, (unsigned long long)t->preemptions_total,
                   (unsigned long long)t->kv_bytes, (unsigned long long)t->tokens_served);
        }
    }
    smol_client_event_free(&ev);
    return 0;
}

static json_t *session_json(const Smollm3__SessionInfo *s)
{
    return json_pack("{s:o, s:I, s:f, s:b, s:b, s:I}", "session_id", jstr(s->session_id),
                     "tokens", (json_int_t)s->tokens, "idle_s", s->idle_s, "busy", (int)s->busy,
                     "on_disk", (int)s->on_disk, "kv_bytes", (json_int_t)s->kv_bytes);
}

static void session_row(const Smollm3__SessionInfo *s)
{
    printf("%-32s %8u %9.1fs  %-4s  %" PRIu64 "\n", s->session_id, s->tokens, s->idle_s, s->busy ? "yes" : "no",
           (uint64_t)s->kv_bytes);
}

static int cmd_sessions(struct smol_client *c, const char *tenant, int timeout_ms, int json)
{
    Smollm3__Event *ev = NULL;
    char err[SMOL_ERRLEN];
    enum smol_err r = smol_client_session_list(c, tenant, timeout_ms, &ev, err);
    if (r || ev->kind_case != SMOLLM3__EVENT__KIND_SESSIONS) {
        if (!r) snprintf(err, sizeof err, "unexpected reply kind %d", (int)ev->kind_case);
        smol_client_event_free(&ev);
        return call_failed("sessions", r ? r : SMOL_EINTERNAL, err, json);
    }
    const Smollm3__SessionList *l = ev->sessions;
    if (json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < l->n_sessions; i++) json_array_append_new(arr, session_json(l->sessions[i]));
        jprint(json_pack("{s:o}", "sessions", arr));
    } else {
        printf("%-32s %8s %10s  %-4s  %s\n", "SESSION", "TOKENS", "IDLE", "BUSY", "KV_BYTES");
        for (size_t i = 0; i < l->n_sessions; i++) session_row(l->sessions[i]);
    }
    smol_client_event_free(&ev);
    return 0;
}

static int cmd_session(struct smol_client *c, const char *tenant, const char *id, int timeout_ms, int json)
{
    Smollm3__Event *ev = NULL;
    char err[SMOL_ERRLEN];
    enum smol_err r = smol_client_session_get(c, tenant, id, timeout_ms, &ev, err);
    if (r || ev->kind_case != SMOLLM3__EVENT__KIND_SESSION) {
        if (!r) snprintf(err, sizeof err, "unexpected reply kind %d", (int)ev->kind_case);
        smol_client_event_free(&ev);
        return call_failed("session", r ? r : SMOL_EINTERNAL, err, json);
    }
    if (json) {
        jprint(session_json(ev->session));
    } else {
        printf("%-32s %8s %10s  %-4s  %s\n", "SESSION", "TOKENS", "IDLE", "BUSY", "KV_BYTES");
        session_row(ev->session);
    }
    smol_client_event_free(&ev);
    return 0;
}

static int cmd_delete(struct smol_client *c, const char *tenant, const char *id, int timeout_ms, int json)
{
    Smollm3__Event *ev = NULL;
    char err[SMOL_ERRLEN];
    enum smol_err r = smol_client_session_delete(c, tenant, id, timeout_ms, &ev, err);
    int ok = !r && ev->kind_case == SMOLLM3__EVENT__KIND_ACK;
    if (!ok && !r) snprintf(err, sizeof err, "unexpected reply kind %d", (int)ev->kind_case);
    smol_client_event_free(&ev);
    if (!ok) return call_failed("delete", r ? r : SMOL_EINTERNAL, err, json);
    if (json) jprint(json_pack("{s:s, s:o}", "deleted", "session", "session_id", jstr(id)));
    else printf("deleted %s\n", id);
    return 0;
}

/* ---- main -------------------------------------------------------------- */

int main(int argc, char **argv)
{
    char endpoint[4096];
    const char *cmd = NULL, *tenant = NULL;
    char **rest = NULL;
    int nrest = 0, json = 0, timeout_set = 0, timeout_ms = 30000;
    char *args[argc > 0 ? argc : 1];
    const char *pos[2] = { NULL, NULL };
    int npos = 0;

    smol_client_default_endpoint(endpoint, sizeof endpoint);
    /* Global options (--connect, --timeout, --tenant, --json) may come before
     * or after the command; everything else stays in args[] for the command
     * (generate has many).  After generate's "--" everything is its message. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--connect") || !strcmp(a, "-c")) {
            if (i + 1 >= argc) goto usage;
            snprintf(endpoint, sizeof endpoint, "%s", argv[++i]);
        } else if (!strcmp(a, "--timeout")) {
            double t;
            if (i + 1 >= argc || parse_double(argv[i + 1], &t) || !(t > 0) || t > 86400 * 365) {
                fprintf(stderr, "smollm3ctl: --timeout needs a positive number of seconds\n");
                return EXIT_USAGE;
            }
            timeout_ms = (int)(t * 1000 + 0.5);
            if (timeout_ms < 1) timeout_ms = 1;
            timeout_set = 1;
            i++;
        } else if (!strcmp(a, "--tenant")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "smollm3ctl: --tenant needs an ID\n");
                return EXIT_USAGE;
            }
            tenant = argv[++i];
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!cmd) {
            if (a[0] == '-') {
                fprintf(stderr, "smollm3ctl: unknown option %s\n", a);
                goto usage;
            }
            cmd = a;
            rest = args;
        } else if (!strcmp(a, "--")) {
            for (; i < argc; i++) args[nrest++] = argv[i];   /* keep "--" for generate */
        } else {
            args[nrest++] = (char *)a;
        }
    }
    if (!cmd) goto usage;
    if (!strcmp(cmd, "curve-keygen")) {     /* no daemon needed */
        char pub[41], sec[41];
        if (nrest != 1 || rest[0][0] == '-') goto usage;
        int fd = open(rest[0], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 || zmq_curve_keypair(pub, sec) || dprintf(fd, "%s\n", sec) != 41 || close(fd)) {
            fprintf(stderr, "smollm3ctl curve-keygen %s: %s\n", rest[0], fd < 0 ? strerror(errno) : "failed");
            return 1;
        }
        printf("%s\n", pub);
        return 0;
    }

    int is_generate = !strcmp(cmd, "generate");
    if (!is_generate) {
        for (int i = 0; i < nrest; i++) {
            if (rest[i][0] == '-' && rest[i][1]) {
                fprintf(stderr, "smollm3ctl %s: unknown option %s\n", cmd, rest[i]);
                goto usage;
            } else if (npos < 2) pos[npos++] = rest[i];
            else goto usage;
        }
        int want = (!strcmp(cmd, "delete") || !strcmp(cmd, "session")) ? 1 : 0;
        if (strcmp(cmd, "stats") && strcmp(cmd, "health") && strcmp(cmd, "sessions") && !want) {
            fprintf(stderr, "smollm3ctl: unknown command '%s'\n", cmd);
            goto usage;
        }
        if (npos != want) {
            fprintf(stderr, "smollm3ctl %s: expected %d argument(s)\n", cmd, want);
            goto usage;
        }
    }

    int rc;
    if (is_generate) {
        rc = cmd_generate(endpoint, tenant, nrest, rest, timeout_set, timeout_ms, json);
        if (rc == EXIT_USAGE) fprintf(stderr, "try 'smollm3ctl --help'\n");
        return rc;
    }
    struct smol_client *c = connect_daemon(endpoint, timeout_ms, json);
    if (!c) return 1;
    if (!strcmp(cmd, "stats")) rc = cmd_stats(c, timeout_ms, json);
    else if (!strcmp(cmd, "health")) rc = cmd_health(c, timeout_ms, json);
    else if (!strcmp(cmd, "sessions")) rc = cmd_sessions(c, tenant, timeout_ms, json);
    else if (!strcmp(cmd, "session")) rc = cmd_session(c, tenant, pos[0], timeout_ms, json);
    else rc = cmd_delete(c, tenant, pos[0], timeout_ms, json);
    smol_client_close(&c);
    return rc;
usage:
    if (cmd) fprintf(stderr, "try 'smollm3ctl --help'\n");
    else usage(stderr);
    return EXIT_USAGE;
}
