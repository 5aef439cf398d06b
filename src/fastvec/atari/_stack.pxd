# Declarations of the compiled Atari stack (fastvec.atari._stack): the pixel types and the
# nogil kernels over contiguous buffers, shared by the core that drives ale-py's ALEInterface.
#
# Only ale-py's public Python API is used (act, getScreenGrayscale/getScreenRGB into
# preallocated arrays, lives, game_over, ...): no ALE header is included here (ALE is GPL-2.0).
from libc.stdint cimport uint8_t

ctypedef uint8_t pixel_t    # a screen byte: a grayscale level or one RGB channel
ctypedef float scaled_t     # a pixel of a scale_obs=True observation (pixel / 255.0, float32)

# out[i] = max(a[i], b[i]) for i < n (out may be a).
cdef void max_pool(const pixel_t* a, const pixel_t* b,
                   pixel_t* out,            # OUT [n]
                   Py_ssize_t n) noexcept nogil

# out[i] = lut[src[i]] for i < n: the float32 scaling, one table (numpy's own division).
cdef void scale_pixels(const pixel_t* src, const scaled_t* lut,
                       scaled_t* out,       # OUT [n]
                       Py_ssize_t n) noexcept nogil

# The ring of n_slots frames (slot_bytes each) in time order, oldest (slot `head`) first.
cdef void unroll_ring(const char* ring, Py_ssize_t slot_bytes, Py_ssize_t n_slots,
                      Py_ssize_t head,
                      char* out) noexcept nogil   # OUT [n_slots * slot_bytes]

# Fills slots [0, n_fill) of a frame ring with `frame`.
cdef void fill_slots(char* ring,            # OUT [n_fill * slot_bytes]
                     const char* frame, Py_ssize_t slot_bytes,
                     Py_ssize_t n_fill) noexcept nogil

# `out` as a step_into/reset_into of a compiled core takes it (a writable C-contiguous array of
# that shape and dtype), or a TypeError/ValueError saying what was expected and what came.
cdef object check_out(object out, tuple shape, object dtype)


# FrameStackObservation's state for a compiled core: (padding index (reset 0, zero 1, custom 2),
# the ring of stack_size frames, the padding frame), ring and pad None without a stack; the
# queue's frames copied into the ring. ValueError for a bad stack_size, padding or queue.
cdef tuple frame_ring(Py_ssize_t stack_size, tuple frame_shape, object dtype, object padding,
                      object padding_value, object queue)


# One ale-py AtariEnv's ALE, driven as AtariEnv.step drives it (shared by the compiled cores).
cdef class AleDriver:
    cdef object base            # the AtariEnv
    cdef object time_limit      # a TimeLimit between the stack and the AtariEnv, or None
    cdef object _skip_range, _action_set
    cdef object act, lives, _game_over_fn, _truncated_fn, _ep_frame_fn, _frame_fn
    cdef int _base_skip

    # AtariEnv._get_info: {"lives", "episode_frame_number", "frame_number"}.
    cdef object info(self)
    # AtariEnv.step's frames (and the TimeLimit's count): the summed reward; the flags in OUT.
    cdef double step(self, object action, bint* terminated, bint* truncated) except? -1.0   # OUT
