/*
 * config.c - the option table and its parsers (see config.h).
 *
 * Every option lives in `options[]` below, once.  Defaults are kept as the
 * text the conf file shows and go through the same setter as user input, so
 * the documented default and the effective one cannot drift apart.
 */
#include "daemon/server/config.h"

#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/model/model.h"
#include "daemon/server/log.h"

#define OFF(f) offsetof(struct smol_daemon_config, f)

/* ================================================================ table */

static const struct smol_option options[] = {
    {"model", SMOL_OPT_STR, OFF(model), 0, 0, "",
     "GGUF model file, loaded once and mmapped (required)"},
    {"listen", SMOL_OPT_STR, OFF(listen), 0, 0, "",
     "ZeroMQ endpoint to bind; empty = ipc://$RUNTIME_DIRECTORY/smollm3d.sock"},
    {"socket_mode", SMOL_OPT_MODE, OFF(socket_mode), 0, 0777, "0660",
     "permissions of the ipc:// socket file (octal)"},
    {"threads", SMOL_OPT_INT, OFF(threads), 0, 1024, "0",
     "compute threads; 0 = all CPUs"},
    {"ctx", SMOL_OPT_INT, OFF(ctx), 0, 1 << 24, "0",
     "context length cap in tokens; 0 = the model's"},
    {"kv_budget_mb", SMOL_OPT_AUTO_INT, OFF(kv_budget_mb), 0, 1 << 24, "auto",
     "KV cache memory in MiB, allocated at start; 0 = one full-context sequence; auto = 1024 on the CPU, on CUDA up to 16384 as fits"},
    {"kv_type", SMOL_OPT_KVTYPE, OFF(kv_type), 0, 0, "f16",
     "KV cache element type: f16, q8_0 (half the memory of f16, see daemon/README.md for its error) or f32"},
    {"kv_f32", SMOL_OPT_BOOL, OFF(kv_f32), 0, 1, "false",
     "alias of kv_type = f32 (kept for older configs)"},
    {"yarn", SMOL_OPT_BOOL, OFF(yarn), 0, 1, "false",
     "YaRN rope scaling (factor 2) to extend the context"},
    {"kv_spill_dir", SMOL_OPT_STR, OFF(kv_spill_dir), 0, 0, "",
     "directory for sessions' and cached prefixes' KV on disk; read back on a later turn or a matching prompt, also after a restart; empty = no spilling"},
    {"kv_spill_budget_mb", SMOL_OPT_INT, OFF(kv_spill_budget_mb), 0, 1 << 30, "8192",
     "disk space for kv_spill_dir in MiB, least recently used files removed beyond it; 0 = no limit"},
    {"kv_spill_when_idle", SMOL_OPT_BOOL, OFF(kv_spill_when_idle), 0, 1, "true",
     "write a session to kv_spill_dir after its turn, whenever no request runs (survives a crash); false = at eviction and drain only"},
    {"kv_spill_shared", SMOL_OPT_BOOL, OFF(kv_spill_shared), 0, 1, "false",
     "kv_spill_dir shared by several nodes (NFS, CephFS): turns written through, a session held by one node at a time, one not held here read from there (deploy/README.md)"},
    {"kv_spill_ttl", SMOL_OPT_INT, OFF(kv_spill_ttl), 0, INT_MAX, "0",
     "seconds a file in kv_spill_dir that no node writes or reads is kept (its mtime, by the file server's clock), its lock file with it; 0 = session_ttl, and never less"},
    {"responses_store_mb", SMOL_OPT_INT, OFF(responses_store_mb), 0, 1 << 20, "64",
     "stored Responses (the gateway's /v1/responses, store: true) per tenant, MiB, in kv_spill_dir/responses (else in memory); the oldest dropped first; 0 = no limit"},
    {"responses_ttl", SMOL_OPT_INT, OFF(responses_ttl), 0, INT_MAX, "2592000",
     "seconds a stored Response is kept (default 30 days); 0 = until dropped for room"},
    {"backend", SMOL_OPT_STR, OFF(backend), 0, 0, "auto",
     "compute backend: auto (CUDA when a usable GPU and the plugin are there, else CPU), cpu, cuda"},
    {"cuda_device", SMOL_OPT_INT, OFF(cuda_device), 0, 64, "0",
     "CUDA device index for the cuda / auto backends"},
    {"cuda_matvec", SMOL_OPT_MATVEC, OFF(cuda_matvec), 0, 0, "q8",
     "CUDA decode mat-vec: q8 (activations quantized once to q8, integer dots on repacked weights; 2.2x f32 on an H100), q8k (rows split among warps where few) or f32"},
    {"cuda_fuse", SMOL_OPT_BOOL, OFF(cuda_fuse), 0, 1, "true",
     "CUDA fused steps (norm + q/k/v, rope + KV store, mat-vec + residual, the FFN; needs q8); false = a kernel per op; layer = 4 a layer (not yet run on a device)"},
    {"cuda_graphs", SMOL_OPT_BOOL, OFF(cuda_graphs), 0, 1, "true",
     "CUDA decode steps (<= 8 tokens) recorded once per shape as CUDA graphs; false = launched from the host; bucket = also batched steps, padded to 2^k rows (not yet run on a device)"},
    {"cuda_gemm", SMOL_OPT_MATVEC, OFF(cuda_gemm), 0, 0, "mma",
     "CUDA mat-muls of > 8 tokens (batched decode, prefill): mma (quantized tiles, tensor cores), imma (int8 mma), lt (cuBLASLt, bf16 weights) or tiled (f16); imma, lt not yet run on a device"},
    {"cuda_gemm_fuse", SMOL_OPT_BOOL, OFF(cuda_gemm_fuse), 0, 1, "false",
     "CUDA mma / imma GEMM in one launch a mat-mul: activations converted in its loads, split-K summed by each tile's last block (not yet run on a device)"},
    {"cuda_attn", SMOL_OPT_MATVEC, OFF(cuda_attn), 0, 0, "prefill",
     "CUDA attention: prefill (tiled for prompts, paged for decode rows), tiled (query tiles share K/V tiles on tensor cores, split-K decode; head_dim 128) or paged (a block per query token)"},
    {"step_tokens", SMOL_OPT_AUTO_INT, OFF(step_tokens), 1, 65536, "auto",
     "tokens per engine step: one per running request plus prefill chunks; auto = 256 on the CPU, 1024 on CUDA"},
    {"step_budget_ms", SMOL_OPT_AUTO_INT, OFF(step_budget_ms), 0, 600000, "auto",
     "ms a step may take: prompt chunks beside running streams sized to it from the measured speed, so streams keep pace while a prompt is read; 0 = off; auto = 500 CPU, 60 CUDA"},
    {"speculative", SMOL_OPT_INT, OFF(speculative), 0, 7, "7",
     "speculative decoding by prompt lookup: longest draft (tokens copied from the context) verified per step; same output; 0 = off unless a request asks"},
    {"speculative_calibrate", SMOL_OPT_BOOL, OFF(speculative_calibrate), 0, 1, "true",
     "measure the cost of verifying drafts at start (seconds on a 3B); false = assume 1 + 0.06 per drafted token"},
    {"backend_sampling", SMOL_OPT_AUTO_BOOL, OFF(backend_sampling), 0, 1, "auto",
     "rows that need only temperature / top_p sampled by the backend (CUDA: on the device, 4 bytes a row instead of the logits); seeded draws differ from the host sampler's; auto = on for cuda only"},
    {"max_running", SMOL_OPT_AUTO_INT, OFF(max_running), 1, 4096, "auto",
     "requests decoding together (batch slots); auto = 16 on the CPU, 256 on CUDA"},
    {"fair_share", SMOL_OPT_BOOL, OFF(fair_share), 0, 1, "true",
     "admit by service tier, then the API key (tenant) least served, preempting one over its share of slots; false = first come first served"},
    {"max_queued", SMOL_OPT_INT, OFF(max_queued), 0, 1 << 20, "64",
     "admission queue; beyond it requests get ERROR_QUEUE_FULL"},
    {"default_max_tokens", SMOL_OPT_INT, OFF(default_max_tokens), 1, 1 << 24, "2048",
     "tokens generated when a request sets no max_tokens (capped by the context)"},
    {"default_thinking_budget", SMOL_OPT_INT, OFF(default_thinking_budget), 0, 1 << 24, "0",
     "thinking tokens before </think> is forced when a request sets no budget (0: unlimited)"},
    {"max_sessions", SMOL_OPT_INT, OFF(max_sessions), 0, 1 << 24, "1024",
     "sessions kept, all API keys (tenants) together; beyond it the least recently used idle session of the tenant holding the most is evicted"},
    {"max_sessions_per_key", SMOL_OPT_INT, OFF(max_sessions_per_key), 0, 1 << 24, "256",
     "sessions one API key (tenant) keeps; beyond it its own least recently used idle one is evicted; 0 = no cap of its own"},
    {"session_ttl", SMOL_OPT_INT, OFF(session_ttl), 1, INT_MAX, "3600",
     "seconds an idle session is kept"},
    {"max_cached_prefixes", SMOL_OPT_INT, OFF(max_cached_prefixes), 0, 1 << 20, "16",
     "finished requests without a session kept for prefix reuse (with kv_spill_dir, also written there on eviction and drain)"},
    {"queue_timeout", SMOL_OPT_INT, OFF(queue_timeout), 1, 86400, "30",
     "seconds a request may wait for KV memory before it gets ERROR_BUSY"},
    {"max_request_bytes", SMOL_OPT_INT, OFF(max_request_bytes), 1024, 1 << 30, "4194304",
     "largest Request frame accepted; larger ones get ERROR_TOO_LARGE"},
    {"drain_grace_ms", SMOL_OPT_INT, OFF(drain_grace_ms), 0, 3600000, "10000",
     "on SIGTERM, time in-flight requests get to finish before they are cancelled"},
    {"handover_grace", SMOL_OPT_INT, OFF(handover_grace), 0, 3600, "10",
     "on SIGTERM, seconds a gateway's resumable stream is generated on while the gateway warms another daemon up for it (make-before-break), then given back; 0 = given back at once"},
    {"sndhwm", SMOL_OPT_INT, OFF(sndhwm), 1, 1 << 24, "1000",
     "ZeroMQ send high-water mark per client (messages)"},
    {"rcvhwm", SMOL_OPT_INT, OFF(rcvhwm), 1, 1 << 24, "1000",
     "ZeroMQ receive high-water mark per client (messages)"},
    {"pause_frames", SMOL_OPT_INT, OFF(pause_frames), 1, 1 << 20, "256",
     "events queued for a slow client before its request is paused"},
    {"heartbeat_ivl_ms", SMOL_OPT_INT, OFF(heartbeat_ivl_ms), 0, 3600000, "5000",
     "ZeroMQ heartbeat interval; 0 = off"},
    {"heartbeat_timeout_ms", SMOL_OPT_INT, OFF(heartbeat_timeout_ms), 0, 3600000, "15000",
     "a client silent this long is considered gone and its requests cancelled"},
    {"curve_secret_key_file", SMOL_OPT_STR, OFF(curve_secret_key_file), 0, 0, "",
     "tcp:// with CURVE: the daemon's secret key (40 Z85 characters); its public key is logged at start"},
    {"curve_clients_file", SMOL_OPT_STR, OFF(curve_clients_file), 0, 0, "",
     "the CURVE clients allowed, one a line: PUBLIC_KEY gateway | PUBLIC_KEY tenant=NAME; read again on SIGHUP"},
    {"allow_plain_tcp", SMOL_OPT_BOOL, OFF(allow_plain_tcp), 0, 1, "false",
     "listen on tcp:// without CURVE (anyone who can connect may send requests for any tenant)"},
    {"log_file", SMOL_OPT_STR, OFF(log_file), 0, 0, "",
     "log to this file instead of stderr; reopened on SIGHUP"},
    {"log_level", SMOL_OPT_LEVEL, OFF(log_level), 0, 0, "info",
     "err, warning, notice, info or debug"},
};

