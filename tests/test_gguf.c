/*
 * test_gguf.c - the GGUF reader against valid files, the real fixture and
 * hostile input.
 *
 * Files are built in memory by a small writer (struct wbuf) that records
 * where each key, tensor info and tensor's data starts, so a test can cut or
 * corrupt a file at a chosen byte and predict which key or tensor the error
 * message must name.  The valid file holds a key of every value type, arrays
 * of every element type (strings included), tensors of several types and
 * ranks, a custom general.alignment with padding, and no trailing bytes, so
 * that every proper prefix of it is invalid.
 *
 * Hostile inputs must come back as SMOL_EFORMAT / SMOL_EUNSUPPORTED (SMOL_EIO
 * for paths) with a message naming the bad key or tensor; the suite runs
 * under CK_FORK, so a crash is a failure, and under ASan/UBSan via
 * `make asan`.
 */
#include "daemon/model/gguf.h"
#include "kernels/quant_ref.h"

#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- writer */

#define MAX_ITEMS 64

struct wbuf {
    uint8_t *p;
    size_t n, cap;
    /* byte offsets recorded by the valid-file builder */
    int n_keys, n_tensors;
    size_t key_at[MAX_ITEMS], key_val_at[MAX_ITEMS];    /* entry start, value start (after key) */
    char key_name[MAX_ITEMS][64];
    size_t ti_at[MAX_ITEMS], ti_body_at[MAX_ITEMS];     /* info start, after name */
    char ti_name[MAX_ITEMS][64];
    size_t infos_end, data_at;
    uint64_t t_off[MAX_ITEMS], t_size[MAX_ITEMS];
};

