"""fastvec.atari._palette: a screen's palette indices to ALE's levels, from a learned table.

Every kernel variant (plain C, AVX2, AVX-512 VBMI on 256- and 512-bit vectors; the CPU's best
where it lacks one) is compared with NumPy's table lookup on random tables and screens (every
count of learned 16-index chunks, lengths around the vector widths), and the whole path with
ALE's own ``getScreenGrayscale`` on the screens of several games.
"""
from __future__ import annotations

import doctest

import numpy as np
import pytest

from fastvec.atari import _palette
from fastvec.atari._palette import ScreenPalette
from helpers import palette_kernel

LEVELS = [0, 1, 2, 3]
LENGTHS = [0, 1, 15, 31, 32, 33, 63, 64, 65, 1000, 33_600, 33_607]


@pytest.fixture(params=LEVELS)
def level(request):
    with palette_kernel(request.param) as name:
        yield name


def _random_table(rng, n_known):
    """(indices learned, their levels): n_known distinct indices, random levels."""
    known = rng.choice(256, size=n_known, replace=False)
    return known, rng.integers(0, 256, size=256, dtype=np.uint8)


def _learned(known, levels):
    palette = ScreenPalette()
    if len(known):
        indices = np.asarray(known, np.uint8)
        assert palette.learn_screen(indices, levels[indices])
    assert palette.learned == sorted(int(k) for k in known)
    return palette


@pytest.mark.parametrize("n_known", [0, 1, 5, 9, 16, 40, 128, 255, 256])
def test_every_variant_equals_a_table_lookup(level, n_known):
    """Screens of learned indices convert to levels[idx]; one unlearned index makes it incomplete."""
    rng = np.random.default_rng(n_known)
    for trial in range(6):
        known, levels = _random_table(rng, n_known)
        palette = _learned(known, levels)
        unknown = np.setdiff1d(np.arange(256), known).astype(np.uint8)
        for n in LENGTHS:
            if n_known:
                screen = rng.choice(np.asarray(known, np.uint8), size=n)
                out, complete = palette.levels(screen)
                assert complete, (level, n_known, n)
                assert np.array_equal(out, levels[screen]), (
                    f"{level}: {n_known} learned, {n} pixels: {np.count_nonzero(out != levels[screen])} differ, "
                    f"first at {np.argwhere(out != levels[screen])[0]}")
            if len(unknown) and n:
                # one unlearned index anywhere (first, last, in a vector's tail) is seen
                at = int(rng.integers(n)) if trial else n - 1
                screen = rng.choice(np.asarray(known, np.uint8), size=n) if n_known else np.zeros(n, np.uint8)
                screen[at] = rng.choice(unknown)
                assert not palette.levels(screen)[1], (level, n_known, n, at)


def test_learning_and_contradictions():
    palette = ScreenPalette()
    screen = np.array([[6, 6, 200], [0, 6, 14]], np.uint8)
    levels = np.array([[10, 10, 90], [0, 10, 33]], np.uint8)
    assert palette.learn_screen(screen, levels) and palette.consistent
    assert palette.learned == [0, 6, 14, 200]
    out, complete = palette.levels(screen)
    assert complete and np.array_equal(out, levels)
    misses = palette.misses
    assert not palette.levels(np.array([7], np.uint8))[1]
    assert palette.misses == misses + 1
    # an index seen with another level: refused, the table unchanged and no longer to be used
    assert not palette.learn_screen(np.array([6, 8], np.uint8), np.array([11, 5], np.uint8))
    assert not palette.consistent
    assert palette.learned == [0, 6, 14, 200]
    # within one screen too
    other = ScreenPalette()
    assert not other.learn_screen(np.array([3, 3], np.uint8), np.array([1, 2], np.uint8))
    assert other.learned == [] and not other.consistent


def test_bad_input_raises():
    palette = ScreenPalette()
    with pytest.raises(TypeError, match="C-contiguous uint8"):
        palette.levels(np.zeros(4, np.int32))
    with pytest.raises(TypeError, match="C-contiguous uint8"):
        palette.levels(np.zeros((4, 4), np.uint8)[:, ::2])
    with pytest.raises(TypeError, match="C-contiguous uint8"):
        palette.learn_screen([1, 2], np.zeros(2, np.uint8))
    with pytest.raises(ValueError, match="shape"):
        palette.learn_screen(np.zeros(3, np.uint8), np.zeros(4, np.uint8))


def test_isa_selection():
    try:
        assert _palette.set_isa(0) == "plain" and not _palette.faster_than_ale()
        best = _palette.set_isa(None)
        assert best in ("plain", "avx2", "avx512vbmi", "avx512vbmi-512")
        assert _palette.faster_than_ale() == (best != "plain")
        assert _palette.set_isa(99) == best  # a level the CPU lacks: its best
    finally:
        _palette.set_isa(None)


@pytest.mark.parametrize("game", ["Pong", "Breakout", "SpaceInvaders", "MsPacman", "Qbert"])
def test_ale_screens(game, level):
    """Learned from ALE's first screens, the palette converts the later ones as ALE does."""
    gym = pytest.importorskip("gymnasium")
    ale_py = pytest.importorskip("ale_py")
    gym.register_envs(ale_py)
    env = gym.make(f"ALE/{game}-v5", frameskip=1)
    env.reset(seed=len(game))
    ale = env.unwrapped.ale
    actions = env.unwrapped._action_set
    rng = np.random.default_rng(len(game))
    palette = ScreenPalette()
    indices, levels = np.empty((210, 160), np.uint8), np.empty((210, 160), np.uint8)
    converted = 0
    for t in range(1500):
        ale.act(actions[int(rng.integers(len(actions)))])
        if ale.game_over():
            ale.reset_game()
        ale.getScreen(indices)
        ale.getScreenGrayscale(levels)
        out, complete = palette.levels(indices)
        if complete:
            converted += 1
            assert np.array_equal(out, levels), f"{game}, frame {t}: {np.count_nonzero(out != levels)} pixels differ"
        else:
            assert palette.learn_screen(indices, levels), f"{game}, frame {t}: a level is not its index's alone"
    env.close()
    assert converted > 1300, converted  # Qbert's levels bring new colours: 1,384 here


def test_docstring_examples():
    assert doctest.testmod(_palette, raise_on_error=True).attempted > 0
