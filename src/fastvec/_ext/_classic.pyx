# Batched classic-control dynamics (CartPole, MountainCar, MountainCarContinuous,
# Acrobot, Pendulum), bit-identical to Gymnasium's Python envs.
#
# One file for the five envs: they share the batch state (a struct of raw
# pointers into NumPy buffers owned by ``ClassicBatch``), the PCG64 stream used
# for resets, the autoreset logic, the action checks and the thread pool; each env
# only adds its dynamics (``_<env>_exact``, or the vectorised CartPole block) and
# a branch of ``_reset_one``. Splitting into one .pyx per env would duplicate all
# of that shared machinery.
#
# Exactness rules (see docs/native.md): every operation mirrors the float64
# (or, where Gymnasium's NumPy scalars are float32, the float32) operation that
# Gymnasium performs, in the same order. ``x ** 2`` in Gymnasium calls libm
# ``pow`` (which is not always equal to ``x * x``), so we call ``pow`` through
# an opaque exponent to stop the compiler from folding it into a multiply.
# Floating-point contraction into FMA must not happen (it would change results):
# x86-64 without -march has no FMA; elsewhere a pragma switches it off.
from libc.math cimport cos, sin, fmod, copysign
from libc.stdint cimport uint64_t, int64_t, int32_t, uint8_t
from libc.string cimport memcpy

import numpy as np
cimport numpy as cnp
from gymnasium.error import ResetNeeded

from fastvec._ext._types cimport f32, f64, i64, i32, u8

cnp.import_array()

