"""FastVectorEnv.step's compiled common case (fastvec.vector._caller.compiled_step) against SyncVectorEnv.

The common case (one ndarray of actions in the dtype the workers already read) must take the
compiled path, every other step the general one, and both must give SyncVectorEnv's results.
"""
from __future__ import annotations

import numpy as np
import pytest
from gymnasium.error import ClosedEnvironmentError
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from fastvec import FastVectorEnv
from helpers import assert_same
from toy_envs import ToyEnv


def toy_fns(n, **kwargs):
    return [lambda k=k: ToyEnv(max_len=3 + 4 * (k % 3), **kwargs) for k in range(n)]


def _record_calls(monkeypatch, obj, name: str) -> list:
    """Wrap ``obj.name`` so that each call (which still runs) appends its positional
    arguments to the list returned; on an env, ``step_async`` is the general path's entry."""
    original = getattr(obj, name)
    calls: list = []

    def recorded(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(obj, name, recorded)
    return calls


def _interrupt_once(monkeypatch, obj, name: str) -> None:
    """The next call of ``obj.name`` raises KeyboardInterrupt (a Ctrl-C there); later ones run."""
    original = getattr(obj, name)

    def interrupted(*args, **kwargs):
        monkeypatch.setattr(obj, name, original)
        raise KeyboardInterrupt

    monkeypatch.setattr(obj, name, interrupted)


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
@pytest.mark.parametrize("act", ["box", "discrete", "multidiscrete", "box_int"])
@pytest.mark.parametrize("step_in_caller", [True, False])
def test_common_case_is_compiled_and_equals_sync(monkeypatch, step_in_caller, act, mode):
    # info_prob=0.5: new signatures and piped values (strings, tuples) come often, so the
    # compiled path's hand-over to WorkerPool.wait and take_replies runs too.
    fns = toy_fns(5, obs_space="box", act_space=act, info_prob=0.5)
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    with FastVectorEnv(fns, num_workers=2, autoreset_mode=mode, step_in_caller=step_in_caller) as env:
        assert_same(ref.reset(seed=3), env.reset(seed=3), "reset")
        general_path = _record_calls(monkeypatch, env, "step_async")
        ref.action_space.seed(1)
        episodes = 0
        for t in range(80):
            actions = ref.action_space.sample()
            expected = ref.step(actions)
            assert_same(expected, env.step(actions), f"step {t}")
            episodes += int((expected[2] | expected[3]).sum())
        # Only the first step names the actions' dtype to the workers (the general path).
        assert len(general_path) == 1
        assert episodes > 10
    ref.close()


@pytest.mark.parametrize("step_in_caller", [True, False])
def test_other_actions_take_the_general_path_and_still_equal_sync(monkeypatch, step_in_caller):
    fns = toy_fns(4, obs_space="box", act_space="box")
    ref = SyncVectorEnv(fns)
    base = np.linspace(-1.5, 1.5, 16).reshape(4, 4).astype(np.float32)
    # (the env checks that its action is in its float32 Box: other dtypes must cast safely)
    batches = [
        (base, 1),  # the first: names float32 to the workers
        (base / 2, 0),
        (base.astype(np.float16), 1),  # float16: named again
        (base.astype(np.float16) / 3, 0),
        (list(base), 1),  # a list: converted by the general path
        (np.repeat(base.astype(np.float16), 2, axis=1)[:, ::2], 1),  # not C-contiguous
        (base.astype(np.float16) * 0.7, 0),
        (base * 0.9, 1),  # float32 again: named again
        (base * 0.8, 0),
    ]
    with FastVectorEnv(fns, num_workers=2, step_in_caller=step_in_caller) as env:
        assert_same(ref.reset(seed=0), env.reset(seed=0), "reset")
        general_path = _record_calls(monkeypatch, env, "step_async")
        for k, (actions, general) in enumerate(batches):
            before = len(general_path)
            assert_same(ref.step(actions), env.step(actions), f"batch {k}")
            taken = len(general_path) - before
            assert taken == general, f"batch {k}: general path taken {taken} times"
        with pytest.raises(ValueError, match="3 actions for 4 envs"):
            env.step(list(base[:3]))
    ref.close()


@pytest.mark.parametrize("step_in_caller", [True, False])
def test_an_interrupted_compiled_step_is_pending_until_step_wait(monkeypatch, step_in_caller):
    """Ctrl-C during the wait leaves the step pending, as step_async would: step_wait then
    returns its results (a step instead would finish and drop it: tests/test_interrupts.py)."""
    # The last env (a worker's) is slow, so the caller is waiting for it when interrupted.
    fns = [lambda k=k: ToyEnv(max_len=5, step_sleep=0.3 if k == 3 else 0.0) for k in range(4)]
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2, step_in_caller=step_in_caller) as env:
        assert_same(ref.reset(seed=4), env.reset(seed=4), "reset")
        actions = np.array([0, 1, 2, 3])
        assert_same(ref.step(actions), env.step(actions), "step 0")
        _interrupt_once(monkeypatch, env._pool, "_wait_until_done")
        with pytest.raises(KeyboardInterrupt):
            env.step(actions)
        assert_same(ref.step(actions), env.step_wait(), "step 1, waited for")
        assert_same(ref.step(actions), env.step(actions), "step 2")
    ref.close()


