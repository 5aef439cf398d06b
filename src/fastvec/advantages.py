"""Advantage estimation over step-major ``[T, N]`` rollout buffers: GAE and V-trace.

Every function takes the buffers the way CleanRL and Stable-Baselines3 store
them: row ``t`` is one step of a vector env with ``N`` sub-envs, so ``rewards``,
``values`` and the done flags are ``[T, N]`` arrays and the bootstrap values of
the observation after the last step are ``[N]`` arrays. The work is done by a
Cython kernel (``fastvec._gae``) that walks the rows backwards and runs
across the ``N`` envs of a row with SIMD, reading each input once and writing
each output once.

Inputs
    * NumPy arrays or CPU ``torch`` tensors (read in place through
      ``np.asarray``, never copied). Without ``out=``, torch inputs give torch
      outputs (``torch.from_numpy`` views of the new arrays), NumPy inputs give
      NumPy outputs. A tensor that requires grad must be ``.detach()``-ed first.
    * Float data (rewards, values, ...) as float32 or float64; the kernel runs
      in that precision. Mixed float dtypes, integers, non-contiguous,
      misaligned or byte-swapped arrays work, through one conversion copy of
      the offending input (the fast path is: C-contiguous arrays of one float
      dtype). Mixed floats run in float64, float32 with integers in float32.
    * Done flags (0 or 1) as bool, uint8, float32 or float64, read in their own
      dtype (no conversion copy); other integer dtypes are converted.
    * ``next_value`` / ``next_done`` are ``[N]``; ``[1, N]`` and ``[N, 1]`` are
      accepted as well.
    * ``out=(a, b)``: preallocated C-contiguous outputs of the float dtype
      (NumPy arrays or CPU tensors), returned as given; they must not share
      memory with the inputs. Without it the two outputs are new arrays.
    * ``num_threads``: ``1`` (the default) runs on the calling thread; ``k > 1``
      splits the envs over ``k`` OpenMP threads (worth it only for large
      buffers on a machine with idle cores); ``None`` picks a count from the
      size (one thread below ~1M elements per thread).

Conventions (see each function for the formula)
    * :func:`gae`: CleanRL's ``dones[t]`` = "observation ``t`` starts a new
      episode", with ``next_value`` / ``next_done`` for the observation after
      the buffer.
    * :func:`gae_sb3`: SB3's ``RolloutBuffer`` names (``episode_starts``,
      ``last_values``, ``dones``); the same recurrence, with SB3's argument
      names and shapes (``last_values`` may be ``[N, 1]``).
    * :func:`gae_terminated_truncated`: Gymnasium's separate ``terminated`` /
      ``truncated`` flags of each step, optionally with ``next_values`` so a
      truncated step bootstraps from the value of its final observation.
    * :func:`vtrace`: IMPALA's V-trace targets and policy-gradient advantages.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

from fastvec._gae import gae_next_done as _gae_next_done
from fastvec._gae import gae_terminated_truncated as _gae_tt
from fastvec._gae import vtrace as _vtrace

__all__ = ["gae", "gae_sb3", "gae_terminated_truncated", "vtrace"]

ArrayLike = Any  # a NumPy array or a CPU torch tensor
Pair = Tuple[Any, Any]


def gae(rewards: ArrayLike, values: ArrayLike, dones: ArrayLike, next_value: ArrayLike,
        next_done: ArrayLike, *, gamma: float, gae_lambda: float, out: Optional[Pair] = None,
        num_threads: Optional[int] = 1) -> Pair:
    """Generalized Advantage Estimation, CleanRL convention.

    ``dones[t, i]`` says that observation ``t`` of env ``i`` is the first of a
    new episode (it is the ``next_done`` that came with that observation), and
    ``next_value`` / ``next_done`` ``[N]`` describe the observation after step
    ``T - 1``. With ``V[T] = next_value`` and ``D[T] = next_done``::

        delta[t] = rewards[t] + gamma * V[t + 1] * (1 - D[t + 1]) - values[t]
        adv[t]   = delta[t] + gamma * gae_lambda * (1 - D[t + 1]) * adv[t + 1]   (adv[T] = 0)
        returns  = adv + values

    the exact loop of CleanRL's ``ppo.py`` (same operation order, so float32
    results match its torch loop).

    Args:
        rewards, values, dones: ``[T, N]``.
        next_value, next_done: ``[N]`` (``[1, N]`` and ``[N, 1]`` are accepted too, so
            CleanRL's ``next_value.reshape(1, -1)`` can be passed as it is).
        gamma, gae_lambda: discount and GAE lambda.
        out: optional ``(advantages, returns)`` ``[T, N]`` arrays to write into.
        num_threads: see the module docstring (default 1).

    Returns:
        ``(advantages, returns)``, ``[T, N]`` each, of the float dtype of the inputs.

    Example:
        >>> import numpy as np, fastvec
        >>> rewards = np.ones((4, 2), np.float32)
        >>> values = np.zeros((4, 2), np.float32)
        >>> dones = np.zeros((4, 2), np.float32)
        >>> dones[2, 0] = 1  # env 0: observation 2 starts a new episode
        >>> adv, ret = fastvec.gae(rewards, values, dones, np.zeros(2, np.float32),
        ...                        np.zeros(2, np.float32), gamma=0.5, gae_lambda=1.0)
        >>> adv[:, 0]
        array([1.5, 1. , 1.5, 1. ], dtype=float32)
    """
    return _gae_next_done(rewards, values, dones, next_value, next_done, gamma, gae_lambda,
                          out, num_threads)


def gae_sb3(rewards: ArrayLike, values: ArrayLike, episode_starts: ArrayLike,
            last_values: ArrayLike, dones: ArrayLike, *, gamma: float, gae_lambda: float,
            out: Optional[Pair] = None, num_threads: Optional[int] = 1) -> Pair:
    """GAE with Stable-Baselines3's ``RolloutBuffer`` conventions and names.

    Computes what ``RolloutBuffer.compute_returns_and_advantage(last_values,
    dones)`` computes: ``episode_starts[t]`` (``[T, N]``) marks observation
    ``t`` as the first of an episode, ``last_values`` is the value of the
    observation after the buffer (``[N]`` or SB3's ``[N, 1]``) and ``dones``
    (``[N]``) says whether that observation starts a new episode (the dones
    returned by the last ``env.step``). This is :func:`gae` under SB3's names.
    SB3 handles truncation by adding ``gamma * V(final obs)`` to the reward
    while collecting, so nothing else is needed here.

    Example (writing straight into an SB3 buffer's arrays):
        >>> import numpy as np, fastvec
        >>> T, N = 3, 2
        >>> rewards = np.ones((T, N), np.float32)
        >>> values = np.zeros((T, N), np.float32)
        >>> episode_starts = np.zeros((T, N), np.float32)
        >>> advantages = np.empty((T, N), np.float32)
        >>> returns = np.empty((T, N), np.float32)
        >>> _ = fastvec.gae_sb3(rewards, values, episode_starts, np.zeros((N, 1), np.float32),
        ...                     np.array([True, False]), gamma=0.9, gae_lambda=1.0,
        ...                     out=(advantages, returns))
        >>> returns[:, 0]
        array([2.71, 1.9 , 1.  ], dtype=float32)

    With an actual buffer: ``fastvec.gae_sb3(buf.rewards, buf.values,
    buf.episode_starts, last_values, dones, gamma=buf.gamma,
    gae_lambda=buf.gae_lambda, out=(buf.advantages, buf.returns))``.
    """
    return _gae_next_done(rewards, values, episode_starts, last_values, dones, gamma, gae_lambda,
                          out, num_threads)


def gae_terminated_truncated(rewards: ArrayLike, values: ArrayLike, terminated: ArrayLike,
                             truncated: ArrayLike, next_value: ArrayLike, *, gamma: float,
                             gae_lambda: float, next_values: Optional[ArrayLike] = None,
                             out: Optional[Pair] = None,
                             num_threads: Optional[int] = 1) -> Pair:
    """GAE from Gymnasium's separate ``terminated`` / ``truncated`` flags of each step.

    Row ``t`` holds the transition ``(obs[t], action[t]) -> rewards[t],
    terminated[t], truncated[t]``; ``values[t] = V(obs[t])``; ``next_value``
    ``[N]`` is the value of the observation after step ``T - 1``. A terminated
    step does not bootstrap; a truncated step ends the GAE trace but, when
    ``next_values`` ``[T, N]`` is given, bootstraps from ``next_values[t]``, the
    value of that step's *final* observation (``infos["final_obs"]`` in
    SAME_STEP autoreset mode). Entries of ``next_values`` at steps that are not
    truncated are not read (so it may be sparse or a full ``V(obs[t + 1])``
    array). With ``V'[t] = next_values[t]`` if truncated else ``values[t + 1]``
    (``next_value`` for ``t = T - 1``)::

        delta[t] = rewards[t] + gamma * V'[t] * (1 - terminated[t]) - values[t]
        adv[t]   = delta[t] + gamma * gae_lambda * (1 - terminated[t]) * (1 - truncated[t]) * adv[t + 1]
        returns  = adv + values

    Without ``next_values`` a truncated step is treated as terminal (no
    bootstrap), which is what CleanRL's ``next_done = terminated | truncated``
    amounts to. In NEXT_STEP autoreset mode (Gymnasium's default) the row after
    a done step is the reset step, so ``values[t + 1]`` already is the final
    observation's value: pass ``next_values=np.concatenate([values[1:],
    next_value[None]])`` and mask the reset steps out of the loss.

    Example:
        >>> import numpy as np, fastvec
        >>> rewards = np.ones((3, 1), np.float32)
        >>> values = np.zeros((3, 1), np.float32)
        >>> terminated = np.zeros((3, 1), bool)
        >>> truncated = np.array([[False], [True], [False]])  # step 1 hits the time limit
        >>> final_values = np.zeros((3, 1), np.float32)
        >>> final_values[1] = 10.0  # V(final obs of step 1)
        >>> adv, ret = fastvec.gae_terminated_truncated(
        ...     rewards, values, terminated, truncated, np.zeros(1, np.float32),
        ...     gamma=0.5, gae_lambda=1.0, next_values=final_values)
        >>> adv[:, 0]
        array([4., 6., 1.], dtype=float32)
    """
    return _gae_tt(rewards, values, terminated, truncated, next_value, next_values, gamma,
                   gae_lambda, out, num_threads)


def vtrace(rewards: ArrayLike, values: ArrayLike, dones: ArrayLike, next_value: ArrayLike,
           next_done: ArrayLike, *, gamma: float, log_rhos: Optional[ArrayLike] = None,
           rhos: Optional[ArrayLike] = None, rho_bar: float = 1.0, c_bar: float = 1.0,
           pg_rho_bar: Optional[float] = None, lambda_: float = 1.0,
           out: Optional[Pair] = None, num_threads: Optional[int] = 1) -> Pair:
    """V-trace targets and policy-gradient advantages (IMPALA, Espeholt et al. 2018).

    Same buffer convention as :func:`gae` (``dones[t]``: observation ``t``
    starts a new episode; ``next_value`` / ``next_done`` after the buffer).
    Give the importance ratios ``pi(a|x) / mu(a|x)`` as ``log_rhos`` or
    ``rhos`` (``[T, N]``). With ``disc[t] = gamma * (1 - D[t + 1])``,
    ``rho = min(rho_bar, ratio)``, ``c = lambda_ * min(c_bar, ratio)``::

        acc[t] = rho[t] * (rewards[t] + disc[t] * V[t + 1] - values[t]) + disc[t] * c[t] * acc[t + 1]
        vs[t]  = values[t] + acc[t]                                        (acc[T] = 0, vs[T] = next_value)
        pg[t]  = min(pg_rho_bar, ratio[t]) * (rewards[t] + disc[t] * vs[t + 1] - values[t])

    ``pg_rho_bar`` defaults to ``rho_bar``. With all ratios 1, ``rho_bar =
    c_bar = 1`` and ``lambda_ = l``, ``vs - values`` is GAE(l).

    Returns:
        ``(vs, pg_advantages)``, ``[T, N]`` each.

    Example:
        >>> import numpy as np, fastvec
        >>> T, N = 3, 2
        >>> rewards = np.ones((T, N), np.float32)
        >>> values = np.zeros((T, N), np.float32)
        >>> dones = np.zeros((T, N), np.float32)
        >>> vs, pg = fastvec.vtrace(rewards, values, dones, np.zeros(N, np.float32),
        ...                         np.zeros(N, np.float32), gamma=0.5,
        ...                         log_rhos=np.zeros((T, N), np.float32))
        >>> vs[:, 0]
        array([1.75, 1.5 , 1.  ], dtype=float32)
    """
    return _vtrace(rewards, values, dones, next_value, next_done, log_rhos, rhos, gamma,
                   rho_bar, c_bar, rho_bar if pg_rho_bar is None else pg_rho_bar, lambda_,
                   out, num_threads)
