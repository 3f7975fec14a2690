/*
 * tokenizer.c - byte-level BPE (GPT-2 style) from GGUF metadata.
 *
 * Load: every token string is decoded once from GPT-2's byte-level alphabet
 * to its raw bytes (the piece), so encode never builds byte-level strings:
 * the vocabulary map is keyed by raw bytes, merges by (left id, right id).
 * CONTROL and USER_DEFINED tokens keep their text and live in a byte trie
 * that is walked at each position whose byte can start one.
 *
 * Encode: text -> segments between special-token matches (leftmost-longest)
 * -> pre-tokens (a PCRE2 regex run in a loop over each segment; bytes the
 * regex does not cover, e.g. invalid UTF-8, become pre-tokens of their own)
 * -> BPE per pre-token.  BPE is Hugging Face's merge_word: a binary heap of
 * candidate pairs ordered by (merge rank, position), stale entries skipped
 * when popped, symbols kept in a doubly linked list: O(n log n) per word, so
 * a 10 MB run of spaces is no worse than 10 MB of prose.  With ignore_merges
 * (Llama-3 family) a pre-token found whole in the vocabulary skips BPE.
 *
 * All scratch lives in a per-call struct: the tokenizer is immutable after
 * load and safe to share between threads.
 */
#include "daemon/text/tokenizer.h"
#include "daemon/model/model.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---------------------------------------------------------------- types */

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };
enum pre_kind { PRE_LLAMA3, PRE_GPT2, PRE_SMOLLM };

/* A heap entry packs (merge rank << 40 | position of the left symbol), so
 * ordering by the integer is HF's order: lowest rank, then leftmost. */
#define HEAP_POS_BITS 40
#define HEAP_POS_MASK ((1ull << HEAP_POS_BITS) - 1)

static const char RE_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char RE_DIGIT[] = "\\p{N}";

struct merge_slot {             /* open addressing; key UINT64_MAX = empty */
    uint64_t key;               /* (uint64)left_id << 32 | right_id */
    uint32_t rank;              /* index in tokenizer.ggml.merges: lower merges first */
    int32_t id;                 /* the merged token */
};

struct trie_node {              /* special-token trie; children as a sibling list */
    int32_t child, sibling;     /* node indices, -1 = none */
    int32_t id;                 /* token ending here, -1 = none */
    uint8_t byte;
};

struct smol_tokenizer {
    int32_t n_vocab;
    char *pieces;               /* all pieces back to back, each NUL-terminated */
    uint32_t *piece_off;        /* [n_vocab] offset into pieces */
    uint32_t *piece_len;        /* [n_vocab] bytes */
    uint8_t *type;              /* [n_vocab] GGUF token type */

    int32_t *vmap;              /* [vmap_mask+1] raw bytes -> id of a non-special token, -1 empty */
    uint64_t vmap_mask;
    struct merge_slot *mmap;    /* [mmap_mask+1] */
    uint64_t mmap_mask;
    int32_t byte_id[256];       /* id of the single-byte token of each byte */

    struct trie_node *trie;     /* [n_trie], node 0 = root */
    int32_t n_trie;
    uint8_t spec_first[256];    /* 1 if some special token starts with this byte */

    enum pre_kind pre;
    int ignore_merges;
    pcre2_code *re;             /* the split regex */
    pcre2_code *re_digit;       /* \p{N}, PRE_SMOLLM only */
    pcre2_match_context *mctx;  /* no match limit; read-only, shared by all calls */
    char pre_name[32];

    struct smol_special_ids sp;
    int32_t eog[8];
    int n_eog;
};

/* ---------------------------------------------------------------- ids */

enum smol_err smol_ids_push(struct smol_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v) return SMOL_ENOMEM;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return SMOL_OK;
}

void smol_ids_free(struct smol_ids *ids)
{
    if (!ids) return;
    free(ids->v);
    ids->v = NULL;
    ids->n = ids->cap = 0;
}

int smol_lcp(const int32_t *a, int na, const int32_t *b, int nb)
{
    int n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* ---------------------------------------------------------------- byte-level alphabet */

/* GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the
 * other 68 to U+0100.. in byte order.  cp_to_byte is its inverse (cp < 324). */
static void byte_alphabet(uint16_t byte_to_cp[256], int16_t cp_to_byte[324])
{
    int n = 0;
    for (int i = 0; i < 324; i++) cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
        byte_to_cp[b] = printable ? b : 256 + n++;
        cp_to_byte[byte_to_cp[b]] = (int16_t)b;
    }
}

/* Decodes byte-level s[0..n) into out (n bytes suffice); returns the length.
 * Characters outside the alphabet (not produced by a GPT-2 converter) are
 * copied as their UTF-8 bytes rather than rejected. */
