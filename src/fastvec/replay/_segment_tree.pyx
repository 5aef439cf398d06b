# cython: language_level=3
"""Sum / min segment trees over float64 leaves: batched update and prefix-sum search.

Layout: an 8-ary tree whose every group of 8 siblings is one aligned 64-byte
cache line. Level 0 is the leaves, one float64 array ``leaves`` of
``n0 = 8 * ceil(capacity / 8)`` values (``leaves[:capacity]`` are the user's,
the rest padding). Level ``k >= 1`` holds ``count[k] = ceil(count[k-1] / 8)``
nodes, node ``i`` combining the 8 values ``level[k-1][8i : 8i + 8]`` pairwise,
((c0+c1)+(c2+c3))+((c4+c5)+(c6+c7)); the top level holds one node, the root.
Levels 1..top are stored top-down in one float64 array ``heap``, each padded
to a multiple of 8 values (so every group of 8 children is one line): the
root is ``heap[0]`` (its line holds 7 padding values), its children line
starts at ``heap[8]``, and so on (``_layout`` computes the offsets;
``heap_size`` the length). Padding holds the identity of the operation (0 for
sums, +inf for minima), so any capacity works. At 2^20 leaves the tree has 7
levels above the leaves (a binary tree has 20): a search or an update reads
one line per level, and only the two lowest levels (1 MiB and 128 KiB) are
usually out of the nearer caches.

Update: index by index, the leaf is written and its ancestors recomputed,
each from its line of 8 children, up to the levels that hold no more nodes
than the batch (a climb: its addresses depend on the index only, so the
out-of-order core overlaps the misses of several climbs, and the lines of a
climb are prefetched a few indices ahead). A duplicate index simply wins by
coming later: after each climb the tree is consistent below those levels,
which are then recomputed whole, contiguously. ``update_pair`` climbs a sum
and a min tree at the same indices in one pass (what the replay buffer does),
cheaper than two passes.

Search: a sorted batch (stratified sampling gives one) first finds its nodes
in the lowest level of at most 2n nodes by one merge with that level's
running sums, which replaces the cache-resident but instruction-bound top
levels. Then groups of 64 queries descend one level per pass (all loads of
a pass are independent, and each query prefetches the line it reads in the
next pass, so cache misses overlap instead of forming one chain per query;
a group's lines stay in L1 until that pass), 4 queries picked at a time.
At a node, the child is found by three binary steps over the pairwise sums
of its line of 8 children, the same sums that make the node's stored value:
each reads the left sum ``l`` and goes right iff ``v >= l`` (then
``v -= l``), written as arithmetic on 0/1 so that the compiler emits no
data-dependent branch. A prefix at or (by rounding) beyond a node's sum
picks its 8th child, which may be padding whose subtree is not stored: the
descent then stays on the level's last real node. A query whose prefix is at
or beyond the total, or that rounding led to a zero leaf, is redone by a
guarded descent (go right iff ``v >= l`` and the right sum is positive; at
or beyond the total, iff the right sum is positive), which never enters a
zero-sum subtree (padding included); so the result is always a positive
leaf, the last positive one for prefixes at or beyond the total. (This layout
replaced a binary heap for its fewer levels, hence fewer cache misses, per
update and search: docs/replay.md has the measurements.)

The ``def`` wrappers are thin: the Python front ends (fastvec.replay) convert
inputs. Value checks (index range, negative/NaN priorities, negative/NaN
prefix values) run inside the kernels before anything is written, and come
back as the position of the first bad element so that the front end can
raise a precise error.
"""
from cython.parallel cimport prange
from libc.math cimport INFINITY

from fastvec._ext._omp cimport fv_omp_install_fork_guard, fv_omp_threads
from fastvec._ext._types cimport f64, i64

fv_omp_install_fork_guard()

# Cache prefetch hints (fv_platform.h: no-ops where the compiler has no builtin for them).
cdef extern from "fv_platform.h":
    void FV_PREFETCH_W(const void* p) noexcept nogil
    void FV_PREFETCH(const void* p) noexcept nogil


# Levels above the leaves: 8^21 > 2^63 leaves, so 22 always suffice.
cdef enum:
    _MAX_LEVELS = 24


# --------------------------------------------------------------------------- layout

