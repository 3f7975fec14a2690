/* kv.c - paged KV cache bookkeeping (see kv.h). */
#include "daemon/model/kv.h"
#include "daemon/model/backend.h"
#include "kernels/quant.h"

#include <stdlib.h>
#include <string.h>

size_t smol_kv_row_bytes(int head_dim, uint32_t type)
{
    switch (type) {
    case SMOL_TYPE_F32: return (size_t)head_dim * 4;
    case SMOL_TYPE_F16: return (size_t)head_dim * 2;
    case SMOL_TYPE_Q8_0: return head_dim % QK8_0 ? 0 : (size_t)head_dim / QK8_0 * sizeof(struct block_q8_0);
    default: return 0;
    }
}

size_t smol_kv_bytes_per_token(int n_layers, int n_kv_heads, int head_dim, uint32_t type)
{
    return (size_t)2 * n_layers * n_kv_heads * smol_kv_row_bytes(head_dim, type);
}

enum smol_err smol_kv_type_parse(const char *name, uint32_t *type, char *err)
{
    static const struct { const char *name; uint32_t type; } types[] = {
        {"f32", SMOL_TYPE_F32}, {"f16", SMOL_TYPE_F16}, {"q8_0", SMOL_TYPE_Q8_0}};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcmp(name, types[i].name)) {
            *type = types[i].type;
            return SMOL_OK;
        }
    return smol_errf(err, SMOL_EINVAL, "kv type must be f32, f16 or q8_0 (got '%.64s')", name);
}

void smol_kv_rot(int head_dim, uint32_t type, int *rot_k, int *rot_v)
{
    *rot_k = *rot_v = 0;
    if (type != SMOL_TYPE_Q8_0 || head_dim % 64) return;
    *rot_k = 64;
    while (head_dim % (2 * *rot_k) == 0) *rot_k *= 2;
    *rot_v = 64;
}

enum smol_err smol_kv_init(struct smol_kv *kv, struct smol_backend *be, int n_layers, int n_kv_heads,
                           int head_dim, uint32_t type, int n_pages, char *err)
{
    memset(kv, 0, sizeof *kv);
    if (type != SMOL_TYPE_F16 && type != SMOL_TYPE_F32 && type != SMOL_TYPE_Q8_0)
        return smol_errf(err, SMOL_EINVAL, "kv cache: type must be f32, f16 or q8_0");
    if (!smol_kv_row_bytes(head_dim, type))
        return smol_errf(err, SMOL_EINVAL, "kv cache: q8_0 needs a head size that is a multiple of %d (got %d)",
                         QK8_0, head_dim);
    if (n_pages < 1) return smol_errf(err, SMOL_EINVAL, "kv cache: budget too small for one page");
    kv->n_layers = n_layers;
    kv->n_kv_heads = n_kv_heads;
    kv->head_dim = head_dim;
    kv->type = type;
    kv->row_bytes = smol_kv_row_bytes(head_dim, type);
    smol_kv_rot(head_dim, type, &kv->rot_k, &kv->rot_v);
    kv->n_pages = n_pages;
    kv->page_bytes = (size_t)n_kv_heads * SMOL_KV_PAGE * kv->row_bytes;
    kv->layer_bytes = (size_t)n_pages * kv->page_bytes;
    kv->be = be;
    kv->k = be->alloc(be, kv->layer_bytes * n_layers);
    kv->v = be->alloc(be, kv->layer_bytes * n_layers);
    kv->refcount = calloc((size_t)n_pages, sizeof *kv->refcount);
    kv->free_list = malloc((size_t)n_pages * sizeof *kv->free_list);
    if (!kv->k || !kv->v || !kv->refcount || !kv->free_list) {
        smol_kv_deinit(kv);
        return smol_errf(err, SMOL_ENOMEM, "kv cache: cannot allocate %d pages (%.1f MiB)", n_pages,
                         2.0 * kv->layer_bytes * n_layers / 1048576.0);
    }
    /* pop order 0, 1, 2, ... keeps early sequences in low memory */
    for (int i = 0; i < n_pages; i++) kv->free_list[i] = n_pages - 1 - i;
    kv->n_free = n_pages;
    return SMOL_OK;
}

enum smol_err smol_kv_init_fit(struct smol_kv *kv, struct smol_backend *be, int n_layers, int n_kv_heads,
                               int head_dim, uint32_t type, size_t want, size_t floor, size_t spare, size_t *got,
                               char *err)
{
    const size_t per_page = smol_kv_bytes_per_token(n_layers, n_kv_heads, head_dim, type) * SMOL_KV_PAGE;
    if (floor < per_page) floor = per_page;
    for (size_t budget = want > floor ? want : floor;; budget = budget / 2 > floor ? budget / 2 : floor) {
        size_t pages = budget / per_page;
        if (pages > (1u << 30)) pages = 1u << 30;
        enum smol_err e = smol_kv_init(kv, be, n_layers, n_kv_heads, head_dim, type, (int)pages, err);
        if (e && (e != SMOL_ENOMEM || budget == floor)) return e;
        if (!e) {
            void *probe = budget == floor || !spare ? NULL : be->alloc(be, spare);
            if (probe || budget == floor || !spare) {
                if (probe) be->free(be, probe);
                *got = budget;
                return SMOL_OK;
            }
            smol_kv_deinit(kv);
        }
    }
}

void smol_kv_deinit(struct smol_kv *kv)
{
    if (kv->be) {
        if (kv->k) kv->be->free(kv->be, kv->k);
        if (kv->v) kv->be->free(kv->be, kv->v);
    }
    free(kv->refcount);
    free(kv->free_list);
    memset(kv, 0, sizeof *kv);
}

