"""Worker side: the wrapper stacks fastvec compiles in the worker (``FastVectorEnv(...,
compile_wrappers=True)``, the default), applied to each env as its worker builds it.

Today the Atari stacks are recognised, over ale-py's ``AtariEnv``: Gymnasium's
(``AtariPreprocessing``, and a ``FrameStackObservation`` directly on it) and SB3's / CleanRL's
(``RecordEpisodeStatistics``, ``NoopResetEnv``, ``MaxAndSkipEnv`` or Gymnasium's
``MaxAndSkipObservation``, ``EpisodicLifeEnv``,
``FireResetEnv``, ``ClipRewardEnv``, ``ResizeObservation`` + ``GrayscaleObservation``,
``FrameStackObservation``, or a run of them from the bottom), compiled by
:func:`fastvec.atari.compile_stack` with outputs identical to the Python wrappers'. An env of
any other kind is left exactly as its ``env_fn`` built it, without importing the Atari
package (nor OpenCV) in the worker.

The caller wraps each ``env_fn`` in a :class:`StackCompiler`, so that a worker, its envs'
rebuilds (``env_failure="restart"``) and the caller's own share (``step_in_caller=True``) all
compile the same way; what happened to each env is in its worker's hello
(:func:`compile_note`), and the caller shows it as ``FastVectorEnv.compiled_wrappers``.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

__all__ = ["StackCompiler", "compile_note"]

# Why each env whose stack looked compilable was left in Python (read by compile_note), kept
# beside the env rather than set on it: the user's env object stays exactly as env_fn built it.
# Weak keys: an env closed and dropped (a rebuilt one, say) takes its entry with it. Per
# process, as compile_note runs where the env was built.
_not_compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _is_atari(env: Any) -> bool:
    """Whether ``env``'s innermost env is ale-py's (by module: ale-py is not imported for this)."""
    try:
        base = env.unwrapped
    except Exception:  # (not an env: build_env names what came back)
        return False
    return type(base).__module__.split(".")[0] == "ale_py"


class StackCompiler:
    """An ``env_fn`` that builds the user's env and compiles the stacks fastvec recognises.

    Picklable when ``env_fn`` is (workers receive it as they receive ``env_fn``).

    Example:
        >>> import gymnasium as gym
        >>> import ale_py
        >>> gym.register_envs(ale_py)
        >>> make = StackCompiler(lambda: gym.wrappers.AtariPreprocessing(gym.make("ALE/Pong-v5", frameskip=1)))
        >>> env = make()
        >>> compile_note(env)[:39]
        'compiled: AtariPreprocessing(noop_max=3'
        >>> compile_note(StackCompiler(lambda: gym.make("CartPole-v1"))()) is None
        True
        >>> env.close()
        >>> left = StackCompiler(lambda: gym.make("ALE/Pong-v5"))()  # no preprocessing to compile
        >>> compile_note(left)
        'not compiled: no AtariPreprocessing over the AtariEnv: nothing compiled'
        >>> [name for name in vars(left) if "fastvec" in name]  # the user's env is left as it was
        []
    """

    def __init__(self, env_fn: Callable[[], Any]) -> None:
        self.env_fn = env_fn

    def __call__(self) -> Any:
        env = self.env_fn()
        if not _is_atari(env):
            return env
        from fastvec.atari import compile_stack

        compiled, reason = compile_stack(env)
        if reason is not None:
            try:
                _not_compiled[compiled] = reason
            except TypeError:  # pragma: no cover - an env that is unhashable or not weak-referenceable
                pass
        return compiled


def compile_note(env: Any) -> str | None:
    """What became of ``env``'s wrapper stack: ``"compiled: <what>"``, ``"not compiled:
    <reason>"`` for an Atari env left in Python, or None for an env of no kind fastvec
    compiles."""
    described = getattr(env, "compiled_atari", None)
    if described is not None:
        return f"compiled: {described}"
    try:
        reason = _not_compiled.get(env)
    except TypeError:  # an unhashable env: none was recorded
        reason = None
    return None if reason is None else f"not compiled: {reason}"