cdef Py_ssize_t _layout(Py_ssize_t n0, Py_ssize_t* offset, Py_ssize_t* count,
                        int* depth) noexcept nogil:
    """For ``n0`` leaves (a positive multiple of 8): ``count[k]`` nodes of
    level k = 1..depth at ``heap[offset[k]:]`` (``count[0] = n0``). Returns the
    heap length."""
    cdef Py_ssize_t n = n0
    cdef Py_ssize_t off = 0
    cdef int k, d = 0
    count[0] = n0
    offset[0] = 0
    while True:
        d += 1
        n = (n + 7) >> 3
        count[d] = n
        if n == 1:
            break
    for k in range(d, 0, -1):   # top-down: the root first
        offset[k] = off
        off += (count[k] + 7) & ~(<Py_ssize_t> 7)
    depth[0] = d
    return off


# --------------------------------------------------------------------------- kernels

cdef inline f64 _combine(f64 a, f64 b, bint is_min) noexcept nogil:
    if is_min:
        return a if a < b else b  # exactly minsd: branch-free
    return a + b


cdef inline f64 _combine8(const f64* c, bint is_min) noexcept nogil:
    """The line of 8 children at ``c``, combined pairwise."""
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
    f64* level[_MAX_LEVELS]     # OUT: level 0 the leaves, then the heap's levels
    const f64* priorities       # one per index of the batch
    bint is_min


# How many indices ahead the update prefetches the lines of a climb: enough to
# cover a cache miss with the work of the indices in between.
cdef enum:
    _UPDATE_PREFETCH = 8
    _PREFETCH_LEVELS = 3        # the leaf line and two parents' lines


cdef inline void _climb(_Tree* t, Py_ssize_t i, i64 idx, int top, bint is_min) noexcept nogil:
    """Write leaf ``idx`` and recompute its ancestors of levels 1..top. After
    it the tree is consistent up to ``top``, so a later duplicate index simply
    wins. ``is_min`` is passed as a literal (not read from ``t``) so that each
    caller's loop compiles without branches."""
    cdef int k
    t.level[0][idx] = t.priorities[i]
    for k in range(1, top + 1):
        idx >>= 3
        t.level[k][idx] = _combine8(t.level[k - 1] + 8 * idx, is_min)


cdef inline void _prefetch_climb(_Tree* trees, int ntrees, i64 idx, int nfetch) noexcept nogil:
    """Prefetch, for writing, the lines the climb of leaf ``idx`` touches in
    its ``nfetch`` lowest levels, in each of the ``ntrees`` trees."""
    cdef int t, k
    for t in range(ntrees):
        for k in range(nfetch):
            FV_PREFETCH_W(trees[t].level[k] + (idx >> (3 * k)))


cdef inline void _climb4(_Tree* t, Py_ssize_t i, const i64* indices, int top, bint is_min) noexcept nogil:
    """``_climb`` of the indices at batch positions i..i+3, level by level
    for all 4 (4 independent chains of loads and stores interleaved; a
    duplicate among them still wins by coming later, since every ancestor is
    recomputed after all 4 leaves below it are written)."""
    cdef i64 idx[4]
    cdef int k, q
    for q in range(4):
        idx[q] = indices[i + q]
        t.level[0][idx[q]] = t.priorities[i + q]
    for k in range(1, top + 1):
        for q in range(4):
            idx[q] >>= 3
            t.level[k][idx[q]] = _combine8(t.level[k - 1] + 8 * idx[q], is_min)


cdef inline void _climb_all(_Tree* trees, int kind, const i64[::1] indices, int top) noexcept nogil:
    """Climb every index of the batch in ``trees``: kind 0, one sum tree;
    1, one min tree; 2, a sum tree then a min tree. Called with a literal
    ``kind``, so that inlining specialises the loop."""
    cdef Py_ssize_t n = indices.shape[0]
    cdef Py_ssize_t i = 0, j
    cdef int ntrees = 2 if kind == 2 else 1
    cdef int nfetch = top + 1 if top + 1 < _PREFETCH_LEVELS else _PREFETCH_LEVELS
    # One tree: 4 climbs at a time, interleaved, so that the core overlaps their
    # misses (docs/replay.md); a pair of trees already interleaves two climbs
    # per index (4 would be slower).
    while kind != 2 and i + 4 <= n:
        for j in range(i + _UPDATE_PREFETCH, i + _UPDATE_PREFETCH + 4):
            if j < n:
                _prefetch_climb(trees, 1, indices[j], nfetch)
        _climb4(&trees[0], i, &indices[0], top, kind == 1)
        i += 4
    while i < n:
        if i + _UPDATE_PREFETCH < n:
            _prefetch_climb(trees, ntrees, indices[i + _UPDATE_PREFETCH], nfetch)
        if kind != 1:
            _climb(&trees[0], i, indices[i], top, False)
        if kind != 0:
            _climb(&trees[ntrees - 1], i, indices[i], top, True)
        i += 1