static void put(struct wbuf *w, const void *src, size_t n)
{
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2 + 256;
        w->p = realloc(w->p, w->cap);
        ck_assert_ptr_nonnull(w->p);
    }
    memcpy(w->p + w->n, src, n);
    w->n += n;
}
static void put_u8(struct wbuf *w, uint8_t v) { put(w, &v, 1); }
static void put_u16(struct wbuf *w, uint16_t v) { put(w, &v, 2); }
static void put_u32(struct wbuf *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(struct wbuf *w, uint64_t v) { put(w, &v, 8); }
static void put_f32(struct wbuf *w, float v) { put(w, &v, 4); }
static void put_f64(struct wbuf *w, double v) { put(w, &v, 8); }
static void put_str(struct wbuf *w, const char *s) { put_u64(w, strlen(s)); put(w, s, strlen(s)); }
static void pad_to(struct wbuf *w, size_t align) { while (w->n % align) put_u8(w, 0); }
static void wfree(struct wbuf *w) { free(w->p); memset(w, 0, sizeof *w); }

static void header(struct wbuf *w, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    put(w, "GGUF", 4);
    put_u32(w, version);
    put_u64(w, n_tensors);
    put_u64(w, n_kv);
}

/* Starts a key: records it, writes the name and the value type. */
static void key(struct wbuf *w, const char *name, uint32_t type)
{
    if (w->n_keys < MAX_ITEMS) {
        w->key_at[w->n_keys] = w->n;
        snprintf(w->key_name[w->n_keys], sizeof w->key_name[0], "%s", name);
    }
    put_str(w, name);
    if (w->n_keys < MAX_ITEMS) w->key_val_at[w->n_keys] = w->n;
    w->n_keys++;
    put_u32(w, type);
}

static void arr_hdr(struct wbuf *w, const char *name, uint32_t elem, uint64_t n)
{
    key(w, name, SMOL_GGUF_ARRAY);
    put_u32(w, elem);
    put_u64(w, n);
}

static void tinfo(struct wbuf *w, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off)
{
    if (w->n_tensors < MAX_ITEMS) {
        w->ti_at[w->n_tensors] = w->n;
        snprintf(w->ti_name[w->n_tensors], sizeof w->ti_name[0], "%s", name);
    }
    put_str(w, name);
    if (w->n_tensors < MAX_ITEMS) w->ti_body_at[w->n_tensors] = w->n;
    w->n_tensors++;
    put_u32(w, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) put_u64(w, ne[d]);
    put_u32(w, type);
    put_u64(w, off);
}

/* The valid file: every value type, arrays, 5 tensors.  align 0 = no
 * general.alignment key (default 32). */
#define VALID_TENSORS 5
static const struct {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;
    uint64_t size;
} vt[VALID_TENSORS] = {
    {"w.f32", 2, {4, 2}, SMOL_TYPE_F32, 32},
    {"w.f16", 2, {2, 3}, SMOL_TYPE_F16, 12},
    {"blk.0.q8_0", 2, {32, 2}, SMOL_TYPE_Q8_0, 68},
    {"blk.0.q4_K", 1, {256}, SMOL_TYPE_Q4_K, 144},
    {"w.4d", 4, {1, 2, 1, 2}, SMOL_TYPE_F32, 16},
};
#define VALID_KEYS 29

static void build_valid(struct wbuf *w, uint32_t version, uint32_t align)
{
    memset(w, 0, sizeof *w);
    header(w, version, VALID_TENSORS, VALID_KEYS - (align ? 0 : 1));
    key(w, "general.architecture", SMOL_GGUF_STRING); put_str(w, "smollm3");
    if (align) { key(w, "general.alignment", SMOL_GGUF_U32); put_u32(w, align); }
    key(w, "t.u8", SMOL_GGUF_U8); put_u8(w, 200);
    key(w, "t.i8", SMOL_GGUF_I8); put_u8(w, (uint8_t)-100);
    key(w, "t.u16", SMOL_GGUF_U16); put_u16(w, 60000);
    key(w, "t.i16", SMOL_GGUF_I16); put_u16(w, (uint16_t)-30000);
    key(w, "t.u32", SMOL_GGUF_U32); put_u32(w, 4000000000u);
    key(w, "t.i32", SMOL_GGUF_I32); put_u32(w, (uint32_t)-2000000000);
    key(w, "t.f32", SMOL_GGUF_F32); put_f32(w, 1.5f);
    key(w, "t.bool", SMOL_GGUF_BOOL); put_u8(w, 1);
    key(w, "t.str", SMOL_GGUF_STRING); put_str(w, "h\xc3\xa9llo \"w\"\n");
    key(w, "t.u64", SMOL_GGUF_U64); put_u64(w, (1ull << 63) + 5);
    key(w, "t.i64", SMOL_GGUF_I64); put_u64(w, (uint64_t)-(1ll << 40));
    key(w, "t.f64", SMOL_GGUF_F64); put_f64(w, 2.25);
    key(w, "t.f64big", SMOL_GGUF_F64); put_f64(w, 1e300);
    arr_hdr(w, "a.u8", SMOL_GGUF_U8, 3); put_u8(w, 1); put_u8(w, 2); put_u8(w, 255);
    arr_hdr(w, "a.i8", SMOL_GGUF_I8, 2); put_u8(w, (uint8_t)-1); put_u8(w, 2);
    arr_hdr(w, "a.u16", SMOL_GGUF_U16, 1); put_u16(w, 65535);
    arr_hdr(w, "a.i16", SMOL_GGUF_I16, 2); put_u16(w, (uint16_t)-32768); put_u16(w, 5);
    arr_hdr(w, "a.u32", SMOL_GGUF_U32, 2); put_u32(w, 7); put_u32(w, 4294967295u);
    arr_hdr(w, "a.i32", SMOL_GGUF_I32, 3); put_u32(w, 1); put_u32(w, (uint32_t)-2); put_u32(w, 3);
    arr_hdr(w, "a.f32", SMOL_GGUF_F32, 4); put_f32(w, 0.5f); put_f32(w, -1.0f); put_f32(w, NAN); put_f32(w, INFINITY);
    arr_hdr(w, "a.bool", SMOL_GGUF_BOOL, 3); put_u8(w, 1); put_u8(w, 0); put_u8(w, 1);
    arr_hdr(w, "a.u64", SMOL_GGUF_U64, 1); put_u64(w, UINT64_MAX);
    arr_hdr(w, "a.i64", SMOL_GGUF_I64, 2); put_u64(w, (uint64_t)-5); put_u64(w, 1ull << 62);
    arr_hdr(w, "a.f64", SMOL_GGUF_F64, 2); put_f64(w, 2.5); put_f64(w, -1e300);
    arr_hdr(w, "a.str", SMOL_GGUF_STRING, 4); put_str(w, "a"); put_str(w, "bc"); put_str(w, ""); put_str(w, "d");
    arr_hdr(w, "a.empty", SMOL_GGUF_I32, 0);
    arr_hdr(w, "a.empty_str", SMOL_GGUF_STRING, 0);

    uint32_t a = align ? align : SMOL_GGUF_DEFAULT_ALIGNMENT;
    uint64_t off = 0;
    for (int i = 0; i < VALID_TENSORS; i++) {
        off = (off + a - 1) / a * a;
        w->t_off[i] = off;
        w->t_size[i] = vt[i].size;
        tinfo(w, vt[i].name, vt[i].n_dims, vt[i].ne, vt[i].type, off);
        off += vt[i].size;
    }
    w->infos_end = w->n;
    pad_to(w, a);
    w->data_at = w->n;
    for (int i = 0; i < VALID_TENSORS; i++) {
        while (w->n < w->data_at + w->t_off[i]) put_u8(w, 0);
        for (uint64_t j = 0; j < vt[i].size; j++) put_u8(w, (uint8_t)(i * 40 + j));
    }
    /* no trailing padding: the last tensor ends at EOF, so every prefix is invalid */
}

/* ---------------------------------------------------------------- helpers */

static char err[SMOL_ERRLEN];

static enum smol_err parse_buf(const struct wbuf *w, struct smol_gguf **g)
{
    err[0] = 0;
    return smol_gguf_open_mem(g, w->p, w->n, err);
}

/* Parses w, expects code and every needle (NULL-terminated list) in the message. */
static void expect_fail_v(const struct wbuf *w, enum smol_err code, const char *const *needles)
{
    struct smol_gguf *g = (struct smol_gguf *)1;
    enum smol_err e = parse_buf(w, &g);
    ck_assert_msg(e == code, "expected %s, got %s: %s", smol_err_name(code), smol_err_name(e), err);
    ck_assert_ptr_null(g);
    for (; *needles; needles++)
        ck_assert_msg(strstr(err, *needles), "message '%s' lacks '%s'", err, *needles);
}
#define expect_fail(w, code, ...) expect_fail_v((w), (code), (const char *const[]){__VA_ARGS__, NULL})

/* Walks a parsed file the way a loader would; ASan catches a stray pointer. */
static void walk(const struct smol_gguf *g)
{
    volatile uint64_t sink = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const struct smol_gguf_kv *kv = &g->kv[i];
        ck_assert_ptr_eq(smol_gguf_find_kv(g, kv->key), kv);
        if (kv->type == SMOL_GGUF_STRING)
            for (uint64_t j = 0; j < kv->str.len; j++) sink += (uint8_t)kv->str.ptr[j];
        if (kv->type != SMOL_GGUF_ARRAY) continue;
        for (uint64_t j = 0; j < kv->arr_n; j++) {
            if (kv->arr_type == SMOL_GGUF_STRING) {
                for (uint64_t k = 0; k < kv->arr_strs[j].len; k++) sink += (uint8_t)kv->arr_strs[j].ptr[k];
            } else {
                sink += (uint64_t)smol_gguf_arr_int(kv, j);
                sink += (uint64_t)isnan(smol_gguf_arr_float(kv, j));
            }
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct smol_gguf_tensor *t = &g->tensors[i];
        ck_assert_ptr_eq(smol_gguf_find_tensor(g, t->name), t);
        ck_assert_ptr_nonnull(smol_type_traits(t->type));
        const uint8_t *p = t->data;
        ck_assert(p >= g->base && t->size <= g->size && p - g->base <= (ptrdiff_t)(g->size - t->size));
        if (t->size) sink += p[0] + p[t->size - 1];
    }
}

static const char *fixture_path(void)
{
    static const char *const c[] = {"tests/fixtures/models/fixture-a.Q4_K_M.gguf",
                                    "../tests/fixtures/models/fixture-a.Q4_K_M.gguf",
                                    "../../tests/fixtures/models/fixture-a.Q4_K_M.gguf"};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        if (access(c[i], R_OK) == 0) return c[i];
    return NULL;
}

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* ---------------------------------------------------------------- valid files */

static void check_valid(uint32_t version, uint32_t align)
{
    struct wbuf w;
    struct smol_gguf *g;
    build_valid(&w, version, align);
    ck_assert_msg(parse_buf(&w, &g) == SMOL_OK, "%s", err);
    uint32_t a = align ? align : 32;
    ck_assert_uint_eq(g->version, version);
    ck_assert_uint_eq(g->alignment, a);
    ck_assert_uint_eq(g->n_kv, VALID_KEYS - (align ? 0 : 1));
    ck_assert_uint_eq(g->n_tensors, VALID_TENSORS);
    ck_assert_uint_eq(g->data_offset, w.data_at);
    ck_assert_uint_eq(g->data_offset % a, 0);
    ck_assert_int_eq(g->mapped, 0);

    /* scalars, through the raw kv and the getters */
    const struct smol_gguf_kv *kv;
    ck_assert_ptr_nonnull(kv = smol_gguf_find_kv(g, "t.u8"));
    ck_assert_int_eq(kv->type, SMOL_GGUF_U8); ck_assert_uint_eq(kv->v.u, 200);
    ck_assert_int_eq(smol_gguf_find_kv(g, "t.i8")->v.i, -100);
    ck_assert_uint_eq(smol_gguf_find_kv(g, "t.u16")->v.u, 60000);
    ck_assert_int_eq(smol_gguf_find_kv(g, "t.i16")->v.i, -30000);
    ck_assert_uint_eq(smol_gguf_find_kv(g, "t.u32")->v.u, 4000000000u);
    ck_assert_int_eq(smol_gguf_find_kv(g, "t.i32")->v.i, -2000000000);
    ck_assert_uint_eq(smol_gguf_find_kv(g, "t.u64")->v.u, (1ull << 63) + 5);
    ck_assert_int_eq(smol_gguf_find_kv(g, "t.i64")->v.i, -(1ll << 40));
    ck_assert(smol_gguf_find_kv(g, "t.f64")->v.f == 2.25);
    ck_assert_ptr_null(smol_gguf_find_kv(g, "t.absent"));

    uint32_t u32 = 0;
    int64_t i64 = 0;
    float f = 0;
    int b = 0;
    struct smol_gguf_str s;
    ck_assert_int_eq(smol_gguf_get_u32(g, "t.u32", &u32, 1, err), SMOL_OK); ck_assert_uint_eq(u32, 4000000000u);
    ck_assert_int_eq(smol_gguf_get_u32(g, "t.u8", &u32, 1, err), SMOL_OK); ck_assert_uint_eq(u32, 200);
    ck_assert_int_eq(smol_gguf_get_u32(g, "t.i16", &u32, 1, err), SMOL_EFORMAT); /* -30000 */
    ck_assert_ptr_nonnull(strstr(err, "t.i16"));
    ck_assert_int_eq(smol_gguf_get_u32(g, "t.u64", &u32, 1, err), SMOL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "t.u64"));
    ck_assert_int_eq(smol_gguf_get_i64(g, "t.i32", &i64, 1, err), SMOL_OK); ck_assert_int_eq(i64, -2000000000);
    ck_assert_int_eq(smol_gguf_get_i64(g, "t.u64", &i64, 1, err), SMOL_EFORMAT); /* > INT64_MAX */
    ck_assert_int_eq(smol_gguf_get_i64(g, "t.f32", &i64, 1, err), SMOL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "t.f32"));
    ck_assert_int_eq(smol_gguf_get_f32(g, "t.f32", &f, 1, err), SMOL_OK); ck_assert(f == 1.5f);
    ck_assert_int_eq(smol_gguf_get_f32(g, "t.f64", &f, 1, err), SMOL_OK); ck_assert(f == 2.25f);
    ck_assert_int_eq(smol_gguf_get_f32(g, "t.f64big", &f, 1, err), SMOL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "t.f64big"));
    ck_assert_int_eq(smol_gguf_get_f32(g, "t.u32", &f, 1, err), SMOL_EFORMAT);
    ck_assert_int_eq(smol_gguf_get_bool(g, "t.bool", &b, 1, err), SMOL_OK); ck_assert_int_eq(b, 1);
    ck_assert_int_eq(smol_gguf_get_bool(g, "t.u8", &b, 1, err), SMOL_EFORMAT);
    ck_assert_int_eq(smol_gguf_get_str(g, "t.str", &s, 1, err), SMOL_OK);
    ck_assert(smol_gguf_str_eq(s, "h\xc3\xa9llo \"w\"\n"));
    ck_assert(!smol_gguf_str_eq(s, "h"));
    ck_assert_int_eq(smol_gguf_get_str(g, "general.architecture", &s, 1, err), SMOL_OK);
    ck_assert(smol_gguf_str_eq(s, "smollm3"));
    ck_assert_int_eq(smol_gguf_get_str(g, "t.u8", &s, 1, err), SMOL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "t.u8"));
    /* absent: optional leaves *out alone, required names the key */
    u32 = 77;
    ck_assert_int_eq(smol_gguf_get_u32(g, "no.such", &u32, 0, err), SMOL_OK); ck_assert_uint_eq(u32, 77);
    ck_assert_int_eq(smol_gguf_get_u32(g, "no.such", &u32, 1, err), SMOL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "no.such"));
    ck_assert_int_eq(smol_gguf_get_str(g, "no.such2", &s, 1, err), SMOL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "no.such2"));

    /* arrays */
    const struct smol_gguf_kv *a_;
    ck_assert_int_eq(smol_gguf_get_arr(g, "a.u8", SMOL_GGUF_U8, &a_, 1, err), SMOL_OK);
    ck_assert_uint_eq(a_->arr_n, 3); ck_assert_int_eq(smol_gguf_arr_int(a_, 2), 255);
    ck_assert_int_eq(smol_gguf_get_arr(g, "a.u8", SMOL_GGUF_I32, &a_, 1, err), SMOL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "a.u8")); ck_assert_ptr_null(a_);
    ck_assert_int_eq(smol_gguf_get_arr(g, "t.u8", SMOL_GGUF_VTYPE_COUNT, &a_, 1, err), SMOL_EFORMAT);
    ck_assert_int_eq(smol_gguf_get_arr(g, "no.arr", SMOL_GGUF_I32, &a_, 0, err), SMOL_OK); ck_assert_ptr_null(a_);
    ck_assert_int_eq(smol_gguf_arr_int(smol_gguf_find_kv(g, "a.i8"), 0), -1);
    ck_assert_int_eq(smol_gguf_arr_int(smol_gguf_find_kv(g, "a.u16"), 0), 65535);
    ck_assert_int_eq(smol_gguf_arr_int(smol_gguf_find_kv(g, "a.i16"), 0), -32768);
    ck_assert_int_eq(smol_gguf_arr_int(smol_gguf_find_kv(g, "a.u32"), 1), 4294967295ll);
    kv = smol_gguf_find_kv(g, "a.i32");
    ck_assert_int_eq(kv->arr_type, SMOL_GGUF_I32); ck_assert_uint_eq(kv->arr_n, 3);
    ck_assert_int_eq(smol_gguf_arr_int(kv, 1), -2); ck_assert(smol_gguf_arr_float(kv, 1) == -2.0);
    kv = smol_gguf_find_kv(g, "a.f32");
    ck_assert(smol_gguf_arr_float(kv, 0) == 0.5); ck_assert(smol_gguf_arr_float(kv, 1) == -1.0);
    ck_assert(isnan(smol_gguf_arr_float(kv, 2)));
    ck_assert_int_eq(smol_gguf_arr_int(kv, 1), -1);
    ck_assert_int_eq(smol_gguf_arr_int(kv, 2), 0);             /* NaN saturates, no UB */
    ck_assert_int_eq(smol_gguf_arr_int(kv, 3), INT64_MAX);     /* +inf saturates */
    ck_assert_int_eq(smol_gguf_arr_int(smol_gguf_find_kv(g, "a.f64"), 1), INT64_MIN);
    ck_assert(smol_gguf_arr_float(smol_gguf_find_kv(g, "a.f64"), 0) == 2.5);
    kv = smol_gguf_find_kv(g, "a.bool");
    ck_assert_int_eq(smol_gguf_arr_int(kv, 0), 1); ck_assert_int_eq(smol_gguf_arr_int(kv, 1), 0);
    ck_assert(smol_gguf_arr_float(smol_gguf_find_kv(g, "a.u64"), 0) == 18446744073709551615.0);
    kv = smol_gguf_find_kv(g, "a.i64");
    ck_assert_int_eq(smol_gguf_arr_int(kv, 0), -5); ck_assert_int_eq(smol_gguf_arr_int(kv, 1), 1ll << 62);
    ck_assert_int_eq(smol_gguf_get_arr(g, "a.str", SMOL_GGUF_STRING, &a_, 1, err), SMOL_OK);
    ck_assert_uint_eq(a_->arr_n, 4);
    ck_assert(smol_gguf_str_eq(a_->arr_strs[0], "a")); ck_assert(smol_gguf_str_eq(a_->arr_strs[1], "bc"));
    ck_assert(smol_gguf_str_eq(a_->arr_strs[2], "")); ck_assert(smol_gguf_str_eq(a_->arr_strs[3], "d"));
    ck_assert_uint_eq(smol_gguf_find_kv(g, "a.empty")->arr_n, 0);
    ck_assert_uint_eq(smol_gguf_find_kv(g, "a.empty_str")->arr_n, 0);

    /* tensor table and data pointers */
    for (int i = 0; i < VALID_TENSORS; i++) {
        const struct smol_gguf_tensor *t = smol_gguf_find_tensor(g, vt[i].name);
        ck_assert_ptr_nonnull(t);
        ck_assert_ptr_eq(t, &g->tensors[i]);
        ck_assert_str_eq(t->name, vt[i].name);
        ck_assert_uint_eq(t->type, vt[i].type);
        ck_assert_uint_eq(t->n_dims, vt[i].n_dims);
        for (int d = 0; d < 4; d++)
            ck_assert_int_eq(t->ne[d], d < (int)vt[i].n_dims ? (int64_t)vt[i].ne[d] : 1);
        ck_assert_uint_eq(t->offset, w.t_off[i]);
        ck_assert_uint_eq(t->offset % a, 0);
        ck_assert_uint_eq(t->size, vt[i].size);
        ck_assert_ptr_eq(t->data, w.p + w.data_at + w.t_off[i]);
        ck_assert_uint_eq(((const uint8_t *)t->data)[0], (uint8_t)(i * 40));
        ck_assert_uint_eq(((const uint8_t *)t->data)[t->size - 1], (uint8_t)(i * 40 + t->size - 1));
    }
    ck_assert_ptr_null(smol_gguf_find_tensor(g, "w.none"));
    walk(g);
    smol_gguf_close(&g);
    ck_assert_ptr_null(g);
    smol_gguf_close(&g);
    smol_gguf_close(NULL);
    wfree(&w);
}

