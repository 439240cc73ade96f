"""Seeded random inputs: the same seed gives the same tensor on every device."""
import torch

from autograder.learner.device import get_device


def randn(*shape, seed, dtype=torch.float64, device=None, scale=1.0):
    """Normal samples drawn on the CPU from `seed`, then moved, so CPU and GPU grade alike."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(shape, generator=generator, dtype=dtype) * scale
    return values.to(device or get_device())


def randint(high, *shape, seed, device=None):
    """Integers in [0, high), drawn like `randn`."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(high, shape, generator=generator).to(device or get_device())


def shapes(seed, count, max_ndim=3, max_size=5):
    """`count` random shapes of 1..max_ndim dimensions, each size in 1..max_size."""
    generator = torch.Generator().manual_seed(seed)
    result = []
    for _ in range(count):
        ndim = int(torch.randint(1, max_ndim + 1, (1,), generator=generator))
        result.append(tuple(int(s) for s in torch.randint(1, max_size + 1, (ndim,), generator=generator)))
    return result
