"""FastVectorEnv(env_failure="restart"): an env that raises in a step is built again in its
worker; a worker process that ends is started again with its envs built anew; the step
returns with everyone else's results as SyncVectorEnv's.

Each fault is injected once (a marker file), at a chosen step, in env 5 of 8 over 2 workers
(worker 1 steps envs 4..7). Every env that was not rebuilt must equal SyncVectorEnv's, bit for
bit, throughout: envs 0..3 always, and envs 4, 6, 7 too when only env 5 raised.
"""
import os
import signal
import time

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from fastvec import FastVectorEnv, WorkerDiedError
from helpers import assert_same, block_mappings
from toy_envs import FlakyEnv

pytestmark = pytest.mark.needs_posix

NUM_ENVS, FAILING, FAIL_AT, SEED = 8, 5, 4, 7
WORKER_1 = list(range(4, 8))  # what a worker restart rebuilds
ENV_5 = [FAILING]  # what an env's exception rebuilds


def _fns(marker, how="raise", **kwargs):
    return [(lambda k=k: FlakyEnv(FAIL_AT if k == FAILING else None, how, marker, **kwargs)) for k in range(NUM_ENVS)]


def _derived_seed(env: int, restart: int) -> int:
    """What the docs promise: drawn from the env's last seed (SEED + env) and its restart count."""
    return int(np.random.SeedSequence([SEED + env, restart]).generate_state(1)[0])


@pytest.fixture
def workers_seen():
    """A list to put vector envs in; after the test, no worker process any of them ever had
    (the replaced ones included) is alive, and this process maps no shared block."""
    import gc

    envs, pids = [], set()
    yield envs, pids
    for env in envs:
        env.close()
    for pid in pids:
        deadline = time.monotonic() + 5
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), f"worker {pid} still alive after close"
    envs.clear()
    gc.collect()
    assert not block_mappings(creator=os.getpid()), "this process still maps a shared block"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _run(env, steps, rebuilt, actions_seed=0, on_step=None):
    """Step ``env`` beside a SyncVectorEnv of the same envs that never fail; assert every env
    not in ``rebuilt`` matches it at every step; return every step's results."""
    kept = [e for e in range(NUM_ENVS) if e not in rebuilt]
    ref = SyncVectorEnv([lambda: FlakyEnv() for _ in range(NUM_ENVS)])
    ref_obs, _ = ref.reset(seed=SEED)
    obs, _ = env.reset(seed=SEED)
    assert_same(ref_obs, obs, "reset")
    rng = np.random.default_rng(actions_seed)
    out = [(obs, None, None, None, {})]
    for t in range(steps):
        if on_step is not None:
            on_step(t, env)
        actions = rng.integers(0, 2, NUM_ENVS)
        got, want = env.step(actions), ref.step(actions)
        for k in range(4):
            assert_same(want[k][kept], got[k][kept], f"step {t}, result {k}, envs {kept}")
        assert_same(want[4]["t"][kept], got[4]["t"][kept], f"step {t} infos['t'], envs {kept}")
        out.append(got)
    ref.close()
    return out


def _step_to_the_failure(tmp_path, workers_seen, how="raise", **kwargs):
    """A vector env of ``_fns`` (its workers recorded), reset and stepped up to the step
    before env 5's failure; returns it and the actions it steps with."""
    envs, pids = workers_seen
    env = FastVectorEnv(_fns(None if tmp_path is None else str(tmp_path / "failed"), how,
                             **kwargs.pop("env_kwargs", {})), num_workers=2, **kwargs)
    envs.append(env)
    pids.update(p.pid for p in env.processes)
    env.reset(seed=SEED)
    actions = np.zeros(NUM_ENVS, dtype=np.int64)
    for _ in range(FAIL_AT - 1):
        env.step(actions)
    return env, actions


def _check_restart_step(out, t, rebuilt, error_has):
    """Step ``t`` (1-based in ``out``) is where env 5 failed: the ``rebuilt`` envs report it
    (NEXT_STEP, DISABLED: their last observation)."""
    before, (obs, rewards, terminations, truncations, infos) = out[t - 1], out[t]
    np.testing.assert_array_equal(obs[rebuilt], before[0][rebuilt])  # the last observation
    _check_restart_flags(rewards, terminations, truncations, infos, rebuilt, error_has)


def _check_restart_flags(rewards, terminations, truncations, infos, rebuilt, error_has):
    kept = [e for e in range(NUM_ENVS) if e not in rebuilt]
    assert rewards[rebuilt].tolist() == [0.0] * len(rebuilt)
    assert not terminations[rebuilt].any() and truncations[rebuilt].all()
    expected = np.isin(np.arange(NUM_ENVS), rebuilt)
    np.testing.assert_array_equal(infos["env_restarted"], expected)
    np.testing.assert_array_equal(infos["_env_restarted"], expected)
    np.testing.assert_array_equal(infos["_env_error"], expected)
    assert all(error_has in infos["env_error"][e] for e in rebuilt), infos["env_error"]
    assert list(infos["env_error"][kept]) == [None] * len(kept)


