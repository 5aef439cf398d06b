"""MultiAgentVectorEnv: PettingZoo Parallel envs as a Gymnasium vector env of agent rows."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from gymnasium import logger
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from fastvec.vector._worker.agent_rows import AGENT_INFO_GIVEN, AGENT_INFOS, AgentRows
from fastvec.vector._caller.arguments import check_env_fns, same_value
from fastvec.vector._block.batch_tree import row_of
from fastvec.vector._caller.worker_vector_env import CallState
from fastvec.errors import SpacesDifferError
from fastvec.vector.fast_vector_env import FastVectorEnv

__all__ = ["MultiAgentVectorEnv"]


class MultiAgentVectorEnv(VectorEnv):
    """PettingZoo ``ParallelEnv``\\ s as one Gymnasium vector env whose rows are (env, agent)
    pairs: env-major, the agents of each env in ``possible_agents`` order.

    The envs run in FastVectorEnv's worker processes (each ``env_fns[i]`` is called there),
    every agent's observation, action, reward and flags in the shared block: nothing is
    pickled on a common step. ``num_envs`` is the number of rows (envs x agents);
    ``single_observation_space``/``single_action_space`` are one agent's;
    ``num_agents`` (agents per env) and ``possible_agents`` say which row is which. Env ``i``
    is seeded with ``seed + i``, whatever the number of workers.

    **Agents that leave or have not yet come.** On the step an agent leaves (terminated or
    truncated), its row carries its real last observation, reward and flags. Until its env
    resets, its row is *absent*: observation zeros (an ``action_mask`` leaf all ones),
    reward 0, ``terminated=True``, ``truncated=False``; the actions given for it are
    ignored. :attr:`agent_mask` (and ``infos["agent_mask"]``) is True where the agent is
    present. An env ends once none of its agents is left, or all that reported are
    terminated or truncated; its rows then autoreset as ``autoreset_mode`` says (NEXT_STEP:
    the next step returns its reset; SAME_STEP: at once, the last observations in
    ``infos["final_obs"]`` row by row, and ``infos["final_info"]["agent_mask"]`` the agents
    present on that last step). No ``black_death`` wrapper is needed. Each agent's own infos
    come by row, ``infos[key]`` with its mask ``infos["_key"]`` (``docs/multiagent.md``).

    Example (a two-agent env written here; PettingZoo's own envs work the same way):
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> from fastvec import MultiAgentVectorEnv
        >>> class Duel:  # the ParallelEnv API: possible_agents, agents, spaces, reset, step
        ...     possible_agents = ["left", "right"]
        ...     metadata = {}
        ...     def observation_space(self, agent): return spaces.Box(-1.0, 1.0, (2,), np.float32)
        ...     def action_space(self, agent): return spaces.Discrete(3)
        ...     def reset(self, seed=None, options=None):
        ...         self.agents, self.t = list(self.possible_agents), 0
        ...         return {a: np.zeros(2, np.float32) for a in self.agents}, {a: {} for a in self.agents}
        ...     def step(self, actions):
        ...         self.t += 1
        ...         obs = {a: np.full(2, self.t / 10, np.float32) for a in actions}
        ...         rewards = {a: float(actions[a]) for a in actions}
        ...         done = {a: self.t == 3 for a in actions}
        ...         self.agents = [] if self.t == 3 else self.agents
        ...         return obs, rewards, done, {a: False for a in actions}, {a: {} for a in actions}
        >>> envs = MultiAgentVectorEnv([Duel, Duel, Duel])
        >>> envs.num_envs, envs.num_agents, envs.possible_agents
        (6, 2, ['left', 'right'])
        >>> obs, infos = envs.reset(seed=0)
        >>> obs.shape
        (6, 2)
        >>> obs, rewards, terminated, truncated, infos = envs.step(np.array([0, 1, 2, 0, 1, 2]))
        >>> rewards
        array([0., 1., 2., 0., 1., 2.])
        >>> bool(envs.agent_mask.all())
        True
        >>> envs.close()

    With ``batch_size`` each worker's envs step on their own (:meth:`send`/:meth:`recv`):

        >>> envs = MultiAgentVectorEnv([Duel] * 4, num_workers=2, batch_size=2)
        >>> envs.async_reset(seed=0)
        >>> obs, rewards, terminated, truncated, infos = envs.recv()  # one worker's 2 envs x 2 agents
        >>> obs.shape, infos["env_id"].tolist() in ([0, 1, 2, 3], [4, 5, 6, 7])
        ((4, 2), True)
        >>> envs.send(np.full(4, 2), infos["env_id"])  # its next actions; the other worker steps meanwhile
        >>> envs.close()

    Args:
        env_fns: one constructor per env, each returning a PettingZoo ``ParallelEnv`` (called
            in a worker process). Every env must have the same ``possible_agents``, and every
            agent the same observation and action spaces.
        num_workers: worker processes (default: one per usable core, at most one per env).
        autoreset_mode: ``NEXT_STEP`` (default), ``SAME_STEP`` or ``DISABLED``.
        pad_spaces: let agents whose spaces differ share one, padded: Box (and MultiBinary)
            observations and actions to the longest of each axis, zeros after an agent's own
            values (an agent gets the leading part of its action row); Discrete actions up
            to the largest ``n``, with :attr:`action_mask` saying which are an agent's own
            (an action past them raises ValueError); Dict and Tuple spaces leaf by leaf (their
            Discrete action leaves must agree).
            Without it (default), agents whose spaces differ raise ValueError.
        batch_size: envs (not rows) per :meth:`recv`, EnvPool style: with fewer than
            ``len(env_fns)``, the envs are stepped with :meth:`send`/:meth:`recv`, and each
            worker's envs step on their own instead of in lockstep with the others'. A worker's
            envs travel together, so the envs must divide evenly among the workers and
            ``batch_size`` be a multiple of each one's share. Default: every env
            (:meth:`step`).
        **vector_kwargs: the rest of :class:`fastvec.FastVectorEnv`'s keywords
            (``context``, ``pin_workers``, ``env_failure``, ...), except ``step_in_caller``
            and ``observation_mode``.

    Raises:
        TypeError: ``env_fns`` not a sequence of callables, an env that is not a
            ParallelEnv, or a keyword this class does not take.
        ValueError: envs whose ``possible_agents`` differ, agents whose spaces differ (or, with
            ``pad_spaces``, cannot be padded to one), a ``batch_size`` that does not split
            into whole workers' envs.

    Attributes:
        action_mask: with ``pad_spaces`` and Discrete actions of different ``n``, a bool
            array (rows x the largest ``n``), True where the action is the row's agent's own;
            also in the infos of every reset and step. None otherwise.
    """

    def __init__(self, env_fns: Sequence[Callable[[], Any]], num_workers: int | None = None, *,
                 autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP, pad_spaces: bool = False,
                 batch_size: int | None = None, **vector_kwargs: Any) -> None:
        self._envs: FastVectorEnv | None = None
        for key in ("step_in_caller", "observation_mode"):
            if key in vector_kwargs:
                raise TypeError(f"MultiAgentVectorEnv does not take {key!r}")
        env_fns = check_env_fns(env_fns, "MultiAgentVectorEnv", "a PettingZoo ParallelEnv")
        try:
            self._envs = FastVectorEnv([_RowsMaker(fn, bool(pad_spaces)) for fn in env_fns], num_workers,
                                       autoreset_mode=autoreset_mode, batch_size=batch_size, **vector_kwargs)
        except SpacesDifferError as error:  # (an env's agents, stacked in its row, batch differently)
            raise ValueError(
                f"env {error.env}'s agents differ from env 0's: its {error.what} space (its agents' stacked) is "
                f"{error.got}, env 0's {error.want}. Every env must have the same possible_agents, each agent "
                "the same spaces in every env") from None
        try:
            agents = self._envs.get_attr("possible_agents")
            for k, other in enumerate(agents[1:], 1):
                if list(other) != list(agents[0]):
                    raise ValueError(f"env {k}'s possible_agents {list(other)} differ from env 0's {list(agents[0])}")
            self.possible_agents = list(agents[0])
            self.agent_observation_space = self._envs.get_attr("agent_observation_space")[0]
            self.agent_action_space = self._envs.get_attr("agent_action_space")[0]
            counts = self._envs.get_attr("agent_action_counts")[0]
        except BaseException:
            self._envs.close()
            raise
        self.num_agents = len(self.possible_agents)
        self.num_parallel_envs = self._envs.num_envs
        #: whether observations are copied out of the shared block (``copy``, FastVectorEnv's)
        self.copy = self._envs.copy
        #: envs (ParallelEnvs, not rows) per :meth:`recv`
        self.batch_size = self._envs.batch_size
        # the envs recv() handed back (or reset() returned) that have not been sent actions
        # since: the default of send's env_ids
        self._ready_envs = np.zeros(self.num_parallel_envs, bool)
        self.num_envs = self.num_parallel_envs * self.num_agents
        # env i's row indices: _env_rows[i]
        self._env_rows = np.arange(self.num_envs, dtype=np.int64).reshape(self.num_parallel_envs, self.num_agents)
        # row sets known to be whole envs' (recv hands them out), by their bytes: the envs they
        # are. send looks them up instead of checking them again (a few numpy calls, each paid
        # from cold caches after a long env step).
        self._envs_by_rows: dict[bytes, np.ndarray] = {}
        self._all_true = np.ones(self.num_envs, bool)  # (copied from: np.ones is a Python function)
        self.single_observation_space = self.agent_observation_space
        self.single_action_space = self.agent_action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.autoreset_mode = self._envs.autoreset_mode
        self.metadata = dict(self._envs.metadata)
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = self._envs.render_mode
        #: True where the row's agent is in its env (see the class docstring)
        self.agent_mask = np.zeros(self.num_envs, bool)
        # rows whose agent left on the last step (present then, absent from the next one)
        self._gone = np.zeros(self.num_envs, bool)
        # the reset_mask (one entry per env; None: all) of the last reset sent, for a reset that
        # a KeyboardInterrupt interrupted and the next call finishes (_finish_interrupted)
        self._reset_mask_out = None
        self.action_mask = None
        self._action_limits = None  # (the first invalid action of each row, with padded Discrete actions)
        if counts is not None:
            start = int(self.agent_action_space.start)
            self._action_limits = start + np.tile(np.asarray(counts, np.int64), self.num_parallel_envs)
            self.action_mask = np.arange(start, start + int(self.agent_action_space.n)) < self._action_limits[:, None]

    # -- the Gymnasium API ------------------------------------------------------------------
    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        """Reset every env (env ``i`` with ``seed + i``; with a list of one seed per row, each
        env with its first row's); returns (observations, infos) by row.

        ``options["reset_mask"]`` resets only some envs: a bool array of one entry per row
        (``num_envs``, as Gymnasium's vector envs take it), alike for all rows of an env, or of
        one entry per env. The other envs' rows, and their :attr:`agent_mask`, stay as they were.

        Raises:
            ValueError: a ``reset_mask`` of another length, or that splits an env's rows.
        """
        env_mask, options = self._before_reset("reset", options)
        self._reset_mask_out = env_mask
        return self._reset_rows(self._envs.reset(seed=self._env_seeds(seed), options=options), env_mask)

    def _before_reset(self, caller: str, options: dict[str, Any] | None) -> tuple[np.ndarray | None, dict | None]:
        """Finish an interrupted call, then turn ``options["reset_mask"]`` into one entry per env.

        Returns:
            The env mask (None: every env) and the options to hand the workers.
        """
        if self._interrupted:
            self._finish_interrupted(caller)
        if options is None or "reset_mask" not in options:
            return None, options
        env_mask = self._env_reset_mask(options["reset_mask"])
        return env_mask, {**options, "reset_mask": env_mask}

    def _reset_rows(self, out: tuple, env_mask) -> tuple:
        """A reset's (observations, infos) by row, :attr:`agent_mask` updated (``env_mask``: the
        envs it reset, one entry per env; None: all)."""
        obs, infos = out
        mask = infos["agent_mask"].copy()
        if env_mask is not None:  # (the envs not reset keep their agents)
            kept = ~np.asarray(env_mask, bool)
            mask[kept] = self.agent_mask.reshape(self.num_parallel_envs, self.num_agents)[kept]
            self._gone &= np.repeat(kept, self.num_agents)  # (as async_reset: the envs reset forget who left)
        else:
            self._gone[:] = False
        self.agent_mask = mask.reshape(-1).copy()
        self._ready_envs[:] = True
        return self._rows(obs), self._row_infos(infos, mask)

    def step(self, actions):
        """Step every env with its agents' actions (one row each; absent agents' ignored);
        returns (observations, rewards, terminations, truncations, infos) by row.

        After a KeyboardInterrupt (Ctrl-C) ended the wait of a step (or reset), the next call
        first waits for it: its results are dropped (with a warning, unless that next call is a
        reset), and :attr:`agent_mask` follows them as it would have.

        Raises:
            RuntimeError: the vector env was made with ``batch_size`` below the number of
                envs (step it with :meth:`send`/:meth:`recv`).
        """
        if self.batch_size < self.num_parallel_envs:
            raise RuntimeError(f"this MultiAgentVectorEnv has batch_size={self.batch_size} < "
                               f"{self.num_parallel_envs} envs: step it with send(actions, env_ids) / recv()")
        if self._interrupted:
            self._finish_interrupted("step")  # (before the actions are checked against agent_mask)
        return self._step_rows(self._envs.step(self._per_env(actions)))

    def _step_rows(self, out: tuple) -> tuple:
        """A step's (observations, rewards, terminations, truncations, infos) by row,
        :attr:`agent_mask` updated."""
        obs, _, _, env_truncated, infos = out
        rewards, terminated, truncated, mask = self._agent_results(infos, env_truncated)
        self._gone = self._left(infos, mask, terminated, truncated)
        self.agent_mask = mask.reshape(-1).copy()
        return (self._rows(obs), rewards.reshape(-1), terminated.reshape(-1), truncated.reshape(-1),
                self._row_infos(infos, mask, truncated=truncated))

    # -- after a KeyboardInterrupt ------------------------------------------------------------
    @property
    def _interrupted(self) -> bool:
        """Whether a KeyboardInterrupt ended the wait of the last call (a step, reset or call),
        which the workers went on with: the next call finishes it first."""
        return self._envs is not None and self._envs._interrupted

    def _finish_interrupted(self, caller: str, warn: bool | None = None) -> tuple[CallState, Any]:
        """Finish the call whose wait a KeyboardInterrupt ended before ``caller`` sends a new
        command: a step's or reset's results update :attr:`agent_mask` (and which agents left)
        as theirs would have. Returns (its state, its results by row, as :meth:`step` or
        :meth:`reset` would have returned them); they are dropped by ``caller``, so a warning
        says so (``warn``; default: unless ``caller`` is a reset)."""
        state, out = self._envs._finish_interrupted(caller, warn=False)
        if state is CallState.WAITING_STEP:
            out = self._step_rows(out)
        elif state is CallState.WAITING_RESET:
            out = self._reset_rows(out, self._reset_mask_out)
        if warn is None:
            warn = not caller.startswith("reset")
        if warn and state is not CallState.DEFAULT:
            logger.warn(f"`{caller}` first finished the `{state.value}` that a KeyboardInterrupt interrupted and "
                        "dropped its results")
        return state, out

    # -- async: send / recv (EnvPool style) -------------------------------------------------
    def async_reset(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        """Start resetting every env (env ``i`` with ``seed + i``); their first observations
        come from :meth:`recv`, ``batch_size`` envs at a time (``options["reset_mask"]``: as
        :meth:`reset`'s)."""
        env_mask, options = self._before_reset("async_reset", options)
        self._envs.async_reset(seed=self._env_seeds(seed), options=options)
        self._ready_envs[:] = False
        if env_mask is not None:
            # (the envs reset forget the agents that left them; those left out keep theirs, and
            # recv hands back the ones on the workers the reset goes to as they were)
            self._gone &= np.repeat(~np.asarray(env_mask, bool), self.num_agents)

    def send(self, actions, env_ids=None) -> None:
        """Start stepping the envs of the rows ``env_ids`` with ``actions`` (one per row, in
        ``env_ids`` order; absent agents' ignored) and return at once.

        Args:
            actions: one action per row of ``env_ids``.
            env_ids: row indices, every row of each env they name: in practice the
                ``infos["env_id"]`` of one or more earlier :meth:`recv`. Default: the rows
                that :meth:`recv` handed back (or :meth:`reset` returned) and that have not
                been sent actions since.

        Raises:
            ValueError: ``env_ids`` holds only some of an env's rows, or only some of the envs
                that step together in one worker (``batch_size`` is a multiple of those), or
                ``actions`` does not hold one action per row; nothing to send by default.
        """
        if self._interrupted:
            self._finish_interrupted("send")
        if env_ids is None:
            envs = np.flatnonzero(self._ready_envs)
            if not len(envs):
                raise ValueError("send() with env_ids=None sends the rows handed back by recv() since the last "
                                 "send: there are none, recv() first (or pass env_ids)")
            rows = self._rows_of(envs)
        else:
            rows = np.asarray(env_ids)
            envs = self._envs_of(rows)
        self._envs.send(self._per_env(actions, rows), envs)
        self._ready_envs[envs] = False

    def recv(self, timeout: float | None = None):
        """Wait for ``batch_size`` envs to finish their step (or reset); returns their rows'
        (observations, rewards, terminations, truncations, infos).

        ``infos["env_id"]`` holds the row indices, in order (whole envs); the rest of the
        infos, and :attr:`agent_mask` at those rows, are as :meth:`step`'s. Rows whose env's
        last command was a reset have reward 0 and ``terminated`` True only where the agent
        is absent. Raises ``multiprocessing.TimeoutError`` after ``timeout`` seconds (as
        Gymnasium's AsyncVectorEnv), and gymnasium's
        ``NoAsyncCallError`` with nothing sent.
        """
        obs, _, _, env_truncated, infos = self._envs.recv(timeout)
        envs = np.asarray(infos["env_id"])
        first, last = int(envs[0]), int(envs[-1])
        if last - first + 1 == len(envs):  # (adjacent workers' envs, ascending as recv sorts them)
            rows = np.arange(first * self.num_agents, (last + 1) * self.num_agents, dtype=np.int64)
        else:
            rows = self._rows_of(envs)
        self._remember_rows(rows, envs)
        rewards, terminated, truncated, mask = self._agent_results(infos, env_truncated, rows)
        kept = self._envs.recv_left_out
        if kept is not None:  # (envs a masked async_reset left alone: their agents as they were)
            mask = mask.copy()
            mask[kept] = self.agent_mask.reshape(self.num_parallel_envs, self.num_agents)[envs[kept]]
            terminated = terminated.copy()
            terminated[kept] = ~mask[kept]
        self._gone[rows] = self._left(infos, mask, terminated, truncated)
        self.agent_mask[rows] = mask.reshape(-1)
        self._ready_envs[envs] = True
        row_infos = self._row_infos(infos, mask, rows, truncated)
        row_infos["env_id"] = rows
        return self._rows(obs), rewards.reshape(-1), terminated.reshape(-1), truncated.reshape(-1), row_infos

    def render(self):
        """Render every env (``render_mode`` set by the ParallelEnvs); one frame per env."""
        if self._interrupted:
            self._finish_interrupted("render")
        return self._envs.render()

    # -- call / attributes ----------------------------------------------------------------------
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call ``name`` on every env's ParallelEnv (or read it, if not callable): one result
        per row, each env's once for each of its agents (SB3's ``env_method`` and
        ``get_attr`` go through this).

        Example:
            >>> import numpy as np
            >>> from gymnasium import spaces
            >>> from fastvec import MultiAgentVectorEnv
            >>> class Pair:  # (a ParallelEnv with an attribute of its own)
            ...     possible_agents, metadata, level = ["a", "b"], {}, 0
            ...     def observation_space(self, agent): return spaces.Box(0.0, 9.0, (1,), np.float32)
            ...     def action_space(self, agent): return spaces.Discrete(2)
            ...     def reset(self, seed=None, options=None):
            ...         self.agents = list(self.possible_agents)
            ...         return {a: np.full(1, self.level, np.float32) for a in self.agents}, {a: {} for a in self.agents}
            ...     def step(self, actions):
            ...         return self.reset()[0], {a: 0.0 for a in actions}, {a: False for a in actions}, \\
            ...             {a: False for a in actions}, {a: {} for a in actions}
            >>> envs = MultiAgentVectorEnv([Pair, Pair], num_workers=1)
            >>> envs.get_attr("possible_agents")[:3]
            (['a', 'b'], ['a', 'b'], ['a', 'b'])
            >>> envs.set_attr("level", [1, 1, 2, 2])  # (one value per row, alike for an env's rows)
            >>> envs.get_attr("level")
            (1, 1, 2, 2)
            >>> envs.reset()[0].ravel().tolist()
            [1.0, 1.0, 2.0, 2.0]
            >>> envs.close()
        """
        if self._interrupted:
            self._finish_interrupted("call")
        return tuple(value for value in self._envs.call(name, *args, **kwargs) for _ in range(self.num_agents))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """``name`` of every env's ParallelEnv, one value per row (as :meth:`call`)."""
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        """Set ``name`` on every env's ParallelEnv: one value for all, or a list/tuple of one
        value per row, alike for an env's rows.

        Raises:
            ValueError: a list/tuple that has not one value per row, or splits an env's rows.
        """
        if isinstance(values, (list, tuple)):
            if len(values) != self.num_envs:
                raise ValueError(f"set_attr({name!r}, values) takes one value per row, {self.num_envs} "
                                 f"({self.num_parallel_envs} envs x {self.num_agents} agents), got {len(values)}")
            per_env = list(values[::self.num_agents])
            for row, value in enumerate(values):
                if not same_value(value, per_env[row // self.num_agents]):
                    e = row // self.num_agents
                    raise ValueError(f"set_attr({name!r}, values) sets whole envs: env {e}'s rows "
                                     f"{self._env_rows[e].tolist()} must have one value, got "
                                     f"{list(values[e * self.num_agents:(e + 1) * self.num_agents])}")
            values = per_env
        if self._interrupted:
            self._finish_interrupted("set_attr")
        self._envs.set_attr(name, values)

    def stats(self) -> dict[str, Any]:
        """The statistics of the envs' FastVectorEnv (:meth:`fastvec.FastVectorEnv.stats`): its
        ``env_steps`` and ``env_resets`` count envs, not rows, and ``sps`` env steps."""
        return self._envs.stats()

    def __enter__(self) -> "MultiAgentVectorEnv":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def close_extras(self, **kwargs: Any) -> None:
        if self._envs is not None:
            self._envs.close(**kwargs)

    @property
    def closed(self) -> bool:
        return self._envs is None or self._envs.closed

    @closed.setter
    def closed(self, value: bool) -> None:  # (VectorEnv.close sets it)
        pass

    @property
    def vector_env(self) -> FastVectorEnv:
        """The FastVectorEnv of one row per env (an env's agents stacked in its observation)."""
        return self._envs

    # -- rows <-> envs ----------------------------------------------------------------------------
    def _env_reset_mask(self, mask):
        """``reset``'s ``reset_mask`` as one entry per env. One entry per row must be alike for
        an env's rows; any other mask goes on as it is (FastVectorEnv checks its type, dtype and
        that it resets something)."""
        if not isinstance(mask, np.ndarray) or self.num_agents == 1 or mask.shape == (self.num_parallel_envs,):
            return mask
        if mask.shape != (self.num_envs,):
            raise ValueError(f"`options['reset_mask']` must have shape `({self.num_envs},)` (one entry per row) or "
                             f"`({self.num_parallel_envs},)` (one per env), got {mask.shape}")
        by_env = mask.reshape(self.num_parallel_envs, self.num_agents)
        split = np.flatnonzero((by_env != by_env[:, :1]).any(axis=1))
        if len(split):
            e = int(split[0])
            raise ValueError(f"`options['reset_mask']` resets whole envs: env {e}'s rows "
                             f"{self._env_rows[e].tolist()} must be alike, got {by_env[e].tolist()}")
        return by_env[:, 0].copy()

    def _env_seeds(self, seed):
        """``reset``'s seed for the envs: a list (or array) of one seed per row becomes each
        env's first row's (an int or None stays: FastVectorEnv gives env ``i`` ``seed + i``)."""
        if isinstance(seed, np.ndarray) and seed.ndim == 1:
            seed = seed.tolist()
        if isinstance(seed, (list, tuple)):
            if len(seed) != self.num_envs:
                raise ValueError(f"expected one seed per row, {self.num_envs} ({self.num_parallel_envs} envs x "
                                 f"{self.num_agents} agents), got a list of {len(seed)}")
            return list(seed[::self.num_agents])
        return seed

    def _rows_of(self, envs: np.ndarray) -> np.ndarray:
        """The row indices of the envs ``envs``, env by env."""
        return self._env_rows[envs].reshape(-1)

    def _remember_rows(self, rows: np.ndarray, envs: np.ndarray) -> None:
        """Note that ``rows`` are exactly the rows of ``envs`` (see ``_envs_by_rows``)."""
        key = rows.tobytes()
        if key in self._envs_by_rows:
            return
        if len(self._envs_by_rows) >= 1024:  # (recv hands out a few sets; this bounds odd uses)
            self._envs_by_rows.clear()
        envs = np.array(envs, np.int64)
        envs.flags.writeable = False  # (send hands it on: nothing may change it)
        self._envs_by_rows[key] = envs

    def _envs_of(self, rows: np.ndarray) -> np.ndarray:
        """The envs whose rows are exactly ``rows`` (every row of each, in agent order)."""
        if rows.dtype == np.int64 and rows.ndim == 1:
            known = self._envs_by_rows.get(rows.tobytes())
            if known is not None:
                return known
        if rows.ndim != 1 or rows.dtype.kind not in "iu" or len(rows) == 0:
            raise ValueError(f"env_ids must be a non-empty 1-D integer array of row indices, got {rows!r}")
        if rows.min() < 0 or rows.max() >= self.num_envs:
            raise ValueError(f"env_ids must be row indices in [0, {self.num_envs}), got {rows.tolist()}")
        envs = rows[::self.num_agents] // self.num_agents
        if len(rows) % self.num_agents or not np.array_equal(self._rows_of(envs), rows):
            raise ValueError(f"env_ids {rows.tolist()} are not whole envs' rows: each env's {self.num_agents} rows "
                             "(env i: rows i * num_agents to i * num_agents + num_agents - 1), in agent order, "
                             "as recv() hands them back in infos['env_id']")
        return envs

    def _rows(self, batch):
        """(envs, agents, ...) leaves as (envs * agents, ...)."""
        if isinstance(batch, dict):
            return {key: self._rows(value) for key, value in batch.items()}
        if isinstance(batch, tuple):
            return tuple(self._rows(value) for value in batch)
        return batch.reshape(batch.shape[0] * batch.shape[1], *batch.shape[2:])

    def _per_env(self, actions, rows: np.ndarray | None = None):
        """(rows, ...) actions, one per row of ``rows`` (default: every row), as (envs, agents, ...)."""
        if isinstance(actions, dict):
            return {key: self._per_env(value, rows) for key, value in actions.items()}
        if isinstance(actions, tuple):
            return tuple(self._per_env(value, rows) for value in actions)
        actions = np.asarray(actions)
        count = self.num_envs if rows is None else len(rows)
        if actions.shape[:1] != (count,):
            whole = f"{self.num_parallel_envs} envs x " if rows is None else f"{count // self.num_agents} envs x "
            raise ValueError(f"expected one action per row, {count} ({whole}{self.num_agents} agents), "
                             f"got an array of shape {actions.shape}")
        if self._action_limits is not None:
            limits, present = self._action_limits, self.agent_mask
            if rows is not None:
                limits, present = limits[rows], present[rows]
            invalid = (actions >= limits) & present
            if invalid.any():
                k = int(np.flatnonzero(invalid)[0])
                row = k if rows is None else int(rows[k])
                start = int(self.agent_action_space.start)
                raise ValueError(
                    f"row {row} (agent {self.possible_agents[row % self.num_agents]!r}, actions {start} to "
                    f"{self._action_limits[row] - 1}) was given action {actions[k]}, one of the padding of "
                    "the padded action space (pad_spaces=True): mask the actions with envs.action_mask"
                )
        return actions.reshape(count // self.num_agents, self.num_agents, *actions.shape[1:])

    def _agent_results(self, infos: dict, env_truncated: np.ndarray,
                       rows: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """The (envs, agents) rewards, terminations, truncations and agent mask of a step's
        infos, for the envs of ``rows`` (default: every row), whose :attr:`agent_mask` is still
        the one from before the step; ``env_truncated``: the vector env's flags. With
        SAME_STEP, an env that ended has come back reset, and its step's are in final_info. An
        env rebuilt after its step failed (``env_failure="restart"``: it comes back truncated)
        reports reward 0 and every agent that was present truncated (the others absent, as
        before); with NEXT_STEP or DISABLED its rows keep its last observation, and so its
        mask. (One rebuilt in a reset, its autoreset included, comes back as any reset does; one
        whose SAME_STEP reset failed after its step, with that step's results.)"""
        if "agent_rewards" in infos:
            rewards, terminated, truncated = infos["agent_rewards"], infos["agent_terminated"], infos["agent_truncated"]
            mask = infos["agent_mask"]
        else:  # (every env here was rebuilt after its step raised, NEXT_STEP or DISABLED: none reported)
            shape = (len(env_truncated), self.num_agents)
            rewards = np.zeros(shape)
            terminated, truncated, mask = np.zeros(shape, bool), np.zeros(shape, bool), np.zeros(shape, bool)
        ended = infos.get("_final_obs")
        if ended is not None and not ended.any():
            ended = None
        restarted = infos.get("_env_restarted")
        if restarted is not None:
            restarted = restarted & env_truncated  # (in a step, not a reset)
            reported = infos.get("final_info", {}).get("_agent_rewards")
            if reported is not None:  # (its step ended the episode, the reset after it failed)
                restarted = restarted & ~reported
            if not restarted.any():
                restarted = None
        if ended is None and restarted is None:
            return rewards, terminated, truncated, mask
        # (copies, written into below: the infos keep what the vector env built)
        rewards, terminated, truncated = rewards.copy(), terminated.copy(), truncated.copy()
        if ended is not None:
            ended_here = ended if restarted is None else ended & ~restarted  # (a rebuilt env's final_info has none)
            if ended_here.any():
                final = infos["final_info"]
                for key, out in (("agent_rewards", rewards), ("agent_terminated", terminated),
                                 ("agent_truncated", truncated)):
                    out[ended_here] = final[key][ended_here]
        if restarted is not None:
            # (present before the step: in the env after the last one, not gone on it)
            present = self.agent_mask & ~self._gone
            mask_before = present if rows is None else present[rows]
            before = mask_before.reshape(-1, self.num_agents)[restarted]
            rewards[restarted] = 0.0
            terminated[restarted] = ~before
            truncated[restarted] = before
            if self.autoreset_mode != AutoresetMode.SAME_STEP:
                mask = mask.copy()
                mask[restarted] = before
        return rewards, terminated, truncated, mask

    def _left(self, infos: dict, mask: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> np.ndarray:
        """By row: the agents that left on this step (present, terminated or truncated), in
        envs that go on (a SAME_STEP env that ended is back reset)."""
        left = mask & (terminated | truncated)
        ended = infos.get("_final_obs")
        if ended is not None and ended.any():
            left = left.copy()
            left[ended] = False
        return left.reshape(-1)

    def _row_infos(self, infos: dict, mask: np.ndarray, rows: np.ndarray | None = None,
                   truncated: np.ndarray | None = None) -> dict:
        """The infos of the envs of ``rows`` (default: every row) by row: ``mask`` (the
        (envs, agents) agent mask) and the per-agent arrays reshaped; ``final_obs`` split into
        its agents' rows, and ``final_info`` by row (SAME_STEP)."""
        count = self.num_envs if rows is None else len(rows)
        # (the infos' arrays are this call's own: agent_mask goes out as it is, and the
        # attribute keeps a copy)
        out: dict[str, Any] = {"agent_mask": mask.reshape(-1),
                               "_agent_mask": self._all_true[:count].copy()}
        if self.action_mask is not None:
            out["action_mask"] = self.action_mask.copy() if rows is None else self.action_mask[rows]
            out["_action_mask"] = self._all_true[:count].copy()
        ended = infos.get("_final_obs")
        if ended is not None and ended.any():
            final_obs = np.empty(count, dtype=object)
            for e in np.flatnonzero(ended).tolist():
                last = infos["final_obs"][e]
                for a in range(self.num_agents):
                    final_obs[e * self.num_agents + a] = row_of(last, a, self.single_observation_space)
            out["final_obs"] = final_obs
            out["_final_obs"] = np.repeat(ended, self.num_agents)
            out["final_info"] = self._final_row_infos(infos.get("final_info", {}), ended, truncated)
            out["_final_info"] = out["_final_obs"].copy()
        for key in ("env_restarted", "env_error"):
            if key in infos:
                out[key] = np.repeat(infos[key], self.num_agents)
                out[f"_{key}"] = np.repeat(infos[f"_{key}"], self.num_agents)
        if AGENT_INFOS in infos:
            self._add_agent_infos(out, infos[AGENT_INFOS], infos[AGENT_INFO_GIVEN])
        return out

    def _add_agent_infos(self, out: dict, values: dict, given: dict, rows_in: np.ndarray | None = None) -> None:
        """The ParallelEnvs' own per-agent infos into ``out`` by row: each key with its mask,
        True where that agent gave it (and, ``rows_in``, only in those rows). (A key that this
        vector env's own infos use, or one that starts with "_", came renamed ``agent_<key>``
        from the worker.)"""
        for key, batch in values.items():
            if isinstance(key, str) and key.startswith("_"):  # (the mask of the envs that gave the key)
                continue
            mask = np.asarray(given[key], bool) & np.asarray(values[f"_{key}"], bool)[:, None]
            batch = np.asarray(batch)
            out[key] = batch.reshape(batch.shape[0] * batch.shape[1], *batch.shape[2:])
            out[f"_{key}"] = mask.reshape(-1) if rows_in is None else mask.reshape(-1) & rows_in

    def _final_row_infos(self, final: dict, ended: np.ndarray, truncated: np.ndarray | None) -> dict:
        """SAME_STEP's ``final_info`` by row, for the envs ``ended``: each agent's presence
        on the step that ended its env (``agent_mask``), and the restart infos of an env
        rebuilt in it, each with its mask. (An env rebuilt after its step raised reported
        no step: its agents present were the ones reported ``truncated``.)"""
        out: dict[str, Any] = {}
        rows_ended = np.repeat(ended, self.num_agents)
        if "agent_mask" in final:
            out["agent_mask"] = np.asarray(final["agent_mask"], bool).reshape(-1) & rows_ended
            out["_agent_mask"] = rows_ended.copy()
        rebuilt = final.get("_env_restarted")
        if rebuilt is not None and truncated is not None:
            reported = final.get("_agent_rewards")
            rebuilt = np.asarray(rebuilt, bool) & ended & (True if reported is None else ~np.asarray(reported, bool))
            rebuilt_rows = np.repeat(rebuilt, self.num_agents)
            if rebuilt_rows.any():
                if "agent_mask" not in out:
                    out["agent_mask"], out["_agent_mask"] = np.zeros(len(rows_ended), bool), rows_ended.copy()
                out["agent_mask"][rebuilt_rows] = np.asarray(truncated, bool).reshape(-1)[rebuilt_rows]
        for key in ("env_restarted", "env_error"):
            if key in final:
                out[key] = np.repeat(final[key], self.num_agents)
                out[f"_{key}"] = np.repeat(final[f"_{key}"], self.num_agents)
        if AGENT_INFOS in final:
            self._add_agent_infos(out, final[AGENT_INFOS], final[AGENT_INFO_GIVEN], rows_ended)
        return out

    def __repr__(self) -> str:
        return f"MultiAgentVectorEnv({self.num_parallel_envs} envs x {self.num_agents} agents)"


class _RowsMaker:
    """``env_fn`` wrapped into an :class:`AgentRows` builder (picklable: a plain class)."""

    def __init__(self, env_fn: Callable[[], Any], pad_spaces: bool = False):
        self.env_fn = env_fn
        self.pad_spaces = pad_spaces

    def __call__(self) -> AgentRows:
        return AgentRows(self.env_fn, self.pad_spaces)

