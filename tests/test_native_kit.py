"""The native-env kit: its random streams against NumPy's, the example env
(examples/native_env, installed as fastvec.native.examples.gridworld) against its plain-Python
reference bit for bit, the registry's defaults, the build of the example by its own setup.py
against this fastvec (needs Cython and a C compiler, as a user's build does), and the docs'
examples."""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import fastvec
from fastvec import NativeVectorEnv
from fastvec.native import NativeEnvSpec, can_run_natively, kit, register, registry

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]
EXAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "native_env")
ENV_ID = "GridWorld-v0"


@pytest.fixture(autouse=True)
def gridworld():
    """The example package, its ids registered; each test leaves fastvec's and Gymnasium's
    registries as it found them (the package is imported here, not at collection, so that
    other test files see only fastvec's own native ids)."""
    native, gyms = dict(registry.NATIVE_SPECS), dict(gym.registry)
    module = importlib.import_module("fastvec.native.examples.gridworld")
    if ENV_ID not in registry.NATIVE_SPECS:
        module.register_envs()
    yield module
    registry.NATIVE_SPECS.clear()
    registry.NATIVE_SPECS.update(native)
    gym.registry.clear()
    gym.registry.update(gyms)


# ----------------------------------------------------------------------------- random streams

def _words(bit_generator: np.random.PCG64) -> np.ndarray:
    st = bit_generator.state
    return np.array([st["state"]["state"] & (2**64 - 1), st["state"]["state"] >> 64,
                     st["state"]["inc"] & (2**64 - 1), st["state"]["inc"] >> 64,
                     st["has_uint32"], st["uinteger"]], dtype=np.uint64)


@pytest.mark.parametrize("low,high", [
    (0, 1), (0, 2), (0, 5), (-3, 4), (0, 7), (10, 1000), (0, 2**31), (0, 2**32 - 1), (0, 2**32),
    (0, 3 * 2**30 + 1), (0, 2**32 + 1), (-2**40, 2**40), (0, 3 * 2**61 + 5), (-2**63, 2**63 - 1), (-2**63, 0),
])
@pytest.mark.parametrize("seed", [0, 7, 2**40 + 3])
def test_integers_equal_numpy(seed, low, high):
    # np_random.integers(low, high) one at a time, as an env's reset draws, then with size=:
    # the same values, and the streams (the 32-bit half kept between calls included) end equal
    ref = np.random.Generator(np.random.PCG64(seed))
    words = _words(np.random.PCG64(seed))
    ours = kit.rng_draws(words, "integers", 300, low, high)
    theirs = [ref.integers(low, high) for _ in range(150)] + list(ref.integers(low, high, size=150))
    np.testing.assert_array_equal(ours, np.array(theirs, dtype=np.int64))
    np.testing.assert_array_equal(words, _words(ref.bit_generator))


def test_interleaved_draws_keep_numpys_stream():
    ref = np.random.Generator(np.random.PCG64(3))
    words = _words(np.random.PCG64(3))
    for k in range(50):
        np.testing.assert_array_equal(kit.rng_draws(words, "integers", k % 3 + 1, 0, 9),
                                      ref.integers(0, 9, size=k % 3 + 1))
        np.testing.assert_array_equal(kit.rng_draws(words, "random", 1), ref.random(1))
    np.testing.assert_array_equal(words, _words(ref.bit_generator))
    with pytest.raises(ValueError):
        kit.rng_draws(words[:4].copy(), "random", 1)


# ----------------------------------------------------------------------------- the example env

def _policy(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 4, n)


def _rollout(n, steps, seed, mode, kw=None, num_threads=1, threshold=None, reset_options=None):
    kw = kw or {}
    ref = SyncVectorEnv([lambda: gym.make(ENV_ID, **kw) for _ in range(n)], autoreset_mode=mode)
    nat = NativeVectorEnv(ENV_ID, n, autoreset_mode=mode, num_threads=num_threads, **kw)
    if threshold is not None:
        nat.parallel_threshold = threshold
    o1, _ = ref.reset(seed=seed, options=reset_options)
    o2, _ = nat.reset(seed=seed, options=reset_options)
    np.testing.assert_array_equal(o1, o2)
    assert o2.dtype == np.uint8
    rng = np.random.default_rng(seed)
    ends = {"goal": 0, "pit": 0, "trunc": 0}
    for t in range(steps):
        a = _policy(rng, n)
        r1, r2 = ref.step(a), nat.step(a)
        for k, name in enumerate(["obs", "reward", "terminated", "truncated"]):
            assert r1[k].dtype == r2[k].dtype, (name, t)
            np.testing.assert_array_equal(r1[k], r2[k], err_msg=f"{mode} step {t}: {name}")
        assert set(r1[4]) == set(r2[4])
        if "final_obs" in r1[4]:
            np.testing.assert_array_equal(r1[4]["_final_obs"], r2[4]["_final_obs"])
            for x, y in zip(r1[4]["final_obs"], r2[4]["final_obs"]):
                assert (x is None and y is None) or np.array_equal(x, y)
        ends["goal"] += int((r1[1] > 0).sum())
        ends["pit"] += int((r1[2] & (r1[1] < -0.5)).sum())
        ends["trunc"] += int(r1[3].sum())
        if mode == AutoresetMode.DISABLED:
            done = r1[2] | r1[3]
            if done.any():
                np.testing.assert_array_equal(ref.reset(options={"reset_mask": done.copy()})[0],
                                              nat.reset(options={"reset_mask": done.copy()})[0])
    ref.close()
    nat.close()
    return ends


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("seed", [0, 5])
def test_example_equals_its_python_reference(mode, seed):
    ends = _rollout(6, 300, seed, mode)
    assert ends["goal"] > 5 and ends["pit"] > 5 and ends["trunc"] > 0, ends  # every way an episode ends


