"""Stable-Baselines3 adapter: any Gymnasium ``VectorEnv`` (fastvec's included) as an SB3 ``VecEnv``.

Importing this module imports Stable-Baselines3 (``pip install fastvec[sb3]``);
``import fastvec`` does not.
"""
from __future__ import annotations

import multiprocessing
import re
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper

try:
    from stable_baselines3.common.vec_env.base_vec_env import (
        VecEnv,
        VecEnvIndices,
        VecEnvObs,
        VecEnvStepReturn,
    )
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "fastvec.integrations.sb3 needs Stable-Baselines3: pip install 'fastvec[sb3]'"
    ) from e

from fastvec.integrations._sb3_env_access import ATTRIBUTE, build_env
from fastvec.vector._caller.arguments import check_env_fns, same_value
from fastvec.vector._block.batch_tree import copy_batch, put_rows
from fastvec.vector._caller.worker_vector_env import CallState
from fastvec.vector.fast_vector_env import FastVectorEnv
from fastvec.vector.native_vector_env import NativeVectorEnv

__all__ = ["FastVecEnv", "SB3VecEnv", "to_sb3"]

_SUPPORTED_MODES = (AutoresetMode.SAME_STEP, AutoresetMode.DISABLED)


class SB3VecEnv(VecEnv):
    """A Gymnasium :class:`~gymnasium.vector.VectorEnv` seen through SB3's ``VecEnv`` API.

    Stable-Baselines3 resets a finished sub-environment in the same step and hands back
    the last observation of the episode in ``infos[i]["terminal_observation"]``. The
    adapter gets that from the vector env's autoreset mode:

    * ``AutoresetMode.SAME_STEP`` (recommended, no extra call): the vector env resets
      finished envs itself; ``terminal_observation`` comes from ``infos["final_obs"]``, the
      episode's last info from ``infos["final_info"]`` and the reset info goes to
      :attr:`reset_infos`.
    * ``AutoresetMode.DISABLED``: the step's observations of finished envs are the terminal
      ones; the adapter then resets just those envs with
      ``vector_env.reset(options={"reset_mask": dones})`` (one extra call on steps where an
      episode ended).
    * ``AutoresetMode.NEXT_STEP`` (Gymnasium's default) is rejected with a ``ValueError``:
      there the reset observation arrives only one step later, which SB3 cannot express.
      Build the vector env with ``autoreset_mode=gym.vector.AutoresetMode.SAME_STEP``, e.g.
      ``gym.make_vec(id, n, vectorization_mode="fastvec",
      vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})``.

    What SB3's ``DummyVecEnv`` returns, this returns too: float32 rewards, boolean
    ``dones = terminated | truncated``, one info dict per env with
    ``"TimeLimit.truncated"`` (``truncated and not terminated``) and, for finished envs,
    ``"terminal_observation"``. It also adds SB3's episode statistics
    ``infos[i]["episode"] = {"r", "l", "t"}`` (as SB3's ``Monitor`` writes them) for every
    finished episode, unless the env already reports an ``"episode"`` entry (a ``Monitor`` or
    ``RecordEpisodeStatistics`` wrapper), which is then passed through unchanged. Dict and
    Tuple observations are returned as dicts / tuples of batched arrays.

    On steps where no episode ended, the adapter does no per-env Python work beyond
    building the list of info dicts SB3 requires (and scattering the env's own infos when it
    returned any).

    ``seed(s)`` follows SB3: the next :meth:`reset` seeds env ``i`` with ``s + i``; so do
    ``set_options`` (per-env options, applied at the next reset through ``reset_mask`` when
    they differ between envs; on the very first reset, envs whose options differ from env 0's
    are reset twice, first with env 0's options, since a masked reset needs every env reset once).

    After a KeyboardInterrupt (Ctrl-C) in :meth:`step_wait` (in ``model.learn()``, say), the
    next ``step_wait`` returns the results of the step that was interrupted, finished by the
    workers meanwhile, and the actions given since are not used (with a warning): SB3's
    learner still holds the observations those interrupted actions were chosen from, so its
    trajectories, episode ends included, go on unbroken. This needs a fastvec vector env
    (``FastVectorEnv``, ``MultiAgentVectorEnv``) as ``vector_env``: under a vector wrapper the
    interrupted step is finished and dropped by the next step, as ``FastVectorEnv.step``
    does. :meth:`reset` after an interrupt waits for the step and then resets.

    Example:
        >>> import gymnasium as gym
        >>> from fastvec.integrations.sb3 import to_sb3
        >>> venv = gym.vector.SyncVectorEnv(
        ...     [lambda: gym.make("CartPole-v1") for _ in range(2)],
        ...     autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        >>> env = to_sb3(venv)
        >>> env.num_envs, env.observation_space.shape
        (2, (4,))
        >>> _ = env.seed(0)
        >>> obs = env.reset()
        >>> obs.shape
        (2, 4)
        >>> obs, rewards, dones, infos = env.step(np.array([0, 1]))
        >>> rewards, dones, infos
        (array([1., 1.], dtype=float32), array([False, False]), [{'TimeLimit.truncated': False}, {'TimeLimit.truncated': False}])
        >>> env.close()

    Args:
        vector_env: a Gymnasium vector env in ``SAME_STEP`` or ``DISABLED`` autoreset mode.
        copy_obs: copy the batched observations (and ``final_obs`` entries) before handing
            them to SB3. ``None`` (default) copies only when the vector env says it does not
            (``copy=False``): SB3's rollout code keeps the previous observation across a step,
            so it must not alias a buffer that the next step overwrites.

    Attributes:
        vector_env: the wrapped Gymnasium vector env.
    """

    def __init__(self, vector_env: VectorEnv, *, copy_obs: bool | None = None) -> None:
        if not isinstance(vector_env, VectorEnv):
            raise TypeError(
                "to_sb3 expects a gymnasium.vector.VectorEnv (e.g. from gym.make_vec(..., "
                f"vectorization_mode='fastvec')), got {type(vector_env).__name__}"
            )
        self.vector_env = vector_env
        self.autoreset_mode = _autoreset_mode_of(vector_env)
        if self.autoreset_mode not in _SUPPORTED_MODES:
            raise ValueError(
                "The SB3 adapter needs a vector env that autoresets in the same step "
                "(autoreset_mode=AutoresetMode.SAME_STEP) or not at all (DISABLED); got "
                f"{self.autoreset_mode}. Build it with e.g. gym.make_vec(id, num_envs, "
                "vectorization_mode='fastvec', vector_kwargs={'autoreset_mode': "
                "gym.vector.AutoresetMode.SAME_STEP}) or SyncVectorEnv(env_fns, "
                "autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)."
            )
        if copy_obs is None:
            copy_obs = getattr(vector_env.unwrapped, "copy", True) is False
        self.copy_obs = bool(copy_obs)
        num_envs = int(vector_env.num_envs)
        super().__init__(num_envs, vector_env.single_observation_space, vector_env.single_action_space)

        self._actions: Any = None
        self._composite_actions = isinstance(self.action_space, (gym.spaces.Dict, gym.spaces.Tuple))
        self._has_reset = False
        self._same_step = self.autoreset_mode == AutoresetMode.SAME_STEP
        self._t_start = time.time()
        self._episode_returns = np.zeros(num_envs, dtype=np.float64)
        self._episode_lengths = np.zeros(num_envs, dtype=np.int64)
        self._warned_indices: set[str] = set()
        # a KeyboardInterrupt ended the vector env's step in step_wait: the next step_wait
        # returns that step if the vector env still has it pending (see the class docstring)
        self._step_interrupted = False

    # ------------------------------------------------------------------ reset / step
    def reset(self) -> VecEnvObs:
        """Reset every env (with the seeds / options set since the last reset) and return the observations."""
        self._step_interrupted = False  # (the vector env's reset finishes an interrupted step first)
        seeds = list(self._seeds)
        seed_arg = None if all(s is None for s in seeds) else seeds
        options = self._options
        if all(same_value(o, options[0]) for o in options[1:]) or not self._has_reset:
            # With different options per env, the very first reset must still be a full one
            # (a masked reset needs every env reset once): it uses env 0's options, and the
            # envs with other options are then reset again below.
            obs, infos = self.vector_env.reset(seed=seed_arg, options=dict(options[0]) if options[0] else None)
            self.reset_infos = _split_infos(infos, self.num_envs, fill=True)
            self._has_reset = True
            pending = np.array([not same_value(o, options[0]) for o in options])
        else:
            obs, pending = None, np.ones(self.num_envs, dtype=bool)
        while pending.any():
            # Different options per env: one masked reset per distinct options dict.
            first = int(np.flatnonzero(pending)[0])
            mask = pending & np.array([same_value(o, options[first]) for o in options])
            pending &= ~mask
            group_obs, infos = self.vector_env.reset(seed=seed_arg, options={**options[first], "reset_mask": mask})
            if obs is None:
                obs = copy_batch(group_obs)
            else:
                obs = put_rows(obs, mask, group_obs, mask)
            for j, info in enumerate(_split_infos(infos, self.num_envs, fill=True)):
                if mask[j]:
                    self.reset_infos[j] = info
        self._reset_seeds()
        self._reset_options()
        self._episode_returns[:] = 0.0
        self._episode_lengths[:] = 0
        return copy_batch(obs) if self.copy_obs else obs

    def step_async(self, actions: np.ndarray) -> None:
        """Store the actions; :meth:`step_wait` steps the vector env with them.

        Dict and Tuple actions may come one per env (a list, as SB3's own VecEnvs take
        them, ``actions[i]`` for env ``i``); they are batched into a dict / tuple of arrays.
        """
        if self._composite_actions and isinstance(actions, (list, np.ndarray)):
            actions = _batch(self.action_space, actions)
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        """Step every env, autoreset the finished ones, and return SB3's ``(obs, rewards, dones, infos)``.

        After a KeyboardInterrupt in the last ``step_wait``: that step's results (see the class
        docstring)."""
        out = self._interrupted_step() if self._step_interrupted else None
        if out is None:
            try:
                out = self.vector_env.step(self._actions)
            except KeyboardInterrupt:
                self._step_interrupted = True
                raise
        obs, rewards, terminated, truncated, infos = out
        self._actions = None
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        dones = terminated | truncated
        self._episode_returns += rewards
        self._episode_lengths += 1
        proto = _INFO_PROTO
        sb3_infos: list[dict[str, Any]] = [proto.copy() for _ in range(self.num_envs)]
        # (ndarray.any and np.flatnonzero are several times slower than these on small arrays)
        done_idx = dones.nonzero()[0].tolist()
        any_done = bool(done_idx)

        if self._same_step:
            if infos:
                final_obs = infos.get("final_obs")
                final_info = infos.get("final_info")
                top = _split_infos(infos, self.num_envs, skip=("final_obs", "final_info"))
                for i, info in top.items():
                    if dones[i]:
                        # The top level of a finished env holds its reset info, plus the episode
                        # statistics of a vector-level RecordEpisodeStatistics wrapper.
                        if "episode" in info:
                            sb3_infos[i]["episode"] = info.pop("episode")
                        self.reset_infos[i] = info
                    else:
                        sb3_infos[i].update(info)
                        sb3_infos[i]["TimeLimit.truncated"] = False
                if any_done:
                    if final_obs is None:
                        raise self._no_final_obs(done_idx[0])
                    ended = infos.get("_final_obs")
                    if ended is not None and not all(ended[i] for i in done_idx):
                        raise self._no_final_obs(int(np.flatnonzero(dones & ~np.asarray(ended, bool))[0]))
                    if final_info is not None:
                        for i, info in _split_infos(final_info, self.num_envs).items():
                            sb3_infos[i].update(info)
                    for i in done_idx:
                        last = final_obs[i]
                        sb3_infos[i]["terminal_observation"] = copy_batch(last) if self.copy_obs else last
                        if i not in top:
                            self.reset_infos[i] = {}
            elif any_done:
                raise self._no_final_obs(done_idx[0])
        else:  # DISABLED: the finished envs' observations are terminal; reset them here.
            if infos:
                for i, info in _split_infos(infos, self.num_envs).items():
                    sb3_infos[i].update(info)
                    sb3_infos[i]["TimeLimit.truncated"] = False
            if any_done:
                for i in done_idx:
                    sb3_infos[i]["terminal_observation"] = _tree_row(obs, i)
                reset_obs, reset_infos = self.vector_env.reset(options={"reset_mask": dones.copy()})
                # Only the finished rows are new; with copy=False both may be the same buffer.
                obs = put_rows(obs, dones, reset_obs, dones)
                split = _split_infos(reset_infos, self.num_envs)
                for i in done_idx:
                    self.reset_infos[i] = split.get(i, {})

        if any_done:
            now = round(time.time() - self._t_start, 6)
            for i in done_idx:
                info = sb3_infos[i]
                info["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
                if "episode" not in info:
                    info["episode"] = {
                        "r": round(float(self._episode_returns[i]), 6),
                        "l": int(self._episode_lengths[i]),
                        "t": now,
                    }
            self._episode_returns[dones] = 0.0
            self._episode_lengths[dones] = 0

        if self.copy_obs:
            obs = copy_batch(obs)
        return obs, np.array(rewards, dtype=np.float32), dones, sb3_infos

    def _interrupted_step(self) -> tuple | None:
        """The results of the vector env's step that a KeyboardInterrupt ended in the last
        :meth:`step_wait`, once its workers have finished it; None when the vector env does not
        hold it (a vector wrapper's, one that is not fastvec's, or finished by another call)."""
        self._step_interrupted = False
        venv = self.vector_env
        if not getattr(venv, "_interrupted", False):
            return None
        state, out = venv._finish_interrupted("step_wait", warn=False)
        if state is CallState.WAITING_STEP:
            warnings.warn("step_wait returned the step that a KeyboardInterrupt interrupted, as its workers "
                          "finished it; the actions given since were not used", stacklevel=3)
            return out
        if state is not CallState.DEFAULT:  # (DISABLED: the reset of the envs that ended, after the step)
            warnings.warn(f"step_wait first finished the `{state.value}` that a KeyboardInterrupt interrupted and "
                          "dropped its results", stacklevel=3)
        return None

    def _no_final_obs(self, row: int) -> RuntimeError:
        """The error for a finished row with no ``final_obs`` (its env was not reset)."""
        if hasattr(self.vector_env.unwrapped, "agent_mask"):
            return RuntimeError(
                f"row {row} finished while its env goes on: its agent left, or has not come yet (a "
                "MultiAgentVectorEnv whose agents die or spawn). SB3's VecEnv has one episode per row, ended by its env's reset, so it cannot take "
                "such rows. Step the MultiAgentVectorEnv directly (agent_mask says which rows are "
                "present), or use envs whose agents all end together."
            )
        return RuntimeError(
            f"A SAME_STEP vector env finished an episode in row {row} but returned no infos['final_obs'] "
            "for it; cannot build SB3's terminal_observation."
        )

    def close(self) -> None:
        """Close the vector env."""
        self.vector_env.close()

    # ------------------------------------------------------------------ attributes and methods
    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The attribute ``attr_name`` of each env in ``indices`` (the vector env's ``get_attr``)."""
        values = self._base("get_attr")(attr_name)
        return [values[i] for i in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set ``attr_name`` to ``value`` in each env in ``indices`` (the others keep theirs)."""
        idx = list(self._get_indices(indices))
        if sorted(idx) == list(range(self.num_envs)):
            values = [value] * self.num_envs
        else:
            try:
                values = list(self._base("get_attr")(attr_name))
            except AttributeError as e:
                raise AttributeError(
                    f"set_attr({attr_name!r}, indices={indices!r}): setting an attribute in only "
                    "some envs keeps the others' current values, but they have none"
                ) from e
            for i in idx:
                values[i] = value
        self._base("set_attr")(attr_name, values)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        """Call ``method_name(*method_args, **method_kwargs)`` in each env in ``indices``.

        With ``indices`` naming only some envs, the method runs in those envs alone when the
        vector env exposes its sub-envs (``SyncVectorEnv.envs``); otherwise (multiprocess
        backends) Gymnasium's ``call`` runs it in every env and the requested results are
        returned, with a warning, since side effects then reach every env.

        Over :class:`fastvec.NativeVectorEnv` (compiled envs) only the methods that read can be
        called (``render``, ``get_wrapper_attr``, ``has_wrapper_attr``, ``__str__``,
        ``__repr__``: its ``CALLABLE_METHODS``); any other raises ``NotImplementedError``
        naming the multiprocess backend, which calls any method.
        """
        idx = list(self._get_indices(indices))
        some = sorted(idx) != list(range(self.num_envs))
        if some:
            sub_envs = self._sub_envs()
            if sub_envs is not None:
                return [sub_envs[i].get_wrapper_attr(method_name)(*method_args, **method_kwargs) for i in idx]
        results = self._base("call")(method_name, *method_args, **method_kwargs)
        # (said once the call has run: a method the vector env refuses raised above, and did not run)
        if some and method_name not in self._warned_indices and not (
                self._native() is not None and method_name in NativeVectorEnv.CALLABLE_METHODS):  # (these only read)
            self._warned_indices.add(method_name)
            warnings.warn(
                f"env_method({method_name!r}, indices={indices!r}): "
                f"{type(self.vector_env).__name__} can only call a method in every env; it ran in "
                "all of them and the requested results are returned.",
                RuntimeWarning,
                stacklevel=2,
            )
        return [results[i] for i in idx]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        """Whether each env in ``indices`` is wrapped in ``wrapper_class``.

        Exact (``isinstance`` along the wrapper chain) when the vector env exposes its sub-envs;
        over :class:`fastvec.NativeVectorEnv`, whether one of the wrappers its compiled envs
        have built in (``env_wrappers``: ``TimeLimit``, ``OrderEnforcing``) is a
        ``wrapper_class`` (so ``Monitor``: ``False``; SB3's ``evaluate_policy`` then counts
        episodes from the rewards and dones, which are the env's own); otherwise decided from
        the class names in each env's ``str()`` (``<Monitor<TimeLimit<...>>>``), fetched with
        ``call("__str__")``.
        """
        idx = list(self._get_indices(indices))
        sub_envs = self._sub_envs()
        if sub_envs is not None:
            from stable_baselines3.common.env_util import is_wrapped

            return [is_wrapped(sub_envs[i], wrapper_class) for i in idx]
        native = self._native()
        if native is not None:
            wrapped = any(issubclass(w, wrapper_class) for w in native.env_wrappers)
            return [wrapped for _ in idx]
        names = self._base("call")("__str__")
        return [wrapper_class.__name__ in _WRAPPER_NAME.findall(str(names[i])) for i in idx]

    def _base(self, name: str) -> Any:
        """``call`` / ``get_attr`` / ``set_attr`` of the vector env, or of the env under its vector
        wrappers (Gymnasium's ``VectorWrapper`` does not forward them)."""
        env = self.vector_env
        while not hasattr(env, name) and isinstance(env, VectorWrapper):
            env = env.env
        return getattr(env, name)

    def _native(self) -> NativeVectorEnv | None:
        """The NativeVectorEnv under the vector env's wrappers, if that is what it is."""
        base = self.vector_env.unwrapped
        return base if isinstance(base, NativeVectorEnv) else None

    def _sub_envs(self) -> list[gym.Env] | None:
        """The sub-env objects when the vector env publicly holds them in this process (SyncVectorEnv)."""
        envs = getattr(self.vector_env.unwrapped, "envs", None)
        if isinstance(envs, (list, tuple)) and len(envs) == self.num_envs and all(isinstance(e, gym.Env) for e in envs):
            return list(envs)
        return None

    # ------------------------------------------------------------------ rendering
    def get_images(self) -> Sequence[np.ndarray | None]:
        """One RGB frame per env (``render_mode="rgb_array"``), from the vector env's ``render``."""
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but get_images needs `rgb_array` to obtain images."
            )
            return [None] * self.num_envs
        frames = self.vector_env.render()
        if frames is None:
            return [None] * self.num_envs
        return list(frames)

    def render(self, mode: str | None = None) -> np.ndarray | None:
        """SB3's rendering: the frames of all envs tiled into one image (``rgb_array``)."""
        return super().render(mode=mode)

    def __repr__(self) -> str:
        return f"SB3VecEnv({self.vector_env!r})"


class FastVecEnv(SB3VecEnv):
    """SB3's ``SubprocVecEnv``, run by :class:`fastvec.FastVectorEnv`: a one-word move.

    Takes what ``SubprocVecEnv(env_fns, start_method=None)`` takes, so
    ``SubprocVecEnv(env_fns)`` becomes ``FastVecEnv(env_fns)`` and
    ``make_vec_env(env_id, n_envs, vec_env_cls=SubprocVecEnv)`` becomes
    ``make_vec_env(env_id, n_envs, vec_env_cls=FastVecEnv)``. It builds
    ``FastVectorEnv(env_fns, context=start_method, autoreset_mode=SAME_STEP, **fastvec_kwargs)``
    and returns, step for step, what ``SubprocVecEnv`` returns for the same seeds and actions
    (observations, float32 rewards, dones, infos with ``"terminal_observation"`` and
    ``"TimeLimit.truncated"``, ``reset_infos``); see :class:`SB3VecEnv` for the stepping.

    ``get_attr``, ``set_attr``, ``env_method`` and ``env_is_wrapped`` act in the envs that
    ``indices`` names and no others, as ``SubprocVecEnv``'s do: ``get_attr`` returns
    ``env.get_wrapper_attr(name)`` (a method uncalled), ``set_attr`` sets the attribute on the
    outermost wrapper, an index may be negative or repeated. (Each env carries a small helper
    attribute for this, ``_fastvec_sb3_access``, which is how one env is reached through the
    vector env's ``call``.)

    What differs from ``SubprocVecEnv``: envs share worker processes (``num_workers``,
    default the usable cores), so envs that keep state in module globals (``np.random``'s
    global generator, say) share it with the other envs of their worker; pass
    ``num_workers=len(env_fns)`` for one process per env. No env runs in the calling process
    (``step_in_caller=False`` unless given). ``start_method=None`` is Python's default start
    method, where SB3 picks ``"forkserver"``.

    Example:
        >>> import gymnasium as gym
        >>> from stable_baselines3.common.env_util import make_vec_env
        >>> from fastvec.integrations.sb3 import FastVecEnv
        >>> env = FastVecEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])  # was: SubprocVecEnv
        >>> env.seed(0)
        [0, 1, 2, 3]
        >>> obs = env.reset()
        >>> obs.shape
        (4, 4)
        >>> obs, rewards, dones, infos = env.step(np.array([0, 1, 0, 1]))
        >>> rewards, dones
        (array([1., 1., 1., 1.], dtype=float32), array([False, False, False, False]))
        >>> env.set_attr("gravity", 3.0, indices=[1, 3])
        >>> env.get_attr("gravity")
        [9.8, 3.0, 9.8, 3.0]
        >>> env.close()
        >>> env = make_vec_env("CartPole-v1", n_envs=8, vec_env_cls=FastVecEnv)  # was: SubprocVecEnv
        >>> env.num_envs, env.env_is_wrapped(gym.wrappers.TimeLimit, indices=0)
        (8, [True])
        >>> env.close()

    Args:
        env_fns: callables that each build one env, as for ``SubprocVecEnv``.
        start_method: the multiprocessing start method (``"fork"``, ``"spawn"``,
            ``"forkserver"``) or ``None`` for Python's default.
        **fastvec_kwargs: more arguments of :class:`fastvec.FastVectorEnv` (``num_workers``,
            ``shared_memory``, ``copy``, ``step_in_caller``, ...), but not ``context`` (that is
            ``start_method``) nor an ``autoreset_mode`` other than ``SAME_STEP``.

    Raises:
        TypeError: ``env_fns`` is not a non-empty sequence of callables, or ``context`` is given.
        ValueError: an unknown ``start_method``, an ``autoreset_mode`` other than ``SAME_STEP``,
            or (raised by the env's worker) an ``env_fns`` entry that returns an env another
            entry returned too.
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], start_method: str | None = None,
                 **fastvec_kwargs: Any) -> None:
        env_fns = check_env_fns(env_fns, "FastVecEnv")
        if start_method is not None and start_method not in multiprocessing.get_all_start_methods():
            raise ValueError(
                f"cannot find context for {start_method!r}: start_method must be None or one of "
                f"{multiprocessing.get_all_start_methods()}"
            )
        if "context" in fastvec_kwargs:
            raise TypeError(
                "FastVecEnv takes the multiprocessing start method as start_method (as SubprocVecEnv), not context"
            )
        mode = fastvec_kwargs.pop("autoreset_mode", AutoresetMode.SAME_STEP)
        if mode not in (AutoresetMode.SAME_STEP, AutoresetMode.SAME_STEP.value):
            raise ValueError(
                "FastVecEnv resets finished envs in the same step, as SB3 does: autoreset_mode must be "
                f"SAME_STEP, got {mode!r}"
            )
        fastvec_kwargs.setdefault("step_in_caller", False)
        env_fns = [partial(build_env, fn, i) for i, fn in enumerate(env_fns)]  # (each env gets its EnvAccess)
        vector_env = FastVectorEnv(env_fns, context=start_method, autoreset_mode=AutoresetMode.SAME_STEP,
                                   **fastvec_kwargs)
        try:
            super().__init__(vector_env)
        except BaseException:
            vector_env.close()
            raise

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """``env.get_wrapper_attr(attr_name)`` of each env in ``indices`` (a method is returned, not called)."""
        return self._in_envs("get_attr", indices, attr_name)

    def has_attr(self, attr_name: str) -> bool:
        """Whether every env has ``attr_name`` (on any of its wrappers)."""
        return all(self._in_envs("has_attr", None, attr_name))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """``setattr(env, attr_name, value)`` on the outermost wrapper of each env in ``indices``."""
        self._in_envs("set_attr", indices, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        """Call ``method_name(*method_args, **method_kwargs)`` in the envs in ``indices`` (only those)."""
        return self._in_envs("env_method", indices, method_name, method_args, method_kwargs)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        """Whether each env in ``indices`` has a ``wrapper_class`` in its wrapper chain."""
        return self._in_envs("is_wrapped", indices, wrapper_class)

    def _in_envs(self, op: str, indices: VecEnvIndices, *args: Any) -> list[Any]:
        """Run the env-side operation ``op`` in the envs ``indices`` names, results in that order."""
        if indices is None:
            return [results[0] for results in self.vector_env.call(ATTRIBUTE, op, None, *args)]
        envs = range(self.num_envs)
        order = []
        for i in self._get_indices(indices):
            try:
                order.append(envs[i])
            except IndexError:
                raise IndexError(f"env index {i!r} is out of range for {self.num_envs} envs") from None
            except TypeError:
                raise TypeError(f"env indices must be ints, got {i!r}") from None
        counts = Counter(order)
        per_env = self.vector_env.call(ATTRIBUTE, op, dict(counts), *args)
        taken: Counter[int] = Counter()
        out = []
        for i in order:
            out.append(per_env[i][taken[i]])
            taken[i] += 1
        return out

    def __repr__(self) -> str:
        return f"FastVecEnv({self.vector_env!r})"


def to_sb3(vector_env: VectorEnv, *, copy_obs: bool | None = None) -> SB3VecEnv:
    """Turn a Gymnasium vector env (fastvec's or any other) into a Stable-Baselines3 ``VecEnv``.

    The vector env must autoreset in the same step or not at all; see :class:`SB3VecEnv`.

    Over :class:`fastvec.NativeVectorEnv` (what ``make_vec(..., vectorization_mode="fastvec")``
    returns for the classic-control ids) SB3's tooling works as over ``DummyVecEnv``
    (``learn``, ``evaluate_policy``, ``EvalCallback``, ``VecMonitor``, ``VecNormalize``,
    ``VecFrameStack``, ``save``/``load``), but its compiled envs can neither be changed nor run
    arbitrary methods: ``set_attr`` and ``env_method`` of anything but ``render``,
    ``get_wrapper_attr``, ``has_wrapper_attr``, ``__str__`` and ``__repr__`` raise
    ``NotImplementedError`` (so does HER's ``compute_reward``); ``env_is_wrapped`` is ``True``
    only for ``TimeLimit`` and ``OrderEnforcing``, whose behaviour they have built in. Build
    the vector env with ``vector_kwargs={"native": False}`` for envs that take all of it.

    Example:
        >>> import gymnasium as gym
        >>> from stable_baselines3 import PPO
        >>> from fastvec.integrations.sb3 import to_sb3
        >>> venv = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync",
        ...                     vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
        >>> model = PPO("MlpPolicy", to_sb3(venv), n_steps=16, batch_size=64, seed=0)
        >>> _ = model.learn(64)
    """
    return SB3VecEnv(vector_env, copy_obs=copy_obs)


# ---------------------------------------------------------------------- helpers
_INFO_PROTO = {"TimeLimit.truncated": False}  # copied into every info dict (faster than a literal)
_WRAPPER_NAME = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)")


def _autoreset_mode_of(vector_env: VectorEnv) -> AutoresetMode:
    """The autoreset mode a vector env declares (``metadata["autoreset_mode"]``), NEXT_STEP if none."""
    mode = vector_env.metadata.get("autoreset_mode") if isinstance(vector_env.metadata, dict) else None
    if mode is None:
        mode = getattr(vector_env, "autoreset_mode", AutoresetMode.NEXT_STEP)
    if isinstance(mode, AutoresetMode):
        return mode
    try:
        return AutoresetMode(mode)
    except ValueError as e:
        raise ValueError(f"Unknown autoreset_mode {mode!r}; expected one of {[m.value for m in AutoresetMode]}") from e


def _split_infos(
    infos: dict[str, Any], num_envs: int, *, skip: tuple[str, ...] = (), fill: bool = False
) -> Any:
    """Gymnasium's batched infos (values with ``_key`` masks) as one dict per env.

    Returns ``{env_index: info}`` for the envs that have any entry, or, with ``fill``, a list
    of ``num_envs`` dicts. NumPy scalars become Python scalars; nested dicts are split the same way.
    """
    per_env: dict[int, dict[str, Any]] = {}
    masks = {f"_{key}" for key in infos}  # (Gymnasium's mask of key k, also an int one, is "_k")
    for key, value in infos.items():
        if key in skip or key in masks:
            continue
        mask = infos.get(f"_{key}")
        idx = np.asarray(mask).reshape(-1).nonzero()[0].tolist() if mask is not None else range(num_envs)
        if isinstance(value, dict):
            nested = _split_infos(value, num_envs)
            for i in idx:
                per_env.setdefault(i, {})[key] = nested.get(i, {})
        elif isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype != object:
            # (one number per env, the common case: tolist makes every Python scalar at once)
            values = value.tolist()
            for i in idx:
                per_env.setdefault(i, {})[key] = values[i]
        else:
            for i in idx:
                v = value[i]
                if isinstance(v, np.generic):
                    v = v.item()
                per_env.setdefault(i, {})[key] = v
    if fill:
        return [per_env.get(i, {}) for i in range(num_envs)]
    return per_env


def _batch(space: gym.Space, items: Sequence[Any]) -> Any:
    """One value of ``space`` per env, batched as a Gymnasium vector env takes them."""
    return gym.vector.utils.concatenate(space, items, gym.vector.utils.create_empty_array(space, len(items)))


def _tree_row(obs: Any, i: int) -> Any:
    """Env ``i``'s observation (a copy) out of a batched observation (array, dict or tuple)."""
    if isinstance(obs, dict):
        return {k: _tree_row(v, i) for k, v in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_tree_row(v, i) for v in obs)
    return np.array(obs[i], copy=True)
