/*
 * grammar_cache.h - compiled grammars for constrained requests, shared and
 * cached.
 *
 * The daemon builds one cache at start (the vocabulary trie of its
 * tokenizer, smol_grammar_vocab_new).  The RPC thread asks it for the
 * grammar of a request's constraint while validating the request, so a
 * schema we cannot express is refused at once; the compiled grammar and its
 * token index (the expensive part) are kept in a small LRU keyed by
 * (kind, text), so a repeated schema costs a hash and a compare.  Entries
 * are reference counted: a request holds one until it is freed (on the
 * engine thread), and an entry evicted from the LRU lives until its last
 * request lets go.  All functions are thread-safe.
 */
#ifndef SMOL_GRAMMAR_CACHE_H
#define SMOL_GRAMMAR_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include "daemon/model/error.h"

struct smol_tokenizer;
struct smol_grammar;
struct smol_grammar_index;
struct smol_grammar_cache;
struct smol_grammar_entry;

enum smol_constraint_kind {
    SMOL_CONSTRAINT_NONE = 0,
    SMOL_CONSTRAINT_JSON_SCHEMA,
    SMOL_CONSTRAINT_GBNF,
    SMOL_CONSTRAINT_REGEX,
    SMOL_CONSTRAINT_JSON_OBJECT,
};

/* capacity: entries kept (0 = 16).  The tokenizer is borrowed. */
enum smol_err smol_grammar_cache_new(struct smol_grammar_cache **out, const struct smol_tokenizer *tok,
                                     int capacity, char *err);
/* Frees the cache and the entries no request holds.  The token indexes
 * borrow the cache's vocabulary: free it only once no request is left (the
 * daemon does after smol_engine_stop). */
void smol_grammar_cache_free(struct smol_grammar_cache **c);

/* A referenced entry for (kind, text): cached, or compiled and indexed now.
 * text is ignored for JSON_OBJECT.  Errors: those of the compile functions
 * in grammar.h (SMOL_EUNSUPPORTED / SMOL_EINVAL name the keyword or place),
 * SMOL_ETOOLARGE, SMOL_ENOMEM.  err names the constraint kind. */
enum smol_err smol_grammar_cache_get(struct smol_grammar_cache *c, enum smol_constraint_kind kind,
                                     const char *text, size_t len, struct smol_grammar_entry **out, char *err);
/* Drops a reference; accepts NULL and *e == NULL; sets *e = NULL. */
void smol_grammar_entry_release(struct smol_grammar_entry **e);
const struct smol_grammar *smol_grammar_entry_grammar(const struct smol_grammar_entry *e);
const struct smol_grammar_index *smol_grammar_entry_index(const struct smol_grammar_entry *e);

struct smol_grammar_cache_stats {
    uint64_t hits, compiles;
    double compile_ms;
};
void smol_grammar_cache_stats(struct smol_grammar_cache *c, struct smol_grammar_cache_stats *out);

#endif
