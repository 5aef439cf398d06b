# The parts of _sync the compiled step path (_step_driver.pyx) calls without Python in between.
cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t, uint32_t


cdef uint32_t *ctrl_words(cnp.ndarray ctrl, Py_ssize_t *workers) except NULL
cdef const uint8_t *mask_bytes(cnp.ndarray mask, Py_ssize_t workers, str name) except NULL
cdef int start_command(uint32_t *ctrl, Py_ssize_t worker, uint32_t command) except -1
cdef int64_t done_status(uint32_t *ctrl, const uint8_t *mask, Py_ssize_t workers) noexcept nogil
cdef int64_t spin_done_status(uint32_t *ctrl, const uint8_t *mask, Py_ssize_t workers,
                              double spin_s) noexcept nogil
cdef int action_rows(object src, cnp.ndarray slab, Py_ssize_t first, Py_ssize_t count,
                     tuple leaf_shape) except -1  # slab: OUT
