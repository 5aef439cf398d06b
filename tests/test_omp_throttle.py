"""On a contended host the caller's GNU OpenMP runtimes spin their short count after each
parallel region (fastvec.vector._wait._omp_throttle): a thread of fastvec's keeps an idle team
of more threads than the process has CPUs, which libgomp's documented rule answers with its
short spin; the thread ends with the contention or the vector env, and the full spin is back."""
from __future__ import annotations

import ctypes
import os
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

from fastvec import FastVectorEnv
from fastvec.vector._wait._omp_throttle import SpinThrottle
from fastvec.vector._wait.openmp import OpenMPIdleThreads, loaded_runtimes
from fastvec.vector._wait.policy import idle_openmp_threads_spin

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2 or not idle_openmp_threads_spin(),
    reason="needs 2 usable CPUs and libgomp's default spin (no OMP_WAIT_POLICY=passive)")

X = None


def _region():
    global X
    if X is None:
        X = torch.randn(2_000_000)
    return (X * 2.0).sum()  # (a parallel region on torch's default threads)


def _idle_cpu_ms(rounds: int = 15) -> float:
    """The process's CPU time in the 30 ms after a parallel region, median of ``rounds``: its
    pool thread's spin (the test's own thread sleeps)."""
    burnt = []
    for _ in range(rounds):
        _region()
        start = time.process_time()
        time.sleep(0.03)
        burnt.append(time.process_time() - start)
    return sorted(burnt)[rounds // 2] * 1e3


def _gnu_runtime() -> str:
    _region()
    paths = loaded_runtimes()
    if not paths or torch.get_num_threads() < 2:
        pytest.skip("torch runs no GNU OpenMP team here")
    return paths[0]


def test_a_throttled_runtime_stops_spinning_soon_and_spins_again_once_it_ends():
    _gnu_runtime()
    idle = OpenMPIdleThreads()
    spinning = _idle_cpu_ms()
    threads_before = threading.active_count()
    idle.throttle(True)
    try:
        assert idle.throttled
        throttled = _idle_cpu_ms()
    finally:
        idle.throttle(False)
    assert not idle.throttled
    again = _idle_cpu_ms()
    assert throttled < 1.0, throttled  # (the full spin: milliseconds; the short one: microseconds)
    assert spinning > 3 * throttled and again > 3 * throttled, (spinning, throttled, again)
    assert threading.active_count() == threads_before  # (the throttle's thread is not Python's)


def test_throttle_is_idempotent_and_closing_ends_it():
    path = _gnu_runtime()
    idle = OpenMPIdleThreads()
    idle.throttle(True)
    try:
        first = list(idle._throttles)
        idle.throttle(True)
        # (one per runtime it could start a region of: another library may bring an older libgomp)
        assert idle._throttles == first and len(first) == sum(1 for r in idle._runtimes if r.parallel) >= 1
    finally:
        idle.close()
    assert not idle.throttled and not any(t.running for t in first)
    idle.close()  # (again: nothing to do)
    with pytest.raises(ValueError, match="address 0"):
        SpinThrottle(0, 3)
    with pytest.raises(ValueError, match="at least 2 threads"):
        SpinThrottle(ctypes.cast(ctypes.CDLL(path).GOMP_parallel, ctypes.c_void_p).value, 1)


class _Contended:
    """A HostLoad that sees other work on the CPUs from its first reading."""

    contended = True
    intervals = 1
    other_cores = 1.0

    def __init__(self, *args, **kwargs):
        pass

    def sample(self, now, away_s=0.0):
        return False


@pytest.mark.parametrize("wait", ["auto", "block"])  # ("block": made for hosts shared with other work)
def test_a_vector_env_on_a_contended_host_throttles_its_callers_runtimes_until_it_closes(monkeypatch, wait):
    from fastvec.vector._caller import pool

    _gnu_runtime()
    monkeypatch.setattr(pool, "HostLoad", _Contended)
    env = FastVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=2, wait=wait)
    try:
        env.reset(seed=0)
        env.step(np.zeros(2, np.int64))
        assert env._pool.openmp.throttled
        throttled = _idle_cpu_ms()
    finally:
        env.close()
    assert throttled < 1.0 and _idle_cpu_ms() > 3 * throttled


def test_wait_block_throttles_on_a_quiet_host_too():
    _gnu_runtime()
    with FastVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=2, wait="block") as env:
        env.reset(seed=0)
        env.step(np.zeros(2, np.int64))
        assert env._pool.openmp.throttled and not env._pool.waits.contended
    with FastVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=2) as env:  # ("auto")
        env.reset(seed=0)
        env.step(np.zeros(2, np.int64))
        assert not env._pool.openmp.throttled or env._pool.waits.contended


def test_a_vector_env_told_to_leave_openmp_alone_does_not_throttle(monkeypatch):
    from fastvec.vector._caller import pool

    monkeypatch.setattr(pool, "HostLoad", _Contended)
    with FastVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=2, release_openmp_threads=False) as env:
        env.reset(seed=0)
        env.step(np.zeros(2, np.int64))
        assert env._pool.openmp is None
