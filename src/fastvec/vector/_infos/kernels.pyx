# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Both sides: kernels of fastvec.vector._infos.codec: an env's info values into its row; rows into vector infos.

Worker side, :class:`Writer`: after each env step the env loop hands over the dict(s) the
env adds to the infos. If they have the same keys, in the same order, with values of the
same kinds as the env's previous ones (the common case: MuJoCo and Atari envs return the
same dict every step), one pass over the dict checks that and copies each value into the
env's row: a double, an int64, a byte, a NumPy scalar's or an array's bytes. Otherwise the
Python side (``InfoWriter.capture``) describes the new signature, registers it and calls
:meth:`Writer.write`.

Caller side, :func:`signature_slots` and :class:`Plan`: which signature each output row has,
and the copies a plan makes from the rows into the vector info arrays (one memcpy per value
and a byte per mask).
"""
cimport numpy as cnp
from cpython.dict cimport PyDict_Next, PyDict_Size
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t, uint8_t, uint32_t
from libc.string cimport memcmp, memcpy

import numpy as np

cnp.import_array()

cdef extern from "numpy/arrayobject.h":
    void PyArray_ScalarAsCtype(object scalar, void *ctypeptr)


cdef tuple _compile(tuple nodes):
    """Node tuples (key, kind, offset, nbytes, children) as the matcher reads them:
    (key, code, arg, offset, nbytes, children), with ``arg`` the NumPy scalar type
    (NPSCALAR), (typenum, shape) (NDARRAY) or (type, dtype, shape) (PIPE)."""
    cdef list out = []
    for key, kind, offset, nbytes, children in nodes:
        code = kind[0]
        if code == DICT:
            arg = None
            children = _compile(children)
        elif code == NPSCALAR:
            arg = (kind[1].type, value_at_header(kind[1]))
        elif code == NDARRAY:
            arg = (kind[1].num, tuple(kind[2]))
        elif code == PIPE:
            arg = (kind[1], kind[2], None if kind[3] is None else tuple(kind[3]))
        else:
            arg = None
        out.append((key, code, arg, offset, nbytes, children))
    return tuple(out)


cdef dict _AT_HEADER = {}


cpdef bint value_at_header(object dtype):
    """Whether scalars of ``dtype`` keep their value right after the object header, as
    NumPy's public ``Py<Type>ScalarObject`` structs lay it out (``PyObject_HEAD``, then
    ``obval``): then the matcher copies those bytes itself. ``PyArray_ScalarAsCtype`` first
    looks the scalar's dtype up, which made a NumPy scalar cost twice a Python float (MuJoCo
    envs return NumPy scalars). Checked once per dtype, on a scalar of known bytes; a dtype
    that fails the check keeps ``PyArray_ScalarAsCtype``."""
    cached = _AT_HEADER.get(dtype)
    if cached is not None:
        return cached
    kind = dtype.kind
    value = True if kind == "b" else 113.625 + 2j if kind == "c" else 113.625 if kind == "f" else 113
    probe = np.array([value], dtype=dtype)
    scalar = probe[0]
    cdef bytes expected = probe.tobytes()
    at_header = (type(scalar) is dtype.type and
                 memcmp(<char *><PyObject *>scalar + sizeof(PyObject), <char *>expected, dtype.itemsize) == 0)
    _AT_HEADER[dtype] = at_header
    return at_header


cdef bint _same_array(cnp.ndarray a, int typenum, tuple shape) noexcept:
    cdef int k, ndim = cnp.PyArray_NDIM(a)
    if cnp.PyArray_TYPE(a) != typenum or not cnp.PyArray_ISNOTSWAPPED(a) or ndim != len(shape):
        return False
    for k in range(ndim):
        if cnp.PyArray_DIMS(a)[k] != <cnp.npy_intp>shape[k]:
            return False
    return True


cdef class Writer:
    """The info ids and rows of one worker's envs, and the templates of its signatures.

    Args:
        ids: the worker's ``info_ids`` rows (uint32, one per env).
        rows: the worker's ``info_rows`` (uint8 ``[envs, row_bytes]``, C-contiguous).
        owner: the ``InfoWriter`` whose ``capture`` handles what the fast path cannot.
    """

    def __init__(self, cnp.ndarray ids not None, cnp.ndarray rows not None, object owner):
        if (cnp.PyArray_TYPE(ids) != cnp.NPY_UINT32 or cnp.PyArray_NDIM(ids) != 1
                or not cnp.PyArray_IS_C_CONTIGUOUS(ids) or not cnp.PyArray_ISWRITEABLE(ids)):
            raise ValueError(f"ids must be a writeable contiguous uint32 vector, got {ids.dtype} {(<object>ids).shape}")
        if (cnp.PyArray_TYPE(rows) != cnp.NPY_UINT8 or cnp.PyArray_NDIM(rows) != 2
                or cnp.PyArray_DIMS(rows)[0] != cnp.PyArray_DIMS(ids)[0]
                or not cnp.PyArray_IS_C_CONTIGUOUS(rows) or not cnp.PyArray_ISWRITEABLE(rows)):
            raise ValueError(f"rows must be a writeable C-contiguous uint8 array of {len(ids)} rows, "
                             f"got {rows.dtype} {(<object>rows).shape}")
        self.ids_arr = ids
        self.rows_arr = rows
        self.ids = <uint32_t *>cnp.PyArray_DATA(ids)
        self.rows = <uint8_t *>cnp.PyArray_DATA(rows)
        self.num_envs = cnp.PyArray_DIMS(ids)[0]
        self.row_bytes = cnp.PyArray_DIMS(rows)[1]
        self.templates = []
        self.pipe_counts = []
        self.last_arr = cnp.PyArray_ZEROS(1, cnp.PyArray_DIMS(ids), cnp.NPY_INT64, 0)
        self.owner = owner
        self.stored = 0
        self.has_message = False

    def add_template(self, tuple nodes not None, Py_ssize_t pipe_count, bint generic):
        """Register the next signature id's template (``Template.nodes``; empty if generic)."""
        self.templates.append(None if generic else tuple(_compile(d) for d in nodes))
        self.pipe_counts.append(pipe_count)

    def set_id(self, Py_ssize_t j, Py_ssize_t sid):
        """Env ``j``'s signature is ``sid`` with nothing in its row (a generic one)."""
        self._check(j, sid)
        self.ids[j] = <uint32_t>sid
        (<int64_t *>cnp.PyArray_DATA(self.last_arr))[j] = sid

    def write(self, Py_ssize_t j, Py_ssize_t sid, tuple additions not None):
        """Store env ``j``'s info dicts with signature ``sid``'s template; False if they do not match it."""
        self._check(j, sid)
        return self._store(j, sid, additions) == 1

    cdef int _check(self, Py_ssize_t j, Py_ssize_t sid) except -1:
        if not 0 <= j < self.num_envs:
            raise IndexError(f"env {j} out of range [0, {self.num_envs})")
        if not 0 <= sid < len(self.templates):
            raise IndexError(f"no signature {sid}")
        return 0

    def store(self, Py_ssize_t j, tuple additions not None):
        """Store env ``j``'s info dicts (an empty one clears its id): what the env loop does."""
        self._check(j, 0)
        if len(additions) == 1 and isinstance(additions[0], dict) and not additions[0]:
            self.empty(j)
        else:
            self.capture(j, additions)

    def clear(self, Py_ssize_t j):
        """Env ``j`` added nothing to the infos of this command."""
        self._check(j, 0)
        self.empty(j)

    cdef void empty(self, Py_ssize_t j) noexcept:
        """Env ``j`` added nothing to the infos (its previous signature stays its first guess)."""
        self.ids[j] = 0

    cdef int capture(self, Py_ssize_t j, tuple additions) except -1:
        """Store env ``j``'s info dicts: the fast path, else the owner's ``capture``."""
        cdef int64_t sid = (<int64_t *>cnp.PyArray_DATA(self.last_arr))[j]
        self.stored += 1
        if sid == 0 or self._store(j, sid, additions) != 1:
            self.owner.capture(j, additions)
        return 0

    cdef int _store(self, Py_ssize_t j, Py_ssize_t sid, tuple additions) except -1:
        cdef tuple template = self.templates[sid]
        cdef list piped = None
        cdef Py_ssize_t k
        cdef uint8_t *row = self.rows + j * self.row_bytes
        if template is None or len(template) != len(additions):
            return 0
        if self.pipe_counts[sid]:
            piped = []
        for k in range(len(additions)):
            if _match(additions[k], <tuple>template[k], row, piped) != 1:
                return 0
        self.ids[j] = <uint32_t>sid
        (<int64_t *>cnp.PyArray_DATA(self.last_arr))[j] = sid
        if piped is not None:
            self.owner.add_piped(j, piped)
        return 1


