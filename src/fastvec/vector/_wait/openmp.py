"""Caller side: the calling process's OpenMP runtimes, and keeping their idle threads off the
workers' cores while a step waits.

An OpenMP runtime keeps the threads of its pool busy-waiting for a while after each
parallel region, in case another comes soon: GNU libgomp (the runtime of PyTorch's Linux
wheels) for about 300,000 pause instructions when ``OMP_WAIT_POLICY`` is unset, LLVM and
Intel's runtimes for ``KMP_BLOCKTIME`` (200 ms). With torch at its default threads a
convolution or an update runs on every core, and its idle thread then spins for
milliseconds on a core, while the vector step the trainer waits for needs every core for
the workers (measurements: ``docs/benchmarks.md``, the ``train`` section).

:class:`OpenMPIdleThreads` does one of two things for each libgomp loaded in the process,
chosen by measuring what the trainer does between steps and what each choice costs on this
host. Neither changes a setting: the number of threads and the wait policy stay what the
user chose. Where the user chose ``OMP_WAIT_POLICY=passive`` (or ``GOMP_SPINCOUNT=0``) the
idle threads do not spin, and the vector env leaves the runtimes alone
(:func:`fastvec.vector._wait.policy.idle_openmp_threads_spin`).

- **Release.** OpenMP 5.0's ``omp_pause_resource_all(omp_pause_soft)`` ends the calling
  thread's pool, at once when its threads are idle; the next parallel region starts them
  again. Cheap when the trainer seldom runs a parallel region between steps (about a
  microsecond when there is no pool); when it runs one before every step, the pause and the
  new threads of its next region cost more than a cheap env's step.
- **Park.** The step's wait runs as the body of a parallel region of the runtime
  (``fv_omp_park.h``): the region's other threads yield their cores while the answer is due
  and then block, so the workers get the cores at once, a stalled step costs no CPU, and the
  trainer's next region finds its threads there. Used for a runtime while the release finds
  a pool to end before most steps (the trainer runs a region between every two steps), and
  while leaving the region takes less time than starting the pool's threads again (both
  measured here: on a contended host, a sweep of trainers or a CPU hog, a yielding thread
  can be queued for milliseconds behind other work, and releasing is then cheaper).
  Re-checked every :data:`~fastvec.vector._wait.policy.RECHECK_EVERY` parked steps by
  releasing again.

While the host is contended (another trainer, a busy process: :mod:`.host_load`), neither is
done: the runtimes are **throttled** instead. A pool thread that spins its full count at every
barrier while the thread it waits for has no core makes a training loop crawl (two CleanRL
trainers on two cores ran several times slower than one). libgomp spins a short count when it
counts more OpenMP threads than CPUs (its manual, ``GOMP_SPINCOUNT``); a process only counts
its own, so fastvec adds a thread of its own with an idle team of more threads than the
process's CPUs (``fv_omp_throttle.h``), asleep, for as long as the contention lasts. Nothing
the user set changes.

LLVM's and Intel's runtimes (``libomp``, ``libiomp5``) are left alone: their pause is
process-wide and waits for threads busy elsewhere, so a trainer with other threads in a
parallel region could stall in it; there, the fix is the user's ``KMP_BLOCKTIME=0``.
"""
from __future__ import annotations

import ctypes
import sys
from typing import Any, Callable

import numpy as np

from fastvec.host import usable_cpus
from fastvec.vector._wait._omp_park import timed_pause, timed_region
from fastvec.vector._wait._omp_throttle import SpinThrottle
from fastvec.vector._wait.policy import MAX_PARK_EXIT_S, POOL_FOUND_S, RECHECK_EVERY

__all__ = ["OpenMPIdleThreads", "loaded_runtimes", "LLVM_RUNTIME_NAMES"]

# omp_pause_resource_t's value for a soft pause (OpenMP 5.0 §3.2.43): idle threads go,
# state that a later parallel region needs (thread-private data aside) is kept.
OMP_PAUSE_SOFT = 1
# GNU libgomp's file name as it appears in a process's memory map, vendored copies
# included (torch/lib/libgomp.so.1, fastvec.libs/libgomp-a34b3233.so.1.0.0).
_RUNTIME_NAME = "libgomp"
#: LLVM's and Intel's OpenMP runtimes (conda's and MKL builds of torch and numpy load them)
LLVM_RUNTIME_NAMES = ("libomp", "libiomp5")


