# MountainCar-v0 on the native-env kit: the dynamics in mountaincar.h, registered here.
from fastvec.native.kit cimport fv_env_def, kernel

from fastvec.native.envs._classic_control import gym_state, uniform_reset
from fastvec.native.registry import NativeEnvSpec, is_real, register

cdef extern from "mountaincar.h":
    const fv_env_def mountaincar_env

KERNEL = kernel(&mountaincar_env)

register(NativeEnvSpec(
    "MountainCar-v0", KERNEL, params={"reset_low": -0.6, "reset_high": -0.4},  # the rest: the env's attributes
    kwargs={"goal_velocity": is_real}, reset_options=uniform_reset(-0.6, -0.4),
    reference_state=gym_state("position", "velocity"), cost_ns=15.0))
