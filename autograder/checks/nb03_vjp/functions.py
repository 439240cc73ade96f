"""The checks of notebook 03's `torch.autograd.Function`s: `StableLogSumExp` and `StraightThroughRound`.

They are graded through `.apply`; the backward is then called directly (`output.grad_fn.apply(g)`),
without the autograd engine, so the guards of `watch` prove that it is closed-form; the gradient
through the engine, `gradcheck` and `gradgradcheck` (float64) come after. Everything that touches
the learner's class runs in a driver (in trusted grading, the kernel) and returns data: tensors,
`FunctionRun` records, gradcheck's verdict and what the Function keeps for backward.
"""
import dataclasses
import functools

import torch

from autograder import checks
from autograder.checks import battery
from autograder.checks.function_class import check_function_class
from autograder.checks.nb03_vjp.cases import (
    autograd_grads,
    describe_layout,
    leaf_copy,
    private_copy,
    relayout,
    tensor,
    tolerances,
)
from autograder.checks.nb03_vjp.rules import BY_HAND
from autograder.checks.nb03_vjp.watch import watched
from autograder.checks.rules import guards_of
from autograder.learner import inputs
from autograder.learner.device import get_device


# --- custom autograd Functions --------------------------------------------------------------------
# Everything that touches the learner's class runs in a driver, where the learner's code runs (in
# trusted grading, the kernel): the type check (`autograder.checks.function_class`), apply(), the
# direct call of the backward node, the engine's gradient and gradcheck. Drivers return data (tensors,
# names, verdicts); every comparison with PyTorch's reference happens here, in the caller, where the
# learner's code cannot reach.
def _unpack_backward(exercise, result, n_inputs, shown):
    """The gradient for the first input, from what a backward returned; the rest must be None."""
    if isinstance(result, torch.Tensor) and n_inputs == 1:
        return result
    if not isinstance(result, (tuple, list)):
        checks.fail(exercise, f"backward should return a tuple of {n_inputs} values (one per input of forward; "
              f"None for inputs that are not tensors), got {checks.describe(result)}", shown)
    if len(result) != n_inputs:
        checks.fail(exercise, f"backward returned {len(result)} values; forward takes {n_inputs} inputs, so it "
              "must return one gradient per input (None for a non-tensor input such as dim)", shown)
    if any(r is not None for r in result[1:]):
        checks.fail(exercise, "backward should return None for the non-tensor inputs of forward", shown)
    return result[0]


@dataclasses.dataclass
class FunctionRun:
    """What a learner's Function did in the driver, as data: what apply() returned, the type of its
    grad_fn and whether that node is the Function's own backward, what the backward returned."""
    out: object = None
    node: object = None
    own_node: bool = False
    grads: object = None


def _run_function(exercise, cls, x, extra, g, shown, forbidden_ops):
    """apply() on a leaf copy of x, then the node's backward called directly, both without autograd,
    in a driver. Returns (output, gradient from the direct call), checked here."""
    driver = functools.partial(run_forward_and_backward, exercise, cls, x, extra, g, shown, forbidden_ops)
    run = checks.call_student(exercise, driver, x, *extra,
                              names=["x", *[f"arg{i}" for i in range(1, 1 + len(extra))]],
                              **guards_of(BY_HAND, exercise))
    if not isinstance(run, FunctionRun):
        checks.fail(exercise, f"no readable answer came back from your Function (got {checks.describe(run)})", shown)
    if not isinstance(run.out, torch.Tensor):
        checks.fail(exercise, f"forward should return a tensor, got {checks.describe(run.out)}", shown)
    if not run.own_node:
        checks.fail(exercise, f"the output's grad_fn is {run.node}, not this "
              "Function's backward: return the result of forward itself (not a view or a "
              "copy made afterwards) and call the class through .apply", shown)
    return run.out, _unpack_backward(exercise, run.grads, 1 + len(extra), shown)


