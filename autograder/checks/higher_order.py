"""Grading helpers for notebook 08: the backward pass as an object (double backward, hooks, torch.func).

Why one module of more than 600 lines: the six exercises of notebook 08 share its test objects
(objectives with a readable name, seeded critics, counting models and cells) and one way of
running learner code (drivers), and each check needs a few lines of diagnosis to name the bug;
split by exercise, the pieces would mostly import each other.

Every exercise is judged by behaviour, against PyTorch or an answer key computed at grading time:

- `hvp`: against `torch.autograd.functional.hessian` (the learner's call may not use it, nor
  `torch.func`: `FORBID_HVP`), and by counting how many backward passes run through the
  gradient's own graph (`CountedSquare`): one for a product, none for finite differences, n for a
  Hessian built row by row;
- `gradient_penalty`: its value and the gradient it sends to the critic's parameters, against a
  closed form for a quadratic critic (visible) or the answer key (hidden);
- `SmoothAbs`: forward and backward (called directly, autograd refused) against the formula, then
  the second derivative, `gradcheck` and `gradgradcheck`, with a diagnosis that names the broken rule;
- `per_sample_grads`: against a loop of single-example gradients, and by counting the model's
  forward calls (a loop calls it once per example; `torch.func.vmap` once);
- `attach_step_in_backward`: parameters after one backward against an SGD step taken after it,
  no `.grad` left, and ordinary behaviour again once the handles are removed;
- `tbptt_backward`: loss and gradients against the answer key (or literal values), and the peak
  saved bytes (`SavedTensorLedger`) for two sequence lengths.

No reference solution lives here: references that are answers come from
`solutions/08_higher_order/answer_key.py` as arguments. Learner code runs only through drivers
passed to `checks.call_student`, which build what they need where the learner's code runs (the
kernel, in trusted grading) and return data: values, flags, counts, `SavedCounts`; modules and
leaves that require grad come back with their parameters and `.grad`.
"""
import copy
import dataclasses
import numbers

import torch
import torch.nn.functional as F
from torch import nn

from autograder import checks
from autograder.checks import GradingError
from autograder.checks.checkpointing import SavedCounts
from autograder.checks.toggles import seeded
from autograder.learner import inputs
from autograder.learner.device import get_device
from autograder.learner.memory import SavedTensorLedger

# float32 answers reach the same numbers by other paths (another order of sums, batched kernels)
LOOSE = {torch.float64: (1e-9, 1e-10), torch.float32: (1e-4, 1e-5)}

# What `hvp` may not call: every transform of torch.func, every function of torch.autograd.functional.
FORBID_HVP = (
    *(getattr(torch.func, name) for name in ("grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd",
                                             "hessian", "linearize", "vmap")),
    *(getattr(torch.autograd.functional, name) for name in ("jacobian", "hessian", "vjp", "jvp", "vhp", "hvp")),
)


def _fail(exercise, what, shown=None, details=""):
    checks.fail(exercise, what, shown, details)


def _close(exercise, got, expected, *, shown, name, tolerances=LOOSE):
    rtol, atol = tolerances.get(expected.dtype, (None, None))
    checks.expect_close(exercise, got, expected, inputs=shown, names=[name], rtol=rtol, atol=atol)


def _is_tensor(value):
    return isinstance(value, torch.Tensor)


# --- hvp ------------------------------------------------------------------------------------------
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


def hvp_case(kind, shape, *, seed, dtype=torch.float64, device=None, scale=0.7):
    """{"f", "x", "v"}: an `Objective`, a point and a direction, seeded."""
    device = device or get_device()
    f = Objective(kind, shape, seed=seed, dtype=dtype, device=device)
    x = inputs.randn(*shape, seed=seed + 1, dtype=dtype, device=device, scale=scale)
    v = inputs.randn(*shape, seed=seed + 2, dtype=dtype, device=device)
    return {"f": f, "x": x, "v": v}


def reference_hvp(f, x, v):
    """H v from the explicit Hessian (torch.autograd.functional.hessian), flattened and multiplied."""
    hessian = torch.autograd.functional.hessian(f, x.detach())
    return (hessian.reshape(x.numel(), x.numel()) @ v.reshape(-1)).reshape(x.shape)


def _hvp_run(student, f, x, v):
    """Driver: the learner's hvp under grad mode, with how many passes ran through the gradient's graph."""
    f.counter.clear()
    with torch.enable_grad():
        result = student(f, x, v)
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
        shown = {"f": case["f"], "x": case["x"], "v": case["v"]}
        expected = reference_hvp(case["f"], case["x"], case["v"])
        try:
            got, _ = checks.call_student(exercise, _hvp_run, student, case["f"], case["x"], case["v"],
                                         names=["hvp", "f", "x", "v"], forbid=forbid)
        except GradingError as err:
            raise GradingError(f"{err}{_hvp_hint(case['f'].kind, str(err))}") from None
        if _is_tensor(got) and got.requires_grad:
            got = got.detach()
        _close(exercise, got, expected, shown=shown, name="H v")


def check_hvp_double_backward(exercise, student, *, shape, seed, forbid=FORBID_HVP, device=None):
    """One product, one pass through the gradient's graph: not none (finite differences of the
    gradient approximate H v) and not one per entry of x (a Hessian built row by row)."""
    case = hvp_case("counted", shape, seed=seed, device=device)
    shown = {"f": case["f"], "x": case["x"], "v": case["v"]}
    expected = reference_hvp(case["f"], case["x"], case["v"])
    got, passes = checks.call_student(exercise, _hvp_run, student, case["f"], case["x"], case["v"],
                                      names=["hvp", "f", "x", "v"], forbid=forbid)
    if passes == 0:
        _fail(exercise, "no backward pass went through the graph of the gradient: H v was not computed by double "
              "backward. Finite differences of the gradient, (grad f(x + h v) - grad f(x - h v)) / 2h, only "
              "approximate it; build the gradient with create_graph=True and differentiate g.v once more", shown)
    if passes > 1:
        _fail(exercise, f"{passes} backward passes went through the graph of the gradient for one product (x has "
              f"{case['x'].numel()} entries): that builds the Hessian row by row before multiplying. One call, "
              "torch.autograd.grad(g, x, grad_outputs=v), gives H v in one pass", shown)
    _close(exercise, got.detach() if _is_tensor(got) else got, expected, shown=shown, name="H v")


