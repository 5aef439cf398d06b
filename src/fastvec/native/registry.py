"""The registry of native envs: which ids ``NativeVectorEnv`` runs compiled, and how.

Each :class:`NativeEnvSpec` ties an id to a compiled env (the ``KERNEL`` of its binding
module) and says where its spaces, parameters and rendering come from: by default from the
Python env it reproduces (Gymnasium's registered entry point for the id), its parameters
read from that env's attributes of the same names.

Example:
    >>> from fastvec.native import can_run_natively, native_ids
    >>> "CartPole-v1" in native_ids()
    True
    >>> can_run_natively("Pendulum-v1", {"g": 9.81}, None)
    True
    >>> can_run_natively("Pendulum-v1", {"gravity": 9.81}, None)
    False
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import gymnasium as gym
import numpy as np

from fastvec.native.kit import kernel_info

__all__ = ["NativeEnvSpec", "register", "native_ids", "get_native_spec", "can_run_natively",
           "RENDER_MODES", "is_real", "is_bool", "legacy_promotion"]

#: render modes the native backend honours (rgb_array is drawn by the reference env's renderer)
RENDER_MODES = (None, "rgb_array")


def is_real(value: Any) -> bool:
    """A Python int or float (a NumPy scalar would change the reference's arithmetic: NumPy 2
    promotion treats NumPy scalars as strongly typed)."""
    return type(value) in (int, float)


def is_bool(value: Any) -> bool:
    """A Python or NumPy bool."""
    return isinstance(value, (bool, np.bool_))


def legacy_promotion() -> bool:
    """True when NumPy promotes ``float32 scalar * Python float`` to float64 (NumPy 1.x's
    value-based promotion) rather than keeping float32 (NEP 50, NumPy 2). Envs that
    reproduce float32 arithmetic take it as a parameter."""
    return type(np.float32(1.0) * 1.0) is not np.float32


Space = gym.spaces.Space


@dataclass(frozen=True)
class NativeEnvSpec:
    """How ``NativeVectorEnv`` runs one id on a compiled env.

    Args:
        env_id: the id; ``NativeVectorEnv(env_id, n)`` runs it, and, when Gymnasium has an
            env registered under the same id, ``gym.make_vec(env_id, n,
            vectorization_mode="fastvec")`` too.
        kernel: the compiled env (``KERNEL`` of its binding module, see ``fastvec.native.kit``).
        reference: the Python env this one reproduces (a class, a callable or an entry-point
            string); ``None``: Gymnasium's entry point for ``env_id``, if registered. Spaces,
            metadata, rendering and by default the parameters come from it.
        params: the parameter values: a callable ``params(env, env_kwargs) -> dict`` (``env``:
            the reference env, or None), or a mapping of values, which env kwargs of the same
            names override; a parameter given by neither is read from the reference env's
            attribute of the same name.
        kwargs: the env kwargs accepted, each with a check of its value (``value -> bool``).
            ``None``: the parameters' names, with Python int, float or bool values.
        observation_space, action_space: without a reference env: each a space, or a callable
            of the parameters dict.
        max_episode_steps: the TimeLimit; ``None``: Gymnasium's registered one for
            ``env_id``, else no limit.
        reset_options: ``reset_options(options) -> dict``: the parameter values in force for
            one explicit ``reset(options=...)`` (e.g. reset bounds); default: options ignored.
        after_reset: ``after_reset(obs, fields, rows)`` finishes, in NumPy, the observations
            ``obs[rows]`` of envs just reset (``fields``: state field name -> ``[n]`` array).
        reference_state: ``reference_state(fields, i) -> dict``: attributes of the reference
            env that hold env ``i``'s state (set before rendering env i; ``get_attr`` reads
            them per env). Default: each state field under its own name.
        cost_ns: rough cost of one env step in ns (batches under ~60 µs of work run on the
            calling thread only).
        fast_cost_ns: the same in the env's fast mode (``exact=False``), if it has one.

    Example:
        >>> import fastvec
        >>> from fastvec.native import NativeEnvSpec, register
        >>> from fastvec.native.envs import mountaincar
        >>> register(NativeEnvSpec(
        ...     "MyMountainCar-v0", mountaincar.KERNEL,
        ...     reference="gymnasium.envs.classic_control:MountainCarEnv", max_episode_steps=100,
        ...     params={"reset_low": -0.6, "reset_high": -0.4}))  # the others: the reference's attributes
        >>> envs = fastvec.NativeVectorEnv("MyMountainCar-v0", num_envs=2)
        >>> obs, infos = envs.reset(seed=0)
        >>> obs.shape, envs.single_action_space
        ((2, 2), Discrete(3))
    """

    env_id: str
    kernel: Any
    reference: Callable[..., gym.Env] | str | None = None
    params: Callable[[gym.Env | None, dict], dict] | Mapping[str, Any] = field(default_factory=dict)
    kwargs: Mapping[str, Callable[[Any], bool]] | None = None
    observation_space: Space | Callable[[dict], Space] | None = None
    action_space: Space | Callable[[dict], Space] | None = None
    max_episode_steps: int | None = None
    reset_options: Callable[[dict | None], dict] | None = None
    after_reset: Callable[[np.ndarray, dict, np.ndarray], None] | None = None
    reference_state: Callable[[dict, int], dict] | None = None
    cost_ns: float = 100.0
    fast_cost_ns: float | None = None

    def __post_init__(self) -> None:
        info = kernel_info(self.kernel)  # TypeError / ImportError for what is not a compiled env
        object.__setattr__(self, "_info", info)

    @property
    def param_names(self) -> list[str]:
        """The compiled env's parameters, in declaration order."""
        return [name for name, _, _ in self._info["params"]]

    def _entry_point(self) -> Callable[..., gym.Env] | None:
        ref = self.reference
        if ref is None:
            try:
                ref = gym.spec(self.env_id).entry_point
            except gym.error.Error:
                return None
        if isinstance(ref, str):
            ref = gym.envs.registration.load_env_creator(ref)
        return ref

    @property
    def has_reference(self) -> bool:
        """Whether a Python env backs this one (spaces, render, parameters)."""
        return self._entry_point() is not None

    def check_kwargs(self, env_kwargs: dict[str, Any]) -> None:
        """Raise TypeError for an env kwarg the compiled env does not honour."""
        accepted = self.kwargs
        if accepted is None:
            accepted = {name: lambda v: is_real(v) or is_bool(v) for name in self.param_names}
        for key, value in env_kwargs.items():
            if key not in accepted:
                raise TypeError(
                    f"{self.env_id} (native) got an unexpected keyword argument {key!r}; "
                    f"supported: {sorted(accepted) or 'none'}")
            if not accepted[key](value):
                raise TypeError(
                    f"{self.env_id} (native): {key}={value!r} of type {type(value).__name__} is not "
                    "supported (expected a Python int or float, or a bool for flags)")

    def make_reference(self, render_mode: str | None = None, **env_kwargs: Any) -> gym.Env | None:
        """The Python env this one reproduces, unwrapped, with these kwargs (or None)."""
        creator = self._entry_point()
        if creator is None:
            if render_mode is not None:
                raise ValueError(f"{self.env_id} (native) has no Python env to render with")
            return None
        return creator(render_mode=render_mode, **env_kwargs)

    def resolve_params(self, env: gym.Env | None, env_kwargs: dict[str, Any]) -> dict[str, Any]:
        """Every parameter's value for one vector env (see ``params``)."""
        if callable(self.params):
            return dict(self.params(env, env_kwargs))
        values = {**self.params, **{k: v for k, v in env_kwargs.items() if k in self.param_names}}
        for name in self.param_names:
            if name not in values and env is not None and hasattr(env, name):
                values[name] = getattr(env, name)
        return values

    def spaces(self, env: gym.Env | None, params: dict[str, Any]) -> tuple[Space, Space]:
        """The single-env observation and action spaces."""
        found = []
        for given, attr in ((self.observation_space, "observation_space"), (self.action_space, "action_space")):
            space = given(params) if callable(given) else given
            if space is None and env is not None:
                space = getattr(env, attr)
            if space is None:
                raise ValueError(f"{self.env_id} (native) needs an {attr}: give one, or a reference env")
            found.append(space)
        return found[0], found[1]

    def time_limit(self) -> int | None:
        """The TimeLimit (``max_episode_steps``, else Gymnasium's registered one), or None."""
        if self.max_episode_steps is not None:
            return self.max_episode_steps
        try:
            return gym.spec(self.env_id).max_episode_steps
        except gym.error.Error:
            return None

    def reset_params(self, options: dict[str, Any] | None) -> dict[str, Any]:
        """Parameter values in force for one explicit reset with these options."""
        return dict(self.reset_options(options)) if self.reset_options is not None else {}

    def state_attributes(self, fields: dict[str, np.ndarray], i: int) -> dict[str, Any]:
        """Attributes of the reference env that hold env ``i``'s state."""
        if self.reference_state is not None:
            return self.reference_state(fields, i)
        return {name: fields[name][i].item() for name in fields}


