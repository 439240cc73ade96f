"""Grading helpers for notebook 05: underflow, scaled fp16 gradients and a dynamic loss scaler.

`underflow_fraction` is checked against the cast itself (`underflow_reference`), and a wrong
answer is told how the entries split: zeros left out, entries that flush to 0, entries that
survive as subnormals.

`scaled_fp16_grads` is checked on inputs where it matters: every check first shows, on the same
model and batch, that plain fp16 gradients are far from the float64 reference (they underflow),
then asks the learner's scaled ones to be close to it, and the caller's model to be untouched.
The learner's function runs in the driver `run_on_callers_model`, which returns its result and
the model as the call left it (values, dtypes, requires_grad, .grad); the grader compares both.

`DynamicLossScaler` is driven side by side with `torch.amp.GradScaler` on scripted gradient
streams: a pattern string gives one character per step ('.' finite, '+'/'-' an infinite entry,
'N' a NaN, 'B' an entry that overflows float32 once the scale reaches `overflow_from`, 'S' two
huge finite entries whose sum overflows). Both scalers run the same training loop (the loss of
step t is sum(p * c_t), so the gradients are scale * c_t) on parameters of their own; the scale
used, the step taken or skipped, the scale after `update()`, the parameters (and, with
`unscale_first`, the gradients after `unscale_`) are compared after every step, and the first
step that differs is reported with the history up to it. The learner's run is watched so that
it cannot call GradScaler (however it was imported, subclassed or wrapped) nor the private
`torch._amp_*` kernels GradScaler is built on. Everything runs on `get_device()`.

Trusted grading (`autograder.grader.trusted`): the learner's code runs only inside the drivers
(`run_on_callers_model`, `drive_learner`, `declared_defaults`), wherever the learner's code runs;
they return plain data (tensors, numbers, `StepRecord`s in a `LearnerRun`). The references
(float64 and plain fp16 gradients, GradScaler's run, GradScaler's defaults) and every comparison
stay in the grader's process.
"""
import contextlib
import copy
import dataclasses
import inspect
import math
import sys

import torch
import torch.nn.functional as F
from torch import nn

from autograder import checks
from autograder.checks import GradingError, student_calls
from autograder.learner.device import get_device

# --- underflow_fraction ---------------------------------------------------------------------------


def smallest_subnormal(dtype) -> float:
    """The smallest positive number of a floating-point dtype: smallest normal times eps."""
    info = torch.finfo(dtype)
    return info.tiny * info.eps


def underflow_reference(t, dtype=torch.float16) -> float:
    """Share of the non-zero entries of t that are exactly 0 after t.to(dtype); 0.0 if none."""
    nonzero = t != 0
    count = int(nonzero.sum())
    if count == 0:
        return 0.0
    flushed = int(((t.to(dtype) == 0) & nonzero).sum())
    return flushed / count


def _explain_underflow(t, dtype) -> str:
    nonzero = t != 0
    cast = t.to(dtype)
    flushed = int(((cast == 0) & nonzero).sum())
    subnormal = int(((cast != 0) & (cast.abs() < torch.finfo(dtype).tiny)).sum())
    text = (f"  the input holds {t.numel()} entries: {t.numel() - int(nonzero.sum())} zero (left out), "
            f"{int(nonzero.sum())} non-zero; cast to {dtype}, {flushed} of the non-zero ones become exactly 0 "
            f"and {subnormal} become subnormal (not 0, so they do not count)\n"
            f"  {dtype}: smallest subnormal {smallest_subnormal(dtype):.4g}, a value of magnitude up to half "
            f"of it ({smallest_subnormal(dtype) / 2:.4g}) rounds to 0")
    if 0 < t.numel() <= 24:
        pairs = zip(t.flatten().tolist(), cast.flatten().tolist())
        text += "\n  value -> cast: " + ", ".join(f"{v:.6g} -> {c:.6g}" for v, c in pairs)
    return text


