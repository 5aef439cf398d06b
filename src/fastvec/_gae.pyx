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
(type, dtype, shape, C-contiguity, then the raw data pointer), all three through one
function (``_checked_call``). Typed
memoryviews cost more to acquire than a whole small call (docs/gae.md), so
the kernels take pointers to C-contiguous data plus their sizes instead.

Float data and done flags are fused types (``floating``: float32 / float64;
``flag_t``: bool/uint8 read as ``u8``, float32, float64), so a bool ``dones``
next to float32 values costs no conversion copy. A call's arguments travel in
one struct (``_Call``); its element types are chosen in one place (``_typed`` and
``_flagged``), and every function below that is a single specialisation. The kernels are
fused over as types too: one function (``_block``) reads a call's arrays for all three,
and each of its specialisations holds one kernel's loops.
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


# The kernels a call runs (_Call.kernel); _NOT_DONE is the first step of those that read
# next_done (_not_done_row).
cdef enum:
    _GAE
    _GAE_TT
    _VTRACE
    _NOT_DONE

# A call's arguments. Data is untyped here; the block kernels read it as the types of their
# specialisation, picked from float_type and flag_type by _typed.
ctypedef struct _Call:
    int kernel                # _GAE, _GAE_TT or _VTRACE
    int float_type            # DT_F32 or DT_F64: all float data and the outputs
    int flag_type             # DT_U8, DT_F32 or DT_F64: dones, or terminated and truncated
    int next_flag_type        # the same for next_done
    int nthreads
    Py_ssize_t T
    Py_ssize_t N
    const void* rewards       # [T, N]
    const void* values        # [T, N]
    const void* dones         # [T, N]; terminated for _GAE_TT
    const void* truncated     # [T, N]; _GAE_TT only
    const void* next_value    # [N]
    const void* next_done     # [N]; NULL for _GAE_TT
    const void* next_values   # [T, N]; _GAE_TT, NULL when not given
    const void* rhos          # [T, N]; _VTRACE: the ratios or (is_log) their logs
    bint is_log
    double gamma
    double lam
    double rho_bar
    double c_bar
    double pg_bar
    void* out0                # OUT: advantages (_VTRACE: vs)
    void* out1                # OUT: returns (_VTRACE: pg_advantages)


# ----------------------------------------------------------------------------
# Rows (inlined into the block kernels; each inner loop runs across N envs)
# ----------------------------------------------------------------------------

# Output rows are ``restrict``: they never overlap each other or an input row (the
# wrappers reject overlapping out= arrays), and saying so lets the compiler vectorise
# without runtime alias checks (GCC allows 10; a GAE row would need 11).

