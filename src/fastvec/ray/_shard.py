"""One shard of a RayVectorEnv: the Ray actor that holds a local fastvec vector env.

The class is plain Python (``RayVectorEnv`` makes it an actor with ``ray.remote``), so
its logic also runs, and is tested, in-process. Its methods never raise: an exception of
the envs (or of building them) comes back as a :class:`Failure` carrying the exception
pickled, its type name, text and formatted traceback, and the env's index in the shard,
so the driver can re-raise it with its own type and the global env index.
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import time
import traceback
from typing import Any, Callable, Sequence

import numpy as np
from gymnasium.vector import AutoresetMode

from fastvec.ray._messages import ShardHello, ShardPlace
from fastvec.ray._packing import decode_actions, fixed_fields, result_dtype
from fastvec.spaces import Layout
from fastvec.vector._caller import backend_choice
from fastvec.vector.fast_vector_env import FastVectorEnv

# Modules the forkserver imports once, so that the workers it forks start with them. The
# Ray worker's __main__ stays first (multiprocessing's default): a worker whose forkserver
# had not imported it would import it itself, and with it all of Ray, on every start.
_FORKSERVER_PRELOAD = ["__main__", "fastvec.vector._worker.process"]


class Failure:
    """What a shard method returns instead of raising: see the module docstring."""

    __slots__ = ("phase", "env_index", "type_name", "text", "trace", "payload")

    def __init__(self, exc: BaseException, phase: str):
        self.phase = phase
        self.env_index = getattr(exc, "env_index", None)
        self.type_name = type(exc).__name__
        self.text = str(exc)
        self.trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        try:
            self.payload = pickle.dumps(exc)
        except Exception:
            self.payload = None

    def __getstate__(self):
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setstate__(self, state):
        for name, value in zip(self.__slots__, state):
            setattr(self, name, value)


def _descendants(pid: int) -> list[int]:
    """The processes started, directly or not, by ``pid`` (Linux: /proc), in no order."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _assigned_cpus() -> int:
    """The CPUs Ray reserved for this actor (1 outside Ray, or with num_cpus=0)."""
    try:
        import ray

        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1) if ray.is_initialized() else 1
    except Exception:
        cpus = 1
    return max(1, int(cpus))


def _prepare_forkserver() -> None:
    try:
        multiprocessing.set_forkserver_preload(_FORKSERVER_PRELOAD)
    except (ValueError, AttributeError):  # pragma: no cover - platforms without forkserver
        pass


class DieWithActor:
    """An env constructor that first makes its worker process exit when the shard's actor
    process does, then builds the env.

    FastVectorEnv builds each env in its worker process, so that is where this runs. A
    worker waiting for commands notices on its own that its caller died; one stuck inside
    a step cannot, and when its shard's node is lost nobody is left to kill it (Ray kills
    an actor's process group when the actor ends, not when the whole node goes; and a
    forkserver stays while any worker it forked lives, since each holds its liveness pipe).
    So a daemon thread of the worker waits for the actor process to end (a pidfd on Linux,
    else polling) and then ends the worker with ``os._exit``. In the actor's own process
    (``step_in_caller``) it does nothing.
    """

    def __init__(self, fn: Callable[[], Any], actor_pid: int):
        self.fn = fn
        self.actor_pid = actor_pid

    def __call__(self):
        if os.getpid() != self.actor_pid:
            _exit_with(self.actor_pid)
        return self.fn()


_WATCHED: set[int] = set()


def _exit_with(pid: int, interval: float = 0.5) -> None:
    """Start (once per process) a daemon thread that ends this process when ``pid`` ends."""
    import select
    import threading

    if pid in _WATCHED:
        return
    _WATCHED.add(pid)
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None

    def watch():
        if fd is not None:
            select.select([fd], [], [])  # readable once the process has exited
            os._exit(1)
        while True:
            time.sleep(interval)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:
                pass

    threading.Thread(target=watch, name="fastvec-shard-watch", daemon=True).start()


