"""asv: PettingZoo Parallel envs, 8 per vector env, on fastvec's MultiAgentVectorEnv and on
SuperSuit's pipeline, and what the cores give them.

``MultiAgentStep.time_step`` is the time of ``STEPS`` vector steps' worth of agent rows (every
row stepped ``STEPS`` times: ``step`` calls, or for ``fastvec send/recv`` the ``recv``/``send``
pairs that step as many rows; random actions drawn in setup); compare it across ``backend``
for the same env.
``MultiAgentLimit.track_sps`` is what one plain process per usable core, each stepping its
share of the 8 envs with no vector env, steps together, in agent-steps per second: the
cores' real limit. ``python -m fastvec.bench multiagent`` prints the same cases as a table.

Skipped (NotImplementedError in setup) where the `pettingzoo` extra (PettingZoo's butterfly
envs, Box2D for multiwalker, SuperSuit) is missing. asv's own environments hold only the
core dependencies: run these in an environment that has them (``asv run --python=same``).
"""
import importlib

from fastvec._bench import multiagent
from fastvec.host import usable_cpus

ENVS = [module.rsplit(".", 1)[1] for module, _ in multiagent.ENVS]
BACKENDS = list(multiagent.BACKENDS)
STEPS = 8


def _env(name):
    """(module, keyword arguments, a constructor) of bench env ``name``; NotImplementedError
    where its packages are missing."""
    module, kwargs = next((m, k) for m, k in multiagent.ENVS if m.rsplit(".", 1)[1] == name)
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise NotImplementedError(f"{name} needs the pettingzoo extra: {exc}") from exc
    return module, kwargs, multiagent._maker(module, kwargs)


class MultiAgentStep:
    params = (ENVS, BACKENDS)
    param_names = ["env", "backend"]
    timeout = 600

    def setup(self, env, backend):
        self.vec = None
        _, _, make = _env(env)
        if not backend.startswith("fastvec"):
            try:
                import supersuit  # noqa: F401
            except ImportError as exc:
                raise NotImplementedError(f"SuperSuit is not installed: {exc}") from exc
        self.vec = multiagent.make_vector(backend, make)
        self.advance = multiagent.start(self.vec, multiagent.action_pool(self.vec, STEPS))
        for _ in range(2):  # (warm: first steps allocate)
            self.advance()

    def teardown(self, env, backend):
        if self.vec is not None:
            self.vec.close()

    def time_step(self, env, backend):
        rows = 0
        while rows < STEPS * self.vec.num_envs:
            rows += self.advance()


class MultiAgentLimit:
    params = (ENVS,)
    param_names = ["env"]
    timeout = 600

    def setup(self, env):
        self.module, self.kwargs, _ = _env(env)
        self.cores = min(len(usable_cpus()), multiagent.NUM_ENVS)

    def track_sps(self, env):
        return multiagent.processes_rate(self.module, self.kwargs, self.cores, 2.0)

    track_sps.unit = "agent-steps/s"
