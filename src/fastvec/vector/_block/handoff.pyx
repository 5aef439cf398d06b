# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Both sides: flags, waits and copies for the shared-memory vector env.

The parent and each worker talk through a row of uint32 words in shared
memory (one 64-byte row per worker, so two workers never share a cache line):

    CMD_SEQ   parent bumps it to hand the worker a new command
    CMD       which command (fastvec/vector/_block/protocol.pxd defines the words)
    DONE_SEQ  worker sets it to CMD_SEQ once the command's results are written
    STATUS    what the worker left beside the results (ok, infos on the pipe, error)
    WORKER_SLEEPING / PARENT_SLEEPING  set by a waiter before it blocks, so the
              other side only pays for a wake-up syscall when someone sleeps

The last row is shared by all: ANY_DONE counts finished commands (so the
caller can block until *some* worker is done, for send/recv), ANY_SLEEPING
says the caller sleeps on it, CALLER_THINK_US says how long the caller
spends between steps (workers waiting for the next step spin only while that
is short).

A wait spins for a short, bounded time (cheap when the other side answers
within microseconds), then blocks: a futex on Linux, 50 µs naps elsewhere.
After its first microseconds the spin yields the core (``sched_yield``) between
checks. Pure busy-waiting is not an option: the caller and its workers are more
processes than cores (2 workers + the caller on 2 cores), and a spinner steals
the time slice the process it waits for needs (measured: ``docs/benchmarks.md``,
"How a wait spins").
"""
from libc.stdint cimport int64_t, uint32_t, uint8_t, uintptr_t
from libc.string cimport memcpy

cimport numpy as cnp

from fastvec.vector._block.protocol cimport (ANY_DONE, ANY_SLEEPING, CALLER_CPU, CALLER_GAP_US, CALLER_THINK_US, CMD, CMD_SEQ, DONE_SEQ,
                                             RESTARTS_LEFT,
                                             PARENT_SLEEPING, ROW_WORDS, STATUS, WORKER_CPU, WORKER_SLEEPING)
from fastvec.vector._block.obs_rows cimport copy_row, fits_row, row_bytes

cnp.import_array()

# The atomics, clock, yield and futex wait come from the native-env kit's fv_platform.h
# (native on GCC/Clang, portable C11 elsewhere; see that header).
cdef extern from "fv_platform.h" nogil:
    enum: FV_SEQ_CST
    uint32_t fv_load_u32(uint32_t *p, int order)
    void fv_store_u32(uint32_t *p, uint32_t v, int order)
    uint32_t fv_add_u32(uint32_t *p, uint32_t v, int order)
    int fv_cas_u32(uint32_t *p, uint32_t *expected, uint32_t desired, int success, int failure)
    void fv_pause()
    double fv_now()
    void fv_block(uint32_t *p, uint32_t expected, double timeout_s)
    void fv_wake(uint32_t *p)
    void fv_yield()
    int fv_current_cpu()


# Every access to a control word is sequentially consistent: a waiter's store to its
# SLEEPING word and its next load of the watched word must not be reordered.
cdef inline uint32_t fv_load(uint32_t *p) noexcept nogil:
    return fv_load_u32(p, FV_SEQ_CST)


cdef inline void fv_store(uint32_t *p, uint32_t v) noexcept nogil:
    fv_store_u32(p, v, FV_SEQ_CST)


cdef inline void fv_increment(uint32_t *p) noexcept nogil:
    fv_add_u32(p, 1, FV_SEQ_CST)


# A wait spins this long before it starts yielding the core between checks: an
# answer within it costs no system call.
cdef double PURE_SPIN_S = 2e-6


cdef inline bint _spin_on(double start, double spin_s) noexcept nogil:
    """Between two rounds of a spinning wait's checks: False once ``spin_s`` has passed
    since ``start``; else True, having yielded the core if ``PURE_SPIN_S`` has passed."""
    cdef double elapsed = fv_now() - start
    if elapsed >= spin_s:
        return False
    if elapsed >= PURE_SPIN_S:
        fv_yield()
    return True


cdef inline bint _wait_equal(uint32_t *word, uint32_t target, uint32_t *sleeping,
                             double spin_s, double deadline) noexcept nogil:
    """Wait until *word == target: spin up to spin_s, then block. False on deadline."""
    cdef double start = fv_now(), now
    cdef uint32_t seen
    cdef int i
    while True:
        for i in range(64):
            if fv_load(word) == target:
                return True
            fv_pause()
        if not _spin_on(start, spin_s):
            break
    while True:
        fv_store(sleeping, 1)
        seen = fv_load(word)
        if seen == target:
            fv_store(sleeping, 0)
            return True
        now = fv_now()
        if now >= deadline:
            fv_store(sleeping, 0)
            return False
        fv_block(word, seen, deadline - now)
        fv_store(sleeping, 0)
        if fv_load(word) == target:
            return True


cdef inline void _publish(uint32_t *word, uint32_t value, uint32_t *sleeping) noexcept nogil:
    """Store value; wake the other side only if it went to sleep on this word."""
    fv_store(word, value)
    if fv_load(sleeping):
        fv_wake(word)


# The functions below run on every step: they take the control block and the
# worker masks as plain ndarrays and check them with a few C comparisons, since
# acquiring a typed memoryview costs more than their work.
cdef inline uint32_t *_row(uint32_t *ctrl, Py_ssize_t w) noexcept nogil:
    return ctrl + w * <int>ROW_WORDS


cdef uint32_t *ctrl_words(cnp.ndarray ctrl, Py_ssize_t *workers) except NULL:
    """The control block's words, after checking it is a C-contiguous uint32 [workers + 1, ROW_WORDS]."""
    if (cnp.PyArray_TYPE(ctrl) != cnp.NPY_UINT32 or cnp.PyArray_NDIM(ctrl) != 2
            or cnp.PyArray_DIMS(ctrl)[1] != <int>ROW_WORDS or cnp.PyArray_DIMS(ctrl)[0] < 1
            or not cnp.PyArray_IS_C_CONTIGUOUS(ctrl) or not cnp.PyArray_ISWRITEABLE(ctrl)):
        raise ValueError(f"ctrl must be a writeable C-contiguous uint32 array of shape (workers + 1, "
                         f"{ROW_WORDS}), got {ctrl.dtype} {(<object>ctrl).shape}")
    workers[0] = cnp.PyArray_DIMS(ctrl)[0] - 1
    return <uint32_t *>cnp.PyArray_DATA(ctrl)


