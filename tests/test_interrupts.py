"""Ctrl-C in a step's wait leaves the loop usable (issue 46, item 3).

Each test sends a real SIGINT into a running call: one env, in a worker process, signals the
test's process as its step (or reset) starts and then holds on for a moment, so the caller is
waiting for it when the KeyboardInterrupt comes. The next call must work: the interrupted
command is finished by the workers and returned (``step_wait``, ``reset_wait``, ``recv``, SB3's
``step_wait``) or dropped with a warning (``step``, ``send``, calls) or dropped silently
(``reset``); what comes after equals a reference that ran the same commands uninterrupted.
No worker dies, nothing leaks.
"""
from __future__ import annotations

import gc
import os
import re
import signal
import time
import warnings

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from fastvec import FastVectorEnv, MultiAgentVectorEnv
from helpers import assert_same, block_mappings
from toy_envs import Arena, ToyEnv

HOLD_S = 0.4  # how long the signalling env holds on after it signalled
DELAY_S = 0.1  # how long it waits before it signals: the caller has handed out every command


def _signal_and_hold(pid, delay, hold):
    time.sleep(delay)  # (the caller is then waiting: the commands' hand-off, its own share, are over)
    if pid is not None:
        os.kill(pid, signal.SIGINT)
    time.sleep(hold)


class SigintToy(ToyEnv):
    """ToyEnv whose ``at``-th call of ``on`` ("step" or "reset", counted over its life) sends
    SIGINT to ``pid`` (None: nobody) and then sleeps ``hold`` s. Its episodes last at least
    ``min_len`` steps."""

    def __init__(self, pid=None, on="step", at=-1, hold=HOLD_S, delay=DELAY_S, min_len=1, **kwargs):
        super().__init__(**kwargs)
        self.pid, self.on, self.at, self.hold, self.delay, self.min_len = pid, on, at, hold, delay, min_len
        self.calls = {"step": 0, "reset": 0}

    def _count(self, what):
        self.calls[what] += 1
        if what == self.on and self.calls[what] == self.at:
            _signal_and_hold(self.pid, self.delay, self.hold)

    def reset(self, *, seed=None, options=None):
        self._count("reset")
        out = super().reset(seed=seed, options=options)
        self.length = max(self.length, self.min_len)
        return out

    def step(self, action):
        self._count("step")
        return super().step(action)

    def signal_and_hold(self):
        """A method to ``call``: signals ``pid`` (if any) and holds on; returns ``t``."""
        if self.pid is not None:
            _signal_and_hold(self.pid, self.delay, self.hold)
        return self.t


class SigintArena(Arena):
    """Arena (agents come and go) whose ``at``-th step signals ``pid`` and holds on."""

    def __init__(self, pid=None, at=-1, **kwargs):
        super().__init__(**kwargs)
        self.pid, self.at, self.steps = pid, at, 0

    def step(self, actions):
        self.steps += 1
        if self.steps == self.at:
            _signal_and_hold(self.pid, DELAY_S, HOLD_S)
        return super().step(actions)


def toy_fns(n, signaller=None, pid=None, at=-1, slow=None, **kwargs):
    """n ToyEnvs (box observations, discrete actions). Env ``signaller`` signals ``pid`` at its
    ``at``-th step (``kwargs``: ``on="reset"``, ...), env ``slow`` holds on twice as long then,
    without signalling; only with a ``pid``: a reference passes none, and its envs behave the
    same but for that. Both have no episode end before (steps: ``at`` long at least, not
    truncated), so that their ``at``-th step is the vector env's (not an autoreset's)."""
    def make(k):
        if k not in (signaller, slow):
            return SigintToy(max_len=3 + 4 * (k % 3), info_prob=0.5)
        armed = {} if pid is None else dict(kwargs, pid=pid if k == signaller else None, at=at)
        if k == slow:
            armed["hold"] = 2 * HOLD_S
        return SigintToy(max_len=3 + 4 * (k % 3), info_prob=0.5, trunc_prob=0.0, min_len=max(at, 1), **armed)

    return [lambda k=k: make(k) for k in range(n)]


