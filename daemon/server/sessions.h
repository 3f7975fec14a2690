/*
 * sessions.h - the engine's store of KV sequences that outlive a request:
 * named chat sessions and anonymous cached prefixes, on one LRU list.
 *
 * A session keeps the token history that produced its KV (prompt tokens
 * plus what the model generated, reasoning included, plus the "\n" the
 * template puts after <|im_end|>), the rendered text of the conversation
 * as a client will send it back (for continuing a turn without
 * re-tokenizing reasoning the client dropped), and the date frozen at its
 * creation.  Owned by the engine thread only.
 *
 * Tenancy: every entry belongs to a tenant (request.h, proto
 * GenerateRequest.tenant).  A session is found by (tenant, id): another
 * tenant's session of the same id is not there, exactly as one that never
 * existed.  A cached prefix serves only requests of its own tenant.  The
 * spill files are keyed the same way (smol_spill_key).
 *
 * The spill directory (spill.h) lies below: sessions go there and come
 * back through the functions here, which hand the spill plain records; the
 * engine never calls the spill itself.
 */
#ifndef SMOL_SESSIONS_H
#define SMOL_SESSIONS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include "daemon/server/request.h"
#include "daemon/server/spill.h"
#include "daemon/model/model.h"

struct smol_session {
    char tenant[SMOL_RULE_TENANT_MAX + 1];  /* whose it is ("" = the default tenant) */
    char id[SMOL_SESSION_ID_MAX + 1];   /* "" for an anonymous cached prefix */
    struct smol_kv_seq seq;             /* KV of tokens[0, seq.n_tokens) */
    int32_t *tokens;                    /* [n_tokens] history (may run 1 past the KV) */
    int n_tokens, cap;
    char *hist_text;                    /* rendered conversation so far, or NULL */
    size_t hist_len;
    char date[32];                      /* frozen "DD Month YYYY" */
    json_t *msgs;                       /* the conversation as chat messages (JSON array), or NULL */
    int think_set, enable_thinking;     /* mode of the last turn */
    double last_used;                   /* CLOCK_MONOTONIC seconds */
    int busy;                           /* a request runs on it */
    int on_disk;                        /* the spill directory holds this exact history and KV */
    int restored_kv;                    /* KV tokens just read back from disk, not yet reported */
    int leased;                         /* holds a reference to its lease (a shared spill directory) */
    int save_failures;                  /* saves refused in a row (the spill's queue full, no memory...) */
    double retry_at;                    /* smol_mono_s(): no save before (their backoff) */
    uint64_t stamp;                     /* new whenever the history may have changed (tokens, text,
                                           messages), unique in the process: a prompt built on this
                                           session is still right while the stamp is the same */
    struct smol_session *prev, *next;   /* LRU: head = most recent */
};

/* A cached prefix goes to the spill directory (on eviction and at the
 * drain) only when its KV holds at least this many tokens: a shorter one is
 * cheaper to recompute than a file is to keep. */
#define SMOL_PREFIX_SPILL_MIN 64

struct smol_sessions {
    struct smol_session *head, *tail;
    int n_named, n_anon;
    struct smol_kv *kv;
    struct smol_spill *spill;           /* borrowed; NULL = sessions live in memory only */
    int vocab;                          /* bounds token ids read back from disk */
    uint64_t n_evicted;                 /* named sessions taken out of memory by eviction (any cause) */
    uint64_t n_evicted_tenant_cap;      /* of those, by their tenant's max_per_tenant */
    int n_leased;                       /* sessions holding a lease reference */
    uint64_t n_stale_dropped;           /* copies in memory dropped: another node wrote the session since */
    double retry_first_s;               /* a refused save's first backoff (0: 1 s), doubling, at most 60 s */
};

void smol_sessions_init(struct smol_sessions *s, struct smol_kv *kv);
void smol_sessions_deinit(struct smol_sessions *s);

