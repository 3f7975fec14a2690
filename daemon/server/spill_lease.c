/*
 * spill_lease.c - the leases of a shared directory (spill.h): an OFD lock
 * on <hash>.lock per session and the generation in it, taken by reference
 * and given back; the lease thread, which asks for a turn's lease off the
 * engine thread; the writer's check before it replaces or removes a file.
 *
 * Threads.  The lease records (sp->leases) are shared by three threads and
 * read and changed only under sp->mu.  The engine thread takes and gives
 * references (smol_spill_lease_async answers at once: held here, an answer
 * parked by the lease thread, or PENDING); smol_spill_lease_take locks on
 * the caller's thread with sp->mu held over lock_open (smol_spill_lease:
 * the tests and tools; the engine asks smol_spill_lease_async).  The
 * writer thread takes a removal's lease itself, and that of a write
 * queued without one (smol_spill_lease_for_removal, _for_write: no mutex
 * over lock_open; the record's asking = LEASE_ASK_WRITER meanwhile).  The
 * lease thread (smol_spill_lease_main) locks, reads the generation and
 * stats the session file with no mutex held, then parks the answer in the
 * record; a lock nobody comes for within 2 s is let go.  A lease whose last reference the engine gives back
 * (smol_spill_unlease) is marked closing and its descriptor closed on the
 * lease thread, first thing when it wakes (closing 2 while the close runs:
 * a taker waits for it rather than find this node's own lock); taken again
 * before that, the lease is reused as held (the lock never let go).  The
 * writer thread calls smol_spill_lease_advance just before it renames,
 * appends or unlinks: no mutex over its fcntl and pwrite.
 */
#include "daemon/server/spill_internal.h"
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

/* ---- leases (a shared directory) ----------------------------------------------------- */

#define LEASES_KEPT 8192        /* lease records (held or not) before those not held are forgotten */
#define LEASE_ANSWER_KEEP_S 2.0 /* a lock the lease thread took that nobody came for is let go after this */

/* under sp->mu; NULL on OOM (add) or when there is none (!add).  The pointer
 * is good until the mutex is released. */
struct lease *smol_spill_lease_of(struct smol_spill *sp, const char *name, int add)
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

/* under sp->mu: as smol_spill_lease_put_locked, but the descriptor of the
 * last reference is handed back (>= 0; the lock goes when the caller closes
 * it, after it releases the mutex: on a network filesystem a close is a
 * round trip), or -1. */
int smol_spill_lease_release_locked(struct smol_spill *sp, const char *name)
{
    struct lease *l = smol_spill_lease_of(sp, name, 0);
    if (!l || l->refs <= 0 || --l->refs > 0) return -1;
    const int fd = l->fd;
    l->fd = -1;
    return fd;
}

/* under sp->mu: drops one reference; the last one unlocks. */
void smol_spill_lease_put_locked(struct smol_spill *sp, const char *name)
{
    const int fd = smol_spill_lease_release_locked(sp, name);
    if (fd >= 0) close(fd); /* the OFD lock goes with the last descriptor of it */
}

/* Opens and locks lock file lk (an OFD write lock, never waiting; created
 * if missing): 0 (*fd locked), 1 (another open file description holds it:
 * another node, or this one's sweep), -1 (errno).  A lock file is removed
 * only by the holder of its lock (with its session's file), so a lock
 * taken on a file that is no longer the one under its name (removed
 * meanwhile) is given up and taken again on the new one. */
int smol_spill_lock_open(struct smol_spill *sp, const char *lk, int *fd_out)
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
 * (logged).  The caller's thread, sp->mu held over the lock (smol_spill_lease:
 * tests and tools; the engine asks smol_spill_lease_async). */
