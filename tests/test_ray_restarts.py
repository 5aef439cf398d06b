"""RayVectorEnv(env_failure="restart"): a shard whose actor dies is started again, and the
failures inside a shard are recovered by its FastVectorEnv, each reported as FastVectorEnv
reports a restart (docs/vector.md, "Failures and restarts").

One local Ray (3 CPUs, shards reserving none) serves the module. The reference for every env
that did not fail is SyncVectorEnv on the same seeds and actions; a restarted env's first
observation is that of a fresh env reset with the seed derived from its last seed and its
restart count. Skipped where Ray is not installed.
"""
from __future__ import annotations

import os
import signal
import time

import gymnasium as gym
import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the RayVectorEnv tests need Ray (pip install 'fastvec[ray]')")

from gymnasium.vector import AutoresetMode, SyncVectorEnv  # noqa: E402

from fastvec import WorkerDiedError  # noqa: E402
from fastvec.ray import RayVectorEnv  # noqa: E402
from fastvec.vector._block.restarts import derived_seed  # noqa: E402
from helpers import assert_processes_gone  # noqa: E402
from toy_envs import FlakyEnv  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))
FREE = {"num_cpus": 0}
BOUND_S = 10.0


@pytest.fixture(scope="module")
def local_ray():
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([TESTS] + ([old] if old else []))  # (workers import toy_envs)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        ray.shutdown()
    # "local": a new Ray of its own, even where another Ray (or a stale
    # /tmp/ray/ray_current_cluster left by a killed one) would otherwise be joined.
    ray.init(address="local", num_cpus=3, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def _pids(envs: RayVectorEnv) -> list[int]:
    return [pid for actor in envs.actors for pid in ray.get(actor.pids.remote(), timeout=30)]


def _assert_gone(pids: list[int]) -> None:
    assert_processes_gone(pids, BOUND_S)


def _fns(n: int, **kwargs):
    return [lambda: FlakyEnv(episode=7, **kwargs) for _ in range(n)]


def _fresh_first_obs(seed: int) -> np.ndarray:
    return FlakyEnv().reset(seed=seed)[0]


def _kill(envs: RayVectorEnv, k: int, how: str = "ray.kill") -> None:
    """Kill shard ``k``'s actor (``ray.kill``, or SIGKILL of its process from outside, as the
    OOM killer would), and wait until Ray says it is dead (``ray.kill`` returns at once)."""
    actor = envs.actors[k]
    if how == "ray.kill":
        ray.kill(actor)
    else:
        os.kill(envs.shard_nodes[k]["pid"], signal.SIGKILL)
    start = time.perf_counter()
    while True:
        try:
            ray.get(actor.hello.remote(), timeout=BOUND_S)
        except ray.exceptions.RayActorError:
            return
        assert time.perf_counter() - start < BOUND_S, "the actor still answers"
        time.sleep(0.05)


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("kill", ["ray.kill", "SIGKILL"])
def test_a_shard_whose_actor_dies_mid_run_is_started_again_and_reports_the_restart(local_ray, mode, kill):
    """8 envs in 2 shards; after 5 steps shard 1's actor is killed (by Ray, or SIGKILL of its
    process). The next step reports envs 4-7 truncated, reward 0, their last observations
    (SAME_STEP: the new envs' first ones, the last ones in final_obs), env_restarted and
    env_error; envs 0-3 equal SyncVectorEnv's throughout; the new envs start from the seeds
    derived from 10 + i and restart count 1; the old shard's processes are gone."""
    fns = _fns(8)
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    envs = RayVectorEnv(fns, num_shards=2, autoreset_mode=mode, shard_options=FREE, env_failure="restart")
    try:
        actions = np.zeros(8, np.int64)
        obs, _ = envs.reset(seed=10)
        ref_obs, _ = ref.reset(seed=10)
        np.testing.assert_array_equal(obs, ref_obs)
        for _ in range(5):
            obs, *_ = envs.step(actions)
            ref.step(actions)
        old = ray.get(envs.actors[1].pids.remote(), timeout=30)
        last = obs.copy()
        _kill(envs, 1, kill)
        start = time.perf_counter()
        obs, rewards, terminated, truncated, infos = envs.step(actions)
        reported_after = time.perf_counter() - start
        ref_obs, ref_rewards, ref_terminated, ref_truncated, _ = ref.step(actions)
        np.testing.assert_array_equal(obs[:4], ref_obs[:4])
        np.testing.assert_array_equal(rewards[:4], ref_rewards[:4])
        np.testing.assert_array_equal(terminated[:4], ref_terminated[:4])
        np.testing.assert_array_equal(truncated[:4], ref_truncated[:4])
        assert rewards[4:].tolist() == [0.0] * 4
        assert not terminated[4:].any() and truncated[4:].all()
        assert infos["env_restarted"].tolist() == [False] * 4 + [True] * 4
        assert infos["_env_restarted"].tolist() == [False] * 4 + [True] * 4
        assert all("died" in str(e) for e in infos["env_error"][4:])
        firsts = np.stack([_fresh_first_obs(derived_seed(10 + i, 1)) for i in range(4, 8)])
        if mode is AutoresetMode.SAME_STEP:
            np.testing.assert_array_equal(obs[4:], firsts)
            np.testing.assert_array_equal(np.stack(infos["final_obs"][4:]), last[4:])
            assert infos["final_info"]["env_restarted"].tolist() == [False] * 4 + [True] * 4
        else:
            np.testing.assert_array_equal(obs[4:], last[4:])
            obs, rewards, terminated, truncated, _ = envs.step(actions)
            ref_obs, *_ = ref.step(actions)
            np.testing.assert_array_equal(obs[:4], ref_obs[:4])
            np.testing.assert_array_equal(obs[4:], firsts)
            assert rewards[4:].tolist() == [0.0] * 4 and not (terminated[4:] | truncated[4:]).any()
        assert envs.restarts.tolist() == [0] * 4 + [1] * 4
        for _ in range(10):  # (envs 0-3 go on as before, autoresets included)
            obs, rewards, *_ = envs.step(actions)
            ref_obs, ref_rewards, *_ = ref.step(actions)
            np.testing.assert_array_equal(obs[:4], ref_obs[:4])
        _assert_gone(old)
        assert reported_after < 1.0 + BOUND_S
        pids = _pids(envs)
    finally:
        envs.close()
        ref.close()
    _assert_gone(pids)


def test_an_env_failure_inside_a_shard_is_restarted_by_its_fastvector_env_and_counted(local_ray, tmp_path):
    """An env that raises in a step, and one whose worker process exits: each shard's
    FastVectorEnv rebuilds it; RayVectorEnv passes the report through and counts it."""
    fns = [lambda: FlakyEnv(fail_at=3, how="raise", marker=str(tmp_path / "a"))] * 4 + \
          [lambda: FlakyEnv(fail_at=4, how="exit", marker=str(tmp_path / "b"))] * 4
    with RayVectorEnv(fns, num_shards=2, shard_options=FREE, env_failure="restart") as envs:
        envs.reset(seed=0)
        flagged = np.zeros(8, bool)
        for _ in range(6):
            _, _, _, truncated, infos = envs.step(np.zeros(8, np.int64))
            if "env_restarted" in infos:
                flagged |= infos["env_restarted"]
                assert truncated[infos["env_restarted"]].all()
        assert flagged[0] and flagged[4:].all() and not flagged[1:4].any()
        assert envs.restarts.tolist() == [1, 0, 0, 0, 1, 1, 1, 1]


def test_a_shard_that_dies_during_a_reset_is_started_again_and_its_envs_reset(local_ray):
    fns = _fns(6)
    ref = SyncVectorEnv(fns)
    with RayVectorEnv(fns, num_shards=2, shard_options=FREE, env_failure="restart") as envs:
        envs.reset(seed=3)
        _kill(envs, 0)
        obs, infos = envs.reset(seed=20)
        ref_obs, _ = ref.reset(seed=20)
        np.testing.assert_array_equal(obs[3:], ref_obs[3:])
        np.testing.assert_array_equal(obs[:3], np.stack([_fresh_first_obs(derived_seed(20 + i, 1)) for i in range(3)]))
        assert infos["env_restarted"].tolist() == [True] * 3 + [False] * 3
        assert envs.restarts.tolist() == [1] * 3 + [0] * 3
    ref.close()


def test_send_recv_reports_a_restarted_shard_in_its_rows(local_ray):
    fns = _fns(4)
    with RayVectorEnv(fns, num_shards=2, batch_size=2, shard_options=FREE, env_failure="restart") as envs:
        envs.async_reset(seed=0)
        for _ in range(4):
            envs.recv()
            envs.send(np.zeros(2, np.int64))
        _kill(envs, 0)
        # Shard 0's step in flight may have answered before the kill: recv then returns it as
        # it was, and the restart comes with the shard's next rows (its next step finds the
        # actor dead). Either way each of its envs is reported restarted (and truncated) once,
        # and shard 1's never.
        reported = {}
        for _ in range(10):  # (recv takes the first ready shard)
            obs, rewards, terminated, truncated, infos = envs.recv()
            restarted = infos.get("env_restarted", np.zeros(2, bool))
            for row, env in enumerate(infos["env_id"].tolist()):
                if restarted[row]:
                    assert env not in reported, f"env {env} reported restarted twice"
                    reported[env] = bool(truncated[row])
            envs.send(np.zeros(2, np.int64))
            if len(reported) == 2:
                break
        assert reported == {0: True, 1: True}
        assert envs.restarts.tolist() == [1, 1, 0, 0]


def test_the_budget_is_shared_by_all_shards_and_the_next_death_raises(local_ray):
    with RayVectorEnv(_fns(4), num_shards=2, shard_options=FREE, env_failure="restart", max_restarts=1) as envs:
        envs.reset(seed=0)
        _kill(envs, 0)
        envs.step(np.zeros(4, np.int64))
        pids = _pids(envs)
        _kill(envs, 1)
        with pytest.raises(WorkerDiedError, match=r"shard 1"):
            envs.step(np.zeros(4, np.int64))
        assert envs.closed
    _assert_gone(pids)


def test_raise_mode_is_unchanged_and_a_dead_shard_closes_the_env(local_ray):
    with RayVectorEnv(_fns(4), num_shards=2, shard_options=FREE) as envs:
        envs.reset(seed=0)
        _kill(envs, 1)
        with pytest.raises(WorkerDiedError):
            envs.step(np.zeros(4, np.int64))
        assert envs.closed
        assert envs.restarts.tolist() == [0] * 4


def test_failure_keywords_are_checked_and_belong_to_ray_vector_env_itself(local_ray):
    fns = _fns(2)
    with pytest.raises(ValueError, match="env_failure must be 'raise' or 'restart'"):
        RayVectorEnv(fns, shard_options=FREE, env_failure="retry")
    with pytest.raises(ValueError, match="max_restarts"):
        RayVectorEnv(fns, shard_options=FREE, env_failure="restart", max_restarts=-1)
    with pytest.raises(TypeError, match="pass env_failure to RayVectorEnv itself"):
        RayVectorEnv(fns, shard_options=FREE, vector_kwargs={"env_failure": "restart"})
    with pytest.raises(ValueError, match="step_timeout"):
        RayVectorEnv(fns, shard_options=FREE, step_timeout=0)


def test_make_vec_passes_the_failure_keywords_to_ray_vector_env(local_ray):
    envs = gym.make_vec("CartPole-v1", 2, vectorization_mode="fastvec",
                        vector_kwargs={"backend": "ray", "num_shards": 2, "shard_options": FREE, "native": False,
                                       "env_failure": "restart", "max_restarts": 3})
    try:
        assert envs.max_restarts == 3 and envs.restarts.tolist() == [0, 0]
        envs.reset(seed=0)
        _kill(envs, 0)
        _, _, _, truncated, infos = envs.step(np.zeros(2, np.int64))
        assert truncated[0] and infos["env_restarted"][0]
    finally:
        envs.close()
