/*
 * engine_fair.c - fair shares between tenants (API keys) and service
 * tiers: who is admitted next, who gives up a batch slot, whose KV goes
 * under pressure.
 *
 * First come first served let one key that keeps 32 long generations open
 * make another key's one-line question wait a minute (issue 47).  Here:
 *   - order: class first (priority, default, flex), then the tenant least
 *     served (weighted fair queueing over tokens: each tenant's virtual
 *     time is the tokens scheduled for it, a tenant back from idle starts
 *     at the least active one's, so idle time is not banked), then arrival;
 *   - preemption: a request that finds every slot taken takes one from a
 *     flex request (any tenant) or, when its own tenant holds less than its
 *     share (max_running / tenants wanting slots), from the tenant holding
 *     the most above its share.  The victim keeps its KV and stays on the
 *     running list without rows; it is resumed, in the same order, when a
 *     slot is free.  Never failed: its stream only pauses;
 *   - KV pressure evicts from the tenant holding the most pages.
 * Counts are recounted from the queue and the running list at each
 * admission (the lists are the truth; finish, reject and fail paths need
 * no bookkeeping here).
 */
#include "daemon/server/engine_internal.h"
#include "daemon/model/model.h"

#include <stdlib.h>
#include <string.h>

enum smol_err smol_engine_fair_init(struct smol_engine *e, char *err)
{
    e->tenants = calloc(SMOL_MAX_TENANT_ACCTS, sizeof *e->tenants);
    if (!e->tenants) return smol_errf(err, SMOL_ENOMEM, "engine: out of memory");
    return SMOL_OK;
}

void smol_engine_fair_deinit(struct smol_engine *e)
{
    free(e->tenants);
    e->tenants = NULL;
}

static int active(const struct smol_tenant_acct *a)
{
    return a->queued + a->running + a->preempted > 0;
}

/* The least virtual time among tenants with requests (but `except`); -1: none. */
static double min_active_vt(const struct smol_engine *e, const struct smol_tenant_acct *except)
{
    double m = -1;
    for (int i = 0; i < e->n_tenants; i++) {
        const struct smol_tenant_acct *a = &e->tenants[i];
        if (a != except && a->used && active(a) && (m < 0 || a->vt < m)) m = a->vt;
    }
    return m;
}

/* tenant's account, made (or an idle one reused) when new; when the table
 * is full of active tenants, the last entry is shared by the newcomers. */
static struct smol_tenant_acct *account(struct smol_engine *e, const char *tenant)
{
    struct smol_tenant_acct *spare = NULL;
    for (int i = 0; i < e->n_tenants; i++) {
        struct smol_tenant_acct *a = &e->tenants[i];
        if (!strcmp(a->name, tenant)) return a;
        if (!spare && !active(a)) spare = a;
    }
    if (e->n_tenants < SMOL_MAX_TENANT_ACCTS) spare = &e->tenants[e->n_tenants++];
    if (!spare) return &e->tenants[SMOL_MAX_TENANT_ACCTS - 1];
    memset(spare, 0, sizeof *spare);
    snprintf(spare->name, sizeof spare->name, "%s", tenant);
    spare->used = 1;
    return spare;
}

void smol_engine_fair_enqueue(struct smol_engine *e, struct req *q)
{
    struct smol_tenant_acct *a = account(e, q->r->tenant);
    if (!active(a)) {   /* back from idle: no credit for the time it was away */
        const double m = min_active_vt(e, a);
        if (m > a->vt) a->vt = m;
    }
    a->queued++;
    q->acct = a;
}

void smol_engine_fair_charge(struct req *q, int n)
{
    if (!q->acct || n <= 0) return;
    q->acct->vt += n;
    q->acct->served += (uint64_t)n;
}

/* The counts of every account, and e->n_preempted, from the lists. */
static void recount(struct smol_engine *e)
{
    for (int i = 0; i < e->n_tenants; i++) e->tenants[i].queued = e->tenants[i].running = e->tenants[i].preempted = 0;
    e->n_preempted = 0;
    for (struct req *q = e->queue; q; q = q->next) q->acct->queued++;
    for (struct req *q = e->running; q; q = q->next) {
        if (q->preempted) { q->acct->preempted++; e->n_preempted++; }
        else q->acct->running++;
    }
}

