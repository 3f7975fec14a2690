/*
 * test_spec.c - speculative decoding by prompt lookup (daemon/text/spec.h):
 *   - the n-gram index drafts what a brute-force scan of the history drafts
 *     (random histories over small vocabularies, so n-grams repeat), also
 *     after truncation, and a draft filter cuts the draft;
 *   - drafting for an output that copies and edits its context
 *     (smol_lookup_draft_edit): on a "file" whose copy renames an
 *     identifier, the substitution is learned at its first occurrence and
 *     the rest of the copy drafted renamed (against the n-gram index alone);
 *     insertions and deletions resume the copy; a substitution the output
 *     stops following is forgotten; a stateful filter sees only the draft
 *     returned, in order; random histories with truncations (no crash,
 *     drafts within the vocabulary);
 *   - the draft-length controller goes to 0 on a stream that never hits
 *     and to k_max on one that always does; it learns per class of match
 *     length (a drafted token observed at the match it extends), and draft_edit's match
 *     grows as the output follows the copy and starts again after it leaves;
 *   - on fixture models: greedy decoding with drafts verified in one
 *     forward pass (KV rolled back, pages shared copy-on-write with a
 *     prefix) gives the tokens of plain decoding, and sampled 3-token
 *     continuations have the same distribution with and without drafts
 *     (two-sample chi-square, alpha = 0.001, different seeds; a rule that
 *     accepts every draft is caught), and the
 *     same tokens for the same seed.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/model/model.h"
#include "daemon/text/sampler.h"
#include "daemon/text/spec.h"
#include "testutil.h"

/* chi-square critical value at alpha = 0.001 (Wilson-Hilferty; within 1% for dof >= 3) */
static double chi2_crit001(int dof)
{
    const double z = 3.0902323, a = 2.0 / (9.0 * dof);
    double c = 1.0 - a + z * sqrt(a);
    return dof * c * c * c;
}

/* ---- the index against brute force ------------------------------------------------ */

/* Reference draft: every earlier occurrence of the last o tokens (o = 3..1),
 * the 8 most recent, ranked by how far back they match (at most 64), ties to
 * the most recent; the continuation repeats with the match's period. */
static int ref_draft(const int32_t *t, int L, int k, int32_t *out, int *order)
{
    *order = 0;
    for (int o = 3; o >= 1; o--) {
        if (L - 1 < o) continue;
        int best = -1, best_len = -1, seen = 0;
        for (int p = L - 1; p >= o && seen < 8; p--) {
            if (memcmp(t + p - o, t + L - o, o * sizeof *t)) continue;
            seen++;
            int len = 0;
            while (len < 64 && p - len - 1 >= -1 && L - len - 1 >= 0 && p - len - 1 >= 0 && t[p - len - 1] == t[L - len - 1]) len++;
            if (len > best_len) { best_len = len; best = p; }
        }
        if (best < 0) continue;
        for (int i = 0; i < k; i++) out[i] = best + i < L ? t[best + i] : out[i - (L - best)];
        *order = o;
        return k;
    }
    return 0;
}

static uint64_t rng_state = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

START_TEST(t_lookup_matches_brute_force)
{
    char err[SMOL_ERRLEN];
    const int vocabs[] = {2, 3, 5, 20, 200};
    int drafted = 0;
    for (size_t vi = 0; vi < sizeof vocabs / sizeof *vocabs; vi++) {
        struct smol_lookup *lk;
        ck_assert(smol_lookup_new(&lk, 1000, err) == SMOL_OK);
        int32_t t[600];
        for (int L = 0; L < 600; L++) {
            int32_t a[7], b[7];
            int oa, ob;
            int na = smol_lookup_draft(lk, 7, a, &oa, NULL, NULL), nb = ref_draft(t, L, 7, b, &ob);
            ck_assert_msg(na == nb && oa == ob, "V=%d L=%d: %d tokens (order %d), reference %d (order %d)", vocabs[vi], L,
                          na, oa, nb, ob);
            for (int i = 0; i < na; i++) ck_assert_msg(a[i] == b[i], "V=%d L=%d: draft[%d] %d, reference %d", vocabs[vi], L, i, a[i], b[i]);
            drafted += na;
            /* some text repeats, as output copying its context does */
            t[L] = L > 50 && rnd(3) == 0 ? t[rnd(L)] : (int32_t)rnd(vocabs[vi]);
            ck_assert(smol_lookup_append(lk, &t[L], 1, err) == SMOL_OK);
        }
        /* truncation: the index drafts as one built from the shorter history */
        for (int cut = 599; cut > 0; cut -= 37) {
            smol_lookup_truncate(lk, cut);
            ck_assert_int_eq(smol_lookup_length(lk), cut);
            int32_t a[7], b[7];
            int oa, ob;
            int na = smol_lookup_draft(lk, 7, a, &oa, NULL, NULL), nb = ref_draft(t, cut, 7, b, &ob);
            ck_assert_msg(na == nb && oa == ob && !memcmp(a, b, na * sizeof *a), "after truncation to %d", cut);
        }
        smol_lookup_free(&lk);
    }
    ck_assert(drafted > 1000);
}
END_TEST