def check_underflow_fraction(exercise, fn, t, dtype=None, *, what=""):
    """Call fn(t) (or fn(t, dtype)) and compare with the cast; tolerance 1e-6 on the share."""
    args = (t,) if dtype is None else (t, dtype)
    names = ["t"] if dtype is None else ["t", "dtype"]
    dtype = torch.float16 if dtype is None else dtype
    got = checks.call_student(exercise, fn, *args, names=names)
    inputs = {"t": t, "dtype": dtype} if not what else {"t": f"{what}: {checks.describe(t)}", "dtype": dtype}
    if isinstance(got, bool) or not isinstance(got, float):
        checks.fail(exercise, f"should return a Python float, got {type(got).__name__}: {checks.describe(got)}"
                               " (a 0-d tensor becomes one with .item())", inputs)
    expected = underflow_reference(t, dtype)
    if not abs(got - expected) <= 1e-6:
        checks.fail(exercise, f"expected {expected:.6g}, got {got!r}", inputs, _explain_underflow(t, dtype))


def log_uniform(*shape, seed, low, high, zeros=0.0, dtype=torch.float32, device=None):
    """Random signs and magnitudes spread evenly over the decades [low, high]; a share `zeros` of exact 0."""
    generator = torch.Generator().manual_seed(seed)
    exponent = math.log10(low) + (math.log10(high) - math.log10(low)) * torch.rand(shape, generator=generator,
                                                                                 dtype=torch.float64)
    sign = torch.where(torch.rand(shape, generator=generator) < 0.5, -1.0, 1.0).double()
    values = sign * 10.0 ** exponent
    values[torch.rand(shape, generator=generator) < zeros] = 0.0
    return values.to(dtype).to(device or get_device())


def edge_values(dtype=torch.float16, input_dtype=torch.float32, device=None):
    """Values around the edges of `dtype`, as a tensor of `input_dtype`: both sides of half the
    smallest subnormal, the smallest subnormal and normal, overflow, negatives and zeros."""
    s = smallest_subnormal(dtype)
    info = torch.finfo(dtype)
    values = [s, s / 2, s / 2 * (1 + 2 ** -10), s / 2 * (1 - 2 ** -10), s / 4, s * 1.5, -s / 2, -s, -s * 0.75,
              info.tiny, -info.tiny, info.tiny * 0.5, 0.0, -0.0, 0.0, 1.0, -2.5, info.max * 4]
    return torch.tensor([v for v in values if v == 0 or abs(v) <= torch.finfo(input_dtype).max],
                        dtype=input_dtype, device=device or get_device())


# --- scaled_fp16_grads ----------------------------------------------------------------------------


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


def mlp(sizes, *, seed, activation=nn.Tanh, bias=True, device=None):
    """A seeded float32 MLP (Linear layers with `activation` in between); the global RNG is left alone."""
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


def reference_grads(model, loss_fn, x, y):
    """d loss / d parameters in float64, on a copy: the ground truth."""
    twin = copy.deepcopy(model).double()
    params = list(twin.parameters())
    loss = loss_fn(twin(x.double()), _floating_as(y, torch.float64))
    return [g.detach() for g in torch.autograd.grad(loss, params)]


def fp16_grads(model, loss_fn, x, y, scale=1.0):
    """What an fp16 copy gives (loss in float32, scaled by `scale`, gradients unscaled in float32)."""
    twin = copy.deepcopy(model).half()
    params = list(twin.parameters())
    loss = loss_fn(twin(x.half()).float(), y)
    grads = torch.autograd.grad(loss * scale, params)
    return [g.float() / scale for g in grads]


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
    """A driver, run where the learner's code runs (in trusted grading, the kernel): call
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


def check_scaled_fp16_grads(exercise, fn, model, loss_fn, x, y, scales, *, tolerance=0.01, gap=0.5, what="a model",
                            show=False):
    """fn(model, loss_fn, x, y, scale) must be within `tolerance` (relative L2 error, per parameter) of the
    float64 gradients for every scale, on inputs where plain fp16 gradients are at least `gap` off; the
    caller's model must come back untouched. `show=True` prints the errors seen."""
    params = list(model.named_parameters())
    reference = reference_grads(model, loss_fn, x, y)
    plain = max(relative_errors(fp16_grads(model, loss_fn, x, y), reference))
    if plain < gap:  # the test itself would prove nothing: a problem of the grader, not of the answer
        raise RuntimeError(f"grading inputs too easy: plain fp16 gradients are only {plain:.3g} off on {what}")
    snapshot = _snapshot(model)
    seen = {"plain fp16 (scale 1, computed by the grader)": plain}
    for scale in scales:
        inputs = {"model": f"{what}: {model}".replace("\n", " "), "loss_fn": loss_fn, "x": x, "y": y, "scale": scale}
        got, after = _call_on_model(exercise, fn, model, loss_fn, x, y, scale)
        _check_untouched(exercise, after, snapshot, inputs)
        _check_structure(exercise, got, params, inputs)
        errors = relative_errors(got, reference)
        worst = max(range(len(errors)), key=lambda i: errors[i])
        if not all(torch.isfinite(g).all() for g in got) or errors[worst] > tolerance:
            details = (f"  relative error of the gradient of {params[worst][0]!r} against float64: {errors[worst]:.3g} "
                       f"(allowed {tolerance:g}; plain fp16 without scaling: {plain:.3g})\n  " + _hint(got, reference, scale))
            checks.fail(exercise, "the scaled fp16 gradients are not close to the float64 reference", inputs, details)
        seen[f"yours, scale {scale:g}"] = errors[worst]
    if show:
        print(f"largest relative error against float64 on {what}: "
              + "; ".join(f"{label}: {error:.3g}" for label, error in seen.items()))


