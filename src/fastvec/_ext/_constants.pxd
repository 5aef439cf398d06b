# Constants shared by the fastvec Cython kernels, defined once here and cimported.
#
# ``cdef enum``s rather than ``cpdef``: only Cython code reads them (Python code gets the
# values it needs from the kernel modules, e.g. fastvec.spaces._flatten.type_code). A
# ``cpdef enum`` also defines a Python enum class, which needs a .pyx of the same name to
# live in (one more compiled module); declared in a .pxd alone, every conversion of one of
# its values to a Python object warns at run time that the class cannot be imported.

# Element type of a buffer a kernel reads or writes, named after its _types.pxd typedef.
# The numbering is the order of the flatten kernels' fused ``value_t``, and is what
# fastvec.spaces._flatten.type_code returns; GAE reads flags as DT_U8 (bool, uint8),
# DT_F32 or DT_F64 and float data as DT_F32 or DT_F64.
cdef enum ElemType:
    DT_U8 = 0
    DT_I8 = 1
    DT_U16 = 2
    DT_I16 = 3
    DT_U32 = 4
    DT_I32 = 5
    DT_U64 = 6
    DT_I64 = 7
    DT_F32 = 8
    DT_F64 = 9

cdef enum:
    # A kernel call over fewer elements than this keeps the GIL: releasing and taking it
    # back costs more than the loop itself.
    NOGIL_MIN = 16384
