"""PPO for Atari in one file, in the style of CleanRL's ``ppo_atari.py``, on fastvec.

Each env wears CleanRL's Atari stack (Stable-Baselines3's wrappers and Gymnasium's):
``RecordEpisodeStatistics``, ``NoopResetEnv(30)``, ``MaxAndSkipEnv(4)``, ``EpisodicLifeEnv``,
``FireResetEnv`` (games with FIRE), ``ClipRewardEnv``, ``ResizeObservation((84, 84))``,
``GrayscaleObservation``, ``FrameStackObservation(4)``; the agent is the Nature CNN; the
update is PPO's with CleanRL's ``ppo_atari.py`` defaults (8 envs x 128 steps, 4 minibatches,
4 epochs, clip 0.1). The move to fastvec is the one line CleanRL's scripts need:

    # CleanRL (gymnasium 0.29):
    envs = gym.vector.SyncVectorEnv([make_env(args.env_id, i, ...) for i in range(args.num_envs)])
    # fastvec, correct on gymnasium 1.x:
    envs = fastvec.FastVectorEnv([make_env(args.env_id) for i in range(args.num_envs)],
                                 autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)

and FastVectorEnv's workers then step that whole wrapper stack compiled (``docs/atari.md``),
with outputs identical to the Python wrappers'. ``--backend envpool`` runs the same PPO over
EnvPool's own Atari (``envpool.make_gymnasium("Pong-v5", episodic_life=True,
reward_clip=True)``, CleanRL's ``ppo_atari_envpool.py`` settings; not the same
preprocessing: EnvPool grayscales before it resizes, and autoresets on the next step) to
compare speed; it logs no episodes.

    python examples/cleanrl_ppo_atari.py                       # fastvec, BreakoutNoFrameskip-v4
    python examples/cleanrl_ppo_atari.py --backend sync        # gymnasium's SyncVectorEnv
    python examples/cleanrl_ppo_atari.py --env-id PongNoFrameskip-v4 --backend envpool
"""
from __future__ import annotations

import argparse
import dataclasses
import random
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.distributions.categorical import Categorical


@dataclass
class Args:
    exp_name: str = "cleanrl_ppo_atari"
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    device: str = "cpu"
    """torch device for the agent (cpu or cuda)"""
    threads: int = 0
    """torch CPU threads; 0 keeps torch's default, as CleanRL's scripts do"""
    backend: str = "fastvec"
    """vector env: `fastvec` (FastVectorEnv), `sync` (gymnasium's SyncVectorEnv) or `envpool` (EnvPool's Atari)"""

    # Algorithm specific arguments (CleanRL's ppo_atari.py defaults)
    env_id: str = "BreakoutNoFrameskip-v4"
    """the id of the environment"""
    total_timesteps: int = 10000000
    """total timesteps of the experiments"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 8
    """the number of parallel game environments"""
    num_steps: int = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 4
    """the number of mini-batches"""
    update_epochs: int = 4
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.1
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function"""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: float | None = None
    """the target KL divergence threshold"""
    bootstrap_truncated: bool = True
    """bootstrap time-limit truncations from V(final_obs) instead of treating them as terminal"""

    # Stopping and logging
    target_return: float | None = None
    """stop once the mean return of the last `target_window` episodes reaches this"""
    target_window: int = 20
    """how many recent episodes `target_return` averages"""
    log_every: int = 10
    """print a progress line every this many iterations (0: never)"""

    # to be filled in runtime
    batch_size: int = 0
    """the batch size (computed in runtime)"""
    minibatch_size: int = 0
    """the mini-batch size (computed in runtime)"""
    num_iterations: int = 0
    """the number of iterations (computed in runtime)"""


