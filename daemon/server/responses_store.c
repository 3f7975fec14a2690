/*
 * responses_store.c - stored Responses in files under the spill directory,
 * or in memory (see responses_store.h).
 *
 * A file is "SRSP1 CREATED PREV\n" (PREV "-" for none) and the record's
 * bytes.  The per-tenant bound is counted from the tenant directory each
 * time the tenant stores (stat of its files: a shared directory has no
 * other place every node sees), the oldest by mtime, the file server's
 * clock, dropped first; expiry compares that mtime with this node's clock,
 * so nodes whose clocks differ by far less than the TTL agree.
 */
#include "daemon/server/responses_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/model/rules.h"
#include "daemon/server/log.h"

#define MAGIC "SRSP1"
#define TMP_AGE_S 86400         /* a temporary file this old is a crash's leftover */

struct ment {                           /* a record in memory */
    struct ment *next;                  /* newest first */
    char tenant[SMOL_RULE_TENANT_MAX + 1];
    struct smol_rstore_rec r;
};

struct smol_rstore {
    char *dir;                          /* DIR/responses, NULL = in memory */
    uint64_t tenant_bytes;
    int64_t ttl_s;
    struct ment *mem;                   /* in memory: every tenant's records */
    unsigned tmp_seq;                   /* temporary file names */
    /* the thread: jobs in todo run in order, then wait in done until the RPC loop takes them */
    pthread_t thread;
    int started, quit;
    int efd;                            /* eventfd: done jobs wait */
    pthread_mutex_t mu;                 /* guards the queues, quit */
    pthread_cond_t cv;
    struct smol_rstore_job *todo, **todo_tail, *done, **done_tail;
    int n_todo;
};