@pytest.fixture
def sigint():
    """Ctrl-C raises KeyboardInterrupt here (a shell that started this process in the
    background may have left SIGINT ignored); yields this process's pid."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield os.getpid()
    finally:
        signal.signal(signal.SIGINT, old)


@pytest.fixture
def no_leak():
    """Yields a list to put vector envs in; afterwards: every worker was alive until the end,
    and once they are closed no worker and no mapping of the shared block is left."""
    envs = []
    yield envs
    for env in envs:
        fast = getattr(env, "vector_env", env)
        assert all(p.is_alive() for p in fast.processes), "a worker died"
        env.close()
        for p in fast.processes:
            p.join(5)
            assert not p.is_alive(), f"worker {p.pid} still alive"
    del envs[:]
    gc.collect()
    assert not block_mappings(), "this process still maps a shared block"


def _interrupted(call, *args, **kwargs):
    """Run ``call``; assert a KeyboardInterrupt ended it, and quickly (within the hold)."""
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        call(*args, **kwargs)
    assert time.perf_counter() - start < DELAY_S + HOLD_S + 0.5


def _dropped_warnings(record) -> list:
    return [w for w in record if "KeyboardInterrupt" in str(w.message)]


def _actions(t, n=4):
    return np.array([(t + k) % 7 for k in range(n)], dtype=np.int64)


# -- FastVectorEnv ------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["compiled", "general", "step_in_caller"])
def test_step_after_an_interrupted_step_drops_it_and_steps(sigint, no_leak, path):
    ref = SyncVectorEnv(toy_fns(4, signaller=3, at=3))
    env = FastVectorEnv(toy_fns(4, signaller=3, at=3, pid=sigint), num_workers=2,
                        step_in_caller=path == "step_in_caller")
    no_leak.append(env)
    if path == "general":
        env._driver = None
    assert_same(ref.reset(seed=1), env.reset(seed=1), "reset")
    for t in range(2):
        assert_same(ref.step(_actions(t)), env.step(_actions(t)), f"step {t}")
    _interrupted(env.step, _actions(2))
    ref.step(_actions(2))  # (the interrupted step: the workers finish it)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert_same(ref.step(_actions(3)), env.step(_actions(3)), "step 3, after the interrupt")
    assert len(_dropped_warnings(record)) == 1, [str(w.message) for w in record]
    for t in range(4, 30):
        assert_same(ref.step(_actions(t)), env.step(_actions(t)), f"step {t}")
    ref.close()


def _step_1_interrupted(sigint, no_leak):
    """SyncVectorEnv and a FastVectorEnv over the same envs, reset and stepped once alike, then
    the FastVectorEnv's step 1 interrupted by a Ctrl-C (an env signals during it)."""
    ref = SyncVectorEnv(toy_fns(4, signaller=2, at=2))
    env = FastVectorEnv(toy_fns(4, signaller=2, at=2, pid=sigint), num_workers=2)
    no_leak.append(env)
    assert_same(ref.reset(seed=2), env.reset(seed=2), "reset")
    assert_same(ref.step(_actions(0)), env.step(_actions(0)), "step 0")
    _interrupted(env.step, _actions(1))
    return ref, env


def test_step_wait_after_an_interrupted_step_returns_it(sigint, no_leak):
    ref, env = _step_1_interrupted(sigint, no_leak)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert_same(ref.step(_actions(1)), env.step_wait(), "step 1, the interrupted one")
    assert not _dropped_warnings(record)
    for t in range(2, 20):
        assert_same(ref.step(_actions(t)), env.step(_actions(t)), f"step {t}")
    ref.close()


