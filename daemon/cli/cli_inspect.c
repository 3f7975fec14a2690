/*
 * cli_inspect.c - `smollm3 inspect MODEL [--json]`: what is in a GGUF file.
 *
 * Reads the file only through the GGUF reader (so a file inspect accepts is
 * a file the loader can parse) and prints, without interpreting the model:
 * version, alignment, every metadata key with its type and value, the tensor
 * table (name, type, shape ne[] contiguous-first as stored, offset relative
 * to the data section, bytes) and a per-type summary.
 *
 * Human output keeps lines short: arrays show their count and first few
 * elements, long strings (the chat template) are cut with a note.  --json
 * prints one JSON object with the same facts; arrays of more than 16
 * elements become {"type":"array","elem_type","count","head":[first 8]}.
 * Every string from the file is hostile: both outputs escape it as JSON
 * (quotes, backslashes, control characters) and replace invalid UTF-8 with
 * U+FFFD, so the output is always valid UTF-8 and valid JSON.
 *
 * Exit: 0 ok, 1 bad or missing file (message on stderr), 2 usage error.
 */
#include "daemon/cli/cli.h"
#include "daemon/model/model.h"
#include "kernels/quant_ref.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define CMD "inspect"
#define JSON_ARRAY_INLINE 16    /* longer arrays are summarized */
#define JSON_ARRAY_HEAD 8
#define TEXT_ARRAY_HEAD 8
#define TEXT_STR_MAX 120        /* bytes of a string shown in human output */

/* ---------------------------------------------------------------- escaping */

/* Length of the valid UTF-8 sequence at s[0..n), 0 if invalid (overlong,
 * surrogate, beyond U+10FFFF, truncated). */
static size_t utf8_len(const uint8_t *s, size_t n)
{
    uint8_t c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07; }
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* Writes s[0..n) as a quoted JSON string, at most max bytes of input
 * (never splitting a character); returns the input bytes consumed and adds
 * the bytes written to *cols when cols is not NULL. */
static size_t put_json_str_cols(FILE *f, const char *str, uint64_t n, uint64_t max, size_t *cols)
{
    const uint8_t *s = (const uint8_t *)str;
    uint64_t i = 0;
    size_t w = 2;
    char esc[8];
    fputc('"', f);
    while (i < n) {
        uint8_t c = s[i];
        size_t len = utf8_len(s + i, n - i);
        const char *e = NULL;
        if (i + (len ? len : 1) > max) break;
        if (!len) { fputs("\\ufffd", f); w += 6; i++; continue; }
        if (len > 1) { fwrite(s + i, 1, len, f); w += 1; i += len; continue; }
        switch (c) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        default:
            if (c < 0x20 || c == 0x7f) { snprintf(esc, sizeof esc, "\\u%04x", c); e = esc; }
        }
        if (e) { fputs(e, f); w += strlen(e); }
        else { fputc(c, f); w++; }
        i++;
    }
    fputc('"', f);
    if (cols) *cols += w;
    return (size_t)i;
}

static size_t put_json_str(FILE *f, const char *str, uint64_t n, uint64_t max)
{
    return put_json_str_cols(f, str, n, max, NULL);
}

static void put_json_cstr(FILE *f, const char *s) { put_json_str(f, s, strlen(s), UINT64_MAX); }

/* A key or tensor name in human output: bare when it is plain printable
 * ASCII (every real model), quoted and escaped otherwise.  Returns the
 * columns used, for alignment. */
static size_t put_name(FILE *f, const char *s)
{
    size_t n = strlen(s), i;
    for (i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] >= 0x7f || s[i] == '"' || s[i] == '\\') break;
    if (i == n) {
        fputs(s, f);
        return n;
    }
    size_t cols = 0;
    put_json_str_cols(f, s, n, UINT64_MAX, &cols);
    return cols;
}

/* A float as a JSON number; NaN and infinities (not JSON) become null. */
static void put_json_float(FILE *f, double v, int is_f32)
{
    if (!isfinite(v)) fputs("null", f);
    else fprintf(f, is_f32 ? "%.9g" : "%.17g", v);
}

/* ---------------------------------------------------------------- values */

static int is_float(enum smol_gguf_vtype t) { return t == SMOL_GGUF_F32 || t == SMOL_GGUF_F64; }
static int is_signed(enum smol_gguf_vtype t)
{
    return t == SMOL_GGUF_I8 || t == SMOL_GGUF_I16 || t == SMOL_GGUF_I32 || t == SMOL_GGUF_I64;
}

/* One scalar (not string, not array) as JSON / text: both print the same. */
static void put_scalar(FILE *f, const struct smol_gguf_kv *kv)
{
    if (kv->type == SMOL_GGUF_BOOL) fputs(kv->v.u ? "true" : "false", f);
    else if (is_float(kv->type)) put_json_float(f, kv->v.f, kv->type == SMOL_GGUF_F32);
    else if (is_signed(kv->type)) fprintf(f, "%" PRId64, kv->v.i);
    else fprintf(f, "%" PRIu64, kv->v.u);
}

