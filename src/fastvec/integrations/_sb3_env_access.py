"""The env side of :class:`fastvec.integrations.sb3.FastVecEnv`: SB3's per-env access.

SB3's ``SubprocVecEnv`` reads, sets and calls things in the envs it names by index
(``get_attr`` / ``set_attr`` / ``env_method`` / ``env_is_wrapped``, each with ``indices``).
A Gymnasium vector env's ``call`` reaches every env with the same arguments, so each env
``FastVecEnv`` builds carries an :class:`EnvAccess` (the attribute :data:`ATTRIBUTE` of
the env ``env_fns[i]()`` returned) that knows the env's index and acts only when named.
``FastVecEnv`` reaches it with ``vector_env.call(ATTRIBUTE, ...)``.

This module imports neither Stable-Baselines3 nor torch: it runs in the worker processes.
"""
from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym

__all__ = ["ATTRIBUTE", "EnvAccess", "build_env"]

ATTRIBUTE = "_fastvec_sb3_access"


class EnvAccess:
    """SB3's per-env operations on one env, done only if the env is among the ones named.

    ``access(op, counts, *args)`` runs operation ``op`` ``counts[index]`` times (SB3 lets an
    index appear more than once) and returns the results as a list, or ``None`` when the
    env is not named; ``counts=None`` names every env once. The operations do what
    ``SubprocVecEnv``'s workers do:

    * ``get_attr(name)``: ``env.get_wrapper_attr(name)`` (a method is returned, not called);
    * ``has_attr(name)``: whether that succeeds;
    * ``set_attr(name, value)``: ``setattr(env, name, value)`` on the outermost wrapper;
    * ``env_method(name, args, kwargs)``: ``env.get_wrapper_attr(name)(*args, **kwargs)``;
    * ``is_wrapped(wrapper_class)``: whether a wrapper in the chain is a ``wrapper_class``.
    """

    def __init__(self, env: gym.Env, index: int) -> None:
        self.env = env
        self.index = index

    def __call__(self, op: str, counts: dict[int, int] | None, *args: Any) -> list[Any] | None:
        times = 1 if counts is None else counts.get(self.index, 0)
        if not times:
            return None
        run = getattr(self, f"_{op}")
        return [run(*args) for _ in range(times)]

    def _get_attr(self, name: str) -> Any:
        return self.env.get_wrapper_attr(name)

    def _has_attr(self, name: str) -> bool:
        try:
            self.env.get_wrapper_attr(name)
        except AttributeError:
            return False
        return True

    def _set_attr(self, name: str, value: Any) -> None:
        setattr(self.env, name, value)

    def _env_method(self, name: str, args: tuple, kwargs: dict) -> Any:
        return self.env.get_wrapper_attr(name)(*args, **kwargs)

    def _is_wrapped(self, wrapper_class: type) -> bool:
        env = self.env
        while isinstance(env, gym.Wrapper):
            if isinstance(env, wrapper_class):
                return True
            env = env.env
        return False


def build_env(env_fn: Callable[[], gym.Env], index: int) -> gym.Env:
    """``env_fn()`` with an :class:`EnvAccess` for env ``index`` attached (what a worker builds)."""
    env = env_fn()
    if ATTRIBUTE in getattr(env, "__dict__", {}):
        raise ValueError(
            f"env_fns[{index}] returned an env object that another env of the same process already "
            "uses; each function in env_fns must build a new env (e.g. `lambda: gym.make(...)`, "
            "not `lambda: env`)"
        )
    try:
        setattr(env, ATTRIBUTE, EnvAccess(env, index))
    except (AttributeError, TypeError) as e:
        raise TypeError(
            f"env_fns[{index}] returned a {type(env).__name__}, which does not accept attributes; "
            "FastVecEnv needs to attach one (wrap it in a gymnasium.Wrapper)"
        ) from e
    return env
