"""asv: one RayVectorEnv step (1 and 4 shards, 8 CartPoles) and Ray's no-op round trip.

Skipped (NotImplementedError in setup, asv's convention) where Ray is not installed. A local
Ray of 4 logical CPUs is started per benchmark process and shut down in teardown.
"""
import numpy as np


def _ray():
    try:
        import ray
    except ImportError:
        raise NotImplementedError("Ray is not installed: pip install '.[ray]'") from None
    if not ray.is_initialized():
        # "local": a new Ray of its own, even where another Ray (or a stale
        # /tmp/ray/ray_current_cluster left by a killed one) would otherwise be joined.
        ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    return ray


class RayStep:
    params = ([1, 4],)
    param_names = ["num_shards"]
    timeout = 180

    def setup(self, num_shards):
        ray = _ray()
        from fastvec._bench.ray import make_cartpole
        from fastvec.ray import RayVectorEnv

        self.ray = ray
        self.env = RayVectorEnv([make_cartpole for _ in range(8)], num_shards=num_shards)
        self.env.reset(seed=0)
        self.actions = np.zeros(8, np.int64)

    def teardown(self, num_shards):
        self.env.close()
        self.ray.shutdown()

    def time_step(self, num_shards):
        self.env.step(self.actions)


class RayNoOp:
    timeout = 120

    def setup(self):
        self.ray = _ray()
        from fastvec._bench.ray import _NoOp

        self.actor = _NoOp.remote()
        self.ray.get(self.actor.noop.remote())

    def teardown(self):
        self.ray.kill(self.actor)
        self.ray.shutdown()

    def time_round_trip(self):
        self.ray.get(self.actor.noop.remote())
