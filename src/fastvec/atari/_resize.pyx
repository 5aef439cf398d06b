"""OpenCV's ``INTER_AREA`` downscale of a uint8 grayscale image, bit for bit, without OpenCV.

``area_resize(src, dst)`` writes what ``cv2.resize(src, (dst.shape[1], dst.shape[0]),
interpolation=cv2.INTER_AREA)`` returns, for 2-D uint8 images shrunk in both directions by a
scale that is not a whole number in both (OpenCV takes another path, its integer "area fast"
one, when both are whole numbers; those are refused). The Atari sizes are 210x160 -> 84x84,
-> 64x64 and -> 64 high x 84 wide.

How OpenCV computes it (``resizeArea_`` with ``WT=float``; reimplemented here, not copied):

* Per axis, a table of (destination index, source index, weight): destination cell ``d`` covers
  source ``[d*scale, d*scale + scale)`` with ``scale = 1 / (dst_size / src_size)`` (doubles);
  a partly covered pixel at either end is listed when its covered part exceeds 1e-3; weights
  are the covered lengths divided by the cell's width, rounded to float.
* Each used source row is reduced horizontally: ``buf[dx] = 0``, then ``buf[dx] += S[sx] *
  alpha`` in the table's order (float products and sums).
* Each destination row is the sum, in the table's order, of ``beta * buf`` over its source rows
  (``sum = beta * buf`` for the first, then ``sum += beta * buf``), rounded half to even
  (``cvRound``) and saturated to 0..255.

The kernel does exactly those float operations in that order for every output pixel (adding
``0 + p`` is exact, and a padding tap adds ``+0.0``, which changes nothing), so its results are
OpenCV's. It computes each used source row's horizontal sums once (OpenCV twice for a row shared
by two destination rows: the same numbers), and keeps them, with the source and the result, until
the next call: there, a source row equal to the last one's keeps its sums, and a destination row
whose source rows all did keeps its bytes (consecutive frames of a game differ in a few rows; the
numbers are the ones a full computation gives). It gathers a row's pixels with byte shuffles
(SSSE3, or AVX2 8 outputs at a time) chosen at import from the CPU; elsewhere (Windows, macOS,
non-x86, FASTVEC_NO_DISPATCH=1) a plain C loop of the same arithmetic runs. Float contraction
(a*b+c fused into one FMA, which rounds once and would change results) is switched off for
these functions.
"""
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, uint8_t
from libc.string cimport memset

import math

import numpy as np

cdef extern from "fv_area_resize.h":
    ctypedef struct fv_area_plan:
        int sw, sh, dw, dh, kx, hw, simd_ok, ky
        const int32_t* xbase
        const int32_t* xn
        const float* xw
        const int32_t* ybase
        const int32_t* yn
        const float* yw
        const int32_t* woff
        const uint8_t* masks
        const float* xwv
        int valid, valid_level
        uint8_t* last_src
        float* sums
        uint8_t* last_dst
        uint8_t* row_changed
    void fv_area_init() noexcept nogil
    int fv_area_select(int level) noexcept nogil
    const char* fv_area_isa_name(int level) noexcept nogil
    int fv_area_isa_max
    int fv_area_level
    void fv_area_run(fv_area_plan* p, const uint8_t* src, Py_ssize_t sstep,
                     uint8_t* dst, Py_ssize_t dstep) noexcept nogil

fv_area_init()

# a destination row's source rows, at most (the kernel's array of row pointers: rows[64])
_MAX_ROWS = 64


def isa():
    """The kernel variant in use: ``"avx2"``, ``"ssse3"`` or ``"plain"`` (C loops)."""
    return fv_area_isa_name(fv_area_level).decode()


def set_isa(level=None):
    """Pick the kernel variant (for tests): 0 plain C, 1 SSSE3, 2 AVX2, None the best.

    A level the CPU (or the build) lacks falls back to the best it has. Returns the name of
    the variant now in use. Every variant gives the same bytes.
    """
    fv_area_select(-1 if level is None else int(level))
    return isa()