@pytest.mark.parametrize("kw", [{"size": 2}, {"size": 9, "step_reward": -0.25}, {"goal_reward": 3}])
def test_example_kwargs(kw):
    _rollout(4, 150, 1, AutoresetMode.SAME_STEP, kw=kw)


def test_example_on_threads_and_seed_lists():
    _rollout(70, 120, 2, AutoresetMode.NEXT_STEP, num_threads=2, threshold=1)
    ref = SyncVectorEnv([lambda: gym.make(ENV_ID) for _ in range(3)])
    nat = NativeVectorEnv(ENV_ID, 3)
    np.testing.assert_array_equal(ref.reset(seed=[4, 5, 9])[0], nat.reset(seed=[4, 5, 9])[0])
    np.testing.assert_array_equal(ref.reset(seed=[None, 8, None])[0], nat.reset(seed=[None, 8, None])[0])
    np.testing.assert_array_equal(ref.reset()[0], nat.reset()[0])  # the streams go on


def test_example_disabled_mode_refuses_finished_envs():
    envs = NativeVectorEnv(ENV_ID, 2, autoreset_mode=AutoresetMode.DISABLED)
    envs.reset(seed=0)
    for _ in range(60):
        _, _, te, tr, _ = envs.step(np.array([0, 1]))
        if (te | tr).any():
            break
    with pytest.raises(ValueError, match="reset_mask"):
        envs.step(np.array([0, 1]))
    envs.reset(options={"reset_mask": te | tr})
    envs.step(np.array([0, 1]))


def test_example_through_make_vec_and_errors():
    envs = gym.make_vec(ENV_ID, 3, vectorization_mode="fastvec", size=6)
    assert isinstance(envs, NativeVectorEnv)
    assert envs.single_observation_space.shape == (6, 6)
    assert envs.get_attr("size") == (6, 6, 6)
    envs.reset(seed=0)
    assert envs.get_attr("goal_x") == tuple(int(x) for x in envs._fields["goal_x"])  # state fields, per env
    with pytest.raises(ValueError, match=r"action 4 of env 2 is not in Discrete\(4\)"):
        envs.step(np.array([0, 1, 4]))
    with pytest.raises(TypeError, match="integer array"):
        envs.step(np.zeros(3))
    with pytest.raises(TypeError, match="unexpected keyword argument 'walls'"):
        NativeVectorEnv(ENV_ID, 2, walls=3)
    with pytest.raises(TypeError, match="not supported"):
        NativeVectorEnv(ENV_ID, 2, size=np.int64(4))
    assert not can_run_natively(ENV_ID, {"size": np.int64(4)}, None)
    with pytest.raises(NotImplementedError, match="compiled"):
        envs.call("reset")


def test_spec_without_a_python_env(gridworld):
    GridWorldEnv, _kernel = gridworld.GridWorldEnv, gridworld._kernel
    # a compiled env alone: spaces from the spec, parameters from its mapping and the kwargs
    register(NativeEnvSpec(
        "test/GridWorldAlone-v0", _kernel.KERNEL,
        params={"size": 4, "step_reward": 0.0, "goal_reward": 1.0, "pit_reward": -1.0},
        observation_space=lambda p: gym.spaces.Box(0, 3, (p["size"], p["size"]), np.uint8),
        action_space=gym.spaces.Discrete(4), max_episode_steps=10))
    envs = NativeVectorEnv("test/GridWorldAlone-v0", 2, size=3)
    ref = SyncVectorEnv([lambda: gym.wrappers.TimeLimit(GridWorldEnv(size=3, step_reward=0.0), 10)] * 2)
    np.testing.assert_array_equal(envs.reset(seed=1)[0], ref.reset(seed=1)[0])
    for t in range(30):
        a = np.array([t % 4, (t + 1) % 4])
        for x, y in zip(envs.step(a)[:4], ref.step(a)[:4]):
            np.testing.assert_array_equal(x, y)
    assert envs.get_attr("step_reward") == (0.0, 0.0)
    assert envs.spec is None and envs.metadata == {"autoreset_mode": AutoresetMode.NEXT_STEP}
    assert not can_run_natively("test/GridWorldAlone-v0", {}, "rgb_array")  # nothing to draw with
    with pytest.raises(ValueError, match="no Python env to render with"):
        NativeVectorEnv("test/GridWorldAlone-v0", 2, render_mode="rgb_array")


