/* fv_platform.h: what fastvec's C needs beyond C99, on every compiler it is built with.
 *
 * Each facility has a native path, taken by GCC and Clang on Linux and macOS, and a
 * portable one, taken by MSVC (Windows) and by any build with FV_PORTABLE defined to 1
 * (`FASTVEC_PORTABLE=1 pip install .` sets it), so that the portable paths are built and
 * tested on Linux too:
 *
 *   facility                  native path                   portable path
 *   64 x 64 -> 128 multiply   unsigned __int128             four 32 x 32 products
 *   atomics                   GCC/Clang __atomic builtins   C11 <stdatomic.h>
 *   threads (the env pool)    pthreads                      C11 <threads.h>
 *   wait on a shared word     futex (Linux)                 spin, yield, then 50 us naps
 *   CPU pause in spin loops   x86 pause / arm64 yield       none
 *   cache prefetch hints      __builtin_prefetch            none
 *   the caller's current CPU  sched_getcpu (Linux glibc)    unknown (-1)
 *
 * MSVC needs /std:c17 and /experimental:c11atomics for the C11 paths (setup.py passes
 * them). macOS takes the native paths but has no futex, so its waits nap as the portable
 * path does. Forcing FV_PORTABLE on macOS does not build: it has no <threads.h>.
 * The clock and the core yield are POSIX's (clock_gettime, sched_yield) except on
 * Windows, which uses QueryPerformanceCounter and SwitchToThread.
 * fastvec.native.kit.platform_paths() tells which paths a build took.
 */
#ifndef FV_PLATFORM_H
#define FV_PLATFORM_H

#include <stdint.h>

#if defined(FV_PORTABLE) && FV_PORTABLE
#define FV_GNU_BUILTINS 0
#elif defined(__GNUC__) || defined(__clang__)
#define FV_GNU_BUILTINS 1
#else
#define FV_GNU_BUILTINS 0
#endif

#if !FV_GNU_BUILTINS || defined(_WIN32)
#define FV_C11_THREADS 1
#else
#define FV_C11_THREADS 0
#endif

#if defined(__linux__) && !(defined(FV_PORTABLE) && FV_PORTABLE)
#define FV_FUTEX 1
#else
#define FV_FUTEX 0
#endif

/* ---- 64 x 64 -> 128 multiply --------------------------------------------------------- */

#if FV_GNU_BUILTINS && defined(__SIZEOF_INT128__)
#define FV_INT128 1
/* The low 64 bits of a * b; *hi gets the high 64. */
static inline uint64_t fv_mul64(uint64_t a, uint64_t b, uint64_t *hi) {
    unsigned __int128 p = (unsigned __int128)a * b;
    *hi = (uint64_t)(p >> 64);
    return (uint64_t)p;
}
#else
#define FV_INT128 0
static inline uint64_t fv_mul64(uint64_t a, uint64_t b, uint64_t *hi) {
    const uint64_t a_lo = a & 0xffffffffULL, a_hi = a >> 32;
    const uint64_t b_lo = b & 0xffffffffULL, b_hi = b >> 32;
    const uint64_t ll = a_lo * b_lo, lh = a_lo * b_hi, hl = a_hi * b_lo, hh = a_hi * b_hi;
    /* the middle column: at most 3 * (2^32 - 1), so it fits in 64 bits */
    const uint64_t mid = (ll >> 32) + (lh & 0xffffffffULL) + (hl & 0xffffffffULL);
    *hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
    return (mid << 32) | (ll & 0xffffffffULL);
}
#endif

/* ---- atomics ----------------------------------------------------------------------------
 * fv_load_T / fv_store_T / fv_add_T (returns the old value) / fv_cas_T (weak; on failure
 * *expected gets the current value), for T in u32, u64, i64, int, with an explicit order. */

#if FV_GNU_BUILTINS
#define FV_RELAXED __ATOMIC_RELAXED
#define FV_ACQUIRE __ATOMIC_ACQUIRE
#define FV_RELEASE __ATOMIC_RELEASE
#define FV_ACQ_REL __ATOMIC_ACQ_REL
#define FV_SEQ_CST __ATOMIC_SEQ_CST
#define FV_ATOMIC_OPS(T, name)                                                                 \
    static inline T fv_load_##name(T *p, int order) { return __atomic_load_n(p, order); }     \
    static inline void fv_store_##name(T *p, T v, int order) { __atomic_store_n(p, v, order); } \
    static inline T fv_add_##name(T *p, T v, int order) { return __atomic_fetch_add(p, v, order); } \
    static inline int fv_cas_##name(T *p, T *expected, T desired, int success, int failure) { \
        return __atomic_compare_exchange_n(p, expected, desired, 1, success, failure);         \
    }
