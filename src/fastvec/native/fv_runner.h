/* fv_runner.h: what fastvec's batch runner (fastvec/native/_batch.pyx) needs besides the
 * env: screens of the actions before a step, and the thread pool that steps chunks of envs.
 * Not needed to write an env.
 */
#ifndef FV_RUNNER_H
#define FV_RUNNER_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fv_platform.h"

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
typedef int64_t (*fv_chunk_fn)(void *ctx, int64_t lo, int64_t hi);
#define FV_MAX_HELPERS 63
#define FV_MAX_CHUNKS 0xffff
#define FV_SPIN 5000
typedef struct fv_pool {
    fv_thread threads[FV_MAX_HELPERS];
    fv_mutex mu;
    fv_cond cv;
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
    uint64_t v = fv_load_u64(&p->next, FV_ACQUIRE);
    for (;;) {
        uint64_t front = (v >> 16) & 0xffffULL, back = v & 0xffffULL;
        if ((v >> 32) != (gen & 0xffffffffULL) || front >= back) return 0;
        uint64_t nv = from_back ? v - 1 : v + (1ULL << 16);
        if (fv_cas_u64(&p->next, &v, nv, FV_ACQ_REL, FV_ACQUIRE)) {
            *idx = (int64_t)(from_back ? back - 1 : front);
            return 1;
        }
    }
}
static void fv_do(fv_pool *p, int64_t idx) {
    int64_t lo = idx * p->chunk, hi = lo + p->chunk;
    if (hi > p->n) hi = p->n;
    int64_t r = lo < hi ? p->fn(p->ctx, lo, hi) : 0;
    fv_add_i64(&p->total, r, FV_RELAXED);
    fv_add_i64(&p->done, 1, FV_RELEASE);
}
FV_THREAD_FN(fv_helper) {
    fv_pool *p = (fv_pool *)arg;
    uint64_t seen = 0;
    int64_t idx;
    fv_mutex_lock(&p->mu);
    seen = p->gen;
    for (;;) {
        while (!p->stop && p->gen == seen) fv_cond_wait(&p->cv, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        fv_mutex_unlock(&p->mu);
        for (;;) {
            while (fv_take(p, seen, 1, &idx)) fv_do(p, idx);
            /* stay awake a few microseconds for the next job, so
               back-to-back steps do not pay a wake-up each; then sleep */
            int found = 0;
            for (int spin = 0; spin < FV_SPIN && !found; spin++) {
                uint64_t v = fv_load_u64(&p->next, FV_ACQUIRE);
                found = (v >> 32) != (seen & 0xffffffffULL) && ((v >> 16) & 0xffffULL) < (v & 0xffffULL);
                if (fv_load_int(&p->stop, FV_RELAXED)) break;
            }
            if (!found) break;
            seen = fv_load_u64(&p->gen, FV_ACQUIRE);
        }
        fv_mutex_lock(&p->mu);
    }
    fv_mutex_unlock(&p->mu);
    FV_THREAD_RETURN;
}
/* NULL when no helper was asked for or none could be allocated (the caller then runs serially). */
static fv_pool *fv_pool_new(int nhelpers) {
    if (nhelpers < 1) return NULL;
    if (nhelpers > FV_MAX_HELPERS) nhelpers = FV_MAX_HELPERS;
    fv_pool *p = (fv_pool *)calloc(1, sizeof(fv_pool));
    if (!p) return NULL;
    fv_mutex_init(&p->mu);
    fv_cond_init(&p->cv);
    p->next = 0;  /* no chunks left */
    p->pid = fv_getpid();
    for (int k = 0; k < nhelpers; k++) {
        if (fv_thread_start(&p->threads[k], fv_helper, p) != 0) break;
        p->nhelpers++;
    }
    return p;
}
/* 1 if p's helper threads exist in this process (not after a fork). */
static int fv_pool_usable(fv_pool *p) {
    return p != NULL && p->pid == fv_getpid();
}
static void fv_pool_free(fv_pool *p) {
    if (!p) return;
    if (p->pid != fv_getpid()) return;  /* forked child: the threads are not ours; leak the struct */
    fv_mutex_lock(&p->mu);
    fv_store_int(&p->stop, 1, FV_RELAXED);
    fv_cond_broadcast(&p->cv);
    fv_mutex_unlock(&p->mu);
    for (int k = 0; k < p->nhelpers; k++) fv_thread_join(p->threads[k]);
    fv_cond_destroy(&p->cv);
    fv_mutex_destroy(&p->mu);
    free(p);
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
    fv_store_i64(&p->done, 0, FV_RELAXED);
    fv_store_i64(&p->total, 0, FV_RELAXED);
    fv_mutex_lock(&p->mu);
    gen = p->gen + 1;
    fv_store_u64(&p->gen, gen, FV_RELEASE);
    fv_store_u64(&p->next, ((gen & 0xffffffffULL) << 32) | (uint64_t)nchunks, FV_RELEASE);
    fv_cond_broadcast(&p->cv);
    fv_mutex_unlock(&p->mu);
    int64_t mine = 0;
    while (fv_take(p, gen, 0, &idx)) { fv_do(p, idx); mine++; }
    p->helped = nchunks - mine;
    /* wait only for chunks that helpers took and are running */
    for (int spins = 0; fv_load_i64(&p->done, FV_ACQUIRE) < nchunks; spins++)
        if (spins > 2000) fv_yield();
    fv_store_u64(&p->next, (gen & 0xffffffffULL) << 32, FV_RELEASE);  /* none left */
    return fv_load_i64(&p->total, FV_RELAXED);
}

#endif /* FV_RUNNER_H */
