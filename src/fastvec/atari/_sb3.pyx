"""The compiled SB3 / CleanRL Atari stack: Stable-Baselines3's Atari wrappers' step, in Cython.

One :class:`SB3StackCore` runs, over one ale-py ``AtariEnv``, what this stack of Python
wrappers runs (innermost first; each one optional, in this order):

* Gymnasium's ``RecordEpisodeStatistics`` (on the base env: it counts its frames and real
  game episodes, and times them with ``time.perf_counter`` where the wrapper does),
* SB3's ``NoopResetEnv``, ``MaxAndSkipEnv``, ``EpisodicLifeEnv``, ``FireResetEnv``,
* and above those: SB3's ``ClipRewardEnv``, and Gymnasium's ``ResizeObservation`` then
  ``GrayscaleObservation`` (CleanRL's ``ppo_atari.py``), or SB3's ``WarpFrame`` (SB3's
  ``AtariWrapper``), then a ``FrameStackObservation``.

Each wrapper's ``step``/``reset`` is one ``cdef`` method calling the one below, as the Python
wrappers call each other, so that every ALE call, every draw from the base env's generator,
every info dict and every reset happens in the same order. The screen is grabbed only where
a wrapper keeps or returns it (the Python base env grabs it on every frame; the grabs the
wrappers drop change nothing). The pixels: SB3's max-pool over the last two frames and the
split into three channel planes (``fv_rgb.h``), OpenCV's ``INTER_AREA`` resize of each plane
(``fastvec.atari._resize``: ``cv2.resize`` of an RGB image resizes each channel alone, in the
same float operations), Gymnasium's float64 grayscale (``fv_rgb.h``); or, for ``WarpFrame``,
OpenCV's fixed-point ``COLOR_RGB2GRAY`` (``fv_rgb.h``) and the resize of that one plane; the
frame ring of ``fastvec.atari._stack``. The wrappers' own state (``MaxAndSkipEnv``'s two screen buffers,
``EpisodicLifeEnv``'s ``lives``/``was_real_done``, ``RecordEpisodeStatistics``' counters and
queues) is read when the core is built and kept up to date in those wrapper objects.

Under ``ResizeObservation`` + ``GrayscaleObservation``, where the CPU has a vector kernel for it,
the screens come as palette indices (``ale.getScreen``) and their three channel planes from
three tables learned off ALE's own RGB conversions (``fastvec.atari._palette``): a screen with
an index not learned yet is ALE's RGB, learned from. The core then keeps MaxAndSkipEnv's two
frames as channel planes, and the wrapper's private ``_obs_buffer`` holds the frames of the
last screens ALE converted.
"""
from libc.stdint cimport uint8_t

import numpy as np

cimport cython

from fastvec.atari._palette import conversion as _conversion
from fastvec.atari._palette import index_screen as _index_screen

from fastvec.atari._palette cimport IndexScreen, ScreenPalette
from fastvec.atari._resize cimport AreaResize
from fastvec.atari._stack cimport AleDriver, check_out, fill_slots, frame_ring, max_pool, pixel_t, unroll_ring

cdef extern from "fv_rgb.h":
    void fv_rgb_planes(const uint8_t* a, const uint8_t* b, Py_ssize_t n,
                       uint8_t* r, uint8_t* g, uint8_t* bl) noexcept nogil   # OUT r, g, bl [n]
    void fv_gray_planes(const uint8_t* r, const uint8_t* g, const uint8_t* b, Py_ssize_t n,
                        uint8_t* out) noexcept nogil                            # OUT [n]
    void fv_rgb_to_gray_cv(const uint8_t* a, const uint8_t* b, Py_ssize_t n,
                           uint8_t* out) noexcept nogil                         # OUT [n]

    void fv_rgb_init() noexcept nogil
    int fv_rgb_select(int on) noexcept nogil
    int fv_rgb_simd

from libc.string cimport memcpy

fv_rgb_init()