/* tenant's session id, or NULL. */
struct smol_session *smol_sessions_find(struct smol_sessions *s, const char *tenant, const char *id);
/* New empty session of tenant (id "" = anonymous), most recently used; NULL on OOM. */
struct smol_session *smol_sessions_add(struct smol_sessions *s, const char *tenant, const char *id);
/* Named sessions of tenant in memory. */
int smol_sessions_count(const struct smol_sessions *s, const char *tenant);
/* Room for one more named session of tenant: at max_per_tenant (> 0) of
 * its own, tenant's least recently used idle session is evicted
 * (n_evicted_tenant_cap); at max_named in all, the least recently used
 * idle session of the tenant holding the most.  0, or -1 when no idle
 * session could make room. */
int smol_sessions_make_room(struct smol_sessions *s, const char *tenant, int max_named, int max_per_tenant);
void smol_sessions_remove(struct smol_sessions *s, struct smol_session *x);
/* A deleted session whose request still runs: it becomes anonymous (its
 * lease given back, under its name), and goes when that request ends. */
void smol_sessions_orphan(struct smol_sessions *s, struct smol_session *x);
void smol_sessions_touch(struct smol_sessions *s, struct smol_session *x, double now);
/* Takes x out of memory; a named session whose history is not on disk yet,
 * or a cached prefix of SMOL_PREFIX_SPILL_MIN tokens or more, is written to
 * the spill directory first (when there is one). */
void smol_sessions_evict(struct smol_sessions *s, struct smol_session *x);
/* Writes one changed idle named session (with_prefixes: or cached prefix,
 * as smol_sessions_evict would) to the spill directory; 1 if one was
 * written (or failed), 0 when there is none, or (not with_prefixes, a
 * shared directory) when its lease is being asked on the spill's lease
 * thread (written on a later call).  with_prefixes (the drain) queues a
 * session not leased with a job that takes its lease on the spill's
 * writer thread (smol_spill_save_unleased), as an eviction does. */
int smol_sessions_spill_one(struct smol_sessions *s, int with_prefixes);
/* tenant's session `id` read back from the spill directory as a new
 * session, most recently used, its KV in the pool (idle entries evicted to
 * make room; a named one first, smol_sessions_make_room).  NULL when there
 * is no usable file, or no room, or (*reading set to 1; reading may be
 * NULL) when the file is not read ahead yet: its read is asked on the
 * spill's thread (the file is never read on the caller's), and this is
 * called again once smol_sessions_prefetch says 1. */
struct smol_session *smol_sessions_restore(struct smol_sessions *s, const char *tenant, const char *id,
                                           int max_named, int max_per_tenant, double now, int *reading);
/* The same for tenant's cached prefix of key `key` (smol_spill_best_prefix
 * for that tenant): a new anonymous entry. */
struct smol_session *smol_sessions_restore_prefix(struct smol_sessions *s, const char *tenant, const char *key,
                                                  double now, int *reading);
/* Has the file of tenant's session id read ahead on the spill's thread: 1
 * when it can be restored now (read, or no file, or no spill directory), 0
 * while the read runs (smol_spill_prefetch). */
int smol_sessions_prefetch(struct smol_sessions *s, const char *tenant, const char *id);
/* A cached prefix of tenant on disk that covers a page or more of ids[0, n) beyond
 * the have tokens a cache entry in memory does (the last token counts in
 * neither: it is always computed) is read back as a new anonymous entry,
 * its file first read ahead on the spill's thread: 0 while that read runs
 * (call again), 1 when done or when there is none. */
int smol_sessions_read_prefix(struct smol_sessions *s, const char *tenant, const int32_t *ids, int n, int have,
                              double now);
/* 1 when the spill directory holds a file for tenant's session id. */
int smol_sessions_has_file(const struct smol_sessions *s, const char *tenant, const char *id);
/* Removes the file of tenant's session id, if any. */
void smol_sessions_remove_file(struct smol_sessions *s, const char *tenant, const char *id);
/* A shared spill directory: smol_spill_remove_report / smol_spill_removal_done
 * (whether the file was there, found on the spill's writer thread). */
