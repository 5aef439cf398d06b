"""PPO on CartPole-v1 in one readable file (CleanRL style), with no torch.compile and no Triton.

Four ways to run the environments, one agent and one update:

    --backend torch    fastvec.torch.TorchCartPole: envs, rollout, GAE and update all stay
                       on --device (cpu or cuda); no host sync inside the rollout.
    --backend native   fastvec.NativeVectorEnv("CartPole-v1", N): batched Cython envs on CPU.
    --backend fastvec  gymnasium.make_vec(..., vectorization_mode="fastvec"): worker processes.
    --backend sync     gymnasium's SyncVectorEnv, as a reference.

The CPU backends (numpy observations) compute advantages with fastvec.gae.

    python examples/ppo.py                                   # torch backend on the CPU
    python examples/ppo.py --target-return 475 --seed 2      # stop when solved, print the time
    python examples/ppo.py --device cuda --num-envs 4096     # the same on a GPU
    python examples/ppo.py --device cuda --num-envs 4096 --cuda-graphs

GPU: on --backend torch an iteration reads device data on the host once (the returns of the
episodes that finished, for the progress line and the target check); nothing else waits for
the GPU. --cuda-graphs records the rollout (with values, GAE and the batch) and one epoch of
minibatch updates as two CUDA graphs (torch.cuda.CUDAGraph: core torch, no compiler) and
replays them, so an iteration is a handful of launches instead of thousands. --sync-debug
makes any other host sync an error (torch.cuda.set_sync_debug_mode).

Autoreset: every backend runs in gymnasium's SAME_STEP mode, so each stored transition
(obs_t, a_t, r_t) belongs to one episode: nothing is learned across a reset. A truncated
episode (500 steps) is bootstrapped from the value of its final observation (r_t += gamma *
V(final_obs_t)); a terminated one is not.

Timing: before the clock starts, --warmup-iterations iterations run (and CUDA graphs are
captured) and are then undone (weights, optimizer state, generators and envs back to their
start), so one-time costs (allocator, cuBLAS/oneDNN set-up, first-call paths) stay out of the
measured time and the run is the same as without warm-up. The clock starts at the first
env.reset(); the summary gives the overall SPS and the steady-state SPS (one iteration's
steps over the median iteration time).

Output: a live progress line (steps, SPS, mean return of the last 100 episodes) and, in
runs/<run name>/, metrics.csv (one row per iteration), summary.json and curve.png (if
matplotlib is installed).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import json
import os
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from fastvec.torch import resolve_device

CUDA_GRAPHS_NEED_CUDA = ("--cuda-graphs needs --device cuda: a CUDA graph records and replays GPU kernels, "
                         "and on the CPU there is nothing to capture (the CPU path runs the same code eagerly)")
CUDA_GRAPHS_NEED_TORCH = ("--cuda-graphs needs --backend torch: the other backends step numpy envs on the host "
                          "every step, which a CUDA graph cannot record")
GUMBEL_U_MIN = float(np.finfo(np.float32).tiny)
SYNC_DEBUG_NEEDS_CUDA = "--sync-debug checks CUDA host syncs (torch.cuda.set_sync_debug_mode): it needs --device cuda"


@dataclass
class Args:
    backend: str = "torch"
    """which vector env: torch | native | fastvec | sync"""
    device: str = "cpu"
    """torch device for the agent (and for the envs with --backend torch): cpu | cuda | cuda:N"""
    seed: int = 1
    """seed of the envs, the network initialisation and the sampling"""
    threads: int = 1
    """torch.set_num_threads on the CPU (0 keeps torch's default). 1 by default: the default
    backend, TorchCartPole, runs a few µs per torch op whatever the batch, and 2 threads only
    add OpenMP hand-offs (docs/training.md). The vector-env backends are as fast or faster at
    torch's default: --backend fastvec 81-121k SPS at --threads 0 against 104-105k at 1, and
    1.4-1.55x --backend sync at either (2 cores, 160 envs, docs/benchmarks.md)"""
    total_timesteps: int = 2_000_000
    """stop after this many env steps"""
    target_return: float | None = None
    """stop as soon as the mean return of the last `return_window` episodes reaches this"""
    return_window: int = 100
    """episodes in the running mean return"""
    cuda_graphs: bool = False
    """capture the rollout and an update epoch as CUDA graphs and replay them (--device cuda, --backend torch)"""
    warmup_iterations: int = 1
    """iterations run (then undone) before the clock starts; at least 1 with --cuda-graphs"""
    sync_debug: bool = False
    """CUDA: raise on any host sync other than the one per iteration (torch.cuda.set_sync_debug_mode)"""
    exact_env: bool = False
    """--backend torch: TorchCartPole's exact step (gymnasium op for op) instead of its fast float32 step"""

    # Algorithm (tuned for wall-clock time to solve CartPole-v1 on a small CPU, see docs/training.md)
    num_envs: int = 160
    """parallel envs"""
    num_steps: int = 32
    """steps per env per rollout"""
    learning_rate: float = 3e-2
    """Adam learning rate"""
    anneal_lr: bool = False
    """anneal the learning rate linearly to 0 over total_timesteps"""
    gamma: float = 0.995
    """discount"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    num_minibatches: int = 4
    """minibatches per epoch"""
    update_epochs: int = 2
    """epochs over each rollout"""
    norm_adv: bool = True
    """normalise advantages (over the whole batch)"""
    clip_coef: float = 0.2
    """PPO clip range"""
    clip_vloss: bool = False
    """clip the value loss as PPO's original implementation does"""
    ent_coef: float = 0.0
    """entropy bonus"""
    vf_coef: float = 0.25
    """value loss weight"""
    max_grad_norm: float = 1.0
    """gradient clipping (0: off)"""
    hidden: int = 16
    """width of the two hidden layers of the actor and the critic"""

    # Output
    exp_name: str = "ppo"
    """name of the run (directory runs/<exp_name>__<backend>__<seed>__<time>)"""
    save: bool = True
    """write runs/<run>/metrics.csv, summary.json and curve.png"""
    log_every: float = 0.25
    """seconds between progress lines (0: every iteration)"""
    quiet: bool = False
    """no progress line"""


def parse_args(argv: list[str] | None = None) -> Args:
    """argparse over the dataclass fields: --num-envs 64, --anneal-lr / --no-anneal-lr, ..."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    doc = _field_docs(Args)
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        kind = f.type if isinstance(f.type, str) else f.type.__name__
        if kind == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=doc.get(f.name))
        elif kind == "float | None":
            parser.add_argument(flag, type=float, default=f.default, help=doc.get(f.name))
        else:
            parser.add_argument(flag, type={"int": int, "float": float, "str": str}[kind], default=f.default,
                                help=doc.get(f.name))
    args = Args(**vars(parser.parse_args(argv)))
    try:
        check_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def check_args(args: Args) -> None:
    """Raise ValueError for a combination of arguments that cannot run."""
    if args.backend not in ("torch", "native", "fastvec", "sync"):
        raise ValueError(f"--backend must be one of torch, native, fastvec, sync; got {args.backend!r}")
    try:
        device = torch.device(args.device)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ValueError(f"--device must be cpu, cuda or cuda:N; got {args.device!r}")
    if args.cuda_graphs and device.type != "cuda":
        raise ValueError(CUDA_GRAPHS_NEED_CUDA)
    if args.cuda_graphs and args.backend != "torch":
        raise ValueError(CUDA_GRAPHS_NEED_TORCH)
    if args.sync_debug and device.type != "cuda":
        raise ValueError(SYNC_DEBUG_NEEDS_CUDA)
    if (args.num_envs * args.num_steps) % args.num_minibatches:
        raise ValueError(f"num_envs * num_steps ({args.num_envs * args.num_steps}) must be divisible by "
                         f"num_minibatches ({args.num_minibatches})")
    if args.warmup_iterations < 0:
        raise ValueError(f"--warmup-iterations must be >= 0; got {args.warmup_iterations}")


def _field_docs(cls) -> dict[str, str]:
    """The string under each dataclass field, used as its --help text."""
    import ast
    import inspect
    docs, body, last = {}, ast.parse(inspect.getsource(cls)).body[0].body, None
    for node in body:
        if isinstance(node, ast.AnnAssign):
            last = node.target.id
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and last:
            docs[last] = node.value.value
    return docs


# ----------------------------------------------------------------------------- agent
def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """Separate actor and critic MLPs (obs -> hidden -> hidden -> out, tanh), CleanRL's init.

    The layers are applied with torch.nn.functional calls rather than nn.Sequential: with
    networks this small, per-call Python overhead is a large share of the time. The actor's
    logits come out transposed, [n_actions, batch] (``logits_t``): log_softmax and argmax then
    reduce over the first dimension, which torch's CPU kernels do 5-10x faster than over a
    last dimension of size 2 (the values are the same).
    """

    def __init__(self, obs_dim: int, n_actions: int, hidden: int, device: torch.device | str = "cpu"):
        super().__init__()
        linear = lambda n_in, n_out, std=np.sqrt(2): layer_init(nn.Linear(n_in, n_out, device=device), std=std)
        self.critic = nn.ModuleList([linear(obs_dim, hidden), linear(hidden, hidden), linear(hidden, 1, std=1.0)])
        self.actor = nn.ModuleList([linear(obs_dim, hidden), linear(hidden, hidden), linear(hidden, n_actions, 0.01)])

    @staticmethod
    def mlp(layers: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
        l1, l2, l3 = layers
        x = torch.tanh_(F.linear(x, l1.weight, l1.bias))
        x = torch.tanh_(F.linear(x, l2.weight, l2.bias))
        return F.linear(x, l3.weight, l3.bias)

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.actor, obs)

    def logits_t(self, obs: torch.Tensor) -> torch.Tensor:
        """logits(obs).T, made contiguous by computing the last layer as W @ x.T + b."""
        l1, l2, l3 = self.actor
        x = torch.tanh_(F.linear(obs, l1.weight, l1.bias))
        x = torch.tanh_(F.linear(x, l2.weight, l2.bias))
        return torch.addmm(l3.bias.unsqueeze(1), l3.weight, x.T)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.critic, obs).squeeze(-1)


def clip_grad_norm(grads: list[torch.Tensor], max_norm: float) -> None:
    """nn.utils.clip_grad_norm_ without its per-call bookkeeping (same result, no host sync)."""
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))


# ----------------------------------------------------------------------------- envs
def make_envs(args: Args, device: torch.device):
    """The vector env for --backend; every backend autoresets in SAME_STEP mode."""
    if args.backend == "torch":
        from fastvec.torch import TorchCartPole
        return TorchCartPole(args.num_envs, device=device, seed=args.seed, copy=False, exact=args.exact_env)
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode
    same_step = AutoresetMode.SAME_STEP
    if args.backend == "native":
        import fastvec
        envs = fastvec.NativeVectorEnv("CartPole-v1", args.num_envs, autoreset_mode=same_step)
    elif args.backend == "fastvec":
        import fastvec  # noqa: F401  (registers vectorization_mode="fastvec")
        envs = gym.make_vec("CartPole-v1", num_envs=args.num_envs, vectorization_mode="fastvec",
                            vector_kwargs={"native": False, "autoreset_mode": same_step})
    else:
        envs = gym.make_vec("CartPole-v1", num_envs=args.num_envs, vectorization_mode="sync",
                            vector_kwargs={"autoreset_mode": same_step})
    mode = envs.metadata.get("autoreset_mode")
    if mode != same_step:
        raise RuntimeError(f"backend {args.backend!r} gave autoreset_mode {mode!r}; this script needs SAME_STEP")
    return envs


# ----------------------------------------------------------------------------- GAE
def gae_torch(rewards, values, next_values, not_done, *, gamma, gae_lambda, out):
    """GAE on the device: all inputs [T, N]; not_done[t] is 0 where the episode ended at step t.

    next_values[t] is the value of obs_{t+1} (ignored where not_done[t] is 0). The same
    arithmetic as fastvec.gae, written as T fused multiply-adds over [N] rows so that it stays
    on the device. Returns (advantages, returns); advantages are written to `out`.
    """
    T = rewards.shape[0]
    deltas = torch.addcmul(rewards, next_values, not_done, value=gamma).sub_(values)
    decay = not_done * (gamma * gae_lambda)
    out[T - 1].copy_(deltas[T - 1])
    for t in range(T - 2, -1, -1):
        torch.addcmul(deltas[t], decay[t], out[t + 1], out=out[t])
    return out, out + values


# ----------------------------------------------------------------------------- PPO
class PPO:
    """One PPO run: envs, agent, optimizer and preallocated rollout storage.

    ``iteration()`` is ``collect()`` (T env steps, then values, advantages and the batch) and
    ``update()`` (epochs of shuffled minibatch steps). Neither reads device data on the host;
    ``finished_returns()`` does, once per iteration. With ``args.cuda_graphs``, ``capture()``
    records the body of ``collect`` and one epoch of ``update`` as CUDA graphs, and the same
    methods replay them.
    """

    def __init__(self, args: Args):
        check_args(args)
        self.args = args
        self.device = device = resolve_device(args.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("--device cuda asked for, but torch.cuda.is_available() is False")
        if device.type == "cpu" and args.threads > 0:
            torch.set_num_threads(args.threads)
        torch.manual_seed(args.seed)
        self.on_device = args.backend == "torch"
        # Rollout storage lives with the envs: on the device for TorchCartPole, else on the CPU,
        # pinned when the agent is on a GPU so that the per-step copies to it do not block.
        store = device if self.on_device else torch.device("cpu")
        pin = store.type == "cpu" and device.type == "cuda"

        self.envs = make_envs(args, device)
        obs_dim = self.obs_dim = self.envs.single_observation_space.shape[0]
        n_actions = int(self.envs.single_action_space.n)
        N, T = self.N, self.T = args.num_envs, args.num_steps
        B = self.B = N * T

        self.agent = Agent(obs_dim, n_actions, args.hidden, device)
        self.params = list(self.agent.parameters())
        if args.cuda_graphs:  # replayed by a graph: every input, the learning rate too, must be a device tensor
            self.lr = torch.tensor(args.learning_rate, device=device)
            self.optimizer = torch.optim.Adam(self.params, lr=self.lr, eps=1e-5, fused=True, capturable=True)
        else:
            self.lr = None
            try:  # one fused kernel for the whole Adam step (CPU and CUDA, torch >= 2.4)
                self.optimizer = torch.optim.Adam(self.params, lr=args.learning_rate, eps=1e-5, fused=True)
            except (RuntimeError, TypeError):
                self.optimizer = torch.optim.Adam(self.params, lr=args.learning_rate, eps=1e-5, foreach=True)
        self.gen = torch.Generator(device=device).manual_seed(args.seed)
        self._initial_params = [p.detach().clone() for p in self.params]

        # Rollout storage. all_obs rows: obs_0..obs_{T-1}, obs_T (the next rollout's obs_0), then the
        # final obs of each step (before autoreset), so that one critic call values all of them.
        self.all_obs = torch.zeros(2 * T + 1, N, obs_dim, device=store, pin_memory=pin)
        self.actions = torch.zeros(T, N, dtype=torch.int64, device=device)
        self.actions_host = torch.zeros(T, N, dtype=torch.int64, device="cpu", pin_memory=pin)
        self.gumbel = torch.empty(T, n_actions, N, device=device)  # sampling noise for a whole rollout
        self.max_logits = torch.empty(N, device=device)
        self.rewards = torch.zeros(T, N, device=store, pin_memory=pin)
        self.trunc = torch.zeros(T, N, device=store, pin_memory=pin)  # 1.0: truncated, not terminated
        # alive[t] = 0 where obs_t starts a new episode (CleanRL's 1 - dones[t]); row 0 carries over.
        self.alive = torch.zeros(T + 1, N, device=store, pin_memory=pin)
        # ep_ret[t + 1]: return of the running episode after step t; row 0 carries over.
        self.ep_ret = torch.zeros(T + 1, N, device=store, pin_memory=pin)
        self.advantages = torch.zeros(T, N, device=device)
        # The batch, one row per transition: obs | log-prob | -advantage | return | value; the actions
        # apart (int64). Shuffled by one index_select each per epoch.
        cols = self.cols = [int(c) for c in np.cumsum([0, obs_dim, 1, 1, 1, 1])]
        self.batch = torch.zeros(B, cols[-1], device=device)
        self.shuffled = torch.empty_like(self.batch)
        self.shuffled_actions = torch.zeros(B, dtype=torch.int64, device=device)
        # Views taken once (on the CPU, taking a view costs about as much as a small op).
        self.step_views = [(self.all_obs[t], self.gumbel[t], self.actions[t], self.actions_host[t],
                            self.all_obs[t + 1], self.all_obs[T + 1 + t], self.rewards[t], self.trunc[t],
                            self.alive[t], self.alive[t + 1], self.ep_ret[t], self.ep_ret[t + 1])
                           for t in range(T)]
        mb_size = B // args.num_minibatches
        self.minibatches = [(mb[:, cols[0]:cols[1]], act.unsqueeze(0), mb[:, cols[1]], mb[:, cols[2]],
                             mb[:, cols[3]], mb[:, cols[4]])
                            for mb, act in zip(self.shuffled.split(mb_size), self.shuffled_actions.split(mb_size))]
        self.collect_graph = self.epoch_graph = None
        self.global_step = 0

    # ------------------------------------------------------------------ start, warm-up, graphs
    def start(self) -> None:
        """Reset the envs (seeded) and the carried rollout state: the start of training."""
        obs, _ = self.envs.reset(seed=self.args.seed)
        self.all_obs[0].copy_(obs if self.on_device else torch.from_numpy(np.asarray(obs, dtype=np.float32)))
        self.alive[0].zero_()
        self.ep_ret[0].zero_()
        self.global_step = 0

    def restore(self) -> None:
        """Undo warm-up: weights, optimizer state and the sampling generator as they were made."""
        with torch.no_grad():
            for p, p0 in zip(self.params, self._initial_params):
                p.copy_(p0)
            for state in self.optimizer.state.values():
                for value in state.values():
                    if isinstance(value, torch.Tensor):
                        value.zero_()
        self.gen.manual_seed(self.args.seed)
        self.start()

    def warm_up(self, iterations: int) -> None:
        """Run `iterations` iterations (captures the CUDA graphs with --cuda-graphs), then undo them."""
        if self.args.cuda_graphs:
            self.start()
            self.capture(max(1, iterations))
        elif iterations:
            self.start()
            for _ in range(iterations):
                self.iteration()
                self.finished_returns()
        self.restore()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def capture(self, warmup: int = 1) -> None:
        """Record the body of collect() and one epoch of update() as CUDA graphs.

        Warm-up iterations run first on a side stream (lazy initialisation, Adam's state, the
        allocator), as torch.cuda.graphs' documentation asks. The sampling generator and the
        envs' reset generator are registered with the rollout graph, so every replay draws new
        numbers from them; the env runs with copy=False, so its buffers stay where captured.
        """
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(warmup):
                self.iteration()
        torch.cuda.current_stream(self.device).wait_stream(side)
        torch.cuda.synchronize(self.device)
        self.collect_graph = torch.cuda.CUDAGraph()
        self.collect_graph.register_generator_state(self.gen)
        self.collect_graph.register_generator_state(self.envs.generator)
        with torch.cuda.graph(self.collect_graph):
            self._collect()
        self.epoch_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.epoch_graph):
            self._update_epoch()
        torch.cuda.synchronize(self.device)

    # ------------------------------------------------------------------ one iteration
    def iteration(self) -> None:
        if self.args.anneal_lr:
            lr = self.args.learning_rate * max(0.0, 1.0 - self.global_step / self.args.total_timesteps)
            if self.lr is not None:
                self.lr.fill_(lr)
            else:
                self.optimizer.param_groups[0]["lr"] = lr
        self.collect()
        self.update()
        self.global_step += self.B

    def collect(self) -> None:
        """T env steps, then values, log-probs, advantages and the batch (replayed when captured)."""
        if self.collect_graph is not None:
            self.collect_graph.replay()
        else:
            self._collect()

    def update(self) -> None:
        """update_epochs epochs of minibatch steps over a fresh shuffle of the batch each."""
        for _ in range(self.args.update_epochs):
            perm = torch.randperm(self.B, generator=self.gen, device=self.device)
            torch.index_select(self.batch, 0, perm, out=self.shuffled)
            torch.index_select(self.actions.view(self.B), 0, perm, out=self.shuffled_actions)
            if self.epoch_graph is not None:
                self.epoch_graph.replay()
            else:
                self._update_epoch()

    def finished_returns(self) -> list[float]:
        """Returns of the episodes that ended in the last rollout: the one host sync per iteration."""
        with allow_host_sync(self.device):
            return self.ep_ret[1:][self.alive[1:] == 0].tolist()

    # ------------------------------------------------------------------ the captured bodies
    @torch.no_grad()
    def _collect(self) -> None:
        args, agent, envs, device = self.args, self.agent, self.envs, self.device
        T, N, B, cols = self.T, self.N, self.B, self.cols
        # Gumbel-max sampling: argmax(logits + G) is a draw from softmax(logits), G = -log(-log(U)).
        # (U > 0 keeps G finite; uniform_ is ~5x faster than exponential_ on the CPU.)
        self.gumbel.uniform_(GUMBEL_U_MIN, 1.0, generator=self.gen).log_().neg_().log_().neg_()
        for (obs_t, gumbel_t, act_t, act_host_t, next_obs, final_obs_t, rew_t, trunc_t,
             alive_t, alive_next, ret_t, ret_next) in self.step_views:
            logits_t = agent.logits_t(obs_t if self.on_device else obs_t.to(device, non_blocking=True))
            # max's indices, not argmax: argmax over dim 0 is ~5x slower on the CPU (torch 2.13)
            torch.max(logits_t.add_(gumbel_t), dim=0, out=(self.max_logits, act_t))
            if self.on_device:
                obs, reward, terminated, truncated, info = envs.step(act_t)
                next_obs.copy_(obs)  # row T is the obs after the rollout
                final_obs_t.copy_(info["final_obs"])
                done = info["_final_obs"]
            else:
                act_np = act_t.numpy() if device.type == "cpu" else act_host_t.copy_(act_t).numpy()
                obs, reward, terminated, truncated, info = envs.step(act_np)
                next_obs.copy_(torch.from_numpy(np.asarray(obs, dtype=np.float32)))
                final_obs_t.copy_(next_obs)
                done_np = np.logical_or(terminated, truncated)
                if done_np.any():  # SAME_STEP: the finished envs' last obs are in info["final_obs"]
                    final = np.stack(info["final_obs"][done_np]).astype(np.float32)
                    final_obs_t[torch.from_numpy(np.flatnonzero(done_np))] = torch.from_numpy(final)
                reward = torch.from_numpy(np.asarray(reward, dtype=np.float32))
                terminated, truncated = torch.from_numpy(terminated), torch.from_numpy(truncated)
                done = torch.from_numpy(done_np)
            rew_t.copy_(reward)
            torch.gt(truncated, terminated, out=trunc_t)  # truncated and not terminated
            torch.logical_not(done, out=alive_next)
            torch.addcmul(rew_t, ret_t, alive_t, out=ret_next)  # the return restarts after a reset

        # Values of obs_0..obs_T and of the final observations, in one critic call.
        values_all = agent.value(self.all_obs.view(-1, self.obs_dim).to(device, non_blocking=True)).view(2 * T + 1, N)
        values, next_values, final_values = values_all[:T], values_all[1:T + 1], values_all[T + 1:]
        b_obs = self.all_obs[:T].reshape(B, self.obs_dim).to(device, non_blocking=True)
        b_logp = torch.log_softmax(agent.logits_t(b_obs), dim=0).gather(0, self.actions.view(1, B)).squeeze(0)
        not_done = self.alive[1:].to(device, non_blocking=True)
        # A truncated episode is bootstrapped from the value of its final observation.
        boot_rewards = torch.addcmul(self.rewards.to(device, non_blocking=True), final_values,
                                     self.trunc.to(device, non_blocking=True), value=args.gamma)
        if self.on_device:
            adv, returns = gae_torch(boot_rewards, values, next_values, not_done,
                                     gamma=args.gamma, gae_lambda=args.gae_lambda, out=self.advantages)
        else:
            import fastvec
            dones = 1.0 - self.alive.numpy()  # CleanRL's dones (row t: obs_t starts an episode), next_done
            adv_np, ret_np = fastvec.gae(boot_rewards.cpu().numpy(), values.cpu().numpy(), dones[:T],
                                         next_values[-1].cpu().numpy(), dones[T],
                                         gamma=args.gamma, gae_lambda=args.gae_lambda)
            adv, returns = torch.from_numpy(adv_np).to(device), torch.from_numpy(ret_np).to(device)
        adv = adv.reshape(B)
        if args.norm_adv:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        batch = self.batch
        batch[:, cols[0]:cols[1]] = b_obs
        batch[:, cols[1]] = b_logp
        batch[:, cols[2]] = -adv
        batch[:, cols[3]] = returns.reshape(B)
        batch[:, cols[4]] = values.reshape(B)
        # Carried into the next rollout.
        self.all_obs[0].copy_(self.all_obs[T])
        self.alive[0].copy_(self.alive[T])
        self.ep_ret[0].copy_(self.ep_ret[T])

    def _update_epoch(self) -> None:
        args, agent = self.args, self.agent
        for mb_obs, mb_act, mb_logp, mb_neg_adv, mb_ret, mb_value in self.minibatches:
            logp_all = torch.log_softmax(agent.logits_t(mb_obs), dim=0)  # [n_actions, minibatch]
            ratio = (logp_all.gather(0, mb_act).squeeze(0) - mb_logp).exp_()
            clipped = ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
            pg_loss = torch.max(mb_neg_adv * ratio, mb_neg_adv * clipped).mean()
            new_value = agent.value(mb_obs)
            if args.clip_vloss:
                v_clipped = mb_value + (new_value - mb_value).clamp(-args.clip_coef, args.clip_coef)
                v_loss = torch.max((new_value - mb_ret).square(), (v_clipped - mb_ret).square()).mean()
            else:
                v_loss = F.mse_loss(new_value, mb_ret)
            loss = torch.add(pg_loss, v_loss, alpha=0.5 * args.vf_coef)
            if args.ent_coef:
                entropy = -(logp_all.exp() * logp_all).sum(0).mean()
                loss = loss - args.ent_coef * entropy
            for p in self.params:  # optimizer.zero_grad(set_to_none=True), without its overhead
                p.grad = None
            loss.backward()
            if args.max_grad_norm > 0:
                clip_grad_norm([p.grad for p in self.params], args.max_grad_norm)
            self.optimizer.step()


@contextlib.contextmanager
def allow_host_sync(device: torch.device):
    """Lift --sync-debug's "error" mode for a deliberate host sync (no-op off CUDA or without it)."""
    # (setting the mode at all makes torch warn that it is a prototype: only when it is on)
    if device.type != "cuda" or torch.cuda.get_sync_debug_mode() == 0:
        yield
        return
    mode = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode(0)
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(mode)


# ----------------------------------------------------------------------------- main
def main(args: Args) -> dict:
    ppo = PPO(args)
    device, B = ppo.device, ppo.B
    t0 = time.perf_counter()
    ppo.warm_up(args.warmup_iterations)
    warmup_s = time.perf_counter() - t0

    recent = deque(maxlen=args.return_window)
    history = []  # one dict per iteration
    iteration_times = []
    iteration, solved_at, last_log = 0, None, -1e9
    sync_mode = None
    if args.sync_debug:
        sync_mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
    try:
        start = time.perf_counter()
        start_cpu = time.process_time()
        ppo.start()
        t_prev = start
        while ppo.global_step < args.total_timesteps:
            iteration += 1
            ppo.iteration()
            finished = ppo.finished_returns()  # the one host sync: the GPU's work is done here
            now = time.perf_counter()
            iteration_times.append(now - t_prev)
            t_prev = now
            recent.extend(finished)
            elapsed = now - start
            global_step = ppo.global_step
            mean_ret = float(np.mean(recent)) if recent else float("nan")
            history.append({"iteration": iteration, "global_step": global_step, "wall_s": round(elapsed, 4),
                            "sps": round(global_step / elapsed), "episodes": len(finished),
                            "mean_return": round(mean_ret, 2)})
            if not args.quiet and (elapsed - last_log >= args.log_every or global_step >= args.total_timesteps):
                last_log = elapsed
                print(f"\rsteps {global_step:>10,} | SPS {global_step / elapsed:>9,.0f} | "
                      f"mean return {mean_ret:6.1f} (last {len(recent)} episodes) | {elapsed:6.2f} s",
                      end="", flush=True)
            if args.target_return is not None and len(recent) == recent.maxlen and mean_ret >= args.target_return:
                solved_at = (elapsed, global_step)
                break
        wall = time.perf_counter() - start
        cpu = time.process_time() - start_cpu
    finally:
        if sync_mode is not None:
            torch.cuda.set_sync_debug_mode(sync_mode)
    ppo.envs.close()
    if not args.quiet:
        print()
    global_step = ppo.global_step
    steady_sps = B / statistics.median(iteration_times)
    summary = {
        "backend": args.backend, "device": str(device), "seed": args.seed, "cuda_graphs": args.cuda_graphs,
        "global_step": global_step, "iterations": iteration, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
        "sps": round(global_step / wall), "steady_sps": round(steady_sps), "warmup_s": round(warmup_s, 3),
        "final_mean_return": history[-1]["mean_return"],
        "target_return": args.target_return,
        "time_to_target_s": round(solved_at[0], 3) if solved_at else None,
        "steps_to_target": solved_at[1] if solved_at else None,
        "args": dataclasses.asdict(args),
    }
    if solved_at:
        print(f"reached mean return {args.target_return:g} in {solved_at[0]:.2f} s wall, {solved_at[1]:,} steps "
              f"({global_step / wall:,.0f} SPS, steady state {steady_sps:,.0f}; warm-up {warmup_s:.2f} s "
              f"before the clock)")
    elif args.target_return is not None:
        print(f"did not reach mean return {args.target_return:g} in {global_step:,} steps ({wall:.2f} s)")
    if args.save:
        summary["run_dir"] = save_run(args, history, summary)
    return summary


def save_run(args: Args, history: list[dict], summary: dict) -> str:
    run_dir = os.path.join("runs", f"{args.exp_name}__{args.backend}__{args.seed}__{int(time.time())}")
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "metrics.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(history[0]))
        writer.writeheader()
        writer.writerows(history)
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return run_dir
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([h["wall_s"] for h in history], [h["mean_return"] for h in history])
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel(f"mean return (last {args.return_window} episodes)")
    ax.set_title(f"PPO CartPole-v1, {args.backend} backend on {args.device}, seed {args.seed}")
    if args.target_return is not None:
        ax.axhline(args.target_return, color="grey", linestyle="--", linewidth=1)
    fig.tight_layout()
    fig.savefig(os.path.join(run_dir, "curve.png"), dpi=100)
    plt.close(fig)
    return run_dir


if __name__ == "__main__":
    main(parse_args(sys.argv[1:]))
