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

#include <stddef.h>
#include <stdint.h>
#include "daemon/model/backend.h"
#include "daemon/model/error.h"

#define SMOL_CUDA_PLUGIN_ABI 6  /* 6: struct smol_cuda_opts gained gemm_fuse, struct smol_cuda_counts lt_matmuls */
#define SMOL_CUDA_PLUGIN_ENTRY "smol_cuda_plugin_v1"
#define SMOL_CUDA_PLUGIN_FILE "libsmollm3_cuda.so"
/* The same backend built by g++ against the host emulator (tests/cuda_emu): the real kernels'
 * source run on the CPU, for tests and for counting launches; backend name "cuda-emu". */
#define SMOL_CUDA_EMU_PLUGIN_FILE "libsmollm3_cuda_emu.so"

/* The CUDA backend's knobs: each newer path stays off by default until a device run has shown
 * it correct and faster than the path before it (kernels/cuda/NOTES.md).  Config keys
 * cuda_matvec, cuda_fuse, cuda_graphs, cuda_gemm, cuda_gemm_fuse, cuda_attn; the environment (SMOL_CUDA_MATVEC,
 * SMOL_CUDA_FUSE, SMOL_CUDA_GRAPHS, SMOL_CUDA_GEMM, SMOL_CUDA_GEMM_FUSE, SMOL_CUDA_ATTN, SMOL_CUDA_PERSISTENT)
 * overrides them when the backend is made. */
enum { SMOL_CUDA_MATVEC_F32 = 0, SMOL_CUDA_MATVEC_Q8 = 1, SMOL_CUDA_MATVEC_Q8K = 2 };
enum { SMOL_CUDA_ATTN_PAGED = 0, SMOL_CUDA_ATTN_TILED = 1, SMOL_CUDA_ATTN_PREFILL = 2 };
struct smol_cuda_opts {
    int matvec;     /* decode mat-vec (<= 8 tokens): SMOL_CUDA_MATVEC_F32 (f32 activations, a warp per
                       row decoding to registers) or SMOL_CUDA_MATVEC_Q8 (activations quantized once
                       to q8_1, integer dot products on repacked weights) or SMOL_CUDA_MATVEC_Q8K (the
                       same, with the rows of weights of few rows split among 2 or 4 warps so that
                       the device's warps are busy: o and down of the 3B; not yet run on a device) */
    int fuse;       /* 1: fused steps (norm + q/k/v, rope + KV store, mat-vec + residual, the FFN);
                       SMOL_CUDA_FUSE_LAYER: decode steps (<= 8 tokens) run each layer in four
                       kernels (layer.cu: norm + q/k/v + rope + KV store, attention with its
                       merge, o + residual, the FFN with down's split-K), the others as 1 */
    int graphs;     /* 1: a decode step captured once per shape as a CUDA graph and replayed;
                       SMOL_CUDA_GRAPHS_BUCKET: also batched decode steps, padded to 1, 2, 4 ... 256
                       rows, one graph per size with the head of every row and the sampling inside,
                       one upload and one download a step */
    int gemm;       /* mat-muls of more tokens than the mat-vec takes (> 8: batched decode, prefill):
                       SMOL_CUDA_GEMM_TILED (f16 tiles, wmma: matmul.cu) or SMOL_CUDA_GEMM_MMA
                       (quantized tiles decoded in shared memory, cp.async, mma.sync: mmq_tc.cu) or
                       SMOL_CUDA_GEMM_IMMA (q4_K / q6_K / q8_0 weights unpacked to int8, q8a
                       activations, int8 mma.sync, scales on the int32 sums: mmq_tc.cu and mmq_imma.h;
                       other types take the mma path) or SMOL_CUDA_GEMM_LT (an A/B knob: cuBLASLt on
                       bf16 weights decoded per mat-mul, bf16 activations, f32 accumulate and output:
                       backend_cuda_lt.cu; f32 weights stay on matmul.cu; refused by a plugin built
                       without cuBLASLt; not yet run on a device) */
    int persistent; /* 1: decode steps (<= 8 tokens) run every layer in one cooperative launch
                       (layer.cu's bodies with grid-wide waits; not yet run on a device) */
    int attn;       /* SMOL_CUDA_ATTN_PAGED (attention.cu: a block per query token), SMOL_CUDA_ATTN_TILED
                       (fattn.cu: query tiles x K/V tiles on tensor cores, split-K with a warp merge;
                       head_dim 128 with an f16 or q8_0 cache, the paged kernels otherwise) or
                       SMOL_CUDA_ATTN_PREFILL (tiled for steps where a sequence has several query
                       tokens: prefill chunks, speculative verify; paged for decode-only steps, where
                       the paged kernel is faster: device run 3) */
    int gemm_fuse;  /* 1: the mma / imma GEMM in one launch a mat-mul: f32 activations converted to f16
                       (mma) or quantized to q8a (imma) as the kernel stages them, split-K partials
                       summed by each tile's last split (an atomic ticket) instead of a second kernel;
                       0: the f16 / q8a kernel, the GEMM, the split-sum kernel (not yet run on a device) */
};
enum { SMOL_CUDA_FUSE_LAYER = 2 };
enum { SMOL_CUDA_GRAPHS_BUCKET = 2 };
enum { SMOL_CUDA_GEMM_TILED = 0, SMOL_CUDA_GEMM_MMA = 1, SMOL_CUDA_GEMM_IMMA = 2, SMOL_CUDA_GEMM_LT = 3 };