cdef inline void _gae_row_last(
    Py_ssize_t n,
    const floating* r, const floating* v, const floating* nv, floating g,
    floating* restrict adv,  # OUT; holds 1 - next_done on entry (_not_done_row)
    floating* restrict ret,  # OUT
) noexcept nogil:
    """Row T-1 of the CleanRL/SB3 recurrence: bootstrap from next_value, no running GAE."""
    cdef Py_ssize_t i
    cdef floating nnt, a
    for i in range(n):
        nnt = adv[i]
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
    cdef floating nnt, delta, a, one = 1  # typed, so float32 rows stay float32 (a bare 1 is a double)
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
    floating* restrict acc1,  # OUT: row t + 1 of vs, holding vs - values; finalised here
    floating g, floating lam, floating rho_bar, floating c_bar, floating pg_bar,
    floating* restrict acc,  # OUT: row t of vs, holding vs - values until row t - 1 finalises it
    floating* restrict pg,   # OUT (holds the ratios between the two passes)
) noexcept nogil:
    """One V-trace row. On the last row v1 = next_value, acc1 = d1 = NULL, and acc holds
    1 - next_done on entry (_not_done_row).

    First pass: the importance ratios into the pg row (exp() is a libm call, so
    that pass is scalar); second pass, vectorised: the V-trace recurrence. The clips are
    written so that a NaN ratio stays NaN, as ``min(rho_bar, ratio)`` in NumPy or torch
    keeps it (a diverged policy must show).
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
            disc = g * acc[i]
            acc[i] = (rho_bar if rho > rho_bar else rho) * (r[i] + disc * v1[i] - v[i])
            pg[i] = (pg_bar if rho > pg_bar else rho) * (r[i] + disc * v1[i] - v[i])
    else:
        for i in range(n):
            rho = pg[i]
            disc = g * (one - <floating>d1[i])
            a1 = acc1[i]
            vs1 = v1[i] + a1
            acc1[i] = vs1
            a = (rho_bar if rho > rho_bar else rho) * (r[i] + disc * v1[i] - v[i])
            acc[i] = a + disc * (lam * (c_bar if rho > c_bar else rho)) * a1
            pg[i] = (pg_bar if rho > pg_bar else rho) * (r[i] + disc * vs1 - v[i])


# ----------------------------------------------------------------------------
# Block kernels: rows T-1 .. 0 over the column range [c0, c1)
# ----------------------------------------------------------------------------

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


cdef void _gae_cols(
    const lanes_t* width,       # NULL: only its type matters (w = sizeof(lanes_t) columns)
    Py_ssize_t T, Py_ssize_t N, Py_ssize_t c0,
    const floating* r, const floating* v, const flag_t* d,
    const floating* nv, floating g, floating gl,
    floating* restrict adv,  # OUT; row T-1 holds 1 - next_done on entry (_not_done_row)
    floating* restrict ret,  # OUT
) noexcept nogil:
    """Columns c0 .. c0 + w - 1: row T-1 by _gae_row_last, then rows T-2 down to 0
    with _gae_row's arithmetic, each column's running values in registers. (Computed
    in the lanes too, row T-1 left GCC's SLP vectoriser to vectorise it and then keep
    the 4-wide loop scalar, which is slower: docs/benchmarks.md, "Figures behind the code".)"""
    cdef int w = sizeof(lanes_t)
    cdef floating a[8]
    cdef floating vn[8]         # value of the next row's observation
    cdef floating nn[8]         # 1 - done of the next row's observation
    cdef floating delta, one = 1
    cdef Py_ssize_t t, o
    cdef int i
    o = (T - 1) * N + c0
    _gae_row_last(w, r + o, v + o, nv + c0, g, adv + o, ret + o)
    for i in range(w):
        a[i] = adv[o + i]
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


# The kernels, as types: _block is fused over them, so that the call's arrays are read in
# one place while each of its specialisations holds the loops of one kernel only.
ctypedef struct _Gae:
    char unused

ctypedef struct _Tt:
    char unused

ctypedef struct _Vt:
    char unused

ctypedef fused kernel_t:
    _Gae
    _Tt
    _Vt


cdef void _block(const _Call* call, const kernel_t* kernel, Py_ssize_t c0, Py_ssize_t c1,
                 const floating* ftype, const flag_t* ktype) noexcept nogil:
    """Rows T-1 .. 0 of one kernel over the columns [c0, c1). The pointer arguments are NULL:
    their types pick the kernel and the float and flag types of this specialisation."""
    # What is read of the call is copied into locals first: read through the pointer inside a
    # loop, a field would have to be reloaded after every store to an output row, which might
    # have changed it as far as the compiler knows (-fno-strict-aliasing).
    cdef Py_ssize_t T = call.T, N = call.N, n = c1 - c0
    cdef const floating* r = <const floating*>call.rewards
    cdef const floating* v = <const floating*>call.values
    cdef const flag_t* d = <const flag_t*>call.dones   # terminated for _Tt
    cdef const floating* nv = <const floating*>call.next_value
    cdef floating* out0 = <floating*>call.out0  # advantages (_Vt: vs)
    cdef floating* out1 = <floating*>call.out1  # returns (_Vt: pg_advantages)
    # gamma * lambda is rounded once, as NumPy/torch do with a Python-float product.
    cdef floating g = <floating>call.gamma, gl = <floating>(call.gamma * call.lam)
    cdef const flag_t* tr = NULL
    cdef const floating* nvs = NULL
    cdef const floating* x = NULL
    cdef bint is_log = False
    cdef floating k = 0, lam = 0, rho_bar = 0, c_bar = 0, pg_bar = 0
    cdef const floating* v1       # values of the next row, or next_value on row T-1
    cdef const flag_t* d1         # dones of the next row (NULL on row T-1)
    cdef floating* a1             # out0's next row (NULL on row T-1)
    cdef Py_ssize_t t, o, i, c = c0
    if n <= 0:
        return
    if kernel_t is _Gae:
        if n <= _NARROW_MAX:
            if n == 8:
                _gae_cols(<_Lanes8*>NULL, T, N, c, r, v, d, nv, g, gl, out0, out1)
                return
            if n >= 4:
                _gae_cols(<_Lanes4*>NULL, T, N, c, r, v, d, nv, g, gl, out0, out1)
                c += 4
            while c < c1:
                _gae_cols(<_Lanes1*>NULL, T, N, c, r, v, d, nv, g, gl, out0, out1)
                c += 1
            return
        o = (T - 1) * N + c0
        _gae_row_last(n, r + o, v + o, nv + c0, g, out0 + o, out1 + o)
        t = T - 2
        while t >= 1:  # rows t and t - 1 together
            o = t * N + c0
            _gae_row2(n, r + o, r + o - N, v + o, v + o - N, v + o + N, d + o + N, d + o,
                      out0 + o + N, g, gl, out0 + o, out1 + o, out0 + o - N, out1 + o - N)
            t -= 2
        if t == 0:  # T - 1 rows were even: row 0 is left
            o = c0
            _gae_row(n, r + o, v + o, v + o + N, d + o + N, out0 + o + N, g, gl, out0 + o,
                     out1 + o)
    else:  # _Tt and _Vt: row by row, each from row t + 1 or, on row T-1, from next_value
        if kernel_t is _Tt:
            tr = <const flag_t*>call.truncated
            nvs = <const floating*>call.next_values
            k = 1 if nvs == NULL else 0
        else:
            x = <const floating*>call.rhos
            is_log = call.is_log
            lam = <floating>call.lam
            rho_bar = <floating>call.rho_bar
            c_bar = <floating>call.c_bar
            pg_bar = <floating>call.pg_bar
        for t in range(T - 1, -1, -1):
            o = t * N + c0
            if t == T - 1:
                v1 = nv + c0
                d1 = NULL
                a1 = NULL
            else:
                v1 = v + o + N
                d1 = d + o + N
                a1 = out0 + o + N
            if kernel_t is _Tt:
                _tt_row(n, r + o, v + o, v1, v1 if nvs == NULL else nvs + o, d + o, tr + o, k, a1,
                        g, gl, out0 + o, out1 + o)
            else:
                _vt_row(n, x + o, is_log, r + o, v + o, v1, d1, a1, g, lam, rho_bar, c_bar, pg_bar,
                        out0 + o, out1 + o)
        if kernel_t is _Vt:
            # Row 0 still holds vs - values.
            for i in range(c0, c1):
                out0[i] = v[i] + out0[i]


cdef void _not_done_row(const _Call* call, const floating* ftype, const flag_t* ktype) noexcept nogil:
    """Row T-1 of out0 := 1 - next_done, in the float type: the kernels read next_done
    there, so that they are specialised for one flag type (next_done's may differ from
    dones', e.g. SB3's float episode_starts and bool dones)."""
    cdef const flag_t* nd = <const flag_t*>call.next_done
    cdef floating* row = <floating*>call.out0 + (call.T - 1) * call.N
    cdef floating one = 1
    cdef Py_ssize_t i
    for i in range(call.N):
        row[i] = one - <floating>nd[i]


# ----------------------------------------------------------------------------
# Driver and dispatch: one call, its element types chosen once
# ----------------------------------------------------------------------------

cdef inline Py_ssize_t _block_width(Py_ssize_t N, int nthreads) noexcept nogil:
    cdef Py_ssize_t w = (N + nthreads - 1) // nthreads
    return (w + 15) // 16 * 16


cdef inline void _columns(const _Call* call, int kernel, Py_ssize_t c0, Py_ssize_t c1,
                          const floating* ftype, const flag_t* ktype) noexcept nogil:
    """kernel (_GAE, _GAE_TT or _VTRACE) over the columns [c0, c1)."""
    if kernel == _GAE:
        _block(call, <const _Gae*>NULL, c0, c1, ftype, ktype)
    elif kernel == _GAE_TT:
        _block(call, <const _Tt*>NULL, c0, c1, ftype, ktype)
    else:
        _block(call, <const _Vt*>NULL, c0, c1, ftype, ktype)


cdef void _run(const _Call* call, int kernel, const floating* ftype,
               const flag_t* ktype) noexcept nogil:
    """kernel over all columns, split over call.nthreads threads (or not)."""
    cdef Py_ssize_t b, w, N = call.N
    cdef int nthreads = call.nthreads
    if kernel == _NOT_DONE:
        _not_done_row(call, ftype, ktype)
        return
    if nthreads <= 1:
        _columns(call, kernel, 0, N, ftype, ktype)
        return
    w = _block_width(N, nthreads)
    for b in prange(nthreads, num_threads=nthreads, schedule="static"):
        _columns(call, kernel, b * w, min(N, (b + 1) * w), ftype, ktype)


cdef void _typed(const _Call* call, int kernel, int flag_type) noexcept nogil:
    """_run specialised for call's float type and flag_type: the one place the float types
    are named (_flagged names the flag types)."""
    if call.float_type == DT_F32:
        _flagged(call, kernel, flag_type, <const f32*>NULL)
    else:
        _flagged(call, kernel, flag_type, <const f64*>NULL)


cdef inline void _flagged(const _Call* call, int kernel, int flag_type,
                          const floating* ftype) noexcept nogil:
    """_run specialised for flag_type too."""
    if flag_type == DT_U8:
        _run(call, kernel, ftype, <const u8*>NULL)
    elif flag_type == DT_F32:
        _run(call, kernel, ftype, <const f32*>NULL)
    else:
        _run(call, kernel, ftype, <const f64*>NULL)


cdef void _dispatch(const _Call* call) noexcept nogil:
    """Run call's kernel (after _not_done_row when it reads next_done)."""
    if call.next_done != NULL:
        _typed(call, _NOT_DONE, call.next_flag_type)
    _typed(call, call.kernel, call.flag_type)