cdef int _match(object d, tuple nodes, uint8_t *row, list piped) except -1:
    """1 if dict ``d`` has exactly ``nodes``' keys and kinds (storing its values in
    ``row`` and appending piped ones to ``piped``), else 0 (``row`` may be partly written)."""
    cdef Py_ssize_t pos = 0, i = 0, n = len(nodes)
    cdef PyObject *k
    cdef PyObject *v
    cdef tuple node, arg
    cdef object key, value
    cdef int code, overflow
    cdef long long as_int
    cdef cnp.ndarray a
    if not isinstance(d, dict) or PyDict_Size(d) != n:
        return 0
    while PyDict_Next(d, &pos, &k, &v):
        node = <tuple>nodes[i]
        i += 1
        key = node[0]
        if <object>k is not key and not (<object>k == key):
            return 0
        value = <object>v
        code = node[1]
        if code == FLOAT:
            if type(value) is not float:
                return 0
            (<double *>(row + <Py_ssize_t>node[3]))[0] = PyFloat_AS_DOUBLE(value)
        elif code == INT:
            if type(value) is not int:
                return 0
            as_int = PyLong_AsLongLongAndOverflow(value, &overflow)
            if overflow:
                return 0
            (<int64_t *>(row + <Py_ssize_t>node[3]))[0] = as_int
        elif code == BOOL:
            if value is True:
                row[<Py_ssize_t>node[3]] = 1
            elif value is False:
                row[<Py_ssize_t>node[3]] = 0
            else:
                return 0
        elif code == NPSCALAR:
            arg = <tuple>node[2]
            if type(value) is not arg[0]:
                return 0
            if arg[1] is True:
                memcpy(row + <Py_ssize_t>node[3], <char *><PyObject *>value + sizeof(PyObject),
                       <Py_ssize_t>node[4])
            else:
                PyArray_ScalarAsCtype(value, row + <Py_ssize_t>node[3])
        elif code == NDARRAY:
            arg = <tuple>node[2]
            if type(value) is not cnp.ndarray or not _same_array(<cnp.ndarray>value, arg[0], <tuple>arg[1]):
                return 0
            a = <cnp.ndarray>value
            if not cnp.PyArray_IS_C_CONTIGUOUS(a):
                a = cnp.PyArray_NewCopy(a, cnp.NPY_CORDER)
            memcpy(row + <Py_ssize_t>node[3], cnp.PyArray_DATA(a), <Py_ssize_t>node[4])
        elif code == DICT:
            if not isinstance(value, dict) or _match(value, <tuple>node[5], row, piped) != 1:
                return 0
        else:  # PIPE: the same type (and dtype and shape, for arrays) as the signature's
            arg = <tuple>node[2]
            if type(value) is not arg[0]:
                return 0
            if arg[1] is not None and (value.dtype != arg[1] or value.shape != arg[2]):
                return 0
            piped.append(value)
    return 1


