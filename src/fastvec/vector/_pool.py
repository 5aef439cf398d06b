"""The worker processes of a FastVectorEnv and the hand-offs with them.

:class:`WorkerPool` starts the workers, runs the handshake (the envs' spaces, then the
shared block), hands out commands, waits for them (:mod:`fastvec.vector._sync`), reads
what each worker left beside its results, and turns every fault into an exception in the
caller: an env's own exception re-raised with its type, a dead worker as
:class:`~fastvec.errors.WorkerDiedError`. With ``step_in_caller=True`` the first worker's
share runs in the calling process, through the same :class:`_Worker` code.
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import time
import weakref
from typing import Any, Callable, Sequence

import numpy as np
from gymnasium import Env, logger
from gymnasium.vector.utils import CloudpickleWrapper, clear_mpi_env_vars

from fastvec.errors import RemoteTraceback, WorkerDiedError, WorkerError, annotate
from fastvec.spaces import Layout
from fastvec.vector import _protocol, _sync
from fastvec.vector._protocol import LIVENESS_INTERVAL, QUIET_BITS, RECOVERABLE, Command, Status
from fastvec.vector._advice import warn_slow_settings_once
from fastvec.vector._openmp import OpenMPRelease
from fastvec.vector._shared_buffer import Section, SharedBuffer
from fastvec.vector._worker import THINK_WINDOW_S, _Worker, worker_main

# Module aliases of the enum members the per-step path reads: on Python 3.11 every
# ``SomeEnum.MEMBER`` lookup costs ~0.2 µs.
_STEP, _STEP_PIPE, _PIPE = Command.STEP, Command.STEP_PIPE, Command.PIPE
_OK, _MESSAGE, _CALL_ERROR, _INFOS = Status.OK, Status.MESSAGE, Status.CALL_ERROR, Status.INFOS
_INFOS_BIT = 1 << Status.INFOS
# The longest the caller spins (yielding) for the last worker before it blocks (see wait).
MAX_TAIL_SPIN_S = 1e-3
# A caller back within this time of a step's results ran no OpenMP parallel region since the
# last release worth a C call per step (a tight stepping loop): no release then.
MIN_THINK_FOR_RELEASE_S = 30e-6
MAX_THINK_S = 0.01
# Commands shorter than this on average are waited for by spinning (yielding) from the start.
SHORT_WAIT_S = 200e-6


def usable_cpus() -> set:
    """The CPUs this process may run on."""
    try:
        return os.sched_getaffinity(0)
    except AttributeError:  # pragma: no cover - macOS, Windows
        return set(range(os.cpu_count() or 1))


class WorkerPool:
    """``num_workers`` workers stepping contiguous, even shares of the envs ``env_fns``.

    Args:
        owner: the vector env; its garbage collection (or the interpreter's exit) ends
            the workers.
        env_fns, num_workers, autoreset_mode, step_in_caller, context, daemon,
        pin_workers, release_openmp_threads: as FastVectorEnv takes them.
        worker_spin_s / parent_spin_s: the shortest spin before a waiting worker /
            the caller blocks.

    The pool is closed (:attr:`closed`) by :meth:`shutdown` and by every fault it raises.
    """

    def __init__(self, owner, env_fns: Sequence[Callable[[], Env]], num_workers: int, *, autoreset_mode,
                 step_in_caller: bool, context: str | None, daemon: bool, worker_spin_s: float,
                 parent_spin_s: float, pin_workers: bool | None, release_openmp_threads: bool = True):
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
        self._parent_spin_s = parent_spin_s
        self._wait_mean = parent_spin_s  # how long commands took, a running mean (see _wait_until_done)
        self._release_openmp = OpenMPRelease() if release_openmp_threads else None
        # Checked for settings bound to be slow once the caller is first seen busy (_advice)
        self._settings = {"pin_workers": pin_workers, "release_openmp_threads": release_openmp_threads}
        # The caller's time between a step's results and its next step while it keeps more
        # than one core busy, a running mean published to the workers (see step_started);
        # _last_done is None until a first step has ended.
        self._think_mean = 0.0
        self._last_done: float | None = None
        self._last_done_cpu = 0.0
        self.ctrl: np.ndarray | None = None
        #: weak references to what else holds views of the shared block, each released
        #: (``release()``) at shutdown (weak: the holders refer to the pool, and a cycle would
        #: keep the pool's processes and pipes until the next garbage collection)
        self.views: list[weakref.ref] = []
        self.local: _Worker | None = None  # the caller's own share, with step_in_caller
        self._local_envs: list = []
        self._local_job = None  # (phase, method, args) the caller runs at the next wait
        self._local_step_job = None  # the step's local job, built once
        #: what the caller's own share of the pending command gave ((status, reply), or the
        #: _RecoverableError it raised), kept until the wait for the workers is over
        self.local_outcome = None
        self._received: dict = {}  # worker -> the message read_statuses took off its pipe
        self._processes: list = []
        self._pipes: list = []
        self._buffers: list = [None]
        # Ends the workers when the vector env is garbage collected or the interpreter exits.
        self._finalizer = weakref.finalize(owner, _finalize, self._processes, self._pipes, self._buffers,
                                           self._local_envs)
        try:
            self._start(multiprocessing.get_context(context), daemon, worker_spin_s, pin_workers)
        except BaseException:
            self.shutdown(terminate=True)
            raise

    # -- construction ---------------------------------------------------------------------
    def _start(self, ctx, daemon: bool, spin_s: float, pin_workers: bool | None) -> None:
        parent_pid = os.getpid()
        cpus = self._worker_cpus(pin_workers)
        with clear_mpi_env_vars():
            for w in self.all_workers:
                if w == 0 and self.step_in_caller:
                    self._pipes.append(None)
                    self._processes.append(None)
                    continue
                parent_pipe, child_pipe = ctx.Pipe()
                fns = [CloudpickleWrapper(fn) for fn in self._env_fns[self.starts[w]:self.stops[w]]]
                process = ctx.Process(
                    target=worker_main,
                    name=f"Worker<FastVectorEnv>-{w}",
                    args=(w, fns, self.starts[w], child_pipe, parent_pipe, parent_pid,
                          self._autoreset_mode, spin_s, cpus[w], pin_workers is None),
                    daemon=daemon,
                )
                self._pipes.append(parent_pipe)
                self._processes.append(process)
                try:
                    process.start()
                except (pickle.PicklingError, TypeError, AttributeError) as exc:
                    raise TypeError(
                        f"could not send the env constructors of envs {self.env_range(w)} "
                        f"to a worker process started with {ctx.get_start_method()!r}: {exc}. "
                        "Constructors must be picklable (cloudpickle handles lambdas and closures) "
                        "unless the start method is 'fork'."
                    ) from exc
                finally:
                    child_pipe.close()

    def _worker_cpus(self, pin: bool | None) -> list:
        """The CPU each worker is pinned to (None: not pinned), see FastVectorEnv's ``pin_workers``
        (with None, the worker leaves its CPU while the caller keeps more than one core busy)."""
        cpus = sorted(usable_cpus())
        processes = self.num_workers + (0 if self.step_in_caller else 1)
        if pin is None:
            pin = processes > len(cpus)
        return [cpus[w % len(cpus)] if pin and cpus else None for w in self.all_workers]

    def hellos(self) -> list[tuple]:
        """Every worker's ("spaces", [(obs space, action space) per env], metadata, render
        mode), in worker order; builds the caller's own share of the envs first, if any."""
        hellos = []
        if self.step_in_caller:
            for k, env_fn in enumerate(self._env_fns[self.starts[0]:self.stops[0]]):
                try:
                    self._local_envs.append(env_fn())
                except BaseException as exc:
                    annotate(exc, k, f"raised by env {k}'s constructor in the calling process.")
                    raise
            first = self._local_envs[0]
            hellos.append(("spaces", [(e.observation_space, e.action_space) for e in self._local_envs],
                           dict(first.metadata), first.render_mode))
        for w in self.remote_workers:
            message = self.recv(w)
            if message[0] == "error":
                self.raise_remote(w, message)
            hellos.append(message)
        return hellos

    def attach(self, sections: list[Section], size: int, obs_layout: Layout | None, act_layout: Layout) -> SharedBuffer:
        """Create the shared block, hand it to every worker, and return it once they have mapped it."""
        buffer = self._buffers[0] = SharedBuffer(sections, size)
        for w in self.remote_workers:
            _protocol.send(self._pipes[w], ("attach", sections, size, obs_layout, act_layout))
            buffer.send(self._pipes[w], self._processes[w].pid)
        for w in self.remote_workers:
            message = self.recv(w)
            if message[0] == "error":
                self.raise_remote(w, message)
        buffer.release_fd()  # every worker has mapped it: from now on only mappings keep it
        self.ctrl = buffer["ctrl"]
        if self.step_in_caller:
            self.local = _Worker(0, self._local_envs, 0, self._autoreset_mode, buffer, obs_layout, act_layout)
            self._local_step_job = ("step", self.local.step, ())
        return buffer

    @property
    def processes(self) -> list:
        """The worker processes (the caller's own share, if any, has none)."""
        return [p for p in self._processes if p is not None]

    def env_range(self, w: int) -> str:
        return f"{self.starts[w]}..{self.stops[w] - 1}"

    # -- commands ---------------------------------------------------------------------------
    def dispatch(self, w: int, name: str, payload: tuple) -> None:
        """Hand worker ``w`` a pipe command (the caller's own share runs at the next wait)."""
        self.forget_abandoned((w,))
        if w == 0 and self.local is not None:
            method = {"reset": self.local.reset, "call": self.local.call, "setattr": self.local.set_attr}[name]
            self._local_job = (name, method, payload)
            return
        _protocol.send(self._pipes[w], (name, payload))
        _sync.send_command(self.ctrl, w, _PIPE)

    def forget_abandoned(self, workers) -> None:
        """Drop what a wait that was interrupted and then given up kept for ``workers``' last
        command (the caller's own share's outcome, messages read off their pipes): a new
        command to them is about to start."""
        self.local_outcome = None
        for w in workers:
            self._received.pop(w, None)

    def start_steps(self, workers, per_env: list | None, env_ids=None, direct: np.ndarray | None = None) -> None:
        """Tell ``workers`` to step: the actions are in the shared slabs (``per_env`` None)
        or, one per env, in ``per_env`` for the pipes (row k for env ``env_ids[k]``;
        default: env k). The caller's own share, if any, runs at the next wait, with its
        rows of ``direct`` (every env's actions, as they went into the slabs) when given."""
        ctrl = self.ctrl
        self.forget_abandoned(workers)
        self.step_started(time.perf_counter())
        if per_env is None:
            for w in workers:
                if w == 0 and self.local is not None:
                    self._local_job = (self._local_step_job if direct is None
                                       else ("step", self.local.step, (direct[: self.stops[0]],)))
                else:
                    _sync.send_command(ctrl, w, _STEP)
            return
        position = None if env_ids is None else {e: k for k, e in enumerate(np.asarray(env_ids).tolist())}
        for w in workers:
            if position is None:
                chunk = per_env[self.starts[w]:self.stops[w]]
            else:
                chunk = [per_env[position[e]] for e in range(self.starts[w], self.stops[w])]
            if w == 0 and self.local is not None:
                self._local_job = ("step", self.local.step, (chunk,))
            else:
                _protocol.send(self._pipes[w], chunk)
                _sync.send_command(ctrl, w, _STEP_PIPE)

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
        share itself and leaves its outcome in :attr:`local_outcome`.)
        """
        if started is None:
            started = time.perf_counter()
        deadline = None if timeout is None else started + timeout
        if self._local_job is not None:
            try:
                self.local_outcome = self._run_local_job()
            except _RecoverableError as exc:
                self.local_outcome = exc  # raised once the workers have answered too
        # (the step's mask, remote_mask, never holds the caller's own worker 0)
        if self.local is not None and pending is not self.remote_mask and pending[0]:
            pending = pending.copy()
            pending[0] = 0
        bits = _sync.done_status_bits(self.ctrl, pending)
        if bits < 0:  # (else all were done already: the caller's own share took longest)
            self._wait_until_done(pending, deadline, timeout, caller, spun)
            bits = _sync.status_bits(self.ctrl, pending)
        self.record_command_time(started)
        # The caller's own share's outcome is kept until the workers are done, so that a wait
        # interrupted there (Ctrl-C, a timeout) and resumed does not lose it.
        outcome, self.local_outcome = self.local_outcome, None
        replies: list = []
        call_errors: list = []
        infos_seen = False
        if isinstance(outcome, _RecoverableError):
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
        self._last_done = now = time.perf_counter()
        self._last_done_cpu = time.process_time()
        self._wait_mean += 0.125 * (min(now - started, 4 * MAX_TAIL_SPIN_S) - self._wait_mean)

    def step_started(self, now: float) -> None:
        """A step's commands are about to go out at ``now``. Publish how long the caller spends
        between steps keeping more than one core busy, so that workers waiting for the next
        step spin only while that is short (StepServer.serve); then hand back the idle
        threads of the caller's OpenMP runtimes (:mod:`fastvec.vector._openmp`), which
        would otherwise spin on the cores the workers are about to need.

        Only time on more than ~1.5 cores counts: a caller computing on one thread (a small
        policy's forward pass) leaves a core free, and a worker spinning there costs it
        nothing while sparing a wake-up. The release comes before the hand-off because an
        OpenMP thread that has to share a core with a stepping worker can take milliseconds
        to leave, and the caller waits for it (``docs/vector.md``)."""
        wall = None if self._last_done is None else now - self._last_done
        if wall is not None:
            busy_cores = (time.process_time() - self._last_done_cpu) / wall if wall > 0 else 0.0
            # (capped: one long pause, an update between rollouts, counts as long, not as forever)
            think = min(wall, MAX_THINK_S) if busy_cores > 1.5 else 0.0
            self._think_mean += 0.25 * (think - self._think_mean)
            _sync.publish_caller_think(self.ctrl, self._think_mean)
            if self._settings is not None and self._think_mean >= THINK_WINDOW_S:
                warn_slow_settings_once(**self._settings)
                self._settings = None
        if self._release_openmp is not None and (wall is None or wall >= MIN_THINK_FOR_RELEASE_S):
            self._release_openmp()

    def tail_spin_s(self) -> float:
        """How long the caller spins for the last workers once a core has come free (the
        caller's own share done, or a first worker), before it blocks: about half as long
        as recent commands took, see :meth:`_wait_until_done`."""
        return min(max(self._parent_spin_s, 0.5 * self._wait_mean), MAX_TAIL_SPIN_S)

    def _wait_until_done(self, pending: np.ndarray, deadline: float | None, timeout: float | None,
                         caller: str, spun: bool = False) -> None:
        """Wait until every worker in ``pending`` has finished (see :meth:`wait`)."""
        # How the caller waits. Until a first worker is done every core is busy with one, so
        # it blocks after a short spin. From then on a core is free (that worker's, or the
        # caller's own once it has stepped its share itself), so it spins, yielding, for
        # about half as long as recent commands took (the caller's own share included): the
        # last answer is then seen at once instead of through a wake-up from a blocked wait,
        # which costs tens of microseconds on a virtual machine, a sizeable part of a step of
        # a few hundred. (A worker that finishes its even share 20-40 µs after the caller's,
        # one step in ten with MuJoCo envs, is still waited for by spinning.)
        tail = 0.0 if spun else self.tail_spin_s()
        spin = tail if self.local is not None and not spun else self._parent_spin_s
        if not spun and self._wait_mean < SHORT_WAIT_S:
            # Steps this short (CartPole-like envs) are over before a blocked caller could
            # be woken: spin (yielding the core) through them.
            spin = max(spin, min(1.5 * self._wait_mean, SHORT_WAIT_S))
        while True:
            chunk = LIVENESS_INTERVAL
            if deadline is not None:
                chunk = max(0.0, min(chunk, deadline - time.perf_counter()))
            busy = _sync.wait_all_done(self.ctrl, pending, spin, chunk, tail)
            if busy < 0:
                return
            for w in np.flatnonzero(pending):
                if not _sync.is_done(self.ctrl, w):
                    self.check_alive(int(w))
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
            status, reply = self._run_local_job()
            if status == _MESSAGE:
                replies.append((0, reply))
            infos_seen = status == _INFOS
            pending[0] = 0
            got.append(0)
            count += self.stops[0] - self.starts[0]
        while count < want:
            chunk = LIVENESS_INTERVAL if deadline is None else max(0.0, min(LIVENESS_INTERVAL, deadline - time.perf_counter()))
            w = _sync.wait_any_done(self.ctrl, pending, first, self._parent_spin_s, chunk)
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
        remote = [w for w in got if not (w == 0 and self.local is not None)]
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
        received = self._received
        statuses = [(w, _sync.status(self.ctrl, w)) for w in workers]
        for w, status in statuses:  # first every message off its pipe (this may be interrupted) ...
            if status not in (_OK, _INFOS) and w not in received:
                received[w] = self.recv(w)
        for w, status in statuses:  # ... then, with nothing left to block on, sort them
            if status == _OK:  # the common case: nothing on the pipe
                continue
            if status == _INFOS:
                infos_seen = True
                continue
            message = received.pop(w)
            if status == _MESSAGE:
                replies.append((w, message))
            elif status == _CALL_ERROR:
                call_errors.append((w, message))
            else:
                errors.append((w, message))
        if errors:
            self._raise_remote_errors(errors)
        return infos_seen

    def recv(self, w: int, timeout: float | None = None):
        """Receive from worker w's pipe, raising if the worker dies or the timeout passes."""
        pipe = self._pipes[w]
        deadline = None if timeout is None else time.perf_counter() + timeout
        while not pipe.poll(LIVENESS_INTERVAL):
            self.check_alive(w)
            if deadline is not None and time.perf_counter() > deadline:
                raise multiprocessing.TimeoutError(f"worker {w} did not answer within {timeout} s")
        try:
            return pipe.recv()
        except (EOFError, ConnectionResetError, OSError):
            self.check_alive(w, wait=1.0)
            raise WorkerDiedError(f"worker {w} (envs {self.env_range(w)}) closed its pipe unexpectedly", w)

    def is_idle(self, w: int) -> bool:
        """Whether worker ``w`` has finished its last command."""
        return _sync.is_done(self.ctrl, w)

    # -- faults ---------------------------------------------------------------------------------
    def _run_local_job(self) -> tuple[int | None, Any]:
        """Run the caller's own share of the pending command; its (status, reply)."""
        if self._local_job is None:
            return None, None
        phase, method, args = self._local_job
        self._local_job = None
        try:
            return method(*args)
        except Exception as exc:
            if phase in RECOVERABLE:
                annotate(exc, self.local.current_env,
                         f"raised by env {self.local.current_env} in the calling process during {phase}.")
                raise _RecoverableError(exc) from None
            self.fail_local(exc, phase)
        except BaseException as exc:
            self.fail_local(exc, phase)

    def fail_local(self, exc: BaseException, phase: str) -> None:
        """Re-raise ``exc``, raised by the caller's own share during ``phase``, naming its env,
        after closing the pool (what a worker's fatal error does)."""
        env_index = self.local.current_env
        self.shutdown(terminate=True)
        annotate(exc, env_index, f"raised by env {env_index} in the calling process during {phase}; "
                 "the vector env is closed.")
        raise exc

    def check_alive(self, w: int, wait: float = 0.0) -> None:
        """Raise WorkerDiedError (closing the pool) if worker ``w``'s process has ended."""
        process = self._processes[w]
        if process is None:
            return
        if wait:
            process.join(wait)
        code = process.exitcode
        if code is None:
            return
        if code < 0:
            try:
                how = f"was killed by signal {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        self.shutdown(terminate=True)
        raise WorkerDiedError(
            f"FastVectorEnv worker {w} (envs {self.env_range(w)}) {how}; the vector env is closed.", w
        )

    def _raise_remote_errors(self, errors: list) -> None:
        """Log each failed worker's error as AsyncVectorEnv does, then re-raise the last one
        (closing the pool)."""
        for w, report in errors:
            env_index = report[1] if report[1] is not None else self.starts[w]
            logger.error(f"Received the following error from Worker-{env_index} - Shutting it down")
            logger.error(f"{report[5]}")
        logger.error("Raising the last exception back to the main process.")
        self.raise_remote(*errors[-1])

    def raise_remote(self, w: int, report: tuple, close: bool = True) -> None:
        """Re-raise a worker's exception in the caller (closing the pool first, unless ``close=False``)."""
        _, env_index, phase, type_name, text, trace, payload = report
        if close:
            self.shutdown(terminate=True)
        where = f"env {env_index}" if env_index is not None else f"worker {w} (envs {self.env_range(w)})"
        note = f"raised by {where} in FastVectorEnv worker {w} during {phase}" + ("; the vector env is closed." if close else ".")
        exc = None
        if payload is not None:
            try:
                exc = pickle.loads(payload)
            except Exception:
                exc = None
        if not isinstance(exc, BaseException):
            raise WorkerError(f"{type_name}: {text}\n({note})\n\nWorker traceback:\n{trace}", w, env_index)
        annotate(exc, env_index, note)
        raise exc from RemoteTraceback(trace)

    # -- closing --------------------------------------------------------------------------------
    def shutdown(self, terminate: bool = False, timeout: float = 5.0) -> None:
        """End the workers (asked to close, then by force after ``timeout``; at once with
        ``terminate``), close the caller's own envs and drop this process's hold on the block."""
        ctrl = self.ctrl
        if ctrl is not None and not terminate:
            for w, process in enumerate(self._processes):
                if process is not None and process.is_alive() and _sync.is_done(ctrl, w):
                    _sync.send_command(ctrl, w, Command.CLOSE)
        self._local_job = self._local_step_job = self.local_outcome = None
        self._received.clear()
        self.local = None
        self.ctrl = None
        for ref in self.views:
            holder = ref()
            if holder is not None:
                holder.release()
        _finalize(self._processes, self._pipes, self._buffers, self._local_envs, timeout=0.0 if terminate else timeout)
        self._finalizer.detach()
        self.closed = True


def _finalize(processes, pipes, buffers, envs, timeout: float = 0.0) -> None:
    """End the workers (politely for ``timeout`` seconds, then by force) and drop the block.

    Also the garbage-collection / interpreter-exit path, so it holds no reference to the env.
    ``envs``: the envs the caller stepped itself, closed here.
    """
    for env in envs:
        try:
            env.close()
        except Exception:
            pass
    envs.clear()
    started = [p for p in processes if p is not None and p._popen is not None]
    deadline = time.monotonic() + timeout
    for process in started:
        remaining = deadline - time.monotonic()
        if remaining > 0:
            process.join(remaining)
        if process.is_alive():
            process.terminate()
    for process in started:
        process.join(1.0)
        if process.is_alive():
            process.kill()
            process.join(1.0)
    for pipe in pipes:
        if pipe is None:
            continue
        try:
            pipe.close()
        except OSError:
            pass
    for k, buffer in enumerate(buffers):
        if buffer is not None:
            buffer.close()
            buffers[k] = None


class _RecoverableError(Exception):
    """Carries an exception from the caller's own share of a call/set_attr until the workers answer."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error
