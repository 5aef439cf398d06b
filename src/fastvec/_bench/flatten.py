"""Bench section ``flatten``: fastvec.spaces flatten/unflatten against gymnasium.spaces.

The space is a nested Dict of 150 flat values (float32 Boxes, a uint8 7x7 grid, Discretes
with and without ``start``, a MultiDiscrete, MultiBinaries, nested Dicts), the kind an
env with a structured observation returns. References, measured in the same run:

* ``gymnasium.spaces.flatten`` / ``unflatten`` called per sample (what a per-env wrapper
  such as ``FlattenObservation`` does), and on the vector env's batch space (which
  gymnasium supports, but lays values out leaf-major rather than as ``[B, flat_dim]``);
* a plain NumPy version on the already-batched leaves (slice copies + fancy-index one-hots,
  argmax to read them back): the best one can do without a compiled kernel.

Run: ``python -m fastvec.bench flatten`` (``--quick`` for fewer repeats).
"""
from __future__ import annotations

import numpy as np
from gymnasium import spaces as gs
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from fastvec.bench import fmt_time, print_table
from fastvec.spaces import Layout, flatten, flatten_sample, unflatten, unflatten_sample


def make_space() -> gs.Dict:
    """The benchmark observation space: 150 flat values, 13 leaves, flattens to float64."""
    return gs.Dict({
        "agent": gs.Dict({
            "pos": gs.Box(-1, 1, (3,), np.float32),
            "vel": gs.Box(-1, 1, (3,), np.float32),
            "hp": gs.Box(0, 100, (1,), np.float32),
            "status": gs.MultiBinary(8),
        }),
        "grid": gs.Box(0, 255, (7, 7), np.uint8),
        "inventory": gs.MultiDiscrete([5] * 6),
        "last_action": gs.Discrete(18),
        "mode": gs.Discrete(4, start=1),
        "lidar": gs.Box(0, 10, (16,), np.float32),
        "target": gs.Dict({
            "rel": gs.Box(-5, 5, (2,), np.float32),
            "kind": gs.Discrete(6),
            "visible": gs.MultiBinary(1),
        }),
        "goal": gs.Box(-1, 1, (9,), np.float32),
    })


def make_batch(space: gs.Space, n: int, seed: int = 0):
    """``n`` samples, and the batch a vector env would return for them."""
    space.seed(seed)
    samples = [space.sample() for _ in range(n)]
    return samples, concatenate(space, samples, create_empty_array(space, n))


def numpy_flatten(layout: Layout, batch, out: np.ndarray) -> np.ndarray:
    """Plain NumPy flatten of already-batched leaves into ``out[B, flat_dim]``."""
    n = out.shape[0]
    rows = np.arange(n)
    for leaf, off, size, value in zip(layout.leaves, layout.flat_offsets, layout.flat_sizes,
                                      layout.split(batch)):
        seg = out[:, off:off + size]
        if leaf.kind in ("box", "multibinary"):
            seg[...] = value.reshape(n, size)
        elif leaf.kind == "discrete":
            seg[...] = 0
            seg[rows, value - leaf.space.start] = 1
        else:
            nvec = leaf.space.nvec.reshape(-1)
            starts = np.cumsum(nvec) - nvec
            seg[...] = 0
            seg[rows[:, None], starts + value.reshape(n, -1) - leaf.space.start.reshape(-1)] = 1
    return out


def numpy_unflatten(layout: Layout, flat: np.ndarray):
    """Plain NumPy unflatten of ``flat[B, flat_dim]`` (argmax of each one-hot segment)."""
    n = flat.shape[0]
    leaves = []
    for leaf, off, size in zip(layout.leaves, layout.flat_offsets, layout.flat_sizes):
        seg = flat[:, off:off + size]
        if leaf.kind in ("box", "multibinary"):
            leaves.append(seg.astype(leaf.dtype).reshape((n,) + leaf.shape))
        elif leaf.kind == "discrete":
            leaves.append((seg.argmax(axis=1) + leaf.space.start).astype(leaf.dtype))
        else:
            nvec = leaf.space.nvec.reshape(-1)
            parts = np.split(seg, np.cumsum(nvec)[:-1], axis=1)
            idx = np.stack([p.argmax(axis=1) for p in parts], axis=1)
            leaves.append((idx + leaf.space.start.reshape(-1)).astype(leaf.dtype)
                          .reshape((n,) + leaf.shape))
    return layout.join(leaves)


def interleaved_medians(cases: dict, rounds: int) -> tuple[dict, dict]:
    """Median seconds per call of each ``(fn, number)`` case, timing every case once per round.

    Interleaving keeps a drifting machine load from skewing the ratios. Returns wall-clock
    medians and medians of this thread's CPU time: on a loaded machine the wall time also
    counts the time slices other processes ran in, the CPU time does not.
    """
    import statistics
    import time

    wall = {name: [] for name in cases}
    cpu = {name: [] for name in cases}
    for fn, _ in cases.values():
        fn()
    for _ in range(rounds):
        for name, (fn, number) in cases.items():
            w0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(number):
                fn()
            cpu[name].append((time.thread_time() - c0) / number)
            wall[name].append((time.perf_counter() - w0) / number)
    return ({k: statistics.median(v) for k, v in wall.items()},
            {k: statistics.median(v) for k, v in cpu.items()})


def _ratio(ref: float, t: float) -> str:
    return f"{ref / t:.1f}×"