cdef void _recompute_levels(_Tree* t, const Py_ssize_t* count, int first, int depth) noexcept nogil:
    """Every node of levels first..depth, bottom-up."""
    cdef int k
    cdef Py_ssize_t node
    cdef bint is_min = t.is_min
    for k in range(first, depth + 1):
        for node in range(count[k]):
            t.level[k][node] = _combine8(t.level[k - 1] + 8 * node, is_min)


cdef void _update(
    _Tree* trees,               # OUT: their leaves and heaps
    int ntrees,
    const Py_ssize_t* count,
    int depth,
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
    cdef int top = 0            # the highest climbed level
    cdef int t
    while top < depth and count[top + 1] > dense_nodes:
        top += 1
    if ntrees == 2:             # a sum tree and a min tree
        _climb_all(trees, 2, indices, top)
    elif trees[0].is_min:
        _climb_all(trees, 1, indices, top)
    else:
        _climb_all(trees, 0, indices, top)
    for t in range(ntrees):
        _recompute_levels(&trees[t], count, top + 1, depth)


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


cdef inline i64 _pick(const f64* c, f64* v) noexcept nogil:
    """The child of the line ``c`` where the prefix ``v[0]`` falls, found by
    three binary steps over the same pairwise sums that make the node's
    stored sum, ((c0+c1)+(c2+c3))+((c4+c5)+(c6+c7)): each reads the left sum
    ``l`` and goes right iff ``v >= l`` (then ``v -= l``), written as
    arithmetic on 0/1 so that the compiler emits no data-dependent branch.
    (Cheaper than comparing ``v`` with all 7 running sums: fewer
    instructions, and the search is instruction-bound once its lines are
    prefetched.)"""
    cdef f64 x = v[0]
    cdef f64 left = (c[0] + c[1]) + (c[2] + c[3])
    cdef i64 go = x >= left
    cdef i64 b
    x = x - left * <f64> go
    b = 4 * go
    left = c[b] + c[b + 1]
    go = x >= left
    x = x - left * <f64> go
    b = b + 2 * go
    left = c[b]
    go = x >= left
    v[0] = x - left * <f64> go
    return b + go


cdef inline void _pick4(const f64* children, const f64* grandchildren, i64 last,
                        f64* work, i64* out) noexcept nogil:
    """``_pick`` for the 4 queries at ``work[0:4]`` / ``out[0:4]``, one step
    for all 4 before the next: the search is bound by each pick's chain of
    dependent loads and compares, and interleaving 4 independent chains keeps
    the core busy where its scheduler alone overlaps fewer (docs/replay.md).
    Then, as for one query: the picked child's index, kept on the level's
    last real node (a prefix at or, by rounding, beyond a node's sum picks its
    8th child, which may be padding whose subtree is not stored; the fix-up
    after the descent redoes such queries when it matters), and its line of
    children prefetched."""
    cdef const f64* c[4]
    cdef f64 x[4]
    cdef f64 left[4]
    cdef i64 parent[4]
    cdef i64 b[4]
    cdef i64 go[4]
    cdef i64 node
    cdef int q
    # (everything read before anything is written: the build allows aliasing)
    for q in range(4):
        parent[q] = out[q]
        x[q] = work[q]
        c[q] = children + 8 * parent[q]
    for q in range(4):
        left[q] = (c[q][0] + c[q][1]) + (c[q][2] + c[q][3])
    for q in range(4):
        go[q] = x[q] >= left[q]
        x[q] = x[q] - left[q] * <f64> go[q]
        b[q] = 4 * go[q]
    for q in range(4):
        left[q] = c[q][b[q]] + c[q][b[q] + 1]
    for q in range(4):
        go[q] = x[q] >= left[q]
        x[q] = x[q] - left[q] * <f64> go[q]
        b[q] = b[q] + 2 * go[q]
    for q in range(4):
        left[q] = c[q][b[q]]
    for q in range(4):
        go[q] = x[q] >= left[q]
        work[q] = x[q] - left[q] * <f64> go[q]
        node = 8 * parent[q] + b[q] + go[q]
        node = node if node < last else last
        out[q] = node
        if grandchildren != NULL:
            FV_PREFETCH(grandchildren + 8 * node)


cdef inline i64 _pick_guarded(const f64* c, f64* v, bint beyond) noexcept nogil:
    """``_pick`` that never enters a zero-sum child (the line's sum must be
    > 0): go right iff ``v >= l`` (or ``beyond``) and the right sum is
    positive; for a prefix at or beyond the total (``beyond``), the last
    positive child."""
    cdef f64 x = v[0]
    cdef f64 left = (c[0] + c[1]) + (c[2] + c[3])
    cdef f64 right = (c[4] + c[5]) + (c[6] + c[7])
    cdef i64 go = (beyond or x >= left) and right > 0.0
    cdef i64 b
    x = x - left * <f64> go
    b = 4 * go
    left = c[b] + c[b + 1]
    right = c[b + 2] + c[b + 3]
    go = (beyond or x >= left) and right > 0.0
    x = x - left * <f64> go
    b = b + 2 * go
    left = c[b]
    go = (beyond or x >= left) and c[b + 1] > 0.0
    v[0] = x - left * <f64> go
    return b + go


cdef inline i64 _descend_guarded(const _Tree* t, int depth, f64 v, bint beyond) noexcept nogil:
    """One query, never entering a zero-sum subtree (the root must be > 0).
    Padding is 0, so it is never entered either."""
    cdef i64 node = 0
    cdef int lev
    for lev in range(depth, 0, -1):
        node = 8 * node + _pick_guarded(t.level[lev - 1] + 8 * node, &v, beyond)
    return node


cdef inline f64 _prefix(const f64* values, Py_ssize_t k, f64 scale, int mode) noexcept nogil:
    """The prefix value of query ``k`` (as _prepare computes it)."""
    if mode == 0:
        return values[k]
    if mode == 1:
        return values[k] * scale
    return (<f64> k + values[k]) * scale


# Queries that descend together, level by level: the lines each one picks are
# prefetched for the next level while the rest of its group works, and a
# group's lines (64 per level) stay in L1 until they are read.
cdef enum:
    _SEARCH_GROUP = 64


cdef void _descend(
    const _Tree* t,
    const Py_ssize_t* count,
    int depth,
    const f64* values,
    f64 scale,
    int mode,
    Py_ssize_t lo,              # the queries lo..hi-1 of the batch
    Py_ssize_t hi,
    f64* work,                  # OUT: remaining prefix per query; at the end its leaf's value
    i64* out,                   # OUT: leaf index per query
) noexcept nogil:
    cdef Py_ssize_t n = hi - lo
    cdef Py_ssize_t k, g, g_end
    cdef int lev
    cdef i64 node, last
    cdef f64 x
    cdef f64 total = t.level[depth][0]
    cdef const f64* children
    cdef const f64* grandchildren
    cdef int start = depth      # the level whose nodes the descent starts from
    cdef Py_ssize_t j, m
    cdef f64 cum, nxt
    cdef const f64* row
    cdef bint ascending = True
    for k in range(lo + 1, hi):
        ascending &= work[k - 1] <= work[k]
    while start > 1 and count[start - 1] <= 2 * n:
        start -= 1
    if ascending and start < depth and count[start] >= 4:
        # Sorted prefixes (stratified sampling makes them): the nodes of the
        # level of at most 2n nodes are found by one merge with that level's
        # running sums instead of depth - start passes over the batch. Nodes
        # of sum 0 are skipped (their running sum equals the next one), the
        # last node stops prefixes at or beyond the total (the fix-up below
        # redoes those).
        row = t.level[start]
        m = count[start]
        j = 0
        cum = 0.0
        nxt = row[0]
        for k in range(lo, hi):
            x = work[k]
            while j < m - 1 and nxt <= x:
                j += 1
                cum = nxt
                nxt = cum + row[j]
            work[k] = x - cum
            out[k] = j
            FV_PREFETCH(t.level[start - 1] + 8 * j)
    else:
        start = depth
        for k in range(lo, hi):
            out[k] = 0
    g = lo
    while g < hi:
        g_end = g + _SEARCH_GROUP if g + _SEARCH_GROUP < hi else hi
        for lev in range(start, 0, -1):
            # one level per pass over the group: the node at level ``lev``
            # reads its line of children at level lev-1, and prefetches the
            # line of the child it picked, which the next pass reads
            children = t.level[lev - 1]
            grandchildren = t.level[lev - 2] if lev >= 2 else NULL
            last = count[lev - 1] - 1
            k = g
            while k + 4 <= g_end:
                _pick4(children, grandchildren, last, work + k, out + k)
                k += 4
            while k < g_end:
                x = work[k]
                node = 8 * out[k] + _pick(children + 8 * out[k], &x)
                node = node if node < last else last
                work[k] = x
                out[k] = node
                if grandchildren != NULL:
                    FV_PREFETCH(grandchildren + 8 * node)
                k += 1
        g = g_end
    # Redo what the unguarded descent may get wrong: prefixes at or beyond
    # the total, and zero leaves reached through rounding.
    # The same loop leaves each query's leaf value in ``work`` (its line was
    # just read), so that the replay buffer needs no second gather.
    cdef f64 leaf
    for k in range(lo, hi):
        x = _prefix(values, k, scale, mode)
        leaf = t.level[0][out[k]]
        if x >= total or not (leaf > 0.0):
            out[k] = _descend_guarded(t, depth, x, x >= total)
            leaf = t.level[0][out[k]]
        work[k] = leaf


# --------------------------------------------------------------------------- wrappers

def heap_size(Py_ssize_t n_leaves):
    """Length of the heap array above ``n_leaves`` leaves (a positive multiple of 8)."""
    if n_leaves <= 0 or n_leaves % 8 != 0:
        raise ValueError(f"the number of leaves must be a positive multiple of 8, got {n_leaves}")
    cdef Py_ssize_t offset[_MAX_LEVELS]
    cdef Py_ssize_t count[_MAX_LEVELS]
    cdef int depth
    return _layout(n_leaves, offset, count, &depth)


cdef int _tree(_Tree* t, f64[::1] leaves, f64[::1] heap, Py_ssize_t* count, int* depth,
               bint is_min) except -1:
    """Check the layout and fill the kernel's view of a tree (level pointers;
    the arrays must outlive it), ``count`` and ``depth``."""
    cdef Py_ssize_t n0 = leaves.shape[0]
    cdef Py_ssize_t offset[_MAX_LEVELS]
    cdef int k
    if n0 <= 0 or n0 % 8 != 0 or heap.shape[0] != _layout(n0, offset, count, depth):
        raise ValueError(f"leaves ({n0}) / heap ({heap.shape[0]}) do not fit the 8-ary layout")
    t.level[0] = &leaves[0]
    for k in range(1, depth[0] + 1):
        t.level[k] = &heap[offset[k]]
    t.priorities = NULL
    t.is_min = is_min
    return 0


cdef int _check_batch(const i64[::1] indices, const f64[::1] priorities, i64 capacity,
                      Py_ssize_t n_leaves) except -1:
    if indices.shape[0] != priorities.shape[0]:
        raise ValueError(f"{indices.shape[0]} indices but {priorities.shape[0]} priorities")
    if capacity > n_leaves:
        raise ValueError(f"capacity {capacity} does not fit {n_leaves} leaves")
    return 0


def update(f64[::1] leaves, f64[::1] heap, const i64[::1] indices, const f64[::1] priorities,
           i64 capacity, bint is_min, Py_ssize_t dense_nodes):
    """Check, then write leaves and recompute their ancestors. Returns -1, or
    the first bad position (and then nothing was written)."""
    cdef _Tree tree
    cdef Py_ssize_t count[_MAX_LEVELS]
    cdef int depth
    _tree(&tree, leaves, heap, count, &depth, is_min)
    _check_batch(indices, priorities, capacity, leaves.shape[0])
    if indices.shape[0] == 0:
        return -1
    tree.priorities = &priorities[0]
    cdef Py_ssize_t bad
    with nogil:
        bad = _check_update(indices, priorities, capacity, is_min)
        if bad < 0:
            _update(&tree, 1, count, depth, indices, dense_nodes)
    return bad


def update_pair(f64[::1] sum_leaves, f64[::1] sum_heap, f64[::1] min_leaves, f64[::1] min_heap,
                const i64[::1] indices, const f64[::1] sum_priorities,
                const f64[::1] min_priorities, i64 capacity, Py_ssize_t dense_nodes):
    """``update`` of a sum tree and a min tree of the same shape at the same
    indices, in one pass. Returns -1, or the first position whose index or
    priority (either one) is bad, and then neither tree was written."""
    cdef _Tree[2] trees
    cdef Py_ssize_t count[_MAX_LEVELS]
    cdef int depth
    if min_leaves.shape[0] != sum_leaves.shape[0]:
        raise ValueError(f"the trees differ in shape ({sum_leaves.shape[0]}, {min_leaves.shape[0]} leaves)")
    _tree(&trees[0], sum_leaves, sum_heap, count, &depth, False)
    _tree(&trees[1], min_leaves, min_heap, count, &depth, True)
    _check_batch(indices, sum_priorities, capacity, sum_leaves.shape[0])
    _check_batch(indices, min_priorities, capacity, sum_leaves.shape[0])
    if indices.shape[0] == 0:
        return -1
    trees[0].priorities = &sum_priorities[0]
    trees[1].priorities = &min_priorities[0]
    cdef Py_ssize_t bad, bad_min
    with nogil:
        bad = _check_update(indices, sum_priorities, capacity, False)
        bad_min = _check_update(indices, min_priorities, capacity, True)
        if bad < 0 or (0 <= bad_min < bad):
            bad = bad_min
        if bad < 0:
            _update(trees, 2, count, depth, indices, dense_nodes)
    return bad


def find_prefixsum(f64[::1] leaves, f64[::1] heap, const f64[::1] values, f64 scale, int mode,
                   i64[::1] out, f64[::1] work, int num_threads=1):
    """Batched search (``mode`` as in _prepare) in a sum tree; the root must
    be positive. Fills ``out`` with leaf indices and ``work`` with their
    values. Returns -1, or the first invalid prefix position (mode 0), and
    then ``out`` and ``work`` are left unspecified.
    (``leaves`` and ``heap`` are only read.) With ``num_threads`` > 1 the
    batch is cut into that many contiguous chunks (of at least a group of
    queries each) searched on OpenMP threads."""
    cdef _Tree tree
    cdef Py_ssize_t count[_MAX_LEVELS]
    cdef int depth
    _tree(&tree, leaves, heap, count, &depth, False)
    cdef Py_ssize_t n = values.shape[0]
    if out.shape[0] != n or work.shape[0] != n:
        raise ValueError(f"out/work buffers ({out.shape[0]}, {work.shape[0]}) do not match "
                         f"the number of values ({n})")
    if not heap[0] > 0.0:
        raise ValueError("the tree's total is not positive")
    if num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")
    if n == 0:
        return -1
    cdef Py_ssize_t bad, c
    # at least a group of queries per chunk (smaller ones are not worth a thread)
    cdef Py_ssize_t most = (n + _SEARCH_GROUP - 1) // _SEARCH_GROUP
    cdef int nchunks = num_threads if num_threads < most else <int> most
    nchunks = fv_omp_threads(nchunks)  # 1 in a forked child: see _omp.pxd
    cdef const f64* v = &values[0]
    cdef f64* w = &work[0]
    cdef i64* o = &out[0]
    with nogil:
        bad = _prepare(values, work, scale, mode)
        if bad < 0:
            if nchunks == 1:
                _descend(&tree, count, depth, v, scale, mode, 0, n, w, o)
            else:
                for c in prange(nchunks, num_threads=nchunks, schedule="static"):
                    _descend(&tree, count, depth, v, scale, mode,
                             c * n // nchunks, (c + 1) * n // nchunks, w, o)
    return bad
