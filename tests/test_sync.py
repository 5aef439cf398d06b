"""The Cython flag/copy primitives of fastvec/vector/handoff.pyx against plain NumPy / Python."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastvec.vector._block import handoff

DTYPES = [np.float32, np.float64, np.uint8, np.int64, np.bool_, np.int8]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 9), shape=st.lists(st.integers(0, 4), max_size=3), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 2**32 - 1))
def test_stack_rows_equals_np_stack(n, shape, dtype, seed):
    rng = np.random.default_rng(seed)
    rows = [rng.integers(0, 2, size=shape).astype(dtype) for _ in range(n)]
    out = np.full((n, *shape), 7, dtype=dtype)
    assert handoff.stack_rows(rows, out)
    if n:
        np.testing.assert_array_equal(out, np.stack(rows))


@pytest.mark.parametrize("rows", [
    [np.zeros(3, np.float64)],               # another dtype: np.stack casts, we decline
    [np.zeros(4, np.float32)],               # another shape
    [np.zeros(6, np.float32)[::2]],          # not contiguous
    [np.zeros(3, ">f4")],                    # byte-swapped
    [1.5],                                   # not an array
    [np.float32(1.0)],                       # a NumPy scalar
])
def test_stack_rows_declines_and_writes_nothing(rows):
    out = np.full((1, 3), 9, np.float32)
    assert not handoff.stack_rows(rows, out)
    assert (out == 9).all()


def test_command_handshake_across_threads():
    """A worker thread waits for commands and finishes them; the parent waits for all / any."""
    workers = 3
    ctrl = np.zeros((workers + 1, 16), np.uint32)
    done_commands = []

    def worker(w):
        seq = 0
        while True:
            got = handoff.wait_command(ctrl, w, seq, 1e-5, 1.0)
            if got is None:
                continue
            seq, command = got
            done_commands.append((w, command))
            handoff.finish_command(ctrl, w, seq, 0)
            if command == 99:
                return

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    active = np.ones(workers, np.uint8)
    for command in (5, 6, 7):
        for w in range(workers):
            handoff.send_command(ctrl, w, command)
        assert handoff.wait_all_done(ctrl, active, 1e-5, 5.0) == -1
    handoff.send_command(ctrl, 1, 8)
    only_1 = np.array([0, 1, 0], np.uint8)
    assert handoff.wait_any_done(ctrl, only_1, 0, 1e-5, 5.0) == 1
    for w in range(workers):
        handoff.wait_all_done(ctrl, active, 1e-5, 5.0)
        handoff.send_command(ctrl, w, 99)
    for t in threads:
        t.join(5)
    assert sorted(c for w, c in done_commands if w == 0) == [5, 6, 7, 99]
    assert sorted(c for w, c in done_commands if w == 1) == [5, 6, 7, 8, 99]


def test_send_command_refuses_a_busy_worker():
    ctrl = np.zeros((2, 16), np.uint32)
    handoff.send_command(ctrl, 0, 1)
    with pytest.raises(RuntimeError, match="busy"):
        handoff.send_command(ctrl, 0, 1)
    with pytest.raises(IndexError):
        handoff.send_command(ctrl, 1, 1)


def test_waits_time_out():
    ctrl = np.zeros((2, 16), np.uint32)
    ctrl[0, 0] = 1  # a command the (absent) worker never finishes
    start = time.perf_counter()
    assert handoff.wait_all_done(ctrl, np.ones(1, np.uint8), 1e-5, 0.05) == 0
    assert handoff.wait_any_done(ctrl, np.ones(1, np.uint8), 0, 1e-5, 0.05) == -1
    assert handoff.wait_command(ctrl, 0, 1, 1e-5, 0.05) is None
    assert time.perf_counter() - start < 2.0



@settings(max_examples=80, deadline=None)
@given(done=st.lists(st.booleans(), min_size=1, max_size=6), data=st.data())
def test_done_status_bits_is_status_bits_once_all_are_done(done, data):
    """-1 while any worker in the mask runs a command, else exactly status_bits (plain-Python reference)."""
    workers = len(done)
    ctrl = np.zeros((workers + 1, 16), np.uint32)
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=workers, max_size=workers)), np.uint8)
    statuses = data.draw(st.lists(st.integers(0, 40), min_size=workers, max_size=workers))
    for w in range(workers):
        seq = handoff.send_command(ctrl, w, 1)
        if done[w]:
            handoff.finish_command(ctrl, w, seq, statuses[w])
    busy = any(mask[w] and not done[w] for w in range(workers))
    expected = 0
    for w in range(workers):
        if mask[w]:
            expected |= 1 << min(statuses[w] if done[w] else 0, 31)
    if busy:
        assert handoff.done_status_bits(ctrl, mask) == -1
    else:
        assert handoff.done_status_bits(ctrl, mask) == expected == handoff.status_bits(ctrl, mask)
