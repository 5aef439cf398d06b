# Pendulum-v1 on the native-env kit: the dynamics in pendulum.h, registered here.
import math

import numpy as np
from gymnasium.envs.classic_control import utils

from fastvec.native.kit cimport fv_env_def, kernel

from fastvec.native.envs._classic_control import check_uniform_range
from fastvec.native.registry import NativeEnvSpec, is_real, legacy_promotion, register

cdef extern from "pendulum.h":
    const fv_env_def pendulum_env

KERNEL = kernel(&pendulum_env)


def _params(env, env_kwargs):
    g, m, l = env.g, env.m, env.l
    # as PendulumEnv.step computes them
    return {"three_g_over_2l": 3 * g / (2 * l), "three_over_ml2": 3.0 / (m * l**2), "dt": env.dt,
            "max_speed": float(env.max_speed), "max_torque": env.max_torque,
            "legacy_promotion": legacy_promotion(), "reset_theta": math.pi, "reset_theta_dot": 1.0}


def _reset_options(options):
    # PendulumEnv.reset: x_init / y_init, checked and cast by Gymnasium's own helper
    options = options or {}
    theta = utils.verify_number_and_cast(options.get("x_init", math.pi))
    theta_dot = utils.verify_number_and_cast(options.get("y_init", 1.0))
    for bound in (theta, theta_dot):  # (it draws from uniform(-high, high))
        check_uniform_range(-bound, bound, arrays=True)
    return {"reset_theta": theta, "reset_theta_dot": theta_dot}


def _reference_state(fields, i):
    u = fields["last_u"][i]
    return {"state": np.array([fields["theta"][i], fields["theta_dot"][i]]),
            "last_u": None if np.isnan(u) else u}


register(NativeEnvSpec(
    "Pendulum-v1", KERNEL, params=_params,
    kwargs={"g": lambda v: is_real(v) or type(v).__name__ == "float64"},
    reset_options=_reset_options, reference_state=_reference_state, cost_ns=60.0))
