/* sessions.c - session / cached-prefix store (see sessions.h). */
#include "daemon/server/sessions.h"
#include "daemon/server/log.h"
#include "daemon/server/spill.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void smol_sessions_init(struct smol_sessions *s, struct smol_kv *kv)
{
    memset(s, 0, sizeof *s);
    s->kv = kv;
}

static void unlink_lru(struct smol_sessions *s, struct smol_session *x)
{
    if (x->prev) x->prev->next = x->next; else s->head = x->next;
    if (x->next) x->next->prev = x->prev; else s->tail = x->prev;
    x->prev = x->next = NULL;
}

static void push_head(struct smol_sessions *s, struct smol_session *x)
{
    x->prev = NULL;
    x->next = s->head;
    if (s->head) s->head->prev = x; else s->tail = x;
    s->head = x;
}

static void unlease(struct smol_sessions *s, struct smol_session *x)
{
    char key[SMOL_SPILL_KEY_MAX + 1];
    smol_spill_key(x->tenant, x->id, key);
    smol_spill_unlease(s->spill, key);
    x->leased = 0;
    s->n_leased--;
}

void smol_sessions_orphan(struct smol_sessions *s, struct smol_session *x)
{
    if (!x->id[0]) return;
    if (x->leased) unlease(s, x);    /* by its name, before the name goes */
    x->id[0] = 0;
    s->n_named--;
    s->n_anon++;
}

void smol_sessions_remove(struct smol_sessions *s, struct smol_session *x)
{
    if (!x) return;
    unlink_lru(s, x);
    if (x->id[0]) s->n_named--; else s->n_anon--;
    if (x->leased) unlease(s, x);
    smol_kv_seq_deinit(s->kv, &x->seq);
    free(x->tokens);
    free(x->hist_text);
    if (x->msgs) json_decref(x->msgs);
    free(x);
}

void smol_sessions_deinit(struct smol_sessions *s)
{
    while (s->head) smol_sessions_remove(s, s->head);
}

struct smol_session *smol_sessions_find(struct smol_sessions *s, const char *tenant, const char *id)
{
    for (struct smol_session *x = s->head; x; x = x->next)
        if (x->id[0] && !strcmp(x->id, id) && !strcmp(x->tenant, tenant)) return x;
    return NULL;
}

int smol_sessions_count(const struct smol_sessions *s, const char *tenant)
{
    int n = 0;
    for (const struct smol_session *x = s->head; x; x = x->next) n += x->id[0] && !strcmp(x->tenant, tenant);
    return n;
}

/* The least recently used idle named session of tenant (NULL: any tenant's), or NULL. */
static struct smol_session *lru_idle(struct smol_sessions *s, const char *tenant)
{
    for (struct smol_session *x = s->tail; x; x = x->prev)
        if (x->id[0] && !x->busy && (!tenant || !strcmp(x->tenant, tenant))) return x;
    return NULL;
}

/* make_room's count of one tenant: its slot in tb (cap slots, more than
 * there are tenants), found or taken (FNV-1a, linear probing). */
struct tally {
    const char *tenant;         /* NULL: a free slot */
    int n;
};

static struct tally *tally_slot(struct tally *tb, size_t cap, const char *tenant)
{
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)tenant; *p; p++) h = (h ^ *p) * 1099511628211ull;
    for (size_t i = h % cap;; i = (i + 1) % cap)
        if (!tb[i].tenant || !strcmp(tb[i].tenant, tenant)) {
            tb[i].tenant = tenant;
            return &tb[i];
        }
}

