/*
 * openai.h - OpenAI's Chat Completions (openai.c): POST /v1/chat/completions,
 * GET /v1/models, the encoder of chat and completions streams; the parser
 * without I/O (tests/fuzz/fuzz_gateway.c).
 *
 * Layer 5 of the gateway, the protocol front ends (tests/check_layers.sh):
 * the core and everything beneath it.
 */
#ifndef GW_OPENAI_H
#define GW_OPENAI_H

#include "gateway/core.h"

/* ---- request parsing without I/O (tests/fuzz/fuzz_gateway.c) */

#define GW_OPENAI_MAX_STOPS GW_MAX_STOPS

/* An OpenAI chat body as a GenerateRequest (prm.gen; params.h holds the
 * shared fields).  Its strings point into root (the parsed JSON) and strs:
 * valid until gw_openai_parsed_deinit. */
struct gw_openai_parsed {
    struct gw_params prm;       /* shared fields; prm.gen is the request; prm.err the refusal */
    Smollm3__ChatInput chat;
    Smollm3__ChatMessage *msgs;
    Smollm3__ChatMessage **msgp;
    struct gw_owned strs;       /* owned strings (JSON dumps, joined parts) */
    json_t *root;
};
/* Parses body[0..len) (POST /v1/chat/completions): 0, or -1 with the
 * refusal in p->prm.err (invalid JSON: 400 "invalid_json"; a rule: as
 * gw_error_set) and its message in why.  Call gw_openai_parsed_deinit in
 * every case. */
int gw_openai_parse(struct gw_openai_parsed *p, const char *body, size_t len, char *why, size_t wn);
void gw_openai_parsed_deinit(struct gw_openai_parsed *p);
enum MHD_Result gw_openai_chat(struct gw_req *r);
enum MHD_Result gw_openai_models(struct gw_req *r);
/* Admits and sends prm's request as a new chat / completions stream (core.h). */
enum MHD_Result gw_openai_start(struct gw_req *r, int api, const struct gw_params *prm);
void gw_openai_event(struct gw_stream *s, const Smollm3__Event *ev);
void gw_openai_error(struct gw_stream *s, const struct gw_error *e);
enum MHD_Result gw_openai_finish_json(struct gw_req *r, struct gw_stream *s);
extern const struct gw_proto gw_proto_openai;

#endif