static int refuse_token(void *ctx, const int32_t *draft, int i, int32_t tok) { return tok != *(int32_t *)ctx; }

START_TEST(t_lookup_filter_and_errors)
{
    char err[SMOL_ERRLEN];
    struct smol_lookup *lk;
    ck_assert(smol_lookup_new(&lk, 0, err) == SMOL_EINVAL);
    ck_assert(smol_lookup_new(&lk, 100, err) == SMOL_OK);
    const int32_t h[] = {1, 2, 3, 4, 5, 6, 7, 1, 2, 3};
    ck_assert(smol_lookup_append(lk, h, 10, err) == SMOL_OK);
    int32_t d[7], bad = 100;
    int order;
    ck_assert_int_eq(smol_lookup_draft(lk, 7, d, &order, NULL, NULL), 7);
    ck_assert_int_eq(order, 3);
    const int32_t want[] = {4, 5, 6, 7, 1, 2, 3};
    ck_assert(!memcmp(d, want, sizeof want));
    int32_t no = 6;
    ck_assert_int_eq(smol_lookup_draft(lk, 7, d, &order, refuse_token, &no), 2);   /* 4, 5, then 6 refused */
    ck_assert_int_eq(smol_lookup_draft(lk, 0, d, &order, NULL, NULL), 0);
    ck_assert(smol_lookup_append(lk, &bad, 1, err) == SMOL_EINVAL);
    ck_assert_int_eq(smol_lookup_length(lk), 10);
    smol_lookup_reset(lk);
    ck_assert_int_eq(smol_lookup_draft(lk, 7, d, &order, NULL, NULL), 0);
    smol_lookup_free(&lk);
    smol_lookup_free(&lk);
}
END_TEST

/* ---- drafting for an output that copies and edits ------------------------------- */

/* The output out[0, no) (as a model would give it, forced) after hist, drafts
 * of up to 7 verified against it: the verify steps taken; *acc: drafted
 * tokens accepted, *wrong: drafted tokens rejected (the first of a step). */
static int forced_steps(const int32_t *hist, int nh, const int32_t *out, int no, int edit, int *acc, int *wrong)
{
    char err[SMOL_ERRLEN];
    struct smol_lookup *lk;
    ck_assert(smol_lookup_new(&lk, 1000, err) == SMOL_OK);
    ck_assert(smol_lookup_append(lk, hist, nh, err) == SMOL_OK);
    int got = 0, steps = 0;
    *acc = *wrong = 0;
    while (got < no) {
        int32_t d[7];
        int order, nd = edit ? smol_lookup_draft_edit(lk, 7, d, &order, NULL, NULL)
                             : smol_lookup_draft(lk, 7, d, &order, NULL, NULL);
        if (nd > no - got - 1) nd = no - got - 1;
        int a = 0;
        while (a < nd && d[a] == out[got + a]) a++;
        *acc += a;
        *wrong += a < nd;
        ck_assert(smol_lookup_append(lk, out + got, a + 1, err) == SMOL_OK);
        got += a + 1;
        steps++;
    }
    smol_lookup_free(&lk);
    return steps;
}

/* A "source file" of n tokens: lines of 4-12 tokens over [10, 700) ending in
 * 1 (newline), where the identifier 900 901 occurs about every 12 tokens. */
static int make_source(int32_t *t, int n)
{
    int i = 0;
    while (i < n - 16) {
        const int len = 4 + (int)rnd(9);
        for (int j = 0; j < len; j++) {
            if (rnd(6) == 0) { t[i++] = 900; t[i++] = 901; }
            else t[i++] = 10 + (int32_t)rnd(690);
        }
        t[i++] = 1;
    }
    return i;
}

/* copies src[0, n) into out with every 900 901 written as `to` (nt tokens); returns the length */
static int rename_copy(const int32_t *src, int n, const int32_t *to, int nt, int32_t *out)
{
    int o = 0;
    for (int i = 0; i < n; i++) {
        if (i + 1 < n && src[i] == 900 && src[i + 1] == 901) {
            memcpy(out + o, to, nt * sizeof *to);
            o += nt;
            i++;
        } else {
            out[o++] = src[i];
        }
    }
    return o;
}

