/*
 * detok.h - streaming detokenizer: token bytes in, complete UTF-8 text out,
 * stop strings cut out.
 *
 * The caller feeds the exact bytes of each generated token's piece (it looks
 * them up in the tokenizer; this module knows nothing about tokens).  What
 * comes out is always complete, valid UTF-8:
 *
 *   - a character split across tokens is held back until its last byte
 *     arrives;
 *   - invalid UTF-8 from the model is replaced by U+FFFD, one per maximal
 *     ill-formed subpart (the Unicode / WHATWG "substitution of maximal
 *     subparts" practice): a stray continuation byte, an overlong or surrogate
 *     lead, a truncated sequence followed by something else.  A sequence is
 *     decided by the byte that breaks it, so nothing ever stalls;
 *   - stop strings are matched on that decoded text, across token
 *     boundaries, and no byte of a matched stop string is ever emitted: a
 *     suffix of the text that is a proper prefix of some stop string is held
 *     back until the next bytes prove it is not one.  The match is the stop
 *     occurrence that *ends* first in the text (ties: the longest), which is
 *     what checking after every byte would find, so the result does not
 *     depend on how the text is split into tokens.  On a match, the text
 *     before the stop is emitted, `stopped` is set with the stop's index, and
 *     everything after (including the rest of that push) is dropped.
 *
 * At the end of generation, flush() releases the held-back text (a pending
 * incomplete character becomes U+FFFD).  The only allocations are at init
 * and the growth of one reused internal buffer when a push is larger than
 * any before.
 */
#ifndef SMOL_DETOK_H
#define SMOL_DETOK_H

#include <stdbool.h>
#include <stddef.h>
#include "daemon/model/error.h"

#define SMOL_DETOK_MAX_STOPS 16        /* stop strings per request */
#define SMOL_DETOK_MAX_STOP_LEN 256    /* bytes per stop string */

/* What one push or flush produced. */
struct smol_detok_out {
    const char *text;           /* complete UTF-8, NOT NUL-terminated; points into the
                                   detokenizer, valid until its next call */
    size_t len;                 /* bytes; 0 when everything was held back */
    bool stopped;               /* a stop string has matched (now or before) */
    int stop_index;             /* its index in the stops given to init, else -1 */
};

struct smol_detok {
    /* stop strings: copies, in one allocation */
    char *stop_mem;
    const char *stops[SMOL_DETOK_MAX_STOPS];
    size_t stop_len[SMOL_DETOK_MAX_STOPS];      /* bytes, each >= 1 */
    size_t n_stops;
    size_t max_stop_len;                        /* 0 without stops */
    /* an incomplete UTF-8 character from the last bytes pushed */
    unsigned char part[4];
    size_t part_len, part_need;                 /* bytes held, bytes the character needs */
    /* decoded text: buf[0, emitted) was handed out by the last call, the rest held back */
    char *buf;
    size_t len, cap, emitted;
    bool stopped;
    int stop_index;                             /* -1 until a stop matches */
};

/* Prepares d (caller's storage) with n_stops NUL-terminated stop strings,
 * which are copied.  Errors (d is then safe to deinit): SMOL_EINVAL for a NULL
 * or empty stop string, more than SMOL_DETOK_MAX_STOPS of them or one longer
 * than SMOL_DETOK_MAX_STOP_LEN bytes; SMOL_EUTF8 for a stop string that is not
 * valid UTF-8; SMOL_ENOMEM.  The message names the offending stop by index. */
enum smol_err smol_detok_init(struct smol_detok *d, const char *const *stops, size_t n_stops,
                              char *err);

/* Feeds the n bytes of one token's piece.  *out receives the text that is now
 * final (possibly none).  Once stopped, every push returns no text and the
 * stop again.  Errors: SMOL_ENOMEM (d unchanged). */
enum smol_err smol_detok_push(struct smol_detok *d, const char *bytes, size_t n,
                              struct smol_detok_out *out);

/* End of generation: emits everything held back (an incomplete trailing
 * character as U+FFFD) unless that completes a stop string.  d stays usable;
 * a later push starts from an empty state (stops still armed). */
enum smol_err smol_detok_flush(struct smol_detok *d, struct smol_detok_out *out);

/* Frees what init allocated; accepts a zeroed or already deinited d. */
void smol_detok_deinit(struct smol_detok *d);

#endif
