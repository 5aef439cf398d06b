"""Caller side: a FastVectorEnv's faults, as its worker pool handles them: a worker that
ended, an env's exception, a step over its ``step_timeout``, the caller's own share failing;
and with ``env_failure="restart"``, a failed worker replaced by a new process while the
budget lasts.

:class:`PoolFaults` is the part of :class:`~fastvec.vector._caller.pool.WorkerPool` that holds
these decisions (WorkerPool inherits it; the attributes it reads are the pool's: ``workers``,
``ctrl``, ``restarts``, ``_in_step``, ``_resets_out``, ...). What the caller sees of a fault is
:mod:`fastvec.vector._caller.worker_faults`'s.
"""
from __future__ import annotations

import numpy as np
from gymnasium import logger
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import clear_mpi_env_vars

from fastvec.errors import annotate
from fastvec.vector._block import handoff, protocol
from fastvec.vector._block.messages import ErrorReport, PipeCommand
from fastvec.vector._block.protocol import LIVENESS_INTERVAL, Word
from fastvec.vector._block.protocol import STATUS_INFOS as _INFOS
from fastvec.vector._block.protocol import STATUS_OK as _OK
from fastvec.vector._caller.remote_worker import RemoteWorker, end_workers
from fastvec.vector._caller.worker_faults import in_caller, log_failed_workers, remote_exception, worker_died
from fastvec.vector._worker.process import REBUILD_PHASE

__all__ = ["PoolFaults"]