cdef extern from *:
    """
    /* No FMA contraction (it would change results). x86-64 without -march has
       no FMA, and the pragma below also disables GCC's vectoriser, so it is
       only used where contraction could happen. */
    #if defined(__clang__)
    #pragma clang fp contract(off)
    #elif defined(__GNUC__) && (defined(__FMA__) || !(defined(__x86_64__) || defined(__i386__)))
    #pragma GCC optimize ("fp-contract=off")
    #endif
    #include <math.h>
    #include <stdint.h>
    #include <string.h>
    #if defined(__SSE2__)
    #include <emmintrin.h>
    #endif
    typedef unsigned __int128 fv_u128;

    /* numpy's PCG64 (XSL-RR 128/64): advance the LCG, then output. s = {state_lo, state_hi, inc_lo, inc_hi}. */
    static inline uint64_t fv_pcg64_next(uint64_t *s) {
        const fv_u128 mult = (((fv_u128)0x2360ED051FC65DA4ULL) << 64) | (fv_u128)0x4385DF649FCCF645ULL;
        fv_u128 st = (((fv_u128)s[1]) << 64) | (fv_u128)s[0];
        fv_u128 inc = (((fv_u128)s[3]) << 64) | (fv_u128)s[2];
        st = st * mult + inc;
        s[0] = (uint64_t)st;
        s[1] = (uint64_t)(st >> 64);
        uint64_t x = s[1] ^ s[0];
        unsigned rot = (unsigned)(s[1] >> 58);
        return (x >> rot) | (x << ((64u - rot) & 63u));
    }
    /* numpy's next_double: 53 random bits in [0, 1). */
    static inline double fv_next_double(uint64_t *s) {
        return (double)(fv_pcg64_next(s) >> 11) * (1.0 / 9007199254740992.0);
    }
    /* x ** 2 as CPython / NumPy scalars compute it: libm pow, not x * x. */
    static double fv_pow2(double x) { volatile double two = 2.0; return pow(x, two); }
    static float fv_powf2(float x) { volatile float two = 2.0f; return powf(x, two); }

    /* Indices i in [lo, hi) with flags[i] != 0, written to idx[0..k); returns k.
       Skips eight zero flags at a time; branch-free inside a non-zero word. */
    static int64_t fv_collect(const uint8_t *restrict flags, int64_t lo, int64_t hi, int64_t *restrict idx) {
        int64_t k = 0, i = lo;
        for (; i + 8 <= hi; i += 8) {
            uint64_t w;
            memcpy(&w, flags + i, 8);
            if (w == 0) continue;
            for (int j = 0; j < 8; j++) { idx[k] = i + j; k += flags[i + j] != 0; }
        }
        for (; i < hi; i++) { idx[k] = i; k += flags[i] != 0; }
        return k;
    }
    /* Fast-mode sin/cos: Taylor polynomials, valid for |theta| <= pi/4 (the
       caller checks theta**2 <= 0.6 and otherwise takes the exact path). */
    #define FV_SIN_POLY(th, r2) ((th) * (1.0 + (r2) * (-1.0 / 6.0 + (r2) * (1.0 / 120.0 + (r2) * (-1.0 / 5040.0 + (r2) * ( \
        1.0 / 362880.0 + (r2) * (-1.0 / 39916800.0 + (r2) * (1.0 / 6227020800.0 + (r2) * (-1.0 / 1307674368000.0)))))))))
    #define FV_COS_POLY(r2) (1.0 + (r2) * (-0.5 + (r2) * (1.0 / 24.0 + (r2) * (-1.0 / 720.0 + (r2) * ( \
        1.0 / 40320.0 + (r2) * (-1.0 / 3628800.0 + (r2) * (1.0 / 479001600.0 + (r2) * (-1.0 / 87178291200.0 + (r2) * (1.0 / 20922789888000.0)))))))))
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
    /* CartPole NEXT_STEP resets of envs idx[0..k): the draws and arithmetic of
       the generic reset (state = lo + (hi - lo) * u per component, from env i's
       PCG64 stream), with `restrict` buffers so that consecutive envs' draws
       overlap, and the step outputs of a reset env zeroed. */
    static void fv_cartpole_reset_next(const int64_t *restrict idx, int64_t k, int64_t n,
            uint64_t *restrict rng, double *restrict state, float *restrict obs,
            const double *lo, const double *hi, int32_t *restrict steps, uint8_t *restrict needs_reset,
            uint8_t *restrict reset_flag, double *restrict rew, uint8_t *restrict term, uint8_t *restrict trunc) {
        const double lo0 = lo[0], lo1 = lo[1], lo2 = lo[2], lo3 = lo[3];
        const double w0 = hi[0] - lo[0], w1 = hi[1] - lo[1], w2 = hi[2] - lo[2], w3 = hi[3] - lo[3];
        for (int64_t j = 0; j < k; j++) {
            int64_t i = idx[j];
            uint64_t *s = rng + 4 * i;
    #if defined(__GNUC__) || defined(__clang__)
            /* the PCG64 states are only touched here, so they are rarely in cache */
            if (j + 8 < k) __builtin_prefetch(rng + 4 * idx[j + 8], 1);
    #endif
            double a = lo0 + w0 * fv_next_double(s);
            double b = lo1 + w1 * fv_next_double(s);
            double c = lo2 + w2 * fv_next_double(s);
            double d = lo3 + w3 * fv_next_double(s);
            state[i] = a; state[n + i] = b; state[2 * n + i] = c; state[3 * n + i] = d;
            obs[4 * i] = (float)a; obs[4 * i + 1] = (float)b; obs[4 * i + 2] = (float)c; obs[4 * i + 3] = (float)d;
            steps[i] = 0; needs_reset[i] = 0; reset_flag[i] = 1;
            rew[i] = 0.0; term[i] = 0; trunc[i] = 0;
        }
    }
    /* 1 if some x[i]**2 > lim2. An integer OR of the comparison masks: it
       vectorises, and unlike a float sum it is not one long chain of adds. */
    #define FV_ANY_BEYOND(x, lo, hi, lim2, out) { \
        int64_t acc_ = 0; \
        for (int64_t i_ = (lo); i_ < (hi); i_++) acc_ |= (int64_t)((x)[i_] * (x)[i_] > (lim2)); \
        (out) = acc_ != 0; }
    static int fv_any_beyond(const double *restrict x, int64_t lo, int64_t hi, double lim2) {
        int r;
        FV_ANY_BEYOND(x, lo, hi, lim2, r)
        return r;
    }
    /* CartPole over structure-of-arrays state, blocks of 256 envs: sin/cos
       first (libm per env when exact, a vectorised Taylor polynomial when not,
       valid for |theta| <= pi/4: the caller checks), then the dynamics as plain
       float64 arithmetic that the compiler vectorises (packed IEEE operations
       give the same results as scalar ones, so the exact mode stays exact),
       then the flags. Written in C only to mark the buffers `restrict`. */
    static void fv_cartpole_block(int64_t lo, int64_t hi, int exact, const double *prm, int sutton, int32_t max_steps,
            double *restrict X, double *restrict XD, double *restrict TH, double *restrict THD,
            const int64_t *act64, float *restrict obs, double *restrict rew,
            uint8_t *restrict term, uint8_t *restrict trunc, int32_t *restrict steps,
            uint8_t *restrict needs_reset, uint8_t *restrict reset_flag) {
        const double g = prm[0], mp = prm[1], tm = prm[2], ln = prm[3], pml = prm[4];
        const double fm = prm[5], tau = prm[6], thr = prm[7], xthr = prm[8];
        const double rew_live = sutton ? 0.0 : 1.0, rew_dead = sutton ? -1.0 : 1.0;
        double S[256], C[256];
        /* actions are validated 0/1: read the low 32 bits of each int64 (SSE2 has
           no packed int64 compare or conversion; it has int32 ones) */
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        const int32_t *restrict act = (const int32_t *)act64 + 1;
    #else
        const int32_t *restrict act = (const int32_t *)act64;
    #endif
        for (int64_t b = lo; b < hi; b += 256) {
            int64_t e = b + 256 < hi ? b + 256 : hi;
            if (exact) {
                for (int64_t i = b; i < e; i++) { C[i - b] = cos(TH[i]); S[i - b] = sin(TH[i]); }
            } else {
                for (int64_t i = b; i < e; i++) {
                    double th = TH[i], r2 = th * th;
                    S[i - b] = FV_SIN_POLY(th, r2);
                    C[i - b] = FV_COS_POLY(r2);
                }
            }
            if (!exact) {
                /* fast mode: the same dynamics with one division instead of four */
                const double itm = 1.0 / tm, k43 = ln * (4.0 / 3.0), kmp = ln * mp * itm, kx = pml * itm;
                for (int64_t i = b; i < e; i++) {
                    double x = X[i], xd = XD[i], th = TH[i], thd = THD[i];
                    double force = fm * (double)(2 * act[2 * i] - 1);
                    double st = S[i - b], ct = C[i - b];
                    double temp = (force + pml * (thd * thd) * st) * itm;
                    double thacc = (g * st - ct * temp) / (k43 - kmp * (ct * ct));
                    double xacc = temp - kx * thacc * ct;
                    X[i] = x + tau * xd; XD[i] = xd + tau * xacc; TH[i] = th + tau * thd; THD[i] = thd + tau * thacc;
                    obs[4 * i] = (float)X[i]; obs[4 * i + 1] = (float)XD[i]; obs[4 * i + 2] = (float)TH[i]; obs[4 * i + 3] = (float)THD[i];
                }
                continue;
            }
            /* CartPoleEnv.step, same operations in the same order */
            for (int64_t i = b; i < e; i++) {
                double x = X[i], xd = XD[i], th = TH[i], thd = THD[i];
                double force = fm * (double)(2 * act[2 * i] - 1);
                double st = S[i - b], ct = C[i - b];
                double temp = (force + pml * (thd * thd) * st) / tm;
                double thacc = (g * st - ct * temp) / (ln * (4.0 / 3.0 - mp * (ct * ct) / tm));
                double xacc = temp - pml * thacc * ct / tm;
                x = x + tau * xd;
                xd = xd + tau * xacc;
                th = th + tau * thd;
                thd = thd + tau * thacc;
                X[i] = x; XD[i] = xd; TH[i] = th; THD[i] = thd;
                obs[4 * i] = (float)x; obs[4 * i + 1] = (float)xd; obs[4 * i + 2] = (float)th; obs[4 * i + 3] = (float)thd;
            }
        }
        /* termination and reward (the compiler does not narrow float64 masks to
           bytes on SSE2, so two envs at a time with intrinsics; same comparisons) */
        int64_t i0 = lo;
    #if defined(__SSE2__)
        {
            const __m128d nx = _mm_set1_pd(-xthr), px = _mm_set1_pd(xthr);
            const __m128d nth = _mm_set1_pd(-thr), pth = _mm_set1_pd(thr);
            const __m128d rl = _mm_set1_pd(rew_live), rd = _mm_set1_pd(rew_dead);
            for (; i0 + 2 <= hi; i0 += 2) {
                __m128d x = _mm_loadu_pd(X + i0), th = _mm_loadu_pd(TH + i0);
                __m128d m = _mm_or_pd(_mm_or_pd(_mm_cmplt_pd(x, nx), _mm_cmpgt_pd(x, px)),
                                      _mm_or_pd(_mm_cmplt_pd(th, nth), _mm_cmpgt_pd(th, pth)));
                _mm_storeu_pd(rew + i0, _mm_or_pd(_mm_and_pd(m, rd), _mm_andnot_pd(m, rl)));
                int bits = _mm_movemask_pd(m);
                term[i0] = (uint8_t)(bits & 1);
                term[i0 + 1] = (uint8_t)((bits >> 1) & 1);
            }
        }
    #endif
        for (int64_t i = i0; i < hi; i++) {
            double x = X[i], th = TH[i];
            int t = (x < -xthr) | (x > xthr) | (th < -thr) | (th > thr);
            term[i] = (uint8_t)t;
            rew[i] = t ? rew_dead : rew_live;
        }
        /* TimeLimit and the autoreset flags (int32/bytes: vectorised) */
        for (int64_t i = lo; i < hi; i++) {
            int32_t s = steps[i] + 1;
            uint8_t tr = (uint8_t)(s >= max_steps);
            steps[i] = s;
            trunc[i] = tr;
            reset_flag[i] = 0;
            needs_reset[i] = (uint8_t)(term[i] | tr);
        }
    }
    /* Fast mode (exact=False) with runtime CPU dispatch. Wheels are built for
       baseline x86-64 (SSE2: 2 doubles per vector); on AVX2 / AVX-512 machines
       the fast block is also compiled for those ISAs (4 / 8 doubles per
       vector, FMA contraction allowed: the fast mode is not bit-exact anyway)
       and picked once from the CPU's features. The exact mode never goes
       through these clones, so its IEEE results do not depend on the CPU.
       The clones run one fused loop (dynamics, obs, reward, termination,
       TimeLimit, flags), which the wider ISAs vectorise whole (SSE2 cannot
       narrow float64 masks to bytes, hence the split loops above). */
    #define FV_FAST_ARGS (int64_t lo, int64_t hi, const double *prm, int sutton, int32_t max_steps, \
            double *restrict X, double *restrict XD, double *restrict TH, double *restrict THD, \
            const int64_t *restrict act64, float *restrict obs, double *restrict rew, \
            uint8_t *restrict term, uint8_t *restrict trunc, int32_t *restrict steps, \
            uint8_t *restrict needs_reset, uint8_t *restrict reset_flag)
    typedef int (*fv_fast_fn) FV_FAST_ARGS;
    /* The polynomials hold for |theta| <= pi/4 (theta**2 <= 0.6 < (pi/4)**2):
       each returns 0 without stepping when some theta is beyond (the caller
       then steps the range exactly), 1 after stepping. */
    static int fv_cartpole_fast_default FV_FAST_ARGS {
        if (fv_any_beyond(TH, lo, hi, 0.6)) return 0;
        fv_cartpole_block(lo, hi, 0, prm, sutton, max_steps, X, XD, TH, THD, act64, obs, rew,
                          term, trunc, steps, needs_reset, reset_flag);
        return 1;
    }
    /* Only where it is known to work: GCC >= 8 or Clang >= 9 on x86 Linux/BSD.
       Not on Windows (MinGW GCC does not align the stack for spilled AVX
       registers) nor macOS (no need to risk __builtin_cpu_supports' runtime
       there); those build the baseline variant only. */
    #if !defined(FV_NO_DISPATCH) && (defined(__x86_64__) || defined(__i386__)) \
        && !defined(_WIN32) && !defined(__APPLE__) \
        && ((defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 8))
    #define FV_DISPATCH 1
    #if defined(__clang__)
    #define FV_CONTRACT_FAST _Pragma("clang fp contract(fast)")
    #else
    #define FV_CONTRACT_FAST
    #endif
    #define FV_FAST_BODY { \
        FV_CONTRACT_FAST \
        int beyond; \
        FV_ANY_BEYOND(TH, lo, hi, 0.6, beyond) \
        if (beyond) return 0; \
        const double g = prm[0], mp = prm[1], tm = prm[2], ln = prm[3], pml = prm[4]; \
        const double fm = prm[5], tau = prm[6], thr = prm[7], xthr = prm[8]; \
        const double rew_live = sutton ? 0.0 : 1.0, rew_dead = sutton ? -1.0 : 1.0; \
        const double itm = 1.0 / tm, k43 = ln * (4.0 / 3.0), kmp = ln * mp * itm, kx = pml * itm; \
        const int32_t *restrict act = (const int32_t *)act64; /* low words, as above (x86: little-endian) */ \
        for (int64_t i = lo; i < hi; i++) { \
            double x = X[i], xd = XD[i], th = TH[i], thd = THD[i]; \
            double r2 = th * th, st = FV_SIN_POLY(th, r2), ct = FV_COS_POLY(r2); \
            double force = fm * (double)(2 * act[2 * i] - 1); \
            double temp = (force + pml * (thd * thd) * st) * itm; \
            double thacc = (g * st - ct * temp) / (k43 - kmp * (ct * ct)); \
            double xacc = temp - kx * thacc * ct; \
            x = x + tau * xd; xd = xd + tau * xacc; th = th + tau * thd; thd = thd + tau * thacc; \
            X[i] = x; XD[i] = xd; TH[i] = th; THD[i] = thd; \
            obs[4 * i] = (float)x; obs[4 * i + 1] = (float)xd; obs[4 * i + 2] = (float)th; obs[4 * i + 3] = (float)thd; \
            int t = (x < -xthr) | (x > xthr) | (th < -thr) | (th > thr); \
            rew[i] = t ? rew_dead : rew_live; \
            int32_t s = steps[i] + 1; \
            int tr = s >= max_steps; \
            steps[i] = s; \
            term[i] = (uint8_t)t; \
            trunc[i] = (uint8_t)tr; \
            reset_flag[i] = 0; \
            needs_reset[i] = (uint8_t)(t | tr); \
        } \
        return 1; }
    __attribute__((target("avx2,fma"))) static int fv_cartpole_fast_avx2 FV_FAST_ARGS FV_FAST_BODY
    __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma"))) static int fv_cartpole_fast_avx512 FV_FAST_ARGS FV_FAST_BODY
    #endif
    /* ISA levels: 0 default (baseline), 1 AVX2+FMA, 2 AVX-512 (F/VL/BW/DQ) */
    static const char *const fv_isa_names[3] = {"default", "avx2", "avx512"};
    static int fv_isa_max = 0;  /* best level this CPU (and build) supports */
    static fv_fast_fn fv_fast_impl = fv_cartpole_fast_default;
    static int fv_fast_level = 0;
    /* Pick the level (clamped to what the CPU supports); -1 = best. Returns the level set. */
    static int fv_fast_select(int level) {
        static const fv_fast_fn impls[3] = {
            fv_cartpole_fast_default,
    #if defined(FV_DISPATCH)
            fv_cartpole_fast_avx2, fv_cartpole_fast_avx512
    #else
            fv_cartpole_fast_default, fv_cartpole_fast_default
    #endif
        };
        if (level < 0 || level > fv_isa_max) level = fv_isa_max;
        fv_fast_level = level;
        fv_fast_impl = impls[level];
        return level;
    }
    /* Called once at import. __builtin_cpu_supports also checks that the OS saves the wide registers. */
    static void fv_fast_init(void) {
    #if defined(FV_DISPATCH)
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
            fv_isa_max = 1;
            if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")
                    && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
                fv_isa_max = 2;
        }
    #endif
        fv_fast_select(-1);
    }
    static const char *fv_fast_name(int level) { return fv_isa_names[level < 0 || level > 2 ? 0 : level]; }
    static int fv_cartpole_fast FV_FAST_ARGS {
        return fv_fast_impl(lo, hi, prm, sutton, max_steps, X, XD, TH, THD, act64, obs, rew,
                     term, trunc, steps, needs_reset, reset_flag);
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
    """
    uint64_t fv_pcg64_next(uint64_t *s) noexcept nogil
    double fv_next_double(uint64_t *s) noexcept nogil
    double fv_pow2(double x) noexcept nogil
    float fv_powf2(float x) noexcept nogil
    i64 fv_collect(const u8 *flags, i64 lo, i64 hi, i64 *idx) noexcept nogil
    i64 fv_first_bad_action(const i64 *a, i64 n, i64 hi) noexcept nogil
    i64 fv_first_set(const u8 *flags, i64 n) noexcept nogil
    void fv_cartpole_reset_next(const i64 *idx, i64 k, i64 n, uint64_t *rng, f64 *state, f32 *obs,
                                const f64 *lo, const f64 *hi, i32 *steps, u8 *needs_reset,
                                u8 *reset_flag, f64 *rew, u8 *term, u8 *trunc) noexcept nogil
    ctypedef struct fv_pool:
        int nhelpers
        i64 helped
    ctypedef i64 (*fv_chunk_fn)(void *ctx, i64 lo, i64 hi) noexcept nogil
    fv_pool *fv_pool_new(int nhelpers) noexcept nogil
    void fv_pool_free(fv_pool *p) noexcept nogil
    int fv_pool_usable(fv_pool *p) noexcept nogil
    i64 fv_pool_run(fv_pool *p, fv_chunk_fn fn, void *ctx, i64 n, i64 nchunks) noexcept nogil
    void fv_cartpole_block(i64 lo, i64 hi, int exact, const f64 *prm, int sutton, i32 max_steps,
                          f64 *X, f64 *XD, f64 *TH, f64 *THD, const i64 *act, f32 *obs, f64 *rew,
                          u8 *term, u8 *trunc, i32 *steps, u8 *needs_reset, u8 *reset_flag) noexcept nogil
    int fv_cartpole_fast(i64 lo, i64 hi, const f64 *prm, int sutton, i32 max_steps,
                          f64 *X, f64 *XD, f64 *TH, f64 *THD, const i64 *act, f32 *obs, f64 *rew,
                          u8 *term, u8 *trunc, i32 *steps, u8 *needs_reset, u8 *reset_flag) noexcept nogil
    void fv_fast_init() noexcept nogil
    int fv_fast_select(int level) noexcept nogil
    const char *fv_fast_name(int level) noexcept nogil
    int fv_isa_max
    int fv_fast_level