#else
#include <stdatomic.h>
#define FV_RELAXED memory_order_relaxed
#define FV_ACQUIRE memory_order_acquire
#define FV_RELEASE memory_order_release
#define FV_ACQ_REL memory_order_acq_rel
#define FV_SEQ_CST memory_order_seq_cst
/* The words are plain integers (some live in memory shared between processes, laid out by
   NumPy); the same-sized _Atomic type is lock-free on every platform fastvec builds for. */
#define FV_ATOMIC_OPS(T, name)                                                                 \
    static inline T fv_load_##name(T *p, int order) {                                         \
        return atomic_load_explicit((_Atomic T *)p, (memory_order)order);                      \
    }                                                                                          \
    static inline void fv_store_##name(T *p, T v, int order) {                                \
        atomic_store_explicit((_Atomic T *)p, v, (memory_order)order);                         \
    }                                                                                          \
    static inline T fv_add_##name(T *p, T v, int order) {                                     \
        return atomic_fetch_add_explicit((_Atomic T *)p, v, (memory_order)order);              \
    }                                                                                          \
    static inline int fv_cas_##name(T *p, T *expected, T desired, int success, int failure) { \
        return atomic_compare_exchange_weak_explicit((_Atomic T *)p, expected, desired,        \
                                                     (memory_order)success, (memory_order)failure); \
    }
#endif
FV_ATOMIC_OPS(uint32_t, u32)
FV_ATOMIC_OPS(uint64_t, u64)
FV_ATOMIC_OPS(int64_t, i64)
FV_ATOMIC_OPS(int, int)
#undef FV_ATOMIC_OPS

/* ---- process id, clock, yield, pause ------------------------------------------------- */

#if defined(_WIN32)
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#include <process.h>
static inline long fv_getpid(void) { return (long)_getpid(); }
static inline double fv_now(void) {
    LARGE_INTEGER t, f;
    QueryPerformanceCounter(&t);
    QueryPerformanceFrequency(&f);
    return (double)t.QuadPart / (double)f.QuadPart;
}
static inline void fv_yield(void) { SwitchToThread(); }
static inline void fv_nap(void) { Sleep(1); }  /* the shortest sleep Windows offers */
#else
#include <sched.h>
#include <time.h>
#include <unistd.h>
static inline long fv_getpid(void) { return (long)getpid(); }
static inline double fv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
/* Give the core to another runnable thread or process, if any (returns at once otherwise). */
static inline void fv_yield(void) { sched_yield(); }
static inline void fv_nap(void) {
    struct timespec ts;
    ts.tv_sec = 0;
    ts.tv_nsec = 50000; /* 50 us */
    nanosleep(&ts, NULL);
}
#endif

/* The CPU the calling thread runs on, or -1 where that cannot be asked cheaply. Linux's
 * glibc answers from the restartable-sequence area or the vDSO (no system call); the
 * declaration needs _GNU_SOURCE, which Python's own headers define first. */
#if defined(__linux__) && defined(_GNU_SOURCE) && !defined(_WIN32)
static inline int fv_current_cpu(void) { return sched_getcpu(); }
#else
static inline int fv_current_cpu(void) { return -1; }
#endif

/* Hints that a cache line is about to be read / written (no-ops without GCC builtins). */
#if FV_GNU_BUILTINS
#define FV_PREFETCH(p) __builtin_prefetch((const void *)(p), 0)
#define FV_PREFETCH_W(p) __builtin_prefetch((const void *)(p), 1)
#else
#define FV_PREFETCH(p) ((void)(p))
#define FV_PREFETCH_W(p) ((void)(p))
#endif