static size_t byte_decode(const int16_t cp_to_byte[324], const char *s, size_t n, char *out)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp = p[i];
        size_t k = 1;
        if (cp >= 0xc0 && cp < 0xe0 && i + 1 < n && (p[i + 1] & 0xc0) == 0x80) {
            cp = ((cp & 0x1f) << 6) | (p[i + 1] & 0x3f);
            k = 2;
        }
        if (k == 2 && cp < 324 && cp_to_byte[cp] >= 0) {
            out[o++] = (char)cp_to_byte[cp];
        } else if (k == 1 && cp < 0x80 && cp_to_byte[cp] >= 0) {
            out[o++] = (char)cp;
        } else {
            memcpy(out + o, p + i, k);
            o += k;
        }
        i += k;
    }
    return o;
}

/* ---------------------------------------------------------------- hash maps */

static uint64_t pow2_at_least(uint64_t n)
{
    uint64_t p = 1024;
    while (p < n) p <<= 1;
    return p;
}

static int32_t vmap_get(const struct smol_tokenizer *t, const char *s, size_t n)
{
    uint64_t h = XXH3_64bits(s, n) & t->vmap_mask;
    for (;; h = (h + 1) & t->vmap_mask) {
        int32_t id = t->vmap[h];
        if (id < 0) return -1;
        if (t->piece_len[id] == n && !memcmp(t->pieces + t->piece_off[id], s, n)) return id;
    }
}

static void vmap_put(struct smol_tokenizer *t, int32_t id)
{
    const char *s = t->pieces + t->piece_off[id];
    size_t n = t->piece_len[id];
    uint64_t h = XXH3_64bits(s, n) & t->vmap_mask;
    for (;; h = (h + 1) & t->vmap_mask) {
        int32_t o = t->vmap[h];
        if (o < 0) { t->vmap[h] = id; return; }
        if (t->piece_len[o] == n && !memcmp(t->pieces + t->piece_off[o], s, n)) return; /* keep lower id */
    }
}

static inline uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }
static inline uint64_t pair_hash(uint64_t k) { return (k * 0x9e3779b97f4a7c15ull) ^ (k >> 29); }

static const struct merge_slot *mmap_get(const struct smol_tokenizer *t, int32_t a, int32_t b)
{
    uint64_t k = pair_key(a, b);
    for (uint64_t h = pair_hash(k) & t->mmap_mask;; h = (h + 1) & t->mmap_mask) {
        const struct merge_slot *s = &t->mmap[h];
        if (s->key == k) return s;
        if (s->key == UINT64_MAX) return NULL;
    }
}

static void mmap_put(struct smol_tokenizer *t, int32_t a, int32_t b, uint32_t rank, int32_t id)
{
    uint64_t k = pair_key(a, b);
    for (uint64_t h = pair_hash(k) & t->mmap_mask;; h = (h + 1) & t->mmap_mask) {
        struct merge_slot *s = &t->mmap[h];
        if (s->key == k) return; /* a repeated merge keeps its first (lowest) rank */
        if (s->key == UINT64_MAX) { s->key = k; s->rank = rank; s->id = id; return; }
    }
}

/* ---------------------------------------------------------------- special-token trie */

static int trie_insert(struct smol_tokenizer *t, const char *s, size_t n, int32_t id, int32_t *cap)
{
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)s[i];
        int32_t ch = t->trie[node].child;
        while (ch >= 0 && t->trie[ch].byte != c) ch = t->trie[ch].sibling;
        if (ch < 0) {
            if (t->n_trie == *cap) {
                int32_t nc = *cap * 2;
                struct trie_node *nt = realloc(t->trie, (size_t)nc * sizeof *nt);
                if (!nt) return -1;
                t->trie = nt;
                *cap = nc;
            }
            ch = t->n_trie++;
            t->trie[ch] = (struct trie_node){.child = -1, .sibling = t->trie[node].child, .id = -1, .byte = c};
            t->trie[node].child = ch;
        }
        node = ch;
    }
    if (t->trie[node].id < 0) t->trie[node].id = id; /* duplicate text: lowest id wins */
    return 0;
}

/* Longest special token that starts at s and is allowed: USER_DEFINED
 * tokens always, CONTROL tokens only when they are at most ctl_max bytes long
 * (0: never, as without parse_special; SIZE_MAX: always).  Returns its id and
 * *mlen, or -1. */