# Env kinds (also the index used by fastvec.envs).
DEF CARTPOLE = 0
DEF MOUNTAINCAR = 1
DEF MOUNTAINCAR_CONT = 2
DEF ACROBOT = 3
DEF PENDULUM = 4

ENV_KINDS = {"cartpole": CARTPOLE, "mountaincar": MOUNTAINCAR,
             "mountaincar_continuous": MOUNTAINCAR_CONT, "acrobot": ACROBOT,
             "pendulum": PENDULUM}

# Autoreset modes.
DEF NEXT_STEP = 0
DEF SAME_STEP = 1
DEF DISABLED = 2

DEF PI = 3.141592653589793

cdef struct Ctx:
    int kind
    int mode
    int fast
    i64 n
    i32 max_steps
    f64 *state        # OUT [4, n] structure of arrays (component k of env i at k * n + i)
    u8 *kindf32       # OUT [n] MountainCarContinuous: 1 when the state holds float32 NumPy scalars
    i32 *steps        # OUT [n] elapsed steps (TimeLimit)
    u8 *needs_reset   # OUT [n] NEXT_STEP/DISABLED: episode ended on the previous step
    uint64_t *rng     # OUT [n, 4] PCG64 state (lo, hi) and increment (lo, hi)
    f32 *obs          # OUT [n, obs_dim]
    f64 *rew          # OUT [n]
    u8 *term          # OUT [n]
    u8 *trunc         # OUT [n]
    f32 *final_obs    # OUT [n, obs_dim] SAME_STEP: observation before the reset
    u8 *reset_flag    # OUT [n] 1 where this call reset the env
    f64 *last_u       # OUT [n] Pendulum: clipped torque (for rendering)
    i64 *scratch      # [n] fast mode: indices of envs to reset
    int obs_dim
    # actions (one of them is set)
    const i64 *act_i
    const f32 *act_f
    const f64 *act_d
    # reset bounds for the next reset, per drawn component
    f64 lo[4]
    f64 hi[4]
    # env parameters (meaning per kind, see the Python side)
    f64 p[24]
    int flag0
    # 1 under NumPy 1.x's legacy promotion: a NumPy float32 scalar combined with a
    # Python float or int gives a float64 (NEP 50, NumPy 2: a float32)
    int legacy


