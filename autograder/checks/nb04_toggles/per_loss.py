"""per_loss_grads: the gradients of several losses of one forward pass, each on its own, and .grad
left as it was: that of the params, and that of every other leaf of the graph (the model's other
parameters, which a backward() without `inputs=` would fill).

The reference for a loss's gradients is that loss alone, from a forward pass of its own. Taking a
gradient is what the exercise asks, so hidden tests pass the course's answer key as `reference`
and it is applied to one freshly built loss at a time; visible tests state the gradients of a small
graph literally (`check_per_loss_example`).
"""
import functools

import torch
import torch.nn.functional as F

from autograder import checks
from autograder.checks import GradingError
from autograder.checks.nb04_toggles.cases import GRAD_ON, expect_close_reordered, run_case, summary, unreadable
from autograder.checks.nb04_toggles.models import describe_model, two_heads
from autograder.learner import inputs
from autograder.learner.device import get_device

LOSS_NAMES = ("mse of head a", "cross-entropy of head b", "mean square of the trunk features")


def multitask_losses(model, seed, dtype, device):
    """Three losses of one forward through a TwoHeads model: [mse(a), cross_entropy(b), h.pow(2).mean()]."""
    x = inputs.randn(9, 4, seed=seed + 1, dtype=dtype, device=device)
    h, a, b = model(x)
    target_a = inputs.randn(9, 2, seed=seed + 2, dtype=dtype, device=device)
    target_b = inputs.randint(3, 9, seed=seed + 3, device=device)
    return [F.mse_loss(a, target_a), F.cross_entropy(b, target_b), h.pow(2).mean()]


def multitask_setup(seed, which, param_names, dtype):
    """(losses `which` of one forward through a seeded TwoHeads model, the parameters `param_names`,
    {name: parameter} of the model's other parameters)."""
    device = get_device()
    model = two_heads(seed, dtype, device)
    named = dict(model.named_parameters())
    losses = multitask_losses(model, seed, dtype, device)
    others = {n: p for n, p in named.items() if n not in param_names}
    return [losses[i] for i in which], [named[n] for n in param_names], others


def shared_product_setup(dtype=torch.float64):
    """w = [1, 2] and v = [3] (leaves), h = w * v; losses [h.sum(), (h * h).sum(), (w * w).sum()]:
    the first two share h, the third does not depend on v. No other leaf: ({} as the third item)."""
    device = get_device()
    w = torch.tensor([1.0, 2.0], dtype=dtype, device=device, requires_grad=True)
    v = torch.tensor([3.0], dtype=dtype, device=device, requires_grad=True)
    h = w * v
    return [h.sum(), (h * h).sum(), (w * w).sum()], [w, v], {}


SHARED_PRODUCT_LOSSES = ("h.sum()", "(h * h).sum()", "(w * w).sum()")


def _per_loss_hint(got, expected, k, loss_names):
    def same(a, b):
        try:
            return all(torch.allclose(x.double(), y.double(), rtol=1e-5, atol=1e-8) for x, y in zip(a, b))
        except Exception:  # a malformed entry: the message above says enough
            return False

    def total(parts):
        return [sum(p[j] for p in parts) for j in range(len(parts[0]))]

    if k > 0 and same(got[k], total(expected[:k + 1])):
        return ("\n  hint: the earlier losses' gradients were added in: backward() adds into .grad, so clear it "
                "between losses, or use torch.autograd.grad, which returns fresh tensors")
    if len(expected) > 1 and same(got[k], total(expected)):
        return "\n  hint: this is the gradient of the sum of all the losses: differentiate each loss on its own"
    for j, other in enumerate(expected):
        if j != k and same(got[k], other):
            return (f"\n  hint: these are the gradients of {loss_names[j]}: a tensor you keep from .grad "
                    "changes when .grad does (zero_() works in place); keep copies (.clone()), or use "
                    "torch.autograd.grad")
    if len(expected) > 1:
        return ("\n  hint: each tuple must hold the gradients of its own loss alone, in tensors that nothing "
                "changes afterwards (a tensor taken from .grad changes when .grad is zeroed in place or added to)")
    return ""


def _stale_grads(params, seed, dtype, device):
    """Half the .grad buffers hold an earlier gradient (every other one), the others None."""
    return [inputs.randn(*p.shape, seed=seed + 50 + k, dtype=dtype, device=device) if k % 2 == 0 else None
            for k, p in enumerate(params)]


@GRAD_ON
def run_per_loss(fn, setup, stale):
    """Driver: fn(losses, params) on `setup()`'s losses (one shared forward) and parameters, their .grad
    set to `stale` first; returns (what fn returned, every param's .grad after the call, {name: .grad}
    of the other leaves, whose .grad was None before the call)."""
    losses, params, others = setup()
    for p, g in zip(params, stale):
        p.grad = None if g is None else g.clone()
    got = fn(losses, list(params))
    return got, [p.grad for p in params], {name: leaf.grad for name, leaf in others.items()}


