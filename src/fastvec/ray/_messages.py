"""Both sides of a RayVectorEnv: what it sends its shard actors and what they answer, as
named types (as :mod:`fastvec.vector._block.messages` does for a worker's pipe).

A command is a call of the shard actor's method of that name (:class:`ShardCommand`, a
str-Enum: its value is the method's name, and pickled it stays readable). A shard answers
its first call with a :class:`ShardHello`; its place in the cluster (:class:`ShardPlace`) is
what ``RayVectorEnv.shard_nodes`` reports. With ``env_failure="restart"`` the vector env
keeps what each shard with a step or a reset out was sent (:class:`SentCommand`), to start a
shard that died again and redo it.

Example:
    >>> out = SentCommand(ShardCommand.RESET, seeds=[1, 2], options=None)
    >>> out.command.value, out.command == "reset", ShardCommand("get_attr").name
    ('reset', True, 'GET_ATTR')
    >>> ShardPlace(node_id="ab12", node_ip="10.0.0.2", pid=4242)._asdict()["pid"]
    4242
"""
from __future__ import annotations

from enum import Enum
from typing import Any, NamedTuple

__all__ = ["SentCommand", "ShardCommand", "ShardHello", "ShardPlace"]


class ShardCommand(str, Enum):
    """A command for a shard: the name of the :class:`~fastvec.ray._shard.Shard` method that
    runs it."""

    STEP = "step"
    RESET = "reset"
    CALL = "call"
    GET_ATTR = "get_attr"
    SET_ATTR = "set_attr"
    RENDER = "render"


class ShardPlace(NamedTuple):
    """Where a shard's actor runs."""

    node_id: str
    node_ip: str
    pid: int


class ShardHello(NamedTuple):
    """Shard → vector env, once its local vector env is built: its spaces, what the vector
    env takes from it, and where it runs."""

    single_observation_space: Any
    single_action_space: Any
    metadata: dict
    render_mode: str | None
    #: the class name of the shard's local vector env
    backend: str
    place: ShardPlace


class SentCommand(NamedTuple):
    """What a shard with a step or a reset out was sent (``env_failure="restart"``): a step,
    or a reset with its seeds and options."""

    command: ShardCommand
    seeds: list | None = None
    options: dict | None = None
