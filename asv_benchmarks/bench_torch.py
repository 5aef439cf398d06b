"""asv: TorchCartPole step on the CPU against gymnasium's CartPoleVectorEnv (NumPy)."""
import numpy as np

try:
    import torch
    from fastvec.torch import TorchCartPole
except ImportError:  # torch is an optional extra
    torch = None


class TimeCartPoleStep:
    params = (["torch_f32", "torch_f64", "gymnasium_numpy"], [1024, 16384])
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
            dtype = torch.float32 if impl == "torch_f32" else torch.float64
            self.env = TorchCartPole(num_envs, dtype=dtype, seed=0, copy=False)
            self.actions = torch.from_numpy(actions)
        self.env.reset(seed=0)

    def time_step(self, impl, num_envs):
        self.env.step(self.actions)

    def teardown(self, impl, num_envs):
        self.env.close()
