"""RayVectorEnv refuses at once shards the cluster can never place, naming the shortage.

Before, 4 shards of 1 CPU on a 2-CPU ``ray.init()`` waited ``start_timeout`` (120 s), then
raised ``TimeoutError: shards [2, 3] were not placed``. ``resource_shortage`` is tested on
its own (no Ray cluster); one local Ray of 2 CPUs (a few seconds to start) checks the
constructor, ``make_vec`` and ``check_resources=False``. Skipped where Ray is not installed.
"""
from __future__ import annotations

import os
import time

import gymnasium as gym
import pytest

ray = pytest.importorskip("ray", reason="the RayVectorEnv tests need Ray (pip install 'fastvec[ray]')")

from fastvec.ray import DEFAULT_SHARD_OPTIONS, RayVectorEnv  # noqa: E402
from fastvec.ray.vector_env import resource_shortage, shard_demand  # noqa: E402

ONE_NODE = [{"CPU": 2.0, "memory": 4.0 * 2**30}]
TOTAL = {"CPU": 2.0, "memory": 4.0 * 2**30}


def shards(n: int, **options) -> list[dict]:
    return [{**DEFAULT_SHARD_OPTIONS, **options} for _ in range(n)]


# -- the check alone ---------------------------------------------------------------------
def test_demand_of_the_actor_options():
    assert shard_demand(DEFAULT_SHARD_OPTIONS) == {"CPU": 1.0}
    assert shard_demand({"num_cpus": 0}) == {}
    assert shard_demand({"num_cpus": 0.5, "num_gpus": 1, "memory": 2**30, "resources": {"sim": 2}}) == {
        "CPU": 0.5, "GPU": 1.0, "memory": 2.0**30, "sim": 2.0}


def test_more_cpus_than_the_cluster_has():
    message = resource_shortage(shards(4), TOTAL, {"CPU": 1.5}, ONE_NODE)
    assert message.startswith("4 shards ask for 4 CPUs in all (1 CPU each), and the Ray cluster has 2 CPUs "
                              "(1.5 available)"), message
    assert "num_shards" in message and "check_resources=False" in message


@pytest.mark.parametrize("options", [shards(2), shards(4, num_cpus=0.5), shards(8, num_cpus=0)])
def test_what_fits_passes(options):
    assert resource_shortage(options, TOTAL, {"CPU": 0.0}, ONE_NODE) is None  # busy now: not a shortage


def test_a_shard_bigger_than_any_node():
    nodes = [{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 1.0}]
    message = resource_shortage(shards(1, num_cpus=2), {"CPU": 3.0}, {"CPU": 3.0}, nodes)
    assert message.startswith("shard 0 asks for 2 CPUs on one node, and no node of the Ray cluster has that "
                              "(the most one node has: 1 CPU)"), message
    # a GPU and CPUs on one node, where one node has the GPU and another the CPUs
    nodes = [{"CPU": 1.0, "GPU": 1.0}, {"CPU": 4.0}]
    assert "shard 0 asks for 2 CPUs, 1 GPU on one node" in resource_shortage(
        shards(1, num_cpus=2, num_gpus=1), {"CPU": 5.0, "GPU": 1.0}, {}, nodes)


def test_missing_custom_resource_gpus_and_memory():
    message = resource_shortage(shards(2, num_cpus=0, resources={"simulator": 1}), TOTAL, TOTAL, ONE_NODE)
    assert "2 shards ask for 2 simulator in all (1 simulator each), and the Ray cluster has 0 simulator" in message
    message = resource_shortage([{"num_cpus": 1, "num_gpus": 1}, {"num_cpus": 1}], TOTAL, TOTAL, ONE_NODE)
    assert message.startswith("2 shards ask for 1 GPU in all (per shard: 1, 0), and the Ray cluster has 0 GPUs"), message
    message = resource_shortage(shards(2, memory=3 * 2**30), TOTAL, TOTAL, ONE_NODE)
    assert "ask for 6 GiB of memory in all (3 GiB of memory each), and the Ray cluster has 4 GiB of memory" in message


# -- on a local Ray of 2 CPUs ----------------------------------------------------------------
@pytest.fixture(scope="module")
def two_cpu_ray():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        ray.shutdown()
    # "local": a Ray of its own, not one another test or user left running.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def _cpus_free_soon() -> float:
    deadline = time.monotonic() + 10
    while ray.available_resources().get("CPU", 0.0) < 2.0 and time.monotonic() < deadline:
        time.sleep(0.1)
    return ray.available_resources().get("CPU", 0.0)


def test_four_one_cpu_shards_on_two_cpus_fail_at_once(two_cpu_ray):
    start = time.monotonic()
    with pytest.raises(ValueError, match=r"4 shards ask for 4 CPUs in all \(1 CPU each\), and the Ray cluster "
                                         r"has 2 CPUs \(2 available\)"):
        RayVectorEnv("CartPole-v1", num_envs=8, num_shards=4)
    with pytest.raises(ValueError, match="4 shards ask for 4 CPUs"):
        gym.make_vec("CartPole-v1", 8, vectorization_mode="fastvec", vector_kwargs={"backend": "ray", "num_shards": 4})
    assert time.monotonic() - start < 5.0
    assert ray.available_resources().get("CPU") == 2.0  # no actor was started


def test_check_resources_false_waits_as_before(two_cpu_ray):
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"shards \[\d\] were not placed"):
        RayVectorEnv("CartPole-v1", num_envs=3, num_shards=3, check_resources=False, start_timeout=1.0)
    assert time.monotonic() - start < 30.0
    assert _cpus_free_soon() == 2.0  # the shards that were placed are gone


def test_shards_that_fit_start(two_cpu_ray):
    with RayVectorEnv("CartPole-v1", num_envs=4, num_shards=2) as envs:
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (4, 4) and envs.backends == ("NativeVectorEnv",) * 2
