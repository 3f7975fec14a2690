/*
 * engine_internal.h - the engine's private header, shared by its files:
 * engine.c (the scheduler: the loop, a request's life, one step),
 * engine_admit.c (admission: session, prompt, prefix, KV room; n > 1
 * choices), engine_sample.c (the sampling policy: grammar, thinking
 * budget, verification, the backend's and the host pool's rows),
 * engine_draft.c (speculative drafts), engine_query.c (queries) and
 * engine_wire.c (the wire: events built from a request's state, command
 * frames read).  Not a public header: only the engine's own files include
 * it; everything here belongs to the engine thread.
 */
#ifndef SMOL_ENGINE_INTERNAL_H
#define SMOL_ENGINE_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>
#include "daemon/text/text.h"
#include "daemon/server/engine.h"
#include "daemon/server/sessions.h"
#include "daemon/server/step_budget.h"
#include "smollm3.pb-c.h"

struct smol_model;
struct smol_tokenizer;

enum req_state { RS_QUEUED, RS_PREFILL, RS_DECODE, RS_DONE };

struct req {
    struct smol_request *r;
    struct smol_engine *e;
    enum req_state state;
    struct smol_session *sess;      /* named session, or NULL */
    struct smol_session *anon;      /* session-less: our own entry (becomes a cached prefix) */
    struct smol_kv_seq *seq;        /* where we write: sess->seq or anon->seq */
    int32_t *tok;                   /* prompt, then generated tokens appended */
    int n_tok, cap;
    int n_prompt, n_cached, max_gen, n_gen, n_reasoning;
    int waits_alone;                /* its admission waits for its session's lease or file (shared
                                       spill): the requests of other sessions are admitted past it */
    int passed;                     /* this step's admission went past it (it waits alone) */
    double lease_ask_at;            /* CLOCK_MONOTONIC s: its lease (held elsewhere) asked again then */
    double lease_wait;              /* s: the wait before that (2 ms, doubling to 50 ms) */
    int lease_kept;                 /* it holds its session's lease while it waits for the session's
                                       (or a prefix's) file to be read: not asked again (given back
                                       when it is refused or ends queued) */
    int thinking, cancelled, paused, finished;
    int handing;                    /* drain: Event.handover sent, generated on until the engine's
                                       handover_deadline (make-before-break), exempt from drain's */
    int lost;                       /* an event of its stream could not be made or sent (out of
                                       memory): it stops and ends with an error, never with a Done
                                       that would vouch for a stream the client did not get whole */
    enum smol_chat_tpl tpl;
    struct smol_sampler *smp;
    struct smol_grammar_matcher *gm;  /* structured output: NULL = unconstrained */
    int gm_active;                  /* the constraint applies (after </think> when thinking) */
    int think_open;                 /* thinking, </think> not yet generated */
    int in_think;                   /* a generated <think> not yet closed (reasoning_tokens) */
    int think_budget;               /* tokens generated before </think> is forced; 0 = unlimited */
    /* speculative decoding (NULL lk: off): the history's n-gram index, the
     * draft-length controller, this step's draft and its lookup */
    struct smol_lookup *lk;
    struct smol_spec_ctl ctl;
    struct smol_spec_grammar sg;    /* the draft filter's view of gm */
    int n_draft, draft_match;
    int32_t draft_first;            /* what the lookup proposed first (-1: nothing), for the shadow update */
    int n_drafted, n_accepted, n_steps;  /* usage */
    /* Predicted Outputs (NULL pred: none): the prediction's tokens; pred_pos:
     * the one the output is expected to produce next (-1: the output left
     * the prediction and has not come back to it); pred_seen: n_gen when
     * pred_pos was last brought up to date; draft_pred: this step's draft
     * comes from the prediction; pred_run: output tokens that have followed
     * the prediction since pred_pos was last re-synchronised (the evidence
     * for pctl, the prediction's own draft-length controller); pred_first,
     * pred_match: what the prediction proposed at this step's planning (-1:
     * nothing) and pred_run then, for pctl's shadow update */
    int32_t *pred;
    int n_pred, pred_pos, pred_seen, draft_pred, pred_run, pred_match;
    int32_t pred_first;
    struct smol_spec_ctl pctl;
    int n_pred_accepted, n_pred_rejected;
    struct smol_detok detok;
    struct smol_chat_parser parser;
    struct smol_chat_buf content;   /* content text, for the session's history */
    json_t *tool_calls;             /* the calls made (OpenAI tool_calls array), for the history; NULL: none */
    struct smol_chat_buf rendered;  /* rendered prompt text (chat) */
    int prompt_built;               /* tok[0, n_tok), rendered and thinking hold the prompt: it is
                                       rendered and tokenized once, not at every step it waits */
    uint64_t prompt_stamp;          /* the stamp of the session it was built on (0: none); a
                                       session that changed since has it built again */
    int cur_token, seg_in_token;    /* token being parsed; segments emitted for it */
    int tok_reasoning;              /* the current token emitted reasoning text */
    struct smol_sampler_logprobs cur_lp; /* the current token's logprobs (when asked) */
    int finish_reason;              /* Smollm3__FinishReason */
    int stop_index;
    int kv_promise;                 /* pages this request may still allocate */
    int choice;                     /* n > 1: which continuation (0 = the one that prefilled) */
    int sib_pages;                  /* choice 0 until its prefill ends: pages the others will take */
    const int32_t *resume;          /* resume: its own [n_resume] tokens to replay (of r->resume) */
    int n_resume;                   /* n > 1: 0 until the choices are spawned, then each its own */
    int n_resume_cached;            /* of them, reused from a cached prefix (Usage.resume_cached_tokens) */
    int spawned;                    /* n > 1, choice 0: its other choices are started */
    double t_admit, t_first_step, t_prefill_done, t_first_token;
    struct smol_tenant_acct *acct;  /* its tenant's share (engine_fair.c) */
    int preempted;                  /* paused by the scheduler for another tenant's share or a higher
                                       class: on the running list, its KV kept, no rows, no slot */
    int n_preempt;                  /* times it was (Done.preemptions) */
    struct req *next;               /* queue / running list */
};

