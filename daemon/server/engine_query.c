/*
 * engine_query.c - the engine's answers to queries (stats, sessions,
 * health): read-only views of the engine's state, sent back with
 * engine_wire.c's senders between steps.  See engine.h for the protocol.
 */
#include "daemon/server/engine_internal.h"
#include "daemon/model/model.h"
#include "daemon/server/grammar_cache.h"
#include "kernels/quant_ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

/* ---- queries (stats, sessions) ---------------------------------------------------- */

/* the memory a session's KV pages take, in the cache's type */
static uint64_t session_kv_bytes(const struct smol_kv *kv, const struct smol_session *x)
{
    return (uint64_t)x->seq.n_pages * SMOL_KV_PAGE *
           smol_kv_bytes_per_token(kv->n_layers, kv->n_kv_heads, kv->head_dim, kv->type);
}

/* The DELETEs waiting for the spill's writer: an Ack when the file was
 * there, else ERROR_UNKNOWN_SESSION (as a DELETE answered at once). */
void smol_engine_poll_deletes(struct smol_engine *e)
{
    for (int i = 0; i < e->n_deletes;) {
        struct pending_delete *d = &e->deletes[i];
        const int found = smol_sessions_removal_done(&e->sessions, d->ticket);
        if (found < 0) { i++; continue; }
        if (found) {
            Smollm3__Event ev = SMOLLM3__EVENT__INIT;
            Smollm3__Ack ack = SMOLLM3__ACK__INIT;
            ev.request_id = d->request_id;
            ev.kind_case = SMOLLM3__EVENT__KIND_ACK;
            ev.ack = &ack;
            smol_engine_send_event(e, d->id, SMOL_EV_TERMINAL, &ev);
        } else {
            char msg[SMOL_UNKNOWN_SESSION_MSG];
            smol_engine_send_error(e, d->id, d->request_id, SMOL_ENOSESSION, smol_unknown_session_msg(msg, d->session));
        }
        *d = e->deletes[--e->n_deletes];
    }
}

