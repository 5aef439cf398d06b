# Declarations of fastvec.atari._resize: OpenCV's INTER_AREA downscale of a uint8 grayscale
# image, bit for bit (cv2.resize(src, (w, h), interpolation=cv2.INTER_AREA)), as a nogil kernel.
from libc.stdint cimport uint8_t


cdef class AreaResize:
    """The weight tables of one (source shape, destination shape) pair, and its last run."""
    cdef readonly int src_height, src_width, dst_height, dst_width
    cdef object _arrays     # the numpy arrays the plan points into (kept alive here)
    cdef void* _plan        # the C plan (fv_area_plan), allocated in __cinit__

    # dst = cv2.resize(src, (dst_width, dst_height), interpolation=cv2.INTER_AREA), bit for bit.
    # Returns 0, or -1 (dst untouched) when src or dst is not of this object's shapes. Not
    # reentrant: the last run's source, sums and result are the object's (one call at a time
    # per object; one object per stream of frames, so that consecutive calls share rows).
    cdef int resize_into(self, const uint8_t[:, ::1] src,
                         uint8_t[:, ::1] dst) noexcept nogil   # OUT
