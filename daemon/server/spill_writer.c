/*
 * spill_writer.c - the writer thread: a queue of jobs (write a record,
 * remove a file, read one ahead: spill_read.c, sweep the directory) run
 * in order, a failed write retried after a backoff where it stands in the
 * queue, and the names whose write was dropped (lease lost, file replaced,
 * a write queued without the lease refused it) for the index to forget.
 *
 * Threads.  The writer thread (smol_spill_writer_main) takes a job under
 * sp->mu, then runs its filesystem calls with the mutex released (a
 * session's lock file, removed while no other reference of this node is
 * taken, is first marked unlinked under it: no reference is taken
 * meanwhile); it never touches the index.
 * The engine thread queues jobs, takes read-ahead results and reaps the
 * dropped names into the index (smol_spill_reap_failed, spill_index.c),
 * all under sp->mu; a turn's lease found CHANGED drops the writes queued
 * without a lease (smol_spill_drop_unleased_locked).
 * Jobs on one name never pass each other: an append waits behind a failed
 * write of its file; a base or a removal supersedes one.
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

/* ---- the writer thread ------------------------------------------------------------- */

void smol_spill_job_unref(struct job *j)
{
    if (--j->refs == 0) {
        free(j->image);
        free(j);
    }
}

/* under sp->mu */
void smol_spill_enqueue_locked(struct smol_spill *sp, struct job *j)
{
    j->refs = 1;
    if (sp->q_tail) sp->q_tail->next = j;
    else sp->q_head = j;
    sp->q_tail = j;
    sp->q_bytes += j->bytes;
    pthread_cond_signal(&sp->wake);
}

