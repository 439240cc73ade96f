"""Modules whose parameters are drawn from a seed: the models that several notebooks' checks build
(04's MLPs, 08's critics, cells and per-sample models).

Weights come from `autograder.learner.inputs` (drawn on the CPU from a seed, then moved), so a check
grades the same numbers on every device. A model given as a function that builds it is built without
touching the global random generator: grading leaves the notebook's random stream as it found it.
"""
import torch
from torch import nn

from autograder.learner import inputs
from autograder.learner.device import get_device


def seeded(module, seed, dtype=torch.float64, device=None):
    """`module` in `dtype` on `device`, every parameter drawn from `seed` (scaled by 1/sqrt(fan-in))."""
    device = device or get_device()
    if not isinstance(module, nn.Module):
        with torch.random.fork_rng(devices=[]):
            module = module()
    module.to(dtype=dtype, device=device)
    with torch.no_grad():
        for i, p in enumerate(module.parameters()):
            fan_in = p.shape[-1] if p.dim() > 1 else p.numel()
            p.copy_(inputs.randn(*p.shape, seed=seed * 1000 + i, dtype=dtype, device=device, scale=fan_in ** -0.5))
    return module
