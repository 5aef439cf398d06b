"""FastVectorEnv's statistics (``stats()``, the counters in the shared block) and
``python -m fastvec.monitor``, which reads them from another process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from hypothesis import given, settings
from hypothesis import strategies as st

from fastvec import FastVectorEnv
from fastvec.monitor import attach
from toy_envs import ToyEnv


class Counting(gym.Wrapper):
    """Counts its env's steps and resets (the reference, in this process)."""

    def __init__(self, env, counts, k):
        super().__init__(env)
        self.counts, self.k = counts, k

    def step(self, action):
        self.counts[self.k, 0] += 1
        return self.env.step(action)

    def reset(self, **kwargs):
        self.counts[self.k, 1] += 1
        return self.env.reset(**kwargs)


@settings(max_examples=6, deadline=None)
@given(num_envs=st.integers(1, 5), workers=st.integers(1, 3), steps=st.integers(0, 40),
       mode=st.sampled_from([AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP]),
       masked_reset=st.booleans(), seed=st.integers(0, 2**16))
def test_counters_count_every_env_step_and_reset(num_envs, workers, steps, mode, masked_reset, seed):
    """Steps and resets per env (autoresets, masked resets), the caller's steps and each
    worker's commands equal what a counting wrapper sees under SyncVectorEnv on the same
    seeds and actions."""
    workers = min(workers, num_envs)
    counts = np.zeros((num_envs, 2), np.int64)
    reference = SyncVectorEnv([lambda k=k: Counting(ToyEnv(max_len=6), counts, k) for k in range(num_envs)],
                              autoreset_mode=mode)
    rng = np.random.default_rng(seed)
    actions = rng.integers(0, 3, (steps, num_envs))
    with FastVectorEnv([lambda: ToyEnv(max_len=6)] * num_envs, workers, autoreset_mode=mode) as envs:
        for vec in (reference, envs):
            vec.reset(seed=seed)
            for t in range(steps):
                vec.step(actions[t])
                if masked_reset and t == steps // 2:
                    vec.reset(options={"reset_mask": np.arange(num_envs) % 2 == 0})
        report = envs.stats()
    reference.close()
    assert report["env_steps"] == counts[:, 0].tolist()
    assert report["env_resets"] == counts[:, 1].tolist()
    assert report["steps"] == steps
    assert [w["commands"] for w in report["workers"]] == [steps] * workers
    assert [w["envs"] for w in report["workers"]] == [len(r) for r in np.array_split(range(num_envs), workers)]


@pytest.mark.parametrize("kwargs", [{"step_in_caller": True}, {"act": "dict"}, {"async_api": True}],
                         ids=["caller-share", "dict-actions", "step_async"])
def test_every_step_path_is_counted(kwargs):
    """Steps the worker's compiled loop leaves to Python (Dict actions), the caller's own share,
    and step_async/step_wait: each worker's commands and the caller's steps all counted."""
    act = kwargs.get("act", "discrete")
    make = [lambda: ToyEnv(act_space=act, info_prob=0.0)] * 3
    with FastVectorEnv(make, 2, step_in_caller=kwargs.get("step_in_caller", False)) as envs:
        envs.reset(seed=0)
        envs.action_space.seed(0)
        for _ in range(6):
            actions = envs.action_space.sample()
            if kwargs.get("async_api"):
                envs.step_async(actions)
                envs.step_wait()
            else:
                envs.step(actions)
        report = envs.stats()
    assert report["steps"] == 6 and report["sps"] > 0
    assert [w["commands"] for w in report["workers"]] == [6, 6]
    assert all(w["step_us_p50"] is not None for w in report["workers"])
    assert sum(report["env_steps"]) + sum(report["env_resets"]) == 3 * 7


