/*
 * rules.c - the one set of input rules (see rules.h): the ranges, the
 * validators, the error -> HTTP map and the monotonic clock.
 */
#include "daemon/model/rules.h"

#include <math.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------ numbers --- */

static const struct smol_rule_range ranges[SMOL_RULE_NUM_COUNT] = {
    [SMOL_RULE_TEMPERATURE] = {"temperature", 0, 2, 0, 0, 0},
    [SMOL_RULE_TOP_P] = {"top_p", 0, 1, 1, 0, 0},
    [SMOL_RULE_TOP_K] = {"top_k", -1, SMOL_RULE_TOP_K_MAX, 0, 0, 1},
    [SMOL_RULE_MIN_P] = {"min_p", 0, 1, 0, 0, 0},
    [SMOL_RULE_REPETITION_PENALTY] = {"repetition_penalty", 0, 10, 1, 0, 0},
    [SMOL_RULE_PRESENCE_PENALTY] = {"presence_penalty", -2, 2, 0, 0, 0},
    [SMOL_RULE_FREQUENCY_PENALTY] = {"frequency_penalty", -2, 2, 0, 0, 0},
    [SMOL_RULE_MAX_TOKENS_FIELD] = {"max_tokens", 1, SMOL_RULE_MAX_TOKENS, 0, 0, 1},
    [SMOL_RULE_N] = {"n", 1, SMOL_RULE_MAX_CHOICES, 0, 0, 1},
    [SMOL_RULE_TOP_LOGPROBS] = {"top_logprobs", 0, SMOL_RULE_MAX_TOP_LOGPROBS, 0, 0, 1},
    [SMOL_RULE_LOGIT_BIAS] = {"logit_bias", -SMOL_RULE_BIAS_LIMIT, SMOL_RULE_BIAS_LIMIT, 0, 0, 0},
};

const struct smol_rule_range *smol_rule_range(enum smol_rule_num which)
{
    return (unsigned)which < SMOL_RULE_NUM_COUNT ? &ranges[which] : NULL;
}

enum smol_err smol_rule_number(enum smol_rule_num which, double v, const char *field, char *err)
{
    const struct smol_rule_range *r = smol_rule_range(which);
    if (!r) return smol_errf(err, SMOL_EINVAL, "no rule %d", (int)which);
    if (!field) field = r->name;
    /* written as !(in range) so that NaN fails */
    int ok = (r->lo_open ? v > r->lo : v >= r->lo) && (r->hi_open ? v < r->hi : v <= r->hi);
    if (ok && r->integer && v != floor(v)) ok = 0;
    if (ok) return SMOL_OK;
    return smol_errf(err, SMOL_EINVAL, "'%s' must be %s in %c%.10g, %.10g%c (got %.10g)", field,
                     r->integer ? "an integer" : "a number", r->lo_open ? '(' : '[', r->lo, r->hi,
                     r->hi_open ? ')' : ']', v);
}

/* --------------------------------------------------------------- text --- */

int smol_utf8_valid(const char *str, size_t n)
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

enum smol_err smol_rule_text(const char *s, size_t n, const char *field, char *err)
{
    if (memchr(s, 0, n)) return smol_errf(err, SMOL_EUTF8, "%s holds a NUL byte", field);
    if (!smol_utf8_valid(s, n)) return smol_errf(err, SMOL_EUTF8, "%s is not valid UTF-8", field);
    return SMOL_OK;
}

/* ------------------------------------------------------- ids and names --- */

static int alnum(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

int smol_session_id_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SMOL_RULE_SESSION_ID_MAX) return 0;
    for (size_t i = 0; i < n; i++)
        if (!alnum((unsigned char)s[i]) && !strchr("._:-", s[i])) return 0;
    return 1;
}

enum smol_err smol_rule_session_id(const char *s, const char *field, char *err)
{
    if (smol_session_id_ok(s)) return SMOL_OK;
    return smol_errf(err, SMOL_EINVAL, "'%s' must be 1-%d characters of [A-Za-z0-9._:-]", field,
                     SMOL_RULE_SESSION_ID_MAX);
}

int smol_tenant_ok(const char *s)
{
    size_t n = strlen(s);
    if (n > SMOL_RULE_TENANT_MAX) return 0;
    for (size_t i = 0; i < n; i++)
        if (!alnum((unsigned char)s[i]) && !strchr("._-", s[i])) return 0;
    return 1;
}

enum smol_err smol_rule_tenant(const char *s, const char *field, char *err)
{
    if (smol_tenant_ok(s)) return SMOL_OK;
    return smol_errf(err, SMOL_EINVAL, "'%s' must be at most %d characters of [A-Za-z0-9._-]", field,
                     SMOL_RULE_TENANT_MAX);
}

int smol_tool_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SMOL_RULE_TOOL_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++)
        if (!alnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-') return 0;
    return 1;
}

enum smol_err smol_rule_tool_name(const char *s, const char *field, char *err)
{
    if (smol_tool_name_ok(s)) return SMOL_OK;
    return smol_errf(err, SMOL_EINVAL, "'%s' must be a function name: 1-%d characters of [a-zA-Z0-9_-], "
                     "got \"%.64s\"", field, SMOL_RULE_TOOL_NAME_MAX, s);
}

/* -------------------------------------------------------------- stops --- */