/* A hint to the CPU inside a spin loop (lets a sibling hyperthread run). */
static inline void fv_pause(void) {
#if FV_GNU_BUILTINS && (defined(__x86_64__) || defined(__i386__))
    __builtin_ia32_pause();
#elif FV_GNU_BUILTINS && defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* ---- waiting on a word in shared memory ------------------------------------------------
 * fv_block: sleep while *p == expected, at most timeout_s seconds (it may return early:
 * callers re-check). fv_wake: wake every process blocked on p. Without a futex, fv_block
 * naps once and fv_wake does nothing; the waiter sees the change after its nap. */

#if FV_FUTEX
#include <linux/futex.h>
#include <sys/syscall.h>
static inline void fv_block(uint32_t *p, uint32_t expected, double timeout_s) {
    struct timespec ts;
    if (timeout_s < 0) timeout_s = 0;
    ts.tv_sec = (time_t)timeout_s;
    ts.tv_nsec = (long)((timeout_s - (double)ts.tv_sec) * 1e9);
    /* Not FUTEX_PRIVATE: the word lives in memory shared between processes. */
    syscall(SYS_futex, p, FUTEX_WAIT, expected, &ts, NULL, 0);
}
static inline void fv_wake(uint32_t *p) { syscall(SYS_futex, p, FUTEX_WAKE, 1 << 30, NULL, NULL, 0); }
#else
static inline void fv_block(uint32_t *p, uint32_t expected, double timeout_s) {
    (void)timeout_s;
    if (fv_load_u32(p, FV_SEQ_CST) == expected) fv_nap();
}
static inline void fv_wake(uint32_t *p) { (void)p; }
#endif

/* ---- threads ----------------------------------------------------------------------------
 * FV_THREAD_FN(name) declares a thread's entry point (one void * argument), ended by
 * FV_THREAD_RETURN. fv_thread_start returns 0 on success. */

#if FV_C11_THREADS
#include <threads.h>
typedef thrd_t fv_thread;
typedef mtx_t fv_mutex;
typedef cnd_t fv_cond;
#define FV_THREAD_FN(name) static int name(void *arg)
#define FV_THREAD_RETURN return 0
typedef int (*fv_thread_fn)(void *);
static inline int fv_thread_start(fv_thread *t, fv_thread_fn fn, void *arg) {
    return thrd_create(t, fn, arg) == thrd_success ? 0 : -1;
}
static inline void fv_thread_join(fv_thread t) { thrd_join(t, NULL); }
static inline void fv_mutex_init(fv_mutex *m) { mtx_init(m, mtx_plain); }
static inline void fv_mutex_destroy(fv_mutex *m) { mtx_destroy(m); }
static inline void fv_mutex_lock(fv_mutex *m) { mtx_lock(m); }
static inline void fv_mutex_unlock(fv_mutex *m) { mtx_unlock(m); }
static inline void fv_cond_init(fv_cond *c) { cnd_init(c); }
static inline void fv_cond_destroy(fv_cond *c) { cnd_destroy(c); }
static inline void fv_cond_wait(fv_cond *c, fv_mutex *m) { cnd_wait(c, m); }
static inline void fv_cond_broadcast(fv_cond *c) { cnd_broadcast(c); }
#else
#include <pthread.h>
typedef pthread_t fv_thread;
typedef pthread_mutex_t fv_mutex;
typedef pthread_cond_t fv_cond;
#define FV_THREAD_FN(name) static void *name(void *arg)
#define FV_THREAD_RETURN return NULL
typedef void *(*fv_thread_fn)(void *);
static inline int fv_thread_start(fv_thread *t, fv_thread_fn fn, void *arg) {
    return pthread_create(t, NULL, fn, arg) == 0 ? 0 : -1;
}
static inline void fv_thread_join(fv_thread t) { pthread_join(t, NULL); }
static inline void fv_mutex_init(fv_mutex *m) { pthread_mutex_init(m, NULL); }
static inline void fv_mutex_destroy(fv_mutex *m) { pthread_mutex_destroy(m); }
static inline void fv_mutex_lock(fv_mutex *m) { pthread_mutex_lock(m); }
static inline void fv_mutex_unlock(fv_mutex *m) { pthread_mutex_unlock(m); }
static inline void fv_cond_init(fv_cond *c) { pthread_cond_init(c, NULL); }
static inline void fv_cond_destroy(fv_cond *c) { pthread_cond_destroy(c); }
static inline void fv_cond_wait(fv_cond *c, fv_mutex *m) { pthread_cond_wait(c, m); }
static inline void fv_cond_broadcast(fv_cond *c) { pthread_cond_broadcast(c); }
#endif

/* ---- OpenMP after fork ------------------------------------------------------------------
 * GNU libgomp's thread pool does not survive fork(): in a child forked from a process that
 * has run a parallel region, the next region waits forever for threads that do not exist.
 * Kernels with parallel regions install a fork handler at import that marks the child, and
 * ask fv_omp_threads how many threads they may use: 1 in a forked child, else what was
 * asked. (Windows has no fork.) */

#if !defined(_WIN32)
#include <pthread.h>
static int fv_omp_forked = 0;
static void fv_omp_mark_forked(void) { fv_omp_forked = 1; }
static inline int fv_omp_install_fork_guard(void) { return pthread_atfork(NULL, NULL, fv_omp_mark_forked); }
static inline int fv_omp_threads(int requested) { return fv_omp_forked ? 1 : requested; }
#else
static inline int fv_omp_install_fork_guard(void) { return 0; }
static inline int fv_omp_threads(int requested) { return requested; }
#endif

/* OpenMP's default thread count; 1 in a build without OpenMP (macOS's clang). */
#ifdef _OPENMP
#include <omp.h>
static inline int fv_omp_max_threads(void) { return omp_get_max_threads(); }
#else
static inline int fv_omp_max_threads(void) { return 1; }
#endif

#endif /* FV_PLATFORM_H */