int smol_sessions_make_room(struct smol_sessions *s, const char *tenant, int max_named, int max_per_tenant)
{
    struct smol_session *x;
    if (max_per_tenant > 0 && smol_sessions_count(s, tenant) >= max_per_tenant) {
        if (!(x = lru_idle(s, tenant))) return -1;
        smol_sessions_evict(s, x);
        s->n_evicted_tenant_cap++;
    }
    if (s->n_named < max_named) return 0;
    /* the table is full: the tenant holding the most sessions gives up its
     * least recently used idle one (the oldest wins a tie); tenants counted
     * in one pass (an open-addressed table of 2 x n slots), not n passes */
    const size_t cap = 2 * (size_t)s->n_named + 2;
    struct tally *tb = calloc(cap, sizeof *tb);
    struct smol_session *victim = NULL;
    if (!tb) {      /* out of memory: the least recently used idle session */
        victim = lru_idle(s, NULL);
    } else {
        for (x = s->head; x; x = x->next)
            if (x->id[0]) tally_slot(tb, cap, x->tenant)->n++;
        int most = 0;
        for (x = s->tail; x; x = x->prev) {
            if (!x->id[0] || x->busy) continue;
            const int n = tally_slot(tb, cap, x->tenant)->n;
            if (n > most) { most = n; victim = x; }
        }
        free(tb);
    }
    if (victim) smol_sessions_evict(s, victim);
    return s->n_named < max_named ? 0 : -1;
}

void smol_session_changed(struct smol_session *x)
{
    /* one counter for the process (several engines may run, in tests): a
     * session freed and another allocated at its address never match */
    static atomic_uint_fast64_t last;
    x->stamp = atomic_fetch_add_explicit(&last, 1, memory_order_relaxed) + 1;
}

struct smol_session *smol_sessions_add(struct smol_sessions *s, const char *tenant, const char *id)
{
    struct smol_session *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    snprintf(x->tenant, sizeof x->tenant, "%s", tenant);
    snprintf(x->id, sizeof x->id, "%s", id);
    smol_kv_seq_init(&x->seq);
    smol_session_changed(x);
    push_head(s, x);
    if (id[0]) s->n_named++; else s->n_anon++;
    return x;
}

void smol_sessions_touch(struct smol_sessions *s, struct smol_session *x, double now)
{
    x->last_used = now;
    unlink_lru(s, x);
    push_head(s, x);
}

/* ---- the spill directory ------------------------------------------------------- */

/* x as the spill's neutral record (borrowing x's storage). */
static struct smol_spill_record record_of(struct smol_session *x)
{
    struct smol_spill_record rec = {.seq = &x->seq, .tokens = x->tokens, .n_tokens = x->n_tokens,
                                    .hist_text = x->hist_text, .hist_len = x->hist_len, .msgs = x->msgs,
                                    .think_set = x->think_set, .enable_thinking = x->enable_thinking};
    snprintf(rec.tenant, sizeof rec.tenant, "%s", x->tenant);
    snprintf(rec.id, sizeof rec.id, "%s", x->id);
    snprintf(rec.date, sizeof rec.date, "%s", x->date);
    return rec;
}

/* x takes the history of a record read back (rec is left empty). */
static void take_record(struct smol_session *x, struct smol_spill_record *rec)
{
    free(x->tokens);
    x->tokens = rec->tokens;
    x->n_tokens = x->cap = rec->n_tokens;
    free(x->hist_text);
    x->hist_text = rec->hist_text;
    x->hist_len = rec->hist_len;
    if (x->msgs) json_decref(x->msgs);
    x->msgs = rec->msgs;
    snprintf(x->date, sizeof x->date, "%s", rec->date);
    x->think_set = rec->think_set;
    x->enable_thinking = rec->enable_thinking;
    *rec = (struct smol_spill_record){0};
    smol_session_changed(x);
}

/* Returns 0, or -1 when the session's lease is being asked on the spill's
 * lease thread (can_wait: written later; nothing done). */
