/*
 * grammar_share.h - which states of a grammar may share a token class, for
 * the token index (grammar_mask.c); see grammar_share.c.  Internal to
 * daemon/text/.
 */
#ifndef SMOL_GRAMMAR_SHARE_H
#define SMOL_GRAMMAR_SHARE_H

#include <stdatomic.h>
#include <stdint.h>

struct smol_grammar;

/* rep[s] := the first state with s's final flag and edges (byte sets,
 * callees, targets), s itself if none comes before it; such states have the
 * same future, hence the same class (epsilon removal makes many: the ends of
 * an alternative's branches all take the edges of what follows).  rep has
 * g->n_states entries.  0, or -1 out of memory. */
int gs_same_states(const struct smol_grammar *g, uint32_t *rep);

/* dep[s] := the largest r <= hi such that s and its twin (g->twin[s]) agree
 * over r bytes: a token shorter than r reads from s what it reads from the
 * twin; UINT32_MAX for a state without a twin.  dep has g->n_states
 * entries.  0; -1 out of memory; 1 cancelled (*cancel set; checked every
 * 1024 states). */
int gs_twin_depths(const struct smol_grammar *g, uint32_t hi, uint32_t *dep, const atomic_int *cancel);

#endif
