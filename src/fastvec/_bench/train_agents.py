"""The training loops' rollouts and agents (the ``train`` section of ``python -m fastvec.bench``):
CleanRL's PPO (:class:`CleanRLPPO`, its :class:`Agent`, GAE from :func:`fastvec.advantages.gae`), the
Pong rollout with a Nature-CNN forward pass (:class:`AtariRollout`), and the overlapped rollout over
``send``/``recv`` (:func:`overlapped_rollout`) with the phase timer they share (:class:`TimedVectorEnv`).
The backends, the SB3 loops and the harness that times them are :mod:`fastvec._bench.train`'s.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from fastvec.advantages import gae


class TimedVectorEnv(gym.vector.VectorWrapper):
    """Adds up the wall time spent in the wrapped vector env's ``step`` (and ``send``/``recv``)."""

    def __init__(self, env):
        super().__init__(env)
        self.step_s = 0.0

    def step(self, actions):
        start = time.perf_counter()
        out = self.env.step(actions)
        self.step_s += time.perf_counter() - start
        return out

    def send(self, actions, env_ids):
        start = time.perf_counter()
        self.env.send(actions, env_ids)
        self.step_s += time.perf_counter() - start

    def recv(self):
        start = time.perf_counter()
        out = self.env.recv()
        self.step_s += time.perf_counter() - start
        return out


def overlapped_rollout(envs, num_steps: int, act: Callable[[slice, int], np.ndarray],
                       store: Callable[[slice, int, tuple], None]) -> None:
    """``num_steps`` steps of every env, two halves in flight: the policy acts on the half that
    ``recv`` returned while the other half steps. ``act(rows, t)`` returns the actions of
    ``rows`` for their step ``t``; ``store(rows, t, (obs, reward, term, trunc, infos))`` takes
    that step's results. A half's envs belong to one worker, so they always arrive together."""
    n = envs.num_envs
    halves = (slice(0, n // 2), slice(n // 2, n))
    t_of = {0: 0, n // 2: 0}
    for rows in halves:
        envs.send(act(rows, 0), np.arange(rows.start, rows.stop))
    running = len(halves)
    while running:
        out = envs.recv()
        ids = out[4]["env_id"]
        rows = slice(int(ids[0]), int(ids[-1]) + 1)
        t = t_of[rows.start]
        store(rows, t, out)
        t_of[rows.start] = t = t + 1
        if t == num_steps:
            running -= 1
        else:
            envs.send(act(rows, t), ids)


class Agent(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, continuous: bool):
        super().__init__()
        self.continuous = continuous

        def mlp(out: int) -> nn.Module:
            return nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, out))

        self.critic = mlp(1)
        self.actor = mlp(act_dim)
        if continuous:
            self.logstd = nn.Parameter(torch.zeros(1, act_dim))

    def act(self, x, action=None):
        out = self.actor(x)
        if self.continuous:
            dist = torch.distributions.Normal(out, torch.exp(self.logstd.expand_as(out)))
        else:
            dist = torch.distributions.Categorical(logits=out)
        if action is None:
            action = dist.sample()
        logp = dist.log_prob(action)
        entropy = dist.entropy()
        if self.continuous:
            logp, entropy = logp.sum(1), entropy.sum(1)
        return action, logp, entropy, self.critic(x)


@dataclasses.dataclass
class PPOConfig:
    num_steps: int
    update_epochs: int
    num_minibatches: int
    lr: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95


class CleanRLPPO:
    """CleanRL's PPO loop (rollout, GAE, clipped update) on a vector env, timed by phase."""

    def __init__(self, envs, cfg: PPOConfig, seed: int = 1):
        torch.manual_seed(seed)
        self.envs = TimedVectorEnv(envs)
        self.cfg = cfg
        self.continuous = isinstance(envs.single_action_space, gym.spaces.Box)
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        act_shape = envs.single_action_space.shape
        act_dim = int(np.prod(act_shape)) if self.continuous else int(envs.single_action_space.n)
        self.agent = Agent(obs_dim, act_dim, self.continuous)
        self.optimizer = torch.optim.Adam(self.agent.parameters(), lr=cfg.lr, eps=1e-5)
        n, t = envs.num_envs, cfg.num_steps
        self.obs = torch.zeros((t, n, obs_dim))
        self.actions = torch.zeros((t, n) + act_shape)
        self.logprobs, self.rewards, self.dones, self.values = (torch.zeros((t, n)) for _ in range(4))
        next_obs, _ = self.envs.reset(seed=seed)
        self.next_obs = torch.Tensor(next_obs)
        self.next_done = torch.zeros(n)
        self.update_s = 0.0

    def iteration(self) -> int:
        """One rollout and one update; returns the env transitions it made."""
        cfg, envs, agent = self.cfg, self.envs, self.agent
        if getattr(envs.unwrapped, "batch_size", envs.num_envs) < envs.num_envs:
            overlapped_rollout(envs, cfg.num_steps, self._act_rows, self._store_rows)
            start = time.perf_counter()
            self._update()
            self.update_s += time.perf_counter() - start
            return cfg.num_steps * envs.num_envs
        for step in range(cfg.num_steps):
            self.obs[step] = self.next_obs
            self.dones[step] = self.next_done
            with torch.no_grad():
                action, logprob, _, value = agent.act(self.next_obs)
                self.values[step] = value.flatten()
            self.actions[step] = action
            self.logprobs[step] = logprob
            next_obs, reward, terminations, truncations, _ = envs.step(action.cpu().numpy())
            self.rewards[step] = torch.tensor(reward).view(-1)
            self.next_obs = torch.Tensor(next_obs)
            self.next_done = torch.Tensor(np.logical_or(terminations, truncations))
        start = time.perf_counter()
        self._update()
        self.update_s += time.perf_counter() - start
        return cfg.num_steps * envs.num_envs

    def _act_rows(self, rows: slice, t: int) -> np.ndarray:
        self.obs[t, rows] = self.next_obs[rows]
        self.dones[t, rows] = self.next_done[rows]
        with torch.no_grad():
            action, logprob, _, value = self.agent.act(self.next_obs[rows])
            self.values[t, rows] = value.flatten()
        self.actions[t, rows] = action
        self.logprobs[t, rows] = logprob
        return action.cpu().numpy()

    def _store_rows(self, rows: slice, t: int, out: tuple) -> None:
        next_obs, reward, terminations, truncations, _ = out
        self.rewards[t, rows] = torch.tensor(reward).view(-1)
        self.next_obs[rows] = torch.Tensor(next_obs)
        self.next_done[rows] = torch.Tensor(np.logical_or(terminations, truncations))

    def _update(self) -> None:
        cfg, agent = self.cfg, self.agent
        with torch.no_grad():
            next_value = agent.critic(self.next_obs).reshape(-1)
            # (fastvec's GAE: CleanRL's loop, the same operations in the same order, compiled)
            advantages, returns = (torch.from_numpy(a) for a in gae(
                self.rewards.numpy(), self.values.numpy(), self.dones.numpy(), next_value.numpy(),
                self.next_done.numpy(), gamma=cfg.gamma, gae_lambda=cfg.gae_lambda))
        b_obs = self.obs.reshape(-1, self.obs.shape[-1])
        b_actions = self.actions.reshape((-1,) + self.actions.shape[2:])
        b_logprobs, b_adv, b_returns = self.logprobs.reshape(-1), advantages.reshape(-1), returns.reshape(-1)
        batch = b_obs.shape[0]
        minibatch = batch // cfg.num_minibatches
        inds = np.arange(batch)
        for _ in range(cfg.update_epochs):
            np.random.shuffle(inds)
            for start in range(0, batch, minibatch):
                mb = inds[start:start + minibatch]
                _, newlogprob, entropy, newvalue = agent.act(b_obs[mb], b_actions[mb])
                ratio = (newlogprob - b_logprobs[mb]).exp()
                adv = b_adv[mb]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                pg_loss = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 0.8, 1.2)).mean()
                v_loss = 0.5 * ((newvalue.view(-1) - b_returns[mb]) ** 2).mean()
                loss = pg_loss - 0.0 * entropy.mean() + 0.5 * v_loss
                self.optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                self.optimizer.step()