static int spill(struct smol_sessions *s, struct smol_session *x, int can_wait)
{
    char err[SMOL_ERRLEN], key[SMOL_SPILL_KEY_MAX + 1];
    const struct smol_spill_record rec = record_of(x);
    /* a shared directory: a named session is written under its lease; one
     * this node does not hold (another node's now), or whose file another
     * node wrote since (this copy is stale), is not written (nor tried
     * again until it changes).  Its lease is asked on the lease thread
     * when the write can wait (spill_one); an eviction's or a drain's,
     * which cannot (a session whose write-through failed: rare), is queued
     * whole with a job that takes the lease on the writer thread, and
     * dropped there if it finds the file changed or held (the session
     * leaves memory at once either way: the job holds its record) */
    const int no_lease = x->id[0] && !x->leased && smol_spill_shared(s->spill);
    const int take = no_lease && can_wait, unleased = no_lease && !can_wait;
    if (take) {
        smol_spill_key(x->tenant, x->id, key);
        const int lr = smol_spill_lease_async(s->spill, key);
        if (lr == SMOL_LEASE_PENDING) return -1;
        if (lr == SMOL_LEASE_CHANGED) {
            smol_log_info("spill: session '%s' not written: another node wrote it since", key);
            smol_spill_unlease(s->spill, key);
        }
        if (lr != SMOL_LEASE_HELD) {
            x->on_disk = 1;
            return 0;
        }
    }
    /* on_disk once queued (the spill retries a write that fails until it is
     * on disk); a save refused here is tried again after a backoff */
    if (unleased ? smol_spill_save_unleased(s->spill, s->kv, &rec, err) : smol_spill_save(s->spill, s->kv, &rec, err)) {
        smol_log_warn("spill: %s", err);
        double wait = s->retry_first_s > 0 ? s->retry_first_s : 1.0;
        for (int i = 0; i < x->save_failures && wait < 60; i++) wait *= 2;
        x->save_failures++;
        x->retry_at = smol_mono_s() + (wait < 60 ? wait : 60);
    } else {
        x->on_disk = 1;
        x->save_failures = 0;
    }
    if (take) smol_spill_unlease(s->spill, key); /* the write holds its own reference */
    return 0;
}

/* x's history belongs on disk: a named session, or a cached prefix long
 * enough to be worth a file (its KV tokens) */
static int wants_file(const struct smol_session *x)
{
    const int n_kv = x->seq.n_tokens < x->n_tokens ? x->seq.n_tokens : x->n_tokens;
    return !x->on_disk && (x->id[0] || n_kv >= SMOL_PREFIX_SPILL_MIN) &&
           (!x->save_failures || smol_mono_s() >= x->retry_at);
}

void smol_sessions_evict(struct smol_sessions *s, struct smol_session *x)
{
    if (s->spill && wants_file(x)) spill(s, x, 0);
    if (x->id[0]) s->n_evicted++;
    smol_sessions_remove(s, x);
}

int smol_sessions_spill_one(struct smol_sessions *s, int with_prefixes)
{
    if (!s->spill) return 0;
    for (struct smol_session *x = s->tail; x; x = x->prev)
        if (!x->busy && (x->id[0] || with_prefixes) && wants_file(x))
            /* (the idle write-behind asks for a lease on the lease thread and
             * writes on a later call; a drain, with_prefixes, cannot wait) */
            return spill(s, x, !with_prefixes) == 0;
    return 0;
}

/* Reads the file of key `id` into x (busy meanwhile), evicting idle entries while the
 * pool lacks room; removes x when that fails, or when the file is not read
 * yet (*reading = 1: its read-ahead is asked, smol_spill_load). */
