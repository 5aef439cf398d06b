"""Recognising an Atari wrapper stack (Gymnasium's, or SB3's / CleanRL's) in a built env, and compiling it."""
from __future__ import annotations

import functools
import sys

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import (
    AtariPreprocessing,
    FrameStackObservation,
    GrayscaleObservation,
    MaxAndSkipObservation,
    OrderEnforcing,
    PassiveEnvChecker,
    RecordEpisodeStatistics,
    ResizeObservation,
    TimeLimit,
)

from fastvec.atari._resize import unsupported as _area_unsupported
from fastvec.atari._sb3 import SB3StackCore
from fastvec.atari._sb3 import gray_cv as _gray_cv
from fastvec.atari._stack import AtariStackCore
from fastvec.atari.env import CompiledAtariEnv

__all__ = ["compile_stack"]

# The attributes of Gymnasium's wrappers the compiled stack reads or keeps up to date.
_STATE = {
    AtariPreprocessing: ("obs_buffer", "lives", "game_over", "noop_max", "frame_skip", "screen_size",
                         "terminal_on_life_loss", "grayscale_obs", "grayscale_newaxis", "scale_obs"),
    FrameStackObservation: ("obs_queue", "padding_value", "padding_type", "stack_size"),
    OrderEnforcing: ("_has_reset",),
    TimeLimit: ("_elapsed_steps", "_max_episode_steps"),
    RecordEpisodeStatistics: ("_stats_key", "episode_count", "episode_start_time", "episode_returns",
                              "episode_lengths", "time_queue", "return_queue", "length_queue"),
    ResizeObservation: ("shape",),
    GrayscaleObservation: ("keep_dim",),
}

# Wrappers that may stand between AtariPreprocessing and the AtariEnv (what gym.make adds): the
# compiled stack does what they do (OrderEnforcing's check, TimeLimit's count; PassiveEnvChecker
# only checks the env's first reset and step, which the compiled reset still goes through).
_TRANSPARENT = (PassiveEnvChecker, OrderEnforcing, TimeLimit)


def _atari_env_type() -> type | None:
    try:
        from ale_py.env import AtariEnv
    except ImportError:  # ale-py not installed: nothing to recognise
        return None
    return AtariEnv


def _arguments(ap: AtariPreprocessing) -> str:
    return (f"AtariPreprocessing(noop_max={ap.noop_max}, frame_skip={ap.frame_skip}, "
            f"screen_size={ap.screen_size}, terminal_on_life_loss={ap.terminal_on_life_loss}, "
            f"grayscale_obs={ap.grayscale_obs}, grayscale_newaxis={ap.grayscale_newaxis}, "
            f"scale_obs={ap.scale_obs})")


def _unsupported_base(base: gym.Env) -> str | None:
    """Why this AtariEnv is not compiled under any stack, or None."""
    for name in ("_frameskip", "_action_set", "_obs_type", "continuous", "ale"):
        if not hasattr(base, name):
            return f"this ale-py's AtariEnv has no {name!r} (an ale-py this version of fastvec does not know)"
    if base.continuous:
        return "an AtariEnv with continuous=True is not compiled (its actions map through map_action_idx)"
    if getattr(base, "sound_obs", False):
        return "an AtariEnv with sound_obs=True is not compiled"
    skip = base._frameskip
    if not (type(skip) is int and skip > 0) and not (
            type(skip) is tuple and len(skip) == 2 and all(type(s) is int for s in skip) and 0 < skip[0] < skip[1]):
        return f"an AtariEnv with frameskip={skip!r} is not compiled (an int > 0 or a (low, high) tuple expected)"
    return None


