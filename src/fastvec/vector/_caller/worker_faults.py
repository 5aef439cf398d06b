"""Caller side: a worker's fault turned into an exception in the caller.

An env's own exception comes back with its type, annotated with the env and the worker
(its traceback in the worker as the cause); what cannot be unpickled becomes a
:class:`~fastvec.errors.WorkerError`; a worker process that ended becomes a
:class:`~fastvec.errors.WorkerDiedError` that says how it ended. Failed workers are logged
as AsyncVectorEnv logs them. :class:`~fastvec.vector._caller.pool.WorkerPool` decides when (and
closes itself first, for the faults that end the vector env).
"""
from __future__ import annotations

import pickle
import signal

from gymnasium import logger

from fastvec.errors import RemoteTraceback, WorkerDiedError, WorkerError, annotate
from fastvec.vector._block.messages import ErrorReport

__all__ = ["RecoverableError", "log_failed_workers", "remote_exception", "worker_died", "in_caller"]


class RecoverableError(Exception):
    """Carries an exception of the caller's own share of a call/set_attr (or reset/step
    errors the vector env survives) until the workers have answered too."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


def worker_died(w: int, env_range: str, exitcode: int, closed: bool = True) -> WorkerDiedError:
    """The error for worker ``w`` (envs ``env_range``), whose process ended with ``exitcode``
    (``closed``: the vector env is closed by it, as the message then says).

    Example:
        >>> str(worker_died(1, "4..7", -9))
        'FastVectorEnv worker 1 (envs 4..7) was killed by signal SIGKILL; the vector env is closed.'
    """
    if exitcode < 0:
        try:
            how = f"was killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"was killed by signal {-exitcode}"
    else:
        how = f"exited with code {exitcode}"
    ending = "; the vector env is closed." if closed else "."
    return WorkerDiedError(f"FastVectorEnv worker {w} (envs {env_range}) {how}{ending}", w)


def start_method_hint(start_method: str | None) -> str:
    """What to add to the error of a worker that ended before it reported its envs, for a start
    method that imports the caller's main script again in the worker ('' for fork): the usual
    cause is a script that makes the vector env at its top level, without the ``__main__`` guard.

    Example:
        >>> start_method_hint("fork")
        ''
        >>> "__main__" in start_method_hint("spawn")
        True
    """
    if start_method not in ("spawn", "forkserver"):
        return ""
    return (f" Its process was started with the {start_method!r} start method, which imports your main script "
            "again in each worker: a script that makes the vector env at its top level must do so under "
            "`if __name__ == \"__main__\":` (importing torchrl, among others, makes 'spawn' the default). "
            "The worker's own error, if any, is printed above.")


def log_failed_workers(errors: list, starts: list[int]) -> None:
    """Log each failed worker's error as AsyncVectorEnv does (``errors``: (worker, report) pairs)."""
    for w, report in errors:
        env_index = report.env_index if report.env_index is not None else starts[w]
        logger.error(f"Received the following error from Worker-{env_index} - Shutting it down")
        logger.error(f"{report.trace}")
    logger.error("Raising the last exception back to the main process.")


def remote_exception(w: int, report: ErrorReport, env_range: str, closed: bool) -> tuple[BaseException, BaseException | None]:
    """The exception worker ``w`` (envs ``env_range``) reported, annotated with where it was
    raised, and its cause (the worker's traceback): ``raise exc from cause``. ``closed``: the
    vector env is closed by it (said in the note)."""
    env_index, phase, type_name, text, trace, payload = report
    where = f"env {env_index}" if env_index is not None else f"worker {w} (envs {env_range})"
    note = f"raised by {where} in FastVectorEnv worker {w} during {phase}" + ("; the vector env is closed." if closed else ".")
    exc = None
    if payload is not None:
        try:
            exc = pickle.loads(payload)
        except Exception:
            exc = None
    if not isinstance(exc, BaseException):
        return WorkerError(f"{type_name}: {text}\n({note})\n\nWorker traceback:\n{trace}", w, env_index), None
    annotate(exc, env_index, note)
    return exc, RemoteTraceback(trace)


def in_caller(exc: BaseException, env_index: int | None, phase: str, closed: bool) -> BaseException:
    """``exc``, raised by env ``env_index`` of the caller's own share during ``phase``,
    annotated with where (and whether the vector env is closed by it)."""
    annotate(exc, env_index, f"raised by env {env_index} in the calling process during {phase}"
             + ("; the vector env is closed." if closed else "."))
    return exc
