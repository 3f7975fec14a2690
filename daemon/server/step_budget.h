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
 * advances by min_chunk tokens at least, so a new request is never starved
 * by the streams already running.  Pure: no clock, no engine, so a test
 * drives it with the timings it likes.
 */
#ifndef SMOL_STEP_BUDGET_H
#define SMOL_STEP_BUDGET_H

struct smol_step_budget {
    double budget_ms;   /* a step's target wall time, ms; 0 = off (chunks up to the cap) */
    double row_ms;      /* EWMA of ms per decode row; 0 = not measured yet */
    double tok_ms;      /* EWMA of ms per prompt token; 0 = not measured yet */
    int min_chunk;      /* prompt tokens a step takes at least when a prompt waits */
    int first_chunk;    /* the chunk while tok_ms is not measured yet (decode rows present) */
};

/* The estimator for budget_ms (0: off), nothing measured yet. */
void smol_step_budget_init(struct smol_step_budget *b, double budget_ms);
/* Prompt tokens the next step may add beside its n_rows decode rows
 * (drafts included): in [min(min_chunk, cap), cap]. */
int smol_step_budget_chunk(const struct smol_step_budget *b, int n_rows, int cap);
/* A step of n_rows decode rows and n_prompt prompt tokens took ms. */
void smol_step_budget_observe(struct smol_step_budget *b, int n_rows, int n_prompt, double ms);

#endif
