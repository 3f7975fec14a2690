/*
 * step_budget.c - prompt chunks sized to a step's time budget (see
 * step_budget.h).
 *
 * The cost model is linear: step ms = row_ms * rows + tok_ms * prompt
 * tokens.  On a CPU a decode row is mostly the weights' bandwidth shared by
 * the batch, so the model is wrong at the edges; but each estimate is
 * corrected by the very steps it sized (a step that ran long raises tok_ms,
 * the next chunk shrinks), so it settles where it is used: at the mix the
 * engine is running now.
 */
#include "daemon/server/step_budget.h"

/* Weight of a new measurement: a change of speed (another load on the
 * machine, a longer context) is followed within a few steps, one slow
 * step does not halve the next chunk. */
#define EWMA_ALPHA 0.25

void smol_step_budget_init(struct smol_step_budget *b, double budget_ms)
{
    b->budget_ms = budget_ms > 0 ? budget_ms : 0;
    b->row_ms = 0;
    b->tok_ms = 0;
    b->min_chunk = 8;
    b->first_chunk = 32;
}

static double ewma(double old, double x)
{
    return old > 0 ? old + EWMA_ALPHA * (x - old) : x;
}

/* When the budget leaves less than min_chunk prompt tokens beside the decode
 * rows, the chunk is still at least this share of the rows' own time (and
 * one token: a prompt always advances).  min_chunk alone was 8 tokens
 * whatever they cost: on a 2-core CPU a 3B's prompt token costs about what a
 * decode row does (~100 ms), so 8 of them beside 3 streams' rows made every
 * such step ~1.1 s against a 500 ms budget (bench-itl, issue 47). */
#define FLOOR_SHARE 0.25

int smol_step_budget_chunk(const struct smol_step_budget *b, int n_rows, int cap)
{
    return smol_step_budget_chunk_within(b, b->budget_ms, n_rows, cap);
}

int smol_step_budget_chunk_within(const struct smol_step_budget *b, double budget_ms, int n_rows, int cap)
{
    if (cap < 0) cap = 0;
    if (budget_ms <= 0 || n_rows <= 0) return cap;
    /* a prompt token's cost; before it is measured, a decode row's (about the
     * same on a CPU, less elsewhere: learned from the very step it sizes) */
    const double tok = b->tok_ms > 0 ? b->tok_ms : b->row_ms, rows_ms = b->row_ms * n_rows;
    double chunk, lo = b->min_chunk;
    if (tok <= 0) chunk = b->first_chunk;   /* nothing measured yet */
    else {
        chunk = (budget_ms - rows_ms) / tok;
        if (b->tok_ms <= 0 && chunk > b->first_chunk) chunk = b->first_chunk;
        const double share = FLOOR_SHARE * rows_ms / tok;
        if (share < lo) lo = share;
        if (lo < 1) lo = 1;
    }
    if (lo > cap) lo = cap;
    if (chunk < lo) chunk = lo;
    if (chunk > cap) chunk = cap;
    return (int)chunk;
}

void smol_step_budget_observe(struct smol_step_budget *b, int n_rows, int n_prompt, double ms)
{
    if (ms < 0 || n_rows + n_prompt <= 0) return;
    if (n_prompt == 0) { b->row_ms = ewma(b->row_ms, ms / n_rows); return; }
    /* what the decode rows cost by the estimate; the rest is the prompt's
     * (never below a tenth of the step's mean per token: an estimate of
     * row_ms from a faster moment must not make prompt tokens look free) */
    double rest = ms - b->row_ms * n_rows, floor = 0.1 * ms / (n_rows + n_prompt);
    double per = rest / n_prompt;
    if (b->row_ms <= 0) per = ms / (n_rows + n_prompt);
    if (per < floor) per = floor;
    b->tok_ms = ewma(b->tok_ms, per);
}
