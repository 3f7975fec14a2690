/*
 * spill.h - sessions on disk: a session's token history, conversation text
 * and KV pages written to a directory (kv_spill_dir) so that a later turn,
 * in this process or the next one, reads them back instead of recomputing.
 *
 * One file per session, named by a hash of the session's key (the key
 * itself is stored inside and compared on load):  <32 hex digits>.kv
 * The key is the session id within its tenant (smol_spill_key):
 * "tenant/id", or the id alone for the default tenant "" ('/' is in
 * neither alphabet, rules.h), so one tenant never reads another's file.
 *
 * Cached prefixes (the KV of requests without a session, which later ones
 * of the same tenant reuse by longest common prefix) are written the same
 * way, flagged SMOL_SPILL_F_PREFIX, under the id "#prefix-" + XXH3-128 of
 * their KV tokens ('#' is outside the session-id alphabet, so the two never
 * meet), keyed by their tenant as a session is.  The index keeps each
 * prefix file's key and KV tokens (read at open, checked again with the
 * payload checksum when the file is loaded), so that a request can find its
 * tenant's longest prefix on disk without opening a file.  A prefix that is
 * a leading part of one of its tenant's already on disk is not written;
 * writing one removes the files of its tenant it extends.
 *
 * Format (little-endian), version SMOL_SPILL_VERSION: a log of records, each
 *     header    struct smol_spill_header (176 bytes), its own XXH3-64 last
 *     payload   key[id_len] | tokens int32[tok_from, n_tokens) |
 *               hist[hist_from, hist_len) | msgs (JSON array: the messages
 *               after the first msgs_from) | KV pages [page_from,
 *               pages_for(n_kv)), each [layer][K, V][page_bytes] as the pool
 *               stores them
 * A record says what the session is after it: it keeps the first tok_from
 * tokens, page_from KV pages, hist_from bytes of text and msgs_from messages
 * of the state before it and adds the rest.  The first record of a file is
 * a base (SMOL_SPILL_F_BASE: every *_from 0); a turn appends one record with
 * what it added (its new tokens and their KV pages, the partial last page
 * again, the new text and messages), so a turn's write costs what it added.
 * Records carry the file's id (random, set by its base) and a sequence
 * number (+1 each); a reader applies them in order and stops at the first
 * that is incomplete, fails its checksums or does not follow: a torn
 * append (a crash mid-write) leaves the last complete turn, which the next
 * append overwrites.  When the bytes no longer live (text, messages and
 * pages a later record replaced, headers) would pass half the file, or a
 * record would hold more than half of the session (a history that shares
 * little with the file's), the write is a new base instead (compaction: a
 * temporary file renamed over the old).
 * Version 1 files (one record of 136 bytes' header, no *_from fields) are
 * still read; the next write of such a session is a base.
 * The header names the model (XXH3-128 of the GGUF header and tensor table,
 * plus the RoPE settings and q8_0 rotation, which shape K), the KV type and
 * geometry, and carries the payload's size and XXH3-64.  A file is trusted
 * only when all of these match in its first record and the checksum of
 * everything read is right; anything else (random bytes, a truncated or
 * foreign-model file, another version) is logged, counted, removed and the
 * session is recomputed.
 *
 * A base is written atomically: a temporary file in the directory, fsync,
 * rename over the final name, fsync of the directory.  An append is
 * written in place at the end of the last complete record (then the file
 * is cut there, fsync): until it is complete, readers see the turn
 * before.  A disk budget is kept least
 * recently used first (file mtime survives restarts; a read touches it).
 *
 * The spill reads and writes records (struct smol_spill_record), plain
 * fields with no sessions type: sessions.c fills one from a session to save
 * it and makes a session of one read back, and is the only module that
 * calls the spill on the engine's behalf (sessions.h -> spill.h, never the
 * reverse).
 *
 * Threads: the API belongs to the engine thread (not thread-safe).  In a
 * shared directory a turn's lease is asked on a lease thread of the spill's
 * own (smol_spill_lease_async: the lock, the generation and a stat of the
 * file, no mutex held over them), so a slow file server does not stall the
 * engine thread there; a removal's (expiry, the budget, a DELETE) and
 * that of a write queued without one (smol_spill_save_unleased: an
 * eviction's) are taken on the writer thread; smol_spill_lease locks on
 * the caller's thread (tests, tools).  Writing
 * and removing files run on a writer thread of the spill's own:
 * smol_spill_save copies the turn's record (the KV pages the turn added
 * out of the pool, or all of them for a base) into an image in memory and
 * queues it; the writer checksums it and writes it as above.  Jobs run in
 * queue order, so operations on one file never pass each other (an append
 * waits behind a failed write of its file).  The index (has, stats, the
 * budget, what each file's records add up to) describes the directory as
 * it will be once the queue is done; smol_spill_load of a session whose
 * writes are still queued reads the file, then their images; the file is
 * read ahead by smol_spill_prefetch (on the writer thread), checked and
 * used from memory; it is never read on the caller's thread: a load that
 * finds no read-ahead asks for one and says SMOL_EBUSY (no pages needed),
 * to be called again once smol_spill_prefetch says 1.  A write that fails is
 * logged and leaves the previous file as it was (an I/O error at any step:
 * open, write, fsync, rename, the directory's fsync); the job keeps its
 * image (and its lease) and is tried again after a backoff (0.1 s,
 * doubling, at most 30 s: smol_spill_set_retry) until it succeeds or a
 * newer base or removal of its name supersedes it; smol_spill_close tries each once
 * more, then gives up (logged).  smol_spill_close finishes the queue first.
 * At most 1 GiB of images wait; a save beyond that waits for the writer,
 * and is refused (SMOL_EBUSY) when what fills the queue is failed writes.
 *
 * A shared directory (smol_spill_open_shared; kv_spill_shared): several
 * nodes (daemons on other machines, over NFS, CephFS...) use one directory.
 * One writer per session: a node writes or removes a session's file only
 * while it holds the session's lease, an OFD write lock (fcntl F_OFD_SETLK)
 * on <32 hex digits>.lock beside it, taken without waiting (another node
 * holding it: SMOL_LEASE_ELSEWHERE, the caller waits and asks again).  The
 * lock file holds the file's generation, advanced by every write and
 * removal under the lease; a lease taken while this node's idea of the
 * generation is old says SMOL_LEASE_CHANGED: another node wrote (or
 * removed) the session since, and the copy in memory is stale.  The writer
 * checks again, just before it renames or unlinks, that no other node
 * holds the lock and the generation is the one it knows; otherwise the
 * lease was lost (the filesystem broke the lock: a partition, an expired
 * NFS lease) and the write is dropped, counted (lease_lost), the file left
 * as the other node made it.
 * Fencing (a node whose lock is broken after that check, before its bytes
 * land): appends, whole files and removals are fenced.  A node appends
 * only to a file it made (a base of its own, its file id in every record)
 * and checks that id through the descriptor it writes with; a node that
 * takes a session over (CHANGED, or a file it read but did not make)
 * writes it whole: a new file, renamed over the name.  So a late append of
 * the node that lost the lock lands in its own file, which is either
 * still the current one (the new holder has not written yet: its turn
 * then replaces it) or already replaced (the append goes to the unlinked
 * file, or finds another file id and is dropped): the new holder's turn
 * never disappears (test_spill t_shared_fence).  An append does not
 * require the generation it knew (a late node may advance it): it writes
 * one past both.  A whole file (a base: a session's first write, a
 * compaction, a takeover) is written under one temporary name per
 * session, .tmp-<hash>, made with O_EXCL; a writer that finds one there
 * (a late writer's, or a crashed one's: only the lease holder writes it)
 * removes it and makes its own.  So a late rename finds no file (and the
 * late write, retried, is dropped: lease lost), or, if it fires while the
 * new holder's own temporary file is being written, publishes that one,
 * whose own rename then fails and is retried (the new holder's turn is
 * late, never lost while it runs).  A removal under the lease renames the
 * file aside to a name of this node's (.tmp-rm-<hash>-<node>), then reads
 * its first record's generation: a file written after the removal's check
 * (by a node that took the lease over) has a later one than the removal
 * advanced to, and is linked back under its name (unless a newer file is
 * there: linkat never replaces) and kept (lease_lost); else the file
 * aside is removed (test_spill t_shared_fence_remove).  The cost of a late
 * removal is at most that node's append meanwhile (its file is aside: the
 * append finds no file, and the next write is whole).
 * A save of a session whose lease this node
 * does not hold is refused (unleased_refused).  A lock file is removed
 * with its session's file, by the node holding its lock, while no other
 * reference of that node needs it; a node that locked a lock file checks
 * that it is still the file under that name (same inode) and, if it was
 * removed meanwhile, locks the new one: two nodes never hold two files of
 * one name.  A new lock file's generation is 0 again: a node that knew a
 * later one finds CHANGED and drops its copy (the session was removed).
 * A session file that is sound but of another model (or KV type or
 * geometry: a node running another model file) loads as its conversation
 * (text, messages, date, mode) without tokens or KV, which the next turn
 * computes again; it is not removed (history_restored).
 * The index is refreshed from the directory whenever a lease is taken;
 * files failing the checks at open are left alone (maybe another model's
 * node); temporary files are named by session (.tmp-<hash>, a session's
 * whole file, above) or by host, pid and spill (a cached prefix's), and
 * only one an hour
 * old by the file server's clock (a probe file's mtime) is removed.  The
 * budget removes the least recently used files, this node's own or, found
 * in the directory (at open, on a lease), anyone's that nobody used since
 * (their mtime, checked again under the lock).  smol_spill_sweep removes
 * files nobody used for a TTL.
 */
