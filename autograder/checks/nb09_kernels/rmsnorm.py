"""Checks of RMSNorm's kernels: `rmsnorm_forward`, `rmsnorm_backward` and `TritonRMSNorm`.

References are PyTorch's own: `F.rms_norm` and its gradients by autograd, in float64, cast to the
input's dtype; `rstd` is the curriculum's definition, 1 / sqrt(mean(x^2) + eps) per row, kept in the
accumulator's dtype (float32, or float64 for float64 x), as PyTorch's own fused RMSNorm
(`torch.ops.aten._fused_rms_norm`) keeps it: a float16 rstd would cost the backward more digits than
float16's tolerance allows. Where an `rstd` is wrong in a way learners write (LayerNorm's centred
variance, eps outside the square root, a sum of squares kept in float16), the message names it.

Half precision: "float16" rows have |x| in the hundreds, where x * x overflows float16; "bfloat16" rows
are long, BLOCK_LIMIT columns of ±16 and then ±1, where a bfloat16 running sum stops growing (on a GPU:
65536 columns of ±1, rstd 3% off with any block of at most BLOCK_LIMIT, twice bfloat16's tolerance;
Triton's CPU interpreter holds bfloat16 as 16-bit integers, so any bfloat16 arithmetic is wrong there
and 1024 columns of ±1 keep the case short).
"""
import functools

import torch
import torch.nn.functional as F

from autograder import checks
from autograder.checks import battery, kernel_layouts
from autograder.checks.compare import REORDERED_TOLERANCES, TOLERANCES, fail
from autograder.checks.function_class import check_function_class
from autograder.checks.kernel_functions import FunctionRun, run_function
from autograder.checks.kernel_verdicts import BLOCK_LIMIT, call_guarded, check_rules, check_tensor, launches_for
from autograder.learner import inputs
from autograder.learner.device import get_device

WIDE = BLOCK_LIMIT + 904  # the columns of a "wide-rows" case
HALF = (torch.float16, torch.bfloat16)


def long_row_tail(device) -> int:
    """Columns of ±1 after the ±16 block of a "bfloat16" row (see the module's docstring)."""
    return 65536 if torch.device(device).type == "cuda" else 1024


def rmsnorm_case(rows, cols, *, seed, dtype=torch.float32, device=None, eps=1e-6, scale=2.0, stress=None,
                 what="x"):
    """{"x", "weight", "eps", "g", "stress", "what"}: x (rows, cols), a weight around 1 and an upstream
    gradient g. "wide-rows": cols = BLOCK_LIMIT + 904; "float16": |x| in the hundreds, and g = x / 32 plus
    noise, so that the backward's sum of g w x overflows float16 too; "bfloat16": long rows (see the
    module's docstring), weight 1 and g = x. A layout ("non-contiguous", "transposed", "expanded") is
    `what`'s (x, weight, grad_out or rstd): expanded, x repeats its first row, the weight one number, and
    grad_out is the ones that `.sum().backward()` hands on."""
    device = device or get_device()
    cols = WIDE if stress == "wide-rows" else cols
    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(stress, dtype)
    scale = 300.0 if stress == "float16" else scale
    x = inputs.randn(rows, cols, seed=seed, dtype=torch.float64, device=device, scale=scale)
    weight = 1 + inputs.randn(cols, seed=seed + 1, dtype=torch.float64, device=device, scale=0.5)
    g = inputs.randn(rows, cols, seed=seed + 2, dtype=torch.float64, device=device)
    if stress == "float16":
        g = x / 32 + g
    if stress == "bfloat16":
        size = torch.cat([torch.full((BLOCK_LIMIT,), 16.0), torch.ones(long_row_tail(device))]).to(device)
        x = torch.where(inputs.randn(rows, size.numel(), seed=seed, dtype=torch.float64, device=device) < 0, -size,
                        size)
        weight, g = torch.ones_like(size), x
    if stress == "expanded":
        x = x[:1].expand_as(x) if what == "x" else x
        weight = weight[:1].expand_as(weight) if what == "weight" else weight
        g = torch.ones_like(g) if what == "grad_out" else g
    return {"x": x.to(dtype).contiguous(), "weight": weight.to(dtype).contiguous(), "eps": eps,
            "g": g.to(dtype).contiguous(), "stress": stress, "what": what}


def accumulator_dtype(dtype):
    """float32 for float16, bfloat16 and float32; float64 for float64: what a kernel sums in, and rstd's dtype."""
    return torch.promote_types(dtype, torch.float32)


def _tolerance(dtype):
    """(rtol, atol): reordered sums' for float32 and float64, the dtype's own for float16 and bfloat16."""
    return REORDERED_TOLERANCES.get(dtype) or TOLERANCES[dtype]


def reference(x, weight, eps, g):
    """(y, rstd, grad_x, grad_weight) by PyTorch in float64, in x's dtype (rstd in the accumulator's)."""
    x64, w64 = x.detach().double().requires_grad_(True), weight.detach().double().requires_grad_(True)
    with torch.enable_grad():
        y = F.rms_norm(x64, (x.shape[-1],), w64, eps)
        grad_x, grad_weight = torch.autograd.grad(y, (x64, w64), g.double(), allow_unused=True)
    grad_x = torch.zeros_like(x64) if grad_x is None else grad_x
    grad_weight = torch.zeros_like(w64) if grad_weight is None else grad_weight
    rstd = torch.rsqrt(x64.detach().pow(2).mean(-1) + eps).to(accumulator_dtype(x.dtype))
    y, grad_x, grad_weight = (t.detach().to(x.dtype) for t in (y, grad_x, grad_weight))
    return y, rstd, grad_x, grad_weight


