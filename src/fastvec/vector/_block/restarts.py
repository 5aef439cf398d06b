"""Both sides: the bookkeeping of ``FastVectorEnv(env_failure="restart")``.

An env that raises in a step is built again by its worker (``Worker.rebuild_env``); a
worker whose process ends is replaced by :class:`~fastvec.vector._caller.pool.WorkerPool`. The
budget both draw on is one shared word (``RESTARTS_LEFT``). This module holds the rest: the
seed a rebuilt env is reset with (:func:`derived_seed`, both sides), what a worker process is
told of its envs' seeds and restarts (:class:`RestartState`), and, in the caller, the count
per env, the log, and what the step that saw a worker's process end reports for its envs
(:class:`Restarts`).
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np

from fastvec.vector._block.batch_tree import put_rows, row_of
from fastvec.vector._infos.codec import InfoBatch

__all__ = ["Restarts", "RestartState", "derived_seed"]

logger = logging.getLogger("fastvec.vector")


def derived_seed(seed: int | None, restarts: int) -> int | None:
    """The seed a rebuilt env's first reset uses: drawn from its last seed (the one its last
    seeded reset was given) and its restart count, so that a rerun fails and recovers the
    same way; None for an env that was never seeded.

    Example:
        >>> derived_seed(7, 1) == derived_seed(7, 1) != derived_seed(7, 2)
        True
        >>> derived_seed(None, 1) is None
        True
    """
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed), int(restarts)]).generate_state(1)[0])


class RestartState:
    """What a worker process is told of its envs: their last seeds and restart counts, and
    whether it replaces a worker that failed (its envs' next resets then use their derived
    seeds)."""

    def __init__(self, seeds: list, counts: list, rebuilt: bool):
        self.seeds = list(seeds)
        self.counts = list(counts)
        self.rebuilt = rebuilt


class Restarts:
    """The caller's side of the restarts of one vector env of ``num_envs`` envs.

    Example:
        >>> restarts = Restarts(4)
        >>> restarts.remember_seeds([10, 11, None, 13])
        >>> restarts.record([2, 3], "ValueError: boom", "Traceback ...")
        >>> restarts.counts.tolist(), restarts.total
        ([0, 0, 1, 1], 1)
        >>> state = restarts.state_for(2, 4, rebuilt=True)
        >>> state.seeds, state.counts
        ([None, 13], [1, 1])
    """

    def __init__(self, num_envs: int, owner: str = "FastVectorEnv", part: str = "worker"):
        self.num_envs = num_envs
        self.owner = owner  # (the vector env the log names, and what of it is restarted)
        self.part = part
        #: how many times each env was built again
        self.counts = np.zeros(num_envs, dtype=np.int64)
        self.total = 0  # failures recovered from
        #: each env's seed from its last seeded reset (None: never seeded)
        self.seeds: list[int | None] = [None] * num_envs
        #: (env indices, error text, whether during a reset) of the worker restarts the
        #: results to come report
        self.unreported: list[tuple[list[int], str, bool]] = []
        #: the statistics region the restarts are also counted in (FastVectorEnv(stats=True))
        self.stats = None

    def remember_seeds(self, seeds: list) -> None:
        """The seeds of a reset, one per env (None: that env was not seeded)."""
        for k, seed in enumerate(seeds):
            if seed is not None:
                self.seeds[k] = int(seed)

    def state_for(self, first: int, stop: int, rebuilt: bool) -> RestartState:
        """What the worker process of envs ``[first, stop)`` is told (see :class:`RestartState`)."""
        return RestartState(self.seeds[first:stop], self.counts[first:stop].tolist(), rebuilt)

    def record(self, envs: list[int], error: str, trace: str, worker: int | None = None,
               in_reset: bool = False) -> None:
        """The worker process of ``envs`` (worker ``worker``) failed with ``error`` (``trace``:
        its traceback, if it sent one) during a step (or, ``in_reset``, a reset, which its
        new process then does again) and is started again with them."""
        self.total += 1
        self.counts[envs] += 1
        if self.stats is not None:
            self.stats.count_restart(envs, worker)
        self.unreported.append((list(envs), error, in_reset))
        logger.warning("%s restarts the %s of envs %s after: %s\n%s", self.owner, self.part, envs, error, trace)

    def learn(self, infos: dict, env_of_row: Any = None) -> None:
        """Count the envs a worker rebuilt during a step, from the step's ``infos``
        (``env_of_row``: the env index of each output row; default: the same)."""
        flags = infos.get("env_restarted")
        if flags is None:
            return
        for row in np.flatnonzero(flags).tolist():
            env = row if env_of_row is None else int(env_of_row[row])
            self.total += 1
            self.counts[env] += 1
            if self.stats is not None:
                self.stats.count_restart([env])
            logger.warning("%s: env %d was rebuilt after: %s", self.owner, env, infos["env_error"][row])

    def report(self, obs: Any, last_obs: Any, infos: dict, num_rows: int, rows_of: dict | None = None,
               same_step: bool = False, space: Any = None) -> tuple[Any, dict]:
        """Mark the worker restarts since the last results in one step's results: the
        rebuilt envs' rows of ``obs`` become their observations before the failure (from
        ``last_obs``), and ``infos`` gains (or adds these rows to) ``env_restarted`` (bool)
        and ``env_error`` (the error's text), each with its mask, as an env's own
        ``{"env_restarted": True, "env_error": text}`` info would. With ``same_step``
        (SAME_STEP autoreset) the rows keep the rebuilt envs' first observations, and the
        last ones go to ``final_obs``, the restart infos to ``final_info`` too. Envs whose
        worker failed during a reset keep the observations of the reset done again, and
        gain the restart infos only. ``num_rows``: the rows of the results; ``rows_of``:
        env index -> output row (default: the same), the envs not in it stay unreported for
        the results that bring them; ``space``: one env's observation space. Returns the
        observations and the infos."""
        found, kept = [], []
        for failed, error, in_reset in self.unreported:
            for env in failed:
                row = env if rows_of is None else rows_of.get(env)
                if row is None:
                    kept.append(([env], error, in_reset))
                else:
                    found.append((row, env, error, in_reset))
        self.unreported = kept
        if not found:
            return obs, infos
        batch = InfoBatch(num_rows)
        stepped_rows, stepped_envs = [], []
        for row, env, error, in_reset in found:
            # (the dicts a worker's own rebuild of the env adds, see Worker.rebuild_env)
            restarted = {"env_restarted": True, "env_error": error}
            if same_step and not in_reset:
                final_obs = None if last_obs is None else row_of(last_obs, env, space)
                infos = batch._add_info(infos, {"final_obs": final_obs, "final_info": restarted}, row)
            infos = batch._add_info(infos, restarted, row)
            if not in_reset:
                stepped_rows.append(row)
                stepped_envs.append(env)
        if not same_step and last_obs is not None and stepped_rows:
            obs = put_rows(obs, stepped_rows, last_obs, stepped_envs, space)
        return obs, infos
