# cython: language_level=3
"""Flatten/unflatten kernels over the leaves of a :class:`fastvec.spaces.Layout`.

Layout: a ``[B, F]`` flat buffer (typed contiguous memoryview, float32 or float64) and one
C-contiguous array per leaf holding ``[B, *leaf.shape]`` samples. Each leaf kind has one
``cdef ... noexcept nogil`` kernel fused over the leaf's element type and the flat float
type:

* ``_copy_in`` / ``_copy_out``: Box and MultiBinary values, copied with a C cast (NumPy's
  ``astype``); ``_nonzero_out`` for bool leaves (``!= 0``, NumPy's cast to bool);
* ``_onehot_in`` / ``_onehot_out``: Discrete, one-hot of ``value - start``;
* ``_multi_onehot_in`` / ``_multi_onehot_out``: MultiDiscrete, one one-hot per component.

One call of :func:`flatten_into` / :func:`unflatten_into` runs every leaf of a layout. Per
leaf it checks the array in C (exact ndarray, element type, C-contiguous, aligned, native
byte order, shape); an array that does not pass is handed to the front end's ``coerce``
callback (which casts, copies, or raises a clear error) and checked again. The kernels
then read the leaf through its data pointer: acquiring a typed memoryview per leaf costs
~0.4 µs, more than the copy itself for one sample of a small leaf. The kernels then run
block of rows by block of rows (``BLOCK_BYTES`` of the flat buffer), every leaf per block,
so the rows being filled stay in cache while all leaves write their columns. Inside
``nogil`` nothing is allocated and no Python object is touched; the GIL is released only
when the call is large enough for that to pay.
"""
cimport numpy as cnp
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from numpy cimport int8_t, int16_t, uint16_t, uint64_t

from fastvec._ext._types cimport f32, f64, i64, i32, u32, u8, floating

cnp.import_array()

ctypedef int8_t i8
ctypedef int16_t i16
ctypedef uint16_t u16
ctypedef uint64_t u64

# Element types a leaf may hold (bool leaves are read as u8).
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

# Leaf kinds (LeafPlan.kind).
cdef enum:
    COPY = 0
    ONEHOT = 1
    MULTI_ONEHOT = 2
    NONZERO = 3
    PYTHON = 4          # no kernel for this leaf's dtype: the front end runs NumPy for it
    # Release the GIL only for calls with at least this many flat values.
    NOGIL_MIN = 16384
    # Bytes of the flat buffer processed per block of rows (all leaves, then the next block).
    BLOCK_BYTES = 32768


cdef struct LeafSpec:
    int kind            # COPY, ONEHOT, MULTI_ONEHOT, NONZERO or PYTHON
    int code            # element type of the leaf array, in value_t order
    Py_ssize_t off      # column of the leaf's first flat value
    Py_ssize_t width    # values per sample in the leaf array (components for MultiDiscrete)
    Py_ssize_t flat_width  # flat values per sample
    Py_ssize_t itemsize    # bytes per element of the leaf array
    u64 start           # Discrete start (two's complement)
    const i64* seg      # MultiDiscrete: segment offset of each component
    const i64* nvec     # MultiDiscrete: size of each component
    const u64* starts   # MultiDiscrete: start of each component

# Element type codes, in value_t order; -1: no kernel.
_TYPE_CODES = {
    cnp.NPY_UINT8: 0, cnp.NPY_BOOL: 0, cnp.NPY_INT8: 1, cnp.NPY_UINT16: 2, cnp.NPY_INT16: 3,
    cnp.NPY_UINT32: 4, cnp.NPY_INT32: 5, cnp.NPY_UINT64: 6, cnp.NPY_INT64: 7,
    cnp.NPY_FLOAT32: 8, cnp.NPY_FLOAT64: 9,
}
# The fixed-width C types above under their other NumPy names (long/longlong, int/long...).
import numpy as _np
_np_integer = _np.integer
for _name, _code in (("uint8", 0), ("bool", 0), ("int8", 1), ("uint16", 2), ("int16", 3),
                     ("uint32", 4), ("int32", 5), ("uint64", 6), ("int64", 7),
                     ("float32", 8), ("float64", 9)):
    _TYPE_CODES[_np.dtype(_name).num] = _code


