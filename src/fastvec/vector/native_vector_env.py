"""NativeVectorEnv: N copies of a compiled env (fastvec.native) stepped by one Cython call."""
from __future__ import annotations

import copy as _copy
import os
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec
from gymnasium.error import ClosedEnvironmentError, ResetNeeded
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from fastvec.native import RENDER_MODES, Batch, get_native_spec
from fastvec.native.kit import fv_autoreset
from fastvec.vector._caller.arguments import seeds_per_env, split_reset_options

__all__ = ["NativeVectorEnv"]

_MODES = {mode: fv_autoreset[f"FV_{mode.name}"] for mode in AutoresetMode}
# Below this much work per step (ns), threads cost more than they save.
_THREAD_WORK_NS = 60_000.0


class NativeVectorEnv(Batch, VectorEnv):
    """In-process batched compiled envs (CartPole/MountainCar/Acrobot/Pendulum and any env
    registered with ``fastvec.native.register``), identical to their Python twins.

    All ``num_envs`` states live in contiguous arrays and one ``nogil`` Cython
    call steps the whole batch (dynamics, termination, ``TimeLimit``
    truncation, autoreset), writing straight into preallocated output buffers.
    With the same seeds and actions every observation, reward, ``terminated``
    and ``truncated`` equals what
    ``SyncVectorEnv([lambda: gym.make(env_id, **env_kwargs)] * num_envs)``
    returns, bit for bit, resets included (``reset(seed=s)`` seeds env ``i``
    with ``s + i`` and autoresets draw from the same ``PCG64`` stream as each
    env's ``np_random``).

    fastvec's own ids: ``CartPole-v1``, ``CartPole-v0``, ``MountainCar-v0``,
    ``MountainCarContinuous-v0``, ``Acrobot-v1``, ``Pendulum-v1``
    (``fastvec.native.native_ids()`` lists every registered one).

    Args:
        env_id: a native id (see above).
        num_envs: number of copies.
        num_threads: most threads a step may use (default: all cores). Batches
            too small to gain from threads always run on the calling thread;
            results never depend on the thread count.
        autoreset_mode: ``NEXT_STEP`` (default), ``SAME_STEP`` (``final_obs``
            and ``final_info`` in the infos, as ``SyncVectorEnv`` gives them) or
            ``DISABLED`` (reset finished envs with
            ``reset(options={"reset_mask": mask})``).
        exact: ``False`` selects the fast CartPole mode (polynomial sin/cos and
            reciprocals, vectorised over the structure-of-arrays state): not
            bit-identical (float64 states drift from the exact mode by ~1e-10 over
            1,000 steps; observations stay within 1e-5, tested). Other envs ignore it.
        render_mode: ``None`` or ``"rgb_array"`` (frames drawn by Gymnasium's
            renderer from each env's state).
        copy: ``True`` (default, like ``SyncVectorEnv``): ``step``/``reset``
            return fresh arrays. ``False``: they return the env's own buffers,
            overwritten by the next call (fastest; copy what you keep).
        max_episode_steps: override the registered ``TimeLimit``.
        **env_kwargs: the env's constructor kwargs that the compiled env
            honours (``sutton_barto_reward`` for CartPole, ``goal_velocity``
            for the MountainCars, ``g`` for Pendulum; for an env registered
            without ``kwargs``, its parameters); others raise TypeError.

    Example:
        >>> import numpy as np
        >>> import fastvec
        >>> envs = fastvec.NativeVectorEnv("CartPole-v1", num_envs=3)
        >>> obs, infos = envs.reset(seed=42)
        >>> obs.shape, obs.dtype
        ((3, 4), dtype('float32'))
        >>> obs, rewards, terminated, truncated, infos = envs.step(np.array([0, 1, 1]))
        >>> rewards
        array([1., 1., 1.])
        >>> envs.close()
    """

    #: Which backend ``gym.make_vec(..., vectorization_mode="fastvec")`` chose and why
    #: (a short sentence, set by make_vec); ``None`` for a NativeVectorEnv built directly.
    backend_reason: str | None = None

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        *,
        num_threads: int | None = None,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        exact: bool = True,
        render_mode: str | None = None,
        copy: bool = True,
        max_episode_steps: int | None = None,
        **env_kwargs: Any,
    ) -> None:
        spec = get_native_spec(env_id)
        if not isinstance(num_envs, (int, np.integer)) or isinstance(num_envs, bool) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        num_envs = int(num_envs)
        if render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode {render_mode!r} is not supported by NativeVectorEnv; "
                             f"expected one of {RENDER_MODES}")
        spec.check_kwargs(env_kwargs)
        self.autoreset_mode = (autoreset_mode if isinstance(autoreset_mode, AutoresetMode)
                               else AutoresetMode(autoreset_mode))
        if max_episode_steps is None:
            max_episode_steps = spec.time_limit() or 2**31 - 1
        if not isinstance(max_episode_steps, (int, np.integer)) or max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be a positive int, got {max_episode_steps!r}")
        if num_threads is None:
            num_threads = os.cpu_count() or 1
        if not isinstance(num_threads, (int, np.integer)) or num_threads < 1:
            raise ValueError(f"num_threads must be a positive int or None, got {num_threads!r}")

        self.env_id = env_id
        self.num_envs = num_envs
        self.copy = bool(copy)
        self.exact = bool(exact)
        self.render_mode = render_mode
        self.env_kwargs = dict(env_kwargs)
        self.max_episode_steps = min(int(max_episode_steps), 2**31 - 1)
        self._spec_native = spec
        # the Python env this one reproduces (if any): spaces, metadata, constants, rendering
        ref = spec.make_reference(render_mode=render_mode, **env_kwargs)
        self._ref = ref
        params = spec.resolve_params(ref, env_kwargs)
        self.single_observation_space, self.single_action_space = spec.spaces(ref, params)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.metadata = dict(ref.metadata) if ref is not None else {}
        self.metadata["autoreset_mode"] = self.autoreset_mode

        cost_ns = spec.cost_ns if self.exact or spec.fast_cost_ns is None else spec.fast_cost_ns
        self._setup(
            spec.kernel, num_envs, self.single_observation_space, self.single_action_space,
            _MODES[self.autoreset_mode], params, self.max_episode_steps, not self.exact, int(num_threads),
            max(1, int(_THREAD_WORK_NS / cost_ns)), spec.after_reset)

        try:
            self.spec = _copy.deepcopy(gym.spec(env_id))
            self.spec.kwargs = {**self.spec.kwargs, **env_kwargs, "num_envs": num_envs}
            self.spec.max_episode_steps = self.max_episode_steps
        except Exception:  # pragma: no cover - spec is informative only
            self.spec = None

    # ------------------------------------------------------------------ API
    @property
    def num_threads(self) -> int:
        """Most threads a step may use (batches below the size threshold use one)."""
        return self._num_threads

    @num_threads.setter
    def num_threads(self, value: int) -> None:
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"num_threads must be a positive int, got {value!r}")
        self._set_num_threads(int(value))

    @property
    def np_random_seed(self) -> tuple[int | None, ...]:
        """The seed each env was last seeded with (None where seeded from OS entropy)."""
        return tuple(self._seeds)

    # step(actions) is Batch.step (one C-level call): it returns
    # (obs, rewards, terminated, truncated, infos), like SyncVectorEnv.step. After close() it
    # raises ClosedEnvironmentError (close clears _was_reset, which Batch.step tests anyway).

    def _assert_is_running(self) -> None:
        if self.closed:
            raise ClosedEnvironmentError(f"Trying to operate on `{type(self).__name__}`, after a call to `close()`.")

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset all envs (or those in ``options["reset_mask"]``), seeding env i with seed + i."""
        self._assert_is_running()
        n = self.num_envs
        seeds = seeds_per_env(seed, n)
        options, mask = split_reset_options(options, n)
        for s in seeds:
            if s is not None and (not isinstance(s, (int, np.integer)) or isinstance(s, bool) or s < 0):
                raise ValueError(f"Seed must be a non-negative python integer or None, got {s!r}")
        params = self._spec_native.reset_params(options)  # checked before any stream moves
        self._seed(seeds, np.ones(n, dtype=bool) if mask is None else mask)
        defaults = self._set_params(params)
        try:
            self._reset_envs(mask)
        finally:
            self._set_params(defaults)
        obs = self._obs.copy() if self.copy else self._obs
        return obs, {}

    def render(self) -> tuple[np.ndarray, ...] | None:
        """Frames of every env (``render_mode="rgb_array"``), drawn by the Python env's renderer."""
        self._assert_is_running()
        if self.render_mode is None:
            gym.logger.warn("You are calling render method without specifying any render mode. "
                            f'Pass render_mode="rgb_array" to NativeVectorEnv("{self.env_id}", ...).')
            return None
        if not self._was_reset:
            raise ResetNeeded("Cannot call render() before calling reset()")
        ref = self._ref
        frames = []
        for i in range(self.num_envs):
            for attr, value in self._spec_native.state_attributes(self._fields, i).items():
                setattr(ref, attr, value)
            frames.append(ref.render())
        return tuple(frames)

    # The envs are compiled, so only what the Python env holds as constants (the parameters
    # fixed at construction) and their state can be read; nothing can be set.
    _UNTRACKED_ATTRS = ("steps_beyond_terminated", "last_u", "np_random", "_np_random", "screen", "clock", "unwrapped")

    #: The env methods :meth:`call` answers (they only read); any other raises NotImplementedError.
    CALLABLE_METHODS = ("render", "get_wrapper_attr", "has_wrapper_attr", "__str__", "__repr__")

    @property
    def env_wrappers(self) -> tuple[type[gym.Wrapper], ...]:
        """The Gymnasium wrappers whose behaviour every compiled env has built in, outermost
        first, as ``gym.make`` would add them: ``TimeLimit`` (when the env has a time limit)
        and ``OrderEnforcing`` (``step`` and ``render`` before ``reset`` raise ``ResetNeeded``).
        ``PassiveEnvChecker`` is not among them: the compiled envs are not checked. No other
        wrapper can be applied to them (``make_vec`` with ``wrappers`` builds FastVectorEnv)."""
        limited = self.max_episode_steps < 2**31 - 1
        return (gym.wrappers.TimeLimit,) * limited + (gym.wrappers.OrderEnforcing,)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Read an attribute of every env (SyncVectorEnv's ``call`` for non-callables).

        Constants of the Python env (``gravity``, ``max_speed``, ``spec``,
        ``render_mode``...; without a Python env, the parameters) are the same for every
        env; ``state`` (or what holds the state of an env registered without
        ``reference_state``: its state fields) is each env's own, as the Python env would
        hold it. Of the env methods, only those that read (:attr:`CALLABLE_METHODS`) can be
        called: ``render`` (one frame per env, ``None`` each without a render mode),
        ``get_wrapper_attr(name)`` (as ``call(name)``), ``has_wrapper_attr(name)``, and
        ``__str__`` / ``__repr__`` (what ``str`` of ``gym.make(env_id)`` would say, with the
        wrappers of :attr:`env_wrappers`, e.g. ``<TimeLimit<OrderEnforcing<CartPoleEnv<CartPole-v1>>>>``).
        Any other method raises ``NotImplementedError``: the envs are compiled.
        """
        self._assert_is_running()
        if name in self.CALLABLE_METHODS:
            return self._call_method(name, *args, **kwargs)
        return self._read(name)

    def _single_env_spec(self) -> EnvSpec | None:
        """What ``gym.make(env_id, **env_kwargs).spec`` is: the registered spec with the
        kwargs the env was made with (``render_mode`` among them) and its episode limit."""
        try:
            spec = _copy.deepcopy(gym.spec(self.env_id))
        except Exception:  # pragma: no cover - registered natively only, no Gymnasium id
            return None
        extra = {} if self.render_mode is None else {"render_mode": self.render_mode}
        spec.kwargs = {**spec.kwargs, **self.env_kwargs, **extra}
        if self.max_episode_steps < 2**31 - 1:  # (that one stands for no limit)
            spec.max_episode_steps = self.max_episode_steps
        return spec

    def _read(self, name: str) -> tuple[Any, ...]:
        """:meth:`call` of an attribute (not one of :attr:`CALLABLE_METHODS`): its value per env."""
        if name == "np_random_seed":
            return self.np_random_seed
        if name == "spec":
            return tuple(self._single_env_spec() for _ in range(self.num_envs))
        state_attributes = self._spec_native.state_attributes
        if name in state_attributes(self._fields, 0):
            return tuple(state_attributes(self._fields, i)[name] for i in range(self.num_envs))
        if name in self._UNTRACKED_ATTRS:
            raise NotImplementedError(
                f"NativeVectorEnv does not track {name!r} per env; use the multiprocess backend "
                "(fastvec.FastVectorEnv, or vector_kwargs={'native': False} in make_vec) for it")
        if self._ref is None:
            if name in self._param_fields:
                return (self._param_fields[name].item(),) * self.num_envs
            raise AttributeError(f"{self.env_id} envs have no attribute {name!r}")
        try:
            value = self._ref.get_wrapper_attr(name)
        except AttributeError:
            raise AttributeError(f"{self.env_id} envs have no attribute {name!r}") from None
        if callable(value):
            raise NotImplementedError(
                f"NativeVectorEnv cannot call env method {name!r}: its envs are compiled (it calls only "
                f"{', '.join(self.CALLABLE_METHODS)}). Use the multiprocess backend "
                "(vector_kwargs={'native': False} in make_vec) to call other methods")
        return (value,) * self.num_envs

    def _call_method(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """:meth:`call` of one of :attr:`CALLABLE_METHODS`."""
        if name == "render":
            if args or kwargs:
                raise TypeError("render() takes no arguments")
            frames = self.render()
            return (None,) * self.num_envs if frames is None else frames
        if name in ("get_wrapper_attr", "has_wrapper_attr"):
            attr = _one_name(name, *args, **kwargs)
            if attr in self.CALLABLE_METHODS:
                if name == "has_wrapper_attr":
                    return (True,) * self.num_envs
                raise NotImplementedError(
                    f"NativeVectorEnv cannot hand out the env method {attr!r} of its compiled envs; "
                    f"call it with call({attr!r})")
            if name == "get_wrapper_attr":
                return self._read(attr)
            try:
                self._read(attr)
            except AttributeError:
                return (False,) * self.num_envs
            except NotImplementedError:  # it exists, but cannot be read or called here
                pass
            return (True,) * self.num_envs
        if args or kwargs:
            raise TypeError(f"{name}() takes no arguments")
        inner = f"<{type(self._ref).__name__}<{self.env_id}>>" if self._ref is not None else f"<{self.env_id}>"
        for wrapper in reversed(self.env_wrappers):
            inner = f"<{wrapper.__name__}{inner}>"
        return (inner,) * self.num_envs

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Same as :meth:`call` (as in SyncVectorEnv)."""
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        """Not supported: the compiled envs' parameters are fixed at construction."""
        self._assert_is_running()
        raise NotImplementedError(
            f"NativeVectorEnv cannot set {name!r}: its envs' parameters are fixed at construction "
            "(pass env kwargs to the constructor), or use the multiprocess backend "
            "(vector_kwargs={'native': False} in make_vec) to change env attributes")

    def close_extras(self, **kwargs: Any) -> None:
        """Close the Python env's renderer if it was opened. From now on ``step``, ``reset``,
        ``call``, ``get_attr``, ``set_attr`` and ``render`` raise ClosedEnvironmentError (as
        Gymnasium's vector envs do); ``close`` again does nothing."""
        self._was_reset = False  # (Batch.step then sees ``closed``: no test of its own per step)
        ref = getattr(self, "_ref", None)
        if ref is not None:
            ref.close()

    def __repr__(self) -> str:
        return f"NativeVectorEnv({self.env_id}, num_envs={self.num_envs})"


def _one_name(method: str, *args: Any, **kwargs: Any) -> str:
    """The one argument ``name`` of ``get_wrapper_attr(name)`` / ``has_wrapper_attr(name)``."""
    if len(args) != 1 or kwargs:
        raise TypeError(f"{method}() takes one argument, the attribute's name")
    name = args[0]
    if not isinstance(name, str):
        raise TypeError(f"{method}(): the attribute's name must be a str, got {type(name).__name__}")
    return name
