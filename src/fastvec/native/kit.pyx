# The native-env kit seen from Python: its enums (declared once, in kit.pxd, from the C
# header), what a compiled env declares (kernel_info), and its random draws (for tests).
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid
from libc.stdint cimport int64_t, uint64_t

import numpy as np

#: The capsule name of a compiled env (fastvec.native.kit.kernel in Cython).
KERNEL_CAPSULE = "fastvec.native.kernel"


cdef const fv_env_def *env_def(object kernel) except NULL:
    """The fv_env_def inside ``kernel``; TypeError if it is not a compiled env, ImportError
    if it was compiled against another version of the kit."""
    if not PyCapsule_IsValid(kernel, b"fastvec.native.kernel"):
        raise TypeError(f"expected a compiled env (the capsule fastvec.native.kit.kernel makes), got {kernel!r}")
    cdef const fv_env_def *env = <const fv_env_def *>PyCapsule_GetPointer(kernel, b"fastvec.native.kernel")
    if env.abi != FV_ABI or env.batch_size != sizeof(fv_batch):
        raise ImportError(f"env {env.name.decode()!r} was compiled against version {env.abi} of the "
                          f"native-env kit; this fastvec has version {FV_ABI}: rebuild it")
    return env


cdef list _fields(const fv_field *f, int count):
    return [(f[k].name.decode(), f[k].offset, np.dtype(f[k].dtype.decode())) for k in range(count)]


def kernel_info(kernel):
    """What a compiled env declares: a dict with ``name``, ``params`` and ``state`` (lists of
    ``(name, offset, numpy dtype)``), ``params_size``, ``state_size``, ``layout``
    (:class:`fv_layout`), ``obs_dtype`` and ``action_kind`` (:class:`fv_action_kind`).

    Example:
        >>> from fastvec.native import kit
        >>> from fastvec.native.envs import mountaincar
        >>> info = kit.kernel_info(mountaincar.KERNEL)
        >>> info["name"], [name for name, offset, dtype in info["state"]]
        ('mountaincar', ['position', 'velocity'])
        >>> info["action_kind"] is kit.fv_action_kind.FV_DISCRETE, info["obs_dtype"]
        (True, dtype('float32'))
    """
    cdef const fv_env_def *env = env_def(kernel)
    cdef int nparams = 0, nstate = 0
    cdef const fv_field *params = env.params(&nparams)
    cdef const fv_field *state = env.state(&nstate)
    return {
        "name": env.name.decode(),
        "params": _fields(params, nparams),
        "state": _fields(state, nstate),
        "params_size": env.params_size,
        "state_size": env.state_size,
        "layout": fv_layout(env.layout),
        "obs_dtype": np.dtype(env.obs_dtype.decode()),
        "action_kind": fv_action_kind(env.action_kind),
    }


cdef extern from "fv_platform.h":
    enum: FV_INT128, FV_GNU_BUILTINS, FV_C11_THREADS, FV_FUTEX


def platform_paths():
    """Which of ``fv_platform.h``'s paths this build of fastvec took: the native ones
    (GCC/Clang) or the portable ones (MSVC, or any compiler with ``FASTVEC_PORTABLE=1``).

    Returns:
        A dict: ``multiply`` (``"int128"`` or ``"64-bit halves"``), ``atomics`` (``"gnu"`` or
        ``"c11"``), ``threads`` (``"pthreads"`` or ``"c11"``) and ``wait`` (``"futex"`` or
        ``"nap"``).

    Example:
        >>> from fastvec.native import kit
        >>> sorted(kit.platform_paths())
        ['atomics', 'multiply', 'threads', 'wait']
    """
    return {
        "multiply": "int128" if FV_INT128 else "64-bit halves",
        "atomics": "gnu" if FV_GNU_BUILTINS else "c11",
        "threads": "c11" if FV_C11_THREADS else "pthreads",
        "wait": "futex" if FV_FUTEX else "nap",
    }


def rng_draws(uint64_t[::1] words, str what, int64_t k, int64_t low=0, int64_t high=1):
    """``k`` draws from an ``fv_rng`` (6 words, NumPy's PCG64 state, updated in place):
    ``what="random"`` (np_random.random()) or ``"integers"`` (np_random.integers(low, high)).
    For tests of the kit's streams against NumPy's."""
    if words.shape[0] != 6:
        raise ValueError("an fv_rng is 6 uint64 words")
    cdef fv_rng *r = <fv_rng *>&words[0]
    cdef int64_t j
    if what == "random":
        out = np.empty(k, dtype=np.float64)
        for j in range(k):
            out[j] = fv_rng_random(r)
        return out
    if what == "integers":
        out = np.empty(k, dtype=np.int64)
        for j in range(k):
            out[j] = fv_rng_integers(r, low, high)
        return out
    raise ValueError(f"what must be 'random' or 'integers', got {what!r}")
