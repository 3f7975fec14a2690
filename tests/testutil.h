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

/* Path of the program <name> of the build this test belongs to: $SMOL_BIN_DIR/<name>, else
 * <directory of this executable>/../bin/<name> (build/tests/test_x -> build/bin/<name>,
 * build/asan/tests/test_x -> build/asan/bin/<name>); NULL if it is not an executable there. */
static inline const char *tool_path(const char *name)
{
    static char buf[4][4096];
    static int k;
    char *b = buf[k++ % 4], exe[4096];
    const char *env = getenv("SMOL_BIN_DIR");
    if (env && *env) {
        if (snprintf(b, 4096, "%s/%s", env, name) >= 4096) return NULL;
        return access(b, X_OK) == 0 ? b : NULL;
    }
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    if (snprintf(b, 4096, "%s/../bin/%s", exe, name) >= 4096) return NULL;
    return access(b, X_OK) == 0 ? b : NULL;
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