static int32_t trie_match(const struct smol_tokenizer *t, const char *s, size_t n, size_t ctl_max, size_t *mlen)
{
    int32_t node = 0, best = -1;
    for (size_t i = 0; i < n; i++) {
        int32_t ch = t->trie[node].child;
        while (ch >= 0 && t->trie[ch].byte != (uint8_t)s[i]) ch = t->trie[ch].sibling;
        if (ch < 0) break;
        node = ch;
        int32_t id = t->trie[node].id;
        if (id >= 0 && (i < ctl_max || t->type[id] == TT_USER_DEFINED)) {
            best = id;
            *mlen = i + 1;
        }
    }
    return best;
}

/* ---------------------------------------------------------------- load */

static enum smol_err compile_re(pcre2_code **out, const char *pat, char *err)
{
    int ec;
    PCRE2_SIZE eo;
    *out = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                         &ec, &eo, NULL);
    if (!*out) {
        PCRE2_UCHAR msg[120];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return smol_errf(err, SMOL_EINTERNAL, "tokenizer: regex does not compile at %zu: %s", (size_t)eo, msg);
    }
    pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE); /* interpreter fallback if JIT is unavailable */
    return SMOL_OK;
}

static int32_t find_special(const struct smol_tokenizer *t, const char *s)
{
    size_t n = strlen(s), m = 0;
    int32_t id = trie_match(t, s, n, SIZE_MAX, &m);
    return id >= 0 && m == n ? id : -1;
}

static enum smol_err load_vocab(struct smol_tokenizer *t, const struct smol_gguf *g, const int16_t *cp_to_byte,
                                char *err)
{
    const struct smol_gguf_kv *toks, *types;
    enum smol_err e;
    if ((e = smol_gguf_get_arr(g, "tokenizer.ggml.tokens", SMOL_GGUF_STRING, &toks, 1, err))) return e;
    if ((e = smol_gguf_get_arr(g, "tokenizer.ggml.token_type", SMOL_GGUF_VTYPE_COUNT, &types, 0, err))) return e;
    if (toks->arr_n == 0 || toks->arr_n > INT32_MAX / 4)
        return smol_errf(err, SMOL_EFORMAT, "tokenizer.ggml.tokens: bad count %llu", (unsigned long long)toks->arr_n);
    if (types && (types->arr_n != toks->arr_n || types->arr_type == SMOL_GGUF_STRING))
        return smol_errf(err, SMOL_EFORMAT, "tokenizer.ggml.token_type: %llu entries for %llu tokens",
                         (unsigned long long)types->arr_n, (unsigned long long)toks->arr_n);
    t->n_vocab = (int32_t)toks->arr_n;
    size_t total = 0;
    for (uint64_t i = 0; i < toks->arr_n; i++) total += toks->arr_strs[i].len + 1;
    if (total > UINT32_MAX) return smol_errf(err, SMOL_EFORMAT, "tokenizer.ggml.tokens: too large");
    t->pieces = malloc(total);
    t->piece_off = malloc((size_t)t->n_vocab * sizeof *t->piece_off);
    t->piece_len = malloc((size_t)t->n_vocab * sizeof *t->piece_len);
    t->type = malloc((size_t)t->n_vocab);
    t->vmap_mask = pow2_at_least((uint64_t)t->n_vocab * 2) - 1;
    t->vmap = malloc((t->vmap_mask + 1) * sizeof *t->vmap);
    int32_t trie_cap = 1024;
    t->trie = malloc((size_t)trie_cap * sizeof *t->trie);
    if (!t->pieces || !t->piece_off || !t->piece_len || !t->type || !t->vmap || !t->trie)
        return smol_errf(err, SMOL_ENOMEM, "tokenizer: out of memory for %d tokens", t->n_vocab);
    memset(t->vmap, 0xff, (t->vmap_mask + 1) * sizeof *t->vmap);
    t->trie[0] = (struct trie_node){.child = -1, .sibling = -1, .id = -1};
    t->n_trie = 1;

    size_t off = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        struct smol_gguf_str s = toks->arr_strs[i];
        int64_t ty = types ? smol_gguf_arr_int(types, (uint64_t)i) : TT_NORMAL;
        t->type[i] = ty >= 0 && ty <= 255 ? (uint8_t)ty : TT_NORMAL;
        int special = t->type[i] == TT_CONTROL || t->type[i] == TT_USER_DEFINED;
        size_t n;
        if (special) {
            memcpy(t->pieces + off, s.ptr, s.len);
            n = s.len;
        } else {
            n = byte_decode(cp_to_byte, s.ptr, s.len, t->pieces + off);
        }
        t->pieces[off + n] = 0;
        t->piece_off[i] = (uint32_t)off;
        t->piece_len[i] = (uint32_t)n;
        off += n + 1;
        if (special && n > 0) {
            if (trie_insert(t, t->pieces + t->piece_off[i], n, i, &trie_cap))
                return smol_errf(err, SMOL_ENOMEM, "tokenizer: out of memory");
            t->spec_first[(uint8_t)t->pieces[t->piece_off[i]]] = 1;
        } else if (!special && n > 0) {
            vmap_put(t, i);
        }
    }
    int n_bytes = 0;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = vmap_get(t, &c, 1); /* -1: the byte is dropped, see bpe_word */
        n_bytes += t->byte_id[b] >= 0;
    }
    if (n_bytes < 128)
        return smol_errf(err, SMOL_EFORMAT, "tokenizer.ggml.tokens: only %d of 256 byte-level tokens: not byte-level BPE",
                         n_bytes);
    return SMOL_OK;
}