def _area_table(ssize, dsize):
    """OpenCV's computeResizeAreaTab for one axis, cn=1: lists of (dst index, src index, weight).

    Same double arithmetic as OpenCV (Python floats are IEEE doubles), each weight rounded to
    float32 as OpenCV's ``(float)`` cast does.
    """
    scale = 1.0 / (dsize / ssize)   # OpenCV: inv_scale = (double)dsize / ssize; scale = 1. / inv_scale
    tab = []
    for d in range(dsize):
        fs1 = d * scale
        fs2 = fs1 + scale
        cell = min(scale, ssize - fs1)
        s1 = math.ceil(fs1)
        s2 = math.floor(fs2)
        s2 = min(s2, ssize - 1)
        s1 = min(s1, s2)
        if s1 - fs1 > 1e-3:
            tab.append((d, s1 - 1, np.float32((s1 - fs1) / cell)))
        for s in range(s1, s2):
            tab.append((d, s, np.float32(1.0 / cell)))
        if fs2 - s2 > 1e-3:
            tab.append((d, s2, np.float32(min(min(fs2 - s2, 1.0), cell) / cell)))
    return tab


def _taps(tab, dsize):
    """Per destination index: first source index, count, weights (a run of consecutive sources)."""
    base = np.zeros(dsize, np.int32)
    count = np.zeros(dsize, np.int32)
    weights = [[] for _ in range(dsize)]
    for d, s, w in tab:
        if not weights[d]:
            base[d] = s
        elif s != base[d] + len(weights[d]):
            raise ValueError(f"Expected consecutive source pixels per output, got {s} after "
                             f"{base[d] + len(weights[d]) - 1} for output {d}")
        weights[d].append(w)
    for d in range(dsize):
        if not weights[d]:
            raise ValueError(f"Expected every output to have source pixels, output {d} has none")
        count[d] = len(weights[d])
    k = int(count.max())
    table = np.zeros((dsize, k), np.float32)
    for d in range(dsize):
        table[d, :count[d]] = weights[d]
    return base, count, table


def _cv_round(double v):
    """OpenCV's saturate_cast<int>(double): round half to even (Python's round)."""
    return int(round(v))


def unsupported(src_shape, dst_shape):
    """Why ``area_resize`` refuses these shapes ((height, width) each), or None if it takes them."""
    (sh, sw), (dh, dw) = src_shape, dst_shape
    if min(sh, sw, dh, dw) <= 0:
        return f"empty shape: source {src_shape}, destination {dst_shape}"
    if dh > sh or dw > sw:
        return (f"destination {dst_shape} larger than source {src_shape} in a direction "
                "(OpenCV's INTER_AREA then interpolates bilinearly)")
    scale_x, scale_y = 1.0 / (dw / sw), 1.0 / (dh / sh)
    if (abs(scale_x - _cv_round(scale_x)) < np.finfo(np.float64).eps
            and abs(scale_y - _cv_round(scale_y)) < np.finfo(np.float64).eps):
        return (f"whole-number scales ({sw}/{dw}, {sh}/{dh}): OpenCV takes its integer "
                "'area fast' path (or copies, at the same size), which this kernel does not reproduce")
    return None


