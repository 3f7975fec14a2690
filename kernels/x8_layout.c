/*
 * x8_layout.c - portable pack / unpack of the x8 weight layouts (see
 * x8_layout.h).  Plain C, built and tested on every machine; the AVX2 and
 * AVX-VNNI tables use these packers at load, so they move whole dwords
 * (no per-nibble loops); the q4_K and q6_K unpackers (a row for get_rows)
 * move one quant at a time: the layout read from its definition, a check
 * on the packers that does not share their bit arithmetic.
 */
#include "x8_layout.h"

#include <string.h>

static inline uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

int smol_x8_has(uint32_t type)
{
    return type == SMOL_TYPE_Q4_K || type == SMOL_TYPE_Q6_K || type == SMOL_TYPE_Q4_1 || type == SMOL_TYPE_Q8_0;
}

/* ------------------------------------------------------------- q4_K */

void smol_x8_pack_q4_K(int n, const void *w, size_t w_stride, int n_rows, void *out)
{
    const int nb = n / QK_K;
    for (int g = 0; g < n_rows / 8; g++)
        for (int r = 0; r < 8; r++) {
            const struct block_q4_K *x = (const struct block_q4_K *)((const uint8_t *)w + (size_t)(8 * g + r) * w_stride);
            struct q4_K_x8 *o = (struct q4_K_x8 *)out + (size_t)g * nb;
            for (int i = 0; i < nb; i++, o++) {
                for (int s = 0; s < 3; s++) o->sd[s][r] = ld32(x[i].scales + 4 * s);
                o->d[r] = x[i].d;
                o->dmin[r] = x[i].dmin;
                /* qs as 32 dwords X: bytes 32q.. hold sub-blocks 2q (low
                 * nibbles) and 2q+1 (high); dword (j, p) of the packed row
                 * takes k = 8p..8p+3 and 8p+4..8p+7 of sub-block j, i.e.
                 * X[8q + 2p] and X[8q + 2p + 1] */
                for (int q = 0; q < 4; q++)
                    for (int p = 0; p < 4; p++) {
                        const uint32_t e = ld32(x[i].qs + 4 * (8 * q + 2 * p)), f = ld32(x[i].qs + 4 * (8 * q + 2 * p + 1));
                        const uint32_t lo = (e & 0x0F0F0F0Fu) | ((f & 0x0F0F0F0Fu) << 4);
                        const uint32_t hi = ((e >> 4) & 0x0F0F0F0Fu) | (f & 0xF0F0F0F0u);
                        memcpy(o->qs[2 * q][p] + 4 * r, &lo, 4);
                        memcpy(o->qs[2 * q + 1][p] + 4 * r, &hi, 4);
                    }
            }
        }
}

void smol_x8_unpack_row_q4_K(int n, const void *packed, int row, void *out)
{
    const int nb = n / QK_K, r = row % 8;
    const struct q4_K_x8 *x = (const struct q4_K_x8 *)packed + (size_t)(row / 8) * nb;
    struct block_q4_K *y = out;
    for (int i = 0; i < nb; i++) {
        for (int s = 0; s < 3; s++) memcpy(y[i].scales + 4 * s, &x[i].sd[s][r], 4);
        y[i].d = x[i].d[r];
        y[i].dmin = x[i].dmin[r];
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int j = 0; j < 8; j++) /* one quant at a time: the other direction of the packer's bit moves */
            for (int k = 0; k < 32; k++) {
                const uint8_t v = x[i].qs[j][k / 8][4 * r + k % 4]; /* k % 8 < 4: low nibble */
                const uint8_t q = k % 8 < 4 ? v & 0xF : v >> 4;
                y[i].qs[32 * (j / 2) + k] |= (uint8_t)(j % 2 ? q << 4 : q);
            }
    }
}

/* ------------------------------------------------------------- q6_K */

