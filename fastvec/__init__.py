"""fastvec: a fast drop-in vector-environment backend for Gymnasium."""
from fastvec import spaces

__version__ = "0.1.0"

__all__ = ["spaces"]