def type_code(dtype) -> int:
    """The kernel element-type code for a NumPy dtype, or -1 when no kernel reads it."""
    import numpy as np
    dtype = np.dtype(dtype)
    if not dtype.isnative:
        return -1
    return _TYPE_CODES.get(dtype.num, -1)


# --------------------------------------------------------------------------
# nogil kernels. `out`/`flat` point at column `off` of row 0; rows are `stride` apart.
# --------------------------------------------------------------------------

cdef void _copy_in(const value_t* src, Py_ssize_t rows, Py_ssize_t width,
                   floating* out, Py_ssize_t stride) noexcept nogil:  # OUT: out
    """out[b, j] = src[b, j], cast to the flat float type."""
    cdef Py_ssize_t b, j
    for b in range(rows):
        for j in range(width):
            out[j] = <floating> src[j]
        src += width
        out += stride


cdef Py_ssize_t _onehot_in(const value_t* src, Py_ssize_t rows, Py_ssize_t n, u64 start,
                           floating* out, Py_ssize_t stride) noexcept nogil:  # OUT: out
    """One-hot of src[b] - start over out[b, 0:n]; returns the first out-of-range row or -1."""
    cdef Py_ssize_t b, j
    cdef u64 k
    for b in range(rows):
        # Unsigned wrap-around makes one comparison check both ends of the range.
        k = (<u64> <i64> src[b]) - start
        if k >= <u64> n:
            return b
        for j in range(n):
            out[j] = 0
        out[k] = 1
        out += stride
    return -1


cdef Py_ssize_t _multi_onehot_in(const value_t* src, Py_ssize_t rows, Py_ssize_t m,
                                 Py_ssize_t width, const i64* seg, const i64* nvec,
                                 const u64* start,
                                 floating* out, Py_ssize_t stride) noexcept nogil:  # OUT: out
    """Component c of row b: one-hot of src[b, c] - start[c] at out[b, seg[c]:]."""
    cdef Py_ssize_t b, c, j
    cdef u64 k
    for b in range(rows):
        for j in range(width):
            out[j] = 0
        for c in range(m):
            k = (<u64> <i64> src[c]) - start[c]
            if k >= <u64> nvec[c]:
                return b
            out[seg[c] + <Py_ssize_t> k] = 1
        src += m
        out += stride
    return -1


cdef inline Py_ssize_t _first_nonzero(const floating* f, Py_ssize_t n) noexcept nogil:
    """Index of the first nonzero of f[0:n] (n if none), as gymnasium's ``np.nonzero(x)[0][0]``.

    A one-hot segment has exactly one nonzero: count the nonzeros and sum their positions
    with arithmetic only (no data-dependent branch: one-hot positions are random, and a
    mispredicted branch per segment cost several times the scan), and fall back to a plain
    scan when the segment is not one-hot.
    """
    cdef Py_ssize_t j, nz
    cdef Py_ssize_t count = 0
    cdef Py_ssize_t at = 0
    for j in range(n):
        nz = f[j] != 0
        count += nz
        at += nz * j
    if count == 1:
        return at
    j = 0
    while j < n and f[j] == 0:
        j += 1
    return j


cdef void _copy_out(const floating* flat, Py_ssize_t stride, Py_ssize_t rows,
                    Py_ssize_t width, value_t* dst) noexcept nogil:  # OUT: dst
    """dst[b, j] = flat[b, j], C conversion (as NumPy's astype)."""
    cdef Py_ssize_t b, j
    for b in range(rows):
        for j in range(width):
            dst[j] = <value_t> flat[j]
        flat += stride
        dst += width


cdef void _nonzero_out(const floating* flat, Py_ssize_t stride, Py_ssize_t rows,
                       Py_ssize_t width, u8* dst) noexcept nogil:  # OUT: dst
    """dst[b, j] = flat[b, j] != 0 (NumPy's cast to bool; NaN is True)."""
    cdef Py_ssize_t b, j
    for b in range(rows):
        for j in range(width):
            dst[j] = flat[j] != 0
        flat += stride
        dst += width


