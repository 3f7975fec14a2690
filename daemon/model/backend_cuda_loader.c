/*
 * backend_cuda_loader.c - dlopen of the CUDA backend plugin (see the header).
 */
#include "daemon/model/backend_cuda_loader.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct smol_cuda_plugin *plugin;  /* loaded once, never unloaded (engine thread) */

static enum smol_err plugin_path(char *buf, size_t cap, char *err)
{
    const char *env = getenv("SMOL_CUDA_PLUGIN");
    if (env && *env) {
        if (strlen(env) >= cap) return smol_errf(err, SMOL_EINVAL, "cuda: SMOL_CUDA_PLUGIN path is too long");
        strcpy(buf, env);
        return SMOL_OK;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return smol_errf(err, SMOL_EUNSUPPORTED, "cuda: cannot find the executable's directory");
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    if ((size_t)snprintf(buf, cap, "%s/../lib/%s", exe, SMOL_CUDA_PLUGIN_FILE) >= cap)
        return smol_errf(err, SMOL_EINVAL, "cuda: plugin path is too long");
    return SMOL_OK;
}

static enum smol_err load(char *err)
{
    if (plugin) return SMOL_OK;
    char path[PATH_MAX + 64];
    enum smol_err e = plugin_path(path, sizeof path, err);
    if (e) return e;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return smol_errf(err, SMOL_EUNSUPPORTED, "cuda: cannot load plugin: %s", dlerror());
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
    plugin = p;  /* h stays open */
    return SMOL_OK;
}

enum smol_err smol_backend_cuda_new(struct smol_backend **out, int device, char *err)
{
    *out = NULL;
    enum smol_err e = load(err);
    if (e) return e;
    return plugin->backend_new(out, device, err);
}

enum smol_err smol_backend_cuda_sample(struct smol_backend *be, const float *logits, int n_rows, int vocab,
                                       const float *temp, const float *top_p, const float *u, int32_t *out,
                                       char *err)
{
    if (!plugin || !be || strncmp(be->name, "cuda", 4))
        return smol_errf(err, SMOL_EUNSUPPORTED, "sampling on the device needs the CUDA backend");
    return plugin->sample(be, logits, n_rows, vocab, temp, top_p, u, out, err);
}
