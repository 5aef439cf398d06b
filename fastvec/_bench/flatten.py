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

from fastvec.bench import fmt_time, median_time, print_table
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
    bspace = batch_space(space, n)
    bflat = gs.flatten(bspace, batch)

    # The numbers below are only worth printing if the fast paths give gymnasium's answer.
    assert np.array_equal(flatten(layout, batch), flat64)
    assert np.array_equal(numpy_flatten(layout, batch, out64.copy()), flat64)
    back = unflatten(layout, flat32)
    for leaf, ours, ref in zip(layout.leaves, layout.split(back), layout.split(batch)):
        assert ours.dtype == leaf.dtype and np.array_equal(ours, ref), leaf.path

    def per_sample(fn, number=1):
        return median_time(fn, repeats=repeats, number=number) / n

    gym_loop = per_sample(lambda: [gs.flatten(space, s) for s in samples])
    gym_uloop = per_sample(lambda: [gs.unflatten(space, r) for r in flat64])
    gym_batch = per_sample(lambda: gs.flatten(bspace, batch))
    gym_ubatch = per_sample(lambda: gs.unflatten(bspace, bflat))
    np_flat = per_sample(lambda: numpy_flatten(layout, batch, out64), number=5)
    np_unflat = per_sample(lambda: numpy_unflatten(layout, flat32), number=5)
    fv_flat64 = per_sample(lambda: flatten(layout, batch, out=out64), number=20)
    fv_flat64_new = per_sample(lambda: flatten(layout, batch), number=20)
    fv_flat32 = per_sample(lambda: flatten(layout, batch, out=out32), number=20)
    fv_unflat32 = per_sample(lambda: unflatten(layout, flat32), number=20)
    fv_unflat64 = per_sample(lambda: unflatten(layout, flat64), number=20)

    header = ["case", "µs / sample", "time per call", "vs gymnasium per sample",
              "vs NumPy batched"]
    rows = [
        ["gymnasium flatten, per sample (float64)", f"{gym_loop * 1e6:.2f}",
         fmt_time(gym_loop * n), "1.0×", ""],
        ["gymnasium flatten of batch_space (leaf-major layout)", f"{gym_batch * 1e6:.3f}",
         fmt_time(gym_batch * n), _ratio(gym_loop, gym_batch), ""],
        ["NumPy on batched leaves (float64, out=)", f"{np_flat * 1e6:.3f}",
         fmt_time(np_flat * n), _ratio(gym_loop, np_flat), "1.0×"],
        ["fastvec flatten (float64, out=)", f"{fv_flat64 * 1e6:.3f}",
         fmt_time(fv_flat64 * n), _ratio(gym_loop, fv_flat64), _ratio(np_flat, fv_flat64)],
        ["fastvec flatten (float64, new array each call)", f"{fv_flat64_new * 1e6:.3f}",
         fmt_time(fv_flat64_new * n), _ratio(gym_loop, fv_flat64_new),
         _ratio(np_flat, fv_flat64_new)],
        ["fastvec flatten (float32, out=)", f"{fv_flat32 * 1e6:.3f}",
         fmt_time(fv_flat32 * n), _ratio(gym_loop, fv_flat32), _ratio(np_flat, fv_flat32)],
        ["gymnasium unflatten, per sample", f"{gym_uloop * 1e6:.2f}", fmt_time(gym_uloop * n),
         "1.0×", ""],
        ["gymnasium unflatten of batch_space", f"{gym_ubatch * 1e6:.3f}",
         fmt_time(gym_ubatch * n), _ratio(gym_uloop, gym_ubatch), ""],
        ["NumPy unflatten on batch (float32 flat)", f"{np_unflat * 1e6:.3f}",
         fmt_time(np_unflat * n), _ratio(gym_uloop, np_unflat), "1.0×"],
        ["fastvec unflatten (float32 flat)", f"{fv_unflat32 * 1e6:.3f}",
         fmt_time(fv_unflat32 * n), _ratio(gym_uloop, fv_unflat32),
         _ratio(np_unflat, fv_unflat32)],
        ["fastvec unflatten (float64 flat)", f"{fv_unflat64 * 1e6:.3f}",
         fmt_time(fv_unflat64 * n), _ratio(gym_uloop, fv_unflat64), ""],
    ]
    print_table(f"Flatten a nested Dict of {layout.flat_dim} values ({len(layout)} leaves), "
                f"batch of {n} (medians)", header, rows)

    # One sample at a time (a per-env wrapper, or an env's own step).
    s, row = samples[0], flat64[0]
    assert np.array_equal(flatten_sample(layout, s), row)
    number = 200 if quick else 1000
    g1 = median_time(lambda: gs.flatten(space, s), repeats=repeats, number=number)
    f1 = median_time(lambda: flatten_sample(layout, s), repeats=repeats, number=number)
    gu1 = median_time(lambda: gs.unflatten(space, row), repeats=repeats, number=number)
    fu1 = median_time(lambda: unflatten_sample(layout, row), repeats=repeats, number=number)
    small, small_batch = make_batch(space, 8, seed=1)
    g8 = median_time(lambda: [gs.flatten(space, x) for x in small], repeats=repeats,
                     number=number // 8)
    f8 = median_time(lambda: flatten(layout, small_batch), repeats=repeats, number=number)
    print_table("One sample, and a batch of 8 (per call, medians)",
                ["case", "gymnasium", "fastvec", "speed-up"],
                [["flatten one sample", fmt_time(g1), fmt_time(f1), _ratio(g1, f1)],
                 ["unflatten one sample", fmt_time(gu1), fmt_time(fu1), _ratio(gu1, fu1)],
                 ["flatten a batch of 8 (gymnasium: 8 calls)", fmt_time(g8), fmt_time(f8),
                  _ratio(g8, f8)]])


if __name__ == "__main__":
    run()