def check_shows_fp16(exercise, fn, model, loss_fn, x, y, *, gap=0.5, what="a model"):
    """With scale=1 the result must carry fp16's underflow: it is the gradient of an fp16 copy."""
    reference = reference_grads(model, loss_fn, x, y)
    inputs = {"model": f"{what}: {model}".replace("\n", " "), "loss_fn": loss_fn, "x": x, "y": y, "scale": 1.0}
    snapshot = _snapshot(model)
    got, after = _call_on_model(exercise, fn, model, loss_fn, x, y, 1.0)
    _check_untouched(exercise, after, snapshot, inputs)
    _check_structure(exercise, got, list(model.named_parameters()), inputs)
    error = max(relative_errors(got, reference))
    if error < gap:
        checks.fail(exercise, f"with scale=1 your gradients are as accurate as float32 ones (relative error {error:.3g}), "
                               f"but an fp16 copy of this model loses them to underflow (error "
                               f"{max(relative_errors(fp16_grads(model, loss_fn, x, y), reference)):.3g}): run the copy in "
                               "float16 (copy.deepcopy(model).half(), inputs .half())", inputs)


# --- DynamicLossScaler against torch.amp.GradScaler ----------------------------------------------

SHAPES = ([(3, 4), (4,)], [(2, 3), (5,)])  # two parameter groups
UNUSED_SHAPE = (2,)                         # one more parameter in group 1 that never gets a gradient
LR = 0.125
MEANINGS = {".": "finite", "+": "+inf entry", "-": "-inf entry", "N": "NaN entry",
            "B": "finite, inf once scaled", "S": "huge finite pair"}
SCALE_RTOL = 1e-5  # GradScaler keeps its scale in float32; a Python float drifts by rounding only


@dataclasses.dataclass(frozen=True)
class GradientStream:
    """A scripted sequence of gradients, one character of `pattern` per training step."""
    name: str
    pattern: str
    seed: int
    overflow_from: float = 2.0 ** 16   # 'B' steps overflow float32 when the scale is >= this (a power of 2)

    def __post_init__(self):
        unknown = set(self.pattern) - set(MEANINGS)
        if unknown:
            raise ValueError(f"unknown steps {sorted(unknown)} in pattern; use {''.join(MEANINGS)}")
        if math.frexp(self.overflow_from)[0] != 0.5:
            raise ValueError("overflow_from must be a power of 2")

    def __repr__(self):
        shown = self.pattern if len(self.pattern) <= 60 else self.pattern[:57] + "..."
        return f"stream {self.name!r} ({len(self.pattern)} steps: {shown})"

    def coefficients(self, step, device):
        """c_t for every used parameter: the gradient of the step's loss is scale * c_t."""
        generator = torch.Generator().manual_seed(self.seed * 100_003 + step)
        shapes = [s for group in SHAPES for s in group]
        coeffs = [torch.randn(s, generator=generator) * 0.5 for s in shapes]
        kind = self.pattern[step]
        if kind != ".":
            j = int(torch.randint(len(shapes), (1,), generator=generator))
            flat = coeffs[j].view(-1)
            k = int(torch.randint(flat.numel(), (1,), generator=generator))
            if kind == "S":
                flat[k], flat[(k + 1) % flat.numel()] = 2.5e38, 2.5e38
            else:
                flat[k] = {"+": math.inf, "-": -math.inf, "N": math.nan, "B": 2.0 ** 128 / self.overflow_from}[kind]
        return [c.to(device) for c in coeffs]


