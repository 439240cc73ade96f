"""Notebook 10's inputs: queries, keys and values of shape (B, H, N, d) and (B, H, M, d), drawn from a seed, and
the layouts and stresses the curriculum's conventions name (heads transposed from (B, N, H, d), large logits).

Sizes follow the graded API: B the batch, H the heads, N the queries, M the keys and values, d a head's width.
A case is a dict of named inputs in the order the learner's function takes them; its layout is applied by
`laid_out` where the answer runs, because a copy on the way (the trusted boundary) could make it contiguous.
"""
import torch
import torch.nn.functional as F

from autograder.learner import inputs
from autograder.learner.device import get_device

LAYOUTS = ("contiguous", "heads-transposed", "each-its-own")
# "each-its-own": every input in a layout of its own (the core's kernel_layouts names), do the upstream gradient
# of `.sum().backward()`: ones expanded from one number (strides 0), as autograd hands it to a backward
EACH_ITS_OWN = {"q": "heads-transposed", "k": "transposed", "v": "non-contiguous", "o": "transposed",
                "do": "expanded"}
LARGE_LOGIT = 300.0  # the largest |score| of a large-logits case: exp of it overflows float32 (exp(89) is inf)
LOW_SCORE = -200.0  # about every score of a low-scores case: exp of it underflows to 0 in float32 and half precision
FAR_BELOW_ZERO = -88.0  # a row whose every score is below this has exp(score) < 2^-126 (float32's smallest normal)


def qkv(B, H, N, d, seed, M=None, dtype=torch.float64, large_logits=False, low_scores=False):
    """(q, k, v) drawn from `seed`; with `large_logits`, q and k scaled so that the largest |score| at scale
    d ** -0.5 is LARGE_LOGIT; with `low_scores`, q's first feature a whole number c and k's -c, the others whole
    numbers in [-2, 2], so that every score at scale d ** -0.5 is about LOW_SCORE (c² · scale) plus a few units:
    every row far below zero, and (whole numbers, d a power of 4) every score exact in half precision too."""
    M = N if M is None else M
    q = inputs.randn(B, H, N, d, seed=seed, dtype=torch.float64)
    k = inputs.randn(B, H, M, d, seed=seed + 1, dtype=torch.float64)
    v = inputs.randn(B, H, M, d, seed=seed + 2, dtype=torch.float64)
    if large_logits:
        factor = (LARGE_LOGIT / ((q @ k.mT) * d ** -0.5).abs().max()).sqrt()
        q, k = q * factor, k * factor
    if low_scores:
        if d < 2:
            raise ValueError("a low-scores case needs d >= 2: one feature shifts every score, the others vary it")
        c = round((-LOW_SCORE * d ** 0.5) ** 0.5)
        q, k = q.round().clamp(-2, 2), k.round().clamp(-2, 2)
        q[..., 0], k[..., 0] = c, -c
    return q.to(dtype), k.to(dtype), v.to(dtype)


def sdpa64(q, k, v, scale, causal):
    """PyTorch's attention in float64 (top-left causal mask: query i sees keys j <= i)."""
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal, scale=scale)


def backward_case(B, H, N, d, seed, M=None, dtype=torch.float64, causal=False, layout="contiguous",
                  large_logits=False, scale=None) -> dict:
    """{q, k, v, o, do, scale, causal, layout} for `attention_backward`: o is PyTorch's output for q, k, v (computed
    in float64, then rounded to `dtype`), do an upstream gradient drawn from the seed; `scale` d ** -0.5 unless
    given."""
    _layout(layout, causal, N, M)
    q, k, v = qkv(B, H, N, d, seed, M, dtype, large_logits)
    scale = d ** -0.5 if scale is None else scale
    o = sdpa64(q, k, v, scale, causal).to(dtype)
    do = _upstream(B, H, N, d, seed, dtype, layout)
    return {"q": q, "k": k, "v": v, "o": o, "do": do, "scale": scale, "causal": causal, "layout": layout}


