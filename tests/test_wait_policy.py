"""FastVectorEnv is a good neighbour to a trainer: it takes no core while the caller computes.

A training loop computes between steps (a policy's forward pass, an update). Workers that
spin through that time take the cores the trainer's threads need, and an OpenMP runtime's
idle threads spinning in the caller take the cores the workers need. These tests measure
the CPU time of the worker processes and the threads of this process.
"""
import ctypes
import os
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

from fastvec import FastVectorEnv
from helpers import TwoCoreCompute
from fastvec.vector._block import handoff
from fastvec.vector._block.protocol import Command, SharedWord, Word
from fastvec.vector._worker.command_loop import StepServer
from fastvec.vector._wait.openmp import OpenMPIdleThreads, loaded_runtimes
from fastvec.vector._wait.policy import MAX_SPIN_S, OTHER_CPU_SPIN_S, RECHECK_EVERY, THINK_WINDOW_S


class _QuietHost:
    """A HostLoad that never sees other work."""

    contended = False
    intervals = 0

    def __init__(self, *args, **kwargs):
        pass

    def sample(self, now, away_s=0.0):
        return False


@pytest.fixture(autouse=True)
def quiet_host(monkeypatch):
    """These tests are of the policy on a host that is the vector env's alone; a test machine
    running something else beside them would make it a contended one, whose policy
    tests/test_host_load.py tests."""
    from fastvec.vector._caller import pool

    monkeypatch.setattr(pool, "HostLoad", _QuietHost)


@pytest.fixture(autouse=True)
def cheap_wake_ups(monkeypatch):
    """These tests are of the spins' constants: on a host where a wake-up costs less than the
    shortest of them (tests/test_wake_probe.py tests the floors a slower one sets)."""
    from fastvec.vector import fast_vector_env

    monkeypatch.setattr(fast_vector_env, "wake_latency_s", lambda: 10e-6)

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
    handoff.publish_caller_think(ctrl, 0.1 * THINK_WINDOW_S)
    assert server.serve(2e-3) is None  # (no command came: the wait timed out)
    assert server.spin > 0 and told == []
    handoff.publish_caller_think(ctrl, 1.5 * THINK_WINDOW_S)
    assert server.serve(2e-3) is None
    assert server.spin == 0 and told == [True]
    handoff.publish_caller_think(ctrl, 0.1 * THINK_WINDOW_S)
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
    pinned = [{cpu} for cpu in sorted(cpus)]
    with FastVectorEnv(_fns(num_workers), num_workers=num_workers) as env:
        def affinity(expected, timeout=1.0):
            """The workers' affinities once they are ``expected``, or as they are after ``timeout``:
            a worker moves when it next waits for a command, just after the step that told it
            the caller's time, so the caller may look a little before it has moved."""
            deadline = time.monotonic() + timeout
            while True:
                seen = [os.sched_getaffinity(p.pid) for p in env.processes]
                if seen == expected or time.monotonic() > deadline:
                    return seen
                time.sleep(0.01)

        env.reset(seed=0)
        actions = np.zeros(num_workers, dtype=np.int64)
        for _ in range(50):
            env.step(actions)
        tight = affinity(pinned)
        compute = TwoCoreCompute()
        try:
            # (20 ms on two threads a step, an update's worth: long enough that a pinned worker's
            # spin, at most OTHER_CPU_SPIN_S, cannot keep the caller from being seen on two cores)
            for _ in range(10):
                env.step(actions)
                compute(20e-3)
            env.step(actions)
            busy = affinity([cpus] * num_workers)
        finally:
            compute.close()
        for _ in range(50):
            env.step(actions)
        tight_again = affinity(pinned)
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
        quick = handoff.read_caller_think(env._pool.ctrl)
        compute = TwoCoreCompute()
        try:
            for _ in range(30):
                env.step(actions)
                compute(5e-3)
            busy = handoff.read_caller_think(env._pool.ctrl)
        finally:
            compute.close()
        for _ in range(30):  # (the general path, step_async + step_wait, publishes it too)
            env.step_async(actions)
            env.step_wait()
            time.sleep(2e-3)
        asleep = handoff.read_caller_think(env._pool.ctrl)
        for _ in range(30):
            env.step(actions)
            _compute(2e-3)
        one_core = handoff.read_caller_think(env._pool.ctrl)
    assert quick < 100e-6, quick
    assert 1e-3 < busy <= 10e-3, busy
    assert asleep < 100e-6, asleep
    assert one_core < 100e-6, one_core


