/*
 * config.h - the gateway's settings (struct gw_config, filled by main.c's
 * flags) and its config file (--config FILE: config.c).  Layer 1 of the
 * gateway (tests/check_layers.sh): util.h only beneath it.
 */
#ifndef GW_CONFIG_H
#define GW_CONFIG_H

#include <stddef.h>

#define GW_MAX_DAEMONS 16

struct gw_config {
    const char *listen;
    const char *daemons[GW_MAX_DAEMONS];    /* --daemon (repeatable; config: a comma-separated list) */
    unsigned n_daemons;
    unsigned resume_timeout;    /* --resume-timeout: s a stream waits for a live daemon to resume on */
    const char *curve_key_file;     /* --curve-key-file: the gateway's CURVE secret key (tcp:// daemons) */
    const char *curve_server_keys;  /* --curve-server-keys: "ENDPOINT PUBLIC_KEY" a line, each tcp:// daemon's */
    int allow_plain_tcp;            /* --allow-plain-tcp: a tcp:// daemon without a key is used unauthenticated */
    const char *model_name;     /* NULL = from health */
    size_t max_body;
    unsigned max_connections;
    unsigned request_timeout;   /* s */
    unsigned max_inflight;
    unsigned ping_interval;     /* s of silence before ': ping' on a stream */
    int ignore_unknown;         /* --ignore-unknown-fields: accept (and ignore) unknown request fields */
    const char *api_key_file;   /* --api-key-file: NULL = no keys */
    const char *tenant_secret_file; /* --tenant-secret-file: the key of derived tenant ids (auth.c) */
    size_t responses_store;     /* --responses-store: stored /v1/responses kept (LRU), count */
    size_t responses_store_bytes;   /* --responses-store-mb: the memory they may hold, bytes */
    unsigned ui_unclaimed_max;      /* --ui-unclaimed-max: UI streams waiting to be claimed, in all */
    unsigned ui_unclaimed_per_key;  /* --ui-unclaimed-per-key: of them, one key's */
};

/* --config FILE as flags ("--name", "value", ...; malloc'd), 0 or -1 (logged) */
int gw_config_args(const char *path, char ***args, int *n);

#endif
