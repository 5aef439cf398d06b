"""asv: the `hosts` section's sweep and stall, where how a vector env waits shows most.

``HostsSweep.track_sps`` is the summed SPS (env transitions per second) of two trainers of
``fastvec._bench.hosts`` (a 64x64 MLP's forward pass per step and a short update every 16
steps, over 8 envs of HalfCheetah-v5, or CartPole-v1 without MuJoCo, torch at its default
threads) run at once, each in its own interpreter, after their warm-up; compare
FastVectorEnv with SyncVectorEnv. ``HostsStall.track_stall_cpu_s`` is the CPU seconds the
trainer's process (all its threads, not the workers) burnt in the step in which one env of
the 8 slept 2 s: a wait that blocks burns next to nothing. ``python -m fastvec.bench hosts``
prints these and the other conditions as a table, the backends taking turns.

Skipped (NotImplementedError in setup) where torch is missing: run these in an environment
that has it (``asv run --python=same``).
"""
try:
    from fastvec._bench import hosts
except ModuleNotFoundError as exc:  # (hosts imports neither torch nor MuJoCo itself)
    hosts, _missing = None, str(exc)
    BACKENDS = ["FastVectorEnv", "SyncVectorEnv"]
else:
    _missing = None
    BACKENDS = list(hosts.BACKENDS)

SWEEP_BACKENDS = ["FastVectorEnv", "SyncVectorEnv"]


def _check():
    why = _missing if hosts is None else hosts.missing()
    if why is not None:
        raise NotImplementedError(why)


class _Hosts:
    """One condition of ``python -m fastvec.bench hosts`` per backend, at the quick sizes."""

    param_names = ["backend"]
    timeout = 300
    number = 1
    repeat = 1
    condition = ""

    def setup(self, backend):
        _check()

    def result(self, backend):
        result, _ = hosts.run_condition(hosts.condition(self.condition), backend, hosts.default_workload(),
                                        hosts.QUICK)
        return result


class HostsSweep(_Hosts):
    params = (SWEEP_BACKENDS,)
    condition = "sweep"

    def track_sps(self, backend):
        return self.result(backend).sps

    track_sps.unit = "steps/s"


class HostsStall(_Hosts):
    params = (BACKENDS,)
    condition = "stall"

    def track_stall_cpu_s(self, backend):
        result = self.result(backend)
        if result.stall_cpu_s is None:
            raise RuntimeError("the stall was not seen in the trainer's timed run")
        return result.stall_cpu_s

    track_stall_cpu_s.unit = "s"
