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

import sys
from typing import Any, Callable

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space, create_empty_array


__all__ = ["AgentRows", "INFO_KEYS", "AGENT_INFOS", "AGENT_INFO_GIVEN"]

#: The info keys every step and reset of an AgentRows env carries, one value per agent.
INFO_KEYS = ("agent_rewards", "agent_terminated", "agent_truncated", "agent_mask")
#: The info keys under which the ParallelEnv's own per-agent infos travel, when it gives
#: any: a dict of one array over the agents per key, and a dict of which agents gave it.
AGENT_INFOS, AGENT_INFO_GIVEN = "agent_infos", "agent_info_given"
#: the row infos' own keys: a ParallelEnv's info key of one of these names, or one that
#: starts with "_" (the name of a mask), travels as ``agent_<key>``
OWN_INFO_KEYS = frozenset({"agent_mask", "action_mask", "final_obs", "final_info", "env_id", "env_restarted",
                           "env_error"})


def _is_parallel_env(env: Any) -> bool:
    return (hasattr(env, "possible_agents") and callable(getattr(env, "observation_space", None))
            and callable(getattr(env, "action_space", None)) and callable(getattr(env, "step", None))
            and callable(getattr(env, "reset", None)))


def _is_aec_env(env: Any) -> bool:
    """Whether ``env`` is a PettingZoo AEC env: it has the ParallelEnv API's names too, but
    steps one agent at a time (``agent_iter``, ``last``; its ``reset`` returns None)."""
    pettingzoo_env = sys.modules.get("pettingzoo.utils.env")  # (loaded if env is PettingZoo's)
    if pettingzoo_env is not None and isinstance(env, pettingzoo_env.ParallelEnv):
        return False
    if pettingzoo_env is not None and isinstance(env, pettingzoo_env.AECEnv):
        return True
    return callable(getattr(env, "agent_iter", None)) and callable(getattr(env, "last", None))


def check_parallel_env(env: Any, where: str) -> None:
    """Raise TypeError unless ``env`` has PettingZoo's ParallelEnv API (an AEC env does not)."""
    if _is_aec_env(env):
        raise TypeError(
            f"{where} must build a PettingZoo ParallelEnv, got the AEC env {type(env).__name__} (one agent "
            "steps at a time: its reset returns None, its step takes one action); convert it with "
            "pettingzoo.utils.conversions.aec_to_parallel(env), or build the env's parallel_env() instead"
        )
    if not _is_parallel_env(env):
        raise TypeError(
            f"{where} must build a PettingZoo ParallelEnv (possible_agents, observation_space(agent), "
            f"action_space(agent), reset, step), got {type(env).__name__}; an AEC env converts with "
            "pettingzoo.utils.conversions.aec_to_parallel"
        )


def agent_spaces(env: Any, pad: bool = False) -> tuple[gym.Space, gym.Space]:
    """One agent's observation and action spaces: the same for every agent of ``env``, or,
    with ``pad``, the smallest spaces that hold every agent's (see :func:`padded_space`).

    Raises:
        ValueError: agents whose spaces differ (naming the first that differs), or, with
            ``pad``, spaces that cannot be padded to one.
    """
    agents = list(env.possible_agents)
    if not agents:
        raise ValueError("the ParallelEnv has no possible_agents")
    obs_spaces = [env.observation_space(agent) for agent in agents]
    act_spaces = [env.action_space(agent) for agent in agents]
    if pad:
        return padded_space(obs_spaces, agents, "observation"), padded_space(act_spaces, agents, "action")
    for what, spaces in (("observation", obs_spaces), ("action", act_spaces)):
        for agent, space in zip(agents[1:], spaces[1:]):
            if space != spaces[0]:
                raise ValueError(
                    f"agent {agent!r}'s {what} space {space} differs from agent {agents[0]!r}'s {spaces[0]}: "
                    "MultiAgentVectorEnv needs one space for all agents, or pad_spaces=True to pad them to one"
                )
    return obs_spaces[0], act_spaces[0]