const struct smol_option *smol_config_options(size_t *n)
{
    *n = sizeof options / sizeof options[0];
    return options;
}

/* ============================================================== setters */

/* Compares an option name with a user spelling where '-' == '_'. */
static int name_eq(const char *opt, const char *s)
{
    for (; *opt && *s; opt++, s++) {
        char c = *s == '-' ? '_' : *s;
        if (c != *opt) return 0;
    }
    return *opt == 0 && *s == 0;
}

static const struct smol_option *find_opt(const char *name)
{
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
        if (name_eq(options[i].name, name)) return &options[i];
    return NULL;
}

static int parse_bool(const char *v, int *out)
{
    static const char *const t[] = {"1", "true", "yes", "on"}, *const f[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(v, t[i])) { *out = 1; return 0; }
        if (!strcasecmp(v, f[i])) { *out = 0; return 0; }
    }
    return -1;
}

static enum smol_err set_opt(struct smol_daemon_config *c, const struct smol_option *o, const char *v, char *err)
{
    char *p = (char *)c + o->offset;
    int *ip = (int *)p;
    char *end;
    long x;
    switch (o->type) {
    case SMOL_OPT_STR:
        if (strlen(v) >= SMOL_CONFIG_PATH_MAX)
            return smol_errf(err, SMOL_ETOOLARGE, "%s: value longer than %d bytes", o->name, SMOL_CONFIG_PATH_MAX - 1);
        strcpy(p, v);
        return SMOL_OK;
    case SMOL_OPT_AUTO_INT:
        if (!strcmp(v, "auto")) { *ip = -1; return SMOL_OK; }
        /* fall through */
    case SMOL_OPT_INT:
    case SMOL_OPT_MODE:
        errno = 0;
        x = strtol(v, &end, o->type == SMOL_OPT_MODE ? 8 : 10);
        if (!*v || *end || errno)
            return smol_errf(err, SMOL_EINVAL, "%s: \"%.64s\" is not %s", o->name, v,
                             o->type == SMOL_OPT_MODE ? "an octal mode"
                             : o->type == SMOL_OPT_AUTO_INT ? "auto or an integer" : "an integer");
        if (x < o->min || x > o->max)
            return smol_errf(err, SMOL_EINVAL, "%s: %ld is out of range [%ld, %ld]", o->name, x, o->min, o->max);
        *ip = (int)x;
        return SMOL_OK;
    case SMOL_OPT_BOOL:
        /* the third values of two CUDA knobs (backend_cuda_loader.h) */
        if (!strcmp(o->name, "cuda_fuse") && !strcmp(v, "layer")) {
            *ip = SMOL_CUDA_FUSE_LAYER;
            return SMOL_OK;
        }
        if (!strcmp(o->name, "cuda_graphs") && !strcmp(v, "bucket")) {
            *ip = SMOL_CUDA_GRAPHS_BUCKET;
            return SMOL_OK;
        }
        if (parse_bool(v, ip))
            return smol_errf(err, SMOL_EINVAL, "%s: \"%.64s\" is not a boolean (true/false%s)", o->name, v,
                             !strcmp(o->name, "cuda_fuse") ? ", or layer" : !strcmp(o->name, "cuda_graphs") ? ", or bucket" : "");
        return SMOL_OK;
    case SMOL_OPT_AUTO_BOOL:
        if (!strcmp(v, "auto")) { *ip = -1; return SMOL_OK; }
        if (parse_bool(v, ip))
            return smol_errf(err, SMOL_EINVAL, "%s: \"%.64s\" is not auto, true or false", o->name, v);
        return SMOL_OK;
    case SMOL_OPT_KVTYPE: {
        uint32_t t;
        char why[SMOL_ERRLEN];
        if (smol_kv_type_parse(v, &t, why)) return smol_errf(err, SMOL_EINVAL, "%s: %s", o->name, why);
        snprintf(p, sizeof c->kv_type, "%s", v);
        return SMOL_OK;
    }
    case SMOL_OPT_MATVEC: {
        struct smol_cuda_opts co;
        char why[SMOL_ERRLEN];
        smol_cuda_opts_default(&co);
        if (smol_cuda_opts_set(&co, o->name, v, why)) return smol_errf(err, SMOL_EINVAL, "%s", why);
        _Static_assert(sizeof c->cuda_gemm == sizeof c->cuda_matvec && sizeof c->cuda_attn == sizeof c->cuda_matvec,
                       "SMOL_OPT_MATVEC knobs are char[8]");
        snprintf(p, sizeof c->cuda_matvec, "%s", v);  /* every knob of this type is a char[8] */
        return SMOL_OK;
    }
    case SMOL_OPT_LEVEL:
        if ((x = smol_log_level_parse(v)) < 0)
            return smol_errf(err, SMOL_EINVAL, "%s: \"%.64s\" is not err, warning, notice, info or debug", o->name, v);
        *ip = (int)x;
        return SMOL_OK;
    }
    return smol_errf(err, SMOL_EINTERNAL, "%s: bad option type", o->name);
}

