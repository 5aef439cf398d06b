"""The hosts users train on, each vector backend side by side: ``python -m fastvec.bench hosts``.

A backend measured alone on an idle machine is measured where nobody trains. Users run two
trainers at once (a sweep), next to someone else's busy process, under a CPU quota (a
container's ``cpu.max``), with ``OMP_WAIT_POLICY=passive`` in their shell, and with envs
that now and then stall (a simulator that reloads, a remote env that times out). How a
vector env waits decides what it costs there: a caller or an idle OpenMP thread that spins
takes a core that another trainer, the hog or the quota needed, and a caller that spins
through a stalled step burns its CPU for nothing. This section runs one training-loop
stand-in in each of those conditions, on each backend:

- **backends**: FastVectorEnv as it comes (``wait="auto"``), with parking off
  (``wait="release"``: the trainer's idle OpenMP threads are released before each step,
  never parked), with ``wait="block"`` (its waits block after the shortest spin),
  SyncVectorEnv and AsyncVectorEnv;
- **conditions**: alone; two trainers at once (their SPS summed); beside a CPU hog (a
  process busy-looping on one core, unpinned, for the whole run); under a one-core CPU
  quota (cgroup v2 ``cpu.max`` of ``100000 100000`` where root may create a cgroup under
  ``/sys/fs/cgroup``, else the trainer's process tree on one CPU, as ``taskset -c N``
  would: :func:`cpu_quota`); with ``OMP_WAIT_POLICY=passive`` in the trainer's environment
  from its start; with one env of the 8 sleeping :data:`STALL_S` in one step.

The trainer (:func:`train`) is what a training script does, kept small: a 64x64 MLP policy's
forward pass on the observations before every step and a short update (a few backward and
optimizer steps on the last 16 steps' batch) every 16 steps, over 8 envs of HalfCheetah-v5
(CartPole-v1 where MuJoCo is not installed), torch at its default threads: nothing here sets
``torch.set_num_threads`` or ``OMP_NUM_THREADS``, since users do not. Each trainer is a fresh
interpreter (so an environment variable, a quota or a second trainer is real, and nothing this
process imported or started is there); the trainers of one run warm up, then start their
timed runs together (:func:`run_trainers`) and report on stdout as JSON.

Columns: the loop's SPS (env transitions per second; the sum of the two trainers in the
sweep), its ratio to SyncVectorEnv in the same condition (the median of the rounds' ratios),
the trainer's CPU seconds per wall second spent in ``step`` (``time.process_time`` of the
trainer's process, all its threads, workers not included: what waiting costs the trainer's
own cores, 1.0 = a core busy the whole wait), and in the stall condition the CPU seconds the
trainer's process burnt during the stalled step. Backends take turns, their order reversed
every other round; figures are medians of the rounds.

This module imports neither torch nor the envs' simulators at import time: the process that
drives the runs must not hold an OpenMP pool or a core of its own while trainers are timed.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any, Callable, Sequence

import gymnasium as gym
import numpy as np

from fastvec.bench import fmt_rate, paired_ratio, print_table
from fastvec.vector._wait.policy import wake_latency_s

NUM_ENVS = 8
#: vector steps between two updates of the trainer
UPDATE_EVERY = 16
#: backward + optimizer steps in one update
UPDATE_ITERATIONS = 4
#: how long the stalling env sleeps in its one slow step
STALL_S = 2.0
#: the stalling env's step call (counted from 1) that stalls: after the warm-up, inside the timed run
STALL_AFTER_WARMUP = 8

#: backend label -> FastVectorEnv's ``wait=`` argument (the FastVectorEnv columns)
FAST_WAITS = {
    "FastVectorEnv": "auto",
    "FastVectorEnv, wait=release": "release",
    "FastVectorEnv, wait=block": "block",
}
REFERENCE = "SyncVectorEnv"
BACKENDS = tuple(FAST_WAITS) + (REFERENCE, "AsyncVectorEnv")

#: the cgroup v2 quota: at most one core's time in every period of 100 ms
CPU_MAX = "100000 100000"
CGROUP_ROOT = "/sys/fs/cgroup"


# --- the workload and the backends (module level: worker processes rebuild them by reference) ---
def default_workload() -> str:
    """HalfCheetah-v5 where MuJoCo is importable (a real env of a real cost), else CartPole-v1."""
    return "HalfCheetah-v5" if importlib.util.find_spec("mujoco") is not None else "CartPole-v1"


def make_env(env_id: str) -> gym.Env:
    """One env of the workload (MuJoCo's through ``_bench.envs.make_mujoco``, which quiets a
    per-process deprecation warning of HalfCheetah's model)."""
    if env_id.startswith("HalfCheetah"):
        from fastvec._bench.envs import make_mujoco

        return make_mujoco(env_id)
    return gym.make(env_id)


class StallOnce(gym.Wrapper):
    """Sleeps ``stall_s`` in its ``after``-th ``step`` call (counted from 1, resets in between
    not counted), and only then: a simulator that hangs once in a long run."""

    def __init__(self, env: gym.Env, after: int, stall_s: float = STALL_S):
        super().__init__(env)
        self.after = after
        self.stall_s = stall_s
        self.calls = 0

    def step(self, action):
        self.calls += 1
        if self.calls == self.after:
            time.sleep(self.stall_s)
        return self.env.step(action)


def make_stalling_env(env_id: str, after: int, stall_s: float = STALL_S) -> gym.Env:
    """:func:`make_env` wrapped in :class:`StallOnce`."""
    return StallOnce(make_env(env_id), after, stall_s)


def env_fns(env_id: str, stall_after: int | None = None, stall_s: float = STALL_S) -> list[Callable[[], gym.Env]]:
    """The 8 constructors of a run; with ``stall_after``, the first env stalls once (the others never)."""
    fns: list[Callable[[], gym.Env]] = [functools.partial(make_env, env_id) for _ in range(NUM_ENVS)]
    if stall_after is not None:
        fns[0] = functools.partial(make_stalling_env, env_id, stall_after, stall_s)
    return fns


def make_backend(name: str, fns: Sequence[Callable[[], gym.Env]]) -> gym.vector.VectorEnv:
    """The vector env of column ``name`` (every backend with its default autoreset mode)."""
    if name in FAST_WAITS:
        from fastvec.vector.fast_vector_env import FastVectorEnv

        return FastVectorEnv(list(fns), wait=FAST_WAITS[name])
    if name == "SyncVectorEnv":
        return gym.vector.SyncVectorEnv(list(fns))
    if name == "AsyncVectorEnv":
        return gym.vector.AsyncVectorEnv(list(fns))
    raise ValueError(f"unknown backend {name!r}; expected one of {BACKENDS}")


# --- the host: CPU model, the quota ------------------------------------------------------------
def _field(text: str, name: str) -> str | None:
    """The value of the first ``name: value`` line of ``text`` (a non-empty value), or None."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == name and value.strip():
            return value.strip()
    return None


def parse_lscpu(text: str) -> str | None:
    """The "Model name" of ``lscpu``'s output (C locale), or None."""
    return _field(text, "Model name")


def parse_cpuinfo(text: str) -> str | None:
    """The first "model name" of ``/proc/cpuinfo`` (x86; other architectures may have none), or None."""
    return _field(text, "model name")


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name, for the table's header: absolute SPS are only comparable on one model.

    ``lscpu`` first, then ``cpuinfo``, then :func:`platform.processor`; "unknown CPU" when none says.
    """
    import platform

    try:
        done = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10,
                              env={**os.environ, "LC_ALL": "C"})
        name = parse_lscpu(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        name = None
    if name is None:
        try:
            with open(cpuinfo) as f:
                name = parse_cpuinfo(f.read())
        except OSError:
            name = None
    return name or platform.processor() or "unknown CPU"


def cgroup2_mount(mounts: str = "/proc/self/mounts") -> str | None:
    """Where the cgroup v2 hierarchy is mounted under :data:`CGROUP_ROOT` (``/sys/fs/cgroup``
    itself on a v2 host, ``/sys/fs/cgroup/unified`` on a hybrid one), or None."""
    try:
        with open(mounts) as f:
            for line in f:
                fields = line.split()
                if len(fields) > 2 and fields[2] == "cgroup2" and fields[1].startswith(CGROUP_ROOT):
                    return fields[1]
    except OSError:
        pass
    return None


@dataclasses.dataclass
class Quota:
    """A one-core CPU limit for a trainer's process tree: a cgroup that the trainer joins at its
    start (its workers, started later, are born inside), or one CPU it binds itself to.

    :meth:`close` removes what :func:`cpu_quota` created (the cgroup, and the ``cpu`` controller
    it enabled in the parent's ``cgroup.subtree_control``).
    """

    method: str  # how the table names it
    cgroup: str | None = None  # the cgroup directory, with cpu.max set
    cpu: int | None = None  # the one CPU (the fallback)
    why_not_cgroup: str | None = None  # the fallback's reason
    _enabled_in: str | None = None  # a subtree_control where this quota added "+cpu"

    def command(self, trainer: Sequence[str]) -> list[str]:
        """The trainer's command line (:func:`trainer_command`) under this quota: the cgroup to
        join, or ``taskset -c N`` in front (where util-linux's taskset is missing, the trainer
        binds itself and execs itself again, as taskset does)."""
        if self.cgroup is not None:
            return [*trainer, "--cgroup", self.cgroup]
        if shutil.which("taskset") is not None:
            return ["taskset", "-c", str(self.cpu), *trainer]
        return [*trainer, "--cpu", str(self.cpu)]

    def close(self) -> None:
        if self.cgroup is not None:
            # The trainers and their workers have exited, but the kernel may take a moment to
            # reap the last of them: rmdir is refused (EBUSY) while a process is inside.
            deadline = time.monotonic() + 10.0
            while True:
                try:
                    os.rmdir(self.cgroup)
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if time.monotonic() > deadline:
                        print(f"hosts: could not remove the cgroup {self.cgroup}: {exc}", file=sys.stderr)
                        return
                    time.sleep(0.1)
            self.cgroup = None
        if self._enabled_in is not None:
            try:
                with open(self._enabled_in, "w") as f:
                    f.write("-cpu")
            except OSError:
                pass  # another cgroup uses the controller now: leave it on
            self._enabled_in = None


def _taskset(why: str) -> Quota:
    cpu = min(os.sched_getaffinity(0))
    return Quota(method=f"taskset -c {cpu}", cpu=cpu, why_not_cgroup=why)


def cpu_quota(root: str | None = None) -> Quota:
    """A one-core quota: a new cgroup v2 with ``cpu.max`` = :data:`CPU_MAX` where this process may
    create one (root, the ``cpu`` controller available and enabled or enabled by us), else the
    trainer's process tree bound to the first usable CPU (what ``taskset -c N`` does).

    Every step that can be refused is tried, so a read-only or delegated hierarchy, a hybrid
    host whose ``cpu`` controller is on cgroup v1, or an unprivileged user falls back.
    """
    root = root if root is not None else cgroup2_mount()
    if root is None:
        return _taskset("no cgroup v2 hierarchy is mounted")
    try:
        with open(os.path.join(root, "cgroup.controllers")) as f:
            available = f.read().split()
    except OSError as exc:
        return _taskset(f"cannot read {root}/cgroup.controllers: {exc}")
    if "cpu" not in available:
        return _taskset(f"the cpu controller is not available in {root} (cgroup v1 holds it?)")
    subtree = os.path.join(root, "cgroup.subtree_control")
    enabled_in = None
    path = os.path.join(root, f"fastvec-bench-hosts-{os.getpid()}")
    try:
        with open(subtree) as f:
            enabled = f.read().split()
        if "cpu" not in enabled:
            with open(subtree, "w") as f:
                f.write("+cpu")
            enabled_in = subtree
        os.mkdir(path)
    except OSError as exc:
        quota = Quota(method="", _enabled_in=enabled_in)
        quota.close()
        return _taskset(f"cannot create a cgroup with the cpu controller in {root}: {exc}")
    quota = Quota(method=f"cgroup v2 cpu.max {CPU_MAX}", cgroup=path, _enabled_in=enabled_in)
    try:
        with open(os.path.join(path, "cpu.max"), "w") as f:
            f.write(CPU_MAX)
    except OSError as exc:
        quota.close()
        return _taskset(f"cannot write {path}/cpu.max: {exc}")
    return quota


# --- conditions ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Condition:
    name: str  # the table's label ("{quota}" is replaced by the quota's method)
    key: str  # a short name (asv, the tests)
    trainers: int = 1
    hog: bool = False
    quota: bool = False
    env: tuple[tuple[str, str], ...] = ()  # added to the trainers' environment
    stall: bool = False


CONDITIONS = (
    Condition("alone", "alone"),
    Condition("2 trainers at once (SPS summed)", "sweep", trainers=2),
    Condition("beside a CPU hog (1 busy process)", "hog", hog=True),
    Condition("1-core quota ({quota})", "quota", quota=True),
    Condition("OMP_WAIT_POLICY=passive", "passive", env=(("OMP_WAIT_POLICY", "passive"),)),
    Condition(f"one env stalls {STALL_S:g} s in one step", "stall", stall=True),
)


def condition(key: str) -> Condition:
    """The condition of :data:`CONDITIONS` called ``key``."""
    return next(c for c in CONDITIONS if c.key == key)


@dataclasses.dataclass(frozen=True)
class Sizes:
    seconds: float  # each trainer's timed run (at least: a stalled run lasts until its stall)
    warmup_updates: int  # update cycles (UPDATE_EVERY steps and an update) before the timed run
    rounds: int


QUICK = Sizes(seconds=1.0, warmup_updates=2, rounds=1)
FULL = Sizes(seconds=4.0, warmup_updates=4, rounds=3)


# --- the trainer (runs in its own interpreter) ----------------------------------------------
def train(backend: str, env_id: str, seconds: float, warmup_updates: int, stall: bool,
          ready: Callable[[], None] = lambda: None, stall_s: float = STALL_S) -> dict[str, Any]:
    """The training-loop stand-in: build ``backend`` over 8 envs of ``env_id``, warm up, call
    ``ready`` (which returns when the timed run is to start), run for ``seconds`` and report.

    Only ``step`` is timed for the wait columns: ``time.process_time`` (every thread of this
    process, the workers not included) and ``time.perf_counter`` around each call, summed.
    With ``stall``, one env stalls ``stall_s`` once, in the timed run (its step call
    ``warm-up steps + STALL_AFTER_WARMUP``); the run goes on until that step is seen, and the
    slowest step's CPU and wall seconds are reported as the stall's.
    """
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    warmup_steps = warmup_updates * UPDATE_EVERY
    stall_after = warmup_steps + STALL_AFTER_WARMUP if stall else None
    envs = make_backend(backend, env_fns(env_id, stall_after, stall_s))
    try:
        space = envs.single_action_space
        continuous = isinstance(space, gym.spaces.Box)
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        act_dim = int(np.prod(space.shape)) if continuous else int(space.n)
        # actions and a value head: the update regresses the value on the rewards
        policy = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                               nn.Linear(64, act_dim + 1))
        optimizer = torch.optim.Adam(policy.parameters(), lr=3e-4)
        batch_obs = torch.zeros((UPDATE_EVERY, NUM_ENVS, obs_dim))
        batch_rewards = torch.zeros((UPDATE_EVERY, NUM_ENVS))

        def act(obs: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                out = policy(torch.as_tensor(obs, dtype=torch.float32).reshape(NUM_ENVS, -1))[:, :act_dim]
                if continuous:
                    return torch.tanh(out + 0.3 * torch.randn_like(out)).numpy().reshape((NUM_ENVS,) + space.shape)
                return torch.distributions.Categorical(logits=out).sample().numpy()

        def update() -> None:
            x = batch_obs.reshape(-1, obs_dim)
            target = batch_rewards.reshape(-1)
            for _ in range(UPDATE_ITERATIONS):
                out = policy(x)
                loss = (out[:, -1] - target).pow(2).mean() + 1e-3 * out[:, :act_dim].pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

        totals = {"step_cpu_s": 0.0, "step_wall_s": 0.0}
        slowest = {"wall": 0.0, "cpu": 0.0}
        obs, _ = envs.reset(seed=0)

        def cycle(timed: bool) -> None:
            """UPDATE_EVERY steps, the policy before each, then an update."""
            nonlocal obs
            for t in range(UPDATE_EVERY):
                actions = act(obs)
                batch_obs[t] = torch.as_tensor(obs, dtype=torch.float32).reshape(NUM_ENVS, -1)
                wall0, cpu0 = time.perf_counter(), time.process_time()
                obs, rewards, _, _, _ = envs.step(actions)
                cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
                batch_rewards[t] = torch.as_tensor(rewards, dtype=torch.float32)
                if timed:
                    totals["step_cpu_s"] += cpu
                    totals["step_wall_s"] += wall
                    if wall > slowest["wall"]:
                        slowest.update(wall=wall, cpu=cpu)
            update()

        for _ in range(warmup_updates):
            cycle(timed=False)
        ready()
        transitions = 0
        start = time.perf_counter()
        while True:
            cycle(timed=True)
            transitions += UPDATE_EVERY * NUM_ENVS
            wall = time.perf_counter() - start
            stalled = slowest["wall"] >= stall_s / 2
            if wall >= seconds and (not stall or stalled or wall > seconds + 10 * stall_s):
                break
        return {
            "backend": backend, "workload": env_id, "transitions": transitions, "wall_s": wall,
            "sps": transitions / wall, **totals,
            "stall_wall_s": slowest["wall"] if stall and stalled else None,
            "stall_cpu_s": slowest["cpu"] if stall and stalled else None,
            "torch_threads": torch.get_num_threads(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "usable_cpus": len(os.sched_getaffinity(0)),
        }
    finally:
        envs.close()


#: the keys of a trainer's report (the JSON line it prints)
REPORT_KEYS = ("backend", "workload", "transitions", "wall_s", "sps", "step_cpu_s", "step_wall_s",
               "stall_wall_s", "stall_cpu_s", "torch_threads", "omp_wait_policy", "usable_cpus")


def _main(argv: Sequence[str]) -> None:
    """``python -m fastvec._bench.hosts BACKEND ENV_ID SECONDS WARMUP_UPDATES [--stall] [--cgroup
    DIR | --cpu N] [--no-wait]``: one trainer. It prints ``ready`` after its warm-up, waits for a
    line on stdin (unless ``--no-wait``), runs, and prints its report as one JSON line."""
    parser = argparse.ArgumentParser(prog="python -m fastvec._bench.hosts")
    parser.add_argument("backend", choices=BACKENDS)
    parser.add_argument("env_id")
    parser.add_argument("seconds", type=float)
    parser.add_argument("warmup_updates", type=int)
    parser.add_argument("--stall", action="store_true")
    parser.add_argument("--cgroup", help="a cgroup v2 directory to join before anything starts")
    parser.add_argument("--cpu", type=int, help="bind this process (and so its workers) to this CPU, as taskset")
    parser.add_argument("--no-wait", action="store_true", help="start the timed run without waiting for stdin")
    args = parser.parse_args(argv)
    # Before torch is imported and any worker starts: the whole tree is then under the quota.
    if args.cgroup is not None:
        with open(os.path.join(args.cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    if args.cpu is not None:
        # taskset's way: bound, then exec'd, so that every thread and runtime starts on the one
        # CPU (fastvec's import has loaded libgomp, which counted the CPUs as it loaded)
        os.sched_setaffinity(0, {args.cpu})
        again = [args.backend, args.env_id, str(args.seconds), str(args.warmup_updates)]
        again += ["--stall"] * args.stall + ["--no-wait"] * args.no_wait
        os.execv(sys.executable, [sys.executable, "-m", "fastvec._bench.hosts", *again])

    def ready() -> None:
        print("ready", flush=True)
        if not args.no_wait:
            sys.stdin.readline()

    report = train(args.backend, args.env_id, args.seconds, args.warmup_updates, args.stall, ready)
    print(json.dumps(report), flush=True)


# --- driving the trainers ----------------------------------------------------------------------
def trainer_command(backend: str, env_id: str, sizes: Sizes, stall: bool = False) -> list[str]:
    """The command line of one trainer (:func:`_main`)."""
    command = [sys.executable, "-m", "fastvec._bench.hosts", backend, env_id, str(sizes.seconds),
               str(sizes.warmup_updates)]
    return command + ["--stall"] if stall else command


def trainer_environment(extra: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    """This process's environment for a trainer, ``OMP_WAIT_POLICY`` left out (so that only the
    condition that sets it has it), with ``extra`` added."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update(extra)
    return env


def start_hog() -> subprocess.Popen:
    """A process busy-looping on one core (one thread, not pinned) until it is killed."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, start_new_session=True)


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill ``proc`` and its process group (started in a session of its own: its workers too)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()


def _end(proc: subprocess.Popen) -> None:
    """:func:`_kill_group` if ``proc`` still runs, then reap it."""
    _kill_group(proc)
    proc.wait()


def run_trainers(commands: Sequence[Sequence[str]], env: dict[str, str], hog: bool = False,
                 timeout: float = 300.0) -> list[dict[str, Any]]:
    """Start a trainer per command (and a hog, with ``hog``), let every trainer warm up, then
    start their timed runs at once; their reports, in order.

    A trainer that fails raises RuntimeError with the end of its stderr; one still running after
    ``timeout`` seconds (a hang) is killed, with its workers, and fails so.
    """
    hog_proc = start_hog() if hog else None
    procs: list[tuple[subprocess.Popen, IO[bytes]]] = []
    watchdog = threading.Timer(timeout, lambda: [_kill_group(proc) for proc, _ in list(procs)])
    watchdog.daemon = True
    watchdog.start()
    try:
        for command in commands:
            err = tempfile.TemporaryFile()  # (a pipe could fill up and block the trainer)
            procs.append((subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=err, env=env, text=True, start_new_session=True), err))
        for proc, err in procs:
            said = []  # (lines before "ready": none unless something printed to stdout)
            while True:
                line = proc.stdout.readline()
                if not line or line.strip() == "ready":
                    break
                said.append(line)
            if not line:  # EOF: the trainer ended
                proc.wait(timeout=timeout)
                raise RuntimeError(f"a trainer failed before its timed run ({_label(proc)}):\n"
                                   + "".join(said) + _tail(err))
        for proc, _ in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        reports = []
        for proc, err in procs:
            out, _ = proc.communicate()
            code = proc.returncode
            lines = [ln for ln in out.splitlines() if ln.startswith("{")]
            if code != 0 or not lines:
                raise RuntimeError(f"a trainer failed ({_label(proc)}), exit code {code}:\n{_tail(err)}")
            reports.append(json.loads(lines[-1]))
        return reports
    finally:
        watchdog.cancel()
        for proc, err in procs:
            _end(proc)
            err.close()
        if hog_proc is not None:
            _end(hog_proc)


def _label(proc: subprocess.Popen) -> str:
    """A trainer's arguments (what follows the module's name in its command line)."""
    args = list(proc.args)
    return " ".join(args[args.index("fastvec._bench.hosts") + 1:])


def _tail(err: IO[bytes], chars: int = 3000) -> str:
    err.seek(0)
    return err.read().decode(errors="replace")[-chars:]


@dataclasses.dataclass
class Result:
    """One backend in one condition in one round (the trainers' reports combined)."""

    sps: float  # summed over the trainers
    wait_cpu_per_s: float  # the trainers' CPU seconds in step per wall second in step
    stall_cpu_s: float | None  # the largest over the trainers (one: the stall condition has one)


def combine(reports: Sequence[dict[str, Any]]) -> Result:
    """The trainers of one run as one row: summed SPS, their pooled CPU per wall second waiting."""
    stalls = [r["stall_cpu_s"] for r in reports if r.get("stall_cpu_s") is not None]
    wall = sum(r["step_wall_s"] for r in reports)
    return Result(sps=sum(r["sps"] for r in reports),
                  wait_cpu_per_s=sum(r["step_cpu_s"] for r in reports) / wall if wall > 0 else 0.0,
                  stall_cpu_s=max(stalls) if stalls else None)


def run_condition(cond: Condition, backend: str, env_id: str, sizes: Sizes,
                  quota: Quota | None = None) -> tuple[Result, list[dict[str, Any]]]:
    """One run of ``backend``'s trainer(s) in ``cond``; the combined row and the raw reports."""
    command = trainer_command(backend, env_id, sizes, stall=cond.stall)
    if cond.quota and quota is not None:
        command = quota.command(command)
    reports = run_trainers([command] * cond.trainers, trainer_environment(cond.env), hog=cond.hog)
    return combine(reports), reports


def missing() -> str | None:
    """Why the section cannot run here (torch is not installed), or None."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed; the hosts section needs torch: pip install torch==2.13.0"
    return None


def measure(cond: Condition, env_id: str, sizes: Sizes, backends: Sequence[str] = BACKENDS,
            quota: Quota | None = None) -> tuple[dict[str, list[Result]], list[dict[str, Any]]]:
    """Every round's result of each backend in ``cond``, the backends taking turns (the order
    reversed every other round, so no backend always runs first or last); and every report."""
    results: dict[str, list[Result]] = {b: [] for b in backends}
    reports: list[dict[str, Any]] = []
    for k in range(sizes.rounds):
        for backend in (backends if k % 2 == 0 else list(reversed(backends))):
            result, raw = run_condition(cond, backend, env_id, sizes, quota)
            results[backend].append(result)
            reports.extend(raw)
    return results, reports


def rows_of(cond_name: str, results: dict[str, list[Result]], stall: bool) -> list[list[str]]:
    """The table's rows of one condition: medians of the rounds, the ratio paired round by round."""
    reference = [r.sps for r in results.get(REFERENCE, [])]
    rows = []
    for backend, rounds in results.items():
        sps = statistics.median(r.sps for r in rounds)
        ratio = f"{paired_ratio([r.sps for r in rounds], reference):.2f}x" if reference else "-"
        wait = statistics.median(r.wait_cpu_per_s for r in rounds)
        stalls = [r.stall_cpu_s for r in rounds if r.stall_cpu_s is not None]
        stall_cell = (f"{statistics.median(stalls):.3f}" if stalls else "not seen") if stall else "-"
        rows.append([cond_name, backend, fmt_rate(sps), ratio, f"{wait:.2f}", stall_cell])
    return rows


