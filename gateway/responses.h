/*
 * responses.h - OpenAI's Responses API (responses.c): POST /v1/responses,
 * GET / DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel, and its
 * store of responses.
 *
 * Layer 5 of the gateway, the protocol front ends (tests/check_layers.sh):
 * the core and everything beneath it.
 */
#ifndef GW_RESPONSES_H
#define GW_RESPONSES_H

#include "gateway/core.h"

enum MHD_Result gw_responses_create(struct gw_req *r);
enum MHD_Result gw_responses_one(struct gw_req *r, const char *method, const char *arg);
void gw_responses_event(struct gw_stream *s, const Smollm3__Event *ev);
void gw_responses_error(struct gw_stream *s, const struct gw_error *e);
enum MHD_Result gw_responses_finish_json(struct gw_req *r, struct gw_stream *s);
void gw_responses_stream_free(struct gw_stream *s);
void gw_responses_store_clear(void);
/* Stored responses and the bytes they hold (the accounting of --responses-store-mb). */
size_t gw_responses_store_count(void);
size_t gw_responses_store_bytes(void);
/* Parses a POST /v1/responses body without I/O and hands the GenerateRequest
 * to check (the fuzz harness); 0, or -1 with the reason in why and the field
 * at fault in param.  A body naming previous_response_id gets a fixed
 * two-message conversation (user, assistant) where the server would have the
 * daemon's chain: the whole request is parsed, as after that fetch. */
int gw_responses_parse(const char *body, size_t len, void (*check)(Smollm3__GenerateRequest *g), char *param,
                       size_t pn, char *why, size_t wn);

extern const struct gw_proto gw_proto_responses;

#endif
