"""scaled_fp16_grads: float32 gradients of an fp16 copy with loss scaling, against float64.

The reference is the float64 gradient (`float64_grads`, plain autograd): not an answer, since the
exercise asks for an fp16 copy's gradients and the -copy test rejects gradients that do not show
fp16's underflow at scale 1. Where hidden tests pass the course's answer key as `plain_fp16`, a
check first shows, on the same model and batch, that plain fp16 gradients (the key at scale 1) are
far from the float64 ones, so that the inputs prove something. The caller's model must come back
untouched: the learner's function runs in the driver `run_on_callers_model`, which returns its
result and the model as the call left it (values, dtypes, requires_grad, .grad); the grader
compares both.
"""
import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from autograder import checks
from autograder.learner.device import get_device


class ScaledLoss:
    """loss_fn(out, y) * factor, with a readable name (a small loss makes small gradients)."""

    def __init__(self, loss_fn, factor, label):
        self.loss_fn, self.factor, self.label = loss_fn, factor, label
        self.__qualname__ = label

    def __call__(self, out, y):
        return self.loss_fn(out, y) * self.factor

    def __repr__(self):
        return self.label


def small_mse(exponent):
    return ScaledLoss(F.mse_loss, 2.0 ** -exponent, f"F.mse_loss(out, y) * 2**-{exponent}")


def small_cross_entropy(exponent):
    return ScaledLoss(F.cross_entropy, 2.0 ** -exponent, f"F.cross_entropy(out, y) * 2**-{exponent}")


def float32_mlp(sizes, *, seed, activation=nn.Tanh, bias=True, device=None):
    """An ordinary float32 MLP whose fp16 copy scaled_fp16_grads makes: Linear layers with `activation`
    in between, PyTorch's default initialisation drawn from `seed` (the global RNG is left alone)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers = []
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1], bias=bias))
            if i < len(sizes) - 2:
                layers.append(activation())
        model = nn.Sequential(*layers)
    return model.to(device or get_device())


def _floating_as(y, dtype):
    return y.to(dtype) if torch.is_floating_point(y) else y


def float64_grads(model, loss_fn, x, y):
    """d loss / d parameters in float64, on a copy: the ground truth the scaled fp16 gradients approach.
    Not an answer: the exercise asks for an fp16 copy's gradients, and these show no fp16 underflow."""
    twin = copy.deepcopy(model).double()
    params = list(twin.parameters())
    loss = loss_fn(twin(x.double()), _floating_as(y, torch.float64))
    return [g.detach() for g in torch.autograd.grad(loss, params)]


def relative_errors(got, ref):
    """||got - ref|| / ||ref|| for each pair of tensors (computed in float64)."""
    errors = []
    for g, r in zip(got, ref):
        g, r = g.detach().double(), r.detach().double()
        norm = r.norm().item()
        errors.append((g - r).norm().item() / norm if norm > 0 else (g - r).norm().item())
    return errors


def _snapshot(model):
    return [(name, p.detach().clone(), p.dtype, p.requires_grad, None if p.grad is None else p.grad.detach().clone())
            for name, p in model.named_parameters()]


def _set_grads(model, grads):
    for p, g in zip(model.parameters(), grads):
        p.grad = None if g is None else g.detach().clone()


def run_on_callers_model(fn, model, grads, loss_fn, x, y, scale):
    """Driver: run where the learner's code runs (in trusted grading, the kernel), it calls
    fn(caller's model, loss_fn, x, y, scale) and return its result with a snapshot of that model
    as the call left it, (name, value, dtype, requires_grad, grad) per parameter, for the grader
    to compare by value with its own snapshot from before the call.

    The learner gets a copy of `model` holding `grads` as its .grad (a pickled module arrives
    without them), so `model` itself stays as the grader sent it: what a call changes in a module
    it was given comes back into the grader's model, and a model converted in place (model.half(),
    its .grad then fp16) cannot come back into float32 parameters. The snapshot reports it."""
    _set_grads(model, grads)  # as the grader holds them, so that what comes back changes nothing
    callers = copy.deepcopy(model)
    _set_grads(callers, grads)  # deepcopy leaves .grad behind
    got = fn(callers, loss_fn, x, y, scale)
    return got, _snapshot(callers)


