"""fastvec.atari._resize equals cv2.resize(..., interpolation=cv2.INTER_AREA), bit for bit.

Every comparison is ``np.array_equal`` against OpenCV on the same input: random images of
several kinds (uniform bytes, near-constant with +-1 noise, 0/255 stripes, checkerboards and
binary noise, two-level images whose averages land on .5, constants, Atari-like blocks), the
screens of real ALE games max-pooled as ``AtariPreprocessing`` pools them, every kernel variant
(AVX2, SSSE3, plain C) and the three Atari sizes (84x84, 64x64, 64 high x 84 wide) plus odd
shapes. Shapes the kernel does not reproduce are refused, and bad arguments say what was
expected.
"""
from __future__ import annotations

import doctest

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from fastvec.atari import _resize  # noqa: E402
from fastvec.atari._resize import AreaResize, area_resize  # noqa: E402

SCREEN = (210, 160)
ATARI_SIZES = [(84, 84), (64, 64), (64, 84)]  # (height, width)


def _cv(src, dst_shape):
    return cv2.resize(src, (dst_shape[1], dst_shape[0]), interpolation=cv2.INTER_AREA)


_STRIPES = {}


def _stripes(shape):
    """Every 0/255 stripe image of widths 1..5 (vertical, horizontal, diagonal; both phases)."""
    if shape not in _STRIPES:
        yy, xx = np.indices(shape)
        patterns = [xx // a for a in range(1, 6)] + [yy // a for a in range(1, 6)]
        patterns += [xx // a + yy // b for a in range(1, 6) for b in range(1, 6)]
        _STRIPES[shape] = np.stack([np.where((p + phase) % 2, 255, 0).astype(np.uint8)
                                    for p in patterns for phase in (0, 1)])
    return _STRIPES[shape]


def _kinds(rng, n, shape):
    """n images of shape (uint8, (n,) + shape): kind i % 8 for image i (see the module's list)."""
    h, w = shape
    out = np.empty((n, h, w), np.uint8)
    yy, xx = np.indices((h, w))
    for kind in range(8):
        img = out[kind::8]
        m = len(img)
        if m == 0:
            continue
        def noise():  # uniform random bytes, (m, h, w)
            return np.frombuffer(rng.bytes(m * h * w), np.uint8).reshape(m, h, w)
        def levels():  # one random byte per image, (m, 1, 1)
            return np.frombuffer(rng.bytes(m), np.uint8).reshape(m, 1, 1).copy()
        if kind == 0:      # uniform bytes
            img[...] = noise()
        elif kind == 1:    # near-constant c +- 1, c in 1..254
            img[...] = noise() % 3
            img += levels() % 254  # (c - 1) + {0, 1, 2}
        elif kind == 2:    # stripes of 0/255: vertical, horizontal or diagonal, random widths and phase
            pool = _stripes(shape)
            img[...] = pool[rng.integers(0, len(pool), m)]
        elif kind == 3:    # binary noise between two random levels (odd gaps: .5 averages)
            img[...] = np.where(noise() & 1, levels(), levels())
        elif kind == 4:    # constants: 0, 255 or any
            c = levels()
            c[c % 3 == 0] = 0
            c[c % 3 == 1] = 255
            img[...] = c
        elif kind == 5:    # Atari-like: 4 random levels in blocks of random size
            blocks = []
            for _ in range(16):
                by, bx = (int(v) for v in rng.integers(1, 12, 2))
                grid = rng.integers(0, 4, (-(-h // by), -(-w // bx)), dtype=np.uint8)
                blocks.append(np.repeat(np.repeat(grid, by, 0), bx, 1)[:h, :w])
            for i in range(m):
                img[i] = np.take(rng.integers(0, 256, 4, dtype=np.uint8), blocks[i % 16])
        elif kind == 6:    # values within 2 of 0 or 255
            low = noise() % 3
            img[...] = np.where(noise() & 1, 255 - low, low)
        else:              # gradients plus small noise
            bases = []
            for _ in range(16):
                gx, gy = rng.uniform(0, 3, 2)
                bases.append(np.clip((xx * gx + yy * gy) + rng.integers(0, 50), 0, 252).astype(np.uint8))
            img[...] = np.stack(bases)[rng.integers(0, 16, m)]
            img += noise() % 4
    return out


def _check_many(rng, count, shape, dst_shape, batch=2000):
    plan = AreaResize(shape, dst_shape)
    done = 0
    while done < count:
        n = min(batch, count - done)
        images = _kinds(rng, n, shape)
        ref = np.stack([_cv(img, dst_shape) for img in images])
        out = np.empty_like(ref)
        for i in range(n):
            plan.resize(images[i], out[i])
        if not np.array_equal(ref, out):
            i = int(np.argwhere((ref != out).any(axis=(1, 2)))[0, 0])
            diff = np.argwhere(ref[i] != out[i])
            raise AssertionError(
                f"{shape} -> {dst_shape}, isa {_resize.isa()}: image {done + i} (kind {i % 8}) differs at "
                f"{len(diff)} pixels, first {tuple(diff[0])}: cv2 {ref[i][tuple(diff[0])]}, ours {out[i][tuple(diff[0])]}")
        done += n


@pytest.fixture
def best_isa():
    yield _resize.set_isa(None)
    _resize.set_isa(None)


def test_random_screens_84x84(best_isa):
    """200,000 random 210x160 screens of eight kinds -> 84x84 equal OpenCV's (fastest variant)."""
    _check_many(np.random.default_rng(84), 200_000, SCREEN, (84, 84))


@pytest.mark.parametrize("dst_shape", ATARI_SIZES)
@pytest.mark.parametrize("level", [0, 1, 2])
def test_every_variant_and_size(dst_shape, level):
    """Each kernel variant (plain C, SSSE3, AVX2; the CPU's best where it lacks one) at each Atari size."""
    try:
        _resize.set_isa(level)
        _check_many(np.random.default_rng(1000 * level + dst_shape[0] + dst_shape[1]), 4_000, SCREEN, dst_shape)
    finally:
        _resize.set_isa(None)


@pytest.mark.parametrize("shape,dst_shape", [
    ((100, 37), (33, 20)), ((57, 300), (10, 299)), ((15, 15), (4, 7)), ((210, 160), (105, 84)),
    ((250, 160), (84, 80)), ((60, 17), (1, 2)), ((3, 200), (2, 21)), ((210, 160), (210, 84)),
])
@pytest.mark.parametrize("level", [0, 1, 2])
def test_other_shapes(shape, dst_shape, level):
    """Odd shapes (narrow rows without the shuffle path, one whole-number scale, 1x1) equal OpenCV's."""
    try:
        _resize.set_isa(level)
        _check_many(np.random.default_rng(sum(shape) + sum(dst_shape)), 400, shape, dst_shape)
    finally:
        _resize.set_isa(None)


def _ale_frames(game, steps, seed):
    """AtariPreprocessing's pooled screens (max of the last two of 4 frames) and the raw grabs."""
    gym = pytest.importorskip("gymnasium")
    ale_py = pytest.importorskip("ale_py")
    gym.register_envs(ale_py)
    env = gym.make(f"ALE/{game}-v5", frameskip=1, repeat_action_probability=0.0)
    env.reset(seed=seed)
    ale = env.unwrapped.ale
    actions = env.unwrapped._action_set
    rng = np.random.default_rng(seed)
    a, b = np.empty(SCREEN, np.uint8), np.empty(SCREEN, np.uint8)
    frames = []
    for _ in range(steps):
        action = actions[int(rng.integers(len(actions)))]
        for t in range(4):
            ale.act(action)
            if t == 2:
                ale.getScreenGrayscale(b)
            elif t == 3:
                ale.getScreenGrayscale(a)
        frames.append(np.maximum(a, b))
        frames.append(a.copy())
        if ale.game_over():
            ale.reset_game()
    env.close()
    return np.stack(frames)


@pytest.mark.parametrize("game", ["Pong", "Breakout", "SpaceInvaders", "MsPacman"])
def test_ale_screens(game, best_isa):
    """Every pooled and raw screen of 750 random-action steps of an ALE game, at each Atari size."""
    frames = _ale_frames(game, 750, seed=len(game))
    assert len({frame.tobytes() for frame in frames}) > 100  # the game moved
    for dst_shape in ATARI_SIZES:
        plan = AreaResize(SCREEN, dst_shape)
        ref = np.stack([_cv(f, dst_shape) for f in frames])
        out = np.empty_like(ref)
        for i, frame in enumerate(frames):
            plan.resize(frame, out[i])
        assert np.array_equal(ref, out), (
            f"{game} -> {dst_shape}: {int((ref != out).any(axis=(1, 2)).sum())} of {len(frames)} frames differ")


def _edited_frames(rng, count, shape):
    """Frames that each differ from the one before as consecutive game frames do: in a few
    pixels (a row's first or last byte among them), not at all, or entirely."""
    frame = _kinds(rng, 1, shape)[0]
    h, w = shape
    for _ in range(count):
        kind = rng.integers(0, 10)
        frame = frame.copy()
        if kind == 0:
            frame = _kinds(rng, 1, shape)[0]
        elif kind < 8:  # (kind 8, 9: unchanged)
            for _ in range(rng.integers(1, 4)):
                y = int(rng.integers(0, h))
                x = int(rng.choice([0, w - 1, int(rng.integers(0, w))]))
                frame[y, x] ^= np.uint8(rng.integers(1, 256))
        yield frame


@pytest.mark.parametrize("shape,dst_shape", [(SCREEN, (84, 84)), (SCREEN, (64, 84)), ((100, 37), (33, 20))])
@pytest.mark.parametrize("level", [0, 1, 2])
def test_consecutive_frames_reuse_the_last_run(shape, dst_shape, level):
    """One plan over a stream of frames that differ in a few pixels, in none, or in all (the
    plan reuses the unchanged rows of its last run): every result equals OpenCV's, and each
    call writes the whole destination, a new array each time."""
    rng = np.random.default_rng(level + shape[0] + dst_shape[0])
    try:
        _resize.set_isa(level)
        plan = AreaResize(shape, dst_shape)
        for i, frame in enumerate(_edited_frames(rng, 3_000, shape)):
            out = np.full(dst_shape, 0xAB, np.uint8)
            plan.resize(frame, out)
            ref = _cv(frame, dst_shape)
            assert np.array_equal(ref, out), (
                f"frame {i}, isa {_resize.isa()}: {int((ref != out).sum())} pixels differ from OpenCV's")
    finally:
        _resize.set_isa(None)


def test_area_resize_function():
    """area_resize: returns dst, keeps one plan per shape pair (built on first use)."""
    rng = np.random.default_rng(7)
    src = rng.integers(0, 256, SCREEN, dtype=np.uint8)
    dst = np.zeros((84, 84), np.uint8)
    assert area_resize(src, dst) is dst
    assert np.array_equal(dst, _cv(src, (84, 84)))
    small = np.zeros((64, 84), np.uint8)
    assert np.array_equal(area_resize(src, small), _cv(src, (64, 84)))


@pytest.mark.parametrize("shape,dst_shape,words", [
    ((210, 160), (105, 80), "whole-number"),   # OpenCV's integer 'area fast' path
    ((210, 160), (210, 160), "whole-number"),  # OpenCV copies
    ((84, 84), (210, 160), "larger"),          # OpenCV interpolates
    ((210, 160), (220, 80), "larger"),
    ((210, 17), (1, 1), "at most 64 source rows"),  # the kernel's limit (OpenCV takes it)
])
def test_refused_shapes(shape, dst_shape, words):
    with pytest.raises(ValueError, match=words):
        AreaResize(shape, dst_shape)
    with pytest.raises(ValueError, match=words):
        area_resize(np.zeros(shape, np.uint8), np.zeros(dst_shape, np.uint8))


def test_bad_arguments():
    src, dst = np.zeros(SCREEN, np.uint8), np.zeros((84, 84), np.uint8)
    with pytest.raises(TypeError, match="numpy.ndarray, got list"):
        area_resize(src.tolist(), dst)
    with pytest.raises(TypeError, match="dtype uint8, got float32"):
        area_resize(src.astype(np.float32), dst)
    with pytest.raises(ValueError, match=r"2-D \(grayscale\) src, got shape \(210, 160, 3\)"):
        area_resize(np.zeros(SCREEN + (3,), np.uint8), dst)
    with pytest.raises(ValueError, match=r"C-contiguous src, got strides \(320, 2\)"):
        area_resize(np.zeros((210, 320), np.uint8)[:, ::2], dst)
    with pytest.raises(ValueError, match="C-contiguous dst"):
        area_resize(src, np.zeros((84, 90), np.uint8)[:, :84])
    dst.flags.writeable = False
    with pytest.raises(ValueError, match="writable dst"):
        area_resize(src, dst)
    flat = np.zeros(SCREEN[0] * SCREEN[1], np.uint8)
    with pytest.raises(ValueError, match="not to overlap"):
        area_resize(flat.reshape(SCREEN), flat[100:100 + 84 * 84].reshape(84, 84))
    plan = AreaResize(SCREEN, (84, 84))
    with pytest.raises(ValueError, match=r"src of shape \(210, 160\) and dst of shape \(84, 84\), got \(210, 160\) and \(64, 64\)"):
        plan.resize(src, np.zeros((64, 64), np.uint8))
    assert repr(plan).startswith("AreaResize((210, 160) -> (84, 84)")


def test_docstring_examples():
    """The module's examples run (AreaResize's shows the last run kept)."""
    failures, tried = doctest.testmod(_resize)
    assert tried and not failures
