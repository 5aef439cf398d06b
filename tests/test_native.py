"""NativeVectorEnv against gymnasium's SyncVectorEnv of the Python envs, bit for bit."""
from __future__ import annotations

import os
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ClosedEnvironmentError, ResetNeeded
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from fastvec import NativeVectorEnv
from fastvec.native import can_run_natively, kit, native_ids
from fastvec.native.envs import cartpole

warnings.filterwarnings("ignore", message=".*CartPole-v0 is out of date.*")

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]
IDS = ["CartPole-v1", "CartPole-v0", "MountainCar-v0", "MountainCarContinuous-v0", "Acrobot-v1",
       "Pendulum-v1"]


def _policy(env_id: str, rng: np.random.Generator, obs: np.ndarray, space: gym.Space,
            p_random: float = 0.3, act_dtype=None) -> np.ndarray:
    """Random actions mixed with a heuristic that makes episodes terminate."""
    n = obs.shape[0]
    rand = rng.random(n) < p_random
    if env_id == "MountainCar-v0":
        a = np.where(obs[:, 1] >= 0, 2, 0)
        a = np.where(rand, rng.integers(0, 3, n), a)
    elif env_id == "Acrobot-v1":
        a = np.where(obs[:, 4] > 0, 0, 2)
        a = np.where(rand, rng.integers(0, 3, n), a)
    elif env_id == "MountainCarContinuous-v0":
        a = np.where(obs[:, 1] >= 0, 1.0, -1.0)[:, None] * rng.uniform(0.5, 1.3, (n, 1))
        a = np.where(rand[:, None], rng.uniform(-1.5, 1.5, (n, 1)), a).astype(np.float32)
    elif env_id == "Pendulum-v1":
        a = rng.uniform(-2.5, 2.5, (n, 1)).astype(np.float32)
    else:
        a = rng.integers(0, 2, n)
    if act_dtype is not None:
        a = a.astype(act_dtype)
    return a


def _sync(env_id, n, mode, **kw):
    return SyncVectorEnv([lambda: gym.make(env_id, **kw) for _ in range(n)], autoreset_mode=mode)


def _assert_same_infos(ref: dict, nat: dict) -> None:
    assert set(ref) == set(nat)
    for key, value in ref.items():
        if isinstance(value, dict):
            _assert_same_infos(value, nat[key])
        elif value.dtype == object:
            assert nat[key].dtype == object
            for a, b in zip(value, nat[key]):
                if a is None:
                    assert b is None
                else:
                    np.testing.assert_array_equal(a, b)
                    assert a.dtype == b.dtype
        else:
            np.testing.assert_array_equal(value, nat[key])
            assert value.dtype == nat[key].dtype


def _rollout(env_id, n, steps, seed, mode, kw=None, act_dtype=None, reset_options=None,
             num_threads=1, threshold=None, exact=True):
    kw = kw or {}
    ref = _sync(env_id, n, mode, **kw)
    nat = NativeVectorEnv(env_id, n, autoreset_mode=mode, num_threads=num_threads, exact=exact, **kw)
    if threshold is not None:
        nat.parallel_threshold = threshold
    o1, i1 = ref.reset(seed=seed, options=reset_options)
    o2, i2 = nat.reset(seed=seed, options=reset_options)
    np.testing.assert_array_equal(o1, o2)
    assert o2.dtype == np.float32 and i2 == {} == i1
    rng = np.random.default_rng(seed)
    counts = {"term": 0, "trunc": 0}
    obs = o1
    for t in range(steps):
        a = _policy(env_id, rng, obs, ref.single_action_space, act_dtype=act_dtype)
        r1 = ref.step(a)
        r2 = nat.step(a)
        for k, name in enumerate(["obs", "reward", "terminated", "truncated"]):
            assert r1[k].dtype == r2[k].dtype, (name, t)
            np.testing.assert_array_equal(r1[k], r2[k], err_msg=f"{env_id} {mode} step {t}: {name}")
        _assert_same_infos(r1[4], r2[4])
        counts["term"] += int(r1[2].sum())
        counts["trunc"] += int(r1[3].sum())
        obs = r1[0]
        if mode == AutoresetMode.DISABLED:
            done = r1[2] | r1[3]
            if done.any():
                o1, _ = ref.reset(options={"reset_mask": done.copy()})
                o2, _ = nat.reset(options={"reset_mask": done.copy()})
                np.testing.assert_array_equal(o1, o2)
                obs = o1
    ref.close()
    nat.close()
    return counts


