# The parts of handoff that the compiled step (_caller/compiled_step.pyx, the caller's side) and the
# worker's compiled command loop (_worker/command_loop.pyx) call without Python in between.
cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t, uint32_t


cdef uint32_t *ctrl_words(cnp.ndarray ctrl, Py_ssize_t *workers) except NULL
cdef uint32_t *worker_words(cnp.ndarray ctrl, Py_ssize_t worker, Py_ssize_t *workers) except NULL
cdef const uint8_t *mask_bytes(cnp.ndarray mask, Py_ssize_t workers, str name) except NULL
cdef int start_command(uint32_t *ctrl, Py_ssize_t worker, uint32_t command) except -1
cdef int start_commands(uint32_t *ctrl, const uint8_t *mask, Py_ssize_t workers,
                        uint32_t command) except -1
cdef int64_t done_status(uint32_t *ctrl, const uint8_t *mask, Py_ssize_t workers) noexcept nogil
cdef int64_t spin_done_status(uint32_t *ctrl, const uint8_t *mask, Py_ssize_t workers,
                              double spin_s) noexcept nogil
cdef int action_rows(object src, cnp.ndarray slab, Py_ssize_t first, Py_ssize_t count,
                     tuple leaf_shape) except -1  # slab: OUT

# The worker's side.
cdef bint await_command(uint32_t *ctrl, Py_ssize_t worker, uint32_t last_seq, double spin_s,
                       double deadline) noexcept nogil
cdef uint32_t command_word(uint32_t *ctrl, Py_ssize_t worker) noexcept nogil
cdef void finish(uint32_t *ctrl, Py_ssize_t worker, Py_ssize_t workers, uint32_t seq,
                 uint32_t status) noexcept nogil
cdef double now() noexcept nogil
cdef double caller_think(uint32_t *ctrl, Py_ssize_t workers) noexcept nogil
cdef int caller_cpu(uint32_t *ctrl, Py_ssize_t workers) noexcept nogil
cdef int current_cpu() noexcept nogil
cdef double caller_gap(uint32_t *ctrl, Py_ssize_t workers) noexcept nogil