# --- gradient_penalty -------------------------------------------------------------------------------
class QuadraticCritic(nn.Module):
    """critic(x) = sum over features of w * x**2, one score per example: grad_x = 2 w x, in closed form."""

    def __init__(self, shape, *, seed, dtype=torch.float64, device=None):
        super().__init__()
        device = device or get_device()
        self.w = nn.Parameter(inputs.randn(*shape, seed=seed, dtype=dtype, device=device, scale=0.8))

    def forward(self, x):
        return (self.w * x * x).flatten(1).sum(1, keepdim=True)


def critic(kind, shape, *, seed, dtype=torch.float64, device=None):
    """A seeded critic for inputs of `shape` (without the batch) that returns (N, 1): "mlp" (flatten,
    Linear, Softplus, Linear, Tanh, Linear) or "conv" (Conv1d, Tanh, flatten, Linear) for (C, L)."""
    if kind == "conv":
        channels, length = shape
        build = lambda: nn.Sequential(nn.Conv1d(channels, 3, 3, padding=1), nn.Tanh(), nn.Flatten(),  # noqa: E731
                                      nn.Linear(3 * length, 1))
    else:
        features = int(torch.tensor(shape).prod())
        build = lambda: nn.Sequential(nn.Flatten(), nn.Linear(features, 8), nn.Softplus(), nn.Linear(8, 6),  # noqa: E731
                                      nn.Tanh(), nn.Linear(6, 1))
    return seeded(build, seed, dtype, device)


def penalty_inputs(batch, shape, alpha_kind, *, seed, dtype=torch.float64, device=None):
    """real, fake and alpha: a float, "vector" (N,) or "column" (N, 1, ...) of the inputs' rank."""
    device = device or get_device()
    real = inputs.randn(batch, *shape, seed=seed, dtype=dtype, device=device)
    fake = inputs.randn(batch, *shape, seed=seed + 1, dtype=dtype, device=device, scale=0.5) + 0.3
    weights = torch.rand(batch, generator=torch.Generator().manual_seed(seed + 2), dtype=dtype).to(device) * 0.8 + 0.1
    alpha = {"float": 0.3, "vector": weights, "column": weights.reshape(batch, *[1] * len(shape))}[alpha_kind]
    return real, fake, alpha


@dataclasses.dataclass
class PenaltyRun:
    """What the learner's penalty was, as data: its value, whether it requires grad, and which of the
    critic's parameters had a .grad right after the call (before backward ran)."""
    value: object
    requires_grad: bool = False
    grads_during_call: tuple = ()


def _penalty_run(student, critic_, real, fake, alpha):
    """Driver: the learner's penalty, then backward() from it, which fills the critic's .grad."""
    critic_.zero_grad(set_to_none=True)
    with torch.enable_grad():
        penalty = student(critic_, real, fake, alpha)
    if not _is_tensor(penalty):
        return PenaltyRun(penalty)
    touched = tuple(name for name, p in critic_.named_parameters() if p.grad is not None)
    critic_.zero_grad(set_to_none=True)
    if penalty.requires_grad and penalty.numel() == 1:
        penalty.backward()
    return PenaltyRun(penalty.detach(), penalty.requires_grad, touched)


def _student_penalty(exercise, student, critic_, real, fake, alpha, shown):
    run = checks.call_student(exercise, _penalty_run, student, critic_, real, fake, alpha,
                              names=["gradient_penalty", "critic", "real", "fake", "alpha"])
    if not isinstance(run, PenaltyRun):
        _fail(exercise, f"no readable answer came back from your notebook: {checks.describe(run)}", shown)
    if not _is_tensor(run.value) or run.value.numel() != 1:
        _fail(exercise, f"should return the penalty as a scalar tensor (one number for the batch), got "
              f"{checks.describe(run.value)}", shown)
    if run.grads_during_call:
        _fail(exercise, f"your function filled .grad of the critic's {', '.join(run.grads_during_call)}: it called "
              "backward(). Take the gradient with respect to x_hat with torch.autograd.grad(..., "
              "create_graph=True), which returns it without accumulating anything into .grad", shown)
    if not run.requires_grad:
        _fail(exercise, "the penalty's gradient did not reach the critic's weights: the penalty does not require grad. "
              "Was torch.autograd.grad called without create_graph=True? Without it, grad_x critic(x_hat) comes "
              "back as a constant with no graph behind it, and nothing in the penalty depends on the weights", shown)
    return run.value.reshape(())


