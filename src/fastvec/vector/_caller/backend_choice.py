"""Which local vector env a ``make_vec``-style request gets, and how it is built.

A request is an env id (or ``EnvSpec``), ``num_envs``, ``vector_kwargs``, ``wrappers`` and the
env kwargs, as ``gymnasium.make_vec`` takes them. It gets:

- :class:`fastvec.NativeVectorEnv` (compiled, in-process) when the id has a native
  implementation, no ``wrappers`` are given, the env kwargs and ``render_mode`` are ones the
  native env honours, every ``vector_kwargs`` key is one it takes, and
  ``vector_kwargs["native"]`` is not ``False`` (:func:`native_refusal` says why not);
- otherwise :class:`fastvec.FastVectorEnv` (worker processes) over ``gymnasium.make(id,
  **kwargs)`` with the ``wrappers`` applied (:func:`single_env_maker`), built with the remaining
  ``vector_kwargs``. ``native=True`` makes a request that cannot run natively an error instead.

Two callers build through here: :mod:`fastvec.registration` (``gymnasium.make_vec(...,
vectorization_mode="fastvec")``, which also routes ``backend="ray"`` to RayVectorEnv with the
keywords :func:`split_ray_kwargs` leaves it) and each RayVectorEnv shard, for its local vector
env. This module imports neither of them.

Example:
    >>> import gymnasium as gym
    >>> from fastvec.vector._caller import backend_choice
    >>> backend_choice.runs_natively("CartPole-v1"), backend_choice.runs_natively("CartPole-v1", wrappers=[gym.Wrapper])
    (True, False)
    >>> backend_choice.native_refusal(gym.spec("CartPole-v1"), {}, [], {"num_workers": 2})
    "vector_kwargs ['num_workers'] are for the multiprocess backend"
    >>> envs = backend_choice.make_local(*backend_choice.resolve("CartPole-v1", 2, {"num_workers": 1}, None, {}))
    >>> type(envs).__name__, envs.num_envs
    ('FastVectorEnv', 2)
    >>> envs.backend_reason
    "FastVectorEnv: vector_kwargs ['num_workers'] are for the multiprocess backend"
    >>> envs.close()
"""
from __future__ import annotations

import copy
import inspect
from typing import Any, Callable, Sequence

import gymnasium
import gymnasium.envs.registration as _gym_registration
from gymnasium import Env, Wrapper
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import VectorEnv

from fastvec.native import can_run_natively, native_ids
from fastvec.vector.fast_vector_env import FastVectorEnv
from fastvec.vector.native_vector_env import NativeVectorEnv

__all__ = [
    "NATIVE_VECTOR_KWARGS", "find_spec", "keywords", "make_local", "native_refusal", "resolve",
    "runs_natively", "single_env_maker", "split_ray_kwargs",
]

#: The ``vector_kwargs`` NativeVectorEnv takes (its other keywords are env kwargs).
NATIVE_VECTOR_KWARGS = ("num_threads", "autoreset_mode", "exact", "copy")


def find_spec(env_id: str | EnvSpec) -> EnvSpec:
    """The registered spec of ``env_id`` (``"module:Env-v0"`` imports ``module`` first).

    Raises:
        gymnasium.error.Error: ``env_id`` is neither a str nor an EnvSpec, or is not registered.
    """
    if isinstance(env_id, EnvSpec):
        return env_id
    if isinstance(env_id, str):
        return _gym_registration._find_spec(env_id)  # noqa: SLF001 - handles "module:Env-v0"
    raise gymnasium.error.Error(f"Invalid id type: {type(env_id)}. Expected `str` or `EnvSpec`")