cdef Py_ssize_t _onehot_out(const floating* flat, Py_ssize_t stride, Py_ssize_t rows,
                            Py_ssize_t n, u64 start, value_t* dst) noexcept nogil:  # OUT: dst
    """dst[b] = start + first j with flat[b, j] != 0; the first row without one, or -1."""
    cdef Py_ssize_t b, j
    for b in range(rows):
        j = _first_nonzero(flat, n)
        if j == n:
            return b
        dst[b] = <value_t> <i64> (start + <u64> j)
        flat += stride
    return -1


cdef Py_ssize_t _multi_onehot_out(const floating* flat, Py_ssize_t stride, Py_ssize_t rows,
                                  Py_ssize_t m, const i64* seg, const i64* nvec,
                                  const u64* start, value_t* dst) noexcept nogil:  # OUT: dst
    """Component c: start[c] + first nonzero of its segment; the first bad row, or -1."""
    cdef Py_ssize_t b, c, j, n
    for b in range(rows):
        for c in range(m):
            n = nvec[c]
            j = _first_nonzero(flat + seg[c], n)
            if j == n:
                return b
            dst[c] = <value_t> <i64> (start[c] + <u64> j)
        flat += stride
        dst += m
    return -1


# --------------------------------------------------------------------------
# Per-leaf dispatch (nogil): kind and element type were fixed when the plan was built.
# --------------------------------------------------------------------------

cdef Py_ssize_t _leaf_in(const LeafSpec* p, const value_t* src, Py_ssize_t rows,
                         floating* out, Py_ssize_t stride) noexcept nogil:
    if p.kind == COPY:
        _copy_in(src, rows, p.width, out + p.off, stride)
        return -1
    if p.kind == ONEHOT:
        return _onehot_in(src, rows, p.flat_width, p.start, out + p.off, stride)
    return _multi_onehot_in(src, rows, p.width, p.flat_width, p.seg, p.nvec, p.starts,
                            out + p.off, stride)


cdef Py_ssize_t _dispatch_in(const LeafSpec* p, const void* src, Py_ssize_t rows,
                             floating* out, Py_ssize_t stride) noexcept nogil:
    cdef int code = p.code
    if code == 0:
        return _leaf_in(p, <const u8*> src, rows, out, stride)
    elif code == 1:
        return _leaf_in(p, <const i8*> src, rows, out, stride)
    elif code == 2:
        return _leaf_in(p, <const u16*> src, rows, out, stride)
    elif code == 3:
        return _leaf_in(p, <const i16*> src, rows, out, stride)
    elif code == 4:
        return _leaf_in(p, <const u32*> src, rows, out, stride)
    elif code == 5:
        return _leaf_in(p, <const i32*> src, rows, out, stride)
    elif code == 6:
        return _leaf_in(p, <const u64*> src, rows, out, stride)
    elif code == 7:
        return _leaf_in(p, <const i64*> src, rows, out, stride)
    elif code == 8:
        return _leaf_in(p, <const f32*> src, rows, out, stride)
    return _leaf_in(p, <const f64*> src, rows, out, stride)


cdef Py_ssize_t _leaf_out(const LeafSpec* p, const floating* flat, Py_ssize_t stride, Py_ssize_t rows,
                          value_t* dst) noexcept nogil:
    if p.kind == COPY:
        _copy_out(flat + p.off, stride, rows, p.width, dst)
        return -1
    if p.kind == NONZERO:
        _nonzero_out(flat + p.off, stride, rows, p.width, <u8*> dst)
        return -1
    if p.kind == ONEHOT:
        return _onehot_out(flat + p.off, stride, rows, p.flat_width, p.start, dst)
    return _multi_onehot_out(flat + p.off, stride, rows, p.width, p.seg, p.nvec, p.starts, dst)


