/*
 * auth.h - API keys and the tenant of each (auth.c).  Layer 1 of the
 * gateway (tests/check_layers.sh).
 */
#ifndef GW_AUTH_H
#define GW_AUTH_H

#include <microhttpd.h>

#define GW_AUTH_OPEN (-2)       /* no keys configured: everything is open */
#define GW_AUTH_NONE (-1)       /* keys configured, none (or a wrong one) presented */

/* Reads --api-key-file path: 0, or -1 (logged). */
int gw_auth_load(const char *path);
/* The key index the request's Authorization: Bearer header (else its
 * x-api-key header, Anthropic's) matches, or one of the above. */
int gw_auth_check(struct MHD_Connection *mc);
int gw_auth_n_keys(void);
const char *gw_auth_key_name(int i);
/* The tenant of key index i (an id derived from the key, never the key):
 * "" for GW_AUTH_OPEN / GW_AUTH_NONE.  Valid until exit. */
const char *gw_auth_tenant(int i);

/* Service tiers, ordered (a key's max_tier caps a request's). */
enum { GW_TIER_FLEX = 0, GW_TIER_DEFAULT = 1, GW_TIER_PRIORITY = 2 };
/* Key i's limit of streams in flight: its max_inflight=, else its share of
 * total (total / keys, at least 1); total for GW_AUTH_OPEN / GW_AUTH_NONE. */
unsigned gw_auth_max_inflight(int i, unsigned total);
/* Key i's highest service tier (GW_TIER_*): its max_tier=, else default;
 * priority for GW_AUTH_OPEN (no keys: nobody to be fair to). */
int gw_auth_max_tier(int i);

#endif
