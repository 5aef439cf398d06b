# cython: language_level=3
"""Sum / min segment trees over float64 leaves: batched update and prefix-sum search.

Layout: the leaves are one float64 array ``leaves`` of ``8 * bsize`` values
(``leaves[:capacity]`` are the user's, the rest padding); above them, an
implicit binary heap ``heap`` of ``2 * bsize`` values, ``bsize`` a power of
two, whose bottom row ``heap[bsize + b]`` combines the block of 8 leaves
``leaves[8b : 8b + 8]`` pairwise, ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)), and
whose node ``n`` combines ``heap[2n]`` and ``heap[2n + 1]``; ``heap[1]`` is
the root. Padding holds the identity of the operation (0 for sums, +inf for
minima), so any capacity works. The result is exactly a binary tree over the
leaves, except that its three lowest levels are not stored: they are
recomputed from the block of 8 leaves, one 64-byte cache line, which costs
less than the two cache misses that storing them would cost at each search
and update.

Update: index by index, the leaf is written and its block node and
ancestors recomputed up to the levels that hold no more nodes than the
batch (a climb: its addresses depend on the index only, so the out-of-order
core overlaps the misses of several climbs, and the leaf line and block node
are prefetched a few indices ahead). A duplicate index simply wins by coming
later: after each climb the tree is consistent below those levels, which are
then recomputed whole, contiguously. ``update_pair`` climbs a sum and a min
tree at the same indices in one pass (what the replay buffer does), cheaper
than two passes. (Measured against one pass per level over the whole batch,
with prefetch of the next level, and against a radix sort by block with
de-duplicated level passes: both slower at 2^20 leaves and batches of 4096.)

Search: a sorted batch (stratified sampling gives one) first finds its nodes
in a heap row of about 2n nodes by one merge with that row's running sums,
which replaces the ~log2(2n) cache-resident but instruction-bound top levels.
Then the whole batch descends two levels per pass (all loads of a pass are
independent, and each query prefetches the line it reads in the next pass, so
cache misses overlap instead of forming one chain per query). Each step
reads the left sum ``l`` and goes right iff ``v >= l`` (then ``v -= l``),
written as arithmetic on 0/1 so that the compiler emits no data-dependent
branch; the last three steps read the block of 8 leaves. A query whose
prefix is at or beyond the total, or that rounding led to a zero leaf, is
redone by a guarded descent (go right iff ``v >= l`` and the right sum is
positive), which never enters a zero-sum subtree; so the result is always a
positive leaf, the last positive one for prefixes at or beyond the total.

The ``def`` wrappers are thin: the Python front ends (fastvec.replay) convert
inputs. Value checks (index range, negative/NaN priorities, negative/NaN
prefix values) run inside the kernels before anything is written, and come
back as the position of the first bad element so that the front end can
raise a precise error.
"""
from libc.math cimport INFINITY

from fastvec._ext._types cimport f64, i64

cdef extern from *:
    """
    /* Hint that a line is about to be read / written (no-ops where unsupported). */
    #if defined(__GNUC__) || defined(__clang__)
    #define FASTVEC_PREFETCH(p) __builtin_prefetch((const void*)(p), 0)
    #define FASTVEC_PREFETCH_W(p) __builtin_prefetch((const void*)(p), 1)
    #else
    #define FASTVEC_PREFETCH(p) ((void)0)
    #define FASTVEC_PREFETCH_W(p) ((void)0)
    #endif
    """
    void FASTVEC_PREFETCH_W(const void* p) noexcept nogil
    void FASTVEC_PREFETCH(const void* p) noexcept nogil


# --------------------------------------------------------------------------- kernels

cdef inline f64 _combine(f64 a, f64 b, bint is_min) noexcept nogil:
    if is_min:
        return a if a < b else b  # exactly minsd: branch-free
    return a + b


cdef inline f64 _combine8(const f64* c, bint is_min) noexcept nogil:
    """The block of 8 leaves at ``c``, combined pairwise like a binary tree."""
    return _combine(
        _combine(_combine(c[0], c[1], is_min), _combine(c[2], c[3], is_min), is_min),
        _combine(_combine(c[4], c[5], is_min), _combine(c[6], c[7], is_min), is_min),
        is_min)


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


ctypedef struct _Tree:
    f64* leaves                 # OUT
    f64* heap                   # OUT
    const f64* priorities       # one per index of the batch
    bint is_min


# How many indices ahead the update prefetches the leaf line and block node:
# enough to cover a cache miss with the work of the indices in between.
cdef enum:
    _UPDATE_PREFETCH = 8