static struct smol_session *load_into(struct smol_sessions *s, struct smol_session *x, const char *id, double now,
                                      int *reading)
{
    x->busy = 1; /* not evicted to make room for itself */
    char err[SMOL_ERRLEN];
    int need = 0;
    enum smol_err rc;
    struct smol_spill_record rec = {.seq = &x->seq};
    while ((rc = x->id[0] ? smol_spill_load(s->spill, s->kv, s->vocab, id, &rec, &need, err)
                          : smol_spill_load_prefix(s->spill, s->kv, s->vocab, id, &rec, &need, err)) == SMOL_EBUSY &&
           need > 0)
        if (!smol_sessions_evict_one(s, 1)) break;
    x->busy = 0;
    if (reading) *reading = rc == SMOL_EBUSY && !need;
    if (rc) {
        if (rc != SMOL_ENOSESSION && rc != SMOL_EFORMAT && !(rc == SMOL_EBUSY && !need)) smol_log_warn("spill: %s", err);
        smol_sessions_remove(s, x);
        return NULL;
    }
    take_record(x, &rec);
    x->on_disk = 1;
    x->restored_kv = x->seq.n_tokens;
    x->last_used = now;
    return x;
}

struct smol_session *smol_sessions_restore(struct smol_sessions *s, const char *tenant, const char *id,
                                           int max_named, int max_per_tenant, double now, int *reading)
{
    char key[SMOL_SPILL_KEY_MAX + 1];
    smol_spill_key(tenant, id, key);
    if (reading) *reading = 0;
    if (!s->spill || !smol_spill_has(s->spill, key)) return NULL;
    if (smol_sessions_make_room(s, tenant, max_named, max_per_tenant)) return NULL;
    struct smol_session *x = smol_sessions_add(s, tenant, id);
    return x ? load_into(s, x, key, now, reading) : NULL;
}

struct smol_session *smol_sessions_restore_prefix(struct smol_sessions *s, const char *tenant, const char *key,
                                                  double now, int *reading)
{
    if (reading) *reading = 0;
    if (!s->spill) return NULL;
    struct smol_session *x = smol_sessions_add(s, tenant, "");
    return x ? load_into(s, x, key, now, reading) : NULL;
}

int smol_sessions_prefetch(struct smol_sessions *s, const char *tenant, const char *id)
{
    char key[SMOL_SPILL_KEY_MAX + 1];
    smol_spill_key(tenant, id, key);
    return !s->spill || smol_spill_prefetch(s->spill, key);
}

int smol_sessions_read_prefix(struct smol_sessions *s, const char *tenant, const int32_t *ids, int n, int have,
                              double now)
{
    if (!s->spill) return 1;
    char pid[SMOL_SPILL_KEY_MAX + 1];
    const int on_disk = smol_spill_best_prefix(s->spill, tenant, ids, n, pid);
    /* (the last prompt token is always computed: it counts in neither) */
    if ((on_disk < n - 1 ? on_disk : n - 1) < (have < n - 1 ? have : n - 1) + SMOL_KV_PAGE) return 1;
    if (!smol_spill_prefetch(s->spill, pid)) return 0;
    int reading = 0;
    smol_sessions_restore_prefix(s, tenant, pid, now, &reading);
    return !reading;
}

int smol_sessions_has_file(const struct smol_sessions *s, const char *tenant, const char *id)
{
    char key[SMOL_SPILL_KEY_MAX + 1];
    smol_spill_key(tenant, id, key);
    return s->spill && smol_spill_has(s->spill, key);
}

void smol_sessions_remove_file(struct smol_sessions *s, const char *tenant, const char *id)
{
    char key[SMOL_SPILL_KEY_MAX + 1];
    smol_spill_key(tenant, id, key);
    if (s->spill) smol_spill_remove(s->spill, key);
}

uint64_t smol_sessions_remove_file_report(struct smol_sessions *s, const char *tenant, const char *id)
{
    char key[SMOL_SPILL_KEY_MAX + 1];
    smol_spill_key(tenant, id, key);
    return s->spill ? smol_spill_remove_report(s->spill, key) : 0;
}

int smol_sessions_removal_done(struct smol_sessions *s, uint64_t ticket)
{
    return s->spill ? smol_spill_removal_done(s->spill, ticket) : 0;
}

void smol_sessions_sweep_files(struct smol_sessions *s, double ttl_s)
{
    if (s->spill) smol_spill_sweep(s->spill, ttl_s);
}

