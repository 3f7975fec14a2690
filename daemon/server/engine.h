/*
 * engine.h - the engine thread of smollm3d: it owns the model, the KV pool,
 * the sessions and the scheduler, and nothing else touches them.
 *
 * The RPC thread talks to it over a ZeroMQ inproc PAIR socket (zguide
 * style: no shared state).  Messages RPC -> engine, multipart:
 *     [u8 cmd][payload...]
 *       SUBMIT  [ptr: struct smol_request *]      ownership passes to the engine
 *       CANCEL  [u64 id]                          internal request id
 *       PAUSE   [u64 id] / RESUME [u64 id]        backpressure: skip / resume decoding
 *       QUERY   [u64 id][packed smollm3 Request]  stats, session get/list/delete
 *       DRAIN   [u32 grace_ms]                    stop admitting; cancel leftovers after grace
 *       STOP    []                                exit the thread now
 * Messages engine -> RPC, multipart:
 *     [u64 id][u8 flags][packed smollm3 Event]    flags & SMOL_EV_TERMINAL: last event of id
 *     [u64 0][u8 SMOL_EV_DRAINED][]               the drain finished (nothing running)
 * The Event's request_id is already the client's id (struct smol_request
 * .client_id); the RPC thread routes by the internal id.
 *
 * Scheduling: every step advances all running requests together: one decode
 * token per running request plus chunks of waiting prompts (chunked
 * prefill), at most step_tokens tokens, and with step_budget_ms prompt chunks
 * sized so that the step stays within that time.  Admission is in fair
 * order (engine_fair.c: service tier, the tenant least served, arrival)
 * from a bounded queue, a tenant over its share of slots preempted (KV
 * kept) for another; a request is admitted when a slot is free and its worst-case KV
 * (prompt + max_tokens) fits in the budget after evicting idle sessions and
 * cached prefixes, least recently used first.  A request that can never fit
 * gets SMOL_EBUSY / SMOL_ECONTEXT at once.  Cancellation marks the request;
 * it is removed before the next step is built.
 */
#ifndef SMOL_ENGINE_H
#define SMOL_ENGINE_H

#include <stdint.h>
#include "daemon/model/error.h"
#include "daemon/server/request.h"

struct smol_model;
struct smol_tokenizer;
struct smol_spill;
struct smol_grammar_cache;

enum smol_engine_cmd {
    SMOL_CMD_SUBMIT = 1,
    SMOL_CMD_CANCEL = 2,
    SMOL_CMD_PAUSE = 3,
    SMOL_CMD_RESUME = 4,
    SMOL_CMD_QUERY = 5,
    SMOL_CMD_DRAIN = 6,
    SMOL_CMD_STOP = 7,
};

#define SMOL_EV_TERMINAL 1u
#define SMOL_EV_DRAINED 2u

