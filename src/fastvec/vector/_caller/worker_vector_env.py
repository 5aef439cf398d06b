"""WorkerVectorEnv: the Gymnasium API that fastvec's vector envs over workers share.

FastVectorEnv runs its envs in worker processes, RayVectorEnv in Ray actors (shards); both
split the envs into contiguous ranges, one per worker, and talk to the workers by sending a
command and collecting the replies later. What follows from that alone lives here: the state
of the pending call, the checks AsyncVectorEnv makes (with its error messages), ``call`` /
``get_attr`` / ``set_attr`` / ``render`` over the commands, and which workers an ``env_ids`` of
``send`` covers.
"""
from __future__ import annotations

import multiprocessing
from enum import Enum
from typing import Any, Callable, TypeVar

import numpy as np
from gymnasium.vector import VectorEnv

from fastvec.errors import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError

__all__ = ["CallState", "WorkerVectorEnv"]


class CallState(Enum):
    """The call a vector env has sent and not yet collected; the value names it in messages."""

    DEFAULT = "default"
    WAITING_RESET = "reset"
    WAITING_STEP = "step"
    WAITING_CALL = "call"


_Self = TypeVar("_Self", bound="WorkerVectorEnv")

# Module aliases of the members read on every call (an enum member lookup costs far more than
# reading a module global).
_DEFAULT, _WAITING_CALL = CallState.DEFAULT, CallState.WAITING_CALL