# ----------------------------------------------------------------------------- RNG

@pytest.mark.parametrize("seed", [0, 1, 42, 2**31 - 1, 123456789012345])
def test_pcg64_stream_matches_numpy(seed):
    bg = np.random.PCG64(np.random.SeedSequence(seed))
    st = bg.state["state"]
    s = np.array([st["state"] & (2**64 - 1), st["state"] >> 64, st["inc"] & (2**64 - 1), st["inc"] >> 64, 0, 0],
                 dtype=np.uint64)
    ours = kit.rng_draws(s, "random", 1000)
    theirs = np.random.Generator(bg).random(1000)
    np.testing.assert_array_equal(ours, theirs)


# ----------------------------------------------------------------------------- parity

@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("env_id", IDS)
def test_parity_with_sync_vector_env(env_id, mode):
    steps = {"Acrobot-v1": 250, "MountainCarContinuous-v0": 350, "CartPole-v1": 300,
             "CartPole-v0": 300}.get(env_id, 450)
    counts = _rollout(env_id, 5, steps, seed=11, mode=mode)
    if env_id != "Pendulum-v1":
        assert counts["term"] > 6, counts  # termination paths exercised
    if env_id in ("MountainCar-v0", "Pendulum-v1", "CartPole-v0"):
        assert counts["trunc"] > 0 or env_id != "Pendulum-v1", counts


@pytest.mark.parametrize("seed", [0, 1234, 99999])
@pytest.mark.parametrize("env_id", ["CartPole-v1", "MountainCar-v0", "Pendulum-v1",
                                    "MountainCarContinuous-v0"])
def test_parity_many_seeds(env_id, seed):
    _rollout(env_id, 4, 250, seed=seed, mode=AutoresetMode.NEXT_STEP)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("env_id", IDS)
def test_parity_long_rollouts(env_id, mode):
    _rollout(env_id, 12, 1200, seed=100, mode=mode)


def test_parity_mountaincar_truncates():
    # a policy that never reaches the goal: every episode ends by truncation at 200
    ref = _sync("MountainCar-v0", 3, AutoresetMode.NEXT_STEP)
    nat = NativeVectorEnv("MountainCar-v0", 3)
    np.testing.assert_array_equal(ref.reset(seed=5)[0], nat.reset(seed=5)[0])
    ntrunc = 0
    for t in range(450):
        a = np.full(3, 1)
        r1, r2 = ref.step(a), nat.step(a)
        for k in range(4):
            np.testing.assert_array_equal(r1[k], r2[k])
        ntrunc += r1[3].sum()
    assert ntrunc == 6


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "Acrobot-v1"])
def test_max_episode_steps_override(env_id):
    ref = SyncVectorEnv([lambda: gym.make(env_id, max_episode_steps=7) for _ in range(3)])
    nat = NativeVectorEnv(env_id, 3, max_episode_steps=7)
    np.testing.assert_array_equal(ref.reset(seed=1)[0], nat.reset(seed=1)[0])
    rng = np.random.default_rng(0)
    ntrunc = 0
    for _ in range(40):
        a = _policy(env_id, rng, np.zeros((3, 6), np.float32), ref.single_action_space)
        r1, r2 = ref.step(a), nat.step(a)
        for k in range(4):
            np.testing.assert_array_equal(r1[k], r2[k])
        ntrunc += int(r1[3].sum())
    assert ntrunc > 0
    assert nat.spec.max_episode_steps == 7