int smol_rstore_id_ok(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n < 1 || n > SMOL_RSTORE_ID_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static enum smol_err unknown(char *err, const char *id)
{
    return smol_errf(err, SMOL_ENOSESSION, "no stored response '%.64s'", id);
}

enum smol_err smol_rstore_new(struct smol_rstore **out, const char *dir, uint64_t tenant_bytes, int64_t ttl_s,
                              char *err)
{
    struct smol_rstore *rs = calloc(1, sizeof *rs);
    if (!rs) return smol_errf(err, SMOL_ENOMEM, "out of memory");
    rs->tenant_bytes = tenant_bytes;
    rs->ttl_s = ttl_s;
    rs->efd = -1;
    rs->todo_tail = &rs->todo;
    rs->done_tail = &rs->done;
    pthread_mutex_init(&rs->mu, NULL);
    pthread_cond_init(&rs->cv, NULL);
    if (dir && *dir) {
        if (asprintf(&rs->dir, "%s/responses", dir) < 0) {
            free(rs);
            return smol_errf(err, SMOL_ENOMEM, "out of memory");
        }
        if (mkdir(rs->dir, 0750) && errno != EEXIST) {
            enum smol_err e = smol_errf(err, SMOL_EIO, "responses store: cannot create %s: %s", rs->dir,
                                        strerror(errno));
            free(rs->dir);
            free(rs);
            return e;
        }
    }
    *out = rs;
    return SMOL_OK;
}

void smol_rstore_free(struct smol_rstore **p)
{
    struct smol_rstore *rs = p ? *p : NULL;
    if (!rs) return;
    if (rs->started) {
        pthread_mutex_lock(&rs->mu);
        rs->quit = 1;
        pthread_cond_signal(&rs->cv);
        pthread_mutex_unlock(&rs->mu);
        pthread_join(rs->thread, NULL);
    }
    for (struct smol_rstore_job **q = &rs->todo; q; q = q == &rs->todo ? &rs->done : NULL)
        while (*q) {
            struct smol_rstore_job *j = *q;
            *q = j->next;
            j->free(j);
        }
    if (rs->efd >= 0) close(rs->efd);
    pthread_mutex_destroy(&rs->mu);
    pthread_cond_destroy(&rs->cv);
    while (rs->mem) {
        struct ment *m = rs->mem;
        rs->mem = m->next;
        free(m->r.data);
        free(m);
    }
    free(rs->dir);
    free(rs);
    *p = NULL;
}

static int expired(const struct smol_rstore *rs, int64_t created, int64_t now)
{
    return rs->ttl_s > 0 && now - created > rs->ttl_s;
}

/* ---- in memory -------------------------------------------------------------- */

static struct ment **mem_find(struct smol_rstore *rs, const char *tenant, const char *id)
{
    for (struct ment **pp = &rs->mem; *pp; pp = &(*pp)->next)
        if (!strcmp((*pp)->tenant, tenant) && !strcmp((*pp)->r.id, id)) return pp;
    return NULL;
}

static void mem_unlink(struct ment **pp)
{
    struct ment *m = *pp;
    *pp = m->next;
    free(m->r.data);
    free(m);
}

/* Drops tenant's expired records, then its oldest until need more bytes fit. */
static void mem_fit(struct smol_rstore *rs, const char *tenant, uint64_t need, int64_t now)
{
    uint64_t total = 0;
    for (struct ment **pp = &rs->mem; *pp;) {
        if (!strcmp((*pp)->tenant, tenant) && expired(rs, (*pp)->r.created, now)) {
            mem_unlink(pp);
            continue;
        }
        if (!strcmp((*pp)->tenant, tenant)) total += (*pp)->r.len;
        pp = &(*pp)->next;
    }
    while (rs->tenant_bytes && total + need > rs->tenant_bytes) {
        struct ment **oldest = NULL;
        for (struct ment **pp = &rs->mem; *pp; pp = &(*pp)->next)
            if (!strcmp((*pp)->tenant, tenant)) oldest = pp;
        if (!oldest) break;
        total -= (*oldest)->r.len;
        mem_unlink(oldest);
    }
}

/* ---- in files ------------------------------------------------------------------ */

static int tenant_dir(const struct smol_rstore *rs, const char *tenant, char *out, size_t n)
{
    /* "t-" first: a tenant of dots stays a name, never "." or ".." */
    return snprintf(out, n, "%s/t-%s", rs->dir, tenant) < (int)n ? 0 : -1;
}

struct fent {
    char id[SMOL_RSTORE_ID_MAX + 1];
    int64_t mtime;                      /* ns */
    uint64_t size;
};

static int fent_newest_first(const void *a, const void *b)
{
    const struct fent *x = a, *y = b;
    return x->mtime < y->mtime ? 1 : x->mtime > y->mtime ? -1 : strcmp(x->id, y->id);
}

/* The tenant's records (expired ones removed), newest first, in *out[*n]. */
static enum smol_err file_scan(struct smol_rstore *rs, const char *tenant, int64_t now, struct fent **out, size_t *n,
                               char *err)
{
    char td[1200];
    *out = NULL;
    *n = 0;
    if (tenant_dir(rs, tenant, td, sizeof td)) return smol_errf(err, SMOL_EINVAL, "path too long");
    DIR *d = opendir(td);
    if (!d) return errno == ENOENT ? SMOL_OK : smol_errf(err, SMOL_EIO, "responses store: %s: %s", td, strerror(errno));
    size_t cap = 0;
    struct dirent *de;
    enum smol_err e = SMOL_OK;
    while ((de = readdir(d))) {
        struct stat st;
        if (!strncmp(de->d_name, ".tmp-", 5)) {
            /* a write a crash cut short (they take milliseconds): a day old, by any clock, is not running */
            if (!fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) && now - (int64_t)st.st_mtim.tv_sec > TMP_AGE_S)
                unlinkat(dirfd(d), de->d_name, 0);
            continue;
        }
        if (!smol_rstore_id_ok(de->d_name) || fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
            !S_ISREG(st.st_mode))
            continue;
        if (expired(rs, (int64_t)st.st_mtim.tv_sec, now)) {
            unlinkat(dirfd(d), de->d_name, 0);
            continue;
        }
        if (*n == cap) {
            struct fent *g = realloc(*out, (cap = cap ? 2 * cap : 16) * sizeof *g);
            if (!g) {
                e = smol_errf(err, SMOL_ENOMEM, "out of memory");
                break;
            }
            *out = g;
        }
        struct fent *f = &(*out)[(*n)++];
        memcpy(f->id, de->d_name, strlen(de->d_name) + 1);  /* id_ok: <= 64 bytes */
        f->mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        f->size = (uint64_t)st.st_size;
    }
    closedir(d);
    if (e) {
        free(*out);
        *out = NULL;
        *n = 0;
        return e;
    }
    if (*n) qsort(*out, *n, sizeof **out, fent_newest_first);
    return SMOL_OK;
}

static int write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Writes rec as DIR/t-TENANT/ID: a temporary file beside it, fsync, rename over it, fsync of the
 * directory; only then SMOL_OK.  On any failure (ENOSPC, EIO, ESTALE, a short write) the previous
 * record of that id stands (a failed directory fsync after the rename: the new one may, but is
 * not promised durable) and no temporary file is left. */