# ---------------------------------------------------------------------------
# Resets (draw from env i's PCG64 stream exactly as np_random.uniform does)
# ---------------------------------------------------------------------------

cdef void _reset_one(Ctx *c, i64 i) noexcept nogil:
    cdef i64 n = c.n
    cdef uint64_t *s = c.rng + 4 * i
    cdef f64 *st = c.state
    cdef f32 *o = c.obs + c.obs_dim * i
    cdef int k
    cdef f64 u
    if c.kind == CARTPOLE:
        for k in range(4):
            u = fv_next_double(s)
            st[k * n + i] = c.lo[k] + (c.hi[k] - c.lo[k]) * u
            o[k] = <f32>st[k * n + i]
    elif c.kind == ACROBOT:
        for k in range(4):
            u = fv_next_double(s)
            st[k * n + i] = <f64>(<f32>(c.lo[k] + (c.hi[k] - c.lo[k]) * u))
        # Gymnasium computes cos/sin of the float32 reset state with NumPy's
        # float32 ufuncs; the Python side overwrites columns 0-3 for the envs
        # flagged in reset_flag (see ClassicBatch._fix_acrobot).
        o[0] = <f32>cos(st[i])
        o[1] = <f32>sin(st[i])
        o[2] = <f32>cos(st[n + i])
        o[3] = <f32>sin(st[n + i])
        o[4] = <f32>st[2 * n + i]
        o[5] = <f32>st[3 * n + i]
    elif c.kind == MOUNTAINCAR or c.kind == MOUNTAINCAR_CONT:
        u = fv_next_double(s)
        st[i] = c.lo[0] + (c.hi[0] - c.lo[0]) * u
        st[n + i] = 0.0
        c.kindf32[i] = 0
        o[0] = <f32>st[i]
        o[1] = 0.0
    else:  # PENDULUM
        for k in range(2):
            u = fv_next_double(s)
            st[k * n + i] = c.lo[k] + (c.hi[k] - c.lo[k]) * u
        o[0] = <f32>cos(st[i])
        o[1] = <f32>sin(st[i])
        o[2] = <f32>st[n + i]
    c.steps[i] = 0
    c.needs_reset[i] = 0
    c.reset_flag[i] = 1


# ---------------------------------------------------------------------------
# Dynamics, one env, exact. Each writes obs, rew, term (trunc is done by the caller).
# CartPole's are in fv_cartpole_block (C block above), vectorised over envs.
# ---------------------------------------------------------------------------

cdef inline void _mountaincar_exact(Ctx *c, i64 i) noexcept nogil:
    # p: 0 min_position, 1 max_position, 2 max_speed, 3 goal_position,
    #    4 goal_velocity, 5 force, 6 gravity
    cdef i64 n = c.n
    cdef f64 *st = c.state
    cdef f64 position = st[i], velocity = st[n + i]
    velocity = velocity + (<f64>(c.act_i[i] - 1) * c.p[5] + cos(3.0 * position) * (-c.p[6]))
    # np.clip(v, lo, hi)
    if velocity < -c.p[2]:
        velocity = -c.p[2]
    if velocity > c.p[2]:
        velocity = c.p[2]
    position = position + velocity
    if position < c.p[0]:
        position = c.p[0]
    if position > c.p[1]:
        position = c.p[1]
    if position == c.p[0] and velocity < 0:
        velocity = 0.0
    c.term[i] = position >= c.p[3] and velocity >= c.p[4]
    c.rew[i] = -1.0
    st[i] = position
    st[n + i] = velocity
    c.obs[2 * i] = <f32>position
    c.obs[2 * i + 1] = <f32>velocity


# Python/NumPy scalar kinds in Continuous_MountainCarEnv.step
DEF K_F32 = 0   # numpy.float32
DEF K_F64 = 1   # numpy.float64
DEF K_PY = 2    # Python float (weak under NEP 50: adopts the other operand's precision)

