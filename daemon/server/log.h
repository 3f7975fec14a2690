/*
 * log.h - the daemon's log: one line per message on stderr with a systemd
 * priority prefix ("<6>smollm3d: loaded model ..."), which journald turns
 * into the record's priority (SyslogLevelPrefix=, on by default).
 *
 * With a log file (--log-file) lines go to that file instead, prefixed with
 * an ISO-8601 UTC timestamp as well; smol_log_reopen() (SIGHUP, after
 * logrotate moved the file) opens the path again and swaps it in with
 * dup2(), so a concurrent writer on another thread never sees a closed
 * descriptor.  Each line is written with one write(2) (lines are capped at
 * SMOL_LOG_LINE bytes), so lines of different threads never interleave.
 * sd_journal_print is not used: it silently drops messages without journald.
 */
#ifndef SMOL_LOG_H
#define SMOL_LOG_H

#include "daemon/model/error.h"

#define SMOL_LOG_LINE 2048

/* syslog priorities, as systemd's <N> prefixes use them. */
enum smol_log_level {
    SMOL_LOG_ERR = 3,
    SMOL_LOG_WARNING = 4,
    SMOL_LOG_NOTICE = 5,
    SMOL_LOG_INFO = 6,
    SMOL_LOG_DEBUG = 7,
};

/* ident: the program name in each line; max_level: messages above it are
 * skipped.  Logs to stderr until smol_log_open_file. */
void smol_log_init(const char *ident, enum smol_log_level max_level);
void smol_log_set_level(enum smol_log_level max_level);
/* "err", "warning", "notice", "info", "debug" -> level; -1 if unknown. */
int smol_log_level_parse(const char *name);
const char *smol_log_level_name(enum smol_log_level l);

/* Sends lines to path (created 0640, appended).  SMOL_EIO naming the path. */
enum smol_err smol_log_open_file(const char *path, char *err);
/* Reopens the log file (no-op when logging to stderr); SMOL_EIO on failure,
 * in which case the old file stays in use. */
enum smol_err smol_log_reopen(char *err);
/* Closes the log file (back to stderr); called at exit. */
void smol_log_close(void);

void smol_log(enum smol_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define smol_log_err(...) smol_log(SMOL_LOG_ERR, __VA_ARGS__)
#define smol_log_warn(...) smol_log(SMOL_LOG_WARNING, __VA_ARGS__)
#define smol_log_notice(...) smol_log(SMOL_LOG_NOTICE, __VA_ARGS__)
#define smol_log_info(...) smol_log(SMOL_LOG_INFO, __VA_ARGS__)
#define smol_log_debug(...) smol_log(SMOL_LOG_DEBUG, __VA_ARGS__)

#endif
