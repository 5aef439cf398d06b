"""PettingZoo Parallel envs, 8 per vector env: MultiAgentVectorEnv against SuperSuit's pipeline.

SuperSuit (``pettingzoo_env_to_vec_env_v1`` + ``concat_vec_envs_v1``) is what CleanRL's and
SB3's PettingZoo examples vectorize with. Columns, in agent-steps per second (one agent row
stepped once):

- **plain loop**: the 8 envs stepped one after the other in this process with dict actions,
  each reset when its last agent is gone (no vector env at all);
- **limit**: that rate times the usable cores, capped at 8 envs' worth of processes: what the
  cores would allow if they scaled perfectly;
- **N processes**: the same plain loop in one process per usable core, each over its share of
  the envs, started together and added up: what the cores allow on this machine, with no
  vector env and no communication at all (on a 2-vCPU VM two processes get 1.6-1.8x one);
- **SuperSuit** with ``num_cpus=0`` (in this process) and ``num_cpus=2`` (two worker processes);
- **fastvec**: ``MultiAgentVectorEnv`` with its default arguments (``step``, every env in
  lockstep);
- **fastvec send/recv**: ``MultiAgentVectorEnv(..., batch_size=<one worker's envs>)`` stepped
  EnvPool style: each ``recv`` hands back the first worker done, which is sent its next
  actions at once, so that no worker waits for another's slow step or reset.

The backends take turns round by round, random actions drawn once. Rates are medians of the
rounds; each ratio is the median of the rounds' ratios (paired: the same minute of the machine).

A second table (with the ``torch`` extra) puts a policy in the loop, as a rollout has it: on
multiwalker (vector observations), a 64x64 tanh MLP's forward pass, torch at its default
threads, turns each step's (each ``recv``'s) observations into the next actions, on the
vector-env backends above.
"""
from __future__ import annotations

import functools
import importlib
import multiprocessing
import statistics
import time

import numpy as np

from fastvec.bench import fmt_rate, interleaved_samples, paired_ratio, print_table
from fastvec.host import usable_cpus

NUM_ENVS = 8
# (module, keyword arguments): three envs users train on; multiwalker needs Box2D (in the pettingzoo extra)
ENVS = [
    ("pettingzoo.butterfly.pistonball_v6", {}),
    ("pettingzoo.butterfly.cooperative_pong_v6", {}),
    ("pettingzoo.sisl.multiwalker_v9", {}),
]


def _maker(module: str, kwargs: dict):
    parallel_env = importlib.import_module(module).parallel_env
    return lambda: parallel_env(**kwargs)


def _actions(space, rows: int, count: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if hasattr(space, "n"):
        return [rng.integers(0, space.n, rows) for _ in range(count)]
    return [rng.uniform(space.low, space.high, (rows, *space.shape)).astype(space.dtype) for _ in range(count)]


def plain_rate(make, seconds: float) -> float:
    """Agent-steps/s of the envs stepped one after the other in this process."""
    envs = [make() for _ in range(NUM_ENVS)]
    try:
        for k, env in enumerate(envs):
            env.reset(seed=k)
        space = envs[0].action_space(envs[0].possible_agents[0])
        pool = _actions(space, 64, 16)
        done = 0
        start = time.perf_counter()
        i = 0
        while time.perf_counter() - start < seconds:
            for env in envs:
                acts = pool[i % len(pool)]
                actions = {agent: acts[j] for j, agent in enumerate(env.agents)}
                env.step(actions)
                done += len(actions)
                if not env.agents:
                    env.reset()
            i += 1
        return done / (time.perf_counter() - start)
    finally:
        for env in envs:
            env.close()


def _plain_share(module: str, kwargs: dict, envs: int, seconds: float, barrier, results) -> None:
    global NUM_ENVS
    NUM_ENVS = envs  # (this process's share; the module global is what plain_rate steps)
    make = _maker(module, kwargs)
    make().close()  # (imports done before the timing starts)
    barrier.wait()
    results.put(plain_rate(make, seconds))


def processes_rate(module: str, kwargs: dict, processes: int, seconds: float) -> float:
    """Agent-steps/s of ``processes`` plain loops at once, one per process, over ``NUM_ENVS``
    envs shared out among them (each process's own rate, added up)."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    shares = [NUM_ENVS // processes + (k < NUM_ENVS % processes) for k in range(processes)]
    workers = [ctx.Process(target=_plain_share, args=(module, kwargs, n, seconds, barrier, results))
               for n in shares]
    for worker in workers:
        worker.start()
    try:
        return sum(results.get(timeout=120 + 2 * seconds) for _ in workers)
    finally:
        for worker in workers:
            worker.join(5)
            if worker.is_alive():
                worker.kill()


def _timed(advance, seconds: float) -> float:
    """Rows per second of ``advance()`` (which returns the rows it stepped) called for ``seconds``."""
    for _ in range(3):
        advance()
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        done += advance()
    return done / (time.perf_counter() - start)


SEND_RECV = "fastvec send/recv"
#: the vector-env columns: fastvec's (lockstep ``step``, and send/recv), and SuperSuit's
#: pipeline with its worker processes
BACKENDS = {"fastvec": None, SEND_RECV: None, "SuperSuit num_cpus=0": 0, "SuperSuit num_cpus=2": 2}


def make_vector(backend: str, make):
    """The vector env of column ``backend`` (a key of :data:`BACKENDS`) over ``NUM_ENVS`` envs
    built by ``make``: MultiAgentVectorEnv with its defaults, or with one worker's envs per
    ``recv`` (as many workers as usable cores that divide the envs evenly), or SuperSuit's
    ``pettingzoo_env_to_vec_env_v1`` + ``concat_vec_envs_v1``."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {list(BACKENDS)}")
    if BACKENDS[backend] is None:
        from fastvec.vector.multi_agent_vector_env import MultiAgentVectorEnv

        if backend == SEND_RECV:
            workers = max(w for w in range(1, min(len(usable_cpus()), NUM_ENVS) + 1) if NUM_ENVS % w == 0)
            return MultiAgentVectorEnv([make] * NUM_ENVS, num_workers=workers, batch_size=NUM_ENVS // workers)
        return MultiAgentVectorEnv([make] * NUM_ENVS)
    import supersuit as ss

    return ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(make()), NUM_ENVS, num_cpus=BACKENDS[backend],
                                 base_class="gymnasium")


