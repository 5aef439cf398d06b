"""PPO with parameter sharing on a PettingZoo env, in one file, in the style of CleanRL, on
fastvec.MultiAgentVectorEnv.

Every agent of every env is one row of the vector env, and one policy acts for all rows
(parameter sharing, as CleanRL's ``ppo_pettingzoo_ma_atari.py`` does with SuperSuit). The env
is PettingZoo's Knights Archers Zombies with vector observations: agents are killed by
zombies and stay dead until their env resets, which SuperSuit's pipeline refuses unless its
``black_death`` wrapper hides the deaths. Here each row says whether its agent is present
(``envs.agent_mask``), and the rows of absent agents are left out of the loss: a dead agent's
zeros teach the policy nothing.

    python examples/ppo_multiagent.py                          # 8 envs x 4 agents
    python examples/ppo_multiagent.py --total-timesteps 50000  # a short run

Output: a progress line every ``--log-every`` iterations (agent-steps, agent-steps/s, the mean
team return of the last 20 episodes, i.e. the zombies the env's agents killed), then a
summary.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import random
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from gymnasium.vector import AutoresetMode
from torch.distributions.categorical import Categorical


@dataclass
class Args:
    seed: int = 1
    """seed of the experiment"""
    threads: int = 0
    """torch CPU threads; 0 keeps torch's default"""
    num_envs: int = 8
    """the number of PettingZoo envs (rows: num_envs x agents)"""
    total_timesteps: int = 400_000
    """total agent-steps (rows stepped)"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_steps: int = 128
    """the number of steps to run in each env per policy rollout"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 4
    """the number of mini-batches"""
    update_epochs: int = 4
    """the K epochs to update the policy"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    max_cycles: int = 300
    """Knights Archers Zombies' episode length (PettingZoo's default is 900)"""
    log_every: int = 5
    """print a progress line every this many iterations (0: never)"""


def parse_args(argv: list[str] | None = None) -> Args:
    """``Args`` from the command line: ``--total-timesteps 100000``, ``--num-envs 4``, ..."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for field in dataclasses.fields(Args):
        kind = {"int": int, "float": float}[str(field.type)]
        parser.add_argument("--" + field.name.replace("_", "-"), type=kind, default=field.default)
    return Args(**vars(parser.parse_args(argv)))


def make_envs(args: Args):
    """``num_envs`` Knights Archers Zombies envs (vector observations) as agent rows,
    autoresetting in the same step (what this PPO's buffers assume)."""
    from pettingzoo.butterfly import knights_archers_zombies_v11

    from fastvec import MultiAgentVectorEnv

    make = functools.partial(knights_archers_zombies_v11.parallel_env, obs_method="vector",
                             max_cycles=args.max_cycles)
    return MultiAgentVectorEnv([make] * args.num_envs, autoreset_mode=AutoresetMode.SAME_STEP)


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 128)), nn.Tanh(),
            layer_init(nn.Linear(128, 128)), nn.Tanh(),
            layer_init(nn.Linear(128, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 128)), nn.Tanh(),
            layer_init(nn.Linear(128, 128)), nn.Tanh(),
            layer_init(nn.Linear(128, n_actions), std=0.01),
        )

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        probs = Categorical(logits=self.actor(x))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def main(args: Args) -> dict:
    """Train; returns the finished episodes (team return, agent-steps so far) and the timing."""
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    envs = make_envs(args)
    rows, agents = envs.num_envs, envs.num_agents
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    agent = Agent(obs_dim, int(envs.single_action_space.n))
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    batch_size = rows * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = max(1, args.total_timesteps // batch_size)

    obs = torch.zeros((args.num_steps, rows, obs_dim))
    actions = torch.zeros((args.num_steps, rows))
    logprobs = torch.zeros((args.num_steps, rows))
    rewards = torch.zeros((args.num_steps, rows))
    dones = torch.zeros((args.num_steps, rows))
    values = torch.zeros((args.num_steps, rows))
    present = torch.zeros((args.num_steps, rows), dtype=torch.bool)  # the rows whose agent acted

    global_step = 0
    start_time = time.time()
    episodes = {"return": [], "global_step": []}
    row_returns = np.zeros(rows)
    next_obs, _ = envs.reset(seed=args.seed)
    next_obs = torch.Tensor(next_obs.reshape(rows, -1))
    next_done = torch.zeros(rows)
    next_present = torch.as_tensor(envs.agent_mask)

    for iteration in range(1, num_iterations + 1):
        optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / num_iterations) * args.learning_rate
        for step in range(args.num_steps):
            global_step += rows
            obs[step], dones[step], present[step] = next_obs, next_done, next_present
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
            values[step], actions[step], logprobs[step] = value.flatten(), action, logprob

            # (the actions of absent rows are ignored by the env)
            next_obs, reward, terminations, truncations, infos = envs.step(action.numpy())
            rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
            next_done = torch.as_tensor(np.logical_or(terminations, truncations), dtype=torch.float32)
            next_obs = torch.Tensor(next_obs.reshape(rows, -1))
            next_present = torch.as_tensor(envs.agent_mask)

            # A team's return: what its agents earned until their env reset (SAME_STEP: the
            # rows of the envs that ended are marked by infos["_final_obs"]).
            row_returns += reward
            ended = infos.get("_final_obs")
            if ended is not None and ended.any():
                for env in np.flatnonzero(ended[::agents]):
                    team = slice(env * agents, (env + 1) * agents)
                    episodes["return"].append(float(row_returns[team].sum()))
                    episodes["global_step"].append(global_step)
                    row_returns[team] = 0.0

        # GAE, row by row (an absent row is terminated at every step: it bootstraps nothing)
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards)
            lastgaelam = 0
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    nextnonterminal, nextvalues = 1.0 - next_done, next_value
                else:
                    nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values

        # Only the rows whose agent was present go into the update.
        keep = present.reshape(-1)
        b_obs = obs.reshape(-1, obs_dim)[keep]
        b_logprobs, b_actions = logprobs.reshape(-1)[keep], actions.reshape(-1)[keep]
        b_advantages, b_returns = advantages.reshape(-1)[keep], returns.reshape(-1)[keep]
        n = b_obs.shape[0]
        b_inds = np.arange(n)
        step_size = max(1, min(minibatch_size, n))
        for epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, n, step_size):
                mb = b_inds[start:start + step_size]
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb], b_actions.long()[mb])
                ratio = (newlogprob - b_logprobs[mb]).exp()
                mb_adv = b_advantages[mb]
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8) if len(mb) > 1 else mb_adv
                pg_loss = torch.max(-mb_adv * ratio,
                                    -mb_adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
                v_loss = 0.5 * ((newvalue.view(-1) - b_returns[mb]) ** 2).mean()
                loss = pg_loss - args.ent_coef * entropy.mean() + v_loss * args.vf_coef
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

        if args.log_every and (iteration % args.log_every == 0 or iteration == num_iterations):
            recent = episodes["return"][-20:]
            mean = f"{np.mean(recent):6.2f}" if recent else "   n/a"
            print(f"agent-steps {global_step:>9,} | {global_step / (time.time() - start_time):>7,.0f}/s | "
                  f"team return (last 20 episodes) {mean} | episodes {len(episodes['return'])}", flush=True)

    wall = time.time() - start_time
    envs.close()
    print(f"{global_step:,} agent-steps in {wall:.1f} s ({global_step / wall:,.0f}/s); "
          f"{len(episodes['return'])} episodes")
    return {"episodes": episodes, "wall": wall, "global_step": global_step}


if __name__ == "__main__":
    main(parse_args())
