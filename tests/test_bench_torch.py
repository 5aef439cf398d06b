"""python -m fastvec.bench torch: synchronised timings, CUDA rows or the reason they are skipped."""
from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from fastvec import bench  # noqa: E402
from fastvec._bench import torch as bench_torch  # noqa: E402

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only output")


def test_median_time_counts_the_sync_inside_the_clock():
    """Work that fn only queues is timed when sync() has waited for it, as CUDA kernels are."""
    calls = []
    queued = lambda: calls.append("fn")  # noqa: E731  (queues "work", returns at once)

    def sync():
        calls.append("sync")
        time.sleep(0.02)  # the queued work finishing

    t = bench.median_time(queued, repeats=3, number=2, warmup=1, sync=sync)
    assert t >= 0.02 / 2  # per call: one 20 ms wait per run of 2 calls
    assert calls == ["fn", "sync"] + ["fn", "fn", "sync"] * 3
    assert bench.median_time(queued, repeats=3, number=2, warmup=1) < 0.005  # without it: queuing only


@no_cuda
def test_cuda_env_rows_skipped_with_the_reason(capsys):
    bench_torch.cuda_env_table(quick=True)
    out = capsys.readouterr().out
    assert "CUDA rows skipped: torch.cuda.is_available() is False" in out
    assert [name for name, _ in bench_torch.training_rows()] == [
        "fastvec examples/ppo.py, torch backend (CPU), defaults"]
    assert not [name for name, _ in bench_torch.throughput_rows() if "CUDA" in name]


def test_cuda_rows_are_listed_where_there_is_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert bench_torch.cuda_skip_reason() is None
    training = dict(bench_torch.training_rows())
    assert training["same, --device cuda --cuda-graphs"] == ["--device", "cuda", "--cuda-graphs"]
    throughput = dict(bench_torch.throughput_rows())
    assert "--cuda-graphs" in throughput["same, --cuda-graphs"]
    assert throughput["CUDA, 8192 envs x 16 steps, 2 epochs, hidden 32"][:2] == ["--device", "cuda"]


def test_env_table_has_the_fast_step(capsys, monkeypatch):
    monkeypatch.setattr(bench_torch, "median_time",
                        lambda fn, repeats, warmup, sync=None: bench.median_time(fn, 1, 1, 0, sync))
    bench_torch.env_table(quick=True)
    out = capsys.readouterr().out
    assert "TorchCartPole f32 fast" in out and "TorchCartPole f64" in out and "| 16384" in out


def test_ppo_tables_report_steady_state_sps(capsys, monkeypatch):
    """Both end-to-end tables, on tiny runs: steady-state SPS beside the time to target."""
    tiny = ["--num-envs", "16", "--num-steps", "8"]
    monkeypatch.setattr(bench_torch, "TARGET", 15.0)
    monkeypatch.setattr(bench_torch, "training_rows", lambda: [("tiny", tiny)])
    monkeypatch.setattr(bench_torch, "throughput_rows", lambda: [("tiny", tiny + ["--total-timesteps", "512"])])
    monkeypatch.setattr(bench_torch, "_sb3_time_to_target", lambda seed: (2.0, 1000, 500.0, None, 2.0))
    monkeypatch.setitem(__import__("sys").modules, "stable_baselines3", object())
    bench_torch.training_table(seeds=(1, 2))
    bench_torch.throughput_table()
    out = capsys.readouterr().out
    assert "median steady-state SPS" in out and "speed-up vs SB3 (wall)" in out
    assert "steady-state SPS" in out and "warm-up (before the clock)" in out
    assert out.count("| tiny") == 2


def test_asv_suite_runs_its_cpu_cases_and_skips_cuda_without_a_gpu():
    import importlib.util

    from torch_helpers import ROOT

    spec = importlib.util.spec_from_file_location("asv_bench_torch", ROOT / "asv_benchmarks" / "bench_torch.py")
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    for impl in suite.TimeCartPoleStep.params[0]:
        case = suite.TimeCartPoleStep()
        case.setup(impl, 64)
        case.time_step(impl, 64)
        case.teardown(impl, 64)
    if not torch.cuda.is_available():
        with pytest.raises(NotImplementedError):  # asv's way of skipping a case
            suite.TimeCartPoleStepCUDA().setup("torch_f32_fast", 4096)