# --- idle CPUs: which worker spins, and who is woken first ------------------------------------
needs_two_cpus = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2 or handoff.cpu_now() < 0,
    reason="needs CPU affinity, 2 CPUs and a way to ask which CPU a thread runs on")


class _OnOneCpu:
    """Runs the calling thread on one CPU (its first usable one) until the block ends, so that
    the CPU it reads stays the CPU it runs on."""

    def __enter__(self):
        self.saved = os.sched_getaffinity(0)
        self.cpu = min(self.saved)
        os.sched_setaffinity(0, {self.cpu})
        return self

    def __exit__(self, *exc):
        os.sched_setaffinity(0, self.saved)


def _publish_caller_cpu(ctrl, cpu: int) -> None:
    ctrl[-1, SharedWord.CALLER_CPU] = cpu + 1


def _serve_commands(server, ctrl, apart_s: float, count: int) -> None:
    """Hand the server ``count`` commands, ``apart_s`` after each was done (from a timer
    thread), so that its running gap tends to ``apart_s``."""
    for _ in range(count):
        sender = threading.Timer(apart_s, handoff.send_command, (ctrl, 0, Command.PIPE))
        sender.start()
        seq, command, _ = server.serve(1.0)
        sender.join()
        handoff.finish_command(ctrl, 0, seq, 0)


@needs_two_cpus
def test_a_worker_spins_through_longer_gaps_on_another_cpu_than_the_callers_and_not_on_its():
    """While the caller computes on one core between steps, the other cores are idle, and an
    idle CPU can take hundreds of microseconds to run a woken worker (a virtual machine hands
    its vCPU back to the host). So a worker waiting on another CPU than the caller's spins
    through gaps up to OTHER_CPU_SPIN_S long. One on the caller's own CPU spins only while
    the caller steps back to back (the gap it publishes is under THINK_WINDOW_S): through the
    caller's work it would take the core that work runs on. Checked on a command server run
    here, the caller's CPU and gap written into the block as the caller publishes them."""
    ctrl = np.zeros((2, Word.ROW_WORDS), np.uint32)
    spin_s = 2e-6
    server = StepServer(ctrl, 0, object(), np.zeros(1, np.uint32), None, spin_s, MAX_SPIN_S, THINK_WINDOW_S,
                        None, OTHER_CPU_SPIN_S)
    with _OnOneCpu() as here:
        handoff.publish_caller_think(ctrl, 0.0, 0.0)  # (a caller stepping back to back, on one core)
        assert handoff.read_caller_cpu(ctrl) == here.cpu
        _serve_commands(server, ctrl, 2e-3, 25)
        assert MAX_SPIN_S < server.gap < OTHER_CPU_SPIN_S, server.gap
        _publish_caller_cpu(ctrl, here.cpu + 1)
        assert server.serve(1e-3) is None  # (no command: the wait timed out)
        assert server.spin == pytest.approx(min(2 * server.gap + spin_s, OTHER_CPU_SPIN_S))
        assert server.spin > MAX_SPIN_S
        _publish_caller_cpu(ctrl, here.cpu)
        assert server.serve(1e-3) is None
        assert server.spin == spin_s  # (as before this rule: the gaps are longer than MAX_SPIN_S)

        _serve_commands(server, ctrl, 1e-4, 40)  # the commands come soon after each other
        assert server.gap < 0.5 * MAX_SPIN_S, server.gap
        handoff.publish_caller_think(ctrl, 0.0, 0.0)
        assert server.serve(1e-3) is None
        assert server.spin == pytest.approx(2 * server.gap + spin_s)  # back to back: it spins
        handoff.publish_caller_think(ctrl, 0.0, 2 * THINK_WINDOW_S)
        assert handoff.read_caller_cpu(ctrl) == here.cpu
        assert server.serve(1e-3) is None
        assert server.spin == spin_s  # the caller computes here between steps: it does not