def _compare_penalty(exercise, critic_, value, expected_value, expected_grads, shown, hints=list):
    """The value (with hints for known wrong points, from `hints()`, computed only on a mismatch), then
    the gradient of every critic parameter. A parameter that does not move grad_x critic (a last bias)
    gets no gradient at all: None or zeros."""
    rtol, atol = LOOSE[expected_value.dtype]
    if not torch.allclose(value.to(expected_value.dtype), expected_value, rtol=rtol, atol=atol):
        for label, wrong in hints():
            if torch.allclose(value.to(expected_value.dtype), wrong, rtol=rtol, atol=atol):
                _fail(exercise, f"the penalty is {value.item():.6g}, expected {expected_value.item():.6g}: {label}",
                      shown)
    _close(exercise, value, expected_value, shown=shown, name="the penalty")
    for name, p in critic_.named_parameters():
        want = expected_grads.get(name)
        want = torch.zeros_like(p) if want is None else want
        if p.grad is None and want.count_nonzero():
            _fail(exercise, f"backward() from your penalty gave no gradient to the critic's {name}: something between "
                  "the critic and the penalty was detached", shown)
        have = torch.zeros_like(p) if p.grad is None else p.grad
        _close(exercise, have, want, shown=shown, name=f"the gradient of the critic's {name}")


def check_penalty_closed_form(exercise, student, *, batch, shape, alpha_kind, seed, dtype=torch.float64,
                              device=None):
    """For critic(x) = sum(w x^2) + c, grad_x critic = 2 w x: the penalty and its gradients with
    respect to w and c (zero) are known in closed form."""
    device = device or get_device()
    model = QuadraticCritic(shape, seed=seed, dtype=dtype, device=device)
    real, fake, alpha = penalty_inputs(batch, shape, alpha_kind, seed=seed + 10, dtype=dtype, device=device)
    shown = {"critic": "sum over features of w * x**2", "real": real, "fake": fake, "alpha": alpha}
    value = _student_penalty(exercise, student, model, real, fake, alpha, shown)
    with torch.no_grad():
        a = torch.as_tensor(alpha, dtype=dtype, device=device)
        a = a.reshape(-1, *[1] * len(shape)) if a.dim() else a

        def slopes(weight):  # grad_x of the critic at alpha real + (1 - alpha) fake, one row per example
            return (2 * model.w * (weight * real + (1 - weight) * fake)).flatten(1)

        point = a * real + (1 - a) * fake
        norms = slopes(a).norm(dim=1)
        expected = (norms - 1).pow(2).mean()
        # d norm_i / d w = 4 w x_i^2 / norm_i, so d penalty / d w = mean_i 2 (norm_i - 1) 4 w x_i^2 / norm_i
        per_example = (2 * (norms - 1) / norms).reshape(-1, *[1] * len(shape)) * 4 * model.w * point * point
        expected_grads = {"w": per_example.mean(0)}
        where = "not at x_hat = alpha real + (1 - alpha) fake"
        hints = [(f"that is the penalty at real, {where}", (slopes(1.0).norm(dim=1) - 1).pow(2).mean()),
                 (f"that is the penalty at fake, {where}", (slopes(0.0).norm(dim=1) - 1).pow(2).mean()),
                 ("that is the penalty at (1 - alpha) real + alpha fake: alpha weighs real",
                  (slopes(1 - a).norm(dim=1) - 1).pow(2).mean()),
                 ("that uses one norm over the whole batch; the norm is taken per example, over all its other "
                  "dimensions", (slopes(a).norm() - 1) ** 2),
                 ("that uses the squared norm; the penalty is (norm - 1)**2 with norm = sqrt(sum of squares)",
                  (slopes(a).pow(2).sum(1) - 1).pow(2).mean()),
                 ("that is the sum over the examples; the penalty is their mean", (norms - 1).pow(2).sum())]
    _compare_penalty(exercise, model, value, expected, expected_grads, shown, lambda: hints)


def check_penalty(exercise, student, reference, *, kind, batch, shape, alpha_kind, seed, dtype=torch.float64,
                  device=None):
    """The learner's penalty and the gradient it sends to a seeded critic's parameters, against
    `reference` (the answer key) run on an identical critic; hints for the points that are not x_hat."""
    device = device or get_device()
    model = critic(kind, shape, seed=seed, dtype=dtype, device=device)
    twin = copy.deepcopy(model)
    real, fake, alpha = penalty_inputs(batch, shape, alpha_kind, seed=seed + 10, dtype=dtype, device=device)
    shown = {"critic": f"{kind} critic for inputs of shape {tuple(shape)}", "real": real, "fake": fake, "alpha": alpha}
    value = _student_penalty(exercise, student, model, real, fake, alpha, shown)
    expected = reference(twin, real, fake, alpha)
    expected.backward()
    expected_grads = {name: p.grad for name, p in twin.named_parameters()}

    def hints():  # the reference at the points learners take instead of x_hat
        points = [("that is the penalty at real, not at x_hat = alpha real + (1 - alpha) fake", 1.0),
                  ("that is the penalty at fake, not at x_hat = alpha real + (1 - alpha) fake", 0.0),
                  ("that is the penalty at (1 - alpha) real + alpha fake: alpha weighs real",
                   1 - torch.as_tensor(alpha, dtype=dtype, device=device))]
        with torch.enable_grad():
            return [(label, reference(copy.deepcopy(model), real, fake, a).detach()) for label, a in points]

    _compare_penalty(exercise, model, value, expected.detach(), expected_grads, shown, hints)


# --- SmoothAbs --------------------------------------------------------------------------------------------
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


def _apply(cls, x, eps):
    return cls.apply(x) if eps is None else cls.apply(x, eps)


@dataclasses.dataclass
class FirstOrderRun:
    """What SmoothAbs.apply gave, whether its grad_fn is the class's own backward, and what that
    backward returned when called directly (autograd refused meanwhile)."""
    out: object = None
    own_node: bool = False
    grads: object = None


def _first_order_run(cls, x, eps, g):
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


def _function_class_facts(cls):
    return bool(isinstance(cls, type) and issubclass(cls, torch.autograd.Function)), checks.describe(cls)


