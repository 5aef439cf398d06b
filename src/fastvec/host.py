"""What this host gives the calling process: the CPUs it may run on.

FastVectorEnv's default ``num_workers`` is one worker per usable CPU (at most one per env);
the benchmarks size their references the same way. "Usable" is the process's CPU affinity
(what ``taskset`` or a container's cpuset allows), not ``os.cpu_count()``, which counts the
machine's CPUs whether this process may use them or not.
"""
from __future__ import annotations

import os

__all__ = ["usable_cpus"]


def usable_cpus() -> set[int]:
    """The CPUs this process may run on: its affinity where the OS has one, else all CPUs.

    Returns:
        The CPU numbers (``len()`` of it is the count FastVectorEnv sizes its workers by).

    Example:
        >>> import fastvec
        >>> cpus = fastvec.usable_cpus()
        >>> 1 <= len(cpus) <= (os.cpu_count() or 1)  # (os imported by this module)
        True
    """
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return set(range(os.cpu_count() or 1))