@needs_two_cpus
def test_the_caller_wakes_a_worker_asleep_on_its_own_cpu_last():
    """A worker woken on the caller's CPU takes it at once, and the caller would hand the
    other workers their commands only after that worker's step: the steps would run one
    after another. Workers asleep on the caller's CPU (WORKER_CPU, published before a worker
    blocks) are handed their commands last; the others keep their order."""
    ctrl = np.zeros((4, Word.ROW_WORDS), np.uint32)
    with _OnOneCpu() as here:
        for w, (asleep, cpu) in enumerate([(1, here.cpu), (1, here.cpu + 1), (0, here.cpu)]):
            ctrl[w, Word.WORKER_SLEEPING] = asleep
            ctrl[w, Word.WORKER_CPU] = cpu + 1
        assert handoff.sleepers_here_last(ctrl, [0, 1, 2]) == [1, 2, 0]
        assert handoff.sleepers_here_last(ctrl, [2, 1]) == [2, 1]
        ctrl[0, Word.WORKER_SLEEPING] = 0
        assert handoff.sleepers_here_last(ctrl, [0, 1, 2]) == [0, 1, 2]
        with pytest.raises(IndexError):
            handoff.sleepers_here_last(ctrl, [0, 3])


@needs_two_cpus
def test_in_a_one_core_training_loop_the_worker_off_the_callers_cpu_spins_and_both_step_at_once():
    """The caller, held on worker 0's CPU, computes on one core for 1 ms between steps (a
    small policy's forward pass). Each worker publishes the CPU it waits on; 0.5 ms into
    the caller's work, worker 1 (on the other CPU) is still spinning, not asleep; and the
    two workers step at the same time, not one after the other."""
    cpus = sorted(os.sched_getaffinity(0))[:2]

    class Stamped(QuietEnv):
        def step(self, action):
            start = time.perf_counter()
            _compute(2e-4)
            return np.full(4, start - int(start), np.float32), 1.0, False, False, {}

    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(cpus))
    try:
        with FastVectorEnv([Stamped, Stamped], num_workers=2, pin_workers=True) as env:
            env.reset(seed=0)
            actions = np.zeros(2, dtype=np.int64)
            os.sched_setaffinity(0, {cpus[0]})
            awake, apart = [], []
            for i in range(60):
                _compute(1e-3)
                sent = time.perf_counter()
                obs, *_ = env.step(actions)
                starts = obs[:, 0].astype(np.float64) + int(sent) - sent
                apart.append(abs(starts[1] - starts[0]))
                if i >= 40:
                    _compute(5e-4)
                    awake.append(env._pool.ctrl[1, Word.WORKER_SLEEPING] == 0)
            waited_on = env._pool.ctrl[:2, Word.WORKER_CPU].astype(int) - 1
    finally:
        os.sched_setaffinity(0, saved)
    assert waited_on.tolist() == cpus
    assert np.mean(awake) > 0.8, awake
    # (one after the other, the second would start 200 us after the first)
    assert np.median(apart[20:]) < 1e-4, np.median(apart[20:])


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
def test_idle_openmp_threads_of_a_trainer_that_seldom_runs_parallel_regions_are_released(release):
    """After a parallel op, torch's OpenMP pool threads spin for milliseconds. When the
    trainer runs such an op only now and then, a step hands them back before the workers
    start (the envs take 1 ms: the spin outlasts the step), unless
    ``release_openmp_threads=False``. (A trainer that runs one before every step gets its
    steps parked instead: the next tests.)"""
    _parallel_op()
    if not any("libgomp" in path for path in loaded_runtimes()):
        pytest.skip("torch here does not use GNU OpenMP")
    with FastVectorEnv(_fns(2, step_sleep=1e-3), num_workers=2, release_openmp_threads=release) as env:
        env.reset(seed=0)
        actions = np.zeros(2, dtype=np.int64)
        for _ in range(8):
            env.step(actions)
        # (an op's pool threads do not spin after every op, nor after every step: on a 2-vCPU
        # VM, in 0 to 4 of 4 tries either way. The largest of ten tries, each followed by three
        # steps without an op, so that ops stay "now and then": with two, parking turned on)
        spin_without_step = max((_parallel_op(), _openmp_threads_busy(2e-3))[1] for _ in range(10))
        spin_after_step = max((_parallel_op(), env.step(actions), _openmp_threads_busy(2e-3), env.step(actions),
                               env.step(actions), env.step(actions))[2] for _ in range(10))
        if release:
            assert not env._pool.openmp.parking
    if spin_without_step < 0.5e-3:
        pytest.skip(f"torch's OpenMP threads do not spin here after an op ({spin_without_step * 1e3:.2f} ms in 2 ms)")
    if release:
        assert spin_after_step < 0.2e-3, spin_after_step
    else:
        assert spin_after_step > 0.5e-3, spin_after_step


