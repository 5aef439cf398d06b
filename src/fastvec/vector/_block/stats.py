"""Both sides, and any reader: the statistics region of a FastVectorEnv's shared block.

The first section of every block (offset 0) is a small array of uint64 counters, written
without locks, each word by one process only (the caller's row by the caller, a worker's rows
by that worker), and readable by anyone who maps the block: :meth:`FastVectorEnv.stats` in
the calling process, ``python -m fastvec.monitor`` in another. A reader may see a row
mid-update (one counter bumped, its neighbour not yet); every word itself is whole (aligned
8-byte stores), and counts only grow, so two snapshots a second apart give rates.

Layout, in words (:func:`words`; the word indices are the ``cpdef enum`` members of
``_block/protocol.pxd``, which the worker's compiled loop writes through):

- ``HEADER`` (8): ``MAGIC``, ``VERSION``, the number of workers and of envs, the caller's pid.
- the caller's row (8, ``CallerStat``): vector steps, env transitions, the time spent inside
  ``step`` and between steps (ns), failures recovered (``env_failure="restart"``).
- one row per worker (8, ``WorkerStat``): plain step commands served, the time its envs took to
  step them, the time it waited for commands (ns), written by the worker; how many envs it
  steps, the messages and bytes over its pipe (both ways, counted once the worker has mapped
  the block: the handshake that hands it the block is not) and how many times its process was
  replaced, written by the caller.
- one histogram per worker (``HISTOGRAM_BUCKETS``): the step commands by how long the envs
  took, bucket ``k`` counting durations in ``[2**(k-1), 2**k)`` µs (bucket 0: under 1 µs).
- two words per env: its steps and its resets (autoresets included), written by its worker;
- one word per env: how many times it was built again after a failure (its own, or its
  worker process's), written by the caller.
"""
from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from fastvec.vector._block.protocol import CallerStat, StatsLayout, WorkerStat

__all__ = ["MAGIC", "VERSION", "HEADER", "ROW", "HISTOGRAM_BUCKETS", "words", "StatsRegion", "summarize"]

#: b"fastvecS" read as a little-endian uint64: what a reader checks before trusting the rest
MAGIC = int.from_bytes(b"fastvecS", "little")
VERSION = 2
HEADER = int(StatsLayout.STATS_HEADER)
ROW = int(StatsLayout.STATS_ROW)
HISTOGRAM_BUCKETS = int(StatsLayout.STATS_BUCKETS)


def _key(member) -> str:
    """A counter's name in a snapshot: ``CALLER_IN_STEP_NS`` -> ``in_step_ns``."""
    return member.name.split("_", 1)[1].lower()


def words(workers: int, envs: int) -> int:
    """The region's size in uint64 words."""
    return HEADER + ROW * (1 + workers) + HISTOGRAM_BUCKETS * workers + 3 * envs