@dataclasses.dataclass
class StepRecord:
    scale_used: object
    stepped: int
    scale_after: object
    params: list
    returned: object = None
    scaled_loss: float = math.nan
    loss: float = math.nan
    grads: list = None
    grads_finite: bool = True
    problem: str = ""


@dataclasses.dataclass
class LearnerRun:
    """What `drive_learner` sends back: whether the name holds a class (and what it holds), and
    the learner's run, one StepRecord per step."""
    is_class: bool
    holds: str
    records: list = None


def _make_params(device, seed=0):
    generator = torch.Generator().manual_seed(seed)
    groups = [[torch.randn(s, generator=generator).to(device).requires_grad_() for s in shapes] for shapes in SHAPES]
    unused = torch.randn(UNUSED_SHAPE, generator=generator).to(device).requires_grad_()
    used = [p for group in groups for p in group]
    optimizer = torch.optim.SGD([{"params": groups[0]}, {"params": groups[1] + [unused]}], lr=LR)
    calls = [0]

    def count(opt, args, kwargs):
        calls[0] += 1
    optimizer.register_step_post_hook(count)
    return used + [unused], used, optimizer, calls


def _step_loss(used, coeffs):
    return sum((p * c).sum() for p, c in zip(used, coeffs))


def gradscaler_class():
    scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
    if scaler is None:
        raise RuntimeError("these checks compare with torch.amp.GradScaler, which needs torch >= 2.3")
    return scaler


def run_gradscaler(stream, settings, *, unscale_first=False, clip=None, device=None):
    """The reference run: torch.amp.GradScaler on `stream`, one StepRecord per step."""
    device = device or get_device()
    scaler = gradscaler_class()(device.type, **settings)
    params, used, optimizer, calls = _make_params(device)
    records = []
    for step in range(len(stream.pattern)):
        scale_used = scaler.get_scale()
        optimizer.zero_grad(set_to_none=True)
        loss = _step_loss(used, stream.coefficients(step, device))
        scaler.scale(loss).backward()
        finite = all(bool(torch.isfinite(p.grad).all()) for p in used)
        grads = None
        if unscale_first:
            scaler.unscale_(optimizer)
            grads = [p.grad.detach().clone() for p in used]
            if clip:
                torch.nn.utils.clip_grad_norm_(used, clip)
        before = calls[0]
        scaler.step(optimizer)
        stepped = calls[0] - before
        scaler.update()
        records.append(StepRecord(scale_used, stepped, scaler.get_scale(), [p.detach().clone() for p in params],
                                  grads=grads, grads_finite=finite))
    return records


# the kernels GradScaler is made of: calling them is calling GradScaler's own update and check
_PRIVATE_KERNELS = ("_amp_update_scale_", "_amp_foreach_non_finite_check_and_unscale_")


@contextlib.contextmanager
def _no_private_kernels(exercise):
    """Fail if the block calls torch._amp_update_scale_ or its unscale kernel, however it was bound."""
    kernels = {id(getattr(torch, name)): name for name in _PRIVATE_KERNELS if hasattr(torch, name)}
    used = []
    previous = sys.getprofile()

    def watch(frame, event, arg):
        if event == "c_call" and id(arg) in kernels and not used:
            used.append(kernels[id(arg)])
        if previous is not None:
            previous(frame, event, arg)

    sys.setprofile(watch)
    try:
        yield
    finally:
        sys.setprofile(previous)
        if used:
            checks.fail(exercise, f"called torch.{used[0]}, the kernel inside torch.amp.GradScaler: this exercise "
                                   "asks you to write the check and the update yourself")