def loaded_runtimes(names: tuple[str, ...] = (_RUNTIME_NAME,)) -> list[str]:
    """Paths of the OpenMP runtimes named ``names`` (file name prefixes; default GNU libgomp)
    mapped in this process (Linux; elsewhere none are found).

    Example:
        >>> paths = loaded_runtimes()
        >>> all("libgomp" in p for p in paths)
        True
    """
    if not sys.platform.startswith("linux"):
        return []
    paths: list[str] = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(None, 5)[-1]
                name = path.rsplit("/", 1)[-1]
                if path.startswith("/") and name.startswith(names) and ".so" in name and path not in paths:
                    paths.append(path)
    except OSError:
        return []
    return paths


class OpenMPIdleThreads:
    """Keeps the idle threads of the process's GNU OpenMP runtimes off the workers' cores while
    a step waits: released before the step, or parked in its wait (see the module docstring).

    The runtimes are looked up at the first release and again whenever the number of imported
    modules has changed since (torch imported after the vector env was made). A tight
    stepping loop costs an attribute read and a method call per step.

    Args:
        park: whether a step's wait may run parked (False: always release).

    Example:
        >>> idle = OpenMPIdleThreads()
        >>> idle.release()  # no OpenMP work was done: nothing to hand back
        >>> idle.parking, idle.parked_runtimes()
        (False, None)
    """

    def __init__(self, park: bool = True) -> None:
        self._park = park
        self._runtimes: list[_Runtime] = []
        self._modules_seen = -1
        #: whether the next step's wait runs parked (:meth:`parked_runtimes`)
        self.parking = False
        self._decaying = False  # a runtime not parked in has a share of found pools to bring down
        self._parked: np.ndarray | None = None  # the entry points of the runtimes parked in
        self._throttles: list[SpinThrottle] = []  # one per runtime while the host is contended
        #: whether the runtimes spin their short count now (:meth:`throttle`)
        self.throttled = False

    def _look_up(self) -> None:
        self._modules_seen = len(sys.modules)
        known = {r.path: r for r in self._runtimes}
        runtimes = []
        for path in loaded_runtimes():
            runtime = known.get(path) or _Runtime.load(path, self._park)
            if runtime is not None:
                runtimes.append(runtime)
        self._runtimes = runtimes
        self._update()

    def _update(self) -> None:
        hot = [r for r in self._runtimes if r.hot]
        self.parking = bool(hot)
        self._parked = np.array([(r.parallel, r.thread_num) for r in hot], dtype=np.uintp) if hot else None
        self._decaying = any(r.found_share > 0.0 for r in self._runtimes if not r.hot)

    def release(self, lockstep: bool = True) -> None:
        """Hand back the idle threads of every runtime the step's wait will not be parked in
        (``lockstep``: a step waited for whole, whose wait may be parked; else none is),
        noting for each whether it had a pool to end (a parallel region ran since the last
        release)."""
        if len(sys.modules) != self._modules_seen:
            self._look_up()
        for runtime in self._runtimes:
            if not (lockstep and runtime.hot):
                runtime.release()
        self._update()

    def no_region(self, lockstep: bool = True) -> None:
        """The caller came back too soon after the last step to have run a parallel region
        (a tight stepping loop): no release is needed, and it counts as a step without one."""
        if not self._decaying:
            return
        for runtime in self._runtimes:
            if not (lockstep and runtime.hot):
                runtime.note(found=False)
        self._update()

    def throttle(self, on: bool) -> None:
        """Make the runtimes spin their short count after each region (``on``), or their own
        again: while the host is contended (see the module docstring). Idempotent."""
        if on == self.throttled:
            return
        if not on:
            self.close()
            return
        if len(sys.modules) != self._modules_seen:
            self._look_up()
        threads = len(usable_cpus()) + 1
        for runtime in self._runtimes:
            if runtime.parallel:
                try:
                    self._throttles.append(SpinThrottle(runtime.parallel, threads))
                except OSError:  # (no thread to be had: the runtime keeps its own spin)
                    pass
        self.throttled = True

    def close(self) -> None:
        """End the throttle, if any (the vector env closes)."""
        throttles, self._throttles, self.throttled = self._throttles, [], False
        for throttle in throttles:
            throttle.stop()

    def parked_runtimes(self) -> np.ndarray | None:
        """The entry points (``GOMP_parallel``, ``omp_get_thread_num``) of the runtimes the
        step's wait should run parked in, for ``handoff.wait_all_done_parked``; None: none."""
        return self._parked

    def count_parked_step(self, exit_s: float) -> None:
        """One step's wait ran parked, and its regions took ``exit_s`` seconds to end."""
        for runtime in self._runtimes:
            if runtime.hot:
                runtime.count_parked_step(exit_s)
        self._update()


