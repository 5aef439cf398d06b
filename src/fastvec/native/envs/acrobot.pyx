# Acrobot-v1 on the native-env kit: the dynamics in acrobot.h, registered here, with the
# reset observations finished in NumPy (Gymnasium applies NumPy's float32 cos/sin there).
import math

import numpy as np

from fastvec.native.kit cimport fv_env_def, kernel

from fastvec.native.envs._classic_control import gym_state, uniform_reset
from fastvec.native.registry import NativeEnvSpec, register

cdef extern from "acrobot.h":
    const fv_env_def acrobot_env

KERNEL = kernel(&acrobot_env)


def _params(e, env_kwargs):
    if e.book_or_nips != "book" or e.torque_noise_max > 0 or list(e.AVAIL_TORQUE) != [-1.0, 0.0, 1]:
        raise ValueError("native Acrobot supports book dynamics, no torque noise, AVAIL_TORQUE [-1, 0, 1] only")
    m1, m2 = e.LINK_MASS_1, e.LINK_MASS_2
    l1, lc1, lc2 = e.LINK_LENGTH_1, e.LINK_COM_POS_1, e.LINK_COM_POS_2
    I1 = I2 = e.LINK_MOI
    g = 9.8
    # the constant sub-expressions of AcrobotEnv._dsdt, evaluated as Python does
    return {"m1_lc1_sq": m1 * lc1**2, "m2": m2, "l1_sq_plus_lc2_sq": l1**2 + lc2**2, "two_l1_lc2": 2 * l1 * lc2,
            "I1": I1, "I2": I2, "lc2_sq": lc2**2, "l1_lc2": l1 * lc2, "m2_lc2_g": m2 * lc2 * g,
            "half_pi": math.pi / 2.0, "minus_m2_l1_lc2": -m2 * l1 * lc2, "two_m2_l1_lc2": 2 * m2 * l1 * lc2,
            "m1_lc1_plus_m2_l1_g": (m1 * lc1 + m2 * l1) * g, "m2_l1_lc2": m2 * l1 * lc2,
            "m2_lc2_sq_plus_I2": m2 * lc2**2 + I2, "dt": e.dt, "max_vel_1": e.MAX_VEL_1,
            "max_vel_2": e.MAX_VEL_2, "reset_low": -0.1, "reset_high": 0.1}


def _after_reset(obs, fields, rows):
    # AcrobotEnv._get_ob applies NumPy's float32 cos/sin to the float32 reset state
    s0 = fields["theta1"][rows].astype(np.float32)
    s1 = fields["theta2"][rows].astype(np.float32)
    obs[rows, 0] = np.cos(s0)
    obs[rows, 1] = np.sin(s0)
    obs[rows, 2] = np.cos(s1)
    obs[rows, 3] = np.sin(s1)


register(NativeEnvSpec(
    "Acrobot-v1", KERNEL, params=_params, kwargs={}, reset_options=uniform_reset(-0.1, 0.1),
    after_reset=_after_reset, reference_state=gym_state("theta1", "theta2", "dtheta1", "dtheta2"),
    cost_ns=400.0))
