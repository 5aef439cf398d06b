# cython: language_level=3
"""Sum / min segment trees over float64 leaves: batched update and prefix-sum search.

Layout: an implicit binary heap in one float64 array ``tree`` of length
``2 * size``, ``size`` being the capacity rounded up to a power of two.
``tree[1]`` is the root, node ``n`` has children ``2n`` and ``2n + 1``, leaf
``i`` is ``tree[size + i]``. Padding leaves (and ``tree[0]``) hold the
identity of the operation, 0 for sums and +inf for minima, so any capacity
works; a parent is always ``tree[2n] + tree[2n + 1]`` (or their min).

Update: leaves are written in batch order (a duplicate index: the last write
wins), then ancestors are recomputed one level at a time for the whole batch
(independent loads, so cache misses overlap, and each pass prefetches the
parents the next pass writes); the upper levels that hold no more nodes than
the batch are recomputed whole, contiguously.

Search: the batch descends in groups of LANES queries, each group walking all
levels with its state in registers. Each step reads the left child sum ``l``
and goes right iff ``v >= l`` (then ``v -= l``), written as a select so the
compiler emits conditional moves: no data-dependent branch, and LANES
independent chains of loads in flight. A query whose prefix is at or beyond
the total, or that rounding led to a zero leaf, is redone by a guarded
descent (go right iff ``v >= l`` and the right sum is positive), which never
enters a zero-sum subtree; so the result is always a positive leaf, the last
positive one for prefixes at or beyond the total.

The ``def`` wrappers are thin: the Python front ends (fastvec.replay) convert
inputs. Value checks (index range, negative/NaN priorities, negative/NaN
prefix values) run inside the kernels before anything is written, and come
back as the position of the first bad element so that the front end can
raise a precise error.
"""
from libc.math cimport INFINITY

from fastvec._ext._types cimport f64, i64

cdef enum:
    LANES = 8

cdef extern from *:
    """
    /* Hint that a line is about to be written (a no-op where unsupported). */
    #if defined(__GNUC__) || defined(__clang__)
    #define FASTVEC_PREFETCH_W(p) __builtin_prefetch((const void*)(p), 1)
    #else
    #define FASTVEC_PREFETCH_W(p) ((void)0)
    #endif
    """
    void FASTVEC_PREFETCH_W(const void* p) noexcept nogil


# --------------------------------------------------------------------------- kernels

cdef inline f64 _combine(f64 a, f64 b, bint is_min) noexcept nogil:
    if is_min:
        return a if a < b else b  # exactly minsd: branch-free
    return a + b


cdef Py_ssize_t _check_update(
    const i64[::1] indices,
    const f64[::1] priorities,
    i64 capacity,
    bint is_min,
) noexcept nogil:
    """Return the first position whose index or priority is invalid, or -1."""
    cdef Py_ssize_t i
    cdef Py_ssize_t n = indices.shape[0]
    cdef i64 idx
    cdef f64 p
    for i in range(n):
        idx = indices[i]
        p = priorities[i]
        # p >= 0 is False for NaN; +inf is allowed only in min trees ("absent").
        if idx < 0 or idx >= capacity or not (p >= 0.0) or (not is_min and p == INFINITY):
            return i
    return -1


cdef void _update(
    f64[::1] tree,              # OUT
    Py_ssize_t size,
    const i64[::1] indices,
    const f64[::1] priorities,
    bint is_min,
    Py_ssize_t dense_nodes,
) noexcept nogil:
    cdef Py_ssize_t n = indices.shape[0]
    cdef Py_ssize_t i, node, start
    cdef int shift = 0
    cdef f64* t = &tree[0]
    # While one level is written, the parents for the next pass are prefetched:
    # their addresses are known, so the misses overlap the current pass.
    for i in range(n):
        t[size + indices[i]] = priorities[i]
        FASTVEC_PREFETCH_W(t + ((size + indices[i]) >> 1))
    start = size >> 1          # first node of the level being recomputed
    while start > dense_nodes:
        shift += 1
        for i in range(n):
            node = (size + indices[i]) >> shift
            t[node] = _combine(t[2 * node], t[2 * node + 1], is_min)
            FASTVEC_PREFETCH_W(t + (node >> 1))
        start >>= 1
    while start >= 1:          # the small upper levels: every node, bottom-up
        for node in range(start, 2 * start):
            t[node] = _combine(t[2 * node], t[2 * node + 1], is_min)
        start >>= 1


cdef void _rebuild(f64[::1] tree, Py_ssize_t size, bint is_min) noexcept nogil:  # OUT tree
    cdef Py_ssize_t node
    cdef f64* t = &tree[0]
    for node in range(size - 1, 0, -1):
        t[node] = _combine(t[2 * node], t[2 * node + 1], is_min)


