/*
 * grammar_mask.h - internals shared by matcher.c and
 * grammar_mask.c (vocabulary trie, token index, masks).  Not a public API.
 */
#ifndef SMOL_GRAMMAR_MASK_H
#define SMOL_GRAMMAR_MASK_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/grammar/grammar.h"
#include "daemon/grammar/grammar_impl.h"

struct mstep {
    size_t off, n;       /* its top set in the log */
    uint32_t pool_n;     /* pool size after it */
    uint8_t flags;       /* GF_ACCEPT: may end here; MS_DONE: an end token was taken */
};
#define MS_DONE 0x80

/* Per-depth state of a trie walk: level d's top set is buf[off[d], off[d] + n[d]). */
struct walker {
    struct gbuf buf;
    size_t *off, *n;        /* [max_depth + 2] */
    uint8_t *fl;            /* [max_depth + 2] GF_* flags of level d */
    uint32_t *mark;         /* [max_depth + 2] pool size after level d */
    size_t max_depth;
};

struct smol_grammar_matcher {
    const struct smol_grammar *g;
    const struct smol_grammar_index *ix;    /* NULL: bytes only */
    struct gpool pool;
    struct gbuf log;            /* every step's top set, back to back */
    struct mstep *steps;        /* [n_steps]; steps[0] is the start */
    size_t n_steps, cap_steps;
    struct gbuf a, b;           /* step scratch */
    struct walker w;            /* mask scratch */
    struct gbuf ctx;            /* continuation tops for a mask */
    int32_t *walked;            /* [cap_walked] parents already trie-walked in this mask */
    uint8_t *btext;             /* grammar_budget.c: a shortest completion ... */
    uint32_t *bdp;              /* ... and the fewest tokens spelling each of its suffixes */
    size_t cap_btext;
    size_t cap_walked;
    int oom;
};

int gm_scratch_init(struct smol_grammar_matcher *m);
void gm_scratch_deinit(struct smol_grammar_matcher *m);
const uint32_t *gm_tops(const struct smol_grammar_matcher *m, size_t *n, uint8_t *flags);
const struct smol_grammar_vocab *gm_vocab(const struct smol_grammar_matcher *m);
/* Bytes of a token the grammar may produce; NULL for special/end tokens. */
const char *gv_piece(const struct smol_grammar_vocab *v, int32_t id, size_t *len);
int gv_is_end(const struct smol_grammar_vocab *v, int32_t id);
/* Clears every bit of bitmask but those of the tokens whose bytes are a
 * prefix p of s[0, n) with dp[|p|] + 1 <= limit (grammar_budget.c's forced
 * step: dp as gv_min_tokens writes it). */
void gv_keep_prefixes(const struct smol_grammar_vocab *v, const uint8_t *s, size_t n, const uint32_t *dp,
                      uint32_t limit, uint32_t *bitmask);
/* dp[j] = the fewest tokens that spell s[j, n) exactly (UINT32_MAX: none),
 * for j = 0..n (dp has n + 1 entries). */
void gv_min_tokens(const struct smol_grammar_vocab *v, const uint8_t *s, size_t n, uint32_t *dp);
uint32_t gv_max_len(const struct smol_grammar_vocab *v);

#endif