cdef cnp.ndarray _int64_vector(object a):
    """``a`` as a C-contiguous int64 vector (itself when it already is one: the per-step case)."""
    if (type(a) is cnp.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>a) == cnp.NPY_INT64
            and cnp.PyArray_NDIM(<cnp.ndarray>a) == 1 and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>a)):
        return <cnp.ndarray>a
    out = np.ascontiguousarray(a, dtype=np.int64)
    if out.ndim != 1:
        raise ValueError(f"expected a 1-d array of int64 indices, got shape {out.shape}")
    return out


def signature_slots(cnp.ndarray ids not None, object worker_of_env not None, cnp.ndarray table not None,
                    object env_rows not None):
    """Which signature each output row has: (slots, order).

    Row k is env ``env_rows[k]``; its global signature is ``table[worker, ids[env]]``
    (``table``: C-contiguous int64 [workers, local ids]).
    ``order`` holds the global ids other than 0 (no info) in the order the rows first show
    them, ``slots[k]`` the position of row k's in ``order`` (-1: no info).
    """
    cdef cnp.ndarray workers_arr = _int64_vector(worker_of_env), rows_arr = _int64_vector(env_rows)
    cdef const int64_t *worker_of = <const int64_t *>cnp.PyArray_DATA(workers_arr)
    cdef const int64_t *rows = <const int64_t *>cnp.PyArray_DATA(rows_arr)
    cdef Py_ssize_t n = cnp.PyArray_DIMS(rows_arr)[0], k, s, env, num_envs = cnp.PyArray_DIMS(workers_arr)[0]
    cdef Py_ssize_t num_workers, num_local
    cdef const int64_t *table_data
    cdef uint32_t local
    cdef int64_t g
    cdef const uint32_t *id_data
    cdef list order = []
    cdef cnp.ndarray slots_arr = cnp.PyArray_EMPTY(1, [n], cnp.NPY_INT64, 0)
    cdef int64_t *slots = <int64_t *>cnp.PyArray_DATA(slots_arr)
    cdef int64_t seen[64]
    cdef Py_ssize_t num_seen = 0
    if (cnp.PyArray_TYPE(ids) != cnp.NPY_UINT32 or cnp.PyArray_NDIM(ids) != 1
            or cnp.PyArray_DIMS(ids)[0] != num_envs or not cnp.PyArray_IS_C_CONTIGUOUS(ids)):
        raise ValueError(f"ids must be a contiguous uint32 vector of {num_envs} entries")
    if (cnp.PyArray_TYPE(table) != cnp.NPY_INT64 or cnp.PyArray_NDIM(table) != 2
            or not cnp.PyArray_IS_C_CONTIGUOUS(table)):
        raise ValueError("table must be a C-contiguous int64 [workers, local ids] array")
    num_workers, num_local = cnp.PyArray_DIMS(table)[0], cnp.PyArray_DIMS(table)[1]
    table_data = <const int64_t *>cnp.PyArray_DATA(table)
    id_data = <const uint32_t *>cnp.PyArray_DATA(ids)
    for k in range(n):
        env = rows[k]
        if not 0 <= env < num_envs:
            raise IndexError(f"env {env} out of range [0, {num_envs})")
        local = id_data[env]
        if local >= <uint32_t>num_local:
            raise RuntimeError(f"env {env} has info signature {local}, which its worker never sent")
        if not 0 <= worker_of[env] < num_workers:
            raise IndexError(f"env {env}'s worker {worker_of[env]} out of range [0, {num_workers})")
        g = table_data[worker_of[env] * num_local + local]
        if g == 0:
            slots[k] = -1
            continue
        for s in range(num_seen):
            if seen[s] == g:
                slots[k] = s
                break
        else:
            if num_seen < 64:
                seen[num_seen] = g
                num_seen += 1
                slots[k] = num_seen - 1
                order.append(g)
            else:
                # More than 64 signatures in one step: look the rest up in the list.
                if g in order:
                    slots[k] = order.index(g)
                else:
                    order.append(g)
                    slots[k] = len(order) - 1
    return slots_arr, tuple(order)


