"""TorchCartPole: CartPole-v1 for N envs as torch tensors, stepped and autoreset on the device."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

__all__ = ["TorchCartPole", "resolve_device"]

# Gymnasium's CartPole-v1 constants, computed the same way (float64 Python arithmetic).
GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
# Folded constants of the fast step (exact=False): the exact step keeps gymnasium's order of operations.
FORCE_OVER_MASS = FORCE_MAG / TOTAL_MASS
POLEMASS_LENGTH_OVER_MASS = POLEMASS_LENGTH / TOTAL_MASS
LENGTH_FOUR_THIRDS = LENGTH * 4.0 / 3.0
LENGTH_MASSPOLE_OVER_MASS = LENGTH * MASSPOLE / TOTAL_MASS


def resolve_device(device: str | int | torch.device) -> torch.device:
    """``torch.device(device)`` with the index of an accelerator filled in.

    ``torch.device("cuda")`` has no index, while a tensor made on it reports ``cuda:0`` (the
    current device), so the two never compare equal. This returns ``cuda:<current device>``
    for an index-less accelerator device that is available, and the device unchanged otherwise
    (``cpu``, ``meta``, an explicit index, or an accelerator this torch cannot see).

    Example:
        >>> import torch
        >>> from fastvec.torch import resolve_device
        >>> resolve_device("cpu")
        device(type='cpu')
        >>> resolve_device(torch.device("cpu")) == torch.empty(0).device
        True
        >>> resolve_device("cuda:1")
        device(type='cuda', index=1)
    """
    dev = torch.device(device)
    if dev.index is not None or dev.type in ("cpu", "meta"):
        return dev
    backend = getattr(torch, dev.type, None)
    is_available = getattr(backend, "is_available", None)
    current_device = getattr(backend, "current_device", None)
    if callable(is_available) and callable(current_device) and is_available():
        return torch.device(dev.type, current_device())
    return dev


class TorchCartPole(VectorEnv):
    """CartPole-v1 for ``num_envs`` envs held as torch tensors on any device.

    The dynamics, termination and 500-step truncation are those of gymnasium's
    ``CartPole-v1``; every step is a fixed sequence of elementwise torch ops over
    preallocated buffers, so nothing is synchronised with the host, nothing is
    allocated per step (with ``copy=False``) and there is no Python loop over envs.

    Autoreset happens in the same step (``AutoresetMode.SAME_STEP``): for an env
    that terminated or was truncated, the returned observation is already the first
    one of its next episode, and the last observation of the finished episode is in
    :attr:`final_obs` (also ``info["final_obs"]``, with the mask ``info["_final_obs"]``)
    so that a learner can bootstrap a truncated episode. Reset states are drawn for
    every env from a seeded :class:`torch.Generator` and kept only where an env is done.

    ``dtype=torch.float64`` keeps the state in float64 as gymnasium does; on the CPU it
    then evaluates ``cos``/``sin`` with NumPy (libm, as gymnasium) and equals gymnasium
    step for step. The default ``float32`` is faster and agrees within float32 rounding.
    Observations are always float32 (the observation space's dtype); rewards have ``dtype``.

    ``exact=False`` takes a shorter step: the same equations with the constants folded and
    multiply-adds fused (``addcmul``), 24 tensor ops (kernel launches on a GPU) instead of 36.
    It is **not** bit-identical to gymnasium (float32: within ~1e-6 relative per step), and
    its trajectories drift apart from the exact ones over many steps, as any reordering of
    float arithmetic does; episodes, rewards and autoreset behave the same.

    Args:
        num_envs: number of envs (N).
        device: torch device for every tensor (``"cpu"``, ``"cuda"``, ...); an index-less
            ``"cuda"`` is resolved to the current device (see :func:`resolve_device`), so
            that actions made on ``cuda:0`` are recognised as already on the env's device.
        dtype: ``torch.float32`` (default) or ``torch.float64`` for the state and rewards.
        seed: seed of the reset generator; ``None`` draws a fresh one.
        max_episode_steps: truncation horizon (500 for CartPole-v1).
        copy: if ``False``, ``step``/``reset`` return the env's own buffers, which the
            next call overwrites (fastest; copy what you keep). ``True`` returns clones.
        exact: ``True`` (default) follows gymnasium op for op; ``False`` takes the fast step.

    Example:
        >>> import torch
        >>> from fastvec.torch import TorchCartPole
        >>> env = TorchCartPole(3, seed=0)
        >>> obs, info = env.reset(seed=42)
        >>> obs.shape, obs.dtype
        (torch.Size([3, 4]), torch.float32)
        >>> obs, reward, terminated, truncated, info = env.step(torch.tensor([0, 1, 1]))
        >>> reward
        tensor([1., 1., 1.])
        >>> terminated, truncated
        (tensor([False, False, False]), tensor([False, False, False]))
        >>> env.final_obs.shape
        torch.Size([3, 4])
        >>> fast = TorchCartPole(3, seed=0, exact=False)
        >>> obs, info = fast.reset(seed=42)
        >>> obs, reward, terminated, truncated, info = fast.step(torch.tensor([0, 1, 1]))
        >>> reward
        tensor([1., 1., 1.])
    """

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        seed: int | None = None,
        max_episode_steps: int = 500,
        copy: bool = True,
        exact: bool = True,
    ) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)):
            raise TypeError(f"num_envs must be an int, got {type(num_envs).__name__}")
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, (int, np.integer)):
            raise TypeError(f"max_episode_steps must be an int, got {type(max_episode_steps).__name__}")
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")

        n = self.num_envs = int(num_envs)
        self.device = resolve_device(device)
        self.dtype = dtype
        self.max_episode_steps = int(max_episode_steps)
        self.copy = bool(copy)
        self.exact = bool(exact)
        self.render_mode = None

        high = np.array([X_THRESHOLD * 2, np.inf, THETA_THRESHOLD * 2, np.inf], dtype=np.float32)
        self.single_observation_space = spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = spaces.Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, n)
        self.action_space = batch_space(self.single_action_space, n)

        kw = dict(device=self.device, dtype=dtype)
        # State as structure of arrays: rows x, x_dot, theta, theta_dot are contiguous.
        self._s = torch.zeros(4, n, **kw)
        self._deriv = torch.empty(4, n, **kw)    # (x_dot, xacc, theta_dot, thetaacc)
        self._cos = torch.empty(n, **kw)
        self._sin = torch.empty(n, **kw)
        self._temp = torch.empty(n, **kw)
        self._t1 = torch.empty(n, **kw)
        self._t2 = torch.empty(n, **kw)
        self._abs = torch.empty(2, n, **kw)
        self._over = torch.empty(2, n, device=self.device, dtype=torch.bool)
        self._thresholds = torch.tensor([[X_THRESHOLD], [THETA_THRESHOLD]], **kw)
        self._force_pos = torch.tensor(FORCE_MAG, **kw)
        self._force_neg = torch.tensor(-FORCE_MAG, **kw)
        self._force = torch.empty(n, **kw)
        self._push_right = torch.empty(n, device=self.device, dtype=torch.bool)
        self._noise = torch.empty(4, n, **kw)
        self._steps = torch.zeros(n, device=self.device, dtype=torch.int32)
        self._obs = torch.zeros(n, 4, device=self.device, dtype=torch.float32)
        self._final_obs = torch.zeros(n, 4, device=self.device, dtype=torch.float32)
        self._reward = torch.ones(n, **kw)
        self._terminated = torch.zeros(n, device=self.device, dtype=torch.bool)
        self._truncated = torch.zeros(n, device=self.device, dtype=torch.bool)
        self._done = torch.zeros(n, device=self.device, dtype=torch.bool)
        self._reset_low, self._reset_high = -0.05, 0.05
        # Constants as 0-dim tensors (a Python scalar costs a conversion on every op).
        const = lambda v: torch.tensor(v, **kw)
        self._c_polemass_length = const(POLEMASS_LENGTH)
        self._c_total_mass = const(TOTAL_MASS)
        self._c_gravity = const(GRAVITY)
        self._c_masspole = const(MASSPOLE)
        self._c_four_thirds = const(4.0 / 3.0)
        self._c_length = const(LENGTH)
        self._c_tau = const(TAU)
        self._c_one = torch.tensor(1, device=self.device, dtype=torch.int32)
        # 1 in each integer action dtype, made here: making one in step() would copy from the
        # host (a sync on a GPU, and not allowed while a CUDA graph is being captured).
        self._action_one = {t: torch.tensor(1, device=self.device, dtype=t)
                            for t in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)}
        # Fast step (exact=False): folded constants and its own scratch buffers.
        self._c_length_four_thirds = const(LENGTH_FOUR_THIRDS)
        self._force_pos_over_mass = const(FORCE_OVER_MASS)
        self._force_neg_over_mass = const(-FORCE_OVER_MASS)
        self._acc = torch.empty(2, n, **kw)  # (xacc, thetaacc)
        self._xacc, self._thetaacc = self._acc[0], self._acc[1]
        self._num = torch.empty(n, **kw)
        self._c_max_steps = torch.tensor(self.max_episode_steps, device=self.device, dtype=torch.int32)
        # Views taken once (taking a view costs as much as a small op).
        self._sT = self._s.T
        self._x, self._theta, self._theta_dot = self._s[0], self._s[2], self._s[3]
        self._s_pos, self._s_vel = self._s[0::2], self._s[1::2]
        self._d_pos, self._d_xacc, self._d_thetaacc = self._deriv[0::2], self._deriv[1], self._deriv[3]
        self._over_x, self._over_theta = self._over[0], self._over[1]

        # float64 on the CPU: cos/sin through NumPy (the libm results gymnasium gets);
        # torch's vectorised cos/sin differ from libm in the last bit for ~0.1 % of inputs.
        self._numpy_trig = self.device.type == "cpu" and dtype == torch.float64
        if self._numpy_trig:
            self._theta_np = self._s[2].numpy()
            self._cos_np = self._cos.numpy()
            self._sin_np = self._sin.numpy()

        self._generator = torch.Generator(device=self.device)
        if seed is None:
            self._generator.seed()
        else:
            self._generator.manual_seed(int(seed))
        self._needs_reset = True

    # ------------------------------------------------------------------ state access
    @property
    def state(self) -> torch.Tensor:
        """The live physical state as an ``[N, 4]`` view (x, x_dot, theta, theta_dot)."""
        return self._s.T

    @state.setter
    def state(self, value: torch.Tensor | np.ndarray) -> None:
        value = torch.as_tensor(value, device=self.device)
        if tuple(value.shape) != (self.num_envs, 4):
            raise ValueError(f"state must have shape ({self.num_envs}, 4), got {tuple(value.shape)}")
        self._s.T.copy_(value)
        self._obs.copy_(self._sT)
        self._needs_reset = False

    @property
    def elapsed_steps(self) -> torch.Tensor:
        """Steps taken in the current episode of each env, ``[N]`` int32 (a live view)."""
        return self._steps

    @property
    def final_obs(self) -> torch.Tensor:
        """``[N, 4]`` float32: the observation each env reached in the last step, before any
        autoreset (equal to the returned observation for envs that did not finish)."""
        return self._final_obs

    @property
    def generator(self) -> torch.Generator:
        """The torch generator that draws reset states."""
        return self._generator

    # ------------------------------------------------------------------ API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Reset all envs (or those in ``options["reset_mask"]``) to uniform(-0.05, 0.05) states.

        ``seed`` reseeds the reset generator, so the same seed gives the same episodes.
        """
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
                raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
            self._generator.manual_seed(int(seed))
        mask = None
        if options:
            unknown = set(options) - {"reset_mask"}
            if unknown:
                raise ValueError(f"unknown reset options {sorted(unknown)}; expected only 'reset_mask'")
            mask = torch.as_tensor(options["reset_mask"], device=self.device)
            if mask.dtype != torch.bool or tuple(mask.shape) != (self.num_envs,):
                raise ValueError(
                    f"options['reset_mask'] must be a bool array of shape ({self.num_envs},), "
                    f"got {mask.dtype} {tuple(mask.shape)}")
            if self._needs_reset:
                raise RuntimeError("reset_mask needs a full reset() first")
        self._draw_reset_states()
        if mask is None:
            self._s.copy_(self._noise)
            self._steps.zero_()
        else:
            torch.where(mask, self._noise, self._s, out=self._s)
            self._steps.masked_fill_(mask, 0)
        self._obs.copy_(self._sT)
        self._needs_reset = False
        obs = self._obs.clone() if self.copy else self._obs
        return obs, {}

    def step(
        self, actions: torch.Tensor | np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Step every env with ``actions`` (``[N]`` integers: 1 pushes right, anything else left).

        Returns ``(obs [N, 4] float32, reward [N], terminated [N] bool, truncated [N] bool,
        info)`` on the env's device; ``info`` holds ``final_obs`` and its mask ``_final_obs``.
        Action values are not range-checked (that would synchronise with the device).
        """
        if self._needs_reset:
            raise RuntimeError("call reset() before step()")
        if not isinstance(actions, torch.Tensor):
            actions = torch.as_tensor(np.asarray(actions), device=self.device)
        if tuple(actions.shape) != (self.num_envs,):
            raise ValueError(f"actions must have shape ({self.num_envs},), got {tuple(actions.shape)}")
        if actions.dtype.is_floating_point or actions.dtype.is_complex:
            raise TypeError(f"actions must be integers (Discrete(2)), got {actions.dtype}")
        if actions.device != self.device:  # self.device has its index (resolve_device)
            actions = actions.to(self.device)

        if self.exact:
            self._dynamics(actions)
        else:
            self._dynamics_fast(actions)
        self._autoreset()
        if self.copy:
            info = {"final_obs": self._final_obs.clone(), "_final_obs": self._done.clone()}
            return (self._obs.clone(), self._reward.clone(), self._terminated.clone(),
                    self._truncated.clone(), info)
        info = {"final_obs": self._final_obs, "_final_obs": self._done}
        return self._obs, self._reward, self._terminated, self._truncated, info

    # ------------------------------------------------------------------ kernels
    def _dynamics(self, actions: torch.Tensor) -> None:
        """One Euler step of gymnasium's CartPole equations, op for op in the same order."""
        s, d = self._s, self._deriv
        c, sn, temp, t1, t2 = self._cos, self._sin, self._temp, self._t1, self._t2

        torch.eq(actions, self._one_like(actions), out=self._push_right)
        torch.where(self._push_right, self._force_pos, self._force_neg, out=self._force)
        if self._numpy_trig:
            np.cos(self._theta_np, out=self._cos_np)
            np.sin(self._theta_np, out=self._sin_np)
        else:
            torch.cos(self._theta, out=c)
            torch.sin(self._theta, out=sn)
        # temp = (force + polemass_length * theta_dot**2 * sin) / total_mass
        torch.mul(self._theta_dot, self._theta_dot, out=t1)
        t1.mul_(self._c_polemass_length).mul_(sn).add_(self._force)
        torch.div(t1, self._c_total_mass, out=temp)
        # thetaacc = (g * sin - cos * temp) / (length * (4/3 - masspole * cos**2 / total_mass))
        torch.mul(sn, self._c_gravity, out=t1)
        torch.mul(c, temp, out=t2)
        t1.sub_(t2)
        torch.mul(c, c, out=t2)
        t2.mul_(self._c_masspole).div_(self._c_total_mass)
        torch.sub(self._c_four_thirds, t2, out=t2)
        t2.mul_(self._c_length)
        torch.div(t1, t2, out=self._d_thetaacc)
        # xacc = temp - polemass_length * thetaacc * cos / total_mass
        torch.mul(self._d_thetaacc, self._c_polemass_length, out=t1)
        t1.mul_(c).div_(self._c_total_mass)
        torch.sub(temp, t1, out=self._d_xacc)
        # Euler: (x, x_dot, theta, theta_dot) += tau * (x_dot, xacc, theta_dot, thetaacc)
        self._d_pos.copy_(self._s_vel)
        d.mul_(self._c_tau)
        s.add_(d)
        # terminated: |x| > 2.4 or |theta| > 12 degrees (same as the four comparisons)
        self._flags()

    def _dynamics_fast(self, actions: torch.Tensor) -> None:
        """The same Euler step with constants folded and multiply-adds fused: 13 ops, not 25.

        temp     = force / total_mass + (polemass_length / total_mass) * theta_dot**2 * sin
        thetaacc = (g * sin - cos * temp) / (length * 4/3 - (length * masspole / total_mass) * cos**2)
        xacc     = temp - (polemass_length / total_mass) * thetaacc * cos
        """
        c, sn, temp, t1, num = self._cos, self._sin, self._temp, self._t1, self._num
        torch.eq(actions, self._one_like(actions), out=self._push_right)
        torch.where(self._push_right, self._force_pos_over_mass, self._force_neg_over_mass, out=temp)
        torch.cos(self._theta, out=c)
        torch.sin(self._theta, out=sn)
        torch.mul(self._theta_dot, self._theta_dot, out=t1)
        temp.addcmul_(t1, sn, value=POLEMASS_LENGTH_OVER_MASS)
        torch.mul(sn, self._c_gravity, out=num)
        num.addcmul_(c, temp, value=-1.0)
        torch.addcmul(self._c_length_four_thirds, c, c, value=-LENGTH_MASSPOLE_OVER_MASS, out=t1)
        torch.div(num, t1, out=self._thetaacc)
        torch.addcmul(temp, self._thetaacc, c, value=-POLEMASS_LENGTH_OVER_MASS, out=self._xacc)
        # Euler: positions move with the old velocities, then the velocities change.
        self._s_pos.add_(self._s_vel, alpha=TAU)
        self._s_vel.add_(self._acc, alpha=TAU)
        self._flags()

    def _one_like(self, actions: torch.Tensor) -> torch.Tensor:
        one = self._action_one.get(actions.dtype)
        if one is None:  # a rarer integer dtype: made once (a host copy, outside any graph capture)
            one = self._action_one[actions.dtype] = torch.tensor(1, device=self.device, dtype=actions.dtype)
        return one

    def _flags(self) -> None:
        """terminated: |x| > 2.4 or |theta| > 12 degrees; truncated: max_episode_steps reached."""
        torch.abs(self._s_pos, out=self._abs)
        torch.gt(self._abs, self._thresholds, out=self._over)
        torch.logical_or(self._over_x, self._over_theta, out=self._terminated)
        self._steps.add_(self._c_one)
        torch.ge(self._steps, self._c_max_steps, out=self._truncated)
        torch.logical_or(self._terminated, self._truncated, out=self._done)

    def _draw_reset_states(self) -> None:
        self._noise.uniform_(self._reset_low, self._reset_high, generator=self._generator)

    def _autoreset(self) -> None:
        self._final_obs.copy_(self._sT)
        self._draw_reset_states()
        torch.where(self._done, self._noise, self._s, out=self._s)
        self._steps.masked_fill_(self._done, 0)
        self._obs.copy_(self._sT)

    def close_extras(self, **kwargs: Any) -> None:
        """Nothing to release: the buffers are ordinary tensors."""

    def __repr__(self) -> str:
        return (f"TorchCartPole(num_envs={self.num_envs}, device={str(self.device)!r}, "
                f"dtype={self.dtype}{'' if self.exact else ', exact=False'})")
