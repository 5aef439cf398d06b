"""FastVectorEnv over Gymnasium's Atari wrappers: the compiled stack in the workers
(``compile_wrappers=True``, the default) gives what SyncVectorEnv gives over the same lambdas.

Same seeds and the same seeded random actions for both, every autoreset mode, steps spanning
episode ends and life losses; ``send``/``recv``; an env rebuilt after a failure is compiled
again; the flag off, and a stack fastvec leaves in Python, say so in ``compiled_wrappers``.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
ale_py = pytest.importorskip("ale_py")
pytest.importorskip("cv2")

from gymnasium.vector import AutoresetMode, SyncVectorEnv  # noqa: E402
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, RecordEpisodeStatistics  # noqa: E402

from fastvec import FastVectorEnv  # noqa: E402
from helpers import assert_same  # noqa: E402

gym.register_envs(ale_py)


def make_atari(game: str = "Pong", stack: int | None = 4, record: bool = False, obs_type: str = "rgb", **kwargs):
    """A user's lambda: AtariPreprocessing(**kwargs) over ALE/<game>-v5 (frameskip 1), stacked,
    with RecordEpisodeStatistics on top if ``record``."""
    env = gym.make(f"ALE/{game}-v5", frameskip=1, obs_type=obs_type)
    env = AtariPreprocessing(env, **kwargs)
    if stack:
        env = FrameStackObservation(env, stack)
    if record:
        env = RecordEpisodeStatistics(env)
    return env


class MyPreprocessing(AtariPreprocessing):
    """A user's own subclass: fastvec cannot know what it changes, so it stays Python."""


class FailOnce(gym.Wrapper):
    """Raises in its env's ``fail_at``-th step, once per process (an unknown wrapper on top)."""

    failed = False

    def __init__(self, env, fail_at: int):
        super().__init__(env)
        self.fail_at, self.t = fail_at, 0

    def step(self, action):
        self.t += 1
        if self.t == self.fail_at and not FailOnce.failed:
            FailOnce.failed = True
            raise RuntimeError("the simulator fell over")
        return self.env.step(action)


def _untimed(output):
    """A vector env's output without RecordEpisodeStatistics' wall-clock times (``episode.t``,
    which no two runs share)."""
    def untimed(infos):
        infos = {k: untimed(v) if k == "final_info" else v for k, v in infos.items()}
        if "episode" in infos:
            infos["episode"] = {k: v for k, v in infos["episode"].items() if k != "t"}
        return infos
    return (*output[:-1], untimed(output[-1]))


def _run(envs, ref, steps: int, seed: int, num_actions: int) -> None:
    assert_same(ref.reset(seed=seed), envs.reset(seed=seed), "reset")
    rng = np.random.default_rng(seed)
    for t in range(steps):
        actions = rng.integers(0, num_actions, envs.num_envs)
        assert_same(_untimed(ref.step(actions)), _untimed(envs.step(actions)), f"step {t}")


@pytest.mark.parametrize("mode", list(AutoresetMode))
@pytest.mark.parametrize("game, kwargs", [
    ("Pong", {}),
    # life losses end episodes; a short noop range and episode statistics on top
    ("Breakout", {"terminal_on_life_loss": True, "noop_max": 5, "record": True}),
])
def test_compiled_stacks_step_as_sync_vector_env(mode, game, kwargs):
    fns = [functools.partial(make_atari, game, **kwargs)] * 4
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    with FastVectorEnv(fns, num_workers=2, autoreset_mode=mode) as envs:
        assert all(note.startswith("compiled: AtariPreprocessing") for note in envs.compiled_wrappers)
        if mode is AutoresetMode.DISABLED:
            _run_disabled(envs, ref, 600, 1)
        else:
            _run(envs, ref, 600, 1, envs.single_action_space.n)
    ref.close()