@pytest.mark.parametrize("step_in_caller", [True, False])
def test_no_compiled_step_after_close(step_in_caller):
    env = FastVectorEnv(toy_fns(3), num_workers=2, step_in_caller=step_in_caller)
    env.reset(seed=0)
    actions = np.array([1, 2, 3])
    env.step(actions)
    env.step(actions)
    env.close()
    with pytest.raises(ClosedEnvironmentError):
        env.step(actions)


def test_no_compiled_step_where_it_cannot_apply():
    """Dict actions, batch_size < num_envs and DISABLED autoreset take the general path only."""
    with FastVectorEnv(toy_fns(2, act_space="dict"), num_workers=2) as env:
        assert env._driver is None
    with FastVectorEnv(toy_fns(4), num_workers=2, batch_size=2) as env:
        assert env._driver is None
    with FastVectorEnv(toy_fns(2), num_workers=2, autoreset_mode=AutoresetMode.DISABLED) as env:
        assert env._driver is None
    with FastVectorEnv(toy_fns(2), num_workers=2) as env:
        assert env._driver is not None


@pytest.mark.parametrize("where", ["pool.wait", "pool.record_command_time"])
def test_a_step_interrupted_after_the_callers_share_keeps_its_results(monkeypatch, where):
    """Ctrl-C as the caller's own share hands over (before the wait, or as the step ends):
    step_wait still returns that share's infos and new info signatures."""
    slow = where == "pool.wait"  # a slow worker: the wait's general path; else the common case
    fns = [lambda k=k: ToyEnv(max_len=6, info_prob=1.0, step_sleep=0.2 if slow and k == 3 else 0.0)
           for k in range(4)]
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2, step_in_caller=True) as env:
        assert_same(ref.reset(seed=8), env.reset(seed=8), "reset")
        actions = np.array([3, 1, 4, 1])
        assert_same(ref.step(actions), env.step(actions), "step 0")
        for t in range(1, 6):  # (a new signature comes within a few steps: info_prob=1)
            _interrupt_once(monkeypatch, env._pool, where.split(".")[1])
            with pytest.raises(KeyboardInterrupt):
                env.step(actions)
            assert_same(ref.step(actions), env.step_wait(), f"step {t}, waited for")
    ref.close()


def test_the_compiled_step_comes_back_once_nothing_is_in_flight(monkeypatch):
    fns = toy_fns(4)
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2) as env:
        env.async_reset(seed=1)
        env.recv()
        assert not env._inflight.any()
        assert_same(ref.reset(seed=2), env.reset(seed=2), "reset")
        actions = np.array([0, 1, 2, 3])
        assert_same(ref.step(actions), env.step(actions), "step 0")  # names the dtype
        general_path = _record_calls(monkeypatch, env, "step_async")
        for t in range(1, 5):
            assert_same(ref.step(actions), env.step(actions), f"step {t}")
        assert len(general_path) == 0
    ref.close()


def test_a_subclass_with_its_own_step_async_is_called():
    class Logged(FastVectorEnv):
        def step_async(self, actions):
            self.calls = getattr(self, "calls", 0) + 1
            super().step_async(actions)

    with Logged(toy_fns(2), num_workers=2) as env:
        env.reset(seed=0)
        for _ in range(3):
            env.step(np.array([0, 1]))
        assert env.calls == 3


@pytest.mark.parametrize("step_in_caller", [True, False])
def test_a_worker_killed_between_compiled_steps(step_in_caller):
    import os
    import signal

    from fastvec.errors import WorkerDiedError

    env = FastVectorEnv(toy_fns(4), num_workers=2, step_in_caller=step_in_caller)
    env.reset(seed=0)
    actions = np.array([0, 1, 2, 3])
    for _ in range(3):
        env.step(actions)
    victim = env.processes[-1]
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(5)
    with pytest.raises(WorkerDiedError, match="killed by signal SIGKILL"):
        env.step(actions)
    assert env.closed
    with pytest.raises(ClosedEnvironmentError):
        env.step(actions)
    env.close()


