/*
 * spill.c - sessions on disk: the API (spill.h has the format and the
 * rules).  Opening and closing the directory (and the spill's two
 * threads), saving a record (the turn's record image built here, on the
 * engine thread, from what the file already holds: spill_index.c keeps
 * that) and loading one (the file's records, as read ahead, replayed,
 * spill_format.c, then the images of writes still queued).
 *
 * Runs on the engine thread, the API's only caller.  It owns the index
 * (struct smol_spill's ent[]: no lock) and takes sp->mu only for what the
 * writer and lease threads share (the queue, the ready list, the lease
 * records, the counters).  A save copies only the KV pages the turn added
 * (and the partial last one) and never touches the disk; nor does a load:
 * it uses what the writer thread read ahead (spill_read.c) and the images
 * of the writes still queued; a read-ahead missing (dropped from the ready
 * list, or a write of the file landed since) is asked for again and the
 * load says SMOL_EBUSY with no pages needed: the turn waits alone.
 *
 * The filesystem calls of the spill, by thread (issue 46: none on the
 * engine thread once it serves):
 *   engine thread (the API's caller):
 *     - smol_spill_open: mkdir, open, faccessat, the scan (openat, readdir,
 *       fstatat, pread; a shared directory's clock probe): at start, before
 *       the engine serves;
 *     - spill_index.c's unlink_file_gen without memory for a job (a
 *       directory not shared: the file removed in place, after a flush);
 *     - for other callers (tests, tools), not the engine: smol_spill_lease
 *       (sync: openat, fcntl(F_OFD_SETLK), fstat, fstatat, pread of the
 *       generation, refresh_ent's fstatat) and smol_spill_has of a session
 *       whose lease is not held (fstatat).
 *   (a DELETE of a session only on disk with 16 already waiting is refused,
 *   SMOL_EBUSY, not looked up)
 *   lease thread: a turn's lease (smol_spill_lease_async): lock_open,
 *     the generation, the file's fstatat; closes answers nobody took, and
 *     the lock file of a lease whose last reference the engine gave back
 *     (smol_spill_unlease: the lease marked closing, woken at once).
 *   writer thread: writes (openat, write/pwrite, fsync, ftruncate, renameat,
 *     the directory's fsync, the lease's fcntl(F_OFD_GETLK), pread, pwrite,
 *     fdatasync of the generation), the lease of a write queued without
 *     one (smol_spill_save_unleased: an eviction's or a drain's of a
 *     session not leased; smol_spill_lease_for_write: lock_open, the
 *     generation), reads ahead (smol_spill_prefetch, a file of any size:
 *     openat, fstat, read, futimens; beside a failing write of the file),
 *     removals and their leases (smol_spill_lease_for_removal: lock_open;
 *     renameat aside, openat, pread, linkat, unlinkat; a DELETE's fstatat,
 *     smol_spill_remove_report), sweeps (readdir, fstatat, lock_open,
 *     unlinkat), the clock probe.
 * No thread holds sp->mu over a filesystem call but smol_spill_lease_take
 * (smol_spill_lease: not the engine's) and the close() of a lease's
 * descriptor when a failed write is dropped for a newer job
 * (drop_job_locked); a lease's last reference is otherwise closed with the
 * mutex released (smol_spill_lease_release_locked: the writer and the
 * lease thread).
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
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

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
    static atomic_int opened;   /* two spills of one process are two writers (tests: two nodes) */
    snprintf(sp->node, sizeof sp->node, "%s-%d-%d", host, (int)getpid(), atomic_fetch_add(&opened, 1));
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
    if (pthread_create(&sp->thread, NULL, smol_spill_writer_main, sp)) {
        smol_spill_close(&sp);
        return smol_errf(err, SMOL_ENOMEM, "spill: cannot start the writer thread");
    }
    sp->have_thread = 1;
    if (shared && pthread_create(&sp->lease_thread, NULL, smol_spill_lease_main, sp)) {
        smol_spill_close(&sp);
        return smol_errf(err, SMOL_ENOMEM, "spill: cannot start the lease thread");
    }
    sp->have_lease_thread = shared;
    smol_spill_scan(sp, &m->kv);
    smol_spill_trim(sp, NULL);
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
        smol_spill_job_unref(j);
    }
    if (sp->page_buf_bytes) {
        pthread_mutex_destroy(&sp->mu);
        pthread_cond_destroy(&sp->wake);
        pthread_cond_destroy(&sp->done);
        pthread_cond_destroy(&sp->lease_wake);
    }
    if (sp->dirfd >= 0) close(sp->dirfd);
    for (int i = 0; i < sp->n_ent; i++) {
        free(sp->ent[i].tokens);
        smol_spill_written_deinit(&sp->ent[i].log);
    }
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

