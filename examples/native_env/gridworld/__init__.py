"""A grid world, in plain Python (reference.py) and compiled on fastvec's native-env kit
(gridworld.h). Importing this package registers both under one id:

    >>> import gymnasium as gym
    >>> import fastvec
    >>> from fastvec.native.examples import gridworld   # a copy built by its own setup.py: `import gridworld`
    >>> envs = gym.make_vec(gridworld.ENV_ID, 4, vectorization_mode="fastvec")   # compiled
    >>> type(envs).__name__, envs.single_observation_space.shape
    ('NativeVectorEnv', (5, 5))
    >>> ref = gym.make_vec(gridworld.ENV_ID, 4, vectorization_mode="sync")       # the Python env
"""
import gymnasium as gym

from fastvec.native import NativeEnvSpec, register

from . import _kernel
from .reference import GridWorldEnv

ENV_ID = "GridWorld-v0"


def register_envs() -> None:
    """Register ``GridWorld-v0``: the Python env with Gymnasium, its compiled twin with fastvec
    (which takes its spaces, and its parameters from the attributes of the same names)."""
    gym.register(ENV_ID, entry_point=GridWorldEnv, max_episode_steps=50)
    register(NativeEnvSpec(ENV_ID, _kernel.KERNEL, cost_ns=20.0))


register_envs()

__all__ = ["ENV_ID", "GridWorldEnv", "register_envs"]