START_TEST(t_lookup_edit_rename)
{
    static int32_t hist[2100], out[3000];
    hist[0] = 2; hist[1] = 3; hist[2] = 4; /* an instruction, then the file */
    const int nf = make_source(hist + 3, 2000), nh = nf + 3;
    /* renamed to one token, and to three */
    const int32_t one[] = {950}, three[] = {950, 951, 952};
    for (int v = 0; v < 2; v++) {
        const int no = rename_copy(hist + 3, nf, v ? three : one, v ? 3 : 1, out);
        int acc_e, wrong_e, acc_n, wrong_n;
        const int steps_e = forced_steps(hist, nh, out, no, 1, &acc_e, &wrong_e);
        const int steps_n = forced_steps(hist, nh, out, no, 0, &acc_n, &wrong_n);
        /* learned at the first occurrence: drafts of 7 accepted all along */
        ck_assert_msg(wrong_e <= 3, "rename %d: %d drafts rejected (%d steps for %d tokens)", v, wrong_e, steps_e, no);
        ck_assert_msg(steps_e * 8 < no * 1.1 + 64, "rename %d: %d steps for %d tokens", v, steps_e, no);
        /* the n-gram index alone drafts the old name at every occurrence */
        ck_assert_msg(wrong_n > 50 && steps_n > 2 * steps_e, "rename %d: index alone %d steps, %d rejected; edit %d steps",
                      v, steps_n, wrong_n, steps_e);
    }
}
END_TEST

START_TEST(t_lookup_edit_insert_delete_forget)
{
    static int32_t hist[1100], out[1300];
    const int nh = make_source(hist, 1000);
    /* a copy with a 5-token insertion every ~100 tokens and a 3-token
     * deletion every ~100: each costs a rejection, then the copy resumes */
    int no = 0, edits = 0;
    for (int i = 0; i < nh; i++) {
        if (i % 100 == 50) { for (int j = 0; j < 5; j++) out[no++] = 800 + j; edits++; }
        if (i % 100 == 90 && i + 3 < nh) { i += 2; edits++; continue; }
        out[no++] = hist[i];
    }
    int acc, wrong, acc_n, wrong_n;
    const int steps = forced_steps(hist, nh, out, no, 1, &acc, &wrong);
    const int steps_n = forced_steps(hist, nh, out, no, 0, &acc_n, &wrong_n);
    /* the copy resumes 2 tokens after each edit; the index alone needs a
     * matching trigram and drafts from elsewhere meanwhile */
    ck_assert_msg(wrong <= 2 * edits && wrong < wrong_n && acc > no * 3 / 4,
                  "insert/delete (%d edits): %d rejected, %d of %d accepted, %d steps; index alone %d rejected, %d steps",
                  edits, wrong, acc, no, steps, wrong_n, steps_n);
    /* a rename followed twice, then dropped: the copy writes 900 901 again */
    {
        char err[SMOL_ERRLEN];
        const int32_t src[] = {5, 6, 900, 901, 7, 8, 9, 10, 11, 900, 901, 12, 13, 14, 15, 16, 900, 901, 17, 18, 19,
                               20, 21, 900, 901, 22, 23, 24, 25, 26, 27};
        const int ns = sizeof src / sizeof *src;
        /* 1st and 2nd occurrences renamed to 950, the 3rd and 4th kept */
        int32_t o[64];
        int n = 0, occ = 0;
        for (int i = 0; i < ns; i++) {
            if (src[i] == 900) {
                if (occ++ < 2) { o[n++] = 950; i++; continue; }
            }
            o[n++] = src[i];
        }
        struct smol_lookup *lk;
        ck_assert(smol_lookup_new(&lk, 1000, err) == SMOL_OK);
        ck_assert(smol_lookup_append(lk, src, ns, err) == SMOL_OK);
        int32_t d[7];
        int order, at4 = -1, at3 = -1;
        occ = 0;
        for (int i = 0; i < n; i++) {
            int nd = smol_lookup_draft_edit(lk, 7, d, &order, NULL, NULL);
            if (o[i] == 900 && ++occ == 2) at4 = nd ? d[0] : -1; /* the 4th source occurrence (2nd kept) */
            if (o[i] == 900 && occ == 1) at3 = nd ? d[0] : -1;
            ck_assert(smol_lookup_append(lk, &o[i], 1, err) == SMOL_OK);
        }
        /* at the 3rd occurrence the rename is drafted (learned at the 1st),
         * the output keeps the old name: by the 4th the rule is gone */
        ck_assert_int_eq(at3, 950);
        ck_assert_int_eq(at4, 900);
        smol_lookup_free(&lk);
    }
}
END_TEST

/* a filter with state, as a grammar's: it must see the returned draft only, in order */
struct seen_filter {
    int calls, refuse_at;
    int32_t seen[16];
};
static int seen_filter_fn(void *ctx, const int32_t *draft, int i, int32_t tok)
{
    struct seen_filter *f = ctx;
    ck_assert_int_eq(i, f->calls);
    for (int j = 0; j < i; j++) ck_assert_int_eq(draft[j], f->seen[j]);
    if (i == f->refuse_at) return 0;
    f->seen[f->calls++] = tok;
    return 1;
}

