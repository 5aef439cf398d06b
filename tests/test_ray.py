"""RayVectorEnv on a local multi-node Ray cluster (a head and 2 worker nodes, 1 CPU each).

One cluster serves the module (started once, ~5 s). It is started with
``fault_detection_config(2.0)``, so a lost node is declared dead within a few seconds.
Each test checks its shards' placement where it matters, and that nothing (actor, worker
process, forkserver) is left once the env is closed or a fault closed it. Skipped where
Ray is not installed.
"""
from __future__ import annotations

import doctest
import gc
import os
import subprocess
import sys
import textwrap
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the RayVectorEnv tests need Ray (pip install 'fastvec[ray]')")

from gymnasium import spaces  # noqa: E402
from gymnasium.error import ClosedEnvironmentError, NoAsyncCallError  # noqa: E402
from gymnasium.vector import AutoresetMode, SyncVectorEnv  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import fastvec.ray  # noqa: E402
import fastvec.ray.vector_env  # noqa: E402
from fastvec import RemoteTraceback, WorkerDiedError  # noqa: E402
from fastvec.ray import RayVectorEnv, fault_detection_config  # noqa: E402
from helpers import assert_processes_gone, assert_same, process_running, run_side_by_side  # noqa: E402
from toy_envs import CrashEnv, ToyEnv  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))
BOUND_S = 10.0  # a fault surfaces, and every process of a shard is gone, within this
FREE = {"num_cpus": 0}  # shards that reserve no CPU (more shards than the cluster's 3 CPUs)


@pytest.fixture(scope="module")
def cluster():
    # Workers import the envs of these tests (toy_envs, this module) by name.
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([TESTS] + ([old] if old else []))
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report from test clusters
    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "_system_config": fault_detection_config(2.0)})
    for _ in range(2):
        c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


# -- helpers -----------------------------------------------------------------------------
_running = process_running


def shard_pids(envs: RayVectorEnv) -> list[int]:
    """Every process of every shard: the actors and what they started."""
    return [pid for actor in envs.actors for pid in ray.get(actor.pids.remote(), timeout=30)]


def assert_gone(pids: list[int], bound: float = BOUND_S) -> float:
    """Wait until none of ``pids`` runs; the time that took (fails past ``bound``)."""
    return assert_processes_gone(pids, bound)


def fastvec_segments() -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n.startswith("fastvec")] if os.path.isdir("/dev/shm") else []


class TextObsEnv(gym.Env):
    """A Dict observation with a Text leaf (travels next to the packed record)."""

    observation_space = spaces.Dict({"x": spaces.Box(-1, 1, (2,), np.float32), "note": spaces.Text(6)})
    action_space = spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def _obs(self):
        return {"x": self.np_random.uniform(-1, 1, 2).astype(np.float32), "note": f"n{int(self.np_random.integers(99))}"}

    def step(self, action):
        return self._obs(), float(action), bool(self.np_random.random() < 0.1), False, {}


def _toy_fns(n, **kwargs):
    return [lambda k=k: ToyEnv(max_len=4 + k % 5, info_prob=0.6, **kwargs) for k in range(n)]


# -- parity --------------------------------------------------------------------------------
@pytest.mark.parametrize("mode, obs_space, act_space", [
    (AutoresetMode.NEXT_STEP, "box", "discrete"),
    (AutoresetMode.SAME_STEP, "dict", "multidiscrete"),
    (AutoresetMode.DISABLED, "tuple", "dict"),
])
def test_parity_with_sync_on_three_nodes(cluster, mode, obs_space, act_space):
    fns = _toy_fns(7, obs_space=obs_space, act_space=act_space)
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    with RayVectorEnv(fns, num_shards=3, autoreset_mode=mode) as envs:
        assert len({node["node_id"] for node in envs.shard_nodes}) == 3, envs.shard_nodes
        assert envs.shard_ranges == [(0, 3), (3, 5), (5, 7)]
        assert envs.backends == ("FastVectorEnv",) * 3
        assert envs.metadata["autoreset_mode"] == mode
        episodes = run_side_by_side(ref, envs, seed=11, steps=60, action_seed=3)
        assert episodes > 10
        pids = shard_pids(envs)
        assert len(pids) > 3  # actors, forkservers, workers
    assert_gone(pids)
    ref.close()