def _call_on_model(exercise, fn, model, loss_fn, x, y, scale):
    """The learner's result and the caller's model as the call left it (see `run_on_callers_model`)."""
    grads = [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]
    answer = checks.call_student(exercise, lambda m, f, a, b, s: run_on_callers_model(fn, m, grads, f, a, b, s),
                                 model, loss_fn, x, y, scale, names=["model", "loss_fn", "x", "y", "scale"])
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        checks.fail(exercise, f"no readable answer came back from your notebook: {checks.describe(answer)}")
    return answer


def _check_untouched(exercise, after, snapshot, inputs):
    """`after`: the model's snapshot as the learner's call left it; `snapshot`: taken before, here."""
    if not isinstance(after, (list, tuple)) or not all(isinstance(e, (list, tuple)) and len(e) == 5 for e in after):
        checks.fail(exercise, "the state of the caller's model did not come back from your notebook: "
                               f"{checks.describe(after)}", inputs)
    now = {entry[0]: entry[1:] for entry in after}
    for name, value, dtype, requires_grad, grad in snapshot:
        if name not in now:
            checks.fail(exercise, f"the caller's model lost its parameter {name!r}: work on a copy", inputs)
        p, p_dtype, p_requires_grad, p_grad = now[name]
        if p_dtype != dtype:
            checks.fail(exercise, f"changed the caller's model: parameter {name!r} is now {p_dtype}, was {dtype} "
                                   "(model.half() converts in place: convert a copy, e.g. copy.deepcopy(model).half())",
                         inputs)
        if p_requires_grad != requires_grad:
            checks.fail(exercise, f"changed requires_grad of the caller's parameter {name!r}", inputs)
        if not (isinstance(p, torch.Tensor) and p.shape == value.shape and torch.equal(p.to(value.dtype), value)):
            change = ((p.double() - value.double()).abs().max().item()
                      if isinstance(p, torch.Tensor) and p.shape == value.shape else math.inf)
            checks.fail(exercise, f"changed the values of the caller's parameter {name!r} (max change "
                                   f"{change:.3g}): work on a copy", inputs)
        if (p_grad is None) != (grad is None) or (grad is not None and not (
                isinstance(p_grad, torch.Tensor) and p_grad.shape == grad.shape and torch.equal(p_grad, grad))):
            checks.fail(exercise, f"changed .grad of the caller's parameter {name!r}: compute the gradients on the "
                                   "copy, and leave the caller's .grad as it was", inputs)


def _check_structure(exercise, got, params, inputs):
    if not isinstance(got, (list, tuple)):
        checks.fail(exercise, f"should return a list of tensors (one per parameter, in model.parameters() order), "
                               f"got {checks.describe(got)}", inputs)
    if len(got) != len(params):
        checks.fail(exercise, f"returned {len(got)} gradients, the model has {len(params)} parameters", inputs)
    for i, ((name, p), g) in enumerate(zip(params, got)):
        if not isinstance(g, torch.Tensor):
            checks.fail(exercise, f"gradient {i} ({name}) should be a tensor, got {checks.describe(g)}", inputs)
        if g.shape != p.shape:
            checks.fail(exercise, f"gradient {i} ({name}) has shape {tuple(g.shape)}, the parameter has "
                                   f"{tuple(p.shape)} (is the order model.parameters()'s?)", inputs)
        if g.dtype != torch.float32:
            checks.fail(exercise, f"gradient {i} ({name}) has dtype {g.dtype}: return float32 gradients "
                                   "(convert with .float() before dividing by the scale)", inputs)
        if g.device != p.device:
            checks.fail(exercise, f"gradient {i} ({name}) is on {g.device}, the model on {p.device}", inputs)


def _hint(got, ref, scale):
    """Why scaled gradients may be off: a ratio to the reference that gives the bug away."""
    num = sum((g.double() * r.double()).sum().item() for g, r in zip(got, ref))
    den = sum((r.double() ** 2).sum().item() for r in ref)
    ratio = num / den if den > 0 else float("nan")
    if scale != 1 and math.isfinite(ratio) and abs(ratio / scale - 1) < 0.05:
        return f"your gradients are about {scale:g} times too large: were they divided by the scale after backward?"
    if scale != 1 and math.isfinite(ratio) and abs(ratio * scale - 1) < 0.05:
        return f"your gradients are about {scale:g} times too small: were they divided by the scale twice?"
    zeros = sum(int((g == 0).sum()) for g in got)
    ref_zeros = sum(int((r == 0).sum()) for r in ref)
    total = sum(g.numel() for g in got)
    return (f"{zeros} of your {total} gradient entries are exactly 0 ({ref_zeros} in the reference): that is "
            "fp16 underflow; multiply the loss by the scale BEFORE backward (scaling afterwards is too late), and "
            "divide by it in float32, after .float() (dividing in fp16 underflows again)")


