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

#if defined(__clang__)
#define FV_RGB_NO_CONTRACT _Pragma("clang fp contract(off)")
#else
#define FV_RGB_NO_CONTRACT
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize ("fp-contract=off")
#endif

/* r/g/b[i] = channel c of pixel i of `a` (interleaved RGB), or of max(a, b) when b is not NULL. */
static void fv_rgb_planes(const uint8_t *a, const uint8_t *b, ptrdiff_t n,
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

/* out[i] = (uint8)(r[i]*0.2125 + g[i]*0.7154 + b[i]*0.0721), in doubles, left to right. The sum
 * lies in [0, 255 + a rounding], so the cast truncates as numpy's astype does. */
static void fv_gray_planes(const uint8_t *r, const uint8_t *g, const uint8_t *b, ptrdiff_t n,
                           uint8_t *out) {
    FV_RGB_NO_CONTRACT
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

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#endif
