"""fastvec: a fast drop-in vector-environment backend for Gymnasium.

Importing fastvec makes ``gymnasium.make_vec(..., vectorization_mode="fastvec")``
work (see :mod:`fastvec.registration`). ``fastvec.get_include()`` is the include directory
of the native-env kit (:mod:`fastvec.native`), to build envs in C against.
``fastvec.autotune(env_fns, ...)`` measures FastVectorEnv's settings on your envs
(:mod:`fastvec.autotune`, a module that is callable, imported on first use).
"""
from fastvec import registration, spaces
from fastvec.advantages import gae, gae_sb3, gae_terminated_truncated, vtrace
from fastvec.errors import RemoteTraceback, WorkerDiedError, WorkerError
from fastvec.host import usable_cpus
from fastvec.native import get_include
from fastvec.replay import MinTree, PrioritizedReplayBuffer, SumTree
from fastvec.vector.native_vector_env import NativeVectorEnv
from fastvec.vector.fast_vector_env import FastVectorEnv
from fastvec.vector.multi_agent_vector_env import MultiAgentVectorEnv

__version__ = "0.1.0"

registration.install()


def __getattr__(name: str):
    """``fastvec.autotune``, imported on first use: importing it here would import it before
    ``python -m fastvec.autotune`` runs it (runpy then warns)."""
    if name == "autotune":
        import fastvec.autotune

        return fastvec.autotune
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FastVectorEnv", "MultiAgentVectorEnv", "NativeVectorEnv", "RemoteTraceback", "WorkerDiedError", "WorkerError",
    "autotune", "get_include", "registration", "spaces", "usable_cpus",
    "gae", "gae_sb3", "gae_terminated_truncated", "vtrace",
    "SumTree", "MinTree", "PrioritizedReplayBuffer",
]
