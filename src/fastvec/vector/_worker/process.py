"""Worker side: what runs inside a FastVectorEnv worker process.

A worker owns a contiguous range of envs ``[first, first + len(env_fns))``. It
builds them, reports their spaces, maps the shared buffer, then loops: wait for
a command on its control row, run it for each of its envs in turn, write the
results into the buffer, mark the command done.

Autoreset follows SyncVectorEnv exactly (the per-env bookkeeping lives here).
What has no place in the buffer travels on the worker's pipe, in one message
beside the command's result and only when there is something to send: the
observation parts without a fixed-size form (object leaves), new info signatures
and info values that are not numbers (see :mod:`fastvec.vector._infos.codec`).
"""
from __future__ import annotations

import functools
import logging
import os
import reprlib
import signal
import sys
import time
import traceback
from typing import Any, Callable

import numpy as np
from gymnasium.vector import AutoresetMode

from fastvec.vector._block import handoff
from fastvec.vector._worker.compiled_stacks import compile_note
from fastvec.vector._worker.env_loop import EnvLoop
from fastvec.vector._block import protocol
from fastvec.vector._infos.codec import InfoWriter
from fastvec.vector._block.protocol import (AUTORESET_CODES, LIVENESS_INTERVAL, RECOVERABLE, Command, Status, Word,
                                            WorkerStat)
from fastvec.vector._block.protocol import CMD_STEP as _STEP
from fastvec.vector._block.protocol import CMD_STEP_PIPE as _STEP_PIPE
from fastvec.vector._block.protocol import STATUS_INFOS as _INFOS
from fastvec.vector._block.protocol import STATUS_MESSAGE as _MESSAGE
from fastvec.vector._block.protocol import STATUS_OK as _OK
from fastvec.vector._block.restarts import RestartState, derived_seed
from fastvec.vector._block.messages import Attach, ErrorReport, Hello, PipeCommand, Ready
from fastvec.vector._block.shared_buffer import SharedBuffer, receive
from fastvec.vector._block.stats import MAGIC, StatsRegion
from fastvec.vector._worker.command_loop import StepServer, step_bucket, watch_parent
from fastvec.vector._wait.policy import WorkerWaits

# The phase an error report names when an env's constructor raised as the env was built
# again after a failure: the caller raises it at once (retrying would fail the same way).
REBUILD_PHASE = "the rebuild of an env after a failure"
# Names `call` must not reach: they have their own commands (as in AsyncVectorEnv).
RESERVED_CALLS = ("reset", "step", "close", "_setattr", "_check_spaces")
# Object-leaf values of these types are sent again only when they change (a MiniGrid
# mission string stays the same for a whole episode); they cannot change in place.
_IMMUTABLE = (str, bytes, int, float, bool, type(None))
# The parent watch (fv_parent_watch.h): how often it checks that the caller runs, and how
# long a caller must have been gone before the worker ends itself (the command loop, which
# checks every 5 LIVENESS_INTERVALs while idle, closes its envs within that time).
PARENT_WATCH_INTERVAL_S = 0.5
PARENT_WATCH_GRACE_S = 2.0
_UNSENT = object()


