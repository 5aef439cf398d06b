"""The Gymnasium env of a compiled Atari stack (see :func:`fastvec.atari.compile_stack`)."""
from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from fastvec.atari._sb3 import SB3StackCore
from fastvec.atari._stack import AtariStackCore

__all__ = ["CompiledAtariEnv"]


class CompiledAtariEnv(gym.Env):
    """Gymnasium's ``AtariPreprocessing`` (and a ``FrameStackObservation`` on it), or SB3's Atari
    wrappers (CleanRL's stack), compiled.

    It stands in for the wrappers it replaces, over the same ale-py ``AtariEnv``: the same
    observation and action spaces, spec, metadata and render mode, and the base env's own
    ``np_random`` (``unwrapped`` is that ``AtariEnv``), so seeding, noop draws and sticky actions
    are the ones the Python stack would give. Each :meth:`step` is one call into the compiled
    core (:class:`fastvec.atari._stack.AtariStackCore` for ``AtariPreprocessing``,
    :class:`fastvec.atari._sb3.SB3StackCore` for SB3's wrappers), which drives
    ``env.unwrapped.ale`` through ale-py's public API and pools, resizes (OpenCV's
    ``INTER_AREA``, bit for bit) and stacks the frames in compiled code. Build it with
    :func:`fastvec.atari.compile_stack`, not directly.

    Example:
        >>> import gymnasium as gym
        >>> import ale_py
        >>> from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation
        >>> from fastvec.atari import compile_stack
        >>> gym.register_envs(ale_py)
        >>> env = FrameStackObservation(AtariPreprocessing(gym.make("ALE/Pong-v5", frameskip=1)), 4)
        >>> env, reason = compile_stack(env)
        >>> env
        <CompiledAtariEnv<AtariPreprocessing+FrameStackObservation over ALE/Pong-v5>>
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, obs.dtype, sorted(info)
        ((4, 84, 84), dtype('uint8'), ['episode_frame_number', 'frame_number', 'lives', 'seeds'])
        >>> obs, reward, terminated, truncated, info = env.step(1)
        >>> env.close()
    """

    def __init__(self, core: AtariStackCore | SB3StackCore, replaced: gym.Env, inner: gym.Env,
                 description: str, wrapper_names: str):
        """Wraps a core; :func:`fastvec.atari.compile_stack` calls it.

        Args:
            core: the compiled stack's state and step.
            replaced: the outermost wrapper this env replaces (its spaces, spec and metadata).
            inner: the env under the lowest replaced wrapper (renders).
            description: what was compiled (the ``compiled_atari`` attribute).
            wrapper_names: the replaced wrappers' names, for ``str(env)``.
        """
        self._core = core
        self._replaced = replaced
        self._inner = inner
        self._base = inner.unwrapped
        self.observation_space = replaced.observation_space
        self.action_space = replaced.action_space
        self.metadata = replaced.metadata
        self.spec = replaced.spec
        self.compiled_atari = description
        self._wrapper_names = wrapper_names
        # the core's methods, bound: env.step(action) is one call into compiled code
        self.step = core.step
        self.step_into = core.step_into

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """One step of the compiled stack (the core's ``step``, bound in ``__init__``).

        Args:
            action: an action of ``action_space``.

        Returns:
            (observation, reward, terminated, truncated, info), as the Python stack gives them.
        """
        return self._core.step(action)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Resets the base env (seeding it as ``AtariEnv.reset`` does), takes the noops, stacks.

        Args:
            seed: the seed of the base env's ``np_random`` and of the ALE, or None.
            options: passed to the base env's ``reset``.

        Returns:
            (observation, info), as the Python stack gives them.
        """
        return self._core.reset(seed, options)

    def step_into(self, action: Any, out: np.ndarray) -> tuple[SupportsFloat, bool, bool, dict[str, Any]]:
        """:meth:`step`, writing the observation into ``out`` (a vector env's row, say).

        Args:
            action: an action of ``action_space``.
            out: a writable C-contiguous array of ``observation_space``'s shape and dtype.

        Returns:
            (reward, terminated, truncated, info), as :meth:`step` gives them.

        Raises:
            TypeError, ValueError: ``out`` is not such an array (checked before the step).

        Example:
            >>> import gymnasium as gym
            >>> import ale_py
            >>> import numpy as np
            >>> from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation
            >>> from fastvec.atari import compile_stack
            >>> gym.register_envs(ale_py)
            >>> make = lambda: FrameStackObservation(AtariPreprocessing(gym.make("ALE/Pong-v5", frameskip=1)), 4)
            >>> env, _ = compile_stack(make())
            >>> rows = np.zeros((2, 4, 84, 84), np.uint8)
            >>> info = env.reset_into(rows[1], seed=0)
            >>> reward, terminated, truncated, info = env.step_into(0, rows[1])
            >>> reference = make()
            >>> _ = reference.reset(seed=0)
            >>> np.array_equal(reference.step(0)[0], rows[1])
            True
            >>> env.step_into(0, rows[:, 0])
            Traceback (most recent call last):
                ...
            ValueError: Expected out of shape (4, 84, 84) and dtype uint8, got shape (2, 84, 84) and dtype uint8
        """
        return self._core.step_into(action, out)

    def reset_into(self, out: np.ndarray, *, seed: int | None = None,
                   options: dict[str, Any] | None = None) -> dict[str, Any]:
        """:meth:`reset`, writing the observation into ``out``.

        Args:
            out: a writable C-contiguous array of ``observation_space``'s shape and dtype.
            seed: as :meth:`reset`.
            options: as :meth:`reset`.

        Returns:
            The reset's info.

        Raises:
            TypeError, ValueError: ``out`` is not such an array (checked before the reset).
        """
        return self._core.reset_into(out, seed, options)

    def render(self) -> Any:
        """Renders the base env (through the wrappers under the replaced ones)."""
        return self._inner.render()

    def close(self) -> None:
        """Closes the replaced wrappers and the base env."""
        self._replaced.close()

    @property
    def unwrapped(self) -> gym.Env:
        """The ale-py ``AtariEnv`` under the compiled stack (as the Python stack's ``unwrapped``)."""
        return self._base

    @property
    def np_random(self) -> np.random.Generator:
        """The base env's generator (the noop draws come from it, as in ``AtariPreprocessing``)."""
        return self._base.np_random

    @np_random.setter
    def np_random(self, value: np.random.Generator) -> None:
        self._base.np_random = value

    @property
    def np_random_seed(self) -> int | None:
        """The base env's ``np_random_seed``."""
        return self._base.np_random_seed

    @property
    def render_mode(self) -> str | None:
        """The base env's render mode."""
        return self._inner.render_mode

    @property
    def ale(self) -> Any:
        """The base env's ``ALEInterface`` (as ``AtariPreprocessing.ale``)."""
        return self._base.ale

    @property
    def lives(self) -> int:
        """``AtariPreprocessing.lives`` or ``EpisodicLifeEnv.lives``: the lives at the last reset,
        or life-loss check."""
        return self._core.lives

    @property
    def game_over(self) -> bool:
        """``AtariPreprocessing.game_over``: whether the last step ended the game (or a life).

        Raises:
            AttributeError: an SB3 stack (it has no such attribute).
        """
        return self._core.game_over

    def has_wrapper_attr(self, name: str) -> bool:
        """Whether this env, or one of the wrappers it replaces, has the attribute ``name``."""
        return hasattr(self, name) or self._replaced.has_wrapper_attr(name)

    def get_wrapper_attr(self, name: str) -> Any:
        """The attribute ``name`` of this env, else of the replaced wrappers (their arguments).

        Raises:
            AttributeError: neither has it.
        """
        if hasattr(self, name):
            return getattr(self, name)
        return self._replaced.get_wrapper_attr(name)

    def __str__(self) -> str:
        base = self._base.spec.id if self._base.spec is not None else "AtariEnv"
        return f"<{type(self).__name__}<{self._wrapper_names} over {base}>>"

    def __repr__(self) -> str:
        return str(self)
