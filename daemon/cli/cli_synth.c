/*
 * cli_synth.c - `smollm3 synth`: writes a synthetic SmolLM3 GGUF with random
 * weights: the real Q4_K_M file's shapes, tensor types and metadata, for
 * benchmarks (make bench) on a machine that cannot download the real 1.9 GB
 * model, and small models of any weight type, for tests.
 *
 *   synth -o OUT.gguf [--preset smollm3-3b|fixture|tiny] [--type T] [--seed S]
 *
 * smollm3-3b: 36 layers, 326 tensors: 216 q4_K, 37 q6_K (token_embd and the
 * attn_v / ffn_down of the 18 layers llama.cpp's Q4_K_M mix upgrades: its
 * use_more_bits rule, the first and last eighth of the layers and every
 * third in between), 73 f32 norms; general.file_type = 15.  fixture: the
 * same structure at dim 256, 8 layers, 2 query heads on 1 KV head of 128
 * (a few tens of MB).  tiny: fixture T's attention (2 query heads per KV
 * head) at the smallest width every K-quant allows (rows of 256): dim 256,
 * ffn 512, 4 layers (layer 3 NoPE), 4 query heads on 2 KV heads of 64.
 *
 * --type: q4_K_m (default) is the mix above; any other type (f32, f16, bf16,
 * q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K, q6_K) is given to token_embd and
 * every layer matrix alike, norms stay f32; general.file_type says which
 * (llama.cpp's LLAMA_FTYPE numbers: a single K type is its "_S" variant).
 *
 * Weights of the 3B are random bytes with sane scales (each block decodes to
 * values of standard deviation ~0.02 around 0; norms ~1): what a benchmark
 * needs, at disk speed, where quantizing 3 B random floats with the reference
 * quantizers would take an hour (so the 3B takes q4_K_m only).  The small
 * presets draw gaussian-like floats and quantize them with the reference
 * quantizers (smol_type_traits()->quantize; 1-10 s, q4_K the slowest):
 * blocks a real converter would write, of every type, for tests that run
 * them.  Their scales are fixture A's (token_embd 0.1, q/k 0.08, v/o/gate/up
 * 0.05, down 0.03), not the 3B's 0.02: at 0.02 the tied LM head's logits
 * have std 0.32 and most greedy top1-top2 margins are below 0.05, and with
 * a 0.1 embedding over 0.02 layers the residual stream is the input token's
 * own embedding (every argmax is the input token); at fixture A's scales the
 * logits have std 1.6, margins median ~0.25, and the layers decide them.
 * The tokenizer block is copied from tests/fixtures/models/fixture-t.Q8_0.gguf
 * (the real SmolLM3 vocabulary) when it is found, so the file is complete.
 * The file is written streaming: header first, then each tensor in 1 MiB
 * pieces.
 */
#include "daemon/cli/cli.h"
#include "daemon/model/model.h"
#include "kernels/quant.h"
#include "kernels/quant_ref.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct preset {
    const char *name;
    int n_layers, dim, ffn, n_heads, n_kv_heads, vocab, ctx;
    int random_blocks;          /* 1: random q4_K / q6_K bytes (q4_K_m only); 0: quantized floats */
};

static const struct preset presets[] = {
    {"smollm3-3b", 36, 2048, 11008, 16, 4, 128256, 65536, 1},
    {"fixture", 8, 256, 512, 2, 1, 128256, 4096, 0},
    {"tiny", 4, 256, 512, 4, 2, 128256, 4096, 0},
};

/* Weight types of --type.  mix: llama.cpp's Q4_K_M (q4_K, q6_K where use_more_bits says);
 * file_type: llama.cpp's LLAMA_FTYPE for the file (general.file_type). */
struct wtype {
    const char *name;
    uint32_t type;
    int mix;
    uint32_t file_type;
};

