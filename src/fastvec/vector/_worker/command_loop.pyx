# cython: language_level=3, boundscheck=False, wraparound=False
"""Worker side: a worker's command loop, with its plain steps compiled.

A worker waits for a command on its control row, runs it for its envs and marks it
done. Most commands are plain steps (``Command.STEP``: the actions are in the shared
block, and so are the results). Around each one the Python loop of ``_worker._serve``
ran about a microsecond of glue: the wait's return, the dispatch, reading the actions,
the status, the done word. That glue is on the vector step's critical path whenever
this worker is the last to finish. :class:`StepServer` waits for the commands and runs
the plain steps itself, through the worker's compiled env loop, until one comes that it
leaves to Python: any other command, a step whose actions are not one slab, or a step
whose envs left something for the pipe (the envs have stepped; Python finishes it). An
env's exception propagates to the Python loop, which reports it as before.
"""
cimport numpy as cnp
from libc.stdint cimport uint32_t, uint64_t

from fastvec.vector._block cimport handoff
from fastvec.vector._block.protocol cimport STATS_BUCKETS, STEP, WORKER_COMMANDS, WORKER_STEP_NS, WORKER_WAIT_NS
from fastvec.vector._wait._worker_spin cimport caller_computes, command_spin, next_gap

cnp.import_array()


cdef inline int _bucket(double seconds) noexcept nogil:
    """The histogram bucket of a duration: 0 under 1 µs, k for [2**(k-1), 2**k) µs."""
    cdef double us = seconds * 1e6
    cdef int k = 0
    while us >= 1.0 and k < STATS_BUCKETS - 1:
        us *= 0.5
        k += 1
    return k


def step_bucket(double seconds) -> int:
    """The statistics histogram's bucket of a step that took ``seconds``: 0 under 1 µs, k for
    [2**(k-1), 2**k) µs, the last one for anything longer (what :class:`StepServer` counts
    its steps into; the worker's Python path counts its own through this).

    Example:
        >>> [step_bucket(s) for s in (0.5e-6, 1e-6, 3e-6, 1e3)]
        [0, 1, 2, 23]
    """
    return _bucket(seconds)


cdef extern from "fv_parent_watch.h" nogil:
    int fv_start_parent_watch(long caller, int by_parent, double interval_s, double grace_s, int exit_code)


def watch_parent(long caller_pid, bint by_parent, double interval_s, double grace_s, int exit_code=70):
    """Start this worker process's watchdog (``fv_parent_watch.h``): once the caller
    ``caller_pid`` has been gone for ``grace_s`` seconds (checked every ``interval_s``), the
    process ends with ``exit_code``, even while an env's step never returns. ``by_parent``:
    the caller is this process's parent (fork, spawn). Returns whether it runs (False where
    threads cannot start, or on Windows)."""
    if interval_s <= 0 or grace_s < 0:
        raise ValueError(f"interval_s must be > 0 and grace_s >= 0, got {interval_s} and {grace_s}")
    return fv_start_parent_watch(caller_pid, by_parent, interval_s, grace_s, exit_code) == 0