def _build(source: tuple, n: int, autoreset_mode, vector_kwargs: dict, failure: dict | None = None):
    """The shard's local vector env: ``source`` is ("fns", env_fns) or ("id", id, env_kwargs, wrappers);
    ``failure``: FastVectorEnv's ``env_failure``/``max_restarts``/``step_timeout`` (a compiled
    NativeVectorEnv has no env code that can fail on its own, and takes none of them).

    Defaults for a shard (each overridden by ``vector_kwargs``): FastVectorEnv starts its
    workers with ``forkserver`` (forking a Ray worker can hang), one per reserved CPU, not
    pinned (other shards may share the node), each dying with its parent (see
    :class:`DieWithActor`); NativeVectorEnv uses as many threads as reserved CPUs. The
    backend is chosen as for ``make_vec(..., vectorization_mode="fastvec")``.
    """
    kwargs = dict(vector_kwargs)
    kwargs.setdefault("autoreset_mode", autoreset_mode)
    cpus = _assigned_cpus()
    multiprocess = {"context": "forkserver", "pin_workers": False, "num_workers": min(n, cpus)}
    native = kwargs.pop("native", None)
    if source[0] == "fns":
        fns = list(source[1])
    else:
        _, env_id, env_kwargs, wrappers = source
        wrappers = list(wrappers or [])
        if backend_choice.runs_natively(env_id, env_kwargs, wrappers, {**kwargs, "native": native}):
            kwargs.setdefault("num_threads", cpus)
            if native is not None:
                kwargs["native"] = native  # (native=True that cannot be honoured: make_local says why)
            return backend_choice.make_local(*backend_choice.resolve(env_id, n, kwargs, wrappers, env_kwargs))
        fns = [backend_choice.single_env_maker(env_id, env_kwargs, wrappers)] * n
    for key, value in multiprocess.items():
        kwargs.setdefault(key, value)
    kwargs.update(failure or {})
    if kwargs["context"] == "forkserver":
        _prepare_forkserver()
    pid = os.getpid()
    return FastVectorEnv([DieWithActor(fn, pid) for fn in fns], **kwargs)


def _watch_parent(interval: float = 0.5) -> None:
    """In a Ray actor: exit at once if the raylet that started this process goes away.

    A Ray worker whose node is lost normally exits by itself; one whose main thread is busy
    in a long step may not, and then neither do its forkserver and workers (see
    :class:`DieWithActor`). This thread makes sure: when the parent changes (the raylet
    died and the process was reparented), the process ends with ``os._exit``.
    """
    import threading

    try:
        import ray

        if not ray.is_initialized():
            return
    except Exception:  # pragma: no cover
        return
    parent = os.getppid()

    def watch():
        while True:
            time.sleep(interval)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="fastvec-shard-parent-watch", daemon=True).start()


