/*
 * gguf.c - GGUF v2/v3 parser (see gguf.h for the contract).
 *
 * Layout: magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, n_kv x
 * {string key, u32 type, value}, n_tensors x {string name, u32 n_dims,
 * u64 ne[n_dims], u32 type, u64 offset}, padding to general.alignment, then
 * the tensor data.  Strings are u64 length + bytes.  All little-endian.
 *
 * Every read goes through struct cursor, which refuses to step past the end;
 * every size is computed with overflow checks.  The first error wins and
 * names the key or tensor being read.
 */
#include "daemon/model/gguf.h"
#include "kernels/quant_ref.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u          /* "GGUF" little-endian */
#define MAX_COUNT  (1ull << 24)         /* tensors / keys: far above any model */
#define MAX_NAME   4096                 /* key and tensor-name length */
#define SHOW_NAME  96                   /* name bytes quoted in a message: room for the reason */

struct cursor {
    const uint8_t *p;
    size_t size, off;
    char *err;
    const char *what;                   /* "key 'x'" / "tensor 'y'" for messages */
};

static enum smol_err fail(struct cursor *c, const char *fmt, const char *detail)
{
    char tmp[SMOL_ERRLEN];
    snprintf(tmp, sizeof tmp, fmt, detail);
    return smol_errf(c->err, SMOL_EFORMAT, "gguf: %s%s%s (at byte %zu of %zu)", c->what ? c->what : "",
                     c->what ? ": " : "", tmp, c->off, c->size);
}

static int need(struct cursor *c, uint64_t n) { return n <= c->size - c->off; }

static enum smol_err rd(struct cursor *c, void *dst, size_t n)
{
    if (!need(c, n)) return fail(c, "%s", "truncated: read past end of file");
    memcpy(dst, c->p + c->off, n);
    c->off += n;
    return SMOL_OK;
}

#define RD(c, x) do { enum smol_err e_ = rd((c), &(x), sizeof(x)); if (e_) return e_; } while (0)

static enum smol_err rd_str(struct cursor *c, struct smol_gguf_str *s)
{
    uint64_t len = 0;
    RD(c, len);
    if (!need(c, len)) {
        char num[32];
        snprintf(num, sizeof num, "%llu", (unsigned long long)len);
        return fail(c, "string length %s runs past end of file", num);
    }
    s->ptr = (const char *)c->p + c->off;
    s->len = len;
    c->off += len;
    return SMOL_OK;
}

static char *dup_name(struct smol_gguf_str s)
{
    char *d = malloc(s.len + 1);
    if (!d) return NULL;
    memcpy(d, s.ptr, s.len);
    d[s.len] = 0;
    return d;
}

static size_t scalar_size(uint32_t t)
{
    switch (t) {
    case SMOL_GGUF_U8: case SMOL_GGUF_I8: case SMOL_GGUF_BOOL: return 1;
    case SMOL_GGUF_U16: case SMOL_GGUF_I16: return 2;
    case SMOL_GGUF_U32: case SMOL_GGUF_I32: case SMOL_GGUF_F32: return 4;
    case SMOL_GGUF_U64: case SMOL_GGUF_I64: case SMOL_GGUF_F64: return 8;
    default: return 0;
    }
}

const char *smol_gguf_vtype_name(enum smol_gguf_vtype t)
{
    static const char *const n[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                                    "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < SMOL_GGUF_VTYPE_COUNT ? n[t] : "invalid";
}

/* Decodes one packed scalar of type t at p into the widened union. */
static void widen(struct smol_gguf_kv *kv, uint32_t t, const uint8_t *p)
{
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
            float f32; uint64_t u64; int64_t i64; double f64; } x;
    memcpy(&x, p, scalar_size(t));
    switch (t) {
    case SMOL_GGUF_U8: kv->v.u = x.u8; break;
    case SMOL_GGUF_BOOL: kv->v.u = x.u8; break;
    case SMOL_GGUF_I8: kv->v.i = x.i8; break;
    case SMOL_GGUF_U16: kv->v.u = x.u16; break;
    case SMOL_GGUF_I16: kv->v.i = x.i16; break;
    case SMOL_GGUF_U32: kv->v.u = x.u32; break;
    case SMOL_GGUF_I32: kv->v.i = x.i32; break;
    case SMOL_GGUF_U64: kv->v.u = x.u64; break;
    case SMOL_GGUF_I64: kv->v.i = x.i64; break;
    case SMOL_GGUF_F32: kv->v.f = x.f32; break;
    case SMOL_GGUF_F64: kv->v.f = x.f64; break;
    }
}

