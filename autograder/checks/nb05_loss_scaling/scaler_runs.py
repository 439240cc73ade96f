"""DynamicLossScaler driven side by side with torch.amp.GradScaler on scripted gradient streams.

A pattern string gives one character per step ('.' finite, '+'/'-' an infinite entry, 'N' a NaN,
'B' an entry that overflows float32 once the scale reaches `overflow_from`, 'S' two huge finite
entries whose sum overflows). Both scalers run the same training loop (the loss of step t is
sum(p * c_t), so the gradients are scale * c_t) on parameters of their own; the scale used, the
step taken or skipped, the scale after `update()`, the parameters (and, with `unscale_first`, the
gradients after `unscale_`) are compared after every step, and the first step that differs is
reported with the history up to it.

The reference is `torch.amp.GradScaler` itself, run in the grader (`gradscaler_records`): it is
the PyTorch feature the exercise rebuilds and refuses. The learner's run (`run_scaler`, a driver)
is watched so that it cannot call GradScaler (however it was imported, subclassed or wrapped) nor
the private `torch._amp_*` kernels GradScaler is built on. Everything runs on `get_device()`.
"""
import contextlib
import dataclasses
import inspect
import math

import torch

from autograder import checks
from autograder.checks import GradingError, student_calls
from autograder.checks.nb05_loss_scaling.rules import BY_HAND
from autograder.checks.rules import guards_of
from autograder.learner.device import get_device

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
    """What `run_scaler` sends back: whether the name holds a class (and what it holds), and
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


def gradscaler_records(stream, settings, *, unscale_first=False, clip=None, device=None):
    """The reference run, in the grader: torch.amp.GradScaler on `stream`, one StepRecord per step."""
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

    def watch(frame, event, arg):
        if event == "c_call" and id(arg) in kernels and not used:
            used.append(kernels[id(arg)])

    try:
        with student_calls.profiled(watch):
            yield
    finally:
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
    except (GradingError, NotImplementedError):  # the check's own verdicts (a time limit is no Exception)
        raise
    except Exception as err:  # the learner's method failed: say which call, at which step
        checks.fail(exercise, f"{where} raised {type(err).__name__}: {err}")


def run_scaler(exercise, scaler_class, stream, settings, unscale_first, clip):
    """Driver: run where the learner's code runs (in trusted grading, the kernel), it reports whether
    the name is a class, and if so its run on `stream`, one StepRecord per step (the scale used, the step taken
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


def _same_scale(a, b, rtol=SCALE_RTOL):
    """a is a Python float equal to GradScaler's scale b up to float32 rounding (GradScaler keeps it in float32)."""
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
        return (f"get_scale() returned {checks.describe(got.scale_used)}; it should return a Python float, "
                "as GradScaler's does")
    if not _same_scale(got.scale_used, ref.scale_used):
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
        return (f"get_scale() returned {checks.describe(got.scale_after)}; it should return a Python float, "
                "as GradScaler's does")
    if not _same_scale(got.scale_after, ref.scale_after):
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


def run_declared_defaults(scaler_class):
    """Driver: run where the learner's code runs, it reads {argument: default} for the defaults that
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
    declared = checks.call_student(exercise, run_declared_defaults, scaler_class, names=[exercise])
    if not isinstance(declared, dict):  # no signature to read: the behaviour checks decide
        return
    for name in DEFAULTS_CHECKED:
        if name in declared and not _same_default(declared[name], theirs[name].default):
            checks.fail(exercise, f"the default of {name} is {declared[name]!r}; GradScaler's (and the "
                                   f"exercise's) is {theirs[name].default!r}")


def side_by_side(exercise, scaler_class, stream, *, unscale_first=False, clip=None, **settings):
    """Drive the learner's class (in `run_scaler`, where the learner's code runs) and
    torch.amp.GradScaler (here) on the same stream, compare after every step, and return both
    histories (GradScaler's, the learner's): lists of StepRecord."""
    reference = gradscaler_records(stream, settings, unscale_first=unscale_first, clip=clip)
    run = checks.call_student(exercise, lambda: run_scaler(exercise, scaler_class, stream, settings,
                                                           unscale_first, clip),
                              time_limit=30.0,
                              **guards_of(BY_HAND, exercise))
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