def _check_function_class(exercise, cls):
    facts = checks.call_student(exercise, _function_class_facts, cls, names=["the class"])
    is_function, text = facts if isinstance(facts, tuple) and len(facts) == 2 else (False, checks.describe(facts))
    if is_function is not True:
        _fail(exercise, f"should be a subclass of torch.autograd.Function (static forward and backward, used "
              f"through .apply), got {text}")


def _expected_smooth_abs(x, eps):
    eps = 1e-3 if eps is None else eps
    root = torch.sqrt(x * x + eps * eps)
    return root, x / root, eps * eps / root ** 3  # value, first and second derivative


def check_smooth_abs(exercise, cls, cases):
    """Forward equals sqrt(x^2 + eps^2) (eps 1e-3 when omitted); backward, called directly with
    autograd refused, returns (grad_out x / sqrt(x^2 + eps^2), None)."""
    _check_function_class(exercise, cls)
    for case in cases:
        x, eps, g = case["x"], case["eps"], case["g"]
        shown = {"x": x, "eps": "omitted (default 1e-3)" if eps is None else eps, "grad_out": g}
        run = checks.call_student(exercise, _first_order_run, cls, x, eps, g, names=["SmoothAbs", "x", "eps", "g"],
                                  no_autograd=True)
        if not isinstance(run, FirstOrderRun) or not _is_tensor(run.out):
            _fail(exercise, f"forward should return a tensor, got {checks.describe(getattr(run, 'out', run))}", shown)
        if not run.own_node:
            _fail(exercise, "the output's grad_fn is not SmoothAbs's backward: return forward's result itself and "
                  "call the class through SmoothAbs.apply", shown)
        value, first, _ = _expected_smooth_abs(x, eps)
        _close(exercise, run.out, value, shown=shown, name="forward output")
        grads = run.grads
        if not isinstance(grads, (tuple, list)) or len(grads) != 2:
            _fail(exercise, f"backward should return two values, the gradient of x and None for eps (one per input "
                  f"of forward), got {checks.describe(grads)}", shown)
        if grads[1] is not None:
            _fail(exercise, "backward should return None for eps, a Python number", shown)
        _close(exercise, grads[0], g * first, shown=shown, name="the gradient of x from your backward")


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


def _second_order_run(cls, x, eps, g, gg, gradchecks):
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
    _check_function_class(exercise, cls)
    for case in cases:
        x, eps, g, gg = case["x"], case["eps"], case["g"], case["gg"]
        shown = {"x": x, "eps": "omitted (default 1e-3)" if eps is None else eps, "grad_out": g,
                 "direction of the second derivative": gg}
        run = checks.call_student(exercise, _second_order_run, cls, x, eps, g, gg, x.dtype == torch.float64,
                                  names=["SmoothAbs", "x", "eps", "g", "gg", "gradchecks"])
        if not isinstance(run, SecondOrderRun):
            _fail(exercise, f"no readable answer came back from your notebook: {checks.describe(run)}", shown)
        if run.raised is not None:
            _fail(exercise, f"differentiating your backward raised {run.raised.splitlines()[0]}", shown,
                  f"  {_rule_for(run.raised) or RULE}")
        _, first, second = _expected_smooth_abs(x, eps)
        _close(exercise, run.first, g * first, shown=shown, name="the gradient of x (create_graph=True)")
        if not run.first_has_graph:
            _fail(exercise, "the gradient your backward returns has no graph, even with create_graph=True, so it "
                  "cannot be differentiated again (autograd's second derivative is lost)", shown,
                  f"  {RULE}: no .detach(), no torch.no_grad(), no .item() or NumPy round trip, no "
                  "@once_differentiable")
        if run.second is None:
            _fail(exercise, "the gradient your backward returns does not depend on x in autograd's record", shown,
                  f"  {RULE}: x must come from ctx.saved_tensors, not from a detached copy")
        expected_second = g * gg * second
        rtol, atol = LOOSE[x.dtype]
        if not torch.allclose(run.second.to(x.dtype), expected_second, rtol=rtol, atol=atol):
            _fail(exercise, "the first derivative is right but its derivative (the second derivative of "
                  "sqrt(x^2 + eps^2)) is wrong", shown,
                  "  forward runs without recording, so a tensor it computes and saves (1 / sqrt(x^2 + eps^2), "
                  "say) has no history: backward sees it as a constant. The rule: save only inputs and outputs "
                  "(ctx.save_for_backward(x) or the output) and recompute intermediates in backward from them\n"
                  f"  expected along gg: {checks.describe(expected_second)}\n  got: {checks.describe(run.second)}")
        if run.verdict is not None:
            check, error, first_line = run.verdict
            rule = _rule_for(first_line) or RULE
            _fail(exercise, f"{check} failed: {error}: {first_line}", shown, f"  {rule}")


# --- per_sample_grads -----------------------------------------------------------------------------------
class CountingModel(nn.Module):
    """A small seeded model that counts its forward calls: "mlp" (Linear, Tanh, Linear), "frozen"
    (the same with a frozen first layer and a buffer) or "conv" (Conv2d, ReLU, Flatten, Linear on
    (1, 5, 5) images, so a forgotten batch dimension of one breaks the Flatten)."""

    def __init__(self, kind, n_in, n_out):
        super().__init__()
        self.kind, self.calls = kind, 0
        if kind == "conv":
            self.body = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 3 * 3, n_out))
        else:
            self.body = nn.Sequential(nn.Linear(n_in, 7), nn.Tanh(), nn.Linear(7, n_out))
        if kind == "frozen":
            self.register_buffer("scale", torch.full((n_out,), 0.5))
            self.body[0].requires_grad_(False)

    def forward(self, x):
        self.calls += 1
        out = self.body(x)
        return out * self.scale if self.kind == "frozen" else out