def _unsupported(ap: AtariPreprocessing, base: gym.Env) -> str | None:
    """Why this AtariPreprocessing over this AtariEnv is not compiled, or None."""
    reason = _unsupported_base(base)
    if reason is not None:
        return reason
    if base._obs_type not in ("rgb", "grayscale"):
        return f"an AtariEnv with obs_type={base._obs_type!r} is not compiled (AtariPreprocessing grabs the screen)"
    if base._obs_type == "grayscale" and not ap.grayscale_obs:
        return ("AtariPreprocessing(grayscale_obs=False) over an AtariEnv with obs_type='grayscale' is not "
                "compiled (its RGB grab does not fit the grayscale buffers)")
    skip = base._frameskip
    if type(ap.frame_skip) is not int or ap.frame_skip < 1:
        return f"AtariPreprocessing(frame_skip={ap.frame_skip!r}) is not compiled (a positive int expected)"
    if ap.frame_skip > 1 and skip != 1:
        return (f"AtariPreprocessing(frame_skip={ap.frame_skip}) over a base env with frameskip={skip!r} is not "
                "compiled: AtariPreprocessing refuses it (it would skip frames twice)")
    if type(ap.noop_max) is not int or ap.noop_max < 0:
        return f"AtariPreprocessing(noop_max={ap.noop_max!r}) is not compiled (an int >= 0 expected)"
    size = ap.screen_size
    if not (isinstance(size, tuple) and len(size) == 2 and all(type(s) is int and s > 0 for s in size)):
        return f"AtariPreprocessing(screen_size={size!r}) is not compiled (two positive ints expected)"
    return None


