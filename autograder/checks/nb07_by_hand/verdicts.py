"""How an answer is judged: against PyTorch, its form before its values, and a hint only for values.

Every reference is PyTorch itself, computed at grading time in float64 on the grading device
(autograd's gradients, `autograd_grads`). None of it is an answer, because the answer runs with autograd and
PyTorch's BatchNorm refused (`calls.guarded`). A result's type, shape, dtype and device are checked
before its values (`check_form`), and the slip that explains wrong values (`matches`) is looked for
only once every result has the right form: a float32 gradient that is right to float32's precision
would otherwise "match" a slip it does not have.
"""
import torch

from autograder import checks
from autograder.checks import GradingError

CLOSE = dict(rtol=1e-6, atol=1e-9)  # "matches this slip": loose, so that round-off never hides one


def autograd_grads(loss_or_out, leaves, upstream=None):
    return list(torch.autograd.grad(loss_or_out, leaves, upstream))


def matches(got, expected):
    return (isinstance(got, torch.Tensor) and got.shape == expected.shape and got.device == expected.device
            and torch.allclose(got.double(), expected.double(), **CLOSE))


TYPED_EPS = (1e-5, 1e-3, 1e-4, 1e-6, 1e-8, 1e-12)  # the numbers an answer may write in for eps (1e-5: the default)


def eps_text(eps) -> str:
    """1e-5 for 1e-05, 0.1 for 0.1: eps as a learner writes it."""
    return f"{eps:.0e}".replace("e-0", "e-") if 0 < eps < 1e-2 else f"{eps:g}"


def typed_eps(got, case, gradient_with, left_out=True):
    """The eps an answer wrote in as a number, where `got` equals `gradient_with(eps)` for one of TYPED_EPS
    (or 0, eps left out, if `left_out`) that is not the case's own eps; None where none explains it. Where
    several do (1e-8 and 0 differ little next to a variance of 1), the closest."""
    found = []
    for eps in (*TYPED_EPS, 0.0) if left_out else TYPED_EPS:
        if eps != case["eps"]:
            candidate = gradient_with(eps)
            if matches(got, candidate):
                found.append((float((got.double() - candidate.double()).abs().max()), eps))
    return min(found)[1] if found else None


def form_problem(got, expected):
    """What is wrong with `got`'s type, shape, dtype or device against `expected` ('' if nothing)."""
    if not isinstance(got, torch.Tensor):
        return f"should be a torch.Tensor, got {checks.describe(got)}"
    if got.shape != expected.shape:
        return f"has shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    if got.dtype != expected.dtype:
        return (f"has dtype {got.dtype}, expected {expected.dtype}: return each result in the dtype of the inputs "
                "(new tensors with dtype= and device= of an input, or *_like)")
    if got.device != expected.device:
        return f"is on device {got.device}, expected {expected.device}: make new tensors on the inputs' device"
    return ""


def check_form(exercise, got, expected, shown, names, hint=None):
    """Type, shape, dtype and device of every part, before any value is compared. Only a wrong shape
    asks `hint()` (which looks at shapes first: a table sized from the largest index, a sum over the
    wrong axis); a wrong dtype or device is named as such, never explained by a slip of the values."""
    if isinstance(expected, torch.Tensor):
        parts = [(names[0], got, expected)]
    else:
        if not isinstance(got, (tuple, list)):
            checks.fail(exercise, f"should return a tuple of {len(expected)} tensors, got {checks.describe(got)}",
                        shown)
        if len(got) != len(expected):
            checks.fail(exercise, f"should return {len(expected)} values, got {len(got)}", shown)
        parts = list(zip(names, got, expected))
    for name, g, e in parts:
        problem = form_problem(g, e)
        if problem:
            found = hint() if hint is not None and problem.startswith("has shape") else ""
            checks.fail(exercise, f"{name} {problem}", shown, f"  hint: {found}" if found else "")


def expect_close_with_hint(exercise, got, expected, shown, names, hint=None, rtol=None, atol=None):
    """checks.expect_close after `check_form`, whose message gains `hint()` (the slip that explains the
    difference) where there is one, right after its first line: the hint is looked for only once the answer
    is known to be wrong in its values alone."""
    check_form(exercise, got, expected, shown, names, hint)
    try:
        checks.expect_close(exercise, got, expected, inputs=shown, names=names, rtol=rtol, atol=atol)
    except GradingError as err:
        found = hint() if hint is not None else ""
        if not found:
            raise
        first, _, rest = str(err).partition("\n")  # the hint before the inputs and values: class grading keeps
        raise GradingError(f"{first}\n  hint: {found}" + (f"\n{rest}" if rest else "")) from None  # 500 characters
