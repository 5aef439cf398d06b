# cython: language_level=3
"""Flatten/unflatten kernels for one leaf of a :class:`fastvec.spaces.Layout`.

Every kernel works on one leaf of a batch: a ``[B, n]`` block of the leaf's
samples on one side and the columns ``[off, off + width)`` of a ``[B, F]``
flat buffer on the other. Each ``def`` is a thin wrapper around a
``cdef ... noexcept nogil`` loop over typed contiguous memoryviews; both are
fused over the leaf's element type and the flat buffer's float type, and the
Python front end (``fastvec/spaces.py``) picks the specialisation once per
leaf (``kernel.__signatures__``) and caches it in the Layout, so a call pays
no fused-type dispatch.

The one-hot kernels check the index range (flatten) or that a one-hot segment
has a nonzero (unflatten) and return the first offending row, or -1; the front
end turns that into a ``ValueError``. Nothing here allocates or touches a
Python object inside ``nogil``.
"""
from numpy cimport int8_t, int16_t, uint16_t, uint64_t

from fastvec._ext._types cimport f32, f64, i64, i32, u32, u8, floating

ctypedef int8_t i8
ctypedef int16_t i16
ctypedef uint16_t u16
ctypedef uint64_t u64

# Element types a Box / MultiBinary leaf may hold (bool leaves are read as u8).
ctypedef fused value_t:
    u8
    i8
    u16
    i16
    u32
    i32
    u64
    i64
    f32
    f64

# Element types of Discrete / MultiDiscrete leaves.
ctypedef fused index_t:
    u8
    i8
    u16
    i16
    u32
    i32
    u64
    i64


# --------------------------------------------------------------------------
# nogil kernels
# --------------------------------------------------------------------------

cdef void _copy_in(const value_t[:, ::1] src,
                   floating[:, ::1] out,  # OUT
                   Py_ssize_t off) noexcept nogil:
    """out[b, off + j] = src[b, j], cast to the flat float type."""
    cdef Py_ssize_t b, j
    cdef Py_ssize_t n = src.shape[1]
    for b in range(src.shape[0]):
        for j in range(n):
            out[b, off + j] = <floating> src[b, j]


cdef Py_ssize_t _onehot_in(const index_t[::1] src,
                           floating[:, ::1] out,  # OUT
                           Py_ssize_t off, Py_ssize_t n, u64 start) noexcept nogil:
    """One-hot of src[b] - start over out[b, off:off + n]; first bad row or -1."""
    cdef Py_ssize_t b, j
    cdef u64 k
    for b in range(src.shape[0]):
        # Unsigned wrap-around makes one comparison cover both ends of the range.
        k = (<u64> src[b]) - start
        if k >= <u64> n:
            return b
        for j in range(n):
            out[b, off + j] = 0
        out[b, off + <Py_ssize_t> k] = 1
    return -1


cdef Py_ssize_t _multi_onehot_in(const index_t[:, ::1] src,
                                 floating[:, ::1] out,  # OUT
                                 Py_ssize_t off, Py_ssize_t width,
                                 const i64[::1] seg, const i64[::1] nvec,
                                 const u64[::1] start) noexcept nogil:
    """Per component c: one-hot of src[b, c] - start[c] at out[b, off + seg[c]:]."""
    cdef Py_ssize_t b, c, j
    cdef Py_ssize_t m = src.shape[1]
    cdef u64 k
    for b in range(src.shape[0]):
        for j in range(width):
            out[b, off + j] = 0
        for c in range(m):
            k = (<u64> src[b, c]) - start[c]
            if k >= <u64> nvec[c]:
                return b
            out[b, off + seg[c] + <Py_ssize_t> k] = 1
    return -1


cdef void _copy_out(const floating[:, ::1] flat, Py_ssize_t off,
                    value_t[:, ::1] dst) noexcept nogil:  # OUT
    """dst[b, j] = flat[b, off + j], cast (C conversion, as NumPy's astype)."""
    cdef Py_ssize_t b, j
    cdef Py_ssize_t n = dst.shape[1]
    for b in range(dst.shape[0]):
        for j in range(n):
            dst[b, j] = <value_t> flat[b, off + j]