static enum smol_err file_put(struct smol_rstore *rs, const char *tenant, const struct smol_rstore_rec *rec,
                              char *err)
{
    char td[1200], hdr[200], tmp[200];
    if (tenant_dir(rs, tenant, td, sizeof td)) return smol_errf(err, SMOL_EINVAL, "path too long");
    if (mkdir(td, 0750) && errno != EEXIST)
        return smol_errf(err, SMOL_EIO, "responses store: cannot create %s: %s", td, strerror(errno));
    int hn = snprintf(hdr, sizeof hdr, MAGIC " %lld %s\n", (long long)rec->created, rec->prev[0] ? rec->prev : "-");
    uint64_t need = (uint64_t)hn + rec->len;
    if (rs->tenant_bytes && need > rs->tenant_bytes)
        return smol_errf(err, SMOL_ETOOLARGE, "the response (%llu bytes) is over the tenant's store (%llu bytes)",
                         (unsigned long long)need, (unsigned long long)rs->tenant_bytes);
    int dfd = open(td, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return smol_errf(err, SMOL_EIO, "responses store: %s: %s", td, strerror(errno));
    /* room first: expired ones go, then the oldest (never the one replaced: it goes by the rename) */
    struct fent *fs = NULL;
    size_t n = 0;
    enum smol_err e = file_scan(rs, tenant, rec->created, &fs, &n, err);
    if (e) {
        close(dfd);
        return e;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(fs[i].id, rec->id)) total += fs[i].size;
    for (size_t i = n; i-- > 0 && rs->tenant_bytes && total + need > rs->tenant_bytes;)
        if (strcmp(fs[i].id, rec->id) && (!unlinkat(dfd, fs[i].id, 0) || errno == ENOENT)) total -= fs[i].size;
    free(fs);
    snprintf(tmp, sizeof tmp, ".tmp-%s-%d-%u", rec->id, (int)getpid(), rs->tmp_seq++);
    const char *step = "open";
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
    int bad = fd < 0, saved = errno;
    if (!bad && (step = "write", write_all(fd, hdr, (size_t)hn) || write_all(fd, rec->data, rec->len)))
        bad = 1, saved = errno;
    if (!bad && (step = "fsync", fsync(fd))) bad = 1, saved = errno;
    if (fd >= 0 && close(fd) && !bad) bad = 1, saved = errno, step = "close";
    if (!bad && (step = "rename", renameat(dfd, tmp, dfd, rec->id))) bad = 1, saved = errno;
    if (bad) {
        if (fd >= 0) unlinkat(dfd, tmp, 0);
        close(dfd);
        return smol_errf(err, SMOL_EIO, "responses store: %s of %s/%s: %s (the previous record stands)", step, td,
                         rec->id, strerror(saved));
    }
    if (fsync(dfd)) {
        saved = errno;
        close(dfd);
        return smol_errf(err, SMOL_EIO, "responses store: fsync of %s: %s (%s may not survive a crash)", td,
                         strerror(saved), rec->id);
    }
    close(dfd);
    return SMOL_OK;
}

static enum smol_err file_get(struct smol_rstore *rs, const char *tenant, const char *id, int64_t now,
                              struct smol_rstore_rec *out, char *err)
{
    char td[1200], path[1400];
    if (tenant_dir(rs, tenant, td, sizeof td)) return unknown(err, id);
    snprintf(path, sizeof path, "%s/%s", td, id);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ENOENT || errno == ELOOP) return unknown(err, id);
        return smol_errf(err, SMOL_EIO, "responses store: %s: %s", path, strerror(errno));
    }
    struct stat st;
    uint8_t *buf = NULL;
    enum smol_err e = SMOL_OK;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size > (1ll << 31) ||
        !(buf = malloc((size_t)st.st_size + 1))) {
        e = smol_errf(err, SMOL_EIO, "responses store: %s cannot be read", path);
    } else {
        size_t got = 0;
        while (got < (size_t)st.st_size) {
            ssize_t r = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        if (got != (size_t)st.st_size) e = smol_errf(err, SMOL_EIO, "responses store: short read of %s", path);
    }
    close(fd);
    if (e) {
        free(buf);
        return e;
    }
    buf[st.st_size] = 0;
    uint8_t *nl = memchr(buf, '\n', (size_t)st.st_size);
    long long created = 0;
    char prev[SMOL_RSTORE_ID_MAX + 2];
    if (!nl || (*nl = 0, sscanf((char *)buf, MAGIC " %lld %65s", &created, prev) != 2) ||
        (strcmp(prev, "-") && !smol_rstore_id_ok(prev))) {
        free(buf);
        smol_log_warn("responses store: %s is not a stored response; removed", path);
        unlink(path);
        return unknown(err, id);
    }
    if (expired(rs, created, now)) {
        free(buf);
        unlink(path);
        return unknown(err, id);
    }
    size_t off = (size_t)(nl + 1 - buf);
    memset(out, 0, sizeof *out);
    snprintf(out->id, sizeof out->id, "%s", id);
    memcpy(out->prev, strcmp(prev, "-") ? prev : "", strcmp(prev, "-") ? strlen(prev) + 1 : 1);  /* id_ok */
    out->created = created;
    out->len = (size_t)st.st_size - off;
    memmove(buf, buf + off, out->len);
    out->data = buf;
    return SMOL_OK;
}

