/*
 * chat_template.c - native renders of the SmolLM3 and SmolLM2 chat templates.
 *
 * Design: every supported template is a C function that mirrors the Jinja
 * source statement by statement (see chat_template.h for the behaviour).
 * The Jinja expressions the templates use are reproduced with Python's
 * semantics where they differ from C: str.rstrip() strips Unicode
 * whitespace, str.replace() is left-to-right non-overlapping, and
 * `tool | string` is Python's repr() of the dict json.loads() would build
 * (insertion order, single quotes unless the text has ' and no ", escapes
 * for non-printable code points from Python's Unicode table, shortest
 * round-trip floats).  Inputs are validated up front (roles, UTF-8, date,
 * tools type) so the render itself can only fail on memory.  Every byte
 * copied from the request goes through emit_user() / span_add(), which record
 * it as an untrusted span (smol_chat_render_spans) for the tokenizer.
 */
#include "chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ buffer */

void smol_chat_buf_init(struct smol_chat_buf *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
}

void smol_chat_buf_deinit(struct smol_chat_buf *b)
{
    if (!b) return;
    free(b->data);
    smol_chat_buf_init(b);
}

void smol_chat_buf_reset(struct smol_chat_buf *b)
{
    b->len = 0;
    if (b->data) b->data[0] = '\0';
}

int smol_chat_buf_append(struct smol_chat_buf *b, const char *s, size_t n)
{
    if (n > SIZE_MAX / 2 - b->len - 1) return -1;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p) return -1;
        b->data = p;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int smol_chat_buf_puts(struct smol_chat_buf *b, const char *s)
{
    return smol_chat_buf_append(b, s, strlen(s));
}

/* ============================================================= spans */

void smol_chat_spans_init(struct smol_chat_spans *s)
{
    s->v = NULL;
    s->src = NULL;
    s->n = s->cap = 0;
}

void smol_chat_spans_deinit(struct smol_chat_spans *s)
{
    if (!s) return;
    free(s->v);
    free(s->src);
    smol_chat_spans_init(s);
}

void smol_chat_spans_reset(struct smol_chat_spans *s)
{
    s->n = 0;
}

/* Records [off, off + len) of the output as caller text; no-op without sp. */
static int span_add(struct smol_chat_spans *sp, size_t off, size_t len, int32_t msg, int32_t tool,
                    enum smol_chat_field field)
{
    if (!sp) return 0;
    if (sp->n == sp->cap) {
        size_t cap = sp->cap ? sp->cap * 2 : 16;
        struct smol_span *v = realloc(sp->v, cap * sizeof *v);
        if (!v) return -1;
        sp->v = v;
        struct smol_chat_span_src *src = realloc(sp->src, cap * sizeof *src);
        if (!src) return -1;
        sp->src = src;
        sp->cap = cap;
    }
    sp->v[sp->n] = (struct smol_span){.off = off, .len = len};
    sp->src[sp->n] = (struct smol_chat_span_src){.msg = msg, .tool = tool, .field = field};
    sp->n++;
    return 0;
}

/* Appends caller text s[0..n) to the output and records its span. */
static int emit_user(struct smol_chat_buf *o, struct smol_chat_spans *sp, const char *s, size_t n, int32_t msg,
                     int32_t tool, enum smol_chat_field field)
{
    size_t off = o->len;
    return smol_chat_buf_append(o, s, n) || span_add(sp, off, n, msg, tool, field) ? -1 : 0;
}

/* ============================================================ unicode */

int smol_chat_utf8_valid(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t k;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0) { k = 1; cp = c & 0x1F; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { k = 2; cp = c & 0x0F; min = 0x800; }
        else if ((c & 0xF8) == 0xF0) { k = 3; cp = c & 0x07; min = 0x10000; }
        else return 0;
        if (n - i <= k) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += k + 1;
    }
    return 1;
}

/* Decodes the code point at s (valid UTF-8 assumed); returns its length. */
static size_t utf8_decode(const unsigned char *s, uint32_t *cp)
{
    if (s[0] < 0x80) { *cp = s[0]; return 1; }
    if ((s[0] & 0xE0) == 0xC0) { *cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F); return 2; }
    if ((s[0] & 0xF0) == 0xE0) {
        *cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    *cp = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
          ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}