def action_pool(vec, count: int) -> list[np.ndarray]:
    """``count`` batches of random actions for every row of ``vec``, drawn once."""
    space = vec.single_action_space if hasattr(vec, "single_action_space") else vec.action_space
    return _actions(space, vec.num_envs, count)


def start(vec, actions: list[np.ndarray] | None = None, policy=None):
    """Reset ``vec`` (from :func:`make_vector`) and return ``advance()``: one ``step`` or, for a
    send/recv MultiAgentVectorEnv, one ``recv`` and the ``send`` of its rows' next actions; it
    returns the agent rows it stepped. The actions are the next batch of ``actions``, or with
    ``policy`` (a function from a batch of rows' observations to their actions), the policy's
    on the last observations."""
    count = iter(range(1 << 62))
    if getattr(vec, "batch_size", None) is not None and vec.batch_size < getattr(vec, "num_parallel_envs", 0):
        vec.async_reset(seed=0)

        def advance() -> int:
            obs, _, _, _, infos = vec.recv()
            rows = infos["env_id"]
            vec.send(policy(obs) if policy is not None else actions[next(count) % len(actions)][:len(rows)], rows)
            return len(rows)
    elif policy is not None:
        last = [vec.reset(seed=0)[0]]

        def advance() -> int:
            last[0] = vec.step(policy(last[0]))[0]
            return vec.num_envs
    else:
        vec.reset(seed=0)

        def advance() -> int:
            vec.step(actions[next(count) % len(actions)])
            return vec.num_envs
    return advance


#: the env and backends of the table with a policy in the loop
POLICY_ENV = ("pettingzoo.sisl.multiwalker_v9", {})
POLICY_BACKENDS = ("fastvec", SEND_RECV, "SuperSuit num_cpus=2", "SuperSuit num_cpus=0")


def mlp_policy(vec):
    """The actor of the train section's CleanRL-style PPO agent (a 64x64 tanh MLP), seeded,
    from one row's observation to its action: numpy observations of any number of rows in,
    their actions out (clipped into a Box action space, the argmax of a Discrete one)."""
    import torch

    from fastvec._bench.train_agents import Agent

    obs_space = getattr(vec, "single_observation_space", None) or vec.observation_space
    act_space = getattr(vec, "single_action_space", None) or vec.action_space
    discrete = hasattr(act_space, "n")
    outputs = int(act_space.n) if discrete else int(np.prod(act_space.shape))
    torch.manual_seed(0)
    net = Agent(int(np.prod(obs_space.shape)), outputs, not discrete).actor

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out = net(torch.as_tensor(obs, dtype=torch.float32).reshape(len(obs), -1)).numpy()
        if discrete:
            return out.argmax(1) + int(act_space.start)
        return np.clip(out.reshape(len(obs), *act_space.shape), act_space.low, act_space.high).astype(act_space.dtype)

    return act


