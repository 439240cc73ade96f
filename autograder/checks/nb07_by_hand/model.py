"""Notebook 07's model: its parameters (`PARAM_NAMES`, `init_params`), its forward pass (`forward`),
and the slipped variants of that pass which hints differentiate (`slipped_loss`, `bn_forward`).

Why the model lives here: `manual_backward` and `train_by_hand` are graded against autograd on
*the notebook's* model, so the checks must run the very forward pass the learner differentiates.
In trusted grading the test cells run in the grader, which sees only the names of the answer cells,
and a forward defined in the student's notebook could be redefined by a submission. So the model
is defined once, here, and the notebook imports it and shows its source.

The slipped variants are the same arithmetic with one step changed (a BatchNorm whose mean and
variance are treated as constants, normalised with the unbiased variance, a tanh slope taken from
its input, a loss summed instead of averaged, ...): autograd through one of them returns what a
backward pass with that slip would have, so a failure message can name the slip. They are for hints
only, and sit beside `forward` so that the two read side by side.
"""
import torch
import torch.nn.functional as F

from autograder.learner import inputs
from autograder.learner.device import get_device

PARAM_NAMES = ("C", "W1", "b1", "gamma", "beta", "W2", "b2")
EPS = 1e-5


def init_params(vocab, context, embed, hidden, *, seed, dtype=torch.float32, device=None):
    """The model's parameters at their usual start: a standard-normal embedding table, weights scaled
    by 1/sqrt(fan-in) (the last layer 10x smaller, so the first loss is near log(vocab)), gamma 1,
    biases and beta 0. Drawn on the CPU from `seed`, so every device starts from the same numbers."""
    device = device or get_device()

    def draw(*shape, k, scale):
        return inputs.randn(*shape, seed=seed * 100 + k, dtype=dtype, device=device, scale=scale)

    def const(value, size):
        return torch.full((size,), float(value), dtype=dtype, device=device)

    return {"C": draw(vocab, embed, k=0, scale=1.0),
            "W1": draw(context * embed, hidden, k=1, scale=(context * embed) ** -0.5),
            "b1": const(0, hidden), "gamma": const(1, hidden), "beta": const(0, hidden),
            "W2": draw(hidden, vocab, k=2, scale=0.1 * hidden ** -0.5), "b2": const(0, vocab)}


def forward(params, tokens, targets, eps=EPS):
    """Mean cross-entropy of the model on one batch, and the cache of what its backward pass reads.

    tokens (N, T) int64, targets (N,) int64. Shapes: C (V, D), W1 (T*D, H), b1/gamma/beta (H,),
    W2 (H, V), b2 (V,). BatchNorm runs in training mode: the batch's own mean and biased variance.
    """
    C, W1, b1, gamma, beta, W2, b2 = (params[name] for name in PARAM_NAMES)
    N = tokens.shape[0]
    emb = C[tokens]                             # (N, T, D)  one row of C per token
    x = emb.reshape(N, -1)                      # (N, T*D)   the T rows side by side
    h = x @ W1 + b1                             # (N, H)
    mean = h.mean(0)                            # (H,)
    var = ((h - mean) ** 2).mean(0)             # (H,)       biased: divided by N
    rstd = (var + eps) ** -0.5                  # (H,)
    x_hat = (h - mean) * rstd                   # (N, H)     each column: mean 0, variance ~1
    bn = gamma * x_hat + beta                   # (N, H)
    a = torch.tanh(bn)                          # (N, H)
    logits = a @ W2 + b2                        # (N, V)
    logp = logits.log_softmax(-1)               # (N, V)
    loss = -logp[torch.arange(N, device=tokens.device), targets].mean()
    cache = {"tokens": tokens, "emb": emb, "x": x, "h": h, "mean": mean, "var": var, "rstd": rstd,
             "x_hat": x_hat, "bn": bn, "a": a, "logits": logits, "logp": logp}
    return loss, cache


class _SlopeFromInput(torch.autograd.Function):
    """tanh whose backward uses 1 - input**2 instead of 1 - output**2 (a slip, for hints only)."""

    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return torch.tanh(z)

    @staticmethod
    def backward(ctx, g):
        (z,) = ctx.saved_tensors
        return g * (1 - z ** 2)


def slipped_loss(params, tokens, targets, slip, eps=EPS):
    """The model's loss as a slipped backward pass would differentiate it (for hints only): the
    same arithmetic as `forward`, with one step changed. A unit test holds it to `forward` at slip None."""
    C, W1, b1, gamma, beta, W2, b2 = (params[name] for name in PARAM_NAMES)
    N = tokens.shape[0]
    h = C[tokens].reshape(N, -1) @ W1 + b1
    bn = bn_forward(h, gamma, beta, eps, slip)
    a = _SlopeFromInput.apply(bn) if slip == "tanh slope" else torch.tanh(bn)
    logits = a @ W2 + b2
    if slip == "no one-hot":
        return logits.logsumexp(-1).mean()
    loss = F.cross_entropy(logits, targets, reduction="sum")
    return loss if slip == "summed" else loss / N


def bn_forward(h, gamma, beta, eps, slip=None):
    """Training-mode BatchNorm over dim 0, or one of its slips: statistics treated as constants,
    the unbiased variance, eps outside the square root or left out."""
    mean = h.mean(0)
    var = h.var(0, unbiased=slip == "unbiased")
    if slip in ("no mean term", "no mean or variance term"):
        mean = mean.detach()
    if slip in ("no variance term", "no mean or variance term"):
        var = var.detach()
    rstd = {"eps outside": 1 / (var.sqrt() + eps), "no eps": 1 / var.sqrt()}.get(slip, (var + eps) ** -0.5)
    return gamma * (h - mean) * rstd + beta
