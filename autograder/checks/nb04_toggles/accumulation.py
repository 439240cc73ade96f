"""accumulated_grads: the full-batch gradient, computed in chunks, left in .grad, one chunk's graph
at a time.

The reference is PyTorch's gradient of the full-batch mean loss in one pass, which is not the
exercise (it keeps every sample's activations at once; the memory check rejects exactly that).
The hint recomputes the classic slips from each chunk's own gradient.
"""
import contextlib
import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from autograder import checks
from autograder.checks import GradingError, battery
from autograder.checks.nb04_toggles.cases import GRAD_ON, expect_close_reordered, run_case, summary, unreadable
from autograder.checks.nb04_toggles.models import tanh_mlp
from autograder.learner import inputs
from autograder.learner.device import get_device
from autograder.learner.memory import SavedTensorLedger

MEMORY_SHARE = 0.6  # accumulated_grads may hold at most this share of the full batch's saved bytes


def regression(seed, dtype, device, n, hidden=16, task="mse"):
    """A seeded 4-hidden-3 tanh MLP, its mean loss, n inputs and targets (regression, or 3 classes)."""
    model = tanh_mlp([4, hidden, 3], seed, dtype, device)
    x = inputs.randn(n, 4, seed=seed + 1, dtype=dtype, device=device)
    if task == "mse":
        return model, nn.MSELoss(), x, inputs.randn(n, 3, seed=seed + 2, dtype=dtype, device=device)
    return model, F.cross_entropy, x, inputs.randint(3, n, seed=seed + 2, device=device)


@dataclasses.dataclass
class Call:
    """What a learner's call returned, and what its driver saw beside it: the .grad of every parameter
    of the model after the call ({name: tensor or None}), the most bytes of saved tensors held at
    once during the call (measured only when asked: 0 otherwise), and the names of the parameters
    whose .grad memory a returned tensor shares (a tensor that crosses to the grader is copied, so
    the driver looks where the call ran)."""
    returned: object
    grads: dict
    peak_saved_bytes: int = 0
    shares_grad_of: list = dataclasses.field(default_factory=list)


def _memory(t):
    return t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) and t.numel() else None


@GRAD_ON
def run_accumulation(fn, stale, memory, model, loss_fn, x, y, micro_batches):
    """Driver: fn(model, loss_fn, x, y, micro_batches) after putting `stale` (one per parameter that
    requires grad) into .grad, under a SavedTensorLedger when `memory`; a `Call`."""
    for p, g in zip([p for p in model.parameters() if p.requires_grad], stale):
        p.grad = g.clone()
    ledger = SavedTensorLedger()
    with ledger if memory else contextlib.nullcontext():
        got = fn(model, loss_fn, x, y, micro_batches)
    returned = {_memory(g) for g in got if _memory(g) is not None} if isinstance(got, (list, tuple)) else set()
    shared = [name for name, p in model.named_parameters() if _memory(p.grad) in returned]
    return Call(got, {name: p.grad for name, p in model.named_parameters()}, ledger.peak_bytes, shared)