class _Runtime:
    """One loaded libgomp: its pause and region entry points, and whether steps park in it."""

    def __init__(self, path: str, pause: int, parallel: int, thread_num: int) -> None:
        self.path = path
        self._pause = pause  # the address of omp_pause_resource_all
        self.parallel = parallel  # the address of GOMP_parallel (0: neither parking nor throttling possible)
        self.thread_num = thread_num  # the address of omp_get_thread_num (0: parking not chosen)
        self.hot = False  # park steps in this runtime
        self.found_share = 0.0  # running share of releases that found a pool to end
        #: what a release costs the trainer's next region on this host: starting the pool's
        #: threads again (seconds; None until measured, when the runtime first turns hot)
        self.start_cost: float | None = None
        self.exit_mean = 0.0  # how long parked regions took to end, a running mean
        self._parked_steps = 0
        self._skip_next = False
        self._hold = 0  # releases to go before parking may be chosen again

    @classmethod
    def load(cls, path: str, park: bool) -> "_Runtime | None":
        try:
            lib = ctypes.CDLL(path)
            pause = _address(lib, "omp_pause_resource_all")
        except (OSError, AttributeError):  # an old runtime without OpenMP 5.0's pause
            return None
        try:
            parallel, thread_num = _address(lib, "GOMP_parallel"), _address(lib, "omp_get_thread_num")
        except AttributeError:  # (a GCC older than 4.9's runtime)
            parallel = thread_num = 0
        return cls(path, pause, parallel, thread_num if park else 0)

    def release(self) -> None:
        self.note(found=timed_pause(self._pause, OMP_PAUSE_SOFT) >= POOL_FOUND_S)

    def note(self, found: bool) -> None:
        """Count one step before which the trainer did (``found``) or did not run a region."""
        if self._skip_next:  # (the pool of the last parked step: says nothing of the trainer)
            self._skip_next = False
            return
        self.found_share += 0.25 * (float(found) - self.found_share)
        if self.found_share < 0.01:  # (none in the last ~16 steps: none at all)
            self.found_share = 0.0
        if self._hold > 0:
            self._hold -= 1
        elif self.parallel and self.thread_num and self.found_share > 0.5:
            if self.start_cost is None:
                self.start_cost = self.measure_start_cost()
            self.hot, self._parked_steps, self.exit_mean = True, 0, 0.0

    def measure_start_cost(self) -> float:
        """What a release costs the trainer's next parallel region here: an empty region right
        after a pause (its threads started again) less one with the pool there (best of 3)."""
        warm = cold = float("inf")
        for _ in range(3):
            timed_region(self.parallel)
            warm = min(warm, timed_region(self.parallel))
            timed_pause(self._pause, OMP_PAUSE_SOFT)
            cold = min(cold, timed_region(self.parallel))
        return max(cold - warm, 0.0)

    def count_parked_step(self, exit_s: float) -> None:
        """One parked step, whose region took ``exit_s`` to end. Parking stops for a runtime
        whose regions take longer to end, on average, than starting its threads again would,
        or than MAX_PARK_EXIT_S (a contended host), and every RECHECK_EVERY steps (the next
        releases check that the trainer still runs a region between steps)."""
        self._parked_steps += 1
        cost = min(self.start_cost or 0.0, MAX_PARK_EXIT_S)
        # (a region that waited for a thread asleep through a long step counts, but not for more
        # than twice the longest cost it could be compared with: a few such on an idle host do
        # not stop parking, most steps' on a contended one do)
        self.exit_mean += 0.0625 * (min(exit_s, 2.0 * MAX_PARK_EXIT_S) - self.exit_mean)
        if self._parked_steps >= RECHECK_EVERY or (self._parked_steps >= 8 and self.exit_mean > cost):
            self.hot, self.found_share, self._skip_next = False, 0.0, True
            if self._parked_steps < RECHECK_EVERY:  # (parking costs more here: not again soon)
                self._hold = RECHECK_EVERY


def _address(lib: ctypes.CDLL, name: str) -> int:
    """The address of ``lib``'s function ``name`` (AttributeError if it has none)."""
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0
