/*
 * spill_internal.h - the spill's private header, shared by its files:
 * spill.c (the API: open, close, save, load), spill_format.c (the file
 * format: names, record headers, the replay of records), spill_index.c (the
 * index and the disk budget), spill_lease.c (the leases of a shared
 * directory and the lease thread), spill_writer.c (the writer thread) and
 * spill_read.c (read-ahead).
 * Not a public header: only the spill's own files include it.
 *
 * Threads: the engine thread (the API's caller) owns the index; the writer
 * thread and the lease thread share the queue, the ready and failed lists,
 * the lease records and the counters with it under sp->mu, never held over
 * a call to a file server but where a file says so.  Each file's top says
 * the rules of the code in it.
 */
#ifndef SMOL_SPILL_INTERNAL_H
#define SMOL_SPILL_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include "daemon/server/spill.h"

#define V1_HEADER_BYTES 136     /* version 1: the header up to date[], then its hash */

#define NAME_LEN 35 /* 32 hex digits + ".kv" */

/* What a session file's records add up to, as this node wrote or read it
 * (known 0: not known, e.g. found by a scan or written by another node;
 * the next write is then a base).  The next turn's record is what differs. */
struct written {
    int known;
    uint64_t end;               /* bytes of the complete records (where the next one goes) */
    uint64_t file_id, seq;      /* of the file and its last record */
    int32_t *tokens;            /* [n_tokens] */
    int n_tokens, n_kv;
    int has_hist;
    uint64_t hist_len, hist_hash; /* XXH3-64 of the text */
    int has_msgs, n_msgs;
    uint64_t *msg_hash;         /* [n_msgs] XXH3-64 of each message's compact JSON */
};

struct entry {
    char name[NAME_LEN + 1];
    uint64_t bytes;
    int64_t stamp;              /* ns, CLOCK_REALTIME (file mtime at scan) */
    int disk_stamp;             /* stamp is the file's mtime as the file server set it (scan, refresh) */
    /* a cached prefix: its key (its tenant's, smol_spill_key) and KV tokens
     * (NULL for a session) */
    char prefix_id[SMOL_SPILL_KEY_MAX + 1];
    int32_t *tokens;
    int n_tokens;
    struct written log;         /* what the file's records hold, as far as this node knows */
};

/* A file operation for the writer thread.  Jobs run in the order they were
 * queued, so the operations on one file never pass each other; a job stays
 * on the queue until it is done. */
enum job_kind { JOB_WRITE, JOB_UNLINK, JOB_READ, JOB_SWEEP };

struct job {
    struct job *next;
    enum job_kind kind;
    char name[NAME_LEN + 1];
    char id[SMOL_SPILL_KEY_MAX + 1];    /* for the log */
    unsigned char *image;               /* JOB_WRITE: header + payload, hashes not yet set;
                                           JOB_READ: the file's bytes once read */
    uint64_t bytes;
    const char *read_err;               /* JOB_READ: why the file could not be read, or NULL */
    int n_kv;
    int prefix;                         /* JOB_WRITE: a cached prefix */
    int64_t off;                        /* JOB_WRITE: -1 a base (temporary file, rename); else an append
                                           at this offset (the end of the file's last complete record) */
    int compact;                        /* JOB_WRITE: a base over a file of records */
    int refs;                           /* the queue's (then the ready list's) + readers' */
    int running, finished;
    int leased;                         /* holds a reference to its name's lease (shared directory) */
    int lease_take;                     /* JOB_WRITE, shared: the writer takes the lease first, not the
                                           engine thread (smol_spill_save_unleased: a whole image) */
    int stale;                          /* lease_take: its image is of a stale copy (a turn's lease found
                                           the file CHANGED; its own was not HELD): dropped; not loaded */
    int tries;                          /* JOB_WRITE: attempts that failed (it waits for the next one) */
    int64_t unused_since;               /* JOB_UNLINK: removed only if its mtime is not later (ns; 0: any);
                                           JOB_SWEEP: the TTL (ns; 0: temporary files only) */
    int rm_take;                        /* JOB_UNLINK, shared: the lease is taken by the writer (RM_* in
                                           rm_mode), not the engine thread */
    int rm_mode;
    int64_t indexed;                    /* JOB_UNLINK, RM_UNUSED: the file's mtime when it was indexed (0: not
                                           indexed from the directory) */
    uint64_t report;                    /* JOB_UNLINK: its ticket (smol_spill_remove_report), or 0 */
    int found;                          /* JOB_UNLINK with a report: the file was there */
    double not_before;                  /* smol_mono_s(): no attempt before (a failed write's backoff) */
};