int smol_sessions_shared(const struct smol_sessions *s)
{
    return s->spill && smol_spill_shared(s->spill);
}

static int lease(struct smol_sessions *s, const char *tenant, const char *id, int async)
{
    char key[SMOL_SPILL_KEY_MAX + 1];
    smol_spill_key(tenant, id, key);
    const int lr = async ? smol_spill_lease_async(s->spill, key) : smol_spill_lease(s->spill, key);
    struct smol_session *x = lr == SMOL_LEASE_CHANGED ? smol_sessions_find(s, tenant, id) : NULL;
    /* (busy or leased, it would hold the lease: HELD) */
    if (x && !x->busy && !x->leased) {
        smol_log_info("spill: session '%s': another node wrote it since; its copy in memory is dropped", key);
        s->n_stale_dropped++;
        smol_sessions_remove(s, x);
    }
    return lr;
}

int smol_sessions_lease(struct smol_sessions *s, const char *tenant, const char *id)
{
    return lease(s, tenant, id, 0);
}

int smol_sessions_lease_async(struct smol_sessions *s, const char *tenant, const char *id)
{
    return lease(s, tenant, id, 1);
}

void smol_sessions_unlease(struct smol_sessions *s, const char *tenant, const char *id)
{
    char key[SMOL_SPILL_KEY_MAX + 1];
    smol_spill_key(tenant, id, key);
    smol_spill_unlease(s->spill, key);
}

void smol_sessions_attach_lease(struct smol_sessions *s, struct smol_session *x)
{
    if (x->leased) {
        char key[SMOL_SPILL_KEY_MAX + 1];
        smol_spill_key(x->tenant, x->id, key);
        smol_spill_unlease(s->spill, key);
        return;
    }
    x->leased = 1;
    s->n_leased++;
}

int smol_sessions_settle(struct smol_sessions *s)
{
    int n = 0;
    for (struct smol_session *x = s->head, *nx; x && s->n_leased; x = nx) {
        nx = x->next;
        if (!x->leased || x->busy) continue;
        if (wants_file(x)) spill(s, x, 0);  /* written through, under the lease (held: no ask) */
        unlease(s, x);
        n++;
    }
    return n;
}

int smol_sessions_disk_stats(struct smol_sessions *s, struct smol_spill_stats *st)
{
    if (!s->spill) return 0;
    smol_spill_get_stats(s->spill, st);
    return 1;
}

/* ---- eviction -------------------------------------------------------------------- */

int smol_sessions_evict_one(struct smol_sessions *s, int prefer_anon)
{
    for (int pass = prefer_anon ? 0 : 1; pass < 2; pass++)
        for (struct smol_session *x = s->tail; x; x = x->prev)
            if (!x->busy && (pass == 1 || !x->id[0])) {
                smol_sessions_evict(s, x);
                return 1;
            }
    return 0;
}

int smol_sessions_expire(struct smol_sessions *s, double now, double ttl)
{
    int n = 0;
    for (struct smol_session *x = s->tail, *p; x; x = p) {
        p = x->prev;
        if (!x->busy && now - x->last_used > ttl) {
            /* the conversation is over: its file goes too, unless
             * another node wrote it since (it goes on there) */
            if (x->id[0] && s->spill) {
                char key[SMOL_SPILL_KEY_MAX + 1];
                smol_spill_key(x->tenant, x->id, key);
                if (x->leased) unlease(s, x); /* (its own reference would read as the file being ours) */
                smol_spill_expire(s->spill, key);
            }
            smol_sessions_remove(s, x);
            n++;
        }
    }
    return n;
}

