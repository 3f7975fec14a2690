/*
 * grammar_budget.c - structured output within a length limit: the shortest
 * completion of a grammar from any matcher state, so that an output cut by
 * max_tokens (or the context) is still a sentence of the grammar.
 *
 * At compile, dist[s] is the length in bytes of the shortest way from state
 * s to the end of its rule (0 for a final state); a rule edge costs the
 * callee's shortest sentence, dist[rule_start].  These are the least fixed
 * point of
 *
 *     dist[s] = min(final ? 0 : inf,  1 + dist[to] for each byte edge,
 *                   dist[start(arg)] + dist[to] for each rule edge)
 *
 * computed with Knuth's generalisation of Dijkstra's algorithm (each edge's
 * cost is a sum of non-negative terms, so a state popped from the heap is
 * final): an edge is relaxed once the states its cost reads are settled.
 *
 * At run time the shortest completion of a stack is dist of its top state
 * plus dist of every return state below it; of a set of stacks, the least.
 * The sampler keeps the output within its token budget B (this token
 * included) by taking a sampled token only when the grammar can be completed
 * in B - 1 more tokens (smol_grammar_matcher_fits): at once when the
 * shortest completion has at most B - 1 bytes (a byte-level vocabulary has
 * a token for every byte), else that completion is spelled out and counted
 * in the fewest tokens that write it (a DP over the vocabulary trie).
 * Otherwise it samples again among the tokens that begin that completion and
 * leave a rest that fits (smol_grammar_matcher_mask_shortest).  So once the
 * budget covers the grammar's shortest sentence, the output ends complete.
 */
#include "daemon/grammar/grammar.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/grammar/grammar_impl.h"
#include "daemon/grammar/grammar_mask.h"

#define INF UINT32_MAX

/* ---- compile: dist ------------------------------------------------------------------ */

struct heap {
    uint64_t *v;    /* (dist << 32) | state */
    size_t n;
};

static void heap_push(struct heap *h, uint64_t x)
{
    size_t i = h->n++;
    while (i && h->v[(i - 1) / 2] > x) { h->v[i] = h->v[(i - 1) / 2]; i = (i - 1) / 2; }
    h->v[i] = x;
}

static uint64_t heap_pop(struct heap *h)
{
    uint64_t top = h->v[0], x = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->v[c + 1] < h->v[c]) c++;
        if (h->v[c] >= x) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = x;
    return top;
}

static uint32_t sat_add(uint32_t a, uint32_t b) { return a >= INF - b ? INF - 1 : a + b; }

/* Bytes of the shortest way to the end of the rule through edge e of state st. */
static uint32_t edge_cost(const struct smol_grammar *g, const struct gstate *st, uint32_t e)
{
    return e < st->e0 + st->n_byte ? sat_add(1, g->dist[g->edges[e].to])
                                   : sat_add(g->dist[g->rule_start[g->edges[e].arg]], g->dist[g->edges[e].to]);
}

