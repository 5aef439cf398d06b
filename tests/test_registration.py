"""make_vec(..., vectorization_mode="fastvec") routing, and that other modes stay Gymnasium's."""
from __future__ import annotations

import gymnasium as gym
import gymnasium.envs.registration as gym_registration
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import TimeAwareObservation

import fastvec
from fastvec import FastVectorEnv
from helpers import assert_same, run_side_by_side


def test_wrap_is_installed_everywhere_and_idempotent():
    wrapped = gym.make_vec
    assert hasattr(wrapped, "_fastvec_original")
    assert gym.envs.make_vec is wrapped and gym_registration.make_vec is wrapped
    fastvec.registration.install()
    fastvec.registration.install()
    assert gym.make_vec is wrapped
    fastvec.registration.uninstall()
    try:
        assert not hasattr(gym.make_vec, "_fastvec_original")
        with pytest.raises(ValueError, match="Invalid vectorization mode"):
            gym.make_vec("CartPole-v1", 2, vectorization_mode="fastvec")
    finally:
        fastvec.registration.install()
    assert hasattr(gym.make_vec, "_fastvec_original")


@pytest.mark.parametrize("mode", [None, "sync", "async", "vector_entry_point"])
def test_other_modes_reach_gymnasium(mode):
    envs = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode=mode)
    try:
        assert not isinstance(envs, FastVectorEnv)
        assert envs.spec.kwargs["vectorization_mode"] == (mode or "vector_entry_point")
    finally:
        envs.close()


def test_make_vec_fastvec_multiprocess_parity():
    envs = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="fastvec",
                        vector_kwargs={"num_workers": 2, "native": False})
    ref = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")
    try:
        assert isinstance(envs, FastVectorEnv) and envs.num_workers == 2
        run_side_by_side(ref, envs, seed=3, steps=100)
        assert envs.spec.id == "CartPole-v1"
        assert envs.spec.kwargs == {"num_envs": 4, "vectorization_mode": "fastvec",
                                    "vector_kwargs": {"num_workers": 2, "native": False}}
    finally:
        envs.close()


def test_env_kwargs_wrappers_and_vector_kwargs_pass_through():
    kwargs = dict(num_envs=3, wrappers=[TimeAwareObservation], max_episode_steps=7)
    envs = gym.make_vec("MountainCar-v0", vectorization_mode="fastvec",
                        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP, "num_workers": 3}, **kwargs)
    ref = gym.make_vec("MountainCar-v0", vectorization_mode="sync",
                       vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}, **kwargs)
    try:
        assert isinstance(envs, FastVectorEnv)
        assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
        assert envs.single_observation_space == ref.single_observation_space
        run_side_by_side(ref, envs, seed=0, steps=20)
        assert envs.spec.kwargs["max_episode_steps"] == 7
        assert envs.spec.kwargs["wrappers"] == [TimeAwareObservation]
    finally:
        envs.close()


def test_make_vec_from_spec_rebuilds_the_same_vector_env():
    envs = gym.make_vec("Acrobot-v1", num_envs=3, vectorization_mode="fastvec",
                        vector_kwargs={"num_workers": 2, "native": False})
    try:
        again = gym.make_vec(envs.spec)
        try:
            assert isinstance(again, FastVectorEnv)
            assert again.num_envs == 3 and again.num_workers == 2
            assert again.spec == envs.spec
            assert_same(envs.reset(seed=1), again.reset(seed=1))
        finally:
            again.close()
    finally:
        envs.close()


def test_mode_stored_in_a_registered_spec():
    gym.register(id="FastvecCartPole-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv",
                 max_episode_steps=50, kwargs={"vectorization_mode": "fastvec", "vector_kwargs": {"native": False}})
    try:
        envs = gym.make_vec("FastvecCartPole-v0", num_envs=2)
        try:
            assert isinstance(envs, FastVectorEnv)
        finally:
            envs.close()
    finally:
        del gym.registry["FastvecCartPole-v0"]


