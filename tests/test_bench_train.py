"""The `train` bench section's machinery, on its cheapest loop (needs torch)."""
import dataclasses

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("torch", reason="the train bench needs torch (pip install torch==2.13.0)")

from fastvec._bench import train, train_agents  # noqa: E402


def _rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines() if line.startswith("| ")]


def test_table_has_every_backend_the_bound_and_both_thread_counts(capsys):
    loop = next(loop for loop in train.LOOPS if "CartPole" in loop.label and "CleanRL" in loop.label)
    train.run(quick=True, loops=[loop], threads=[2, 1], rounds=1, iterations=1)
    out = capsys.readouterr().out
    header, *rows = _rows(out)
    assert header == ["loop", "torch threads", "backend", "SPS", "vs first", "step", "policy + rest", "update"]
    expected = [b for b in loop.backends if b != "AsyncVectorEnv"] + [train.BOUND]  # (quick: no Async)
    assert [(r[1], r[2]) for r in rows] == [(t, b) for t in ("2", "1") for b in expected]
    for row in rows:
        assert row[0] == loop.label
        assert float(row[3].rstrip("k")) > 0
        shares = [int(c.rstrip(" %")) for c in row[5:]]
        assert all(0 <= s <= 100 for s in shares), row
    bound = [r for r in rows if r[2] == train.BOUND]
    assert all(r[5] == "0 %" for r in bound)  # no time in step: nothing is stepped


def test_a_loop_whose_extra_is_missing_is_skipped_and_said(capsys):
    loop = dataclasses.replace(train.LOOPS[1], label="needs a module", needs=("no_such_module_here",))
    train.run(quick=True, loops=[loop], threads=[1])
    out = capsys.readouterr().out
    assert "needs a module: skipped, needs no_such_module_here" in out
    assert _rows(out)[1:] == []


def test_replay_returns_the_recorded_steps_in_turn_whatever_the_actions():
    source = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3)
    replay = train.ReplayVectorEnv(source, 5)
    reference = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3)
    obs, _ = reference.reset(seed=0)
    assert np.array_equal(replay.reset(seed=123)[0], obs)
    reference.action_space.seed(0)
    expected = [reference.step(reference.action_space.sample()) for _ in range(5)]
    for k in range(12):
        got = replay.step(np.zeros(3, dtype=np.int64))
        want = expected[k % 5]
        assert all(np.array_equal(a, b) for a, b in zip(got[:4], want[:4])), k
    source.close()
    reference.close()


def test_overlapped_rollout_steps_each_env_as_lockstep_stepping_does():
    from fastvec import FastVectorEnv

    n, steps = 4, 40
    actions = np.random.default_rng(0).integers(0, 2, (steps, n))
    fast = FastVectorEnv([lambda: gym.make("CartPole-v1")] * n, num_workers=2, batch_size=n // 2)
    reference = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * n)
    got = {key: np.zeros((steps, n)) for key in ("reward", "terminated", "truncated")}
    got["obs"] = np.zeros((steps, n, 4), np.float32)
    asked = []

    def act(rows, t):
        asked.append((rows.start, t))
        return actions[t, rows]

    def store(rows, t, out):
        for key, value in zip(("obs", "reward", "terminated", "truncated"), out[:4]):
            got[key][t, rows] = value

    try:
        fast.reset(seed=3)
        train_agents.overlapped_rollout(fast, steps, act, store)
        reference.reset(seed=3)
        for t in range(steps):
            want = reference.step(actions[t])
            for key, value in zip(("obs", "reward", "terminated", "truncated"), want[:4]):
                assert np.array_equal(got[key][t], value), (key, t)
        assert sorted(asked) == [(start, t) for start in (0, n // 2) for t in range(steps)]
    finally:
        fast.close()
        reference.close()


def test_backend_names_with_commas_reach_the_measuring_interpreter_whole(monkeypatch, capsys):
    """Each loop runs in a fresh interpreter that is handed the backends by name; names such
    as "FastVectorEnv, halves" hold commas and must arrive whole."""
    import types

    def measure_here(loop, threads, quick, rounds, iterations, backends):
        return {name: train.Sample(1.0, 0.0, 0.0) for name in backends}

    def run_here(command, capture_output, text):  # the fresh interpreter's _main, run in this one
        monkeypatch.setattr(train, "measure", measure_here)
        train._main(command[3:])
        return types.SimpleNamespace(returncode=0, stdout=capsys.readouterr().out, stderr="")

    monkeypatch.setattr(train.subprocess, "run", run_here)
    results = train.measure_in_subprocess(0, 1, True, 1, 1, [train.HALVES, train.RESTART])
    assert list(results) == [train.HALVES, train.RESTART]


def test_the_release_only_backend_is_fastvec_whose_steps_are_never_parked():
    released = train.gym_backend(train.RELEASE_ONLY, train.make_cartpole, 2)
    default = train.gym_backend("FastVectorEnv", train.make_cartpole, 2)
    try:
        assert type(released) is type(default)
        assert default.wait_settings.park and not released.wait_settings.park
    finally:
        released.close()
        default.close()


def test_the_no_stats_backend_is_fastvec_that_counts_nothing():
    off = train.gym_backend(train.NO_STATS, train.make_cartpole, 2)
    default = train.gym_backend("FastVectorEnv", train.make_cartpole, 2)
    try:
        assert type(off) is type(default)
        assert off._stats is None and default._stats is not None
    finally:
        off.close()
        default.close()


def test_vs_first_pairs_each_round_with_its_own_reference(monkeypatch):
    """A round that ran slow for every backend cancels in its own ratio: the backend's ratio is
    the median of the rounds' ratios (2.0 here), not the ratio of the medians (3.0)."""
    loop = next(loop for loop in train.LOOPS if "CartPole" in loop.label and "CleanRL" in loop.label)
    script = {loop.reference: iter([1.0, 10.0, 1.0]), "FastVectorEnv": iter([2.0, 9.0, 3.0]),
              train.BOUND: iter([4.0, 4.0, 4.0])}
    monkeypatch.setattr(train, "measure_once", lambda loop, name, quick, iterations: train.Sample(next(script[name]),
                                                                                                   0.5, 0.25))
    out = train.measure(loop, 1, True, 3, 1, [loop.reference, "FastVectorEnv"])
    assert out["FastVectorEnv"].sps == 3.0 and out["FastVectorEnv"].vs_reference == 2.0
    assert out[loop.reference].vs_reference == 1.0 and out[train.BOUND].vs_reference == 4.0
