/* smelt thread pool (see threadpool.h for the contract).
 *
 * One job at a time: the caller publishes it by bumping a generation in
 * `ticket`, then every participant (the caller and the workers) claims chunk
 * indices from the same ticket with a compare-and-swap until none are left.
 * The ticket packs generation | nchunks | next index, so a worker that wakes
 * late for an old job can never claim a chunk of a newer one: its CAS fails.
 * The job fields (fn, ctx, n) are written before the ticket is published and
 * are not rewritten before every chunk of the job has finished, so a worker
 * holding a claimed chunk always reads the right ones.
 *
 * Idle workers spin briefly (back-to-back kernels are the common case) and
 * then sleep on wake_cv; the caller takes mu only when someone sleeps. The
 * caller likewise spins, then sleeps on done_cv, for the last chunk.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "threadpool.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POOL_MAX_THREADS 1024       /* fits the 16-bit chunk fields below */
#define POOL_WORKER_SPIN 2048       /* pause iterations before sleeping (~60us) */
#define POOL_CALLER_SPIN 8192       /* pause iterations before waiting on done_cv */

#define TICKET(gen, nch, idx) (((uint64_t)(gen) << 32) | ((uint64_t)(nch) << 16) | (uint64_t)(idx))
#define TICKET_GEN(t) ((uint32_t)((t) >> 32))
#define TICKET_NCH(t) ((int)(((t) >> 16) & 0xffff))
#define TICKET_IDX(t) ((int)((t) & 0xffff))

typedef struct pool {
    pthread_mutex_t call_mu;    /* serialises external callers, resizes, shutdown */
    pthread_mutex_t mu;         /* pairs with the two condition variables */
    pthread_cond_t wake_cv;     /* workers: a new generation was published */
    pthread_cond_t done_cv;     /* caller: the last chunk finished */
    pthread_t *threads;         /* nworkers of them; guarded by call_mu */
    int nworkers;
    int target;                 /* worker count asked for at the last resize */
    uint32_t gen;               /* last published generation; guarded by call_mu */
    _Atomic uint64_t ticket;    /* TICKET(gen, nchunks, next unclaimed index) */
    _Atomic int remaining;      /* chunks of the current job not yet finished */
    _Atomic int sleepers;       /* workers blocked (or about to be) on wake_cv */
    _Atomic int caller_waiting; /* the caller blocked (or about to be) on done_cv */
    _Atomic int stop;           /* workers exit at the next generation */
    _Atomic int live;           /* nworkers, readable without call_mu */
    kern_range_fn fn;           /* the current job, see the file comment */
    void *ctx;
    int64_t n;
} pool;

static pool P = {
    .call_mu = PTHREAD_MUTEX_INITIALIZER,
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .wake_cv = PTHREAD_COND_INITIALIZER,
    .done_cv = PTHREAD_COND_INITIALIZER,
};
static _Atomic int g_nthreads;              /* 0: not set yet, see want_threads */
static _Thread_local int tl_in_pool;        /* inside fn: nested calls run inline */
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* The configured thread count; before any kern_set_num_threads, the number
 * of online CPUs. */
static int want_threads(void)
{
    int n = atomic_load_explicit(&g_nthreads, memory_order_relaxed);
    if (n > 0)
        return n;
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c < 1 ? 1 : c > POOL_MAX_THREADS ? POOL_MAX_THREADS : (int)c;
}

/* Runs chunk idx of nch: [idx*n/nch, (idx+1)*n/nch) without overflow. */
static void run_chunk(int idx, int nch)
{
    int64_t base = P.n / nch, rem = P.n % nch;
    int64_t begin = idx * base + (idx < rem ? idx : rem);
    int64_t end = begin + base + (idx < rem);
    tl_in_pool = 1;
    P.fn(P.ctx, begin, end);
    tl_in_pool = 0;
    if (atomic_fetch_sub(&P.remaining, 1) == 1 && atomic_load(&P.caller_waiting)) {
        pthread_mutex_lock(&P.mu);
        pthread_cond_signal(&P.done_cv);
        pthread_mutex_unlock(&P.mu);
    }
}

/* Claims and runs chunks of generation gen until none are left. */
static void run_chunks(uint32_t gen)
{
    uint64_t t = atomic_load_explicit(&P.ticket, memory_order_acquire);
    while (TICKET_GEN(t) == gen && TICKET_IDX(t) < TICKET_NCH(t)) {
        if (atomic_compare_exchange_weak_explicit(&P.ticket, &t, t + 1,
                                                  memory_order_acq_rel,
                                                  memory_order_acquire)) {
            run_chunk(TICKET_IDX(t), TICKET_NCH(t));
            t = atomic_load_explicit(&P.ticket, memory_order_acquire);
        }
    }
}

