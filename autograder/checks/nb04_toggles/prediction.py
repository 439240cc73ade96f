"""predict: outputs that are inference tensors, and gradient tracking left on.

The reference is the model's own output computed under torch.no_grad(), which is not an answer
(its outputs are ordinary tensors, which the check rejects).
"""

import torch

from autograder import checks
from autograder.checks import battery
from autograder.checks.nb04_toggles.cases import expect_close_reordered, run_case, summary, unreadable
from autograder.checks.nb04_toggles.models import describe_model, tanh_mlp, two_heads
from autograder.learner import inputs
from autograder.learner.device import get_device


def run_predict(fn, model, x):
    """Driver: fn(model, x) with gradient tracking switched on, and whether it was still on after the
    call; then the mode is put back as it was before (whatever the notebook's own cells left it at),
    so that what runs next in the same process is not changed by the check."""
    previous = torch.is_grad_enabled()
    torch.set_grad_enabled(True)
    try:
        got = fn(model, x)
    finally:
        grad_is_on = torch.is_grad_enabled()
        torch.set_grad_enabled(previous)
    return got, grad_is_on


def check_predict(exercise, fn, *, seed, model_kind="mlp", dtype=torch.float64, n=5):
    """fn(model, x) returns the model's output, every tensor of it an inference tensor, and leaves
    gradient tracking switched on. n=1 (a batch of one) names that stress under any failure."""
    with battery.stressed(exercise, "batch-of-one" if n == 1 else None):
        _check_predict(exercise, fn, seed=seed, model_kind=model_kind, dtype=dtype, n=n)


def _check_predict(exercise, fn, *, seed, model_kind, dtype, n):
    device = get_device()
    model = tanh_mlp([4, 7, 3], seed, dtype, device) if model_kind == "mlp" else two_heads(seed, dtype, device)
    x = inputs.randn(n, 4, seed=seed + 1, dtype=dtype, device=device)
    with torch.no_grad():
        expected = model(x)
    case = f"{describe_model(model)}, x of shape ({n}, 4), {dtype}"
    result = run_case(exercise, lambda *args: run_predict(fn, *args), case, model, x, names=["model", "x"])
    if not (isinstance(result, tuple) and len(result) == 2):  # not what the driver returns
        unreadable(exercise, result, case)
    got, grad_is_on = result
    if grad_is_on is not True:
        checks.fail(exercise, "left gradient tracking switched off after it returned",
                    details=f"  case: {case}\n  everything that ran afterwards would build no graph, training "
                            "included: use `with torch.inference_mode():`, which restores the previous mode on the "
                            "way out")
    expected = expected if isinstance(expected, tuple) else (expected,)
    got_parts = got if isinstance(got, (tuple, list)) and len(expected) > 1 else (got,)
    if len(got_parts) != len(expected):
        checks.fail(exercise, f"should return what the model returns ({len(expected)} tensors), got {summary(got)}",
                    details=f"  case: {case}")
    for i, g in enumerate(got_parts):
        label = "the output" if len(expected) == 1 else f"output {i}"
        if not isinstance(g, torch.Tensor):
            checks.fail(exercise, f"{label} should be a tensor, got {summary(g)}", details=f"  case: {case}")
        if not g.is_inference():
            checks.fail(exercise, f"{label} is not an inference tensor (.is_inference() is False)",
                        details=f"  case: {case}\n  run the model inside `with torch.inference_mode():` and return "
                                "its output as it is (torch.no_grad() builds no graph either, but its outputs are "
                                "ordinary tensors; a .clone() or .detach() made outside the block is ordinary too)")
    names = ["the output"] if len(expected) == 1 else [f"output {i}" for i in range(len(expected))]
    expect_close_reordered(exercise, got_parts, expected, case=case, names=names)
