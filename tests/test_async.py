"""send/recv with surplus envs (batch_size < num_envs): per-env results equal a synchronous run."""
from __future__ import annotations

import multiprocessing
import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import NoAsyncCallError
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from fastvec import FastVectorEnv
from helpers import assert_same
from toy_envs import ToyEnv


def _fns(n, **kwargs):
    # Uneven step times, so workers finish in varying order.
    return [lambda k=k: ToyEnv(max_len=4 + k % 5, step_sleep=0.0005 * (k % 3), **kwargs) for k in range(n)]


def _per_env_replay(fns, seed, env_id, actions, mode):
    """What a synchronous single-env vector env gives for the same seed and actions."""
    ref = SyncVectorEnv([fns[env_id]], autoreset_mode=mode)
    out = [ref.reset(seed=seed + env_id)]
    for a in actions:
        out.append(ref.step(a[None]))
    return out


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("obs_space", ["box", "dict"])
def test_send_recv_per_env_equals_sync(mode, obs_space):
    n, workers, batch = 8, 4, 4
    fns = _fns(n, obs_space=obs_space)
    seed = 100
    got = {i: [] for i in range(n)}
    sent = {i: [] for i in range(n)}
    rng = np.random.default_rng(0)
    with FastVectorEnv(fns, num_workers=workers, batch_size=batch, autoreset_mode=mode) as env:
        env.async_reset(seed=seed)
        for _ in range(120):
            obs, rew, term, trunc, infos = env.recv()
            ids = infos["env_id"]
            assert len(ids) == batch
            for k, i in enumerate(ids):
                row = _row(obs, k)
                row_infos = _info_row(infos, k)
                got[int(i)].append((row, rew[k], term[k], trunc[k], row_infos))
            actions = rng.integers(0, 7, size=len(ids))
            for k, i in enumerate(ids):
                sent[int(i)].append(actions[k])
            env.send(actions, ids)
        env.recv()
    for i in range(n):
        assert len(got[i]) >= 5, f"env {i} starved: {len(got[i])} results"
        # Every result but the first answers an action sent, in order.
        ref = _per_env_replay(fns, seed, i, sent[i][: len(got[i]) - 1], mode)
        for t, (mine, theirs) in enumerate(zip(got[i], ref)):
            if t == 0:
                assert_same(theirs[0], _batch1(mine[0]), f"env {i} reset obs")
                continue
            r_obs, r_rew, r_term, r_trunc, r_info = theirs
            assert_same(_row(r_obs, 0), mine[0], f"env {i} step {t} obs")
            assert r_rew[0] == mine[1] and r_term[0] == mine[2] and r_trunc[0] == mine[3], f"env {i} step {t}"
            assert_same(_info_row(r_info, 0), mine[4], f"env {i} step {t} infos")


def _row(obs, k):
    if isinstance(obs, dict):
        return {key: _row(v, k) for key, v in obs.items()}
    return obs[k]


def _batch1(row):
    if isinstance(row, dict):
        return {key: _batch1(v) for key, v in row.items()}
    return np.asarray(row)[None]


def _info_row(infos, k):
    out = {}
    for key, value in infos.items():
        if key.startswith("_") or key == "env_id":
            continue
        mask = infos.get(f"_{key}")
        if isinstance(value, dict):
            if mask is not None and mask[k]:
                out[key] = _info_row(value, k)
        elif mask is not None and mask[k]:
            out[key] = value[k]
    # (key order follows the other envs of a batch, so rows compare without it)
    return dict(sorted(out.items()))


def test_recv_returns_whole_workers_and_zero_copy_when_contiguous():
    fns = [lambda: ToyEnv(max_len=50) for _ in range(6)]
    with FastVectorEnv(fns, num_workers=3, batch_size=6, copy=False) as env:
        env.async_reset(seed=0)
        obs, rew, term, trunc, infos = env.recv()
        np.testing.assert_array_equal(infos["env_id"], np.arange(6))
        env.send(np.zeros(6, np.int64), infos["env_id"])
        obs2, *_ = env.recv()
        assert np.shares_memory(obs, obs2)


