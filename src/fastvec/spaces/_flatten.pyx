# cython: language_level=3
"""Flatten/unflatten kernels over the leaves of a :class:`fastvec.spaces.Layout`.

Layout: a ``[B, F]`` flat buffer (typed contiguous memoryview, float32 or float64) and one
C-contiguous array per leaf holding ``[B, *leaf.shape]`` samples. The kernels are
``cdef ... noexcept nogil`` functions fused over the leaf's element type and the flat float
type:

* ``_cast``: Box and MultiBinary values, copied with a C cast (NumPy's ``astype``) into the
  flat buffer and out of it; into a bool leaf the cast is C's to ``_Bool`` (``!= 0``, NumPy's
  cast to bool);
* ``_onehot_in`` / ``_onehot_out``: Discrete, one-hot of ``value - start`` and back;
* ``_multi_onehot_in`` / ``_multi_onehot_out``: MultiDiscrete, one one-hot per component.

One call of :func:`flatten_into` / :func:`unflatten_into` runs every leaf of a layout. Per
leaf it checks the array in C (exact ndarray, element type, C-contiguous, aligned, native
byte order, shape); an array that does not pass is handed to the front end's ``coerce``
callback (which casts, copies, or raises a clear error) and checked again. The kernels
then read the leaf through its data pointer: acquiring a typed memoryview per leaf costs
more than the copy itself for one sample of a small leaf (docs/spaces.md). The kernels run
block of rows by block of rows (``BLOCK_BYTES`` of the flat buffer), every leaf per block,
so the rows being filled stay in cache while all leaves write their columns. Both
directions share one driver (``_run``), which calls each leaf's ``_leaf`` through a function
pointer chosen when its ``LeafPlan`` was built (``_choose_kernels``: Cython's dispatch on the
leaf's dtype is the one place that goes from a dtype to typed code). Inside ``nogil``
nothing is allocated and no Python object is touched; the GIL is released only when the call
is large enough for that to pay (``NOGIL_MIN``).
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

# C's bool: a number converted to it is 0 for 0 and 1 for anything else, NaN included (NumPy's
# cast to bool). Declared over bint, a type of its own for Cython, so that it is a member of
# cast_t apart from u8.
cdef extern from *:
    ctypedef bint bool_t "_Bool"

# What _cast writes: any element type, or the bool of a bool leaf.
ctypedef fused cast_t:
    value_t
    bool_t

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


cdef struct LeafSpec

# One leaf over one block of rows, in either direction: a specialisation of _leaf, cast to
# this type, whose leaf and flat pointers are untyped (the specialisation's own are typed),
# and called with the pointers it was chosen for; data pointers are passed alike whatever
# they point to. Declared before LeafSpec, which holds two.
ctypedef Py_ssize_t (*LeafFn)(const LeafSpec* p, const void* kind, bint to_flat,
                              Py_ssize_t rows, Py_ssize_t stride, void* leaf,
                              void* flat) noexcept nogil

cdef struct LeafSpec:
    LeafFn run[2]       # _leaf for its kind and element type: float32 [0] / float64 [1] flat
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
_CODE_DTYPES = {}  # ElemType -> the dtype _choose_kernels is handed for it
for _num, _name, _code in (
        (cnp.NPY_UINT8, "uint8", DT_U8), (cnp.NPY_BOOL, "bool", DT_U8),
        (cnp.NPY_INT8, "int8", DT_I8), (cnp.NPY_UINT16, "uint16", DT_U16),
        (cnp.NPY_INT16, "int16", DT_I16), (cnp.NPY_UINT32, "uint32", DT_U32),
        (cnp.NPY_INT32, "int32", DT_I32), (cnp.NPY_UINT64, "uint64", DT_U64),
        (cnp.NPY_INT64, "int64", DT_I64), (cnp.NPY_FLOAT32, "float32", DT_F32),
        (cnp.NPY_FLOAT64, "float64", DT_F64)):
    _TYPE_CODES[_num] = _code
    _TYPE_CODES[_np.dtype(_name).num] = _code
    _CODE_DTYPES.setdefault(_code, _np.dtype(_name))  # (DT_U8: uint8, which precedes bool)


def type_code(dtype) -> int:
    """The kernel element-type code for a NumPy dtype, or -1 when no kernel reads it."""
    import numpy as np
    dtype = np.dtype(dtype)
    if not dtype.isnative:
        return -1
    return _TYPE_CODES.get(dtype.num, -1)


# --------------------------------------------------------------------------
# nogil kernels. `flat` points at the leaf's first column of row 0; rows are `stride` apart.
# --------------------------------------------------------------------------

cdef void _cast(
    const value_t* src, Py_ssize_t src_step, Py_ssize_t rows, Py_ssize_t width,
    Py_ssize_t dst_step,
    cast_t* dst,  # OUT
) noexcept nogil:
    """dst[b, j] = src[b, j] for j < width, with rows `src_step` and `dst_step` elements
    apart: a C conversion (NumPy's astype; into bool_t, NumPy's cast to bool). One of the two
    is the leaf array, the other the flat buffer: one kernel for both directions."""
    cdef Py_ssize_t b, j
    for b in range(rows):
        for j in range(width):
            dst[j] = <cast_t> src[j]
        src += src_step
        dst += dst_step


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
# One leaf, its function chosen once per plan
# --------------------------------------------------------------------------

# The kinds of leaf, as types: _leaf is fused over them, so that each of its specialisations
# holds the loops of one kind only, which the compiler then optimises as that function's hot
# code (beside the one-hot loops, which nest deeper, the copy loops would be taken for cold
# code, and not aligned).
ctypedef struct _Copy:          # COPY, and NONZERO when unflattening
    char unused

ctypedef struct _OneHot:        # ONEHOT
    char unused

ctypedef struct _MultiOneHot:   # MULTI_ONEHOT
    char unused

ctypedef fused kind_t:
    _Copy
    _OneHot
    _MultiOneHot


cdef Py_ssize_t _leaf(
    const LeafSpec* p,
    const kind_t* kind,  # NULL: only its type matters
    bint to_flat, Py_ssize_t rows, Py_ssize_t stride,
    value_t* leaf,   # OUT: when unflattening, rows of the leaf array
    floating* flat,  # OUT: when flattening, row 0 of the flat buffer
) noexcept nogil:
    """One leaf over one block of rows, in either direction: the first bad row, or -1.

    Each LeafPlan points at the specialisations of this function for its kind and element
    type (_choose_kernels), and the driver calls them through LeafFn: it names no element
    type, and no kernel is inlined into it.
    """
    flat += p.off
    if kind_t is _OneHot:
        if to_flat:
            return _onehot_in(leaf, rows, p.flat_width, p.start, stride, flat)
        return _onehot_out(flat, stride, rows, p.flat_width, p.start, leaf)
    elif kind_t is _MultiOneHot:
        if to_flat:
            return _multi_onehot_in(leaf, rows, p.width, p.flat_width, p.seg, p.nvec,
                                    p.starts, stride, flat)
        return _multi_onehot_out(flat, stride, rows, p.width, p.seg, p.nvec, p.starts, leaf)
    else:
        if to_flat:  # (a bool leaf is read as u8)
            _cast(leaf, p.width, rows, p.width, stride, flat)
        elif p.kind == NONZERO:
            _cast(flat, stride, rows, p.width, p.width, <bool_t*> leaf)
        else:
            _cast(flat, stride, rows, p.width, p.width, leaf)
        return -1


cdef void _point(LeafSpec* s, const kind_t* kind, const value_t* leaf_type) noexcept:
    """s.run: _leaf for kind_t and value_t, for a float32 and a float64 flat buffer (the
    arguments are NULL: only their types matter)."""
    s.run[0] = <LeafFn> _leaf[kind_t, value_t, f32]
    s.run[1] = <LeafFn> _leaf[kind_t, value_t, f64]


def _choose_kernels(LeafPlan plan, const value_t[::1] like):
    """Point ``plan``'s spec at the _leaf for its kind and element type.

    ``like`` is an empty array of that element type: Cython picks this function's
    specialisation from its dtype, the one place where a leaf's dtype becomes typed code.
    """
    cdef LeafSpec* s = &plan.spec
    if s.kind == PYTHON or type_code(like.base.dtype) != s.code:
        raise ValueError("no kernel for this leaf, or an array of another type than its own")
    if s.kind == ONEHOT:
        _point(s, <const _OneHot*> NULL, <const value_t*> NULL)
    elif s.kind == MULTI_ONEHOT:
        _point(s, <const _MultiOneHot*> NULL, <const value_t*> NULL)
    else:
        _point(s, <const _Copy*> NULL, <const value_t*> NULL)


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
        if self.spec.kind != PYTHON:
            _choose_kernels(self, np.empty(0, _CODE_DTYPES[self.spec.code]))

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


cdef Py_ssize_t _run(
    _Run* a,         # OUT: a.bad_leaf
    floating* flat,  # OUT: when flattening, the [B, F] flat buffer
) noexcept nogil:
    """Every leaf, block of rows by block of rows; the first bad row (a.bad_leaf = its leaf)
    or -1."""
    cdef const LeafSpec** specs = a.specs
    cdef const LeafSpec* p
    cdef Py_ssize_t i, bad, count, rows = a.rows, stride = a.stride
    cdef Py_ssize_t start = 0
    cdef Py_ssize_t block = _block_rows(stride, sizeof(floating))
    cdef int ft = 1 if floating is f64 else 0
    while start < rows:
        count = min(block, rows - start)
        for i in range(a.n):
            p = specs[i]
            if p == NULL:
                continue
            bad = p.run[ft](p, NULL, a.to_flat, count, stride,
                            a.leaves[i] + start * p.width * p.itemsize, flat + start * stride)
            if bad >= 0:
                a.bad_leaf = i
                return start + bad
        start += count
    return -1


cdef object _run_leaves(
    list plans, list arrays, Py_ssize_t rows, Py_ssize_t stride, bint to_flat, object coerce,
    bint single,
    floating* flat,  # OUT: when flattening, the [B, F] flat buffer
):
    """The two entry points' work after their own checks: check every leaf's array (the
    values when flattening, the outputs when unflattening), then run the kernels over them
    and ``flat``. None, or ``(leaf index, row)`` of the first value they could not write."""
    cdef Py_ssize_t i, bad, total = 0, n = len(plans)
    cdef LeafPlan p
    cdef object v
    cdef i64 scalar
    cdef _Run run
    cdef list kept = []      # arrays made by coerce, alive until the kernels ran
    run.specs = <const LeafSpec**> PyMem_Malloc(n * sizeof(LeafSpec*) + 1)
    run.leaves = <char**> PyMem_Malloc(n * sizeof(char*) + 1)
    try:
        if run.specs == NULL or run.leaves == NULL:
            raise MemoryError()
        for i in range(n):
            run.specs[i] = NULL
            p = <LeafPlan> plans[i]
            v = arrays[i]
            if p.spec.kind == PYTHON:
                continue
            if not to_flat:
                if not p.accepts(v, rows, single) or not cnp.PyArray_ISWRITEABLE(v):
                    raise ValueError(f"leaf array {i} is not a writable C-contiguous array "
                                     f"of shape ({rows}, *{p.shape})")
            else:
                if single and p.spec.kind == ONEHOT and (type(v) is int
                                                         or isinstance(v, _np_integer)):
                    # One Discrete sample given as an int or NumPy integer (what
                    # Discrete.sample() returns): read its exact value, no array needed.
                    try:
                        scalar = v
                    except OverflowError:
                        pass
                    else:
                        if _onehot_in(&scalar, 1, p.spec.flat_width, p.spec.start, stride,
                                      flat + p.spec.off) >= 0:
                            return (i, 0)
                        continue
                if not p.accepts(v, rows, single):
                    v = coerce(i, v, rows, single)
                    if not p.accepts(v, rows, single):
                        raise RuntimeError(f"coerce returned an unusable array for leaf {i}")
                    kept.append(v)
            run.specs[i] = &p.spec
            run.leaves[i] = <char*> cnp.PyArray_DATA(<cnp.ndarray> v)
            total += p.spec.flat_width
        run.n = n
        run.rows = rows
        run.stride = stride
        run.to_flat = to_flat
        run.bad_leaf = -1
        if rows * total >= NOGIL_MIN:
            with nogil:
                bad = _run(&run, flat)
        else:
            bad = _run(&run, flat)
    finally:
        PyMem_Free(run.specs)
        PyMem_Free(run.leaves)
    if bad >= 0:
        return (run.bad_leaf, bad)
    return None


def flatten_into(list plans, list values, floating[:, ::1] out, object coerce, bint single):
    """Flatten the leaves ``values`` (in layout order) into ``out[B, F]``.

    ``coerce(i, value, rows, single)`` is called for a leaf that is not already an array the
    kernel can read (wrong type, dtype, layout or shape); it returns one or raises. Leaves of
    kind 4 are skipped (the front end writes them). Returns None, or ``(leaf index, row)`` of
    a Discrete/MultiDiscrete value outside its space.
    """
    cdef Py_ssize_t i, rows = out.shape[0], stride = out.shape[1]
    cdef Py_ssize_t n = len(plans)
    cdef LeafPlan p
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
    return _run_leaves(plans, values, rows, stride, True, coerce, single, &out[0, 0])


def unflatten_into(list plans, const floating[:, ::1] flat, list outs, bint single=False):
    """Write every leaf's values from ``flat[B, F]`` into the arrays ``outs``.

    ``outs[i]`` must be a C-contiguous array of ``plans[i]``'s dtype and shape ``[B, *shape]``
    (``shape`` when ``single``, B = 1; the front end allocates them). Leaves of kind 4 are skipped. Returns None, or
    ``(leaf index, row)`` of a one-hot segment without a nonzero.
    """
    cdef Py_ssize_t rows = flat.shape[0], stride = flat.shape[1]
    if rows == 0 or stride == 0:
        return None
    if len(outs) != len(plans):
        raise ValueError(f"expected {len(plans)} leaf arrays, got {len(outs)}")
    # (only read: the kernels write the flat buffer when flattening)
    return _run_leaves(plans, outs, rows, stride, False, None, single, <floating*> &flat[0, 0])
