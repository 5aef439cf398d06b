# cython: language_level=3
"""GAE and V-trace kernels over step-major ``[T, N]`` buffers.

Layout: row ``t`` of every ``[T, N]`` array is one vector-env step, so the
backward recurrence walks the rows from ``T - 1`` down to ``0`` and, inside a
row, runs across the ``N`` envs over contiguous memory. That inner loop has no
loop-carried dependency, so ``-O3`` vectorises it (SIMD across envs); the
recurrence is carried by the previous output row, which is still in cache.
Nothing is allocated by a kernel: the running GAE of step ``t + 1`` *is* row
``t + 1`` of the advantages output. Narrow buffers (N <= 8 envs) run the same
arithmetic column-block by column-block instead, the running GAE of each env
in a register (their rows are too short to hide the round trip through
memory; docs/gae.md has the measurements).

The ``def`` wrappers check and prepare their inputs with the NumPy C API
(type, dtype, shape, C-contiguity, then the raw data pointer). Typed
memoryviews cost more to acquire than a whole small call (docs/gae.md), so
the kernels take pointers to C-contiguous data plus their sizes instead.

Float data is fused (``floating``: float32 / float64, one body). Done flags
keep their own dtype (bool/uint8 read as ``u8``, float32, float64) and are
dispatched per row outside the inner loop, so a bool ``dones`` next to float32
values costs no conversion copy.
"""
import sys

import numpy as np

cimport numpy as cnp
from cython.parallel cimport prange
from libc.math cimport exp, expf
from libc.stdint cimport uintptr_t

from fastvec._ext._constants cimport DT_F32, DT_F64, DT_U8, NOGIL_MIN
from fastvec._ext._omp cimport fv_omp_install_fork_guard, fv_omp_max_threads, fv_omp_threads
from fastvec._ext._types cimport f32, f64, u8, floating

cnp.import_array()
fv_omp_install_fork_guard()

# Done-flag element types a kernel reads directly.
ctypedef fused flag_t:
    u8
    f32
    f64


# Automatic threading starts at this many elements per thread ...
cdef Py_ssize_t PAR_MIN_PER_THREAD = 1 << 20
# ... and each thread gets at least this many columns (a multiple of 16: whole
# 64-byte cache lines, so threads never share a line of an output row).
cdef Py_ssize_t PAR_MIN_COLS = 256


# ----------------------------------------------------------------------------
# Rows (inlined into the block kernels; each inner loop runs across N envs)
# ----------------------------------------------------------------------------

# Output rows are ``restrict``: they never overlap each other or an input row (the
# wrappers reject overlapping out= arrays), and saying so lets the compiler vectorise
# without runtime alias checks (GCC allows 10; a GAE row would need 11).

cdef inline void _gae_row_last(
    Py_ssize_t n,
    const floating* r, const floating* v, const floating* nv, const flag_t* nd,
    floating g,
    floating* restrict adv,  # OUT
    floating* restrict ret,  # OUT
) noexcept nogil:
    """Row T-1 of the CleanRL/SB3 recurrence: bootstrap from next_value, no running GAE."""
    cdef Py_ssize_t i
    cdef floating nnt, a, one = 1  # typed, so float32 rows stay float32 (a bare 1 is a double)
    for i in range(n):
        nnt = one - <floating>nd[i]
        a = r[i] + g * nv[i] * nnt - v[i]
        adv[i] = a
        ret[i] = a + v[i]


cdef inline void _gae_row(
    Py_ssize_t n,
    const floating* r, const floating* v, const floating* v1, const flag_t* d1,
    const floating* a1, floating g, floating gl,
    floating* restrict adv,  # OUT
    floating* restrict ret,  # OUT
) noexcept nogil:
    """Row t < T-1: v1, d1, a1 are values, dones and advantages of row t + 1."""
    cdef Py_ssize_t i
    cdef floating nnt, delta, a, one = 1
    for i in range(n):
        nnt = one - <floating>d1[i]
        delta = r[i] + g * v1[i] * nnt - v[i]
        a = delta + gl * nnt * a1[i]
        adv[i] = a
        ret[i] = a + v[i]


cdef inline void _gae_row2(
    Py_ssize_t n,
    const floating* r0, const floating* rm, const floating* v0, const floating* vm,
    const floating* v1, const flag_t* d1, const flag_t* d0, const floating* a1,
    floating g, floating gl,
    floating* restrict a0,   # OUT: advantages of row t
    floating* restrict rt0,  # OUT: returns of row t
    floating* restrict am,   # OUT: advantages of row t - 1
    floating* restrict rtm,  # OUT: returns of row t - 1
) noexcept nogil:
    """Rows t and t - 1 in one pass (same arithmetic as two _gae_row calls): values[t]
    and advantages[t] stay in registers (faster on large buffers: docs/gae.md)."""
    cdef Py_ssize_t i
    cdef floating nnt, delta, a, vv0, one = 1
    for i in range(n):
        vv0 = v0[i]
        nnt = one - <floating>d1[i]
        delta = r0[i] + g * v1[i] * nnt - vv0
        a = delta + gl * nnt * a1[i]
        a0[i] = a
        rt0[i] = a + vv0
        nnt = one - <floating>d0[i]
        delta = rm[i] + g * vv0 * nnt - vm[i]
        a = delta + gl * nnt * a
        am[i] = a
        rtm[i] = a + vm[i]


