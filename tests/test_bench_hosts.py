"""The `hosts` bench section's helpers: the host lookups, the quota's fallback, the stalling
env, and one tiny trainer subprocess (CartPole, a fraction of a second; no timing asserted)."""
import json
import os
import subprocess
import time

import pytest

from fastvec._bench import hosts

LSCPU = """Architecture:                            x86_64
CPU(s):                                  2
Vendor ID:                               GenuineIntel
Model name:                              Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz
Thread(s) per core:                      2
"""
CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13 64-Core Processor
cpu MHz\t\t: 2450.000

processor\t: 1
model name\t: AMD EPYC 7B13 64-Core Processor
"""


def test_cpu_model_reads_lscpu_then_cpuinfo(monkeypatch, tmp_path):
    assert hosts.parse_lscpu(LSCPU) == "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"
    assert hosts.parse_cpuinfo(CPUINFO) == "AMD EPYC 7B13 64-Core Processor"
    assert hosts.parse_lscpu("Architecture: aarch64\n") is None
    assert hosts.parse_cpuinfo("processor\t: 0\nBogoMIPS\t: 50.00\n") is None
    assert hosts.cpu_model()  # this host's, whatever it is

    def no_lscpu(*args, **kwargs):
        raise FileNotFoundError("lscpu")

    monkeypatch.setattr(hosts.subprocess, "run", no_lscpu)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO)
    assert hosts.cpu_model(str(cpuinfo)) == "AMD EPYC 7B13 64-Core Processor"
    import platform

    monkeypatch.setattr(platform, "processor", lambda: "")
    assert hosts.cpu_model(str(tmp_path / "missing")) == "unknown CPU"


def test_stalling_env_stalls_once_in_its_nth_step_only(monkeypatch):
    slept = []
    monkeypatch.setattr(hosts.time, "sleep", slept.append)
    env = hosts.make_stalling_env("CartPole-v1", after=3, stall_s=2.0)
    env.reset(seed=0)
    for k in range(1, 40):
        _, _, term, trunc, _ = env.step(0)
        assert slept == ([2.0] if k >= 3 else []), k
        if term or trunc:
            env.reset()
    fns = hosts.env_fns("CartPole-v1", stall_after=5)
    assert isinstance(fns[0](), hosts.StallOnce)
    assert not any(isinstance(fn(), hosts.StallOnce) for fn in fns[1:])
    assert not any(isinstance(fn(), hosts.StallOnce) for fn in hosts.env_fns("CartPole-v1"))


def _fake_cgroup2(tmp_path, controllers="cpu memory", enabled=""):
    root = tmp_path / "cgroup"
    root.mkdir(parents=True)
    (root / "cgroup.controllers").write_text(controllers)
    (root / "cgroup.subtree_control").write_text(enabled)
    return root


def test_quota_falls_back_to_one_cpu_where_no_cgroup_can_be_made(monkeypatch, tmp_path):
    first_cpu = min(os.sched_getaffinity(0))
    quota = hosts.cpu_quota(str(tmp_path / "none"))  # nothing mounted there
    assert (quota.cgroup, quota.cpu, quota.method) == (None, first_cpu, f"taskset -c {first_cpu}")
    trainer = hosts.trainer_command("SyncVectorEnv", "CartPole-v1", hosts.QUICK)
    assert quota.command(trainer) == ["taskset", "-c", str(first_cpu), *trainer]
    monkeypatch.setattr(hosts.shutil, "which", lambda name: None)  # (no util-linux)
    assert quota.command(trainer) == [*trainer, "--cpu", str(first_cpu)]
    # A hybrid host: cgroup v2 mounted, its cpu controller held by v1
    quota = hosts.cpu_quota(str(_fake_cgroup2(tmp_path / "hybrid", controllers="memory pids")))
    assert quota.cgroup is None and "cpu controller is not available" in quota.why_not_cgroup
    # Not writable (as for a user that is not root, or a read-only /sys/fs/cgroup)
    root = _fake_cgroup2(tmp_path / "ro", enabled="cpu")

    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(hosts.os, "mkdir", refuse)
    quota = hosts.cpu_quota(str(root))
    assert quota.cgroup is None and quota.cpu == first_cpu
    assert "Permission denied" in quota.why_not_cgroup
    assert sorted(os.listdir(root)) == ["cgroup.controllers", "cgroup.subtree_control"]  # nothing left
    quota.close()  # nothing to undo


def test_quota_makes_a_cgroup_where_it_can_and_undoes_what_it_enabled(tmp_path):
    root = _fake_cgroup2(tmp_path)
    quota = hosts.cpu_quota(str(root))
    assert quota.method == f"cgroup v2 cpu.max {hosts.CPU_MAX}" and quota.why_not_cgroup is None
    trainer = hosts.trainer_command("SyncVectorEnv", "CartPole-v1", hosts.QUICK)
    assert quota.command(trainer) == [*trainer, "--cgroup", quota.cgroup]
    assert (root / "cgroup.subtree_control").read_text() == "+cpu"  # (a real file: the write as written)
    with open(os.path.join(quota.cgroup, "cpu.max")) as f:
        assert f.read() == "100000 100000"
    made = quota.cgroup
    os.remove(os.path.join(made, "cpu.max"))  # (cgroupfs's own files go with the directory)
    quota.close()
    assert not os.path.exists(made) and quota.cgroup is None
    assert (root / "cgroup.subtree_control").read_text() == "-cpu"


def test_cgroup2_mount_is_found_in_a_mounts_table(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n"
                      "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n")
    assert hosts.cgroup2_mount(str(mounts)) == "/sys/fs/cgroup/unified"
    mounts.write_text("cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n")
    assert hosts.cgroup2_mount(str(mounts)) is None


def test_combine_sums_sps_and_pools_the_wait():
    a = dict(sps=100.0, step_cpu_s=0.5, step_wall_s=1.0, stall_cpu_s=None)
    b = dict(sps=300.0, step_cpu_s=0.0, step_wall_s=3.0, stall_cpu_s=0.01)
    result = hosts.combine([a, b])
    assert result.sps == 400.0 and result.wait_cpu_per_s == pytest.approx(0.125) and result.stall_cpu_s == 0.01
    rows = hosts.rows_of("c", {"SyncVectorEnv": [result], "AsyncVectorEnv": [hosts.combine([a])]}, stall=True)
    assert [r[1:4] for r in rows] == [["SyncVectorEnv", "400", "1.00x"], ["AsyncVectorEnv", "100", "0.25x"]]
    assert [r[5] for r in rows] == ["0.010", "not seen"]


def test_the_trainer_environment_has_the_wait_policy_only_when_asked(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "active")
    assert "OMP_WAIT_POLICY" not in hosts.trainer_environment()
    assert hosts.trainer_environment((("OMP_WAIT_POLICY", "passive"),))["OMP_WAIT_POLICY"] == "passive"


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_the_hog_busy_loops_until_it_is_ended():
    hog = hosts.start_hog()
    try:
        time.sleep(0.2)  # (its start-up)
        before = _cpu_ticks(hog.pid)
        time.sleep(0.5)
        assert hog.poll() is None and _cpu_ticks(hog.pid) > before  # burning CPU, not sleeping
    finally:
        hosts._end(hog)
    assert hog.poll() is not None


def test_backends_take_turns_their_order_reversed_every_other_round(monkeypatch):
    order = []

    def run_condition(cond, backend, env_id, sizes, quota=None):
        order.append(backend)
        return hosts.Result(sps=float(len(order)), wait_cpu_per_s=0.0, stall_cpu_s=None), []

    monkeypatch.setattr(hosts, "run_condition", run_condition)
    results, _ = hosts.measure(hosts.condition("alone"), "CartPole-v1", hosts.Sizes(0.1, 1, rounds=3),
                               backends=["a", "b", "c"])
    assert order == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
    assert [r.sps for r in results["a"]] == [1.0, 6.0, 7.0]


pytest.importorskip("torch", reason="the hosts trainer needs torch (pip install torch==2.13.0)")


def test_one_tiny_trainer_reports_json_with_every_key():
    sizes = hosts.Sizes(seconds=0.05, warmup_updates=1, rounds=1)
    # (--cpu: the quota's fallback where taskset is missing, bound to one CPU as taskset binds)
    command = hosts.trainer_command("SyncVectorEnv", "CartPole-v1", sizes, stall=False) + ["--no-wait"]
    command += ["--cpu", str(min(os.sched_getaffinity(0)))]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                          env=hosts.trainer_environment((("OMP_WAIT_POLICY", "passive"),)))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "ready"
    report = json.loads(lines[-1])
    assert set(report) == set(hosts.REPORT_KEYS)
    assert report["backend"] == "SyncVectorEnv" and report["workload"] == "CartPole-v1"
    assert report["transitions"] % (hosts.UPDATE_EVERY * hosts.NUM_ENVS) == 0 and report["transitions"] > 0
    assert report["sps"] > 0 and 0 < report["step_wall_s"] <= report["wall_s"]
    assert report["step_cpu_s"] >= 0 and report["stall_cpu_s"] is None
    assert report["omp_wait_policy"] == "passive" and report["usable_cpus"] == 1


def test_run_trainers_starts_them_together_and_reads_their_reports_in_order():
    # Two trainers, through the same path as the table's sweep
    sizes = hosts.Sizes(seconds=0.05, warmup_updates=1, rounds=1)
    commands = [hosts.trainer_command("SyncVectorEnv", env_id, sizes) for env_id in ("CartPole-v1", "Acrobot-v1")]
    reports = hosts.run_trainers(commands, hosts.trainer_environment(), timeout=120)
    assert [(r["backend"], r["workload"]) for r in reports] == [("SyncVectorEnv", "CartPole-v1"),
                                                                ("SyncVectorEnv", "Acrobot-v1")]
    assert all(r["sps"] > 0 for r in reports)


def test_a_failing_trainer_raises_with_its_stderr():
    sizes = hosts.Sizes(seconds=0.05, warmup_updates=1, rounds=1)
    with pytest.raises(RuntimeError, match="NameNotFound"):  # (from its stderr)
        hosts.run_trainers([hosts.trainer_command("SyncVectorEnv", "NoSuchEnv-v0", sizes)],
                           hosts.trainer_environment(), timeout=120)


def test_a_stalled_run_lasts_until_its_stall_and_reports_it(monkeypatch):
    # The stall two cycles into the timed run: a run of 0.01 s must go on until it
    monkeypatch.setattr(hosts, "STALL_AFTER_WARMUP", 2 * hosts.UPDATE_EVERY + 8)
    report = hosts.train("SyncVectorEnv", "CartPole-v1", seconds=0.01, warmup_updates=1, stall=True, stall_s=0.3)
    assert report["stall_wall_s"] >= 0.3 and report["wall_s"] >= 0.3
    assert report["stall_cpu_s"] is not None and report["stall_cpu_s"] >= 0