int gr_shortest_init(struct smol_grammar *g)
{
    const uint32_t ns = g->n_states, ne = g->n_edges, nr = g->n_rules;
    uint32_t *from = malloc((ne + 1) * sizeof *from);         /* edge -> its source state */
    uint32_t *by_to0 = calloc(ns + 1, sizeof *by_to0), *by_to = malloc((ne + 1) * sizeof *by_to);
    uint32_t *by_arg0 = calloc(nr + 1, sizeof *by_arg0), *by_arg = malloc((ne + 1) * sizeof *by_arg);
    uint8_t *wait = malloc(ne + 1), *done = calloc(ns, 1);
    struct heap h = {malloc((ns + ne + 1) * sizeof *h.v), 0};
    g->dist = malloc((ns + 1) * sizeof *g->dist);
    int rc = -1;
    if (!from || !by_to0 || !by_to || !by_arg0 || !by_arg || !wait || !done || !h.v || !g->dist) goto out;
    /* reverse adjacency: the edges into each state, the rule edges calling each rule */
    for (uint32_t s = 0; s < ns; s++) {
        const struct gstate *st = &g->states[s];
        for (uint32_t e = st->e0; e < st->e0 + st->n_byte + st->n_ref; e++) {
            from[e] = s;
            by_to0[g->edges[e].to + 1]++;
            if (e >= st->e0 + st->n_byte) by_arg0[g->edges[e].arg + 1]++;
            wait[e] = e >= st->e0 + st->n_byte ? 2 : 1;   /* settled inputs it still waits for */
        }
    }
    for (uint32_t s = 0; s < ns; s++) by_to0[s + 1] += by_to0[s];
    for (uint32_t r = 0; r < nr; r++) by_arg0[r + 1] += by_arg0[r];
    for (uint32_t s = 0; s < ns; s++) {
        const struct gstate *st = &g->states[s];
        for (uint32_t e = st->e0; e < st->e0 + st->n_byte + st->n_ref; e++) {
            by_to[by_to0[g->edges[e].to]++] = e;
            if (e >= st->e0 + st->n_byte) by_arg[by_arg0[g->edges[e].arg]++] = e;
        }
    }
    for (uint32_t s = ns; s > 0; s--) by_to0[s] = by_to0[s - 1];   /* back to starts */
    by_to0[0] = 0;
    for (uint32_t r = nr; r > 0; r--) by_arg0[r] = by_arg0[r - 1];
    by_arg0[0] = 0;
    /* the rule each state starts, if any */
    uint32_t *start_of = malloc((ns + 1) * sizeof *start_of);
    if (!start_of) goto out;
    for (uint32_t s = 0; s < ns; s++) start_of[s] = INF;
    for (uint32_t r = 0; r < nr; r++) start_of[g->rule_start[r]] = r;
    for (uint32_t s = 0; s < ns; s++) {
        g->dist[s] = INF;
        if (g->states[s].final) { g->dist[s] = 0; heap_push(&h, s); }
    }
    while (h.n) {
        uint64_t x = heap_pop(&h);
        uint32_t s = (uint32_t)x, d = (uint32_t)(x >> 32);
        if (done[s] || d != g->dist[s]) continue;
        done[s] = 1;
        /* s settled: edges into it, and rule edges calling the rule it starts */
        for (int pass = 0; pass < 2; pass++) {
            const uint32_t *lst = pass ? by_arg : by_to;
            uint32_t lo = pass ? (start_of[s] == INF ? 0 : by_arg0[start_of[s]]) : by_to0[s];
            uint32_t hi = pass ? (start_of[s] == INF ? 0 : by_arg0[start_of[s] + 1]) : by_to0[s + 1];
            for (uint32_t i = lo; i < hi; i++) {
                uint32_t e = lst[i], u = from[e];
                if (--wait[e] || done[u]) continue;
                uint32_t c = edge_cost(g, &g->states[u], e);
                if (c < g->dist[u]) {
                    g->dist[u] = c;
                    heap_push(&h, ((uint64_t)c << 32) | u);
                }
            }
        }
    }
    free(start_of);
    rc = 0;
out:
    free(from); free(by_to0); free(by_to); free(by_arg0); free(by_arg); free(wait); free(done); free(h.v);
    return rc;
}

/* ---- run time ----------------------------------------------------------------------- */

/* Bytes from stack node to the end of the grammar (INF: none). */
static uint64_t node_cost(const struct smol_grammar *g, const struct gpool *p, int32_t node)
{
    uint64_t c = 0;
    for (; node >= 0; node = p->parent[node]) {
        uint32_t d = g->dist[p->state[node]];
        if (d >= INF - 1) return UINT64_MAX;
        c += d;
    }
    return node == GP_ROOT ? c : UINT64_MAX;
}

