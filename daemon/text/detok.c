/*
 * detok.c - streaming detokenizer with stop strings (see detok.h).
 *
 * Every push: compact the buffer (drop what the last call handed out),
 * decode the new bytes into it as valid UTF-8, look for the earliest-ending
 * stop string with memmem over the buffer (what was held back is shorter
 * than the longest stop, so this stays small), and otherwise hand out all
 * but the longest suffix that is a proper prefix of a stop string.
 *
 * Stop strings are valid UTF-8, so a match or a held prefix starts on a lead
 * byte, i.e. on a character boundary of the decoded text: what is handed out
 * is always whole characters.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE                 /* memmem */
#endif
#include "daemon/text/detok.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define INITIAL_CAP 256
static const char REPLACEMENT[3] = { (char)0xEF, (char)0xBF, (char)0xBD };   /* U+FFFD */

/* --------------------------------------------------------------- UTF-8 --- */

/* Bytes a sequence starting with lead byte c needs (1-4), 0 if c cannot start one. */
static size_t utf8_need(unsigned char c)
{
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;                       /* continuation byte, overlong C0/C1, or above U+10FFFF */
}

/* Whether c may follow the bytes part[0, len) of a sequence (len >= 1):
 * the second byte's range excludes overlongs (E0, F0), surrogates (ED) and
 * code points above U+10FFFF (F4). */
static bool utf8_cont_ok(const unsigned char *part, size_t len, unsigned char c)
{
    unsigned char lo = 0x80, hi = 0xBF;
    if (len == 1) {
        switch (part[0]) {
        case 0xE0: lo = 0xA0; break;
        case 0xED: hi = 0x9F; break;
        case 0xF0: lo = 0x90; break;
        case 0xF4: hi = 0x8F; break;
        }
    }
    return c >= lo && c <= hi;
}

static bool utf8_valid(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t need = utf8_need(s[i]);
        if (need == 0 || need > n - i) return false;
        for (size_t k = 1; k < need; k++)
            if (!utf8_cont_ok(s + i, k, s[i + k])) return false;
        i += need;
    }
    return true;
}

/* Appends the decoding of b[0, n) to d->buf, which has room for 3 * (n + 3)
 * more bytes (each byte yields at most one 3-byte U+FFFD, plus one for a
 * pending part). */
static void decode(struct smol_detok *d, const unsigned char *b, size_t n)
{
    char *o = d->buf + d->len;
    for (size_t i = 0; i < n;) {
        unsigned char c = b[i];
        if (d->part_len > 0) {
            if (utf8_cont_ok(d->part, d->part_len, c)) {
                d->part[d->part_len++] = c;
                i++;
                if (d->part_len == d->part_need) {
                    memcpy(o, d->part, d->part_len);
                    o += d->part_len;
                    d->part_len = 0;
                }
            } else {                /* the sequence is broken: U+FFFD, then c afresh */
                memcpy(o, REPLACEMENT, 3);
                o += 3;
                d->part_len = 0;
            }
            continue;
        }
        size_t need = utf8_need(c);
        if (need == 1) {
            *o++ = (char)c;
        } else if (need == 0) {
            memcpy(o, REPLACEMENT, 3);
            o += 3;
        } else {
            d->part[0] = c;
            d->part_len = 1;
            d->part_need = need;
        }
        i++;
    }
    d->len = (size_t)(o - d->buf);
}

/* ------------------------------------------------------------- buffer --- */

/* Drops what the last call handed out and makes room for `more` bytes. */
static enum smol_err prepare(struct smol_detok *d, size_t more)
{
    if (d->emitted > 0) {
        memmove(d->buf, d->buf + d->emitted, d->len - d->emitted);
        d->len -= d->emitted;
        d->emitted = 0;
    }
    if (more > SIZE_MAX / 2 - d->len) return SMOL_ENOMEM;
    if (d->len + more <= d->cap) return SMOL_OK;
    size_t cap = d->cap ? d->cap : INITIAL_CAP;
    while (cap < d->len + more) cap *= 2;
    char *nb = realloc(d->buf, cap);
    if (!nb) return SMOL_ENOMEM;
    d->buf = nb;
    d->cap = cap;
    return SMOL_OK;
}

/* ------------------------------------------------------------ matching --- */

/* Length of the longest suffix of buf that is a proper prefix of a stop. */
static size_t held_suffix(const struct smol_detok *d)
{
    if (d->max_stop_len < 2) return 0;
    size_t p = d->len > d->max_stop_len - 1 ? d->len - (d->max_stop_len - 1) : 0;
    for (; p < d->len; p++) {
        size_t tail = d->len - p;
        for (size_t i = 0; i < d->n_stops; i++)
            if (d->stop_len[i] > tail && d->stops[i][0] == d->buf[p] &&
                memcmp(d->buf + p, d->stops[i], tail) == 0)
                return tail;
    }
    return 0;
}