def _layouts(case):
    """{input: layout} of a case whose stress is a layout, else {}."""
    return {case["what"]: case["stress"]} if case.get("stress") in kernel_layouts.LAYOUTS else {}


def _stressed(exercise, case, values):
    """The case's stress, named with what it concerns; a layout's failure says what that input's is."""
    stress, what = case.get("stress"), case.get("what", "x")
    if stress in kernel_layouts.LAYOUTS:
        return battery.stressed(exercise, stress, what, kernel_layouts.story(what, values[what], stress))
    described = {"float16": "x with |x| in the hundreds", "bfloat16": "x with long rows"}.get(stress, "x")
    return battery.stressed(exercise, stress, described)


def _pair(exercise, result, names, shown):
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        fail(exercise, f"should return a tuple ({', '.join(names)}), got {checks.describe(result)}", shown)
    return result


def _named_rstd_mistake(exercise, rstd, expected, x, eps, shown):
    """Fail naming the mistake when a wrong `rstd` is LayerNorm's, has eps outside the square root, adds
    up only one block, is kept in float16 or bfloat16, or is 0 where the squares overflow float16."""
    if not isinstance(rstd, torch.Tensor) or rstd.shape != expected.shape or x.numel() == 0:
        return
    if x.dtype in HALF and rstd.dtype == x.dtype:
        fail(exercise, f"rstd is {x.dtype}, x's dtype: keep rstd in float32 for float16 and bfloat16 x, the "
                       "accumulator's dtype (PyTorch's own fused RMSNorm returns it so): the backward scales the "
                       f"gradients by rstd cubed, and a {x.dtype} rstd costs them more digits than the tolerance "
                       "allows. Allocate it with dtype=torch.float32 (float64 for float64 x)", shown)
    x64, got = x.double(), rstd.double()
    rtol, atol = _tolerance(expected.dtype)
    if torch.allclose(got, expected.double(), rtol=rtol, atol=atol):
        return
    overflows = (x64.pow(2) > torch.finfo(torch.float16).max).any(-1)
    if x.dtype == torch.float16 and ((got == 0) & overflows).any():
        fail(exercise, "rstd is 0 for rows whose squares overflow float16 (x * x is inf once |x| > 256; float16 "
                       "holds at most 65504): the sum of squares was kept in float16, a half-precision accumulator, "
                       "and 1 / sqrt(inf) is 0. Convert x to float32 after the load and accumulate in float32", shown)
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
        with _stressed(exercise, case, case):
            x, weight, eps = case["x"], case["weight"], case["eps"]
            shown = {"x": x, "weight": weight, "eps": eps}
            run = call_guarded(exercise, fn, shown, _layouts(case))
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
        x, weight, eps, g = case["x"], case["weight"], case["eps"], case["g"]
        _, rstd, expected_gx, expected_gw = reference(x, weight, eps, g)
        shown = {"grad_out": g, "x": x, "weight": weight, "rstd": rstd}
        with _stressed(exercise, case, shown):
            run = call_guarded(exercise, fn, shown, _layouts(case))
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
        with _stressed(exercise, case, {"x": case["x"], "weight": case["weight"], "grad_out": case["g"]}):
            _check_one(exercise, cls, case)


def _check_one(exercise, cls, case):
    x, weight, eps, g = case["x"], case["weight"], case["eps"], case["g"]
    shown = {"x": x, "weight": weight, "eps": eps, "grad_out": g}
    small = x.dtype == torch.float64 and 0 < x.numel() <= 64
    driver = functools.partial(run_function, cls, names=("x", "weight", "eps"), differentiable=("x", "weight"),
                               layouts=_layouts(case), gradcheck=small)
    run = checks.call_student(exercise, driver, g, x, weight, eps, names=["grad_out", "x", "weight", "eps"])
    if not isinstance(run, FunctionRun):
        fail(exercise, f"no readable answer came back from your notebook: {checks.describe(run)}", shown)
    if not run.own_node:
        fail(exercise, "the output's grad_fn is not TritonRMSNorm's backward: return forward's y itself and call "
                       "the class through TritonRMSNorm.apply(x, weight, eps)", shown)
    y, _, expected_gx, expected_gw = reference(x, weight, eps, g)
    if x.numel() and run.forward_launches < 1:
        fail(exercise, "TritonRMSNorm.apply launched no Triton kernel: forward calls your rmsnorm_forward", shown)
    rtol, atol = _tolerance(x.dtype)
    checks.expect_close(exercise, run.out, y, inputs=shown, names=["TritonRMSNorm.apply(x, weight, eps)"],
                        rtol=rtol, atol=atol)
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
        checks.expect_close(exercise, got, expected, inputs=shown, names=[name], rtol=rtol, atol=atol)
    if run.verdict is not None:
        error, first_line = run.verdict
        fail(exercise, f"gradcheck failed: {error}: {first_line}", shown)