MODEL_NOTES = {"mlp": "Linear(5, 7), Tanh, Linear(7, 3)",
               "frozen": "Linear(5, 7) (frozen), Tanh, Linear(7, 3), times a buffer",
               "conv": "Conv2d(1, 2, 3), ReLU, Flatten, Linear(18, 3) on (1, 5, 5) images"}


def counting_model(kind, *, seed, n_in=5, n_out=3, dtype=torch.float64, device=None):
    return seeded(lambda: CountingModel(kind, n_in, n_out), seed, dtype, device)


def per_sample_inputs(kind, batch, loss, *, seed, n_in=5, n_out=3, dtype=torch.float64, device=None):
    """x for the model kind and y for the loss ("cross_entropy": class indices, "mse": targets)."""
    device = device or get_device()
    x = inputs.randn(batch, *((1, 5, 5) if kind == "conv" else (n_in,)), seed=seed, dtype=dtype, device=device)
    if loss == "cross_entropy":
        return x, inputs.randint(n_out, batch, seed=seed + 1, device=device)
    return x, inputs.randn(batch, n_out, seed=seed + 1, dtype=dtype, device=device)


LOSSES = {"cross_entropy": F.cross_entropy, "mse": F.mse_loss}


def loop_of_single_example_grads(model, loss_fn, x, y):
    """{name: (N, *shape)}: one autograd.grad per example, x[i:i+1] and y[i:i+1] (the definition)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    rows = [torch.autograd.grad(loss_fn(model(x[i:i + 1]), y[i:i + 1]), [p for _, p in named]) for i in range(len(x))]
    return {name: torch.stack([row[j] for row in rows]) for j, (name, _) in enumerate(named)}


def _per_sample_run(student, model, loss_fn, x, y):
    """Driver: the learner's per-example gradients and how often the model ran."""
    model.calls = 0
    with torch.enable_grad():
        result = student(model, loss_fn, x, y)
    return result, model.calls


def check_per_sample_grads(exercise, student, kind, *, batch, loss, seed, dtype=torch.float64, device=None,
                           vectorised=False):
    """A dict {name: (N, *param.shape)} for every parameter that requires grad, entry i the gradient of
    example i's loss; with `vectorised`, also fewer forward calls than examples (no Python loop)."""
    device = device or get_device()
    model = counting_model(kind, seed=seed, dtype=dtype, device=device)
    x, y = per_sample_inputs(kind, batch, loss, seed=seed + 10, dtype=dtype, device=device)
    shown = {"model": MODEL_NOTES[kind], "loss_fn": f"F.{LOSSES[loss].__name__}",
             "x": x, "y": y}
    expected = loop_of_single_example_grads(copy.deepcopy(model), LOSSES[loss], x, y)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    try:
        got, calls = checks.call_student(exercise, _per_sample_run, student, model, LOSSES[loss], x, y,
                                         names=["per_sample_grads", "model", "loss_fn", "x", "y"])
    except GradingError as err:
        shapes = any(words in str(err) for words in ("shape", "size of tensor", "Expected", "dimension"))
        hint = ("\n  the model sees one example at a time: inside vmap, x_i has lost its batch dimension; "
                "model(x[i:i+1]) sees a batch of one, so give it x_i.unsqueeze(0) (and y_i.unsqueeze(0) to the loss)")
        raise GradingError(str(err) + (hint if shapes else "")) from None
    if not isinstance(got, dict):
        _fail(exercise, f"should return a dict {{parameter name: tensor}}, got {checks.describe(got)}", shown)
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad and n in got]
    if frozen:
        _fail(exercise, f"the dict has entries for {frozen}, which do not require grad (frozen): leave them out", shown)
    missing, extra = sorted(expected.keys() - got.keys()), sorted(set(got) - expected.keys())
    if missing or extra:
        _fail(exercise, f"the dict's keys should be the names from model.named_parameters() that require grad, "
              f"{sorted(expected)}; missing {missing}, unexpected {extra}", shown)
    for name, want in expected.items():
        have = got[name]
        if _is_tensor(have) and have.shape == want.shape and not torch.allclose(have, want, rtol=1e-4, atol=1e-6):
            mean = want.mean(0, keepdim=True).expand_as(want)
            if torch.allclose(have, mean, rtol=1e-4, atol=1e-6):
                _fail(exercise, f"every row of {name} is the batch's mean gradient: you differentiated the loss of "
                      "the whole batch. Per-example gradients differentiate each example's own loss "
                      "(torch.func.grad of a one-example loss, vmapped over the examples)", shown)
            for factor, words in ((1 / batch, "divided by"), (batch, "multiplied by")):
                if torch.allclose(have, want * factor, rtol=1e-4, atol=1e-6):
                    _fail(exercise, f"every per-example gradient of {name} is {words} N = {batch}: entry i is the "
                          "gradient of example i's own loss, loss_fn(model(x[i:i+1]), y[i:i+1]), not a share of "
                          "the batch's", shown)
        _close(exercise, have.detach() if _is_tensor(have) else have, want, shown=shown,
               name=f"the per-example gradients of {name}")
    changed = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    if changed:
        _fail(exercise, f"your function changed the model's parameters {changed}", shown)
    if vectorised and calls >= batch:
        _fail(exercise, f"your function ran the model {calls} times for {batch} examples: a Python loop over the "
              "examples. The exercise asks for one vectorised call: torch.func.vmap over "
              "torch.func.grad of a one-example loss (written with torch.func.functional_call)", shown)


# --- attach_step_in_backward ----------------------------------------------------------------------------
class TiedModel(nn.Module):
    """x -> tanh(x W^T) W: one weight used twice (its gradient has two parts), plus a bias."""

    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(4, n))
        self.bias = nn.Parameter(torch.empty(n))

    def forward(self, x):
        return torch.tanh(x @ self.weight.T) @ self.weight + self.bias


