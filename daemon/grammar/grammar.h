/*
 * grammar.h - constrained decoding: grammars over bytes and token masks.
 *
 * A grammar is a pushdown automaton over BYTES: named rules, each a small
 * NFA whose edges read a byte from a set or call another rule.  Three front
 * ends compile to it: JSON Schema (json_schema.c), GBNF as llama.cpp writes
 * it (gbnf.c) and regular expressions in the JSON-Schema `pattern` dialect
 * (regex.c).  The automaton is nondeterministic; the matcher keeps the set
 * of live stacks, each a persistent, hash-consed linked list of return
 * nodes, so a rollback is restoring an earlier set (matcher.c).
 *
 * Token masks (grammar_mask.c), the XGrammar approach: the vocabulary's
 * token byte strings form a trie (smol_grammar_vocab, once per tokenizer).
 * smol_grammar_index walks that trie once per automaton state, with the
 * stack below the state unknown, and sorts every token into accepted or
 * rejected whatever the stack holds, or context-dependent: the token runs
 * past the end of the state's rule, with the bytes left over to be checked
 * against the real stack at run time.  A mask is then an OR of cached
 * bitmaps plus a small walk over those leftovers (and, where the rule may
 * end right here, a pruned trie walk from the rule's continuation).
 *
 * Special and control tokens are never allowed by a grammar, but for the
 * tool-call tags (SMOL_GRAMMAR_TOOL_CALL below); the end tokens
 * (smol_tokenizer_is_eog) are allowed exactly when the grammar may end, and
 * are the only ones allowed when it must end.
 *
 * Lifetimes: a grammar is immutable after compile and may be shared by
 * threads; so are a vocab and an index.  A matcher belongs to one request
 * (one thread at a time) and borrows its grammar and index, which must
 * outlive it.
 */
#ifndef SMOL_GRAMMAR_H
#define SMOL_GRAMMAR_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "daemon/model/error.h"
#include "daemon/model/rules.h"

struct smol_tokenizer;
struct smol_grammar;
struct smol_grammar_vocab;
struct smol_grammar_index;
struct smol_grammar_matcher;

/* Limits on what a compile may consume; zero fields take the defaults. */
struct smol_grammar_opts {
    int flexible_ws;        /* JSON: allow whitespace between tokens (default 0: compact, none) */
    int extra_properties;   /* JSON: an object without "additionalProperties" takes extra keys
                               (the JSON Schema default); 0 (default): none, as xgrammar's strict mode */
    size_t max_input;       /* bytes of schema/grammar text (default 1 MiB) */
    int max_depth;          /* nesting of the source (default 64) */
    size_t max_enum;        /* total values across enum/const (default 4096) */
};

/* Compiles a JSON Schema (draft 2020-12 subset; see json_schema.c for the
 * keywords) to a grammar generating its canonical compact serialization:
 * keys in the schema's property order, required ones mandatory.  Errors:
 * SMOL_EFORMAT (not JSON), SMOL_EUNSUPPORTED (a keyword or value we cannot
 * express, naming it and its JSON pointer), SMOL_EINVAL (an invalid schema,
 * e.g. an unresolvable $ref), SMOL_ETOOLARGE (over a limit), SMOL_ENOMEM.
 * err (SMOL_ERRLEN bytes) names what was wrong. */
enum smol_err smol_grammar_compile_json_schema(const char *json, size_t len, const struct smol_grammar_opts *opts,
                                               struct smol_grammar **out, char *err);
/* The grammar of any JSON value (response_format json_object is an object:
 * object_only set). */
enum smol_err smol_grammar_compile_json_any(int object_only, const struct smol_grammar_opts *opts,
                                            struct smol_grammar **out, char *err);
/* Compiles GBNF text (llama.cpp's dialect, start rule "root").  Errors:
 * SMOL_EINVAL with the line and column of a parse error, an undefined rule
 * or left recursion; SMOL_EUNSUPPORTED for token references (<[id]>,
 * <token>), which a byte grammar cannot express; SMOL_ETOOLARGE. */
enum smol_err smol_grammar_compile_gbnf(const char *text, size_t len, const struct smol_grammar_opts *opts,
                                        struct smol_grammar **out, char *err);
/* Compiles a regular expression (ECMA-262 subset used by JSON Schema
 * `pattern`: literals, escapes, classes, \d \w \s, ., groups, alternation,
 * ? * + {m,n}, anchors ^ $ at the ends).  Whole-string match; unanchored
 * ends are padded with "any characters".  Errors: SMOL_EINVAL (syntax),
 * SMOL_EUNSUPPORTED (backreferences, lookaround), SMOL_ETOOLARGE. */