/* Lower ranks go first. */
static int class_rank(const struct req *q)
{
    switch (q->r->tier) {
    case SMOLLM3__SERVICE_TIER__SERVICE_TIER_PRIORITY: return 0;
    case SMOLLM3__SERVICE_TIER__SERVICE_TIER_FLEX: return 2;
    default: return 1;
    }
}

/* 1 when a goes before b (both waiting: queued, or preempted). */
static int before(const struct req *a, const struct req *b)
{
    if (!a->e->cfg.fair_share) return a->preempted && !b->preempted;   /* arrival order */
    if (class_rank(a) != class_rank(b)) return class_rank(a) < class_rank(b);
    if (a->acct != b->acct) return a->acct->vt < b->acct->vt;
    return a->preempted && !b->preempted;   /* its own tenant's: the one admitted before first */
}

/* 1 if a request of q's session is queued before q (q keeps its turn) */
static int queued_behind_own_session(const struct smol_engine *e, const struct req *q)
{
    if (!q->r->session[0]) return 0;
    for (const struct req *o = e->queue; o && o != q; o = o->next)
        if (!strcmp(o->r->session, q->r->session) && !strcmp(o->r->tenant, q->r->tenant)) return 1;
    return 0;
}

/* The next request to run: a preempted one (also while draining) or a
 * queued one; NULL when none waits.  A flex request waits while any other
 * does (before() orders it last). */
static struct req *next_candidate(struct smol_engine *e)
{
    struct req *best = NULL;
    for (struct req *q = e->running; q; q = q->next)
        if (q->preempted && !q->cancelled && (!best || before(q, best))) best = q;
    for (struct req *q = e->queue; q && !e->draining; q = q->next)
        if (!q->cancelled && !q->passed && !queued_behind_own_session(e, q) && (!best || before(q, best))) best = q;
    return best;
}

/* Tenants wanting batch slots (with requests running, preempted or queued). */
static int tenants_wanting(const struct smol_engine *e)
{
    int n = 0;
    for (int i = 0; i < e->n_tenants; i++) n += e->tenants[i].used && active(&e->tenants[i]);
    return n;
}

/* Whether q may be taken out of the batch: one choice, running, not ending. */
static int preemptible(const struct req *q)
{
    return !q->preempted && !q->cancelled && q->r->n_choices == 1 && (q->state == RS_PREFILL || q->state == RS_DECODE);
}

/* The request c (waiting) may take a slot from: a flex one first (c not
 * flex); else, when c's tenant holds less than its share, the latest
 * admitted of the tenant most above its share (its flex, then default,
 * then priority requests).  NULL: none, c waits. */
static struct req *victim_for(struct smol_engine *e, const struct req *c)
{
    struct req *v = NULL;
    if (!e->cfg.fair_share) return NULL;
    if (class_rank(c) < 2)
        for (struct req *q = e->running; q; q = q->next)
            if (preemptible(q) && class_rank(q) == 2) v = q;
    if (v || class_rank(c) == 2) return v;
    int share = e->cfg.max_running / tenants_wanting(e);
    if (share < 1) share = 1;
    if (c->acct->running >= share) return NULL;
    struct smol_tenant_acct *heavy = NULL;
    for (int i = 0; i < e->n_tenants; i++) {
        struct smol_tenant_acct *a = &e->tenants[i];
        if (a != c->acct && a->used && a->running > share && (!heavy || a->running > heavy->running)) heavy = a;
    }
    if (!heavy) return NULL;
    for (struct req *q = e->running; q; q = q->next)
        if (q->acct == heavy && preemptible(q) && class_rank(q) >= class_rank(c) &&
            (!v || class_rank(q) >= class_rank(v)))
            v = q;
    return v;
}

static void preempt(struct smol_engine *e, struct req *v)
{
    v->preempted = 1;
    v->n_preempt++;
    v->acct->running--;
    v->acct->preempted++;
    v->acct->preemptions++;
    e->n_preempted++;
    e->n_preemptions++;
}

static void resume(struct smol_engine *e, struct req *q)
{
    q->preempted = 0;
    q->acct->preempted--;
    q->acct->running++;
    e->n_preempted--;
}