cdef inline void _mountaincar_cont_exact(Ctx *c, i64 i) noexcept nogil:
    # p: 0 min_position, 1 max_position, 2 max_speed, 3 goal_position,
    #    4 goal_velocity, 5 power, 6 min_action, 7 max_action
    # Continuous_MountainCarEnv mixes NumPy float32/float64 scalars and Python
    # floats; NumPy 2's promotion rules (NEP 50) decide each operation's
    # precision, so we track each value's kind and round where NumPy rounds.
    # Under NumPy 1.x (c.legacy) every operation of step() has a Python float or
    # int operand, which makes it float64: the state and the action then behave
    # as float64 values (only the final np.array(..., dtype=np.float32) rounds).
    cdef i64 n = c.n
    cdef f64 *st = c.state
    cdef f64 position = st[i], velocity = st[n + i]
    cdef int skind = K_F32 if (c.kindf32[i] and not c.legacy) else K_F64
    cdef f64 a
    cdef int akind
    if c.act_f != NULL:
        a = <f64>c.act_f[i]
        akind = K_F64 if c.legacy else K_F32
    else:
        a = c.act_d[i]
        akind = K_F64
    # force = min(max(action[0], min_action), max_action)
    cdef f64 force = a
    cdef int fkind = akind
    if a < c.p[6]:
        force = c.p[6]
        fkind = K_PY
    if force > c.p[7]:
        force = c.p[7]
        fkind = K_PY
    # 0.0025 * math.cos(3 * position)
    cdef f64 p3
    if skind == K_F32:
        p3 = <f64>(<f32>(<f32>3.0 * <f32>position))
    else:
        p3 = 3.0 * position
    cdef f64 tcos = 0.0025 * cos(p3)
    # y = force * power - tcos
    cdef f64 y
    cdef int ykind
    cdef f32 y32
    if fkind == K_F32:
        y32 = <f32>force * <f32>c.p[5]
        y32 = y32 - <f32>tcos
        y = <f64>y32
        ykind = K_F32
    else:
        y = force * c.p[5] - tcos
        ykind = fkind
    # velocity += y
    cdef int vkind
    if skind == K_F64:
        velocity = velocity + y
        vkind = K_F64
    elif ykind == K_F64:
        velocity = velocity + y
        vkind = K_F64
    else:  # float32 velocity plus a float32 or a (weak) Python float
        velocity = <f64>(<f32>velocity + <f32>y)
        vkind = K_F32
    # clip the velocity (comparisons against Python floats run in the scalar's precision)
    if (vkind == K_F32 and <f32>velocity > <f32>c.p[2]) or (vkind != K_F32 and velocity > c.p[2]):
        velocity = c.p[2]
        vkind = K_PY
    if (vkind == K_F32 and <f32>velocity < <f32>(-c.p[2])) or (vkind != K_F32 and velocity < -c.p[2]):
        velocity = -c.p[2]
        vkind = K_PY
    # position += velocity
    cdef int pkind
    if skind == K_F64 or vkind == K_F64:
        position = position + velocity
        pkind = K_F64
    else:
        position = <f64>(<f32>position + <f32>velocity)
        pkind = K_F32
    if (pkind == K_F32 and <f32>position > <f32>c.p[1]) or (pkind != K_F32 and position > c.p[1]):
        position = c.p[1]
        pkind = K_PY
    if (pkind == K_F32 and <f32>position < <f32>c.p[0]) or (pkind != K_F32 and position < c.p[0]):
        position = c.p[0]
        pkind = K_PY
    cdef bint at_min
    if pkind == K_F32:
        at_min = <f32>position == <f32>c.p[0]
    else:
        at_min = position == c.p[0]
    if at_min and velocity < 0:
        velocity = 0.0
        vkind = K_PY
    cdef bint t
    if pkind == K_F32:
        t = <f32>position >= <f32>c.p[3]
    else:
        t = position >= c.p[3]
    if t:
        if vkind == K_F32:
            t = <f32>velocity >= <f32>c.p[4]
        else:
            t = velocity >= c.p[4]
    c.term[i] = t
    cdef f64 reward = 100.0 if t else 0.0
    c.rew[i] = reward - fv_pow2(a) * 0.1
    # self.state = np.array([position, velocity], dtype=np.float32)
    st[i] = <f64>(<f32>position)
    st[n + i] = <f64>(<f32>velocity)
    c.kindf32[i] = 1
    c.obs[2 * i] = <f32>position
    c.obs[2 * i + 1] = <f32>velocity


cdef inline void _acrobot_dsdt(const f64 *p, const f64 *y, f64 *dy) noexcept nogil:
    # p: 0 m1*lc1**2, 1 m2, 2 l1**2 + lc2**2, 3 2*l1*lc2, 4 I1, 5 I2, 6 lc2**2,
    #    7 l1*lc2, 8 m2*lc2*g, 9 pi/2.0, 10 -m2*l1*lc2, 11 2*m2*l1*lc2,
    #    12 (m1*lc1 + m2*l1)*g, 13 m2*l1*lc2, 14 m2*lc2**2 + I2
    cdef f64 theta1 = y[0], theta2 = y[1], dtheta1 = y[2], dtheta2 = y[3], a = y[4]
    cdef f64 c2 = cos(theta2)
    cdef f64 s2 = sin(theta2)
    cdef f64 d1 = p[0] + p[1] * (p[2] + p[3] * c2) + p[4] + p[5]
    cdef f64 d2 = p[1] * (p[6] + p[7] * c2) + p[5]
    cdef f64 phi2 = p[8] * cos(theta1 + theta2 - p[9])
    cdef f64 phi1 = (p[10] * fv_pow2(dtheta2) * s2 - p[11] * dtheta2 * dtheta1 * s2
                     + p[12] * cos(theta1 - p[9]) + phi2)
    cdef f64 ddtheta2 = (a + d2 / d1 * phi1 - p[13] * fv_pow2(dtheta1) * s2 - phi2) / (
        p[14] - fv_pow2(d2) / d1)
    cdef f64 ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    dy[0] = dtheta1
    dy[1] = dtheta2
    dy[2] = ddtheta1
    dy[3] = ddtheta2
    dy[4] = 0.0


cdef inline void _acrobot_exact(Ctx *c, i64 i) noexcept nogil:
    # p: 0-14 see _acrobot_dsdt, 15 dt, 16 max_vel_1, 17 max_vel_2
    cdef i64 n = c.n
    cdef f64 *st = c.state
    cdef f64 y0[5]
    cdef f64 yt[5]
    cdef f64 k1[5]
    cdef f64 k2[5]
    cdef f64 k3[5]
    cdef f64 k4[5]
    cdef int j
    cdef i64 a = c.act_i[i]
    for j in range(4):
        y0[j] = st[j * n + i]
    y0[4] = -1.0 if a == 0 else (0.0 if a == 1 else 1.0)
    cdef f64 dt = c.p[15]
    cdef f64 dt2 = dt / 2.0
    _acrobot_dsdt(c.p, y0, k1)
    for j in range(5):
        yt[j] = y0[j] + dt2 * k1[j]
    _acrobot_dsdt(c.p, yt, k2)
    for j in range(5):
        yt[j] = y0[j] + dt2 * k2[j]
    _acrobot_dsdt(c.p, yt, k3)
    for j in range(5):
        yt[j] = y0[j] + dt * k3[j]
    _acrobot_dsdt(c.p, yt, k4)
    cdef f64 dt6 = dt / 6.0
    cdef f64 ns[4]
    for j in range(4):
        ns[j] = y0[j] + dt6 * (k1[j] + 2.0 * k2[j] + 2.0 * k3[j] + k4[j])
    for j in range(2):  # wrap(x, -pi, pi)
        while ns[j] > PI:
            ns[j] = ns[j] - 2.0 * PI
        while ns[j] < -PI:
            ns[j] = ns[j] + 2.0 * PI
    # bound(x, -M, M) = min(max(x, -M), M)
    if -c.p[16] > ns[2]:
        ns[2] = -c.p[16]
    if c.p[16] < ns[2]:
        ns[2] = c.p[16]
    if -c.p[17] > ns[3]:
        ns[3] = -c.p[17]
    if c.p[17] < ns[3]:
        ns[3] = c.p[17]
    for j in range(4):
        st[j * n + i] = ns[j]
    cdef bint t = -cos(ns[0]) - cos(ns[1] + ns[0]) > 1.0
    c.term[i] = t
    c.rew[i] = 0.0 if t else -1.0
    cdef f32 *o = c.obs + 6 * i
    o[0] = <f32>cos(ns[0])
    o[1] = <f32>sin(ns[0])
    o[2] = <f32>cos(ns[1])
    o[3] = <f32>sin(ns[1])
    o[4] = <f32>ns[2]
    o[5] = <f32>ns[3]


