"""Both sides: the wait policy. Every spin, park, release and wake-order decision of the
caller and the workers, and its constants, live in this package:

- :mod:`.policy`: the constants, ``FastVectorEnv(wait=...)``'s choices and the caller's
  spins (:class:`~.policy.CallerWaits`);
- ``_worker_spin.pxd``: a worker's spin for its next command (compiled, in its command loop);
- :mod:`.openmp`: the caller's idle OpenMP threads, released or parked during a step;
- ``fv_omp_park.h`` / ``_omp_park.pyx``: the parked region and the timings it is chosen by.

The waits themselves (the flags, the futex, the wake order) are the hand-off's, in
``fastvec.vector._block.handoff``; this package decides how long they spin.
"""