#ifndef SMOL_SPILL_H
#define SMOL_SPILL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include "daemon/model/model.h"
#include "daemon/model/rules.h"

#define SMOL_SPILL_VERSION 2u
#define SMOL_SPILL_MAGIC "SMOLKV\r\n"

/* One record's header (see Format above). */
struct smol_spill_header {
    char magic[8];              /* SMOL_SPILL_MAGIC */
    uint32_t version;           /* SMOL_SPILL_VERSION */
    uint32_t header_bytes;      /* sizeof (struct smol_spill_header) */
    uint8_t model_id[16];       /* smol_spill_model_id() */
    uint32_t kv_type, n_layers, n_kv_heads, head_dim, page_tokens;
    uint32_t id_len;            /* bytes of the key (no NUL) */
    uint32_t n_tokens;          /* history tokens, after this record */
    uint32_t n_kv;              /* of which with KV (<= n_tokens) */
    uint32_t hist_len;          /* conversation text bytes, after this record */
    uint32_t msgs_len;          /* bytes of this record's messages (JSON array; 0: none, F_MSGS unset) */
    uint32_t flags;             /* SMOL_SPILL_F_* */
    uint32_t reserved;          /* 0 */
    uint64_t payload_bytes;     /* bytes after the header */
    uint64_t payload_hash;      /* XXH3-64 of them */
    char date[32];              /* the session's frozen date, NUL-terminated */
    uint32_t tok_from;          /* tokens kept from the state before (0 in a base) */
    uint32_t page_from;         /* KV pages kept (page_from * SMOL_KV_PAGE <= tok_from) */
    uint32_t hist_from;         /* text bytes kept */
    uint32_t msgs_from;         /* messages kept */
    uint64_t seq;               /* the record's number in its file (the base's + 1 each) */
    uint64_t file_id;           /* set by the base, carried by every record of the file */
    uint64_t gen;               /* shared: the lease generation its writer advanced to (0: not shared) */
    uint64_t header_hash;       /* XXH3-64 of the bytes above */
};

