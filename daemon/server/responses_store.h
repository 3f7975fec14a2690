/*
 * responses_store.h - stored Responses (proto StoredResponse): records a
 * client (the gateway) stores under an id per tenant, read back by any node
 * of the fleet and after a restart (responses_store.c).
 *
 * Where: with a directory (kv_spill_dir), one file per record at
 * DIR/responses/t-TENANT/ID, written atomically (a temporary file, fsync,
 * rename, fsync of the directory): the directory is the truth, so nodes
 * sharing it (kv_spill_shared) see each other's records with no index to
 * keep in step.  Without one, a list in memory (gone with the process).
 *
 * Bounds: per tenant at most tenant_bytes of records (a file's size counts);
 * storing one that does not fit drops the tenant's oldest first, and one
 * larger than tenant_bytes alone is SMOL_ETOOLARGE.  A record older than
 * ttl_s is not found and is removed when seen (on a get, or when its
 * tenant stores).  Another tenant's id, an expired one and one never stored
 * are the same SMOL_ENOSESSION.
 *
 * Threads: the store runs its requests on a thread of its own
 * (smol_rstore_start): the RPC loop, which routes every stream's tokens,
 * hands a job over (smol_rstore_submit) and takes it back done when
 * smol_rstore_fd is readable, so a slow file server delays only the stored
 * Responses' replies, never a token.  put / get / delete / list are called
 * from that thread (or, with no thread started, from one thread only: the
 * tests); they are not thread-safe.
 */
#ifndef SMOL_RESPONSES_STORE_H
#define SMOL_RESPONSES_STORE_H

#include <stddef.h>
#include <stdint.h>
#include "daemon/model/error.h"

#define SMOL_RSTORE_ID_MAX 64

struct smol_rstore;

struct smol_rstore_rec {
    char id[SMOL_RSTORE_ID_MAX + 1];
    char prev[SMOL_RSTORE_ID_MAX + 1];  /* predecessor's id, "" = none */
    int64_t created;                    /* unix s, set by put */
    uint8_t *data;                      /* [len] (get: malloc'd, the caller frees) */
    size_t len;
};

/* dir NULL or "": in memory.  The directory DIR/responses is created.  smol_rstore_free stops the
 * thread (the job running ends first) and frees the jobs not taken back. */
enum smol_err smol_rstore_new(struct smol_rstore **out, const char *dir, uint64_t tenant_bytes, int64_t ttl_s,
                              char *err);
void smol_rstore_free(struct smol_rstore **rs);

/* 1 when id is 1..64 of [A-Za-z0-9_-]. */
int smol_rstore_id_ok(const char *id);

/* Stores rec (rec->created set to now) for tenant, replacing a record of the same id. */
enum smol_err smol_rstore_put(struct smol_rstore *rs, const char *tenant, struct smol_rstore_rec *rec, char *err);
/* The record id of tenant's into *out (out->data malloc'd). */
enum smol_err smol_rstore_get(struct smol_rstore *rs, const char *tenant, const char *id,
                              struct smol_rstore_rec *out, char *err);
enum smol_err smol_rstore_delete(struct smol_rstore *rs, const char *tenant, const char *id, char *err);
/* tenant's ids, newest first, into *ids (malloc'd [*n]; records' data NULL). */
enum smol_err smol_rstore_list(struct smol_rstore *rs, const char *tenant, struct smol_rstore_rec **ids,
                               size_t *n, char *err);

/* ---- the store's thread ---- */

/* A job: embedded first in the caller's own struct. */
struct smol_rstore_job {
    struct smol_rstore_job *next;
    void (*run)(struct smol_rstore *rs, struct smol_rstore_job *job);  /* on the store's thread */
    void (*free)(struct smol_rstore_job *job);  /* a job never taken back (at smol_rstore_free) */
};

#define SMOL_RSTORE_MAX_JOBS 4096

/* Starts the thread and its eventfd. */
enum smol_err smol_rstore_start(struct smol_rstore *rs, char *err);
/* Readable while done jobs wait (-1 before start). */
int smol_rstore_fd(const struct smol_rstore *rs);
/* Queues job: 0; -1 (not started, or SMOL_RSTORE_MAX_JOBS waiting): the caller keeps it. */
int smol_rstore_submit(struct smol_rstore *rs, struct smol_rstore_job *job);
/* The next done job (the caller's again), NULL when none. */
struct smol_rstore_job *smol_rstore_done(struct smol_rstore *rs);

#endif
