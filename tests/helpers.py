"""Comparison helpers shared by the vector-env tests."""
from __future__ import annotations

import contextlib
import hashlib
import threading
import time

import numpy as np


def assert_same(a, b, where="") -> None:
    """Assert two vector-env outputs are identical: structure, dtypes and values (bit for bit)."""
    if isinstance(a, dict):
        assert isinstance(b, dict), f"{where}: dict vs {type(b).__name__}"
        assert list(a) == list(b), f"{where}: keys {list(a)} vs {list(b)} (in this order)"
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), f"{where}: tuple vs {b!r}"
        for k, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{k}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), f"{where}: ndarray vs {type(b).__name__}"
        assert a.dtype == b.dtype, f"{where}: dtype {a.dtype} vs {b.dtype}"
        assert a.shape == b.shape, f"{where}: shape {a.shape} vs {b.shape}"
        if a.dtype == object:
            for k, (x, y) in enumerate(zip(a.ravel(), b.ravel())):
                assert_same(x, y, f"{where}.flat[{k}]")
        else:
            np.testing.assert_array_equal(a, b, err_msg=where, strict=True)
    else:
        assert type(a) is type(b), f"{where}: {type(a).__name__} vs {type(b).__name__}"
        if isinstance(a, float) and np.isnan(a):
            assert np.isnan(b), where
        else:
            assert a == b, f"{where}: {a!r} vs {b!r}"


def run_side_by_side(ref, env, seed, steps, action_seed=0, reset_options=None):
    """Step two vector envs with the same seeds and actions; assert every output is identical.

    In DISABLED autoreset mode, finished envs are reset with ``reset_mask`` in both.
    Returns the number of finished episodes seen.
    """
    from gymnasium.vector import AutoresetMode

    out_ref = ref.reset(seed=seed, options=reset_options)
    out = env.reset(seed=seed, options=reset_options)
    assert_same(out_ref, out, "reset")
    ref.action_space.seed(action_seed)
    episodes = 0
    for t in range(steps):
        actions = ref.action_space.sample()
        out_ref = ref.step(actions)
        out = env.step(actions)
        assert_same(out_ref, out, f"step {t}")
        done = out_ref[2] | out_ref[3]
        episodes += int(done.sum())
        if ref.metadata["autoreset_mode"] == AutoresetMode.DISABLED and done.any():
            opts = {"reset_mask": done}
            assert_same(ref.reset(options=dict(opts)), env.reset(options=opts), f"reset_mask at {t}")
    return episodes


def block_mappings(pid="self", creator=None) -> list:
    """The mappings of fastvec shared blocks (made by process ``creator``, default any) in
    process ``pid`` (fastvec's block is an anonymous memfd: "/memfd:fastvec_<creator pid>")."""
    needle = "/memfd:fastvec_" + ("" if creator is None else f"{creator} ")
    try:
        with open(f"/proc/{pid}/maps") as f:
            return [line for line in f if needle in line]
    except OSError:  # the process is gone
        return []


class TwoCoreCompute:
    """The caller's work between two steps on two threads, as torch at its default threads
    (an intra-op thread that keeps spinning between ops): a helper thread hashes from
    construction to ``close()``, and each call hashes on the calling thread for ``seconds``
    (hashlib lets go of the GIL for large inputs, so both threads run at once)."""

    def __init__(self):
        self._stop = False
        self._data = bytes(16 * 1024)
        self._thread = threading.Thread(target=self._burn, daemon=True)
        self._thread.start()

    def _burn(self):
        while not self._stop:
            hashlib.sha256(self._data).digest()

    def __call__(self, seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            hashlib.sha256(self._data).digest()

    def close(self):
        self._stop = True
        self._thread.join()


def process_running(pid: int) -> bool:
    """True while process ``pid`` runs (a zombie has exited); Linux (/proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] != b"Z"


def assert_processes_gone(pids: list, bound: float) -> float:
    """Wait until none of ``pids`` runs; the time that took (fails past ``bound`` seconds)."""
    start = time.perf_counter()
    while True:
        alive = [pid for pid in pids if process_running(pid)]
        if not alive:
            return time.perf_counter() - start
        assert time.perf_counter() - start < bound, f"processes {alive} still running after {bound} s"
        time.sleep(0.05)


class StepInto:
    """A compiled env stepped through step_into/reset_into, each into one row of a block of three:
    close() checks the rows beside it were left untouched, and closes the env."""

    def __init__(self, env, row=1):
        self.env, self.row = env, row
        self.block = np.full((3,) + env.observation_space.shape, 9, env.observation_space.dtype)
        self.action_space = env.action_space

    def reset(self, *, seed=None, options=None):
        info = self.env.reset_into(self.block[self.row], seed=seed, options=options)
        return self.block[self.row].copy(), info

    def step(self, action):
        reward, terminated, truncated, info = self.env.step_into(action, self.block[self.row])
        return self.block[self.row].copy(), reward, terminated, truncated, info

    def close(self):
        assert (self.block[self.row - 1] == 9).all() and (self.block[self.row + 1] == 9).all()
        self.env.close()


@contextlib.contextmanager
def palette_kernel(level: int):
    """fastvec.atari's learned-palette kernel set to ``level`` for the block (0: the plain loop,
    which the compiled Atari envs do not use: ALE converts every screen), the CPU's best after."""
    from fastvec.atari import _palette

    try:
        yield _palette.set_isa(level)
    finally:
        _palette.set_isa(None)
