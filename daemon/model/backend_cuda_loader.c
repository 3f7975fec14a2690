/*
 * backend_cuda_loader.c - dlopen of the CUDA backend plugin (see the header),
 * and the plugin's knobs (struct smol_cuda_opts) parsed from text.
 *
 * The knobs' defaults live in one place, cuda_opts_default below: each newer
 * path is flipped on there once a device run has shown it correct and faster
 * (kernels/cuda/NOTES.md).  The daemon's option table (daemon/server/config.c,
 * cuda_*) writes the same defaults as text for deploy/smollm3d.conf;
 * tests/test_config.c fails until both say the same.
 */
#include "daemon/model/backend_cuda_loader.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static const struct smol_cuda_plugin *plugins[2];  /* [0] the device plugin, [1] the emulator's; loaded once,
                                                     never unloaded (engine thread) */

/* ---- knobs ------------------------------------------------------------------------------ */

/* The defaults: the paths device runs have shown correct and fastest (kernels/cuda/NOTES.md). */
static const struct smol_cuda_opts cuda_opts_default = {  /* device run 1 of kernels/cuda/NOTES.md */
    .matvec = SMOL_CUDA_MATVEC_Q8,
    .fuse = 1,
    .graphs = 1,
    .gemm = SMOL_CUDA_GEMM_MMA,      /* device run 3: pp512 5.2x tiled, 64-sequence decode 6.1x */
    .attn = SMOL_CUDA_ATTN_PREFILL,  /* device run 3: tiled prefill 1.44x at 8K; paged decode */
};

void smol_cuda_opts_default(struct smol_cuda_opts *o) { *o = cuda_opts_default; }

static int parse_switch(const char *v, int *out)
{
    static const char *const on[] = {"on", "1", "true"}, *const off[] = {"off", "0", "false"};
    for (int i = 0; i < 3; i++) {
        if (!strcasecmp(v, on[i])) { *out = 1; return 0; }
        if (!strcasecmp(v, off[i])) { *out = 0; return 0; }
    }
    return -1;
}

enum smol_err smol_cuda_opts_set(struct smol_cuda_opts *o, const char *key, const char *val, char *err)
{
    if (!key || !val) return smol_errf(err, SMOL_EINVAL, "cuda: option name and value are required");
    if (!strcmp(key, "cuda_matvec")) {
        if (!strcmp(val, "f32")) o->matvec = SMOL_CUDA_MATVEC_F32;
        else if (!strcmp(val, "q8")) o->matvec = SMOL_CUDA_MATVEC_Q8;
        else if (!strcmp(val, "q8k")) o->matvec = SMOL_CUDA_MATVEC_Q8K;
        else return smol_errf(err, SMOL_EINVAL, "cuda_matvec must be f32, q8 or q8k (got '%.64s')", val);
        return SMOL_OK;
    }
    if (!strcmp(key, "cuda_attn")) {
        if (!strcmp(val, "paged")) o->attn = SMOL_CUDA_ATTN_PAGED;
        else if (!strcmp(val, "tiled")) o->attn = SMOL_CUDA_ATTN_TILED;
        else if (!strcmp(val, "prefill")) o->attn = SMOL_CUDA_ATTN_PREFILL;
        else return smol_errf(err, SMOL_EINVAL, "cuda_attn must be paged, tiled or prefill (got '%.64s')", val);
        return SMOL_OK;
    }
    if (!strcmp(key, "cuda_gemm")) {
        if (!strcmp(val, "tiled")) o->gemm = SMOL_CUDA_GEMM_TILED;
        else if (!strcmp(val, "mma")) o->gemm = SMOL_CUDA_GEMM_MMA;
        else if (!strcmp(val, "imma")) o->gemm = SMOL_CUDA_GEMM_IMMA;
        else if (!strcmp(val, "lt")) o->gemm = SMOL_CUDA_GEMM_LT;
        else return smol_errf(err, SMOL_EINVAL, "cuda_gemm must be tiled, mma, imma or lt (got '%.64s')", val);
        return SMOL_OK;
    }
    if (!strcmp(key, "cuda_fuse") && !strcmp(val, "layer")) {
        o->fuse = SMOL_CUDA_FUSE_LAYER;
        return SMOL_OK;
    }
    if (!strcmp(key, "cuda_graphs") && !strcmp(val, "bucket")) {
        o->graphs = SMOL_CUDA_GRAPHS_BUCKET;
        return SMOL_OK;
    }
    int *sw = !strcmp(key, "cuda_fuse") ? &o->fuse : !strcmp(key, "cuda_graphs") ? &o->graphs
            : !strcmp(key, "cuda_persistent") ? &o->persistent : !strcmp(key, "cuda_gemm_fuse") ? &o->gemm_fuse : NULL;
    if (!sw) return smol_errf(err, SMOL_EINVAL, "cuda: unknown option '%.64s'", key);
    if (parse_switch(val, sw))
        return smol_errf(err, SMOL_EINVAL, "%s must be on, off, 1, 0, true or false%s (got '%.64s')", key,
                         sw == &o->fuse ? ", or layer" : sw == &o->graphs ? ", or bucket" : "", val);
    return SMOL_OK;
}

