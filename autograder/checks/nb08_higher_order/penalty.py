"""Checks of `gradient_penalty(critic, real, fake, alpha)`: its value and the gradient it sends to the
critic's parameters.

Visible tests use a quadratic critic whose input gradient, penalty and weight gradient are known in
closed form; hidden tests compare with the answer key (passed in) on seeded MLP and convolutional
critics. The learner's penalty is computed and backpropagated in a driver, so a penalty with no
graph (create_graph forgotten) or one that filled the critic's .grad is seen for what it is. A
`stress` of the battery ("batch-of-one") names the input that broke an answer; on a wrong value, the
hints name the usual slips (the wrong point, the norm over dimension 1 only, the squared norm, ...).
"""
import copy
import dataclasses

import torch
from torch import nn

from autograder import checks
from autograder.checks import battery
from autograder.checks.compare import REORDERED_TOLERANCES, fail
from autograder.checks.nb08_higher_order.common import close, is_tensor
from autograder.checks.seeded import seeded
from autograder.learner import inputs
from autograder.learner.device import get_device


def dimension_one_label(shape):
    """What the norm over dimension 1 alone (`slope.norm(dim=1)`) gets wrong, for examples of `shape`."""
    return (f"that takes the norm over dimension 1 only (slope.norm(dim=1)), which is one example's norm only "
            f"for inputs of shape (N, D); here each example has shape {tuple(shape)}. Take one norm per example "
            "over all its dimensions: flatten each example first (slope.flatten(1)), then the norm over dim 1")


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


def run_penalty(student, critic_, real, fake, alpha):
    """Driver: the learner's penalty, then backward() from it, which fills the critic's .grad."""
    critic_.zero_grad(set_to_none=True)
    with torch.enable_grad():
        penalty = student(critic_, real, fake, alpha)
    if not is_tensor(penalty):
        return PenaltyRun(penalty)
    touched = tuple(name for name, p in critic_.named_parameters() if p.grad is not None)
    critic_.zero_grad(set_to_none=True)
    if penalty.requires_grad and penalty.numel() == 1:
        penalty.backward()
    return PenaltyRun(penalty.detach(), penalty.requires_grad, touched)


def _student_penalty(exercise, student, critic_, real, fake, alpha, shown):
    run = checks.call_student(exercise, run_penalty, student, critic_, real, fake, alpha,
                              names=["gradient_penalty", "critic", "real", "fake", "alpha"])
    if not isinstance(run, PenaltyRun):
        fail(exercise, f"no readable answer came back from your notebook: {checks.describe(run)}", shown)
    if not is_tensor(run.value) or run.value.numel() != 1:
        fail(exercise, f"should return the penalty as a scalar tensor (one number for the batch), got "
              f"{checks.describe(run.value)}", shown)
    if run.grads_during_call:
        fail(exercise, f"your function filled .grad of the critic's {', '.join(run.grads_during_call)}: it called "
              "backward(). Take the gradient with respect to x_hat with torch.autograd.grad(..., "
              "create_graph=True), which returns it without accumulating anything into .grad", shown)
    if not run.requires_grad:
        fail(exercise, "the penalty's gradient did not reach the critic's weights: the penalty does not require grad. "
              "Was torch.autograd.grad called without create_graph=True? Without it, grad_x critic(x_hat) comes "
              "back as a constant with no graph behind it, and nothing in the penalty depends on the weights", shown)
    return run.value.reshape(())


def _compare_penalty(exercise, critic_, value, expected_value, expected_grads, shown, hints=list):
    """The value (with hints for known wrong points, from `hints()`, computed only on a mismatch), then
    the gradient of every critic parameter. A parameter that does not move grad_x critic (a last bias)
    gets no gradient at all: None or zeros."""
    rtol, atol = REORDERED_TOLERANCES[expected_value.dtype]
    if not torch.allclose(value.to(expected_value.dtype), expected_value, rtol=rtol, atol=atol):
        for label, wrong in hints():
            if torch.allclose(value.to(expected_value.dtype), wrong, rtol=rtol, atol=atol):
                fail(exercise, f"the penalty is {value.item():.6g}, expected {expected_value.item():.6g}: {label}",
                      shown)
    close(exercise, value, expected_value, shown=shown, name="the penalty")
    for name, p in critic_.named_parameters():
        want = expected_grads.get(name)
        want = torch.zeros_like(p) if want is None else want
        if p.grad is None and want.count_nonzero():
            fail(exercise, f"backward() from your penalty gave no gradient to the critic's {name}: something between "
                  "the critic and the penalty was detached", shown)
        have = torch.zeros_like(p) if p.grad is None else p.grad
        close(exercise, have, want, shown=shown, name=f"the gradient of the critic's {name}")


def check_penalty_closed_form(exercise, student, *, batch, shape, alpha_kind, seed, dtype=torch.float64,
                              device=None, stress=None):
    """For critic(x) = sum(w x^2) + c, grad_x critic = 2 w x: the penalty and its gradients with
    respect to w and c (zero) are known in closed form. `stress`: the battery's name for the input."""
    with battery.stressed(exercise, stress):
        _check_closed_form(exercise, student, batch, shape, alpha_kind, seed, dtype, device)


def _check_closed_form(exercise, student, batch, shape, alpha_kind, seed, dtype, device):
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
        if len(shape) > 1:
            unflattened = 2 * model.w * point
            hints.append((dimension_one_label(shape), (unflattened.norm(dim=1) - 1).pow(2).mean()))
    _compare_penalty(exercise, model, value, expected, expected_grads, shown, lambda: hints)


def check_penalty(exercise, student, reference, *, kind, batch, shape, alpha_kind, seed, dtype=torch.float64,
                  device=None, stress=None):
    """The learner's penalty and the gradient it sends to a seeded critic's parameters, against
    `reference` (the answer key) run on an identical critic; hints for the points that are not x_hat
    and for the norm over dimension 1 alone. `stress`: the battery's name for the input."""
    with battery.stressed(exercise, stress):
        _check_against_key(exercise, student, reference, kind, batch, shape, alpha_kind, seed, dtype, device)


def _check_against_key(exercise, student, reference, kind, batch, shape, alpha_kind, seed, dtype, device):
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
            found = [(label, reference(copy.deepcopy(model), real, fake, a).detach()) for label, a in points]
            if len(shape) > 1:
                found.append((dimension_one_label(shape), _norm_over_dimension_one(reference, copy.deepcopy(model),
                                                                                   real, fake, alpha)))
        return found

    _compare_penalty(exercise, model, value, expected.detach(), expected_grads, shown, hints)


def _norm_over_dimension_one(reference, critic_, real, fake, alpha):
    """The penalty a learner gets with slope.norm(dim=1) (a slip): the reference's own penalty with
    every position of the dimensions after 1 taken as an example of its own, so that its norm per
    example runs over dimension 1 alone. Nothing here computes a penalty: the answer key does."""
    n, c, rest = real.shape[0], real.shape[1], tuple(real.shape[2:])

    def split(t):  # (N, C, *rest) -> (N * prod(rest), C)
        return t.movedim(1, -1).reshape(-1, c)

    def join(t):
        return t.reshape(n, *rest, c).movedim(-1, 1)

    a = torch.as_tensor(alpha, dtype=real.dtype, device=real.device)
    if a.dim():
        a = split(a.reshape(n, *[1] * (real.dim() - 1)).expand_as(real))[:, :1]
    return reference(lambda x: critic_(join(x)), split(real), split(fake), a if a.dim() else alpha).detach()
