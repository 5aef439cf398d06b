"""examples/ppo_multiagent.py: PPO with parameter sharing on Knights Archers Zombies rows."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("pettingzoo.butterfly.knights_archers_zombies_v11")

_PATH = Path(__file__).resolve().parents[1] / "examples" / "ppo_multiagent.py"
_spec = importlib.util.spec_from_file_location("ppo_multiagent", _PATH)
ppo_multiagent = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = ppo_multiagent  # dataclasses look their module up there
_spec.loader.exec_module(ppo_multiagent)


def test_parse_args() -> None:
    args = ppo_multiagent.parse_args(["--num-envs", "4", "--learning-rate", "1e-3", "--max-cycles", "50"])
    assert args.num_envs == 4 and args.learning_rate == 1e-3 and args.max_cycles == 50
    assert ppo_multiagent.parse_args([]) == ppo_multiagent.Args()


def test_short_run_on_knights_archers_zombies() -> None:
    args = ppo_multiagent.Args(num_envs=2, num_steps=32, total_timesteps=2 * 4 * 32 * 2, max_cycles=30,
                               update_epochs=1, log_every=0, seed=3)
    out = ppo_multiagent.main(args)
    assert out["global_step"] == 2 * 4 * 32 * 2 and len(out["episodes"]["return"]) >= 2 * args.num_envs


def test_team_returns_are_those_of_a_plain_loop(monkeypatch) -> None:
    """The example's bookkeeping on Arena (tests/toy_envs.py: an agent comes at step 2, one
    leaves at step 4, every step rewards): the team returns logged are those of a plain loop
    over the same steps' rewards, an env's rows summed from its reset to its end."""
    from gymnasium.vector import AutoresetMode
    from toy_envs import Arena

    from fastvec import MultiAgentVectorEnv

    steps = []  # (rewards, rows whose env ended) of every step, in order

    def arena_envs(args):
        envs = MultiAgentVectorEnv([Arena] * args.num_envs, autoreset_mode=AutoresetMode.SAME_STEP)
        step = envs.step

        def recorded(actions):
            out = step(actions)
            steps.append((out[1].copy(), out[4].get("_final_obs", np.zeros(envs.num_envs, bool)).copy()))
            return out

        envs.step = recorded
        return envs

    monkeypatch.setattr(ppo_multiagent, "make_envs", arena_envs)
    args = ppo_multiagent.Args(num_envs=2, num_steps=16, total_timesteps=2 * 3 * 16 * 2, update_epochs=1,
                               log_every=0, seed=3)
    out = ppo_multiagent.main(args)
    want, running = [], np.zeros((args.num_envs, 3))
    for rewards, ended in steps:
        running += rewards.reshape(args.num_envs, 3)
        for env in range(args.num_envs):
            if ended[env * 3]:
                want.append(float(running[env].sum()))
                running[env] = 0.0
    assert len(want) >= 2 * args.num_envs and all(r > 0 for r in want)
    assert out["episodes"]["return"] == want