cdef inline void _climb(_Tree* t, Py_ssize_t bsize, Py_ssize_t i, i64 idx, Py_ssize_t lim,
                        bint is_min) noexcept nogil:
    """Write leaf ``idx`` and recompute its block node and its ancestors down
    to node ``lim`` (exclusive). After it the tree is consistent below ``lim``,
    so a later duplicate index simply wins. ``is_min`` is passed as a literal
    (not read from ``t``) so that each caller's loop compiles without branches."""
    cdef i64 block = idx >> 3
    cdef Py_ssize_t node = bsize + block
    cdef f64* h = t.heap
    t.leaves[idx] = t.priorities[i]
    h[node] = _combine8(t.leaves + 8 * block, is_min)
    node >>= 1
    while node >= lim:
        h[node] = _combine(h[2 * node], h[2 * node + 1], is_min)
        node >>= 1


cdef inline void _climb_all(_Tree* trees, int kind, Py_ssize_t bsize, const i64[::1] indices,
                            Py_ssize_t lim) noexcept nogil:
    """Climb every index of the batch in ``trees``: kind 0, one sum tree;
    1, one min tree; 2, a sum tree then a min tree. Called with a literal
    ``kind``, so that inlining specialises the loop."""
    cdef Py_ssize_t n = indices.shape[0]
    cdef Py_ssize_t i
    cdef i64 ahead
    cdef int t
    cdef int ntrees = 2 if kind == 2 else 1
    for i in range(n):
        if i + _UPDATE_PREFETCH < n:
            ahead = indices[i + _UPDATE_PREFETCH]
            for t in range(ntrees):
                FASTVEC_PREFETCH_W(trees[t].leaves + ahead)
                FASTVEC_PREFETCH_W(trees[t].heap + bsize + (ahead >> 3))
        if kind != 1:
            _climb(&trees[0], bsize, i, indices[i], lim, False)
        if kind != 0:
            _climb(&trees[ntrees - 1], bsize, i, indices[i], lim, True)


cdef void _recompute_top(f64* h, Py_ssize_t start, bint is_min) noexcept nogil:
    """Every heap node below ``2 * start``, bottom-up."""
    cdef Py_ssize_t node
    while start >= 1:
        for node in range(start, 2 * start):
            h[node] = _combine(h[2 * node], h[2 * node + 1], is_min)
        start >>= 1


cdef void _update(
    _Tree* trees,               # OUT: their leaves and heaps
    int ntrees,
    Py_ssize_t bsize,
    const i64[::1] indices,
    Py_ssize_t dense_nodes,
) noexcept nogil:
    """Update one tree, or a sum tree and a min tree (``ntrees`` 2, in that
    order) of the same shape at the same indices.

    Each index climbs from its leaf up to the levels that hold no more nodes
    than the batch, for every tree in turn (all addresses of a climb depend on
    the index only, so the out-of-order core overlaps the cache misses of
    several climbs, and of the trees: one pass for a sum and a min tree costs
    less than two). Those small upper levels are then recomputed whole,
    contiguously, instead of climbed once per index.
    """
    cdef Py_ssize_t start, lim
    cdef int t
    start = bsize >> 1          # first node of the topmost climbed level
    while start > dense_nodes:
        start >>= 1
    lim = 2 * start if start > 0 else 1     # bsize 1: the block node is the root
    if ntrees == 2:             # a sum tree and a min tree
        _climb_all(trees, 2, bsize, indices, lim)
    elif trees[0].is_min:
        _climb_all(trees, 1, bsize, indices, lim)
    else:
        _climb_all(trees, 0, bsize, indices, lim)
    for t in range(ntrees):
        _recompute_top(trees[t].heap, start, trees[t].is_min)


cdef void _rebuild(
    const f64[::1] leaves,
    f64[::1] heap,              # OUT
    Py_ssize_t bsize,
    bint is_min,
) noexcept nogil:
    cdef Py_ssize_t block
    cdef const f64* lv = &leaves[0]
    cdef f64* h = &heap[0]
    for block in range(bsize):
        h[bsize + block] = _combine8(lv + 8 * block, is_min)
    _recompute_top(h, bsize >> 1, is_min)


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


cdef inline i64 _descend_guarded(const f64* lv, const f64* h, Py_ssize_t bsize, f64 v) noexcept nogil:
    """One query, never entering a zero-sum subtree (the root must be > 0)."""
    cdef i64 node = 1
    cdef i64 g, b
    cdef f64 left, right
    cdef const f64* s
    while node < bsize:
        node = 2 * node
        left = h[node]
        g = (v >= left) & (h[node + 1] > 0.0)
        v = v - left * <f64> g
        node = node + g
    s = lv + 8 * (node - bsize)
    left = (s[0] + s[1]) + (s[2] + s[3])
    right = (s[4] + s[5]) + (s[6] + s[7])
    g = (v >= left) & (right > 0.0)
    v = v - left * <f64> g
    b = 4 * g
    left = s[b] + s[b + 1]
    right = s[b + 2] + s[b + 3]
    g = (v >= left) & (right > 0.0)
    v = v - left * <f64> g
    b = b + 2 * g
    g = (v >= s[b]) & (s[b + 1] > 0.0)
    return 8 * (node - bsize) + b + g


