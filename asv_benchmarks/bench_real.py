"""asv: real workloads (MuJoCo, Atari Pong, Breakout, MsPacman and SpaceInvaders) on every vector backend, and the limit of the cores.

``RealStep.time_step`` is the time of ``STEPS`` vector steps; compare it across
``backend`` for the same workload and ``num_envs``. ``RealLimit.track_sps`` is what
N processes (N = the usable cores), one env each in a plain Python loop, step per
second together; ``RealEmulator.track_sps`` the same for the bare emulator of each
Atari game (the ceiling). ``python -m fastvec.bench real`` prints the same cases as tables.

Skipped (NotImplementedError in setup) where the `real` extra (gymnasium[mujoco],
ale-py, OpenCV) or a backend's package (stable-baselines3, envpool) is missing; the
ale-py vector env runs the Atari games only. asv's own environments hold only the core
dependencies: run these in an environment that has them (``asv run --python=same``).
"""
try:
    from fastvec._bench import real
except ModuleNotFoundError as exc:  # the `real` extra is missing
    real, _missing_extra = None, str(exc)
    WORKLOADS, BACKENDS = ["HalfCheetah-v5"], ["SyncVectorEnv"]
else:
    WORKLOADS = [w.label for w in real.WORKLOADS]
    BACKENDS = list(real.PEERS + real.REFERENCES)

STEPS = 32


def _workload(label):
    if real is None:
        raise NotImplementedError(_missing_extra)
    return next(w for w in real.WORKLOADS if w.label == label)


class RealStep:
    params = (WORKLOADS, BACKENDS, [8, 16])
    param_names = ["workload", "backend", "num_envs"]
    timeout = 300

    def setup(self, workload, backend, num_envs):
        self.env = None
        workload = _workload(workload)
        missing = real.missing_columns()
        if backend in missing:
            raise NotImplementedError(missing[backend])
        if backend == "ale-py AtariVectorEnv" and workload.ale_game is None:
            raise NotImplementedError("ale-py's vector env runs Atari games only")
        actions = real.workload_actions(workload, num_envs, STEPS)
        self.env = real.make_backend(backend, workload, num_envs)
        self.actions = real.own_actions(backend, self.env, actions)
        real.warm_up(backend, self.env, self.actions)

    def teardown(self, workload, backend, num_envs):
        if self.env is not None:
            self.env.close()

    def time_step(self, workload, backend, num_envs):
        for a in self.actions:
            self.env.step(a)


class RealLimit:
    params = (WORKLOADS,)
    param_names = ["workload"]
    timeout = 300

    def setup(self, workload):
        self.limit = None
        self.limit = real.CoreLimit(self._make(_workload(workload)))

    def _make(self, workload):
        return workload.make

    def teardown(self, workload):
        if self.limit is not None:
            self.limit.close()

    def track_sps(self, workload):
        return self.limit.rate(1.0)

    track_sps.unit = "steps/s"


class RealEmulator(RealLimit):
    """The Atari workloads' ceiling: N processes stepping the bare emulator (no screen,
    no preprocessing), summed; ``RealStep``'s Atari rows are a share of it."""

    params = ([w.label for w in real.WORKLOADS if w.emulator] if real is not None else WORKLOADS,)

    def _make(self, workload):
        if workload.emulator is None:
            raise NotImplementedError("the emulator's ceiling is for Atari games only")
        return workload.emulator
