/*
 * matcher.c - the pushdown automaton's stacks and the per-request matcher.
 *
 * Stacks are persistent: a node is (state, parent node), hash-consed in a
 * pool, so a set of live stacks is a small set of node ids and two paths
 * that reach the same stack meet in one id (the closure visits it once).
 * Reading a byte moves each top along its byte edges; the closure then
 * expands rule edges (push a return node, enter the callee's start) and
 * final states (pop: continue at the parent node) until every stack's top
 * state has byte edges.  Left recursion is rejected at compile time, so
 * the closure terminates.
 *
 * Nodes are only ever freed from the top of the pool, in reverse order of
 * creation (gp_truncate): with linear probing, clearing the slots of the
 * most recently inserted keys restores the table exactly, so there are no
 * tombstones.  The matcher commits the nodes of accepted tokens and frees
 * everything a mask computation made; a rollback frees back to the pool
 * size recorded at that step.
 */
#include "daemon/grammar/grammar.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/grammar/grammar_impl.h"
#include "daemon/grammar/grammar_mask.h"

/* ---- node pool ---------------------------------------------------------------------- */

static uint32_t hnode(int32_t s, int32_t p)
{
    uint32_t h = (uint32_t)s * 0x9E3779B1u ^ ((uint32_t)p + 0x7F4A7C15u) * 0x85EBCA77u;
    return h ^ (h >> 15);
}

void gp_deinit(struct gpool *p)
{
    free(p->state); free(p->parent); free(p->stamp); free(p->slot); free(p->tab);
    memset(p, 0, sizeof *p);
}

static int gp_rehash(struct gpool *p, uint32_t tcap)
{
    uint32_t *t = calloc(tcap, sizeof *t);
    if (!t) return -1;
    free(p->tab);
    p->tab = t;
    p->tcap = tcap;
    for (uint32_t i = 0; i < p->n; i++) {   /* in creation order: LIFO deletion stays exact */
        uint32_t h = hnode(p->state[i], p->parent[i]) & (tcap - 1);
        while (t[h]) h = (h + 1) & (tcap - 1);
        t[h] = i + 1;
        p->slot[i] = h;
    }
    return 0;
}

int32_t gp_node(struct gpool *p, int32_t state, int32_t parent)
{
    if (p->tcap) {
        uint32_t h = hnode(state, parent) & (p->tcap - 1);
        for (uint32_t e; (e = p->tab[h]); h = (h + 1) & (p->tcap - 1))
            if (p->state[e - 1] == state && p->parent[e - 1] == parent) return (int32_t)(e - 1);
    }
    if (p->n == p->cap) {
        uint32_t c = p->cap ? p->cap * 2 : 1024;
        if (c > (1u << 30)) return -1;
        int32_t *s = realloc(p->state, c * sizeof *s);
        if (s) p->state = s;
        int32_t *pa = realloc(p->parent, c * sizeof *pa);
        if (pa) p->parent = pa;
        uint32_t *st = realloc(p->stamp, c * sizeof *st);
        if (st) p->stamp = st;
        uint32_t *sl = realloc(p->slot, c * sizeof *sl);
        if (sl) p->slot = sl;
        if (!s || !pa || !st || !sl) return -1;
        p->cap = c;
    }
    if ((p->n + 1) * 2 > p->tcap) {
        if (gp_rehash(p, p->tcap ? p->tcap * 2 : 2048)) return -1;
    }
    uint32_t id = p->n++;
    p->state[id] = state;
    p->parent[id] = parent;
    p->stamp[id] = 0;
    uint32_t h = hnode(state, parent) & (p->tcap - 1);
    while (p->tab[h]) h = (h + 1) & (p->tcap - 1);
    p->tab[h] = id + 1;
    p->slot[id] = h;
    return (int32_t)id;
}

void gp_truncate(struct gpool *p, uint32_t n)
{
    while (p->n > n) {
        p->n--;
        p->tab[p->slot[p->n]] = 0;
    }
}

int gbuf_reserve(struct gbuf *b, size_t extra)
{
    if (b->n + extra <= b->cap) return 0;
    size_t c = b->cap ? b->cap : 256;
    while (c < b->n + extra) c *= 2;
    uint32_t *v = realloc(b->v, c * sizeof *v);
    if (!v) return -1;
    b->v = v;
    b->cap = c;
    return 0;
}

/* ---- closure and step --------------------------------------------------------------- */

