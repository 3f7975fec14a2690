/*
 * spill_format.c - the file format (spill.h, Format): names and keys, the
 * record header (read, checked, hashed; version 1 files read as one base
 * record), the model's identity, and the replay of a file's records into
 * the state they add up to.  Pure functions of their arguments and the
 * bytes given (but smol_spill_now_ns, smol_spill_read_full and
 * smol_spill_write_full): any thread may call them.
 */
#include "daemon/server/spill_internal.h"
#include "daemon/server/log.h"
#include "daemon/text/text.h"
#include "daemon/model/rules.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

_Static_assert(sizeof(struct smol_spill_header) == 176, "spill header layout");
_Static_assert(offsetof(struct smol_spill_header, tok_from) == V1_HEADER_BYTES - 8, "v1 prefix of the header");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "spill files are little-endian");

void smol_spill_written_deinit(struct written *w)
{
    free(w->tokens);
    free(w->msg_hash);
    memset(w, 0, sizeof *w);
}

/* ---- names --------------------------------------------------------------------------------- */

void smol_spill_file_name(const char *id, char out[NAME_LEN + 1])
{
    XXH128_hash_t h = XXH3_128bits(id, strlen(id));
    snprintf(out, NAME_LEN + 1, "%016llx%016llx.kv", (unsigned long long)h.high64, (unsigned long long)h.low64);
}

void smol_spill_key(const char *tenant, const char *id, char out[SMOL_SPILL_KEY_MAX + 1])
{
    if (tenant[0]) snprintf(out, SMOL_SPILL_KEY_MAX + 1, "%s/%s", tenant, id);
    else snprintf(out, SMOL_SPILL_KEY_MAX + 1, "%s", id);
}

/* Splits a key into its tenant and id (pointing into key); 0, or -1 when
 * the tenant is not one smol_rule_tenant accepts. */
int smol_spill_split_key(const char *key, char tenant[SMOL_RULE_TENANT_MAX + 1], const char **id)
{
    const char *slash = strchr(key, '/');
    tenant[0] = 0;
    *id = key;
    if (!slash) return 0;
    if ((size_t)(slash - key) > SMOL_RULE_TENANT_MAX) return -1;
    memcpy(tenant, key, (size_t)(slash - key));
    tenant[slash - key] = 0;
    *id = slash + 1;
    return tenant[0] && smol_tenant_ok(tenant) ? 0 : -1;
}

/* 1 if the cached prefix of key belongs to tenant */
int smol_spill_key_of_tenant(const char *key, const char *tenant)
{
    char t[SMOL_RULE_TENANT_MAX + 1];
    const char *id;
    return !smol_spill_split_key(key, t, &id) && !strcmp(t, tenant);
}

int smol_spill_is_our_name(const char *n)
{
    if (strlen(n) != NAME_LEN || strcmp(n + 32, ".kv")) return 0;
    for (int i = 0; i < 32; i++)
        if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f'))) return 0;
    return 1;
}

int64_t smol_spill_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- header ------------------------------------------------------------------------ */

uint64_t smol_spill_header_hash(const struct smol_spill_header *h)
{
    return XXH3_64bits(h, offsetof(struct smol_spill_header, header_hash));
}


/* Reads the record header at b (n bytes available) into h: NULL, or why
 * it is not one.  A version 1 header (a whole file's) is read as the base
 * record it is (header_bytes stays 136: its payload follows there). */
const char *smol_spill_read_header(const unsigned char *b, uint64_t n, struct smol_spill_header *h)
{
    if (n < 16) return "truncated (shorter than the header)";
    if (memcmp(b, SMOL_SPILL_MAGIC, 8)) return "not a smollm3d KV file (bad magic)";
    uint32_t v;
    memcpy(&v, b + 8, 4);
    if (v == 1) {
        uint64_t hh;
        if (n < V1_HEADER_BYTES) return "truncated (shorter than the header)";
        memcpy(&hh, b + V1_HEADER_BYTES - 8, 8);
        if (hh != XXH3_64bits(b, V1_HEADER_BYTES - 8)) return "header checksum mismatch";
        memset(h, 0, sizeof *h);
        memcpy(h, b, V1_HEADER_BYTES - 8);
        if (h->header_bytes != V1_HEADER_BYTES) return "header checksum mismatch";
        h->flags |= SMOL_SPILL_F_BASE | (h->msgs_len ? SMOL_SPILL_F_MSGS : 0);
        h->seq = 1;
        h->header_hash = smol_spill_header_hash(h);
        return NULL;
    }
    if (v != SMOL_SPILL_VERSION) return "another format version";
    if (n < sizeof *h) return "truncated (shorter than the header)";
    memcpy(h, b, sizeof *h);
    if (h->header_bytes != sizeof *h || h->header_hash != smol_spill_header_hash(h)) return "header checksum mismatch";
    return NULL;
}