static enum smol_err read_value(struct cursor *c, struct smol_gguf_kv *kv)
{
    uint32_t t = 0;
    RD(c, t);
    if (t >= SMOL_GGUF_VTYPE_COUNT) {
        char num[32];
        snprintf(num, sizeof num, "%u", t);
        return fail(c, "unknown value type %s", num);
    }
    kv->type = t;
    if (t == SMOL_GGUF_STRING) return rd_str(c, &kv->str);
    if (t != SMOL_GGUF_ARRAY) {
        size_t n = scalar_size(t);
        if (!need(c, n)) return fail(c, "%s", "truncated value");
        widen(kv, t, c->p + c->off);
        if (t == SMOL_GGUF_BOOL && kv->v.u > 1) return fail(c, "%s", "bool value is neither 0 nor 1");
        c->off += n;
        return SMOL_OK;
    }
    uint32_t et = 0;
    uint64_t n = 0;
    RD(c, et);
    RD(c, n);
    if (et >= SMOL_GGUF_VTYPE_COUNT) return fail(c, "%s", "array of unknown element type");
    if (et == SMOL_GGUF_ARRAY) return fail(c, "%s", "nested arrays are not supported");
    kv->arr_type = et;
    kv->arr_n = n;
    if (et == SMOL_GGUF_STRING) {
        /* every string takes at least its 8-byte length: bounds n before allocating */
        if (n > (c->size - c->off) / 8) return fail(c, "%s", "string array count runs past end of file");
        kv->arr_strs = malloc((n ? n : 1) * sizeof *kv->arr_strs);
        if (!kv->arr_strs) return smol_errf(c->err, SMOL_ENOMEM, "gguf: out of memory for %s", c->what);
        for (uint64_t i = 0; i < n; i++) {
            enum smol_err e = rd_str(c, &kv->arr_strs[i]);
            if (e) return e;
        }
        return SMOL_OK;
    }
    size_t es = scalar_size(et);
    if (n > (c->size - c->off) / es) return fail(c, "%s", "array runs past end of file");
    kv->arr_data = c->p + c->off;
    if (et == SMOL_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (kv->arr_data[i] > 1) return fail(c, "%s", "bool array element is neither 0 nor 1");
    c->off += n * es;
    return SMOL_OK;
}

static void free_parsed(struct smol_gguf *g)
{
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++) {
            free(g->kv[i].key);
            free(g->kv[i].arr_strs);
        }
    if (g->tensors)
        for (uint64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Duplicate keys or tensor names make lookups ambiguous: refuse them.
 * Sorting keeps this O(n log n) on hostile files with many entries. */
static enum smol_err check_unique(const struct smol_gguf *g, char *err)
{
    uint64_t n = g->n_kv > g->n_tensors ? g->n_kv : g->n_tensors;
    char **v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return smol_errf(err, SMOL_ENOMEM, "gguf: out of memory");
    enum smol_err e = SMOL_OK;
    for (int pass = 0; pass < 2 && !e; pass++) {
        uint64_t m = pass ? g->n_tensors : g->n_kv;
        for (uint64_t i = 0; i < m; i++) v[i] = pass ? g->tensors[i].name : g->kv[i].key;
        qsort(v, m, sizeof *v, cmp_str);
        for (uint64_t i = 1; i < m && !e; i++)
            if (!strcmp(v[i - 1], v[i]))
                e = smol_errf(err, SMOL_EFORMAT, "gguf: duplicate %s '%.*s%s'", pass ? "tensor" : "key",
                              SHOW_NAME, v[i], strlen(v[i]) > SHOW_NAME ? "..." : "");
    }
    free(v);
    return e;
}

static enum smol_err parse(struct smol_gguf *g, char *err)
{
    struct cursor c = {.p = g->base, .size = g->size, .off = 0, .err = err, .what = NULL};
    uint32_t magic;
    char what[MAX_NAME + 64];
    enum smol_err e;

    if (g->size < 4) return fail(&c, "%s", "file too small to be GGUF");
    RD(&c, magic);
    if (magic != GGUF_MAGIC) return fail(&c, "%s", "bad magic: not a GGUF file");
    RD(&c, g->version);
    if (g->version == 0x02000000u || g->version == 0x03000000u)
        return smol_errf(err, SMOL_EUNSUPPORTED, "gguf: big-endian GGUF files are not supported");
    if (g->version == 1)
        return smol_errf(err, SMOL_EUNSUPPORTED, "gguf: version 1 files are not supported (convert to v3)");
    if (g->version != 2 && g->version != 3)
        return smol_errf(err, SMOL_EUNSUPPORTED, "gguf: unsupported version %u", g->version);
    RD(&c, g->n_tensors);
    RD(&c, g->n_kv);
    if (g->n_tensors > MAX_COUNT) return fail(&c, "%s", "absurd tensor count");
    if (g->n_kv > MAX_COUNT) return fail(&c, "%s", "absurd metadata key count");
    /* each key needs >= 12 bytes, each tensor info >= 28: bound before calloc */
    if (g->n_kv > g->size / 12 || g->n_tensors > g->size / 28)
        return fail(&c, "%s", "key or tensor count larger than the file can hold");

    uint64_t n_kv = g->n_kv, n_t = g->n_tensors;
    g->n_kv = g->n_tensors = 0;         /* count what is initialised, for free_parsed */
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_t ? n_t : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) return smol_errf(err, SMOL_ENOMEM, "gguf: out of memory");

    g->alignment = SMOL_GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < n_kv; i++) {
        struct smol_gguf_str key;
        snprintf(what, sizeof what, "metadata entry %llu", (unsigned long long)i);
        c.what = what;
        if ((e = rd_str(&c, &key))) return e;
        if (key.len == 0 || key.len > MAX_NAME) return fail(&c, "%s", "key length 0 or over 4096");
        struct smol_gguf_kv *kv = &g->kv[g->n_kv++];
        if (!(kv->key = dup_name(key))) return smol_errf(err, SMOL_ENOMEM, "gguf: out of memory");
        if (strlen(kv->key) != key.len) return fail(&c, "%s", "key contains a NUL byte");
        snprintf(what, sizeof what, "key '%.*s%s'", SHOW_NAME, kv->key, key.len > SHOW_NAME ? "..." : "");
        if ((e = read_value(&c, kv))) return e;
        if (!strcmp(kv->key, "general.alignment")) {
            if (kv->type != SMOL_GGUF_U32) return fail(&c, "%s", "general.alignment must be u32");
            if (kv->v.u == 0 || (kv->v.u & (kv->v.u - 1)) || kv->v.u > 65536)
                return fail(&c, "%s", "alignment must be a power of two <= 65536");
            g->alignment = (uint32_t)kv->v.u;
        }
    }

