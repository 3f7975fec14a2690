/*
 * auth.h - API keys and the tenant of each (auth.c).  Layer 1 of the
 * gateway (tests/check_layers.sh).
 */
#ifndef GW_AUTH_H
#define GW_AUTH_H

#include <microhttpd.h>

#define GW_AUTH_OPEN (-2)       /* no keys configured: everything is open */
#define GW_AUTH_NONE (-1)       /* keys configured, none (or a wrong one) presented */

/* Reads --tenant-secret-file path (64 hex digits): 0, or -1 (logged).  Before
 * gw_auth_load: keys need it. */
int gw_auth_secret_load(const char *path);
/* Reads --api-key-file path: 0, or -1 (logged; the keys loaded before stay).
 * Called again (gw_auth_reload), a key keeps its index; one no longer in the
 * file is revoked: it never matches again, its index stays valid. */
int gw_auth_load(const char *path);
/* SIGHUP: the file of the first gw_auth_load read again; 0, or -1 (logged,
 * nothing changed).  Without --api-key-file it only logs. */
int gw_auth_reload(void);
/* The key index the request's Authorization: Bearer header (else its
 * x-api-key header, Anthropic's) matches, or one of the above. */
int gw_auth_check(struct MHD_Connection *mc);
/* Key indexes ever handed out (revoked ones included): [0, gw_auth_n_keys()). */
int gw_auth_n_keys(void);
/* Keys the file holds now. */
int gw_auth_n_live(void);
const char *gw_auth_key_name(int i);
/* The tenant of key index i (its tenant=, or an id derived from the key under
 * the deployment's secret; never the key): "" for GW_AUTH_OPEN / GW_AUTH_NONE.
 * Valid until exit, also after a reload that changes or revokes the key. */
const char *gw_auth_tenant(int i);
/* Every tenant a key has had since start, i in [0, gw_auth_n_tenants()), oldest first
 * (/metrics' labels); the pointers are gw_auth_tenant's. */
int gw_auth_n_tenants(void);
const char *gw_auth_tenant_at(int i);

/* Service tiers, ordered (a key's max_tier caps a request's). */
enum { GW_TIER_FLEX = 0, GW_TIER_DEFAULT = 1, GW_TIER_PRIORITY = 2 };
/* Key i's limit of streams in flight: its max_inflight=, else its share of
 * total (total / live keys, at least 1); total for GW_AUTH_OPEN / GW_AUTH_NONE. */
unsigned gw_auth_max_inflight(int i, unsigned total);
/* Key i's highest service tier (GW_TIER_*): its max_tier=, else default;
 * priority for GW_AUTH_OPEN (no keys: nobody to be fair to). */
int gw_auth_max_tier(int i);

#endif