/* The defaults (the verified paths). */
void smol_cuda_opts_default(struct smol_cuda_opts *o);
/* Sets one knob from text: key "cuda_matvec" ("f32" | "q8" | "q8k"), "cuda_fuse" / "cuda_graphs"
 * ("on" | "off" | "1" | "0" | "true" | "false"; cuda_fuse also "layer", cuda_graphs also "bucket"), "cuda_persistent" and "cuda_gemm_fuse" (the same switches), "cuda_gemm" ("tiled" | "mma" | "imma" | "lt"), "cuda_attn"
 * ("paged" | "tiled"); SMOL_EINVAL with a message otherwise. */
enum smol_err smol_cuda_opts_set(struct smol_cuda_opts *o, const char *key, const char *val, char *err);
/* Applies SMOL_CUDA_MATVEC / SMOL_CUDA_FUSE / SMOL_CUDA_GRAPHS / SMOL_CUDA_GEMM / SMOL_CUDA_GEMM_FUSE / SMOL_CUDA_ATTN /
 * SMOL_CUDA_PERSISTENT where set. */
enum smol_err smol_cuda_opts_from_env(struct smol_cuda_opts *o, char *err);
/* "matvec=q8 fuse=on graphs=off gemm=tiled attn=paged" */
void smol_cuda_opts_describe(const struct smol_cuda_opts *o, char *buf, size_t cap);

/* What a backend has done since it was made: kernels run (launched from the host or as nodes
 * of replayed graphs; -1 where the plugin cannot count them: the device build), graph
 * replays, host->device and device->host copies, host waits for the device; mat-muls sent to
 * cuBLASLt (cuda_gemm = lt; a recorded step's counted once, when it is recorded). */
struct smol_cuda_counts {
    long kernels, graph_launches, copies_h2d, copies_d2h, syncs;
    long lt_matmuls;
};

/* What the plugin's entry symbol returns (const struct smol_cuda_plugin *smol_cuda_plugin_v1(void)). */
struct smol_cuda_plugin {
    int abi;                    /* SMOL_CUDA_PLUGIN_ABI */
    /* A backend on CUDA device `device`; SMOL_EUNSUPPORTED when there is none. */
    enum smol_err (*backend_new)(struct smol_backend **out, int device, const struct smol_cuda_opts *opts,
                                 char *err);
    /* On-device sampling of logits [n_rows][vocab] in backend memory: per row, temperature
     * temp[r] (<= 0: argmax) and nucleus top_p[r] (>= 1: off), drawn with u[r] in [0, 1).
     * temp, top_p, u and out are host arrays of n_rows. */
    enum smol_err (*sample)(struct smol_backend *be, const float *logits, int n_rows, int vocab, const float *temp,
                            const float *top_p, const float *u, int32_t *out, char *err);
    /* Device-clock timing: records an event on the backend's stream, waits for it, and returns
     * the milliseconds since the previous mark's event (0 on the first call): what the
     * benchmarks time kernels with, at the card's own clocks. */
    double (*mark)(struct smol_backend *be);
    /* What the backend has done (struct smol_cuda_counts). */
    void (*counts)(struct smol_backend *be, struct smol_cuda_counts *out);
};

/* Plugin path: $SMOL_CUDA_PLUGIN, else <dir of the executable>/../lib/libsmollm3_cuda.so. */
enum smol_err smol_backend_cuda_new(struct smol_backend **out, int device, const struct smol_cuda_opts *opts,
                                    char *err);
/* The same on the host emulator (backend "cuda-emu"): $SMOL_CUDA_EMU_PLUGIN, else
 * <dir of the executable>/../lib/libsmollm3_cuda_emu.so; SMOL_EUNSUPPORTED when it was not built. */
enum smol_err smol_backend_cuda_emu_new(struct smol_backend **out, const struct smol_cuda_opts *opts, char *err);

/* The counts of a backend made by either; SMOL_EUNSUPPORTED for any other backend. */
enum smol_err smol_backend_cuda_counts(struct smol_backend *be, struct smol_cuda_counts *out);

/* The optional sampling op of a backend made by smol_backend_cuda_new; SMOL_EUNSUPPORTED for
 * any other backend (the caller samples on the host then). */
enum smol_err smol_backend_cuda_sample(struct smol_backend *be, const float *logits, int n_rows, int vocab,
                                       const float *temp, const float *top_p, const float *u, int32_t *out,
                                       char *err);

/* The plugin's mark for a backend made by smol_backend_cuda_new; -1 for any other backend. */
double smol_backend_cuda_mark(struct smol_backend *be);

#endif