class PoolFaults:
    """When a worker's fault is raised, and how a failed worker is replaced (mixed into
    :class:`~fastvec.vector._caller.pool.WorkerPool`)."""

    def fail_local(self, exc: BaseException, phase: str) -> None:
        """Re-raise ``exc``, raised by the caller's own share during ``phase``, naming its env,
        after closing the pool (what a worker's fatal error does)."""
        env_index = self.local.current_env
        self.shutdown(terminate=True)
        raise in_caller(exc, env_index, phase, closed=True)

    def check_alive(self, w: int, wait: float = 0.0, restart: bool = True) -> None:
        """Raise WorkerDiedError (closing the pool) if worker ``w``'s process has ended (with
        ``env_failure="restart"``, during a step or a reset, start it again instead; with
        ``restart=False`` raise then without closing the pool, for the caller to restart it)."""
        worker = self.workers[w]
        if not isinstance(worker, RemoteWorker):  # (the caller's own share)
            return
        code = worker.exitcode(wait)
        if code is None:
            return
        if self.restarts is not None and (self._in_step or w in self._resets_out):
            died = worker_died(w, self.env_range(w), code, closed=False)
            if not restart:
                raise died
            if self._restartable():
                if w in self._resets_out:
                    self._restart_worker_in_reset(w, str(died))
                else:
                    self.restart_worker(w, str(died), "")
                return
        self.shutdown(terminate=True)
        raise worker_died(w, self.env_range(w), code)

    def _raise_remote_errors(self, errors: list) -> list[int]:
        """Log each failed worker's error as AsyncVectorEnv does, then re-raise the last one
        (closing the pool). With ``env_failure="restart"``, a step's failed workers are
        started again instead, while the budget lasts: returns them."""
        if self._in_step and self.restarts is not None:
            for k, (w, report) in enumerate(errors):
                if report.phase == REBUILD_PHASE or not self._restartable():
                    errors = errors[k:]
                    break
                self.restart_worker(w, f"{report.type_name}: {report.text} (env {report.env_index})", report.trace)
            else:
                return [w for w, _ in errors]
        log_failed_workers(errors, self.starts)
        self.raise_remote(*errors[-1])

    def _step_timed_out(self, w: int) -> None:
        """Worker ``w`` has been in its step longer than ``step_timeout``: it counts as failed.
        With ``env_failure="restart"`` (and budget left) it is killed and started again;
        otherwise the pool closes (the worker killed) and ``TimeoutError`` names the env."""
        env = int(self.ctrl[w, Word.CURRENT_ENV]) - 1
        where = f"env {env} (worker {w})" if env >= 0 else f"worker {w} (envs {self.env_range(w)})"
        error = f"{where} took longer than step_timeout={self.step_timeout} s in a step"
        if self._restartable():
            self.restart_worker(w, f"TimeoutError: {error}", "")
            return
        self.shutdown(terminate=True)
        exc = TimeoutError(f"{error}; the worker is killed and the vector env is closed.")
        annotate(exc, env if env >= 0 else None, f"raised by FastVectorEnv: step_timeout={self.step_timeout} s")
        raise exc

    # -- restarts (env_failure="restart") ----------------------------------------------------
    def _restartable(self) -> bool:
        """Whether a worker failing now is started again: a step or a reset is out, the vector env
        restarts failed workers, and its budget is not spent (else the failure raises, and
        says how many restarts came before)."""
        restarts = self.restarts
        if restarts is None or not (self._in_step or self._resets_out):
            return False
        if handoff.take_restart(self.ctrl):
            return True
        logger.error(f"FastVectorEnv: max_restarts={self.max_restarts} restarts spent "
                     f"(restarts per env: {restarts.counts.tolist()}); this failure ends the vector env.")
        return False

    def _restart_state(self, w: int, rebuilt: bool):
        """What worker ``w``'s process is told of its envs' seeds and restarts (None: failures raise)."""
        if self.restarts is None:
            return None
        return self.restarts.state_for(self.starts[w], self.stops[w], rebuilt)

    def restart_worker(self, w: int, error: str, trace: str) -> None:
        """Replace worker ``w``, which failed the step out: end its process, start a new
        one that builds its envs again and maps the block, and leave in the block what the
        step reports for each of its envs (truncated, reward 0; the caller's
        :class:`~fastvec.vector._block.restarts.Restarts` adds the last observations and infos).
        With SAME_STEP autoreset the rebuilt envs are reset at once (with their derived
        seeds), and their first observations and reset infos are what the step returns for
        them (a pipe reply is kept in the worker's ``received`` for :meth:`read_statuses`).
        Raises, closing the pool, if the new process fails to start (a constructor that now
        fails would fail again) or that reset fails."""
        envs = list(range(self.starts[w], self.stops[w]))
        self._in_step = False  # (a failure from here on is the new worker's start: it raises)
        new = self._replace_process(w, envs, error, trace, in_reset=False)
        block = self._buffers[0]
        rows = slice(self.starts[w], self.stops[w])
        if self._autoreset_mode is AutoresetMode.SAME_STEP:
            new.dispatch(PipeCommand.RESET, ([None] * len(envs), None, None))  # (None: each env's derived seed)
            only_w = np.zeros(self.num_workers, dtype=np.uint8)
            only_w[w] = 1
            while handoff.wait_all_done(self.ctrl, only_w, self.waits.parent_spin_s, LIVENESS_INTERVAL, 0.0) >= 0:
                self.check_alive(w)
            if handoff.status(self.ctrl, w) not in (_OK, _INFOS):
                reply = self.recv(w)
                if isinstance(reply, ErrorReport):
                    self.raise_remote(w, reply)
                new.received = reply
        else:
            block["info_ids"][rows] = 0
        self._in_step = True
        block["rewards"][rows] = 0.0
        block["terminations"][rows] = False
        block["truncations"][rows] = True

    def _restart_worker_in_reset(self, w: int, error: str) -> None:
        """Replace worker ``w``, whose process ended during a reset (see :meth:`restart_worker`),
        and send the new one that reset again: all its envs, each with the seed drawn from the
        one the reset gave it (the caller's :class:`~fastvec.vector._block.restarts.Restarts` marks
        them in the reset's infos). The wait for the reset goes on with the new process."""
        envs = list(range(self.starts[w], self.stops[w]))
        _, options, _ = self._resets_out.pop(w)
        new = self._replace_process(w, envs, error, "", in_reset=True)
        again = ([None] * len(envs), options, None)  # (None: each env's derived seed)
        new.dispatch(PipeCommand.RESET, again)
        self._resets_out[w] = again

    def _replace_process(self, w: int, envs: list[int], error: str, trace: str, in_reset: bool) -> RemoteWorker:
        """Record the failure of worker ``w`` (envs ``envs``; ``in_reset``: during a reset), end
        its process and start a new one that builds the envs again (their next resets seeded
        from their derived seeds) and maps the shared block. Raises, closing the pool, if the
        new process fails to start."""
        old = self.workers[w]
        self.restarts.record(envs, error, trace, worker=w, in_reset=in_reset)
        old.forget()
        end_workers([old], [], [], timeout=0.0)
        self.ctrl[w, :] = 0  # (no command out: the row as a new worker expects it)
        ctx, daemon, worker_waits, cpus, follow_caller = self._process_args
        with clear_mpi_env_vars():
            new = RemoteWorker(ctx, w, self.starts[w], self._env_fns[self.starts[w]:self.stops[w]], daemon=daemon,
                               autoreset_mode=self._autoreset_mode, waits=worker_waits, cpu=cpus[w],
                               follow_caller=follow_caller, restart=self._restart_state(w, rebuilt=True))
        self._remote[self._remote.index(old)] = new
        self.workers[w] = new
        resets_out, self._resets_out = self._resets_out, {}  # (a failure to start raises)
        for message in (None, self._attach_message):
            if message is not None:
                protocol.send(new.pipe, message)
                self._buffers[0].send(new.pipe, new.pid)
            reply = self.recv(w)
            if isinstance(reply, ErrorReport):
                self.raise_remote(w, reply)
        self._resets_out = resets_out
        new.ctrl, new.stats = self.ctrl, self.stats
        return new

    def raise_remote(self, w: int, report: tuple, close: bool = True) -> None:
        """Re-raise a worker's exception in the caller (closing the pool first, unless ``close=False``)."""
        if close:
            self.shutdown(terminate=True)
        exc, cause = remote_exception(w, report, self.env_range(w), close)
        raise exc from cause