cdef const uint8_t *mask_bytes(cnp.ndarray mask, Py_ssize_t workers, str name) except NULL:
    if (cnp.PyArray_TYPE(mask) not in (cnp.NPY_UINT8, cnp.NPY_BOOL) or cnp.PyArray_NDIM(mask) != 1
            or not cnp.PyArray_IS_C_CONTIGUOUS(mask) or cnp.PyArray_DIMS(mask)[0] != workers):
        raise ValueError(f"{name} must be a contiguous uint8 array of {workers} entries, "
                         f"got {mask.dtype} {(<object>mask).shape}")
    return <const uint8_t *>cnp.PyArray_DATA(mask)


cdef uint32_t *worker_words(cnp.ndarray ctrl, Py_ssize_t worker, Py_ssize_t *workers) except NULL:
    """:func:`ctrl_words`, after checking too that ``worker`` is in range."""
    cdef uint32_t *base = ctrl_words(ctrl, workers)
    if not 0 <= worker < workers[0]:
        raise IndexError(f"worker {worker} out of range [0, {workers[0]})")
    return base


cdef inline uint32_t *_worker_row(cnp.ndarray ctrl, Py_ssize_t worker) except NULL:
    """Worker ``worker``'s control row (range-checked)."""
    cdef Py_ssize_t workers
    return _row(worker_words(ctrl, worker, &workers), worker)


cdef inline bint _is_done(uint32_t *row) noexcept nogil:
    return fv_load(&row[<int>DONE_SEQ]) == fv_load(&row[<int>CMD_SEQ])


cdef int _wait_all_done(uint32_t *ctrl, const uint8_t *active, Py_ssize_t workers,
                        double spin_s, double deadline) noexcept nogil:
    cdef Py_ssize_t w
    cdef uint32_t *row
    for w in range(workers):
        row = _row(ctrl, w)
        if active[w] and not _wait_equal(&row[<int>DONE_SEQ], fv_load(&row[<int>CMD_SEQ]),
                                         &row[<int>PARENT_SLEEPING], spin_s, deadline):
            return <int>w
    return -1


cdef int _first_busy(uint32_t *ctrl, const uint8_t *active, Py_ssize_t workers) noexcept nogil:
    cdef Py_ssize_t w
    for w in range(workers):
        if active[w] and not _is_done(_row(ctrl, w)):
            return <int>w
    return -1


cdef inline int _find_done(uint32_t *ctrl, const uint8_t *pending, Py_ssize_t workers,
                           Py_ssize_t start) noexcept nogil:
    """First pending worker that is done, scanning round-robin from ``start`` (no starvation)."""
    cdef Py_ssize_t k, w
    for k in range(workers):
        w = (start + k) % workers
        if pending[w] and _is_done(_row(ctrl, w)):
            return <int>w
    return -1


