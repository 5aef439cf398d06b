"""FastVectorEnv: Python envs in worker processes over one shared-memory buffer."""
from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import time
import weakref
from copy import deepcopy
from enum import Enum
from typing import Any, Callable, Sequence

import numpy as np
from gymnasium import Env, Space, logger
from gymnasium import spaces
from gymnasium.spaces.utils import is_space_dtype_shape_equiv
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import (
    CloudpickleWrapper,
    batch_differing_spaces,
    batch_space,
    clear_mpi_env_vars,
    concatenate,
    create_empty_array,
    iterate,
)

from fastvec.vector import _sync
from fastvec.errors import (
    AlreadyPendingCallError,
    ClosedEnvironmentError,
    NoAsyncCallError,
    RemoteTraceback,
    WorkerDiedError,
    WorkerError,
)
from fastvec.spaces import Layout
from fastvec.vector import _protocol, _shared_buffer
from fastvec.vector._arguments import seeds_per_env, split_reset_options
from fastvec.vector._infos import InfoAssembler, row_bytes_for
from fastvec.vector._protocol import LIVENESS_INTERVAL, RECOVERABLE, Command, Status
from fastvec.vector._worker import _Worker, worker_main

__all__ = ["FastVectorEnv"]


class _State(Enum):
    DEFAULT = "default"
    WAITING_RESET = "reset"
    WAITING_STEP = "step"
    WAITING_CALL = "call"


# Module aliases of the enum members the per-step path reads: on Python 3.11
# every ``SomeEnum.MEMBER`` lookup (and hashing a member) costs ~0.2 µs, about
# 1 % of a 50 µs env's step over a dozen lookups per vector step.
_DEFAULT, _WAITING_RESET, _WAITING_STEP = _State.DEFAULT, _State.WAITING_RESET, _State.WAITING_STEP
_STEP = Command.STEP
_STEP_PIPE = Command.STEP_PIPE
# The longest the caller spins (yielding) for the last worker before it blocks (see _wait).
MAX_TAIL_SPIN_S = 1e-3
# _sync.status_bits of finished commands that left nothing on the pipes: OK, INFOS.
_INFOS_BIT = 1 << Status.INFOS
_QUIET_BITS = (1 << Status.OK) | _INFOS_BIT
_OK, _MESSAGE, _ERROR, _CALL_ERROR, _INFOS = Status.OK, Status.MESSAGE, Status.ERROR, Status.CALL_ERROR, Status.INFOS


_FIXED_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def _usable_cpus() -> set:
    try:
        return os.sched_getaffinity(0)
    except AttributeError:  # pragma: no cover - macOS, Windows
        return set(range(os.cpu_count() or 1))


def _usable_cores() -> int:
    return len(_usable_cpus())


