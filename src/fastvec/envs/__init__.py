"""Specs of the Cython-native classic-control envs and the native registry.

Each :class:`NativeSpec` says which Gymnasium id the native kernel reproduces,
which constructor kwargs it honours, and how to turn a Gymnasium env instance
into the kernel's parameter vector (computed with the very Python float
expressions Gymnasium uses, so the kernel starts from bit-identical constants).

Example:
    >>> from fastvec.envs import can_run_natively, native_ids
    >>> "CartPole-v1" in native_ids()
    True
    >>> can_run_natively("Pendulum-v1", {"g": 9.81}, None)
    True
    >>> can_run_natively("Pendulum-v1", {"gravity": 9.81}, None)
    False
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium as gym

__all__ = ["NativeSpec", "NATIVE_SPECS", "can_run_natively", "native_ids", "get_native_spec",
           "RENDER_MODES"]

#: render modes the native backend honours (rgb_array is delegated to Gymnasium's renderer)
RENDER_MODES = (None, "rgb_array")


def _is_real(value: Any) -> bool:
    # Only Python int/float: a NumPy scalar would change Gymnasium's arithmetic
    # (NumPy 2 promotion treats numpy scalars as strongly typed).
    return type(value) in (int, float)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or type(value).__name__ == "bool"


@dataclass(frozen=True)
class NativeSpec:
    """What the native kernel needs to know about one Gymnasium id."""

    env_id: str
    kind: str  # key of fastvec._ext._classic.ENV_KINDS
    obs_dim: int
    #: kwarg name -> validator (True if the value is one the kernel reproduces exactly)
    kwargs: dict[str, Callable[[Any], bool]] = field(default_factory=dict)
    #: default reset bounds for the 4 drawn components (low, high)
    reset_low: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)
    reset_high: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)
    #: rough cost of one exact env step in ns (sets the size above which threads help)
    cost_ns: float = 30.0

    @property
    def max_episode_steps(self) -> int:
        return gym.spec(self.env_id).max_episode_steps

    def check_kwargs(self, env_kwargs: dict[str, Any]) -> None:
        """Raise TypeError/ValueError for a kwarg the kernel does not honour."""
        for key, value in env_kwargs.items():
            if key not in self.kwargs:
                raise TypeError(
                    f"{self.env_id} (native) got an unexpected keyword argument {key!r}; "
                    f"supported: {sorted(self.kwargs) or 'none'}")
            if not self.kwargs[key](value):
                raise TypeError(
                    f"{self.env_id} (native): {key}={value!r} of type {type(value).__name__} is not "
                    "supported (expected a Python int or float, or a bool for flags)")

    def make_reference(self, render_mode: str | None = None, **env_kwargs: Any) -> gym.Env:
        """The unwrapped Gymnasium env with these kwargs (spaces, metadata, rendering)."""
        creator = gym.envs.registration.load_env_creator(gym.spec(self.env_id).entry_point)
        return creator(render_mode=render_mode, **env_kwargs)

    def params(self, env: gym.Env) -> tuple[list[float], int]:
        """Kernel parameters (see _classic.pyx for the meaning of each slot) and flag0."""
        e = env
        if self.kind == "cartpole":
            if e.kinematics_integrator != "euler":
                raise ValueError("native CartPole supports kinematics_integrator='euler' only")
            return ([e.gravity, e.masspole, e.total_mass, e.length, e.polemass_length,
                     e.force_mag, e.tau, e.theta_threshold_radians, e.x_threshold],
                    int(bool(e._sutton_barto_reward)))
        if self.kind == "mountaincar":
            return ([e.min_position, e.max_position, e.max_speed, e.goal_position,
                     float(e.goal_velocity), e.force, e.gravity], 0)
        if self.kind == "mountaincar_continuous":
            return ([e.min_position, e.max_position, e.max_speed, e.goal_position,
                     float(e.goal_velocity), e.power, e.min_action, e.max_action], 0)
        if self.kind == "acrobot":
            if e.book_or_nips != "book" or e.torque_noise_max > 0 or list(e.AVAIL_TORQUE) != [-1.0, 0.0, 1]:
                raise ValueError("native Acrobot supports book dynamics, no torque noise, "
                                 "AVAIL_TORQUE [-1, 0, 1] only")
            m1, m2 = e.LINK_MASS_1, e.LINK_MASS_2
            l1, lc1, lc2 = e.LINK_LENGTH_1, e.LINK_COM_POS_1, e.LINK_COM_POS_2
            I1 = I2 = e.LINK_MOI
            g = 9.8
            pi = math.pi
            # the constant sub-expressions of AcrobotEnv._dsdt, evaluated as Python does
            return ([m1 * lc1**2, m2, l1**2 + lc2**2, 2 * l1 * lc2, I1, I2, lc2**2, l1 * lc2,
                     m2 * lc2 * g, pi / 2.0, -m2 * l1 * lc2, 2 * m2 * l1 * lc2,
                     (m1 * lc1 + m2 * l1) * g, m2 * l1 * lc2, m2 * lc2**2 + I2,
                     e.dt, e.MAX_VEL_1, e.MAX_VEL_2], 0)
        if self.kind == "pendulum":
            g, m, l = e.g, e.m, e.l
            return ([3 * g / (2 * l), 3.0 / (m * l**2), e.dt, float(e.max_speed),
                     e.max_torque], 0)
        raise AssertionError(self.kind)

    def reset_bounds(self, options: dict[str, Any] | None) -> tuple[list[float], list[float]]:
        """Bounds of an explicit reset with these options, as the Gymnasium env parses them."""
        from gymnasium.envs.classic_control import utils

        if self.kind == "pendulum":
            if options is None:
                x, y = self.reset_high[0], self.reset_high[1]
            else:
                x = options.get("x_init") if "x_init" in options else self.reset_high[0]
                y = options.get("y_init") if "y_init" in options else self.reset_high[1]
                x = utils.verify_number_and_cast(x)
                y = utils.verify_number_and_cast(y)
            return [-x, -y, 0.0, 0.0], [x, y, 0.0, 0.0]
        low, high = utils.maybe_parse_reset_bounds(options, self.reset_low[0], self.reset_high[0])
        return [low] * 4, [high] * 4


NATIVE_SPECS: dict[str, NativeSpec] = {}


def _register(spec: NativeSpec) -> None:
    NATIVE_SPECS[spec.env_id] = spec


for _id in ("CartPole-v1", "CartPole-v0"):
    _register(NativeSpec(_id, "cartpole", 4, {"sutton_barto_reward": _is_bool},
                         (-0.05,) * 4, (0.05,) * 4, cost_ns=25.0))
_register(NativeSpec("MountainCar-v0", "mountaincar", 2, {"goal_velocity": _is_real},
                     (-0.6,) * 4, (-0.4,) * 4, cost_ns=15.0))
_register(NativeSpec("MountainCarContinuous-v0", "mountaincar_continuous", 2,
                     {"goal_velocity": _is_real}, (-0.6,) * 4, (-0.4,) * 4, cost_ns=25.0))
_register(NativeSpec("Acrobot-v1", "acrobot", 6, {}, (-0.1,) * 4, (0.1,) * 4, cost_ns=400.0))
_register(NativeSpec("Pendulum-v1", "pendulum", 3,
                     {"g": lambda v: _is_real(v) or type(v).__name__ == "float64"},
                     (-math.pi, -1.0, 0.0, 0.0), (math.pi, 1.0, 0.0, 0.0), cost_ns=60.0))


def native_ids() -> list[str]:
    """The Gymnasium ids with a native implementation."""
    return list(NATIVE_SPECS)


def get_native_spec(env_id: str) -> NativeSpec:
    """The NativeSpec of ``env_id``; ValueError naming the supported ids otherwise."""
    try:
        return NATIVE_SPECS[env_id]
    except (KeyError, TypeError):
        raise ValueError(f"no native implementation of {env_id!r}; native ids: {native_ids()}") from None


def can_run_natively(env_id: str, env_kwargs: dict[str, Any] | None, render_mode: str | None) -> bool:
    """True when NativeVectorEnv reproduces ``gymnasium.make(env_id, render_mode=..., **env_kwargs)``.

    False for other ids, for kwargs the kernel does not honour (unknown names, or
    values whose type would change Gymnasium's arithmetic, such as NumPy scalars)
    and for render modes other than None and "rgb_array".
    """
    spec = NATIVE_SPECS.get(env_id) if isinstance(env_id, str) else None
    if spec is None or render_mode not in RENDER_MODES:
        return False
    try:
        spec.check_kwargs(dict(env_kwargs or {}))
    except (TypeError, ValueError):
        return False
    return True