class WorkerVectorEnv(VectorEnv):
    """A vector env whose envs run in workers, worker ``w`` stepping a contiguous range of them.

    The base of :class:`fastvec.FastVectorEnv` (worker processes) and
    :class:`fastvec.ray.RayVectorEnv` (Ray actors, its "shards"). It holds what they share:
    the pending-call state and its checks, with AsyncVectorEnv's errors and messages;
    :meth:`call`, :meth:`get_attr`, :meth:`set_attr`, :meth:`render` and the ``np_random``
    properties over two commands of the subclass; which workers the ``env_ids`` of
    ``send`` cover. It is not built on its own.

    Example:
        >>> import gymnasium as gym
        >>> from fastvec import FastVectorEnv
        >>> from fastvec.vector._caller.worker_vector_env import WorkerVectorEnv
        >>> envs = FastVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(4)], num_workers=2)
        >>> isinstance(envs, WorkerVectorEnv)
        True
        >>> envs.set_attr("gravity", [9.8, 9.8, 1.6, 1.6])
        >>> envs.get_attr("gravity")
        (9.8, 9.8, 1.6, 1.6)
        >>> envs.call_wait()
        Traceback (most recent call last):
        ...
        gymnasium.error.NoAsyncCallError: Calling `call_wait` without any prior call to `call_async`.
        >>> envs.close()

    Subclasses provide:

    - from their ``__init__``: ``num_envs``, then :meth:`_init_workers` once the workers'
      ranges are known; a ``closed`` attribute or property;
    - :meth:`_send_command` and :meth:`_wait_replies`, which send a command to every worker
      and collect the replies (the calls of this class go through them), and ``set_attr``
      (on :meth:`_values_per_env`, :meth:`_start_call` and :meth:`_finish_call`);
    - ``reset_async``/``reset_wait``, the step (``step``, ``step_async``/``step_wait``,
      ``send``/``recv``) and ``close_extras``: how those travel differs too much to share.

    ``_WORKER`` is what the workers are called in messages ("worker"; RayVectorEnv: "shard").
    """

    _WORKER = "worker"
    # Whether a call whose wait a KeyboardInterrupt ended stays pending, marked
    # ``_interrupted`` (its workers go on with it), to be finished by the next command
    # (:meth:`_finish_interrupted`); else that call is over as far as this class knows.
    _RESUMES_INTERRUPTED = False
    # The pending call (``_state``) was left by a wait that a KeyboardInterrupt ended, not by
    # a ``*_async`` of the user's: the next command finishes it instead of raising
    # AlreadyPendingCallError (which a call pending on purpose still raises).
    _interrupted = False

    def _init_workers(self, starts: list[int], stops: list[int]) -> None:
        """Set up the per-worker bookkeeping, no call pending.

        Args:
            starts: per worker, its first env.
            stops: per worker, one past its last env (``stops[w] == starts[w + 1]``).
        """
        self._starts, self._stops = starts, stops
        self._worker_of_env = np.repeat(np.arange(len(starts)), np.diff([0, *stops]))
        self._worker_of_env_list = self._worker_of_env.tolist()
        # Workers handed back by recv (all, before any send): what ``send()`` steps by default.
        self._ready = np.ones(len(starts), dtype=np.uint8)
        # Envs ended under autoreset_mode=DISABLED, until they are reset.
        self._autoreset_envs = np.zeros(self.num_envs, dtype=np.bool_)
        self._state = _DEFAULT

    # -- what subclasses provide ------------------------------------------------------------
    def _send_command(self, command: str, payload_of: Callable[[int], tuple]) -> None:
        """Send ``command`` to every worker, with ``payload_of(worker)`` as its arguments.

        Args:
            command: ``"call"`` (payload ``(name, args, kwargs)``), or one of the subclass's own
                that :meth:`_start_call` is given.
            payload_of: the arguments for a worker, by its index.
        """
        raise NotImplementedError

    def _wait_replies(self, timeout: float | None, caller: str) -> list[tuple[int, Any]]:
        """Wait for the replies to :meth:`_send_command`.

        Args:
            timeout: seconds to wait at most (None: no limit).
            caller: the public method waiting, for messages.

        Returns:
            ``(worker, reply)`` pairs in worker order; a reply is the worker's results, one per
            env, or None for a command without results.

        Raises:
            multiprocessing.TimeoutError: ``timeout`` passed; the call is still pending.
        """
        raise NotImplementedError

    def _finish_interrupted(self, caller: str, warn: bool | None = None) -> tuple[CallState, Any]:
        """Finish the pending call that a KeyboardInterrupt left (``_interrupted``) before
        ``caller`` sends a new command; returns (its state, its results). Only subclasses with
        ``_RESUMES_INTERRUPTED`` leave one."""
        raise NotImplementedError

    # -- call / attributes ------------------------------------------------------------------
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call ``name`` on every env (or read it, if not callable); results in env order."""
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Start :meth:`call` without waiting for it (AsyncVectorEnv API)."""
        self._start_call("call", lambda w: (name, args, kwargs))

    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """Wait for the results of :meth:`call_async`, in env order.

        Raises:
            NoAsyncCallError: no :meth:`call_async` is pending.
            multiprocessing.TimeoutError: ``timeout`` seconds passed; the call is still pending.
        """
        self._assert_pending(_WAITING_CALL, "call_wait")
        return self._finish_call(timeout, "call_wait")

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Get an attribute from every env, in env order."""
        return self.call(name)

    def render(self) -> tuple[Any, ...] | None:
        """Render every env (``render_mode`` set at construction); one frame per env."""
        return self.call("render")

    @property
    def np_random_seed(self) -> tuple[int, ...]:
        """The envs' ``np_random_seed``, in env order."""
        return self.get_attr("np_random_seed")

    @property
    def np_random(self) -> tuple[np.random.Generator, ...]:
        """Copies of the envs' ``np_random`` generators, in env order."""
        return self.get_attr("np_random")

    def _values_per_env(self, values: list[Any] | tuple[Any, ...] | Any) -> list[Any] | tuple[Any, ...]:
        """``set_attr``'s values, one per env: ``values`` itself, or one value ``num_envs`` times.

        Raises:
            ClosedEnvironmentError: the vector env is closed.
            ValueError: a list or tuple whose length is not ``num_envs``.
        """
        self._assert_is_running()
        if not isinstance(values, (list, tuple)):
            values = [values for _ in range(self.num_envs)]
        if len(values) != self.num_envs:
            raise ValueError(
                "Values must be a list or tuple with length equal to the number of environments. "
                f"Got `{len(values)}` values for {self.num_envs} environments."
            )
        return values

    def _start_call(self, command: str, payload_of: Callable[[int], tuple], caller: str = "call_async") -> None:
        """Check that no call is pending (``caller`` names the method in the error), then send
        ``command`` (see :meth:`_send_command`); the vector env waits on a call from then on."""
        self._assert_is_running()
        if self._interrupted:
            self._finish_interrupted(caller)
        self._assert_no_pending_call(caller)
        self._send_command(command, payload_of)
        self._state = _WAITING_CALL

    def _finish_call(self, timeout: float | None, caller: str) -> tuple[Any, ...] | None:
        """Collect the call :meth:`_start_call` sent: the results in env order, or None when no
        worker returned any. A timeout leaves the call pending, and so does a KeyboardInterrupt
        with ``_RESUMES_INTERRUPTED`` (marked interrupted); any other error ends it."""
        try:
            replies = self._wait_replies(timeout, caller)
        except multiprocessing.TimeoutError:
            raise
        except KeyboardInterrupt:
            if self._RESUMES_INTERRUPTED:
                self._interrupted = True
            else:
                self._state = _DEFAULT
            raise
        except BaseException:
            self._state = _DEFAULT
            self._interrupted = False
            raise
        self._state = _DEFAULT
        self._interrupted = False
        if all(reply is None for _, reply in replies):
            return None
        return tuple(result for _, results in replies for result in results)

    # -- checks --------------------------------------------------------------------------------
    def _assert_is_running(self) -> None:
        if self.closed:
            raise ClosedEnvironmentError(f"Trying to operate on `{type(self).__name__}`, after a call to `close()`.")

    def _assert_no_pending_call(self, what: str, period: bool = True) -> None:
        """Raise AlreadyPendingCallError if a call is pending (AsyncVectorEnv's message for
        ``what``: without the final period for ``reset_async`` only)."""
        if self._state is not _DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `{what}` while waiting for a pending call to `{self._state.value}` to complete"
                + ("." if period else ""),
                str(self._state.value),
            )

    def _assert_pending(self, expected: CallState, caller: str) -> None:
        """Check that the vector env runs and waits on ``expected`` (for ``caller``, a ``*_wait``)."""
        if self.closed or self._state is not expected:
            self._assert_is_running()
            raise NoAsyncCallError(f"Calling `{caller}` without any prior call to `{expected.value}_async`.",
                                   expected.value)

    def _whole_workers(self, env_ids) -> tuple[list[int], slice | np.ndarray]:
        """The workers the envs ``env_ids`` of ``send`` are, and their rows.

        Args:
            env_ids: env indices, all the envs of one or more workers (in any order); None: every
                env of the workers handed back by ``recv`` since they were last sent actions
                (all after a reset).

        Returns:
            The workers, ascending, and the rows: a slice when the ids are ascending and adjacent
            (what ``recv`` hands back for adjacent workers: the cheap case, checked first), else
            ``env_ids`` as an array.

        Raises:
            ValueError: ``env_ids`` is not a non-empty 1-D integer array of distinct env indices,
                or it holds only some of a worker's envs.
        """
        if env_ids is None:
            workers = np.flatnonzero(self._ready)
            env_ids = self._env_ids_of(workers) if len(workers) else np.zeros(0, np.int64)
        env_ids = np.asarray(env_ids)
        if env_ids.ndim != 1 or env_ids.dtype.kind not in "iu" or len(env_ids) == 0:
            raise ValueError(f"env_ids must be a non-empty 1-D integer array, got {env_ids!r}")
        ids = env_ids.tolist()
        first, last = ids[0], ids[-1]
        if 0 <= first <= last < self.num_envs and last - first + 1 == len(ids):
            w0, w1 = self._worker_of_env_list[first], self._worker_of_env_list[last]
            if self._starts[w0] == first and self._stops[w1] == last + 1 and ids == list(range(first, last + 1)):
                return list(range(w0, w1 + 1)), slice(first, last + 1)
        if min(ids) < 0 or max(ids) >= self.num_envs or len(set(ids)) != len(ids):
            raise ValueError(f"env_ids must be distinct env indices in [0, {self.num_envs}), got {ids}")
        workers = np.unique(self._worker_of_env[env_ids]).tolist()
        if sum(self._stops[w] - self._starts[w] for w in workers) != len(ids):
            noun = self._WORKER
            raise ValueError(
                f"env_ids {ids} split {noun}s: send whole {noun}s' envs "
                f"({noun} ranges {[(self._starts[w], self._stops[w] - 1) for w in workers]})"
            )
        return workers, env_ids

    def _received_envs(self, got: list[int]) -> tuple[np.ndarray, slice | np.ndarray]:
        """The envs of the workers ``got`` (in the order ``recv`` hands them back) and their rows.

        Returns:
            The env ids, and the rows: a slice when the workers are adjacent and ascending (the
            cheap case), else the ids.
        """
        first, last = got[0], got[-1]
        if got == list(range(first, last + 1)):
            return np.arange(self._starts[first], self._stops[last]), slice(self._starts[first], self._stops[last])
        env_ids = self._env_ids_of(got)
        return env_ids, env_ids

    def _env_ids_of(self, workers) -> np.ndarray:
        """The ids of the envs of ``workers`` (at least one), worker by worker in their order."""
        return np.concatenate([np.arange(self._starts[w], self._stops[w]) for w in workers])

    @staticmethod
    def _step_rows(rows: slice | np.ndarray, rewards: np.ndarray, terminations: np.ndarray,
                   truncations: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``rows`` of the rewards and flags, as arrays the caller owns: a slice is a view of
        buffers the next step overwrites, so it is copied; indexing by ids copies already."""
        if isinstance(rows, slice):
            return rewards[rows].copy(), terminations[rows].copy(), truncations[rows].copy()
        return rewards[rows], terminations[rows], truncations[rows]

    # -- the rest of the API --------------------------------------------------------------------
    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        """Reset the envs (all, or those in ``options["reset_mask"]``; env i gets ``seed + i``);
        returns (obs, infos)."""
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