static const struct wtype wtypes[] = {
    {"q4_K_m", SMOL_TYPE_Q4_K, 1, 15},
    {"f32", SMOL_TYPE_F32, 0, 0},   {"f16", SMOL_TYPE_F16, 0, 1},   {"bf16", SMOL_TYPE_BF16, 0, 32},
    {"q8_0", SMOL_TYPE_Q8_0, 0, 7}, {"q4_0", SMOL_TYPE_Q4_0, 0, 2}, {"q4_1", SMOL_TYPE_Q4_1, 0, 3},
    {"q5_0", SMOL_TYPE_Q5_0, 0, 8}, {"q5_1", SMOL_TYPE_Q5_1, 0, 9}, {"q4_K", SMOL_TYPE_Q4_K, 0, 14},
    {"q5_K", SMOL_TYPE_Q5_K, 0, 16}, {"q6_K", SMOL_TYPE_Q6_K, 0, 18},
};

#define TOKENIZER_SRC "tests/fixtures/models/fixture-t.Q8_0.gguf"
/* Standard deviations of the small presets' matrices: fixture A's (tests/fixtures/README.md) */
#define SD_EMBD 0.1f
#define SD_QK 0.08f
#define SD_VO 0.05f
#define SD_DOWN 0.03f
#define ALIGN 32

/* ------------------------------------------------------- tensor plan */

struct tplan {
    char name[64];
    uint32_t type;
    int64_t ne0, ne1;           /* ne1 = 1 for vectors */
    float sd;                   /* a matrix's weight std (small presets); 0: a norm (a vector, ~1) */
    uint64_t offset, size;
};

/* llama.cpp's use_more_bits (llama_tensor_get_type, Q4_K_M): layers that get q6_K */
static int use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* The tensors of preset p with weight types wt, in file order, with their offsets; returns the count. */
static int plan_tensors(const struct preset *p, const struct wtype *wt, struct tplan *t)
{
    int n = 0;
    const int q_dim = p->dim, kv_dim = p->dim / p->n_heads * p->n_kv_heads;
    const uint32_t base = wt->type, top = wt->mix ? SMOL_TYPE_Q6_K : wt->type;
#define ADD(nm, ty, a, b, sdev) do { snprintf(t[n].name, sizeof t[n].name, "%s", nm); t[n].type = ty; \
                                     t[n].ne0 = a; t[n].ne1 = b; t[n].sd = sdev; n++; } while (0)
    ADD("token_embd.weight", top, p->dim, p->vocab, SD_EMBD);
    for (int l = 0; l < p->n_layers; l++) {
        char nm[64];
        const uint32_t more = use_more_bits(l, p->n_layers) ? top : base;
#define LAYER(suffix, ty, a, b, sdev) do { snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, suffix); \
                                           ADD(nm, ty, a, b, sdev); } while (0)
        LAYER("attn_norm", SMOL_TYPE_F32, p->dim, 1, 0);
        LAYER("attn_q", base, p->dim, q_dim, SD_QK);
        LAYER("attn_k", base, p->dim, kv_dim, SD_QK);
        LAYER("attn_v", more, p->dim, kv_dim, SD_VO);
        LAYER("attn_output", base, q_dim, p->dim, SD_VO);
        LAYER("ffn_norm", SMOL_TYPE_F32, p->dim, 1, 0);
        LAYER("ffn_gate", base, p->dim, p->ffn, SD_VO);
        LAYER("ffn_up", base, p->dim, p->ffn, SD_VO);
        LAYER("ffn_down", more, p->ffn, p->dim, SD_DOWN);
#undef LAYER
    }
    ADD("output_norm.weight", SMOL_TYPE_F32, p->dim, 1, 0);
#undef ADD
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        t[i].offset = off;
        t[i].size = smol_row_size(t[i].type, t[i].ne0) * (uint64_t)t[i].ne1;
        off += (t[i].size + ALIGN - 1) / ALIGN * ALIGN;
    }
    return n;
}

/* ------------------------------------------------------- GGUF writing */

struct out {
    FILE *f;
    int bad;
};