START_TEST(t_lookup_edit_filter_and_truncate)
{
    char err[SMOL_ERRLEN];
    static int32_t src[1100], out[1100];
    const int ns = make_source(src, 1000);
    const int32_t one[] = {950};
    const int no = rename_copy(src, ns, one, 1, out);
    struct smol_lookup *lk;
    ck_assert(smol_lookup_new(&lk, 1000, err) == SMOL_OK);
    ck_assert(smol_lookup_append(lk, src, ns, err) == SMOL_OK);
    int32_t d[7];
    int order, filtered = 0;
    for (int i = 0; i < no; i++) {
        struct seen_filter f = {0, (int)rnd(9), {0}};
        int nd = smol_lookup_draft_edit(lk, 7, d, &order, seen_filter_fn, &f);
        ck_assert_int_eq(nd, f.calls);
        ck_assert(nd <= f.refuse_at);
        for (int j = 0; j < nd; j++) ck_assert_int_eq(d[j], f.seen[j]);
        filtered += nd;
        ck_assert(smol_lookup_append(lk, &out[i], 1, err) == SMOL_OK);
    }
    ck_assert(filtered > 0);
    /* random histories, appends of 1-100 tokens, truncations, drafts: within the vocabulary */
    for (int round = 0; round < 2000; round++) {
        const int op = (int)rnd(10), L = smol_lookup_length(lk);
        if (op == 0 && L > 0) smol_lookup_truncate(lk, (int)rnd((uint32_t)L + 1));
        else if (op == 1) smol_lookup_reset(lk);
        else {
            int32_t add[100];
            const int na = op == 2 ? 1 + (int)rnd(100) : 1 + (int)rnd(3);
            for (int j = 0; j < na; j++) add[j] = rnd(4) == 0 && L > 0 ? src[rnd((uint32_t)ns)] : (int32_t)rnd(1000);
            ck_assert(smol_lookup_append(lk, add, na, err) == SMOL_OK);
        }
        const int nd = smol_lookup_draft_edit(lk, 1 + (int)rnd(7), d, &order, NULL, NULL);
        ck_assert(nd >= 0 && nd <= 7);
        for (int j = 0; j < nd; j++) ck_assert(d[j] >= 0 && d[j] < 1000);
    }
    smol_lookup_free(&lk);
}
END_TEST

START_TEST(t_ctl_adapts)
{
    struct smol_spec_ctl c;
    smol_spec_ctl_init(&c, 7, NULL);
    ck_assert_int_gt(smol_spec_ctl_k(&c, 3), 0);
    for (int i = 0; i < 40; i++) smol_spec_ctl_update(&c, 3, smol_spec_ctl_k(&c, 3) ? smol_spec_ctl_k(&c, 3) : 1, 0);
    ck_assert_int_eq(smol_spec_ctl_k(&c, 3), 0);                /* never hits: no drafts */
    for (int i = 0; i < 40; i++) smol_spec_ctl_shadow(&c, 3, 5, 5);
    ck_assert_int_gt(smol_spec_ctl_k(&c, 3), 0);                /* the shadow sees it hit again */
    for (int i = 0; i < 40; i++) smol_spec_ctl_update(&c, 3, 7, 7);
    ck_assert_int_eq(smol_spec_ctl_k(&c, 3), 7);
    ck_assert_int_eq(smol_spec_ctl_k(&c, 0), 0);
    /* expensive verify steps: even a perfect stream drafts fewer */
    float cost[8] = {1, 1.5f, 1.7f, 2.4f, 4.7f, 4.7f, 4.7f, 4.8f};
    smol_spec_ctl_init(&c, 7, cost);
    for (int i = 0; i < 40; i++) smol_spec_ctl_update(&c, 3, 7, 7);
    ck_assert_int_lt(smol_spec_ctl_k(&c, 3), 7);
    smol_spec_ctl_init(&c, 0, NULL);
    ck_assert_int_eq(smol_spec_ctl_k(&c, 3), 0);
}
END_TEST

/* The controller learns per class of match length: a short match that
 * never hits does not stop a long one drafting, and a drafted token is
 * observed at the match it extends. */
