"""fastvec: a fast drop-in vector-environment backend for Gymnasium."""
from fastvec import spaces
from fastvec.advantages import gae, gae_sb3, gae_terminated_truncated, vtrace

__version__ = "0.1.0"

__all__ = ["spaces", "gae", "gae_sb3", "gae_terminated_truncated", "vtrace"]
