"""Checks of `SmoothAbs`, sqrt(x^2 + eps^2) as a Function whose backward is itself differentiable.

First order: forward against the formula, backward called directly with autograd refused. Second
order: the gradient taken with create_graph=True is differentiated again and compared with the
formula's second derivative, then gradcheck and gradgradcheck run (float64); each failure names the
rule of differentiable backwards that was broken (a cut history, an intermediate saved from forward,
an in-place edit, @once_differentiable), as the notebook's section 4 runs them. A case made by
`smooth_abs_special_points` runs both orders at the battery's special points (0, tiny, ±1, ±large),
where a formula that equals x / sqrt(x^2 + eps^2) but passes through sqrt(0) or 0/0 has a derivative
of NaN.
"""
import dataclasses

import torch

from autograder import checks
from autograder.checks import battery
from autograder.checks.compare import REORDERED_TOLERANCES, fail
from autograder.checks.function_class import check_function_class
from autograder.checks.nb08_higher_order.common import close, is_tensor
from autograder.checks.nb08_higher_order.rules import BY_HAND
from autograder.checks.rules import guards_of
from autograder.learner import inputs
from autograder.learner.device import get_device

RULE = ("the rule: backward must compute its result with differentiable torch operations on the tensors it "
        "gets from ctx.saved_tensors and grad_out, so that autograd can record backward itself when "
        "create_graph=True")


def smooth_abs_case(shape, *, eps, seed, dtype=torch.float64, device=None, scale=None):
    """{"x", "eps", "g", "gg"}: x near the kink (scale 3 eps unless given), upstream g and gg for the
    first and second derivative."""
    device = device or get_device()
    scale = 3 * (eps if eps is not None else 1e-3) if scale is None else scale
    return {"x": inputs.randn(*shape, seed=seed, dtype=dtype, device=device, scale=scale), "eps": eps,
            "g": inputs.randn(*shape, seed=seed + 1, dtype=dtype, device=device),
            "gg": inputs.randn(*shape, seed=seed + 2, dtype=dtype, device=device)}


def smooth_abs_special_points(*, eps, seed, dtype=torch.float64, device=None):
    """A case at the battery's special points of sqrt(x^2 + eps^2): 0, ±1e-30, ±1e-8, ±1, ±1e4."""
    device = device or get_device()
    x = battery.special_points(dtype=dtype, device=device)
    return {"x": x, "eps": eps, "g": inputs.randn(*x.shape, seed=seed, dtype=dtype, device=device),
            "gg": inputs.randn(*x.shape, seed=seed + 1, dtype=dtype, device=device), "stress": "special-points"}


def _apply(cls, x, eps):
    return cls.apply(x) if eps is None else cls.apply(x, eps)


@dataclasses.dataclass
class FirstOrderRun:
    """What SmoothAbs.apply gave, whether its grad_fn is the class's own backward, and what that
    backward returned when called directly (autograd refused meanwhile)."""
    out: object = None
    own_node: bool = False
    grads: object = None


def run_first_order(cls, x, eps, g):
    """Driver: apply() on a leaf copy of x, then the node's backward called directly, under no_grad
    (the learner's call runs with autograd refused: a backward that asks autograd fails)."""
    leaf = x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        out = _apply(cls, leaf, eps)
    node = getattr(out, "grad_fn", None)
    if node is None or not issubclass(getattr(node, "_forward_cls", type(None)), cls):
        return FirstOrderRun(out)
    with torch.no_grad():
        return FirstOrderRun(out.detach(), True, node.apply(g))


def _expected_smooth_abs(x, eps):
    eps = 1e-3 if eps is None else eps
    root = torch.sqrt(x * x + eps * eps)
    return root, x / root, eps * eps / root ** 3  # value, first and second derivative


