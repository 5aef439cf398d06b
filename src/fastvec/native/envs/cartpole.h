/* cartpole.h: Gymnasium's CartPole-v1 / v0 on the native-env kit, bit-identical to
 * gymnasium.envs.classic_control.CartPoleEnv (euler integrator).
 *
 * The states are stored as a structure of arrays (FV_SOA) and the env brings its own
 * step_range, which steps blocks of envs with loops the compiler vectorises: exact mode
 * (packed IEEE operations give the scalar results, so it stays exact) and the fast mode
 * (exact=False: Taylor-polynomial sin/cos and reciprocals, not bit-identical), the latter
 * also compiled for AVX2 and AVX-512 and picked at import from the CPU's features.
 */
#ifndef FV_CARTPOLE_H
#define FV_CARTPOLE_H

#include "fv_env.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* CartPoleEnv's attributes of the same names; reset draws each state component from
   uniform(reset_low, reset_high). */
#define CARTPOLE_PARAMS(X)                 \
    X(double, gravity)                     \
    X(double, masspole)                    \
    X(double, total_mass)                  \
    X(double, length)                      \
    X(double, polemass_length)             \
    X(double, force_mag)                   \
    X(double, tau)                         \
    X(double, theta_threshold_radians)     \
    X(double, x_threshold)                 \
    X(uint8_t, sutton_barto_reward)        \
    X(double, reset_low)                   \
    X(double, reset_high)
FV_STRUCT(cartpole_params, CARTPOLE_PARAMS)

#define CARTPOLE_STATE(X) X(double, x) X(double, x_dot) X(double, theta) X(double, theta_dot)
FV_STRUCT(cartpole_state, CARTPOLE_STATE)

/* The four state arrays of the batch (FV_SOA: field k at state + offsetof(k) * n). */
#define CARTPOLE_SOA(b, X, XD, TH, THD)                                                  \
    double *X = (double *)(b)->state, *XD = X + (b)->n, *TH = X + 2 * (b)->n, *THD = X + 3 * (b)->n

/* Reset env i: each component from uniform(reset_low, reset_high), as CartPoleEnv.reset. */
static void cartpole_reset_one(fv_batch *b, int64_t i) {
    const cartpole_params *p = (const cartpole_params *)b->params;
    CARTPOLE_SOA(b, X, XD, TH, THD);
    float *o = (float *)b->obs + 4 * i;
    fv_rng *r = b->rng + i;
    X[i] = fv_rng_uniform(r, p->reset_low, p->reset_high);
    XD[i] = fv_rng_uniform(r, p->reset_low, p->reset_high);
    TH[i] = fv_rng_uniform(r, p->reset_low, p->reset_high);
    THD[i] = fv_rng_uniform(r, p->reset_low, p->reset_high);
    o[0] = (float)X[i]; o[1] = (float)XD[i]; o[2] = (float)TH[i]; o[3] = (float)THD[i];
    fv_mark_reset(b, i);
}

/* NEXT_STEP resets of envs idx[0..k): the draws and arithmetic of cartpole_reset_one, with
   `restrict` buffers so that consecutive envs' draws overlap, and the step outputs of a
   reset env zeroed. */
static void cartpole_reset_next(const int64_t *restrict idx, int64_t k, int64_t n,
        fv_rng *restrict rng, double *restrict state, float *restrict obs, double lo, double hi,
        int32_t *restrict steps, uint8_t *restrict needs_reset, uint8_t *restrict reset_flag,
        double *restrict rew, uint8_t *restrict term, uint8_t *restrict trunc) {
    const double w = hi - lo;
    for (int64_t j = 0; j < k; j++) {
        int64_t i = idx[j];
        fv_rng *s = rng + i;
#if defined(__GNUC__) || defined(__clang__)
        /* the PCG64 states are only touched here, so they are rarely in cache */
        if (j + 8 < k) __builtin_prefetch(rng + idx[j + 8], 1);
#endif
        double a = lo + w * fv_rng_random(s);
        double b = lo + w * fv_rng_random(s);
        double c = lo + w * fv_rng_random(s);
        double d = lo + w * fv_rng_random(s);
        state[i] = a; state[n + i] = b; state[2 * n + i] = c; state[3 * n + i] = d;
        obs[4 * i] = (float)a; obs[4 * i + 1] = (float)b; obs[4 * i + 2] = (float)c; obs[4 * i + 3] = (float)d;
        steps[i] = 0; needs_reset[i] = 0; reset_flag[i] = 1;
        rew[i] = 0.0; term[i] = 0; trunc[i] = 0;
    }
}