def _check_reset_after(out, t, rebuilt):
    """The step after the restart returns the rebuilt envs' first observations, reset with
    their derived seeds (NEXT_STEP autoreset)."""
    obs, rewards, terminations, truncations, infos = out[t + 1]
    for e in rebuilt:
        fresh, _ = FlakyEnv().reset(seed=_derived_seed(e, 1))
        np.testing.assert_array_equal(obs[e], fresh, err_msg=f"env {e}")
    assert rewards[rebuilt].tolist() == [0.0] * len(rebuilt)
    assert not (terminations[rebuilt] | truncations[rebuilt]).any()
    assert "env_restarted" not in infos


@pytest.mark.parametrize("how, rebuilt, error_has", [
    ("raise", ENV_5, "ValueError: boom at step 4 (env 5)"),
    ("exit", WORKER_1, "exited with code 3"),
    ("segv", WORKER_1, "killed by signal SIGSEGV"),
])
def test_a_failed_step_rebuilds_what_failed_and_keeps_the_others_results(tmp_path, workers_seen, how, rebuilt,
                                                                         error_has):
    """An env's exception rebuilds that env alone, in its worker; a worker process that ends
    is started again with all its envs."""
    envs, pids = workers_seen
    env = FastVectorEnv(_fns(str(tmp_path / "failed"), how), num_workers=2, env_failure="restart")
    envs.append(env)
    pids.update(p.pid for p in env.processes)
    out = _run(env, 12, rebuilt)
    pids.update(p.pid for p in env.processes)
    _check_restart_step(out, FAIL_AT, rebuilt, error_has)
    _check_reset_after(out, FAIL_AT, rebuilt)
    assert env.restarts.tolist() == [int(e in rebuilt) for e in range(NUM_ENVS)]
    assert len(pids) == (2 if rebuilt == ENV_5 else 3)  # (a worker replaced, or none)
    # the statistics region counts the restart too (what python -m fastvec.monitor shows)
    report = env.stats()
    assert report["restarts"] == 1 and report["env_restarts"] == env.restarts.tolist()
    assert [w["restarts"] for w in report["workers"]] == [0, int(rebuilt == WORKER_1)]
    assert any("1 failure(s) recovered" in line and str(rebuilt) in line for line in report["advice"])


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
@pytest.mark.parametrize("how, rebuilt, error_has", [
    ("raise", ENV_5, "ValueError: boom at step 4 (env 5)"),
    ("exit", WORKER_1, "exited with code 3"),
    ("segv", WORKER_1, "killed by signal SIGSEGV"),
    ("kill", WORKER_1, "killed by signal SIGKILL"),
])
def test_restart_under_other_start_methods(tmp_path, workers_seen, context, how, rebuilt, error_has):
    """Every fault of the step restarts as under fork: the new worker process is started by
    the vector env's own start method."""
    envs, pids = workers_seen
    fns = [lambda: FlakyEnv() for _ in range(NUM_ENVS)] if how == "kill" else _fns(str(tmp_path / "failed"), how)
    env = FastVectorEnv(fns, num_workers=2, env_failure="restart", context=context)
    envs.append(env)
    pids.update(p.pid for p in env.processes)

    def kill_worker_1(t, env):
        if how == "kill" and t == FAIL_AT - 1:
            os.kill(env.processes[1].pid, signal.SIGKILL)
            env.processes[1].join(5)

    out = _run(env, 8, rebuilt, on_step=kill_worker_1)
    pids.update(p.pid for p in env.processes)
    _check_restart_step(out, FAIL_AT, rebuilt, error_has)
    _check_reset_after(out, FAIL_AT, rebuilt)
    assert env.restarts.tolist() == [int(e in rebuilt) for e in range(NUM_ENVS)]


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_a_worker_that_dies_during_a_reset_under_other_start_methods(tmp_path, workers_seen, context):
    envs, pids = workers_seen
    marker = str(tmp_path / "failed")
    env = FastVectorEnv([(lambda k=k: FlakyEnv(marker=marker, reset_fails=k == FAILING, reset_how="exit"))
                         for k in range(NUM_ENVS)], num_workers=2, env_failure="restart", context=context)
    envs.append(env)
    pids.update(p.pid for p in env.processes)
    obs, infos = env.reset(seed=SEED)
    pids.update(p.pid for p in env.processes)
    assert np.flatnonzero(infos["env_restarted"]).tolist() == WORKER_1
    for e in WORKER_1:
        fresh, _ = FlakyEnv().reset(seed=_derived_seed(e, 1))
        np.testing.assert_array_equal(obs[e], fresh)
    env.step(np.zeros(NUM_ENVS, dtype=np.int64))


def test_a_worker_killed_from_outside_between_steps(workers_seen):
    envs, pids = workers_seen
    env = FastVectorEnv([lambda: FlakyEnv() for _ in range(NUM_ENVS)], num_workers=2, env_failure="restart")
    envs.append(env)

    def kill_worker_1(t, env):
        pids.update(p.pid for p in env.processes)
        if t == FAIL_AT - 1:
            os.kill(env.processes[1].pid, signal.SIGKILL)
            env.processes[1].join(5)

    out = _run(env, 8, WORKER_1, on_step=kill_worker_1)
    _check_restart_step(out, FAIL_AT, WORKER_1, "killed by signal SIGKILL")
    _check_reset_after(out, FAIL_AT, WORKER_1)


