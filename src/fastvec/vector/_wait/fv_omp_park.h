/* Caller side: run the caller's wait for a vector step inside a parallel region of each of
 * the caller's GNU OpenMP runtimes, so that a runtime's idle threads give their cores to the
 * workers while the step lasts instead of spinning on them, and are still there, awake, for
 * the trainer's next parallel region.
 *
 * After each parallel region libgomp keeps its pool threads busy-waiting (about 300,000
 * pause instructions, milliseconds) for the next one. During a vector step those cores
 * belong to the workers. Handing the threads back (omp_pause_resource_all) frees the cores,
 * but the trainer's next parallel region must then start its threads again, which costs
 * more than the step gains when the trainer runs a region between every two steps. Here
 * the wait instead becomes the body of a region of the runtime's usual team: thread 0 (the
 * caller's thread, the region's master) waits for the workers; every other thread yields
 * its core (sched_yield) while the answer is due, so that any runnable worker gets the core
 * within microseconds, and blocks on a futex once that time is over (a stalled or hung env
 * step then costs the process no CPU). Thread 0 wakes the blocked ones when its body
 * returns, and the region ends as any region ends.
 *
 * The body is C alone (the caller's nogil wait), never Python: a process forked, a signal
 * handler run or a setting changed inside the region would see the region (a child forked
 * there runs its OpenMP code on one thread for the rest of its life).
 *
 * The region is started through the runtime's own entry point, GOMP_parallel (the call GCC
 * emits for `#pragma omp parallel` since GCC 4.9), and omp_get_thread_num, both looked up
 * in the runtime at run time: fastvec links no OpenMP runtime for this. */
#ifndef FV_OMP_PARK_H
#define FV_OMP_PARK_H

#include "fv_platform.h"

typedef void (*fv_omp_region_fn)(void *);
typedef void (*fv_gomp_parallel_fn)(fv_omp_region_fn fn, void *data, unsigned num_threads, unsigned flags);
typedef int (*fv_omp_thread_num_fn)(void);
typedef int (*fv_omp_pause_fn)(int kind);

/* One runtime to park in: its entry points. */
typedef struct {
    fv_gomp_parallel_fn parallel;     /* GOMP_parallel */
    fv_omp_thread_num_fn thread_num;  /* omp_get_thread_num */
} fv_omp_runtime;

/* One region: what thread 0 runs, and how the other threads wait for it. */
typedef struct {
    fv_omp_thread_num_fn thread_num;
    fv_omp_region_fn body;
    void *body_arg;
    double spin_s;      /* how long the other threads yield before they block */
    uint32_t done;      /* set by thread 0 once body has returned */
    uint32_t sleepers;  /* other threads that went to block on done */
} fv_omp_park;

static void fv_omp_park_region(void *arg)
{
    fv_omp_park *park = (fv_omp_park *)arg;
    double start;
    if (park->thread_num() == 0) {
        park->body(park->body_arg);
        /* (sequentially consistent, as the sleepers' side: either a sleeper is counted here,
         * or it sees done before it blocks) */
        fv_store_u32(&park->done, 1, FV_SEQ_CST);
        if (fv_load_u32(&park->sleepers, FV_SEQ_CST))
            fv_wake(&park->done);
        return;
    }
    start = fv_now();
    while (!fv_load_u32(&park->done, FV_SEQ_CST)) {
        if (fv_now() - start >= park->spin_s) {
            fv_add_u32(&park->sleepers, 1, FV_SEQ_CST);
            while (!fv_load_u32(&park->done, FV_SEQ_CST))
                fv_block(&park->done, 0, 1.0);
            return;
        }
        fv_yield();
    }
}

/* A nest of regions, one per runtime, the body innermost. */
typedef struct {
    const fv_omp_runtime *runtimes;
    int count;
    double spin_s;
    fv_omp_region_fn body;
    void *body_arg;
    double body_done_at;  /* fv_now() when the body returned */
} fv_omp_nest;

typedef struct {
    fv_omp_nest *nest;
    int level;  /* runtimes[level] is the next one to open a region of */
} fv_omp_level;

static void fv_omp_enter(void *arg)
{
    fv_omp_level *at = (fv_omp_level *)arg;
    fv_omp_nest *nest = at->nest;
    fv_omp_level next;
    fv_omp_park park;
    if (at->level >= nest->count) {
        nest->body(nest->body_arg);
        nest->body_done_at = fv_now();
        return;
    }
    next.nest = nest;
    next.level = at->level + 1;
    park.thread_num = nest->runtimes[at->level].thread_num;
    park.body = fv_omp_enter;
    park.body_arg = &next;
    park.spin_s = nest->spin_s;
    park.done = 0;
    park.sleepers = 0;
    nest->runtimes[at->level].parallel(fv_omp_park_region, &park, 0, 0);
}

/* Run body(body_arg) on this thread, inside a parallel region of each of the `count`
 * runtimes (nested, with each runtime's default number of threads; with one thread a
 * region is its body alone), their other threads yielding for up to spin_s seconds and
 * then blocking until body returns. Returns how long the regions took to end once body had
 * returned (seconds): short when the other threads were on a core, long when the
 * scheduler had queued them behind other work (a contended host). */
static double fv_omp_run_parked(const fv_omp_runtime *runtimes, int count, double spin_s,
                                fv_omp_region_fn body, void *body_arg)
{
    fv_omp_nest nest;
    fv_omp_level top;
    nest.runtimes = runtimes;
    nest.count = count;
    nest.spin_s = spin_s;
    nest.body = body;
    nest.body_arg = body_arg;
    nest.body_done_at = 0.0;
    top.nest = &nest;
    top.level = 0;
    fv_omp_enter(&top);
    return count > 0 ? fv_now() - nest.body_done_at : 0.0;
}

/* How long (seconds) the runtime's omp_pause_resource_all(kind) took: about a microsecond
 * when the calling thread has no pool of threads to end, tens when it has one. Timed here,
 * around the call alone, so that the time the caller then takes to get Python's GIL back
 * does not count. */
static double fv_omp_timed_pause(fv_omp_pause_fn pause, int kind)
{
    double start = fv_now();
    pause(kind);
    return fv_now() - start;
}

static void fv_omp_empty_region(void *arg) { (void)arg; }

/* How long (seconds) an empty parallel region of the runtime's default team took, start to
 * end: with the pool's threads there, the cost of any region; right after a pause, that
 * plus starting the threads again (what a release costs the trainer's next region). */
static double fv_omp_timed_region(fv_gomp_parallel_fn parallel)
{
    double start = fv_now();
    parallel(fv_omp_empty_region, NULL, 0, 0);
    return fv_now() - start;
}
#endif
