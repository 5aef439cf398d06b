# Cython declarations of the native-env kit's C headers (fv_env.h, fv_rng.h), for the
# batch runner and for an env's binding:
#
#     from fastvec.native.kit cimport fv_env_def, kernel
#     cdef extern from "gridworld.h":
#         const fv_env_def gridworld_env
#     KERNEL = kernel(&gridworld_env)
#
# The enums are the C header's; fastvec.native.kit exposes them to Python (one definition).
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from cpython.pycapsule cimport PyCapsule_New

cdef extern from "fv_rng.h":
    ctypedef struct fv_rng:
        uint64_t state_lo, state_hi, inc_lo, inc_hi, has_uint32, uinteger
    uint64_t fv_rng_next64(fv_rng *r) noexcept nogil
    uint32_t fv_rng_next32(fv_rng *r) noexcept nogil
    double fv_rng_random(fv_rng *r) noexcept nogil
    double fv_rng_uniform(fv_rng *r, double low, double high) noexcept nogil
    int64_t fv_rng_integers(fv_rng *r, int64_t low, int64_t high) noexcept nogil

cdef extern from "fv_env.h":
    int FV_ABI

    cpdef enum fv_autoreset:
        FV_NEXT_STEP
        FV_SAME_STEP
        FV_DISABLED

    cpdef enum fv_action_kind:
        FV_DISCRETE
        FV_BOX

    cpdef enum fv_layout:
        FV_AOS
        FV_SOA

    ctypedef struct fv_field:
        const char *name
        size_t offset
        const char *dtype

    ctypedef struct fv_batch:
        int64_t n
        int32_t max_steps
        int mode                  # fv_autoreset
        int fast
        const void *params
        void *state               # OUT [n] states (fv_layout)
        fv_rng *rng               # OUT [n] streams
        void *obs                 # OUT [n, obs_size]
        void *final_obs           # OUT [n, obs_size] SAME_STEP
        int64_t obs_size
        size_t obs_bytes
        double *rew               # OUT [n]
        uint8_t *term             # OUT [n]
        uint8_t *trunc            # OUT [n]
        int32_t *steps            # OUT [n]
        uint8_t *needs_reset      # OUT [n]
        uint8_t *reset_flag       # OUT [n]
        int64_t *scratch          # OUT [n] the env's step_range's own
        const int64_t *act_i
        const float *act_f
        const double *act_d
        int64_t act_size

    ctypedef struct fv_env_def:
        int abi
        size_t batch_size
        const char *name
        size_t params_size, state_size
        int layout
        const char *obs_dtype
        int action_kind
        const fv_field *(*params)(int *count) noexcept nogil
        const fv_field *(*state)(int *count) noexcept nogil
        int64_t (*step_range)(fv_batch *b, int64_t lo, int64_t hi) noexcept nogil  # b: OUT
        void (*reset_one)(fv_batch *b, int64_t i) noexcept nogil                   # b: OUT


# The fv_env_def inside a kernel capsule (checked: a compiled env of this kit's version).
cdef const fv_env_def *env_def(object kernel) except NULL


cdef inline object kernel(const fv_env_def *env):
    """The compiled env ``env`` as the Python object fastvec.native.NativeEnvSpec takes."""
    return PyCapsule_New(<void *>env, b"fastvec.native.kernel", NULL)