cdef int _wait_any_done(uint32_t *ctrl, const uint8_t *pending, Py_ssize_t workers, Py_ssize_t first,
                        double spin_s, double deadline) noexcept nogil:
    """Index of a pending worker that is done, or -1 on deadline.

    Reads the ANY_DONE counter before each scan: a worker finishing after the
    scan has bumped it, so the futex (which sleeps only while the counter still
    holds that value) cannot miss it.
    """
    cdef uint32_t *counter = &_row(ctrl, workers)[<int>ANY_DONE]
    cdef uint32_t *sleeping = &_row(ctrl, workers)[<int>ANY_SLEEPING]
    cdef double start = fv_now(), now
    cdef uint32_t seen
    cdef int w, i
    while True:
        for i in range(16):
            w = _find_done(ctrl, pending, workers, first)
            if w >= 0:
                return w
            fv_pause()
        if not _spin_on(start, spin_s):
            break
    while True:
        seen = fv_load(counter)
        fv_store(sleeping, 1)
        w = _find_done(ctrl, pending, workers, first)
        if w >= 0:
            fv_store(sleeping, 0)
            return w
        now = fv_now()
        if now >= deadline:
            fv_store(sleeping, 0)
            return -1
        fv_block(counter, seen, deadline - now)
        fv_store(sleeping, 0)


def wait_all_done(cnp.ndarray ctrl not None, cnp.ndarray active not None, double spin_s, double timeout_s,
                  double tail_spin_s=0.0):
    """Parent side: wait until every active worker has finished its command.

    Until the first of them is done (every core busy with a worker) the wait spins for
    ``spin_s`` and then blocks; after that (a core has come free) it spins for up to
    ``tail_spin_s`` per worker before blocking, so that the last worker's answer is
    seen at once instead of through a wake-up. Returns -1 when all are done, else the
    index of a worker still busy when ``timeout_s`` ran out (the caller checks it is
    alive and waits again).
    """
    cdef Py_ssize_t workers, w
    cdef uint32_t *base = ctrl_words(ctrl, &workers)
    cdef const uint8_t *mask = mask_bytes(active, workers, "active")
    cdef double deadline
    cdef int busy
    for w in range(workers):  # the common case: nothing to wait for, keep the GIL
        if mask[w] and not _is_done(_row(base, w)):
            break
    else:
        return -1
    deadline = fv_now() + timeout_s
    with nogil:
        busy = _wait_all_done_until(base, mask, workers, spin_s, tail_spin_s, deadline)
    return busy


cdef int _wait_all_done_until(uint32_t *base, const uint8_t *mask, Py_ssize_t workers, double spin_s,
                              double tail_spin_s, double deadline) noexcept nogil:
    """:func:`wait_all_done`'s wait, until ``deadline`` (``fv_now`` time)."""
    cdef int busy = -1
    if tail_spin_s > spin_s and _find_done(base, mask, workers, 0) < 0:
        busy = _wait_any_done(base, mask, workers, 0, spin_s, deadline)
        busy = -2 if busy < 0 else -1
    if busy == -1:
        return _wait_all_done(base, mask, workers, max(spin_s, tail_spin_s), deadline)
    return _first_busy(base, mask, workers)


cdef extern from "../_wait/fv_omp_park.h" nogil:
    ctypedef void (*fv_omp_region_fn)(void *)
    ctypedef struct fv_omp_runtime:
        pass
    double fv_omp_run_parked(const fv_omp_runtime *runtimes, int count, double spin_s,
                             fv_omp_region_fn body, void *body_arg)


# The runtimes a parked wait can nest in (a process loads one or two GNU OpenMP runtimes:
# torch's and a vendored copy).
cdef Py_ssize_t MAX_PARKED_RUNTIMES = 8


cdef struct _AllDone:
    uint32_t *ctrl
    const uint8_t *mask
    Py_ssize_t workers
    uint32_t command  # a command to hand the workers first (0: none)
    double spin_s, tail_spin_s, timeout_s
    int busy  # OUT


cdef void _all_done_body(void *arg) noexcept nogil:
    cdef _AllDone *wait = <_AllDone *>arg
    if wait.command != 0:
        _start_commands(wait.ctrl, wait.mask, wait.workers, wait.command)
    wait.busy = _wait_all_done_until(wait.ctrl, wait.mask, wait.workers, wait.spin_s, wait.tail_spin_s,
                                     fv_now() + wait.timeout_s)