def _send_recv_until(env, found, seconds: float = 10.0):
    """Reset ``env`` (send/recv), then send zeros to whatever recv hands back until ``found``
    holds for a recv's results. Returns those results, and every env's observation before
    them."""
    obs, _ = env.reset(seed=SEED)
    last = obs.copy()
    env.send(np.zeros(NUM_ENVS, dtype=np.int64))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        out = env.recv()
        if found(out):
            return out, last
        ids = out[4]["env_id"]
        last[ids] = out[0]
        env.send(np.zeros(len(ids), dtype=np.int64), ids)
    pytest.fail(f"no such results within {seconds} s")


@pytest.mark.parametrize("how, rebuilt", [("raise", ENV_5), ("exit", WORKER_1)])
def test_restarts_in_send_recv(tmp_path, workers_seen, how, rebuilt):
    envs, pids = workers_seen
    env = FastVectorEnv(_fns(str(tmp_path / "failed"), how), num_workers=2, batch_size=4, env_failure="restart")
    envs.append(env)
    pids.update(p.pid for p in env.processes)
    # (worker 0 may step many times before worker 1's failure is seen: up to ~0.1 s)
    (obs, rewards, terminations, truncations, infos), last = _send_recv_until(env, lambda out: "env_restarted" in out[4])
    ids = infos["env_id"]
    pids.update(p.pid for p in env.processes)
    rows = [k for k, e in enumerate(ids.tolist()) if e in rebuilt]
    assert ids.tolist() == WORKER_1 and np.flatnonzero(infos["env_restarted"]).tolist() == rows
    assert truncations[rows].all() and rewards[rows].tolist() == [0.0] * len(rows)
    np.testing.assert_array_equal(obs[rows], last[rebuilt])
    assert env.restarts.tolist() == [int(e in rebuilt) for e in range(NUM_ENVS)]


def test_disabled_autoreset_the_user_resets_a_rebuilt_env_with_its_derived_seed(tmp_path, workers_seen):
    envs, pids = workers_seen
    env, actions = _step_to_the_failure(tmp_path, workers_seen, env_failure="restart",
                                        autoreset_mode=AutoresetMode.DISABLED)
    obs, rewards, terminations, truncations, infos = env.step(actions)
    assert truncations.tolist() == [e == FAILING for e in range(NUM_ENVS)] and infos["env_restarted"][FAILING]
    with pytest.raises(Exception, match="reset"):  # (DISABLED: an ended env must be reset first)
        env.step(actions)
    obs, infos = env.reset(options={"reset_mask": truncations})
    pids.update(p.pid for p in env.processes)
    for e in ENV_5:
        fresh, _ = FlakyEnv().reset(seed=_derived_seed(e, 1))
        np.testing.assert_array_equal(obs[e], fresh, err_msg=f"env {e}")


def test_the_budget_ends_in_the_failure_raised_as_without_restarts(workers_seen):
    """Every build of env 5 fails at its 4th step: the first failure is recovered from, the
    second (max_restarts=1) raises the env's own exception and closes the vector env."""
    envs, pids = workers_seen
    env, actions = _step_to_the_failure(None, workers_seen, env_failure="restart", max_restarts=1)
    env.step(actions)
    assert env.restarts.tolist() == [int(e == FAILING) for e in range(NUM_ENVS)]
    with pytest.raises(ValueError, match="boom at step 4"):
        for _ in range(FAIL_AT + 1):  # (one step for the autoreset, then four)
            env.step(actions)
    assert env.closed


def test_a_constructor_that_fails_on_the_rebuild_raises_at_once(tmp_path, workers_seen):
    envs, pids = workers_seen
    env, actions = _step_to_the_failure(tmp_path, workers_seen, env_failure="restart",
                                        env_kwargs={"build_fails": True})
    with pytest.raises(RuntimeError, match="cannot build the env again"):
        env.step(actions)
    pids.update(p.pid for p in env.processes)
    assert env.closed and len(pids) == 2  # (no worker was started again to retry it)


def test_raise_stays_the_default(tmp_path, workers_seen):
    envs, pids = workers_seen
    env = FastVectorEnv(_fns(str(tmp_path / "failed"), "exit"), num_workers=2)
    envs.append(env)
    pids.update(p.pid for p in env.processes)
    env.reset(seed=SEED)
    with pytest.raises(WorkerDiedError, match="exited with code 3"):
        for _ in range(FAIL_AT):
            env.step(np.zeros(NUM_ENVS, dtype=np.int64))
    assert env.closed and env.restarts.tolist() == [0] * NUM_ENVS


@pytest.mark.parametrize("kwargs, error, match", [
    ({"env_failure": "retry"}, ValueError, "env_failure must be 'raise' or 'restart', got 'retry'"),
    ({"env_failure": "restart", "max_restarts": 1.5}, TypeError, "max_restarts must be an int, got float"),
    ({"env_failure": "restart", "max_restarts": -1}, ValueError, "max_restarts must be >= 0, got -1"),
    ({"env_failure": "restart", "step_in_caller": True}, ValueError, "step_in_caller=True"),
])
def test_bad_failure_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        FastVectorEnv([lambda: FlakyEnv() for _ in range(2)], num_workers=2, **kwargs)


