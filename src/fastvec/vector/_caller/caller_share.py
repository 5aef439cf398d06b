"""Caller side: the share of the envs the calling process steps itself (``step_in_caller=True``).

:class:`CallerShare` takes the commands a :class:`~fastvec.vector._caller.remote_worker.RemoteWorker`
takes (``dispatch``, ``start_step``, ``forget``), but runs them in the calling process, through
the same :class:`~fastvec.vector._worker.process.Worker` code a worker process runs: when the caller
waits (:meth:`run_pending`), or at once in the compiled step (:meth:`step_now`). What a command
gave is kept (:attr:`outcome`) until the wait for the worker processes is over, so that a wait
interrupted there (Ctrl-C, a timeout) and resumed does not lose it.
"""
from __future__ import annotations

from typing import Any, Callable

from fastvec.vector._block.protocol import RECOVERABLE
from fastvec.vector._block.messages import PipeCommand
from fastvec.vector._worker.process import Worker
from fastvec.vector._caller.worker_faults import RecoverableError, in_caller

__all__ = ["CallerShare"]


class CallerShare:
    """Worker 0's envs, stepped by the caller.

    Args:
        worker: the envs and their views of the shared block.
        on_fatal: called with (exception, phase) when an env fails in a way the vector env
            does not survive; it closes the vector env and raises.
    """

    def __init__(self, worker: Worker, on_fatal: Callable[[BaseException, str], None]):
        self.worker = worker
        self.index = worker.index
        self.stop = worker.stop
        #: what the last command gave: (status, reply), a RecoverableError, or None
        self.outcome: Any = None
        self._job: tuple | None = None  # (phase, method, args) to run at the next wait
        self._step_job = ("step", worker.step, ())
        self._methods = {PipeCommand.RESET: worker.reset, PipeCommand.CALL: worker.call,
                         PipeCommand.SETATTR: worker.set_attr}
        self._on_fatal = on_fatal

    # -- commands (as RemoteWorker's) ----------------------------------------------------------
    def dispatch(self, command: PipeCommand, payload: tuple) -> None:
        """Queue the pipe command ``command`` (reset, call, setattr), run at the next wait."""
        self._job = (command.value, self._methods[command], payload)

    def start_step(self, chunk: list | None = None, actions=None) -> None:
        """Queue a step: actions from the shared slabs, or one per env in ``chunk``, or this
        share's rows of ``actions`` (every env's actions, as they went into the slabs)."""
        if chunk is not None:
            self._job = ("step", self.worker.step, (chunk,))
        elif actions is not None:
            self._job = ("step", self.worker.step, (actions[: self.stop],))
        else:
            self._job = self._step_job

    def forget(self) -> None:
        """Drop the queued command and what the last one gave (a new command starts)."""
        self._job = None
        self.outcome = None

    # -- running ---------------------------------------------------------------------------------
    def run_pending(self) -> None:
        """Run the queued command, if any, and keep what it gave in :attr:`outcome`."""
        if self._job is None:
            return
        phase, method, args = self._job
        self._job = None
        try:
            self.outcome = method(*args)
        except Exception as exc:
            if phase not in RECOVERABLE:
                self._on_fatal(exc, phase)
            self.outcome = RecoverableError(in_caller(exc, self.worker.current_env, phase, closed=False))
        except BaseException as exc:
            self._on_fatal(exc, phase)

    def step_now(self, actions) -> tuple[int, Any]:
        """Step with this share's rows of ``actions`` at once (the compiled step); the outcome
        is also kept in :attr:`outcome`."""
        self._job = None
        try:
            outcome = self.worker.step(actions)
        except BaseException as exc:
            self._on_fatal(exc, "step")
            raise  # (on_fatal raises)
        self.outcome = outcome
        return outcome

    def take_outcome(self) -> Any:
        """What the last command gave, forgotten here."""
        outcome, self.outcome = self.outcome, None
        return outcome

    @property
    def current_env(self) -> int | None:
        return self.worker.current_env