    for (uint64_t i = 0; i < n_t; i++) {
        struct smol_gguf_str name;
        snprintf(what, sizeof what, "tensor info %llu", (unsigned long long)i);
        c.what = what;
        if ((e = rd_str(&c, &name))) return e;
        if (name.len == 0 || name.len > MAX_NAME) return fail(&c, "%s", "tensor name length 0 or over 4096");
        struct smol_gguf_tensor *t = &g->tensors[g->n_tensors++];
        if (!(t->name = dup_name(name))) return smol_errf(err, SMOL_ENOMEM, "gguf: out of memory");
        if (strlen(t->name) != name.len) return fail(&c, "%s", "tensor name contains a NUL byte");
        snprintf(what, sizeof what, "tensor '%.*s%s'", SHOW_NAME, t->name, name.len > SHOW_NAME ? "..." : "");
        RD(&c, t->n_dims);
        if (t->n_dims == 0 || t->n_dims > SMOL_GGUF_MAX_DIMS) return fail(&c, "%s", "n_dims must be 1..4");
        uint64_t nel = 1;
        for (int d = 0; d < SMOL_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t ne = 0;
            RD(&c, ne);
            if (ne > INT64_MAX / 2 || (ne && nel > UINT64_MAX / 4 / ne)) return fail(&c, "%s", "dimension overflow");
            t->ne[d] = (int64_t)ne;
            nel *= ne;
        }
        RD(&c, t->type);
        RD(&c, t->offset);
        const struct smol_type_traits *tr = smol_type_traits(t->type);
        if (!tr) {
            char num[32];
            snprintf(num, sizeof num, "%u", t->type);
            return fail(&c, "unknown tensor type id %s", num);
        }
        if (t->ne[0] % tr->block_size) return fail(&c, "%s", "row length is not a multiple of the type's block size");
        t->size = nel / (uint64_t)tr->block_size * (uint64_t)tr->type_size;
    }
    c.what = NULL;
    if ((e = check_unique(g, err))) return e;

