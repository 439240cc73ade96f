"""Checks of SiLU's kernels: `silu_forward`, `silu_backward` and `TritonSiLU`.

References are PyTorch's own: `F.silu` and its gradient by autograd, in float64, then cast to the
input's dtype. Each graded function runs in the guard (see `guard`): one launch, no torch maths. A case
may put one input (`x` or `grad_out`) in a layout of its own (`layouts`), or be in float16 or bfloat16,
compared at that dtype's tolerance.
"""
import functools

import torch
import torch.nn.functional as F

from autograder import checks
from autograder.checks import battery, kernel_layouts
from autograder.checks.compare import fail
from autograder.checks.function_class import check_function_class
from autograder.checks.kernel_functions import FunctionRun, run_function
from autograder.checks.kernel_verdicts import call_guarded, check_rules, check_tensor, launches_for
from autograder.learner import inputs
from autograder.learner.device import get_device

ONE_LAUNCH = "fuse the whole computation into one kernel: one read of each input, one write of the output"


def silu_case(shape, *, seed, dtype=torch.float32, device=None, stress=None, what="x"):
    """{"x", "g", "stress", "what"}: x of `shape` (for "special-points", the battery's special points and
    ±100, where a sigmoid written as exp(x) / (1 + exp(x)) overflows), and an upstream gradient g.
    "float16" and "bfloat16" set the dtype; a layout ("non-contiguous", "transposed", "expanded") is
    `what`'s, x's or grad_out's: an expanded x repeats its first row, an expanded grad_out is the ones that
    `.sum().backward()` hands on."""
    device = device or get_device()
    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(stress, dtype)
    if stress == "special-points":  # and ±100, where exp(100) already overflows float32
        x = torch.cat([battery.special_points(dtype=dtype, device=device, large=1e4),
                       torch.tensor([100.0, -100.0], dtype=dtype, device=device)])
    else:
        x = inputs.randn(*shape, seed=seed, dtype=dtype, device=device, scale=3.0)
    g = inputs.randn(*x.shape, seed=seed + 1, dtype=dtype, device=device)
    if stress == "expanded" and what == "x":
        x = x[:1].expand_as(x).clone()
    if stress == "expanded" and what == "grad_out":
        g = torch.ones_like(g)
    return {"x": x, "g": g, "stress": stress, "what": what}


def _layouts(case):
    """{input: layout} of a case whose stress is a layout, else {}."""
    return {case["what"]: case["stress"]} if case.get("stress") in kernel_layouts.LAYOUTS else {}


def _stressed(exercise, case, values):
    """The case's stress, named with the input it concerns; a layout's failure says what that input's is."""
    stress, what = case.get("stress"), case.get("what", "x")
    reason = kernel_layouts.story(what, values[what], stress) if stress in kernel_layouts.LAYOUTS else None
    return battery.stressed(exercise, stress, what, reason)


def reference(x, g):
    """(silu(x), its gradient along g), by PyTorch in float64, in x's dtype."""
    leaf = x.detach().double().requires_grad_(True)
    with torch.enable_grad():
        y = F.silu(leaf)
        (grad,) = torch.autograd.grad(y, leaf, g.double())
    return y.detach().to(x.dtype), grad.to(x.dtype)


def check_silu_forward(exercise, fn, cases):
    """silu_forward(x) = x * sigmoid(x), by one launch of the learner's kernel."""
    for case in cases:
        with _stressed(exercise, case, {"x": case["x"]}):
            x = case["x"]
            shown = {"x": x}
            run = call_guarded(exercise, fn, {"x": x}, _layouts(case))
            check_rules(exercise, run, shown, launches=launches_for(x, 1), why=ONE_LAUNCH)
            check_tensor(exercise, run, 0, run.result, reference(x, case["g"])[0], shown, "silu_forward(x)")