def _run_disabled(envs, ref, steps: int, seed: int) -> None:
    """DISABLED: ended envs are reset by a masked reset, on both."""
    assert_same(ref.reset(seed=seed), envs.reset(seed=seed), "reset")
    rng = np.random.default_rng(seed)
    for t in range(steps):
        actions = rng.integers(0, envs.single_action_space.n, envs.num_envs)
        mine, theirs = _untimed(envs.step(actions)), _untimed(ref.step(actions))
        assert_same(theirs, mine, f"step {t}")
        ended = theirs[2] | theirs[3]
        if ended.any():
            # (a dict each: SyncVectorEnv pops reset_mask from the one it is given)
            assert_same(ref.reset(options={"reset_mask": ended}), envs.reset(options={"reset_mask": ended}),
                        f"reset after {t}")


def make_cleanrl(game: str = "Breakout", noop_max: int = 30, stack: int = 4) -> gym.Env:
    """CleanRL's ppo_atari.py env (SB3's Atari wrappers, Gymnasium's observation wrappers)."""
    from stable_baselines3.common.atari_wrappers import (
        ClipRewardEnv,
        EpisodicLifeEnv,
        FireResetEnv,
        MaxAndSkipEnv,
        NoopResetEnv,
    )

    env = gym.make(f"{game}NoFrameskip-v4")
    env = RecordEpisodeStatistics(env)
    env = NoopResetEnv(env, noop_max=noop_max)
    env = MaxAndSkipEnv(env, skip=4)
    env = EpisodicLifeEnv(env)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireResetEnv(env)
    env = ClipRewardEnv(env)
    env = gym.wrappers.ResizeObservation(env, (84, 84))
    env = gym.wrappers.GrayscaleObservation(env)
    return gym.wrappers.FrameStackObservation(env, stack)


def make_gymnasium_only(game: str = "Breakout") -> gym.Env:
    """A stack of Gymnasium's wrappers only (no SB3): MaxAndSkipObservation and the observation
    wrappers over a v5 game (sticky actions), a reward sign on top (stays Python)."""
    env = gym.make(f"ALE/{game}-v5", frameskip=1)
    env = RecordEpisodeStatistics(env)
    env = gym.wrappers.MaxAndSkipObservation(env, skip=4)
    env = gym.wrappers.ResizeObservation(env, (84, 84))
    env = gym.wrappers.GrayscaleObservation(env)
    env = gym.wrappers.FrameStackObservation(env, 4)
    return gym.wrappers.TransformReward(env, np.sign)


@pytest.mark.parametrize("mode", list(AutoresetMode))
@pytest.mark.parametrize("make, compiled", [
    # FIRE, lives: episodes end at each life lost, games at the last
    (functools.partial(make_cleanrl, "Breakout"), "RecordEpisodeStatistics + NoopResetEnv(noop_max=30) + "),
    # no FIRE
    (functools.partial(make_cleanrl, "MsPacman", noop_max=5, stack=2), "RecordEpisodeStatistics + NoopResetEnv("),
    (make_gymnasium_only, "RecordEpisodeStatistics + MaxAndSkipObservation(skip=4) + ResizeObservation"),
], ids=["breakout-cleanrl", "mspacman-cleanrl", "breakout-gymnasium-only"])
def test_compiled_sb3_style_stacks_step_as_sync_vector_env(mode, make, compiled):
    if make is not make_gymnasium_only:
        pytest.importorskip("stable_baselines3")
    fns = [make] * 4
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    with FastVectorEnv(fns, num_workers=2, autoreset_mode=mode) as envs:
        assert all(note.startswith("compiled: " + compiled) for note in envs.compiled_wrappers), envs.compiled_wrappers
        if mode is AutoresetMode.DISABLED:
            _run_disabled(envs, ref, 500, 2)
        else:
            _run(envs, ref, 500, 2, envs.single_action_space.n)
    ref.close()