/* Python's str.isspace(). */
static int py_isspace(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Length of s[0..n) after Python's str.rstrip() (valid UTF-8 assumed). */
static size_t py_rstrip_len(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    while (n > 0) {
        size_t st = n - 1;
        while (st > 0 && (s[st] & 0xC0) == 0x80) st--;
        uint32_t cp;
        utf8_decode(s + st, &cp);
        if (!py_isspace(cp)) break;
        n = st;
    }
    return n;
}

/* Appends s[0..n) with every occurrence of pat removed (Python
 * s.replace(pat, ""), left to right, non-overlapping). */
static int append_removing(struct smol_chat_buf *b, const char *s, size_t n, const char *pat)
{
    size_t pl = strlen(pat), i = 0, run = 0;
    while (i < n) {
        if (n - i >= pl && !memcmp(s + i, pat, pl)) {
            if (smol_chat_buf_append(b, s + run, i - run)) return -1;
            i += pl;
            run = i;
        } else {
            i++;
        }
    }
    return smol_chat_buf_append(b, s + run, n - run);
}

/* ====================================================== python repr */

/* Code point ranges Python's str.isprintable() rejects (categories Cc, Cf,
 * Cs, Co, Cn, Zl, Zp, Zs except U+0020), generated from CPython 3.11
 * (Unicode 14.0.0); sorted inclusive [lo, hi] pairs. */
static const uint32_t nonprintable[] = {
    0x0,0x1f, 0x7f,0xa0, 0xad,0xad, 0x378,0x379, 0x380,0x383, 0x38b,0x38b, 0x38d,0x38d, 0x3a2,0x3a2,
    0x530,0x530, 0x557,0x558, 0x58b,0x58c, 0x590,0x590, 0x5c8,0x5cf, 0x5eb,0x5ee, 0x5f5,0x605,
    0x61c,0x61c, 0x6dd,0x6dd, 0x70e,0x70f, 0x74b,0x74c, 0x7b2,0x7bf, 0x7fb,0x7fc, 0x82e,0x82f,
    0x83f,0x83f, 0x85c,0x85d, 0x85f,0x85f, 0x86b,0x86f, 0x88f,0x897, 0x8e2,0x8e2, 0x984,0x984,
    0x98d,0x98e, 0x991,0x992, 0x9a9,0x9a9, 0x9b1,0x9b1, 0x9b3,0x9b5, 0x9ba,0x9bb, 0x9c5,0x9c6,
    0x9c9,0x9ca, 0x9cf,0x9d6, 0x9d8,0x9db, 0x9de,0x9de, 0x9e4,0x9e5, 0x9ff,0xa00, 0xa04,0xa04,
    0xa0b,0xa0e, 0xa11,0xa12, 0xa29,0xa29, 0xa31,0xa31, 0xa34,0xa34, 0xa37,0xa37, 0xa3a,0xa3b,
    0xa3d,0xa3d, 0xa43,0xa46, 0xa49,0xa4a, 0xa4e,0xa50, 0xa52,0xa58, 0xa5d,0xa5d, 0xa5f,0xa65,
    0xa77,0xa80, 0xa84,0xa84, 0xa8e,0xa8e, 0xa92,0xa92, 0xaa9,0xaa9, 0xab1,0xab1, 0xab4,0xab4,
    0xaba,0xabb, 0xac6,0xac6, 0xaca,0xaca, 0xace,0xacf, 0xad1,0xadf, 0xae4,0xae5, 0xaf2,0xaf8,
    0xb00,0xb00, 0xb04,0xb04, 0xb0d,0xb0e, 0xb11,0xb12, 0xb29,0xb29, 0xb31,0xb31, 0xb34,0xb34,
    0xb3a,0xb3b, 0xb45,0xb46, 0xb49,0xb4a, 0xb4e,0xb54, 0xb58,0xb5b, 0xb5e,0xb5e, 0xb64,0xb65,
    0xb78,0xb81, 0xb84,0xb84, 0xb8b,0xb8d, 0xb91,0xb91, 0xb96,0xb98, 0xb9b,0xb9b, 0xb9d,0xb9d,
    0xba0,0xba2, 0xba5,0xba7, 0xbab,0xbad, 0xbba,0xbbd, 0xbc3,0xbc5, 0xbc9,0xbc9, 0xbce,0xbcf,
    0xbd1,0xbd6, 0xbd8,0xbe5, 0xbfb,0xbff, 0xc0d,0xc0d, 0xc11,0xc11, 0xc29,0xc29, 0xc3a,0xc3b,
    0xc45,0xc45, 0xc49,0xc49, 0xc4e,0xc54, 0xc57,0xc57, 0xc5b,0xc5c, 0xc5e,0xc5f, 0xc64,0xc65,
    0xc70,0xc76, 0xc8d,0xc8d, 0xc91,0xc91, 0xca9,0xca9, 0xcb4,0xcb4, 0xcba,0xcbb, 0xcc5,0xcc5,
    0xcc9,0xcc9, 0xcce,0xcd4, 0xcd7,0xcdc, 0xcdf,0xcdf, 0xce4,0xce5, 0xcf0,0xcf0, 0xcf3,0xcff,
    0xd0d,0xd0d, 0xd11,0xd11, 0xd45,0xd45, 0xd49,0xd49, 0xd50,0xd53, 0xd64,0xd65, 0xd80,0xd80,
    0xd84,0xd84, 0xd97,0xd99, 0xdb2,0xdb2, 0xdbc,0xdbc, 0xdbe,0xdbf, 0xdc7,0xdc9, 0xdcb,0xdce,
    0xdd5,0xdd5, 0xdd7,0xdd7, 0xde0,0xde5, 0xdf0,0xdf1, 0xdf5,0xe00, 0xe3b,0xe3e, 0xe5c,0xe80,
    0xe83,0xe83, 0xe85,0xe85, 0xe8b,0xe8b, 0xea4,0xea4, 0xea6,0xea6, 0xebe,0xebf, 0xec5,0xec5,
    0xec7,0xec7, 0xece,0xecf, 0xeda,0xedb, 0xee0,0xeff, 0xf48,0xf48, 0xf6d,0xf70, 0xf98,0xf98,
    0xfbd,0xfbd, 0xfcd,0xfcd, 0xfdb,0xfff, 0x10c6,0x10c6, 0x10c8,0x10cc, 0x10ce,0x10cf,
    0x1249,0x1249, 0x124e,0x124f, 0x1257,0x1257, 0x1259,0x1259, 0x125e,0x125f, 0x1289,0x1289,
    0x128e,0x128f, 0x12b1,0x12b1, 0x12b6,0x12b7, 0x12bf,0x12bf, 0x12c1,0x12c1, 0x12c6,0x12c7,
    0x12d7,0x12d7, 0x1311,0x1311, 0x1316,0x1317, 0x135b,0x135c, 0x137d,0x137f, 0x139a,0x139f,
    0x13f6,0x13f7, 0x13fe,0x13ff, 0x1680,0x1680, 0x169d,0x169f, 0x16f9,0x16ff, 0x1716,0x171e,
    0x1737,0x173f, 0x1754,0x175f, 0x176d,0x176d, 0x1771,0x1771, 0x1774,0x177f, 0x17de,0x17df,
    0x17ea,0x17ef, 0x17fa,0x17ff, 0x180e,0x180e, 0x181a,0x181f, 0x1879,0x187f, 0x18ab,0x18af,
    0x18f6,0x18ff, 0x191f,0x191f, 0x192c,0x192f, 0x193c,0x193f, 0x1941,0x1943, 0x196e,0x196f,
    0x1975,0x197f, 0x19ac,0x19af, 0x19ca,0x19cf, 0x19db,0x19dd, 0x1a1c,0x1a1d, 0x1a5f,0x1a5f,
    0x1a7d,0x1a7e, 0x1a8a,0x1a8f, 0x1a9a,0x1a9f, 0x1aae,0x1aaf, 0x1acf,0x1aff, 0x1b4d,0x1b4f,
    0x1b7f,0x1b7f, 0x1bf4,0x1bfb, 0x1c38,0x1c3a, 0x1c4a,0x1c4c, 0x1c89,0x1c8f, 0x1cbb,0x1cbc,
    0x1cc8,0x1ccf, 0x1cfb,0x1cff, 0x1f16,0x1f17, 0x1f1e,0x1f1f, 0x1f46,0x1f47, 0x1f4e,0x1f4f,
    0x1f58,0x1f58, 0x1f5a,0x1f5a, 0x1f5c,0x1f5c, 0x1f5e,0x1f5e, 0x1f7e,0x1f7f, 0x1fb5,0x1fb5,
    0x1fc5,0x1fc5, 0x1fd4,0x1fd5, 0x1fdc,0x1fdc, 0x1ff0,0x1ff1, 0x1ff5,0x1ff5, 0x1fff,0x200f,
    0x2028,0x202f, 0x205f,0x206f, 0x2072,0x2073, 0x208f,0x208f, 0x209d,0x209f, 0x20c1,0x20cf,
    0x20f1,0x20ff, 0x218c,0x218f, 0x2427,0x243f, 0x244b,0x245f, 0x2b74,0x2b75, 0x2b96,0x2b96,
    0x2cf4,0x2cf8, 0x2d26,0x2d26, 0x2d28,0x2d2c, 0x2d2e,0x2d2f, 0x2d68,0x2d6e, 0x2d71,0x2d7e,
    0x2d97,0x2d9f, 0x2da7,0x2da7, 0x2daf,0x2daf, 0x2db7,0x2db7, 0x2dbf,0x2dbf, 0x2dc7,0x2dc7,
    0x2dcf,0x2dcf, 0x2dd7,0x2dd7, 0x2ddf,0x2ddf, 0x2e5e,0x2e7f, 0x2e9a,0x2e9a, 0x2ef4,0x2eff,
    0x2fd6,0x2fef, 0x2ffc,0x3000, 0x3040,0x3040, 0x3097,0x3098, 0x3100,0x3104, 0x3130,0x3130,
    0x318f,0x318f, 0x31e4,0x31ef, 0x321f,0x321f, 0xa48d,0xa48f, 0xa4c7,0xa4cf, 0xa62c,0xa63f,
    0xa6f8,0xa6ff, 0xa7cb,0xa7cf, 0xa7d2,0xa7d2, 0xa7d4,0xa7d4, 0xa7da,0xa7f1, 0xa82d,0xa82f,
    0xa83a,0xa83f, 0xa878,0xa87f, 0xa8c6,0xa8cd, 0xa8da,0xa8df, 0xa954,0xa95e, 0xa97d,0xa97f,
    0xa9ce,0xa9ce, 0xa9da,0xa9dd, 0xa9ff,0xa9ff, 0xaa37,0xaa3f, 0xaa4e,0xaa4f, 0xaa5a,0xaa5b,
    0xaac3,0xaada, 0xaaf7,0xab00, 0xab07,0xab08, 0xab0f,0xab10, 0xab17,0xab1f, 0xab27,0xab27,
    0xab2f,0xab2f, 0xab6c,0xab6f, 0xabee,0xabef, 0xabfa,0xabff, 0xd7a4,0xd7af, 0xd7c7,0xd7ca,
    0xd7fc,0xf8ff, 0xfa6e,0xfa6f, 0xfada,0xfaff, 0xfb07,0xfb12, 0xfb18,0xfb1c, 0xfb37,0xfb37,
    0xfb3d,0xfb3d, 0xfb3f,0xfb3f, 0xfb42,0xfb42, 0xfb45,0xfb45, 0xfbc3,0xfbd2, 0xfd90,0xfd91,
    0xfdc8,0xfdce, 0xfdd0,0xfdef, 0xfe1a,0xfe1f, 0xfe53,0xfe53, 0xfe67,0xfe67, 0xfe6c,0xfe6f,
    0xfe75,0xfe75, 0xfefd,0xff00, 0xffbf,0xffc1, 0xffc8,0xffc9, 0xffd0,0xffd1, 0xffd8,0xffd9,
    0xffdd,0xffdf, 0xffe7,0xffe7, 0xffef,0xfffb, 0xfffe,0xffff, 0x1000c,0x1000c, 0x10027,0x10027,
    0x1003b,0x1003b, 0x1003e,0x1003e, 0x1004e,0x1004f, 0x1005e,0x1007f, 0x100fb,0x100ff,
    0x10103,0x10106, 0x10134,0x10136, 0x1018f,0x1018f, 0x1019d,0x1019f, 0x101a1,0x101cf,
    0x101fe,0x1027f, 0x1029d,0x1029f, 0x102d1,0x102df, 0x102fc,0x102ff, 0x10324,0x1032c,
    0x1034b,0x1034f, 0x1037b,0x1037f, 0x1039e,0x1039e, 0x103c4,0x103c7, 0x103d6,0x103ff,
    0x1049e,0x1049f, 0x104aa,0x104af, 0x104d4,0x104d7, 0x104fc,0x104ff, 0x10528,0x1052f,
    0x10564,0x1056e, 0x1057b,0x1057b, 0x1058b,0x1058b, 0x10593,0x10593, 0x10596,0x10596,
    0x105a2,0x105a2, 0x105b2,0x105b2, 0x105ba,0x105ba, 0x105bd,0x105ff, 0x10737,0x1073f,
    0x10756,0x1075f, 0x10768,0x1077f, 0x10786,0x10786, 0x107b1,0x107b1, 0x107bb,0x107ff,
    0x10806,0x10807, 0x10809,0x10809, 0x10836,0x10836, 0x10839,0x1083b, 0x1083d,0x1083e,
    0x10856,0x10856, 0x1089f,0x108a6, 0x108b0,0x108df, 0x108f3,0x108f3, 0x108f6,0x108fa,
    0x1091c,0x1091e, 0x1093a,0x1093e, 0x10940,0x1097f, 0x109b8,0x109bb, 0x109d0,0x109d1,
    0x10a04,0x10a04, 0x10a07,0x10a0b, 0x10a14,0x10a14, 0x10a18,0x10a18, 0x10a36,0x10a37,
    0x10a3b,0x10a3e, 0x10a49,0x10a4f, 0x10a59,0x10a5f, 0x10aa0,0x10abf, 0x10ae7,0x10aea,
    0x10af7,0x10aff, 0x10b36,0x10b38, 0x10b56,0x10b57, 0x10b73,0x10b77, 0x10b92,0x10b98,
    0x10b9d,0x10ba8, 0x10bb0,0x10bff, 0x10c49,0x10c7f, 0x10cb3,0x10cbf, 0x10cf3,0x10cf9,
    0x10d28,0x10d2f, 0x10d3a,0x10e5f, 0x10e7f,0x10e7f, 0x10eaa,0x10eaa, 0x10eae,0x10eaf,
    0x10eb2,0x10eff, 0x10f28,0x10f2f, 0x10f5a,0x10f6f, 0x10f8a,0x10faf, 0x10fcc,0x10fdf,
    0x10ff7,0x10fff, 0x1104e,0x11051, 0x11076,0x1107e, 0x110bd,0x110bd, 0x110c3,0x110cf,
    0x110e9,0x110ef, 0x110fa,0x110ff, 0x11135,0x11135, 0x11148,0x1114f, 0x11177,0x1117f,
    0x111e0,0x111e0, 0x111f5,0x111ff, 0x11212,0x11212, 0x1123f,0x1127f, 0x11287,0x11287,
    0x11289,0x11289, 0x1128e,0x1128e, 0x1129e,0x1129e, 0x112aa,0x112af, 0x112eb,0x112ef,
    0x112fa,0x112ff, 0x11304,0x11304, 0x1130d,0x1130e, 0x11311,0x11312, 0x11329,0x11329,
    0x11331,0x11331, 0x11334,0x11334, 0x1133a,0x1133a, 0x11345,0x11346, 0x11349,0x1134a,
    0x1134e,0x1134f, 0x11351,0x11356, 0x11358,0x1135c, 0x11364,0x11365, 0x1136d,0x1136f,
    0x11375,0x113ff, 0x1145c,0x1145c, 0x11462,0x1147f, 0x114c8,0x114cf, 0x114da,0x1157f,
    0x115b6,0x115b7, 0x115de,0x115ff, 0x11645,0x1164f, 0x1165a,0x1165f, 0x1166d,0x1167f,
    0x116ba,0x116bf, 0x116ca,0x116ff, 0x1171b,0x1171c, 0x1172c,0x1172f, 0x11747,0x117ff,
    0x1183c,0x1189f, 0x118f3,0x118fe, 0x11907,0x11908, 0x1190a,0x1190b, 0x11914,0x11914,
    0x11917,0x11917, 0x11936,0x11936, 0x11939,0x1193a, 0x11947,0x1194f, 0x1195a,0x1199f,
    0x119a8,0x119a9, 0x119d8,0x119d9, 0x119e5,0x119ff, 0x11a48,0x11a4f, 0x11aa3,0x11aaf,
    0x11af9,0x11bff, 0x11c09,0x11c09, 0x11c37,0x11c37, 0x11c46,0x11c4f, 0x11c6d,0x11c6f,
    0x11c90,0x11c91, 0x11ca8,0x11ca8, 0x11cb7,0x11cff, 0x11d07,0x11d07, 0x11d0a,0x11d0a,
    0x11d37,0x11d39, 0x11d3b,0x11d3b, 0x11d3e,0x11d3e, 0x11d48,0x11d4f, 0x11d5a,0x11d5f,
    0x11d66,0x11d66, 0x11d69,0x11d69, 0x11d8f,0x11d8f, 0x11d92,0x11d92, 0x11d99,0x11d9f,
    0x11daa,0x11edf, 0x11ef9,0x11faf, 0x11fb1,0x11fbf, 0x11ff2,0x11ffe, 0x1239a,0x123ff,
    0x1246f,0x1246f, 0x12475,0x1247f, 0x12544,0x12f8f, 0x12ff3,0x12fff, 0x1342f,0x143ff,
    0x14647,0x167ff, 0x16a39,0x16a3f, 0x16a5f,0x16a5f, 0x16a6a,0x16a6d, 0x16abf,0x16abf,
    0x16aca,0x16acf, 0x16aee,0x16aef, 0x16af6,0x16aff, 0x16b46,0x16b4f, 0x16b5a,0x16b5a,
    0x16b62,0x16b62, 0x16b78,0x16b7c, 0x16b90,0x16e3f, 0x16e9b,0x16eff, 0x16f4b,0x16f4e,
    0x16f88,0x16f8e, 0x16fa0,0x16fdf, 0x16fe5,0x16fef, 0x16ff2,0x16fff, 0x187f8,0x187ff,
    0x18cd6,0x18cff, 0x18d09,0x1afef, 0x1aff4,0x1aff4, 0x1affc,0x1affc, 0x1afff,0x1afff,
    0x1b123,0x1b14f, 0x1b153,0x1b163, 0x1b168,0x1b16f, 0x1b2fc,0x1bbff, 0x1bc6b,0x1bc6f,
    0x1bc7d,0x1bc7f, 0x1bc89,0x1bc8f, 0x1bc9a,0x1bc9b, 0x1bca0,0x1ceff, 0x1cf2e,0x1cf2f,
    0x1cf47,0x1cf4f, 0x1cfc4,0x1cfff, 0x1d0f6,0x1d0ff, 0x1d127,0x1d128, 0x1d173,0x1d17a,
    0x1d1eb,0x1d1ff, 0x1d246,0x1d2df, 0x1d2f4,0x1d2ff, 0x1d357,0x1d35f, 0x1d379,0x1d3ff,
    0x1d455,0x1d455, 0x1d49d,0x1d49d, 0x1d4a0,0x1d4a1, 0x1d4a3,0x1d4a4, 0x1d4a7,0x1d4a8,
    0x1d4ad,0x1d4ad, 0x1d4ba,0x1d4ba, 0x1d4bc,0x1d4bc, 0x1d4c4,0x1d4c4, 0x1d506,0x1d506,
    0x1d50b,0x1d50c, 0x1d515,0x1d515, 0x1d51d,0x1d51d, 0x1d53a,0x1d53a, 0x1d53f,0x1d53f,
    0x1d545,0x1d545, 0x1d547,0x1d549, 0x1d551,0x1d551, 0x1d6a6,0x1d6a7, 0x1d7cc,0x1d7cd,
    0x1da8c,0x1da9a, 0x1daa0,0x1daa0, 0x1dab0,0x1deff, 0x1df1f,0x1dfff, 0x1e007,0x1e007,
    0x1e019,0x1e01a, 0x1e022,0x1e022, 0x1e025,0x1e025, 0x1e02b,0x1e0ff, 0x1e12d,0x1e12f,
    0x1e13e,0x1e13f, 0x1e14a,0x1e14d, 0x1e150,0x1e28f, 0x1e2af,0x1e2bf, 0x1e2fa,0x1e2fe,
    0x1e300,0x1e7df, 0x1e7e7,0x1e7e7, 0x1e7ec,0x1e7ec, 0x1e7ef,0x1e7ef, 0x1e7ff,0x1e7ff,
    0x1e8c5,0x1e8c6, 0x1e8d7,0x1e8ff, 0x1e94c,0x1e94f, 0x1e95a,0x1e95d, 0x1e960,0x1ec70,
    0x1ecb5,0x1ed00, 0x1ed3e,0x1edff, 0x1ee04,0x1ee04, 0x1ee20,0x1ee20, 0x1ee23,0x1ee23,
    0x1ee25,0x1ee26, 0x1ee28,0x1ee28, 0x1ee33,0x1ee33, 0x1ee38,0x1ee38, 0x1ee3a,0x1ee3a,
    0x1ee3c,0x1ee41, 0x1ee43,0x1ee46, 0x1ee48,0x1ee48, 0x1ee4a,0x1ee4a, 0x1ee4c,0x1ee4c,
    0x1ee50,0x1ee50, 0x1ee53,0x1ee53, 0x1ee55,0x1ee56, 0x1ee58,0x1ee58, 0x1ee5a,0x1ee5a,
    0x1ee5c,0x1ee5c, 0x1ee5e,0x1ee5e, 0x1ee60,0x1ee60, 0x1ee63,0x1ee63, 0x1ee65,0x1ee66,
    0x1ee6b,0x1ee6b, 0x1ee73,0x1ee73, 0x1ee78,0x1ee78, 0x1ee7d,0x1ee7d, 0x1ee7f,0x1ee7f,
    0x1ee8a,0x1ee8a, 0x1ee9c,0x1eea0, 0x1eea4,0x1eea4, 0x1eeaa,0x1eeaa, 0x1eebc,0x1eeef,
    0x1eef2,0x1efff, 0x1f02c,0x1f02f, 0x1f094,0x1f09f, 0x1f0af,0x1f0b0, 0x1f0c0,0x1f0c0,
    0x1f0d0,0x1f0d0, 0x1f0f6,0x1f0ff, 0x1f1ae,0x1f1e5, 0x1f203,0x1f20f, 0x1f23c,0x1f23f,
    0x1f249,0x1f24f, 0x1f252,0x1f25f, 0x1f266,0x1f2ff, 0x1f6d8,0x1f6dc, 0x1f6ed,0x1f6ef,
    0x1f6fd,0x1f6ff, 0x1f774,0x1f77f, 0x1f7d9,0x1f7df, 0x1f7ec,0x1f7ef, 0x1f7f1,0x1f7ff,
    0x1f80c,0x1f80f, 0x1f848,0x1f84f, 0x1f85a,0x1f85f, 0x1f888,0x1f88f, 0x1f8ae,0x1f8af,
    0x1f8b2,0x1f8ff, 0x1fa54,0x1fa5f, 0x1fa6e,0x1fa6f, 0x1fa75,0x1fa77, 0x1fa7d,0x1fa7f,
    0x1fa87,0x1fa8f, 0x1faad,0x1faaf, 0x1fabb,0x1fabf, 0x1fac6,0x1facf, 0x1fada,0x1fadf,
    0x1fae8,0x1faef, 0x1faf7,0x1faff, 0x1fb93,0x1fb93, 0x1fbcb,0x1fbef, 0x1fbfa,0x1ffff,
    0x2a6e0,0x2a6ff, 0x2b739,0x2b73f, 0x2b81e,0x2b81f, 0x2cea2,0x2ceaf, 0x2ebe1,0x2f7ff,
    0x2fa1e,0x2ffff, 0x3134b,0xe00ff, 0xe01f0,0x10ffff,
};

static int py_isprintable(uint32_t c)
{
    size_t lo = 0, hi = sizeof nonprintable / sizeof nonprintable[0] / 2;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < nonprintable[2 * mid]) hi = mid;
        else if (c > nonprintable[2 * mid + 1]) lo = mid + 1;
        else return 0;
    }
    return 1;
}

