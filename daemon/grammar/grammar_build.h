/*
 * grammar_build.h - the expression builder the grammar front ends share
 * (JSON Schema, GBNF, regex).  Internal to daemon/text/.
 *
 * A front end builds, in one arena, expressions over bytes: byte sets,
 * sequences, alternatives, bounded or unbounded repetition and references to
 * named rules; then gb_finish turns every rule into a small NFA (Thompson
 * construction, epsilon edges removed) and checks the whole grammar: every
 * referenced rule defined, no left recursion (the pushdown automaton would
 * expand it forever), sizes under the limits.  Expressions are a DAG: one may
 * be used in several places and is copied into each.
 *
 * Code points: gb_cp_class compiles a set of Unicode code point ranges to the
 * UTF-8 byte sequences that encode them (surrogates excluded), so a negated
 * class such as [^"\\] accepts exactly the valid UTF-8 characters outside it.
 */
#ifndef SMOL_GRAMMAR_BUILD_H
#define SMOL_GRAMMAR_BUILD_H

#include <stddef.h>
#include <stdint.h>
#include "daemon/model/error.h"

struct smol_grammar;
struct gb;

#define GB_INF (-1)             /* unbounded repetition */
#define GB_MAX_EXPRS (1 << 22)  /* expression nodes per grammar */
#define GB_MAX_STATES (1 << 20) /* NFA states per grammar */
#define GB_MAX_RULES (1 << 16)
#define GB_MAX_REPEAT 10000     /* m and n of {m,n} */

/* A code point range [lo, hi]. */
struct gb_range {
    uint32_t lo, hi;
};

enum smol_err gb_new(struct gb **out, char *err);
void gb_free(struct gb **b);

/* Expressions: each returns an id >= 0, or -1 once the builder has failed
 * (out of memory or over a limit; gb_finish then reports it).  Every
 * constructor accepts -1 ids and propagates the failure. */
int gb_empty(struct gb *b);
int gb_bytes(struct gb *b, const void *s, size_t n);     /* the literal bytes */
int gb_str(struct gb *b, const char *s);                  /* the literal C string */
int gb_byteset(struct gb *b, const uint8_t bits[32]);      /* one byte in the set */
int gb_byte_range(struct gb *b, int lo, int hi);           /* one byte in [lo, hi] */
/* One code point in the ranges (negate: outside them), UTF-8 encoded. */
int gb_cp_class(struct gb *b, const struct gb_range *r, size_t n, int negate);
int gb_seq(struct gb *b, const int *xs, size_t n);
int gb_alt(struct gb *b, const int *xs, size_t n);
int gb_seq2(struct gb *b, int x, int y);
int gb_seq3(struct gb *b, int x, int y, int z);
int gb_alt2(struct gb *b, int x, int y);
int gb_rep(struct gb *b, int x, int min, int max);         /* max GB_INF: unbounded */
int gb_ref(struct gb *b, int rule);

/* Rules: gb_rule_new declares a named rule (its body set later, so rules may
 * refer to each other in any order); gb_rule_find looks one up by name (-1). */
int gb_rule_new(struct gb *b, const char *name, size_t len);
int gb_rule_find(const struct gb *b, const char *name, size_t len);
void gb_rule_set(struct gb *b, int rule, int expr);
/* Marks the builder failed with a message (first failure wins). */
void gb_fail(struct gb *b, enum smol_err code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int gb_failed(const struct gb *b);
/* Automaton states expression x expands to (saturating at UINT32_MAX). */
uint32_t gb_size(const struct gb *b, int x);
/* Number of expression nodes so far (for front-end limits). */
size_t gb_n_exprs(const struct gb *b);

/* Regular expression (see smol_grammar_compile_regex) as an expression.
 * json_string: it describes the content of a JSON string, so '"' and '\\'
 * are produced escaped and control characters are left out.  Whole match:
 * the ends not anchored with ^ / $ take any characters.  On error returns -1
 * with the builder failed (SMOL_EINVAL / SMOL_EUNSUPPORTED, naming the
 * offset). */
int gb_regex(struct gb *b, const char *re, size_t len, int json_string);

/* Builds the grammar whose start is rule root.  Errors: the builder's first
 * failure, SMOL_EINVAL (rule referenced but not defined, left recursion,
 * naming the rule), SMOL_ETOOLARGE (over a limit), SMOL_ENOMEM. */
enum smol_err gb_finish(struct gb *b, int root, struct smol_grammar **out, char *err);

#endif