def run_forward_and_backward(exercise, cls, x, extra, g, shown, forbidden_ops, *_clones):
    """Driver: cls.apply on a leaf copy of x, then the output's node's backward called directly with
    g, both watched and without autograd; a FunctionRun."""
    leaf = private_copy(x).requires_grad_(True)
    with torch.enable_grad(), watched(exercise, shown, forbidden_ops=forbidden_ops):
        out = cls.apply(leaf, *extra)
    if not isinstance(out, torch.Tensor):
        return FunctionRun(out)
    node = out.grad_fn
    if node is None or not issubclass(getattr(node, "_forward_cls", type(None)), cls):
        return FunctionRun(out, type(node).__name__ if node else None)
    with torch.no_grad(), watched(exercise, shown):
        grads = node.apply(private_copy(g))
    return FunctionRun(out, type(node).__name__, True, grads)


def _through_engine(exercise, cls, x, extra, g, shown):
    """The gradient of x through the autograd engine, computed in a driver (the graph cannot leave it)."""
    return checks.call_student(exercise, functools.partial(run_through_engine, cls, x, extra, g), *shown.values(),
                               names=list(shown))


def run_through_engine(cls, x, extra, g, *_shown):
    """Driver: cls.apply on a fresh leaf copy of x, then torch.autograd.grad with upstream g."""
    leaf = private_copy(x).requires_grad_(True)
    with torch.enable_grad():
        out = cls.apply(leaf, *extra)
        return torch.autograd.grad(out, leaf, private_copy(g))[0]


@dataclasses.dataclass
class FunctionCase:
    x: torch.Tensor
    extra: tuple
    g: torch.Tensor
    expected_out: torch.Tensor
    expected_grad: torch.Tensor
    shown: dict
    rtol: float
    atol: float
    stress: str = ""


def logsumexp_case(shape, dim, seed, dtype=torch.float64, layout="contiguous", scale=1.0, shift=0.0,
                   values=None, stress=""):
    """x (seeded, or the given `values`: a nested list or a tensor, -inf entries allowed) and its
    log-sum-exp along dim, with autograd's gradient for a random upstream g. Far from 0 (|x| ~ 1000)
    the tolerance grows with the rounding of x. `stress` names the battery's stress `values` were
    drawn for (a failure then names it)."""
    if values is not None:
        x = torch.as_tensor(values, dtype=dtype, device=get_device())
    else:
        x = tensor(shape, seed, dtype, scale=scale) + shift
    x = relayout(x, layout)
    leaf = leaf_copy(x)
    with torch.enable_grad():
        out = torch.logsumexp(leaf, dim=dim)
        g = tensor(tuple(out.shape), seed + 1, dtype)
        expected_grad = autograd_grads(out, leaf, g)[0]
    rtol, atol = tolerances(dtype)
    finite = x[torch.isfinite(x)]
    magnitude = float(finite.abs().max()) if finite.numel() else 0.0
    rtol = max(rtol, 8 * torch.finfo(dtype).eps * magnitude)
    shown = {"x": x, "dim": dim, "g": g, "layout": describe_layout({"x": x}, layout)}
    if values is None and (scale, shift) != (1.0, 0.0):
        shown["note"] = f"x drawn with scale {scale:g}, shifted by {shift:g}"
    if stress:
        battery.describe(stress)  # an unknown stress fails here
    return FunctionCase(x, (dim,), g, out.detach(), expected_grad, shown, rtol, atol, stress)


def check_logsumexp(exercise, cls, cases_):
    """Forward against torch.logsumexp (the learner may not call it), backward called directly
    (closed form: no autograd inside) against autograd's gradient of torch.logsumexp, then the
    same gradient through the autograd engine."""
    check_function_class(exercise, cls)
    for case in cases_:
        with battery.stressed(exercise, case.stress):
            _check_logsumexp_case(exercise, cls, case)


