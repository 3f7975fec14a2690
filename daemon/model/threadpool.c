/*
 * threadpool.c - see threadpool.h.
 *
 * Workers sleep on a condition variable between runs, and spin 200 us
 * before sleeping: decode issues ~200 short runs per token with a few
 * microseconds of the caller's own work between them, and a futex wake-up
 * per run would cost more than the work (a worker asleep at every run made
 * decode 3-8% slower).  The spin yields the core at each look at the clock
 * (every 256 loads; free when nothing else is runnable): the RPC thread,
 * which streams tokens out and takes cancels, must not wait for a
 * scheduler tick behind two busy cores.  A run is published
 * by bumping `generation`; each thread takes tasks of that run from `next`
 * until none is left, and the run is over when all its tasks are done: the
 * caller does not wait for a worker that has not woken up (descheduled by
 * a busy machine: waiting for every worker to check in made 2-thread
 * decode 1.5x slower than 1 thread beside a niced 2-job compile).
 */
#include "daemon/model/threadpool.h"
#include "daemon/model/rules.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define SPIN_US 200           /* worker: spin this long before sleeping */
#define WAIT_SPINS 1000       /* caller: pauses before yielding (~10-40 us) */

/* a spin-wait hint: lets the sibling hyperthread run, saves power */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

struct smol_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint generation;     /* bumped to publish a run */
    /* the current run's tasks: generation << 32 | next task to take.  A
     * worker claims a task only while the run it saw is still the current
     * one, so a worker that wakes late (descheduled, on a shared or
     * oversubscribed machine) never takes a task of another run, and the
     * caller never waits for it: a run is over when its tasks are done,
     * whoever did them. */
    _Atomic uint64_t next;
    atomic_int done_tasks;      /* tasks of the current run finished */
    /* the run's parameters, written before generation is bumped: run is
     * generation << 32 | number of tasks, in one word so that a worker
     * never bounds a run's tasks by the next run's count (it would claim
     * a task past the end of an exhausted run, and that run's caller,
     * counting it done, would return while the task still ran on its
     * argument); fn and arg are read for a task claimed of a current run */
    _Atomic uint64_t run;
    _Atomic smol_task_fn fn;
    void *_Atomic arg;
    atomic_int stop;
};

struct worker_arg { struct smol_pool *p; int id; };

/* take tasks of run gen until none is left (or the run is another one) */
static void take_tasks(struct smol_pool *p, unsigned gen, int id)
{
    const uint64_t r = atomic_load_explicit(&p->run, memory_order_acquire);
    if ((unsigned)(r >> 32) != gen) return;     /* another run by now */
    const int n = (int)(uint32_t)r;
    const smol_task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
    void *const arg = atomic_load_explicit(&p->arg, memory_order_relaxed);
    int done = 0;
    uint64_t v = atomic_load_explicit(&p->next, memory_order_acquire);
    for (;;) {
        if ((unsigned)(v >> 32) != gen || (int)(uint32_t)v >= n) break;
        /* success: the run is still gen (a task of it below its own count
         * n is undone, so the next run has not begun), and fn and arg read
         * above were its own */
        if (!atomic_compare_exchange_weak_explicit(&p->next, &v, v + 1, memory_order_acq_rel, memory_order_acquire))
            continue;
        fn(arg, (int)(uint32_t)v, id);
        done++;
        v++;
    }
    if (done) atomic_fetch_add_explicit(&p->done_tasks, done, memory_order_release);
}

static void *worker(void *a)
{
    struct worker_arg wa = *(struct worker_arg *)a;
    free(a);
    struct smol_pool *p = wa.p;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        double t0 = 0;
        while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen &&
               !atomic_load(&p->stop)) {
            if (++spins % 256) continue; /* the clock every 256 loads */
            if (spins == 256) t0 = (smol_mono_ns() * 1e-3);
            if ((smol_mono_ns() * 1e-3) - t0 < SPIN_US) { sched_yield(); continue; } /* a thread waiting for a core gets it */
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        take_tasks(p, g, wa.id);
    }
}

enum smol_err smol_pool_new(struct smol_pool **out, int n_threads, char *err)
{
    *out = NULL;
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    if (n_threads > 256) return smol_errf(err, SMOL_EINVAL, "threads: %d is too many (max 256)", n_threads);
    struct smol_pool *p = calloc(1, sizeof *p);
    if (!p) return smol_errf(err, SMOL_ENOMEM, "threads: out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) { free(p); return smol_errf(err, SMOL_ENOMEM, "threads: out of memory"); }
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *wa = malloc(sizeof *wa);
        if (!wa) { p->n_threads = i; smol_pool_free(&p); return smol_errf(err, SMOL_ENOMEM, "threads: out of memory"); }
        wa->p = p;
        wa->id = i;
        if (pthread_create(&p->threads[i], NULL, worker, wa)) {
            free(wa);
            p->n_threads = i;
            smol_pool_free(&p);
            return smol_errf(err, SMOL_EINTERNAL, "threads: cannot create thread %d", i);
        }
    }
    *out = p;
    return SMOL_OK;
}

void smol_pool_free(struct smol_pool **pp)
{
    if (!pp || !*pp) return;
    struct smol_pool *p = *pp;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
    *pp = NULL;
}

int smol_pool_threads(const struct smol_pool *p) { return p->n_threads; }

void smol_pool_run(struct smol_pool *p, int n_tasks, smol_task_fn fn, void *arg)
{
    if (n_tasks <= 0) return;
    if (p->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    /* the previous run is over (all its tasks done): no worker reads these now */
    const unsigned g = atomic_load_explicit(&p->generation, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&p->done_tasks, 0, memory_order_relaxed);
    atomic_store_explicit(&p->run, (uint64_t)g << 32 | (uint32_t)n_tasks, memory_order_release);
    atomic_store_explicit(&p->next, (uint64_t)g << 32, memory_order_release);
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->generation, g, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    take_tasks(p, g, 0);
    /* the others finish within microseconds of us when the split is even:
     * spin a little (a sched_yield per wait cost ~3% of decode), then yield
     * so that a descheduled worker holding a task, or another thread of the
     * process on an oversubscribed machine, gets the core.  A worker that
     * has not woken up yet holds nothing: we have done its share. */
    for (int spins = 0; atomic_load_explicit(&p->done_tasks, memory_order_acquire) < n_tasks; spins++)
        if (spins < WAIT_SPINS) cpu_relax();
        else sched_yield();
}
