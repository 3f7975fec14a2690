/*
 * grammar_share.c - which states of a grammar may share a token class (see
 * grammar_share.h): states with the same edges, and how far a state of a
 * bounded repetition agrees with its twin.
 *
 * A state's class depends only on what the automaton does from it, the stack
 * below unknown, and a token of n bytes only on its first n bytes (and on
 * whether the automaton can end or go on after them).  A bounded repetition
 * x{m,n} is n copies of x; a state and its twin (the same state one copy
 * earlier) agree over r bytes when their futures do: the same final flag,
 * the same byte sets and called rules edge for edge, and the targets agreeing
 * over r - 1 bytes after a byte edge (r after a rule edge: the callee may
 * read nothing).  agree_depth finds the largest such r in one pass, a 0-1
 * breadth-first search over pairs of states by bytes read, which stops at the
 * first pair that differs; the states are taken from the last backwards, so
 * a pair (x, twin x) met on the way, its depth already known, is not
 * expanded again: the states of a long repetition cost a few pairs each.
 * The search is bounded by a pair budget; running out only makes r smaller,
 * never a wrong agreement.
 */
#include "daemon/grammar/grammar_share.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/grammar/grammar_impl.h"

struct pairmap {
    uint64_t *key;          /* (u << 32 | v) + 1, 0 = empty */
    uint32_t *d;            /* bytes read when the pair was first reached */
    uint32_t cap, n;
    uint32_t *dq;           /* deque of pending (u, v, d), a ring of DQ_CAP triples */
    uint32_t head, len;
    uint32_t *used;         /* [PAIR_BUDGET] slots to clear for the next search */
};

#define PAIR_BUDGET 65536
#define DQ_CAP (8 * PAIR_BUDGET)

static int pm_init(struct pairmap *pm)
{
    pm->cap = 2 * PAIR_BUDGET;
    pm->key = calloc(pm->cap, sizeof *pm->key);
    pm->d = malloc(pm->cap * sizeof *pm->d);
    pm->dq = malloc(3 * (size_t)DQ_CAP * sizeof *pm->dq);
    pm->used = malloc((PAIR_BUDGET + 1) * sizeof *pm->used);
    return pm->key && pm->d && pm->dq && pm->used ? 0 : -1;
}

static void pm_deinit(struct pairmap *pm) { free(pm->key); free(pm->d); free(pm->dq); free(pm->used); }

/* 1 if (u, v) is reached for the first time or with fewer bytes read than
 * before (and records it), 0 if already reached as cheaply; -1 over budget. */
static int pm_visit(struct pairmap *pm, uint32_t u, uint32_t v, uint32_t d)
{
    uint64_t k = ((uint64_t)u << 32 | v) + 1;
    uint32_t h = (uint32_t)((k * 0x9e3779b97f4a7c15ull) >> 40) & (pm->cap - 1);
    while (pm->key[h] && pm->key[h] != k) h = (h + 1) & (pm->cap - 1);
    if (pm->key[h]) {
        if (pm->d[h] <= d) return 0;
        pm->d[h] = d;
        return 1;
    }
    if (pm->n >= PAIR_BUDGET) return -1;
    pm->key[h] = k;
    pm->d[h] = d;
    pm->used[pm->n++] = h;
    return 1;
}

/* Pushes (u, v, d) at the front (a rule edge: no byte read) or the back. */
static int dq_push(struct pairmap *pm, uint32_t u, uint32_t v, uint32_t d, int front)
{
    if (pm->len == DQ_CAP) return -1;
    uint32_t i;
    if (front) i = pm->head = (pm->head + DQ_CAP - 1) % DQ_CAP;
    else i = (pm->head + pm->len) % DQ_CAP;
    pm->len++;
    pm->dq[3 * i] = u; pm->dq[3 * i + 1] = v; pm->dq[3 * i + 2] = d;
    return 0;
}

/* The largest r <= hi such that s and t agree over r bytes (see above).
 * known[x] (UINT32_MAX: not yet) is a depth over which x and its twin are
 * known to agree: a pair (x, twin[x]) reached after d bytes agrees up to
 * d + known[x] without being expanded. */
