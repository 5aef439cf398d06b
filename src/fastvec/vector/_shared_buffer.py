"""One shared-memory block per vector env, carved into aligned NumPy views.

The parent lays the block out (:func:`plan`), creates it, and sends the plan to
the workers, which attach by name. Sections: the control rows, one slab per
observation leaf and per action leaf (``[num_envs, *leaf_shape]``), rewards
(float64), terminations and truncations (bool), as SyncVectorEnv returns them.
"""
from __future__ import annotations

import os
import secrets
import sys
from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory

import numpy as np

from fastvec.spaces import Layout
from fastvec.vector._protocol import ROW_WORDS

_ALIGN = 64


@dataclass(frozen=True)
class Section:
    """Where one array lives in the block."""

    name: str
    offset: int
    shape: tuple
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


def plan(num_envs: int, num_workers: int, obs_layout: Layout | None, act_layout: Layout) -> tuple[list[Section], int]:
    """Lay out every section, each 64-byte aligned; returns (sections, total bytes)."""
    sections: list[Section] = []
    offset = 0

    def add(name: str, shape: tuple, dtype) -> None:
        nonlocal offset
        section = Section(name, offset, tuple(int(s) for s in shape), np.dtype(dtype).str)
        sections.append(section)
        offset += -(-max(section.nbytes, 1) // _ALIGN) * _ALIGN

    add("ctrl", (num_workers + 1, ROW_WORDS), np.uint32)  # + the shared row
    if obs_layout is not None:
        for k, leaf in enumerate(obs_layout.leaves):
            add(f"obs{k}", (num_envs, *leaf.shape), leaf.dtype)
    for k, leaf in enumerate(act_layout.leaves):
        add(f"act{k}", (num_envs, *leaf.shape), leaf.dtype)
    add("rewards", (num_envs,), np.float64)
    add("terminations", (num_envs,), np.bool_)
    add("truncations", (num_envs,), np.bool_)
    return sections, max(offset, _ALIGN)


class SharedBuffer:
    """A shared-memory block and the NumPy views over its sections.

    The creator owns the block and must :meth:`unlink` it; attachers only
    :meth:`close` their mapping.
    """

    def __init__(self, sections: list[Section], size: int, name: str | None = None):
        self.sections = sections
        self.size = size
        self.owner = name is None
        if self.owner:
            name = f"fastvec_{os.getpid()}_{secrets.token_hex(4)}"
            self._shm = shared_memory.SharedMemory(name=name, create=True, size=size)
        else:
            self._shm = _attach_untracked(name)
        self.name = self._shm.name
        self.views = {
            s.name: np.ndarray(s.shape, dtype=np.dtype(s.dtype), buffer=self._shm.buf, offset=s.offset)
            for s in sections
        }
        if self.owner:
            for view in self.views.values():
                view[...] = 0

    def __getitem__(self, name: str) -> np.ndarray:
        return self.views[name]

    def leaves(self, prefix: str) -> list[np.ndarray]:
        """The per-leaf slabs of ``prefix`` ("obs" or "act"), in leaf order."""
        out, k = [], 0
        while f"{prefix}{k}" in self.views:
            out.append(self.views[f"{prefix}{k}"])
            k += 1
        return out

    def close(self) -> None:
        """Drop the views and this process's mapping."""
        self.views = {}
        try:
            self._shm.close()
        except BufferError:
            # A caller still holds a zero-copy view (copy=False); the mapping goes with it.
            pass

    def unlink(self) -> None:
        """Remove the block from the system (creator only)."""
        try:
            self._shm.unlink()
        except FileNotFoundError:
            pass


def _attach_untracked(name: str) -> shared_memory.SharedMemory:
    """Attach without registering with this process's resource tracker.

    Before Python 3.13 attaching registers the block, and a worker's tracker would
    then unlink (or warn about) a block the parent still owns.
    """
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)
    # Only ever called inside a worker process, before it runs any env code.
    register = resource_tracker.register
    resource_tracker.register = lambda *args, **kwargs: None
    try:
        return shared_memory.SharedMemory(name=name)
    finally:
        resource_tracker.register = register
