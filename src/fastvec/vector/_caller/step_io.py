"""What crosses the shared block each step, seen from the caller: actions in; observations,
rewards, flags and infos out.

:func:`layouts` decides where each part of an observation and an action travels (fixed-size
leaves in the block, the rest on the pipes) and lays the block out; :class:`Staging` then
writes each step's actions into it and reads each step's results out of it, merging in
what came on the pipes (observation parts without a fixed-size form, info signatures and
values: :mod:`fastvec.vector._infos.codec`).
"""
from __future__ import annotations

from copy import deepcopy
from typing import Any

import numpy as np
from gymnasium import Space, spaces
from gymnasium.vector.utils import concatenate, create_empty_array, iterate

from fastvec.spaces import Layout
from fastvec.spaces._leaf_kinds import LEAF_SPACES
from fastvec.vector._block import handoff, shared_buffer
from fastvec.vector._infos.codec import InfoAssembler, row_bytes_for
from fastvec.vector._block.shared_buffer import Section, SharedBuffer

# Gymnasium's own spaces without a fixed-size array form: their values travel on the pipes.
_PIPED_SPACES = (spaces.Text, spaces.Graph, spaces.Sequence, spaces.OneOf)


def layouts(observation_space: Space, action_space: Space, num_envs: int, num_workers: int,
            shared_memory: bool) -> tuple[Layout | None, Layout, list[Section], int]:
    """(observation layout, action layout, the block's sections, its size) for these spaces.

    With ``shared_memory=True`` an observation's fixed-size leaves go into the block and the
    rest (Text, Graph, Sequence, OneOf, custom spaces inside a Dict/Tuple) on the pipes; a
    custom space as the whole observation space leaves nothing to share and raises the
    ``ValueError`` AsyncVectorEnv raises. With ``shared_memory=False`` (layout None) whole
    observations take the pipes. Actions are laid out the same way.
    """
    act_layout = Layout(action_space, objects=True)
    if shared_memory:
        if not isinstance(observation_space, (spaces.Dict, spaces.Tuple, *_PIPED_SPACES, *LEAF_SPACES)):
            raise ValueError(
                f"Using `shared_memory=True` with the custom observation space {observation_space!r} (a "
                f"{type(observation_space).__name__}, not one of Gymnasium's spaces) leaves nothing to share: set "
                "`shared_memory=False` to send its observations through pipes (custom spaces inside a "
                "Dict or Tuple work either way)."
            )
        obs_layout = Layout(observation_space, objects=True)
        obs_bytes = sum(leaf.nbytes for leaf in obs_layout.leaves if not leaf.is_object)
    else:
        obs_layout, obs_bytes = None, 0
    sections, size = shared_buffer.plan(num_envs, num_workers, obs_layout, act_layout, row_bytes_for(obs_bytes))
    return obs_layout, act_layout, sections, size