cdef inline void _call(const _Call* call):
    """Run call, without the GIL unless it is too small to be worth releasing."""
    if call.T * call.N >= NOGIL_MIN:
        with nogil:
            _dispatch(call)
    else:
        _dispatch(call)


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


cdef inline const void* _data(cnp.ndarray a) noexcept:
    """a's data, or NULL for None."""
    return NULL if a is None else cnp.PyArray_DATA(a)


cdef object _checked_call(int kernel, str fn, rewards, values, flags, truncated, next_value,
                          next_flags, extra, bint is_log, double gamma, double lam,
                          double rho_bar, double c_bar, double pg_bar, out, num_threads):
    """Check and prepare a call's inputs as ``kernel`` reads them, run it, and return its two
    outputs (``out``, or two new arrays: tensors when ``rewards`` is a torch tensor).

    The entry points' arguments, by role: ``flags`` the dones (terminated for _GAE_TT);
    ``truncated`` _GAE_TT's (else None); ``next_flags`` next_done (None for _GAE_TT);
    ``extra`` the other [T, N] floats the kernel reads: _GAE_TT's next_values (None when not
    given), V-trace's ratios or (``is_log``) their logs (None: not exactly one was given).
    Inputs are checked in the order of the entry point's arguments.
    """
    cdef bint tt = kernel == _GAE_TT, vt = kernel == _VTRACE
    cdef str flags_name = "terminated" if tt else "dones"
    cdef str extra_name = "next_values" if tt else "log_rhos" if is_log else "rhos"
    cdef cnp.ndarray r = _arr(rewards), v = _arr(values), nv = _arr(next_value)
    cdef cnp.ndarray d = _arr(flags), tr = None, nf = None, x = None, o0, o1
    cdef int ft, dk = 0, trk = 0, nfk = 0
    cdef Py_ssize_t T, N
    cdef _Call c
    if tt:
        tr = _arr(truncated)
    else:
        nf = _arr(next_flags)
    if vt:
        if extra is None:
            raise TypeError(f"{fn}: pass exactly one of log_rhos= or rhos= "
                            f"(log of / ratio pi(a|x) / mu(a|x), shape [T, N])")
        x = _arr(extra)
    if cnp.PyArray_NDIM(r) != 2:
        raise ValueError(f"{fn}: rewards must be a 2-D [T, N] array (step-major), "
                         f"got shape {_shape_str(r)}")
    T = cnp.PyArray_DIM(r, 0)
    N = cnp.PyArray_DIM(r, 1)
    _check_2d(fn, "values", v, T, N)
    _check_2d(fn, flags_name, d, T, N)
    if tt:
        _check_2d(fn, "truncated", tr, T, N)
    if vt:
        _check_2d(fn, extra_name, x, T, N)
    nv = _check_1d(fn, "next_value", nv, N)
    if nf is not None:
        nf = _check_1d(fn, "next_done", nf, N)
    if tt and extra is not None:
        x = _arr(extra)
        _check_2d(fn, extra_name, x, T, N)
    if x is None:
        ft = _float_type(fn, ("rewards", "values", "next_value"), (r, v, nv))
    else:
        ft = _float_type(fn, ("rewards", "values", "next_value", extra_name), (r, v, nv, x))
        x = _prep_float(fn, extra_name, x, ft)
    r = _prep_float(fn, "rewards", r, ft)
    v = _prep_float(fn, "values", v, ft)
    nv = _prep_float(fn, "next_value", nv, ft)
    d = _prep_flags(fn, flags_name, d, ft, &dk)
    if tt:
        tr = _prep_flags(fn, "truncated", tr, ft, &trk)
        if trk != dk:  # one kernel reads both with the same element type: convert to a float one
            if dk == DT_U8:
                d = np.ascontiguousarray(d, dtype=tr.dtype)
                dk = trk
            else:
                tr = np.ascontiguousarray(tr, dtype=d.dtype)
    else:
        nf = _prep_flags(fn, "next_done", nf, ft, &nfk)
    result, o0, o1 = _outputs(fn, ("vs", "pg_advantages") if vt else ("advantages", "returns"),
                              out, ft, T, N, (r, v, nv, d, tr, nf, x), rewards)
    if T == 0 or N == 0:
        return result
    c = _Call(
        kernel=kernel, float_type=DT_F32 if ft == cnp.NPY_FLOAT32 else DT_F64, flag_type=dk,
        next_flag_type=nfk,
        # (exp() makes V-trace compute-bound: threads pay from smaller calls)
        nthreads=_threads(num_threads, T * N * 4 if vt else T * N, N),
        T=T, N=N, rewards=cnp.PyArray_DATA(r), values=cnp.PyArray_DATA(v),
        dones=cnp.PyArray_DATA(d), truncated=_data(tr), next_value=cnp.PyArray_DATA(nv),
        next_done=_data(nf), next_values=_data(x if tt else None),
        rhos=_data(x if vt else None), is_log=is_log,
        gamma=gamma, lam=lam, rho_bar=rho_bar, c_bar=c_bar, pg_bar=pg_bar,
        out0=cnp.PyArray_DATA(o0), out1=cnp.PyArray_DATA(o1))
    _call(&c)
    return result