cdef void _nonzero_out(const floating[:, ::1] flat, Py_ssize_t off,
                       u8[:, ::1] dst) noexcept nogil:  # OUT
    """dst[b, j] = flat[b, off + j] != 0 (NumPy's cast to bool; NaN is True)."""
    cdef Py_ssize_t b, j
    cdef Py_ssize_t n = dst.shape[1]
    for b in range(dst.shape[0]):
        for j in range(n):
            dst[b, j] = flat[b, off + j] != 0


cdef Py_ssize_t _onehot_out(const floating[:, ::1] flat, Py_ssize_t off,
                            Py_ssize_t n, u64 start,
                            index_t[::1] dst) noexcept nogil:  # OUT
    """dst[b] = start + first j with flat[b, off + j] != 0; first row without one, or -1."""
    cdef Py_ssize_t b, j
    for b in range(dst.shape[0]):
        j = 0
        while j < n and flat[b, off + j] == 0:
            j += 1
        if j == n:
            return b
        dst[b] = <index_t> (start + <u64> j)
    return -1


cdef Py_ssize_t _multi_onehot_out(const floating[:, ::1] flat, Py_ssize_t off,
                                  const i64[::1] seg, const i64[::1] nvec,
                                  const u64[::1] start,
                                  index_t[:, ::1] dst) noexcept nogil:  # OUT
    """Per component c: start[c] + first nonzero of its segment; first bad row or -1."""
    cdef Py_ssize_t b, c, j, n, base
    cdef Py_ssize_t m = dst.shape[1]
    for b in range(dst.shape[0]):
        for c in range(m):
            base = off + seg[c]
            n = nvec[c]
            j = 0
            while j < n and flat[b, base + j] == 0:
                j += 1
            if j == n:
                return b
            dst[b, c] = <index_t> (start[c] + <u64> j)
    return -1


# --------------------------------------------------------------------------
# def wrappers (the front end checks shapes, dtypes and contiguity)
# --------------------------------------------------------------------------

def copy_in(const value_t[:, ::1] src, floating[:, ::1] out, Py_ssize_t off):
    """Copy a ``[B, n]`` leaf block into ``out[:, off:off + n]`` (cast)."""
    with nogil:
        _copy_in(src, out, off)
    return -1


def onehot_in(const index_t[::1] src, floating[:, ::1] out, Py_ssize_t off,
              Py_ssize_t n, u64 start):
    """Write the one-hot of a ``[B]`` Discrete leaf; returns the first out-of-range row or -1."""
    cdef Py_ssize_t bad
    with nogil:
        bad = _onehot_in(src, out, off, n, start)
    return bad


def multi_onehot_in(const index_t[:, ::1] src, floating[:, ::1] out, Py_ssize_t off,
                    Py_ssize_t width, const i64[::1] seg, const i64[::1] nvec,
                    const u64[::1] start):
    """Write the one-hots of a ``[B, m]`` MultiDiscrete leaf; first bad row or -1."""
    cdef Py_ssize_t bad
    with nogil:
        bad = _multi_onehot_in(src, out, off, width, seg, nvec, start)
    return bad


def copy_out(const floating[:, ::1] flat, Py_ssize_t off, value_t[:, ::1] dst):
    """Copy ``flat[:, off:off + n]`` into a ``[B, n]`` leaf block (cast)."""
    with nogil:
        _copy_out(flat, off, dst)
    return -1


def nonzero_out(const floating[:, ::1] flat, Py_ssize_t off, u8[:, ::1] dst):
    """Write ``flat[:, off:off + n] != 0`` into a ``[B, n]`` bool leaf (viewed as uint8)."""
    with nogil:
        _nonzero_out(flat, off, dst)
    return -1


def onehot_out(const floating[:, ::1] flat, Py_ssize_t off, Py_ssize_t n, u64 start,
               index_t[::1] dst):
    """Read a Discrete leaf back from its one-hot; first row without a nonzero, or -1."""
    cdef Py_ssize_t bad
    with nogil:
        bad = _onehot_out(flat, off, n, start, dst)
    return bad


def multi_onehot_out(const floating[:, ::1] flat, Py_ssize_t off, const i64[::1] seg,
                     const i64[::1] nvec, const u64[::1] start, index_t[:, ::1] dst):
    """Read a MultiDiscrete leaf back from its one-hots; first bad row or -1."""
    cdef Py_ssize_t bad
    with nogil:
        bad = _multi_onehot_out(flat, off, seg, nvec, start, dst)
    return bad
