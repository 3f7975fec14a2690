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
 * by bumping `generation`; each worker takes tasks from `next` until it is
 * exhausted and then counts itself done.
 */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
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

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

struct smol_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint generation;     /* bumped to publish a run */
    atomic_int next;            /* next task to take */
    atomic_int done_workers;    /* workers finished with the current run */
    int n_tasks;
    smol_task_fn fn;
    void *arg;
    atomic_int stop;
};

struct worker_arg { struct smol_pool *p; int id; };

static void take_tasks(struct smol_pool *p, int id)
{
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= p->n_tasks) break;
        p->fn(p->arg, t, id);
    }
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
            if (spins == 256) t0 = now_us();
            if (now_us() - t0 < SPIN_US) { sched_yield(); continue; } /* a thread waiting for a core gets it */
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        take_tasks(p, wa.id);
        atomic_fetch_add_explicit(&p->done_workers, 1, memory_order_release);
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
    p->n_tasks = n_tasks;
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->done_workers, 0, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    take_tasks(p, 0);
    /* the others finish within microseconds of us when the split is even:
     * spin a little (a sched_yield per wait cost ~3% of decode), then yield
     * so that a descheduled worker, or another thread of the process on an
     * oversubscribed machine, gets the core */
    for (int spins = 0; atomic_load_explicit(&p->done_workers, memory_order_acquire) < p->n_threads - 1; spins++)
        if (spins < WAIT_SPINS) cpu_relax();
        else sched_yield();
}