enum smol_err smol_config_set(struct smol_daemon_config *c, const char *name, const char *value, char *err)
{
    const struct smol_option *o = find_opt(name);
    if (!o) return smol_errf(err, SMOL_EINVAL, "unknown option \"%.64s\"", name);
    return set_opt(c, o, value, err);
}

void smol_config_defaults(struct smol_daemon_config *c)
{
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
        SMOL_ASSERT(set_opt(c, &options[i], options[i].def, NULL) == SMOL_OK);
}

/* ================================================================= INI */

struct ini_ctx {
    struct smol_daemon_config *c;
    const char *path;
    enum smol_err e;
    char msg[SMOL_ERRLEN];      /* the first problem, without file and line */
};

static int conf_handler(void *user, const char *section, const char *name, const char *value)
{
    struct ini_ctx *x = user;
    if (x->e) return 0;
    if (strcmp(section, "smollm3d")) {
        x->e = smol_errf(x->msg, SMOL_EINVAL, "key \"%.64s\" outside section [smollm3d]%s%.64s%s", name,
                         *section ? " (in [" : "", section, *section ? "])" : "");
        return 0;
    }
    x->e = smol_config_set(x->c, name, value ? value : "", x->msg);
    return x->e == SMOL_OK;
}

static enum smol_err ini_result(struct ini_ctx *x, int rc, char *err)
{
    if (rc == -1) return smol_errf(err, SMOL_EIO, "cannot open config file %s: %s", x->path, strerror(errno));
    if (rc == -2) return smol_errf(err, SMOL_ENOMEM, "out of memory reading %s", x->path);
    if (rc > 0 && x->e) return smol_errf(err, x->e, "%s:%d: %s", x->path, rc, x->msg);
    if (rc > 0) return smol_errf(err, SMOL_EINVAL, "%s:%d: syntax error (expected key = value or [smollm3d])", x->path, rc);
    if (x->e) return smol_errf(err, x->e, "%s: %s", x->path, x->msg);
    return SMOL_OK;
}

