"""Checks of RMSNorm's kernels: `rmsnorm_forward`, `rmsnorm_backward` and `TritonRMSNorm`.

References are PyTorch's own: `F.rms_norm` and its gradients by autograd, in float64, cast to the
input's dtype; `rstd` is the curriculum's definition, 1 / sqrt(mean(x^2) + eps) per row. Where an
`rstd` is wrong in a way learners write (LayerNorm's centred variance, eps outside the square
root), the message names it.
"""
import functools

import torch
import torch.nn.functional as F

from autograder import checks
from autograder.checks import battery
from autograder.checks.compare import REORDERED_TOLERANCES, fail
from autograder.checks.function_class import check_function_class
from autograder.checks.nb09_kernels.functions import FunctionRun, run_function
from autograder.checks.nb09_kernels.verdicts import (
    BLOCK_LIMIT,
    call_guarded,
    check_rules,
    check_tensor,
    launches_for,
)
from autograder.learner import inputs
from autograder.learner.device import get_device

WIDE = BLOCK_LIMIT + 904  # the columns of a "wide-rows" case


def rmsnorm_case(rows, cols, *, seed, dtype=torch.float32, device=None, eps=1e-6, scale=2.0, stress=None):
    """{"x", "weight", "eps", "g", "stress"}: x (rows, cols) (cols = BLOCK_LIMIT + 904 for "wide-rows"),
    a weight around 1 and an upstream gradient g."""
    device = device or get_device()
    cols = WIDE if stress == "wide-rows" else cols
    return {"x": inputs.randn(rows, cols, seed=seed, dtype=dtype, device=device, scale=scale),
            "weight": 1 + inputs.randn(cols, seed=seed + 1, dtype=dtype, device=device, scale=0.5), "eps": eps,
            "g": inputs.randn(rows, cols, seed=seed + 2, dtype=dtype, device=device), "stress": stress}


def reference(x, weight, eps, g):
    """(y, rstd, grad_x, grad_weight) by PyTorch in float64, in x's dtype."""
    x64, w64 = x.detach().double().requires_grad_(True), weight.detach().double().requires_grad_(True)
    with torch.enable_grad():
        y = F.rms_norm(x64, (x.shape[-1],), w64, eps)
        grad_x, grad_weight = torch.autograd.grad(y, (x64, w64), g.double(), allow_unused=True)
    grad_x = torch.zeros_like(x64) if grad_x is None else grad_x
    grad_weight = torch.zeros_like(w64) if grad_weight is None else grad_weight
    rstd = torch.rsqrt(x64.detach().pow(2).mean(-1) + eps)
    return tuple(t.detach().to(x.dtype) for t in (y, rstd, grad_x, grad_weight))


def _gapped(case, names):
    return names if case.get("stress") == "non-contiguous" else ()


def _pair(exercise, result, names, shown):
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        fail(exercise, f"should return a tuple ({', '.join(names)}), got {checks.describe(result)}", shown)
    return result


def _named_rstd_mistake(exercise, rstd, expected, x, eps, shown):
    """Fail naming the mistake when a wrong `rstd` is LayerNorm's, or has eps outside the square root."""
    if not isinstance(rstd, torch.Tensor) or rstd.shape != expected.shape or x.numel() == 0:
        return
    x64, got = x.double(), rstd.double()
    rtol, atol = REORDERED_TOLERANCES[x.dtype]
    if torch.allclose(got, expected.double(), rtol=rtol, atol=atol):
        return
    centred = torch.rsqrt(x64.var(-1, unbiased=False) + eps)
    outside = 1 / (x64.pow(2).mean(-1).sqrt() + eps)
    if x.shape[-1] > 1 and torch.allclose(got, centred, rtol=rtol, atol=atol):
        fail(exercise, "rstd subtracts each row's mean before squaring: that is LayerNorm's 1 / std. RMSNorm "
                       "divides by the root mean square of x itself, without centring", shown)
    if torch.allclose(got, outside, rtol=rtol, atol=atol):
        fail(exercise, "rstd adds eps after the square root: eps belongs inside it, with the mean of the squares",
             shown)
    block = 1
    while block < x.shape[-1]:
        if torch.allclose(got, torch.rsqrt(x64[:, :block].pow(2).sum(-1) / x.shape[-1] + eps), rtol=rtol, atol=atol):
            fail(exercise, f"rstd adds up only the first {block} columns of each row ({x.shape[-1]} wide): a row wider "
                           "than one block needs a loop over its column blocks inside the program", shown)
        block *= 2