@pytest.mark.parametrize("env_id,kw", [
    ("CartPole-v1", {"sutton_barto_reward": True}),
    ("CartPole-v0", {"sutton_barto_reward": True}),
    ("Pendulum-v1", {"g": 9.81}),
    ("Pendulum-v1", {"g": 3}),
    ("MountainCar-v0", {"goal_velocity": 0.005}),
    ("MountainCarContinuous-v0", {"goal_velocity": 0.004}),
])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.name)
def test_parity_env_kwargs(env_id, kw, mode):
    _rollout(env_id, 4, 250, seed=3, mode=mode, kw=kw)


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "MountainCarContinuous-v0"])
@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_parity_continuous_action_dtypes(env_id, dtype):
    # float64 actions make gymnasium compute in float64 where float32 actions keep
    # float32 NumPy scalars; both paths (and out-of-bound actions, clipped) must match
    _rollout(env_id, 4, 220, seed=8, mode=AutoresetMode.NEXT_STEP, act_dtype=dtype)


@pytest.mark.parametrize("env_id,dtype", [("Pendulum-v1", ">f4"), ("Pendulum-v1", ">f8"),
                                          ("MountainCarContinuous-v0", ">f4"), ("CartPole-v1", ">i8"),
                                          ("Acrobot-v1", ">i4")])
def test_parity_byte_swapped_actions(env_id, dtype):
    """Actions in the other byte order are the same values: read as such, bit for bit as
    Gymnasium's envs take them (they were read as this machine's bytes)."""
    _rollout(env_id, 3, 120, seed=9, mode=AutoresetMode.NEXT_STEP, act_dtype=np.dtype(dtype))


@pytest.mark.parametrize("env_id,options", [
    ("Pendulum-v1", {"x_init": 1e308}), ("Pendulum-v1", {"y_init": np.inf}), ("Pendulum-v1", {"x_init": np.nan}),
    ("CartPole-v1", {"low": -1e308, "high": 1e308}), ("MountainCar-v0", {"low": -np.inf}),
    ("Acrobot-v1", {"high": np.nan}),
])
def test_reset_bounds_that_are_not_finite_raise_as_gymnasium(env_id, options):
    """Reset bounds whose range is not finite raise OverflowError, as Gymnasium's env does
    (it gave NaN or inf states)."""
    with pytest.raises(OverflowError) as gym_error:
        gym.make(env_id).reset(seed=0, options=options)
    nat = NativeVectorEnv(env_id, 2)
    with pytest.raises(OverflowError, match=str(gym_error.value)):
        nat.reset(seed=0, options=options)
    nat.close()


@pytest.mark.parametrize("env_id,options", [
    ("CartPole-v1", {"low": -0.2, "high": 0.15}),
    ("Acrobot-v1", {"low": -1.0, "high": 2.5}),
    ("MountainCar-v0", {"low": -1.0, "high": 0.3}),
    ("MountainCarContinuous-v0", {"high": -0.45}),
    ("Pendulum-v1", {"x_init": 0.5}),
    ("Pendulum-v1", {"x_init": 2.0, "y_init": 5.0}),
])
def test_parity_reset_options(env_id, options):
    _rollout(env_id, 3, 150, seed=21, mode=AutoresetMode.NEXT_STEP, reset_options=options)


@pytest.mark.parametrize("env_id", IDS)
def test_reset_seed_list_and_unseeded_continuation(env_id):
    n = 4
    ref = _sync(env_id, n, AutoresetMode.NEXT_STEP)
    nat = NativeVectorEnv(env_id, n)
    seeds = [3, 100, 7, 2**40]
    np.testing.assert_array_equal(ref.reset(seed=seeds)[0], nat.reset(seed=seeds)[0])
    # seed=None continues each env's stream, as gymnasium's Env.reset does
    for _ in range(3):
        np.testing.assert_array_equal(ref.reset()[0], nat.reset()[0])
    # a partial seed list: env 1 and 3 keep their streams
    mixed = [5, None, 6, None]
    np.testing.assert_array_equal(ref.reset(seed=mixed)[0], nat.reset(seed=mixed)[0])
    assert nat.np_random_seed == (5, 100, 6, 2**40)


def test_unseeded_reset_draws_entropy():
    a = NativeVectorEnv("CartPole-v1", 64)
    b = NativeVectorEnv("CartPole-v1", 64)
    oa, _ = a.reset()
    ob, _ = b.reset()
    assert not np.array_equal(oa, ob)
    assert len(np.unique(oa[:, 0])) == 64
    assert np.all(np.abs(oa) <= 0.05)