def check_smooth_abs(exercise, cls, cases):
    """Forward equals sqrt(x^2 + eps^2) (eps 1e-3 when omitted); backward, called directly with
    autograd refused, returns (grad_out x / sqrt(x^2 + eps^2), None)."""
    check_function_class(exercise, cls)
    for case in cases:
        with battery.stressed(exercise, case.get("stress")):
            _check_first_order(exercise, cls, case)


def _check_first_order(exercise, cls, case):
    """One case of `check_smooth_abs`."""
    x, eps, g = case["x"], case["eps"], case["g"]
    shown = {"x": x, "eps": "omitted (default 1e-3)" if eps is None else eps, "grad_out": g}
    run = checks.call_student(exercise, run_first_order, cls, x, eps, g, names=["SmoothAbs", "x", "eps", "g"],
                              **guards_of(BY_HAND, exercise))
    if not isinstance(run, FirstOrderRun) or not is_tensor(run.out):
        fail(exercise, f"forward should return a tensor, got {checks.describe(getattr(run, 'out', run))}", shown)
    if not run.own_node:
        fail(exercise, "the output's grad_fn is not SmoothAbs's backward: return forward's result itself and "
              "call the class through SmoothAbs.apply", shown)
    value, first, _ = _expected_smooth_abs(x, eps)
    close(exercise, run.out, value, shown=shown, name="forward output")
    grads = run.grads
    if not isinstance(grads, (tuple, list)) or len(grads) != 2:
        fail(exercise, f"backward should return two values, the gradient of x and None for eps (one per input "
              f"of forward), got {checks.describe(grads)}", shown)
    if grads[1] is not None:
        fail(exercise, "backward should return None for eps, a Python number", shown)
    close(exercise, grads[0], g * first, shown=shown, name="the gradient of x from your backward")


@dataclasses.dataclass
class SecondOrderRun:
    """The first gradient (and whether it has a graph), the second derivative along gg, and the
    verdicts of gradcheck and gradgradcheck as (check, error type, first line), None when passed."""
    first: object = None
    first_has_graph: bool = False
    second: object = None
    raised: object = None
    verdict: object = None


def _gradcheck_verdict(cls, x, eps):
    leaf = x.detach().clone().requires_grad_(True)
    for check in (torch.autograd.gradcheck, torch.autograd.gradgradcheck):
        try:
            with torch.enable_grad():
                check(lambda t: _apply(cls, t, eps), (leaf,))
        except NotImplementedError:
            raise
        except Exception as err:  # GradcheckError, or whatever backward raised
            lines = str(err).strip().splitlines()
            return check.__name__, type(err).__name__, lines[0] if lines else ""
    return None


def run_second_order(cls, x, eps, g, gg, gradchecks):
    """Driver: d/dx of (SmoothAbs.apply(x) . g) with create_graph=True, then its derivative along gg;
    then gradcheck and gradgradcheck (float64 inputs only)."""
    leaf = x.detach().clone().requires_grad_(True)
    run = SecondOrderRun()
    try:
        with torch.enable_grad():
            (first,) = torch.autograd.grad(_apply(cls, leaf, eps), leaf, grad_outputs=g, create_graph=True)
            run.first, run.first_has_graph = first.detach(), first.requires_grad
            if first.requires_grad:
                (second,) = torch.autograd.grad(first, leaf, grad_outputs=gg, allow_unused=True)
                run.second = second
    except NotImplementedError:
        raise
    except Exception as err:  # in-place edits and friends: the message is the diagnosis
        run.raised = f"{type(err).__name__}: {err}"
    if gradchecks:
        run.verdict = _gradcheck_verdict(cls, x, eps)
    return run


def _rule_for(text):
    """The rule of differentiable backwards that PyTorch's message points at, or ''."""
    if "inplace" in text or "in-place" in text:
        return ("backward edits a tensor in place (mul_, +=, ...) that autograd saved or needs: it may not. "
                "Compute new tensors (x * g, not x.mul_(g))")
    if "once_differentiable" in text:
        return "backward is marked @once_differentiable: remove it, and write backward with torch operations"
    return ""


