"""How ``gymnasium.make_vec(..., vectorization_mode="fastvec")`` reaches fastvec.

Gymnasium 1.x has no plugin hook for new vectorization modes: ``VectorizeMode``
is a closed enum, ``make_vec`` dispatches with a fixed if/elif, and the
``gymnasium.envs`` entry-point group is no longer loaded. So ``import fastvec``
wraps ``make_vec`` (as ``gymnasium.make_vec``, ``gymnasium.envs.make_vec`` and
``gymnasium.envs.registration.make_vec``): a call whose mode is ``"fastvec"``
(given by the caller or stored in the env spec's kwargs, which win, as in
Gymnasium) is built here; every other mode, and ``None``, goes to Gymnasium's
own function untouched. Installing the wrap is idempotent; :func:`uninstall`
restores Gymnasium's function.

Which backend a ``"fastvec"`` call gets:

- :class:`fastvec.NativeVectorEnv` (compiled, in-process) when the id has a native
  implementation, no ``wrappers`` are given, the env kwargs and ``render_mode``
  are ones the native env honours, every ``vector_kwargs`` key is one it takes,
  and ``vector_kwargs["native"]`` is not ``False``;
- otherwise :class:`fastvec.FastVectorEnv` (worker processes) over
  ``gymnasium.make(id, **kwargs)`` with the ``wrappers`` applied, built with the
  remaining ``vector_kwargs``. ``native=True`` makes a call that cannot run
  natively an error instead;
- :class:`fastvec.ray.RayVectorEnv` with ``vector_kwargs["backend"] == "ray"`` (needs
  Ray): its own keywords (``num_shards``, ``shard_options``, ``autoreset_mode``,
  ``batch_size``, ``copy``, ``start_timeout``) go to it, the others to each shard, which
  picks its local backend by the two rules above. ``make_vec(envs.spec)`` rebuilds it.

Example:
    >>> import gymnasium as gym
    >>> import fastvec
    >>> envs = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="fastvec",
    ...                     vector_kwargs={"num_workers": 2, "native": False})
    >>> type(envs).__name__, envs.spec.kwargs["vectorization_mode"]
    ('FastVectorEnv', 'fastvec')
    >>> envs.close()
"""
from __future__ import annotations

import copy
import functools
import inspect
from typing import Any, Callable, Sequence

import gymnasium
import gymnasium.envs
import gymnasium.envs.registration as _gym_registration
from gymnasium import Env, Wrapper
from gymnasium.envs.registration import EnvSpec

from fastvec.native import can_run_natively

MODE = "fastvec"
_NATIVE_VECTOR_KWARGS = ("num_threads", "autoreset_mode", "exact", "copy")
# vector_kwargs that RayVectorEnv itself takes (backend="ray"); the others go to its shards.
_RAY_VECTOR_KWARGS = ("num_shards", "shard_options", "autoreset_mode", "batch_size", "copy", "start_timeout")

__all__ = ["MODE", "install", "uninstall", "make_vec", "runs_natively"]


def _find_spec(env_id: str | EnvSpec) -> EnvSpec:
    if isinstance(env_id, EnvSpec):
        return env_id
    if isinstance(env_id, str):
        return _gym_registration._find_spec(env_id)  # noqa: SLF001 - handles "module:Env-v0"
    raise gymnasium.error.Error(f"Invalid id type: {type(env_id)}. Expected `str` or `EnvSpec`")


def _requested_mode(env_id, vectorization_mode) -> Any:
    """The mode make_vec will use: the spec's stored mode wins over the argument, as in Gymnasium."""
    if isinstance(env_id, EnvSpec):
        return env_id.kwargs.get("vectorization_mode", vectorization_mode)
    if isinstance(env_id, str) and vectorization_mode != MODE:
        # Only an unusual spec stores a mode; look it up only when the argument is not ours.
        try:
            return _find_spec(env_id).kwargs.get("vectorization_mode", vectorization_mode)
        except Exception:
            return vectorization_mode  # let Gymnasium raise its own error for bad ids
    return vectorization_mode


def _fastvec_kwargs() -> set[str]:
    from fastvec.vector.shared import FastVectorEnv

    params = inspect.signature(FastVectorEnv.__init__).parameters
    return {name for name in params if name not in ("self", "env_fns")}