def _compare(exercise, result, expected, *, case, loss_names, param_names, before):
    if not (isinstance(result, tuple) and len(result) == 3):  # not what the driver returns
        unreadable(exercise, result, case)
    got, after, others = result
    if not isinstance(got, (list, tuple)) or len(got) != len(expected):
        checks.fail(exercise, f"should return one tuple per loss ({len(expected)}), got {summary(got)}",
                    details=f"  case: {case}")
    for k, g in enumerate(got):
        if not isinstance(g, (list, tuple)) or len(g) != len(param_names):
            checks.fail(exercise, f"entry {k} should hold one gradient per parameter ({len(param_names)}), "
                                  f"got {summary(g)}", details=f"  case: {case}")
        try:
            expect_close_reordered(exercise, g, expected[k], case=case,
                                   names=[f"d({loss_names[k]})/d {n}" for n in param_names])
        except GradingError as err:
            raise GradingError(str(err) + _per_loss_hint(got, expected, k, loss_names)) from None
    for name, grad, old in zip(param_names, after, before):
        if old is None and grad is not None:
            checks.fail(exercise, f"{name}.grad was None before the call and holds a tensor after it",
                        details=f"  case: {case}\n  per_loss_grads must leave .grad as it found it: use "
                                "torch.autograd.grad, or save each .grad before and put it back after")
        if old is not None and (not isinstance(grad, torch.Tensor) or grad.shape != old.shape
                                or grad.dtype != old.dtype or not torch.equal(grad, old)):
            checks.fail(exercise, f"{name}.grad changed during the call",
                        details=f"  case: {case}\n  per_loss_grads must leave .grad as it found it (an earlier "
                                "gradient may be waiting there for the optimizer): use torch.autograd.grad, or save "
                                "and restore .grad")
    touched = [name for name, grad in others.items() if grad is not None]
    if touched:
        checks.fail(exercise, f"{touched[0]}.grad (a parameter of the model, not in params) was None before the call "
                              "and holds a tensor after it",
                    details=f"  case: {case}\n  backward() fills the .grad of every leaf it reaches, not only those "
                            "of params: use torch.autograd.grad, or pass inputs=params to backward()")


def check_per_loss_grads(exercise, fn, reference, *, seed, which=(0, 1, 2), param_names=None, dtype=torch.float64,
                         stale_grads=True):
    """fn(losses, params) on losses of one shared forward through a seeded TwoHeads model: each tuple
    equals reference([that loss], params)[0] computed on a forward pass of its own, every param's .grad
    is left exactly as it was, and the model's other parameters keep .grad None."""
    device = get_device()
    model = two_heads(seed, dtype, device)
    param_names = list(param_names or dict(model.named_parameters()))
    which = tuple(which)
    _, params, _ = multitask_setup(seed, which, param_names, dtype)
    before = _stale_grads(params, seed, dtype, device) if stale_grads else [None] * len(params)
    case = (f"losses [{', '.join(LOSS_NAMES[i] for i in which)}] of one forward through "
            f"{describe_model(model)}; params {param_names}; {dtype}"
            + ("; some params hold an earlier .grad" if stale_grads else ""))
    setup = functools.partial(multitask_setup, seed, which, param_names, dtype)
    result = run_case(exercise, lambda: run_per_loss(fn, setup, before), case)
    expected = []
    for i in which:  # each loss on a forward pass of its own
        fresh_losses, fresh_params, _ = multitask_setup(seed, (i,), param_names, dtype)
        expected.append(tuple(reference(fresh_losses, fresh_params)[0]))
    _compare(exercise, result, expected, case=case, loss_names=[LOSS_NAMES[i] for i in which],
             param_names=param_names, before=before)


def check_per_loss_example(exercise, fn, expected):
    """fn on the losses of `shared_product_setup` (float64), v.grad holding a leftover [5.] and w.grad None:
    `expected` is what the test cell states, [(d/dw, d/dv) for each loss] as lists."""
    before = [None, torch.tensor([5.0], dtype=torch.float64, device=get_device())]
    case = ("w = [1., 2.] and v = [3.], h = w * v; losses [h.sum(), (h * h).sum(), (w * w).sum()]; "
            "v.grad holds [5.] before the call, w.grad is None")
    result = run_case(exercise, lambda: run_per_loss(fn, shared_product_setup, before), case)
    device = get_device()
    stated = [tuple(torch.tensor(g, dtype=torch.float64, device=device) for g in loss) for loss in expected]
    _compare(exercise, result, stated, case=case, loss_names=SHARED_PRODUCT_LOSSES, param_names=["w", "v"],
             before=before)