cdef tuple _run_parked_wait(_AllDone *wait, cnp.ndarray runtimes, double park_spin_s):
    """Run ``wait`` (:func:`_all_done_body`) parked in ``runtimes``, after checking them;
    (busy, exit_s) as :func:`wait_all_done_parked` returns them."""
    cdef Py_ssize_t k
    cdef double exit_s
    if (cnp.PyArray_TYPE(runtimes) != cnp.NPY_UINTP or cnp.PyArray_NDIM(runtimes) != 2
            or cnp.PyArray_DIMS(runtimes)[1] != 2 or not cnp.PyArray_IS_C_CONTIGUOUS(runtimes)
            or not 1 <= cnp.PyArray_DIMS(runtimes)[0] <= MAX_PARKED_RUNTIMES):
        raise ValueError(f"runtimes must be a C-contiguous uintp array of shape (n, 2), 1 <= n <= "
                         f"{MAX_PARKED_RUNTIMES}; got {runtimes.dtype} {(<object>runtimes).shape}")
    for k in range(2 * cnp.PyArray_DIMS(runtimes)[0]):
        if (<uintptr_t *>cnp.PyArray_DATA(runtimes))[k] == 0:
            raise ValueError("runtimes holds a null entry point")
    with nogil:
        exit_s = fv_omp_run_parked(<const fv_omp_runtime *>cnp.PyArray_DATA(runtimes),
                                   <int>cnp.PyArray_DIMS(runtimes)[0], park_spin_s, _all_done_body, wait)
    return wait.busy, exit_s


def start_and_wait_parked(cnp.ndarray ctrl not None, cnp.ndarray mask not None, uint32_t command, double spin_s,
                          double timeout_s, double tail_spin_s, cnp.ndarray runtimes not None,
                          double park_spin_s):
    """Hand every worker in ``mask`` ``command`` (as :func:`start_commands`) and wait for them
    (as :func:`wait_all_done`), both inside the parallel regions of :func:`wait_all_done_parked`:
    the runtimes' idle threads give up their cores before the workers are woken, not after.

    Returns what :func:`wait_all_done_parked` returns.

    Raises:
        RuntimeError: a worker in ``mask`` is still busy with its previous command (nothing sent).
    """
    cdef Py_ssize_t workers
    cdef uint32_t *base = ctrl_words(ctrl, &workers)
    cdef const uint8_t *active = mask_bytes(mask, workers, "mask")
    cdef _AllDone wait
    _check_idle(base, active, workers)
    if command == 0:
        raise ValueError("command must be a Command (not 0)")
    wait.ctrl, wait.mask, wait.workers, wait.command = base, active, workers, command
    wait.spin_s, wait.tail_spin_s, wait.timeout_s, wait.busy = spin_s, tail_spin_s, timeout_s, -1
    return _run_parked_wait(&wait, runtimes, park_spin_s)


def wait_all_done_parked(cnp.ndarray ctrl not None, cnp.ndarray active not None, double spin_s, double timeout_s,
                         double tail_spin_s, cnp.ndarray runtimes not None, double park_spin_s):
    """:func:`wait_all_done`, run inside a parallel region of each OpenMP runtime in
    ``runtimes`` (uintp ``[n, 2]``: each one's ``GOMP_parallel`` and ``omp_get_thread_num``
    addresses), whose other threads yield their cores for up to ``park_spin_s`` and then
    block until the wait is over (``_wait/fv_omp_park.h``). No Python runs in the region.

    Returns (what :func:`wait_all_done` returns, how long the regions took to end once the
    wait was over, in seconds).
    """
    cdef Py_ssize_t workers
    cdef uint32_t *base = ctrl_words(ctrl, &workers)
    cdef const uint8_t *mask = mask_bytes(active, workers, "active")
    cdef _AllDone wait
    if _first_busy(base, mask, workers) < 0:  # the common case: nothing to wait for, no region
        return -1, 0.0
    wait.ctrl, wait.mask, wait.workers, wait.command = base, mask, workers, 0
    wait.spin_s, wait.tail_spin_s, wait.timeout_s, wait.busy = spin_s, tail_spin_s, timeout_s, -1
    return _run_parked_wait(&wait, runtimes, park_spin_s)


def wait_any_done(cnp.ndarray ctrl not None, cnp.ndarray pending not None,
                  Py_ssize_t start, double spin_s, double timeout_s):
    """Parent side: index of a pending worker that has finished, or -1 after ``timeout_s``.

    The scan starts at worker ``start``; passing the worker after the last one
    returned keeps a fast worker from starving the others.
    """
    cdef Py_ssize_t workers
    cdef uint32_t *base = ctrl_words(ctrl, &workers)
    cdef const uint8_t *mask = mask_bytes(pending, workers, "pending")
    cdef double deadline = fv_now() + timeout_s
    cdef int w
    if workers == 0:
        return -1
    with nogil:
        w = _wait_any_done(base, mask, workers, start % workers, spin_s, deadline)
    return w