@pytest.mark.parametrize("how, rebuilt, error_has", [("raise", ENV_5, "boom at step 4"), ("exit", WORKER_1, "code 3")])
def test_same_step_autoreset_returns_the_rebuilt_envs_first_observations_at_once(tmp_path, workers_seen, how,
                                                                                 rebuilt, error_has):
    """SAME_STEP: the rebuilt env's first observation (reset with its derived seed) comes back
    in the step that saw the failure; ``final_obs`` holds the last one, ``final_info`` the
    restart."""
    envs, pids = workers_seen
    env = FastVectorEnv(_fns(str(tmp_path / "failed"), how), num_workers=2, env_failure="restart",
                        autoreset_mode=AutoresetMode.SAME_STEP)
    envs.append(env)
    pids.update(p.pid for p in env.processes)
    last, _ = env.reset(seed=SEED)
    actions = np.zeros(NUM_ENVS, dtype=np.int64)
    for _ in range(FAIL_AT - 1):
        last, *_ = env.step(actions)
    obs, rewards, terminations, truncations, infos = env.step(actions)
    pids.update(p.pid for p in env.processes)
    _check_restart_flags(rewards, terminations, truncations, infos, rebuilt, error_has)
    expected = np.isin(np.arange(NUM_ENVS), rebuilt)
    np.testing.assert_array_equal(infos["_final_obs"], expected)
    for e in rebuilt:
        fresh, _ = FlakyEnv().reset(seed=_derived_seed(e, 1))
        np.testing.assert_array_equal(obs[e], fresh, err_msg=f"env {e}")
        np.testing.assert_array_equal(infos["final_obs"][e], last[e])
        assert infos["final_info"]["env_restarted"][e] and infos["final_info"]["_env_restarted"][e]
        assert error_has in infos["final_info"]["env_error"][e]
    np.testing.assert_array_equal(infos["_final_info"], expected)
    obs, rewards, terminations, truncations, infos = env.step(actions)  # (and on it goes)
    assert not (terminations | truncations).any() and "env_restarted" not in infos


def test_env_and_worker_restarts_draw_on_one_budget(tmp_path, workers_seen):
    """max_restarts=1: env 5's exception takes the budget; then the worker process ending
    raises as without restarts."""
    envs, pids = workers_seen
    env, actions = _step_to_the_failure(tmp_path, workers_seen, env_failure="restart", max_restarts=1)
    env.step(actions)
    assert env.restarts.tolist() == [int(e == FAILING) for e in range(NUM_ENVS)]
    os.kill(env.processes[0].pid, signal.SIGKILL)
    env.processes[0].join(5)
    with pytest.raises(WorkerDiedError, match="SIGKILL"):
        env.step(actions)
    assert env.closed


@pytest.mark.parametrize("how, rebuilt", [("raise", ENV_5), ("exit", WORKER_1)])
def test_sb3_sees_a_restart_as_a_truncated_episode(tmp_path, workers_seen, how, rebuilt):
    """SB3's FastVecEnv: each rebuilt env is done, with ``TimeLimit.truncated`` and its last
    observation as ``terminal_observation`` (SB3 bootstraps from it)."""
    pytest.importorskip("stable_baselines3")
    from fastvec.integrations.sb3 import FastVecEnv

    envs, pids = workers_seen
    venv = FastVecEnv(_fns(str(tmp_path / "failed"), how), env_failure="restart")
    envs.append(venv.vector_env)
    pids.update(p.pid for p in venv.vector_env.processes)
    venv.seed(SEED)
    obs = venv.reset()
    for _ in range(FAIL_AT):
        last = obs
        obs, rewards, dones, infos = venv.step(np.zeros(NUM_ENVS, dtype=np.int64))
    pids.update(p.pid for p in venv.vector_env.processes)
    assert np.flatnonzero(dones).tolist() == rebuilt
    for e in rebuilt:
        assert infos[e]["TimeLimit.truncated"]
        assert infos[e]["env_restarted"]
        np.testing.assert_array_equal(infos[e]["terminal_observation"], last[e])
        fresh, _ = FlakyEnv().reset(seed=_derived_seed(e, 1))
        np.testing.assert_array_equal(obs[e], fresh)


@pytest.mark.parametrize("mode", ["raise", "restart"])
def test_a_step_longer_than_step_timeout_counts_as_a_failure(tmp_path, workers_seen, mode):
    """Env 5 hangs at its 4th step. With step_timeout=1 the step ends after about 1 s: raising
    TimeoutError that names the env (the hung worker killed, the vector env closed), or with
    the worker started again and its envs reporting the restart."""
    envs, pids = workers_seen
    env = FastVectorEnv(_fns(str(tmp_path / "failed"), "hang"), num_workers=2, env_failure=mode, step_timeout=1.0)
    envs.append(env)
    pids.update(p.pid for p in env.processes)
    timed = {}

    def clock(t, env):
        timed[t] = time.perf_counter()

    if mode == "raise":
        env.reset(seed=SEED)
        actions = np.zeros(NUM_ENVS, dtype=np.int64)
        for _ in range(FAIL_AT - 1):
            env.step(actions)
        start = time.perf_counter()
        with pytest.raises(TimeoutError, match=r"env 5 \(worker 1\) took longer than step_timeout=1.0 s"):
            env.step(actions)
        assert 1.0 <= time.perf_counter() - start < 3.0
        assert env.closed
        return
    out = _run(env, 8, WORKER_1, on_step=clock)
    pids.update(p.pid for p in env.processes)
    _check_restart_step(out, FAIL_AT, WORKER_1, "TimeoutError: env 5 (worker 1) took longer than step_timeout=1.0 s")
    _check_reset_after(out, FAIL_AT, WORKER_1)
    assert 1.0 <= timed[FAIL_AT] - timed[FAIL_AT - 1] < 3.0


