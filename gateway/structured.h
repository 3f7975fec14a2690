/*
 * structured.h - a chat body's response_format / grammar as the daemon's
 * constraint (structured.c).  Layer 1 of the gateway (tests/check_layers.sh).
 */
#ifndef GW_STRUCTURED_H
#define GW_STRUCTURED_H

#include <jansson.h>
#include "daemon/client/client.h"
#include "gateway/params.h"

/* response_format / grammar of a chat body as g's constraint.  *owned: a
 * string g points to that the caller must keep and free (or NULL).  -1 with
 * the refusal in *e. */
int gw_structured_parse(Smollm3__GenerateRequest *g, json_t *root, char **owned, struct gw_error *e);

#endif