/* Element i of an array kv. */
static void put_elem(FILE *f, const struct smol_gguf_kv *kv, uint64_t i, uint64_t str_max)
{
    enum smol_gguf_vtype t = kv->arr_type;
    if (t == SMOL_GGUF_STRING) {
        if (put_json_str(f, kv->arr_strs[i].ptr, kv->arr_strs[i].len, str_max) < kv->arr_strs[i].len)
            fputs("...", f);            /* human output only: JSON passes no limit */
        return;
    }
    if (t == SMOL_GGUF_BOOL) fputs(smol_gguf_arr_int(kv, i) ? "true" : "false", f);
    else if (is_float(t)) put_json_float(f, smol_gguf_arr_float(kv, i), t == SMOL_GGUF_F32);
    else if (t == SMOL_GGUF_U64) fprintf(f, "%" PRIu64, (uint64_t)smol_gguf_arr_int(kv, i));
    else fprintf(f, "%" PRId64, smol_gguf_arr_int(kv, i));
}

static void put_json_value(FILE *f, const struct smol_gguf_kv *kv)
{
    if (kv->type == SMOL_GGUF_STRING) {
        put_json_str(f, kv->str.ptr, kv->str.len, UINT64_MAX);
        return;
    }
    if (kv->type != SMOL_GGUF_ARRAY) {
        put_scalar(f, kv);
        return;
    }
    uint64_t n = kv->arr_n, shown = n;
    if (n > JSON_ARRAY_INLINE) {
        fputs("{\"type\":\"array\",\"elem_type\":", f);
        put_json_cstr(f, smol_gguf_vtype_name(kv->arr_type));
        fprintf(f, ",\"count\":%" PRIu64 ",\"head\":", n);
        shown = JSON_ARRAY_HEAD;
    }
    fputc('[', f);
    for (uint64_t i = 0; i < shown; i++) {
        if (i) fputc(',', f);
        put_elem(f, kv, i, UINT64_MAX);
    }
    fputc(']', f);
    if (n > JSON_ARRAY_INLINE) fputc('}', f);
}

static void put_text_value(FILE *f, const struct smol_gguf_kv *kv)
{
    if (kv->type == SMOL_GGUF_STRING) {
        size_t used = put_json_str(f, kv->str.ptr, kv->str.len, TEXT_STR_MAX);
        if (used < kv->str.len)
            fprintf(f, " ... (truncated: %" PRIu64 " bytes in all; --json shows the whole value)", kv->str.len);
        return;
    }
    if (kv->type != SMOL_GGUF_ARRAY) {
        put_scalar(f, kv);
        return;
    }
    uint64_t n = kv->arr_n, shown = n > JSON_ARRAY_INLINE ? TEXT_ARRAY_HEAD : n;
    fputc('[', f);
    for (uint64_t i = 0; i < shown; i++) {
        if (i) fputs(", ", f);
        put_elem(f, kv, i, 40);
    }
    if (shown < n) fprintf(f, ", ... (%" PRIu64 " elements, first %" PRIu64 " shown)", n, shown);
    fputc(']', f);
}

/* ---------------------------------------------------------------- report */

struct type_sum {
    uint64_t count[SMOL_TYPE_COUNT];
    uint64_t bytes[SMOL_TYPE_COUNT];
    uint64_t total_bytes;
};

static void summarize(const struct smol_gguf *g, struct type_sum *s)
{
    memset(s, 0, sizeof *s);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct smol_gguf_tensor *t = &g->tensors[i];
        if (t->type >= SMOL_TYPE_COUNT) continue;    /* the reader refuses unknown ids */
        s->count[t->type]++;
        s->bytes[t->type] += t->size;
        s->total_bytes += t->size;
    }
}

static void print_json(FILE *f, const struct smol_gguf *g)
{
    struct type_sum s;
    summarize(g, &s);
    fprintf(f, "{\"version\":%u,\"alignment\":%u,\"data_offset\":%" PRIu64 ",\"metadata\":{", g->version,
            g->alignment, g->data_offset);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        if (i) fputc(',', f);
        put_json_cstr(f, g->kv[i].key);
        fputc(':', f);
        put_json_value(f, &g->kv[i]);
    }
    fputs("},\"tensors\":[", f);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct smol_gguf_tensor *t = &g->tensors[i];
        fputs(i ? ",{\"name\":" : "{\"name\":", f);
        put_json_cstr(f, t->name);
        fputs(",\"type\":", f);
        put_json_cstr(f, smol_type_name(t->type));
        fputs(",\"shape\":[", f);
        for (uint32_t d = 0; d < t->n_dims; d++) fprintf(f, d ? ",%" PRId64 : "%" PRId64, t->ne[d]);
        fprintf(f, "],\"offset\":%" PRIu64 ",\"size\":%" PRIu64 "}", t->offset, t->size);
    }
    fputs("],\"type_counts\":{", f);
    int first = 1;
    for (uint32_t ty = 0; ty < SMOL_TYPE_COUNT; ty++) {
        if (!s.count[ty]) continue;
        if (!first) fputc(',', f);
        first = 0;
        put_json_cstr(f, smol_type_name(ty));
        fprintf(f, ":%" PRIu64, s.count[ty]);
    }
    fprintf(f, "},\"total_bytes\":%" PRIu64 "}\n", s.total_bytes);
}