def step_model(kind, *, seed, dtype=torch.float64, device=None):
    """"mlp" (Linear, Tanh, Linear), "frozen" (its first Linear frozen) or "tied" (`TiedModel`)."""
    if kind == "tied":
        return seeded(lambda: TiedModel(5), seed, dtype, device)
    model = seeded(lambda: nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 5)), seed, dtype, device)
    if kind == "frozen":
        model[0].requires_grad_(False)
    return model


@dataclasses.dataclass
class StepRun:
    """What attach_step_in_backward did, as data: what it returned (count, whether each has remove()),
    the parameters and .grad flags after one backward, then after a backward with the handles removed."""
    returned: object = None
    handles: int = 0
    removable: bool = False
    after_first: dict = None
    grads_left: tuple = ()
    after_second: dict = None
    grads_second: dict = None


def _loss(model, x):
    return (model(x) - 0.5).pow(2).mean()


def _step_run(student, model, lr, x):
    """Driver: attach, one forward and backward, then remove the handles and run another."""
    handles = student(model, lr)
    run = StepRun()
    if not isinstance(handles, (list, tuple)):
        run.returned = handles
        return run
    run.handles, run.removable = len(handles), all(callable(getattr(h, "remove", None)) for h in handles)
    with torch.enable_grad():
        _loss(model, x).backward()
    run.after_first = {n: p.detach().clone() for n, p in model.named_parameters()}
    run.grads_left = tuple(n for n, p in model.named_parameters() if p.grad is not None)
    if not run.removable:
        return run
    for h in handles:
        h.remove()
    model.zero_grad(set_to_none=True)
    with torch.enable_grad():
        _loss(model, x).backward()
    run.after_second = {n: p.detach().clone() for n, p in model.named_parameters()}
    run.grads_second = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return run


def check_step_in_backward(exercise, student, kind, *, lr, seed, dtype=torch.float64, device=None):
    """After attach_step_in_backward(model, lr) and one backward: every parameter that requires grad has
    taken p - lr * grad (as an SGD step after backward would), frozen ones have not moved, no .grad is
    left; one handle per trainable parameter, and once they are removed backward fills .grad again."""
    device = device or get_device()
    model = step_model(kind, seed=seed, dtype=dtype, device=device)
    x = inputs.randn(6, 5, seed=seed + 1, dtype=dtype, device=device)
    shown = {"model": f"{kind}: {checks.describe(model)}", "lr": lr, "x": x}
    twin = copy.deepcopy(model)
    _loss(twin, x).backward()
    trainable = [n for n, p in twin.named_parameters() if p.requires_grad]
    with torch.no_grad():
        for p in twin.parameters():
            if p.grad is not None:
                p -= lr * p.grad
    stepped = {n: p.detach().clone() for n, p in twin.named_parameters()}
    twin.zero_grad(set_to_none=True)
    _loss(twin, x).backward()
    try:
        run = checks.call_student(exercise, _step_run, student, model, lr, x,
                                  names=["attach_step_in_backward", "model", "lr", "x"])
    except GradingError as err:
        late = "NoneType" in str(err)
        raise GradingError(str(err) + ("\n  a hook read a .grad that was None: does it use the parameter it is "
                                       "called with? A function defined in a loop sees the loop variable's value "
                                       "when it runs (the last parameter), not when it was defined" if late else "")
                           ) from None
    if not isinstance(run, StepRun):
        _fail(exercise, f"no readable answer came back from your notebook: {checks.describe(run)}", shown)
    if run.after_first is None:
        _fail(exercise, f"should return a list of the hook handles (one per parameter that requires grad), got "
              f"{checks.describe(run.returned)}", shown)
    if run.handles != len(trainable):
        _fail(exercise, f"returned {run.handles} handles; the model has {len(trainable)} parameters that require "
              "grad, and each needs its own hook (and handle)", shown)
    if not run.removable:
        _fail(exercise, "returned something other than hook handles: return what "
              "register_post_accumulate_grad_hook returns (each has .remove())", shown)
    for name in stepped:
        _close(exercise, run.after_first[name], stepped[name], shown=shown,
               name=f"{name} after one backward (an SGD step p - lr * grad)")
    if run.grads_left:
        _fail(exercise, f"after backward, .grad of {', '.join(run.grads_left)} is still set: once the step is "
              "taken the hook must free it (p.grad = None). That is the memory this saves: no gradient waits "
              "for an optimizer step after backward", shown)
    for name, p in twin.named_parameters():
        moved = not torch.equal(run.after_second[name], run.after_first[name])
        if moved or (p.grad is not None) != (name in run.grads_second):
            _fail(exercise, f"after every returned handle was removed, backward still {'moved' if moved else 'freed'} "
                  f"{name}: the returned handles must be those of the hooks that do the work", shown)
    for name, p in twin.named_parameters():
        if p.grad is not None:
            _close(exercise, run.grads_second[name], p.grad, shown=shown,
                   name=f"{name}.grad of a backward after the handles were removed")


# --- tbptt_backward -------------------------------------------------------------------------------------
class ScalarCell(nn.Module):
    """h' = tanh(w h + u x + b) on scalars: small enough to check by hand."""

    def __init__(self, w=0.8, u=0.5, b=-0.1):
        super().__init__()
        self.w, self.u, self.b = (nn.Parameter(torch.tensor(v, dtype=torch.float64)) for v in (w, u, b))

    def forward(self, x, h):
        return torch.tanh(self.w * h + self.u * x + self.b)


