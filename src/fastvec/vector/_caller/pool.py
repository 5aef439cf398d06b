"""Caller side: the workers of a FastVectorEnv and the waits for them.

:class:`WorkerPool` holds the workers (a :class:`~fastvec.vector._caller.remote_worker.RemoteWorker`
per process, and with ``step_in_caller=True`` the caller's own share first, a
:class:`~fastvec.vector._caller.caller_share.CallerShare` with the same commands), runs the
handshake (the envs' spaces, then the shared block), hands out commands, waits for them
(:mod:`fastvec.vector._block.handoff`), reads what each worker left beside its results, and raises
every fault in the caller (its own part, :mod:`fastvec.vector._caller.pool_faults`: when a fault
is raised, and how a failed worker is replaced).
"""
from __future__ import annotations

import multiprocessing
import os
import time
import weakref
from typing import Callable, Sequence

import numpy as np
from gymnasium import Env
from gymnasium.vector.utils import clear_mpi_env_vars

from fastvec.errors import WorkerDiedError, annotate
from fastvec.spaces import Layout
from fastvec.vector._block import handoff, protocol
from fastvec.vector._caller.slow_settings import warn_slow_settings_once
from fastvec.vector._caller.caller_share import CallerShare
from fastvec.vector._caller.pool_faults import PoolFaults
from fastvec.vector._block.protocol import CMD_STEP as _STEP
from fastvec.vector._block.protocol import LIVENESS_INTERVAL, QUIET_BITS
from fastvec.vector._block.protocol import STATUS_CALL_ERROR as _CALL_ERROR
from fastvec.vector._block.protocol import STATUS_INFOS as _INFOS
from fastvec.vector._block.protocol import STATUS_MESSAGE as _MESSAGE
from fastvec.vector._block.protocol import STATUS_OK as _OK
from fastvec.host import usable_cpus
from fastvec.vector._caller.remote_worker import RemoteWorker, end_workers
from fastvec.vector._block.restarts import Restarts
from fastvec.vector._block.messages import Attach, ErrorReport, Hello, PipeCommand
from fastvec.vector._block.shared_buffer import Section, SharedBuffer
from fastvec.vector._block.stats import StatsRegion
from fastvec.vector._wait.host_load import HostLoad
from fastvec.vector._wait.openmp import OpenMPIdleThreads
from fastvec.vector._wait.policy import CallerWaits, WaitSettings
from fastvec.vector._worker.process import Worker, hello
from fastvec.vector._caller.worker_faults import RecoverableError, start_method_hint

__all__ = ["WorkerPool"]

_INFOS_BIT = 1 << _INFOS