/* Fast-mode sin/cos: Taylor polynomials, valid for |theta| <= pi/4 (the caller checks
   theta**2 <= 0.6 and otherwise takes the exact path). */
#define CARTPOLE_SIN_POLY(th, r2) ((th) * (1.0 + (r2) * (-1.0 / 6.0 + (r2) * (1.0 / 120.0 + (r2) * (-1.0 / 5040.0 + (r2) * ( \
    1.0 / 362880.0 + (r2) * (-1.0 / 39916800.0 + (r2) * (1.0 / 6227020800.0 + (r2) * (-1.0 / 1307674368000.0)))))))))
#define CARTPOLE_COS_POLY(r2) (1.0 + (r2) * (-0.5 + (r2) * (1.0 / 24.0 + (r2) * (-1.0 / 720.0 + (r2) * ( \
    1.0 / 40320.0 + (r2) * (-1.0 / 3628800.0 + (r2) * (1.0 / 479001600.0 + (r2) * (-1.0 / 87178291200.0 + (r2) * (1.0 / 20922789888000.0)))))))))

/* 1 if some x[i]**2 > lim2. An integer OR of the comparison masks: it vectorises, and
   unlike a float sum it is not one long chain of adds. */
#define CARTPOLE_ANY_BEYOND(x, lo, hi, lim2, out) {                                      \
    int64_t acc_ = 0;                                                                    \
    for (int64_t i_ = (lo); i_ < (hi); i_++) acc_ |= (int64_t)((x)[i_] * (x)[i_] > (lim2)); \
    (out) = acc_ != 0; }
static int cartpole_any_beyond(const double *restrict x, int64_t lo, int64_t hi, double lim2) {
    int r;
    CARTPOLE_ANY_BEYOND(x, lo, hi, lim2, r)
    return r;
}

/* CartPole over the structure-of-arrays state, blocks of 256 envs: sin/cos first (libm
   per env when exact, a vectorised Taylor polynomial when not, valid for |theta| <= pi/4:
   the caller checks), then the dynamics as plain float64 arithmetic that the compiler
   vectorises (packed IEEE operations give the same results as scalar ones, so the exact
   mode stays exact), then the flags. Written in C only to mark the buffers `restrict`. */
static void cartpole_block(int64_t lo, int64_t hi, int exact, const cartpole_params *p, int32_t max_steps,
        double *restrict X, double *restrict XD, double *restrict TH, double *restrict THD,
        const int64_t *act64, float *restrict obs, double *restrict rew,
        uint8_t *restrict term, uint8_t *restrict trunc, int32_t *restrict steps,
        uint8_t *restrict needs_reset, uint8_t *restrict reset_flag) {
    const double g = p->gravity, mp = p->masspole, tm = p->total_mass, ln = p->length, pml = p->polemass_length;
    const double fm = p->force_mag, tau = p->tau, thr = p->theta_threshold_radians, xthr = p->x_threshold;
    const double rew_live = p->sutton_barto_reward ? 0.0 : 1.0, rew_dead = p->sutton_barto_reward ? -1.0 : 1.0;
    double S[256], C[256];
    /* actions are validated 0/1: read the low 32 bits of each int64 (SSE2 has no packed
       int64 compare or conversion; it has int32 ones) */
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
                S[i - b] = CARTPOLE_SIN_POLY(th, r2);
                C[i - b] = CARTPOLE_COS_POLY(r2);
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
    /* termination and reward (the compiler does not narrow float64 masks to bytes on
       SSE2, so two envs at a time with intrinsics; same comparisons) */
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

/* Fast mode (exact=False) with runtime CPU dispatch. Wheels are built for baseline x86-64
   (SSE2: 2 doubles per vector); on AVX2 / AVX-512 machines the fast block is also compiled
   for those ISAs (4 / 8 doubles per vector, FMA contraction allowed: the fast mode is not
   bit-exact anyway) and picked once from the CPU's features. The exact mode never goes
   through these clones, so its IEEE results do not depend on the CPU. The clones run one
   fused loop (dynamics, obs, reward, termination, TimeLimit, flags), which the wider ISAs
   vectorise whole (SSE2 cannot narrow float64 masks to bytes, hence the split loops above). */
#define CARTPOLE_FAST_ARGS (int64_t lo, int64_t hi, const cartpole_params *p, int32_t max_steps, \
        double *restrict X, double *restrict XD, double *restrict TH, double *restrict THD,      \
        const int64_t *restrict act64, float *restrict obs, double *restrict rew,               \
        uint8_t *restrict term, uint8_t *restrict trunc, int32_t *restrict steps,               \
        uint8_t *restrict needs_reset, uint8_t *restrict reset_flag)
