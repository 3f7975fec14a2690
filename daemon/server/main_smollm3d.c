/*
 * main_smollm3d.c - the smollm3d daemon: configuration, startup, signals,
 * systemd notifications, shutdown.  The RPC loop runs on this (main) thread
 * (daemon/server/rpc.c); the engine runs on its own thread (daemon/server/engine.c).
 *
 * Startup order (READY=1 only when the daemon can serve):
 *   config -> log -> load model (mmap) -> tokenizer -> warm-up forward ->
 *   bind the engine PAIR and the client ROUTER -> start the engine thread ->
 *   sd_notify READY=1.
 * Each phase is announced with STATUS=.  Any failure logs one line naming
 * what failed and exits 1 (2 for usage errors).
 *
 * Signals are blocked in every thread (masked before any thread exists) and
 * read from a signalfd polled by the RPC loop: no work runs in a handler.
 *   SIGTERM, SIGINT: STOPPING=1, drain (new requests refused with
 *     ERROR_SHUTTING_DOWN, in-flight ones get drain_grace_ms, then are
 *     cancelled; a gateway's resumable ones are handed over: at once, or
 *     make-before-break, generated on for handover_grace while the gateway
 *     moves them), wait for the engine's DRAINED (as soon as nothing runs),
 *     flush, STOP, exit 0.
 *     A second SIGTERM/SIGINT ends the wait at once (still exit 0).
 *   SIGHUP: reopen the log file.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>
#include <zmq.h>

#include "daemon/server/config.h"
#include "daemon/server/engine.h"
#include "daemon/server/grammar_cache.h"
#include "daemon/model/model.h"
#include "daemon/server/log.h"
#include "daemon/server/responses_store.h"
#include "daemon/server/rpc.h"
#include "daemon/server/curve.h"
#include "daemon/server/spill.h"
#include "daemon/text/text.h"

#define ENGINE_ENDPOINT "inproc://smollm3d-engine"
#define SMOLLM3D_VERSION "0.1"

/* The model has a thinking mode: SmolLM3's chat template and its <think> </think> tokens. */
static int has_thinking(struct smol_model *m, struct smol_tokenizer *tok)
{
    struct smol_gguf_str tpl = {0};
    enum smol_chat_tpl kind;
    const struct smol_special_ids *sp = smol_tokenizer_special(tok);
    return smol_gguf_get_str(m->gguf, "tokenizer.chat_template", &tpl, 0, NULL) == SMOL_OK && tpl.ptr &&
           smol_chat_tpl_detect(tpl.ptr, tpl.len, 0, &kind, NULL) == SMOL_OK && kind == SMOL_CHAT_TPL_SMOLLM3 &&
           sp->think >= 0 && sp->think_end >= 0;
}

struct sigctx {
    int fd;
    int terms;              /* SIGTERM/SIGINT seen */
    struct smol_curve *curve;   /* SIGHUP reads its clients file again */
};

static void on_signal(struct smol_rpc *rpc, void *user)
{
    struct sigctx *sc = user;
    struct signalfd_siginfo si;
    while (read(sc->fd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGHUP) {
            char err[SMOL_ERRLEN];
            if (smol_log_reopen(err)) smol_log_err("%s", err);
            else smol_log_info("SIGHUP: log reopened");
            smol_curve_reload(sc->curve);
            continue;
        }
        if (sc->terms++ == 0) {
            smol_log_notice("%s: draining", strsignal((int)si.ssi_signo));
            sd_notify(0, "STOPPING=1\nSTATUS=draining: finishing in-flight requests");
            smol_rpc_drain(rpc);
        } else {
            smol_log_notice("%s again: stopping now", strsignal((int)si.ssi_signo));
            smol_rpc_quit(rpc);
        }
    }
}

/* The model id clients name: a stable slug of the file name, extension
 * dropped ("build/models/SmolLM3-3B-Q4_K_M.gguf" -> "SmolLM3-3B-Q4_K_M"),
 * bytes other than [A-Za-z0-9._-] as '-'; not general.name, which is free
 * text.  The gateway's --model-name overrides it for HTTP clients. */