def check_smooth_abs_double_backward(exercise, cls, cases):
    """The gradient from SmoothAbs's backward can itself be differentiated: the second derivative
    along gg equals g gg eps^2 / (x^2 + eps^2)^(3/2), and gradcheck and gradgradcheck pass
    (float64). Each failure names the rule of differentiable backwards that was broken."""
    check_function_class(exercise, cls)
    for case in cases:
        with battery.stressed(exercise, case.get("stress")):
            _check_second_order(exercise, cls, case)


def _check_second_order(exercise, cls, case):
    """One case of `check_smooth_abs_double_backward`."""
    x, eps, g, gg = case["x"], case["eps"], case["g"], case["gg"]
    shown = {"x": x, "eps": "omitted (default 1e-3)" if eps is None else eps, "grad_out": g,
             "direction of the second derivative": gg}
    run = checks.call_student(exercise, run_second_order, cls, x, eps, g, gg, x.dtype == torch.float64,
                              names=["SmoothAbs", "x", "eps", "g", "gg", "gradchecks"])
    if not isinstance(run, SecondOrderRun):
        fail(exercise, f"no readable answer came back from your notebook: {checks.describe(run)}", shown)
    if run.raised is not None:
        fail(exercise, f"differentiating your backward raised {run.raised.splitlines()[0]}", shown,
              f"  {_rule_for(run.raised) or RULE}")
    _, first, second = _expected_smooth_abs(x, eps)
    close(exercise, run.first, g * first, shown=shown, name="the gradient of x (create_graph=True)")
    if not run.first_has_graph:
        fail(exercise, "the gradient your backward returns has no graph, even with create_graph=True, so it "
              "cannot be differentiated again (autograd's second derivative is lost)", shown,
              f"  {RULE}: no .detach(), no torch.no_grad(), no .item() or NumPy round trip, no "
              "@once_differentiable")
    if run.second is None:
        fail(exercise, "the gradient your backward returns does not depend on x in autograd's record", shown,
              f"  {RULE}: x must come from ctx.saved_tensors, not from a detached copy")
    expected_second = g * gg * second
    broken = ~torch.isfinite(run.second) & torch.isfinite(expected_second)
    if broken.any():
        where = broken.nonzero()[0].tolist()
        fail(exercise, f"the derivative of your backward is {run.second[tuple(where)].item()} at x = "
              f"{x[tuple(where)].item():g}, where the second derivative of sqrt(x^2 + eps^2), "
              "eps^2 / (x^2 + eps^2)^(3/2), is finite (1/eps at x = 0)", shown,
              "  autograd differentiates the formula your backward computes, operation by operation: a formula "
              "that equals x / sqrt(x^2 + eps^2) but passes through sqrt(0), 0/0 or sign(x) has a derivative of "
              "NaN or inf where they do. Write it with operations that are smooth at every x")
    rtol, atol = REORDERED_TOLERANCES[x.dtype]
    if not torch.allclose(run.second.to(x.dtype), expected_second, rtol=rtol, atol=atol):
        fail(exercise, "the first derivative is right but its derivative (the second derivative of "
              "sqrt(x^2 + eps^2)) is wrong", shown,
              "  forward runs without recording, so a tensor it computes and saves (1 / sqrt(x^2 + eps^2), "
              "say) has no history: backward sees it as a constant. The rule: save only inputs and outputs "
              "(ctx.save_for_backward(x) or the output) and recompute intermediates in backward from them\n"
              f"  expected along gg: {checks.describe(expected_second)}\n  got: {checks.describe(run.second)}")
    if run.verdict is not None:
        check, error, first_line = run.verdict
        rule = _rule_for(first_line) or RULE
        fail(exercise, f"{check} failed: {error}: {first_line}", shown, f"  {rule}")
