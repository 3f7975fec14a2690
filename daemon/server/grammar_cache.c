/*
 * grammar_cache.c - the LRU of compiled grammars and the index worker (see
 * grammar_cache.h).  A mutex guards the list and the job queue; nothing
 * slow runs under it: the grammar is compiled before it is taken, the index
 * by the worker without it.  Reference counts are atomic, so an entry
 * outlives the cache while a request holds it.  A queued or running job
 * holds a reference to its entry.
 */
#include "daemon/server/grammar_cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "daemon/text/text.h"

enum { ENTRY_PENDING, ENTRY_READY, ENTRY_FAILED };

struct smol_grammar_entry {
    enum smol_constraint_kind kind;
    uint64_t hash;
    char *text;
    size_t len;
    struct smol_grammar *g;
    struct smol_grammar_index *ix;  /* written by the worker before state leaves PENDING */
    atomic_int state;               /* ENTRY_* */
    enum smol_err code;             /* ENTRY_FAILED: why, and msg */
    char msg[SMOL_ERRLEN];
    double t0;                      /* when its compile began (ms) */
    atomic_int refs;                /* requests + 1 while in the LRU + 1 while a job */
    int in_lru;                     /* (c->mu) */
    struct smol_grammar_entry *prev, *next;
    struct smol_grammar_entry *job_next;
};

struct smol_grammar_cache {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct smol_grammar_vocab *vocab;
    int capacity, n;
    struct smol_grammar_entry *head, *tail;   /* most recently used first */
    struct smol_grammar_entry *jobs, *jobs_tail;
    atomic_int stop;                /* the worker exits; an index being built is abandoned */
    pthread_t worker;
    int worker_started;
    int efd;                        /* eventfd: some build finished */
    struct smol_grammar_cache_stats stats;
};

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
    e->in_lru = 0;
    c->n--;
}

static void push_front(struct smol_grammar_cache *c, struct smol_grammar_entry *e)
{
    e->prev = NULL;
    e->next = c->head;
    if (c->head) c->head->prev = e; else c->tail = e;
    c->head = e;
    e->in_lru = 1;
    c->n++;
}

static void notify(struct smol_grammar_cache *c)
{
    uint64_t one = 1;
    ssize_t w = write(c->efd, &one, sizeof one);  /* the counter saturating is still "readable" */
    (void)w;
}

static void unref(struct smol_grammar_entry *e)
{
    if (atomic_fetch_sub(&e->refs, 1) == 1) entry_destroy(e);
}

static void *worker_main(void *arg)
{
    struct smol_grammar_cache *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->jobs && !atomic_load(&c->stop)) pthread_cond_wait(&c->cv, &c->mu);
        if (atomic_load(&c->stop)) break;
        struct smol_grammar_entry *e = c->jobs;
        c->jobs = e->job_next;
        if (!c->jobs) c->jobs_tail = NULL;
        if (e->in_lru && atomic_load(&e->refs) == 2) {
            /* no request waits for it any more (cancelled while queued): not built, not cached */
            e->code = SMOL_ECANCELLED;
            snprintf(e->msg, sizeof e->msg, "no request is waiting for this grammar");
            atomic_store(&e->state, ENTRY_FAILED);
            unlink_entry(c, e);
            unref(e);
            unref(e);
            continue;
        }
        pthread_mutex_unlock(&c->mu);
        char e2[SMOL_ERRLEN] = "";
        enum smol_err rc = smol_grammar_index_build(&e->ix, e->g, c->vocab, 0, &c->stop, e2);
        pthread_mutex_lock(&c->mu);
        if (rc) {
            e->code = rc == SMOL_ECANCELLED ? SMOL_ESHUTDOWN : rc;
            snprintf(e->msg, sizeof e->msg, "%s", rc == SMOL_ECANCELLED ? "the daemon is shutting down" : e2);
            if (e->in_lru) { unlink_entry(c, e); unref(e); }  /* a failure is not cached */
            atomic_store(&e->state, ENTRY_FAILED);
        } else {
            c->stats.compiles++;
            c->stats.compile_ms += smol_mono_ms() - e->t0;
            atomic_store(&e->state, ENTRY_READY);
        }
        unref(e);    /* the job's */
        notify(c);
    }
    /* stopping: the jobs never started fail */
    while (c->jobs) {
        struct smol_grammar_entry *e = c->jobs;
        c->jobs = e->job_next;
        e->code = SMOL_ESHUTDOWN;
        snprintf(e->msg, sizeof e->msg, "the daemon is shutting down");
        atomic_store(&e->state, ENTRY_FAILED);
        unref(e);
    }
    c->jobs_tail = NULL;
    pthread_mutex_unlock(&c->mu);
    notify(c);
    return NULL;
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
    pthread_cond_init(&c->cv, NULL);
    c->capacity = capacity > 0 ? capacity : 16;
    c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->efd < 0 || pthread_create(&c->worker, NULL, worker_main, c)) {
        c->worker_started = 0;
        smol_grammar_cache_free(&c);
        return smol_errf(err, SMOL_ENOMEM, "grammar cache: cannot start its worker thread");
    }
    c->worker_started = 1;
    *out = c;
    return SMOL_OK;
}

void smol_grammar_cache_free(struct smol_grammar_cache **cp)
{
    if (!cp || !*cp) return;
    struct smol_grammar_cache *c = *cp;
    if (c->worker_started) {
        pthread_mutex_lock(&c->mu);
        atomic_store(&c->stop, 1);
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->worker, NULL);
    }
    pthread_mutex_lock(&c->mu);
    while (c->head) {
        struct smol_grammar_entry *e = c->head;
        unlink_entry(c, e);
        unref(e);
    }
    pthread_mutex_unlock(&c->mu);
    smol_grammar_vocab_free(&c->vocab);
    if (c->efd >= 0) close(c->efd);
    pthread_cond_destroy(&c->cv);
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
    case SMOL_CONSTRAINT_TOOL_CALLS: return "tool_choice";
    default: return "constraint";
    }
}

