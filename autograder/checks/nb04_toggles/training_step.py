"""train_step: the loss it returns and the weights after each step, and that it keeps no graph alive.

The reference step is an answer, so the step check takes it as an argument (hidden tests: the
course's answer key, run on an identical copy of the model) or checks a small stated case (visible
tests: `check_train_step_example`). When a step goes wrong, the hint replays the classic slips on a
copy of the model (each slip is a wrong step, none is the right one) and names the one that matches.
The no-graph check needs no reference: a saved-tensor ledger and weak references watch the calls.
"""
import copy
import dataclasses
import gc
import math
import weakref

import torch
from torch import nn

from autograder import checks
from autograder.checks import GradingError, battery
from autograder.checks.nb04_toggles.cases import GRAD_ON, expect_close_reordered, run_case, unreadable
from autograder.checks.nb04_toggles.models import describe_model, tanh_mlp
from autograder.checks.student_calls import UsedAnswerKey, inside_student_call
from autograder.learner import inputs
from autograder.learner.device import get_device
from autograder.learner.memory import SavedTensorLedger


def training_setup(seed, dtype=torch.float64, device=None, optimizer="sgd", target_scale=10.0, batch_size=6):
    """A Linear-Tanh-Linear model, its optimizer, MSE loss and a stream of batches of `batch_size` whose
    large targets give gradient norms well above 1, so that clipping matters."""
    device = device or get_device()
    model = tanh_mlp([5, 8, 2], seed, dtype, device)
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)

    def batch(k):
        x = inputs.randn(batch_size, 5, seed=seed + 100 + k, dtype=dtype, device=device)
        y = inputs.randn(batch_size, 2, seed=seed + 200 + k, dtype=dtype, device=device, scale=target_scale)
        return x, y
    return model, opt, nn.MSELoss(), batch


def _snapshot(model, opt):
    """Deep copies of a model and its optimizer (still tied to each other), .grad buffers included."""
    model_copy, opt_copy = copy.deepcopy((model, opt))
    for p, q in zip(model.parameters(), model_copy.parameters()):
        q.grad = None if p.grad is None else p.grad.clone()
    return model_copy, opt_copy


# Wrong steps, each a slip learners make; `_wrong_step` replays one. None of them is the right step.
_STEP_SLIPS = {
    "no_zero_grad": "the gradients left in .grad before the call were added in: call optimizer.zero_grad() first, "
                    "before the forward pass",
    "no_clip": "the step used unclipped gradients: clip between backward() and optimizer.step()",
    "clip_to_one": "the gradients were clipped to a norm of 1.0, not to max_norm",
    "clip_values": "each gradient value was clipped (clip_grad_value_), not the norm of all of them together: use "
                   "torch.nn.utils.clip_grad_norm_",
    "no_update": "the weights did not move: no gradient reached them (was the forward pass run under "
                 "torch.no_grad()?)",
}


def _wrong_step(slip, model, opt, loss_fn, x, y, max_norm):
    """Replay one slip. A slip is one line away from the right step, so this refuses to run inside
    a student call, as answer keys do."""
    if inside_student_call():
        raise UsedAnswerKey("a grading helper of the course (autograder.checks.nb04_toggles.training_step)")
    if slip == "no_update":
        return
    if slip != "no_zero_grad":
        opt.zero_grad()
    loss_fn(model(x), y).backward()
    if slip == "no_zero_grad":
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    elif slip == "clip_to_one":
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    elif slip == "clip_values":
        nn.utils.clip_grad_value_(model.parameters(), max_norm)
    opt.step()


def _train_step_hint(snapshot, model, loss_fn, x, y, max_norm):
    got = [p.detach() for p in model.parameters()]
    for slip, text in _STEP_SLIPS.items() if snapshot is not None else ():
        if slip == "clip_to_one" and max_norm == 1.0:
            continue  # the same step as the right one
        try:
            m, o = _snapshot(*snapshot)
            _wrong_step(slip, m, o, loss_fn, x, y, max_norm)
            if all(torch.allclose(g, q.detach(), rtol=1e-7, atol=1e-9) for g, q in zip(got, m.parameters())):
                return "\n  hint: " + text
        except Exception:  # a slip that cannot even run here is not the one
            continue
    return ("\n  hint: the step is optimizer.zero_grad(), forward, backward, "
            "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm), then optimizer.step()")


@GRAD_ON
def run_with_grads(fn, grads, model, *args):
    """Driver: fn(model, *args) with `grads` in the .grad of model.parameters() first (a .grad does not
    travel with a model sent to the learner's kernel); what fn returned. The model, its optimizer and
    their state come back to the grader's copies by themselves."""
    for p, g in zip(model.parameters(), grads):
        p.grad = None if g is None else g.clone()
    return fn(model, *args)


