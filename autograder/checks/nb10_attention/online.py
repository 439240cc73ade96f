"""`online_attention(q, k, v, scale, causal, block)` -> (o, lse) against `F.scaled_dot_product_attention` and the
log-sum-exp of the scores in float64, with autograd refused, PyTorch's attention kernels refused, and every
tensor the answer makes watched: one of N×M elements or more (all the scores of the queries against all the
keys, or a mask as large) fails, since keys must come in tiles of `block`.

Where the values are wrong, the slips learners write are looked for: `lse` without the running max, or in base
2; masked scores set to 0 where the max needs −∞; the causal mask off by one; and the output not rescaled when
the running max grows, told apart by behaviour (`rescale_cases`): right when every row's largest score comes in
the first tile of keys, wrong when it comes in the last.
"""
import functools
import math

import torch

from autograder import checks
from autograder.checks import GradingError, battery
from autograder.checks.nb10_attention import cases as attention_cases
from autograder.checks.nb10_attention import verdicts
from autograder.checks.nb10_attention.calls import guarded_call
from autograder.learner import inputs

NAMES = ("o", "lse")


def reference_online_attention(case):
    """(o, lse) in float64: PyTorch's attention, and the natural log of the sum over each row's visible keys of
    exp(score)."""
    o = attention_cases.sdpa64(case["q"], case["k"], case["v"], case["scale"], case["causal"])
    return o, torch.logsumexp(_scores(case, 0), dim=-1)


def _scores(case, diagonal, masked=-math.inf):
    scores = (case["q"].double() @ case["k"].double().mT) * case["scale"]
    if case["causal"]:
        scores = scores.masked_fill(~attention_cases.visible(case, diagonal), masked)
    return scores


def _forward(scores, v):
    return torch.softmax(scores, dim=-1) @ v.double(), torch.logsumexp(scores, dim=-1)


def _slips(case, reference):
    """[(what, (o, lse))] in float64."""
    o, lse = reference
    scores = _scores(case, 0)
    slips = [("lse without the max: with a running max m and sum l = Σ exp(s − m), the row's log-sum-exp is "
              "m + log(l), not log(l)", (o, lse - scores.amax(-1))),
             ("lse in base 2: the API's lse is the natural log (torch.log, torch.logsumexp)", (o, lse / math.log(2)))]
    if case["causal"]:
        slips += [("masked scores set to 0: a masked key must weigh nothing, so its score is −∞ (exp(−∞) = 0); a "
                   "score of 0 still counts exp(0 − m) and can even be the row's max",
                   _forward(_scores(case, 0, masked=0.0), case["v"])),
                  ("the causal mask is off by one: query i sees keys j ≤ i (its own key included), not j ≤ i + 1",
                   _forward(_scores(case, 1), case["v"])),
                  ("the causal mask is ignored: with causal=True, query i sees only keys j ≤ i",
                   _forward(_scores({**case, "causal": False}, 0), case["v"]))]
    return slips


def rescale_cases(case, seed=7) -> tuple:
    """Two cases of the shape of `case` (not causal, a whole number of tiles of keys) where every row's largest
    score comes from one tile of keys: the first tile (the running max never grows after it), then the last."""
    q, block = case["q"].abs(), case["block"]
    *outer, m, d = case["k"].shape
    tiles = max(2, -(-m // block))
    draw = functools.partial(inputs.randn, dtype=q.dtype, device=q.device)
    dominant = draw(*outer, block, d, seed=seed, scale=0.5) + 4.0  # every query (entries >= 0) scores highest here
    others = draw(*outer, block * (tiles - 1), d, seed=seed + 1)
    values = draw(*outer, block * tiles, d, seed=seed + 2)
    first = {**case, "q": q, "k": torch.cat([dominant, others], -2), "v": values, "causal": False}
    last = {**first, "k": torch.cat([others, dominant], -2), "v": values.roll(-block, dims=-2)}
    return first, last


def watched_size(case) -> int:
    """N·M when a tensor of N×M elements is more than any tensor the answer needs (its inputs, its output, the
    scores of one tile for every query), else 0: the allocation watch applies to such a case only."""
    (b, h, n, d), m = case["q"].shape, case["k"].shape[-2]
    needed = b * h * max(n, m) * max(d, min(case["block"], m))
    return n * m if n * m > needed else 0


def _right_on(exercise, fn, case) -> bool:
    """Whether the answer is right on `case`; an answer that fails there in any way is not (the failure that
    asked is the news, not this one)."""
    try:
        got, _ = guarded_call(exercise, fn, case)
    except GradingError:
        return False
    reference = [r.to(case["q"].dtype) for r in reference_online_attention(case)]
    return isinstance(got, (tuple, list)) and len(got) == 2 and all(map(verdicts.matches, got, reference))


def slip_in(got, case, reference) -> str:
    """The slip of `_slips` that `got` (o, lse) shows, or "" (the flash kernels' checks ask too)."""
    if case["causal"] and verdicts.nan_in_first_row_only(got[0]):
        return ("NaN in the first query row (row 0 in code) and nowhere else: the causal mask is off by one (j < i "
                "leaves the first query no key at all, so its running max stays −∞ and exp(−∞ − (−∞)) is NaN); query "
                "i sees keys j ≤ i")
    for what, slip in _slips(case, reference):
        if any(verdicts.matches(g, s) and not verdicts.matches(g, r) for g, s, r in zip(got, slip, reference)):
            return what
    return ""


def _online_slip(exercise, fn, got, case, reference):
    found = slip_in(got, case, reference)
    if found:
        return found
    first, last = rescale_cases(case)
    if _right_on(exercise, fn, first) and not _right_on(exercise, fn, last):
        return ("right when every row's largest score is in the first tile of keys, wrong when it comes in a later "
                "tile: when a tile raises the running max from m_old to m_new, the output accumulated so far (and "
                "the running sum) must be rescaled by exp(m_old − m_new)")
    return ""


def check_online_attention(exercise, fn, cases, stress=None, what="q, k and v"):
    """`fn(q, k, v, scale, causal, block)` -> (o, lse) against PyTorch on every case, no tensor of N×M elements
    or more allowed; `stress` names the battery's stress the cases were built with."""
    with battery.stressed(exercise, stress, what=what):
        for case in cases:
            with verdicts.far_below_zero(exercise, case):
                _check_online_case(exercise, fn, case)


def _check_online_case(exercise, fn, case):
    """One case: the N×M watch, then the form and the values against PyTorch."""
    got, most = guarded_call(exercise, fn, case)
    shown = attention_cases.shown(case)
    n, m, limit = case["q"].shape[-2], case["k"].shape[-2], watched_size(case)
    if limit and isinstance(most, list) and len(most) == 3 and isinstance(most[0], int) and most[0] >= limit:
        checks.fail(exercise, f"made a tensor of shape {tuple(most[1])} ({most[0]:,} elements, by {most[2]}): "
                    f"N×M = {n}×{m} = {limit:,} elements or more, as many as all the scores of the queries "
                    "against all the keys. Online attention never holds them: visit the keys in tiles of "
                    "`block` (scores, masks and weights of one tile at a time)", shown)
    o, lse = reference_online_attention(case)
    expected = [o.to(case["q"].dtype), lse.to(case["q"].dtype)]
    verdicts.check_form(exercise, got, expected, NAMES, shown,
                        allowed_dtypes={1: tuple(dict.fromkeys((torch.float32, case["q"].dtype)))})
    verdicts.check_values(exercise, got, expected, NAMES, shown,
                          hint=lambda: _online_slip(exercise, fn, got, case, (o, lse)))