cdef inline f64 _angle_normalize(f64 x) noexcept nogil:
    # ((x + np.pi) % (2 * np.pi)) - np.pi with NumPy's float64 remainder
    cdef f64 b = 2.0 * PI
    cdef f64 a = x + PI
    cdef f64 m = fmod(a, b)
    if m != 0.0:
        if (b < 0) != (m < 0):
            m = m + b
    else:
        m = copysign(0.0, b)
    return m - PI


cdef inline void _pendulum_exact(Ctx *c, i64 i) noexcept nogil:
    # p: 0 3*g/(2*l), 1 3.0/(m*l**2), 2 dt, 3 max_speed, 4 max_torque
    cdef i64 n = c.n
    cdef f64 *st = c.state
    cdef f64 th = st[i], thdot = st[n + i]
    cdef f64 u, costs, b, newthdot, newth
    cdef f32 u32
    if c.act_f != NULL:
        # np.clip of the float32 action array runs in float32 (NumPy 1 and 2)
        u32 = c.act_f[i]
        if u32 < <f32>(-c.p[4]):
            u32 = <f32>(-c.p[4])
        if u32 > <f32>c.p[4]:
            u32 = <f32>c.p[4]
        u = <f64>u32
    else:
        u = c.act_d[i]
        if u < -c.p[4]:
            u = -c.p[4]
        if u > c.p[4]:
            u = c.p[4]
    if c.act_f != NULL and not c.legacy:
        # NEP 50: u**2, 0.001 * u**2 and 3.0/(m*l**2) * u stay float32
        b = <f64>(<f32>(<f32>0.001 * fv_powf2(u32)))
        costs = fv_pow2(_angle_normalize(th)) + 0.1 * fv_pow2(thdot) + b
        b = <f64>(<f32>c.p[1] * u32)
    else:
        # a float64 action, or (NumPy 1.x) a float32 one: float32 scalar ** / * a
        # Python number is float64 there
        costs = fv_pow2(_angle_normalize(th)) + 0.1 * fv_pow2(thdot) + 0.001 * fv_pow2(u)
        b = c.p[1] * u
    c.last_u[i] = u
    newthdot = thdot + (c.p[0] * sin(th) + b) * c.p[2]
    if newthdot < -c.p[3]:
        newthdot = -c.p[3]
    if newthdot > c.p[3]:
        newthdot = c.p[3]
    newth = th + newthdot * c.p[2]
    st[i] = newth
    st[n + i] = newthdot
    c.term[i] = 0
    c.rew[i] = -costs
    cdef f32 *o = c.obs + 3 * i
    o[0] = <f32>cos(newth)
    o[1] = <f32>sin(newth)
    o[2] = <f32>newthdot


cdef inline void _step_one(Ctx *c, i64 i) noexcept nogil:
    # (CartPole goes through _cartpole_block_range instead)
    if c.kind == MOUNTAINCAR:
        _mountaincar_exact(c, i)
    elif c.kind == MOUNTAINCAR_CONT:
        _mountaincar_cont_exact(c, i)
    elif c.kind == ACROBOT:
        _acrobot_exact(c, i)
    else:
        _pendulum_exact(c, i)


cdef i64 _step_range(Ctx *c, i64 start, i64 end) noexcept nogil:
    """Step envs [start, end) with autoreset; returns how many were reset."""
    if c.kind == CARTPOLE:
        return _cartpole_block_range(c, start, end)
    return _exact_range(c, start, end)


cdef i64 _exact_range(Ctx *c, i64 start, i64 end) noexcept nogil:
    cdef i64 i, nreset = 0
    cdef int d = c.obs_dim, k
    cdef bint done
    for i in range(start, end):
        c.reset_flag[i] = 0
        if c.mode == NEXT_STEP and c.needs_reset[i]:
            _reset_one(c, i)
            c.rew[i] = 0.0
            c.term[i] = 0
            c.trunc[i] = 0
            nreset += 1
            continue
        _step_one(c, i)
        c.steps[i] += 1
        c.trunc[i] = c.steps[i] >= c.max_steps
        done = c.term[i] or c.trunc[i]
        if c.mode == SAME_STEP:
            if done:
                for k in range(d):
                    c.final_obs[d * i + k] = c.obs[d * i + k]
                _reset_one(c, i)
                nreset += 1
        else:
            c.needs_reset[i] = done
    return nreset


# ---------------------------------------------------------------------------
# Fast mode (exact=False): CartPole with polynomial sin/cos over the
# structure-of-arrays state (vectorised C loop above). Not bit-identical.
# ---------------------------------------------------------------------------

cdef i64 _cartpole_block_range(Ctx *c, i64 start, i64 end) noexcept nogil:
    """CartPole (exact or fast) + TimeLimit + autoreset for envs [start, end).

    Every env is stepped by the vectorised block kernel; envs due for a
    NEXT_STEP reset are remembered first and reset afterwards (their step
    results are discarded), which gives the same results as not stepping them.
    """
    cdef i64 n = c.n, i, j, nidx = 0
    cdef i64 *idx = c.scratch
    cdef int d = 4, k
    if c.mode == NEXT_STEP:
        nidx = fv_collect(c.needs_reset, start, end, idx + start)
    # fast mode steps unless some |theta| is beyond its polynomials' range (then: libm)
    if not (c.fast and fv_cartpole_fast(start, end, c.p, c.flag0, c.max_steps, c.state, c.state + n,
                                        c.state + 2 * n, c.state + 3 * n, c.act_i, c.obs, c.rew,
                                        c.term, c.trunc, c.steps, c.needs_reset, c.reset_flag)):
        fv_cartpole_block(start, end, 1, c.p, c.flag0, c.max_steps, c.state, c.state + n,
                          c.state + 2 * n, c.state + 3 * n, c.act_i, c.obs, c.rew, c.term,
                          c.trunc, c.steps, c.needs_reset, c.reset_flag)
    if c.mode == NEXT_STEP:
        fv_cartpole_reset_next(idx + start, nidx, n, c.rng, c.state, c.obs, c.lo, c.hi, c.steps,
                               c.needs_reset, c.reset_flag, c.rew, c.term, c.trunc)
        return nidx
    if c.mode == SAME_STEP:
        for i in range(start, end):
            if c.needs_reset[i]:
                for k in range(d):
                    c.final_obs[d * i + k] = c.obs[d * i + k]
                _reset_one(c, i)
                nidx += 1
        return nidx
    return 0