def _check_logsumexp_case(exercise, cls, case):
    out, grad = _run_function(exercise, cls, case.x, case.extra, case.g, case.shown,
                              forbidden_ops=("aten::logsumexp",))
    if out.shape == case.expected_out.shape and (torch.isfinite(case.expected_out) & ~torch.isfinite(out)).any():
        shown = out.detach().cpu().tolist() if out.numel() <= 12 else "non-finite values"
        checks.fail(exercise, f"forward returned {shown} where torch.logsumexp is finite: exp overflows (or "
                    "underflows to 0) unless you subtract the maximum first", case.shown)
    checks.expect_close(exercise, out.detach(), case.expected_out, inputs=case.shown, names=["logsumexp(x)"],
                        rtol=case.rtol, atol=case.atol)
    checks.expect_close(exercise, grad.detach() if isinstance(grad, torch.Tensor) else grad, case.expected_grad,
                        inputs=case.shown, names=["dL/dx from your backward"], rtol=case.rtol, atol=case.atol)
    through_engine = _through_engine(exercise, cls, case.x, case.extra, case.g, case.shown)
    checks.expect_close(exercise, through_engine, case.expected_grad, inputs=case.shown,
                        names=["dL/dx through loss.backward()"], rtol=case.rtol, atol=case.atol)


GRADCHECK_EXPLANATIONS = {
    "gradcheck": "your backward disagrees with finite differences of your forward",
    "gradgradcheck": "the derivative of your backward is wrong, so double backward (create_graph=True) "
                     "would be too",
}


def saved_for_backward(fn, x):
    """Driver side: what the Function behind fn(x) keeps for backward, as data. {"constant": [[where,
    shape]] for each tensor kept (ctx.saved_tensors or a ctx attribute) that carries no autograd
    history although x requires grad, "once_differentiable": whether its backward is marked so}."""
    leaf = private_copy(x).requires_grad_(True)
    with torch.enable_grad():
        out = fn(leaf)  # kept alive while its node is read: torch 2.10 frees a saved output with the output
    node = getattr(out, "grad_fn", None)
    kept = [(f"ctx.saved_tensors[{k}]", t) for k, t in enumerate(getattr(node, "saved_tensors", None) or ())]
    kept += [(f"ctx.{name}", value) for name, value in (vars(node) if hasattr(node, "__dict__") else {}).items()
             if isinstance(value, torch.Tensor)]
    backward = getattr(getattr(node, "_forward_cls", None), "backward", None)
    return {"constant": [[where, list(t.shape)] for where, t in kept if not t.requires_grad],
            "once_differentiable": backward is not None and hasattr(backward, "__wrapped__")}


def run_gradchecks(fn, x, *_clones):
    """Driver: torch.autograd.gradcheck, then gradgradcheck, of fn at a private copy of x (float64).
    None when both pass, else (the check's name, the error's type name, its message's first line,
    what the Function keeps for backward: `saved_for_backward`)."""
    leaf = private_copy(x).requires_grad_(True)
    for check in (torch.autograd.gradcheck, torch.autograd.gradgradcheck):
        try:
            with torch.enable_grad():
                check(fn, (leaf,))
        except NotImplementedError:
            raise
        except Exception as err:  # gradcheck's GradcheckError, or whatever backward raised
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            return check.__name__, type(err).__name__, first, saved_for_backward(fn, x)
    return None


def double_backward_cause(kept):
    """What to fix when gradgradcheck fails, from what the Function keeps (`saved_for_backward`)."""
    if not isinstance(kept, dict):
        kept = {}
    if kept.get("once_differentiable") is True:
        return ("Your backward is marked @once_differentiable, which tells autograd it cannot be differentiated: "
                "remove the decorator and compute backward with torch operations on the saved tensors.")
    constant = [item for item in kept.get("constant") or () if isinstance(item, (list, tuple)) and len(item) == 2]
    if constant:
        listed = ", ".join(f"{where} (shape {tuple(shape)})" for where, shape in constant)
        return (f"Your Function keeps {listed} for backward, and it carries no autograd history: forward runs "
                "with recording off, so a tensor it computes (such as exp(x - M) or its sum) is a constant to "
                "double backward, and the part of the second derivative that flows through it is lost. Save "
                "forward's input and output instead (ctx.save_for_backward(x, out)), which come back connected to "
                "the graph, and compute backward from them with torch operations, or recompute the intermediate "
                "inside backward.")
    return ("Double backward differentiates what your backward computes, through the tensors it gets from ctx: "
            "compute it from forward's saved input and output with torch operations; .detach(), .item(), NumPy or "
            "in-place edits inside backward cut that path.")