START_TEST(valid_v3_align64) { check_valid(3, 64); }
END_TEST
START_TEST(valid_v2_align64) { check_valid(2, 64); }
END_TEST
START_TEST(valid_v3_default_alignment) { check_valid(3, 0); }
END_TEST
START_TEST(valid_v3_align1) { check_valid(3, 1); }
END_TEST
START_TEST(valid_v3_align4096) { check_valid(3, 4096); }
END_TEST

START_TEST(valid_from_file)
{
    struct wbuf w;
    build_valid(&w, 3, 64);
    char path[] = "/tmp/test_gguf_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    write_file(path, w.p, w.n);
    struct smol_gguf *g;
    ck_assert_msg(smol_gguf_open(&g, path, err) == SMOL_OK, "%s", err);
    ck_assert_int_eq(g->mapped, 1);
    ck_assert_uint_eq(g->n_tensors, VALID_TENSORS);
    const struct smol_gguf_tensor *t = smol_gguf_find_tensor(g, "blk.0.q4_K");
    ck_assert_int_eq(memcmp(t->data, w.p + w.data_at + w.t_off[3], t->size), 0);
    walk(g);
    smol_gguf_close(&g);
    ck_assert_ptr_null(g);
    unlink(path);
    wfree(&w);
}
END_TEST

