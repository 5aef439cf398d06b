"""fastvec: a fast drop-in vector-environment backend for Gymnasium."""
from fastvec import spaces
from fastvec.vector.native import NativeVectorEnv

__version__ = "0.1.0"

__all__ = ["spaces", "NativeVectorEnv"]