cdef inline void _tt_row(
    Py_ssize_t n,
    const floating* r, const floating* v, const floating* vn, const floating* vf,
    const flag_t* te, const flag_t* tr, floating k,
    const floating* a1, floating g, floating gl,
    floating* restrict adv,  # OUT
    floating* restrict ret,  # OUT
) noexcept nogil:
    """One row with separate terminated/truncated flags.

    vn: value of the next row's observation (or next_value on the last row);
    vf: value of this step's final observation, read where truncated (equal to
    vn when no next_values were given); k = 1 when there is no vf: a truncated
    step then does not bootstrap. a1: advantages of row t + 1, NULL on the last.
    """
    cdef Py_ssize_t i
    cdef floating nt, ntr, b, bn, boot, delta, a, one = 1
    if a1 == NULL:
        for i in range(n):
            nt = one - <floating>te[i]
            ntr = <floating>tr[i]
            b = vf[i]  # both loads unconditional, so the select is branch-free
            bn = vn[i]
            b = b if ntr != 0 else bn
            boot = nt * (one - ntr * k)
            a = r[i] + g * b * boot - v[i]
            adv[i] = a
            ret[i] = a + v[i]
    else:
        for i in range(n):
            nt = one - <floating>te[i]
            ntr = <floating>tr[i]
            b = vf[i]
            bn = vn[i]
            b = b if ntr != 0 else bn
            boot = nt * (one - ntr * k)
            delta = r[i] + g * b * boot - v[i]
            a = delta + gl * (nt * (one - ntr)) * a1[i]
            adv[i] = a
            ret[i] = a + v[i]


cdef inline void _vt_row(
    Py_ssize_t n, const floating* x, bint is_log,
    const floating* r, const floating* v, const floating* v1, const flag_t* d1,
    floating* restrict acc1,  # IN/OUT: row t + 1 of vs, holding vs - values; finalised here
    floating g, floating lam, floating rho_bar, floating c_bar, floating pg_bar,
    floating* restrict acc,  # OUT: row t of vs, holding vs - values until row t - 1 finalises it
    floating* restrict pg,   # OUT (holds the ratios between the two passes)
) noexcept nogil:
    """One V-trace row. On the last row v1 = next_value and acc1 = NULL.

    First pass: the importance ratios into the pg row (exp() is a libm call, so
    that pass is scalar); second pass, vectorised: the V-trace recurrence.
    """
    cdef Py_ssize_t i
    cdef floating rho, disc, a1, vs1, a, one = 1
    if is_log:
        for i in range(n):
            if floating is f32:
                pg[i] = expf(x[i])
            else:
                pg[i] = exp(x[i])
    else:
        for i in range(n):
            pg[i] = x[i]
    if acc1 == NULL:
        for i in range(n):
            rho = pg[i]
            disc = g * (one - <floating>d1[i])
            acc[i] = (rho if rho < rho_bar else rho_bar) * (r[i] + disc * v1[i] - v[i])
            pg[i] = (rho if rho < pg_bar else pg_bar) * (r[i] + disc * v1[i] - v[i])
    else:
        for i in range(n):
            rho = pg[i]
            disc = g * (one - <floating>d1[i])
            a1 = acc1[i]
            vs1 = v1[i] + a1
            acc1[i] = vs1
            a = (rho if rho < rho_bar else rho_bar) * (r[i] + disc * v1[i] - v[i])
            acc[i] = a + disc * (lam * (rho if rho < c_bar else c_bar)) * a1
            pg[i] = (rho if rho < pg_bar else pg_bar) * (r[i] + disc * vs1 - v[i])


# ----------------------------------------------------------------------------
# Block kernels: rows T-1 .. 0 over the column range [c0, c1)
# ----------------------------------------------------------------------------

cdef inline Py_ssize_t _flag_size(int kind) noexcept nogil:
    """Bytes per element of a flag array of this kind."""
    return 1 if kind == DT_U8 else (4 if kind == DT_F32 else 8)


cdef inline void _gae_row_last_any(Py_ssize_t n, const floating* r, const floating* v,
                                   const floating* nv, const void* nd, int ndk, floating g,
                                   floating* adv, floating* ret) noexcept nogil:
    if ndk == DT_U8:
        _gae_row_last(n, r, v, nv, <const u8*>nd, g, adv, ret)
    elif ndk == DT_F32:
        _gae_row_last(n, r, v, nv, <const f32*>nd, g, adv, ret)
    else:
        _gae_row_last(n, r, v, nv, <const f64*>nd, g, adv, ret)


# Narrow buffers (N <= 8 columns, e.g. CleanRL's 4 or 8 envs) run column-wise:
# a row kernel's rows are too short to hide the store-to-load round trip of the
# running advantage through memory (at N = 8 it, not the arithmetic, bounds
# them), so the narrow kernel keeps each column's advantage in a register from
# row T-1 to row 0 (the same operations in the same order; docs/gae.md).
cdef enum:
    _NARROW_MAX = 8

# How many columns a narrow kernel runs at once, as a type: the kernel is fused
# over it, so that in each specialisation the count, sizeof(lanes_t), is a
# compile-time constant and the loops over the columns unroll into registers
# (a width passed as an int is not, unless the compiler chooses to inline).
ctypedef struct _Lanes1:
    char lane[1]

ctypedef struct _Lanes4:
    char lane[4]

ctypedef struct _Lanes8:
    char lane[8]