def test_a_step_interrupted_before_it_is_sent_after_an_interrupted_step_leaves_nothing_pending(
        sigint, no_leak, monkeypatch):
    """After an interrupted compiled step that step_wait returned, a Ctrl-C that lands before
    the next step's commands go out leaves no step pending: the one after goes on, with
    nothing to finish or drop."""
    ref, env = _step_1_interrupted(sigint, no_leak)
    assert_same(ref.step(_actions(1)), env.step_wait(), "step 1, the interrupted one")
    pool = env._pool

    def interrupt(*args, **kwargs):
        monkeypatch.undo()
        raise KeyboardInterrupt

    monkeypatch.setattr(pool, "step_started", interrupt)
    with pytest.raises(KeyboardInterrupt):
        env.step(_actions(2))  # (nothing sent)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for t in range(2, 6):
            assert_same(ref.step(_actions(t)), env.step(_actions(t)), f"step {t}")
    assert not _dropped_warnings(record)
    ref.close()


def test_step_async_after_an_interrupted_step_wait(sigint, no_leak):
    """step_async + step_wait (the AsyncVectorEnv API, as SB3-style loops use it)."""
    ref = SyncVectorEnv(toy_fns(4, signaller=1, at=2))
    env = FastVectorEnv(toy_fns(4, signaller=1, at=2, pid=sigint), num_workers=2)
    no_leak.append(env)
    assert_same(ref.reset(seed=3), env.reset(seed=3), "reset")
    env.step_async(_actions(0))
    assert_same(ref.step(_actions(0)), env.step_wait(), "step 0")
    env.step_async(_actions(1))
    _interrupted(env.step_wait)
    ref.step(_actions(1))
    with pytest.warns(UserWarning, match="KeyboardInterrupt"):
        env.step_async(_actions(2))
    assert_same(ref.step(_actions(2)), env.step_wait(), "step 2")
    ref.close()


def test_step_async_twice_without_an_interrupt_still_raises(sigint, no_leak):
    """A genuine misuse keeps AsyncVectorEnv's error, also after an interrupt was recovered."""
    from gymnasium.error import AlreadyPendingCallError

    env = FastVectorEnv(toy_fns(2, signaller=1, pid=sigint, at=1), num_workers=2)
    no_leak.append(env)
    env.reset(seed=0)
    _interrupted(env.step, _actions(0, 2))
    env.step_wait()
    env.step_async(_actions(1, 2))
    with pytest.raises(AlreadyPendingCallError, match="step_async"):
        env.step_async(_actions(1, 2))
    with pytest.raises(AlreadyPendingCallError):
        env.reset()
    env.step_wait()


def test_reset_after_an_interrupted_step(sigint, no_leak):
    ref = SyncVectorEnv(toy_fns(4, signaller=3, at=2))
    env = FastVectorEnv(toy_fns(4, signaller=3, at=2, pid=sigint), num_workers=2)
    no_leak.append(env)
    assert_same(ref.reset(seed=4), env.reset(seed=4), "reset")
    assert_same(ref.step(_actions(0)), env.step(_actions(0)), "step 0")
    _interrupted(env.step, _actions(1))
    ref.step(_actions(1))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert_same(ref.reset(seed=5), env.reset(seed=5), "reset after the interrupt")
        # (a reset without a seed: the envs' generators must have gone through the step too)
        for t in range(2, 20):
            assert_same(ref.step(_actions(t)), env.step(_actions(t)), f"step {t}")
        assert_same(ref.reset(), env.reset(), "unseeded reset")
    assert not _dropped_warnings(record)
    ref.close()


