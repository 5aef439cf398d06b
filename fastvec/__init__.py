"""fastvec: a fast drop-in vector-environment backend for Gymnasium."""
from fastvec import spaces
from fastvec.errors import WorkerDiedError, WorkerError
from fastvec.vector.shared import FastVectorEnv

__version__ = "0.1.0"

__all__ = ["FastVectorEnv", "WorkerDiedError", "WorkerError", "spaces"]