def test_kernels_are_checked(gridworld):
    GridWorldEnv, _kernel = gridworld.GridWorldEnv, gridworld._kernel
    with pytest.raises(TypeError, match="compiled env"):
        NativeEnvSpec("x-v0", object())
    info = kit.kernel_info(_kernel.KERNEL)
    assert info["name"] == "gridworld" and info["layout"] is kit.fv_layout.FV_AOS
    assert [name for name, _, _ in info["params"]] == ["size", "step_reward", "goal_reward", "pit_reward"]
    assert info["state_size"] == 6 * 8 and info["obs_dtype"] == np.uint8
    register(NativeEnvSpec("test/GridWorldNoSize-v0", _kernel.KERNEL, params={"step_reward": 0.0},
                           observation_space=gym.spaces.Box(0, 3, (5, 5), np.uint8),
                           action_space=gym.spaces.Discrete(4)))
    with pytest.raises(ValueError, match=r"no value for the parameters \['goal_reward', 'pit_reward', 'size'\]"):
        NativeVectorEnv("test/GridWorldNoSize-v0", 2)
    register(NativeEnvSpec("test/GridWorldFloatObs-v0", _kernel.KERNEL, reference=GridWorldEnv,
                           observation_space=gym.spaces.Box(0, 3, (5, 5), np.float32)))
    with pytest.raises(TypeError, match="writes uint8 observations"):
        NativeVectorEnv("test/GridWorldFloatObs-v0", 2)
    register(NativeEnvSpec("test/GridWorldBox-v0", _kernel.KERNEL, reference=GridWorldEnv,
                           action_space=gym.spaces.Box(-1, 1, (2,))))
    with pytest.raises(TypeError, match="takes FV_DISCRETE actions"):
        NativeVectorEnv("test/GridWorldBox-v0", 2)


def test_platform_paths_are_the_ones_built():
    """fv_platform.h: a GCC/Clang build takes the native paths (no futex on macOS); MSVC and a
    build with FASTVEC_PORTABLE=1 the portable ones. The variable is set for the build and for
    the tests (as .ci/wheel does), so this checks that the portable build really is."""
    portable = {"multiply": "64-bit halves", "atomics": "c11", "threads": "c11", "wait": "nap"}
    if os.environ.get("FASTVEC_PORTABLE") == "1" or sys.platform == "win32":
        expected = portable
    else:
        expected = {"multiply": "int128", "atomics": "gnu", "threads": "pthreads",
                    "wait": "futex" if sys.platform.startswith("linux") else "nap"}
    assert kit.platform_paths() == expected


def test_get_include_ships_the_headers():
    include = fastvec.get_include()
    for name in ("fv_env.h", "fv_rng.h", "fv_runner.h", "fv_platform.h", "kit.pxd"):
        assert os.path.isfile(os.path.join(include, name)), name
    assert fastvec.native.get_include() == include


def test_example_builds_with_its_own_setup_py(tmp_path):
    """What a user does: copy examples/native_env, build it against this fastvec, use it."""
    pytest.importorskip("Cython", reason="building an env needs Cython (in the test extra)")
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(os.environ.get("CC", compiler).split()[0]) is None:
        pytest.skip(f"building an env needs a C compiler; {compiler!r} is not on PATH "
                    "(.ci/wheel tests the installed wheel without one)")
    src = tmp_path / "native_env"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("*.so", "*.c", "build", "__pycache__"))
    build = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=src,
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    check = textwrap.dedent("""
        import gymnasium as gym, numpy as np, fastvec
        import gridworld
        assert gridworld._kernel.__file__.startswith(%r), gridworld._kernel.__file__
        for mode in gym.vector.AutoresetMode:
            ref = gym.make_vec("GridWorld-v0", 5, vectorization_mode="sync", vector_kwargs={"autoreset_mode": mode})
            nat = gym.make_vec("GridWorld-v0", 5, vectorization_mode="fastvec", vector_kwargs={"autoreset_mode": mode})
            assert type(nat).__name__ == "NativeVectorEnv"
            assert np.array_equal(ref.reset(seed=3)[0], nat.reset(seed=3)[0])
            rng = np.random.default_rng(0)
            for t in range(200):
                a = rng.integers(0, 4, 5)
                r1, r2 = ref.step(a), nat.step(a)
                assert all(np.array_equal(x, y) for x, y in zip(r1[:4], r2[:4])), (mode, t)
                if mode == gym.vector.AutoresetMode.DISABLED and (r1[2] | r1[3]).any():
                    done = r1[2] | r1[3]
                    assert np.array_equal(ref.reset(options={"reset_mask": done})[0],
                                          nat.reset(options={"reset_mask": done})[0])
        print("ok")
    """) % str(src)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout[-3000:] + run.stderr[-3000:]
