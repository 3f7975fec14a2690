/*
 * grammar_cache.c - the LRU of compiled grammars (see grammar_cache.h).
 * A mutex guards the list and the reference counts; a compile runs under it
 * (the RPC thread is the only caller of _get, so nothing waits behind it
 * but an engine-thread release).
 */
#include "daemon/server/grammar_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/text/text.h"

struct smol_grammar_entry {
    struct smol_grammar_cache *c;   /* NULL once the cache is freed */
    enum smol_constraint_kind kind;
    uint64_t hash;
    char *text;
    size_t len;
    struct smol_grammar *g;
    struct smol_grammar_index *ix;
    int refs;                       /* requests + 1 while in the LRU */
    struct smol_grammar_entry *prev, *next;
};

struct smol_grammar_cache {
    pthread_mutex_t mu;
    struct smol_grammar_vocab *vocab;
    int capacity, n;
    struct smol_grammar_entry *head, *tail;   /* most recently used first */
    struct smol_grammar_cache_stats stats;
};

static pthread_mutex_t orphan_mu = PTHREAD_MUTEX_INITIALIZER;  /* entries outliving their cache */

static uint64_t fnv1a(enum smol_constraint_kind kind, const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)kind;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

static void entry_destroy(struct smol_grammar_entry *e)
{
    smol_grammar_index_free(&e->ix);
    smol_grammar_free(&e->g);
    free(e->text);
    free(e);
}

static void unlink_entry(struct smol_grammar_cache *c, struct smol_grammar_entry *e)
{
    if (e->prev) e->prev->next = e->next; else c->head = e->next;
    if (e->next) e->next->prev = e->prev; else c->tail = e->prev;
    e->prev = e->next = NULL;
    c->n--;
}

static void push_front(struct smol_grammar_cache *c, struct smol_grammar_entry *e)
{
    e->prev = NULL;
    e->next = c->head;
    if (c->head) c->head->prev = e; else c->tail = e;
    c->head = e;
    c->n++;
}

enum smol_err smol_grammar_cache_new(struct smol_grammar_cache **out, const struct smol_tokenizer *tok,
                                     int capacity, char *err)
{
    *out = NULL;
    struct smol_grammar_cache *c = calloc(1, sizeof *c);
    if (!c) return smol_errf(err, SMOL_ENOMEM, "out of memory");
    enum smol_err e = smol_grammar_vocab_new(&c->vocab, tok, err);
    if (e) { free(c); return e; }
    pthread_mutex_init(&c->mu, NULL);
    c->capacity = capacity > 0 ? capacity : 16;
    *out = c;
    return SMOL_OK;
}

void smol_grammar_cache_free(struct smol_grammar_cache **cp)
{
    if (!cp || !*cp) return;
    struct smol_grammar_cache *c = *cp;
    pthread_mutex_lock(&orphan_mu);
    pthread_mutex_lock(&c->mu);
    while (c->head) {
        struct smol_grammar_entry *e = c->head;
        unlink_entry(c, e);
        e->c = NULL;
        if (--e->refs == 0) entry_destroy(e);
    }
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&orphan_mu);
    smol_grammar_vocab_free(&c->vocab);
    pthread_mutex_destroy(&c->mu);
    free(c);
    *cp = NULL;
}

static const char *kind_name(enum smol_constraint_kind k)
{
    switch (k) {
    case SMOL_CONSTRAINT_JSON_SCHEMA: return "json_schema";
    case SMOL_CONSTRAINT_GBNF: return "gbnf";
    case SMOL_CONSTRAINT_REGEX: return "regex";
    case SMOL_CONSTRAINT_JSON_OBJECT: return "json_object";
    default: return "constraint";
    }
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

enum smol_err smol_grammar_cache_get(struct smol_grammar_cache *c, enum smol_constraint_kind kind,
                                     const char *text, size_t len, struct smol_grammar_entry **out, char *err)
{
    *out = NULL;
    if (kind == SMOL_CONSTRAINT_JSON_OBJECT) { text = ""; len = 0; }
    if (kind <= SMOL_CONSTRAINT_NONE || kind > SMOL_CONSTRAINT_JSON_OBJECT)
        return smol_errf(err, SMOL_EINVAL, "unknown constraint kind %d", (int)kind);
    uint64_t h = fnv1a(kind, text, len);
    pthread_mutex_lock(&c->mu);
    for (struct smol_grammar_entry *e = c->head; e; e = e->next)
        if (e->hash == h && e->kind == kind && e->len == len && !memcmp(e->text, text, len)) {
            unlink_entry(c, e);
            push_front(c, e);
            e->refs++;
            c->stats.hits++;
            pthread_mutex_unlock(&c->mu);
            *out = e;
            return SMOL_OK;
        }
    double t0 = now_ms();
    char e2[SMOL_ERRLEN];
    enum smol_err rc = SMOL_OK;
    struct smol_grammar_entry *e = calloc(1, sizeof *e);
    if (!e || !(e->text = malloc(len + 1))) { rc = smol_errf(err, SMOL_ENOMEM, "out of memory"); goto fail; }
    memcpy(e->text, text, len);
    e->text[len] = 0;
    e->len = len;
    e->kind = kind;
    e->hash = h;
    struct smol_grammar_opts opts = {0};
    switch (kind) {
    case SMOL_CONSTRAINT_JSON_SCHEMA: rc = smol_grammar_compile_json_schema(text, len, &opts, &e->g, e2); break;
    case SMOL_CONSTRAINT_GBNF: rc = smol_grammar_compile_gbnf(text, len, &opts, &e->g, e2); break;
    case SMOL_CONSTRAINT_REGEX: rc = smol_grammar_compile_regex(text, len, &opts, &e->g, e2); break;
    default: rc = smol_grammar_compile_json_any(1, &opts, &e->g, e2); break;
    }
    if (!rc) rc = smol_grammar_index_new(&e->ix, e->g, c->vocab, 0, e2);
    if (rc) { smol_errf(err, rc, "%s: %s", kind_name(kind), e2); goto fail; }
    c->stats.compiles++;
    c->stats.compile_ms += now_ms() - t0;
    e->c = c;
    e->refs = 2;                    /* the LRU's and the caller's */
    push_front(c, e);
    while (c->n > c->capacity) {
        struct smol_grammar_entry *old = c->tail;
        unlink_entry(c, old);
        old->c = NULL;
        if (--old->refs == 0) entry_destroy(old);
    }
    pthread_mutex_unlock(&c->mu);
    *out = e;
    return SMOL_OK;
fail:
    pthread_mutex_unlock(&c->mu);
    if (e) entry_destroy(e);
    return rc;
}

void smol_grammar_entry_release(struct smol_grammar_entry **ep)
{
    if (!ep || !*ep) return;
    struct smol_grammar_entry *e = *ep;
    *ep = NULL;
    pthread_mutex_lock(&orphan_mu);
    struct smol_grammar_cache *c = e->c;
    if (c) pthread_mutex_lock(&c->mu);
    int last = --e->refs == 0;
    if (c) pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&orphan_mu);
    if (last) entry_destroy(e);
}

const struct smol_grammar *smol_grammar_entry_grammar(const struct smol_grammar_entry *e) { return e->g; }
const struct smol_grammar_index *smol_grammar_entry_index(const struct smol_grammar_entry *e) { return e->ix; }

void smol_grammar_cache_stats(struct smol_grammar_cache *c, struct smol_grammar_cache_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    pthread_mutex_unlock(&c->mu);
}