typedef int (*cartpole_fast_fn) CARTPOLE_FAST_ARGS;
/* The polynomials hold for |theta| <= pi/4 (theta**2 <= 0.6 < (pi/4)**2): each returns 0
   without stepping when some theta is beyond (the caller then steps the range exactly),
   1 after stepping. */
static int cartpole_fast_default CARTPOLE_FAST_ARGS {
    if (cartpole_any_beyond(TH, lo, hi, 0.6)) return 0;
    cartpole_block(lo, hi, 0, p, max_steps, X, XD, TH, THD, act64, obs, rew,
                   term, trunc, steps, needs_reset, reset_flag);
    return 1;
}
/* Only where it is known to work: GCC >= 8 or Clang >= 9 on x86 Linux/BSD. Not on Windows
   (MinGW GCC does not align the stack for spilled AVX registers) nor macOS (no need to
   risk __builtin_cpu_supports' runtime there); those build the baseline variant only.
   FV_NO_DISPATCH (setup.py: FASTVEC_NO_DISPATCH=1) builds the baseline variant only. */
#if !defined(FV_NO_DISPATCH) && (defined(__x86_64__) || defined(__i386__)) \
    && !defined(_WIN32) && !defined(__APPLE__) \
    && ((defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 8))
#define CARTPOLE_DISPATCH 1
#if defined(__clang__)
#define CARTPOLE_CONTRACT_FAST _Pragma("clang fp contract(fast)")
#else
#define CARTPOLE_CONTRACT_FAST
#endif
#define CARTPOLE_FAST_BODY {                                                                 \
    CARTPOLE_CONTRACT_FAST                                                                   \
    int beyond;                                                                              \
    CARTPOLE_ANY_BEYOND(TH, lo, hi, 0.6, beyond)                                             \
    if (beyond) return 0;                                                                    \
    const double g = p->gravity, mp = p->masspole, tm = p->total_mass, ln = p->length;      \
    const double pml = p->polemass_length, fm = p->force_mag, tau = p->tau;                  \
    const double thr = p->theta_threshold_radians, xthr = p->x_threshold;                    \
    const double rew_live = p->sutton_barto_reward ? 0.0 : 1.0;                              \
    const double rew_dead = p->sutton_barto_reward ? -1.0 : 1.0;                             \
    const double itm = 1.0 / tm, k43 = ln * (4.0 / 3.0), kmp = ln * mp * itm, kx = pml * itm; \
    const int32_t *restrict act = (const int32_t *)act64; /* low words, as above (x86: little-endian) */ \
    for (int64_t i = lo; i < hi; i++) {                                                      \
        double x = X[i], xd = XD[i], th = TH[i], thd = THD[i];                               \
        double r2 = th * th, st = CARTPOLE_SIN_POLY(th, r2), ct = CARTPOLE_COS_POLY(r2);     \
        double force = fm * (double)(2 * act[2 * i] - 1);                                    \
        double temp = (force + pml * (thd * thd) * st) * itm;                                \
        double thacc = (g * st - ct * temp) / (k43 - kmp * (ct * ct));                      \
        double xacc = temp - kx * thacc * ct;                                                \
        x = x + tau * xd; xd = xd + tau * xacc; th = th + tau * thd; thd = thd + tau * thacc; \
        X[i] = x; XD[i] = xd; TH[i] = th; THD[i] = thd;                                      \
        obs[4 * i] = (float)x; obs[4 * i + 1] = (float)xd; obs[4 * i + 2] = (float)th; obs[4 * i + 3] = (float)thd; \
        int t = (x < -xthr) | (x > xthr) | (th < -thr) | (th > thr);                         \
        rew[i] = t ? rew_dead : rew_live;                                                    \
        int32_t s = steps[i] + 1;                                                            \
        int tr = s >= max_steps;                                                             \
        steps[i] = s;                                                                        \
        term[i] = (uint8_t)t;                                                                \
        trunc[i] = (uint8_t)tr;                                                              \
        reset_flag[i] = 0;                                                                   \
        needs_reset[i] = (uint8_t)(t | tr);                                                  \
    }                                                                                        \
    return 1; }