struct smol_spill {
    char dir[4096];
    int dirfd;
    uint64_t budget;            /* bytes; 0 = no limit */
    uint8_t model_id[16];
    /* the index: what the directory holds once the queued jobs are done
     * (engine thread only) */
    struct entry *ent;
    int n_ent, cap_ent;
    struct smol_spill_stats st; /* files, bytes: the index; the counters under mu */
    void *page_buf;             /* one page, all layers, host */
    size_t page_buf_bytes;
    /* the writer thread */
    pthread_t thread;
    int have_thread;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;  /* a job queued / a job finished */
    struct job *q_head, *q_tail;
    uint64_t q_bytes;           /* images queued */
    int stop, paused;
    double retry_first_s, retry_max_s; /* a failed write's backoff: first wait, doubling up to max */
    char failed[64][NAME_LEN + 1]; /* writes whose lease was lost: dropped from the index by the engine thread */
    int n_failed;
    struct job *ready;          /* files read ahead (smol_spill_prefetch), newest first */
    int n_ready;
    uint64_t landed;            /* writes and removals the writer finished (a read-ahead held meanwhile
                                   may be stale: smol_spill_load puts one back only if none landed) */
    /* a shared directory (smol_spill_open_shared): the leases, under mu */
    int shared;
    struct lease *leases;
    int n_leases, cap_leases;
    pthread_t lease_thread;     /* asks for leases (lock_open, the generation, the file's stat) */
    int have_lease_thread, lease_stop;
    pthread_cond_t lease_wake;  /* an ask queued */
    struct { uint64_t ticket; int state; } reports[32]; /* removals' answers (smol_spill_remove_report),
                                                           under mu: state -1 pending, 0/1 answered */
    int n_reports;
    uint64_t next_ticket;
    char node[80];              /* host name, pid and a count of this process's spills: in the names
                                   of our temporary files (but a leased session's) */
};

/* A session's lease in a shared directory: an OFD write lock on the whole of
 * <name>.lock, held while refs > 0 (the turn that took it, and each write or
 * removal of the file queued meanwhile).  The identity of the file as this
 * node last saw it tells whether another node wrote it since: the lock
 * file holds a generation (8 bytes, little-endian), which every write or
 * removal of the session's file under the lease increments before it
 * renames or unlinks (a crash in between costs a needless restore, never a
 * stale history taken for the current one). */
struct lease {
    char name[NAME_LEN + 1];
    int fd;                     /* the lock file, locked; -1 = not held */
    int refs;
    int unlinked;               /* the lock file was removed with the session's (fd is of the removed
                                   file): no new reference until the last one closes it */
    int closing;                /* the engine gave back the last reference (smol_spill_unlease): fd,
                                   still locked, is closed on the lease thread, not the engine's; taken
                                   again meanwhile (not unlinked), the lease is reused as held */
    /* asked on the lease thread (smol_spill_lease_async): */
    int asking;                 /* 1 queued, 2 being asked */
    int answer;                 /* LEASE_NONE, or the answer not yet taken (HELD, CHANGED: fd is
                                   locked, refs still 0 until the engine takes it) */
    double answered_at;         /* smol_mono_s() */
    int exists;                 /* the session file, as the lease thread found it under the lock */
    uint64_t size;
    int64_t mtime;
    uint64_t gen;               /* the file's generation as this node last saw or made it */
};

#define SPILL_READY_MAX 8       /* read-ahead files kept for their turn (the oldest dropped) */

/* at most this many bytes of images wait for the disk; a save beyond it
 * waits for the writer (the engine's memory stays bounded) */
#define SPILL_QUEUE_MAX ((uint64_t)1 << 30)
#define LEASE_NONE (-9)         /* struct lease's answer: none waiting */
#define LEASE_ASK_WRITER 3      /* struct lease's asking: the writer thread locks it for a removal */

/* a removal in a shared directory (JOB_UNLINK's rm_mode) */
#define RM_SAME_GEN 0   /* only if nobody wrote it since this node last saw it */
#define RM_ANY_GEN 1    /* whoever wrote it last */
#define RM_UNUSED 2     /* the budget: as RM_SAME_GEN, or, a file indexed from the directory (an
                           earlier process's, another node's), if unused since it was indexed */

#define TMP_AGE_NS (3600ll * 1000000000) /* a temporary file this old is no write under way */

/* The state a file's records add up to, as a load applies them in order. */
struct replay {
    int n_rec;                  /* records applied */
    uint64_t end;               /* bytes of the records applied (of the file, then of the queued images) */
    uint64_t file_id, seq;
    struct smol_spill_header last;  /* the last record's header (flags, date, sizes) */
    int32_t *tokens;            /* [n_tokens] */
    uint32_t n_tokens;
    char *hist;                 /* [hist_len] */
    uint32_t hist_len;
    json_t *msgs;               /* NULL: none */
    const unsigned char **page; /* [n_pages] where each KV page's bytes are (in the buffers read) */
    uint32_t n_pages;
};

