# cython: language_level=3, boundscheck=False, wraparound=False
"""Worker side (and the caller's own share): the per-env loop of a FastVectorEnv step, compiled.

A worker (and the calling process, for its own share of the envs) steps its
envs one after the other. The envs are Python objects, so this loop holds the
GIL; what it removes is the interpreter's glue between two ``env.step`` calls
(bytecode dispatch, tuple unpacking, list stores, and three list-to-array
conversions at the end), which after a long env step runs from cold caches
and costs a short env a tenth of its step or so (docs/benchmarks.md, "Figures behind the code"). Rewards and flags go straight into
the shared slabs.

The semantics are SyncVectorEnv's, statement for statement: ``env.step`` and
``env.reset`` are looked up on every call, a reward or flag that is not a
plain float / bool is stored by NumPy's own item assignment (same conversion,
same errors), and an env that raises leaves its global index in ``current``.
"""
cimport numpy as cnp
import numpy as np
from cpython.float cimport PyFloat_AS_DOUBLE

from cpython.dict cimport PyDict_CheckExact, PyDict_Size

from fastvec.vector._infos.kernels cimport Writer
from fastvec.native.kit cimport FV_DISABLED as DISABLED, FV_NEXT_STEP as NEXT_STEP, FV_SAME_STEP as SAME_STEP
from fastvec.vector._block.protocol cimport INFOS, OK
from fastvec.vector._block.obs_rows cimport copy_row, fits_row, row_bytes

cnp.import_array()

# NumPy's float64 scalar is a Python float subclass holding its value where a float does
# (MuJoCo envs return their rewards as such scalars).
cdef object _NP_FLOAT64 = np.float64


cdef inline int _store_reward(double *out, cnp.ndarray arr, Py_ssize_t j, object reward) except -1:
    if type(reward) is float or type(reward) is _NP_FLOAT64:
        out[j] = PyFloat_AS_DOUBLE(reward)
    else:
        arr[j] = reward  # NumPy's conversion, as SyncVectorEnv's ``rewards[i] = reward``
    return 0


cdef inline int _store_flag(cnp.npy_bool *out, cnp.ndarray arr, Py_ssize_t j, object flag) except -1:
    if flag is True:
        out[j] = 1
    elif flag is False:
        out[j] = 0
    else:
        arr[j] = flag  # NumPy's conversion (np.bool_, ints, ...)
    return 0


cdef cnp.ndarray _checked(cnp.ndarray arr, int typenum, Py_ssize_t n, str name):
    if (cnp.PyArray_TYPE(arr) != typenum or cnp.PyArray_NDIM(arr) != 1 or cnp.PyArray_DIMS(arr)[0] != n
            or not cnp.PyArray_IS_C_CONTIGUOUS(arr) or not cnp.PyArray_ISWRITEABLE(arr)):
        raise ValueError(f"{name} must be a writeable contiguous 1-d {cnp.PyArray_DescrFromType(typenum)} "
                         f"array of {n} values, got {arr.dtype} {(<object> arr).shape}")
    return arr