def test_send_validation():
    with FastVectorEnv(_fns(4), num_workers=2, batch_size=2) as env:
        env.async_reset(seed=0)
        obs, rew, term, trunc, infos = env.recv()
        ids = infos["env_id"]
        with pytest.raises(ValueError, match="split workers"):
            env.send(np.zeros(1, np.int64), ids[:1])
        other = np.setdiff1d(np.arange(4), ids)
        with pytest.raises(ValueError, match="still stepping"):
            env.send(np.zeros(2, np.int64), other)
        with pytest.raises(ValueError, match="3 actions for 2 envs"):
            env.send(np.zeros(3, np.int64), ids)
        with pytest.raises(RuntimeError, match="send"):
            env.step(np.zeros(4, np.int64))
        env.send(np.zeros(2, np.int64), ids)
        # reset() waits out what is in flight and resets everything.
        obs, infos = env.reset(seed=1)
        assert obs.shape == (4, 4)
        env.send(np.zeros(4, np.int64))
        assert len(env.recv()[4]["env_id"]) == 2


def test_calls_wait_until_send_recv_steps_are_received():
    """A call or set_attr while steps are in flight would have its workers' step results read
    as its replies (and the next recv wait for ever): it raises, and works once they are in."""
    from fastvec.errors import AlreadyPendingCallError

    with FastVectorEnv([lambda: ToyEnv(step_sleep=0.05) for _ in range(4)], num_workers=2, batch_size=2) as env:
        env.async_reset(seed=0)
        for call in (lambda: env.call("max_len"), lambda: env.get_attr("max_len"),
                     lambda: env.set_attr("max_len", 7)):
            with pytest.raises(AlreadyPendingCallError, match="in flight"):
                call()
        got = [env.recv()[4]["env_id"] for _ in range(2)]
        assert sorted(np.concatenate(got).tolist()) == [0, 1, 2, 3]
        env.set_attr("max_len", 7)
        assert env.get_attr("max_len") == (7, 7, 7, 7)
        env.send(np.zeros(2, np.int64), got[0])
        with pytest.raises(AlreadyPendingCallError, match="in flight"):
            env.call("max_len")
        np.testing.assert_array_equal(env.recv()[4]["env_id"], got[0])


def test_recv_without_send_and_timeout():
    with FastVectorEnv([lambda: ToyEnv(step_sleep=0.5) for _ in range(2)], num_workers=2, batch_size=1) as env:
        env.reset(seed=0)
        with pytest.raises(NoAsyncCallError):
            env.recv()
        env.send(np.zeros(2, np.int64), [0, 1])
        with pytest.raises(multiprocessing.TimeoutError):
            env.recv(timeout=0.05)


def test_recv_takes_what_is_in_flight_and_refuses_once_all_is_received():
    # batch_size=4 is two workers' envs: with one worker's out, recv returns those two;
    # once everything sent has come back, recv has nothing to wait for.
    with FastVectorEnv([lambda: ToyEnv(max_len=1000) for _ in range(8)], num_workers=4, batch_size=4) as env:
        env.async_reset(seed=0)
        for _ in range(2):
            env.recv(timeout=10)
        with pytest.raises(NoAsyncCallError):
            env.recv(timeout=2)
        for sent in ([2, 3], [4, 5, 6, 7], [0, 1]):
            env.send(np.zeros(len(sent), np.int64), sent)
            *_, infos = env.recv(timeout=2)
            assert infos["env_id"].tolist() == sent
            with pytest.raises(NoAsyncCallError):
                env.recv(timeout=2)


@pytest.mark.parametrize("kwargs", [
    {"num_workers": 3, "batch_size": 2},  # 8 envs do not split over 3 workers
    {"num_workers": 4, "batch_size": 3},  # 3 is not a multiple of 2 envs per worker
    {"num_workers": 2, "batch_size": 0},
])
def test_bad_batch_size(kwargs):
    with pytest.raises(ValueError):
        FastVectorEnv(_fns(8), **kwargs)