START_TEST(no_tensors_no_keys)
{
    struct wbuf w = {0};
    header(&w, 3, 0, 0);
    struct smol_gguf *g;
    ck_assert_msg(parse_buf(&w, &g) == SMOL_OK, "%s", err);
    ck_assert_uint_eq(g->n_kv, 0);
    ck_assert_uint_eq(g->n_tensors, 0);
    ck_assert_uint_eq(g->alignment, 32);
    smol_gguf_close(&g);
    wfree(&w);
}
END_TEST

START_TEST(real_fixture)
{
    const char *path = fixture_path();
    if (!path) {
        printf("SKIPPED: real_fixture: tests/fixtures/models/fixture-a.Q4_K_M.gguf not found\n");
        return;
    }
    struct smol_gguf *g;
    ck_assert_msg(smol_gguf_open(&g, path, err) == SMOL_OK, "%s", err);
    ck_assert_uint_eq(g->version, 3);
    ck_assert_uint_eq(g->n_tensors, 74);
    ck_assert_uint_eq(g->n_kv, 24);
    ck_assert_uint_eq(g->alignment, 32);
    const struct smol_gguf_kv *kv;
    ck_assert_int_eq(smol_gguf_get_arr(g, "tokenizer.ggml.tokens", SMOL_GGUF_STRING, &kv, 1, err), SMOL_OK);
    ck_assert_uint_eq(kv->arr_n, 128256);
    ck_assert_int_eq(smol_gguf_get_arr(g, "tokenizer.ggml.merges", SMOL_GGUF_STRING, &kv, 1, err), SMOL_OK);
    ck_assert_uint_eq(kv->arr_n, 280147);
    ck_assert_int_eq(smol_gguf_get_arr(g, "tokenizer.ggml.token_type", SMOL_GGUF_I32, &kv, 1, err), SMOL_OK);
    ck_assert_uint_eq(kv->arr_n, 128256);
    struct smol_gguf_str s;
    ck_assert_int_eq(smol_gguf_get_str(g, "general.architecture", &s, 1, err), SMOL_OK);
    ck_assert(smol_gguf_str_eq(s, "smollm3"));
    uint32_t u;
    ck_assert_int_eq(smol_gguf_get_u32(g, "smollm3.block_count", &u, 1, err), SMOL_OK);
    ck_assert_uint_eq(u, 8);
    ck_assert_int_eq(smol_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &u, 1, err), SMOL_OK);
    ck_assert_uint_eq(u, 128000);
    float f;
    ck_assert_int_eq(smol_gguf_get_f32(g, "smollm3.rope.freq_base", &f, 1, err), SMOL_OK);
    ck_assert(f == 5000000.0f);
    int counts[SMOL_TYPE_COUNT] = {0};
    uint64_t end = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct smol_gguf_tensor *t = &g->tensors[i];
        counts[t->type]++;
        ck_assert_uint_eq(t->size, smol_row_size(t->type, t->ne[0]) * t->ne[1] * t->ne[2] * t->ne[3]);
        if (t->offset + t->size > end) end = t->offset + t->size;
    }
    ck_assert_int_eq(counts[SMOL_TYPE_Q4_K], 48);
    ck_assert_int_eq(counts[SMOL_TYPE_Q6_K], 9);
    ck_assert_int_eq(counts[SMOL_TYPE_F32], 17);
    ck_assert_uint_le(g->data_offset + end, g->size);
    const struct smol_gguf_tensor *t = smol_gguf_find_tensor(g, "output_norm.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->ne[0], 256);
    ck_assert_uint_eq(g->data_offset + t->offset, 7828064); /* absolute, as gguf-py reports it */
    walk(g);
    smol_gguf_close(&g);
}
END_TEST

