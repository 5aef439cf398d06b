# OpenMP after fork, shared by the kernels that run ``prange`` regions.
#
# GNU libgomp's thread pool does not survive fork(): in a child forked from a
# process that has run a parallel region, the next region waits forever for
# threads that do not exist (seen here: SumTree.sample(num_threads=2) in a
# multiprocessing "fork" child hung). So each module that runs regions
# installs a fork handler at import that marks the child, and asks
# ``fv_omp_threads`` how many threads it may use: 1 in a forked child (the
# work then runs serially in the calling thread, same results), else what was
# asked. Processes started with "spawn" or "forkserver" are not forked from
# this one and keep their threads.
cdef extern from "fv_platform.h":
    int fv_omp_install_fork_guard() noexcept nogil
    int fv_omp_threads(int requested) noexcept nogil
    int fv_omp_max_threads() noexcept nogil  # OpenMP's default thread count (1 without OpenMP)
