"""fastvec's vector envs inside TorchRL: ``GymWrapper(FastVectorEnv(...))`` and
``GymWrapper(RayVectorEnv(...))`` roll out what ``GymWrapper(SyncVectorEnv(...))`` does.

TorchRL's GymWrapper takes any Gymnasium VectorEnv (its batch size is the env count).
Skipped where TorchRL is not installed (``pip install torchrl``); the RayVectorEnv case
also where Ray is not.
"""
from __future__ import annotations

import importlib.util
import multiprocessing

import gymnasium as gym
import numpy as np
import pytest

if importlib.util.find_spec("torchrl") is None:
    pytest.skip("TorchRL is not installed: pip install torchrl", allow_module_level=True)

import torch  # noqa: E402
from gymnasium.vector import AutoresetMode, SyncVectorEnv  # noqa: E402

from fastvec import FastVectorEnv  # noqa: E402

FNS = [lambda: gym.make("CartPole-v1") for _ in range(4)]
# TorchRL resets finished envs itself (reset_mask): it asks for autoreset DISABLED.
DISABLED = AutoresetMode.DISABLED


@pytest.fixture(scope="module", autouse=True)
def _keep_start_method():
    """``import torchrl`` sets multiprocessing's global start method to "spawn"; it is
    imported here, not at collection, and the method put back after this module, so the
    other tests' FastVectorEnvs keep Python's default."""
    before = multiprocessing.get_start_method(allow_none=True)
    import torchrl  # noqa: F401

    yield
    multiprocessing.set_start_method(before, force=True)


def _rollout(vector_env, steps: int = 40):
    """Seeded rollout with a fixed, alternating policy; the TensorDict of it."""
    from torchrl.envs.libs.gym import GymWrapper

    env = GymWrapper(vector_env)
    env.set_seed(7)

    def policy(td):
        td["action"] = torch.nn.functional.one_hot(
            (td["observation"][..., 2] > 0).long(), 2).to(env.action_spec.dtype)
        return td

    try:
        out = env.rollout(steps, policy=policy, break_when_any_done=False)
        assert out["next", "done"].any(), "no episode ended: the resets were not exercised"
        return out
    finally:
        env.close()


def _same(ref, out) -> None:
    assert ref.batch_size == out.batch_size
    for key in (("next", "observation"), ("next", "reward"), ("next", "terminated"), ("next", "truncated")):
        torch.testing.assert_close(ref[key], out[key], rtol=0, atol=0)


def test_gym_wrapper_over_fastvec_env_equals_sync():
    ref = _rollout(SyncVectorEnv(FNS, autoreset_mode=DISABLED))
    assert ref.batch_size == torch.Size([4, 40])
    _same(ref, _rollout(FastVectorEnv(FNS, num_workers=2, autoreset_mode=DISABLED)))


def test_gym_wrapper_over_ray_vector_env_equals_sync():
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'fastvec[ray]'")
    from fastvec.ray import RayVectorEnv

    started = not ray.is_initialized()
    if started:
        # "local": a new Ray of its own, even where another Ray (or a stale
        # /tmp/ray/ray_current_cluster left by a killed one) would otherwise be joined.
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        ref = _rollout(SyncVectorEnv(FNS, autoreset_mode=DISABLED))
        out = _rollout(RayVectorEnv(FNS, num_shards=2, shard_options={"num_cpus": 0}, autoreset_mode=DISABLED))
        _same(ref, out)
        assert np.isfinite(out["next", "reward"].numpy()).all()
    finally:
        if started:
            ray.shutdown()