def rnn_cell(kind, *, seed, n_in=3, hidden=4, dtype=torch.float64, device=None):
    """A seeded cell(x_t, h) -> h: torch's "rnn" (tanh) or "gru" cell."""
    build = {"rnn": lambda: nn.RNNCell(n_in, hidden), "gru": lambda: nn.GRUCell(n_in, hidden)}[kind]
    return seeded(build, seed, dtype, device)


def squared_error(h, target):
    return (h - target).pow(2).sum()


def sequence(kind, steps, *, seed, batch=2, n_in=3, hidden=4, dtype=torch.float64, device=None, as_list=False):
    """xs, targets (mse: (T, batch, hidden); "classes": class indices) and h0 for a seeded cell."""
    device = device or get_device()
    xs = inputs.randn(steps, batch, n_in, seed=seed, dtype=dtype, device=device)
    if kind == "classes":
        targets = inputs.randint(hidden, steps, batch, seed=seed + 1, device=device)
    else:
        targets = inputs.randn(steps, batch, hidden, seed=seed + 1, dtype=dtype, device=device, scale=0.5)
    h0 = inputs.randn(batch, hidden, seed=seed + 2, dtype=dtype, device=device, scale=0.3)
    if as_list:  # one storage per step: the saved-bytes count then sees one step's input, not the sequence
        xs, targets = [t.clone() for t in xs], [t.clone() for t in targets]
    return xs, targets, h0


TBPTT_LOSSES = {"mse": F.mse_loss, "classes": F.cross_entropy, "squared_error": squared_error}


def _tbptt_run(student, cell, xs, targets, h0, k, loss_fn):
    """Driver: the learner's truncated BPTT; its gradients stay in the cell's (and h0's) .grad."""
    with torch.enable_grad():
        return student(cell, xs, targets, h0, k, loss_fn)


def _hint_for_error(text):
    if "backward through the graph a second time" in text:
        return ("\n  the hidden state still carries the previous segment's graph, which its backward() has freed: "
                "detach h at each segment boundary (h = h.detach())")
    return ""


def _student_tbptt(exercise, student, cell, xs, targets, h0, k, loss_fn, shown):
    # a closure, not arguments: call_student hands arguments over as detached copies, and h0 must stay
    # the leaf it is (with requires_grad) for its gradient to come back
    try:
        total = checks.call_student(exercise, lambda: _tbptt_run(student, cell, xs, targets, h0, k, loss_fn))
    except GradingError as err:
        raise GradingError(f"{err}\n  on input:\n{checks.describe_inputs(shown)}{_hint_for_error(str(err))}") from None
    if not isinstance(total, numbers.Real) or isinstance(total, bool):
        _fail(exercise, f"should return the total loss as a Python float (loss.item() summed over segments), got "
              f"{checks.describe(total)}", shown)
    return float(total)


def _grads_of(cell, h0):
    grads = {f"cell.{n}": p.grad for n, p in cell.named_parameters()}
    if h0.requires_grad:
        grads["h0"] = h0.grad
    return grads


def _compare_tbptt(exercise, total, expected_total, grads, expected_grads, shown, hints=list):
    """The total, then each gradient; `hints()` (computed only on a mismatch) names known wrong ones."""
    float32 = any(g.dtype == torch.float32 for g in expected_grads.values())  # items summed in another order
    if abs(total - expected_total) > (1e-5 if float32 else 1e-9) * max(1.0, abs(expected_total)):
        _fail(exercise, f"returned a total loss of {total:.10g}, expected {expected_total:.10g} (the sum of every "
              "step's loss_fn(h_t, targets[t]))", shown)
    for name, want in expected_grads.items():
        have = grads[name]
        if have is None:
            where = ("h0 requires grad, so the first segment's backward reaches it: do not detach h0" if name == "h0"
                     else "no segment's backward reached it")
            _fail(exercise, f"{name}.grad is None: {where}", shown)
        rtol, atol = LOOSE[want.dtype]
        if not torch.allclose(have, want, rtol=rtol, atol=atol):
            for label, wrong in hints():
                if torch.allclose(have, wrong[name], rtol=rtol, atol=atol):
                    _fail(exercise, f"{name}.grad is wrong: {label}", shown)
        _close(exercise, have, want, shown=shown, name=f"{name}.grad")


def check_tbptt_expected(exercise, student, *, xs, targets, k, expected_total, expected_grads, h0=0.0):
    """On `ScalarCell` and squared errors, the total and the gradients of w, u, b equal the literal
    values a test cell states."""
    device = get_device()
    cell = ScalarCell().to(device)
    xs_t = torch.tensor(xs, dtype=torch.float64, device=device)
    targets_t = torch.tensor(targets, dtype=torch.float64, device=device)
    h0_t = torch.tensor(h0, dtype=torch.float64, device=device)
    shown = {"cell": "h' = tanh(0.8 h + 0.5 x - 0.1)", "xs": xs_t, "targets": targets_t, "h0": h0_t, "k": k,
             "loss_fn": "(h - target)**2"}
    total = _student_tbptt(exercise, student, cell, xs_t, targets_t, h0_t, k, squared_error, shown)
    expected = {f"cell.{n}": torch.tensor(v, dtype=torch.float64, device=device) for n, v in expected_grads.items()}

    def hints():
        found = []
        for label, detach_each_step, differs in ((FULL_BPTT, False, k < len(xs)), (EVERY_STEP, True, k > 1)):
            if differs:
                other = ScalarCell().to(device)
                _plain_unroll(other, xs_t, targets_t, h0_t, squared_error, detach_each_step)
                found.append((label, _grads_of(other, h0_t)))
        return found

    _compare_tbptt(exercise, total, expected_total, _grads_of(cell, h0_t), expected, shown, hints)


FULL_BPTT = ("they are those of full backpropagation through time: was the hidden state never detached (kept "
             "with retain_graph=True)?")
