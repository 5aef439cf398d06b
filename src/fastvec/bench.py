"""``python -m fastvec.bench``: side-by-side tables against the references.

Each section lives in ``fastvec/_bench/<name>.py`` (``async``: ``send_recv.py``) and exposes
``run(quick: bool) -> None``, printing its own table through :func:`print_table`.
Every figure is measured in this one run, next to its reference, so the ratio
columns are what to quote (absolute times drift on shared machines).

    python -m fastvec.bench                 # every section
    python -m fastvec.bench vector gae      # chosen sections
    python -m fastvec.bench --quick         # fewer repeats, smaller sizes
"""
from __future__ import annotations

import argparse
import importlib
import platform
import statistics
import time
from typing import Callable, Sequence

# Section name -> module under fastvec._bench, in print order.
SECTIONS = {
    "vector": "Multiprocess FastVectorEnv vs Sync/AsyncVectorEnv (Python envs)",
    "async": "send/recv with surplus envs on uneven step times",
    "native": "Cython-native classic control vs gymnasium's vector envs",
    "gae": "GAE / V-trace kernels vs NumPy and SB3",
    "replay": "Segment trees and prioritized replay",
    "flatten": "Space flatten/unflatten vs gymnasium.spaces",
    "torch": "Device-resident TorchCartPole",
    "real": "MuJoCo and Atari Pong on every vector backend vs the cores' limit (the `real` extra)",
    "ray": "RayVectorEnv: one shard's round trip vs local stepping, scaling over shards (the `ray` extra)",
    "train": "Training loops (CleanRL PPO, SB3 PPO, an Atari rollout) on each backend, torch at default threads and 1",
    "multiagent": "PettingZoo Parallel envs: MultiAgentVectorEnv vs SuperSuit (the `pettingzoo` extra and SuperSuit)",
    "stats": "What FastVectorEnv's statistics cost, with and without a monitor attached",
    "hosts": "A training loop on each backend in the conditions users run in: two trainers, a CPU hog, a quota, "
             "OMP_WAIT_POLICY=passive, a stalled env",
}


# Sections whose module has another name ("async" is a keyword: no module can be imported as it).
_MODULES = {"async": "send_recv"}


def median_time(fn: Callable[[], object], repeats: int = 7, number: int = 1, warmup: int = 1,
                sync: Callable[[], object] | None = None) -> float:
    """Median wall time of ``number`` calls of ``fn`` over ``repeats`` runs, per call, in seconds.

    ``sync`` (e.g. ``torch.cuda.synchronize``) is called after the warm-up, before the clock
    starts, and at the end of each run, before the clock stops: work that ``fn`` only queues
    (CUDA kernels) is then timed when it has run, not when it was launched.

    Example:
        >>> t = median_time(lambda: sum(range(100)), repeats=3, number=10, sync=lambda: None)
        >>> 0 < t < 1
        True
    """
    for _ in range(warmup):
        fn()
    if sync is not None:
        sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        if sync is not None:
            sync()
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times)


def interleaved_rates(runners: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Median of each runner's rate (what one call returns), the runners taking turns round after round.

    Taking turns keeps a drift in the machine's speed (shared, noisy cores) from
    landing on one runner only, so the ratios of one run compare like with like.
    """
    return {name: statistics.median(r) for name, r in interleaved_samples(runners, rounds).items()}


def interleaved_samples(runners: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Every round's rate of each runner, the runners taking turns (see :func:`interleaved_rates`):
    for ratios paired round by round."""
    rates: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, run in runners.items():
            rates[name].append(run())
    return rates


def paired_ratio(numerators: list[float], denominators: list[float]) -> float:
    """The median of the rounds' ratios (each round's pair measured a minute apart at most:
    a drift of a shared machine cancels in each, where a ratio of medians would keep it).

    Example:
        >>> paired_ratio([2.0, 9.0, 3.0], [1.0, 10.0, 1.0])  # (the second round ran slow for both)
        2.0
    """
    return statistics.median(a / b for a, b in zip(numerators, denominators))


def fmt_rate(x: float) -> str:
    """Format a rate (e.g. steps per second) compactly: 1.23M, 456k."""
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def fmt_time(seconds: float) -> str:
    """Format a duration with a sensible unit."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print a Markdown table (so it can be pasted into the README as is)."""
    print(f"\n### {title}\n")
    cells = [list(map(str, header))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
    print(line(cells[0]))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in cells[1:]:
        print(line(r))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fastvec.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sections", nargs="*", help=f"any of {', '.join(SECTIONS)} (default: all)")
    parser.add_argument("--quick", action="store_true", help="fewer repeats and sizes")
    args = parser.parse_args(argv)
    names = args.sections or list(SECTIONS)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {unknown}; expected some of {list(SECTIONS)}")
    print(f"fastvec.bench — {platform.platform()}, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}")
    for name in names:
        try:
            module = importlib.import_module(f"fastvec._bench.{_MODULES.get(name, name)}")
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] == "fastvec":
                raise  # fastvec's own module missing is a bug, not an extra left out
            # A section whose optional dependency (torch, sb3) is missing is skipped, loudly.
            print(f"\n### {SECTIONS[name]}\n\nskipped: {exc}")
            continue
        module.run(quick=args.quick)


if __name__ == "__main__":
    main()