class WorkerPool(PoolFaults):
    """``num_workers`` workers stepping contiguous, even shares of the envs ``env_fns``.

    Args:
        owner: the vector env; its garbage collection (or the interpreter's exit) ends
            the workers.
        env_fns, num_workers, autoreset_mode, step_in_caller, context, daemon,
        pin_workers, release_openmp_threads, env_failure, max_restarts, step_timeout: as
            FastVectorEnv takes them.
        waits: the wait policy (:class:`fastvec.vector._wait.policy.WaitSettings`).

    The pool is closed (:attr:`closed`) by :meth:`shutdown` and by every fault it raises.
    """

    def __init__(self, owner, env_fns: Sequence[Callable[[], Env]], num_workers: int, *, autoreset_mode,
                 step_in_caller: bool, context: str | None, daemon: bool, waits: WaitSettings,
                 pin_workers: bool | None, release_openmp_threads: bool = True,
                 env_failure: str = "raise", max_restarts: int = 100, step_timeout: float | None = None):
        self.num_envs = len(env_fns)
        self.num_workers = num_workers
        self.step_in_caller = step_in_caller
        self.closed = False
        base, extra = divmod(self.num_envs, num_workers)
        sizes = [base + (w < extra) for w in range(num_workers)]
        self.starts = [sum(sizes[:w]) for w in range(num_workers)]
        self.stops = [s + n for s, n in zip(self.starts, sizes)]
        self.worker_of_env = np.repeat(np.arange(num_workers), sizes)
        self.all_workers = list(range(num_workers))
        self.remote_workers = list(range(1 if step_in_caller else 0, num_workers))
        self.remote_mask = np.zeros(num_workers, dtype=np.uint8)
        self.remote_mask[self.remote_workers] = 1
        self._env_fns = env_fns
        self._autoreset_mode = autoreset_mode
        #: with env_failure="restart": what the restarts leave (else None: a failure raises)
        self.restarts = Restarts(self.num_envs) if env_failure == "restart" else None
        self.max_restarts = max_restarts
        self.step_timeout = step_timeout
        self._step_sent = 0.0  # when the last step went out (all its workers: step_timeout)
        self._sent_at = np.zeros(num_workers)  # when each worker's last step went out (send/recv)
        self._in_step = False  # the command out is a step (a worker failing it can be restarted)
        self._lockstep = False  # ... and waited for whole (its wait may be parked)
        self._parked_this_step = False  # ... and its wait's first interval ran parked already
        #: with env_failure="restart": the reset out, by worker (its payload), so that a worker
        #: whose process ends during it can be started again and sent it again
        self._resets_out: dict[int, tuple] = {}
        self._attach_message: tuple | None = None  # what a restarted worker is sent to map the block
        #: the caller's side of the wait policy: how long its waits spin
        self.waits = CallerWaits(waits)
        #: the caller's idle OpenMP threads, kept off the workers' cores during a step (None:
        #: left alone, as the policy says: see WaitSettings)
        self.openmp = OpenMPIdleThreads(park=waits.park) if waits.openmp else None
        # Checked for settings bound to be slow once the caller is first seen busy (slow_settings)
        self._settings = {"pin_workers": pin_workers, "release_openmp_threads": release_openmp_threads}
        self._next_alive_check = 0.0  # when wait_some next checks that its workers run
        self.ctrl: np.ndarray | None = None
        #: weak references to what else holds views of the shared block, each released
        #: (``release()``) at shutdown (weak: the holders refer to the pool, and a cycle would
        #: keep the pool's processes and pipes until the next garbage collection)
        self.views: list[weakref.ref] = []
        self.stats: StatsRegion | None = None  # (stats=True: the statistics region, once attached)
        #: every worker, by index: the caller's own share (with step_in_caller) and then
        #: a RemoteWorker per process, all taking the same commands
        self.workers: list = []
        self.local: CallerShare | None = None  # the caller's own share, with step_in_caller
        self._remote: list[RemoteWorker] = []  # the worker processes, filled as they start
        self._local_envs: list = []
        self._buffers: list = [None]
        # Ends the workers when the vector env is garbage collected or the interpreter exits.
        self._finalizer = weakref.finalize(owner, end_workers, self._remote, self._buffers, self._local_envs)
        try:
            self._start(multiprocessing.get_context(context), daemon, waits.worker, pin_workers)
        except BaseException:
            self.shutdown(terminate=True)
            raise

    # -- construction and the handshake ------------------------------------------------------
    def _start(self, ctx, daemon: bool, worker_waits, pin_workers: bool | None) -> None:
        cpus = self._worker_cpus(pin_workers)
        # (how a worker is started again, with env_failure="restart")
        self._process_args = (ctx, daemon, worker_waits, cpus, pin_workers is None)
        if self.step_in_caller:
            self.workers.append(None)  # (the caller's own share, once the block exists: attach)
        with clear_mpi_env_vars():
            for w in self.remote_workers:
                self._remote.append(RemoteWorker(
                    ctx, w, self.starts[w], self._env_fns[self.starts[w]:self.stops[w]], daemon=daemon,
                    autoreset_mode=self._autoreset_mode, waits=worker_waits, cpu=cpus[w],
                    follow_caller=pin_workers is None, restart=self._restart_state(w, rebuilt=False)))
                self.workers.append(self._remote[-1])
        # (measured where spins adapt, or where the OpenMP runtimes may be throttled: with
        # wait="block" too, made for hosts shared with other work)
        if self.waits.settings.adaptive or self.openmp is not None:
            self.waits.host = HostLoad(usable_cpus(), self._own_pids)

    def _own_pids(self) -> list[int]:
        """The pids whose CPU time is the vector env's own: the caller's and its workers'."""
        return [os.getpid(), *(worker.pid for worker in self._remote)]

    def _worker_cpus(self, pin: bool | None) -> list:
        """The CPU each worker is pinned to (None: not pinned), see FastVectorEnv's ``pin_workers``
        (with None, the worker leaves its CPU while the caller keeps more than one core busy)."""
        cpus = sorted(usable_cpus())
        processes = self.num_workers + (0 if self.step_in_caller else 1)
        if pin is None:
            pin = processes > len(cpus)
        return [cpus[w % len(cpus)] if pin and cpus else None for w in self.all_workers]

    def hellos(self) -> list[Hello]:
        """Every worker's :class:`~fastvec.vector._block.messages.Hello`, in worker order;
        builds the caller's own share of the envs first, if any."""
        hellos = []
        if self.step_in_caller:
            for k, env_fn in enumerate(self._env_fns[self.starts[0]:self.stops[0]]):
                try:
                    self._local_envs.append(env_fn())
                except BaseException as exc:
                    annotate(exc, k, f"raised by env {k}'s constructor in the calling process.")
                    raise
            hellos.append(hello(self._local_envs))
        for w in self.remote_workers:
            try:
                message = self.recv(w)
            except WorkerDiedError as error:
                hint = start_method_hint(self._process_args[0].get_start_method())
                if hint:
                    error.args = (f"{error.args[0]}{hint}",) + error.args[1:]
                raise
            if isinstance(message, ErrorReport):
                self.raise_remote(w, message)
            hellos.append(message)
        return hellos

    def attach(self, sections: list[Section], size: int, obs_layout: Layout | None, act_layout: Layout,
               stats: bool = False) -> SharedBuffer:
        """Create the shared block, hand it to every worker, and return it once they have mapped it.

        ``stats``: write the statistics region's header (``_stats.StatsRegion.initialize``),
        which tells the workers to count, and keep this process's descriptor of the block
        open, so that ``python -m fastvec.monitor`` finds it in ``/proc/PID/fd``."""
        buffer = self._buffers[0] = SharedBuffer(sections, size)
        if stats:
            self.stats = StatsRegion.initialize(
                buffer["stats"], [stop - start for start, stop in zip(self.starts, self.stops)], os.getpid())
            self.views.append(weakref.ref(self.stats))  # (released at shutdown)
        self._attach_message = Attach(sections, size, obs_layout, act_layout)
        for worker in self._remote:
            protocol.send(worker.pipe, self._attach_message)
            buffer.send(worker.pipe, worker.pid)
        for w in self.remote_workers:
            message = self.recv(w)
            if isinstance(message, ErrorReport):
                self.raise_remote(w, message)
        if self.restarts is None and not stats:
            buffer.release_fd()  # every worker has mapped it: from now on only mappings keep it
        self.ctrl = buffer["ctrl"]
        if self.restarts is not None:
            handoff.publish_restarts_left(self.ctrl, min(self.max_restarts, 2**32 - 1))
        for worker in self._remote:
            worker.ctrl, worker.stats = self.ctrl, self.stats
        if self.restarts is not None:
            self.restarts.stats = self.stats
        if self.step_in_caller:
            self.local = self.workers[0] = CallerShare(
                Worker(0, self._local_envs, 0, self._autoreset_mode, buffer, obs_layout, act_layout), self.fail_local)
        return buffer

    @property
    def processes(self) -> list:
        """The worker processes (the caller's own share, if any, has none)."""
        return [worker.process for worker in self._remote]

    def env_range(self, w: int) -> str:
        return f"{self.starts[w]}..{self.stops[w] - 1}"

    # -- commands ---------------------------------------------------------------------------
    def dispatch(self, w: int, command: PipeCommand | str, payload: tuple) -> None:
        """Hand worker ``w`` a pipe command (a :class:`PipeCommand` or its value; the caller's
        own share runs it at the next wait)."""
        command = PipeCommand(command)
        worker = self.workers[w]
        worker.forget()
        self._in_step = False
        if command is PipeCommand.RESET and self.restarts is not None:
            self._resets_out[w] = payload
        else:
            self._resets_out.clear()
        worker.dispatch(command, payload)

    def forget_abandoned(self, workers) -> None:
        """Drop what a wait that was interrupted and then given up kept for ``workers``' last
        command (the caller's own share's outcome, messages read off their pipes): a new
        command to them is about to start."""
        all_workers = self.workers
        for w in workers:
            all_workers[w].forget()

    def start_steps(self, workers, per_env: list | None, env_ids=None, direct: np.ndarray | None = None,
                    lockstep: bool = False) -> None:
        """Tell ``workers`` to step: the actions are in the shared slabs (``per_env`` None)
        or, one per env, in ``per_env`` for the pipes (row k for env ``env_ids[k]``;
        default: env k). The caller's own share, if any, runs at the next wait, with its
        rows of ``direct`` (every env's actions, as they went into the slabs) when given.
        ``lockstep``: the step is waited for whole (:meth:`wait`), not by ``recv``."""
        self.forget_abandoned(workers)
        self.step_started(time.perf_counter(), workers, lockstep)
        self._sent_at[workers] = self._step_sent
        all_workers = self.workers
        workers = handoff.sleepers_here_last(self.ctrl, list(workers))
        if per_env is None:
            for w in workers:
                all_workers[w].start_step(actions=direct)
            return
        position = None if env_ids is None else {e: k for k, e in enumerate(np.asarray(env_ids).tolist())}
        for w in workers:
            if position is None:
                chunk = per_env[self.starts[w]:self.stops[w]]
            else:
                chunk = [per_env[position[e]] for e in range(self.starts[w], self.stops[w])]
            all_workers[w].start_step(chunk)

    # -- waiting ------------------------------------------------------------------------------
    def wait(self, pending: np.ndarray, timeout: float | None, caller: str,
             started: float | None = None, spun: bool = False) -> tuple[list, bool]:
        """Wait for the workers in ``pending`` (the caller running its own share first).

        Returns ([(worker, reply)] for those that sent one on the pipe, whether some env of
        the command left info values in the block). A worker that failed is reported as
        AsyncVectorEnv reports it (one ``logger.error`` pair per failed worker) and its
        exception re-raised; ``multiprocessing.TimeoutError`` after ``timeout`` seconds
        (the command stays pending: wait again, or close). ``started``: when the command
        was sent (``time.perf_counter()``), if before this call. ``spun``: the caller has
        already spun for the workers as long as this wait would (:meth:`tail_spin_s`), so
        this one blocks after the shortest spin. (The compiled step runs the caller's own
        share itself and leaves its outcome in the share's ``outcome``.)
        """
        if started is None:
            started = time.perf_counter()
        deadline = None if timeout is None else started + timeout
        local = self.local
        if local is not None:
            local.run_pending()  # (a call's error is kept, and raised once the workers have answered too)
            # (the step's mask, remote_mask, never holds the caller's own worker 0)
            if pending is not self.remote_mask and pending[0]:
                pending = pending.copy()
                pending[0] = 0
        bits = handoff.done_status_bits(self.ctrl, pending)
        if bits < 0:  # (else all were done already: the caller's own share took longest)
            self._wait_until_done(pending, deadline, timeout, caller, spun)
            bits = handoff.status_bits(self.ctrl, pending)
        self.record_command_time(started)
        # The caller's own share's outcome is kept until the workers are done, so that a wait
        # interrupted there (Ctrl-C, a timeout) and resumed does not lose it.
        outcome = None if local is None else local.take_outcome()
        replies: list = []
        call_errors: list = []
        infos_seen = False
        if isinstance(outcome, RecoverableError):
            call_errors.append((0, outcome.error))
        elif outcome is not None:
            status, reply = outcome
            if status == _MESSAGE:
                replies.append((0, reply))
            infos_seen = status == _INFOS
        if bits & ~QUIET_BITS:  # something to read: a reply, an error
            workers = self.remote_workers if pending is self.remote_mask else np.flatnonzero(pending).tolist()
            infos_seen = self.read_statuses(workers, replies, call_errors) or infos_seen
        elif bits & _INFOS_BIT:
            infos_seen = True
        if call_errors:
            w, error = call_errors[0]
            if isinstance(error, BaseException):
                raise error
            self.raise_remote(w, error, close=False)
        return replies, infos_seen

    def record_command_time(self, started: float) -> None:
        """Add the command sent at ``started`` to the running mean of how long commands take,
        the caller's own share included: the next wait's spin (see :meth:`_wait_until_done`)."""
        self.waits.record(started)

    def step_started(self, now: float, workers=None, lockstep: bool = True) -> None:
        """A step's commands are about to go out at ``now`` (to ``workers``; default: all;
        with send/recv the others may still have a reset out). Publish how long the caller spends
        between steps keeping more than one core busy, so that workers waiting for the next
        step spin only while that is short (StepServer.serve); then hand back the idle
        threads of the caller's OpenMP runtimes that the step is not parked in
        (:mod:`fastvec.vector._wait.openmp`), which would otherwise spin on the cores the workers
        are about to need.

        What counts as the caller's time between steps is the policy's
        (:meth:`CallerWaits.between_steps`). The release comes before the hand-off because an
        OpenMP thread that has to share a core with a stepping worker can take milliseconds
        to leave, and the caller waits for it (``docs/vector.md``)."""
        self._in_step = True
        self._lockstep = lockstep
        self._parked_this_step = False
        if workers is None or not self._resets_out:
            self._resets_out.clear()
        else:
            for w in workers:
                self._resets_out.pop(w, None)
        self._step_sent = now
        wall = self.waits.between_steps(now)
        if wall is not None:
            handoff.publish_caller_think(self.ctrl, self.waits.published_think(), self.waits.gap_mean)
            if self._settings is not None and self.waits.caller_computes():
                warn_slow_settings_once(**self._settings)
                self._settings = None
        # On a contended host (and always with wait="block", which uses a core only while it
        # has work on it) the runtimes are throttled; on a contended one neither parked (a
        # parked thread queued behind other work holds the step up) nor released (the trainer's
        # next region would start its threads again, each waiting for a core the other work
        # holds: the forward passes between steps took several times as long).
        if self.openmp is not None:
            self.openmp.throttle(self.waits.contended or not self.waits.settings.adaptive)
            if not self.waits.contended:
                if self.waits.release_before_step(wall):
                    self.openmp.release(lockstep)
                else:
                    self.openmp.no_region(lockstep)

    def parked_step_runtimes(self) -> np.ndarray | None:
        """The OpenMP runtimes a lockstep step of the workers alone (no caller's share) should
        be started and waited for parked in (:meth:`start_parked_step`); None: none."""
        if self.openmp is None or self.local is not None or self.waits.contended:
            return None
        return self.openmp.parked_runtimes()

    def start_parked_step(self, mask: np.ndarray, runtimes: np.ndarray) -> None:
        """Hand the workers in ``mask`` a step (the actions are in the slabs) and wait for them,
        both inside the trainer's OpenMP regions ``runtimes`` (``handoff.start_and_wait_parked``),
        for the wait's first liveness interval at most (or until ``step_timeout``); the rest of
        the wait, if any, is :meth:`wait`'s, unparked. Call right after :meth:`step_started`."""
        spin, tail = self.waits.spins(False, False)
        chunk = LIVENESS_INTERVAL
        if self.step_timeout is not None:
            chunk = max(0.0, min(chunk, self._step_sent + self.step_timeout - time.perf_counter()))
        _, exit_s = handoff.start_and_wait_parked(self.ctrl, mask, _STEP, spin, chunk, tail, runtimes,
                                                self.waits.park_spin_s())
        self._parked_this_step = True
        self.openmp.count_parked_step(exit_s)

    def tail_spin_s(self) -> float:
        """How long the caller spins for the last workers once a core has come free, before
        it blocks (:meth:`CallerWaits.tail_spin_s`)."""
        return self.waits.tail_spin_s()

    def _wait_until_done(self, pending: np.ndarray, deadline: float | None, timeout: float | None,
                         caller: str, spun: bool = False) -> None:
        """Wait until every worker in ``pending`` has finished (see :meth:`wait`)."""
        spin, tail = self.waits.spins(self.local is not None, spun)
        # A step's wait runs parked in the trainer's OpenMP runtimes where the policy says so
        # (its first LIVENESS_INTERVAL: a step still out then is late, and the runtimes' idle
        # threads may go to sleep as they do after any region). Only the compiled wait runs
        # in the region: the Python here (a worker restarted, a signal handler) runs outside.
        parked = (self.openmp.parked_runtimes()
                  if self.openmp is not None and self._in_step and self._lockstep and not self._parked_this_step
                  and not self.waits.contended else None)
        step_deadline = (self._step_sent + self.step_timeout
                         if self.step_timeout is not None and self._in_step else None)
        while True:
            chunk = LIVENESS_INTERVAL
            if deadline is not None:
                chunk = max(0.0, min(chunk, deadline - time.perf_counter()))
            if step_deadline is not None:
                chunk = max(0.0, min(chunk, step_deadline - time.perf_counter()))
            if parked is not None:
                busy, exit_s = handoff.wait_all_done_parked(self.ctrl, pending, spin, chunk, tail, parked,
                                                          self.waits.park_spin_s())
                self.openmp.count_parked_step(exit_s)
                parked = None
            else:
                busy = handoff.wait_all_done(self.ctrl, pending, spin, chunk, tail)
            if busy < 0:
                return
            for w in np.flatnonzero(pending):
                if not handoff.is_done(self.ctrl, w):
                    self.check_alive(int(w))
            if step_deadline is not None and time.perf_counter() >= step_deadline:
                for w in np.flatnonzero(pending).tolist():
                    if not handoff.is_done(self.ctrl, w):
                        self._step_timed_out(w)
                continue
            if deadline is not None and time.perf_counter() >= deadline:
                raise multiprocessing.TimeoutError(
                    f"The call to `{caller}` has timed out after {timeout} second(s); it is still pending."
                )

    def wait_some(self, pending: np.ndarray, want: int, first: int, timeout: float | None) -> tuple[list, list, bool]:
        """Wait until workers in ``pending`` with at least ``want`` envs between them are done,
        scanning round-robin from worker ``first`` (so that none starves).

        Returns (the done workers in order, their pipe replies, whether info values came).
        """
        deadline = None if timeout is None else time.perf_counter() + timeout
        pending = pending.copy()
        got: list[int] = []
        replies: list = []
        infos_seen = False
        count = 0
        if self.local is not None and pending[0]:
            # The caller's own share runs now, synchronously: it is the first one ready.
            self.local.run_pending()
            status, reply = self.local.take_outcome() or (None, None)
            if status == _MESSAGE:
                replies.append((0, reply))
            infos_seen = status == _INFOS
            pending[0] = 0
            got.append(0)
            count += self.stops[0] - self.starts[0]
        while count < want:
            now = time.perf_counter()
            if now >= self._next_alive_check:
                # (also while other workers keep answering: a worker that died is seen within
                # about this interval, not only once the others have all gone quiet)
                self._next_alive_check = now + LIVENESS_INTERVAL
                for v in np.flatnonzero(pending).tolist():
                    if not handoff.is_done(self.ctrl, v):
                        self.check_alive(v)
                        if self.step_timeout is not None and now - self._sent_at[v] >= self.step_timeout:
                            self._step_timed_out(v)
            chunk = LIVENESS_INTERVAL if deadline is None else max(0.0, min(LIVENESS_INTERVAL, deadline - now))
            if self.step_timeout is not None:
                chunk = min(chunk, self.step_timeout)
            w = handoff.wait_any_done(self.ctrl, pending, first, self.waits.parent_spin_s, chunk)
            if w < 0:
                for v in np.flatnonzero(pending).tolist():
                    self.check_alive(v)
                if deadline is not None and time.perf_counter() >= deadline:
                    raise multiprocessing.TimeoutError(f"The call to `recv` has timed out after {timeout} second(s).")
                continue
            pending[w] = 0
            first = w + 1
            got.append(w)
            count += self.stops[w] - self.starts[w]
        got.sort()
        remote = [w for w in got if self.workers[w] is not self.local]
        infos_seen = self.read_statuses(remote, replies, []) or infos_seen
        return got, replies, infos_seen

    def read_statuses(self, workers, replies: list, call_errors: list) -> bool:
        """Read what each finished worker left: its pipe reply goes to ``replies``, a
        call/set_attr error to ``call_errors``; fatal errors are raised (all of them logged
        first). Returns whether one left info values in the block. Messages read before an
        interruption (Ctrl-C while waiting for the next pipe) are kept for the wait that
        resumes, which would otherwise wait for them on an empty pipe for ever."""
        errors = []
        infos_seen = False
        all_workers = self.workers
        statuses = [(w, handoff.status(self.ctrl, w)) for w in workers]
        for w, status in statuses:  # first every message off its pipe (this may be interrupted) ...
            if status not in (_OK, _INFOS) and not all_workers[w].has_received():
                try:
                    all_workers[w].received = self.recv(w)
                except WorkerDiedError as exc:
                    if not self._restartable():
                        self.shutdown(terminate=True)
                        raise WorkerDiedError(f"{str(exc).rstrip('.')}; the vector env is closed.", w) from None
                    self.restart_worker(w, str(exc), "")
                    statuses = [(v, handoff.status(self.ctrl, w) if v == w else st) for v, st in statuses]
        for w, status in statuses:  # ... then, with nothing left to block on, sort them
            if status == _OK:  # the common case: nothing on the pipe
                continue
            if status == _INFOS:
                infos_seen = True
                continue
            message = all_workers[w].take_received()
            if status == _MESSAGE:
                replies.append((w, message))
            elif status == _CALL_ERROR:
                call_errors.append((w, message))
            else:
                errors.append((w, message))
        if errors:
            for w in self._raise_remote_errors(errors):  # (returns only if each was restarted)
                status = handoff.status(self.ctrl, w)  # (what its rebuilt envs' SAME_STEP reset left)
                if status == _MESSAGE:
                    replies.append((w, all_workers[w].take_received()))
                infos_seen = infos_seen or status == _INFOS
        return infos_seen

    def recv(self, w: int, timeout: float | None = None):
        """Receive from worker w's pipe, raising if the worker dies or the timeout passes."""
        pipe = self.workers[w].pipe
        deadline = None if timeout is None else time.perf_counter() + timeout
        # (a worker found dead here is not restarted: its pipe is the one being read; the
        # caller of recv restarts it, see read_statuses)
        while not pipe.poll(LIVENESS_INTERVAL):
            self.check_alive(w, restart=False)
            if deadline is not None and time.perf_counter() > deadline:
                raise multiprocessing.TimeoutError(f"worker {w} did not answer within {timeout} s")
        try:
            return self.workers[w].receive()
        except (EOFError, ConnectionResetError, OSError):
            self.check_alive(w, wait=1.0, restart=False)
            raise WorkerDiedError(f"worker {w} (envs {self.env_range(w)}) closed its pipe unexpectedly", w)

    # -- faults ---------------------------------------------------------------------------------
    # -- closing --------------------------------------------------------------------------------
    def shutdown(self, terminate: bool = False, timeout: float = 5.0) -> None:
        """End the workers (asked to close, then by force after ``timeout``; at once with
        ``terminate``), close the caller's own envs and drop this process's hold on the block."""
        if self.openmp is not None:
            self.openmp.close()  # (a throttle's thread, if the host was contended)
        if not terminate:
            for worker in self._remote:
                worker.ask_to_close()
        for worker in self._remote:
            worker.forget()
            worker.ctrl = None
        if self.local is not None:
            self.local.forget()
        self.local = None
        self.workers = []
        self.ctrl = None
        for ref in self.views:
            holder = ref()
            if holder is not None:
                holder.release()
        end_workers(self._remote, self._buffers, self._local_envs, timeout=0.0 if terminate else timeout)
        self._finalizer.detach()
        self.closed = True
