"""fastvec.atari: the compiled SB3 / CleanRL Atari stack equals the Python wrappers.

The stack is CleanRL's ``ppo_atari.py`` one (innermost first): ``gym.make`` of a
``NoFrameskip-v4`` game, Gymnasium's ``RecordEpisodeStatistics``, SB3's ``NoopResetEnv``,
``MaxAndSkipEnv``, ``EpisodicLifeEnv``, ``FireResetEnv`` (games with FIRE), ``ClipRewardEnv``,
then Gymnasium's ``ResizeObservation``, ``GrayscaleObservation``, ``FrameStackObservation``;
and parts of it. Each parity case builds the same lambda twice, compiles one copy and steps
both with the same seeds and seeded random actions, resetting when an episode ends (a life
lost, with EpisodicLifeEnv) and once mid-run with a new seed: observations, rewards (types
included: ClipRewardEnv's numpy float64), terminated/truncated and infos must be identical,
except ``RecordEpisodeStatistics``' wall-clock ``episode["t"]``. The wrappers' own state
(episode queues, ``EpisodicLifeEnv.lives``) must agree too.
"""
from __future__ import annotations

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
ale_py = pytest.importorskip("ale_py")
cv2 = pytest.importorskip("cv2")
atari_wrappers = pytest.importorskip("stable_baselines3.common.atari_wrappers")

from gymnasium.wrappers import (  # noqa: E402
    FrameStackObservation,
    GrayscaleObservation,
    MaxAndSkipObservation,
    RecordEpisodeStatistics,
    ResizeObservation,
)

from fastvec.atari import CompiledAtariEnv, _palette, compile_stack  # noqa: E402
from fastvec.atari._resize import area_resize  # noqa: E402
from fastvec.atari._sb3 import gray_cv, gray_planes, rgb_planes, rgb_simd  # noqa: E402
from helpers import StepInto, assert_same, palette_kernel  # noqa: E402

ClipRewardEnv = atari_wrappers.ClipRewardEnv
EpisodicLifeEnv = atari_wrappers.EpisodicLifeEnv
FireResetEnv = atari_wrappers.FireResetEnv
MaxAndSkipEnv = atari_wrappers.MaxAndSkipEnv
NoopResetEnv = atari_wrappers.NoopResetEnv

gym.register_envs(ale_py)

WEIGHTS = np.array([0.2125, 0.7154, 0.0721])  # GrayscaleObservation's


class _Tag(gym.Wrapper):
    """An unknown wrapper: counts its steps in the info."""

    def __init__(self, env):
        super().__init__(env)
        self.count = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.count += 1
        return obs, reward, terminated, truncated, {**info, "count": self.count}


def cleanrl(game="Breakout", env_id=None, base=None, record=True, noop=30, skip=4, life=True, fire=True,
            clip=True, resize=(84, 84), gray=True, keep_dim=False, stack=4, padding="reset", tag_over=None,
            skip_with=None):
    """The user's lambda: CleanRL's ppo_atari.py stack, each part switchable.

    ``fire=True`` adds FireResetEnv where the game has FIRE (as CleanRL does); ``tag_over``
    names the wrapper an unknown wrapper goes on; ``skip_with``: the frame-skip wrapper
    (SB3's MaxAndSkipEnv by default).
    """
    def make():
        env = gym.make(env_id or f"{game}NoFrameskip-v4", **(base or {}))
        if record:
            env = RecordEpisodeStatistics(env)
        if noop:
            env = NoopResetEnv(env, noop_max=noop)
        if tag_over == "noop":
            env = _Tag(env)
        if skip:
            env = (skip_with or MaxAndSkipEnv)(env, skip=skip)
        if tag_over == "skip":
            env = _Tag(env)
        if life:
            env = EpisodicLifeEnv(env)
        if fire and "FIRE" in env.unwrapped.get_action_meanings():
            env = FireResetEnv(env)
        if clip:
            env = ClipRewardEnv(env)
        if resize:
            env = ResizeObservation(env, resize)
        if gray:
            env = GrayscaleObservation(env, keep_dim=keep_dim)
        if stack:
            env = FrameStackObservation(env, stack, padding_type=padding)
        return env
    return make


