# The grid world's binding: the compiled env of gridworld.h, as the KERNEL NativeEnvSpec takes.
from fastvec.native.kit cimport fv_env_def, kernel

cdef extern from "gridworld.h":
    const fv_env_def gridworld_env

KERNEL = kernel(&gridworld_env)