cdef inline void _prefetch_next(const f64* h, const f64* lv, i64 node, Py_ssize_t level_size,
                                Py_ssize_t bsize) noexcept nogil:
    """Prefetch what a query at ``node`` reads in the next pass: its children
    and grandchildren (a two-level pass), or its block of 8 leaves."""
    if level_size < bsize:
        FASTVEC_PREFETCH(h + 2 * node)
        FASTVEC_PREFETCH(h + 4 * node)
    else:
        FASTVEC_PREFETCH(lv + 8 * (node - bsize))


cdef inline f64 _prefix(const f64[::1] values, Py_ssize_t k, f64 scale, int mode) noexcept nogil:
    """The prefix value of query ``k`` (as _prepare computes it)."""
    if mode == 0:
        return values[k]
    if mode == 1:
        return values[k] * scale
    return (<f64> k + values[k]) * scale


cdef void _descend(
    const f64[::1] leaves,
    const f64[::1] heap,
    Py_ssize_t bsize,
    const f64[::1] values,
    f64 scale,
    int mode,
    f64[::1] work,              # OUT scratch: remaining prefix per query
    f64[::1] cums,              # OUT scratch for sorted batches, 1 + a power of two <= bsize
    i64[::1] out,               # OUT leaf index per query
) noexcept nogil:
    cdef Py_ssize_t n = work.shape[0]
    cdef Py_ssize_t m = cums.shape[0] - 1
    cdef Py_ssize_t k, j, level_size, levels
    cdef i64 node, go, b
    cdef f64 left, total, x
    cdef bint ascending = True
    cdef const f64* lv = &leaves[0]
    cdef const f64* h = &heap[0]
    cdef const f64* s
    total = h[1]
    for k in range(1, n):
        ascending &= work[k - 1] <= work[k]
    if ascending and m >= 4:
        # Sorted prefixes (stratified sampling makes them): the m nodes of
        # the heap row [m, 2m) are found by one merge with that row's running
        # sums instead of log2(m) passes over the batch. Equal running sums
        # (zero-sum nodes) are skipped, the last node stops prefixes at or
        # beyond the total (the fix-up below redoes those).
        cums[0] = 0.0
        for j in range(m):
            cums[j + 1] = cums[j] + h[m + j]
        j = 0
        for k in range(n):
            x = work[k]
            while j < m - 1 and cums[j + 1] <= x:
                j += 1
            work[k] = x - cums[j]
            out[k] = m + j
            _prefetch_next(h, lv, m + j, m, bsize)
        level_size = m
    else:
        for k in range(n):
            out[k] = 1
        level_size = 1
    levels = 0
    while (level_size << levels) < bsize:
        levels += 1
    if levels % 2 == 1:
        # an odd number of heap levels remains: one single-level pass first
        level_size <<= 1
        for k in range(n):
            node = 2 * out[k]
            left = h[node]
            x = work[k]
            go = x >= left
            work[k] = x - left * <f64> go
            node = node + go
            out[k] = node
            _prefetch_next(h, lv, node, level_size, bsize)
    while level_size < bsize:
        # two heap levels per pass: the children pair and the grandchildren
        # quad of a node are both prefetched by the previous pass
        level_size <<= 2
        for k in range(n):
            node = 2 * out[k]
            x = work[k]
            left = h[node]
            go = x >= left
            x = x - left * <f64> go
            node = 2 * (node + go)
            left = h[node]
            go = x >= left
            work[k] = x - left * <f64> go
            node = node + go
            out[k] = node
            _prefetch_next(h, lv, node, level_size, bsize)
    for k in range(n):          # the three levels inside the block of 8 leaves
        node = out[k] - bsize
        s = lv + 8 * node
        x = work[k]
        left = (s[0] + s[1]) + (s[2] + s[3])
        go = x >= left
        x = x - left * <f64> go
        b = 4 * go
        left = s[b] + s[b + 1]
        go = x >= left
        x = x - left * <f64> go
        b = b + 2 * go
        go = x >= s[b]
        out[k] = 8 * node + b + go
    # Redo what the unguarded descent may get wrong: prefixes at or beyond
    # the total, and zero leaves reached through rounding.
    for k in range(n):
        x = _prefix(values, k, scale, mode)
        if x >= total or not (lv[out[k]] > 0.0):
            out[k] = _descend_guarded(lv, h, bsize, x)


# --------------------------------------------------------------------------- wrappers

