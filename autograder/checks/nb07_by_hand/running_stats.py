"""`batchnorm_update_running(running_mean, running_var, x, momentum)`: nn.BatchNorm1d's new running
statistics, against `F.batch_norm`'s own update, returned as new tensors with every argument left as
it was (`run_keeping_inputs` reports which ones changed); hints name the momentum convention and the
variance kept (unbiased, over every value of a channel).
"""
import functools

import torch
import torch.nn.functional as F

from autograder import checks
from autograder.checks import battery
from autograder.checks.nb07_by_hand.calls import LAYOUTS, guarded, private_copies, stressed_case
from autograder.checks.nb07_by_hand.verdicts import expect_close_with_hint, matches
from autograder.learner import inputs
from autograder.learner.device import get_device


def running_case(shape, momentum, *, seed, dtype=torch.float64, device=None):
    """{running_mean, running_var, x, momentum} with running statistics away from 0 and 1."""
    device = device or get_device()
    c = shape[1]
    x = inputs.randn(*shape, seed=seed, dtype=dtype, device=device, scale=1.5) + 0.3
    running_mean = inputs.randn(c, seed=seed + 1, dtype=dtype, device=device)
    running_var = inputs.randn(c, seed=seed + 2, dtype=dtype, device=device).abs() + 0.5
    return {"running_mean": running_mean, "running_var": running_var, "x": x, "momentum": momentum}


def reference_running(running_mean, running_var, x, momentum=0.1):
    """The running statistics after F.batch_norm in training mode (as nn.BatchNorm1d updates them)."""
    mean, var = running_mean.clone(), running_var.clone()
    F.batch_norm(x, mean, var, training=True, momentum=momentum)
    return mean, var


def _running_hint(got, expected, case):
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return ""
    x, momentum, old_var = case["x"], case["momentum"], case["running_var"]
    c = x.shape[1]
    if any(isinstance(t, torch.Tensor) and t.dim() > 1 for t in got):
        return f"reduce over every dimension but the channels (dim 1): the statistics have shape ({c},)"
    if momentum != 0.1 and matches(got[0], reference_running(case["running_mean"], old_var, x, 0.1)[0]):
        return f"this is the update with momentum 0.1: use the momentum argument ({momentum:g} here)"
    swapped = reference_running(case["running_mean"], old_var, x, 1 - momentum)
    if matches(got[0], swapped[0]) and not matches(got[0], expected[0]):
        return (f"momentum convention: PyTorch keeps (1 - momentum) of the old statistic and takes momentum of "
                f"the batch's; with momentum={momentum:g} the batch's share is {momentum:g}")
    n = x.numel() // c
    new_share = expected[1] - (1 - momentum) * old_var  # momentum * the batch's unbiased variance
    if n > 1 and matches(got[1], (1 - momentum) * old_var + new_share * (n - 1) / n):
        return ("running_var uses the biased variance (divided by n); nn.BatchNorm1d keeps the unbiased "
                "one (divided by n - 1) as its estimate for evaluation")
    per_sample = x.shape[0] / (x.shape[0] - 1)
    if x.dim() == 3 and matches(got[1], (1 - momentum) * old_var + new_share * (n - 1) / n * per_sample):
        return (f"for an (N, C, L) input every channel has n = N * L = {n} values: the unbiased variance "
                f"divides by n - 1 = {n - 1}, not N - 1")
    return ""


def run_keeping_inputs(fn, *args, stress=None, position=None):
    """Driver: fn(*args), and the positions of the tensor arguments that fn changed; with a `stress`,
    argument `position` is laid out so first (see `laid_out`)."""
    args = list(args)
    if stress is not None:
        args[position] = LAYOUTS[stress](args[position])
    before = private_copies(args)
    result = fn(*args)
    changed = [i for i, (a, b) in enumerate(zip(args, before)) if isinstance(a, torch.Tensor) and not torch.equal(a, b)]
    return result, changed


def check_running(exercise, fn, cases, stress=None, what="x"):
    """`fn(running_mean, running_var, x, momentum)` returns nn.BatchNorm1d's new running statistics
    as new tensors, and changes none of its arguments; with `stress="non-contiguous"`, `x` reaches it
    as a strided view (an (N, C, L) input is often a transposed channels-last tensor)."""
    for case in cases:
        driver = run_keeping_inputs
        if stress is not None:
            case, _ = stressed_case(case, stress, what)
            driver = functools.partial(run_keeping_inputs, stress=stress, position=list(case).index(what))
        expected = reference_running(*case.values())
        with battery.stressed(exercise, stress, what):
            got, changed = guarded(exercise, fn, list(case.values()), case, driver=driver)
            expect_close_with_hint(exercise, got, expected, case, ["new running_mean", "new running_var"],
                                   None if stress else lambda: _running_hint(got, expected, case))
        if changed:
            checks.fail(exercise, f"changed its argument {list(case)[changed[0]]} in place: return new tensors and "
                                  "leave the arguments as they were (nn.BatchNorm1d updates its own buffers; this "
                                  "function must not update the caller's)", case)
