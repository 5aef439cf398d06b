"""asv suites for fastvec.gae / fastvec.vtrace (float32, step-major [T, N]).

Each suite times fastvec next to its references on the same arrays: the CleanRL
loop in NumPy, SB3's RolloutBuffer.compute_returns_and_advantage (skipped when
SB3 is not installed) and a plain copy of the same bytes (the memory ceiling).
"""
import numpy as np

SIZES = ["128x8", "128x64", "256x1024", "2048x4096"]
GAMMA, LAM = 0.99, 0.95


def _rollout(size):
    T, N = map(int, size.split("x"))
    rng = np.random.default_rng(0)
    return (rng.standard_normal((T, N), dtype=np.float32),
            rng.standard_normal((T, N), dtype=np.float32),
            (rng.random((T, N)) < 0.01).astype(np.float32),
            rng.standard_normal(N, dtype=np.float32),
            (rng.random(N) < 0.01).astype(np.float32))


class TimeGAE:
    """fastvec.gae with preallocated outputs vs the memory-copy ceiling and a NumPy loop."""

    params = [SIZES]
    param_names = ["size"]

    def setup(self, size):
        import fastvec
        from fastvec._bench.gae import numpy_loop

        self.gae = fastvec.gae
        self.numpy_loop = numpy_loop
        self.data = _rollout(size)
        self.adv = np.empty_like(self.data[0])
        self.ret = np.empty_like(self.data[0])
        self.work = np.empty_like(self.data[0])

    def time_fastvec(self, size):
        self.gae(*self.data, gamma=GAMMA, gae_lambda=LAM, out=(self.adv, self.ret))

    def time_fastvec_2threads(self, size):
        self.gae(*self.data, gamma=GAMMA, gae_lambda=LAM, out=(self.adv, self.ret), num_threads=2)

    def time_fastvec_bool_dones(self, size):
        if not hasattr(self, "bool_data"):
            r, v, d, nv, nd = self.data
            self.bool_data = (r, v, d.astype(bool), nv, nd.astype(bool))
        self.gae(*self.bool_data, gamma=GAMMA, gae_lambda=LAM, out=(self.adv, self.ret))

    def time_memcpy(self, size):
        r, v, d = self.data[:3]
        np.copyto(self.adv, r)
        np.copyto(self.ret, v)
        np.copyto(self.adv, d)

    def time_3r2w(self, size):
        r, v, d = self.data[:3]
        np.add(r, d, out=self.adv)
        np.copyto(self.ret, v)

    def time_numpy_loop(self, size):
        self.numpy_loop(*self.data, self.work, GAMMA, LAM)


class TimeGAESB3:
    """SB3's RolloutBuffer.compute_returns_and_advantage on the same data."""

    params = [SIZES]
    param_names = ["size"]

    def setup(self, size):
        try:
            from fastvec._bench.gae import _sb3_case
        except ImportError:
            raise NotImplementedError("fastvec not importable")
        self.case = _sb3_case(_rollout(size))
        if self.case is None:
            raise NotImplementedError("stable-baselines3 is not installed")

    def time_sb3_compute_returns_and_advantage(self, size):
        self.case()


class TimeVTrace:
    """fastvec.vtrace (log-rhos, clipped) with preallocated outputs."""

    params = [SIZES]
    param_names = ["size"]

    def setup(self, size):
        import fastvec

        self.vtrace = fastvec.vtrace
        self.data = _rollout(size)
        self.log_rhos = (0.3 * np.random.default_rng(1).standard_normal(self.data[0].shape)
                         ).astype(np.float32)
        self.out = (np.empty_like(self.data[0]), np.empty_like(self.data[0]))

    def time_fastvec_vtrace(self, size):
        self.vtrace(*self.data, gamma=GAMMA, log_rhos=self.log_rhos, out=self.out)
