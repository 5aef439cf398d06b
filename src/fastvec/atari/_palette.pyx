"""ALE's palette conversion, from a table learned off ALE: a screen's indices to its levels.

ALE's ``getScreenGrayscale`` converts the screen that ``getScreen`` returns as palette indices,
pixel by pixel: each level depends on that pixel's index alone. A :class:`ScreenPalette`
starts empty, learns (index, level) pairs from screens ALE converted, and converts a screen
whose indices it has all learned itself (``fv_palette.h``: a few vector table lookups per 32
pixels, where ALE's loop looks each pixel up in turn; ``docs/atari.md`` has the timings).
fastvec contains no palette (ALE is GPL-2.0): every level comes from the installed ALE.

Example:
    >>> import numpy as np
    >>> from fastvec.atari._palette import ScreenPalette
    >>> palette = ScreenPalette()
    >>> screen = np.array([[0, 14], [200, 14]], np.uint8)    # indices, as ale.getScreen gives
    >>> palette.levels(screen)[1]                           # nothing learned yet
    False
    >>> palette.learn_screen(screen, np.array([[0, 52], [170, 52]], np.uint8))
    True
    >>> out, complete = palette.levels(np.array([14, 200, 0], np.uint8))
    >>> out.tolist(), complete
    ([52, 170, 0], True)
"""
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport uint8_t

import numpy as np

cdef extern from "fv_palette.h":
    ctypedef struct fv_palette:
        uint8_t known[256]
    void fv_palette_init_isa() noexcept nogil
    int fv_palette_select(int level) noexcept nogil
    const char* fv_palette_isa_name(int level) noexcept nogil
    int fv_palette_isa_max
    int fv_palette_level
    void fv_palette_clear(fv_palette* p) noexcept nogil
    int fv_palette_learn(fv_palette* p, const uint8_t* idx, const uint8_t* levels, size_t n) noexcept nogil
    int fv_palette_map(const fv_palette* p, const uint8_t* idx, uint8_t* out, size_t n) noexcept nogil

fv_palette_init_isa()


def isa():
    """The kernel variant in use: ``"avx512vbmi-512"``, ``"avx512vbmi"``, ``"avx2"`` or ``"plain"``
    (a C loop)."""
    return fv_palette_isa_name(fv_palette_level).decode()


def set_isa(level=None):
    """Pick the kernel variant (for tests): 0 plain C, 1 AVX2, 2 AVX-512 VBMI on 256-bit vectors,
    3 the same on 512-bit vectors (AMD CPUs only), None the best.

    A level the CPU (or the build) lacks falls back to the best it has. Returns the name of the
    variant now in use. Every variant gives the same bytes.
    """
    fv_palette_select(-1 if level is None else int(level))
    return isa()


def faster_than_ale():
    """Whether the kernel in use beats ALE's own conversion loop (a vector kernel; the plain C
    loop runs about as fast as ALE's, so callers leave the conversion to ALE then)."""
    return fv_palette_level >= 1


def index_screen(ale):
    """An :class:`IndexScreen` of ``ale`` when its screens are to come from learned palettes,
    else None (ALE converts them): where the kernel in use beats ALE's loop, and ALE's colour
    averaging is off (it blends frames, so a pixel's level would not be its index's alone)."""
    if not faster_than_ale() or ale.getBool("color_averaging"):
        return None
    return IndexScreen(ale)


def conversion(palette):
    """Who converts a compiled env's screens, given its palette (None: ALE), as ``compiled_atari``
    says it: ``"ALE"``, or ``"learned palette (<kernel>)"``."""
    return "ALE" if palette is None else f"learned palette ({isa()})"


cdef const uint8_t[::1] _flat(object array, str what):
    if not isinstance(array, np.ndarray) or array.dtype != np.uint8 or not array.flags.c_contiguous:
        raise TypeError(f"Expected {what} as a C-contiguous uint8 numpy array, got {array!r:.60}")
    return array.reshape(-1)


cdef class IndexScreen:
    """An ALE's screens as palette indices, grabbed into a buffer of its own.

    Args:
        ale: the ``ALEInterface`` (its ``getScreen`` and ``getScreenDims`` are used).
    """

    def __init__(self, ale):
        self._get_screen = ale.getScreen
        self._buffer = np.zeros(tuple(ale.getScreenDims()), np.uint8)
        self._bytes = self._buffer.reshape(-1)

    cdef const uint8_t* grab(self) except NULL:
        self._get_screen(self._buffer)
        return &self._bytes[0]


cdef class ScreenPalette:
    """An ALE palette's levels, learned from screens ALE converted (see the module's docstring).

    ``consistent`` turns False (and stays) if a learned pair contradicts an earlier one: the
    levels would then not be a function of the index, and callers stop using the table.
    ``misses`` counts the screens :meth:`levels` could not convert (an index not learned).
    """

    def __cinit__(self):
        self._table = PyMem_Malloc(sizeof(fv_palette))
        if self._table is NULL:
            raise MemoryError()
        fv_palette_clear(<fv_palette*>self._table)
        self.consistent = True
        self.misses = 0

    def __dealloc__(self):
        PyMem_Free(self._table)

    cdef int map_into(self, const uint8_t* idx, uint8_t* out, Py_ssize_t n) noexcept nogil:  # OUT
        if fv_palette_map(<const fv_palette*>self._table, idx, out, <size_t>n):
            return 1
        self.misses += 1
        return 0

    cdef int learn(self, const uint8_t* idx, const uint8_t* levels, Py_ssize_t n) noexcept nogil:
        if fv_palette_learn(<fv_palette*>self._table, idx, levels, <size_t>n) == 0:
            return 0
        self.consistent = False
        return -1

    def levels(self, screen):
        """The levels of ``screen``'s indices: (a new uint8 array of its shape, complete).

        ``complete`` is False when an index has not been learned (the array is not ALE's then).

        Raises:
            TypeError: ``screen`` is not a C-contiguous uint8 array.
        """
        cdef const uint8_t[::1] idx = _flat(screen, "a screen of palette indices")
        out = np.empty(screen.shape, np.uint8)
        cdef uint8_t[::1] o = out.reshape(-1)
        if idx.shape[0] == 0:
            return out, True
        return out, bool(self.map_into(&idx[0], &o[0], idx.shape[0]))

    def learn_screen(self, screen, levels):
        """Learns ALE's conversion of ``screen`` (indices) to ``levels``; False on a contradiction.

        Raises:
            TypeError: either is not a C-contiguous uint8 array.
            ValueError: their shapes differ.
        """
        cdef const uint8_t[::1] idx = _flat(screen, "a screen of palette indices")
        cdef const uint8_t[::1] lev = _flat(levels, "the screen's levels")
        if screen.shape != levels.shape:
            raise ValueError(f"Expected levels of the screen's shape {screen.shape}, got {levels.shape}")
        if idx.shape[0] == 0:
            return True
        return self.learn(&idx[0], &lev[0], idx.shape[0]) == 0

    @property
    def learned(self):
        """The learned indices, as a sorted list."""
        return [i for i in range(256) if (<fv_palette*>self._table).known[i]]
