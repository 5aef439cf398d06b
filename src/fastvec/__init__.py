"""fastvec: a fast drop-in vector-environment backend for Gymnasium.

Importing fastvec makes ``gymnasium.make_vec(..., vectorization_mode="fastvec")``
work (see :mod:`fastvec.registration`). ``fastvec.get_include()`` is the include directory
of the native-env kit (:mod:`fastvec.native`), to build envs in C against.
"""
from fastvec import registration, spaces
from fastvec.advantages import gae, gae_sb3, gae_terminated_truncated, vtrace
from fastvec.errors import RemoteTraceback, WorkerDiedError, WorkerError
from fastvec.native import get_include
from fastvec.replay import MinTree, PrioritizedReplayBuffer, SumTree
from fastvec.vector.native_vector_env import NativeVectorEnv
from fastvec.vector.fast_vector_env import FastVectorEnv
from fastvec.vector.multi_agent_vector_env import MultiAgentVectorEnv

__version__ = "0.1.0"

registration.install()

__all__ = [
    "FastVectorEnv", "MultiAgentVectorEnv", "NativeVectorEnv", "RemoteTraceback", "WorkerDiedError", "WorkerError",
    "get_include", "registration", "spaces",
    "gae", "gae_sb3", "gae_terminated_truncated", "vtrace",
    "SumTree", "MinTree", "PrioritizedReplayBuffer",
]
