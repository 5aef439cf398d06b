"""The compiled Atari stack: Gymnasium's ``AtariPreprocessing`` (+ ``FrameStackObservation``) step.

One :class:`AtariStackCore` drives the ALE of an ale-py ``AtariEnv`` through ale-py's public
Python API (``act``, ``getScreenGrayscale``/``getScreenRGB`` into preallocated arrays, ``lives``,
``game_over``, ``game_truncated``, the frame counters), in the order Gymnasium's wrappers call
it, and computes the observation with the nogil kernels of ``_stack.pxd`` and OpenCV's
``INTER_AREA`` resize: ``fastvec.atari._resize``'s kernel (the same bytes, without OpenCV) for
grayscale screens at the sizes it reproduces, else ``cv2.resize`` called as the wrapper calls it. ``fastvec.atari.env.CompiledAtariEnv`` is the
Gymnasium env around it; ``fastvec.atari.compile_stack`` builds both.
"""
from libc.string cimport memcpy, memset

import numpy as np

cimport cython

from fastvec.atari._palette cimport IndexScreen, ScreenPalette
from fastvec.atari._resize cimport AreaResize

from fastvec.atari._palette import conversion as _conversion
from fastvec.atari._palette import index_screen as _index_screen
from fastvec.atari._resize import unsupported as _area_unsupported


