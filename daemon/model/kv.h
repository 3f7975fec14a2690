/*
 * kv.h - the paged KV cache: a fixed pool of pages allocated once against a
 * memory budget, and per-sequence page tables.
 *
 * A page holds SMOL_KV_PAGE consecutive positions of one sequence, for every
 * layer, K and V.  Storage layout (owned by the backend, host or device):
 *     k[layer][page][kv_head][slot][head_dim]    (same for v)
 * so one head's keys within a page are contiguous for attention.  A row
 * (one head, one position) is head_dim elements of the KV type: f32, f16,
 * or q8_0 (head_dim / 32 blocks of 34 bytes, llama.cpp's q8_0 KV cache:
 * quantized when stored, read directly by the attention kernels).
 *
 * A q8_0 cache holds K and V rotated by a Walsh-Hadamard matrix, as
 * llama.cpp's does (its attn_rot_k / attn_rot_v): forward() rotates Q and K
 * after RoPE in groups of rot_k elements (the largest power of two >= 64
 * dividing head_dim: Q.K is unchanged), V in groups of rot_v = 64 and the
 * attention output back with the same matrix (H = H^-1).  The rotation
 * spreads a head's outlier channels over the whole block, so that one large
 * element no longer sets a coarse scale for its 31 neighbours: on
 * SmolLM2-135M it cuts the logits' KL from q8_0 KV by a sixth (daemon/README.md, KV
 * cache types).  Heads that are not a multiple of 64 are stored unrotated.
 * Pages are reference counted: a new sequence can share the full pages of a
 * cached prefix (prefix reuse); a shared page is copied before it is
 * written (copy-on-write in smol_kv_seq_reserve).  All bookkeeping is host
 * side and backend-agnostic; the backend does the page copies.
 *
 * Owned by the engine thread; not thread-safe.
 */
#ifndef SMOL_KV_H
#define SMOL_KV_H

#include <stddef.h>
#include <stdint.h>
#include "daemon/model/error.h"

#define SMOL_KV_PAGE 32 /* positions per page */

struct smol_backend;

struct smol_kv {
    int n_layers, n_kv_heads, head_dim;
    uint32_t type;              /* SMOL_TYPE_F16 (default), SMOL_TYPE_F32 or SMOL_TYPE_Q8_0 */
    int rot_k, rot_v;           /* Hadamard group sizes of the stored K (and Q), V rows; 0 = not rotated */
    size_t row_bytes;           /* one head's row: smol_kv_row_bytes(head_dim, type) */
    int n_pages;                /* pool size */
    size_t page_bytes;          /* one layer's K (or V) page: n_kv_heads * PAGE * row_bytes */
    size_t layer_bytes;         /* n_pages * page_bytes */
    void *k, *v;                /* backend storage, n_layers * layer_bytes each */
    int32_t *refcount;          /* [n_pages]; 0 = free */
    int32_t *free_list;         /* [n_pages] stack of free page ids */
    int n_free;
    struct smol_backend *be;    /* allocates storage, copies pages */
};

struct smol_kv_seq {
    int32_t n_tokens;           /* positions [0, n_tokens) hold valid K/V */
    int32_t n_pages;            /* pages in the table */
    int32_t cap_pages;          /* allocated table length */
    int32_t *pages;             /* [cap_pages] page ids */
};

/* Bytes of one head's row of head_dim elements in a KV type (0: not a KV
 * type, or q8_0 with head_dim not a multiple of 32). */
size_t smol_kv_row_bytes(int head_dim, uint32_t type);
/* Bytes of KV storage per token for this geometry (K and V, all layers). */
size_t smol_kv_bytes_per_token(int n_layers, int n_kv_heads, int head_dim, uint32_t type);
/* The Hadamard group sizes a cache of this type rotates K (and Q) and V by
 * (see above; 0 = none). */
void smol_kv_rot(int head_dim, uint32_t type, int *rot_k, int *rot_v);
/* The KV type named "f32", "f16" or "q8_0" (the kv_type option, --kv-type);
 * SMOL_EINVAL naming the choices otherwise. */
enum smol_err smol_kv_type_parse(const char *name, uint32_t *type, char *err);

/* Allocates a pool of n_pages through the backend. */
enum smol_err smol_kv_init(struct smol_kv *kv, struct smol_backend *be, int n_layers, int n_kv_heads,
                           int head_dim, uint32_t type, int n_pages, char *err);
/* The pool for the largest of want, want / 2, want / 4, ... bytes (never below floor, which is
 * tried last) that the backend can allocate with spare bytes more beside it (probed, then freed:
 * room for what a step allocates later); *got = its budget.  The error of the floor's try when
 * even that fails; other errors than SMOL_ENOMEM at once. */
enum smol_err smol_kv_init_fit(struct smol_kv *kv, struct smol_backend *be, int n_layers, int n_kv_heads,
                               int head_dim, uint32_t type, size_t want, size_t floor, size_t spare, size_t *got,
                               char *err);
void smol_kv_deinit(struct smol_kv *kv);

static inline int smol_kv_pages_for(int n_tokens) { return (n_tokens + SMOL_KV_PAGE - 1) / SMOL_KV_PAGE; }

void smol_kv_seq_init(struct smol_kv_seq *s);
/* Releases all pages and the table. */
void smol_kv_seq_deinit(struct smol_kv *kv, struct smol_kv_seq *s);
/* Makes positions [from, to) writable: allocates missing pages and copies
 * shared ones.  SMOL_EBUSY if the pool runs out (nothing changed then). */
enum smol_err smol_kv_seq_reserve(struct smol_kv *kv, struct smol_kv_seq *s, int from, int to, char *err);
/* Forgets positions >= n (n <= n_tokens), releasing pages no longer needed. */
void smol_kv_seq_truncate(struct smol_kv *kv, struct smol_kv_seq *s, int n);
/* dst (empty) takes the first n positions of src, sharing pages. */
enum smol_err smol_kv_seq_share(struct smol_kv *kv, struct smol_kv_seq *dst, const struct smol_kv_seq *src,
                                int n, char *err);
/* Copies page `page` of the pool, all layers, to host memory: dst holds
 * smol_kv_page_host_bytes(kv) bytes, laid out [layer][K, V][page_bytes]. */
static inline size_t smol_kv_page_host_bytes(const struct smol_kv *kv) { return 2 * (size_t)kv->n_layers * kv->page_bytes; }
void smol_kv_page_read(const struct smol_kv *kv, int page, void *dst);
/* The reverse: host bytes (same layout) into page `page`.  SMOL_EINVAL when
 * the backend cannot write its memory from the host. */
enum smol_err smol_kv_page_write(struct smol_kv *kv, int page, const void *src, char *err);
/* Pages that reserving [from, to) of s would take from the pool. */
int smol_kv_seq_pages_needed(const struct smol_kv *kv, const struct smol_kv_seq *s, int from, int to);

#endif