/* Decides what of buf is final and fills *out. */
static void scan(struct smol_detok *d, bool final, struct smol_detok_out *out)
{
    size_t best_end = SIZE_MAX, best_start = 0;
    int best = -1;
    for (size_t i = 0; i < d->n_stops; i++) {
        const char *f = memmem(d->buf, d->len, d->stops[i], d->stop_len[i]);
        if (!f) continue;
        size_t start = (size_t)(f - d->buf), end = start + d->stop_len[i];
        if (end < best_end || (end == best_end && start < best_start)) {
            best_end = end;
            best_start = start;
            best = (int)i;
        }
    }
    if (best >= 0) {
        d->stopped = true;
        d->stop_index = best;
        d->len = d->emitted = best_start;   /* the stop and all after it are dropped */
        d->part_len = 0;
    } else {
        d->emitted = d->len - (final ? 0 : held_suffix(d));
    }
    *out = (struct smol_detok_out){
        .text = d->buf, .len = d->emitted, .stopped = d->stopped, .stop_index = d->stop_index,
    };
}

static void out_stopped(const struct smol_detok *d, struct smol_detok_out *out)
{
    *out = (struct smol_detok_out){
        .text = "", .len = 0, .stopped = true, .stop_index = d->stop_index,
    };
}

/* ----------------------------------------------------------------- API --- */

enum smol_err smol_detok_init(struct smol_detok *d, const char *const *stops, size_t n_stops,
                              char *err)
{
    memset(d, 0, sizeof *d);
    d->stop_index = -1;
    if (n_stops > SMOL_DETOK_MAX_STOPS)
        return smol_errf(err, SMOL_EINVAL, "%zu stop strings, at most %d allowed",
                         n_stops, SMOL_DETOK_MAX_STOPS);
    if (n_stops > 0 && !stops) return smol_errf(err, SMOL_EINVAL, "stop strings missing");
    size_t total = 0;
    for (size_t i = 0; i < n_stops; i++) {
        if (!stops[i]) return smol_errf(err, SMOL_EINVAL, "stop string %zu is NULL", i);
        size_t len = strlen(stops[i]);
        if (len == 0) return smol_errf(err, SMOL_EINVAL, "stop string %zu is empty", i);
        if (len > SMOL_DETOK_MAX_STOP_LEN)
            return smol_errf(err, SMOL_EINVAL, "stop string %zu is %zu bytes, at most %d allowed",
                             i, len, SMOL_DETOK_MAX_STOP_LEN);
        if (!utf8_valid((const unsigned char *)stops[i], len))
            return smol_errf(err, SMOL_EUTF8, "stop string %zu is not valid UTF-8", i);
        d->stop_len[i] = len;
        total += len + 1;
        if (len > d->max_stop_len) d->max_stop_len = len;
    }
    d->buf = malloc(INITIAL_CAP);
    d->stop_mem = malloc(total ? total : 1);
    if (!d->buf || !d->stop_mem) {
        smol_detok_deinit(d);
        return smol_errf(err, SMOL_ENOMEM, "detokenizer: out of memory");
    }
    d->cap = INITIAL_CAP;
    char *p = d->stop_mem;
    for (size_t i = 0; i < n_stops; i++) {
        memcpy(p, stops[i], d->stop_len[i] + 1);
        d->stops[i] = p;
        p += d->stop_len[i] + 1;
    }
    d->n_stops = n_stops;
    return SMOL_OK;
}

enum smol_err smol_detok_push(struct smol_detok *d, const char *bytes, size_t n,
                              struct smol_detok_out *out)
{
    if (d->stopped) {
        out_stopped(d, out);
        return SMOL_OK;
    }
    if (n > SIZE_MAX / 4 - 3 || prepare(d, 3 * (n + 3))) {
        *out = (struct smol_detok_out){ .text = "", .stop_index = d->stop_index };
        return SMOL_ENOMEM;
    }
    decode(d, (const unsigned char *)bytes, n);
    scan(d, false, out);
    return SMOL_OK;
}

enum smol_err smol_detok_flush(struct smol_detok *d, struct smol_detok_out *out)
{
    if (d->stopped) {
        out_stopped(d, out);
        return SMOL_OK;
    }
    if (prepare(d, 3)) {
        *out = (struct smol_detok_out){ .text = "", .stop_index = d->stop_index };
        return SMOL_ENOMEM;
    }
    if (d->part_len > 0) {          /* truncated character at the end: U+FFFD */
        memcpy(d->buf + d->len, REPLACEMENT, 3);
        d->len += 3;
        d->part_len = 0;
    }
    scan(d, true, out);
    return SMOL_OK;
}

void smol_detok_deinit(struct smol_detok *d)
{
    if (!d) return;
    free(d->buf);
    free(d->stop_mem);
    d->buf = NULL;
    d->stop_mem = NULL;
    d->len = d->cap = d->emitted = 0;
    d->n_stops = 0;
}
