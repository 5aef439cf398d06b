"""Gymnasium's Atari wrapper stack, compiled: :func:`compile_stack`.

An env built the usual way, ``FrameStackObservation(AtariPreprocessing(gym.make("ALE/Pong-v5",
frameskip=1)), 4)`` with any wrappers on top, has its ``AtariPreprocessing`` (+
``FrameStackObservation``) replaced by one :class:`CompiledAtariEnv` that gives the same
outputs, step for step, over the same ale-py ``AtariEnv``: the frame-skip loop, screen grabs,
max-pooling and frame stack run in Cython, the resize is OpenCV's ``INTER_AREA`` as the wrapper
calls it, and ALE is driven through ale-py's public Python API only (ALE is GPL-2.0; no ALE
code is part of fastvec).

Example:
    >>> import gymnasium as gym
    >>> import ale_py
    >>> from gymnasium.wrappers import AtariPreprocessing
    >>> from fastvec.atari import compile_stack
    >>> gym.register_envs(ale_py)
    >>> env, reason = compile_stack(AtariPreprocessing(gym.make("ALE/Pong-v5", frameskip=1)))
    >>> reason is None, env.observation_space
    (True, Box(0, 255, (84, 84), uint8))
    >>> env.close()
"""
from fastvec.atari.env import CompiledAtariEnv
from fastvec.atari.recognise import compile_stack

__all__ = ["CompiledAtariEnv", "compile_stack"]