def policy_rate(backend: str, make, seconds: float) -> float:
    """Agent-steps/s of column ``backend`` for ``seconds`` with :func:`mlp_policy` in the loop."""
    vec = make_vector(backend, make)
    try:
        return _timed(start(vec, policy=mlp_policy(vec)), seconds)
    finally:
        vec.close()


def vector_rate(backend: str, make, seconds: float) -> float:
    """Agent-steps/s of column ``backend`` stepped for ``seconds``."""
    vec = make_vector(backend, make)
    try:
        return _timed(start(vec, action_pool(vec, 16)), seconds)
    finally:
        vec.close()


def run(quick: bool = False) -> None:
    seconds, rounds = (1.0, 1) if quick else (3.0, 5)
    cores = min(len(usable_cpus()), NUM_ENVS)
    rows = []
    for module, kwargs in ENVS:
        name = module.rsplit(".", 1)[1]
        try:
            make = _maker(module, kwargs)
            probe = make()
            agents = len(probe.possible_agents)
            probe.close()
            import supersuit  # noqa: F401
        except Exception as exc:  # (an extra that is missing: PettingZoo, Box2D, SuperSuit)
            rows.append([name, "-", f"skipped: {type(exc).__name__}: {exc}"[:80]] + [""] * 11)
            continue
        samples = interleaved_samples({
            "plain": lambda: plain_rate(make, seconds),
            "processes": lambda: processes_rate(module, kwargs, cores, seconds),
            "ss0": lambda: vector_rate("SuperSuit num_cpus=0", make, seconds),
            "ss2": lambda: vector_rate("SuperSuit num_cpus=2", make, seconds),
            "fastvec": lambda: vector_rate("fastvec", make, seconds),
            "send/recv": lambda: vector_rate(SEND_RECV, make, seconds),
        }, rounds)
        rates = {key: statistics.median(values) for key, values in samples.items()}
        limit = [cores * p for p in samples["plain"]]
        fastvec, send_recv = samples["fastvec"], samples["send/recv"]
        rows.append([name, NUM_ENVS * agents, fmt_rate(rates["plain"]), fmt_rate(rates["plain"] * cores),
                     fmt_rate(rates["processes"]), fmt_rate(rates["ss0"]), fmt_rate(rates["ss2"]),
                     fmt_rate(rates["fastvec"]), fmt_rate(rates["send/recv"]),
                     f"{paired_ratio(fastvec, limit):.0%}", f"{paired_ratio(fastvec, samples['processes']):.0%}",
                     f"{paired_ratio(send_recv, samples['processes']):.0%}",
                     f"{paired_ratio(fastvec, samples['ss2']):.2f}x", f"{paired_ratio(send_recv, samples['ss2']):.2f}x"])
    print_table(f"PettingZoo Parallel envs, {NUM_ENVS} per vector env: agent-steps/s ({cores} cores)",
                ["env", "rows", "plain loop", "limit", f"{cores} processes", "SuperSuit num_cpus=0",
                 "SuperSuit num_cpus=2", "fastvec", "fastvec send/recv", "fastvec / limit",
                 f"fastvec / {cores} processes", f"send/recv / {cores} processes", "fastvec / SuperSuit 2",
                 "send/recv / SuperSuit 2"], rows)
    print(f"Rates: medians of {rounds} round(s) of {seconds:g} s, the backends taking turns; ratios: the "
          "median of the rounds' ratios (each round's fastvec against the same round's reference).")
    _run_with_policy(seconds, rounds)


def _run_with_policy(seconds: float, rounds: int) -> None:
    module, kwargs = POLICY_ENV
    name = module.rsplit(".", 1)[1]
    try:
        import supersuit  # noqa: F401
        import torch

        make = _maker(module, kwargs)
        make().close()
    except Exception as exc:  # (an extra that is missing: torch, PettingZoo, Box2D, SuperSuit)
        print(f"\nWith a policy: skipped, {type(exc).__name__}: {exc}")
        return
    samples = interleaved_samples({b: functools.partial(policy_rate, b, make, seconds) for b in POLICY_BACKENDS},
                                  rounds)
    reference = samples["SuperSuit num_cpus=2"]
    rows = [[name, backend, fmt_rate(statistics.median(values)), f"{paired_ratio(values, reference):.2f}x"]
            for backend, values in samples.items()]
    print_table(f"With a policy: {NUM_ENVS} envs, a 64x64 MLP's forward pass on every batch of rows, torch at "
                f"{torch.get_num_threads()} threads: agent-steps/s", ["env", "backend", "agent-steps/s",
                                                                       "vs SuperSuit num_cpus=2"], rows)