START_TEST(t_ctl_match_classes)
{
    struct smol_spec_ctl c;
    smol_spec_ctl_init(&c, 7, NULL);
    for (int i = 0; i < 60; i++) smol_spec_ctl_shadow(&c, 1, 5, 6);
    ck_assert_int_eq(smol_spec_ctl_k(&c, 1), 0);                /* 1-token matches miss */
    ck_assert_int_gt(smol_spec_ctl_k(&c, 20), 0);               /* a 20-token match still drafts */
    for (int i = 0; i < 60; i++) smol_spec_ctl_update(&c, 20, 7, 7);
    ck_assert_int_eq(smol_spec_ctl_k(&c, 20), 7);
    ck_assert_int_eq(smol_spec_ctl_k(&c, 1), 0);
    for (int i = 0; i < 60; i++) smol_spec_ctl_update(&c, 20, 7, 0);
    ck_assert_int_eq(smol_spec_ctl_k(&c, 20), 0);               /* long matches that start missing */

    /* drafts from 1-token matches accepted whole: matches 1..7 observed
     * hitting; then 1-token matches miss: matches of 4..7 still draft */
    smol_spec_ctl_init(&c, 7, NULL);
    for (int i = 0; i < 60; i++) smol_spec_ctl_update(&c, 1, 7, 7);
    for (int i = 0; i < 60; i++) smol_spec_ctl_shadow(&c, 1, 5, 6);
    ck_assert_int_eq(smol_spec_ctl_k(&c, 1), 0);
    ck_assert_int_eq(smol_spec_ctl_k(&c, 4), 7);

    /* before anything is seen, a longer match drafts no less */
    smol_spec_ctl_init(&c, 7, NULL);
    for (int m = 1; m < 40; m++) ck_assert_int_le(smol_spec_ctl_k(&c, m), smol_spec_ctl_k(&c, m + 1));
    ck_assert_int_eq(smol_spec_ctl_k(&c, 40), 7);
    ck_assert_int_eq(smol_spec_ctl_k(&c, 0), 0);
}
END_TEST

/* smol_lookup_draft_edit's match: grows with the tokens the output follows
 * the copy for, and starts again after the output departs from it. */
START_TEST(t_lookup_edit_match)
{
    char err[SMOL_ERRLEN];
    struct smol_lookup *lk;
    ck_assert(smol_lookup_new(&lk, 1000, err) == SMOL_OK);
    int32_t src[200];
    for (int i = 0; i < 200; i++) src[i] = 10 + i; /* every n-gram unique */
    const int32_t sep = 5;
    ck_assert(smol_lookup_append(lk, src, 200, err) == SMOL_OK);
    ck_assert(smol_lookup_append(lk, &sep, 1, err) == SMOL_OK);
    int32_t d[7];
    int match = -1;
    ck_assert_int_eq(smol_lookup_draft_edit(lk, 7, d, &match, NULL, NULL), 0);
    ck_assert_int_eq(match, 0);                                    /* nothing to draft */
    ck_assert(smol_lookup_append(lk, src + 50, 1, err) == SMOL_OK); /* the output starts quoting src[50..] */
    int prev = 0;
    for (int i = 51; i < 100; i++) {
        ck_assert_int_eq(smol_lookup_draft_edit(lk, 7, d, &match, NULL, NULL), 7);
        ck_assert_int_eq(d[0], src[i]);
        ck_assert_int_gt(match, prev);                             /* one more token followed */
        prev = match;
        ck_assert(smol_lookup_append(lk, src + i, 1, err) == SMOL_OK);
    }
    ck_assert_int_ge(prev, 40);
    const int32_t other[2] = {900, 901};                           /* new text */
    ck_assert(smol_lookup_append(lk, other, 2, err) == SMOL_OK);
    ck_assert(smol_lookup_append(lk, src + 150, 1, err) == SMOL_OK); /* another quote */
    ck_assert_int_eq(smol_lookup_draft_edit(lk, 7, d, &match, NULL, NULL), 7);
    ck_assert_int_eq(d[0], src[151]);
    ck_assert_int_le(match, 2);                                    /* evidence starts again */

    /* a copy with src[60] and src[80] renamed 950: after the rename is
     * learned, its second occurrence does not break the copy's evidence (the
     * n-gram index matches back to the rename only) */
    smol_lookup_reset(lk);
    src[80] = src[60];
    ck_assert(smol_lookup_append(lk, src, 200, err) == SMOL_OK);
    ck_assert(smol_lookup_append(lk, &sep, 1, err) == SMOL_OK);
    int32_t out[41];
    for (int i = 0; i < 41; i++) out[i] = i == 10 || i == 30 ? 950 : src[50 + i];
    ck_assert(smol_lookup_append(lk, out, 1, err) == SMOL_OK);
    for (int i = 1; i < 41; i++) {
        smol_lookup_draft_edit(lk, 7, d, &match, NULL, NULL);
        ck_assert(smol_lookup_append(lk, out + i, 1, err) == SMOL_OK);
    }
    ck_assert_int_eq(smol_lookup_draft_edit(lk, 7, d, &match, NULL, NULL), 7);
    ck_assert_int_eq(d[0], src[91]);
    ck_assert_int_ge(match, 25);                                   /* followed since the resync after out[10] */
    smol_lookup_free(&lk);
}
END_TEST

/* ---- on models --------------------------------------------------------------------- */

static struct smol_sampler *mk(struct smol_sampler_params p, int V)
{
    char err[SMOL_ERRLEN];
    struct smol_sampler *s;
    ck_assert_msg(smol_sampler_new(&s, &p, V, err) == SMOL_OK, "%s", err);
    return s;
}


