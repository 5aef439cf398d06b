"""Both sides: how long each wait spins before it blocks, and what the caller does with its
idle OpenMP threads during a step. Every constant of the wait policy is here, with its
reason; the decisions that use them are :class:`CallerWaits` (the caller's side), the
worker's spin in ``_worker_spin.pxd`` and the OpenMP handling in :mod:`.openmp`.

A wait spins only while an answer is due, then blocks (a futex on Linux), and never
busy-waits without giving up its core (after its first microseconds a spin yields between
checks). Each side derives its spin from what it measures at run time: the caller from how
long recent commands took; a worker from how soon the next command tends to come and how
long the caller spends between steps (published in the shared block). While other work on
the host wants the same CPUs (:mod:`.host_load` measures it), nothing spins: the caller's
waits block at once, it publishes itself as computing so that the workers' waits block at
once and the workers leave the CPUs they were pinned to, and the trainer's OpenMP runtimes are
neither parked nor released (a released pool's threads, started again for the trainer's next
region, each wait for a core the other work holds) but throttled: they spin libgomp's short
count after each region, as when it counts more OpenMP threads than CPUs (:mod:`.openmp`), so
that a team thread waiting at a barrier for one with no core gives its core up soon.

Users choose among three policies with ``FastVectorEnv(wait=...)``:

- ``"auto"`` (the default): the spins above; the trainer's idle OpenMP threads are released
  before each step, or parked in the step's wait while the trainer runs a parallel region
  between most steps and leaving the region stays cheaper than starting the threads again.
- ``"release"``: the same, but the OpenMP threads are only ever released, never parked.
- ``"block"``: every wait blocks after its shortest spin, workers included; the OpenMP
  threads are released, and throttled (:mod:`.openmp`) whether or not the host is contended.
  For a host shared with other jobs (a sweep of trainers, a CPU quota): fastvec then uses a
  core only while it has work on it.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import statistics
import time

__all__ = ["WAIT_POLICIES", "WaitSettings", "WorkerWaits", "CallerWaits", "idle_openmp_threads_spin",
           "wake_latency_s"]

#: the values ``FastVectorEnv(wait=...)`` takes
WAIT_POLICIES = ("auto", "release", "block")

# --- what a wake-up costs on this host (wake_probe.pyx, fv_wake_probe.h) ----------------------
# Measured once per process: the median of this many wake-ups of a thread blocked on a futex,
# each after its CPU was idle for this long (long enough for a virtual CPU to be handed back to
# the hypervisor, as a worker's is between steps). About 15 ms in all.
WAKE_PROBE_ROUNDS = 12
WAKE_PROBE_IDLE_S = 1e-3
# Waits shorter than this many wake-ups are spun through, not blocked in: a blocked caller
# would add a wake-up to a wait about as long. And a waiting worker spins at least one
# wake-up's time before it blocks: spinning that long at most doubles what blocking at once
# would have cost (the answer comes just after), and spares the wake-up whenever the answer
# comes sooner. Both are floors: the constants below hold where wake-ups are cheaper.
SHORT_WAIT_WAKES = 2.0
# A wake-up measured longer than this was queued behind other work (a busy host at the moment
# of the probe), not what waking costs: the floors stop here.
MAX_WAKE_S = 500e-6

# --- the worker's wait for its next command (StepServer.serve, _worker_spin.pxd) ------------
# The longest a waiting worker spins before it blocks: about what a small policy's forward
# pass and its bookkeeping take between two steps in torch.
MAX_SPIN_S = 1e-3
# The longest a waiting worker on another CPU than the caller's spins, while the caller
# computes on one core between steps: through a small policy's forward pass and an env-side
# Python step (SB3's collect_rollouts), a millisecond or so. On a virtual machine a worker
# woken on a CPU that has been idle for a millisecond starts hundreds of microseconds after
# the command (the vCPU went back to the host), one still spinning at once
# (docs/benchmarks.md, "Idle CPUs wake slowly").
OTHER_CPU_SPIN_S = 4e-3
# A caller that spends longer than this between steps is computing (a policy's forward pass
# takes longer than this in torch), and waiting workers block at once: spinning would take the
# cores it computes on.
THINK_WINDOW_S = 100e-6

# --- the caller's wait for the workers (CallerWaits) ------------------------------------------
# The longest the caller spins (yielding) for the last worker before it blocks.
MAX_TAIL_SPIN_S = 1e-3
# Commands shorter than this on average are waited for by spinning (yielding) from the start:
# they are over before a blocked caller could be woken (at least SHORT_WAIT_WAKES wake-ups).
SHORT_WAIT_S = 200e-6
# A caller back within this time of a step's results ran no OpenMP parallel region since the
# last release worth a C call per step (a tight stepping loop): no release then.
MIN_THINK_FOR_RELEASE_S = 30e-6
# One long pause between steps (an update between rollouts) counts as this long, not as forever.
MAX_THINK_S = 0.01

# --- other work on the host (host_load.py) -----------------------------------------------------
# How often the caller reads the host's CPU counters (tens of microseconds a reading).
HOST_LOAD_EVERY_S = 0.25
# The weight of the newest reading in the running means: about two seconds of readings, so
# that one busy moment (a process starting, another test's workers ending) is not contention.
HOST_LOAD_WEIGHT = 0.125
# The host is contended while other work takes at least this much of the usable CPUs (cores)
# and they have less than this idle: a spinning wait would then take that work's time slice,
# and a pinned worker could not move to a free core. Less than half a core of other work is
# a desktop's, a monitor's or a logger's background.
CONTENDED_OTHER_CORES = 0.3
CONTENDED_IDLE_CORES = 0.5
# ... and it stays contended until the other work falls below this.
UNCONTENDED_OTHER_CORES = 0.15
# A reading taken after the caller was away from the vector env this long (no step out: an
# update between rollouts, an evaluation, another backend's turn in a benchmark) starts a new
# interval and is not folded into the means, which keep their values: what other work did
# during the pause says nothing about the vector env's waits, and a transient one (a process
# that ran while the trainer was away) would otherwise count as contention for seconds of
# stepping after it ended (readings are taken only while stepping). Twice the readings'
# interval: far longer than a policy's forward pass between two steps.
HOST_LOAD_MAX_AWAY_S = 2 * HOST_LOAD_EVERY_S
# What the caller publishes as its time between steps while the host is contended: as long
# as a caller computing between steps, so that workers block at once and leave their CPUs.
CONTENDED_THINK_S = 10 * THINK_WINDOW_S

# --- the caller's idle OpenMP threads (openmp.py) ---------------------------------------------
# A pause that takes this long ended a pool (ending a pool joins its threads; with no pool the
# call only returns).
POOL_FOUND_S = 10e-6
# Parked steps between two checks (by releasing) that the trainer still runs a region each step.
RECHECK_EVERY = 256
# A parked thread yields its core for this many times the caller's mean wait before it
# blocks: an answer later than that is not due, it is late (a slow reset, a stalled env).
PARK_SPIN_FACTOR = 2.0
# ... and for at least this long, and at most this long, whatever the mean.
MIN_PARK_SPIN_S = 50e-6
MAX_PARK_SPIN_S = 2e-3
# A parked thread on a core sees the end of the wait within microseconds; one that takes
# longer than this to leave the region on average was queued behind other work (another
# trainer, a CPU hog), and parking stops there even where starting the threads again, as
# measured on the same contended host, looks as slow.
MAX_PARK_EXIT_S = 100e-6


def idle_openmp_threads_spin(environ=os.environ) -> bool:
    """Whether GNU libgomp's idle threads spin after a parallel region in this process: not
    when the user asked for ``OMP_WAIT_POLICY=passive`` or ``GOMP_SPINCOUNT=0`` (libgomp reads
    both when it loads). Where they do not spin there is nothing to keep off the workers'
    cores, and fastvec leaves the runtime alone.

    Example:
        >>> idle_openmp_threads_spin({"OMP_WAIT_POLICY": "PASSIVE"})
        False
        >>> idle_openmp_threads_spin({"GOMP_SPINCOUNT": "0"}), idle_openmp_threads_spin({})
        (False, True)
    """
    if environ.get("OMP_WAIT_POLICY", "").strip().lower() == "passive":
        return False
    return environ.get("GOMP_SPINCOUNT", "").strip() not in ("0", "0.0")


@functools.cache
def wake_latency_s() -> float | None:
    """What a wake-up costs on this host (seconds): the median of :data:`WAKE_PROBE_ROUNDS`
    wake-ups of a thread blocked on a futex on one usable CPU, idle for
    :data:`WAKE_PROBE_IDLE_S` before each, by a thread on another. Measured once per process
    (about 15 ms), at most :data:`MAX_WAKE_S`; None with fewer than two usable CPUs or where it
    cannot be measured (no futex or CPU affinity: the spins' constants then hold as they are).

    Example:
        >>> w = wake_latency_s()
        >>> w is None or 0 < w < 0.1
        True
    """
    from fastvec.host import usable_cpus
    from fastvec.vector._wait.wake_probe import wake_samples

    cpus = sorted(usable_cpus())
    if len(cpus) < 2:
        return None
    samples = wake_samples(cpus[0], cpus[1], WAKE_PROBE_ROUNDS, WAKE_PROBE_IDLE_S)
    return None if samples is None else min(statistics.median(samples), MAX_WAKE_S)


@dataclasses.dataclass(frozen=True)
class WorkerWaits:
    """What a worker's wait for its next command may spin (seconds): at least ``spin_s``, at
    most ``max_spin_s`` (``other_cpu_spin_s`` on another CPU than the caller's), and not at
    all while the caller spends more than ``think_window_s`` between steps."""

    spin_s: float
    max_spin_s: float
    other_cpu_spin_s: float
    think_window_s: float


@dataclasses.dataclass(frozen=True)
class WaitSettings:
    """One vector env's wait policy, resolved from its arguments.

    Attributes:
        worker: the workers' waits (sent to each worker process).
        parent_spin_s: the shortest spin before the caller blocks.
        adaptive: whether the caller's spin follows how long commands take (False: it
            blocks after ``parent_spin_s``, for ``wait="block"``).
        openmp: whether the caller keeps its idle OpenMP threads off the workers' cores.
        park: whether steps may be parked in the OpenMP runtimes (else only released).
        wake_s: what a wake-up costs on this host (:func:`wake_latency_s`), or None.
        short_wait_s: commands shorter than this on average are spun through by the caller.
    """

    worker: WorkerWaits
    parent_spin_s: float
    adaptive: bool
    openmp: bool
    park: bool
    wake_s: float | None = None
    short_wait_s: float = SHORT_WAIT_S

    @classmethod
    def resolve(cls, wait: str, *, worker_spin_us: float, parent_spin_us: float, release_openmp_threads: bool,
                step_in_caller: bool, wake_s: float | None = None, environ=os.environ) -> "WaitSettings":
        """The settings for ``FastVectorEnv(wait=..., worker_spin_us=..., parent_spin_us=...,
        release_openmp_threads=..., step_in_caller=...)`` on a host where a wake-up costs
        ``wake_s`` seconds (None: not measured): a waiting worker spins at least that long, and
        the caller spins through commands shorter than :data:`SHORT_WAIT_WAKES` of them.

        Raises:
            ValueError: ``wait`` is not one of :data:`WAIT_POLICIES`, or a spin is negative.

        Example:
            >>> WaitSettings.resolve("block", worker_spin_us=50, parent_spin_us=20,
            ...                      release_openmp_threads=True, step_in_caller=False).park
            False
            >>> slow = WaitSettings.resolve("auto", worker_spin_us=50, parent_spin_us=20, release_openmp_threads=True,
            ...                             step_in_caller=False, wake_s=300e-6)  # (a host slow to wake)
            >>> round(slow.worker.spin_s * 1e6), round(slow.short_wait_s * 1e6)
            (300, 600)
        """
        if wait not in WAIT_POLICIES:
            raise ValueError(f"wait must be one of {', '.join(map(repr, WAIT_POLICIES))}, got {wait!r}")
        for name, value in (("worker_spin_us", worker_spin_us), ("parent_spin_us", parent_spin_us)):
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")
        if wake_s is not None and not 0 <= wake_s < 1:
            raise ValueError(f"wake_s must be in [0, 1) seconds or None, got {wake_s!r}")
        spin_s, parent_s = float(worker_spin_us) * 1e-6, float(parent_spin_us) * 1e-6
        short_wait_s = SHORT_WAIT_S
        if wait == "block":
            worker = WorkerWaits(spin_s=0.0, max_spin_s=0.0, other_cpu_spin_s=0.0, think_window_s=0.0)
            parent_s = 0.0
        else:
            if wake_s is not None:
                spin_s = max(spin_s, wake_s)
                short_wait_s = max(short_wait_s, SHORT_WAIT_WAKES * wake_s)
            worker = WorkerWaits(spin_s=spin_s, max_spin_s=max(MAX_SPIN_S, spin_s),
                                 other_cpu_spin_s=max(OTHER_CPU_SPIN_S, spin_s), think_window_s=THINK_WINDOW_S)
        openmp = bool(release_openmp_threads) and idle_openmp_threads_spin(environ)
        # (a caller that steps a share itself runs its envs right before the wait, where their
        # own parallel regions would nest in the park's)
        park = openmp and wait == "auto" and not step_in_caller
        return cls(worker=worker, parent_spin_s=parent_s, adaptive=wait != "block", openmp=openmp, park=park,
                   wake_s=wake_s, short_wait_s=short_wait_s)


class CallerWaits:
    """The caller's side of the policy: how long it spins for the workers, from how long
    recent commands took, and how long the parked OpenMP threads may yield.

    Example:
        >>> waits = CallerWaits(WaitSettings.resolve("auto", worker_spin_us=50, parent_spin_us=20,
        ...                                          release_openmp_threads=True, step_in_caller=False))
        >>> waits.record(started=0.0, now=100e-6)
        >>> 0 < waits.tail_spin_s() <= MAX_TAIL_SPIN_S
        True
        >>> waits.between_steps(now=2.1e-3)  # (the next step, 2 ms after that command ended)
        0.002
        >>> round(waits.gap_mean * 1e6)  # (a running mean: a quarter of the way there)
        500
    """

    def __init__(self, settings: WaitSettings) -> None:
        self.settings = settings
        self.parent_spin_s = settings.parent_spin_s
        #: how long commands took, a running mean (seconds)
        self.mean = settings.parent_spin_s
        #: the caller's time between a step's results and its next step while it keeps more
        #: than one core busy ("thinks"), and the same on any number of cores ("gap"): running
        #: means (seconds) the workers' spins are chosen by (``_worker_spin.pxd``)
        self.think_mean = 0.0
        self.gap_mean = 0.0
        self._last_done: float | None = None  # (None until a first command has ended)
        self._last_done_cpu = 0.0
        #: other work on the host, measured (a :class:`~.host_load.HostLoad`; None: not measured)
        self.host = None

    @property
    def contended(self) -> bool:
        """Whether other work on the host wants the CPUs the vector env runs on (then nothing
        spins, the workers leave their CPUs and the OpenMP runtimes are throttled)."""
        return self.host is not None and self.host.contended

    def host_report(self) -> dict | None:
        """``{"contended": ..., "other_cores": ...}`` from the host's measurement, or None
        where the host is not measured."""
        if self.host is None or not self.host.intervals:
            return None
        return {"contended": self.host.contended, "other_cores": round(self.host.other_cores, 2)}

    def published_think(self) -> float:
        """What the caller publishes to the workers as its time between steps: its own, or, while
        the host is contended, that of a caller computing (the workers then block at once and
        leave the CPUs they were pinned to)."""
        return max(self.think_mean, CONTENDED_THINK_S) if self.contended else self.think_mean

    def record(self, started: float, now: float | None = None) -> None:
        """Add a command sent at ``started`` and done at ``now`` to the running mean; ``now``
        is also where the caller's time between steps starts (:meth:`between_steps`)."""
        if now is None:
            now = time.perf_counter()
        self.mean += 0.125 * (min(now - started, 4 * MAX_TAIL_SPIN_S) - self.mean)
        self._last_done, self._last_done_cpu = now, time.process_time()

    def between_steps(self, now: float) -> float | None:
        """A step starts at ``now``: fold the caller's time since the last command ended into
        :attr:`think_mean` and :attr:`gap_mean`, and return it (None before any command ended).

        Only time on more than ~1.5 cores counts as thinking: a caller computing on one
        thread (a small policy's forward pass) leaves a core free, and a worker spinning there
        costs it nothing while sparing a wake-up. One long pause (an update between rollouts)
        counts as :data:`MAX_THINK_S`, not as forever."""
        wall = None if self._last_done is None else now - self._last_done
        # (the pool gives a HostLoad only where spins adapt)
        if self.host is not None:
            self.host.sample(now, away_s=wall or 0.0)
        if wall is None:
            return None
        busy_cores = (time.process_time() - self._last_done_cpu) / wall if wall > 0 else 0.0
        think = min(wall, MAX_THINK_S) if busy_cores > 1.5 else 0.0
        self.think_mean += 0.25 * (think - self.think_mean)
        self.gap_mean += 0.25 * (min(wall, MAX_THINK_S) - self.gap_mean)
        return wall

    def caller_computes(self) -> bool:
        """Whether the caller keeps more than one core busy between steps for long enough
        that a worker spinning meanwhile would take a core it computes on."""
        return self.think_mean >= THINK_WINDOW_S

    def release_before_step(self, wall: float | None) -> bool:
        """Whether the caller's idle OpenMP threads are released before this step (``wall``:
        :meth:`between_steps`'s): after a first step, only when the caller was away long
        enough for its runtimes' pools to have started (a back-to-back caller's are idle)."""
        return wall is None or wall >= MIN_THINK_FOR_RELEASE_S

    def tail_spin_s(self) -> float:
        """How long the caller spins for the last workers once a core has come free (the
        caller's own share done, or a first worker), before it blocks: about half as long as
        recent commands took, so that the last answer is seen at once instead of through a
        wake-up, which costs tens of microseconds on a virtual machine."""
        if not self.settings.adaptive or self.contended:
            return 0.0
        return min(max(self.parent_spin_s, 0.5 * self.mean), MAX_TAIL_SPIN_S)

    def spins(self, caller_steps_a_share: bool, spun: bool) -> tuple[float, float]:
        """(spin, tail): how long the caller's wait spins before its first worker is done,
        and after (see ``handoff.wait_all_done``).

        Until a first worker is done every core is busy with one, so the wait blocks after
        a short spin; from then on a core is free and it spins for :meth:`tail_spin_s`.
        ``spun``: the caller has spun that long already (the compiled step)."""
        if self.contended:
            return 0.0, 0.0
        tail = 0.0 if spun else self.tail_spin_s()
        spin = tail if caller_steps_a_share and not spun else self.parent_spin_s
        short = self.settings.short_wait_s
        if self.settings.adaptive and not spun and self.mean < short:
            # Steps this short (CartPole-like envs) are over before a blocked caller could
            # be woken: spin (yielding the core) through them.
            spin = max(spin, min(1.5 * self.mean, short))
        return spin, tail

    def park_spin_s(self) -> float:
        """How long the parked OpenMP threads yield before they block (see the constants)."""
        return min(max(PARK_SPIN_FACTOR * self.mean, MIN_PARK_SPIN_S), MAX_PARK_SPIN_S)
