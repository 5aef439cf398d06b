"""Compiled Cython kernels. Each module is small and single-purpose; the README's Layout lists them."""