def online_case(B, H, N, d, seed, block, M=None, dtype=torch.float64, causal=False, layout="contiguous",
                large_logits=False, low_scores=False, scale=None) -> dict:
    """{q, k, v, scale, causal, block, layout} for `online_attention` (`low_scores`: see `qkv`; `scale` d ** -0.5
    unless given)."""
    _layout(layout, causal, N, M)
    q, k, v = qkv(B, H, N, d, seed, M, dtype, large_logits, low_scores)
    scale = d ** -0.5 if scale is None else scale
    return {"q": q, "k": k, "v": v, "scale": scale, "causal": causal, "block": block, "layout": layout}


def flash_case(B, H, N, d, seed, M=None, dtype=torch.float64, causal=False, layout="contiguous",
               large_logits=False, low_scores=False, scale=None) -> dict:
    """{q, k, v, scale, causal, layout, do} for the flash kernels and `FlashAttention`: `do` is the upstream
    gradient of the backward (the forward's checks leave it out); `low_scores`: see `qkv`; `scale` d ** -0.5
    unless given."""
    _layout(layout, causal, N, M)
    q, k, v = qkv(B, H, N, d, seed, M, dtype, large_logits, low_scores)
    do = _upstream(B, H, N, d, seed, dtype, layout)
    scale = d ** -0.5 if scale is None else scale
    return {"q": q, "k": k, "v": v, "scale": scale, "causal": causal, "layout": layout, "do": do}


def _upstream(B, H, N, d, seed, dtype, layout):
    """The upstream gradient do: drawn from the seed, or ones (what `.sum().backward()` hands a backward) where
    every input has a layout of its own."""
    if layout == "each-its-own":
        return torch.ones(B, H, N, d, dtype=dtype, device=get_device())
    return inputs.randn(B, H, N, d, seed=seed + 3, dtype=dtype)


def _layout(layout, causal, N, M):
    if layout not in LAYOUTS:
        raise ValueError(f"layout is one of {', '.join(LAYOUTS)}, not {layout!r}")
    if causal and M is not None and M != N:
        raise ValueError("a causal case has as many keys as queries (the curriculum's convention)")


def far_below_zero(case) -> bool:
    """Whether every query row's largest visible score is below FAR_BELOW_ZERO (a low-scores case)."""
    scores = (case["q"].double() @ case["k"].double().mT) * case["scale"]
    if case["causal"]:
        scores = scores.masked_fill(~visible(case), -float("inf"))
    return scores.numel() > 0 and bool((scores.amax(-1) < FAR_BELOW_ZERO).all())


def visible(case, diagonal=0):
    """The (N, M) mask of the keys each query sees under a causal mask shifted by `diagonal` (0: key j <= query i)."""
    n, m = case["q"].shape[-2], case["k"].shape[-2]
    return torch.ones(n, m, dtype=torch.bool, device=case["q"].device).tril(diagonal)


def heads_transposed(t):
    """`t` (B, H, L, d) with the same values, stored as a (B, L, H, d) tensor transposed: how attention's heads come
    out of a projection of shape (B, L, H·d)."""
    return t.transpose(1, 2).contiguous().transpose(1, 2) if t.dim() == 4 else t


def torch_layout(t, layout):
    """`t`'s values as a torch view in `layout` (EACH_ITS_OWN's names): what a caller of a torch function hands it."""
    if layout == "heads-transposed":
        return heads_transposed(t)
    if layout == "transposed":
        return t.mT.contiguous().mT
    if layout == "non-contiguous":
        return torch.stack([t, torch.full_like(t, torch.nan)], dim=-1)[..., 0]  # a gap after every element
    if layout == "expanded":
        if not bool((t == t.flatten()[0]).all()):
            raise ValueError("an expanded input repeats one value: its tensor must hold one value")
        return t.flatten()[:1].reshape([1] * t.dim()).expand(t.shape)
    raise ValueError(f"unknown layout {layout!r}")


def laid_out(case) -> list:
    """The case's arguments as the learner's function takes them, every 4-D tensor in the case's layout."""
    values = {name: v for name, v in case.items() if name != "layout"}
    if case["layout"] == "heads-transposed":
        values = {name: heads_transposed(v) if isinstance(v, torch.Tensor) else v for name, v in values.items()}
    if case["layout"] == "each-its-own":
        values = {name: torch_layout(v, EACH_ITS_OWN[name]) if name in EACH_ITS_OWN else v
                  for name, v in values.items()}
    return list(values.values())


def shown(case) -> dict:
    """The case as a failure message shows it."""
    return {name: value for name, value in case.items()}
