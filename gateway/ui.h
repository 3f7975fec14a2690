/*
 * ui.h - the web UI's endpoints (ui.c; gateway/UI_API.md): POST /ui/chat,
 * GET /ui/stream/SID, POST /ui/stop/SID, GET /ui/config; the form parser
 * without I/O (tests/fuzz/fuzz_gateway.c).
 *
 * Layer 5 of the gateway, the protocol front ends (tests/check_layers.sh):
 * the core and everything beneath it.
 */
#ifndef GW_UI_H
#define GW_UI_H

#include "gateway/core.h"

/* A POST /ui/chat form as a GenerateRequest for session "ui-<conversation>".
 * Strings point into the body (decoded in place), hist and session. */
struct gw_ui_parsed {
    Smollm3__GenerateRequest gen;
    Smollm3__ChatInput chat;
    Smollm3__SamplingParams sampling;
    Smollm3__ChatMessage *msgs;
    Smollm3__ChatMessage **msgp;
    json_t *hist;
    const char *message;        /* the new user message (the fragment echoes it) */
    size_t message_len;
    char session[80];
};
/* Parses the form body[0..n), which it decodes in place: body must hold
 * n + 1 bytes (body[n] is overwritten with NUL).  Returns 0, or -1 with the
 * refusal in *e (status 400, 413 or 503; the message for the page).  Call
 * gw_ui_parsed_deinit in every case. */
int gw_ui_parse(struct gw_ui_parsed *p, char *body, size_t n, struct gw_error *e);
void gw_ui_parsed_deinit(struct gw_ui_parsed *p);

enum MHD_Result gw_ui_chat(struct gw_req *r);
enum MHD_Result gw_ui_stream(struct gw_req *r, const char *sid);
enum MHD_Result gw_ui_stop(struct gw_req *r, const char *sid);
enum MHD_Result gw_ui_config(struct gw_req *r);
/* GET /ui/sessions (conv "") and /ui/sessions/CONV: the key's conversations kept by the daemon. */
enum MHD_Result gw_ui_sessions(struct gw_req *r, const char *conv);
void gw_ui_event(struct gw_stream *s, const Smollm3__Event *ev);
void gw_ui_error(struct gw_stream *s, const char *msg);
struct gw_stream *gw_ui_find(const char *sid);
void gw_ui_expire(double now);
unsigned gw_ui_unclaimed_count(void);

extern const struct gw_proto gw_proto_ui;

#endif
