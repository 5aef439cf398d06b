import os

# Headless rendering for pygame-backed envs.
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