class FastVectorEnv(VectorEnv):
    """Runs Python envs in worker processes that share one memory buffer with the caller.

    A drop-in for :class:`gymnasium.vector.AsyncVectorEnv` (and, output for output,
    :class:`gymnasium.vector.SyncVectorEnv`): for the same ``env_fns``, seeds and
    actions it returns the same observations, rewards, terminations, truncations
    and infos, in every autoreset mode. What differs is how it gets there:

    - ``num_workers`` processes (default: the usable cores), each running a
      contiguous slice of the envs in turn, instead of one process per env; no
      env code runs in the calling process (unless ``step_in_caller=True``);
    - observations, actions, rewards, flags and numeric info values live in one
      shared-memory block (an anonymous memfd: nothing to leak, whatever kills
      the job); a step writes the actions, bumps a sequence word per worker and
      waits on the workers' done words (Cython, without the GIL: spinning,
      yielding, then a futex), so no pipe traffic and no pickling happens on a
      common step;
    - what has no fixed-size form (Text, Graph, Sequence, OneOf or custom space
      parts, non-numeric info values, a new info signature) travels on the
      workers' pipes, only when there is some. See ``docs/vector.md``.

    Example:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> from fastvec import FastVectorEnv
        >>> envs = FastVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(4)], num_workers=2)
        >>> obs, infos = envs.reset(seed=42)
        >>> obs.shape, obs.dtype
        ((4, 4), dtype('float32'))
        >>> obs, rewards, terminations, truncations, infos = envs.step(np.array([0, 1, 0, 1]))
        >>> rewards
        array([1., 1., 1., 1.])
        >>> envs.close()

    Args:
        env_fns: callables that each build one env (as for AsyncVectorEnv).
        num_workers: worker processes; envs are split among them evenly, in order.
            Default: the number of usable cores, at most ``len(env_fns)``.
        shared_memory: ``True`` puts the fixed-size parts of the observations (Box,
            Discrete, MultiDiscrete, MultiBinary leaves, also inside Dict/Tuple) in
            the shared buffer and sends the rest through the pipes; a custom space as
            the whole observation space then raises ``ValueError``, as in
            AsyncVectorEnv. ``False`` sends whole observations through the pipes.
        copy: return copies of the observations (default, safe). With ``False`` the
            observations are views into the shared buffer, overwritten by the next
            ``step``/``reset``.
        context: the multiprocessing start method (``"fork"``, ``"spawn"``,
            ``"forkserver"``); default: Python's.
        daemon: start workers as daemonic processes (ended with the interpreter).
        observation_mode: ``"same"``, ``"different"``, or a ``(batched, single)``
            pair of spaces, as in AsyncVectorEnv.
        autoreset_mode: NEXT_STEP (default), SAME_STEP or DISABLED.
        batch_size: envs returned per :meth:`recv` in async mode (EnvPool style);
            default ``num_envs`` (synchronous ``step``). With ``batch_size <
            num_envs`` the envs are stepped with :meth:`send` / :meth:`recv` and a
            worker's envs always travel together, so ``num_envs`` must divide evenly
            among the workers and ``batch_size`` be a multiple of the envs per worker.
        step_in_caller: opt-in (default ``False``): the calling process steps the
            first worker's share of the envs itself while the worker processes step
            theirs, instead of waiting for them (so ``num_workers`` counts the
            caller, and one process fewer competes for the cores). It is faster on
            small machines (on 2 cores: 1.06-1.33x the default on CartPole, 1.02-1.04x
            on HalfCheetah and Pong), but an env in that share runs inside your
            training process: an env that calls ``os._exit``, segfaults or is killed
            takes the trainer down with it, and a hang there cannot honour
            ``step_wait(timeout=)``. Synchronous stepping only (``batch_size ==
            num_envs``). By default no env code runs in the calling process.
        worker_spin_us / parent_spin_us: how long a waiting worker / the caller
            spins at least before it blocks (both spin longer when commands come
            that fast). Spinning answers in microseconds but takes a core; blocking
            frees it.
        pin_workers: pin worker w to the w-th usable CPU. Default (None): only when
            the processes outnumber the usable CPUs (2 workers and the caller on 2
            cores): every process is then always runnable, the scheduler has no
            reason to move one, and a run where both workers happen to share a core
            steps at half speed. ``False`` never pins, ``True`` always does.

    Raises:
        TypeError: ``env_fns`` is not a non-empty sequence of callables, or bad
            ``num_workers``/``batch_size``/``pin_workers`` types.
        ValueError: bad ``num_workers``, ``batch_size`` or ``observation_mode``, or a
            custom observation space with ``shared_memory=True``.
        RuntimeError: the envs' spaces differ (see ``observation_mode``).
    """

    # Until __init__ has run: Gymnasium < 1.3's VectorEnv.__del__ closes an env whose
    # constructor raised (a bad keyword, say), and there is nothing to close then.
    closed = True

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Env]],
        num_workers: int | None = None,
        *,
        shared_memory: bool = True,
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        observation_mode: str | tuple[Space, Space] = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        batch_size: int | None = None,
        step_in_caller: bool = False,
        worker_spin_us: float = 50.0,
        parent_spin_us: float = 20.0,
        pin_workers: bool | None = None,
    ) -> None:
        self._finalizer = None
        self._processes: list = []
        self._pipes: list = []
        self._buffer = None
        self.closed = False
        try:
            env_fns = list(env_fns)
        except TypeError:
            raise TypeError(f"env_fns must be a sequence of callables that build envs, got {type(env_fns).__name__}") from None
        if not env_fns:
            raise TypeError("env_fns is empty: FastVectorEnv needs at least one env constructor")
        for k, fn in enumerate(env_fns):
            if not callable(fn):
                raise TypeError(f"env_fns[{k}] is not callable: got {type(fn).__name__}; pass e.g. `lambda: gym.make(...)`")
        self.env_fns = env_fns
        self.num_envs = len(env_fns)
        if num_workers is None:
            num_workers = min(_usable_cores(), self.num_envs)
        if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)):
            raise TypeError(f"num_workers must be an int, got {type(num_workers).__name__}")
        if not 1 <= num_workers <= self.num_envs:
            raise ValueError(f"num_workers must be in [1, num_envs={self.num_envs}], got {num_workers}")
        self.num_workers = int(num_workers)
        self.shared_memory = bool(shared_memory)
        self.copy = bool(copy)
        self.context = context
        self.daemon = daemon
        self.observation_mode = observation_mode
        self.autoreset_mode = autoreset_mode if isinstance(autoreset_mode, AutoresetMode) else AutoresetMode(autoreset_mode)
        self._autoreset_disabled = self.autoreset_mode is AutoresetMode.DISABLED  # read on every step
        if not (observation_mode in ("same", "different") or (isinstance(observation_mode, tuple) and len(observation_mode) == 2)):
            raise ValueError(
                f"Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and batch "
                f"observation space, actual got {observation_mode}"
            )
        if batch_size is None:
            batch_size = self.num_envs
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
            raise TypeError(f"batch_size must be an int, got {type(batch_size).__name__}")
        if not 1 <= batch_size <= self.num_envs:
            raise ValueError(f"batch_size must be in [1, num_envs={self.num_envs}], got {batch_size}")
        if batch_size < self.num_envs:
            per_worker = self.num_envs // self.num_workers
            if self.num_envs % self.num_workers or batch_size % per_worker:
                raise ValueError(
                    f"async mode returns whole workers: num_envs={self.num_envs} must be a multiple of "
                    f"num_workers={self.num_workers}, and batch_size={batch_size} a multiple of the envs per "
                    f"worker ({self.num_envs / self.num_workers:g}); e.g. num_envs=16, num_workers=8, batch_size=8"
                )
        self.batch_size = int(batch_size)
        if step_in_caller and self.batch_size < self.num_envs:
            raise ValueError("step_in_caller=True needs synchronous stepping (batch_size == num_envs)")
        self.step_in_caller = bool(step_in_caller)
        self._local = None  # the caller's own _Worker when step_in_caller
        self._local_job = None  # (phase, method, args) the caller runs at the next wait
        self._local_step_job = None  # the step's local job, built once
        if pin_workers is not None and not isinstance(pin_workers, bool):
            raise TypeError(f"pin_workers must be None, True or False, got {pin_workers!r}")
        self._pin_workers = pin_workers
        self._worker_spin_s = float(worker_spin_us) * 1e-6
        self._parent_spin_s = float(parent_spin_us) * 1e-6
        self._wait_mean = self._parent_spin_s  # how long commands took, a running mean (see _wait)
        base, extra = divmod(self.num_envs, self.num_workers)
        sizes = [base + (w < extra) for w in range(self.num_workers)]
        self._starts = [sum(sizes[:w]) for w in range(self.num_workers)]
        self._stops = [s + n for s, n in zip(self._starts, sizes)]

        ctx = multiprocessing.get_context(context)
        try:
            self._start_workers(ctx)
            self._handshake()
        except BaseException:
            self._shutdown(terminate=True)
            raise
        self._state = _State.DEFAULT
        self._pending: np.ndarray = np.zeros(self.num_workers, dtype=np.uint8)
        self._all_workers = np.ones(self.num_workers, dtype=np.uint8)
        self._all_workers_list = list(range(self.num_workers))
        self._remote_list = list(self._remote_workers())
        self._remote_mask = np.zeros(self.num_workers, dtype=np.uint8)
        self._remote_mask[self._remote_list] = 1
        self._autoreset_envs = np.zeros(self.num_envs, dtype=np.bool_)
        # send/recv bookkeeping: workers with a command out, and workers handed back by recv.
        self._inflight = np.zeros(self.num_workers, dtype=np.uint8)
        self._async_used = False  # set by send/async_reset; spares step() a check
        self._ready = np.ones(self.num_workers, dtype=np.uint8)
        self._next_worker = 0  # where recv's round-robin scan starts
        self._worker_of_env = np.repeat(np.arange(self.num_workers), np.diff([0, *self._stops]))
        self._worker_of_env_list = self._worker_of_env.tolist()

    # -- construction ------------------------------------------------------------------
    def _worker_cpus(self, pin: bool | None) -> list:
        """The CPU each worker is pinned to (None: not pinned), see ``pin_workers``."""
        cpus = sorted(_usable_cpus())
        processes = self.num_workers + (0 if self.step_in_caller else 1)
        if pin is None:
            pin = processes > len(cpus)
        return [cpus[w % len(cpus)] if pin and cpus else None for w in range(self.num_workers)]

    def _start_workers(self, ctx) -> None:
        parent_pid = os.getpid()
        cpus = self._worker_cpus(self._pin_workers)
        with clear_mpi_env_vars():
            for w in range(self.num_workers):
                if w == 0 and self.step_in_caller:
                    self._pipes.append(None)
                    self._processes.append(None)
                    continue
                parent_pipe, child_pipe = ctx.Pipe()
                fns = [CloudpickleWrapper(fn) for fn in self.env_fns[self._starts[w]:self._stops[w]]]
                process = ctx.Process(
                    target=worker_main,
                    name=f"Worker<FastVectorEnv>-{w}",
                    args=(w, fns, self._starts[w], child_pipe, parent_pipe, parent_pid,
                          self.autoreset_mode, self._worker_spin_s, cpus[w]),
                    daemon=self.daemon,
                )
                self._pipes.append(parent_pipe)
                self._processes.append(process)
                try:
                    process.start()
                except (pickle.PicklingError, TypeError, AttributeError) as exc:
                    raise TypeError(
                        f"could not send the env constructors of envs {self._starts[w]}..{self._stops[w] - 1} "
                        f"to a worker process started with {ctx.get_start_method()!r}: {exc}. "
                        "Constructors must be picklable (cloudpickle handles lambdas and closures) "
                        "unless the start method is 'fork'."
                    ) from exc
                finally:
                    child_pipe.close()
        self._finalizer = weakref.finalize(self, _finalize, self._processes, self._pipes, [None])

    def _recv(self, w: int, timeout: float | None = None):
        """Receive from worker w's pipe, raising if the worker dies or the timeout passes."""
        pipe = self._pipes[w]
        deadline = None if timeout is None else time.perf_counter() + timeout
        while not pipe.poll(LIVENESS_INTERVAL):
            self._check_alive(w)
            if deadline is not None and time.perf_counter() > deadline:
                raise multiprocessing.TimeoutError(f"worker {w} did not answer within {timeout} s")
        try:
            return pipe.recv()
        except (EOFError, ConnectionResetError, OSError):
            self._check_alive(w, wait=1.0)
            raise WorkerDiedError(f"worker {w} (envs {self._env_range(w)}) closed its pipe unexpectedly", w)

    def _handshake(self) -> None:
        hellos = []
        local_envs = []
        if self.step_in_caller:
            for k, env_fn in enumerate(self.env_fns[self._starts[0]:self._stops[0]]):
                try:
                    local_envs.append(env_fn())
                except BaseException as exc:
                    _annotate(exc, k, f"raised by env {k}'s constructor in the calling process.")
                    for env in local_envs:
                        env.close()
                    raise
            first = local_envs[0]
            hellos.append(("spaces", [(e.observation_space, e.action_space) for e in local_envs],
                           dict(first.metadata), first.render_mode))
            self._local_envs = local_envs
        for w in self._remote_workers():
            message = self._recv(w)
            if message[0] == "error":
                self._raise_remote(w, message)
            hellos.append(message)
        spaces = [pair for hello in hellos for pair in hello[1]]
        first_obs_space, first_act_space = spaces[0]
        self.metadata = dict(hellos[0][2])
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = hellos[0][3]
        self.single_action_space = first_act_space
        self.action_space = batch_space(first_act_space, self.num_envs)
        mode = self.observation_mode
        if isinstance(mode, tuple):
            if not isinstance(mode[0], Space) or not isinstance(mode[1], Space):
                raise TypeError(f"Expected both elements of observation_mode to be Spaces, got {type(mode[0])} and {type(mode[1])}")
            self.observation_space, self.single_observation_space = mode
        elif mode == "same":
            self.single_observation_space = first_obs_space
            self.observation_space = batch_space(first_obs_space, self.num_envs)
        else:
            self.single_observation_space = first_obs_space
            self.observation_space = batch_differing_spaces([s for s, _ in spaces])
        for i, (obs_space, act_space) in enumerate(spaces):
            if mode == "same" and obs_space != self.single_observation_space:
                raise RuntimeError(
                    "FastVectorEnv(..., observation_mode='same') however some of the sub-environments "
                    f"observation spaces are not equivalent. Env {i}'s {obs_space} differs from env 0's "
                    f"{self.single_observation_space}. If this is intentional, use "
                    "`observation_mode='different'` instead."
                )
            if mode != "same" and not is_space_dtype_shape_equiv(obs_space, self.single_observation_space):
                raise RuntimeError(
                    "FastVectorEnv(..., observation_mode='different' or custom space) however the "
                    f"sub-environment's observation spaces do not share a common shape and dtype (env {i}'s "
                    f"{obs_space} against {self.single_observation_space})."
                )
            if act_space != self.single_action_space:
                raise RuntimeError(
                    f"Some environments have an action space different from `{self.single_action_space}` "
                    f"(env {i}'s is {act_space}). In order to batch actions, the action spaces from all "
                    "environments must be equal."
                )

        self._act_layout = Layout(self.single_action_space, objects=True)
        if self.shared_memory:
            self._obs_layout = _shared_observation_layout(self.single_observation_space)
            self._obs_objects = [[None] * self.num_envs for leaf in self._obs_layout.leaves if leaf.is_object]
            obs_bytes = sum(leaf.nbytes for leaf in self._obs_layout.leaves if not leaf.is_object)
        else:
            self._obs_layout = None
            self._obs_out = create_empty_array(self.single_observation_space, n=self.num_envs, fn=np.zeros)
            self._env_obs: list[Any] = [None] * self.num_envs
            obs_bytes = 0
        sections, size = _shared_buffer.plan(self.num_envs, self.num_workers, self._obs_layout, self._act_layout,
                                             row_bytes_for(obs_bytes))
        self._buffer = _shared_buffer.SharedBuffer(sections, size)
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _finalize, self._processes, self._pipes, [self._buffer])
        for w in self._remote_workers():
            _protocol.send(self._pipes[w], ("attach", sections, size, self._obs_layout, self._act_layout))
            self._buffer.send(self._pipes[w], self._processes[w].pid)
        for w in self._remote_workers():
            message = self._recv(w)
            if message[0] == "error":
                self._raise_remote(w, message)
        self._buffer.release_fd()  # every worker has mapped it: from now on only mappings keep it
        self._ctrl = self._buffer["ctrl"]
        self._act_slabs = self._buffer.leaves("act", self._act_layout)
        self._rewards = self._buffer["rewards"]
        self._terminations = self._buffer["terminations"]
        self._truncations = self._buffer["truncations"]
        self._obs_single = None
        if self._obs_layout is not None:
            self._obs_slabs = self._buffer.leaves("obs", self._obs_layout)
            if self._obs_layout.is_leaf and not self._obs_layout.has_objects:
                self._obs_single = self._obs_slabs[0]
        worker_of_env = np.repeat(np.arange(self.num_workers), np.diff([0, *self._stops]))
        self._infos = InfoAssembler(self._buffer["info_ids"], self._buffer["info_rows"], worker_of_env, self._starts)
        self._all_env_rows = np.arange(self.num_envs, dtype=np.int64)
        self._act_dtypes = self._buffer["act_dtypes"]
        self._act_codes_everywhere: tuple | None = None  # the dtype codes every worker has, if one set
        self._act_codes: tuple = ()  # the dtype codes of the actions last written
        # One Cython call writes the common action batch (one leaf, an ndarray of its shape).
        self._act_single = self._act_slabs[0] if self._act_layout.is_leaf and not self._act_layout.has_objects else None
        self._act_single_shape = self._act_layout.leaves[0].shape
        if self.step_in_caller:
            self._local = _Worker(0, self._local_envs, 0, self.autoreset_mode, self._buffer,
                                  self._obs_layout, self._act_layout)
            self._local_step_job = ("step", self._local.step, ())
            self._finalizer.detach()
            self._finalizer = weakref.finalize(self, _finalize, self._processes, self._pipes, [self._buffer],
                                               envs=self._local_envs)

    def _remote_workers(self) -> range:
        """Indices of the workers that are processes (all but 0 when the caller steps)."""
        return range(1 if self.step_in_caller else 0, self.num_workers)

    def _dispatch(self, w: int, name: str, payload: tuple) -> None:
        """Hand worker ``w`` a pipe command (the caller's own share runs at the next wait)."""
        if w == 0 and self._local is not None:
            method = {"reset": self._local.reset, "call": self._local.call, "setattr": self._local.set_attr}[name]
            self._local_job = (name, method, payload)
            return
        _protocol.send(self._pipes[w], (name, payload))
        _sync.send_command(self._ctrl, w, Command.PIPE)

    def _start_steps(self, workers, per_env: list | None, env_ids=None) -> None:
        """Tell ``workers`` to step: the actions are in the slabs (``per_env`` None, their dtype
        codes in ``_act_codes``) or, one per env, in ``per_env`` for the pipes (row k for env
        ``env_ids[k]``; default: env k). The caller's own share, if any, runs at the next wait."""
        ctrl = self._ctrl
        if per_env is None:
            self._publish_action_dtypes(workers)
            for w in workers:
                if w == 0 and self._local is not None:
                    self._local_job = self._local_step_job
                else:
                    _sync.send_command(ctrl, w, _STEP)
            return
        position = None if env_ids is None else {e: k for k, e in enumerate(np.asarray(env_ids).tolist())}
        for w in workers:
            if position is None:
                chunk = per_env[self._starts[w]:self._stops[w]]
            else:
                chunk = [per_env[position[e]] for e in range(self._starts[w], self._stops[w])]
            if w == 0 and self._local is not None:
                self._local_job = ("step", self._local.step, (chunk,))
            else:
                _protocol.send(self._pipes[w], chunk)
                _sync.send_command(ctrl, w, _STEP_PIPE)

    def _publish_action_dtypes(self, workers) -> None:
        """Name the dtype of each action leaf in the rows of ``workers`` (when it changed)."""
        codes = self._act_codes
        if len(workers) == self.num_workers:
            if codes == self._act_codes_everywhere:
                return
            self._act_dtypes[:, : len(codes)] = codes
            self._act_codes_everywhere = codes
        else:
            self._act_dtypes[np.asarray(workers, dtype=np.intp), : len(codes)] = codes
            self._act_codes_everywhere = None

    @property
    def processes(self) -> list:
        """The worker processes (the caller's own share, if any, has none)."""
        return [p for p in self._processes if p is not None]

    # -- the step -----------------------------------------------------------------------
    def step(self, actions):
        """Step every env with its action; returns (obs, rewards, terminations, truncations, infos)."""
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions) -> None:
        """Send the actions to the workers and return at once (AsyncVectorEnv API)."""
        self._assert_is_running()
        if self._state is not _DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `step_async` while waiting for a pending call to `{self._state.value}` to complete.",
                str(self._state.value),
            )
        if self.batch_size < self.num_envs:
            raise RuntimeError(
                f"this FastVectorEnv has batch_size={self.batch_size} < num_envs={self.num_envs}: "
                "step it with send(actions, env_ids) / recv()"
            )
        if self._async_used and self._inflight.any():
            raise AlreadyPendingCallError("send/recv has commands in flight: recv() them first", "recv")
        if self._autoreset_disabled and self._autoreset_envs.any():
            envs = np.flatnonzero(self._autoreset_envs).tolist()
            raise AssertionError(
                f"envs {envs} terminated or truncated and autoreset_mode=DISABLED: reset them with "
                "`reset(options={'reset_mask': mask})` before stepping again"
            )
        self._start_steps(self._all_workers_list, self._write_actions(actions))
        self._pending = self._remote_mask
        self._state = _WAITING_STEP

    def step_wait(self, timeout: float | None = None):
        """Wait for the step sent by :meth:`step_async`; ``TimeoutError`` after ``timeout`` seconds."""
        infos = self._collect(_WAITING_STEP, "step_wait", timeout)
        if self._autoreset_disabled:
            np.logical_or(self._terminations, self._truncations, out=self._autoreset_envs)
        return (
            self._observations(),
            self._rewards.copy(),
            self._terminations.copy(),
            self._truncations.copy(),
            infos,
        )

    def _write_actions(self, actions, rows: slice | np.ndarray | None = None) -> list | None:
        """Write ``actions`` for the envs ``rows`` (default: all; a slice or an index array).

        Each ndarray leaf goes into its shared slab in the dtype it came in (its dtype codes
        into ``_act_codes``), so every env gets what SyncVectorEnv would hand it; then None is
        returned. Anything else (lists, another shape per env, object leaves such as Text, a
        dtype of more than 8 bytes) is returned as the per-env actions Gymnasium's ``iterate``
        gives, for the pipes. As in Gymnasium, values are not checked against the space (an
        out-of-range Discrete action reaches the env); a batch of the wrong size raises a
        ``ValueError``, a scalar a ``TypeError``.
        """
        if rows is None:
            count, first = self.num_envs, 0
        elif isinstance(rows, slice):
            count, first = rows.stop - rows.start, rows.start
        else:
            count, first = len(rows), None
        if self._act_single is not None and first is not None:
            code = _sync.write_action_rows(actions, self._act_single, first, count, self._act_single_shape)
            if code:
                self._act_codes = (code,)
                return None
        layout = self._act_layout
        if not layout.has_objects:
            try:
                values = (actions,) if layout.is_leaf else layout.split(actions)
            except (KeyError, IndexError, TypeError):
                values = None  # iterate() below raises what Gymnasium raises
            if values is not None and all(_fits_slab(v, count, leaf) for leaf, v in zip(layout.leaves, values)):
                codes = []
                for slab, value in zip(self._act_slabs, values):
                    raw = np.ascontiguousarray(value).reshape(count, -1).view(np.uint8)
                    target = slab[first:first + count] if first is not None else slab
                    if first is None:
                        target[rows, : raw.shape[1]] = raw
                    else:
                        target[:, : raw.shape[1]] = raw
                    codes.append(ord(value.dtype.char))
                self._act_codes = tuple(codes)
                return None
        try:
            per_env = list(iterate(self.action_space, actions))
        except (TypeError, KeyError, IndexError) as exc:
            raise type(exc)(f"actions must be a batch of {count} actions for {self.single_action_space}; "
                            f"iterating over {type(actions).__name__} failed: {exc}") from None
        if len(per_env) != count:
            raise ValueError(f"{len(per_env)} actions for {count} envs (single action space "
                             f"{self.single_action_space})")
        return per_env

    def _collect(self, expected: _State, caller: str, timeout: float | None) -> dict[str, Any]:
        """Finish the pending ``expected`` call (step or reset) for ``caller`` (its name, for
        errors): wait, then build the infos."""
        self._assert_is_running()
        if self._state is not expected:
            raise NoAsyncCallError(f"Calling `{caller}` without any prior call to `{expected.value}_async`.", expected.value)
        replies = self._wait(timeout, caller)
        self._state = _DEFAULT
        return self._take_replies(replies, self._all_env_rows)

    def _take_replies(self, replies, env_rows: np.ndarray) -> dict[str, Any]:
        """Keep the pipe-borne observation parts of the replies; return the vector infos of
        the envs ``env_rows`` (one output row each)."""
        any_info = self._infos_seen
        for w, (observations, infos, has_infos) in replies:
            if observations is not None:
                if observations[0] == "all":
                    self._env_obs[self._starts[w]:self._stops[w]] = observations[1]
                else:
                    for env, position, value in observations:
                        self._obs_objects[position][env] = value
            if infos is not None:
                self._infos.receive(w, infos)
            any_info = any_info or has_infos
        if not any_info:
            return {}
        return self._infos.build(env_rows, len(env_rows))

    def _observations(self):
        if self._obs_single is not None:  # the common case: one fixed-size leaf
            return self._obs_single.copy() if self.copy else self._obs_single
        if self._obs_layout is None:
            self._obs_out = concatenate(self.single_observation_space, self._env_obs, self._obs_out)
            return deepcopy(self._obs_out) if self.copy else self._obs_out
        return self._observation_rows(slice(None))

    def _observation_rows(self, rows: slice | np.ndarray):
        """The observations of the envs ``rows`` (a slice: copies unless ``copy=False``)."""
        if self._obs_layout is None:
            items = [self._env_obs[i] for i in np.arange(self.num_envs)[rows]]
            out = create_empty_array(self.single_observation_space, n=len(items), fn=np.zeros)
            return concatenate(self.single_observation_space, items, out)
        view = isinstance(rows, slice) and not self.copy
        leaves = []
        objects = iter(self._obs_objects)
        for slab in self._obs_slabs:
            if slab is None:
                values = next(objects)
                leaves.append(tuple(values[rows] if isinstance(rows, slice) else [values[i] for i in rows.tolist()]))
            else:
                leaves.append(slab[rows] if view or not isinstance(rows, slice) else slab[rows].copy())
        return leaves[0] if self._obs_layout.is_leaf else self._obs_layout.join(leaves)

    # -- waiting and errors ---------------------------------------------------------------
    def _wait(self, timeout: float | None, caller: str) -> list:
        """Wait for the pending workers; return [(worker, reply)] for those that sent one.

        Also sets ``_infos_seen``: whether some env of the command left info values in the
        buffer. A worker that failed is reported as AsyncVectorEnv reports it (one
        ``logger.error`` pair per failed worker) and its exception re-raised.
        """
        deadline = None if timeout is None else time.perf_counter() + timeout
        pending = self._pending
        replies = []
        call_errors = []
        self._infos_seen = False
        try:
            status, reply = self._run_local_job()
            if status == _MESSAGE:
                replies.append((0, reply))
            elif status == _INFOS:
                self._infos_seen = True
        except _RecoverableError as exc:
            call_errors.append((0, exc.error))  # raised once the workers have answered too
        # (the step's mask, _remote_mask, never holds the caller's own worker 0)
        if self._local is not None and pending is not self._remote_mask and pending[0]:
            pending = pending.copy()
            pending[0] = 0
        # How the caller waits. Until a first worker is done every core is busy with one, so
        # it blocks after a short spin. From then on a core is free (that worker's, or the
        # caller's own once it has stepped its share itself), so it spins, yielding, for
        # about half as long as recent commands took: the last answer is then seen at once
        # instead of through a wake-up from a blocked wait, which costs tens of
        # microseconds on a virtual machine, a sizeable part of a step of a few hundred.
        expected = self._wait_mean
        tail = min(max(self._parent_spin_s, 0.5 * expected), MAX_TAIL_SPIN_S)
        spin = tail if self._local is not None else self._parent_spin_s
        started = time.perf_counter()
        while True:
            chunk = LIVENESS_INTERVAL
            if deadline is not None:
                chunk = max(0.0, min(chunk, deadline - time.perf_counter()))
            busy = _sync.wait_all_done(self._ctrl, pending, spin, chunk, tail)
            if busy < 0:
                self._wait_mean = expected + 0.125 * (min(time.perf_counter() - started, 4 * MAX_TAIL_SPIN_S) - expected)
                break
            for w in np.flatnonzero(pending):
                if not _sync.is_done(self._ctrl, w):
                    self._check_alive(int(w))
            if deadline is not None and time.perf_counter() >= deadline:
                # The call stays pending: wait for it again, or close() (which waits, then terminates).
                raise multiprocessing.TimeoutError(
                    f"The call to `{caller}` has timed out after {timeout} second(s); it is still pending."
                )
        bits = _sync.status_bits(self._ctrl, pending)
        if bits & ~_QUIET_BITS:  # something to read: a reply, an error
            self._read_statuses(self._remote_list if pending is self._remote_mask else np.flatnonzero(pending).tolist(),
                                replies, call_errors)
        elif bits & _INFOS_BIT:
            self._infos_seen = True
        if call_errors:
            w, error = call_errors[0]
            if isinstance(error, BaseException):
                raise error
            self._raise_remote(w, error, close=False)
        return replies

    def _read_statuses(self, workers, replies: list, call_errors: list) -> None:
        """Read what each finished worker left: its pipe reply goes to ``replies``, a
        call/set_attr error to ``call_errors``, info values set ``_infos_seen``; fatal errors
        are raised (all of them logged first)."""
        errors = []
        ctrl = self._ctrl
        for w in workers:
            status = _sync.status(ctrl, w)
            if status == _OK:  # the common case: nothing on the pipe
                continue
            if status == _INFOS:
                self._infos_seen = True
                continue
            message = self._recv(w)
            if status == _MESSAGE:
                replies.append((w, message))
            elif status == _CALL_ERROR:
                call_errors.append((w, message))
            else:
                errors.append((w, message))
        if errors:
            self._raise_remote_errors(errors)

    def _raise_remote_errors(self, errors: list) -> None:
        """Log each failed worker's error as AsyncVectorEnv does, then re-raise the last one
        (closing the vector env)."""
        for w, report in errors:
            env_index = report[1] if report[1] is not None else self._starts[w]
            logger.error(f"Received the following error from Worker-{env_index} - Shutting it down")
            logger.error(f"{report[5]}")
        logger.error("Raising the last exception back to the main process.")
        self._raise_remote(*errors[-1])

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
                _annotate(exc, self._local.current_env,
                          f"raised by env {self._local.current_env} in the calling process during {phase}.")
                raise _RecoverableError(exc) from None
            self._fail_local(exc, phase)
        except BaseException as exc:
            self._fail_local(exc, phase)

    def _fail_local(self, exc: BaseException, phase: str) -> None:
        env_index = self._local.current_env
        self._shutdown(terminate=True)
        _annotate(exc, env_index, f"raised by env {env_index} in the calling process during {phase}; "
                  "the vector env is closed.")
        raise exc

    def _env_range(self, w: int) -> str:
        return f"{self._starts[w]}..{self._stops[w] - 1}"

    def _check_alive(self, w: int, wait: float = 0.0) -> None:
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
        self._shutdown(terminate=True)
        raise WorkerDiedError(
            f"FastVectorEnv worker {w} (envs {self._env_range(w)}) {how}; the vector env is closed.", w
        )

    def _raise_remote(self, w: int, report: tuple, close: bool = True) -> None:
        """Re-raise a worker's exception in the caller (closing everything first, unless ``close=False``)."""
        _, env_index, phase, type_name, text, trace, payload = report
        if close:
            self._shutdown(terminate=True)
        where = f"env {env_index}" if env_index is not None else f"worker {w} (envs {self._env_range(w)})"
        note = f"raised by {where} in FastVectorEnv worker {w} during {phase}" + ("; the vector env is closed." if close else ".")
        exc = None
        if payload is not None:
            try:
                exc = pickle.loads(payload)
            except Exception:
                exc = None
        if not isinstance(exc, BaseException):
            raise WorkerError(f"{type_name}: {text}\n({note})\n\nWorker traceback:\n{trace}", w, env_index)
        _annotate(exc, env_index, note)
        raise exc from RemoteTraceback(trace)

    def _assert_is_running(self) -> None:
        if self.closed:
            raise ClosedEnvironmentError(f"Trying to operate on `{type(self).__name__}`, after a call to `close()`.")

    # -- reset ------------------------------------------------------------------------------
    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        """Reset the envs (all, or those in ``options["reset_mask"]``); returns (obs, infos)."""
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def reset_async(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        """Send a reset to the workers and return at once (AsyncVectorEnv API)."""
        self._assert_is_running()
        if self._state is not _State.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `reset_async` while waiting for a pending call to `{self._state.value}` to complete",
                str(self._state.value),
            )
        seeds = seeds_per_env(seed, self.num_envs)
        options, mask = split_reset_options(options, self.num_envs)
        self._drain()
        pending = np.zeros(self.num_workers, dtype=np.uint8)
        for w in range(self.num_workers):
            rows = slice(self._starts[w], self._stops[w])
            worker_mask = None if mask is None else mask[rows].tolist()
            if worker_mask is not None and not any(worker_mask):
                self._infos.ids[rows] = 0  # (an idle worker: its envs add no info to this reset)
                continue
            self._dispatch(w, "reset", (seeds[rows], options, worker_mask))
            pending[w] = 1
        if mask is None:
            self._autoreset_envs[:] = False
        else:
            self._autoreset_envs[mask] = False
        self._pending = pending
        self._state = _State.WAITING_RESET

    def reset_wait(self, timeout: float | None = None):
        """Wait for the reset sent by :meth:`reset_async`; returns (obs, infos)."""
        infos = self._collect(_WAITING_RESET, "reset_wait", timeout)
        return self._observations(), infos

    # -- async: send / recv ------------------------------------------------------------
    def async_reset(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        """Start resetting every env; their first observations come from :meth:`recv` (EnvPool API)."""
        self.reset_async(seed=seed, options=options)
        self._inflight = self._pending.copy()
        self._async_used = True
        self._ready[:] = 0
        self._state = _State.DEFAULT

    def send(self, actions, env_ids=None) -> None:
        """Start stepping the envs ``env_ids`` with ``actions`` (rows in ``env_ids`` order).

        ``env_ids`` (default: every env handed back by the last :meth:`recv`, or all
        envs after :meth:`reset`) must be whole workers' envs that are not already
        stepping: in practice, the ``env_id`` of one or more earlier ``recv`` results.
        """
        self._assert_is_running()
        if self._state is not _State.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `send` while waiting for a pending call to `{self._state.value}` to complete.",
                str(self._state.value),
            )
        if env_ids is None:
            workers = np.flatnonzero(self._ready)
            env_ids = np.concatenate([np.arange(self._starts[w], self._stops[w]) for w in workers]) if len(workers) else np.zeros(0, np.int64)
        workers, rows = self._send_targets(env_ids)
        busy = [w for w in workers if self._inflight[w]]
        if busy:
            raise ValueError(f"envs of workers {busy} are still stepping: recv() them before sending them new actions")
        per_env = self._write_actions(actions, rows=rows)
        self._start_steps(workers, per_env, None if per_env is None else np.arange(self.num_envs)[rows])
        for w in workers:
            self._inflight[w] = 1
            self._ready[w] = 0
        self._async_used = True

    def _send_targets(self, env_ids) -> tuple[list[int], slice | np.ndarray]:
        """The workers ``env_ids`` cover (whole workers only) and the rows to write actions to.

        Rows are a slice when the ids are ascending and adjacent (what ``recv``
        hands back for adjacent workers): the cheap case, checked first.
        """
        env_ids = np.asarray(env_ids)
        if env_ids.ndim != 1 or env_ids.dtype.kind not in "iu" or len(env_ids) == 0:
            raise ValueError(f"env_ids must be a non-empty 1-D integer array, got {env_ids!r}")
        ids = env_ids.tolist()
        first, last = ids[0], ids[-1]
        if 0 <= first <= last < self.num_envs and last - first + 1 == len(ids):
            w0, w1 = self._worker_of_env_list[first], self._worker_of_env_list[last]
            if self._starts[w0] == first and self._stops[w1] == last + 1 and ids == list(range(first, last + 1)):
                return list(range(w0, w1 + 1)), slice(first, last + 1)
        if min(ids) < 0 or max(ids) >= self.num_envs or len(set(ids)) != len(ids):
            raise ValueError(f"env_ids must be distinct env indices in [0, {self.num_envs}), got {ids}")
        workers = np.unique(self._worker_of_env[env_ids])
        sizes = sum(self._stops[w] - self._starts[w] for w in workers)
        if sizes != len(env_ids):
            raise ValueError(
                f"env_ids {ids} split workers: send whole workers' envs "
                f"(worker ranges {[(self._starts[w], self._stops[w] - 1) for w in workers.tolist()]})"
            )
        return workers.tolist(), env_ids

    def recv(self, timeout: float | None = None):
        """Wait for ``batch_size`` envs to finish; returns their (obs, rewards, terminations, truncations, infos).

        ``infos["env_id"]`` holds the env indices of the rows, in order (whole
        workers, by worker index). Rewards are 0 and flags False for envs whose
        last command was a reset. Raises ``TimeoutError`` after ``timeout`` seconds.
        """
        self._assert_is_running()
        if not self._inflight.any():
            raise NoAsyncCallError("Calling `recv` with nothing sent: call `send` or `async_reset` first.", "recv")
        deadline = None if timeout is None else time.perf_counter() + timeout
        want = min(self.batch_size, sum(self._stops[w] - self._starts[w] for w in np.flatnonzero(self._inflight)))
        got: list[int] = []
        count = 0
        pending = self._inflight.copy()
        replies: list = []
        self._infos_seen = False
        if self._local is not None and pending[0]:
            # The caller's own share runs now, synchronously: it is the first one ready.
            status, reply = self._run_local_job()
            if status == _MESSAGE:
                replies.append((0, reply))
            self._infos_seen = status == _INFOS
            pending[0] = 0
            got.append(0)
            count += self._stops[0] - self._starts[0]
        while count < want:
            chunk = LIVENESS_INTERVAL if deadline is None else max(0.0, min(LIVENESS_INTERVAL, deadline - time.perf_counter()))
            w = _sync.wait_any_done(self._ctrl, pending, self._next_worker, self._parent_spin_s, chunk)
            if w < 0:
                for v in np.flatnonzero(pending).tolist():
                    self._check_alive(v)
                if deadline is not None and time.perf_counter() >= deadline:
                    raise multiprocessing.TimeoutError(f"The call to `recv` has timed out after {timeout} second(s).")
                continue
            pending[w] = 0
            self._next_worker = w + 1
            got.append(w)
            count += self._stops[w] - self._starts[w]
        got.sort()
        for w in got:
            self._inflight[w] = 0
            self._ready[w] = 1
        self._read_statuses([w for w in got if not (w == 0 and self._local is not None)], replies, [])
        contiguous = len(got) == got[-1] - got[0] + 1
        if contiguous:
            env_ids = np.arange(self._starts[got[0]], self._stops[got[-1]])
        else:
            env_ids = np.concatenate([np.arange(self._starts[w], self._stops[w]) for w in got])
        infos = self._take_replies(replies, env_ids)
        infos["env_id"] = env_ids
        rows = slice(self._starts[got[0]], self._stops[got[-1]]) if contiguous else env_ids
        return (
            self._observation_rows(rows),
            self._rewards[rows].copy() if contiguous else self._rewards[rows],
            self._terminations[rows].copy() if contiguous else self._terminations[rows],
            self._truncations[rows].copy() if contiguous else self._truncations[rows],
            infos,
        )

    def _drain(self) -> None:
        """Wait out send/recv commands still in flight (their results are dropped)."""
        if not self._inflight.any():
            return
        self._pending = self._inflight.copy()
        for w, message in self._wait(None, "recv"):
            pass
        self._inflight[:] = 0
        self._ready[:] = 1

    # -- call / attributes ------------------------------------------------------------------
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call ``name`` on every env (or read it, if not callable); results in env order."""
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Start :meth:`call` without waiting for it (AsyncVectorEnv API)."""
        self._assert_is_running()
        if self._state is not _State.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `call_async` while waiting for a pending call to `{self._state.value}` to complete.",
                str(self._state.value),
            )
        for w in range(self.num_workers):
            self._dispatch(w, "call", (name, args, kwargs))
        self._pending = self._all_workers
        self._state = _State.WAITING_CALL

    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """Wait for the results of :meth:`call_async`, in env order."""
        self._assert_is_running()
        if self._state is not _State.WAITING_CALL:
            raise NoAsyncCallError("Calling `call_wait` without any prior call to `call_async`.", _State.WAITING_CALL.value)
        try:
            replies = self._wait(timeout, "call_wait")
        except multiprocessing.TimeoutError:
            raise
        except BaseException:
            self._state = _State.DEFAULT
            raise
        self._state = _State.DEFAULT
        return tuple(result for _, results in replies for result in results)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Get an attribute from every env, in env order."""
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """Set an attribute on every env: one value for all, or a list/tuple of ``num_envs`` values."""
        self._assert_is_running()
        if not isinstance(values, (list, tuple)):
            values = [values for _ in range(self.num_envs)]
        if len(values) != self.num_envs:
            raise ValueError(
                "Values must be a list or tuple with length equal to the number of environments. "
                f"Got `{len(values)}` values for {self.num_envs} environments."
            )
        if self._state is not _State.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `set_attr` while waiting for a pending call to `{self._state.value}` to complete.",
                str(self._state.value),
            )
        for w in range(self.num_workers):
            self._dispatch(w, "setattr", (name, list(values[self._starts[w]:self._stops[w]])))
        self._pending = self._all_workers
        self._wait(None, "set_attr")

    def render(self) -> tuple[Any, ...] | None:
        """Render every env (``render_mode`` set at construction); one frame per env."""
        return self.call("render")

    @property
    def np_random_seed(self) -> tuple[int, ...]:
        """The envs' ``np_random_seed``, in env order."""
        return self.get_attr("np_random_seed")

    @property
    def np_random(self) -> tuple[np.random.Generator, ...]:
        """Copies of the envs' ``np_random`` generators, in env order."""
        return self.get_attr("np_random")

    # -- closing ------------------------------------------------------------------------------
    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        """End the workers and free the shared memory.

        Args:
            timeout: seconds to let a pending call finish and the workers exit before
                they are terminated (default: 5 s for the exit).
            terminate: end the workers at once, without letting them close their envs.
        """
        if getattr(self, "_state", _State.DEFAULT) is not _State.DEFAULT and self._buffer is not None:
            logger.warn(f"Calling `close` while waiting for a pending call to `{self._state.value}` to complete.")
            if not terminate:
                try:
                    self._wait(5.0 if timeout is None else timeout, "close")
                except Exception:
                    terminate = True
            self._state = _State.DEFAULT
        self._shutdown(terminate=terminate, timeout=5.0 if timeout is None else timeout)

    def _shutdown(self, terminate: bool = False, timeout: float = 5.0) -> None:
        if self._buffer is not None and not terminate:
            ctrl = self._buffer["ctrl"] if self._buffer.views else None
            if ctrl is not None:
                for w, process in enumerate(self._processes):
                    if process is not None and process.is_alive() and _sync.is_done(ctrl, w):
                        _sync.send_command(ctrl, w, Command.CLOSE)
        self._local_job = self._local_step_job = None
        self._local = None
        # Drop every view of the shared block: its mapping goes with the last one (a
        # copy=False observation the user still holds keeps it).
        self._ctrl = self._rewards = self._terminations = self._truncations = self._act_single = None
        self._act_dtypes = None
        self._act_slabs = self._obs_slabs = self._obs_single = self._infos = None
        _finalize(self._processes, self._pipes, [self._buffer], timeout=0.0 if terminate else timeout,
                  envs=getattr(self, "_local_envs", ()))
        self._local_envs = ()
        if self._finalizer is not None:
            self._finalizer.detach()
        self._buffer = None
        self.closed = True

    def __enter__(self) -> "FastVectorEnv":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.spec is None:
            return f"FastVectorEnv(num_envs={self.num_envs}, num_workers={getattr(self, 'num_workers', '?')})"
        return f"FastVectorEnv({self.spec.id}, num_envs={self.num_envs}, num_workers={self.num_workers})"


