"""Both sides: one shared-memory block per vector env, carved into aligned NumPy views.

The caller lays the block out (:func:`plan`), creates it, and hands it to each
worker. Sections: the statistics region (:mod:`fastvec.vector._block.stats`), the control rows, one slab per fixed-size observation leaf
(``[num_envs, *leaf_shape]``) and per action leaf (raw rows, see :func:`plan`),
rewards (float64), terminations and truncations (bool) as SyncVectorEnv returns
them, and the info section (see :mod:`fastvec.vector._infos.codec`).

The block has no name anyone could leave behind. It is an anonymous file: a
``memfd`` on Linux; elsewhere a POSIX shared-memory object whose name is removed
the moment it is opened. The caller sends its file descriptor to each worker over
the worker's pipe (``SCM_RIGHTS``); every process maps it, and the kernel frees
the memory when the last mapping goes, however the processes end: ``close()``,
a crash, or a SIGKILL of the whole process group (``scancel``, ``docker kill``,
an OOM kill), which kills the workers in the same instant and so leaves nobody
to unlink a named block. Gymnasium's AsyncVectorEnv is safe for the same reason
(``multiprocessing``'s shared arrays live in an arena file unlinked right after
it is made).
"""
from __future__ import annotations

import mmap
import os
import secrets
from dataclasses import dataclass
from multiprocessing import reduction

import numpy as np

from fastvec.spaces import Layout
from fastvec.vector._block.protocol import Word
from fastvec.vector._block.stats import words as stats_words

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


def plan(num_envs: int, num_workers: int, obs_layout: Layout | None, act_layout: Layout,
         info_bytes: int) -> tuple[list[Section], int]:
    """Lay out every section, each 64-byte aligned; returns (sections, total bytes).

    Only the fixed-size leaves of the layouts get slabs (object leaves travel on the pipes).
    ``info_bytes``: the size of each env's info row.
    """
    sections: list[Section] = []
    offset = 0

    def add(name: str, shape: tuple, dtype) -> None:
        nonlocal offset
        section = Section(name, offset, tuple(int(s) for s in shape), np.dtype(dtype).str)
        sections.append(section)
        offset += -(-max(section.nbytes, 1) // _ALIGN) * _ALIGN

    # First, at offset 0, so that a reader in another process finds it (fastvec.monitor).
    add("stats", (stats_words(num_workers, num_envs),), np.uint64)
    add("ctrl", (num_workers + 1, Word.ROW_WORDS), np.uint32)  # + the shared row
    if obs_layout is not None:
        for k, leaf in enumerate(obs_layout.leaves):
            if not leaf.is_object:
                add(f"obs{k}", (num_envs, *leaf.shape), leaf.dtype)
    # An action leaf's rows hold its values in whatever dtype the caller gave (up to 8
    # bytes a value), named per worker in act_dtypes (a dtype character code per leaf).
    for k, leaf in enumerate(act_layout.leaves):
        if not leaf.is_object:
            add(f"act{k}", (num_envs, 8 * leaf.size), np.uint8)
    add("act_dtypes", (num_workers, max(len(act_layout.leaves), 1)), np.uint32)
    add("rewards", (num_envs,), np.float64)
    add("terminations", (num_envs,), np.bool_)
    add("truncations", (num_envs,), np.bool_)
    add("info_ids", (num_envs,), np.uint32)
    add("info_rows", (num_envs, info_bytes), np.uint8)
    return sections, max(offset, _ALIGN)


class SharedBuffer:
    """A shared-memory block and the NumPy views over its sections.

    ``fd=None`` creates the block (an anonymous file, zero-filled); otherwise ``fd`` is a
    block received from its creator (:func:`receive`), mapped and then closed. The creator
    keeps its descriptor until :meth:`release_fd`, once every worker has its own.
    """

    def __init__(self, sections: list[Section], size: int, fd: int | None = None):
        self.sections = sections
        self.size = size
        self.fd = _anonymous_file(size) if fd is None else fd
        try:
            self._mmap = mmap.mmap(self.fd, size)
        except BaseException:
            self.release_fd()
            raise
        if fd is not None:
            self.release_fd()
        self.views = {
            s.name: np.ndarray(s.shape, dtype=np.dtype(s.dtype), buffer=self._mmap, offset=s.offset)
            for s in sections
        }

    def __getitem__(self, name: str) -> np.ndarray:
        return self.views[name]

    def leaves(self, prefix: str, layout: Layout) -> list[np.ndarray | None]:
        """The per-leaf slabs of ``prefix`` ("obs" or "act"), in leaf order (None for object leaves)."""
        return [self.views.get(f"{prefix}{k}") for k in range(len(layout.leaves))]

    def send(self, pipe, pid: int) -> None:
        """Hand the block to the worker process ``pid`` at the other end of ``pipe``."""
        reduction.send_handle(pipe, self.fd, pid)

    def release_fd(self) -> None:
        """Close this process's descriptor (the mapping stays)."""
        if self.fd is not None and self.fd >= 0:
            os.close(self.fd)
        self.fd = None

    def close(self) -> None:
        """Drop the views and this object's hold on the mapping.

        The mapping itself goes when its last array does: NumPy arrays over an ``mmap``
        keep the object alive but hold no buffer export, so closing it by hand would
        unmap memory that a zero-copy view (``copy=False``) still points at.
        """
        self.release_fd()
        self.views = {}
        self._mmap = None


# The name every block's memory carries: a label in /proc/<pid>/maps and /proc/<pid>/fd
# ("/memfd:fastvec_<pid> (deleted)"), by which the monitor (fastvec.monitor) finds the blocks
# of another process.
BLOCK_NAME_PREFIX = "fastvec_"


def receive(pipe) -> int:
    """Worker side of :meth:`SharedBuffer.send`: the block's file descriptor."""
    return reduction.recv_handle(pipe)


def _anonymous_file(size: int) -> int:
    """A descriptor of ``size`` zero bytes of shared memory that no name refers to."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create(f"{BLOCK_NAME_PREFIX}{os.getpid()}", os.MFD_CLOEXEC)
    else:  # pragma: no cover - macOS, BSDs
        import _posixshmem

        name = f"/{BLOCK_NAME_PREFIX}{os.getpid()}_{secrets.token_hex(8)}"
        fd = _posixshmem.shm_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        _posixshmem.shm_unlink(name)  # the name existed for this one call; the memory lives on
    try:
        os.ftruncate(fd, size)
    except BaseException:
        os.close(fd)
        raise
    return fd
