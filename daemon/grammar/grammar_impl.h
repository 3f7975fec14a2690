/*
 * grammar_impl.h - the compiled grammar as the matcher sees it.  Internal to
 * daemon/grammar/ (grammar_build.c writes it, matcher.c and grammar_mask.c read it).
 *
 * Every rule is an NFA without epsilon edges; states of all rules share one
 * numbering.  A state's edges are its byte edges (a byte set and a target
 * state, in the same rule) followed by its rule edges (push: run rule arg,
 * then continue at the target).  A final state may pop: the rule can end
 * there.  A stack of the pushdown automaton is a state plus the stack of
 * return nodes below it (see matcher.c).
 */
#ifndef SMOL_GRAMMAR_IMPL_H
#define SMOL_GRAMMAR_IMPL_H

#include <stddef.h>
#include <stdint.h>

struct gstate {
    uint32_t e0;        /* first edge in smol_grammar.edges */
    uint32_t n_byte;    /* byte edges at [e0, e0 + n_byte) */
    uint32_t n_ref;     /* rule edges right after them */
    uint8_t final;      /* the rule may end here */
    uint32_t rule;      /* rule this state belongs to */
};

struct gedge {
    uint32_t arg;       /* byte edge: index in sets; rule edge: rule index */
    uint32_t to;        /* target state */
};

struct smol_grammar {
    uint32_t n_states;
    struct gstate *states;      /* [n_states] */
    struct gedge *edges;        /* [n_edges] */
    uint32_t n_edges;
    uint8_t (*sets)[32];        /* [n_sets] byte sets, bit b of byte b/8 */
    uint32_t n_sets;
    uint32_t n_rules;
    uint32_t *rule_start;       /* [n_rules] start state of each rule */
    char **rule_names;          /* [n_rules] for messages */
    uint32_t root;              /* start rule */
    uint32_t *twin;             /* [n_states] the same state one copy earlier in a bounded
                                   repetition (x{m,n} is built as n copies of x), or
                                   UINT32_MAX: a candidate for sharing its token class (the
                                   index checks that their futures agree; grammar_mask.c) */
    uint32_t *dist;             /* [n_states] bytes of the shortest way from the state to the end
                                   of its rule, UINT32_MAX if none (grammar_budget.c) */
};

/* Fills g->dist, once the states and edges are final (grammar_budget.c); -1 on
 * out of memory. */
int gr_shortest_init(struct smol_grammar *g);

static inline int gset_has(const uint8_t *set, unsigned b)
{
    return (set[b >> 3] >> (b & 7)) & 1;
}

/* ---- the stack engine (grammar.c) ----------------------------------------------------
 * A stack is a node: (state, parent), parent the node to return to when the
 * state's rule ends (its state is the return state), or GP_ROOT (the end of
 * the grammar) or GP_UNK (unknown: the index's walks stop there and flag
 * GF_CTX).  Nodes are hash-consed, so equal stacks are equal ids, and are
 * freed only from the top (gp_truncate), in the order they were made. */
#define GP_ROOT (-1)
#define GP_UNK (-2)

enum { GF_ACCEPT = 1, GF_CTX = 2, GF_OOM = 4, GF_LIMIT = 8 };

struct gpool {
    int32_t *state, *parent;    /* [cap] */
    uint32_t *stamp;            /* [cap] closure visit marks */
    uint32_t *slot;             /* [cap] hash slot of each node */
    uint32_t n, cap;
    uint32_t *tab;              /* [tcap] node id + 1, 0 = empty (linear probing) */
    uint32_t tcap;
    uint32_t tick;              /* current closure mark */
};

/* A growable array of node ids: sets of stack tops, stored back to back. */
struct gbuf {
    uint32_t *v;
    size_t n, cap;
};

#define GP_MAX_TOPS 4096        /* live stacks per set; more is a runaway grammar */

void gp_deinit(struct gpool *p);
/* The node (state, parent), made if new; -1 on out of memory (GF_OOM). */
int32_t gp_node(struct gpool *p, int32_t state, int32_t parent);
/* Frees the nodes made after the pool had n. */
void gp_truncate(struct gpool *p, uint32_t n);
/* Appends to out the tops reachable from node without reading a byte
 * (states with byte edges), ORing GF_* into *flags. */
void gp_closure(const struct smol_grammar *g, struct gpool *p, int32_t node, struct gbuf *out, uint8_t *flags);
/* Appends to out the tops after reading byte from the set in[0..n). */
void gp_step(const struct smol_grammar *g, struct gpool *p, const uint32_t *in, size_t n, unsigned byte,
             struct gbuf *out, uint8_t *flags);
int gbuf_reserve(struct gbuf *b, size_t extra);

#endif