EVERY_STEP = "they are those of k = 1: the hidden state was detached after every step, not every k steps"


def _plain_unroll(cell, xs, targets, h0, loss_fn, detach_each_step):
    """Gradients of two slips (never truncated, or truncated after every step): one backward at the end."""
    h, loss = h0, 0
    for t in range(len(xs)):
        h = cell(xs[t], h)
        loss = loss + loss_fn(h, targets[t])
        if detach_each_step:
            h = h.detach()
    loss.backward()


def check_tbptt(exercise, student, reference, cell_kind, *, steps, k, loss, seed, h0_requires_grad=False,
                preset_grads=False, as_list=False, dtype=torch.float64, device=None):
    """Total loss and gradients (the cell's, and h0's when it requires grad) against `reference` (the
    answer key) on an identical cell; with `preset_grads` the cell's .grad starts non-zero and must be
    added to, not replaced (zeroing is the caller's)."""
    device = device or get_device()
    cell = rnn_cell(cell_kind, seed=seed, dtype=dtype, device=device)
    xs, targets, h0 = sequence(loss, steps, seed=seed + 10, dtype=dtype, device=device, as_list=as_list)
    fn = TBPTT_LOSSES[loss]

    def reference_run(truncation):  # on a copy of the cell with empty .grad, and a fresh h0
        twin, twin_h0 = copy.deepcopy(cell), h0.detach().clone().requires_grad_(h0_requires_grad)
        twin.zero_grad(set_to_none=True)
        return reference(twin, xs, targets, twin_h0, truncation, fn), _grads_of(twin, twin_h0)

    expected_total, increments = reference_run(k)
    preset = {}
    if preset_grads:
        for i, (name, p) in enumerate(cell.named_parameters()):
            p.grad = inputs.randn(*p.shape, seed=seed + 20 + i, dtype=dtype, device=device)
            preset[f"cell.{name}"] = p.grad.clone()
    h0.requires_grad_(h0_requires_grad)
    shown = {"cell": checks.describe(cell), "len(xs)": steps, "k": k, "loss_fn": fn.__name__,
             "h0 requires grad": h0_requires_grad, "cell's .grad before the call": "set" if preset_grads else "None"}
    total = _student_tbptt(exercise, student, cell, xs, targets, h0, k, fn, shown)

    def hints():  # the gradients of the usual slips, computed when a gradient does not match
        found = []
        if preset:
            found.append(("it holds this call's gradients alone; the .grad that was there before the call is "
                          "gone. Leave zeroing to the caller: backward() adds to .grad", increments))
        for label, other_k in ((FULL_BPTT, steps), (EVERY_STEP, 1)):
            if other_k != k:
                other = reference_run(other_k)[1]
                found.append((label, {n: g + preset[n] if n in preset else g for n, g in other.items()}))
        return found

    expected = {n: g + preset[n] if n in preset else g for n, g in increments.items()}
    _compare_tbptt(exercise, total, expected_total, _grads_of(cell, h0), expected, shown, hints)


def _tbptt_saved(student, cell, xs, targets, h0, k, loss_fn):
    """Driver: the learner's truncated BPTT inside a saved-tensor ledger; what it counted, as numbers."""
    with SavedTensorLedger() as ledger:
        _tbptt_run(student, cell, xs, targets, h0, k, loss_fn)
    return SavedCounts.of(ledger)


def check_tbptt_memory(exercise, student, *, k, lengths, seed, cell_kind="rnn", hidden=16, dtype=torch.float32,
                       device=None):
    """The peak of saved bytes does not grow with len(xs): one backward per segment frees each segment's
    graph before the next is built (one backward at the end keeps them all). Each step's input is a
    tensor of its own, so the count sees one step's input, not the whole sequence's storage."""
    device = device or get_device()
    peaks = {}
    for steps in lengths:
        cell = rnn_cell(cell_kind, seed=seed, hidden=hidden, dtype=dtype, device=device)
        xs, targets, h0 = sequence("mse", steps, seed=seed + 10, batch=4, hidden=hidden, dtype=dtype, device=device,
                                   as_list=True)
        shown = {"cell": checks.describe(cell), "len(xs)": steps, "k": k, "loss_fn": "mse_loss"}
        counts = _call_tbptt_saved(exercise, student, cell, xs, targets, h0, k, shown)
        if not isinstance(counts, SavedCounts):
            _fail(exercise, f"no readable answer came back from your notebook: {checks.describe(counts)}", shown)
        if counts.total_bytes == 0 or any(p.grad is None for p in cell.parameters()):
            _fail(exercise, "nothing was saved for backward, or the cell got no gradient: does your function build "
                  "a graph through the cell and call backward()?", shown)
        peaks[steps] = counts.peak_bytes
    short, long = min(lengths), max(lengths)
    if peaks[long] > 1.05 * peaks[short]:
        _fail(exercise, f"the peak of saved bytes grows with the sequence: {peaks[short]} bytes for {short} steps, "
              f"{peaks[long]} for {long} steps (k = {k})",
              details="  with one backward() per segment, each segment's graph is freed before the next one is "
                      "built, so the peak is one segment's activations however long the sequence. Is backward() "
                      "called once at the end, or does a segment's graph stay alive (a loss summed across segments, "
                      "retain_graph=True)?")


def _call_tbptt_saved(exercise, student, cell, xs, targets, h0, k, shown):
    try:
        return checks.call_student(exercise, lambda: _tbptt_saved(student, cell, xs, targets, h0, k, F.mse_loss))
    except GradingError as err:
        raise GradingError(f"{err}\n  on input:\n{checks.describe_inputs(shown)}{_hint_for_error(str(err))}") from None