/* ---------------------------------------------------------------- truncation, bit flips */

/* Every proper prefix of the valid file fails, naming what was being read. */
START_TEST(truncation_every_offset)
{
    struct wbuf w;
    build_valid(&w, 3, 64);
    for (size_t cut = 0; cut < w.n; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);     /* exact size: ASan sees a 1-byte overread */
        memcpy(copy, w.p, cut);
        struct smol_gguf *g = (struct smol_gguf *)1;
        err[0] = 0;
        enum smol_err e = smol_gguf_open_mem(&g, copy, cut, err);
        ck_assert_msg(e == SMOL_EFORMAT, "cut %zu: %s (%s)", cut, smol_err_name(e), err);
        ck_assert_ptr_null(g);
        ck_assert_msg(strstr(err, "gguf: "), "cut %zu: '%s'", cut, err);

        char want[128] = "";
        if (cut < 24) snprintf(want, sizeof want, "%s", cut < 4 ? "too small" : "truncated");
        else if (cut < w.infos_end) {
            for (int i = 0; i < w.n_keys; i++)
                if (cut >= w.key_at[i]) {
                    if (cut < w.key_val_at[i]) snprintf(want, sizeof want, "metadata entry %d", i);
                    else snprintf(want, sizeof want, "key '%s'", w.key_name[i]);
                }
            for (int i = 0; i < w.n_tensors; i++)
                if (cut >= w.ti_at[i]) {
                    if (cut < w.ti_body_at[i]) snprintf(want, sizeof want, "tensor info %d", i);
                    else snprintf(want, sizeof want, "tensor '%s'", w.ti_name[i]);
                }
        } else if (cut < w.data_at) snprintf(want, sizeof want, "tensor data section missing");
        else
            for (int i = VALID_TENSORS - 1; i >= 0; i--)
                if (w.data_at + w.t_off[i] + w.t_size[i] > cut) snprintf(want, sizeof want, "tensor '%s'", vt[i].name);
        /* a short file first fails the cheap count bound, which names no key */
        ck_assert_msg(strstr(err, want) || strstr(err, "larger than the file can hold"),
                      "cut %zu: '%s' lacks '%s'", cut, err, want);
        ck_assert_msg(strstr(err, "truncated") || strstr(err, "past end") || strstr(err, "too small") ||
                          strstr(err, "larger than the file") || strstr(err, "missing"),
                      "cut %zu: '%s' does not say the file is short", cut, err);
        free(copy);
    }
    wfree(&w);
}
END_TEST

/* Seeded random bit flips: the reader either accepts (and everything it
 * returns lies inside the buffer) or refuses with a message. */
START_TEST(random_bit_flips)
{
    struct wbuf w;
    build_valid(&w, 3, 64);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int ok = 0, bad = 0;
    uint8_t *copy = malloc(w.n);
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(copy, w.p, w.n);
        int flips = 1 + iter % 4;
        for (int k = 0; k < flips; k++) {
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            /* half the flips land in the header/metadata, where they matter most */
            size_t pos = (rng >> 8) % (iter & 1 ? w.n : w.infos_end);
            copy[pos] ^= (uint8_t)(1u << (rng & 7));
        }
        struct smol_gguf *g = NULL;
        err[0] = 0;
        enum smol_err e = smol_gguf_open_mem(&g, copy, w.n, err);
        if (e == SMOL_OK) {
            ok++;
            walk(g);
            smol_gguf_close(&g);
        } else {
            bad++;
            ck_assert_msg(e == SMOL_EFORMAT || e == SMOL_EUNSUPPORTED, "iter %d: %s", iter, smol_err_name(e));
            ck_assert_ptr_null(g);
            ck_assert_msg(strncmp(err, "gguf: ", 6) == 0, "iter %d: '%s'", iter, err);
        }
    }
    ck_assert_int_gt(ok, 0);
    ck_assert_int_gt(bad, 0);
    free(copy);
    wfree(&w);
}
END_TEST

/* ---------------------------------------------------------------- hostile headers */

START_TEST(bad_magic)
{
    struct wbuf w;
    build_valid(&w, 3, 64);
    w.p[0] = 'F';
    expect_fail(&w, SMOL_EFORMAT, "bad magic");
    wfree(&w);
}
END_TEST

