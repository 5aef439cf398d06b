import os

# Headless rendering for pygame-backed envs.
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


# The tests every built wheel runs in a fresh venv (cibuildwheel's test-command in
# pyproject.toml, .ci/wheel's portable build), listed once: ``pytest -m wheel``. Those that
# need POSIX (fork, shared memory, a compiler for the native-env kit's example) are also
# marked ``needs_posix``: Windows wheels run ``-m "wheel and not needs_posix"``.
WHEEL_TESTS = ("test_native.py", "test_spaces.py", "test_advantages.py", "test_segment_trees.py",
               "test_prioritized_replay.py")
WHEEL_TESTS_POSIX = ("test_native_kit.py", "test_openmp_fork.py", "test_shared.py", "test_sync.py",
                     "test_async.py", "test_infos.py", "test_faults.py")


# The long-running test files (a Ray cluster, training runs, benchmark tables, every docs
# snippet and example in a fresh interpreter, the soak): marked ``slow``, listed once. The
# README's test command runs ``-m "not slow"``; CI runs both (.ci/run). Single slow tests
# elsewhere carry ``@pytest.mark.slow`` themselves.
SLOW_FILES = ("test_ray.py", "test_ray_restarts.py", "test_ray_infos.py", "test_ray_placement.py",
              "test_ray_torchrl.py", "test_ray_rllib.py", "test_bench_multiagent.py", "test_bench_hosts.py", "test_bench_train.py",
              "test_bench_real.py", "test_docs_snippets.py", "test_multiagent_example.py", "test_ppo_example.py",
              "test_soak.py", "test_cleanrl_example.py", "test_atari_stack.py",
              "test_atari_resize.py", "test_atari_sb3_stack.py")


def pytest_collection_modifyitems(config, items):
    import pytest

    for item in items:
        name = item.path.name
        if name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
        if name in WHEEL_TESTS or name in WHEEL_TESTS_POSIX:
            item.add_marker(pytest.mark.wheel)
        if name in WHEEL_TESTS_POSIX:
            item.add_marker(pytest.mark.needs_posix)
