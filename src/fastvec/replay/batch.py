"""The batches a :class:`~fastvec.PrioritizedReplayBuffer` returns."""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["Transitions", "PrioritizedSample"]


class Transitions(NamedTuple):
    """A batch of transitions, leading axis = batch.

    Observations and actions have the structure of their spaces (a Dict
    space gives a dict of arrays, a Tuple space a tuple of arrays).
    """

    observations: Any
    actions: Any
    rewards: np.ndarray
    next_observations: Any
    terminations: np.ndarray
    truncations: np.ndarray


class PrioritizedSample(NamedTuple):
    """What :meth:`PrioritizedReplayBuffer.sample` returns: unpack as
    ``batch, indices, weights = buffer.sample(256)``."""

    batch: Transitions
    indices: np.ndarray
    weights: np.ndarray
