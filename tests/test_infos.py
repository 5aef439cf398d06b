"""Infos through shared memory equal SyncVectorEnv's: keys, order, values, dtypes, masks, nesting.

Envs replay a schedule of info dicts drawn by hypothesis: every kind of value ``_add_info``
distinguishes (Python and NumPy scalars, arrays, strings, objects, nested dicts, ints that
do not fit int64), keys that appear only sometimes, keys whose type or shape changes from
one step or env to the next, mask-name clashes, ``final_obs`` keys. Where SyncVectorEnv
raises (a string into a float array, say), FastVectorEnv must raise the same type.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastvec import FastVectorEnv
from helpers import assert_same

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


class ScheduleEnv(gym.Env):
    """Returns ``schedule[t]`` = (info, terminated) at its t-th step (and at resets, the info
    of ``reset_infos[r]``), cycling; observations count the steps."""

    observation_space = gym.spaces.Box(-1e9, 1e9, (2,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, schedule, reset_infos):
        self.schedule = schedule
        self.reset_infos = reset_infos
        self.t = self.r = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        info = self.reset_infos[self.r % len(self.reset_infos)]
        self.r += 1
        return np.array([self.t, -1.0]), _copy(info)

    def step(self, action):
        info, terminated = self.schedule[self.t % len(self.schedule)]
        self.t += 1
        return np.array([self.t, action]), float(self.t), terminated, False, _copy(info)


def _copy(x):
    """A fresh copy of an info (an env hands out new objects each step)."""
    if isinstance(x, dict):
        return {k: _copy(v) for k, v in x.items()}
    if isinstance(x, np.ndarray):
        return x.copy()
    return x


_DTYPES = [np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
           np.uint64, np.bool_, np.float16, np.longdouble, np.complex64, np.complex128]
KEYS = st.sampled_from(["a", "b", "c", "_a", "final_obs", 1, "episode"])
SCALARS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.integers(-(2**70), 2**70),
    st.integers(-3, 300),
    st.booleans(),
    st.builds(lambda d, v: np.asarray(v).astype(d)[()], st.sampled_from(_DTYPES), st.integers(-3, 300)),
)
ARRAYS = st.builds(
    lambda d, shape, v: np.full(shape, v).astype(d),
    st.sampled_from(_DTYPES),
    st.sampled_from([(2,), (3,), (2, 2), ()]),
    st.integers(-3, 300),
)
OBJECTS = st.one_of(st.text(max_size=3), st.none(), st.tuples(st.integers(0, 3)), st.lists(st.integers(0, 3), max_size=2),
                    st.just(np.array(["x", "yz"])), st.just(np.array([1, 2], dtype=">i4")))
LEAVES = st.one_of(SCALARS, SCALARS, ARRAYS, OBJECTS)
INFOS = st.recursive(st.dictionaries(KEYS, LEAVES, max_size=4),
                     lambda inner: st.dictionaries(KEYS, st.one_of(LEAVES, inner), max_size=4), max_leaves=8)
# Mostly the same dict every step, as real envs do; sometimes another one.
STEP_INFOS = st.one_of(st.just({"x_position": 0.5, "lives": 3, "frame": np.int64(7), "vec": np.arange(3.0)}),
                       st.just({}), INFOS)
SCHEDULES = st.lists(st.tuples(STEP_INFOS, st.booleans()), min_size=1, max_size=6)


def _same_outcome(ref_call, env_call, where: str) -> bool:
    """Run both calls: equal results, or the same exception type from both (then False)."""
    try:
        expected = ref_call()
    except Exception as exc:  # noqa: BLE001 - compared below
        with pytest.raises(type(exc)):
            env_call()
        return False
    assert_same(expected, env_call(), where)
    return True


def _run_both(ref, env, steps, rng):
    """Reset and step both, DISABLED mode's masked resets included, until one raises."""
    if not _same_outcome(lambda: ref.reset(seed=1), lambda: env.reset(seed=1), "reset"):
        return
    for t in range(steps):
        actions = rng.integers(0, 2, ref.num_envs)
        outcome = []
        if not _same_outcome(lambda: outcome.append(ref.step(actions)) or outcome[-1], lambda: env.step(actions),
                             f"step {t}"):
            return
        done = outcome[0][2] | outcome[0][3]
        if ref.metadata["autoreset_mode"] == AutoresetMode.DISABLED and done.any():
            # (a dict each: SyncVectorEnv pops reset_mask from the one it is given)
            if not _same_outcome(lambda: ref.reset(options={"reset_mask": done}),
                                 lambda: env.reset(options={"reset_mask": done}), f"reset_mask at {t}"):
                return


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(schedules=st.lists(SCHEDULES, min_size=3, max_size=3), reset_infos=st.lists(STEP_INFOS, min_size=1, max_size=2),
       mode=st.sampled_from(MODES), step_in_caller=st.booleans())
