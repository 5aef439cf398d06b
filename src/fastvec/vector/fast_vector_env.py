"""FastVectorEnv: Python envs in worker processes over one shared-memory block.

This module is the Gymnasium-facing API and its state machine; the processes and the
hand-offs with them live in :mod:`fastvec.vector._caller.pool`, what crosses the shared block each
step (actions in; observations, rewards, flags, infos out) in :mod:`fastvec.vector._caller.step_io`.
"""
from __future__ import annotations

import os
import sys
import time
import weakref
from typing import Any, Callable, Sequence

import numpy as np
from gymnasium import Env, Space, logger
from gymnasium.error import ResetNeeded
from gymnasium.spaces.utils import is_space_dtype_shape_equiv
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_differing_spaces, batch_space, create_empty_array

from fastvec.errors import AlreadyPendingCallError, NoAsyncCallError, SpacesDifferError
from fastvec.vector._caller.arguments import (check_env_fns, check_failure_arguments, check_no_ended_envs,
                                              check_synchronous, checked_batch_size, checked_count,
                                              checked_step_timeout, seeds_per_env, split_reset_options)
from fastvec.host import usable_cpus
from fastvec.vector._caller.pool import WorkerPool
from fastvec.vector._block.batch_tree import copy_batch, put_rows
from fastvec.vector._block.messages import Hello, PipeCommand
from fastvec.vector._worker.compiled_stacks import StackCompiler
from fastvec.vector._caller.step_io import Staging, layouts
from fastvec.vector._block.stats import summarize
from fastvec.vector._caller.compiled_step import StepDriver
from fastvec.vector._wait.policy import WaitSettings, wake_latency_s
from fastvec.vector._caller.worker_vector_env import CallState, WorkerVectorEnv

__all__ = ["FastVectorEnv"]


# Module aliases of the members the per-step path reads (as in fastvec.vector._block.protocol).
_DEFAULT, _WAITING_RESET, _WAITING_STEP = CallState.DEFAULT, CallState.WAITING_RESET, CallState.WAITING_STEP



