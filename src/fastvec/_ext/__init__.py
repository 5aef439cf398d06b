"""Shared Cython declarations that the compiled kernels cimport: typedefs and the fused
``floating`` type (``_types.pxd``), constants such as the element-type codes and the GIL
threshold (``_constants.pxd``), and the OpenMP helpers (``_omp.pxd``). Only ``.pxd`` files:
nothing here is compiled into a module of its own or imported at run time.
"""
