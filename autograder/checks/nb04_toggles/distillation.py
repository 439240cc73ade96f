"""distill_loss: its value, the gradient that reaches the student, and none that reaches the teacher.

The loss's value has only one reference, an answer: a check of the value takes it as an argument
(hidden tests: the course's answer key) or states it for a small case (visible tests). Its
gradient needs no answer: with p = softmax(logits / T), the gradient of T^2 * KL(p_teacher ||
p_student) (batch mean) with respect to the student's logits is T / B * (p_student - p_teacher),
which is what the gradient checks compare with, written out here (`_student_gradient`).

Logits of a few hundred (`scale="large"`, the battery's `large_logits`) are where a right-looking loss
breaks: a probability that underflows to 0 makes log(softmax(.)) -inf, a KL written out with
p * log(p) gives 0 * -inf = NaN, and exp(logits) overflows. Their references are computed in float64
from the same inputs, and a failure there names the stress.
"""
import dataclasses
import math

import torch

from autograder import checks
from autograder.checks import GradingError, battery
from autograder.checks.nb04_toggles.cases import GRAD_ON, expect_close_reordered, run_case, unreadable
from autograder.checks.nb04_toggles.models import tanh_mlp
from autograder.learner import inputs
from autograder.learner.device import get_device


def _student_gradient(student_logits, teacher_logits, T):
    """d loss / d student_logits in closed form, T / B * (softmax(s / T) - softmax(t / T)), computed in
    float64 and given back in the logits' dtype."""
    B = student_logits.shape[0]
    s, t = student_logits.detach().double(), teacher_logits.detach().double()
    return (T / B * (torch.softmax(s / T, -1) - torch.softmax(t / T, -1))).to(student_logits.dtype)


def _logits(B, C, seed, dtype, device, scale):
    """Seeded (student, teacher) logits of shape (B, C): entries of size ~`scale`, or with scale="large"
    the battery's large logits (up to a few hundred, one clear winner per row)."""
    if scale == "large":
        return tuple(battery.large_logits(B, C, seed=seed + k, dtype=dtype, device=device) for k in (0, 1))
    return tuple(inputs.randn(B, C, seed=seed + k, dtype=dtype, device=device, scale=scale) for k in (0, 1))


def _stressed(exercise, B, scale):
    """The battery's stress these logits are, named under any failure: large logits, a batch of one."""
    if scale == "large":
        return battery.trying(exercise, "large-logits", what="logits")
    return battery.stressed(exercise, "batch-of-one" if B == 1 else None)


def _describe_scale(scale):
    return "entries up to a few hundred (large logits)" if scale == "large" else f"entries of size ~{scale:g}"


def _distill_hint(got, expected, B, C, T):
    if not math.isfinite(got):
        return ("the loss is not finite: take log-probabilities with log_softmax of the scaled logits "
                "(log(softmax(.)) is -inf where a probability underflows to 0, p * log(p) is then 0 * -inf = NaN, "
                "and exp of a large logit overflows)")
    if expected == 0:
        return ""
    ratio = got / expected
    for factor, text in ((1 / T ** 2, "the T**2 factor is missing"), (1 / T, "multiplied by T instead of T**2"),
                         (1 / C, "reduction='mean' also divides by the number of classes: use 'batchmean'"),
                         (B, "summed over the batch: average over it ('batchmean')")):
        if factor != 1 and abs(ratio - factor) < 1e-6 * max(1, factor):
            return text
    return ""


def _compare_loss(exercise, got, expected, case, B, C, T):
    """got (the learner's loss) against the expected loss, a 0-d tensor, with the hint for the slip it shows."""
    hint = ""
    if isinstance(got, torch.Tensor) and got.shape == () and got.dtype == expected.dtype:
        hint = _distill_hint(got.item(), expected.item(), B, C, T)
    try:
        expect_close_reordered(exercise, [got], [expected], case=case, names=["the loss (a 0-d tensor)"])
    except GradingError as err:
        raise GradingError(str(err) + (f"\n  hint: {hint}" if hint else "")) from None


def check_distill_value(exercise, fn, reference, *, B, C, T, seed, dtype=torch.float64, scale=3.0, pass_T=True):
    """fn(student_logits, teacher_logits, T) on seeded logits equals reference(...) (the answer key),
    computed in float64 from the same logits. scale="large": logits of a few hundred."""
    s, t = _logits(B, C, seed, dtype, get_device(), scale)
    case = (f"student and teacher logits of shape ({B}, {C}), {dtype}, {_describe_scale(scale)}, "
            + (f"T={T:g}" if pass_T else "T left at its default"))
    # in float64 from the same logits, before the call (it may change s or t)
    expected = reference(s.double(), t.double(), T if pass_T else 2.0).to(dtype)
    with _stressed(exercise, B, scale):
        got = run_case(exercise, lambda: fn(s, t, T) if pass_T else fn(s, t), case)
        _compare_loss(exercise, got, expected, case, B, C, T if pass_T else 2.0)


def check_distill_example(exercise, fn, student_logits, teacher_logits, T, expected):
    """fn on small logits given as lists (float64) equals `expected`, the loss the test cell states."""
    device = get_device()
    s = torch.tensor(student_logits, dtype=torch.float64, device=device)
    t = torch.tensor(teacher_logits, dtype=torch.float64, device=device)
    case = f"student_logits={student_logits}, teacher_logits={teacher_logits}, T={T:g} (float64)"
    got = run_case(exercise, lambda: fn(s, t, T), case)
    _compare_loss(exercise, got, torch.tensor(expected, dtype=torch.float64, device=device), case,
                  s.shape[0], s.shape[1], T)