cdef i64 _chunk_cb(void *ctx, i64 lo, i64 hi) noexcept nogil:
    return _step_range(<Ctx*>ctx, lo, hi)


cdef i64 _check_actions(Ctx *c, i64 lo, i64 hi) noexcept nogil:
    """Check envs [lo, hi): the index of the first invalid action, else (DISABLED
    mode) n + the index of the first env stepped while done, else -1."""
    cdef i64 i, n = c.n
    if c.act_i != NULL:
        i = fv_first_bad_action(c.act_i + lo, hi - lo, 2 if c.kind == CARTPOLE else 3)
        if i >= 0:
            return lo + i
    elif c.act_f != NULL:
        for i in range(lo, hi):
            if c.act_f[i] != c.act_f[i]:
                return i
    else:
        for i in range(lo, hi):
            if c.act_d[i] != c.act_d[i]:
                return i
    if c.mode == DISABLED:
        i = fv_first_set(c.needs_reset + lo, hi - lo)
        if i >= 0:
            return n + lo + i
    return -1


cdef i64 _check_chunk_cb(void *ctx, i64 lo, i64 hi) noexcept nogil:
    return _check_actions(<Ctx*>ctx, lo, hi) >= 0


cdef class ClassicBatch:
    """State, buffers and step of N copies of one classic-control env.

    The base of ``fastvec.NativeVectorEnv`` (which adds the Gymnasium API in
    Python); ``step`` lives here so that a vector step is one C-level call. All
    arrays are allocated once by ``_setup``; the kernels write into them.
    """

    cdef Ctx c
    cdef fv_pool *_pool
    cdef public int _kind, _mode, _num_threads, _obs_dim, _discrete
    cdef public bint copy, _was_reset, _post
    cdef public object _state, _kindf32, _steps, _needs_reset, _rng, _obs, _rew, _term, _trunc
    cdef public object _final_obs, _reset_flag, _last_u, _scratch, _params
    cdef object _act_ref
    cdef public i64 parallel_threshold

    def _setup(self, int kind, i64 num_envs, int obs_dim, int mode, params, int flag0,
               i32 max_steps, bint fast, int num_threads, i64 parallel_threshold):
        """Allocate the buffers and point the kernel context at them."""
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        cdef Ctx *c = &self.c
        self._kind = kind
        self._obs_dim = obs_dim
        self._mode = mode
        self._num_threads = max(1, num_threads)
        self.parallel_threshold = parallel_threshold
        self._discrete = kind in (CARTPOLE, MOUNTAINCAR, ACROBOT)
        self._was_reset = False
        n = num_envs
        self._state = np.zeros((4, n), dtype=np.float64)
        self._kindf32 = np.zeros(n, dtype=np.uint8)
        self._steps = np.zeros(n, dtype=np.int32)
        self._needs_reset = np.zeros(n, dtype=np.uint8)
        self._rng = np.zeros((n, 4), dtype=np.uint64)
        self._obs = np.zeros((n, obs_dim), dtype=np.float32)
        self._rew = np.zeros(n, dtype=np.float64)
        self._term = np.zeros(n, dtype=np.bool_)
        self._trunc = np.zeros(n, dtype=np.bool_)
        self._final_obs = np.zeros((n, obs_dim), dtype=np.float32)
        self._reset_flag = np.zeros(n, dtype=np.uint8)
        self._last_u = np.full(n, np.nan, dtype=np.float64)
        self._scratch = np.zeros(n, dtype=np.int64)
        self._params = np.zeros(24, dtype=np.float64)
        self._params[:len(params)] = params
        c.kind = kind
        c.mode = mode
        c.fast = fast
        c.n = n
        c.max_steps = max_steps
        c.obs_dim = obs_dim
        c.flag0 = flag0
        c.legacy = legacy_promotion()
        c.state = <f64*>cnp.PyArray_DATA(<cnp.ndarray>self._state)
        c.kindf32 = <u8*>cnp.PyArray_DATA(<cnp.ndarray>self._kindf32)
        c.steps = <i32*>cnp.PyArray_DATA(<cnp.ndarray>self._steps)
        c.needs_reset = <u8*>cnp.PyArray_DATA(<cnp.ndarray>self._needs_reset)
        c.rng = <uint64_t*>cnp.PyArray_DATA(<cnp.ndarray>self._rng)
        c.obs = <f32*>cnp.PyArray_DATA(<cnp.ndarray>self._obs)
        c.rew = <f64*>cnp.PyArray_DATA(<cnp.ndarray>self._rew)
        c.term = <u8*>cnp.PyArray_DATA(<cnp.ndarray>self._term)
        c.trunc = <u8*>cnp.PyArray_DATA(<cnp.ndarray>self._trunc)
        c.final_obs = <f32*>cnp.PyArray_DATA(<cnp.ndarray>self._final_obs)
        c.reset_flag = <u8*>cnp.PyArray_DATA(<cnp.ndarray>self._reset_flag)
        c.last_u = <f64*>cnp.PyArray_DATA(<cnp.ndarray>self._last_u)
        c.scratch = <i64*>cnp.PyArray_DATA(<cnp.ndarray>self._scratch)
        cdef int k
        for k in range(24):
            c.p[k] = self._params[k]
        c.act_i = NULL
        c.act_f = NULL
        c.act_d = NULL

    def _set_reset_bounds(self, lo, hi):
        """Bounds of the uniform draws of the next resets (one pair per drawn component)."""
        cdef int k
        for k in range(4):
            self.c.lo[k] = lo[k]
            self.c.hi[k] = hi[k]

    def _set_num_threads(self, int num_threads):
        self._num_threads = max(1, num_threads)

    cdef int _bind_actions(self, actions) except -1:
        """Point the kernel at the action buffer (fast path: already the native dtype and shape)."""
        cdef cnp.ndarray a
        cdef i64 n = self.c.n
        self.c.act_i = NULL
        self.c.act_f = NULL
        self.c.act_d = NULL
        if type(actions) is np.ndarray:
            a = <cnp.ndarray>actions
            if cnp.PyArray_IS_C_CONTIGUOUS(a) and cnp.PyArray_ISALIGNED(a):
                if self._discrete:
                    if (cnp.PyArray_TYPE(a) == cnp.NPY_INT64 and cnp.PyArray_NDIM(a) == 1
                            and cnp.PyArray_DIMS(a)[0] == n):
                        self._act_ref = a
                        self.c.act_i = <const i64*>cnp.PyArray_DATA(a)
                        return 0
                elif cnp.PyArray_NDIM(a) == 2 and cnp.PyArray_DIMS(a)[0] == n and cnp.PyArray_DIMS(a)[1] == 1:
                    if cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT32:
                        self._act_ref = a
                        self.c.act_f = <const f32*>cnp.PyArray_DATA(a)
                        return 0
                    if cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT64:
                        self._act_ref = a
                        self.c.act_d = <const f64*>cnp.PyArray_DATA(a)
                        return 0
        a = self._coerce_actions(actions)
        self._act_ref = a
        if self._discrete:
            self.c.act_i = <const i64*>cnp.PyArray_DATA(a)
        elif cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT32:
            self.c.act_f = <const f32*>cnp.PyArray_DATA(a)
        else:
            self.c.act_d = <const f64*>cnp.PyArray_DATA(a)
        return 0

    def _coerce_actions(self, actions):
        """Slow path: convert or reject actions that are not already the native dtype/shape."""
        n = self.c.n
        arr = np.asarray(actions)
        if self._discrete:
            expected = f"an integer array of shape ({n},)"
            if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
                raise TypeError(f"actions must be {expected}; got dtype {arr.dtype} and shape {arr.shape}")
            if arr.shape != (n,):
                raise ValueError(f"actions must be {expected}; got shape {arr.shape}")
            if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
                raise ValueError(f"actions out of range: {arr.max()}")
            return np.ascontiguousarray(arr, dtype=np.int64)
        expected = f"a float array of shape ({n}, 1)"
        if arr.dtype == np.bool_ or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
            raise TypeError(f"actions must be {expected}; got dtype {arr.dtype} and shape {arr.shape}")
        if arr.shape != (n, 1):
            raise ValueError(f"actions must be {expected}; got shape {arr.shape}")
        if arr.dtype == np.float32:
            return np.ascontiguousarray(arr)
        return np.ascontiguousarray(arr, dtype=np.float64)

    cdef bint _use_pool(self) except -1:
        """True if this step runs on the thread pool (started, or restarted after a fork, here)."""
        cdef int nt = self._num_threads
        if nt <= 1 or self.c.n < self.parallel_threshold:
            return False
        if not fv_pool_usable(self._pool) or self._pool.nhelpers != nt - 1:
            fv_pool_free(self._pool)
            self._pool = fv_pool_new(nt - 1)
        return self._pool != NULL

    cdef inline i64 _nchunks(self) noexcept nogil:
        # a few chunks per thread (a late helper still gets some); each env's
        # result depends only on its own state, action and PCG64 stream, so the
        # split never changes the results
        return max(1, min(4 * self._num_threads, self.c.n // 64))

    cdef i64 _check(self, bint pooled) except -2:
        """_check_actions over all envs; on the pool, the threads screen their chunks
        and the first bad index (only when there is one) is then found serially.

        Only when the helpers took part in the last job: on a machine where they
        do not get a core in time, one more pool round per step would cost more
        than the serial check."""
        cdef Ctx *c = &self.c
        cdef i64 nbad, nchunks = self._nchunks()
        if pooled and self._pool.helped > 0:
            with nogil:
                nbad = fv_pool_run(self._pool, _check_chunk_cb, c, c.n, nchunks)
            return _check_actions(c, 0, c.n) if nbad else -1
        if c.n >= 1024:
            with nogil:
                nbad = _check_actions(c, 0, c.n)
            return nbad
        return _check_actions(c, 0, c.n)

    cdef i64 _run(self, bint pooled) except -1:
        cdef Ctx *c = &self.c
        cdef i64 n = c.n
        cdef i64 total = 0, nchunks = self._nchunks()
        if pooled:
            with nogil:
                total = fv_pool_run(self._pool, _chunk_cb, c, n, nchunks)
        elif n >= 1024:
            with nogil:
                total = _step_range(c, 0, n)
        else:
            total = _step_range(c, 0, n)
        return total

    def __dealloc__(self):
        fv_pool_free(self._pool)
        self._pool = NULL

    def step(self, actions):
        """Step every env with ``actions``; returns ``(obs, rewards, terminated, truncated, infos)``.

        Raises ValueError/TypeError for invalid actions (naming the env index)
        and, in DISABLED mode, for stepping an env whose episode ended without
        a reset; nothing is stepped then.
        """
        if not self._was_reset:
            raise ResetNeeded("Cannot call env.step() before calling env.reset()")
        self._bind_actions(actions)
        cdef bint pooled = self._use_pool()
        cdef i64 bad = self._check(pooled)
        if bad >= 0:
            self._act_ref = None
            self._raise_bad(actions, bad)
        cdef i64 nreset = self._run(pooled)
        self._act_ref = None
        if nreset and self._post:
            infos = self._after_resets(True)
        else:
            infos = {}
        if self.copy:
            return (self._fresh(self._obs, cnp.NPY_FLOAT32), self._fresh(self._rew, cnp.NPY_FLOAT64),
                    self._fresh(self._term, cnp.NPY_BOOL), self._fresh(self._trunc, cnp.NPY_BOOL), infos)
        return self._obs, self._rew, self._term, self._trunc, infos

    cdef inline object _fresh(self, object src, int typenum):
        """A new C-contiguous copy of one of our (contiguous) output buffers."""
        cdef cnp.ndarray a = <cnp.ndarray>src
        cdef cnp.ndarray out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(a), cnp.PyArray_DIMS(a), typenum, 0)
        memcpy(cnp.PyArray_DATA(out), cnp.PyArray_DATA(a), cnp.PyArray_NBYTES(a))
        return out

    def _raise_bad(self, actions, i64 bad):
        n = self.c.n
        if bad >= n:
            raise ValueError(
                f"env {bad - n} was stepped after its episode ended (terminated or truncated) "
                "with autoreset_mode=DISABLED; reset it first with "
                "reset(options={'reset_mask': mask})")
        arr = np.asarray(actions)
        if self._discrete:
            hi = 2 if self._kind == CARTPOLE else 3
            raise ValueError(f"action {int(arr.reshape(-1)[bad])} of env {bad} is not in Discrete({hi}) "
                             f"(expected an integer in [0, {hi - 1}])")
        raise ValueError(f"action of env {bad} is NaN; expected a float")

    def _reset_envs(self, mask=None):
        """Reset the envs where ``mask`` (bool [n]) is set, or all; draw from their PCG64 streams."""
        cdef Ctx *c = &self.c
        cdef i64 i, n = c.n
        cdef const u8 *m = NULL
        cdef cnp.ndarray marr
        if mask is not None:
            marr = np.ascontiguousarray(mask, dtype=np.uint8)
            m = <const u8*>cnp.PyArray_DATA(marr)
        with nogil:
            for i in range(n):
                c.reset_flag[i] = 0
                if m == NULL or m[i]:
                    _reset_one(c, i)
                    c.term[i] = 0
                    c.trunc[i] = 0


def legacy_promotion():
    """True when NumPy promotes ``float32 scalar * Python float`` to float64 (NumPy 1.x's
    value-based promotion) rather than keeping float32 (NEP 50, NumPy 2). Gymnasium's
    MountainCarContinuous and Pendulum compute in float64 or float32 accordingly."""
    return type(np.float32(1.0) * 1.0) is not np.float32


def pcg64_next_doubles(uint64_t[::1] s, i64 k):
    """Draw k doubles from a PCG64 state (4 uint64, modified in place); test helper."""
    out = np.empty(k, dtype=np.float64)
    cdef f64[::1] o = out
    cdef i64 j
    for j in range(k):
        o[j] = fv_next_double(&s[0])
    return out


fv_fast_init()


def fast_isa():
    """Name of the instruction set the fast (exact=False) CartPole kernel uses."""
    return fv_fast_name(fv_fast_level).decode()


def fast_isas():
    """Instruction sets of the fast kernel this CPU and build can run, baseline first."""
    return [fv_fast_name(k).decode() for k in range(fv_isa_max + 1)]


def _set_fast_isa(name):
    """Force the fast kernel onto one ISA (tests / benchmarks); None = the best. Returns the previous name."""
    prev = fast_isa()
    names = fast_isas()
    if name is None:
        fv_fast_select(-1)
    elif name in names:
        fv_fast_select(names.index(name))
    else:
        raise ValueError(f"fast ISA {name!r} not available here; available: {names}")
    return prev