@needs_torch_threads
def test_a_parked_step_keeps_the_trainers_openmp_threads_for_its_next_region():
    """Ending the pool before every step would make the trainer's next parallel region start
    its threads again; a parked step leaves them in place."""
    _parallel_op()
    if not any("libgomp" in path for path in loaded_runtimes()):
        pytest.skip("torch here does not use GNU OpenMP")
    with FastVectorEnv(_fns(2), num_workers=2) as env:
        env.reset(seed=0)
        actions = np.zeros(2, dtype=np.int64)
        threads_after = []
        for _ in range(8):
            _parallel_op()
            threads = len(os.listdir("/proc/self/task"))
            env.step(actions)
            threads_after.append(len(os.listdir("/proc/self/task")) - threads)
        assert env._pool.openmp.parking
    assert threads_after[0] < 0  # (the first steps release: the pool's threads end)
    assert threads_after[-1] == 0, threads_after


@pytest.fixture
def park_whatever_it_costs(monkeypatch):
    """Parking as on a quiet host: the measured cost of starting the OpenMP threads again, and
    the longest exit allowed, are taken as endless, so that a loaded test machine does not
    switch the parked path off in a test of what parked steps do (the switch has its own test)."""
    from fastvec.vector._wait import openmp

    monkeypatch.setattr(openmp._Runtime, "measure_start_cost", lambda self: float("inf"))
    monkeypatch.setattr(openmp, "MAX_PARK_EXIT_S", float("inf"))


def _fake_runtime(pool: list) -> tuple:
    """An OpenMP runtime stand-in and a _Runtime reading it: its pause takes 50 µs while
    ``pool[0]`` is true (a pool to end) and returns at once otherwise; its GOMP_parallel runs
    the region's body on the calling thread alone (thread 0 of a team of one)."""
    from fastvec.vector._wait.openmp import _Runtime

    def pause(kind):
        if pool[0]:
            _compute(50e-6)
        return 0

    region = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

    def parallel(fn, data, num_threads, flags):
        region(fn)(data)

    callbacks = (ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(pause),
                 ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint)(parallel),
                 ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 0))
    pause_at, parallel_at, thread_num_at = (ctypes.cast(c, ctypes.c_void_p).value for c in callbacks)
    return callbacks, _Runtime("fake", pause_at, parallel_at, thread_num_at)


def test_steps_are_parked_while_the_trainer_runs_a_parallel_region_before_most_of_them():
    pool = [True]
    keep, runtime = _fake_runtime(pool)
    for _ in range(3):  # a pool found before three steps in a row
        runtime.release()
    assert runtime.hot
    for _ in range(RECHECK_EVERY - 1):
        runtime.count_parked_step(0.0)
    assert runtime.hot
    runtime.count_parked_step(0.0)  # time to check again: release the next steps
    assert not runtime.hot
    pool[0] = False
    runtime.release()  # (the pool left by the last parked step does not count)
    for _ in range(10):
        runtime.release()
    assert not runtime.hot
    # A region before one step in three: releasing stays cheaper. (Noted directly: a release
    # that finds no pool returns in about a microsecond, but one preempted on a loaded machine
    # can take 10 µs and count as found, and one such right after a real one tips the share.)
    for k in range(30):
        runtime.note(found=k % 3 == 0)
        assert not runtime.hot