/* the 256 quants (0..63) of a q6_K block in k order (smol_dequant_q6_K_ref) */
static void q6_K_values(const struct block_q6_K *x, uint8_t *q)
{
    const uint8_t *ql = x->ql, *qh = x->qh;
    for (int h = 0; h < QK_K; h += 128, q += 128, ql += 64, qh += 32)
        for (int l = 0; l < 32; l++) {
            q[l] = (uint8_t)((ql[l] & 0xF) | ((qh[l] & 3) << 4));
            q[l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
            q[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            q[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
}

void smol_x8_pack_q6_K(int n, const void *w, size_t w_stride, int n_rows, void *out)
{
    const int nb = n / QK_K;
    for (int g = 0; g < n_rows / 8; g++)
        for (int r = 0; r < 8; r++) {
            const struct block_q6_K *x = (const struct block_q6_K *)((const uint8_t *)w + (size_t)(8 * g + r) * w_stride);
            struct q6_K_x8 *o = (struct q6_K_x8 *)out + (size_t)g * nb;
            for (int i = 0; i < nb; i++, o++) {
                uint8_t q[QK_K];
                q6_K_values(&x[i], q);
                for (int u = 0; u < 32; u++) { /* vectors 2u (low nibbles) and 2u + 1 (high) */
                    const uint32_t v = (ld32(q + 8 * u) & 0x0F0F0F0Fu) | ((ld32(q + 8 * u + 4) & 0x0F0F0F0Fu) << 4);
                    memcpy(o->lo[u] + 4 * r, &v, 4);
                }
                for (int h = 0; h < 16; h++) { /* vectors 4h..4h+3: their top 2 bits at bits 0, 2, 4, 6 */
                    const uint8_t *c = q + 16 * h;
                    const uint32_t v = ((ld32(c) >> 4) & 0x03030303u) | ((ld32(c + 4) >> 2) & 0x0C0C0C0Cu) |
                                       (ld32(c + 8) & 0x30303030u) | ((ld32(c + 12) << 2) & 0xC0C0C0C0u);
                    memcpy(o->hi[h] + 4 * r, &v, 4);
                }
                for (int k = 0; k < 8; k++) {
                    o->sc[k][r][0] = x[i].scales[2 * k];
                    o->sc[k][r][1] = x[i].scales[2 * k + 1];
                }
                o->d[r] = x[i].d;
            }
        }
}

void smol_x8_unpack_row_q6_K(int n, const void *packed, int row, void *out)
{
    const int nb = n / QK_K, r = row % 8;
    const struct q6_K_x8 *x = (const struct q6_K_x8 *)packed + (size_t)(row / 8) * nb;
    struct block_q6_K *y = out;
    for (int i = 0; i < nb; i++) {
        uint8_t q[QK_K];
        for (int k = 0; k < QK_K; k++) {
            const int v = k / 4, b = k % 4;
            q[k] = (uint8_t)(((x[i].lo[v / 2][4 * r + b] >> (4 * (v % 2))) & 0xF) |
                             (((x[i].hi[v / 4][4 * r + b] >> (2 * (v % 4))) & 3) << 4));
        }
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const uint8_t *c = q + 128 * h;
                y[i].ql[64 * h + l] = (uint8_t)((c[l] & 0xF) | (c[l + 64] & 0xF) << 4);
                y[i].ql[64 * h + l + 32] = (uint8_t)((c[l + 32] & 0xF) | (c[l + 96] & 0xF) << 4);
                y[i].qh[32 * h + l] = (uint8_t)((c[l] >> 4) | (c[l + 32] >> 4) << 2 | (c[l + 64] >> 4) << 4 |
                                                (c[l + 96] >> 4) << 6);
            }
        for (int k = 0; k < 8; k++) {
            y[i].scales[2 * k] = x[i].sc[k][r][0];
            y[i].scales[2 * k + 1] = x[i].sc[k][r][1];
        }
        y[i].d = x[i].d[r];
    }
}

/* ------------------------------------------------------- q4_1, q8_0 */

void smol_x8_pack_q4_1(int n, const void *w, size_t w_stride, int n_rows, void *out)
{
    const int nb = n / QK4_1;
    for (int g = 0; g < n_rows / 8; g++)
        for (int r = 0; r < 8; r++) {
            const struct block_q4_1 *x = (const struct block_q4_1 *)((const uint8_t *)w + (size_t)(8 * g + r) * w_stride);
            struct q4_1_x8 *o = (struct q4_1_x8 *)out + (size_t)g * nb;
            for (int i = 0; i < nb; i++, o++) {
                for (int p = 0; p < 4; p++) o->qs[p][r] = ld32(x[i].qs + 4 * p);
                o->d[r] = x[i].d;
                o->m[r] = x[i].m;
            }
        }
}

void smol_x8_unpack_row_q4_1(int n, const void *packed, int row, void *out)
{
    const int nb = n / QK4_1, r = row % 8;
    const struct q4_1_x8 *x = (const struct q4_1_x8 *)packed + (size_t)(row / 8) * nb;
    struct block_q4_1 *y = out;
    for (int i = 0; i < nb; i++) {
        y[i].d = x[i].d[r];
        y[i].m = x[i].m[r];
        for (int p = 0; p < 4; p++) memcpy(y[i].qs + 4 * p, &x[i].qs[p][r], 4);
    }
}

void smol_x8_pack_q8_0(int n, const void *w, size_t w_stride, int n_rows, void *out)
{
    const int nb = n / QK8_0;
    for (int g = 0; g < n_rows / 8; g++)
        for (int r = 0; r < 8; r++) {
            const struct block_q8_0 *x = (const struct block_q8_0 *)((const uint8_t *)w + (size_t)(8 * g + r) * w_stride);
            struct q8_0_x8 *o = (struct q8_0_x8 *)out + (size_t)g * nb;
            for (int i = 0; i < nb; i++, o++) {
                for (int p = 0; p < 8; p++) o->qs[p][r] = ld32((const uint8_t *)x[i].qs + 4 * p) ^ 0x80808080u;
                o->d[r] = x[i].d;
            }
        }
}

void smol_x8_unpack_row_q8_0(int n, const void *packed, int row, void *out)
{
    const int nb = n / QK8_0, r = row % 8;
    const struct q8_0_x8 *x = (const struct q8_0_x8 *)packed + (size_t)(row / 8) * nb;
    struct block_q8_0 *y = out;
    for (int i = 0; i < nb; i++) {
        y[i].d = x[i].d[r];
        for (int p = 0; p < 8; p++) {
            const uint32_t v = x[i].qs[p][r] ^ 0x80808080u;
            memcpy(y[i].qs + 4 * p, &v, 4);
        }
    }
}
