"""The wait policy on a contended host: other work on the vector env's CPUs is measured from the
kernel's counters, and while there is enough of it nothing spins, the workers leave the CPUs
they were pinned to, and the trainer's OpenMP threads are released instead of parked."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest

from fastvec import FastVectorEnv
from fastvec.vector._block import handoff
from fastvec.vector._wait.host_load import HostLoad
from fastvec.vector._wait.policy import (CONTENDED_THINK_S, HOST_LOAD_EVERY_S, HOST_LOAD_MAX_AWAY_S,
                                         THINK_WINDOW_S, CallerWaits, WaitSettings)

TICKS = os.sysconf("SC_CLK_TCK")


class FakeHost:
    """``/proc`` as a HostLoad reads it, for two CPUs: advance it by an interval in which the
    vector env's processes used ``own`` cores, other work ``other`` cores and the hypervisor
    stole ``steal``; the rest of the two cores is idle."""

    def __init__(self, pids=(1, 2)):
        self.busy = self.idle = self.steal = 0
        self.own = {pid: 0 for pid in pids}
        self.now = 0.0

    def advance(self, own: float, other: float, steal: float = 0.0, seconds: float = HOST_LOAD_EVERY_S) -> float:
        ticks = seconds * TICKS
        for pid in self.own:
            self.own[pid] += round(own * ticks / len(self.own))
        self.busy += round((own + other) * ticks)
        self.steal += round(steal * ticks)
        self.idle += round((2.0 - own - other - steal) * ticks)
        self.now += seconds
        return self.now

    def read(self, path: str) -> str | None:
        if path == "/proc/stat":
            half = [self.busy // 2, 0, 0, self.idle // 2, 0, 0, 0, self.steal // 2, 0, 0]
            rest = [self.busy - half[0], 0, 0, self.idle - half[3], 0, 0, 0, self.steal - half[7], 0, 0]
            return (f"cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 {' '.join(map(str, half))}\n"
                    f"cpu1 {' '.join(map(str, rest))}\nintr 0\n")
        pid = int(path.split("/")[2])
        if pid not in self.own:
            return None
        return f"{pid} (python) S 1 1 1 0 -1 0 0 0 0 0 {self.own[pid]} 0 0 0 20 0 1 0"


def _load(host: FakeHost) -> HostLoad:
    return HostLoad({0, 1}, lambda: list(host.own), read=host.read)


def test_other_work_on_the_cpus_makes_the_host_contended_and_its_end_uncontended():
    host = FakeHost()
    load = _load(host)
    load.sample(host.now)
    load.sample(host.advance(own=1.9, other=0.0))
    load.sample(host.advance(own=0.0, other=2.0))  # one busy moment: not contention
    assert not load.contended
    host = FakeHost()
    load = _load(host)
    load.sample(host.now)
    for _ in range(8):  # the vector env alone, using both cores: not contended
        load.sample(host.advance(own=1.9, other=0.02))
        assert not load.contended
    changed = [load.sample(host.advance(own=1.0, other=1.0)) for _ in range(20)]  # a busy process beside it
    assert load.contended and changed.count(True) == 1
    assert 0.9 < load.other_cores < 1.1
    for _ in range(3):  # a little other work left: still contended (the margin)
        load.sample(host.advance(own=1.8, other=0.2))
    assert load.contended
    for _ in range(24):
        load.sample(host.advance(own=1.9, other=0.05))
    assert not load.contended


def test_other_work_while_the_caller_was_away_is_not_contention():
    """A benchmark taking turns (or a trainer's pauses): the vector env steps alone for a
    moment, then is idle for 3 s while other work takes both cores, again and again. The
    readings that span a pause are not measured: never contended. (Folded in, each pause
    pushed the mean up by an eighth of two cores, and it settled near a core: contended while
    the vector env stepped alone.)"""
    host = FakeHost()
    load = _load(host)
    load.sample(host.now)
    for _ in range(12):
        load.sample(host.advance(own=1.9, other=0.0))
        load.sample(host.advance(own=0.0, other=2.0, seconds=3.0), away_s=3.0)
        assert not load.contended
    assert load.other_cores < 0.05
    # a reading after a pause shorter than HOST_LOAD_MAX_AWAY_S is measured as before
    load.sample(host.advance(own=0.0, other=2.0, seconds=HOST_LOAD_EVERY_S), away_s=0.5 * HOST_LOAD_MAX_AWAY_S)
    assert load.other_cores > 0.2


def test_contention_measured_before_a_pause_holds_after_it():
    """A seed sweep: the other trainer takes a core while this one steps, and keeps doing so
    through this one's update (a pause): the verdict stays until readings taken while stepping
    say the other work ended; the interval spanning the pause changes nothing."""
    host = FakeHost()
    load = _load(host)
    load.sample(host.now)
    for _ in range(12):
        load.sample(host.advance(own=1.0, other=1.0))
    assert load.contended
    before = load.other_cores
    load.sample(host.advance(own=0.0, other=0.0, seconds=5.0), away_s=5.0)  # even a quiet pause
    assert load.contended and load.other_cores == before
    for _ in range(30):
        load.sample(host.advance(own=1.9, other=0.0))
    assert not load.contended


def test_the_caller_passes_its_time_away_to_the_measurement():
    """CallerWaits.between_steps: a step started 3 s after the last one ended (an update)
    gives the reading its time away, and the pause's other work is not measured."""
    waits = CallerWaits(WaitSettings.resolve("auto", worker_spin_us=50, parent_spin_us=20,
                                             release_openmp_threads=True, step_in_caller=False))
    host = FakeHost()
    waits.host = _load(host)
    waits.host.sample(host.now)
    for _ in range(8):
        now = host.advance(own=1.9, other=0.0)
        waits.record(started=now - 1e-3, now=now)
        waits.between_steps(now)
    for _ in range(8):
        now = host.advance(own=0.0, other=2.0, seconds=3.0)
        waits.between_steps(now)
        assert not waits.contended
        now = host.advance(own=1.9, other=0.0)
        waits.record(started=now - 1e-3, now=now)
        waits.between_steps(now)
    assert waits.host.other_cores < 0.05


def test_steal_counts_as_other_work_and_idle_cores_as_no_contention():
    host = FakeHost()
    load = _load(host)
    load.sample(host.now)
    for _ in range(8):  # another guest takes the vCPUs
        load.sample(host.advance(own=1.2, other=0.0, steal=0.8))
    assert load.contended
    host = FakeHost()
    load = _load(host)
    load.sample(host.now)
    for _ in range(6):  # other work, but a core left idle: nothing to take from anyone
        load.sample(host.advance(own=0.5, other=0.5))
    assert not load.contended and load.idle_cores > 0.9


def test_a_worker_that_ends_or_starts_between_readings_is_not_other_work():
    host = FakeHost(pids=(1, 2))
    load = _load(host)
    load.sample(host.now)
    load.sample(host.advance(own=1.9, other=0.0))
    del host.own[2]  # worker 2 ended; worker 3 started with its own ticks
    host.own[3] = 0
    for _ in range(6):
        load.sample(host.advance(own=1.9, other=0.0))
    assert not load.contended and load.other_cores < 0.05


def test_a_host_without_readable_counters_is_never_contended():
    load = HostLoad({0, 1}, lambda: [os.getpid()], read=lambda path: None)
    for k in range(4):
        load.sample(k * HOST_LOAD_EVERY_S)
    assert not load.contended


def test_a_contended_caller_neither_spins_nor_tells_workers_to():
    waits = CallerWaits(WaitSettings.resolve("auto", worker_spin_us=50, parent_spin_us=20,
                                             release_openmp_threads=True, step_in_caller=False))
    waits.record(started=0.0, now=50e-6)  # short commands: spun through when not contended
    assert waits.spins(False, False)[0] > 0 and waits.tail_spin_s() > 0
    assert waits.published_think() < THINK_WINDOW_S
    host = FakeHost()
    waits.host = _load(host)
    waits.host.sample(host.now)
    for _ in range(8):
        waits.between_steps(host.advance(own=1.0, other=1.0))
    assert waits.contended
    assert waits.spins(False, False) == (0.0, 0.0) and waits.spins(True, False) == (0.0, 0.0)
    assert waits.tail_spin_s() == 0.0
    assert waits.published_think() >= CONTENDED_THINK_S >= THINK_WINDOW_S


needs_two_cpus = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) != 2
                                    or not os.path.exists("/proc/stat"),
                                    reason="needs /proc and exactly 2 usable CPUs (one busy process takes half)")


