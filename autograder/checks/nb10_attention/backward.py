"""`attention_backward(q, k, v, o, do, scale, causal)` against autograd through `F.scaled_dot_product_attention`
in float64, by hand: autograd refused, and no ATen attention or backward kernel allowed however reached.

The reference is autograd's, never the formula. Where the values are wrong, the slips learners write are looked
for, each as autograd's gradients plus what the slip adds (`_slips`): dS without its −D term, D summed over the
other axis, the scale missing from dQ or dK, the causal mask off by one, the mask ignored.
"""
import math

import torch
import torch.nn.functional as F

from autograder.checks import battery
from autograder.checks.nb10_attention import cases as attention_cases
from autograder.checks.nb10_attention import verdicts
from autograder.checks.nb10_attention.calls import guarded_call

NAMES = ("dq", "dk", "dv")
def _grads(case, attn_mask=None, causal=None):
    """Autograd's (dq, dk, dv) in float64 through PyTorch's attention, with `attn_mask` where given."""
    q, k, v = (case[n].detach().double().requires_grad_(True) for n in ("q", "k", "v"))
    causal = case["causal"] if causal is None else causal
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal and attn_mask is None,
                                         scale=case["scale"])
    return torch.autograd.grad(out, (q, k, v), case["do"].double())


def reference_attention_backward(case):
    """(dq, dk, dv): autograd's, in float64."""
    return _grads(case)


def _probabilities(case):
    """P, as PyTorch's attention weighs the values (float64), and autograd's gradient with respect to it."""
    q, k, v = (case[n].double() for n in ("q", "k", "v"))
    scores = (q @ k.mT) * case["scale"]
    if case["causal"]:
        scores = scores.masked_fill(~attention_cases.visible(case, 0), -math.inf)
    p = torch.softmax(scores, dim=-1).requires_grad_(True)
    (dp,) = torch.autograd.grad(p @ v, p, case["do"].double())
    return p.detach(), dp


def _slips(case, reference):
    """[(what the slip is, its (dq, dk, dv) in float64)]: autograd's gradients plus each slip's error in dS."""
    dq, dk, dv = reference
    q, k = case["q"].double(), case["k"].double()
    scale = case["scale"]
    p, dp = _probabilities(case)
    per_row = (p * dp).sum(-1, keepdim=True)  # one number per query row
    errors = [("dS without its −D term: the softmax's backward subtracts, in every row, the sum over that row's "
               "keys of P ∘ dP (equal to the row's sum of dO ∘ O) before multiplying by P", p * per_row),
              ("D summed over the wrong axis: D has one number per query row, the sum over that row's keys of "
               "P ∘ dP, or over the head's width of dO ∘ O (keepdim=True, so that it broadcasts along the keys)",
               p * (per_row - (p * dp).sum(-2, keepdim=True)))]
    if p.shape[-1] == p.shape[-2]:
        errors.append(("D broadcast along the wrong axis: D has one number per query row; a sum without "
                       "keepdim=True subtracts D[j] from column j instead of D[i] from row i",
                       p * (per_row - per_row.mT)))
    slips = [(what, (dq + scale * error @ k, dk + scale * error.mT @ q, dv)) for what, error in errors]
    slips += [("the scale is missing from dQ: S = Q Kᵀ · scale, so the chain rule multiplies dQ by the scale too",
               (dq / scale, dk, dv)),
              ("the scale is missing from dK: S = Q Kᵀ · scale, so the chain rule multiplies dK by the scale too",
               (dq, dk / scale, dv))]
    if p.shape[1] > 1:
        every_heads_do = case["do"].double().sum(1, keepdim=True)
        slips.append(("dV mixes the heads: a head's dV is its own Pᵀ dO, summed over its queries only; an einsum or a "
                      "sum that also runs over the head index adds every head's dO", (dq, dk, p.mT @ every_heads_do)))
    if case["causal"]:
        slips += [("the causal mask is off by one: query i sees keys j ≤ i (its own key included), not j ≤ i + 1",
                   _grads(case, attn_mask=attention_cases.visible(case, 1))),
                  ("the causal mask is ignored: with causal=True, query i sees only keys j ≤ i",
                   _grads(case, causal=False))]
    return slips


def slip_in(got, case, reference) -> str:
    """The slip of `_slips` that `got` (dq, dk, dv) shows, or "" (the flash backward's checks ask too)."""
    if case["causal"] and verdicts.nan_in_first_row_only(got[0]) and not any(torch.isnan(r).any() for r in reference):
        return ("NaN in dq's first query row (row 0 in code) and in no other row: the causal mask is off by one (j < i "
                "leaves the first query no key at all, and a softmax over nothing but −∞ is 0/0); query i sees keys "
                "j ≤ i")
    for what, slip in _slips(case, reference):
        if any(verdicts.matches(g, s) and not verdicts.matches(g, r) for g, s, r in zip(got, slip, reference)):
            return what
    return ""


def check_attention_backward(exercise, fn, cases, stress=None, what="q, k and v"):
    """`fn(q, k, v, o, do, scale, causal)` -> (dq, dk, dv) against autograd on every case; `stress` names the
    battery's stress the cases were built with, so that a failure says which input broke the answer."""
    with battery.stressed(exercise, stress, what=what):
        for case in cases:
            got, _ = guarded_call(exercise, fn, case)
            shown = attention_cases.shown(case)
            reference = [r.to(case["q"].dtype) for r in reference_attention_backward(case)]
            verdicts.check_form(exercise, got, reference, NAMES, shown)
            verdicts.check_values(exercise, got, reference, NAMES, shown,
                                  hint=lambda: slip_in(got, case, reference_attention_backward(case)))