def padded_space(spaces: list[gym.Space], agents: list[str], what: str) -> gym.Space:
    """The smallest space that holds a value of each of ``spaces`` (one per agent), padded
    with zeros at the end of each axis.

    - equal spaces: that space;
    - Box spaces of one rank: each axis as long as the longest, the dtype that holds every
      agent's; bounds the widest of the agents' with 0 for an agent's padding (so zeros are
      inside them);
    - MultiBinary spaces of one rank: each axis as long as the longest;
    - Discrete spaces of one ``start``: the largest ``n`` (the actions past an agent's own
      ``n`` are invalid for it: see MultiAgentVectorEnv's ``action_mask``; inside a Dict or
      Tuple action space, Discrete leaves must agree);
    - Dict spaces with the same keys, Tuple spaces of one length: padded leaf by leaf.

    Raises:
        ValueError: spaces of different kinds or ranks, or Discrete ones of different starts
            (naming the agents).
    """
    first = spaces[0]
    if all(space == first for space in spaces[1:]):
        return first

    def refuse(why: str) -> ValueError:
        listed = ", ".join(f"{agent!r}: {space}" for agent, space in zip(agents, spaces))
        return ValueError(f"pad_spaces=True cannot pad the agents' {what} spaces to one ({why}): {listed}")

    if all(isinstance(space, gym.spaces.Dict) for space in spaces):
        if any(list(space.spaces) != list(first.spaces) for space in spaces):
            raise refuse("Dict spaces with different keys")
        return gym.spaces.Dict({key: padded_space([space[key] for space in spaces], agents, f"{what} {key!r}")
                                for key in first.spaces})
    if all(isinstance(space, gym.spaces.Tuple) for space in spaces):
        if len({len(space.spaces) for space in spaces}) > 1:
            raise refuse("Tuple spaces of different lengths")
        return gym.spaces.Tuple([padded_space([space[k] for space in spaces], agents, f"{what} [{k}]")
                                 for k in range(len(first.spaces))])
    if all(type(space) is gym.spaces.Discrete for space in spaces):
        if len({int(space.start) for space in spaces}) > 1:
            raise refuse("Discrete spaces with different starts")
        if what.startswith("action ") and len({int(space.n) for space in spaces}) > 1:
            # (only a Discrete action space as a whole gets action_mask and its check)
            raise refuse("Discrete actions of different n inside a Dict or Tuple")
        return gym.spaces.Discrete(max(int(space.n) for space in spaces), start=int(first.start))
    if all(type(space) is gym.spaces.MultiBinary for space in spaces):
        if len({len(space.shape) for space in spaces}) > 1:
            raise refuse("MultiBinary spaces of different ranks")
        shape = [int(n) for n in np.max([space.shape for space in spaces], axis=0)]
        return gym.spaces.MultiBinary(shape[0] if len(shape) == 1 else shape)
    if all(type(space) is gym.spaces.Box for space in spaces):
        if len({len(space.shape) for space in spaces}) > 1:
            raise refuse("Box spaces of different ranks")
        shape = tuple(int(n) for n in np.max([space.shape for space in spaces], axis=0))
        dtype = np.result_type(*[space.dtype for space in spaces])
        low = np.min([pad_to(space.low.astype(np.float64), shape) for space in spaces], axis=0)
        high = np.max([pad_to(space.high.astype(np.float64), shape) for space in spaces], axis=0)
        return gym.spaces.Box(low.astype(dtype), high.astype(dtype), shape, dtype)
    raise refuse("only Box, MultiBinary, Discrete, and Dict or Tuple spaces of them pad")