class Staging:
    """The caller's side of the shared block: actions in, results out.

    Args:
        buffer: the block (``shared_buffer.SharedBuffer``), laid out by :func:`layouts`.
        obs_layout, act_layout: from :func:`layouts`.
        observation_space / action_space: one env's (``single_*``), and the batched action
            space (``iterate`` over it gives each env its action).
        starts, worker_of_env: each worker's first env, each env's worker.
        copy: return copies of the observations (else views into the block).
    """

    def __init__(self, buffer: SharedBuffer, obs_layout: Layout | None, act_layout: Layout,
                 observation_space: Space, batched_action_space: Space, starts: list[int],
                 worker_of_env: np.ndarray, copy: bool):
        self.num_envs = len(worker_of_env)
        self.num_workers = len(starts)
        self.starts = starts
        self.stops = list(starts[1:]) + [self.num_envs]
        self.copy = copy
        self.observation_space = observation_space
        self.batched_action_space = batched_action_space
        self.obs_layout = obs_layout
        self.act_layout = act_layout
        self.rewards = buffer["rewards"]
        self.terminations = buffer["terminations"]
        self.truncations = buffer["truncations"]
        self.all_env_rows = np.arange(self.num_envs, dtype=np.int64)
        self.infos = InfoAssembler(buffer["info_ids"], buffer["info_rows"], worker_of_env, starts)
        # observations
        #: the slab of a single fixed-size observation leaf (the common case), else None
        self.observation_slab = None
        if obs_layout is None:
            self._obs_out = create_empty_array(observation_space, n=self.num_envs, fn=np.zeros)
            self._env_obs: list[Any] = [None] * self.num_envs
        else:
            self._obs_slabs = buffer.leaves("obs", obs_layout)
            self._obs_objects = [[None] * self.num_envs for leaf in obs_layout.leaves if leaf.is_object]
            if obs_layout.is_leaf and not obs_layout.has_objects:
                self.observation_slab = self._obs_slabs[0]
        # actions
        self._act_slabs = buffer.leaves("act", act_layout)
        #: per worker and action leaf, the dtype code (``ord(dtype.char)``) it reads its rows in
        self.action_dtypes = buffer["act_dtypes"]
        self._codes: tuple = ()  # the dtype codes of the actions last written
        self._codes_everywhere: tuple | None = None  # the codes every worker has, if one set
        self._codes_of_worker: list = [None] * self.num_workers  # the codes each worker's row holds
        #: the slab of a single fixed-size action leaf (one Cython call writes the common
        #: batch: an ndarray of its shape), else None; ``action_shape``: one action's shape
        self.action_slab = self._act_slabs[0] if act_layout.is_leaf and not act_layout.has_objects else None
        self.action_shape = act_layout.leaves[0].shape
        #: the ndarray the last write_actions copied into the single action slab as it was
        #: (each env's row in the dtype it came in), else None
        self.direct_actions = None

    # -- actions in -------------------------------------------------------------------------
    def write_actions(self, actions, rows: slice | np.ndarray | None = None) -> list | None:
        """Write ``actions`` for the envs ``rows`` (default: all; a slice or an index array).

        Each ndarray leaf goes into its shared slab in the dtype it came in (see
        :meth:`publish_action_dtypes`), so every env gets what SyncVectorEnv would hand it;
        then None is returned. Anything else (lists, another shape per env, object leaves
        such as Text, a dtype of more than 8 bytes) is returned as the per-env actions
        Gymnasium's ``iterate`` gives, for the pipes. As in Gymnasium, values are not checked
        against the space (an out-of-range Discrete action reaches the env); a batch of the
        wrong size raises a ``ValueError``, a scalar a ``TypeError``.
        """
        if rows is None:
            count, first = self.num_envs, 0
        elif isinstance(rows, slice):
            count, first = rows.stop - rows.start, rows.start
        else:
            count, first = len(rows), None
        self.direct_actions = None
        if self.action_slab is not None and first is not None:
            code = handoff.write_action_rows(actions, self.action_slab, first, count, self.action_shape)
            if code:
                self._codes = (code,)
                self.direct_actions = actions
                return None
        layout = self.act_layout
        if not layout.has_objects:
            try:
                values = (actions,) if layout.is_leaf else layout.split(actions)
            except (KeyError, IndexError, TypeError):
                values = None  # iterate() below raises what Gymnasium raises
            if values is not None and all(_fits_slab(v, count, leaf) for leaf, v in zip(layout.leaves, values)):
                codes = []
                for slab, value in zip(self._act_slabs, values):
                    raw = np.ascontiguousarray(value).reshape(count, -1).view(np.uint8)
                    if first is None:
                        slab[rows, : raw.shape[1]] = raw
                    else:
                        slab[first:first + count, : raw.shape[1]] = raw
                    codes.append(ord(value.dtype.char))
                self._codes = tuple(codes)
                return None
        try:
            per_env = list(iterate(self.batched_action_space, actions))
        except (TypeError, KeyError, IndexError) as exc:
            raise type(exc)(f"actions must be a batch of {count} actions for {self.act_layout.space}; "
                            f"iterating over {type(actions).__name__} failed: {exc}") from None
        if len(per_env) != count:
            raise ValueError(f"{len(per_env)} actions for {count} envs (single action space "
                             f"{self.act_layout.space})")
        return per_env

    def publish_action_dtypes(self, workers) -> None:
        """Name the dtype of each action leaf last written in the rows of ``workers`` (when it changed)."""
        codes = self._codes
        if codes == self._codes_everywhere:
            return
        if len(workers) == self.num_workers:
            self.action_dtypes[:, : len(codes)] = codes
            self._codes_everywhere = codes
            self._codes_of_worker = [codes] * self.num_workers
            return
        # (send/recv: a worker's row is written only when its codes change, which with
        # the same actions' dtype every send is once)
        known = self._codes_of_worker
        for w in workers:
            if known[w] != codes:
                self.action_dtypes[w, : len(codes)] = codes
                known[w] = codes
        self._codes_everywhere = codes if all(c == codes for c in known) else None

    # -- results out ------------------------------------------------------------------------
    def take_replies(self, replies, env_rows: np.ndarray, infos_seen: bool) -> dict[str, Any]:
        """Keep the pipe-borne observation parts of the workers' replies; return the vector
        infos of the envs ``env_rows`` (one output row each)."""
        for w, (observations, infos, has_infos) in replies:
            if observations is not None:
                if observations[0] == "all":
                    self._env_obs[self.starts[w]:self.stops[w]] = observations[1]
                else:
                    for env, position, value in observations:
                        self._obs_objects[position][env] = value
            if infos is not None:
                self.infos.receive(w, infos)
            infos_seen = infos_seen or has_infos
        if not infos_seen:
            return {}
        return self.infos.build(env_rows, len(env_rows))

    def observations(self):
        """Every env's observation, batched (copies unless ``copy=False``)."""
        if self.observation_slab is not None:  # the common case: one fixed-size leaf
            return self.observation_slab.copy() if self.copy else self.observation_slab
        if self.obs_layout is None:
            self._obs_out = concatenate(self.observation_space, self._env_obs, self._obs_out)
            return deepcopy(self._obs_out) if self.copy else self._obs_out
        return self.observation_rows(slice(None))

    def observation_rows(self, rows: slice | np.ndarray):
        """The observations of the envs ``rows`` (a slice: copies unless ``copy=False``)."""
        if self.obs_layout is None:
            items = [self._env_obs[i] for i in np.arange(self.num_envs)[rows]]
            out = create_empty_array(self.observation_space, n=len(items), fn=np.zeros)
            return concatenate(self.observation_space, items, out)
        view = isinstance(rows, slice) and not self.copy
        leaves = []
        objects = iter(self._obs_objects)
        for slab in self._obs_slabs:
            if slab is None:
                values = next(objects)
                leaves.append(tuple(values[rows] if isinstance(rows, slice) else [values[i] for i in rows.tolist()]))
            else:
                leaves.append(slab[rows] if view or not isinstance(rows, slice) else slab[rows].copy())
        return leaves[0] if self.obs_layout.is_leaf else self.obs_layout.join(leaves)

    def release(self) -> None:
        """Drop every view of the block (the vector env is closed): its mapping goes with the
        last one, which may be a ``copy=False`` observation the user still holds."""
        self.rewards = self.terminations = self.truncations = self.infos = None
        self.observation_slab = self.action_slab = self.action_dtypes = self.direct_actions = None
        self._obs_slabs = self._act_slabs = []

    def clear_infos(self, rows: slice) -> None:
        """No info for the envs ``rows`` in the next results (their worker sits a command out)."""
        self.infos.ids[rows] = 0


def _fits_slab(value, count: int, leaf) -> bool:
    """Whether an action leaf's batch can go into its slab as it is: an ndarray of
    ``count`` rows of the leaf's shape, of a numeric dtype of at most 8 bytes."""
    return (isinstance(value, np.ndarray) and value.shape == (count, *leaf.shape)
            and value.dtype.kind in "biuf" and value.dtype.itemsize <= 8 and value.dtype.isnative)
