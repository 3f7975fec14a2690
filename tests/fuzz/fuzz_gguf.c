/*
 * fuzz_gguf.c - libFuzzer harness for the GGUF reader (daemon/model/gguf.c).
 *
 * Every input is parsed from memory.  A rejected input must come back with
 * a bad-format/unsupported/out-of-memory code and a non-empty message; an
 * accepted one is walked completely - every key through every typed getter,
 * every element of every array, every byte of every string, the first and
 * last byte of every tensor - so ASan sees any pointer the parser let
 * escape the buffer.  Invariants the parser promises are checked with
 * __builtin_trap(), which libFuzzer reports as a crash.
 *
 * libFuzzer hands us a heap copy of exactly `size` bytes, so a read one past
 * the end is an ASan report.  Built and run by tests/fuzz/run.sh.
 */
#include "daemon/model/gguf.h"
#include "kernels/quant_ref.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

static volatile uint64_t sink;

static int inside(const struct smol_gguf *g, const void *p, uint64_t n)
{
    const uint8_t *q = p;
    return q >= g->base && (uint64_t)(q - g->base) <= g->size && n <= g->size - (uint64_t)(q - g->base);
}

static void touch(const void *p, uint64_t n)
{
    const uint8_t *b = p;
    uint64_t h = 0;
    for (uint64_t i = 0; i < n; i++) h = h * 31 + b[i];
    sink += h;
}

static void walk_kv(const struct smol_gguf *g, const struct smol_gguf_kv *kv)
{
    char err[SMOL_ERRLEN];
    uint32_t u32;
    int64_t i64;
    float f;
    int b;
    struct smol_gguf_str s;
    const struct smol_gguf_kv *arr;

    CHECK(kv->key && kv->key[0]);
    CHECK(smol_gguf_find_kv(g, kv->key) == kv);         /* keys are unique */
    CHECK((unsigned)kv->type < SMOL_GGUF_VTYPE_COUNT);
    sink += strlen(smol_gguf_vtype_name(kv->type));

    /* every getter on every key: either a value or a clean refusal with a message */
    err[0] = 0;
    if (smol_gguf_get_u32(g, kv->key, &u32, 1, err)) CHECK(err[0]); else sink += u32;
    err[0] = 0;
    if (smol_gguf_get_i64(g, kv->key, &i64, 1, err)) CHECK(err[0]); else sink += (uint64_t)i64;
    err[0] = 0;
    if (smol_gguf_get_f32(g, kv->key, &f, 1, err)) CHECK(err[0]); else sink += (uint64_t)isnan(f);
    err[0] = 0;
    if (smol_gguf_get_bool(g, kv->key, &b, 1, err)) CHECK(err[0]); else CHECK(b == 0 || b == 1);
    err[0] = 0;
    if (smol_gguf_get_str(g, kv->key, &s, 1, err)) CHECK(err[0]);
    else { CHECK(inside(g, s.ptr, s.len)); touch(s.ptr, s.len); sink += smol_gguf_str_eq(s, "gpt2"); }
    err[0] = 0;
    if (smol_gguf_get_arr(g, kv->key, SMOL_GGUF_STRING, &arr, 1, err)) CHECK(err[0] && arr == NULL);
    else CHECK(arr == kv && kv->arr_type == SMOL_GGUF_STRING);
    err[0] = 0;
    if (smol_gguf_get_arr(g, kv->key, SMOL_GGUF_VTYPE_COUNT, &arr, 1, err)) { CHECK(err[0]); return; }
    CHECK(arr == kv);
    CHECK((unsigned)kv->arr_type < SMOL_GGUF_VTYPE_COUNT && kv->arr_type != SMOL_GGUF_ARRAY);
    if (kv->arr_type == SMOL_GGUF_STRING) {
        CHECK(kv->arr_strs != NULL);
        for (uint64_t i = 0; i < kv->arr_n; i++) {
            CHECK(inside(g, kv->arr_strs[i].ptr, kv->arr_strs[i].len));
            touch(kv->arr_strs[i].ptr, kv->arr_strs[i].len);
        }
        return;
    }
    CHECK(kv->arr_data != NULL || kv->arr_n == 0);
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        sink += (uint64_t)smol_gguf_arr_int(kv, i);
        double d = smol_gguf_arr_float(kv, i);
        sink += (uint64_t)isnan(d);
    }
    static const uint8_t esize[SMOL_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    CHECK(esize[kv->arr_type] && inside(g, kv->arr_data, kv->arr_n * esize[kv->arr_type]));
}

static void walk_tensor(const struct smol_gguf *g, const struct smol_gguf_tensor *t)
{
    CHECK(t->name && t->name[0]);
    CHECK(smol_gguf_find_tensor(g, t->name) == t);      /* names are unique */
    CHECK(t->n_dims >= 1 && t->n_dims <= SMOL_GGUF_MAX_DIMS);
    const struct smol_type_traits *tr = smol_type_traits(t->type);
    CHECK(tr != NULL);
    CHECK(t->ne[0] % tr->block_size == 0);
    uint64_t nel = 1;
    for (int d = 0; d < SMOL_GGUF_MAX_DIMS; d++) {
        CHECK(t->ne[d] >= 0);
        CHECK((uint32_t)d < t->n_dims || t->ne[d] == 1);
        nel *= (uint64_t)t->ne[d];
    }
    CHECK(t->size == nel / (uint64_t)tr->block_size * (uint64_t)tr->type_size);
    CHECK(t->offset % g->alignment == 0);
    CHECK(inside(g, t->data, t->size));
    CHECK((const uint8_t *)t->data == g->base + g->data_offset + t->offset);
    if (t->size) {
        const uint8_t *p = t->data;
        sink += p[0] + p[t->size - 1];
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct smol_gguf *g = NULL;
    char err[SMOL_ERRLEN];
    err[0] = 0;
    enum smol_err e = smol_gguf_open_mem(&g, data, size, err);
    if (e) {
        CHECK(g == NULL);
        CHECK(e == SMOL_EFORMAT || e == SMOL_EUNSUPPORTED || e == SMOL_ENOMEM);
        CHECK(err[0] && memchr(err, 0, SMOL_ERRLEN));
        return 0;
    }
    CHECK(g != NULL);
    CHECK(g->version == 2 || g->version == 3);
    CHECK(g->alignment && !(g->alignment & (g->alignment - 1)));
    CHECK(g->base == data && g->size == size && !g->mapped);
    CHECK(g->n_tensors == 0 || g->data_offset <= size);
    for (uint64_t i = 0; i < g->n_kv; i++) walk_kv(g, &g->kv[i]);
    for (uint64_t i = 0; i < g->n_tensors; i++) walk_tensor(g, &g->tensors[i]);
    /* absent keys: optional leaves the output alone, required names the key */
    uint32_t u = 7;
    if (!smol_gguf_find_kv(g, "fuzz.absent")) {
        CHECK(smol_gguf_get_u32(g, "fuzz.absent", &u, 0, err) == SMOL_OK && u == 7);
        CHECK(smol_gguf_get_u32(g, "fuzz.absent", &u, 1, err) == SMOL_EFORMAT && strstr(err, "fuzz.absent"));
    }
    if (!smol_gguf_find_tensor(g, "fuzz.absent")) sink++;
    smol_gguf_close(&g);
    CHECK(g == NULL);
    smol_gguf_close(&g);                                /* idempotent */
    return 0;
}