enum smol_err smol_config_load_file(struct smol_daemon_config *c, const char *path, char *err)
{
    struct ini_ctx x = {c, path, SMOL_OK, ""};
    errno = 0;
    return ini_result(&x, ini_parse(path, conf_handler, &x), err);
}

enum smol_err smol_config_load_string(struct smol_daemon_config *c, const char *text, char *err)
{
    struct ini_ctx x = {c, "(string)", SMOL_OK, ""};
    return ini_result(&x, ini_parse_string(text, conf_handler, &x), err);
}

/* =============================================================== flags */

enum smol_err smol_config_parse_args(struct smol_daemon_config *c, int argc, char **argv,
                                     enum smol_config_action *action, char *err)
{
    enum smol_err e;
    const char *conf = NULL;
    smol_config_defaults(c);
    *action = SMOL_CONFIG_RUN;
    /* pass 1: --config and the actions, so flags can override the file */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--config")) {
            if (i + 1 >= argc) return smol_errf(err, SMOL_EINVAL, "--config needs a file");
            conf = argv[++i];
        } else if (!strncmp(a, "--config=", 9)) {
            conf = a + 9;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            *action = SMOL_CONFIG_HELP;
            return SMOL_OK;
        } else if (!strcmp(a, "--version")) {
            *action = SMOL_CONFIG_VERSION;
            return SMOL_OK;
        } else if (!strcmp(a, "--print-default-config")) {
            *action = SMOL_CONFIG_PRINT_DEFAULT;
            return SMOL_OK;
        } else if (!strcmp(a, "--print-config")) {
            *action = SMOL_CONFIG_PRINT;
        }
    }
    if (conf && (e = smol_config_load_file(c, conf, err))) return e;
    /* pass 2: every other flag */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--config")) { i++; continue; }
        if (!strncmp(a, "--config=", 9) || !strcmp(a, "--print-config")) continue;
        if (strncmp(a, "--", 2) || !a[2])
            return smol_errf(err, SMOL_EINVAL, "unexpected argument \"%.64s\" (see --help)", a);
        char name[64];
        const char *eq = strchr(a + 2, '='), *val;
        size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (nl >= sizeof name) return smol_errf(err, SMOL_EINVAL, "unknown flag %.80s", a);
        memcpy(name, a + 2, nl);
        name[nl] = 0;
        const struct smol_option *o = find_opt(name);
        if (!o && !strncmp(name, "no-", 3) && !eq) {    /* --no-kv-f32 */
            const struct smol_option *b = find_opt(name + 3);
            if (b && (b->type == SMOL_OPT_BOOL || b->type == SMOL_OPT_AUTO_BOOL)) { set_opt(c, b, "false", NULL); continue; }
        }
        if (!o) return smol_errf(err, SMOL_EINVAL, "unknown flag --%s (see --help)", name);
        if (eq) {
            val = eq + 1;
        } else if (o->type == SMOL_OPT_BOOL || o->type == SMOL_OPT_AUTO_BOOL) {
            val = "true";       /* a boolean flag alone; an explicit value needs --flag=value */
        } else {
            if (i + 1 >= argc) return smol_errf(err, SMOL_EINVAL, "--%s needs a value", name);
            val = argv[++i];
        }
        char e2[SMOL_ERRLEN];
        if ((e = set_opt(c, o, val, e2))) return smol_errf(err, e, "--%s", e2);
    }
    if (c->kv_f32 && strcmp(c->kv_type, "f16") && strcmp(c->kv_type, "f32"))
        return smol_errf(err, SMOL_EINVAL, "kv_f32 = true conflicts with kv_type = %s (kv_f32 is an alias of "
                         "kv_type = f32: set one of them)", c->kv_type);
    if (c->kv_spill_shared && !c->kv_spill_dir[0])
        return smol_errf(err, SMOL_EINVAL, "kv_spill_shared = true needs kv_spill_dir (the directory the nodes share)");
    if (*action == SMOL_CONFIG_RUN && !c->model[0])
        return smol_errf(err, SMOL_EINVAL, "no model: pass --model PATH (or model = PATH in the config file)");
    return SMOL_OK;
}