struct gen {
    struct smol_model *m;
    struct smol_sampler_scratch *sc;
    float *logits;
};

static int gen_open(struct gen *g, const char *fixture)
{
    char err[SMOL_ERRLEN];
    const char *p = fixture_path(fixture);
    if (!p) return 0;
    struct smol_model_settings set;
    smol_model_settings_default(&set);
    set.n_threads = 2;
    set.quiet = 1;
    set.n_ctx = 512;
    set.kv_budget = (size_t)8 * 512 * smol_kv_bytes_per_token(1, 1, 1, 1) * 0;  /* 0: one full context */
    ck_assert_msg(smol_model_open(&g->m, p, &set, err) == SMOL_OK, "%s", err);
    ck_assert(smol_sampler_scratch_new(&g->sc, g->m->cfg.vocab, err) == SMOL_OK);
    g->logits = malloc((size_t)8 * g->m->cfg.vocab * sizeof *g->logits);
    return 1;
}

static void gen_close(struct gen *g)
{
    free(g->logits);
    smol_sampler_scratch_free(&g->sc);
    smol_model_close(&g->m);
}

/* a verification's row: plain sampling (smol_spec_sample_fn) */
struct row_ctx {
    struct smol_sampler *smp;
    struct smol_sampler_scratch *sc;
    const int32_t *wrong;           /* a wrong rule, for the test's power: every draft accepted */
};

static enum smol_err row_sample(void *ctx, int i, float *row, int32_t *tok, char *err)
{
    struct row_ctx *c = ctx;
    enum smol_err rc = smol_sampler_sample(c->smp, c->sc, row, tok, NULL, err);
    if (!rc && c->wrong && c->wrong[i] >= 0) *tok = c->wrong[i];
    return rc;
}

static int g_wrong_rule;            /* decode() verifies with the wrong rule */

/* Decodes n tokens after seq (which holds all of hist but its last token)
 * with smp: drafts of up to k (0: plain decoding, a token per step) from the
 * prompt-lookup index over hist, verified in one step each, rejected
 * positions rolled back.  Returns the number of verify steps. */
static int decode(struct gen *g, struct smol_kv_seq *seq, const int32_t *hist, int n_hist, struct smol_sampler *smp,
                  int k, int n, int32_t *out)
{
    char err[SMOL_ERRLEN];
    struct smol_lookup *lk;
    ck_assert(smol_lookup_new(&lk, g->m->cfg.vocab, err) == SMOL_OK);
    ck_assert(smol_lookup_append(lk, hist, n_hist, err) == SMOL_OK);
    int32_t last = hist[n_hist - 1];
    int got = 0, steps = 0;
    while (got < n) {
        int32_t tok[8], pos[8], idx[8], res[8];
        struct smol_kv_seq *sp[8];
        int order, nd = smol_lookup_draft_edit(lk, k < n - got - 1 ? k : n - got - 1, tok + 1, &order, NULL, NULL);
        const int p0 = seq->n_tokens;
        tok[0] = last;
        for (int i = 0; i <= nd; i++) { pos[i] = p0 + i; sp[i] = seq; idx[i] = i; }
        const struct smol_batch b = {.n_tokens = nd + 1, .tokens = tok, .pos = pos, .seq = sp, .n_out = nd + 1, .out_idx = idx};
        ck_assert_msg(smol_kv_seq_reserve(&g->m->kv, seq, p0, p0 + nd + 1, err) == SMOL_OK, "%s", err);
        ck_assert_msg(smol_model_forward(g->m, &b, g->logits, err) == SMOL_OK, "%s", err);
        int n_res, n_acc;
        int32_t wrong[8];
        for (int i = 0; i < 8; i++) wrong[i] = i < nd ? tok[1 + i] : -1;
        struct row_ctx rc = {smp, g->sc, g_wrong_rule ? wrong : NULL};
        ck_assert(smol_spec_verify(g->logits, g->m->cfg.vocab, tok + 1, nd, row_sample, &rc, res, &n_res, &n_acc, err) == SMOL_OK);
        ck_assert_int_eq(n_res, n_acc + 1);
        smol_kv_seq_truncate(&g->m->kv, seq, p0 + n_acc + 1);
        for (int i = 0; i < n_res && got < n; i++) out[got++] = res[i];
        ck_assert(smol_lookup_append(lk, res, n_res, err) == SMOL_OK);
        last = res[n_res - 1];
        steps++;
    }
    smol_lookup_free(&lk);
    return steps;
}

