"""Caller side: the calling process's OpenMP runtimes, and releasing their idle threads while a step waits.

An OpenMP runtime keeps the threads of its pool busy-waiting for a while after each
parallel region, in case another comes soon: GNU libgomp (the runtime of PyTorch's Linux
wheels) for about 300,000 pause instructions when ``OMP_WAIT_POLICY`` is unset, LLVM and
Intel's runtimes for ``KMP_BLOCKTIME`` (200 ms). With torch at its default threads a
convolution or an update runs on every core, and its idle thread then spins for
milliseconds on a core, while the vector step the trainer waits for needs every core for
the workers (measurements: ``docs/benchmarks.md``, the ``train`` section).

OpenMP 5.0's ``omp_pause_resource_all(omp_pause_soft)`` hands those threads back. In
libgomp it ends the pool of the calling thread only, at once when its threads are idle,
and the next parallel region starts them again (tens of microseconds). It changes no
setting: the number of threads and the wait policy stay what the user chose.
:class:`OpenMPRelease` calls it for every libgomp loaded in the process, at most once per
wait, while the workers step. LLVM's and Intel's runtimes (``libomp``, ``libiomp5``) are
left alone: their pause is process-wide and waits for threads busy elsewhere, so a
trainer with other threads in a parallel region could stall in it; there, the fix is
the user's ``KMP_BLOCKTIME=0``.
"""
from __future__ import annotations

import ctypes
import sys

__all__ = ["OpenMPRelease", "loaded_runtimes", "LLVM_RUNTIME_NAMES"]

# omp_pause_resource_t's value for a soft pause (OpenMP 5.0 §3.2.43): idle threads go,
# state that a later parallel region needs (thread-private data aside) is kept.
OMP_PAUSE_SOFT = 1
# GNU libgomp's file name as it appears in a process's memory map, vendored copies
# included (torch/lib/libgomp.so.1, fastvec.libs/libgomp-a34b3233.so.1.0.0).
_RUNTIME_NAME = "libgomp"
#: LLVM's and Intel's OpenMP runtimes (conda's and MKL builds of torch and numpy load them)
LLVM_RUNTIME_NAMES = ("libomp", "libiomp5")


def loaded_runtimes(names: tuple[str, ...] = (_RUNTIME_NAME,)) -> list[str]:
    """Paths of the OpenMP runtimes named ``names`` (file name prefixes; default GNU libgomp)
    mapped in this process (Linux; elsewhere none are found).

    Example:
        >>> paths = loaded_runtimes()
        >>> all("libgomp" in p for p in paths)
        True
    """
    if not sys.platform.startswith("linux"):
        return []
    paths: list[str] = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(None, 5)[-1]
                name = path.rsplit("/", 1)[-1]
                if path.startswith("/") and name.startswith(names) and ".so" in name and path not in paths:
                    paths.append(path)
    except OSError:
        return []
    return paths


class OpenMPRelease:
    """Releases the idle threads of the process's GNU OpenMP runtimes (see the module docstring).

    The runtimes are looked up at construction and again whenever the number of imported
    modules has changed since (torch imported after the vector env was made); calling the
    instance then costs a comparison when nothing is loaded, and one C call per runtime
    (about a microsecond when its pool is already released) otherwise.

    Example:
        >>> release = OpenMPRelease()
        >>> release()  # no OpenMP work was done: nothing to hand back
    """

    def __init__(self) -> None:
        self._pauses: list = []
        self._modules_seen = -1

    def _look_up(self) -> None:
        self._modules_seen = len(sys.modules)
        pauses = []
        for path in loaded_runtimes():
            try:
                pause = ctypes.CDLL(path).omp_pause_resource_all
            except (OSError, AttributeError):  # an old runtime without OpenMP 5.0's pause
                continue
            pause.argtypes = [ctypes.c_int]
            pause.restype = ctypes.c_int
            pauses.append(pause)
        self._pauses = pauses

    def __call__(self) -> None:
        if len(sys.modules) != self._modules_seen:
            self._look_up()
        for pause in self._pauses:
            pause(OMP_PAUSE_SOFT)
