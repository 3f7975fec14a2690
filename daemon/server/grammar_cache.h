/*
 * grammar_cache.h - compiled grammars for constrained requests, shared and
 * cached.
 *
 * The daemon builds one cache at start (the vocabulary trie of its
 * tokenizer, smol_grammar_vocab_new).  The RPC thread asks it for the
 * grammar of a request's constraint while validating the request: the
 * grammar itself is compiled there (milliseconds, bounded by the input
 * limits), so a schema we cannot express is refused at once.  Its token
 * index, the expensive part (up to seconds for a long maxLength), is built
 * by the cache's own worker thread: the entry is PENDING until then, the
 * RPC thread parks the request and keeps serving everyone else, and the
 * cache's notification fd (smol_grammar_cache_fd) becomes readable when an
 * index is done.  Compiled grammars and indexes are kept in a small LRU
 * keyed by (kind, text), so a repeated schema costs a hash and a compare; a
 * request for a schema whose index is being built joins that build.
 * Entries are reference counted: a request holds one until it is freed (on
 * the engine thread), and an entry evicted from the LRU lives until its
 * last request lets go.  All functions are thread-safe.
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
    SMOL_CONSTRAINT_TOOL_CALLS,     /* text: tool_choice, '\n', the tools JSON (smol_grammar_compile_tool_calls) */
};

/* capacity: entries kept (0 = 16).  The tokenizer is borrowed.  Starts the
 * index worker thread. */
enum smol_err smol_grammar_cache_new(struct smol_grammar_cache **out, const struct smol_tokenizer *tok,
                                     int capacity, char *err);
/* Stops the worker (an index being built is abandoned between two states;
 * its entry fails with SMOL_ESHUTDOWN), frees the cache and the entries no
 * request holds.  The token indexes borrow the cache's vocabulary: free it
 * only once no request is left (the daemon does after smol_engine_stop). */
void smol_grammar_cache_free(struct smol_grammar_cache **c);

/* A referenced entry for (kind, text): cached (ready or pending), or
 * compiled now with its index queued for the worker (pending).  text is
 * ignored for JSON_OBJECT.  Errors: those of the compile functions in
 * grammar.h (SMOL_EUNSUPPORTED / SMOL_EINVAL name the keyword or place),
 * SMOL_ETOOLARGE, SMOL_ENOMEM.  err names the constraint kind. */
enum smol_err smol_grammar_cache_get(struct smol_grammar_cache *c, enum smol_constraint_kind kind,
                                     const char *text, size_t len, struct smol_grammar_entry **out, char *err);
/* 0 while the entry's index is being built; 1 once it is done: SMOL_OK in
 * *code when the entry can be used, else the error that failed the build
 * (SMOL_ETOOLARGE, SMOL_ENOMEM, SMOL_ESHUTDOWN) with its message in err
 * (SMOL_ERRLEN bytes; may be NULL). */
int smol_grammar_entry_done(struct smol_grammar_entry *e, enum smol_err *code, char *err);
/* A file descriptor that polls readable once some entry's build finished
 * since the last smol_grammar_cache_ack (an eventfd). */
int smol_grammar_cache_fd(const struct smol_grammar_cache *c);
void smol_grammar_cache_ack(struct smol_grammar_cache *c);
/* Drops a reference; accepts NULL and *e == NULL; sets *e = NULL. */
void smol_grammar_entry_release(struct smol_grammar_entry **e);
const struct smol_grammar *smol_grammar_entry_grammar(const struct smol_grammar_entry *e);
const struct smol_grammar_index *smol_grammar_entry_index(const struct smol_grammar_entry *e);

struct smol_grammar_cache_stats {
    uint64_t hits, compiles;
    double compile_ms;          /* grammar + index, summed over the compiles */
};
void smol_grammar_cache_stats(struct smol_grammar_cache *c, struct smol_grammar_cache_stats *out);

#endif