@pytest.mark.parametrize("value, error, match", [
    (0, ValueError, "step_timeout must be > 0 seconds, got 0"),
    ("1", TypeError, "step_timeout must be None or a number of seconds, got str"),
])
def test_bad_step_timeout(value, error, match):
    with pytest.raises(error, match=match):
        FastVectorEnv([lambda: FlakyEnv() for _ in range(2)], num_workers=2, step_timeout=value)


def test_the_survive_crashes_example_reports_every_failure_it_injects():
    """examples/survive_crashes.py on CartPole (MuJoCo is an extra): an exception, a segfault
    and a SIGKILL, each reported in the step it happened in."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "survive_crashes.py"
    spec = importlib.util.spec_from_file_location("survive_crashes", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    result = example.run("CartPole-v1", 4, steps=90, every=30, env_failure="restart", faults=True, seed=0)
    assert [(t, kind) for t, kind, _ in result["injected"]] == [(30, "raise"), (60, "segv"), (90, "kill")]
    # (an env in its autoreset step carries the order out at its next step)
    delays = [seen - t for (t, *_), (seen, *_) in zip(result["injected"], result["reported"])]
    assert len(delays) == 3 and delays[0] in (0, 1) and delays[1] in (0, 1) and delays[2] == 0, delays
    assert sum(result["restarts"]) == 1 + 2 + 2  # (one env, then a worker's two, twice)


class _NotedEnv(FlakyEnv):
    """Its infos hold a string, which travels on the worker's pipe after every step."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {**info, "note": f"step {self.t}"}


def test_a_worker_that_dies_between_its_done_flag_and_its_reply(tmp_path, workers_seen, monkeypatch):
    """A worker that marks its step done with a reply to come on its pipe, then dies before
    sending it (killed in between), is restarted once, and the step reports it. (The workers
    are forks of this process: the first one to send a step's reply dies instead.)"""
    from fastvec.vector._worker import process

    marker, armed = str(tmp_path / "died"), tmp_path / "armed"
    send = process.protocol.send

    def send_or_die(conn, obj):
        if armed.exists() and isinstance(obj, tuple) and len(obj) == 3 and not isinstance(obj[0], str):
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                pass
            else:
                os._exit(5)
        return send(conn, obj)

    monkeypatch.setattr(process.protocol, "send", send_or_die)
    envs, pids = workers_seen
    env = FastVectorEnv([lambda: _NotedEnv() for _ in range(NUM_ENVS)], num_workers=2, env_failure="restart",
                        context="fork")
    envs.append(env)
    pids.update(p.pid for p in env.processes)
    env.reset(seed=SEED)
    armed.touch()  # (each step's reply: its string infos go on the pipe)
    obs, rewards, terminations, truncations, infos = env.step(np.zeros(NUM_ENVS, dtype=np.int64))
    pids.update(p.pid for p in env.processes)
    died = np.flatnonzero(infos["env_restarted"]).tolist()
    assert died in (list(range(4)), WORKER_1) and truncations[died].all(), infos
    assert "exited with code 5" in infos["env_error"][died[0]]
    assert sum(env.restarts) == 4  # (one restart of one worker)
    env.step(np.zeros(NUM_ENVS, dtype=np.int64))