NATIVE_SPECS: dict[str, NativeEnvSpec] = {}


def register(spec: NativeEnvSpec) -> None:
    """Make ``spec.env_id`` a native env (replacing an earlier registration of the id)."""
    if not isinstance(spec, NativeEnvSpec):
        raise TypeError(f"expected a NativeEnvSpec, got {spec!r}")
    NATIVE_SPECS[spec.env_id] = spec


def native_ids() -> list[str]:
    """The ids with a native implementation."""
    return list(NATIVE_SPECS)


def get_native_spec(env_id: str) -> NativeEnvSpec:
    """The NativeEnvSpec of ``env_id``; ValueError naming the native ids otherwise."""
    try:
        return NATIVE_SPECS[env_id]
    except (KeyError, TypeError):
        raise ValueError(f"no native implementation of {env_id!r}; native ids: {native_ids()}") from None


def can_run_natively(env_id: str, env_kwargs: dict[str, Any] | None, render_mode: str | None) -> bool:
    """True when ``NativeVectorEnv`` reproduces ``gymnasium.make(env_id, render_mode=..., **env_kwargs)``.

    False for other ids, for kwargs the compiled env does not honour (unknown names, or values
    whose type would change the reference's arithmetic, such as NumPy scalars) and for render
    modes other than None and "rgb_array" (which needs a reference env to draw).
    """
    spec = NATIVE_SPECS.get(env_id) if isinstance(env_id, str) else None
    if spec is None or render_mode not in RENDER_MODES:
        return False
    if render_mode is not None and not spec.has_reference:
        return False
    try:
        spec.check_kwargs(dict(env_kwargs or {}))
    except (TypeError, ValueError):
        return False
    return True
