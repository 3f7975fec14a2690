/*
 * config.c - the gateway's config file (--config FILE): the long flags as
 * `key = value` lines under [gateway], e.g.
 *
 *   [gateway]
 *   api_key_file = /etc/smollm3d/api-keys
 *   max_inflight = 128
 *   ignore_unknown_fields = false
 *   daemon = ipc:///run/smollm3d/a.sock, tcp://10.0.0.2:5555
 *
 * A key is a flag's name with '_' or '-' (api_key_file = --api-key-file);
 * ignore_unknown_fields takes true/false; daemon a comma-separated list (one
 * --daemon each).  The file becomes flags placed
 * before the command line's, so main.c's one getopt loop checks every value
 * and a flag on the command line overrides the file.
 */
#include "gateway/config.h"
#include "gateway/util.h"

#include <errno.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The flags a file may set (not --config, --help). */
static const char *const keys[] = {
    "listen", "daemon", "model-name", "max-body-bytes", "max-connections", "request-timeout",
    "max-inflight", "ping-interval", "ignore-unknown-fields", "api-key-file", "tenant-secret-file", "responses-store",
    "responses-store-mb", "ui-unclaimed-max", "ui-unclaimed-per-key", "resume-timeout",
    "curve-key-file", "curve-server-keys", "allow-plain-tcp",
};

struct cfg_ctx {
    char **args;                /* "--flag", "value", ... (owned) */
    int n, cap;
    char msg[160];              /* the first problem */
};

static int push(struct cfg_ctx *x, const char *s)
{
    if (x->n == x->cap) {
        int cap = x->cap ? 2 * x->cap : 16;
        char **a = realloc(x->args, (size_t)cap * sizeof *a);
        if (!a) return -1;
        x->args = a;
        x->cap = cap;
    }
    if (!(x->args[x->n] = strdup(s))) return -1;
    x->n++;
    return 0;
}

static int handler(void *user, const char *section, const char *name, const char *value)
{
    struct cfg_ctx *x = user;
    if (strcmp(section, "gateway")) {
        snprintf(x->msg, sizeof x->msg, "key '%.64s' outside section [gateway]", name);
        return 0;
    }
    char flag[64];
    size_t n = strlen(name);
    if (n >= sizeof flag) n = sizeof flag - 1;
    for (size_t i = 0; i < n; i++) flag[i] = name[i] == '_' ? '-' : name[i];
    flag[n] = 0;
    const char *key = NULL;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strcmp(flag, keys[i])) key = keys[i];
    if (!key) {
        snprintf(x->msg, sizeof x->msg, "unknown key '%.64s'", name);
        return 0;
    }
    char opt[80];
    snprintf(opt, sizeof opt, "--%s", key);
    if (!strcmp(key, "ignore-unknown-fields") || !strcmp(key, "allow-plain-tcp")) {     /* switches */
        if (!strcmp(value, "true")) return push(x, opt) == 0;
        if (!strcmp(value, "false")) return 1;
        snprintf(x->msg, sizeof x->msg, "%s: expected true or false, got '%.64s'", name, value);
        return 0;
    }
    if (!*value) {
        snprintf(x->msg, sizeof x->msg, "%s: empty value", name);
        return 0;
    }
    if (!strcmp(key, "daemon")) {                       /* a list: one --daemon each */
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", value);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            while (*t == ' ' || *t == '\t') t++;
            char *end = t + strlen(t);
            while (end > t && (end[-1] == ' ' || end[-1] == '\t')) *--end = 0;
            if (!*t) {
                snprintf(x->msg, sizeof x->msg, "%s: empty endpoint in the list", name);
                return 0;
            }
            if (push(x, opt) || push(x, t)) return 0;
        }
        return 1;
    }
    return push(x, opt) == 0 && push(x, value) == 0;
}

int gw_config_args(const char *path, char ***args, int *n)
{
    struct cfg_ctx x = { 0 };
    errno = 0;
    int rc = ini_parse(path, handler, &x);
    if (rc == -1) gw_log(3, "--config %s: %s", path, strerror(errno ? errno : ENOENT));
    else if (rc == -2) gw_log(3, "--config %s: out of memory", path);
    else if (rc > 0) gw_log(3, "%s:%d: %s", path, rc, x.msg[0] ? x.msg : "syntax error (expected key = value or [gateway])");
    if (rc) {
        for (int i = 0; i < x.n; i++) free(x.args[i]);
        free(x.args);
        return -1;
    }
    *args = x.args;
    *n = x.n;
    return 0;
}