class Worker:
    """One worker's envs and their views of the shared buffer (also the caller's own
    share with ``step_in_caller=True``, then with no pipe)."""

    def __init__(self, index, envs, first, autoreset_mode, buffer, obs_layout, act_layout,
                 restart: RestartState | None = None, env_fns: list | None = None):
        self.index = index
        self.envs = envs
        self.autoreset_mode = autoreset_mode
        self.ctrl = buffer["ctrl"]
        #: with env_failure="restart": each env's last seed, restart count, and constructor
        self.restart = restart
        self.env_fns = env_fns
        self.rebuild_failed = False  # an env's constructor raised when it was built again
        self.first = first
        self.stop = first + len(envs)
        self.obs_layout = obs_layout
        self.act_layout = act_layout
        rows = slice(first, self.stop)
        self.obs_slabs = ([None if s is None else s[rows] for s in buffer.leaves("obs", obs_layout)]
                          if obs_layout is not None else None)
        self.act_slabs = [None if s is None else s[rows] for s in buffer.leaves("act", act_layout)]
        self.act_codes = buffer["act_dtypes"][index]  # the dtype of each action leaf this step
        self._act_views: dict = {}  # (leaf, dtype code) -> the slab's rows seen as that dtype
        self.rewards = buffer["rewards"][rows]
        self.terminations = buffer["terminations"][rows]
        self.truncations = buffer["truncations"][rows]
        self.infos = InfoWriter(buffer["info_ids"][rows], buffer["info_rows"][rows])
        self.autoreset = [False] * len(envs)
        #: per env, a seed its next reset uses when it is given none (a rebuilt env's, see
        #: FastVectorEnv's ``env_failure="restart"``), then forgotten
        self.next_seeds: list[int | None] = [None] * len(envs)
        if restart is not None and restart.rebuilt:
            # This worker replaces one that failed: every env's next reset (the next step's
            # autoreset, or the user's with DISABLED) uses its derived seed.
            self.next_seeds[:] = [derived_seed(s, c) for s, c in zip(restart.seeds, restart.counts)]
            self.autoreset[:] = [True] * len(envs)
        self.last_obs: list[Any] = [None] * len(envs)
        # per env, per object leaf of the observation: the value the caller has
        self._sent = ([[_UNSENT] * sum(leaf.is_object for leaf in obs_layout.leaves) for _ in envs]
                      if obs_layout is not None and obs_layout.has_objects else None)
        self.current_env: int | None = None  # global index of the env being run, for error reports
        # The per-env step loop, compiled (same statements as SyncVectorEnv.step).
        # (single-leaf observations are copied into the slab by the loop itself)
        leaf_obs = (self.obs_slabs[0] if obs_layout is not None and obs_layout.is_leaf
                    and not obs_layout.has_objects else None)
        self._leaf_obs = leaf_obs
        for j in range(len(envs)):
            self._hand_row(j)
        current = self.ctrl[index, Word.CURRENT_ENV:Word.CURRENT_ENV + 1]
        self.env_loop = EnvLoop(envs, first, AUTORESET_CODES[autoreset_mode], self.rewards, self.terminations,
                                self.truncations, self.last_obs, self.autoreset, self.infos.kernel, leaf_obs,
                                self.next_seeds, current)
        if restart is not None and env_fns is not None:
            self.env_loop.on_failure = self.rebuild_env
        # The statistics region counts when the caller has written its header (stats=True).
        self.env_counts = self.stats_row = self.stats_histogram = None
        region = buffer.views.get("stats")
        if region is not None and region[0] == MAGIC:
            stats = StatsRegion(region)
            self.env_counts = stats.env_counts[first:first + len(envs)]
            self.env_loop.count_into(self.env_counts)
            self.stats_row, self.stats_histogram = stats.workers[index], stats.histograms[index]

    # -- commands -----------------------------------------------------------------
    def step(self, actions: list | None = None) -> tuple[int, Any]:
        """Step every env; ``actions``: one per env when they came on the pipe (or, for the
        caller's own share, its rows of the caller's action array), else None (they are in
        the slabs)."""
        if actions is None:
            actions = self._read_actions()
        loop = self.env_loop
        started = time.perf_counter() if self.stats_row is not None else 0.0
        try:
            loop.step(actions)
        except BaseException:
            self.current_env = loop.current
            raise
        if self.stats_row is not None:
            # (the steps StepServer hands to Python, and the caller's own share: counted as it
            # counts its own)
            took = time.perf_counter() - started
            self.stats_row[WorkerStat.WORKER_COMMANDS] += 1
            self.stats_row[WorkerStat.WORKER_STEP_NS] += int(took * 1e9)
            self.stats_histogram[step_bucket(took)] += 1
        status = loop.quiet_status()  # the common case: everything is in the block
        return (status, None) if status >= 0 else self.finish_step()

    def finish_step(self) -> tuple[int, Any]:
        """After the env loop has stepped every env and left something for the pipe: the
        step's status and reply (see :meth:`_finish`)."""
        return self._finish(self.env_loop.obs_written)

    def slab_action_view(self) -> Callable[[int], np.ndarray] | None:
        """``view(code)``: this worker's rows of the single action slab seen as the dtype
        ``code`` names (what :meth:`_read_actions` reads); None when the actions are not
        one fixed-size leaf."""
        layout = self.act_layout
        return functools.partial(self._act_view, 0) if layout.is_leaf and not layout.has_objects else None

    def reset(self, seeds, options, mask) -> tuple[int, Any]:
        kernel = self.infos.kernel
        for j, env in enumerate(self.envs):
            if mask is not None and not mask[j]:
                # (left out: what send/recv hands back for it is no new transition)
                kernel.clear(j)
                self.rewards[j] = 0.0
                self.terminations[j] = False
                self.truncations[j] = False
                continue
            self.current_env = self.first + j
            seed = seeds[j]
            if seed is None:
                seed = self.next_seeds[j]
            elif self.restart is not None:
                self.restart.seeds[j] = seed
            self.next_seeds[j] = None
            try:
                self.last_obs[j], info = env.reset(seed=seed, options=options)
            except Exception as exc:
                if self.restart is None or self.env_fns is None:
                    raise
                # (env_failure="restart": built again, and reset with its derived seed)
                seed, restarted = self._rebuild(j, exc)
                self.last_obs[j], info = self.envs[j].reset(seed=seed, options=options)
                info = {**info, **restarted}
            self.autoreset[j] = False
            if self.env_counts is not None:
                self.env_counts[j, 1] += 1
            # A reset is a transition with no reward (what send/recv returns for it).
            self.rewards[j] = 0.0
            self.terminations[j] = False
            self.truncations[j] = False
            kernel.store(j, (info,))
        self.current_env = None
        return self._finish()

    def call(self, name, args, kwargs):
        if name in RESERVED_CALLS:
            raise ValueError(f"Trying to call function `{name}` with `call`, use `{name}` directly instead.")
        results = []
        for j, env in enumerate(self.envs):
            self.current_env = self.first + j
            attr = env.get_wrapper_attr(name)
            results.append(attr(*args, **kwargs) if callable(attr) else attr)
        self.current_env = None
        return Status.MESSAGE, results

    def set_attr(self, name, values):
        for j, env in enumerate(self.envs):
            self.current_env = self.first + j
            env.set_wrapper_attr(name, values[j])
        self.current_env = None
        return Status.OK, None

    def _hand_row(self, j: int) -> None:
        """Give env ``j`` its row of the observation slab, if it writes its observations
        there itself (``use_observation_row``: MultiAgentVectorEnv's AgentRows, which would
        otherwise stack its agents' observations into an array of its own, then copied here)."""
        use_row = getattr(self.envs[j], "use_observation_row", None)
        if self._leaf_obs is not None and use_row is not None:
            use_row(self._leaf_obs[j])

    def rebuild_env(self, j: int, exc: Exception, final: dict | None = None, resetting: bool = False) -> tuple:
        """Env ``j`` raised ``exc`` during a step (FastVectorEnv's ``env_failure="restart"``):
        build it again and return what it contributes to the step instead (the env loop's
        ``on_failure``): ``(obs, info dicts, autoreset)``, with ``env_restarted``/``env_error``
        infos.

        Its step raised: it reports ``truncated=True``, reward 0, and its last observation
        (NEXT_STEP, DISABLED: its next reset is seeded from its last seed and restart count),
        or at once its first one from that reset (SAME_STEP, the last one in ``final_obs``).
        Its step ended the episode and the SAME_STEP reset after it raised (``final``): the
        step's own reward, flags and ``final_obs``/``final_info``, and the new env's first
        observation. Its NEXT_STEP autoreset raised (``resetting``): what that reset would
        have reported, from the new env's first reset.

        Raises ``exc`` when the restart budget is spent, or the constructor's own error.
        """
        seed, restarted = self._rebuild(j, exc)
        if final is None:  # its step raised, or its NEXT_STEP autoreset did
            self.rewards[j] = 0.0
            self.terminations[j] = False
            self.truncations[j] = not resetting
            if not resetting:
                last = self.last_obs[j]
                if isinstance(last, np.ndarray):
                    last = last.copy()  # (it may be the env's row, which the new env's reset writes)
                if self.autoreset_mode != AutoresetMode.SAME_STEP:
                    self.next_seeds[j] = seed
                    return last, (restarted,), True
                final = {"final_obs": last, "final_info": {}}
        obs, info = self.envs[j].reset(seed=seed)
        if self.env_counts is not None:
            self.env_counts[j, 1] += 1
        info = {**info, **restarted}
        if final is None:
            return obs, (info,), False
        final = {"final_obs": final["final_obs"], "final_info": {**final["final_info"], **restarted}}
        return obs, (final, info), False

    def _rebuild(self, j: int, exc: Exception) -> tuple[int | None, dict]:
        """Build env ``j`` again after ``exc`` (in a step or a reset): take one restart from
        the budget, log it with the traceback, close the env (if it still closes) and call its
        constructor. Returns the seed its first reset uses (from its last seed and restart
        count) and the infos it adds (``env_restarted``, ``env_error``). Raises ``exc`` when
        the budget is spent, or the constructor's own error (marked: not to be retried)."""
        if not handoff.take_restart(self.ctrl):
            raise exc
        text = f"{type(exc).__qualname__}: {exc} (env {self.first + j})"
        logging.getLogger("fastvec.vector").warning(
            "FastVectorEnv worker %d rebuilds env %d after: %s", self.index, self.first + j,
            "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        try:
            self.envs[j].close()
        except Exception:
            pass
        try:
            self.envs[j] = build_env(self.env_fns[j], self.first + j)
        except BaseException:
            self.rebuild_failed = True  # (reported as such: the caller does not retry it)
            raise
        self._hand_row(j)
        restart = self.restart
        restart.counts[j] += 1
        return derived_seed(restart.seeds[j], restart.counts[j]), {"env_restarted": True, "env_error": text}

    # -- helpers --------------------------------------------------------------------
    def _read_actions(self) -> list | np.ndarray:
        """Per-env actions from the slabs, as SyncVectorEnv's ``iterate`` hands them to the envs."""
        layout = self.act_layout
        codes = self.act_codes.tolist()
        if layout.is_leaf:
            view = self._act_view(0, codes[0])
            if view.ndim == 1:
                # One number per env (Discrete): EnvLoop's ``view[j]`` is already a NumPy
                # scalar holding a copy of the value, as iterating a copy would give.
                return view
            # A private copy: the caller may overwrite the shared slab before an env is done with it.
            return view.copy()  # EnvLoop indexes it: the rows iterating it would give
        columns = [list(np.array(self._act_view(k, code))) for k, code in enumerate(codes[: len(layout.leaves)])]
        return [layout.join(values) for values in zip(*columns)]

    def _act_view(self, k: int, code: int) -> np.ndarray:
        """Leaf ``k``'s rows of the action slab seen as the dtype ``code`` names."""
        view = self._act_views.get((k, code))
        if view is None:
            leaf = self.act_layout.leaves[k]
            dtype = np.dtype(chr(code))
            raw = self.act_slabs[k][:, : leaf.size * dtype.itemsize]
            view = self._act_views[k, code] = raw.view(dtype).reshape((len(raw), *leaf.shape))
        return view

    def _finish(self, written: bool = False) -> tuple[int, Any]:
        """Store ``last_obs`` in the shared slabs (unless the env loop ``written`` them
        already) and return the command's status and reply (what goes on the pipe):
        (observation parts, info message, whether some env left info values)."""
        # (written: each observation is in its row already, and nothing is left for the pipe)
        observations = None if written else self._store_observations()
        kernel = self.infos.kernel
        stored, kernel.stored = kernel.stored, 0
        infos = self.infos.take_message() if stored and self.infos.has_message else None
        if observations is None and infos is None:
            return (_INFOS if stored else _OK), None
        return _MESSAGE, (observations, infos, stored > 0)

    def _store_observations(self):
        """Fixed-size leaves into the slabs; returns what must go on the pipe (or None):
        ``("all", observations)`` without a shared observation buffer, else the changed
        object-leaf values ``[(env, leaf position, value)]``."""
        layout = self.obs_layout
        if layout is None:
            # No shared observation buffer (shared_memory=False): observations go on the pipe.
            return ("all", list(self.last_obs))
        try:
            if layout.is_leaf and not layout.has_objects:
                if not handoff.stack_rows(self.last_obs, self.obs_slabs[0]):
                    np.stack(self.last_obs, axis=0, out=self.obs_slabs[0])
                return None
            per_leaf = zip(*(layout.split(obs) for obs in self.last_obs))
            changed = []
            position = 0
            for slab, values in zip(self.obs_slabs, per_leaf):
                if slab is None:
                    changed.extend(self._changed_objects(position, values))
                    position += 1
                    continue
                values = list(values)
                if not handoff.stack_rows(values, slab):
                    np.stack(values, axis=0, out=slab)
        except Exception as exc:
            self._explain_bad_observation(exc)
            raise
        return changed or None

    def _changed_objects(self, position: int, values) -> list:
        out = []
        for j, value in enumerate(values):
            last = self._sent[j][position]
            if type(value) in _IMMUTABLE and type(last) is type(value) and last == value:
                continue
            out.append((self.first + j, position, value))
            self._sent[j][position] = value if type(value) in _IMMUTABLE else _UNSENT
        return out

    def _explain_bad_observation(self, exc: Exception) -> None:
        """Name the env whose observation does not fit the observation space, if one does not."""
        for j, obs in enumerate(self.last_obs):
            try:
                values = self.obs_layout.split(obs)
            except (KeyError, IndexError, TypeError):
                self.current_env = self.first + j
                raise ValueError(
                    f"env {self.first + j} returned an observation {obs!r} that does not match "
                    f"its observation space {self.obs_layout.space}"
                ) from exc
            for leaf, value in zip(self.obs_layout.leaves, values):
                if leaf.is_object:
                    continue
                value = np.asarray(value)
                if value.shape != leaf.shape or not np.can_cast(value.dtype, leaf.dtype, "same_kind"):
                    self.current_env = self.first + j
                    raise ValueError(
                        f"env {self.first + j} returned an observation with shape {value.shape} and dtype "
                        f"{value.dtype} for {leaf.space} (expected shape {leaf.shape}, dtype {leaf.dtype})"
                    ) from exc


def _parent_watch(parent_pid: int) -> Callable[[], bool]:
    """A check of whether the process that made this worker still runs.

    A worker started by fork or spawn is the parent's own child, and is handed to another
    process the moment the parent dies, even while the dead parent lingers unreaped as a
    zombie (which os.kill still finds). A forkserver worker's parent is the server, so
    there only the parent's pid can be checked.
    """
    if os.getppid() == parent_pid:
        return lambda: os.getppid() == parent_pid
    return lambda: _pid_alive(parent_pid)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - pid reused by another user's process
        return False
    return True


def build_env(env_fn: Callable[[], Any], index: int) -> Any:
    """``env_fn()``, the constructor of env ``index``; TypeError, naming what came back, unless
    that is an env (what the worker reads of it: the spaces, ``reset``, ``step``), e.g.
    ``env_fns[3] returned None, expected a gymnasium.Env (it has no observation_space, ...)``.
    """
    env = env_fn()
    missing = [name for name in ("observation_space", "action_space", "reset", "step") if not hasattr(env, name)]
    if missing:
        raise TypeError(f"env_fns[{index}] returned {reprlib.repr(env)}, expected a gymnasium.Env "
                        f"(it has no {', '.join(missing)})")
    return env


def enforces_reset_order(env: Any) -> bool:
    """Whether ``env`` refuses a step before its first reset (Gymnasium's ``OrderEnforcing``
    wrapper, which ``gymnasium.make`` adds, is in its wrapper chain): the caller may then
    refuse such a step itself, before it reaches the workers. Envs without it may be stepped
    first (Gymnasium's own vector tests do so).

    Example:
        >>> import gymnasium as gym
        >>> enforces_reset_order(gym.make("CartPole-v1")), enforces_reset_order(gym.make("CartPole-v1").unwrapped)
        (True, False)
    """
    from gymnasium.wrappers import OrderEnforcing

    while env is not None:
        if isinstance(env, OrderEnforcing):
            return True
        env = getattr(env, "env", None)
    return False


def hello(envs: list) -> Hello:
    """What a worker (or the caller, for its own share) says of its envs once they are built."""
    first = envs[0]
    return Hello([(env.observation_space, env.action_space) for env in envs], dict(first.metadata),
                 first.render_mode, any(map(enforces_reset_order, envs)), [compile_note(env) for env in envs])


def error_report(exc: BaseException, env_index: int | None, phase: str) -> ErrorReport:
    """What a worker sends when a command raised: enough to re-raise it in the caller."""
    import pickle

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        payload = pickle.dumps(exc)
    except Exception:
        payload = None
    return ErrorReport(env_index, phase, type(exc).__qualname__, str(exc), text, payload)


def worker_main(index: int, env_fns, first: int, pipe, parent_pipe, parent_pid: int,
                autoreset_mode: AutoresetMode, waits: WorkerWaits, cpu: int | None = None,
                unpin_for_busy_caller: bool = False, restart: RestartState | None = None) -> None:
    """Entry point of a worker process (see FastVectorEnv for the protocol); ``cpu``: the
    CPU to pin it to (None: not pinned); ``unpin_for_busy_caller``: leave that CPU while the
    caller keeps more than one core busy between steps, and come back once it no longer does
    (FastVectorEnv's ``pin_workers=None``); ``waits``: how its waits for a command spin
    (the vector env's wait policy); ``restart``: with ``env_failure="restart"``, its
    envs' seeds and restart counts, and whether it replaces a worker that failed."""
    # Ctrl-C goes to the whole process group; the caller decides what happens.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    follow_caller = None
    if cpu is not None:
        try:
            every_cpu = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {cpu})
        except (AttributeError, OSError):  # pragma: no cover - no affinity on this platform
            pass
        else:
            if unpin_for_busy_caller:
                follow_caller = functools.partial(_follow_caller, {cpu}, every_cpu)
    parent_alive = _parent_watch(parent_pid)
    # A worker whose env hangs inside a step never gets back to the command loop, where it
    # notices a dead caller: a C thread ends it then, after the loop's own chance to close.
    watch_parent(parent_pid, os.getppid() == parent_pid, PARENT_WATCH_INTERVAL_S, PARENT_WATCH_GRACE_S)
    if parent_pipe is not None:
        parent_pipe.close()
    envs = []
    buffer = None
    try:
        try:
            for env_fn in env_fns:
                envs.append(build_env(env_fn, first + len(envs)))
        except BaseException as exc:
            protocol.send(pipe, error_report(exc, first + len(envs), "the env constructor"))
            return
        first_env = envs[0]
        protocol.send(pipe, hello(envs))
        message = pipe.recv()
        if not isinstance(message, Attach):
            return
        buffer = SharedBuffer(message.sections, message.size, fd=receive(pipe))
        worker = Worker(index, envs, first, autoreset_mode, buffer, message.obs_layout, message.act_layout, restart,
                        env_fns)
        protocol.send(pipe, Ready())
        _serve(worker, buffer["ctrl"], pipe, waits, parent_alive, follow_caller)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the caller went away
    finally:
        for env in envs:
            try:
                env.close()
            except Exception:
                pass
        if buffer is not None:
            buffer.close()
        pipe.close()


