# Copying an observation into its row of a shared slab, shared by handoff.stack_rows
# and the env loop (which copies each env's observation as soon as it has it).
cimport numpy as cnp
from libc.string cimport memcpy


cdef inline Py_ssize_t row_bytes(cnp.ndarray out) noexcept:
    """Bytes in one row of ``out`` (C-contiguous, at least 1-d)."""
    cdef Py_ssize_t size = cnp.PyArray_ITEMSIZE(out)
    cdef int k
    for k in range(1, cnp.PyArray_NDIM(out)):
        size *= cnp.PyArray_DIMS(out)[k]
    return size


cdef inline bint fits_row(object item, cnp.ndarray out) noexcept:
    """Is ``item`` a C-contiguous ndarray with exactly the dtype (native byte order)
    and shape of one row of ``out``? Then a memcpy stores it as NumPy would."""
    cdef cnp.ndarray row
    cdef int k, ndim = cnp.PyArray_NDIM(out) - 1
    if type(item) is not cnp.ndarray:
        return False
    row = <cnp.ndarray>item
    if (cnp.PyArray_NDIM(row) != ndim or not cnp.PyArray_IS_C_CONTIGUOUS(row)
            or cnp.PyArray_TYPE(row) != cnp.PyArray_TYPE(out) or not cnp.PyArray_ISNOTSWAPPED(row)):
        return False
    for k in range(ndim):
        if cnp.PyArray_DIMS(row)[k] != cnp.PyArray_DIMS(out)[k + 1]:
            return False
    return True


cdef inline void copy_row(object item, cnp.ndarray out, Py_ssize_t i, Py_ssize_t nbytes) noexcept:
    """Row ``i`` of ``out`` = ``item`` (which ``fits_row``), ``nbytes`` = ``row_bytes(out)``.
    Nothing to do when ``item`` is that row (an env that wrote its observation there)."""
    cdef char *row = <char *>cnp.PyArray_DATA(out) + i * nbytes
    cdef char *src = <char *>cnp.PyArray_DATA(<cnp.ndarray>item)
    if src != row:
        memcpy(row, src, nbytes)