cdef class StepServer:
    """Serves one worker's commands (see the module docstring).

    Args:
        ctrl: the control block (uint32 ``[workers + 1, ROW_WORDS]``, C-contiguous).
        worker: this worker's index.
        loop: the worker's ``EnvLoop``.
        action_codes: the worker's row of the action-dtype codes (uint32, one per leaf).
        action_view: ``action_view(code)``: the worker's rows of the single action slab seen
            as the dtype ``code`` names; None when the actions are not one slab (every
            step then goes to Python).
        spin_s / max_spin_s: the shortest and the longest spin before a wait blocks.
        other_cpu_spin_s: the longest spin of a worker that waits on another CPU than the
            caller's, while the caller keeps at most one core busy between steps.
        think_window_s: the longest time between steps the caller may spend for the worker
            to spin for the next command; a caller that spends longer (see the shared word
            CALLER_THINK_US) gets the cores while it computes.
        on_caller_busy: called with True when the caller starts spending longer than that,
            with False when it stops (the worker's CPU affinity follows it); None: nothing.
    """
    cdef cnp.ndarray ctrl_arr, codes_arr
    cdef uint32_t *ctrl
    cdef Py_ssize_t worker, workers
    cdef object loop, action_view, view, on_caller_busy
    cdef bint caller_busy
    cdef uint32_t view_code
    cdef bint copy_actions
    cdef double spin_s, max_spin_s, other_cpu_spin_s, think_window_s
    cdef readonly uint32_t seq  # the last command taken
    cdef readonly bint stepping  # True while (or after) the env loop of a step it runs raises
    cdef readonly double gap  # how soon the next command tends to come after one is done
    cdef readonly double spin  # how long the last wait for a command spun before blocking
    cdef cnp.ndarray stats_arr, histogram_arr
    cdef uint64_t *stats  # this worker's row of the statistics region (NULL: not counting)
    cdef uint64_t *histogram

    def __init__(self, cnp.ndarray ctrl not None, Py_ssize_t worker, object loop not None,
                 cnp.ndarray action_codes not None, object action_view, double spin_s, double max_spin_s,
                 double think_window_s, object on_caller_busy=None, double other_cpu_spin_s=0.0):
        self.ctrl = handoff.worker_words(ctrl, worker, &self.workers)
        if (cnp.PyArray_TYPE(action_codes) != cnp.NPY_UINT32 or cnp.PyArray_NDIM(action_codes) != 1
                or cnp.PyArray_DIMS(action_codes)[0] < 1 or not cnp.PyArray_IS_C_CONTIGUOUS(action_codes)):
            raise ValueError("action_codes must be a contiguous 1-d uint32 array of one code per action leaf")
        self.ctrl_arr = ctrl  # (keeps the block mapped)
        self.stats = NULL
        self.histogram = NULL
        self.codes_arr = action_codes
        self.worker = worker
        self.loop = loop
        self.action_view = action_view
        self.view = None
        self.spin_s = spin_s
        self.max_spin_s = max_spin_s
        self.think_window_s = think_window_s
        self.other_cpu_spin_s = max(other_cpu_spin_s, max_spin_s)
        self.on_caller_busy = on_caller_busy
        self.caller_busy = False
        self.gap = spin_s
        self.seq = 0

    def count_into(self, cnp.ndarray row not None, cnp.ndarray histogram not None):
        """Count the plain steps into ``row`` (this worker's row of the statistics region,
        see ``fastvec.vector._block.stats``: commands, their env time, the waits for commands, in
        ns) and ``histogram`` (the commands by env time); both contiguous uint64."""
        for arr, name, size in ((row, "row", WORKER_WAIT_NS + 1), (histogram, "histogram", STATS_BUCKETS)):
            if (cnp.PyArray_TYPE(arr) != cnp.NPY_UINT64 or cnp.PyArray_NDIM(arr) != 1
                    or cnp.PyArray_DIMS(arr)[0] < size or not cnp.PyArray_IS_C_CONTIGUOUS(arr)
                    or not cnp.PyArray_ISWRITEABLE(arr)):
                raise ValueError(f"{name} must be a writeable contiguous 1-d uint64 array of at least {size} words")
        self.stats_arr, self.histogram_arr = row, histogram
        self.stats = <uint64_t *>cnp.PyArray_DATA(row)
        self.histogram = <uint64_t *>cnp.PyArray_DATA(histogram)

    def serve(self, double timeout_s):
        """Wait for commands and run the plain steps, until one for Python comes.

        Returns ``(seq, command, stepped)``: ``stepped`` when the command is a plain step
        whose envs have run but left something for the pipe (Python finishes it), or None
        when ``timeout_s`` passed with no command (the worker checks that its parent lives).
        An env's exception propagates, with :attr:`stepping` True.
        """
        cdef double start, stepped_at, took
        cdef bint got, busy
        cdef uint32_t command, code
        cdef int status
        self.stepping = False
        while True:
            # The spin: fastvec.vector._wait._worker_spin. (The caller measures its own time
            # between steps: a gap measured here would include the wake-ups, and blocking
            # would then feed itself.)
            busy = caller_computes(handoff.caller_think(self.ctrl, self.workers), self.think_window_s)
            if busy != self.caller_busy:
                self.caller_busy = busy
                if self.on_caller_busy is not None:
                    self.on_caller_busy(busy)
            if not busy:
                self.spin = command_spin(self.gap, self.spin_s, self.max_spin_s, self.other_cpu_spin_s,
                                         self.think_window_s, handoff.current_cpu(),
                                         handoff.caller_cpu(self.ctrl, self.workers),
                                         handoff.caller_gap(self.ctrl, self.workers))
            else:
                self.spin = 0.0
            start = handoff.now()
            with nogil:
                got = handoff.await_command(self.ctrl, self.worker, self.seq, self.spin, start + timeout_s)
            if not got:
                if self.stats != NULL:
                    self.stats[<int>WORKER_WAIT_NS] += <uint64_t>((handoff.now() - start) * 1e9)
                return None
            self.seq += 1
            stepped_at = handoff.now()
            if self.stats != NULL:
                self.stats[<int>WORKER_WAIT_NS] += <uint64_t>((stepped_at - start) * 1e9)
            self.gap = next_gap(self.gap, stepped_at - start, self.other_cpu_spin_s)
            command = handoff.command_word(self.ctrl, self.worker)
            if command != STEP or self.action_view is None:
                return self.seq, command, False
            code = (<uint32_t *>cnp.PyArray_DATA(self.codes_arr))[0]
            if self.view is None or code != self.view_code:
                self.view = self.action_view(code)
                self.view_code = code
                self.copy_actions = cnp.PyArray_NDIM(<cnp.ndarray>self.view) > 1
            self.stepping = True
            # As Worker._read_actions hands them out: one number per env is a view (indexing
            # it gives a NumPy scalar, a copy); rows are copied, since the caller may
            # overwrite the slab while an env still holds its action.
            self.loop.step(cnp.PyArray_NewCopy(<cnp.ndarray>self.view, cnp.NPY_CORDER) if self.copy_actions
                           else self.view)
            self.stepping = False
            if self.stats != NULL:
                took = handoff.now() - stepped_at
                self.stats[<int>WORKER_COMMANDS] += 1
                self.stats[<int>WORKER_STEP_NS] += <uint64_t>(took * 1e9)
                self.histogram[_bucket(took)] += 1
            status = self.loop.quiet_status()
            if status < 0:
                return self.seq, command, True
            handoff.finish(self.ctrl, self.worker, self.workers, self.seq, <uint32_t>status)