enum smol_err smol_cuda_opts_from_env(struct smol_cuda_opts *o, char *err)
{
    static const char *const vars[][2] = {
        {"SMOL_CUDA_MATVEC", "cuda_matvec"}, {"SMOL_CUDA_FUSE", "cuda_fuse"}, {"SMOL_CUDA_GRAPHS", "cuda_graphs"},
        {"SMOL_CUDA_GEMM", "cuda_gemm"}, {"SMOL_CUDA_ATTN", "cuda_attn"}, {"SMOL_CUDA_PERSISTENT", "cuda_persistent"},
        {"SMOL_CUDA_GEMM_FUSE", "cuda_gemm_fuse"}};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i][0]);
        if (!v || !*v) continue;
        char why[SMOL_ERRLEN];
        if (smol_cuda_opts_set(o, vars[i][1], v, why)) return smol_errf(err, SMOL_EINVAL, "%s: %s", vars[i][0], why);
    }
    return SMOL_OK;
}

void smol_cuda_opts_describe(const struct smol_cuda_opts *o, char *buf, size_t cap)
{
    const int n = snprintf(buf, cap, "matvec=%s fuse=%s graphs=%s gemm=%s attn=%s",
             o->matvec == SMOL_CUDA_MATVEC_Q8K ? "q8k" : o->matvec == SMOL_CUDA_MATVEC_Q8 ? "q8" : "f32",
             o->fuse == SMOL_CUDA_FUSE_LAYER ? "layer" : o->fuse ? "on" : "off",
             o->graphs == SMOL_CUDA_GRAPHS_BUCKET ? "bucket" : o->graphs ? "on" : "off", o->gemm == SMOL_CUDA_GEMM_LT ? "lt" : o->gemm == SMOL_CUDA_GEMM_IMMA ? "imma" : o->gemm == SMOL_CUDA_GEMM_MMA ? "mma" : "tiled",
             o->attn == SMOL_CUDA_ATTN_TILED ? "tiled" : o->attn == SMOL_CUDA_ATTN_PREFILL ? "prefill" : "paged");
    const int n2 = o->persistent && n > 0 && (size_t)n < cap ? n + snprintf(buf + n, cap - n, " persistent=on") : n;
    if (o->gemm_fuse && n2 > 0 && (size_t)n2 < cap) snprintf(buf + n2, cap - n2, " gemm_fuse=on");
}

/* ---- plugin ----------------------------------------------------------------------------- */