struct smol_session *smol_sessions_best_prefix(struct smol_sessions *s, const char *tenant, const int32_t *ids, int n,
                                               int *lcp)
{
    struct smol_session *best = NULL;
    int best_len = 0;
    for (struct smol_session *x = s->head; x; x = x->next) {
        if (x->busy || strcmp(x->tenant, tenant)) continue;
        int l = smol_lcp(x->tokens, x->seq.n_tokens < x->n_tokens ? x->seq.n_tokens : x->n_tokens, ids, n);
        if (l > best_len) { best_len = l; best = x; }
    }
    *lcp = best_len;
    return best;
}

int smol_session_set_tokens(struct smol_session *x, const int32_t *ids, int n)
{
    if (n > x->cap) {
        int cap = n + 256;
        int32_t *t = realloc(x->tokens, (size_t)cap * sizeof *t);
        if (!t) return -1;
        x->tokens = t;
        x->cap = cap;
    }
    if (n) memmove(x->tokens, ids, (size_t)n * sizeof *ids);
    x->n_tokens = n;
    x->on_disk = 0;
    smol_session_changed(x);
    return 0;
}

int smol_session_set_text(struct smol_session *x, const char *text, size_t len)
{
    char *t = NULL;
    if (text) {
        if (!(t = malloc(len + 1))) return -1;
        memcpy(t, text, len);
        t[len] = 0;
    }
    free(x->hist_text);
    x->hist_text = t;
    x->hist_len = text ? len : 0;
    smol_session_changed(x);
    return 0;
}

/* ---- the conversation ------------------------------------------------------------ */

int smol_session_record_turn(struct smol_session *x, enum smol_chat_tpl tpl, const struct smol_request *r,
                             const char *content, size_t content_len, json_t *tool_calls)
{
    int bad = 0;
    struct smol_chat_request cr = r->chat;
    struct smol_chat_msg *msgs = calloc(cr.n_msgs + 1, sizeof *msgs);
    if (!msgs) return -1;
    memcpy(msgs, cr.msgs, cr.n_msgs * sizeof *msgs);
    struct smol_chat_buf text;     /* the answer's content, NUL-terminated */
    smol_chat_buf_init(&text);
    if (smol_chat_buf_append(&text, content ? content : "", content_len)) bad = 1;
    const char *answer = text.data ? text.data : "";
    msgs[cr.n_msgs] = (struct smol_chat_msg){.role = SMOL_CHAT_ASSISTANT, .content = answer, .tool_calls = tool_calls};
    cr.msgs = msgs;
    cr.n_msgs++;
    cr.add_generation_prompt = 0;
    cr.msgs_owned = 0;
    if (r->think_set) cr.enable_thinking = r->enable_thinking;
    cr.date = x->date;
    struct smol_chat_buf txt;
    smol_chat_buf_init(&txt);
    if (smol_chat_render(tpl, &cr, &txt, NULL, NULL) == SMOL_OK) smol_session_set_text(x, txt.data, txt.len);
    /* and as messages, for clients that send only the new turn */
    json_t *all = json_deep_copy(json_object_get(r->chat_body, "messages"));
    json_t *am = json_pack("{s:s,s:s%}", "role", "assistant", "content", answer, text.len);
    if (am && tool_calls) json_object_set(am, "tool_calls", tool_calls);
    if (all && am && !json_array_append_new(all, am)) {
        if (x->msgs) json_decref(x->msgs);
        x->msgs = all;
        smol_session_changed(x);
    } else {
        if (!all) json_decref(am);  /* else append_new consumed it */
        json_decref(all);
        bad = 1;
    }
    smol_chat_buf_deinit(&txt);
    smol_chat_buf_deinit(&text);
    free(msgs);
    return bad ? -1 : 0;
}

void smol_sessions_forget(struct smol_sessions *s, struct smol_session *x)
{
    smol_kv_seq_truncate(s->kv, &x->seq, 0);
    x->n_tokens = 0;
    x->on_disk = 0;     /* its file (if any) is rewritten empty: removed */
    smol_session_set_text(x, NULL, 0);
    if (x->msgs) json_decref(x->msgs);
    x->msgs = NULL;
    smol_session_changed(x);
}
