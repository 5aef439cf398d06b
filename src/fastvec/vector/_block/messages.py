"""Both sides: the messages on a worker's pipe, as named types.

The shared block carries each step; the pipe carries what does not fit a control word: the
handshake (:class:`Hello` from the worker, :class:`Attach` and the block's descriptor from the
caller, :class:`Ready` back), the commands that carry Python values (:class:`PipeRequest`, one
of :class:`PipeCommand`), their replies, and the report of an exception (:class:`ErrorReport`).
They are pickled (``protocol.send``) and both sides run the same fastvec, so a class is its
own tag: a reader tells them apart with ``isinstance``.

Example:
    >>> report = ErrorReport(env_index=3, phase="step", type_name="ValueError", text="boom",
    ...                      trace="Traceback ...", payload=None)
    >>> report.env_index, PipeRequest(PipeCommand.CALL, ("render", (), {})).command.value
    (3, 'call')
"""
from __future__ import annotations

from enum import Enum
from typing import Any, NamedTuple

__all__ = ["Attach", "ErrorReport", "Hello", "PipeCommand", "PipeRequest", "Ready"]


class PipeCommand(str, Enum):
    """What a ``Command.PIPE`` word asks a worker to do; its payload comes on the pipe. The
    value is also the phase an exception during it is reported in."""

    RESET = "reset"
    CALL = "call"
    SETATTR = "setattr"


class PipeRequest(NamedTuple):
    """Caller → worker: a :class:`PipeCommand` and its arguments (``Worker.reset``,
    ``Worker.call`` or ``Worker.set_attr`` take them as they are)."""

    command: PipeCommand
    payload: tuple


class Hello(NamedTuple):
    """Worker → caller, once its envs are built: their spaces, and what the vector env takes
    from the first of them."""

    #: (observation space, action space) per env
    spaces: list
    metadata: dict
    render_mode: str | None
    #: whether an env refuses a step before its first reset (gymnasium.make's OrderEnforcing)
    enforces_reset_order: bool
    #: per env, what became of its wrapper stack (``compiled_stacks.compile_note``)
    compiled: list


class Attach(NamedTuple):
    """Caller → worker, after every hello: the shared block's layout (its descriptor follows
    on the pipe) and how observations and actions are laid out in it."""

    sections: list
    size: int
    obs_layout: Any
    act_layout: Any


class Ready(NamedTuple):
    """Worker → caller: the block is mapped, commands may come."""


class ErrorReport(NamedTuple):
    """Worker → caller: a command raised. Enough to re-raise it in the caller: the exception
    pickled (``payload``; None where it cannot be) and, for when it cannot be unpickled there,
    its type's name, message and traceback text."""

    #: the env that raised (its index in the vector env), None when not one env's
    env_index: int | None
    #: what the worker was doing ("step", "reset", "the env constructor", ...)
    phase: str
    type_name: str
    text: str
    trace: str
    payload: bytes | None