cdef class Plan:
    """The arrays and copies of one info plan: the vector arrays to allocate and, per
    signature slot, memcpys from the env's row into them and the masks to set.

    Args:
        targets: per array, its dtype and its shape after the batch axis (``object``
            arrays start filled with None, the others with zeros).
        fast: per slot, an int64 array [m, 3] of (target, offset in the row, nbytes).
        masks: per slot, an int64 array of the bool targets to set to True.
    """
    cdef list targets
    cdef cnp.ndarray fast_ops, fast_start, mask_ops, mask_start
    cdef Py_ssize_t num_slots

    def __init__(self, list targets not None, list fast not None, list masks not None):
        if len(fast) != len(masks):
            raise ValueError("fast and masks must have one entry per signature slot")
        # (a type number builds the array without the dtype object: numeric dtypes only)
        self.targets = [(dtype.num if dtype.kind in "biufc" and dtype.isnative else -1, tuple(shape), dtype)
                        for dtype, shape in targets]
        self.num_slots = len(fast)
        self.fast_start = cnp.PyArray_ZEROS(1, [self.num_slots + 1], cnp.NPY_INT64, 0)
        self.mask_start = cnp.PyArray_ZEROS(1, [self.num_slots + 1], cnp.NPY_INT64, 0)
        cdef Py_ssize_t s
        for s in range(self.num_slots):
            self.fast_start[s + 1] = self.fast_start[s] + len(fast[s])
            self.mask_start[s + 1] = self.mask_start[s] + len(masks[s])
        import numpy as np
        self.fast_ops = np.ascontiguousarray(np.concatenate([np.zeros((0, 3), np.int64)] + list(fast)), dtype=np.int64)
        self.mask_ops = np.ascontiguousarray(np.concatenate([np.zeros(0, np.int64)] + list(masks)), dtype=np.int64)

    def run(self, cnp.ndarray rows not None, object slots not None, object env_rows not None):
        """The plan's arrays, one row per output row, each row's values copied in."""
        cdef cnp.ndarray slots_arr = _int64_vector(slots), rows_arr = _int64_vector(env_rows)
        cdef Py_ssize_t n = cnp.PyArray_DIMS(slots_arr)[0]
        cdef list arrays = [self._new(target, n) for target in self.targets]
        if cnp.PyArray_DIMS(rows_arr)[0] != n:
            raise ValueError("slots and env_rows differ in length")
        self._copy(arrays, rows, <const int64_t *>cnp.PyArray_DATA(slots_arr),
                   <const int64_t *>cnp.PyArray_DATA(rows_arr), n)
        return arrays

    cdef cnp.ndarray _new(self, tuple target, Py_ssize_t n):
        cdef int typenum = target[0]
        cdef tuple shape = target[1]
        cdef cnp.npy_intp dims[32]
        cdef int k, ndim = len(shape) + 1
        if typenum < 0:
            dtype = target[2]
            return np.full((n, *shape), None, dtype=object) if dtype == object else np.zeros((n, *shape), dtype)
        if ndim > 32:
            raise ValueError(f"an info array of {ndim} dimensions")
        dims[0] = n
        for k in range(1, ndim):
            dims[k] = <cnp.npy_intp>shape[k - 1]
        return cnp.PyArray_ZEROS(ndim, dims, typenum, 0)

    cdef int _copy(self, list arrays, cnp.ndarray rows, const int64_t *slots, const int64_t *env_rows,
                   Py_ssize_t n) except -1:  # arrays: OUT
        """Copy each of the ``n`` rows' values into ``arrays`` (C-contiguous, one row per output row)."""
        cdef Py_ssize_t num_targets = len(arrays), t, k, s, op, env
        cdef Py_ssize_t row_bytes, num_envs
        cdef char **data = NULL
        cdef Py_ssize_t *stride = NULL
        cdef const int64_t *fast_ops = <const int64_t *>cnp.PyArray_DATA(self.fast_ops)
        cdef const int64_t *fast_start = <const int64_t *>cnp.PyArray_DATA(self.fast_start)
        cdef const int64_t *mask_ops = <const int64_t *>cnp.PyArray_DATA(self.mask_ops)
        cdef const int64_t *mask_start = <const int64_t *>cnp.PyArray_DATA(self.mask_start)
        cdef const uint8_t *src
        cdef const uint8_t *base
        cdef cnp.ndarray a
        if (cnp.PyArray_TYPE(rows) != cnp.NPY_UINT8 or cnp.PyArray_NDIM(rows) != 2
                or not cnp.PyArray_IS_C_CONTIGUOUS(rows)):
            raise ValueError("rows must be a C-contiguous uint8 array")
        row_bytes = cnp.PyArray_DIMS(rows)[1]
        num_envs = cnp.PyArray_DIMS(rows)[0]
        base = <const uint8_t *>cnp.PyArray_DATA(rows)
        for k in range(n):
            if not (-1 <= slots[k] < self.num_slots) or not 0 <= env_rows[k] < num_envs:
                raise IndexError(f"row {k}: slot {slots[k]} or env {env_rows[k]} out of range")
        data = <char **>PyMem_Malloc(max(num_targets, 1) * sizeof(char *))
        stride = <Py_ssize_t *>PyMem_Malloc(max(num_targets, 1) * sizeof(Py_ssize_t))
        if data == NULL or stride == NULL:
            PyMem_Free(data)
            PyMem_Free(stride)
            raise MemoryError()
        try:
            for t in range(num_targets):
                a = <cnp.ndarray?>arrays[t]
                if not cnp.PyArray_IS_C_CONTIGUOUS(a) or cnp.PyArray_NDIM(a) < 1 or cnp.PyArray_DIMS(a)[0] != n:
                    raise ValueError(f"arrays[{t}] must be C-contiguous with {n} rows")
                data[t] = <char *>cnp.PyArray_DATA(a)
                stride[t] = cnp.PyArray_STRIDES(a)[0] if cnp.PyArray_NDIM(a) else 0
            for s in range(self.num_slots):  # ops must stay inside their arrays and rows
                for op in range(fast_start[s], fast_start[s + 1]):
                    t = fast_ops[3 * op]
                    if (not 0 <= t < num_targets or fast_ops[3 * op + 2] != stride[t]
                            or fast_ops[3 * op + 1] < 0 or fast_ops[3 * op + 1] + fast_ops[3 * op + 2] > row_bytes):
                        raise ValueError(f"copy {op} does not fit its array or the row")
                for op in range(mask_start[s], mask_start[s + 1]):
                    t = mask_ops[op]
                    if not 0 <= t < num_targets or stride[t] != 1:
                        raise ValueError(f"mask {op} is not a bool array")
            with nogil:
                for k in range(n):
                    s = slots[k]
                    if s < 0:
                        continue
                    src = base + env_rows[k] * row_bytes
                    for op in range(fast_start[s], fast_start[s + 1]):
                        t = fast_ops[3 * op]
                        memcpy(data[t] + k * stride[t], src + fast_ops[3 * op + 1], fast_ops[3 * op + 2])
                    for op in range(mask_start[s], mask_start[s + 1]):
                        data[mask_ops[op]][k] = 1
        finally:
            PyMem_Free(data)
            PyMem_Free(stride)
        return 0
