"""Checks of `tbptt_backward(cell, xs, targets, h0, k, loss_fn)`: truncated BPTT's loss and gradients,
and its saved memory.

Values: literal numbers on a scalar cell (visible), the answer key on torch's RNN and GRU cells
(hidden), with hints computed from full BPTT and from k = 1 when a gradient does not match. Memory:
the peak saved bytes (`SavedTensorLedger`, counted in the driver, back as `SavedCounts`) for two
sequence lengths, which separates one backward per segment from one at the end. A `stress` of the
battery ("batch-of-one") names the input that broke an answer.
"""
import copy
import numbers

import torch
import torch.nn.functional as F
from torch import nn

from autograder import checks
from autograder.checks import GradingError, battery
from autograder.checks.compare import REORDERED_TOLERANCES, fail
from autograder.checks.nb08_higher_order.common import close
from autograder.checks.saved_counts import SavedCounts
from autograder.checks.seeded import seeded
from autograder.learner import inputs
from autograder.learner.device import get_device
from autograder.learner.memory import SavedTensorLedger


class ScalarCell(nn.Module):
    """h' = tanh(w h + u x + b) on scalars: small enough to check by hand."""

    def __init__(self, w=0.8, u=0.5, b=-0.1):
        super().__init__()
        self.w, self.u, self.b = (nn.Parameter(torch.tensor(v, dtype=torch.float64)) for v in (w, u, b))

    def forward(self, x, h):
        return torch.tanh(self.w * h + self.u * x + self.b)


def rnn_cell(kind, *, seed, n_in=3, hidden=4, dtype=torch.float64, device=None):
    """A seeded cell(x_t, h) -> h: torch's "rnn" (tanh) or "gru" cell."""
    build = {"rnn": lambda: nn.RNNCell(n_in, hidden), "gru": lambda: nn.GRUCell(n_in, hidden)}[kind]
    return seeded(build, seed, dtype, device)


def squared_error(h, target):
    return (h - target).pow(2).sum()


def sequence(kind, steps, *, seed, batch=2, n_in=3, hidden=4, dtype=torch.float64, device=None, as_list=False):
    """xs, targets (mse: (T, batch, hidden); "classes": class indices) and h0 for a seeded cell."""
    device = device or get_device()
    xs = inputs.randn(steps, batch, n_in, seed=seed, dtype=dtype, device=device)
    if kind == "classes":
        targets = inputs.randint(hidden, steps, batch, seed=seed + 1, device=device)
    else:
        targets = inputs.randn(steps, batch, hidden, seed=seed + 1, dtype=dtype, device=device, scale=0.5)
    h0 = inputs.randn(batch, hidden, seed=seed + 2, dtype=dtype, device=device, scale=0.3)
    if as_list:  # one storage per step: the saved-bytes count then sees one step's input, not the sequence
        xs, targets = [t.clone() for t in xs], [t.clone() for t in targets]
    return xs, targets, h0


TBPTT_LOSSES = {"mse": F.mse_loss, "classes": F.cross_entropy, "squared_error": squared_error}


def run_tbptt(student, cell, xs, targets, h0, k, loss_fn):
    """Driver: the learner's truncated BPTT; its gradients stay in the cell's (and h0's) .grad."""
    with torch.enable_grad():
        return student(cell, xs, targets, h0, k, loss_fn)


def _hint_for_error(text):
    if "backward through the graph a second time" in text:
        return ("\n  the hidden state still carries the previous segment's graph, which its backward() has freed: "
                "detach h at each segment boundary (h = h.detach())")
    return ""


def _student_tbptt(exercise, student, cell, xs, targets, h0, k, loss_fn, shown):
    # a closure, not arguments: call_student hands arguments over as detached copies, and h0 must stay
    # the leaf it is (with requires_grad) for its gradient to come back
    try:
        total = checks.call_student(exercise, lambda: run_tbptt(student, cell, xs, targets, h0, k, loss_fn))
    except GradingError as err:
        raise GradingError(f"{err}\n  on input:\n{checks.describe_inputs(shown)}{_hint_for_error(str(err))}") from None
    if not isinstance(total, numbers.Real) or isinstance(total, bool):
        fail(exercise, f"should return the total loss as a Python float (loss.item() summed over segments), got "
              f"{checks.describe(total)}", shown)
    return float(total)


def _grads_of(cell, h0):
    grads = {f"cell.{n}": p.grad for n, p in cell.named_parameters()}
    if h0.requires_grad:
        grads["h0"] = h0.grad
    return grads


