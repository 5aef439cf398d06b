"""FastVectorEnv against SyncVectorEnv: same seeds and actions give the same outputs, bit for bit."""
from __future__ import annotations

import gc
import os

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from fastvec import FastVectorEnv
from helpers import assert_same, block_mappings, run_side_by_side
from toy_envs import SPACES, ToyEnv

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


def toy_fns(n, **kwargs):
    # Different episode lengths per env, so envs finish at different times.
    return [lambda k=k: ToyEnv(max_len=3 + 4 * (k % 3), **kwargs) for k in range(n)]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize("obs", sorted(SPACES))
def test_parity_observation_spaces(obs, mode):
    fns = toy_fns(5, obs_space=obs)
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    # Odd obs spaces in worker processes only; the caller steps envs in the other tests.
    with FastVectorEnv(fns, num_workers=2, autoreset_mode=mode, step_in_caller=obs not in ("dict", "tuple")) as env:
        episodes = run_side_by_side(ref, env, seed=123, steps=60)
    assert episodes > 10


@pytest.mark.parametrize("act", sorted(SPACES))
def test_parity_action_spaces(act):
    fns = toy_fns(4, obs_space="box", act_space=act)
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=3) as env:
        run_side_by_side(ref, env, seed=7, steps=40)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize("env_id", ["CartPole-v1", "MountainCarContinuous-v0", "Acrobot-v1", "Pendulum-v1"])
def test_parity_classic_control(env_id, mode):
    fns = [lambda: gym.make(env_id) for _ in range(6)]
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    with FastVectorEnv(fns, num_workers=2, autoreset_mode=mode) as env:
        run_side_by_side(ref, env, seed=5, steps=250 if env_id == "CartPole-v1" else 60)