#define SMOL_SPILL_F_THINK_SET 1u
#define SMOL_SPILL_F_THINKING 2u
#define SMOL_SPILL_F_HIST 4u       /* hist holds text (possibly empty) */
#define SMOL_SPILL_F_PREFIX 8u     /* a cached prefix, not a session (no text, messages or date) */
#define SMOL_SPILL_F_BASE 16u      /* the first record of a file (every *_from 0) */
#define SMOL_SPILL_F_MSGS 32u      /* the session has messages (msgs_from + this record's) */

#define SMOL_SPILL_PREFIX_ID "#prefix-" /* + 32 hex digits */
#define SMOL_SPILL_PREFIX_ID_LEN 40

/* The key of session (or cached prefix) id of tenant: "tenant/id", or id
 * for the default tenant "". */
#define SMOL_SPILL_KEY_MAX (SMOL_RULE_TENANT_MAX + 1 + SMOL_RULE_SESSION_ID_MAX)
void smol_spill_key(const char *tenant, const char *id, char out[SMOL_SPILL_KEY_MAX + 1]);

struct smol_spill_stats {
    uint64_t written, restored;                   /* session files */
    uint64_t prefixes_written, prefixes_restored; /* cached-prefix files */
    uint64_t tokens_restored, rejected;           /* both kinds */
    uint32_t files;
    uint64_t bytes;
    double restore_s, write_s;                    /* wall time of session restores, of writes */
    uint64_t lease_refused;                       /* shared: leases another node held */
    uint64_t lease_lost;                          /* shared: writes and removals dropped, lease lost */
    uint64_t unleased_refused;                    /* shared: saves refused, no lease */
    uint64_t history_restored;                    /* shared: sessions of another model read without KV */
    uint64_t write_errors;                        /* write attempts that failed (each is retried) */
    uint64_t bytes_written;                       /* bytes of the records written (bases and appends) */
    uint64_t appends, compactions;                /* writes that appended a turn; bases over a file */
    uint64_t torn_records;                        /* loads that stopped at an incomplete or bad tail */
};