const char *smol_config_kv_type(const struct smol_daemon_config *c)
{
    return c->kv_f32 && !strcmp(c->kv_type, "f16") ? "f32" : c->kv_type;
}

void smol_config_default_listen(char *out, size_t cap)
{
    const char *d = getenv("RUNTIME_DIRECTORY");
    size_t n = 0;
    if (d && *d) {
        n = strcspn(d, ":");
    } else if ((d = getenv("XDG_RUNTIME_DIR")) && *d) {
        n = strlen(d);
    } else {
        d = "/run/smollm3d";
        n = strlen(d);
    }
    snprintf(out, cap, "ipc://%.*s/smollm3d.sock", (int)n, d);
}

/* =============================================================== output */

static void write_value(FILE *f, const struct smol_option *o, const struct smol_daemon_config *c)
{
    const char *p = (const char *)c + o->offset;
    int v = *(const int *)p;
    switch (o->type) {
    case SMOL_OPT_STR:
    case SMOL_OPT_KVTYPE:
    case SMOL_OPT_MATVEC: fputs(p, f); break;
    case SMOL_OPT_INT: fprintf(f, "%d", v); break;
    case SMOL_OPT_MODE: fprintf(f, "0%o", v); break;
    case SMOL_OPT_BOOL:
        fputs(v == SMOL_CUDA_FUSE_LAYER && !strcmp(o->name, "cuda_fuse")       ? "layer"
              : v == SMOL_CUDA_GRAPHS_BUCKET && !strcmp(o->name, "cuda_graphs") ? "bucket"
              : v                                                               ? "true"
                                                                                : "false",
              f);
        break;
    case SMOL_OPT_AUTO_BOOL: fputs(v < 0 ? "auto" : v ? "true" : "false", f); break;
    case SMOL_OPT_AUTO_INT:
        if (v < 0) fputs("auto", f);
        else fprintf(f, "%d", v);
        break;
    case SMOL_OPT_LEVEL: fputs(smol_log_level_name(v), f); break;
    }
}

