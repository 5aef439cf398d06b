"""examples/ppo.py: smoke run, reproducibility, GAE on the device, learning CartPole."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_helpers import PPO_PATH, load_ppo_example, package_root  # noqa: E402


@pytest.fixture(scope="module")
def ppo():
    return load_ppo_example("ppo_example")


@pytest.fixture(autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def reference_gae(rewards, values, dones, next_value, next_done, gamma, lam):
    """CleanRL's reverse loop in float64 (dones[t]: obs_t starts a new episode)."""
    T = len(rewards)
    adv = np.zeros_like(rewards, dtype=np.float64)
    last = 0.0
    for t in reversed(range(T)):
        if t == T - 1:
            nonterminal, nextvalues = 1.0 - next_done, next_value
        else:
            nonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nonterminal - values[t]
        adv[t] = last = delta + gamma * lam * nonterminal * last
    return adv, adv + values


@pytest.mark.parametrize("T,N", [(1, 3), (7, 5), (64, 16)])
def test_gae_torch_equals_reference_loop(ppo, T, N):
    rng = np.random.default_rng(T * 100 + N)
    rewards = rng.normal(size=(T, N))
    values = rng.normal(size=(T, N))
    dones = (rng.random((T, N)) < 0.2).astype(np.float64)
    next_value, next_done = rng.normal(size=N), (rng.random(N) < 0.2).astype(np.float64)
    exp_adv, exp_ret = reference_gae(rewards, values, dones, next_value, next_done, 0.99, 0.95)
    t = lambda a: torch.from_numpy(a)
    # CleanRL's (dones, next_done, next_value) as ppo.py stores them: the value of obs_{t+1} and
    # not_done[t] = 0 where the episode ended at step t (obs_{t+1} starts a new one).
    next_values = np.concatenate([values[1:], next_value[None]])
    not_done = 1.0 - np.concatenate([dones[1:], next_done[None]])
    out = torch.empty(T, N, dtype=torch.float64)
    adv, ret = ppo.gae_torch(t(rewards), t(values), t(next_values), t(not_done),
                             gamma=0.99, gae_lambda=0.95, out=out)
    np.testing.assert_allclose(adv.numpy(), exp_adv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ret.numpy(), exp_ret, rtol=1e-12, atol=1e-12)
    assert adv.data_ptr() == out.data_ptr()


def test_parse_args_covers_every_field(ppo):
    args = ppo.parse_args(["--num-envs", "8", "--num-steps", "4", "--num-minibatches", "2", "--anneal-lr",
                           "--target-return", "100", "--no-save", "--backend", "native"])
    assert (args.num_envs, args.num_steps, args.num_minibatches) == (8, 4, 2)
    assert args.anneal_lr is True and args.save is False and args.target_return == 100.0
    assert args.backend == "native"
    defaults = ppo.parse_args([])
    assert defaults == ppo.Args()
    with pytest.raises(SystemExit):
        ppo.parse_args(["--backend", "jax"])
    with pytest.raises(SystemExit):
        ppo.parse_args(["--num-envs", "3", "--num-steps", "3", "--num-minibatches", "2"])


def test_cuda_graphs_refused_on_the_cpu(ppo, capsys):
    with pytest.raises(SystemExit):
        ppo.parse_args(["--cuda-graphs"])
    assert "--cuda-graphs needs --device cuda" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ppo.parse_args(["--cuda-graphs", "--device", "cuda", "--backend", "native"])
    assert "--cuda-graphs needs --backend torch" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ppo.parse_args(["--sync-debug"])
    assert "--sync-debug" in capsys.readouterr().err and "needs --device cuda" in ppo.SYNC_DEBUG_NEEDS_CUDA
    with pytest.raises(ValueError, match="--cuda-graphs needs --device cuda"):
        ppo.main(ppo.Args(cuda_graphs=True))
    with pytest.raises(SystemExit):
        ppo.parse_args(["--device", "tpu"])