size_t smol_grammar_matcher_min_bytes(const struct smol_grammar_matcher *m)
{
    if (m->oom) return SIZE_MAX;
    size_t nt;
    uint8_t fl;
    const uint32_t *tops = gm_tops(m, &nt, &fl);
    if (fl & (GF_ACCEPT | MS_DONE)) return 0;
    uint64_t c = UINT64_MAX;
    for (size_t i = 0; i < nt; i++) {
        uint64_t k = node_cost(m->g, &m->pool, (int32_t)tops[i]);
        if (k < c) c = k;
    }
    return c > SIZE_MAX ? SIZE_MAX : (size_t)c;
}

/* A byte of set s for a completion: a letter or digit where the set has
 * one (the text stays readable), else the lowest. */
static unsigned pick_byte(const uint8_t *set)
{
    static const char pref[] = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ -_.";
    for (const char *c = pref; *c; c++)
        if (gset_has(set, (unsigned char)*c)) return (unsigned char)*c;
    for (unsigned b = 0; b < 256; b++)
        if (gset_has(set, b)) return b;
    return 0;
}

#define FRAMES 4096
#define BUDGET_MAX_TEXT (1u << 20)   /* longest completion spelled out for the token count */

/* Up to cap bytes of a shortest completion from stack node into out; the
 * number written. */
static size_t shortest_text(const struct smol_grammar *g, const struct gpool *p, int32_t node, uint8_t *out,
                            size_t cap)
{
    uint32_t fr[FRAMES];    /* the states to continue at, innermost last */
    int depth = 0;
    for (int32_t k = node; k >= 0 && depth < FRAMES; k = p->parent[k]) fr[depth++] = (uint32_t)p->state[k];
    for (int i = 0; i < depth / 2; i++) { uint32_t t = fr[i]; fr[i] = fr[depth - 1 - i]; fr[depth - 1 - i] = t; }
    size_t n = 0;
    for (size_t guard = 0; depth > 0 && n < cap && guard < 64 * cap + 4096; guard++) {
        uint32_t s = fr[depth - 1];
        const struct gstate *st = &g->states[s];
        if (st->final) { depth--; continue; }   /* dist 0: the rule ends here */
        uint32_t be = INF, bc = INF;
        for (uint32_t e = st->e0; e < st->e0 + st->n_byte + st->n_ref; e++) {
            uint32_t c = edge_cost(g, st, e);
            if (c < bc) { bc = c; be = e; }
        }
        if (be == INF) break;
        const struct gedge *e = &g->edges[be];
        fr[depth - 1] = e->to;
        if (be < st->e0 + st->n_byte) {
            out[n++] = (uint8_t)pick_byte(g->sets[e->arg]);
        } else {
            if (depth == FRAMES) break;
            fr[depth++] = g->rule_start[e->arg];
        }
    }
    return n;
}

/* The fewest tokens (at most limit, else UINT32_MAX) that complete the
 * grammar along a shortest completion of one of the current stacks; *best_top
 * that stack.  A stack whose shortest completion is over limit * max_len bytes
 * cannot be spelled in limit tokens and is skipped.  The text and its
 * per-suffix token counts are left in m->btext / m->bdp (of *best_top). */