/* ---- the interface ---------------------------------------------------------------- */

static enum smol_err check(const char *tenant, const char *id, char *err)
{
    if (!smol_tenant_ok(tenant)) return smol_errf(err, SMOL_EINVAL, "bad tenant");
    if (!smol_rstore_id_ok(id)) return unknown(err, id ? id : "");
    return SMOL_OK;
}

enum smol_err smol_rstore_put(struct smol_rstore *rs, const char *tenant, struct smol_rstore_rec *rec, char *err)
{
    enum smol_err e = check(tenant, rec->id, err);
    if (e) return smol_errf(err, SMOL_EINVAL, "response_store: the id must be 1..64 of [A-Za-z0-9_-]");
    if (rec->prev[0] && !smol_rstore_id_ok(rec->prev))
        return smol_errf(err, SMOL_EINVAL, "response_store: previous_response_id must be 1..64 of [A-Za-z0-9_-]");
    rec->created = (int64_t)time(NULL);
    if (rs->dir) return file_put(rs, tenant, rec, err);
    if (rs->tenant_bytes && rec->len > rs->tenant_bytes)
        return smol_errf(err, SMOL_ETOOLARGE, "the response (%zu bytes) is over the tenant's store (%llu bytes)",
                         rec->len, (unsigned long long)rs->tenant_bytes);
    struct ment **old = mem_find(rs, tenant, rec->id);
    if (old) mem_unlink(old);
    mem_fit(rs, tenant, rec->len, rec->created);
    struct ment *m = calloc(1, sizeof *m);
    uint8_t *d = malloc(rec->len ? rec->len : 1);
    if (!m || !d) {
        free(m);
        free(d);
        return smol_errf(err, SMOL_ENOMEM, "out of memory");
    }
    memcpy(d, rec->data, rec->len);
    snprintf(m->tenant, sizeof m->tenant, "%s", tenant);
    m->r = *rec;
    m->r.data = d;
    m->next = rs->mem;
    rs->mem = m;
    return SMOL_OK;
}

enum smol_err smol_rstore_get(struct smol_rstore *rs, const char *tenant, const char *id,
                              struct smol_rstore_rec *out, char *err)
{
    enum smol_err e = check(tenant, id, err);
    if (e) return e;
    const int64_t now = (int64_t)time(NULL);
    if (rs->dir) return file_get(rs, tenant, id, now, out, err);
    struct ment **pp = mem_find(rs, tenant, id);
    if (!pp) return unknown(err, id);
    if (expired(rs, (*pp)->r.created, now)) {
        mem_unlink(pp);
        return unknown(err, id);
    }
    *out = (*pp)->r;
    out->data = malloc(out->len ? out->len : 1);
    if (!out->data) return smol_errf(err, SMOL_ENOMEM, "out of memory");
    memcpy(out->data, (*pp)->r.data, out->len);
    return SMOL_OK;
}

enum smol_err smol_rstore_delete(struct smol_rstore *rs, const char *tenant, const char *id, char *err)
{
    enum smol_err e = check(tenant, id, err);
    if (e) return e;
    if (!rs->dir) {
        struct ment **pp = mem_find(rs, tenant, id);
        if (!pp || expired(rs, (*pp)->r.created, (int64_t)time(NULL))) {
            if (pp) mem_unlink(pp);
            return unknown(err, id);
        }
        mem_unlink(pp);
        return SMOL_OK;
    }
    struct smol_rstore_rec r;
    if ((e = file_get(rs, tenant, id, (int64_t)time(NULL), &r, err))) return e;  /* expired: unknown */
    free(r.data);
    char td[1200], path[1400];
    tenant_dir(rs, tenant, td, sizeof td);
    snprintf(path, sizeof path, "%s/%s", td, id);
    if (unlink(path) && errno != ENOENT)
        return smol_errf(err, SMOL_EIO, "responses store: removing %s: %s", path, strerror(errno));
    return SMOL_OK;
}

