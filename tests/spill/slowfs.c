/*
 * slowfs.c - an LD_PRELOAD shim that makes one directory a slow filesystem
 * (issue 46, item 2): every filesystem call on a path under SMOL_SLOWFS_DIR,
 * or on a descriptor (or DIR stream) opened there, first sleeps
 * SMOL_SLOWFS_MS milliseconds (default 100), like a file server 100 ms
 * away.  Built by the Makefile into $(BUILD)/lib/libslowfs.so; used by the
 * scale-out suite's slowfs part (tests/scaleout/test_scaleout.py) and by
 * `make bench-spill-slowfs` (tests/bench/bench_spill_slowfs.py).
 *
 * With SMOL_SLOWFS_LOG set, each delayed call appends a line
 * "<thread name> <tid> <call> <what> <CLOCK_MONOTONIC s>" to that file (O_APPEND, one write per
 * line): the test asserts that no line names the engine thread
 * ("smol-engine", engine.c) - the strongest check that no filesystem call
 * of the spill runs there, whatever the timing.
 *
 * Covered: open/openat (and their 64-bit and fortified forms), stat/lstat/
 * fstatat/fstat, read/pread/write/pwrite (fortified forms too), fcntl,
 * unlink/unlinkat, rename/renameat/renameat2, link/linkat, mkdir/mkdirat,
 * faccessat, fsync/fdatasync, ftruncate, futimens, fdopendir/opendir/
 * readdir, lseek, close (a round trip on a network filesystem: the
 * flush, the locks given back).  Calls glibc makes inside
 * itself are not seen (they bypass the PLT).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_FD 65536

static char dir[PATH_MAX];
static size_t dir_len;
static long delay_ms = 100;
static int log_fd = -1;
static atomic_uchar tracked[MAX_FD];
static pthread_once_t once = PTHREAD_ONCE_INIT;

#define REAL(ret, name, ...) \
    static ret (*real_##name)(__VA_ARGS__); \
    if (!real_##name) real_##name = (ret (*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name)

static void init(void)
{
    const char *d = getenv("SMOL_SLOWFS_DIR"), *ms = getenv("SMOL_SLOWFS_MS"), *lg = getenv("SMOL_SLOWFS_LOG");
    if (d && *d) {
        char *r = realpath(d, NULL);    /* (the directory may not exist yet: then as given) */
        snprintf(dir, sizeof dir, "%s", r ? r : d);
        free(r);
        dir_len = strlen(dir);
        while (dir_len > 1 && dir[dir_len - 1] == '/') dir[--dir_len] = 0;
    }
    if (ms && *ms) delay_ms = atol(ms);
    if (lg && *lg) {
        int (*ro)(const char *, int, ...) = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
        log_fd = ro(lg, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
}

static int under(const char *path)
{
    pthread_once(&once, init);
    if (!dir_len || !path) return 0;
    if (path[0] != '/') { /* relative: against the working directory */
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd)) return 0;
        size_t n = strlen(cwd);
        return !strncmp(cwd, dir, dir_len) && (n == dir_len || cwd[dir_len] == '/');
    }
    return !strncmp(path, dir, dir_len) && (path[dir_len] == 0 || path[dir_len] == '/');
}

static int fd_slow(int fd)
{
    pthread_once(&once, init);
    return fd >= 0 && fd < MAX_FD && atomic_load(&tracked[fd]);
}

static int at_slow(int dirfd, const char *path)
{
    if (path && path[0] == '/') return under(path);
    if (dirfd == AT_FDCWD) return under(path ? path : ".");
    return fd_slow(dirfd);
}

static void track(int fd, int on)
{
    if (fd >= 0 && fd < MAX_FD) atomic_store(&tracked[fd], (unsigned char)on);
}

static void slow(const char *call, const char *what)
{
    if (log_fd >= 0) {
        char name[32] = "?", line[512];
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        prctl(PR_GET_NAME, name, 0, 0, 0);
        int n = snprintf(line, sizeof line, "%s %ld %s %s %.3f\n", name, (long)syscall(SYS_gettid), call,
                         what ? what : "-", now.tv_sec + now.tv_nsec / 1e9);
        if (n > 0) {
            REAL(ssize_t, write, int, const void *, size_t);
            real_write(log_fd, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1));
        }
    }
    struct timespec ts = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

