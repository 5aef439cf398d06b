"""Compiled Cython kernels. Each module is small and single-purpose; see DESIGN.md."""
