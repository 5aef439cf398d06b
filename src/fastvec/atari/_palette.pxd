# Declarations of fastvec.atari._palette: a screen's ALE palette indices to ALE's levels, from a
# table learned off ALE's own conversions (fv_palette.h), as nogil kernels.
from libc.stdint cimport uint8_t


cdef class IndexScreen:
    """An ALE's screens as palette indices (``ale.getScreen``), into a buffer of its own."""
    cdef object _get_screen, _buffer
    cdef const uint8_t[::1] _bytes

    # The current screen's indices (height x width bytes, valid until the next grab).
    cdef const uint8_t* grab(self) except NULL


cdef class ScreenPalette:
    """One ALE's index-to-level table (grayscale levels), learned as screens come."""
    cdef void* _table                   # the C table (fv_palette), allocated in __cinit__
    cdef readonly bint consistent       # False once a learned pair contradicted the table
    cdef readonly Py_ssize_t misses     # screens left to ALE: an index not learned yet

    # out[i] = the level of idx[i] (i < n). Returns 1 when every index was learned (out is
    # what ALE's conversion gives), else 0 (out is not to be used).
    cdef int map_into(self, const uint8_t* idx,
                      uint8_t* out,             # OUT [n]
                      Py_ssize_t n) noexcept nogil

    # Learns a screen ALE converted (its indices and their levels). Returns 0, or -1 when a
    # pair contradicts the table; the table is not to be used then (consistent is False).
    cdef int learn(self, const uint8_t* idx, const uint8_t* levels, Py_ssize_t n) noexcept nogil