class Shard:
    """Envs ``start .. start + n - 1`` of a RayVectorEnv, in one local vector env.

    Args:
        index: the shard's index (for messages).
        n: how many envs.
        source: ("fns", env_fns) or ("id", env id or EnvSpec, env kwargs, wrappers).
        autoreset_mode: the vector env's autoreset mode.
        vector_kwargs: keyword arguments of the local backend (FastVectorEnv's or
            NativeVectorEnv's, plus ``native`` as in ``make_vec``).
        failure: the local FastVectorEnv's ``env_failure``, ``max_restarts`` and
            ``step_timeout`` (see :func:`_build`).
    """

    def __init__(self, index: int, n: int, source: tuple, autoreset_mode, vector_kwargs: dict,
                 failure: dict | None = None):
        self.index = index
        self.n = n
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.env = None
        self.failure = None
        #: after :meth:`restarted` (NEXT_STEP): what the next step returns instead of stepping
        self.pending_reply = None
        #: after :meth:`restarted` (DISABLED): per env, the seed its next reset uses when given none
        self.next_seeds: list | None = None
        _watch_parent()
        try:
            self.env = _build(source, n, autoreset_mode, vector_kwargs, failure)
            self._setup()
        except Exception as exc:
            self.failure = Failure(exc, "construction")
            self._close_env()

    def _setup(self) -> None:
        self.obs_layout = Layout(self.env.single_observation_space, objects=True)
        self.act_layout = Layout(self.env.single_action_space, objects=True)
        n = self.n
        self.fields = fixed_fields(self.obs_layout)
        self.record = np.zeros(1, dtype=result_dtype(self.obs_layout, n))
        self.views = [None if name is None else self.record[name][0] for name in self.fields]
        self.view_single = self.views[0] if self.obs_layout.is_leaf and self.fields[0] is not None else None
        self.rewards = self.record["rewards"][0]
        self.terminations = self.record["terminations"][0]
        self.truncations = self.record["truncations"][0]

    def hello(self):
        """The shard's spaces, metadata and whereabouts (or the Failure of its construction)."""
        if self.failure is not None:
            return self.failure
        import ray

        context = ray.get_runtime_context()
        env = self.env
        return ShardHello(
            single_observation_space=env.single_observation_space,
            single_action_space=env.single_action_space,
            metadata=dict(env.metadata),
            render_mode=env.render_mode,
            backend=type(env).__name__,
            place=ShardPlace(node_id=context.get_node_id(), node_ip=ray.util.get_node_ip_address(),
                             pid=os.getpid()),
        )

    # -- the step ------------------------------------------------------------------------
    def _pack(self, obs, infos, rewards=None, terminations=None, truncations=None):
        if self.view_single is not None:
            self.view_single[...] = obs
            objects = None
        else:
            leaves = [obs] if self.obs_layout.is_leaf else self.obs_layout.split(obs)
            objects = []
            for view, value in zip(self.views, leaves):
                if view is None:
                    objects.append(tuple(value))
                else:
                    view[...] = value
        if rewards is None:
            self.rewards[...] = 0.0
            self.terminations[...] = False
            self.truncations[...] = False
        else:
            self.rewards[...] = rewards
            self.terminations[...] = terminations
            self.truncations[...] = truncations
        data = self.record.tobytes()
        if infos or objects:
            return data, infos or None, objects or None
        return data

    def step(self, payload):
        """Step with the actions (bytes from encode_actions, or a batch object); the packed results."""
        if self.pending_reply is not None:  # (the envs were just built again: see restarted)
            reply, self.pending_reply = self.pending_reply, None
            return reply
        try:
            actions = decode_actions(self.act_layout, payload, self.n) if type(payload) is bytes else payload
            obs, rewards, terminations, truncations, infos = self.env.step(actions)
            return self._pack(obs, infos, rewards, terminations, truncations)
        except Exception as exc:
            return Failure(exc, "step")

    def reset(self, seeds: Sequence, options: dict | None):
        """Reset with one seed per env; packed like a step's results (rewards 0, flags False)."""
        seeds = list(seeds)
        self.pending_reply = None
        if self.next_seeds is not None:
            mask = (options or {}).get("reset_mask")
            for i, seed in enumerate(self.next_seeds):
                if mask is None or mask[i]:
                    if seeds[i] is None:
                        seeds[i] = seed
                    self.next_seeds[i] = None
            if all(seed is None for seed in self.next_seeds):
                self.next_seeds = None
        try:
            obs, infos = self.env.reset(seed=seeds, options=options)
            return self._pack(obs, infos)
        except Exception as exc:
            return Failure(exc, "reset")

    def restarted(self, seeds: Sequence):
        """This actor replaces one that died (RayVectorEnv's ``env_failure="restart"``): its
        envs, new, start their first episode as the autoreset mode has an env start one after
        a truncation, each reset with its seed in ``seeds`` (None: unseeded).

        NEXT_STEP: they are reset now, and the next :meth:`step` returns their first
        observations (rewards 0, flags False) without stepping. SAME_STEP: they are reset now,
        and this returns the packed reset (for the step that reports the restart). DISABLED:
        the next :meth:`reset` of each env uses its seed when given none. Returns None (or
        the packed reset), or the Failure of the reset."""
        seeds = list(seeds)
        if self.autoreset_mode is AutoresetMode.DISABLED:
            self.next_seeds = seeds
            return None
        try:
            obs, infos = self.env.reset(seed=seeds)
            reply = self._pack(obs, infos)
        except Exception as exc:
            return Failure(exc, "reset")
        if self.autoreset_mode is AutoresetMode.NEXT_STEP:
            self.pending_reply = reply
            return None
        return reply

    # -- call / attributes -----------------------------------------------------------------
    def call(self, name: str, args: tuple, kwargs: dict):
        try:
            return tuple(self.env.call(name, *args, **kwargs))
        except Exception as exc:
            return Failure(exc, "call")

    def get_attr(self, name: str):
        try:
            return tuple(self.env.get_attr(name))
        except Exception as exc:
            return Failure(exc, "get_attr")

    def set_attr(self, name: str, values: list):
        try:
            self.env.set_attr(name, values)
            return None
        except Exception as exc:
            return Failure(exc, "set_attr")

    def render(self):
        try:
            frames = self.env.render()
            return None if frames is None else tuple(frames)
        except Exception as exc:
            return Failure(exc, "render")

    # -- housekeeping ----------------------------------------------------------------------
    def pids(self) -> list[int]:
        """This actor's process id, then those of every process it started (workers, forkserver)."""
        return [os.getpid(), *_descendants(os.getpid())]

    def _close_env(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            try:
                env.close()
            except Exception:
                pass

    def close(self) -> None:
        """Close the local vector env (its workers exit)."""
        self._close_env()

    def __repr__(self) -> str:
        return f"Shard({self.index}, n={self.n})"


def shard_ranges(num_envs: int, num_shards: int) -> list[tuple[int, int]]:
    """Contiguous (start, stop) env ranges, in env order, sizes differing by at most one."""
    base, extra = divmod(num_envs, num_shards)
    ranges, start = [], 0
    for k in range(num_shards):
        stop = start + base + (k < extra)
        ranges.append((start, stop))
        start = stop
    return ranges