def test_reset_mask_only_resets_masked_envs():
    ref = _sync("CartPole-v1", 4, AutoresetMode.DISABLED)
    nat = NativeVectorEnv("CartPole-v1", 4, autoreset_mode=AutoresetMode.DISABLED)
    ref.reset(seed=0)
    nat.reset(seed=0)
    a = np.array([0, 1, 1, 0])
    for _ in range(5):
        ref.step(a)
        nat.step(a)
    mask = np.array([True, False, True, False])
    options = {"reset_mask": mask, "low": -0.01, "high": 0.01}
    o1, _ = ref.reset(seed=[9, None, 10, None], options=dict(options))
    o2, _ = nat.reset(seed=[9, None, 10, None], options=dict(options))
    np.testing.assert_array_equal(o1, o2)
    r1, r2 = ref.step(a), nat.step(a)
    for k in range(4):
        np.testing.assert_array_equal(r1[k], r2[k])


# ----------------------------------------------------------------------------- threads, fast mode

@pytest.mark.parametrize("env_id", IDS)
def test_threads_do_not_change_results(env_id):
    n = 37
    outs = []
    for threads in (1, 2, 3):
        env = NativeVectorEnv(env_id, n, num_threads=threads, autoreset_mode=AutoresetMode.SAME_STEP)
        env.parallel_threshold = 1  # force the threaded path even for a small batch
        obs, _ = env.reset(seed=4)
        rng = np.random.default_rng(0)
        trace = [obs]
        for _ in range(300):
            a = _policy(env_id, rng, obs, env.single_action_space)
            obs, r, te, tr, info = env.step(a)
            trace += [obs, r, te, tr]
        outs.append(trace)
    for other in outs[1:]:
        for x, y in zip(outs[0], other):
            np.testing.assert_array_equal(x, y)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_threads_after_fork():
    env = NativeVectorEnv("CartPole-v1", 64, num_threads=2, copy=False)
    env.parallel_threshold = 1
    env.reset(seed=0)
    a = np.ones(64, dtype=np.int64)
    env.step(a)  # starts the helper thread
    expected = [env.step(a)[0].copy() for _ in range(2)]
    env.reset(seed=0)
    env.step(a)
    pid = os.fork()
    if pid == 0:  # child: no helper thread exists here; the pool must be rebuilt, not waited on
        ok = all(np.array_equal(env.step(a)[0], e) for e in expected)
        del env
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_threaded_rollout_matches_gymnasium():
    _rollout("CartPole-v1", 20, 200, seed=2, mode=AutoresetMode.NEXT_STEP, num_threads=2, threshold=1)
    _rollout("Acrobot-v1", 5, 120, seed=2, mode=AutoresetMode.SAME_STEP, num_threads=2, threshold=1)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_fast_mode_close_to_exact(mode):
    _check_fast_close_to_exact(mode)


@pytest.mark.parametrize("isa", cartpole.fast_isas())
def test_fast_mode_close_to_exact_on_every_isa(isa):
    # the fast kernel is dispatched on the CPU's features; check every variant
    # this machine can run, the baseline one included
    prev = cartpole._set_fast_isa(isa)
    try:
        assert cartpole.fast_isa() == isa
        for mode in MODES:
            _check_fast_close_to_exact(mode)
    finally:
        cartpole._set_fast_isa(prev)


def test_fast_isa_names():
    assert cartpole.fast_isas()[0] == "default"
    assert cartpole.fast_isa() == cartpole.fast_isas()[-1]  # the best one by default
    with pytest.raises(ValueError):
        cartpole._set_fast_isa("sse9")


def _check_fast_close_to_exact(mode):
    n = 512
    exact = NativeVectorEnv("CartPole-v1", n, autoreset_mode=mode, num_threads=1)
    fast = NativeVectorEnv("CartPole-v1", n, autoreset_mode=mode, exact=False, num_threads=2)
    fast.parallel_threshold = 1
    o1, _ = exact.reset(seed=1)
    o2, _ = fast.reset(seed=1)
    np.testing.assert_array_equal(o1, o2)
    rng = np.random.default_rng(1)
    worst = 0.0
    same_state = True
    for _ in range(1000):
        a = rng.integers(0, 2, n)
        r1, r2 = exact.step(a), fast.step(a)
        worst = max(worst, float(np.abs(r1[0] - r2[0]).max()))
        same_state &= np.array_equal(exact._state, fast._state)
        for k in (1, 2, 3):
            np.testing.assert_array_equal(r1[k], r2[k])
        if mode == AutoresetMode.DISABLED:
            done = r1[2] | r1[3]
            if done.any():
                exact.reset(options={"reset_mask": done.copy()})
                fast.reset(options={"reset_mask": done.copy()})
    assert worst <= 1e-5, worst
    assert not same_state  # it really is the other code path (float64 states differ in the last bits)


