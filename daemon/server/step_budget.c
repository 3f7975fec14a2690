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

int smol_step_budget_chunk(const struct smol_step_budget *b, int n_rows, int cap)
{
    if (cap < 0) cap = 0;
    const int lo = b->min_chunk < cap ? b->min_chunk : cap;
    if (b->budget_ms <= 0 || n_rows <= 0) return cap;
    double chunk;
    if (b->tok_ms <= 0) chunk = b->first_chunk;
    else chunk = (b->budget_ms - b->row_ms * n_rows) / b->tok_ms;
    if (chunk < lo) return lo;
    if (chunk > cap) return cap;
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