def test_native_shards_by_env_id_and_text_observations(cluster):
    ref = SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(6)], autoreset_mode=AutoresetMode.SAME_STEP)
    with RayVectorEnv("CartPole-v1", 6, num_shards=2, autoreset_mode=AutoresetMode.SAME_STEP) as envs:
        assert envs.backends == ("NativeVectorEnv", "NativeVectorEnv")
        assert run_side_by_side(ref, envs, seed=5, steps=80) > 0
    fns = [TextObsEnv for _ in range(5)]
    ref = SyncVectorEnv(fns)
    with RayVectorEnv(fns, num_shards=2, shard_options=FREE, vector_kwargs={"num_workers": 1}) as envs:
        run_side_by_side(ref, envs, seed=2, steps=30)


def test_actions_in_other_forms(cluster):
    fns = _toy_fns(4)
    ref = SyncVectorEnv(fns)
    with RayVectorEnv(fns, num_shards=2, shard_options=FREE) as envs:
        assert_same(ref.reset(seed=1), envs.reset(seed=1))
        for actions in ([1, 2, 3, 4], np.array([6, 5, 4, 3], np.uint8), (0, 0, 1, 1), np.arange(4, dtype=np.int32)):
            assert_same(ref.step(actions), envs.step(actions), repr(actions))
        with pytest.raises(ValueError, match="3 actions for 4 envs"):
            envs.step(np.zeros(3, np.int64))
        with pytest.raises(TypeError, match="scalar"):
            envs.step(np.int64(1))
        options = {"reset_mask": np.array([True, False, False, True]), "tag": 7}
        kept = dict(options)
        assert_same(ref.reset(options=dict(options)), envs.reset(options=options))
        assert options.keys() == kept.keys()


def test_call_get_attr_set_attr_render(cluster):
    fns = [lambda k=k: ToyEnv(max_len=3 + k, render_mode="rgb_array") for k in range(5)]
    ref = SyncVectorEnv(fns)
    with RayVectorEnv(fns, num_shards=2, shard_options=FREE) as envs:
        ref.reset(seed=3)
        envs.reset(seed=3)
        assert envs.get_attr("max_len") == ref.get_attr("max_len") == (3, 4, 5, 6, 7)
        envs.set_attr("max_len", [10, 11, 12, 13, 14])
        assert envs.get_attr("max_len") == (10, 11, 12, 13, 14)
        envs.set_attr("max_len", 9)
        assert envs.call("get_wrapper_attr", "max_len") == (9,) * 5
        assert envs.np_random_seed == ref.np_random_seed
        frames = envs.render()
        assert len(frames) == 5 and frames[0].shape == (4, 4, 3)
        envs.call_async("get_wrapper_attr", "max_len")
        assert envs.call_wait(timeout=30) == (9,) * 5
        with pytest.raises(ValueError, match="length equal to the number of environments"):
            envs.set_attr("max_len", [1, 2])
        with pytest.raises(NoAsyncCallError):
            envs.step_wait()


# -- send / recv ---------------------------------------------------------------------------
def _row(x, k):
    return {key: _row(v, k) for key, v in x.items()} if isinstance(x, dict) else x[k]