enum smol_err smol_rstore_list(struct smol_rstore *rs, const char *tenant, struct smol_rstore_rec **ids,
                               size_t *n, char *err)
{
    *ids = NULL;
    *n = 0;
    if (!smol_tenant_ok(tenant)) return smol_errf(err, SMOL_EINVAL, "bad tenant");
    const int64_t now = (int64_t)time(NULL);
    if (rs->dir) {
        struct fent *fs;
        size_t k;
        enum smol_err e = file_scan(rs, tenant, now, &fs, &k, err);
        if (e) return e;
        *ids = calloc(k ? k : 1, sizeof **ids);
        if (!*ids) {
            free(fs);
            return smol_errf(err, SMOL_ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < k; i++) {
            snprintf((*ids)[i].id, sizeof (*ids)[i].id, "%s", fs[i].id);
            (*ids)[i].created = fs[i].mtime / 1000000000;
        }
        *n = k;
        free(fs);
        return SMOL_OK;
    }
    mem_fit(rs, tenant, 0, now);        /* drops the expired */
    size_t k = 0;
    for (struct ment *m = rs->mem; m; m = m->next) k += !strcmp(m->tenant, tenant);
    *ids = calloc(k ? k : 1, sizeof **ids);
    if (!*ids) return smol_errf(err, SMOL_ENOMEM, "out of memory");
    for (struct ment *m = rs->mem; m; m = m->next)
        if (!strcmp(m->tenant, tenant)) {
            (*ids)[*n] = m->r;
            (*ids)[(*n)++].data = NULL;
        }
    return SMOL_OK;
}

/* ---- the thread ------------------------------------------------------------------------ */

static void *thread_main(void *arg)
{
    struct smol_rstore *rs = arg;
    pthread_mutex_lock(&rs->mu);
    for (;;) {
        while (!rs->todo && !rs->quit) pthread_cond_wait(&rs->cv, &rs->mu);
        if (rs->quit) break;
        struct smol_rstore_job *j = rs->todo;
        rs->todo = j->next;
        if (!rs->todo) rs->todo_tail = &rs->todo;
        rs->n_todo--;
        pthread_mutex_unlock(&rs->mu);
        j->next = NULL;
        j->run(rs, j);                  /* the files: outside the lock */
        pthread_mutex_lock(&rs->mu);
        *rs->done_tail = j;
        rs->done_tail = &j->next;
        uint64_t one = 1;
        if (write(rs->efd, &one, sizeof one) < 0 && errno != EAGAIN)
            smol_log_warn("responses store: eventfd: %s", strerror(errno));
    }
    pthread_mutex_unlock(&rs->mu);
    return NULL;
}

enum smol_err smol_rstore_start(struct smol_rstore *rs, char *err)
{
    if (rs->started) return SMOL_OK;
    rs->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (rs->efd < 0) return smol_errf(err, SMOL_EIO, "responses store: eventfd: %s", strerror(errno));
    int e = pthread_create(&rs->thread, NULL, thread_main, rs);
    if (e) return smol_errf(err, SMOL_EIO, "responses store: cannot start its thread: %s", strerror(e));
    rs->started = 1;
    return SMOL_OK;
}

int smol_rstore_fd(const struct smol_rstore *rs) { return rs && rs->started ? rs->efd : -1; }

int smol_rstore_submit(struct smol_rstore *rs, struct smol_rstore_job *job)
{
    if (!rs->started) return -1;
    pthread_mutex_lock(&rs->mu);
    int full = rs->n_todo >= SMOL_RSTORE_MAX_JOBS;
    if (!full) {
        job->next = NULL;
        *rs->todo_tail = job;
        rs->todo_tail = &job->next;
        rs->n_todo++;
        pthread_cond_signal(&rs->cv);
    }
    pthread_mutex_unlock(&rs->mu);
    return full ? -1 : 0;
}

struct smol_rstore_job *smol_rstore_done(struct smol_rstore *rs)
{
    uint64_t n;
    if (read(rs->efd, &n, sizeof n) < 0 && errno != EAGAIN) smol_log_warn("responses store: eventfd: %s", strerror(errno));
    pthread_mutex_lock(&rs->mu);
    struct smol_rstore_job *j = rs->done;
    if (j) {
        rs->done = j->next;
        if (!rs->done) rs->done_tail = &rs->done;
        j->next = NULL;
    }
    pthread_mutex_unlock(&rs->mu);
    return j;
}