cdef int _check_layout(const f64[::1] leaves, const f64[::1] heap, Py_ssize_t bsize) except -1:
    if heap.shape[0] != 2 * bsize or leaves.shape[0] != 8 * bsize:
        raise ValueError(f"leaves ({leaves.shape[0]}) / heap ({heap.shape[0]}) do not fit bsize {bsize}")
    return 0


cdef int _check_batch(const i64[::1] indices, const f64[::1] priorities, i64 capacity,
                      Py_ssize_t bsize) except -1:
    if indices.shape[0] != priorities.shape[0]:
        raise ValueError(f"{indices.shape[0]} indices but {priorities.shape[0]} priorities")
    if capacity > 8 * bsize:
        raise ValueError(f"capacity {capacity} does not fit bsize {bsize}")
    return 0


cdef _Tree _tree(f64[::1] leaves, f64[::1] heap, const f64[::1] priorities, bint is_min):
    """The kernel's view of a checked, non-empty update (the arrays must outlive it)."""
    return _Tree(&leaves[0], &heap[0], &priorities[0], is_min)


def update(f64[::1] leaves, f64[::1] heap, Py_ssize_t bsize, const i64[::1] indices,
           const f64[::1] priorities, i64 capacity, bint is_min, Py_ssize_t dense_nodes):
    """Check, then write leaves and recompute their ancestors. Returns -1, or
    the first bad position (and then nothing was written)."""
    _check_layout(leaves, heap, bsize)
    _check_batch(indices, priorities, capacity, bsize)
    if indices.shape[0] == 0:
        return -1
    cdef _Tree tree = _tree(leaves, heap, priorities, is_min)
    cdef Py_ssize_t bad
    with nogil:
        bad = _check_update(indices, priorities, capacity, is_min)
        if bad < 0:
            _update(&tree, 1, bsize, indices, dense_nodes)
    return bad


def update_pair(f64[::1] sum_leaves, f64[::1] sum_heap, f64[::1] min_leaves, f64[::1] min_heap,
                Py_ssize_t bsize, const i64[::1] indices, const f64[::1] sum_priorities,
                const f64[::1] min_priorities, i64 capacity, Py_ssize_t dense_nodes):
    """``update`` of a sum tree and a min tree of the same shape at the same
    indices, in one pass. Returns -1, or the first position whose index or
    priority (either one) is bad, and then neither tree was written."""
    _check_layout(sum_leaves, sum_heap, bsize)
    _check_layout(min_leaves, min_heap, bsize)
    _check_batch(indices, sum_priorities, capacity, bsize)
    _check_batch(indices, min_priorities, capacity, bsize)
    if indices.shape[0] == 0:
        return -1
    cdef _Tree[2] trees
    trees[0] = _tree(sum_leaves, sum_heap, sum_priorities, False)
    trees[1] = _tree(min_leaves, min_heap, min_priorities, True)
    cdef Py_ssize_t bad, bad_min
    with nogil:
        bad = _check_update(indices, sum_priorities, capacity, False)
        bad_min = _check_update(indices, min_priorities, capacity, True)
        if bad < 0 or (0 <= bad_min < bad):
            bad = bad_min
        if bad < 0:
            _update(trees, 2, bsize, indices, dense_nodes)
    return bad


def rebuild(const f64[::1] leaves, f64[::1] heap, Py_ssize_t bsize, bint is_min):
    """Recompute every block sum and heap node from the leaves."""
    _check_layout(leaves, heap, bsize)
    with nogil:
        _rebuild(leaves, heap, bsize, is_min)


def find_prefixsum(const f64[::1] leaves, const f64[::1] heap, Py_ssize_t bsize,
                   const f64[::1] values, f64 scale, int mode, i64[::1] out, f64[::1] work,
                   f64[::1] cums):
    """Batched search (``mode`` as in _prepare); the root must be positive.
    Fills ``out`` with leaf indices. Returns -1, or the first invalid prefix
    position (mode 0), and then ``out`` is left unspecified."""
    _check_layout(leaves, heap, bsize)
    cdef Py_ssize_t n = values.shape[0]
    cdef Py_ssize_t m = cums.shape[0] - 1
    if m < 0 or m > bsize or (m & (m - 1)) != 0:
        raise ValueError(f"cums must hold 1 + a power of two <= {bsize} values, got {m + 1}")
    if out.shape[0] != n or work.shape[0] != n:
        raise ValueError(f"out/work buffers ({out.shape[0]}, {work.shape[0]}) do not match "
                         f"the number of values ({n})")
    if not heap[1] > 0.0:
        raise ValueError("the tree's total is not positive")
    cdef Py_ssize_t bad
    with nogil:
        bad = _prepare(values, work, scale, mode)
        if bad < 0:
            _descend(leaves, heap, bsize, values, scale, mode, work, cums, out)
    return bad
