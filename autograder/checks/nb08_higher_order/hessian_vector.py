"""Checks of `hvp(f, x, v)`: H v against the explicit Hessian, and how many passes it took.

The reference is `torch.autograd.functional.hessian`, which the learner's call may not use (nor
torch.func: `FORBID_HVP`, caught however it was imported). `CountedSquare` is a square whose
backward is itself a Function that counts its own backward calls, so a check can tell double
backward (one pass through the gradient's graph) from finite differences (none) and from a Hessian
built row by row (one per entry of x). A case may carry a stress of the battery: "non-contiguous"
hands x and v over as strided views (a `.view(-1)` of them raises), built in the driver.
"""
import torch

from autograder import checks
from autograder.checks import GradingError, battery
from autograder.checks.compare import fail
from autograder.checks.nb08_higher_order.common import close, is_tensor, strided
from autograder.checks.nb08_higher_order.rules import BY_HAND
from autograder.checks.rules import guards
from autograder.learner import inputs
from autograder.learner.device import get_device

# What `hvp` may not call: every transform of torch.func, every function of torch.autograd.functional.
FORBID_HVP = guards(BY_HAND["hvp"])["forbid"]  # torch.func and torch.autograd.functional, as the rule says


class CountedSquare(torch.autograd.Function):
    """x**2 whose backward is itself a Function (`CountedProduct`) that counts its own backward calls:
    how many passes went through the graph of the gradient."""

    @staticmethod
    def forward(ctx, x, counter):
        ctx.save_for_backward(x)
        ctx.counter = counter
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return CountedProduct.apply(x, grad, ctx.counter), None


class CountedProduct(torch.autograd.Function):
    """2 x g, the gradient of x**2; each call of its backward is one pass through the gradient's graph."""

    @staticmethod
    def forward(ctx, x, grad, counter):
        ctx.save_for_backward(x, grad)
        ctx.counter = counter
        return 2 * x * grad

    @staticmethod
    def backward(ctx, upstream):
        x, grad = ctx.saved_tensors
        ctx.counter.append(1)
        return 2 * grad * upstream, 2 * x * upstream, None


_FORMULAS = {
    "quadratic": "0.5 x.(A x) + b.x (A not symmetric)",
    "softmax": "logsumexp(W tanh(x))",
    "rosenbrock": "sum(100 (x[1:] - x[:-1]^2)^2 + (1 - x[:-1])^2)",
    "matrix": "sum(tanh(X @ B)^2) + sum(X^3) / 3",
    "mixed": "sum(sin(x) exp(x)) + sum(x^2) mean(x)",
    "scalar": "x^4 - 3 x^2 + x",
    "affine": "sum(a x) + 2 (affine: H = 0)",
    "affine_weights": "sum(a x) + 2, a a leaf that requires grad (affine: H = 0)",
    "counted": "sum(w x^2) + logsumexp(x), the square a counting Function",
}


class Objective:
    """A scalar function of x with a readable name (it is what failure messages show), its
    coefficients drawn from a seed; `counter` records passes through the gradient's graph."""

    def __init__(self, kind, shape, *, seed, dtype=torch.float64, device=None):
        self.kind, self.shape, self.counter = kind, tuple(shape), []
        device = device or get_device()
        n = int(torch.tensor(shape).prod()) if shape else 1
        draw = lambda *s, k=0: inputs.randn(*s, seed=seed * 10 + k, dtype=dtype, device=device)  # noqa: E731
        if kind == "quadratic":
            self.a, self.b = draw(n, n), draw(n, k=1)
        elif kind == "softmax":
            self.a = draw(n + 2, n) / n ** 0.5
        elif kind == "matrix":
            self.a = draw(shape[-1], 3)
        elif kind in ("affine", "affine_weights", "counted"):
            self.a = draw(*shape)
            if kind == "affine_weights":
                self.a.requires_grad_(True)

    def __call__(self, x):
        kind, a = self.kind, getattr(self, "a", None)
        if kind == "quadratic":
            return 0.5 * x @ (self.a @ x) + self.b @ x
        if kind == "softmax":
            return torch.logsumexp(a @ torch.tanh(x), 0)
        if kind == "rosenbrock":
            return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()
        if kind == "matrix":
            return torch.tanh(x @ a).pow(2).sum() + x.pow(3).sum() / 3
        if kind == "mixed":
            return (torch.sin(x) * torch.exp(x)).sum() + x.pow(2).sum() * x.mean()
        if kind == "scalar":
            return x ** 4 - 3 * x ** 2 + x
        if kind in ("affine", "affine_weights"):
            return (a * x).sum() + 2.0
        if kind == "counted":
            return (a * CountedSquare.apply(x, self.counter)).sum() + torch.logsumexp(x.reshape(-1), 0)
        raise ValueError(f"unknown objective {kind!r}")

    def __repr__(self):
        return f"f(x) = {_FORMULAS[self.kind]}"


