"""Bench section ``gae``: fastvec.gae against the loops people use, side by side.

float32 ``[T, N]`` rollouts (dones stored as float32, as CleanRL and SB3 store
them), outputs preallocated where the implementation allows it:

* ``fastvec``: ``fastvec.gae(..., out=(adv, ret))`` on the calling thread
  (``num_threads=1``, the default); ``fastvec 2thr``: ``num_threads=2``;
* ``NumPy loop``: CleanRL's loop written with NumPy rows;
* ``CleanRL torch``: CleanRL ppo.py's torch loop on CPU tensors;
* ``SB3``: ``RolloutBuffer.compute_returns_and_advantage`` (when SB3 is installed);
* ``memcpy``: ``np.copyto`` of the 3 inputs into the 2 outputs (rewards -> adv,
  values -> ret, dones -> adv): reads the 3 inputs and writes 3 output arrays, no
  arithmetic;
* ``3R2W``: ``np.add(rewards, dones, out=adv); np.copyto(ret, values)``: exactly the
  3 arrays read and 2 written that GAE must move, with one add per element. The two
  are the ceilings a memory-bound kernel can approach.

Ratio columns: reference time / fastvec time (higher is better for fastvec),
and fastvec time / ceiling time (1.0 = at the memory-copy ceiling), in wall time
and in CPU time of the calling thread (the latter does not count time spent
preempted, so it is the steadier figure on a loaded machine).
"""
from __future__ import annotations

import numpy as np

from fastvec.bench import fmt_time, print_table

SIZES = [(128, 8), (128, 64), (256, 1024), (2048, 4096)]
GAMMA, LAM = 0.99, 0.95