static uint32_t agree_depth(const struct smol_grammar *g, struct pairmap *pm, uint32_t s, uint32_t t, uint32_t hi,
                            const uint32_t *known)
{
    for (uint32_t i = 0; i < pm->n; i++) pm->key[pm->used[i]] = 0;
    pm->n = pm->head = pm->len = 0;
    pm_visit(pm, s, t, 0);
    dq_push(pm, s, t, 0, 0);
    uint32_t best = hi;
    while (pm->len) {
        uint32_t i = pm->head;
        uint32_t a = pm->dq[3 * i], b = pm->dq[3 * i + 1], d = pm->dq[3 * i + 2];
        pm->head = (pm->head + 1) % DQ_CAP;
        pm->len--;
        /* popped in order of d: every pair reached with fewer bytes agreed */
        if (d >= best) return best;
        if (a == b) continue;
        if ((a != s || b != t) && g->twin[a] == b && known[a] != UINT32_MAX) {
            if (d + known[a] < best) best = d + known[a];
            continue;
        }
        const struct gstate *x = &g->states[a], *y = &g->states[b];
        if (x->final != y->final || x->n_byte != y->n_byte || x->n_ref != y->n_ref) return d ? d - 1 : 0;
        for (uint32_t e = 0; e < x->n_byte + x->n_ref; e++)
            if (g->edges[x->e0 + e].arg != g->edges[y->e0 + e].arg) return d ? d - 1 : 0;
        for (uint32_t e = 0; e < x->n_byte + x->n_ref; e++) {
            int byte = e < x->n_byte;
            if (byte && d == hi) continue;
            uint32_t u = g->edges[x->e0 + e].to, v = g->edges[y->e0 + e].to, d2 = d + (uint32_t)byte;
            int fresh = pm_visit(pm, u, v, d2);
            if (fresh < 0 || (fresh && dq_push(pm, u, v, d2, !byte))) return d ? d - 1 : 0;   /* over budget */
        }
    }
    return best;
}

/* ---- states with the same edges ---------------------------------------------------- */

static uint64_t state_hash(const struct smol_grammar *g, uint32_t s)
{
    const struct gstate *x = &g->states[s];
    uint64_t h = 1469598103934665603ull ^ x->final ^ (uint64_t)x->n_byte << 8 ^ (uint64_t)x->n_ref << 32;
    for (uint32_t e = x->e0; e < x->e0 + x->n_byte + x->n_ref; e++)
        h = (h ^ ((uint64_t)g->edges[e].arg << 32 | g->edges[e].to)) * 1099511628211ull;
    return h;
}

static int same_state(const struct smol_grammar *g, uint32_t a, uint32_t b)
{
    const struct gstate *x = &g->states[a], *y = &g->states[b];
    if (x->final != y->final || x->n_byte != y->n_byte || x->n_ref != y->n_ref) return 0;
    for (uint32_t e = 0; e < x->n_byte + x->n_ref; e++)
        if (g->edges[x->e0 + e].arg != g->edges[y->e0 + e].arg || g->edges[x->e0 + e].to != g->edges[y->e0 + e].to)
            return 0;
    return 1;
}

int gs_same_states(const struct smol_grammar *g, uint32_t *rep)
{
    size_t cap = 16;
    int bits = 4;
    while (cap < 2 * (size_t)g->n_states) { cap *= 2; bits++; }
    uint32_t *tab = malloc(cap * sizeof *tab);   /* state + 1, 0 = empty */
    if (!tab) return -1;
    memset(tab, 0, cap * sizeof *tab);
    for (uint32_t s = 0; s < g->n_states; s++) {
        rep[s] = s;
        if (!g->states[s].n_byte) continue;
        size_t h = (size_t)((state_hash(g, s) * 0x9e3779b97f4a7c15ull) >> (64 - bits));
        while (tab[h] && !same_state(g, tab[h] - 1, s)) h = (h + 1) & (cap - 1);
        if (tab[h]) rep[s] = tab[h] - 1;
        else tab[h] = s + 1;
    }
    free(tab);
    return 0;
}

int gs_twin_depths(const struct smol_grammar *g, uint32_t hi, uint32_t *dep, const atomic_int *cancel)
{
    struct pairmap pm = {0};
    int rc = 0;
    if (pm_init(&pm)) { pm_deinit(&pm); return -1; }
    for (uint32_t s = g->n_states; s-- > 0;) {
        dep[s] = UINT32_MAX;
        uint32_t t = g->twin ? g->twin[s] : UINT32_MAX;
        if ((s & 1023) == 0 && cancel && atomic_load_explicit(cancel, memory_order_relaxed)) { rc = 1; break; }
        if (t < s) dep[s] = agree_depth(g, &pm, s, t, hi, dep);
    }
    pm_deinit(&pm);
    return rc;
}
