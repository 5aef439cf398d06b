"""FastVectorEnv is a good neighbour to a trainer: it takes no core while the caller computes.

A training loop computes between steps (a policy's forward pass, an update). Workers that
spin through that time take the cores the trainer's threads need, and an OpenMP runtime's
idle threads spinning in the caller take the cores the workers need. These tests measure
the CPU time of the worker processes and the threads of this process.
"""
import os
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

from fastvec import FastVectorEnv
from helpers import TwoCoreCompute
from fastvec.vector import _sync
from fastvec.vector._protocol import Word
from fastvec.vector._step_server import StepServer
from fastvec.vector._worker import MAX_SPIN_S, THINK_WINDOW_S
from fastvec.vector._openmp import OpenMPRelease, loaded_runtimes

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads CPU times from /proc")


def _cpu_seconds(pid, tid=None) -> float:
    """CPU time of a process (or one of its threads) so far, from /proc (ns where the kernel keeps it)."""
    base = f"/proc/{pid}" + (f"/task/{tid}" if tid is not None else "")
    try:
        with open(f"{base}/schedstat") as f:
            return int(f.read().split()[0]) * 1e-9
    except OSError:
        with open(f"{base}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _workers_cpu(env) -> float:
    return sum(_cpu_seconds(p.pid) for p in env.processes)


def _compute(seconds: float) -> None:
    """The caller's work between two steps on one thread, as a busy loop."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class QuietEnv(gym.Env):
    """A step that costs next to nothing and returns no infos: what is left is the waiting."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, step_sleep: float = 0.0):
        self.step_sleep = step_sleep
        self._obs = np.zeros(4, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs, {}

    def step(self, action):
        if self.step_sleep:
            time.sleep(self.step_sleep)
        return self._obs, 1.0, False, False, {}


def _fns(n, **kwargs):
    return [lambda: QuietEnv(**kwargs) for _ in range(n)]


def test_a_worker_blocks_at_once_while_the_caller_keeps_more_than_one_core_busy():
    """A caller that keeps more than one core busy between steps (a policy's forward pass with
    torch's threads) keeps its cores: the workers block at once after each step instead of
    spinning for the next command. The policy is checked on a worker's command server run
    here with no caller: while the time the caller publishes (CALLER_THINK_US) is under the
    window, a wait for the next command spins first; from the window on, it blocks at once,
    and the worker is told (its CPU affinity follows: the next test). The caller's side, what
    it publishes, is the test after that; what the policy buys a training loop is measured by
    ``python -m fastvec.bench train``, not here: whether a worker is asleep some microseconds
    into the caller's work also depends on whether the machine has run it since its step, which
    on a loaded machine it often has not."""
    ctrl = np.zeros((2, Word.ROW_WORDS), np.uint32)
    told = []
    server = StepServer(ctrl, 0, object(), np.zeros(1, np.uint32), None, 2e-6, MAX_SPIN_S, THINK_WINDOW_S,
                        told.append)
    _sync.publish_caller_think(ctrl, 0.1 * THINK_WINDOW_S)
    assert server.serve(2e-3) is None  # (no command came: the wait timed out)
    assert server.spin > 0 and told == []
    _sync.publish_caller_think(ctrl, 1.5 * THINK_WINDOW_S)
    assert server.serve(2e-3) is None
    assert server.spin == 0 and told == [True]
    _sync.publish_caller_think(ctrl, 0.1 * THINK_WINDOW_S)
    assert server.serve(2e-3) is None
    assert server.spin > 0 and told == [True, False]


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and 2 CPUs")
def test_pinned_workers_leave_their_cpus_while_the_caller_computes_on_more_cores():
    """By default (more processes than CPUs) workers are pinned while the caller steps back to
    back, unpinned while it keeps more than one core busy between steps (a pinned worker could
    not leave a core one of the trainer's threads holds), and pinned again after."""
    cpus = os.sched_getaffinity(0)
    num_workers = len(cpus)
    with FastVectorEnv(_fns(num_workers), num_workers=num_workers) as env:
        affinity = lambda: [os.sched_getaffinity(p.pid) for p in env.processes]  # noqa: E731
        env.reset(seed=0)
        actions = np.zeros(num_workers, dtype=np.int64)
        for _ in range(50):
            env.step(actions)
        tight = affinity()
        compute = TwoCoreCompute()
        try:
            for _ in range(30):
                env.step(actions)
                compute(2e-3)
            env.step(actions)
            busy = affinity()
        finally:
            compute.close()
        for _ in range(50):
            env.step(actions)
        tight_again = affinity()
    pinned = [{cpu} for cpu in sorted(cpus)]
    assert tight == pinned
    assert busy == [cpus] * num_workers
    assert tight_again == pinned


def test_workers_leave_the_cores_during_a_long_update():
    """After a run of fast steps, the caller computes for 200 ms (an update): the workers'
    CPU time over those 200 ms stays under 5 % of it."""
    with FastVectorEnv(_fns(4), num_workers=2) as env:
        env.reset(seed=0)
        actions = np.zeros(4, dtype=np.int64)
        for _ in range(300):
            env.step(actions)
        before = _workers_cpu(env)
        _compute(0.2)
        used = _workers_cpu(env) - before
        env.step(actions)
    assert used < 0.05 * 0.2, f"workers used {used * 1e3:.1f} ms of CPU during 200 ms of the caller's work"


def test_the_caller_publishes_the_time_it_keeps_more_than_one_core_busy_between_steps():
    """Only time during which the caller keeps more than one core busy counts: computing on
    one thread, or sleeping, leaves a core to a spinning worker."""
    with FastVectorEnv(_fns(2), num_workers=2) as env:
        env.reset(seed=0)
        actions = np.zeros(2, dtype=np.int64)
        for _ in range(50):
            env.step(actions)
        quick = _sync.read_caller_think(env._pool.ctrl)
        compute = TwoCoreCompute()
        try:
            for _ in range(30):
                env.step(actions)
                compute(5e-3)
            busy = _sync.read_caller_think(env._pool.ctrl)
        finally:
            compute.close()
        for _ in range(30):  # (the general path, step_async + step_wait, publishes it too)
            env.step_async(actions)
            env.step_wait()
            time.sleep(2e-3)
        asleep = _sync.read_caller_think(env._pool.ctrl)
        for _ in range(30):
            env.step(actions)
            _compute(2e-3)
        one_core = _sync.read_caller_think(env._pool.ctrl)
    assert quick < 100e-6, quick
    assert 1e-3 < busy <= 10e-3, busy
    assert asleep < 100e-6, asleep
    assert one_core < 100e-6, one_core


# --- the caller's OpenMP threads ---------------------------------------------------------------
try:
    import torch
except ImportError:  # the torch extra is not installed: the tests below skip
    torch = None
needs_torch_threads = pytest.mark.skipif(torch is None or torch.get_num_threads() < 2,
                                         reason="needs torch running 2 or more threads (an OpenMP pool)")


def _openmp_threads_busy(seconds: float) -> float:
    """CPU time the threads of this process other than the calling one use over ``seconds``
    while the calling thread sleeps."""
    me = threading.get_native_id()
    tids = [int(t) for t in os.listdir("/proc/self/task") if int(t) != me]
    before = {t: _cpu_seconds("self", t) for t in tids}
    time.sleep(seconds)
    used = 0.0
    for t in tids:
        try:
            used += _cpu_seconds("self", t) - before[t]
        except OSError:  # the thread ended
            pass
    return used


def _parallel_op():
    x = torch.ones(4096, 256)
    (x @ torch.ones(256, 256)).tanh_()


@needs_torch_threads
def test_torch_openmp_runtime_is_found():
    _parallel_op()
    assert any("libgomp" in path for path in loaded_runtimes()), loaded_runtimes()


@needs_torch_threads
@pytest.mark.parametrize("release", [True, False])
def test_idle_openmp_threads_of_the_trainer_are_released_before_a_long_step(release):
    """After a parallel op, torch's OpenMP pool threads spin for milliseconds. A step hands
    them back before the workers start (the envs take 1 ms: the spin outlasts the step),
    unless ``release_openmp_threads=False``."""
    _parallel_op()
    if not any("libgomp" in path for path in loaded_runtimes()):
        pytest.skip("torch here does not use GNU OpenMP")
    with FastVectorEnv(_fns(2, step_sleep=1e-3), num_workers=2, release_openmp_threads=release) as env:
        env.reset(seed=0)
        actions = np.zeros(2, dtype=np.int64)
        env.step(actions)
        # (an op's pool threads do not spin after every op: the largest of a few tries)
        spin_without_step = max((_parallel_op(), _openmp_threads_busy(2e-3))[1] for _ in range(4))
        spin_after_step = max((_parallel_op(), env.step(actions), _openmp_threads_busy(2e-3))[2] for _ in range(4))
    if spin_without_step < 0.5e-3:
        pytest.skip(f"torch's OpenMP threads do not spin here after an op ({spin_without_step * 1e3:.2f} ms in 2 ms)")
    if release:
        assert spin_after_step < 0.2e-3, spin_after_step
    else:
        assert spin_after_step > 0.5e-3, spin_after_step


def test_release_is_harmless_without_openmp_work():
    release = OpenMPRelease()
    release()
    release()