static void print_text(FILE *f, const char *path, const struct smol_gguf *g)
{
    struct type_sum s;
    summarize(g, &s);
    fprintf(f, "file:        %s\n", path);
    fprintf(f, "version:     %u\n", g->version);
    fprintf(f, "alignment:   %u\n", g->alignment);
    fprintf(f, "data offset: %" PRIu64 "\n", g->data_offset);
    fprintf(f, "file size:   %zu bytes\n", g->size);

    fprintf(f, "\nmetadata (%" PRIu64 " keys):\n", g->n_kv);
    size_t w = 0;
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (strlen(g->kv[i].key) > w) w = strlen(g->kv[i].key);
    if (w > 48) w = 48;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const struct smol_gguf_kv *kv = &g->kv[i];
        char type[48];
        if (kv->type == SMOL_GGUF_ARRAY)
            snprintf(type, sizeof type, "%s[%" PRIu64 "]", smol_gguf_vtype_name(kv->arr_type), kv->arr_n);
        else
            snprintf(type, sizeof type, "%s", smol_gguf_vtype_name(kv->type));
        fputs("  ", f);
        size_t used = put_name(f, kv->key);
        fprintf(f, "%*s %-16s ", (int)(w > used ? w - used : 0), "", type);
        put_text_value(f, kv);
        fputc('\n', f);
    }

    fprintf(f, "\ntensors (%" PRIu64 "; shape is ne[], contiguous dimension first; offset from data section):\n",
            g->n_tensors);
    w = 4;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (strlen(g->tensors[i].name) > w) w = strlen(g->tensors[i].name);
    if (w > 64) w = 64;
    fprintf(f, "  %-*s  %-6s %-24s %14s %14s\n", (int)w, "name", "type", "shape", "offset", "bytes");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct smol_gguf_tensor *t = &g->tensors[i];
        char shape[96];
        int n = snprintf(shape, sizeof shape, "[");
        for (uint32_t d = 0; d < t->n_dims && n < (int)sizeof shape; d++)
            n += snprintf(shape + n, sizeof shape - n, d ? ", %" PRId64 : "%" PRId64, t->ne[d]);
        if (n < (int)sizeof shape) snprintf(shape + n, sizeof shape - n, "]");
        fputs("  ", f);
        size_t used = put_name(f, t->name);
        fprintf(f, "%*s  %-6s %-24s %14" PRIu64 " %14" PRIu64 "\n", (int)(w > used ? w - used : 0), "",
                smol_type_name(t->type), shape, t->offset, t->size);
    }

    fprintf(f, "\ntensor types:\n");
    for (uint32_t ty = 0; ty < SMOL_TYPE_COUNT; ty++)
        if (s.count[ty])
            fprintf(f, "  %-6s %6" PRIu64 " tensors %14" PRIu64 " bytes\n", smol_type_name(ty), s.count[ty],
                    s.bytes[ty]);
    fprintf(f, "  total  %6" PRIu64 " tensors %14" PRIu64 " bytes (%.2f MiB)\n", g->n_tensors, s.total_bytes,
            (double)s.total_bytes / (1024.0 * 1024.0));
}

/* ---------------------------------------------------------------- command */

static int usage_error(const char *msg, const char *arg)
{
    fprintf(stderr, "smollm3 " CMD ": %s%s%s\nusage: smollm3 inspect MODEL [--json]\n", msg, arg ? " " : "",
            arg ? arg : "");
    return 2;
}

int smol_cli_inspect(int argc, char **argv)
{
    const char *path = NULL;
    int json = 0, opts_done = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!opts_done && !strcmp(a, "--json")) json = 1;
        else if (!opts_done && (!strcmp(a, "-h") || !strcmp(a, "--help"))) {
            printf("usage: smollm3 inspect MODEL [--json]\n");
            return 0;
        } else if (!opts_done && !strcmp(a, "--")) opts_done = 1;
        else if (!opts_done && a[0] == '-' && a[1]) return usage_error("unknown option", a);
        else if (path) return usage_error("more than one MODEL given:", a);
        else path = a;
    }
    if (!path) return usage_error("missing MODEL", NULL);

    struct smol_gguf *g = NULL;
    char err[SMOL_ERRLEN];
    enum smol_err e = smol_gguf_open(&g, path, err);
    if (e) {
        fprintf(stderr, "smollm3 " CMD ": %s (%s)\n", err, smol_err_name(e));
        return 1;
    }
    if (json) print_json(stdout, g);
    else print_text(stdout, path, g);
    smol_gguf_close(&g);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "smollm3 " CMD ": error writing output\n");
        return 1;
    }
    return 0;
}