def parse_args(argv: list[str] | None = None) -> Args:
    """``Args`` from the command line: ``--total-timesteps 100000``, ``--no-anneal-lr``, ..."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for field in dataclasses.fields(Args):
        if field.name in ("batch_size", "minibatch_size", "num_iterations"):
            continue
        flag = "--" + field.name.replace("_", "-")
        if field.type in (bool, "bool"):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=field.default)
        elif field.name == "backend":
            parser.add_argument(flag, choices=["fastvec", "sync", "envpool"], default=field.default)
        else:
            kind = {"int": int, "float": float, "str": str, "float | None": float}[str(field.type)]
            parser.add_argument(flag, type=kind, default=field.default)
    return Args(**vars(parser.parse_args(argv)))


def make_env(env_id: str):
    def thunk():
        from stable_baselines3.common.atari_wrappers import (ClipRewardEnv, EpisodicLifeEnv, FireResetEnv,
                                                             MaxAndSkipEnv, NoopResetEnv)

        env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = NoopResetEnv(env, noop_max=30)
        env = MaxAndSkipEnv(env, skip=4)
        env = EpisodicLifeEnv(env)
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = FireResetEnv(env)
        env = ClipRewardEnv(env)
        env = gym.wrappers.ResizeObservation(env, (84, 84))
        env = gym.wrappers.GrayscaleObservation(env)
        env = gym.wrappers.FrameStackObservation(env, 4)
        return env

    return thunk


def envpool_id(env_id: str) -> str:
    """EnvPool's name of a game: ``BreakoutNoFrameskip-v4`` -> ``Breakout-v5``."""
    for suffix in ("NoFrameskip-v4", "-v4", "-v5"):
        if env_id.endswith(suffix):
            return env_id[: -len(suffix)].removeprefix("ALE/") + "-v5"
    return env_id


def make_envs(args: Args) -> gym.vector.VectorEnv:
    """The vector env, autoresetting in the same step (what this PPO's buffers assume)."""
    import ale_py

    gym.register_envs(ale_py)
    same_step = gym.vector.AutoresetMode.SAME_STEP
    if args.backend == "sync":
        return gym.vector.SyncVectorEnv([make_env(args.env_id) for i in range(args.num_envs)],
                                        autoreset_mode=same_step)
    if args.backend == "fastvec":
        import fastvec

        return fastvec.FastVectorEnv([make_env(args.env_id) for i in range(args.num_envs)],
                                     autoreset_mode=same_step)
    if args.backend == "envpool":
        import envpool

        return envpool.make_gymnasium(envpool_id(args.env_id), num_envs=args.num_envs, episodic_life=True,
                                      reward_clip=True, seed=args.seed)
    raise ValueError(f"--backend must be 'fastvec', 'sync' or 'envpool', got {args.backend!r}")


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, envs):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, envs.single_action_space.n), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1)

    def get_value(self, x):
        return self.critic(self.network(x / 255.0))

    def get_action_and_value(self, x, action=None):
        hidden = self.network(x / 255.0)
        logits = self.actor(hidden)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden)


