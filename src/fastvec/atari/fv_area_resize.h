/* fastvec.atari._resize's kernel: OpenCV's INTER_AREA downscale of a uint8 image, its float
 * operations in OpenCV's order (see _resize.pyx's docstring for the arithmetic), with SSSE3 /
 * AVX2 gathers chosen at run time and a plain C loop elsewhere; each run recomputes only the
 * rows its source changed since the plan's last run (fv_area_run). Float contraction is off
 * here: an FMA rounds once and would change the results. */
#ifndef FV_AREA_RESIZE_H
#define FV_AREA_RESIZE_H

#include <stdint.h>
#include <string.h>
#include <stddef.h>
#include <math.h>

#include "fv_simd.h"

FV_CONTRACT_OFF_BEGIN

typedef struct {
    int sw, sh, dw, dh;     /* source and destination width, height */
    int kx;                 /* most source pixels of one destination column */
    int hw;                 /* padded row of horizontal sums: a multiple of 8 >= dw */
    int simd_ok;            /* the shuffle tables cover the row (else the plain loop) */
    const int32_t *xbase;   /* [dw] first source column of each destination column */
    const int32_t *xn;      /* [dw] its number of source columns */
    const float *xw;        /* [dw*kx] their weights */
    const int32_t *ybase;   /* [dh] first source row of each destination row */
    const int32_t *yn;      /* [dh] its number of source rows */
    const float *yw;        /* [dh*ky] their weights */
    int ky;
    const int32_t *woff;    /* [hw/4] byte window of each group of 4 outputs */
    const uint8_t *masks;   /* [hw/8][kx][32] shuffles: pixel k of each output to a 32-bit lane */
    const float *xwv;       /* [hw/8][kx][8] the matching weights (0 for padding) */
    /* The last run, kept so that the next one computes only what changed (consecutive
     * frames of a game differ in a few rows): */
    int valid;              /* whether the three below hold a run's */
    int valid_level;        /* the ISA level that run's kernels were chosen at (the same
                             * numbers at every level: kept so that each level's kernels run) */
    uint8_t *last_src;      /* [sh*sw] its source */
    float *sums;            /* [sh*hw] the horizontal sums of each of its source rows */
    uint8_t *last_dst;      /* [dh*hw] its destination rows (padded to hw) */
    uint8_t *row_changed;   /* [sh] scratch: whether a source row differs from the last run's */
} fv_area_plan;

typedef void (*fv_area_hrow_fn)(const fv_area_plan *p, const uint8_t *s, float *out);
typedef void (*fv_area_vrow_fn)(const fv_area_plan *p, int dy, const float *const *rows, uint8_t *out);

/* cvRound (half to even, the current rounding mode) then saturate_cast<uchar>. */
static inline uint8_t fv_area_round_u8(float v) {
    long r = lrintf(v);
    return (uint8_t)(r < 0 ? 0 : (r > 255 ? 255 : r));
}

static void fv_area_hrow_plain(const fv_area_plan *p, const uint8_t *s, float *out) {
    FV_NO_CONTRACT
    for (int dx = 0; dx < p->dw; dx++) {
        const uint8_t *q = s + p->xbase[dx];
        const float *w = p->xw + (ptrdiff_t)dx * p->kx;
        float acc = (float)q[0] * w[0];
        for (int k = 1; k < p->xn[dx]; k++)
            acc = acc + (float)q[k] * w[k];
        out[dx] = acc;
    }
}

static void fv_area_vrow_plain(const fv_area_plan *p, int dy, const float *const *rows, uint8_t *out) {
    FV_NO_CONTRACT
    const float *b = p->yw + (ptrdiff_t)dy * p->ky;
    int n = p->yn[dy];
    for (int dx = 0; dx < p->dw; dx++) {
        float acc = b[0] * rows[0][dx];
        for (int k = 1; k < n; k++)
            acc = acc + b[k] * rows[k][dx];
        out[dx] = fv_area_round_u8(acc);
    }
}