def _info_row(infos, k):
    out = {}
    for key, value in infos.items():
        mask = infos.get(f"_{key}")
        if key.startswith("_") or key == "env_id" or mask is None or not mask[k]:
            continue
        out[key] = _info_row(value, k) if isinstance(value, dict) else value[k]
    return dict(sorted(out.items()))


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_send_recv_per_env_equals_sync_and_none_starves(cluster, mode):
    n, shards, batch = 8, 4, 4
    fns = [lambda k=k: ToyEnv(max_len=4 + k % 5, info_prob=0.5, step_sleep=0.002 * (k % 3)) for k in range(n)]
    got = {i: [] for i in range(n)}
    sent = {i: [] for i in range(n)}
    rng = np.random.default_rng(0)
    with RayVectorEnv(fns, num_shards=shards, batch_size=batch, autoreset_mode=mode, shard_options=FREE,
                      vector_kwargs={"num_workers": 1, "step_in_caller": True}) as envs:
        with pytest.raises(RuntimeError, match="batch_size=4 < num_envs=8"):
            envs.step(np.zeros(n, np.int64))
        envs.async_reset(seed=100)
        for _ in range(60):
            obs, rewards, terminations, truncations, infos = envs.recv(timeout=30)
            ids = infos["env_id"]
            assert len(ids) == batch and list(ids) == sorted(ids)
            for k, i in enumerate(ids.tolist()):
                got[i].append((_row(obs, k), rewards[k], terminations[k], truncations[k], _info_row(infos, k)))
            actions = rng.integers(0, 7, size=len(ids))
            for k, i in enumerate(ids.tolist()):
                sent[i].append(actions[k])
            if len(got[0]) % 3 == 0:  # sometimes whole shards in another order
                order = np.argsort(-ids, kind="stable")
                envs.send(actions[order], ids[order])
            else:
                envs.send(actions)
        with pytest.raises(ValueError, match="split shards"):
            envs.send(np.zeros(1, np.int64), np.array([0]))
        envs.recv(timeout=30)
        obs, _ = envs.reset(seed=1)  # waits out what is in flight
        assert obs.shape == (n, 4)
    for i in range(n):
        assert len(got[i]) >= 10, f"env {i} starved: {len(got[i])} results"
        ref = SyncVectorEnv([fns[i]], autoreset_mode=mode)
        expected = [ref.reset(seed=100 + i)] + [ref.step(np.array([a])) for a in sent[i][:len(got[i]) - 1]]
        for t, (mine, theirs) in enumerate(zip(got[i], expected)):
            if t == 0:
                assert_same(_row(theirs[0], 0), mine[0], f"env {i} reset")
                assert mine[1:4] == (0.0, False, False)
                continue
            assert_same(_row(theirs[0], 0), mine[0], f"env {i} step {t} obs")
            assert (theirs[1][0], theirs[2][0], theirs[3][0]) == mine[1:4], f"env {i} step {t}"
            assert_same(_info_row(theirs[4], 0), mine[4], f"env {i} step {t} infos")