/* What one file holds: a session's (or a cached prefix's) history.  To
 * save, every pointer is borrowed from the caller; a load fills it and the
 * caller takes what it points to (smol_spill_record_deinit frees it). */
struct smol_spill_record {
    char tenant[SMOL_RULE_TENANT_MAX + 1];  /* whose it is ("" = the default tenant) */
    char id[SMOL_RULE_SESSION_ID_MAX + 1];  /* the session's id; "" for a cached prefix */
    struct smol_kv_seq *seq;    /* KV of the first seq->n_tokens history tokens (always the caller's) */
    int32_t *tokens;            /* history [n_tokens] */
    int n_tokens;
    char *hist_text;            /* rendered conversation, NUL-terminated, or NULL: none */
    size_t hist_len;
    json_t *msgs;               /* the conversation as messages (JSON array), or NULL */
    char date[32];              /* frozen "DD Month YYYY" */
    int think_set, enable_thinking;  /* mode of the last turn */
};

/* Frees what a load put in rec (tokens, text, messages; not seq). */
void smol_spill_record_deinit(struct smol_spill_record *rec);

struct smol_spill;

/* The model's identity as far as its KV is concerned: XXH3-128 of the GGUF
 * bytes before the tensor data (header, metadata, tensor table), of the
 * RoPE parameters in use (YaRN changes K) and of the q8_0 cache's Hadamard
 * rotation (kv.h). */
void smol_spill_model_id(const struct smol_model *m, uint8_t out[16]);

/* Opens (creating it, mode 0700, if missing) the directory and indexes the
 * session files in it: temporary leftovers and files whose header is not
 * ours for this model are logged and removed.  budget_bytes 0 = no limit. */
enum smol_err smol_spill_open(struct smol_spill **out, const char *dir, uint64_t budget_bytes,
                              const struct smol_model *m, char *err);