class FastVectorEnv(WorkerVectorEnv):
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
            caller, and one process fewer competes for the cores). It is a little
            faster on small machines (``docs/benchmarks.md``), but an env in that share
            runs inside your training process: an env that calls ``os._exit``, segfaults
            or is killed takes the trainer down with it, and a hang there cannot honour
            ``step_wait(timeout=)``. Synchronous stepping only (``batch_size ==
            num_envs``). By default no env code runs in the calling process.
        wait: the wait policy, how the caller and the workers wait for each other
            (``docs/vector.md``, "How fastvec waits"). ``"auto"`` (default): a wait spins
            only while an answer is due, for as long as it measures answers take, then
            blocks; the trainer's idle OpenMP threads are released before each step or
            parked in its wait, whichever measures cheaper on this host. A stalled step
            costs your process no CPU. ``"release"``: the same, but the OpenMP threads are
            only released, never parked. ``"block"``: every wait blocks after its shortest
            spin, the workers' too, for hosts shared with other jobs (a sweep of trainers,
            a CPU quota): fastvec then uses a core only while it has work on it.
        worker_spin_us / parent_spin_us: tuning: how long a waiting worker / the caller spins
            at least before it blocks (``wait="block"``: none). Spinning answers in microseconds but takes a core;
            blocking frees it. A worker spins for the next step (about twice as long as
            the next command usually takes to come) only while the caller keeps at most
            one core busy between steps: up to 4 ms on another CPU than the caller's (an
            idle core, which would wake slowly), and on the caller's own CPU only while
            the caller steps back to back. A caller that computes on more cores (torch's
            intra-op threads) gets every core: workers then block at once. The caller
            spins through steps shorter than 200 µs on average.
        pin_workers: pin worker w to the w-th usable CPU. Default (None): only when the
            processes outnumber the usable CPUs (2 workers and the caller on 2 cores), and
            only while the caller steps back to back or computes on one core between
            steps: every process is then always runnable, and two workers that happened to
            share a core would step at half speed. While the caller keeps more than one core
            busy between steps (torch's threads) the workers leave their CPUs: a pinned
            worker cannot move off a core that a trainer's thread holds. ``False`` never
            pins, ``True`` always does (and warns once when the caller is first seen keeping
            more than one core busy between steps, as for the other settings bound to be
            slow there: ``docs/vector.md``).
        release_openmp_threads: keep the idle threads of the calling process's GNU OpenMP
            runtimes (torch's on Linux) off the workers' cores during each step. They
            otherwise spin for milliseconds after each parallel region, on the cores the
            workers need. While the caller runs a parallel region before most steps (a
            policy on torch's default threads), the step's wait runs inside a parallel
            region of that runtime whose other threads yield their cores while the answer
            is due and then block, so they are there for the trainer's next region;
            otherwise (or with ``wait="release"``/``"block"``) they are handed back before
            the step with OpenMP 5's ``omp_pause_resource_all``, and the next region starts
            them again. While other work wants the same CPUs (a second trainer, a busy
            process), neither: the runtime is made to spin its short count, as when it counts
            more OpenMP threads than CPUs. No setting of yours changes; with
            ``OMP_WAIT_POLICY=passive`` (or ``GOMP_SPINCOUNT=0``) the threads do not spin and
            are left alone. Default ``True``; ``False`` leaves them alone.
        env_failure: what a failure during a step does. ``"raise"`` (default): the env's
            exception (or :class:`~fastvec.errors.WorkerDiedError`) is raised and the vector
            env closes. ``"restart"``: an env whose ``step`` (or the autoreset inside one)
            raises is built again from its constructor, in its worker; a worker process that
            ends (a segfault, ``os._exit``, a kill) is started again with all its envs built
            anew. The step returns every other env's results as they came; each rebuilt env
            reports ``truncated=True``, ``terminated=False``, reward 0, and
            ``infos["env_restarted"]`` / ``infos["env_error"]`` (with their masks), with its
            last observation before the failure (NEXT_STEP, DISABLED: its next reset, the
            next step's autoreset or yours, is seeded from its last seed and its restart
            count) or at once its first one from that reset (SAME_STEP: the last one in
            ``final_obs``, the restart infos in ``final_info`` too). An env whose
            autoreset raises after a step that went well keeps that step's results (see
            ``docs/vector.md``). An env whose ``reset`` raises is built again and reset
            with the seed drawn from the one it was given (``infos["env_restarted"]`` in
            the reset's infos); so are all the envs of a worker whose process ends during
            a reset. A failure during ``call``/``set_attr`` and a rebuilt env's constructor
            that fails still raise; so does one in the caller's own share
            (``step_in_caller=True`` is refused).
            See ``docs/vector.md``, "Failures and restarts".
        max_restarts: with ``env_failure="restart"``, how many failures are recovered
            from in all; the next one raises as with ``"raise"``. Default 100.
        step_timeout: seconds (default None: no limit). A worker whose step takes longer
            counts as failed: with ``env_failure="restart"`` it is killed and started again
            (its envs report the restart, as above); otherwise it is killed, the vector env
            closes and ``TimeoutError`` names the env it was stepping. It bounds the steps of
            ``step``, ``step_async``/``step_wait`` and ``send``/``recv`` (seen within
            ``step_timeout``, or 0.1 s while other workers keep answering ``recv``).
        stats: keep counters in the shared block (default True): steps and resets per env,
            each worker's env time and waits, the caller's time in and between steps.
            :meth:`stats` reads them, and so does ``python -m fastvec.monitor PID`` from
            another process. False: nothing is counted. See ``docs/monitor.md``.
        compile_wrappers: run the wrapper stacks fastvec recognises compiled in the workers,
            with outputs identical to the Python wrappers' (default True): today, over ale-py's
            ``AtariEnv``, Gymnasium's ``AtariPreprocessing`` (and a ``FrameStackObservation``
            directly on it), or SB3's / CleanRL's Atari wrappers (``NoopResetEnv``,
            ``MaxAndSkipEnv`` or Gymnasium's ``MaxAndSkipObservation``, ``EpisodicLifeEnv``, ...);
            wrappers above them stay Python. :attr:`compiled_wrappers`
            says, per env, what was compiled or why not. ``False``: every env runs as its
            ``env_fn`` built it. See ``docs/atari.md``.

    Raises:
        TypeError: ``env_fns`` is not a non-empty sequence of callables, or bad
            ``num_workers``/``batch_size``/``pin_workers``/``max_restarts`` types.
        ValueError: bad ``num_workers``, ``batch_size``, ``observation_mode``,
            ``env_failure`` or ``max_restarts``, ``env_failure="restart"`` with
            ``step_in_caller=True``, or a custom observation space with ``shared_memory=True``.
        RuntimeError: the envs' spaces differ (see ``observation_mode``), or the platform
            is Windows (FastVectorEnv needs POSIX: Linux or macOS).
    """

    # Until __init__ has run: Gymnasium < 1.3's VectorEnv.__del__ closes an env whose
    # constructor raised (a bad keyword, say), and there is nothing to close then.
    _pool = None
    _stats = None
    _was_reset = False  # a reset was sent (see _set_spaces: the order some envs enforce)
    _order_enforced = False
    #: Which backend ``gym.make_vec(..., vectorization_mode="fastvec")`` chose and why (a short
    #: sentence, set by make_vec); ``None`` for a FastVectorEnv built directly.
    backend_reason: str | None = None
    # A call whose wait a KeyboardInterrupt ended stays pending, marked ``_interrupted``: the
    # workers go on with it, and the next command finishes it first (_finish_interrupted).
    _RESUMES_INTERRUPTED = True

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
        wait: str = "auto",
        worker_spin_us: float = 50.0,
        parent_spin_us: float = 20.0,
        pin_workers: bool | None = None,
        release_openmp_threads: bool = True,
        env_failure: str = "raise",
        max_restarts: int = 100,
        step_timeout: float | None = None,
        stats: bool = True,
        compile_wrappers: bool = True,
    ) -> None:
        if sys.platform == "win32":
            # Its workers get the shared block by file-descriptor passing (SCM_RIGHTS) and are
            # watched with POSIX signals; Windows has neither.
            raise RuntimeError(
                "FastVectorEnv runs on Linux and macOS only; on Windows use "
                "gymnasium.vector.AsyncVectorEnv, fastvec.NativeVectorEnv (compiled envs) or WSL")
        env_fns = check_env_fns(env_fns, type(self).__name__)
        self.env_fns = env_fns
        self.compile_wrappers = bool(compile_wrappers)
        self.num_envs = len(env_fns)
        if num_workers is None:
            num_workers = min(len(usable_cpus()), self.num_envs)
        self.num_workers = checked_count(num_workers, self.num_envs, "num_workers")
        self.shared_memory = bool(shared_memory)
        self.copy = bool(copy)
        self.context = context
        self.daemon = daemon
        self.observation_mode = observation_mode
        self.autoreset_mode = autoreset_mode if isinstance(autoreset_mode, AutoresetMode) else AutoresetMode(autoreset_mode)
        self._autoreset_disabled = self.autoreset_mode is AutoresetMode.DISABLED  # read on every step
        self._same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        if not (observation_mode in ("same", "different") or (isinstance(observation_mode, tuple) and len(observation_mode) == 2)):
            raise ValueError(
                f"Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and batch "
                f"observation space, actual got {observation_mode}"
            )
        self.batch_size = checked_batch_size(batch_size, self.num_envs, self.num_workers, "worker")
        if step_in_caller and self.batch_size < self.num_envs:
            raise ValueError("step_in_caller=True needs synchronous stepping (batch_size == num_envs)")
        self.step_in_caller = bool(step_in_caller)
        if pin_workers is not None and not isinstance(pin_workers, bool):
            raise TypeError(f"pin_workers must be None, True or False, got {pin_workers!r}")
        check_failure_arguments(env_failure, max_restarts, self.step_in_caller)
        step_timeout = checked_step_timeout(step_timeout)
        #: the wait policy in force (``wait`` and the tuning keywords, resolved)
        self.wait_settings = WaitSettings.resolve(wait, worker_spin_us=worker_spin_us, parent_spin_us=parent_spin_us,
                                                  release_openmp_threads=bool(release_openmp_threads),
                                                  step_in_caller=self.step_in_caller,
                                                  wake_s=wake_latency_s() if wait in ("auto", "release") else None)
        self.wait = wait

        self._start(env_fns, context=context, daemon=daemon, pin_workers=pin_workers,
                    release_openmp_threads=release_openmp_threads, env_failure=env_failure,
                    max_restarts=max_restarts, step_timeout=step_timeout, stats=stats)
        self._init_workers(self._pool.starts, self._pool.stops)
        self._init_step_state()

    def _start(self, env_fns: list, *, context, daemon, pin_workers, release_openmp_threads, env_failure, max_restarts,
               step_timeout, stats) -> None:
        """Start the workers, read their envs' spaces, lay out and hand over the shared block, and
        set up what each step reads and writes there (closing the workers if any of it fails)."""
        built_by = [StackCompiler(fn) for fn in env_fns] if self.compile_wrappers else env_fns
        self._pool = WorkerPool(self, built_by, self.num_workers, autoreset_mode=self.autoreset_mode,
                                step_in_caller=self.step_in_caller, context=context, daemon=daemon,
                                waits=self.wait_settings, pin_workers=pin_workers,
                                release_openmp_threads=bool(release_openmp_threads),
                                env_failure=env_failure, max_restarts=max_restarts, step_timeout=step_timeout)
        self._restarts = self._pool.restarts  # (None: failures raise)
        self._last_obs = None  # with restarts: every env's last observation (what a failed one reports)
        try:
            self._set_spaces(self._pool.hellos())
            obs_layout, act_layout, sections, size = layouts(
                self.single_observation_space, self.single_action_space, self.num_envs, self.num_workers,
                self.shared_memory)
            buffer = self._pool.attach(sections, size, obs_layout, act_layout, stats=bool(stats))
            self._stats = self._pool.stats  # (None: stats=False)
            self._stats_before: tuple[float, dict] | None = None  # (when, snapshot) of the last stats()
            self._stats_created = time.perf_counter()
            self._step_end_ns = 0  # when the last step returned (perf_counter_ns), 0: none yet
            self._async_step_ns = 0  # when step_async sent the step step_wait waits for
            self._caller_totals = [0, 0, 0, 0]  # (the caller's row, kept as exact Python ints)
            self._staging = Staging(buffer, obs_layout, act_layout, self.single_observation_space,
                                    self.action_space, self._pool.starts, self._pool.worker_of_env, self.copy)
            self._pool.views.append(weakref.ref(self._staging))
            # step()'s common case, compiled, where it can apply (see compiled_step); not for
            # a subclass with a step_async or step_wait of its own, which step() must call
            self._driver = None
            if (self._staging.action_slab is not None and self.batch_size == self.num_envs
                    and not self._autoreset_disabled and type(self).step_async is FastVectorEnv.step_async
                    and type(self).step_wait is FastVectorEnv.step_wait):
                self._driver = StepDriver(self._pool, self._staging)
                self._pool.views.append(weakref.ref(self._driver))
        except BaseException:
            self._pool.shutdown(terminate=True)
            raise

    def _init_step_state(self) -> None:
        """The bookkeeping of steps and of send/recv: which workers have a command out, which
        envs a masked reset left out, and (with restarts) every env's last observation."""
        self._pending: np.ndarray = np.zeros(self.num_workers, dtype=np.uint8)
        self._all_workers = np.ones(self.num_workers, dtype=np.uint8)
        # send/recv bookkeeping: workers with a command out (those handed back by recv: _ready).
        self._inflight = np.zeros(self.num_workers, dtype=np.uint8)
        # envs a masked async_reset left out on the workers it reset, until recv hands them back
        # (their flags say nothing new; send cannot reach them before, their workers being out);
        # _any_left_out: whether there are any (recv looks only then); _recv_left_out: those
        # of the last recv's envs (None: none).
        self._left_out = np.zeros(self.num_envs, dtype=np.bool_)
        self._any_left_out = False
        self._recv_left_out: np.ndarray | None = None
        self._envs_per_worker = [stop - start for start, stop in zip(self._pool.starts, self._pool.stops)]
        self._envs_out = 0  # (the envs of the workers in _inflight)
        self._async_used = False  # set by send/async_reset; spares step() a check
        self._next_worker = 0  # where recv's round-robin scan starts
        if self._restarts is not None:
            try:
                self._last_obs = create_empty_array(self.single_observation_space, self.num_envs)
            except Exception:  # (a space Gymnasium cannot batch: the rows then keep what the step left)
                self._last_obs = None

    def _set_spaces(self, hellos: list[Hello]) -> None:
        """Spaces, metadata and render mode from the envs' hellos; their spaces must agree."""
        spaces = [pair for hello in hellos for pair in hello.spaces]
        first_obs_space, first_act_space = spaces[0]
        # (a step before the first reset is refused here, without closing anything, when an env
        # would refuse it itself: its worker would end on the error)
        self._order_enforced = any(hello.enforces_reset_order for hello in hellos)
        self.metadata = dict(hellos[0].metadata)
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = hellos[0].render_mode
        #: per env: ``"compiled: <what>"`` (its wrapper stack runs compiled in its worker),
        #: ``"not compiled: <why>"`` (a stack of a kind fastvec compiles, left in Python), or
        #: None (nothing of a kind fastvec compiles); see ``compile_wrappers``
        self.compiled_wrappers: tuple[str | None, ...] = tuple(note for hello in hellos for note in hello.compiled)
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
                raise SpacesDifferError(
                    "FastVectorEnv(..., observation_mode='same') however some of the sub-environments "
                    f"observation spaces are not equivalent. Env {i}'s {obs_space} differs from env 0's "
                    f"{self.single_observation_space}. If this is intentional, use "
                    "`observation_mode='different'` instead.", i, "observation", obs_space, self.single_observation_space
                )
            if mode != "same" and not is_space_dtype_shape_equiv(obs_space, self.single_observation_space):
                raise RuntimeError(
                    "FastVectorEnv(..., observation_mode='different' or custom space) however the "
                    f"sub-environment's observation spaces do not share a common shape and dtype (env {i}'s "
                    f"{obs_space} against {self.single_observation_space})."
                )
            if act_space != self.single_action_space:
                raise SpacesDifferError(
                    f"Some environments have an action space different from `{self.single_action_space}` "
                    f"(env {i}'s is {act_space}). In order to batch actions, the action spaces from all "
                    "environments must be equal.", i, "action", act_space, self.single_action_space
                )

    @property
    def recv_left_out(self) -> np.ndarray | None:
        """After :meth:`recv`: a bool per env it returned, True for an env that a masked
        ``async_reset`` (``options={"reset_mask": ...}``) left out, whose row therefore holds
        what that env had before (not a reset's result); ``None`` when it left out none.

        Example:
            >>> import gymnasium as gym, numpy as np
            >>> envs = FastVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=1)
            >>> _ = envs.reset(seed=0)
            >>> envs.async_reset(options={"reset_mask": np.array([True, False])})
            >>> _ = envs.recv()
            >>> envs.recv_left_out
            array([False,  True])
            >>> envs.close()
        """
        return self._recv_left_out

    @property
    def closed(self) -> bool:
        """Whether the vector env is closed (by :meth:`close`, or by a worker's fault)."""
        return self._pool is None or self._pool.closed

    @closed.setter
    def closed(self, value: bool) -> None:
        if self._pool is not None:
            self._pool.closed = bool(value)

    @property
    def processes(self) -> list:
        """The worker processes (the caller's own share, if any, has none)."""
        return self._pool.processes if self._pool is not None else []

    @property
    def restarts(self) -> np.ndarray:
        """How many times each env was built again after a failure (``env_failure="restart"``;
        all zeros otherwise)."""
        if self._restarts is None:
            return np.zeros(self.num_envs, dtype=np.int64)
        return self._restarts.counts.copy()

    # -- the step -----------------------------------------------------------------------
    def step(self, actions):
        """Step every env with its action; returns (obs, rewards, terminations, truncations, infos).

        A KeyboardInterrupt (Ctrl-C) that ends the wait leaves the workers stepping. The next
        ``step`` (or ``step_async``, ``send``, ``call``...) first waits for that step and drops
        its results, with a warning, then steps with its own actions; :meth:`step_wait`
        instead returns them, and :meth:`reset` waits for them and then resets
        (``docs/vector.md``, "Ctrl-C"). Before the first :meth:`reset`, raises
        ``ResetNeeded`` where an env would refuse the step itself (``gymnasium.make``'s
        ``OrderEnforcing``), without sending anything: the vector env stays open.
        """
        if not self._was_reset and self._order_enforced:
            self._refuse_step_before_reset("step")
        if self._stats is None:
            return self._step(actions)
        return self._counted(self._step, actions)

    def _ready_to_send_steps(self, what: str) -> None:
        """The checks before ``what`` (``step_async`` or ``send``) sends steps: the vector env
        is open, an interrupted command is finished first, no call is pending, and the envs
        were reset where they would refuse a step."""
        self._assert_is_running()
        if self._interrupted:
            self._finish_interrupted(what)
        self._assert_no_pending_call(what)
        if not self._was_reset and self._order_enforced:
            self._refuse_step_before_reset(what)

    def _refuse_step_before_reset(self, what: str) -> None:
        """Raise ResetNeeded (ClosedEnvironmentError once closed): ``what`` (a step) would
        reach envs that refuse a step before their first reset, and their workers would end."""
        self._assert_is_running()
        raise ResetNeeded(f"Cannot call `{what}` before calling `reset` on {type(self).__name__}: its envs were never "
                          "reset (nothing was sent, and the vector env stays open: reset it and go on)")

    def _counted(self, call: Callable[[Any], tuple], arg: Any) -> tuple:
        """``call(arg)`` (a step, or a recv), counted into the caller's row as it returns."""
        start = time.perf_counter_ns()
        try:
            out = call(arg)
        except BaseException:
            self._step_end_ns = time.perf_counter_ns()  # (its time is not the trainer's)
            raise
        self._count_step(start, len(out[1]))  # (one reward per env transition)
        return out

    def _count_step(self, start_ns: int, transitions: int) -> None:
        """Add a step (``step``, ``step_async`` + ``step_wait``, or ``recv``) that began at
        ``start_ns`` to the caller's row of the statistics region (``protocol.CallerStat``)."""
        end = time.perf_counter_ns()
        totals = self._caller_totals
        totals[0] += 1
        totals[1] += transitions
        totals[2] += end - start_ns
        if self._step_end_ns:
            # (an interrupted step, finished by step_wait, started before that interruption)
            totals[3] += max(start_ns - self._step_end_ns, 0)
        self._step_end_ns = end
        caller = None if self._stats is None else self._stats.caller
        if caller is not None:  # (None: the vector env closed, e.g. after a failure in this step)
            caller[:4] = totals

    def stats(self) -> dict[str, Any]:
        """Where the time went since the last call (or since the vector env was made).

        Returns:
            A dict: ``wall_s`` (the window), ``steps`` and ``sps`` (env transitions per
            second, ``step``, ``step_async``/``step_wait`` and ``recv`` together),
            ``in_step_s`` and ``between_steps_s`` (the caller's time inside steps and between
            them, the trainer's), that time's split into ``env_share`` (waiting for the envs:
            the busiest worker's env time), ``handoff_share`` (the rest of the time in steps)
            and ``trainer_share``, ``workers`` (per worker: ``envs``, ``commands``, ``step_s``
            and ``wait_s``, ``utilisation`` (its envs' share of the wall time),
            ``step_us_mean`` and the ``step_us_p50``/``step_us_p99`` of its commands, upper
            bucket edges of a power-of-two histogram, ``pipe_messages`` and ``pipe_bytes``
            over its pipe, both ways, and ``restarts`` of its process), ``env_steps``,
            ``env_resets`` (autoresets included) and ``env_restarts`` (per env),
            ``pipe_messages``, ``pipe_bytes`` and ``restarts`` (failures recovered from) in all,
            ``host`` (``contended``: whether other work on this host wants the vector env's
            CPUs, so that its waits block and its workers move freely; ``other_cores``: how
            much of them it takes, cores; None where not measured: no ``/proc``, or
            ``wait="block"`` with ``release_openmp_threads=False``), ``wake_us`` (what a wake-up from a blocked wait costs on this host,
            measured once per process, microseconds; the spins are at least that long; None
            where not measured: ``wait="block"``, one usable CPU, no futex), and ``advice`` (sentences naming a slow worker, a trainer that holds
            most of the time, steps that go through the pipes, restarts, a contended host).

        Raises:
            RuntimeError: the vector env was made with ``stats=False``, or is closed.

        Example:
            >>> import gymnasium as gym
            >>> import numpy as np
            >>> from fastvec import FastVectorEnv
            >>> envs = FastVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(4)], num_workers=2)
            >>> _ = envs.reset(seed=0)
            >>> for _ in range(10):
            ...     _ = envs.step(np.zeros(4, dtype=np.int64))
            >>> report = envs.stats()
            >>> report["steps"], sum(w["commands"] for w in report["workers"])  # (2 workers)
            (10, 20)
            >>> sum(report["env_steps"]) + sum(report["env_resets"])  # (a NEXT_STEP autoreset is a reset)
            44
            >>> envs.close()
        """
        self._assert_is_running()
        if self._stats is None or self._stats.caller is None:
            raise RuntimeError("this FastVectorEnv was made with stats=False: it counts nothing")
        now = time.perf_counter()
        snapshot = self._stats.snapshot()
        when, before = self._stats_before or (self._stats_created, None)
        self._stats_before = (now, snapshot)
        report = summarize(snapshot, before, now - when)
        report["host"] = host = self._pool.waits.host_report()
        wake_s = self.wait_settings.wake_s
        report["wake_us"] = None if wake_s is None else round(wake_s * 1e6, 1)
        if host is not None and host["contended"]:
            report["advice"].append(
                f"other work takes {host['other_cores']:.1f} cores' worth of the CPUs this vector env runs on: "
                "its waits block and its workers are not pinned until that work ends (see docs/vector.md, "
                "\"How fastvec waits\")")
        return report

    def _step(self, actions):
        driver = self._driver
        if (driver is not None and self._state is _DEFAULT
                and not (self._async_used and self._inflight.any())):
            # The compiled common case. While the step is out the state is step_async's, so
            # that an interrupted wait can be finished by step_wait, as in the general path.
            self._state, self._pending = _WAITING_STEP, self._pool.remote_mask
            try:
                done = driver.step(actions)
            except BaseException as exc:
                if driver.pending:  # (this step was sent)
                    if isinstance(exc, KeyboardInterrupt):
                        self._interrupted = True  # (the step is out: the next command finishes it)
                else:  # (nothing was sent)
                    self._state = _DEFAULT
                raise
            self._state = _DEFAULT  # (nothing was sent, or the wait is over)
            if done:
                if self._restarts is None:
                    return driver.results()
                return self._mark_restarts(driver.results())
        if self._interrupted:
            self._finish_interrupted("step")
        self.step_async(actions)
        # step_wait() without its checks, which step_async has just made true
        return self._step_results(self._finish_pending("step_wait", None))

    def step_async(self, actions) -> None:
        """Send the actions to the workers and return at once (AsyncVectorEnv API).

        After a KeyboardInterrupt ended a wait (``step``, ``step_wait``, ``reset``, ...), the
        interrupted command is first finished and its results dropped, with a warning.
        """
        self._ready_to_send_steps("step_async")
        check_synchronous("FastVectorEnv", self.batch_size, self.num_envs)
        if self._async_used and self._inflight.any():
            raise AlreadyPendingCallError("send/recv has commands in flight: recv() them first", "recv")
        if self._autoreset_disabled:
            check_no_ended_envs(self._autoreset_envs)
        pool, staging = self._pool, self._staging
        self._async_step_ns = time.perf_counter_ns()  # (step_wait counts the step from here)
        per_env = staging.write_actions(actions)
        if per_env is None:
            staging.publish_action_dtypes(pool.all_workers)
        # (the caller's own share, if any, steps with its rows of ``actions`` as they came,
        # as SyncVectorEnv hands them out, when they went into the slab unchanged)
        pool.start_steps(pool.all_workers, per_env, direct=staging.direct_actions, lockstep=True)
        self._pending = pool.remote_mask
        self._state = _WAITING_STEP

    def step_wait(self, timeout: float | None = None):
        """Wait for the step sent by :meth:`step_async`; ``TimeoutError`` after ``timeout`` seconds.

        Also returns the results of a ``step`` whose wait a KeyboardInterrupt ended."""
        out = self._step_results(self._collect(_WAITING_STEP, "step_wait", timeout))
        if self._stats is not None and self._async_step_ns:
            self._count_step(self._async_step_ns, self.num_envs)
            self._async_step_ns = 0
        return out

    def _step_results(self, infos: dict) -> tuple:
        """The step's (obs, rewards, terminations, truncations, infos), once every env has stepped."""
        staging = self._staging
        if self._autoreset_disabled:
            np.logical_or(staging.terminations, staging.truncations, out=self._autoreset_envs)
        results = (
            staging.observations(),
            staging.rewards.copy(),
            staging.terminations.copy(),
            staging.truncations.copy(),
            infos,
        )
        return results if self._restarts is None else self._mark_restarts(results)

    def _mark_restarts(self, results: tuple) -> tuple:
        """With ``env_failure="restart"``: a step's results with the envs rebuilt during it
        marked (see ``env_failure``), and every env's observation kept for the next one."""
        obs, rewards, terminations, truncations, infos = results
        self._restarts.learn(infos)
        obs = self._last_of_rebuilt(obs, truncations, infos)
        if self._restarts.unreported:
            obs, infos = self._restarts.report(obs, self._last_obs, infos, self.num_envs, same_step=self._same_step,
                                               space=self.single_observation_space)
        if self._last_obs is not None:
            self._last_obs = copy_batch(obs, self.single_observation_space)
        return obs, rewards, terminations, truncations, infos

    def _last_of_rebuilt(self, obs, truncations: np.ndarray, infos: dict, env_ids: list | None = None):
        """NEXT_STEP and DISABLED: the rows of the envs a worker rebuilt after their step raised
        (``env_restarted`` and truncated) get the observations this vector env last returned
        for them, which it kept: the env's own array may have changed in place before it
        raised. ``env_ids``: the env of each row (default: row k is env k)."""
        flags = infos.get("env_restarted")
        if flags is None or self._same_step or self._last_obs is None:
            return obs
        rows = np.flatnonzero(np.asarray(flags, bool) & np.asarray(truncations, bool)).tolist()
        if not rows:
            return obs
        envs = rows if env_ids is None else [env_ids[r] for r in rows]
        return put_rows(obs, rows, self._last_obs, envs, self.single_observation_space)

    def _start_steps(self, workers, per_env: list | None, env_ids=None) -> None:
        if per_env is None:
            self._staging.publish_action_dtypes(workers)
        self._pool.start_steps(workers, per_env, env_ids)

    def _collect(self, expected: CallState, caller: str, timeout: float | None) -> dict[str, Any]:
        """Finish the pending ``expected`` call (step or reset) for ``caller`` (its name, for
        errors): wait, then build the infos."""
        self._assert_pending(expected, caller)
        return self._finish_pending(caller, timeout)

    def _finish_pending(self, caller: str, timeout: float | None) -> dict[str, Any]:
        """Wait for the pending step or reset (already checked), then build the infos. A
        KeyboardInterrupt leaves it pending, marked interrupted (see :meth:`_finish_interrupted`)."""
        try:
            replies, infos_seen = self._pool.wait(self._pending, timeout, caller)
        except KeyboardInterrupt:
            self._interrupted = True
            raise
        self._state = _DEFAULT
        self._interrupted = False
        return self._staging.take_replies(replies, self._staging.all_env_rows, infos_seen)

    # -- after a KeyboardInterrupt ------------------------------------------------------------
    def _finish_interrupted(self, caller: str, warn: bool | None = None) -> tuple[CallState, Any]:
        """Finish the call that a KeyboardInterrupt left pending (its wait was interrupted:
        the workers go on with it), before ``caller`` sends a new command; returns (its state,
        its results: what ``step_wait``/``reset_wait``/``call_wait`` return). The results are
        dropped by the caller, so a warning says so (``warn``; default: unless ``caller`` is a
        reset, which drops them anyway). Another KeyboardInterrupt leaves it pending again."""
        state = self._state
        self._interrupted = False
        if state is _DEFAULT:  # (nothing is pending any more)
            return state, None
        try:
            if state is _WAITING_STEP:
                out = self.step_wait()
            elif state is _WAITING_RESET:
                out = self.reset_wait()
            else:
                out = self.call_wait()
        except KeyboardInterrupt:
            self._interrupted = self._state is not _DEFAULT
            raise
        if warn is None:
            warn = not caller.startswith("reset")
        if warn:
            ended = ""
            if state is _WAITING_STEP and self._autoreset_disabled and self._autoreset_envs.any():
                ended = (f"; envs {np.flatnonzero(self._autoreset_envs).tolist()} ended in it "
                         "(autoreset_mode=DISABLED): reset them before stepping again")
            logger.warn(f"`{caller}` first finished the `{state.value}` that a KeyboardInterrupt interrupted and "
                        f"dropped its results (call `{state.value}_wait()` after the interrupt to get them){ended}")
        return state, out

    # -- reset ------------------------------------------------------------------------------
    def reset_async(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        """Send a reset to the workers and return at once (AsyncVectorEnv API).

        After a KeyboardInterrupt ended a wait, the interrupted command is first finished
        (its results dropped: the reset replaces them)."""
        self._assert_is_running()
        if self._interrupted:
            self._finish_interrupted("reset_async")
        self._assert_no_pending_call("reset_async", period=False)
        seeds = seeds_per_env(seed, self.num_envs)
        options, mask = split_reset_options(options, self.num_envs)
        if mask is not None and self._inflight.any():
            left = [w for w in np.flatnonzero(self._inflight).tolist()
                    if not np.asarray(mask[self._starts[w]:self._stops[w]]).all()]
            if left:
                # (the drain below would drop the results of envs this reset does not reset)
                raise AlreadyPendingCallError(
                    f"the envs of workers {left} are stepping and the reset_mask does not reset them all: "
                    f"recv() them before a masked reset", "recv")
        if self._restarts is not None:
            self._restarts.remember_seeds([s if mask is None or mask[k] else None for k, s in enumerate(seeds)])
        self._drain()
        pending = np.zeros(self.num_workers, dtype=np.uint8)
        self._left_out[:] = False
        for w in range(self.num_workers):
            rows = slice(self._starts[w], self._stops[w])
            worker_mask = None if mask is None else mask[rows].tolist()
            if worker_mask is not None and not any(worker_mask):
                self._staging.clear_infos(rows)
                continue
            self._pool.dispatch(w, PipeCommand.RESET, (seeds[rows], options, worker_mask))
            pending[w] = 1
            if worker_mask is not None:
                self._left_out[rows] = ~np.asarray(worker_mask, dtype=np.bool_)
        self._any_left_out = bool(self._left_out.any())
        if mask is None:
            self._autoreset_envs[:] = False
        else:
            self._autoreset_envs[mask] = False
        self._pending = pending
        self._state = _WAITING_RESET
        self._was_reset = True

    def reset_wait(self, timeout: float | None = None):
        """Wait for the reset sent by :meth:`reset_async` (or a ``reset`` whose wait a
        KeyboardInterrupt ended); returns (obs, infos)."""
        infos = self._collect(_WAITING_RESET, "reset_wait", timeout)
        self._left_out[:] = False  # (only recv hands back the envs an async_reset left out)
        self._any_left_out = False
        obs = self._staging.observations()
        if self._restarts is not None:
            self._restarts.learn(infos)  # (envs rebuilt because their reset raised)
            if self._restarts.unreported:  # (workers whose process ended during the reset)
                obs, infos = self._restarts.report(obs, None, infos, self.num_envs, space=self.single_observation_space)
        if self._last_obs is not None:
            self._last_obs = copy_batch(obs, self.single_observation_space)
        return obs, infos

    # -- async: send / recv ------------------------------------------------------------
    def async_reset(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        """Start resetting every env; their first observations come from :meth:`recv` (EnvPool API)."""
        self.reset_async(seed=seed, options=options)
        self._inflight = self._pending.copy()
        self._envs_out = sum(n for n, out in zip(self._envs_per_worker, self._inflight.tolist()) if out)
        self._async_used = True
        self._ready[:] = 0
        self._state = _DEFAULT

    def send(self, actions, env_ids=None) -> None:
        """Start stepping the envs ``env_ids`` with ``actions`` (rows in ``env_ids`` order).

        ``env_ids`` (default: every env :meth:`recv` has handed back since it was last
        sent actions, or all envs after :meth:`reset`) must be whole workers' envs that are
        not already stepping: in practice, the ``env_id`` of one or more earlier ``recv``
        results. With ``autoreset_mode=DISABLED``, an env that ended must be reset first
        (``AssertionError``, as a step raises). After a KeyboardInterrupt ended a ``step``
        (or ``reset``, ``call``), that command is first finished and its results dropped.
        """
        self._ready_to_send_steps("send")
        workers, rows = self._whole_workers(env_ids)
        busy = [w for w in workers if self._inflight[w]]
        if busy:
            raise ValueError(f"envs of workers {busy} are still stepping: recv() them before sending them new actions")
        if self._autoreset_disabled:
            ended = np.zeros(self.num_envs, dtype=np.bool_)
            ended[rows] = self._autoreset_envs[rows]
            check_no_ended_envs(ended)
        per_env = self._staging.write_actions(actions, rows=rows)
        self._start_steps(workers, per_env, None if per_env is None else np.arange(self.num_envs)[rows])
        for w in workers:
            self._inflight[w] = 1
            self._ready[w] = 0
            self._envs_out += self._envs_per_worker[w]
        self._async_used = True

    def recv(self, timeout: float | None = None):
        """Wait for ``batch_size`` envs to finish; returns their (obs, rewards, terminations, truncations, infos).

        ``infos["env_id"]`` holds the env indices of the rows, in order (whole
        workers, by worker index). Rewards are 0 and flags False for envs whose
        last command was a reset. Raises ``TimeoutError`` after ``timeout`` seconds. A
        KeyboardInterrupt leaves the commands in flight: the next ``recv`` returns them.
        """
        if self._stats is None:
            return self._recv(timeout)
        return self._counted(self._recv, timeout)

    def _recv(self, timeout: float | None):
        self._assert_is_running()
        if not self._envs_out:
            raise NoAsyncCallError("Calling `recv` with nothing sent: call `send` or `async_reset` first.", "recv")
        want = min(self.batch_size, self._envs_out)
        got, replies, infos_seen = self._pool.wait_some(self._inflight, want, self._next_worker, timeout)
        self._next_worker = got[-1] + 1 if got else self._next_worker
        for w in got:
            self._inflight[w] = 0
            self._ready[w] = 1
            self._envs_out -= self._envs_per_worker[w]
        env_ids, rows = self._received_envs(got)
        staging = self._staging
        infos = staging.take_replies(replies, env_ids, infos_seen)
        infos["env_id"] = env_ids
        obs = staging.observation_rows(rows)
        if self._restarts is not None:
            env_list = env_ids.tolist()
            self._restarts.learn(infos, env_ids)
            obs = self._last_of_rebuilt(obs, staging.truncations[rows], infos, env_list)
            if self._restarts.unreported:
                obs, infos = self._restarts.report(obs, self._last_obs, infos, len(env_list),
                                                   {e: k for k, e in enumerate(env_list)}, same_step=self._same_step,
                                                   space=self.single_observation_space)
            if self._last_obs is not None:
                self._last_obs = put_rows(self._last_obs, env_list, obs, list(range(len(env_list))),
                                          self.single_observation_space)
        self._recv_left_out = None
        if self._any_left_out:
            left_out = self._left_out[env_ids]
            if left_out.any():
                self._left_out[env_ids] = False
                self._any_left_out = bool(self._left_out.any())
                restarted = infos.get("env_restarted")
                if restarted is not None:  # (a worker that ended in the reset: all its envs were reset again)
                    left_out &= ~np.asarray(restarted, dtype=np.bool_)
                self._recv_left_out = left_out if left_out.any() else None
        if self._autoreset_disabled:
            self._note_ended(env_ids, rows)
        return (obs, *self._step_rows(rows, staging.rewards, staging.terminations, staging.truncations), infos)

    def _note_ended(self, env_ids: np.ndarray, rows) -> None:
        """DISABLED: which of the envs ``env_ids`` (block rows ``rows``) a recv hands back
        ended, so that sending them actions before a reset raises as a step would. An env a
        masked reset left out keeps what it was."""
        staging = self._staging
        ended = staging.terminations[rows] | staging.truncations[rows]
        if self._recv_left_out is None:
            self._autoreset_envs[env_ids] = ended
        else:
            stepped = ~self._recv_left_out
            self._autoreset_envs[env_ids[stepped]] = ended[stepped]

    def _drain(self, timeout: float | None = None, caller: str = "recv") -> None:
        """Wait out send/recv commands still in flight (their results are dropped, but the
        envs a worker rebuilt in them are counted, as their restarts were spent)."""
        if not self._inflight.any():
            return
        drained = self._inflight.copy()
        replies, infos_seen = self._pool.wait(drained, timeout, caller)
        # (the replies are read all the same: a worker sends a new info signature or an
        # object part of an observation once, and counts on the caller having it)
        env_ids = self._env_ids_of(np.flatnonzero(drained))
        infos = self._staging.take_replies(replies, env_ids, infos_seen)
        if self._restarts is not None:
            self._restarts.learn(infos, env_ids)
        self._inflight[:] = 0
        self._envs_out = 0
        self._ready[:] = 1

    # -- call / attributes (the rest: WorkerVectorEnv) ----------------------------------------
    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """Set an attribute on every env: one value for all, or a list/tuple of ``num_envs`` values."""
        values = self._values_per_env(values)
        self._start_call("setattr", lambda w: (name, list(values[self._starts[w]:self._stops[w]])), "set_attr")
        self._finish_call(None, "set_attr")

    def _send_command(self, command: str, payload_of: Callable[[int], tuple]) -> None:
        if self._async_used and self._inflight.any():
            # (their workers answer the steps first; the call's replies would be read as theirs)
            raise AlreadyPendingCallError("send/recv has commands in flight: recv() them first", "recv")
        pool = self._pool
        for w in range(self.num_workers):
            pool.dispatch(w, command, payload_of(w))
        self._pending = self._all_workers

    def _wait_replies(self, timeout: float | None, caller: str) -> list[tuple[int, Any]]:
        replies, _ = self._pool.wait(self._pending, timeout, caller)
        return replies

    # -- closing ------------------------------------------------------------------------------
    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        """End the workers and free the shared memory.

        Args:
            timeout: seconds to let a pending call (or send/recv steps in flight, whose
                results are dropped) finish and the workers close their envs and exit before
                they are terminated (default: 5 s).
            terminate: end the workers at once, without letting them close their envs.
        """
        if self._pool is None:
            return
        timeout = 5.0 if timeout is None else timeout
        if getattr(self, "_state", _DEFAULT) is not _DEFAULT:
            logger.warn(f"Calling `close` while waiting for a pending call to `{self._state.value}` to complete.")
            if not terminate and not self._pool.closed:
                try:
                    self._pool.wait(self._pending, timeout, "close")
                except Exception:
                    terminate = True
            self._state = _DEFAULT
            self._interrupted = False
        # send/recv steps still in flight (the usual state of an EnvPool-style loop) finish
        # first, so that every worker is idle when CLOSE comes and closes its envs. (A busy
        # worker gets no CLOSE: it would be joined until the timeout and then terminated, its
        # envs never closed.) _inflight is absent if __init__ failed early.
        if not terminate and not self._pool.closed and hasattr(self, "_inflight"):
            try:
                self._drain(timeout, "close")
            except Exception:
                terminate = True
        self._pool.shutdown(terminate=terminate, timeout=timeout)

    def __repr__(self) -> str:
        if self.spec is None:
            return f"FastVectorEnv(num_envs={self.num_envs}, num_workers={getattr(self, 'num_workers', '?')})"
        return f"FastVectorEnv({self.spec.id}, num_envs={self.num_envs}, num_workers={self.num_workers})"
