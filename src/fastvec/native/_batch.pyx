# The batch runner of the native-env kit: the buffers of N copies of one compiled env
# (fv_env.h), and step / reset over all of them. A step is one C-level call: the actions are
# bound (zero-copy when they already have the env's dtype and shape) and screened, then the
# env's step_range steps every env without the GIL, in chunks on a small thread pool
# (fv_runner.h) for large batches. Autoreset and TimeLimit happen inside step_range (the kit's
# fv_step_envs, or the env's own); what is left to NumPy (SAME_STEP infos, an env's
# after-reset hook) runs only on steps that reset an env.
from libc.string cimport memcpy

import numpy as np
cimport numpy as cnp
from gymnasium import spaces
from gymnasium.error import ClosedEnvironmentError, ResetNeeded

from libc.stdint cimport int32_t, int64_t, uint8_t

from fastvec._ext._types cimport f32, f64, floating
from fastvec.native.kit cimport (
    env_def, fv_batch, fv_env_def, fv_rng, FV_DISABLED, FV_SAME_STEP, FV_DISCRETE, FV_BOX, FV_SOA,
)
from fastvec.native.kit import kernel_info

cnp.import_array()

_MASK64 = 0xFFFFFFFFFFFFFFFF

cdef extern from "fv_runner.h":
    int64_t fv_first_bad_action(const int64_t *a, int64_t n, int64_t hi) noexcept nogil
    int64_t fv_first_set(const uint8_t *flags, int64_t n) noexcept nogil
    ctypedef struct fv_pool:
        int nhelpers
        int64_t helped
    ctypedef int64_t (*fv_chunk_fn)(void *ctx, int64_t lo, int64_t hi) noexcept nogil
    fv_pool *fv_pool_new(int nhelpers) noexcept nogil
    void fv_pool_free(fv_pool *p) noexcept nogil
    int fv_pool_usable(fv_pool *p) noexcept nogil
    int64_t fv_pool_run(fv_pool *p, fv_chunk_fn fn, void *ctx, int64_t n, int64_t nchunks) noexcept nogil


cdef struct Run:
    fv_batch b
    const fv_env_def *env
    int64_t n_actions  # FV_DISCRETE: valid actions are [0, n_actions)


cdef int64_t _step_chunk(void *ctx, int64_t lo, int64_t hi) noexcept nogil:
    cdef Run *r = <Run *>ctx
    return r.env.step_range(&r.b, lo, hi)


cdef int64_t _first_nan_row(const floating *a, int64_t lo, int64_t hi, int64_t size) noexcept nogil:
    """The first row in [lo, hi) of a C-contiguous [*, size] array holding a NaN, else -1."""
    cdef int64_t i, k
    for i in range(lo, hi):
        for k in range(size):
            if a[i * size + k] != a[i * size + k]:
                return i
    return -1


cdef int64_t _check_actions(Run *r, int64_t lo, int64_t hi) noexcept nogil:
    """Check envs [lo, hi): the index of the first invalid action, else (DISABLED mode)
    n + the index of the first env stepped after its episode ended, else -1."""
    cdef fv_batch *b = &r.b
    cdef int64_t i
    if b.act_i != NULL:
        i = fv_first_bad_action(b.act_i + lo, hi - lo, r.n_actions)
        if i >= 0:
            return lo + i
    elif b.act_f != NULL:
        i = _first_nan_row(b.act_f, lo, hi, b.act_size)
        if i >= 0:
            return i
    else:
        i = _first_nan_row(b.act_d, lo, hi, b.act_size)
        if i >= 0:
            return i
    if b.mode == FV_DISABLED:
        i = fv_first_set(b.needs_reset + lo, hi - lo)
        if i >= 0:
            return b.n + lo + i
    return -1


cdef int64_t _check_chunk(void *ctx, int64_t lo, int64_t hi) noexcept nogil:
    return _check_actions(<Run *>ctx, lo, hi) >= 0


cdef void *_data(object array):
    return cnp.PyArray_DATA(<cnp.ndarray>array)


