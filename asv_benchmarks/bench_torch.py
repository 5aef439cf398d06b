"""asv: TorchCartPole step against gymnasium's CartPoleVectorEnv (NumPy), on the CPU and on CUDA."""
import numpy as np

try:
    import torch
    from fastvec.torch import TorchCartPole
except ImportError:  # torch is an optional extra
    torch = None

IMPLS = {"torch_f32": ("float32", True), "torch_f32_fast": ("float32", False), "torch_f64": ("float64", True)}


class TimeCartPoleStep:
    params = (["torch_f32", "torch_f32_fast", "torch_f64", "gymnasium_numpy"], [1024, 16384])
    param_names = ["impl", "num_envs"]

    def setup(self, impl, num_envs):
        actions = np.random.default_rng(0).integers(0, 2, num_envs).astype(np.int64)
        if impl == "gymnasium_numpy":
            import gymnasium as gym
            self.env = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")
            self.actions = actions
        else:
            if torch is None:
                raise NotImplementedError("torch not installed")
            dtype, exact = IMPLS[impl]
            self.env = TorchCartPole(num_envs, dtype=getattr(torch, dtype), seed=0, copy=False, exact=exact)
            self.actions = torch.from_numpy(actions)
        self.env.reset(seed=0)

    def time_step(self, impl, num_envs):
        self.env.step(self.actions)

    def teardown(self, impl, num_envs):
        self.env.close()


class TimeCartPoleStepCUDA:
    """100 steps then torch.cuda.synchronize(): the kernels' execution, not their queuing."""

    params = (["torch_f32", "torch_f32_fast", "torch_f64"], [4096, 1048576])
    param_names = ["impl", "num_envs"]

    def setup(self, impl, num_envs):
        if torch is None or not torch.cuda.is_available():
            raise NotImplementedError("needs torch with a CUDA GPU")
        dtype, exact = IMPLS[impl]
        self.env = TorchCartPole(num_envs, device="cuda", dtype=getattr(torch, dtype), seed=0, copy=False,
                                 exact=exact)
        self.env.reset(seed=0)
        self.actions = torch.randint(0, 2, (num_envs,), device="cuda")
        self.time_100_steps(impl, num_envs)  # warm-up

    def time_100_steps(self, impl, num_envs):
        for _ in range(100):
            self.env.step(self.actions)
        torch.cuda.synchronize()

    def teardown(self, impl, num_envs):
        self.env.close()