def pad_to(value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` in the leading corner of zeros of ``shape``."""
    out = np.zeros(shape, np.asarray(value).dtype)
    out[_corner(np.shape(value))] = value
    return out


def _corner(shape: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(0, n) for n in shape)


class AgentRows(gym.Env):
    """A PettingZoo ``ParallelEnv`` as a Gymnasium env of one row per possible agent.

    Args:
        env_fn: builds the ParallelEnv (called here, in the worker process).
        pad_spaces: agents whose spaces differ share the padded space of
            :func:`padded_space`: an observation is written in the leading corner of its
            row (zeros after it), and an agent is given the leading corner of its action row.

    Raises:
        TypeError: ``env_fn`` builds something that is not a ParallelEnv.
        ValueError: agents whose spaces differ (without ``pad_spaces``), or cannot be padded.
    """

    def __init__(self, env_fn: Callable[[], Any], pad_spaces: bool = False):
        env = env_fn()
        check_parallel_env(env, "each env_fns[i]")
        self.env = env
        self.possible_agents = list(env.possible_agents)
        self.num_agents = len(self.possible_agents)
        self.agent_observation_space, self.agent_action_space = agent_spaces(env, pad_spaces)
        # (each agent's own action space, to cut its action out of a padded row)
        own = {agent: env.action_space(agent) for agent in self.possible_agents}
        self._own_action_spaces = own if any(space != self.agent_action_space for space in own.values()) else None
        #: the number of valid actions of each agent, where a padded Discrete action space
        #: holds more for some (None otherwise)
        self.agent_action_counts = None
        if self._own_action_spaces is not None and type(self.agent_action_space) is gym.spaces.Discrete:
            self.agent_action_counts = [int(self._own_action_spaces[agent].n) for agent in self.possible_agents]
        self.observation_space = batch_space(self.agent_observation_space, self.num_agents)
        self.action_space = batch_space(self.agent_action_space, self.num_agents)
        self.metadata = dict(getattr(env, "metadata", None) or {})
        self.render_mode = getattr(env, "render_mode", None)
        self._index = {agent: i for i, agent in enumerate(self.possible_agents)}
        # Agents that all share one array observation space: each observation is assigned
        # to its row as it is, without _write_rows' per-leaf pass (this runs in the workers
        # on every step, between two env steps of the same worker)
        self._plain_rows = all(env.observation_space(agent) == self.agent_observation_space
                               for agent in self.possible_agents) and \
            not isinstance(self.agent_observation_space, (gym.spaces.Dict, gym.spaces.Tuple))
        # Two observation buffers, filled in turn, and handed out without a copy: the worker
        # copies an observation into the shared block within the same command, and the one a
        # step that ends the episode returned (SAME_STEP's final_obs) must outlive the reset
        # that follows.
        self._buffers = [create_empty_array(self.agent_observation_space, self.num_agents, fn=np.zeros)
                         for _ in range(2)]
        self._turn = 0
        self._row: np.ndarray | None = None  # (the env's row of the shared block: use_observation_row)
        self._last = self._buffers[0]  # the array the last observation was written to
        self._absent_obs = create_empty_array(self.agent_observation_space, 1, fn=np.zeros)
        if isinstance(self.agent_observation_space, gym.spaces.Dict) and "action_mask" in self.agent_observation_space.spaces:
            self._absent_obs["action_mask"][...] = 1  # (never all False: a policy can still sample)

    def use_observation_row(self, row: np.ndarray) -> None:
        """Write the observations of steps that do not end the episode, and of resets,
        straight into ``row`` (this env's row of the vector env's shared block, which the
        worker hands over) and return it, instead of stacking them into an array of its own
        that the worker then copies there. A step that ends the episode still stacks into its
        own arrays: with SAME_STEP its observation is the ``final_obs`` that must outlive the
        reset that follows. Ignored (the row is not used) unless the agents share one array
        observation space and ``row`` is a writeable C-contiguous array of the stacked shape
        and dtype."""
        batch = self._buffers[0]
        if (self._plain_rows and isinstance(row, np.ndarray) and row.shape == batch.shape
                and row.dtype == batch.dtype and row.flags.c_contiguous and row.flags.writeable):
            self._row = row

    # -- the Gymnasium API ------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        observations, agent_infos = self.env.reset(seed=seed, options=options)
        present = self._fill(observations)
        return self._observation(), self._infos([0.0] * self.num_agents, [not p for p in present],
                                                [False] * self.num_agents, present, agent_infos)

    def step(self, action):
        index = self._index
        if self._own_action_spaces is not None:
            actions = {agent: _own_part(self._action_of(action, index[agent]), self._own_action_spaces[agent])
                       for agent in self.env.agents}
        elif type(action) is np.ndarray:
            actions = {agent: action[index[agent]] for agent in self.env.agents}
        else:
            actions = {agent: self._action_of(action, index[agent]) for agent in self.env.agents}
        observations, rewards, terminations, truncations, agent_infos = self.env.step(actions)
        n = self.num_agents
        # (Python lists over the few agents: NumPy's per-call cost is what a step pays here)
        present, reward_rows = [False] * n, [0.0] * n
        terminated, truncated = [True] * n, [False] * n  # (absent rows: terminated)
        all_ended, all_truncated, any_terminated = True, True, False
        for agent in observations:
            i = index[agent]
            present[i] = True
            reward_rows[i] = float(rewards.get(agent, 0.0))
            term = terminated[i] = bool(terminations.get(agent, False))
            trunc = truncated[i] = bool(truncations.get(agent, False))
            all_ended = all_ended and (term or trunc)
            all_truncated = all_truncated and trunc
            any_terminated = any_terminated or term
        # Done once no agent is left or every agent that reported has ended; a truncation
        # when each of those was truncated and none terminated.
        done = not self.env.agents or all_ended
        self._fill(observations, present, into_row=not done)
        env_truncated = done and bool(observations) and all_truncated and not any_terminated
        infos = self._infos(reward_rows, terminated, truncated, present, agent_infos)
        return (self._observation(), float(infos["agent_rewards"].sum()), done and not env_truncated, env_truncated,
                infos)

    def render(self):
        return self.env.render()

    def close(self):
        self.env.close()

    def get_wrapper_attr(self, name: str) -> Any:
        """``name`` of the ParallelEnv (what ``call`` and ``get_attr`` read), else of this bridge
        (its rows' spaces, ``agent_action_counts``, ...)."""
        try:
            return getattr(self.env, name)
        except AttributeError:
            return getattr(self, name)

    def set_wrapper_attr(self, name: str, value: Any, *, force: bool = True) -> bool:
        """Set ``name`` on the ParallelEnv, unless only this bridge has it."""
        if hasattr(self.env, name) or not hasattr(self, name):
            setattr(self.env, name, value)
        else:
            setattr(self, name, value)
        return True

    # -- rows ---------------------------------------------------------------------------------
    def _fill(self, observations: dict, present: list[bool] | None = None, into_row: bool = True) -> list[bool]:
        """Write each agent's observation into its row (absent rows: the absent observation),
        in the shared block's row where ``into_row`` and :meth:`use_observation_row` gave one,
        else in the next of its own two arrays; ``present`` (computed here if not given):
        which agents reported one."""
        if present is None:
            present = [False] * self.num_agents
            for agent in observations:
                present[self._index[agent]] = True
        if into_row and self._row is not None:
            self._last = batch = self._row
        else:
            self._turn ^= 1
            self._last = batch = self._buffers[self._turn]
        if self._plain_rows:
            index = self._index
            for agent, value in observations.items():
                batch[index[agent]] = value
            if len(observations) < self.num_agents:
                batch[~np.array(present)] = self._absent_obs[0]
        else:
            _write_rows(batch, self._absent_obs, observations, self._index, np.array(present))
        return present

    def _observation(self):
        return self._last

    def _action_of(self, action, i: int):
        if isinstance(action, dict):
            return {key: self._action_of(value, i) for key, value in action.items()}
        if isinstance(action, tuple):
            return tuple(self._action_of(value, i) for value in action)
        return action[i]

    def _infos(self, rewards, terminated, truncated, present, agent_infos: dict | None) -> dict:
        infos = {"agent_rewards": np.array(rewards, np.float64), "agent_terminated": np.array(terminated, bool),
                 "agent_truncated": np.array(truncated, bool), "agent_mask": np.array(present, bool)}
        if agent_infos and any(agent_infos.values()):  # (most envs give every agent {})
            infos[AGENT_INFOS], infos[AGENT_INFO_GIVEN] = _per_key(agent_infos, self._index, self.num_agents)
        return infos


def _per_key(agent_infos: dict, index: dict, n: int) -> tuple[dict, dict]:
    """``{agent: {key: value}}`` as ``{key: one value per agent}`` and ``{key: which agents
    gave it}``. Numbers, and arrays of one shape, become a numeric array (zeros where an
    agent gave none), so that they travel through the shared block; anything else an object
    array (None where an agent gave none)."""
    given: dict[str, list] = {}
    for agent, info in agent_infos.items():
        i = index.get(agent)
        if i is None or not info:
            continue
        for key, value in info.items():
            if key in OWN_INFO_KEYS or (isinstance(key, str) and key.startswith("_")):
                key = f"agent_{key}"
            given.setdefault(key, []).append((i, value))
    values, masks = {}, {}
    for key, pairs in given.items():
        rows = [i for i, _ in pairs]
        mask = np.zeros(n, bool)
        mask[rows] = True
        try:
            stacked = np.asarray([value for _, value in pairs])
        except ValueError:  # (arrays of different shapes)
            stacked = None
        if stacked is not None and stacked.dtype.kind in "biuf":
            out = np.zeros((n, *stacked.shape[1:]), stacked.dtype)
            out[rows] = stacked
        else:
            out = np.full(n, None, dtype=object)
            for i, value in pairs:
                out[i] = value
        values[key], masks[key] = out, mask
    return values, masks


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
        row = index[agent]
        if np.shape(value) == batch.shape[1:]:
            batch[row] = value
        else:  # (a padded space: the agent's value in the row's leading corner, zeros after)
            batch[row] = 0
            batch[row][_corner(np.shape(value))] = value


def _own_part(action, space: gym.Space):
    """An agent's action cut out of a padded action row: the leading corner of an array
    leaf of ``space``'s shape (a Discrete leaf is a number and stays)."""
    if isinstance(space, gym.spaces.Dict):
        return {key: _own_part(action[key], space[key]) for key in space.spaces}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_own_part(action[k], sub) for k, sub in enumerate(space.spaces))
    if space.shape and np.shape(action) != space.shape:
        return action[_corner(space.shape)]
    return action