cdef uint32_t _status_bits(uint32_t *base, const uint8_t *active, Py_ssize_t workers) noexcept nogil:
    cdef Py_ssize_t w
    cdef uint32_t bits = 0, status
    for w in range(workers):
        if active[w]:
            status = fv_load(&_row(base, w)[<int>STATUS])
            bits |= (<uint32_t>1) << (status if status < 31 else 31)
    return bits


def status_bits(cnp.ndarray ctrl not None, cnp.ndarray mask not None):
    """The OR of ``1 << status`` over the workers in ``mask`` (their finished commands'
    status words): one call tells the caller whether anything but OK is there to read."""
    cdef Py_ssize_t workers
    cdef uint32_t *base = ctrl_words(ctrl, &workers)
    cdef const uint8_t *active = mask_bytes(mask, workers, "mask")
    return _status_bits(base, active, workers)


cdef int64_t done_status(uint32_t *ctrl, const uint8_t *mask, Py_ssize_t workers) noexcept nogil:
    """:func:`status_bits` of the workers in ``mask`` if every one has finished its command, else -1."""
    cdef Py_ssize_t w
    for w in range(workers):
        if mask[w] and not _is_done(_row(ctrl, w)):
            return -1
    return _status_bits(ctrl, mask, workers)


cdef int64_t spin_done_status(uint32_t *ctrl, const uint8_t *mask, Py_ssize_t workers,
                              double spin_s) noexcept nogil:
    """:func:`done_status` once every worker in ``mask`` has finished, spinning (and yielding
    the core between checks after ``PURE_SPIN_S``) for up to ``spin_s``; -1 if one is still
    busy then. Never blocks: for a caller with a core of its own, whose wait is short."""
    cdef double start = fv_now()
    cdef int i
    while True:
        for i in range(16):
            if _first_busy(ctrl, mask, workers) < 0:
                return _status_bits(ctrl, mask, workers)
            fv_pause()
        if not _spin_on(start, spin_s):
            return -1


def done_status_bits(cnp.ndarray ctrl not None, cnp.ndarray mask not None):
    """:func:`status_bits` of the workers in ``mask`` if every one of them has finished its
    command, else -1: the caller's check, before it waits, that there is nothing to wait for."""
    cdef Py_ssize_t workers = 0
    cdef uint32_t *base = ctrl_words(ctrl, &workers)
    return done_status(base, mask_bytes(mask, workers, "mask"), workers)


cdef int start_command(uint32_t *ctrl, Py_ssize_t worker, uint32_t command) except -1:
    """Hand ``worker`` (in range) a command: bump its CMD_SEQ. Never blocks (at most one
    wake-up system call), so the GIL stays held."""
    cdef uint32_t *row = _row(ctrl, worker)
    if not _is_done(row):
        raise RuntimeError(f"worker {worker} is still busy with its previous command")
    fv_store(&row[<int>CMD], command)
    fv_store(&row[<int>STATUS], 0)
    _publish(&row[<int>CMD_SEQ], fv_load(&row[<int>CMD_SEQ]) + 1, &row[<int>WORKER_SLEEPING])
    return 0


cdef inline bint _asleep_here(uint32_t *row, uint32_t here) noexcept nogil:
    """The worker of ``row`` sleeps, on the CPU ``here`` names (its number plus one)."""
    return fv_load(&row[<int>WORKER_SLEEPING]) != 0 and fv_load(&row[<int>WORKER_CPU]) == here


cdef int start_commands(uint32_t *ctrl, const uint8_t *mask, Py_ssize_t workers,
                        uint32_t command) except -1:
    """Hand every worker whose ``mask`` byte is set a command, as :func:`start_command`
    does, waking the sleeping ones on the caller's own CPU last.

    A worker woken on the caller's CPU takes that CPU at once (the scheduler favours a
    task that slept), and the caller would hand out the rest only once it got the CPU back,
    after that worker's whole step: the steps would run one after the other."""
    _check_idle(ctrl, mask, workers)
    _start_commands(ctrl, mask, workers, command)
    return 0


cdef int _check_idle(uint32_t *ctrl, const uint8_t *mask, Py_ssize_t workers) except -1:
    """RuntimeError naming the first worker in ``mask`` still busy with its last command."""
    cdef int w = _first_busy(ctrl, mask, workers)
    if w >= 0:
        raise RuntimeError(f"worker {w} is still busy with its previous command")
    return 0


