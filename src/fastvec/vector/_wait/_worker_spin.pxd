# Worker side of the wait policy (see fastvec.vector._wait.policy for the constants): how
# long a worker's wait for its next command spins before it blocks. StepServer.serve calls
# these before each wait, without the GIL.


cdef inline bint caller_computes(double caller_think, double think_window_s) noexcept nogil:
    """Whether the caller spends long enough between steps, keeping more than one core busy
    (``caller_think``, published by the caller), that a waiting worker must block at once:
    spinning would take the cores it computes on."""
    return caller_think >= think_window_s


cdef inline double command_spin(double gap, double spin_s, double max_spin_s, double other_cpu_spin_s,
                                double think_window_s, int cpu, int caller_cpu,
                                double caller_gap) noexcept nogil:
    """The spin of a wait for the next command while the caller does not compute on more
    than one core: about twice as long as the next command usually takes to come (``gap``),
    so that a caller stepping back to back never pays for a wake-up from a blocked wait
    (tens to hundreds of microseconds on a virtual machine); ``spin_s`` when commands come
    later than the longest spin allowed.

    The longest: ``other_cpu_spin_s`` for a worker on another CPU than the caller's (a
    caller computing on one core leaves the others idle, where a woken worker can take
    hundreds of microseconds to run again on a VM: the core is idle anyway); on the
    caller's own CPU, ``max_spin_s`` for a caller that steps back to back, none for one that
    spends longer than ``think_window_s`` between steps (the wait would take the core that
    work runs on). ``cpu`` / ``caller_cpu``: -1 where unknown."""
    cdef double longest = max_spin_s
    if cpu >= 0 and caller_cpu >= 0:
        if cpu != caller_cpu:
            longest = other_cpu_spin_s
        elif caller_gap >= think_window_s:
            longest = 0.0
    if gap < longest:
        return min(2.0 * gap + spin_s, longest)
    return spin_s


cdef inline double next_gap(double gap, double waited, double other_cpu_spin_s) noexcept nogil:
    """The running mean of how soon commands come, after one came ``waited`` seconds after
    the worker started waiting for it (a long pause counts as twice the longest spin)."""
    return gap + 0.125 * (min(waited, 2.0 * other_cpu_spin_s) - gap)
