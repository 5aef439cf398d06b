"""Caller side: one worker process, as the pool sees it.

:class:`RemoteWorker` owns the process and the caller's end of its pipe: it starts the
process, hands it commands (a word in its control row, and a message on the pipe when the
command has one), keeps a message read off the pipe until the command it answers is over,
says whether and how the process ended, and ends it. :class:`~fastvec.vector._caller.caller_share.CallerShare`
offers the same commands for the share the caller steps itself.
"""
from __future__ import annotations

import os
import pickle
import time
from typing import Any, Callable, Sequence

import numpy as np
from gymnasium.vector.utils import CloudpickleWrapper

from fastvec.vector._block import handoff, protocol
from fastvec.vector._block.messages import PipeCommand, PipeRequest
from fastvec.vector._block.protocol import CMD_PIPE as _PIPE
from fastvec.vector._block.protocol import CMD_STEP as _STEP
from fastvec.vector._block.protocol import CMD_STEP_PIPE as _STEP_PIPE
from fastvec.vector._block.protocol import Command
from fastvec.vector._block.stats import StatsRegion
from fastvec.vector._wait.policy import WorkerWaits
from fastvec.vector._worker.process import worker_main

__all__ = ["RemoteWorker", "end_workers"]

_NOTHING = object()


class RemoteWorker:
    """Worker ``index``: a process stepping the envs ``[first, stop)`` (see :mod:`fastvec.vector._worker.process`).

    Args:
        ctx: the multiprocessing context that starts it.
        index, first: its worker index and the index of its first env.
        env_fns: its envs' constructors.
        daemon, autoreset_mode: as the pool takes them.
        waits: how its waits for a command spin (the vector env's wait policy).
        cpu: the CPU it is pinned to (None: not pinned); ``follow_caller``: it leaves that
            CPU while the caller keeps more than one core busy (``pin_workers=None``).
        restart: with ``env_failure="restart"``, its envs' seeds and restart counts, and
            whether it replaces a worker that failed (a :class:`~fastvec.vector._block.restarts.RestartState`).

    Raises:
        TypeError: the constructors cannot be sent to a process of this start method.
    """

    def __init__(self, ctx, index: int, first: int, env_fns: Sequence[Callable], *, daemon: bool, autoreset_mode,
                 waits: WorkerWaits, cpu: int | None, follow_caller: bool, restart=None):
        self.index = index
        self.first = first
        self.stop = first + len(env_fns)
        self.ctrl: np.ndarray | None = None  # the shared control rows, once attached
        #: the statistics region (stats=True), once attached: counts the pipe's traffic
        self.stats: StatsRegion | None = None
        #: a message read off the pipe for the pending command (kept when a wait for the
        #: rest was interrupted), see :meth:`take_received`
        self.received: Any = _NOTHING
        self.pipe, child_pipe = ctx.Pipe()
        self.process = ctx.Process(
            target=worker_main,
            name=f"Worker<FastVectorEnv>-{index}",
            args=(index, [CloudpickleWrapper(fn) for fn in env_fns], first, child_pipe, self.pipe, os.getpid(),
                  autoreset_mode, waits, cpu, follow_caller, restart),
            daemon=daemon,
        )
        try:
            self.process.start()
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            self.pipe.close()
            raise TypeError(
                f"could not send the env constructors of envs {first}..{self.stop - 1} "
                f"to a worker process started with {ctx.get_start_method()!r}: {exc}. "
                "Constructors must be picklable (cloudpickle handles lambdas and closures) "
                "unless the start method is 'fork'."
            ) from exc
        except BaseException:
            self.pipe.close()
            raise
        finally:
            child_pipe.close()

    # -- commands ---------------------------------------------------------------------------
    def dispatch(self, command: PipeCommand, payload: tuple) -> None:
        """Start the pipe command ``command`` (reset, call, setattr) with ``payload``."""
        self._count(protocol.send(self.pipe, PipeRequest(command, payload)))
        handoff.send_command(self.ctrl, self.index, _PIPE)

    def start_step(self, chunk: list | None = None, actions=None) -> None:
        """Start a step: actions in the shared slabs, or one per env in ``chunk`` on the pipe.
        (``actions``, every env's actions as they went into the slabs, is for CallerShare:
        this worker reads its own rows from the slabs.)"""
        if chunk is None:
            handoff.send_command(self.ctrl, self.index, _STEP)
        else:
            self._count(protocol.send(self.pipe, chunk))
            handoff.send_command(self.ctrl, self.index, _STEP_PIPE)

    def receive(self) -> Any:
        """The next message on the pipe (there must be one: see ``WorkerPool.recv``)."""
        if self.stats is None:
            return self.pipe.recv()
        message, size = protocol.receive(self.pipe)
        self._count(size)
        return message

    def _count(self, size: int) -> None:
        if self.stats is not None:
            self.stats.count_pipe(self.index, size)

    def forget(self) -> None:
        """Drop what an interrupted and abandoned wait kept of the last command."""
        self.received = _NOTHING

    def has_received(self) -> bool:
        return self.received is not _NOTHING

    def take_received(self) -> Any:
        message, self.received = self.received, _NOTHING
        return message

    # -- the process ------------------------------------------------------------------------
    @property
    def pid(self) -> int:
        return self.process.pid

    def exitcode(self, wait: float = 0.0) -> int | None:
        """The process's exit code (negative: the signal that ended it), or None while it runs."""
        if wait:
            self.process.join(wait)
        return self.process.exitcode

    def ask_to_close(self) -> None:
        """Send CLOSE if the process runs and is idle (a busy one is ended by :func:`end_workers`)."""
        if self.ctrl is not None and self.process.is_alive() and handoff.is_done(self.ctrl, self.index):
            handoff.send_command(self.ctrl, self.index, Command.CLOSE)


def end_workers(workers: list, buffers: list, envs: list, timeout: float = 0.0) -> None:
    """End the worker processes (politely for ``timeout`` seconds, then by force), close their
    pipes and the caller's own ``envs``, and drop the shared block (``buffers``).

    Also the garbage-collection / interpreter-exit path, so it holds no reference to the env.
    """
    for env in envs:
        try:
            env.close()
        except Exception:
            pass
    envs.clear()
    started = [w.process for w in workers if w.process.pid is not None]  # (pid: None until started)
    deadline = time.monotonic() + timeout
    for process in started:
        remaining = deadline - time.monotonic()
        if remaining > 0:
            process.join(remaining)
        if process.is_alive():
            process.terminate()
    for process in started:
        process.join(1.0)
        if process.is_alive():
            process.kill()
            process.join(1.0)
    for worker in workers:
        try:
            worker.pipe.close()
        except OSError:
            pass
    for k, buffer in enumerate(buffers):
        if buffer is not None:
            buffer.close()
            buffers[k] = None