def _check_float(exercise, got, case):
    if isinstance(got, torch.Tensor):
        checks.fail(exercise, f"returned a tensor ({checks.describe(got)}), not a Python float",
                    details=f"  case: {case}\n  a loss tensor drags its graph along into every list it is stored "
                            "in: return loss.item()")
    if not isinstance(got, float):
        checks.fail(exercise, f"should return a Python float, got {type(got).__name__}: {got!r}",
                    details=f"  case: {case}")


def _one_step(exercise, fn, model, opt, loss_fn, x, y, max_norm, case, expected_loss, expected_params, *, rel_tol):
    """One call of fn on (model, opt): the returned loss and then the weights against the expected ones."""
    try:
        snapshot = _snapshot(model, opt)  # for the hint, should this step go wrong
    except Exception:  # something the answer hung on the model (a loss with its graph) cannot be copied
        snapshot = None
    args = (model, opt, loss_fn, x, y) + ((max_norm,) if max_norm is not None else ())
    grads = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
    got = run_case(exercise, lambda *a: run_with_grads(fn, grads, *a), case, *args,
                   names=["model", "optimizer", "loss_fn", "x", "y", "max_norm"][:len(args)])
    _check_float(exercise, got, case)
    if not math.isclose(got, expected_loss, rel_tol=rel_tol, abs_tol=1e-12):
        checks.fail(exercise, f"returned {got!r}, expected the loss of this step's forward pass, {expected_loss!r}",
                    details=f"  case: {case}\n  hint: return loss.item() of the forward pass before the step")
    names = [n for n, _ in model.named_parameters()]
    try:
        expect_close_reordered(exercise, [p.detach() for p in model.parameters()], expected_params, case=case,
                               names=[f"{n} after the step" for n in names])
    except GradingError as err:
        norm = max_norm if max_norm is not None else 1.0
        raise GradingError(str(err) + _train_step_hint(snapshot, model, loss_fn, x, y, norm)) from None


def check_train_step(exercise, fn, reference, *, seed, optimizer="sgd", steps=3, max_norm=None, dtype=torch.float64,
                     stale_grads=True, batch_size=6):
    """Several calls of fn against reference(...) (the answer key's step) on an identical copy: the
    returned value is the loss (a Python float) before the step, and the weights match after every step.
    batch_size=1 (a batch of one) names that stress under any failure."""
    with battery.stressed(exercise, "batch-of-one" if batch_size == 1 else None):
        _check_train_step(exercise, fn, reference, seed=seed, optimizer=optimizer, steps=steps, max_norm=max_norm,
                          dtype=dtype, stale_grads=stale_grads, batch_size=batch_size)


def _check_train_step(exercise, fn, reference, *, seed, optimizer, steps, max_norm, dtype, stale_grads, batch_size):
    device = get_device()
    model, opt, loss_fn, batch = training_setup(seed, dtype, device, optimizer, batch_size=batch_size)
    ref_model, ref_opt, _, _ = training_setup(seed, dtype, device, optimizer, batch_size=batch_size)
    if stale_grads:  # as if something had called backward() earlier (a metric, a probe)
        for i, (p, q) in enumerate(zip(model.parameters(), ref_model.parameters())):
            p.grad = inputs.randn(*p.shape, seed=seed + 300 + i, dtype=dtype, device=device, scale=5.0)
            q.grad = p.grad.clone()
    for k in range(steps):
        x, y = batch(k)
        case = (f"step {k + 1} of {steps}: {describe_model(model)}, {type(opt).__name__}, MSE loss, {dtype}, "
                f"batches of {batch_size}, "
                + (f"max_norm={max_norm:g}" if max_norm is not None else "max_norm left at its default")
                + ("; before step 1 every .grad held a leftover gradient" if stale_grads else ""))
        expected_loss = reference(ref_model, ref_opt, loss_fn, x, y, max_norm if max_norm is not None else 1.0)
        _one_step(exercise, fn, model, opt, loss_fn, x, y, max_norm, case, expected_loss,
                  [p.detach() for p in ref_model.parameters()], rel_tol=1e-9 if dtype == torch.float64 else 1e-5)


def tiny_regression():
    """The stated case of `check_train_step_example`: nn.Linear(2, 1) in float64 with weight [[0.5, -1.0]]
    and bias [0.25], each .grad holding a leftover 10.0; SGD (lr=0.1) and MSE loss on
    x = [[1., 2.], [3., -1.]], y = [[2.], [-1.]]."""
    device = get_device()
    model = nn.Linear(2, 1).to(device=device, dtype=torch.float64)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.5, -1.0]]))
        model.bias.copy_(torch.tensor([0.25]))
    for p in model.parameters():
        p.grad = torch.full_like(p, 10.0)
    x = torch.tensor([[1.0, 2.0], [3.0, -1.0]], dtype=torch.float64, device=device)
    y = torch.tensor([[2.0], [-1.0]], dtype=torch.float64, device=device)
    return model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(), x, y


