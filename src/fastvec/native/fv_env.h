/* fv_env.h: fastvec's native-env kit, the C side.
 *
 * An env is a params struct, a state struct and two functions; FV_ENV turns them into a
 * compiled env (an fv_env_def) that fastvec.NativeVectorEnv steps in batches without the
 * GIL: TimeLimit truncation, the three autoreset modes, seeding, threads, action checks
 * and Gymnasium's API are the kit's. docs/native-envs.md walks through an example.
 *
 *     #include "fv_env.h"
 *     #define GRID_PARAMS(X) X(int64_t, size) X(double, step_reward)
 *     #define GRID_STATE(X)  X(int64_t, x) X(int64_t, y)
 *     FV_STRUCT(grid_params, GRID_PARAMS)      // typedef struct {...} grid_params, fields named for Python
 *     FV_STRUCT(grid_state, GRID_STATE)
 *     static inline void grid_reset(const grid_params *p, grid_state *s, fv_rng *rng, float *obs);
 *     static inline void grid_step(const grid_params *p, grid_state *s, int64_t action,
 *                                  float *obs, double *reward, uint8_t *terminated);
 *     FV_ENV(grid, grid_params, grid_state, float, FV_DISCRETE)   // defines grid_env
 *
 * reset draws the new episode from the env's own random stream (fv_rng.h) and writes the
 * first observation; step advances one env by one action and writes the observation, the
 * reward and terminated (0 or 1). Actions: FV_DISCRETE passes an int64_t in [0, n), already
 * checked against the Discrete(n) space; FV_BOX passes an fv_box (the env's action row as
 * float32 or as float64, as the caller gave it). Field types: double, float, int64_t,
 * int32_t, uint8_t. Observation element types: the same.
 *
 * Envs compute as Python does: no FMA contraction here (it would change results),
 * fv_pow2 is Python's x ** 2 (libm pow, which is not always x * x), and fv_f32 rounds a
 * double to a NumPy float32's value (where (double)(float)x can be miscompiled).
 */
#ifndef FV_ENV_H
#define FV_ENV_H

/* No FMA contraction. x86-64 without -march has no FMA, and the GCC pragma also disables
   its vectoriser, so it is only used where contraction could happen. */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__) && (defined(__FMA__) || !(defined(__x86_64__) || defined(__i386__)))
#pragma GCC optimize ("fp-contract=off")
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fv_rng.h"

/* Version of the layout of fv_batch / fv_env_def; the runner refuses an env built against another. */
#define FV_ABI 1

#if defined(__GNUC__) || defined(__clang__)
#define FV_INLINE static inline __attribute__((always_inline))
#else
#define FV_INLINE static inline
#endif

/* gymnasium.vector.AutoresetMode */
enum fv_autoreset { FV_NEXT_STEP = 0, FV_SAME_STEP = 1, FV_DISABLED = 2 };
/* The action space: Discrete(n) (int64 actions) or a float Box. */
enum fv_action_kind { FV_DISCRETE = 0, FV_BOX = 1 };
/* How the runner lays out the n states: an array of structs, or field k of env i at
   ((T *)(state + offsetof(S, k) * n))[i] (structure of arrays, for envs that vectorise
   over envs; they supply their own step_range). */
enum fv_layout { FV_AOS = 0, FV_SOA = 1 };

/* NumPy type string of a field or observation element type. */
#define FV_DTYPE(T) _Generic((T)0, float: "f4", double: "f8", int32_t: "i4", int64_t: "i8", uint8_t: "u1")

/* One named field of a params or state struct. */
typedef struct fv_field {
    const char *name;
    size_t offset;
    const char *dtype;
} fv_field;

/* FV_STRUCT(NAME, LIST): `typedef struct {...} NAME` from an X-macro list of (type, name)
   pairs, and NAME_fields(), the table that lets Python read and write the fields by name. */
#define FV__MEMBER(T, name) T name;
#define FV__FIELD(T, name) {#name, offsetof(fv__struct, name), FV_DTYPE(T)},
#define FV_STRUCT(NAME, LIST)                                                   \
    typedef struct NAME { LIST(FV__MEMBER) } NAME;                              \
    static const fv_field *NAME##_fields(int *count) {                          \
        typedef NAME fv__struct;                                                \
        static const fv_field fields[] = { LIST(FV__FIELD) };                   \
        *count = (int)(sizeof(fields) / sizeof(fields[0]));                     \
        return fields;                                                          \
    }