def test_fast_mode_falls_back_to_exact_for_large_angles():
    # reset bounds beyond pi/4: the polynomial sin/cos would be wrong, the kernel takes the exact path
    exact = NativeVectorEnv("CartPole-v1", 8)
    fast = NativeVectorEnv("CartPole-v1", 8, exact=False)
    opts = {"low": -2.0, "high": 2.0}
    np.testing.assert_array_equal(exact.reset(seed=0, options=opts)[0], fast.reset(seed=0, options=opts)[0])
    a = np.ones(8, dtype=np.int64)
    np.testing.assert_array_equal(exact.step(a)[0], fast.step(a)[0])


# ----------------------------------------------------------------------------- errors & API

def test_bad_actions_rejected_and_state_kept():
    env = NativeVectorEnv("CartPole-v1", 3)
    obs, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action 2 of env 1 is not in Discrete\(2\)"):
        env.step(np.array([0, 2, 1]))
    with pytest.raises(ValueError, match="not in Discrete"):
        env.step(np.array([0, -1, 1]))
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        env.step(np.array([0, 1]))
    with pytest.raises(TypeError, match="integer array"):
        env.step(np.array([0.0, 1.0, 1.0]))
    with pytest.raises(TypeError, match="integer array"):
        env.step(np.array([True, False, True]))
    # nothing was stepped by the failed calls
    ref = _sync("CartPole-v1", 3, AutoresetMode.NEXT_STEP)
    ref.reset(seed=0)
    np.testing.assert_array_equal(env.step([1, 0, 1])[0], ref.step(np.array([1, 0, 1]))[0])
    # other integer dtypes are accepted
    np.testing.assert_array_equal(env.step(np.array([1, 1, 0], dtype=np.int8))[0],
                                  ref.step(np.array([1, 1, 0]))[0])

    cont = NativeVectorEnv("Pendulum-v1", 2)
    cont.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(2, 1\)"):
        cont.step(np.zeros(2, dtype=np.float32))
    with pytest.raises(ValueError, match="NaN"):
        cont.step(np.array([[0.0], [np.nan]], dtype=np.float32))
    with pytest.raises(TypeError, match="float array"):
        cont.step(np.array([["a"], ["b"]]))


def test_step_before_reset_and_disabled_mode_misuse():
    env = NativeVectorEnv("CartPole-v1", 2, autoreset_mode=AutoresetMode.DISABLED)
    with pytest.raises(ResetNeeded):
        env.step(np.array([0, 1]))
    env.reset(seed=0)
    a = np.array([1, 1])
    for _ in range(200):
        _, _, te, tr, _ = env.step(a)
        if (te | tr).any():
            break
    with pytest.raises(ValueError, match="reset_mask"):
        env.step(a)
    env.reset(options={"reset_mask": te | tr})
    env.step(a)


@pytest.mark.parametrize("render_mode", [None, "rgb_array"])
def test_a_closed_env_refuses_every_call_and_closes_once(render_mode):
    env = NativeVectorEnv("CartPole-v1", 2, render_mode=render_mode)
    env.reset(seed=0)
    env.step(np.array([0, 1]))
    env.close()
    assert env.closed
    calls = {"step": lambda: env.step(np.array([0, 1])), "reset": lambda: env.reset(seed=0),
             "call": lambda: env.call("gravity"), "get_attr": lambda: env.get_attr("gravity"),
             "set_attr": lambda: env.set_attr("gravity", 1.0), "render": env.render}
    for call in calls.values():
        with pytest.raises(ClosedEnvironmentError, match="NativeVectorEnv.*close"):
            call()
    env.close()  # (again: nothing)
    assert env.closed
    with pytest.raises(ClosedEnvironmentError):  # (closed before its first reset too)
        never_reset = NativeVectorEnv("CartPole-v1", 2)
        never_reset.close()
        never_reset.step(np.array([0, 1]))