def test_cuda_graphs_refused_from_the_command_line(tmp_path):
    out = subprocess.run([sys.executable, str(PPO_PATH), "--cuda-graphs"], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path, env={"PYTHONPATH": package_root(), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 2
    assert "error: --cuda-graphs needs --device cuda" in out.stderr
    assert "Traceback" not in out.stderr


def test_warm_up_leaves_the_run_unchanged(ppo):
    """Warm-up iterations are undone (weights, Adam state, generators, envs): same run as without."""
    argv = ["--total-timesteps", "6144", "--num-envs", "32", "--num-steps", "16", "--quiet", "--no-save",
            "--seed", "4"]
    runs = [ppo.main(ppo.parse_args(argv + ["--warmup-iterations", str(w)])) for w in (0, 1, 3)]
    assert runs[0]["final_mean_return"] == runs[1]["final_mean_return"] == runs[2]["final_mean_return"]
    assert runs[0]["iterations"] == runs[2]["iterations"] == 12


def test_warm_up_is_outside_the_clock(ppo, monkeypatch):
    original = ppo.PPO.warm_up

    def slow_warm_up(self, iterations):
        original(self, iterations)
        time.sleep(0.4)

    monkeypatch.setattr(ppo.PPO, "warm_up", slow_warm_up)
    summary = ppo.main(ppo.parse_args(["--total-timesteps", "1024", "--num-envs", "32", "--num-steps", "16",
                                       "--quiet", "--no-save"]))
    assert summary["warmup_s"] >= 0.4
    assert summary["wall_s"] < 0.4
    assert summary["steady_sps"] > 0 and summary["sps"] > 0


def test_rollout_starts_from_the_envs_current_observation(ppo):
    """Each rollout's first action is chosen from the observation the last rollout ended on."""
    run = ppo.PPO(ppo.parse_args(["--num-envs", "8", "--num-steps", "4", "--quiet", "--no-save"]))
    run.start()
    run.iteration()
    current = run.envs.state.float().clone()  # TorchCartPole: the obs is the state
    seen = []
    original = run.agent.logits_t
    run.agent.logits_t = lambda obs: (seen.append(obs.clone()), original(obs))[1]
    run.iteration()
    torch.testing.assert_close(seen[0], current, rtol=0, atol=0)


def test_rollout_samples_actions_from_the_policy(ppo):
    """Gumbel-max sampling over the transposed logits draws a ~ softmax(logits), and the batch
    stores log pi(a) of the action taken."""
    run = ppo.PPO(ppo.parse_args(["--num-envs", "512", "--num-steps", "16", "--quiet", "--no-save"]))
    with torch.no_grad():
        for layer in run.agent.actor:
            layer.weight.zero_()
            layer.bias.zero_()
        run.agent.actor[2].bias.copy_(torch.tensor([0.0, float(np.log(3.0))]))  # p = (0.25, 0.75)
    run.start()
    run.collect()
    share = run.actions.double().mean().item()
    assert abs(share - 0.75) < 0.02  # 8,192 draws: 4 standard deviations
    logp = run.batch[:, run.cols[1]]
    expected = torch.where(run.actions.view(-1) == 1, np.log(0.75), np.log(0.25)).float()
    torch.testing.assert_close(logp, expected, rtol=0, atol=1e-6)


def test_smoke_torch_backend_writes_run(ppo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ppo.parse_args(["--total-timesteps", "4096", "--num-envs", "32", "--num-steps", "16",
                           "--quiet", "--seed", "3"])
    summary = ppo.main(args)
    assert summary["global_step"] == 4096
    assert summary["backend"] == "torch" and summary["sps"] > 0
    run_dir = Path(summary["run_dir"])
    assert run_dir.parent.name == "runs"
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    assert len(rows) == 4096 // (32 * 16)
    assert [int(r["global_step"]) for r in rows] == [512 * (i + 1) for i in range(len(rows))]
    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["global_step"] == 4096 and saved["args"]["num_envs"] == 32
    pytest.importorskip("matplotlib")
    assert (run_dir / "curve.png").stat().st_size > 1000


def test_episode_returns_are_cartpole_lengths(ppo):
    """Every finished episode's return is its length (reward 1 per step), between 8 and 500."""
    args = ppo.parse_args(["--total-timesteps", "8192", "--num-envs", "64", "--num-steps", "32",
                           "--quiet", "--no-save", "--return-window", "100000"])
    captured = {}
    original = ppo.deque

    def spy_deque(*a, **k):
        captured["d"] = original(*a, **k)
        return captured["d"]

    ppo.deque = spy_deque
    try:
        ppo.main(args)
    finally:
        ppo.deque = original
    returns = np.array(captured["d"])
    # With random-ish early policies, many short episodes finish in 8192 steps.
    assert len(returns) > 100
    assert (returns == np.round(returns)).all()
    assert returns.min() >= 8 and returns.max() <= 500
    # Every step is counted in exactly one episode or is still running at the end.
    assert returns.sum() <= 8192


def test_same_seed_same_run(ppo):
    argv = ["--total-timesteps", "3072", "--num-envs", "32", "--num-steps", "32", "--quiet", "--no-save"]
    a = ppo.main(ppo.parse_args(argv + ["--seed", "7"]))
    b = ppo.main(ppo.parse_args(argv + ["--seed", "7"]))
    c = ppo.main(ppo.parse_args(argv + ["--seed", "8"]))
    assert a["final_mean_return"] == b["final_mean_return"]
    assert a["final_mean_return"] != c["final_mean_return"]


def test_script_runs_from_the_command_line(tmp_path):
    out = subprocess.run([sys.executable, str(PPO_PATH), "--total-timesteps", "512", "--num-envs", "16",
                          "--num-steps", "32", "--no-save", "--log-every", "0"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={"PYTHONPATH": package_root(), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert "steps        512" in out.stdout and "SPS" in out.stdout and "mean return" in out.stdout


def test_learns_cartpole_to_475(ppo):
    """The default configuration solves CartPole-v1 (mean of the last 100 episodes >= 475).

    The tuned defaults need 160-240k steps on seeds 1-20 (seed 1: 199k; the previous defaults
    needed 340-480k); under 1 s on a quiet 2-core CPU, so it is not marked slow."""
    summary = ppo.main(ppo.parse_args(["--seed", "1", "--target-return", "475", "--quiet", "--no-save",
                                       "--total-timesteps", "1000000"]))
    assert summary["steps_to_target"] is not None, summary
    assert summary["steps_to_target"] <= 300_000, summary
    assert summary["final_mean_return"] >= 475


def test_torch_backend_has_no_per_step_host_sync(ppo):
    """Ops that read device data on the host (or have data-dependent shapes) run a fixed number
    of times per iteration (the logging), never per rollout step."""
    from torch.utils._python_dispatch import TorchDispatchMode

    syncing = ("_local_scalar_dense", "nonzero", "masked_select", "is_nonzero", "index.Tensor", "unique")

    class Spy(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(s in str(func) for s in syncing):
                self.count += 1
            return func(*args, **(kwargs or {}))

    counts = {}
    for T in (8, 32):
        with Spy() as spy:
            ppo.main(ppo.parse_args(["--num-envs", "16", "--num-steps", str(T), "--total-timesteps",
                                     str(16 * T * 3), "--quiet", "--no-save"]))
        counts[T] = spy.count
    assert counts[8] == counts[32] <= 2 * 3


def test_cpu_backend_path_with_gymnasium_sync(ppo, monkeypatch):
    """The numpy-env code path (used by --backend native/fastvec) on gymnasium's SyncVectorEnv.

    Uses fastvec.gae; where this checkout does not have it yet, the float64 reference loop
    above stands in (the kernel's own tests check it against the same loop).
    """
    import fastvec

    calls = []
    real = getattr(fastvec, "gae", None)

    def checked_gae(rewards, values, dones, next_value, next_done, *, gamma, gae_lambda, out=None):
        calls.append(rewards.shape)
        exp_adv, exp_ret = reference_gae(rewards.astype(np.float64), values.astype(np.float64),
                                         dones.astype(np.float64), next_value.astype(np.float64),
                                         next_done.astype(np.float64), gamma, gae_lambda)
        if real is None:
            return exp_adv.astype(np.float32), exp_ret.astype(np.float32)
        adv, ret = real(rewards, values, dones, next_value, next_done, gamma=gamma, gae_lambda=gae_lambda)
        np.testing.assert_allclose(adv, exp_adv, rtol=1e-4, atol=1e-4)
        return adv, ret

    monkeypatch.setattr(fastvec, "gae", checked_gae, raising=False)
    captured = {}
    original = ppo.deque

    def spy_deque(*a, **k):
        captured["d"] = original(*a, **k)
        return captured["d"]

    monkeypatch.setattr(ppo, "deque", spy_deque)
    summary = ppo.main(ppo.parse_args(["--backend", "sync", "--total-timesteps", "4096", "--num-envs", "8",
                                       "--num-steps", "64", "--quiet", "--no-save", "--return-window", "100000"]))
    assert summary["global_step"] == 4096
    assert calls == [(64, 8)] * (1 + 8)  # the warm-up iteration, then 8
    returns = np.array(captured["d"])
    assert len(returns) > 50 and returns.min() >= 8 and returns.max() <= 500