def test_a_mode_stored_in_the_spec_wins_over_fastvec_for_an_id_too():
    """As in Gymnasium: the spec's stored mode wins over the argument, for an id as for its
    EnvSpec, also when the argument is "fastvec"."""
    gym.register(id="StoredSync-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv",
                 max_episode_steps=50, kwargs={"vectorization_mode": "sync"})
    try:
        for env_id in ("StoredSync-v0", gym.spec("StoredSync-v0")):
            envs = gym.make_vec(env_id, num_envs=2, vectorization_mode="fastvec")
            assert isinstance(envs, gym.vector.SyncVectorEnv), env_id
            envs.close()
    finally:
        del gym.registry["StoredSync-v0"]


class _DoubleReward(gym.envs.classic_control.CartPoleEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, 2 * reward, terminated, truncated, info


def test_an_edited_env_spec_is_honoured_on_the_native_route():
    """An EnvSpec of a native id with another time limit runs with that limit, and one with
    another entry point runs that env (on the multiprocess backend), as sync's do."""
    import copy

    short = copy.deepcopy(gym.spec("CartPole-v1"))
    short.max_episode_steps = 5
    other = copy.deepcopy(gym.spec("CartPole-v1"))
    other.entry_point = _DoubleReward
    for spec, backend in ((short, NativeVectorEnv), (other, FastVectorEnv)):
        ref = gym.make_vec(spec, 2, vectorization_mode="sync")
        envs = gym.make_vec(spec, 2, vectorization_mode="fastvec")
        try:
            assert isinstance(envs, backend)
            assert run_side_by_side(ref, envs, seed=3, steps=12) > 0 or spec is other
        finally:
            ref.close()
            envs.close()


def test_unknown_vector_kwargs_are_a_type_error():
    with pytest.raises(TypeError, match=r"unknown vector_kwargs \['bogus'\]"):
        gym.make_vec("CartPole-v1", 2, vectorization_mode="fastvec", vector_kwargs={"bogus": 1})


def test_ray_keywords_without_backend_ray_say_that_they_need_it():
    """``num_shards`` (RayVectorEnv's) in a local request: the error names ``backend='ray'``,
    not only "unknown"."""
    pytest.importorskip("ray")
    with pytest.raises(TypeError, match=r"\['num_shards'\] are RayVectorEnv's: add backend='ray'"):
        gym.make_vec("CartPole-v1", 2, vectorization_mode="fastvec", vector_kwargs={"num_shards": 2})


# ---------------------------------------------------------------------------- native routing
from fastvec import NativeVectorEnv  # noqa: E402


@pytest.mark.parametrize("env_id", ["CartPole-v1", "MountainCar-v0", "Acrobot-v1", "Pendulum-v1"])
def test_native_ids_route_to_native_backend(env_id):
    envs = gym.make_vec(env_id, num_envs=4, vectorization_mode="fastvec")
    ref = gym.make_vec(env_id, num_envs=4, vectorization_mode="sync")
    try:
        assert isinstance(envs, NativeVectorEnv)
        assert envs.spec.kwargs["vectorization_mode"] == "fastvec"
        run_side_by_side(ref, envs, seed=9, steps=80)
        again = gym.make_vec(envs.spec)
        assert isinstance(again, NativeVectorEnv)
        again.close()
    finally:
        envs.close()


def test_native_vector_kwargs_and_env_kwargs():
    envs = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="fastvec", max_episode_steps=20,
                        sutton_barto_reward=True,
                        vector_kwargs={"num_threads": 1, "autoreset_mode": AutoresetMode.SAME_STEP})
    ref = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync", max_episode_steps=20,
                       sutton_barto_reward=True, vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})
    try:
        assert isinstance(envs, NativeVectorEnv)
        run_side_by_side(ref, envs, seed=2, steps=60)
    finally:
        envs.close()