def _plain_fp16_error(plain_fp16, model, loss_fn, x, y, reference):
    """How far plain fp16 gradients (plain_fp16 at scale 1: the answer key) are from the float64 ones."""
    return max(relative_errors(plain_fp16(model, loss_fn, x, y, 1.0), reference))


def check_scaled_fp16_grads(exercise, fn, model, loss_fn, x, y, scales, *, tolerance=0.01, gap=0.5, what="a model",
                            plain_fp16=None, show=False):
    """fn(model, loss_fn, x, y, scale) must be within `tolerance` (relative L2 error, per parameter) of the
    float64 gradients for every scale; the caller's model must come back untouched. With `plain_fp16` (the
    answer key), the inputs must first make plain fp16 gradients at least `gap` off. `show=True` prints
    the errors seen."""
    params = list(model.named_parameters())
    reference = float64_grads(model, loss_fn, x, y)
    seen = {}
    if plain_fp16 is not None:
        plain = _plain_fp16_error(plain_fp16, model, loss_fn, x, y, reference)
        if plain < gap:  # the test itself would prove nothing: a problem of the grader, not of the answer
            raise RuntimeError(f"grading inputs too easy: plain fp16 gradients are only {plain:.3g} off on {what}")
        seen["plain fp16 (scale 1, computed by the grader)"] = plain
    snapshot = _snapshot(model)
    for scale in scales:
        inputs = {"model": f"{what}: {model}".replace("\n", " "), "loss_fn": loss_fn, "x": x, "y": y, "scale": scale}
        got, after = _call_on_model(exercise, fn, model, loss_fn, x, y, scale)
        _check_untouched(exercise, after, snapshot, inputs)
        _check_structure(exercise, got, params, inputs)
        errors = relative_errors(got, reference)
        worst = max(range(len(errors)), key=lambda i: errors[i])
        if not all(torch.isfinite(g).all() for g in got) or errors[worst] > tolerance:
            plain_text = "" if plain_fp16 is None else f"; plain fp16 without scaling: {seen[next(iter(seen))]:.3g}"
            details = (f"  relative error of the gradient of {params[worst][0]!r} against float64: {errors[worst]:.3g} "
                       f"(allowed {tolerance:g}{plain_text})\n  " + _hint(got, reference, scale))
            checks.fail(exercise, "the scaled fp16 gradients are not close to the float64 reference", inputs, details)
        seen[f"yours, scale {scale:g}"] = errors[worst]
    if show:
        print(f"largest relative error against float64 on {what}: "
              + "; ".join(f"{label}: {error:.3g}" for label, error in seen.items()))


def check_shows_fp16(exercise, fn, model, loss_fn, x, y, *, plain_fp16, gap=0.5, what="a model"):
    """With scale=1 the result must carry fp16's underflow: it is the gradient of an fp16 copy. The inputs
    must make plain_fp16 (the answer key) at scale 1 at least `gap` off the float64 gradients."""
    reference = float64_grads(model, loss_fn, x, y)
    plain = _plain_fp16_error(plain_fp16, model, loss_fn, x, y, reference)
    if plain < gap:  # the test itself would prove nothing: a problem of the grader, not of the answer
        raise RuntimeError(f"grading inputs too easy: plain fp16 gradients are only {plain:.3g} off on {what}")
    inputs = {"model": f"{what}: {model}".replace("\n", " "), "loss_fn": loss_fn, "x": x, "y": y, "scale": 1.0}
    snapshot = _snapshot(model)
    got, after = _call_on_model(exercise, fn, model, loss_fn, x, y, 1.0)
    _check_untouched(exercise, after, snapshot, inputs)
    _check_structure(exercise, got, list(model.named_parameters()), inputs)
    error = max(relative_errors(got, reference))
    if error < gap:
        checks.fail(exercise, f"with scale=1 your gradients are as accurate as float32 ones (relative error "
                              f"{error:.3g}), but an fp16 copy of this model loses them to underflow (error "
                              f"{plain:.3g}): run the copy in float16 (copy.deepcopy(model).half(), inputs .half())",
                    inputs)
