"""fastvec: a fast drop-in vector-environment backend for Gymnasium."""
from fastvec import spaces
from fastvec.replay import MinTree, PrioritizedReplayBuffer, SumTree

__version__ = "0.1.0"

__all__ = ["spaces", "SumTree", "MinTree", "PrioritizedReplayBuffer"]