def test_parking_stops_where_leaving_the_region_costs_more_than_starting_the_threads_again():
    """On a contended host (another trainer, a CPU hog) a parked thread can be queued behind
    other work, and the caller waits for it to leave the region: once that takes longer on
    average than the threads' start measured here, the steps are released instead, and stay
    so for RECHECK_EVERY steps."""
    pool = [True]
    keep, runtime = _fake_runtime(pool)
    for _ in range(3):
        runtime.release()
    assert runtime.hot and runtime.start_cost is not None
    runtime.start_cost = 100e-6
    for _ in range(20):  # leaving takes 60 µs: cheaper than 100 µs of thread starts
        runtime.count_parked_step(60e-6)
    assert runtime.hot
    for _ in range(20):  # a queued thread: 2 ms to leave
        runtime.count_parked_step(2e-3)
        if not runtime.hot:
            break
    assert not runtime.hot
    for _ in range(RECHECK_EVERY - 1):  # the trainer still runs a region before every step
        runtime.release()
        assert not runtime.hot
    for _ in range(3):
        runtime.release()
    assert runtime.hot


def test_parking_stops_where_exits_are_slow_even_if_starting_threads_measured_as_slow():
    """A start cost measured on a contended host is as slow as the exits it is compared with:
    exits of a millisecond stop parking whatever it says (MAX_PARK_EXIT_S), and so does a start
    cost measured as nothing (releasing is then free)."""
    from fastvec.vector._wait.policy import MAX_PARK_EXIT_S

    for start_cost, exit_s in ((50 * MAX_PARK_EXIT_S, 10 * MAX_PARK_EXIT_S), (0.0, 0.2 * MAX_PARK_EXIT_S)):
        pool = [True]
        keep, runtime = _fake_runtime(pool)
        for _ in range(3):
            runtime.release()
        assert runtime.hot
        runtime.start_cost = start_cost
        for _ in range(40):
            runtime.count_parked_step(exit_s)
            if not runtime.hot:
                break
        assert not runtime.hot, (start_cost, exit_s)


def test_steps_parked_by_the_vector_env_are_counted_towards_the_next_check():
    pool = [True]
    keep, runtime = _fake_runtime(pool)
    idle = OpenMPIdleThreads()
    idle.release()  # (looks the real runtimes up once)
    idle._runtimes = [runtime]
    for _ in range(3):
        idle.release()
    assert idle.parking
    assert idle.parked_runtimes().tolist() == [[runtime.parallel, runtime.thread_num]]
    for k in range(RECHECK_EVERY):
        idle.count_parked_step(0.0)
    assert not idle.parking and idle.parked_runtimes() is None


def test_a_runtime_without_its_region_entry_point_is_never_parked_in():
    pool = [True]
    keep, runtime = _fake_runtime(pool)
    runtime.parallel = 0
    for _ in range(5):
        runtime.release()
    assert not runtime.hot


@needs_torch_threads
def test_a_parked_call_runs_on_the_calling_thread_as_thread_0_of_the_runtimes_team():
    from fastvec.vector._wait._omp_park import run_parked

    _parallel_op()
    paths = loaded_runtimes()
    if not paths:
        pytest.skip("torch here does not use GNU OpenMP")
    gomp = ctypes.CDLL(paths[0])
    address = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    seen = run_parked(address(gomp.GOMP_parallel), address(gomp.omp_get_thread_num),
                      lambda arg: (arg, threading.get_native_id(), gomp.omp_get_thread_num(),
                                   gomp.omp_get_num_threads(), gomp.omp_in_parallel()), "arg")
    assert seen == ("arg", threading.get_native_id(), 0, torch.get_num_threads(), 1)

    def fail(arg):
        raise KeyError(arg)

    with pytest.raises(KeyError, match="raised in the region"):
        run_parked(address(gomp.GOMP_parallel), address(gomp.omp_get_thread_num), fail, "raised in the region")
    assert gomp.omp_in_parallel() == 0


