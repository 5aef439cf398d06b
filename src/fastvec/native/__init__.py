"""fastvec's native-env kit: envs written in C, stepped in batches by ``NativeVectorEnv``.

An env is a header (its params and state structs, ``reset`` and ``step``, and one
``FV_ENV(...)`` line: ``fv_env.h``), a binding that exports it (``kit.kernel``), and a
:class:`NativeEnvSpec` registered under an id. ``fastvec.get_include()`` is the directory of
the headers (and of ``kit.pxd``) to build against; ``docs/native-envs.md`` walks through
``examples/native_env``. fastvec's own envs (``fastvec.native.envs``) are built the same way.

- :mod:`fastvec.native.kit`: what a compiled env declares, the kit's enums, its random draws.
- :mod:`fastvec.native.registry`: :class:`NativeEnvSpec`, :func:`register` and the lookups.
- ``Batch`` (``_batch.pyx``): the runner, the base of ``fastvec.NativeVectorEnv``.
"""
import os

from fastvec.native._batch import Batch
from fastvec.native.registry import (
    RENDER_MODES, NativeEnvSpec, can_run_natively, get_native_spec, is_bool, is_real, legacy_promotion,
    native_ids, register,
)


def get_include() -> str:
    """The directory of the native-env kit's C headers (``fv_env.h``, ``fv_rng.h``) and of
    ``kit.pxd``: the include directory for building an env against this fastvec.

    Example:
        >>> import os, fastvec
        >>> os.path.isfile(os.path.join(fastvec.get_include(), "fv_env.h"))
        True

    A setuptools build of an env (its binding ``_kernel.pyx`` beside its header)::

        Extension("mypkg._kernel", ["mypkg/_kernel.pyx"],
                  include_dirs=[fastvec.get_include(), numpy.get_include()])
    """
    return os.path.dirname(os.path.abspath(__file__))


__all__ = ["Batch", "NativeEnvSpec", "RENDER_MODES", "can_run_natively", "get_include", "get_native_spec",
           "is_bool", "is_real", "legacy_promotion", "native_ids", "register"]

# fastvec's own envs register themselves (after the registry exists: they import it).
from fastvec.native import envs  # noqa: E402,F401