ctypedef fused lanes_t:
    _Lanes1
    _Lanes4
    _Lanes8


cdef inline floating _not_done(const void* flags, int kind, Py_ssize_t i, floating one) noexcept nogil:
    """1 - flags[i], the flag read in its own dtype then converted, as the rows do."""
    if kind == DT_U8:
        return one - <floating>(<const u8*>flags)[i]
    if kind == DT_F32:
        return one - <floating>(<const f32*>flags)[i]
    return one - <floating>(<const f64*>flags)[i]


cdef void _gae_cols(
    const lanes_t* width,       # NULL: only its type matters (w = sizeof(lanes_t) columns)
    Py_ssize_t T, Py_ssize_t N, Py_ssize_t c0,
    const floating* r, const floating* v, const flag_t* d,
    const floating* nv, const void* nd, int ndk, floating g, floating gl,
    floating* restrict adv,  # OUT
    floating* restrict ret,  # OUT
) noexcept nogil:
    """Columns c0 .. c0 + w - 1, rows T-1 down to 0, with _gae_row_last's and
    _gae_row's arithmetic."""
    cdef int w = sizeof(lanes_t)
    cdef floating a[8]
    cdef floating vn[8]         # value of the next row's observation
    cdef floating nn[8]         # 1 - done of the next row's observation
    cdef floating delta, one = 1
    cdef Py_ssize_t t, o
    cdef int i
    o = (T - 1) * N + c0
    for i in range(w):
        nn[i] = _not_done(nd, ndk, c0 + i, one)
        a[i] = r[o + i] + g * nv[c0 + i] * nn[i] - v[o + i]
        adv[o + i] = a[i]
        ret[o + i] = a[i] + v[o + i]
        vn[i] = v[o + i]
        nn[i] = one - <floating>d[o + i]
    for t in range(T - 2, -1, -1):
        o = t * N + c0
        for i in range(w):
            delta = r[o + i] + g * vn[i] * nn[i] - v[o + i]
            a[i] = delta + gl * nn[i] * a[i]
            adv[o + i] = a[i]
            ret[o + i] = a[i] + v[o + i]
            vn[i] = v[o + i]
            nn[i] = one - <floating>d[o + i]


cdef inline void _gae_cols_any(
    const lanes_t* width,
    Py_ssize_t T, Py_ssize_t N, Py_ssize_t c0,
    const floating* r, const floating* v, const void* d, int dk,
    const floating* nv, const void* nd, int ndk, floating g, floating gl,
    floating* adv,  # OUT
    floating* ret,  # OUT
) noexcept nogil:
    if dk == DT_U8:
        _gae_cols(width, T, N, c0, r, v, <const u8*>d, nv, nd, ndk, g, gl, adv, ret)
    elif dk == DT_F32:
        _gae_cols(width, T, N, c0, r, v, <const f32*>d, nv, nd, ndk, g, gl, adv, ret)
    else:
        _gae_cols(width, T, N, c0, r, v, <const f64*>d, nv, nd, ndk, g, gl, adv, ret)


cdef void _gae_block(
    Py_ssize_t T, Py_ssize_t N, Py_ssize_t c0, Py_ssize_t c1,
    const floating* r, const floating* v, const void* d, int dk,
    const floating* nv, const void* nd, int ndk, floating g, floating gl,
    floating* adv,  # OUT
    floating* ret,  # OUT
) noexcept nogil:
    cdef Py_ssize_t t, o, n = c1 - c0
    cdef Py_ssize_t c = c0
    if n <= 0:
        return
    if n <= _NARROW_MAX:
        if n == 8:
            _gae_cols_any(<_Lanes8*>NULL, T, N, c, r, v, d, dk, nv, nd, ndk, g, gl, adv, ret)
            return
        if n >= 4:
            _gae_cols_any(<_Lanes4*>NULL, T, N, c, r, v, d, dk, nv, nd, ndk, g, gl, adv, ret)
            c += 4
        while c < c1:
            _gae_cols_any(<_Lanes1*>NULL, T, N, c, r, v, d, dk, nv, nd, ndk, g, gl, adv, ret)
            c += 1
        return
    o = (T - 1) * N + c0
    _gae_row_last_any(n, r + o, v + o, nv + c0, <const char*>nd + c0 * _flag_size(ndk), ndk, g,
                      adv + o, ret + o)
    t = T - 2
    while t >= 1:  # rows t and t - 1 together
        o = t * N + c0
        if dk == DT_U8:
            _gae_row2(n, r + o, r + o - N, v + o, v + o - N, v + o + N, <const u8*>d + o + N,
                      <const u8*>d + o, adv + o + N, g, gl, adv + o, ret + o, adv + o - N,
                      ret + o - N)
        elif dk == DT_F32:
            _gae_row2(n, r + o, r + o - N, v + o, v + o - N, v + o + N, <const f32*>d + o + N,
                      <const f32*>d + o, adv + o + N, g, gl, adv + o, ret + o, adv + o - N,
                      ret + o - N)
        else:
            _gae_row2(n, r + o, r + o - N, v + o, v + o - N, v + o + N, <const f64*>d + o + N,
                      <const f64*>d + o, adv + o + N, g, gl, adv + o, ret + o, adv + o - N,
                      ret + o - N)
        t -= 2
    if t == 0:  # T - 1 rows were even: row 0 is left
        o = c0
        if dk == DT_U8:
            _gae_row(n, r + o, v + o, v + o + N, <const u8*>d + o + N, adv + o + N, g, gl,
                     adv + o, ret + o)
        elif dk == DT_F32:
            _gae_row(n, r + o, v + o, v + o + N, <const f32*>d + o + N, adv + o + N, g, gl,
                     adv + o, ret + o)
        else:
            _gae_row(n, r + o, v + o, v + o + N, <const f64*>d + o + N, adv + o + N, g, gl,
                     adv + o, ret + o)