def check_silu_backward(exercise, fn, cases):
    """silu_backward(x, grad_out) = the gradient of silu at x along grad_out, by one launch."""
    for case in cases:
        with _stressed(exercise, case, {"x": case["x"], "grad_out": case["g"]}):
            x, g = case["x"], case["g"]
            shown = {"x": x, "grad_out": g}
            run = call_guarded(exercise, fn, {"x": x, "grad_out": g}, _layouts(case))
            check_rules(exercise, run, shown, launches=launches_for(x, 1), why=ONE_LAUNCH)
            check_tensor(exercise, run, 0, run.result, reference(x, g)[1], shown, "silu_backward(x, grad_out)")


def check_triton_silu(exercise, cls, cases):
    """TritonSiLU.apply(x): the value and gradient of silu, one launch in each pass, only x saved, and
    gradcheck on float64 cases of at most 64 elements."""
    check_function_class(exercise, cls)
    for case in cases:
        with _stressed(exercise, case, {"x": case["x"], "grad_out": case["g"]}):
            _check_one(exercise, cls, case)


def _check_one(exercise, cls, case):
    x, g = case["x"], case["g"]
    shown = {"x": x, "grad_out": g}
    small = x.dtype == torch.float64 and 0 < x.numel() <= 64
    run = checks.call_student(exercise, _driver(cls, case, small), g, x, names=["grad_out", "x"])
    if not isinstance(run, FunctionRun):
        fail(exercise, f"no readable answer came back from your notebook: {checks.describe(run)}", shown)
    if not run.own_node:
        fail(exercise, "the output's grad_fn is not TritonSiLU's backward: return forward's result itself and call "
                       "the class through TritonSiLU.apply(x)", shown)
    expected_y, expected_grad = reference(x, g)
    if x.numel() and run.forward_launches != 1:
        fail(exercise, f"TritonSiLU.apply(x) launched {run.forward_launches} Triton kernels: forward computes y with "
                       "one launch, by calling your silu_forward(x)", shown)
    _check_saved(exercise, run.saved, x, expected_y, shown)
    checks.expect_close(exercise, run.out, expected_y, inputs=shown, names=["TritonSiLU.apply(x)"])
    if x.numel() and run.backward_launches != 1:
        fail(exercise, f"the backward of TritonSiLU launched {run.backward_launches} Triton kernels: it computes "
                       "the gradient with one launch, by calling your silu_backward(x, grad_out)", shown)
    if run.wrote_outside:
        fail(exercise, f"a kernel wrote outside {run.wrote_outside[0]} (a store without a mask)", shown)
    checks.expect_close(exercise, run.grads[0], expected_grad, inputs=shown, names=["the gradient of x"])
    if run.verdict is not None:
        error, first_line = run.verdict
        fail(exercise, f"gradcheck failed: {error}: {first_line}", shown)


def _driver(cls, case, gradcheck):
    """`run_function` for TritonSiLU, x or grad_out in the case's layout."""
    return functools.partial(run_function, cls, names=("x",), differentiable=("x",), layouts=_layouts(case),
                             gradcheck=gradcheck)


def _check_saved(exercise, saved, x, y, shown):
    """Only x is saved: the backward recomputes the sigmoid from it (the trade of notebook 06)."""
    if not saved:
        fail(exercise, "saves nothing with ctx.save_for_backward: save x there (an attribute of ctx such as ctx.x "
                       "keeps the tensor alive outside autograd's bookkeeping of saved tensors)", shown)
    if len(saved) > 1:
        fail(exercise, f"saves {len(saved)} tensors for backward: save only x; the backward recomputes sigmoid(x) "
                       "from it, so nothing else needs to stay in memory between the passes", shown)
    (kept,) = saved
    if kept.shape == x.shape and torch.equal(kept.to(x.dtype), x):
        return
    if kept.shape == x.shape and torch.allclose(kept.to(y.dtype), y, equal_nan=True):
        fail(exercise, "saves the output y = silu(x) for backward, not x: silu_backward recomputes the sigmoid "
                       "from x, and x cannot be recovered from y", shown)
    fail(exercise, f"saves {checks.describe(kept)} for backward, which is not x: save the input x", shown)