def test_stats_is_a_window_since_the_last_call_and_names_a_slow_worker():
    """Worker 1's env sleeps 3 ms a step, worker 0's none: the advice names worker 1."""
    fns = [lambda: ToyEnv(max_len=50, info_prob=0.0)] + [lambda: ToyEnv(max_len=50, info_prob=0.0,
                                                                        step_sleep=3e-3)]
    with FastVectorEnv(fns, 2) as envs:
        envs.reset(seed=0)
        for _ in range(20):
            envs.step(np.zeros(2, np.int64))
        first = envs.stats()
        for _ in range(5):
            envs.step(np.zeros(2, np.int64))
        second = envs.stats()
    assert first["steps"] == 20 and second["steps"] == 5
    assert sum(second["env_steps"]) + sum(second["env_resets"]) == 10
    slow, fast = second["workers"][1], second["workers"][0]
    assert slow["step_us_mean"] >= 3000 > fast["step_us_mean"]
    assert slow["step_us_p50"] >= 2048
    assert any(line.startswith("worker 1 is") for line in first["advice"]), first["advice"]
    # the caller's time: mostly waiting for worker 1's 3 ms env (nothing runs between steps)
    shares = [first["env_share"], first["handoff_share"], first["trainer_share"]]
    assert sum(shares) == pytest.approx(1.0) and min(shares) >= 0
    assert first["env_share"] > 0.5 > first["trainer_share"], shares
    assert not any(line.startswith("worker 0 is") for line in first["advice"])


def test_stats_off_counts_nothing_and_says_so():
    with FastVectorEnv([lambda: ToyEnv()] * 2, 1, stats=False) as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(2, np.int64))
        with pytest.raises(RuntimeError, match="stats=False"):
            envs.stats()
        assert not envs._pool._buffers[0]["stats"].any()  # (off: not one word of it written)
    with FastVectorEnv([lambda: ToyEnv()] * 2, 1) as envs:
        pass
    with pytest.raises(gym.error.ClosedEnvironmentError):
        envs.stats()


_JOB = """
import sys, numpy as np
from fastvec import FastVectorEnv
sys.path.insert(0, {tests!r})
from toy_envs import ToyEnv
envs = FastVectorEnv([lambda: ToyEnv(info_prob=0.0)] * 3, 2)
envs.reset(seed=0)
for _ in range({steps}):
    envs.step(np.zeros(3, np.int64))
print("stepped", flush=True)
sys.stdin.readline()  # (holds the vector env until told to go on)
for _ in range({steps}):
    envs.step(np.zeros(3, np.int64))
print("done", flush=True)
envs.close()
"""