def _aligned_bytes(size):
    """``size`` zero bytes, 8-byte aligned (the widest field type's alignment)."""
    return np.zeros(max(1, (size + 7) // 8), dtype=np.float64).view(np.uint8)[:size]


cdef class Batch:
    """N copies of one compiled env: their state and output buffers, and ``step``.

    The base of ``fastvec.NativeVectorEnv`` (which adds Gymnasium's API in Python):
    ``_setup`` allocates every buffer once from the env's declaration
    (``fastvec.native.kit.kernel_info``) and the spaces; ``step`` is one C-level call;
    ``_seed`` / ``_reset_envs`` / ``_set_params`` serve ``reset``. ``_fields`` maps each
    state field's name to its ``[n]`` view, ``_param_fields`` each parameter's name to its
    0-d view.
    """

    cdef Run r
    cdef fv_pool *_pool
    cdef object _act_ref
    cdef int _act_ndim            # FV_BOX: the ndim of a batch of actions, and its shape
    cdef cnp.npy_intp _act_dims[8]
    cdef public object _kernel_name, _state, _params, _rng, _obs, _rew, _term, _trunc
    cdef public object _final_obs, _reset_flag, _steps, _needs_reset, _scratch, _action_shape
    cdef public object _seeded, _seeds
    cdef public dict _fields, _param_fields
    # None, or f(obs, fields, rows): finishes the observations of the envs in rows, just reset
    cdef public object _after_reset
    cdef public int _num_threads
    cdef public bint copy, _was_reset, _same_step
    cdef public int64_t parallel_threshold

    def _setup(self, kernel, int64_t num_envs, observation_space, action_space, int mode, dict params,
               int32_t max_steps, bint fast, int num_threads, int64_t parallel_threshold, after_reset=None):
        """Allocate the buffers of ``num_envs`` envs of ``kernel`` and point the C batch at them."""
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        cdef const fv_env_def *env = env_def(kernel)
        info = kernel_info(kernel)
        name = info["name"]
        self._kernel_name = name
        obs_shape = tuple(observation_space.shape)
        if np.dtype(observation_space.dtype) != info["obs_dtype"]:
            raise TypeError(f"env {name!r} writes {info['obs_dtype']} observations; the observation "
                            f"space holds {np.dtype(observation_space.dtype)}")
        cdef int64_t n_actions = 0, act_size = 0
        if isinstance(action_space, spaces.Discrete) and int(action_space.start) == 0:
            kind = FV_DISCRETE
            n_actions = int(action_space.n)
            self._action_shape = ()
        elif (isinstance(action_space, spaces.Box) and np.issubdtype(action_space.dtype, np.floating)
                and len(action_space.shape) < 8):
            kind = FV_BOX
            self._action_shape = tuple(action_space.shape)
            act_size = int(np.prod(self._action_shape))
            self._act_ndim = 1 + len(self._action_shape)
            self._act_dims[0] = num_envs
            for k, d in enumerate(self._action_shape):
                self._act_dims[1 + k] = d
        else:
            raise TypeError(f"native envs take a Discrete action space starting at 0 or a float Box, "
                            f"got {action_space}")
        if kind != info["action_kind"]:
            raise TypeError(f"env {name!r} takes {info['action_kind'].name} actions; the action space "
                            f"is {action_space}")

        n = num_envs
        self._num_threads = max(1, num_threads)
        self.parallel_threshold = parallel_threshold
        self._same_step = mode == FV_SAME_STEP
        self._after_reset = after_reset
        self._was_reset = False
        self._state = _aligned_bytes(n * info["state_size"])
        soa = info["layout"] == FV_SOA
        self._fields = {
            fname: np.ndarray((n,), dtype, self._state, offset * n if soa else offset,
                              None if soa else (info["state_size"],))
            for fname, offset, dtype in info["state"]}
        self._params = _aligned_bytes(info["params_size"])
        self._param_fields = {pname: np.ndarray((), dtype, self._params, offset)
                              for pname, offset, dtype in info["params"]}
        missing = sorted(set(self._param_fields) - set(params))
        if missing:
            raise ValueError(f"env {name!r}: no value for the parameters {missing}")
        self._set_params(params)
        self._rng = np.zeros((n, 6), dtype=np.uint64)
        self._seeded = np.zeros(n, dtype=bool)
        self._seeds = [None] * n
        self._obs = np.zeros((n, *obs_shape), dtype=info["obs_dtype"])
        self._final_obs = np.zeros_like(self._obs)
        self._rew = np.zeros(n, dtype=np.float64)
        self._term = np.zeros(n, dtype=np.bool_)
        self._trunc = np.zeros(n, dtype=np.bool_)
        self._steps = np.zeros(n, dtype=np.int32)
        self._needs_reset = np.zeros(n, dtype=np.uint8)
        self._reset_flag = np.zeros(n, dtype=np.uint8)
        self._scratch = np.zeros(n, dtype=np.int64)

        cdef fv_batch *b = &self.r.b
        self.r.env = env
        self.r.n_actions = n_actions
        b.n = n
        b.max_steps = max_steps
        b.mode = mode
        b.fast = fast
        b.params = _data(self._params)
        b.state = _data(self._state)
        b.rng = <fv_rng *>_data(self._rng)
        b.obs = _data(self._obs)
        b.final_obs = _data(self._final_obs)
        b.obs_size = self._obs[0].size
        b.obs_bytes = self._obs[0].nbytes
        b.rew = <f64 *>_data(self._rew)
        b.term = <uint8_t *>_data(self._term)
        b.trunc = <uint8_t *>_data(self._trunc)
        b.steps = <int32_t *>_data(self._steps)
        b.needs_reset = <uint8_t *>_data(self._needs_reset)
        b.reset_flag = <uint8_t *>_data(self._reset_flag)
        b.scratch = <int64_t *>_data(self._scratch)
        b.act_i = NULL
        b.act_f = NULL
        b.act_d = NULL
        b.act_size = act_size

    def _set_params(self, dict values):
        """Write parameters by name (the env's own names); returns their previous values."""
        old = {}
        for pname, value in values.items():
            view = self._param_fields.get(pname)
            if view is None:
                raise TypeError(f"env {self._kernel_name!r} has no parameter {pname!r}; its parameters: "
                                f"{sorted(self._param_fields)}")
            new = np.array(value, dtype=view.dtype)
            if view.dtype.kind in "iu" and new != value:
                raise TypeError(f"parameter {pname!r} of env {self._kernel_name!r} is an integer, got {value!r}")
            old[pname] = view.item()
            view[...] = new
        return old

    def _set_num_threads(self, int num_threads):
        self._num_threads = max(1, num_threads)

    # ------------------------------------------------------------------ step
    cdef int _bind_actions(self, actions) except -1:
        """Point the batch at the actions (zero-copy when they have the env's dtype and shape)."""
        cdef cnp.ndarray a
        cdef fv_batch *b = &self.r.b
        cdef int64_t n = b.n
        b.act_i = NULL
        b.act_f = NULL
        b.act_d = NULL
        if type(actions) is np.ndarray:
            a = <cnp.ndarray>actions
            if cnp.PyArray_IS_C_CONTIGUOUS(a) and cnp.PyArray_ISALIGNED(a) and cnp.PyArray_ISNOTSWAPPED(a):
                if b.act_size == 0:
                    if (cnp.PyArray_TYPE(a) == cnp.NPY_INT64 and cnp.PyArray_NDIM(a) == 1
                            and cnp.PyArray_DIMS(a)[0] == n):
                        self._act_ref = a
                        b.act_i = <const int64_t *>cnp.PyArray_DATA(a)
                        return 0
                elif self._same_dims(a):
                    if cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT32:
                        self._act_ref = a
                        b.act_f = <const f32 *>cnp.PyArray_DATA(a)
                        return 0
                    if cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT64:
                        self._act_ref = a
                        b.act_d = <const f64 *>cnp.PyArray_DATA(a)
                        return 0
        a = self._coerce_actions(actions)
        self._act_ref = a
        if b.act_size == 0:
            b.act_i = <const int64_t *>cnp.PyArray_DATA(a)
        elif cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT32:
            b.act_f = <const f32 *>cnp.PyArray_DATA(a)
        else:
            b.act_d = <const f64 *>cnp.PyArray_DATA(a)
        return 0

    cdef inline bint _same_dims(self, cnp.ndarray a) noexcept:
        """The shape of a batch of Box actions."""
        cdef int k
        if cnp.PyArray_NDIM(a) != self._act_ndim:
            return False
        for k in range(self._act_ndim):
            if cnp.PyArray_DIMS(a)[k] != self._act_dims[k]:
                return False
        return True

    def _coerce_actions(self, actions):
        """Slow path: convert or reject actions that do not have the env's dtype and shape."""
        n = self.r.b.n
        arr = np.asarray(actions)
        if not arr.dtype.isnative:  # (byte-swapped: the same values in this machine's order)
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if self.r.b.act_size == 0:
            expected = f"an integer array of shape ({n},)"
            if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
                raise TypeError(f"actions must be {expected}; got dtype {arr.dtype} and shape {arr.shape}")
            if arr.shape != (n,):
                raise ValueError(f"actions must be {expected}; got shape {arr.shape}")
            if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
                raise ValueError(f"actions out of range: {arr.max()}")
            return np.ascontiguousarray(arr, dtype=np.int64)
        shape = (n, *self._action_shape)
        expected = f"a float array of shape {shape}"
        if arr.dtype == np.bool_ or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
            raise TypeError(f"actions must be {expected}; got dtype {arr.dtype} and shape {arr.shape}")
        if arr.shape != shape:
            raise ValueError(f"actions must be {expected}; got shape {arr.shape}")
        if arr.dtype == np.float32:
            return np.ascontiguousarray(arr)
        return np.ascontiguousarray(arr, dtype=np.float64)

    cdef bint _use_pool(self) except -1:
        """True if this step runs on the thread pool (started, or restarted after a fork, here)."""
        cdef int nt = self._num_threads
        if nt <= 1 or self.r.b.n < self.parallel_threshold:
            return False
        if not fv_pool_usable(self._pool) or self._pool.nhelpers != nt - 1:
            fv_pool_free(self._pool)
            self._pool = fv_pool_new(nt - 1)
        return self._pool != NULL

    cdef inline int64_t _nchunks(self) noexcept nogil:
        # a few chunks per thread (a late helper still gets some); each env's result
        # depends only on its own state, action and PCG64 stream, so the split never
        # changes the results
        return max(1, min(4 * self._num_threads, self.r.b.n // 64))

    cdef int64_t _check(self, bint pooled) except -2:
        """_check_actions over all envs; on the pool, the threads screen their chunks and
        the first bad index (only when there is one) is then found serially.

        Only when the helpers took part in the last job: on a machine where they do not
        get a core in time, one more pool round per step would cost more than the serial
        check."""
        cdef Run *r = &self.r
        cdef int64_t nbad, n = r.b.n, nchunks = self._nchunks()
        if pooled and self._pool.helped > 0:
            with nogil:
                nbad = fv_pool_run(self._pool, _check_chunk, r, n, nchunks)
            return _check_actions(r, 0, n) if nbad else -1
        if n >= 1024:
            with nogil:
                nbad = _check_actions(r, 0, n)
            return nbad
        return _check_actions(r, 0, n)

    cdef int64_t _run(self, bint pooled) except -1:
        cdef Run *r = &self.r
        cdef int64_t total = 0, n = r.b.n, nchunks = self._nchunks()
        if pooled:
            with nogil:
                total = fv_pool_run(self._pool, _step_chunk, r, n, nchunks)
        elif n >= 1024:
            with nogil:
                total = r.env.step_range(&r.b, 0, n)
        else:
            total = r.env.step_range(&r.b, 0, n)
        return total

    def __dealloc__(self):
        fv_pool_free(self._pool)
        self._pool = NULL

    def step(self, actions):
        """Step every env with ``actions``; returns ``(obs, rewards, terminated, truncated, infos)``.

        Raises ValueError/TypeError for invalid actions (naming the env index) and, in
        DISABLED mode, for stepping an env whose episode ended without a reset; nothing is
        stepped then. Raises ResetNeeded before the first reset, and ClosedEnvironmentError
        once the subclass is ``closed`` (its close clears ``_was_reset``: one test here).
        """
        if not self._was_reset:
            if getattr(self, "closed", False):
                raise ClosedEnvironmentError(f"Trying to operate on `{type(self).__name__}`, after a call to `close()`.")
            raise ResetNeeded("Cannot call env.step() before calling env.reset()")
        self._bind_actions(actions)
        cdef bint pooled = self._use_pool()
        cdef int64_t bad = self._check(pooled)
        if bad >= 0:
            self._act_ref = None
            self._raise_bad(actions, bad)
        cdef int64_t nreset = self._run(pooled)
        self._act_ref = None
        if nreset and (self._same_step or self._after_reset is not None):
            infos = self._after_resets(True)
        else:
            infos = {}
        if self.copy:
            return (self._fresh(self._obs), self._fresh(self._rew), self._fresh(self._term),
                    self._fresh(self._trunc), infos)
        return self._obs, self._rew, self._term, self._trunc, infos

    cdef inline object _fresh(self, object src):
        """A new C-contiguous copy of one of our (contiguous) output buffers."""
        cdef cnp.ndarray a = <cnp.ndarray>src
        cdef cnp.ndarray out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(a), cnp.PyArray_DIMS(a), cnp.PyArray_TYPE(a), 0)
        memcpy(cnp.PyArray_DATA(out), cnp.PyArray_DATA(a), cnp.PyArray_NBYTES(a))
        return out

    def _raise_bad(self, actions, int64_t bad):
        n = self.r.b.n
        if bad >= n:
            raise ValueError(
                f"env {bad - n} was stepped after its episode ended (terminated or truncated) "
                "with autoreset_mode=DISABLED; reset it first with "
                "reset(options={'reset_mask': mask})")
        if self.r.b.act_size == 0:
            hi = self.r.n_actions
            value = int(np.asarray(actions).reshape(-1)[bad])
            raise ValueError(f"action {value} of env {bad} is not in Discrete({hi}) "
                             f"(expected an integer in [0, {hi - 1}])")
        raise ValueError(f"action of env {bad} is NaN; expected a float")

    def _after_resets(self, bint from_step):
        """What NumPy finishes after envs were reset: the env's after-reset hook, and (from
        a SAME_STEP step) the final_obs / final_info infos, as SyncVectorEnv builds them."""
        rows = np.flatnonzero(self._reset_flag)
        if self._after_reset is not None and rows.size:
            self._after_reset(self._obs, self._fields, rows)
        if not (from_step and self._same_step) or rows.size == 0:
            return {}
        n = self.r.b.n
        final_obs = np.full(n, None, dtype=object)
        fo = self._final_obs
        for i in rows:
            final_obs[i] = fo[i].copy()
        mask = np.zeros(n, dtype=np.bool_)
        mask[rows] = True
        return {"final_obs": final_obs, "_final_obs": mask, "final_info": {}, "_final_info": mask.copy()}

    # ----------------------------------------------------------------- reset
    def _seed(self, seeds, todo):
        """Seed env i's stream for each i where ``todo[i]``: ``seeds[i]`` as Gymnasium's
        ``Env.reset(seed=...)`` does (PCG64 through NumPy's SeedSequence); ``None`` keeps the
        stream going, or (an env never seeded) draws the seed from the OS, like Gymnasium."""
        rng = self._rng
        fresh = []
        for i, s in enumerate(seeds):
            if not todo[i]:
                continue
            if s is not None:
                st = np.random.PCG64(int(s)).state
                lcg = st["state"]
                rng[i] = [lcg["state"] & _MASK64, lcg["state"] >> 64, lcg["inc"] & _MASK64, lcg["inc"] >> 64,
                          st["has_uint32"], st["uinteger"]]
                self._seeded[i] = True
                self._seeds[i] = int(s)
            elif not self._seeded[i]:
                fresh.append(i)
        if fresh:
            idx = np.asarray(fresh)
            rng[idx] = 0
            rng[idx, :4] = np.random.default_rng().integers(0, 2**64, size=(len(idx), 4), dtype=np.uint64)
            rng[idx, 2] |= np.uint64(1)  # the LCG increment is odd
            self._seeded[idx] = True
            for i in fresh:
                self._seeds[i] = None

    def _reset_envs(self, mask=None):
        """Reset the envs where ``mask`` (bool [n]) is set, or all, drawing from their streams."""
        cdef Run *r = &self.r
        cdef fv_batch *b = &r.b
        cdef int64_t i, n = b.n
        cdef const uint8_t *m = NULL
        cdef cnp.ndarray marr
        if mask is not None:
            marr = np.ascontiguousarray(mask, dtype=np.uint8)
            m = <const uint8_t *>cnp.PyArray_DATA(marr)
        with nogil:
            for i in range(n):
                b.reset_flag[i] = 0
                if m == NULL or m[i]:
                    r.env.reset_one(b, i)
                    b.term[i] = 0
                    b.trunc[i] = 0
        self._was_reset = True
        if self._after_reset is not None:
            self._after_resets(False)
