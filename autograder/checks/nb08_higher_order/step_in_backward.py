"""Checks of `attach_step_in_backward(model, lr)`: post-accumulate-grad hooks that take each
parameter's SGD step during backward and free its gradient.

The reference is an SGD step taken after an ordinary backward (not an answer: it registers nothing).
The driver attaches the hooks, runs one backward, removes the handles and runs another, and returns
the parameters and .grad flags as data, so hooks work in the kernel and the comparison happens here.
With `create_graph=True` the first backward records itself, as a gradient penalty's does: hooks then
run with grad mode on, and an in-place step outside torch.no_grad() is refused (the battery's
"create-graph" stress names it).
"""
import copy
import dataclasses

import torch
from torch import nn

from autograder import checks
from autograder.checks import GradingError, battery
from autograder.checks.compare import fail
from autograder.checks.nb08_higher_order.common import close
from autograder.checks.seeded import seeded
from autograder.learner import inputs
from autograder.learner.device import get_device


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


def run_step_in_backward(student, model, lr, x, create_graph=False):
    """Driver: attach, one forward and backward (`create_graph` as given), then remove the handles and
    run a plain one."""
    handles = student(model, lr)
    run = StepRun()
    if not isinstance(handles, (list, tuple)):
        run.returned = handles
        return run
    run.handles, run.removable = len(handles), all(callable(getattr(h, "remove", None)) for h in handles)
    with torch.enable_grad():
        _loss(model, x).backward(create_graph=create_graph)
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


def check_step_in_backward(exercise, student, kind, *, lr, seed, dtype=torch.float64, device=None,
                           create_graph=False):
    """After attach_step_in_backward(model, lr) and one backward: every parameter that requires grad has
    taken p - lr * grad (as an SGD step after backward would), frozen ones have not moved, no .grad is
    left; one handle per trainable parameter, and once they are removed backward fills .grad again.
    With `create_graph`, the first backward is `backward(create_graph=True)`."""
    with battery.stressed(exercise, "create-graph" if create_graph else None):
        _check_step(exercise, student, kind, lr, seed, dtype, device, create_graph)


def _check_step(exercise, student, kind, lr, seed, dtype, device, create_graph):
    device = device or get_device()
    model = step_model(kind, seed=seed, dtype=dtype, device=device)
    x = inputs.randn(6, 5, seed=seed + 1, dtype=dtype, device=device)
    shown = {"model": f"{kind}: {checks.describe(model)}", "lr": lr, "x": x,
             "backward": "backward(create_graph=True)" if create_graph else "backward()"}
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
        run = checks.call_student(exercise, run_step_in_backward, student, model, lr, x, create_graph,
                                  names=["attach_step_in_backward", "model", "lr", "x", "create_graph"])
    except GradingError as err:
        late = "NoneType" in str(err)
        raise GradingError(str(err) + ("\n  a hook read a .grad that was None: does it use the parameter it is "
                                       "called with? A function defined in a loop sees the loop variable's value "
                                       "when it runs (the last parameter), not when it was defined" if late else "")
                           ) from None
    if not isinstance(run, StepRun):
        fail(exercise, f"no readable answer came back from your notebook: {checks.describe(run)}", shown)
    if run.after_first is None:
        fail(exercise, f"should return a list of the hook handles (one per parameter that requires grad), got "
              f"{checks.describe(run.returned)}", shown)
    if run.handles != len(trainable):
        fail(exercise, f"returned {run.handles} handles; the model has {len(trainable)} parameters that require "
              "grad, and each needs its own hook (and handle)", shown)
    if not run.removable:
        fail(exercise, "returned something other than hook handles: return what "
              "register_post_accumulate_grad_hook returns (each has .remove())", shown)
    for name in stepped:
        close(exercise, run.after_first[name], stepped[name], shown=shown,
               name=f"{name} after one backward (an SGD step p - lr * grad)")
    if run.grads_left:
        fail(exercise, f"after backward, .grad of {', '.join(run.grads_left)} is still set: once the step is "
              "taken the hook must free it (p.grad = None). That is the memory this saves: no gradient waits "
              "for an optimizer step after backward", shown)
    for name, p in twin.named_parameters():
        moved = not torch.equal(run.after_second[name], run.after_first[name])
        if moved or (p.grad is not None) != (name in run.grads_second):
            fail(exercise, f"after every returned handle was removed, backward still {'moved' if moved else 'freed'} "
                  f"{name}: the returned handles must be those of the hooks that do the work", shown)
    for name, p in twin.named_parameters():
        if p.grad is not None:
            close(exercise, run.grads_second[name], p.grad, shown=shown,
                   name=f"{name}.grad of a backward after the handles were removed")