def test_constructor_errors():
    with pytest.raises(ValueError, match="no native implementation"):
        NativeVectorEnv("LunarLander-v3", 2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'gravity'"):
        NativeVectorEnv("Pendulum-v1", 2, gravity=3.0)
    with pytest.raises(TypeError, match="not supported"):
        NativeVectorEnv("Pendulum-v1", 2, g=np.float32(3.0))
    with pytest.raises(ValueError, match="render_mode"):
        NativeVectorEnv("CartPole-v1", 2, render_mode="human")
    with pytest.raises(ValueError, match="num_envs"):
        NativeVectorEnv("CartPole-v1", 0)
    env = NativeVectorEnv("CartPole-v1", 2)
    with pytest.raises(ValueError, match="non-negative"):
        env.reset(seed=-1)
    with pytest.raises(ValueError, match="length must match"):
        env.reset(seed=[1, 2, 3])
    with pytest.raises(TypeError, match="reset_mask"):
        env.reset(options={"reset_mask": [True, False]})
    with pytest.raises(ValueError, match="Lower bound"):
        env.reset(options={"low": 1.0, "high": 0.0})


def test_can_run_natively():
    for env_id in IDS:
        assert can_run_natively(env_id, {}, None)
        assert can_run_natively(env_id, {}, "rgb_array")
        assert not can_run_natively(env_id, {}, "human")
        assert not can_run_natively(env_id, {"bogus": 1}, None)
    assert set(native_ids()) == set(IDS)
    assert can_run_natively("CartPole-v1", {"sutton_barto_reward": True}, None)
    assert can_run_natively("Pendulum-v1", {"g": 9.81}, None)
    assert not can_run_natively("Pendulum-v1", {"g": np.float32(9.81)}, None)
    assert not can_run_natively("CartPole-v2", {}, None)
    assert not can_run_natively("LunarLander-v3", {}, None)


def test_spaces_metadata_spec_and_copy_semantics():
    ref = gym.make_vec("Pendulum-v1", 3, vectorization_mode="sync")
    env = NativeVectorEnv("Pendulum-v1", 3, autoreset_mode="SameStep")
    assert env.single_observation_space == ref.single_observation_space
    assert env.single_action_space == ref.single_action_space
    assert env.observation_space == ref.observation_space
    assert env.action_space == ref.action_space
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert env.spec.id == "Pendulum-v1" and env.spec.max_episode_steps == 200
    assert isinstance(env, gym.vector.VectorEnv)
    o1, _ = env.reset(seed=0)
    a = env.action_space.sample()
    o2, r, *_ = env.step(a)
    o3, r3, *_ = env.step(a)
    assert o2 is not o3 and not np.shares_memory(o2, o3)
    shared = NativeVectorEnv("Pendulum-v1", 3, copy=False)
    p1, _ = shared.reset(seed=0)
    p2, *_ = shared.step(a)
    assert p1 is p2  # documented: copy=False returns the env's own buffers


@pytest.mark.parametrize("env_id", IDS)
def test_render_rgb_array_matches_gymnasium(env_id):
    n = 2
    ref = SyncVectorEnv([lambda: gym.make(env_id, render_mode="rgb_array") for _ in range(n)])
    env = NativeVectorEnv(env_id, n, render_mode="rgb_array")
    ref.reset(seed=3)
    env.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(5):
        a = _policy(env_id, rng, np.zeros((n, env.single_observation_space.shape[0]), np.float32),
                    env.single_action_space)
        ref.step(a)
        env.step(a)
    frames_ref = ref.render()
    frames = env.render()
    assert len(frames) == n
    for f1, f2 in zip(frames_ref, frames):
        assert f1.shape == f2.shape and f1.dtype == f2.dtype
        np.testing.assert_array_equal(f1, f2)
    env.close()
    ref.close()
    assert NativeVectorEnv("CartPole-v1", 1).render() is None  # no render_mode: warns, returns None


def test_get_attr_call_and_set_attr():
    import gymnasium as gym

    env = NativeVectorEnv("CartPole-v1", 3)
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(3)])
    env.reset(seed=4)
    ref.reset(seed=4)
    for _ in range(5):
        a = np.array([0, 1, 1])
        env.step(a)
        ref.step(a)
    for name in ("gravity", "masscart", "x_threshold", "render_mode"):
        assert env.get_attr(name) == ref.get_attr(name)
    for mine, theirs in zip(env.get_attr("state"), ref.get_attr("state")):
        np.testing.assert_array_equal(mine, theirs)
    with pytest.raises(AttributeError):
        env.get_attr("no_such_attribute")
    with pytest.raises(NotImplementedError, match="compiled"):
        env.call("step", 0)
    with pytest.raises(NotImplementedError, match="native"):
        env.get_attr("steps_beyond_terminated")
    with pytest.raises(NotImplementedError, match="fixed at construction"):
        env.set_attr("gravity", 1.0)
    with pytest.raises(NotImplementedError, match="native"):
        env.get_attr("unwrapped")  # (one Python env stands for all: not any env's own)
    env.close()