def rgb_simd(on=None):
    """Whether ``rgb_planes`` (and the core's split into planes) uses its SSSE3 loop; ``on``
    switches it (for tests: both give the same bytes; on needs an x86 CPU with SSSE3)."""
    if on is not None:
        fv_rgb_select(1 if on else 0)
    return bool(fv_rgb_simd)

# The observation: the RGB screen; ResizeObservation + GrayscaleObservation; WarpFrame.
cdef enum:
    OBS_RGB = 0
    OBS_RESIZE_GRAY = 1
    OBS_WARP = 2


cdef object _flat_bytes(object array):
    """A writable, flat uint8 view of a C-contiguous array (the kernels' byte buffer)."""
    return array.reshape(-1).view(np.uint8)


@cython.final
cdef class SB3StackCore:
    """SB3's Atari wrappers (and CleanRL's observation wrappers on them) over one ``AtariEnv``.

    Args:
        base: the ale-py ``AtariEnv`` (``env.unwrapped``), ``obs_type="rgb"``.
        inner: the env the lowest compiled wrapper wraps (the base env, or the base env under
            ``PassiveEnvChecker``/``OrderEnforcing``/``TimeLimit``): its ``reset`` is called.
        time_limit: the ``TimeLimit`` among those, or None.
        has_reset: whether a step may come before the next reset (False: ``ResetNeeded``).
        record: the ``RecordEpisodeStatistics`` on ``inner``, or None.
        noop: the ``NoopResetEnv``, or None.
        skip: the ``MaxAndSkipEnv`` (or Gymnasium's ``MaxAndSkipObservation``), or None.
        life: the ``EpisodicLifeEnv``, or None.
        fire: whether a ``FireResetEnv`` is there.
        clip: whether a ``ClipRewardEnv`` is there.
        resize: ``ResizeObservation``'s ``shape`` (height, width) when it and a
            ``GrayscaleObservation`` on it are compiled, else None (the observation is the
            RGB screen, pooled when ``skip`` is there, or ``warp``'s).
        keep_dim: ``GrayscaleObservation``'s ``keep_dim``.
        stack_size: 0 without ``FrameStackObservation``, else its ``stack_size`` (needs ``resize``).
        padding: ``"reset"``, ``"zero"`` or ``"_custom"`` (the frame stack's ``padding_type``).
        padding_value: the custom padding observation (``"_custom"``), else None.
        queue: the frame stack's current frames, oldest first, or None.
        warp: ``WarpFrame``'s (height, width) when it is compiled (and ``resize`` is None).

    Raises:
        ValueError: a buffer, shape or argument the core does not take.
    """

    cdef AleDriver _ale
    cdef object _base, _inner, _reset_needed, _grab, _lives_fn, _perf_counter
    cdef public bint has_reset
    # RecordEpisodeStatistics
    cdef object _record, _stats_key, _ep_start, _episode
    cdef double _ep_return
    cdef Py_ssize_t _ep_length
    # NoopResetEnv
    cdef object _noop
    cdef int _noop_max
    # MaxAndSkipEnv
    cdef int _skip                      # 0: no MaxAndSkipEnv
    cdef object _mbuf0, _mbuf1
    cdef pixel_t[::1] _m0, _m1
    # EpisodicLifeEnv, FireResetEnv, ClipRewardEnv
    cdef object _life
    cdef int _lives                     # EpisodicLifeEnv.lives
    cdef bint _real_done                # EpisodicLifeEnv.was_real_done
    cdef int _synced_lives
    cdef bint _synced_real_done
    cdef bint _fire, _clip
    cdef object _plus, _minus, _zero
    # observation
    cdef Py_ssize_t _screen_n           # pixels of a screen (210 x 160)
    cdef object _rgb, _planes, _small
    cdef pixel_t[::1] _rgb_bytes
    cdef pixel_t[:, :, ::1] _planes_v, _small_v
    cdef tuple _areas  # one INTER_AREA per source plane (each keeps its plane's last frame)
    # the learned palette's path (OBS_RESIZE_GRAY only; _red None: ALE's RGB screens)
    cdef ScreenPalette _red, _green, _blue
    cdef IndexScreen _indices           # the screens' palette indices
    cdef object _mplanes                # MaxAndSkipEnv's two frames as channel planes (2, 3, h, w)
    cdef pixel_t[:, :, :, ::1] _mplanes_v
    cdef bint _fresh[2]                 # _mplanes[k] holds buffer k's frame (else its RGB buffer does)
    cdef int _mode                      # OBS_*
    cdef tuple _screen_shape, _frame_shape, _stack_shape
    cdef Py_ssize_t _frame_n
    cdef readonly int stack_size
    cdef int _padding
    cdef Py_ssize_t _head
    cdef object _ring, _pad
    cdef pixel_t[::1] _ring_bytes, _pad_bytes

    def __init__(self, base, inner, time_limit, bint has_reset, record, noop, skip, life,
                 bint fire, bint clip, resize=None, bint keep_dim=False, int stack_size=0,
                 str padding="reset", padding_value=None, queue=None, warp=None):
        from time import perf_counter

        from gymnasium.error import ResetNeeded

        self._base, self._inner = base, inner
        self._ale = AleDriver(base, time_limit)
        self._reset_needed = ResetNeeded
        self._perf_counter = perf_counter
        self.has_reset = has_reset
        ale = base.ale
        self._grab = ale.getScreenRGB
        self._lives_fn = ale.lives
        height, width = ale.getScreenDims()
        self._screen_shape = (height, width, 3)
        self._screen_n = height * width
        self._rgb = np.zeros(self._screen_shape, np.uint8)
        self._rgb_bytes = _flat_bytes(self._rgb)

        self._record = record
        if record is not None:
            self._stats_key = record._stats_key
            self._ep_start = record.episode_start_time
            self._ep_return = record.episode_returns
            self._ep_length = record.episode_lengths
        self._episode = None

        self._noop = noop
        if noop is not None:
            if noop.noop_action != 0:
                raise ValueError(f"Expected NoopResetEnv's noop_action 0, got {noop.noop_action!r}")
            self._noop_max = noop.noop_max

        self._skip = 0
        if skip is not None:
            buffer = skip._obs_buffer
            shape = (2,) + self._screen_shape
            if (not isinstance(buffer, np.ndarray) or buffer.dtype != np.uint8 or buffer.shape != shape
                    or not buffer.flags.c_contiguous or not buffer.flags.writeable):
                raise ValueError(f"Expected MaxAndSkipEnv's _obs_buffer to be a writable C-contiguous uint8 "
                                 f"array of shape {shape}, got {buffer!r:.60}")
            if type(skip._skip) is not int or skip._skip < 1:
                raise ValueError(f"Expected MaxAndSkipEnv's skip to be an int >= 1, got {skip._skip!r}")
            self._skip = skip._skip
            self._mbuf0, self._mbuf1 = buffer[0], buffer[1]
            self._m0, self._m1 = _flat_bytes(self._mbuf0), _flat_bytes(self._mbuf1)

        self._life = life
        if life is not None:
            self._lives, self._real_done = life.lives, life.was_real_done
            self._synced_lives, self._synced_real_done = self._lives, self._real_done
        self._fire, self._clip = fire, clip
        # np.sign(float(reward)): a numpy float64 of -1, 0 or 1 (immutable: returned as they are)
        self._plus, self._minus, self._zero = np.sign(1.0), np.sign(-1.0), np.sign(0.0)

        if resize is not None and warp is not None:
            raise ValueError(f"Expected a resize or a warp, got both: {resize}, {warp}")
        self._mode = OBS_RESIZE_GRAY if resize is not None else OBS_WARP if warp is not None else OBS_RGB
        self._areas = ()
        self.stack_size = 0
        if self._mode != OBS_RGB:
            h, w = resize if resize is not None else warp
            self._areas = tuple(AreaResize((height, width), (h, w)) for _ in range(1 if warp is not None else 3))
            # the source: three channel planes, or WarpFrame's one gray plane (the first)
            self._planes = np.zeros((3, height, width), np.uint8)
            self._small = np.zeros((3, h, w), np.uint8)
            self._planes_v, self._small_v = self._planes, self._small
            self._frame_shape = (h, w, 1) if keep_dim or self._mode == OBS_WARP else (h, w)
            # each pixel's channels are its palette index's: learned, then looked up
            # (fastvec.atari._palette), where that applies
            self._indices = _index_screen(ale) if self._mode == OBS_RESIZE_GRAY else None
            self._red = None
            if self._indices is not None:
                self._red, self._green, self._blue = ScreenPalette(), ScreenPalette(), ScreenPalette()
                self._mplanes = np.zeros((2, 3, height, width), np.uint8)
                self._mplanes_v = self._mplanes
                self._fresh[0] = self._fresh[1] = False
            self._frame_n = h * w
            self._padding, self._ring, self._pad = frame_ring(stack_size, self._frame_shape, np.uint8, padding,
                                                              padding_value, queue)
            self.stack_size = stack_size
            if stack_size:
                self._stack_shape = (stack_size,) + self._frame_shape
                self._ring_bytes = _flat_bytes(self._ring)
                self._pad_bytes = _flat_bytes(self._pad)
                self._head = 0
        elif stack_size:
            raise ValueError("Expected no frame stack over the RGB screen (a stack needs resize), "
                             f"got stack_size={stack_size}")
        else:
            self._frame_shape = self._screen_shape

    @property
    def lives(self):
        """``EpisodicLifeEnv.lives``.

        Raises:
            AttributeError: the stack has no ``EpisodicLifeEnv``.
        """
        return self._of_life("lives", self._lives)

    @property
    def was_real_done(self):
        """``EpisodicLifeEnv.was_real_done``.

        Raises:
            AttributeError: the stack has no ``EpisodicLifeEnv``.
        """
        return self._of_life("was_real_done", self._real_done)

    cdef object _of_life(self, str name, object value):
        """``value``, EpisodicLifeEnv's attribute ``name``; AttributeError without one."""
        if self._life is None:
            raise AttributeError(f"an SB3 stack without EpisodicLifeEnv has no {name}")
        return value

    # -- RecordEpisodeStatistics over the base env -------------------------------------------

    cdef double _raw_step(self, object action, bint* terminated, bint* truncated) except? -1.0:  # OUT
        """One base-env step, counted as RecordEpisodeStatistics counts it."""
        cdef double reward = self._ale.step(action, terminated, truncated)
        self._episode = None
        if self._record is not None:
            self._ep_return += reward
            self._ep_length += 1
            if terminated[0] or truncated[0]:
                self._end_episode()
        return reward

    cdef void _end_episode(self) except *:
        """RecordEpisodeStatistics.step at an episode's end: the statistics, the queues."""
        record = self._record
        elapsed = round(self._perf_counter() - self._ep_start, 6)
        self._episode = {"r": self._ep_return, "l": self._ep_length, "t": elapsed}
        record.time_queue.append(elapsed)
        record.return_queue.append(self._ep_return)
        record.length_queue.append(self._ep_length)
        record.episode_count += 1
        self._ep_start = record.episode_start_time = self._perf_counter()

    cdef object _raw_reset(self, seed, options):
        """RecordEpisodeStatistics.reset (or the base env's): the reset info."""
        _, info = self._inner.reset(seed=seed, options=options)
        self.has_reset = True
        if self._record is not None:
            self._ep_start = self._record.episode_start_time = self._perf_counter()
            self._ep_return = 0.0
            self._ep_length = 0
        return info

    cdef object _step_info(self):
        """The last base-env step's info (with the episode statistics if it ended one)."""
        info = self._ale.info()
        if self._episode is not None:
            info[self._stats_key] = self._episode
        return info

    # -- NoopResetEnv, MaxAndSkipEnv ---------------------------------------------------------

    cdef object _noop_reset(self, seed, options, bint want_obs):
        """NoopResetEnv.reset (MaxAndSkipEnv.reset is its): the info; the screen is the obs."""
        cdef Py_ssize_t noops, i
        cdef bint terminated, truncated, stepped = False
        info = self._raw_reset(seed, options)
        if self._noop is not None:
            override = self._noop.override_num_noops
            if override is not None:
                noops = override
            else:
                noops = self._base.np_random.integers(1, self._noop_max + 1)
            if noops <= 0:
                raise AssertionError(f"Expected NoopResetEnv to take noops > 0, got {noops}")
            for i in range(noops):
                self._raw_step(0, &terminated, &truncated)
                stepped = not (terminated or truncated)
                if not stepped:
                    info = self._raw_reset(seed, options)
            if stepped:
                info = self._step_info()
        if want_obs:
            self._emit_screen()
        return info

    cdef double _skip_step(self, object action, bint want_obs, bint* terminated,
                           bint* truncated) except? -1.0:  # OUT
        """MaxAndSkipEnv.step (or a base-env step): the reward; the observation if wanted."""
        cdef int i
        cdef double reward, total = 0.0
        if self._skip == 0:
            total = self._raw_step(action, terminated, truncated)
            if want_obs:
                self._emit_screen()
            return total
        for i in range(self._skip):
            reward = self._raw_step(action, terminated, truncated)
            if i == self._skip - 2:
                self._grab_buffer(0)
            if i == self._skip - 1:
                self._grab_buffer(1)
            total += reward
            if terminated[0] or truncated[0]:
                break
        if want_obs:  # the max over the buffers, stale ones included (as MaxAndSkipEnv's)
            self._emit_pooled()
        return total

    # -- EpisodicLifeEnv, FireResetEnv -------------------------------------------------------

    cdef double _life_step(self, object action, bint want_obs, bint* terminated,
                           bint* truncated) except? -1.0:  # OUT
        """EpisodicLifeEnv.step: a life lost (to a count still above 0) ends the episode."""
        cdef int lives
        cdef double reward = self._skip_step(action, want_obs, terminated, truncated)
        if self._life is not None:
            self._real_done = terminated[0] or truncated[0]
            lives = self._lives_fn()
            if 0 < lives < self._lives:
                terminated[0] = True
            self._lives = lives
        return reward

    cdef object _life_reset(self, seed, options, bint want_obs):
        """EpisodicLifeEnv.reset: a real reset after a game over, else one noop step."""
        cdef bint terminated, truncated
        if self._life is None or self._real_done:
            info = self._noop_reset(seed, options, want_obs)
        else:
            self._skip_step(0, want_obs, &terminated, &truncated)
            if terminated or truncated:
                info = self._noop_reset(seed, options, want_obs)
            else:
                info = self._step_info()
        if self._life is not None:
            self._lives = self._lives_fn()
        return info

    cdef object _fire_reset(self, seed, options, bint want_obs):
        """FireResetEnv.reset: FIRE, then action 2, each followed by a reset if it ended; info {}."""
        cdef bint terminated, truncated
        if not self._fire:
            return self._life_reset(seed, options, want_obs)
        self._life_reset(seed, options, False)
        self._life_step(1, False, &terminated, &truncated)
        if terminated or truncated:
            self._life_reset(seed, options, False)
        self._life_step(2, want_obs, &terminated, &truncated)
        if terminated or truncated:  # (the observation stays the step's, as in FireResetEnv)
            self._life_reset(seed, options, False)
        return {}

    cdef void _sync(self) except *:
        """The wrappers' counters, written back to the wrapper objects (their readers see them)."""
        if self._record is not None:
            self._record.episode_returns = self._ep_return
            self._record.episode_lengths = self._ep_length
        if self._life is not None and (self._lives != self._synced_lives
                                       or self._real_done != self._synced_real_done):
            self._life.lives, self._life.was_real_done = self._lives, self._real_done
            self._synced_lives, self._synced_real_done = self._lives, self._real_done

    # -- observation -------------------------------------------------------------------------

    @property
    def screen_conversion(self):
        """Who converts the screens: ``"ALE"``, or ``"learned palette (<kernel>)"``."""
        return _conversion(self._red)

    cdef void _grab_planes(self, pixel_t* planes, object rgb, pixel_t* rgb_bytes) except *:  # OUT
        """The screen's three channel planes (``planes``: 3 x h x w), from the learned palette;
        where it lacks an index, ALE's RGB screen into ``rgb`` (learned from)."""
        cdef Py_ssize_t n = self._screen_n
        cdef const pixel_t* idx = self._indices.grab()
        if (self._red.map_into(idx, planes, n) and self._green.map_into(idx, planes + n, n)
                and self._blue.map_into(idx, planes + 2 * n, n)):
            return
        self._grab(rgb)
        fv_rgb_planes(rgb_bytes, NULL, n, planes, planes + n, planes + 2 * n)
        if (self._red.learn(idx, planes, n) or self._green.learn(idx, planes + n, n)
                or self._blue.learn(idx, planes + 2 * n, n)):
            self._red = None  # a level not its index's alone: ALE converts from now on

    cdef pixel_t* _buffer_bytes(self, int k) noexcept:
        """MaxAndSkipEnv's buffer ``k``'s bytes (interleaved RGB)."""
        return &self._m0[0] if k == 0 else &self._m1[0]

    cdef void _grab_buffer(self, int k) except *:
        """MaxAndSkipEnv's grab into its buffer ``k``: the RGB buffer, or the core's planes."""
        buffer = self._mbuf0 if k == 0 else self._mbuf1
        if self._red is None:
            self._grab(buffer)
            self._fresh[k] = False
        else:
            self._grab_planes(&self._mplanes_v[k, 0, 0, 0], buffer, self._buffer_bytes(k))
            self._fresh[k] = True

    cdef void _emit_screen(self) except *:
        """The current screen becomes the observation's source."""
        if self._red is not None:
            self._grab_planes(&self._planes_v[0, 0, 0], self._rgb, &self._rgb_bytes[0])
            return
        self._grab(self._rgb)
        if self._mode == OBS_RESIZE_GRAY:
            fv_rgb_planes(&self._rgb_bytes[0], NULL, self._screen_n,
                          &self._planes_v[0, 0, 0], &self._planes_v[1, 0, 0], &self._planes_v[2, 0, 0])
        elif self._mode == OBS_WARP:
            fv_rgb_to_gray_cv(&self._rgb_bytes[0], NULL, self._screen_n, &self._planes_v[0, 0, 0])

    cdef void _emit_pooled(self) noexcept:
        """MaxAndSkipEnv's max over its two buffers becomes the observation's source."""
        cdef Py_ssize_t n = self._screen_n
        cdef int k
        if self._mplanes is not None:  # the frames' planes (split from a buffer not grabbed since)
            for k in range(2):
                if not self._fresh[k]:
                    fv_rgb_planes(self._buffer_bytes(k), NULL, n, &self._mplanes_v[k, 0, 0, 0],
                                  &self._mplanes_v[k, 1, 0, 0], &self._mplanes_v[k, 2, 0, 0])
                    self._fresh[k] = True
            max_pool(&self._mplanes_v[0, 0, 0, 0], &self._mplanes_v[1, 0, 0, 0], &self._planes_v[0, 0, 0], 3 * n)
        elif self._mode == OBS_RESIZE_GRAY:
            fv_rgb_planes(&self._m0[0], &self._m1[0], self._screen_n,
                          &self._planes_v[0, 0, 0], &self._planes_v[1, 0, 0], &self._planes_v[2, 0, 0])
        elif self._mode == OBS_WARP:
            fv_rgb_to_gray_cv(&self._m0[0], &self._m1[0], self._screen_n, &self._planes_v[0, 0, 0])
        else:
            max_pool(&self._m0[0], &self._m1[0], &self._rgb_bytes[0], self._screen_n * 3)

    cdef void _frame_into(self, pixel_t* out) noexcept:
        """The resized gray frame of the source, into ``out`` [h*w]: ResizeObservation then
        GrayscaleObservation, or WarpFrame's resize of its gray plane."""
        cdef int c
        if self._mode == OBS_WARP:
            (<AreaResize>self._areas[0]).resize_into(self._planes_v[0], self._small_v[0])
            memcpy(out, &self._small_v[0, 0, 0], self._frame_n)
            return
        for c in range(3):
            (<AreaResize>self._areas[c]).resize_into(self._planes_v[c], self._small_v[c])
        fv_gray_planes(&self._small_v[0, 0, 0], &self._small_v[1, 0, 0], &self._small_v[2, 0, 0],
                       self._frame_n, out)

    cdef object _observe(self, object out, bint first):
        """The observation (after a step, or a reset when ``first``), into ``out`` or a new array."""
        cdef pixel_t[::1] o
        cdef char* ring
        cdef Py_ssize_t slot
        if self._mode == OBS_RGB:
            if out is None:
                return self._rgb.copy()
            np.copyto(out, self._rgb)
            return out
        if not self.stack_size:
            if out is None:
                out = np.empty(self._frame_shape, np.uint8)
            o = _flat_bytes(out)
            self._frame_into(&o[0])
            return out
        slot = self._frame_n
        ring = <char*>&self._ring_bytes[0]
        if first:
            self._head = self.stack_size - 1
            self._frame_into(&self._ring_bytes[self._head * slot])
            if self._padding == 0:
                fill_slots(ring, ring + self._head * slot, slot, self._head)
            else:
                fill_slots(ring, <char*>&self._pad_bytes[0], slot, self._head)
            self._head = 0
        else:
            self._frame_into(&self._ring_bytes[self._head * slot])
            self._head = (self._head + 1) % self.stack_size
        if out is None:
            out = np.empty(self._stack_shape, np.uint8)
        o = _flat_bytes(out)
        unroll_ring(ring, slot, self.stack_size, self._head, <char*>&o[0])
        return out

    cdef object _check_out(self, object out):
        """``out`` as step_into/reset_into need it, or a ValueError/TypeError saying what came."""
        return check_out(out, self._stack_shape if self.stack_size else self._frame_shape, np.uint8)

    # -- the env's step and reset -------------------------------------------------------------

    cdef object _advance(self, object action):
        """The stack's step up to its observation: (reward, terminated, truncated, info)."""
        cdef bint terminated, truncated
        cdef double reward
        if not self.has_reset:
            raise self._reset_needed("Cannot call env.step() before calling env.reset()")
        reward = self._life_step(action, True, &terminated, &truncated)
        info = self._step_info()
        self._sync()
        if self._clip:  # ClipRewardEnv: np.sign(float(reward))
            return (self._plus if reward > 0 else self._minus if reward < 0 else self._zero,
                    terminated, truncated, info)
        return reward, terminated, truncated, info

    cdef object _restart(self, seed, options):
        """The stack's reset up to its observation: the info."""
        info = self._fire_reset(seed, options, True)
        self._sync()
        return info

    def step(self, action):
        """One step of the stack: (obs, reward, terminated, truncated, info).

        Raises:
            ResetNeeded: a step before the first reset (the env had ``OrderEnforcing``).
            IndexError, TypeError: an action the env's action set cannot be indexed with.
        """
        reward, terminated, truncated, info = self._advance(action)
        return self._observe(None, False), reward, terminated, truncated, info

    def step_into(self, action, out):
        """:meth:`step`, writing the observation into ``out``: (reward, terminated, truncated, info).

        Raises:
            TypeError, ValueError: ``out`` is not a writable C-contiguous uint8 array of the
                observation's shape (checked before the step).
        """
        self._check_out(out)
        result = self._advance(action)
        self._observe(out, False)
        return result

    def reset(self, seed=None, options=None):
        """The stack's reset: (obs, info)."""
        info = self._restart(seed, options)
        return self._observe(None, True), info

    def reset_into(self, out, seed=None, options=None):
        """:meth:`reset`, writing the observation into ``out``: the info.

        Raises:
            TypeError, ValueError: as :meth:`step_into`.
        """
        self._check_out(out)
        info = self._restart(seed, options)
        self._observe(out, True)
        return info


