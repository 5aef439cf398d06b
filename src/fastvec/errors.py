"""Exceptions fastvec raises besides Gymnasium's own.

Gymnasium's vector exceptions (``AlreadyPendingCallError``, ``NoAsyncCallError``,
``ClosedEnvironmentError``) are re-exported so code written for
``AsyncVectorEnv`` catches the same classes.
"""
from __future__ import annotations

from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError

__all__ = [
    "AlreadyPendingCallError",
    "ClosedEnvironmentError",
    "NoAsyncCallError",
    "WorkerError",
    "WorkerDiedError",
    "RemoteTraceback",
    "SpacesDifferError",
]


class WorkerError(RuntimeError):
    """An env inside a worker process failed and its exception could not be re-raised as is.

    Attributes:
        worker_index: the worker process that reported it.
        env_index: the env (index in the vector env) that raised, if known.
    """

    def __init__(self, message: str, worker_index: int | None = None, env_index: int | None = None):
        super().__init__(message)
        self.worker_index = worker_index
        self.env_index = env_index


class WorkerDiedError(WorkerError):
    """A worker process exited or was killed while the vector env still needed it."""


class SpacesDifferError(RuntimeError):
    """Env ``env``'s ``what`` ("observation" or "action") space ``got`` differs from env 0's
    ``want``, where the vector env needs them equal. A ``RuntimeError``, as Gymnasium's vector
    envs raise it; the attributes let a vector env built on another say it in its own terms.

    Example:
        >>> import gymnasium as gym
        >>> from fastvec import FastVectorEnv
        >>> from fastvec.errors import SpacesDifferError
        >>> fns = [lambda: gym.make("CartPole-v1"), lambda: gym.make("MountainCar-v0")]
        >>> try:
        ...     FastVectorEnv(fns, num_workers=1)
        ... except SpacesDifferError as error:
        ...     print(error.env, error.what)
        1 observation
    """

    def __init__(self, message: str, env: int, what: str, got, want):
        super().__init__(message)
        self.env, self.what, self.got, self.want = env, what, got, want


class RemoteTraceback(Exception):
    """Carries a worker's traceback text; set as ``__cause__`` of a re-raised env exception."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return "\n\n" + self.text


def annotate(exc: BaseException, env_index: int | None, note: str) -> None:
    """Name the env (and where it ran) on an exception about to reach the caller: a note
    (Python 3.11+) and ``exc.env_index``."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    try:
        exc.env_index = env_index
    except AttributeError:  # pragma: no cover - exceptions with __slots__
        pass
