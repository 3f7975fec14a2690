/*
 * error.h - the refusal every parser and endpoint of the gateway carries
 * (error.c).  Layer 1 of the gateway, its lowest part (tests/check_layers.sh).
 */
#ifndef GW_ERROR_H
#define GW_ERROR_H

#include <jansson.h>
#include "daemon/model/rules.h"

/* The one error convention of the gateway's parsers: a refusal carries what
 * the client gets, never re-derived later from a name.  From a rule (an
 * error code of daemon/model/error.h: gw_error_set) the status and type
 * come from smol_rule_http and the code is smol_err_name's ("invalid_argument",
 * "invalid_utf8", "too_large", "unsupported"), exactly as when the daemon
 * refuses the request itself; the gateway's own conditions (invalid JSON,
 * 503 without a daemon, ...) use gw_error_http. */
struct gw_error {
    int status;                 /* HTTP status; 0 = no error */
    const char *type;           /* OpenAI error type (static string) */
    const char *code;           /* OpenAI error code (static string) */
    char param[64];             /* the field at fault ("" = the body / none) */
    char msg[256];
};
/* Both return -1, for `return gw_error_set(...)` in a parser. */
int gw_error_set(struct gw_error *e, enum smol_err code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int gw_error_http(struct gw_error *e, int status, const char *type, const char *code, const char *param,
                  const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* A body jansson could not parse: invalid UTF-8 is the rules' SMOL_EUTF8
 * (what the daemon says of bad UTF-8), anything else 400 "invalid_json". */
int gw_error_json(struct gw_error *e, const json_error_t *je);

#endif