void smol_config_write_default(FILE *f)
{
    fputs("# smollm3d.conf - configuration of the smollm3d inference daemon.\n"
          "#\n"
          "# Read with `smollm3d --config /etc/smollm3d/smollm3d.conf`.  Every option is\n"
          "# also a command-line flag of the same name (kv_budget_mb = --kv-budget-mb);\n"
          "# flags override this file.  Keys may be written with '_' or '-'.  Booleans:\n"
          "# true/false, yes/no, on/off, 1/0.  Comments start with '#' or ';'.\n"
          "# Unknown keys are errors.  Lines are limited to 200 bytes.\n"
          "#\n"
          "# Every option is listed below, commented out, with its default.  This file is\n"
          "# generated by `smollm3d --print-default-config`; tests/test_config.c checks\n"
          "# that it matches the option table exactly.\n"
          "\n"
          "[smollm3d]\n", f);
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
        fprintf(f, "\n# %s\n#%s =%s%s\n", options[i].help, options[i].name, options[i].def[0] ? " " : "",
                options[i].def);
}

void smol_config_write(FILE *f, const struct smol_daemon_config *c)
{
    fputs("[smollm3d]\n", f);
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++) {
        fprintf(f, "%s = ", options[i].name);
        write_value(f, &options[i], c);
        fputc('\n', f);
    }
}