def _chunk_grads(model, loss_fn, x, y, k):
    """The gradient of each tensor_split chunk's own mean loss, and each chunk's size."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [(len(xc), torch.autograd.grad(loss_fn(model(xc), yc), params))
            for xc, yc in zip(torch.tensor_split(x, k), torch.tensor_split(y, k))]


def _accumulation_hint(got, expected, model, loss_fn, x, y, k, stale):
    """Name the slip whose result `got` matches, if it is one of the classic ones."""
    try:
        chunks = _chunk_grads(model, loss_fn, x, y, k)
        n = len(x)
        slips = {
            "each chunk's mean loss was added without weighting: scale it by len(chunk) / len(x) "
            "(with equal chunks, that is dividing by micro_batches)":
                [sum(g[i] for _, g in chunks) for i in range(len(stale))],
            "with chunks of unequal size, dividing each chunk's loss by micro_batches weights the samples of "
            "small chunks more: scale by len(chunk) / len(x) instead":
                [sum(g[i] / k for _, g in chunks) for i in range(len(stale))],
            "the gradients that were in .grad before the call were added in: zero them once, before the "
            "first chunk": [e + s_ for e, s_ in zip(expected, stale)],
            "only the last chunk's gradient is left: zero the gradients once before the loop, not inside it":
                [chunks[-1][0] / n * g for g in chunks[-1][1]],
        }
        for text, candidate in slips.items():
            if all(torch.allclose(g.double(), c.double(), rtol=1e-5, atol=1e-7) for g, c in zip(got, candidate)):
                return "\n  hint: " + text
    except Exception:  # a malformed answer: the message above says enough
        return ""
    return ("\n  hint: start from clean gradients (zero them once, before the first chunk), call backward() on "
            "every chunk's loss weighted by len(chunk) / len(x), and cover every sample exactly once")


def check_accumulated_grads(exercise, fn, *, n, k, seed, dtype=torch.float64, task="mse", frozen=(),
                            hidden=16, memory=False):
    """fn(model, loss_fn, x, y, k) equals the full-batch mean-loss gradient, leaves it in .grad
    (stale gradients discarded, frozen parameters untouched) and, with memory=True, never holds more
    than MEMORY_SHARE of the full batch's saved activations at once. n=1 (a batch of one) names that
    stress under any failure."""
    with battery.stressed(exercise, "batch-of-one" if n == 1 else None):
        _check_accumulated_grads(exercise, fn, n=n, k=k, seed=seed, dtype=dtype, task=task, frozen=frozen,
                                 hidden=hidden, memory=memory)


def _check_accumulated_grads(exercise, fn, *, n, k, seed, dtype, task, frozen, hidden, memory):
    device = get_device()
    model, loss_fn, x, y = regression(seed, dtype, device, n, hidden, task)
    reference, _, _, _ = regression(seed, dtype, device, n, hidden, task)
    for m in (model, reference):
        for name, p in m.named_parameters():
            if name in frozen:
                p.requires_grad_(False)
    names = [name for name, p in model.named_parameters() if p.requires_grad]
    params = [p for p in model.parameters() if p.requires_grad]
    stale = [inputs.randn(*p.shape, seed=seed + 70 + i, dtype=dtype, device=device)  # left by an earlier backward
             for i, p in enumerate(params)]
    ref_params = [p for p in reference.parameters() if p.requires_grad]
    with SavedTensorLedger() as full:
        full_loss = loss_fn(reference(x), y)
    expected = torch.autograd.grad(full_loss, ref_params)
    case = (f"{n} samples in micro_batches={k} chunks, {task} loss (mean over the batch), {dtype}"
            + (f", {list(frozen)} frozen" if frozen else "") + "; every .grad held an earlier gradient")
    result = run_case(exercise, lambda *args: run_accumulation(fn, stale, memory, *args), case, model, loss_fn, x, y,
                      k, names=["model", "loss_fn", "x", "y", "micro_batches"])
    if not isinstance(result, Call):
        unreadable(exercise, result, case)
    got = result.returned
    if not isinstance(got, (list, tuple)) or len(got) != len(params):
        checks.fail(exercise, f"should return one gradient per trainable parameter ({len(params)}: {names}), "
                              f"got {summary(got)}", details=f"  case: {case}")
    try:
        expect_close_reordered(exercise, got, expected, case=case, names=[f"gradient of {n_}" for n_ in names])
    except GradingError as err:
        raise GradingError(str(err) + _accumulation_hint(got, expected, reference, loss_fn, x, y, k, stale)) from None
    for name in names:
        if result.grads.get(name) is None:
            checks.fail(exercise, f"{name}.grad is None after the call: leave the accumulated gradient in .grad, "
                                  "where optimizer.step() reads it", details=f"  case: {case}")
    expect_close_reordered(exercise, [result.grads[n_] for n_ in names], expected, case=case,
                           names=[f"{n_}.grad after the call" for n_ in names])
    for name in frozen:
        if result.grads.get(name) is not None:
            checks.fail(exercise, f"the frozen {name} has a .grad after the call", details=f"  case: {case}")
    if result.shares_grad_of:
        checks.fail(exercise, f"returned {result.shares_grad_of[0]}.grad itself, not a copy of it",
                    details=f"  case: {case}\n  the next backward() adds into .grad in place, and would change the "
                            "tuple you returned: return p.grad.clone()")
    if memory and result.peak_saved_bytes > MEMORY_SHARE * full.peak_bytes:
        checks.fail(exercise, "the graphs of several chunks were alive at the same time",
                    details=f"  case: {case}\n  saved tensors held at once: {result.peak_saved_bytes / 1024:.1f} KiB, "
                            f"against {full.peak_bytes / 1024:.1f} KiB for one forward of the whole batch\n"
                            "  hint: call backward() on each chunk's (weighted) loss before running the next chunk; "
                            "adding the losses up and calling backward() once keeps every chunk's graph alive")
