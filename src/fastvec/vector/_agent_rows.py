"""Worker side of MultiAgentVectorEnv: one PettingZoo Parallel env seen as one Gymnasium env
whose observation holds a row per agent.

FastVectorEnv steps Gymnasium envs: one observation, one reward and two flags each. A
PettingZoo ``ParallelEnv`` steps a dict of agents. :class:`AgentRows` is the bridge, built
in the worker process from the user's constructor: its observation is the agents'
observations stacked in ``possible_agents`` order (``batch_space`` of one agent's space, so
a Dict observation keeps its leaves), its action the agents' actions stacked the same way,
and the per-agent rewards and flags travel as fixed-shape info arrays. All of it is numeric
and of a fixed shape, so it goes through the shared block like any observation and info: no
pickling per step.

An agent that is not in the env (not spawned yet, or gone since an earlier step) is an
*absent* row: observation zeros (an ``action_mask`` leaf all ones, so that a policy can
still sample), reward 0, ``terminated`` True, ``truncated`` False, ``agent_mask`` False; the
action given for it is not passed on. On the step an agent leaves it is present, with its
real last observation, reward and flags. The env is done (for the vector env's autoreset)
once no agent is left or every agent that reported is terminated or truncated.
"""
from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space, create_empty_array

from fastvec.vector._batch_tree import copy_batch

__all__ = ["AgentRows", "INFO_KEYS"]

#: The info keys every step and reset of an AgentRows env carries, one value per agent.
INFO_KEYS = ("agent_rewards", "agent_terminated", "agent_truncated", "agent_mask")


def _is_parallel_env(env: Any) -> bool:
    return (hasattr(env, "possible_agents") and callable(getattr(env, "observation_space", None))
            and callable(getattr(env, "action_space", None)) and callable(getattr(env, "step", None))
            and callable(getattr(env, "reset", None)))


def check_parallel_env(env: Any, where: str) -> None:
    """Raise TypeError unless ``env`` has PettingZoo's ParallelEnv API."""
    if not _is_parallel_env(env):
        raise TypeError(
            f"{where} must build a PettingZoo ParallelEnv (possible_agents, observation_space(agent), "
            f"action_space(agent), reset, step), got {type(env).__name__}; an AEC env converts with "
            "pettingzoo.utils.conversions.aec_to_parallel"
        )


def agent_spaces(env: Any) -> tuple[gym.Space, gym.Space]:
    """One agent's observation and action spaces, the same for every agent of ``env``.

    Raises:
        ValueError: agents whose spaces differ (naming the first that differs).
    """
    agents = list(env.possible_agents)
    if not agents:
        raise ValueError("the ParallelEnv has no possible_agents")
    obs_space, act_space = env.observation_space(agents[0]), env.action_space(agents[0])
    for agent in agents[1:]:
        if env.observation_space(agent) != obs_space:
            raise ValueError(f"agent {agent!r}'s observation space {env.observation_space(agent)} differs from "
                             f"agent {agents[0]!r}'s {obs_space}: MultiAgentVectorEnv needs one space for all agents")
        if env.action_space(agent) != act_space:
            raise ValueError(f"agent {agent!r}'s action space {env.action_space(agent)} differs from "
                             f"agent {agents[0]!r}'s {act_space}: MultiAgentVectorEnv needs one space for all agents")
    return obs_space, act_space