@pytest.mark.parametrize("then", ["reset", "reset_wait", "step", "call"])
def test_after_an_interrupted_reset(sigint, no_leak, then):
    ref = SyncVectorEnv(toy_fns(4, signaller=0, at=2))
    env = FastVectorEnv(toy_fns(4, signaller=0, at=2, pid=sigint, on="reset"), num_workers=2)
    no_leak.append(env)
    assert_same(ref.reset(seed=6), env.reset(seed=6), "reset")
    _interrupted(env.reset, seed=7)
    expected = ref.reset(seed=7)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        if then == "reset":
            assert_same(ref.reset(seed=8), env.reset(seed=8), "the next reset")
        elif then == "reset_wait":
            assert_same(expected, env.reset_wait(), "the interrupted reset")
        elif then == "step":
            assert_same(ref.step(_actions(0)), env.step(_actions(0)), "step after the interrupted reset")
        else:
            assert env.get_attr("max_len") == ref.get_attr("max_len")
    assert len(_dropped_warnings(record)) == (then in ("step", "call")), [str(w.message) for w in record]
    for t in range(1, 15):
        assert_same(ref.step(_actions(t)), env.step(_actions(t)), f"step {t}")
    ref.close()


def test_disabled_autoreset_a_dropped_step_that_ended_an_env(sigint, no_leak):
    """DISABLED: env 0 ends in the dropped step (its 4th); the warning names it, the step that
    dropped it raises as stepping an ended env does, and a masked reset then goes on."""
    from gymnasium.vector import AutoresetMode

    mode = AutoresetMode.DISABLED
    # (env 0's episodes last 4 steps exactly: at=4 is past its max_len, 3)
    ref = SyncVectorEnv(toy_fns(2, signaller=0, at=4), autoreset_mode=mode)
    env = FastVectorEnv(toy_fns(2, signaller=0, at=4, pid=sigint), num_workers=2, autoreset_mode=mode)
    no_leak.append(env)
    assert_same(ref.reset(seed=13), env.reset(seed=13), "reset")

    def step_both(t):
        expected = ref.step(_actions(t, 2))
        assert_same(expected, env.step(_actions(t, 2)), f"step {t}")
        done = expected[2] | expected[3]
        if done.any():
            assert_same(ref.reset(options={"reset_mask": done}), env.reset(options={"reset_mask": done}), f"{t}")

    for t in range(3):
        step_both(t)
    _interrupted(env.step, _actions(3, 2))
    expected = ref.step(_actions(3, 2))
    done = expected[2] | expected[3]
    assert done[0]
    with pytest.warns(UserWarning, match=re.escape(f"envs {np.flatnonzero(done).tolist()} ended in it")):
        with pytest.raises(AssertionError, match="autoreset_mode=DISABLED"):
            env.step(_actions(4, 2))
    assert_same(ref.reset(options={"reset_mask": done}), env.reset(options={"reset_mask": done}), "reset")
    for t in range(5, 15):
        step_both(t)
    ref.close()


@pytest.mark.parametrize("then", ["call_wait", "step"])
def test_after_an_interrupted_call(sigint, no_leak, then):
    ref = SyncVectorEnv(toy_fns(4, signaller=1))
    env = FastVectorEnv(toy_fns(4, signaller=1, pid=sigint), num_workers=2)
    no_leak.append(env)
    assert_same(ref.reset(seed=12), env.reset(seed=12), "reset")
    assert_same(ref.step(_actions(0)), env.step(_actions(0)), "step 0")
    _interrupted(env.call, "signal_and_hold")
    expected = ref.call("signal_and_hold")
    if then == "call_wait":
        assert env.call_wait() == expected
    else:
        with pytest.warns(UserWarning, match="KeyboardInterrupt"):
            assert_same(ref.step(_actions(1)), env.step(_actions(1)), "step 1, after the interrupt")
    for t in range(2, 10):
        assert_same(ref.step(_actions(t)), env.step(_actions(t)), f"step {t}")
    ref.close()


