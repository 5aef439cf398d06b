# The info writer the env loop (_worker/env_loop.pyx) calls after each env's step or reset.
cimport numpy as cnp
from libc.stdint cimport uint8_t, uint32_t


cpdef enum InfoKind:
    # How one info value is stored (fastvec/vector/_infos/codec.py builds the signatures).
    FLOAT = 1      # a Python float: 8 bytes, float64
    INT = 2        # a Python int that fits int64: 8 bytes
    BOOL = 3       # a Python bool: 1 byte
    NPSCALAR = 4   # a NumPy scalar of a numeric dtype: its itemsize
    NDARRAY = 5    # an ndarray of a numeric dtype: its bytes, C order
    PIPE = 6       # anything else: sent on the pipe
    DICT = 7       # a nested dict


cdef class Writer:
    cdef cnp.ndarray ids_arr
    cdef cnp.ndarray rows_arr
    cdef uint32_t *ids
    cdef uint8_t *rows
    cdef Py_ssize_t row_bytes
    cdef Py_ssize_t num_envs
    cdef list templates        # per signature id: tuple (per dict) of compiled node tuples
    cdef list pipe_counts      # per signature id: how many values it sends on the pipe
    cdef cnp.ndarray last_arr  # per env: the signature of its previous info (int64)
    cdef object owner          # the InfoWriter (slow path, piped values)
    cdef public Py_ssize_t stored  # envs that added something since the worker last reset it
    cdef public bint has_message   # whether the owner has something for the pipe (take_message)

    cdef int capture(self, Py_ssize_t j, tuple additions) except -1
    cdef void empty(self, Py_ssize_t j) noexcept
    cdef int _check(self, Py_ssize_t j, Py_ssize_t sid) except -1
    cdef int _store(self, Py_ssize_t j, Py_ssize_t sid, tuple additions) except -1
