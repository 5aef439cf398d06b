"""Sections of ``python -m fastvec.bench``; each module exposes ``run(quick: bool)``."""
