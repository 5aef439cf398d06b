"""PrioritizedReplayBuffer: proportional prioritized experience replay."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces as gspaces

from fastvec.replay._validate import as_capacity, as_float64, as_indices
from fastvec.replay.batch import PrioritizedSample, Transitions
from fastvec.replay.min_tree import MinTree
from fastvec.replay.segment_tree import update_pair
from fastvec.replay.sum_tree import SumTree
from fastvec.spaces import Layout

__all__ = ["PrioritizedReplayBuffer"]


def _nonnegative(value: Any, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number >= 0, got {value!r}")
    value = float(value)
    if not (value >= 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number >= 0, got {value}")
    return value


class PrioritizedReplayBuffer:
    """Proportional prioritized replay (Schaul et al., 2016) over preallocated arrays.

    Transitions live in one NumPy array per leaf of the observation and action
    spaces (``fastvec.spaces.Layout``), of shape ``(capacity, *leaf.shape)``
    and the leaf's dtype; the buffer is a ring: once full, new transitions
    overwrite the oldest.

    Priorities: the trees hold ``(priority + eps) ** alpha``. A new transition
    gets the largest value held so far (1.0 at first). ``sample`` draws index
    ``i`` with probability ``P(i) = p_i / sum_j p_j`` (stratified: one draw in
    each of ``batch_size`` equal segments of the total) and returns the
    importance weights ``w_i = (N * P(i)) ** -beta / max_j (N * P(j)) ** -beta``
    with ``N = len(buffer)``, the max taken over the stored transitions that can
    be sampled (positive priority), i.e. ``w_i = (p_i / min_j p_j) ** -beta``,
    as in the PER paper, OpenAI baselines and tianshou.

    Args:
        capacity: number of transitions kept.
        observation_space: Box, Discrete, MultiDiscrete, MultiBinary, or a
            Dict/Tuple of them (the single-env space, not the batched one).
        action_space: same, for actions.
        alpha: priority exponent (0 = uniform sampling).
        beta: default importance-sampling exponent for :meth:`sample`.
        eps: added to every priority given to :meth:`update_priorities`.
        seed: seed of the buffer's ``numpy.random.Generator``.
        num_threads: threads of :meth:`sample`'s tree search (see
            :meth:`SumTree.find_prefixsum`; 1, the default, runs it in the
            calling thread).

    Example:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> from fastvec import PrioritizedReplayBuffer
        >>> envs = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")
        >>> buffer = PrioritizedReplayBuffer(1000, envs.single_observation_space,
        ...                                  envs.single_action_space, alpha=0.6, beta=0.4, seed=0)
        >>> obs, _ = envs.reset(seed=0)
        >>> for _ in range(10):
        ...     actions = envs.action_space.sample()
        ...     next_obs, rewards, terminations, truncations, _ = envs.step(actions)
        ...     buffer.add(obs, actions, rewards, next_obs, terminations, truncations)
        ...     obs = next_obs
        >>> len(buffer)
        40
        >>> batch, indices, weights = buffer.sample(8)
        >>> batch.observations.shape, indices.shape, weights.dtype.name
        ((8, 4), (8,), 'float32')
        >>> buffer.update_priorities(indices, np.abs(np.random.default_rng(0).normal(size=8)))
        >>> envs.close()
    """

    def __init__(
        self,
        capacity: int,
        observation_space: gspaces.Space,
        action_space: gspaces.Space,
        alpha: float = 0.6,
        beta: float = 0.4,
        *,
        eps: float = 1e-6,
        seed: int | None = None,
        num_threads: int = 1,
    ):
        self.capacity = as_capacity(capacity)
        self.num_threads = as_capacity(num_threads, "num_threads")
        if not isinstance(observation_space, gspaces.Space):
            raise TypeError(f"observation_space must be a gymnasium Space, got {observation_space!r}")
        if not isinstance(action_space, gspaces.Space):
            raise TypeError(f"action_space must be a gymnasium Space, got {action_space!r}")
        self.alpha = _nonnegative(alpha, "alpha")
        self.beta = _nonnegative(beta, "beta")
        self.eps = _nonnegative(eps, "eps")
        self.observation_space = observation_space
        self.action_space = action_space
        self._obs_layout = Layout(observation_space)
        self._act_layout = Layout(action_space)
        cap = self.capacity
        self._obs = [np.zeros((cap,) + leaf.shape, leaf.dtype) for leaf in self._obs_layout.leaves]
        self._next_obs = [np.zeros((cap,) + leaf.shape, leaf.dtype) for leaf in self._obs_layout.leaves]
        self._actions = [np.zeros((cap,) + leaf.shape, leaf.dtype) for leaf in self._act_layout.leaves]
        self._rewards = np.zeros(cap, np.float32)
        self._terminations = np.zeros(cap, np.bool_)
        self._truncations = np.zeros(cap, np.bool_)
        self._sum_tree = SumTree(cap)
        self._min_tree = MinTree(cap)
        self._max_priority = 1.0
        self._pos = 0
        self._len = 0
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return (f"PrioritizedReplayBuffer(capacity={self.capacity}, len={self._len}, "
                f"alpha={self.alpha}, beta={self.beta})")

    @property
    def max_priority(self) -> float:
        """The value (already ``(p + eps) ** alpha``) that new transitions get."""
        return self._max_priority

    # ------------------------------------------------------------------ add

    def _rows(self, layout: Layout, value: Any, n: int | None, what: str) -> list[np.ndarray]:
        """Leaf arrays of ``value`` with a leading batch axis of ``n`` (None: a single transition)."""
        try:
            parts = layout.split(value)
        except (KeyError, IndexError, TypeError) as exc:
            raise ValueError(f"{what} does not match the structure of {layout.space}: {exc!r}") from None
        out = []
        for leaf, part in zip(layout.leaves, parts):
            arr = np.asarray(part)
            expected = leaf.shape if n is None else (n,) + leaf.shape
            if arr.shape != expected:
                where = f" (leaf {leaf.path})" if leaf.path else ""
                kind = "a single transition" if n is None else f"a batch of {n}"
                raise ValueError(f"{what}{where}: expected shape {expected} for {kind}, got {arr.shape}")
            out.append(arr.reshape((1,) + leaf.shape) if n is None else arr)
        return out

    def add(self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any,
            truncated: Any, mask: Any = None) -> None:
        """Store one transition, or a batch straight from a vector env step.

        A scalar ``reward`` means one transition (``obs`` of the single
        observation space); a 1-D ``reward`` of length ``n`` means a batch
        (every array with a leading axis ``n``, as ``VectorEnv.step``
        returns them). ``mask`` (bool, shape ``(n,)``) keeps only some rows,
        e.g. to skip the reset steps of Gymnasium's NEXT_STEP autoreset.
        """
        rewards = as_float64(reward, "reward")
        if rewards.ndim == 0:
            n = None
        elif rewards.ndim == 1:
            n = rewards.shape[0]
        else:
            raise ValueError(f"reward must be a scalar or a 1-D batch, got shape {rewards.shape}")
        rows = 1 if n is None else n
        obs_rows = self._rows(self._obs_layout, obs, n, "obs")
        next_rows = self._rows(self._obs_layout, next_obs, n, "next_obs")
        act_rows = self._rows(self._act_layout, action, n, "action")
        flags = []
        for name, value in (("terminated", terminated), ("truncated", truncated)):
            arr = np.asarray(value)
            if arr.shape != rewards.shape:
                raise ValueError(f"{name} must have the shape of reward {rewards.shape}, got {arr.shape}")
            flags.append(arr.reshape(rows).astype(np.bool_, copy=False))
        rewards = rewards.reshape(rows)
        if mask is not None:
            keep = np.asarray(mask)
            if keep.dtype != np.bool_ or keep.shape != (rows,):
                raise ValueError(f"mask must be a bool array of shape ({rows},), got {keep.dtype} {keep.shape}")
            obs_rows = [a[keep] for a in obs_rows]
            next_rows = [a[keep] for a in next_rows]
            act_rows = [a[keep] for a in act_rows]
            rewards, flags = rewards[keep], [f[keep] for f in flags]
            rows = int(keep.sum())
        if rows == 0:
            return
        first = 0
        if rows > self.capacity:  # only the newest `capacity` rows survive
            first = rows - self.capacity
            self._pos = (self._pos + first) % self.capacity
        count = rows - first
        start = self._pos
        positions = (start + np.arange(count)) % self.capacity
        head = min(count, self.capacity - start)  # rows before the wrap
        pairs = [(dst, src) for dsts, srcs in ((self._obs, obs_rows), (self._next_obs, next_rows),
                                                (self._actions, act_rows)) for dst, src in zip(dsts, srcs)]
        pairs += [(self._rewards, rewards), (self._terminations, flags[0]), (self._truncations, flags[1])]
        for dst, src in pairs:
            src = src[first:]
            dst[start:start + head] = src[:head]
            if head < count:
                dst[: count - head] = src[head:]
        update_pair(self._sum_tree, self._min_tree, positions, self._max_priority, self._max_priority)
        self._pos = (start + count) % self.capacity
        self._len = min(self._len + count, self.capacity)

    # ------------------------------------------------------------------ sample

    def sample(self, batch_size: int, beta: float | None = None) -> PrioritizedSample:
        """Draw ``batch_size`` transitions by priority (stratified).

        Returns:
            ``(batch, indices, weights)``: a :class:`Transitions`, the int64
            buffer indices (for :meth:`update_priorities`) and the float32
            importance weights ``(p_i / min_j p_j) ** -beta`` (max 1).
        """
        batch_size = as_capacity(batch_size, "batch_size")
        beta = self.beta if beta is None else _nonnegative(beta, "beta")
        if self._len == 0:
            raise ValueError("cannot sample from an empty PrioritizedReplayBuffer; add transitions first")
        if not self._sum_tree.total() > 0:
            raise ValueError("cannot sample: every stored transition has priority 0 (eps=0 and "
                             "update_priorities gave zeros); use eps > 0 or positive priorities")
        indices, p = self._sum_tree._sample(batch_size, self._rng, True, self.num_threads)
        weights = (p / self._min_tree.min()) ** (-beta)
        take = lambda arrays: [a.take(indices, axis=0) for a in arrays]  # noqa: E731 (take: 10x a[idx])
        batch = Transitions(
            observations=self._obs_layout.join(take(self._obs)),
            actions=self._act_layout.join(take(self._actions)),
            rewards=self._rewards.take(indices),
            next_observations=self._obs_layout.join(take(self._next_obs)),
            terminations=self._terminations.take(indices),
            truncations=self._truncations.take(indices),
        )
        return PrioritizedSample(batch, indices, weights.astype(np.float32))

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        """Set the priorities (e.g. ``|TD error|``) of stored transitions.

        The trees get ``(priority + eps) ** alpha``; duplicates in ``indices``:
        the last one wins. Priorities must be finite and >= 0; indices must
        point at stored transitions (``0 <= i < len(self)``).
        """
        idx = as_indices(indices).reshape(-1)
        prio = as_float64(priorities, "priorities")
        if prio.ndim == 0:
            prio = np.broadcast_to(prio, idx.shape)
        prio = prio.reshape(-1) if prio.size == idx.size else prio
        if prio.shape != idx.shape:
            raise ValueError(f"priorities must match indices ({idx.shape[0]} values), got shape {prio.shape}")
        if idx.size == 0:
            return
        bad = np.flatnonzero((idx < 0) | (idx >= self._len))
        if bad.size:
            raise ValueError(f"indices must be in [0, {self._len}) (stored transitions), "
                             f"got {int(idx[bad[0]])} at position {int(bad[0])}")
        bad = np.flatnonzero(~(np.isfinite(prio) & (prio >= 0)))
        if bad.size:
            raise ValueError(f"priorities must be finite and >= 0, got {float(prio[bad[0]])} "
                             f"at position {int(bad[0])}")
        stored = (prio + self.eps) ** self.alpha
        update_pair(self._sum_tree, self._min_tree, idx, stored, np.where(stored > 0, stored, np.inf))
        self._max_priority = max(self._max_priority, float(stored.max()))