def _builtin(value):
    """A subclass of float or int (numpy's float64, ...) as the plain Python number it equals, so
    that it crosses to the grader as data."""
    if isinstance(value, float) and type(value) is not float:
        return float(value)
    if isinstance(value, int) and not isinstance(value, bool) and type(value) is not int:
        return int(value)
    return value


def _learner_call(exercise, where, fn, *args):
    try:
        return fn(*args)
    except (GradingError, NotImplementedError, student_calls._TimeLimit):
        raise
    except Exception as err:  # the learner's method failed: say which call, at which step
        checks.fail(exercise, f"{where} raised {type(err).__name__}: {err}")


def drive_learner(exercise, scaler_class, stream, settings, unscale_first, clip):
    """A driver, run where the learner's code runs (in trusted grading, the kernel): is the name a
    class, and if so its run on `stream`, one StepRecord per step (the scale used, the step taken
    or skipped, the scale after update(), the parameters, the gradients after unscale_()), all
    plain data for the grader to compare with GradScaler's run. A method that raises, or a
    scale() that returns no tensor to call backward() on, ends the run with a failure."""
    if not isinstance(scaler_class, type):
        return LearnerRun(is_class=False, holds=checks.describe(scaler_class))
    device = get_device()
    with _no_private_kernels(exercise):
        scaler = _learner_call(exercise, f"{exercise}({', '.join(f'{k}={v!r}' for k, v in settings.items())})",
                               lambda: scaler_class(**settings))
        params, used, optimizer, calls = _make_params(device)
        records = []
        for step in range(len(stream.pattern)):
            at = f"at step {step}, "
            scale_used = _learner_call(exercise, at + "get_scale()", scaler.get_scale)
            optimizer.zero_grad(set_to_none=True)
            loss = _step_loss(used, stream.coefficients(step, device))
            loss_value = float(loss.detach())  # read before scale(), which might work in place
            scaled = _learner_call(exercise, at + "scale(loss)", scaler.scale, loss)
            if not isinstance(scaled, torch.Tensor) or not scaled.requires_grad:
                checks.fail(exercise, f"{at}scale(loss) returned {checks.describe(scaled)}: it should return "
                                       "loss * scale, a tensor that backward() can be called on")
            _learner_call(exercise, at + "scale(loss).backward()", scaled.backward)
            grads = None
            if unscale_first:
                _learner_call(exercise, at + "unscale_(optimizer)", scaler.unscale_, optimizer)
                grads = [None if p.grad is None else p.grad.detach().clone() for p in used]
                if clip:
                    torch.nn.utils.clip_grad_norm_(used, clip)
            before = calls[0]
            returned = _learner_call(exercise, at + "step(optimizer)", scaler.step, optimizer)
            stepped = calls[0] - before
            _learner_call(exercise, at + "update()", scaler.update)
            scale_after = _learner_call(exercise, at + "get_scale() after update()", scaler.get_scale)
            records.append(StepRecord(_builtin(scale_used), stepped, _builtin(scale_after),
                                      [p.detach().clone() for p in params],
                                      returned=returned, scaled_loss=float(scaled.detach()),
                                      loss=loss_value, grads=grads))
    return LearnerRun(is_class=True, holds=checks.describe(scaler_class), records=records)


def _settings_text(settings):
    return ", ".join(f"{k}={v!r}" for k, v in settings.items()) or "GradScaler's defaults"


def _is_float(value):
    return isinstance(value, float) and not isinstance(value, bool)


def _close(a, b, rtol=SCALE_RTOL):
    return _is_float(a) and (a == b or abs(a - b) <= rtol * abs(b))


def _params_differ(got, expected):
    """The largest difference between two lists of parameters (inf if only non-finite ones differ), or 0."""
    worst = 0.0
    for g, e in zip(got, expected):
        bad = ~(torch.isclose(g, e, rtol=1e-5, atol=1e-6) | (torch.isnan(g) & torch.isnan(e)))
        if bad.any():
            diff = (g.double() - e.double()).abs()[bad]
            finite = diff[torch.isfinite(diff)]
            worst = max(worst, finite.max().item() if finite.numel() else math.inf)
    return worst