def _untimed(output):
    """A step's or reset's output without the episode's wall-clock time."""
    info = output[-1]
    if "episode" in info:
        info = {**info, "episode": {k: v for k, v in info["episode"].items() if k != "t"}}
    return (*output[:-1], info)


def _drive(python_env, compiled_env, steps, seed=0, reseed_at=None):
    """Steps both envs alike and compares every output; returns (episode ends, game ends, life losses)."""
    rng = np.random.default_rng(seed)
    assert_same(python_env.reset(seed=seed), compiled_env.reset(seed=seed), "reset")
    ends = games = losses = 0
    for t in range(steps):
        if t == reseed_at:
            assert_same(python_env.reset(seed=seed + 1000), compiled_env.reset(seed=seed + 1000), f"reset at {t}")
        action = int(rng.integers(python_env.action_space.n))
        expected = python_env.step(action)
        got = compiled_env.step(action)
        assert "t" not in expected[4] and ("episode" in expected[4]) == ("episode" in got[4])
        if "episode" in expected[4]:
            assert type(got[4]["episode"]["t"]) is float and got[4]["episode"]["t"] >= 0
        assert_same(_untimed(expected), _untimed(got), f"step {t}")
        if expected[2] or expected[3]:
            ends += 1
            games += "episode" in expected[4]
            losses += expected[4].get("lives", 0) > 0
            assert_same(_untimed(python_env.reset()), _untimed(compiled_env.reset()), f"reset after step {t}")
    return ends, games, losses


def _state(env):
    """The wrappers' state a user can read through get_wrapper_attr."""
    state = {}
    for name in ("episode_count", "episode_returns", "episode_lengths", "lives", "was_real_done"):
        try:
            state[name] = env.get_wrapper_attr(name)
        except AttributeError:
            pass
    for name in ("return_queue", "length_queue"):
        try:
            state[name] = list(env.get_wrapper_attr(name))
        except AttributeError:
            pass
    return state


