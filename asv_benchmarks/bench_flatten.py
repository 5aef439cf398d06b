"""asv: fastvec.spaces flatten/unflatten against gymnasium.spaces (nested Dict of 150 values).

Compare ``impl="fastvec"`` with ``impl="gymnasium"`` (one gymnasium call per sample, as a
per-env wrapper does) and ``impl="numpy"`` (plain NumPy on the batched leaves) for the same
``batch``: the ratio is the speed-up. ``python -m fastvec.bench flatten`` prints the table.
"""
import numpy as np
from gymnasium import spaces as gs

from fastvec._bench.flatten import make_batch, make_space, numpy_flatten, numpy_unflatten
from fastvec.spaces import Layout, flatten, flatten_sample, unflatten, unflatten_sample


class FlattenBatch:
    params = (["fastvec", "numpy", "gymnasium"], [8, 1024])
    param_names = ["impl", "batch"]

    def setup(self, impl, batch):
        self.space = make_space()
        self.layout = Layout(self.space)
        self.samples, self.batch = make_batch(self.space, batch)
        self.out = np.empty((batch, self.layout.flat_dim), np.float64)
        self.flat = flatten(self.layout, self.batch, dtype=np.float32)
        self.flat64 = self.flat.astype(np.float64)

    def time_flatten(self, impl, batch):
        if impl == "fastvec":
            flatten(self.layout, self.batch, out=self.out)
        elif impl == "numpy":
            numpy_flatten(self.layout, self.batch, self.out)
        else:
            for s in self.samples:
                gs.flatten(self.space, s)

    def time_unflatten(self, impl, batch):
        if impl == "fastvec":
            unflatten(self.layout, self.flat)
        elif impl == "numpy":
            numpy_unflatten(self.layout, self.flat)
        else:
            for row in self.flat64:
                gs.unflatten(self.space, row)


class FlattenFloat32:
    """The float32 output a policy network takes, into a preallocated buffer."""

    def setup(self):
        self.layout = Layout(make_space())
        _, self.batch = make_batch(self.layout.space, 1024)
        self.out = np.empty((1024, self.layout.flat_dim), np.float32)

    def time_flatten_1024_float32(self):
        flatten(self.layout, self.batch, out=self.out)


class FlattenSample:
    params = (["fastvec", "gymnasium"],)
    param_names = ["impl"]

    def setup(self, impl):
        self.space = make_space()
        self.layout = Layout(self.space)
        samples, _ = make_batch(self.space, 1)
        self.sample = samples[0]
        self.row = gs.flatten(self.space, self.sample)

    def time_flatten_sample(self, impl):
        if impl == "fastvec":
            flatten_sample(self.layout, self.sample)
        else:
            gs.flatten(self.space, self.sample)

    def time_unflatten_sample(self, impl):
        if impl == "fastvec":
            unflatten_sample(self.layout, self.row)
        else:
            gs.unflatten(self.space, self.row)
