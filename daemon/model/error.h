/*
 * error.h - the one error enum of smollm3d.
 *
 * Every module returns these codes (SMOL_OK == 0), with a human message in a
 * caller-supplied buffer of SMOL_ERRLEN bytes where context matters.  The
 * protobuf contract (proto/smollm3.proto, enum ErrorCode) mirrors the values
 * one to one and the gateway maps them to HTTP statuses: keep them in step.
 */
#ifndef SMOL_ERROR_H
#define SMOL_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#define SMOL_ERRLEN 256

enum smol_err {
    SMOL_OK = 0,
    SMOL_EINVAL = 1,        /* bad argument or request field */
    SMOL_EIO = 2,           /* file missing or unreadable */
    SMOL_EFORMAT = 3,       /* malformed file or message */
    SMOL_EUNSUPPORTED = 4,  /* valid but not supported (tensor type, architecture) */
    SMOL_ENOMEM = 5,        /* allocation failed */
    SMOL_ECONTEXT = 6,      /* prompt + generation longer than the context */
    SMOL_EBUSY = 7,         /* KV budget exhausted now; retry later */
    SMOL_EQUEUE_FULL = 8,   /* admission queue full */
    SMOL_ENOSESSION = 9,    /* unknown session id */
    SMOL_ECANCELLED = 10,   /* cancelled by the client */
    SMOL_ETOOLARGE = 11,    /* request or frame over its size limit */
    SMOL_EUTF8 = 12,        /* invalid UTF-8 in text */
    SMOL_ESHUTDOWN = 13,    /* daemon draining or stopping */
    SMOL_ENOTREADY = 14,    /* model not loaded yet */
    SMOL_ETEMPLATE = 15,    /* chat template could not render the request */
    SMOL_EINTERNAL = 16,    /* invariant broken: a bug */
    SMOL_ERR_COUNT
};

/* Stable lowercase name of a code ("context_too_long"), never NULL. */
const char *smol_err_name(enum smol_err e);

/* Formats into err (if non-NULL, SMOL_ERRLEN bytes) and returns code. */
enum smol_err smol_errf(char *err, enum smol_err code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Always-on invariant check: a failure is a bug, reported and aborted. */
#define SMOL_ASSERT(c) \
    do { if (!(c)) smol_assert_fail(#c, __FILE__, __LINE__); } while (0)
void smol_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));

#endif
