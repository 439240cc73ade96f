"""The checks of the closed-form VJP exercises: the learner's function on private copies of a case's
inputs (same strides), under the guards of `watch`, compared with autograd's result by dtype.

A case drawn for one of the battery's stresses (`autograder.checks.battery`) is checked inside
`battery.trying`, so that a failure names the stress and its usual cause. A non-contiguous or
expanded case is first checked with the same values in contiguous memory: a wrong formula fails
there with the plain message, and only what the layout alone breaks is blamed on the layout."""
import functools

import torch

from autograder import checks
from autograder.checks import battery
from autograder.checks.nb03_vjp.cases import private_copy, tolerances
from autograder.checks.nb03_vjp.rules import BY_HAND
from autograder.checks.nb03_vjp.watch import ALLOCATION_FACTOR, ALLOCATION_FLOOR, watched
from autograder.checks.op_watch import storage_bytes
from autograder.checks.rules import guards_of


def _allocation_limit(values, broadcast_bytes=0):
    """The largest tensor a VJP may allocate: ALLOCATION_FACTOR times its largest input (or input
    broadcast against the others), at least ALLOCATION_FLOOR bytes."""
    largest = max((max(storage_bytes(v), v.numel() * v.element_size()) for v in values if isinstance(v, torch.Tensor)),
                  default=0)  # an expanded input counts the elements it shows
    return max(ALLOCATION_FACTOR * max(largest, broadcast_bytes), ALLOCATION_FLOOR)


def call_vjp(exercise, fn, case, *, forbidden_calls=(), forbidden_ops=()):
    """The learner's `fn(*case.inputs.values())`, on private copies with the same strides, without
    autograd, PyTorch's backward kernels, the forbidden calls, or a Jacobian-sized allocation."""
    originals = list(case.inputs.values())
    shown = case.shown_inputs()
    guards = dict(forbidden_ops=forbidden_ops, forbidden_calls=forbidden_calls,
                  limit_bytes=_allocation_limit(originals, case.broadcast_bytes))
    driver = functools.partial(run_vjp, exercise, fn, originals, shown, guards)
    # the shown inputs (the layout described too) label a failure
    return checks.call_student(exercise, driver, *shown.values(), names=list(shown),
                               **guards_of(BY_HAND, exercise))


def run_vjp(exercise, fn, originals, shown, guards, *_shown):
    """Driver: fn on private copies of `originals` that keep their strides (call_student's own copies
    of what it is given would lose a sliced or expanded layout), under `watched(**guards)`."""
    private = [private_copy(v) for v in originals]
    with watched(exercise, shown, **guards):
        return fn(*private)


def _case_tolerance(case):
    expected = case.expected if isinstance(case.expected, torch.Tensor) else case.expected[0]
    return case.tolerance or tolerances(expected.dtype)


def check_cases(exercise, cases, check_one):
    """`check_one(case)` for every case: a stressed case inside `battery.trying`, and a strided or
    expanded one after its contiguous twin (`Case.contiguous_twin`) has passed."""
    for case in cases:
        layout = case.layout_stress()
        if layout is not None:
            check_one(case.contiguous_twin())
        stress, what = (case.stress, "input") if case.stress else layout or (None, None)
        reason = case.reason if case.stress else None
        with battery.stressed(exercise, stress, what=what, reason=reason):
            check_one(case)


def check_vjp(exercise, fn, cases, *, forbidden_calls=()):
    """Run the learner's VJP on every case and compare with autograd, tolerances by dtype."""
    def check_one(case):
        got = call_vjp(exercise, fn, case, forbidden_calls=forbidden_calls)
        rtol, atol = _case_tolerance(case)
        checks.expect_close(exercise, got, case.expected, inputs=case.shown_inputs(), names=case.names,
                            rtol=rtol, atol=atol)

    check_cases(exercise, cases, check_one)


def check_unbroadcast(exercise, fn, cases, *, forbidden_calls=("sum_to_size",)):
    """check_vjp for `unbroadcast(g, shape)`, naming the classic trap: a 0-d result for a shape that
    has dimensions comes from `g.sum(dim=())`, which sums every dimension, not none."""
    def check_one(case):
        target, g = tuple(case.inputs["shape"]), case.inputs["g"]
        try:
            got = call_vjp(exercise, fn, case, forbidden_calls=forbidden_calls)
        except checks.GradingError as err:
            if " raised " not in str(err) or g.dim() != len(target):
                raise
            raise checks.GradingError(f"{err}\n  Here broadcasting added no leading dimension (extra == 0): if your "
                                      "code sums over dim=tuple(range(extra)), remember that dim=() sums every "
                                      "dimension, not none.") from None
        if isinstance(got, torch.Tensor) and got.dim() == 0 and target != ():
            checks.fail(exercise, f"returned a 0-d tensor for shape {target}: a sum over dim=() sums every dimension, "
                        "not none, and `g.sum(dim=tuple(range(extra)))` does exactly that when broadcasting added no "
                        "leading dimension (extra == 0). Skip that sum when there is nothing to remove.",
                        case.shown_inputs())
        rtol, atol = _case_tolerance(case)
        checks.expect_close(exercise, got, case.expected, inputs=case.shown_inputs(), names=case.names,
                            rtol=rtol, atol=atol)

    check_cases(exercise, cases, check_one)
