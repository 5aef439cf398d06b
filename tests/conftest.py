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


def pytest_collection_modifyitems(config, items):
    import pytest

    for item in items:
        name = item.path.name
        if name in WHEEL_TESTS or name in WHEEL_TESTS_POSIX:
            item.add_marker(pytest.mark.wheel)
        if name in WHEEL_TESTS_POSIX:
            item.add_marker(pytest.mark.needs_posix)