/* ---- spill_format.c: names, record headers, replay ---- */

void smol_spill_written_deinit(struct written *w);
void smol_spill_file_name(const char *id, char out[NAME_LEN + 1]);
int smol_spill_split_key(const char *key, char tenant[SMOL_RULE_TENANT_MAX + 1], const char **id);
int smol_spill_key_of_tenant(const char *key, const char *tenant);
int smol_spill_is_our_name(const char *n);
int64_t smol_spill_now_ns(void);
uint64_t smol_spill_header_hash(const struct smol_spill_header *h);
const char *smol_spill_read_header(const unsigned char *b, uint64_t n, struct smol_spill_header *h);
const char *smol_spill_check_header(const struct smol_spill *sp, const struct smol_spill_header *h,
                                    const struct smol_kv *kv, int foreign);
int64_t smol_spill_mtime_ns(const struct stat *st);
int smol_spill_read_full(int fd, void *buf, size_t n);
int smol_spill_write_full(int fd, const void *buf, size_t n);
void smol_spill_prefix_id(const int32_t *tokens, int n, char out[SMOL_SPILL_PREFIX_ID_LEN + 1]);
void smol_spill_replay_deinit(struct replay *r);
int smol_spill_replay_one(struct smol_spill *sp, const struct smol_kv *kv, struct replay *r, const unsigned char *b,
                          uint64_t n, int trusted, int foreign, const char *key, const char **why);

/* ---- spill_index.c: the index and the budget ---- */

struct entry *smol_spill_find_ent(const struct smol_spill *sp, const char *name);
void smol_spill_drop_ent(struct smol_spill *sp, struct entry *e);
int smol_spill_put_ent(struct smol_spill *sp, const char *name, uint64_t bytes, int64_t stamp, const char *prefix_id,
                       const int32_t *tokens, int n_tokens);
void smol_spill_unlink_file(struct smol_spill *sp, const char *name);
void smol_spill_trim(struct smol_spill *sp, const char *keep);
void smol_spill_refresh_ent(struct smol_spill *sp, const char *name, int changed);
void smol_spill_reject_file(struct smol_spill *sp, const char *name, const char *why);
void smol_spill_scan(struct smol_spill *sp, const struct smol_kv *kv);
int smol_spill_prefix_covered(const struct smol_spill *sp, const char *tenant, const int32_t *tokens, int n);
void smol_spill_drop_extended(struct smol_spill *sp, const char *tenant, const int32_t *tokens, int n);
void smol_spill_reap_failed(struct smol_spill *sp);

/* ---- spill_lease.c: leases (a shared directory) ---- */

struct lease *smol_spill_lease_of(struct smol_spill *sp, const char *name, int add);
void smol_spill_lease_put_locked(struct smol_spill *sp, const char *name);
int smol_spill_lease_release_locked(struct smol_spill *sp, const char *name);
int smol_spill_lock_open(struct smol_spill *sp, const char *lk, int *fd_out);
int smol_spill_lease_take(struct smol_spill *sp, const char *name);
void *smol_spill_lease_main(void *arg);
int smol_spill_lease_advance(struct smol_spill *sp, const struct job *j, uint64_t *gen_out);
int smol_spill_lease_for_removal(struct smol_spill *sp, struct job *j);
int smol_spill_lease_for_write(struct smol_spill *sp, struct job *j);

/* ---- spill_writer.c: the writer thread ---- */

void smol_spill_job_unref(struct job *j);
void smol_spill_enqueue(struct smol_spill *sp, struct job *j);
void smol_spill_enqueue_locked(struct smol_spill *sp, struct job *j);
void smol_spill_drop_unleased_locked(struct smol_spill *sp, const char *name);
int64_t smol_spill_server_now(struct smol_spill *sp);
int smol_spill_busy_locked(const struct smol_spill *sp);
void *smol_spill_writer_main(void *arg);
struct job *smol_spill_pending_for(struct smol_spill *sp, const char *name);

/* ---- spill_read.c: read-ahead ---- */

void smol_spill_run_read(struct smol_spill *sp, struct job *j);
void smol_spill_ready_add_locked(struct smol_spill *sp, struct job *j, int stale);
void smol_spill_ready_forget_locked(struct smol_spill *sp, const char *name);
struct job *smol_spill_take_ready(struct smol_spill *sp, const char *name);
void smol_spill_drop_ready(struct smol_spill *sp, const char *name);
void smol_spill_put_back_ready(struct smol_spill *sp, struct job *j, uint64_t landed);
void smol_spill_release(struct smol_spill *sp, struct job *j);
void smol_spill_answer_locked(struct smol_spill *sp, uint64_t ticket, int found);

#endif