class AgentRows(gym.Env):
    """A PettingZoo ``ParallelEnv`` as a Gymnasium env of one row per possible agent.

    Args:
        env_fn: builds the ParallelEnv (called here, in the worker process).

    Raises:
        TypeError: ``env_fn`` builds something that is not a ParallelEnv.
        ValueError: agents whose spaces differ.
    """

    def __init__(self, env_fn: Callable[[], Any]):
        env = env_fn()
        check_parallel_env(env, "each env_fns[i]")
        self.env = env
        self.possible_agents = list(env.possible_agents)
        self.num_agents = len(self.possible_agents)
        self.agent_observation_space, self.agent_action_space = agent_spaces(env)
        self.observation_space = batch_space(self.agent_observation_space, self.num_agents)
        self.action_space = batch_space(self.agent_action_space, self.num_agents)
        self.metadata = dict(getattr(env, "metadata", None) or {})
        self.render_mode = getattr(env, "render_mode", None)
        self._index = {agent: i for i, agent in enumerate(self.possible_agents)}
        self._obs = create_empty_array(self.agent_observation_space, self.num_agents, fn=np.zeros)
        self._absent_obs = create_empty_array(self.agent_observation_space, 1, fn=np.zeros)
        if isinstance(self.agent_observation_space, gym.spaces.Dict) and "action_mask" in self.agent_observation_space.spaces:
            self._absent_obs["action_mask"][...] = 1  # (never all False: a policy can still sample)

    # -- the Gymnasium API ------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        observations, _ = self.env.reset(seed=seed, options=options)
        present = self._fill(observations)
        return self._observation(), self._infos(np.zeros(self.num_agents), ~present,
                                                np.zeros(self.num_agents, bool), present)

    def step(self, action):
        actions = {agent: self._action_of(action, self._index[agent]) for agent in self.env.agents}
        observations, rewards, terminations, truncations, _ = self.env.step(actions)
        present = self._fill(observations)
        reward_rows = np.zeros(self.num_agents)
        terminated = ~present
        truncated = np.zeros(self.num_agents, bool)
        for agent in observations:
            i = self._index[agent]
            reward_rows[i] = float(rewards.get(agent, 0.0))
            terminated[i] = bool(terminations.get(agent, False))
            truncated[i] = bool(truncations.get(agent, False))
        ended = terminated | truncated
        done = not self.env.agents or bool(ended[present].all())
        env_truncated = done and bool(present.any()) and bool(truncated[present].all()) and not terminated[present].any()
        return (self._observation(), float(reward_rows.sum()), done and not env_truncated, env_truncated,
                self._infos(reward_rows, terminated, truncated, present))

    def render(self):
        return self.env.render()

    def close(self):
        self.env.close()

    # -- rows ---------------------------------------------------------------------------------
    def _fill(self, observations: dict) -> np.ndarray:
        """Write each agent's observation into its row (absent rows: the absent observation);
        the mask of the agents that reported one."""
        present = np.zeros(self.num_agents, bool)
        for agent in observations:
            present[self._index[agent]] = True
        _write_rows(self._obs, self._absent_obs, observations, self._index, present)
        return present

    def _observation(self):
        return copy_batch(self._obs)

    def _action_of(self, action, i: int):
        if isinstance(action, dict):
            return {key: self._action_of(value, i) for key, value in action.items()}
        if isinstance(action, tuple):
            return tuple(self._action_of(value, i) for value in action)
        return action[i]

    @staticmethod
    def _infos(rewards, terminated, truncated, present) -> dict:
        return {"agent_rewards": np.asarray(rewards, np.float64), "agent_terminated": np.asarray(terminated, bool),
                "agent_truncated": np.asarray(truncated, bool), "agent_mask": np.asarray(present, bool)}


def _write_rows(batch, absent, observations: dict, index: dict, present: np.ndarray) -> None:
    """Row ``index[agent]`` of ``batch`` (a batched observation: array, dict or tuple of them)
    from ``observations[agent]``; the rows of absent agents from ``absent`` (a batch of one)."""
    if isinstance(batch, dict):
        for key in batch:
            _write_rows(batch[key], absent[key], {a: o[key] for a, o in observations.items()}, index, present)
        return
    if isinstance(batch, tuple):
        for k in range(len(batch)):
            _write_rows(batch[k], absent[k], {a: o[k] for a, o in observations.items()}, index, present)
        return
    batch[~present] = absent[0]
    for agent, value in observations.items():
        batch[index[agent]] = value