def main(args: Args) -> dict:
    """Train; returns the finished episodes (return, length, global step) and the timing."""
    args.batch_size = int(args.num_envs * args.num_steps)
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    # env setup
    envs = make_envs(args)
    assert isinstance(envs.single_action_space, gym.spaces.Discrete), "only discrete action spaces are supported"

    agent = Agent(envs).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    # ALGO Logic: Storage setup
    obs = torch.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape).to(device)
    actions = torch.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape).to(device)
    logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)
    rewards = torch.zeros((args.num_steps, args.num_envs)).to(device)
    dones = torch.zeros((args.num_steps, args.num_envs)).to(device)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)

    # TRY NOT TO MODIFY: start the game
    global_step = 0
    start_time = time.time()
    episodes = {"return": [], "length": [], "global_step": []}
    solved_at = None
    next_obs, _ = envs.reset() if args.backend == "envpool" else envs.reset(seed=args.seed)
    next_obs = torch.Tensor(next_obs).to(device)
    next_done = torch.zeros(args.num_envs).to(device)

    for iteration in range(1, args.num_iterations + 1):
        # Annealing the rate if instructed to do so.
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            lrnow = frac * args.learning_rate
            optimizer.param_groups[0]["lr"] = lrnow

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done

            # ALGO LOGIC: action logic
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

            # TRY NOT TO MODIFY: execute the game and log data.
            # (EnvPool wants int32 actions)
            next_obs, reward, terminations, truncations, infos = envs.step(
                action.cpu().numpy().astype(np.int32 if args.backend == "envpool" else np.int64))
            # SAME_STEP autoreset: next_obs of a finished env is already the first observation of
            # its next episode, so obs[t + 1] never continues a finished episode.
            next_done = np.logical_or(terminations, truncations)
            if args.bootstrap_truncated and "final_obs" in infos:
                # A truncated episode did not end: credit it with gamma * V(last observation).
                truncated = np.flatnonzero(truncations & ~terminations)
                if truncated.size:
                    final_obs = torch.Tensor(np.stack(infos["final_obs"][truncated])).to(device)
                    with torch.no_grad():
                        final_values = agent.get_value(final_obs).flatten().cpu().numpy()
                    reward = np.asarray(reward, dtype=np.float64).copy()
                    reward[truncated] += args.gamma * final_values
            rewards[step] = torch.tensor(reward).to(device).view(-1)
            next_obs, next_done = torch.Tensor(next_obs).to(device), torch.Tensor(next_done).to(device)

            if "final_info" in infos and "episode" in infos["final_info"]:
                final_info = infos["final_info"]
                for i in np.flatnonzero(final_info["_episode"]):
                    episodes["return"].append(float(final_info["episode"]["r"][i]))
                    episodes["length"].append(int(final_info["episode"]["l"][i]))
                    episodes["global_step"].append(global_step)

        # bootstrap value if not done
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards).to(device)
            lastgaelam = 0
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    nextnonterminal = 1.0 - next_done
                    nextvalues = next_value
                else:
                    nextnonterminal = 1.0 - dones[t + 1]
                    nextvalues = values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values

        # flatten the batch
        b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape((-1,) + envs.single_action_space.shape)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        # Optimizing the policy and value network
        b_inds = np.arange(args.batch_size)
        clipfracs = []
        for epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, args.batch_size, args.minibatch_size):
                end = start + args.minibatch_size
                mb_inds = b_inds[start:end]

                _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions.long()[mb_inds])
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()

                with torch.no_grad():
                    # calculate approx_kl http://joschu.net/blog/kl-approx.html
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean().item()]

                mb_advantages = b_advantages[mb_inds]
                if args.norm_adv:
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

                # Policy loss
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                # Value loss
                newvalue = newvalue.view(-1)
                if args.clip_vloss:
                    v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                    v_clipped = b_values[mb_inds] + torch.clamp(
                        newvalue - b_values[mb_inds],
                        -args.clip_coef,
                        args.clip_coef,
                    )
                    v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                    v_loss_max = torch.max(v_loss_unclipped, v_loss_clipped)
                    v_loss = 0.5 * v_loss_max.mean()
                else:
                    v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()

                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

            if args.target_kl is not None and approx_kl > args.target_kl:
                break

        recent = episodes["return"][-args.target_window:]
        mean_return = float(np.mean(recent)) if recent else float("nan")
        sps = int(global_step / (time.time() - start_time))
        if args.log_every and (iteration % args.log_every == 0 or iteration == args.num_iterations):
            print(f"global_step={global_step} SPS={sps} episodes={len(episodes['return'])} "
                  f"mean_return(last {args.target_window})={mean_return:.1f}", flush=True)
        if (args.target_return is not None and len(recent) == args.target_window
                and mean_return >= args.target_return):
            solved_at = global_step
            print(f"reached mean return {mean_return:.1f} >= {args.target_return} at global_step={global_step} "
                  f"in {time.time() - start_time:.1f} s", flush=True)
            break

    envs.close()
    elapsed = time.time() - start_time
    return {
        "episodes": episodes,
        "global_step": global_step,
        "solved_at": solved_at,
        "seconds": elapsed,
        "sps": global_step / elapsed,
    }


if __name__ == "__main__":
    main(parse_args())