@pytest.mark.parametrize("then", ["recv", "reset"])
def test_recv_after_an_interrupted_recv_returns_what_was_pending(sigint, no_leak, then):
    """send/recv: the recv interrupted while both workers step; the next recvs hand back both
    workers' envs, with the results of the actions sent; then the loop and a reset go on. Or
    a reset right after the interrupt: it waits for both and resets."""
    n = 4
    ref = SyncVectorEnv(toy_fns(n, signaller=0, slow=2, at=2))
    # (the other worker's env 2 is slower still on that step, so recv waits for both)
    env = FastVectorEnv(toy_fns(n, signaller=0, slow=2, at=2, pid=sigint), num_workers=2, batch_size=2)
    no_leak.append(env)
    assert_same(ref.reset(seed=9), env.reset(seed=9), "reset")

    def recv_rows(expected, where, call=env.recv):
        obs, rewards, terminations, truncations, infos = call()
        ids = infos.pop("env_id")
        want = expected[0][ids], expected[1][ids], expected[2][ids], expected[3][ids]
        assert_same(want, (obs, rewards, terminations, truncations), where)
        return ids.tolist()

    env.send(_actions(0))
    expected = ref.step(_actions(0))
    got = recv_rows(expected, "recv 0") + recv_rows(expected, "recv 1")
    assert sorted(got) == list(range(n))
    env.send(_actions(1))
    expected = ref.step(_actions(1))
    _interrupted(env.recv)
    if then == "reset":
        assert_same(ref.reset(seed=10), env.reset(seed=10), "reset after the interrupt")
        env.send(_actions(1))
        expected = ref.step(_actions(1))
    got = recv_rows(expected, "recv after the interrupt") + recv_rows(expected, "the next recv")
    assert sorted(got) == list(range(n))
    for t in range(2, 6):
        env.send(_actions(t))
        expected = ref.step(_actions(t))
        got = recv_rows(expected, f"step {t}, first") + recv_rows(expected, f"step {t}, second")
        assert sorted(got) == list(range(n))
    assert_same(ref.reset(seed=10), env.reset(seed=10), "reset")


def test_send_after_an_interrupted_step(sigint, no_leak):
    ref = SyncVectorEnv(toy_fns(4, signaller=3, at=1))
    env = FastVectorEnv(toy_fns(4, signaller=3, at=1, pid=sigint), num_workers=2)
    no_leak.append(env)
    assert_same(ref.reset(seed=11), env.reset(seed=11), "reset")
    _interrupted(env.step, _actions(0))
    ref.step(_actions(0))
    with pytest.warns(UserWarning, match="KeyboardInterrupt"):
        env.send(_actions(1))
    obs, rewards, terminations, truncations, infos = env.recv()
    infos.pop("env_id")
    assert_same(ref.step(_actions(1)), (obs, rewards, terminations, truncations, infos), "recv")


# -- MultiAgentVectorEnv ------------------------------------------------------------------------
def _ma_actions(t, rows):
    return np.array([(t + k) % 3 for k in range(rows)], dtype=np.int64)


@pytest.mark.parametrize("then", ["step", "reset"])
def test_multi_agent_after_an_interrupted_step(sigint, no_leak, then):
    """Arena's a1 ends at its step 4, the interrupted one: the agent rows after it still equal
    an uninterrupted MultiAgentVectorEnv's (the vector env learnt from the dropped step)."""
    ref = MultiAgentVectorEnv([Arena] * 4, num_workers=1)
    envs = MultiAgentVectorEnv([lambda k=k: SigintArena(pid=sigint if k == 3 else None, at=4) for k in range(4)],
                               num_workers=2)
    no_leak.append(envs)
    rows = envs.num_envs
    assert_same(ref.reset(seed=0), envs.reset(seed=0), "reset")
    for t in range(3):
        assert_same(ref.step(_ma_actions(t, rows)), envs.step(_ma_actions(t, rows)), f"step {t}")
    _interrupted(envs.step, _ma_actions(3, rows))
    ref.step(_ma_actions(3, rows))
    if then == "step":
        with pytest.warns(UserWarning, match="KeyboardInterrupt"):
            out = envs.step(_ma_actions(4, rows))
        assert_same(ref.step(_ma_actions(4, rows)), out, "step 4, after the interrupt")
    else:  # (a masked reset: the envs left out keep the agents the dropped step left them)
        mask = np.array([True, False, True, False])
        assert_same(ref.reset(seed=5, options={"reset_mask": mask}),
                    envs.reset(seed=5, options={"reset_mask": mask}), "reset after the interrupt")
    np.testing.assert_array_equal(ref.agent_mask, envs.agent_mask)
    for t in range(5, 25):
        assert_same(ref.step(_ma_actions(t, rows)), envs.step(_ma_actions(t, rows)), f"step {t}")
    ref.close()