enum smol_err smol_grammar_cache_get(struct smol_grammar_cache *c, enum smol_constraint_kind kind,
                                     const char *text, size_t len, struct smol_grammar_entry **out, char *err)
{
    *out = NULL;
    if (kind == SMOL_CONSTRAINT_JSON_OBJECT) { text = ""; len = 0; }
    if (kind <= SMOL_CONSTRAINT_NONE || kind > SMOL_CONSTRAINT_TOOL_CALLS)
        return smol_errf(err, SMOL_EINVAL, "unknown constraint kind %d", (int)kind);
    if (kind == SMOL_CONSTRAINT_TOOL_CALLS && !smol_grammar_vocab_has_tool_tags(c->vocab))
        return smol_errf(err, SMOL_EUNSUPPORTED, "tool_choice: this model's vocabulary has no <tool_call> and "
                         "</tool_call> tokens (SmolLM3-3B has them: `make model`, or MODEL=path to a SmolLM3 GGUF)");
    uint64_t h = fnv1a(kind, text, len);
    pthread_mutex_lock(&c->mu);
    struct smol_grammar_entry *e = NULL;
    for (e = c->head; e; e = e->next)
        if (e->hash == h && e->kind == kind && e->len == len && !memcmp(e->text, text, len)) break;
    if (e) {
        unlink_entry(c, e);
        push_front(c, e);
        atomic_fetch_add(&e->refs, 1);
        c->stats.hits++;
        pthread_mutex_unlock(&c->mu);
        *out = e;
        return SMOL_OK;
    }
    pthread_mutex_unlock(&c->mu);
    /* the grammar now, outside the lock (only this thread adds entries) */
    double t0 = smol_mono_ms();
    char e2[SMOL_ERRLEN];
    enum smol_err rc = SMOL_OK;
    e = calloc(1, sizeof *e);
    if (!e || !(e->text = malloc(len + 1))) {
        free(e);
        return smol_errf(err, SMOL_ENOMEM, "out of memory");
    }
    memcpy(e->text, text, len);
    e->text[len] = 0;
    e->len = len;
    e->kind = kind;
    e->hash = h;
    e->t0 = t0;
    atomic_init(&e->state, ENTRY_PENDING);
    struct smol_grammar_opts opts = {0};
    switch (kind) {
    case SMOL_CONSTRAINT_JSON_SCHEMA: rc = smol_grammar_compile_json_schema(text, len, &opts, &e->g, e2); break;
    case SMOL_CONSTRAINT_GBNF: rc = smol_grammar_compile_gbnf(text, len, &opts, &e->g, e2); break;
    case SMOL_CONSTRAINT_REGEX: rc = smol_grammar_compile_regex(text, len, &opts, &e->g, e2); break;
    case SMOL_CONSTRAINT_TOOL_CALLS: {
        const char *nl = memchr(text, '\n', len);
        char choice[80];
        if (!nl || nl - text >= (ptrdiff_t)sizeof choice) { rc = smol_errf(e2, SMOL_EINVAL, "malformed tool constraint"); break; }
        memcpy(choice, text, (size_t)(nl - text));
        choice[nl - text] = 0;
        rc = smol_grammar_compile_tool_calls(nl + 1, len - (size_t)(nl + 1 - text), choice, &opts, &e->g, e2);
        break;
    }
    default: rc = smol_grammar_compile_json_any(1, &opts, &e->g, e2); break;
    }
    if (rc) {
        entry_destroy(e);
        return smol_errf(err, rc, "%s: %s", kind_name(kind), e2);
    }
    atomic_init(&e->refs, 3);       /* the LRU's, the job's and the caller's */
    pthread_mutex_lock(&c->mu);
    push_front(c, e);
    while (c->n > c->capacity) {
        struct smol_grammar_entry *old = c->tail;
        unlink_entry(c, old);
        unref(old);
    }
    if (c->jobs_tail) c->jobs_tail->job_next = e; else c->jobs = e;
    c->jobs_tail = e;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    *out = e;
    return SMOL_OK;
}

int smol_grammar_entry_done(struct smol_grammar_entry *e, enum smol_err *code, char *err)
{
    int st = atomic_load(&e->state);    /* acquire: ix and msg were written before */
    if (st == ENTRY_PENDING) return 0;
    *code = st == ENTRY_READY ? SMOL_OK : e->code;
    if (err) snprintf(err, SMOL_ERRLEN, "%s: %.200s", kind_name(e->kind), st == ENTRY_READY ? "ready" : e->msg);
    return 1;
}

int smol_grammar_cache_fd(const struct smol_grammar_cache *c) { return c->efd; }

void smol_grammar_cache_ack(struct smol_grammar_cache *c)
{
    uint64_t n;
    ssize_t r = read(c->efd, &n, sizeof n);
    (void)r;
}

void smol_grammar_entry_release(struct smol_grammar_entry **ep)
{
    if (!ep || !*ep) return;
    unref(*ep);
    *ep = NULL;
}

const struct smol_grammar *smol_grammar_entry_grammar(const struct smol_grammar_entry *e) { return e->g; }
const struct smol_grammar_index *smol_grammar_entry_index(const struct smol_grammar_entry *e) { return e->ix; }

void smol_grammar_cache_stats(struct smol_grammar_cache *c, struct smol_grammar_cache_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    pthread_mutex_unlock(&c->mu);
}
