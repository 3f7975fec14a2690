/*
 * util.h - small helpers of smollm3-gateway: a growable byte buffer, the
 * random ids, HTML escaping and stderr logging with
 * systemd <N> priority prefixes (journald reads them from stderr).
 */
#ifndef GW_UTIL_H
#define GW_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct gw_buf {
    char *p;                    /* bytes [off, len) are pending; NUL-terminated when len > 0 */
    size_t len, off, cap;
};

/* Appends n bytes; returns 0, or -1 when out of memory (the buffer is unchanged; gw_oom_count
 * counts it). */
int gw_buf_add(struct gw_buf *b, const void *data, size_t n);

/* Allocations that failed where the code goes on without the bytes: jansson's (a json_t built
 * or dumped without them: json_object_set_new's failures are silent) and gw_buf_add's.  A
 * response is built between two reads of it (gw_oom_mark, gw_oom_since): when it moved, the
 * response lost something and is replaced by an error (http.c, daemon.c).  The gateway is
 * single-threaded: a plain counter. */
extern unsigned gw_oom_count;
/* jansson's allocator counting its failures (main, before any JSON). */
void gw_json_init(void);
int gw_buf_str(struct gw_buf *b, const char *s);
int gw_buf_printf(struct gw_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s[0..n) with & < > " ' escaped as HTML entities, and CR as &#13; (an HTML parser
 * turns a raw CR, or CRLF, into LF; the reference keeps it, and no CR reaches an SSE stream). */
int gw_buf_html(struct gw_buf *b, const char *s, size_t n);
/* Appends one server-sent event: `event: NAME`, data[0..n) as `data: ` lines, a blank line.
 * SSE ends a line at CRLF, LF or a lone CR (WHATWG HTML, server-sent events), so the data is
 * split at each of them: none can end the event early or start a field of its own.  The client
 * (EventSource) joins the lines with LF: a payload that must keep its CRs escapes them first
 * (gw_buf_html: &#13;).  0, or -1 when out of memory. */
int gw_buf_sse_event(struct gw_buf *b, const char *name, const char *data, size_t n);
/* Bytes pending (len - off). */
size_t gw_buf_pending(const struct gw_buf *b);
void gw_buf_reset(struct gw_buf *b);
void gw_buf_deinit(struct gw_buf *b);

/* Strings a parsed request owns (JSON dumps, joined text): freed together
 * (core.c). */
struct gw_owned {
    char **v;
    size_t n;
};
/* Takes s (malloc'd): s, or NULL (s freed) when s is NULL or out of memory. */
char *gw_own(struct gw_owned *o, char *s);
void gw_owned_free(struct gw_owned *o);

/* Appends b[0, n) as UTF-8, each byte of an invalid sequence as U+FFFD. */
int gw_utf8_lossy(struct gw_buf *out, const unsigned char *b, size_t n);

/* n bytes from getrandom(2).  0, or -1 (errno set) when the kernel has none
 * to give (pool not ready at early boot, seccomp, ...): there is no weaker
 * fallback, the caller refuses what needed them. */
int gw_random_bytes(void *out, size_t n);
/* n uniformly random characters of [A-Za-z0-9] into out (n + 1 bytes,
 * NUL-terminated); 0, or -1 with out = "" when gw_random_bytes fails.  These
 * ids (UI stream ids, completion ids) are capabilities: never predictable. */
int gw_random_alnum(char *out, size_t n);
/* Test hook: while > 0, each gw_random_bytes call fails (EAGAIN) and
 * decrements it.  0 (off) unless a test sets it. */
extern int gw_random_fail_next;

/* SipHash-2-4 of data[0, n) under key: a keyed hash (pseudo-random function) whose output says
 * nothing about the input to one who does not hold the key (auth.c's tenant ids). */
uint64_t gw_siphash24(const unsigned char key[16], const void *data, size_t n);

/* Logs one line on stderr: prio is a syslog level (3 err, 4 warning, 6 info, 7 debug). */
void gw_log(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The thinking budget (GenerateRequest.thinking_budget, tokens before the
 * daemon forces </think>) of an OpenAI reasoning effort, for chat's
 * reasoning_effort and Responses' reasoning.effort: low 512, medium 2048,
 * high 8192, xhigh 16384, max 32768; none / minimal (thinking off) and
 * anything else 0 (the daemon's default_thinking_budget). */
static inline unsigned gw_effort_budget(const char *level)
{
    static const struct { const char *name; unsigned budget; } t[] = {
        { "low", 512 }, { "medium", 2048 }, { "high", 8192 }, { "xhigh", 16384 }, { "max", 32768 } };
    for (unsigned i = 0; level && i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(level, t[i].name)) return t[i].budget;
    return 0;
}

#endif