cdef void _tt_block(
    Py_ssize_t T, Py_ssize_t N, Py_ssize_t c0, Py_ssize_t c1,
    const floating* r, const floating* v, const void* te, const void* tr, int fk,
    const floating* nv, const floating* nvs, floating g, floating gl,
    floating* adv,  # OUT
    floating* ret,  # OUT
) noexcept nogil:
    cdef Py_ssize_t t, o, n = c1 - c0
    cdef const floating* vn
    cdef const floating* vf
    cdef const floating* a1
    cdef floating k = 1 if nvs == NULL else 0
    if n <= 0:
        return
    for t in range(T - 1, -1, -1):
        o = t * N + c0
        if t == T - 1:
            vn = nv + c0
            a1 = NULL
        else:
            vn = v + o + N
            a1 = adv + o + N
        vf = vn if nvs == NULL else nvs + o
        if fk == DT_U8:
            _tt_row(n, r + o, v + o, vn, vf, <const u8*>te + o, <const u8*>tr + o, k, a1,
                    g, gl, adv + o, ret + o)
        elif fk == DT_F32:
            _tt_row(n, r + o, v + o, vn, vf, <const f32*>te + o, <const f32*>tr + o, k, a1,
                    g, gl, adv + o, ret + o)
        else:
            _tt_row(n, r + o, v + o, vn, vf, <const f64*>te + o, <const f64*>tr + o, k, a1,
                    g, gl, adv + o, ret + o)


cdef void _vt_block(
    Py_ssize_t T, Py_ssize_t N, Py_ssize_t c0, Py_ssize_t c1,
    const floating* x, bint is_log,
    const floating* r, const floating* v, const void* d, int dk,
    const floating* nv, const void* nd, int ndk,
    floating g, floating lam, floating rho_bar, floating c_bar, floating pg_bar,
    floating* vs,  # OUT
    floating* pg,  # OUT
) noexcept nogil:
    cdef Py_ssize_t t, o, i, n = c1 - c0
    cdef const void* d1
    cdef const floating* v1
    cdef floating* acc1
    cdef int k1
    if n <= 0:
        return
    for t in range(T - 1, -1, -1):
        o = t * N + c0
        if t == T - 1:
            v1 = nv + c0
            acc1 = NULL
            k1 = ndk
            d1 = <const char*>nd + c0 * _flag_size(ndk)
        else:
            v1 = v + o + N
            acc1 = vs + o + N
            k1 = dk
            d1 = <const char*>d + (o + N) * _flag_size(dk)
        if k1 == DT_U8:
            _vt_row(n, x + o, is_log, r + o, v + o, v1, <const u8*>d1, acc1,
                    g, lam, rho_bar, c_bar, pg_bar, vs + o, pg + o)
        elif k1 == DT_F32:
            _vt_row(n, x + o, is_log, r + o, v + o, v1, <const f32*>d1, acc1,
                    g, lam, rho_bar, c_bar, pg_bar, vs + o, pg + o)
        else:
            _vt_row(n, x + o, is_log, r + o, v + o, v1, <const f64*>d1, acc1,
                    g, lam, rho_bar, c_bar, pg_bar, vs + o, pg + o)
    # Row 0 still holds vs - values.
    for i in range(c0, c1):
        vs[i] = v[i] + vs[i]


# ----------------------------------------------------------------------------
# Drivers: split the columns over threads (or not) and run a block kernel
# ----------------------------------------------------------------------------

cdef inline Py_ssize_t _block_width(Py_ssize_t N, int nthreads) noexcept nogil:
    cdef Py_ssize_t w = (N + nthreads - 1) // nthreads
    return (w + 15) // 16 * 16


cdef void _gae_run(int nthreads, Py_ssize_t T, Py_ssize_t N,
                   const floating* r, const floating* v, const void* d, int dk,
                   const floating* nv, const void* nd, int ndk, floating g, floating gl,
                   floating* adv, floating* ret) noexcept nogil:
    cdef Py_ssize_t b, w
    if nthreads <= 1:
        _gae_block(T, N, 0, N, r, v, d, dk, nv, nd, ndk, g, gl, adv, ret)
        return
    w = _block_width(N, nthreads)
    for b in prange(nthreads, num_threads=nthreads, schedule="static"):
        _gae_block(T, N, b * w, min(N, (b + 1) * w), r, v, d, dk, nv, nd, ndk, g, gl, adv, ret)


cdef void _tt_run(int nthreads, Py_ssize_t T, Py_ssize_t N,
                  const floating* r, const floating* v, const void* te, const void* tr, int fk,
                  const floating* nv, const floating* nvs, floating g, floating gl,
                  floating* adv, floating* ret) noexcept nogil:
    cdef Py_ssize_t b, w
    if nthreads <= 1:
        _tt_block(T, N, 0, N, r, v, te, tr, fk, nv, nvs, g, gl, adv, ret)
        return
    w = _block_width(N, nthreads)
    for b in prange(nthreads, num_threads=nthreads, schedule="static"):
        _tt_block(T, N, b * w, min(N, (b + 1) * w), r, v, te, tr, fk, nv, nvs, g, gl, adv, ret)


