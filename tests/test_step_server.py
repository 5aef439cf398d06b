"""A worker's compiled command loop (fastvec.vector._worker.command_loop.StepServer), driven from a thread.

The thread plays the worker; the test plays the caller, through the same control words
(fastvec.vector._block.handoff) as FastVectorEnv. Every FastVectorEnv test runs its workers' steps
through it too; these check its contract piece by piece.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from fastvec.vector._block import handoff
from fastvec.vector._block.protocol import Command, Status
from fastvec.vector._worker.command_loop import StepServer


class FakeLoop:
    """Stands in for EnvLoop: keeps each step's actions, answers quiet_status from a script."""

    def __init__(self, statuses, fail_at=None):
        self.statuses = list(statuses)
        self.actions = []
        self.fail_at = fail_at

    def step(self, actions):
        self.actions.append(actions)
        if len(self.actions) == self.fail_at:
            raise RuntimeError(f"env failed at step {self.fail_at}")

    def quiet_status(self):
        return self.statuses.pop(0)


class Caller:
    """The caller's side of one worker's control row, and the server serving in a thread."""

    def __init__(self, loop, slab, views=None):
        self.ctrl = np.zeros((2, 16), np.uint32)  # one worker's row + the shared row
        self.codes = np.array([ord(slab.dtype.char)], np.uint32)
        self.slab = slab
        self.views = [] if views is None else views

        def view(code):
            self.views.append(chr(code))
            return self.slab.view(np.dtype(chr(code)))

        self.server = StepServer(self.ctrl, 0, loop, self.codes, view, 1e-5, 1e-4, 1e-4)
        self.outcome = None
        self.thread = None

    def start(self, timeout=5.0):
        def run():
            try:
                self.outcome = ("returned", self.server.serve(timeout))
            except BaseException as exc:  # (what the worker's Python loop would catch)
                self.outcome = ("raised", exc)

        self.thread = threading.Thread(target=run)
        self.thread.start()

    def command(self, command):
        """Hand the worker a command and wait until it is done or the server has returned."""
        seq = handoff.send_command(self.ctrl, 0, command)
        for _ in range(1000):
            if handoff.is_done(self.ctrl, 0) or not self.thread.is_alive():
                break
            self.thread.join(0.005)
        return seq

    def join(self):
        self.thread.join(5)
        assert not self.thread.is_alive()
        return self.outcome


def test_plain_steps_run_in_the_server_the_rest_returns_to_python():
    loop = FakeLoop([Status.OK, Status.INFOS, -1])
    caller = Caller(loop, np.zeros((2, 3), np.float32))
    caller.start()
    for value, status in ((1.0, Status.OK), (2.0, Status.INFOS)):
        caller.slab[:] = value
        caller.command(Command.STEP)
        assert handoff.is_done(caller.ctrl, 0)
        assert handoff.status(caller.ctrl, 0) == status
    caller.slab[:] = 3.0
    seq = caller.command(Command.STEP)  # quiet_status -1: something for the pipe
    assert caller.join() == ("returned", (seq, Command.STEP, True))
    assert not handoff.is_done(caller.ctrl, 0)  # (Python finishes it)
    assert [a.tolist() for a in loop.actions] == [[[v] * 3] * 2 for v in (1.0, 2.0, 3.0)]
    # Each step's rows are a private copy: the caller writes the next step's into the slab.
    assert not any(np.shares_memory(a, caller.slab) for a in loop.actions)
    assert caller.views == ["f"]  # the view is made once per dtype code


def test_other_commands_return_to_python_untouched():
    loop = FakeLoop([])
    caller = Caller(loop, np.zeros((2, 3), np.float32))
    handoff.finish_command(caller.ctrl, 0, 0, 0)
    for command in (Command.PIPE, Command.STEP_PIPE, Command.CLOSE):
        caller.start()
        seq = caller.command(command)
        assert caller.join() == ("returned", (seq, command, False))
        handoff.finish_command(caller.ctrl, 0, seq, Status.OK)
    assert loop.actions == []


def test_steps_without_a_single_action_slab_return_to_python():
    loop = FakeLoop([])
    caller = Caller(loop, np.zeros((2, 3), np.float32))
    caller.server = StepServer(caller.ctrl, 0, loop, caller.codes, None, 1e-5, 1e-4, 1e-4)
    caller.start()
    seq = caller.command(Command.STEP)
    assert caller.join() == ("returned", (seq, Command.STEP, False))
    assert loop.actions == []


def test_one_number_per_env_is_the_view_and_a_new_dtype_code_a_new_view():
    loop = FakeLoop([Status.OK, Status.OK, -1])
    caller = Caller(loop, np.zeros(4, np.int64))
    caller.start()
    caller.slab[:] = [1, 2, 3, 4]
    caller.command(Command.STEP)
    caller.slab[:] = [5, 6, 7, 8]
    caller.command(Command.STEP)
    caller.codes[0] = ord("i")  # the caller names another dtype (here: int32 over the same bytes)
    seq = caller.command(Command.STEP)
    assert caller.join() == ("returned", (seq, Command.STEP, True))
    assert caller.views == [np.dtype(np.int64).char, "i"]
    assert loop.actions[0] is loop.actions[1]  # (EnvLoop's view[j] is a NumPy scalar: a copy)
    assert loop.actions[2].dtype == np.int32


def test_an_env_error_propagates_with_the_command_taken():
    loop = FakeLoop([Status.OK], fail_at=2)
    caller = Caller(loop, np.zeros((1, 2), np.float64))
    caller.start()
    caller.command(Command.STEP)
    seq = caller.command(Command.STEP)
    kind, exc = caller.join()
    assert kind == "raised" and isinstance(exc, RuntimeError) and "step 2" in str(exc)
    assert caller.server.stepping and caller.server.seq == seq
    assert not handoff.is_done(caller.ctrl, 0)  # (Python reports it and finishes the command)


def test_no_command_returns_none_after_the_timeout():
    caller = Caller(FakeLoop([]), np.zeros((1, 2), np.float32))
    caller.start(timeout=0.02)
    assert caller.join() == ("returned", None)
    assert caller.server.seq == 0


def test_checks_its_arguments():
    ctrl = np.zeros((2, 16), np.uint32)
    with pytest.raises(IndexError, match="worker 1 out of range"):
        StepServer(ctrl, 1, FakeLoop([]), np.zeros(1, np.uint32), None, 1e-5, 1e-4, 1e-4)
    with pytest.raises(ValueError, match="action_codes"):
        StepServer(ctrl, 0, FakeLoop([]), np.zeros(1, np.int64), None, 1e-5, 1e-4, 1e-4)
