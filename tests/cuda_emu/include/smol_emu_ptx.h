/*
 * smol_emu_ptx.h (cuda-emu) - kernels/cuda/ptx.cuh's instructions emulated: the same functions,
 * each a warp collective where the instruction is one, by the PTX ISA's fragment layouts:
 *
 *  mma.sync m16n8k16 .f16 (f32 accumulate): groupID g = lane >> 2, t = lane & 3;
 *    A a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..);
 *    B b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g); C c0, c1 = (g, 2t..), c2, c3 = (g+8, 2t..)
 *  mma.sync m16n8k32 .s8: A a[0] = (g, 4t..4t+3), a[1] = (g+8, 4t..), a[2] = (g, 16+4t..),
 *    a[3] = (g+8, 16+4t..); B b0 = (k 4t..4t+3, n g), b1 = (k 16+4t.., n g); C as above;
 *    m16n8k16 .s8: a0 = (g, 4t..), a1 = (g+8, 4t..), b0 = (k 4t.., n g)
 *  ldmatrix .x4: lanes 8i..8i+7 give the row addresses of matrix i; lane T gets 32-bit word
 *    T % 4 of row T / 4 of matrix i in r[i]; .trans: (row 2 (T % 4), col T / 4) low and
 *    (row 2 (T % 4) + 1, col T / 4) high
 *  cp.async: the copy done at once, of its size (the waits have nothing left to wait for:
 *    their placement is the device check's, not this one's)
 *  ld.global.nc.L1::no_allocate: a plain load
 *
 * f16 products are exact in float, so the emulated mma sums in float in k order; the hardware
 * may add in another order (a few ulp of f32 apart).
 */
#ifndef SMOL_EMU_PTX_H
#define SMOL_EMU_PTX_H

const uint8_t *emu_warp_gather(unsigned mask, const void *mine, size_t bytes);
extern long emu_n_mma;

static inline float emu_lo_h(uint32_t u) { return emu_h2f((uint16_t)(u & 0xffff)); }
static inline float emu_hi_h(uint32_t u) { return emu_h2f((uint16_t)(u >> 16)); }

static inline void mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    const uint32_t mine[6] = {a[0], a[1], a[2], a[3], b0, b1};
    const uint32_t (*all)[8] = (const uint32_t (*)[8])emu_warp_gather(0xffffffffu, mine, sizeof mine);
    const int l = emu_lane(), g = l >> 2, t = l & 3;
    float A[2][16], B[16][2];  /* this lane's rows g, g + 8 and columns 2t, 2t + 1 */
    for (int L = 0; L < 32; L++) {
        const int gl = L >> 2, tl = L & 3;
        const uint32_t *m = all[L];
        if (gl == g) {
            A[0][2 * tl] = emu_lo_h(m[0]); A[0][2 * tl + 1] = emu_hi_h(m[0]);
            A[1][2 * tl] = emu_lo_h(m[1]); A[1][2 * tl + 1] = emu_hi_h(m[1]);
            A[0][2 * tl + 8] = emu_lo_h(m[2]); A[0][2 * tl + 9] = emu_hi_h(m[2]);
            A[1][2 * tl + 8] = emu_lo_h(m[3]); A[1][2 * tl + 9] = emu_hi_h(m[3]);
        }
        for (int c = 0; c < 2; c++)
            if (gl == 2 * t + c) {
                B[2 * tl][c] = emu_lo_h(m[4]); B[2 * tl + 1][c] = emu_hi_h(m[4]);
                B[2 * tl + 8][c] = emu_lo_h(m[5]); B[2 * tl + 9][c] = emu_hi_h(m[5]);
            }
    }
    for (int i = 0; i < 4; i++) {
        float s = 0;
        for (int k = 0; k < 16; k++) s += A[i >> 1][k] * B[k][i & 1];
        d[i] += s;
    }
    if (l == 0) emu_n_mma++;
}

static inline int emu_sb(uint32_t u, int b) { return (int8_t)(u >> (8 * b)); }

/* int8 mma, K = 32 (a[0..3], b0, b1) or 16 (a[0..1], b0); c = the product (no accumulator in) */
static inline void emu_imma(int c[4], int K, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    const uint32_t mine[6] = {a[0], a[1], K == 32 ? a[2] : 0, K == 32 ? a[3] : 0, b0, b1};
    const uint32_t (*all)[8] = (const uint32_t (*)[8])emu_warp_gather(0xffffffffu, mine, sizeof mine);
    const int l = emu_lane(), g = l >> 2, t = l & 3;
    int A[2][32], B[32][2];
    for (int L = 0; L < 32; L++) {
        const int gl = L >> 2, tl = L & 3;
        const uint32_t *m = all[L];
        for (int b = 0; b < 4; b++) {
            if (gl == g) {
                A[0][4 * tl + b] = emu_sb(m[0], b);
                A[1][4 * tl + b] = emu_sb(m[1], b);
                if (K == 32) {
                    A[0][16 + 4 * tl + b] = emu_sb(m[2], b);
                    A[1][16 + 4 * tl + b] = emu_sb(m[3], b);
                }
            }
            for (int cc = 0; cc < 2; cc++)
                if (gl == 2 * t + cc) {
                    B[4 * tl + b][cc] = emu_sb(m[4], b);
                    if (K == 32) B[16 + 4 * tl + b][cc] = emu_sb(m[5], b);
                }
        }
    }
    for (int i = 0; i < 4; i++) {
        int s = 0;
        for (int k = 0; k < K; k++) s += A[i >> 1][k] * B[k][i & 1];
        c[i] = s;
    }
    if (l == 0) emu_n_mma++;
}
static inline void imma16832(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) { emu_imma(c, 32, a, b0, b1); }
static inline void imma16816(int c[4], uint32_t a0, uint32_t a1, uint32_t b0)
{
    const uint32_t a[2] = {a0, a1};
    emu_imma(c, 16, a, b0, 0);
}

static inline void ldsm_x4(const void *p, uint32_t r[4])
{
    const void *const *all = (const void *const *)emu_warp_gather(0xffffffffu, &p, sizeof p);
    const int l = emu_lane();
    for (int i = 0; i < 4; i++) memcpy(&r[i], (const uint8_t *)all[4 * (8 * i + (l >> 2))] + 4 * (l & 3), 4);
}

static inline void ldsm_x4_t(const void *p, uint32_t r[4])
{
    const void *const *all = (const void *const *)emu_warp_gather(0xffffffffu, &p, sizeof p);
    const int l = emu_lane(), g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; i++) {
        const uint16_t *r0 = (const uint16_t *)all[4 * (8 * i + 2 * t)], *r1 = (const uint16_t *)all[4 * (8 * i + 2 * t + 1)];
        r[i] = (uint32_t)r0[g] | ((uint32_t)r1[g] << 16);
    }
}

template <int B> static inline void cp_async(void *dst, const void *src)
{
    static_assert(B == 4 || B == 8 || B == 16, "cp.async copies 4, 8 or 16 bytes");
    if (((uintptr_t)dst | (uintptr_t)src) & (B - 1)) emu_fail("cp.async of %d bytes from %p to %p: not aligned", B, src, dst);
    memcpy(dst, src, B);
}
static inline void cp_commit() {}
template <int N> static inline void cp_wait() {}

static inline void ld_w16(const void *p, uint32_t v[4]) { memcpy(v, p, 16); }
static inline void ld_w8(const void *p, uint32_t v[2]) { memcpy(v, p, 8); }
static inline uint32_t ld_w4(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint32_t ld_w2(const void *p) { uint16_t v; memcpy(&v, p, 2); return v; }

#endif