static void closure_rec(const struct smol_grammar *g, struct gpool *p, int32_t node, struct gbuf *out,
                        uint8_t *flags, size_t first)
{
    if (node < 0) { *flags |= GF_OOM; return; }
    if (p->stamp[node] == p->tick) return;
    p->stamp[node] = p->tick;
    int32_t s = p->state[node], parent = p->parent[node];
    const struct gstate *st = &g->states[s];
    if (st->n_byte) {
        if (out->n - first >= GP_MAX_TOPS) { *flags |= GF_LIMIT; return; }
        if (gbuf_reserve(out, 1)) { *flags |= GF_OOM; return; }
        out->v[out->n++] = (uint32_t)node;
    }
    if (st->final) {
        if (parent == GP_ROOT) *flags |= GF_ACCEPT;
        else if (parent == GP_UNK) *flags |= GF_CTX;
        else closure_rec(g, p, parent, out, flags, first);
    }
    for (uint32_t e = st->e0 + st->n_byte; e < st->e0 + st->n_byte + st->n_ref; e++) {
        int32_t ret = gp_node(p, (int32_t)g->edges[e].to, parent);
        if (ret < 0) { *flags |= GF_OOM; return; }
        /* the callee's frame: made after ret, so ret is still valid on truncation */
        closure_rec(g, p, gp_node(p, (int32_t)g->rule_start[g->edges[e].arg], ret), out, flags, first);
    }
}

void gp_closure(const struct smol_grammar *g, struct gpool *p, int32_t node, struct gbuf *out, uint8_t *flags)
{
    p->tick++;
    closure_rec(g, p, node, out, flags, out->n);
}

void gp_step(const struct smol_grammar *g, struct gpool *p, const uint32_t *in, size_t n, unsigned byte,
             struct gbuf *out, uint8_t *flags)
{
    p->tick++;
    size_t first = out->n;
    for (size_t i = 0; i < n; i++) {
        int32_t node = (int32_t)in[i];
        const struct gstate *st = &g->states[p->state[node]];
        for (uint32_t e = st->e0; e < st->e0 + st->n_byte; e++)
            if (gset_has(g->sets[g->edges[e].arg], byte))
                closure_rec(g, p, gp_node(p, (int32_t)g->edges[e].to, p->parent[node]), out, flags, first);
    }
}

uint32_t smol_grammar_n_states(const struct smol_grammar *g) { return g->n_states; }

/* ---- matcher ------------------------------------------------------------------------ */

enum smol_err smol_grammar_matcher_new(struct smol_grammar_matcher **out, const struct smol_grammar *g,
                                       const struct smol_grammar_index *ix, char *err)
{
    *out = NULL;
    struct smol_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return smol_errf(err, SMOL_ENOMEM, "grammar matcher: out of memory");
    m->g = g;
    m->ix = ix;
    if (ix && gm_scratch_init(m)) {
        smol_grammar_matcher_free(&m);
        return smol_errf(err, SMOL_ENOMEM, "grammar matcher: out of memory");
    }
    smol_grammar_matcher_reset(m);
    if (m->oom) {
        smol_grammar_matcher_free(&m);
        return smol_errf(err, SMOL_ENOMEM, "grammar matcher: out of memory");
    }
    *out = m;
    return SMOL_OK;
}

void smol_grammar_matcher_free(struct smol_grammar_matcher **mp)
{
    if (!mp || !*mp) return;
    struct smol_grammar_matcher *m = *mp;
    gp_deinit(&m->pool);
    free(m->log.v);
    free(m->steps);
    free(m->a.v);
    free(m->b.v);
    gm_scratch_deinit(m);
    free(m);
    *mp = NULL;
}

static int push_step(struct smol_grammar_matcher *m, const uint32_t *tops, size_t n, uint8_t flags)
{
    if (m->n_steps == m->cap_steps) {
        size_t c = m->cap_steps ? m->cap_steps * 2 : 64;
        struct mstep *s = realloc(m->steps, c * sizeof *s);
        if (!s) return -1;
        m->steps = s;
        m->cap_steps = c;
    }
    if (gbuf_reserve(&m->log, n)) return -1;
    if (n) memcpy(m->log.v + m->log.n, tops, n * sizeof *tops);
    m->steps[m->n_steps++] = (struct mstep){m->log.n, n, m->pool.n, flags};
    m->log.n += n;
    return 0;
}

