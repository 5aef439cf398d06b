/* What fastvec.atari's pixel kernels (fv_rgb.h, fv_area_resize.h) share:
 *
 * - FV_SIMD_DISPATCH: this compiler builds SSSE3 / AVX2 loops that are chosen at run time
 *   (x86 GCC 8+ or clang 9+, not Windows or macOS, not a FASTVEC_PORTABLE build, which defines
 *   FV_NO_DISPATCH); elsewhere the kernels keep their plain C loops.
 * - Float contraction off: the kernels reproduce OpenCV's and NumPy's results, which round
 *   a*b and then the sum; an FMA (a*b + c in one rounding) would change them. GCC takes it per
 *   file (FV_CONTRACT_OFF_BEGIN at the top of a header, FV_CONTRACT_OFF_END at its end), clang
 *   per function (FV_NO_CONTRACT as a function's first statement). */
#ifndef FV_SIMD_H
#define FV_SIMD_H

#if !defined(FV_NO_DISPATCH) && (defined(__x86_64__) || defined(__i386__)) \
    && !defined(_WIN32) && !defined(__APPLE__) \
    && ((defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 8))
#define FV_SIMD_DISPATCH 1
#include <immintrin.h>
#endif

#if defined(__clang__)
#define FV_NO_CONTRACT _Pragma("clang fp contract(off)")
#else
#define FV_NO_CONTRACT
#endif

#if defined(__GNUC__) && !defined(__clang__)
#define FV_CONTRACT_OFF_BEGIN _Pragma("GCC push_options") _Pragma("GCC optimize (\"fp-contract=off\")")
#define FV_CONTRACT_OFF_END _Pragma("GCC pop_options")
#else
#define FV_CONTRACT_OFF_BEGIN
#define FV_CONTRACT_OFF_END
#endif

#endif /* FV_SIMD_H */
