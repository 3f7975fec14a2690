/*
 * grammar_mask.c - the vocabulary trie, the per-state token index and the
 * token mask (see grammar.h for the approach).
 *
 * Vocabulary: the byte strings of the ordinary tokens (not special, not
 * end, not empty, no byte 0xFF) and the tool-call tags' pseudo bytes sorted and laid out as a trie in preorder, each node with
 * its depth and the end of its subtree, so a walk is a loop over an array
 * that skips a rejected prefix's whole subtree in one jump.  The tokens of
 * the nodes are one array in the same order (no pointer chasing per node).
 *
 * Index: for each automaton state with byte edges, the trie is walked from
 * the stack (state, UNKNOWN).  A walk level holds the set of tops after a
 * prefix; GF_CTX at level k means some path ended the state's rule after k
 * bytes, where the real stack decides.  A token is
 *   accepted   if its bytes leave a live stack (or end the rule exactly);
 *   leftover   (token, k) for each k < len with GF_CTX at level k >= 1: the
 *              bytes from k on must be read from the rule's continuation;
 *   rejected   otherwise.
 * A state whose rule may end before any byte (ctx0) leaves the whole
 * vocabulary to the continuation: the mask walks the trie from there.
 * Leftovers are sorted by their remaining bytes, with the common prefix
 * length to the previous one, so the run-time walk shares prefixes and
 * drops a dead prefix's followers without stepping.
 *
 * Classes are shared where the futures agree (see "sharing classes" below):
 * the copies of a bounded repetition walk the trie a few times, not once per
 * copy.
 *
 * Mask: OR of the accepted sets of the current tops, then per top the
 * leftover walk (and the ctx0 trie walk, once per distinct parent) from the
 * closure of its parent node.  Nodes made by a mask are freed before it
 * returns.
 */
#include "daemon/grammar/grammar_mask.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/grammar/grammar_share.h"

struct smol_grammar_vocab {
    int32_t n_vocab;
    const char **piece;     /* [n_vocab] bytes of an ordinary token, NULL for special/end/empty */
    uint32_t *len;          /* [n_vocab] */
    uint8_t *is_end;        /* [n_vocab] */
    int32_t *ends;          /* end token ids */
    int n_ends;
    uint32_t n_nodes;       /* trie nodes in preorder; node 0 is the root */
    uint8_t *byte;          /* [n_nodes] byte on the edge into the node */
    uint16_t *depth;        /* [n_nodes] */
    uint32_t *end;          /* [n_nodes] one past the node's subtree */
    uint16_t *submax;       /* [n_nodes] length of the longest token in the node's subtree */
    int32_t *by_len;        /* the ordinary tokens, longest first ... */
    uint32_t *n_ge;         /* [max_len + 2] ... of which n_ge[r] are r bytes or longer */
    uint32_t *tok0;         /* [n_nodes + 1] the tokens ending at node i are toks[tok0[i], tok0[i + 1]) */
    int32_t *toks;          /* the ordinary tokens in trie order (sequential reads in a walk) */
    uint32_t max_len;
    int n_tool_tags;        /* 2 when the vocabulary has <tool_call> and </tool_call> */
};

struct left {
    int32_t tok;
    uint16_t k;             /* the continuation reads piece[k..len) */
    uint16_t lcp;           /* common prefix of the remaining bytes with the previous entry's */
};

struct sclass {
    uint32_t *bits;         /* accepted, as a bitmap ... */
    int32_t *list;          /* ... or as a list when short */
    uint32_t n_list;
    struct left *left;
    uint32_t n_left;
    uint8_t ctx0;           /* the rule may end before any byte */
    uint8_t shared;         /* the arrays belong to an earlier state's class (its twin's) */
};

struct smol_grammar_index {
    const struct smol_grammar *g;
    const struct smol_grammar_vocab *v;
    struct sclass *cls;     /* [g->n_states] */
    size_t bytes;
    uint32_t n_shared;      /* classes taken from a twin */
    uint32_t n_partial;     /* classes walked for the long tokens only (the short ones: the twin's) */
};

/* ---- vocabulary --------------------------------------------------------------------- */

static const struct smol_grammar_vocab *sort_vocab;

