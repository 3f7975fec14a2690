/*
 * amx_layout.c - portable pack / unpack of the x16 weight layouts, the
 * staged B tiles of the AMX kernels, and the scalar twin of those kernels:
 * a C emulation of tileloadd / tdpbsud / tdpbssd / tilestored on the same
 * bytes, then the kernels' float epilogue (see amx_layout.h).  Plain C: it
 * builds and is tested on every machine, AMX or not.
 */
#include "amx_layout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant_ref_internal.h"

int smol_x16_has(uint32_t type)
{
    return type == SMOL_TYPE_Q4_K || type == SMOL_TYPE_Q6_K || type == SMOL_TYPE_Q4_1 || type == SMOL_TYPE_Q4_0 ||
           type == SMOL_TYPE_Q8_0;
}

int smol_amx_sub(uint32_t type) { return type == SMOL_TYPE_Q6_K ? 16 : 32; }

/* smol_x16_pack_<type>, smol_x16_unpack_row_<type>: the bodies x8_layout.c
 * compiles with 8 lanes */
#define LANES 16
#define LANES_T(t) t##_x16
#define LANES_FN(f) smol_x16_##f
#include "lanes_pack.inc"

/* ---------------------------------------- the AMX kernels' staged B tiles */

void smol_amx_stage_q4_K(const struct q4_K_x16 *b, int j, uint8_t B[8][64])
{
    for (int p = 0; p < 4; p++)
        for (int c = 0; c < 64; c++) {
            B[2 * p][c] = b->qs[j][p][c] & 0xF;
            B[2 * p + 1][c] = b->qs[j][p][c] >> 4;
        }
}

void smol_amx_stage_q6_K(const struct q6_K_x16 *b, int j, uint8_t B[4][64])
{
    for (int u = 0; u < 4; u++) {
        const int v = 4 * j + u;
        for (int c = 0; c < 64; c++)
            B[u][c] = (uint8_t)(((b->lo[v / 2][c] >> (4 * (v % 2))) & 0xF) | (((b->hi[v / 4][c] >> (2 * (v % 4))) & 3) << 4));
    }
}

static void stage_nibbles(const uint32_t qs[4][16], int minus8, uint8_t B[8][64])
{
    for (int p = 0; p < 4; p++)
        for (int c = 0; c < 64; c++) {
            const uint8_t v = (uint8_t)(qs[p][c / 4] >> (8 * (c % 4)));
            B[p][c] = (uint8_t)((v & 0xF) - (minus8 ? 8 : 0));
            B[4 + p][c] = (uint8_t)((v >> 4) - (minus8 ? 8 : 0));
        }
}

void smol_amx_stage_q4_1(const struct q4_1_x16 *b, uint8_t B[8][64]) { stage_nibbles(b->qs, 0, B); }
void smol_amx_stage_q4_0(const struct q4_0_x16 *b, uint8_t B[8][64]) { stage_nibbles(b->qs, 1, B); }

void smol_amx_stage_q8_0(const struct q8_0_x16 *b, uint8_t B[8][64])
{
    for (int p = 0; p < 8; p++)
        for (int c = 0; c < 64; c++) B[p][c] = (uint8_t)((b->qs[p][c / 4] >> (8 * (c % 4))) ^ 0x80);
}

void smol_x16_pack(uint32_t type, int n, const void *w, size_t w_stride, int n_rows, void *out)
{
    switch (type) {
    case SMOL_TYPE_Q4_K: smol_x16_pack_q4_K(n, w, w_stride, n_rows, out); break;
    case SMOL_TYPE_Q6_K: smol_x16_pack_q6_K(n, w, w_stride, n_rows, out); break;
    case SMOL_TYPE_Q4_1: smol_x16_pack_q4_1(n, w, w_stride, n_rows, out); break;
    case SMOL_TYPE_Q4_0: smol_x16_pack_q4_0(n, w, w_stride, n_rows, out); break;
    case SMOL_TYPE_Q8_0: smol_x16_pack_q8_0(n, w, w_stride, n_rows, out); break;
    default: abort();
    }
}

void smol_x16_unpack_row(uint32_t type, int n, const void *packed, int row, void *out)
{
    switch (type) {
    case SMOL_TYPE_Q4_K: smol_x16_unpack_row_q4_K(n, packed, row, out); break;
    case SMOL_TYPE_Q6_K: smol_x16_unpack_row_q6_K(n, packed, row, out); break;
    case SMOL_TYPE_Q4_1: smol_x16_unpack_row_q4_1(n, packed, row, out); break;
    case SMOL_TYPE_Q4_0: smol_x16_unpack_row_q4_0(n, packed, row, out); break;
    case SMOL_TYPE_Q8_0: smol_x16_unpack_row_q8_0(n, packed, row, out); break;
    default: abort();
    }
}