def make_vec(
    id: str | EnvSpec,
    num_envs: int = 1,
    vectorization_mode: str | None = None,
    vector_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Callable[[Env], Wrapper]] | None = None,
    **kwargs: Any,
):
    """Build a fastvec vector env the way ``gymnasium.make_vec`` builds its own.

    Same arguments as ``gymnasium.make_vec``; ``vector_kwargs`` go to the backend
    (plus ``native``: ``False`` to force the multiprocess backend, ``True`` to
    require the native one). See the module docstring for which backend is used.

    Raises:
        TypeError: a ``vector_kwargs`` key that neither backend takes.
        ValueError: ``native=True`` for a call the native backend cannot honour.
    """
    env_spec = copy.deepcopy(_find_spec(id))
    spec_kwargs = env_spec.kwargs
    env_spec.kwargs = {}
    num_envs = spec_kwargs.pop("num_envs", num_envs)
    spec_kwargs.pop("vectorization_mode", None)
    vector_kwargs = dict(spec_kwargs.pop("vector_kwargs", vector_kwargs) or {})
    wrappers = list(spec_kwargs.pop("wrappers", wrappers) or [])
    spec_kwargs.update(kwargs)
    if env_spec.entry_point is None:
        raise gymnasium.error.Error(
            f"Cannot create vectorized environment for {env_spec.id} because it doesn't have an entry point defined."
        )

    backend_kwargs = dict(vector_kwargs)
    backend = backend_kwargs.pop("backend", None)
    if backend == "ray":
        env = _make_ray(env_spec, num_envs, backend_kwargs, wrappers, spec_kwargs)
    elif backend is not None:
        raise ValueError(f"unknown vector_kwargs backend={backend!r} for vectorization_mode='fastvec'; "
                         "expected 'ray' or none (local: NativeVectorEnv or FastVectorEnv)")
    else:
        env = _make_local(env_spec, num_envs, backend_kwargs, wrappers, spec_kwargs)

    recorded = copy.deepcopy(env_spec)
    recorded.kwargs = spec_kwargs.copy()
    if num_envs != 1:
        recorded.kwargs["num_envs"] = num_envs
    recorded.kwargs["vectorization_mode"] = MODE
    if vector_kwargs:
        recorded.kwargs["vector_kwargs"] = vector_kwargs
    if wrappers:
        recorded.kwargs["wrappers"] = wrappers
    env.unwrapped.spec = recorded
    return env


def _make_ray(env_spec: EnvSpec, num_envs: int, backend_kwargs: dict, wrappers: list, spec_kwargs: dict):
    """``backend="ray"``: a RayVectorEnv whose shards build the envs from the spec (their own
    backend chosen in each shard by the rules below)."""
    from fastvec.ray import RayVectorEnv

    ray_kwargs = {key: backend_kwargs.pop(key) for key in _RAY_VECTOR_KWARGS if key in backend_kwargs}
    accepted = _fastvec_kwargs() | set(_NATIVE_VECTOR_KWARGS) | {"native"}
    unknown = sorted(set(backend_kwargs) - accepted)
    if unknown:
        raise TypeError(
            f"unknown vector_kwargs {unknown} for vectorization_mode='fastvec' with backend='ray'; expected some "
            f"of {sorted(accepted | set(_RAY_VECTOR_KWARGS) | {'backend'})}"
        )
    return RayVectorEnv(env_spec, num_envs, env_kwargs=spec_kwargs.copy(), wrappers=wrappers,
                        vector_kwargs=backend_kwargs, **ray_kwargs)


