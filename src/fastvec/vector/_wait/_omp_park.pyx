"""Caller side: time a GNU OpenMP runtime's pause and an empty region of its team (what
:mod:`fastvec.vector._wait.openmp` measures to choose between releasing and parking), and
run a callable inside a parallel region whose other threads give up their cores until it
returns (``fv_omp_park.h``; the vector step parks its compiled wait, ``handoff``, this way; this
Python form is for tests and examples). The runtime's entry points come as addresses
(``ctypes.cast(lib.GOMP_parallel, ctypes.c_void_p).value``)."""
from libc.stdint cimport uintptr_t

cdef extern from "fv_omp_park.h" nogil:
    ctypedef void (*fv_omp_region_fn)(void *)
    ctypedef void (*fv_gomp_parallel_fn)(fv_omp_region_fn, void *, unsigned, unsigned)
    ctypedef int (*fv_omp_thread_num_fn)()
    ctypedef int (*fv_omp_pause_fn)(int)
    ctypedef struct fv_omp_runtime:
        fv_gomp_parallel_fn parallel
        fv_omp_thread_num_fn thread_num
    double fv_omp_timed_pause(fv_omp_pause_fn pause, int kind)
    double fv_omp_timed_region(fv_gomp_parallel_fn parallel)
    double fv_omp_run_parked(const fv_omp_runtime *runtimes, int count, double spin_s,
                             fv_omp_region_fn body, void *body_arg)


cdef void _call(void *box) noexcept with gil:
    # box: [fn, arg, result (OUT), exception (OUT)]; the exception goes back to the caller
    # after the region, once every thread of the team has left it.
    cdef list call = <list>box
    try:
        call[2] = call[0](call[1])
    except BaseException as error:
        call[3] = error


def run_parked(uintptr_t gomp_parallel, uintptr_t omp_get_thread_num, object fn, object arg,
               double spin_s=1e-3):
    """``fn(arg)`` on this thread, inside a parallel region of the OpenMP runtime whose
    ``GOMP_parallel`` and ``omp_get_thread_num`` are at these addresses (the runtime's default
    number of threads); the region's other threads yield their cores for up to ``spin_s``
    seconds, then block until ``fn`` returns. Returns what ``fn`` returns, and raises what it
    raises. (Python runs inside the region here: for tests; the vector step parks C alone.)

    Example:
        >>> import ctypes
        >>> from fastvec.vector._wait.openmp import loaded_runtimes
        >>> # (a runtime that has the entry point: another library may bring an older libgomp)
        >>> gomp = next((r for r in map(ctypes.CDLL, loaded_runtimes()) if hasattr(r, "GOMP_parallel")), None)
        >>> def address(f): return ctypes.cast(f, ctypes.c_void_p).value
        >>> gomp is None or run_parked(address(gomp.GOMP_parallel), address(gomp.omp_get_thread_num), abs, -3) == 3
        True
    """
    if gomp_parallel == 0 or omp_get_thread_num == 0:
        raise ValueError(f"run_parked needs the runtime's GOMP_parallel and omp_get_thread_num; got the "
                         f"addresses {gomp_parallel:#x} and {omp_get_thread_num:#x}")
    cdef list call = [fn, arg, None, None]
    cdef fv_omp_runtime runtime
    runtime.parallel = <fv_gomp_parallel_fn>gomp_parallel
    runtime.thread_num = <fv_omp_thread_num_fn>omp_get_thread_num
    with nogil:
        fv_omp_run_parked(&runtime, 1, spin_s, _call, <void *>call)
    if call[3] is not None:
        error = call[3]
        call[3] = None
        raise error
    return call[2]


def timed_pause(uintptr_t omp_pause_resource_all, int kind):
    """Call the runtime's ``omp_pause_resource_all(kind)`` (at this address) without the GIL;
    return how long the call alone took, in seconds.

    Example:
        >>> import ctypes
        >>> from fastvec.vector._wait.openmp import loaded_runtimes, OMP_PAUSE_SOFT
        >>> # (a runtime that has omp_pause_resource_all, OpenMP 5.0: pygame, say, brings an older libgomp)
        >>> gomp = next((r for r in map(ctypes.CDLL, loaded_runtimes()) if hasattr(r, "omp_pause_resource_all")), None)
        >>> gomp is None or timed_pause(ctypes.cast(gomp.omp_pause_resource_all, ctypes.c_void_p).value, OMP_PAUSE_SOFT) >= 0
        True
    """
    if omp_pause_resource_all == 0:
        raise ValueError("timed_pause needs the address of the runtime's omp_pause_resource_all; got 0")
    cdef double seconds
    with nogil:
        seconds = fv_omp_timed_pause(<fv_omp_pause_fn>omp_pause_resource_all, kind)
    return seconds


def timed_region(uintptr_t gomp_parallel):
    """Run an empty parallel region of the runtime whose ``GOMP_parallel`` is at this address
    (its default number of threads), without the GIL; return how long it took, in seconds.

    Example:
        >>> import ctypes
        >>> from fastvec.vector._wait.openmp import loaded_runtimes
        >>> gomp = next((r for r in map(ctypes.CDLL, loaded_runtimes()) if hasattr(r, "GOMP_parallel")), None)
        >>> gomp is None or timed_region(ctypes.cast(gomp.GOMP_parallel, ctypes.c_void_p).value) >= 0
        True
    """
    if gomp_parallel == 0:
        raise ValueError("timed_region needs the address of the runtime's GOMP_parallel; got 0")
    cdef double seconds
    with nogil:
        seconds = fv_omp_timed_region(<fv_gomp_parallel_fn>gomp_parallel)
    return seconds
