"""``fastvec.autotune``: try FastVectorEnv's settings on your envs, keep what is fastest.

How many worker processes, whether the caller steps a share of the envs itself, and whether
a half-batch ``send``/``recv`` loop pays depend on the env, the machine and what the trainer
does between steps. :func:`autotune` measures each candidate on the user's own envs for a
few seconds, with a stand-in for the trainer's time between steps (``think_us`` of one-core
work, or a ``policy`` callable run on each batch of observations), prints the table and
returns the keywords of the fastest. It picks a setting over the defaults only when it beat
them by more than ``margin`` (3 % by default: this much noise comes with a shared machine),
so its pick is never slower than the defaults as measured. A pick with ``step_in_caller=True``
runs env code in the calling process, which ``env_failure="restart"`` refuses (see
:func:`autotune`).

The module is callable: ``fastvec.autotune(env_fns, ...)`` is :func:`autotune`, and
``from fastvec.autotune import autotune`` imports the same function.

    python -m fastvec.autotune CartPole-v1 --num-envs 16 --think-us 200
"""
from __future__ import annotations

import argparse
import sys
import time
import types
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["autotune", "candidates", "main"]

#: Printed under the table when the pick steps envs in the caller.
STEP_IN_CALLER_NOTE = (
    "note: the pick has step_in_caller=True: the calling process steps a share of the envs itself, "
    "so an env that crashes takes it with it, and FastVectorEnv refuses it with env_failure=\"restart\"; "
    "to keep the envs isolated, pass settings without step_in_caller (the best of those is in the table).")