def _compare_tbptt(exercise, total, expected_total, grads, expected_grads, shown, hints=list):
    """The total, then each gradient; `hints()` (computed only on a mismatch) names known wrong ones."""
    float32 = any(g.dtype == torch.float32 for g in expected_grads.values())  # items summed in another order
    if abs(total - expected_total) > (1e-5 if float32 else 1e-9) * max(1.0, abs(expected_total)):
        fail(exercise, f"returned a total loss of {total:.10g}, expected {expected_total:.10g} (the sum of every "
              "step's loss_fn(h_t, targets[t]))", shown)
    for name, want in expected_grads.items():
        have = grads[name]
        if have is None:
            where = ("h0 requires grad, so the first segment's backward reaches it: do not detach h0" if name == "h0"
                     else "no segment's backward reached it")
            fail(exercise, f"{name}.grad is None: {where}", shown)
        rtol, atol = REORDERED_TOLERANCES[want.dtype]
        if not torch.allclose(have, want, rtol=rtol, atol=atol):
            for label, wrong in hints():
                if torch.allclose(have, wrong[name], rtol=rtol, atol=atol):
                    fail(exercise, f"{name}.grad is wrong: {label}", shown)
        close(exercise, have, want, shown=shown, name=f"{name}.grad")


def check_tbptt_expected(exercise, student, *, xs, targets, k, expected_total, expected_grads, h0=0.0):
    """On `ScalarCell` and squared errors, the total and the gradients of w, u, b equal the literal
    values a test cell states."""
    device = get_device()
    cell = ScalarCell().to(device)
    xs_t = torch.tensor(xs, dtype=torch.float64, device=device)
    targets_t = torch.tensor(targets, dtype=torch.float64, device=device)
    h0_t = torch.tensor(h0, dtype=torch.float64, device=device)
    shown = {"cell": "h' = tanh(0.8 h + 0.5 x - 0.1)", "xs": xs_t, "targets": targets_t, "h0": h0_t, "k": k,
             "loss_fn": "(h - target)**2"}
    total = _student_tbptt(exercise, student, cell, xs_t, targets_t, h0_t, k, squared_error, shown)
    expected = {f"cell.{n}": torch.tensor(v, dtype=torch.float64, device=device) for n, v in expected_grads.items()}

    def hints():
        found = []
        for label, detach_each_step, differs in ((FULL_BPTT, False, k < len(xs)), (EVERY_STEP, True, k > 1)):
            if differs:
                other = ScalarCell().to(device)
                _plain_unroll(other, xs_t, targets_t, h0_t, squared_error, detach_each_step)
                found.append((label, _grads_of(other, h0_t)))
        return found

    _compare_tbptt(exercise, total, expected_total, _grads_of(cell, h0_t), expected, shown, hints)


FULL_BPTT = ("they are those of full backpropagation through time: was the hidden state never detached (kept "
             "with retain_graph=True)?")
EVERY_STEP = "they are those of k = 1: the hidden state was detached after every step, not every k steps"


def _plain_unroll(cell, xs, targets, h0, loss_fn, detach_each_step):
    """Gradients of two slips (never truncated, or truncated after every step): one backward at the end."""
    h, loss = h0, 0
    for t in range(len(xs)):
        h = cell(xs[t], h)
        loss = loss + loss_fn(h, targets[t])
        if detach_each_step:
            h = h.detach()
    loss.backward()


def check_tbptt(exercise, student, reference, cell_kind, *, steps, k, loss, seed, h0_requires_grad=False,
                preset_grads=False, as_list=False, dtype=torch.float64, device=None, batch=2, stress=None):
    """Total loss and gradients (the cell's, and h0's when it requires grad) against `reference` (the
    answer key) on an identical cell, for `batch` sequences; with `preset_grads` the cell's .grad starts
    non-zero and must be added to, not replaced (zeroing is the caller's). `stress`: the battery's name
    for the input ("batch-of-one" with batch=1)."""
    with battery.stressed(exercise, stress):
        _check_against_key(exercise, student, reference, cell_kind, steps, k, loss, seed, h0_requires_grad,
                           preset_grads, as_list, dtype, device, batch)