def _grad_problem(got, expected, scale):
    if any(g is None for g in got):
        return "after unscale_(), a gradient is None: unscale_ must divide the gradients in place"
    ratios = [(g.double() / e.double())[(e != 0) & torch.isfinite(e)] for g, e in zip(got, expected)]
    ratios = torch.cat([r.flatten() for r in ratios])
    if all(torch.allclose(g, e, rtol=1e-5, atol=1e-7) for g, e in zip(got, expected)):
        return ""
    typical = ratios.median().item() if ratios.numel() else math.nan
    text = f"after unscale_(), the gradients differ from GradScaler's (yours / GradScaler's is about {typical:.4g}"
    if math.isfinite(typical) and scale and abs(typical * scale - 1) < 1e-3:
        text += " = 1/scale: divided by the scale twice?)"
    elif math.isfinite(typical) and scale and abs(typical / scale - 1) < 1e-3:
        text += ": not divided by the scale at all?)"
    elif math.isfinite(typical) and scale and abs(typical / scale ** 2 - 1) < 1e-3:
        text += ": multiplied by the scale instead of divided?)"
    else:
        text += ")"
    return text


def _first_problem(step, ref, got, unscale_first):
    """What is wrong with the learner's record at this step, or ''."""
    if not _is_float(got.scale_used):
        return f"get_scale() returned {checks.describe(got.scale_used)}; it should return a Python float, as GradScaler's does"
    if not _close(got.scale_used, ref.scale_used):
        return f"the scale in use is {got.scale_used!r}, GradScaler's is {ref.scale_used!r}"
    if math.isfinite(got.loss) and math.isfinite(got.scaled_loss):
        wanted = got.loss * got.scale_used
        if not abs(got.scaled_loss - wanted) <= 1e-5 * abs(wanted) + 1e-30:
            return (f"scale(loss) returned {got.scaled_loss:.7g} for a loss of {got.loss:.7g}; expected loss * "
                    f"get_scale() = {wanted:.7g}")
    if unscale_first and ref.grads_finite:
        problem = _grad_problem(got.grads, ref.grads, got.scale_used)
        if problem:
            return problem
    if not isinstance(got.returned, bool):
        return (f"step() returned {checks.describe(got.returned)}; it should return True when it called "
                "optimizer.step() and False when it skipped it")
    if got.returned != bool(got.stepped):
        return ("step() returned True but did not call optimizer.step()" if got.returned
                else "step() returned False but called optimizer.step() anyway")
    if got.stepped > 1:
        return f"step() called optimizer.step() {got.stepped} times"
    if ref.stepped and not got.stepped:
        return "GradScaler took this step (every gradient finite), your scaler skipped it"
    if got.stepped and not ref.stepped:
        return ("GradScaler skipped this step (a gradient was inf or NaN), your scaler called optimizer.step(): "
                "the parameters took a non-finite update")
    worst = _params_differ(got.params, ref.params)
    if worst:
        return (f"after the step the parameters differ from GradScaler's run (max difference {worst:.3g}): "
                + ("the update used gradients that were not divided by the scale exactly once" if ref.stepped
                   else "they changed although the step was skipped"))
    if not _is_float(got.scale_after):
        return f"get_scale() returned {checks.describe(got.scale_after)}; it should return a Python float, as GradScaler's does"
    if not _close(got.scale_after, ref.scale_after):
        return f"after update() the scale is {got.scale_after!r}, GradScaler's is {ref.scale_after!r}"
    return ""


def _fmt_scale(value):
    if not _is_float(value):
        return type(value).__name__
    return f"{value:.6g}"


def _table(stream, ref, got, upto, rows=12):
    start = max(0, upto - rows + 1)
    lines = ["    step  grads | GradScaler: scale used, step, scale after | yours: scale used, step, scale after"]
    for t in range(start, upto + 1):
        r = ref[t]
        mine = "-" if t >= len(got) else (
            f"{_fmt_scale(got[t].scale_used):>10}, {'taken' if got[t].stepped else 'skipped':>7}, "
            f"{_fmt_scale(got[t].scale_after):>10}")
        lines.append(f"    {t:>4}  {stream.pattern[t]:^5} | {_fmt_scale(r.scale_used):>22}, "
                     f"{'taken' if r.stepped else 'skipped':>7}, {_fmt_scale(r.scale_after):>10} | {mine}")
    if start:
        lines.insert(1, f"    ({start} earlier steps agree)")
    return "\n".join(lines)