@pytest.mark.parametrize("call", [
    dict(wrappers=[TimeAwareObservation]),                       # custom wrappers
    dict(vector_kwargs={"num_workers": 2}),                      # a multiprocess-only option
    dict(vector_kwargs={"native": False}),                       # opted out
    dict(render_mode="human"),                                   # a render mode native does not draw
])
def test_falls_back_to_multiprocess_backend(call):
    envs = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="fastvec", **call)
    try:
        assert isinstance(envs, FastVectorEnv)
    finally:
        envs.close()


def test_native_true_refuses_what_it_cannot_honour():
    with pytest.raises(ValueError, match="custom wrappers"):
        gym.make_vec("CartPole-v1", 2, vectorization_mode="fastvec", wrappers=[TimeAwareObservation],
                     vector_kwargs={"native": True})
    with pytest.raises(ValueError, match="no native implementation"):
        gym.make_vec("LunarLander-v3", 2, vectorization_mode="fastvec", vector_kwargs={"native": True})
    with pytest.raises(TypeError, match="only for NativeVectorEnv"):
        gym.make_vec("CartPole-v1", 2, vectorization_mode="fastvec", wrappers=[TimeAwareObservation],
                     vector_kwargs={"num_threads": 2})


@pytest.mark.parametrize("call, backend, reason", [
    (dict(), "NativeVectorEnv",
     "NativeVectorEnv: CartPole-v1 has a compiled native env and no keyword asked for something it cannot honour"),
    (dict(vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP, "copy": False}), "NativeVectorEnv",
     "NativeVectorEnv: CartPole-v1 has a compiled native env and no keyword asked for something it cannot honour"),
    (dict(wrappers=[TimeAwareObservation]), "FastVectorEnv", "FastVectorEnv: custom wrappers were given"),
    (dict(vector_kwargs={"num_workers": 1}), "FastVectorEnv",
     "FastVectorEnv: vector_kwargs ['num_workers'] are for the multiprocess backend"),
    (dict(vector_kwargs={"native": False}), "FastVectorEnv", "FastVectorEnv: vector_kwargs native=False was given"),
    (dict(render_mode="human"), "FastVectorEnv",
     "FastVectorEnv: no native implementation of CartPole-v1 with kwargs {} and render_mode='human' "
     "(its compiled env does not honour them)"),
])
def test_backend_reason_says_which_backend_and_why(call, backend, reason):
    envs = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="fastvec", **call)
    try:
        assert type(envs).__name__ == backend
        assert envs.backend_reason == reason
        again = gym.make_vec(envs.spec)  # (rebuilt from the spec: the same choice, the same reason)
        try:
            assert again.backend_reason == reason
        finally:
            again.close()
    finally:
        envs.close()


def test_backend_reason_for_an_id_without_a_native_env_and_for_ray(monkeypatch):
    # (an id registered here, not LunarLander-v3: Box2D may be missing)
    gym.register("FastvecNoNative-v0", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
                 max_episode_steps=10)
    try:
        envs = gym.make_vec("FastvecNoNative-v0", num_envs=1, vectorization_mode="fastvec",
                            vector_kwargs={"num_workers": 1})
        try:
            assert isinstance(envs, FastVectorEnv)
            assert envs.backend_reason == ("FastVectorEnv: no native implementation of FastvecNoNative-v0 "
                                           "(it has no compiled native env)")
        finally:
            envs.close()
    finally:
        gym.registry.pop("FastvecNoNative-v0", None)

    # backend="ray": make_vec builds a RayVectorEnv (a stand-in here: no Ray cluster needed).
    import sys
    import types

    class FakeRayVectorEnv:
        def __init__(self, env_fns, num_envs=None, *, env_kwargs=None, wrappers=None, vector_kwargs=None,
                     num_shards=None):
            self.unwrapped = self

    monkeypatch.setitem(sys.modules, "fastvec.ray", types.SimpleNamespace(RayVectorEnv=FakeRayVectorEnv))
    envs = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="fastvec",
                        vector_kwargs={"backend": "ray", "num_shards": 2})
    assert isinstance(envs, FakeRayVectorEnv)
    assert envs.backend_reason.startswith("RayVectorEnv: vector_kwargs backend='ray' was given")
