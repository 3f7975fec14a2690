/*
 * mma.h (cuda-emu) - nvcuda::wmma for the f16 16x16x16 shapes kernels/cuda/matmul.cu uses.  The
 * API leaves a fragment's element-to-lane mapping unspecified, so the emulation keeps element
 * e of a fragment (row-major 16x16 for every kind) in lane e / 8, slot e % 8; mma_sync is a warp
 * collective that gathers the three fragments, multiplies in float (f16 products are exact)
 * and adds in k order.
 */
#ifndef SMOL_EMU_MMA_H
#define SMOL_EMU_MMA_H
#include "cuda_runtime.h"

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static constexpr int num_elements = 8;
    T x[8];
};

template <class Use, class T, class Layout> struct emu_layout;
template <class L> static inline bool emu_is_col() { return std::is_same<L, col_major>::value; }

template <class Use, class T, class Layout>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const T *p, unsigned ldm)
{
    const int l = emu_lane();
    for (int s = 0; s < 8; s++) {
        const int e = 8 * l + s, r = e / 16, c = e % 16;
        f.x[s] = emu_is_col<Layout>() ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
    }
}
template <class T>
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, T> &f, const T *p, unsigned ldm, layout_t lay)
{
    const int l = emu_lane();
    for (int s = 0; s < 8; s++) {
        const int e = 8 * l + s, r = e / 16, c = e % 16;
        f.x[s] = lay == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
    }
}
template <class T>
static inline void store_matrix_sync(T *p, const fragment<accumulator, 16, 16, 16, T> &f, unsigned ldm, layout_t lay)
{
    const int l = emu_lane();
    for (int s = 0; s < 8; s++) {
        const int e = 8 * l + s, r = e / 16, c = e % 16;
        if (lay == mem_col_major) p[(size_t)c * ldm + r] = f.x[s];
        else p[(size_t)r * ldm + c] = f.x[s];
    }
}
template <class Use, class T, class Layout, class V>
static inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, V v)
{
    for (int s = 0; s < 8; s++) f.x[s] = (T)v;
}
template <class LA, class LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, __half, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, __half, LB> &b, const fragment<accumulator, 16, 16, 16, float> &c)
{
    struct { uint16_t a[8], b[8]; } mine;
    for (int s = 0; s < 8; s++) { mine.a[s] = a.x[s].u; mine.b[s] = b.x[s].u; }
    const uint8_t *all = emu_warp_gather(0xffffffffu, &mine, sizeof mine);
    /* the 16x16 product once per warp and collective (the first lane to get here; every lane of
     * the warp reads it before any can complete the next collective), then this lane's 8 */
    static struct { unsigned long blk; unsigned gen; float D[256]; } cache[32];
    const int l = emu_lane(), wi = (emu_cur->lin >> 5) & 31;  /* <= 32 warps a block */
    if (cache[wi].blk != emu_cur->blk_serial || cache[wi].gen != emu_cur->coll_gen + 1) {
        float A[16][16], B[16][16];
        for (int e = 0; e < 256; e++) {
            const uint16_t *m = (const uint16_t *)(all + 32 * (e / 8));
            A[e / 16][e % 16] = emu_h2f(m[e % 8]);
            B[e / 16][e % 16] = emu_h2f(m[8 + e % 8]);
        }
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++) {
                float acc = 0;
                for (int k = 0; k < 16; k++) acc += A[r][k] * B[k][c];
                cache[wi].D[16 * r + c] = acc;
            }
        cache[wi].blk = emu_cur->blk_serial;
        cache[wi].gen = emu_cur->coll_gen + 1;
    }
    fragment<accumulator, 16, 16, 16, float> out;
    for (int s = 0; s < 8; s++) out.x[s] = c.x[s] + cache[wi].D[8 * l + s];
    d = out;
    if (l == 0) emu_n_mma++;
}
}  // namespace wmma
}  // namespace nvcuda
#endif