def _steps_until(env, condition, seconds: float) -> bool:
    actions = np.zeros(env.num_envs, dtype=np.int64)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        env.step(actions)
        if condition():
            return True
    return False


@needs_two_cpus
def test_beside_a_busy_process_the_workers_block_and_leave_their_cpus():
    """A busy-looping process beside a CartPole stepping loop: within seconds the vector env
    counts the host as contended, publishes itself as computing, and its workers (pinned while
    the host was theirs) leave their CPUs; once the process ends, it is uncontended again.
    (That nothing else counts as other work is the fake host's tests': a test machine is not
    always idle.)"""
    cpus = os.sched_getaffinity(0)
    with FastVectorEnv([lambda: gym.make("CartPole-v1")] * 4, num_workers=2) as env:
        env.reset(seed=0)
        waits = env._pool.waits
        assert _steps_until(env, lambda: waits.host.intervals >= 2, 5.0)
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            contended = _steps_until(env, lambda: waits.contended, 10.0)
            think = handoff.read_caller_think(env._pool.ctrl) if contended else 0.0
            throttled = env._pool.openmp.throttled
            report = env.stats()
            moved = _steps_until(env, lambda: all(os.sched_getaffinity(p.pid) == cpus for p in env.processes), 2.0)
        finally:
            hog.kill()
            hog.wait()
        uncontended = _steps_until(env, lambda: not waits.contended, 10.0)
        unthrottled = not env._pool.openmp.throttled
    assert contended, f"not contended beside a busy process: {waits.host.other_cores:.2f} cores of other work"
    assert think >= THINK_WINDOW_S and moved
    assert throttled and unthrottled  # (the OpenMP runtimes spin their short count while contended)
    assert report["host"]["contended"] and report["host"]["other_cores"] >= 0.3
    assert any("other work takes" in line for line in report["advice"])
    assert uncontended, f"contended after the busy process ended: {waits.host.other_cores:.2f} cores of other work"
