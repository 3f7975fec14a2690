/*
 * testutil.h - small helpers shared by the Check suites (header-only).
 * Fixture lookup works from the repo root (make test) and from build dirs.
 */
#ifndef SMOL_TESTUTIL_H
#define SMOL_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Path of tests/fixtures/<rel>, or NULL if it is not found. */
static inline const char *fixture_path(const char *rel)
{
    static char buf[8][1024];
    static int k;
    const char *roots[] = {"tests/fixtures", "../tests/fixtures", "../../tests/fixtures", "../../../tests/fixtures"};
    const char *env = getenv("SMOL_FIXTURES");
    char *b = buf[k++ % 8];
    if (env) {
        snprintf(b, 1024, "%s/%s", env, rel);
        if (access(b, R_OK) == 0) return b;
    }
    for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
        snprintf(b, 1024, "%s/%s", roots[i], rel);
        if (access(b, R_OK) == 0) return b;
    }
    return NULL;
}

/* Reads a whole file; NULL on failure.  *n gets the size. */
static inline void *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc(sz + 1);
    if (p && fread(p, 1, sz, f) != (size_t)sz) { free(p); p = NULL; }
    fclose(f);
    if (p) { p[sz] = 0; if (n) *n = sz; }
    return p;
}

#endif
