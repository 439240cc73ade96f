"""How notebook 10's answers are judged: their form first, then their values against PyTorch in float64, and a
slip named where one explains the difference.

Tolerances are relative to each entry and to the largest entry of the reference (float32's round-off on scores
of a few hundred is about 1e-5 of them; every slip the checks name is off by far more).
"""
import contextlib

import torch

from autograder import checks
from autograder.checks import GradingError
from autograder.checks.nb10_attention import cases as attention_cases

# (rtol, share of the largest |reference| entry) by the result's dtype
CLOSE = {torch.float64: (1e-9, 1e-10), torch.float32: (1e-3, 1e-4),
         torch.float16: (1e-2, 5e-3), torch.bfloat16: (5e-2, 2e-2)}  # half precision: on a GPU only


def tolerance(expected) -> dict:
    rtol, share = CLOSE.get(expected.dtype, CLOSE[torch.float32])
    largest = expected.detach().double().abs().nan_to_num(0.0, 0.0, 0.0).max().item() if expected.numel() else 0.0
    return {"rtol": rtol, "atol": share * largest + 1e-12}


def matches(got, slip) -> bool:
    """Whether `got` is `slip` (a float64 tensor) to `got`'s precision."""
    if not isinstance(got, torch.Tensor) or got.shape != slip.shape:
        return False
    found = got.detach().double().cpu()
    slip = slip.detach().double().cpu()
    tol = tolerance(slip.to(got.dtype))
    return bool(torch.isfinite(found).all() and torch.allclose(found, slip, rtol=tol["rtol"], atol=tol["atol"]))


def nan_in_first_row_only(t) -> bool:
    """Whether the per-query tensor `t` (B, H, N, d) has NaN in its first query row and nowhere else: what a causal
    mask that hides a query's own key gives (the first query then sees no key at all), and not what an overflow
    gives (NaN wherever a score overflowed)."""
    if not isinstance(t, torch.Tensor) or t.dim() != 4 or t.shape[-2] < 2:
        return False
    return bool(torch.isnan(t[..., 0, :]).any()) and not bool(torch.isnan(t[..., 1:, :]).any())


def check_form(exercise, got, expected, names, shown, allowed_dtypes=None):
    """A tuple of len(expected) tensors of the expected shapes and devices; dtypes as `expected`'s, or one of
    `allowed_dtypes[i]` where given."""
    if not isinstance(got, (tuple, list)):
        checks.fail(exercise, f"should return a tuple of {len(expected)} tensors ({', '.join(names)}), got "
                    f"{checks.describe(got)}", shown)
    if len(got) != len(expected):
        checks.fail(exercise, f"should return {len(expected)} values ({', '.join(names)}), got {len(got)}", shown)
    for i, (name, g, e) in enumerate(zip(names, got, expected)):
        if not isinstance(g, torch.Tensor):
            checks.fail(exercise, f"{name} should be a torch.Tensor, got {checks.describe(g)}", shown)
        if g.shape != e.shape:
            checks.fail(exercise, f"{name} has shape {tuple(g.shape)}, expected {tuple(e.shape)}", shown)
        dtypes = (allowed_dtypes or {}).get(i, (e.dtype,))
        if g.dtype not in dtypes:
            checks.fail(exercise, f"{name} has dtype {g.dtype}, expected {' or '.join(map(str, dtypes))}", shown)
        if g.device != e.device:
            checks.fail(exercise, f"{name} is on device {g.device}, expected {e.device}", shown)


def check_values(exercise, got, expected, names, shown, hint):
    """Every part within `tolerance` of the reference; a failure starts with `hint()`, the slip that explains it,
    where there is one (a message shown to the learner may be cut after its first few hundred characters)."""
    for name, g, e in zip(names, got, expected):
        e = e.to(g.dtype) if g.dtype != e.dtype else e
        try:
            checks.expect_close(exercise, g, e, inputs=shown, names=[name], **tolerance(e))
        except GradingError as err:
            found = hint()
            if not found:
                raise
            raise GradingError(f"{exercise}: {found}\n{err}") from None  # the slip first: a long message is cut


RUNNING_MAX_AT_ZERO = (
    "rows whose scores are all far below zero (every score about −200, below −88: exp of it is 0 in float32 and "
    "half precision) came out NaN or wrong: does your running max start at 0 instead of −∞? Started at 0, every "
    "exp(s − m) of such a row underflows to 0, the running sum is 0 and o = 0/0. Start it at −∞ (torch.full(..., "
    "-math.inf), tl.full([BLOCK_N], float('-inf'), ...)), so that the first tile sets it to the row's own max")


@contextlib.contextmanager
def far_below_zero(exercise, case):
    """A failure with NaN on a case whose every row scores far below zero (`cases.far_below_zero`) starts by naming
    the running max that starts at 0 (its sum underflows to 0, and 0/0 is NaN); other failures pass unchanged."""
    try:
        yield
    except GradingError as err:
        if not attention_cases.far_below_zero(case) or RUNNING_MAX_AT_ZERO in str(err) or "NaN" not in str(err):
            raise
        raise GradingError(f"{exercise}: {RUNNING_MAX_AT_ZERO}\n{err}") from None