START_TEST(version_1_and_big_endian)
{
    struct wbuf w = {0};
    header(&w, 1, 0, 0);
    expect_fail(&w, SMOL_EUNSUPPORTED, "version 1");
    wfree(&w);
    header(&w, 0x03000000u, 0, 0);
    expect_fail(&w, SMOL_EUNSUPPORTED, "big-endian");
    wfree(&w);
    header(&w, 0x02000000u, 0, 0);
    expect_fail(&w, SMOL_EUNSUPPORTED, "big-endian");
    wfree(&w);
    header(&w, 4, 0, 0);
    expect_fail(&w, SMOL_EUNSUPPORTED, "version 4");
    wfree(&w);
    header(&w, 0, 0, 0);
    expect_fail(&w, SMOL_EUNSUPPORTED, "version 0");
    wfree(&w);
}
END_TEST

START_TEST(empty_and_tiny)
{
    struct smol_gguf *g = (struct smol_gguf *)1;
    ck_assert_int_eq(smol_gguf_open_mem(&g, "", 0, err), SMOL_EFORMAT);
    ck_assert_ptr_null(g);
    ck_assert_ptr_nonnull(strstr(err, "too small"));
    ck_assert_int_eq(smol_gguf_open_mem(&g, "GGUF\3\0", 6, err), SMOL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "truncated"));

    char path[] = "/tmp/test_gguf_empty_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(smol_gguf_open(&g, path, err), SMOL_EFORMAT);
    ck_assert_ptr_null(g);
    ck_assert_ptr_nonnull(strstr(err, "empty"));
    ck_assert_ptr_nonnull(strstr(err, path));
    unlink(path);
}
END_TEST

START_TEST(paths)
{
    struct smol_gguf *g = (struct smol_gguf *)1;
    ck_assert_int_eq(smol_gguf_open(&g, "/nonexistent/dir/model.gguf", err), SMOL_EIO);
    ck_assert_ptr_null(g);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/dir/model.gguf"));
    char dir[] = "/tmp/test_gguf_dir_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_int_eq(smol_gguf_open(&g, dir, err), SMOL_EIO);
    ck_assert_ptr_nonnull(strstr(err, dir));
    ck_assert_ptr_nonnull(strstr(err, "not a regular file"));
    rmdir(dir);
    /* a FIFO must be refused, not block forever in open() */
    char fifo[64];
    snprintf(fifo, sizeof fifo, "/tmp/test_gguf_fifo_%d", (int)getpid());
    unlink(fifo);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    alarm(5);
    ck_assert_int_eq(smol_gguf_open(&g, fifo, err), SMOL_EIO);
    alarm(0);
    unlink(fifo);
    ck_assert_ptr_nonnull(strstr(err, "not a regular file"));
    /* a corrupt file: the message names the path and the problem */
    char path[] = "/tmp/test_gguf_bad_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "GGUF\1\0\0\0", 8), 8);
    close(fd);
    ck_assert_int_eq(smol_gguf_open(&g, path, err), SMOL_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, path));
    ck_assert_ptr_nonnull(strstr(err, "version 1"));
    unlink(path);
}
END_TEST

START_TEST(huge_counts)
{
    struct wbuf w = {0};
    header(&w, 3, 1ull << 60, 0);
    expect_fail(&w, SMOL_EFORMAT, "absurd tensor count");
    wfree(&w);
    header(&w, 3, 0, UINT64_MAX);
    expect_fail(&w, SMOL_EFORMAT, "absurd metadata key count");
    wfree(&w);
    header(&w, 3, 0, 1000);                 /* plausible count, but the file is 24 bytes */
    expect_fail(&w, SMOL_EFORMAT, "larger than the file can hold");
    wfree(&w);
    header(&w, 3, 1000, 0);
    for (int i = 0; i < 100; i++) put_u64(&w, 0);
    expect_fail(&w, SMOL_EFORMAT, "larger than the file can hold");
    wfree(&w);
}
END_TEST

/* ---------------------------------------------------------------- hostile metadata */

START_TEST(string_past_eof)
{
    struct wbuf w = {0};
    header(&w, 3, 0, 2);
    key(&w, "ok", SMOL_GGUF_U8); put_u8(&w, 1);
    key(&w, "general.name", SMOL_GGUF_STRING); put_u64(&w, 1000); put(&w, "abc", 3);
    expect_fail(&w, SMOL_EFORMAT, "key 'general.name'", "string length 1000 runs past end of file");
    wfree(&w);
    /* the key's own length */
    header(&w, 3, 0, 2);
    key(&w, "ok", SMOL_GGUF_U8); put_u8(&w, 1);
    put_u64(&w, UINT64_MAX); put(&w, "abcdefghijklmnop", 16);
    expect_fail(&w, SMOL_EFORMAT, "metadata entry 1", "runs past end of file");
    wfree(&w);
    /* tensor name */
    header(&w, 3, 1, 0);
    put_u64(&w, 1ull << 40); put(&w, "abcdefghijklmnopqrstuvwxyz0123456789", 36);
    expect_fail(&w, SMOL_EFORMAT, "tensor info 0", "runs past end of file");
    wfree(&w);
}
END_TEST

START_TEST(array_count_overflow)
{
    struct wbuf w = {0};
    /* count * 8 wraps to 8: a multiply without an overflow check would accept it */
    header(&w, 3, 0, 1);
    arr_hdr(&w, "a.wrap", SMOL_GGUF_U64, (1ull << 61) + 1); put_u64(&w, 1); put_u64(&w, 2);
    expect_fail(&w, SMOL_EFORMAT, "key 'a.wrap'", "array runs past end of file");
    wfree(&w);
    header(&w, 3, 0, 1);
    arr_hdr(&w, "a.wrap4", SMOL_GGUF_F32, (1ull << 62) + 1); put_u32(&w, 0); put_u32(&w, 0);
    expect_fail(&w, SMOL_EFORMAT, "key 'a.wrap4'", "array runs past end of file");
    wfree(&w);
    /* string array: count * sizeof(struct smol_gguf_str) would wrap before malloc */
    header(&w, 3, 0, 1);
    arr_hdr(&w, "tokenizer.ggml.tokens", SMOL_GGUF_STRING, (1ull << 60) + 1); put_str(&w, "a"); put_str(&w, "b");
    expect_fail(&w, SMOL_EFORMAT, "key 'tokenizer.ggml.tokens'", "string array count");
    wfree(&w);
    header(&w, 3, 0, 1);
    arr_hdr(&w, "a.u8", SMOL_GGUF_U8, 5); put_u8(&w, 1);
    expect_fail(&w, SMOL_EFORMAT, "key 'a.u8'", "past end");
    wfree(&w);
    /* a string array whose count fits but whose last string does not */
    header(&w, 3, 0, 1);
    arr_hdr(&w, "a.s", SMOL_GGUF_STRING, 3); put_str(&w, "a"); put_str(&w, "b"); put_u64(&w, 9);
    expect_fail(&w, SMOL_EFORMAT, "key 'a.s'", "string length 9 runs past end of file");
    wfree(&w);
}
END_TEST