void smol_x16_gemm_q4_0(int n, const void *packed, int n_rows, const void *a, size_t a_stride, int n_tok,
                        float *out, size_t out_stride)
{
    const int nb = n / QK4_0;
    for (int t = 0; t < n_tok; t++) {
        const struct block_q8_0 *y = (const struct block_q8_0 *)((const uint8_t *)a + (size_t)t * a_stride);
        for (int g = 0; g < n_rows / 16; g++) {
            const struct q4_0_x16 *x = (const struct q4_0_x16 *)packed + (size_t)g * nb;
            float acc[16] = {0};
            for (int i = 0; i < nb; i++) {
                const float yd = smol_half_to_f32(y[i].d);
                for (int r = 0; r < 16; r++) {
                    int32_t I = 0;
                    for (int p = 0; p < 4; p++)
                        for (int b = 0; b < 4; b++) {
                            const uint8_t v = (uint8_t)(x[i].qs[p][r] >> (8 * b));
                            I += ((v & 0xF) - 8) * y[i].qs[4 * p + b] + ((v >> 4) - 8) * y[i].qs[16 + 4 * p + b];
                        }
                    acc[r] = fmaf((float)I, smol_half_to_f32(x[i].d[r]) * yd, acc[r]);
                }
            }
            memcpy(out + (size_t)t * out_stride + 16 * g, acc, sizeof acc);
        }
    }
}

/* ---------------------------------------------- tile unit, in plain C */

/* a tile register: rows x colsb bytes as configured (palette 1: <= 16 x 64) */
struct tile {
    int rows, colsb;
    uint8_t b[16][64];
};

/* tileloadd: rows of colsb bytes from base, stride apart */
static void tile_loadd(struct tile *t, const void *base, size_t stride, int rows, int colsb)
{
    memset(t, 0, sizeof *t);
    t->rows = rows;
    t->colsb = colsb;
    for (int m = 0; m < rows; m++) memcpy(t->b[m], (const uint8_t *)base + (size_t)m * stride, colsb);
}

static void tile_zero(struct tile *t, int rows, int colsb)
{
    memset(t, 0, sizeof *t);
    t->rows = rows;
    t->colsb = colsb;
}

/* tdpb[su][su]d c, a, b: for m < c.rows, n < c.colsb / 4, k < a.colsb / 4:
 * C[m][n] += A[m][4k..4k+3] . B[k][4n..4n+3] in int32 (wrapping), each
 * byte signed or unsigned as the instruction says.  The shapes must agree
 * as the hardware requires (else #UD there; abort here). */
static void tile_dp(struct tile *c, const struct tile *a, const struct tile *b, int a_signed, int b_signed)
{
    if (a->rows != c->rows || a->colsb / 4 != b->rows || b->colsb != c->colsb || a->colsb % 4 || c->colsb % 4) abort();
    for (int m = 0; m < c->rows; m++)
        for (int n = 0; n < c->colsb / 4; n++) {
            uint32_t acc;
            memcpy(&acc, &c->b[m][4 * n], 4);
            for (int k = 0; k < b->rows; k++)
                for (int i = 0; i < 4; i++) {
                    const int av = a_signed ? (int8_t)a->b[m][4 * k + i] : a->b[m][4 * k + i];
                    const int bv = b_signed ? (int8_t)b->b[k][4 * n + i] : b->b[k][4 * n + i];
                    acc += (uint32_t)(av * bv);
                }
            memcpy(&c->b[m][4 * n], &acc, 4);
        }
}

/* tilestored: C (16 int32 per row) -> D[m][16] */
static void tile_stored(const struct tile *t, int32_t D[16][16])
{
    for (int m = 0; m < t->rows; m++) memcpy(D[m], t->b[m], 64);
}

/* one sub-block's tile product: A = M activation rows of kb bytes at
 * base (stride a_stride), B = the staged kb/4 x 64 bytes -> D */
static void tile_dot(const void *base, size_t a_stride, int M, int kb, const uint8_t *B, int b_signed,
                     int32_t D[16][16])
{
    struct tile A, Bt, C;
    tile_loadd(&A, base, a_stride, M, kb);
    tile_loadd(&Bt, B, 64, kb / 4, 64);
    tile_zero(&C, M, 64);
    tile_dp(&C, &A, &Bt, 1, b_signed);
    tile_stored(&C, D);
}

/* ------------------------------------------------------------ the twin */