struct smol_engine {
    pthread_t thread;
    void *sock;                     /* PAIR, engine side */
    struct smol_model *m;
    struct smol_tokenizer *tok;
    enum smol_chat_tpl tpl;
    int have_tpl;
    struct smol_engine_config cfg;
    struct smol_sessions sessions;
    struct smol_sampler_scratch *sc;
    struct req *queue, *running;    /* singly linked, FIFO order */
    int n_queued, n_running;
    int n_preempted;                /* of n_running, preempted (no batch slot): recounted each admission */
    struct smol_tenant_acct *tenants; /* [SMOL_MAX_TENANT_ACCTS] fair shares (engine_fair.c) */
    int n_tenants;
    uint64_t n_preemptions;         /* requests preempted, all tenants */
    int draining;
    double handover_deadline;       /* monotonic s: requests still handing then are given back */
    int waiting_read;           /* the queue head waits for its session file (smol_spill_prefetch) */
    /* DELETEs of sessions only in a shared spill directory, answered once
     * the spill's writer found whether the file was there (engine_query.c) */
    struct pending_delete {
        uint64_t id, request_id, ticket;
        char session[SMOL_SESSION_ID_MAX + 1];
    } deletes[16];
    int n_deletes;
    atomic_int stop;                /* set by smol_engine_stop on another thread (release), read by the loop (acquire) */
    double drain_deadline;
    /* step scratch, sized once */
    int32_t *b_tok, *b_pos, *b_out;
    uint32_t *gmask;                /* token bitmask for constrained requests, ceil(vocab / 32) words */
    struct smol_kv_seq **b_seq;
    struct req **b_req;             /* request of each out row */
    struct smol_row_sample *b_rs;   /* backend_sampling: how each out row is sampled */
    int32_t *b_ids;                 /* and the tokens the backend drew (or the host's pool: b_host) */
    uint8_t *b_host;                /* out rows the host samples on the pool, before the step's emits */
    struct smol_pool *spool;        /* those rows' threads (NULL: one CPU, every row serial) */
    struct smol_sampler_scratch **scs; /* a scratch per pool thread */
    float *logits;                  /* [max_out][vocab] */
    int max_out;                    /* rows: max_running + spec_rows */
    struct smol_step_budget sb;     /* prompt chunks sized to cfg.step_budget_ms */
    int spec_rows;                  /* draft rows a step may verify, all requests together */
    float spec_cost[SMOL_SPEC_MAX_DRAFT + 1]; /* verify step of k + 1 positions / a 1-token step, measured at start */
    uint8_t *pack;                  /* protobuf packing buffer */
    size_t pack_cap;
    char *text_buf;                 /* a Token's text, NUL-terminated for protobuf-c (engine_wire.c) */
    size_t text_cap;
    /* counters for stats */
    uint64_t n_requests, n_prompt_tokens, n_cached_tokens, n_generated, n_prefix_hits, n_rejected, n_cancelled;
    double grammar_s;               /* structured output: time in masks and grammar advances */
    uint64_t n_grammar_tokens;      /* tokens sampled under a grammar */
    uint64_t n_grammar_forced;      /* of those, drawn again to end within the length limit */
    uint64_t n_think_forced;        /* </think> forced by a thinking budget or a pending grammar */
    uint64_t n_prefilled;           /* prompt positions run through forward() */
    uint64_t n_prompt_builds;       /* prompts rendered and tokenized (build_prompt) */
    uint64_t n_backend_sampled;     /* tokens the backend sampled (backend_sampling) */
    uint64_t n_steps, n_step_tokens;/* steps that ran the model, and their tokens */
    uint64_t n_prefill_steps, n_mixed_steps; /* steps with prompt tokens; of them, beside decode rows */
    uint64_t n_host_pooled;         /* tokens the host drew on its pool (emit_host_sampled) */
    double step_s, forward_s;       /* their wall time, and the model's part of it */
    uint64_t n_shared_choices;      /* n > 1: choices started on another's prefilled prompt */
    uint64_t n_events_lost;         /* events the RPC thread never got (out of memory, socket refused) */
    uint64_t n_unknown_session;     /* appends refused: the tenant holds no such session (ENOSESSION) */
    uint64_t n_spec_drafted, n_spec_accepted, n_spec_steps, n_decode_steps;
    double t_start;
};

