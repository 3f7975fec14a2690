/*
 * routes.h - the route table (routes.c): what serves each path.  Layer 6 of
 * the gateway, the top with main.c (tests/check_layers.sh).
 */
#ifndef GW_ROUTES_H
#define GW_ROUTES_H

#include "gateway/http.h"

/* The route of url (gw_router, http.h). */
const struct gw_route *gw_route(const char *url, const char **arg);

#endif
