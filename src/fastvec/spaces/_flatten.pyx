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
more than the copy itself for one sample of a small leaf (docs/spaces.md). The kernels run
block of rows by block of rows (``BLOCK_BYTES`` of the flat buffer), every leaf per block,
so the rows being filled stay in cache while all leaves write their columns. Both
directions share one driver (``_run``) and one switch over the leaf's element type
(``_dispatch``). Inside ``nogil`` nothing is allocated and no Python object is touched; the
GIL is released only when the call is large enough for that to pay (``NOGIL_MIN``).
"""
cimport numpy as cnp
from cpython.mem cimport PyMem_Free, PyMem_Malloc

from fastvec._ext._constants cimport (
    DT_F32, DT_F64, DT_I8, DT_I16, DT_I32, DT_I64, DT_U8, DT_U16, DT_U32, DT_U64, NOGIL_MIN,
)
from fastvec._ext._types cimport f32, f64, i8, i16, i32, i64, u8, u16, u32, u64, floating

cnp.import_array()

# Element types a leaf may hold (bool leaves are read as u8), in the order of their ElemType
# codes (_constants.pxd).
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

# Leaf kinds (LeafPlan.kind); fastvec.spaces._leaf_kinds reads them from Python.
cpdef enum LeafKind:
    COPY = 0
    ONEHOT = 1
    MULTI_ONEHOT = 2
    NONZERO = 3
    PYTHON = 4          # no kernel for this leaf's dtype: the front end runs NumPy for it

cdef enum:
    # Bytes of the flat buffer processed per block of rows (all leaves, then the next block).
    BLOCK_BYTES = 32768


cdef struct LeafSpec:
    int kind            # COPY, ONEHOT, MULTI_ONEHOT, NONZERO or PYTHON
    int code            # element type of the leaf array: an ElemType (DT_U8 ... DT_F64)
    Py_ssize_t off      # column of the leaf's first flat value
    Py_ssize_t width    # values per sample in the leaf array (components for MultiDiscrete)
    Py_ssize_t flat_width  # flat values per sample
    Py_ssize_t itemsize    # bytes per element of the leaf array
    u64 start           # Discrete start (two's complement)
    const i64* seg      # MultiDiscrete: segment offset of each component
    const i64* nvec     # MultiDiscrete: size of each component
    const u64* starts   # MultiDiscrete: start of each component

import numpy as _np
_np_integer = _np.integer

# NumPy type number -> ElemType of the kernels (absent: no kernel). Each type is entered
# under its C-API number and under the run-time number of its NumPy name, in case the two
# differ (one fixed-width type has two C names: long/longlong, int/long).
_TYPE_CODES = {}
for _num, _name, _code in (
        (cnp.NPY_UINT8, "uint8", DT_U8), (cnp.NPY_BOOL, "bool", DT_U8),
        (cnp.NPY_INT8, "int8", DT_I8), (cnp.NPY_UINT16, "uint16", DT_U16),
        (cnp.NPY_INT16, "int16", DT_I16), (cnp.NPY_UINT32, "uint32", DT_U32),
        (cnp.NPY_INT32, "int32", DT_I32), (cnp.NPY_UINT64, "uint64", DT_U64),
        (cnp.NPY_INT64, "int64", DT_I64), (cnp.NPY_FLOAT32, "float32", DT_F32),
        (cnp.NPY_FLOAT64, "float64", DT_F64)):
    _TYPE_CODES[_num] = _code
    _TYPE_CODES[_np.dtype(_name).num] = _code


def type_code(dtype) -> int:
    """The kernel element-type code for a NumPy dtype, or -1 when no kernel reads it."""
    import numpy as np
    dtype = np.dtype(dtype)
    if not dtype.isnative:
        return -1
    return _TYPE_CODES.get(dtype.num, -1)


# --------------------------------------------------------------------------
# nogil kernels. `flat` points at column `off` of row 0; rows are `stride` apart.
# --------------------------------------------------------------------------

cdef void _copy_in(
    const value_t* src, Py_ssize_t rows, Py_ssize_t width, Py_ssize_t stride,
    floating* flat,  # OUT
) noexcept nogil:
    """flat[b, j] = src[b, j], cast to the flat float type."""
    cdef Py_ssize_t b, j
    for b in range(rows):
        for j in range(width):
            flat[j] = <floating> src[j]
        src += width
        flat += stride


cdef Py_ssize_t _onehot_in(
    const value_t* src, Py_ssize_t rows, Py_ssize_t n, u64 start, Py_ssize_t stride,
    floating* flat,  # OUT
) noexcept nogil:
    """One-hot of src[b] - start over flat[b, 0:n]; returns the first out-of-range row or -1."""
    cdef Py_ssize_t b, j
    cdef u64 k
    for b in range(rows):
        # Unsigned wrap-around makes one comparison check both ends of the range.
        k = (<u64> <i64> src[b]) - start
        if k >= <u64> n:
            return b
        for j in range(n):
            flat[j] = 0
        flat[k] = 1
        flat += stride
    return -1


cdef Py_ssize_t _multi_onehot_in(
    const value_t* src, Py_ssize_t rows, Py_ssize_t m, Py_ssize_t width, const i64* seg,
    const i64* nvec, const u64* start, Py_ssize_t stride,
    floating* flat,  # OUT
) noexcept nogil:
    """Component c of row b: one-hot of src[b, c] - start[c] at flat[b, seg[c]:]."""
    cdef Py_ssize_t b, c, j
    cdef u64 k
    for b in range(rows):
        for j in range(width):
            flat[j] = 0
        for c in range(m):
            k = (<u64> <i64> src[c]) - start[c]
            if k >= <u64> nvec[c]:
                return b
            flat[seg[c] + <Py_ssize_t> k] = 1
        src += m
        flat += stride
    return -1


cdef inline Py_ssize_t _first_nonzero(const floating* f, Py_ssize_t n) noexcept nogil:
    """Index of the first nonzero of f[0:n] (n if none), as gymnasium's ``np.nonzero(x)[0][0]``.

    A one-hot segment has exactly one nonzero: count the nonzeros and sum their positions
    with arithmetic only (no data-dependent branch: one-hot positions are random, so such a
    branch mispredicts, at a cost above the scan's: docs/spaces.md), and fall back to a plain
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


cdef void _copy_out(
    const floating* flat, Py_ssize_t stride, Py_ssize_t rows, Py_ssize_t width,
    value_t* dst,  # OUT
) noexcept nogil:
    """dst[b, j] = flat[b, j], C conversion (as NumPy's astype)."""
    cdef Py_ssize_t b, j
    for b in range(rows):
        for j in range(width):
            dst[j] = <value_t> flat[j]
        flat += stride
        dst += width


cdef void _nonzero_out(
    const floating* flat, Py_ssize_t stride, Py_ssize_t rows, Py_ssize_t width,
    u8* dst,  # OUT
) noexcept nogil:
    """dst[b, j] = flat[b, j] != 0 (NumPy's cast to bool; NaN is True)."""
    cdef Py_ssize_t b, j
    for b in range(rows):
        for j in range(width):
            dst[j] = flat[j] != 0
        flat += stride
        dst += width


cdef Py_ssize_t _onehot_out(
    const floating* flat, Py_ssize_t stride, Py_ssize_t rows, Py_ssize_t n, u64 start,
    value_t* dst,  # OUT
) noexcept nogil:
    """dst[b] = start + first j with flat[b, j] != 0; the first row without one, or -1."""
    cdef Py_ssize_t b, j
    for b in range(rows):
        j = _first_nonzero(flat, n)
        if j == n:
            return b
        dst[b] = <value_t> <i64> (start + <u64> j)
        flat += stride
    return -1


cdef Py_ssize_t _multi_onehot_out(
    const floating* flat, Py_ssize_t stride, Py_ssize_t rows, Py_ssize_t m, const i64* seg,
    const i64* nvec, const u64* start,
    value_t* dst,  # OUT
) noexcept nogil:
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

cdef Py_ssize_t _leaf_in(
    const LeafSpec* p, const value_t* src, Py_ssize_t rows, Py_ssize_t stride,
    floating* flat,  # OUT: row 0 of the flat buffer
) noexcept nogil:
    if p.kind == COPY:
        _copy_in(src, rows, p.width, stride, flat + p.off)
        return -1
    if p.kind == ONEHOT:
        return _onehot_in(src, rows, p.flat_width, p.start, stride, flat + p.off)
    return _multi_onehot_in(src, rows, p.width, p.flat_width, p.seg, p.nvec, p.starts, stride,
                            flat + p.off)


cdef Py_ssize_t _leaf_out(
    const LeafSpec* p, const floating* flat, Py_ssize_t stride, Py_ssize_t rows,
    value_t* dst,  # OUT
) noexcept nogil:
    if p.kind == COPY:
        _copy_out(flat + p.off, stride, rows, p.width, dst)
        return -1
    if p.kind == NONZERO:
        _nonzero_out(flat + p.off, stride, rows, p.width, <u8*> dst)
        return -1
    if p.kind == ONEHOT:
        return _onehot_out(flat + p.off, stride, rows, p.flat_width, p.start, dst)
    return _multi_onehot_out(flat + p.off, stride, rows, p.width, p.seg, p.nvec, p.starts, dst)


cdef inline Py_ssize_t _leaf(
    const LeafSpec* p, bint to_flat, Py_ssize_t rows, Py_ssize_t stride,
    value_t* leaf,   # OUT: when unflattening, rows of the leaf array
    floating* flat,  # OUT: when flattening, row 0 of the flat buffer
) noexcept nogil:
    """One leaf over one block of rows, in either direction."""
    if to_flat:
        return _leaf_in(p, leaf, rows, stride, flat)
    return _leaf_out(p, flat, stride, rows, leaf)


cdef Py_ssize_t _dispatch(
    const LeafSpec* p, bint to_flat, Py_ssize_t rows, Py_ssize_t stride,
    char* leaf,      # OUT: when unflattening
    floating* flat,  # OUT: when flattening
) noexcept nogil:
    """_leaf specialised for the element type of the leaf array: the one place it is named."""
    cdef int code = p.code
    if code == DT_U8:
        return _leaf(p, to_flat, rows, stride, <u8*> leaf, flat)
    elif code == DT_I8:
        return _leaf(p, to_flat, rows, stride, <i8*> leaf, flat)
    elif code == DT_U16:
        return _leaf(p, to_flat, rows, stride, <u16*> leaf, flat)
    elif code == DT_I16:
        return _leaf(p, to_flat, rows, stride, <i16*> leaf, flat)
    elif code == DT_U32:
        return _leaf(p, to_flat, rows, stride, <u32*> leaf, flat)
    elif code == DT_I32:
        return _leaf(p, to_flat, rows, stride, <i32*> leaf, flat)
    elif code == DT_U64:
        return _leaf(p, to_flat, rows, stride, <u64*> leaf, flat)
    elif code == DT_I64:
        return _leaf(p, to_flat, rows, stride, <i64*> leaf, flat)
    elif code == DT_F32:
        return _leaf(p, to_flat, rows, stride, <f32*> leaf, flat)
    return _leaf(p, to_flat, rows, stride, <f64*> leaf, flat)


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


# What a flatten or unflatten call hands the kernels (all but the flat buffer, whose
# element type picks _run's specialisation).
ctypedef struct _Run:
    const LeafSpec** specs  # one per leaf; NULL for a leaf the front end writes (PYTHON)
    char** leaves           # OUT: when unflattening, each leaf array's data
    Py_ssize_t n            # number of leaves
    Py_ssize_t rows         # B
    Py_ssize_t stride       # F: flat values per row
    bint to_flat            # flatten (leaves -> flat) or unflatten (flat -> leaves)
    Py_ssize_t bad_leaf     # OUT: the leaf of the first bad row


cdef int _run_alloc(_Run* a, Py_ssize_t n, Py_ssize_t rows, Py_ssize_t stride,
                    bint to_flat) except -1:
    """Fill ``a`` for ``n`` leaves, with room for their specs and data pointers (_run_free)."""
    a.specs = <const LeafSpec**> PyMem_Malloc(n * sizeof(LeafSpec*) + 1)
    a.leaves = <char**> PyMem_Malloc(n * sizeof(char*) + 1)
    if a.specs == NULL or a.leaves == NULL:
        _run_free(a)
        raise MemoryError()
    a.n = n
    a.rows = rows
    a.stride = stride
    a.to_flat = to_flat
    a.bad_leaf = -1
    return 0


cdef void _run_free(_Run* a) noexcept:
    PyMem_Free(a.specs)
    PyMem_Free(a.leaves)
    a.specs = NULL
    a.leaves = NULL


cdef Py_ssize_t _run(
    _Run* a,         # OUT: a.bad_leaf
    floating* flat,  # OUT: when flattening, the [B, F] flat buffer
) noexcept nogil:
    """Every leaf, block of rows by block of rows; the first bad row (a.bad_leaf = its leaf)
    or -1."""
    cdef const LeafSpec** specs = a.specs
    cdef Py_ssize_t i, bad, count, rows = a.rows, stride = a.stride
    cdef Py_ssize_t start = 0
    cdef Py_ssize_t block = _block_rows(stride, sizeof(floating))
    while start < rows:
        count = min(block, rows - start)
        for i in range(a.n):
            if specs[i] == NULL:
                continue
            bad = _dispatch(specs[i], a.to_flat, count, stride,
                            a.leaves[i] + start * specs[i].width * specs[i].itemsize,
                            flat + start * stride)
            if bad >= 0:
                a.bad_leaf = i
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
    cdef LeafPlan p
    cdef object v
    cdef floating* base
    cdef i64 scalar
    cdef _Run run
    cdef list kept = []      # arrays made by coerce, alive until the kernels ran
    if len(values) != n:
        raise ValueError(f"expected {n} leaf values, got {len(values)}")
    if rows == 0 or stride == 0:
        # (nothing to write, but every leaf is checked as in any batch: a leaf of another
        # batch size or type still raises)
        for i in range(n):
            p = <LeafPlan> plans[i]
            if p.spec.kind != PYTHON and not p.accepts(values[i], rows, single):
                coerce(i, values[i], rows, single)
        return None
    base = &out[0, 0]
    _run_alloc(&run, n, rows, stride, True)
    try:
        for i in range(n):
            run.specs[i] = NULL
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
                    bad = _leaf_in(&p.spec, <const i64*> &scalar, 1, stride, base)
                    if bad >= 0:
                        return (i, bad)
                    continue
            if not p.accepts(v, rows, single):
                v = coerce(i, v, rows, single)
                if not p.accepts(v, rows, single):
                    raise RuntimeError(f"coerce returned an unusable array for leaf {i}")
                kept.append(v)
            run.specs[i] = &p.spec
            run.leaves[i] = <char*> cnp.PyArray_DATA(<cnp.ndarray> v)
            total += p.spec.flat_width
        if rows * total >= NOGIL_MIN:
            with nogil:
                bad = _run(&run, base)
        else:
            bad = _run(&run, base)
    finally:
        _run_free(&run)
    if bad >= 0:
        return (run.bad_leaf, bad)
    return None


def unflatten_into(list plans, const floating[:, ::1] flat, list outs, bint single=False):
    """Write every leaf's values from ``flat[B, F]`` into the arrays ``outs``.

    ``outs[i]`` must be a C-contiguous array of ``plans[i]``'s dtype and shape ``[B, *shape]``
    (``shape`` when ``single``, B = 1; the front end allocates them). Leaves of kind 4 are skipped. Returns None, or
    ``(leaf index, row)`` of a one-hot segment without a nonzero.
    """
    cdef Py_ssize_t i, bad, total = 0, rows = flat.shape[0], stride = flat.shape[1]
    cdef Py_ssize_t n = len(plans)
    cdef LeafPlan p
    cdef floating* base
    cdef _Run run
    if rows == 0 or stride == 0:
        return None
    if len(outs) != n:
        raise ValueError(f"expected {n} leaf arrays, got {len(outs)}")
    base = <floating*> &flat[0, 0]  # only read: _run writes the flat buffer when flattening
    _run_alloc(&run, n, rows, stride, False)
    try:
        for i in range(n):
            run.specs[i] = NULL
            p = <LeafPlan> plans[i]
            if p.spec.kind == PYTHON:
                continue
            if not p.accepts(outs[i], rows, single) or not cnp.PyArray_ISWRITEABLE(outs[i]):
                raise ValueError(f"leaf array {i} is not a writable C-contiguous array "
                                 f"of shape ({rows}, *{p.shape})")
            run.specs[i] = &p.spec
            run.leaves[i] = <char*> cnp.PyArray_DATA(<cnp.ndarray> outs[i])
            total += p.spec.flat_width
        if rows * total >= NOGIL_MIN:
            with nogil:
                bad = _run(&run, base)
        else:
            bad = _run(&run, base)
    finally:
        _run_free(&run)
    if bad >= 0:
        return (run.bad_leaf, bad)
    return None
