"""RayVectorEnv: a Gymnasium vector env whose envs run in Ray actors, a shard per actor."""
from __future__ import annotations

import multiprocessing
import pickle
import time
import weakref
from typing import Any, Callable, Sequence

import numpy as np
import ray
from gymnasium import Env, logger
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from fastvec.errors import annotate
from fastvec.errors import (
    AlreadyPendingCallError,
    NoAsyncCallError,
    RemoteTraceback,
    WorkerDiedError,
    WorkerError,
)
from fastvec.ray._infos import merge_infos
from fastvec.ray._messages import SentCommand, ShardCommand, ShardHello, ShardPlace
from fastvec.ray._packing import (
    action_leaves,
    batch_length,
    encode_actions,
    fixed_fields,
    result_dtype,
    take_rows,
)
from fastvec.ray._shard import Failure, Shard, shard_ranges
from fastvec.spaces import Layout
from fastvec.vector._caller.arguments import (check_env_fns, check_failure_arguments, check_no_ended_envs,
                                              check_synchronous, checked_batch_size, checked_count,
                                              checked_step_timeout, seeds_per_env, split_reset_options)
from fastvec.vector._block.restarts import Restarts, derived_seed
from fastvec.vector._caller.worker_vector_env import CallState, WorkerVectorEnv

__all__ = ["RayVectorEnv", "DEFAULT_SHARD_OPTIONS"]

#: Ray actor options every shard gets unless ``shard_options`` says otherwise: one CPU
#: reserved, shards spread over the nodes, no restart by Ray itself (a shard Ray restarted
#: would have lost its envs' state, and nobody would say so: with ``env_failure="restart"``
#: RayVectorEnv starts a new actor in its place and reports the restart instead).
DEFAULT_SHARD_OPTIONS = {"num_cpus": 1, "scheduling_strategy": "SPREAD", "max_restarts": 0, "max_task_retries": 0}

# How often a wait on the shards checks whether one of them has died while others are
# still busy (ray.get of several refs raises only once all are ready).
CHECK_INTERVAL_S = 0.25

_ACTOR_CLASS = None


def _actor_class():
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        _ACTOR_CLASS = ray.remote(Shard)
    return _ACTOR_CLASS


#: What a shard with a step out was sent (``RayVectorEnv._out``).
_SENT_STEP = SentCommand(ShardCommand.STEP)
#: What error messages say of a shard whose hello has not come.
_UNKNOWN_PLACE = ShardPlace(node_id="?", node_ip="?", pid="?")  # type: ignore[arg-type]


class _Restarted:
    """What stands for the reply of a shard that died during a step and was started again:
    its envs report the restart; ``reset``: the new shard's packed reset, with SAME_STEP
    (their first observations come back at once), else None."""

    __slots__ = ("reset",)

    def __init__(self, reset):
        self.reset = reset


class _ShardLost(Exception):
    """Raised inside a wait when shard ``k`` died and may be started again (``env_failure="restart"``)."""

    def __init__(self, k: int, error: str):
        super().__init__(k, error)
        self.k = k
        self.error = error


def _kill_actors(actors: list) -> None:
    """End every shard at once (garbage collection, interpreter exit, a fault)."""
    if not ray.is_initialized():
        return
    for actor in actors:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:
            pass


def shard_demand(options: dict[str, Any]) -> dict[str, float]:
    """The Ray resources one shard's actor options ask for: ``{"CPU": 1.0}`` by default."""
    demand = {"CPU": options.get("num_cpus"), "GPU": options.get("num_gpus"), "memory": options.get("memory")}
    demand.update(options.get("resources") or {})
    return {name: float(amount) for name, amount in demand.items() if amount}


def _number(name: str, value: float) -> str:
    return f"{value / 2**30:.3g} GiB" if name == "memory" else f"{value:g}"


def _amount(name: str, value: float) -> str:
    count = _number(name, value)
    if name == "memory":
        return f"{count} of memory"
    return f"{count} {name}" + ("s" if name in ("CPU", "GPU") and count != "1" else "")


def resource_shortage(shard_options: Sequence[dict[str, Any]], total: dict[str, float],
                      available: dict[str, float], nodes: Sequence[dict[str, float]]) -> str | None:
    """Why shards with these actor options can never all be placed on a cluster whose alive
    nodes have ``nodes`` (each node's total resources), or None where they may be.

    Only what can never be met is reported: more of a resource in all than the cluster has
    (``total``, as ``ray.cluster_resources()`` gives it), or a shard that no single node can
    hold. ``available`` only adds the figure to the message (other actors may hold part of
    the cluster for a while: a wait for them is the ``start_timeout``'s business).

        >>> print(resource_shortage([{"num_cpus": 1}] * 4, {"CPU": 2.0}, {"CPU": 2.0}, [{"CPU": 2.0}]))
        4 shards ask for 4 CPUs in all (1 CPU each), and the Ray cluster has 2 CPUs (2 available): so ...
        >>> resource_shortage([{"num_cpus": 1}] * 2, {"CPU": 2.0}, {"CPU": 0.0}, [{"CPU": 2.0}]) is None
        True
    """
    demands = [shard_demand(options) for options in shard_options]
    problems = []
    for name in sorted({name for demand in demands for name in demand}):
        asked = [demand.get(name, 0.0) for demand in demands]
        has = float(total.get(name, 0.0))
        if sum(asked) > has + 1e-9:
            each = (f"{_amount(name, asked[0])} each" if len(set(asked)) == 1 else
                    "per shard: " + ", ".join(_number(name, a) for a in asked))
            problems.append(f"{len(asked)} shard{'s ask' if len(asked) > 1 else ' asks'} for {_amount(name, sum(asked))} in all "
                            f"({each}), and the Ray cluster has {_amount(name, has)} "
                            f"({_number(name, float(available.get(name, 0.0)))} available)")
    if not problems:
        for k, demand in enumerate(demands):
            if not any(all(node.get(name, 0.0) + 1e-9 >= amount for name, amount in demand.items()) for node in nodes):
                wants = ", ".join(_amount(name, amount) for name, amount in demand.items())
                biggest = ", ".join(f"{_amount(name, max((node.get(name, 0.0) for node in nodes), default=0.0))}"
                                    for name in demand)
                problems.append(f"shard {k} asks for {wants} on one node, and no node of the Ray cluster has that "
                                f"(the most one node has: {biggest})")
                break
    if not problems:
        return None
    return ("; ".join(problems) + ": so they can never all be placed. Ask for fewer shards (num_shards), less per "
            "shard (shard_options, e.g. {'num_cpus': 0.5}; 0 lets the shards share the CPUs there are), or add "
            "nodes; check_resources=False skips this check (an autoscaling cluster adds nodes on demand)")


