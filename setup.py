"""Build fastvec's Cython extensions.

Every ``.pyx`` under ``src/fastvec``, at any depth, becomes one extension module named
from its path (``src/fastvec/native/envs/cartpole.pyx`` -> ``fastvec.native.envs.cartpole``),
with the native-env kit's headers (``src/fastvec/native``; ``fastvec.get_include()`` once
installed) on the include path. So does the example env of ``examples/native_env``,
installed as ``fastvec.native.examples.gridworld`` (its own ``setup.py`` builds the same
files against an installed fastvec). Flags are portable (-O3, no -march=native) so that
wheels run on any x86-64/aarch64 machine; set FASTVEC_NATIVE=1 to add -march=native for a
local build. The modules in ALIGNED_LOOPS (the flatten kernels) align their loops to 64
bytes. The fast CartPole kernel picks AVX2/AVX-512 variants at run time (GCC/Clang on
x86); set FASTVEC_NO_DISPATCH=1 to build only the baseline variant (to test it). Set
FASTVEC_DEBUG=1 to keep debug info. Set
FASTVEC_PORTABLE=1 to build the portable C paths that MSVC takes (C11 atomics and threads,
no unsigned __int128, naps instead of the futex: see src/fastvec/native/fv_platform.h) with
any compiler, to test them.
"""
import glob
import os
import sys

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

compile_args = []
link_args = []
if sys.platform != "win32":
    compile_args = ["-O3", "-fno-strict-aliasing", "-Wno-unreachable-code"]
    # No debug info (Python's own flags ask for -g): it was half of each module's size, and
    # the wheels ship to users. FASTVEC_DEBUG=1 keeps it.
    if os.environ.get("FASTVEC_DEBUG") != "1":
        compile_args.append("-g0")
    if os.environ.get("FASTVEC_NATIVE") == "1":
        compile_args.append("-march=native")
    if os.environ.get("FASTVEC_OPENMP", "1") == "1" and sys.platform.startswith("linux"):
        compile_args.append("-fopenmp")
        link_args.append("-fopenmp")
else:
    # fv_platform.h's portable paths use C11 atomics and threads (Visual Studio 2022 17.8+).
    compile_args = ["/O2", "/openmp", "/std:c17", "/experimental:c11atomics"]

define_macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
if os.environ.get("FASTVEC_NO_DISPATCH") == "1":
    define_macros.append(("FV_NO_DISPATCH", "1"))
if os.environ.get("FASTVEC_PORTABLE") == "1":
    define_macros.append(("FV_PORTABLE", "1"))

# Modules whose kernels are short loops run over short rows (the few columns of a leaf): such
# a loop runs at a different speed when it straddles a 64-byte boundary of the instruction
# stream, which, left to the compiler, changes with any edit elsewhere in the module. Their
# loops start on a 64-byte boundary (GCC and Clang; MSVC's flags are above).
ALIGNED_LOOPS = {"fastvec.spaces._flatten"}
ALIGN_LOOPS_ARGS = [] if sys.platform == "win32" else ["-falign-loops=64"]

KIT_INCLUDE = os.path.join("src", "fastvec", "native")
EXAMPLE = os.path.join("examples", "native_env", "gridworld")


def _extension(name: str, path: str) -> Extension:
    return Extension(
        name,
        [path],
        include_dirs=[np.get_include(), KIT_INCLUDE],
        define_macros=define_macros,
        extra_compile_args=compile_args + (ALIGN_LOOPS_ARGS if name in ALIGNED_LOOPS else []),
        extra_link_args=link_args,
    )


extensions = [
    _extension(os.path.splitext(os.path.relpath(path, "src"))[0].replace(os.sep, "."), path)
    for path in sorted(glob.glob(os.path.join("src", "fastvec", "**", "*.pyx"), recursive=True))
]
extensions.append(_extension("fastvec.native.examples.gridworld._kernel", os.path.join(EXAMPLE, "_kernel.pyx")))


class ParallelBuildExt(build_ext):
    """build_ext compiling the extensions on every core (setuptools compiles one at a time)."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1


setup(
    cmdclass={"build_ext": ParallelBuildExt},
    package_dir={"": "src", "fastvec.native.examples.gridworld": EXAMPLE},
    packages=find_packages("src", include=["fastvec*"]) + ["fastvec.native.examples.gridworld"],
    ext_modules=cythonize(
        extensions,
        language_level=3,
        # (a process pool: Windows would re-run this script in each worker)
        nthreads=1 if sys.platform == "win32" else os.cpu_count() or 1,
        include_path=["src"],
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
    )
)