#if defined(FV_SIMD_DISPATCH)
__attribute__((target("ssse3")))
static void fv_area_hrow_ssse3(const fv_area_plan *p, const uint8_t *s, float *out) {
    FV_NO_CONTRACT
    const int kx = p->kx, groups = p->hw / 4;
    for (int g = 0; g < groups; g++) {
        const __m128i win = _mm_loadu_si128((const __m128i *)(s + p->woff[g]));
        const uint8_t *m = p->masks + (ptrdiff_t)(g >> 1) * kx * 32 + (g & 1) * 16;
        const float *w = p->xwv + (ptrdiff_t)(g >> 1) * kx * 8 + (g & 1) * 4;
        __m128 acc = _mm_mul_ps(_mm_cvtepi32_ps(_mm_shuffle_epi8(win, _mm_loadu_si128((const __m128i *)m))),
                                _mm_loadu_ps(w));
        for (int k = 1; k < kx; k++) {
            __m128 v = _mm_cvtepi32_ps(_mm_shuffle_epi8(win, _mm_loadu_si128((const __m128i *)(m + 32 * k))));
            acc = _mm_add_ps(acc, _mm_mul_ps(v, _mm_loadu_ps(w + 8 * k)));
        }
        _mm_storeu_ps(out + 4 * g, acc);
    }
}

__attribute__((target("ssse3")))
static void fv_area_vrow_sse(const fv_area_plan *p, int dy, const float *const *rows, uint8_t *out) {
    FV_NO_CONTRACT
    const float *b = p->yw + (ptrdiff_t)dy * p->ky;
    const int n = p->yn[dy];
    for (int x = 0; x < p->hw; x += 8) {
        __m128 lo = _mm_mul_ps(_mm_set1_ps(b[0]), _mm_loadu_ps(rows[0] + x));
        __m128 hi = _mm_mul_ps(_mm_set1_ps(b[0]), _mm_loadu_ps(rows[0] + x + 4));
        for (int k = 1; k < n; k++) {
            const __m128 bk = _mm_set1_ps(b[k]);
            lo = _mm_add_ps(lo, _mm_mul_ps(bk, _mm_loadu_ps(rows[k] + x)));
            hi = _mm_add_ps(hi, _mm_mul_ps(bk, _mm_loadu_ps(rows[k] + x + 4)));
        }
        __m128i i16 = _mm_packs_epi32(_mm_cvtps_epi32(lo), _mm_cvtps_epi32(hi));
        _mm_storel_epi64((__m128i *)(out + x), _mm_packus_epi16(i16, i16));
    }
}

__attribute__((target("avx2")))
static void fv_area_hrow_avx2(const fv_area_plan *p, const uint8_t *s, float *out) {
    FV_NO_CONTRACT
    const int kx = p->kx, pairs = p->hw / 8;
    for (int q = 0; q < pairs; q++) {
        const __m256i win = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(s + p->woff[2 * q]))),
            _mm_loadu_si128((const __m128i *)(s + p->woff[2 * q + 1])), 1);
        const uint8_t *m = p->masks + (ptrdiff_t)q * kx * 32;
        const float *w = p->xwv + (ptrdiff_t)q * kx * 8;
        __m256 acc = _mm256_mul_ps(
            _mm256_cvtepi32_ps(_mm256_shuffle_epi8(win, _mm256_loadu_si256((const __m256i *)m))),
            _mm256_loadu_ps(w));
        for (int k = 1; k < kx; k++) {
            __m256 v = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(win, _mm256_loadu_si256((const __m256i *)(m + 32 * k))));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(v, _mm256_loadu_ps(w + 8 * k)));
        }
        _mm256_storeu_ps(out + 8 * q, acc);
    }
}