cdef void _start_commands(uint32_t *ctrl, const uint8_t *mask, Py_ssize_t workers,
                          uint32_t command) noexcept nogil:
    """:func:`start_commands`' hand-off, once every worker in ``mask`` is known to be done."""
    cdef Py_ssize_t w
    cdef uint32_t *row
    cdef uint32_t here
    cdef int cpu = fv_current_cpu()
    for w in range(workers):
        if mask[w]:
            row = _row(ctrl, w)
            fv_store(&row[<int>CMD], command)
            fv_store(&row[<int>STATUS], 0)
            fv_store(&row[<int>CMD_SEQ], fv_load(&row[<int>CMD_SEQ]) + 1)
    # (a worker not seen asleep below goes to sleep after the stores above, and sees them)
    here = <uint32_t>(cpu + 1) if cpu >= 0 else 0
    for w in range(workers):
        row = _row(ctrl, w)
        if mask[w] and fv_load(&row[<int>WORKER_SLEEPING]) and (here == 0 or not _asleep_here(row, here)):
            fv_wake(&row[<int>CMD_SEQ])
    if here != 0:
        for w in range(workers):
            row = _row(ctrl, w)
            if mask[w] and _asleep_here(row, here):
                fv_wake(&row[<int>CMD_SEQ])


def sleepers_here_last(cnp.ndarray ctrl not None, list workers):
    """``workers`` with those asleep on the caller's own CPU moved last: the order to hand
    them commands one by one in (see :func:`start_commands`)."""
    cdef Py_ssize_t count, w
    cdef uint32_t *base = ctrl_words(ctrl, &count)
    cdef int cpu = fv_current_cpu()
    if cpu < 0 or len(workers) < 2:
        return workers
    here, others = [], []
    for w in workers:
        if not 0 <= w < count:
            raise IndexError(f"worker {w} out of range for {count} workers")
        if _asleep_here(_row(base, w), <uint32_t>(cpu + 1)):
            here.append(w)
        else:
            others.append(w)
    return others + here if here else workers


def send_command(cnp.ndarray ctrl not None, Py_ssize_t worker, uint32_t command):
    """Parent side: hand ``worker`` a command; returns its sequence number."""
    cdef Py_ssize_t workers
    cdef uint32_t *base = worker_words(ctrl, worker, &workers)
    start_command(base, worker, command)
    return fv_load(&_row(base, worker)[<int>CMD_SEQ])


def is_done(cnp.ndarray ctrl not None, Py_ssize_t worker):
    """True when ``worker`` has finished its last command."""
    return _is_done(_worker_row(ctrl, worker))


cdef bint await_command(uint32_t *ctrl, Py_ssize_t worker, uint32_t last_seq, double spin_s,
                       double deadline) noexcept nogil:
    """Worker side: wait until the caller hands ``worker`` a command newer than ``last_seq``
    (spin up to ``spin_s``, then block); False at ``deadline`` (``fv_now`` time)."""
    cdef uint32_t *row = _row(ctrl, worker)
    # Wait for CMD_SEQ to leave last_seq: same as waiting for last_seq + 1,
    # since the parent never issues a command before the previous one is done.
    cdef int cpu
    if fv_load(&row[<int>CMD_SEQ]) == last_seq + 1:
        return True
    cpu = fv_current_cpu()
    fv_store(&row[<int>WORKER_CPU], <uint32_t>(cpu + 1) if cpu >= 0 else 0)
    return _wait_equal(&row[<int>CMD_SEQ], last_seq + 1, &row[<int>WORKER_SLEEPING], spin_s, deadline)


cdef uint32_t command_word(uint32_t *ctrl, Py_ssize_t worker) noexcept nogil:
    """Which command ``worker`` was handed last (Command)."""
    return fv_load(&_row(ctrl, worker)[<int>CMD])


cdef void finish(uint32_t *ctrl, Py_ssize_t worker, Py_ssize_t workers, uint32_t seq,
                 uint32_t status) noexcept nogil:
    """Worker side: publish ``status`` and mark command ``seq`` done (results are in the
    buffer), waking the caller only if it sleeps."""
    cdef uint32_t *row = _row(ctrl, worker)
    cdef uint32_t *shared = _row(ctrl, workers)
    fv_store(&row[<int>STATUS], status)
    _publish(&row[<int>DONE_SEQ], seq, &row[<int>PARENT_SLEEPING])
    fv_increment(&shared[<int>ANY_DONE])
    if fv_load(&shared[<int>ANY_SLEEPING]):
        fv_wake(&shared[<int>ANY_DONE])