class StatsRegion:
    """Views of the statistics region (a uint64 array of :func:`words` words).

    Attributes:
        caller: the caller's row; workers: (workers, ROW); histograms: (workers, buckets);
        env_counts: (envs, 2), each env's steps and resets; env_restarts: (envs,).
    """

    def __init__(self, region: np.ndarray):
        if region.dtype != np.uint64 or region.ndim != 1 or len(region) < HEADER:
            raise ValueError(f"a statistics region is a 1-d uint64 array, got {region.dtype} {region.shape}")
        self.region = region
        self.num_workers, self.num_envs = int(region[2]), int(region[3])
        if len(region) < words(self.num_workers, self.num_envs):
            raise ValueError(f"a statistics region of {self.num_workers} workers and {self.num_envs} envs needs "
                             f"{words(self.num_workers, self.num_envs)} words, got {len(region)}")
        at = HEADER
        self.caller = region[at:at + ROW]
        at += ROW
        self.workers = region[at:at + ROW * self.num_workers].reshape(self.num_workers, ROW)
        at += ROW * self.num_workers
        self.histograms = region[at:at + HISTOGRAM_BUCKETS * self.num_workers].reshape(
            self.num_workers, HISTOGRAM_BUCKETS)
        at += HISTOGRAM_BUCKETS * self.num_workers
        self.env_counts = region[at:at + 2 * self.num_envs].reshape(self.num_envs, 2)
        at += 2 * self.num_envs
        self.env_restarts = region[at:at + self.num_envs]

    @classmethod
    def initialize(cls, region: np.ndarray, envs_per_worker: list[int], pid: int) -> "StatsRegion":
        """Write the header of a new (zero-filled) region and each worker's env count;
        returns its views."""
        region[:HEADER] = (MAGIC, VERSION, len(envs_per_worker), sum(envs_per_worker), pid, 0, 0, 0)
        stats = cls(region)
        stats.workers[:, WorkerStat.WORKER_ENVS] = envs_per_worker
        return stats

    def release(self) -> None:
        """Drop every view (the vector env is closed): the block is unmapped once nothing else
        holds it. Counting then stops (:attr:`caller` is None), and the magic word is cleared,
        so that a monitor no longer finds the block while something else still maps it."""
        if self.region is not None:
            self.region[0] = 0
        self.region = self.caller = self.workers = self.histograms = self.env_counts = self.env_restarts = None

    @property
    def pid(self) -> int:
        return int(self.region[4])

    def snapshot(self) -> dict[str, Any]:
        """A copy of every counter, as plain Python numbers."""
        return {
            "caller": {_key(c): int(self.caller[c]) for c in CallerStat},
            "workers": [{_key(w): int(row[w]) for w in WorkerStat} for row in self.workers],
            "histograms": self.histograms.tolist(),
            "env_steps": self.env_counts[:, 0].tolist(),
            "env_resets": self.env_counts[:, 1].tolist(),
            "env_restarts": self.env_restarts.tolist(),
        }

    def count_pipe(self, worker: int, size: int) -> None:
        """The caller sent worker ``worker`` a message of ``size`` bytes, or received one."""
        if self.workers is not None:  # (None: released, the vector env is closed)
            row = self.workers[worker]
            row[WorkerStat.WORKER_PIPE_MESSAGES] += 1
            row[WorkerStat.WORKER_PIPE_BYTES] += size

    def count_restart(self, envs: list[int], worker: int | None = None) -> None:
        """A failure was recovered from: ``envs`` were built again, by a new process for
        worker ``worker`` (None: by their own worker)."""
        if self.caller is None:
            return
        self.caller[CallerStat.CALLER_RESTARTS] += 1
        self.env_restarts[envs] += 1
        if worker is not None:
            self.workers[worker, WorkerStat.WORKER_RESTARTS] += 1