/* The batch the runner hands an env: buffers of all n envs. Per env i: obs row
   obs + i * obs_size (elements), reward rew[i], flags term/trunc[i] (0 or 1). */
typedef struct fv_batch {
    int64_t n;
    int32_t max_steps;     /* TimeLimit */
    int mode;              /* enum fv_autoreset */
    int fast;              /* 1: NativeVectorEnv(exact=False); an env may trade exactness for speed */
    const void *params;    /* the env's params struct */
    void *state;           /* the n states (enum fv_layout) */
    fv_rng *rng;           /* [n] */
    void *obs;             /* [n, obs_size] */
    void *final_obs;       /* [n, obs_size] SAME_STEP: the observation before the reset */
    int64_t obs_size;      /* elements per observation */
    size_t obs_bytes;      /* bytes per observation */
    double *rew;           /* [n] */
    uint8_t *term;         /* [n] */
    uint8_t *trunc;        /* [n] */
    int32_t *steps;        /* [n] steps since the env's reset */
    uint8_t *needs_reset;  /* [n] NEXT_STEP / DISABLED: the episode ended on the previous step */
    uint8_t *reset_flag;   /* [n] 1 where this call reset the env */
    int64_t *scratch;      /* [n] free for the env's step_range (its own chunk's rows only) */
    const int64_t *act_i;  /* FV_DISCRETE: [n] */
    const float *act_f;    /* FV_BOX: [n, act_size] when the caller passed float32, else NULL */
    const double *act_d;   /* FV_BOX: [n, act_size] otherwise */
    int64_t act_size;
} fv_batch;

/* A compiled env, as the runner sees it. */
typedef struct fv_env_def {
    int abi;                                     /* FV_ABI */
    size_t batch_size;                           /* sizeof(fv_batch) */
    const char *name;
    size_t params_size, state_size;
    int layout;                                  /* enum fv_layout */
    const char *obs_dtype;
    int action_kind;                             /* enum fv_action_kind */
    const fv_field *(*params)(int *count);
    const fv_field *(*state)(int *count);
    /* Step envs [lo, hi) with TimeLimit and autoreset; returns how many were reset. */
    int64_t (*step_range)(fv_batch *b, int64_t lo, int64_t hi);
    /* Reset env i (an explicit reset): state, observation, steps, flags. */
    void (*reset_one)(fv_batch *b, int64_t i);
} fv_env_def;

/* A Box action: this env's row, as float32 (f32) or float64 (f64); the other is NULL.
   Gymnasium computes in the precision the action came in: so may the env. */
typedef struct fv_box {
    const float *f32;
    const double *f64;
} fv_box;

FV_INLINE fv_box fv_box_at(const fv_batch *b, int64_t i) {
    fv_box a;
    a.f32 = b->act_f != NULL ? b->act_f + i * b->act_size : NULL;
    a.f64 = b->act_f != NULL ? NULL : b->act_d + i * b->act_size;
    return a;
}

/* Python's x ** 2 on a float (libm pow, which is not always x * x); the exponent is
   opaque so that the compiler cannot fold the call into a multiply. */
static inline double fv_pow2(double x) { volatile double two = 2.0; return pow(x, two); }
/* NumPy's float32 scalar ** 2 (powf). */
static inline float fv_powf2(float x) { volatile float two = 2.0f; return powf(x, two); }

/* x rounded to float32 and back: the value of a NumPy float32 scalar, as a double. Use it
   rather than (double)(float)x: GCC 12's SLP vectoriser drops such conversion pairs when
   two of them are stored side by side (e.g. two fields of a state struct; seen with GCC
   12.2 at -O2), and the volatile keeps the rounding. */
static inline double fv_f32(double x) { volatile float f = (float)x; return (double)f; }

/* Env i was reset: its TimeLimit count and its flags start again. */
FV_INLINE void fv_mark_reset(fv_batch *b, int64_t i) {
    b->steps[i] = 0;
    b->needs_reset[i] = 0;
    b->reset_flag[i] = 1;
}

/* The observation env i had before a SAME_STEP reset. */
FV_INLINE void fv_keep_final_obs(fv_batch *b, int64_t i) {
    memcpy((char *)b->final_obs + i * b->obs_bytes, (const char *)b->obs + i * b->obs_bytes, b->obs_bytes);
}

typedef void (*fv_env_fn)(fv_batch *b, int64_t i);

