"""The ``multiagent`` bench section: its table, and a skip with a reason where an extra is missing."""
from __future__ import annotations

import pytest

from fastvec._bench import multiagent


def test_table_has_a_row_per_env_each_measured_or_skipped_with_a_reason(capsys, monkeypatch):
    pytest.importorskip("pettingzoo.butterfly.cooperative_pong_v6")
    pytest.importorskip("supersuit")
    monkeypatch.setattr(multiagent, "ENVS", [("pettingzoo.butterfly.cooperative_pong_v6", {}),
                                             ("no_such_module.parallel_env_v0", {})])
    monkeypatch.setattr(multiagent, "NUM_ENVS", 2)
    multiagent.run(quick=True)
    out = capsys.readouterr().out
    pong = next(line for line in out.splitlines() if line.startswith("| cooperative_pong_v6"))
    cells = [c.strip() for c in pong.strip("|").split("|")]
    assert cells[1] == "4" and all(cells[2:]), cells  # 2 envs x 2 paddles, every column filled
    assert "skipped: ModuleNotFoundError" in out


def test_asv_suite_steps_every_backend_and_measures_the_limit(monkeypatch):
    """asv_benchmarks/bench_multiagent.py on cooperative pong: each backend's setup, timed
    steps and teardown, and the N-process limit; an env whose package is missing is skipped
    the asv way (NotImplementedError in setup)."""
    import importlib.util
    import pathlib

    pytest.importorskip("pettingzoo.butterfly.cooperative_pong_v6")
    pytest.importorskip("supersuit")
    path = pathlib.Path(__file__).resolve().parents[1] / "asv_benchmarks" / "bench_multiagent.py"
    spec = importlib.util.spec_from_file_location("asv_bench_multiagent", path)
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    monkeypatch.setattr(multiagent, "NUM_ENVS", 2)
    assert suite.BACKENDS == ["fastvec", "fastvec send/recv", "SuperSuit num_cpus=0", "SuperSuit num_cpus=2"]
    for backend in suite.BACKENDS:
        case = suite.MultiAgentStep()
        case.setup("cooperative_pong_v6", backend)
        assert case.vec.num_envs == 4  # (2 envs x 2 paddles)
        stepped = []
        advance = case.advance
        case.advance = lambda: stepped.append(advance()) or stepped[-1]
        case.time_step("cooperative_pong_v6", backend)
        assert sum(stepped) == suite.STEPS * 4
        if backend == "fastvec send/recv":  # (one worker's env, 2 rows, per recv)
            assert case.vec.batch_size == 1 and set(stepped) == {2}
        case.teardown("cooperative_pong_v6", backend)
    limit = suite.MultiAgentLimit()
    limit.setup("cooperative_pong_v6")
    assert limit.track_sps("cooperative_pong_v6") > 0
    monkeypatch.setattr(multiagent, "ENVS", [("no_such_module.parallel_env_v0", {})])
    with pytest.raises(NotImplementedError, match="pettingzoo extra"):
        suite.MultiAgentStep().setup("parallel_env_v0", "fastvec")


def test_policy_table_steps_every_backend_with_an_mlp_in_the_loop(capsys, monkeypatch):
    """The second table: multiwalker with an MLP's forward pass on every batch of rows, each
    backend's row filled."""
    pytest.importorskip("torch")
    pytest.importorskip("supersuit")
    pytest.importorskip("pettingzoo.sisl.multiwalker_v9")  # (Box2D)
    monkeypatch.setattr(multiagent, "ENVS", [])
    monkeypatch.setattr(multiagent, "NUM_ENVS", 2)
    multiagent.run(quick=True)
    out = capsys.readouterr().out
    assert "With a policy" in out
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines()
            if line.startswith("| multiwalker_v9")]
    assert [row[1] for row in rows] == list(multiagent.POLICY_BACKENDS)
    assert all(row[2] and row[3].endswith("x") for row in rows), rows


def test_policy_table_is_skipped_with_a_reason_where_its_env_is_missing(capsys, monkeypatch):
    monkeypatch.setattr(multiagent, "ENVS", [])
    monkeypatch.setattr(multiagent, "POLICY_ENV", ("no_such_module.parallel_env_v0", {}))
    multiagent.run(quick=True)
    assert "With a policy: skipped, ModuleNotFoundError" in capsys.readouterr().out


def test_mlp_policy_gives_actions_in_the_space():
    pytest.importorskip("torch")
    from types import SimpleNamespace

    import numpy as np
    from gymnasium import spaces

    obs = np.random.default_rng(0).normal(size=(5, 3, 2)).astype(np.float32)
    for action_space in (spaces.Discrete(4, start=1), spaces.Box(-0.5, 0.5, (2,), np.float32)):
        vec = SimpleNamespace(single_observation_space=spaces.Box(-9, 9, (3, 2)), single_action_space=action_space)
        actions = multiagent.mlp_policy(vec)(obs * 100)
        assert len(actions) == 5 and all(action_space.contains(a) for a in actions), actions