cdef void _vt_run(int nthreads, Py_ssize_t T, Py_ssize_t N, const floating* x, bint is_log,
                  const floating* r, const floating* v, const void* d, int dk,
                  const floating* nv, const void* nd, int ndk,
                  floating g, floating lam, floating rho_bar, floating c_bar, floating pg_bar,
                  floating* vs, floating* pg) noexcept nogil:
    cdef Py_ssize_t b, w
    if nthreads <= 1:
        _vt_block(T, N, 0, N, x, is_log, r, v, d, dk, nv, nd, ndk,
                  g, lam, rho_bar, c_bar, pg_bar, vs, pg)
        return
    w = _block_width(N, nthreads)
    for b in prange(nthreads, num_threads=nthreads, schedule="static"):
        _vt_block(T, N, b * w, min(N, (b + 1) * w), x, is_log, r, v, d, dk, nv, nd, ndk,
                  g, lam, rho_bar, c_bar, pg_bar, vs, pg)


# ----------------------------------------------------------------------------
# Float dispatch (the only place float32/float64 are named)
# ----------------------------------------------------------------------------

cdef void _gae_dispatch(int ft, int nthreads, Py_ssize_t T, Py_ssize_t N,
                        const void* r, const void* v, const void* d, int dk,
                        const void* nv, const void* nd, int ndk, double gamma, double lam,
                        void* adv, void* ret) noexcept nogil:
    # gamma * lambda is rounded once, as NumPy/torch do with a Python-float product.
    if ft == cnp.NPY_FLOAT32:
        _gae_run(nthreads, T, N, <const f32*>r, <const f32*>v, d, dk, <const f32*>nv, nd, ndk,
                 <f32>gamma, <f32>(gamma * lam), <f32*>adv, <f32*>ret)
    else:
        _gae_run(nthreads, T, N, <const f64*>r, <const f64*>v, d, dk, <const f64*>nv, nd, ndk,
                 gamma, gamma * lam, <f64*>adv, <f64*>ret)


cdef void _tt_dispatch(int ft, int nthreads, Py_ssize_t T, Py_ssize_t N,
                       const void* r, const void* v, const void* te, const void* tr, int fk,
                       const void* nv, const void* nvs, double gamma, double lam,
                       void* adv, void* ret) noexcept nogil:
    if ft == cnp.NPY_FLOAT32:
        _tt_run(nthreads, T, N, <const f32*>r, <const f32*>v, te, tr, fk, <const f32*>nv,
                <const f32*>nvs, <f32>gamma, <f32>(gamma * lam), <f32*>adv, <f32*>ret)
    else:
        _tt_run(nthreads, T, N, <const f64*>r, <const f64*>v, te, tr, fk, <const f64*>nv,
                <const f64*>nvs, gamma, gamma * lam, <f64*>adv, <f64*>ret)


cdef void _vt_dispatch(int ft, int nthreads, Py_ssize_t T, Py_ssize_t N, const void* x,
                       bint is_log, const void* r, const void* v, const void* d, int dk,
                       const void* nv, const void* nd, int ndk, double gamma, double lam,
                       double rho_bar, double c_bar, double pg_bar,
                       void* vs, void* pg) noexcept nogil:
    if ft == cnp.NPY_FLOAT32:
        _vt_run(nthreads, T, N, <const f32*>x, is_log, <const f32*>r, <const f32*>v, d, dk,
                <const f32*>nv, nd, ndk, <f32>gamma, <f32>lam, <f32>rho_bar, <f32>c_bar,
                <f32>pg_bar, <f32*>vs, <f32*>pg)
    else:
        _vt_run(nthreads, T, N, <const f64*>x, is_log, <const f64*>r, <const f64*>v, d, dk,
                <const f64*>nv, nd, ndk, gamma, lam, rho_bar, c_bar, pg_bar,
                <f64*>vs, <f64*>pg)


# ----------------------------------------------------------------------------
# Input checks (NumPy C API; the common case touches no Python-level code)
# ----------------------------------------------------------------------------

cdef inline cnp.ndarray _arr(object x):
    """x itself when it is an ndarray, else np.asarray(x) (shares a CPU torch tensor's memory)."""
    if cnp.PyArray_Check(x):
        return <cnp.ndarray>x
    return np.asarray(x)


cdef str _shape_str(cnp.ndarray a):
    return str(tuple((<object>a).shape))


cdef int _float_type(str fn, tuple names, tuple arrays) except -1:
    """The float type the kernel runs in: the inputs' own when they share float32 or
    float64 (fast path), else float64 if any input is float64, else float32 if any is a
    float, else float64."""
    cdef cnp.ndarray a
    cdef int t0 = cnp.PyArray_TYPE(<cnp.ndarray>arrays[0])
    cdef bint same = t0 == cnp.NPY_FLOAT32 or t0 == cnp.NPY_FLOAT64
    for a in arrays:
        if cnp.PyArray_TYPE(a) != t0:
            same = False
    if same:
        return t0
    for name, a in zip(names, arrays):
        if a.dtype.kind not in "biuf":
            raise TypeError(f"{fn}: {name} must hold real numbers (float32 or float64), "
                            f"got dtype {a.dtype}")
    # float64 if any input is, else float32 if any is a float, else (all integer) float64
    kinds = [(a.dtype.kind, a.dtype.itemsize) for a in arrays]
    if any(k == "f" and size >= 8 for k, size in kinds) or not any(k == "f" for k, _ in kinds):
        return cnp.NPY_FLOAT64
    return cnp.NPY_FLOAT32


