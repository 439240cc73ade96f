"""How every check of notebook 04 calls the learner's code and reports the case it failed on.

`run_case` is `checks.call_student` with the case named under any failure; `summary` describes
what came back; `expect_close_reordered` compares float results that sum the same terms in
another order (chunks, a hand-written formula against `F.kl_div`), with tolerances loose enough
for that and far tighter than any wrong answer is off.
"""
import torch

from autograder import checks
from autograder.checks import GradingError, boundary, call_student, expect_close
from autograder.checks.compare import REORDERED_TOLERANCES

# Drivers that build graphs run with gradient tracking on, whatever the notebook's own cells left the
# kernel in (a predict that switched it off loses its own marks, not those of every later exercise).
GRAD_ON = torch.enable_grad()


def run_case(exercise, fn, case, *args, **kwargs):
    """checks.call_student, with the case named under any failure it reports."""
    try:
        return call_student(exercise, fn, *args, **kwargs)
    except GradingError as err:
        raise GradingError(f"{err}\n  case: {case}") from None


def summary(value):
    """checks.describe, but a sequence is shown item by item, tensors by their shape only."""
    if isinstance(value, (list, tuple)):
        items = [f"tensor{tuple(v.shape)}" if isinstance(v, torch.Tensor) else checks.describe(v) for v in value[:6]]
        more = ", ..." if len(value) > 6 else ""
        return f"a {type(value).__name__} of {len(value)}: [{', '.join(items)}{more}]"
    return checks.describe(value)


def type_name(value):
    """The class name of a value, or of what it stood for when it came back from the kernel as a stand-in."""
    return value.type_name if isinstance(value, (boundary.Opaque, boundary.Raised)) else type(value).__name__


def expect_close_reordered(exercise, got, expected, *, case, names):
    """expect_close with REORDERED_TOLERANCES; the case is named right under the headline."""
    rtol, atol = REORDERED_TOLERANCES[expected[0].dtype]
    try:
        expect_close(exercise, tuple(got), tuple(expected), names=names, rtol=rtol, atol=atol)
    except GradingError as err:
        headline, _, details = str(err).partition("\n")
        raise GradingError(f"{headline}\n  case: {case}" + (f"\n{details}" if details else "")) from None


def unreadable(exercise, answer, case, what="the call"):
    """Fail: `answer` is not what the driver returns, so the learner's answer did not come back as data."""
    checks.fail(exercise, f"no readable account of {what} came back: {summary(answer)}", details=f"  case: {case}")