cdef class AreaResize:
    """OpenCV's INTER_AREA from one 2-D uint8 shape to another, bit for bit: the tables, built once.

    Args:
        src_shape: (height, width) of the source images.
        dst_shape: (height, width) of the destination (cv2's ``dsize`` is (width, height)).

    Raises:
        ValueError: shapes :func:`unsupported` refuses (upscaling in a direction, whole-number
            scales in both directions, empty), or more than 64 source rows per output row.

    ``resize(src, dst)`` (or the nogil ``resize_into`` from Cython) writes
    ``cv2.resize(src, (width, height), interpolation=cv2.INTER_AREA)`` into ``dst``. The
    object keeps its last call's source, row sums and result, and recomputes only what a new
    source changes: give each stream of frames (an env's screens, a colour plane) its own.

    Example:
        >>> import numpy as np
        >>> plan = AreaResize((210, 160), (84, 84))
        >>> screen = np.full((210, 160), 7, np.uint8)
        >>> small = plan.resize(screen, np.empty((84, 84), np.uint8))
        >>> int(small.min()), int(small.max())
        (7, 7)
        >>> screen[100:105] = 255  # five source rows change: only they are summed again
        >>> small = plan.resize(screen, np.empty((84, 84), np.uint8))
        >>> np.flatnonzero((small != 7).any(axis=1)).tolist()
        [40, 41]
    """

    def __cinit__(self, *args, **kwargs):
        self._plan = PyMem_Malloc(sizeof(fv_area_plan))
        if self._plan == NULL:
            raise MemoryError()
        memset(self._plan, 0, sizeof(fv_area_plan))

    def __dealloc__(self):
        PyMem_Free(self._plan)

    def __init__(self, src_shape, dst_shape):
        src_shape, dst_shape = tuple(int(v) for v in src_shape), tuple(int(v) for v in dst_shape)
        if len(src_shape) != 2 or len(dst_shape) != 2:
            raise ValueError(f"Expected (height, width) shapes, got source {src_shape}, destination {dst_shape}")
        why = unsupported(src_shape, dst_shape)
        if why is not None:
            raise ValueError(f"Expected an INTER_AREA downscale this kernel reproduces, got {why}")
        (sh, sw), (dh, dw) = src_shape, dst_shape
        self.src_height, self.src_width, self.dst_height, self.dst_width = sh, sw, dh, dw
        xbase, xn, xw = _taps(_area_table(sw, dw), dw)
        ybase, yn, yw = _taps(_area_table(sh, dh), dh)
        kx, ky = xw.shape[1], yw.shape[1]
        if ky > _MAX_ROWS:
            raise ValueError(f"Expected at most {_MAX_ROWS} source rows per output row, got {ky} "
                             f"({sh} -> {dh} rows)")
        hw = -(-dw // 8) * 8
        # Byte-shuffle tables: output group g (4 outputs) reads a 16-byte window at woff[g];
        # pixel k of output 4g+i goes to 32-bit lane i (byte 4i; the others zeroed by 0x80).
        groups = hw // 4
        woff = np.zeros(groups, np.int32)
        masks = np.full((hw // 8, kx, 32), 0x80, np.uint8)
        xwv = np.zeros((hw // 8, kx, 8), np.float32)
        simd_ok = sw >= 16
        for g in range(groups):
            first = int(xbase[min(4 * g, dw - 1)])
            woff[g] = max(0, min(first, sw - 16))
            for i in range(4):
                dx = 4 * g + i
                if dx >= dw:
                    continue
                for k in range(int(xn[dx])):
                    rel = int(xbase[dx]) + k - int(woff[g])
                    if not 0 <= rel < 16:
                        simd_ok = False
                        continue
                    masks[g // 2, k, 16 * (g % 2) + 4 * i] = rel
                    xwv[g // 2, k, 4 * (g % 2) + i] = xw[dx, k]
        # the last run (fv_area_run): its source, its rows' horizontal sums, its result
        last_src = np.zeros((sh, sw), np.uint8)
        sums = np.zeros((sh, hw), np.float32)
        last_dst = np.zeros((dh, hw), np.uint8)
        row_changed = np.zeros(sh, np.uint8)
        self._arrays = (xbase, xn, xw, ybase, yn, yw, woff, masks, xwv, last_src, sums, last_dst, row_changed)

        cdef fv_area_plan* p = <fv_area_plan*>self._plan
        cdef int32_t[::1] xbase_v = xbase, xn_v = xn, ybase_v = ybase, yn_v = yn, woff_v = woff
        cdef float[:, ::1] xw_v = xw, yw_v = yw
        cdef uint8_t[:, :, ::1] masks_v = masks
        cdef float[:, :, ::1] xwv_v = xwv
        cdef uint8_t[:, ::1] last_src_v = last_src, last_dst_v = last_dst
        cdef float[:, ::1] sums_v = sums
        cdef uint8_t[::1] row_changed_v = row_changed
        p.sw, p.sh, p.dw, p.dh = sw, sh, dw, dh
        p.kx, p.ky, p.hw, p.simd_ok = kx, ky, hw, simd_ok
        p.xbase, p.xn, p.xw = &xbase_v[0], &xn_v[0], &xw_v[0, 0]
        p.ybase, p.yn, p.yw = &ybase_v[0], &yn_v[0], &yw_v[0, 0]
        p.woff, p.masks, p.xwv = &woff_v[0], &masks_v[0, 0, 0], &xwv_v[0, 0, 0]
        p.valid = 0
        p.last_src, p.sums, p.last_dst = &last_src_v[0, 0], &sums_v[0, 0], &last_dst_v[0, 0]
        p.row_changed = &row_changed_v[0]

    @property
    def simd(self):
        """Whether the shuffle kernels cover these shapes (else the plain C loop runs)."""
        return bool((<fv_area_plan*>self._plan).simd_ok)

    cdef int resize_into(self, const uint8_t[:, ::1] src,
                         uint8_t[:, ::1] dst) noexcept nogil:   # OUT
        cdef fv_area_plan* p = <fv_area_plan*>self._plan
        if (src.shape[0] != p.sh or src.shape[1] != p.sw
                or dst.shape[0] != p.dh or dst.shape[1] != p.dw):
            return -1
        fv_area_run(p, &src[0, 0], src.strides[0], &dst[0, 0], dst.strides[0])
        return 0

    def resize(self, src, dst):
        """Writes INTER_AREA of ``src`` into ``dst`` (see :func:`area_resize`); returns ``dst``."""
        _check(src, dst, self.src_height, self.src_width, self.dst_height, self.dst_width)
        self.resize_into(src, dst)
        return dst

    def __repr__(self):
        return (f"AreaResize(({self.src_height}, {self.src_width}) -> "
                f"({self.dst_height}, {self.dst_width}), {isa() if self.simd else 'plain'})")


cdef _check(src, dst, int sh, int sw, int dh, int dw):
    for name, array in (("src", src), ("dst", dst)):
        if not isinstance(array, np.ndarray):
            raise TypeError(f"Expected {name} to be a numpy.ndarray, got {type(array).__name__}")
        if array.dtype != np.uint8:
            raise TypeError(f"Expected {name} of dtype uint8, got {array.dtype}")
        if array.ndim != 2:
            raise ValueError(f"Expected a 2-D (grayscale) {name}, got shape {array.shape}")
        if not array.flags.c_contiguous:
            raise ValueError(f"Expected a C-contiguous {name}, got strides {array.strides} for shape {array.shape}")
    if not dst.flags.writeable:
        raise ValueError("Expected a writable dst, got a read-only array")
    if sh >= 0 and (src.shape != (sh, sw) or dst.shape != (dh, dw)):
        raise ValueError(f"Expected src of shape {(sh, sw)} and dst of shape {(dh, dw)}, "
                         f"got {src.shape} and {dst.shape}")
    if np.may_share_memory(src, dst):
        raise ValueError("Expected dst not to overlap src, got overlapping arrays")


def _time_kernel(AreaResize plan, const uint8_t[:, ::1] src, uint8_t[:, ::1] dst, long n):
    """Seconds per call of ``n`` back-to-back nogil kernel calls (no Python in the loop): benches."""
    from time import perf_counter
    cdef long i
    t = perf_counter()
    with nogil:
        for i in range(n):
            plan.resize_into(src, dst)
    return (perf_counter() - t) / n


_plans = {}


def area_resize(src, dst):
    """``dst[...] = cv2.resize(src, (dst.shape[1], dst.shape[0]), interpolation=cv2.INTER_AREA)``.

    Bit for bit OpenCV's result (its float ``resizeArea_`` path), for C-contiguous 2-D uint8
    arrays, ``dst`` no larger than ``src`` in either direction and the scales not
    both whole numbers. The tables of each shape pair are built once and kept.

    Args:
        src: the source image, uint8 (height, width).
        dst: where the result goes, uint8 (height, width), writable.

    Returns:
        ``dst``.

    Raises:
        TypeError: ``src`` or ``dst`` not a uint8 numpy array.
        ValueError: not 2-D or not C-contiguous, ``dst`` read-only or overlapping ``src``,
            or shapes the kernel does not reproduce (see :func:`unsupported`).
    """
    _check(src, dst, -1, -1, -1, -1)
    key = (src.shape, dst.shape)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = AreaResize(src.shape, dst.shape)
    (<AreaResize>plan).resize_into(src, dst)
    return dst