/* The same for a directory shared by several nodes (shared = 1: see above). */
enum smol_err smol_spill_open_shared(struct smol_spill **out, const char *dir, uint64_t budget_bytes, int shared,
                                     const struct smol_model *m, char *err);
/* Accepts NULL; nulls the pointer. */
void smol_spill_close(struct smol_spill **sp);

/* 1 for a shared directory. */
int smol_spill_shared(const struct smol_spill *sp);

#define SMOL_LEASE_ERROR (-1)       /* the lock file could not be made or locked (logged) */
#define SMOL_LEASE_ELSEWHERE 0      /* another node holds it: ask again later */
#define SMOL_LEASE_HELD 1           /* held; the file is as this node last saw it */
#define SMOL_LEASE_CHANGED 2        /* held; another node wrote or removed the file since */
#define SMOL_LEASE_PENDING 3        /* smol_spill_lease_async: being asked on the lease thread */

/* Takes a reference to the lease of session key id (locking it when this
 * node does not hold it yet; never waits) and brings the index's entry of
 * it up to date.  Always SMOL_LEASE_HELD for a directory that is not
 * shared.  Each HELD or CHANGED is given back by smol_spill_unlease. */
int smol_spill_lease(struct smol_spill *sp, const char *id);
void smol_spill_unlease(struct smol_spill *sp, const char *id);
/* The same without a filesystem call on the caller's thread: a lease this
 * node holds is referenced at once (HELD); otherwise the spill's lease
 * thread asks for it (locks the lock file, reads the generation, stats the
 * session file) and this says SMOL_LEASE_PENDING until its answer is in,
 * which the next call returns (and takes: HELD or CHANGED, with the index
 * brought up to date as for smol_spill_lease; ELSEWHERE; ERROR).  A lock
 * taken for an answer nobody comes for within 2 s is let go. */
int smol_spill_lease_async(struct smol_spill *sp, const char *id);
/* 1 while this node holds the lease of key id (always, not shared). */
int smol_spill_holds(struct smol_spill *sp, const char *id);

/* Writes the record of an idle session with the KV of its first
 * rec->seq->n_tokens positions (queued: see Threads above); an empty one
 * removes its file.  An anonymous one (id "") is written as a cached prefix
 * (see above; an empty one, or one a prefix on disk already covers, is not
 * written).  Then trims the directory to the budget (the oldest files
 * first).  On error nothing is left behind. */
enum smol_err smol_spill_save(struct smol_spill *sp, const struct smol_kv *kv, const struct smol_spill_record *rec,
                              char *err);

/* A shared directory: smol_spill_save of a named session whose lease this
 * node does not hold (an eviction's or a drain's write, which cannot wait
 * for one), with no filesystem call on the caller's thread: the whole
 * record is queued (a base, never an append: this node's idea of the file
 * may be stale) with a job that takes the lease on the writer thread.
 * Held there, it is written as any other; another node's since (CHANGED:
 * this copy is stale), held elsewhere or not lockable, the job is dropped
 * (logged) and the file left as it is; so it is when a turn's lease of the
 * session finds it CHANGED before the job ran (neither written under that
 * lease nor read back by the turn).  An empty record removes the file
 * only if nobody wrote it since (smol_spill_expire).  Else (not shared, a
 * cached prefix, the lease held) smol_spill_save. */
enum smol_err smol_spill_save_unleased(struct smol_spill *sp, const struct smol_kv *kv,
                                       const struct smol_spill_record *rec, char *err);

/* Reads the session of key `id` (smol_spill_key) into rec (zeroed, but
 * for rec->seq: an empty sequence without pages): tenant, id, history, text, messages, date, mode, and the
 * KV pages, reserved from kv into rec->seq.  No filesystem call: the file
 * read ahead (smol_spill_prefetch), then the images of its queued writes.
 *   SMOL_OK           rec filled (the caller's to deinit), rec->seq->n_tokens positions hold the file's KV
 *   SMOL_ENOSESSION   no file for this id
 *   SMOL_EBUSY        *pages_needed > 0: the pool lacks free pages for it; file kept (and what was read)
 *                     *pages_needed 0: the file is not read yet; its read-ahead is asked: call again
 *                     once smol_spill_prefetch says 1
 *   other             the file was bad: logged, counted, removed; rec left empty
 * vocab bounds the token ids. */
