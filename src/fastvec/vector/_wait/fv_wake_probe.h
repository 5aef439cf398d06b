/* Both sides: what a wake-up costs on this host, measured.
 *
 * A wait that blocks (a futex) is paid for when its answer comes: the kernel must wake the
 * sleeping thread, and on a virtual machine the sleeper's vCPU, idle while it slept, may have
 * gone back to the hypervisor, which must schedule it again first. That cost differs from one
 * host to the next by an order of magnitude (tens of microseconds to hundreds), and how long a
 * wait should spin before it blocks depends on it.
 *
 * fv_wake_probe measures it as the vector env pays it: a thread pinned to one CPU sleeps on a
 * futex while that CPU is idle, and a thread pinned to another CPU wakes it `rounds` times,
 * `idle_s` seconds apart; each sample is the time from the waker's store to the moment the
 * sleeper runs again. Linux only (CPU affinity and the futex); elsewhere, or when a thread
 * cannot be started or pinned, it returns -1. */
#ifndef FV_WAKE_PROBE_H
#define FV_WAKE_PROBE_H

#include "fv_platform.h"

#if FV_FUTEX && defined(_GNU_SOURCE) && !FV_C11_THREADS
#define FV_WAKE_PROBE 1

typedef struct {
    uint32_t word;       /* the round the waker has started (the sleeper blocks on it) */
    uint32_t ready;      /* the sleeper is pinned and about to wait */
    int rounds;
    double idle_s;
    double *sent;        /* OUT: when the waker stored each round */
    double *seen;        /* OUT: when the sleeper saw it */
} fv_wake_probe_run;

static int fv_wake_probe_pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

typedef struct { fv_wake_probe_run *run; int cpu; int pinned; } fv_wake_probe_arg;

FV_THREAD_FN(fv_wake_probe_sleeper) {
    fv_wake_probe_arg *a = (fv_wake_probe_arg *)arg;
    fv_wake_probe_run *run = a->run;
    uint32_t k, seen;
    a->pinned = fv_wake_probe_pin(a->cpu) == 0;
    fv_store_u32(&run->ready, 1, FV_SEQ_CST);
    if (!a->pinned) FV_THREAD_RETURN;
    for (k = 1; k <= (uint32_t)run->rounds; k++) {
        while ((seen = fv_load_u32(&run->word, FV_SEQ_CST)) < k)
            fv_block(&run->word, seen, 1.0);
        run->seen[k - 1] = fv_now();
    }
    FV_THREAD_RETURN;
}

FV_THREAD_FN(fv_wake_probe_waker) {
    fv_wake_probe_arg *a = (fv_wake_probe_arg *)arg;
    fv_wake_probe_run *run = a->run;
    struct timespec idle;
    uint32_t k;
    a->pinned = fv_wake_probe_pin(a->cpu) == 0;
    idle.tv_sec = (time_t)run->idle_s;
    idle.tv_nsec = (long)((run->idle_s - (double)idle.tv_sec) * 1e9);
    for (k = 1; k <= (uint32_t)run->rounds; k++) {
        nanosleep(&idle, NULL);  /* (the sleeper's CPU is idle meanwhile) */
        run->sent[k - 1] = fv_now();
        fv_store_u32(&run->word, k, FV_SEQ_CST);
        fv_wake(&run->word);
    }
    FV_THREAD_RETURN;
}

/* The samples (seconds) go to samples[0 .. rounds - 1]; returns 0, or -1 if not measured. */
static int fv_wake_probe(int waker_cpu, int sleeper_cpu, int rounds, double idle_s,
                         double *samples /* OUT */, double *scratch /* rounds doubles */) {
    fv_wake_probe_run run;
    fv_wake_probe_arg sleeper, waker;
    fv_thread sleeper_thread, waker_thread;
    int k;
    run.word = 0;
    run.ready = 0;
    run.rounds = rounds;
    run.idle_s = idle_s;
    run.sent = scratch;
    run.seen = samples;
    sleeper.run = waker.run = &run;
    sleeper.cpu = sleeper_cpu;
    waker.cpu = waker_cpu;
    sleeper.pinned = waker.pinned = 0;
    if (fv_thread_start(&sleeper_thread, fv_wake_probe_sleeper, &sleeper) != 0) return -1;
    while (!fv_load_u32(&run.ready, FV_SEQ_CST)) fv_yield();
    if (!sleeper.pinned) {
        fv_thread_join(sleeper_thread);
        return -1;
    }
    if (fv_thread_start(&waker_thread, fv_wake_probe_waker, &waker) != 0) {
        run.rounds = 0;  /* (read by the sleeper only between rounds: end it) */
        fv_store_u32(&run.word, (uint32_t)rounds, FV_SEQ_CST);
        fv_wake(&run.word);
        fv_thread_join(sleeper_thread);
        return -1;
    }
    fv_thread_join(waker_thread);
    fv_thread_join(sleeper_thread);
    if (!waker.pinned) return -1;
    for (k = 0; k < rounds; k++) samples[k] -= run.sent[k];
    return 0;
}
#else
#define FV_WAKE_PROBE 0
static int fv_wake_probe(int waker_cpu, int sleeper_cpu, int rounds, double idle_s,
                         double *samples, double *scratch) {
    (void)waker_cpu; (void)sleeper_cpu; (void)rounds; (void)idle_s; (void)samples; (void)scratch;
    return -1;
}
#endif

#endif