cdef Py_ssize_t _dispatch_out(const LeafSpec* p, const floating* flat, Py_ssize_t stride,
                              Py_ssize_t rows, void* dst) noexcept nogil:
    cdef int code = p.code
    if code == 0:
        return _leaf_out(p, flat, stride, rows, <u8*> dst)
    elif code == 1:
        return _leaf_out(p, flat, stride, rows, <i8*> dst)
    elif code == 2:
        return _leaf_out(p, flat, stride, rows, <u16*> dst)
    elif code == 3:
        return _leaf_out(p, flat, stride, rows, <i16*> dst)
    elif code == 4:
        return _leaf_out(p, flat, stride, rows, <u32*> dst)
    elif code == 5:
        return _leaf_out(p, flat, stride, rows, <i32*> dst)
    elif code == 6:
        return _leaf_out(p, flat, stride, rows, <u64*> dst)
    elif code == 7:
        return _leaf_out(p, flat, stride, rows, <i64*> dst)
    elif code == 8:
        return _leaf_out(p, flat, stride, rows, <f32*> dst)
    return _leaf_out(p, flat, stride, rows, <f64*> dst)


# --------------------------------------------------------------------------
# Plans and the two entry points
# --------------------------------------------------------------------------

cdef class LeafPlan:
    """What the kernels need to know about one leaf, fixed once per Layout and flat dtype.

    Args:
        kind: 0 copy, 1 one-hot (Discrete), 2 one-hot per component (MultiDiscrete),
            3 ``!= 0`` (bool leaf, unflatten), 4 no kernel (NumPy in the front end).
        dtype: dtype of the leaf array the kernel reads or writes.
        shape: shape of one sample of that array.
        off: column of the leaf's first flat value.
        flat_width: number of flat values one sample takes.
        start, seg, nvec, starts: Discrete start; MultiDiscrete per-component segment
            offsets, sizes and starts (``start`` values as two's-complement uint64).
    """
    cdef LeafSpec spec
    cdef readonly int typenum, ndim
    cdef readonly tuple shape
    cdef Py_ssize_t dims[32]
    cdef readonly object seg, nvec, starts   # keep the arrays the spec points into alive

    def __init__(self, int kind, dtype, tuple shape, Py_ssize_t off, Py_ssize_t flat_width,
                 start=0, seg=None, nvec=None, starts=None):
        import numpy as np
        cdef const i64[::1] seg_v
        cdef const i64[::1] nvec_v
        cdef const u64[::1] start_v
        dtype = np.dtype(dtype)
        if len(shape) > 31:
            raise ValueError(f"leaf shape {shape} has more than 31 dimensions")
        self.spec.kind = kind
        self.spec.code = type_code(dtype)
        if self.spec.code < 0:
            self.spec.kind = PYTHON
        self.typenum = dtype.num
        self.shape = shape
        self.ndim = len(shape)
        self.spec.width = 1
        for i, d in enumerate(shape):
            self.dims[i] = d
            self.spec.width *= d
        self.spec.off = off
        self.spec.flat_width = flat_width
        self.spec.itemsize = dtype.itemsize
        self.spec.start = start
        if kind == MULTI_ONEHOT:
            self.seg = np.ascontiguousarray(seg, dtype=np.int64)
            self.nvec = np.ascontiguousarray(nvec, dtype=np.int64)
            self.starts = np.ascontiguousarray(starts, dtype=np.uint64)
            if not (self.seg.shape == self.nvec.shape == self.starts.shape
                    == (self.spec.width,)):
                raise ValueError("seg, nvec and starts must each have one entry per component")
            if self.spec.width:
                seg_v = self.seg
                nvec_v = self.nvec
                start_v = self.starts
                self.spec.seg = &seg_v[0]
                self.spec.nvec = &nvec_v[0]
                self.spec.starts = &start_v[0]

    @property
    def kind(self) -> int:
        """0 copy, 1 one-hot, 2 one-hot per component, 3 ``!= 0``, 4 NumPy (no kernel)."""
        return self.spec.kind

    cdef bint accepts(self, object value, Py_ssize_t rows, bint single):
        """Whether ``value`` is an ndarray the kernel can read as this leaf, as is."""
        cdef cnp.ndarray a
        cdef int k, lead
        if type(value) is not cnp.ndarray:
            return False
        a = <cnp.ndarray> value
        if cnp.PyArray_TYPE(a) != self.typenum or not cnp.PyArray_ISCARRAY_RO(a):
            return False
        lead = 0 if single else 1
        if cnp.PyArray_NDIM(a) != self.ndim + lead:
            return False
        if not single and cnp.PyArray_DIM(a, 0) != rows:
            return False
        for k in range(self.ndim):
            if cnp.PyArray_DIM(a, k + lead) != self.dims[k]:
                return False
        return True