def compare_records(exercise, stream, settings, ref, got, *, unscale_first=False):
    """Raise a GradingError at the first step where the learner's run differs from GradScaler's."""
    mode = ("scaler.scale(loss).backward(); scaler.unscale_(optimizer); clip; scaler.step(optimizer); scaler.update()"
            if unscale_first else "scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()")
    for step, (r, g) in enumerate(zip(ref, got)):
        problem = _first_problem(step, r, g, unscale_first)
        if problem:
            legend = ", ".join(f"'{k}' {v}" for k, v in MEANINGS.items() if k in stream.pattern)
            if "B" in stream.pattern:
                legend = legend.replace("inf once scaled", f"inf once scaled by >= {stream.overflow_from:g}")
            checks.fail(
                exercise,
                f"differs from torch.amp.GradScaler at step {step} of {stream}",
                details=(f"  settings: {_settings_text(settings)}; each step: {mode}\n"
                         f"  at step {step} (gradients: {MEANINGS[stream.pattern[step]]}): {problem}\n"
                         f"  the steps up to there ({legend}):\n" + _table(stream, ref, got, step)))


DEFAULTS_CHECKED = ("init_scale", "growth_factor", "backoff_factor", "growth_interval")


def declared_defaults(scaler_class):
    """A driver, run where the learner's code runs: {argument: default} for the defaults that
    `scaler_class` declares among DEFAULTS_CHECKED, or None where it has no signature to read."""
    try:
        mine = inspect.signature(scaler_class).parameters
    except (TypeError, ValueError):
        return None
    return {name: _builtin(mine[name].default) for name in DEFAULTS_CHECKED
            if name in mine and mine[name].default is not inspect.Parameter.empty}


def _same_default(declared, expected):
    try:
        return bool(declared == expected)
    except Exception:  # e.g. a tensor of several elements: not GradScaler's number
        return False


def check_defaults(exercise, scaler_class):
    """The defaults the class declares (where it declares them) are GradScaler's."""
    theirs = inspect.signature(gradscaler_class().__init__).parameters
    declared = checks.call_student(exercise, declared_defaults, scaler_class, names=[exercise])
    if not isinstance(declared, dict):  # no signature to read: the behaviour checks decide
        return
    for name in DEFAULTS_CHECKED:
        if name in declared and not _same_default(declared[name], theirs[name].default):
            checks.fail(exercise, f"the default of {name} is {declared[name]!r}; GradScaler's (and the "
                                   f"exercise's) is {theirs[name].default!r}")


def side_by_side(exercise, scaler_class, stream, *, unscale_first=False, clip=None, **settings):
    """Drive the learner's class (in `drive_learner`, where the learner's code runs) and
    torch.amp.GradScaler (here) on the same stream, compare after every step, and return both
    histories (GradScaler's, the learner's): lists of StepRecord."""
    reference = run_gradscaler(stream, settings, unscale_first=unscale_first, clip=clip)
    run = checks.call_student(exercise, lambda: drive_learner(exercise, scaler_class, stream, settings,
                                                              unscale_first, clip),
                              forbid=(gradscaler_class(),), time_limit=30.0)
    if not isinstance(run, LearnerRun):
        checks.fail(exercise, f"no record of your scaler's run came back, got {checks.describe(run)}")
    if not run.is_class:
        checks.fail(exercise, f"expected a class, but the name holds {run.holds}")
    got = run.records
    if not isinstance(got, list) or len(got) != len(reference) or not all(isinstance(r, StepRecord) for r in got):
        checks.fail(exercise, f"the record of your scaler's run is incomplete: {checks.describe(got)}")
    compare_records(exercise, stream, settings, reference, got, unscale_first=unscale_first)
    return reference, got


def check_against_gradscaler(exercise, scaler_class, stream, *, unscale_first=False, clip=None, **settings):
    """`side_by_side` for grade cells: raises at the first difference, returns nothing."""
    side_by_side(exercise, scaler_class, stream, unscale_first=unscale_first, clip=clip, **settings)
