"""TorchCartPole against gymnasium's CartPole-v1 (the reference it replaces)."""
from __future__ import annotations

import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from fastvec.torch import TorchCartPole  # noqa: E402


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """One torch thread, as examples/ppo.py and the bench use. On this project's 2-core VMs,
    with torch's 2 OpenMP threads, about 1 process in 8 computed torch.cos (float32) on the
    worker thread's half of a 4096-element tensor with errors up to 1.5e-4 (torch 2.13 CPU;
    never with 1 thread, nor with both threads on one core), which failed the float32
    tolerance tests below for reasons that are not TorchCartPole's."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def balancing_actions(obs: np.ndarray, rng: np.random.Generator, eps: float) -> np.ndarray:
    """A controller that keeps most episodes alive to the 500-step limit, with eps-random pushes."""
    greedy = (obs[:, 2] + 0.3 * obs[:, 3] + 0.01 * obs[:, 0] + 0.05 * obs[:, 1] > 0).astype(np.int64)
    explore = rng.random(len(obs)) < eps
    return np.where(explore, rng.integers(0, 2, len(obs)), greedy)


def run_side_by_side(dtype, n_envs: int, n_steps: int, eps: np.ndarray, seed: int, exact: bool = True):
    """Step TorchCartPole and n_envs gymnasium envs from the same states with the same actions.

    After an env finishes, the gymnasium env is reset and given TorchCartPole's new start state
    (the two draw resets from different generators). Yields, per step, the pair of results.
    """
    env = TorchCartPole(n_envs, dtype=dtype, seed=seed, copy=True, exact=exact)
    env.reset(seed=seed)
    refs = [gym.make("CartPole-v1") for _ in range(n_envs)]
    for i, ref in enumerate(refs):
        ref.reset(seed=seed + i)
        ref.unwrapped.state = env.state[i].double().numpy().copy()
    rng = np.random.default_rng(seed)
    obs = env.state.float().numpy()
    for _ in range(n_steps):
        actions = balancing_actions(obs, rng, eps)
        t_obs, t_rew, t_term, t_trunc, info = env.step(torch.from_numpy(actions))
        ref_out = [ref.step(int(a)) for ref, a in zip(refs, actions)]
        yield actions, (t_obs, t_rew, t_term, t_trunc, info), ref_out
        for i, (ref, (_, _, term, trunc, _)) in enumerate(zip(refs, ref_out)):
            if term or trunc:
                ref.reset()
                ref.unwrapped.state = env.state[i].double().numpy().copy()
        obs = t_obs.numpy()


def test_float64_equals_gymnasium_exactly():
    n = 16
    eps = np.linspace(0.0, 0.8, n)  # some envs survive to truncation, some fall early
    n_term = n_trunc = 0
    for _, (t_obs, t_rew, t_term, t_trunc, info), ref_out in run_side_by_side(torch.float64, n, 1300, eps, 3):
        final = info["final_obs"].numpy()
        assert final.dtype == np.float32
        r_obs = np.stack([r[0] for r in ref_out])
        r_term = np.array([r[2] for r in ref_out])
        r_trunc = np.array([r[3] for r in ref_out])
        np.testing.assert_array_equal(final, r_obs)
        np.testing.assert_array_equal(t_rew.numpy(), [r[1] for r in ref_out])
        np.testing.assert_array_equal(t_term.numpy(), r_term)
        np.testing.assert_array_equal(t_trunc.numpy(), r_trunc)
        running = ~(r_term | r_trunc)
        np.testing.assert_array_equal(t_obs.numpy()[running], r_obs[running])
        n_term += int(r_term.sum())
        n_trunc += int(r_trunc.sum())
    # The run must have exercised both ways an episode ends.
    assert n_term > 50 and n_trunc >= 10


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "fast"])
def test_float32_close_to_gymnasium_one_step(exact):
    """From the same (float32-representable) state, one float32 step is within float32 rounding
    (the fast step too: folded constants and fused multiply-adds change only the rounding)."""
    rng = np.random.default_rng(0)
    n = 4096
    state = np.stack([rng.uniform(-2.4, 2.4, n), rng.uniform(-3, 3, n),
                      rng.uniform(-0.21, 0.21, n), rng.uniform(-3, 3, n)], axis=1).astype(np.float32)
    actions = rng.integers(0, 2, n)
    env = TorchCartPole(n, seed=0, exact=exact)
    env.reset()
    env.state = torch.from_numpy(state)
    obs, rew, term, trunc, info = env.step(torch.from_numpy(actions))
    ref = gym.make("CartPole-v1").unwrapped
    ref.reset(seed=0)
    expected = np.empty_like(state)
    expected_term = np.empty(n, dtype=bool)
    for i in range(n):
        ref.state = state[i].astype(np.float64)
        ref.steps_beyond_terminated = None
        o, r, t, _, _ = ref.step(int(actions[i]))
        expected[i], expected_term[i] = o, t
        assert r == 1.0
    final = info["final_obs"].numpy()
    np.testing.assert_allclose(final, expected, rtol=1e-5, atol=1e-6)
    # Termination agrees except within float32 rounding of a threshold.
    near = (np.abs(np.abs(expected[:, 0]) - 2.4) < 1e-5) | (np.abs(np.abs(expected[:, 2]) - 0.2094395) < 1e-5)
    np.testing.assert_array_equal(term.numpy()[~near], expected_term[~near])
    assert expected_term.sum() > 100
    assert not trunc.any()


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "fast"])
def test_float32_trajectories_close_to_gymnasium(exact):
    n = 8
    eps = np.full(n, 0.1)
    steps = 0
    for _, (t_obs, t_rew, t_term, t_trunc, info), ref_out in run_side_by_side(torch.float32, n, 60, eps, 11, exact):
        final = info["final_obs"].numpy()
        for i, (r_obs, r_rew, r_term, r_trunc, _) in enumerate(ref_out):
            np.testing.assert_allclose(final[i], r_obs, rtol=1e-4, atol=1e-5)
            assert float(t_rew[i]) == r_rew and bool(t_trunc[i]) == r_trunc
        steps += 1
    assert steps == 60


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "fast"])
def test_autoreset_same_step_and_truncation_at_500(exact):
    n = 64
    env = TorchCartPole(n, seed=0, copy=True, exact=exact)
    obs, _ = env.reset(seed=1)
    assert obs.shape == (n, 4) and obs.dtype == torch.float32
    assert (obs.abs() <= 0.05).all()
    rng = np.random.default_rng(0)
    eps = np.where(np.arange(n) < n // 2, 0.0, 0.3)
    lengths = np.zeros(n, dtype=np.int64)
    seen_trunc = seen_term = 0
    for _ in range(1100):
        prev_state = env.state.clone()
        actions = balancing_actions(obs.numpy(), rng, eps)
        obs, rew, term, trunc, info = env.step(torch.from_numpy(actions))
        lengths += 1
        done = (term | trunc).numpy()
        np.testing.assert_array_equal(info["_final_obs"].numpy(), done)
        # Unfinished envs: returned obs is the state reached; finished envs: a fresh start state.
        np.testing.assert_array_equal(obs.numpy()[~done], info["final_obs"].numpy()[~done])
        assert (obs[torch.from_numpy(done)].abs() <= 0.05).all()
        np.testing.assert_array_equal(obs.numpy(), env.state.float().numpy())
        # Truncated exactly at 500 steps, never before.
        np.testing.assert_array_equal(trunc.numpy(), lengths >= 500)
        # Terminated exactly when the final state leaves the bounds.
        f = info["final_obs"].double().numpy()
        np.testing.assert_array_equal(term.numpy(), (np.abs(f[:, 0]) > 2.4) | (np.abs(f[:, 2]) > 12 * 2 * np.pi / 360))
        assert (env.elapsed_steps.numpy()[done] == 0).all()
        assert not (prev_state[torch.from_numpy(done)] == env.state[torch.from_numpy(done)]).all(dim=1).any()
        seen_trunc += int(trunc.sum())
        seen_term += int(term.sum())
        lengths[done] = 0
    assert seen_trunc >= 10 and seen_term >= 10


class _SyncSpy(TorchDispatchMode):
    """Records aten ops that read device data on the host or have data-dependent shapes."""

    SYNCING = ("_local_scalar_dense", "nonzero", "masked_select", "item", "is_nonzero", "unique",
               "index.Tensor", "index_put", "masked_scatter")

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []
        self.bad: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        self.ops.append(name)
        if any(s in name for s in self.SYNCING):
            self.bad.append(name)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "fast"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_step_has_no_host_sync_and_reuses_buffers(dtype, exact):
    n = 256
    env = TorchCartPole(n, seed=0, dtype=dtype, copy=False, exact=exact)
    obs0, _ = env.reset()
    actions = torch.randint(0, 2, (n,))
    out0 = env.step(actions)
    with _SyncSpy() as spy:
        for _ in range(30):
            out = env.step(actions)
    assert spy.ops, "the spy saw no ops"
    assert spy.bad == []
    # No loop over envs: the op count per step does not depend on N.
    env_small = TorchCartPole(3, seed=0, dtype=dtype, copy=False, exact=exact)
    env_small.reset()
    small_actions = torch.randint(0, 2, (3,))
    env_small.step(small_actions)
    with _SyncSpy() as spy_small:
        for _ in range(30):
            env_small.step(small_actions)
    assert len(spy_small.ops) == len(spy.ops)
    # copy=False hands back the same preallocated buffers each step.
    for a, b in zip(out0[:4], out[:4]):
        assert a.data_ptr() == b.data_ptr()
    assert obs0.data_ptr() == out[0].data_ptr()
    assert out[4]["final_obs"].data_ptr() == env.final_obs.data_ptr()


def test_fast_step_takes_fewer_ops():
    """exact=False: 24 ops a step (kernel launches on a GPU) instead of 36, with the same results
    to within float32 rounding, and the same episodes from the same start."""
    counts = {}
    for exact in (True, False):
        env = TorchCartPole(64, seed=0, copy=False, exact=exact)
        env.reset(seed=0)
        actions = torch.randint(0, 2, (64,))
        env.step(actions)
        with _SyncSpy() as spy:
            env.step(actions)
        counts[exact] = len(spy.ops)
    assert counts == {True: 36, False: 24}
    # From one start, 30 steps of either agree closely (no termination in between for this policy).
    outs = {}
    for exact in (True, False):
        env = TorchCartPole(64, seed=3, exact=exact)
        obs, _ = env.reset(seed=3)
        for _ in range(30):
            obs, _, term, trunc, _ = env.step((obs[:, 2] + 0.3 * obs[:, 3] > 0).long())
            assert not (term.any() or trunc.any())
        outs[exact] = obs
    torch.testing.assert_close(outs[False], outs[True], rtol=1e-4, atol=1e-5)
    assert "exact=False" in repr(TorchCartPole(2, exact=False)) and "exact" not in repr(TorchCartPole(2))


def test_copy_true_returns_fresh_tensors():
    env = TorchCartPole(4, seed=0)
    obs0, _ = env.reset()
    obs1, *_ = env.step(torch.ones(4, dtype=torch.int64))
    obs2, *_ = env.step(torch.ones(4, dtype=torch.int64))
    assert obs1.data_ptr() != obs2.data_ptr()
    assert not torch.equal(obs1, obs2)


def test_seeding_is_reproducible():
    def rollout(seed, reset_seed):
        env = TorchCartPole(32, seed=seed)
        obs, _ = env.reset(seed=reset_seed)
        gen = torch.Generator().manual_seed(123)
        trace = [obs]
        for _ in range(200):
            obs, rew, term, trunc, _ = env.step(torch.randint(0, 2, (32,), generator=gen))
            trace += [obs, term, trunc]
        return trace

    a, b = rollout(5, None), rollout(5, None)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    c, d = rollout(None, 7), rollout(99, 7)  # reset(seed=) overrides the constructor's seed
    assert all(torch.equal(x, y) for x, y in zip(c, d))
    e = rollout(6, None)
    assert not torch.equal(a[0], e[0])
    # Reseeding on reset reproduces the start states.
    env = TorchCartPole(16, seed=0)
    first, _ = env.reset(seed=42)
    env.step(torch.zeros(16, dtype=torch.int64))
    again, _ = env.reset(seed=42)
    assert torch.equal(first, again)


def test_reset_mask_resets_only_masked_envs():
    env = TorchCartPole(6, seed=0)
    env.reset(seed=0)
    for _ in range(5):
        env.step(torch.ones(6, dtype=torch.int64))
    before = env.state.clone()
    steps_before = env.elapsed_steps.clone()
    mask = torch.tensor([True, False, True, False, False, True])
    obs, info = env.reset(options={"reset_mask": mask})
    assert info == {}
    assert torch.equal(env.state[~mask], before[~mask])
    assert (env.state[mask] != before[mask]).all()
    assert (env.state[mask].abs() <= 0.05).all()
    assert torch.equal(env.elapsed_steps, torch.where(mask, 0, steps_before))
    torch.testing.assert_close(obs, env.state.float(), rtol=0, atol=0)


def test_spaces_match_gymnasium():
    env = TorchCartPole(5)
    ref = gym.make_vec("CartPole-v1", num_envs=5, vectorization_mode="vector_entry_point")
    assert env.single_observation_space == ref.single_observation_space
    assert env.single_action_space == ref.single_action_space
    assert env.observation_space == ref.observation_space
    assert env.action_space == ref.action_space
    assert env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    assert isinstance(env, gym.vector.VectorEnv)
    assert "TorchCartPole(num_envs=5" in repr(env)


def test_numpy_actions_accepted():
    env = TorchCartPole(3, seed=0)
    env.reset(seed=0)
    obs_np, *_ = env.step(np.array([0, 1, 1]))
    env.reset(seed=0)
    obs_t, *_ = env.step(torch.tensor([0, 1, 1], dtype=torch.int32))
    assert torch.equal(obs_np, obs_t)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="num_envs"):
        TorchCartPole(0)
    with pytest.raises(TypeError, match="num_envs"):
        TorchCartPole(2.5)
    with pytest.raises(TypeError, match="dtype"):
        TorchCartPole(2, dtype=torch.float16)
    with pytest.raises(ValueError, match="max_episode_steps"):
        TorchCartPole(2, max_episode_steps=0)
    env = TorchCartPole(4, seed=0)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(torch.zeros(4, dtype=torch.int64))
    env.reset()
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        env.step(torch.zeros(3, dtype=torch.int64))
    with pytest.raises(TypeError, match="integers"):
        env.step(torch.zeros(4))
    with pytest.raises(ValueError, match="reset_mask"):
        env.reset(options={"reset_mask": torch.ones(3, dtype=torch.bool)})
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"low": -0.1})
    with pytest.raises(ValueError, match="state"):
        env.state = torch.zeros(3, 4)


def test_import_fastvec_does_not_import_torch():
    code = "import sys, fastvec; assert 'torch' not in sys.modules, 'torch imported'; print('ok')"
    import fastvec

    root = os.path.dirname(os.path.dirname(os.path.abspath(fastvec.__file__)))
    # From the tests folder with the fastvec under test on the path: a source tree without
    # compiled extensions must not shadow it.
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.abspath(__file__)), env=dict(os.environ, PYTHONPATH=root))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