def _finalize(processes, pipes, buffers, timeout: float = 0.0, envs=()) -> None:
    """End the workers (politely for ``timeout`` seconds, then by force) and unmap the buffer.

    Also the garbage-collection / interpreter-exit path, so it holds no reference to the env.
    ``envs``: the envs the caller stepped itself, closed here.
    """
    for env in envs:
        try:
            env.close()
        except Exception:
            pass
    processes = [p for p in processes if p is not None]
    deadline = time.monotonic() + timeout
    for process in processes:
        if process._popen is None:  # never started
            continue
        remaining = deadline - time.monotonic()
        if remaining > 0:
            process.join(remaining)
        if process.is_alive():
            process.terminate()
    for process in processes:
        if process._popen is None:
            continue
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
    for buffer in buffers:
        if buffer is not None:
            buffer.close()


def _annotate(exc: BaseException, env_index: int | None, note: str) -> None:
    """Name the env (and where it ran) on an exception about to reach the caller."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    try:
        exc.env_index = env_index
    except AttributeError:  # pragma: no cover - exceptions with __slots__
        pass


class _RecoverableError(Exception):
    """Carries an exception from the caller's own share of a call/set_attr until the workers answer."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


def _path(path: tuple) -> str:
    return "".join(f"[{key!r}]" for key in path)