static enum smol_err load_merges(struct smol_tokenizer *t, const struct smol_gguf *g, const int16_t *cp_to_byte,
                                 char *err)
{
    const struct smol_gguf_kv *merges;
    enum smol_err e;
    if ((e = smol_gguf_get_arr(g, "tokenizer.ggml.merges", SMOL_GGUF_STRING, &merges, 1, err))) return e;
    if (merges->arr_n >= 1ull << (64 - HEAP_POS_BITS)) /* ranks must fit a heap entry */
        return smol_errf(err, SMOL_EFORMAT, "tokenizer.ggml.merges: bad count");
    t->mmap_mask = pow2_at_least(merges->arr_n * 2) - 1;
    t->mmap = malloc((t->mmap_mask + 1) * sizeof *t->mmap);
    size_t bufcap = 256;
    char *buf = malloc(bufcap);
    if (!t->mmap || !buf) {
        free(buf);
        return smol_errf(err, SMOL_ENOMEM, "tokenizer: out of memory for merges");
    }
    for (uint64_t i = 0; i <= t->mmap_mask; i++) t->mmap[i].key = UINT64_MAX;
    for (uint64_t r = 0; r < merges->arr_n; r++) {
        struct smol_gguf_str s = merges->arr_strs[r];
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp) {
            free(buf);
            return smol_errf(err, SMOL_EFORMAT, "tokenizer.ggml.merges[%llu]: no space", (unsigned long long)r);
        }
        if (s.len > bufcap) {
            bufcap = s.len * 2;
            char *nb = realloc(buf, bufcap);
            if (!nb) { free(buf); return smol_errf(err, SMOL_ENOMEM, "tokenizer: out of memory"); }
            buf = nb;
        }
        size_t nl = byte_decode(cp_to_byte, s.ptr, (size_t)(sp - s.ptr), buf);
        size_t nr = byte_decode(cp_to_byte, sp + 1, s.len - (size_t)(sp - s.ptr) - 1, buf + nl);
        int32_t a = vmap_get(t, buf, nl), b = vmap_get(t, buf + nl, nr), m = vmap_get(t, buf, nl + nr);
        if (a < 0 || b < 0 || m < 0) continue; /* like HF, a merge outside the vocabulary can never apply */
        mmap_put(t, a, b, (uint32_t)r, m);
    }
    free(buf);
    return SMOL_OK;
}

static enum smol_err load_pre(struct smol_tokenizer *t, const struct smol_gguf *g, char *err)
{
    struct smol_gguf_str s = {"default", 7};
    enum smol_err e;
    if ((e = smol_gguf_get_str(g, "tokenizer.ggml.model", &s, 1, err))) return e;
    if (!smol_gguf_str_eq(s, "gpt2"))
        return smol_errf(err, SMOL_EUNSUPPORTED, "tokenizer.ggml.model '%.*s' is not supported (only gpt2)",
                         (int)(s.len > 64 ? 64 : s.len), s.ptr);
    s = (struct smol_gguf_str){"default", 7};
    if ((e = smol_gguf_get_str(g, "tokenizer.ggml.pre", &s, 0, err))) return e;
    if (smol_gguf_str_eq(s, "smaug-bpe") || smol_gguf_str_eq(s, "llama-bpe") || smol_gguf_str_eq(s, "llama3")) {
        t->pre = PRE_LLAMA3;
        t->ignore_merges = 1;
    } else if (smol_gguf_str_eq(s, "smollm")) {
        t->pre = PRE_SMOLLM;
    } else if (smol_gguf_str_eq(s, "gpt2") || smol_gguf_str_eq(s, "default")) {
        t->pre = PRE_GPT2;
    } else {
        return smol_errf(err, SMOL_EUNSUPPORTED,
                         "tokenizer.ggml.pre '%.*s' is not supported (smaug-bpe, llama-bpe, smollm, gpt2, default)",
                         (int)(s.len > 64 ? 64 : s.len), s.ptr);
    }
    snprintf(t->pre_name, sizeof t->pre_name, "%.*s", (int)(s.len > 31 ? 31 : s.len), s.ptr);
    if ((e = compile_re(&t->re, t->pre == PRE_LLAMA3 ? RE_LLAMA3 : RE_GPT2, err))) return e;
    if (t->pre == PRE_SMOLLM && (e = compile_re(&t->re_digit, RE_DIGIT, err))) return e;
    /* \s*[\r\n]+ backtracks over a whole whitespace run once (linear), which
     * exceeds PCRE2's default 10M match limit on multi-megabyte runs. */
    if (!(t->mctx = pcre2_match_context_create(NULL))) return smol_errf(err, SMOL_ENOMEM, "tokenizer: out of memory");
    pcre2_set_match_limit(t->mctx, UINT32_MAX);
    return SMOL_OK;
}

