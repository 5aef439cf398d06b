"""fastvec over Ray: :class:`RayVectorEnv`, a Gymnasium vector env whose envs run in Ray actors.

Needs Ray (``pip install "fastvec[ray]"``); ``import fastvec`` never imports it. Each shard
(a Ray actor) holds a local fastvec vector env; one step is one actor call per shard. See
``docs/ray.md`` for when that pays off.

Example (``tests/test_ray.py`` runs it on a local cluster; a Ray is started if none runs):
    >>> import numpy as np
    >>> from fastvec.ray import RayVectorEnv
    >>> envs = RayVectorEnv("CartPole-v1", num_envs=4, num_shards=2, shard_options={"num_cpus": 0})
    >>> obs, infos = envs.reset(seed=42)
    >>> obs.shape, envs.backends
    ((4, 4), ('NativeVectorEnv', 'NativeVectorEnv'))
    >>> envs.close()

To have a lost node noticed within seconds, start Ray with :func:`fault_detection_config`:
``ray.init(_system_config=fault_detection_config(3.0))``.
"""
from __future__ import annotations

try:
    import ray  # noqa: F401
except ModuleNotFoundError as exc:  # pragma: no cover - exercised where Ray is absent
    raise ModuleNotFoundError(
        f"fastvec.ray needs Ray ({exc}): pip install 'fastvec[ray]'", name=exc.name
    ) from exc

from fastvec.ray.vector_env import DEFAULT_SHARD_OPTIONS, RayVectorEnv

__all__ = ["RayVectorEnv", "DEFAULT_SHARD_OPTIONS", "fault_detection_config"]


def fault_detection_config(seconds: float = 3.0) -> dict[str, int]:
    """Ray ``_system_config`` entries under which a lost node is declared dead in about ``seconds``.

    A RayVectorEnv step waiting on a shard whose node vanished fails once Ray has marked
    the node dead. A node whose processes die refuses connections and is noticed within a
    few seconds anyway; one that hangs or drops off the network is noticed by the GCS's
    health checks, by default after about 15-30 s (5 missed checks, 3 s apart, each
    allowed 10 s). These entries check every ``seconds / 4`` with the same timeout and give
    up after 3 misses. They configure the cluster, so they go where the head node starts:

    - a local Ray: ``ray.init(_system_config=fault_detection_config(3.0))``;
    - a cluster: ``ray start --head --system-config='<the dict as JSON>'``;
    - a test cluster: ``Cluster(head_node_args={"_system_config": ...})``.

    Example:
        >>> from fastvec.ray import fault_detection_config
        >>> fault_detection_config(2.0)  # doctest: +NORMALIZE_WHITESPACE
        {'health_check_initial_delay_ms': 0, 'health_check_period_ms': 500, 'health_check_timeout_ms': 500, 'health_check_failure_threshold': 3}
    """
    if not seconds > 0:
        raise ValueError(f"seconds must be positive, got {seconds!r}")
    period = max(50, int(seconds * 1000 / 4))
    return {
        "health_check_initial_delay_ms": 0,
        "health_check_period_ms": period,
        "health_check_timeout_ms": period,
        "health_check_failure_threshold": 3,
    }
