# CartPole-v1 and CartPole-v0 on the native-env kit: the dynamics in cartpole.h (with its
# fast mode, exact=False, dispatched on the CPU's instruction sets), registered here.
from fastvec.native.kit cimport fv_env_def, kernel

from fastvec.native.envs._classic_control import gym_state, uniform_reset
from fastvec.native.registry import NativeEnvSpec, is_bool, register

cdef extern from "cartpole.h":
    const fv_env_def cartpole_env
    void cartpole_fast_init() noexcept nogil
    int cartpole_fast_select(int level) noexcept nogil
    const char *cartpole_fast_name(int level) noexcept nogil
    int cartpole_isa_max
    int cartpole_fast_level

KERNEL = kernel(&cartpole_env)

_ATTRIBUTES = ("gravity", "masspole", "total_mass", "length", "polemass_length", "force_mag", "tau",
               "theta_threshold_radians", "x_threshold")


def _params(env, env_kwargs):
    if env.kinematics_integrator != "euler":
        raise ValueError("native CartPole supports kinematics_integrator='euler' only")
    return {**{name: getattr(env, name) for name in _ATTRIBUTES},
            "sutton_barto_reward": bool(env._sutton_barto_reward), "reset_low": -0.05, "reset_high": 0.05}


for _env_id in ("CartPole-v1", "CartPole-v0"):
    register(NativeEnvSpec(
        _env_id, KERNEL, params=_params, kwargs={"sutton_barto_reward": is_bool},
        reset_options=uniform_reset(-0.05, 0.05), reference_state=gym_state("x", "x_dot", "theta", "theta_dot"),
        cost_ns=25.0, fast_cost_ns=25.0 / 4))


cartpole_fast_init()


def fast_isa():
    """Name of the instruction set the fast (exact=False) CartPole kernel uses."""
    return cartpole_fast_name(cartpole_fast_level).decode()


def fast_isas():
    """Instruction sets of the fast kernel this CPU and build can run, baseline first."""
    return [cartpole_fast_name(k).decode() for k in range(cartpole_isa_max + 1)]


def _set_fast_isa(name):
    """Force the fast kernel onto one ISA (tests / benchmarks); None = the best. Returns the previous name."""
    prev = fast_isa()
    names = fast_isas()
    if name is None:
        cartpole_fast_select(-1)
    elif name in names:
        cartpole_fast_select(names.index(name))
    else:
        raise ValueError(f"fast ISA {name!r} not available here; available: {names}")
    return prev
