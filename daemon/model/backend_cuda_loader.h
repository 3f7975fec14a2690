/*
 * backend_cuda_loader.h - the CUDA backend, loaded at run time as a plugin.
 *
 * The CUDA backend lives in build/lib/libsmollm3_cuda.so (kernels/cuda/),
 * built only where nvcc exists; the daemon and the tools never link CUDA.
 * smol_backend_cuda_new() dlopens the plugin, resolves its one entry symbol
 * and asks it for a backend on a device.  Every way this can fail (no
 * plugin, no libcudart, no driver, no device) returns SMOL_EUNSUPPORTED with
 * a message that names the reason, so the caller can log one line and use
 * the CPU backend.  The plugin stays loaded for the life of the process
 * (unloading the CUDA runtime is not safe).
 */
#ifndef SMOL_BACKEND_CUDA_LOADER_H
#define SMOL_BACKEND_CUDA_LOADER_H

#include <stdint.h>
#include "daemon/model/backend.h"
#include "daemon/model/error.h"

#define SMOL_CUDA_PLUGIN_ABI 1
#define SMOL_CUDA_PLUGIN_ENTRY "smol_cuda_plugin_v1"
#define SMOL_CUDA_PLUGIN_FILE "libsmollm3_cuda.so"

/* What the plugin's entry symbol returns (const struct smol_cuda_plugin *smol_cuda_plugin_v1(void)). */
struct smol_cuda_plugin {
    int abi;                    /* SMOL_CUDA_PLUGIN_ABI */
    /* A backend on CUDA device `device`; SMOL_EUNSUPPORTED when there is none. */
    enum smol_err (*backend_new)(struct smol_backend **out, int device, char *err);
    /* On-device sampling of logits [n_rows][vocab] in backend memory: per row, temperature
     * temp[r] (<= 0: argmax) and nucleus top_p[r] (>= 1: off), drawn with u[r] in [0, 1).
     * temp, top_p, u and out are host arrays of n_rows. */
    enum smol_err (*sample)(struct smol_backend *be, const float *logits, int n_rows, int vocab, const float *temp,
                            const float *top_p, const float *u, int32_t *out, char *err);
};

/* Plugin path: $SMOL_CUDA_PLUGIN, else <dir of the executable>/../lib/libsmollm3_cuda.so. */
enum smol_err smol_backend_cuda_new(struct smol_backend **out, int device, char *err);

/* The optional sampling op of a backend made by smol_backend_cuda_new; SMOL_EUNSUPPORTED for
 * any other backend (the caller samples on the host then). */
enum smol_err smol_backend_cuda_sample(struct smol_backend *be, const float *logits, int n_rows, int vocab,
                                       const float *temp, const float *top_p, const float *u, int32_t *out,
                                       char *err);

#endif