def check_rmsnorm_forward(exercise, fn, cases):
    """rmsnorm_forward(x, weight, eps) = (y, rstd), by one launch of the learner's kernel."""
    for case in cases:
        with battery.stressed(exercise, case.get("stress"), "x"):
            x, weight, eps = case["x"], case["weight"], case["eps"]
            shown = {"x": x, "weight": weight, "eps": eps}
            run = call_guarded(exercise, fn, {"x": x, "weight": weight, "eps": eps}, _gapped(case, ("x",)))
            check_rules(exercise, run, shown, launches=launches_for(x, 1),
                        why="one program per row reads the row, reduces it and writes y and rstd in one kernel")
            y, rstd = _pair(exercise, run.result, ("y", "rstd"), shown)
            expected_y, expected_rstd, _, _ = reference(x, weight, eps, case["g"])
            _named_rstd_mistake(exercise, rstd, expected_rstd, x, eps, shown)
            check_tensor(exercise, run, 1, rstd, expected_rstd, shown, "rstd")
            check_tensor(exercise, run, 0, y, expected_y, shown, "y")


def check_rmsnorm_backward(exercise, fn, cases):
    """rmsnorm_backward(grad_out, x, weight, rstd) = (grad_x, grad_weight), by one to three launches."""
    for case in cases:
        with battery.stressed(exercise, case.get("stress"), "x"):
            x, weight, eps, g = case["x"], case["weight"], case["eps"], case["g"]
            _, rstd, expected_gx, expected_gw = reference(x, weight, eps, g)
            shown = {"grad_out": g, "x": x, "weight": weight, "rstd": rstd}
            run = call_guarded(exercise, fn, dict(shown), _gapped(case, ("grad_out", "x")))
            check_rules(exercise, run, shown, launches=(0, 3) if x.numel() == 0 else (1, 3),
                        why="the backward needs at most three: grad_x row by row, the partial sums of grad_weight, "
                            "and the kernel that adds them up")
            grad_x, grad_weight = _pair(exercise, run.result, ("grad_x", "grad_weight"), shown)
            check_tensor(exercise, run, 0, grad_x, expected_gx, shown, "grad_x")
            check_tensor(exercise, run, 1, grad_weight, expected_gw, shown, "grad_weight")


def check_triton_rmsnorm(exercise, cls, cases):
    """TritonRMSNorm.apply(x, weight, eps): value and gradients of x and weight, kernels launched in
    each pass, and gradcheck on float64 cases of at most 64 elements."""
    check_function_class(exercise, cls)
    for case in cases:
        with battery.stressed(exercise, case.get("stress"), "x"):
            _check_one(exercise, cls, case)


def _check_one(exercise, cls, case):
    x, weight, eps, g = case["x"], case["weight"], case["eps"], case["g"]
    shown = {"x": x, "weight": weight, "eps": eps, "grad_out": g}
    small = x.dtype == torch.float64 and 0 < x.numel() <= 64
    driver = functools.partial(run_function, cls, names=("x", "weight", "eps"), differentiable=("x", "weight"),
                               gapped=_gapped(case, ("x", "grad_out")), gradcheck=small)
    run = checks.call_student(exercise, driver, g, x, weight, eps, names=["grad_out", "x", "weight", "eps"])
    if not isinstance(run, FunctionRun):
        fail(exercise, f"no readable answer came back from your notebook: {checks.describe(run)}", shown)
    if not run.own_node:
        fail(exercise, "the output's grad_fn is not TritonRMSNorm's backward: return forward's y itself and call "
                       "the class through TritonRMSNorm.apply(x, weight, eps)", shown)
    y, _, expected_gx, expected_gw = reference(x, weight, eps, g)
    if x.numel() and run.forward_launches < 1:
        fail(exercise, "TritonRMSNorm.apply launched no Triton kernel: forward calls your rmsnorm_forward", shown)
    checks.expect_close(exercise, run.out, y, inputs=shown, names=["TritonRMSNorm.apply(x, weight, eps)"],
                        rtol=REORDERED_TOLERANCES[x.dtype][0], atol=REORDERED_TOLERANCES[x.dtype][1])
    if x.numel() and run.backward_launches < 1:
        fail(exercise, "the backward of TritonRMSNorm launched no Triton kernel: it calls your rmsnorm_backward "
                       "with the rstd that forward saved", shown)
    if run.wrote_outside:
        fail(exercise, f"a kernel wrote outside {run.wrote_outside[0]} (a store without a mask)", shown)
    grads = run.grads if isinstance(run.grads, (list, tuple)) and len(run.grads) == 2 else [None, None]
    for got, expected, name in zip(grads, (expected_gx, expected_gw), ("the gradient of x", "the gradient of weight")):
        if got is None:
            fail(exercise, f"{name} is None: backward returns (grad_x, grad_weight, None), one value per input of "
                           "forward (None for eps, a number)", shown)
        checks.expect_close(exercise, got, expected, inputs=shown, names=[name],
                            rtol=REORDERED_TOLERANCES[x.dtype][0], atol=REORDERED_TOLERANCES[x.dtype][1])
    if run.verdict is not None:
        error, first_line = run.verdict
        fail(exercise, f"gradcheck failed: {error}: {first_line}", shown)