static enum smol_err plugin_path(char *buf, size_t cap, int emu, char *err)
{
    const char *env = getenv(emu ? "SMOL_CUDA_EMU_PLUGIN" : "SMOL_CUDA_PLUGIN");
    if (env && *env) {
        if (strlen(env) >= cap) return smol_errf(err, SMOL_EINVAL, "cuda: %s path is too long", emu ? "SMOL_CUDA_EMU_PLUGIN" : "SMOL_CUDA_PLUGIN");
        strcpy(buf, env);
        return SMOL_OK;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return smol_errf(err, SMOL_EUNSUPPORTED, "cuda: cannot find the executable's directory");
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    if ((size_t)snprintf(buf, cap, "%s/../lib/%s", exe, emu ? SMOL_CUDA_EMU_PLUGIN_FILE : SMOL_CUDA_PLUGIN_FILE) >= cap)
        return smol_errf(err, SMOL_EINVAL, "cuda: plugin path is too long");
    return SMOL_OK;
}

static enum smol_err load(int emu, char *err)
{
    if (plugins[emu]) return SMOL_OK;
    char path[PATH_MAX + 64];
    enum smol_err e = plugin_path(path, sizeof path, emu, err);
    if (e) return e;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return smol_errf(err, SMOL_EUNSUPPORTED, "cuda%s: cannot load plugin: %s", emu ? "-emu" : "", dlerror());
    const struct smol_cuda_plugin *(*entry)(void);
    *(void **)&entry = dlsym(h, SMOL_CUDA_PLUGIN_ENTRY);
    if (!entry) {
        e = smol_errf(err, SMOL_EUNSUPPORTED, "cuda: %s has no symbol %s", path, SMOL_CUDA_PLUGIN_ENTRY);
        dlclose(h);
        return e;
    }
    const struct smol_cuda_plugin *p = entry();
    if (!p || p->abi != SMOL_CUDA_PLUGIN_ABI) {
        e = smol_errf(err, SMOL_EUNSUPPORTED, "cuda: %s has plugin ABI %d, this build wants %d", path,
                      p ? p->abi : -1, SMOL_CUDA_PLUGIN_ABI);
        dlclose(h);
        return e;
    }
    plugins[emu] = p;  /* h stays open */
    return SMOL_OK;
}

static enum smol_err open_backend(struct smol_backend **out, int device, const struct smol_cuda_opts *opts, int emu,
                                  char *err)
{
    *out = NULL;
    struct smol_cuda_opts o = cuda_opts_default;
    if (opts) o = *opts;
    /* the environment first: a bad value is reported even where no plugin or device is */
    enum smol_err e = smol_cuda_opts_from_env(&o, err);
    if (!e) e = load(emu, err);
    if (e) return e;
    return plugins[emu]->backend_new(out, device, &o, err);
}

enum smol_err smol_backend_cuda_new(struct smol_backend **out, int device, const struct smol_cuda_opts *opts,
                                    char *err)
{
    return open_backend(out, device, opts, 0, err);
}

enum smol_err smol_backend_cuda_emu_new(struct smol_backend **out, const struct smol_cuda_opts *opts, char *err)
{
    return open_backend(out, 0, opts, 1, err);
}

/* the plugin that made be, or NULL: "cuda-emu" backends are the emulator's */
static const struct smol_cuda_plugin *plugin_of(const struct smol_backend *be)
{
    if (!be || strncmp(be->name, "cuda", 4)) return NULL;
    return plugins[!strcmp(be->name, "cuda-emu")];
}

enum smol_err smol_backend_cuda_sample(struct smol_backend *be, const float *logits, int n_rows, int vocab,
                                       const float *temp, const float *top_p, const float *u, int32_t *out,
                                       char *err)
{
    const struct smol_cuda_plugin *p = plugin_of(be);
    if (!p) return smol_errf(err, SMOL_EUNSUPPORTED, "sampling on the device needs the CUDA backend");
    return p->sample(be, logits, n_rows, vocab, temp, top_p, u, out, err);
}

double smol_backend_cuda_mark(struct smol_backend *be)
{
    const struct smol_cuda_plugin *p = plugin_of(be);
    if (!p || !p->mark) return -1;
    return p->mark(be);
}

enum smol_err smol_backend_cuda_counts(struct smol_backend *be, struct smol_cuda_counts *out)
{
    const struct smol_cuda_plugin *p = plugin_of(be);
    if (!p || !p->counts) return SMOL_EUNSUPPORTED;
    p->counts(be, out);
    return SMOL_OK;
}
