/*
 * completions.h - POST /v1/completions, /tokenize, /detokenize and
 * GET /v1/models/{id} (completions.c).
 *
 * Layer 5 of the gateway, the protocol front ends (tests/check_layers.sh):
 * the core and everything beneath it.
 */
#ifndef GW_COMPLETIONS_H
#define GW_COMPLETIONS_H

#include "gateway/core.h"

enum MHD_Result gw_completions(struct gw_req *r);
enum MHD_Result gw_tokenize(struct gw_req *r);
enum MHD_Result gw_detokenize(struct gw_req *r);
enum MHD_Result gw_models_one(struct gw_req *r, const char *id);

#endif