int smol_spill_lease_take(struct smol_spill *sp, const char *name)
{
    pthread_mutex_lock(&sp->mu);
    struct lease *l = smol_spill_lease_of(sp, name, 1);
    /* being closed on the lease thread, or given back on a removed lock
     * file: waited for (a sync lease: the tests', not the engine's) */
    while (l && sp->have_lease_thread && (l->closing == 2 || (l->closing == 1 && l->unlinked))) {
        pthread_cond_wait(&sp->done, &sp->mu);
        l = smol_spill_lease_of(sp, name, 1);
    }
    if (!l) {
        pthread_mutex_unlock(&sp->mu);
        return SMOL_LEASE_ERROR;
    }
    if ((l->refs > 0 && l->unlinked) || l->asking == LEASE_ASK_WRITER) { /* its removal is under way: asked again after it */
        pthread_mutex_unlock(&sp->mu);
        return SMOL_LEASE_ELSEWHERE;
    }
    if (l->refs > 0) {
        l->refs++;
        pthread_mutex_unlock(&sp->mu);
        return SMOL_LEASE_HELD;
    }
    if (l->closing == 1 && !l->unlinked) { /* given back, not closed yet: held all along */
        l->closing = 0;
        l->refs = 1;
        pthread_mutex_unlock(&sp->mu);
        return SMOL_LEASE_HELD;
    }
    if (l->fd >= 0) { /* locked by the lease thread, its answer not taken yet: taken here */
        const int a = l->answer;
        l->answer = LEASE_NONE;
        l->refs = 1;
        if (a == SMOL_LEASE_CHANGED) smol_spill_drop_unleased_locked(sp, name);
        pthread_mutex_unlock(&sp->mu);
        return a;
    }
    char lk[NAME_LEN + 8];
    snprintf(lk, sizeof lk, "%.32s.lock", name);
    int fd = -1;
    const int r = smol_spill_lock_open(sp, lk, &fd);
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
    if (changed) smol_spill_drop_unleased_locked(sp, name);
    pthread_mutex_unlock(&sp->mu);
    return changed ? SMOL_LEASE_CHANGED : SMOL_LEASE_HELD;
}

int smol_spill_shared(const struct smol_spill *sp)
{
    return sp->shared;
}

/* The lease thread: takes each lease asked (lock_open without waiting, the
 * generation, a stat of the session file) with no mutex held over the
 * filesystem, and leaves the answer in the lease record for the engine
 * thread (smol_spill_lease_async). */