def hvp_case(kind, shape, *, seed, dtype=torch.float64, device=None, scale=0.7, stress=None):
    """{"f", "x", "v", "stress"}: an `Objective`, a point and a direction, seeded; `stress` is None or
    "non-contiguous" (x and v reach hvp as strided views)."""
    device = device or get_device()
    f = Objective(kind, shape, seed=seed, dtype=dtype, device=device)
    x = inputs.randn(*shape, seed=seed + 1, dtype=dtype, device=device, scale=scale)
    v = inputs.randn(*shape, seed=seed + 2, dtype=dtype, device=device)
    return {"f": f, "x": x, "v": v, "stress": stress}


def reference_hvp(f, x, v):
    """H v from the explicit Hessian (torch.autograd.functional.hessian), flattened and multiplied."""
    hessian = torch.autograd.functional.hessian(f, x.detach())
    return (hessian.reshape(x.numel(), x.numel()) @ v.reshape(-1)).reshape(x.shape)


def run_hvp(student, f, x, v, stress=None):
    """Driver: the learner's hvp under grad mode (x and v as `stress` hands them over), with how many
    passes ran through the gradient's graph."""
    f.counter.clear()
    with torch.enable_grad():
        result = student(f, strided(x, stress), strided(v, stress))
    return result, len(f.counter)


def _hvp_hint(kind, text):
    if kind.startswith("affine") and "does not require grad" in text:
        return ("\n  f is affine here: its gradient is a constant, which autograd records no graph for "
                "(g.requires_grad is False), so H = 0. Check for that and return zeros")
    if "not have been used in the graph" in text:
        return ("\n  the gradient here depends on tensors that require grad, but not on x (an affine f whose "
                "coefficients require grad): pass allow_unused=True and read a None as zeros")
    return ""


def check_hvp(exercise, student, cases, *, forbid=FORBID_HVP):
    """hvp(f, x, v) equals the explicit Hessian times v (zeros for an affine f), with x's shape and
    dtype; torch.func and torch.autograd.functional are refused inside the call."""
    for case in cases:
        stress = case.get("stress")
        shown = {"f": case["f"], "x": case["x"], "v": case["v"]}
        if stress:
            shown["layout"] = f"x and v as {battery.describe(stress, 'view')}"
        expected = reference_hvp(case["f"], case["x"], case["v"])
        with battery.stressed(exercise, stress, what="x and v"):
            try:
                got, _ = checks.call_student(exercise, run_hvp, student, case["f"], case["x"], case["v"], stress,
                                             names=["hvp", "f", "x", "v", "stress"], forbid=forbid)
            except GradingError as err:
                raise GradingError(f"{err}{_hvp_hint(case['f'].kind, str(err))}") from None
            if is_tensor(got) and got.requires_grad:
                got = got.detach()
            close(exercise, got, expected, shown=shown, name="H v")


def check_hvp_double_backward(exercise, student, *, shape, seed, forbid=FORBID_HVP, device=None):
    """One product, one pass through the gradient's graph: not none (finite differences of the
    gradient approximate H v) and not one per entry of x (a Hessian built row by row)."""
    case = hvp_case("counted", shape, seed=seed, device=device)
    shown = {"f": case["f"], "x": case["x"], "v": case["v"]}
    expected = reference_hvp(case["f"], case["x"], case["v"])
    got, passes = checks.call_student(exercise, run_hvp, student, case["f"], case["x"], case["v"],
                                      names=["hvp", "f", "x", "v"], forbid=forbid)
    if passes == 0:
        fail(exercise, "no backward pass went through the graph of the gradient: H v was not computed by double "
              "backward. Finite differences of the gradient, (grad f(x + h v) - grad f(x - h v)) / 2h, only "
              "approximate it; build the gradient with create_graph=True and differentiate g.v once more", shown)
    if passes > 1:
        fail(exercise, f"{passes} backward passes went through the graph of the gradient for one product (x has "
              f"{case['x'].numel()} entries): that builds the Hessian row by row before multiplying. One call, "
              "torch.autograd.grad(g, x, grad_outputs=v), gives H v in one pass", shown)
    close(exercise, got.detach() if is_tensor(got) else got, expected, shown=shown, name="H v")
