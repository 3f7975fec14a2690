/*
 * spill_index.c - the index and the disk budget: what the directory holds
 * once the queued jobs are done (an entry per file: size, last use, a
 * cached prefix's tokens, what a session file's records add up to), the
 * scan at open, removals (queued for the writer, under the lease in a
 * shared directory), the budget's least-recently-used trim, and the
 * lookups of cached prefixes by longest common prefix.
 *
 * Engine thread only (the index has no lock).  The scan at open touches
 * the filesystem on the caller's thread, and smol_spill_has stats a file
 * whose lease this node does not hold (the engine does not ask it then: a
 * DELETE of a session only on disk goes through smol_spill_remove_report,
 * or is refused); everything else queues: a removal's lease is taken by
 * the writer thread when its turn comes (smol_spill_lease_for_removal).
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

struct entry *smol_spill_find_ent(const struct smol_spill *sp, const char *name)
{
    for (int i = 0; i < sp->n_ent; i++)
        if (!strcmp(sp->ent[i].name, name)) return &sp->ent[i];
    return NULL;
}

void smol_spill_drop_ent(struct smol_spill *sp, struct entry *e)
{
    free(e->tokens);
    smol_spill_written_deinit(&e->log);
    sp->st.bytes -= e->bytes;
    sp->st.files--;
    *e = sp->ent[--sp->n_ent];
}

/* prefix_id, tokens: a cached prefix's (copied), or NULL */
int smol_spill_put_ent(struct smol_spill *sp, const char *name, uint64_t bytes, int64_t stamp, const char *prefix_id,
                       const int32_t *tokens, int n_tokens)
{
    struct entry *e = smol_spill_find_ent(sp, name);
    if (e) smol_spill_drop_ent(sp, e);
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

/* In a shared directory the file is removed under its lease, which the
 * writer thread takes when the removal's turn comes (no filesystem call
 * here: smol_spill_lease_for_removal), as `mode` says, and its lock file
 * with it (spill.h); the index forgets it either way. */
static void unlink_file_report(struct smol_spill *sp, const char *name, int mode, uint64_t report);

static void unlink_file_gen(struct smol_spill *sp, const char *name, int mode)
{
    unlink_file_report(sp, name, mode, 0);
}

/* report: a ticket the writer answers (the file was there or not) */
static void unlink_file_report(struct smol_spill *sp, const char *name, int mode, uint64_t report)
{
    struct entry *e = smol_spill_find_ent(sp, name);
    const int64_t indexed = e && e->disk_stamp ? e->stamp : 0;
    if (e) smol_spill_drop_ent(sp, e);
    smol_spill_drop_ready(sp, name);
    struct job *j = calloc(1, sizeof *j);
    if (!j && sp->shared) { /* no memory for a job: not removed (a shared file is removed only by the writer) */
        smol_log_warn("spill: %s/%s left in place: out of memory", sp->dir, name);
        if (report) {
            pthread_mutex_lock(&sp->mu);
            smol_spill_answer_locked(sp, report, 1);
            pthread_mutex_unlock(&sp->mu);
        }
        return;
    }
    if (!j) { /* no memory for a job: remove it here, after what is queued */
        smol_spill_flush(sp);
        if (unlinkat(sp->dirfd, name, 0) && errno != ENOENT)
            smol_log_warn("spill: cannot remove %s/%s: %s", sp->dir, name, strerror(errno));
        return;
    }
    j->kind = JOB_UNLINK;
    j->report = report;
    j->rm_take = sp->shared;
    j->rm_mode = mode;
    j->indexed = indexed;
    snprintf(j->name, sizeof j->name, "%s", name);
    smol_spill_enqueue(sp, j);
}

void smol_spill_unlink_file(struct smol_spill *sp, const char *name)
{
    unlink_file_gen(sp, name, RM_ANY_GEN);
}

/* Removes the least recently used files until the total fits the budget;
 * `keep` (may be NULL) goes last. */
void smol_spill_trim(struct smol_spill *sp, const char *keep)
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

/* The index entry of name as the directory has it now (another node may
 * have written or removed the file). */
void smol_spill_refresh_ent(struct smol_spill *sp, const char *name, int changed)
{
    struct stat st;
    struct entry *e = smol_spill_find_ent(sp, name);
    if (fstatat(sp->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode)) {
        if (e) smol_spill_drop_ent(sp, e);
    } else if (!e || changed || e->bytes != (uint64_t)st.st_size) {
        smol_spill_put_ent(sp, name, (uint64_t)st.st_size, (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec, NULL,
                NULL, 0);
        if ((e = smol_spill_find_ent(sp, name))) e->disk_stamp = 1;
    }
    if (changed) smol_spill_drop_ready(sp, name);
}

void smol_spill_reject_file(struct smol_spill *sp, const char *name, const char *why)
{
    smol_log_warn("spill: %s/%s: %s; ignored and removed (the session is recomputed)", sp->dir, name, why);
    pthread_mutex_lock(&sp->mu);
    sp->st.rejected++;
    pthread_mutex_unlock(&sp->mu);
    smol_spill_unlink_file(sp, name);
}

void smol_spill_scan(struct smol_spill *sp, const struct smol_kv *kv)
{
    int fd = openat(sp->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        smol_log_warn("spill: cannot list %s: %s", sp->dir, strerror(errno));
        return;
    }
    struct dirent *de;
    const int64_t now = sp->shared ? smol_spill_server_now(sp) : 0;
    while ((de = readdir(d))) {
        const char *n = de->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..")) continue;
        struct stat tst;
        if (!strncmp(n, ".tmp-", 5)) {
            /* a shared directory: another node's write may be under way;
             * an hour-old one, by the file server's clock, is not */
            if (sp->shared && (now < 0 || fstatat(sp->dirfd, n, &tst, AT_SYMLINK_NOFOLLOW) ||
                               now - smol_spill_mtime_ns(&tst) <= TMP_AGE_NS))
                continue;
            smol_log_info("spill: removing %s/%s (an unfinished write)", sp->dir, n);
            unlinkat(sp->dirfd, n, 0);
            continue;
        }
        if (strlen(n) == 37 && !strcmp(n + 32, ".lock")) continue; /* a session's lease (shared) */
        if (!strcmp(n, "responses")) continue;  /* stored Responses (responses_store.c): theirs */
        if (!smol_spill_is_our_name(n)) {
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
        else if (!(why = smol_spill_read_header(raw, (uint64_t)got, &h)) && !(why = smol_spill_check_header(sp, &h, kv, 0)) &&
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
            else if (pid[h.id_len] = 0, smol_spill_split_key(pid, ptenant, &bare) || strlen(bare) != SMOL_SPILL_PREFIX_ID_LEN ||
                     strncmp(bare, SMOL_SPILL_PREFIX_ID, strlen(SMOL_SPILL_PREFIX_ID)))
                why = "a cached prefix with a bad id";
        }
        if (f >= 0) close(f);
        if (why && sp->shared) { /* maybe another node's model, or one being replaced: not ours to remove */
            free(toks);
            smol_log_info("spill: %s/%s: %s; not indexed", sp->dir, n, why);
            continue;
        }
        if (why) { free(toks); smol_spill_reject_file(sp, n, why); continue; }
        smol_spill_put_ent(sp, n, (uint64_t)stt.st_size, (int64_t)stt.st_mtim.tv_sec * 1000000000 + stt.st_mtim.tv_nsec,
                toks ? pid : NULL, toks, (int)h.n_kv);
        struct entry *e = smol_spill_find_ent(sp, n);
        if (e) e->disk_stamp = 1;
        free(toks);
    }
    closedir(d);
}

/* 1 if a prefix file of tenant already holds tokens[0, n) (the same or a longer prefix) */
int smol_spill_prefix_covered(const struct smol_spill *sp, const char *tenant, const int32_t *tokens, int n)
{
    for (int i = 0; i < sp->n_ent; i++) {
        const struct entry *e = &sp->ent[i];
        if (e->tokens && e->n_tokens >= n && smol_lcp(e->tokens, e->n_tokens, tokens, n) == n &&
            smol_spill_key_of_tenant(e->prefix_id, tenant))
            return 1;
    }
    return 0;
}

/* Removes tenant's prefix files that tokens[0, n) extends: the file of it
 * serves every request of that tenant they would. */
void smol_spill_drop_extended(struct smol_spill *sp, const char *tenant, const int32_t *tokens, int n)
{
    for (int i = 0; i < sp->n_ent;) {
        const struct entry *e = &sp->ent[i];
        if (e->tokens && e->n_tokens < n && smol_lcp(e->tokens, e->n_tokens, tokens, n) == e->n_tokens &&
            smol_spill_key_of_tenant(e->prefix_id, tenant)) {
            char name[NAME_LEN + 1];
            snprintf(name, sizeof name, "%s", e->name);
            smol_log_info("spill: removing %s (a cached prefix that a longer one extends)", name);
            smol_spill_unlink_file(sp, name); /* the last entry moves into slot i */
        } else {
            i++;
        }
    }
}

int smol_spill_best_prefix(struct smol_spill *sp, const char *tenant, const int32_t *ids, int n,
                           char key_out[SMOL_SPILL_KEY_MAX + 1])
{
    smol_spill_reap_failed(sp);
    int best = 0;
    key_out[0] = 0;
    for (int i = 0; i < sp->n_ent; i++) {
        const struct entry *e = &sp->ent[i];
        int l = e->tokens && smol_spill_key_of_tenant(e->prefix_id, tenant) ? smol_lcp(e->tokens, e->n_tokens, ids, n) : 0;
        if (l > best) {
            best = l;
            snprintf(key_out, SMOL_SPILL_KEY_MAX + 1, "%s", e->prefix_id);
        }
    }
    return best;
}

/* Writes the writer could not finish leave the index (engine thread). */
void smol_spill_reap_failed(struct smol_spill *sp)
{
    pthread_mutex_lock(&sp->mu);
    for (int i = 0; i < sp->n_failed; i++) {
        int later = 0; /* a newer job on the name decides */
        for (struct job *j = sp->q_head; j; j = j->next) later |= !strcmp(j->name, sp->failed[i]);
        struct entry *e = later ? NULL : smol_spill_find_ent(sp, sp->failed[i]);
        if (e) smol_spill_drop_ent(sp, e);
    }
    sp->n_failed = 0;
    pthread_mutex_unlock(&sp->mu);
}

/* ---- lookups and removals ------------------------------------------------------------------ */

void smol_spill_remove(struct smol_spill *sp, const char *id)
{
    smol_spill_reap_failed(sp);
    char name[NAME_LEN + 1];
    smol_spill_file_name(id, name);
    /* (a shared directory's file may be one this node never indexed) */
    if (sp->shared || smol_spill_find_ent(sp, name)) smol_spill_unlink_file(sp, name);
}

uint64_t smol_spill_remove_report(struct smol_spill *sp, const char *id)
{
    smol_spill_reap_failed(sp);
    char name[NAME_LEN + 1];
    smol_spill_file_name(id, name);
    pthread_mutex_lock(&sp->mu);
    uint64_t t = 0;
    if (sp->n_reports < (int)(sizeof sp->reports / sizeof sp->reports[0])) {
        t = ++sp->next_ticket;
        sp->reports[sp->n_reports].ticket = t;
        sp->reports[sp->n_reports++].state = -1;
    }
    pthread_mutex_unlock(&sp->mu);
    if (!t) return 0;
    unlink_file_report(sp, name, RM_ANY_GEN, t);
    return t;
}

int smol_spill_removal_done(struct smol_spill *sp, uint64_t ticket)
{
    int r = 0;  /* (a ticket not pending: not there) */
    pthread_mutex_lock(&sp->mu);
    for (int i = 0; i < sp->n_reports; i++)
        if (sp->reports[i].ticket == ticket) {
            r = sp->reports[i].state;
            if (r >= 0) sp->reports[i] = sp->reports[--sp->n_reports];
            break;
        }
    pthread_mutex_unlock(&sp->mu);
    return r;
}

void smol_spill_expire(struct smol_spill *sp, const char *id)
{
    smol_spill_reap_failed(sp);
    char name[NAME_LEN + 1];
    smol_spill_file_name(id, name);
    if (sp->shared) unlink_file_gen(sp, name, 0); /* only while the file is the one this node last saw */
    else if (smol_spill_find_ent(sp, name)) smol_spill_unlink_file(sp, name);
}

int smol_spill_has(struct smol_spill *sp, const char *id)
{
    smol_spill_reap_failed(sp);
    char name[NAME_LEN + 1];
    smol_spill_file_name(id, name);
    struct stat st;
    if (sp->shared) {
        /* held here: the index is as the lease found the file (no other
         * node writes it meanwhile); else another node may have written
         * or removed it */
        pthread_mutex_lock(&sp->mu);
        const struct lease *l = smol_spill_lease_of(sp, name, 0);
        const int held = l && l->refs > 0;
        pthread_mutex_unlock(&sp->mu);
        if (!held) return !fstatat(sp->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) && S_ISREG(st.st_mode);
    }
    return smol_spill_find_ent(sp, name) != NULL;
}

void smol_spill_get_stats(struct smol_spill *sp, struct smol_spill_stats *st)
{
    smol_spill_reap_failed(sp);
    pthread_mutex_lock(&sp->mu);
    *st = sp->st;
    pthread_mutex_unlock(&sp->mu);
}