HEADER = ["condition", "backend", "SPS", "vs Sync", "trainer CPU-s / wall-s in step", "CPU-s in the stalled step"]


def run(quick: bool = False, *, conditions: Sequence[Condition] = CONDITIONS,
        backends: Sequence[str] = BACKENDS, env_id: str | None = None, sizes: Sizes | None = None) -> None:
    """Print the hosts table: every condition, each backend, trainers in fresh interpreters."""
    why = missing()
    if why is not None:
        print(f"\n### Host conditions\n\nskipped: {why}")
        return
    sizes = sizes or (QUICK if quick else FULL)
    env_id = env_id or default_workload()
    quota = cpu_quota() if any(c.quota for c in conditions) else None
    rows: list[list[str]] = []
    threads: set[int] = set()
    quota_threads: set[int] = set()  # (under taskset, torch's default counts the one CPU)
    try:
        for cond in conditions:
            name = cond.name.format(quota=quota.method if quota is not None else "")
            results, reports = measure(cond, env_id, sizes, backends, quota)
            (quota_threads if cond.quota else threads).update(r["torch_threads"] for r in reports)
            rows += rows_of(name, results, cond.stall)
    finally:
        if quota is not None:
            quota.close()
    shown = "/".join(map(str, sorted(threads))) + " " if threads else ""
    print_table(f"Host conditions: a training loop over {env_id} x{NUM_ENVS} on each backend, torch at its "
                f"default {shown}threads, {cpu_model()} ({len(os.sched_getaffinity(0))} usable CPUs)",
                HEADER, rows)
    print(f"\nEach trainer: a fresh interpreter, a 64x64 MLP's forward pass before each step and "
          f"{UPDATE_ITERATIONS} backward/optimizer steps every {UPDATE_EVERY} steps; {sizes.warmup_updates} "
          f"updates of warm-up, then {sizes.seconds:g} s timed. {sizes.rounds} round(s), the backends taking "
          "turns (order reversed every other round); SPS and CPU: medians of the rounds, 'vs Sync': the "
          "median of the rounds' ratios to SyncVectorEnv. CPU-s / wall-s in step: the trainer's process "
          "(all its threads, not its workers) while it waited in step. Hog: one unpinned busy-looping "
          f"process. Stall: env 0 of {NUM_ENVS} sleeps {STALL_S:g} s in one step; its last column is the "
          "trainer's CPU seconds during that step.")
    wake = wake_latency_s()
    print("A wake-up from a blocked wait on this host (measured; a waiting worker spins at least this long): "
          + ("not measured here." if wake is None else f"{wake * 1e6:.0f} µs."))
    if quota is not None:
        print(f"Quota: {quota.method}" + (f" (no cgroup: {quota.why_not_cgroup})" if quota.why_not_cgroup else "")
              + f"; torch's default threads under it: {'/'.join(map(str, sorted(quota_threads)))}.")


if __name__ == "__main__":
    _main(sys.argv[1:])