/* Python's repr(str) of valid UTF-8 s[0..n). */
static int pyrepr_str(struct smol_chat_buf *b, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    char quote = '\'';
    if (memchr(s, '\'', n) && !memchr(s, '"', n)) quote = '"';
    if (smol_chat_buf_append(b, &quote, 1)) return -1;
    size_t i = 0, run = 0;   /* run: start of bytes copied verbatim */
    while (i < n) {
        uint32_t cp;
        size_t k = utf8_decode(s + i, &cp);
        char esc[16];
        int e = 0;
        if (cp == (uint32_t)quote || cp == '\\') e = snprintf(esc, sizeof esc, "\\%c", (char)cp);
        else if (cp == '\t') e = snprintf(esc, sizeof esc, "\\t");
        else if (cp == '\n') e = snprintf(esc, sizeof esc, "\\n");
        else if (cp == '\r') e = snprintf(esc, sizeof esc, "\\r");
        else if (cp < 0x20 || cp == 0x7F) e = snprintf(esc, sizeof esc, "\\x%02x", cp);
        else if (cp >= 0x80 && !py_isprintable(cp)) {
            if (cp <= 0xFF) e = snprintf(esc, sizeof esc, "\\x%02x", cp);
            else if (cp <= 0xFFFF) e = snprintf(esc, sizeof esc, "\\u%04x", cp);
            else e = snprintf(esc, sizeof esc, "\\U%08x", cp);
        }
        if (e) {
            if (smol_chat_buf_append(b, str + run, i - run) || smol_chat_buf_append(b, esc, (size_t)e))
                return -1;
            run = i + k;
        }
        i += k;
    }
    if (smol_chat_buf_append(b, str + run, n - run)) return -1;
    return smol_chat_buf_append(b, &quote, 1);
}