cdef double now() noexcept nogil:
    """The clock the waits use (seconds, monotonic)."""
    return fv_now()


cdef double caller_think(uint32_t *ctrl, Py_ssize_t workers) noexcept nogil:
    """Worker side: the caller's time between a step's results and its next step (seconds)."""
    return fv_load(&_row(ctrl, workers)[<int>CALLER_THINK_US]) * 1e-6


cdef int caller_cpu(uint32_t *ctrl, Py_ssize_t workers) noexcept nogil:
    """Worker side: the CPU the caller ran on when it sent the last step (-1: unknown)."""
    return <int>fv_load(&_row(ctrl, workers)[<int>CALLER_CPU]) - 1


cdef int current_cpu() noexcept nogil:
    """The CPU the calling thread runs on (-1: unknown on this platform)."""
    return fv_current_cpu()


cdef double caller_gap(uint32_t *ctrl, Py_ssize_t workers) noexcept nogil:
    """Worker side: the caller's time between a step's results and its next step, on any
    number of cores (seconds)."""
    return fv_load(&_row(ctrl, workers)[<int>CALLER_GAP_US]) * 1e-6


def publish_caller_think(cnp.ndarray ctrl not None, double seconds, double gap_s=0.0):
    """Parent side: tell the workers how long the caller spends between steps keeping more
    than one core busy (``seconds``) and in all (``gap_s``), running means, and which CPU
    the caller runs on now."""
    cdef Py_ssize_t workers
    cdef uint32_t *base = ctrl_words(ctrl, &workers)
    cdef int cpu = fv_current_cpu()
    fv_store(&_row(base, workers)[<int>CALLER_THINK_US], <uint32_t>min(max(seconds * 1e6, 0.0), 4e9))
    fv_store(&_row(base, workers)[<int>CALLER_GAP_US], <uint32_t>min(max(gap_s * 1e6, 0.0), 4e9))
    fv_store(&_row(base, workers)[<int>CALLER_CPU], <uint32_t>(cpu + 1 if cpu >= 0 else 0))


def read_caller_cpu(cnp.ndarray ctrl not None):
    """What :func:`publish_caller_think` last published as the caller's CPU (-1: unknown)."""
    cdef Py_ssize_t workers
    return caller_cpu(ctrl_words(ctrl, &workers), workers)


def cpu_now():
    """The CPU the calling thread runs on now (-1: unknown on this platform)."""
    return fv_current_cpu()


def publish_restarts_left(cnp.ndarray ctrl not None, uint32_t count):
    """Caller side: how many failures may be recovered from (``env_failure="restart"``)."""
    cdef Py_ssize_t workers
    cdef uint32_t *base = ctrl_words(ctrl, &workers)
    fv_store(&_row(base, workers)[<int>RESTARTS_LEFT], count)


def take_restart(cnp.ndarray ctrl not None):
    """Either side: take one failure's worth of the restart budget: True, having taken it;
    False when it is spent (the failure then raises)."""
    cdef Py_ssize_t workers
    cdef uint32_t *word = &_row(ctrl_words(ctrl, &workers), workers)[<int>RESTARTS_LEFT]
    cdef uint32_t seen = fv_load(word)
    while seen > 0:
        # (a failed exchange leaves the current value in ``seen``: try again with it)
        if fv_cas_u32(word, &seen, seen - 1, FV_SEQ_CST, FV_SEQ_CST):
            return True
    return False


def read_caller_think(cnp.ndarray ctrl not None):
    """What :func:`publish_caller_think` last published, in seconds (what the workers read)."""
    cdef Py_ssize_t workers
    return caller_think(ctrl_words(ctrl, &workers), workers)


def wait_command(cnp.ndarray ctrl not None, Py_ssize_t worker, uint32_t last_seq,
                 double spin_s, double timeout_s):
    """Worker side: wait for a command newer than ``last_seq``.

    Returns ``(seq, command)``, or ``None`` if ``timeout_s`` passed first (the
    worker then checks that its parent still lives and waits again).
    """
    cdef Py_ssize_t workers
    cdef uint32_t *base = worker_words(ctrl, worker, &workers)
    cdef double deadline = fv_now() + timeout_s
    cdef bint got
    with nogil:
        got = await_command(base, worker, last_seq, spin_s, deadline)
    if not got:
        return None
    return last_seq + 1, command_word(base, worker)