cdef Py_ssize_t _prepare(
    const f64[::1] values,
    f64[::1] work,              # OUT
    f64 scale,
    int mode,
) noexcept nogil:
    """Fill ``work`` with the prefix value of each query.

    mode 0: the prefix values are ``values`` (checked: >= 0, not NaN);
    mode 1: ``values`` are uniforms u in [0, 1), prefix = u * scale;
    mode 2: stratified, prefix_i = (i + u_i) * scale, scale = total / n.
    Returns the first invalid position (mode 0), else -1.
    """
    cdef Py_ssize_t i
    cdef Py_ssize_t n = values.shape[0]
    cdef f64 v
    if mode == 0:
        for i in range(n):
            v = values[i]
            if not (v >= 0.0):
                return i
            work[i] = v
    elif mode == 1:
        for i in range(n):
            work[i] = values[i] * scale
    else:
        for i in range(n):
            work[i] = (<f64> i + values[i]) * scale
    return -1


cdef inline i64 _descend_guarded(const f64* t, Py_ssize_t size, f64 v) noexcept nogil:
    """One query, never entering a zero-sum subtree (the root must be > 0)."""
    cdef i64 node = 1
    cdef i64 g
    cdef f64 left
    while node < size:
        node = 2 * node
        left = t[node]
        g = (v >= left) & (t[node + 1] > 0.0)
        v = v - left if g else v
        node = node + g
    return node - size


cdef void _descend(
    const f64[::1] tree,
    Py_ssize_t size,
    const f64[::1] work,
    i64[::1] out,               # OUT leaf index per query
) noexcept nogil:
    cdef Py_ssize_t n = work.shape[0]
    cdef Py_ssize_t i, k, level_size
    cdef i64 node[LANES]
    cdef f64 v[LANES]
    cdef f64 left, total
    cdef bint go
    cdef const f64* t = &tree[0]
    total = t[1]
    i = 0
    while i + LANES <= n:
        for k in range(LANES):
            node[k] = 1
            v[k] = work[i + k]
        level_size = 1
        while level_size < size:
            for k in range(LANES):
                node[k] = 2 * node[k]
                left = t[node[k]]
                go = v[k] >= left
                v[k] = v[k] - left * <f64> go
                node[k] = node[k] + go
            level_size <<= 1
        for k in range(LANES):
            out[i + k] = node[k] - size
        i += LANES
    for k in range(i, n):       # the tail of the batch
        out[k] = _descend_guarded(t, size, work[k])
    # Redo what the unguarded descent may get wrong: prefixes at or beyond
    # the total, and zero leaves reached through rounding.
    for k in range(i):
        if work[k] >= total or not (t[size + out[k]] > 0.0):
            out[k] = _descend_guarded(t, size, work[k])


# --------------------------------------------------------------------------- wrappers

def update(f64[::1] tree, Py_ssize_t size, const i64[::1] indices, const f64[::1] priorities,
           i64 capacity, bint is_min, Py_ssize_t dense_nodes):
    """Check, then write leaves and recompute their ancestors. Returns -1, or
    the first bad position (and then nothing was written)."""
    if indices.shape[0] != priorities.shape[0]:
        raise ValueError(f"{indices.shape[0]} indices but {priorities.shape[0]} priorities")
    if tree.shape[0] != 2 * size or capacity > size:
        raise ValueError(f"tree of {tree.shape[0]} nodes does not fit size {size}, capacity {capacity}")
    cdef Py_ssize_t bad
    with nogil:
        bad = _check_update(indices, priorities, capacity, is_min)
        if bad < 0:
            _update(tree, size, indices, priorities, is_min, dense_nodes)
    return bad


def rebuild(f64[::1] tree, Py_ssize_t size, bint is_min):
    """Recompute every internal node from the leaves."""
    if tree.shape[0] != 2 * size:
        raise ValueError(f"tree has {tree.shape[0]} nodes, expected {2 * size}")
    with nogil:
        _rebuild(tree, size, is_min)


def find_prefixsum(const f64[::1] tree, Py_ssize_t size, const f64[::1] values, f64 scale,
                   int mode, i64[::1] out, f64[::1] work):
    """Batched search (``mode`` as in _prepare); the root must be positive.
    Fills ``out`` with leaf indices. Returns -1, or the first invalid prefix
    position (mode 0), and then ``out`` is left unspecified."""
    cdef Py_ssize_t n = values.shape[0]
    if out.shape[0] != n or work.shape[0] != n:
        raise ValueError(f"out/work buffers ({out.shape[0]}, {work.shape[0]}) do not match "
                         f"the number of values ({n})")
    if tree.shape[0] != 2 * size:
        raise ValueError(f"tree has {tree.shape[0]} nodes, expected {2 * size}")
    if not tree[1] > 0.0:
        raise ValueError("the tree's total is not positive")
    cdef Py_ssize_t bad
    with nogil:
        bad = _prepare(values, work, scale, mode)
        if bad < 0:
            _descend(tree, size, work, out)
    return bad