/* NULL if h (read_header) is a record of ours for this model and kv
 * (foreign: of any model, KV type and geometry); else why not. */
const char *smol_spill_check_header(const struct smol_spill *sp, const struct smol_spill_header *h,
                                    const struct smol_kv *kv, int foreign)
{
    /* the type before the model: the model id covers q8_0's rotation */
    if (!foreign && h->kv_type != kv->type) return "another KV type or geometry";
    if (!foreign && memcmp(h->model_id, sp->model_id, 16))
        return "written for another model (or RoPE settings, or KV rotation)";
    if (!foreign && (h->n_layers != (uint32_t)kv->n_layers || h->n_kv_heads != (uint32_t)kv->n_kv_heads ||
                     h->head_dim != (uint32_t)kv->head_dim || h->page_tokens != SMOL_KV_PAGE))
        return "another KV type or geometry";
    if (h->id_len == 0 || h->id_len > SMOL_SPILL_KEY_MAX || h->n_kv > h->n_tokens || h->n_tokens > (1u << 26) ||
        h->reserved || memchr(h->date, 0, sizeof h->date) == NULL || h->tok_from > h->n_tokens ||
        h->hist_from > h->hist_len || (uint64_t)h->page_from * SMOL_KV_PAGE > h->tok_from ||
        (int)h->page_from > smol_kv_pages_for((int)h->n_kv) || (!(h->flags & SMOL_SPILL_F_MSGS) && h->msgs_len) ||
        ((h->flags & SMOL_SPILL_F_BASE) && (h->tok_from || h->page_from || h->hist_from || h->msgs_from)))
        return "inconsistent header";
    const uint64_t head = (uint64_t)h->id_len + 4ull * (h->n_tokens - h->tok_from) + (h->hist_len - h->hist_from) +
                          h->msgs_len;
    if (foreign ? h->payload_bytes < head
                : h->payload_bytes != head + (uint64_t)(smol_kv_pages_for((int)h->n_kv) - (int)h->page_from) *
                                                 smol_kv_page_host_bytes(kv))
        return "inconsistent payload size";
    return NULL;
}

/* ---- model identity ------------------------------------------------------------------ */

void smol_spill_model_id(const struct smol_model *m, uint8_t out[16])
{
    XXH3_state_t *st = XXH3_createState();
    SMOL_ASSERT(st);
    XXH3_128bits_reset(st);
    const struct smol_gguf *g = m->gguf;
    size_t n = g->data_offset < g->size ? (size_t)g->data_offset : g->size;
    XXH3_128bits_update(st, g->base, n);
    const struct smol_rope_params *r = &m->rope;
    float f[6] = {r->freq_base, r->freq_scale, r->ext_factor, r->attn_factor, r->corr_dims[0], r->corr_dims[1]};
    int32_t d = r->n_dims;
    XXH3_128bits_update(st, &d, sizeof d);
    XXH3_128bits_update(st, f, sizeof f);
    /* a q8_0 cache's rows are rotated (kv.h): a file of unrotated q8_0 rows,
     * from before the rotation, must not load (f16 and f32 ids unchanged) */
    int32_t rot[2] = {m->kv.rot_k, m->kv.rot_v};
    if (rot[0] || rot[1]) XXH3_128bits_update(st, rot, sizeof rot);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
    memcpy(out, c.digest, 16);
    XXH3_freeState(st);
}

int64_t smol_spill_mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* ---- file I/O ------------------------------------------------------------------------------ */