def compile_stack(env: gym.Env) -> tuple[gym.Env, str | None]:
    """Replaces the Atari wrapper stack at the bottom of ``env`` by one compiled env.

    Two stacks are recognised over ale-py's ``AtariEnv`` (as ``gym.make`` builds it:
    ``PassiveEnvChecker``, ``OrderEnforcing`` and a ``TimeLimit`` may wrap it), innermost first:

    * Gymnasium's: ``AtariPreprocessing`` (any of its arguments; ``frame_skip > 1`` needs the
      base env's ``frameskip=1``, as the wrapper itself demands), and optionally a
      ``FrameStackObservation`` directly on it (any ``stack_size`` and ``padding_type``).
    * SB3's / CleanRL's (``obs_type="rgb"``): Gymnasium's ``RecordEpisodeStatistics``, SB3's
      ``NoopResetEnv`` (``noop_max > 0`` or ``override_num_noops``), ``MaxAndSkipEnv`` (any
      ``skip``; or Gymnasium's ``MaxAndSkipObservation``, which does the same),
      ``EpisodicLifeEnv``, ``FireResetEnv``, each optional but in this order (at least one of
      the four), then one SB3 ``ClipRewardEnv`` anywhere above those,
      Gymnasium's ``ResizeObservation`` (a size the INTER_AREA kernel reproduces: 84x84,
      64x64, 84x64, ...) with a ``GrayscaleObservation`` (either ``keep_dim``) on it, or SB3's
      ``WarpFrame`` (such a size; SB3's ``AtariWrapper`` is these SB3 wrappers), and a
      ``FrameStackObservation`` on that. The longest run of those from the bottom is compiled;
      the first wrapper that does not fit, and every one above it, stays Python.

    That part becomes one :class:`~fastvec.atari.env.CompiledAtariEnv` over the same
    ``AtariEnv``, identical in its outputs (observations, rewards, terminated/truncated, infos,
    noop draws, seeding; ``RecordEpisodeStatistics``' ``episode["t"]`` is timed by
    ``time.perf_counter`` at the same points as the wrapper times it); every wrapper above it
    is kept and re-pointed at it. The compiled env, and the returned env, carry a
    ``compiled_atari`` attribute saying what was compiled. An env compiled already is returned
    as it is, with no reason.

    Anything else is returned unchanged, with the reason it was not compiled.

    Args:
        env: an env as the user's ``make_env`` lambda returns it.

    Returns:
        ``(env, None)``: the env with its Atari stack compiled (the same outermost wrapper object,
        or the compiled env itself when nothing wraps the stack); or ``(env, reason)``: the env
        unchanged and a one-line reason.

    Raises:
        TypeError: ``env`` is not a ``gymnasium.Env``.

    Example:
        >>> import gymnasium as gym
        >>> import ale_py
        >>> from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, RecordEpisodeStatistics
        >>> from fastvec.atari import compile_stack
        >>> gym.register_envs(ale_py)
        >>> env = gym.make("ALE/Breakout-v5", frameskip=1)
        >>> env = RecordEpisodeStatistics(FrameStackObservation(AtariPreprocessing(env), 4))
        >>> env, reason = compile_stack(env)
        >>> reason is None, type(env.env).__name__
        (True, 'CompiledAtariEnv')
        >>> env.compiled_atari[:60]
        'AtariPreprocessing(noop_max=30, frame_skip=4, screen_size=(8'
        >>> obs, info = env.reset(seed=1)
        >>> obs.shape
        (4, 84, 84)
        >>> _, reason = compile_stack(AtariPreprocessing(gym.make("ALE/Breakout-v5", frameskip=1, obs_type="ram")))
        >>> reason
        "an AtariEnv with obs_type='ram' is not compiled (AtariPreprocessing grabs the screen)"

        CleanRL's stack (SB3's wrappers):

        >>> from gymnasium.wrappers import GrayscaleObservation, ResizeObservation
        >>> from stable_baselines3.common.atari_wrappers import (
        ...     ClipRewardEnv, EpisodicLifeEnv, FireResetEnv, MaxAndSkipEnv, NoopResetEnv)
        >>> env = RecordEpisodeStatistics(gym.make("BreakoutNoFrameskip-v4"))
        >>> env = FireResetEnv(EpisodicLifeEnv(MaxAndSkipEnv(NoopResetEnv(env, noop_max=30), skip=4)))
        >>> env = GrayscaleObservation(ResizeObservation(ClipRewardEnv(env), (84, 84)))
        >>> env, reason = compile_stack(FrameStackObservation(env, 4))
        >>> print(env.compiled_atari)  # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
        RecordEpisodeStatistics + NoopResetEnv(noop_max=30) + MaxAndSkipEnv(skip=4) + EpisodicLifeEnv +
        FireResetEnv + ClipRewardEnv + ResizeObservation(shape=(84, 84)) + GrayscaleObservation(keep_dim=False)
        + FrameStackObservation(stack_size=4, padding_type='reset') over BreakoutNoFrameskip-v4 (frameskip=1):
        compiled by fastvec.atari; screens converted by ...
        >>> obs, info = env.reset(seed=1)
        >>> obs.shape, info
        ((4, 84, 84), {})
    """
    if not isinstance(env, gym.Env):
        raise TypeError(f"Expected a gymnasium.Env, got {type(env).__name__}: {env!r:.80}")
    chain: list[gym.Wrapper] = []  # outermost first
    inner = env
    while isinstance(inner, gym.Wrapper):
        chain.append(inner)
        inner = inner.env
    base = inner
    if isinstance(base, CompiledAtariEnv):
        return env, None  # compiled already
    atari_env = _atari_env_type()
    if atari_env is None:
        return env, "ale-py is not installed: no AtariEnv to compile"
    if type(base) is not atari_env:
        kind = "a subclass of ale_py's AtariEnv" if isinstance(base, atari_env) else "not ale_py's AtariEnv"
        return env, f"the innermost env is {type(base).__name__}, {kind}: nothing compiled"

    i = len(chain) - 1
    while i >= 0 and type(chain[i]) in _TRANSPARENT:
        i -= 1
    if i < 0:
        return env, "no AtariPreprocessing over the AtariEnv: nothing compiled"
    lowest = chain[i]
    if _sb3_kind(lowest) is not None or _kind(lowest) in _LOGIC:
        return _compile_sb3(env, chain, i, base)
    if type(lowest) is not AtariPreprocessing:
        what = ("a subclass of AtariPreprocessing" if isinstance(lowest, AtariPreprocessing)
                else "not AtariPreprocessing")
        return env, (f"{type(lowest).__name__} directly over the AtariEnv's wrappers is {what}: nothing compiled "
                     "(fastvec compiles AtariPreprocessing, then FrameStackObservation, or SB3's Atari "
                     "wrappers, over the AtariEnv)")
    return _compile_preprocessing(env, chain, i, base)


