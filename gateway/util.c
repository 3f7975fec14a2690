/*
 * util.c - buffer, clock, ids, HTML escaping and logging for the gateway.
 */
#include "gateway/util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

unsigned gw_oom_count;

static void *json_alloc(size_t n)
{
    void *p = malloc(n);
    if (!p) gw_oom_count++;
    return p;
}

void gw_json_init(void) { json_set_alloc_funcs(json_alloc, free); }

int gw_buf_add(struct gw_buf *b, const void *data, size_t n)
{
    if (b->off > 0 && b->off == b->len) b->off = b->len = 0;
    if (b->len + n + 1 > b->cap) {
        if (b->off > 0 && b->off >= b->len / 2) {   /* compact before growing */
            memmove(b->p, b->p + b->off, b->len - b->off);
            b->len -= b->off;
            b->off = 0;
        }
        if (b->len + n + 1 > b->cap) {
            size_t cap = b->cap ? b->cap : 256;
            while (cap < b->len + n + 1) cap *= 2;
            char *p = realloc(b->p, cap);
            if (!p) {
                gw_oom_count++;
                return -1;
            }
            b->p = p;
            b->cap = cap;
        }
    }
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int gw_buf_str(struct gw_buf *b, const char *s)
{
    return gw_buf_add(b, s, strlen(s));
}

int gw_buf_printf(struct gw_buf *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    if ((size_t)n < sizeof small) return gw_buf_add(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) {
        gw_oom_count++;         /* the bytes are lost: as gw_buf_add's failure */
        return -1;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int r = gw_buf_add(b, big, (size_t)n);
    free(big);
    return r;
}

int gw_buf_html(struct gw_buf *b, const char *s, size_t n)
{
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        const char *rep = NULL;
        switch (s[i]) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&quot;"; break;
        case '\'': rep = "&#39;"; break;
        case '\r': rep = "&#13;"; break;   /* an HTML parser reads a raw CR as LF; SSE as a line end */
        default: continue;
        }
        if (gw_buf_add(b, s + start, i - start) || gw_buf_str(b, rep)) return -1;
        start = i + 1;
    }
    return gw_buf_add(b, s + start, n - start);
}

int gw_buf_sse_event(struct gw_buf *b, const char *name, const char *data, size_t n)
{
    struct gw_buf ev = { 0 };   /* built apart, appended whole: never half an event */
    int r = gw_buf_str(&ev, "event: ") || gw_buf_str(&ev, name) || gw_buf_str(&ev, "\n");
    const char *p = data, *end = data + n;
    while (!r) {
        const char *le = p;
        while (le < end && *le != '\n' && *le != '\r') le++;
        r = gw_buf_str(&ev, "data: ") || gw_buf_add(&ev, p, (size_t)(le - p)) || gw_buf_str(&ev, "\n");
        if (le == end) break;
        p = le + (le[0] == '\r' && le + 1 < end && le[1] == '\n' ? 2 : 1);
    }
    r = r || gw_buf_str(&ev, "\n") || gw_buf_add(b, ev.p, ev.len);
    gw_buf_deinit(&ev);
    return r ? -1 : 0;
}

size_t gw_buf_pending(const struct gw_buf *b)
{
    return b->len - b->off;
}

void gw_buf_reset(struct gw_buf *b)
{
    b->len = b->off = 0;
    if (b->p) b->p[0] = 0;
}

void gw_buf_deinit(struct gw_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->off = b->cap = 0;
}

int gw_random_fail_next;         /* test hook (util.h) */

int gw_random_bytes(void *out, size_t n)
{
    unsigned char *p = out;
    if (gw_random_fail_next > 0) {
        gw_random_fail_next--;
        errno = EAGAIN;
        return -1;
    }
    while (n) {
        /* NONBLOCK: at early boot the pool may not be ready; the gateway's one
         * thread must not wait for it, the request is refused instead */
        ssize_t k = getrandom(p, n, GRND_NONBLOCK);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int gw_random_alnum(char *out, size_t n)
{
    static const char set[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char r[64];
    size_t i = 0, have = 0, used = 0;
    while (i < n) {
        if (used == have) {
            if (gw_random_bytes(r, sizeof r)) {
                out[0] = 0;
                return -1;
            }
            have = sizeof r;
            used = 0;
        }
        unsigned c = r[used++];
        if (c < 248) out[i++] = set[c % 62];   /* 248 = 4 * 62: every character equally likely */
    }
    out[n] = 0;
    return 0;
}

void gw_log(int prio, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "<%d>smollm3-gateway: %s\n", prio, line);
}

/* Length of the valid UTF-8 sequence at b[0, n) (RFC 3629: no overlongs,
 * surrogates or values above U+10FFFF), 0 if it is not one. */
static size_t utf8_seq(const unsigned char *b, size_t n)
{
    unsigned c = b[0];
    size_t len = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3
               : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
    if (!len || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((b[i] & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && b[1] < 0xA0) return 0;
    if (c == 0xED && b[1] > 0x9F) return 0;
    if (c == 0xF0 && b[1] < 0x90) return 0;
    if (c == 0xF4 && b[1] > 0x8F) return 0;
    return len;
}

int gw_utf8_lossy(struct gw_buf *out, const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq(b + i, n - i);
        if (l && b[i]) {
            if (gw_buf_add(out, b + i, l)) return -1;
            i += l;
        } else {                /* invalid, or NUL (a C string could not carry it) */
            if (gw_buf_add(out, "\xEF\xBF\xBD", 3)) return -1;
            i++;
        }
    }
    return gw_buf_add(out, "", 0);
}

/* ---- SipHash-2-4 ---------------------------------------------------------- */

/* Aumasson and Bernstein's reference (github.com/veorq/SipHash), 64-bit output. */
#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                              \
    do {                                                                      \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);             \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);             \
    } while (0)

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

uint64_t gw_siphash24(const unsigned char key[16], const void *data, size_t n)
{
    const unsigned char *in = data;
    uint64_t k0 = le64(key), k1 = le64(key + 8);
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    size_t full = n - n % 8;
    for (size_t i = 0; i < full; i += 8) {
        uint64_t m = le64(in + i);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)n << 56;
    for (size_t i = 0; i < n % 8; i++) b |= (uint64_t)in[full + i] << (8 * i);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* ---- owned strings -------------------------------------------------------------- */

char *gw_own(struct gw_owned *o, char *s)
{
    if (!s) return NULL;
    char **n = realloc(o->v, (o->n + 1) * sizeof *n);
    if (!n) {
        free(s);
        return NULL;
    }
    o->v = n;
    o->v[o->n++] = s;
    return s;
}

void gw_owned_free(struct gw_owned *o)
{
    for (size_t i = 0; i < o->n; i++) free(o->v[i]);
    free(o->v);
    o->v = NULL;
    o->n = 0;
}
