# Shared typedefs for the fastvec Cython kernels.
from numpy cimport (float32_t, float64_t, int8_t, int16_t, int32_t, int64_t, uint8_t,
                    uint16_t, uint32_t, uint64_t)

ctypedef float64_t f64
ctypedef float32_t f32
ctypedef int64_t i64
ctypedef int32_t i32
ctypedef int16_t i16
ctypedef int8_t i8
ctypedef uint64_t u64
ctypedef uint32_t u32
ctypedef uint16_t u16
ctypedef uint8_t u8

# The float types a kernel may be specialised for (fused, never copy-pasted).
ctypedef fused floating:
    float32_t
    float64_t