static enum smol_err load_special(struct smol_tokenizer *t, const struct smol_gguf *g, char *err)
{
    static const char *const keys[3] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                        "tokenizer.ggml.padding_token_id"};
    int32_t *dst[3] = {&t->sp.bos, &t->sp.eos, &t->sp.pad};
    enum smol_err e;
    for (int i = 0; i < 3; i++) {
        int64_t v = -1;
        if ((e = smol_gguf_get_i64(g, keys[i], &v, 0, err))) return e;
        if (v < -1 || v >= t->n_vocab)
            return smol_errf(err, SMOL_EFORMAT, "%s = %lld outside the vocabulary of %d", keys[i], (long long)v,
                             t->n_vocab);
        *dst[i] = (int32_t)v;
    }
    if ((e = smol_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &t->sp.add_bos, 0, err))) return e;
    t->sp.im_start = find_special(t, "<|im_start|>");
    t->sp.im_end = find_special(t, "<|im_end|>");
    t->sp.eot = find_special(t, "<|eot_id|>");
    t->sp.eom = find_special(t, "<|eom_id|>");
    t->sp.end_of_text = find_special(t, "<|end_of_text|>");
    if (t->sp.end_of_text < 0) t->sp.end_of_text = find_special(t, "<|endoftext|>");
    t->sp.think = find_special(t, "<think>");
    t->sp.think_end = find_special(t, "</think>");
    t->sp.tool_call = find_special(t, "<tool_call>");
    t->sp.tool_call_end = find_special(t, "</tool_call>");
    t->sp.tool_response = find_special(t, "<tool_response>");
    t->sp.tool_response_end = find_special(t, "</tool_response>");
    int32_t cand[] = {t->sp.eos, t->sp.im_end, t->sp.eot, t->sp.end_of_text, t->sp.eom};
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
        if (cand[i] < 0 || smol_tokenizer_is_eog(t, cand[i])) continue;
        t->eog[t->n_eog++] = cand[i];
    }
    return SMOL_OK;
}

enum smol_err smol_tokenizer_new(struct smol_tokenizer **out, const struct smol_gguf *g, char *err)
{
    *out = NULL;
    struct smol_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return smol_errf(err, SMOL_ENOMEM, "tokenizer: out of memory");
    uint16_t byte_to_cp[256];
    int16_t cp_to_byte[324];
    byte_alphabet(byte_to_cp, cp_to_byte);
    enum smol_err e;
    if ((e = load_pre(t, g, err)) || (e = load_vocab(t, g, cp_to_byte, err)) ||
        (e = load_merges(t, g, cp_to_byte, err)) || (e = load_special(t, g, err))) {
        smol_tokenizer_free(&t);
        return e;
    }
    *out = t;
    return SMOL_OK;
}

void smol_tokenizer_free(struct smol_tokenizer **tp)
{
    if (!tp || !*tp) return;
    struct smol_tokenizer *t = *tp;
    free(t->pieces);
    free(t->piece_off);
    free(t->piece_len);
    free(t->type);
    free(t->vmap);
    free(t->mmap);
    free(t->trie);
    pcre2_code_free(t->re);
    pcre2_code_free(t->re_digit);
    pcre2_match_context_free(t->mctx);
    free(t);
    *tp = NULL;
}

/* ---------------------------------------------------------------- BPE */

struct scratch {                /* per encode call, grown on demand */
    int32_t *sym;               /* [cap] token id per symbol, -1 = merged away */
    int32_t *prev, *next;       /* [cap] linked list over symbols */
    uint64_t *heap;             /* [2*cap]: at most n-1 initial pairs + 1 net push per merge */
    size_t cap, n_heap;
    pcre2_match_data *md;
    pcre2_match_data *md_digit;
    pcre2_match_context *mctx;  /* only after a JIT stack overflow: t->mctx + a big JIT stack */
    pcre2_jit_stack *jit_stack;
};