/* Step envs [lo, hi) one by one: autoreset (NEXT_STEP: an env whose episode ended on the
   previous step is reset instead of stepped; SAME_STEP: reset right after the step that
   ends it, its last observation kept in final_obs) and TimeLimit around step(b, i) and
   reset(b, i). Returns how many envs were reset. Inlined, so that step and reset are too. */
FV_INLINE int64_t fv_step_envs(fv_batch *b, int64_t lo, int64_t hi, fv_env_fn step, fv_env_fn reset) {
    /* the batch's fields in locals: the byte stores below could alias *b otherwise */
    const int mode = b->mode;
    const int32_t max_steps = b->max_steps;
    double *rew = b->rew;
    uint8_t *term = b->term, *trunc = b->trunc, *needs_reset = b->needs_reset, *reset_flag = b->reset_flag;
    int32_t *steps = b->steps;
    int64_t nreset = 0;
    for (int64_t i = lo; i < hi; i++) {
        reset_flag[i] = 0;
        if (mode == FV_NEXT_STEP && needs_reset[i]) {
            reset(b, i);
            fv_mark_reset(b, i);
            rew[i] = 0.0;
            term[i] = 0;
            trunc[i] = 0;
            nreset++;
            continue;
        }
        step(b, i);
        uint8_t done = (term[i] = term[i] != 0);
        steps[i] += 1;
        done |= (trunc[i] = steps[i] >= max_steps);
        if (mode == FV_SAME_STEP) {
            if (done) {
                fv_keep_final_obs(b, i);
                reset(b, i);
                fv_mark_reset(b, i);
                nreset++;
            }
        } else {
            needs_reset[i] = done;
        }
    }
    return nreset;
}

/* Indices i in [lo, hi) with flags[i] != 0, written to idx[0..k); returns k. Skips eight
   zero flags at a time; branch-free inside a non-zero word. For envs with their own
   step_range (e.g. to find the envs a NEXT_STEP call resets). */
static inline int64_t fv_collect(const uint8_t *restrict flags, int64_t lo, int64_t hi, int64_t *restrict idx) {
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

#define FV__ACTION_FV_DISCRETE(b, i) ((b)->act_i[i])
#define FV__ACTION_FV_BOX(b, i) fv_box_at((b), (i))

/* The fv_env_def of an env with its own step_range / reset_one (see FV_ENV for the rest). */
#define FV_ENV_DEF(NAME, P, S, OBS_T, KIND, LAYOUT, STEP_RANGE, RESET_ONE)                     \
    {FV_ABI, sizeof(fv_batch), #NAME, sizeof(P), sizeof(S), LAYOUT, FV_DTYPE(OBS_T), KIND,    \
     P##_fields, S##_fields, STEP_RANGE, RESET_ONE}

/* FV_ENV(NAME, P, S, OBS_T, KIND) defines `NAME_env`, the compiled env, from
     void NAME_reset(const P *p, S *s, fv_rng *rng, OBS_T *obs)
     void NAME_step(const P *p, S *s, ACTION a, OBS_T *obs, double *reward, uint8_t *terminated)
   where ACTION is int64_t (KIND FV_DISCRETE) or fv_box (FV_BOX). */
#define FV_ENV(NAME, P, S, OBS_T, KIND)                                                        \
    static void NAME##_reset_env_(fv_batch *b, int64_t i) {                                    \
        NAME##_reset((const P *)b->params, (S *)b->state + i, b->rng + i,                      \
                     (OBS_T *)b->obs + i * b->obs_size);                                       \
    }                                                                                          \
    static void NAME##_step_env_(fv_batch *b, int64_t i) {                                     \
        NAME##_step((const P *)b->params, (S *)b->state + i, FV__ACTION_##KIND(b, i),          \
                    (OBS_T *)b->obs + i * b->obs_size, b->rew + i, b->term + i);               \
    }                                                                                          \
    static int64_t NAME##_step_range_(fv_batch *b, int64_t lo, int64_t hi) {                   \
        return fv_step_envs(b, lo, hi, NAME##_step_env_, NAME##_reset_env_);                   \
    }                                                                                          \
    static void NAME##_reset_one_(fv_batch *b, int64_t i) {                                    \
        NAME##_reset_env_(b, i);                                                               \
        fv_mark_reset(b, i);                                                                   \
    }                                                                                          \
    static const fv_env_def NAME##_env =                                                       \
        FV_ENV_DEF(NAME, P, S, OBS_T, KIND, FV_AOS, NAME##_step_range_, NAME##_reset_one_)

#endif /* FV_ENV_H */
