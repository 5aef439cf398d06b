"""Caller side: checks of the arguments fastvec's vector envs and adapters share (FastVectorEnv,
RayVectorEnv, MultiAgentVectorEnv, the SB3 adapter)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def check_env_fns(env_fns: Any, owner: str, builds: str = "an env") -> list:
    """``env_fns`` as a list, checked: a non-empty sequence of callables (one per env).

    Args:
        env_fns: what the user passed.
        owner: the class named in the errors (``"FastVectorEnv"``, ``"FastVecEnv"``, ...).
        builds: what each callable builds, for the errors (``"an env"``, ``"a ParallelEnv"``).

    Returns:
        The callables, as a list.

    Raises:
        TypeError: ``env_fns`` is not a sequence (a string counts as none), is empty, or holds
            something that is not callable.
    """
    try:
        if isinstance(env_fns, (str, bytes)):  # (a sequence, of characters)
            raise TypeError
        fns = list(env_fns)
    except TypeError:
        raise TypeError(f"{owner}: env_fns must be a sequence of callables that each build {builds}, "
                        f"got {type(env_fns).__name__}") from None
    env_fns = fns
    if not env_fns:
        raise TypeError(f"{owner}: env_fns is empty; it needs at least one callable that builds {builds}")
    for k, fn in enumerate(env_fns):
        if not callable(fn):
            raise TypeError(f"{owner}: env_fns[{k}] is not callable: got {type(fn).__name__}; "
                            "pass e.g. `lambda: gym.make(...)`")
    return env_fns


def seeds_per_env(seed: int | Sequence[int | None] | None, num_envs: int) -> list[int | None]:
    """``None`` → no seeds; an int ``s`` → ``s + i`` for env i; a list → one per env (checked)."""
    if seed is None:
        return [None] * num_envs
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return [int(seed) + i for i in range(num_envs)]
    seeds = list(seed)
    if len(seeds) != num_envs:
        raise ValueError(
            f"If seeds are passed as a list the length must match num_envs={num_envs} but got length={len(seeds)}."
        )
    return seeds


def split_reset_options(options: dict[str, Any] | None, num_envs: int) -> tuple[dict[str, Any] | None, np.ndarray | None]:
    """A copy of ``options`` without ``reset_mask``, and the checked mask (or None).

    The caller's dict is left as it was (Gymnasium's vector envs pop from it).
    """
    if options is None or "reset_mask" not in options:
        return (dict(options) if options is not None else None), None
    options = dict(options)
    mask = options.pop("reset_mask")
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
    if mask.shape != (num_envs,):
        raise ValueError(f"`options['reset_mask']` must have shape `({num_envs},)`, got {mask.shape}")
    if mask.dtype != np.bool_:
        raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
    if not np.any(mask):
        raise ValueError(
            f"`options['reset_mask']` must contain a boolean array with at least one True value, got reset_mask={mask}"
        )
    return options, mask


def checked_count(value, num_envs: int, name: str) -> int:
    """``value`` as an int in ``[1, num_envs]`` (``num_workers``, ``num_shards``): a
    ``TypeError`` for another type, a ``ValueError`` out of range."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 1 <= value <= num_envs:
        raise ValueError(f"{name} must be in [1, num_envs={num_envs}], got {value}")
    return int(value)


def checked_batch_size(batch_size, num_envs: int, groups: int, group: str) -> int:
    """The envs one ``recv`` returns (default ``num_envs``: synchronous stepping). Below
    ``num_envs``, ``recv`` returns whole groups of envs (``group``: "worker", "shard"), so
    ``num_envs`` must divide evenly among the ``groups`` and ``batch_size`` be a multiple of
    the envs per group."""
    batch_size = checked_count(num_envs if batch_size is None else batch_size, num_envs, "batch_size")
    if batch_size < num_envs:
        per_group = num_envs // groups
        if num_envs % groups or batch_size % per_group:
            raise ValueError(
                f"send/recv returns whole {group}s: num_envs={num_envs} must be a multiple of "
                f"num_{group}s={groups}, and batch_size={batch_size} a multiple of the envs per "
                f"{group} ({num_envs / groups:g}); e.g. num_envs=16, num_{group}s=8, batch_size=8"
            )
    return batch_size


def check_synchronous(owner: str, batch_size: int, num_envs: int) -> None:
    """``step``/``step_async`` of a vector env (``owner``: its class name) need synchronous
    stepping: ``batch_size == num_envs``, else ``RuntimeError``."""
    if batch_size < num_envs:
        raise RuntimeError(
            f"this {owner} has batch_size={batch_size} < num_envs={num_envs}: "
            "step it with send(actions, env_ids) / recv()"
        )


def check_no_ended_envs(autoreset_envs: np.ndarray) -> None:
    """With ``autoreset_mode=DISABLED``, stepping needs every env that ended to have been
    reset (``autoreset_envs``: those that were not): else ``AssertionError``, as Gymnasium's
    vector envs raise."""
    if autoreset_envs.any():
        envs = np.flatnonzero(autoreset_envs).tolist()
        raise AssertionError(
            f"envs {envs} terminated or truncated and autoreset_mode=DISABLED: reset them with "
            "`reset(options={'reset_mask': mask})` before stepping again"
        )


def check_failure_arguments(env_failure, max_restarts, step_in_caller: bool) -> None:
    """Check ``env_failure`` and ``max_restarts`` (see FastVectorEnv's docstring)."""
    if env_failure not in ("raise", "restart"):
        raise ValueError(f"env_failure must be 'raise' or 'restart', got {env_failure!r}")
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, (int, np.integer)):
        raise TypeError(f"max_restarts must be an int, got {type(max_restarts).__name__}")
    if max_restarts < 0:
        raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")
    if env_failure == "restart" and step_in_caller:
        raise ValueError("env_failure='restart' needs every env in a worker process: the caller's own share "
                         "(step_in_caller=True) cannot be restarted")


def checked_step_timeout(step_timeout) -> float | None:
    """FastVectorEnv's ``step_timeout``: None, or a positive number of seconds."""
    if step_timeout is None:
        return None
    if isinstance(step_timeout, bool) or not isinstance(step_timeout, (int, float, np.integer, np.floating)):
        raise TypeError(f"step_timeout must be None or a number of seconds, got {type(step_timeout).__name__}")
    if not step_timeout > 0:
        raise ValueError(f"step_timeout must be > 0 seconds, got {step_timeout}")
    return float(step_timeout)


def same_value(a: Any, b: Any) -> bool:
    """Whether two values given for different envs (or an env's rows) are the same value:
    of the same type, containers compared item by item and NumPy arrays by dtype, shape and
    value (``1`` and ``True``, or ``[1]`` and ``[1, 1]``, are not the same)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype == object:  # (items that may themselves be arrays, or not compare)
            return all(same_value(x, y) for x, y in zip(a.flat, b.flat))
        return bool(np.array_equal(a, b))
    try:
        return bool(a == b)
    except Exception:  # (values that do not compare)
        return False
