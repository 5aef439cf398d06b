"""fastvec.atari: the compiled AtariPreprocessing (+ FrameStackObservation) stack equals Gymnasium's.

Each parity case builds the same lambda twice, compiles one copy with ``compile_stack`` and
steps both with the same seeds and the same random actions (a seeded generator), resetting when
an episode ends (as an autoreset would) and once mid-run with a new seed: observations are
compared with ``np.array_equal`` (and dtype, shape), rewards, terminated/truncated and infos
exactly, types included.
"""
from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
ale_py = pytest.importorskip("ale_py")
pytest.importorskip("cv2")

from gymnasium.wrappers import (  # noqa: E402
    AtariPreprocessing,
    FrameStackObservation,
    RecordEpisodeStatistics,
    TimeLimit,
)

from fastvec.atari import CompiledAtariEnv, _palette, compile_stack  # noqa: E402
from helpers import StepInto, palette_kernel  # noqa: E402

gym.register_envs(ale_py)


def _same(a, b, where=""):
    """a equals b exactly: arrays by dtype, shape and values; everything else by type and ==."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), f"{where}: {type(b).__name__} where an ndarray was expected"
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {b.dtype}{b.shape} != {a.dtype}{a.shape}"
        assert np.array_equal(a, b), (
            f"{where}: {np.count_nonzero(a != b)} values differ, first at {np.argwhere(a != b)[0]}")
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), f"{where}: keys {list(b)} != {list(a)}"
        for key in a:
            _same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), f"{where}: {b!r:.80} != {a!r:.80}"
        for k, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{k}]")
    else:
        assert type(a) is type(b) and a == b, f"{where}: {b!r} ({type(b).__name__}) != {a!r} ({type(a).__name__})"


def _make(game="Pong", stack=None, padding="reset", base=None, **kwargs):
    """The user's lambda: AtariPreprocessing(**kwargs) over ALE/<game>-v5, optionally frame-stacked."""
    def make():
        env = gym.make(f"ALE/{game}-v5", **{"frameskip": 1, **(base or {})})
        env = AtariPreprocessing(env, **kwargs)
        if stack:
            env = FrameStackObservation(env, stack, padding_type=padding)
        return env
    return make


def _drive(python_env, compiled_env, steps, seed=0, reseed_at=None):
    """Steps both envs alike and compares every output; returns (episode ends, life losses)."""
    rng = np.random.default_rng(seed)
    _same(python_env.reset(seed=seed), compiled_env.reset(seed=seed), "reset")
    ends = losses = 0
    lives = None
    for t in range(steps):
        if t == reseed_at:
            _same(python_env.reset(seed=seed + 1000), compiled_env.reset(seed=seed + 1000), f"reset(seed) at {t}")
        action = int(rng.integers(python_env.action_space.n))
        expected, got = python_env.step(action), compiled_env.step(action)
        _same(expected, got, f"step {t}")
        info = expected[4]
        if lives is not None and info["lives"] < lives:
            losses += 1
        lives = info["lives"]
        if expected[2] or expected[3]:
            ends += 1
            lives = None
            _same(python_env.reset(), compiled_env.reset(), f"reset after step {t}")
    return ends, losses