static void put(struct out *o, const void *p, size_t n)
{
    if (!o->bad && fwrite(p, 1, n, o->f) != n) o->bad = 1;
}
static void put_u32(struct out *o, uint32_t v) { put(o, &v, 4); }
static void put_u64(struct out *o, uint64_t v) { put(o, &v, 8); }
static void put_str(struct out *o, const char *s, uint64_t n) { put_u64(o, n); put(o, s, n); }
static void put_key(struct out *o, const char *k, enum smol_gguf_vtype t) { put_str(o, k, strlen(k)); put_u32(o, t); }
static void kv_u32(struct out *o, const char *k, uint32_t v) { put_key(o, k, SMOL_GGUF_U32); put_u32(o, v); }
static void kv_f32(struct out *o, const char *k, float v) { put_key(o, k, SMOL_GGUF_F32); put(o, &v, 4); }
static void kv_str(struct out *o, const char *k, const char *v) { put_key(o, k, SMOL_GGUF_STRING); put_str(o, v, strlen(v)); }

static const size_t vtype_size[SMOL_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

/* Copies one key of another GGUF verbatim (scalars, strings, arrays). */
static void kv_copy(struct out *o, const struct smol_gguf_kv *kv)
{
    put_key(o, kv->key, kv->type);
    if (kv->type == SMOL_GGUF_STRING) put_str(o, kv->str.ptr, kv->str.len);
    else if (kv->type == SMOL_GGUF_ARRAY) {
        put_u32(o, kv->arr_type);
        put_u64(o, kv->arr_n);
        if (kv->arr_type == SMOL_GGUF_STRING)
            for (uint64_t i = 0; i < kv->arr_n; i++) put_str(o, kv->arr_strs[i].ptr, kv->arr_strs[i].len);
        else put(o, kv->arr_data, vtype_size[kv->arr_type] * kv->arr_n);
    } else if (kv->type == SMOL_GGUF_F32) {
        float f = (float)kv->v.f;
        put(o, &f, 4);
    } else put(o, &kv->v, vtype_size[kv->type]); /* little-endian: low bytes of the widened value */
}

/* ---------------------------------------------------- random blocks */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static void rand_bytes(uint64_t *s, uint8_t *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) { uint64_t v = rng_next(s); memcpy(p + i, &v, 8); }
    if (i < n) { uint64_t v = rng_next(s); memcpy(p + i, &v, n - i); }
}

/* q4_K: sub-block scales in [28, 36), mins 32, so x = d*sc*q - dmin*32 with
 * q uniform in 0..15 has mean ~0 and std ~0.02 */