def summarize(now: dict, before: dict | None, wall_s: float) -> dict[str, Any]:
    """What :meth:`FastVectorEnv.stats` returns: two snapshots (``before`` None: since the
    start) ``wall_s`` seconds apart, as rates, shares, per-worker figures and advice."""
    zero = {"caller": {_key(c): 0 for c in CallerStat},
            "workers": [{_key(w): 0 for w in WorkerStat} for _ in now["workers"]],
            "histograms": [[0] * HISTOGRAM_BUCKETS for _ in now["workers"]],
            "env_steps": [0] * len(now["env_steps"]), "env_resets": [0] * len(now["env_resets"]),
            "env_restarts": [0] * len(now["env_restarts"])}
    before = before or zero
    wall_s = max(wall_s, 1e-9)
    caller = {k: now["caller"][k] - before["caller"][k] for k in now["caller"]}
    in_step, between = caller["in_step_ns"] * 1e-9, caller["between_ns"] * 1e-9
    workers = []
    for k, (row, old) in enumerate(zip(now["workers"], before["workers"])):
        commands = row["commands"] - old["commands"]
        step_s = (row["step_ns"] - old["step_ns"]) * 1e-9
        histogram = [a - b for a, b in zip(now["histograms"][k], before["histograms"][k])]
        workers.append({
            "envs": row["envs"],
            "commands": commands,
            "step_s": step_s,
            "wait_s": (row["wait_ns"] - old["wait_ns"]) * 1e-9,
            "utilisation": step_s / wall_s,
            "step_us_mean": 1e6 * step_s / commands if commands else None,
            "step_us_p50": _percentile(histogram, 0.50),
            "step_us_p99": _percentile(histogram, 0.99),
            "pipe_messages": row["pipe_messages"] - old["pipe_messages"],
            "pipe_bytes": row["pipe_bytes"] - old["pipe_bytes"],
            "restarts": row["restarts"] - old["restarts"],
        })
    # The caller's time in and between steps, split three ways: waiting for the envs (the
    # busiest worker's env time, at most the time in steps: with send/recv the envs also step
    # while the trainer works), the rest of the time in steps (the hand-offs: waking workers,
    # reading results, waiting for the others' stragglers), and the trainer's.
    total = in_step + between
    env_s = min(max((w["step_s"] for w in workers), default=0.0), in_step)
    env_steps = [a - b for a, b in zip(now["env_steps"], before["env_steps"])]
    env_resets = [a - b for a, b in zip(now["env_resets"], before["env_resets"])]
    env_restarts = [a - b for a, b in zip(now["env_restarts"], before["env_restarts"])]
    out = {
        "wall_s": wall_s,
        "steps": caller["steps"],
        "sps": caller["transitions"] / wall_s,
        "in_step_s": in_step,
        "between_steps_s": between,
        "trainer_share": between / total if total > 0 else None,
        "env_share": env_s / total if total > 0 else None,
        "handoff_share": (in_step - env_s) / total if total > 0 else None,
        "pipe_messages": sum(w["pipe_messages"] for w in workers),
        "pipe_bytes": sum(w["pipe_bytes"] for w in workers),
        "restarts": caller["restarts"],
        "workers": workers,
        "env_steps": env_steps,
        "env_resets": env_resets,
        "env_restarts": env_restarts,
    }
    out["advice"] = _advice(out)
    return out


def _percentile(histogram: list[int], q: float) -> float | None:
    """The upper edge (µs) of the bucket holding the ``q`` quantile, None for no samples."""
    total = sum(histogram)
    if not total:
        return None
    seen = 0
    for k, count in enumerate(histogram):
        seen += count
        if seen >= q * total:
            return float(2 ** k)
    return float(2 ** (len(histogram) - 1))


def _advice(summary: dict) -> list[str]:
    """Plain sentences on where the time goes: a worker much slower than the others, a
    trainer that holds most of the wall time, steps that go through the pipes, restarts."""
    lines = []
    per_env = [w["step_us_mean"] / max(w["envs"], 1) for w in summary["workers"] if w["step_us_mean"] is not None]
    if len(per_env) >= 2:
        median = statistics.median(per_env)
        for k, w in enumerate(summary["workers"]):
            if w["step_us_mean"] is None or median <= 0:
                continue
            ratio = (w["step_us_mean"] / max(w["envs"], 1)) / median
            if ratio >= 1.5:
                lines.append(f"worker {k} is {ratio:.1f}x slower than the median per env step: "
                             f"its envs ({w['envs']}) are slower, or its core is shared")
    share = summary["trainer_share"]
    if share is not None and share >= 0.6:
        lines.append(f"the trainer holds {100 * share:.0f} % of the wall time between and in steps: "
                     "faster envs or more envs won't help much")
    steps = summary["steps"]
    if steps and summary["pipe_messages"] >= steps:
        lines.append(f"{summary['pipe_messages'] / steps:.1f} pipe messages ({summary['pipe_bytes'] / steps / 1024:.1f} KiB) "
                     "per step: something the shared block has no place for (info values that are not "
                     "numbers, an observation or action it cannot hold) is pickled every step")
    if summary["restarts"]:
        envs = [k for k, n in enumerate(summary["env_restarts"]) if n]
        lines.append(f"{summary['restarts']} failure(s) recovered from (envs {envs} built again): the "
                     "'fastvec.vector' log has their errors")
    return lines