/* ---- the engine thread's end of the inproc PAIR (engine_wire.c) ---- */

/* Sends [id][flags][packed ev] to the RPC thread; 0, or -1 when it was lost
 * (logged and counted in n_events_lost).  A terminal event is never lost to
 * a failed allocation: when ev cannot be packed, an ENOMEM error event ends
 * the stream in its place.  Only a socket that refuses it for ~100 ms
 * (ETERM: shutting down) loses one. */
int smol_engine_send_event(struct smol_engine *e, uint64_t id, unsigned flags, const Smollm3__Event *ev);
/* Sends [0][SMOL_EV_DRAINED][]; 0, or -1 (logged). */
int smol_engine_send_drained(struct smol_engine *e);
/* Sends a terminal error event. */
void smol_engine_send_error(struct smol_engine *e, uint64_t id, uint64_t client_id, enum smol_err code,
                            const char *msg);
/* The one message for a session the asking tenant does not hold (never
 * made, deleted, evicted without a file, or another tenant's: the same
 * words, so that an answer never tells which) into msg; returns msg. */
#define SMOL_UNKNOWN_SESSION_MSG (SMOL_SESSION_ID_MAX + 32)
const char *smol_unknown_session_msg(char msg[SMOL_UNKNOWN_SESSION_MSG], const char *session_id);

/* ---- a request's events, built from its state (q is only read) ---- */

/* Started: the prompt's tokens, those from the cache (restored: of them,
 * read back from disk), the session, thinking.  0, or -1 when it was lost. */
int smol_engine_send_started(struct smol_engine *e, const struct req *q, int restored);
/* A Token carrying text[0, len) on channel (Smollm3__Channel); token_id:
 * q's current token on its first segment, -1 on the others (logprobs, when
 * asked, ride on the first).  0 sent; -1 lost; SMOL_WIRE_UNMADE: out of
 * memory before anything was made (the segment does not count). */
#define SMOL_WIRE_UNMADE (-2)
int smol_engine_send_token(struct smol_engine *e, const struct req *q, const char *text, size_t len, int channel,
                           int32_t token_id);
