/*
 * config.h - smollm3d's configuration: one table of options (name, type,
 * default, help), read from an INI file (libinih, section [smollm3d]) and
 * from command-line flags of the same names; flags override the file.
 *
 * Keys and flags: "kv_budget_mb", "kv-budget-mb" and "--kv-budget-mb" name
 * the same option.  Flags take "--name VALUE" or "--name=VALUE"; a boolean
 * flag alone ("--kv-f32") means true.  Booleans accept 1/0, true/false,
 * yes/no, on/off.  Unknown keys, sections other than [smollm3d], and values
 * out of range are errors naming the file line or flag (Redis config.c: a
 * typo in a config file must not be silently ignored).
 *
 * The table is the one source: the usage text, deploy/smollm3d.conf
 * (`smollm3d --print-default-config`, checked byte for byte by
 * tests/test_config.c) and the parsers are all generated from it.
 *
 * inih is built with lines of at most 200 bytes: keep values (paths) shorter.
 */
#ifndef SMOL_CONFIG_H
#define SMOL_CONFIG_H

#include <stddef.h>
#include <stdio.h>
#include "daemon/model/error.h"

#define SMOL_CONFIG_PATH_MAX 1024

struct smol_daemon_config {
    char model[SMOL_CONFIG_PATH_MAX];    /* GGUF path; required */
    char listen[SMOL_CONFIG_PATH_MAX];   /* ZeroMQ endpoint; "" = runtime-dir default */
    char log_file[SMOL_CONFIG_PATH_MAX]; /* "" = stderr */
    char curve_secret_key_file[SMOL_CONFIG_PATH_MAX]; /* the daemon's CURVE secret key (curve.h); "" = none */
    char curve_clients_file[SMOL_CONFIG_PATH_MAX];    /* the client keys it allows */
    int allow_plain_tcp;        /* bool: listen on tcp:// without CURVE */
    int log_level;              /* enum smol_log_level */
    int threads;                /* compute threads; 0 = all CPUs */
    int ctx;                    /* context cap, tokens; 0 = the model's */
    int kv_budget_mb;           /* KV pool, MiB, allocated up front; 0 = one full-context sequence;
                                   -1 = auto (smol_config_sizes) */
    char kv_type[8];            /* "f32" | "f16" | "q8_0" (checked when set) */
    int kv_f32;                 /* bool: alias of kv_type = f32 (see smol_config_kv_type) */
    int yarn;                   /* bool: YaRN rope scaling */
    char kv_spill_dir[SMOL_CONFIG_PATH_MAX]; /* session KV files; "" = none */
    int kv_spill_budget_mb;     /* disk budget of kv_spill_dir; 0 = no limit */
    int kv_spill_when_idle;     /* bool: write changed sessions whenever the engine is idle */
    int kv_spill_shared;        /* bool: kv_spill_dir is shared by several nodes (spill.h) */
    int kv_spill_ttl;           /* seconds a spill file nobody uses is kept; 0 = session_ttl */
    int responses_store_mb;     /* stored Responses per tenant (responses_store.h), MiB; 0 = no limit */
    int responses_ttl;          /* seconds a stored Response is kept; 0 = no limit */
    char backend[SMOL_CONFIG_PATH_MAX]; /* "auto" | "cpu" | "cuda" */
    int cuda_device;            /* CUDA device index */
    char cuda_matvec[8];        /* "f32" | "q8" (checked when set): the CUDA decode mat-vec */
    int cuda_fuse;              /* bool: the CUDA backend's fused steps */
    int cuda_graphs;            /* bool: the CUDA decode step as a CUDA graph */
    char cuda_gemm[8];          /* "tiled" | "mma" (checked when set): CUDA mat-muls of > 8 tokens */
    char cuda_attn[8];          /* "paged" | "tiled" (checked when set): the CUDA attention kernels */
    int cuda_gemm_fuse;         /* bool: the CUDA GEMM in one launch a mat-mul (struct smol_cuda_opts) */
    int speculative;            /* longest prompt-lookup draft per step; 0 = off by default */
    int speculative_calibrate;  /* bool: measure the verify costs at start */
    int backend_sampling;       /* plain rows sampled by the backend (engine.h): 1, 0, or -1 = auto
                                   (on for the cuda backend, off for the cpu one) */
    int step_tokens;            /* tokens per engine step (decode + prefill chunks); -1 = auto */
    int step_budget_ms;         /* a step's target time, ms (engine.h); 0 = off; -1 = auto */
    int max_running;            /* requests decoding together; -1 = auto */
    int fair_share;             /* bool: fair order between tenants and tiers (engine.h) */
    int max_queued;             /* admission queue length */
    int default_max_tokens;     /* generation cap when a request gives none */
    int default_thinking_budget; /* thinking tokens before a forced </think>; 0 = unlimited */
    int max_sessions;           /* sessions kept */
    int max_sessions_per_key;   /* sessions one tenant keeps; 0 = no cap of its own */
    int session_ttl;            /* seconds an idle session is kept */
    int max_cached_prefixes;    /* anonymous finished sequences kept for prefix reuse */
    int queue_timeout;          /* seconds a request may wait for KV before ERROR_BUSY */
    int max_request_bytes;      /* cap on a Request frame */
    int drain_grace_ms;         /* SIGTERM: time in-flight requests get to finish */
    int handover_grace;         /* SIGTERM: seconds a request handed over make-before-break is
                                   generated on while its client moves it; 0 = given back at once */
    int socket_mode;            /* ipc socket file permissions (octal in files/flags) */
    int sndhwm;                 /* ZeroMQ send high-water mark per client, messages */
    int rcvhwm;                 /* ZeroMQ receive high-water mark per client, messages */
    int pause_frames;           /* per-request queued events before the engine pauses it */
    int heartbeat_ivl_ms;       /* ZeroMQ heartbeat interval; 0 = off */
    int heartbeat_timeout_ms;   /* peer silent this long = gone */
};