# ----------------------------------------------------------------------------
# Entry points (called by fastvec.advantages)
# ----------------------------------------------------------------------------

def gae_next_done(rewards, values, dones, next_value, next_done,
                  double gamma, double gae_lambda, out=None, num_threads=None):
    """GAE with CleanRL's convention; see fastvec.advantages.gae."""
    return _checked_call(_GAE, "gae", rewards, values, dones, None, next_value, next_done, None,
                         False, gamma, gae_lambda, 0, 0, 0, out, num_threads)


def gae_terminated_truncated(rewards, values, terminated, truncated, next_value, next_values,
                             double gamma, double gae_lambda, out=None, num_threads=None):
    """GAE with separate terminated/truncated flags; see fastvec.advantages."""
    return _checked_call(_GAE_TT, "gae_terminated_truncated", rewards, values, terminated,
                         truncated, next_value, None, next_values, False, gamma, gae_lambda,
                         0, 0, 0, out, num_threads)


def vtrace(rewards, values, dones, next_value, next_done, log_rhos, rhos,
           double gamma, double rho_bar, double c_bar, double pg_rho_bar, double lambda_,
           out=None, num_threads=None):
    """V-trace targets with CleanRL's done convention; see fastvec.advantages.vtrace."""
    cdef object ratios = None   # exactly one of log_rhos and rhos, or None
    if (log_rhos is None) != (rhos is None):
        ratios = rhos if log_rhos is None else log_rhos
    return _checked_call(_VTRACE, "vtrace", rewards, values, dones, None, next_value, next_done,
                         ratios, log_rhos is not None, gamma, lambda_, rho_bar, c_bar,
                         pg_rho_bar, out, num_threads)