def _parity(make, steps, seed=0, min_ends=1, min_games=0, expect=None):
    python_env = make()
    compiled_env, reason = compile_stack(make())
    assert reason is None, reason
    if expect is not None:
        assert compiled_env.get_wrapper_attr("compiled_atari").startswith(expect), \
            compiled_env.get_wrapper_attr("compiled_atari")
    core = _core(compiled_env)
    # CleanRL's resize + grayscale takes its planes from the learned palettes where the kernel beats ALE's loop
    resized_gray = "ResizeObservation" in compiled_env.get_wrapper_attr("compiled_atari")
    assert core.screen_conversion == (
        f"learned palette ({_palette.isa()})" if resized_gray and _palette.faster_than_ale() else "ALE")
    ends, games, _ = _drive(python_env, compiled_env, steps, seed, reseed_at=steps // 2)
    assert ends >= min_ends and games >= min_games, (ends, games)
    assert _state(compiled_env) == _state(python_env)
    assert core.screen_conversion.startswith("learned") == (resized_gray and _palette.faster_than_ale())
    python_env.close()
    compiled_env.close()


def _core(env):
    """The compiled core under env's Python wrappers."""
    while not isinstance(env, CompiledAtariEnv):
        env = env.env
    return env._core


CLEANRL = ("RecordEpisodeStatistics + NoopResetEnv(noop_max=30) + MaxAndSkipEnv(skip=4) + EpisodicLifeEnv + "
           "FireResetEnv + ClipRewardEnv + ResizeObservation(shape=(84, 84)) + GrayscaleObservation(keep_dim=False) "
           "+ FrameStackObservation(stack_size=4, padding_type='reset') over ")

# (lambda, steps, min episode ends, min game ends, what compile_stack describes)
PARITY = {
    # CleanRL's stack: FIRE and lives; FIRE without lives; lives without FIRE; neither
    "breakout-cleanrl": (cleanrl("Breakout"), 3000, 40, 5, CLEANRL + "BreakoutNoFrameskip-v4"),
    "pong-cleanrl": (cleanrl("Pong"), 2500, 1, 1, CLEANRL + "PongNoFrameskip-v4"),
    "mspacman-cleanrl-no-fire": (cleanrl("MsPacman"), 2500, 6, 2, "RecordEpisodeStatistics + NoopResetEnv(noop_max=30) "
                                 "+ MaxAndSkipEnv(skip=4) + EpisodicLifeEnv + ClipRewardEnv + ResizeObservation"),
    "freeway-cleanrl-no-fire-no-lives": (cleanrl("Freeway", noop=5), 2100, 1, 1, None),
    "spaceinvaders-cleanrl": (cleanrl("SpaceInvaders"), 2500, 6, 2, None),
    # Qbert's lives go to 0 for a few frames before the game ends (EpisodicLifeEnv's 0 < lives)
    "qbert-cleanrl": (cleanrl("Qbert"), 2500, 6, 2, None),
    # parts of it
    "breakout-no-record": (cleanrl("Breakout", record=False), 1500, 20, 0, "NoopResetEnv(noop_max=30)"),
    "breakout-no-life": (cleanrl("Breakout", life=False, noop=3), 2000, 5, 5, None),
    "breakout-rgb-out": (cleanrl("Breakout", resize=None, gray=False, stack=None), 1200, 15, 2,
                         "RecordEpisodeStatistics + NoopResetEnv(noop_max=30) + MaxAndSkipEnv(skip=4) + "
                         "EpisodicLifeEnv + FireResetEnv + ClipRewardEnv over"),
    "breakout-no-stack-keepdim-64": (cleanrl("Breakout", stack=None, keep_dim=True, resize=(64, 64)), 1500, 20, 2,
                                     None),
    "pong-no-clip-stack3-zero": (cleanrl("Pong", clip=False, stack=3, padding="zero", resize=(84, 64)), 1200, 0, 0,
                                 None),
    "breakout-skip3-no-fire": (cleanrl("Breakout", skip=3, fire=False, noop=8), 2000, 20, 2, None),
    "breakout-skip1": (cleanrl("Breakout", skip=1, noop=2), 2500, 5, 0, None),
    "breakout-no-skip": (cleanrl("Breakout", skip=0, noop=2), 2500, 5, 0, None),
    "breakout-noop-and-fire-only": (cleanrl("Breakout", skip=0, life=False, clip=False, resize=None, gray=False,
                                            stack=None), 1500, 1, 1, None),
    # a v5 base: sticky actions (the ALE's own draws) and frame skip in the base env
    "breakout-v5-sticky": (cleanrl(env_id="ALE/Breakout-v5", base={"frameskip": 1}), 2500, 30, 3, None),
    "pong-v5-base-skip4": (cleanrl(env_id="ALE/Pong-v5", skip=2), 1200, 0, 0, None),
    "breakout-v5-random-base-skip": (cleanrl(env_id="ALE/Breakout-v5", base={"frameskip": (2, 5)}, skip=2),
                                     1500, 20, 2, None),
    # truncation: the ALE's frame limit, gym.make's TimeLimit (inside the noops, FIRE steps and skips too)
    "pong-ale-truncation": (cleanrl("Pong", base={"max_num_frames_per_episode": 400}), 800, 5, 5, None),
    "breakout-timelimit": (cleanrl("Breakout", base={"max_episode_steps": 120}), 1500, 25, 10, None),
    "pong-truncated-in-the-noops": (cleanrl("Pong", base={"max_num_frames_per_episode": 20}), 300, 50, 50, None),
    "breakout-timelimit-in-the-fire": (cleanrl("Breakout", base={"max_episode_steps": 31}, noop=30), 300, 50, 0, None),
    # Gymnasium's MaxAndSkipObservation in MaxAndSkipEnv's place: in CleanRL's stack, and in a
    # stack of Gymnasium's wrappers only (over a v5 game: sticky actions)
    "breakout-cleanrl-gymnasium-skip": (cleanrl("Breakout", skip_with=MaxAndSkipObservation), 2000, 25, 3,
                                        "RecordEpisodeStatistics + NoopResetEnv(noop_max=30) + "
                                        "MaxAndSkipObservation(skip=4) + EpisodicLifeEnv + FireResetEnv"),
    "breakout-v5-gymnasium-only": (cleanrl(env_id="ALE/Breakout-v5", base={"frameskip": 1}, noop=0, life=False,
                                           fire=False, clip=False, skip_with=MaxAndSkipObservation), 2500, 3, 3,
                                   "RecordEpisodeStatistics + MaxAndSkipObservation(skip=4) + ResizeObservation("
                                   "shape=(84, 84)) + GrayscaleObservation(keep_dim=False) + FrameStackObservation("
                                   "stack_size=4, padding_type='reset') over ALE/Breakout-v5"),
    "pong-gymnasium-skip-no-record": (cleanrl("Pong", base={"max_num_frames_per_episode": 1200}, record=False,
                                              noop=0, life=False, fire=False, clip=False,
                                              skip_with=MaxAndSkipObservation, skip=3), 1500, 2, 0,
                                      "MaxAndSkipObservation(skip=3) + ResizeObservation"),
}


@pytest.mark.parametrize("case", list(PARITY))
def test_parity(case):
    make, steps, min_ends, min_games, expect = PARITY[case]
    _parity(make, steps, seed=7, min_ends=min_ends, min_games=min_games, expect=expect)


@pytest.mark.parametrize("case", ["breakout-cleanrl", "qbert-cleanrl", "breakout-skip3-no-fire"])
def test_parity_with_ales_conversion(case):
    """The same outputs with every screen ALE's RGB (the plain palette kernel is not used)."""
    make, steps, *_ = PARITY[case]
    with palette_kernel(0):
        _parity(make, steps // 2, seed=11, min_ends=0, min_games=0)


def test_custom_padding():
    pad = np.full((84, 84), 17, np.uint8)
    _parity(cleanrl("Pong", padding=pad, noop=3), 300, seed=4, min_ends=0)


def test_unknown_wrapper_in_the_middle_leaves_the_rest_python():
    """An unknown wrapper over MaxAndSkipEnv: RecordEpisodeStatistics, NoopResetEnv and
    MaxAndSkipEnv compiled; the wrapper and those above run in Python, re-pointed."""
    make = cleanrl("Breakout", tag_over="skip")
    env, reason = compile_stack(make())
    assert reason is None
    described = env.get_wrapper_attr("compiled_atari")
    assert described.startswith("RecordEpisodeStatistics + NoopResetEnv(noop_max=30) + MaxAndSkipEnv(skip=4) over")
    assert type(env) is FrameStackObservation
    _drive(make(), env, 800, seed=3, reseed_at=400)


def test_a_sub_stack_under_an_unknown_wrapper_over_noops():
    make = cleanrl("Breakout", tag_over="noop")
    env, reason = compile_stack(make())
    assert reason is None
    assert env.get_wrapper_attr("compiled_atari").startswith("RecordEpisodeStatistics + NoopResetEnv(noop_max=30) over")
    _drive(make(), env, 600, seed=5, reseed_at=300)


def sb3(game="Breakout", stack=None, **kwargs):
    """The user's lambda: SB3's AtariWrapper(**kwargs) (its wrappers; it stays Python on top)."""
    def make():
        env = atari_wrappers.AtariWrapper(gym.make(f"{game}NoFrameskip-v4"), **kwargs)
        return FrameStackObservation(env, stack) if stack else env
    return make


# (lambda, steps, min episode ends, 0: no RecordEpisodeStatistics to count games, what is compiled)
SB3 = {
    "breakout-sb3": (sb3("Breakout"), 2500, 30, 0, "NoopResetEnv(noop_max=30) + MaxAndSkipEnv(skip=4) + "
                     "EpisodicLifeEnv + FireResetEnv + ClipRewardEnv + WarpFrame(width=84, height=84) over "
                     "BreakoutNoFrameskip-v4"),
    "pong-sb3-stack4": (sb3("Pong", stack=4), 2000, 1, 0, "NoopResetEnv(noop_max=30)"),
    "mspacman-sb3-64-no-clip": (sb3("MsPacman", screen_size=64, clip_reward=False), 2000, 5, 0, None),
    "breakout-sb3-no-life-no-noop": (sb3("Breakout", terminal_on_life_loss=False, noop_max=0), 1500, 3, 0,
                                     "MaxAndSkipEnv(skip=4) + FireResetEnv + ClipRewardEnv + WarpFrame"),
    "breakout-sb3-skip1": (sb3("Breakout", frame_skip=1, noop_max=3), 2000, 5, 0,
                           "NoopResetEnv(noop_max=3) + EpisodicLifeEnv + FireResetEnv + ClipRewardEnv + WarpFrame"),
}


@pytest.mark.parametrize("case", list(SB3))
def test_sb3_atari_wrapper_parity(case):
    """SB3's own AtariWrapper: its wrappers compiled (WarpFrame included), AtariWrapper itself on top."""
    make, steps, min_ends, min_games, expect = SB3[case]
    _parity(make, steps, seed=3, min_ends=min_ends, min_games=min_games, expect=expect)


def test_warp_frame_on_real_frames_equals_opencv():
    """WarpFrame of every pooled screen of 750 steps of 2 games: cvtColor, then the plane's resize."""
    for game in ("Breakout", "Seaquest"):
        env = MaxAndSkipEnv(gym.make(f"{game}NoFrameskip-v4"), skip=4)
        warp = atari_wrappers.WarpFrame(env)
        env.reset(seed=0)
        rng = np.random.default_rng(0)
        for t in range(375):
            obs, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            buffers = env.get_wrapper_attr("_obs_buffer")
            gray = gray_cv(buffers[0], buffers[1])
            np.testing.assert_array_equal(gray, cv2.cvtColor(obs, cv2.COLOR_RGB2GRAY), err_msg=f"{game} {t}")
            np.testing.assert_array_equal(area_resize(gray, np.empty((84, 84), np.uint8))[:, :, None],
                                          warp.observation(obs), err_msg=f"{game} step {t}")
            if terminated or truncated:
                env.reset()
        env.close()


def test_cvt_color_equals_opencv_for_every_colour():
    c = np.arange(1 << 24, dtype=np.uint32)
    rgb = np.stack([(c >> 16) & 255, (c >> 8) & 255, c & 255], -1).astype(np.uint8).reshape(4096, 4096, 3)
    np.testing.assert_array_equal(gray_cv(rgb), cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY))


def test_a_resize_the_kernel_does_not_reproduce_stays_python():
    """210x160 -> 105x80 is a whole-number scale (OpenCV's other path): the resize and what is
    above it stay Python, the rest is compiled."""
    make = cleanrl("Breakout", resize=(105, 80))
    env, reason = compile_stack(make())
    assert reason is None
    assert "ResizeObservation" not in env.get_wrapper_attr("compiled_atari")
    assert "ClipRewardEnv over" in env.get_wrapper_attr("compiled_atari")
    _drive(make(), env, 400, seed=1)


def test_compiled_after_a_reset_continues_the_episode():
    make = cleanrl("Breakout")
    python_env, env = make(), make()
    rng = np.random.default_rng(5)
    assert_same(python_env.reset(seed=5), env.reset(seed=5))
    for _ in range(200):  # a life or two lost: EpisodicLifeEnv's and RecordEpisodeStatistics' counts carry over
        action = int(rng.integers(4))
        expected = python_env.step(action)
        assert_same(_untimed(expected), _untimed(env.step(action)))
        if expected[2] or expected[3]:
            assert_same(python_env.reset(), env.reset())
    env, reason = compile_stack(env)
    assert reason is None
    for t in range(800):
        action = int(rng.integers(4))
        expected = python_env.step(action)
        assert_same(_untimed(expected), _untimed(env.step(action)), f"step {t}")
        if expected[2] or expected[3]:
            assert_same(_untimed(python_env.reset()), _untimed(env.reset()), f"reset after step {t}")
    assert _state(env) == _state(python_env)


@pytest.mark.parametrize("case", ["breakout-cleanrl", "breakout-no-stack-keepdim-64", "breakout-rgb-out"])
def test_step_into_a_row(case):
    make, steps, *_ = PARITY[case]
    env, reason = compile_stack(make())
    assert reason is None and isinstance(env, CompiledAtariEnv)
    into = StepInto(env)
    _drive(make(), into, steps // 3, seed=11, reseed_at=steps // 6)
    with pytest.raises(ValueError, match="Expected out of shape"):
        env.step_into(0, np.zeros((2, 84, 84), np.uint8))
    into.close()


def test_the_compiled_env_stands_in_for_the_wrappers():
    make = cleanrl("Breakout")
    python_env = make()
    env, reason = compile_stack(make())
    assert reason is None
    assert env.observation_space == python_env.observation_space
    assert env.action_space == python_env.action_space
    assert env.spec == python_env.spec and env.metadata == python_env.metadata
    assert type(env.unwrapped) is ale_py.env.AtariEnv
    assert str(env) == ("<CompiledAtariEnv<RecordEpisodeStatistics+NoopResetEnv+MaxAndSkipEnv+EpisodicLifeEnv+"
                        "FireResetEnv+ClipRewardEnv+ResizeObservation+GrayscaleObservation+FrameStackObservation "
                        "over BreakoutNoFrameskip-v4>>")
    env.reset(seed=0)
    assert env.get_wrapper_attr("lives") == 5 and env.get_wrapper_attr("noop_max") == 30
    with pytest.raises(gym.error.ResetNeeded, match="Cannot call env.step"):
        compile_stack(make())[0].step(0)


# (lambda, the start of the reason)
UNSUPPORTED = [
    (lambda: MaxAndSkipEnv(atari_wrappers.StickyActionEnv(gym.make("BreakoutNoFrameskip-v4"), 0.25)),
     "nothing compiled: StickyActionEnv over the AtariEnv is not compiled (fastvec compiles SB3's NoopResetEnv"),
    (lambda: RecordEpisodeStatistics(gym.make("BreakoutNoFrameskip-v4")),
     "nothing compiled: RecordEpisodeStatistics alone is not compiled"),
    (lambda: NoopResetEnv(gym.make("BreakoutNoFrameskip-v4", obs_type="grayscale")),
     "SB3's Atari wrappers over an AtariEnv with obs_type='grayscale' are not compiled"),
    (lambda: MaxAndSkipEnv(NoopResetEnv(gym.make("BreakoutNoFrameskip-v4"), noop_max=0)),
     "nothing compiled: NoopResetEnv(noop_max=0) is not compiled (an int > 0 expected)"),
    (lambda: NoopResetEnv(RecordEpisodeStatistics(RecordEpisodeStatistics(gym.make("BreakoutNoFrameskip-v4")))),
     "nothing compiled: RecordEpisodeStatistics over RecordEpisodeStatistics is not compiled"),
    (lambda: MaxAndSkipEnv(gym.make("ALE/Breakout-v5", continuous=True)),
     "an AtariEnv with continuous=True is not compiled"),
]


def test_gymnasium_skip_alone_is_compiled_and_a_numpy_skip_falls_back():
    env, reason = compile_stack(MaxAndSkipObservation(gym.make("PongNoFrameskip-v4"), skip=2))
    assert reason is None and type(env) is CompiledAtariEnv
    assert env.compiled_atari.startswith("MaxAndSkipObservation(skip=2) over PongNoFrameskip-v4")
    assert str(env) == "<CompiledAtariEnv<MaxAndSkipObservation over PongNoFrameskip-v4>>"
    env = MaxAndSkipObservation(gym.make("PongNoFrameskip-v4"), skip=np.int64(4))
    got, why = compile_stack(env)
    assert got is env
    assert why == "nothing compiled: MaxAndSkipObservation(skip=np.int64(4)) is not compiled (an int > 0 expected)", why


@pytest.mark.parametrize("make, reason", UNSUPPORTED)
def test_unsupported_stacks_fall_back_with_a_reason(make, reason):
    env = make()
    got, why = compile_stack(env)
    assert got is env
    assert why is not None and why.startswith(reason) and "\n" not in why, why


def test_a_wrapper_lacking_the_state_read_falls_back():
    env = cleanrl("Breakout")()
    record = env
    while type(record) is not RecordEpisodeStatistics:
        record = record.env
    del record.length_queue
    got, why = compile_stack(env)
    assert got is env and why.startswith("nothing compiled: this Gymnasium's RecordEpisodeStatistics has no 'length_queue'"), why


# -- the pixels: OpenCV's 3-channel INTER_AREA is the 1-channel kernel per plane, and the gray ---

def _kinds_of_images(rng, n):
    """Random RGB screens of several kinds (uniform noise, few levels, flat blocks, edges)."""
    for k in range(n):
        kind = k % 4
        if kind == 0:
            yield rng.integers(0, 256, (210, 160, 3), dtype=np.uint8)
        elif kind == 1:
            yield (rng.integers(0, 4, (210, 160, 3)) * 85).astype(np.uint8)
        elif kind == 2:
            yield np.repeat(np.repeat(rng.integers(0, 256, (21, 16, 3), dtype=np.uint8), 10, 0), 10, 1)
        else:
            yield (rng.integers(0, 2, (210, 160, 3)) * 255).astype(np.uint8)


def _compiled_observation(a, b, shape):
    planes = rgb_planes(a, b)
    small = np.empty((3,) + shape, np.uint8)
    for c in range(3):
        area_resize(planes[c], small[c])
    return gray_planes(small)


def _python_observation(a, b, shape):
    rgb = a if b is None else np.stack([a, b]).max(axis=0)
    resized = cv2.resize(rgb, (shape[1], shape[0]), interpolation=cv2.INTER_AREA)
    return np.sum(np.multiply(resized, WEIGHTS), axis=-1).astype(np.uint8), resized


@pytest.mark.parametrize("shape", [(84, 84), (64, 64), (84, 64)])
def test_rgb_resize_per_plane_and_gray_equal_opencv_and_numpy_on_random_images(shape):
    rng = np.random.default_rng(shape[1])
    images = list(_kinds_of_images(rng, 1200))
    for k, a in enumerate(images):
        b = images[k - 1] if k % 2 else None
        expected, resized = _python_observation(a, b, shape)
        planes = rgb_planes(a, b)
        small = np.empty((3,) + shape, np.uint8)
        for c in range(3):
            area_resize(planes[c], small[c])
        np.testing.assert_array_equal(small.transpose(1, 2, 0), resized, err_msg=f"image {k}")
        np.testing.assert_array_equal(gray_planes(small), expected, err_msg=f"image {k}")


def test_rgb_resize_per_plane_equals_opencv_on_real_frames():
    """Every pooled screen of 1,500 steps of 4 games (MaxAndSkipEnv's max of its two buffers)."""
    frames = 0
    for game in ("Breakout", "Pong", "MsPacman", "Seaquest"):
        env = MaxAndSkipEnv(gym.make(f"{game}NoFrameskip-v4"), skip=4)
        env.reset(seed=0)
        rng = np.random.default_rng(0)
        for t in range(375):
            obs, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            buffers = env.get_wrapper_attr("_obs_buffer")
            expected, _ = _python_observation(obs, None, (84, 84))
            np.testing.assert_array_equal(_compiled_observation(buffers[0], buffers[1], (84, 84)), expected,
                                          err_msg=f"{game} step {t}")
            frames += 1
            if terminated or truncated:
                env.reset()
        env.close()
    assert frames == 1500


def test_gray_equals_numpy_for_every_colour():
    """All 2**24 colours: the C double arithmetic (no FMA) truncates as numpy's astype does."""
    c = np.arange(1 << 24, dtype=np.uint32)
    rgb = np.stack([(c >> 16) & 255, (c >> 8) & 255, c & 255], -1).astype(np.uint8).reshape(4096, 4096, 3)
    expected = np.sum(np.multiply(rgb, WEIGHTS), axis=-1).astype(np.uint8)
    np.testing.assert_array_equal(gray_planes(np.ascontiguousarray(rgb.transpose(2, 0, 1))), expected)


@pytest.mark.parametrize("simd", [True, False])
def test_rgb_planes_both_loops_any_width(simd):
    """The SSSE3 loop (16 pixels at a time, the rest by the plain loop) and the plain loop."""
    rng = np.random.default_rng(int(simd))
    before = rgb_simd()
    try:
        if simd and not rgb_simd(True):
            pytest.skip("no SSSE3 here")
        rgb_simd(simd)
        for shape in [(210, 160, 3), (1, 1, 3), (1, 15, 3), (1, 16, 3), (1, 17, 3), (3, 33, 3), (7, 5, 3)]:
            for _ in range(20):
                a, b = (rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(2))
                np.testing.assert_array_equal(rgb_planes(a), a.transpose(2, 0, 1))
                np.testing.assert_array_equal(rgb_planes(a, b), np.maximum(a, b).transpose(2, 0, 1))
    finally:
        rgb_simd(before)


def test_kernels_check_their_inputs():
    with pytest.raises(TypeError, match="Expected a to be a numpy.ndarray, got list"):
        rgb_planes([1, 2, 3])
    with pytest.raises(ValueError, match=r"Expected b to be a C-contiguous uint8 array of shape \(2, 2, 3\)"):
        rgb_planes(np.zeros((2, 2, 3), np.uint8), np.zeros((2, 3, 3), np.uint8))
    with pytest.raises(ValueError, match=r"Expected planes to be a C-contiguous uint8 array"):
        gray_planes(np.zeros((3, 4, 4), np.float32))
