/*
 * curve.h - the daemon's side of an authenticated tcp:// link (curve.c):
 * ZeroMQ CURVE with a key pair of its own and a file of the client keys it
 * allows, checked by a ZAP handler on a thread of its own (issue 48 item 4).
 *
 *   curve_secret_key_file  the daemon's secret key, 40 Z85 characters (its
 *                          public key is derived and logged at start)
 *   curve_clients_file     one allowed client a line: PUBLIC_KEY gateway |
 *                          PUBLIC_KEY tenant=TENANT; lines starting with #
 *                          are comments.  Read again
 *                          on SIGHUP (a bad file keeps the old list, logged).
 *
 * A client whose key is not in the list is refused at its handshake.  A
 * gateway sets its requests' tenant (it acts for many); any other client
 * acts for its configured tenant: the rpc thread replaces the tenant of its
 * requests (smol_curve_tenant_of reads it from the frame's User-Id, which
 * the handler set, so no table is shared between threads).  The list is
 * consulted at handshakes: a key removed keeps its open connection until it
 * reconnects.
 */
#ifndef SMOL_CURVE_H
#define SMOL_CURVE_H

#include <zmq.h>
#include "daemon/model/error.h"

struct smol_curve;

/* Reads both files, binds the ZAP handler in zctx and starts its thread.  Call
 * before the ROUTER binds. */
enum smol_err smol_curve_new(struct smol_curve **out, void *zctx, const char *secret_key_file,
                             const char *clients_file, char *err);
/* Makes router a CURVE server with the daemon's key (before it binds). */
enum smol_err smol_curve_apply(struct smol_curve *c, void *router, char *err);
/* The daemon's public key (40 Z85 characters). */
const char *smol_curve_public(const struct smol_curve *c);
/* SIGHUP: the clients file is read again by the handler's thread. */
void smol_curve_reload(struct smol_curve *c);
/* Stops the thread, closes its socket; accepts NULL and *c == NULL, sets *c = NULL.
 * Before the context terminates. */
void smol_curve_free(struct smol_curve **c);

/* The tenant a frame's CURVE client acts for ("" allowed), or NULL: a gateway, or a
 * client not on a CURVE link. */
const char *smol_curve_tenant_of(zmq_msg_t *m);

#endif