__attribute__((target("avx2,fma"))) static int cartpole_fast_avx2 CARTPOLE_FAST_ARGS CARTPOLE_FAST_BODY
__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma"))) static int cartpole_fast_avx512 CARTPOLE_FAST_ARGS CARTPOLE_FAST_BODY
#endif
/* ISA levels: 0 default (baseline), 1 AVX2+FMA, 2 AVX-512 (F/VL/BW/DQ) */
static const char *const cartpole_isa_names[3] = {"default", "avx2", "avx512"};
static int cartpole_isa_max = 0;  /* best level this CPU (and build) supports */
static cartpole_fast_fn cartpole_fast_impl = cartpole_fast_default;
static int cartpole_fast_level = 0;
/* Pick the level (clamped to what the CPU supports); -1 = best. Returns the level set. */
static int cartpole_fast_select(int level) {
    static const cartpole_fast_fn impls[3] = {
        cartpole_fast_default,
#if defined(CARTPOLE_DISPATCH)
        cartpole_fast_avx2, cartpole_fast_avx512
#else
        cartpole_fast_default, cartpole_fast_default
#endif
    };
    if (level < 0 || level > cartpole_isa_max) level = cartpole_isa_max;
    cartpole_fast_level = level;
    cartpole_fast_impl = impls[level];
    return level;
}
/* Called once at import. __builtin_cpu_supports also checks that the OS saves the wide registers. */
static void cartpole_fast_init(void) {
#if defined(CARTPOLE_DISPATCH)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        cartpole_isa_max = 1;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")
                && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
            cartpole_isa_max = 2;
    }
#endif
    cartpole_fast_select(-1);
}
static const char *cartpole_fast_name(int level) { return cartpole_isa_names[level < 0 || level > 2 ? 0 : level]; }

/* Step envs [lo, hi) with TimeLimit and autoreset (the kit's contract for step_range).
   Every env is stepped by the block kernel; envs due for a NEXT_STEP reset are listed
   first and reset afterwards (their step results are discarded), which gives the same
   results as not stepping them. */
static int64_t cartpole_step_range(fv_batch *b, int64_t lo, int64_t hi) {
    const cartpole_params *p = (const cartpole_params *)b->params;
    CARTPOLE_SOA(b, X, XD, TH, THD);
    int64_t nidx = 0, *idx = b->scratch + lo;
    float *obs = (float *)b->obs;
    if (b->mode == FV_NEXT_STEP) nidx = fv_collect(b->needs_reset, lo, hi, idx);
    /* fast mode steps unless some |theta| is beyond its polynomials' range (then: libm) */
    if (!(b->fast && cartpole_fast_impl(lo, hi, p, b->max_steps, X, XD, TH, THD, b->act_i, obs, b->rew,
                                        b->term, b->trunc, b->steps, b->needs_reset, b->reset_flag)))
        cartpole_block(lo, hi, 1, p, b->max_steps, X, XD, TH, THD, b->act_i, obs, b->rew, b->term,
                       b->trunc, b->steps, b->needs_reset, b->reset_flag);
    if (b->mode == FV_NEXT_STEP) {
        cartpole_reset_next(idx, nidx, b->n, b->rng, X, obs, p->reset_low, p->reset_high, b->steps,
                            b->needs_reset, b->reset_flag, b->rew, b->term, b->trunc);
        return nidx;
    }
    if (b->mode == FV_SAME_STEP) {
        for (int64_t i = lo; i < hi; i++) {
            if (b->needs_reset[i]) {
                fv_keep_final_obs(b, i);
                cartpole_reset_one(b, i);
                nidx++;
            }
        }
    }
    return nidx;
}

static const fv_env_def cartpole_env = FV_ENV_DEF(cartpole, cartpole_params, cartpole_state, float, FV_DISCRETE,
                                                  FV_SOA, cartpole_step_range, cartpole_reset_one);

#endif /* FV_CARTPOLE_H */