void smol_engine_admit_fair(struct smol_engine *e, double now)
{
    recount(e);
    for (struct req *q = e->queue; q; q = q->next) q->passed = 0;
    for (;;) {
        struct req *c = next_candidate(e), *v = NULL;
        if (!c) return;
        const int need = c->preempted ? 1 : c->r->n_choices;
        if (e->n_running - e->n_preempted + need > e->cfg.max_running) {
            if (need > 1 || !(v = victim_for(e, c))) return;
            preempt(e, v);
        }
        if (c->preempted) {     /* resumed: its KV is where it was */
            resume(e, c);
            continue;
        }
        struct smol_tenant_acct *a = c->acct;
        const int rc = smol_engine_try_admit(e, c, now);  /* frees c unless admitted or waiting */
        if (rc == 0) {
            /* it waits for KV or its session's file, not for a slot: the
             * victim goes on (its preemption is not counted).  One waiting
             * for KV holds the others behind it; one waiting for its
             * session's lease or file (the spill's threads) waits alone,
             * the others admitted past it. */
            if (v) {
                resume(e, v);
                v->n_preempt--;
                v->acct->preemptions--;
                e->n_preemptions--;
            }
            if (!c->waits_alone) return;
            c->passed = 1;
            continue;
        }
        a->queued--;
        if (rc > 0) a->running += need;
    }
}

int smol_engine_evict_heaviest(struct smol_engine *e)
{
    struct smol_sessions *ss = &e->sessions;
    /* the tenants holding KV (the first SMOL_MAX_TENANT_ACCTS met; the rest
     * are not weighed), their pages, and whether one has an idle entry */
    struct { const char *name; long pages; int idle; } t[SMOL_MAX_TENANT_ACCTS];
    int nt = 0;
    for (const struct smol_session *x = ss->head; x; x = x->next) {
        int i = 0;
        while (i < nt && strcmp(t[i].name, x->tenant)) i++;
        if (i == nt) {
            if (nt == SMOL_MAX_TENANT_ACCTS) continue;
            t[nt++] = (typeof(t[0])){x->tenant, 0, 0};
        }
        t[i].pages += x->seq.n_pages;
        t[i].idle |= !x->busy;
    }
    int h = -1;
    for (int i = 0; i < nt; i++)
        if (t[i].idle && (h < 0 || t[i].pages > t[h].pages)) h = i;
    if (h >= 0)
        for (int pass = 0; pass < 2; pass++)
            for (struct smol_session *x = ss->tail; x; x = x->prev)
                if (!x->busy && !strcmp(x->tenant, t[h].name) && (pass == 1 || !x->id[0])) {
                    smol_sessions_evict(ss, x);
                    return 1;
                }
    return smol_sessions_evict_one(ss, 1);  /* a tenant past the table's first ones */
}

int smol_engine_fair_stats(struct smol_engine *e, Smollm3__TenantStats **out_v, Smollm3__TenantStats ***out_p,
                           size_t *n_out)
{
    *out_v = NULL;
    *out_p = NULL;
    *n_out = 0;
    recount(e);
    int n = 0;
    for (int i = 0; i < e->n_tenants; i++) n += e->tenants[i].used;
    if (!n) return 0;
    Smollm3__TenantStats *v = calloc((size_t)n, sizeof *v);
    Smollm3__TenantStats **p = calloc((size_t)n, sizeof *p);
    if (!v || !p) { free(v); free(p); return -1; }
    const struct smol_kv *kv = &e->m->kv;
    const uint64_t page_bytes = (uint64_t)SMOL_KV_PAGE *
                                smol_kv_bytes_per_token(kv->n_layers, kv->n_kv_heads, kv->head_dim, kv->type);
    size_t k = 0;
    for (int i = 0; i < e->n_tenants; i++) {
        const struct smol_tenant_acct *a = &e->tenants[i];
        if (!a->used) continue;
        Smollm3__TenantStats *t = &v[k];
        smollm3__tenant_stats__init(t);
        t->tenant = (char *)a->name;
        t->queued = (uint32_t)a->queued;
        t->running = (uint32_t)a->running;
        t->preempted = (uint32_t)a->preempted;
        t->preemptions_total = a->preemptions;
        t->tokens_served = a->served;
        for (const struct smol_session *x = e->sessions.head; x; x = x->next)
            if (!strcmp(x->tenant, a->name)) t->kv_bytes += (uint64_t)x->seq.n_pages * page_bytes;
        p[k++] = t;
    }
    *out_v = v;
    *out_p = p;
    *n_out = k;
    return 0;
}
