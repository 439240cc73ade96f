"""Checks of `per_sample_grads(model, loss_fn, x, y)`: one gradient per example, with torch.func.

The reference is a loop of single-example gradients, the definition; it is no answer, since the
models here count their forward calls and the vectorised check rejects a function that runs the model
once per example. A `stress` of the battery tries a batch of one and x as a strided view (built in
the driver, where the learner's code runs).
"""
import copy

import torch
import torch.nn.functional as F
from torch import nn

from autograder import checks
from autograder.checks import GradingError, battery
from autograder.checks.compare import fail
from autograder.checks.nb08_higher_order.common import close, is_tensor, strided
from autograder.checks.seeded import seeded
from autograder.learner import inputs
from autograder.learner.device import get_device


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


def run_per_sample(student, model, loss_fn, x, y, stress=None):
    """Driver: the learner's per-example gradients (x as `stress` hands it over) and how often the model ran."""
    model.calls = 0
    with torch.enable_grad():
        result = student(model, loss_fn, strided(x, stress), y)
    return result, model.calls


def check_per_sample_grads(exercise, student, kind, *, batch, loss, seed, dtype=torch.float64, device=None,
                           vectorised=False, stress=None):
    """A dict {name: (N, *param.shape)} for every parameter that requires grad, entry i the gradient of
    example i's loss; with `vectorised`, also fewer forward calls than examples (no Python loop).
    `stress`: "batch-of-one" (a name for batch=1) or "non-contiguous" (x reaches the answer strided)."""
    with battery.stressed(exercise, stress, what="x"):
        _check_per_sample(exercise, student, kind, batch, loss, seed, dtype, device, vectorised, stress)


def _check_per_sample(exercise, student, kind, batch, loss, seed, dtype, device, vectorised, stress):
    device = device or get_device()
    model = counting_model(kind, seed=seed, dtype=dtype, device=device)
    x, y = per_sample_inputs(kind, batch, loss, seed=seed + 10, dtype=dtype, device=device)
    shown = {"model": MODEL_NOTES[kind], "loss_fn": f"F.{LOSSES[loss].__name__}",
             "x": x, "y": y}
    expected = loop_of_single_example_grads(copy.deepcopy(model), LOSSES[loss], x, y)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    try:
        got, calls = checks.call_student(exercise, run_per_sample, student, model, LOSSES[loss], x, y, stress,
                                         names=["per_sample_grads", "model", "loss_fn", "x", "y", "stress"])
    except GradingError as err:
        shapes = any(words in str(err) for words in ("shape", "size of tensor", "Expected", "dimension"))
        hint = ("\n  the model sees one example at a time: inside vmap, x_i has lost its batch dimension; "
                "model(x[i:i+1]) sees a batch of one, so give it x_i.unsqueeze(0) (and y_i.unsqueeze(0) to the loss)")
        raise GradingError(str(err) + (hint if shapes else "")) from None
    if not isinstance(got, dict):
        fail(exercise, f"should return a dict {{parameter name: tensor}}, got {checks.describe(got)}", shown)
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad and n in got]
    if frozen:
        fail(exercise, f"the dict has entries for {frozen}, which do not require grad (frozen): leave them out", shown)
    missing, extra = sorted(expected.keys() - got.keys()), sorted(set(got) - expected.keys())
    if missing or extra:
        fail(exercise, f"the dict's keys should be the names from model.named_parameters() that require grad, "
              f"{sorted(expected)}; missing {missing}, unexpected {extra}", shown)
    for name, want in expected.items():
        have = got[name]
        if is_tensor(have) and have.shape == want.shape and not torch.allclose(have, want, rtol=1e-4, atol=1e-6):
            mean = want.mean(0, keepdim=True).expand_as(want)
            if torch.allclose(have, mean, rtol=1e-4, atol=1e-6):
                fail(exercise, f"every row of {name} is the batch's mean gradient: you differentiated the loss of "
                      "the whole batch. Per-example gradients differentiate each example's own loss "
                      "(torch.func.grad of a one-example loss, vmapped over the examples)", shown)
            for factor, words in ((1 / batch, "divided by"), (batch, "multiplied by")):
                if torch.allclose(have, want * factor, rtol=1e-4, atol=1e-6):
                    fail(exercise, f"every per-example gradient of {name} is {words} N = {batch}: entry i is the "
                          "gradient of example i's own loss, loss_fn(model(x[i:i+1]), y[i:i+1]), not a share of "
                          "the batch's", shown)
        close(exercise, have.detach() if is_tensor(have) else have, want, shown=shown,
               name=f"the per-example gradients of {name}")
    changed = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    if changed:
        fail(exercise, f"your function changed the model's parameters {changed}", shown)
    if vectorised and calls >= batch:
        fail(exercise, f"your function ran the model {calls} times for {batch} examples: a Python loop over the "
              "examples. The exercise asks for one vectorised call: torch.func.vmap over "
              "torch.func.grad of a one-example loss (written with torch.func.functional_call)", shown)
