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
    python examples/ppo.py --backend torch --device cuda --num-envs 4096

Autoreset: every backend runs in gymnasium's SAME_STEP mode, so each stored transition
(obs_t, a_t, r_t) belongs to one episode: nothing is learned across a reset. A truncated
episode (500 steps) is bootstrapped from the value of its final observation (r_t += gamma *
V(final_obs_t)); a terminated one is not.

Output: a live progress line (steps, SPS, mean return of the last 100 episodes) and, in
runs/<run name>/, metrics.csv (one row per iteration), summary.json and curve.png (if
matplotlib is installed). The clock starts at the first env.reset() ("start of training").
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import sys
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Args:
    backend: str = "torch"
    """which vector env: torch | native | fastvec | sync"""
    device: str = "cpu"
    """torch device for the agent (and for the envs with --backend torch): cpu | cuda"""
    seed: int = 1
    """seed of the envs, the network initialisation and the sampling"""
    threads: int = 1
    """torch.set_num_threads on the CPU (0 keeps torch's default)"""
    total_timesteps: int = 2_000_000
    """stop after this many env steps"""
    target_return: float | None = None
    """stop as soon as the mean return of the last `return_window` episodes reaches this"""
    return_window: int = 100
    """episodes in the running mean return"""

    # Algorithm (tuned for wall-clock time to solve CartPole-v1 on a small CPU)
    num_envs: int = 384
    """parallel envs"""
    num_steps: int = 16
    """steps per env per rollout"""
    learning_rate: float = 1.5e-2
    """Adam learning rate"""
    anneal_lr: bool = False
    """anneal the learning rate linearly to 0 over total_timesteps"""
    gamma: float = 0.99
    """discount"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    num_minibatches: int = 2
    """minibatches per epoch"""
    update_epochs: int = 4
    """epochs over each rollout"""
    norm_adv: bool = True
    """normalise advantages (over the whole batch)"""
    clip_coef: float = 0.2
    """PPO clip range"""
    clip_vloss: bool = False
    """clip the value loss as PPO's original implementation does"""
    ent_coef: float = 0.0
    """entropy bonus"""
    vf_coef: float = 0.5
    """value loss weight"""
    max_grad_norm: float = 0.5
    """gradient clipping"""
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
    if args.backend not in ("torch", "native", "fastvec", "sync"):
        parser.error(f"--backend must be one of torch, native, fastvec, sync; got {args.backend!r}")
    if args.device not in ("cpu", "cuda") and not args.device.startswith("cuda:"):
        parser.error(f"--device must be cpu or cuda; got {args.device!r}")
    if (args.num_envs * args.num_steps) % args.num_minibatches:
        parser.error(f"num_envs * num_steps ({args.num_envs * args.num_steps}) must be divisible by "
                     f"num_minibatches ({args.num_minibatches})")
    return args


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
    networks this small, per-call Python overhead is a large share of the time.
    """

    def __init__(self, obs_dim: int, n_actions: int, hidden: int):
        super().__init__()
        self.critic = nn.ModuleList([layer_init(nn.Linear(obs_dim, hidden)), layer_init(nn.Linear(hidden, hidden)),
                                     layer_init(nn.Linear(hidden, 1), std=1.0)])
        self.actor = nn.ModuleList([layer_init(nn.Linear(obs_dim, hidden)), layer_init(nn.Linear(hidden, hidden)),
                                    layer_init(nn.Linear(hidden, n_actions), std=0.01)])

    @staticmethod
    def mlp(layers: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
        l1, l2, l3 = layers
        x = torch.tanh_(F.linear(x, l1.weight, l1.bias))
        x = torch.tanh_(F.linear(x, l2.weight, l2.bias))
        return F.linear(x, l3.weight, l3.bias)

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.actor, obs)

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
        return TorchCartPole(args.num_envs, device=device, seed=args.seed, copy=False)
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
def gae_torch(rewards, values, dones, next_value, next_done, *, gamma, gae_lambda, out):
    """GAE on the device, CleanRL convention: dones[t] says obs_t starts a new episode.

    The same arithmetic as fastvec.gae; written as T fused multiply-adds over [N] rows so
    that it stays on the device. Returns (advantages, returns); advantages are written to `out`.
    """
    T = rewards.shape[0]
    next_values = torch.cat([values[1:], next_value.unsqueeze(0)])
    not_done = 1.0 - torch.cat([dones[1:], next_done.unsqueeze(0)])
    deltas = rewards + gamma * next_values * not_done - values
    decay = (gamma * gae_lambda) * not_done
    out[T - 1] = deltas[T - 1]
    for t in range(T - 2, -1, -1):
        torch.addcmul(deltas[t], decay[t], out[t + 1], out=out[t])
    return out, out + values


# ----------------------------------------------------------------------------- main
def main(args: Args) -> dict:
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda asked for, but torch.cuda.is_available() is False")
    if device.type == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    on_device = args.backend == "torch"
    # Rollout storage lives with the envs: on the device for TorchCartPole, else on the CPU.
    store = device if on_device else torch.device("cpu")

    envs = make_envs(args, device)
    obs_dim = envs.single_observation_space.shape[0]
    n_actions = int(envs.single_action_space.n)
    N, T = args.num_envs, args.num_steps
    B = N * T
    mb_size = B // args.num_minibatches

    agent = Agent(obs_dim, n_actions, args.hidden).to(device)
    try:  # one fused kernel for the whole Adam step (CPU and CUDA, torch >= 2.4)
        optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)
    except (RuntimeError, TypeError):
        optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, foreach=True)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    params = list(agent.parameters())

    # Rollout storage, preallocated. all_obs rows: obs_0..obs_{T-1}, the next obs, then the final
    # obs of each step (before autoreset), so that one critic call values all of them.
    all_obs = torch.zeros(2 * T + 1, N, obs_dim, device=store)
    obs_buf, final_obs_buf = all_obs[:T], all_obs[T + 1:]
    actions = torch.zeros(T, N, dtype=torch.int64, device=device)
    gumbel = torch.empty(T, N, n_actions, device=device)   # sampling noise for a whole rollout
    rewards = torch.zeros(T, N, device=store)
    done_flags = torch.zeros(T + 1, N, device=store)      # row t: obs_t starts a new episode
    dones, next_done = done_flags[:T], done_flags[T]       # CleanRL's `dones` and `next_done`
    trunc_only = torch.zeros(T, N, dtype=torch.bool, device=store)  # truncated, not terminated
    ep_return = torch.zeros(N, device=store)
    ep_return_at = torch.zeros(T, N, device=store)        # running return after step t
    advantages = torch.zeros(T, N, device=device)
    # The batch, one row per transition: obs | one-hot action | log-prob | -advantage | return | value
    cols = np.cumsum([0, obs_dim, n_actions, 1, 1, 1, 1])
    batch = torch.zeros(B, int(cols[-1]), device=device)
    shuffled = torch.empty_like(batch)
    eye = torch.eye(n_actions, device=device)

    recent = deque(maxlen=args.return_window)
    history = []  # one dict per iteration
    global_step, iteration, solved_at, last_log = 0, 0, None, -1e9

    start = time.perf_counter()
    start_cpu = time.process_time()
    obs, _ = envs.reset(seed=args.seed)
    obs_buf[0].copy_(obs if on_device else torch.from_numpy(np.asarray(obs, dtype=np.float32)))

    while global_step < args.total_timesteps:
        iteration += 1
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = args.learning_rate * max(0.0, 1.0 - global_step / args.total_timesteps)

        # ---------------------------------------------------------------- rollout
        with torch.no_grad():
            # Gumbel-max sampling: argmax(logits - log(-log(u))) is a draw from softmax(logits).
            gumbel.uniform_(generator=gen).log_().neg_().log_().neg_()
            for t in range(T):
                logits = agent.logits(obs_buf[t].to(device, non_blocking=True))
                torch.argmax(logits.add_(gumbel[t]), dim=1, out=actions[t])
                if on_device:
                    obs, reward, terminated, truncated, info = envs.step(actions[t])
                    all_obs[t + 1].copy_(obs)  # row T is the obs after the rollout
                    final_obs_buf[t].copy_(info["final_obs"])
                    done = info["_final_obs"]
                else:
                    obs, reward, terminated, truncated, info = envs.step(actions[t].cpu().numpy())
                    all_obs[t + 1].copy_(torch.from_numpy(np.asarray(obs, dtype=np.float32)))
                    final_obs_buf[t].copy_(all_obs[t + 1])
                    done_np = np.logical_or(terminated, truncated)
                    if done_np.any():  # SAME_STEP: the finished envs' last obs are in info["final_obs"]
                        final = np.stack(info["final_obs"][done_np]).astype(np.float32)
                        final_obs_buf[t, torch.from_numpy(np.flatnonzero(done_np))] = torch.from_numpy(final)
                    reward = torch.from_numpy(np.asarray(reward, dtype=np.float32))
                    terminated, truncated = torch.from_numpy(terminated), torch.from_numpy(truncated)
                    done = torch.from_numpy(done_np)
                rewards[t].copy_(reward)
                torch.gt(truncated, terminated, out=trunc_only[t])  # truncated and not terminated
                done_flags[t + 1].copy_(done)
                ep_return.add_(reward)
                ep_return_at[t].copy_(ep_return)
                ep_return.masked_fill_(done, 0.0)
        global_step += B

        # ------------------------------------------------ values, log-probs, advantages
        with torch.no_grad():
            values_all = agent.value(all_obs.view(-1, obs_dim).to(device)).view(2 * T + 1, N)
            values, next_value, final_values = values_all[:T], values_all[T], values_all[T + 1:]
            b_obs = obs_buf.reshape(B, obs_dim).to(device)
            b_onehot = eye[actions.reshape(B)]
            b_logp = (torch.log_softmax(agent.logits(b_obs), dim=1) * b_onehot).sum(1)
            # A truncated episode is bootstrapped from the value of its final observation.
            boot_rewards = rewards.to(device) + args.gamma * final_values * trunc_only.to(device)
            if on_device:
                adv, returns = gae_torch(boot_rewards, values, dones, next_value, next_done,
                                         gamma=args.gamma, gae_lambda=args.gae_lambda, out=advantages)
            else:
                import fastvec
                adv_np, ret_np = fastvec.gae(boot_rewards.cpu().numpy(), values.cpu().numpy(), dones.numpy(),
                                             next_value.cpu().numpy(), next_done.numpy(),
                                             gamma=args.gamma, gae_lambda=args.gae_lambda)
                adv, returns = torch.from_numpy(adv_np).to(device), torch.from_numpy(ret_np).to(device)
            adv = adv.reshape(B)
            if args.norm_adv:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            batch[:, cols[0]:cols[1]] = b_obs
            batch[:, cols[1]:cols[2]] = b_onehot
            batch[:, cols[2]] = b_logp
            batch[:, cols[3]] = -adv
            batch[:, cols[4]] = returns.reshape(B)
            batch[:, cols[5]] = values.reshape(B)
            done_flags[0].copy_(next_done)  # carried into the next rollout

        # ---------------------------------------------------------------- update
        for epoch in range(args.update_epochs):
            torch.index_select(batch, 0, torch.randperm(B, generator=gen, device=device), out=shuffled)
            for mb in shuffled.split(mb_size):
                mb_obs, mb_onehot = mb[:, cols[0]:cols[1]], mb[:, cols[1]:cols[2]]
                mb_logp, mb_neg_adv, mb_ret, mb_value = mb[:, cols[2]], mb[:, cols[3]], mb[:, cols[4]], mb[:, cols[5]]
                logp_all = torch.log_softmax(agent.logits(mb_obs), dim=1)
                ratio = ((logp_all * mb_onehot).sum(1) - mb_logp).exp_()
                clipped = ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(mb_neg_adv * ratio, mb_neg_adv * clipped).mean()
                new_value = agent.value(mb_obs)
                if args.clip_vloss:
                    v_clipped = mb_value + (new_value - mb_value).clamp(-args.clip_coef, args.clip_coef)
                    v_loss = torch.max((new_value - mb_ret).square(), (v_clipped - mb_ret).square()).mean()
                else:
                    v_loss = (new_value - mb_ret).square().mean()
                loss = torch.add(pg_loss, v_loss, alpha=0.5 * args.vf_coef)
                if args.ent_coef:
                    entropy = -(logp_all.exp() * logp_all).sum(1).mean()
                    loss = loss - args.ent_coef * entropy
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if args.max_grad_norm > 0:
                    clip_grad_norm([p.grad for p in params], args.max_grad_norm)
                optimizer.step()

        # ---------------------------------------------------------------- logging (one host sync)
        finished = ep_return_at[done_flags[1:].bool()].tolist()
        recent.extend(finished)
        elapsed = time.perf_counter() - start
        mean_ret = float(np.mean(recent)) if recent else float("nan")
        history.append({"iteration": iteration, "global_step": global_step, "wall_s": round(elapsed, 4),
                        "sps": round(global_step / elapsed), "episodes": len(finished),
                        "mean_return": round(mean_ret, 2)})
        if not args.quiet and (elapsed - last_log >= args.log_every or global_step >= args.total_timesteps):
            last_log = elapsed
            print(f"\rsteps {global_step:>10,} | SPS {global_step / elapsed:>9,.0f} | "
                  f"mean return {mean_ret:6.1f} (last {len(recent)} episodes) | {elapsed:6.2f} s", end="", flush=True)
        if args.target_return is not None and len(recent) == recent.maxlen and mean_ret >= args.target_return:
            solved_at = (elapsed, global_step)
            break

    wall = time.perf_counter() - start
    cpu = time.process_time() - start_cpu
    envs.close()
    if not args.quiet:
        print()
    summary = {
        "backend": args.backend, "device": str(device), "seed": args.seed,
        "global_step": global_step, "iterations": iteration, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
        "sps": round(global_step / wall), "final_mean_return": history[-1]["mean_return"],
        "target_return": args.target_return,
        "time_to_target_s": round(solved_at[0], 3) if solved_at else None,
        "steps_to_target": solved_at[1] if solved_at else None,
        "args": dataclasses.asdict(args),
    }
    if solved_at:
        print(f"reached mean return {args.target_return:g} in {solved_at[0]:.2f} s wall, {solved_at[1]:,} steps "
              f"({global_step / wall:,.0f} SPS)")
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
