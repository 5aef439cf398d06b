"""The VectorEnv backends, one class per file."""
from fastvec.vector.native_vector_env import NativeVectorEnv
from fastvec.vector.fast_vector_env import FastVectorEnv

__all__ = ["FastVectorEnv", "NativeVectorEnv"]