static uint32_t completion_tokens(struct smol_grammar_matcher *m, size_t limit, int32_t *best_top, size_t *text_len)
{
    const struct smol_grammar_vocab *v = gm_vocab(m);
    size_t nt;
    uint8_t fl;
    const uint32_t *tops = gm_tops(m, &nt, &fl);
    uint32_t best = UINT32_MAX;
    int32_t last = -1;      /* the stack whose text the arrays hold */
    *best_top = -1;
    *text_len = 0;
    if (fl & (GF_ACCEPT | MS_DONE)) return 0;
    const uint64_t cap = (uint64_t)limit * gv_max_len(v);
    for (size_t i = 0; i < nt && i < 16 && best > 1; i++) {
        uint64_t c = node_cost(m->g, &m->pool, (int32_t)tops[i]);
        if (c == UINT64_MAX || c > cap || c > BUDGET_MAX_TEXT) continue;
        if (m->cap_btext < c + 1) {
            uint8_t *t = realloc(m->btext, c + 1);
            if (t) m->btext = t;
            uint32_t *d = t ? realloc(m->bdp, (c + 1) * sizeof *d) : NULL;
            if (!d) {   /* out of memory: the matcher fails (its next token is refused with ENOMEM),
                         * rather than let the output run past its budget unforced */
                m->oom = 1;
                return UINT32_MAX;
            }
            m->bdp = d;
            m->cap_btext = c + 1;
        }
        size_t n = shortest_text(m->g, &m->pool, (int32_t)tops[i], m->btext, (size_t)c);
        last = (int32_t)tops[i];
        if (n != c) continue;   /* not followed to the end (the frame limit) */
        gv_min_tokens(v, m->btext, n, m->bdp);
        if (m->bdp[0] < best) {
            best = m->bdp[0];
            *best_top = last;
            *text_len = n;
        }
    }
    if (*best_top >= 0 && *best_top != last) {   /* the arrays hold another stack's: the best one's again */
        shortest_text(m->g, &m->pool, *best_top, m->btext, *text_len);
        gv_min_tokens(v, m->btext, *text_len, m->bdp);
    }
    return best;
}

size_t smol_grammar_matcher_min_tokens(struct smol_grammar_matcher *m)
{
    if (!m->ix || m->oom) return SIZE_MAX;
    int32_t top;
    size_t n;
    uint32_t t = completion_tokens(m, BUDGET_MAX_TEXT, &top, &n);
    return t == UINT32_MAX ? SIZE_MAX : t;
}

int smol_grammar_matcher_fits(struct smol_grammar_matcher *m, int32_t id, size_t budget)
{
    if (budget == 0 || !m->ix) return 0;
    if (smol_grammar_matcher_accept_token(m, id)) return 0;
    int ok = smol_grammar_matcher_min_bytes(m) <= budget - 1;   /* a token per byte at worst */
    if (!ok) {
        int32_t top;
        size_t n;
        ok = completion_tokens(m, budget - 1, &top, &n) <= budget - 1;
    }
    smol_grammar_matcher_rollback(m, 1);
    return ok;
}

void smol_grammar_matcher_mask_shortest(struct smol_grammar_matcher *m, uint32_t *bitmask, size_t budget)
{
    if (!m->ix || m->oom) return;
    const struct smol_grammar_vocab *v = gm_vocab(m);
    const int32_t nv = smol_grammar_vocab_size(v);
    const size_t words = ((size_t)nv + 31) / 32;
    int32_t top;
    size_t n;
    uint32_t t = completion_tokens(m, budget > 0 ? budget : 1, &top, &n);
    if (t == 0) {   /* the grammar may end: only the end tokens */
        for (size_t w = 0; w < words; w++) {
            uint32_t keep = 0;
            for (int b = 0; b < 32 && w * 32 + b < (size_t)nv; b++)
                if (gv_is_end(v, (int32_t)(w * 32 + b))) keep |= 1u << b;
            bitmask[w] &= keep;
        }
        return;
    }
    if (top < 0 || n == 0) return;   /* no completion to follow: the mask as it is */
    /* the prefixes p of the completion after which the rest still fits,
     * 1 + dp[|p|] <= budget; when none does (the budget was short from the
     * start), those that leave the fewest */
    uint32_t need = UINT32_MAX;
    for (size_t l = 1; l <= n; l++)
        if (m->bdp[l] != UINT32_MAX && m->bdp[l] + 1 < need) need = m->bdp[l] + 1;
    gv_keep_prefixes(v, m->btext, n, m->bdp, need > budget ? need : (uint32_t)budget, bitmask);
}
