/* Worker side: end a worker process whose caller is gone, even while one of its envs never
 * returns from a step.
 *
 * A worker's Python command loop notices a dead caller between commands and exits cleanly
 * (closing its envs). An env hung inside a step (a deadlock, a simulator that stopped
 * answering, C code looping with the GIL held) never gives the loop that chance, and the
 * worker would outlive its caller for ever. This watchdog is a plain C thread, so it runs
 * whatever the env's thread holds: every interval it checks that the caller still runs, and
 * once the caller has been gone for longer than a grace period (time for the Python loop to
 * close the envs itself) it ends the process with _exit.
 *
 * The check: a worker started by fork or spawn is the caller's own child, so the caller is
 * gone when the worker's parent changes (it is reparented at the caller's death, even while
 * the dead caller lingers as a zombie that kill() still finds); a forkserver worker's parent
 * is the server, so there kill(pid, 0) checks the caller's pid. POSIX only (FastVectorEnv
 * needs POSIX); elsewhere fv_start_parent_watch does nothing and returns -1. */
#ifndef FV_PARENT_WATCH_H
#define FV_PARENT_WATCH_H

#include "fv_platform.h"

#if !defined(_WIN32)
#include <errno.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    long caller;       /* the caller's pid */
    int by_parent;     /* 1: the caller is this process's parent (fork, spawn) */
    double interval_s; /* between two checks */
    double grace_s;    /* how long the caller must have been gone before the process ends */
    int exit_code;
} fv_parent_watch_args;

static fv_parent_watch_args fv_parent_watch;

static int fv_caller_gone(void) {
    if (fv_parent_watch.by_parent) return (long)getppid() != fv_parent_watch.caller;
    return kill((pid_t)fv_parent_watch.caller, 0) != 0 && errno == ESRCH;
}

static void fv_sleep_s(double seconds) {
    struct timespec ts;
    ts.tv_sec = (time_t)seconds;
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

FV_THREAD_FN(fv_parent_watch_loop) {
    double gone_since = -1.0;
    (void)arg;
    for (;;) {
        fv_sleep_s(fv_parent_watch.interval_s);
        if (!fv_caller_gone()) {
            gone_since = -1.0;
            continue;
        }
        if (gone_since < 0.0) gone_since = fv_now();
        if (fv_now() - gone_since >= fv_parent_watch.grace_s) _exit(fv_parent_watch.exit_code);
    }
    FV_THREAD_RETURN;
}

/* Start the watchdog (once per process); 0 on success. */
static inline int fv_start_parent_watch(long caller, int by_parent, double interval_s, double grace_s,
                                        int exit_code) {
    static int started = 0;
    fv_thread thread;
    if (started) return 0;
    fv_parent_watch.caller = caller;
    fv_parent_watch.by_parent = by_parent;
    fv_parent_watch.interval_s = interval_s;
    fv_parent_watch.grace_s = grace_s;
    fv_parent_watch.exit_code = exit_code;
    if (fv_thread_start(&thread, fv_parent_watch_loop, NULL) != 0) return -1;
    started = 1;
    return 0;  /* (never joined: it ends with the process) */
}
#else
static inline int fv_start_parent_watch(long caller, int by_parent, double interval_s, double grace_s,
                                        int exit_code) {
    (void)caller; (void)by_parent; (void)interval_s; (void)grace_s; (void)exit_code;
    return -1;
}
#endif

#endif /* FV_PARENT_WATCH_H */
