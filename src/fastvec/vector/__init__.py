"""The VectorEnv backends, one class per file."""
from fastvec.vector.native import NativeVectorEnv
from fastvec.vector.shared import FastVectorEnv

__all__ = ["FastVectorEnv", "NativeVectorEnv"]
