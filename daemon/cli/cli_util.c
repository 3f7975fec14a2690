/* cli_util.c - strict parsing of command-line values and reading inputs, shared by the subcommands. */
#include "daemon/cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int smol_cli_parse_int(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "smollm3 %s: %s expects an integer in [%ld, %ld], got '%s'\n", cmd, flag, lo, hi,
                s ? s : "(nothing)");
        return -1;
    }
    *out = v;
    return 0;
}

int smol_cli_parse_float(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || errno || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "smollm3 %s: %s expects a number in [%g, %g], got '%s'\n", cmd, flag, lo, hi,
                s ? s : "(nothing)");
        return -1;
    }
    *out = v;
    return 0;
}

int smol_cli_parse_ids(const char *cmd, const char *s, int **ids, int *n)
{
    *ids = NULL;
    *n = 0;
    if (!s || !*s) {
        fprintf(stderr, "smollm3 %s: --ids needs a comma-separated list of token ids\n", cmd);
        return -1;
    }
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int *v = malloc(cap * sizeof *v);
    if (!v) return -1;
    int k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > 0x7fffffff || (*end && *end != ',')) {
            fprintf(stderr, "smollm3 %s: bad token id in --ids at '%s'\n", cmd, p);
            free(v);
            return -1;
        }
        v[k++] = (int)x;
        p = *end ? end + 1 : end;
        if (*end == ',' && !*p) {
            fprintf(stderr, "smollm3 %s: trailing comma in --ids\n", cmd);
            free(v);
            return -1;
        }
    }
    *ids = v;
    *n = k;
    return 0;
}

char *smol_cli_read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) { free(buf); return NULL; }
        buf = nb;
        cap *= 2;
    }
    if (buf && ferror(f)) { free(buf); return NULL; }
    *len = n;
    return buf;
}
