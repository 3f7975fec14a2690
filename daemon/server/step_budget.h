/*
 * step_budget.h - how many prompt tokens a step may take so that it stays
 * within a time budget (--step-budget-ms).
 *
 * Every running stream waits for the whole step, so a step that reads 256
 * prompt tokens on a CPU (~5 s of a 3B) freezes every stream for as long.
 * The engine measures each step and keeps two online estimates (EWMA):
 * ms per decode row (from steps without prompt tokens) and ms per prompt
 * token (what the rest of a mixed step cost); the next step's prompt chunk
 * is what the budget has left after its decode rows.  A step with no decode
 * row has nobody to keep waiting and takes the whole cap; a prompt always
 * advances, so a new request is never starved by the streams already
 * running: by min_chunk tokens at least, or, where those would cost more
 * than a quarter of the decode rows' own time (a 3B on a 2-core CPU), by
 * that quarter's worth (one token at least).  Pure: no clock, no engine, so
 * a test drives it with the timings it likes.
 */
#ifndef SMOL_STEP_BUDGET_H
#define SMOL_STEP_BUDGET_H

struct smol_step_budget {
    double budget_ms;   /* a step's target wall time, ms; 0 = off (chunks up to the cap) */
    double row_ms;      /* EWMA of ms per decode row; 0 = not measured yet */
    double tok_ms;      /* EWMA of ms per prompt token; 0 = not measured yet */
    int min_chunk;      /* prompt tokens a step takes at least when a prompt waits (fewer, one at
                           least, where they cost over a quarter of the decode rows' time) */
    int first_chunk;    /* the chunk while nothing is measured yet (decode rows present); at
                           most this while only row_ms is (a prompt token priced as a row) */
};

/* Background work's share of the budget (GenerateRequest.background: a
 * gateway's warm-up): its chunks beside decode rows are sized to it. */
#define SMOL_BACKGROUND_SHARE 0.25

/* The estimator for budget_ms (0: off), nothing measured yet. */
void smol_step_budget_init(struct smol_step_budget *b, double budget_ms);
/* Prompt tokens the next step may add beside its n_rows decode rows
 * (drafts included): in [min(1, cap), cap]; min(min_chunk, cap) at least
 * where min_chunk tokens cost at most a quarter of the rows' time. */
int smol_step_budget_chunk(const struct smol_step_budget *b, int n_rows, int cap);
/* The same within budget_ms instead of b's (a share of it: background work). */
int smol_step_budget_chunk_within(const struct smol_step_budget *b, double budget_ms, int n_rows, int cap);
/* A step of n_rows decode rows and n_prompt prompt tokens took ms. */
void smol_step_budget_observe(struct smol_step_budget *b, int n_rows, int n_prompt, double ms);

#endif