@pytest.mark.parametrize("use_driver", [True, False])
def test_a_wait_interrupted_between_two_pipes_resumes(monkeypatch, use_driver):
    """Ctrl-C while the caller reads the workers' pipes, one read and one not: step_wait then
    returns the step's results (the message read is kept, not waited for again on an empty
    pipe)."""
    fns = toy_fns(6, obs_space="box")
    ref = SyncVectorEnv(fns)
    # shared_memory=False: every worker's observations come on its pipe
    with FastVectorEnv(fns, num_workers=3, shared_memory=False) as env:
        if not use_driver:
            env._driver = None
        assert_same(ref.reset(seed=5), env.reset(seed=5), "reset")
        actions = np.array([0, 1, 2, 3, 4, 5])
        assert_same(ref.step(actions), env.step(actions), "step 0")
        pool = env._pool
        original, calls = pool.recv, []

        def second_interrupted(w, *args, **kwargs):
            calls.append(w)
            if len(calls) == 2:
                raise KeyboardInterrupt
            return original(w, timeout=10)  # (a message waited for on an empty pipe: an error, not a hang)

        monkeypatch.setattr(pool, "recv", second_interrupted)
        with pytest.raises(KeyboardInterrupt):
            env.step(actions)
        assert_same(ref.step(actions), env.step_wait(timeout=10), "step 1, waited for")
        assert_same(ref.step(actions), env.step(actions), "step 2")
    ref.close()


def test_the_compiled_step_spins_for_a_worker_a_little_later_than_the_callers_share(monkeypatch):
    """With step_in_caller=True, a worker that finishes shortly after the caller's own share
    is waited for inside the compiled step (a spin of up to WorkerPool.tail_spin_s), not
    through WorkerPool.wait's Python; the results are still SyncVectorEnv's."""
    # The caller's env sleeps 2 ms a step, the worker's 2.2 ms: the worker ends ~0.2 ms
    # after the caller's share, well within the tail spin (about half a step, at most 1 ms).
    fns = [lambda: ToyEnv(max_len=50, info_prob=0.0, step_sleep=0.002),
           lambda: ToyEnv(max_len=50, info_prob=0.0, step_sleep=0.0022)]
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2, step_in_caller=True) as env:
        assert_same(ref.reset(seed=4), env.reset(seed=4), "reset")
        actions = np.array([1, 2])
        for t in range(10):  # (the first steps name the dtype and the info signatures)
            assert_same(ref.step(actions), env.step(actions), f"step {t}")
        waits = _record_calls(monkeypatch, env._pool, "wait")
        steps = 40
        for t in range(10, 10 + steps):
            assert_same(ref.step(actions), env.step(actions), f"step {t}")
        # (not zero: a step whose worker is held up by the machine beyond the spin, or that
        # has a new info signature to read off the pipe, still takes WorkerPool.wait)
        assert len(waits) < steps // 2, f"{len(waits)} of {steps} steps waited through WorkerPool.wait"
    ref.close()


def test_a_worker_later_than_the_spin_is_waited_for_without_a_second_spin(monkeypatch):
    """When a worker is still busy after the compiled step's spin, WorkerPool.wait takes over
    and blocks after the shortest spin: the tail spin is not spun twice."""
    from fastvec.vector._caller import pool

    # The worker's env sleeps 5 ms a step, the caller's not at all: the tail spin (about half
    # a step) always runs out first.
    fns = [lambda: ToyEnv(max_len=50, info_prob=0.0), lambda: ToyEnv(max_len=50, info_prob=0.0, step_sleep=0.005)]
    ref = SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2, step_in_caller=True, parent_spin_us=20.0) as env:
        assert_same(ref.reset(seed=4), env.reset(seed=4), "reset")
        actions = np.array([1, 2])
        for t in range(5):
            assert_same(ref.step(actions), env.step(actions), f"step {t}")
        spins = []
        original = pool.handoff.wait_all_done

        def recorded(ctrl, pending, spin_s, timeout_s, tail_spin_s=0.0):
            spins.append((spin_s, tail_spin_s))
            return original(ctrl, pending, spin_s, timeout_s, tail_spin_s)

        monkeypatch.setattr(pool.handoff, "wait_all_done", recorded)
        for t in range(5, 10):
            assert_same(ref.step(actions), env.step(actions), f"step {t}")
        assert spins and all(s == pytest.approx((20e-6, 0.0)) for s in spins), spins
    ref.close()