int smol_spill_read_full(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

int smol_spill_write_full(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t r = write(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) errno = EIO; /* no progress: not an error the kernel named */
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

void smol_spill_prefix_id(const int32_t *tokens, int n, char out[SMOL_SPILL_PREFIX_ID_LEN + 1])
{
    XXH128_hash_t h = XXH3_128bits(tokens, (size_t)n * sizeof *tokens);
    snprintf(out, SMOL_SPILL_PREFIX_ID_LEN + 1, SMOL_SPILL_PREFIX_ID "%016llx%016llx", (unsigned long long)h.high64,
             (unsigned long long)h.low64);
}

void smol_spill_replay_deinit(struct replay *r)
{
    free(r->tokens);
    free(r->hist);
    if (r->msgs) json_decref(r->msgs);
    free(r->page);
    memset(r, 0, sizeof *r);
}

/* Applies the record at b (n bytes available; trusted: an image of ours,
 * not checksummed yet).  0 applied; 1 skipped (an image of a record the
 * file already holds); -1 not applied, *why set (incomplete, a checksum,
 * does not follow); -2 another key; -3 out of memory. */
int smol_spill_replay_one(struct smol_spill *sp, const struct smol_kv *kv, struct replay *r, const unsigned char *b,
                          uint64_t n, int trusted, int foreign, const char *key, const char **why)
{
    struct smol_spill_header h;
    if (trusted) { /* (the writer sets the hashes on its copy) */
        memcpy(&h, b, sizeof h);
        h.header_hash = smol_spill_header_hash(&h);
    } else if ((*why = smol_spill_read_header(b, n, &h))) {
        return -1;
    }
    if ((*why = smol_spill_check_header(sp, &h, kv, foreign))) return -1;
    if (h.header_bytes + h.payload_bytes > n) { *why = "truncated"; return -1; }
    const int base = !!(h.flags & SMOL_SPILL_F_BASE);
    if (r->n_rec && !base && (h.file_id != r->file_id || h.seq != r->seq + 1)) {
        if (trusted && h.file_id == r->file_id && h.seq <= r->seq) return 1;
        *why = "a record that does not follow";
        return -1;
    }
    if (!r->n_rec && !base) { *why = "no base record"; return -1; }
    if (!base && (h.tok_from > r->n_tokens || h.hist_from > r->hist_len || h.page_from > r->n_pages ||
                  h.msgs_from > (r->msgs ? json_array_size(r->msgs) : 0))) {
        *why = "a record that does not follow";
        return -1;
    }
    const unsigned char *pl = b + h.header_bytes;
    if (!trusted && XXH3_64bits(pl, h.payload_bytes) != h.payload_hash) { *why = "payload checksum mismatch"; return -1; }
    if (h.id_len != strlen(key) || memcmp(pl, key, h.id_len)) return -2;
    pl += h.id_len;
    json_t *add = NULL;
    const unsigned char *mp = pl + 4ull * (h.n_tokens - h.tok_from) + (h.hist_len - h.hist_from);
    if ((h.flags & SMOL_SPILL_F_MSGS) && (!(add = json_loadb((const char *)mp, h.msgs_len, 0, NULL)) || !json_is_array(add))) {
        if (add) json_decref(add);
        *why = "bad messages JSON";
        return -1;
    }
    const uint32_t n_pages = foreign ? 0 : (uint32_t)smol_kv_pages_for((int)h.n_kv);
    int32_t *tok = realloc(r->tokens, 4ull * h.n_tokens + 4);
    char *hist = tok ? realloc(r->hist, (size_t)h.hist_len + 1) : NULL;
    const unsigned char **pg = hist ? realloc(r->page, (size_t)n_pages * sizeof *pg + 1) : NULL;
    if (tok) r->tokens = tok;
    if (hist) r->hist = hist;
    if (!pg) {
        if (add) json_decref(add);
        return -3;
    }
    r->page = pg;
    memcpy(r->tokens + h.tok_from, pl, 4ull * (h.n_tokens - h.tok_from));
    pl += 4ull * (h.n_tokens - h.tok_from);
    memcpy(r->hist + h.hist_from, pl, h.hist_len - h.hist_from);
    pl += h.hist_len - h.hist_from + h.msgs_len;
    json_t *m = NULL;
    if (add) {
        m = json_array();
        for (uint32_t i = 0; m && i < h.msgs_from; i++) json_array_append(m, json_array_get(r->msgs, i));
        if (m) json_array_extend(m, add);
        json_decref(add);
        if (!m) return -3;
    }
    if (r->msgs) json_decref(r->msgs);
    r->msgs = m;
    const size_t pb = smol_kv_page_host_bytes(kv);
    for (uint32_t i = foreign ? n_pages : h.page_from; i < n_pages; i++, pl += pb) r->page[i] = pl;
    r->n_pages = n_pages;
    r->n_tokens = h.n_tokens;
    r->hist_len = h.hist_len;
    r->end = (base ? 0 : r->end) + h.header_bytes + h.payload_bytes;
    r->file_id = h.file_id;
    r->seq = h.seq;
    r->last = h;
    r->n_rec++;
    return 0;
}

void smol_spill_record_deinit(struct smol_spill_record *rec)
{
    free(rec->tokens);
    rec->tokens = NULL;
    rec->n_tokens = 0;
    free(rec->hist_text);
    rec->hist_text = NULL;
    rec->hist_len = 0;
    if (rec->msgs) json_decref(rec->msgs);
    rec->msgs = NULL;
}