/* take: a shared directory's named session whose lease this node does
 * not hold (smol_spill_save_unleased): a base, its lease taken by the
 * writer thread */
static enum smol_err save(struct smol_spill *sp, const struct smol_kv *kv, const struct smol_spill_record *x, int take,
                          char *err)
{
    smol_spill_reap_failed(sp);
    const int prefix = !x->id[0];
    char key[SMOL_SPILL_KEY_MAX + 1], pid[SMOL_SPILL_PREFIX_ID_LEN + 1], name[NAME_LEN + 1];
    int n_kv = x->seq->n_tokens < x->n_tokens ? x->seq->n_tokens : x->n_tokens;
    if (prefix && (n_kv <= 0 || smol_spill_prefix_covered(sp, x->tenant, x->tokens, n_kv))) return SMOL_OK;
    if (prefix) smol_spill_prefix_id(x->tokens, n_kv, pid);
    smol_spill_key(x->tenant, prefix ? pid : x->id, key);
    smol_spill_file_name(key, name);
    /* a shared directory: one writer per session, the node holding its
     * lease (a cached prefix is the same bytes whoever writes it) */
    take = take && sp->shared && !prefix && !smol_spill_holds(sp, key);
    if (sp->shared && !prefix && !take && !smol_spill_holds(sp, key)) {
        pthread_mutex_lock(&sp->mu);
        sp->st.unleased_refused++;
        pthread_mutex_unlock(&sp->mu);
        return smol_errf(err, SMOL_EBUSY, "session '%s' not written: this node does not hold its lease", key);
    }
    if (n_kv <= 0) { /* (not leased: removed only if nobody wrote it since) */
        if (take) smol_spill_expire(sp, key);
        else smol_spill_unlink_file(sp, name);
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
        smol_spill_written_deinit(&w);
        return smol_errf(err, SMOL_ENOMEM, "spill: '%s': out of memory", key);
    }
    memcpy(w.tokens, x->tokens, (size_t)n_tok * sizeof *w.tokens);
    w.hist_hash = hist ? XXH3_64bits(hist, hist_len) : 0;
    /* what the file holds already (the records this node wrote or read):
     * the turn appends the rest, unless the dead share would pass half */
    const struct entry *e = smol_spill_find_ent(sp, name);
    const struct written *o = e && e->log.known && !prefix && !take ? &e->log : NULL;
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
    h.file_id = o ? o->file_id : XXH3_64bits_withSeed(name, NAME_LEN, (uint64_t)smol_spill_now_ns() ^ (uint64_t)(uintptr_t)sp);
    h.payload_bytes = (uint64_t)h.id_len + 4ull * (h.n_tokens - tok_from) + (h.hist_len - hist_from) + h.msgs_len +
                      (uint64_t)(smol_kv_pages_for(n_kv) - (int)page_from) * pb;
    const uint64_t total = sizeof h + h.payload_bytes, file_end = (o ? o->end : 0) + total;
    w.end = file_end;
    w.file_id = h.file_id;
    w.seq = h.seq;
    if (sp->budget && file_end > sp->budget) {
        for (int i = 0; i < n_msgs; i++) free(mj[i]);
        free(mj);
        smol_spill_written_deinit(&w);
        return smol_errf(err, SMOL_ETOOLARGE, "%s '%s': %.1f MiB exceed kv_spill_budget_mb",
                         prefix ? "cached prefix" : "session", key, file_end / 1048576.0);
    }
    /* the record's image in memory (its KV pages copied out of the pool:
     * the pages the turn added, and the partial last one again); the writer
     * thread checksums and writes it */
    const double t0 = smol_mono_s();
    pthread_mutex_lock(&sp->mu);
    while (smol_spill_busy_locked(sp) && sp->q_bytes + total > SPILL_QUEUE_MAX && !sp->paused) pthread_cond_wait(&sp->done, &sp->mu);
    const int full = sp->q_head && sp->q_bytes + total > SPILL_QUEUE_MAX && !sp->paused; /* of failed writes */
    pthread_mutex_unlock(&sp->mu);
    struct job *j = full ? NULL : calloc(1, sizeof *j);
    unsigned char *img = j && total <= SIZE_MAX ? malloc((size_t)total) : NULL;
    if (!img) {
        free(j);
        for (int i = 0; i < n_msgs; i++) free(mj[i]);
        free(mj);
        smol_spill_written_deinit(&w);
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
    smol_spill_drop_ready(sp, name);
    j->lease_take = take;
    if (sp->shared && !prefix && !take) { /* the write holds the lease until it is done */
        pthread_mutex_lock(&sp->mu);
        struct lease *l = smol_spill_lease_of(sp, name, 0);
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
    smol_spill_enqueue(sp, j);
    smol_log_debug("spill: '%s' queued for %s: %s of %.1f MiB copied in %.1f ms", key, name, o ? "an append" : "a base",
                   total / 1048576.0, (smol_mono_s() - t0) * 1e3);
    smol_spill_put_ent(sp, name, file_end, smol_spill_now_ns(), prefix ? key : NULL, x->tokens, n_kv);
    struct entry *ne = smol_spill_find_ent(sp, name);
    if (ne && !prefix) ne->log = w;     /* (put_ent made the entry anew: its old log is freed) */
    else smol_spill_written_deinit(&w);
    if (prefix) smol_spill_drop_extended(sp, x->tenant, x->tokens, n_kv);
    smol_spill_trim(sp, name);
    return SMOL_OK;
}

enum smol_err smol_spill_save(struct smol_spill *sp, const struct smol_kv *kv, const struct smol_spill_record *x,
                              char *err)
{
    return save(sp, kv, x, 0, err);
}

enum smol_err smol_spill_save_unleased(struct smol_spill *sp, const struct smol_kv *kv,
                                       const struct smol_spill_record *x, char *err)
{
    return save(sp, kv, x, 1, err);
}

/* What load() read: the file's bytes, the queued writes' images after them. */
#define LOAD_JOBS_MAX 64

/* key: the session's id, or the cached prefix's id (prefix) */
static enum smol_err load(struct smol_spill *sp, struct smol_kv *kv, int vocab, const char *key, int prefix,
                          struct smol_spill_record *x, int *pages_needed, char *err)
{
    const char *what = prefix ? "cached prefix" : "session";
    char name[NAME_LEN + 1];
    smol_spill_file_name(key, name);
    smol_spill_reap_failed(sp);
    struct entry *ent = smol_spill_find_ent(sp, name);
    if (!ent) return smol_errf(err, SMOL_ENOSESSION, "no spilled %s '%s'", what, key);
    double t0 = smol_mono_s();
    /* writes of this file still queued: their images follow the file's
     * records (a base among them: from the last base on, the file unread) */
    struct job *pj = smol_spill_pending_for(sp, name), *rd = NULL;
    const enum job_kind pk = pj ? pj->kind : JOB_WRITE;
    if (pj) smol_spill_release(sp, pj);
    if (pk == JOB_READ) { /* read ahead under way: not waited for here */
        *pages_needed = 0;
        return smol_errf(err, SMOL_EBUSY, "spilled %s '%s' is being read", what, key);
    }
    if (pk != JOB_WRITE) return smol_errf(err, SMOL_ENOSESSION, "no spilled %s '%s'", what, key);
    struct job *jobs[LOAD_JOBS_MAX];
    int n_jobs = 0;
    pthread_mutex_lock(&sp->mu);
    for (struct job *j = sp->q_head; j; j = j->next)
        if (j->kind == JOB_WRITE && !j->stale && !strcmp(j->name, name)) {
            if (j->off < 0) { /* a base: what came before does not count (their references back) */
                while (n_jobs) smol_spill_job_unref(jobs[--n_jobs]);
            }
            if (n_jobs < LOAD_JOBS_MAX) {
                j->refs++;
                jobs[n_jobs++] = j;
            }
        }
    pthread_mutex_unlock(&sp->mu);
    const int from_base = n_jobs && jobs[0]->off < 0;
    pthread_mutex_lock(&sp->mu);
    const uint64_t landed = sp->landed; /* (rd, put back, is good while no write lands) */
    pthread_mutex_unlock(&sp->mu);
    if (!from_base && !(rd = smol_spill_take_ready(sp, name))) {
        /* not read ahead (the ready list dropped it, or a write of the
         * file lands or fails): the file is never read here; the read is
         * asked, on the writer thread, and the turn waits for it */
        while (n_jobs) smol_spill_release(sp, jobs[--n_jobs]);
        if (smol_spill_prefetch(sp, key)) return smol_errf(err, SMOL_ENOMEM, "spill: out of memory");
        *pages_needed = 0;
        return smol_errf(err, SMOL_EBUSY, "spilled %s '%s' is being read", what, key);
    }
    struct replay r = {0};
    const char *why = NULL, *tail = NULL;
    int rc_key = 0, foreign = 0;
    enum smol_err rc = SMOL_OK;
    if (!from_base) {
        why = rd->read_err;
        const unsigned char *b = rd->image;
        const uint64_t len = rd->bytes;
        struct smol_spill_header h0;
        /* a shared directory's session file of another model: its conversation without KV */
        if (!why && sp->shared && !prefix && !smol_spill_read_header(b, len, &h0) && smol_spill_check_header(sp, &h0, kv, 0) &&
            !smol_spill_check_header(sp, &h0, kv, 1) && !(h0.flags & SMOL_SPILL_F_PREFIX))
            foreign = 1;
        for (uint64_t off = 0; !why && off < len;) {
            const int k = smol_spill_replay_one(sp, kv, &r, b + off, len - off, 0, foreign, key, &tail);
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
        const int k = smol_spill_replay_one(sp, kv, &r, jobs[i]->image, jobs[i]->bytes, 1, 0, key, &jw);
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
        smol_spill_split_key(key, x->tenant, &bare);
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
        /* (a shared directory: only a file this node made; a file another
         * node made is written whole next, so that this node never appends
         * to a file another may still append to: spill.h, Fencing) */
        const int ours = !sp->shared || (ent->log.known && ent->log.file_id == r.file_id);
        struct written w = {.known = !foreign && !prefix && ours, .end = r.end, .file_id = r.file_id, .seq = r.seq,
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
            if (!w.tokens || !w.msg_hash) smol_spill_written_deinit(&w);
        }
        smol_spill_written_deinit(&ent->log);
        ent->log = w;
        x->msgs = r.msgs;
        r.msgs = NULL;
        ent->stamp = smol_spill_now_ns();
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
            smol_log_info("spill: %s '%s' restored%s: %u tokens, %.1f MiB in %.2f ms (%d records)", what, key,
                          n_jobs ? " (with its writes still queued)" : rd ? " (read ahead)" : "", h->n_kv,
                          r.end / 1048576.0, (smol_mono_s() - t0) * 1e3, r.n_rec);
    }
    for (int i = 0; i < n_jobs; i++) smol_spill_release(sp, jobs[i]);
    if (rd && rc == SMOL_EBUSY && !why) smol_spill_put_back_ready(sp, rd, landed); /* (for the load again once
                                                                                      pages are free) */
    else if (rd) smol_spill_release(sp, rd);
    smol_spill_replay_deinit(&r);
    if (why || (rc && rc != SMOL_EBUSY)) smol_kv_seq_truncate(kv, x->seq, 0);
    if (why) {
        smol_spill_reject_file(sp, name, why);
        rc = smol_errf(err, SMOL_EFORMAT, "spilled %s '%s': %s", what, key, why);
    }
    return rc;
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