/* Blocks until a generation other than seen is published; returns it. */
static uint32_t wait_for_job(uint32_t seen)
{
    for (int i = 0; i < POOL_WORKER_SPIN; i++) {
        uint64_t t = atomic_load_explicit(&P.ticket, memory_order_acquire);
        if (TICKET_GEN(t) != seen)
            return TICKET_GEN(t);
        cpu_relax();
    }
    pthread_mutex_lock(&P.mu);
    atomic_fetch_add(&P.sleepers, 1);
    uint32_t gen;
    while ((gen = TICKET_GEN(atomic_load(&P.ticket))) == seen)
        pthread_cond_wait(&P.wake_cv, &P.mu);
    atomic_fetch_sub(&P.sleepers, 1);
    pthread_mutex_unlock(&P.mu);
    return gen;
}

/* arg: the generation current when the worker was created. */
static void *worker_main(void *arg)
{
    uint32_t seen = (uint32_t)(uintptr_t)arg;
    for (;;) {
        seen = wait_for_job(seen);
        if (atomic_load(&P.stop))
            return NULL;
        run_chunks(seen);
    }
}

/* Publishes a new generation with nch chunks and wakes sleeping workers.
 * Caller holds call_mu. */
static void publish(int nch, int force_wake)
{
    P.gen++;
    atomic_store(&P.ticket, TICKET(P.gen, nch, 0));
    if (force_wake || atomic_load(&P.sleepers) > 0) {
        pthread_mutex_lock(&P.mu);
        pthread_cond_broadcast(&P.wake_cv);
        pthread_mutex_unlock(&P.mu);
    }
}

/* Waits until every chunk of the current job has finished. */
static void wait_done(void)
{
    for (int i = 0; i < POOL_CALLER_SPIN; i++) {
        if (atomic_load_explicit(&P.remaining, memory_order_acquire) == 0)
            return;
        cpu_relax();
    }
    pthread_mutex_lock(&P.mu);
    atomic_store(&P.caller_waiting, 1);
    while (atomic_load(&P.remaining) != 0)
        pthread_cond_wait(&P.done_cv, &P.mu);
    atomic_store(&P.caller_waiting, 0);
    pthread_mutex_unlock(&P.mu);
}

/* Joins every worker. Caller holds call_mu; no job is in flight. */
static void stop_workers(void)
{
    if (P.nworkers == 0)
        return;
    atomic_store(&P.stop, 1);
    publish(0, 1);
    for (int i = 0; i < P.nworkers; i++)
        pthread_join(P.threads[i], NULL);
    free(P.threads);
    P.threads = NULL;
    P.nworkers = 0;
    atomic_store(&P.live, 0);
    atomic_store(&P.stop, 0);
}

/* In a forked child none of the workers exist and any lock may have been
 * held by a thread that is gone: start over from the initial state. */
static void atfork_child(void)
{
    P.call_mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    P.mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    P.wake_cv = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    P.done_cv = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    free(P.threads);
    P.threads = NULL;
    P.nworkers = 0;
    P.target = 0;
    atomic_store(&P.live, 0);
    atomic_store(&P.stop, 0);
    atomic_store(&P.sleepers, 0);
    atomic_store(&P.caller_waiting, 0);
    atomic_store(&P.remaining, 0);
}

static void register_atfork(void)
{
    pthread_atfork(NULL, NULL, atfork_child);
}

/* Starts n workers with every signal blocked (signals go to the caller's
 * threads). Caller holds call_mu and P.nworkers == 0. Keeps however many
 * pthread_create managed to start; that may be none. */
static void start_workers(int n)
{
    pthread_once(&g_atfork_once, register_atfork);
    P.threads = malloc((size_t)n * sizeof *P.threads);
    if (!P.threads)
        return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    void *arg = (void *)(uintptr_t)P.gen;
    while (P.nworkers < n && pthread_create(&P.threads[P.nworkers], NULL, worker_main, arg) == 0)
        P.nworkers++;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    atomic_store(&P.live, P.nworkers);
}

/* Makes the workers match the configured thread count (minus the caller);
 * a count that could only partly be started is not retried until the
 * configuration changes. Caller holds call_mu. */
static void resize(void)
{
    int want = want_threads() - 1;
    if (want == P.target)
        return;
    stop_workers();
    if (want > 0)
        start_workers(want);
    P.target = want;
}

