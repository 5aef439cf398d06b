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

Which backend a ``"fastvec"`` call gets (the local choice is :mod:`fastvec.vector._caller.backend_choice`'s):

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

Every returned vector env's ``spec`` records ``vectorization_mode="fastvec"`` (and the call's
``num_envs``, ``vector_kwargs`` and ``wrappers``), so that ``make_vec(envs.spec)`` comes back here;
its ``backend_reason`` says which backend was chosen and why, in one short sentence.

Example:
    >>> import gymnasium as gym
    >>> import fastvec
    >>> envs = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="fastvec",
    ...                     vector_kwargs={"num_workers": 2, "native": False})
    >>> type(envs).__name__, envs.spec.kwargs["vectorization_mode"]
    ('FastVectorEnv', 'fastvec')
    >>> envs.backend_reason
    'FastVectorEnv: vector_kwargs native=False was given'
    >>> envs.close()
"""
from __future__ import annotations

import copy
import functools
from typing import Any, Callable, Sequence

import gymnasium
import gymnasium.envs
import gymnasium.envs.registration as _gym_registration
from gymnasium import Env, Wrapper
from gymnasium.envs.registration import EnvSpec

from fastvec.vector._caller import backend_choice
from fastvec.vector._caller.backend_choice import runs_natively

MODE = "fastvec"
# RayVectorEnv's arguments that make_vec fills itself; its other keywords come from vector_kwargs.
_RAY_OWN_ARGUMENTS = ("env_fns", "num_envs", "env_kwargs", "wrappers", "vector_kwargs")

__all__ = ["MODE", "install", "uninstall", "make_vec", "runs_natively"]


def _requested_mode(env_id, vectorization_mode) -> Any:
    """The mode make_vec will use: the spec's stored mode wins over the argument, as in Gymnasium."""
    if isinstance(env_id, EnvSpec):
        return env_id.kwargs.get("vectorization_mode", vectorization_mode)
    if isinstance(env_id, str):
        try:
            return backend_choice.find_spec(env_id).kwargs.get("vectorization_mode", vectorization_mode)
        except Exception:
            return vectorization_mode  # let Gymnasium raise its own error for bad ids
    return vectorization_mode


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
    require the native one). See the module docstring for which backend is used;
    the returned env's ``backend_reason`` says which one it is and why.

    Raises:
        TypeError: a ``vector_kwargs`` key that neither backend takes.
        ValueError: ``native=True`` for a call the native backend cannot honour.
    """
    env_spec, num_envs, vector_kwargs, wrappers, spec_kwargs = backend_choice.resolve(
        id, num_envs, vector_kwargs, wrappers, kwargs)

    backend_kwargs = dict(vector_kwargs)
    backend = backend_kwargs.pop("backend", None)
    if backend == "ray":
        env = _make_ray(env_spec, num_envs, backend_kwargs, wrappers, spec_kwargs)
    elif backend is not None:
        raise ValueError(f"unknown vector_kwargs backend={backend!r} for vectorization_mode='fastvec'; "
                         "expected 'ray' or none (local: NativeVectorEnv or FastVectorEnv)")
    else:
        _refuse_ray_keywords(backend_kwargs)
        env = backend_choice.make_local(env_spec, num_envs, backend_kwargs, wrappers, spec_kwargs)

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


def _refuse_ray_keywords(backend_kwargs: dict) -> None:
    """A local request with keywords only RayVectorEnv takes (``num_shards``...): say that they
    need ``backend="ray"``, rather than that they are unknown."""
    unknown = set(backend_kwargs) - backend_choice.local_keywords()
    if not unknown:
        return
    try:
        from fastvec.ray import RayVectorEnv
    except ImportError:  # (no Ray: the local backend calls them unknown)
        return
    ray_only = sorted(unknown & backend_choice.keywords(RayVectorEnv, exclude=_RAY_OWN_ARGUMENTS))
    if ray_only:
        raise TypeError(f"vector_kwargs {ray_only} are RayVectorEnv's: add backend='ray' to vector_kwargs to "
                        "run the envs on Ray, or leave them out for a local backend")


def _make_ray(env_spec: EnvSpec, num_envs: int, backend_kwargs: dict, wrappers: list, spec_kwargs: dict):
    """``backend="ray"``: a RayVectorEnv whose shards build the envs from the spec (their own
    backend chosen in each shard as for a local call)."""
    from fastvec.ray import RayVectorEnv  # Ray is optional: imported when asked for

    ray_kwargs, shard_kwargs = backend_choice.split_ray_kwargs(
        backend_kwargs, backend_choice.keywords(RayVectorEnv, exclude=_RAY_OWN_ARGUMENTS))
    envs = RayVectorEnv(env_spec, num_envs, env_kwargs=spec_kwargs.copy(), wrappers=wrappers,
                        vector_kwargs=shard_kwargs, **ray_kwargs)
    envs.backend_reason = ("RayVectorEnv: vector_kwargs backend='ray' was given (each shard runs "
                           "NativeVectorEnv or FastVectorEnv by the local rules)")
    return envs


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
