/* Caller side: make a GNU OpenMP runtime's idle threads stop spinning soon, while the host is
 * contended, without changing a setting.
 *
 * After each parallel region libgomp's pool threads busy-wait for the next one: 300,000
 * spins when OMP_WAIT_POLICY is unset (milliseconds), but only 1,000 "if there are more
 * OpenMP threads than available CPUs" (libgomp's manual, GOMP_SPINCOUNT). A process sees
 * only its own threads: two trainers on the same cores, or one beside a busy process, each
 * run a team per CPU and spin their full count at every barrier while the thread they wait
 * for has no core, and the training loops crawl. fastvec measures that contention
 * (host_load.py); while it lasts, it tells the runtime in the runtime's own terms: a thread of
 * its own runs one empty region of more threads than the process has CPUs and then sleeps,
 * its pool kept (idle, asleep), so that the runtime counts more OpenMP threads than CPUs and
 * spins the short count. When the contention ends the thread exits, libgomp frees its pool,
 * and the full spin count is back. The trainer's thread count and wait policy stay the user's.
 *
 * The region is started through the runtime's own GOMP_parallel (looked up at run time, as
 * for the parked step in fv_omp_park.h): fastvec links no OpenMP runtime for this. */
#ifndef FV_OMP_THROTTLE_H
#define FV_OMP_THROTTLE_H

#include "fv_omp_park.h"

typedef struct {
    fv_gomp_parallel_fn parallel;  /* the runtime's GOMP_parallel */
    unsigned threads;              /* the empty region's threads: more than the CPUs */
    uint32_t stop;                 /* set to end the thread */
    fv_thread thread;
} fv_omp_throttle;

static void fv_omp_throttle_region(void *arg) { (void)arg; }

FV_THREAD_FN(fv_omp_throttle_main) {
    fv_omp_throttle *t = (fv_omp_throttle *)arg;
    t->parallel(fv_omp_throttle_region, NULL, t->threads, 0);
    while (!fv_load_u32(&t->stop, FV_SEQ_CST))
        fv_block(&t->stop, 0, 1.0);
    FV_THREAD_RETURN;  /* (libgomp frees this thread's pool as the thread ends) */
}

/* Starts the thread; 0 on success, -1 if it could not be started. */
static int fv_omp_throttle_start(fv_omp_throttle *t, fv_gomp_parallel_fn parallel, unsigned threads) {
    t->parallel = parallel;
    t->threads = threads;
    t->stop = 0;
    return fv_thread_start(&t->thread, fv_omp_throttle_main, t);
}

/* Ends a started thread and waits for it. */
static void fv_omp_throttle_stop(fv_omp_throttle *t) {
    fv_store_u32(&t->stop, 1, FV_SEQ_CST);
    fv_wake(&t->stop);
    fv_thread_join(t->thread);
}

#endif