class FailingCartPole(gym.Wrapper):
    def __init__(self, fail_at: int):
        super().__init__(gym.make("CartPole-v1"))
        self.fail_at, self.steps = fail_at, 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.fail_at:
            raise ValueError("the simulator failed")
        return self.env.step(action)


@needs_torch_threads
def test_parked_steps_return_what_sync_vector_env_returns(park_whatever_it_costs):
    """Parking changes where the trainer's threads wait, never a result: CartPole x4 with a
    parallel op before each step, against SyncVectorEnv on the same seeds and actions."""
    _parallel_op()
    if not any("libgomp" in path for path in loaded_runtimes()):
        pytest.skip("torch here does not use GNU OpenMP")
    fns = [lambda: gym.make("CartPole-v1")] * 4
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, (300, 4))
    sync = gym.vector.SyncVectorEnv(fns)
    with FastVectorEnv(fns, num_workers=2) as fast:
        for a, b in zip(fast.reset(seed=3), sync.reset(seed=3)):
            np.testing.assert_equal(a, b)
        parked = 0
        for step_actions in actions:
            _parallel_op()
            parked += fast._pool.openmp.parking
            for a, b in zip(fast.step(step_actions), sync.step(step_actions)):
                np.testing.assert_equal(a, b)
    sync.close()
    assert parked > 250, parked


@needs_torch_threads
def test_an_env_error_in_a_parked_step_is_raised_as_in_any_step(park_whatever_it_costs):
    _parallel_op()
    if not any("libgomp" in path for path in loaded_runtimes()):
        pytest.skip("torch here does not use GNU OpenMP")
    env = FastVectorEnv([lambda: FailingCartPole(fail_at=10**6), lambda: FailingCartPole(fail_at=20)], num_workers=2)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="the simulator failed") as error:
        for _ in range(30):
            _parallel_op()
            parking = env._pool.openmp.parking
            env.step(np.zeros(2, dtype=np.int64))
    assert parking
    assert error.value.env_index == 1
    assert env.closed


def test_release_is_harmless_without_openmp_work():
    idle = OpenMPIdleThreads()
    idle.release()
    idle.release()
    assert not idle.parking


class _OpenMPReportingEnv:
    """Mixed into a toy env: ``omp_in_parallel()`` of each GNU OpenMP runtime in its process."""

    def omp_in_parallel(self):
        return [ctypes.CDLL(path).omp_in_parallel() for path in loaded_runtimes()]


@needs_torch_threads
def test_a_worker_restarted_during_a_parked_step_is_not_forked_inside_the_region(tmp_path, park_whatever_it_costs):
    """With env_failure="restart" a worker whose process ends in a parked step is replaced
    outside the trainer's region (a process forked inside it would run its OpenMP code on one
    thread for the rest of its life: ``omp_in_parallel()`` would be 1 there), and the vector
    env steps on."""
    from toy_envs import FlakyEnv

    class Reporting(_OpenMPReportingEnv, FlakyEnv):
        pass

    _parallel_op()
    if not any("libgomp" in path for path in loaded_runtimes()):
        pytest.skip("torch here does not use GNU OpenMP")
    marker = str(tmp_path / "failed")
    fns = [(lambda k=k: Reporting(12 if k == 3 else None, "exit", marker)) for k in range(4)]
    with FastVectorEnv(fns, num_workers=2, env_failure="restart", context="fork") as env:
        env.reset(seed=0)
        parked_at_failure = None
        for t in range(1, 25):
            _parallel_op()
            parking = env.wait_settings.park and env._pool.openmp.parking
            _, _, _, truncations, infos = env.step(np.zeros(4, dtype=np.int64))
            if t == 12:
                parked_at_failure = parking
                assert np.flatnonzero(infos["env_restarted"]).tolist() == [2, 3] and truncations[2:].all()
        assert parked_at_failure
        assert env.restarts.tolist() == [0, 0, 1, 1]
        in_parallel = env.call("omp_in_parallel")
    assert all(flag == 0 for flags in in_parallel for flag in flags), in_parallel
    assert any(flags for flags in in_parallel[2:]), "the restarted worker loaded no GNU OpenMP runtime"


