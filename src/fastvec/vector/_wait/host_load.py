"""Caller side: whether other work on this host wants the CPUs the vector env runs on.

Spinning pays where a core would otherwise sit idle: a waiter that spins answers in
microseconds instead of through a wake-up, and nobody else wanted the core. Where other work
wants it (a second trainer of a seed sweep, someone's busy process, the host's other guests
taking the vCPU), the same spin takes that work's time slice, and a worker pinned to a core
the other work holds cannot move to one that is free: the step then waits for the other
work's slices. There, fastvec's waits should block at once and its workers move freely.

:class:`HostLoad` tells the two apart by measurement, a few times a second: from the kernel's
per-CPU counters (``/proc/stat``) over the CPUs this process may use, the CPU time spent there
in that interval, less what the caller's process and its workers spent themselves
(``/proc/<pid>/stat``), plus the time the hypervisor gave the vCPUs to someone else (steal).
The host is **contended** while that other work averages more than
:data:`~fastvec.vector._wait.policy.CONTENDED_OTHER_CORES` of a core and the CPUs have less than
:data:`~fastvec.vector._wait.policy.CONTENDED_IDLE_CORES` idle; it stops being so once the other
work falls below :data:`~fastvec.vector._wait.policy.UNCONTENDED_OTHER_CORES` (a margin, so that
one busy moment does not flip the policy back and forth). Reading the counters takes tens of
microseconds, :data:`~fastvec.vector._wait.policy.HOST_LOAD_EVERY_S` apart, taken as the caller
starts steps; an interval in which the caller was away from the vector env for
:data:`~fastvec.vector._wait.policy.HOST_LOAD_MAX_AWAY_S` or more (an update, another program's
turn) is not measured, and the verdict stays what it was before the pause.

Where the counters cannot be read (not Linux, a sandbox without ``/proc``), the host never
counts as contended and the policy is what it is without this measurement.
"""
from __future__ import annotations

import os
from typing import Callable, Iterable

from fastvec.vector._wait.policy import (CONTENDED_IDLE_CORES, CONTENDED_OTHER_CORES, HOST_LOAD_EVERY_S,
                                         HOST_LOAD_MAX_AWAY_S, HOST_LOAD_WEIGHT, UNCONTENDED_OTHER_CORES)

__all__ = ["HostLoad", "cpu_ticks", "process_ticks"]

try:
    _TICKS_PER_S = os.sysconf("SC_CLK_TCK")  # the unit of /proc's CPU times
except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
    _TICKS_PER_S = 100


def cpu_ticks(text: str, cpus: Iterable[int]) -> tuple[int, int, int] | None:
    """(busy, idle, steal) ticks summed over ``cpus`` from the text of ``/proc/stat``; None when
    a CPU's line is missing (an unexpected format).

    Busy counts user, nice, system, irq and softirq time (guests' time is inside user); idle
    counts idle and iowait (a CPU waiting on a disk is free to run anything); steal is time the
    hypervisor ran another guest on the vCPU.

    Example:
        >>> text = "cpu  9 0 9 9 0 0 0 0 0 0\\ncpu0 10 1 5 80 2 1 1 3 0 0\\ncpu1 20 0 10 60 0 0 0 7 0 0\\n"
        >>> cpu_ticks(text, {0, 1})
        (48, 142, 10)
        >>> cpu_ticks(text, {1}), cpu_ticks(text, {2})
        ((30, 60, 7), None)
    """
    wanted = {f"cpu{c}" for c in cpus}
    busy = idle = steal = 0
    found = 0
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name not in wanted:
            continue
        fields = [int(v) for v in rest.split()]
        if len(fields) < 8:
            return None
        user, nice, system, idle_, iowait, irq, softirq, steal_ = fields[:8]
        busy += user + nice + system + irq + softirq
        idle += idle_ + iowait
        steal += steal_
        found += 1
    return (busy, idle, steal) if found == len(wanted) else None


def process_ticks(text: str) -> int | None:
    """User plus system ticks of a process (all its threads) from the text of ``/proc/<pid>/stat``.

    Example:
        >>> process_ticks("42 (my (odd) name) S 1 42 42 0 -1 0 0 0 0 0 250 30 0 0 20 0 3 0")
        280
    """
    after = text.rpartition(")")[2].split()
    if len(after) < 13:
        return None
    return int(after[11]) + int(after[12])


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().decode("ascii", "replace")
    except OSError:
        return None


