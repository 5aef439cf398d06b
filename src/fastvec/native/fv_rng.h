/* fv_rng.h: one env's random stream, drawn exactly as a Gymnasium env's np_random draws.
 *
 * Gymnasium seeds each env with numpy.random.Generator(PCG64(SeedSequence(seed))). fv_rng
 * holds the same PCG64 state (NumPy's words: the 128-bit LCG state and increment, low word
 * first, and the 32-bit half that next_uint32 keeps for its next call), and the functions
 * below reproduce NumPy's draws bit for bit:
 *
 *   fv_rng_random(r)             np_random.random()
 *   fv_rng_uniform(r, lo, hi)    np_random.uniform(lo, hi)
 *   fv_rng_integers(r, lo, hi)   np_random.integers(lo, hi)   (int64, hi excluded)
 *
 * The runner seeds the streams (reset(seed=...)) from NumPy's own SeedSequence; an env only
 * draws. The 128-bit arithmetic is fv_platform.h's fv_mul64 (unsigned __int128 where the
 * compiler has it, 64-bit halves elsewhere: the same bits either way).
 */
#ifndef FV_RNG_H
#define FV_RNG_H

#include <stdint.h>

#include "fv_platform.h"

typedef struct fv_rng {
    uint64_t state_lo, state_hi;  /* LCG state */
    uint64_t inc_lo, inc_hi;      /* LCG increment (odd) */
    uint64_t has_uint32;          /* 1: uinteger holds the upper half of the last 64-bit draw */
    uint64_t uinteger;
} fv_rng;

/* PCG64's LCG multiplier, high and low 64 bits */
#define FV_PCG_MULT_HI 0x2360ED051FC65DA4ULL
#define FV_PCG_MULT_LO 0x4385DF649FCCF645ULL

/* PCG64 (XSL-RR 128/64): advance the LCG (state = state * mult + inc, mod 2^128), then
   output 64 bits. */
static inline uint64_t fv_rng_next64(fv_rng *r) {
    uint64_t carry;
    uint64_t lo = fv_mul64(r->state_lo, FV_PCG_MULT_LO, &carry);
    uint64_t hi = carry + r->state_lo * FV_PCG_MULT_HI + r->state_hi * FV_PCG_MULT_LO;
    const uint64_t sum = lo + r->inc_lo;
    hi += r->inc_hi + (sum < lo);
    r->state_lo = sum;
    r->state_hi = hi;
    uint64_t x = r->state_hi ^ r->state_lo;
    unsigned rot = (unsigned)(r->state_hi >> 58);
    return (x >> rot) | (x << ((64u - rot) & 63u));
}

/* 32 bits: the lower half of a fresh 64-bit draw, then its upper half on the next call. */
static inline uint32_t fv_rng_next32(fv_rng *r) {
    if (r->has_uint32) {
        r->has_uint32 = 0;
        return (uint32_t)r->uinteger;
    }
    uint64_t next = fv_rng_next64(r);
    r->has_uint32 = 1;
    r->uinteger = next >> 32;
    return (uint32_t)(next & 0xffffffffULL);
}

/* np_random.random(): 53 random bits in [0, 1). */
static inline double fv_rng_random(fv_rng *r) {
    return (double)(fv_rng_next64(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* np_random.uniform(low, high) for Python-float bounds. */
static inline double fv_rng_uniform(fv_rng *r, double low, double high) {
    return low + (high - low) * fv_rng_random(r);
}

/* np_random.integers(low, high): an int64 in [low, high), by NumPy's rejection method
   (Lemire's, on 32 bits when the range fits). high - 1 == low draws nothing. */
static inline int64_t fv_rng_integers(fv_rng *r, int64_t low, int64_t high) {
    const uint64_t rng = (uint64_t)high - (uint64_t)low - 1u, off = (uint64_t)low;
    if (rng == 0) return low;
    if (rng <= 0xffffffffULL) {
        if (rng == 0xffffffffULL) return (int64_t)(off + fv_rng_next32(r));
        const uint32_t excl = (uint32_t)rng + 1u;
        uint64_t m = (uint64_t)fv_rng_next32(r) * excl;
        uint32_t left = (uint32_t)m;
        if (left < excl) {
            const uint32_t threshold = (uint32_t)(0xffffffffu - (uint32_t)rng) % excl;
            while (left < threshold) {
                m = (uint64_t)fv_rng_next32(r) * excl;
                left = (uint32_t)m;
            }
        }
        return (int64_t)(off + (m >> 32));
    }
    if (rng == 0xffffffffffffffffULL) return (int64_t)(off + fv_rng_next64(r));
    const uint64_t excl = rng + 1u;
    uint64_t m_hi;
    uint64_t left = fv_mul64(fv_rng_next64(r), excl, &m_hi);
    if (left < excl) {
        const uint64_t threshold = (0xffffffffffffffffULL - rng) % excl;
        while (left < threshold) left = fv_mul64(fv_rng_next64(r), excl, &m_hi);
    }
    return (int64_t)(off + m_hi);
}

#endif /* FV_RNG_H */