cdef Py_ssize_t _block_rows(Py_ssize_t stride, Py_ssize_t itemsize) noexcept nogil:
    """Rows per block so that a block of the flat buffer stays in L1/L2 while every leaf of
    the block is written (or read): all leaves' columns of a row share its cache lines."""
    cdef Py_ssize_t rows = BLOCK_BYTES // (stride * itemsize + 1)
    return rows if rows > 0 else 1


cdef Py_ssize_t _run_in(const LeafSpec** specs, const char** srcs, Py_ssize_t n,
                        Py_ssize_t rows, floating* base, Py_ssize_t stride,
                        Py_ssize_t* bad_leaf) noexcept nogil:  # OUT: base, bad_leaf
    """Every leaf, block of rows by block of rows; the first bad row (bad_leaf[0] = its leaf)
    or -1."""
    cdef Py_ssize_t i, bad, count
    cdef Py_ssize_t start = 0
    cdef Py_ssize_t block = _block_rows(stride, sizeof(floating))
    while start < rows:
        count = min(block, rows - start)
        for i in range(n):
            if specs[i] == NULL:
                continue
            bad = _dispatch_in(specs[i], srcs[i] + start * specs[i].width * specs[i].itemsize,
                               count, base + start * stride, stride)
            if bad >= 0:
                bad_leaf[0] = i
                return start + bad
        start += count
    return -1


cdef Py_ssize_t _run_out(const LeafSpec** specs, char** dsts, Py_ssize_t n, Py_ssize_t rows,
                         const floating* base, Py_ssize_t stride,
                         Py_ssize_t* bad_leaf) noexcept nogil:  # OUT: dsts, bad_leaf
    """Every leaf, block of rows by block of rows; the first bad row (bad_leaf[0] = its leaf)
    or -1."""
    cdef Py_ssize_t i, bad, count
    cdef Py_ssize_t start = 0
    cdef Py_ssize_t block = _block_rows(stride, sizeof(floating))
    while start < rows:
        count = min(block, rows - start)
        for i in range(n):
            if specs[i] == NULL:
                continue
            bad = _dispatch_out(specs[i], base + start * stride, stride, count,
                                dsts[i] + start * specs[i].width * specs[i].itemsize)
            if bad >= 0:
                bad_leaf[0] = i
                return start + bad
        start += count
    return -1