__attribute__((target("avx2")))
static void fv_area_vrow_avx2(const fv_area_plan *p, int dy, const float *const *rows, uint8_t *out) {
    FV_NO_CONTRACT
    const float *b = p->yw + (ptrdiff_t)dy * p->ky;
    const int n = p->yn[dy];
    for (int x = 0; x < p->hw; x += 8) {
        __m256 acc = _mm256_mul_ps(_mm256_set1_ps(b[0]), _mm256_loadu_ps(rows[0] + x));
        for (int k = 1; k < n; k++)
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(b[k]), _mm256_loadu_ps(rows[k] + x)));
        __m256i i32 = _mm256_cvtps_epi32(acc);
        __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
        _mm_storel_epi64((__m128i *)(out + x), _mm_packus_epi16(i16, i16));
    }
}
#endif

/* ISA levels: 0 plain C, 1 SSSE3, 2 AVX2 */
static const char *const fv_area_isa_names[3] = {"plain", "ssse3", "avx2"};
static int fv_area_isa_max = 0;
static int fv_area_level = 0;

static int fv_area_select(int level) {
    if (level < 0 || level > fv_area_isa_max) level = fv_area_isa_max;
    fv_area_level = level;
    return level;
}

static void fv_area_init(void) {
#if defined(FV_SIMD_DISPATCH)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("ssse3")) {
        fv_area_isa_max = 1;
        if (__builtin_cpu_supports("avx2")) fv_area_isa_max = 2;
    }
#endif
    fv_area_select(-1);
}

static const char *fv_area_isa_name(int level) {
    return fv_area_isa_names[level < 0 || level > 2 ? 0 : level];
}

/* dst (dh x dw, rows dstep bytes apart) = INTER_AREA of src (sh x sw, rows sstep apart).
 *
 * A source row's horizontal sums depend on its bytes alone, and a destination row on the
 * sums of its source rows alone: a source row equal to the last run's keeps the sums it had,
 * and a destination row whose source rows all did keeps its bytes. The result is the same as
 * computing everything again, bit for bit. */
static void fv_area_run(fv_area_plan *p, const uint8_t *src, ptrdiff_t sstep,
                        uint8_t *dst, ptrdiff_t dstep) {
    fv_area_hrow_fn hrow = fv_area_hrow_plain;
    fv_area_vrow_fn vrow = fv_area_vrow_plain;
#if defined(FV_SIMD_DISPATCH)
    if (p->simd_ok && fv_area_level == 2) {
        hrow = fv_area_hrow_avx2; vrow = fv_area_vrow_avx2;
    } else if (p->simd_ok && fv_area_level == 1) {
        hrow = fv_area_hrow_ssse3; vrow = fv_area_vrow_sse;
    }
#endif
    if (p->valid_level != fv_area_level) p->valid = 0;
    p->valid_level = fv_area_level;
    const float *rows[64];
    int next = 0;  /* the first source row not compared (and summed) yet */
    for (int dy = 0; dy < p->dh; dy++) {
        const int first = p->ybase[dy], n = p->yn[dy];
        for (int r = first > next ? first : next; r < first + n; r++) {
            const uint8_t *s = src + (ptrdiff_t)r * sstep;
            uint8_t *last = p->last_src + (ptrdiff_t)r * p->sw;
            p->row_changed[r] = !p->valid || memcmp(s, last, (size_t)p->sw) != 0;
            if (p->row_changed[r]) {
                hrow(p, s, p->sums + (ptrdiff_t)r * p->hw);
                memcpy(last, s, (size_t)p->sw);
            }
        }
        if (first + n > next) next = first + n;
        int changed = 0;
        for (int k = 0; k < n; k++) {
            changed |= p->row_changed[first + k];
            rows[k] = p->sums + (ptrdiff_t)(first + k) * p->hw;
        }
        uint8_t *kept = p->last_dst + (ptrdiff_t)dy * p->hw;
        if (changed)
            vrow(p, dy, rows, kept);
        memcpy(dst + (ptrdiff_t)dy * dstep, kept, (size_t)p->dw);
    }
    p->valid = 1;
}

FV_CONTRACT_OFF_END

#endif /* FV_AREA_RESIZE_H */