void smol_grammar_matcher_reset(struct smol_grammar_matcher *m)
{
    gp_truncate(&m->pool, 0);
    m->log.n = 0;
    m->n_steps = 0;
    m->a.n = 0;
    uint8_t fl = 0;
    int32_t start = gp_node(&m->pool, (int32_t)m->g->rule_start[m->g->root], GP_ROOT);
    gp_closure(m->g, &m->pool, start, &m->a, &fl);
    m->oom = (fl & GF_OOM) || push_step(m, m->a.v, m->a.n, fl & GF_ACCEPT);
}

const uint32_t *gm_tops(const struct smol_grammar_matcher *m, size_t *n, uint8_t *flags)
{
    const struct mstep *s = &m->steps[m->n_steps - 1];
    *n = s->n;
    *flags = s->flags;
    return m->log.v + s->off;
}

enum smol_err smol_grammar_matcher_accept_bytes(struct smol_grammar_matcher *m, const void *bytes, size_t n)
{
    if (m->oom) return SMOL_ENOMEM;
    size_t nt;
    uint8_t fl;
    const uint32_t *tops = gm_tops(m, &nt, &fl);
    if (fl & MS_DONE) return SMOL_EINVAL;
    uint32_t mark = m->pool.n;
    const uint8_t *p = bytes;
    m->a.n = 0;
    if (gbuf_reserve(&m->a, nt)) return SMOL_ENOMEM;
    if (nt) memcpy(m->a.v, tops, nt * sizeof *tops);
    m->a.n = nt;
    fl = 0;
    for (size_t i = 0; i < n; i++) {
        m->b.n = 0;
        fl = 0;
        gp_step(m->g, &m->pool, m->a.v, m->a.n, p[i], &m->b, &fl);
        struct gbuf t = m->a; m->a = m->b; m->b = t;
        if (fl & (GF_OOM | GF_LIMIT) || (m->a.n == 0 && !((fl & GF_ACCEPT) && i + 1 == n))) {
            gp_truncate(&m->pool, mark);
            return (fl & GF_OOM) ? SMOL_ENOMEM : SMOL_EINVAL;
        }
    }
    if (n == 0) fl = m->steps[m->n_steps - 1].flags;
    if (push_step(m, m->a.v, m->a.n, fl & GF_ACCEPT)) {
        gp_truncate(&m->pool, mark);
        return SMOL_ENOMEM;
    }
    return SMOL_OK;
}

enum smol_err smol_grammar_matcher_accept_token(struct smol_grammar_matcher *m, int32_t id)
{
    if (!m->ix) return SMOL_EINVAL;
    const struct smol_grammar_vocab *v = gm_vocab(m);
    if (id < 0 || id >= smol_grammar_vocab_size(v)) return SMOL_EINVAL;
    size_t nt;
    uint8_t fl;
    gm_tops(m, &nt, &fl);
    if (fl & MS_DONE) return SMOL_EINVAL;
    if (gv_is_end(v, id)) {
        if (!(fl & GF_ACCEPT)) return SMOL_EINVAL;
        return push_step(m, NULL, 0, GF_ACCEPT | MS_DONE) ? SMOL_ENOMEM : SMOL_OK;
    }
    size_t len;
    const char *b = gv_piece(v, id, &len);
    if (!b || len == 0) return SMOL_EINVAL;   /* special tokens and empty pieces are never allowed */
    return smol_grammar_matcher_accept_bytes(m, b, len);
}

int smol_grammar_matcher_can_end(const struct smol_grammar_matcher *m)
{
    return !m->oom && (m->steps[m->n_steps - 1].flags & GF_ACCEPT) != 0;
}

int smol_grammar_matcher_failed(const struct smol_grammar_matcher *m) { return m->oom != 0; }

int smol_grammar_matcher_is_done(const struct smol_grammar_matcher *m)
{
    if (m->oom) return 1;
    const struct mstep *s = &m->steps[m->n_steps - 1];
    return (s->flags & MS_DONE) || s->n == 0;
}

size_t smol_grammar_matcher_steps(const struct smol_grammar_matcher *m) { return m->n_steps - 1; }

enum smol_err smol_grammar_matcher_rollback(struct smol_grammar_matcher *m, size_t k)
{
    if (k >= m->n_steps) return SMOL_EINVAL;
    m->n_steps -= k;
    const struct mstep *s = &m->steps[m->n_steps - 1];
    m->log.n = s->off + s->n;
    gp_truncate(&m->pool, s->pool_n);
    return SMOL_OK;
}