def _check_against_key(exercise, student, reference, cell_kind, steps, k, loss, seed, h0_requires_grad, preset_grads,
                       as_list, dtype, device, batch):
    device = device or get_device()
    cell = rnn_cell(cell_kind, seed=seed, dtype=dtype, device=device)
    xs, targets, h0 = sequence(loss, steps, seed=seed + 10, batch=batch, dtype=dtype, device=device, as_list=as_list)
    fn = TBPTT_LOSSES[loss]

    def reference_run(truncation):  # on a copy of the cell with empty .grad, and a fresh h0
        twin, twin_h0 = copy.deepcopy(cell), h0.detach().clone().requires_grad_(h0_requires_grad)
        twin.zero_grad(set_to_none=True)
        return reference(twin, xs, targets, twin_h0, truncation, fn), _grads_of(twin, twin_h0)

    expected_total, increments = reference_run(k)
    preset = {}
    if preset_grads:
        for i, (name, p) in enumerate(cell.named_parameters()):
            p.grad = inputs.randn(*p.shape, seed=seed + 20 + i, dtype=dtype, device=device)
            preset[f"cell.{name}"] = p.grad.clone()
    h0.requires_grad_(h0_requires_grad)
    shown = {"cell": checks.describe(cell), "len(xs)": steps, "k": k, "loss_fn": fn.__name__,
             "h0 requires grad": h0_requires_grad, "cell's .grad before the call": "set" if preset_grads else "None"}
    total = _student_tbptt(exercise, student, cell, xs, targets, h0, k, fn, shown)

    def hints():  # the gradients of the usual slips, computed when a gradient does not match
        found = []
        if preset:
            found.append(("it holds this call's gradients alone; the .grad that was there before the call is "
                          "gone. Leave zeroing to the caller: backward() adds to .grad", increments))
        for label, other_k in ((FULL_BPTT, steps), (EVERY_STEP, 1)):
            if other_k != k:
                other = reference_run(other_k)[1]
                found.append((label, {n: g + preset[n] if n in preset else g for n, g in other.items()}))
        return found

    expected = {n: g + preset[n] if n in preset else g for n, g in increments.items()}
    _compare_tbptt(exercise, total, expected_total, _grads_of(cell, h0), expected, shown, hints)


def saved_counts_of_tbptt(student, cell, xs, targets, h0, k, loss_fn):
    """Driver: the learner's truncated BPTT inside a saved-tensor ledger; what it counted, as numbers."""
    with SavedTensorLedger() as ledger:
        run_tbptt(student, cell, xs, targets, h0, k, loss_fn)
    return SavedCounts.of(ledger)


def check_tbptt_memory(exercise, student, *, k, lengths, seed, cell_kind="rnn", hidden=16, dtype=torch.float32,
                       device=None):
    """The peak of saved bytes does not grow with len(xs): one backward per segment frees each segment's
    graph before the next is built (one backward at the end keeps them all). Each step's input is a
    tensor of its own, so the count sees one step's input, not the whole sequence's storage."""
    device = device or get_device()
    peaks = {}
    for steps in lengths:
        cell = rnn_cell(cell_kind, seed=seed, hidden=hidden, dtype=dtype, device=device)
        xs, targets, h0 = sequence("mse", steps, seed=seed + 10, batch=4, hidden=hidden, dtype=dtype, device=device,
                                   as_list=True)
        shown = {"cell": checks.describe(cell), "len(xs)": steps, "k": k, "loss_fn": "mse_loss"}
        counts = _call_tbptt_saved(exercise, student, cell, xs, targets, h0, k, shown)
        if not isinstance(counts, SavedCounts):
            fail(exercise, f"no readable answer came back from your notebook: {checks.describe(counts)}", shown)
        if counts.total_bytes == 0 or any(p.grad is None for p in cell.parameters()):
            fail(exercise, "nothing was saved for backward, or the cell got no gradient: does your function build "
                  "a graph through the cell and call backward()?", shown)
        peaks[steps] = counts.peak_bytes
    short, long = min(lengths), max(lengths)
    if peaks[long] > 1.05 * peaks[short]:
        fail(exercise, f"the peak of saved bytes grows with the sequence: {peaks[short]} bytes for {short} steps, "
              f"{peaks[long]} for {long} steps (k = {k})",
              details="  with one backward() per segment, each segment's graph is freed before the next one is "
                      "built, so the peak is one segment's activations however long the sequence. Is backward() "
                      "called once at the end, or does a segment's graph stay alive (a loss summed across segments, "
                      "retain_graph=True)?")


def _call_tbptt_saved(exercise, student, cell, xs, targets, h0, k, shown):
    try:
        return checks.call_student(exercise,
                                   lambda: saved_counts_of_tbptt(student, cell, xs, targets, h0, k, F.mse_loss))
    except GradingError as err:
        raise GradingError(f"{err}\n  on input:\n{checks.describe_inputs(shown)}{_hint_for_error(str(err))}") from None
