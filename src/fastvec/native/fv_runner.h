/* fv_runner.h: what fastvec's batch runner (fastvec/native/_batch.pyx) needs besides the
 * env: screens of the actions before a step, and the thread pool that steps chunks of envs.
 * Not needed to write an env.
 */
#ifndef FV_RUNNER_H
#define FV_RUNNER_H

#include <stdint.h>
#include <string.h>

/* Index of the first action outside [0, hi), else -1. For hi = 2 or 3 a
   block is first screened with integer ORs that vectorise (a valid action
   sets no bit outside `keep`; a | (a + 1) also catches 3 when hi = 3, and
   any negative sets the sign bit); only a flagged block is scanned. */
static int64_t fv_first_bad_action(const int64_t *restrict a, int64_t n, int64_t hi) {
    const uint64_t add = hi == 3, keep = hi == 2 ? 1u : 3u;
    for (int64_t b = 0; b < n; b += 4096) {
        int64_t e = b + 4096 < n ? b + 4096 : n;
        uint64_t acc = 0;
        if (hi == 2 || hi == 3)
            for (int64_t i = b; i < e; i++) acc |= (uint64_t)a[i] | ((uint64_t)a[i] + add);
        if (acc & ~keep || !(hi == 2 || hi == 3))
            for (int64_t i = b; i < e; i++)
                if (a[i] < 0 || a[i] >= hi) return i;
    }
    return -1;
}

/* Index of the first non-zero flag, else -1 (eight flags at a time). */
static int64_t fv_first_set(const uint8_t *restrict flags, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, flags + i, 8);
        if (w != 0) break;
    }
    for (; i < n; i++) if (flags[i]) return i;
    return -1;
}

/* ------------------------------------------------------------------
   A small thread pool whose caller never waits for a helper that has not
   started: the caller and the helpers take chunks from one atomic counter
   (tagged with the job's generation), and the caller only waits for chunks
   a helper has actually taken. On an oversubscribed machine (2 cores shared
   by several processes) a helper that is not scheduled in time simply gets
   no work, where a fork-join barrier (OpenMP) would stall for a time slice.
   The caller takes chunks from the front and the helpers from the back, so
   with one helper each thread steps about the same envs every call and
   finds their state in its own core's cache (16384 CartPole envs are ~1.8
   MB of buffers: too much for one L2, half of it fits).
   ------------------------------------------------------------------ */
#if defined(_WIN32)
#define FV_HAVE_POOL 0
#else
#define FV_HAVE_POOL 1
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>
#endif
typedef int64_t (*fv_chunk_fn)(void *ctx, int64_t lo, int64_t hi);
#define FV_MAX_HELPERS 63
#define FV_MAX_CHUNKS 0xffff
#define FV_SPIN 5000
typedef struct fv_pool {
#if FV_HAVE_POOL
    pthread_t threads[FV_MAX_HELPERS];
    pthread_mutex_t mu;
    pthread_cond_t cv;
#endif
    int nhelpers;
    int stop;
    long pid;         /* process that started the helpers (a forked child has none) */
    uint64_t gen;     /* job generation (written under mu) */
    uint64_t next;    /* atomic: (gen << 32) | (front << 16) | back: chunks [front, back) are left */
    int64_t done;     /* atomic: chunks finished */
    int64_t total;    /* atomic: sum of the chunk results */
    int64_t n, nchunks, chunk;
    int64_t helped;   /* chunks the helpers ran in the last job */
    fv_chunk_fn fn;
    void *ctx;
} fv_pool;