def test_infos_equal_sync_vector_env(schedules, reset_infos, mode, step_in_caller):
    fns = [lambda s=s: ScheduleEnv(s, reset_infos) for s in schedules]
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    with FastVectorEnv(fns, num_workers=2, autoreset_mode=mode, step_in_caller=step_in_caller) as env:
        _run_both(ref, env, 12, np.random.default_rng(0))


REAL_LIKE = [
    # MuJoCo: the same floats every step
    [({"x_position": 0.5, "x_velocity": 1.5, "reward_run": 0.25, "reward_ctrl": -0.125}, False)] * 3
    + [({"x_position": 0.75, "x_velocity": 1.0, "reward_run": 0.5, "reward_ctrl": -0.25}, True)],
    # Atari: ints; RecordEpisodeStatistics' episode dict when an episode ends
    [({"lives": 3, "episode_frame_number": 4, "frame_number": 8}, False),
     ({"lives": 2, "episode_frame_number": 8, "frame_number": 12,
       "episode": {"r": np.float32(1.0), "l": np.int32(2), "t": 0.5}}, True)],
    # a key that changes type between steps, strings, a shape change, a big int
    [({"k": 1}, False), ({"k": 1.5, "s": "text"}, False), ({"k": 2**65, "v": np.zeros(2)}, False),
     ({"v": np.zeros(3)}, True)],
]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize("case", range(len(REAL_LIKE)))
def test_infos_of_real_env_kinds(case, mode):
    schedule = REAL_LIKE[case]
    fns = [lambda k=k: ScheduleEnv(schedule[k % len(schedule):] + schedule[:k % len(schedule)], [{"lives": 3}, {}])
           for k in range(5)]
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    with FastVectorEnv(fns, num_workers=2, autoreset_mode=mode) as env:
        _run_both(ref, env, 20, np.random.default_rng(1))


class NoneInfoEnv(ScheduleEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, None


@pytest.mark.parametrize("step_in_caller", [False, True])
def test_an_info_that_is_not_a_dict_fails_as_in_sync(step_in_caller):
    # On every step, also after a caller caught the error and stepped on (the value then
    # has a signature its worker has sent before, and must travel on the pipe again).
    fns = [lambda: NoneInfoEnv([({}, False)], [{}])] * 2
    ref = SyncVectorEnv(fns)
    ref.reset(seed=0)
    with FastVectorEnv(fns, num_workers=2, step_in_caller=step_in_caller) as env:
        env.reset(seed=0)
        for _ in range(3):
            with pytest.raises(AttributeError):
                ref.step(np.zeros(2, np.int64))
            with pytest.raises(AttributeError):
                env.step(np.zeros(2, np.int64))


def test_steps_without_infos_send_nothing():
    # A step of envs that return no info costs no pipe message and no info work.
    fns = [lambda: ScheduleEnv([({}, False)], [{}])] * 4
    with FastVectorEnv(fns, num_workers=2) as env:
        env.reset(seed=0)
        calls = []
        original = env._staging.infos.build
        env._staging.infos.build = lambda *args: calls.append(args) or original(*args)
        for _ in range(5):
            assert env.step(np.zeros(4, np.int64))[4] == {}
        assert calls == []


def test_a_value_too_big_for_the_row_travels_on_the_pipe():
    big = np.arange(4096, dtype=np.float64)  # 32 KiB: more than an info row holds
    fns = [lambda: ScheduleEnv([({"image": big, "x": 1.0}, False)], [{}])] * 3
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2) as env:
        _run_both(ref, env, 3, np.random.default_rng(2))


def test_numpy_scalars_are_copied_from_their_object_header():
    """The writer copies a NumPy scalar's value from right after its object header (NumPy's
    public scalar structs) once a probe has shown the layout; the parity tests above check
    the values. Here: the probe accepts the dtypes envs return, so the fast copy is used."""
    from fastvec.vector._infos.kernels import value_at_header

    for dtype in (np.float64, np.float32, np.int64, np.int32, np.uint8, np.bool_, np.float16, np.complex128):
        assert value_at_header(np.dtype(dtype)), dtype