def finish_command(cnp.ndarray ctrl not None, Py_ssize_t worker, uint32_t seq, uint32_t status):
    """Worker side: publish ``status`` and mark command ``seq`` done (results are in the buffer)."""
    cdef Py_ssize_t workers
    finish(worker_words(ctrl, worker, &workers), worker, workers, seq, status)


def status(cnp.ndarray ctrl not None, Py_ssize_t worker):
    """The status word ``worker`` left with its last finished command."""
    return fv_load(&_worker_row(ctrl, worker)[<int>STATUS])




def stack_rows(list rows not None, cnp.ndarray out not None):  # out: OUT
    """Copy ``rows[i]`` into ``out[i]`` for arrays that already have ``out``'s row shape and dtype.

    The worker's fast path for writing observations into the shared buffer: one
    memcpy per row, no temporary. Returns False, having written nothing, when any
    row is not a C-contiguous ndarray of exactly that dtype and shape (a Python
    scalar, another dtype, ...); the caller then falls back to ``np.stack``,
    which casts the way Gymnasium's ``concatenate`` does.
    """
    cdef Py_ssize_t n = len(rows), i
    cdef Py_ssize_t nbytes
    if cnp.PyArray_DIMS(out)[0] != n or not cnp.PyArray_IS_C_CONTIGUOUS(out) or cnp.PyArray_NDIM(out) < 1:
        raise ValueError(f"out must be C-contiguous with {n} rows, got shape {(<object>out).shape}")
    for i in range(n):
        if not fits_row(rows[i], out):
            return False
    nbytes = row_bytes(out)
    for i in range(n):
        copy_row(rows[i], out, i, nbytes)
    return True


def write_action_rows(object src, cnp.ndarray slab not None, Py_ssize_t first, Py_ssize_t count,
                      tuple leaf_shape not None):  # slab: OUT
    """The common case of writing a batch of actions: one call, no temporaries.

    ``slab`` is an action leaf's shared slab, uint8 ``[num_envs, 8 * leaf size]``: each
    env's row holds its action in the dtype the caller gave (at most 8 bytes a value), so
    the env receives what SyncVectorEnv would hand it. When ``src`` is a C-contiguous
    ndarray of a bool, integer or float dtype (native byte order, at most 8 bytes) and
    shape ``(count, *leaf_shape)``, copy row i into slab row ``first + i`` and return the
    dtype's character code; otherwise write nothing and return 0 (the caller's general
    path then converts, checks and explains).
    """
    if (cnp.PyArray_TYPE(slab) != cnp.NPY_UINT8 or cnp.PyArray_NDIM(slab) != 2
            or not cnp.PyArray_IS_C_CONTIGUOUS(slab) or not cnp.PyArray_ISWRITEABLE(slab)):
        raise ValueError("slab must be a writeable C-contiguous uint8 array [num_envs, bytes per row]")
    return action_rows(src, slab, first, count, leaf_shape)


cdef int action_rows(object src, cnp.ndarray slab, Py_ssize_t first, Py_ssize_t count,
                     tuple leaf_shape) except -1:  # slab: OUT
    """:func:`write_action_rows` after the slab's checks."""
    cdef cnp.ndarray a
    cdef Py_ssize_t size = 1, row_bytes, stride, i, k
    cdef int ndim = len(leaf_shape) + 1
    if type(src) is not cnp.ndarray:
        return 0
    a = <cnp.ndarray>src
    if (not (cnp.PyArray_ISBOOL(a) or cnp.PyArray_ISINTEGER(a) or cnp.PyArray_ISFLOAT(a))
            or cnp.PyArray_ITEMSIZE(a) > 8 or not cnp.PyArray_IS_C_CONTIGUOUS(a)
            or not cnp.PyArray_ISNOTSWAPPED(a) or cnp.PyArray_NDIM(a) != ndim):
        return 0
    for k in range(1, ndim):
        if cnp.PyArray_DIMS(a)[k] != <cnp.npy_intp>leaf_shape[k - 1]:
            return 0
        size *= cnp.PyArray_DIMS(a)[k]
    if cnp.PyArray_DIMS(a)[0] != count:
        return 0
    stride = cnp.PyArray_DIMS(slab)[1]
    if not 0 <= first <= first + count <= cnp.PyArray_DIMS(slab)[0] or size * 8 > stride:
        return 0
    row_bytes = size * cnp.PyArray_ITEMSIZE(a)
    for i in range(count):
        memcpy(<char *>cnp.PyArray_DATA(slab) + (first + i) * stride,
               <char *>cnp.PyArray_DATA(a) + i * row_bytes, row_bytes)
    return <int>(<cnp.dtype><object>cnp.PyArray_DESCR(a)).type