def _check_under(chain: list[gym.Wrapper], i: int, above: list[gym.Wrapper],
                 what: str) -> tuple[TimeLimit | None, str | None]:
    """The wrappers under chain[i] (and those compiled with it): the TimeLimit, or why not compiled."""
    under = chain[i + 1:]
    for wrapper in [*above, *under]:
        missing = [name for name in _STATE.get(type(wrapper), ()) if not hasattr(wrapper, name)]
        if missing:
            return None, (f"this {_library(wrapper)}'s {type(wrapper).__name__} has no {missing[0]!r} (a "
                          f"{_library(wrapper)} this version of fastvec does not know): nothing compiled")
    limits = [w for w in under if type(w) is TimeLimit]
    if len(limits) > 1:
        return None, f"more than one TimeLimit under {what} is not compiled"
    return (limits[0] if limits else None), None


def _library(wrapper: gym.Wrapper) -> str:
    return "Stable-Baselines3" if type(wrapper).__module__ == _SB3_MODULE else "Gymnasium"


def _replace(env: gym.Env, chain: list[gym.Wrapper], top_index: int,
             compiled: CompiledAtariEnv) -> tuple[gym.Env, None]:
    """Puts ``compiled`` in place of chain[top_index] and the wrappers under it."""
    if top_index == 0:
        return compiled, None
    chain[top_index - 1].env = compiled
    try:  # visible on the result itself too (a wrapper does not forward attribute reads)
        env.compiled_atari = compiled.compiled_atari
    except AttributeError:
        pass
    return env, None


def _over(base: gym.Env, core: AtariStackCore | SB3StackCore) -> str:
    """The end of a compiled stack's description: the base env, and who converts its screens."""
    spec_id = base.spec.id if base.spec is not None else f"AtariEnv({base._game!r})"
    return (f" over {spec_id} (frameskip={base._frameskip!r}): compiled by fastvec.atari; "
            f"screens converted by {core.screen_conversion}")


def _frame_stack(fs: FrameStackObservation) -> tuple[int, str, object, object, str] | None:
    """(stack_size, padding, padding_value, queue, description) of a frame stack compiled, or None."""
    if fs.padding_type not in ("reset", "zero", "_custom"):
        return None
    padding = fs.padding_type
    shown = "custom" if padding == "_custom" else repr(padding)
    return (int(fs.stack_size), padding, fs.padding_value if padding == "_custom" else None, fs.obs_queue,
            f"FrameStackObservation(stack_size={int(fs.stack_size)}, padding_type={shown})")


def _compile_preprocessing(env: gym.Env, chain: list[gym.Wrapper], i: int,
                           base: gym.Env) -> tuple[gym.Env, str | None]:
    """Gymnasium's AtariPreprocessing at chain[i] (+ a FrameStackObservation directly on it)."""
    ap = chain[i]
    under = chain[i + 1:]
    limit, reason = _check_under(chain, i, [ap, *chain[i - 1:i]], "AtariPreprocessing")
    if reason is not None:
        return env, reason
    reason = _unsupported(ap, base)
    if reason is not None:
        return env, reason

    top_index = i
    stack_size, padding, padding_value, queue = 0, "reset", None, None
    names = "AtariPreprocessing"
    description = _arguments(ap)
    if i > 0 and type(chain[i - 1]) is FrameStackObservation:
        stacked = _frame_stack(chain[i - 1])
        if stacked is not None:
            top_index = i - 1
            stack_size, padding, padding_value, queue, shown = stacked
            names += "+FrameStackObservation"
            description += " + " + shown

    try:
        core = AtariStackCore(
            base, ap.env, limit,
            all(w._has_reset for w in under if type(w) is OrderEnforcing),
            ap.obs_buffer, ap.frame_skip, ap.noop_max, ap.screen_size, ap.terminal_on_life_loss,
            ap.grayscale_obs, ap.grayscale_newaxis, ap.scale_obs, ap.lives, ap.game_over,
            stack_size, padding, padding_value, queue,
        )
    except (ValueError, TypeError) as e:
        return env, f"{names} not compiled: {e}"
    description += _over(base, core)
    return _replace(env, chain, top_index, CompiledAtariEnv(core, chain[top_index], ap.env, description, names))


