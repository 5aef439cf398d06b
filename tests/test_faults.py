"""Fault suite: every failure surfaces as a clear exception within a bound, and nothing leaks.

Each case checks: the exception type and message (env index, cause), the time to
it (< 5 s), and that no worker process and no shared-memory segment is left.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ClosedEnvironmentError, ResetNeeded

from fastvec import FastVectorEnv, RemoteTraceback, WorkerDiedError
from helpers import block_mappings
from toy_envs import CrashEnv, ToyEnv

BOUND_S = 5.0
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shm_segments(pids=None) -> set:
    """Named shared-memory blocks of fastvec's, made by processes ``pids`` (default: this
    one). fastvec makes none (its block has no name); its earlier versions named them
    fastvec_<creator pid>_<token>."""
    pids = [os.getpid()] if pids is None else pids
    names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return {n for n in names for pid in pids if n.startswith(f"fastvec_{pid}_")}


@pytest.fixture
def leak_check():
    """Yields a list to put envs in; afterwards asserts their workers and memory are gone."""
    import gc

    before = shm_segments()
    envs = []
    yield envs
    for env in envs:
        for p in env.processes:
            p.join(BOUND_S)
            assert not p.is_alive(), f"worker {p.pid} still alive"
    del envs[:]
    gc.collect()
    assert not block_mappings(), "this process still maps a shared block"
    assert shm_segments() == before, "shared memory left behind"


def _fns(n, crash_env, crash_index=None, **kwargs):
    """n envs; env ``crash_index`` (default: the last, in a worker process) is ``crash_env(**kwargs)``."""
    crash_index = n - 1 if crash_index is None else crash_index
    return [(lambda k=k: crash_env(**kwargs) if k == crash_index else CrashEnv(fail_at=10**9)) for k in range(n)]


def _timed(fn):
    start = time.perf_counter()
    try:
        fn()
    finally:
        elapsed = time.perf_counter() - start
        assert elapsed < BOUND_S, f"took {elapsed:.2f} s"


@pytest.mark.parametrize("crash_index, step_in_caller", [(3, True), (0, True), (0, False)])
def test_env_raises_in_step(crash_index, step_in_caller, leak_check):
    env = FastVectorEnv(_fns(4, CrashEnv, crash_index, fail_at=2), num_workers=2, step_in_caller=step_in_caller)
    leak_check.append(env)
    env.reset(seed=0)
    env.step(np.zeros(4, np.int64))
    with pytest.raises(ValueError, match="boom at step 2") as info:
        _timed(lambda: env.step(np.zeros(4, np.int64)))
    assert info.value.env_index == crash_index
    if hasattr(info.value, "add_note"):
        assert any(f"env {crash_index}" in note for note in info.value.__notes__)
    if crash_index == 0 and step_in_caller:
        assert "_fail" in "".join(__import__("traceback").format_tb(info.value.__traceback__))
    else:
        assert isinstance(info.value.__cause__, RemoteTraceback)
        assert "_fail" in info.value.__cause__.text
    assert env.closed
    with pytest.raises(ClosedEnvironmentError):
        env.step(np.zeros(4, np.int64))


def test_env_raises_in_reset(leak_check):
    env = FastVectorEnv(_fns(3, CrashEnv, in_reset=True), num_workers=3)
    leak_check.append(env)
    with pytest.raises(ValueError, match="boom") as info:
        _timed(lambda: env.reset(seed=0))
    assert info.value.env_index == 2


@pytest.mark.parametrize("bad_index", [0, 2])
def test_env_raises_in_constructor(bad_index):
    def bad():
        raise RuntimeError("cannot build this env")

    fns = [lambda: CrashEnv()] * 3
    fns[bad_index] = bad
    before = shm_segments()
    children = set(__import__("multiprocessing").active_children())
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="cannot build this env") as info:
        FastVectorEnv(fns, num_workers=3)
    assert time.perf_counter() - start < BOUND_S
    assert info.value.env_index == bad_index
    assert shm_segments() == before
    assert not set(__import__("multiprocessing").active_children()) - children


@pytest.mark.parametrize("returned, shown", [(None, "None"), ("CartPole-v1", "'CartPole-v1'")])
@pytest.mark.parametrize("bad_index", [0, 3])
def test_a_constructor_that_returns_no_env_is_named(bad_index, returned, shown):
    fns = [lambda: CrashEnv()] * 4
    fns[bad_index] = lambda: returned
    children = set(__import__("multiprocessing").active_children())
    with pytest.raises(TypeError, match=rf"env_fns\[{bad_index}\] returned {shown}, expected a gymnasium.Env") as info:
        _timed(lambda: FastVectorEnv(fns, num_workers=2))
    assert info.value.env_index == bad_index
    assert not set(__import__("multiprocessing").active_children()) - children


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_worker_dies_mid_step(how, leak_check):
    env = FastVectorEnv(_fns(4, CrashEnv, fail_at=2, how=how), num_workers=2)
    leak_check.append(env)
    env.reset(seed=0)
    env.step(np.zeros(4, np.int64))
    expected = "exited with code 3" if how == "exit" else "was killed by signal SIGKILL"
    with pytest.raises(WorkerDiedError, match=rf"worker 1 \(envs 2..3\) {expected}"):
        _timed(lambda: env.step(np.zeros(4, np.int64)))
    assert env.closed


def test_worker_killed_while_idle(leak_check):
    env = FastVectorEnv([lambda: CrashEnv(fail_at=10**9) for _ in range(4)], num_workers=2)
    leak_check.append(env)
    env.reset(seed=0)
    os.kill(env.processes[0].pid, signal.SIGKILL)
    env.processes[0].join(BOUND_S)
    with pytest.raises(WorkerDiedError, match="worker 0 .envs 0..1. was killed by signal SIGKILL"):
        _timed(lambda: env.step(np.zeros(4, np.int64)))


def test_hung_env_times_out_and_close_terminates(leak_check):
    env = FastVectorEnv(_fns(2, CrashEnv, fail_at=1, how="hang"), num_workers=2)
    leak_check.append(env)
    env.reset(seed=0)
    env.step_async(np.zeros(2, np.int64))
    import multiprocessing

    with pytest.raises(multiprocessing.TimeoutError):
        _timed(lambda: env.step_wait(timeout=0.2))
    _timed(lambda: env.close(timeout=0.5))


class WrongObsEnv(CrashEnv):
    def __init__(self, shape=(3,), dtype=np.float32):
        super().__init__()
        self.shape, self.dtype = shape, dtype

    def step(self, action):
        return np.zeros(self.shape, self.dtype), 0.0, False, False, {}


@pytest.mark.parametrize("shape, dtype", [((3,), np.float32), ((2,), np.complex128), ((2, 1), np.float32)])
def test_env_returns_wrong_observation(shape, dtype, leak_check):
    fns = [lambda: CrashEnv(fail_at=10**9), lambda: WrongObsEnv(shape, dtype)]
    env = FastVectorEnv(fns, num_workers=1)
    leak_check.append(env)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"env 1 returned an observation with shape"):
        _timed(lambda: env.step(np.zeros(2, np.int64)))


@pytest.mark.parametrize("step_in_caller", [False, True])
def test_step_before_reset_raises_reset_needed_once_and_the_vector_env_goes_on(step_in_caller, leak_check):
    """Envs from gymnasium.make refuse a step before their first reset (OrderEnforcing): the
    vector env refuses it first, sends nothing and stays open (a worker would end on it)."""
    import warnings

    env = FastVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(4)], num_workers=2,
                        step_in_caller=step_in_caller)
    leak_check.append(env)
    actions = np.zeros(4, np.int64)
    with warnings.catch_warnings(record=True) as logged:
        warnings.simplefilter("always")
        for call in (lambda: env.step(actions), lambda: env.step_async(actions),
                     lambda: env.send(actions, np.arange(4))):
            with pytest.raises(ResetNeeded, match="before calling `reset`"):
                _timed(call)
    assert [str(w.message) for w in logged] == []  # (no worker failed: nothing logged)
    assert not env.closed and all(p.is_alive() for p in env.processes)
    env.reset(seed=0)
    obs, rewards, *_ = env.step(actions)
    assert obs.shape == (4, 4) and rewards.tolist() == [1.0] * 4
    env.close()
    never_reset = FastVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=1)
    leak_check.append(never_reset)
    never_reset.close()
    with pytest.raises(ClosedEnvironmentError):  # (closed, as well as never reset: closed is said)
        never_reset.step(np.zeros(2, np.int64))


def test_envs_without_order_enforcing_may_step_before_reset_as_in_gymnasium(leak_check):
    """Gymnasium's vector envs step envs that were never reset when the envs allow it (its own
    tests do): so does FastVectorEnv, as SyncVectorEnv does."""
    class Counter(gym.Env):
        observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def __init__(self):
            self.t = 0

        def reset(self, *, seed=None, options=None):
            self.t = 0
            return np.zeros(1, np.float32), {}

        def step(self, action):
            self.t += 1 + int(action)
            return np.full(1, self.t, np.float32), float(self.t), False, False, {}

    fns = [Counter for _ in range(2)]
    env = FastVectorEnv(fns, num_workers=2)
    leak_check.append(env)
    sync = gym.vector.SyncVectorEnv(fns)
    actions = np.array([0, 1])
    for a, b in zip(env.step(actions)[:4], sync.step(actions)[:4]):
        np.testing.assert_equal(a, b)
    sync.close()
    env.close()


def test_non_picklable_constructor_with_spawn():
    lock = threading.Lock()
    before = shm_segments()
    with pytest.raises(TypeError, match="picklable"):
        FastVectorEnv([lambda: (lock, ToyEnv())[1] for _ in range(2)], num_workers=2, context="spawn")
    assert shm_segments() == before


def test_use_after_close_and_close_twice(leak_check):
    env = FastVectorEnv([lambda: ToyEnv() for _ in range(2)], num_workers=2)
    leak_check.append(env)
    env.close()
    env.close()
    for call in (lambda: env.reset(), lambda: env.step(np.zeros(2, np.int64)), lambda: env.call("t"),
                 lambda: env.get_attr("t"), lambda: env.set_attr("t", 1)):
        with pytest.raises(ClosedEnvironmentError):
            call()


def _run_script(body: str, new_session: bool = False) -> subprocess.Popen:
    # The fastvec this test imported (installed, or an in-place build), and the test envs.
    import fastvec

    package_root = os.path.dirname(os.path.dirname(os.path.abspath(fastvec.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([package_root, os.path.join(ROOT, "tests")]))
    script = textwrap.dedent(body)
    # cwd: the tests folder, so that the source tree cannot shadow the package under test.
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=os.path.join(ROOT, "tests"), start_new_session=new_session)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pids, bound=BOUND_S):
    deadline = time.time() + bound
    while time.time() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def test_ctrl_c_in_parent_mid_step():
    before = shm_segments()
    proc = _run_script("""
        import os, signal, sys, numpy as np
        # (Ctrl-C as in a terminal: a process started in the background by a non-interactive
        # shell, as CI may run this suite, inherits SIGINT ignored, and Python keeps it so)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from fastvec import FastVectorEnv
        from toy_envs import ToyEnv
        env = FastVectorEnv([lambda: ToyEnv(step_sleep=2.0) for _ in range(2)], num_workers=2)
        env.reset(seed=0)
        print(" ".join(str(p.pid) for p in env.processes), flush=True)
        try:
            env.step(np.zeros(2, np.int64))
        except KeyboardInterrupt:
            print("KeyboardInterrupt", flush=True)
            raise
    """)
    pids = [int(p) for p in proc.stdout.readline().split()]
    time.sleep(0.3)
    start = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert "KeyboardInterrupt" in out, err
    assert time.perf_counter() - start < BOUND_S
    assert not _wait_gone(pids), "workers outlived the interrupted parent"
    assert shm_segments() == before


@pytest.mark.parametrize("num_workers, context, reaped", [
    (2, "fork", True),
    (2, "fork", False),  # the dead parent stays a zombie: os.kill(pid, 0) still finds it
    (2, "forkserver", True),  # the worker's own parent is the server: it watches the pid
])
def test_parent_killed_workers_exit(num_workers, context, reaped):
    proc = _run_script(f"""
        import time
        from fastvec import FastVectorEnv
        from toy_envs import ToyEnv
        env = FastVectorEnv([lambda: ToyEnv() for _ in range(4)], num_workers={num_workers}, context="{context}")
        env.reset(seed=0)
        print(" ".join(str(p.pid) for p in env.processes), flush=True)
        time.sleep(60)
    """)
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == num_workers
    assert all(block_mappings(pid, proc.pid) for pid in pids)
    proc.kill()
    try:
        if reaped:
            proc.wait()
        assert not _wait_gone(pids), "workers lingered as orphans"
    finally:
        proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", "forkserver"])
@pytest.mark.parametrize("hang", ["sleep", "gil"])
def test_workers_hung_in_a_step_end_after_their_caller_is_killed(context, hang):
    """A worker whose env never returns from a step cannot notice its caller's death in its
    command loop; its parent watch ends it within the grace period (2 s) plus a check (0.5 s).
    ``gil``: the env loops in C with the GIL held (a regular expression that backtracks for
    ever), so no Python thread of the worker could run either."""
    step = "time.sleep(3600)" if hang == "sleep" else "re.match(r'(a+)+$', 'a' * 64 + 'b')"
    proc = _run_script(f"""
        import re, time, numpy as np
        import gymnasium as gym
        from fastvec import FastVectorEnv

        class HangingEnv(gym.Env):
            observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
            action_space = gym.spaces.Discrete(2)
            def reset(self, *, seed=None, options=None):
                return np.zeros(2, np.float32), {{}}
            def step(self, action):
                {step}
                return np.zeros(2, np.float32), 0.0, False, False, {{}}

        env = FastVectorEnv([HangingEnv for _ in range(2)], num_workers=2, context="{context}")
        env.reset(seed=0)
        print(" ".join(str(p.pid) for p in env.processes), flush=True)
        env.step_async(np.zeros(2, np.int64))
        time.sleep(0.5)
        print("stepping", flush=True)
        time.sleep(3600)
    """)
    pids = []
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2, proc.stderr.read() if proc.poll() is not None else pids
        assert proc.stdout.readline().strip() == "stepping"
        proc.kill()
        proc.wait()
        killed = time.perf_counter()
        assert not _wait_gone(pids, bound=10.0), "workers hung in a step outlived their killed caller"
        assert time.perf_counter() - killed < 2.0 + 0.5 + 1.5
    finally:
        proc.kill()
        proc.wait()
        for pid in pids:  # (what a failure left would spin for ever)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _processes_mapping(creator: int) -> list[int]:
    return [int(pid) for pid in filter(str.isdigit, os.listdir("/proc")) if block_mappings(pid, creator)]


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
@pytest.mark.parametrize("num_workers, step_in_caller", [(2, False), (1, False), (2, True), (1, True)])
def test_killing_the_whole_process_group_mid_step_leaves_nothing(context, num_workers, step_in_caller):
    # What scancel, docker kill, an OOM kill and Ray's actor kill do: SIGKILL to every process
    # of the job at once, so nobody is left to clean up. The block has no name to leave
    # behind, and its memory goes with the last process that maps it.
    proc = _run_script(f"""
        import numpy as np
        from fastvec import FastVectorEnv
        from toy_envs import ToyEnv
        env = FastVectorEnv([lambda: ToyEnv(step_sleep=0.001) for _ in range(4)], num_workers={num_workers},
                            context="{context}", step_in_caller={step_in_caller})
        env.reset(seed=0)
        print(" ".join(str(p.pid) for p in env.processes), flush=True)
        while True:
            env.step(np.zeros(4, np.int64))
    """, new_session=True)
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == num_workers - step_in_caller
    time.sleep(0.3)  # mid-step
    assert proc.pid in _processes_mapping(proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not _wait_gone(pids)
    assert not _processes_mapping(proc.pid), "a process still maps the killed job's block"
    assert not shm_segments([proc.pid, *pids]), "the killed job left shared memory behind in /dev/shm"


def test_no_resource_tracker_process():
    # Python's resource tracker is a separate process whose start-up competes with the
    # first ~50 ms of stepping; a block without a name needs no tracker.
    proc = _run_script("""
        import os
        from fastvec import FastVectorEnv
        from toy_envs import ToyEnv

        # The tracker's command line imports main from multiprocessing's resource_tracker. The
        # needle is split so that it is not in this script, which forked workers carry as theirs.
        TRACKER = b"resource_tracker import " + b"main"

        def tracker_running():
            me = str(os.getpid())
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                    cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
                except OSError:
                    continue
                if stat[1] == me and TRACKER in cmdline:
                    return True
            return False

        for num_workers, step_in_caller in ((2, False), (3, False), (1, True)):
            with FastVectorEnv([lambda: ToyEnv() for _ in range(4)], num_workers=num_workers,
                               step_in_caller=step_in_caller) as env:
                env.reset(seed=0)
                print(num_workers, tracker_running(), flush=True)
    """)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.split() == ["2", "False", "3", "False", "1", "False"]


def test_worker_fault_in_send_recv(leak_check):
    fns = [lambda: CrashEnv(fail_at=10**9), lambda: CrashEnv(fail_at=10**9),
           lambda: CrashEnv(fail_at=10**9), lambda: CrashEnv(fail_at=3)]
    env = FastVectorEnv(fns, num_workers=2, batch_size=2)
    leak_check.append(env)
    env.async_reset(seed=0)
    with pytest.raises(ValueError, match="boom") as info:
        def loop():
            # Until the crash surfaces: a worker asleep in its futex may miss the first few dozen
            # fast round trips of the other one, so count time, not iterations.
            deadline = time.perf_counter() + BOUND_S - 0.5
            while time.perf_counter() < deadline:
                obs, rew, term, trunc, infos = env.recv()
                env.send(np.zeros(2, np.int64), infos["env_id"])
        _timed(loop)
    assert info.value.env_index == 3


# --- what the opt-in step_in_caller=True mode can and cannot survive ------------------------
# With it, the calling process steps the first worker's share of the envs itself. An env there
# that raises is reported as in a worker (test_env_raises_in_step), but one that exits the
# process takes the caller with it, and a slow step there cannot honour step_wait(timeout=).

@pytest.mark.parametrize("step_in_caller", [False, True])
def test_an_env_that_exits_the_process(step_in_caller):
    proc = _run_script(f"""
        import numpy as np
        from fastvec import FastVectorEnv, WorkerDiedError
        from toy_envs import CrashEnv
        fns = [lambda: CrashEnv(fail_at=2, how="exit"), lambda: CrashEnv(fail_at=10**9)]
        env = FastVectorEnv(fns, num_workers=2, step_in_caller={step_in_caller})
        env.reset(seed=0)
        env.step(np.zeros(2, np.int64))
        try:
            env.step(np.zeros(2, np.int64))
        except WorkerDiedError as exc:
            print("survived:", exc, flush=True)
    """)
    out, err = proc.communicate(timeout=30)
    if step_in_caller:
        assert proc.returncode == 3 and "survived" not in out  # env 0 ran in the caller: it is gone
    else:
        assert proc.returncode == 0, err
        assert "survived: FastVectorEnv worker 0 (envs 0..0) exited with code 3" in out


@pytest.mark.parametrize("step_in_caller", [False, True])
def test_a_slow_env_and_step_wait_timeout(step_in_caller):
    import multiprocessing

    fns = [lambda: ToyEnv(step_sleep=0.6), lambda: ToyEnv()]
    with FastVectorEnv(fns, num_workers=2, step_in_caller=step_in_caller) as env:
        env.reset(seed=0)
        env.step_async(np.zeros(2, np.int64))
        start = time.perf_counter()
        if step_in_caller:
            env.step_wait(timeout=0.1)  # the caller itself runs the 0.6 s step: no timeout possible
            assert time.perf_counter() - start >= 0.5
        else:
            with pytest.raises(multiprocessing.TimeoutError):
                env.step_wait(timeout=0.1)
            assert time.perf_counter() - start < 0.4
            env.step_wait()  # still pending: collected by waiting again


def test_an_unguarded_script_under_spawn_is_told_to_guard_its_main(tmp_path):
    """With 'spawn' (torchrl makes it the default) each worker imports the main script again; a
    script that makes the vector env at its top level then kills its workers as they start. The
    error says why, and what to write."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(
        "import gymnasium as gym\n"
        "from fastvec import FastVectorEnv\n"
        "envs = FastVectorEnv([lambda: gym.make('CartPole-v1')] * 2, num_workers=1, context='spawn')\n"
        "envs.close()\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path))
    assert done.returncode != 0
    assert "WorkerDiedError" in done.stderr, done.stderr[-2000:]
    assert "if __name__ == \"__main__\":" in done.stderr and "'spawn' start method" in done.stderr, done.stderr[-2000:]