cdef _check_image(str name, array, tuple shape):
    if not isinstance(array, np.ndarray):
        raise TypeError(f"Expected {name} to be a numpy.ndarray, got {type(array).__name__}")
    if array.dtype != np.uint8 or array.shape != shape or not array.flags.c_contiguous:
        raise ValueError(f"Expected {name} to be a C-contiguous uint8 array of shape {shape}, "
                         f"got {array.dtype} {array.shape} (c_contiguous={array.flags.c_contiguous})")


cdef _check_rgb_pair(a, b):
    """``a``, and ``b`` when given, are C-contiguous uint8 (h, w, 3) images of one shape."""
    _check_image("a", a, a.shape if isinstance(a, np.ndarray) and a.ndim == 3 and a.shape[2] == 3
                 else (-1, -1, 3))
    if b is not None:
        _check_image("b", b, a.shape)


def rgb_planes(a, b=None):
    """The three channel planes of RGB image ``a``, or of ``np.maximum(a, b)``: (3, h, w) uint8.

    Raises:
        TypeError, ValueError: ``a`` (or ``b``) is not a C-contiguous uint8 (h, w, 3) array.
    """
    _check_rgb_pair(a, b)
    out = np.empty((3,) + a.shape[:2], np.uint8)
    cdef const uint8_t[:, :, ::1] av = a
    cdef const uint8_t[:, :, ::1] bv = b if b is not None else a
    cdef uint8_t[:, :, ::1] o = out
    with nogil:
        fv_rgb_planes(&av[0, 0, 0], &bv[0, 0, 0] if b is not None else NULL, o.shape[1] * o.shape[2],
                      &o[0, 0, 0], &o[1, 0, 0], &o[2, 0, 0])
    return out


