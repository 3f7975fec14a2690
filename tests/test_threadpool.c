/* test_threadpool.c - the pool runs every task of every run exactly once,
 * with that run's function and argument, on threads numbered below the
 * pool's size; and a run does not wait for a worker that is not running
 * (descheduled on a busy machine: here held in a signal handler). */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "daemon/model/threadpool.h"

#define MAX_TASKS 97

struct run_arg {
    int n_threads;
    atomic_int count[MAX_TASKS];
    atomic_int calls;
    atomic_int bad_thread;
    atomic_int by_thread[8];
};

static void count_task(void *a, int task, int thread)
{
    struct run_arg *r = a;
    if (thread < 0 || thread >= r->n_threads) atomic_fetch_add(&r->bad_thread, 1);
    else atomic_fetch_add(&r->by_thread[thread], 1);
    if (task >= 0 && task < MAX_TASKS) atomic_fetch_add(&r->count[task], 1);
    atomic_fetch_add(&r->calls, 1);
}

static void check_run(struct smol_pool *p, smol_task_fn fn, struct run_arg *r, int n_threads, int n)
{
    memset(r, 0, sizeof *r);
    r->n_threads = n_threads;
    smol_pool_run(p, n, fn, r);
    const int calls = atomic_load(&r->calls), bad_thread = atomic_load(&r->bad_thread);
    ck_assert_int_eq(calls, n);
    ck_assert_int_eq(bad_thread, 0);
    for (int t = 0; t < n; t++) ck_assert_int_eq(atomic_load(&r->count[t]), 1);
}

START_TEST(every_task_once)
{
    char err[256];
    const int sizes[] = {1, 2, 3, 5};
    unsigned seed = 12345;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        struct smol_pool *p;
        ck_assert_msg(smol_pool_new(&p, sizes[s], err) == SMOL_OK, "%s", err);
        ck_assert_int_eq(smol_pool_threads(p), sizes[s]);
        /* two argument blocks in turn: a task of one run called after that
         * run returned (a late worker with the old run's argument) would
         * show as a call too many in its block */
        static struct run_arg ra[2];
        int n_prev = 0;
        for (int i = 0; i < 4000; i++) {
            seed = seed * 1103515245u + 12345u;
            const int n = 1 + (int)((seed >> 16) % MAX_TASKS);
            check_run(p, count_task, &ra[i & 1], sizes[s], n);
            const int prev_calls = atomic_load(&ra[!(i & 1)].calls);
            if (i) ck_assert_int_eq(prev_calls, n_prev);
            n_prev = n;
        }
        smol_pool_run(p, 0, count_task, NULL); /* no task: nothing is called */
        smol_pool_free(&p);
        ck_assert_ptr_null(p);
    }
}
END_TEST

static void busy_us(long us)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < us * 1000);
}

static void slow_task(void *a, int task, int thread)
{
    busy_us(20);
    count_task(a, task, thread);
}

START_TEST(threads_share_work)
{
    char err[256];
    struct smol_pool *p;
    ck_assert_msg(smol_pool_new(&p, 2, err) == SMOL_OK, "%s", err);
    static struct run_arg r;
    int worker_ran = 0;
    /* the worker takes part: runs of 64 tasks of 20 us each, it takes some */
    for (int i = 0; i < 200 && !worker_ran; i++) {
        check_run(p, slow_task, &r, 2, 64);
        worker_ran = atomic_load(&r.by_thread[1]) > 0;
    }
    ck_assert_msg(worker_ran, "thread 1 never ran a task");
    smol_pool_free(&p);
}
END_TEST

/* ---- a worker held off the CPU ------------------------------------------------- */

static atomic_int held, release_held;
static pthread_t worker_tid;
static atomic_int worker_seen;

static void hold_handler(int sig)
{
    (void)sig;
    atomic_store(&held, 1);
    struct timespec ts = {0, 1000000};
    while (!atomic_load(&release_held)) nanosleep(&ts, NULL);
    atomic_store(&held, 0);
}

static void find_worker(void *a, int task, int thread)
{
    (void)a, (void)task;
    busy_us(20);
    if (thread == 1 && !atomic_load(&worker_seen)) {
        worker_tid = pthread_self();
        atomic_store(&worker_seen, 1);
    }
}

START_TEST(run_does_not_wait_for_absent_worker)
{
    char err[256];
    struct smol_pool *p;
    ck_assert_msg(smol_pool_new(&p, 2, err) == SMOL_OK, "%s", err);
    for (int i = 0; i < 200 && !atomic_load(&worker_seen); i++) smol_pool_run(p, 64, find_worker, NULL);
    ck_assert_msg(atomic_load(&worker_seen), "thread 1 never ran a task");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = hold_handler;
    sigemptyset(&sa.sa_mask);
    ck_assert_int_eq(sigaction(SIGUSR1, &sa, NULL), 0);
    /* between runs the worker holds no task; stop it there */
    ck_assert_int_eq(pthread_kill(worker_tid, SIGUSR1), 0);
    struct timespec ts = {0, 1000000};
    while (!atomic_load(&held)) nanosleep(&ts, NULL);
    /* the caller alone does every task of every run (before, it waited for
     * each worker to check in: this hung until the test's timeout) */
    static struct run_arg r;
    for (int i = 0; i < 200; i++) {
        check_run(p, count_task, &r, 2, 1 + i % MAX_TASKS);
        ck_assert_int_eq(atomic_load(&r.by_thread[1]), 0);
    }
    atomic_store(&release_held, 1);
    while (atomic_load(&held)) nanosleep(&ts, NULL);
    for (int i = 0; i < 200; i++) check_run(p, count_task, &r, 2, 1 + i % MAX_TASKS); /* and it is back */
    smol_pool_free(&p);
}
END_TEST

START_TEST(bad_sizes)
{
    char err[256];
    struct smol_pool *p = (struct smol_pool *)1;
    ck_assert_int_eq(smol_pool_new(&p, 257, err), SMOL_EINVAL);
    ck_assert_ptr_null(p);
    ck_assert(strstr(err, "too many"));
    ck_assert_int_eq(smol_pool_new(&p, 0, err), SMOL_OK); /* 0: one per online CPU */
    ck_assert_int_ge(smol_pool_threads(p), 1);
    smol_pool_free(&p);
    smol_pool_free(&p); /* freeing NULL is a no-op */
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("threadpool");
    TCase *tc = tcase_create("threadpool");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, every_task_once);
    tcase_add_test(tc, threads_share_work);
    tcase_add_test(tc, bad_sizes);
    suite_add_tcase(s, tc);
    TCase *tc_held = tcase_create("held worker"); /* the old pool hung here: fail in seconds, not a minute */
    tcase_set_timeout(tc_held, 15);
    tcase_add_test(tc_held, run_does_not_wait_for_absent_worker);
    suite_add_tcase(s, tc_held);
    return s;
}