class RayVectorEnv(WorkerVectorEnv):
    """A Gymnasium vector env over Ray: the envs split into shards, one Ray actor each.

    Env ``i`` of ``num_envs`` lives in the shard that holds the contiguous range around it
    (shards in env order, sizes differing by at most one). Each shard is a Ray actor that
    holds a local fastvec vector env (:class:`fastvec.FastVectorEnv` with its worker
    processes started by ``forkserver``, or :class:`fastvec.NativeVectorEnv` for the
    compiled ids); one step is one actor call per shard, the actions of the shard's envs
    in one bytes argument and its results back in one packed record (plus infos, only when
    some env returned one), copied into preallocated batch arrays.

    For the same seeds and actions it returns what ``SyncVectorEnv`` returns
    (``reset(seed=s)`` seeds env ``i`` with ``s + i``), in every autoreset mode, infos
    included (see ``fastvec.ray._infos`` for the merge), and it has FastVectorEnv's API:
    ``step_async``/``step_wait``, ``reset_async``/``reset_wait``, ``call``, ``get_attr``,
    ``set_attr``, ``render``, and ``send``/``recv`` with ``batch_size < num_envs``.

    Example (a local Ray is started if none is running; ``num_cpus=0`` lets the shards
    share whatever CPUs there are):
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> from fastvec.ray import RayVectorEnv
        >>> envs = RayVectorEnv([lambda: gym.make("Acrobot-v1") for _ in range(4)], num_shards=2,
        ...                     shard_options={"num_cpus": 0})
        >>> obs, infos = envs.reset(seed=42)
        >>> obs.shape, envs.shard_ranges, envs.backends
        ((4, 6), [(0, 2), (2, 4)], ('FastVectorEnv', 'FastVectorEnv'))
        >>> obs, rewards, terminations, truncations, infos = envs.step(np.array([0, 1, 2, 1]))
        >>> rewards
        array([-1., -1., -1., -1.])
        >>> envs.close()

    Args:
        env_fns: an env id (``"CartPole-v1"``, ``"module:Env-v0"`` or an ``EnvSpec``:
            each shard builds its envs with ``gymnasium.make``, only the id and
            ``env_kwargs`` travel) or a sequence of env constructors (cloudpickled to the
            shards, as AsyncVectorEnv's).
        num_envs: how many envs (with an env id; ``len(env_fns)`` otherwise).
        num_shards: how many actors. Default: one per alive Ray node, at most ``num_envs``.
        env_kwargs: keyword arguments of ``gymnasium.make`` (env id only).
        wrappers: wrappers applied to each env (env id only), as in ``make_vec``.
        vector_kwargs: keyword arguments of each shard's local vector env, as
            ``make_vec(..., vectorization_mode="fastvec", vector_kwargs=...)`` takes them
            (``native``, ``num_workers``, ``context``, ``step_in_caller``, ...). Defaults in a
            shard: ``context="forkserver"``, ``num_workers`` = the CPUs Ray reserved for
            it, ``pin_workers=False``; NativeVectorEnv: ``num_threads`` = those CPUs.
        shard_options: Ray actor options (``num_cpus``, ``resources``,
            ``scheduling_strategy``, ``runtime_env``, ...) over :data:`DEFAULT_SHARD_OPTIONS`:
            one dict for every shard, or a list of one per shard.
        autoreset_mode: ``NEXT_STEP`` (default), ``SAME_STEP`` or ``DISABLED``.
        batch_size: envs returned per :meth:`recv` (send/recv stepping); default
            ``num_envs``. With ``batch_size < num_envs`` a recv returns whole shards: the
            shards must be of one size and ``batch_size`` a multiple of it.
        copy: return fresh arrays (default); ``False`` returns the batch buffers, which
            the next ``step``/``reset`` overwrites.
        start_timeout: seconds to wait for the shards to be placed and to build their
            envs before giving up (a shard Ray cannot place waits forever otherwise).
        check_resources: before starting the shards, compare what their options ask for
            (``num_cpus``, ``num_gpus``, ``memory``, ``resources``) with the cluster's
            nodes, and raise ``ValueError`` at once, naming the shortage, where the shards
            can never all be placed: more in all than the cluster has, or a shard bigger
            than any node (rather than waiting ``start_timeout`` for them). ``False`` on
            an autoscaling cluster, whose nodes come when the shards ask for them.
        env_failure: ``"raise"`` (default) or ``"restart"``. With ``"restart"``, each
            shard's FastVectorEnv restarts its own failed envs and worker processes (as
            ``FastVectorEnv(env_failure="restart")`` does), and a shard whose actor dies
            (killed, its node lost) during a step or a reset is replaced by a new actor with
            fresh envs for its range. Either way the step reports it as FastVectorEnv does:
            the shard's envs ``truncated`` with reward 0, their last observations,
            ``infos["env_restarted"]`` and ``infos["env_error"]``, then the autoreset mode's
            reset, seeded from each env's last seed and restart count; the other shards'
            results as they came. A call (``call``, ``get_attr``, ``set_attr``, ``render``)
            during which a shard dies still raises.
        max_restarts: with ``"restart"``, how many failures are recovered from in total
            (over all shards); the next one raises as with ``"raise"``.
        step_timeout: seconds a worker of a shard's FastVectorEnv may spend in a step
            before it counts as failed (killed, then restarted or raised as
            ``env_failure`` says). None: no limit.

    Faults: an exception of an env comes back with its own type, ``exc.env_index`` the
    global index, and the shard's traceback as ``exc.__cause__``
    (:class:`fastvec.RemoteTraceback`); after one in ``step``/``reset`` the vector env is
    closed. A shard that dies (its actor killed, its node lost, Ray shut down) raises
    :class:`fastvec.WorkerDiedError` naming the shard, its envs and its node, and closes the
    vector env. How soon a lost node is noticed is Ray's health check's business: see
    :func:`fastvec.ray.fault_detection_config`.
    """

    closed = True
    _WORKER = "shard"

    def __init__(
        self,
        env_fns: str | EnvSpec | Sequence[Callable[[], Env]],
        num_envs: int | None = None,
        *,
        num_shards: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        wrappers: Sequence[Callable[[Env], Env]] | None = None,
        vector_kwargs: dict[str, Any] | None = None,
        shard_options: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        batch_size: int | None = None,
        copy: bool = True,
        start_timeout: float = 120.0,
        check_resources: bool = True,
        env_failure: str = "raise",
        max_restarts: int = 100,
        step_timeout: float | None = None,
    ) -> None:
        self._actors: list | None = None
        self._finalizer = None
        self.closed = False
        # -- what to build -------------------------------------------------------------
        if isinstance(env_fns, (str, EnvSpec)):
            if num_envs is None:
                raise TypeError("RayVectorEnv(env_id, num_envs): num_envs is required with an env id")
            self.env_id = env_fns if isinstance(env_fns, str) else env_fns.id
            self.env_fns = None
            env_kwargs = dict(env_kwargs or {})
            wrappers = list(wrappers or [])
        else:
            if env_kwargs or wrappers:
                raise TypeError("env_kwargs and wrappers go with an env id; put them in the env_fns instead")
            env_fns = check_env_fns(env_fns, "RayVectorEnv", "an env (or pass an env id)")
            if num_envs is not None and num_envs != len(env_fns):
                raise ValueError(f"num_envs={num_envs} but {len(env_fns)} env_fns")
            num_envs = len(env_fns)
            self.env_id = None
            self.env_fns = env_fns
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        self.num_envs = int(num_envs)
        self.autoreset_mode = autoreset_mode if isinstance(autoreset_mode, AutoresetMode) else AutoresetMode(autoreset_mode)
        self._autoreset_disabled = self.autoreset_mode is AutoresetMode.DISABLED
        self.copy = bool(copy)
        vector_kwargs = dict(vector_kwargs or {})
        for key in ("autoreset_mode", "env_failure", "max_restarts", "step_timeout"):
            if key in vector_kwargs:
                raise TypeError(f"pass {key} to RayVectorEnv itself, not in vector_kwargs")
        check_failure_arguments(env_failure, max_restarts, bool(vector_kwargs.get("step_in_caller")))
        step_timeout = checked_step_timeout(step_timeout)
        self.max_restarts = int(max_restarts)
        self._failure = {"env_failure": env_failure, "max_restarts": self.max_restarts, "step_timeout": step_timeout}
        self._vector_kwargs = vector_kwargs
        self._restarts = Restarts(self.num_envs, "RayVectorEnv", "shard") if env_failure == "restart" else None
        self._start_timeout = start_timeout
        if not ray.is_initialized():
            ray.init()
        if num_shards is None:
            num_shards = min(self.num_envs, max(1, sum(1 for node in ray.nodes() if node.get("Alive"))))
        self.num_shards = checked_count(num_shards, self.num_envs, "num_shards")
        self._ranges = shard_ranges(self.num_envs, self.num_shards)
        self._init_workers([a for a, _ in self._ranges], [b for _, b in self._ranges])
        self.batch_size = checked_batch_size(batch_size, self.num_envs, self.num_shards, "shard")
        if shard_options is None or isinstance(shard_options, dict):
            per_shard_options = [dict(shard_options or {}) for _ in range(self.num_shards)]
        else:
            per_shard_options = [dict(o) for o in shard_options]
            if len(per_shard_options) != self.num_shards:
                raise ValueError(f"{len(per_shard_options)} shard_options for {self.num_shards} shards")
        self.shard_options = [{**DEFAULT_SHARD_OPTIONS, **o} for o in per_shard_options]
        if check_resources:
            shortage = resource_shortage(self.shard_options, ray.cluster_resources(), ray.available_resources(),
                                         [node.get("Resources") or {} for node in ray.nodes() if node.get("Alive")])
            if shortage:
                self.closed = True
                raise ValueError(f"RayVectorEnv: {shortage}")

        # -- the shards ------------------------------------------------------------------
        actors = []
        self._actors = actors
        self._finalizer = weakref.finalize(self, _kill_actors, actors)
        self._sources = [("fns", self.env_fns[start:stop]) if self.env_fns is not None
                         else ("id", env_fns, env_kwargs, wrappers) for start, stop in self._ranges]
        try:
            for k in range(self.num_shards):
                actors.append(self._new_actor(k))
            self._nodes: list[ShardPlace | None] = [None for _ in actors]
            hellos = self._hellos(start_timeout)
        except BaseException:
            self._finalizer()
            self._actors = None
            self.closed = True
            raise
        self._setup(hellos)

    # -- construction ------------------------------------------------------------------
    def _new_actor(self, k: int):
        start, stop = self._ranges[k]
        return _actor_class().options(**self.shard_options[k]).remote(
            k, stop - start, self._sources[k], self.autoreset_mode, self._vector_kwargs, self._failure)

    def _hellos(self, timeout: float) -> list[ShardHello]:
        refs = [actor.hello.remote() for actor in self._actors]
        ready, waiting = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        if waiting:
            missing = [refs.index(ref) for ref in waiting]
            raise TimeoutError(
                f"RayVectorEnv: shards {missing} were not placed or did not build their envs within "
                f"start_timeout={timeout} s (they ask for {[self.shard_options[k] for k in missing[:1]]}; "
                f"the cluster has {ray.available_resources()} available)"
            )
        hellos = []
        for k, ref in enumerate(refs):
            try:
                hello = ray.get(ref)
            except ray.exceptions.RayError as exc:
                raise WorkerDiedError(f"RayVectorEnv shard {k} (envs {self._env_range(k)}) died while starting: "
                                      f"{exc}", k) from exc
            if isinstance(hello, Failure):
                self._raise_failure(k, hello, note_closed=True)
            hellos.append(hello)
            self._nodes[k] = hello.place
        return hellos

    def _setup(self, hellos: list[ShardHello]) -> None:
        first = hellos[0]
        self.single_observation_space = first.single_observation_space
        self.single_action_space = first.single_action_space
        for k, hello in enumerate(hellos[1:], 1):
            if hello.single_observation_space != self.single_observation_space:
                self.close(terminate=True)
                raise RuntimeError(f"shard {k}'s observation space {hello.single_observation_space} differs from "
                                   f"shard 0's {self.single_observation_space}")
            if hello.single_action_space != self.single_action_space:
                self.close(terminate=True)
                raise RuntimeError(f"shard {k}'s action space {hello.single_action_space} differs from "
                                   f"shard 0's {self.single_action_space}")
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = dict(first.metadata)
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = first.render_mode
        self.backends = tuple(hello.backend for hello in hellos)

        self._obs_layout = Layout(self.single_observation_space, objects=True)
        self._act_layout = Layout(self.single_action_space, objects=True)
        self._fields = fixed_fields(self._obs_layout)
        self._obs_bufs = [None if name is None else np.zeros((self.num_envs, *leaf.shape), leaf.dtype)
                          for name, leaf in zip(self._fields, self._obs_layout.leaves)]
        self._obs_objects = [[None] * self.num_envs if name is None else None for name in self._fields]
        self._rewards = np.zeros(self.num_envs, np.float64)
        self._terminations = np.zeros(self.num_envs, np.bool_)
        self._truncations = np.zeros(self.num_envs, np.bool_)
        # Per shard: its record dtype and (batch view, field) pairs to copy a reply into.
        self._record_dtypes = []
        self._copies = []
        for start, stop in self._ranges:
            self._record_dtypes.append(result_dtype(self._obs_layout, stop - start))
            pairs = [(buf[start:stop], name) for buf, name in zip(self._obs_bufs, self._fields) if name is not None]
            pairs += [(self._rewards[start:stop], "rewards"), (self._terminations[start:stop], "terminations"),
                      (self._truncations[start:stop], "truncations")]
            self._copies.append(pairs)
        self._single_obs = self._obs_bufs[0] if self._obs_layout.is_leaf and self._fields[0] is not None else None
        self._step_methods = [actor.step for actor in self._actors]
        self._pending: list[tuple[int, Any]] = []  # (shard, ref) of the call in progress
        self._all_shards = list(range(self.num_shards))
        self._all_rows = np.arange(self.num_envs)
        # send/recv: the shards with a command out, shard -> ref (those handed back by recv: _ready)
        self._inflight: dict[int, Any] = {}
        # with env_failure="restart": what each shard with a step or reset out was sent: a
        # shard that dies then is started again
        self._out: dict[int, SentCommand] = {}
        self._next_shard = 0
        self._nodes_checked = time.monotonic()

    # -- properties ----------------------------------------------------------------------
    @property
    def actors(self) -> list:
        """The shards' Ray actor handles, in shard order (empty once closed)."""
        return list(self._actors or [])

    @property
    def shard_nodes(self) -> list[dict]:
        """Per shard: ``node_id``, ``node_ip`` and the actor's ``pid``."""
        return [{} if place is None else place._asdict() for place in self._nodes]

    @property
    def shard_ranges(self) -> list[tuple[int, int]]:
        """Per shard: the (start, stop) of its envs."""
        return list(self._ranges)

    @property
    def restarts(self) -> np.ndarray:
        """How many times each env was built again after a failure (``env_failure="restart"``;
        zeros otherwise): by its shard's FastVectorEnv, or with its whole shard."""
        if self._restarts is None:
            return np.zeros(self.num_envs, dtype=np.int64)
        return self._restarts.counts.copy()

    # -- the step ------------------------------------------------------------------------
    def step(self, actions):
        """Step every env with its action; returns (obs, rewards, terminations, truncations, infos)."""
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions) -> None:
        """Send each shard its envs' actions and return at once (AsyncVectorEnv API)."""
        self._assert_is_running()
        self._assert_no_pending_call("step_async")
        check_synchronous("RayVectorEnv", self.batch_size, self.num_envs)
        if self._inflight:
            raise AlreadyPendingCallError("send/recv has commands in flight: recv() them first", "recv")
        if self._autoreset_disabled:
            check_no_ended_envs(self._autoreset_envs)
        parts = self._split_actions(actions, self._all_shards, None)
        self._check_ray()
        self._pending = [(k, method.remote(part)) for k, (method, part) in enumerate(zip(self._step_methods, parts))]
        if self._restarts is not None:
            self._out = {k: _SENT_STEP for k in self._all_shards}
        self._state = CallState.WAITING_STEP

    def step_wait(self, timeout: float | None = None):
        """Wait for the step sent by :meth:`step_async`; ``multiprocessing.TimeoutError`` after ``timeout`` s."""
        replies = self._collect(CallState.WAITING_STEP, timeout, "step_wait")
        last = self._last_observations(replies)
        infos = self._unpack(replies, self._all_rows_of, self.num_envs)
        obs = self._observations()
        if self._restarts is not None:
            obs, infos = self._report_restarts(obs, last, infos)
        if self._autoreset_disabled:
            np.logical_or(self._terminations, self._truncations, out=self._autoreset_envs)
        return obs, self._copied(self._rewards), self._copied(self._terminations), self._copied(self._truncations), infos

    def _all_rows_of(self, k: int) -> np.ndarray:
        return self._all_rows[self._starts[k]:self._stops[k]]

    def _copied(self, array: np.ndarray) -> np.ndarray:
        return array.copy() if self.copy else array

    def _split_actions(self, actions, shards: list[int], positions: dict[int, slice | np.ndarray] | None) -> list:
        """Each shard's part of the batch: bytes when every leaf is a numeric array of the
        batch's shape, else the batch's own form cut to the shard's rows. ``positions``:
        the rows of ``actions`` that go to each shard (default: the shard's env range)."""
        count = batch_length(self.single_action_space, actions)
        expected = self.num_envs if positions is None else sum(self._stops[k] - self._starts[k] for k in shards)
        if count != expected:
            raise ValueError(f"{count} actions for {expected} envs (single action space {self.single_action_space})")
        rows = [slice(self._starts[k], self._stops[k]) if positions is None else positions[k] for k in shards]
        leaves = action_leaves(self._act_layout, actions, count)
        if leaves is not None:
            return [encode_actions(leaves, r) for r in rows]
        return [take_rows(self.single_action_space, actions, r) for r in rows]

    def _unpack(self, replies: list[tuple[int, Any]], rows_of: Callable[[int], np.ndarray], total: int) -> dict:
        """Copy each shard's record into the batch arrays; merge the infos over ``total`` rows
        (shard k's envs at ``rows_of(k)``). Failures are raised (all logged first)."""
        failures = [(k, reply) for k, reply in replies if type(reply) is Failure]
        if failures:
            self._raise_failures(failures, close=True)
        infos: dict[str, Any] = {}
        for k, reply in replies:
            restarted = type(reply) is _Restarted
            if restarted:
                # (a shard started again during this step: its envs report a truncation, with
                # their last observations, or with SAME_STEP the new envs' first ones)
                self._mark_truncated(k)
                reply = reply.reset
                if reply is None:
                    continue
            if type(reply) is bytes:
                data, shard_infos, objects = reply, None, None
            else:
                data, shard_infos, objects = reply
            record = np.frombuffer(data, self._record_dtypes[k])
            for view, name in self._copies[k]:
                view[...] = record[name][0]
            if objects is not None:
                start, stop = self._starts[k], self._stops[k]
                values = iter(objects)
                for store in self._obs_objects:
                    if store is not None:
                        store[start:stop] = next(values)
            if shard_infos:
                merge_infos(infos, shard_infos, rows_of(k), total)
            if restarted:
                self._mark_truncated(k)
        return infos

    def _mark_truncated(self, k: int) -> None:
        rows = slice(self._starts[k], self._stops[k])
        self._rewards[rows] = 0.0
        self._terminations[rows] = False
        self._truncations[rows] = True

    def _last_observations(self, replies: list[tuple[int, Any]]):
        """Every env's observation as the last step left it (a copy), when the replies hold
        a shard started again whose new envs' first observations overwrite them (SAME_STEP:
        the last ones go to ``final_obs``); else None."""
        if any(type(reply) is _Restarted and reply.reset is not None for _, reply in replies):
            return self._observation_rows(self._all_rows)
        return None

    def _report_restarts(self, obs, last, infos: dict, env_ids: np.ndarray | None = None):
        """With ``env_failure="restart"``: count the envs the shards' FastVectorEnvs rebuilt
        (from ``infos``), raise once the budget is overdrawn, and mark the envs of the shards
        started again (see :meth:`fastvec.vector._block.restarts.Restarts.report`). ``env_ids``:
        the env of each row (default: row k is env k)."""
        restarts = self._restarts
        restarts.learn(infos, env_ids)
        if restarts.total > self.max_restarts:
            errors = infos.get("env_error")
            flags = infos.get("env_restarted")
            last_error = errors[np.flatnonzero(flags)[-1]] if flags is not None and flags.any() else "?"
            self._shutdown(terminate=True)
            raise WorkerError(f"RayVectorEnv: max_restarts={self.max_restarts} restarts spent (restarts per env: "
                              f"{restarts.counts.tolist()}); the last failure: {last_error}. The vector env is closed.")
        if restarts.unreported:
            rows_of = None if env_ids is None else {int(e): k for k, e in enumerate(env_ids)}
            num_rows = self.num_envs if env_ids is None else len(env_ids)
            obs, infos = restarts.report(obs, last, infos, num_rows, rows_of,
                                         same_step=self.autoreset_mode is AutoresetMode.SAME_STEP,
                                         space=self.single_observation_space)
        return obs, infos

    def _observations(self):
        if self._single_obs is not None:
            return self._copied(self._single_obs)
        return self._observation_rows(slice(None))

    def _observation_rows(self, rows: slice | np.ndarray):
        view = isinstance(rows, slice) and not self.copy
        leaves = []
        for buf, store in zip(self._obs_bufs, self._obs_objects):
            if buf is None:
                leaves.append(tuple(store[rows] if isinstance(rows, slice) else [store[i] for i in rows.tolist()]))
            else:
                leaves.append(buf[rows] if view or not isinstance(rows, slice) else buf[rows].copy())
        return leaves[0] if self._obs_layout.is_leaf else self._obs_layout.join(leaves)

    # -- reset ------------------------------------------------------------------------------
    def reset_async(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        """Send the resets to the shards and return at once (AsyncVectorEnv API)."""
        self._assert_is_running()
        self._assert_no_pending_call("reset_async")
        seeds = seeds_per_env(seed, self.num_envs)
        options, mask = split_reset_options(options, self.num_envs)
        self._drain()
        self._check_ray()
        pending = []
        for k, actor in enumerate(self._actors):
            start, stop = self._starts[k], self._stops[k]
            shard_options = options
            if mask is not None:
                if not mask[start:stop].any():
                    continue
                shard_options = dict(options or {})
                shard_options["reset_mask"] = mask[start:stop].copy()
            pending.append((k, actor.reset.remote(seeds[start:stop], shard_options)))
            if self._restarts is not None:
                self._out[k] = SentCommand(ShardCommand.RESET, seeds[start:stop], shard_options)
        if self._restarts is not None:
            self._restarts.remember_seeds([s if mask is None or mask[e] else None for e, s in enumerate(seeds)])
        if mask is None:
            self._autoreset_envs[:] = False
        else:
            self._autoreset_envs[mask] = False
        self._pending = pending
        self._state = CallState.WAITING_RESET

    def reset_wait(self, timeout: float | None = None):
        """Wait for the resets sent by :meth:`reset_async`; returns (obs, infos)."""
        replies = self._collect(CallState.WAITING_RESET, timeout, "reset_wait")
        infos = self._unpack(replies, self._all_rows_of, self.num_envs)
        obs = self._observations()
        if self._restarts is not None:
            obs, infos = self._report_restarts(obs, None, infos)
        return obs, infos

    # -- async: send / recv ----------------------------------------------------------------
    def async_reset(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        """Start resetting the envs; their first observations come from :meth:`recv` (EnvPool API)."""
        self.reset_async(seed=seed, options=options)
        self._inflight = dict(self._pending)
        self._pending = []
        self._ready[:] = 1
        self._ready[list(self._inflight)] = 0
        self._state = CallState.DEFAULT

    def send(self, actions, env_ids=None) -> None:
        """Start stepping the envs ``env_ids`` (whole shards not already stepping) with
        ``actions`` (row k for env ``env_ids[k]``). Default ``env_ids``: every env handed
        back by the last :meth:`recv` (all envs after :meth:`reset`)."""
        self._assert_is_running()
        self._assert_no_pending_call("send")
        shards, positions = self._send_targets(env_ids)
        busy = [k for k in shards if k in self._inflight]
        if busy:
            raise ValueError(f"envs of shards {busy} are still stepping: recv() them before sending them new actions")
        if self._autoreset_disabled:
            done = [k for k in shards if self._autoreset_envs[self._starts[k]:self._stops[k]].any()]
            if done:
                raise AssertionError(f"envs of shards {done} terminated or truncated and autoreset_mode=DISABLED: "
                                     "reset them before stepping again")
        parts = self._split_actions(actions, shards, positions)
        self._check_ray()
        for k, part in zip(shards, parts):
            self._inflight[k] = self._step_methods[k].remote(part)
            self._ready[k] = 0
            if self._restarts is not None:
                self._out[k] = _SENT_STEP

    def _send_targets(self, env_ids) -> tuple[list[int], dict[int, slice | np.ndarray]]:
        """The shards ``env_ids`` covers (whole shards only; see ``_whole_workers``) and, per
        shard, the rows of the actions that go to its envs, in env order."""
        shards, rows = self._whole_workers(env_ids)
        ids = list(range(rows.start, rows.stop)) if isinstance(rows, slice) else rows.tolist()
        where = {env: position for position, env in enumerate(ids)}
        positions = {}
        for k in shards:
            rows = [where[env] for env in range(self._starts[k], self._stops[k])]
            first = rows[0]
            positions[k] = slice(first, first + len(rows)) if rows == list(range(first, first + len(rows))) else np.asarray(rows)
        return shards, positions

    def recv(self, timeout: float | None = None):
        """Wait for ``batch_size`` envs (whole shards, the first ready, round-robin so none
        starves); returns their (obs, rewards, terminations, truncations, infos) in env
        order, with ``infos["env_id"]``. Rewards are 0 and flags False after a reset."""
        self._assert_is_running()
        if not self._inflight:
            raise NoAsyncCallError("Calling `recv` with nothing sent: call `send` or `async_reset` first.", "recv")
        per_shard = self.num_envs // self.num_shards
        want = min(self.batch_size, per_shard * len(self._inflight)) // per_shard if self.batch_size < self.num_envs \
            else len(self._inflight)
        order = [k for k in (self._next_shard + j for j in range(self.num_shards))
                 for k in [k % self.num_shards] if k in self._inflight]
        refs = [self._inflight[k] for k in order]
        deadline = None if timeout is None else time.perf_counter() + timeout
        while True:
            if not ray.is_initialized():
                self._died(order[0], None, "Ray was shut down (ray.shutdown()), and its actors with it")
            # Every shard ready now (a shard that died counts as ready: _get below raises
            # for it); ray.wait chooses among more ready refs than asked for in an order of
            # its own, so the rotation picks from all of them.
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            if len(ready) >= want:
                break
            chunk = CHECK_INTERVAL_S if deadline is None else max(0.0, min(CHECK_INTERVAL_S, deadline - time.perf_counter()))
            ready, _ = ray.wait(refs, num_returns=want, timeout=chunk)
            if len(ready) >= want:
                continue
            self._check_ready([(k, self._inflight[k]) for k in order])
            if deadline is not None and time.perf_counter() >= deadline:
                raise multiprocessing.TimeoutError(f"The call to `recv` has timed out after {timeout} second(s).")
        ready_set = set(ready)
        got = [k for k in order if self._inflight[k] in ready_set][:want]
        self._next_shard = (got[-1] + 1) % self.num_shards
        got.sort()
        pairs = [(k, self._inflight[k]) for k in got]
        replies = self._get(pairs, None, "recv")
        for k in got:
            del self._inflight[k]
            self._ready[k] = 1
            self._out.pop(k, None)
        last = self._last_observations(replies)
        offsets, total = {}, 0
        for k in got:
            offsets[k] = total
            total += self._stops[k] - self._starts[k]
        infos = self._unpack(replies, lambda k: np.arange(offsets[k], offsets[k] + self._stops[k] - self._starts[k]), total)
        env_ids, rows = self._received_envs(got)
        infos["env_id"] = env_ids
        obs = self._observation_rows(rows)
        if self._restarts is not None:
            obs, infos = self._report_restarts(obs, last, infos, env_ids)
        if self._autoreset_disabled:
            self._autoreset_envs[rows] = self._terminations[rows] | self._truncations[rows]
        return (obs, *self._step_rows(rows, self._rewards, self._terminations, self._truncations), infos)

    def _drain(self) -> None:
        """Wait out send/recv steps still in flight (their results are dropped)."""
        if not self._inflight:
            return
        pairs = sorted(self._inflight.items())
        self._inflight = {}
        replies = self._get(pairs, None, "reset")
        self._out = {}
        failures = [(k, reply) for k, reply in replies if type(reply) is Failure]
        if failures:
            self._raise_failures(failures, close=True)
        self._ready[:] = 1

    # -- call / attributes (the rest: WorkerVectorEnv) ----------------------------------------
    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Get an attribute from every env, in env order."""
        self._start_call(ShardCommand.GET_ATTR, lambda k: (name,))
        return self._finish_call(None, "get_attr")

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """Set an attribute on every env: one value for all, or a list/tuple of ``num_envs`` values."""
        values = self._values_per_env(values)
        self._start_call(ShardCommand.SET_ATTR, lambda k: (name, list(values[self._starts[k]:self._stops[k]])))
        self._finish_call(None, "set_attr")

    def render(self) -> tuple[Any, ...] | None:
        """Render every env (``render_mode`` set at construction); one frame per env."""
        self._start_call(ShardCommand.RENDER, lambda k: ())
        return self._finish_call(None, "render")

    def _send_command(self, command: ShardCommand | str, payload_of: Callable[[int], tuple]) -> None:
        """Call the shards' method ``command`` (``Shard.call``, ``get_attr``, ``set_attr``, ``render``;
        WorkerVectorEnv.call sends ``"call"``, a plain string, as to any backend)."""
        command = ShardCommand(command)
        if self._inflight:
            raise AlreadyPendingCallError("send/recv has commands in flight: recv() them first", "recv")
        self._check_ray()
        self._pending = [(k, getattr(actor, command.value).remote(*payload_of(k))) for k, actor in enumerate(self._actors)]

    def _collect(self, expected: CallState, timeout: float | None, caller: str) -> list[tuple[int, Any]]:
        """The replies of the step or reset that is pending (``expected``); the call is over."""
        self._assert_pending(expected, caller)
        replies = self._get(self._pending, timeout, caller)
        self._state = CallState.DEFAULT
        self._out = {}
        return replies

    def _wait_replies(self, timeout: float | None, caller: str) -> list[tuple[int, Any]]:
        """The shards' replies; the envs' exceptions re-raised (the vector env stays open)."""
        replies = self._get(self._pending, timeout, caller)
        failures = [(k, reply) for k, reply in replies if type(reply) is Failure]
        if failures:
            self._state = CallState.DEFAULT  # the call is over, whatever an env raised (a TimeoutError too)
            self._raise_failures(failures, close=False)
        return replies

    # -- waiting and errors ------------------------------------------------------------------
    def _check_ray(self) -> None:
        """A call on a shard of a Ray that was shut down would start a new Ray and fail there."""
        if not ray.is_initialized():
            self._died(0, None, "Ray was shut down (ray.shutdown()), and its actors with it")

    def _get(self, pairs: list[tuple[int, Any]], timeout: float | None, caller: str) -> list[tuple[int, Any]]:
        """The replies of ``pairs`` ((shard, ref)), in order; a shard that died raises WorkerDiedError.

        ``ray.get`` of a list waits for every ref before it raises for any, so a shard that
        died would wait for one that is slow (or hangs): the wait is cut into chunks of
        :data:`CHECK_INTERVAL_S`, after each of which the refs that are ready are checked
        for an error.
        """
        pairs = list(pairs)
        refs = [ref for _, ref in pairs]
        if not ray.is_initialized():
            self._died(pairs[0][0] if pairs else 0, None, "Ray was shut down (ray.shutdown()), and its actors with it")
        deadline = None if timeout is None else time.perf_counter() + timeout
        while True:
            chunk = CHECK_INTERVAL_S if deadline is None else max(0.0, min(CHECK_INTERVAL_S, deadline - time.perf_counter()))
            try:
                try:
                    values = ray.get(refs, timeout=chunk)
                    break
                except ray.exceptions.GetTimeoutError:
                    self._check_ready(pairs)
                    if deadline is not None and time.perf_counter() >= deadline:
                        raise multiprocessing.TimeoutError(
                            f"The call to `{caller}` has timed out after {timeout} second(s); it is still pending.") from None
                except ray.exceptions.RayError as exc:
                    self._died(self._failed_shard(pairs, exc), exc)
            except _ShardLost as lost:
                # (env_failure="restart": a new shard takes the dead one's place; what it
                # answers stands for the dead one's reply, and the wait goes on for the rest)
                i = [k for k, _ in pairs].index(lost.k)
                pairs[i] = (lost.k, ray.put(self._replace_shard(lost.k, lost.error)))
                refs[i] = pairs[i][1]
        return [(k, value) for (k, _), value in zip(pairs, values)]

    def _check_ready(self, pairs: list[tuple[int, Any]]) -> None:
        """Raise WorkerDiedError for the first of ``pairs`` whose ref is ready with a Ray error."""
        if not ray.is_initialized():
            self._died(pairs[0][0], None, "Ray was shut down (ray.shutdown()), and its actors with it")
        refs = [ref for _, ref in pairs]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        ready = set(ready)
        for k, ref in pairs:
            if ref in ready:
                try:
                    ray.get(ref, timeout=0)
                except ray.exceptions.GetTimeoutError:
                    pass
                except ray.exceptions.RayError as exc:
                    self._died(k, exc)
        # Ray reports an actor of a lost node dead once the node is marked dead; should that
        # report not reach this driver, the node table says it too (read once a second).
        now = time.monotonic()
        if now - self._nodes_checked >= 1.0:
            self._nodes_checked = now
            alive = {node["NodeID"] for node in ray.nodes() if node.get("Alive")}
            for k, _ in pairs:
                node_id = self._node_id(k)
                if node_id not in alive:
                    self._died(k, None, f"its node {node_id} is dead (Ray's node table)")

    def _replace_shard(self, k: int, error: str):
        """``env_failure="restart"``: start a new actor for shard ``k``, whose actor died with a
        step or a reset out (``error``: how), if the budget allows (else raise as with
        ``"raise"``). Returns what stands for the dead shard's reply: for a step, a
        :class:`_Restarted`; for a reset, the new shard's reset of every one of its envs."""
        restarts = self._restarts
        if restarts.total >= self.max_restarts:
            logger.error(f"RayVectorEnv: max_restarts={self.max_restarts} restarts spent (restarts per env: "
                         f"{restarts.counts.tolist()}); this failure ends the vector env.")
            self._died(k, None, error, final=True)
        out = self._out.pop(k)
        envs = list(range(self._starts[k], self._stops[k]))
        restarts.record(envs, error, "", in_reset=out.command != ShardCommand.STEP)
        try:
            ray.kill(self._actors[k], no_restart=True)
        except Exception:
            pass
        actor = self._new_actor(k)
        self._actors[k] = actor  # (the same list the finalizer kills)
        self._step_methods[k] = actor.step
        try:
            hello = ray.get(actor.hello.remote(), timeout=self._start_timeout)
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as exc:
            self._died(k, exc, f"the shard started in place of a dead one did not start: {_first_line(exc)}", final=True)
        if isinstance(hello, Failure):
            self._raise_failure(k, hello)  # (its envs' constructor failed: retrying would loop)
        if (hello.single_observation_space != self.single_observation_space
                or hello.single_action_space != self.single_action_space):
            self._shutdown(terminate=True)
            raise RuntimeError(f"RayVectorEnv: shard {k}, started again, has spaces {hello.single_observation_space}"
                               f" / {hello.single_action_space}, not {self.single_observation_space} / "
                               f"{self.single_action_space}; the vector env is closed.")
        self._nodes[k] = hello.place
        seeds = [derived_seed(restarts.seeds[e], int(restarts.counts[e])) for e in envs]
        if out.command == ShardCommand.STEP:
            reply = self._get_one(k, actor.restarted.remote(seeds))
            return reply if type(reply) is Failure else _Restarted(reply)
        options = {key: value for key, value in (out.options or {}).items() if key != "reset_mask"}
        return self._get_one(k, actor.reset.remote(seeds, options or None))

    def _get_one(self, k: int, ref):
        """The reply of one call to the shard started again (a second death raises)."""
        try:
            return ray.get(ref, timeout=self._start_timeout)
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as exc:
            self._died(k, exc, final=True)

    def _place(self, k: int) -> ShardPlace:
        """Where shard ``k``'s actor runs (question marks before its hello), for messages."""
        place = self._nodes[k] if k < len(self._nodes) else None
        return _UNKNOWN_PLACE if place is None else place

    def _node_id(self, k: int) -> str | None:
        """The node shard ``k``'s actor runs on (None before its hello)."""
        place = self._place(k)
        return None if place is _UNKNOWN_PLACE else place.node_id

    def _failed_shard(self, pairs: list[tuple[int, Any]], exc: BaseException) -> int:
        """Which shard's ref holds the error ``ray.get`` raised (the first that does)."""
        for k, ref in pairs:
            ready, _ = ray.wait([ref], timeout=0)
            if ready:
                try:
                    ray.get(ref, timeout=0)
                except ray.exceptions.RayError:
                    return k
        return pairs[0][0]

    def _died(self, k: int, exc: BaseException | None, how: str | None = None, final: bool = False) -> None:
        """Shard ``k`` died (``exc``: Ray's error, ``how``: in words): raise WorkerDiedError,
        closing the vector env; or, with ``env_failure="restart"`` and a step or a reset
        out to it, raise :class:`_ShardLost` for the wait to start it again."""
        how = how or _first_line(exc)
        if not final and self._restarts is not None and k in self._out and ray.is_initialized():
            raise _ShardLost(k, f"the shard's actor died: {how}")
        place = self._place(k)
        where = f"node {place.node_id} ({place.node_ip}), actor pid {place.pid}"
        self._shutdown(terminate=True)
        error = WorkerDiedError(f"RayVectorEnv shard {k} (envs {self._env_range(k)}) on {where} died: {how}; "
                                "the vector env is closed.", k)
        error.node_id = self._node_id(k)
        if exc is None:
            raise error
        raise error from exc

    def _raise_failures(self, failures: list[tuple[int, Failure]], close: bool) -> None:
        """Re-raise the shards' env exceptions (all logged first, as AsyncVectorEnv logs its
        workers' errors; the last one raised), closing the vector env unless ``close=False``."""
        if len(failures) > 1:
            for k, failure in failures:
                index = self._global_index(k, failure)
                logger.error(f"Received the following error from Worker-{index} - Shutting it down")
                logger.error(failure.trace)
            logger.error("Raising the last exception back to the main process.")
        self._raise_failure(*failures[-1], close=close)

    def _global_index(self, k: int, failure: Failure) -> int | None:
        return None if failure.env_index is None else self._starts[k] + int(failure.env_index)

    def _raise_failure(self, k: int, failure: Failure, close: bool = True, note_closed: bool = False) -> None:
        env_index = self._global_index(k, failure)
        if close:
            self._shutdown(terminate=True)
        place = self._place(k)
        where = f"env {env_index}" if env_index is not None else f"shard {k} (envs {self._env_range(k)})"
        note = (f"raised by {where} in RayVectorEnv shard {k} on node {place.node_id} "
                f"({place.node_ip}) during {failure.phase}"
                + ("; the vector env is closed." if close or note_closed else "."))
        exc = None
        if failure.payload is not None:
            try:
                exc = pickle.loads(failure.payload)
            except Exception:
                exc = None
        if not isinstance(exc, BaseException):
            raise WorkerError(f"{failure.type_name}: {failure.text}\n({note})\n\nShard traceback:\n{failure.trace}",
                              k, env_index)
        # The shard's own notes name its local indices: the traceback keeps them.
        if hasattr(exc, "__notes__"):
            try:
                del exc.__notes__
            except AttributeError:
                pass
        annotate(exc, env_index, note)
        raise exc from RemoteTraceback(failure.trace)

    def _env_range(self, k: int) -> str:
        return f"{self._starts[k]}..{self._stops[k] - 1}"

    # -- closing ------------------------------------------------------------------------------
    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        """Close the shards' envs (politely, for up to ``timeout`` s, default 5), then kill the actors."""
        if self._actors is not None and not terminate and ray.is_initialized():
            pending = [ref for _, ref in self._pending] + list(self._inflight.values())
            if pending:
                if self._state is not CallState.DEFAULT:
                    logger.warn(f"Calling `close` while waiting for a pending call to `{self._state.value}` to complete.")
                try:
                    ray.wait(pending, num_returns=len(pending), timeout=5.0 if timeout is None else timeout)
                except Exception:
                    pass
            try:
                refs = [actor.close.remote() for actor in self._actors]
                ray.wait(refs, num_returns=len(refs), timeout=5.0 if timeout is None else timeout)
            except Exception:
                pass
        self._shutdown(terminate=True)

    def _shutdown(self, terminate: bool = True) -> None:
        self._state = CallState.DEFAULT
        self._pending = []
        self._inflight = {}
        self._out = {}
        if self._finalizer is not None:
            self._finalizer()  # kills the actors (once)
        self._actors = None
        self._step_methods = []
        self.closed = True

    def __repr__(self) -> str:
        name = self.env_id or "env_fns"
        return f"RayVectorEnv({name}, num_envs={self.num_envs}, num_shards={getattr(self, 'num_shards', '?')})"


def _first_line(exc: BaseException | None) -> str:
    """Ray's error in a line: its first, and the one that says why, if any."""
    if exc is None:
        return "unknown cause"
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    why = [line for line in lines[1:] if "because" in line or "killed" in line]
    return f"{type(exc).__name__}: " + " ".join((lines[:1] + why[:1]) if lines else [])
