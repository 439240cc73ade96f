"""The seeded models that notebook 04's checks build, and the notebook's prose uses (their
parameters drawn by `autograder.checks.seeded`, the same numbers on every device)."""
import torch
from torch import nn

from autograder.checks.seeded import seeded
from autograder.learner import inputs


def tanh_mlp(sizes, seed, dtype=torch.float64, device=None):
    """Linear layers of the given sizes with tanh between them (none after the last), seeded:
    the small network most checks of notebook 04 train, freeze or walk."""
    layers = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(lambda n_in=n_in, n_out=n_out: nn.Linear(n_in, n_out))
        if i < len(sizes) - 2:
            layers.append(nn.Tanh)
    return seeded(lambda: nn.Sequential(*[make() for make in layers]), seed, dtype, device)


class LoRALinear(nn.Module):
    """base(x) + (x A^T) B^T: a full linear layer plus a low-rank update, as in LoRA."""

    def __init__(self, n_in, n_out, rank):
        super().__init__()
        self.base = nn.Linear(n_in, n_out)
        self.lora_A = nn.Parameter(torch.randn(rank, n_in) / n_in ** 0.5)  # LoRA's start: A random,
        self.lora_B = nn.Parameter(torch.zeros(n_out, rank))                # B zero (no change yet)

    def forward(self, x):
        return self.base(x) + (x @ self.lora_A.T) @ self.lora_B.T


class LoRANet(nn.Module):
    """embed -> tanh -> LoRA block (residual) -> LayerNorm -> head: ten named parameters."""

    def __init__(self, n_in=5, hidden=8, n_out=3, rank=2):
        super().__init__()
        self.embed = nn.Linear(n_in, hidden)
        self.block = LoRALinear(hidden, hidden, rank)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, n_out)

    def forward(self, x):
        h = torch.tanh(self.embed(x))
        return self.head(self.norm(h + torch.tanh(self.block(h))))


class TwoHeads(nn.Module):
    """A shared trunk and two heads; returns (trunk features, head a, head b)."""

    def __init__(self, n_in=4, hidden=6):
        super().__init__()
        self.trunk = nn.Linear(n_in, hidden)
        self.head_a = nn.Linear(hidden, 2)
        self.head_b = nn.Linear(hidden, 3)

    def forward(self, x):
        h = torch.tanh(self.trunk(x))
        return h, self.head_a(h), self.head_b(h)


def lora_net(seed, dtype=torch.float64, device=None):
    return seeded(LoRANet, seed, dtype, device)


def deep_stack(seed, dtype=torch.float64, device=None, layers=12, width=3):
    """`layers` Linear+Tanh pairs: parameter names '0.weight', '2.weight', ..., '22.weight'."""
    return seeded(lambda: nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(width, width), nn.Tanh())]),
                  seed, dtype, device)


def two_heads(seed, dtype=torch.float64, device=None):
    return seeded(TwoHeads, seed, dtype, device)


def batch_for(model, n, seed, dtype, device):
    """n seeded inputs of the width of the model's first Linear layer."""
    n_in = next(m for m in model.modules() if isinstance(m, nn.Linear)).in_features
    return inputs.randn(n, n_in, seed=seed, dtype=dtype, device=device)


def describe_model(model):
    names = [n for n, _ in model.named_parameters()]
    return f"{type(model).__name__} with parameters {names}"