cdef void max_pool(const pixel_t* a, const pixel_t* b,
                   pixel_t* out,            # OUT [n]
                   Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = a[i] if a[i] > b[i] else b[i]


cdef void scale_pixels(const pixel_t* src, const scaled_t* lut,
                       scaled_t* out,       # OUT [n]
                       Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = lut[src[i]]


cdef void unroll_ring(const char* ring, Py_ssize_t slot_bytes, Py_ssize_t n_slots,
                      Py_ssize_t head,
                      char* out) noexcept nogil:  # OUT [n_slots * slot_bytes]
    cdef Py_ssize_t older = (n_slots - head) * slot_bytes
    memcpy(out, ring + head * slot_bytes, older)
    if head:
        memcpy(out + older, ring, head * slot_bytes)


cdef void fill_slots(char* ring,            # OUT [n_fill * slot_bytes]
                     const char* frame, Py_ssize_t slot_bytes,
                     Py_ssize_t n_fill) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n_fill):
        memcpy(ring + i * slot_bytes, frame, slot_bytes)


cdef object _flat_bytes(object array):
    """A writable, flat uint8 view of a C-contiguous array (the kernels' byte buffer)."""
    return array.reshape(-1).view(np.uint8)


cdef tuple frame_ring(Py_ssize_t stack_size, tuple frame_shape, object dtype, object padding,
                      object padding_value, object queue):
    """FrameStackObservation's state for a compiled core (see _stack.pxd)."""
    if stack_size < 0:
        raise ValueError(f"Expected a stack_size >= 0 (0: no frame stack), got {stack_size}")
    if padding not in ("reset", "zero", "_custom"):
        raise ValueError(f"Expected a padding of 'reset', 'zero' or '_custom', got {padding!r}")
    cdef int index = ("reset", "zero", "_custom").index(padding)
    if not stack_size:
        return index, None, None
    ring = np.zeros((stack_size,) + frame_shape, dtype)
    pad = np.zeros(frame_shape, dtype)
    if index == 2:
        np.copyto(pad, padding_value, casting="no")
    if queue is not None:
        frames = list(queue)
        if len(frames) != stack_size:
            raise ValueError(f"Expected {stack_size} stacked frames, got {len(frames)}")
        for i in range(stack_size):
            np.copyto(ring[i], frames[i], casting="no")
    return index, ring, pad


cdef object check_out(object out, tuple shape, object dtype):
    """``out`` as a compiled core's step_into/reset_into takes it, or a TypeError/ValueError."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"Expected out to be a numpy array of shape {shape} and dtype {np.dtype(dtype)}, "
                        f"got {type(out).__name__}")
    if out.shape != shape or out.dtype != dtype:
        raise ValueError(f"Expected out of shape {shape} and dtype {np.dtype(dtype)}, "
                         f"got shape {out.shape} and dtype {out.dtype}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("Expected out to be a writable C-contiguous array, got "
                         f"c_contiguous={out.flags.c_contiguous}, writeable={out.flags.writeable}")
    return out


cdef class AleDriver:
    """The ALE of one ale-py ``AtariEnv``, stepped as ``AtariEnv.step`` steps it.

    Holds the ALE's bound methods (``act``, ``lives``, ...), the env's action set and frame
    skip, and the ``TimeLimit`` (if any) between the compiled wrappers and the env, whose
    ``_elapsed_steps`` it keeps counting. The compiled cores call :meth:`step` for each of
    the base env's steps.

    Args:
        base: the ale-py ``AtariEnv`` (``env.unwrapped``).
        time_limit: the ``TimeLimit`` over it, or None.
    """

    def __init__(self, base, time_limit):
        self.base, self.time_limit = base, time_limit
        skip = base._frameskip
        if isinstance(skip, tuple):
            self._skip_range, self._base_skip = skip, 0
        else:
            self._skip_range, self._base_skip = None, int(skip)
        self._action_set = base._action_set
        ale = base.ale
        self.act = ale.act
        self.lives = ale.lives
        self._game_over_fn = ale.game_over
        self._truncated_fn = ale.game_truncated
        self._ep_frame_fn = ale.getEpisodeFrameNumber
        self._frame_fn = ale.getFrameNumber

    cdef object info(self):
        return {"lives": self.lives(), "episode_frame_number": self._ep_frame_fn(),
                "frame_number": self._frame_fn()}

    cdef double step(self, object action, bint* terminated, bint* truncated) except? -1.0:  # OUT
        cdef int k = self._base_skip
        cdef int j
        cdef double reward = 0.0
        if self._skip_range is not None:
            k = self.base.np_random.integers(*self._skip_range)
        action_idx = self._action_set[action]
        act = self.act
        for j in range(k):
            reward += <double>act(action_idx, 1.0)
        terminated[0] = self._game_over_fn(with_truncation=False)
        truncated[0] = self._truncated_fn()
        limit = self.time_limit
        if limit is not None:
            limit._elapsed_steps += 1
            if limit._elapsed_steps >= limit._max_episode_steps:
                truncated[0] = True
        return reward


@cython.final
cdef class AtariStackCore:
    """``AtariPreprocessing`` (optionally under ``FrameStackObservation``) over one ale-py ``AtariEnv``.

    The core keeps the wrapper's own state: its two ``obs_buffer`` arrays are the grab targets
    (so a core built after a reset continues that episode), ``lives`` and ``game_over`` mirror
    the wrapper's attributes, and a ``TimeLimit`` below the wrapper keeps counting in its own
    ``_elapsed_steps``.

    Args:
        base: the ale-py ``AtariEnv`` (``env.unwrapped``).
        inner: the env ``AtariPreprocessing`` wraps (the base, or the base under
            ``PassiveEnvChecker``/``OrderEnforcing``/``TimeLimit``): its ``reset`` is called.
        time_limit: the ``TimeLimit`` between them, or None.
        has_reset: whether a step may come before the next reset (False: ``ResetNeeded``).
        obs_buffer: the wrapper's two uint8 screen buffers, C-contiguous.
        frame_skip, noop_max, screen_size, terminal_on_life_loss, grayscale_obs,
            grayscale_newaxis, scale_obs, lives, game_over: the wrapper's.
        stack_size: 0 without ``FrameStackObservation``, else its ``stack_size``.
        padding: ``"reset"``, ``"zero"`` or ``"_custom"`` (the frame stack's ``padding_type``).
        padding_value: the custom padding observation (``"_custom"``), else None.
        queue: the frame stack's current frames, oldest first (stack_size of them), or None.

    Raises:
        ValueError: a buffer of the wrong shape, dtype or layout.
    """

    cdef AleDriver _ale
    cdef object _base, _inner, _reset_needed
    cdef object _grab, _lives
    cdef object _resize, _area, _size
    cdef AreaResize _area_plan           # the compiled INTER_AREA (None: cv2.resize)
    cdef readonly ScreenPalette palette  # grayscale screens from a learned palette (None: ALE's)
    cdef IndexScreen _indices            # the screens' palette indices (with a palette)
    cdef const pixel_t[:, ::1] _b0_2d    # buf0 as the kernel reads it (grayscale only)
    cdef readonly int frame_skip, noop_max, stack_size
    cdef readonly bint terminal_on_life_loss, grayscale_obs, grayscale_newaxis, scale_obs
    cdef public object lives
    cdef public object game_over
    cdef public bint has_reset
    cdef object buf0, buf1
    cdef pixel_t[::1] _b0, _b1
    cdef Py_ssize_t _screen_n
    cdef tuple _frame_shape, _resized_shape, _stack_shape
    cdef object _dtype, _scratch, _lut, _ring, _pad, _dst_views
    cdef pixel_t[::1] _scratch_bytes, _ring_bytes, _pad_bytes
    cdef scaled_t[::1] _lut_view
    cdef Py_ssize_t _frame_n, _slot_bytes, _head
    cdef int _padding

    def __init__(self, base, inner, time_limit, bint has_reset, obs_buffer, int frame_skip,
                 int noop_max, screen_size, bint terminal_on_life_loss, bint grayscale_obs,
                 bint grayscale_newaxis, bint scale_obs, lives, game_over, int stack_size=0,
                 str padding="reset", padding_value=None, queue=None):
        import cv2
        from gymnasium.error import ResetNeeded

        self._base, self._inner = base, inner
        self._ale = AleDriver(base, time_limit)
        self._reset_needed = ResetNeeded
        self.has_reset = has_reset
        ale = base.ale
        self._grab = ale.getScreenGrayscale if grayscale_obs else ale.getScreenRGB
        self._lives = ale.lives
        self._resize, self._area = cv2.resize, cv2.INTER_AREA

        self.frame_skip, self.noop_max, self.stack_size = frame_skip, noop_max, stack_size
        self.terminal_on_life_loss = terminal_on_life_loss
        self.grayscale_obs, self.grayscale_newaxis, self.scale_obs = grayscale_obs, grayscale_newaxis, scale_obs
        self.lives, self.game_over = lives, game_over

        height, width = ale.getScreenDims()
        screen_shape = (height, width) if grayscale_obs else (height, width, 3)
        buffers = list(obs_buffer)
        if len(buffers) != 2:
            raise ValueError(f"Expected AtariPreprocessing's 2 screen buffers, got {len(buffers)}")
        for buffer in buffers:
            if (not isinstance(buffer, np.ndarray) or buffer.dtype != np.uint8 or buffer.shape != screen_shape
                    or not buffer.flags.c_contiguous or not buffer.flags.writeable):
                raise ValueError(
                    f"Expected a writable C-contiguous uint8 screen buffer of shape {screen_shape}, "
                    f"got {buffer!r:.60}")
        self.buf0, self.buf1 = buffers
        self._b0, self._b1 = _flat_bytes(self.buf0), _flat_bytes(self.buf1)
        self._screen_n = self.buf0.size
        # ALE's grayscale is its palette's level of each pixel's index: learned from ALE's own
        # conversions, then looked up here (fastvec.atari._palette), where that applies
        self._indices = _index_screen(ale) if grayscale_obs else None
        self.palette = None if self._indices is None else ScreenPalette()

        self._size = tuple(screen_size)
        self._area_plan = None
        if grayscale_obs and _area_unsupported((height, width), (self._size[1], self._size[0])) is None:
            self._area_plan = AreaResize((height, width), (self._size[1], self._size[0]))
            self._b0_2d = self.buf0
        self._resized_shape = (self._size[1], self._size[0]) + (() if grayscale_obs else (3,))
        self._frame_shape = self._resized_shape + ((1,) if grayscale_obs and grayscale_newaxis else ())
        self._frame_n = int(np.prod(self._resized_shape))
        self._dtype = np.dtype(np.float32 if scale_obs else np.uint8)
        # pixel / 255.0 as AtariPreprocessing computes it (float32 array / Python float), per level.
        self._lut = np.asarray(np.arange(256, dtype=np.uint8), dtype=np.float32) / 255.0
        self._lut_view = self._lut
        self._scratch = np.zeros(self._resized_shape, np.uint8)
        self._scratch_bytes = _flat_bytes(self._scratch)

        self._padding, self._ring, self._pad = frame_ring(stack_size, self._frame_shape, self._dtype, padding,
                                                          padding_value, queue)
        if stack_size:
            self._stack_shape = (stack_size,) + self._frame_shape
            self._ring_bytes = _flat_bytes(self._ring)
            self._slot_bytes = self._ring.nbytes // stack_size
            self._pad_bytes = _flat_bytes(self._pad)
            # the resize's destination in each slot (uint8 stacks only)
            self._dst_views = [self._ring[i].reshape(self._resized_shape) for i in range(stack_size)]
            self._head = 0

    # -- ALE, as AtariEnv.step / _get_info call it --------------------------------------------

    cdef object _base_step(self, object action):
        """AtariEnv.step's frames (and a TimeLimit's count): (reward, terminated, truncated)."""
        cdef bint terminated, truncated
        cdef double reward = self._ale.step(action, &terminated, &truncated)
        return reward, terminated, truncated

    @property
    def screen_conversion(self):
        """Who converts the screens: ``"ALE"``, or ``"learned palette (<kernel>)"``."""
        return _conversion(self.palette)

    # -- observation ------------------------------------------------------------------------

    cdef void _grab_screen(self, object buf, pixel_t* flat) except *:
        """ALE's screen (grayscale or RGB) into ``buf`` (``flat``: its bytes).

        With a palette: the screen's indices, converted here when all are learned; else ALE's
        conversion, learned from (a contradiction drops the palette for good).
        """
        cdef ScreenPalette palette = self.palette
        cdef const pixel_t* idx = NULL
        if palette is not None:
            idx = self._indices.grab()
            if palette.map_into(idx, flat, self._screen_n):
                return
        self._grab(buf)
        if palette is not None and palette.learn(idx, flat, self._screen_n) != 0:
            self.palette = None

    cdef object _frame(self, object out):
        """AtariPreprocessing._get_obs: pool, resize, scale; returns the frame, or writes it.

        With a frame stack the frame goes to the ring's slot ``_head``; else into ``out`` (the
        observation's shape and dtype), or into a new array when ``out`` is None.
        """
        cdef pixel_t[::1] o
        if self.frame_skip > 1:
            max_pool(&self._b0[0], &self._b1[0], &self._b0[0], self._screen_n)
        if self.stack_size:
            if self.scale_obs:
                self._resize_into(self._scratch)
                scale_pixels(&self._scratch_bytes[0], &self._lut_view[0],
                             <scaled_t*>&self._ring_bytes[self._head * self._slot_bytes], self._frame_n)
            else:
                self._resize_into(self._dst_views[self._head])
            return None
        if out is None:
            if self._area_plan is not None:
                frame = np.empty(self._resized_shape, np.uint8)
                self._resize_into(frame)
            else:
                frame = self._resize(self.buf0, self._size, interpolation=self._area)
            if self.scale_obs:
                out = np.empty(self._resized_shape, np.float32)
                self._scale_into(frame, out)
                frame = out
            if self.grayscale_obs and self.grayscale_newaxis:
                frame = frame.reshape(self._frame_shape)
            return frame
        if self.scale_obs:
            self._resize_into(self._scratch)
            self._scale_into(self._scratch, out)
        else:
            self._resize_into(out.reshape(self._resized_shape))
        return out

    cdef void _resize_into(self, object dst) except *:
        cdef pixel_t[:, ::1] d
        if self._area_plan is not None and dst.flags.c_contiguous and dst.dtype == np.uint8:
            d = dst
            if self._area_plan.resize_into(self._b0_2d, d) == 0:
                return
        frame = self._resize(self.buf0, self._size, dst=dst, interpolation=self._area)
        if frame is not dst:  # cv2 made a new array after all: copy it in
            np.copyto(dst, frame)

    cdef void _scale_into(self, object src, object out) except *:
        cdef pixel_t[::1] s = _flat_bytes(src)
        cdef pixel_t[::1] o = _flat_bytes(out)
        scale_pixels(&s[0], &self._lut_view[0], <scaled_t*>&o[0], self._frame_n)

    cdef object _stacked(self, object out):
        """The ring in time order, into ``out`` or a new array."""
        if out is None:
            out = np.empty(self._stack_shape, self._dtype)
        cdef pixel_t[::1] o = _flat_bytes(out)
        unroll_ring(<char*>&self._ring_bytes[0], self._slot_bytes, self.stack_size, self._head,
                    <char*>&o[0])
        return out

    cdef object _check_out(self, object out):
        """``out`` as step_into/reset_into need it, or a ValueError/TypeError saying what came."""
        return check_out(out, self._stack_shape if self.stack_size else self._frame_shape, self._dtype)

    # -- the env's step and reset -------------------------------------------------------------

    cdef object _advance(self, object action):
        """AtariPreprocessing.step's frame loop: (reward, terminated, truncated, info)."""
        cdef int t
        cdef int fs = self.frame_skip
        cdef double total_reward = 0.0
        if not self.has_reset:
            raise self._reset_needed("Cannot call env.step() before calling env.reset()")
        terminated = truncated = False
        for t in range(fs):
            reward, terminated, truncated = self._base_step(action)
            total_reward += <double>reward
            self.game_over = terminated
            if self.terminal_on_life_loss:
                new_lives = self._lives()
                terminated = terminated or new_lives < self.lives
                self.game_over = terminated
                self.lives = new_lives
            if terminated or truncated:
                break
            if t == fs - 2:
                self._grab_screen(self.buf1, &self._b1[0])
            elif t == fs - 1:
                self._grab_screen(self.buf0, &self._b0[0])
        return total_reward, terminated, truncated, self._ale.info()

    cdef object _observe(self, object out):
        """The step's observation (after _advance), into ``out`` or a new array."""
        frame = self._frame(out)
        if not self.stack_size:
            return frame
        self._head = (self._head + 1) % self.stack_size
        return self._stacked(out)

    cdef object _restart(self, seed, options):
        """AtariPreprocessing.reset up to its observation: the reset info."""
        cdef Py_ssize_t noops, i
        _, reset_info = self._inner.reset(seed=seed, options=options)
        self.has_reset = True
        noops = self._base.np_random.integers(1, self.noop_max + 1) if self.noop_max > 0 else 0
        for i in range(noops):
            _, terminated, truncated = self._base_step(0)
            reset_info.update(self._ale.info())
            if terminated or truncated:
                _, reset_info = self._inner.reset(seed=seed, options=options)
        self.lives = self._lives()
        self._grab_screen(self.buf0, &self._b0[0])
        self.buf1.fill(0)
        return reset_info

    cdef object _first_observation(self, object out):
        """The reset's observation (after _restart): the frame, padded to a stack."""
        cdef char* ring
        if not self.stack_size:
            return self._frame(out)
        self._head = self.stack_size - 1
        self._frame(None)  # into the last slot
        ring = <char*>&self._ring_bytes[0]
        if self._padding == 0:
            fill_slots(ring, ring + self._head * self._slot_bytes, self._slot_bytes, self._head)
        else:
            fill_slots(ring, <char*>&self._pad_bytes[0], self._slot_bytes, self._head)
        self._head = 0
        return self._stacked(out)

    def step(self, action):
        """One ``AtariPreprocessing`` (+ frame stack) step: (obs, reward, terminated, truncated, info).

        Raises:
            ResetNeeded: a step before the first reset (the env had ``OrderEnforcing``).
            IndexError, TypeError: an action the env's action set cannot be indexed with.
        """
        reward, terminated, truncated, info = self._advance(action)
        return self._observe(None), reward, terminated, truncated, info

    def step_into(self, action, out):
        """:meth:`step`, writing the observation into ``out``: (reward, terminated, truncated, info).

        Raises:
            TypeError, ValueError: ``out`` is not a writable C-contiguous array of the
                observation's shape and dtype (checked before the step).
        """
        self._check_out(out)
        reward, terminated, truncated, info = self._advance(action)
        self._observe(out)
        return reward, terminated, truncated, info

    def reset(self, seed=None, options=None):
        """``AtariPreprocessing.reset`` (+ the frame stack's padding): (obs, info)."""
        info = self._restart(seed, options)
        return self._first_observation(None), info

    def reset_into(self, out, seed=None, options=None):
        """:meth:`reset`, writing the observation into ``out``: the info.

        Raises:
            TypeError, ValueError: as :meth:`step_into`.
        """
        self._check_out(out)
        info = self._restart(seed, options)
        self._first_observation(out)
        return info
