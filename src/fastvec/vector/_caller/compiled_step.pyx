# cython: language_level=3, boundscheck=False, wraparound=False
"""Caller side: FastVectorEnv.step's common case in one compiled call.

A step of ``FastVectorEnv`` is, in Python, some twenty calls between ``step`` and the
results: checks, the actions into the block, the commands, the caller's own share, the
wait, the infos, the copies. Each costs little, but after a long env step they run from
cold caches, and with ``step_in_caller=True`` every one of them is on the critical path
of the vector step (measured: ``docs/benchmarks.md``). :class:`StepDriver`
does the same work in one call when the step is the common one:

- the actions are one ndarray that goes into the single action slab as it is, in the
  dtype every worker already reads (``Staging.write_actions``' first case);
- every env steps (``batch_size == num_envs``), no ``send``/``recv`` is in flight,
  autoreset is not disabled and ``step_async``/``step_wait`` are FastVectorEnv's own (it
  builds no driver otherwise: a subclass's ``step_async`` must see every step).

A worker that finishes shortly after the caller's own share is spun for here, without
the GIL, for as long as ``WorkerPool.wait`` would spin for it (``tail_spin_s``). Anything
else (another dtype, actions that need converting, a worker still busy after that, or
with something on its pipe) goes through the same Python code as before:
:meth:`StepDriver.step` returns False before it has sent anything, or hands the wait to
``WorkerPool.wait``, so that the two paths cannot disagree on what a step does.
As in ``step_async`` + ``step_wait``, the step is pending until the wait is over (an
interrupted wait can be finished with ``step_wait``), and the infos are built after.
"""
cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t, uint32_t

from fastvec.vector._block cimport handoff
from fastvec.vector._block.protocol cimport INFOS, STEP

import time

from fastvec.vector._block.protocol import QUIET_BITS

cnp.import_array()

cdef int64_t _QUIET_BITS = QUIET_BITS


