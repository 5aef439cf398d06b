"""Threaded kernels in a process forked after they ran threads.

GNU libgomp's thread pool does not survive fork(): without the guard in
fastvec/_ext/_omp.pxd, the child's first parallel region waited forever.
"""
from __future__ import annotations

import multiprocessing
import sys

import numpy as np
import pytest

import fastvec

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="no fork on Windows")


def _threaded_results(tree: fastvec.SumTree, rollout: np.ndarray) -> tuple[list, list]:
    indices = tree.sample(4096, np.random.default_rng(0), num_threads=2)
    advantages, _ = fastvec.gae(rollout, rollout, rollout, rollout[0], rollout[0],
                                gamma=0.9, gae_lambda=0.9, num_threads=2)
    return indices.tolist(), advantages.tolist()


def _child(tree, rollout, queue) -> None:
    queue.put(_threaded_results(tree, rollout))


def test_threaded_search_and_gae_in_a_forked_child():
    tree = fastvec.SumTree(1 << 16)
    tree.update(np.arange(1 << 16), np.random.default_rng(1).random(1 << 16))
    rollout = np.random.default_rng(2).random((16, 1024)).astype(np.float32)
    expected = _threaded_results(tree, rollout)  # the parent's thread pool now exists
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(tree, rollout, queue))
    child.start()
    try:
        got = queue.get(timeout=60)
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
            child.join()
    assert child.exitcode == 0
    assert got == expected