@dataclasses.dataclass
class Backward:
    """What a loss function returned and where backward() sent gradients, observed beside it.

    `loss`: what it returned (a tensor comes back as its value, without its graph); `has_graph`: whether
    that was a tensor with a grad_fn; `grads`: {name: .grad after loss.backward(), or None}, empty when
    backward() was not run (the loss was no 0-d tensor with a graph)."""
    loss: object
    has_graph: bool
    grads: dict


def backward_through(loss, tensors):
    """loss.backward() when loss is a 0-d tensor with a graph; then the .grad of each of `tensors`
    ({name: tensor}) as a `Backward`."""
    has_graph = isinstance(loss, torch.Tensor) and loss.grad_fn is not None
    if not (has_graph and loss.shape == ()):
        return Backward(loss, has_graph, {})
    loss.backward()
    return Backward(loss, True, {name: t.grad for name, t in tensors.items()})


@GRAD_ON
def run_distill_on_leaves(fn, B, C, T, seed, dtype, scale):
    """Driver: fn on leaf student and teacher logits that both require grad, then backward()."""
    s, t = (v.requires_grad_() for v in _logits(B, C, seed, dtype, get_device(), scale))
    return backward_through(fn(s, t, T), {"student_logits": s, "teacher_logits": t})


def _distill_networks(seed, dtype, device):
    teacher, student = tanh_mlp([4, 6, 5], seed, dtype, device), tanh_mlp([4, 3, 5], seed + 1, dtype, device)
    return teacher, student, inputs.randn(8, 4, seed=seed + 2, dtype=dtype, device=device)


@GRAD_ON
def run_distill_on_networks(fn, seed, T, dtype):
    """Driver: fn on the logits of a student and a teacher network, then backward()."""
    teacher, student, x = _distill_networks(seed, dtype, get_device())
    params = {**{f"teacher {n}": p for n, p in teacher.named_parameters()},
              **{f"student {n}": p for n, p in student.named_parameters()}}
    return backward_through(fn(student(x), teacher(x), T), params)


def _backward_of(exercise, result, case):
    """The checks on a `Backward` that come before its gradients: a 0-d tensor, with a graph."""
    if not isinstance(result, Backward):
        unreadable(exercise, result, case)
    loss = result.loss
    if not isinstance(loss, torch.Tensor) or loss.shape != ():
        checks.fail(exercise, f"should return a 0-d tensor, got {checks.describe(loss)}", details=f"  case: {case}")
    if not result.has_graph:
        checks.fail(exercise, "the loss has no graph: no gradient can reach the student",
                    details=f"  case: {case}\n  hint: detach only the teacher's side; the student's logits must "
                            "stay in the graph")


def check_distill_gradients(exercise, fn, *, B, C, T, seed, dtype=torch.float64, scale=3.0):
    """Leaf logits that both require grad: after backward the student's .grad is T / B * (p_student -
    p_teacher) and the teacher's .grad is None. scale="large": logits of a few hundred."""
    with _stressed(exercise, B, scale):
        _check_distill_gradients(exercise, fn, B=B, C=C, T=T, seed=seed, dtype=dtype, scale=scale)


def _check_distill_gradients(exercise, fn, *, B, C, T, seed, dtype, scale):
    device = get_device()
    s, t = _logits(B, C, seed, dtype, device, scale)
    case = (f"leaf student and teacher logits ({B}, {C}) that both require grad, {dtype}, {_describe_scale(scale)}, "
            f"T={T:g}")
    result = run_case(exercise, lambda: run_distill_on_leaves(fn, B, C, T, seed, dtype, scale), case)
    _backward_of(exercise, result, case)
    s_grad, t_grad = result.grads.get("student_logits"), result.grads.get("teacher_logits")
    if s_grad is None:
        wrong_side = ", and one reached the teacher's: the detach is on the wrong side" if t_grad is not None else ""
        checks.fail(exercise, "no gradient reached the student logits" + wrong_side, details=f"  case: {case}")
    if t_grad is not None:
        checks.fail(exercise, f"a gradient reached the teacher logits (largest entry {t_grad.abs().max().item():.3g})",
                    details=f"  case: {case}\n  the teacher must not learn: use teacher_logits.detach() "
                            "(or compute its probabilities under torch.no_grad())")
    expect_close_reordered(exercise, [s_grad], [_student_gradient(s, t, T)], case=case, names=["student_logits.grad"])


def check_distill_models(exercise, fn, *, seed, T=2.0, dtype=torch.float64):
    """Teacher logits straight out of a teacher network (a non-leaf with a graph): after backward no
    teacher parameter has a gradient, and the student network's gradients are those of the closed form."""
    device = get_device()
    case = f"logits of a student and a teacher network (both with parameters that require grad), {dtype}, T={T:g}"
    result = run_case(exercise, lambda: run_distill_on_networks(fn, seed, T, dtype), case)
    _backward_of(exercise, result, case)
    teacher, ref_student, x = _distill_networks(seed, dtype, device)
    reached = [n for n, _ in teacher.named_parameters() if result.grads.get(f"teacher {n}") is not None]
    if reached:
        checks.fail(exercise, f"backward() reached the teacher's parameters {reached}",
                    details=f"  case: {case}\n  detach the teacher's logits, so that no gradient flows into the "
                            "teacher")
    with torch.no_grad():
        teacher_logits = teacher(x)
    student_logits = ref_student(x)
    expected = torch.autograd.grad(student_logits, list(ref_student.parameters()),
                                   grad_outputs=_student_gradient(student_logits, teacher_logits, T))
    names = [n for n, _ in ref_student.named_parameters()]
    got = [result.grads.get(f"student {n}") for n in names]
    if any(g is None for g in got):
        checks.fail(exercise, "some student parameters received no gradient", details=f"  case: {case}")
    expect_close_reordered(exercise, got, expected, case=case, names=[f"student {n}.grad" for n in names])