def _monitor(*args):
    return subprocess.run([sys.executable, "-m", "fastvec.monitor", *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def test_monitor_reads_a_running_job_from_outside_and_detaches():
    tests = os.path.dirname(os.path.abspath(__file__))
    job = subprocess.Popen([sys.executable, "-c", _JOB.format(tests=tests, steps=37)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "stepped"
        done = _monitor(job.pid, "--once", "--json", "--interval", "0.05")
        assert done.returncode == 0, done.stderr
        [reading] = json.loads(done.stdout)
        assert reading["pid"] == job.pid and reading["num_envs"] == 3 and reading["num_workers"] == 2
        assert reading["totals"]["steps"] == 37
        assert reading["totals"]["env_steps"] + reading["totals"]["env_resets"] == 3 * (37 + 1)
        assert reading["steps"] == 0  # (paused during the window)
        text = _monitor(job.pid, "--once", "--interval", "0.05")
        assert text.returncode == 0 and "worker  1 [" in text.stdout, text.stdout
        job.stdin.write("go\n")
        job.stdin.flush()
        assert job.stdout.readline().strip() == "done"  # (the job went on after the monitor left)
        assert job.wait(timeout=30) == 0
    finally:
        job.kill()
        job.wait()


def test_the_live_monitor_stops_when_the_job_closes_its_vector_env_or_ends():
    tests = os.path.dirname(os.path.abspath(__file__))
    for ends in (False, True):
        script = _JOB.format(tests=tests, steps=5) + ("" if ends else "sys.stdin.readline()\n")
        job = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
        monitor = None
        try:
            assert job.stdout.readline().strip() == "stepped"
            monitor = subprocess.Popen([sys.executable, "-m", "fastvec.monitor", str(job.pid), "--json",
                                        "--interval", "0.05", "--grace", "0.2"], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
            assert json.loads(monitor.stdout.readline())[0]["totals"]["steps"] == 5  # (live, attached)
            job.stdin.write("go\n")
            job.stdin.flush()
            assert job.stdout.readline().strip() == "done"  # (its vector env is closed now)
            if ends:
                assert job.wait(timeout=30) == 0
            out, err = monitor.communicate(timeout=30)
            assert monitor.returncode == 0 and f"process {job.pid} ended, or closed its vector envs" in err, err
            assert job.poll() is None or ends  # (a job that closed its env but runs on: the monitor left)
        finally:
            for process in (job, monitor):
                if process is not None:
                    process.kill()
                    process.wait()


_TWO_ENVS_JOB = """
import sys, time, numpy as np
from fastvec import FastVectorEnv
sys.path.insert(0, {tests!r})
from toy_envs import ToyEnv
for steps in (5, 7):  # (a run, then another in a new vector env, as after an evaluation)
    time.sleep(0.0 if steps == 5 else 0.5)  # (some work with no vector env open in between)
    with FastVectorEnv([lambda: ToyEnv(info_prob=0.0)] * 2, 1) as envs:
        envs.reset(seed=0)
        for _ in range(steps):
            envs.step(np.zeros(2, np.int64))
        print("stepped", steps, flush=True)
        sys.stdin.readline()
"""


def test_the_live_monitor_follows_a_vector_env_made_after_it_attached():
    tests = os.path.dirname(os.path.abspath(__file__))
    job = subprocess.Popen([sys.executable, "-c", _TWO_ENVS_JOB.format(tests=tests)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    monitor = None
    try:
        assert job.stdout.readline().strip() == "stepped 5"
        monitor = subprocess.Popen([sys.executable, "-m", "fastvec.monitor", str(job.pid), "--json",
                                    "--interval", "0.05"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert [r["totals"]["steps"] for r in json.loads(monitor.stdout.readline())] == [5]
        job.stdin.write("go\n")
        job.stdin.flush()
        assert job.stdout.readline().strip() == "stepped 7"  # (the first env closed, a second one made)
        for _ in range(200):
            seen = [r["totals"]["steps"] for r in json.loads(monitor.stdout.readline())]
            if seen != [5]:
                break
        assert seen == [7]
        job.stdin.write("go\n")
        job.stdin.flush()
        assert job.wait(timeout=30) == 0
        _, err = monitor.communicate(timeout=30)
        assert monitor.returncode == 0 and "ended" in err, err
    finally:
        for process in (job, monitor):
            if process is not None:
                process.kill()
                process.wait()


def test_monitor_refuses_a_process_without_fastvec_or_no_process_clearly():
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        done = _monitor(idle.pid, "--once")
        assert done.returncode == 1 and f"process {idle.pid} has no FastVectorEnv with statistics" in done.stderr
    finally:
        idle.kill()
        idle.wait()
    done = _monitor(idle.pid, "--once")
    assert done.returncode == 1 and f"no process {idle.pid}" in done.stderr
    with pytest.raises(ValueError, match="positive int"):
        attach(-3)
    assert _monitor(os.getpid(), "--interval", "0").returncode == 2
    assert _monitor(os.getpid(), "--grace", "-1").returncode == 2


def test_monitor_refuses_another_users_process_clearly():
    """The monitor reads /proc/PID/fd, which only the process's own user (or root) may: run as
    another user against a job of this one, it says so and exits 1."""
    import shutil

    if os.geteuid() == 0:  # (root: the monitor runs as nobody, against this process)
        as_other = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        if shutil.which("setpriv") is None or subprocess.run(
                as_other + [sys.executable, "-c", "import fastvec.monitor"], capture_output=True).returncode:
            pytest.skip("needs setpriv, and a Python that user nobody can run fastvec with")
        target = os.getpid()
    else:  # (another user: the monitor runs as this user, against init, root's)
        as_other, target = [], 1
        if os.stat("/proc/1").st_uid == os.geteuid():
            pytest.skip("this user owns process 1")
    with FastVectorEnv([lambda: ToyEnv()] * 2, 1) as envs:
        envs.reset(seed=0)
        done = subprocess.run(as_other + [sys.executable, "-m", "fastvec.monitor", str(target), "--once"],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert f"cannot read process {target}'s file descriptors" in done.stderr and "same user" in done.stderr


def test_the_live_view_and_its_png_name_the_slow_worker(tmp_path):
    """The rich view (the ``monitor`` extra) of a job whose worker 1 steps an env of 3 ms, and
    its PNG, drawn headless."""
    pytest.importorskip("rich")
    pytest.importorskip("PIL")
    import io

    from rich.console import Console

    from fastvec.monitor import readings, rich_view, save_png

    fns = [lambda: ToyEnv(max_len=50, info_prob=0.0)] + [lambda: ToyEnv(max_len=50, info_prob=0.0,
                                                                        step_sleep=3e-3)]
    with FastVectorEnv(fns, 2) as envs:
        envs.reset(seed=0)
        blocks = attach(os.getpid())
        try:
            mine = [b for b in blocks if b.snapshot()["env_steps"] == [0, 0]]
            assert len(mine) == 1
            # (steps taken while the monitor's window is open: its reading is of that window)
            stepper = threading.Thread(target=lambda: [envs.step(np.zeros(2, np.int64)) for _ in range(20)])
            stepper.start()
            now = readings(mine, 0.5)
            stepper.join()
        finally:
            for block in blocks:
                block.close()
    out = io.StringIO()
    Console(file=out, width=120).print(rich_view(now))
    text = out.getvalue()
    assert "2 envs · 2 workers" in text and "! worker 1 is" in text, text
    save_png(now, str(tmp_path / "view.png"))
    from PIL import Image

    with Image.open(tmp_path / "view.png") as image:
        assert image.format == "PNG" and image.width > 600 and image.height > 100


def test_pipe_traffic_is_counted_message_for_message_and_byte_for_byte(monkeypatch):
    """Every message the caller sends a worker or reads from one, after the block exists,
    with its pickled size: what multiprocessing's Connection itself sent and received in
    this process, through resets, steps whose infos go through the pipe, calls and
    attribute reads."""
    from multiprocessing.connection import Connection

    seen = {"messages": 0, "bytes": 0}
    send_bytes, recv_bytes = Connection.send_bytes, Connection.recv_bytes

    def counted_send(self, buf, *args):
        seen["messages"] += 1
        seen["bytes"] += len(buf)
        return send_bytes(self, buf, *args)

    def counted_recv(self, *args):
        data = recv_bytes(self, *args)
        seen["messages"] += 1
        seen["bytes"] += len(data)
        return data

    with FastVectorEnv([lambda: ToyEnv(info_prob=0.5)] * 3, 2) as envs:
        monkeypatch.setattr(Connection, "send_bytes", counted_send)
        monkeypatch.setattr(Connection, "recv_bytes", counted_recv)
        envs.reset(seed=0)
        for _ in range(30):
            envs.step(np.zeros(3, np.int64))
        envs.get_attr("max_len")
        envs.call("render")
        report = envs.stats()
        monkeypatch.undo()
    assert seen["messages"] > 30  # (the infos' objects and new keys went through the pipes)
    assert report["pipe_messages"] == seen["messages"]
    assert report["pipe_bytes"] == seen["bytes"]
    assert sum(w["pipe_messages"] for w in report["workers"]) == seen["messages"]
    assert all(w["pipe_messages"] > 0 for w in report["workers"])


def test_steps_that_go_through_the_pipes_are_named_in_the_advice():
    """Infos with a string in every step go through the pipe pickled: the advice says so;
    number infos stay in the block and it says nothing."""
    with FastVectorEnv([lambda: ToyEnv(info_prob=1.0)] * 2, 2) as envs:
        envs.reset(seed=0)
        for _ in range(40):
            envs.step(np.zeros(2, np.int64))
        piped = envs.stats()
    with FastVectorEnv([lambda: ToyEnv(info_prob=0.0)] * 2, 2) as envs:
        envs.reset(seed=0)
        for _ in range(40):
            envs.step(np.zeros(2, np.int64))
        quiet = envs.stats()
    assert any("pipe messages" in line for line in piped["advice"]), piped
    assert quiet["pipe_messages"] < 40 and not any("pipe messages" in line for line in quiet["advice"]), quiet