def gray_cv(a, b=None):
    """``cv2.cvtColor(a, cv2.COLOR_RGB2GRAY)`` (of ``np.maximum(a, b)`` when ``b`` is given), bit for bit.

    Raises:
        TypeError, ValueError: ``a`` (or ``b``) is not a C-contiguous uint8 (h, w, 3) array.
    """
    _check_rgb_pair(a, b)
    out = np.empty(a.shape[:2], np.uint8)
    cdef const uint8_t[:, :, ::1] av = a
    cdef const uint8_t[:, :, ::1] bv = b if b is not None else a
    cdef uint8_t[:, ::1] o = out
    with nogil:
        fv_rgb_to_gray_cv(&av[0, 0, 0], &bv[0, 0, 0] if b is not None else NULL, o.shape[0] * o.shape[1],
                          &o[0, 0])
    return out


def gray_planes(planes):
    """GrayscaleObservation of three channel planes (3, h, w): (h, w) uint8, bit for bit numpy's
    ``np.sum(np.multiply(rgb, [0.2125, 0.7154, 0.0721]), axis=-1).astype(np.uint8)``.

    Raises:
        TypeError, ValueError: ``planes`` is not a C-contiguous uint8 (3, h, w) array.
    """
    _check_image("planes", planes, (3,) + planes.shape[1:] if isinstance(planes, np.ndarray)
                 and planes.ndim == 3 else (3, -1, -1))
    out = np.empty(planes.shape[1:], np.uint8)
    cdef const uint8_t[:, :, ::1] p = planes
    cdef uint8_t[:, ::1] o = out
    with nogil:
        fv_gray_planes(&p[0, 0, 0], &p[1, 0, 0], &p[2, 0, 0], o.shape[0] * o.shape[1], &o[0, 0])
    return out
