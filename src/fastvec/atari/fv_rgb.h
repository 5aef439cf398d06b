/* fastvec.atari._sb3's pixel kernels: an RGB screen (max-pooled over two frames, or as is)
 * split into three planes, or turned gray as OpenCV's cvtColor does (SB3's WarpFrame); and
 * Gymnasium's GrayscaleObservation of three planes,
 *
 *     np.sum(np.multiply(obs, np.array([0.2125, 0.7154, 0.0721])), axis=-1).astype(np.uint8)
 *
 * computed with numpy's double operations in numpy's order: three products, summed left to
 * right (a reduction over 3 elements adds them in turn), truncated toward zero. Float
 * contraction is off here: an FMA (r*a + g*b in one rounding) would change the results. */
#ifndef FV_RGB_H
#define FV_RGB_H

#include <stdint.h>
#include <stddef.h>

#include "fv_simd.h"

FV_CONTRACT_OFF_BEGIN

/* Whether fv_rgb_planes uses its SSSE3 loop (set by fv_rgb_init, changed by fv_rgb_select). */
static int fv_rgb_simd = 0, fv_rgb_simd_max = 0;
/* [channel][register][lane]: which byte of 16 pixels' 3 registers goes to lane p (0x80: none). */
static uint8_t fv_rgb_masks[3][3][16];

static int fv_rgb_select(int on) {
    fv_rgb_simd = on && fv_rgb_simd_max;
    return fv_rgb_simd;
}

static void fv_rgb_init(void) {
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 3; k++)
            for (int p = 0; p < 16; p++) {
                int byte = 3 * p + c;
                fv_rgb_masks[c][k][p] = byte / 16 == k ? (uint8_t)(byte % 16) : 0x80;
            }
#if defined(FV_SIMD_DISPATCH)
    __builtin_cpu_init();
    fv_rgb_simd_max = __builtin_cpu_supports("ssse3") ? 1 : 0;
#endif
    fv_rgb_select(1);
}

static void fv_rgb_planes_plain(const uint8_t *a, const uint8_t *b, ptrdiff_t n,
                                uint8_t *r, uint8_t *g, uint8_t *bl) {
    if (b == NULL) {
        for (ptrdiff_t i = 0; i < n; i++) {
            r[i] = a[3 * i];
            g[i] = a[3 * i + 1];
            bl[i] = a[3 * i + 2];
        }
        return;
    }
    for (ptrdiff_t i = 0; i < n; i++) {
        uint8_t x, y;
        x = a[3 * i]; y = b[3 * i]; r[i] = x > y ? x : y;
        x = a[3 * i + 1]; y = b[3 * i + 1]; g[i] = x > y ? x : y;
        x = a[3 * i + 2]; y = b[3 * i + 2]; bl[i] = x > y ? x : y;
    }
}

#if defined(FV_SIMD_DISPATCH)
/* 16 pixels (3 registers) at a time: the max (SSE2), then each channel gathered from the three
 * registers by byte shuffles and OR'd together; the last n % 16 pixels by the plain loop. */
__attribute__((target("ssse3")))
static void fv_rgb_planes_ssse3(const uint8_t *a, const uint8_t *b, ptrdiff_t n,
                                uint8_t *r, uint8_t *g, uint8_t *bl) {
    __m128i m[3][3];
    uint8_t *out[3] = {r, g, bl};
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 3; k++)
            m[c][k] = _mm_loadu_si128((const __m128i *)fv_rgb_masks[c][k]);
    ptrdiff_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const uint8_t *pa = a + 3 * i;
        __m128i v0 = _mm_loadu_si128((const __m128i *)pa);
        __m128i v1 = _mm_loadu_si128((const __m128i *)(pa + 16));
        __m128i v2 = _mm_loadu_si128((const __m128i *)(pa + 32));
        if (b != NULL) {
            const uint8_t *pb = b + 3 * i;
            v0 = _mm_max_epu8(v0, _mm_loadu_si128((const __m128i *)pb));
            v1 = _mm_max_epu8(v1, _mm_loadu_si128((const __m128i *)(pb + 16)));
            v2 = _mm_max_epu8(v2, _mm_loadu_si128((const __m128i *)(pb + 32)));
        }
        for (int c = 0; c < 3; c++) {
            __m128i x = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(v0, m[c][0]), _mm_shuffle_epi8(v1, m[c][1])),
                                     _mm_shuffle_epi8(v2, m[c][2]));
            _mm_storeu_si128((__m128i *)(out[c] + i), x);
        }
    }
    fv_rgb_planes_plain(a + 3 * i, b == NULL ? NULL : b + 3 * i, n - i, r + i, g + i, bl + i);
}
#endif

/* r/g/b[i] = channel c of pixel i of `a` (interleaved RGB), or of max(a, b) when b is not NULL. */
static void fv_rgb_planes(const uint8_t *a, const uint8_t *b, ptrdiff_t n,
                          uint8_t *r, uint8_t *g, uint8_t *bl) {
#if defined(FV_SIMD_DISPATCH)
    if (fv_rgb_simd) {
        fv_rgb_planes_ssse3(a, b, n, r, g, bl);
        return;
    }
#endif
    fv_rgb_planes_plain(a, b, n, r, g, bl);
}

/* out[i] = (uint8)(r[i]*0.2125 + g[i]*0.7154 + b[i]*0.0721), in doubles, left to right. The sum
 * lies in [0, 255 + a rounding], so the cast truncates as numpy's astype does. */
static void fv_gray_planes(const uint8_t *r, const uint8_t *g, const uint8_t *b, ptrdiff_t n,
                           uint8_t *out) {
    FV_NO_CONTRACT
    for (ptrdiff_t i = 0; i < n; i++) {
        double s = (double)r[i] * 0.2125;
        s = s + (double)g[i] * 0.7154;
        s = s + (double)b[i] * 0.0721;
        out[i] = (uint8_t)s;
    }
}

/* out[i] = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY) at pixel i of `a`, or of max(a, b) when b is not
 * NULL: OpenCV's fixed-point weights (0.299, 0.587, 0.114 in 15 bits: 9798, 19235, 3735, which
 * sum to 1 << 15), rounded half up. (OpenCV 4 and 5 use these; OpenCV 3's were 14-bit, which
 * differ on 43,864 of the 2**24 colours: the tests compare with the installed cv2.) */
static void fv_rgb_to_gray_cv(const uint8_t *a, const uint8_t *b, ptrdiff_t n, uint8_t *out) {
    for (ptrdiff_t i = 0; i < n; i++) {
        uint32_t r = a[3 * i], g = a[3 * i + 1], bl = a[3 * i + 2];
        if (b != NULL) {
            if (b[3 * i] > r) r = b[3 * i];
            if (b[3 * i + 1] > g) g = b[3 * i + 1];
            if (b[3 * i + 2] > bl) bl = b[3 * i + 2];
        }
        out[i] = (uint8_t)((r * 9798u + g * 19235u + bl * 3735u + (1u << 14)) >> 15);
    }
}

FV_CONTRACT_OFF_END

#endif