@pytest.mark.parametrize("act_space", ["discrete", "box", "multidiscrete", "dict"])
def test_send_matches_actions_to_env_ids_in_any_order(act_space):
    # Ascending adjacent ids take the slice path, a permutation the general one:
    # both must hand env i the action in the same row as i.
    fns = [lambda: ToyEnv(max_len=1000, act_space=act_space, info_prob=0.0) for _ in range(4)]
    with FastVectorEnv(fns, num_workers=2, batch_size=4) as ordered, \
            FastVectorEnv(fns, num_workers=2, batch_size=4) as permuted:
        for env in (ordered, permuted):
            env.async_reset(seed=3)
            env.recv()
        space = ordered.action_space
        space.seed(0)
        order = np.array([3, 1, 2, 0])
        for t in range(10):
            actions = space.sample()
            ordered.send(actions, np.arange(4))
            permuted.send(_take_rows(actions, order), order.tolist() if t % 2 else order)
            a, b = ordered.recv(), permuted.recv()
            np.testing.assert_array_equal(a[4]["env_id"], b[4]["env_id"])
            assert_same(a[:4], b[:4], f"step {t}")


def _take_rows(actions, rows):
    if isinstance(actions, dict):
        return {key: _take_rows(value, rows) for key, value in actions.items()}
    if isinstance(actions, tuple):
        return tuple(_take_rows(value, rows) for value in actions)
    return actions[rows]


class _EchoesAction(gym.Env):
    """Observes the action it was handed, and its dtype's item size."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float64)
    action_space = gym.spaces.Box(-8.0, 8.0, (3,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(4), {}

    def step(self, action):
        return np.append(np.asarray(action, np.float64), action.dtype.itemsize), 0.0, False, False, {}


def test_send_hands_each_env_its_actions_in_the_dtype_sent_whatever_went_to_other_workers():
    # send tells a worker the dtype of its action rows only when it changes: sends to all
    # workers and to one at a time, in dtypes drawn at random, must each reach every env as
    # sent (a stale dtype reads the bytes wrongly).
    rng = np.random.default_rng(0)
    expected = np.zeros((6, 4))
    with FastVectorEnv([_EchoesAction] * 6, num_workers=3, batch_size=2) as env:
        env.async_reset(seed=0)
        for _ in range(3):
            env.recv()

        def send(ids):
            dtype = (np.float32, np.float64)[rng.integers(2)]
            actions = rng.integers(-8, 8, (len(ids), 3)).astype(dtype)
            env.send(actions, ids)
            expected[ids, :3] = actions
            expected[ids, 3] = np.dtype(dtype).itemsize

        for _ in range(40):
            if rng.random() < 0.3:
                send(np.arange(6))
            else:
                for w in rng.permutation(3):
                    send(np.arange(2 * w, 2 * w + 2))
            for _ in range(3):
                obs, *_, infos = env.recv()
                np.testing.assert_array_equal(obs, expected[infos["env_id"]])


class _CloseMarkingEnv(ToyEnv):
    """Writes its index to ``path`` when closed (closing happens in the worker process)."""

    def __init__(self, path, index, **kwargs):
        super().__init__(**kwargs)
        self.path, self.index = path, index

    def close(self):
        with open(self.path, "a") as f:
            f.write(f"{self.index}\n")


def test_close_with_steps_in_flight_lets_them_finish_and_closes_every_env(tmp_path):
    # An EnvPool-style loop always has a batch in flight when it stops. close() lets it
    # finish instead of joining busy workers until the timeout and then terminating them.
    path = str(tmp_path / "closed.txt")
    fns = [lambda i=i: _CloseMarkingEnv(path, i, step_sleep=0.05) for i in range(4)]
    env = FastVectorEnv(fns, num_workers=2, batch_size=2)
    env.async_reset(seed=0)
    env.send(np.zeros(2, np.int64), env.recv()[4]["env_id"])
    env.close()
    with open(path) as f:
        assert sorted(int(line) for line in f) == [0, 1, 2, 3]


class _Counting(gym.Env):
    """Observation and info ``t`` (steps since the reset), reward ``10 t``; the episode ends
    (terminated) at step ``length``."""

    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int = 5):
        self.length, self.t = length, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), 10.0 * self.t, self.t >= self.length, False, {"t": self.t}


def test_a_reset_that_waits_out_steps_in_flight_keeps_what_their_workers_sent_once():
    """reset() with a send/recv step in flight drops that step's results, but not what its
    worker sent then once for all (the info signature of ``t``): later steps still carry
    ``t`` for every env, as SyncVectorEnv's do."""
    fns = [_Counting] * 4
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2, batch_size=2) as env:
        env.async_reset(seed=0)
        env.recv(), env.recv()
        env.send(np.zeros(2, np.int64), [0, 1])  # (worker 0's first info: a new signature)
        env.reset(seed=0)
        ref.reset(seed=0)
        for _ in range(3):
            want = ref.step(np.zeros(4, np.int64))[4]
            env.send(np.zeros(4, np.int64))
            for _ in range(2):
                infos = env.recv()[4]
                ids = infos["env_id"]
                assert infos["t"].tolist() == want["t"][ids].tolist() and infos["_t"].all(), ids
    ref.close()


