"""What a wake-up costs on this host (fastvec.vector._wait.wake_probe), and the spins the wait
policy derives from it: at least one wake-up's time for a waiting worker, commands shorter
than two wake-ups spun through by the caller; the constants hold where wake-ups are cheaper."""
from __future__ import annotations

import os
import statistics

import gymnasium as gym
import numpy as np
import pytest

from fastvec import FastVectorEnv
from fastvec.vector._wait import policy
from fastvec.vector._wait.policy import (
    MAX_SPIN_S,
    MAX_WAKE_S,
    OTHER_CPU_SPIN_S,
    SHORT_WAIT_S,
    CallerWaits,
    WaitSettings,
    wake_latency_s,
)
from fastvec.vector._wait.wake_probe import wake_samples

two_cpus = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                              reason="needs two usable CPUs")


def _settings(wait="auto", wake_s=None, worker_spin_us=50, parent_spin_us=20):
    return WaitSettings.resolve(wait, worker_spin_us=worker_spin_us, parent_spin_us=parent_spin_us,
                                release_openmp_threads=True, step_in_caller=False, wake_s=wake_s)


@two_cpus
def test_the_probe_measures_wake_ups_between_two_cpus():
    cpus = sorted(os.sched_getaffinity(0))
    samples = wake_samples(cpus[0], cpus[1], 8, 1e-3)
    if samples is None:
        pytest.skip("this platform has no futex or CPU affinity to measure with")
    assert len(samples) == 8
    # a wake-up takes at least a microsecond (a system call and a context switch) and, on a
    # test machine, well under 10 ms
    assert all(1e-6 < s < 10e-3 for s in samples), samples
    wake = wake_latency_s()
    assert wake is not None and 1e-6 < wake <= MAX_WAKE_S
    assert wake_latency_s() == wake  # (measured once per process)


def test_the_probe_checks_its_arguments():
    with pytest.raises(ValueError, match="two different CPUs"):
        wake_samples(0, 0, 3, 1e-3)
    with pytest.raises(ValueError, match="two different CPUs"):
        wake_samples(-1, 0, 3, 1e-3)
    with pytest.raises(ValueError, match="rounds in 1..1000"):
        wake_samples(0, 1, 0, 1e-3)
    with pytest.raises(ValueError, match=r"idle_s in \[0, 1\)"):
        wake_samples(0, 1, 3, 2.0)
    with pytest.raises(ValueError, match=r"wake_s must be in \[0, 1\)"):
        _settings(wake_s=-1e-6)


def test_a_cpu_the_process_may_not_use_is_not_measured():
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity here")
    usable = os.sched_getaffinity(0)
    outside = max(usable) + 1
    assert wake_samples(min(usable), outside, 3, 1e-4) is None


def test_cheap_wake_ups_leave_the_constants_as_they_are():
    for wake_s in (None, 0.0, 17e-6, 50e-6):
        s = _settings(wake_s=wake_s)
        assert s.worker.spin_s == pytest.approx(50e-6) and s.short_wait_s == SHORT_WAIT_S
        assert s.worker.max_spin_s == MAX_SPIN_S and s.worker.other_cpu_spin_s == OTHER_CPU_SPIN_S
        assert s.parent_spin_s == pytest.approx(20e-6) and s.wake_s == wake_s


def test_slow_wake_ups_raise_the_spins_to_them():
    s = _settings(wake_s=400e-6)
    assert s.worker.spin_s == pytest.approx(400e-6)  # one wake-up's time at least
    assert s.short_wait_s == pytest.approx(800e-6)  # two wake-ups
    assert s.worker.max_spin_s == MAX_SPIN_S and s.worker.other_cpu_spin_s == OTHER_CPU_SPIN_S
    assert s.parent_spin_s == pytest.approx(20e-6)
    # a worker told to spin longer keeps its longer spin
    assert _settings(wake_s=400e-6, worker_spin_us=900).worker.spin_s == pytest.approx(900e-6)
    # wait="block" spins nowhere, whatever a wake-up costs
    blocked = _settings("block", wake_s=400e-6)
    assert blocked.worker.spin_s == 0.0 and blocked.parent_spin_s == 0.0 and blocked.short_wait_s == SHORT_WAIT_S


def test_the_caller_spins_through_commands_shorter_than_two_wake_ups():
    # commands of 500 µs: longer than the constant (blocked in after a short spin), shorter
    # than two wake-ups of 400 µs (spun through)
    for wake_s, spun_through in ((None, False), (400e-6, True)):
        waits = CallerWaits(_settings(wake_s=wake_s))
        for k in range(64):
            waits.record(started=k * 1.0, now=k * 1.0 + 500e-6)
        spin, _ = waits.spins(False, False)
        assert (spin >= 500e-6) == spun_through, (wake_s, spin)


def test_a_wake_up_measured_behind_other_work_is_capped(monkeypatch):
    import fastvec.host as host
    import fastvec.vector._wait.wake_probe as probe

    monkeypatch.setattr(probe, "wake_samples", lambda *args: [0.2] * 12)  # (a busy host: 200 ms)
    monkeypatch.setattr(host, "usable_cpus", lambda: {0, 1})
    policy.wake_latency_s.cache_clear()
    try:
        assert policy.wake_latency_s() == MAX_WAKE_S
        monkeypatch.setattr(host, "usable_cpus", lambda: {0})
        policy.wake_latency_s.cache_clear()
        assert policy.wake_latency_s() is None  # one CPU: nothing to wake across
    finally:
        policy.wake_latency_s.cache_clear()


def test_stats_report_the_wake_up_and_the_workers_spin_at_least_that_long(monkeypatch):
    from fastvec.vector import fast_vector_env

    monkeypatch.setattr(fast_vector_env, "wake_latency_s", lambda: 300e-6)
    envs = FastVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=2)
    try:
        envs.reset(seed=0)
        for _ in range(5):
            envs.step(np.zeros(2, np.int64))
        assert envs.stats()["wake_us"] == 300.0
        assert envs.wait_settings.worker.spin_s == pytest.approx(300e-6)
    finally:
        envs.close()
    with FastVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=2, wait="block") as envs:
        envs.reset(seed=0)
        assert envs.stats()["wake_us"] is None  # (blocks everywhere: nothing derived from it)


@two_cpus
def test_the_real_probe_reads_alike_twice():
    """Two probes a moment apart agree within an order of magnitude (the median of each)."""
    cpus = sorted(os.sched_getaffinity(0))
    first, second = (wake_samples(cpus[0], cpus[1], 9, 1e-3) for _ in range(2))
    if first is None:
        pytest.skip("this platform has no futex or CPU affinity to measure with")
    a, b = statistics.median(first), statistics.median(second)
    assert 0.1 < a / b < 10, (a, b)