def _follow_caller(pinned: set, every_cpu: set, caller_busy: bool) -> None:
    """Leave the worker's CPU while the caller keeps more than one core busy between steps (a
    pinned worker cannot move off a core one of the trainer's threads holds), and come back
    to it once it no longer does (pinned, a tight stepping loop's workers never share a core)."""
    try:
        os.sched_setaffinity(0, every_cpu if caller_busy else pinned)
    except OSError:  # pragma: no cover - the CPU went offline
        pass


def _serve(worker: Worker, ctrl: np.ndarray, pipe, waits: WorkerWaits, parent_alive: Callable[[], bool],
           on_caller_busy: Callable[[bool], None] | None = None) -> None:
    """The worker's command loop: serve commands until CLOSE, a fatal error, or the parent's death.

    A :class:`StepServer` takes every command and runs the plain steps itself; what it
    hands back (other commands, steps that need the pipe) runs here, and so does the report
    of any exception: a recoverable one (``call``/``setattr``) is sent and the loop goes on,
    anything else is sent and ends it.
    """
    index = worker.index
    # Takes every command, and runs the plain steps itself (compiled); the rest come here.
    server = StepServer(ctrl, index, worker.env_loop, worker.act_codes, worker.slab_action_view(), waits.spin_s,
                        waits.max_spin_s, waits.think_window_s, on_caller_busy, waits.other_cpu_spin_s)
    if worker.stats_row is not None:
        server.count_into(worker.stats_row, worker.stats_histogram)
    while True:
        phase = "step"
        try:
            got = server.serve(5 * LIVENESS_INTERVAL)
            if got is not None:
                seq, command, stepped = got
                if stepped:  # the server ran the envs; something goes on the pipe
                    status, reply = worker.finish_step()
                elif command == _STEP:
                    status, reply = worker.step()
                elif command == _STEP_PIPE:
                    status, reply = worker.step(pipe.recv())
                elif command == Command.PIPE:
                    request = pipe.recv()
                    phase = request.command.value
                    if request.command is PipeCommand.RESET:
                        status, reply = worker.reset(*request.payload)
                    elif request.command is PipeCommand.CALL:
                        status, reply = worker.call(*request.payload)
                    elif request.command is PipeCommand.SETATTR:
                        status, reply = worker.set_attr(*request.payload)
                    else:
                        raise ValueError(f"unknown worker command {request.command!r}")
                elif command == Command.CLOSE:
                    handoff.finish_command(ctrl, index, seq, Status.OK)
                    return
                else:
                    raise ValueError(f"unknown command word {command}")
        except BaseException as exc:
            if server.stepping:  # an env of a step the server ran
                worker.current_env = worker.env_loop.current
            report = error_report(exc, worker.current_env, REBUILD_PHASE if worker.rebuild_failed else phase)
            recoverable = phase in RECOVERABLE and isinstance(exc, Exception)
            handoff.finish_command(ctrl, index, server.seq, Status.CALL_ERROR if recoverable else Status.ERROR)
            protocol.send(pipe, report)
            if recoverable:
                continue
            return
        if got is None:  # no command for a while
            if not parent_alive():
                return
            continue
        handoff.finish_command(ctrl, index, seq, status)
        if status == _MESSAGE:
            protocol.send(pipe, reply)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("fastvec.vector._worker.process is started by FastVectorEnv, not run directly")
