"""asv: training loops on each vector backend, torch at its default threads and at 1.

``TrainLoop.track_sps`` is the env transitions per second of one whole iteration (rollout and
update) of a loop of ``fastvec._bench.train`` (CleanRL PPO on HalfCheetah and CartPole, SB3
PPO on both, Pong with a Nature-CNN forward pass), after one iteration of warm-up; the
``env-free bound`` backend replays recorded env outputs. ``python -m fastvec.bench train``
prints the same cases as a table, the backends taking turns.

Skipped (NotImplementedError in setup) where torch or a loop's extra (`real`, `sb3`) is
missing: run these in an environment that has them (``asv run --python=same``).
"""
try:
    from fastvec._bench import train
except ModuleNotFoundError as exc:  # torch is missing
    train, _missing = None, str(exc)
    LOOPS, BACKENDS = ["CleanRL PPO, CartPole-v1 x8"], ["SyncVectorEnv"]
else:
    LOOPS = [loop.label for loop in train.LOOPS]
    BACKENDS = sorted({b for loop in train.LOOPS for b in loop.backends}) + [train.BOUND]


class TrainLoop:
    params = (LOOPS, BACKENDS, ["default", "1"])
    param_names = ["loop", "backend", "torch_threads"]
    timeout = 600
    number = 1
    repeat = 1

    def setup(self, loop, backend, torch_threads):
        if train is None:
            raise NotImplementedError(_missing)
        self.loop = next(candidate for candidate in train.LOOPS if candidate.label == loop)
        why = self.loop.missing()
        if why is not None:
            raise NotImplementedError(why)
        if backend not in self.loop.backends and backend != train.BOUND:
            raise NotImplementedError(f"{loop} does not run on {backend}")
        self.threads = train.DEFAULT_THREADS if torch_threads == "default" else int(torch_threads)

    def track_sps(self, loop, backend, torch_threads):
        previous = train.torch.get_num_threads()
        train.torch.set_num_threads(self.threads)
        try:
            return train.measure_once(self.loop, backend, quick=True, iterations=1).sps
        finally:
            train.torch.set_num_threads(previous)

    track_sps.unit = "steps/s"