def test_an_env_whose_reset_raises_is_rebuilt_and_reset_with_its_derived_seed(tmp_path, workers_seen):
    """Env 5's first reset raises: it is rebuilt in its worker and reset with the seed drawn
    from the one it was given; every other env's reset, and then every other env's steps,
    are SyncVectorEnv's."""
    envs, pids = workers_seen
    marker = str(tmp_path / "failed")
    env = FastVectorEnv([(lambda k=k: FlakyEnv(marker=marker, reset_fails=k == FAILING)) for k in range(NUM_ENVS)],
                        num_workers=2, env_failure="restart")
    envs.append(env)
    pids.update(p.pid for p in env.processes)
    ref = SyncVectorEnv([lambda: FlakyEnv() for _ in range(NUM_ENVS)])
    want, _ = ref.reset(seed=SEED)
    obs, infos = env.reset(seed=SEED)
    kept = [e for e in range(NUM_ENVS) if e != FAILING]
    np.testing.assert_array_equal(obs[kept], want[kept])
    fresh, _ = FlakyEnv().reset(seed=_derived_seed(FAILING, 1))
    np.testing.assert_array_equal(obs[FAILING], fresh)
    assert np.flatnonzero(infos["env_restarted"]).tolist() == [FAILING]
    assert "ValueError: boom in reset (env 5)" in infos["env_error"][FAILING]
    assert env.restarts.tolist() == [int(e == FAILING) for e in range(NUM_ENVS)]
    actions = np.zeros(NUM_ENVS, dtype=np.int64)
    got, want = env.step(actions), ref.step(actions)
    assert_same(want[0][kept], got[0][kept], "step after the reset")
    ref.close()


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
def test_an_autoreset_that_raises_keeps_the_step_that_ended_the_episode(tmp_path, workers_seen, mode):
    """Env 5's episode ends at step 3 and its autoreset raises. The step that ended it went
    well, so it reports as SyncVectorEnv's (SAME_STEP: its reward, ``terminated``, its
    ``final_obs``), with the rebuilt env's first observation (seeded from its derived seed);
    with NEXT_STEP the autoreset step reports what a reset step does (reward 0, no flags) with
    that observation. Every other env is SyncVectorEnv's throughout."""
    envs, pids = workers_seen
    marker = str(tmp_path / "failed")
    env = FastVectorEnv([(lambda k=k: FlakyEnv(marker=marker, episode=3, reset_fails=k == FAILING, reset_fails_at=2))
                         for k in range(NUM_ENVS)], num_workers=2, env_failure="restart", autoreset_mode=mode)
    envs.append(env)
    pids.update(p.pid for p in env.processes)
    ref = SyncVectorEnv([lambda: FlakyEnv(episode=3) for _ in range(NUM_ENVS)], autoreset_mode=mode)
    kept = [e for e in range(NUM_ENVS) if e != FAILING]
    env.reset(seed=SEED)
    ref.reset(seed=SEED)
    fresh, _ = FlakyEnv().reset(seed=_derived_seed(FAILING, 1))
    actions = np.ones(NUM_ENVS, dtype=np.int64)
    for t in range(1, 6):
        got, want = env.step(actions), ref.step(actions)
        failed_here = t == (3 if mode is AutoresetMode.SAME_STEP else 4)
        rows = kept if failed_here else list(range(NUM_ENVS))
        if t < 3 or failed_here:  # (after the failure env 5 runs on from its derived seed)
            for k in range(4):
                assert_same(want[k][rows], got[k][rows], f"step {t}, result {k}, envs {rows}")
        infos = got[4]
        assert bool(infos.get("env_restarted", np.zeros(NUM_ENVS, bool))[FAILING]) == failed_here, f"step {t}"
        if failed_here:
            np.testing.assert_array_equal(got[0][FAILING], fresh)
            assert got[1][FAILING] == want[1][FAILING] and got[2][FAILING] == want[2][FAILING]
            assert got[3][FAILING] == want[3][FAILING] == False  # noqa: E712 (not truncated: it ended well)
            if mode is AutoresetMode.SAME_STEP:
                assert got[2][FAILING]  # (terminated at step 3, as the env said)
                np.testing.assert_array_equal(infos["final_obs"][FAILING], want[4]["final_obs"][FAILING])
            else:
                assert got[1][FAILING] == 0.0 and not got[2][FAILING]
            assert "ValueError: boom in reset (env 5)" in infos["env_error"][FAILING]
    assert env.restarts.tolist() == [int(e == FAILING) for e in range(NUM_ENVS)]
    ref.close()


@pytest.mark.parametrize("autoreset_mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_a_worker_that_dies_during_a_reset_is_started_again_and_its_envs_reset(tmp_path, workers_seen,
                                                                                autoreset_mode):
    """Env 5's first reset ends its worker's process: the worker is started again, its envs
    built anew and reset with the seeds drawn from the ones they were given, and the reset
    returns with every other env's first observation as SyncVectorEnv's."""
    envs, pids = workers_seen
    marker = str(tmp_path / "failed")
    env = FastVectorEnv([(lambda k=k: FlakyEnv(marker=marker, reset_fails=k == FAILING, reset_how="exit"))
                         for k in range(NUM_ENVS)], num_workers=2, env_failure="restart",
                        autoreset_mode=autoreset_mode)
    envs.append(env)
    pids.update(p.pid for p in env.processes)
    ref = SyncVectorEnv([lambda: FlakyEnv() for _ in range(NUM_ENVS)], autoreset_mode=autoreset_mode)
    want, _ = ref.reset(seed=SEED)
    obs, infos = env.reset(seed=SEED)
    pids.update(p.pid for p in env.processes)
    kept = list(range(4))
    np.testing.assert_array_equal(obs[kept], want[kept])
    for e in WORKER_1:
        fresh, _ = FlakyEnv().reset(seed=_derived_seed(e, 1))
        np.testing.assert_array_equal(obs[e], fresh)
    assert np.flatnonzero(infos["env_restarted"]).tolist() == WORKER_1
    assert "exited with code 4" in infos["env_error"][FAILING]
    assert env.restarts.tolist() == [int(e in WORKER_1) for e in range(NUM_ENVS)]
    rng = np.random.default_rng(1)
    for t in range(40):  # (past the end of the first episodes: autoresets in both)
        actions = rng.integers(0, 2, NUM_ENVS)
        got, want = env.step(actions), ref.step(actions)
        assert_same(want[0][kept], got[0][kept], f"step {t} after the reset")
        np.testing.assert_array_equal(got[3], want[3])  # (the rebuilt envs' episodes began with the others')
    assert env.restarts.tolist() == [int(e in WORKER_1) for e in range(NUM_ENVS)]
    ref.close()