cdef inline bint _direct(cnp.ndarray a):
    """Can a kernel read a's buffer as it is (C-contiguous, aligned, native byte order)?"""
    return (cnp.PyArray_IS_C_CONTIGUOUS(a) and cnp.PyArray_ISALIGNED(a)
            and cnp.PyArray_ISNOTSWAPPED(a))


cdef cnp.ndarray _prep_float(str fn, str name, cnp.ndarray a, int ftype):
    """a as a kernel-readable array of ftype (a copy only when it is not one already)."""
    if cnp.PyArray_TYPE(a) == ftype and _direct(a):
        return a
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{fn}: {name} must hold real numbers (float32 or float64), "
                        f"got dtype {a.dtype}")
    return np.array(a, dtype=np.float32 if ftype == cnp.NPY_FLOAT32 else np.float64, order="C")


cdef cnp.ndarray _prep_flags(str fn, str name, cnp.ndarray a, int ftype, int* kind):
    """a as kernel-readable flags: bool/uint8 (read as u8), float32 or float64 as they
    are; other integer dtypes converted to the float type."""
    cdef int t = cnp.PyArray_TYPE(a)
    if t == cnp.NPY_BOOL or t == cnp.NPY_UINT8:
        kind[0] = DT_U8
    elif t == cnp.NPY_FLOAT32:
        kind[0] = DT_F32
    elif t == cnp.NPY_FLOAT64:
        kind[0] = DT_F64
    else:
        if a.dtype.kind not in "biuf":
            raise TypeError(f"{fn}: {name} must be bool, integer or float flags, got dtype {a.dtype}")
        kind[0] = DT_F32 if ftype == cnp.NPY_FLOAT32 else DT_F64
        return np.array(a, dtype=np.float32 if ftype == cnp.NPY_FLOAT32 else np.float64, order="C")
    if _direct(a):
        return a
    return np.array(a, dtype=a.dtype.newbyteorder("="), order="C")


cdef int _check_2d(str fn, str name, cnp.ndarray a, Py_ssize_t T, Py_ssize_t N) except -1:
    if cnp.PyArray_NDIM(a) != 2 or cnp.PyArray_DIM(a, 0) != T or cnp.PyArray_DIM(a, 1) != N:
        raise ValueError(f"{fn}: {name} must have shape [T, N] = ({T}, {N}) like rewards, "
                         f"got {_shape_str(a)}")
    return 0


cdef cnp.ndarray _check_1d(str fn, str name, cnp.ndarray a, Py_ssize_t N):
    """a as shape [N]; [1, N] and [N, 1] (a critic's output) are taken as views."""
    if cnp.PyArray_NDIM(a) == 1 and cnp.PyArray_DIM(a, 0) == N:
        return a
    if cnp.PyArray_NDIM(a) == 2 and cnp.PyArray_SIZE(a) == N and (
            cnp.PyArray_DIM(a, 0) == 1 or cnp.PyArray_DIM(a, 1) == 1):
        return a.reshape(N)
    raise ValueError(f"{fn}: {name} must have shape [N] = ({N},) (or [1, N], [N, 1]), "
                     f"got {_shape_str(a)}")


cdef inline bint _overlap(cnp.ndarray a, cnp.ndarray b):
    cdef uintptr_t a0 = <uintptr_t>cnp.PyArray_DATA(a)
    cdef uintptr_t b0 = <uintptr_t>cnp.PyArray_DATA(b)
    cdef Py_ssize_t na = cnp.PyArray_NBYTES(a), nb = cnp.PyArray_NBYTES(b)
    return na > 0 and nb > 0 and a0 < b0 + nb and b0 < a0 + na


cdef tuple _outputs(str fn, tuple names, object out, int ftype, Py_ssize_t T, Py_ssize_t N,
                    tuple inputs, object like):
    """(user objects to return, array 0, array 1): checked out=, or two new arrays."""
    cdef cnp.npy_intp dims[2]
    cdef cnp.ndarray o0, o1, x
    if out is None:
        dims[0] = T
        dims[1] = N
        o0 = cnp.PyArray_EMPTY(2, dims, ftype, 0)
        o1 = cnp.PyArray_EMPTY(2, dims, ftype, 0)
        if like is not None and not cnp.PyArray_Check(like):
            torch = sys.modules.get("torch")
            if torch is not None and isinstance(like, torch.Tensor):
                return (torch.from_numpy(o0), torch.from_numpy(o1)), o0, o1
        return (o0, o1), o0, o1
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"{fn}: out must be a pair of [T, N] arrays ({names[0]}, {names[1]}), "
                        f"got {type(out).__name__}")
    user0, user1 = out
    o0 = _arr(user0)
    o1 = _arr(user1)
    for name, x in ((names[0], o0), (names[1], o1)):
        if cnp.PyArray_TYPE(x) != ftype:
            raise TypeError(f"{fn}: out {name} must have dtype "
                            f"{'float32' if ftype == cnp.NPY_FLOAT32 else 'float64'} like the "
                            f"inputs, got {x.dtype}")
        _check_2d(fn, "out " + name, x, T, N)
        if not (_direct(x) and cnp.PyArray_ISWRITEABLE(x)):
            raise ValueError(f"{fn}: out {name} must be a writeable C-contiguous array "
                             f"(aligned, native byte order)")
    if _overlap(o0, o1):
        raise ValueError(f"{fn}: the two out arrays share memory")
    for x in inputs:
        if x is not None and (_overlap(o0, x) or _overlap(o1, x)):
            raise ValueError(f"{fn}: out arrays must not share memory with the inputs")
    return (user0, user1), o0, o1