/* The pooled path of kern_parallel_for: n > grain >= 1, nthreads > 1. */
static void run_pooled(int64_t n, int64_t grain, kern_range_fn fn, void *ctx)
{
    pthread_mutex_lock(&P.call_mu);
    resize();
    int64_t nch = n / grain;
    if (nch > P.nworkers + 1)
        nch = P.nworkers + 1;
    if (nch <= 1) {
        pthread_mutex_unlock(&P.call_mu);
        tl_in_pool = 1;
        fn(ctx, 0, n);
        tl_in_pool = 0;
        return;
    }
    P.fn = fn;
    P.ctx = ctx;
    P.n = n;
    atomic_store_explicit(&P.remaining, (int)nch, memory_order_relaxed);
    publish((int)nch, 0);
    run_chunks(P.gen);
    wait_done();
    pthread_mutex_unlock(&P.call_mu);
}

/* ---------- the OpenMP team (torch's) ---------- */

/* When the process has libgomp loaded (torch's own copy: eager ops and
 * oneDNN run on its threads), jobs go to its team instead of smelt's
 * workers: eager ops between compiled plans (an optimizer step, autograd's
 * accumulation) leave OpenMP's threads spinning for a while, and a second
 * set of busy threads on the same cores would slow both. SMELT_OMP=0 keeps
 * smelt's own pool. A forked child never uses the team: libgomp is not
 * fork-safe (its pool's threads are gone in the child and a parallel
 * region there never ends), smelt's pool restarts itself there. */
typedef void (*gomp_parallel_fn)(void (*)(void *), void *, unsigned, unsigned);
typedef int (*omp_int_fn)(void);
static struct {
    pthread_once_t once;
    gomp_parallel_fn parallel;
    omp_int_fn thread_num, num_threads;
} G = { .once = PTHREAD_ONCE_INIT };
static _Atomic int g_forked;   /* this process is a fork of the one that loaded smelt */

static void omp_forked(void) { atomic_store(&g_forked, 1); }

__attribute__((constructor)) static void omp_atfork_init(void)
{
    pthread_atfork(NULL, NULL, omp_forked);   /* registered at load: before any fork */
}

static void omp_init_once(void)
{
    const char *e = getenv("SMELT_OMP");
    if (e && !strcmp(e, "0"))
        return;
    void *h = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!h)
        return;
    G.parallel = (gomp_parallel_fn)dlsym(h, "GOMP_parallel");
    G.thread_num = (omp_int_fn)dlsym(h, "omp_get_thread_num");
    G.num_threads = (omp_int_fn)dlsym(h, "omp_get_num_threads");
    if (!G.parallel || !G.thread_num || !G.num_threads)
        G.parallel = NULL;
}

typedef struct omp_job {
    kern_range_fn fn;
    void *ctx;
    int64_t n;
    int nch;
} omp_job;

static void omp_body(void *arg)
{
    const omp_job *j = arg;
    int t = G.thread_num(), nt = G.num_threads();
    int64_t base = j->n / j->nch, rem = j->n % j->nch;
    tl_in_pool = 1;
    for (int idx = t; idx < j->nch; idx += nt) {
        int64_t begin = idx * base + (idx < rem ? idx : rem);
        j->fn(j->ctx, begin, begin + base + (idx < rem));
    }
    tl_in_pool = 0;
}

void kern_parallel_for(int64_t n, int64_t grain, kern_range_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    int want = want_threads();
    if (tl_in_pool || n <= grain || (want == 1 && atomic_load(&P.live) == 0)) {
        int outer = tl_in_pool;
        tl_in_pool = 1;
        fn(ctx, 0, n);
        tl_in_pool = outer;
        return;
    }
    pthread_once(&G.once, omp_init_once);
    if (G.parallel && !atomic_load_explicit(&g_forked, memory_order_relaxed)) {
        int64_t nch = n / grain < want ? n / grain : want;
        if (nch > 1) {
            omp_job j = { fn, ctx, n, (int)nch };
            G.parallel(omp_body, &j, (unsigned)nch, 0);
            return;
        }
    }
    run_pooled(n, grain, fn, ctx);
}

void kern_set_num_threads(int n)
{
    if (n < 1)
        n = 1;
    if (n > POOL_MAX_THREADS)
        n = POOL_MAX_THREADS;
    atomic_store_explicit(&g_nthreads, n, memory_order_relaxed);
}

int kern_get_num_threads(void)
{
    return want_threads();
}

void kern_threadpool_shutdown(void)
{
    if (tl_in_pool)
        return;     /* a worker cannot join itself; see threadpool.h */
    pthread_mutex_lock(&P.call_mu);
    stop_workers();
    P.target = 0;
    pthread_mutex_unlock(&P.call_mu);
}