def _rollout(T: int, N: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    rewards = rng.standard_normal((T, N), dtype=np.float32)
    values = rng.standard_normal((T, N), dtype=np.float32)
    dones = (rng.random((T, N)) < 0.01).astype(np.float32)
    next_value = rng.standard_normal(N, dtype=np.float32)
    next_done = (rng.random(N) < 0.01).astype(np.float32)
    return rewards, values, dones, next_value, next_done


def numpy_loop(rewards, values, dones, next_value, next_done, advantages, gamma, gae_lambda):
    """CleanRL's loop with NumPy rows (what a NumPy user writes); the same code runs on torch
    tensors (:func:`torch_loop`)."""
    T = rewards.shape[0]
    lastgaelam = 0.0
    for t in reversed(range(T)):
        if t == T - 1:
            nextnonterminal = 1.0 - next_done
            nextvalues = next_value
        else:
            nextnonterminal = 1.0 - dones[t + 1]
            nextvalues = values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
    return advantages, advantages + values


def torch_loop(torch, rewards, values, dones, next_value, next_done, gamma, gae_lambda):
    """CleanRL ppo.py's loop on torch CPU tensors."""
    with torch.no_grad():
        return numpy_loop(rewards, values, dones, next_value, next_done, torch.zeros_like(rewards), gamma, gae_lambda)


def numpy_vtrace(rewards, values, dones, next_value, next_done, log_rhos, vs, gamma,
                 rho_bar=1.0, c_bar=1.0, lam=1.0):
    """V-trace written with NumPy rows (what a NumPy user writes)."""
    T = rewards.shape[0]
    rhos = np.exp(log_rhos)
    clipped = np.minimum(rho_bar, rhos)
    cs = lam * np.minimum(c_bar, rhos)
    acc = np.zeros_like(next_value)
    for t in reversed(range(T)):
        if t == T - 1:
            disc = gamma * (1.0 - next_done)
            v_next = next_value
        else:
            disc = gamma * (1.0 - dones[t + 1])
            v_next = values[t + 1]
        acc = clipped[t] * (rewards[t] + disc * v_next - values[t]) + disc * cs[t] * acc
        vs[t] = values[t] + acc
    vs_next = np.concatenate([vs[1:], next_value[None]])
    disc = gamma * (1.0 - np.concatenate([dones[1:], next_done[None]]))
    pg = clipped * (rewards + disc * vs_next - values)
    return vs, pg


def _sb3_case(data):
    """A callable running SB3's compute_returns_and_advantage on this data, or None."""
    try:
        import gymnasium as gym
        import torch
        from stable_baselines3.common.buffers import RolloutBuffer
    except ImportError:
        return None
    rewards, values, dones, next_value, next_done = data
    T, N = rewards.shape
    buf = RolloutBuffer(T, gym.spaces.Box(-1, 1, (1,)), gym.spaces.Discrete(2), device="cpu",
                        gae_lambda=LAM, gamma=GAMMA, n_envs=N)
    buf.rewards[:] = rewards
    buf.values[:] = values
    buf.episode_starts[:] = dones
    last_values = torch.from_numpy(next_value.copy())
    last_dones = next_done.astype(bool)
    return lambda: buf.compute_returns_and_advantage(last_values=last_values, dones=last_dones)


def interleaved_medians(cases: dict, repeats: int, numbers: dict, cpu: dict | None = None) -> dict:
    """Median wall seconds per call of each case, the cases taking turns within every repeat.

    Taking turns keeps the ratios fair on a shared machine whose load drifts
    during the run (each repeat sees every case under about the same load).
    If ``cpu`` is a dict, it receives the median CPU seconds per call of the
    calling thread (``time.thread_time``: time spent preempted is not counted).
    """
    import time

    for name, fn in cases.items():  # warm-up
        fn()
    times = {name: [] for name in cases}
    cpu_times = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            number = numbers[name]
            start_cpu = time.thread_time()
            start = time.perf_counter()
            for _ in range(number):
                fn()
            times[name].append((time.perf_counter() - start) / number)
            cpu_times[name].append((time.thread_time() - start_cpu) / number)
    if cpu is not None:
        cpu.update({name: float(np.median(t)) for name, t in cpu_times.items()})
    return {name: float(np.median(t)) for name, t in times.items()}


def run(quick: bool) -> None:
    import fastvec

    try:
        import torch
    except ImportError:  # the torch column is left out
        torch = None
    sizes = SIZES[:-1] if quick else SIZES
    header = ["T x N", "fastvec", "fastvec (CPU)", "fastvec 2thr", "NumPy loop", "CleanRL torch", "SB3", "memcpy",
              "3R2W", "NumPy/fv", "torch/fv", "SB3/fv", "fv/memcpy", "fv/memcpy (CPU)", "fv/3R2W",
              "fv/3R2W (CPU)"]
    rows = []
    for T, N in sizes:
        data = _rollout(T, N)
        rewards, values, dones, next_value, next_done = data
        adv = np.empty_like(rewards)
        ret = np.empty_like(rewards)
        work = np.empty_like(rewards)
        fast = {
            "fastvec": lambda: fastvec.gae(*data, gamma=GAMMA, gae_lambda=LAM, out=(adv, ret)),
            "memcpy": lambda: (np.copyto(adv, rewards), np.copyto(ret, values),
                               np.copyto(adv, dones)),
            "3R2W": lambda: (np.add(rewards, dones, out=adv), np.copyto(ret, values)),
        }
        slow = {"NumPy loop": lambda: numpy_loop(*data, work, GAMMA, LAM)}
        if torch is not None:
            tdata = [torch.from_numpy(x) for x in data]
            slow["CleanRL torch"] = lambda: torch_loop(torch, *tdata, GAMMA, LAM)
        sb3 = _sb3_case(data)
        if sb3 is not None:
            slow["SB3"] = sb3
        # calls per repeat: ~2 ms of work for the fast cases, one call for the loops
        fast_number = max(1, min(2000, 4_000_000 // (T * N)))
        numbers = {**{k: fast_number for k in fast}, **{k: 1 for k in slow}}
        cpu: dict = {}
        med = interleaved_medians({**fast, **slow}, 7 if quick else 15, numbers, cpu)
        if T * N >= 1 << 18:  # threads only pay off on large buffers
            # measured on their own: idle OpenMP workers spin for a while after each call,
            # which would slow down whatever case runs next
            med.update(interleaved_medians(
                {"fastvec 2thr": lambda: fastvec.gae(*data, gamma=GAMMA, gae_lambda=LAM,
                                                     out=(adv, ret), num_threads=2)},
                7 if quick else 15, {"fastvec 2thr": fast_number}))
        fv = med["fastvec"]
        cell = lambda k: fmt_time(med[k]) if k in med else "—"
        ratio = lambda k: f"{med[k] / fv:.1f}x" if k in med else "—"
        rows.append([f"{T} x {N}", cell("fastvec"), fmt_time(cpu["fastvec"]), cell("fastvec 2thr"), cell("NumPy loop"),
                     cell("CleanRL torch"), cell("SB3"), cell("memcpy"), cell("3R2W"),
                     ratio("NumPy loop"), ratio("CleanRL torch"), ratio("SB3"),
                     f"{fv / med['memcpy']:.2f}", f"{cpu['fastvec'] / cpu['memcpy']:.2f}",
                     f"{fv / med['3R2W']:.2f}", f"{cpu['fastvec'] / cpu['3R2W']:.2f}"])
    print_table("GAE, float32 [T, N], preallocated outputs (median per call)", header, rows)

    # V-trace: fastvec (log-rhos: one scalar exp per element; rhos: vectorised) vs NumPy rows
    header = ["T x N", "fastvec log_rhos", "fastvec rhos", "NumPy loop", "NumPy/fv log_rhos"]
    rows = []
    for T, N in sizes:
        data = _rollout(T, N)
        log_rhos = (0.3 * np.random.default_rng(1).standard_normal((T, N))).astype(np.float32)
        rhos = np.exp(log_rhos)
        vs = np.empty_like(log_rhos)
        pg = np.empty_like(log_rhos)
        work = np.empty_like(log_rhos)
        fast_number = max(1, min(2000, 1_000_000 // (T * N)))
        med = interleaved_medians({
            "log": lambda: fastvec.vtrace(*data, gamma=GAMMA, log_rhos=log_rhos, out=(vs, pg)),
            "rhos": lambda: fastvec.vtrace(*data, gamma=GAMMA, rhos=rhos, out=(vs, pg)),
            "numpy": lambda: numpy_vtrace(*data, log_rhos, work, GAMMA),
        }, 5 if quick else 9, {"log": fast_number, "rhos": fast_number, "numpy": 1})
        rows.append([f"{T} x {N}", fmt_time(med["log"]), fmt_time(med["rhos"]),
                     fmt_time(med["numpy"]), f"{med['numpy'] / med['log']:.1f}x"])
    print_table("V-trace, float32 [T, N], preallocated outputs (median per call)", header, rows)