void smol_engine_handle_query(struct smol_engine *e, uint64_t id, const uint8_t *data, size_t len)
{
    Smollm3__Request *rq = smollm3__request__unpack(NULL, len, data);
    if (!rq) { smol_engine_send_error(e, id, 0, SMOL_EFORMAT, "malformed query"); return; }
    Smollm3__Event ev = SMOLLM3__EVENT__INIT;
    ev.request_id = rq->request_id;
    struct smol_kv *kv = &e->m->kv;
    switch (rq->kind_case) {
    case SMOLLM3__REQUEST__KIND_STATS: {
        Smollm3__StatsReply st = SMOLLM3__STATS_REPLY__INIT;
        st.requests_active = (uint32_t)e->n_running;
        st.requests_queued = (uint32_t)e->n_queued;
        st.sessions = (uint32_t)e->sessions.n_named;
        st.kv_tokens_total = (uint64_t)kv->n_pages * SMOL_KV_PAGE;
        st.kv_tokens_used = (uint64_t)(kv->n_pages - kv->n_free) * SMOL_KV_PAGE;
        st.requests_total = e->n_requests;
        st.prompt_tokens_total = e->n_prompt_tokens;
        st.cached_tokens_total = e->n_cached_tokens;
        st.generated_tokens_total = e->n_generated;
        st.prefix_cache_hits = e->n_prefix_hits;
        st.spec_drafted_tokens = e->n_spec_drafted;
        st.spec_accepted_tokens = e->n_spec_accepted;
        st.spec_verify_steps = e->n_spec_steps;
        st.decode_steps = e->n_decode_steps;
        st.requests_rejected = e->n_rejected;
        st.requests_cancelled = e->n_cancelled;
        st.uptime_s = smol_mono_s() - e->t_start;
        st.context_length = (uint32_t)e->m->cfg.n_ctx;
        st.kv_bytes_per_token = smol_kv_bytes_per_token(kv->n_layers, kv->n_kv_heads, kv->head_dim, kv->type);
        st.kv_type = (char *)smol_type_name(kv->type);
        st.kv_bytes_total = st.kv_tokens_total * st.kv_bytes_per_token;
        st.kv_bytes_used = st.kv_tokens_used * st.kv_bytes_per_token;
        struct smol_spill_stats ss;
        if (smol_sessions_disk_stats(&e->sessions, &ss)) {
            st.spill_sessions_written = ss.written;
            st.spill_sessions_restored = ss.restored;
            st.spill_prefixes_written = ss.prefixes_written;
            st.spill_prefixes_restored = ss.prefixes_restored;
            st.spill_tokens_restored = ss.tokens_restored;
            st.spill_files_rejected = ss.rejected;
            st.spill_files = ss.files;
            st.spill_bytes = ss.bytes;
            st.spill_restore_ms_total = ss.restore_s * 1e3;
            st.spill_write_ms_total = ss.write_s * 1e3;
            st.spill_lease_refusals = ss.lease_refused;
            st.spill_leases_lost = ss.lease_lost;
            st.spill_unleased_refused = ss.unleased_refused;
            st.spill_history_restored = ss.history_restored;
        }
        st.sessions_stale_dropped = e->sessions.n_stale_dropped;
        st.prefill_tokens_total = e->n_prefilled;
        st.prompt_builds_total = e->n_prompt_builds;
        st.backend_sampled_tokens = e->n_backend_sampled;
        st.engine_steps = e->n_steps;
        st.host_pool_sampled_tokens = e->n_host_pooled;
        st.step_tokens_total = e->n_step_tokens;
        st.step_ms_total = e->step_s * 1e3;
        st.forward_ms_total = e->forward_s * 1e3;
        st.shared_choices_total = e->n_shared_choices;
        st.sessions_evicted = e->sessions.n_evicted;
        st.sessions_evicted_per_key = e->sessions.n_evicted_tenant_cap;
        st.unknown_session_refusals = e->n_unknown_session;
        st.prefill_steps = e->n_prefill_steps;
        st.mixed_steps = e->n_mixed_steps;
        st.step_budget_ms = e->sb.budget_ms;
        st.step_row_ms = e->sb.row_ms;
        st.step_prompt_token_ms = e->sb.tok_ms;
        st.preemptions_total = e->n_preemptions;
        Smollm3__TenantStats *tv = NULL;   /* a failed allocation leaves the list out, not the reply */
        smol_engine_fair_stats(e, &tv, &st.tenants, &st.n_tenants);
        if (e->cfg.grammars) {
            struct smol_grammar_cache_stats gs;
            smol_grammar_cache_stats(e->cfg.grammars, &gs);
            st.grammar_cache_hits = gs.hits;
            st.grammar_compiles = gs.compiles;
            st.grammar_compile_ms = gs.compile_ms;
        }
        st.grammar_mask_ms = e->grammar_s * 1e3;
        st.grammar_tokens = e->n_grammar_tokens;
        st.grammar_forced_tokens = e->n_grammar_forced;
        ev.kind_case = SMOLLM3__EVENT__KIND_STATS;
        ev.stats = &st;
        smol_engine_send_event(e, id, SMOL_EV_TERMINAL, &ev);
        free(st.tenants);
        free(tv);
        break;
    }
    case SMOLLM3__REQUEST__KIND_TOKENIZE: {
        const Smollm3__TokenizeRequest *t = rq->tokenize;
        struct smol_ids ids = {0};
        char err[SMOL_ERRLEN];
        const struct smol_special_ids *sp = smol_tokenizer_special(e->tok);
        if (t->add_special && sp->add_bos && sp->bos >= 0 && smol_ids_push(&ids, sp->bos)) {
            smol_engine_send_error(e, id, rq->request_id, SMOL_ENOMEM, "out of memory");
            break;
        }
        enum smol_err rc = smol_tokenizer_encode(e->tok, t->content, strlen(t->content), t->parse_special, &ids, err);
        Smollm3__TokenizeReply tr = SMOLLM3__TOKENIZE_REPLY__INIT;
        ProtobufCBinaryData *pieces = t->with_pieces && ids.n ? calloc(ids.n, sizeof *pieces) : NULL;
        if (!rc && t->with_pieces && ids.n && !pieces) rc = smol_errf(err, SMOL_ENOMEM, "out of memory");
        if (rc) {
            smol_engine_send_error(e, id, rq->request_id, rc, err);
        } else {
            tr.n_ids = ids.n;
            tr.ids = ids.v;
            for (size_t i = 0; pieces && i < ids.n; i++) {
                size_t n = 0;
                const char *pc = smol_tokenizer_piece(e->tok, ids.v[i], &n);
                pieces[i] = (ProtobufCBinaryData){ .len = pc ? n : 0, .data = (uint8_t *)pc };
            }
            if (pieces) { tr.n_pieces = ids.n; tr.pieces = pieces; }
            ev.kind_case = SMOLLM3__EVENT__KIND_TOKENIZED;
            ev.tokenized = &tr;
            smol_engine_send_event(e, id, SMOL_EV_TERMINAL, &ev);
        }
        free(pieces);
        smol_ids_free(&ids);
        break;
    }
    case SMOLLM3__REQUEST__KIND_DETOKENIZE: {
        const Smollm3__DetokenizeRequest *d = rq->detokenize;
        size_t cap = 1, len = 0;
        for (size_t i = 0; i < d->n_ids; i++) {
            size_t n = 0;
            smol_tokenizer_piece(e->tok, d->ids[i], &n);
            cap += n;
        }
        uint8_t *buf = malloc(cap);
        if (!buf) { smol_engine_send_error(e, id, rq->request_id, SMOL_ENOMEM, "out of memory"); break; }
        for (size_t i = 0; i < d->n_ids; i++) {
            size_t n = 0;
            const char *pc = smol_tokenizer_piece(e->tok, d->ids[i], &n);
            if (pc && n) memcpy(buf + len, pc, n);
            len += pc ? n : 0;
        }
        Smollm3__DetokenizeReply dr = SMOLLM3__DETOKENIZE_REPLY__INIT;
        dr.content = (ProtobufCBinaryData){ .len = len, .data = buf };
        ev.kind_case = SMOLLM3__EVENT__KIND_DETOKENIZED;
        ev.detokenized = &dr;
        smol_engine_send_event(e, id, SMOL_EV_TERMINAL, &ev);
        free(buf);
        break;
    }
    case SMOLLM3__REQUEST__KIND_SESSION_GET:
    case SMOLLM3__REQUEST__KIND_SESSION_DELETE: {
        int get = rq->kind_case == SMOLLM3__REQUEST__KIND_SESSION_GET;
        /* (tenant, id): another tenant's session is not found, as one that does not exist */
        const char *sid = get ? rq->session_get->session_id : rq->session_delete->session_id;
        const char *tenant = get ? rq->session_get->tenant : rq->session_delete->tenant;
        struct smol_session *x = sid && sid[0] ? smol_sessions_find(&e->sessions, tenant, sid) : NULL;
        /* a shared directory: whether the file is there is found on the
         * spill's writer thread as it removes it; answered then
         * (smol_engine_poll_deletes).  With 16 already waiting, a DELETE
         * is refused (SMOL_EBUSY: retry), never looked up here (a stat on
         * the engine thread: issue 46) */
        if (!x && !get && sid && sid[0] && smol_sessions_shared(&e->sessions)) {
            const uint64_t t = e->n_deletes < (int)(sizeof e->deletes / sizeof e->deletes[0])
                                   ? smol_sessions_remove_file_report(&e->sessions, tenant, sid) : 0;
            if (!t) {
                smol_engine_send_error(e, id, rq->request_id, SMOL_EBUSY,
                                       "too many session deletes waiting for the spill directory; retry");
                break;
            }
            struct pending_delete *d = &e->deletes[e->n_deletes++];
            d->id = id;
            d->request_id = rq->request_id;
            d->ticket = t;
            snprintf(d->session, sizeof d->session, "%s", sid);
            break;
        }
        if (!x && !get && sid && sid[0] && smol_sessions_has_file(&e->sessions, tenant, sid)) {
            /* only on disk */
            Smollm3__Ack ack = SMOLLM3__ACK__INIT;
            smol_sessions_remove_file(&e->sessions, tenant, sid);
            ev.kind_case = SMOLLM3__EVENT__KIND_ACK;
            ev.ack = &ack;
            smol_engine_send_event(e, id, SMOL_EV_TERMINAL, &ev);
            break;
        }
        if (!x) {
            char msg[SMOL_UNKNOWN_SESSION_MSG];
            smol_engine_send_error(e, id, rq->request_id, SMOL_ENOSESSION, smol_unknown_session_msg(msg, sid ? sid : ""));
            break;
        }
        /* declared here: ev points at them until send_event below */
        Smollm3__SessionInfo si = SMOLLM3__SESSION_INFO__INIT;
        Smollm3__Ack ack = SMOLLM3__ACK__INIT;
        char *msgs = NULL;      /* si.messages_json's bytes, freed once sent */
        if (get) {
            si.session_id = x->id;
            si.tokens = (uint32_t)x->n_tokens;
            si.idle_s = x->busy ? 0 : smol_mono_s() - x->last_used;
            si.busy = x->busy;
            si.on_disk = e->cfg.spill && x->on_disk && x->n_tokens > 0;
            si.kv_bytes = session_kv_bytes(kv, x);
            msgs = x->msgs ? json_dumps(x->msgs, JSON_COMPACT) : NULL;
            si.messages_json = msgs ? msgs : "";
            ev.kind_case = SMOLLM3__EVENT__KIND_SESSION;
            ev.session = &si;
        } else {
            smol_sessions_remove_file(&e->sessions, x->tenant, x->id);
            if (x->busy) { /* cancel its request; the session goes when it ends */
                for (struct req *q = e->running; q; q = q->next)
                    if (q->sess == x) {
                        q->cancelled = 1;
                        q->sess = NULL;
                        q->anon = x;
                        smol_sessions_orphan(&e->sessions, x);
                    }
            } else smol_sessions_remove(&e->sessions, x);
            ev.kind_case = SMOLLM3__EVENT__KIND_ACK;
            ev.ack = &ack;
        }
        smol_engine_send_event(e, id, SMOL_EV_TERMINAL, &ev);
        free(msgs);
        break;
    }
    case SMOLLM3__REQUEST__KIND_SESSION_LIST: {   /* the tenant's sessions only */
        const char *tenant = rq->session_list->tenant;
        int n = e->sessions.n_named, k = 0;
        Smollm3__SessionInfo *si = calloc(n ? n : 1, sizeof *si);
        Smollm3__SessionInfo **sp = calloc(n ? n : 1, sizeof *sp);
        Smollm3__SessionList sl = SMOLLM3__SESSION_LIST__INIT;
        if (!si || !sp) { free(si); free(sp); smol_engine_send_error(e, id, rq->request_id, SMOL_ENOMEM, "out of memory"); break; }
        double t = smol_mono_s();
        for (struct smol_session *x = e->sessions.head; x && k < n; x = x->next) {
            if (!x->id[0] || strcmp(x->tenant, tenant)) continue;
            smollm3__session_info__init(&si[k]);
            si[k].session_id = x->id;
            si[k].tokens = (uint32_t)x->n_tokens;
            si[k].idle_s = x->busy ? 0 : t - x->last_used;
            si[k].busy = x->busy;
            si[k].on_disk = e->cfg.spill && x->on_disk && x->n_tokens > 0;
            si[k].kv_bytes = session_kv_bytes(kv, x);
            sp[k] = &si[k];
            k++;
        }
        sl.n_sessions = (size_t)k;
        sl.sessions = sp;
        ev.kind_case = SMOLLM3__EVENT__KIND_SESSIONS;
        ev.sessions = &sl;
        smol_engine_send_event(e, id, SMOL_EV_TERMINAL, &ev);
        free(si);
        free(sp);
        break;
    }
    case SMOLLM3__REQUEST__KIND_HEALTH: {
        Smollm3__HealthReply h = SMOLLM3__HEALTH_REPLY__INIT;
        h.ready = !e->draining;
        h.model = (char *)(e->cfg.model_name ? e->cfg.model_name : "");
        h.status = e->draining ? "draining" : "serving";
        h.protocol_version = SMOLLM3__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
        ev.kind_case = SMOLLM3__EVENT__KIND_HEALTH;
        ev.health = &h;
        smol_engine_send_event(e, id, SMOL_EV_TERMINAL, &ev);
        break;
    }
    default:
        smol_engine_send_error(e, id, rq->request_id, SMOL_EINVAL, "not a query");
    }
    smollm3__request__free_unpacked(rq, NULL);
}