def test_recv_takes_shards_round_robin(cluster):
    # One shard per recv, and before each recv every shard in flight has finished: the scan
    # must start after the shard it returned last (a scan from shard 0 would return shard 0
    # every time, the others never).
    fns = [lambda: ToyEnv(max_len=50, info_prob=0.0) for _ in range(8)]
    order = []
    with RayVectorEnv(fns, num_shards=4, batch_size=2, shard_options=FREE,
                      vector_kwargs={"num_workers": 1, "step_in_caller": True}) as envs:
        envs.async_reset(seed=0)
        for _ in range(20):
            ray.wait(list(envs._inflight.values()), num_returns=len(envs._inflight), timeout=30)
            *_, infos = envs.recv(timeout=30)
            order.append(int(infos["env_id"][0]) // 2)
            envs.send(np.zeros(2, np.int64))
    assert order == [0, 1, 2, 3] * 5, order


# -- faults --------------------------------------------------------------------------------
def _crash_fns(n, crash_index, **kwargs):
    return [(lambda k=k: CrashEnv(**kwargs) if k == crash_index else CrashEnv(fail_at=10**9)) for k in range(n)]


def test_env_exception_comes_back_with_its_type_global_index_and_traceback(cluster):
    envs = RayVectorEnv(_crash_fns(6, 4, fail_at=2), num_shards=3)
    pids = shard_pids(envs)
    envs.reset(seed=0)
    envs.step(np.zeros(6, np.int64))
    start = time.perf_counter()
    with pytest.raises(ValueError, match="boom at step 2") as info:
        envs.step(np.zeros(6, np.int64))
    assert time.perf_counter() - start < BOUND_S
    assert info.value.env_index == 4
    assert isinstance(info.value.__cause__, RemoteTraceback) and "boom at step 2" in info.value.__cause__.text
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "env 4 in RayVectorEnv shard 2 on node" in notes and envs.shard_nodes[2]["node_id"] in notes
    assert envs.closed
    with pytest.raises(ClosedEnvironmentError):
        envs.step(np.zeros(6, np.int64))
    assert_gone(pids)


def test_constructor_and_call_errors(cluster):
    def broken():
        raise KeyError("no such env")

    with pytest.raises(KeyError, match="no such env") as info:
        RayVectorEnv([lambda: CrashEnv(), lambda: CrashEnv(), broken], num_shards=2, shard_options=FREE)
    assert info.value.env_index == 2
    with RayVectorEnv(_crash_fns(4, 9), num_shards=2, shard_options=FREE) as envs:
        envs.reset(seed=0)
        with pytest.raises(AttributeError) as info:
            envs.call("no_such_method")
        # Every shard failed: each is logged, the last one's raised (as AsyncVectorEnv does).
        assert info.value.env_index == 2
        assert not envs.closed  # an error in call leaves the env usable
        envs.step(np.zeros(4, np.int64))


def test_ray_kill_of_a_shard_mid_step(cluster):
    envs = RayVectorEnv(_crash_fns(6, 3, fail_at=2, how="hang"), num_shards=3)
    pids = shard_pids(envs)
    envs.reset(seed=0)
    envs.step(np.zeros(6, np.int64))
    envs.step_async(np.zeros(6, np.int64))  # env 3 (shard 1) hangs in its step
    time.sleep(0.2)
    ray.kill(envs.actors[1])
    start = time.perf_counter()
    with pytest.raises(WorkerDiedError, match=r"shard 1 \(envs 2\.\.3\) on node") as info:
        envs.step_wait(timeout=BOUND_S)
    assert time.perf_counter() - start < BOUND_S
    assert info.value.worker_index == 1 and info.value.node_id == envs.shard_nodes[1]["node_id"]
    assert envs.closed
    assert_gone(pids)


def test_node_removal_mid_step(cluster):
    envs = RayVectorEnv(_crash_fns(6, 3, fail_at=2, how="hang"), num_shards=3)
    pids = shard_pids(envs)
    victim = envs.shard_nodes[1]["node_id"]
    node = next((n for n in cluster.worker_nodes if n.node_id == victim), None)
    if node is None:  # shard 1 sits on the head: make it the shard on a worker node
        k = next(k for k, n in enumerate(envs.shard_nodes) if n["node_id"] != cluster.head_node.node_id)
        victim = envs.shard_nodes[k]["node_id"]
        node = next(n for n in cluster.worker_nodes if n.node_id == victim)
    else:
        k = 1
    envs.reset(seed=0)
    envs.step(np.zeros(6, np.int64))
    envs.step_async(np.zeros(6, np.int64))
    time.sleep(0.2)
    start = time.perf_counter()
    remover = threading.Thread(target=cluster.remove_node, args=(node,), kwargs={"allow_graceful": False}, daemon=True)
    remover.start()
    try:
        with pytest.raises(WorkerDiedError, match=rf"shard {k} \(envs {2 * k}\.\.{2 * k + 1}\) on node {victim}"):
            envs.step_wait(timeout=BOUND_S)
        remover.join(BOUND_S)
        assert not remover.is_alive(), "Cluster.remove_node hangs"
        elapsed = time.perf_counter() - start
        assert elapsed < BOUND_S, f"{elapsed:.1f} s"
        assert envs.closed
        assert_gone(pids)
    finally:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()


def test_close_gc_and_interpreter_exit_leave_nothing(cluster):
    before = fastvec_segments()
    envs = RayVectorEnv(_toy_fns(4), num_shards=2, vector_kwargs={"num_workers": 2})
    envs.reset(seed=0)
    pids = shard_pids(envs)
    assert len(pids) >= 2 + 2 * 2
    envs.close()
    assert_gone(pids)
    assert fastvec_segments() == before
    envs.close()  # twice is fine
    envs = RayVectorEnv(_toy_fns(4), num_shards=2, shard_options=FREE)
    pids = shard_pids(envs)
    envs.step_async(np.zeros(4, np.int64)) if False else envs.reset(seed=0)
    del envs
    gc.collect()
    assert_gone(pids)
    script = textwrap.dedent(f"""
        import sys, ray
        sys.path.insert(0, {TESTS!r})
        from toy_envs import ToyEnv
        from fastvec.ray import RayVectorEnv
        ray.init(address={cluster.address!r}, log_to_driver=False)
        envs = RayVectorEnv([ToyEnv] * 4, num_shards=2, shard_options={{"num_cpus": 0}})
        envs.reset(seed=0)
        print(*[p for a in envs.actors for p in ray.get(a.pids.remote())])
        """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) >= 4
    assert_gone(pids)
    assert fastvec_segments() == before


def test_fastvec_env_in_a_driver_that_called_ray_init(cluster):
    # A Ray driver (Ray's threads running) builds, steps and closes FastVectorEnvs with
    # forkserver and with the default start method. In a subprocess, so that a hang (the
    # known risk of forking a process with Ray's threads) fails the test instead of the run.
    script = textwrap.dedent(f"""
        import sys, ray, gymnasium as gym
        sys.path.insert(0, {TESTS!r})
        from gymnasium.vector import SyncVectorEnv
        from fastvec import FastVectorEnv
        from helpers import run_side_by_side
        ray.init(address={cluster.address!r}, log_to_driver=False)
        assert ray.is_initialized()
        for context in ("forkserver", None):
            fns = [lambda: gym.make("CartPole-v1") for _ in range(4)]
            with FastVectorEnv(fns, num_workers=2, context=context) as envs:
                run_side_by_side(SyncVectorEnv(fns), envs, seed=0, steps=50)
                processes = envs.processes
            for p in processes:
                p.join(5)
                assert not p.is_alive()
            print("ok", context)
        """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["ok", "forkserver", "ok", "None"]


def test_make_vec_routes_to_ray_and_its_spec_rebuilds_it(cluster):
    kwargs = {"backend": "ray", "num_shards": 2, "shard_options": FREE}
    envs = gym.make_vec("CartPole-v1", 4, vectorization_mode="fastvec", vector_kwargs=kwargs)
    try:
        assert isinstance(envs, RayVectorEnv) and envs.backends == ("NativeVectorEnv",) * 2
        assert envs.spec.kwargs["vector_kwargs"] == kwargs
        again = gym.make_vec(envs.spec)
        try:
            assert isinstance(again, RayVectorEnv) and again.num_envs == 4 and again.num_shards == 2
            assert_same(envs.reset(seed=4), again.reset(seed=4))
        finally:
            again.close()
    finally:
        envs.close()
    wrapped = gym.make_vec("CartPole-v1", 3, vectorization_mode="fastvec",
                           vector_kwargs={**kwargs, "native": False, "num_workers": 1},
                           wrappers=[gym.wrappers.RecordEpisodeStatistics], max_episode_steps=5)
    ref = SyncVectorEnv([lambda: gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1", max_episode_steps=5))
                         for _ in range(3)])
    with wrapped:
        assert wrapped.backends == ("FastVectorEnv",) * 2
        obs_ref, _ = ref.reset(seed=0)
        obs, _ = wrapped.reset(seed=0)
        assert_same(obs_ref, obs)
        for _ in range(6):
            out_ref, out = ref.step(np.ones(3, np.int64)), wrapped.step(np.ones(3, np.int64))
            assert_same(out_ref[:4], out[:4])
            assert list(out[4]) == list(out_ref[4])  # episode statistics ("t" is a time)
            if "episode" in out_ref[4]:
                assert_same(out_ref[4]["episode"]["l"], out[4]["episode"]["l"])
                assert_same(out_ref[4]["episode"]["r"], out[4]["episode"]["r"])
    with pytest.raises(ValueError, match="backend"):
        gym.make_vec("CartPole-v1", 2, vectorization_mode="fastvec", vector_kwargs={"backend": "dask"})


def test_docstring_examples(cluster):
    for module in (fastvec.ray, fastvec.ray.vector_env):
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_ray_shutdown_with_shards_alive(cluster):
    # Last: it disconnects this driver (the fixture's teardown copes).
    envs = RayVectorEnv(_toy_fns(4), num_shards=2)
    envs.reset(seed=0)
    pids = shard_pids(envs)
    ray.shutdown()
    with pytest.raises(WorkerDiedError, match="Ray was shut down"):
        envs.step(np.zeros(4, np.int64))
    assert envs.closed
    assert_gone(pids)
