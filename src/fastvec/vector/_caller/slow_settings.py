"""Caller side: settings that are bound to make a training loop slow, named once with their fix.

Checked the first time the caller is seen keeping more than one core busy between steps
(torch at its default threads, see ``WorkerPool.step_started``): only then do these
settings cost anything, and only then is the warning about the user's loop.
"""
from __future__ import annotations

import os
from typing import Mapping, Sequence

from gymnasium import logger

from fastvec.vector._wait.openmp import LLVM_RUNTIME_NAMES, loaded_runtimes

__all__ = ["slow_settings", "warn_slow_settings_once"]

_warned: set[str] = set()  # the kinds of advice given in this process


def slow_settings(*, pin_workers: bool | None, release_openmp_threads: bool, gnu_runtimes: Sequence[str],
                  llvm_runtimes: Sequence[str], environ: Mapping[str, str]) -> dict[str, str]:
    """What is bound to be slow for a caller that keeps more than one core busy between steps,
    by kind: ``{kind: advice}`` (empty when nothing is).

    Args:
        pin_workers, release_openmp_threads: the vector env's arguments.
        gnu_runtimes / llvm_runtimes: paths of the GNU / LLVM or Intel OpenMP runtimes loaded
            in the calling process (:func:`fastvec.vector._wait.openmp.loaded_runtimes`).
        environ: the process's environment variables.

    Returns:
        One message per setting, naming the fix.

    Example:
        >>> sorted(slow_settings(pin_workers=True, release_openmp_threads=True, gnu_runtimes=[],
        ...                      llvm_runtimes=[], environ={}))
        ['pin_workers']
    """
    advice = {}
    if pin_workers is True:
        advice["pin_workers"] = (
            "FastVectorEnv(pin_workers=True): your code between steps keeps more than one core busy "
            "(torch's threads, for instance), and a worker pinned to a CPU cannot leave it for a free "
            "one while such a thread holds it, so every step waits. Leave pin_workers at None (the "
            "default): workers are then pinned only while the caller steps back to back or computes "
            "on one core.")
    passive = environ.get("OMP_WAIT_POLICY", "").strip().lower() == "passive"
    if not release_openmp_threads and gnu_runtimes and not passive:
        advice["release_openmp_threads"] = (
            "FastVectorEnv(release_openmp_threads=False): the idle threads of this process's GNU "
            "OpenMP runtime (torch's) spin for milliseconds after each parallel region, on the cores "
            "the workers need for the next step (docs/vector.md, \"In a training loop\"). Leave "
            "release_openmp_threads at True (the default), or set OMP_WAIT_POLICY=PASSIVE before "
            "Python starts.")
    if llvm_runtimes and "KMP_BLOCKTIME" not in environ and not passive:
        names = ", ".join(sorted({os.path.basename(p) for p in llvm_runtimes}))
        advice["KMP_BLOCKTIME"] = (
            f"An LLVM or Intel OpenMP runtime is loaded ({names}): its idle threads spin for "
            "KMP_BLOCKTIME (200 ms by default) after each parallel region, on the cores the workers "
            "need for the next step, and FastVectorEnv cannot hand them back. Set KMP_BLOCKTIME=0 (or "
            "OMP_WAIT_POLICY=PASSIVE) in the environment before Python starts.")
    return advice


def warn_slow_settings_once(*, pin_workers: bool | None, release_openmp_threads: bool) -> None:
    """Warn (Gymnasium's logger) about each setting :func:`slow_settings` finds in this process,
    once per kind per process."""
    advice = slow_settings(pin_workers=pin_workers, release_openmp_threads=release_openmp_threads,
                           gnu_runtimes=loaded_runtimes(), llvm_runtimes=loaded_runtimes(LLVM_RUNTIME_NAMES),
                           environ=os.environ)
    for kind, message in advice.items():
        if kind not in _warned:
            _warned.add(kind)
            logger.warn(message)
