/*
 * error.c - the gateway's one refusal record (error.h).
 */
#include "gateway/error.h"

#include <stdarg.h>
#include <stdio.h>

static void error_vset(struct gw_error *e, int status, const char *type, const char *code, const char *param,
                       const char *fmt, va_list ap)
{
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
}

int gw_error_set(struct gw_error *e, enum smol_err code, const char *param, const char *fmt, ...)
{
    struct smol_http_error h = smol_rule_http(code);
    va_list ap;
    va_start(ap, fmt);
    error_vset(e, h.status, h.type, smol_err_name(code), param, fmt, ap);
    va_end(ap);
    return -1;
}

int gw_error_http(struct gw_error *e, int status, const char *type, const char *code, const char *param,
                  const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_vset(e, status, type, code, param, fmt, ap);
    va_end(ap);
    return -1;
}

int gw_error_json(struct gw_error *e, const json_error_t *je)
{
    if (json_error_code(je) == json_error_invalid_utf8)
        return gw_error_set(e, SMOL_EUTF8, NULL, "the body is not valid UTF-8 (line %d column %d: %s)", je->line,
                            je->column, je->text);
    return gw_error_http(e, 400, "invalid_request_error", "invalid_json", NULL, "invalid JSON at line %d column %d: %s",
                         je->line, je->column, je->text);
}
