"""RLlib's PPO on fastvec's env creator (fastvec.integrations.rllib), a few iterations.

Runs where RLlib is installed (CI: ``.ci/rllib``, a venv with ``ray[rllib]`` and the
Gymnasium version it pins); skipped elsewhere. The EnvRunner is a Ray actor, so the
FastVectorEnv case also checks that its workers start (forkserver) and stop there.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

try:
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
except ImportError as exc:  # Ray without RLlib's dependencies, or no Ray
    pytest.skip(f"RLlib is not installed ({exc}): pip install 'ray[rllib]' torch", allow_module_level=True)

import fastvec.integrations.rllib as rllib  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # "local": a new Ray of its own, even where another Ray (or a stale
    # /tmp/ray/ray_current_cluster left by a killed one) would otherwise be joined.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def _ppo(vector_kwargs: dict, num_envs: int = 4):
    return (
        PPOConfig()
        .environment(rllib.register(), env_config={"id": "CartPole-v1", "vector_kwargs": vector_kwargs})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=num_envs, gym_env_vectorize_mode="vector_entry_point",
                     rollout_fragment_length=64)
        .training(train_batch_size_per_learner=256, minibatch_size=64, num_epochs=2, lr=3e-4)
        .debugging(seed=0)
        .build_algo()
    )


@pytest.mark.parametrize("vector_kwargs, backend", [({}, "NativeVectorEnv"), ({"native": False}, "FastVectorEnv")])
def test_ppo_trains_on_the_fastvec_creator(local_ray, vector_kwargs, backend):
    algo = _ppo(vector_kwargs)
    try:
        kinds = algo.env_runner_group.foreach_env_runner(lambda runner: type(runner.env.unwrapped).__name__,
                                                          local_env_runner=False)
        assert kinds == [backend]
        sampled = []
        for _ in range(3):
            result = algo.train()
            sampled.append(result["env_runners"]["num_env_steps_sampled_lifetime"])
        assert sampled[-1] >= 3 * 256 and sampled == sorted(sampled)
        assert np.isfinite(result["learners"]["default_policy"]["total_loss"])
    finally:
        algo.stop()


def test_creator_without_num_envs_gives_one_env_and_needs_an_id():
    env = rllib.make_env({"id": "CartPole-v1", "env_kwargs": {"max_episode_steps": 7}})
    assert env.spec.max_episode_steps == 7
    env.close()
    with pytest.raises(KeyError, match="needs an 'id'"):
        rllib.make_env({"num_envs": 2})