# SB3's Atari wrappers are known by their class in the already imported module (importing
# stable_baselines3 here would import torch into every worker).
_SB3_MODULE = "stable_baselines3.common.atari_wrappers"

# The wrappers under the observation wrappers, in the only order compiled (each optional).
_LOGIC = ("RecordEpisodeStatistics", "NoopResetEnv", "MaxAndSkipEnv", "EpisodicLifeEnv", "FireResetEnv")


def _sb3_kind(wrapper: gym.Env) -> str | None:
    """The name of SB3's Atari wrapper ``wrapper`` is exactly (not a subclass), or None."""
    module = sys.modules.get(_SB3_MODULE)
    if module is None:
        return None
    for name in ("NoopResetEnv", "MaxAndSkipEnv", "EpisodicLifeEnv", "FireResetEnv", "ClipRewardEnv",
                 "WarpFrame", "StickyActionEnv", "AtariWrapper"):
        if type(wrapper) is getattr(module, name, None):
            return name
    return None


def _kind(wrapper: gym.Env) -> str:
    """The part of the SB3 stack ``wrapper`` is (its class's name), or ""."""
    if type(wrapper) in (RecordEpisodeStatistics, ResizeObservation, GrayscaleObservation, FrameStackObservation):
        return type(wrapper).__name__
    if type(wrapper) is MaxAndSkipObservation:
        # Gymnasium's port of SB3's MaxAndSkipEnv does the same, step for step: `skip` base
        # steps (stopping at an episode's end), the float sum of their rewards, the last two
        # observations kept in `_obs_buffer` and their maximum returned; no reset of its own.
        return "MaxAndSkipEnv"
    return _sb3_kind(wrapper) or ""


def _sb3_arguments(kind: str, wrapper: gym.Wrapper) -> str:
    if kind == "NoopResetEnv":
        override = "" if wrapper.override_num_noops is None else f", override_num_noops={wrapper.override_num_noops}"
        return f"NoopResetEnv(noop_max={wrapper.noop_max}{override})"
    if kind == "MaxAndSkipEnv":
        return f"{type(wrapper).__name__}(skip={wrapper._skip})"
    if kind == "ResizeObservation":
        return f"ResizeObservation(shape={wrapper.shape})"
    if kind == "GrayscaleObservation":
        return f"GrayscaleObservation(keep_dim={wrapper.keep_dim})"
    if kind == "WarpFrame":
        return f"WarpFrame(width={wrapper.width}, height={wrapper.height})"
    return kind


# The attributes of SB3's Atari wrappers the compiled stack reads or keeps up to date.
_SB3_STATE = {
    "NoopResetEnv": ("noop_max", "override_num_noops", "noop_action"),
    "MaxAndSkipEnv": ("_skip", "_obs_buffer"),
    "EpisodicLifeEnv": ("lives", "was_real_done"),
    "WarpFrame": ("width", "height"),
}


