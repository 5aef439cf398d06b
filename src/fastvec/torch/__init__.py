"""Device-resident environments written in plain torch ops (``pip install fastvec[torch]``).

Importing :mod:`fastvec` never imports torch; import this module explicitly::

    from fastvec.torch import TorchCartPole
"""
from fastvec.torch.cartpole import TorchCartPole, resolve_device

__all__ = ["TorchCartPole", "resolve_device"]