void smol_spill_enqueue(struct smol_spill *sp, struct job *j)
{
    pthread_mutex_lock(&sp->mu);
    smol_spill_enqueue_locked(sp, j);
    pthread_mutex_unlock(&sp->mu);
}

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
                  pread(fd, raw, sizeof raw, 0) != (ssize_t)sizeof raw || smol_spill_read_header(raw, sizeof raw, &first) ||
                  first.file_id != h->file_id))) {
        smol_log_warn("spill: a turn of session '%s' not appended to %s/%s: the file is not the one it follows "
                      "(removed or replaced meanwhile); the session's next write is whole", j->id, sp->dir, j->name);
        if (fd >= 0) close(fd);
        return -3;
    }
    if (!bad && j->leased && smol_spill_lease_advance(sp, j, &h->gen)) {
        close(fd);
        return -2;
    }
    h->header_hash = smol_spill_header_hash(h);
    if (!bad && (step = "write", lseek(fd, (off_t)j->off, SEEK_SET) < 0 || smol_spill_write_full(fd, h, sizeof *h) ||
                 smol_spill_write_full(fd, j->image + sizeof *h, j->bytes - sizeof *h)))
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
    /* queued without the lease (an eviction's): taken here, once */
    if (j->lease_take && !j->leased && smol_spill_lease_for_write(sp, j)) return -2;
    if (j->leased) { /* the generation this write will advance the lease to (lease_advance) */
        pthread_mutex_lock(&sp->mu);
        const struct lease *l = smol_spill_lease_of(sp, j->name, 0);
        h.gen = l ? l->gen + 1 : 0;
        pthread_mutex_unlock(&sp->mu);
    }
    h.header_hash = smol_spill_header_hash(&h);
    /* a session's whole file under its lease: one temporary name per
     * session, made with O_EXCL; one left there is a late writer's (its
     * lock broken) or a crashed one's, and is removed first: the late
     * writer's rename then finds no file (spill.h, Fencing).  Else (no
     * lease: a cached prefix, a directory not shared) one per node. */
    if (j->leased) snprintf(tmp, sizeof tmp, ".tmp-%.32s", j->name);
    else snprintf(tmp, sizeof tmp, ".tmp-%.32s-%s", j->name, sp->node);
    const char *step = "open";
    const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (j->leased ? O_EXCL : O_TRUNC);
    int fd = openat(sp->dirfd, tmp, flags, 0600);
    if (fd < 0 && errno == EEXIST && !unlinkat(sp->dirfd, tmp, 0)) fd = openat(sp->dirfd, tmp, flags, 0600);
    int bad = fd < 0;
    if (!bad && (step = "write", smol_spill_write_full(fd, &h, sizeof h) || smol_spill_write_full(fd, j->image + sizeof h, j->bytes - sizeof h)))
        bad = 1;
    if (!bad && (step = "fsync", fsync(fd))) bad = 1;
    int e = errno;
    if (fd >= 0 && close(fd) && !bad) { bad = 1; e = errno; step = "close"; }
    /* a shared directory: replaced only while this node holds the session's
     * lease and nobody wrote it since; else left as it is */
    if (!bad && j->leased && smol_spill_lease_advance(sp, j, NULL)) {
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

/* under sp->mu: the index drops name (the engine thread, reap_failed); 0,
 * or -1 when the list is full (the caller stops for now) */
static int forget_locked(struct smol_spill *sp, const char *name)
{
    if (sp->n_failed >= (int)(sizeof sp->failed / sizeof sp->failed[0])) return -1;
    snprintf(sp->failed[sp->n_failed++], NAME_LEN + 1, "%s", name);
    return 0;
}

/* A removal under the lease, fenced (spill.h, Fencing): the file is
 * renamed to a name of this node's first (atomic: whatever file is under
 * the name then is the one taken), and its first record's generation
 * read.  A file made after this node advanced the generation to `gen` (a
 * node that took the lease over when this node's lock was broken, after
 * the check) has a later one: it is linked back under its name (unless a
 * newer file is there already) and kept.  0: removed (or none there),
 * 1: another node's file, left in place, -1: an error (logged). */
static int remove_fenced(struct smol_spill *sp, const struct job *j, uint64_t gen)
{
    char tomb[160];
    snprintf(tomb, sizeof tomb, ".tmp-rm-%.32s-%s", j->name, sp->node);
    if (renameat(sp->dirfd, j->name, sp->dirfd, tomb)) {
        if (errno == ENOENT) return 0;
        smol_log_warn("spill: cannot remove %s/%s: %s", sp->dir, j->name, strerror(errno));
        return -1;
    }
    unsigned char raw[sizeof(struct smol_spill_header)];
    struct smol_spill_header h;
    int fd = openat(sp->dirfd, tomb, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    const int later = fd >= 0 && pread(fd, raw, sizeof raw, 0) == (ssize_t)sizeof raw &&
                      !smol_spill_read_header(raw, sizeof raw, &h) && h.gen > gen;
    if (fd >= 0) close(fd);
    if (later) { /* (EEXIST: a newer file of that node is there already; this one is stale) */
        const int back = !linkat(sp->dirfd, tomb, sp->dirfd, j->name, 0);
        smol_log_warn("spill: session '%s' not removed from %s/%s: another node wrote it after this node's "
                      "lease check (generation %llu > %llu: its lock was lost)%s", j->id[0] ? j->id : j->name,
                      sp->dir, j->name, (unsigned long long)h.gen, (unsigned long long)gen,
                      back ? "" : "; a newer file is there");
        pthread_mutex_lock(&sp->mu);
        sp->st.lease_lost++;
        pthread_mutex_unlock(&sp->mu);
    }
    unlinkat(sp->dirfd, tomb, 0);
    return later;
}

/* JOB_UNLINK: the file (unless the lease was lost, or, unused_since set, it
 * was used since), then, in a shared directory, its lock file, while the
 * lock is held and no other reference of this node needs it (spill.h).
 * Under a lease the removal is fenced (remove_fenced). */
static void run_unlink(struct smol_spill *sp, struct job *j)
{
    uint64_t gen = 0;
    struct stat st;
    if (j->report) j->found = !fstatat(sp->dirfd, j->name, &st, AT_SYMLINK_NOFOLLOW); /* (answered after) */
    if (j->rm_take && smol_spill_lease_for_removal(sp, j)) return;   /* (logged) */
    if (j->leased && smol_spill_lease_advance(sp, j, &gen)) return; /* another node's now: left alone */
    if (j->unused_since && !fstatat(sp->dirfd, j->name, &st, AT_SYMLINK_NOFOLLOW) && smol_spill_mtime_ns(&st) > j->unused_since) {
        smol_log_info("spill: %s/%s left in place: used since it was indexed", sp->dir, j->name);
        return;
    }
    if (j->leased) {
        if (remove_fenced(sp, j, gen)) return;  /* (another node's file: nor its lock file) */
    } else if (unlinkat(sp->dirfd, j->name, 0) && errno != ENOENT) {
        smol_log_warn("spill: cannot remove %s/%s: %s", sp->dir, j->name, strerror(errno));
        return;
    }
    if (!j->leased) return;
    char lk[NAME_LEN + 8];
    snprintf(lk, sizeof lk, "%.32s.lock", j->name);
    /* (unlinked set first, under the mutex: no new reference is taken
     * meanwhile, and no mutex is held over the unlink) */
    pthread_mutex_lock(&sp->mu);
    struct lease *l = smol_spill_lease_of(sp, j->name, 0);
    const int go = l && l->refs == 1 && l->fd >= 0 && !l->unlinked;
    if (go) l->unlinked = 1;
    pthread_mutex_unlock(&sp->mu);
    if (!go) return;
    const int gone = !unlinkat(sp->dirfd, lk, 0);
    pthread_mutex_lock(&sp->mu);
    if ((l = smol_spill_lease_of(sp, j->name, 0))) {
        if (gone) l->gen = 0;   /* a new lock file starts at 0: nothing on disk, as this node knows */
        else l->unlinked = 0;
    }
    pthread_mutex_unlock(&sp->mu);
}

/* The file server's time now (ns), which stamps the files' mtimes: that of
 * a probe file made and removed here (the local clock may run fast or
 * slow); -1 if it cannot be made. */
int64_t smol_spill_server_now(struct smol_spill *sp)
{
    char probe[128];
    snprintf(probe, sizeof probe, ".tmp-clock-%s", sp->node);
    int fd = openat(sp->dirfd, probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    struct stat st;
    const int64_t t = !futimens(fd, NULL) && !fstat(fd, &st) ? smol_spill_mtime_ns(&st) : -1;
    close(fd);
    unlinkat(sp->dirfd, probe, 0);
    return t;
}

/* JOB_SWEEP: temporary files an hour old by the file server's clock; with
 * ttl_ns, session and prefix files that nobody used for ttl_ns (their
 * mtime: written or read), and lock files without a session file as old,
 * each removed while its lock is held here (no node is in a turn of it;
 * none of this node's references) and found as old again under it. */
static void run_sweep(struct smol_spill *sp, int64_t ttl_ns)
{
    const int64_t now = smol_spill_server_now(sp);
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
            if (now - smol_spill_mtime_ns(&st) > TMP_AGE_NS && !unlinkat(sp->dirfd, n, 0))
                smol_log_info("spill: removed %s/%s (an unfinished write, an hour old)", sp->dir, n);
            continue;
        }
        const int is_lock = strlen(n) == 37 && !strcmp(n + 32, ".lock");
        if (!ttl_ns || (!smol_spill_is_our_name(n) && !is_lock) || now - smol_spill_mtime_ns(&st) <= ttl_ns) continue;
        char name[NAME_LEN + 1], lk[NAME_LEN + 8];
        snprintf(name, sizeof name, "%.32s.kv", n);
        snprintf(lk, sizeof lk, "%.32s.lock", n);
        pthread_mutex_lock(&sp->mu);
        const struct lease *l = smol_spill_lease_of(sp, name, 0);
        const int ours = l && l->refs > 0;
        pthread_mutex_unlock(&sp->mu);
        /* (no mutex held over the filesystem: the lock file's OFD lock keeps
         * this node's engine thread out as it keeps other nodes out) */
        int lfd = -1;
        if (!ours && (!sp->shared || !smol_spill_lock_open(sp, lk, &lfd))) {
            struct stat kst;
            const int has_kv = !fstatat(sp->dirfd, name, &kst, AT_SYMLINK_NOFOLLOW);
            if (!has_kv || now - smol_spill_mtime_ns(&kst) > ttl_ns) { /* still unused, under the lock */
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
    if (j->leased) smol_spill_lease_put_locked(sp, j->name);
    j->leased = 0;
    sp->q_bytes -= j->bytes;
    j->finished = 1;
    smol_spill_job_unref(j);
}

/* under sp->mu: a lease of name taken for a turn found the file CHANGED
 * (another node wrote it since this node last saw it): the writes of name
 * queued without the lease (smol_spill_save_unleased) hold images of a
 * copy now stale; dropped (one running: marked, dropped by
 * smol_spill_lease_for_write), so that neither the turn's load reads them
 * nor the writer writes them under the turn's lease. */
void smol_spill_drop_unleased_locked(struct smol_spill *sp, const char *name)
{
    for (struct job *j = sp->q_head, *nx; j; j = nx) {
        nx = j->next;
        if (j->kind != JOB_WRITE || !j->lease_take || strcmp(j->name, name)) continue;
        if (j->running) j->stale = 1;
        else drop_job_locked(sp, j);
    }
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
        /* a read ahead waits for the jobs on its name before it, unless
         * one of them failed: then it reads the file as it stands beside
         * them (the load replays their images after it), and supersedes
         * nothing */
        if (j->kind == JOB_READ) {
            int before = 0, failing = 0;
            for (struct job *k = sp->q_head; k != j; k = k->next)
                if (!strcmp(k->name, j->name)) before = 1, failing |= k->tries > 0;
            if (before && !failing) continue;
            return j;
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
int smol_spill_busy_locked(const struct smol_spill *sp)
{
    for (const struct job *j = sp->q_head; j; j = j->next) {
        if (j->running) return 1;
        if (j->tries) continue;
        int behind = 0; /* an append behind a failed write of its file waits with it */
        for (const struct job *k = sp->q_head; k != j && !behind && j->kind == JOB_WRITE && j->off >= 0; k = k->next)
            behind = k->tries && !strcmp(k->name, j->name);
        if (!behind) return 1;
    }
    return 0;
}

void *smol_spill_writer_main(void *arg)
{
    struct smol_spill *sp = arg;
    pthread_setname_np(pthread_self(), "spill-writer");
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
        else if (j->kind == JOB_READ) smol_spill_run_read(sp, j);
        else if (j->kind == JOB_SWEEP) run_sweep(sp, j->unused_since);
        else run_unlink(sp, j);
        const double dt = smol_mono_s() - t0;
        if (j->kind == JOB_WRITE && !bad)
            smol_log_info("spill: %s '%s' written to %s: %d tokens, %.1f MiB in %.0f ms%s%s",
                          j->prefix ? "cached prefix" : "session", j->id, j->name, j->n_kv, j->bytes / 1048576.0,
                          (smol_mono_s() - t0) * 1e3, j->off >= 0 ? " (a turn appended)" : "",
                          j->tries ? " (retried)" : "");
        pthread_mutex_lock(&sp->mu);
        j->running = 0;
        if (j->kind == JOB_WRITE && bad == -1) {
            sp->st.write_errors++;
            int later = 0; /* a newer job on the name supersedes it (not an append, which follows it,
                              nor a read ahead, which reads beside it) */
            for (struct job *k = j->next; k && !later; k = k->next)
                later = !strcmp(k->name, j->name) && k->kind != JOB_READ && !(k->kind == JOB_WRITE && k->off >= 0);
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
        const int lfd = j->leased ? smol_spill_lease_release_locked(sp, j->name) : -1;
        j->leased = 0;
        if (lfd >= 0) { /* the lease's last reference: closed with no mutex held (the job still queued:
                           smol_spill_flush waits for it) */
            pthread_mutex_unlock(&sp->mu);
            close(lfd);
            pthread_mutex_lock(&sp->mu);
        }
        if (j->kind == JOB_UNLINK && j->report) smol_spill_answer_locked(sp, j->report, j->found);
        if (j->kind == JOB_WRITE) {
            if (!bad) sp->st.write_s += dt;
            if (!bad) sp->st.bytes_written += j->bytes;
            if (!bad && j->off >= 0) sp->st.appends++;
            if (!bad && j->compact) sp->st.compactions++;
            if (!bad && j->prefix) sp->st.prefixes_written++;
            else if (!bad) sp->st.written++;
            else if (bad == -2 || bad == -3) forget_locked(sp, j->name);
        }
        int later = 0; /* a write or removal queued behind the read makes it stale */
        for (struct job *k = j->next; k && !later; k = k->next) later = !strcmp(k->name, j->name);
        unqueue_locked(sp, j);
        j->finished = 1;
        if (j->kind == JOB_READ) {
            smol_spill_ready_add_locked(sp, j, later);
        } else {
            smol_spill_ready_forget_locked(sp, j->name); /* the file may have changed */
            sp->q_bytes -= j->bytes;
            smol_spill_job_unref(j);
        }
        pthread_cond_broadcast(&sp->done);
    }
    pthread_mutex_unlock(&sp->mu);
    return NULL;
}

/* The last queued job on name (a reference taken), or NULL. */
struct job *smol_spill_pending_for(struct smol_spill *sp, const char *name)
{
    pthread_mutex_lock(&sp->mu);
    struct job *last = NULL;
    for (struct job *j = sp->q_head; j; j = j->next)
        if (!strcmp(j->name, name) && !j->stale) last = j;
    if (last) last->refs++;
    pthread_mutex_unlock(&sp->mu);
    return last;
}

void smol_spill_release(struct smol_spill *sp, struct job *j)
{
    pthread_mutex_lock(&sp->mu);
    smol_spill_job_unref(j);
    pthread_mutex_unlock(&sp->mu);
}

/* under sp->mu: a removal's answer (smol_spill_remove_report) */
void smol_spill_answer_locked(struct smol_spill *sp, uint64_t ticket, int found)
{
    for (int i = 0; i < sp->n_reports; i++)
        if (sp->reports[i].ticket == ticket) sp->reports[i].state = found;
}

void smol_spill_flush(struct smol_spill *sp)
{
    pthread_mutex_lock(&sp->mu);
    while (smol_spill_busy_locked(sp) && !sp->paused) pthread_cond_wait(&sp->done, &sp->mu);
    for (;;) { /* and the leases given back, closed on the lease thread */
        int closing = 0;
        for (int i = 0; i < sp->n_leases && !closing; i++) closing = sp->leases[i].closing;
        if (!closing || !sp->have_lease_thread) break;
        pthread_cond_wait(&sp->done, &sp->mu);
    }
    pthread_mutex_unlock(&sp->mu);
}

void smol_spill_sweep(struct smol_spill *sp, double ttl_s)
{
    smol_spill_reap_failed(sp);
    pthread_mutex_lock(&sp->mu);
    int queued = 0;
    for (struct job *j = sp->q_head; j && !queued; j = j->next) queued = j->kind == JOB_SWEEP && !j->running;
    struct job *j = queued ? NULL : calloc(1, sizeof *j);
    if (j) {
        j->kind = JOB_SWEEP;
        j->unused_since = ttl_s > 0 ? (int64_t)(ttl_s * 1e9) : 0;
        smol_spill_enqueue_locked(sp, j);
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