static void model_name(const char *path, char *out, size_t cap)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    if (n > 5 && !strcmp(b + n - 5, ".gguf")) n -= 5;
    if (n >= cap) n = cap - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)b[i];
        out[i] = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
                 c == '_' || c == '-' ? (char)c : '-';
    }
    out[n] = 0;
    if (!n) snprintf(out, cap, "model");
}

int main(int argc, char **argv)
{
    struct smol_daemon_config cfg;
    enum smol_config_action action;
    char err[SMOL_ERRLEN];
    int rc = 1;

    smol_log_init("smollm3d", SMOL_LOG_INFO);
    if (smol_config_parse_args(&cfg, argc, argv, &action, err)) {
        smol_log_err("%s", err);
        return 2;
    }
    switch (action) {
    case SMOL_CONFIG_HELP: smol_config_usage(stdout, "smollm3d"); return 0;
    case SMOL_CONFIG_VERSION: printf("smollm3d %s (protocol %d)\n", SMOLLM3D_VERSION, SMOL_PROTOCOL_VERSION); return 0;
    case SMOL_CONFIG_PRINT_DEFAULT: smol_config_write_default(stdout); return 0;
    case SMOL_CONFIG_PRINT: smol_config_write(stdout, &cfg); return 0;
    case SMOL_CONFIG_RUN: break;
    }
    smol_log_set_level(cfg.log_level);
    if (cfg.log_file[0] && smol_log_open_file(cfg.log_file, err)) {
        smol_log_err("%s", err);
        return 1;
    }
    if (!cfg.listen[0]) smol_config_default_listen(cfg.listen, sizeof cfg.listen);

    /* signals: blocked before any thread exists, so every thread inherits the mask */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct sigctx sc = {.fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)};
    if (sc.fd < 0) {
        smol_log_err("signalfd: %s", strerror(errno));
        return 1;
    }

    struct smol_model *m = NULL;
    struct smol_tokenizer *tok = NULL;
    struct smol_rpc *rpc = NULL;
    struct smol_engine *eng = NULL;
    struct smol_spill *spill = NULL;
    struct smol_rstore *rstore = NULL;   /* stored Responses: the RPC thread's */
    struct smol_grammar_cache *grammars = NULL;
    void *zctx = NULL;
    char name[256];

    sd_notifyf(0, "STATUS=loading model %s", cfg.model);
    smol_log_info("loading model %s", cfg.model);
    struct smol_model_settings ms;
    smol_model_settings_default(&ms);
    ms.n_threads = cfg.threads;
    ms.n_ctx = cfg.ctx;
    /* "auto" sizes (config.h): the CPU's here, the GPU's applied by the model once it made one */
    ms.max_tokens = cfg.step_tokens >= 0 ? cfg.step_tokens : SMOL_AUTO_STEP_CPU;
    ms.max_tokens_gpu = cfg.step_tokens >= 0 ? 0 : SMOL_AUTO_STEP_GPU;
    ms.kv_type = smol_config_kv_type(&cfg);
    ms.kv_budget = (size_t)(cfg.kv_budget_mb >= 0 ? cfg.kv_budget_mb : SMOL_AUTO_KV_MB_CPU) << 20;
    ms.kv_budget_gpu = cfg.kv_budget_mb >= 0 ? 0 : (size_t)SMOL_AUTO_KV_MB_GPU << 20;
    ms.yarn = cfg.yarn;
    ms.backend = cfg.backend;
    ms.cuda_device = cfg.cuda_device;
    if (smol_cuda_opts_set(&ms.cuda, "cuda_matvec", cfg.cuda_matvec, err)) { smol_log_err("%s", err); goto out; }
    ms.cuda.fuse = cfg.cuda_fuse;
    ms.cuda.graphs = cfg.cuda_graphs;
    if (smol_cuda_opts_set(&ms.cuda, "cuda_gemm", cfg.cuda_gemm, err)) { smol_log_err("%s", err); goto out; }
    if (smol_cuda_opts_set(&ms.cuda, "cuda_attn", cfg.cuda_attn, err)) { smol_log_err("%s", err); goto out; }
    ms.cuda.gemm_fuse = cfg.cuda_gemm_fuse;
    ms.quiet = 1;
    if (smol_model_open(&m, cfg.model, &ms, err)) { smol_log_err("model %s: %s", cfg.model, err); goto out; }
    if (smol_tokenizer_new(&tok, m->gguf, err)) { smol_log_err("tokenizer: %s", err); goto out; }
    if (smol_grammar_cache_new(&grammars, tok, 0, err)) { smol_log_err("grammar vocabulary: %s", err); goto out; }
    model_name(cfg.model, name, sizeof name);
    const int gpu = !strncmp(m->be->name, "cuda", 4);
    const int max_running = cfg.max_running >= 0 ? cfg.max_running : gpu ? SMOL_AUTO_RUNNING_GPU : SMOL_AUTO_RUNNING_CPU;
    const int step_tokens = cfg.step_tokens >= 0 ? cfg.step_tokens : gpu ? SMOL_AUTO_STEP_GPU : SMOL_AUTO_STEP_CPU;
    const size_t kv_bytes = 2 * m->kv.layer_bytes * (size_t)m->kv.n_layers;
    smol_log_info("model \"%s\": %d layers, dim %d, vocab %d, context %d, KV budget %zu MiB (%s, %zu bytes/token, "
                  "%d tokens)", name, m->cfg.n_layers, m->cfg.dim, m->cfg.vocab, m->cfg.n_ctx, kv_bytes >> 20,
                  smol_config_kv_type(&cfg),
                  smol_kv_bytes_per_token(m->kv.n_layers, m->kv.n_kv_heads, m->kv.head_dim, m->kv.type),
                  m->kv.n_pages * SMOL_KV_PAGE);
    char knobs[128] = "";
    if (!strncmp(m->be->name, "cuda", 4)) smol_cuda_opts_describe(&m->cuda, knobs, sizeof knobs);
    smol_log_info("backend %s x%d%s%s", m->be->name, m->be->n_threads, knobs[0] ? ", " : "", knobs);

    if (cfg.kv_spill_dir[0] &&
        smol_spill_open_shared(&spill, cfg.kv_spill_dir, (uint64_t)cfg.kv_spill_budget_mb << 20, cfg.kv_spill_shared,
                               m, err)) {
        smol_log_err("%s", err);
        goto out;
    }

    /* stored Responses beside the sessions' files (shared with them), else in memory */
    if (smol_rstore_new(&rstore, cfg.kv_spill_dir, (uint64_t)cfg.responses_store_mb << 20, cfg.responses_ttl, err) ||
        smol_rstore_start(rstore, err)) {
        smol_log_err("%s", err);
        goto out;
    }

    sd_notify(0, "STATUS=warming up");
    if (smol_engine_warmup(m, err)) { smol_log_err("warm-up failed: %s", err); goto out; }

    sd_notifyf(0, "STATUS=binding %s", cfg.listen);
    uint64_t wd_usec = 0;
    if (sd_watchdog_enabled(0, &wd_usec) <= 0) wd_usec = 0;
    int32_t n_vocab = smol_tokenizer_n_vocab(tok);
    if (m->cfg.vocab < n_vocab) n_vocab = m->cfg.vocab;
    struct smol_rpc_config rc_cfg = {
        .lim = {.max_request_bytes = (size_t)cfg.max_request_bytes, .n_vocab = n_vocab, .n_ctx = m->cfg.n_ctx,
                .grammars = grammars},
        .sndhwm = cfg.sndhwm,
        .rcvhwm = cfg.rcvhwm,
        .pause_frames = cfg.pause_frames,
        .heartbeat_ivl_ms = cfg.heartbeat_ivl_ms,
        .heartbeat_timeout_ms = cfg.heartbeat_timeout_ms,
        .socket_mode = cfg.socket_mode,
        .drain_grace_ms = (uint32_t)cfg.drain_grace_ms,
        .max_routes = 4 * (max_running + cfg.max_queued) + 1024,
        .watchdog_usec = wd_usec,
        .model_name = name,
        .thinking = has_thinking(m, tok),
        .rstore = rstore,
    };
    if (!(zctx = zmq_ctx_new())) { smol_log_err("zmq_ctx_new: %s", zmq_strerror(errno)); goto out; }
    if (!strncmp(cfg.listen, "tcp://", 6) && !cfg.curve_secret_key_file[0] && !cfg.allow_plain_tcp) {
        smol_log_err("listen %s: tcp:// needs CURVE (curve_secret_key_file, curve_clients_file) or "
                     "allow_plain_tcp = true", cfg.listen);
        goto out;
    }
    if (cfg.curve_secret_key_file[0] &&
        smol_curve_new(&sc.curve, zctx, cfg.curve_secret_key_file, cfg.curve_clients_file, err)) {
        smol_log_err("%s", err);
        goto out;
    }
    if (smol_rpc_new(&rpc, zctx, &rc_cfg, err) || smol_rpc_bind_engine(rpc, ENGINE_ENDPOINT, err) ||
        (sc.curve && smol_rpc_secure(rpc, sc.curve, err)) || smol_rpc_bind(rpc, cfg.listen, err)) {
        smol_log_err("%s", err);
        goto out;
    }
    if (sc.curve) smol_log_notice("CURVE on %s: the daemon's public key is %s", cfg.listen, smol_curve_public(sc.curve));

    struct smol_engine_config ec;
    smol_engine_config_default(&ec);
    ec.max_running = max_running;
    ec.max_queued = cfg.max_queued;
    ec.fair_share = cfg.fair_share;
    ec.step_tokens = step_tokens;
    ec.step_budget_ms = cfg.step_budget_ms >= 0 ? cfg.step_budget_ms : gpu ? SMOL_AUTO_BUDGET_MS_GPU : SMOL_AUTO_BUDGET_MS_CPU;
    ec.default_max_tokens = cfg.default_max_tokens;
    ec.default_thinking_budget = cfg.default_thinking_budget;
    ec.max_sessions = cfg.max_sessions;
    ec.max_sessions_per_key = cfg.max_sessions_per_key;
    ec.session_ttl_s = cfg.session_ttl;
    ec.spill_ttl_s = cfg.kv_spill_ttl;
    ec.max_cached_prefixes = cfg.max_cached_prefixes;
    ec.queue_timeout_s = cfg.queue_timeout;
    ec.model_name = name;
    ec.spill = spill;
    ec.grammars = grammars;
    ec.spill_when_idle = cfg.kv_spill_when_idle;
    ec.speculative = cfg.speculative;
    ec.speculative_calibrate = cfg.speculative_calibrate;
    ec.handover_grace_s = cfg.handover_grace;
    /* auto: on where the backend samples on its own device (cuda: 4 bytes a row instead of the
     * row's logits; 64 streams 8x faster, kernels/cuda/NOTES.md run 3); the CPU's own twin saves
     * nothing, so the host sampler stays there */
    ec.backend_sampling = cfg.backend_sampling >= 0 ? cfg.backend_sampling : !strncmp(m->be->name, "cuda", 4);
    if (smol_engine_start(&eng, zctx, ENGINE_ENDPOINT, m, tok, &ec, err)) {
        smol_log_err("engine: %s", err);
        goto out;
    }
    smol_rpc_set_ready(rpc, 1);
    sd_notifyf(0, "READY=1\nSTATUS=serving %s on %s", name, cfg.listen);
    smol_log_notice("serving %s on %s (max_running %d, step_tokens %d, step_budget_ms %g, max_queued %d%s)", name,
                    cfg.listen, max_running, step_tokens, ec.step_budget_ms, cfg.max_queued, wd_usec ? ", watchdog on" : "");

    smol_rpc_run(rpc, sc.fd, on_signal, &sc);

    sd_notify(0, "STATUS=stopping");
    smol_log_info("stopping the engine");
    rc = 0;
out:
    smol_engine_stop(&eng);     /* STOP + join, before the sockets and the model go */
    smol_spill_close(&spill);   /* after the engine: it writes there until it stops */
    smol_rpc_free(&rpc);
    smol_rstore_free(&rstore);
    smol_curve_free(&sc.curve);
    smol_grammar_cache_free(&grammars);  /* after the engine: requests hold entries */
    if (zctx) zmq_ctx_term(zctx);
    smol_tokenizer_free(&tok);
    smol_model_close(&m);
    close(sc.fd);
    if (rc == 0) smol_log_notice("stopped");
    smol_log_close();
    return rc;
}
