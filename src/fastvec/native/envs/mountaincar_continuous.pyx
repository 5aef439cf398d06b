# MountainCarContinuous-v0 on the native-env kit: the dynamics in mountaincar_continuous.h,
# registered here.
from fastvec.native.kit cimport fv_env_def, kernel

from fastvec.native.envs._classic_control import gym_state, uniform_reset
from fastvec.native.registry import NativeEnvSpec, is_real, legacy_promotion, register

cdef extern from "mountaincar_continuous.h":
    const fv_env_def mountaincar_continuous_env

KERNEL = kernel(&mountaincar_continuous_env)

register(NativeEnvSpec(
    "MountainCarContinuous-v0", KERNEL,
    params={"legacy_promotion": legacy_promotion(), "reset_low": -0.6, "reset_high": -0.4},  # the rest: the env's attributes
    kwargs={"goal_velocity": is_real}, reset_options=uniform_reset(-0.6, -0.4),
    reference_state=gym_state("position", "velocity"), cost_ns=25.0))