void *smol_spill_lease_main(void *arg)
{
    struct smol_spill *sp = arg;
    pthread_setname_np(pthread_self(), "spill-lease");
    pthread_mutex_lock(&sp->mu);
    for (;;) {
        struct lease *l = NULL;
        for (int i = 0; i < sp->n_leases && !l; i++)
            if (sp->leases[i].asking == 1) l = &sp->leases[i];
        if (sp->lease_stop) break;
        { /* the leases the engine gave back: closed here first (before any
             * ask); closing = 2 (fd kept) until closed, so that no taker
             * locks anew meanwhile and finds this node's own lock */
            int fds[64], n_fds = 0;
            for (int i = 0; i < sp->n_leases && n_fds < 64; i++) {
                struct lease *o = &sp->leases[i];
                if (o->closing != 1) continue;
                fds[n_fds++] = o->fd;
                o->closing = 2;
            }
            if (n_fds) {
                pthread_mutex_unlock(&sp->mu);
                for (int i = 0; i < n_fds; i++) close(fds[i]);
                pthread_mutex_lock(&sp->mu);
                for (int i = 0; i < sp->n_leases; i++)
                    if (sp->leases[i].closing == 2) {
                        sp->leases[i].fd = -1;
                        sp->leases[i].closing = 0;
                    }
                pthread_cond_broadcast(&sp->done); /* (smol_spill_flush, and takers waiting) */
                continue;
            }
        }
        if (!l) { /* let go of the locks taken for turns that went away meanwhile */
            const double now = smol_mono_s();
            int parked = 0, fds[64], n_fds = 0;
            for (int i = 0; i < sp->n_leases && n_fds < 64; i++) {
                struct lease *o = &sp->leases[i];
                if (o->refs > 0 || o->answer == LEASE_NONE) continue;
                if (now - o->answered_at <= LEASE_ANSWER_KEEP_S) { parked = 1; continue; }
                if (o->fd >= 0) fds[n_fds++] = o->fd;
                o->fd = -1;
                o->answer = LEASE_NONE;
            }
            if (n_fds) { /* (closed with no mutex held: a round trip each on a network filesystem) */
                pthread_mutex_unlock(&sp->mu);
                for (int i = 0; i < n_fds; i++) close(fds[i]);
                pthread_mutex_lock(&sp->mu);
                continue;
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
        const int r = smol_spill_lock_open(sp, lk, &fd);
        const int e = errno;
        const uint64_t gen = r ? 0 : read_gen(fd);
        struct stat st;
        const int exists = !r && !fstatat(sp->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) && S_ISREG(st.st_mode);
        if (r < 0) smol_log_warn("spill: %s/%s: cannot lock: %s", sp->dir, lk, strerror(e));
        pthread_mutex_lock(&sp->mu);
        l = smol_spill_lease_of(sp, name, 0); /* (records kept while asking: still there) */
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
        l->mtime = exists ? smol_spill_mtime_ns(&st) : 0;
    }
    pthread_mutex_unlock(&sp->mu);
    return NULL;
}

/* Writer thread: takes a reference to name's lease for a job, locking the
 * lock file here when this node does not hold it, with no mutex held over
 * the filesystem (the record says asking = LEASE_ASK_WRITER meanwhile: the
 * engine thread's asks wait, PENDING).  SMOL_LEASE_HELD or CHANGED (the
 * reference taken), ELSEWHERE or ERROR.  wj, a write queued without the
 * lease: anything but HELD marks it stale in the same critical section,
 * so that a turn sharing the reference meanwhile (HELD at once) never
 * loads its image (smol_spill_load skips stale jobs). */
static int lease_on_writer(struct smol_spill *sp, const char *name, struct job *wj)
{
    int r = SMOL_LEASE_ERROR;
    pthread_mutex_lock(&sp->mu);
    struct lease *l = smol_spill_lease_of(sp, name, 1);
    while (l && (l->asking == 2 || l->closing == 2)) { /* the lease thread locks it now (a turn
                                                          asked): its answer, then; or closes it */
        pthread_mutex_unlock(&sp->mu);
        usleep(1000);
        pthread_mutex_lock(&sp->mu);
        l = smol_spill_lease_of(sp, name, 1);
    }
    int lock_here = 0, stale = -1;
    if (l && l->closing == 1) { /* given back by the engine, not closed yet */
        if (!l->unlinked) {
            l->refs = 1;
            r = SMOL_LEASE_HELD;
        } else { /* of a removed lock file: closed here, then locked anew */
            stale = l->fd;
            l->fd = -1;
            l->asking = LEASE_ASK_WRITER;
            lock_here = 1;
        }
        l->closing = 0;
    }
    else if (!l) r = SMOL_LEASE_ERROR;
    else if (l->refs > 0 && l->unlinked) r = SMOL_LEASE_ELSEWHERE; /* its removal is under way */
    else if (l->refs > 0) { l->refs++; r = SMOL_LEASE_HELD; }
    else if (l->fd >= 0) { /* locked by the lease thread, its answer not taken yet: taken here */
        r = l->answer;
        l->answer = LEASE_NONE;
        l->refs = 1;
    } else { /* (an ask queued for the lease thread is taken over: the turn then shares the lease) */
        l->asking = LEASE_ASK_WRITER;
        lock_here = 1;
    }
    if (wj && !lock_here && r != SMOL_LEASE_HELD) wj->stale = 1;
    pthread_mutex_unlock(&sp->mu);
    if (stale >= 0) close(stale);
    if (lock_here) {
        char lk[NAME_LEN + 8];
        snprintf(lk, sizeof lk, "%.32s.lock", name);
        int fd = -1;
        const int lr = smol_spill_lock_open(sp, lk, &fd);
        const int e = errno;
        const uint64_t gen = lr ? 0 : read_gen(fd);
        if (lr < 0) smol_log_warn("spill: %s/%s: cannot lock: %s", sp->dir, lk, strerror(e));
        pthread_mutex_lock(&sp->mu);
        l = smol_spill_lease_of(sp, name, 0); /* (kept while asking) */
        l->asking = 0;
        if (lr) {
            if (lr > 0) sp->st.lease_refused++;
            r = lr > 0 ? SMOL_LEASE_ELSEWHERE : SMOL_LEASE_ERROR;
        } else {
            r = gen != l->gen ? SMOL_LEASE_CHANGED : SMOL_LEASE_HELD;
            l->fd = fd;
            l->unlinked = 0;
            l->refs = 1;
            l->gen = gen;
        }
        if (wj && r != SMOL_LEASE_HELD) wj->stale = 1;
        pthread_mutex_unlock(&sp->mu);
    }
    return r;
}

/* Writer thread: a job refused by lease_on_writer's answer r: the
 * reference given back (held), logged; 1. */
static int lease_refused(struct smol_spill *sp, const struct job *j, int r)
{
    if (r == SMOL_LEASE_HELD || r == SMOL_LEASE_CHANGED) {
        pthread_mutex_lock(&sp->mu);
        const int fd = smol_spill_lease_release_locked(sp, j->name);
        pthread_mutex_unlock(&sp->mu);
        if (fd >= 0) close(fd);
    }
    const char *why = r == SMOL_LEASE_CHANGED ? "another node wrote it since"
                      : r == SMOL_LEASE_ERROR ? "its lock file cannot be locked" : "another node holds it";
    if (j->kind == JOB_WRITE) smol_log_info("spill: session '%s' not written to %s/%s: %s", j->id, sp->dir, j->name, why);
    else smol_log_info("spill: %s/%s left in place: %s", sp->dir, j->name, why);
    return 1;
}

/* Writer thread, a removal's turn (JOB_UNLINK, rm_take): takes a
 * reference to the file's lease for the job (j->leased; given back when it
 * is done; lease_on_writer).  Then j->rm_mode decides as unlink_file_gen
 * (spill_index.c) once did on the engine thread: 0, the file is to be
 * removed (j->unused_since set for RM_UNUSED), or 1, left in place
 * (logged; the reference given back). */
int smol_spill_lease_for_removal(struct smol_spill *sp, struct job *j)
{
    const int r = lease_on_writer(sp, j->name, NULL);
    /* (CHANGED: the generation now on disk was read, which lease_advance
     * checks again before the file is removed) */
    j->unused_since = r == SMOL_LEASE_CHANGED && j->rm_mode == RM_UNUSED && j->indexed ? j->indexed : 0;
    if (r == SMOL_LEASE_HELD || (r == SMOL_LEASE_CHANGED && (j->rm_mode == RM_ANY_GEN || j->unused_since))) {
        j->leased = 1;
        return 0;
    }
    return lease_refused(sp, j, r);
}

/* Writer thread, a write queued without the lease (JOB_WRITE, lease_take:
 * smol_spill_save_unleased, an eviction's or a drain's): 0 with the lease
 * taken for the job (j->leased), held and nobody wrote the file since this
 * node last saw it; else 1, the write dropped (logged, as an eviction on
 * the engine thread once did): another node's since (CHANGED: this node's
 * copy is stale), held elsewhere, or not lockable. */
int smol_spill_lease_for_write(struct smol_spill *sp, struct job *j)
{
    const int r = lease_on_writer(sp, j->name, j);
    /* (a reference shared with a turn that found the file CHANGED: the
     * turn marked the job stale when it took the lease, before this one) */
    pthread_mutex_lock(&sp->mu);
    const int stale = j->stale;
    pthread_mutex_unlock(&sp->mu);
    if (r == SMOL_LEASE_HELD && !stale) {
        j->leased = 1;
        return 0;
    }
    return lease_refused(sp, j, stale && r == SMOL_LEASE_HELD ? SMOL_LEASE_CHANGED : r);
}

int smol_spill_lease_async(struct smol_spill *sp, const char *id)
{
    if (!sp->shared) return SMOL_LEASE_HELD;
    if (!sp->have_lease_thread) return smol_spill_lease(sp, id);
    char name[NAME_LEN + 1];
    smol_spill_file_name(id, name);
    pthread_mutex_lock(&sp->mu);
    struct lease *l = smol_spill_lease_of(sp, name, 1);
    int r = SMOL_LEASE_PENDING, fresh = 0;
    if (!l) {
        r = SMOL_LEASE_ERROR;
    } else if (l->refs > 0) {
        if (l->unlinked) r = SMOL_LEASE_ELSEWHERE;
        else { l->refs++; r = SMOL_LEASE_HELD; }
    } else if (l->closing == 1 && !l->unlinked) { /* given back, not closed yet: held all along */
        l->closing = 0;
        l->refs = 1;
        r = SMOL_LEASE_HELD;
    } else if (l->closing) { /* being closed, or of a removed lock file: asked once the lease
                                thread closed it */
        if (!l->asking) l->asking = 1;
        pthread_cond_signal(&sp->lease_wake);
    } else if (l->answer != LEASE_NONE) {
        r = l->answer;
        l->answer = LEASE_NONE;
        if (r == SMOL_LEASE_HELD || r == SMOL_LEASE_CHANGED) l->refs = fresh = 1;
        if (r == SMOL_LEASE_CHANGED) smol_spill_drop_unleased_locked(sp, name); /* (the turn reads the file) */
    } else if (!l->asking) {
        l->asking = 1;
        pthread_cond_signal(&sp->lease_wake);
    }
    const int exists = l ? l->exists : 0;
    const uint64_t size = l ? l->size : 0;
    const int64_t mtime = l ? l->mtime : 0;
    pthread_mutex_unlock(&sp->mu);
    if (fresh) { /* the index as the lease thread found the file */
        struct entry *e = smol_spill_find_ent(sp, name);
        if (!exists) {
            if (e) smol_spill_drop_ent(sp, e);
        } else if (!e || r == SMOL_LEASE_CHANGED || e->bytes != size) {
            smol_spill_put_ent(sp, name, size, mtime, NULL, NULL, 0);
            if ((e = smol_spill_find_ent(sp, name))) e->disk_stamp = 1;
        }
        if (r == SMOL_LEASE_CHANGED) smol_spill_drop_ready(sp, name);
    }
    return r;
}

int smol_spill_lease(struct smol_spill *sp, const char *id)
{
    if (!sp->shared) return SMOL_LEASE_HELD;
    char name[NAME_LEN + 1];
    smol_spill_file_name(id, name);
    const int r = smol_spill_lease_take(sp, name);
    if (r == SMOL_LEASE_HELD || r == SMOL_LEASE_CHANGED) smol_spill_refresh_ent(sp, name, r == SMOL_LEASE_CHANGED);
    return r;
}

void smol_spill_unlease(struct smol_spill *sp, const char *id)
{
    if (!sp->shared) return;
    char name[NAME_LEN + 1];
    smol_spill_file_name(id, name);
    pthread_mutex_lock(&sp->mu);
    struct lease *l = smol_spill_lease_of(sp, name, 0);
    int fd = -1;
    if (l && l->refs == 1 && sp->have_lease_thread) {
        /* the last reference: the descriptor is closed on the lease thread
         * (a round trip on a network filesystem), never on the engine's */
        l->refs = 0;
        l->closing = 1;
        l->answer = LEASE_NONE;
        pthread_cond_signal(&sp->lease_wake);
    } else {
        fd = smol_spill_lease_release_locked(sp, name);
    }
    pthread_mutex_unlock(&sp->mu);
    if (fd >= 0) close(fd); /* (no mutex held over it) */
}

int smol_spill_holds(struct smol_spill *sp, const char *id)
{
    if (!sp->shared) return 1;
    char name[NAME_LEN + 1];
    smol_spill_file_name(id, name);
    pthread_mutex_lock(&sp->mu);
    const struct lease *l = smol_spill_lease_of(sp, name, 0);
    const int held = l && l->refs > 0;
    pthread_mutex_unlock(&sp->mu);
    return held;
}

/* Writer thread, before it replaces or removes name under its lease: 0
 * when this node still holds the lease (no other open file description
 * locks the file) and nobody wrote the file since this node last saw it
 * (the generation); then the generation is advanced, on disk first.  -1:
 * the lease was lost (logged, counted); the file is left alone.  An append
 * (j->off >= 0) checked the file itself (its file id, through the
 * descriptor it writes: only this node appends to a file it made), so a
 * generation another node advanced is no reason to drop it (a node whose
 * lock was broken may advance it late): the next one is past both. */
int smol_spill_lease_advance(struct smol_spill *sp, const struct job *j, uint64_t *gen_out)
{
    pthread_mutex_lock(&sp->mu);
    struct lease *l = smol_spill_lease_of(sp, j->name, 0);
    const int fd = l && l->refs > 0 ? l->fd : -1;
    const uint64_t gen = l ? l->gen : 0;
    pthread_mutex_unlock(&sp->mu);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    const char *why = NULL;
    if (fd < 0) why = "not held";
    else if (fcntl(fd, F_OFD_GETLK, &fl)) why = strerror(errno);
    else if (fl.l_type != F_UNLCK) why = "another node holds it";
    uint64_t disk = fd >= 0 && !why ? read_gen(fd) : gen;
    const int append = j->kind == JOB_WRITE && j->off >= 0;
    if (!why && disk != gen && !append) why = "another node wrote the session since";
    unsigned char b[8];
    const uint64_t next = (disk > gen ? disk : gen) + 1;
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
    if ((l = smol_spill_lease_of(sp, j->name, 0))) l->gen = next;
    pthread_mutex_unlock(&sp->mu);
    if (gen_out) *gen_out = next;
    return 0;
}