static int fv_take(fv_pool *p, uint64_t gen, int from_back, int64_t *idx) {
    uint64_t v = __atomic_load_n(&p->next, __ATOMIC_ACQUIRE);
    for (;;) {
        uint64_t front = (v >> 16) & 0xffffULL, back = v & 0xffffULL;
        if ((v >> 32) != (gen & 0xffffffffULL) || front >= back) return 0;
        uint64_t nv = from_back ? v - 1 : v + (1ULL << 16);
        if (__atomic_compare_exchange_n(&p->next, &v, nv, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            *idx = (int64_t)(from_back ? back - 1 : front);
            return 1;
        }
    }
}
static void fv_do(fv_pool *p, int64_t idx) {
    int64_t lo = idx * p->chunk, hi = lo + p->chunk;
    if (hi > p->n) hi = p->n;
    int64_t r = lo < hi ? p->fn(p->ctx, lo, hi) : 0;
    __atomic_fetch_add(&p->total, r, __ATOMIC_RELAXED);
    __atomic_fetch_add(&p->done, 1, __ATOMIC_RELEASE);
}
#if FV_HAVE_POOL
static void *fv_helper(void *arg) {
    fv_pool *p = (fv_pool *)arg;
    uint64_t seen = 0;
    int64_t idx;
    pthread_mutex_lock(&p->mu);
    seen = p->gen;
    for (;;) {
        while (!p->stop && p->gen == seen) pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        for (;;) {
            while (fv_take(p, seen, 1, &idx)) fv_do(p, idx);
            /* stay awake a few microseconds for the next job, so
               back-to-back steps do not pay a wake-up each; then sleep */
            int found = 0;
            for (int spin = 0; spin < FV_SPIN && !found; spin++) {
                uint64_t v = __atomic_load_n(&p->next, __ATOMIC_ACQUIRE);
                found = (v >> 32) != (seen & 0xffffffffULL) && ((v >> 16) & 0xffffULL) < (v & 0xffffULL);
                if (__atomic_load_n(&p->stop, __ATOMIC_RELAXED)) break;
            }
            if (!found) break;
            seen = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE);
        }
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}
#endif
/* NULL when threads are unavailable (the caller then runs serially). */
static fv_pool *fv_pool_new(int nhelpers) {
#if FV_HAVE_POOL
    if (nhelpers < 1) return NULL;
    if (nhelpers > FV_MAX_HELPERS) nhelpers = FV_MAX_HELPERS;
    fv_pool *p = (fv_pool *)calloc(1, sizeof(fv_pool));
    if (!p) return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->next = 0;  /* no chunks left */
    p->pid = (long)getpid();
    for (int k = 0; k < nhelpers; k++) {
        if (pthread_create(&p->threads[k], NULL, fv_helper, p) != 0) break;
        p->nhelpers++;
    }
    return p;
#else
    (void)nhelpers;
    return NULL;
#endif
}
/* 1 if p's helper threads exist in this process (not after a fork). */
static int fv_pool_usable(fv_pool *p) {
#if FV_HAVE_POOL
    return p != NULL && p->pid == (long)getpid();
#else
    return 0;
#endif
}
static void fv_pool_free(fv_pool *p) {
#if FV_HAVE_POOL
    if (!p) return;
    if (p->pid != (long)getpid()) return;  /* forked child: the threads are not ours; leak the struct */
    pthread_mutex_lock(&p->mu);
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int k = 0; k < p->nhelpers; k++) pthread_join(p->threads[k], NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
#else
    (void)p;
#endif
}
/* Run fn over [0, n) in nchunks chunks with the helpers; returns the sum of fn's results. */
static int64_t fv_pool_run(fv_pool *p, fv_chunk_fn fn, void *ctx, int64_t n, int64_t nchunks) {
    int64_t idx;
    uint64_t gen;
    if (nchunks > FV_MAX_CHUNKS) nchunks = FV_MAX_CHUNKS;
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->nchunks = nchunks;
    p->chunk = (n + nchunks - 1) / nchunks;
    __atomic_store_n(&p->done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->total, 0, __ATOMIC_RELAXED);
#if FV_HAVE_POOL
    pthread_mutex_lock(&p->mu);
    gen = p->gen + 1;
    __atomic_store_n(&p->gen, gen, __ATOMIC_RELEASE);
    __atomic_store_n(&p->next, ((gen & 0xffffffffULL) << 32) | (uint64_t)nchunks, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
#else
    gen = ++p->gen;
    __atomic_store_n(&p->next, ((gen & 0xffffffffULL) << 32) | (uint64_t)nchunks, __ATOMIC_RELEASE);
#endif
    int64_t mine = 0;
    while (fv_take(p, gen, 0, &idx)) { fv_do(p, idx); mine++; }
    p->helped = nchunks - mine;
    /* wait only for chunks that helpers took and are running */
    for (int spins = 0; __atomic_load_n(&p->done, __ATOMIC_ACQUIRE) < nchunks; spins++) {
#if FV_HAVE_POOL
        if (spins > 2000) sched_yield();
#endif
    }
    __atomic_store_n(&p->next, (gen & 0xffffffffULL) << 32, __ATOMIC_RELEASE);  /* none left */
    return __atomic_load_n(&p->total, __ATOMIC_RELAXED);
}

#endif /* FV_RUNNER_H */