@functools.cache
def _cvt_color_unlike_ours() -> str | None:
    """Why this process's ``cv2.cvtColor(rgb, COLOR_RGB2GRAY)`` is not fastvec's kernel's, or None.

    OpenCV's fixed-point weights changed between versions (14 bits in OpenCV 3, 15 since): every
    64th of the 2**24 colours (checked once per process) tells them apart.
    """
    try:
        import cv2
    except ImportError:
        return "OpenCV is not installed"
    c = np.arange(0, 1 << 24, 64, dtype=np.uint32)
    rgb = np.stack([(c >> 16) & 255, (c >> 8) & 255, c & 255], -1).astype(np.uint8).reshape(-1, 512, 3)
    if not np.array_equal(cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY), _gray_cv(rgb)):
        return f"this OpenCV's ({cv2.__version__}) COLOR_RGB2GRAY weights are not the ones fastvec reproduces"
    return None


def _sb3_unsupported(kind: str, wrapper: gym.Wrapper, screen: tuple[int, int]) -> str | None:
    """Why this wrapper of the SB3 stack is not compiled, or None."""
    missing = [name for name in _SB3_STATE.get(kind, _STATE.get(type(wrapper), ())) if not hasattr(wrapper, name)]
    if missing:
        return (f"this {_library(wrapper)}'s {type(wrapper).__name__} has no {missing[0]!r} (a {_library(wrapper)} "
                "this version of fastvec does not know)")
    if kind == "NoopResetEnv":
        if wrapper.noop_action != 0:
            return f"NoopResetEnv with noop_action={wrapper.noop_action!r} is not compiled (0 expected)"
        noops = wrapper.override_num_noops
        if noops is not None and not (isinstance(noops, (int, np.integer)) and noops > 0):
            return f"NoopResetEnv with override_num_noops={noops!r} is not compiled (an int > 0 expected)"
        if noops is None and not (type(wrapper.noop_max) is int and wrapper.noop_max > 0):
            return f"NoopResetEnv(noop_max={wrapper.noop_max!r}) is not compiled (an int > 0 expected)"
    elif kind == "MaxAndSkipEnv":
        if not (type(wrapper._skip) is int and wrapper._skip > 0):
            return f"{type(wrapper).__name__}(skip={wrapper._skip!r}) is not compiled (an int > 0 expected)"
    elif kind == "ResizeObservation":
        shape = tuple(wrapper.shape)
        why = _area_unsupported(screen, shape)
        if why is not None:
            return f"ResizeObservation(shape={shape}) is not compiled: {why}"
    elif kind == "WarpFrame":
        if not all(type(v) is int and v > 0 for v in (wrapper.width, wrapper.height)):
            return (f"WarpFrame(width={wrapper.width!r}, height={wrapper.height!r}) is not compiled "
                    "(positive ints expected)")
        why = _area_unsupported(screen, (wrapper.height, wrapper.width)) or _cvt_color_unlike_ours()
        if why is not None:
            return f"WarpFrame(width={wrapper.width}, height={wrapper.height}) is not compiled: {why}"
    return None


