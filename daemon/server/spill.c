/* spill.c - sessions on disk (see spill.h for the format and the rules). */
#include "daemon/server/spill.h"
#include "daemon/server/log.h"
#include "daemon/text/text.h"
#include "daemon/model/rules.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

_Static_assert(sizeof(struct smol_spill_header) == 176, "spill header layout");
#define V1_HEADER_BYTES 136     /* version 1: the header up to date[], then its hash */
_Static_assert(offsetof(struct smol_spill_header, tok_from) == V1_HEADER_BYTES - 8, "v1 prefix of the header");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "spill files are little-endian");

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

static void written_deinit(struct written *w)
{
    free(w->tokens);
    free(w->msg_hash);
    memset(w, 0, sizeof *w);
}

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
    int tries;                          /* JOB_WRITE: attempts that failed (it waits for the next one) */
    int64_t unused_since;               /* JOB_UNLINK: removed only if its mtime is not later (ns; 0: any);
                                           JOB_SWEEP: the TTL (ns; 0: temporary files only) */
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
    /* a shared directory (smol_spill_open_shared): the leases, under mu */
    int shared;
    struct lease *leases;
    int n_leases, cap_leases;
    pthread_t lease_thread;     /* asks for leases (lock_open, the generation, the file's stat) */
    int have_lease_thread, lease_stop;
    pthread_cond_t lease_wake;  /* an ask queued */
    char node[80];              /* host name and pid: in the names of our temporary files */
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

/* ---- names, index ------------------------------------------------------------------ */

static void file_name(const char *id, char out[NAME_LEN + 1])
{
    XXH128_hash_t h = XXH3_128bits(id, strlen(id));
    snprintf(out, NAME_LEN + 1, "%016llx%016llx.kv", (unsigned long long)h.high64, (unsigned long long)h.low64);
}

void smol_spill_key(const char *tenant, const char *id, char out[SMOL_SPILL_KEY_MAX + 1])
{
    if (tenant[0]) snprintf(out, SMOL_SPILL_KEY_MAX + 1, "%s/%s", tenant, id);
    else snprintf(out, SMOL_SPILL_KEY_MAX + 1, "%s", id);
}

/* Splits a key into its tenant and id (pointing into key); 0, or -1 when
 * the tenant is not one smol_rule_tenant accepts. */
static int split_key(const char *key, char tenant[SMOL_RULE_TENANT_MAX + 1], const char **id)
{
    const char *slash = strchr(key, '/');
    tenant[0] = 0;
    *id = key;
    if (!slash) return 0;
    if ((size_t)(slash - key) > SMOL_RULE_TENANT_MAX) return -1;
    memcpy(tenant, key, (size_t)(slash - key));
    tenant[slash - key] = 0;
    *id = slash + 1;
    return tenant[0] && smol_tenant_ok(tenant) ? 0 : -1;
}

/* 1 if the cached prefix of key belongs to tenant */
static int key_of_tenant(const char *key, const char *tenant)
{
    char t[SMOL_RULE_TENANT_MAX + 1];
    const char *id;
    return !split_key(key, t, &id) && !strcmp(t, tenant);
}