def run(quick: bool = False) -> None:
    space = make_space()
    layout = Layout(space)
    n = 256 if quick else 1024
    repeats = 3 if quick else 7
    samples, batch = make_batch(space, n)
    flat64 = np.stack([gs.flatten(space, s) for s in samples])
    flat32 = flat64.astype(np.float32)
    out32 = np.empty((n, layout.flat_dim), np.float32)
    out64 = np.empty((n, layout.flat_dim), np.float64)
    out64b = np.empty((n, layout.flat_dim), np.float64)
    bspace = batch_space(space, n)
    bflat = gs.flatten(bspace, batch)

    # The numbers below are only worth printing if the fast paths give gymnasium's answer.
    assert np.array_equal(flatten(layout, batch), flat64)
    assert np.array_equal(numpy_flatten(layout, batch, out64.copy()), flat64)
    back = unflatten(layout, flat32)
    for leaf, ours, ref in zip(layout.leaves, layout.split(back), layout.split(batch)):
        assert ours.dtype == leaf.dtype and np.array_equal(ours, ref), leaf.path

    t, c = interleaved_medians({
        "gym_loop": (lambda: [gs.flatten(space, s) for s in samples], 1),
        "gym_batch": (lambda: gs.flatten(bspace, batch), 2),
        "np_flat": (lambda: numpy_flatten(layout, batch, out64b), 5),
        "fv_flat64": (lambda: flatten(layout, batch, out=out64), 20),
        "fv_flat64_new": (lambda: flatten(layout, batch), 20),
        "fv_flat32": (lambda: flatten(layout, batch, out=out32), 20),
        "gym_uloop": (lambda: [gs.unflatten(space, r) for r in flat64], 1),
        "gym_ubatch": (lambda: gs.unflatten(bspace, bflat), 2),
        "np_unflat": (lambda: numpy_unflatten(layout, flat32), 5),
        "fv_unflat32": (lambda: unflatten(layout, flat32), 20),
        "fv_unflat64": (lambda: unflatten(layout, flat64), 20),
    }, rounds=repeats)
    # case -> (label, its gymnasium reference, its NumPy reference or None)
    cases = {
        "gym_loop": ("gymnasium flatten, per sample (float64)", "gym_loop", None),
        "gym_batch": ("gymnasium flatten of batch_space (leaf-major layout)", "gym_loop", None),
        "np_flat": ("NumPy on batched leaves (float64, out=)", "gym_loop", "np_flat"),
        "fv_flat64": ("fastvec flatten (float64, out=)", "gym_loop", "np_flat"),
        "fv_flat64_new": ("fastvec flatten (float64, new array each call)", "gym_loop",
                          "np_flat"),
        "fv_flat32": ("fastvec flatten (float32, out=)", "gym_loop", "np_flat"),
        "gym_uloop": ("gymnasium unflatten, per sample", "gym_uloop", None),
        "gym_ubatch": ("gymnasium unflatten of batch_space", "gym_uloop", None),
        "np_unflat": ("NumPy unflatten on batch (float32 flat)", "gym_uloop", "np_unflat"),
        "fv_unflat32": ("fastvec unflatten (float32 flat)", "gym_uloop", "np_unflat"),
        "fv_unflat64": ("fastvec unflatten (float64 flat)", "gym_uloop", "np_unflat"),
    }

    def vs(ref: str, key: str) -> str:
        return f"{_ratio(t[ref], t[key])} ({_ratio(c[ref], c[key])})"

    rows = [[label, f"{t[key] / n * 1e6:.3f}", f"{c[key] / n * 1e6:.3f}", vs(gym, key),
             "" if np_ref is None else vs(np_ref, key)]
            for key, (label, gym, np_ref) in cases.items()]
    print_table(f"Flatten a nested Dict of {layout.flat_dim} values ({len(layout)} leaves), "
                f"batch of {n} (medians, interleaved; ratios wall (CPU))",
                ["case", "µs / sample, wall", "µs / sample, CPU", "vs gymnasium per sample",
                 "vs NumPy batched"], rows)

    # One sample at a time (a per-env wrapper, or an env's own step), and a small batch.
    s, row = samples[0], flat64[0]
    assert np.array_equal(flatten_sample(layout, s), row)
    small, small_batch = make_batch(space, 8, seed=1)
    number = 100 if quick else 500
    t, c = interleaved_medians({
        "g1": (lambda: gs.flatten(space, s), number),
        "f1": (lambda: flatten_sample(layout, s), number),
        "gu1": (lambda: gs.unflatten(space, row), number),
        "fu1": (lambda: unflatten_sample(layout, row), number),
        "g8": (lambda: [gs.flatten(space, x) for x in small], number // 8),
        "f8": (lambda: flatten(layout, small_batch), number),
    }, rounds=repeats)

    def pair(g: str, f: str) -> list:
        return [fmt_time(t[g]), fmt_time(t[f]), _ratio(t[g], t[f]),
                f"{fmt_time(c[g])} / {fmt_time(c[f])}", _ratio(c[g], c[f])]

    print_table("One sample, and a batch of 8 (per call, medians, interleaved)",
                ["case", "gymnasium", "fastvec", "speed-up", "CPU: gymnasium / fastvec",
                 "speed-up (CPU)"],
                [["flatten one sample"] + pair("g1", "f1"),
                 ["unflatten one sample"] + pair("gu1", "fu1"),
                 ["flatten a batch of 8 (gymnasium: 8 calls)"] + pair("g8", "f8")])


if __name__ == "__main__":
    run()