START_TEST(t_greedy_exact_on_models)
{
    const char *fx[] = {"models/fixture-t.Q8_0.gguf", "models/fixture-a.Q4_K_M.gguf"};
    char err[SMOL_ERRLEN];
    for (size_t f = 0; f < 2; f++) {
        struct gen g;
        if (!gen_open(&g, fx[f])) { printf("SKIPPED: %s not found\n", fx[f]); continue; }
        const int V = g.m->cfg.vocab;
        enum { P = 40, G = 48 };
        /* round 0: P P (drafts of P, mostly wrong); round r: P G P with G
         * the previous round's greedy output (drafts of G, often right) */
        int32_t hist[P + G + P], prev[G];
        int accepted_total = 0, rejected_any = 0;
        struct smol_sampler_params gp = smol_sampler_defaults();
        gp.temperature = 0;
        for (int rep = 0; rep < 4; rep++) {
            int n = 0;
            for (int i = 0; i < P; i++) hist[n++] = (int32_t)((i * 131 + 7) % V);
            for (int i = 0; rep > 0 && i < G; i++) hist[n++] = prev[i];
            for (int i = 0; i < P; i++) hist[n++] = hist[i];
            struct smol_kv_seq base, a, b, c;
            smol_kv_seq_init(&base); smol_kv_seq_init(&a); smol_kv_seq_init(&b); smol_kv_seq_init(&c);
            ck_assert(smol_model_eval(g.m, &base, hist, n - 1, 0, NULL, err) == SMOL_OK);
            /* both share the prompt's pages: drafts write past them copy-on-write */
            ck_assert(smol_kv_seq_share(&g.m->kv, &a, &base, n - 1, err) == SMOL_OK);
            ck_assert(smol_kv_seq_share(&g.m->kv, &b, &base, n - 1, err) == SMOL_OK);
            struct smol_sampler *s1 = mk(gp, V), *s2 = mk(gp, V), *s3 = mk(gp, V);
            int32_t plain[G], spec[G], again[G];
            ck_assert_int_eq(decode(&g, &a, hist, n, s1, 0, G, plain), G);
            int steps = decode(&g, &b, hist, n, s2, 7, G, spec);
            for (int i = 0; i < G; i++)
                ck_assert_msg(plain[i] == spec[i], "%s round %d: token %d: %d with drafts, %d without", fx[f], rep, i,
                              spec[i], plain[i]);
            accepted_total += G - steps;
            rejected_any |= steps > 1;
            /* the shared prompt is unharmed by the drafts and their rollback */
            ck_assert(smol_kv_seq_share(&g.m->kv, &c, &base, n - 1, err) == SMOL_OK);
            decode(&g, &c, hist, n, s3, 0, G, again);
            ck_assert(!memcmp(again, plain, sizeof plain));
            memcpy(prev, plain, sizeof prev);
            smol_sampler_free(&s1); smol_sampler_free(&s2); smol_sampler_free(&s3);
            smol_kv_seq_deinit(&g.m->kv, &a); smol_kv_seq_deinit(&g.m->kv, &b); smol_kv_seq_deinit(&g.m->kv, &c);
            smol_kv_seq_deinit(&g.m->kv, &base);
        }
        printf("%s: %d of %d greedy tokens came from accepted drafts\n", fx[f], accepted_total, 4 * G);
        ck_assert_msg(accepted_total > 8 && rejected_any, "%s: drafts accepted %d times: the test exercises too little",
                      fx[f], accepted_total);
        ck_assert_int_eq(g.m->kv.n_free, g.m->kv.n_pages);     /* every page back */
        gen_close(&g);
    }
}
END_TEST

