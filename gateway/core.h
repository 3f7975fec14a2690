/*
 * core.h - the protocol-independent core of the gateway's generating
 * endpoints (core.c): one path to the daemon for Chat Completions and
 * Completions (openai.c, completions.c), Responses (responses.c), Anthropic
 * Messages (anthropic.c) and the web UI (ui.c).
 *
 * Each front end parses its own JSON shape with the shared field rules
 * (fields.h).  Then one path sends it: gw_core_admit (daemon up, in-flight
 * limit), gw_core_stream (a stream with its protocol encoder, the packed
 * request with the key's tenant, its choices and a random id), gw_req_send.
 * The daemon's events come back to the stream's encoder, a struct gw_proto
 * (daemon.h).  The error mapping stays each protocol's (OpenAI's /
 * Anthropic's error objects), from the one struct gw_error of error.h.
 *
 * Layer 4 of the gateway (tests/check_layers.sh): the HTTP transport and
 * everything beneath it.
 */
#ifndef GW_CORE_H
#define GW_CORE_H

#include "gateway/daemon.h"
#include "gateway/fields.h"
#include "gateway/http.h"
#include "gateway/params.h"

/* A body refused by the Responses / Messages parsers: 400 with code
 * "invalid_json" (bad_json) or "invalid_value" naming param, in the
 * endpoint's error shape (http.c). */
enum MHD_Result gw_core_refuse(struct gw_req *r, int bad_json, const char *param, const char *why);

/* The daemon can take a request now: 1; else 0 with the 503 / 429 queued in *ret. */
int gw_core_admit(struct gw_req *r, enum MHD_Result *ret);

/* A new stream of proto and kind carrying g (packed now: g's storage may go
 * after), n_choices choices and the id prefix + idlen random characters
 * (noun names it in the refusal when the kernel has no randomness).  NULL
 * with the error (500 / 503) queued in *ret. */
struct gw_stream *gw_core_stream(struct gw_req *r, const struct gw_proto *proto, enum gw_kind kind,
                                 Smollm3__GenerateRequest *g, int n_choices, const char *prefix, int idlen,
                                 const char *noun, enum MHD_Result *ret);

/* g packed with s's request id and tenant into s->packed; 0 or -1 (out of memory) */
int gw_pack_generate(struct gw_stream *s, Smollm3__GenerateRequest *g);

/* Queues p->err (status, type, code, param; message why, else p->err.msg). */
enum MHD_Result gw_params_error(struct gw_req *r, const struct gw_params *p, const char *why);

#endif