def _compile_sb3(env: gym.Env, chain: list[gym.Wrapper], i: int, base: gym.Env) -> tuple[gym.Env, str | None]:
    """SB3's Atari wrappers from chain[i] up (CleanRL's stack): the longest run compiled.

    Innermost first: ``RecordEpisodeStatistics``, ``NoopResetEnv``, ``MaxAndSkipEnv``,
    ``EpisodicLifeEnv``, ``FireResetEnv`` (each optional, in this order), then
    ``ResizeObservation`` + ``GrayscaleObservation`` (together) or SB3's ``WarpFrame``, and a
    ``FrameStackObservation`` on them, with one ``ClipRewardEnv`` anywhere above the first five. The run stops at the
    first wrapper that does not fit; it and those above it stay Python.
    """
    reason = _unsupported_base(base)
    if reason is not None:
        return env, reason
    if base._obs_type != "rgb":
        return env, (f"SB3's Atari wrappers over an AtariEnv with obs_type={base._obs_type!r} are not compiled "
                     "('rgb' expected)")
    height, width = base.ale.getScreenDims()
    parts: dict[str, gym.Wrapper] = {}
    committed: tuple[int, dict[str, gym.Wrapper]] | None = None  # (top index, parts) of the last whole stack
    stopped, unknown = "", True  # why the run stopped; whether at a wrapper it does not take
    below = "the AtariEnv"
    rank = -1
    j = i
    while j >= 0:
        wrapper = chain[j]
        kind = _kind(wrapper)
        why = _sb3_unsupported(kind, wrapper, (height, width)) if kind else None
        if kind in _LOGIC and rank < _LOGIC.index(kind) and "ClipRewardEnv" not in parts \
                and "ResizeObservation" not in parts and "WarpFrame" not in parts:
            rank = _LOGIC.index(kind)
        elif kind == "ClipRewardEnv" and kind not in parts and rank > 0:
            pass
        elif kind in ("ResizeObservation", "WarpFrame") and rank > 0 and not (
                "ResizeObservation" in parts or "WarpFrame" in parts):
            pass
        elif kind == "GrayscaleObservation" and "ResizeObservation" in parts and kind not in parts:
            pass
        elif (kind == "FrameStackObservation" and ("GrayscaleObservation" in parts or "WarpFrame" in parts)
              and kind not in parts and _frame_stack(wrapper) is not None):
            pass
        else:
            stopped = f"{type(wrapper).__name__} over {below} is not compiled"
            break
        if why is not None:
            stopped, unknown = why, False
            break
        parts[kind] = wrapper
        below = type(wrapper).__name__
        if rank > 0 and not ("ResizeObservation" in parts and "GrayscaleObservation" not in parts):
            committed = (j, dict(parts))
        j -= 1
    if committed is None:
        if not unknown:
            return env, f"nothing compiled: {stopped}"
        return env, (f"nothing compiled: {stopped or below + ' alone is not compiled'} (fastvec compiles SB3's "
                     "NoopResetEnv, MaxAndSkipEnv, EpisodicLifeEnv, FireResetEnv, in this order, over an optional "
                     "RecordEpisodeStatistics, then ClipRewardEnv, ResizeObservation + GrayscaleObservation "
                     "or WarpFrame, FrameStackObservation)")
    top_index, parts = committed
    limit, reason = _check_under(chain, i, list(parts.values()), type(chain[i]).__name__)
    if reason is not None:
        return env, reason

    stack_size, padding, padding_value, queue, stacked = 0, "reset", None, None, ""
    if "FrameStackObservation" in parts:
        stack_size, padding, padding_value, queue, stacked = _frame_stack(parts["FrameStackObservation"])
    gray = parts.get("GrayscaleObservation")
    warp = parts.get("WarpFrame")
    order = [kind for kind in (*_LOGIC, "ClipRewardEnv", "ResizeObservation", "GrayscaleObservation",
                               "WarpFrame", "FrameStackObservation") if kind in parts]
    names = "+".join(type(parts[kind]).__name__ for kind in order)
    description = " + ".join(stacked if kind == "FrameStackObservation" else _sb3_arguments(kind, parts[kind])
                             for kind in order)
    try:
        core = SB3StackCore(
            base, chain[i].env, limit,
            all(w._has_reset for w in chain[i + 1:] if type(w) is OrderEnforcing),
            parts.get("RecordEpisodeStatistics"), parts.get("NoopResetEnv"), parts.get("MaxAndSkipEnv"),
            parts.get("EpisodicLifeEnv"), "FireResetEnv" in parts, "ClipRewardEnv" in parts,
            tuple(parts["ResizeObservation"].shape) if gray is not None else None,
            bool(gray.keep_dim) if gray is not None else False,
            stack_size, padding, padding_value, queue,
            (warp.height, warp.width) if warp is not None else None,
        )
    except (ValueError, TypeError) as e:
        return env, f"{names} not compiled: {e}"
    description += _over(base, core)
    return _replace(env, chain, top_index,
                    CompiledAtariEnv(core, chain[top_index], chain[i].env, description, names))
