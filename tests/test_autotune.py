"""fastvec.autotune: the settings it tries, its pick, its budget, and nothing left behind."""
from __future__ import annotations

import multiprocessing
import subprocess
import sys

import gymnasium as gym
import pytest

from fastvec import autotune as autotune_module
from fastvec.autotune import autotune, candidates


def test_candidates_start_with_the_defaults_and_cover_workers_caller_share_and_half_batches():
    tried = candidates(8, 2)
    assert tried[0] == {}
    assert {"num_workers": 1} in tried and {"num_workers": 3, "step_in_caller": True} in tried
    assert {"num_workers": 2} not in tried  # (the defaults on 2 cores: measured once, as {})
    assert {"num_workers": 2, "batch_size": 4} in tried
    assert all(s.get("num_workers", 1) <= 3 for s in tried)
    assert max(s.get("num_workers", 1) for s in candidates(2, 8)) == 2  # (never more workers than envs)
    for num_envs, cores in ((8, 8), (10, 4), (6, 4), (7, 2)):  # (half batches only where recv allows them)
        for setting in candidates(num_envs, cores):
            if "batch_size" in setting:
                assert num_envs % setting["num_workers"] == 0 and setting["batch_size"] == num_envs // 2


def _fake_rates(monkeypatch, rates):
    seen = []

    def measure(env_fns, setting, seconds, think_us, policy):
        seen.append(setting)
        return rates[tuple(sorted(setting.items()))]

    monkeypatch.setattr(autotune_module, "_measure", measure)
    return seen


def test_the_pick_must_beat_the_defaults_by_the_margin(monkeypatch):
    fns = [lambda: gym.make("CartPole-v1")] * 4
    a, b = {"num_workers": 1}, {"num_workers": 2, "step_in_caller": True}
    _fake_rates(monkeypatch, {(): 100.0, (("num_workers", 1),): 102.0,
                              (("num_workers", 2), ("step_in_caller", True)): 110.0})
    assert autotune(fns, settings=[a, b], verbose=False) == b
    assert autotune(fns, settings=[a], verbose=False) == {}  # (2 % better: within the margin)
    assert autotune(fns, settings=[a], margin=0.01, verbose=False) == a


def test_fastvec_autotune_is_callable_as_the_readme_shows_and_still_a_module(monkeypatch):
    import importlib
    import types

    import fastvec

    seen = _fake_rates(monkeypatch, {(): 100.0, (("num_workers", 1),): 120.0})
    fns = [lambda: gym.make("CartPole-v1")] * 2
    assert fastvec.autotune(fns, settings=[{"num_workers": 1}], verbose=False) == {"num_workers": 1}
    assert seen == [{}, {"num_workers": 1}]
    assert isinstance(fastvec.autotune, types.ModuleType) and fastvec.autotune is autotune_module
    assert importlib.import_module("fastvec.autotune") is fastvec.autotune
    assert fastvec.autotune.autotune is autotune and fastvec.autotune.candidates is candidates
    with pytest.raises(TypeError, match="env_fns"):
        fastvec.autotune()
    # (the package imports it on first use only: `python -m fastvec.autotune` runs it without runpy's warning)
    done = subprocess.run([sys.executable, "-W", "error", "-c",
                           "import sys, fastvec; assert 'fastvec.autotune' not in sys.modules; "
                           "assert callable(fastvec.autotune); from fastvec import autotune; assert callable(autotune)"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_pick_that_steps_in_the_caller_says_it_gives_up_isolation(monkeypatch, capsys):
    fns = [lambda: gym.make("CartPole-v1")] * 4
    in_caller, workers = {"num_workers": 2, "step_in_caller": True}, {"num_workers": 1}
    _fake_rates(monkeypatch, {(): 100.0, (("num_workers", 1),): 120.0,
                              (("num_workers", 2), ("step_in_caller", True)): 130.0})
    assert autotune(fns, settings=[workers, in_caller]) == in_caller
    out = capsys.readouterr().out
    assert "step_in_caller=True" in out and 'env_failure="restart"' in out
    assert autotune(fns, settings=[workers]) == workers  # (a pick that keeps the envs in workers: no note)
    assert "env_failure" not in capsys.readouterr().out


def test_the_budget_stops_trying_settings(monkeypatch):
    fns = [lambda: gym.make("CartPole-v1")] * 2
    seen = _fake_rates(monkeypatch, {(): 1.0, (("num_workers", 1),): 1.0, (("num_workers", 2),): 1.0})
    autotune(fns, settings=[{"num_workers": 1}, {"num_workers": 2}], budget_s=0.0, verbose=False)
    assert seen == [{}]  # (the defaults are always measured)


def test_a_real_run_prints_its_table_calls_the_policy_and_leaves_no_process(capsys):
    calls = []
    autotune([lambda: gym.make("CartPole-v1")] * 4, seconds=0.2,
                    settings=[{"num_workers": 1}, {"num_workers": 2, "batch_size": 2}],
                    policy=lambda obs: calls.append(len(obs)))
    out = capsys.readouterr().out
    assert "| (defaults)" in out and "| num_workers=1 " in out and "| num_workers=2, batch_size=2" in out
    assert 4 in calls and 2 in calls  # (lockstep batches of 4; half batches of 2 from recv)
    assert multiprocessing.active_children() == []


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="seconds"):
        autotune([lambda: gym.make("CartPole-v1")], seconds=0)
    with pytest.raises(ValueError, match="at least one"):
        autotune([])
    done = subprocess.run([sys.executable, "-m", "fastvec.autotune", "NoSuchEnv-v0"], capture_output=True, text=True)
    assert done.returncode == 2 and "not a registered env id" in done.stderr