cdef int _threads(object num_threads, Py_ssize_t size, Py_ssize_t N) except -1:
    cdef int n, cap
    if num_threads is None:
        cap = fv_omp_max_threads()
        n = <int>min(<Py_ssize_t>cap, size // PAR_MIN_PER_THREAD, N // PAR_MIN_COLS)
        return fv_omp_threads(n) if n > 1 else 1
    n = num_threads
    if n < 1:
        raise ValueError(f"num_threads must be >= 1 or None, got {num_threads}")
    n = <int>min(<Py_ssize_t>n, (N + 15) // 16)  # whole cache lines per thread
    return fv_omp_threads(n) if n > 1 else 1  # (1 in a forked child: see _omp.pxd)


# ----------------------------------------------------------------------------
# Entry points (called by fastvec.advantages)
# ----------------------------------------------------------------------------

def gae_next_done(rewards, values, dones, next_value, next_done,
                  double gamma, double gae_lambda, out=None, num_threads=None):
    """GAE with CleanRL's convention; see fastvec.advantages.gae."""
    cdef str fn = "gae"
    cdef cnp.ndarray r = _arr(rewards), v = _arr(values), nv = _arr(next_value)
    cdef cnp.ndarray d = _arr(dones), nd = _arr(next_done), adv, ret
    cdef int ft, dk = 0, ndk = 0, nthreads
    cdef Py_ssize_t T, N
    if cnp.PyArray_NDIM(r) != 2:
        raise ValueError(f"{fn}: rewards must be a 2-D [T, N] array (step-major), "
                         f"got shape {_shape_str(r)}")
    T = cnp.PyArray_DIM(r, 0)
    N = cnp.PyArray_DIM(r, 1)
    _check_2d(fn, "values", v, T, N)
    _check_2d(fn, "dones", d, T, N)
    nv = _check_1d(fn, "next_value", nv, N)
    nd = _check_1d(fn, "next_done", nd, N)
    ft = _float_type(fn, ("rewards", "values", "next_value"), (r, v, nv))
    r = _prep_float(fn, "rewards", r, ft)
    v = _prep_float(fn, "values", v, ft)
    nv = _prep_float(fn, "next_value", nv, ft)
    d = _prep_flags(fn, "dones", d, ft, &dk)
    nd = _prep_flags(fn, "next_done", nd, ft, &ndk)
    result, adv, ret = _outputs(fn, ("advantages", "returns"), out, ft, T, N,
                                (r, v, nv, d, nd), rewards)
    if T == 0 or N == 0:
        return result
    nthreads = _threads(num_threads, T * N, N)
    if T * N >= NOGIL_MIN:
        with nogil:
            _gae_dispatch(ft, nthreads, T, N, cnp.PyArray_DATA(r), cnp.PyArray_DATA(v),
                          cnp.PyArray_DATA(d), dk, cnp.PyArray_DATA(nv), cnp.PyArray_DATA(nd), ndk,
                          gamma, gae_lambda, cnp.PyArray_DATA(adv), cnp.PyArray_DATA(ret))
    else:
        _gae_dispatch(ft, nthreads, T, N, cnp.PyArray_DATA(r), cnp.PyArray_DATA(v),
                      cnp.PyArray_DATA(d), dk, cnp.PyArray_DATA(nv), cnp.PyArray_DATA(nd), ndk,
                      gamma, gae_lambda, cnp.PyArray_DATA(adv), cnp.PyArray_DATA(ret))
    return result


def gae_terminated_truncated(rewards, values, terminated, truncated, next_value, next_values,
                             double gamma, double gae_lambda, out=None, num_threads=None):
    """GAE with separate terminated/truncated flags; see fastvec.advantages."""
    cdef str fn = "gae_terminated_truncated"
    cdef cnp.ndarray r = _arr(rewards), v = _arr(values), nv = _arr(next_value)
    cdef cnp.ndarray te = _arr(terminated), tr = _arr(truncated), nvs = None, adv, ret
    cdef int ft, tek = 0, trk = 0, nthreads
    cdef Py_ssize_t T, N
    cdef const void* nvs_p = NULL
    if cnp.PyArray_NDIM(r) != 2:
        raise ValueError(f"{fn}: rewards must be a 2-D [T, N] array (step-major), "
                         f"got shape {_shape_str(r)}")
    T = cnp.PyArray_DIM(r, 0)
    N = cnp.PyArray_DIM(r, 1)
    _check_2d(fn, "values", v, T, N)
    _check_2d(fn, "terminated", te, T, N)
    _check_2d(fn, "truncated", tr, T, N)
    nv = _check_1d(fn, "next_value", nv, N)
    if next_values is not None:
        nvs = _arr(next_values)
        _check_2d(fn, "next_values", nvs, T, N)
        ft = _float_type(fn, ("rewards", "values", "next_value", "next_values"), (r, v, nv, nvs))
        nvs = _prep_float(fn, "next_values", nvs, ft)
    else:
        ft = _float_type(fn, ("rewards", "values", "next_value"), (r, v, nv))
    r = _prep_float(fn, "rewards", r, ft)
    v = _prep_float(fn, "values", v, ft)
    nv = _prep_float(fn, "next_value", nv, ft)
    te = _prep_flags(fn, "terminated", te, ft, &tek)
    tr = _prep_flags(fn, "truncated", tr, ft, &trk)
    if trk != tek:  # one kernel reads both with the same element type: convert to a float one
        if tek == DT_U8:
            te = np.ascontiguousarray(te, dtype=tr.dtype)
            tek = trk
        else:
            tr = np.ascontiguousarray(tr, dtype=te.dtype)
    result, adv, ret = _outputs(fn, ("advantages", "returns"), out, ft, T, N,
                                (r, v, nv, te, tr, nvs), rewards)
    if T == 0 or N == 0:
        return result
    if nvs is not None:
        nvs_p = cnp.PyArray_DATA(nvs)
    nthreads = _threads(num_threads, T * N, N)
    if T * N >= NOGIL_MIN:
        with nogil:
            _tt_dispatch(ft, nthreads, T, N, cnp.PyArray_DATA(r), cnp.PyArray_DATA(v),
                         cnp.PyArray_DATA(te), cnp.PyArray_DATA(tr), tek, cnp.PyArray_DATA(nv),
                         nvs_p, gamma, gae_lambda, cnp.PyArray_DATA(adv), cnp.PyArray_DATA(ret))
    else:
        _tt_dispatch(ft, nthreads, T, N, cnp.PyArray_DATA(r), cnp.PyArray_DATA(v),
                     cnp.PyArray_DATA(te), cnp.PyArray_DATA(tr), tek, cnp.PyArray_DATA(nv),
                     nvs_p, gamma, gae_lambda, cnp.PyArray_DATA(adv), cnp.PyArray_DATA(ret))
    return result


def vtrace(rewards, values, dones, next_value, next_done, log_rhos, rhos,
           double gamma, double rho_bar, double c_bar, double pg_rho_bar, double lambda_,
           out=None, num_threads=None):
    """V-trace targets with CleanRL's done convention; see fastvec.advantages.vtrace."""
    cdef str fn = "vtrace"
    cdef cnp.ndarray r = _arr(rewards), v = _arr(values), nv = _arr(next_value)
    cdef cnp.ndarray d = _arr(dones), nd = _arr(next_done), x, vs, pg
    cdef int ft, dk = 0, ndk = 0, nthreads
    cdef bint is_log = log_rhos is not None
    cdef Py_ssize_t T, N
    if (log_rhos is None) == (rhos is None):
        raise TypeError(f"{fn}: pass exactly one of log_rhos= or rhos= "
                        f"(log of / ratio pi(a|x) / mu(a|x), shape [T, N])")
    x = _arr(log_rhos if is_log else rhos)
    if cnp.PyArray_NDIM(r) != 2:
        raise ValueError(f"{fn}: rewards must be a 2-D [T, N] array (step-major), "
                         f"got shape {_shape_str(r)}")
    T = cnp.PyArray_DIM(r, 0)
    N = cnp.PyArray_DIM(r, 1)
    _check_2d(fn, "values", v, T, N)
    _check_2d(fn, "dones", d, T, N)
    _check_2d(fn, "log_rhos" if is_log else "rhos", x, T, N)
    nv = _check_1d(fn, "next_value", nv, N)
    nd = _check_1d(fn, "next_done", nd, N)
    ft = _float_type(fn, ("rewards", "values", "next_value", "log_rhos" if is_log else "rhos"),
                     (r, v, nv, x))
    r = _prep_float(fn, "rewards", r, ft)
    v = _prep_float(fn, "values", v, ft)
    nv = _prep_float(fn, "next_value", nv, ft)
    x = _prep_float(fn, "log_rhos" if is_log else "rhos", x, ft)
    d = _prep_flags(fn, "dones", d, ft, &dk)
    nd = _prep_flags(fn, "next_done", nd, ft, &ndk)
    result, vs, pg = _outputs(fn, ("vs", "pg_advantages"), out, ft, T, N,
                              (r, v, nv, d, nd, x), rewards)
    if T == 0 or N == 0:
        return result
    nthreads = _threads(num_threads, T * N * 4, N)  # exp() makes it compute-bound
    if T * N >= NOGIL_MIN:
        with nogil:
            _vt_dispatch(ft, nthreads, T, N, cnp.PyArray_DATA(x), is_log, cnp.PyArray_DATA(r),
                         cnp.PyArray_DATA(v), cnp.PyArray_DATA(d), dk, cnp.PyArray_DATA(nv),
                         cnp.PyArray_DATA(nd), ndk, gamma, lambda_, rho_bar, c_bar, pg_rho_bar,
                         cnp.PyArray_DATA(vs), cnp.PyArray_DATA(pg))
    else:
        _vt_dispatch(ft, nthreads, T, N, cnp.PyArray_DATA(x), is_log, cnp.PyArray_DATA(r),
                     cnp.PyArray_DATA(v), cnp.PyArray_DATA(d), dk, cnp.PyArray_DATA(nv),
                     cnp.PyArray_DATA(nd), ndk, gamma, lambda_, rho_bar, c_bar, pg_rho_bar,
                     cnp.PyArray_DATA(vs), cnp.PyArray_DATA(pg))
    return result