void smol_chat_fmt_double(double v, char out[32])
{
    char tmp[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, v);
        if (strtod(tmp, NULL) == v) break;
    }
    /* tmp = [-]d[.ddd]e(+|-)xx: collect digits and the decimal exponent. */
    char digits[24];
    int nd = 0, neg = tmp[0] == '-';
    const char *q = tmp + neg;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    int exp10 = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char *o = out;
    if (neg) *o++ = '-';
    if (nd == 1 && digits[0] == '0') { strcpy(o, "0.0"); return; }
    int decpt = exp10 + 1;      /* value = 0.DIGITS * 10^decpt */
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            *o++ = '0'; *o++ = '.';
            for (int i = 0; i < -decpt; i++) *o++ = '0';
            for (int i = 0; i < nd; i++) *o++ = digits[i];
        } else if (decpt >= nd) {
            for (int i = 0; i < nd; i++) *o++ = digits[i];
            for (int i = nd; i < decpt; i++) *o++ = '0';
            *o++ = '.'; *o++ = '0';
        } else {
            for (int i = 0; i < nd; i++) {
                if (i == decpt) *o++ = '.';
                *o++ = digits[i];
            }
        }
        *o = '\0';
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            for (int i = 1; i < nd; i++) *o++ = digits[i];
        }
        int ae = exp10 < 0 ? -exp10 : exp10;      /* <= 324 for a finite double */
        snprintf(o, (size_t)(out + 32 - o), "e%c%02d", exp10 < 0 ? '-' : '+', ae % 1000);
    }
}

