"""One shared-memory block per vector env, carved into aligned NumPy views.

The parent lays the block out (:func:`plan`), creates it, and sends the plan to
the workers, which attach by name. Sections: the control rows, one slab per
observation leaf and per action leaf (``[num_envs, *leaf_shape]``), rewards
(float64), terminations and truncations (bool), as SyncVectorEnv returns them.

Who frees the block: the parent unlinks it on close (also at garbage collection
and interpreter exit). If the parent dies without doing so (SIGKILL, a crash),
its workers notice and unlink it (:func:`unlink_block`). So the block is not
registered with Python's resource tracker, whose first use starts a separate
Python process that competes with the first ~50 ms of stepping on a 2-core
machine; only a vector env with no worker process, where nobody would be left
to clean up, registers it.
"""
from __future__ import annotations

import contextlib
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


def new_block_name() -> str:
    """A name no other block has: the creating process's pid and a random token."""
    return f"fastvec_{os.getpid()}_{secrets.token_hex(4)}"


class SharedBuffer:
    """A shared-memory block and the NumPy views over its sections.

    ``create=True`` makes the block: its creator owns it and must :meth:`unlink`
    it; attachers only :meth:`close` their mapping. ``track=True`` (creator only)
    also registers it with Python's resource tracker, which unlinks it should the
    creator die first.
    """

    def __init__(self, sections: list[Section], size: int, name: str, *, create: bool, track: bool = False):
        if track and not create:
            raise ValueError("only the creator of a block may register it with the resource tracker")
        self.sections = sections
        self.size = size
        self.owner = create
        self.track = track
        self._shm = _open(name, create=create, size=size if create else 0, track=track)
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
        """Remove the block from the system (the creator, or a worker whose creator died)."""
        _unlink(self._shm, self.track)


def unlink_block(name: str) -> None:
    """Remove the block called ``name``, if it still exists.

    A worker calls this when it finds its parent dead (several may race: the
    first one wins, the others find nothing).
    """
    try:
        shm = _open(name, create=False, size=0, track=False)
    except FileNotFoundError:
        return
    shm.close()
    _unlink(shm, track=False)


def _open(name: str, *, create: bool, size: int, track: bool) -> shared_memory.SharedMemory:
    if track:
        return shared_memory.SharedMemory(name=name, create=create, size=size)
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, create=create, size=size, track=False)
    with _resource_tracker_bypassed():
        return shared_memory.SharedMemory(name=name, create=create, size=size)


def _unlink(shm: shared_memory.SharedMemory, track: bool) -> None:
    try:
        if track or sys.version_info >= (3, 13):  # 3.13+: an untracked block unregisters nothing
            shm.unlink()
        else:
            with _resource_tracker_bypassed():
                shm.unlink()
    except FileNotFoundError:
        pass


@contextlib.contextmanager
def _resource_tracker_bypassed():
    """Before Python 3.13, SharedMemory registers every block it creates or attaches
    (and unregisters it on unlink), starting the tracker process on first use, and
    has no switch for it: silence those two calls for the duration.

    In a worker this also keeps its tracker from unlinking (or warning about) a block
    the parent still owns. The calls are module globals, so another thread opening a
    SharedMemory at the same instant would go untracked too (it still works).
    """
    register, unregister = resource_tracker.register, resource_tracker.unregister
    resource_tracker.register = resource_tracker.unregister = lambda *args, **kwargs: None
    try:
        yield
    finally:
        resource_tracker.register, resource_tracker.unregister = register, unregister