static int cmp_tok(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    uint32_t la = sort_vocab->len[a], lb = sort_vocab->len[b];
    int c = memcmp(sort_vocab->piece[a], sort_vocab->piece[b], la < lb ? la : lb);
    if (c) return c;
    if (la != lb) return la < lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

void smol_grammar_vocab_free(struct smol_grammar_vocab **vp)
{
    if (!vp || !*vp) return;
    struct smol_grammar_vocab *v = *vp;
    free(v->piece); free(v->len); free(v->is_end); free(v->ends);
    free(v->byte); free(v->depth); free(v->end); free(v->submax); free(v->tok0); free(v->toks);
    free(v->by_len); free(v->n_ge);
    free(v);
    *vp = NULL;
}

enum smol_err smol_grammar_vocab_build(struct smol_grammar_vocab **out, int32_t n_vocab,
                                       const struct smol_grammar_token *tokens, char *err)
{
    *out = NULL;
    struct smol_grammar_vocab *v = calloc(1, sizeof *v);
    int32_t n = n_vocab, *order = NULL, *path = NULL;
    if (!v) goto oom;
    v->n_vocab = n;
    v->piece = calloc(n, sizeof *v->piece);
    v->len = calloc(n, sizeof *v->len);
    v->is_end = calloc(n, 1);
    v->ends = calloc(n, sizeof *v->ends);
    order = malloc(n * sizeof *order);
    if (!v->piece || !v->len || !v->is_end || !v->ends || !order) goto oom;
    size_t total = 1, m = 0;
    for (int32_t i = 0; i < n; i++) {
        const struct smol_grammar_token *t = &tokens[i];
        if (t->kind == SMOL_GT_END) {
            v->is_end[i] = 1;
            v->ends[v->n_ends++] = i;
            continue;
        }
        size_t len = t->len;
        const char *p = t->piece;
        if (t->kind == SMOL_GT_TOOL_CALL || t->kind == SMOL_GT_TOOL_CALL_END) {  /* the grammar's pseudo bytes */
            p = t->kind == SMOL_GT_TOOL_CALL ? SMOL_GRAMMAR_TOOL_CALL : SMOL_GRAMMAR_TOOL_CALL_END;
            len = 2;
            v->n_tool_tags++;
        }
        else if (t->kind != SMOL_GT_TEXT || !p || !len || len > 65535 || memchr(p, 0xff, len)) continue;
        v->piece[i] = p;
        v->len[i] = (uint32_t)len;
        if (len > v->max_len) v->max_len = (uint32_t)len;
        total += len;
        order[m++] = i;
    }
    sort_vocab = v;   /* qsort has no context argument; building is not reentrant-critical */
    qsort(order, m, sizeof *order, cmp_tok);
    v->byte = malloc(total);
    v->depth = malloc(total * sizeof *v->depth);
    v->end = malloc(total * sizeof *v->end);
    v->tok0 = calloc(total + 1, sizeof *v->tok0);
    path = malloc((v->max_len + 1) * sizeof *path);
    if (!v->byte || !v->depth || !v->end || !v->tok0 || !path) goto oom;
    uint32_t nn = 1, plen = 0;   /* path[d] = node at depth d on the current path */
    v->byte[0] = 0; v->depth[0] = 0;
    path[0] = 0;
    int32_t prev = -1;
    for (size_t i = 0; i < m; i++) {
        int32_t t = order[i];
        const uint8_t *p = (const uint8_t *)v->piece[t];
        uint32_t len = v->len[t], l = 0;
        if (prev >= 0) {
            const uint8_t *q = (const uint8_t *)v->piece[prev];
            uint32_t lq = v->len[prev];
            while (l < len && l < lq && p[l] == q[l]) l++;
        }
        for (uint32_t d = plen; d > l; d--) v->end[path[d]] = nn;   /* close the nodes left behind */
        for (uint32_t d = l + 1; d <= len; d++) {
            v->byte[nn] = p[d - 1];
            v->depth[nn] = (uint16_t)d;
            path[d] = nn++;
        }
        plen = len;
        v->tok0[path[len] + 1]++;   /* sorted: a node's tokens come together, nodes in preorder */
        prev = t;
    }
    for (uint32_t d = plen; d > 0; d--) v->end[path[d]] = nn;
    v->end[0] = nn;
    v->n_nodes = nn;
    for (uint32_t i = 0; i < nn; i++) v->tok0[i + 1] += v->tok0[i];
    /* submax: in reverse preorder a node's children come before it, and acc[d + 1]
     * holds the children (depth d + 1) whose parent is yet to come: node i's */
    v->submax = malloc(nn * sizeof *v->submax);
    if (!v->submax) goto oom;
    memset(path, 0, (v->max_len + 1) * sizeof *path);   /* reused as acc[] */
    for (uint32_t i = nn; i-- > 0;) {
        uint32_t d = v->depth[i], sm = d;
        if (d + 1 <= v->max_len) {
            if ((uint32_t)path[d + 1] > sm) sm = (uint32_t)path[d + 1];
            path[d + 1] = 0;
        }
        v->submax[i] = (uint16_t)sm;
        if ((uint32_t)path[d] < sm) path[d] = (int32_t)sm;
    }
    /* by_len: a counting sort of the tokens by length, longest first */
    v->by_len = malloc((m + 1) * sizeof *v->by_len);
    v->n_ge = calloc(v->max_len + 2, sizeof *v->n_ge);
    if (!v->by_len || !v->n_ge) goto oom;
    for (size_t i = 0; i < m; i++) v->n_ge[v->len[order[i]]]++;
    for (uint32_t r = v->max_len; r-- > 0;) v->n_ge[r] += v->n_ge[r + 1];
    for (uint32_t l = 0; l <= v->max_len; l++) path[l] = (int32_t)v->n_ge[l + 1];   /* fill points */
    for (size_t i = 0; i < m; i++)   /* tokens of length l go to [n_ge[l + 1], n_ge[l]) */
        v->by_len[path[v->len[order[i]]]++] = order[i];
    v->toks = order;
    order = NULL;
    free(path);
    *out = v;
    return SMOL_OK;
oom:
    free(order);
    free(path);
    smol_grammar_vocab_free(&v);
    return smol_errf(err, SMOL_ENOMEM, "grammar vocabulary: out of memory");
}

int32_t smol_grammar_vocab_size(const struct smol_grammar_vocab *v) { return v->n_vocab; }
int smol_grammar_vocab_has_tool_tags(const struct smol_grammar_vocab *v) { return v->n_tool_tags == 2; }

const char *gv_piece(const struct smol_grammar_vocab *v, int32_t id, size_t *len)
{
    *len = v->len[id];
    return v->piece[id];
}

int gv_is_end(const struct smol_grammar_vocab *v, int32_t id) { return v->is_end[id]; }

/* ---- walker ------------------------------------------------------------------------- */

static int walker_init(struct walker *w, size_t max_depth)
{
    memset(w, 0, sizeof *w);
    w->max_depth = max_depth;
    size_t n = max_depth + 2;
    w->off = malloc(n * sizeof *w->off);
    w->n = malloc(n * sizeof *w->n);
    w->fl = malloc(n);
    w->mark = malloc(n * sizeof *w->mark);
    return (!w->off || !w->n || !w->fl || !w->mark || gbuf_reserve(&w->buf, 4 * GP_MAX_TOPS)) ? -1 : 0;
}

static void walker_deinit(struct walker *w)
{
    free(w->buf.v); free(w->off); free(w->n); free(w->fl); free(w->mark);
    memset(w, 0, sizeof *w);
}

/* Level 0 := the given tops and flags. */
static void walker_start(struct walker *w, struct gpool *p, const uint32_t *tops, size_t n, uint8_t fl)
{
    w->buf.n = 0;
    gbuf_reserve(&w->buf, n);   /* init reserved 4 * GP_MAX_TOPS; tops are fewer */
    if (n) memcpy(w->buf.v, tops, n * sizeof *tops);
    w->buf.n = n;
    w->off[0] = 0;
    w->n[0] = n;
    w->fl[0] = fl;
    w->mark[0] = p->n;
}

/* Level d := level d-1 after byte; returns GF_OOM/GF_LIMIT flags on failure. */
static uint8_t walker_step(struct walker *w, const struct smol_grammar *g, struct gpool *p, size_t d, unsigned byte)
{
    gp_truncate(p, w->mark[d - 1]);
    w->buf.n = w->off[d - 1] + w->n[d - 1];
    if (gbuf_reserve(&w->buf, GP_MAX_TOPS)) { w->n[d] = 0; w->fl[d] = GF_OOM; return GF_OOM; }
    w->off[d] = w->buf.n;
    uint8_t fl = 0;
    gp_step(g, p, w->buf.v + w->off[d - 1], w->n[d - 1], byte, &w->buf, &fl);
    w->n[d] = w->buf.n - w->off[d];
    w->fl[d] = fl;
    w->mark[d] = p->n;
    return fl & (GF_OOM | GF_LIMIT);
}

/* ---- index -------------------------------------------------------------------------- */

struct lbuf {
    struct left *v;
    size_t n, cap;
};

static int lpush(struct lbuf *b, int32_t tok, size_t k)
{
    if (b->n == b->cap) {
        size_t c = b->cap ? b->cap * 2 : 256;
        struct left *x = realloc(b->v, c * sizeof *x);
        if (!x) return -1;
        b->v = x;
        b->cap = c;
    }
    b->v[b->n++] = (struct left){tok, (uint16_t)k, 0};
    return 0;
}

static int cmp_left(const void *x, const void *y)
{
    const struct left *a = x, *b = y;
    const struct smol_grammar_vocab *v = sort_vocab;
    uint32_t la = v->len[a->tok] - a->k, lb = v->len[b->tok] - b->k;
    int c = memcmp(v->piece[a->tok] + a->k, v->piece[b->tok] + b->k, la < lb ? la : lb);
    if (c) return c;
    return la < lb ? -1 : la > lb;
}

void smol_grammar_index_free(struct smol_grammar_index **ixp)
{
    if (!ixp || !*ixp) return;
    struct smol_grammar_index *ix = *ixp;
    if (ix->cls)
        for (uint32_t s = 0; s < ix->g->n_states; s++) {
            if (!ix->cls[s].shared) { free(ix->cls[s].bits); free(ix->cls[s].list); free(ix->cls[s].left); }
        }
    free(ix->cls);
    free(ix);
    *ixp = NULL;
}

size_t smol_grammar_index_bytes(const struct smol_grammar_index *ix) { return ix->bytes; }
uint32_t smol_grammar_index_shared(const struct smol_grammar_index *ix) { return ix->n_shared; }
uint32_t smol_grammar_index_partial(const struct smol_grammar_index *ix) { return ix->n_partial; }

/* Leftovers for token t at every k in [1, upto] where level k hit the rule's end. */
static int add_lefts(struct lbuf *lb, const struct walker *w, const uint32_t *nctx, int32_t t, size_t upto)
{
    if (!nctx[upto]) return 0;
    for (size_t k = 1; k <= upto; k++)
        if ((w->fl[k] & GF_CTX) && lpush(lb, t, k)) return -1;
    return 0;
}

/* The class of state s: the trie walked from (s, UNKNOWN).  With a twin
 * class tw (rmin > 0), the tokens shorter than rmin bytes take their verdict
 * from tw (the caller showed the two states' futures agree over rmin bytes),
 * and the walk visits only the subtrees that hold a token of rmin bytes or
 * more; *maxd is the deepest level the walk (or tw's, for the short tokens)
 * read. */
static enum smol_err index_state(struct smol_grammar_index *ix, uint32_t s, const struct sclass *tw, uint32_t rmin,
                                 struct gpool *p, struct walker *w, struct gbuf *acc, struct lbuf *lb,
                                 uint32_t *nctx, uint32_t *maxd, char *err)
{
    const struct smol_grammar *g = ix->g;
    const struct smol_grammar_vocab *v = ix->v;
    struct sclass *c = &ix->cls[s];
    gp_truncate(p, 0);
    acc->n = 0;
    lb->n = 0;
    struct gbuf t0 = {0};
    uint8_t fl = 0;
    gp_closure(g, p, gp_node(p, (int32_t)s, GP_UNK), &t0, &fl);
    if (fl & (GF_OOM | GF_LIMIT)) { free(t0.v); goto fail; }
    walker_start(w, p, t0.v, t0.n, fl);
    free(t0.v);
    c->ctx0 = (fl & GF_CTX) != 0;
    nctx[0] = 0;
    if (!tw) rmin = 0;
    for (uint32_t i = 1; i < v->n_nodes;) {
        if (v->submax[i] < rmin) { i = v->end[i]; continue; }
        size_t d = v->depth[i];
        if (d > *maxd) *maxd = (uint32_t)d;
        if (walker_step(w, g, p, d, v->byte[i])) goto fail;
        int live = w->n[d] > 0;
        nctx[d] = nctx[d - 1] + ((w->fl[d] & GF_CTX) != 0);
        if (d >= rmin)
            for (uint32_t ti = v->tok0[i]; ti < v->tok0[i + 1]; ti++) {
                int32_t t = v->toks[ti];
                if (live || (w->fl[d] & GF_CTX)) {
                    if (gbuf_reserve(acc, 1)) goto oom;
                    acc->v[acc->n++] = (uint32_t)t;
                } else if (add_lefts(lb, w, nctx, t, d - 1)) {
                    goto oom;
                }
            }
        if (live) { i++; continue; }
        if (nctx[d])   /* every longer token under this prefix is leftover */
            for (uint32_t ti = v->tok0[i + 1]; ti < v->tok0[v->end[i]]; ti++)
                if (v->len[v->toks[ti]] >= rmin && add_lefts(lb, w, nctx, v->toks[ti], d)) goto oom;
        i = v->end[i];
    }
    /* accepted: with a twin, its verdicts on the short tokens, then the walk's */
    uint32_t words = ((uint32_t)v->n_vocab + 31) / 32;
    if (rmin && tw->bits) {
        c->bits = malloc(words * sizeof *c->bits);
        if (!c->bits) goto oom;
        memcpy(c->bits, tw->bits, words * sizeof *c->bits);
        for (uint32_t k = 0; k < v->n_ge[rmin]; k++) c->bits[v->by_len[k] >> 5] &= ~(1u << (v->by_len[k] & 31));
        for (size_t i = 0; i < acc->n; i++) c->bits[acc->v[i] >> 5] |= 1u << (acc->v[i] & 31);
        ix->bytes += words * sizeof *c->bits;
    } else {
        for (uint32_t k = 0; rmin && k < tw->n_list; k++)
            if (v->len[tw->list[k]] < rmin) {
                if (gbuf_reserve(acc, 1)) goto oom;
                acc->v[acc->n++] = (uint32_t)tw->list[k];
            }
        if (acc->n > words / 2) {
            c->bits = calloc(words, sizeof *c->bits);
            if (!c->bits) goto oom;
            for (size_t i = 0; i < acc->n; i++) c->bits[acc->v[i] >> 5] |= 1u << (acc->v[i] & 31);
            ix->bytes += words * sizeof *c->bits;
        } else if (acc->n) {
            c->list = malloc(acc->n * sizeof *c->list);
            if (!c->list) goto oom;
            memcpy(c->list, acc->v, acc->n * sizeof *c->list);
            c->n_list = (uint32_t)acc->n;
            ix->bytes += acc->n * sizeof *c->list;
        }
    }
    /* leftovers: the twin's short ones (already sorted) merged with the walk's */
    size_t n_tw = 0;
    for (uint32_t k = 0; rmin && k < tw->n_left; k++) n_tw += v->len[tw->left[k].tok] < rmin;
    if (lb->n + n_tw) {
        qsort(lb->v, lb->n, sizeof *lb->v, cmp_left);
        c->left = malloc((lb->n + n_tw) * sizeof *c->left);
        if (!c->left) goto oom;
        size_t n = 0, j = 0;
        for (uint32_t k = 0; rmin && k < tw->n_left; k++) {
            if (v->len[tw->left[k].tok] >= rmin) continue;
            while (j < lb->n && cmp_left(&lb->v[j], &tw->left[k]) < 0) c->left[n++] = lb->v[j++];
            c->left[n++] = tw->left[k];
        }
        while (j < lb->n) c->left[n++] = lb->v[j++];
        c->left[0].lcp = 0;
        for (size_t i = 1; i < n; i++) {
            const struct left *a = &c->left[i - 1], *b = &c->left[i];
            uint32_t la = v->len[a->tok] - a->k, lbn = v->len[b->tok] - b->k, l = 0;
            while (l < la && l < lbn && v->piece[a->tok][a->k + l] == v->piece[b->tok][b->k + l]) l++;
            c->left[i].lcp = (uint16_t)(l > 65535 ? 65535 : l);
        }
        c->n_left = (uint32_t)n;
        ix->bytes += n * sizeof *c->left;
    }
    return SMOL_OK;
oom:
    return smol_errf(err, SMOL_ENOMEM, "grammar index: out of memory");
fail:
    return smol_errf(err, SMOL_ETOOLARGE, "grammar index: state %u of rule '%s' has over %d live stacks",
                     s, g->rule_names[g->states[s].rule], GP_MAX_TOPS);
}

/* ---- sharing classes (grammar_share.c says which states may) -------------------------
 * A state with the same edges as an earlier one takes its class.  A state
 * that agrees with its twin over r bytes:
 *   r > the twin's walk depth: takes the twin's class (the copies far from
 *     the repetition's ends);
 *   r >= 2: tokens shorter than r take the twin's verdicts and only the
 *     trie's subtrees holding longer tokens are walked (the copies within one
 *     token length of the end: a string's maxLength below 128 bytes).
 */
static enum smol_err index_build(struct smol_grammar_index **out, const struct smol_grammar *g,
                                 const struct smol_grammar_vocab *v, size_t max_bytes, const atomic_int *cancel,
                                 int share, char *err);

enum smol_err smol_grammar_index_new(struct smol_grammar_index **out, const struct smol_grammar *g,
                                     const struct smol_grammar_vocab *v, size_t max_bytes, char *err)
{
    return index_build(out, g, v, max_bytes, NULL, 1, err);
}

enum smol_err smol_grammar_index_build(struct smol_grammar_index **out, const struct smol_grammar *g,
                                       const struct smol_grammar_vocab *v, size_t max_bytes,
                                       const atomic_int *cancel, char *err)
{
    return index_build(out, g, v, max_bytes, cancel, 1, err);
}

enum smol_err smol_grammar_index_new_unshared(struct smol_grammar_index **out, const struct smol_grammar *g,
                                              const struct smol_grammar_vocab *v, char *err)
{
    return index_build(out, g, v, 0, NULL, 0, err);
}

static enum smol_err index_build(struct smol_grammar_index **out, const struct smol_grammar *g,
                                 const struct smol_grammar_vocab *v, size_t max_bytes, const atomic_int *cancel,
                                 int share, char *err)
{
    *out = NULL;
    if (!max_bytes) max_bytes = (size_t)512 << 20;
    struct smol_grammar_index *ix = calloc(1, sizeof *ix);
    struct gpool p = {0};
    struct walker w = {0};
    struct gbuf acc = {0};
    struct lbuf lb = {0};
    uint32_t *nctx = malloc((v->max_len + 2) * sizeof *nctx);
    uint32_t *maxd = malloc((g->n_states + 1) * sizeof *maxd);  /* bytes each state's walk read */
    uint32_t *rep = malloc((g->n_states + 1) * sizeof *rep);    /* see gs_same_states */
    uint32_t *dep = malloc((g->n_states + 1) * sizeof *dep);    /* see gs_twin_depths */
    enum smol_err rc = SMOL_OK;
    int sh = 0;
    if (!ix || !nctx || !maxd || !rep || !dep || walker_init(&w, v->max_len) || gs_same_states(g, rep) ||
        (share && (sh = gs_twin_depths(g, v->max_len + 1, dep, cancel)) < 0)) {
        rc = smol_errf(err, SMOL_ENOMEM, "grammar index: out of memory");
        goto out;
    }
    if (sh) {
        rc = smol_errf(err, SMOL_ECANCELLED, "grammar index: cancelled");
        goto out;
    }
    ix->g = g;
    ix->v = v;
    ix->cls = calloc(g->n_states ? g->n_states : 1, sizeof *ix->cls);
    if (!ix->cls) { rc = smol_errf(err, SMOL_ENOMEM, "grammar index: out of memory"); goto out; }
    sort_vocab = v;
    for (uint32_t s = 0; s < g->n_states && !rc; s++) {
        if (!g->states[s].n_byte) continue;
        if (cancel && atomic_load_explicit(cancel, memory_order_relaxed)) {
            rc = smol_errf(err, SMOL_ECANCELLED, "grammar index: cancelled");
            break;
        }
        uint32_t t = g->twin && share ? g->twin[s] : UINT32_MAX, rmin = 0;
        if (share && rep[s] != s) {  /* the same edges: the same class */
            ix->cls[s] = ix->cls[rep[s]];
            ix->cls[s].shared = 1;
            maxd[s] = maxd[rep[s]];
            ix->n_shared++;
            continue;
        }
        if (t < s && g->states[t].n_byte) {
            if (dep[s] > maxd[t]) {
                ix->cls[s] = ix->cls[t];
                ix->cls[s].shared = 1;
                maxd[s] = maxd[t];
                ix->n_shared++;
                continue;
            }
            if (dep[s] >= 2) rmin = dep[s];     /* no token is shorter than 1 byte */
        }
        maxd[s] = rmin ? maxd[t] : 0;
        if (rmin) ix->n_partial++;
        rc = index_state(ix, s, rmin ? &ix->cls[t] : NULL, rmin, &p, &w, &acc, &lb, nctx, &maxd[s], err);
        if (!rc && ix->bytes > max_bytes)
            rc = smol_errf(err, SMOL_ETOOLARGE, "grammar index over %zu MiB (%u automaton states)", max_bytes >> 20, g->n_states);
    }
out:
    gp_deinit(&p);
    walker_deinit(&w);
    free(acc.v);
    free(lb.v);
    free(nctx);
    free(maxd);
    free(rep);
    free(dep);
    if (rc) smol_grammar_index_free(&ix);
    *out = ix;
    return rc;
}

/* ---- masks -------------------------------------------------------------------------- */

const struct smol_grammar_vocab *gm_vocab(const struct smol_grammar_matcher *m) { return m->ix->v; }

int gm_scratch_init(struct smol_grammar_matcher *m)
{
    m->cap_walked = 64;
    m->walked = malloc(m->cap_walked * sizeof *m->walked);
    return (!m->walked || walker_init(&m->w, m->ix->v->max_len) || gbuf_reserve(&m->ctx, 2 * GP_MAX_TOPS)) ? -1 : 0;
}

void gm_scratch_deinit(struct smol_grammar_matcher *m)
{
    walker_deinit(&m->w);
    free(m->ctx.v);
    free(m->walked);
    free(m->btext);
    free(m->bdp);
}

static inline void setbit(uint32_t *mask, int32_t t) { mask[t >> 5] |= 1u << (t & 31); }

/* Every token readable from level 0 of the walker (the continuation). */
static void walk_trie(struct smol_grammar_matcher *m, uint32_t *mask)
{
    const struct smol_grammar_vocab *v = m->ix->v;
    struct walker *w = &m->w;
    for (uint32_t i = 1; i < v->n_nodes;) {
        size_t d = v->depth[i];
        walker_step(w, m->g, &m->pool, d, v->byte[i]);
        int live = w->n[d] > 0;
        if (live || (w->fl[d] & GF_ACCEPT))
            for (uint32_t ti = v->tok0[i]; ti < v->tok0[i + 1]; ti++) setbit(mask, v->toks[ti]);
        i = live ? i + 1 : v->end[i];
    }
}

/* The leftovers of class c, read from level 0 of the walker. */
static void walk_lefts(struct smol_grammar_matcher *m, const struct sclass *c, uint32_t *mask)
{
    const struct smol_grammar_vocab *v = m->ix->v;
    struct walker *w = &m->w;
    size_t valid = 0, dead = SIZE_MAX;
    for (uint32_t j = 0; j < c->n_left; j++) {
        const struct left *e = &c->left[j];
        const uint8_t *s = (const uint8_t *)v->piece[e->tok] + e->k;
        size_t len = v->len[e->tok] - e->k, l = j ? e->lcp : 0;
        if (dead <= l) continue;   /* shares a dead prefix */
        dead = SIZE_MAX;
        if (valid > l) valid = l;
        for (size_t d = valid + 1; d <= len; d++) {
            walker_step(w, m->g, &m->pool, d, s[d - 1]);
            valid = d;
            if (!w->n[d] && (d < len || !(w->fl[d] & GF_ACCEPT))) { dead = d; break; }
        }
        if (dead == SIZE_MAX && (w->n[len] || (w->fl[len] & GF_ACCEPT))) setbit(mask, e->tok);
    }
}

void smol_grammar_matcher_fill_mask(struct smol_grammar_matcher *m, uint32_t *mask)
{
    const struct smol_grammar_vocab *v = m->ix->v;
    const struct smol_grammar *g = m->g;
    uint32_t words = ((uint32_t)v->n_vocab + 31) / 32;
    memset(mask, 0, words * sizeof *mask);
    size_t nt;
    uint8_t fl;
    const uint32_t *tops = gm_tops(m, &nt, &fl);
    if (m->oom) return;
    if (fl & MS_DONE) {
        for (int i = 0; i < v->n_ends; i++) setbit(mask, v->ends[i]);
        return;
    }
    uint32_t mark = m->pool.n;
    size_t n_walked = 0;
    for (size_t i = 0; i < nt; i++) {
        int32_t node = (int32_t)tops[i];
        const struct sclass *c = &m->ix->cls[m->pool.state[node]];
        if (c->bits)
            for (uint32_t k = 0; k < words; k++) mask[k] |= c->bits[k];
        for (uint32_t k = 0; k < c->n_list; k++) setbit(mask, c->list[k]);
        int32_t parent = m->pool.parent[node];
        if ((!c->ctx0 && !c->n_left) || parent < 0) continue;
        m->ctx.n = 0;
        uint8_t cfl = 0;
        gp_truncate(&m->pool, mark);
        gp_closure(g, &m->pool, parent, &m->ctx, &cfl);
        walker_start(&m->w, &m->pool, m->ctx.v, m->ctx.n, cfl);
        if (c->n_left) walk_lefts(m, c, mask);
        if (c->ctx0) {
            size_t k = 0;
            while (k < n_walked && m->walked[k] != parent) k++;
            if (k == n_walked) {
                if (n_walked < m->cap_walked) m->walked[n_walked++] = parent;
                walk_trie(m, mask);
            }
        }
    }
    gp_truncate(&m->pool, mark);
    if (fl & GF_ACCEPT)
        for (int i = 0; i < v->n_ends; i++) setbit(mask, v->ends[i]);
}

void smol_grammar_mask_logits(const uint32_t *bitmask, int32_t n_mask, float *logits, int32_t n_logits)
{
    const int32_t n = n_mask < n_logits ? n_mask : n_logits, full = n / 32;
    /* whole words without branches per bit (the compiler vectorizes both loops) */
    for (int32_t w = 0; w < full; w++) {
        uint32_t m = bitmask[w];
        float *l = logits + (size_t)w * 32;
        if (m == UINT32_MAX) continue;
        if (m == 0) {
            for (int b = 0; b < 32; b++) l[b] = -INFINITY;
            continue;
        }
        for (int b = 0; b < 32; b++) l[b] = (m >> b) & 1u ? l[b] : -INFINITY;
    }
    for (int32_t i = full * 32; i < n; i++)
        if (!((bitmask[i >> 5] >> (i & 31)) & 1u)) logits[i] = -INFINITY;
    for (int32_t i = n; i < n_logits; i++) logits[i] = -INFINITY;
}

void gv_keep_prefixes(const struct smol_grammar_vocab *v, const uint8_t *s, size_t n, const uint32_t *dp,
                      uint32_t limit, uint32_t *bitmask)
{
    const size_t words = ((size_t)v->n_vocab + 31) / 32;
    int32_t keep[512];
    size_t nk = 0;
    uint32_t node = 0;
    for (size_t d = 0; d < n; d++) {   /* down the path of s: the child of node with byte s[d] */
        uint32_t c = node + 1;
        while (c < v->end[node] && v->byte[c] != s[d]) c = v->end[c];
        if (c >= v->end[node]) break;
        node = c;
        if (dp[d + 1] == UINT32_MAX || dp[d + 1] + 1 > limit) continue;
        for (uint32_t i = v->tok0[node]; i < v->tok0[node + 1] && nk < sizeof keep / sizeof *keep; i++)
            keep[nk++] = v->toks[i];
    }
    for (size_t i = 0; i < nk; i++)   /* which were allowed, before clearing */
        keep[i] = (bitmask[keep[i] >> 5] >> (keep[i] & 31)) & 1 ? keep[i] : -1;
    memset(bitmask, 0, words * sizeof *bitmask);
    for (size_t i = 0; i < nk; i++)
        if (keep[i] >= 0) bitmask[keep[i] >> 5] |= 1u << (keep[i] & 31);
}

uint32_t gv_max_len(const struct smol_grammar_vocab *v) { return v->max_len; }

void gv_min_tokens(const struct smol_grammar_vocab *v, const uint8_t *s, size_t n, uint32_t *dp)
{
    dp[n] = 0;
    for (size_t j = n; j-- > 0;) {
        uint32_t best = UINT32_MAX, node = 0;
        for (size_t d = j; d < n; d++) {   /* down the trie along s[j..] */
            uint32_t c = node + 1;
            while (c < v->end[node] && v->byte[c] != s[d]) c = v->end[c];
            if (c >= v->end[node]) break;
            node = c;
            if (v->tok0[node] < v->tok0[node + 1] && dp[d + 1] != UINT32_MAX && dp[d + 1] + 1 < best)
                best = dp[d + 1] + 1;
        }
        dp[j] = best;
    }
}