    uint64_t data = (c.off + g->alignment - 1) / g->alignment * g->alignment;
    if (data > g->size && g->n_tensors) return fail(&c, "%s", "tensor data section missing (truncated file)");
    g->data_offset = data;
    uint64_t avail = g->size >= data ? g->size - data : 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        struct smol_gguf_tensor *t = &g->tensors[i];
        snprintf(what, sizeof what, "tensor '%.*s%s'", SHOW_NAME, t->name,
                 strlen(t->name) > SHOW_NAME ? "..." : "");
        c.what = what;
        if (t->offset % g->alignment) return fail(&c, "%s", "data offset is not aligned");
        if (t->offset > avail || t->size > avail - t->offset)
            return fail(&c, "%s", "data runs past end of file (truncated?)");
        t->data = g->base + data + t->offset;
    }
    return SMOL_OK;
}

enum smol_err smol_gguf_open_mem(struct smol_gguf **out, const void *data, size_t size, char *err)
{
    *out = NULL;
    struct smol_gguf *g = calloc(1, sizeof *g);
    if (!g) return smol_errf(err, SMOL_ENOMEM, "gguf: out of memory");
    g->base = data;
    g->size = size;
    enum smol_err e = parse(g, err);
    if (e) {
        free_parsed(g);
        free(g);
        return e;
    }
    *out = g;
    return SMOL_OK;
}