enum smol_err smol_rule_stop_count(size_t n, char *err)
{
    if (n <= SMOL_RULE_MAX_STOPS) return SMOL_OK;
    return smol_errf(err, SMOL_EINVAL, "'stop' holds %zu strings (at most %d)", n, SMOL_RULE_MAX_STOPS);
}

enum smol_err smol_rule_stop(const char *s, size_t i, char *err)
{
    size_t n = strlen(s);
    if (n == 0) return smol_errf(err, SMOL_EINVAL, "'stop[%zu]' must not be empty", i);
    if (n > SMOL_RULE_STOP_MAX_LEN)
        return smol_errf(err, SMOL_EINVAL, "'stop[%zu]' is %zu bytes (at most %d)", i, n, SMOL_RULE_STOP_MAX_LEN);
    if (!smol_utf8_valid(s, n)) return smol_errf(err, SMOL_EUTF8, "'stop[%zu]' is not valid UTF-8", i);
    return SMOL_OK;
}

enum smol_err smol_rule_stops(const char *const *s, size_t n, char *err)
{
    enum smol_err e = smol_rule_stop_count(n, err);
    for (size_t i = 0; !e && i < n; i++) e = smol_rule_stop(s[i], i, err);
    return e;
}

/* ------------------------------------------------------------- counts --- */

enum smol_err smol_rule_messages(size_t n, char *err)
{
    if (n == 0) return smol_errf(err, SMOL_EINVAL, "'messages' must not be empty");
    if (n > SMOL_RULE_MAX_MESSAGES)
        return smol_errf(err, SMOL_EINVAL, "'messages' holds %zu messages (at most %d)", n, SMOL_RULE_MAX_MESSAGES);
    return SMOL_OK;
}

enum smol_err smol_rule_bias_count(size_t n, char *err)
{
    if (n <= SMOL_RULE_MAX_BIAS) return SMOL_OK;
    return smol_errf(err, SMOL_EINVAL, "'logit_bias' has %zu entries (at most %d)", n, SMOL_RULE_MAX_BIAS);
}

enum smol_err smol_rule_tools(size_t n, char *err)
{
    if (n <= SMOL_RULE_MAX_TOOLS) return SMOL_OK;
    return smol_errf(err, SMOL_EINVAL, "'tools' holds %zu tools (at most %d)", n, SMOL_RULE_MAX_TOOLS);
}

enum smol_err smol_rule_constraint_size(size_t n, const char *what, char *err)
{
    if (n <= SMOL_RULE_MAX_CONSTRAINT_BYTES) return SMOL_OK;
    return smol_errf(err, SMOL_EINVAL, "%s of %zu bytes is over the %zu-byte limit", what, n,
                     SMOL_RULE_MAX_CONSTRAINT_BYTES);
}

enum smol_err smol_rule_prompt_bytes(size_t n, char *err)
{
    if (n <= SMOL_RULE_MAX_PROMPT_BYTES) return SMOL_OK;
    return smol_errf(err, SMOL_ETOOLARGE, "the prompt is %zu bytes (at most %zu)", n, SMOL_RULE_MAX_PROMPT_BYTES);
}

enum smol_err smol_rule_logprobs(int logprobs, long long top_logprobs, char *err)
{
    enum smol_err e = smol_rule_number(SMOL_RULE_TOP_LOGPROBS, (double)top_logprobs, NULL, err);
    if (e) return e;
    if (top_logprobs > 0 && !logprobs) return smol_errf(err, SMOL_EINVAL, "'top_logprobs' needs 'logprobs': true");
    return SMOL_OK;
}

/* --------------------------------------------------------- HTTP errors --- */

static const struct smol_http_error http_map[SMOL_ERR_COUNT] = {
    [SMOL_OK] = {200, ""},
    [SMOL_EINVAL] = {400, "invalid_request_error"},
    [SMOL_EIO] = {503, "server_error"},
    [SMOL_EFORMAT] = {400, "invalid_request_error"},
    [SMOL_EUNSUPPORTED] = {400, "invalid_request_error"},
    [SMOL_ENOMEM] = {503, "server_error"},
    [SMOL_ECONTEXT] = {400, "invalid_request_error"},
    [SMOL_EBUSY] = {429, "rate_limit_error"},
    [SMOL_EQUEUE_FULL] = {429, "rate_limit_error"},
    [SMOL_ENOSESSION] = {404, "not_found_error"},
    [SMOL_ECANCELLED] = {499, "invalid_request_error"},
    [SMOL_ETOOLARGE] = {413, "invalid_request_error"},
    [SMOL_EUTF8] = {400, "invalid_request_error"},
    [SMOL_ESHUTDOWN] = {503, "server_error"},
    [SMOL_ENOTREADY] = {503, "server_error"},
    [SMOL_ETEMPLATE] = {400, "invalid_request_error"},
    [SMOL_EINTERNAL] = {500, "server_error"},
};

struct smol_http_error smol_rule_http(enum smol_err e)
{
    if ((int)e < 0 || e >= SMOL_ERR_COUNT || !http_map[e].status) e = SMOL_EINTERNAL;
    return http_map[e];
}

/* -------------------------------------------------------------- clock --- */

int64_t smol_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

double smol_mono_s(void) { return (double)smol_mono_ns() * 1e-9; }

double smol_mono_ms(void) { return (double)smol_mono_ns() * 1e-6; }