@needs_torch_threads
def test_a_setting_changed_by_a_signal_handler_during_a_parked_step_survives_it(park_whatever_it_costs):
    """A signal handler (or any Python) that runs while a step waits runs outside the
    trainer's OpenMP region: ``torch.set_num_threads`` called there is not undone when the
    step ends, as it would be inside a region."""
    import signal

    _parallel_op()
    if not any("libgomp" in path for path in loaded_runtimes()):
        pytest.skip("torch here does not use GNU OpenMP")
    threads = torch.get_num_threads()
    previous = signal.signal(signal.SIGALRM, lambda *_: torch.set_num_threads(1))
    try:
        with FastVectorEnv(_fns(2, step_sleep=0.05), num_workers=2) as env:
            env.reset(seed=0)
            for _ in range(4):
                _parallel_op()
                env.step(np.zeros(2, dtype=np.int64))
            _parallel_op()
            assert env._pool.openmp.parking
            signal.setitimer(signal.ITIMER_REAL, 0.01)  # (the handler runs 10 ms into the step)
            env.step(np.zeros(2, dtype=np.int64))
            changed = torch.get_num_threads()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        torch.set_num_threads(threads)
    assert changed == 1


_STALLED_LOOP = """
import json, sys, time
import gymnasium as gym, numpy as np, torch
from fastvec import FastVectorEnv
from fastvec.vector._wait import openmp

# (parking as on a quiet host, whatever this machine's load: the parked path is the one measured)
openmp._Runtime.measure_start_cost = lambda self: float("inf")
openmp.MAX_PARK_EXIT_S = float("inf")

class Stalls(gym.Wrapper):
    def __init__(self, env, at):
        super().__init__(env)
        self.at, self.steps = at, 0
    def step(self, action):
        self.steps += 1
        if self.steps == self.at:
            time.sleep(2.0)
        return self.env.step(action)

policy = torch.nn.Sequential(torch.nn.Linear(4, 256), torch.nn.Tanh(), torch.nn.Linear(256, 2))
envs = FastVectorEnv([(lambda k=k: Stalls(gym.make("CartPole-v1"), 40 if k == 0 else -1)) for k in range(8)])
obs, _ = envs.reset(seed=0)
for t in range(1, 60):
    with torch.no_grad():  # (a batch large enough for torch to run it on its threads)
        actions = policy(torch.as_tensor(obs).repeat(512, 1)).argmax(-1)[:8].numpy()
    parking = envs._pool.openmp is not None and envs._pool.openmp.parking
    cpu, wall = time.process_time(), time.perf_counter()
    obs, *_ = envs.step(actions)
    if time.perf_counter() - wall > 1.0:  # (the env's 40th step call: autoresets are not step calls)
        stalled = dict(cpu=time.process_time() - cpu, wall=time.perf_counter() - wall, parking=parking,
                       threads=torch.get_num_threads())
envs.close()
print(json.dumps(stalled))
"""


@needs_torch_threads
@pytest.mark.slow
@pytest.mark.parametrize("passive", [False, True], ids=["default", "OMP_WAIT_POLICY=passive"])
def test_a_stalled_step_in_a_torch_loop_costs_the_trainer_no_core(passive):
    """An env that stalls for 2 s in one step (a slow reset, a stuck simulator) inside a
    training loop on torch's default threads: the trainer's process waits without burning
    a core (under 5 % of one), whether its idle OpenMP threads were parked in the step
    (default) or the user asked them to wait passively (then they are left alone)."""
    import json
    import subprocess
    import sys

    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    if passive:
        environ["OMP_WAIT_POLICY"] = "passive"
    done = subprocess.run([sys.executable, "-c", _STALLED_LOOP], env=environ, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    stalled = json.loads(done.stdout.strip().splitlines()[-1])
    assert stalled["threads"] >= 2 and stalled["wall"] >= 2.0, stalled
    assert stalled["parking"] is not passive, stalled  # (the parked path is the one measured by default)
    assert stalled["cpu"] <= 0.05 * stalled["wall"], stalled