def test_disabled_send_refuses_envs_that_ended_until_they_are_reset():
    """autoreset_mode=DISABLED with send/recv: an env that ended must be reset before it is
    sent actions (AssertionError, as SyncVectorEnv's step raises); also through step() after
    an end that recv handed back."""
    fns = [lambda: _Counting(1)] * 4
    with FastVectorEnv(fns, num_workers=2, batch_size=2, autoreset_mode=AutoresetMode.DISABLED) as env:
        env.async_reset(seed=0)
        env.recv(), env.recv()
        env.send(np.zeros(4, np.int64))
        first = env.recv()[4]["env_id"].tolist()
        with pytest.raises(AssertionError, match=re.escape(f"envs {first} terminated or truncated")):
            env.send(np.zeros(2, np.int64), first)
        env.recv()
        env.reset(options={"reset_mask": np.array([True, True, False, False])})
        env.send(np.zeros(2, np.int64), [0, 1])  # (reset: allowed)
        env.recv()
    with FastVectorEnv(fns, num_workers=2, autoreset_mode=AutoresetMode.DISABLED) as env:
        env.reset(seed=0)
        env.send(np.zeros(4, np.int64))
        env.recv()
        with pytest.raises(AssertionError, match=r"envs \[0, 1, 2, 3\]"):
            env.step(np.zeros(4, np.int64))


def test_a_masked_async_reset_hands_back_the_envs_it_left_out_with_no_new_transition():
    """async_reset with a reset_mask that leaves out some envs of a worker: recv hands them
    back with their observation, reward 0 and flags False (no step happened), and with
    DISABLED one that had ended still needs its reset."""
    fns = [lambda: _Counting(1), lambda: _Counting(1), _Counting, _Counting]
    with FastVectorEnv(fns, num_workers=2, batch_size=2, autoreset_mode=AutoresetMode.DISABLED) as env:
        env.async_reset(seed=0)
        env.recv(), env.recv()
        env.send(np.zeros(2, np.int64), [0, 1])
        obs, rewards, terminated, truncated, infos = env.recv()
        assert rewards.tolist() == [10.0, 10.0] and terminated.all()
        env.async_reset(options={"reset_mask": np.array([True, False, False, False])})
        obs, rewards, terminated, truncated, infos = env.recv()
        assert infos["env_id"].tolist() == [0, 1]
        assert obs.ravel().tolist() == [0.0, 1.0] and rewards.tolist() == [0.0, 0.0]
        assert not terminated.any() and not truncated.any()
        with pytest.raises(AssertionError, match=r"envs \[1\]"):
            env.send(np.zeros(2, np.int64), [0, 1])