static void fill_q4_K(uint64_t *s, struct block_q4_K *b, size_t nb)
{
    const float d = 0.02f / (32 * 4.61f);
    const smol_half hd = smol_f32_to_half(d), hm = smol_f32_to_half(d * 7.5f);
    for (size_t i = 0; i < nb; i++) {
        rand_bytes(s, b[i].qs, sizeof b[i].qs);
        uint64_t r = rng_next(s);
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) { sc[j] = (uint8_t)(28 + ((r >> (3 * j)) & 7)); mn[j] = 32; }
        for (int j = 0; j < 4; j++) { /* packing of smol_quantize_q4_K_ref */
            b[i].scales[j] = sc[j];
            b[i].scales[j + 4] = mn[j];
        }
        for (int j = 4; j < 8; j++) {
            b[i].scales[j + 4] = (uint8_t)((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
            b[i].scales[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            b[i].scales[j] |= (uint8_t)((mn[j] >> 4) << 6);
        }
        b[i].d = hd;
        b[i].dmin = hm;
    }
}

/* q6_K: scales in [8, 16), x = d*sc*(q-32), q uniform in 0..63 (std 18.5) */
static void fill_q6_K(uint64_t *s, struct block_q6_K *b, size_t nb)
{
    const smol_half hd = smol_f32_to_half(0.02f / (12 * 18.5f));
    for (size_t i = 0; i < nb; i++) {
        rand_bytes(s, b[i].ql, sizeof b[i].ql);
        rand_bytes(s, b[i].qh, sizeof b[i].qh);
        uint64_t r = rng_next(s);
        for (int j = 0; j < 16; j++) b[i].scales[j] = (int8_t)(8 + ((r >> (4 * j)) & 7));
        b[i].d = hd;
    }
}

/* norms: uniform in 1 +- 0.05 */
static void fill_f32(uint64_t *s, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = 1.0f + ((int)(rng_next(s) >> 40 & 0xffff) - 32768) * (0.05f / 32768);
}

/* Gaussian-like floats of mean 0 and standard deviation sd: the sum of four uniform 16-bit
 * draws (variance 4/12 of the unit interval's square, scaled to 1), enough for weights. */
static void fill_gauss(uint64_t *s, float *x, size_t n, float sd)
{
    const float k = sd * 1.7320508f / 65536.0f;  /* sqrt(3) / 2^16 */
    for (size_t i = 0; i < n; i++) {
        const uint64_t r = rng_next(s);
        const int sum = (int)(r & 0xffff) + (int)(r >> 16 & 0xffff) + (int)(r >> 32 & 0xffff) + (int)(r >> 48) - 131070;
        x[i] = (float)sum * k;
    }
}

/* ------------------------------------------------------------ command */

/* The tokenizer keys' source: $SMOL_FIXTURES/models/..., else TOKENIZER_SRC searched from the
 * working directory and up to 3 levels above it, else beside the executable (build/bin/../..). */
static struct smol_gguf *open_tokenizer_src(void)
{
    struct smol_gguf *tok = NULL;
    char err[SMOL_ERRLEN], path[4200], exe[4096];
    const char *fx = getenv("SMOL_FIXTURES");
    if (fx && *fx) {
        snprintf(path, sizeof path, "%s/models/%s", fx, strrchr(TOKENIZER_SRC, '/') + 1);
        if (access(path, R_OK) == 0 && smol_gguf_open(&tok, path, err)) tok = NULL;
    }
    for (int up = 0; up < 4 && !tok; up++) {
        path[0] = 0;
        for (int k = 0; k < up; k++) strcat(path, "../");
        strcat(path, TOKENIZER_SRC);
        if (access(path, R_OK) == 0 && smol_gguf_open(&tok, path, err)) tok = NULL;
    }
    ssize_t n = tok ? -1 : readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        snprintf(path, sizeof path, "%s/../../%s", exe, TOKENIZER_SRC);
        if (access(path, R_OK) == 0 && smol_gguf_open(&tok, path, err)) tok = NULL;
    }
    return tok;
}

/* Writes tensor t's data: random blocks (the 3B), norms ~1, or gaussian floats quantized to the
 * tensor's type with the reference quantizer.  buf holds PIECE bytes + slack, fbuf PIECE bytes. */
enum { PIECE = 1 << 20 };
static void write_tensor(struct out *o, const struct tplan *t, int random_blocks, uint64_t s, uint8_t *buf,
                         float *fbuf)
{
    const size_t row = smol_row_size(t->type, t->ne0);
    if (random_blocks || !t->sd) {
        const int64_t rows_per = row >= PIECE ? 1 : (int64_t)(PIECE / row);
        for (int64_t r = 0; r < t->ne1 && !o->bad; r += rows_per) {
            const int64_t nr = t->ne1 - r < rows_per ? t->ne1 - r : rows_per;
            const size_t bytes = (size_t)nr * row;
            if (t->type == SMOL_TYPE_Q4_K) fill_q4_K(&s, (struct block_q4_K *)buf, bytes / sizeof(struct block_q4_K));
            else if (t->type == SMOL_TYPE_Q6_K) fill_q6_K(&s, (struct block_q6_K *)buf, bytes / sizeof(struct block_q6_K));
            else fill_f32(&s, (float *)buf, bytes / 4);
            put(o, buf, bytes);
        }
        return;
    }
    /* rows of whole float rows in fbuf (the small presets' rows are at most 512 floats); a
     * quantized row is never larger than its floats, so they fit buf too */
    const smol_quantize_fn quantize = smol_type_traits(t->type)->quantize;
    const int64_t rows_per = (int64_t)(PIECE / ((size_t)t->ne0 * 4));
    SMOL_ASSERT(rows_per >= 1);
    for (int64_t r = 0; r < t->ne1 && !o->bad; r += rows_per) {
        const int64_t nr = t->ne1 - r < rows_per ? t->ne1 - r : rows_per;
        fill_gauss(&s, fbuf, (size_t)nr * t->ne0, t->sd);
        for (int64_t k = 0; k < nr; k++) quantize(fbuf + k * t->ne0, buf + k * row, t->ne0);
        put(o, buf, (size_t)nr * row);
    }
}

int smol_cli_synth(int argc, char **argv)
{
    const char *out_path = NULL, *preset_name = "smollm3-3b", *type_name = "q4_K_m";
    unsigned long long seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && v) out_path = argv[++i];
        else if (!strcmp(a, "--preset") && v) preset_name = argv[++i];
        else if (!strcmp(a, "--type") && v) type_name = argv[++i];
        else if (!strcmp(a, "--seed") && v) {
            char *end;
            errno = 0;
            seed = strtoull(v, &end, 10);
            if (!*v || *end || errno || *v == '-') {
                fprintf(stderr, "smollm3 synth: --seed expects a non-negative integer\n");
                return 2;
            }
            i++;
        } else {
            fprintf(stderr, "smollm3 synth: unknown or incomplete argument '%s'\n", a);
            return 2;
        }
    }
    if (!out_path) {
        fprintf(stderr, "smollm3 synth: -o OUT.gguf is required\n");
        return 2;
    }
    const struct preset *p = NULL;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(preset_name, presets[i].name)) p = &presets[i];
    if (!p) {
        fprintf(stderr, "smollm3 synth: unknown preset '%s' (smollm3-3b, fixture, tiny)\n", preset_name);
        return 2;
    }
    const struct wtype *wt = NULL;
    for (size_t i = 0; i < sizeof wtypes / sizeof wtypes[0]; i++)
        if (!strcmp(type_name, wtypes[i].name)) wt = &wtypes[i];
    if (!wt) {
        fprintf(stderr, "smollm3 synth: unknown --type '%s' (q4_K_m, f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, "
                "q4_K, q5_K, q6_K)\n", type_name);
        return 2;
    }
    if (p->random_blocks && !wt->mix) {
        fprintf(stderr, "smollm3 synth: --preset %s takes --type q4_K_m only (its random blocks are written at disk "
                "speed; quantizing 3 B random floats to %s with the reference quantizers would take about an "
                "hour)\n", p->name, wt->name);
        return 2;
    }

    struct tplan *t = calloc(1 + 9 * (size_t)p->n_layers + 1, sizeof *t);
    if (!t) return 1;
    const int n_t = plan_tensors(p, wt, t);

    struct smol_gguf *tok = open_tokenizer_src();
    if (!tok) fprintf(stderr, "smollm3 synth: %s not found, writing no tokenizer\n", TOKENIZER_SRC);
    uint64_t n_tok_kv = 0;
    for (uint64_t i = 0; tok && i < tok->n_kv; i++) n_tok_kv += !strncmp(tok->kv[i].key, "tokenizer.", 10);

    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    struct out o = {fopen(tmp, "wb"), 0};
    if (!o.f) {
        fprintf(stderr, "smollm3 synth: cannot create %s: %s\n", tmp, strerror(errno));
        smol_gguf_close(&tok);
        free(t);
        return 1;
    }
    static char iobuf[1 << 22];
    setvbuf(o.f, iobuf, _IOFBF, sizeof iobuf);

    const int n_own_kv = 15;
    put(&o, "GGUF", 4);
    put_u32(&o, 3);
    put_u64(&o, (uint64_t)n_t);
    put_u64(&o, n_own_kv + n_tok_kv);
    kv_str(&o, "general.architecture", "smollm3");
    kv_str(&o, "general.type", "model");
    char name[128] = "SmolLM3 3B synthetic (random weights)";
    if (!p->random_blocks) snprintf(name, sizeof name, "SmolLM3 synthetic %s %s (random weights)", p->name, wt->name);
    kv_str(&o, "general.name", name);
    kv_u32(&o, "smollm3.block_count", (uint32_t)p->n_layers);
    kv_u32(&o, "smollm3.context_length", (uint32_t)p->ctx);
    kv_u32(&o, "smollm3.embedding_length", (uint32_t)p->dim);
    kv_u32(&o, "smollm3.feed_forward_length", (uint32_t)p->ffn);
    kv_u32(&o, "smollm3.attention.head_count", (uint32_t)p->n_heads);
    kv_u32(&o, "smollm3.attention.head_count_kv", (uint32_t)p->n_kv_heads);
    kv_f32(&o, "smollm3.rope.freq_base", 5000000.0f);
    kv_f32(&o, "smollm3.attention.layer_norm_rms_epsilon", 1e-6f);
    kv_u32(&o, "smollm3.vocab_size", (uint32_t)p->vocab);
    kv_u32(&o, "smollm3.rope.dimension_count", (uint32_t)(p->dim / p->n_heads));
    kv_u32(&o, "general.quantization_version", 2);
    kv_u32(&o, "general.file_type", wt->file_type);
    for (uint64_t i = 0; tok && i < tok->n_kv; i++)
        if (!strncmp(tok->kv[i].key, "tokenizer.", 10)) kv_copy(&o, &tok->kv[i]);
    for (int i = 0; i < n_t; i++) {
        put_str(&o, t[i].name, strlen(t[i].name));
        const int nd = t[i].ne1 == 1 ? 1 : 2;
        put_u32(&o, (uint32_t)nd);
        put_u64(&o, (uint64_t)t[i].ne0);
        if (nd == 2) put_u64(&o, (uint64_t)t[i].ne1);
        put_u32(&o, t[i].type);
        put_u64(&o, t[i].offset);
    }
    smol_gguf_close(&tok);
    static const uint8_t zeros[ALIGN];
    long pos = ftell(o.f);
    if (pos < 0) o.bad = 1;
    else put(&o, zeros, (size_t)((ALIGN - pos % ALIGN) % ALIGN));

    /* data: each tensor in pieces of whole rows, padded to the alignment */
    uint8_t *buf = malloc(PIECE + 4096);
    float *fbuf = malloc(PIECE);
    uint64_t total = 0;
    for (int i = 0; i < n_t && buf && fbuf && !o.bad; i++) {
        const uint64_t s = seed * 0x9E3779B97F4A7C15ull + (uint64_t)i * 0xD1B54A32D192ED03ull + 1;
        write_tensor(&o, &t[i], p->random_blocks, s, buf, fbuf);
        put(&o, zeros, (size_t)((ALIGN - t[i].size % ALIGN) % ALIGN));
        total += t[i].size;
    }
    if (!buf || !fbuf) o.bad = 1;
    free(fbuf);
    free(buf);
    if (fclose(o.f)) o.bad = 1;
    if (o.bad || rename(tmp, out_path)) {
        fprintf(stderr, "smollm3 synth: cannot write %s: %s\n", out_path, strerror(errno));
        unlink(tmp);
        free(t);
        return 1;
    }
    /* "(216 q4_K, 37 q6_K, 73 f32)": the count of each type present, in this order */
    static const uint32_t order[] = {SMOL_TYPE_Q4_K, SMOL_TYPE_Q6_K, SMOL_TYPE_Q5_K, SMOL_TYPE_Q8_0, SMOL_TYPE_Q4_0,
                                     SMOL_TYPE_Q4_1, SMOL_TYPE_Q5_0, SMOL_TYPE_Q5_1, SMOL_TYPE_F16, SMOL_TYPE_BF16,
                                     SMOL_TYPE_F32};
    char counts[256] = "";
    size_t len = 0;
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        int c = 0;
        for (int i = 0; i < n_t; i++) c += t[i].type == order[k];
        if (c && len < sizeof counts)
            len += snprintf(counts + len, sizeof counts - len, "%s%d %s", len ? ", " : "", c, smol_type_name(order[k]));
    }
    printf("wrote %s: preset %s, type %s, %d tensors (%s), %.3f GB of tensor data\n", out_path, p->name, wt->name, n_t,
           counts, total / 1e9);
    free(t);
    return 0;
}