enum smol_err smol_grammar_compile_regex(const char *re, size_t len, const struct smol_grammar_opts *opts,
                                         struct smol_grammar **out, char *err);
/* Tool calls in SmolLM3's form (tool_grammar.c):
 *     <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
 * with ARGS valid against the tool's `parameters` schema.  tools_json is an
 * OpenAI `tools` array; choice is "required" (one or more calls, each to
 * any of the tools) or a function name (one call to it).  The tags are the
 * special tokens <tool_call> / </tool_call>, spelled in the grammar as the
 * pseudo bytes below (0xFF never occurs in UTF-8 text: the vocabulary gives
 * those two tokens these bytes and leaves every token holding 0xFF out, so
 * only the special tokens can produce them).  Errors: SMOL_EINVAL (no tools,
 * a malformed tool, a name not among them), SMOL_EFORMAT (tools not JSON),
 * those of the JSON Schema compile naming the parameter keyword. */
#define SMOL_GRAMMAR_TOOL_CALL "\xff\x01"
#define SMOL_GRAMMAR_TOOL_CALL_END "\xff\x02"
enum smol_err smol_grammar_compile_tool_calls(const char *tools_json, size_t len, const char *choice,
                                              const struct smol_grammar_opts *opts, struct smol_grammar **out,
                                              char *err);
/* A valid function name: smol_tool_name_ok (daemon/model/rules.h). */
/* Frees; accepts NULL and *g == NULL; sets *g = NULL. */
void smol_grammar_free(struct smol_grammar **g);
/* Automaton states and rules, for logs and limits. */
uint32_t smol_grammar_n_states(const struct smol_grammar *g);

/* The vocabulary trie, built once per tokenizer (~10 MB for 128K tokens) from each token's
 * kind and bytes (the text layer's smol_grammar_vocab_new reads them off a tokenizer: this
 * layer knows no tokenizer).  Pieces are borrowed: they must outlive the vocabulary. */
enum smol_grammar_token_kind {
    SMOL_GT_SKIP,               /* never in a grammar's output (special, empty, unusable bytes) */
    SMOL_GT_TEXT,               /* piece[0..len) */
    SMOL_GT_END,                /* ends generation: allowed exactly where the grammar may end */
    SMOL_GT_TOOL_CALL,          /* <tool_call>: the grammar's pseudo bytes SMOL_GRAMMAR_TOOL_CALL */
    SMOL_GT_TOOL_CALL_END,      /* </tool_call>: SMOL_GRAMMAR_TOOL_CALL_END */
};
struct smol_grammar_token {
    const char *piece;
    size_t len;
    enum smol_grammar_token_kind kind;
};
enum smol_err smol_grammar_vocab_build(struct smol_grammar_vocab **out, int32_t n_vocab,
                                       const struct smol_grammar_token *tokens, char *err);
void smol_grammar_vocab_free(struct smol_grammar_vocab **v);
int32_t smol_grammar_vocab_size(const struct smol_grammar_vocab *v);
/* 1 if the vocabulary has the <tool_call> and </tool_call> tokens (a tool
 * call grammar needs them). */
int smol_grammar_vocab_has_tool_tags(const struct smol_grammar_vocab *v);

/* The per-state token classes of g over v (the expensive step of a compile:
 * cache it with the grammar, keyed by schema text).  Errors: SMOL_ENOMEM,
 * SMOL_ETOOLARGE (the index would exceed max_bytes; 0 = 512 MiB). */
enum smol_err smol_grammar_index_new(struct smol_grammar_index **out, const struct smol_grammar *g,
                                     const struct smol_grammar_vocab *v, size_t max_bytes, char *err);
/* The same, stopping with SMOL_ECANCELLED between two states once *cancel
 * is set (cancel may be NULL).  States with the same edges share a class; a
 * state whose future agrees with its twin's (the same state one copy
 * earlier in a bounded repetition such as a string's maxLength) over the
 * bytes the twin's walk read shares the twin's class, and one that agrees
 * over fewer bytes takes the twin's verdicts on the tokens shorter than that
 * and walks only the longer ones: a repetition costs about what a few
 * copies of its body do, whatever its bound. */
enum smol_err smol_grammar_index_build(struct smol_grammar_index **out, const struct smol_grammar *g,
                                       const struct smol_grammar_vocab *v, size_t max_bytes,
                                       const atomic_int *cancel, char *err);
/* The same index with every state's class walked in full, nothing shared
 * (slow: the reference the tests compare the shared index with). */
enum smol_err smol_grammar_index_new_unshared(struct smol_grammar_index **out, const struct smol_grammar *g,
                                              const struct smol_grammar_vocab *v, char *err);