class NatureCNN(nn.Module):
    """The DQN Nature paper's network (CleanRL's ``ppo_atari.py`` agent), actor and critic heads."""

    def __init__(self, actions: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(), nn.Linear(64 * 7 * 7, 512), nn.ReLU())
        self.actor = nn.Linear(512, actions)
        self.critic = nn.Linear(512, 1)

    def forward(self, x):
        hidden = self.body(x / 255.0)
        return self.actor(hidden), self.critic(hidden)


class AtariRollout:
    """Pong's rollout: the Nature CNN's forward pass and an action sample before every step."""

    def __init__(self, envs, num_steps: int, seed: int = 1):
        torch.manual_seed(seed)
        self.envs = TimedVectorEnv(envs)
        self.net = NatureCNN(int(envs.single_action_space.n))
        self.num_steps = num_steps
        obs, _ = self.envs.reset(seed=seed)
        self.next_obs = torch.Tensor(obs)
        self.update_s = 0.0

    def iteration(self) -> int:
        if getattr(self.envs.unwrapped, "batch_size", self.envs.num_envs) < self.envs.num_envs:
            overlapped_rollout(self.envs, self.num_steps, self._act_rows, self._store_rows)
            return self.num_steps * self.envs.num_envs
        for _ in range(self.num_steps):
            with torch.no_grad():
                logits, _ = self.net(self.next_obs)
                action = torch.distributions.Categorical(logits=logits).sample()
            obs, _, _, _, _ = self.envs.step(action.numpy())
            self.next_obs = torch.Tensor(obs)
        return self.num_steps * self.envs.num_envs

    def _act_rows(self, rows: slice, t: int) -> np.ndarray:
        with torch.no_grad():
            logits, _ = self.net(self.next_obs[rows])
            return torch.distributions.Categorical(logits=logits).sample().numpy()

    def _store_rows(self, rows: slice, t: int, out: tuple) -> None:
        self.next_obs[rows] = torch.Tensor(out[0])


# --- SB3 --------------------------------------------------------------------------------------
