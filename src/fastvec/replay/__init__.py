"""Segment trees and prioritized experience replay.

``SumTree``/``MinTree`` are float64 segment trees with batched updates and a
batched prefix-sum search (Cython kernels in ``fastvec.replay._segment_tree``);
``PrioritizedReplayBuffer`` stores transitions in preallocated NumPy arrays
and samples them by priority with importance weights.
"""
from fastvec.replay.batch import PrioritizedSample, Transitions
from fastvec.replay.min_tree import MinTree
from fastvec.replay.prioritized_replay_buffer import PrioritizedReplayBuffer
from fastvec.replay.segment_tree import SegmentTree
from fastvec.replay.sum_tree import SumTree

__all__ = ["SegmentTree", "SumTree", "MinTree", "PrioritizedReplayBuffer", "Transitions", "PrioritizedSample"]