uint64_t smol_sessions_remove_file_report(struct smol_sessions *s, const char *tenant, const char *id);
int smol_sessions_removal_done(struct smol_sessions *s, uint64_t ticket);
/* Has the spill sweep its directory: files nobody used for ttl_s go (spill.h, smol_spill_sweep). */
void smol_sessions_sweep_files(struct smol_sessions *s, double ttl_s);
/* A shared spill directory (spill.h): a node holds a session's lease from
 * the admission of a turn until that turn has ended and its history is
 * queued for the disk (written through; the write holds the lease until it
 * is on disk).  1 when the spill directory is shared. */
int smol_sessions_shared(const struct smol_sessions *s);
/* Takes a reference to the lease of tenant's session id (smol_spill_lease:
 * SMOL_LEASE_*); on SMOL_LEASE_CHANGED the stale copy in memory, if any, is
 * dropped (n_stale_dropped): the file is the session now. */
int smol_sessions_lease(struct smol_sessions *s, const char *tenant, const char *id);
/* The same asked on the spill's lease thread (spill.h, smol_spill_lease_async):
 * SMOL_LEASE_PENDING until its answer is in; ask again. */
int smol_sessions_lease_async(struct smol_sessions *s, const char *tenant, const char *id);
/* Gives back a reference smol_sessions_lease took and no session took over. */
void smol_sessions_unlease(struct smol_sessions *s, const char *tenant, const char *id);
/* x takes over the reference the turn's smol_sessions_lease took (x holds one at most). */
void smol_sessions_attach_lease(struct smol_sessions *s, struct smol_session *x);
/* Every leased session no request runs on is written through (when its
 * history changed) and gives its lease back; how many did. */
int smol_sessions_settle(struct smol_sessions *s);
/* The spill directory's counters into *st: 1, or 0 when there is none (st untouched). */
int smol_sessions_disk_stats(struct smol_sessions *s, struct smol_spill_stats *st);
/* Evicts the least recently used idle entry (anonymous ones first when
 * prefer_anon); 1 if one was evicted. */
int smol_sessions_evict_one(struct smol_sessions *s, int prefer_anon);
/* Evicts idle sessions unused for more than ttl seconds; returns how many. */
int smol_sessions_expire(struct smol_sessions *s, double now, double ttl);
/* tenant's idle entry whose KV shares the longest prefix with ids[0, n):
 * its length in *lcp (<= its KV length).  NULL if none shares a token. */
struct smol_session *smol_sessions_best_prefix(struct smol_sessions *s, const char *tenant, const int32_t *ids, int n,
                                               int *lcp);
/* x's history changed: a new stamp.  The setters below call it. */
void smol_session_changed(struct smol_session *x);
/* Replaces the history with ids[0, n); 0 or -1 on OOM. */
int smol_session_set_tokens(struct smol_session *x, const int32_t *ids, int n);
int smol_session_set_text(struct smol_session *x, const char *text, size_t len);

/* Records the conversation after a chat turn on x as a client will send it
 * back: the request's messages plus the answer's content (reasoning is not
 * sent back) and its tool calls (an OpenAI tool_calls array, or NULL), as
 * text rendered with tpl and x's date (x's text is left as it was when the
 * render fails) and as JSON messages, for clients that send only the new
 * turn.  0, or -1 when it could not be recorded whole (out of memory). */
int smol_session_record_turn(struct smol_session *x, enum smol_chat_tpl tpl, const struct smol_request *r,
                             const char *content, size_t content_len, json_t *tool_calls);
/* Forgets x's history (tokens, KV, text, messages) after one could not be
 * recorded whole: its next turn is computed from what the client sends,
 * never matched against a record that disagrees with the KV or the text
 * (test_fault alloc N=1007: the "\n" after <|im_end|> missing from the
 * tokens, the next turn's prompt silently different). */
void smol_sessions_forget(struct smol_sessions *s, struct smol_session *x);

#endif