def test_send_recv_equals_sync_env_by_env():
    """send/recv (a batch of 2 of 4 envs): each env's results, in the order recv gives them,
    equal SyncVectorEnv's for that env (every env stepped with its own action sequence)."""
    fns = [functools.partial(make_atari, "Breakout", terminal_on_life_loss=True, record=True)] * 4
    refs = [SyncVectorEnv([fn]) for fn in fns]
    rng = np.random.default_rng(7)
    actions = rng.integers(0, 4, (4, 200))
    taken = [0] * 4
    with FastVectorEnv(fns, num_workers=2, batch_size=2) as envs:
        envs.async_reset(seed=list(range(4)))
        for k, ref in enumerate(refs):
            ref.reset(seed=k)
        for _ in range(300):
            obs, rewards, term, trunc, infos = envs.recv()
            ids = infos["env_id"]
            for row, k in enumerate(ids):
                if taken[k] == 0:
                    continue
                r_obs, r_rew, r_term, r_trunc, _ = refs[k].step(actions[k, taken[k] - 1:taken[k]])
                np.testing.assert_array_equal(r_obs[0], obs[row])
                assert (r_rew[0], r_term[0], r_trunc[0]) == (rewards[row], term[row], trunc[row])
            ids_next = [k for k in ids if taken[k] < actions.shape[1]]
            if len(ids_next) < len(ids):
                break
            envs.send(np.array([actions[k, taken[k]] for k in ids]), ids)
            for k in ids:
                taken[k] += 1
    for ref in refs:
        ref.close()


def test_an_env_rebuilt_after_a_failure_is_compiled_again():
    """env_failure="restart": the env whose step raised (in a Python wrapper over the compiled
    stack) is built again by its worker through the same compiling env_fn."""
    fns = [lambda: FailOnce(make_atari("Pong"), fail_at=5)] * 2
    with FastVectorEnv(fns, num_workers=1, env_failure="restart") as envs:
        envs.reset(seed=0)
        restarted = False
        for _ in range(10):
            _, _, _, _, infos = envs.step(np.zeros(2, dtype=np.int64))
            restarted |= bool(np.any(infos.get("env_restarted", False)))
        assert restarted
        assert all(isinstance(e, str) and "AtariPreprocessing" in e for e in envs.get_attr("compiled_atari"))


def test_the_flag_off_and_a_stack_left_in_python_say_so():
    fns = [functools.partial(make_atari, "Pong")] * 2
    with FastVectorEnv(fns, num_workers=1, compile_wrappers=False) as envs:
        assert envs.compiled_wrappers == (None, None)
    # a stack of the kind fastvec compiles, with a setting it does not: Python, and why
    own = [lambda: MyPreprocessing(gym.make("ALE/Pong-v5", frameskip=1))]
    ref = SyncVectorEnv(own)
    with FastVectorEnv(own, num_workers=1) as envs:
        assert envs.compiled_wrappers[0].startswith("not compiled: ") and "subclass" in envs.compiled_wrappers[0]
        _run(envs, ref, 50, 3, envs.single_action_space.n)
    ref.close()
    with FastVectorEnv([lambda: gym.make("CartPole-v1")], num_workers=1) as envs:
        assert envs.compiled_wrappers == (None,)


def test_a_stack_left_in_python_is_not_marked_on_the_users_env():
    """The reason is kept beside the env, not set on it: the env is exactly as env_fn built it."""
    from fastvec.vector._worker.compiled_stacks import StackCompiler, compile_note

    env = StackCompiler(lambda: MyPreprocessing(gym.make("ALE/Pong-v5", frameskip=1)))()
    assert type(env) is MyPreprocessing
    assert compile_note(env).startswith("not compiled: MyPreprocessing directly over")
    assert not [name for name in vars(env) if "fastvec" in name]
    assert compile_note(MyPreprocessing(gym.make("ALE/Pong-v5", frameskip=1))) is None  # never compiled
    env.close()
