"""Both sides: what a wake-up costs on this host, measured (``fv_wake_probe.h``): how long a
thread blocked on a futex, on a CPU idle meanwhile, takes to run again once another CPU wakes
it. :func:`fastvec.vector._wait.policy.wake_latency_s` measures it once per process and the
wait policy derives spins from it."""
from libc.stdlib cimport free, malloc

cdef extern from "fv_wake_probe.h" nogil:
    int fv_wake_probe(int waker_cpu, int sleeper_cpu, int rounds, double idle_s,
                      double *samples, double *scratch)  # OUT: samples, scratch


def wake_samples(int waker_cpu, int sleeper_cpu, int rounds, double idle_s):
    """``rounds`` wake-up times (seconds): a thread pinned to ``sleeper_cpu`` blocks on a futex
    and a thread pinned to ``waker_cpu`` wakes it, ``idle_s`` seconds after the last time;
    None where this platform cannot measure it (no futex or CPU affinity, a CPU not usable).

    Raises:
        ValueError: the CPUs are the same or negative, ``rounds`` is not in 1..1000, or
            ``idle_s`` is not in [0, 1).

    Example:
        >>> import os
        >>> cpus = sorted(os.sched_getaffinity(0))
        >>> samples = wake_samples(cpus[0], cpus[1], 3, 1e-3) if len(cpus) > 1 else None
        >>> samples is None or (len(samples) == 3 and all(0 < s < 1 for s in samples))
        True
    """
    if waker_cpu < 0 or sleeper_cpu < 0 or waker_cpu == sleeper_cpu:
        raise ValueError(f"Expected two different CPUs (>= 0), got waker_cpu={waker_cpu}, sleeper_cpu={sleeper_cpu}")
    if not 1 <= rounds <= 1000:
        raise ValueError(f"Expected rounds in 1..1000, got {rounds}")
    if not 0 <= idle_s < 1:
        raise ValueError(f"Expected idle_s in [0, 1) seconds, got {idle_s!r}")
    cdef double *samples = <double *>malloc(2 * rounds * sizeof(double))
    if samples == NULL:
        raise MemoryError()
    cdef int status
    try:
        with nogil:
            status = fv_wake_probe(waker_cpu, sleeper_cpu, rounds, idle_s, samples, samples + rounds)
        if status != 0:
            return None
        return [samples[k] for k in range(rounds)]
    finally:
        free(samples)
