"""How notebook 10's answers are judged: their form first, then their values against PyTorch in float64, and a
slip named where one explains the difference.

Tolerances are relative to each entry and to the largest entry of the reference (float32's round-off on scores
of a few hundred is about 1e-5 of them; every slip the checks name is off by far more).
"""
import torch

from autograder import checks
from autograder.checks import GradingError

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