def _fits_slab(value, count: int, leaf) -> bool:
    """Whether an action leaf's batch can go into its slab as it is: an ndarray of
    ``count`` rows of the leaf's shape, of a numeric dtype of at most 8 bytes."""
    return (isinstance(value, np.ndarray) and value.shape == (count, *leaf.shape)
            and value.dtype.kind in "biuf" and value.dtype.itemsize <= 8 and value.dtype.isnative)


# Gymnasium's own spaces without a fixed-size array form: their values travel on the pipes.
_PIPED_SPACES = (spaces.Text, spaces.Graph, spaces.Sequence, spaces.OneOf)


def _shared_observation_layout(space: Space) -> Layout:
    """The observation layout with ``shared_memory=True``: fixed-size leaves in shared
    memory, the rest (Text, Graph, Sequence, OneOf, custom spaces inside a Dict/Tuple) on
    the pipes.

    A custom space as the whole observation space leaves nothing to share: that raises
    the ``ValueError`` AsyncVectorEnv raises (pass ``shared_memory=False``).
    """
    if not isinstance(space, (spaces.Dict, spaces.Tuple, *_PIPED_SPACES, *_FIXED_SPACES)):
        raise ValueError(
            f"Using `shared_memory=True` with the custom observation space {space!r} (a "
            f"{type(space).__name__}, not one of Gymnasium's spaces) leaves nothing to share: set "
            "`shared_memory=False` to send its observations through pipes (custom spaces inside a "
            "Dict or Tuple work either way)."
        )
    return Layout(space, objects=True)
