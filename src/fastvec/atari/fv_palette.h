/* A screen's palette indices to the levels ALE gives them, from a table learned off ALE itself.
 *
 * ALE converts a screen to grayscale (or RGB) pixel by pixel: each pixel's level is a function
 * of that pixel's palette index alone (ALEInterface.getScreen gives the indices,
 * getScreenGrayscale the levels of the same screen array). fastvec holds no palette of its own
 * (ALE is GPL-2.0): a table starts empty and learns (index, level) pairs from screens ALE has
 * converted; a screen whose indices are all learned is converted here, in a few table lookups
 * per 32 pixels, and any other one is left to ALE (and learned from).
 *
 * Kernels, chosen at run time on x86 Linux builds (FV_SIMD_DISPATCH):
 * - 3: AVX-512 VBMI on 512-bit vectors (AMD CPUs only): two two-table byte permutes look 64
 *   indices up in all 256 entries. AMD's cores run 512-bit instructions at their usual clock;
 *   several Intel server CPUs lower the core's clock for a while after them, and the
 *   emulator's scalar code runs right after, so Intel CPUs take level 2.
 * - 2: AVX-512 VBMI on 256-bit vectors: four two-table byte permutes look 32 indices up.
 * - 1: AVX2: one byte shuffle per 16-index chunk of the table that holds a learned entry (a game
 *   shows a handful of colours, in a few chunks); an index in no such chunk is unlearned.
 * - 0: plain C (about as fast as ALE's own loop: callers use ALE's conversion then).
 */
#ifndef FV_PALETTE_H
#define FV_PALETTE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fv_simd.h"

typedef struct {
    uint8_t level[256];   /* ALE's level of each palette index, where learned */
    uint8_t known[256];   /* 0xFF where learned, else 0 */
    int n_chunks;         /* AVX2: the 16-index chunks holding a learned index, */
    uint8_t chunk_key[16];          /* their index's high nibble (<< 4), */
    uint8_t chunk_level[16][16];    /* their 16 levels (0 where not learned), */
    uint8_t chunk_known[16][16];    /* and their 16 known flags */
} fv_palette;

/* ISA levels: 0 plain C, 1 AVX2, 2 AVX-512 VBMI (256-bit vectors), 3 the same on 512-bit */
static const char *const fv_palette_isa_names[4] = {"plain", "avx2", "avx512vbmi", "avx512vbmi-512"};
static int fv_palette_isa_max = 0;
static int fv_palette_level = 0;

static int fv_palette_select(int level) {
    if (level < 0 || level > fv_palette_isa_max) level = fv_palette_isa_max;
    fv_palette_level = level;
    return level;
}

static void fv_palette_init_isa(void) {
#if defined(FV_SIMD_DISPATCH)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) {
        fv_palette_isa_max = 1;
        if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")
                && __builtin_cpu_supports("avx512vbmi"))
            fv_palette_isa_max = __builtin_cpu_is("amd") ? 3 : 2;
    }
#endif
    fv_palette_select(-1);
}

static const char *fv_palette_isa_name(int level) {
    return fv_palette_isa_names[level < 0 || level > 3 ? 0 : level];
}

/* The AVX2 kernel's chunk tables, from level/known. */
static void fv_palette_rechunk(fv_palette *p) {
    p->n_chunks = 0;
    for (int h = 0; h < 16; h++) {
        int any = 0;
        for (int l = 0; l < 16; l++) any |= p->known[h * 16 + l];
        if (!any) continue;
        int c = p->n_chunks++;
        p->chunk_key[c] = (uint8_t)(h << 4);
        for (int l = 0; l < 16; l++) {
            p->chunk_known[c][l] = p->known[h * 16 + l];
            p->chunk_level[c][l] = p->level[h * 16 + l] & p->known[h * 16 + l];
        }
    }
}

static void fv_palette_clear(fv_palette *p) {
    memset(p, 0, sizeof *p);
}

/* Learns the n (index, level) pairs of a screen ALE converted. Returns 0, or -1 when a pair
 * contradicts the table (an index seen with another level: the levels are not a function of
 * the index, and the table must not be used); the table is unchanged then. */
static int fv_palette_learn(fv_palette *p, const uint8_t *idx, const uint8_t *levels, size_t n) {
    uint8_t level[256], known[256];
    memcpy(level, p->level, sizeof level);
    memcpy(known, p->known, sizeof known);
    for (size_t i = 0; i < n; i++) {
        const uint8_t v = idx[i];
        if (known[v] && level[v] != levels[i]) return -1;
        known[v] = 0xFF;
        level[v] = levels[i];
    }
    if (memcmp(known, p->known, sizeof known)) {
        memcpy(p->level, level, sizeof level);
        memcpy(p->known, known, sizeof known);
        fv_palette_rechunk(p);
    }
    return 0;
}

static int fv_palette_map_plain(const fv_palette *p, const uint8_t *idx, uint8_t *out, size_t n) {
    unsigned ok = 0xFF;
    for (size_t i = 0; i < n; i++) {
        ok &= p->known[idx[i]];
        out[i] = p->level[idx[i]];
    }
    return ok == 0xFF;
}