#define SLOW_IF(cond, call, what) do { if (cond) { const int e_ = errno; slow(call, what); errno = e_; } } while (0)

/* ---- opening and closing ---- */

static int mode_of(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, int) : 0;
}

#define OPEN_FN(name) \
    int name(const char *path, int flags, ...) \
    { \
        va_list ap; va_start(ap, flags); const int mode = mode_of(flags, ap); va_end(ap); \
        REAL(int, name, const char *, int, ...); \
        const int s = under(path); \
        SLOW_IF(s, #name, path); \
        const int fd = real_##name(path, flags, mode); \
        if (fd >= 0) track(fd, s); \
        return fd; \
    }
OPEN_FN(open)
OPEN_FN(open64)

#define OPENAT_FN(name) \
    int name(int dirfd, const char *path, int flags, ...) \
    { \
        va_list ap; va_start(ap, flags); const int mode = mode_of(flags, ap); va_end(ap); \
        REAL(int, name, int, const char *, int, ...); \
        const int s = at_slow(dirfd, path); \
        SLOW_IF(s, #name, path); \
        const int fd = real_##name(dirfd, path, flags, mode); \
        if (fd >= 0) track(fd, s); \
        return fd; \
    }
OPENAT_FN(openat)
OPENAT_FN(openat64)

int __open_2(const char *path, int flags) { return open(path, flags); }
int __open64_2(const char *path, int flags) { return open64(path, flags); }
int __openat_2(int dirfd, const char *path, int flags) { return openat(dirfd, path, flags); }
int __openat64_2(int dirfd, const char *path, int flags) { return openat64(dirfd, path, flags); }

int close(int fd)
{
    REAL(int, close, int);
    /* (on a network filesystem a close is a round trip: the data flushed,
     * the file's locks given back) */
    SLOW_IF(fd_slow(fd), "close", NULL);
    track(fd, 0);
    return real_close(fd);
}

/* ---- by path ---- */

#define PATH_FN(ret, name, call_args, ...) \
    ret name(__VA_ARGS__) \
    { \
        REAL(ret, name, __VA_ARGS__); \
        SLOW_IF(under(path), #name, path); \
        return real_##name call_args; \
    }
PATH_FN(int, stat, (path, st), const char *path, struct stat *st)
PATH_FN(int, lstat, (path, st), const char *path, struct stat *st)
PATH_FN(int, stat64, (path, st), const char *path, struct stat64 *st)
PATH_FN(int, lstat64, (path, st), const char *path, struct stat64 *st)
PATH_FN(int, unlink, (path), const char *path)
PATH_FN(int, mkdir, (path, mode), const char *path, mode_t mode)

int rename(const char *a, const char *b)
{
    REAL(int, rename, const char *, const char *);
    SLOW_IF(under(a) || under(b), "rename", a);
    return real_rename(a, b);
}

int link(const char *a, const char *b)
{
    REAL(int, link, const char *, const char *);
    SLOW_IF(under(a) || under(b), "link", a);
    return real_link(a, b);
}

DIR *opendir(const char *path)
{
    REAL(DIR *, opendir, const char *);
    const int s = under(path);
    SLOW_IF(s, "opendir", path);
    DIR *d = real_opendir(path);
    if (d) track(dirfd(d), s);
    return d;
}

/* ---- relative to a directory descriptor ---- */

#define AT_FN(ret, name, call_args, ...) \
    ret name(__VA_ARGS__) \
    { \
        REAL(ret, name, __VA_ARGS__); \
        SLOW_IF(at_slow(dirfd, path), #name, path); \
        return real_##name call_args; \
    }
AT_FN(int, fstatat, (dirfd, path, st, fl), int dirfd, const char *path, struct stat *st, int fl)
AT_FN(int, fstatat64, (dirfd, path, st, fl), int dirfd, const char *path, struct stat64 *st, int fl)
AT_FN(int, unlinkat, (dirfd, path, fl), int dirfd, const char *path, int fl)
AT_FN(int, mkdirat, (dirfd, path, mode), int dirfd, const char *path, mode_t mode)
AT_FN(int, faccessat, (dirfd, path, mode, fl), int dirfd, const char *path, int mode, int fl)
AT_FN(int, utimensat, (dirfd, path, ts, fl), int dirfd, const char *path, const struct timespec ts[2], int fl)

int renameat(int da, const char *a, int db, const char *b)
{
    REAL(int, renameat, int, const char *, int, const char *);
    SLOW_IF(at_slow(da, a) || at_slow(db, b), "renameat", a);
    return real_renameat(da, a, db, b);
}

int renameat2(int da, const char *a, int db, const char *b, unsigned fl)
{
    REAL(int, renameat2, int, const char *, int, const char *, unsigned);
    SLOW_IF(at_slow(da, a) || at_slow(db, b), "renameat2", a);
    return real_renameat2(da, a, db, b, fl);
}

int linkat(int da, const char *a, int db, const char *b, int fl)
{
    REAL(int, linkat, int, const char *, int, const char *, int);
    SLOW_IF(at_slow(da, a) || at_slow(db, b), "linkat", a);
    return real_linkat(da, a, db, b, fl);
}

/* ---- by descriptor ---- */

#define FD_FN(ret, name, call_args, ...) \
    ret name(__VA_ARGS__) \
    { \
        REAL(ret, name, __VA_ARGS__); \
        SLOW_IF(fd_slow(fd), #name, NULL); \
        return real_##name call_args; \
    }
FD_FN(int, fstat, (fd, st), int fd, struct stat *st)
FD_FN(int, fstat64, (fd, st), int fd, struct stat64 *st)
FD_FN(ssize_t, read, (fd, b, n), int fd, void *b, size_t n)
FD_FN(ssize_t, pread, (fd, b, n, o), int fd, void *b, size_t n, off_t o)
FD_FN(ssize_t, pread64, (fd, b, n, o), int fd, void *b, size_t n, off64_t o)
FD_FN(ssize_t, __read_chk, (fd, b, n, bl), int fd, void *b, size_t n, size_t bl)
FD_FN(ssize_t, __pread_chk, (fd, b, n, o, bl), int fd, void *b, size_t n, off_t o, size_t bl)
FD_FN(ssize_t, __pread64_chk, (fd, b, n, o, bl), int fd, void *b, size_t n, off64_t o, size_t bl)
FD_FN(ssize_t, write, (fd, b, n), int fd, const void *b, size_t n)
FD_FN(ssize_t, pwrite, (fd, b, n, o), int fd, const void *b, size_t n, off_t o)
FD_FN(ssize_t, pwrite64, (fd, b, n, o), int fd, const void *b, size_t n, off64_t o)
FD_FN(int, fsync, (fd), int fd)
FD_FN(int, fdatasync, (fd), int fd)
FD_FN(int, ftruncate, (fd, n), int fd, off_t n)
FD_FN(int, ftruncate64, (fd, n), int fd, off64_t n)
FD_FN(int, futimens, (fd, ts), int fd, const struct timespec ts[2])
FD_FN(off_t, lseek, (fd, o, w), int fd, off_t o, int w)
FD_FN(off64_t, lseek64, (fd, o, w), int fd, off64_t o, int w)

#define FCNTL_FN(name) \
    int name(int fd, int cmd, ...) \
    { \
        va_list ap; va_start(ap, cmd); void *arg = va_arg(ap, void *); va_end(ap); \
        REAL(int, name, int, int, ...); \
        /* (descriptor flags and duplication are no file server's round trip) */ \
        SLOW_IF(fd_slow(fd) && cmd != F_GETFD && cmd != F_SETFD && cmd != F_GETFL && cmd != F_SETFL, #name, NULL); \
        const int r = real_##name(fd, cmd, arg); \
        if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)) track(r, fd_slow(fd)); \
        return r; \
    }
FCNTL_FN(fcntl)
FCNTL_FN(fcntl64)

DIR *fdopendir(int fd)
{
    REAL(DIR *, fdopendir, int);
    SLOW_IF(fd_slow(fd), "fdopendir", NULL);
    return real_fdopendir(fd);
}

struct dirent *readdir(DIR *d)
{
    REAL(struct dirent *, readdir, DIR *);
    SLOW_IF(fd_slow(dirfd(d)), "readdir", NULL);
    return real_readdir(d);
}

struct dirent64 *readdir64(DIR *d)
{
    REAL(struct dirent64 *, readdir64, DIR *);
    SLOW_IF(fd_slow(dirfd(d)), "readdir64", NULL);
    return real_readdir64(d);
}

int closedir(DIR *d)
{
    REAL(int, closedir, DIR *);
    track(dirfd(d), 0);
    return real_closedir(d);
}