def candidates(num_envs: int, cores: int) -> list[dict[str, Any]]:
    """The settings :func:`autotune` tries by default: the defaults first (one worker per
    core, at most one per env); then each other worker count from 1 to one per core (and one
    more, when the envs allow), each worker count also with the
    caller stepping a share itself; and, with an even number of workers among which the envs
    divide evenly, ``send``/``recv`` in half batches (``batch_size``: half the envs).

    Example:
        >>> [c for c in candidates(8, 2)][:3]
        [{}, {'num_workers': 1}, {'num_workers': 1, 'step_in_caller': True}]
    """
    out: list[dict[str, Any]] = [{}]
    for workers in range(1, min(cores + 1, num_envs) + 1):
        if workers != min(cores, num_envs):  # (that one is the defaults)
            out.append({"num_workers": workers})
        if workers > 1 or num_envs > 1:
            out.append({"num_workers": workers, "step_in_caller": True})
        if workers >= 2 and workers % 2 == 0 and num_envs % workers == 0:
            out.append({"num_workers": workers, "batch_size": num_envs // 2})
    return out


def autotune(env_fns: Sequence[Callable[[], Any]], *, seconds: float = 1.0, think_us: float = 0.0,
             policy: Callable[[Any], Any] | None = None, settings: list[dict[str, Any]] | None = None,
             budget_s: float | None = None, margin: float = 0.03, verbose: bool = True) -> dict[str, Any]:
    """Measure FastVectorEnv on ``env_fns`` under each of ``settings``; return the fastest's keywords.

    Each setting gets a vector env of its own (closed before the next is made, so nothing is
    left behind): it is reset, stepped 20 times to warm up, then for ``seconds`` with random
    actions from the action space (drawn once), with the trainer's stand-in between steps.
    Lockstep settings use ``step``; those with a ``batch_size`` an EnvPool-style loop
    (``send`` the envs ``recv`` returned). The rate is env transitions per second.

    Args:
        env_fns: the env constructors, as FastVectorEnv takes them.
        seconds: how long each setting is measured (after its warm-up).
        think_us: microseconds of one-core busy work between two steps (the policy's time);
            0 with ``policy`` None: nothing between steps.
        policy: called with each batch of observations between steps (e.g. a torch module's
            forward pass under ``torch.no_grad()``), instead of ``think_us``.
        settings: the FastVectorEnv keywords to try (default :func:`candidates`); ``{}``,
            the defaults, is always tried, first.
        budget_s: stop trying new settings once this many seconds have passed (default:
            no limit beyond one measurement per setting).
        margin: how much faster than the defaults a setting must be to be picked.
        verbose: print the table.

    Returns:
        The keywords of the pick (``{}``: the defaults). A pick with ``step_in_caller=True``
        gives up the isolation of the caller from the envs: an env that crashes takes the
        caller with it, and FastVectorEnv refuses it with ``env_failure="restart"`` (the
        table says so under it). To measure only settings that keep the envs in worker
        processes, pass ``settings`` without it, e.g.
        ``[s for s in candidates(len(env_fns), cores) if not s.get("step_in_caller")]``.

    Raises:
        ValueError: ``seconds`` not positive, ``think_us`` or ``margin`` negative, or no env.

    Example:
        >>> import gymnasium as gym
        >>> from fastvec import FastVectorEnv
        >>> best = autotune([lambda: gym.make("CartPole-v1")] * 4, seconds=0.2,
        ...                 settings=[{"num_workers": 1}], verbose=False)
        >>> isinstance(best, dict) and set(best) <= {"num_workers"}
        True
        >>> FastVectorEnv([lambda: gym.make("CartPole-v1")] * 4, **best).close()
    """
    env_fns = list(env_fns)
    if not env_fns:
        raise ValueError("autotune needs at least one env constructor")
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    if think_us < 0 or margin < 0:
        raise ValueError(f"think_us and margin must be >= 0, got {think_us} and {margin}")
    from fastvec.host import usable_cpus

    tried = [{}] + [dict(s) for s in (settings if settings is not None else candidates(len(env_fns), len(usable_cpus())))
                    if s]
    started = time.perf_counter()
    rates: list[tuple[dict[str, Any], float]] = []
    for setting in tried:
        if budget_s is not None and rates and time.perf_counter() - started > budget_s:
            break
        try:
            rate = _measure(env_fns, setting, seconds, think_us, policy)
        except (ValueError, TypeError) as error:  # (a setting these envs refuse: reported, not picked)
            if not setting:
                raise
            rate, setting = float("nan"), {**setting, "_error": f"{type(error).__name__}: {error}"}
        rates.append((setting, rate))
    default = rates[0][1]
    valid = [(s, r) for s, r in rates if "_error" not in s]
    best_setting, best = max(valid, key=lambda item: item[1])
    pick = best_setting if best > default * (1.0 + margin) else {}
    if verbose:
        from fastvec.bench import fmt_rate, print_table

        rows = [[_label(s), s["_error"][:60] if "_error" in s else fmt_rate(r),
                 "" if "_error" in s else f"{r / default:.2f}x", "<-" if s == pick else ""] for s, r in rates]
        print_table(f"autotune: {len(env_fns)} envs, {seconds:g} s each, "
                    f"{'policy' if policy else f'{think_us:g} µs of one-core work'} between steps",
                    ["FastVectorEnv keywords", "SPS", "vs defaults", "pick"], rows)
        if pick.get("step_in_caller"):
            print(STEP_IN_CALLER_NOTE)
    return pick


def _label(setting: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in setting.items() if k != "_error") or "(defaults)"


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _measure(env_fns, setting: dict[str, Any], seconds: float, think_us: float, policy) -> float:
    """Env transitions per second of FastVectorEnv(env_fns, **setting) (see :func:`autotune`)."""
    from fastvec.vector.fast_vector_env import FastVectorEnv

    think = (lambda obs: policy(obs)) if policy is not None else (
        (lambda obs: _busy(think_us * 1e-6)) if think_us > 0 else (lambda obs: None))
    envs = FastVectorEnv(env_fns, **setting)
    try:
        envs.action_space.seed(0)
        actions = [envs.action_space.sample() for _ in range(16)]
        obs, _ = envs.reset(seed=0)
        if envs.batch_size < envs.num_envs:
            return _measure_send_recv(envs, actions, seconds, think)
        for k in range(20):
            think(obs)
            obs = envs.step(actions[k % 16])[0]
        done, k = 0, 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            think(obs)
            obs = envs.step(actions[k % 16])[0]
            done += envs.num_envs
            k += 1
        return done / (time.perf_counter() - start)
    finally:
        envs.close()


def _measure_send_recv(envs, actions, seconds: float, think) -> float:
    """An EnvPool-style loop: act on the envs ``recv`` returned, ``send`` them their actions."""
    from gymnasium.vector.utils import iterate

    per_env = [list(iterate(envs.action_space, a)) for a in actions]
    envs.send(actions[0])  # (all envs: their first step; then recv hands back batch_size at a time)
    done, k = 0, 0

    def one():
        nonlocal k
        obs, _, _, _, infos = envs.recv()
        think(obs)
        ids = infos["env_id"]
        envs.send(np.stack([per_env[k % 16][i] for i in ids]), ids)
        k += 1
        return len(ids)

    for _ in range(20):
        one()
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        done += one()
    elapsed = time.perf_counter() - start
    return done / elapsed


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fastvec.autotune ENV_ID``: :func:`autotune` on a registered env."""
    parser = argparse.ArgumentParser(prog="python -m fastvec.autotune", description=__doc__.split("\n\n")[0])
    parser.add_argument("env_id", help="a registered Gymnasium env id")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=1.0, help="per setting (default 1)")
    parser.add_argument("--think-us", type=float, default=0.0, help="one-core work between steps (µs)")
    parser.add_argument("--budget-s", type=float, default=None, help="stop trying settings after this long")
    args = parser.parse_args(argv)
    import gymnasium as gym  # (fastvec's own envs are registered: importing this module imported fastvec)

    if args.env_id not in gym.registry:
        parser.error(f"{args.env_id!r} is not a registered env id")
    if args.num_envs < 1:
        parser.error(f"--num-envs must be >= 1, got {args.num_envs}")
    pick = autotune([lambda: gym.make(args.env_id)] * args.num_envs, seconds=args.seconds, think_us=args.think_us,
                    budget_s=args.budget_s)
    print(f"\nFastVectorEnv keywords: {pick or '{} (the defaults)'}")
    return 0


class _CallableModule(types.ModuleType):
    """This module, callable as the README shows it: ``fastvec.autotune(env_fns, ...)`` calls
    :func:`autotune` (the module stays a module: ``import fastvec.autotune`` and
    ``from fastvec.autotune import autotune, candidates`` work as before)."""

    def __call__(self, env_fns: Sequence[Callable[[], Any]], **kwargs: Any) -> dict[str, Any]:
        return autotune(env_fns, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    raise SystemExit(main())