START_TEST(nested_and_unknown_types)
{
    struct wbuf w = {0};
    header(&w, 3, 0, 1);
    arr_hdr(&w, "a.nested", SMOL_GGUF_ARRAY, 1); put_u32(&w, SMOL_GGUF_U8); put_u64(&w, 1); put_u8(&w, 1);
    expect_fail(&w, SMOL_EFORMAT, "key 'a.nested'", "nested arrays");
    wfree(&w);
    header(&w, 3, 0, 1);
    key(&w, "k.type13", 13); put_u64(&w, 0);
    expect_fail(&w, SMOL_EFORMAT, "key 'k.type13'", "unknown value type 13");
    wfree(&w);
    header(&w, 3, 0, 1);
    key(&w, "k.typemax", UINT32_MAX); put_u64(&w, 0);
    expect_fail(&w, SMOL_EFORMAT, "key 'k.typemax'", "unknown value type 4294967295");
    wfree(&w);
    header(&w, 3, 0, 1);
    arr_hdr(&w, "a.elem99", 99, 1); put_u64(&w, 0);
    expect_fail(&w, SMOL_EFORMAT, "key 'a.elem99'", "unknown element type");
    wfree(&w);
    header(&w, 3, 0, 1);
    key(&w, "k.bool", SMOL_GGUF_BOOL); put_u8(&w, 2);
    expect_fail(&w, SMOL_EFORMAT, "key 'k.bool'", "bool");
    wfree(&w);
    header(&w, 3, 0, 1);
    arr_hdr(&w, "a.bool", SMOL_GGUF_BOOL, 2); put_u8(&w, 0); put_u8(&w, 7);
    expect_fail(&w, SMOL_EFORMAT, "key 'a.bool'", "bool");
    wfree(&w);
}
END_TEST

START_TEST(bad_keys)
{
    struct wbuf w = {0};
    header(&w, 3, 0, 2);
    key(&w, "dup", SMOL_GGUF_U8); put_u8(&w, 1);
    key(&w, "dup", SMOL_GGUF_U32); put_u32(&w, 1);
    expect_fail(&w, SMOL_EFORMAT, "duplicate key 'dup'");
    wfree(&w);
    header(&w, 3, 0, 1);
    key(&w, "", SMOL_GGUF_U8); put_u8(&w, 1);
    expect_fail(&w, SMOL_EFORMAT, "metadata entry 0", "key length 0");
    wfree(&w);
    header(&w, 3, 0, 1);
    put_u64(&w, 3); put(&w, "a\0b", 3); put_u32(&w, SMOL_GGUF_U8); put_u8(&w, 1);
    expect_fail(&w, SMOL_EFORMAT, "metadata entry 0", "NUL");
    wfree(&w);
    /* a very long key: the message keeps the reason instead of drowning in the name */
    char longkey[3000];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = 0;
    header(&w, 3, 0, 1);
    key(&w, longkey, 42); put_u64(&w, 0);
    expect_fail(&w, SMOL_EFORMAT, "key 'kkkk", "unknown value type 42");
    wfree(&w);
    header(&w, 3, 0, 1);
    put_u64(&w, 5000); for (int i = 0; i < 5000; i++) put_u8(&w, 'x');
    put_u32(&w, SMOL_GGUF_U8); put_u8(&w, 1);
    expect_fail(&w, SMOL_EFORMAT, "metadata entry 0", "over 4096");
    wfree(&w);
}
END_TEST

START_TEST(bad_alignment)
{
    static const uint32_t bad[] = {0, 3, 48, 131072, 0x80000000u};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct wbuf w;
        build_valid(&w, 3, 64);
        memcpy(w.p + w.key_val_at[1] + 4, &bad[i], 4);   /* key 1 is general.alignment */
        expect_fail(&w, SMOL_EFORMAT, "key 'general.alignment'", "power of two");
        wfree(&w);
    }
    struct wbuf w = {0};
    header(&w, 3, 0, 1);
    key(&w, "general.alignment", SMOL_GGUF_U64); put_u64(&w, 32);
    expect_fail(&w, SMOL_EFORMAT, "key 'general.alignment'", "must be u32");
    wfree(&w);
}
END_TEST

/* ---------------------------------------------------------------- hostile tensor infos */

/* One tensor, described by the caller, followed by `data` bytes of data. */
static void one_tensor(struct wbuf *w, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                       uint64_t off, size_t data)
{
    memset(w, 0, sizeof *w);
    header(w, 3, 1, 0);
    tinfo(w, name, n_dims, ne, type, off);
    pad_to(w, 32);
    for (size_t i = 0; i < data; i++) put_u8(w, 0);
}