#if defined(FV_SIMD_DISPATCH)
__attribute__((target("avx2")))
static int fv_palette_map_avx2(const fv_palette *p, const uint8_t *idx, uint8_t *out, size_t n) {
    __m256i key[16], lev[16], kno[16];
    const int nc = p->n_chunks;
    for (int c = 0; c < nc; c++) {
        key[c] = _mm256_set1_epi8((char)p->chunk_key[c]);
        lev[c] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p->chunk_level[c]));
        kno[c] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p->chunk_known[c]));
    }
    /* x ^ key is < 16 exactly in x's chunk; adding 0x70 with saturation keeps its low nibble
     * there and sets bit 7 (a shuffle's "zero this byte") everywhere else. */
    const __m256i bias = _mm256_set1_epi8(0x70);
    __m256i all = _mm256_set1_epi8(-1);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(idx + i));
        __m256i g = _mm256_setzero_si256(), k = _mm256_setzero_si256();
        for (int c = 0; c < nc; c++) {
            const __m256i y = _mm256_adds_epu8(_mm256_xor_si256(v, key[c]), bias);
            g = _mm256_or_si256(g, _mm256_shuffle_epi8(lev[c], y));
            k = _mm256_or_si256(k, _mm256_shuffle_epi8(kno[c], y));
        }
        all = _mm256_and_si256(all, k);
        _mm256_storeu_si256((__m256i *)(out + i), g);
    }
    const int ok = _mm256_movemask_epi8(_mm256_cmpeq_epi8(all, _mm256_set1_epi8(-1))) == -1;
    return fv_palette_map_plain(p, idx + i, out + i, n - i) && ok;
}

__attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vbmi")))
static int fv_palette_map_vbmi(const fv_palette *p, const uint8_t *idx, uint8_t *out, size_t n) {
    __m256i lev[8], kno[8];
    for (int q = 0; q < 8; q++) {
        lev[q] = _mm256_loadu_si256((const __m256i *)(p->level + 32 * q));
        kno[q] = _mm256_loadu_si256((const __m256i *)(p->known + 32 * q));
    }
    __m256i all = _mm256_set1_epi8(-1);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(idx + i));
        /* a two-table permute reads an index's low 6 bits: bits 6 and 7 pick among four */
        const __mmask32 b7 = _mm256_movepi8_mask(v), b6 = _mm256_movepi8_mask(_mm256_add_epi8(v, v));
        __m256i a = _mm256_permutex2var_epi8(lev[0], v, lev[1]), b = _mm256_permutex2var_epi8(lev[2], v, lev[3]);
        __m256i c = _mm256_permutex2var_epi8(lev[4], v, lev[5]), d = _mm256_permutex2var_epi8(lev[6], v, lev[7]);
        const __m256i g = _mm256_mask_blend_epi8(b7, _mm256_mask_blend_epi8(b6, a, b), _mm256_mask_blend_epi8(b6, c, d));
        a = _mm256_permutex2var_epi8(kno[0], v, kno[1]); b = _mm256_permutex2var_epi8(kno[2], v, kno[3]);
        c = _mm256_permutex2var_epi8(kno[4], v, kno[5]); d = _mm256_permutex2var_epi8(kno[6], v, kno[7]);
        all = _mm256_and_si256(all, _mm256_mask_blend_epi8(b7, _mm256_mask_blend_epi8(b6, a, b), _mm256_mask_blend_epi8(b6, c, d)));
        _mm256_storeu_si256((__m256i *)(out + i), g);
    }
    const int ok = _mm256_movemask_epi8(_mm256_cmpeq_epi8(all, _mm256_set1_epi8(-1))) == -1;
    return fv_palette_map_plain(p, idx + i, out + i, n - i) && ok;
}

__attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vbmi")))
static int fv_palette_map_vbmi512(const fv_palette *p, const uint8_t *idx, uint8_t *out, size_t n) {
    __m512i lev[4], kno[4];
    for (int q = 0; q < 4; q++) {
        lev[q] = _mm512_loadu_si512((const void *)(p->level + 64 * q));
        kno[q] = _mm512_loadu_si512((const void *)(p->known + 64 * q));
    }
    __m512i all = _mm512_set1_epi8(-1);
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const __m512i v = _mm512_loadu_si512((const void *)(idx + i));
        /* a two-table permute reads an index's low 7 bits: bit 7 picks between two */
        const __mmask64 b7 = _mm512_movepi8_mask(v);
        const __m512i g = _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(lev[0], v, lev[1]),
                                                 _mm512_permutex2var_epi8(lev[2], v, lev[3]));
        all = _mm512_and_si512(all, _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(kno[0], v, kno[1]),
                                                           _mm512_permutex2var_epi8(kno[2], v, kno[3])));
        _mm512_storeu_si512((void *)(out + i), g);
    }
    const int ok = _mm512_cmpneq_epi8_mask(all, _mm512_set1_epi8(-1)) == 0;
    return fv_palette_map_plain(p, idx + i, out + i, n - i) && ok;
}
#endif

/* out[i] = the level of idx[i], i < n. Returns 1 when every index was learned (out is ALE's
 * conversion), else 0 (out is not to be used). */
static int fv_palette_map(const fv_palette *p, const uint8_t *idx, uint8_t *out, size_t n) {
#if defined(FV_SIMD_DISPATCH)
    if (fv_palette_level == 3) return fv_palette_map_vbmi512(p, idx, out, n);
    if (fv_palette_level == 2) return fv_palette_map_vbmi(p, idx, out, n);
    if (fv_palette_level == 1) return fv_palette_map_avx2(p, idx, out, n);
#endif
    return fv_palette_map_plain(p, idx, out, n);
}

#endif /* FV_PALETTE_H */