enum smol_opt_type {
    SMOL_OPT_STR, SMOL_OPT_INT, SMOL_OPT_BOOL, SMOL_OPT_AUTO_BOOL /* "auto" = -1, or a boolean */,
    SMOL_OPT_AUTO_INT /* "auto" = -1, or an INT in range */, SMOL_OPT_MODE, SMOL_OPT_LEVEL, SMOL_OPT_KVTYPE,
    SMOL_OPT_MATVEC,            /* a CUDA knob's word, char[8], checked by smol_cuda_opts_set under the
                                   option's name: cuda_matvec "f32" | "q8", cuda_gemm "tiled" | "mma",
                                   cuda_attn "paged" | "tiled" */
};

struct smol_option {
    const char *name;           /* key with '_' (the flag uses '-') */
    enum smol_opt_type type;
    size_t offset;              /* into struct smol_daemon_config */
    long min, max;              /* INT range (inclusive) */
    const char *def;            /* default, as written in the conf file */
    const char *help;           /* one line */
};

/* The table; *n receives its length. */
const struct smol_option *smol_config_options(size_t *n);

/* Sets every option to its default. */
void smol_config_defaults(struct smol_daemon_config *c);

/* Sets option name ('_' or '-' spelling) from text.  SMOL_EINVAL naming the
 * option (unknown, bad value, out of range), SMOL_ETOOLARGE for a string too long. */
enum smol_err smol_config_set(struct smol_daemon_config *c, const char *name, const char *value, char *err);

/* Reads an INI file.  SMOL_EIO if it cannot be opened, SMOL_EINVAL naming
 * path:line and the problem. */
enum smol_err smol_config_load_file(struct smol_daemon_config *c, const char *path, char *err);
/* Same from a string (tests). */
enum smol_err smol_config_load_string(struct smol_daemon_config *c, const char *text, char *err);

enum smol_config_action {
    SMOL_CONFIG_RUN = 0,
    SMOL_CONFIG_HELP,                   /* --help */
    SMOL_CONFIG_PRINT_DEFAULT,          /* --print-default-config */
    SMOL_CONFIG_PRINT,                  /* --print-config: effective values, then exit */
    SMOL_CONFIG_VERSION,                /* --version */
};

/* Defaults, then --config FILE (if given), then the other flags.  Checks
 * that model is set when the action is RUN. */
enum smol_err smol_config_parse_args(struct smol_daemon_config *c, int argc, char **argv,
                                     enum smol_config_action *action, char *err);

/* The KV type in effect: kv_type, or "f32" when the older kv_f32 is true
 * and kv_type is left at f16; kv_f32 with kv_type q8_0 is a conflict
 * (smol_config_parse_args refuses it). */
const char *smol_config_kv_type(const struct smol_daemon_config *c);

/* The sizes "auto" stands for, per backend: a CPU serves a few streams from RAM, a GPU many.
 *   max_running  16 on the CPU, 256 on CUDA
 *   step_tokens  256 on the CPU, 1024 on CUDA (prefill chunks of ~1K tokens: a 4K prompt in 4 steps
 *                while decode rows wait <= ~60 ms a step on an H100-class card)
 *   step_budget_ms 500 on the CPU (a 3B decodes a row in ~0.3 s there: a step of a few dozen prompt
 *                tokens beside it), 60 on CUDA (streams near llama.cpp's pace while a 4K prompt is read)
 *   kv_budget_mb 1024 on the CPU; on CUDA 16384, halved at start while the pool and 1 GiB beside
 *                it do not fit on the device (model.h: kv_budget_gpu), never below 1024
 * An explicit value means exactly that on either backend. */
enum { SMOL_AUTO_RUNNING_CPU = 16, SMOL_AUTO_RUNNING_GPU = 256, SMOL_AUTO_STEP_CPU = 256, SMOL_AUTO_STEP_GPU = 1024,
       SMOL_AUTO_BUDGET_MS_CPU = 500, SMOL_AUTO_BUDGET_MS_GPU = 60,
       SMOL_AUTO_KV_MB_CPU = 1024, SMOL_AUTO_KV_MB_GPU = 16384 };

/* ipc://$RUNTIME_DIRECTORY/smollm3d.sock, else ipc://$XDG_RUNTIME_DIR/...,
 * else ipc:///run/smollm3d/smollm3d.sock.  ($RUNTIME_DIRECTORY may list
 * several directories separated by ':'; the first is used.) */
void smol_config_default_listen(char *out, size_t cap);

/* The documented default conf file (deploy/smollm3d.conf). */
void smol_config_write_default(FILE *f);
/* The effective configuration as an INI file. */
void smol_config_write(FILE *f, const struct smol_daemon_config *c);
/* Usage text for --help. */
void smol_config_usage(FILE *f, const char *prog);

#endif