def keywords(cls: type, exclude: Sequence[str] = ()) -> set[str]:
    """The names of ``cls``'s constructor arguments, but for ``exclude`` (and ``self``,
    ``*args``, ``**kwargs``): what a ``vector_kwargs`` may hold for it."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    return {p.name for p in parameters if p.name != "self" and p.name not in exclude
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _fast_vector_kwargs() -> set[str]:
    return keywords(FastVectorEnv, exclude=("env_fns",))


def local_keywords() -> set[str]:
    """The ``vector_kwargs`` keys a local request may hold: FastVectorEnv's, NativeVectorEnv's
    and ``native``."""
    return _fast_vector_kwargs() | set(NATIVE_VECTOR_KWARGS) | {"native"}


def resolve(env_id: str | EnvSpec, num_envs: int, vector_kwargs: dict[str, Any] | None,
            wrappers: Sequence[Callable[[Env], Wrapper]] | None,
            env_kwargs: dict[str, Any]) -> tuple[EnvSpec, int, dict[str, Any], list, dict[str, Any]]:
    """Read a request as ``gymnasium.make_vec`` does: what the env spec stores wins.

    Args:
        env_id: an env id or EnvSpec (a vector env's ``spec`` rebuilds it).
        num_envs, vector_kwargs, wrappers: as given to ``make_vec``.
        env_kwargs: the env kwargs given to ``make_vec``; they override the spec's.

    Returns:
        A copy of the spec with its kwargs emptied, then ``num_envs``, ``vector_kwargs`` (a new
        dict), ``wrappers`` (a new list) and the env kwargs (the spec's, updated with ``env_kwargs``).

    Raises:
        gymnasium.error.Error: an id that is not registered, or a spec without an entry point.
    """
    env_spec = copy.deepcopy(find_spec(env_id))
    spec_kwargs = env_spec.kwargs
    env_spec.kwargs = {}
    num_envs = spec_kwargs.pop("num_envs", num_envs)
    spec_kwargs.pop("vectorization_mode", None)
    vector_kwargs = dict(spec_kwargs.pop("vector_kwargs", vector_kwargs) or {})
    wrappers = list(spec_kwargs.pop("wrappers", wrappers) or [])
    spec_kwargs.update(env_kwargs)
    if env_spec.entry_point is None:
        raise gymnasium.error.Error(
            f"Cannot create vectorized environment for {env_spec.id} because it doesn't have an entry point defined."
        )
    return env_spec, num_envs, vector_kwargs, wrappers, spec_kwargs


def make_local(env_spec: EnvSpec, num_envs: int, vector_kwargs: dict[str, Any], wrappers: list,
               env_kwargs: dict[str, Any]) -> VectorEnv:
    """NativeVectorEnv or FastVectorEnv, by the rules in the module docstring.

    Args:
        env_spec, num_envs, vector_kwargs, wrappers, env_kwargs: as :func:`resolve` returns
            them; ``vector_kwargs`` holds the backends' keywords and ``native`` (no ``backend``).

    Returns:
        The vector env, its ``backend_reason`` set: which backend and why (``"NativeVectorEnv:
        ..."``, or ``"FastVectorEnv: "`` and what :func:`native_refusal` says).

    Raises:
        TypeError: a ``vector_kwargs`` key that neither backend takes, or one that only
            NativeVectorEnv takes when it cannot run the request.
        ValueError: ``native=True`` for a request NativeVectorEnv cannot honour.
    """
    vector_kwargs = dict(vector_kwargs)
    native = vector_kwargs.pop("native", None)
    fast_kwargs = _fast_vector_kwargs()
    accepted = fast_kwargs | set(NATIVE_VECTOR_KWARGS)
    unknown = sorted(set(vector_kwargs) - accepted)
    if unknown:
        raise TypeError(
            f"unknown vector_kwargs {unknown} for vectorization_mode='fastvec'; expected some of "
            f"{sorted(accepted | {'native'})}, or backend='ray' with RayVectorEnv's keywords"
        )
    if native is False:
        reason = "vector_kwargs native=False was given"
    else:
        reason = native_refusal(env_spec, env_kwargs, wrappers, vector_kwargs)
    if native is True and reason:
        raise ValueError(f"native=True, but {env_spec.id} cannot run on NativeVectorEnv here: {reason}")
    if reason is None:
        if env_spec.max_episode_steps is not None:  # (the spec's, which Gymnasium's make applies)
            env_kwargs = {"max_episode_steps": env_spec.max_episode_steps, **env_kwargs}
        envs = NativeVectorEnv(env_spec.id, num_envs, **vector_kwargs, **env_kwargs)
        envs.backend_reason = (f"NativeVectorEnv: {env_spec.id} has a compiled native env and no keyword "
                               "asked for something it cannot honour")
        return envs
    multiprocess_only = set(vector_kwargs) - fast_kwargs
    if multiprocess_only:
        raise TypeError(
            f"vector_kwargs {sorted(multiprocess_only)} are only for NativeVectorEnv, which cannot run "
            f"this call ({reason})"
        )
    envs = FastVectorEnv([single_env_maker(env_spec, env_kwargs, wrappers)] * num_envs, **vector_kwargs)
    envs.backend_reason = f"FastVectorEnv: {reason}"
    return envs


def single_env_maker(env_id: str | EnvSpec, env_kwargs: dict[str, Any],
                     wrappers: Sequence[Callable[[Env], Wrapper]]) -> Callable[[], Env]:
    """A constructor of one env as ``make_vec`` builds it: ``gymnasium.make(env_id, **env_kwargs)``,
    then each of ``wrappers``, in order. (Cloudpickled to the worker processes.)"""
    def make_env() -> Env:
        env = gymnasium.make(env_id, **dict(env_kwargs))
        for wrapper in wrappers:
            env = wrapper(env)
        return env

    return make_env


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
    spec = find_spec(env_id)
    return native is True or native_refusal(spec, {**spec.kwargs, **(env_kwargs or {})}, list(wrappers or []),
                                            vector_kwargs) is None


def native_refusal(env_spec: EnvSpec, env_kwargs: dict, wrappers: list, vector_kwargs: dict) -> str | None:
    """Why this request cannot use NativeVectorEnv, or None if it can."""
    if env_spec.id not in native_ids():
        return f"no native implementation of {env_spec.id} (it has no compiled native env)"
    if wrappers:
        return "custom wrappers were given"
    if env_spec.additional_wrappers:
        return "the env spec has additional wrappers"
    registered = _gym_registration.registry.get(env_spec.id)
    if registered is None or env_spec.entry_point != registered.entry_point:
        return "the env spec's entry_point is not the registered one"
    if env_spec.max_episode_steps is None and registered.max_episode_steps is not None:
        return "the env spec has no time limit"
    other = sorted(set(vector_kwargs) - set(NATIVE_VECTOR_KWARGS))
    if other:
        return f"vector_kwargs {other} are for the multiprocess backend"
    env_kwargs = dict(env_kwargs)
    render_mode = env_kwargs.pop("render_mode", None)
    env_kwargs.pop("max_episode_steps", None)  # NativeVectorEnv takes it as its own argument
    if not can_run_natively(env_spec.id, env_kwargs, render_mode):
        return (f"no native implementation of {env_spec.id} with kwargs {env_kwargs} and "
                f"render_mode={render_mode!r} (its compiled env does not honour them)")
    return None


def split_ray_kwargs(vector_kwargs: dict[str, Any], ray_keywords: set[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split the ``vector_kwargs`` of a ``backend="ray"`` request (without ``backend``).

    Args:
        vector_kwargs: the request's ``vector_kwargs``, ``backend`` taken out.
        ray_keywords: the keywords RayVectorEnv takes itself (``num_shards``, ``shard_options``, ...).

    Returns:
        The keywords for RayVectorEnv, and the rest: the ``vector_kwargs`` of each shard's
        local vector env (chosen there by the rules of the module docstring).

    Raises:
        TypeError: a key that neither RayVectorEnv nor a local backend takes.
    """
    shard_kwargs = dict(vector_kwargs)
    ray_kwargs = {key: shard_kwargs.pop(key) for key in sorted(ray_keywords) if key in shard_kwargs}
    accepted = _fast_vector_kwargs() | set(NATIVE_VECTOR_KWARGS) | {"native"}
    unknown = sorted(set(shard_kwargs) - accepted)
    if unknown:
        raise TypeError(
            f"unknown vector_kwargs {unknown} for vectorization_mode='fastvec' with backend='ray'; expected some "
            f"of {sorted(accepted | ray_keywords | {'backend'})}"
        )
    return ray_kwargs, shard_kwargs