static int page_alloc(struct smol_kv *kv)
{
    if (!kv->n_free) return -1;
    int p = kv->free_list[--kv->n_free];
    SMOL_ASSERT(kv->refcount[p] == 0);
    kv->refcount[p] = 1;
    return p;
}

static void page_release(struct smol_kv *kv, int p)
{
    SMOL_ASSERT(p >= 0 && p < kv->n_pages && kv->refcount[p] > 0);
    if (--kv->refcount[p] == 0) kv->free_list[kv->n_free++] = p;
}

void smol_kv_seq_init(struct smol_kv_seq *s) { memset(s, 0, sizeof *s); }

void smol_kv_seq_deinit(struct smol_kv *kv, struct smol_kv_seq *s)
{
    for (int i = 0; i < s->n_pages; i++) page_release(kv, s->pages[i]);
    free(s->pages);
    memset(s, 0, sizeof *s);
}

static enum smol_err table_grow(struct smol_kv_seq *s, int n, char *err)
{
    if (n <= s->cap_pages) return SMOL_OK;
    int cap = s->cap_pages ? s->cap_pages : 8;
    while (cap < n) cap *= 2;
    int32_t *p = realloc(s->pages, (size_t)cap * sizeof *p);
    if (!p) return smol_errf(err, SMOL_ENOMEM, "kv cache: out of memory for page table");
    s->pages = p;
    s->cap_pages = cap;
    return SMOL_OK;
}

int smol_kv_seq_pages_needed(const struct smol_kv *kv, const struct smol_kv_seq *s, int from, int to)
{
    if (to <= from) return 0;
    int first = from / SMOL_KV_PAGE, last = (to - 1) / SMOL_KV_PAGE, need = 0;
    for (int i = first; i <= last; i++)
        if (i >= s->n_pages || kv->refcount[s->pages[i]] > 1) need++;
    return need;
}

enum smol_err smol_kv_seq_reserve(struct smol_kv *kv, struct smol_kv_seq *s, int from, int to, char *err)
{
    if (to <= from) return SMOL_OK;
    int need = smol_kv_seq_pages_needed(kv, s, from, to);
    if (need > kv->n_free)
        return smol_errf(err, SMOL_EBUSY, "kv cache full: need %d more pages of %d tokens, %d free of %d", need,
                         SMOL_KV_PAGE, kv->n_free, kv->n_pages);
    int last = (to - 1) / SMOL_KV_PAGE;
    enum smol_err e = table_grow(s, last + 1, err);
    if (e) return e;
    for (int i = from / SMOL_KV_PAGE; i <= last; i++) {
        if (i >= s->n_pages) {
            SMOL_ASSERT(i == s->n_pages);
            s->pages[s->n_pages++] = page_alloc(kv);
        } else if (kv->refcount[s->pages[i]] > 1) { /* copy-on-write */
            int p = page_alloc(kv);
            kv->be->kv_copy_page(kv->be, kv, p, s->pages[i]);
            page_release(kv, s->pages[i]);
            s->pages[i] = p;
        }
    }
    return SMOL_OK;
}

void smol_kv_seq_truncate(struct smol_kv *kv, struct smol_kv_seq *s, int n)
{
    if (n < 0) n = 0;
    if (n > s->n_tokens) n = s->n_tokens;
    int keep = smol_kv_pages_for(n);
    while (s->n_pages > keep) page_release(kv, s->pages[--s->n_pages]);
    s->n_tokens = n;
}

enum smol_err smol_kv_seq_share(struct smol_kv *kv, struct smol_kv_seq *dst, const struct smol_kv_seq *src,
                                int n, char *err)
{
    SMOL_ASSERT(dst->n_pages == 0 && dst != src);
    if (n > src->n_tokens) n = src->n_tokens;
    int np = smol_kv_pages_for(n);
    enum smol_err e = table_grow(dst, np, err);
    if (e) return e;
    for (int i = 0; i < np; i++) {
        dst->pages[i] = src->pages[i];
        kv->refcount[src->pages[i]]++;
    }
    dst->n_pages = np;
    dst->n_tokens = n;
    return SMOL_OK;
}

/* ---- page copies to and from the host (persistence) ---------------------------- */

void smol_kv_page_read(const struct smol_kv *kv, int page, void *dst)
{
    SMOL_ASSERT(page >= 0 && page < kv->n_pages);
    char *d = dst;
    for (int l = 0; l < kv->n_layers; l++) {
        size_t off = (size_t)l * kv->layer_bytes + (size_t)page * kv->page_bytes;
        kv->be->to_host(kv->be, d, (const char *)kv->k + off, kv->page_bytes);
        d += kv->page_bytes;
        kv->be->to_host(kv->be, d, (const char *)kv->v + off, kv->page_bytes);
        d += kv->page_bytes;
    }
}

enum smol_err smol_kv_page_write(struct smol_kv *kv, int page, const void *src, char *err)
{
    SMOL_ASSERT(page >= 0 && page < kv->n_pages);
    if (!kv->be->from_host) return smol_errf(err, SMOL_EINVAL, "kv cache: backend %s cannot load pages", kv->be->name);
    const char *s = src;
    for (int l = 0; l < kv->n_layers; l++) {
        size_t off = (size_t)l * kv->layer_bytes + (size_t)page * kv->page_bytes;
        kv->be->from_host(kv->be, (char *)kv->k + off, s, kv->page_bytes);
        s += kv->page_bytes;
        kv->be->from_host(kv->be, (char *)kv->v + off, s, kv->page_bytes);
        s += kv->page_bytes;
    }
    return SMOL_OK;
}