class HostLoad:
    """Measures, a few times a second, how much of the usable CPUs other work takes, and says
    whether the host is contended (see the module docstring).

    Args:
        cpus: the CPUs this process may use (:func:`fastvec.usable_cpus`).
        pids: returns the pids of the vector env's processes (the caller's and its workers':
            what counts as the vector env's own work), read at each measurement, so that
            restarted workers count.
        read: reads a file's text, or None when it cannot (a seam for tests).

    Example:
        >>> import os, fastvec
        >>> load = HostLoad(fastvec.usable_cpus(), lambda: [os.getpid()])
        >>> load.sample(now=0.0), load.contended  # (the first reading only starts an interval)
        (False, False)
    """

    def __init__(self, cpus: Iterable[int], pids: Callable[[], Iterable[int]],
                 read: Callable[[str], str | None] = _read) -> None:
        self._cpus = frozenset(cpus)
        self._pids = pids
        self._read = read
        self._next = 0.0
        self._last: tuple[float, int, int, int, dict[int, int]] | None = None  # (wall, busy, idle, steal, own)
        #: intervals measured so far
        self.intervals = 0
        self._working = True  # False once a counter could not be read: never contended then
        #: cores' worth of CPU time other work took on the usable CPUs (a running mean)
        self.other_cores = 0.0
        #: idle cores on the usable CPUs (a running mean)
        self.idle_cores = float(len(self._cpus))
        #: whether the vector env's waits should block at once and its workers move freely
        self.contended = False

    def sample(self, now: float, away_s: float = 0.0) -> bool:
        """Measure if :data:`HOST_LOAD_EVERY_S` has passed since the last time (``now``:
        ``time.perf_counter()``); returns whether :attr:`contended` changed.

        ``away_s``: how long the caller has been away from the vector env at ``now`` (no step
        out). After :data:`HOST_LOAD_MAX_AWAY_S` or more, the reading only starts the next
        interval: the means and :attr:`contended` keep their values (what other work did while
        the vector env was not stepping says nothing about its waits)."""
        if now < self._next or not self._working:
            return False
        self._next = now + HOST_LOAD_EVERY_S
        reading = self._reading(now)
        if reading is None:
            self._working = False
            changed, self.contended = self.contended, False
            return changed
        last, self._last = self._last, reading
        if last is None or away_s >= HOST_LOAD_MAX_AWAY_S:
            return False
        wall = (reading[0] - last[0]) * _TICKS_PER_S
        if wall <= 0:
            return False
        busy, idle, steal = (reading[i] - last[i] for i in range(1, 4))
        # (a process that started in the interval, a restarted worker, counts from its start)
        own = sum(used - last[4].get(pid, 0) for pid, used in reading[4].items())
        # (ticks are 10 ms: over a quarter of a second each reading is off by a few per cent)
        other = max(busy - own, 0) + steal
        weight = HOST_LOAD_WEIGHT if self.intervals else 1.0  # (the first interval sets the means)
        self.intervals += 1
        self.other_cores += weight * (other / wall - self.other_cores)
        self.idle_cores += weight * (idle / wall - self.idle_cores)
        was = self.contended
        if was:
            self.contended = self.other_cores >= UNCONTENDED_OTHER_CORES
        else:
            self.contended = (self.other_cores >= CONTENDED_OTHER_CORES
                              and self.idle_cores < CONTENDED_IDLE_CORES)
        return self.contended != was

    def _reading(self, now: float) -> tuple[float, int, int, int, dict[int, int]] | None:
        stat = self._read("/proc/stat")
        ticks = cpu_ticks(stat, self._cpus) if stat is not None else None
        if ticks is None:
            return None
        own: dict[int, int] = {}
        for pid in self._pids():
            text = self._read(f"/proc/{pid}/stat")
            used = process_ticks(text) if text is not None else None
            if used is None:
                if pid == os.getpid():
                    return None
                continue  # (a worker that has just ended)
            own[pid] = used
        return (now, *ticks, own)
