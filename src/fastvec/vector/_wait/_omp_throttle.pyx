"""Caller side: short spins for a GNU OpenMP runtime's idle threads while the host is contended
(``fv_omp_throttle.h``): :class:`SpinThrottle` keeps a thread with an idle team of more threads
than the process has CPUs, so that the runtime spins its short count (libgomp's documented rule
for more OpenMP threads than CPUs). :mod:`fastvec.vector._wait.openmp` starts and stops it."""
from libc.stdint cimport uintptr_t

cdef extern from "fv_omp_throttle.h" nogil:
    ctypedef void (*fv_omp_region_fn)(void *)
    ctypedef void (*fv_gomp_parallel_fn)(fv_omp_region_fn, void *, unsigned, unsigned)
    ctypedef struct fv_omp_throttle:
        pass
    int fv_omp_throttle_start(fv_omp_throttle *t, fv_gomp_parallel_fn parallel, unsigned threads)
    void fv_omp_throttle_stop(fv_omp_throttle *t)


cdef class SpinThrottle:
    """While it runs, the runtime whose ``GOMP_parallel`` is at ``gomp_parallel`` counts
    ``threads`` more OpenMP threads (asleep), and spins its short count after each region.

    Args:
        gomp_parallel: the address of the runtime's ``GOMP_parallel``
            (``ctypes.cast(lib.GOMP_parallel, ctypes.c_void_p).value``).
        threads: the idle team's size: more than the process's usable CPUs.

    Raises:
        ValueError: a null address, or fewer than 2 threads.
        OSError: the thread could not be started.

    Example:
        >>> import ctypes
        >>> from fastvec.vector._wait.openmp import loaded_runtimes
        >>> gomp = next((r for r in map(ctypes.CDLL, loaded_runtimes()) if hasattr(r, "GOMP_parallel")), None)
        >>> if gomp is not None:
        ...     throttle = SpinThrottle(ctypes.cast(gomp.GOMP_parallel, ctypes.c_void_p).value, 3)
        ...     throttle.stop()
        ...     throttle.running
        ... else:
        ...     False
        False
    """
    cdef fv_omp_throttle throttle
    cdef readonly bint running

    def __init__(self, uintptr_t gomp_parallel, unsigned threads):
        if gomp_parallel == 0:
            raise ValueError("SpinThrottle needs the runtime's GOMP_parallel, got the address 0")
        if threads < 2:
            raise ValueError(f"Expected an idle team of at least 2 threads, got {threads}")
        if fv_omp_throttle_start(&self.throttle, <fv_gomp_parallel_fn>gomp_parallel, threads) != 0:
            raise OSError("could not start the thread of an idle OpenMP team")
        self.running = True

    def stop(self) -> None:
        """End the thread (its pool goes with it): the runtime's full spin count is back."""
        if self.running:
            with nogil:
                fv_omp_throttle_stop(&self.throttle)
            self.running = False

    def __dealloc__(self):
        if self.running:
            with nogil:
                fv_omp_throttle_stop(&self.throttle)