def _parity(make, steps, seed=0, min_ends=1, min_losses=0):
    python_env = make()
    compiled_env, reason = compile_stack(make())
    assert reason is None, reason
    assert isinstance(compiled_env, CompiledAtariEnv)
    core = compiled_env._core
    grayscale = python_env.get_wrapper_attr("grayscale_obs")
    # grayscale screens come from the learned palette wherever its kernel beats ALE's loop
    assert core.screen_conversion == (
        f"learned palette ({_palette.isa()})" if grayscale and _palette.faster_than_ale() else "ALE")
    ends, losses = _drive(python_env, compiled_env, steps, seed, reseed_at=steps // 2)
    assert ends >= min_ends and losses >= min_losses, (ends, losses)
    if core.palette is not None:
        # each screen left to ALE taught the palette an index: no screen is converted twice
        assert core.palette.consistent and core.palette.misses <= len(core.palette.learned), core.palette.misses
    python_env.close()
    compiled_env.close()


# (game, lambda, steps, min episode ends, min life losses)
PARITY = {
    "pong-default-stack4": ("Pong", _make("Pong", stack=4), 3000, 2, 0),
    "breakout-default": ("Breakout", _make("Breakout"), 2500, 5, 10),
    "breakout-life-loss-stack4": ("Breakout", _make("Breakout", stack=4, terminal_on_life_loss=True), 2500, 20, 20),
    "spaceinvaders-noop0-stack4-zero": (
        "SpaceInvaders", _make("SpaceInvaders", stack=4, padding="zero", noop_max=0), 2000, 1, 2),
    "mspacman-screen64-skip3": (
        "MsPacman", _make("MsPacman", screen_size=64, frame_skip=3, grayscale_newaxis=True), 2000, 1, 3),
    "seaquest-rgb-84x64-stack4-zero": (
        "Seaquest", _make("Seaquest", stack=4, padding="zero", grayscale_obs=False, screen_size=(84, 64)), 1200, 1, 1),
    "breakout-scale-newaxis-stack3": (
        "Breakout", _make("Breakout", stack=3, scale_obs=True, grayscale_newaxis=True), 1500, 3, 5),
    "pong-scale-rgb": ("Pong", _make("Pong", scale_obs=True, grayscale_obs=False, noop_max=5), 600, 0, 0),
    "breakout-skip1": ("Breakout", _make("Breakout", frame_skip=1, terminal_on_life_loss=True), 2500, 5, 5),
    # frame_skip=1 over a base env that skips itself: 4 frames, or a random 2-4 (the base env's np_random)
    "breakout-skip1-base4-stack2": ("Breakout", _make("Breakout", stack=2, frame_skip=1, base={"frameskip": 4}),
                                     1500, 3, 10),
    "breakout-skip1-base2to5": ("Breakout", _make("Breakout", frame_skip=1, base={"frameskip": (2, 5)}), 1500, 3, 10),
    # truncation: the ALE's max_num_frames_per_episode, and gym.make's TimeLimit (noop steps count)
    "pong-ale-truncation": ("Pong", _make("Pong", stack=4, base={"max_num_frames_per_episode": 1000}), 1200, 4, 0),
    "breakout-timelimit": ("Breakout", _make("Breakout", base={"max_episode_steps": 150}), 1200, 6, 3),
    # episodes shorter than the noops: AtariPreprocessing.reset resets again inside its noop loop
    "pong-truncated-in-the-noops": (
        "Pong", _make("Pong", stack=4, base={"max_num_frames_per_episode": 24}), 400, 30, 0),
    "breakout-timelimit-in-the-noops": ("Breakout", _make("Breakout", base={"max_episode_steps": 20}), 400, 30, 0),
    "qbert-skip2-stack4": ("Qbert", _make("Qbert", stack=4, frame_skip=2), 800, 0, 1),
    "boxing-no-sticky": ("Boxing", _make("Boxing", stack=4, base={"repeat_action_probability": 0.0}), 1000, 0, 0),
}


@pytest.mark.parametrize("case", list(PARITY))
def test_parity(case):
    _, make, steps, min_ends, min_losses = PARITY[case]
    _parity(make, steps, seed=7, min_ends=min_ends, min_losses=min_losses)


@pytest.mark.parametrize("case", ["pong-default-stack4", "breakout-life-loss-stack4", "mspacman-screen64-skip3"])
def test_parity_with_ales_conversion(case):
    """The same outputs with every screen converted by ALE (the plain kernel is not used)."""
    _, make, steps, *_ = PARITY[case]
    with palette_kernel(0):
        _parity(make, steps // 2, seed=11, min_ends=0, min_losses=0)


def test_colour_averaging_leaves_the_screens_to_ale():
    """ALE's colour averaging blends frames, so a pixel's level is not its index's alone."""
    env = _make("Pong", stack=4)()
    env.unwrapped.ale.setBool("color_averaging", True)
    compiled, reason = compile_stack(env)
    assert reason is None and compiled._core.screen_conversion == "ALE"


@pytest.mark.parametrize("case", ["breakout-life-loss-stack4", "breakout-scale-newaxis-stack3",
                                  "mspacman-screen64-skip3",
                                  "pong-scale-rgb"])
def test_step_into_a_row(case):
    _, make, steps, min_ends, _ = PARITY[case]
    python_env = make()
    env, reason = compile_stack(make())
    assert reason is None
    into = StepInto(env)
    _drive(python_env, into, steps // 3, seed=11, reseed_at=steps // 6)
    into.close()


def test_step_into_checks_its_output():
    env, _ = compile_stack(_make("Pong", stack=4)())
    expected = r"Expected out to be a numpy array of shape \(4, 84, 84\) and dtype uint8, got list"
    with pytest.raises(TypeError, match=expected):
        env.reset_into([])
    expected = r"Expected out of shape \(4, 84, 84\) and dtype uint8, got shape \(4, 84, 84\) and dtype float32"
    with pytest.raises(ValueError, match=expected):
        env.reset_into(np.zeros((4, 84, 84), np.float32))
    with pytest.raises(ValueError, match="Expected out to be a writable C-contiguous array"):
        env.reset_into(np.zeros((4, 84, 168), np.uint8)[:, :, ::2])
    assert env.reset_into(np.zeros((4, 84, 84), np.uint8))["lives"] == 0


def test_the_compiled_env_stands_in_for_the_wrappers():
    make = _make("Breakout", stack=4)
    python_env = make()
    env, reason = compile_stack(make())
    assert reason is None
    assert env.observation_space == python_env.observation_space
    assert env.action_space == python_env.action_space
    assert env.spec == python_env.spec and env.metadata == python_env.metadata
    assert env.render_mode == python_env.render_mode
    base = env.unwrapped
    assert type(base) is ale_py.env.AtariEnv and env.ale is base.ale
    env.reset(seed=3)
    assert env.np_random is base.np_random and env.np_random_seed == base.np_random_seed
    assert env.get_wrapper_attr("frame_skip") == 4 and env.get_wrapper_attr("stack_size") == 4
    assert env.get_wrapper_attr("lives") == 5
    assert "FrameStackObservation(stack_size=4" in env.compiled_atari
    assert str(env) == "<CompiledAtariEnv<AtariPreprocessing+FrameStackObservation over ALE/Breakout-v5>>"
    env.close()


def test_step_before_reset_raises_as_order_enforcing_does():
    env, reason = compile_stack(_make("Pong", stack=4)())
    assert reason is None
    with pytest.raises(gym.error.ResetNeeded, match="Cannot call env.step"):
        env.step(0)


def test_bad_actions_raise_as_the_base_env_does():
    python_env, (env, _) = _make("Pong")(), compile_stack(_make("Pong")())
    python_env.reset(seed=0)
    env.reset(seed=0)
    for action in (6, 1.5):
        with pytest.raises(Exception) as expected:
            python_env.step(action)
        with pytest.raises(type(expected.value)):
            env.step(action)


class _Tag(gym.Wrapper):
    """An unknown wrapper: doubles the reward, counts its steps in the info."""

    def __init__(self, env):
        super().__init__(env)
        self.count = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.count += 1
        return obs, 2 * reward, terminated, truncated, {**info, "count": self.count}


def test_unknown_wrappers_on_top_are_kept_and_repointed():
    def make():
        return RecordEpisodeStatistics(_Tag(_make("Breakout", stack=4, terminal_on_life_loss=True)()))

    python_env = make()
    env, reason = compile_stack(make())
    assert reason is None
    assert type(env) is RecordEpisodeStatistics and type(env.env) is _Tag
    assert isinstance(env.env.env, CompiledAtariEnv)
    assert env.get_wrapper_attr("compiled_atari").startswith("AtariPreprocessing(noop_max=30")
    assert env.compiled_atari == env.env.env.compiled_atari
    assert compile_stack(env) == (env, None)  # compiled already
    assert env.spec == python_env.spec
    rng = np.random.default_rng(1)
    _same(python_env.reset(seed=1), env.reset(seed=1))
    episodes = 0
    for t in range(800):
        action = int(rng.integers(4))
        expected, got = python_env.step(action), env.step(action)
        for x in (expected, got):  # the episode's wall time differs
            x[4].get("episode", {}).pop("t", None)
        _same(expected, got, f"step {t}")
        if expected[2] or expected[3]:
            episodes += "episode" in expected[4]
            _same(python_env.reset(), env.reset())
    assert episodes >= 3 and env.env.count == 800


def test_an_unknown_wrapper_between_the_stack_and_a_frame_stack():
    """AtariPreprocessing compiled; the FrameStackObservation over an unknown wrapper stays Python."""
    def make():
        return FrameStackObservation(_Tag(_make("Pong")()), 4)

    env, reason = compile_stack(make())
    assert reason is None
    assert type(env) is FrameStackObservation and isinstance(env.env.env, CompiledAtariEnv)
    assert "FrameStack" not in env.get_wrapper_attr("compiled_atari")
    _drive(make(), env, 400, seed=2, reseed_at=200)


def test_compiled_after_a_reset_continues_the_episode():
    python_env, make = _make("Breakout", stack=4)(), _make("Breakout", stack=4)
    env = make()
    rng = np.random.default_rng(5)
    _same(python_env.reset(seed=5), env.reset(seed=5))
    for _ in range(30):
        action = int(rng.integers(4))
        _same(python_env.step(action), env.step(action))
    env, reason = compile_stack(env)
    assert reason is None
    for t in range(600):
        action = int(rng.integers(4))
        expected = python_env.step(action)
        _same(expected, env.step(action), f"step {t}")
        if expected[2] or expected[3]:
            _same(python_env.reset(), env.reset(), f"reset after step {t}")


def test_custom_padding():
    pad = np.full((84, 84), 17, np.uint8)
    _parity(_make("Pong", stack=4, padding=pad, noop_max=3), 300, seed=4, min_ends=0)


def test_render_is_the_base_envs():
    make = _make("Pong", stack=4, base={"render_mode": "rgb_array"})
    python_env, (env, _) = make(), compile_stack(make())
    _same(python_env.reset(seed=0), env.reset(seed=0))
    for _ in range(5):
        _same(python_env.step(1), env.step(1))
    _same(python_env.render(), env.render())
    assert env.render_mode == "rgb_array"


class _APSubclass(AtariPreprocessing):
    pass


class _Shift(gym.ObservationWrapper):
    def observation(self, observation):
        return observation


@pytest.mark.parametrize("make, reason", [
    (lambda: gym.make("CartPole-v1"), "the innermost env is CartPoleEnv, not ale_py's AtariEnv: nothing compiled"),
    (lambda: gym.make("ALE/Pong-v5"), "no AtariPreprocessing over the AtariEnv: nothing compiled"),
    (lambda: AtariPreprocessing(gym.make("ALE/Pong-v5", frameskip=1, obs_type="ram")),
     "an AtariEnv with obs_type='ram' is not compiled (AtariPreprocessing grabs the screen)"),
    (lambda: AtariPreprocessing(gym.make("ALE/Pong-v5", frameskip=1, obs_type="grayscale"), grayscale_obs=False),
     "AtariPreprocessing(grayscale_obs=False) over an AtariEnv with obs_type='grayscale' is not compiled"),
    (lambda: AtariPreprocessing(gym.make("ALE/Pong-v5", frameskip=1, continuous=True), noop_max=0),
     "an AtariEnv with continuous=True is not compiled"),
    (lambda: _APSubclass(gym.make("ALE/Pong-v5", frameskip=1)), "_APSubclass directly over the AtariEnv's wrappers "
     "is a subclass of AtariPreprocessing"),
    (lambda: AtariPreprocessing(_Shift(gym.make("ALE/Pong-v5", frameskip=1))), "_Shift directly over the AtariEnv's "
     "wrappers is not AtariPreprocessing"),
    (lambda: AtariPreprocessing(TimeLimit(gym.make("ALE/Pong-v5", frameskip=1, max_episode_steps=9), 5)),
     "more than one TimeLimit under AtariPreprocessing is not compiled"),
])
def test_unsupported_stacks_fall_back_with_a_reason(make, reason):
    env = make()
    got, why = compile_stack(env)
    assert got is env
    assert why is not None and why.startswith(reason) and "\n" not in why


def test_frame_skip_over_a_skipping_base_env_falls_back():
    env = AtariPreprocessing(gym.make("ALE/Pong-v5", frameskip=1), frame_skip=4)
    env.env.unwrapped._frameskip = 4  # as AtariPreprocessing itself refuses to be built
    got, why = compile_stack(env)
    assert got is env and why.startswith("AtariPreprocessing(frame_skip=4) over a base env with frameskip=4 is not "
                                         "compiled")


def test_a_gymnasium_whose_wrappers_lack_the_state_read_falls_back():
    env = AtariPreprocessing(gym.make("ALE/Pong-v5", frameskip=1, max_episode_steps=100))
    del env.env._elapsed_steps  # as a Gymnasium that counts elsewhere would be
    got, why = compile_stack(env)
    assert got is env and why.startswith("this Gymnasium's TimeLimit has no '_elapsed_steps'")


def test_compile_stack_wants_an_env():
    with pytest.raises(TypeError, match="Expected a gymnasium.Env, got int"):
        compile_stack(3)


@pytest.mark.parametrize("module", ["fastvec.atari", "fastvec.atari.recognise", "fastvec.atari.env"])
def test_docstring_examples(module):
    failures, tried = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert tried and not failures