@pytest.mark.parametrize("kwargs", [{}, {"max_episode_steps": 50}, {"render_mode": "rgb_array"}])
def test_get_attr_spec_is_each_envs_spec_as_gymnasium_make_gives_it(kwargs):
    """``get_attr("spec")``: what ``gym.make(env_id, **kwargs).spec`` is, for every env (as in
    SyncVectorEnv), not ``None``."""
    import gymnasium as gym

    env = NativeVectorEnv("CartPole-v1", 2, **kwargs)
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1", **kwargs) for _ in range(2)])
    try:
        specs = env.get_attr("spec")
        assert len(specs) == 2 and specs[0] is not specs[1]
        assert specs == ref.get_attr("spec")
    finally:
        env.close()
        ref.close()


def test_call_answers_the_methods_that_only_read():
    """``call`` runs render, get_wrapper_attr, has_wrapper_attr and __str__ / __repr__ (what SB3's
    env_method / env_is_wrapped and Gymnasium's generic code ask of every env); other methods
    raise NotImplementedError naming the ones it calls."""
    env = NativeVectorEnv("CartPole-v1", 3)
    ref = SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(3)])
    try:
        assert env.backend_reason is None  # (built directly, not by make_vec)
        assert env.env_wrappers == (gym.wrappers.TimeLimit, gym.wrappers.OrderEnforcing)
        assert env.call("__str__") == ("<TimeLimit<OrderEnforcing<CartPoleEnv<CartPole-v1>>>>",) * 3
        assert env.call("__repr__") == env.call("__str__")
        assert env.call("get_wrapper_attr", "gravity") == ref.call("get_wrapper_attr", "gravity")
        assert env.call("get_wrapper_attr", "render_mode") == (None,) * 3
        assert env.call("has_wrapper_attr", "gravity") == (True,) * 3
        assert env.call("has_wrapper_attr", "no_such_attribute") == (False,) * 3
        assert env.call("has_wrapper_attr", "render") == (True,) * 3
        assert env.call("has_wrapper_attr", "step") == (True,) * 3  # exists, though not callable here
        with pytest.raises(AttributeError):
            env.call("get_wrapper_attr", "no_such_attribute")
        with pytest.raises(NotImplementedError, match="call it with call"):
            env.call("get_wrapper_attr", "render")
        with pytest.raises(TypeError, match="one argument"):
            env.call("get_wrapper_attr")
        with pytest.raises(TypeError, match="no arguments"):
            env.call("__str__", 1)
        with pytest.raises(NotImplementedError, match="calls only render, get_wrapper_attr"):
            env.call("reset")
        env.reset(seed=0)
        with pytest.warns(UserWarning, match="render_mode"):
            assert env.call("render") == (None,) * 3  # (as SyncVectorEnv: one None per env)
    finally:
        env.close()
        ref.close()
    # With a render mode, call('render') gives one frame per env.
    env = NativeVectorEnv("CartPole-v1", 2, render_mode="rgb_array")
    try:
        env.reset(seed=1)
        frames = env.call("render")
        assert len(frames) == 2 and frames[0].shape[-1] == 3
    finally:
        env.close()