/* A 4-ary min-heap: half the depth of a binary one, and the four children
 * share a cache line, which is what matters on multi-megabyte words. */
static void heap_push(struct scratch *s, uint32_t rank, uint32_t pos)
{
    size_t i = s->n_heap++;
    uint64_t e = (uint64_t)rank << HEAP_POS_BITS | pos;
    while (i > 0) {
        size_t p = (i - 1) / 4;
        if (e >= s->heap[p]) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = e;
}

static uint64_t heap_pop(struct scratch *s)
{
    uint64_t top = s->heap[0], e = s->heap[--s->n_heap];
    size_t n = s->n_heap, i = 0;
    for (;;) {
        size_t c = 4 * i + 1, end = c + 4 < n ? c + 4 : n;
        if (c >= n) break;
        size_t m = c;
        for (size_t k = c + 1; k < end; k++)
            if (s->heap[k] < s->heap[m]) m = k;
        if (s->heap[m] >= e) break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (n) s->heap[i] = e;
    return top;
}

static enum smol_err scratch_reserve(struct scratch *s, size_t n)
{
    if (n <= s->cap) return SMOL_OK;
    size_t cap = n < 256 ? 256 : n + n / 2;
    int32_t *a = realloc(s->sym, cap * sizeof *a);
    if (a) s->sym = a;
    int32_t *b = realloc(s->prev, cap * sizeof *b);
    if (b) s->prev = b;
    int32_t *c = realloc(s->next, cap * sizeof *c);
    if (c) s->next = c;
    uint64_t *h = realloc(s->heap, 2 * cap * sizeof *h);
    if (h) s->heap = h;
    if (!a || !b || !c || !h) return SMOL_ENOMEM;
    s->cap = cap;
    return SMOL_OK;
}

static void scratch_free(struct scratch *s)
{
    free(s->sym);
    free(s->prev);
    free(s->next);
    free(s->heap);
    pcre2_match_data_free(s->md);
    pcre2_match_data_free(s->md_digit);
    pcre2_match_context_free(s->mctx);
    pcre2_jit_stack_free(s->jit_stack);
}

/* pcre2_match with t's limits; on a JIT stack overflow (the default is 32
 * KiB) retries once with a per-call 64 MiB stack. */
static int re_match(const struct smol_tokenizer *t, struct scratch *s, const pcre2_code *re, const uint8_t *p,
                    size_t n, size_t pos, pcre2_match_data *md)
{
    int rc = pcre2_match(re, p, n, pos, PCRE2_NO_UTF_CHECK, md, s->mctx ? s->mctx : t->mctx);
    if (rc != PCRE2_ERROR_JIT_STACKLIMIT || s->mctx) return rc;
    if (!(s->mctx = pcre2_match_context_copy(t->mctx))) return PCRE2_ERROR_NOMEMORY;
    if (!(s->jit_stack = pcre2_jit_stack_create(1 << 16, 64 << 20, NULL))) return PCRE2_ERROR_NOMEMORY;
    pcre2_jit_stack_assign(s->mctx, NULL, s->jit_stack);
    return pcre2_match(re, p, n, pos, PCRE2_NO_UTF_CHECK, md, s->mctx);
}

/* One pre-token w[0..n) -> ids appended to out. */
static enum smol_err bpe_word(const struct smol_tokenizer *t, struct scratch *s, const uint8_t *w, size_t n,
                              struct smol_ids *out)
{
    if (n == 1) return t->byte_id[w[0]] >= 0 ? smol_ids_push(out, t->byte_id[w[0]]) : SMOL_OK;
    if (t->ignore_merges) {
        int32_t id = vmap_get(t, (const char *)w, n);
        if (id >= 0) return smol_ids_push(out, id);
    }
    if (n > INT32_MAX / 4) return SMOL_ENOMEM;
    if (scratch_reserve(s, n)) return SMOL_ENOMEM;
    int32_t *sym = s->sym, *prev = s->prev, *next = s->next;
    s->n_heap = 0;
    /* A byte without a token (SmolLM2 lacks 21 of them, e.g. 0x04, 0xff) is
     * skipped, as HF's BPE does when the model has no unk token: its
     * neighbours become adjacent and may merge. */
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (t->byte_id[w[i]] >= 0) sym[k++] = t->byte_id[w[i]];
    if (k == 0) return SMOL_OK;
    n = k;
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        const struct merge_slot *m = mmap_get(t, sym[i], sym[i + 1]);
        if (m) heap_push(s, m->rank, (uint32_t)i);
    }
    while (s->n_heap) {
        uint64_t top = heap_pop(s);
        int32_t p = (int32_t)(top & HEAP_POS_MASK), q = next[p];
        if (sym[p] < 0 || q < 0) continue;
        const struct merge_slot *m = mmap_get(t, sym[p], sym[q]);
        if (!m || m->rank != top >> HEAP_POS_BITS) continue; /* stale: a neighbour changed since the push */
        sym[p] = m->id;
        sym[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        if (prev[p] >= 0 && (m = mmap_get(t, sym[prev[p]], sym[p]))) heap_push(s, m->rank, (uint32_t)prev[p]);
        if (next[p] >= 0 && (m = mmap_get(t, sym[p], sym[next[p]]))) heap_push(s, m->rank, (uint32_t)p);
    }
    for (int32_t i = 0; i >= 0; i = next[i])
        if (smol_ids_push(out, sym[i])) return SMOL_ENOMEM;
    return SMOL_OK;
}

/* ---------------------------------------------------------------- pre-tokenizers */

static enum smol_err re_fail(int rc, char *err)
{
    PCRE2_UCHAR msg[120];
    pcre2_get_error_message(rc, msg, sizeof msg);
    return smol_errf(err, rc == PCRE2_ERROR_NOMEMORY ? SMOL_ENOMEM : SMOL_EINTERNAL, "tokenizer: regex match: %s",
                     msg);
}

/* Splits s[0..n) with re; every match and every gap between matches (bytes
 * the regex cannot match: invalid UTF-8) is one pre-token.  PCRE2_NO_UTF_CHECK
 * keeps the loop linear (the pattern was compiled with MATCH_INVALID_UTF, so
 * skipping the check is safe). */
static enum smol_err split_regex(const struct smol_tokenizer *t, struct scratch *s, const uint8_t *p, size_t n,
                                 struct smol_ids *out, char *err)
{
    size_t pos = 0;
    enum smol_err e;
    while (pos < n) {
        int rc = re_match(t, s, t->re, p, n, pos, s->md);
        size_t ms = n, me = n;
        if (rc >= 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
            ms = ov[0];
            me = ov[1];
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            return re_fail(rc, err);
        }
        if (ms > pos && (e = bpe_word(t, s, p + pos, ms - pos, out))) return e;
        if (me == ms) { /* cannot happen with our patterns; never loop forever */
            if (me < n && (e = bpe_word(t, s, p + me, 1, out))) return e;
            pos = me + 1;
            continue;
        }
        if ((e = bpe_word(t, s, p + ms, me - ms, out))) return e;
        pos = me;
    }
    return SMOL_OK;
}

/* SmolLM2: every \p{N} character is a pre-token of its own (HF
 * Digits(individual_digits)), the text between goes through the GPT-2 regex. */
static enum smol_err split_digits(const struct smol_tokenizer *t, struct scratch *s, const uint8_t *p, size_t n,
                                  struct smol_ids *out, char *err)
{
    size_t pos = 0;
    enum smol_err e;
    while (pos < n) {
        int rc = re_match(t, s, t->re_digit, p, n, pos, s->md_digit);
        if (rc == PCRE2_ERROR_NOMATCH) return split_regex(t, s, p + pos, n - pos, out, err);
        if (rc < 0) return re_fail(rc, err);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md_digit);
        size_t ms = ov[0], me = ov[1];
        if (ms > pos && (e = split_regex(t, s, p + pos, ms - pos, out, err))) return e;
        if (me > ms && (e = bpe_word(t, s, p + ms, me - ms, out))) return e;
        pos = me > pos ? me : pos + 1;
    }
    return SMOL_OK;
}

static enum smol_err encode_plain(const struct smol_tokenizer *t, struct scratch *s, const uint8_t *p, size_t n,
                                  struct smol_ids *out, char *err)
{
    if (n == 0) return SMOL_OK;
    return t->pre == PRE_SMOLLM ? split_digits(t, s, p, n, out, err) : split_regex(t, s, p, n, out, err);
}

/* ---------------------------------------------------------------- public */

static int span_cmp(const void *a, const void *b)
{
    const struct smol_span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The encoder proper.  spans[0..n_spans): sorted, disjoint, non-empty byte
 * ranges of text in which no CONTROL token may have a byte. */
static enum smol_err encode_impl(const struct smol_tokenizer *t, const char *text, size_t len, int parse_special,
                                 const struct smol_span *spans, size_t n_spans, struct smol_ids *out, char *err)
{
    struct scratch s = {0};
    enum smol_err e = SMOL_OK;
    s.md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (t->re_digit) s.md_digit = pcre2_match_data_create_from_pattern(t->re_digit, NULL);
    if (!s.md || (t->re_digit && !s.md_digit)) {
        e = smol_errf(err, SMOL_ENOMEM, "tokenizer: out of memory");
        goto done;
    }
    const uint8_t *p = (const uint8_t *)text;
    size_t seg = 0; /* start of the current plain segment */
    size_t k = 0;   /* first span that ends after i */
    for (size_t i = 0; i < len; i++) {
        if (!t->spec_first[p[i]]) continue;
        size_t ctl_max = parse_special ? SIZE_MAX : 0;
        if (ctl_max && n_spans) {
            while (k < n_spans && spans[k].off + spans[k].len <= i) k++;
            if (k < n_spans) ctl_max = spans[k].off <= i ? 0 : spans[k].off - i;
        }
        size_t m = 0;
        int32_t id = trie_match(t, text + i, len - i, ctl_max, &m);
        if (id < 0) continue;
        if ((e = encode_plain(t, &s, p + seg, i - seg, out, err))) goto done;
        if (smol_ids_push(out, id)) { e = smol_errf(err, SMOL_ENOMEM, "tokenizer: out of memory"); goto done; }
        i += m - 1;
        seg = i + 1;
    }
    e = encode_plain(t, &s, p + seg, len - seg, out, err);
    if (e == SMOL_ENOMEM) smol_errf(err, e, "tokenizer: out of memory for %zu bytes of text", len);
done:
    scratch_free(&s);
    return e;
}

enum smol_err smol_tokenizer_encode(const struct smol_tokenizer *t, const char *text, size_t len, int parse_special,
                                    struct smol_ids *out, char *err)
{
    if (len == 0) return SMOL_OK;
    if (!text) return smol_errf(err, SMOL_EINVAL, "tokenizer: NULL text");
    return encode_impl(t, text, len, parse_special, NULL, 0, out, err);
}

enum smol_err smol_tokenizer_encode_spans(const struct smol_tokenizer *t, const char *text, size_t len,
                                          int parse_special, const struct smol_span *untrusted, size_t n_untrusted,
                                          struct smol_ids *out, char *err)
{
    if (n_untrusted && !untrusted) return smol_errf(err, SMOL_EINVAL, "tokenizer: NULL span list");
    for (size_t i = 0; i < n_untrusted; i++)
        if (untrusted[i].off > len || untrusted[i].len > len - untrusted[i].off)
            return smol_errf(err, SMOL_EINVAL, "tokenizer: untrusted span %zu [%zu, +%zu) lies outside the %zu-byte text",
                             i, untrusted[i].off, untrusted[i].len, len);
    if (len == 0) return SMOL_OK;
    if (!text) return smol_errf(err, SMOL_EINVAL, "tokenizer: NULL text");
    if (!parse_special || n_untrusted == 0) return encode_impl(t, text, len, parse_special, NULL, 0, out, err);
    /* Normalize: drop empty spans, sort, merge overlapping or touching ones. */
    struct smol_span *v = malloc(n_untrusted * sizeof *v);
    if (!v) return smol_errf(err, SMOL_ENOMEM, "tokenizer: out of memory for %zu spans", n_untrusted);
    size_t n = 0;
    int sorted = 1;
    for (size_t i = 0; i < n_untrusted; i++) {
        if (!untrusted[i].len) continue;
        if (n && untrusted[i].off < v[n - 1].off) sorted = 0;
        v[n++] = untrusted[i];
    }
    if (!sorted) qsort(v, n, sizeof *v, span_cmp);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (w && v[i].off <= v[w - 1].off + v[w - 1].len) {
            size_t end = v[i].off + v[i].len, wend = v[w - 1].off + v[w - 1].len;
            if (end > wend) v[w - 1].len = end - v[w - 1].off;
        } else {
            v[w++] = v[i];
        }
    }
    enum smol_err e = encode_impl(t, text, len, 1, v, w, out, err);
    free(v);
    return e;
}

const char *smol_tokenizer_piece(const struct smol_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->piece_len[id];
    return t->pieces + t->piece_off[id];
}

int32_t smol_tokenizer_find(const struct smol_tokenizer *t, const char *token_text)
{
    if (!token_text) return -1;
    int32_t id = find_special(t, token_text);
    return id >= 0 ? id : vmap_get(t, token_text, strlen(token_text));
}

int smol_tokenizer_is_eog(const struct smol_tokenizer *t, int32_t id)
{
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return 1;
    return 0;
}

int smol_tokenizer_is_special(const struct smol_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && (t->type[id] == TT_CONTROL || t->type[id] == TT_USER_DEFINED);
}

int32_t smol_tokenizer_n_vocab(const struct smol_tokenizer *t) { return t->n_vocab; }

const struct smol_special_ids *smol_tokenizer_special(const struct smol_tokenizer *t) { return &t->sp; }

const char *smol_tokenizer_pre_name(const struct smol_tokenizer *t) { return t->pre_name; }
