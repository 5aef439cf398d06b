"""Every docstring example in the package runs, and gives what it shows."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "fastvec._bench.envs",
    "fastvec.advantages",
    "fastvec.autotune",
    "fastvec.bench",
    "fastvec.errors",
    "fastvec.host",
    "fastvec.integrations",
    "fastvec.integrations.rllib",
    "fastvec.integrations.sb3",
    "fastvec.monitor",
    "fastvec.native",
    "fastvec.native.examples.gridworld",
    "fastvec.native.kit",
    "fastvec.native.registry",
    "fastvec.ray._messages",
    "fastvec.registration",
    "fastvec.replay.min_tree",
    "fastvec.replay.prioritized_replay_buffer",
    "fastvec.replay.sum_tree",
    "fastvec.spaces",
    "fastvec.spaces._flatten_api",
    "fastvec.spaces._layout",
    "fastvec.spaces._leaf_kinds",
    "fastvec.torch.cartpole",
    "fastvec.vector._block.batch_tree",
    "fastvec.vector._block.messages",
    "fastvec.vector._block.restarts",
    "fastvec.vector._caller.backend_choice",
    "fastvec.vector._caller.slow_settings",
    "fastvec.vector._caller.worker_faults",
    "fastvec.vector._caller.worker_vector_env",
    "fastvec.vector._wait._omp_park",
    "fastvec.vector._wait._omp_throttle",
    "fastvec.vector._wait.wake_probe",
    "fastvec.vector._wait.host_load",
    "fastvec.vector._wait.openmp",
    "fastvec.vector._wait.policy",
    "fastvec.vector._worker.command_loop",
    "fastvec.vector._worker.compiled_stacks",
    "fastvec.vector._worker.process",
    "fastvec.vector.fast_vector_env",
    "fastvec.vector.multi_agent_vector_env",
    "fastvec.vector.native_vector_env",
]
# Modules whose examples run in another test module, next to what they need there.
RUN_ELSEWHERE = {"fastvec.ray", "fastvec.ray.vector_env",  # tests/test_ray.py, on its Ray cluster
                 # tests/test_atari_stack.py, where ale-py and OpenCV are
                 "fastvec.atari", "fastvec.atari.env", "fastvec.atari.recognise"}
# The optional extras a module's examples need.
NEEDS = {"fastvec._bench.envs": "ale_py", "fastvec.integrations": "stable_baselines3", "fastvec.integrations.sb3": "stable_baselines3",
         "fastvec.torch.cartpole": "torch", "fastvec.vector._worker.compiled_stacks": "ale_py"}


@pytest.fixture
def registries():
    """Examples register envs (native ones, Gymnasium ids): forget them afterwards."""
    import gymnasium as gym

    from fastvec.native.registry import NATIVE_SPECS

    try:  # (ale-py registers its envs when first imported: before the snapshot, not forgotten)
        import ale_py  # noqa: F401
    except ImportError:
        pass
    native, gymnasium_ids = dict(NATIVE_SPECS), dict(gym.registry)
    yield
    NATIVE_SPECS.clear()
    NATIVE_SPECS.update(native)
    gym.registry.clear()
    gym.registry.update(gymnasium_ids)


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name, registries):
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no example"
    assert result.failed == 0


def test_every_module_with_examples_is_listed():
    import pathlib

    import fastvec

    root = pathlib.Path(fastvec.__file__).parent
    found = set()
    for path in root.rglob("*.py"):
        if ">>>" in path.read_text():
            parts = path.relative_to(root.parent).with_suffix("").parts
            found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    missing = found - set(MODULES) - RUN_ELSEWHERE
    assert not missing, f"examples not run: {sorted(missing)}"