enum smol_err smol_gguf_open(struct smol_gguf **out, const char *path, char *err)
{
    *out = NULL;
    /* O_NONBLOCK: a FIFO or device path must not hang the open; it is refused below */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return smol_errf(err, SMOL_EIO, "gguf: cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return smol_errf(err, SMOL_EIO, "gguf: '%s' is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return smol_errf(err, SMOL_EFORMAT, "gguf: '%s' is empty", path);
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    int mmap_errno = errno;             /* close() may overwrite it */
    close(fd);
    if (m == MAP_FAILED) return smol_errf(err, SMOL_EIO, "gguf: cannot mmap '%s': %s", path, strerror(mmap_errno));
    char inner[SMOL_ERRLEN];
    enum smol_err e = smol_gguf_open_mem(out, m, (size_t)st.st_size, inner);
    if (e) {
        munmap(m, (size_t)st.st_size);
        return smol_errf(err, e, "%s: %s", path, inner);
    }
    (*out)->mapped = 1;
    return SMOL_OK;
}

void smol_gguf_close(struct smol_gguf **gp)
{
    if (!gp || !*gp) return;
    struct smol_gguf *g = *gp;
    free_parsed(g);
    if (g->mapped) munmap((void *)g->base, g->size);
    free(g);
    *gp = NULL;
}

const struct smol_gguf_kv *smol_gguf_find_kv(const struct smol_gguf *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (!strcmp(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const struct smol_gguf_tensor *smol_gguf_find_tensor(const struct smol_gguf *g, const char *name)
{
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

static int is_signed(uint32_t t) { return t == SMOL_GGUF_I8 || t == SMOL_GGUF_I16 || t == SMOL_GGUF_I32 || t == SMOL_GGUF_I64; }
static int is_unsigned(uint32_t t) { return t == SMOL_GGUF_U8 || t == SMOL_GGUF_U16 || t == SMOL_GGUF_U32 || t == SMOL_GGUF_U64; }

static enum smol_err lookup(const struct smol_gguf *g, const char *key, int required, char *err,
                            const struct smol_gguf_kv **kv)
{
    *kv = smol_gguf_find_kv(g, key);
    if (!*kv && required) return smol_errf(err, SMOL_EFORMAT, "gguf: missing required key '%s'", key);
    return SMOL_OK;
}

static enum smol_err wrong_type(const struct smol_gguf_kv *kv, const char *want, char *err)
{
    return smol_errf(err, SMOL_EFORMAT, "gguf: key '%s' has type %s, expected %s", kv->key,
                     smol_gguf_vtype_name(kv->type), want);
}

enum smol_err smol_gguf_get_i64(const struct smol_gguf *g, const char *key, int64_t *out, int required, char *err)
{
    const struct smol_gguf_kv *kv;
    enum smol_err e = lookup(g, key, required, err, &kv);
    if (e || !kv) return e;
    if (is_signed(kv->type)) *out = kv->v.i;
    else if (is_unsigned(kv->type)) {
        if (kv->v.u > INT64_MAX) return smol_errf(err, SMOL_EFORMAT, "gguf: key '%s' value out of range", key);
        *out = (int64_t)kv->v.u;
    } else return wrong_type(kv, "an integer", err);
    return SMOL_OK;
}

enum smol_err smol_gguf_get_u32(const struct smol_gguf *g, const char *key, uint32_t *out, int required, char *err)
{
    int64_t v = 0;
    const struct smol_gguf_kv *kv = smol_gguf_find_kv(g, key);
    enum smol_err e = smol_gguf_get_i64(g, key, &v, required, err);
    if (e || !kv) return e;
    if (v < 0 || v > UINT32_MAX)
        return smol_errf(err, SMOL_EFORMAT, "gguf: key '%s' value %lld out of range", key, (long long)v);
    *out = (uint32_t)v;
    return SMOL_OK;
}

enum smol_err smol_gguf_get_f32(const struct smol_gguf *g, const char *key, float *out, int required, char *err)
{
    const struct smol_gguf_kv *kv;
    enum smol_err e = lookup(g, key, required, err, &kv);
    if (e || !kv) return e;
    if (kv->type != SMOL_GGUF_F32 && kv->type != SMOL_GGUF_F64) return wrong_type(kv, "f32", err);
    /* an f64 beyond float range would become inf (and is UB in C): refuse it */
    if (isfinite(kv->v.f) && (kv->v.f > FLT_MAX || kv->v.f < -FLT_MAX))
        return smol_errf(err, SMOL_EFORMAT, "gguf: key '%s' value %g out of f32 range", key, kv->v.f);
    *out = (float)kv->v.f;
    return SMOL_OK;
}

enum smol_err smol_gguf_get_bool(const struct smol_gguf *g, const char *key, int *out, int required, char *err)
{
    const struct smol_gguf_kv *kv;
    enum smol_err e = lookup(g, key, required, err, &kv);
    if (e || !kv) return e;
    if (kv->type != SMOL_GGUF_BOOL) return wrong_type(kv, "bool", err);
    *out = (int)kv->v.u;
    return SMOL_OK;
}

enum smol_err smol_gguf_get_str(const struct smol_gguf *g, const char *key, struct smol_gguf_str *out,
                                int required, char *err)
{
    const struct smol_gguf_kv *kv;
    enum smol_err e = lookup(g, key, required, err, &kv);
    if (e || !kv) return e;
    if (kv->type != SMOL_GGUF_STRING) return wrong_type(kv, "string", err);
    *out = kv->str;
    return SMOL_OK;
}

enum smol_err smol_gguf_get_arr(const struct smol_gguf *g, const char *key, enum smol_gguf_vtype elem,
                                const struct smol_gguf_kv **out, int required, char *err)
{
    const struct smol_gguf_kv *kv;
    *out = NULL;
    enum smol_err e = lookup(g, key, required, err, &kv);
    if (e || !kv) return e;
    if (kv->type != SMOL_GGUF_ARRAY) return wrong_type(kv, "array", err);
    if (elem != SMOL_GGUF_VTYPE_COUNT && kv->arr_type != elem)
        return smol_errf(err, SMOL_EFORMAT, "gguf: key '%s' is an array of %s, expected %s", key,
                         smol_gguf_vtype_name(kv->arr_type), smol_gguf_vtype_name(elem));
    *out = kv;
    return SMOL_OK;
}

int64_t smol_gguf_arr_int(const struct smol_gguf_kv *kv, uint64_t i)
{
    struct smol_gguf_kv tmp = {0};
    widen(&tmp, kv->arr_type, kv->arr_data + i * scalar_size(kv->arr_type));
    if (is_unsigned(kv->arr_type) || kv->arr_type == SMOL_GGUF_BOOL) return (int64_t)tmp.v.u;
    if (is_signed(kv->arr_type)) return tmp.v.i;
    /* float element: converting NaN or an out-of-range value to an integer is UB; saturate */
    if (isnan(tmp.v.f)) return 0;
    if (tmp.v.f >= 9223372036854775807.0) return INT64_MAX;
    if (tmp.v.f <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)tmp.v.f;
}

double smol_gguf_arr_float(const struct smol_gguf_kv *kv, uint64_t i)
{
    struct smol_gguf_kv tmp = {0};
    widen(&tmp, kv->arr_type, kv->arr_data + i * scalar_size(kv->arr_type));
    if (kv->arr_type == SMOL_GGUF_F32 || kv->arr_type == SMOL_GGUF_F64) return tmp.v.f;
    return is_signed(kv->arr_type) ? (double)tmp.v.i : (double)tmp.v.u;
}

int smol_gguf_str_eq(struct smol_gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}
