/* log.c - stderr / log-file logging with systemd priority prefixes (see log.h). */
#include "daemon/server/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    char ident[32];
    int max_level;
    int fd;                 /* 2, or a descriptor of the log file (stable across reopen) */
    char *path;             /* log file path, NULL for stderr */
    pthread_mutex_t lock;   /* guards fd/path changes (open, reopen, close) */
} g_log = { "smollm3d", SMOL_LOG_INFO, 2, NULL, PTHREAD_MUTEX_INITIALIZER };

static const char *const level_names[8] = {
    [SMOL_LOG_ERR] = "err", [SMOL_LOG_WARNING] = "warning", [SMOL_LOG_NOTICE] = "notice",
    [SMOL_LOG_INFO] = "info", [SMOL_LOG_DEBUG] = "debug",
};

void smol_log_init(const char *ident, enum smol_log_level max_level)
{
    snprintf(g_log.ident, sizeof g_log.ident, "%s", ident ? ident : "smollm3d");
    g_log.max_level = max_level;
}

void smol_log_set_level(enum smol_log_level max_level) { g_log.max_level = max_level; }

int smol_log_level_parse(const char *name)
{
    for (int i = SMOL_LOG_ERR; i <= SMOL_LOG_DEBUG; i++)
        if (name && !strcmp(name, level_names[i])) return i;
    return -1;
}

const char *smol_log_level_name(enum smol_log_level l)
{
    return (l >= SMOL_LOG_ERR && l <= SMOL_LOG_DEBUG) ? level_names[l] : "?";
}

static int open_log(const char *path)
{
    return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
}

enum smol_err smol_log_open_file(const char *path, char *err)
{
    int fd = open_log(path);
    if (fd < 0) return smol_errf(err, SMOL_EIO, "cannot open log file %s: %s", path, strerror(errno));
    char *p = strdup(path);
    if (!p) { close(fd); return smol_errf(err, SMOL_ENOMEM, "out of memory"); }
    pthread_mutex_lock(&g_log.lock);
    if (g_log.path) {           /* already a file: swap the new one in under the same fd */
        dup2(fd, g_log.fd);
        close(fd);
        free(g_log.path);
    } else {
        g_log.fd = fd;
    }
    g_log.path = p;
    pthread_mutex_unlock(&g_log.lock);
    return SMOL_OK;
}

enum smol_err smol_log_reopen(char *err)
{
    enum smol_err e = SMOL_OK;
    pthread_mutex_lock(&g_log.lock);
    if (g_log.path) {
        int fd = open_log(g_log.path);
        if (fd < 0) {
            e = smol_errf(err, SMOL_EIO, "cannot reopen log file %s: %s", g_log.path, strerror(errno));
        } else {
            dup2(fd, g_log.fd);     /* atomic: writers never see a closed descriptor */
            close(fd);
        }
    }
    pthread_mutex_unlock(&g_log.lock);
    return e;
}

void smol_log_close(void)
{
    pthread_mutex_lock(&g_log.lock);
    if (g_log.path) {
        close(g_log.fd);
        g_log.fd = 2;
        free(g_log.path);
        g_log.path = NULL;
    }
    pthread_mutex_unlock(&g_log.lock);
}

void smol_log(enum smol_log_level level, const char *fmt, ...)
{
    if ((int)level > g_log.max_level) return;
    int saved = errno;
    char line[SMOL_LOG_LINE];
    size_t n = 0;
    if (g_log.path) {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
        n += snprintf(line + n, sizeof line - n, ".%03ldZ ", ts.tv_nsec / 1000000);
    }
    n += snprintf(line + n, sizeof line - n, "<%d>%s: ", (int)level, g_log.ident);
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    if (k < 0) k = 0;
    n += (size_t)k;
    if (n > sizeof line - 2) n = sizeof line - 2;   /* truncated: still one line */
    for (size_t i = 0; i < n; i++)                  /* one record per line for journald */
        if (line[i] == '\n') line[i] = ' ';
    line[n++] = '\n';
    ssize_t w = write(g_log.fd, line, n);
    (void)w;
    errno = saved;
}