def _make_local(env_spec: EnvSpec, num_envs: int, backend_kwargs: dict, wrappers: list, spec_kwargs: dict):
    """NativeVectorEnv or FastVectorEnv, by the rules in the module docstring."""
    native = backend_kwargs.pop("native", None)
    accepted = _fastvec_kwargs() | set(_NATIVE_VECTOR_KWARGS)
    unknown = sorted(set(backend_kwargs) - accepted)
    if unknown:
        raise TypeError(
            f"unknown vector_kwargs {unknown} for vectorization_mode='fastvec'; expected some of "
            f"{sorted(accepted | {'native'})}"
        )
    reason = _native_refusal(env_spec, spec_kwargs, wrappers, backend_kwargs) if native is not False else "native=False"
    if native is True and reason:
        raise ValueError(f"native=True, but {env_spec.id} cannot run on NativeVectorEnv here: {reason}")

    if reason is None:
        from fastvec.vector.native import NativeVectorEnv

        env = NativeVectorEnv(env_spec.id, num_envs, **backend_kwargs, **spec_kwargs)
    else:
        multiprocess_only = set(backend_kwargs) - _fastvec_kwargs()
        if multiprocess_only:
            raise TypeError(
                f"vector_kwargs {sorted(multiprocess_only)} are only for NativeVectorEnv, which cannot run "
                f"this call ({reason})"
            )
        from fastvec.vector.shared import FastVectorEnv

        def create_single_env() -> Env:
            single_env = gymnasium.make(env_spec, **spec_kwargs.copy())
            for wrapper in wrappers:
                single_env = wrapper(single_env)
            return single_env

        env = FastVectorEnv([create_single_env for _ in range(num_envs)], **backend_kwargs)
    return env


def runs_natively(env_id: str | EnvSpec, env_kwargs: dict | None = None, wrappers: Sequence | None = None,
                  vector_kwargs: dict | None = None) -> bool:
    """Whether ``make_vec(env_id, vectorization_mode="fastvec", vector_kwargs=..., wrappers=...,
    **env_kwargs)`` would build a NativeVectorEnv (in-process, no worker processes).

    Code that builds fastvec envs inside a Ray worker asks this before it adds
    ``context="forkserver"`` (for the worker processes of a FastVectorEnv), which the
    native backend does not take.
    """
    vector_kwargs = dict(vector_kwargs or {})
    native = vector_kwargs.pop("native", None)
    if native is False or vector_kwargs.pop("backend", None) is not None:
        return False
    spec = _find_spec(env_id)
    return native is True or _native_refusal(spec, {**spec.kwargs, **(env_kwargs or {})}, list(wrappers or []),
                                             vector_kwargs) is None


def _native_refusal(env_spec: EnvSpec, env_kwargs: dict, wrappers: list, backend_kwargs: dict) -> str | None:
    """Why this call cannot use NativeVectorEnv, or None if it can."""
    if wrappers:
        return "custom wrappers were given"
    if env_spec.additional_wrappers:
        return "the env spec has additional wrappers"
    other = sorted(set(backend_kwargs) - set(_NATIVE_VECTOR_KWARGS))
    if other:
        return f"vector_kwargs {other} are for the multiprocess backend"
    env_kwargs = dict(env_kwargs)
    render_mode = env_kwargs.pop("render_mode", None)
    env_kwargs.pop("max_episode_steps", None)  # NativeVectorEnv takes it as its own argument
    if not can_run_natively(env_spec.id, env_kwargs, render_mode):
        return f"no native implementation of {env_spec.id} with kwargs {env_kwargs} and render_mode={render_mode!r}"
    return None


def _wrap(original: Callable) -> Callable:
    @functools.wraps(original)
    def wrapped(id, num_envs=1, vectorization_mode=None, vector_kwargs=None, wrappers=None, **kwargs):
        if _requested_mode(id, vectorization_mode) == MODE:
            return make_vec(id, num_envs, vectorization_mode, vector_kwargs, wrappers, **kwargs)
        return original(id, num_envs, vectorization_mode, vector_kwargs, wrappers, **kwargs)

    wrapped.__doc__ = (original.__doc__ or "") + (
        '\n    fastvec: ``vectorization_mode="fastvec"`` builds a fastvec vector env (see fastvec.registration).\n'
    )
    wrapped._fastvec_original = original
    return wrapped


_TARGETS = (gymnasium, gymnasium.envs, _gym_registration)


def install() -> None:
    """Route ``make_vec(..., vectorization_mode="fastvec")`` to fastvec. Idempotent."""
    current = _gym_registration.make_vec
    original = getattr(current, "_fastvec_original", current)
    wrapped = current if hasattr(current, "_fastvec_original") else _wrap(original)
    for module in _TARGETS:
        if getattr(module, "make_vec", None) is not wrapped:
            module.make_vec = wrapped


def uninstall() -> None:
    """Give Gymnasium its own ``make_vec`` back."""
    original = getattr(_gym_registration.make_vec, "_fastvec_original", None)
    if original is None:
        return
    for module in _TARGETS:
        if getattr(getattr(module, "make_vec", None), "_fastvec_original", None) is not None:
            module.make_vec = original