START_TEST(bad_tensor_infos)
{
    struct wbuf w;
    uint64_t ne[5] = {32, 2, 1, 1, 1};
    one_tensor(&w, "ok.q8", 2, ne, SMOL_TYPE_Q8_0, 0, 68);
    struct smol_gguf *g;
    ck_assert_msg(parse_buf(&w, &g) == SMOL_OK, "%s", err);
    smol_gguf_close(&g);
    wfree(&w);

    one_tensor(&w, "t.type99", 2, ne, 99, 0, 256);
    expect_fail(&w, SMOL_EFORMAT, "tensor 't.type99'", "unknown tensor type id 99");
    wfree(&w);
    one_tensor(&w, "t.type4", 2, ne, 4, 0, 256);        /* a removed ggml type id */
    expect_fail(&w, SMOL_EFORMAT, "tensor 't.type4'", "unknown tensor type id 4");
    wfree(&w);
    one_tensor(&w, "t.typemax", 2, ne, UINT32_MAX, 0, 256);
    expect_fail(&w, SMOL_EFORMAT, "tensor 't.typemax'", "unknown tensor type");
    wfree(&w);
    one_tensor(&w, "t.dims0", 0, ne, SMOL_TYPE_F32, 0, 256);
    expect_fail(&w, SMOL_EFORMAT, "tensor 't.dims0'", "n_dims");
    wfree(&w);
    one_tensor(&w, "t.dims5", 5, ne, SMOL_TYPE_F32, 0, 256);
    expect_fail(&w, SMOL_EFORMAT, "tensor 't.dims5'", "n_dims");
    wfree(&w);

    uint64_t big[4] = {1ull << 32, 1ull << 32, 1, 1};   /* 2^64 elements */
    one_tensor(&w, "t.overflow", 2, big, SMOL_TYPE_F32, 0, 256);
    expect_fail(&w, SMOL_EFORMAT, "tensor 't.overflow'", "dimension overflow");
    wfree(&w);
    uint64_t big2[4] = {1ull << 20, 1ull << 20, 1ull << 20, 1ull << 20};
    one_tensor(&w, "t.overflow4", 4, big2, SMOL_TYPE_F32, 0, 256);
    expect_fail(&w, SMOL_EFORMAT, "tensor 't.overflow4'", "dimension overflow");
    wfree(&w);
    uint64_t neg[4] = {1ull << 63, 1, 1, 1};            /* negative as int64 */
    one_tensor(&w, "t.neg", 1, neg, SMOL_TYPE_F32, 0, 256);
    expect_fail(&w, SMOL_EFORMAT, "tensor 't.neg'", "dimension overflow");
    wfree(&w);
    uint64_t wraps[4] = {1ull << 61, 1, 1, 1};          /* passes the element bound: 2^63 bytes, past EOF */
    one_tensor(&w, "t.bytes", 1, wraps, SMOL_TYPE_F32, 0, 256);
    struct smol_gguf *g2 = NULL;
    ck_assert_int_eq(parse_buf(&w, &g2), SMOL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "tensor 't.bytes'"));
    wfree(&w);

    uint64_t row100[4] = {100, 1, 1, 1};
    one_tensor(&w, "t.q4k_row", 1, row100, SMOL_TYPE_Q4_K, 0, 4096);
    expect_fail(&w, SMOL_EFORMAT, "tensor 't.q4k_row'", "block size");
    wfree(&w);
    uint64_t row48[4] = {48, 2, 1, 1};
    one_tensor(&w, "t.q8_row", 2, row48, SMOL_TYPE_Q8_0, 0, 4096);
    expect_fail(&w, SMOL_EFORMAT, "tensor 't.q8_row'", "block size");
    wfree(&w);

    one_tensor(&w, "t.misaligned", 2, ne, SMOL_TYPE_Q8_0, 4, 128);
    expect_fail(&w, SMOL_EFORMAT, "tensor 't.misaligned'", "not aligned");
    wfree(&w);
    one_tensor(&w, "t.short", 2, ne, SMOL_TYPE_Q8_0, 0, 67);
    expect_fail(&w, SMOL_EFORMAT, "tensor 't.short'", "past end of file");
    wfree(&w);
    one_tensor(&w, "t.far", 2, ne, SMOL_TYPE_Q8_0, 1ull << 40, 128);
    expect_fail(&w, SMOL_EFORMAT, "tensor 't.far'", "past end of file");
    wfree(&w);
    one_tensor(&w, "t.wrapoff", 2, ne, SMOL_TYPE_Q8_0, UINT64_MAX - 31, 128);  /* offset + size wraps */
    expect_fail(&w, SMOL_EFORMAT, "tensor 't.wrapoff'", "past end of file");
    wfree(&w);
    /* data section missing entirely: the file ends right after the infos */
    memset(&w, 0, sizeof w);
    header(&w, 3, 1, 0);
    tinfo(&w, "t.nodata", 2, ne, SMOL_TYPE_Q8_0, 0);
    put_u8(&w, 0);
    expect_fail(&w, SMOL_EFORMAT, "data section missing");
    wfree(&w);
    /* name problems */
    one_tensor(&w, "", 2, ne, SMOL_TYPE_Q8_0, 0, 68);
    expect_fail(&w, SMOL_EFORMAT, "tensor info 0", "name length 0");
    wfree(&w);
}
END_TEST

START_TEST(duplicate_tensors)
{
    struct wbuf w = {0};
    uint64_t ne[1] = {8};
    header(&w, 3, 2, 0);
    tinfo(&w, "blk.0.attn_q.weight", 1, ne, SMOL_TYPE_F32, 0);
    tinfo(&w, "blk.0.attn_q.weight", 1, ne, SMOL_TYPE_F32, 32);
    pad_to(&w, 32);
    for (int i = 0; i < 64; i++) put_u8(&w, 0);
    expect_fail(&w, SMOL_EFORMAT, "duplicate tensor 'blk.0.attn_q.weight'");
    wfree(&w);
}
END_TEST

/* Alignment applies to offsets: a valid custom alignment with a tensor
 * offset aligned to 32 but not to 64 is refused. */
START_TEST(offset_vs_custom_alignment)
{
    struct wbuf w = {0};
    uint64_t ne[1] = {8};
    header(&w, 3, 1, 1);
    key(&w, "general.alignment", SMOL_GGUF_U32); put_u32(&w, 64);
    tinfo(&w, "t.at32", 1, ne, SMOL_TYPE_F32, 32);
    pad_to(&w, 64);
    for (int i = 0; i < 128; i++) put_u8(&w, 0);
    expect_fail(&w, SMOL_EFORMAT, "tensor 't.at32'", "not aligned");
    wfree(&w);
}
END_TEST

/* ---------------------------------------------------------------- suite */

static Suite *gguf_suite(void)
{
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("valid");
    tcase_add_test(tc, valid_v3_align64);
    tcase_add_test(tc, valid_v2_align64);
    tcase_add_test(tc, valid_v3_default_alignment);
    tcase_add_test(tc, valid_v3_align1);
    tcase_add_test(tc, valid_v3_align4096);
    tcase_add_test(tc, valid_from_file);
    tcase_add_test(tc, no_tensors_no_keys);
    tcase_add_test(tc, real_fixture);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("hostile");
    tcase_add_test(tc, truncation_every_offset);
    tcase_add_test(tc, random_bit_flips);
    tcase_add_test(tc, bad_magic);
    tcase_add_test(tc, version_1_and_big_endian);
    tcase_add_test(tc, empty_and_tiny);
    tcase_add_test(tc, paths);
    tcase_add_test(tc, huge_counts);
    tcase_add_test(tc, string_past_eof);
    tcase_add_test(tc, array_count_overflow);
    tcase_add_test(tc, nested_and_unknown_types);
    tcase_add_test(tc, bad_keys);
    tcase_add_test(tc, bad_alignment);
    tcase_add_test(tc, bad_tensor_infos);
    tcase_add_test(tc, duplicate_tensors);
    tcase_add_test(tc, offset_vs_custom_alignment);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    return s;
}

Suite *test_suite(void)
{
    return gguf_suite();
}