def check_train_step_example(exercise, fn, *, max_norm, loss, weight, bias):
    """One call of fn on `tiny_regression()` with max_norm: it returns `loss` and leaves the weight and
    bias that the test cell states."""
    model, opt, loss_fn, x, y = tiny_regression()
    case = ("nn.Linear(2, 1), weight [[0.5, -1.0]], bias [0.25], every .grad holding 10.0; SGD lr=0.1, MSE loss, "
            f"x = [[1., 2.], [3., -1.]], y = [[2.], [-1.]], max_norm={max_norm:g}")
    expected = [torch.tensor(v, dtype=torch.float64, device=x.device) for v in (weight, bias)]
    _one_step(exercise, fn, model, opt, loss_fn, x, y, max_norm, case, loss, expected, rel_tol=1e-9)


@dataclasses.dataclass
class GraphWatch:
    """What a run of training steps left alive, observed beside them.

    `returned`: what each call returned (the run stops after the first that is not a float);
    `live_bytes`: bytes of saved tensors still held after each call (after a gc.collect() where any
    were; the run stops after the first call that leaves some); `loss_calls`/`losses_alive`: how many
    loss tensors loss_fn made, and how many were still alive once the run was over (after gc.collect());
    `outputs`/`outputs_alive`: the same for the model outputs loss_fn was given."""
    returned: list
    live_bytes: list
    loss_calls: int
    losses_alive: int
    outputs: int
    outputs_alive: int


@GRAD_ON
def run_training_steps(fn, seed, steps, dtype):
    """Driver: `steps` calls of fn on a seeded training setup, a SavedTensorLedger around them and weak
    references to every loss and model output that loss_fn sees; a `GraphWatch`."""
    model, opt, loss_fn, batch = training_setup(seed, dtype, get_device())
    made, predictions = [], []

    def watched_loss_fn(prediction, target):
        loss = loss_fn(prediction, target)
        if isinstance(loss, torch.Tensor):
            made.append(weakref.ref(loss))
        if isinstance(prediction, torch.Tensor):
            predictions.append(weakref.ref(prediction))
        return loss

    watched_loss_fn.__qualname__ = "loss_fn"
    returned, live, got = [], [], None
    with SavedTensorLedger() as ledger:
        for k in range(steps):
            x, y = batch(k)
            got = fn(model, opt, watched_loss_fn, x, y)
            if not isinstance(got, float):
                returned.append(got)
                break
            returned.append(float(got))  # a float subclass (numpy's) as the float it is
            if ledger.live_bytes:
                gc.collect()  # a cycle is not a leak: let the collector have its say first
            live.append(ledger.live_bytes)
            if live[-1]:
                break
    del got
    gc.collect()
    return GraphWatch(returned, live, len(made), sum(ref() is not None for ref in made),
                      len(predictions), sum(ref() is not None for ref in predictions))


def check_train_step_keeps_no_graph(exercise, fn, *, seed, steps=100, dtype=torch.float64):
    """`steps` calls in a row: no tensor saved for backward is still held after a call returns
    (SavedTensorLedger), and once all calls are done no loss tensor made by loss_fn is alive
    (weak references)."""
    model, _, _, _ = training_setup(seed, dtype, get_device())
    case = f"{steps} calls in a row on {describe_model(model)}, SGD, MSE loss"
    watch = run_case(exercise, lambda: run_training_steps(fn, seed, steps, dtype), case, time_limit=20.0 + steps)
    if not isinstance(watch, GraphWatch):
        unreadable(exercise, watch, case, what="the calls")
    for k, got in enumerate(watch.returned):
        _check_float(exercise, got, case)
        held = watch.live_bytes[k] if k < len(watch.live_bytes) else 0
        if held:
            shown = ", ".join(f"{b / 1024:.1f}" for b in watch.live_bytes[max(0, k - 4):k + 1])
            checks.fail(exercise, f"after call {k + 1}, tensors saved for backward are still held "
                                  f"({held / 1024:.1f} KiB)",
                        details=f"  case: {case}\n  KiB still held after the last calls: {shown}\n"
                                "  something keeps a graph alive that backward() should have freed "
                                "(retain_graph=True, a stored loss or output)")
    if len(watch.returned) < steps:  # the run stopped early, and nothing above says why
        checks.fail(exercise, f"only {len(watch.returned)} of the {steps} calls were made", details=f"  case: {case}")
    if not watch.loss_calls:
        checks.fail(exercise, "never called loss_fn", details=f"  case: {case}")
    for kind, alive, made in (("loss tensors", watch.losses_alive, watch.loss_calls),
                              ("model outputs", watch.outputs_alive, watch.outputs)):
        if alive > (1 if kind == "model outputs" else 0):  # one output, overwritten at every step, may stay
            checks.fail(exercise, f"{alive} of the {made} {kind} made during the calls are still alive after "
                                  "they returned",
                        details=f"  case: {case}\n  something keeps them (a list, a default argument, an "
                                "attribute), and with each one what is left of its graph: keep loss.item(), and "
                                "store outputs only as .detach() copies")
