"""The checks of notebook 01's six exercises: each answer against autograd's derivative, with autograd
refused inside the answer (the rules of `rules.BY_HAND`: the exercises ask for the derivative by hand).

A grade cell lists its cases (dicts of named inputs, drawn with `autograder.learner.inputs` or written
out; the functions numerical_grad differentiates and `with_zeros` come from here) and calls one check
per exercise; a visible test may give its answer written out (`check_example`). A check given a
`stress` of `autograder.checks.battery` ("special-points", "large-logits", "batch-of-one") runs its
cases inside `battery.stressed`, so that a failure names the input that broke the answer; the
reference is then computed in float64 and cast back, because those are the inputs where float32
itself breaks. No answer lives here: every reference is autograd through the function the exercise
differentiates.
"""
import torch
import torch.nn.functional as F

from autograder import checks
from autograder.checks import battery
from autograder.checks.nb01_chain_rule.layouts import check_layouts
from autograder.checks.nb01_chain_rule.rules import BY_HAND
from autograder.checks.rules import guards_of
from autograder.learner.device import get_device


# --- cases ---------------------------------------------------------------------------------------------
def literal(value):
    """A tensor of nested lists on the grading device: floats in float64, integers (class indices) in int64."""
    floating = torch.tensor(value).is_floating_point()  # (float64 from the literal: no float32 on the way)
    return torch.tensor(value, dtype=torch.float64 if floating else None, device=get_device())


# The scalar functions whose gradients numerical_grad is checked on. Their curvature is large enough that
# forward differences (error ~ eps * f''/2) miss the tolerance.
def cubic_cosine(v):
    return (v**3).sum() / 3 + torch.cos(3 * v).sum()


def coupled_tanh(v):
    return torch.tanh(v @ v.T).sum() + (v[0] ** 2).sum()


def squares_as_a_number(v):
    return float((v**2).sum())  # f may return a Python number


def with_zeros(x):
    """`x` with exact zeros where |x| < 0.5: relu has its kink there."""
    return torch.where(x.abs() < 0.5, torch.zeros_like(x), x)


# --- references: autograd through the function each exercise differentiates ------------------------------
def linear_mse_reference(W, x, y):
    leaf = W.detach().clone().requires_grad_()
    return torch.autograd.grad(((leaf @ x - y) ** 2).sum(), leaf)[0]


def two_layer_reference(x, W1, W2):
    leaves = [t.detach().clone().requires_grad_() for t in (x, W1, W2)]
    loss = ((leaves[2] @ torch.sigmoid(leaves[1] @ leaves[0])) ** 2).sum()
    return torch.autograd.grad(loss, leaves)


def numerical_grad_reference(f, x):
    if f is squares_as_a_number:  # a Python number, which autograd cannot follow: its gradient is 2x
        return 2 * x
    leaf = x.detach().clone().requires_grad_()
    return torch.autograd.grad(f(leaf), leaf)[0]


def sigmoid_reference(x):
    leaf = x.detach().clone().requires_grad_()
    return torch.autograd.grad(torch.sigmoid(leaf).sum(), leaf)[0]


def relu_reference(x):
    leaf = x.detach().clone().requires_grad_()
    return torch.autograd.grad(torch.relu(leaf).sum(), leaf)[0]


def softmax_jacobian_reference(z):
    return torch.autograd.functional.jacobian(lambda v: torch.softmax(v, dim=0), z)


def xent_reference(z, t):
    leaf = z.detach().clone().requires_grad_()
    return torch.autograd.grad(F.cross_entropy(leaf, t), leaf)[0]


def in_float64(reference):
    """`reference` computed on the floating-point inputs in float64, its results cast back to their dtype."""
    def run(*args):
        dtype = next(a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point())
        out = reference(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args])
        return out.to(dtype) if isinstance(out, torch.Tensor) else tuple(o.to(dtype) for o in out)
    return run


# --- checks ------------------------------------------------------------------------------------------------
def check_example(exercise, fn, args, expected, *, names, shown=None, **tolerance):
    """`fn` on a case written out (`args`: {name: nested list, or a function}) against its answer written
    out (`expected`, a nested list); the message shows the inputs as written (or as `shown`)."""
    values = [literal(v) if isinstance(v, (list, int, float)) else v for v in args.values()]
    got = checks.call_student(exercise, fn, *values, names=list(args), **guards_of(BY_HAND, exercise))
    checks.expect_close(exercise, got, literal(expected), inputs=shown or args, names=names, **tolerance)


def check_against(exercise, fn, reference, cases, *, names, stress=None, **tolerance):
    """`fn` on every case against `reference`, autograd refused; under a `stress` the reference runs in
    float64 and a failure names the stress."""
    with battery.stressed(exercise, stress):
        checks.check_cases(exercise, fn, in_float64(reference) if stress else reference, cases, names=names,
                           **guards_of(BY_HAND, exercise), **tolerance)


def check_linear_mse_grad(exercise, fn, cases):
    check_against(exercise, fn, linear_mse_reference, cases, names=["dL/dW"])


def check_two_layer_backward(exercise, fn, cases, stress=None):
    check_against(exercise, fn, two_layer_reference, cases, names=["dL_dx", "dL_dW1", "dL_dW2"], stress=stress)


NUMERICAL_TOLERANCE = dict(rtol=1e-6, atol=1e-7)  # central differences in float64 reach it; forward ones do not


def check_numerical_grad(exercise, fn, cases, stress=None):
    """Against autograd; a "non-contiguous" stress hands each x over in the layout its case built (a
    transpose, a slice with gaps), which call_student's own copies would make contiguous again."""
    if stress == "non-contiguous":
        check_layouts(exercise, fn, numerical_grad_reference, cases, what="x", names=["gradient"],
                      **NUMERICAL_TOLERANCE)
    else:
        check_against(exercise, fn, numerical_grad_reference, cases, names=["gradient"], stress=stress,
                      **NUMERICAL_TOLERANCE)


def check_keeps_input(exercise, fn, case):
    """fn(f, x) leaves the caller's x as it was, bit for bit."""
    change = checks.call_student(exercise, checks.run_input_change, fn, *case.values(),
                                 names=[exercise, *case], **guards_of(BY_HAND, exercise))
    if change:
        checks.fail(exercise, f"changed the caller's x (max change {change:.3g}); "
                              "perturb a copy, or put back the exact original value")


def check_sigmoid_grad(exercise, fn, cases, stress=None):
    check_against(exercise, fn, sigmoid_reference, cases, names=["sigma'(x)"], stress=stress)


def check_relu_grad(exercise, fn, cases, stress=None):
    """Against autograd's 0/1 mask; a "non-contiguous" stress hands each x over in the layout its case built."""
    if stress == "non-contiguous":
        check_layouts(exercise, fn, relu_reference, cases, what="x", names=["relu'(x)"])
    else:
        check_against(exercise, fn, relu_reference, cases, names=["relu'(x)"], stress=stress)


def check_softmax_jacobian(exercise, fn, cases, stress=None):
    check_against(exercise, fn, softmax_jacobian_reference, cases, names=["J"], stress=stress)


def check_softmax_xent_grad(exercise, fn, cases, stress=None):
    check_against(exercise, fn, xent_reference, cases, names=["dL/dz"], stress=stress)