/* Shared walker: Python repr (py = 1) or json.dumps(ensure_ascii=False). */
static int json_str(struct smol_chat_buf *b, const char *s, size_t n)
{
    size_t run = 0;
    if (smol_chat_buf_append(b, "\"", 1)) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        int e = 0;
        switch (c) {
        case '"': e = snprintf(esc, sizeof esc, "\\\""); break;
        case '\\': e = snprintf(esc, sizeof esc, "\\\\"); break;
        case '\n': e = snprintf(esc, sizeof esc, "\\n"); break;
        case '\r': e = snprintf(esc, sizeof esc, "\\r"); break;
        case '\t': e = snprintf(esc, sizeof esc, "\\t"); break;
        case '\b': e = snprintf(esc, sizeof esc, "\\b"); break;
        case '\f': e = snprintf(esc, sizeof esc, "\\f"); break;
        default: if (c < 0x20) e = snprintf(esc, sizeof esc, "\\u%04x", c);
        }
        if (e) {
            if (smol_chat_buf_append(b, s + run, i - run) || smol_chat_buf_append(b, esc, (size_t)e)) return -1;
            run = i + 1;
        }
    }
    if (smol_chat_buf_append(b, s + run, n - run)) return -1;
    return smol_chat_buf_append(b, "\"", 1);
}

static int walk(struct smol_chat_buf *b, const json_t *v, int py, int depth)
{
    char num[40];
    if (depth > 512) return -1;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *val;
        int first = 1;
        if (smol_chat_buf_append(b, "{", 1)) return -1;
        json_object_foreach((json_t *)v, key, val) {
            if (!first && smol_chat_buf_append(b, ", ", 2)) return -1;
            first = 0;
            if ((py ? pyrepr_str(b, key, strlen(key)) : json_str(b, key, strlen(key))) ||
                smol_chat_buf_append(b, ": ", 2) || walk(b, val, py, depth + 1))
                return -1;
        }
        return smol_chat_buf_append(b, "}", 1);
    }
    case JSON_ARRAY: {
        if (smol_chat_buf_append(b, "[", 1)) return -1;
        for (size_t i = 0; i < json_array_size(v); i++) {
            if ((i && smol_chat_buf_append(b, ", ", 2)) || walk(b, json_array_get(v, i), py, depth + 1))
                return -1;
        }
        return smol_chat_buf_append(b, "]", 1);
    }
    case JSON_STRING:
        return py ? pyrepr_str(b, json_string_value(v), json_string_length(v))
                  : json_str(b, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return smol_chat_buf_puts(b, num);
    case JSON_REAL:
        smol_chat_fmt_double(json_real_value(v), num);
        return smol_chat_buf_puts(b, num);
    case JSON_TRUE: return smol_chat_buf_puts(b, py ? "True" : "true");
    case JSON_FALSE: return smol_chat_buf_puts(b, py ? "False" : "false");
    case JSON_NULL: return smol_chat_buf_puts(b, py ? "None" : "null");
    }
    return -1;
}

