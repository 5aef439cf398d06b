"""fastvec's own native envs: Gymnasium's classic-control envs on the native-env kit,
bit-identical to Gymnasium's Python ones. Each is a header (its dynamics, ``<env>.h``) and a
binding (``<env>.pyx``) that registers its ids; importing this package registers them all.
"""
# imported (so registered, so listed by native_ids()) in this order
from fastvec.native.envs import cartpole, mountaincar, mountaincar_continuous, acrobot, pendulum  # noqa: I001

__all__ = ["acrobot", "cartpole", "mountaincar", "mountaincar_continuous", "pendulum"]