void smol_amx_twin_gemm(uint32_t type, int n, const void *packed, int n_rows, const void *a, size_t a_stride,
                        int n_tok, float *out, size_t out_stride, int32_t *dots)
{
    const int K256 = type == SMOL_TYPE_Q4_K || type == SMOL_TYPE_Q6_K;
    const int bs = K256 ? QK_K : 32, nb = n / bs, sub = smol_amx_sub(type), nsub = n / sub, ng = n_rows / 16;
    const int per = bs / sub; /* tile products per group block */
    for (int t0 = 0; t0 < n_tok; t0 += 16) {
        const int M = n_tok - t0 < 16 ? n_tok - t0 : 16;
        const uint8_t *at = (const uint8_t *)a + (size_t)t0 * a_stride;
        for (int g = 0; g < ng; g++) {
            float acc[16][16] = {{0}};
            for (int i = 0; i < nb; i++) {
                int32_t D[16][16][16]; /* [sub-block][token][row]: the stored C tiles */
                uint8_t B[8][64];
                switch (type) {
                case SMOL_TYPE_Q4_K: {
                    const struct q4_K_x16 *x = (const struct q4_K_x16 *)packed + (size_t)g * nb + i;
                    for (int j = 0; j < 8; j++) {
                        smol_amx_stage_q4_K(x, j, B);
                        tile_dot(((const struct block_q8_K *)at + i)->qs + 32 * j, a_stride, M, 32, B[0], 0, D[j]);
                    }
                    for (int t = 0; t < M; t++) {
                        const struct block_q8_K *y = (const struct block_q8_K *)(at + (size_t)t * a_stride) + i;
                        for (int r = 0; r < 16; r++) {
                            uint8_t sc12[12];
                            for (int s = 0; s < 3; s++) memcpy(sc12 + 4 * s, &x->sd[s][r], 4);
                            int32_t I = 0, Mi = 0;
                            for (int j = 0; j < 8; j++) {
                                uint8_t sc, m;
                                get_scale_min_k4(j, sc12, &sc, &m);
                                I += D[j][t][r] * sc;
                                Mi += m * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
                            }
                            const float yd = y->d;
                            acc[t][r] = fmaf((float)I, smol_half_to_f32(x->d[r]) * yd, acc[t][r]);
                            acc[t][r] = fmaf((float)Mi, smol_half_to_f32(x->dmin[r]) * (0.0f - yd), acc[t][r]);
                        }
                    }
                    break;
                }
                case SMOL_TYPE_Q6_K: {
                    const struct q6_K_x16 *x = (const struct q6_K_x16 *)packed + (size_t)g * nb + i;
                    for (int j = 0; j < 16; j++) {
                        smol_amx_stage_q6_K(x, j, B);
                        tile_dot(((const struct block_q8_K *)at + i)->qs + 16 * j, a_stride, M, 16, B[0], 0, D[j]);
                    }
                    for (int t = 0; t < M; t++) {
                        const struct block_q8_K *y = (const struct block_q8_K *)(at + (size_t)t * a_stride) + i;
                        for (int r = 0; r < 16; r++) {
                            int32_t I = 0, S = 0;
                            for (int j = 0; j < 16; j++) {
                                const int sc = x->sc[j / 2][r][j % 2];
                                I += D[j][t][r] * sc;
                                S += sc * y->bsums[j];
                            }
                            acc[t][r] = fmaf((float)(I - 32 * S), smol_half_to_f32(x->d[r]) * y->d, acc[t][r]);
                        }
                    }
                    break;
                }
                case SMOL_TYPE_Q4_1: {
                    const struct q4_1_x16 *x = (const struct q4_1_x16 *)packed + (size_t)g * nb + i;
                    smol_amx_stage_q4_1(x, B);
                    tile_dot(((const struct block_q8_1 *)at + i)->qs, a_stride, M, 32, B[0], 0, D[0]);
                    for (int t = 0; t < M; t++) {
                        const struct block_q8_1 *y = (const struct block_q8_1 *)(at + (size_t)t * a_stride) + i;
                        const float yd = smol_half_to_f32(y->d), ys = smol_half_to_f32(y->s);
                        for (int r = 0; r < 16; r++)
                            acc[t][r] = acc[t][r] + fmaf((float)D[0][t][r], smol_half_to_f32(x->d[r]) * yd,
                                                         smol_half_to_f32(x->m[r]) * ys);
                    }
                    break;
                }
                case SMOL_TYPE_Q4_0:
                case SMOL_TYPE_Q8_0: {
                    const smol_half *d;
                    if (type == SMOL_TYPE_Q4_0) {
                        const struct q4_0_x16 *x = (const struct q4_0_x16 *)packed + (size_t)g * nb + i;
                        smol_amx_stage_q4_0(x, B);
                        d = x->d;
                    } else {
                        const struct q8_0_x16 *x = (const struct q8_0_x16 *)packed + (size_t)g * nb + i;
                        smol_amx_stage_q8_0(x, B);
                        d = x->d;
                    }
                    tile_dot(((const struct block_q8_0 *)at + i)->qs, a_stride, M, 32, B[0], 1, D[0]);
                    for (int t = 0; t < M; t++) {
                        const struct block_q8_0 *y = (const struct block_q8_0 *)(at + (size_t)t * a_stride) + i;
                        const float yd = smol_half_to_f32(y->d);
                        for (int r = 0; r < 16; r++)
                            acc[t][r] = fmaf((float)D[0][t][r], smol_half_to_f32(d[r]) * yd, acc[t][r]);
                    }
                    break;
                }
                default: abort();
                }
                if (dots)
                    for (int t = 0; t < M; t++)
                        for (int r = 0; r < 16; r++)
                            for (int j = 0; j < per; j++)
                                dots[((size_t)(t0 + t) * n_rows + 16 * g + r) * nsub + (size_t)i * per + j] = D[j][t][r];
            }
            for (int t = 0; t < M; t++) memcpy(out + (size_t)(t0 + t) * out_stride + 16 * g, acc[t], sizeof acc[t]);
        }
    }
}
