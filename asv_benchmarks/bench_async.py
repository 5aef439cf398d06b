"""asv: send/recv (batch_size = num_envs/2) against synchronous step on uneven step times."""
import numpy as np

from fastvec import FastVectorEnv
from fastvec._bench.envs import BusyEnv


class UnevenSteps:
    params = (["step", "send_recv"],)
    param_names = ["mode"]
    timeout = 120

    def setup(self, mode):
        fns = [lambda k=k: BusyEnv(50.0, slow_prob=0.1, slow_factor=10.0, seed=k) for k in range(16)]
        batch = 16 if mode == "step" else 8
        self.env = FastVectorEnv(fns, num_workers=8, batch_size=batch)
        if mode == "step":
            self.env.reset(seed=0)
        else:
            self.env.async_reset(seed=0)

    def teardown(self, mode):
        self.env.close()

    def time_256_transitions(self, mode):
        if mode == "step":
            a = np.zeros(16, np.int64)
            for _ in range(16):
                self.env.step(a)
            return
        done = 0
        while done < 256:
            obs, rew, term, trunc, infos = self.env.recv()
            ids = infos["env_id"]
            done += len(ids)
            self.env.send(np.zeros(len(ids), np.int64), ids)