int smol_chat_pyrepr(struct smol_chat_buf *b, const json_t *v)
{
    return walk(b, v, 1, 0);
}

int smol_chat_json_dump(struct smol_chat_buf *b, const json_t *v)
{
    return walk(b, v, 0, 0);
}

/* ============================================================== dates */

static const char *const month_names[12] = {
    "January", "February", "March", "April", "May", "June", "July",
    "August", "September", "October", "November", "December",
};

int smol_chat_date_check(const char *d)
{
    if (!d || strlen(d) < 10) return -1;
    if (d[0] < '0' || d[0] > '3' || d[1] < '0' || d[1] > '9' || d[2] != ' ') return -1;
    int day = (d[0] - '0') * 10 + (d[1] - '0');
    if (day < 1 || day > 31) return -1;
    for (int m = 0; m < 12; m++) {
        size_t ml = strlen(month_names[m]);
        if (strncmp(d + 3, month_names[m], ml) || d[3 + ml] != ' ') continue;
        const char *y = d + 4 + ml;
        if (strlen(y) != 4) return -1;
        for (int i = 0; i < 4; i++)
            if (y[i] < '0' || y[i] > '9') return -1;
        return 0;
    }
    return -1;
}

int smol_chat_date_format(int year, int month, int day, char *out, size_t cap)
{
    if (year < 1 || year > 9999 || month < 1 || month > 12 || day < 1 || day > 31) return -1;
    int n = snprintf(out, cap, "%02d %s %04d", day, month_names[month - 1], year);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* ========================================================= detection */

/* FNV-1a 64 of a template's text with trailing whitespace removed (every
 * known template ends in a whitespace-trimming tag, so it cannot matter). */
static const struct known_tpl {
    uint64_t fnv;
    size_t len;
    enum smol_chat_tpl tpl;
    const char *what;
} known_tpls[] = {
    {0xe4ad24fd095ae0d5ull, 5598, SMOL_CHAT_TPL_SMOLLM3, "SmolLM3-3B chat_template.jinja (sha256 3e0e275a...)"},
    {0x45ec583d4d25bc3aull, 368, SMOL_CHAT_TPL_SMOLLM2, "SmolLM2-Instruct ChatML"},
};

const char *smol_chat_tpl_name(enum smol_chat_tpl t)
{
    switch (t) {
    case SMOL_CHAT_TPL_SMOLLM3: return "smollm3";
    case SMOL_CHAT_TPL_SMOLLM2: return "smollm2";
    case SMOL_CHAT_TPL_CHATML: return "chatml";
    }
    return "?";
}

enum smol_err smol_chat_tpl_detect(const char *text, size_t len, int allow_chatml_fallback,
                                   enum smol_chat_tpl *out, char *err)
{
    while (len > 0 && (text[len - 1] == ' ' || text[len - 1] == '\n' || text[len - 1] == '\t' ||
                       text[len - 1] == '\r'))
        len--;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)text[i];
        h *= 0x100000001b3ull;
    }
    for (size_t i = 0; i < sizeof known_tpls / sizeof known_tpls[0]; i++) {
        if (known_tpls[i].fnv == h && known_tpls[i].len == len) {
            *out = known_tpls[i].tpl;
            return SMOL_OK;
        }
    }
    if (allow_chatml_fallback) {
        *out = SMOL_CHAT_TPL_CHATML;
        return SMOL_OK;
    }
    return smol_errf(err, SMOL_ETEMPLATE,
                     "unrecognised chat template (%zu bytes, fnv1a64 %016llx): only the SmolLM3 and "
                     "SmolLM2 templates are supported; enable the ChatML fallback to render anyway",
                     len, (unsigned long long)h);
}

/* ========================================================= validation */

static const char *role_name(enum smol_chat_role r)
{
    switch (r) {
    case SMOL_CHAT_SYSTEM: return "system";
    case SMOL_CHAT_USER: return "user";
    case SMOL_CHAT_ASSISTANT: return "assistant";
    case SMOL_CHAT_TOOL: return "tool";
    }
    return NULL;
}

static enum smol_err check_str(const char *s, size_t i, const char *field, char *err)
{
    if (s && !smol_chat_utf8_valid(s, strlen(s)))
        return smol_errf(err, SMOL_EUTF8, "messages[%zu].%s is not valid UTF-8", i, field);
    return SMOL_OK;
}

static int json_depth(const json_t *v)
{
    int d = 0;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            int dx = json_depth(x);
            if (dx > d) d = dx;
            if (d > 512) break;
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v) && d <= 512; i++) {
            int dx = json_depth(json_array_get(v, i));
            if (dx > d) d = dx;
        }
    } else {
        return 0;
    }
    return d + 1;
}

static enum smol_err validate(enum smol_chat_tpl tpl, const struct smol_chat_request *req, char *err)
{
    enum smol_err e;
    if (!req || !req->msgs || req->n_msgs == 0)
        return smol_errf(err, SMOL_EINVAL, "messages must be a non-empty list");
    for (size_t i = 0; i < req->n_msgs; i++) {
        const struct smol_chat_msg *m = &req->msgs[i];
        if (!role_name(m->role))
            return smol_errf(err, SMOL_EINVAL, "messages[%zu].role: unknown role %d", i, (int)m->role);
        if ((e = check_str(m->content, i, "content", err)) ||
            (e = check_str(m->reasoning_content, i, "reasoning_content", err)) ||
            (e = check_str(m->tool_call_id, i, "tool_call_id", err)) || (e = check_str(m->name, i, "name", err)))
            return e;
        if (m->tool_calls && !json_is_array(m->tool_calls))
            return smol_errf(err, SMOL_EINVAL, "messages[%zu].tool_calls must be a list", i);
        if (!m->content && (tpl != SMOL_CHAT_TPL_SMOLLM3 || (i == 0 && m->role == SMOL_CHAT_SYSTEM)))
            return smol_errf(err, SMOL_ETEMPLATE, "messages[%zu].content: the %s template needs string content in a %s message",
                             i, smol_chat_tpl_name(tpl), role_name(m->role));
    }
    if (req->tools && !json_is_array(req->tools) && !json_is_null(req->tools))
        return smol_errf(err, SMOL_EINVAL, "tools must be a list");
    if (req->tools && json_depth(req->tools) > 256)
        return smol_errf(err, SMOL_EINVAL, "tools are nested deeper than 256 levels");
    int has_tools = req->tools && json_is_array(req->tools) && json_array_size(req->tools) > 0;
    if (tpl == SMOL_CHAT_TPL_SMOLLM3) {
        if (smol_chat_date_check(req->date))
            return smol_errf(err, SMOL_EINVAL, "date must read \"DD Month YYYY\" (e.g. \"09 July 2025\"), got \"%.40s\"",
                             req->date ? req->date : "(none)");
    } else if (has_tools) {
        return smol_errf(err, SMOL_EUNSUPPORTED, "the %s chat template does not support tools", smol_chat_tpl_name(tpl));
    }
    return SMOL_OK;
}

/* ============================================================ SmolLM3 */