def flatten_into(list plans, list values, floating[:, ::1] out, object coerce, bint single):
    """Flatten the leaves ``values`` (in layout order) into ``out[B, F]``.

    ``coerce(i, value, rows, single)`` is called for a leaf that is not already an array the
    kernel can read (wrong type, dtype, layout or shape); it returns one or raises. Leaves of
    kind 4 are skipped (the front end writes them). Returns None, or ``(leaf index, row)`` of
    a Discrete/MultiDiscrete value outside its space.
    """
    cdef Py_ssize_t i, bad, total = 0, rows = out.shape[0], stride = out.shape[1]
    cdef Py_ssize_t n = len(plans)
    cdef Py_ssize_t bad_leaf = -1
    cdef LeafPlan p
    cdef object v
    cdef floating* base
    cdef i64 scalar
    cdef const LeafSpec** specs
    cdef const char** srcs
    cdef list kept = []      # arrays made by coerce, alive until the kernels ran
    if rows == 0 or stride == 0:
        return None
    if len(values) != n:
        raise ValueError(f"expected {n} leaf values, got {len(values)}")
    base = &out[0, 0]
    specs = <const LeafSpec**> PyMem_Malloc(n * sizeof(LeafSpec*) + 1)
    srcs = <const char**> PyMem_Malloc(n * sizeof(char*) + 1)
    if specs == NULL or srcs == NULL:
        PyMem_Free(specs)
        PyMem_Free(srcs)
        raise MemoryError()
    try:
        for i in range(n):
            specs[i] = NULL
            p = <LeafPlan> plans[i]
            if p.spec.kind == PYTHON:
                continue
            v = values[i]
            if single and p.spec.kind == ONEHOT and (type(v) is int
                                                     or isinstance(v, _np_integer)):
                # One Discrete sample given as an int or NumPy integer (what
                # Discrete.sample() returns): read its exact value, no array needed.
                try:
                    scalar = v
                except OverflowError:
                    pass
                else:
                    bad = _leaf_in(&p.spec, <const i64*> &scalar, 1, base, stride)
                    if bad >= 0:
                        return (i, bad)
                    continue
            if not p.accepts(v, rows, single):
                v = coerce(i, v, rows, single)
                if not p.accepts(v, rows, single):
                    raise RuntimeError(f"coerce returned an unusable array for leaf {i}")
                kept.append(v)
            specs[i] = &p.spec
            srcs[i] = <const char*> cnp.PyArray_DATA(<cnp.ndarray> v)
            total += p.spec.flat_width
        if rows * total >= NOGIL_MIN:
            with nogil:
                bad = _run_in(specs, srcs, n, rows, base, stride, &bad_leaf)
        else:
            bad = _run_in(specs, srcs, n, rows, base, stride, &bad_leaf)
    finally:
        PyMem_Free(specs)
        PyMem_Free(srcs)
    if bad >= 0:
        return (bad_leaf, bad)
    return None


def unflatten_into(list plans, const floating[:, ::1] flat, list outs, bint single=False):
    """Write every leaf's values from ``flat[B, F]`` into the arrays ``outs``.

    ``outs[i]`` must be a C-contiguous array of ``plans[i]``'s dtype and shape ``[B, *shape]``
    (``shape`` when ``single``, B = 1; the front end allocates them). Leaves of kind 4 are skipped. Returns None, or
    ``(leaf index, row)`` of a one-hot segment without a nonzero.
    """
    cdef Py_ssize_t i, bad, total = 0, rows = flat.shape[0], stride = flat.shape[1]
    cdef Py_ssize_t n = len(plans)
    cdef Py_ssize_t bad_leaf = -1
    cdef LeafPlan p
    cdef const floating* base
    cdef const LeafSpec** specs
    cdef char** dsts
    if rows == 0 or stride == 0:
        return None
    if len(outs) != n:
        raise ValueError(f"expected {n} leaf arrays, got {len(outs)}")
    base = &flat[0, 0]
    specs = <const LeafSpec**> PyMem_Malloc(n * sizeof(LeafSpec*) + 1)
    dsts = <char**> PyMem_Malloc(n * sizeof(char*) + 1)
    if specs == NULL or dsts == NULL:
        PyMem_Free(specs)
        PyMem_Free(dsts)
        raise MemoryError()
    try:
        for i in range(n):
            specs[i] = NULL
            p = <LeafPlan> plans[i]
            if p.spec.kind == PYTHON:
                continue
            if not p.accepts(outs[i], rows, single) or not cnp.PyArray_ISWRITEABLE(outs[i]):
                raise ValueError(f"leaf array {i} is not a writable C-contiguous array "
                                 f"of shape ({rows}, *{p.shape})")
            specs[i] = &p.spec
            dsts[i] = <char*> cnp.PyArray_DATA(<cnp.ndarray> outs[i])
            total += p.spec.flat_width
        if rows * total >= NOGIL_MIN:
            with nogil:
                bad = _run_out(specs, dsts, n, rows, base, stride, &bad_leaf)
        else:
            bad = _run_out(specs, dsts, n, rows, base, stride, &bad_leaf)
    finally:
        PyMem_Free(specs)
        PyMem_Free(dsts)
    if bad >= 0:
        return (bad_leaf, bad)
    return None