void smol_grammar_index_free(struct smol_grammar_index **ix);
size_t smol_grammar_index_bytes(const struct smol_grammar_index *ix);
/* States whose class was shared with a twin (for benchmarks and tests). */
uint32_t smol_grammar_index_shared(const struct smol_grammar_index *ix);
/* States whose class was walked for its long tokens only, the short ones
 * taken from the twin (their futures agree over fewer bytes than a token). */
uint32_t smol_grammar_index_partial(const struct smol_grammar_index *ix);

/* A per-request matcher at the start of g.  ix may be NULL for a matcher
 * that only takes bytes (tests, validation); fill_mask and accept_token
 * need it.  Errors: SMOL_ENOMEM. */
enum smol_err smol_grammar_matcher_new(struct smol_grammar_matcher **out, const struct smol_grammar *g,
                                       const struct smol_grammar_index *ix, char *err);
void smol_grammar_matcher_free(struct smol_grammar_matcher **m);
/* Back to the start state (keeps the memory). */
void smol_grammar_matcher_reset(struct smol_grammar_matcher *m);

/* Writes the allowed tokens to bitmask (ceil(n_vocab / 32) words; bit
 * id % 32 of word id / 32 set = allowed).  Every bit is written.  No
 * allocation once the matcher's scratch has grown to the grammar's needs. */
void smol_grammar_matcher_fill_mask(struct smol_grammar_matcher *m, uint32_t *bitmask);
/* Sets logits[i] = -inf for every token the mask disallows, and for ids
 * at or past n_mask (the grammar's vocabulary size) up to n_logits. */
void smol_grammar_mask_logits(const uint32_t *bitmask, int32_t n_mask, float *logits, int32_t n_logits);
/* Advances by token id.  An end token is accepted only when the grammar may
 * end, and finishes the matcher.  Errors: SMOL_EINVAL (the token is not
 * allowed here; the matcher is unchanged), SMOL_ENOMEM. */
enum smol_err smol_grammar_matcher_accept_token(struct smol_grammar_matcher *m, int32_t id);
/* Advances by raw bytes (one rollback step).  SMOL_EINVAL if some byte is
 * not allowed (the matcher is unchanged). */
enum smol_err smol_grammar_matcher_accept_bytes(struct smol_grammar_matcher *m, const void *bytes, size_t n);
/* 1 if the text so far is a complete sentence of the grammar (it may end). */
int smol_grammar_matcher_can_end(const struct smol_grammar_matcher *m);
/* 1 if nothing can follow: the grammar must end here, or an end token was
 * accepted. */
int smol_grammar_matcher_is_done(const struct smol_grammar_matcher *m);
/* 1 once the matcher ran out of memory: it can no longer tell what is
 * allowed (is_done says 1, accepting says SMOL_ENOMEM); its output must not
 * be trusted to follow the grammar. */
int smol_grammar_matcher_failed(const struct smol_grammar_matcher *m);
/* Within a length limit (max_tokens, the context), grammar_budget.c: the
 * bytes of the shortest text that completes the grammar from here (0: it
 * may end here; SIZE_MAX: none).  A byte-level vocabulary has a token for
 * every byte, so a completion of n bytes takes at most n tokens. */
size_t smol_grammar_matcher_min_bytes(const struct smol_grammar_matcher *m);
/* The fewest tokens that complete the grammar from here along the shortest
 * completions (in bytes) of the live stacks (needs the index); SIZE_MAX:
 * none found. */
size_t smol_grammar_matcher_min_tokens(struct smol_grammar_matcher *m);
/* 1 if after token id (allowed here) the grammar can still be completed in
 * budget - 1 tokens: budget is the number of tokens that may still be
 * produced, this one included.  Checked on the shortest completion (in
 * bytes) of each live stack, spelled with the fewest tokens; when even one
 * token per byte fits, nothing is spelled.  The matcher is left as it was. */
int smol_grammar_matcher_fits(struct smol_grammar_matcher *m, int32_t id, size_t budget);
/* Narrows bitmask (as fill_mask wrote it) to the tokens that begin that
 * completion and leave a rest spelled within budget - 1 tokens (the end
 * tokens when the grammar may end here), so an output that was within its
 * budget stays within it.  The sampler's step: draw; if !fits,
 * mask_shortest and draw again. */
void smol_grammar_matcher_mask_shortest(struct smol_grammar_matcher *m, uint32_t *bitmask, size_t budget);
/* Undoes the last k accept_token / accept_bytes calls (k <= steps()). */
enum smol_err smol_grammar_matcher_rollback(struct smol_grammar_matcher *m, size_t k);
/* Number of steps that can be rolled back. */
size_t smol_grammar_matcher_steps(const struct smol_grammar_matcher *m);

#endif