class OddTypesEnv(gym.Env):
    """Returns rewards and flags of every type SyncVectorEnv accepts, and lists instead of tuples."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(3)
    REWARDS = (1.5, np.float32(0.1), 2, np.float64(-3.25), True, np.int64(7))
    FLAGS = (False, np.False_, 0, np.True_, 1, True)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        self.t += 1
        k = int(self.np_random.integers(0, 6))
        terminated = self.FLAGS[k] if self.t > 2 else np.False_
        truncated = self.FLAGS[(k + int(action)) % 6] if self.t > 4 else False
        info = {"k": k} if k % 2 else {}
        return [self.np_random.uniform(-1, 1, 2).astype(np.float32), self.REWARDS[k], terminated, truncated, info]



class OddObservationsEnv(OddTypesEnv):
    """Observations the env loop cannot copy straight into its row, now and then: float64
    arrays, lists, a strided view, a big-endian array, one that it reuses and mutates."""

    def __init__(self):
        self._buf = np.zeros(4, np.float32)

    def _odd(self, obs):
        k = int(self.np_random.integers(0, 6))
        if k == 0:
            return obs.astype(np.float64)  # NumPy casts it on stacking
        if k == 1:
            return obs.tolist()
        if k == 2:
            self._buf[::2] = obs
            return self._buf[::2]  # not contiguous, and mutated by the next step
        if k == 3:
            return obs.astype(">f4")
        return obs  # exact: the loop copies it itself

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return self._odd(obs), info

    def step(self, action):
        obs, *rest = super().step(action)
        return [self._odd(obs), *rest]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize("step_in_caller", [True, False])
@pytest.mark.parametrize("env_cls", [OddTypesEnv, OddObservationsEnv], ids=lambda c: c.__name__)
def test_parity_odd_types(env_cls, mode, step_in_caller):
    # The compiled env loop stores floats and bools directly and everything else
    # through NumPy, as SyncVectorEnv's item assignment does. It copies exact
    # ndarray observations into the shared slab as they come; any other
    # observation makes the worker stack them all with NumPy's casts.
    fns = [env_cls for _ in range(4)]
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    with FastVectorEnv(fns, num_workers=2, autoreset_mode=mode, step_in_caller=step_in_caller) as env:
        episodes = run_side_by_side(ref, env, seed=3, steps=80)
    assert episodes > 20


@pytest.mark.parametrize("failing", [1, 2], ids=["in-caller", "in-worker"])
def test_env_error_names_the_failing_env(failing):
    class FailsAtOneEnv(OddTypesEnv):
        def step(self, action):
            if self.index == failing:
                raise RuntimeError("boom")
            return super().step(action)

    def make(k):
        env = FailsAtOneEnv()
        env.index = k
        return env

    # 4 envs, 2 workers, the caller steps envs 0-1 itself and a worker process 2-3.
    env = FastVectorEnv([lambda k=k: make(k) for k in range(4)], num_workers=2, step_in_caller=True)
    env.reset(seed=0)
    with pytest.raises(RuntimeError, match="boom") as info:
        env.step(np.zeros(4, np.int64))
    assert info.value.env_index == failing
    assert env.closed


class KeepsItsAction(gym.Env):
    """Keeps the action object it was handed (an env that logs or replays its actions)."""

    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (3,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.action = action
        return np.zeros(2, np.float32), 0.0, False, False, {}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16])
def test_caller_share_gets_its_action_rows_as_sync_hands_them(dtype):
    """With step_in_caller=True the caller's own envs get their rows of the very array the
    user passed (SyncVectorEnv's ``iterate``: views, in the user's dtype); a worker's envs
    get copies of the same values."""
    actions = np.arange(12).reshape(4, 3).astype(dtype)
    ref = SyncVectorEnv([KeepsItsAction] * 4)
    ref.reset(seed=0)
    ref.step(actions)
    with FastVectorEnv([KeepsItsAction] * 4, num_workers=2, step_in_caller=True) as env:
        env.reset(seed=0)
        env.step(actions)
        kept = env.get_attr("action")
        own = env._pool._local_envs
        assert len(own) == 2
        for k in range(4):
            expected = ref.envs[k].action
            assert np.shares_memory(expected, actions)
            assert kept[k].dtype == expected.dtype == dtype and kept[k].shape == expected.shape
            np.testing.assert_array_equal(kept[k], expected)
        for k, own_env in enumerate(own):
            assert np.shares_memory(own_env.action, actions)
            assert own_env.action.base is not None and own_env.action.ctypes.data == actions[k].ctypes.data
    ref.close()


@pytest.mark.parametrize("step_in_caller", [True, False])
@pytest.mark.parametrize("num_workers", [1, 2, 3, 7])
def test_parity_worker_counts_and_seeds(num_workers, step_in_caller):
    fns = toy_fns(7, obs_space="dict")
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=num_workers, step_in_caller=step_in_caller) as env:
        assert len(env.processes) == num_workers - step_in_caller
        for seed in (0, [11, 3, None, 4, 5, 6, 9]):
            if isinstance(seed, list):
                seed = [s if s is not None else 99 for s in seed]
            run_side_by_side(ref, env, seed=seed, steps=25)


def test_reset_options_and_mask_do_not_mutate_caller_dict():
    fns = toy_fns(4)
    ref = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.DISABLED)
    with FastVectorEnv(fns, num_workers=2, autoreset_mode=AutoresetMode.DISABLED) as env:
        assert_same(ref.reset(seed=1, options={"tag": 5}), env.reset(seed=1, options={"tag": 5}))
        mask = np.array([True, False, False, True])
        options = {"reset_mask": mask, "tag": 9}
        got = env.reset(seed=[10, 11, 12, 13], options=options)
        assert "reset_mask" in options, "the caller's options dict must not be mutated"
        want = ref.reset(seed=[10, 11, 12, 13], options=dict(options))
        assert_same(want, got)
        # A mask that touches only one worker's envs.
        mask = np.array([False, False, True, False])
        assert_same(ref.reset(options={"reset_mask": mask}), env.reset(options={"reset_mask": mask}))


@pytest.mark.parametrize("obs", ["box", "dict", "tuple"])
def test_copy_false_returns_views_of_the_shared_buffer(obs):
    fns = toy_fns(3, obs_space=obs)
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2, copy=False) as env:
        run_side_by_side(ref, env, seed=3, steps=10)
        a = env.step(env.action_space.sample())[0]
        b = env.step(env.action_space.sample())[0]
        leaf = lambda x: x["pos"] if obs == "dict" else (x[0] if obs == "tuple" else x)
        assert np.shares_memory(leaf(a), leaf(b))


def test_copy_true_returns_fresh_arrays():
    with FastVectorEnv(toy_fns(2), num_workers=2) as env:
        a, _ = env.reset(seed=0)
        b = env.step(env.action_space.sample())[0]
        assert not np.shares_memory(a, b)


def test_shared_memory_false_pipes_observations():
    fns = toy_fns(4, obs_space="dict")
    ref = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    with FastVectorEnv(fns, num_workers=2, shared_memory=False, autoreset_mode=AutoresetMode.SAME_STEP) as env:
        run_side_by_side(ref, env, seed=4, steps=30)


class TextEnv(gym.Env):
    """Text observations (no fixed-size array form): they travel on the pipes."""

    observation_space = gym.spaces.Text(5)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "abc", {}

    def step(self, action):
        return "abd" if action else "ab", 0.0, False, False, {}


@pytest.mark.parametrize("shared_memory", [True, False])
def test_text_observations_go_through_the_pipes(shared_memory):
    fns = [TextEnv, TextEnv, TextEnv]
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2, shared_memory=shared_memory) as env:
        assert_same(ref.reset(seed=0), env.reset(seed=0))
        for actions in ([0, 1, 0], [1, 1, 0], [1, 1, 0]):
            assert_same(ref.step(np.array(actions)), env.step(np.array(actions)))


class Anything(gym.Space):
    """A custom space: Gymnasium has no batching rule for it but a tuple."""

    def sample(self, mask=None, probability=None):
        return "x"

    def contains(self, x):
        return True

    def __eq__(self, other):
        return isinstance(other, Anything)


class CustomSpaceEnv(TextEnv):
    observation_space = Anything()


def test_custom_observation_space_needs_shared_memory_false():
    fns = [CustomSpaceEnv, CustomSpaceEnv]
    # As AsyncVectorEnv: nothing of such an observation fits a shared buffer.
    with pytest.raises(ValueError, match="Anything.*shared_memory=False"):
        FastVectorEnv(fns, num_workers=1)
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2, shared_memory=False) as env:
        assert_same(ref.reset(seed=0), env.reset(seed=0))
        assert_same(ref.step(np.array([0, 1])), env.step(np.array([0, 1])))


def test_call_get_attr_set_attr_render():
    fns = [lambda k=k: ToyEnv(max_len=k + 2, render_mode="rgb_array") for k in range(5)]
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2) as env:
        ref.reset(seed=0)
        env.reset(seed=0)
        assert env.get_attr("max_len") == ref.get_attr("max_len") == (2, 3, 4, 5, 6)
        env.set_attr("max_len", 50)
        assert env.get_attr("max_len") == (50,) * 5
        env.set_attr("max_len", [1, 2, 3, 4, 5])
        assert env.get_attr("max_len") == (1, 2, 3, 4, 5)
        with pytest.raises(ValueError, match="length equal"):
            env.set_attr("max_len", [1, 2])
        assert_same(env.call("render"), ref.call("render"))
        assert_same(env.render(), ref.render())
        assert env.np_random_seed == ref.np_random_seed
        with pytest.raises(ValueError, match="use `step` directly"):
            env.call("step", 0)


def test_vector_env_attributes_match_sync():
    fns = [lambda: gym.make("CartPole-v1") for _ in range(3)]
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2) as env:
        assert isinstance(env, gym.vector.VectorEnv)
        assert env.num_envs == 3
        assert env.single_observation_space == ref.single_observation_space
        assert env.observation_space == ref.observation_space
        assert env.single_action_space == ref.single_action_space
        assert env.action_space == ref.action_space
        assert env.metadata == ref.metadata
        assert env.render_mode == ref.render_mode
        assert env.unwrapped is env


def test_async_api():
    from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError

    fns = toy_fns(4)
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2) as env:
        env.reset_async(seed=2)
        with pytest.raises(AlreadyPendingCallError):
            env.step_async(np.zeros(4, dtype=np.int64))
        assert_same(ref.reset(seed=2), env.reset_wait())
        with pytest.raises(NoAsyncCallError):
            env.step_wait()
        actions = np.array([1, 2, 3, 4])
        env.step_async(actions)
        assert_same(ref.step(actions), env.step_wait(timeout=10))
        env.call_async("max_len")
        assert env.call_wait() == ref.get_attr("max_len")


def test_step_wait_timeout():
    import multiprocessing

    fns = [lambda: ToyEnv(step_sleep=0.5) for _ in range(2)]
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2, step_in_caller=False) as env:
        assert_same(ref.reset(seed=0), env.reset(seed=0))
        env.step_async(np.array([0, 1]))
        with pytest.raises(multiprocessing.TimeoutError, match="still pending"):
            env.step_wait(timeout=0.05)
        # The step is still pending: waiting again collects it.
        assert_same(ref.step(np.array([0, 1])), env.step_wait())


@pytest.mark.parametrize("step_in_caller", [True, False])
def test_errors_in_call_and_attributes_keep_the_env_usable(step_in_caller):
    with FastVectorEnv(toy_fns(3), num_workers=2, step_in_caller=step_in_caller) as env:
        env.reset(seed=0)
        with pytest.raises(AttributeError) as info:
            env.get_attr("no_such_attribute")
        assert info.value.env_index == 0
        with pytest.raises(AttributeError):
            env.call("no_such_method", 1)
        assert env.get_attr("max_len") == (3, 7, 11)
        env.step(np.zeros(3, np.int64))
        assert not env.closed


@pytest.mark.parametrize("bad, error, match", [
    (np.zeros(3, dtype=np.int64), ValueError, "3 actions for 4 envs"),
    (np.zeros(5, dtype=np.int64), ValueError, "5 actions for 4 envs"),
    ([0, 1], ValueError, "2 actions for 4 envs"),
    (0, TypeError, "batch of 4 actions"),
])
def test_bad_actions_are_rejected_before_reaching_workers(bad, error, match):
    # The errors Gymnasium's vector envs raise: a batch of the wrong size is a ValueError,
    # a scalar a TypeError.
    with FastVectorEnv(toy_fns(4), num_workers=2) as env:
        env.reset(seed=0)
        with pytest.raises(error, match=match):
            env.step(bad)
        # The env is still usable afterwards.
        env.step(np.array([0, 1, 2, 3]))


class EchoEnv(gym.Env):
    """Reports the action it got, whatever its value, in its info."""

    observation_space = gym.spaces.Box(-1000, 1000, (), np.int64)
    action_space = gym.spaces.Discrete(4)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.array(0), {}

    def step(self, action):
        return np.array(0), 0.0, False, False, {"action": action}


@pytest.mark.parametrize("actions", [
    np.array([4, -1, 100]),  # out of range
    np.array([0, 3, 7], dtype=np.int32),  # another integer dtype
    np.array([0.5, 1.0, 2.75]),  # floats for a Discrete space
    np.array([[1], [2], [3]]),  # another shape per env
    [1, 2, 3],  # a list: the envs get Python ints
    np.array([True, False, True]),
])
def test_actions_reach_the_env_as_in_gymnasium(actions):
    # SyncVectorEnv hands env i what iterating the batch gives, unchecked: so does fastvec.
    fns = [EchoEnv] * 3
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2) as env:
        assert_same(ref.reset(seed=0), env.reset(seed=0))
        for _ in range(2):
            assert_same(ref.step(actions), env.step(actions))


def test_bad_dict_actions():
    with FastVectorEnv(toy_fns(2, act_space="dict"), num_workers=1) as env:
        env.reset(seed=0)
        # (the KeyError SyncVectorEnv's iterate raises, with what was expected)
        with pytest.raises(KeyError, match="actions must be a batch of 2 actions for Dict"):
            env.step({"pos": np.zeros((2, 3), np.float32)})


@pytest.mark.parametrize("kwargs, error", [
    ({"num_workers": 0}, ValueError),
    ({"num_workers": 5}, ValueError),
    ({"num_workers": 1.5}, TypeError),
    ({"observation_mode": "nope"}, ValueError),
    ({"autoreset_mode": "sometimes"}, ValueError),
    ({"max_concurrency": 2}, TypeError),
])
def test_bad_constructor_arguments(kwargs, error):
    with pytest.raises(error):
        FastVectorEnv(toy_fns(4), **kwargs)


def test_bad_env_fns():
    with pytest.raises(TypeError, match="empty"):
        FastVectorEnv([])
    with pytest.raises(TypeError, match="not callable"):
        FastVectorEnv([ToyEnv()])
    with pytest.raises(TypeError, match="sequence"):
        FastVectorEnv(3)


def test_mismatched_spaces():
    with pytest.raises(RuntimeError, match="observation space"):
        FastVectorEnv([lambda: ToyEnv(obs_space="box"), lambda: ToyEnv(obs_space="discrete")], num_workers=2)
    with pytest.raises(RuntimeError, match="action space"):
        FastVectorEnv([lambda: ToyEnv(act_space="box"), lambda: ToyEnv(act_space="discrete")], num_workers=1)


def test_disabled_mode_requires_reset_of_finished_envs():
    fns = [lambda: ToyEnv(max_len=1) for _ in range(2)]
    with FastVectorEnv(fns, num_workers=2, autoreset_mode=AutoresetMode.DISABLED) as env:
        env.reset(seed=0)
        env.step(np.array([0, 0]))
        with pytest.raises(AssertionError, match="reset_mask"):
            env.step(np.array([0, 0]))
        env.reset(options={"reset_mask": np.array([True, True])})
        env.step(np.array([0, 0]))


@pytest.mark.parametrize("context", ["fork", "forkserver", "spawn"])
def test_start_methods(context):
    fns = toy_fns(3, obs_space="tuple")
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2, context=context) as env:
        run_side_by_side(ref, env, seed=8, steps=15)


def test_close_ends_workers_and_frees_memory():
    env = FastVectorEnv(toy_fns(4), num_workers=2)
    processes = list(env.processes)
    assert block_mappings() and all(block_mappings(p.pid) for p in processes)
    env.reset(seed=0)
    env.close()
    env.close()  # twice is fine
    assert all(not p.is_alive() for p in processes)
    gc.collect()
    assert not block_mappings()
    from gymnasium.error import ClosedEnvironmentError

    with pytest.raises(ClosedEnvironmentError):
        env.step(np.zeros(4, dtype=np.int64))


def test_copy_false_views_outlive_close():
    env = FastVectorEnv(toy_fns(2), num_workers=2, copy=False)
    obs, _ = env.reset(seed=0)
    expected = obs.copy()
    env.close()
    gc.collect()
    # The view keeps the mapping (and so its values) alive; it goes with the view.
    np.testing.assert_array_equal(obs, expected)
    assert block_mappings()
    del obs
    gc.collect()
    assert not block_mappings()


def test_garbage_collection_closes():
    env = FastVectorEnv(toy_fns(2), num_workers=2)
    processes = list(env.processes)
    env.reset(seed=0)
    del env
    gc.collect()
    for p in processes:
        p.join(5)
    assert all(not p.is_alive() for p in processes)
    assert not block_mappings()


def test_close_while_step_pending():
    env = FastVectorEnv(toy_fns(2), num_workers=2)
    env.reset(seed=0)
    env.step_async(np.array([0, 1]))
    env.close()
    assert env.closed


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity on this platform")
@pytest.mark.parametrize("pin_workers", [None, True, False])
def test_pin_workers(pin_workers):
    cpus = sorted(os.sched_getaffinity(0))
    num_workers = len(cpus)  # with the caller, one process more than CPUs: None pins
    with FastVectorEnv(toy_fns(num_workers), num_workers=num_workers, pin_workers=pin_workers) as env:
        got = [os.sched_getaffinity(p.pid) for p in env.processes]
    if pin_workers is False:
        assert got == [set(cpus)] * num_workers
    else:
        assert got == [{cpu} for cpu in cpus]


def test_no_pinning_when_every_process_has_a_cpu():
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        pytest.skip("needs 2 CPUs")
    # One worker and the caller stepping a share itself: 2 processes on 2+ CPUs.
    with FastVectorEnv(toy_fns(2), num_workers=2, step_in_caller=True) as env:
        assert [os.sched_getaffinity(p.pid) for p in env.processes] == [cpus]
    with pytest.raises(TypeError, match="pin_workers"):
        FastVectorEnv(toy_fns(2), num_workers=1, pin_workers="yes")


def test_windows_is_refused_before_any_worker_starts(monkeypatch):
    import fastvec.vector.fast_vector_env as shared_module

    started = []
    monkeypatch.setattr(shared_module.sys, "platform", "win32")
    monkeypatch.setattr(shared_module, "WorkerPool", lambda *a, **k: started.append(1))
    with pytest.raises(RuntimeError, match="Linux and macOS only"):
        FastVectorEnv([lambda: gym.make("CartPole-v1")])
    assert started == []
