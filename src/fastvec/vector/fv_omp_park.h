/* Caller side: run a vector step inside a parallel region of the caller's GNU OpenMP
 * runtime, so that the runtime's idle threads yield their cores to the workers while the
 * step lasts instead of spinning on them, and are still there, awake, for the trainer's
 * next parallel region.
 *
 * After each parallel region libgomp keeps its pool threads busy-waiting (about 300,000
 * pause instructions, milliseconds) for the next one. During a vector step those cores
 * belong to the workers. Handing the threads back (omp_pause_resource_all) frees the cores,
 * but the trainer's next parallel region must then start its threads again, which costs
 * more than the step gains when the trainer runs a region between every two steps. Here
 * the step instead becomes the body of a region of the runtime's usual team: thread 0 (the
 * caller's thread, the region's master) runs the step; every other thread calls
 * sched_yield until the master is done, which gives its core to any runnable worker within
 * microseconds, and then ends the region as any region ends.
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

typedef struct {
    fv_omp_thread_num_fn thread_num;  /* the runtime's omp_get_thread_num */
    fv_omp_region_fn body;            /* what thread 0 runs: the step */
    void *body_arg;
    uint32_t done;                    /* set by thread 0 once body has returned */
} fv_omp_park;

static void fv_omp_park_region(void *arg)
{
    fv_omp_park *park = (fv_omp_park *)arg;
    if (park->thread_num() == 0) {
        park->body(park->body_arg);
        fv_store_u32(&park->done, 1, FV_RELEASE);
        return;
    }
    while (!fv_load_u32(&park->done, FV_ACQUIRE))
        fv_yield();
}

typedef int (*fv_omp_pause_fn)(int kind);

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

/* Run body(body_arg) on this thread, inside a parallel region of the runtime whose
 * GOMP_parallel is `parallel`, with the runtime's default number of threads (with one,
 * the region is body alone). */
static void fv_omp_run_parked(fv_gomp_parallel_fn parallel, fv_omp_thread_num_fn thread_num,
                              fv_omp_region_fn body, void *body_arg)
{
    fv_omp_park park;
    park.thread_num = thread_num;
    park.body = body;
    park.body_arg = body_arg;
    park.done = 0;
    parallel(fv_omp_park_region, &park, 0, 0);
}
#endif