static int is_our_name(const char *n)
{
    if (strlen(n) != NAME_LEN || strcmp(n + 32, ".kv")) return 0;
    for (int i = 0; i < 32; i++)
        if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f'))) return 0;
    return 1;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static struct entry *find_ent(const struct smol_spill *sp, const char *name)
{
    for (int i = 0; i < sp->n_ent; i++)
        if (!strcmp(sp->ent[i].name, name)) return &sp->ent[i];
    return NULL;
}

static void drop_ent(struct smol_spill *sp, struct entry *e)
{
    free(e->tokens);
    written_deinit(&e->log);
    sp->st.bytes -= e->bytes;
    sp->st.files--;
    *e = sp->ent[--sp->n_ent];
}

/* prefix_id, tokens: a cached prefix's (copied), or NULL */
static int put_ent(struct smol_spill *sp, const char *name, uint64_t bytes, int64_t stamp, const char *prefix_id,
                   const int32_t *tokens, int n_tokens)
{
    struct entry *e = find_ent(sp, name);
    if (e) drop_ent(sp, e);
    if (sp->n_ent == sp->cap_ent) {
        int cap = sp->cap_ent ? sp->cap_ent * 2 : 64;
        struct entry *p = realloc(sp->ent, (size_t)cap * sizeof *p);
        if (!p) return -1;
        sp->ent = p;
        sp->cap_ent = cap;
    }
    e = &sp->ent[sp->n_ent++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->bytes = bytes;
    e->stamp = stamp;
    if (prefix_id && (e->tokens = malloc((size_t)n_tokens * sizeof *tokens + 1))) {
        snprintf(e->prefix_id, sizeof e->prefix_id, "%s", prefix_id);
        memcpy(e->tokens, tokens, (size_t)n_tokens * sizeof *tokens);
        e->n_tokens = n_tokens;
    } /* (without memory for its tokens the file is only never matched) */
    sp->st.bytes += bytes;
    sp->st.files++;
    return 0;
}

static void enqueue(struct smol_spill *sp, struct job *j);

/* Drops name from the index and has the writer remove the file. */
static void drop_ready(struct smol_spill *sp, const char *name);

static int lease_take(struct smol_spill *sp, const char *name);
static void lease_put_locked(struct smol_spill *sp, const char *name);

#define RM_SAME_GEN 0   /* only if nobody wrote it since this node last saw it */
#define RM_ANY_GEN 1    /* whoever wrote it last */
#define RM_UNUSED 2     /* the budget: as RM_SAME_GEN, or, a file indexed from the directory (an
                           earlier process's, another node's), if unused since it was indexed */

/* In a shared directory the file is removed under its lease (taken here if
 * need be), as `mode` says, and its lock file with it (spill.h); the index
 * forgets it either way. */
static void unlink_file_gen(struct smol_spill *sp, const char *name, int mode)
{
    struct entry *e = find_ent(sp, name);
    const int64_t indexed = e && e->disk_stamp ? e->stamp : 0;
    if (e) drop_ent(sp, e);
    drop_ready(sp, name);
    int leased = 0;
    int64_t unused_since = 0;
    if (sp->shared) {
        const int r = lease_take(sp, name);
        /* (CHANGED: lease_take read the generation now on disk, which the
         * writer checks again before it removes the file) */
        if (r == SMOL_LEASE_CHANGED && mode == RM_UNUSED && indexed) unused_since = indexed;
        if (r == SMOL_LEASE_HELD || (r == SMOL_LEASE_CHANGED && (mode == RM_ANY_GEN || unused_since))) {
            leased = 1;
        } else {
            if (r == SMOL_LEASE_CHANGED) {
                pthread_mutex_lock(&sp->mu);
                lease_put_locked(sp, name);
                pthread_mutex_unlock(&sp->mu);
            }
            smol_log_info("spill: %s/%s left in place: %s", sp->dir, name,
                          r == SMOL_LEASE_CHANGED ? "another node wrote it since" : "another node holds it");
            return;
        }
    }
    struct job *j = calloc(1, sizeof *j);
    if (j) j->leased = leased;
    if (!j && leased) { /* no memory for a job: not removed (a shared file is removed only by the writer) */
        pthread_mutex_lock(&sp->mu);
        lease_put_locked(sp, name);
        pthread_mutex_unlock(&sp->mu);
        return;
    }
    if (!j) { /* no memory for a job: remove it here, after what is queued */
        smol_spill_flush(sp);
        if (unlinkat(sp->dirfd, name, 0) && errno != ENOENT)
            smol_log_warn("spill: cannot remove %s/%s: %s", sp->dir, name, strerror(errno));
        return;
    }
    j->kind = JOB_UNLINK;
    j->unused_since = unused_since;
    snprintf(j->name, sizeof j->name, "%s", name);
    enqueue(sp, j);
}

static void unlink_file(struct smol_spill *sp, const char *name)
{
    unlink_file_gen(sp, name, RM_ANY_GEN);
}

/* Removes the least recently used files until the total fits the budget;
 * `keep` (may be NULL) goes last. */
static void trim(struct smol_spill *sp, const char *keep)
{
    while (sp->budget && sp->st.bytes > sp->budget && sp->n_ent) {
        struct entry *old = NULL;
        for (int i = 0; i < sp->n_ent; i++) {
            struct entry *e = &sp->ent[i];
            if (keep && !strcmp(e->name, keep) && sp->n_ent > 1) continue;
            if (!old || e->stamp < old->stamp) old = e;
        }
        SMOL_ASSERT(old);
        char name[NAME_LEN + 1];
        snprintf(name, sizeof name, "%s", old->name);
        smol_log_info("spill: disk budget: removing %s (%.1f MiB, least recently used)", name, old->bytes / 1048576.0);
        unlink_file_gen(sp, name, RM_UNUSED);
    }
}

/* ---- leases (a shared directory) ----------------------------------------------------- */

#define LEASES_KEPT 8192        /* lease records (held or not) before those not held are forgotten */
#define LEASE_NONE (-9)         /* struct lease's answer: none waiting */
#define LEASE_ANSWER_KEEP_S 2.0 /* a lock the lease thread took that nobody came for is let go after this */

/* under sp->mu; NULL on OOM (add) or when there is none (!add).  The pointer
 * is good until the mutex is released. */
static struct lease *lease_of(struct smol_spill *sp, const char *name, int add)
{
    for (int i = 0; i < sp->n_leases; i++)
        if (!strcmp(sp->leases[i].name, name)) return &sp->leases[i];
    if (!add) return NULL;
    if (sp->n_leases >= LEASES_KEPT) { /* forget the generations of leases not held (a stale copy in
                                          memory is then dropped and read again: slower, still right) */
        int k = 0;
        for (int i = 0; i < sp->n_leases; i++)
            if (sp->leases[i].refs > 0 || sp->leases[i].fd >= 0 || sp->leases[i].asking)
                sp->leases[k++] = sp->leases[i];
        sp->n_leases = k;
    }
    if (sp->n_leases == sp->cap_leases) {
        int cap = sp->cap_leases ? sp->cap_leases * 2 : 64;
        struct lease *p = realloc(sp->leases, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        sp->leases = p;
        sp->cap_leases = cap;
    }
    struct lease *l = &sp->leases[sp->n_leases++];
    memset(l, 0, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", name);
    l->fd = -1;
    l->answer = LEASE_NONE;
    return l;
}

static uint64_t read_gen(int fd)
{
    unsigned char b[8];
    if (pread(fd, b, 8, 0) != 8) return 0; /* a new lock file: no write yet */
    uint64_t g;
    memcpy(&g, b, 8);
    return g;
}

/* under sp->mu: drops one reference; the last one unlocks. */
static void lease_put_locked(struct smol_spill *sp, const char *name)
{
    struct lease *l = lease_of(sp, name, 0);
    if (!l || l->refs <= 0) return;
    if (--l->refs == 0) {
        close(l->fd); /* the OFD lock goes with the last descriptor of it */
        l->fd = -1;
    }
}

/* Opens and locks lock file lk (an OFD write lock, never waiting; created
 * if missing): 0 (*fd locked), 1 (another open file description holds it:
 * another node, or this one's sweep), -1 (errno).  A lock file is removed
 * only by the holder of its lock (with its session's file), so a lock
 * taken on a file that is no longer the one under its name (removed
 * meanwhile) is given up and taken again on the new one. */
static int lock_open(struct smol_spill *sp, const char *lk, int *fd_out)
{
    for (int tries = 0; tries < 4; tries++) {
        int fd = openat(sp->dirfd, lk, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        if (fd < 0) return -1;
        if (fcntl(fd, F_OFD_SETLK, &fl)) {
            const int e = errno;
            close(fd);
            errno = e;
            return e == EAGAIN || e == EACCES ? 1 : -1;
        }
        struct stat a, b;
        if (!fstat(fd, &a) && !fstatat(sp->dirfd, lk, &b, AT_SYMLINK_NOFOLLOW) && a.st_ino == b.st_ino &&
            a.st_dev == b.st_dev) {
            *fd_out = fd;
            return 0;
        }
        close(fd); /* removed under us: the new one */
    }
    return 1;
}

/* Takes a reference to name's lease, locking <name>.lock when this node
 * does not hold it yet (never waiting).  SMOL_LEASE_HELD, SMOL_LEASE_CHANGED
 * (held; another node wrote or removed the file since this node last saw
 * it), SMOL_LEASE_ELSEWHERE (another node holds it) or SMOL_LEASE_ERROR
 * (logged).  Engine thread. */
static int lease_take(struct smol_spill *sp, const char *name)
{
    pthread_mutex_lock(&sp->mu);
    struct lease *l = lease_of(sp, name, 1);
    if (!l) {
        pthread_mutex_unlock(&sp->mu);
        return SMOL_LEASE_ERROR;
    }
    if (l->refs > 0 && l->unlinked) { /* its removal is under way: asked again after it */
        pthread_mutex_unlock(&sp->mu);
        return SMOL_LEASE_ELSEWHERE;
    }
    if (l->refs > 0) {
        l->refs++;
        pthread_mutex_unlock(&sp->mu);
        return SMOL_LEASE_HELD;
    }
    if (l->fd >= 0) { /* locked by the lease thread, its answer not taken yet: taken here */
        const int a = l->answer;
        l->answer = LEASE_NONE;
        l->refs = 1;
        pthread_mutex_unlock(&sp->mu);
        return a;
    }
    char lk[NAME_LEN + 8];
    snprintf(lk, sizeof lk, "%.32s.lock", name);
    int fd = -1;
    const int r = lock_open(sp, lk, &fd);
    if (r) {
        const int e = errno;
        if (r > 0) sp->st.lease_refused++;
        pthread_mutex_unlock(&sp->mu);
        if (r < 0) smol_log_warn("spill: %s/%s: cannot lock: %s", sp->dir, lk, strerror(e));
        return r > 0 ? SMOL_LEASE_ELSEWHERE : SMOL_LEASE_ERROR;
    }
    const uint64_t gen = read_gen(fd);
    const int changed = gen != l->gen;
    l->fd = fd;
    l->unlinked = 0;
    l->refs = 1;
    l->gen = gen;
    pthread_mutex_unlock(&sp->mu);
    return changed ? SMOL_LEASE_CHANGED : SMOL_LEASE_HELD;
}

/* The index entry of name as the directory has it now (another node may
 * have written or removed the file). */
static void refresh_ent(struct smol_spill *sp, const char *name, int changed)
{
    struct stat st;
    struct entry *e = find_ent(sp, name);
    if (fstatat(sp->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode)) {
        if (e) drop_ent(sp, e);
    } else if (!e || changed || e->bytes != (uint64_t)st.st_size) {
        put_ent(sp, name, (uint64_t)st.st_size, (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec, NULL,
                NULL, 0);
        if ((e = find_ent(sp, name))) e->disk_stamp = 1;
    }
    if (changed) drop_ready(sp, name);
}

int smol_spill_shared(const struct smol_spill *sp)
{
    return sp->shared;
}

static int64_t mtime_ns(const struct stat *st);

/* The lease thread: takes each lease asked (lock_open without waiting, the
 * generation, a stat of the session file) with no mutex held over the
 * filesystem, and leaves the answer in the lease record for the engine
 * thread (smol_spill_lease_async). */
static void *lease_main(void *arg)
{
    struct smol_spill *sp = arg;
    pthread_mutex_lock(&sp->mu);
    for (;;) {
        struct lease *l = NULL;
        for (int i = 0; i < sp->n_leases && !l; i++)
            if (sp->leases[i].asking == 1) l = &sp->leases[i];
        if (sp->lease_stop) break;
        if (!l) { /* let go of the locks taken for turns that went away meanwhile */
            const double now = smol_mono_s();
            int parked = 0;
            for (int i = 0; i < sp->n_leases; i++) {
                struct lease *o = &sp->leases[i];
                if (o->refs > 0 || o->answer == LEASE_NONE) continue;
                if (now - o->answered_at <= LEASE_ANSWER_KEEP_S) { parked = 1; continue; }
                if (o->fd >= 0) close(o->fd);
                o->fd = -1;
                o->answer = LEASE_NONE;
            }
            if (parked) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_sec += 1;
                pthread_cond_timedwait(&sp->lease_wake, &sp->mu, &ts);
            } else {
                pthread_cond_wait(&sp->lease_wake, &sp->mu);
            }
            continue;
        }
        l->asking = 2;
        char name[NAME_LEN + 1], lk[NAME_LEN + 8];
        snprintf(name, sizeof name, "%s", l->name);
        snprintf(lk, sizeof lk, "%.32s.lock", name);
        pthread_mutex_unlock(&sp->mu);
        int fd = -1;
        const int r = lock_open(sp, lk, &fd);
        const int e = errno;
        const uint64_t gen = r ? 0 : read_gen(fd);
        struct stat st;
        const int exists = !r && !fstatat(sp->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) && S_ISREG(st.st_mode);
        if (r < 0) smol_log_warn("spill: %s/%s: cannot lock: %s", sp->dir, lk, strerror(e));
        pthread_mutex_lock(&sp->mu);
        l = lease_of(sp, name, 0); /* (records kept while asking: still there) */
        if (!l || l->refs > 0 || l->fd >= 0) { /* taken meanwhile on the engine thread: not needed */
            if (fd >= 0) close(fd);
            if (l) l->asking = 0;
            continue;
        }
        l->asking = 0;
        l->answered_at = smol_mono_s();
        if (r) {
            l->answer = r > 0 ? SMOL_LEASE_ELSEWHERE : SMOL_LEASE_ERROR;
            if (r > 0) sp->st.lease_refused++;
            continue;
        }
        l->answer = gen != l->gen ? SMOL_LEASE_CHANGED : SMOL_LEASE_HELD;
        l->fd = fd;
        l->unlinked = 0;
        l->gen = gen;
        l->exists = exists;
        l->size = exists ? (uint64_t)st.st_size : 0;
        l->mtime = exists ? mtime_ns(&st) : 0;
    }
    pthread_mutex_unlock(&sp->mu);
    return NULL;
}

int smol_spill_lease_async(struct smol_spill *sp, const char *id)
{
    if (!sp->shared) return SMOL_LEASE_HELD;
    if (!sp->have_lease_thread) return smol_spill_lease(sp, id);
    char name[NAME_LEN + 1];
    file_name(id, name);
    pthread_mutex_lock(&sp->mu);
    struct lease *l = lease_of(sp, name, 1);
    int r = SMOL_LEASE_PENDING, fresh = 0;
    if (!l) {
        r = SMOL_LEASE_ERROR;
    } else if (l->refs > 0) {
        if (l->unlinked) r = SMOL_LEASE_ELSEWHERE;
        else { l->refs++; r = SMOL_LEASE_HELD; }
    } else if (l->answer != LEASE_NONE) {
        r = l->answer;
        l->answer = LEASE_NONE;
        if (r == SMOL_LEASE_HELD || r == SMOL_LEASE_CHANGED) l->refs = fresh = 1;
    } else if (!l->asking) {
        l->asking = 1;
        pthread_cond_signal(&sp->lease_wake);
    }
    const int exists = l ? l->exists : 0;
    const uint64_t size = l ? l->size : 0;
    const int64_t mtime = l ? l->mtime : 0;
    pthread_mutex_unlock(&sp->mu);
    if (fresh) { /* the index as the lease thread found the file */
        struct entry *e = find_ent(sp, name);
        if (!exists) {
            if (e) drop_ent(sp, e);
        } else if (!e || r == SMOL_LEASE_CHANGED || e->bytes != size) {
            put_ent(sp, name, size, mtime, NULL, NULL, 0);
            if ((e = find_ent(sp, name))) e->disk_stamp = 1;
        }
        if (r == SMOL_LEASE_CHANGED) drop_ready(sp, name);
    }
    return r;
}

int smol_spill_lease(struct smol_spill *sp, const char *id)
{
    if (!sp->shared) return SMOL_LEASE_HELD;
    char name[NAME_LEN + 1];
    file_name(id, name);
    const int r = lease_take(sp, name);
    if (r == SMOL_LEASE_HELD || r == SMOL_LEASE_CHANGED) refresh_ent(sp, name, r == SMOL_LEASE_CHANGED);
    return r;
}

void smol_spill_unlease(struct smol_spill *sp, const char *id)
{
    if (!sp->shared) return;
    char name[NAME_LEN + 1];
    file_name(id, name);
    pthread_mutex_lock(&sp->mu);
    lease_put_locked(sp, name);
    pthread_mutex_unlock(&sp->mu);
}

int smol_spill_holds(struct smol_spill *sp, const char *id)
{
    if (!sp->shared) return 1;
    char name[NAME_LEN + 1];
    file_name(id, name);
    pthread_mutex_lock(&sp->mu);
    const struct lease *l = lease_of(sp, name, 0);
    const int held = l && l->refs > 0;
    pthread_mutex_unlock(&sp->mu);
    return held;
}

/* Writer thread, before it replaces or removes name under its lease: 0
 * when this node still holds the lease (no other open file description
 * locks the file) and nobody wrote the file since this node last saw it
 * (the generation); then the generation is advanced, on disk first.  -1:
 * the lease was lost (logged, counted); the file is left alone. */
static int lease_advance(struct smol_spill *sp, const struct job *j, uint64_t *gen_out)
{
    pthread_mutex_lock(&sp->mu);
    struct lease *l = lease_of(sp, j->name, 0);
    const int fd = l && l->refs > 0 ? l->fd : -1;
    const uint64_t gen = l ? l->gen : 0;
    pthread_mutex_unlock(&sp->mu);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    const char *why = NULL;
    if (fd < 0) why = "not held";
    else if (fcntl(fd, F_OFD_GETLK, &fl)) why = strerror(errno);
    else if (fl.l_type != F_UNLCK) why = "another node holds it";
    else if (read_gen(fd) != gen) why = "another node wrote the session since";
    unsigned char b[8];
    const uint64_t next = gen + 1;
    memcpy(b, &next, 8);
    if (!why && (pwrite(fd, b, 8, 0) != 8 || fdatasync(fd))) why = "cannot advance the generation";
    if (why) {
        smol_log_warn("spill: session '%s' not %s %s/%s: its lease is lost (%s)", j->id,
                      j->kind == JOB_WRITE ? "written to" : "removed from", sp->dir, j->name, why);
        pthread_mutex_lock(&sp->mu);
        sp->st.lease_lost++;
        pthread_mutex_unlock(&sp->mu);
        return -1;
    }
    pthread_mutex_lock(&sp->mu);
    if ((l = lease_of(sp, j->name, 0))) l->gen = next;
    pthread_mutex_unlock(&sp->mu);
    if (gen_out) *gen_out = next;
    return 0;
}

/* ---- header ------------------------------------------------------------------------ */

static uint64_t header_hash(const struct smol_spill_header *h)
{
    return XXH3_64bits(h, offsetof(struct smol_spill_header, header_hash));
}


/* Reads the record header at b (n bytes available) into h: NULL, or why
 * it is not one.  A version 1 header (a whole file's) is read as the base
 * record it is (header_bytes stays 136: its payload follows there). */
static const char *read_header(const unsigned char *b, uint64_t n, struct smol_spill_header *h)
{
    if (n < 16) return "truncated (shorter than the header)";
    if (memcmp(b, SMOL_SPILL_MAGIC, 8)) return "not a smollm3d KV file (bad magic)";
    uint32_t v;
    memcpy(&v, b + 8, 4);
    if (v == 1) {
        uint64_t hh;
        if (n < V1_HEADER_BYTES) return "truncated (shorter than the header)";
        memcpy(&hh, b + V1_HEADER_BYTES - 8, 8);
        if (hh != XXH3_64bits(b, V1_HEADER_BYTES - 8)) return "header checksum mismatch";
        memset(h, 0, sizeof *h);
        memcpy(h, b, V1_HEADER_BYTES - 8);
        if (h->header_bytes != V1_HEADER_BYTES) return "header checksum mismatch";
        h->flags |= SMOL_SPILL_F_BASE | (h->msgs_len ? SMOL_SPILL_F_MSGS : 0);
        h->seq = 1;
        h->header_hash = header_hash(h);
        return NULL;
    }
    if (v != SMOL_SPILL_VERSION) return "another format version";
    if (n < sizeof *h) return "truncated (shorter than the header)";
    memcpy(h, b, sizeof *h);
    if (h->header_bytes != sizeof *h || h->header_hash != header_hash(h)) return "header checksum mismatch";
    return NULL;
}

/* NULL if h (read_header) is a record of ours for this model and kv
 * (foreign: of any model, KV type and geometry); else why not. */
static const char *check_header(const struct smol_spill *sp, const struct smol_spill_header *h,
                                const struct smol_kv *kv, int foreign)
{
    /* the type before the model: the model id covers q8_0's rotation */
    if (!foreign && h->kv_type != kv->type) return "another KV type or geometry";
    if (!foreign && memcmp(h->model_id, sp->model_id, 16))
        return "written for another model (or RoPE settings, or KV rotation)";
    if (!foreign && (h->n_layers != (uint32_t)kv->n_layers || h->n_kv_heads != (uint32_t)kv->n_kv_heads ||
                     h->head_dim != (uint32_t)kv->head_dim || h->page_tokens != SMOL_KV_PAGE))
        return "another KV type or geometry";
    if (h->id_len == 0 || h->id_len > SMOL_SPILL_KEY_MAX || h->n_kv > h->n_tokens || h->n_tokens > (1u << 26) ||
        h->reserved || memchr(h->date, 0, sizeof h->date) == NULL || h->tok_from > h->n_tokens ||
        h->hist_from > h->hist_len || (uint64_t)h->page_from * SMOL_KV_PAGE > h->tok_from ||
        (int)h->page_from > smol_kv_pages_for((int)h->n_kv) || (!(h->flags & SMOL_SPILL_F_MSGS) && h->msgs_len) ||
        ((h->flags & SMOL_SPILL_F_BASE) && (h->tok_from || h->page_from || h->hist_from || h->msgs_from)))
        return "inconsistent header";
    const uint64_t head = (uint64_t)h->id_len + 4ull * (h->n_tokens - h->tok_from) + (h->hist_len - h->hist_from) +
                          h->msgs_len;
    if (foreign ? h->payload_bytes < head
                : h->payload_bytes != head + (uint64_t)(smol_kv_pages_for((int)h->n_kv) - (int)h->page_from) *
                                                 smol_kv_page_host_bytes(kv))
        return "inconsistent payload size";
    return NULL;
}

static void reject_file(struct smol_spill *sp, const char *name, const char *why)
{
    smol_log_warn("spill: %s/%s: %s; ignored and removed (the session is recomputed)", sp->dir, name, why);
    pthread_mutex_lock(&sp->mu);
    sp->st.rejected++;
    pthread_mutex_unlock(&sp->mu);
    unlink_file(sp, name);
}

/* ---- model identity ------------------------------------------------------------------ */

void smol_spill_model_id(const struct smol_model *m, uint8_t out[16])
{
    XXH3_state_t *st = XXH3_createState();
    SMOL_ASSERT(st);
    XXH3_128bits_reset(st);
    const struct smol_gguf *g = m->gguf;
    size_t n = g->data_offset < g->size ? (size_t)g->data_offset : g->size;
    XXH3_128bits_update(st, g->base, n);
    const struct smol_rope_params *r = &m->rope;
    float f[6] = {r->freq_base, r->freq_scale, r->ext_factor, r->attn_factor, r->corr_dims[0], r->corr_dims[1]};
    int32_t d = r->n_dims;
    XXH3_128bits_update(st, &d, sizeof d);
    XXH3_128bits_update(st, f, sizeof f);
    /* a q8_0 cache's rows are rotated (kv.h): a file of unrotated q8_0 rows,
     * from before the rotation, must not load (f16 and f32 ids unchanged) */
    int32_t rot[2] = {m->kv.rot_k, m->kv.rot_v};
    if (rot[0] || rot[1]) XXH3_128bits_update(st, rot, sizeof rot);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
    memcpy(out, c.digest, 16);
    XXH3_freeState(st);
}

/* ---- the writer thread ------------------------------------------------------------- */

static void job_unref(struct job *j)
{
    if (--j->refs == 0) {
        free(j->image);
        free(j);
    }
}

/* under sp->mu */
static void enqueue_locked(struct smol_spill *sp, struct job *j)
{
    j->refs = 1;
    if (sp->q_tail) sp->q_tail->next = j;
    else sp->q_head = j;
    sp->q_tail = j;
    sp->q_bytes += j->bytes;
    pthread_cond_signal(&sp->wake);
}

static void enqueue(struct smol_spill *sp, struct job *j)
{
    pthread_mutex_lock(&sp->mu);
    enqueue_locked(sp, j);
    pthread_mutex_unlock(&sp->mu);
}

static int write_full(int fd, const void *buf, size_t n);
static int read_full(int fd, void *buf, size_t n);

/* JOB_WRITE, an append (j->off >= 0): the record written at the end of
 * the file's last complete record, the file cut after it (a torn tail of
 * an earlier attempt goes), fsync.  Until it is all there, a reader stops
 * before it (the turn before stands).  0, -1 (I/O error, logged: retried),
 * -2 (lease lost), -3 (the file is not the one the record follows: removed
 * or replaced behind this node's back; logged, the index forgets it and
 * the session's next write is a base). */
static int run_append(struct smol_spill *sp, struct job *j, struct smol_spill_header *h)
{
    const char *step = "open";
    int fd = openat(sp->dirfd, j->name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    int bad = fd < 0, e = errno;
    unsigned char raw[sizeof *h];
    struct smol_spill_header first;
    struct stat st;
    if ((bad && e == ENOENT) ||
        (!bad && (fstat(fd, &st) || (uint64_t)st.st_size < (uint64_t)j->off ||
                  pread(fd, raw, sizeof raw, 0) != (ssize_t)sizeof raw || read_header(raw, sizeof raw, &first) ||
                  first.file_id != h->file_id))) {
        smol_log_warn("spill: a turn of session '%s' not appended to %s/%s: the file is not the one it follows "
                      "(removed or replaced meanwhile); the session's next write is whole", j->id, sp->dir, j->name);
        if (fd >= 0) close(fd);
        return -3;
    }
    if (!bad && j->leased && lease_advance(sp, j, &h->gen)) {
        close(fd);
        return -2;
    }
    h->header_hash = header_hash(h);
    if (!bad && (step = "write", lseek(fd, (off_t)j->off, SEEK_SET) < 0 || write_full(fd, h, sizeof *h) ||
                 write_full(fd, j->image + sizeof *h, j->bytes - sizeof *h)))
        bad = 1, e = errno;
    if (!bad && (step = "truncate", ftruncate(fd, (off_t)(j->off + j->bytes)))) bad = 1, e = errno;
    if (!bad && (step = "fsync", fsync(fd))) {
        bad = 1, e = errno;
        if (ftruncate(fd, (off_t)j->off)) { /* (the turn before, as far as this node can tell) */ }
    }
    if (fd >= 0 && close(fd) && !bad) { bad = 1; e = errno; step = "close"; }
    if (bad) {
        smol_log_warn("spill: a turn of session '%s' not appended to %s/%s (%s: %s); the turn before stands, retried "
                      "(attempt %d)", j->id, sp->dir, j->name, step, strerror(e ? e : EIO), j->tries + 1);
        return -1;
    }
    return 0;
}

/* JOB_WRITE: checksums, then (a base) temporary file, fsync, rename, fsync
 * of the directory, or (an append) run_append.  0 when all of it
 * succeeded; -1 on an I/O error at any step (logged): the temporary file
 * is removed and the file of the name is left as it was (the previous good
 * state stands; after a rename whose directory fsync failed, the new one,
 * which the retry writes again); the caller retries the job.  -2: the
 * lease was lost (shared), the file left as the other node made it. */
static int run_write(struct smol_spill *sp, struct job *j)
{
    /* the image is read by smol_spill_load meanwhile: it is not changed */
    struct smol_spill_header h;
    memcpy(&h, j->image, sizeof h);
    char tmp[160];
    h.payload_hash = XXH3_64bits(j->image + sizeof h, j->bytes - sizeof h);
    if (j->off >= 0) return run_append(sp, j, &h);
    if (j->leased) { /* the generation this write will advance the lease to (lease_advance) */
        pthread_mutex_lock(&sp->mu);
        const struct lease *l = lease_of(sp, j->name, 0);
        h.gen = l ? l->gen + 1 : 0;
        pthread_mutex_unlock(&sp->mu);
    }
    h.header_hash = header_hash(&h);
    snprintf(tmp, sizeof tmp, ".tmp-%.32s-%s", j->name, sp->node);
    const char *step = "open";
    int fd = openat(sp->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int bad = fd < 0;
    if (!bad && (step = "write", write_full(fd, &h, sizeof h) || write_full(fd, j->image + sizeof h, j->bytes - sizeof h)))
        bad = 1;
    if (!bad && (step = "fsync", fsync(fd))) bad = 1;
    int e = errno;
    if (fd >= 0 && close(fd) && !bad) { bad = 1; e = errno; step = "close"; }
    /* a shared directory: replaced only while this node holds the session's
     * lease and nobody wrote it since; else left as it is */
    if (!bad && j->leased && lease_advance(sp, j, NULL)) {
        unlinkat(sp->dirfd, tmp, 0);
        return -2;
    }
    if (!bad && renameat(sp->dirfd, tmp, sp->dirfd, j->name)) { bad = 1; e = errno; step = "rename"; }
    if (!bad && fsync(sp->dirfd)) { bad = 1; e = errno; step = "fsync of the directory"; }
    if (bad) {
        unlinkat(sp->dirfd, tmp, 0); /* (ENOENT once renamed) */
        smol_log_warn("spill: session '%s' not written to %s/%s (%s: %s); the previous file stands, retried "
                      "(attempt %d)", j->id, sp->dir, j->name, step, strerror(e ? e : EIO), j->tries + 1);
        return -1;
    }
    return 0;
}

static int64_t mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* under sp->mu: the index drops name (the engine thread, reap_failed); 0,
 * or -1 when the list is full (the caller stops for now) */
static int forget_locked(struct smol_spill *sp, const char *name)
{
    if (sp->n_failed >= (int)(sizeof sp->failed / sizeof sp->failed[0])) return -1;
    snprintf(sp->failed[sp->n_failed++], NAME_LEN + 1, "%s", name);
    return 0;
}

/* JOB_UNLINK: the file (unless the lease was lost, or, unused_since set, it
 * was used since), then, in a shared directory, its lock file, while the
 * lock is held and no other reference of this node needs it (spill.h). */
static void run_unlink(struct smol_spill *sp, struct job *j)
{
    if (j->leased && lease_advance(sp, j, NULL)) return; /* another node's now: left alone */
    struct stat st;
    if (j->unused_since && !fstatat(sp->dirfd, j->name, &st, AT_SYMLINK_NOFOLLOW) && mtime_ns(&st) > j->unused_since) {
        smol_log_info("spill: %s/%s left in place: used since it was indexed", sp->dir, j->name);
        return;
    }
    if (unlinkat(sp->dirfd, j->name, 0) && errno != ENOENT) {
        smol_log_warn("spill: cannot remove %s/%s: %s", sp->dir, j->name, strerror(errno));
        return;
    }
    if (!j->leased) return;
    char lk[NAME_LEN + 8];
    snprintf(lk, sizeof lk, "%.32s.lock", j->name);
    pthread_mutex_lock(&sp->mu);
    struct lease *l = lease_of(sp, j->name, 0);
    if (l && l->refs == 1 && l->fd >= 0 && !unlinkat(sp->dirfd, lk, 0)) {
        l->unlinked = 1;
        l->gen = 0; /* a new lock file starts at 0: nothing on disk, as this node knows */
    }
    pthread_mutex_unlock(&sp->mu);
}

/* The file server's time now (ns), which stamps the files' mtimes: that of
 * a probe file made and removed here (the local clock may run fast or
 * slow); -1 if it cannot be made. */
static int64_t server_now(struct smol_spill *sp)
{
    char probe[128];
    snprintf(probe, sizeof probe, ".tmp-clock-%s", sp->node);
    int fd = openat(sp->dirfd, probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    struct stat st;
    const int64_t t = !futimens(fd, NULL) && !fstat(fd, &st) ? mtime_ns(&st) : -1;
    close(fd);
    unlinkat(sp->dirfd, probe, 0);
    return t;
}

#define TMP_AGE_NS (3600ll * 1000000000) /* a temporary file this old is no write under way */

/* JOB_SWEEP: temporary files an hour old by the file server's clock; with
 * ttl_ns, session and prefix files that nobody used for ttl_ns (their
 * mtime: written or read), and lock files without a session file as old,
 * each removed while its lock is held here (no node is in a turn of it;
 * none of this node's references) and found as old again under it. */
static void run_sweep(struct smol_spill *sp, int64_t ttl_ns)
{
    const int64_t now = server_now(sp);
    int fd = openat(sp->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (now < 0 || !d) {
        if (d) closedir(d);
        else if (fd >= 0) close(fd);
        smol_log_warn("spill: cannot sweep %s: %s", sp->dir, strerror(errno));
        return;
    }
    struct dirent *de;
    int removed = 0, full = 0;
    while ((de = readdir(d)) && !full) {
        const char *n = de->d_name;
        struct stat st;
        if (fstatat(sp->dirfd, n, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode)) continue;
        if (!strncmp(n, ".tmp-", 5)) {
            if (now - mtime_ns(&st) > TMP_AGE_NS && !unlinkat(sp->dirfd, n, 0))
                smol_log_info("spill: removed %s/%s (an unfinished write, an hour old)", sp->dir, n);
            continue;
        }
        const int is_lock = strlen(n) == 37 && !strcmp(n + 32, ".lock");
        if (!ttl_ns || (!is_our_name(n) && !is_lock) || now - mtime_ns(&st) <= ttl_ns) continue;
        char name[NAME_LEN + 1], lk[NAME_LEN + 8];
        snprintf(name, sizeof name, "%.32s.kv", n);
        snprintf(lk, sizeof lk, "%.32s.lock", n);
        pthread_mutex_lock(&sp->mu);
        const struct lease *l = lease_of(sp, name, 0);
        const int ours = l && l->refs > 0;
        pthread_mutex_unlock(&sp->mu);
        /* (no mutex held over the filesystem: the lock file's OFD lock keeps
         * this node's engine thread out as it keeps other nodes out) */
        int lfd = -1;
        if (!ours && (!sp->shared || !lock_open(sp, lk, &lfd))) {
            struct stat kst;
            const int has_kv = !fstatat(sp->dirfd, name, &kst, AT_SYMLINK_NOFOLLOW);
            if (!has_kv || now - mtime_ns(&kst) > ttl_ns) { /* still unused, under the lock */
                if (has_kv && !unlinkat(sp->dirfd, name, 0)) {
                    removed++;
                    pthread_mutex_lock(&sp->mu);
                    full = forget_locked(sp, name) != 0;
                    pthread_mutex_unlock(&sp->mu);
                }
                if (lfd >= 0) unlinkat(sp->dirfd, lk, 0);
            }
        }
        if (lfd >= 0) close(lfd);
    }
    closedir(d);
    if (removed) smol_log_info("spill: %s: %d files unused for %.0f s removed", sp->dir, removed, ttl_ns / 1e9);
}

/* JOB_READ: the whole file into memory (checked by smol_spill_load) */
static void run_read(struct smol_spill *sp, struct job *j)
{
    struct stat st;
    int fd = openat(sp->dirfd, j->name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) j->read_err = "cannot be read as a regular file";
    else if (!(j->image = malloc((size_t)st.st_size + 1))) j->read_err = "out of memory for reading it";
    else if (read_full(fd, j->image, (size_t)st.st_size)) j->read_err = "short read";
    else j->bytes = (uint64_t)st.st_size;
    if (fd >= 0) {
        if (!j->read_err) futimens(fd, NULL); /* recently used, also for the next process */
        close(fd);
    }
}

/* under sp->mu: takes j out of the queue */
static void unqueue_locked(struct smol_spill *sp, struct job *j)
{
    struct job *prev = NULL;
    for (struct job *k = sp->q_head; k && k != j; k = k->next) prev = k;
    if (prev) prev->next = j->next;
    else sp->q_head = j->next;
    if (sp->q_tail == j) sp->q_tail = prev;
    j->next = NULL;
}

/* under sp->mu: drops a queued job that will not run (a failed write that a
 * newer job on its name supersedes) */
static void drop_job_locked(struct smol_spill *sp, struct job *j)
{
    unqueue_locked(sp, j);
    if (j->leased) lease_put_locked(sp, j->name);
    j->leased = 0;
    sp->q_bytes -= j->bytes;
    j->finished = 1;
    job_unref(j);
}

/* under sp->mu: the first job that may run now (a failed write waits for
 * its backoff, but not once the spill is closing), or NULL; *until = the
 * earliest time a waiting one may run (0: none waits).  A failed write
 * queued before a newer job on its name is dropped: the newer one decides
 * what the file holds. */
static struct job *next_job(struct smol_spill *sp, double *until)
{
    const double now = smol_mono_s();
    *until = 0;
    for (struct job *j = sp->q_head, *nx; j; j = nx) {
        nx = j->next;
        if (j->tries && !sp->stop && j->not_before > now) {
            if (!*until || j->not_before < *until) *until = j->not_before;
            continue;
        }
        /* jobs on one name run in order; a failed write before j waits
         * for its retry if j is an append (which follows it), else j
         * supersedes it (below) */
        const int append = j->kind == JOB_WRITE && j->off >= 0;
        int behind = 0;
        for (struct job *k = sp->q_head; k != j && !behind; k = k->next)
            behind = !strcmp(k->name, j->name) && (!k->tries || append);
        if (behind) continue;
        for (struct job *k = sp->q_head, *kn; k != j; k = kn) {
            kn = k->next;
            if (k->tries && !strcmp(k->name, j->name)) drop_job_locked(sp, k);
        }
        return j;
    }
    return NULL;
}

/* under sp->mu: 1 while a job has not been tried yet or runs (what
 * smol_spill_flush waits for; failed writes waiting for a retry do not count) */
static int busy_locked(const struct smol_spill *sp)
{
    for (const struct job *j = sp->q_head; j; j = j->next)
        if (!j->tries || j->running) return 1;
    return 0;
}

static void *writer_main(void *arg)
{
    struct smol_spill *sp = arg;
    pthread_mutex_lock(&sp->mu);
    for (;;) {
        double until = 0;
        struct job *j = sp->paused && !sp->stop ? NULL : next_job(sp, &until);
        if (!j) {
            if (sp->stop && !sp->q_head) break; /* stopping, nothing left */
            if (until > 0 && !sp->paused) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts); /* (the condition's clock) */
                const double d = until - smol_mono_s() + 1e-3;
                const int64_t ns = ts.tv_nsec + (int64_t)(d > 0 ? d * 1e9 : 0);
                ts.tv_sec += ns / 1000000000;
                ts.tv_nsec = ns % 1000000000;
                pthread_cond_timedwait(&sp->wake, &sp->mu, &ts);
            } else {
                pthread_cond_wait(&sp->wake, &sp->mu);
            }
            continue;
        }
        j->running = 1;
        pthread_mutex_unlock(&sp->mu);
        double t0 = smol_mono_s();
        int bad = 0;
        if (j->kind == JOB_WRITE) bad = run_write(sp, j);
        else if (j->kind == JOB_READ) run_read(sp, j);
        else if (j->kind == JOB_SWEEP) run_sweep(sp, j->unused_since);
        else run_unlink(sp, j);
        const double dt = smol_mono_s() - t0;
        if (j->kind == JOB_WRITE && !bad)
            smol_log_info("spill: %s '%s' written to %s: %d tokens, %.1f MiB in %.0f ms%s",
                          j->prefix ? "cached prefix" : "session", j->id, j->name, j->n_kv, j->bytes / 1048576.0,
                          (smol_mono_s() - t0) * 1e3, j->tries ? " (retried)" : "");
        pthread_mutex_lock(&sp->mu);
        j->running = 0;
        if (j->kind == JOB_WRITE && bad == -1) {
            sp->st.write_errors++;
            int later = 0; /* a newer job on the name supersedes it (not an append, which follows it) */
            for (struct job *k = j->next; k && !later; k = k->next)
                later = !strcmp(k->name, j->name) && !(k->kind == JOB_WRITE && k->off >= 0);
            if (!later && !sp->stop) { /* written again after a backoff: the image and the lease are kept */
                double wait = sp->retry_first_s;
                for (int i = 0; i < j->tries && wait < sp->retry_max_s; i++) wait *= 2;
                j->tries++;
                j->not_before = smol_mono_s() + (wait < sp->retry_max_s ? wait : sp->retry_max_s);
                /* (it keeps its place: the jobs behind it on its name follow it) */
                pthread_cond_broadcast(&sp->done);
                continue;
            }
            if (!later)
                smol_log_warn("spill: session '%s' not written to %s/%s: given up at close after %d attempts", j->id,
                              sp->dir, j->name, j->tries + 1);
        }
        if (j->leased) lease_put_locked(sp, j->name);
        j->leased = 0;
        if (j->kind == JOB_WRITE) {
            if (!bad) sp->st.write_s += dt;
            if (!bad) sp->st.bytes_written += j->bytes;
            if (!bad && j->off >= 0) sp->st.appends++;
            if (!bad && j->compact) sp->st.compactions++;
            if (!bad && j->prefix) sp->st.prefixes_written++;
            else if (!bad) sp->st.written++;
            else if (bad == -2 || bad == -3) forget_locked(sp, j->name);
        }
        unqueue_locked(sp, j);
        j->finished = 1;
        int later = 0; /* a write or removal queued behind the read makes it stale */
        for (struct job *k = sp->q_head; k && !later; k = k->next) later = !strcmp(k->name, j->name);
        if (j->kind == JOB_READ && later) {
            job_unref(j);
        } else if (j->kind == JOB_READ) { /* kept for the turn that asked for it */
            j->next = sp->ready;
            sp->ready = j;
            if (++sp->n_ready > SPILL_READY_MAX) {
                struct job **pp = &sp->ready;
                while ((*pp)->next) pp = &(*pp)->next;
                job_unref(*pp);
                *pp = NULL;
                sp->n_ready--;
            }
        } else {
            sp->q_bytes -= j->bytes;
            job_unref(j);
        }
        pthread_cond_broadcast(&sp->done);
    }
    pthread_mutex_unlock(&sp->mu);
    return NULL;
}

/* The last queued job on name (a reference taken), or NULL. */
static struct job *pending_for(struct smol_spill *sp, const char *name)
{
    pthread_mutex_lock(&sp->mu);
    struct job *last = NULL;
    for (struct job *j = sp->q_head; j; j = j->next)
        if (!strcmp(j->name, name)) last = j;
    if (last) last->refs++;
    pthread_mutex_unlock(&sp->mu);
    return last;
}

/* Takes name's read-ahead out of the ready list (the caller owns it), or NULL. */
static struct job *take_ready(struct smol_spill *sp, const char *name)
{
    pthread_mutex_lock(&sp->mu);
    struct job *j = NULL;
    for (struct job **pp = &sp->ready; *pp; pp = &(*pp)->next)
        if (!strcmp((*pp)->name, name)) {
            j = *pp;
            *pp = j->next;
            sp->n_ready--;
            break;
        }
    pthread_mutex_unlock(&sp->mu);
    return j;
}

/* The file changes: what was read ahead of it is stale. */
static void drop_ready(struct smol_spill *sp, const char *name)
{
    struct job *j = take_ready(sp, name);
    if (j) {
        pthread_mutex_lock(&sp->mu);
        job_unref(j);
        pthread_mutex_unlock(&sp->mu);
    }
}

static void release(struct smol_spill *sp, struct job *j)
{
    pthread_mutex_lock(&sp->mu);
    job_unref(j);
    pthread_mutex_unlock(&sp->mu);
}

/* Writes the writer could not finish leave the index (engine thread). */
static void reap_failed(struct smol_spill *sp)
{
    pthread_mutex_lock(&sp->mu);
    for (int i = 0; i < sp->n_failed; i++) {
        int later = 0; /* a newer job on the name decides */
        for (struct job *j = sp->q_head; j; j = j->next) later |= !strcmp(j->name, sp->failed[i]);
        struct entry *e = later ? NULL : find_ent(sp, sp->failed[i]);
        if (e) drop_ent(sp, e);
    }
    sp->n_failed = 0;
    pthread_mutex_unlock(&sp->mu);
}

int smol_spill_prefetch(struct smol_spill *sp, const char *id)
{
    reap_failed(sp);
    char name[NAME_LEN + 1];
    file_name(id, name);
    struct entry *e = find_ent(sp, name);
    if (!e || e->bytes > SPILL_QUEUE_MAX) return 1; /* nothing to read, or too big to hold twice */
    pthread_mutex_lock(&sp->mu);
    struct job *last = NULL;
    for (struct job *j = sp->q_head; j; j = j->next)
        if (!strcmp(j->name, name)) last = j;
    int ready = 0;
    for (struct job *j = sp->ready; j && !ready; j = j->next) ready = !strcmp(j->name, name);
    int rc = 1;
    if (last) rc = last->kind != JOB_READ; /* a queued write's image is at hand; a read is under way */
    else if (!ready) {
        struct job *j = calloc(1, sizeof *j);
        if (j) {
            j->kind = JOB_READ;
            snprintf(j->name, sizeof j->name, "%s", name);
            snprintf(j->id, sizeof j->id, "%s", id);
            enqueue_locked(sp, j);
            rc = 0;
        }
    }
    pthread_mutex_unlock(&sp->mu);
    return rc;
}

void smol_spill_flush(struct smol_spill *sp)
{
    pthread_mutex_lock(&sp->mu);
    while (busy_locked(sp) && !sp->paused) pthread_cond_wait(&sp->done, &sp->mu);
    pthread_mutex_unlock(&sp->mu);
}

void smol_spill_sweep(struct smol_spill *sp, double ttl_s)
{
    reap_failed(sp);
    pthread_mutex_lock(&sp->mu);
    int queued = 0;
    for (struct job *j = sp->q_head; j && !queued; j = j->next) queued = j->kind == JOB_SWEEP && !j->running;
    struct job *j = queued ? NULL : calloc(1, sizeof *j);
    if (j) {
        j->kind = JOB_SWEEP;
        j->unused_since = ttl_s > 0 ? (int64_t)(ttl_s * 1e9) : 0;
        enqueue_locked(sp, j);
    }
    pthread_mutex_unlock(&sp->mu);
}

void smol_spill_set_retry(struct smol_spill *sp, double first_s, double max_s)
{
    pthread_mutex_lock(&sp->mu);
    sp->retry_first_s = first_s;
    sp->retry_max_s = max_s;
    pthread_mutex_unlock(&sp->mu);
}

void smol_spill_pause(struct smol_spill *sp, int paused)
{
    pthread_mutex_lock(&sp->mu);
    sp->paused = paused;
    pthread_cond_broadcast(&sp->wake);
    pthread_cond_broadcast(&sp->done);
    pthread_mutex_unlock(&sp->mu);
}

int smol_spill_pending(struct smol_spill *sp)
{
    pthread_mutex_lock(&sp->mu);
    int n = 0;
    for (struct job *j = sp->q_head; j; j = j->next) n++;
    pthread_mutex_unlock(&sp->mu);
    return n;
}

/* ---- open / close ------------------------------------------------------------------ */

static int read_full(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t r = write(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) errno = EIO; /* no progress: not an error the kernel named */
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static void scan(struct smol_spill *sp, const struct smol_kv *kv)
{
    int fd = openat(sp->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        smol_log_warn("spill: cannot list %s: %s", sp->dir, strerror(errno));
        return;
    }
    struct dirent *de;
    const int64_t now = sp->shared ? server_now(sp) : 0;
    while ((de = readdir(d))) {
        const char *n = de->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..")) continue;
        struct stat tst;
        if (!strncmp(n, ".tmp-", 5)) {
            /* a shared directory: another node's write may be under way;
             * an hour-old one, by the file server's clock, is not */
            if (sp->shared && (now < 0 || fstatat(sp->dirfd, n, &tst, AT_SYMLINK_NOFOLLOW) ||
                               now - mtime_ns(&tst) <= TMP_AGE_NS))
                continue;
            smol_log_info("spill: removing %s/%s (an unfinished write)", sp->dir, n);
            unlinkat(sp->dirfd, n, 0);
            continue;
        }
        if (strlen(n) == 37 && !strcmp(n + 32, ".lock")) continue; /* a session's lease (shared) */
        if (!is_our_name(n)) {
            smol_log_warn("spill: %s/%s: not a session file name; ignored", sp->dir, n);
            continue;
        }
        struct smol_spill_header h;
        unsigned char raw[sizeof h];
        struct stat stt;
        int f = openat(sp->dirfd, n, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        const char *why = NULL;
        ssize_t got = 0;
        if (f < 0 || fstat(f, &stt) || !S_ISREG(stt.st_mode)) why = "cannot be read as a regular file";
        else if ((got = pread(f, raw, sizeof raw, 0)) < 0) why = "truncated (shorter than the header)";
        else if (!(why = read_header(raw, (uint64_t)got, &h)) && !(why = check_header(sp, &h, kv, 0)) &&
                 (uint64_t)stt.st_size < h.header_bytes + h.payload_bytes)
            why = "truncated"; /* (its first record; a torn later one is the load's to find) */
        else if (!why && !(h.flags & SMOL_SPILL_F_BASE)) why = "inconsistent header";
        /* a cached prefix: its id and KV tokens go into the index (the
         * checksum covers them when the file is loaded) */
        char pid[SMOL_SPILL_KEY_MAX + 1] = "", ptenant[SMOL_RULE_TENANT_MAX + 1];
        const char *bare = pid;
        int32_t *toks = NULL;
        if (!why && (h.flags & SMOL_SPILL_F_PREFIX)) {
            if (h.id_len < SMOL_SPILL_PREFIX_ID_LEN || h.n_kv != h.n_tokens) why = "inconsistent header";
            else if (!(toks = malloc(4ull * h.n_kv + 1))) why = "out of memory for its tokens";
            else if (pread(f, pid, h.id_len, h.header_bytes) != (ssize_t)h.id_len ||
                     pread(f, toks, 4ull * h.n_kv, h.header_bytes + h.id_len) != (ssize_t)(4ull * h.n_kv))
                why = "short read";
            else if (pid[h.id_len] = 0, split_key(pid, ptenant, &bare) || strlen(bare) != SMOL_SPILL_PREFIX_ID_LEN ||
                     strncmp(bare, SMOL_SPILL_PREFIX_ID, strlen(SMOL_SPILL_PREFIX_ID)))
                why = "a cached prefix with a bad id";
        }
        if (f >= 0) close(f);
        if (why && sp->shared) { /* maybe another node's model, or one being replaced: not ours to remove */
            free(toks);
            smol_log_info("spill: %s/%s: %s; not indexed", sp->dir, n, why);
            continue;
        }
        if (why) { free(toks); reject_file(sp, n, why); continue; }
        put_ent(sp, n, (uint64_t)stt.st_size, (int64_t)stt.st_mtim.tv_sec * 1000000000 + stt.st_mtim.tv_nsec,
                toks ? pid : NULL, toks, (int)h.n_kv);
        struct entry *e = find_ent(sp, n);
        if (e) e->disk_stamp = 1;
        free(toks);
    }
    closedir(d);
}

enum smol_err smol_spill_open(struct smol_spill **out, const char *dir, uint64_t budget_bytes,
                              const struct smol_model *m, char *err)
{
    return smol_spill_open_shared(out, dir, budget_bytes, 0, m, err);
}

enum smol_err smol_spill_open_shared(struct smol_spill **out, const char *dir, uint64_t budget_bytes, int shared,
                                     const struct smol_model *m, char *err)
{
    *out = NULL;
    struct smol_spill *sp = calloc(1, sizeof *sp);
    if (!sp) return smol_errf(err, SMOL_ENOMEM, "spill: out of memory");
    if (strlen(dir) >= sizeof sp->dir) { free(sp); return smol_errf(err, SMOL_EINVAL, "kv_spill_dir: path too long"); }
    snprintf(sp->dir, sizeof sp->dir, "%s", dir);
    sp->budget = budget_bytes;
    sp->dirfd = -1;
    sp->retry_first_s = 0.1;
    sp->retry_max_s = 30;
    sp->shared = shared;
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    for (char *c = host; *c; c++) /* a file name's part */
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-')) *c = '_';
    snprintf(sp->node, sizeof sp->node, "%s-%d", host, (int)getpid());
    if (mkdir(dir, 0700) && errno != EEXIST) {
        int e = errno;
        free(sp);
        return smol_errf(err, SMOL_EIO, "kv_spill_dir %s: cannot create: %s", dir, strerror(e));
    }
    sp->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (sp->dirfd < 0 || faccessat(sp->dirfd, ".", W_OK | X_OK, AT_EACCESS)) {
        int e = errno;
        if (sp->dirfd >= 0) close(sp->dirfd);
        free(sp);
        return smol_errf(err, SMOL_EIO, "kv_spill_dir %s: %s", dir, strerror(e));
    }
    smol_spill_model_id(m, sp->model_id);
    sp->page_buf_bytes = smol_kv_page_host_bytes(&m->kv);
    pthread_mutex_init(&sp->mu, NULL);
    pthread_cond_init(&sp->wake, NULL);
    pthread_cond_init(&sp->done, NULL);
    pthread_cond_init(&sp->lease_wake, NULL);
    if (!(sp->page_buf = malloc(sp->page_buf_bytes))) {
        smol_spill_close(&sp);
        return smol_errf(err, SMOL_ENOMEM, "spill: out of memory");
    }
    if (pthread_create(&sp->thread, NULL, writer_main, sp)) {
        smol_spill_close(&sp);
        return smol_errf(err, SMOL_ENOMEM, "spill: cannot start the writer thread");
    }
    sp->have_thread = 1;
    if (shared && pthread_create(&sp->lease_thread, NULL, lease_main, sp)) {
        smol_spill_close(&sp);
        return smol_errf(err, SMOL_ENOMEM, "spill: cannot start the lease thread");
    }
    sp->have_lease_thread = shared;
    scan(sp, &m->kv);
    trim(sp, NULL);
    smol_log_info("spill: %s%s: %u session files, %.1f MiB (budget %s)", dir, shared ? " (shared)" : "", sp->st.files,
                  sp->st.bytes / 1048576.0, budget_bytes ? "set" : "none");
    *out = sp;
    return SMOL_OK;
}

void smol_spill_close(struct smol_spill **spp)
{
    if (!spp || !*spp) return;
    struct smol_spill *sp = *spp;
    if (sp->have_thread) { /* the writer finishes what is queued */
        pthread_mutex_lock(&sp->mu);
        sp->stop = 1;
        sp->paused = 0;
        pthread_cond_broadcast(&sp->wake);
        pthread_mutex_unlock(&sp->mu);
        pthread_join(sp->thread, NULL);
    }
    if (sp->have_lease_thread) {
        pthread_mutex_lock(&sp->mu);
        sp->lease_stop = 1;
        pthread_cond_broadcast(&sp->lease_wake);
        pthread_mutex_unlock(&sp->mu);
        pthread_join(sp->lease_thread, NULL);
    }
    while (sp->ready) {
        struct job *j = sp->ready;
        sp->ready = j->next;
        job_unref(j);
    }
    if (sp->page_buf_bytes) {
        pthread_mutex_destroy(&sp->mu);
        pthread_cond_destroy(&sp->wake);
        pthread_cond_destroy(&sp->done);
        pthread_cond_destroy(&sp->lease_wake);
    }
    if (sp->dirfd >= 0) close(sp->dirfd);
    for (int i = 0; i < sp->n_ent; i++) free(sp->ent[i].tokens);
    free(sp->ent);
    for (int i = 0; i < sp->n_leases; i++) /* (the writer has finished: no job holds one) */
        if (sp->leases[i].fd >= 0) close(sp->leases[i].fd);
    free(sp->leases);
    free(sp->page_buf);
    free(sp);
    *spp = NULL;
}

/* ---- save ---------------------------------------------------------------------------- */

static unsigned char *put(unsigned char *p, const void *src, size_t n)
{
    if (n) memcpy(p, src, n);
    return p + n;
}

static void prefix_id(const int32_t *tokens, int n, char out[SMOL_SPILL_PREFIX_ID_LEN + 1])
{
    XXH128_hash_t h = XXH3_128bits(tokens, (size_t)n * sizeof *tokens);
    snprintf(out, SMOL_SPILL_PREFIX_ID_LEN + 1, SMOL_SPILL_PREFIX_ID "%016llx%016llx", (unsigned long long)h.high64,
             (unsigned long long)h.low64);
}

/* 1 if a prefix file of tenant already holds tokens[0, n) (the same or a longer prefix) */
static int prefix_covered(const struct smol_spill *sp, const char *tenant, const int32_t *tokens, int n)
{
    for (int i = 0; i < sp->n_ent; i++) {
        const struct entry *e = &sp->ent[i];
        if (e->tokens && e->n_tokens >= n && smol_lcp(e->tokens, e->n_tokens, tokens, n) == n &&
            key_of_tenant(e->prefix_id, tenant))
            return 1;
    }
    return 0;
}

/* Removes tenant's prefix files that tokens[0, n) extends: the file of it
 * serves every request of that tenant they would. */
static void drop_extended(struct smol_spill *sp, const char *tenant, const int32_t *tokens, int n)
{
    for (int i = 0; i < sp->n_ent;) {
        const struct entry *e = &sp->ent[i];
        if (e->tokens && e->n_tokens < n && smol_lcp(e->tokens, e->n_tokens, tokens, n) == e->n_tokens &&
            key_of_tenant(e->prefix_id, tenant)) {
            char name[NAME_LEN + 1];
            snprintf(name, sizeof name, "%s", e->name);
            smol_log_info("spill: removing %s (a cached prefix that a longer one extends)", name);
            unlink_file(sp, name); /* the last entry moves into slot i */
        } else {
            i++;
        }
    }
}

enum smol_err smol_spill_save(struct smol_spill *sp, const struct smol_kv *kv, const struct smol_spill_record *x,
                              char *err)
{
    reap_failed(sp);
    const int prefix = !x->id[0];
    char key[SMOL_SPILL_KEY_MAX + 1], pid[SMOL_SPILL_PREFIX_ID_LEN + 1], name[NAME_LEN + 1];
    int n_kv = x->seq->n_tokens < x->n_tokens ? x->seq->n_tokens : x->n_tokens;
    if (prefix && (n_kv <= 0 || prefix_covered(sp, x->tenant, x->tokens, n_kv))) return SMOL_OK;
    if (prefix) prefix_id(x->tokens, n_kv, pid);
    smol_spill_key(x->tenant, prefix ? pid : x->id, key);
    file_name(key, name);
    /* a shared directory: one writer per session, the node holding its
     * lease (a cached prefix is the same bytes whoever writes it) */
    if (sp->shared && !prefix && !smol_spill_holds(sp, key)) {
        pthread_mutex_lock(&sp->mu);
        sp->st.unleased_refused++;
        pthread_mutex_unlock(&sp->mu);
        return smol_errf(err, SMOL_EBUSY, "session '%s' not written: this node does not hold its lease", key);
    }
    if (n_kv <= 0) {
        unlink_file(sp, name);
        return SMOL_OK;
    }
    /* a cached prefix keeps its KV tokens only: no text, messages or date */
    const int n_tok = prefix ? n_kv : x->n_tokens;
    const char *hist = x->hist_text && !prefix ? x->hist_text : NULL;
    const uint64_t hist_len = hist ? x->hist_len : 0;
    const int has_msgs = x->msgs && !prefix && json_is_array(x->msgs);
    const int n_msgs = has_msgs ? (int)json_array_size(x->msgs) : 0;
    const size_t pb = sp->page_buf_bytes;
    char **mj = calloc((size_t)n_msgs + 1, sizeof *mj);      /* each message's compact JSON */
    struct written w = {.known = 1, .n_tokens = n_tok, .n_kv = n_kv, .has_hist = !!hist, .hist_len = hist_len,
                        .has_msgs = has_msgs, .n_msgs = n_msgs};
    w.tokens = malloc((size_t)n_tok * sizeof *w.tokens + 1);
    w.msg_hash = malloc((size_t)n_msgs * sizeof *w.msg_hash + 1);
    uint64_t msgs_all = 2;                                  /* "[...]" of them all */
    int oom = !mj || !w.tokens || !w.msg_hash;
    for (int i = 0; i < n_msgs && !oom; i++) {
        if (!(mj[i] = json_dumps(json_array_get(x->msgs, (size_t)i), JSON_COMPACT | JSON_ENCODE_ANY))) oom = 1;
        else {
            w.msg_hash[i] = XXH3_64bits(mj[i], strlen(mj[i]));
            msgs_all += strlen(mj[i]) + (i > 0);
        }
    }
    if (oom) {
        for (int i = 0; mj && i < n_msgs; i++) free(mj[i]);
        free(mj);
        written_deinit(&w);
        return smol_errf(err, SMOL_ENOMEM, "spill: '%s': out of memory", key);
    }
    memcpy(w.tokens, x->tokens, (size_t)n_tok * sizeof *w.tokens);
    w.hist_hash = hist ? XXH3_64bits(hist, hist_len) : 0;
    /* what the file holds already (the records this node wrote or read):
     * the turn appends the rest, unless the dead share would pass half */
    const struct entry *e = find_ent(sp, name);
    const struct written *o = e && e->log.known && !prefix ? &e->log : NULL;
    uint32_t tok_from = 0, page_from = 0, hist_from = 0, msgs_from = 0;
    if (o) {
        tok_from = (uint32_t)smol_lcp(o->tokens, o->n_tokens, x->tokens, n_tok);
        uint32_t kv_keep = tok_from < (uint32_t)o->n_kv ? tok_from : (uint32_t)o->n_kv;
        if (kv_keep > (uint32_t)n_kv) kv_keep = (uint32_t)n_kv;
        page_from = kv_keep / SMOL_KV_PAGE;
        if (hist && o->has_hist && hist_len >= o->hist_len && XXH3_64bits(hist, o->hist_len) == o->hist_hash)
            hist_from = (uint32_t)o->hist_len;
        if (has_msgs && o->has_msgs)
            while ((int)msgs_from < n_msgs && (int)msgs_from < o->n_msgs && o->msg_hash[msgs_from] == w.msg_hash[msgs_from])
                msgs_from++;
    }
    const uint64_t live = sizeof(struct smol_spill_header) + strlen(key) + 4ull * n_tok + hist_len +
                          (has_msgs ? msgs_all : 0) + (uint64_t)smol_kv_pages_for(n_kv) * pb;
    uint64_t msgs_len = 0;
    for (int pass = 0; pass < 2; pass++) {
        msgs_len = 0;
        if (has_msgs) {
            msgs_len = 2;
            for (int i = (int)msgs_from; i < n_msgs; i++) msgs_len += strlen(mj[i]) + (i > (int)msgs_from);
        }
        if (!o) break;
        const uint64_t rec = sizeof(struct smol_spill_header) + strlen(key) + 4ull * (n_tok - tok_from) +
                             (hist_len - hist_from) + msgs_len + (uint64_t)(smol_kv_pages_for(n_kv) - (int)page_from) * pb;
        /* an append while the dead share stays under half and the record is
         * under half of a base; else a new base (compaction) */
        if ((o->end + rec - live) * 2 <= o->end + rec && rec * 2 <= live) break;
        o = NULL;
        tok_from = page_from = hist_from = msgs_from = 0;
    }
    struct smol_spill_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, SMOL_SPILL_MAGIC, 8);
    h.version = SMOL_SPILL_VERSION;
    h.header_bytes = sizeof h;
    memcpy(h.model_id, sp->model_id, 16);
    h.kv_type = kv->type;
    h.n_layers = (uint32_t)kv->n_layers;
    h.n_kv_heads = (uint32_t)kv->n_kv_heads;
    h.head_dim = (uint32_t)kv->head_dim;
    h.page_tokens = SMOL_KV_PAGE;
    h.id_len = (uint32_t)strlen(key);
    h.n_tokens = (uint32_t)n_tok;
    h.n_kv = (uint32_t)n_kv;
    h.hist_len = (uint32_t)hist_len;
    h.msgs_len = (uint32_t)msgs_len;
    h.tok_from = tok_from;
    h.page_from = page_from;
    h.hist_from = hist_from;
    h.msgs_from = msgs_from;
    if (prefix) h.flags = SMOL_SPILL_F_PREFIX | SMOL_SPILL_F_BASE;
    else {
        h.flags = (x->think_set ? SMOL_SPILL_F_THINK_SET : 0) | (x->enable_thinking ? SMOL_SPILL_F_THINKING : 0) |
                  (hist ? SMOL_SPILL_F_HIST : 0) | (has_msgs ? SMOL_SPILL_F_MSGS : 0) | (o ? 0 : SMOL_SPILL_F_BASE);
        snprintf(h.date, sizeof h.date, "%s", x->date);
    }
    h.seq = o ? o->seq + 1 : e && e->log.known ? e->log.seq + 1 : 1;
    h.file_id = o ? o->file_id : XXH3_64bits_withSeed(name, NAME_LEN, (uint64_t)now_ns() ^ (uint64_t)(uintptr_t)sp);
    h.payload_bytes = (uint64_t)h.id_len + 4ull * (h.n_tokens - tok_from) + (h.hist_len - hist_from) + h.msgs_len +
                      (uint64_t)(smol_kv_pages_for(n_kv) - (int)page_from) * pb;
    const uint64_t total = sizeof h + h.payload_bytes, file_end = (o ? o->end : 0) + total;
    w.end = file_end;
    w.file_id = h.file_id;
    w.seq = h.seq;
    if (sp->budget && file_end > sp->budget) {
        for (int i = 0; i < n_msgs; i++) free(mj[i]);
        free(mj);
        written_deinit(&w);
        return smol_errf(err, SMOL_ETOOLARGE, "%s '%s': %.1f MiB exceed kv_spill_budget_mb",
                         prefix ? "cached prefix" : "session", key, file_end / 1048576.0);
    }
    /* the record's image in memory (its KV pages copied out of the pool:
     * the pages the turn added, and the partial last one again); the writer
     * thread checksums and writes it */
    const double t0 = smol_mono_s();
    pthread_mutex_lock(&sp->mu);
    while (busy_locked(sp) && sp->q_bytes + total > SPILL_QUEUE_MAX && !sp->paused) pthread_cond_wait(&sp->done, &sp->mu);
    const int full = sp->q_head && sp->q_bytes + total > SPILL_QUEUE_MAX && !sp->paused; /* of failed writes */
    pthread_mutex_unlock(&sp->mu);
    struct job *j = full ? NULL : calloc(1, sizeof *j);
    unsigned char *img = j && total <= SIZE_MAX ? malloc((size_t)total) : NULL;
    if (!img) {
        free(j);
        for (int i = 0; i < n_msgs; i++) free(mj[i]);
        free(mj);
        written_deinit(&w);
        if (full)
            return smol_errf(err, SMOL_EBUSY, "spill: '%s' not written: the queue is full of writes waiting for a retry",
                             key);
        return smol_errf(err, SMOL_ENOMEM, "spill: '%s': out of memory for %.1f MiB", key, total / 1048576.0);
    }
    unsigned char *p = put(img, &h, sizeof h);
    p = put(p, key, h.id_len);
    p = put(p, x->tokens + tok_from, 4ull * (h.n_tokens - tok_from));
    p = put(p, hist ? hist + hist_from : NULL, h.hist_len - hist_from);
    if (has_msgs) {
        *p++ = '[';
        for (int i = (int)msgs_from; i < n_msgs; i++) {
            if (i > (int)msgs_from) *p++ = ',';
            p = put(p, mj[i], strlen(mj[i]));
        }
        *p++ = ']';
    }
    for (int i = 0; i < n_msgs; i++) free(mj[i]);
    free(mj);
    const int n_pages = smol_kv_pages_for(n_kv);
    for (int i = (int)page_from; i < n_pages; i++, p += pb) smol_kv_page_read(kv, x->seq->pages[i], p);
    SMOL_ASSERT((uint64_t)(p - img) == total);
    drop_ready(sp, name);
    if (sp->shared && !prefix) { /* the write holds the lease until it is done */
        pthread_mutex_lock(&sp->mu);
        struct lease *l = lease_of(sp, name, 0);
        SMOL_ASSERT(l && l->refs > 0);
        l->refs++;
        pthread_mutex_unlock(&sp->mu);
        j->leased = 1;
    }
    j->kind = JOB_WRITE;
    snprintf(j->name, sizeof j->name, "%s", name);
    snprintf(j->id, sizeof j->id, "%s", key);
    j->image = img;
    j->bytes = total;
    j->n_kv = n_kv;
    j->prefix = prefix;
    j->off = o ? (int64_t)o->end : -1;
    j->compact = !o && e && e->log.known;
    enqueue(sp, j);
    smol_log_debug("spill: '%s' queued for %s: %s of %.1f MiB copied in %.1f ms", key, name, o ? "an append" : "a base",
                   total / 1048576.0, (smol_mono_s() - t0) * 1e3);
    put_ent(sp, name, file_end, now_ns(), prefix ? key : NULL, x->tokens, n_kv);
    struct entry *ne = find_ent(sp, name);
    if (ne && !prefix) ne->log = w;
    else written_deinit(&w);
    if (prefix) drop_extended(sp, x->tenant, x->tokens, n_kv);
    trim(sp, name);
    return SMOL_OK;
}

/* ---- load ---------------------------------------------------------------------------- */

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

static void replay_deinit(struct replay *r)
{
    free(r->tokens);
    free(r->hist);
    if (r->msgs) json_decref(r->msgs);
    free(r->page);
    memset(r, 0, sizeof *r);
}

/* Applies the record at b (n bytes available; trusted: an image of ours,
 * not checksummed yet).  0 applied; 1 skipped (an image of a record the
 * file already holds); -1 not applied, *why set (incomplete, a checksum,
 * does not follow); -2 another key; -3 out of memory. */
static int replay_one(struct smol_spill *sp, const struct smol_kv *kv, struct replay *r, const unsigned char *b,
                      uint64_t n, int trusted, int foreign, const char *key, const char **why)
{
    struct smol_spill_header h;
    if (trusted) { /* (the writer sets the hashes on its copy) */
        memcpy(&h, b, sizeof h);
        h.header_hash = header_hash(&h);
    } else if ((*why = read_header(b, n, &h))) {
        return -1;
    }
    if ((*why = check_header(sp, &h, kv, foreign))) return -1;
    if (h.header_bytes + h.payload_bytes > n) { *why = "truncated"; return -1; }
    const int base = !!(h.flags & SMOL_SPILL_F_BASE);
    if (r->n_rec && !base && (h.file_id != r->file_id || h.seq != r->seq + 1)) {
        if (trusted && h.file_id == r->file_id && h.seq <= r->seq) return 1;
        *why = "a record that does not follow";
        return -1;
    }
    if (!r->n_rec && !base) { *why = "no base record"; return -1; }
    if (!base && (h.tok_from > r->n_tokens || h.hist_from > r->hist_len || h.page_from > r->n_pages ||
                  h.msgs_from > (r->msgs ? json_array_size(r->msgs) : 0))) {
        *why = "a record that does not follow";
        return -1;
    }
    const unsigned char *pl = b + h.header_bytes;
    if (!trusted && XXH3_64bits(pl, h.payload_bytes) != h.payload_hash) { *why = "payload checksum mismatch"; return -1; }
    if (h.id_len != strlen(key) || memcmp(pl, key, h.id_len)) return -2;
    pl += h.id_len;
    json_t *add = NULL;
    const unsigned char *mp = pl + 4ull * (h.n_tokens - h.tok_from) + (h.hist_len - h.hist_from);
    if ((h.flags & SMOL_SPILL_F_MSGS) && (!(add = json_loadb((const char *)mp, h.msgs_len, 0, NULL)) || !json_is_array(add))) {
        if (add) json_decref(add);
        *why = "bad messages JSON";
        return -1;
    }
    const uint32_t n_pages = foreign ? 0 : (uint32_t)smol_kv_pages_for((int)h.n_kv);
    int32_t *tok = realloc(r->tokens, 4ull * h.n_tokens + 4);
    char *hist = tok ? realloc(r->hist, (size_t)h.hist_len + 1) : NULL;
    const unsigned char **pg = hist ? realloc(r->page, (size_t)n_pages * sizeof *pg + 1) : NULL;
    if (tok) r->tokens = tok;
    if (hist) r->hist = hist;
    if (!pg) {
        if (add) json_decref(add);
        return -3;
    }
    r->page = pg;
    memcpy(r->tokens + h.tok_from, pl, 4ull * (h.n_tokens - h.tok_from));
    pl += 4ull * (h.n_tokens - h.tok_from);
    memcpy(r->hist + h.hist_from, pl, h.hist_len - h.hist_from);
    pl += h.hist_len - h.hist_from + h.msgs_len;
    json_t *m = NULL;
    if (add) {
        m = json_array();
        for (uint32_t i = 0; m && i < h.msgs_from; i++) json_array_append(m, json_array_get(r->msgs, i));
        if (m) json_array_extend(m, add);
        json_decref(add);
        if (!m) return -3;
    }
    if (r->msgs) json_decref(r->msgs);
    r->msgs = m;
    const size_t pb = smol_kv_page_host_bytes(kv);
    for (uint32_t i = foreign ? n_pages : h.page_from; i < n_pages; i++, pl += pb) r->page[i] = pl;
    r->n_pages = n_pages;
    r->n_tokens = h.n_tokens;
    r->hist_len = h.hist_len;
    r->end = (base ? 0 : r->end) + h.header_bytes + h.payload_bytes;
    r->file_id = h.file_id;
    r->seq = h.seq;
    r->last = h;
    r->n_rec++;
    return 0;
}

/* Reads the whole file `name` into *buf (*len bytes; fewer if it shrank
 * while read): NULL, or why not. */
static const char *read_whole(struct smol_spill *sp, const char *name, unsigned char **buf, uint64_t *len, int touch)
{
    struct stat st;
    *buf = NULL;
    *len = 0;
    int fd = openat(sp->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    const char *why = NULL;
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) why = "cannot be read as a regular file";
    else if (!(*buf = malloc((size_t)st.st_size + 1))) why = "out of memory for reading it";
    while (!why && *len < (uint64_t)st.st_size) {
        ssize_t r = read(fd, *buf + *len, (size_t)((uint64_t)st.st_size - *len));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) why = "short read";
        if (r <= 0) break;
        *len += (uint64_t)r;
    }
    if (fd >= 0) {
        if (!why && touch) futimens(fd, NULL); /* recently used, also for the next process */
        close(fd);
    }
    return why;
}

/* What load() read: the file's bytes, the queued writes' images after them. */
#define LOAD_JOBS_MAX 64

/* key: the session's id, or the cached prefix's id (prefix) */
static enum smol_err load(struct smol_spill *sp, struct smol_kv *kv, int vocab, const char *key, int prefix,
                          struct smol_spill_record *x, int *pages_needed, char *err)
{
    const char *what = prefix ? "cached prefix" : "session";
    char name[NAME_LEN + 1];
    file_name(key, name);
    reap_failed(sp);
    struct entry *ent = find_ent(sp, name);
    if (!ent) return smol_errf(err, SMOL_ENOSESSION, "no spilled %s '%s'", what, key);
    double t0 = smol_mono_s();
    /* writes of this file still queued: their images follow the file's
     * records (a base among them: from the last base on, the file unread) */
    struct job *pj = pending_for(sp, name), *rd = NULL;
    if (pj && pj->kind == JOB_READ) { /* read ahead under way: wait for it */
        pthread_mutex_lock(&sp->mu);
        while (!pj->finished) pthread_cond_wait(&sp->done, &sp->mu);
        pthread_mutex_unlock(&sp->mu);
        release(sp, pj);
        pj = NULL;
    }
    if (pj && pj->kind != JOB_WRITE) {
        release(sp, pj);
        return smol_errf(err, SMOL_ENOSESSION, "no spilled %s '%s'", what, key);
    }
    if (pj) release(sp, pj);
    struct job *jobs[LOAD_JOBS_MAX];
    int n_jobs = 0;
    pthread_mutex_lock(&sp->mu);
    for (struct job *j = sp->q_head; j; j = j->next)
        if (j->kind == JOB_WRITE && !strcmp(j->name, name)) {
            if (j->off < 0) n_jobs = 0; /* a base: what came before does not count */
            if (n_jobs < LOAD_JOBS_MAX) {
                j->refs++;
                jobs[n_jobs++] = j;
            }
        }
    pthread_mutex_unlock(&sp->mu);
    const int from_base = n_jobs && jobs[0]->off < 0;
    if (!from_base) rd = take_ready(sp, name);
    struct replay r = {0};
    unsigned char *fbuf = NULL;
    uint64_t flen = 0;
    const char *why = NULL, *tail = NULL;
    int rc_key = 0, foreign = 0;
    enum smol_err rc = SMOL_OK;
    if (!from_base) {
        if (rd) why = rd->read_err;
        else why = read_whole(sp, name, &fbuf, &flen, 1);
        const unsigned char *b = rd ? rd->image : fbuf;
        const uint64_t len = rd ? rd->bytes : flen;
        struct smol_spill_header h0;
        /* a shared directory's session file of another model: its conversation without KV */
        if (!why && sp->shared && !prefix && !read_header(b, len, &h0) && check_header(sp, &h0, kv, 0) &&
            !check_header(sp, &h0, kv, 1) && !(h0.flags & SMOL_SPILL_F_PREFIX))
            foreign = 1;
        for (uint64_t off = 0; !why && off < len;) {
            const int k = replay_one(sp, kv, &r, b + off, len - off, 0, foreign, key, &tail);
            if (k == -2) { rc_key = 1; break; }
            if (k == -3) { rc = smol_errf(err, SMOL_ENOMEM, "spill: out of memory"); break; }
            if (k < 0 && !r.n_rec) why = tail;
            if (k < 0) break;
            tail = NULL;
            off = r.end;
        }
        if (!why && !rc && !rc_key && !r.n_rec) why = "truncated (shorter than the header)";
        if (!why && !rc && !rc_key && tail) {
            smol_log_info("spill: %s '%s': the records after byte %llu ignored (%s: a torn append)", what, key,
                          (unsigned long long)r.end, tail);
            pthread_mutex_lock(&sp->mu);
            sp->st.torn_records++;
            pthread_mutex_unlock(&sp->mu);
        }
    }
    for (int i = 0; i < n_jobs && !why && !rc && !rc_key; i++) {
        const char *jw = NULL;
        const int k = replay_one(sp, kv, &r, jobs[i]->image, jobs[i]->bytes, 1, 0, key, &jw);
        if (k == -3) rc = smol_errf(err, SMOL_ENOMEM, "spill: out of memory");
        else if (k == -2) rc_key = 1;
        else if (k < 0) { /* (our own images follow what this node wrote: not seen) */
            smol_log_warn("spill: %s '%s': a queued write does not follow the file (%s); read without it", what,
                          key, jw);
            break;
        }
    }
    if (rc_key && !rc) rc = smol_errf(err, SMOL_ENOSESSION, "no spilled %s '%s'", what, key);
    const struct smol_spill_header *h = &r.last;
    if (!why && !rc && !(h->flags & SMOL_SPILL_F_PREFIX) != !prefix)
        why = "a session file under a cached prefix's name, or the reverse";
    for (uint32_t i = 0; !why && !rc && !foreign && i < r.n_tokens; i++)
        if (r.tokens[i] < 0 || r.tokens[i] >= vocab) why = "token id out of range";
    const int n_pages = foreign ? 0 : smol_kv_pages_for((int)h->n_kv);
    if (!why && !rc && n_pages > kv->n_free) {
        *pages_needed = n_pages;
        rc = smol_errf(err, SMOL_EBUSY, "spilled %s '%s' needs %d free KV pages", what, key, n_pages);
    }
    if (!why && !rc && !foreign && !(rc = smol_kv_seq_reserve(kv, x->seq, 0, (int)h->n_kv, err)))
        for (int i = 0; i < n_pages && !rc; i++) {
            memcpy(sp->page_buf, r.page[i], sp->page_buf_bytes); /* (the backend's write wants it aligned) */
            rc = smol_kv_page_write(kv, x->seq->pages[i], sp->page_buf, err);
        }
    if (!why && !rc) { /* the record takes what was read */
        const char *bare;   /* (the key compared equal: its tenant is well formed) */
        split_key(key, x->tenant, &bare);
        snprintf(x->id, sizeof x->id, "%s", prefix ? "" : bare);
        if (!foreign) {
            x->tokens = r.tokens;
            r.tokens = NULL;
            x->n_tokens = (int)r.n_tokens;
            x->seq->n_tokens = (int32_t)h->n_kv;
        } else {
            x->seq->n_tokens = 0;
        }
        if (h->flags & SMOL_SPILL_F_HIST) {
            r.hist[r.hist_len] = 0;
            x->hist_text = r.hist;
            x->hist_len = r.hist_len;
            r.hist = NULL;
        }
        snprintf(x->date, sizeof x->date, "%s", h->date);
        x->think_set = !!(h->flags & SMOL_SPILL_F_THINK_SET);
        x->enable_thinking = !!(h->flags & SMOL_SPILL_F_THINKING);
        /* the next write appends to what was read (this node's records:
         * known; another model's file is written again as a base) */
        struct written w = {.known = !foreign && !prefix, .end = r.end, .file_id = r.file_id, .seq = r.seq,
                            .n_tokens = x->n_tokens, .n_kv = x->seq->n_tokens, .has_hist = !!x->hist_text,
                            .hist_len = x->hist_len, .has_msgs = !!r.msgs};
        if (w.known) {
            w.hist_hash = x->hist_text ? XXH3_64bits(x->hist_text, x->hist_len) : 0;
            w.n_msgs = r.msgs ? (int)json_array_size(r.msgs) : 0;
            w.tokens = malloc(4ull * w.n_tokens + 4);
            w.msg_hash = malloc((size_t)w.n_msgs * 8 + 8);
            if (w.tokens) memcpy(w.tokens, x->tokens, 4ull * w.n_tokens);
            for (int i = 0; w.msg_hash && i < w.n_msgs; i++) {
                char *d = json_dumps(json_array_get(r.msgs, (size_t)i), JSON_COMPACT | JSON_ENCODE_ANY);
                if (!d) { free(w.msg_hash); w.msg_hash = NULL; break; }
                w.msg_hash[i] = XXH3_64bits(d, strlen(d));
                free(d);
            }
            if (!w.tokens || !w.msg_hash) written_deinit(&w);
        }
        written_deinit(&ent->log);
        ent->log = w;
        x->msgs = r.msgs;
        r.msgs = NULL;
        ent->stamp = now_ns();
        pthread_mutex_lock(&sp->mu);
        if (prefix) sp->st.prefixes_restored++;
        else sp->st.restored++;
        if (foreign) sp->st.history_restored++;
        sp->st.tokens_restored += (uint64_t)x->seq->n_tokens;
        if (!prefix) sp->st.restore_s += smol_mono_s() - t0;
        pthread_mutex_unlock(&sp->mu);
        if (foreign)
            smol_log_info("spill: session '%s' restored without its KV (written for another model): its %u tokens "
                          "of history are computed again", key, h->n_tokens);
        else
            smol_log_info("spill: %s '%s' restored%s: %u tokens, %d records, %.1f MiB in %.2f ms", what, key,
                          n_jobs ? " (with its writes still queued)" : rd ? " (read ahead)" : "", h->n_kv, r.n_rec,
                          r.end / 1048576.0, (smol_mono_s() - t0) * 1e3);
    }
    for (int i = 0; i < n_jobs; i++) release(sp, jobs[i]);
    if (rd) release(sp, rd);
    free(fbuf);
    replay_deinit(&r);
    if (why || (rc && rc != SMOL_EBUSY)) smol_kv_seq_truncate(kv, x->seq, 0);
    if (why) {
        reject_file(sp, name, why);
        rc = smol_errf(err, SMOL_EFORMAT, "spilled %s '%s': %s", what, key, why);
    }
    return rc;
}

void smol_spill_record_deinit(struct smol_spill_record *rec)
{
    free(rec->tokens);
    rec->tokens = NULL;
    rec->n_tokens = 0;
    free(rec->hist_text);
    rec->hist_text = NULL;
    rec->hist_len = 0;
    if (rec->msgs) json_decref(rec->msgs);
    rec->msgs = NULL;
}

enum smol_err smol_spill_load(struct smol_spill *sp, struct smol_kv *kv, int vocab, const char *id,
                              struct smol_spill_record *rec, int *pages_needed, char *err)
{
    SMOL_ASSERT(id[0]);
    return load(sp, kv, vocab, id, 0, rec, pages_needed, err);
}

enum smol_err smol_spill_load_prefix(struct smol_spill *sp, struct smol_kv *kv, int vocab, const char *id,
                                     struct smol_spill_record *rec, int *pages_needed, char *err)
{
    return load(sp, kv, vocab, id, 1, rec, pages_needed, err);
}

int smol_spill_best_prefix(struct smol_spill *sp, const char *tenant, const int32_t *ids, int n,
                           char key_out[SMOL_SPILL_KEY_MAX + 1])
{
    reap_failed(sp);
    int best = 0;
    key_out[0] = 0;
    for (int i = 0; i < sp->n_ent; i++) {
        const struct entry *e = &sp->ent[i];
        int l = e->tokens && key_of_tenant(e->prefix_id, tenant) ? smol_lcp(e->tokens, e->n_tokens, ids, n) : 0;
        if (l > best) {
            best = l;
            snprintf(key_out, SMOL_SPILL_KEY_MAX + 1, "%s", e->prefix_id);
        }
    }
    return best;
}

/* ---- misc ------------------------------------------------------------------------------ */

void smol_spill_remove(struct smol_spill *sp, const char *id)
{
    reap_failed(sp);
    char name[NAME_LEN + 1];
    file_name(id, name);
    /* (a shared directory's file may be one this node never indexed) */
    if (sp->shared || find_ent(sp, name)) unlink_file(sp, name);
}

void smol_spill_expire(struct smol_spill *sp, const char *id)
{
    reap_failed(sp);
    char name[NAME_LEN + 1];
    file_name(id, name);
    if (sp->shared) unlink_file_gen(sp, name, 0); /* only while the file is the one this node last saw */
    else if (find_ent(sp, name)) unlink_file(sp, name);
}

int smol_spill_has(struct smol_spill *sp, const char *id)
{
    reap_failed(sp);
    char name[NAME_LEN + 1];
    file_name(id, name);
    struct stat st;
    if (sp->shared) {
        /* held here: the index is as the lease found the file (no other
         * node writes it meanwhile); else another node may have written
         * or removed it */
        pthread_mutex_lock(&sp->mu);
        const struct lease *l = lease_of(sp, name, 0);
        const int held = l && l->refs > 0;
        pthread_mutex_unlock(&sp->mu);
        if (!held) return !fstatat(sp->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) && S_ISREG(st.st_mode);
    }
    return find_ent(sp, name) != NULL;
}

void smol_spill_get_stats(struct smol_spill *sp, struct smol_spill_stats *st)
{
    reap_failed(sp);
    pthread_mutex_lock(&sp->mu);
    *st = sp->st;
    pthread_mutex_unlock(&sp->mu);
}