static const char persona_think[] =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face. Your role as an assistant involves "
    "thoroughly exploring questions through a systematic thinking process before providing the final precise and "
    "accurate solutions. This requires engaging in a comprehensive cycle of analysis, summarizing, exploration, "
    "reassessment, reflection, backtracking, and iteration to develop well-considered thinking process. Please "
    "structure your response into two main sections: Thought and Solution using the specified format: <think> "
    "Thought section </think> Solution section. In the Thought section, detail your reasoning process in steps. "
    "Each step should include detailed considerations such as analysing questions, summarizing relevant "
    "findings, brainstorming new ideas, verifying the accuracy of the current steps, refining any errors, and "
    "revisiting previous steps. In the Solution section, based on various attempts, explorations, and "
    "reflections from the Thought section, systematically present the final solution that you deem correct. "
    "The Solution section should be logical, accurate, and concise and detail necessary steps needed to reach "
    "the conclusion.\n\n";
static const char persona_no_think[] = "You are a helpful AI assistant named SmolLM, trained by Hugging Face.\n\n";
static const char tools_head[] =
    "You may call one or more functions to assist with the user query.\nYou are provided with function "
    "signatures within <tools></tools> XML tags:\n\n<tools>\n";
static const char tools_tail[] =
    "</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>";
static const char no_think_prefill[] = "<think>\n\n</think>\n";

/* The system header, up to and including its optional <|im_end|>. */
static int smollm3_system(struct smol_chat_buf *o, struct smol_chat_spans *sp, const struct smol_chat_request *req,
                          int *think)
{
    const struct smol_chat_msg *m0 = &req->msgs[0];
    struct smol_chat_buf ci;    /* custom_instructions */
    int rc = -1;
    smol_chat_buf_init(&ci);
    *think = req->enable_thinking != 0;
    if (smol_chat_buf_puts(o, "<|im_start|>system\n")) return -1;
    if (m0->role == SMOL_CHAT_SYSTEM) {
        const char *sm = m0->content;
        if (strstr(sm, "/no_think")) *think = 0;
        else if (strstr(sm, "/think")) *think = 1;
        struct smol_chat_buf t;
        smol_chat_buf_init(&t);
        if (append_removing(&t, sm, strlen(sm), "/no_think") ||
            append_removing(&ci, t.data ? t.data : "", t.len, "/think")) {
            smol_chat_buf_deinit(&t);
            goto out;
        }
        smol_chat_buf_deinit(&t);
        ci.len = py_rstrip_len(ci.data ? ci.data : "", ci.len);
        if (strstr(sm, "/system_override")) {
            struct smol_chat_buf ov;
            smol_chat_buf_init(&ov);
            int bad = append_removing(&ov, ci.data ? ci.data : "", ci.len, "/system_override") ||
                      emit_user(o, sp, ov.data ? ov.data : "", py_rstrip_len(ov.data ? ov.data : "", ov.len), 0, -1,
                                SMOL_CHAT_FIELD_SYSTEM) ||
                      smol_chat_buf_puts(o, "<|im_end|>\n");
            smol_chat_buf_deinit(&ov);
            rc = bad ? -1 : 0;
            goto out;
        }
    }
    if (smol_chat_buf_puts(o, "## Metadata\n\nKnowledge Cutoff Date: June 2025\nToday Date: ") ||
        emit_user(o, sp, req->date, strlen(req->date), -1, -1, SMOL_CHAT_FIELD_DATE) ||
        smol_chat_buf_puts(o, "\nReasoning Mode: ") ||
        smol_chat_buf_puts(o, *think ? "/think" : "/no_think") ||
        smol_chat_buf_puts(o, "\n\n## Custom Instructions\n\n"))
        goto out;
    if (ci.len > 0) {
        if (emit_user(o, sp, ci.data, ci.len, 0, -1, SMOL_CHAT_FIELD_SYSTEM) || smol_chat_buf_puts(o, "\n\n"))
            goto out;
    } else if (smol_chat_buf_puts(o, *think ? persona_think : persona_no_think)) {
        goto out;
    }
    if (req->tools && json_is_array(req->tools) && json_array_size(req->tools) > 0) {
        if (smol_chat_buf_puts(o, "### Tools\n\n") || smol_chat_buf_puts(o, tools_head)) goto out;
        for (size_t i = 0; i < json_array_size(req->tools); i++) {
            const json_t *t = json_array_get(req->tools, i);
            size_t off = o->len;
            int bad = json_is_string(t) ? smol_chat_buf_append(o, json_string_value(t), json_string_length(t))
                                        : smol_chat_pyrepr(o, t);
            if (bad || span_add(sp, off, o->len - off, -1, (int32_t)i, SMOL_CHAT_FIELD_TOOL) ||
                smol_chat_buf_puts(o, "\n"))
                goto out;
        }
        if (smol_chat_buf_puts(o, tools_tail) || smol_chat_buf_puts(o, "\n\n<|im_end|>\n")) goto out;
    }
    rc = 0;
out:
    smol_chat_buf_deinit(&ci);
    return rc;
}

static int render_smollm3(struct smol_chat_buf *o, struct smol_chat_spans *sp, const struct smol_chat_request *req,
                          int *think)
{
    if (smollm3_system(o, sp, req, think)) return -1;
    for (size_t i = 0; i < req->n_msgs; i++) {
        const struct smol_chat_msg *m = &req->msgs[i];
        const char *c = m->content ? m->content : "";
        switch (m->role) {
        case SMOL_CHAT_USER:
        case SMOL_CHAT_TOOL:    /* tool results are user turns */
            if (smol_chat_buf_puts(o, "<|im_start|>user\n") ||
                emit_user(o, sp, c, strlen(c), (int32_t)i, -1, SMOL_CHAT_FIELD_CONTENT) ||
                smol_chat_buf_puts(o, "<|im_end|>\n"))
                return -1;
            break;
        case SMOL_CHAT_ASSISTANT:
            while (*c == '\n') c++;
            if (smol_chat_buf_puts(o, "<|im_start|>assistant\n") ||
                (!*think && smol_chat_buf_puts(o, no_think_prefill)) ||
                emit_user(o, sp, c, strlen(c), (int32_t)i, -1, SMOL_CHAT_FIELD_CONTENT) ||
                smol_chat_buf_puts(o, "<|im_end|>\n"))
                return -1;
            break;
        case SMOL_CHAT_SYSTEM:  /* only messages[0] counts, in the header */
            break;
        }
    }
    if (req->add_generation_prompt) {
        if (smol_chat_buf_puts(o, "<|im_start|>assistant\n") || (!*think && smol_chat_buf_puts(o, no_think_prefill)))
            return -1;
    }
    return 0;
}

/* ============================================================= ChatML */