cdef class StepDriver:
    """The compiled step of one FastVectorEnv (see the module docstring).

    Args:
        pool: its ``WorkerPool`` (commands, the caller's own share, the wait's slow path).
        staging: its ``Staging`` (the slabs, the infos, the observations).
    """
    cdef object pool, staging, local, clock, build_infos
    cdef cnp.ndarray ctrl, remote_mask, act_slab, act_dtypes, rewards, terms, truncs, all_rows
    cdef cnp.ndarray obs_slab  # the single observation slab, when results copy it (else None)
    cdef tuple act_shape, all_workers
    cdef Py_ssize_t num_envs, local_stop
    cdef list replies  # the last step's pipe replies (None: none), until results()
    cdef bint infos_seen  # whether some env of the last step left info values in the block
    cdef readonly bint pending  # a step is out: commands sent, the wait for them not over
    cdef object __weakref__  # (the pool holds it weakly, to release it at shutdown)

    def __init__(self, object pool not None, object staging not None):
        if staging.action_slab is None:
            raise ValueError("the compiled step needs a single, fixed-size action leaf")
        self.pool = pool
        self.staging = staging
        self.ctrl = pool.ctrl
        self.remote_mask = pool.remote_mask
        self.act_slab = staging.action_slab
        self.act_shape = tuple(staging.action_shape)
        self.act_dtypes = staging.action_dtypes
        self.rewards = staging.rewards
        self.terms = staging.terminations
        self.truncs = staging.truncations
        self.all_rows = staging.all_env_rows
        self.build_infos = staging.infos.build
        # (Staging.observations' common case, taken here without its Python call)
        self.obs_slab = staging.observation_slab if staging.copy else None
        self.num_envs = staging.num_envs
        self.local = pool.local  # the caller's own share (a CallerShare), or None
        self.local_stop = pool.stops[0]
        self.all_workers = tuple(pool.all_workers)
        self.clock = time.perf_counter
        if (cnp.PyArray_TYPE(self.act_dtypes) != cnp.NPY_UINT32 or cnp.PyArray_NDIM(self.act_dtypes) != 2
                or not cnp.PyArray_IS_C_CONTIGUOUS(self.act_dtypes)):
            raise ValueError("action_dtypes must be a C-contiguous uint32 [workers, leaves] array")

    def release(self):
        """Drop every view of the shared block (the vector env is closed); :meth:`step` then
        returns False, and the general path raises what a closed env raises."""
        self.ctrl = None
        self.act_slab = self.act_dtypes = self.rewards = self.terms = self.truncs = self.obs_slab = None
        self.local = self.build_infos = None  # (the info assembler holds views of the block)

    def step(self, object actions):
        """Step every env with ``actions`` and wait until all have: True. False, having sent
        nothing, when this is not the common case (see the module docstring): the caller
        then takes the general path. :meth:`results` then returns what ``step`` returns.
        :attr:`pending` is True from the commands' hand-off until the wait is over, also
        when the wait is interrupted (the step is then finished by ``step_wait``)."""
        cdef Py_ssize_t workers, w
        cdef cnp.ndarray ctrl_arr = self.ctrl  # (holds the block while the caller's envs run)
        cdef uint32_t *ctrl
        cdef const uint8_t *remote
        cdef const uint32_t *codes
        cdef Py_ssize_t code_stride
        cdef int code
        cdef int64_t bits
        cdef double tail
        cdef tuple local = None
        cdef bint spun = False
        # (the vector env calls this only with no step out: one this driver sent and left
        # pending was finished since, by step_wait)
        self.pending = False
        if ctrl_arr is None:
            return False
        ctrl = handoff.ctrl_words(ctrl_arr, &workers)
        remote = handoff.mask_bytes(self.remote_mask, workers, "remote_mask")
        code = handoff.action_rows(actions, self.act_slab, 0, self.num_envs, self.act_shape)
        if code == 0:
            return False
        # Every worker must already read the action rows in this dtype (else the general
        # path names it to them).
        codes = <const uint32_t *>cnp.PyArray_DATA(self.act_dtypes)
        code_stride = cnp.PyArray_DIMS(self.act_dtypes)[1]
        for w in range(workers):
            if codes[w * code_stride] != <uint32_t>code:
                return False
        pool = self.pool
        parked = pool.parked_step_runtimes()
        pool.step_started(self.clock())
        started = self.clock()
        # (as in WorkerPool.start_steps: what an interrupted and abandoned command left goes)
        pool.forget_abandoned(self.all_workers)
        if parked is not None:
            # The trainer's idle OpenMP threads give up their cores before the workers are
            # woken: the hand-off and the wait's first interval run parked (WorkerPool).
            self.pending = True
            pool.start_parked_step(self.remote_mask, parked)
        else:
            handoff.start_commands(ctrl, remote, workers, STEP)
            self.pending = True
        if self.local is not None:
            # The caller's own share, with its rows of ``actions`` (SyncVectorEnv's views); its
            # outcome stays in the share, so that a wait interrupted from here on, and finished
            # by step_wait, still has it. A failure closes the vector env and raises (still
            # pending, as the general path leaves it).
            local = self.local.step_now(actions[:self.local_stop])
            if self.ctrl is None:  # the caller's envs closed the vector env
                self.pending = False
                return False
        bits = handoff.done_status(ctrl, remote, workers)
        if bits < 0 and local is not None:
            # A worker is still busy, and the caller's core is free: spin for it here, as
            # WorkerPool.wait would (for up to its tail spin), so that no Python runs
            # between the last worker's answer and the results.
            tail = pool.tail_spin_s()
            with nogil:
                bits = handoff.spin_done_status(ctrl, remote, workers, tail)
            spun = True
        if bits >= 0 and not (bits & ~_QUIET_BITS) and (local is None or local[1] is None):
            # every worker is done and nothing is on a pipe: the common case
            pool.record_command_time(started)
            if self.local is not None:
                self.local.forget()
            self.replies = None
            self.infos_seen = (bits & (1 << INFOS)) != 0 or (local is not None and local[0] == INFOS)
        else:  # a worker to wait for, or something to read: WorkerPool.wait's general path
            self.replies, self.infos_seen = pool.wait(self.remote_mask, None, "step_wait", started, spun)
        self.pending = False
        return True

    def results(self):
        """The step's (obs, rewards, terminations, truncations, infos), after :meth:`step`
        returned True (an info that SyncVectorEnv could not batch raises its error here)."""
        replies, self.replies = self.replies, None
        if replies:
            infos = self.staging.take_replies(replies, self.all_rows, self.infos_seen)
        elif self.infos_seen:  # (take_replies with nothing to take, without its Python call)
            infos = self.build_infos(self.all_rows, self.num_envs)
        else:
            infos = {}
        obs = self.staging.observations() if self.obs_slab is None else cnp.PyArray_NewCopy(self.obs_slab,
                                                                                             cnp.NPY_CORDER)
        return (obs, cnp.PyArray_NewCopy(self.rewards, cnp.NPY_CORDER),
                cnp.PyArray_NewCopy(self.terms, cnp.NPY_CORDER), cnp.PyArray_NewCopy(self.truncs, cnp.NPY_CORDER),
                infos)