void smol_config_usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s --model PATH [--listen ipc://PATH] [--kv-budget-mb N] [--threads N]\n"
            "       [--config FILE] [--OPTION VALUE ...]\n"
            "       %s --print-default-config | --print-config | --version | --help\n\n"
            "Serves SmolLM3 over ZeroMQ + protobuf (proto/smollm3.proto).  Options (file key\n"
            "= flag name with '_'; flags override the --config file):\n\n", prog, prog);
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++) {
        char flag[64];
        snprintf(flag, sizeof flag, "--%s", options[i].name);
        for (char *p = flag + 2; *p; p++)
            if (*p == '_') *p = '-';
        const char *arg = options[i].type == SMOL_OPT_BOOL ? "" : options[i].type == SMOL_OPT_AUTO_BOOL ? "[=W]"
                          : options[i].type == SMOL_OPT_STR ? " S"
                          : options[i].type == SMOL_OPT_KVTYPE ? " T" : options[i].type == SMOL_OPT_MATVEC ? " M"
                          : " N";
        char lhs[80];
        snprintf(lhs, sizeof lhs, "%s%s", flag, arg);
        fprintf(f, "  %-26s %s (default: %s)\n", lhs, options[i].help,
                options[i].def[0] ? options[i].def : "none");
    }
}