# -- Stable-Baselines3 ------------------------------------------------------------------------------
def _sb3_same(expected, got, where):
    """SB3 step outputs alike, but for the episodes' wall-clock times."""
    for infos in (expected[3], got[3]):
        for info in infos:
            info.get("episode", {}).pop("t", None)
    assert_same(expected[:3], got[:3], where)
    assert len(expected[3]) == len(got[3]), where
    for k, (a, b) in enumerate(zip(expected[3], got[3])):
        assert_same(a, b, f"{where}, infos[{k}]")


@pytest.mark.parametrize("build", ["FastVecEnv", "to_sb3"])
def test_sb3_step_wait_after_an_interrupted_one_returns_it(sigint, no_leak, build):
    """SB3's step_wait was interrupted: the next one returns that step's results (SB3's
    learner still holds the observations the interrupted actions were chosen from), the
    actions given since are not used; then the steps go on as the reference's."""
    pytest.importorskip("stable_baselines3")
    from fastvec.integrations.sb3 import FastVecEnv, to_sb3

    same_step = AutoresetMode.SAME_STEP
    ref = to_sb3(SyncVectorEnv(toy_fns(4, signaller=3, at=3), autoreset_mode=same_step))
    fns = toy_fns(4, signaller=3, at=3, pid=sigint)
    venv = FastVecEnv(fns, num_workers=2) if build == "FastVecEnv" else \
        to_sb3(FastVectorEnv(fns, num_workers=2, autoreset_mode=same_step))
    no_leak.append(venv)
    for v in (ref, venv):
        v.seed(12)
    assert_same(ref.reset(), venv.reset(), "reset")
    for t in range(2):
        _sb3_same(ref.step(_actions(t)), venv.step(_actions(t)), f"step {t}")
    _interrupted(venv.step, _actions(2))
    with pytest.warns(UserWarning, match="KeyboardInterrupt"):
        got = venv.step(_actions(3))  # (these actions are not used)
    _sb3_same(ref.step(_actions(2)), got, "the interrupted step")
    for t in range(4, 30):
        _sb3_same(ref.step(_actions(t)), venv.step(_actions(t)), f"step {t}")
    ref.close()


def test_sb3_learn_resumes_after_an_interrupt_and_evaluates(sigint, no_leak):
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy

    from fastvec.integrations.sb3 import FastVecEnv, to_sb3

    # Worker 1's first env signals on its 12th step: in the first learn()'s second rollout
    # (4 envs x 8 steps each).
    venv = FastVecEnv(toy_fns(4, signaller=2, at=12, pid=sigint), num_workers=2)
    no_leak.append(venv)
    model = PPO("MlpPolicy", venv, n_steps=8, batch_size=32, n_epochs=1, seed=0,
                policy_kwargs={"net_arch": [16]})
    with pytest.raises(KeyboardInterrupt):
        model.learn(64)
    assert 32 < model.num_timesteps < 64
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        # resumes from where it was: its first step is the interrupted one, finished
        model.learn(32, reset_num_timesteps=False)
        model.learn(32)  # (starts again with a reset)
    assert len(_dropped_warnings(record)) == 1, [str(w.message) for w in record]
    # evaluate_policy on it and on a reference, seeded alike: the same episodes
    ref = to_sb3(SyncVectorEnv(toy_fns(4, signaller=2, at=12), autoreset_mode=AutoresetMode.SAME_STEP))
    results = []
    for v in (venv, ref):
        v.seed(13)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (not wrapped in a Monitor)
            results.append(evaluate_policy(model, v, n_eval_episodes=8, deterministic=True,
                                           return_episode_rewards=True))
    assert results[0] == results[1]
    ref.close()
