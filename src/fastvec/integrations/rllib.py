"""fastvec inside RLlib: EnvRunners that step their envs with a fastvec vector env.

RLlib (new API stack) gives each EnvRunner actor one Gymnasium vector env. With
``config.env_runners(gym_env_vectorize_mode="vector_entry_point")`` that vector env is
whatever the registered env creator returns when RLlib passes it ``num_envs``: here,
``gymnasium.make_vec(id, num_envs, vectorization_mode="fastvec", ...)``, so each EnvRunner
steps its ``num_envs_per_env_runner`` envs with NativeVectorEnv (classic control, in the
EnvRunner's process) or FastVectorEnv (worker processes, started with ``forkserver``:
forking a Ray worker can hang), or with ``vector_kwargs={"backend": "ray"}`` a
RayVectorEnv of its own.

The env config (``config.environment("fastvec", env_config={...})``):

- ``"id"``: the Gymnasium env id (required);
- ``"env_kwargs"``: keyword arguments of ``gymnasium.make``;
- ``"vector_kwargs"``: as ``make_vec(..., vectorization_mode="fastvec", vector_kwargs=...)``
  takes them (``native``, ``num_workers``, ``backend``, ...).

Example (RLlib needs ``pip install "ray[rllib]" torch``; ``tests/test_ray_rllib.py`` trains
PPO on it):

.. code-block:: python

    from ray.rllib.algorithms.ppo import PPOConfig
    from fastvec.integrations.rllib import register

    register()  # the env name "fastvec"
    config = (
        PPOConfig()
        .environment("fastvec", env_config={"id": "CartPole-v1", "vector_kwargs": {"native": False}})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=8,
                     gym_env_vectorize_mode="vector_entry_point")
    )
    algo = config.build_algo()
    algo.train()

Needs Ray only in :func:`register`; :func:`make_env` is plain Gymnasium (tested without
RLlib too).
"""
from __future__ import annotations

from typing import Any, Mapping

import gymnasium as gym

from fastvec import registration

ENV_NAME = "fastvec"

__all__ = ["ENV_NAME", "make_env", "register"]


def make_env(env_config: Mapping[str, Any]):
    """The env creator: a fastvec vector env when ``env_config`` holds ``num_envs``, else one env.

    RLlib calls it with its ``EnvContext`` (the env config plus ``num_envs`` when it wants a
    vector env); a call without ``num_envs`` gets ``gymnasium.make(id, **env_kwargs)``, for
    code that asks a creator for a single env. Inside a Ray worker a FastVectorEnv's
    workers are started with ``forkserver`` unless ``vector_kwargs`` names a ``context``.

    Example:
        >>> from fastvec.integrations.rllib import make_env
        >>> envs = make_env({"id": "CartPole-v1", "num_envs": 4})
        >>> type(envs).__name__, envs.num_envs
        ('NativeVectorEnv', 4)
        >>> envs.close()
        >>> envs = make_env({"id": "Acrobot-v1", "num_envs": 2, "vector_kwargs": {"native": False}})
        >>> type(envs).__name__, envs.context
        ('FastVectorEnv', 'forkserver')
        >>> envs.close()
    """
    config = dict(env_config)
    if "id" not in config:
        raise KeyError("the fastvec env config needs an 'id' (a Gymnasium env id), e.g. "
                       "env_config={'id': 'CartPole-v1'}")
    env_id = config.pop("id")
    env_kwargs = dict(config.pop("env_kwargs", None) or {})
    vector_kwargs = dict(config.pop("vector_kwargs", None) or {})
    num_envs = config.pop("num_envs", None)
    if num_envs is None:
        return gym.make(env_id, **env_kwargs)
    if not registration.runs_natively(env_id, env_kwargs, None, vector_kwargs) and vector_kwargs.get("backend") is None:
        vector_kwargs.setdefault("context", "forkserver")
    return registration.make_vec(env_id, int(num_envs), registration.MODE, vector_kwargs, None, **env_kwargs)


def register(name: str = ENV_NAME) -> str:
    """Register :func:`make_env` with Ray Tune's registry under ``name``; returns ``name``."""
    from ray.tune.registry import register_env

    register_env(name, make_env)
    return name
