/*
 * threadpool.h - a small fixed pool for data-parallel loops.
 *
 * smol_pool_run(pool, n_tasks, fn, arg) calls fn(arg, task, thread) for every
 * task in [0, n_tasks) across the pool's threads (the caller's thread takes
 * part as thread 0) and returns when all are done.  Tasks are handed out by
 * an atomic counter, so uneven tasks balance themselves.  No allocation per
 * run; one run at a time per pool (the engine thread owns the pool).
 */
#ifndef SMOL_THREADPOOL_H
#define SMOL_THREADPOOL_H

#include "daemon/model/error.h"

struct smol_pool;

typedef void (*smol_task_fn)(void *arg, int task, int thread);

/* n_threads >= 1 (including the caller).  0 = number of online CPUs. */
enum smol_err smol_pool_new(struct smol_pool **out, int n_threads, char *err);
void smol_pool_free(struct smol_pool **p);
int smol_pool_threads(const struct smol_pool *p);
void smol_pool_run(struct smol_pool *p, int n_tasks, smol_task_fn fn, void *arg);

#endif
