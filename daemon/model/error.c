/* error.c - names and formatting for the error enum (see error.h). */
#include "daemon/model/error.h"

#include <stdio.h>
#include <stdlib.h>

static const char *const err_names[SMOL_ERR_COUNT] = {
    [SMOL_OK] = "ok",
    [SMOL_EINVAL] = "invalid_argument",
    [SMOL_EIO] = "io_error",
    [SMOL_EFORMAT] = "bad_format",
    [SMOL_EUNSUPPORTED] = "unsupported",
    [SMOL_ENOMEM] = "out_of_memory",
    [SMOL_ECONTEXT] = "context_too_long",
    [SMOL_EBUSY] = "busy",
    [SMOL_EQUEUE_FULL] = "queue_full",
    [SMOL_ENOSESSION] = "unknown_session",
    [SMOL_ECANCELLED] = "cancelled",
    [SMOL_ETOOLARGE] = "too_large",
    [SMOL_EUTF8] = "invalid_utf8",
    [SMOL_ESHUTDOWN] = "shutting_down",
    [SMOL_ENOTREADY] = "not_ready",
    [SMOL_ETEMPLATE] = "template_error",
    [SMOL_EINTERNAL] = "internal",
};

const char *smol_err_name(enum smol_err e)
{
    if ((unsigned)e >= SMOL_ERR_COUNT || !err_names[e]) return "unknown_error";
    return err_names[e];
}

enum smol_err smol_errf(char *err, enum smol_err code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, SMOL_ERRLEN, fmt, ap);
        va_end(ap);
    }
    return code;
}

void smol_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "<2>smollm3: assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}