static int render_chatml(struct smol_chat_buf *o, struct smol_chat_spans *sp, const struct smol_chat_request *req,
                         int smollm2)
{
    if (smollm2 && req->msgs[0].role != SMOL_CHAT_SYSTEM &&
        smol_chat_buf_puts(o, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                              "Hugging Face<|im_end|>\n"))
        return -1;
    for (size_t i = 0; i < req->n_msgs; i++) {
        const struct smol_chat_msg *m = &req->msgs[i];
        if (smol_chat_buf_puts(o, "<|im_start|>") || smol_chat_buf_puts(o, role_name(m->role)) ||
            smol_chat_buf_puts(o, "\n") ||
            emit_user(o, sp, m->content, strlen(m->content), (int32_t)i, -1, SMOL_CHAT_FIELD_CONTENT) ||
            smol_chat_buf_puts(o, "<|im_end|>\n"))
            return -1;
    }
    if (req->add_generation_prompt && smol_chat_buf_puts(o, "<|im_start|>assistant\n")) return -1;
    return 0;
}

enum smol_err smol_chat_render_spans(enum smol_chat_tpl tpl, const struct smol_chat_request *req,
                                     struct smol_chat_buf *out, struct smol_chat_spans *spans, int *thinking,
                                     char *err)
{
    enum smol_err e = validate(tpl, req, err);
    if (e) return e;
    if (req->n_msgs > INT32_MAX || (req->tools && json_is_array(req->tools) && json_array_size(req->tools) > INT32_MAX))
        return smol_errf(err, SMOL_EINVAL, "too many messages or tools");
    size_t len0 = out->len, n0 = spans ? spans->n : 0;
    int think = 0, rc;
    switch (tpl) {
    case SMOL_CHAT_TPL_SMOLLM3: rc = render_smollm3(out, spans, req, &think); break;
    case SMOL_CHAT_TPL_SMOLLM2: rc = render_chatml(out, spans, req, 1); break;
    case SMOL_CHAT_TPL_CHATML: rc = render_chatml(out, spans, req, 0); break;
    default: return smol_errf(err, SMOL_EINVAL, "unknown template kind %d", (int)tpl);
    }
    if (rc) {
        out->len = len0;
        if (out->data) out->data[len0] = '\0';
        if (spans) spans->n = n0;
        return smol_errf(err, SMOL_ENOMEM, "out of memory rendering the chat template");
    }
    if (thinking) *thinking = think;
    return SMOL_OK;
}

enum smol_err smol_chat_render(enum smol_chat_tpl tpl, const struct smol_chat_request *req,
                               struct smol_chat_buf *out, int *thinking, char *err)
{
    return smol_chat_render_spans(tpl, req, out, NULL, thinking, err);
}

/* ============================================================ request */

/* *out = the string value of obj[key]; NULL when absent or null. */
static enum smol_err get_opt_str(const json_t *obj, const char *key, size_t i, const char **out, char *err)
{
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v)) return SMOL_OK;
    if (!json_is_string(v))
        return smol_errf(err, SMOL_EINVAL, "messages[%zu].%s must be a string", i, key);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return smol_errf(err, SMOL_EINVAL, "messages[%zu].%s contains a NUL character", i, key);
    *out = json_string_value(v);
    return SMOL_OK;
}

static enum smol_err get_opt_bool(const json_t *obj, const char *key, const char *where, int *out, char *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return SMOL_OK;
    if (!json_is_boolean(v)) return smol_errf(err, SMOL_EINVAL, "%s%s must be true or false", where, key);
    *out = json_is_true(v);
    return SMOL_OK;
}

static enum smol_err parse_msg(struct smol_chat_msg *m, const json_t *j, size_t i, char *err)
{
    enum smol_err e;
    if (!json_is_object(j)) return smol_errf(err, SMOL_EINVAL, "messages[%zu] must be an object", i);
    const json_t *role = json_object_get(j, "role");
    if (!json_is_string(role)) return smol_errf(err, SMOL_EINVAL, "messages[%zu].role must be a string", i);
    const char *r = json_string_value(role);
    if (!strcmp(r, "system")) m->role = SMOL_CHAT_SYSTEM;
    else if (!strcmp(r, "user")) m->role = SMOL_CHAT_USER;
    else if (!strcmp(r, "assistant")) m->role = SMOL_CHAT_ASSISTANT;
    else if (!strcmp(r, "tool")) m->role = SMOL_CHAT_TOOL;
    else return smol_errf(err, SMOL_EINVAL, "messages[%zu].role: unknown role \"%.32s\" (system, user, assistant, tool)", i, r);
    const json_t *c = json_object_get(j, "content");
    if (json_is_array(c))
        return smol_errf(err, SMOL_EINVAL, "messages[%zu].content: a list of content parts is not supported by "
                         "this model's template; send a string", i);
    if (c && !json_is_null(c) && !json_is_string(c))
        return smol_errf(err, SMOL_EINVAL, "messages[%zu].content must be a string or null", i);
    if ((e = get_opt_str(j, "content", i, &m->content, err))) return e;
    const char *rkey = json_object_get(j, "reasoning_content") ? "reasoning_content" : "reasoning";
    if ((e = get_opt_str(j, rkey, i, &m->reasoning_content, err)) ||
        (e = get_opt_str(j, "tool_call_id", i, &m->tool_call_id, err)) ||
        (e = get_opt_str(j, "name", i, &m->name, err)))
        return e;
    const json_t *tc = json_object_get(j, "tool_calls");
    if (tc && !json_is_null(tc) && !json_is_array(tc))
        return smol_errf(err, SMOL_EINVAL, "messages[%zu].tool_calls must be a list", i);
    m->tool_calls = json_is_array(tc) ? tc : NULL;
    return SMOL_OK;
}

enum smol_err smol_chat_request_from_json(struct smol_chat_request *req, const json_t *body, char *err)
{
    enum smol_err e;
    memset(req, 0, sizeof *req);
    req->enable_thinking = 1;
    req->add_generation_prompt = 1;
    if (!json_is_object(body)) return smol_errf(err, SMOL_EINVAL, "request body must be a JSON object");
    const json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return smol_errf(err, SMOL_EINVAL, "messages must be a non-empty list");
    const json_t *tools = json_object_get(body, "tools");
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return smol_errf(err, SMOL_EINVAL, "tools must be a list");
    req->tools = json_is_array(tools) ? tools : NULL;
    if ((e = get_opt_bool(body, "add_generation_prompt", "", &req->add_generation_prompt, err))) return e;
    const json_t *kw = json_object_get(body, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) return smol_errf(err, SMOL_EINVAL, "chat_template_kwargs must be an object");
        if ((e = get_opt_bool(kw, "enable_thinking", "chat_template_kwargs.", &req->enable_thinking, err)))
            return e;
    }
    size_t n = json_array_size(msgs);
    req->msgs = calloc(n, sizeof *req->msgs);
    if (!req->msgs) return smol_errf(err, SMOL_ENOMEM, "out of memory for %zu messages", n);
    req->n_msgs = n;
    req->msgs_owned = 1;
    for (size_t i = 0; i < n; i++) {
        if ((e = parse_msg(&req->msgs[i], json_array_get(msgs, i), i, err))) {
            smol_chat_request_deinit(req);
            return e;
        }
    }
    return SMOL_OK;
}

void smol_chat_request_deinit(struct smol_chat_request *req)
{
    if (!req) return;
    if (req->msgs_owned) free(req->msgs);
    req->msgs = NULL;
    req->n_msgs = 0;
    req->msgs_owned = 0;
}