START_TEST(t_sampling_same_distribution_on_model)
{
    char err[SMOL_ERRLEN];
    struct gen g;
    if (!gen_open(&g, "models/fixture-t.Q8_0.gguf")) { printf("SKIPPED: fixture-t.Q8_0 not found\n"); return; }
    const int V = g.m->cfg.vocab;
    enum { RUNS = 3000, TOK = 3, TOPK = 4, CELLS = 64 };
    struct smol_sampler_params sp = smol_sampler_defaults();
    sp.temperature = 1.0f;
    sp.top_p = 1.0f;
    sp.top_k = TOPK;
    /* prompt P, its greedy continuation G, then P again: after the second P
     * the lookup drafts G, which the model's top-4 holds with high probability */
    int32_t hist[64];
    int n = 0;
    for (int i = 0; i < 12; i++) hist[n++] = (int32_t)((i * 977 + 3) % V);
    struct smol_sampler_params gp = smol_sampler_defaults();
    gp.temperature = 0;
    struct smol_kv_seq seq;
    smol_kv_seq_init(&seq);
    ck_assert(smol_model_eval(g.m, &seq, hist, n - 1, 0, NULL, err) == SMOL_OK);
    struct smol_sampler *s0 = mk(gp, V);
    int32_t greedy[TOK];
    decode(&g, &seq, hist, n, s0, 0, TOK, greedy);
    smol_sampler_free(&s0);
    smol_kv_seq_deinit(&g.m->kv, &seq);
    for (int i = 0; i < TOK; i++) hist[n++] = greedy[i];
    for (int i = 0; i < 12; i++) hist[n++] = hist[i];
    struct smol_kv_seq base;
    smol_kv_seq_init(&base);
    ck_assert(smol_model_eval(g.m, &base, hist, n - 1, 0, NULL, err) == SMOL_OK);

    /* the outcome (3 tokens, each among the first row's top-4 ids or
     * "other") -> a cell; the top-4 of each position differ, so cells are
     * indexed by rank in a small table built as outcomes come */
    long cnt[3][CELLS * 8] = {{0}};
    int32_t seen[CELLS * 8][TOK];
    int n_seen = 0;
    long accepted = 0, drafted_steps = 0;
    for (int mode = 0; mode < 3; mode++)     /* plain, drafts, drafts with a wrong rule */
        for (int r = 0; r < RUNS; r++) {
            g_wrong_rule = mode == 2;
            struct smol_kv_seq s;
            smol_kv_seq_init(&s);
            ck_assert(smol_kv_seq_share(&g.m->kv, &s, &base, n - 1, err) == SMOL_OK);
            sp.seed = (uint64_t)r * 2 + mode;
            struct smol_sampler *smp = mk(sp, V);
            int32_t out[TOK];
            int steps = decode(&g, &s, hist, n, smp, mode ? 7 : 0, TOK, out);
            if (mode == 1) { accepted += TOK - steps; drafted_steps++; }
            int c = 0;
            while (c < n_seen && memcmp(seen[c], out, sizeof out)) c++;
            if (c == n_seen) { ck_assert(n_seen < CELLS * 8); memcpy(seen[n_seen++], out, sizeof out); }
            cnt[mode][c]++;
            smol_sampler_free(&smp);
            smol_kv_seq_deinit(&g.m->kv, &s);
        }
    ck_assert_msg(accepted > RUNS / 10, "drafts were accepted %ld times in %d runs: the test exercises nothing", accepted, RUNS);
    g_wrong_rule = 0;
    /* two-sample chi-square over cells with enough counts (rare ones pooled) */
    for (int m = 1; m <= 2; m++) {
        double x = 0;
        int dof = -1;
        long pa = 0, pb = 0;
        for (int c = 0; c < n_seen; c++) {
            long a = cnt[0][c], b = cnt[m][c];
            if (a + b < 20) { pa += a; pb += b; continue; }
            x += (double)(a - b) * (a - b) / (a + b);
            dof++;
        }
        if (pa + pb > 0) { x += (double)(pa - pb) * (pa - pb) / (pa + pb); dof++; }
        ck_assert_int_ge(dof, 3);
        if (m == 1)
            ck_assert_msg(x < chi2_crit001(dof), "chi2 %g >= %g (dof %d): drafts change the distribution", x,
                          chi2_crit001(dof), dof);
        else
            ck_assert_msg(x > chi2_crit001(dof), "chi2 %g < %g (dof %d): the test cannot tell a wrong rule", x,
                          chi2_crit001(dof), dof);
    }
    /* and a seed gives the same tokens with and without drafts */
    for (int r = 0; r < 200; r++) {
        int32_t out[2][TOK];
        for (int mode = 0; mode < 2; mode++) {
            struct smol_kv_seq s;
            smol_kv_seq_init(&s);
            ck_assert(smol_kv_seq_share(&g.m->kv, &s, &base, n - 1, err) == SMOL_OK);
            sp.seed = 7000 + (uint64_t)r;
            struct smol_sampler *smp = mk(sp, V);
            decode(&g, &s, hist, n, smp, mode ? 7 : 0, TOK, out[mode]);
            smol_sampler_free(&smp);
            smol_kv_seq_deinit(&g.m->kv, &s);
        }
        ck_assert_msg(!memcmp(out[0], out[1], sizeof out[0]), "seed %d: drafts changed the sampled tokens", 7000 + r);
    }
    smol_kv_seq_deinit(&g.m->kv, &base);
    gen_close(&g);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("spec");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, t_lookup_matches_brute_force);
    tcase_add_test(tc, t_lookup_filter_and_errors);
    tcase_add_test(tc, t_lookup_edit_rename);
    tcase_add_test(tc, t_lookup_edit_insert_delete_forget);
    tcase_add_test(tc, t_lookup_edit_filter_and_truncate);
    tcase_add_test(tc, t_ctl_adapts);
    tcase_add_test(tc, t_ctl_match_classes);
    tcase_add_test(tc, t_lookup_edit_match);
    tcase_add_test(tc, t_greedy_exact_on_models);
    /* 9000 seeded generations: a statistical check, not a memory one; the
     * sanitizer run (SMOL_TEST_QUICK) leaves it to make test */
    if (!getenv("SMOL_TEST_QUICK")) tcase_add_test(tc, t_sampling_same_distribution_on_model);
    suite_add_tcase(s, tc);
    return s;
}