@pytest.mark.parametrize("autoreset_mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
@pytest.mark.parametrize("send_after", [False, True], ids=["recv-only", "send-first"])
def test_a_worker_that_dies_during_async_reset_hands_back_its_envs_first_observations(
        tmp_path, workers_seen, autoreset_mode, send_after):
    """async_reset and recv: env 5's first reset ends its worker's process. Its envs come
    back reset (with the seeds drawn from theirs), not truncated, with no final_obs; also
    when the caller has already sent worker 0 its next step before the death is seen."""
    envs, pids = workers_seen
    marker = str(tmp_path / "failed")
    env = FastVectorEnv([(lambda k=k: FlakyEnv(marker=marker, reset_fails=k == FAILING, reset_how="exit"))
                         for k in range(NUM_ENVS)], num_workers=2, batch_size=4, env_failure="restart",
                        autoreset_mode=autoreset_mode)
    envs.append(env)
    pids.update(p.pid for p in env.processes)
    env.async_reset(seed=SEED)
    seen = []
    while WORKER_1 not in seen:
        obs, rewards, terminations, truncations, infos = env.recv()
        ids = infos["env_id"].tolist()
        seen.append(ids)
        if ids == list(range(4)):
            if len(seen) > 1 and seen[0] == ids:  # (the step sent after its reset)
                continue
            for k, e in enumerate(ids):
                np.testing.assert_array_equal(obs[k], FlakyEnv().reset(seed=SEED + e)[0])
            if send_after:
                env.send(np.zeros(4, dtype=np.int64), ids)
            continue
        pids.update(p.pid for p in env.processes)
        assert ids == WORKER_1
        for k, e in enumerate(ids):
            np.testing.assert_array_equal(obs[k], FlakyEnv().reset(seed=_derived_seed(e, 1))[0])
        assert not truncations.any() and not terminations.any() and not rewards.any()
        assert infos["env_restarted"].all() and "final_obs" not in infos
        assert "exited with code 4" in infos["env_error"][FAILING - 4]
    assert env.restarts.tolist() == [int(e in WORKER_1) for e in range(NUM_ENVS)]


def test_envs_a_masked_async_reset_left_out_count_as_reset_when_their_worker_dies_in_it(tmp_path, workers_seen):
    """DISABLED autoreset, send/recv: every env's episode has ended, and a masked async_reset
    resets env 5 alone, whose reset ends its worker's process. The new process builds and
    resets all of that worker's envs (reported restarted, with first observations), so they
    take actions again; worker 0's envs, not reset, still refuse them."""
    envs, pids = workers_seen
    marker = str(tmp_path / "failed")
    env = FastVectorEnv([(lambda k=k: FlakyEnv(marker=marker, episode=2, reset_fails=k == FAILING, reset_how="exit",
                                               reset_fails_at=2)) for k in range(NUM_ENVS)],
                        num_workers=2, batch_size=4, env_failure="restart", autoreset_mode=AutoresetMode.DISABLED)
    envs.append(env)
    pids.update(p.pid for p in env.processes)
    env.async_reset(seed=SEED)
    ended = set()
    while len(ended) < 2:  # (each worker's envs: reset, two steps, the episode over)
        _, _, terminations, _, infos = env.recv()
        ids = infos["env_id"].tolist()
        if terminations.all():
            ended.add(ids[0])
            continue
        env.send(np.zeros(4, dtype=np.int64), ids)
    env.async_reset(options={"reset_mask": np.arange(NUM_ENVS) == FAILING})
    obs, _, terminations, truncations, infos = env.recv()
    pids.update(p.pid for p in env.processes)
    assert infos["env_id"].tolist() == WORKER_1
    assert infos["env_restarted"].all() and not terminations.any() and not truncations.any()
    env.send(np.zeros(4, dtype=np.int64), WORKER_1)  # (all of them reset again: no AssertionError)
    env.recv()
    with pytest.raises(AssertionError, match=r"envs \[0, 1, 2, 3\] terminated"):
        env.send(np.zeros(4, dtype=np.int64), list(range(4)))


def test_a_worker_restart_seen_by_another_workers_recv_is_reported_with_its_envs(tmp_path, workers_seen):
    """send/recv, one worker's envs per recv: env 5 ends its worker's process in a step. The
    pool may see that death while it waits for any worker, and start the worker again in a
    recv that returns another one; the recv that returns envs 4 and 5 must still mark
    them restarted, truncated, with their last observations."""
    envs, pids = workers_seen
    for trial in range(6):  # (which recv sees the death varies; one trial in two saw it elsewhere)
        marker = str(tmp_path / f"failed{trial}")
        env = FastVectorEnv([(lambda k=k: FlakyEnv(FAIL_AT if k == FAILING else None, "exit", marker))
                             for k in range(NUM_ENVS)], num_workers=4, batch_size=2, env_failure="restart")
        envs.append(env)
        pids.update(p.pid for p in env.processes)
        (obs, rewards, terminations, truncations, infos), last = _send_recv_until(
            env, lambda out: FAILING in out[4]["env_id"] and out[3].any())
        ids = infos["env_id"].tolist()
        pids.update(p.pid for p in env.processes)
        assert ids == [4, 5] and infos["env_restarted"].tolist() == [True, True], f"trial {trial}"
        assert truncations.tolist() == [True, True] and rewards.tolist() == [0.0, 0.0]
        np.testing.assert_array_equal(obs, last[ids])
        assert env.restarts.tolist() == [int(e in (4, 5)) for e in range(NUM_ENVS)]
        env.close()


def test_a_rebuild_in_a_step_that_a_reset_drains_still_counts(tmp_path, workers_seen):
    """reset() waits out a send/recv step in flight and drops its results; env 5 was rebuilt
    in that step, which spent a restart: ``restarts`` and ``stats()`` count it."""
    envs, pids = workers_seen
    marker = str(tmp_path / "failed")
    env = FastVectorEnv([(lambda k=k: FlakyEnv(1 if k == FAILING else None, "raise", marker)) for k in range(NUM_ENVS)],
                        num_workers=2, batch_size=4, env_failure="restart")
    envs.append(env)
    pids.update(p.pid for p in env.processes)
    env.reset(seed=SEED)
    env.send(np.zeros(NUM_ENVS, dtype=np.int64))
    while not os.path.exists(marker):
        time.sleep(0.01)
    env.reset(seed=SEED)
    assert env.restarts.tolist() == [int(e == FAILING) for e in range(NUM_ENVS)]
    assert env.stats()["restarts"] == 1


@pytest.mark.parametrize("autoreset_mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
@pytest.mark.parametrize("how, rebuilt", [("raise", ENV_5), ("exit", WORKER_1)])
def test_restarts_keep_text_observations(tmp_path, workers_seen, autoreset_mode, how, rebuilt):
    """A Dict observation with a Text leaf (MiniGrid's "mission"), which Gymnasium batches as
    a tuple of strings: send/recv and step work, and a rebuilt env reports its last
    observation (NEXT_STEP) or its new first one (SAME_STEP, the last in final_obs)."""
    from toy_envs import TextObsEnv

    envs, pids = workers_seen
    marker = str(tmp_path / "failed")
    fns = [(lambda k=k: TextObsEnv(FlakyEnv(FAIL_AT if k == FAILING else None, how, marker))) for k in range(NUM_ENVS)]
    env = FastVectorEnv(fns, num_workers=2, batch_size=4, env_failure="restart", autoreset_mode=autoreset_mode)
    envs.append(env)
    pids.update(p.pid for p in env.processes)
    env.async_reset(seed=SEED)
    for _ in range(2):
        obs = env.recv()[0]
        assert isinstance(obs["mission"], tuple) and len(obs["mission"]) == 4
    env.close()
    env = FastVectorEnv(fns, num_workers=2, env_failure="restart", autoreset_mode=autoreset_mode)
    envs.append(env)
    pids.update(p.pid for p in env.processes)
    obs, _ = env.reset(seed=SEED)
    for _ in range(FAIL_AT - 1):
        obs, *_ = env.step(np.zeros(NUM_ENVS, dtype=np.int64))
    last = obs
    obs, rewards, terminations, truncations, infos = env.step(np.zeros(NUM_ENVS, dtype=np.int64))
    pids.update(p.pid for p in env.processes)
    assert np.flatnonzero(infos["env_restarted"]).tolist() == rebuilt
    assert isinstance(obs["mission"], tuple) and len(obs["mission"]) == NUM_ENVS
    for e in rebuilt:
        if autoreset_mode is AutoresetMode.SAME_STEP:
            first, _ = TextObsEnv(FlakyEnv()).reset(seed=_derived_seed(e, 1))
            assert obs["mission"][e] == first["mission"]
            np.testing.assert_array_equal(obs["x"][e], first["x"])
            assert infos["final_obs"][e]["mission"] == last["mission"][e]
        else:
            assert obs["mission"][e] == last["mission"][e]
            np.testing.assert_array_equal(obs["x"][e], last["x"][e])


class _InPlaceEnv(FlakyEnv):
    """Returns its own state array, which each step changes in place; env FAILING raises at
    step FAIL_AT after that change (a physics update, then a check that fails)."""

    def __init__(self, fails: bool):
        super().__init__()
        self.fails, self.state = fails, np.zeros(3, np.float32)

    def reset(self, *, seed=None, options=None):
        self.state[:] = 0
        self.t = 0
        return self.state, {}

    def step(self, action):
        self.t += 1
        self.state += 0.1
        if self.fails and self.t == FAIL_AT:
            raise ValueError("diverged")
        return self.state, 1.0, False, False, {}


@pytest.mark.parametrize("batch_size", [None, 4], ids=["step", "send-recv"])
def test_a_rebuilt_env_reports_the_observation_the_caller_last_got(workers_seen, batch_size):
    """NEXT_STEP: an env whose step changed its observation array in place and then raised
    reports the observation the vector env last returned for it, not the changed array."""
    envs, pids = workers_seen
    env = FastVectorEnv([(lambda k=k: _InPlaceEnv(k == FAILING)) for k in range(NUM_ENVS)], num_workers=2,
                        batch_size=batch_size, env_failure="restart")
    envs.append(env)
    pids.update(p.pid for p in env.processes)
    if batch_size is None:
        obs, _ = env.reset(seed=SEED)
        for _ in range(FAIL_AT - 1):
            obs, *_ = env.step(np.zeros(NUM_ENVS, dtype=np.int64))
        last, (obs, _, _, truncations, infos) = obs, env.step(np.zeros(NUM_ENVS, dtype=np.int64))
        row = FAILING
    else:
        (obs, _, _, truncations, infos), last = _send_recv_until(env, lambda out: "env_restarted" in out[4])
        row = infos["env_id"].tolist().index(FAILING)
    assert infos["env_restarted"][row] and truncations[row]
    np.testing.assert_allclose(last[FAILING], 0.1 * (FAIL_AT - 1), rtol=1e-6)
    np.testing.assert_array_equal(obs[row], last[FAILING])