def check_gradchecks(exercise, make_fn, x, *, what):
    """torch.autograd.gradcheck, then gradgradcheck, of make_fn() at float64 x; readable failures.
    Both run in a driver, where the learner's code runs; only their verdict comes back. (gradcheck
    compares the learner's backward with finite differences of the learner's forward: no reference
    of ours takes part.)"""
    shown = {"x": x, "function": what}
    fn = make_fn()  # a test-cell lambda that uses the learner's class: built here, called in the driver

    verdict = checks.call_student(exercise, functools.partial(run_gradchecks, fn, x), x, names=["x"])
    if verdict is None:
        return
    if not (isinstance(verdict, tuple) and len(verdict) == 4 and verdict[0] in GRADCHECK_EXPLANATIONS):
        checks.fail(exercise, f"gradcheck gave no readable verdict (got {checks.describe(verdict)})", shown)
    check, error, first, kept = verdict
    cause = f"\n  {double_backward_cause(kept)}" if check == "gradgradcheck" else ""
    # gradgradcheck differentiates the backward, as backward(create_graph=True) does: the battery's stress
    with battery.stressed(exercise, "create-graph" if check == "gradgradcheck" else None):
        checks.fail(exercise, f"{check} failed: {GRADCHECK_EXPLANATIONS[check]}.\n  PyTorch said: {error}: "
                              f"{first}{cause}", shown)


def check_straight_through(exercise, cls, cases_):
    """Forward equals torch.round (halves to even, dtype kept); backward, called directly, returns
    the incoming gradient unchanged; through the engine, (cls.apply(3 x) * w).sum() gives 3 w."""
    check_function_class(exercise, cls)
    for x, g, layout in cases_:
        # the references first, from the grader's own tensors: x and g travel to the driver
        expected_out, expected_grad, expected_chain = torch.round(x), g.clone(), 3.0 * g
        shown = {"x": x, "g": g, "layout": describe_layout({"x": x, "g": g}, layout)}
        out, grad = _run_function(exercise, cls, x, (), g, shown, forbidden_ops=())
        checks.expect_close(exercise, out.detach(), expected_out, inputs=shown, names=["forward output"],
                            rtol=0.0, atol=0.0)
        checks.expect_close(exercise, grad.detach() if isinstance(grad, torch.Tensor) else grad, expected_grad,
                            inputs=shown, names=["dL/dx from your backward (should be g itself)"], rtol=0.0, atol=0.0)

        chain_shown = {**shown, "loss": "(StraightThroughRound.apply(3 * x) * g).sum()"}
        through_engine = checks.call_student(exercise, functools.partial(run_straight_through_chain, cls, x, g),
                                             *chain_shown.values(), names=list(chain_shown))
        checks.expect_close(exercise, through_engine, expected_chain, inputs=chain_shown,
                            names=["dL/dx through the engine"], rtol=0.0, atol=0.0)


def run_straight_through_chain(cls, x, g, *_shown):
    """Driver: the gradient of (cls.apply(3 x) * g).sum() with respect to x, through the autograd engine."""
    with torch.enable_grad():
        x_leaf = leaf_copy(x)
        loss = (cls.apply(x_leaf * 3.0) * g).sum()
        return torch.autograd.grad(loss, x_leaf)[0]


def rounding_cases(seed, dtype=torch.float64, layout="contiguous", shape=(4, 6)):
    """(x, g, layout): x with many exact halves (where round-half-to-even matters) and other values."""
    halves = (inputs.randint(9, *shape, seed=seed) - 4).to(dtype) + 0.5
    noise = tensor(shape, seed + 1, dtype, scale=3.0)
    pick = inputs.randint(2, *shape, seed=seed + 2).bool()
    x = torch.where(pick, halves, noise)
    g = tensor(shape, seed + 3, dtype)
    return relayout(x, layout), relayout(g, layout), layout