enum smol_err smol_spill_load(struct smol_spill *sp, struct smol_kv *kv, int vocab, const char *id,
                              struct smol_spill_record *rec, int *pages_needed, char *err);

/* The same for the cached prefix of key `id` (from smol_spill_best_prefix):
 * a record with id "" and the prefix's tenant. */
enum smol_err smol_spill_load_prefix(struct smol_spill *sp, struct smol_kv *kv, int vocab, const char *id,
                                     struct smol_spill_record *rec, int *pages_needed, char *err);

/* tenant's prefix file whose KV tokens share the longest common prefix
 * with ids[0, n): returns that length (0: none) and its key in key_out. */
int smol_spill_best_prefix(struct smol_spill *sp, const char *tenant, const int32_t *ids, int n,
                           char key_out[SMOL_SPILL_KEY_MAX + 1]);

/* Removes the file of key id, if any. */
void smol_spill_remove(struct smol_spill *sp, const char *id);
/* A shared directory: smol_spill_remove that also tells whether the
 * session's file was there, found on the writer thread (no filesystem call
 * on the caller's): a ticket (> 0) for smol_spill_removal_done, or 0 (too
 * many answers pending, or no memory: nothing queued). */
uint64_t smol_spill_remove_report(struct smol_spill *sp, const char *id);
/* -1: not known yet; 0: the file was not there; 1: it was (removed, or
 * left to another node that holds or wrote it).  Answered once: the
 * ticket is forgotten then. */
int smol_spill_removal_done(struct smol_spill *sp, uint64_t ticket);
/* The same for a copy in memory that expired: in a shared directory the
 * file is removed only when no other node wrote it since this node last
 * saw it (else it is another node's conversation, going on there). */
void smol_spill_expire(struct smol_spill *sp, const char *id);

/* 1 if a file for key id is indexed (shared: if the directory has one; the
 * index alone while this node holds the lease, which brought it up to date). */
int smol_spill_has(struct smol_spill *sp, const char *id);

void smol_spill_get_stats(struct smol_spill *sp, struct smol_spill_stats *st);

/* Has the writer thread read the file of key id ahead of its turn (the whole
 * file into memory: smol_spill_load then checks and copies it into the pool
 * without touching the disk).  1 when smol_spill_load can run now without
 * waiting for the disk (the file is read, a write of it is queued, there is
 * no file), 0 while the read runs.  A file of any size is read ahead (the
 * ready list keeps 8 files and 1 GiB, but always its newest). */
int smol_spill_prefetch(struct smol_spill *sp, const char *id);

/* Waits until the writer has tried every queued job (returns at once when
 * paused); failed writes may still wait for their retry. */
void smol_spill_flush(struct smol_spill *sp);
/* Queues a sweep of the directory (on the writer thread; one at a time):
 * temporary files an hour old, and, ttl_s > 0, the files (sessions,
 * cached prefixes, lock files without a session file) nobody wrote or
 * read for ttl_s, by the file server's clock (a probe file's mtime, not
 * this node's clock), each removed under its lock (no node in a turn of
 * it) and with its lock file. */
void smol_spill_sweep(struct smol_spill *sp, double ttl_s);
/* A failed write's backoff: first_s, doubling per failure, at most max_s. */
void smol_spill_set_retry(struct smol_spill *sp, double first_s, double max_s);
/* Tests: a paused writer starts no job (so queued writes can be observed). */
void smol_spill_pause(struct smol_spill *sp, int paused);
/* Jobs queued or running. */
int smol_spill_pending(struct smol_spill *sp);

#endif
