/*
 * spill_read.c - read-ahead: a session's (or a cached prefix's) file read
 * into memory on the writer thread before its turn (smol_spill_prefetch,
 * a JOB_READ), kept on the ready list until smol_spill_load takes it.
 *
 * Threads.  The engine thread asks (smol_spill_prefetch) and takes
 * (smol_spill_take_ready), both under sp->mu; the writer thread reads
 * (smol_spill_run_read, no mutex held) and puts the result on the ready
 * list (smol_spill_writer_main).  A read waits for the writes and
 * removals of its file queued before it, unless one of them failed: then
 * it reads the file as it stands, beside them (next_job), and the load
 * replays their images after it.  A write or removal that lands drops
 * what was read ahead of its file; so does a save (at its queueing).  The
 * ready list keeps SPILL_READY_MAX files and SPILL_QUEUE_MAX bytes (but
 * always its newest); a load whose read-ahead went asks for it again and
 * its turn waits (smol_spill_load: SMOL_EBUSY, no pages needed).
 */
#include "daemon/server/spill_internal.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* JOB_READ: the whole file into memory (checked by smol_spill_load) */
void smol_spill_run_read(struct smol_spill *sp, struct job *j)
{
    struct stat st;
    int fd = openat(sp->dirfd, j->name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) j->read_err = "cannot be read as a regular file";
    else if (!(j->image = malloc((size_t)st.st_size + 1))) j->read_err = "out of memory for reading it";
    else if (smol_spill_read_full(fd, j->image, (size_t)st.st_size)) j->read_err = "short read";
    else j->bytes = (uint64_t)st.st_size;
    if (fd >= 0) {
        if (!j->read_err) futimens(fd, NULL); /* recently used, also for the next process */
        close(fd);
    }
}

/* Writer thread, under sp->mu: a finished read ahead, kept for the turn
 * that asked for it (stale, a write or removal of its file queued behind
 * it: dropped); the ready list keeps SPILL_READY_MAX files and
 * SPILL_QUEUE_MAX bytes, but always its newest: the oldest dropped (its
 * turn asks for it again). */
void smol_spill_ready_add_locked(struct smol_spill *sp, struct job *j, int stale)
{
    if (stale) {
        smol_spill_job_unref(j);
        return;
    }
    j->next = sp->ready;
    sp->ready = j;
    ++sp->n_ready;
    for (;;) {
        uint64_t held = 0;
        for (struct job *k = sp->ready; k; k = k->next) held += k->bytes;
        if (sp->n_ready <= 1 || (sp->n_ready <= SPILL_READY_MAX && held <= SPILL_QUEUE_MAX)) break;
        struct job **pp = &sp->ready;
        while ((*pp)->next) pp = &(*pp)->next;
        smol_spill_job_unref(*pp);
        *pp = NULL;
        sp->n_ready--;
    }
}

/* Writer thread, under sp->mu: a write or removal of name landed (or was
 * dropped): what was read ahead of it goes (sp->landed counts them). */
void smol_spill_ready_forget_locked(struct smol_spill *sp, const char *name)
{
    sp->landed++;
    for (struct job **pp = &sp->ready; *pp;) {
        struct job *k = *pp;
        if (strcmp(k->name, name)) { pp = &k->next; continue; }
        *pp = k->next;
        sp->n_ready--;
        smol_spill_job_unref(k);
    }
}

/* Takes name's read-ahead out of the ready list (the caller owns it), or NULL. */
struct job *smol_spill_take_ready(struct smol_spill *sp, const char *name)
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

/* Puts back a read-ahead that smol_spill_load took and could not use yet
 * (the pool lacked pages), unless a write or removal landed since it was
 * taken (sp->landed was `landed`): then it may be stale, and goes. */
void smol_spill_put_back_ready(struct smol_spill *sp, struct job *j, uint64_t landed)
{
    pthread_mutex_lock(&sp->mu);
    if (sp->landed == landed) {
        j->next = sp->ready;
        sp->ready = j;
        sp->n_ready++;
    } else {
        smol_spill_job_unref(j);
    }
    pthread_mutex_unlock(&sp->mu);
}

/* The file changes: what was read ahead of it is stale. */
void smol_spill_drop_ready(struct smol_spill *sp, const char *name)
{
    struct job *j = smol_spill_take_ready(sp, name);
    if (j) {
        pthread_mutex_lock(&sp->mu);
        smol_spill_job_unref(j);
        pthread_mutex_unlock(&sp->mu);
    }
}

int smol_spill_prefetch(struct smol_spill *sp, const char *id)
{
    smol_spill_reap_failed(sp);
    char name[NAME_LEN + 1];
    smol_spill_file_name(id, name);
    struct entry *e = smol_spill_find_ent(sp, name);
    if (!e) return 1; /* nothing to read (a file of any size is read here: the ready list keeps
                         one over SPILL_QUEUE_MAX alone) */
    pthread_mutex_lock(&sp->mu);
    struct job *last = NULL;
    for (struct job *j = sp->q_head; j; j = j->next) /* (a stale write: as if not queued) */
        if (!strcmp(j->name, name) && !j->stale) last = j;
    int ready = 0;
    for (struct job *j = sp->ready; j && !ready; j = j->next) ready = !strcmp(j->name, name);
    int rc = 1, base = 0;
    for (struct job *j = sp->q_head; j; j = j->next)
        base |= !strcmp(j->name, name) && j->kind == JOB_WRITE && j->off < 0 && !j->stale;
    /* a read under way: wait for it; a queued base's image is at hand; only
     * appends queued: the file is read behind them (beside them, when one
     * of them fails: next_job), the load replaying their images after it */
    if (last) rc = last->kind == JOB_READ ? 0 : last->kind != JOB_WRITE || base || ready;
    /* a read queued: behind the appends, or of the file when nothing is queued on it */
    if ((!rc && last && last->kind == JOB_WRITE) || (!last && !ready)) {
        struct job *j = calloc(1, sizeof *j);
        rc = !j;
        if (j) {
            j->kind = JOB_READ;
            snprintf(j->name, sizeof j->name, "%s", name);
            snprintf(j->id, sizeof j->id, "%s", id);
            smol_spill_enqueue_locked(sp, j);
        }
    }
    pthread_mutex_unlock(&sp->mu);
    return rc;
}
