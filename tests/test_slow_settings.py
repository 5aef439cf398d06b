"""Settings bound to make a training loop slow are named once, with their fix, when the
caller first keeps more than one core busy between steps, and never otherwise."""
import warnings

import gymnasium as gym
import numpy as np
import pytest

from fastvec import FastVectorEnv
from fastvec.vector._caller import slow_settings as slow_settings_module
from fastvec.vector._caller.slow_settings import slow_settings
from helpers import TwoCoreCompute

_QUIET = dict(pin_workers=None, release_openmp_threads=True, gnu_runtimes=["/x/libgomp.so.1"], llvm_runtimes=[],
              environ={})


def test_default_settings_are_not_slow():
    assert slow_settings(**_QUIET) == {}


def test_pinned_workers_are_named_with_the_default_as_fix():
    advice = slow_settings(**{**_QUIET, "pin_workers": True})
    assert list(advice) == ["pin_workers"]
    assert "pin_workers at None" in advice["pin_workers"]
    assert slow_settings(**{**_QUIET, "pin_workers": False}) == {}


def test_unreleased_gnu_openmp_threads_are_named_unless_they_wait_passively():
    advice = slow_settings(**{**_QUIET, "release_openmp_threads": False})
    assert list(advice) == ["release_openmp_threads"]
    assert "OMP_WAIT_POLICY=PASSIVE" in advice["release_openmp_threads"]
    assert slow_settings(**{**_QUIET, "release_openmp_threads": False, "environ": {"OMP_WAIT_POLICY": "passive"}}) == {}
    assert slow_settings(**{**_QUIET, "release_openmp_threads": False, "gnu_runtimes": []}) == {}


def test_llvm_openmp_runtime_without_blocktime_is_named():
    llvm = {**_QUIET, "llvm_runtimes": ["/opt/conda/lib/libiomp5.so"]}
    advice = slow_settings(**llvm)
    assert list(advice) == ["KMP_BLOCKTIME"]
    assert "libiomp5.so" in advice["KMP_BLOCKTIME"] and "KMP_BLOCKTIME=0" in advice["KMP_BLOCKTIME"]
    assert slow_settings(**{**llvm, "environ": {"KMP_BLOCKTIME": "0"}}) == {}


class _QuietEnv(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


def _pin_warnings(pin_workers, busy: bool, monkeypatch) -> list[str]:
    monkeypatch.setattr(slow_settings_module, "_warned", set())
    compute = TwoCoreCompute() if busy else None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with FastVectorEnv([_QuietEnv] * 2, num_workers=2, pin_workers=pin_workers) as env:
                env.reset(seed=0)
                for _ in range(60):
                    env.step(np.zeros(2, np.int64))
                    if busy:
                        compute(1e-3)
    finally:
        if compute is not None:
            compute.close()
    return [str(w.message) for w in caught if "pin_workers" in str(w.message)]


def test_a_busy_caller_with_pinned_workers_is_warned_once(monkeypatch):
    assert len(_pin_warnings(True, busy=True, monkeypatch=monkeypatch)) == 1


@pytest.mark.parametrize("pin_workers, busy", [(None, True), (True, False)])
def test_no_warning_with_default_pinning_or_a_caller_that_steps_back_to_back(pin_workers, busy, monkeypatch):
    assert _pin_warnings(pin_workers, busy=busy, monkeypatch=monkeypatch) == []