/* A ToolCall: the parser's call pe, named call_id.  0, or -1 when lost. */
int smol_engine_send_tool_call(struct smol_engine *e, const struct req *q, const struct smol_chat_event *pe,
                               const char *call_id);
/* Done: finish reason, usage and timings of q (terminal when q is the last
 * of its choices to end). */
void smol_engine_send_done(struct smol_engine *e, const struct req *q);
/* Event.handover for q's request (draining: generated on for grace_ms, then given back). */
int smol_engine_send_handover(struct smol_engine *e, const struct req *q, uint32_t grace_ms);

/* ---- commands from the RPC thread (the framing is in engine.h) ---- */

/* One command read off the PAIR, its frames held until
 * smol_engine_cmd_close (data points into them). */
struct smol_engine_cmd_msg {
    uint8_t cmd;                    /* enum smol_engine_cmd; 0: an empty first frame */
    uint64_t id;                    /* CANCEL, PAUSE, RESUME, QUERY: the request (0: none) */
    struct smol_request *r;         /* SUBMIT: the request handed over (NULL: malformed) */
    uint32_t grace_ms;              /* DRAIN */
    const uint8_t *data;            /* QUERY: the packed Request, len bytes (when n > 2) */
    size_t len;
    zmq_msg_t part[3];              /* frames past the third are read and dropped */
    int n;                          /* frames held */
};
/* Reads one multipart command without waiting: 1, or 0 when none was
 * pending (nothing to close). */
int smol_engine_recv_cmd(void *sock, struct smol_engine_cmd_msg *c);
void smol_engine_cmd_close(struct smol_engine_cmd_msg *c);

/* ---- a request's life (engine.c) ---- */

void smol_engine_req_free(struct req *q);
/* Appends t to q->tok; 0, or -1 out of memory. */
int smol_engine_tok_push(struct req *q, int32_t t);
void smol_engine_list_remove(struct req **head, struct req *q);
void smol_engine_list_append(struct req **head, struct req *q);
/* Part of q's stream is lost: it stops at the next step and ends with an error. */
void smol_engine_lose(struct req *q);
/* The output parser's callback (ud: the request): streams text and tool calls. */
void smol_engine_on_parse(void *ud, const struct smol_chat_event *pe);
/* Ends a running (or queued) request: flushes text, sends Done, leaves its
 * KV to its session or as a cached prefix, frees it. */
void smol_engine_finish(struct smol_engine *e, struct req *q, int reason);
/* Refuses q with an error event (its terminal one) and frees it. */
void smol_engine_reject(struct smol_engine *e, struct req *q, enum smol_err code, const char *msg);
/* An error after Started: its session's history forgotten, then rejected. */
void smol_engine_fail(struct smol_engine *e, struct req *q, enum smol_err code, const char *msg);
/* Streams token t of q (sampled, the grammar advanced) and what it makes
 * final; kv_len: the tokens q's KV holds when t comes.  0 when q finished
 * (and was freed). */
int smol_engine_emit_token(struct smol_engine *e, struct req *q, int32_t t, double now, int kv_len);

/* ---- admission (engine_admit.c) ---- */

/* Admits the queue's head when it can run now: 1 admitted (Started sent),
 * 0 must wait, -1 refused (error sent, q freed). */
int smol_engine_try_admit(struct smol_engine *e, struct req *q, double now);
/* n > 1: once choice 0 has prefilled, choices 1..n-1 start from its KV and
 * its logits row (logits) and sample their first token. */
void smol_engine_spawn_choices(struct smol_engine *e, struct req *q, float *logits, double now);

/* ---- the sampling policy (engine_sample.c) ---- */

/* What the speculative verifier's callbacks see: the request and where each
 * verified row's logprobs go (lps: NULL when drafting). */
struct spec_ctx {
    struct smol_engine *e;
    struct req *q;
    struct smol_sampler_logprobs *lps;
};
/* Samples q's token from row i of its step's rows (logits ours to modify):
 * thinking budget, grammar (the shortest completion forced within the
 * length limit), logprobs into *lp. */
enum smol_err smol_engine_sample_row(struct smol_engine *e, struct req *q, int i, float *logits, int32_t *t,
                                     struct smol_sampler_logprobs *lp, char *err);