cdef class EnvLoop:
    """Steps a list of envs into shared result slabs (one per worker, built once).

    ``rewards`` (float64), ``terminations`` and ``truncations`` (bool) are the
    worker's rows of the shared slabs; ``last_obs`` and ``autoreset`` are the
    worker's per-env lists, updated in place. ``observations`` (optional): the
    worker's rows of a single-leaf observation slab; each env's observation is
    copied there as soon as the env returns it (while it is in cache), and
    ``obs_written`` says after a step whether every one could be (an ndarray of
    exactly the row's dtype and shape); if not, the worker stacks them all.
    ``infos``: the worker's info writer; each env's info dict(s) go through it.
    ``next_seeds`` (optional, one entry per env): a seed the env's next autoreset uses
    instead of none, once (a rebuilt env's derived seed, see FastVectorEnv's ``env_failure``).
    ``current`` (optional): a one-word uint32 array the loop keeps the global index + 1 of
    the env it is stepping in (0 between steps), for a step that hangs to name its env.
    ``on_failure`` (optional): ``on_failure(j, exc, final, resetting)``, called when env j's
    step (or the reset a step runs) raises an ``Exception``, returns what the env contributes
    to the step instead, ``(obs, info dicts, autoreset)``, having written its reward and flags
    (it rebuilds the env: FastVectorEnv's ``env_failure="restart"``). ``final``: the
    ``{"final_obs", "final_info"}`` of a step that ended its episode when the SAME_STEP reset
    after it raised (its reward and flags are written), else None; ``resetting``: the NEXT_STEP
    autoreset raised. None: the exception propagates.
    """
    cdef list envs
    cdef Py_ssize_t first
    cdef int mode
    cdef cnp.ndarray rewards_arr, terms_arr, truncs_arr
    cdef double *rewards
    cdef cnp.npy_bool *terms
    cdef cnp.npy_bool *truncs
    cdef list last_obs
    cdef list autoreset
    cdef list next_seeds
    cdef public object on_failure
    cdef cnp.ndarray current_arr
    cdef unsigned int *current_word
    cdef object obs_arr         # cnp.ndarray or None
    cdef Writer infos
    cdef Py_ssize_t obs_row_bytes
    cdef public object current
    cdef public bint obs_written
    cdef cnp.ndarray counts_arr
    cdef unsigned long long *counts  # per env: steps, resets (NULL: not counting)

    def __init__(self, list envs not None, Py_ssize_t first, int mode, cnp.ndarray rewards not None,
                 cnp.ndarray terminations not None, cnp.ndarray truncations not None,
                 list last_obs not None, list autoreset not None, Writer infos not None,
                 cnp.ndarray observations=None, list next_seeds=None, cnp.ndarray current=None):
        cdef Py_ssize_t n = len(envs)
        if mode not in (NEXT_STEP, SAME_STEP, DISABLED):
            raise ValueError(f"unknown autoreset mode code {mode}")
        if len(last_obs) != n or len(autoreset) != n:
            raise ValueError(f"last_obs ({len(last_obs)}) and autoreset ({len(autoreset)}) must have one "
                             f"entry per env ({n})")
        self.envs = envs
        self.first = first
        self.mode = mode
        self.rewards_arr = _checked(rewards, cnp.NPY_FLOAT64, n, "rewards")
        self.terms_arr = _checked(terminations, cnp.NPY_BOOL, n, "terminations")
        self.truncs_arr = _checked(truncations, cnp.NPY_BOOL, n, "truncations")
        self.rewards = <double *> cnp.PyArray_DATA(rewards)
        self.terms = <cnp.npy_bool *> cnp.PyArray_DATA(terminations)
        self.truncs = <cnp.npy_bool *> cnp.PyArray_DATA(truncations)
        self.last_obs = last_obs
        self.autoreset = autoreset
        self.next_seeds = next_seeds if next_seeds is not None else [None] * n
        if len(self.next_seeds) != n:
            raise ValueError(f"next_seeds ({len(self.next_seeds)}) must have one entry per env ({n})")
        self.current = None
        self.on_failure = None
        self.current_word = NULL
        self.counts = NULL
        if current is not None:
            self.current_arr = _checked(current, cnp.NPY_UINT32, 1, "current")
            self.current_word = <unsigned int *> cnp.PyArray_DATA(current)
        self.obs_written = False
        self.infos = infos
        self.obs_arr = None
        if observations is not None:
            if (cnp.PyArray_NDIM(observations) < 1 or cnp.PyArray_DIMS(observations)[0] != n
                    or not cnp.PyArray_IS_C_CONTIGUOUS(observations)
                    or not cnp.PyArray_ISWRITEABLE(observations)):
                raise ValueError(f"observations must be a writeable C-contiguous array of {n} rows, "
                                 f"got shape {(<object> observations).shape}")
            self.obs_arr = observations
            self.obs_row_bytes = row_bytes(observations)

    def step(self, object actions not None):
        """Step env j with ``actions[j]`` (autoreset as the mode says).

        ``actions``: a list, or an ndarray whose rows are the actions (indexing it
        gives what iterating it gives, as SyncVectorEnv's ``iterate`` hands them out).

        Each env's contribution to the vector infos goes to the info writer: its
        info dict, or in SAME_STEP mode for an env that ended, SyncVectorEnv's
        ``{"final_obs": obs, "final_info": info}`` followed by its reset info.
        """
        cdef Py_ssize_t j = 0, n = len(self.envs)
        cdef object env, obs, reward, terminated, truncated, info, final, additions
        cdef bint done, resetting
        cdef bint written = self.obs_arr is not None
        if len(actions) != n:
            raise ValueError(f"{len(actions)} actions for {n} envs")
        self.current = None
        try:
            for j in range(n):
                env = self.envs[j]
                final = None
                additions = None
                resetting = False
                if self.current_word != NULL:
                    self.current_word[0] = <unsigned int>(self.first + j + 1)
                try:
                    if self.mode == NEXT_STEP and self.autoreset[j]:
                        resetting = True
                        if self.next_seeds[j] is None:
                            obs, info = env.reset()
                        else:
                            seed, self.next_seeds[j] = self.next_seeds[j], None
                            obs, info = env.reset(seed=seed)
                        self.rewards[j] = 0.0
                        self.terms[j] = 0
                        self.truncs[j] = 0
                        done = False
                        if self.counts != NULL:
                            self.counts[2 * j + 1] += 1
                    else:
                        obs, reward, terminated, truncated, info = env.step(actions[j])
                        _store_reward(self.rewards, self.rewards_arr, j, reward)
                        _store_flag(self.terms, self.terms_arr, j, terminated)
                        _store_flag(self.truncs, self.truncs_arr, j, truncated)
                        done = terminated or truncated
                        if self.counts != NULL:
                            self.counts[2 * j] += 1
                        if done and self.mode == SAME_STEP:
                            final = {"final_obs": obs, "final_info": info}
                            obs, info = env.reset()
                            if self.counts != NULL:
                                self.counts[2 * j + 1] += 1
                except Exception as exc:
                    if self.on_failure is None:
                        raise
                    obs, additions, done = self.on_failure(j, exc, final, resetting)
                self.last_obs[j] = obs
                if written:
                    if fits_row(obs, <cnp.ndarray> self.obs_arr):
                        copy_row(obs, <cnp.ndarray> self.obs_arr, j, self.obs_row_bytes)
                    else:
                        written = False  # the worker stacks them all (NumPy's casts)
                self.autoreset[j] = done
                if additions is not None:
                    self.infos.capture(j, additions)
                elif final is not None:
                    self.infos.capture(j, (final, info))
                elif PyDict_CheckExact(info) and PyDict_Size(info) == 0:
                    self.infos.empty(j)
                else:
                    self.infos.capture(j, (info,))
        except BaseException:
            self.current = self.first + j
            raise
        if self.current_word != NULL:
            self.current_word[0] = 0
        self.obs_written = written

    def count_into(self, cnp.ndarray counts not None):
        """Count each env's steps and resets (autoresets included) into ``counts``: a
        writeable C-contiguous uint64 array of (envs, 2), this loop's rows of the statistics
        region (``fastvec.vector._block.stats``)."""
        cdef Py_ssize_t n = len(self.envs)
        if (cnp.PyArray_TYPE(counts) != cnp.NPY_UINT64 or cnp.PyArray_NDIM(counts) != 2
                or cnp.PyArray_DIMS(counts)[0] != n or cnp.PyArray_DIMS(counts)[1] != 2
                or not cnp.PyArray_IS_C_CONTIGUOUS(counts) or not cnp.PyArray_ISWRITEABLE(counts)):
            raise ValueError(f"counts must be a writeable contiguous uint64 array of ({n}, 2), got "
                             f"{counts.dtype} {(<object> counts).shape}")
        self.counts_arr = counts
        self.counts = <unsigned long long *> cnp.PyArray_DATA(counts)

    cpdef int quiet_status(self):
        """After :meth:`step`: the command's status when it leaves nothing for the pipe,
        ``Status.INFOS`` (some env left info values in its row) or ``Status.OK``, clearing the
        info writer's count for the next command; -1 when something must go on the pipe
        (an observation the loop could not write, a new info signature, a piped value),
        leaving the worker's ``_finish`` to send it."""
        cdef Writer infos = self.infos
        if not self.obs_written or (infos.stored and infos.has_message):
            return -1
        status = INFOS if infos.stored else OK
        infos.stored = 0
        return status
