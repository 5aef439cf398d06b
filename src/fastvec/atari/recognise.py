"""Recognising Gymnasium's Atari wrapper stack in a built env, and compiling it."""
from __future__ import annotations

import gymnasium as gym
from gymnasium.wrappers import (
    AtariPreprocessing,
    FrameStackObservation,
    OrderEnforcing,
    PassiveEnvChecker,
    TimeLimit,
)

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


def _unsupported(ap: AtariPreprocessing, base: gym.Env) -> str | None:
    """Why this AtariPreprocessing over this AtariEnv is not compiled, or None."""
    for name in ("_frameskip", "_action_set", "_obs_type", "continuous", "ale"):
        if not hasattr(base, name):
            return f"this ale-py's AtariEnv has no {name!r} (an ale-py this version of fastvec does not know)"
    if base.continuous:
        return "an AtariEnv with continuous=True is not compiled (its actions map through map_action_idx)"
    if getattr(base, "sound_obs", False):
        return "an AtariEnv with sound_obs=True is not compiled"
    if base._obs_type not in ("rgb", "grayscale"):
        return f"an AtariEnv with obs_type={base._obs_type!r} is not compiled (AtariPreprocessing grabs the screen)"
    if base._obs_type == "grayscale" and not ap.grayscale_obs:
        return ("AtariPreprocessing(grayscale_obs=False) over an AtariEnv with obs_type='grayscale' is not "
                "compiled (its RGB grab does not fit the grayscale buffers)")
    skip = base._frameskip
    if not (type(skip) is int and skip > 0) and not (
            type(skip) is tuple and len(skip) == 2 and all(type(s) is int for s in skip) and 0 < skip[0] < skip[1]):
        return f"an AtariEnv with frameskip={skip!r} is not compiled (an int > 0 or a (low, high) tuple expected)"
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
    """Replaces the Gymnasium Atari stack at the bottom of ``env`` by one compiled env.

    The stack recognised, innermost first: ale-py's ``AtariEnv`` (as ``gym.make`` builds it:
    ``PassiveEnvChecker``, ``OrderEnforcing`` and a ``TimeLimit`` may wrap it), Gymnasium's
    ``AtariPreprocessing`` over it (any of its arguments; ``frame_skip > 1`` needs the base
    env's ``frameskip=1``, as the wrapper itself demands), and optionally Gymnasium's
    ``FrameStackObservation`` directly on that (any ``stack_size`` and ``padding_type``). That
    part becomes one :class:`~fastvec.atari.env.CompiledAtariEnv` over the same ``AtariEnv``,
    identical in its outputs (observations, rewards, terminated/truncated, infos, noop draws,
    seeding); every wrapper above it is kept and re-pointed at it. The compiled env, and the
    returned env, carry a ``compiled_atari`` attribute saying what was compiled. An env compiled
    already is returned as it is, with no reason.

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
    ap = chain[i]
    if type(ap) is not AtariPreprocessing:
        what = ("a subclass of AtariPreprocessing" if isinstance(ap, AtariPreprocessing)
                else "not AtariPreprocessing")
        return env, (f"{type(ap).__name__} directly over the AtariEnv's wrappers is {what}: nothing compiled "
                     f"(fastvec compiles AtariPreprocessing, then FrameStackObservation, over the AtariEnv)")
    under = chain[i + 1:]
    for wrapper in [ap, *under, *chain[i - 1:i]]:
        missing = [name for name in _STATE.get(type(wrapper), ()) if not hasattr(wrapper, name)]
        if missing:
            return env, (f"this Gymnasium's {type(wrapper).__name__} has no {missing[0]!r} (a Gymnasium this "
                         "version of fastvec does not know): nothing compiled")
    limits = [w for w in under if type(w) is TimeLimit]
    if len(limits) > 1:
        return env, "more than one TimeLimit under AtariPreprocessing is not compiled"
    reason = _unsupported(ap, base)
    if reason is not None:
        return env, reason

    top, top_index = ap, i
    stack_size, padding, padding_value, queue = 0, "reset", None, None
    names = "AtariPreprocessing"
    description = _arguments(ap)
    if i > 0 and type(chain[i - 1]) is FrameStackObservation:
        fs = chain[i - 1]
        if fs.padding_type in ("reset", "zero", "_custom"):
            top, top_index = fs, i - 1
            stack_size, padding, queue = int(fs.stack_size), fs.padding_type, fs.obs_queue
            padding_value = fs.padding_value if padding == "_custom" else None
            names += "+FrameStackObservation"
            shown = "custom" if padding == "_custom" else repr(padding)
            description += f" + FrameStackObservation(stack_size={stack_size}, padding_type={shown})"

    try:
        core = AtariStackCore(
            base, ap.env, limits[0] if limits else None,
            all(w._has_reset for w in under if type(w) is OrderEnforcing),
            ap.obs_buffer, ap.frame_skip, ap.noop_max, ap.screen_size, ap.terminal_on_life_loss,
            ap.grayscale_obs, ap.grayscale_newaxis, ap.scale_obs, ap.lives, ap.game_over,
            stack_size, padding, padding_value, queue,
        )
    except (ValueError, TypeError) as e:
        return env, f"{names} not compiled: {e}"
    spec_id = base.spec.id if base.spec is not None else f"AtariEnv({base._game!r})"
    description += f" over {spec_id} (frameskip={base._frameskip!r}): compiled by fastvec.atari"
    compiled = CompiledAtariEnv(core, top, ap.env, description, names)
    if top_index == 0:
        return compiled, None
    chain[top_index - 1].env = compiled
    try:  # visible on the result itself too (a wrapper does not forward attribute reads)
        env.compiled_atari = description
    except AttributeError:
        pass
    return env, None