/* Samples q's next tokens from its rows (one, or its draft's k + 1), then
 * streams them.  May finish (and free) q. */
void smol_engine_sample_and_emit(struct smol_engine *e, struct req *q, float *logits, const int32_t *drafts,
                                 double now);
/* Streams token t drawn for q's one row by the backend (by_backend) or on
 * the host's pool.  May finish (and free) q. */
void smol_engine_emit_drawn(struct smol_engine *e, struct req *q, int32_t t, double now, int by_backend);
/* backend_sampling: marks the out rows the backend draws (e->b_rs); how many. */
int smol_engine_backend_rows(struct smol_engine *e, int n_out);
/* Draws the host's plain rows on its pool (e->b_host), before any emit. */
void smol_engine_host_rows(struct smol_engine *e, int n_out, int n_rs);
/* The host-sampling pool (cfg sample_threads), for T batch rows. */
enum smol_err smol_engine_host_pool_new(struct smol_engine *e, int T, char *err);

/* ---- drafting (engine_draft.c) ---- */

/* The prompt lookup, its controller and the prediction, when the request
 * and the daemon allow speculation. */
enum smol_err smol_engine_start_speculation(struct smol_engine *e, struct req *q, char *err);
/* q's draft for this step: up to max tokens into draft[] (q->n_draft; 0: a
 * plain decode step). */
void smol_engine_plan_draft(struct smol_engine *e, struct req *q, int max, int32_t *draft);
/* Resume: q's resume_tokens, prefilled after its prompt, taken as if drawn one a step, nothing
 * streamed for them (engine_sample.c); 0 when q ended there (and was freed). */
int smol_engine_replay(struct smol_engine *e, struct req *q, double now);

/* ---- fair shares between tenants, service tiers (engine_fair.c) ---- */

/* One tenant's account: the fair queue's virtual time (tokens scheduled
 * for it, lifted to the least active tenant's when it comes back from
 * idle, so that idle time is not banked) and its counts, recounted from
 * the lists at each admission.  Entries never move: a request points at
 * its own; an entry nobody uses is reused for a new tenant. */
#define SMOL_MAX_TENANT_ACCTS 256
struct smol_tenant_acct {
    char name[SMOL_RULE_TENANT_MAX + 1];
    double vt;                      /* tokens scheduled (prompt + decode rows), the queue's order */
    int queued, running, preempted; /* requests now (running: holding a batch slot) */
    uint64_t preemptions, served;   /* totals: times its requests were preempted, tokens scheduled */
    int used;                       /* the entry names a tenant */
};
enum smol_err smol_engine_fair_init(struct smol_engine *e, char *err);
void smol_engine_fair_deinit(struct smol_engine *e);
/* q (just queued) takes its tenant's account, made when new. */
void smol_engine_fair_enqueue(struct smol_engine *e, struct req *q);
/* n tokens of q go into this step: charged to its tenant. */
void smol_engine_fair_charge(struct req *q, int n);
/* Admission: preempted requests resumed and queued ones admitted while
 * slots are free, in order of class (priority, default, flex), then the
 * tenant least served, then arrival; a waiting request that finds every
 * slot taken preempts a flex request, or one of a tenant holding more than
 * its share (max_running / tenants wanting slots).  Stops at the first
 * that must wait (KV, its session's file). */
void smol_engine_admit_fair(struct smol_engine *e, double now);
/* KV pressure: evicts the least recently used idle entry (a cached prefix
 * first) of the tenant holding the most KV pages that has one; 1 if one
 * was evicted. */
int smol_engine_evict_heaviest(struct smol_engine *e);
/* Per-tenant stats (StatsReply.tenants): n_out entries into *out,
 * allocated (free it and its entries' array with free); 0, or -1 out of memory. */
int smol_engine_fair_stats(struct smol_engine *e, Smollm3__TenantStats **out_v, Smollm3__TenantStats ***out_p,
                           size_t *n_out);

/* Answers a stats / session / health query (engine_query.c). */
void smol_engine_handle_query(struct smol_engine *e, uint64_t id, const uint8_t *data, size_t len);
void smol_engine_poll_deletes(struct smol_engine *e);

#endif
