/*
 * backend_cuda_lt.cuh - the CUDA backend's cuBLASLt GEMM (knob cuda_gemm = lt): mat-muls of more
 * than 8 tokens on bf16 weights decoded per mat-mul (backend_cuda_lt.cu).
 *
 * Only the plugin includes this (it names CUDA types); the daemon sees the knob alone.  Where
 * the plugin was built without cuBLASLt (a toolkit without cublasLt.h / libcublasLt: the
 * Makefile defines SMOL_CUDA_LT only where both are there; the emulator always has its own),
 * smol_lt_new fails with a message saying so, and the backend refuses the knob.
 */
#ifndef SMOL_BACKEND_CUDA_LT_CUH
#define SMOL_BACKEND_CUDA_LT_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include "daemon/model/backend.h"
}

struct smol_lt;

/* A cuBLASLt handle and its matmul descriptor (A^T B: compute 32F, scale 32F); NULL with a message
 * in err (cap bytes) when the plugin has no cuBLASLt or the library cannot start. */
struct smol_lt *smol_lt_new(char *err, size_t cap);
void smol_lt_free(struct smol_lt **lt);

/* Device scratch for mat-muls of up to x_elems activations (n x cols) and weights of up to
 * w_elems elements (rows x cols; bigger ones run in slabs of rows), and cuBLASLt's workspace.
 * Called from the backend's reserve: nothing is allocated later (a recorded step may call
 * smol_lt_matmul).  0, or a cudaError_t with the stream idle. */
cudaError_t smol_lt_reserve(struct smol_lt *lt, size_t w_elems, size_t x_elems);

/* 1 if smol_lt_matmul takes weight w for n tokens: a type dq32 decodes (f32 weights excepted:
 * they stay on the exact f32 path), an even width (activations convert in pairs), activations
 * that fit the scratch, one row of w at least. */
int smol_lt_ok(const struct smol_lt *lt, const struct smol_weight *w, int n);

/* outs[i][t][r] = (add: +=) dot(ws[i] row r, x[t]) for t < n, i < n_w, every ws[i] of x's width:
 * x rounded to bf16 once, each weight decoded to bf16 (in slabs of rows where it is bigger than
 * the scratch) and multiplied by cublasLtMatmul (D = A^T B, beta 1 for add), each shape's
 * layouts and algorithm made once and kept.  Returns the first error (cudaErrorNotSupported for
 * a cuBLASLt status, logged once with the shape). */
cudaError_t smol_lt_matmul(struct smol_lt *lt, float *const *outs, const struct smol_weight *const *ws, int n_w,
                           int add, const float *x, int n, cudaStream_t st);

/* The shapes planned so far (heuristic queries made): a test sees the cache working. */
long smol_lt_plans_made(const struct smol_lt *lt);

#endif