struct smol_engine_config {
    int max_running;        /* requests decoding at once (batch slots); default 16 */
    int max_queued;         /* admission queue; beyond it SMOL_EQUEUE_FULL; default 64 */
    int step_tokens;        /* tokens per step (decode + prefill chunks); default 256 */
    int fair_share;         /* 1 (default): admission in fair order between tenants and tiers,
                               preemption for a tenant's share (engine_fair.c); 0: first come
                               first served, no preemption (as before issue 47: for comparison) */
    double step_budget_ms;  /* a step's target time: prompt chunks sized to it from the measured
                               speed beside decode rows (step_budget.h); 0 = off (default; the
                               daemon's is per backend), chunks up to step_tokens */
    /* test-only: what a step of n_rows decode rows and n_prompt prompt
     * tokens "took" in ms, in place of the measured time (a fake clock for
     * the step budget); NULL = measured */
    double (*step_ms_fn)(int n_rows, int n_prompt);
    int default_max_tokens; /* when a request gives none; default 2048 (capped by context) */
    int default_thinking_budget; /* thinking tokens before a forced </think> when a request gives none; 0 = unlimited */
    int max_sessions;       /* default 1024 */
    int max_sessions_per_key; /* sessions one tenant keeps (its own oldest idle one evicted beyond it);
                                 0 = no cap of its own (default) */
    double session_ttl_s;   /* idle sessions expire; default 3600 */
    double spill_ttl_s;     /* spill files nobody wrote or read this long are removed (a sweep a
                               minute); 0 = session_ttl_s, and never less */
    int max_cached_prefixes;/* anonymous finished sequences kept for prefix reuse; default 16 */
    double queue_timeout_s; /* a request waiting for KV longer than this gets SMOL_EBUSY; default 30 */
    const char *model_name; /* reported by health */
    struct smol_spill *spill;   /* session files (server/spill.h), borrowed; NULL = none */
    struct smol_grammar_cache *grammars; /* for its stats (server/grammar_cache.h), borrowed; NULL = none */
    int spill_when_idle;        /* write changed sessions to it whenever nothing runs */
    int speculative;            /* longest prompt-lookup draft verified per step (0..SMOL_SPEC_MAX_DRAFT);
                                   0 = off unless a request asks; default SMOL_SPEC_MAX_DRAFT */
    int sample_threads;         /* rows sampled on the host on a pool of this many threads (one
                                   step's rows together); 0 = up to 8 where there are CPUs, 1 = serial */
    int backend_sampling;       /* 1: rows that need only temperature / top_p (no grammar, bias,
                                   penalties, top_k, min_p, logprobs, draft, n > 1) are sampled
                                   by the backend (CUDA: on the device), with the request's own
                                   seeded draws; default 0 (the host sampler) */
    int speculative_calibrate;  /* measure the verify step's cost at start (default 1); 0: the
                                   batched kernels' model, 1 + 0.06 per drafted token */
    double handover_grace_s;    /* drain: a decoding request with handover_overlap is generated on
                                   this long after its Event.handover, then given back
                                   (SMOL_ESHUTDOWN); 0 = given back at once; default 10 */
};

void smol_engine_config_default(struct smol_engine_config *c);

struct smol_engine;

/* Starts the engine thread; it connects a PAIR socket to `endpoint` (an
 * inproc:// address the caller has bound in zmq_ctx).  The model and the
 * tokenizer are borrowed (the caller frees them after smol_engine_stop). */
enum smol_err smol_engine_start(struct smol_engine **out, void *zmq_ctx, const char *endpoint,
                                struct smol_model *m, struct smol_tokenizer *tok,
                                const struct smol_engine_config *cfg, char *err);
/* Sends STOP (if not yet), joins the thread, frees everything; accepts NULL. */
void smol_engine_stop(struct smol_engine **e);

/* Thread-safe helpers for the RPC side to build command messages. */
int smol_engine_send_submit(void *sock, struct smol_request *r);     /* 0 or -1 (then r is still the caller's) */
int smol_engine_send_id(void *sock, enum smol_engine_cmd cmd, uint64_t id);
int smol_engine_send_query(void *sock, uint64_t id, const void *packed_request, size_t len);
int smol_engine_send_drain(void *sock, uint32_t grace_ms);
int smol_engine_send_stop(void *sock);

/* Test-only fault injection, compiled in always and off unless a test arms
 * it: the next n passes through the point fail as the real failure would.
 * Thread-safe (the RPC and the engine thread both pass through them). */
enum smol_engine_fault {
    SMOL_FAULT_SUBMIT,          /* smol_engine_send_submit: the hand-off fails (-1, errno ENOMEM) */
    SMOL_FAULT_EVENT_PACK,      /* smol_engine_send_event: the packing buffer cannot be allocated */
    SMOL_FAULT_EVENT_SEND,      /* smol_engine_send_event: a frame's zmq_send fails (EINTR, retried) */
    SMOL_FAULT_N
};
void smol_engine_fault_arm(enum smol_engine_fault point, int n);

/* Runs one synchronous warm-up forward (before serving); SMOL_OK or why not. */
enum smol_err smol_engine_warmup(struct smol_model *m, char *err);

#endif
