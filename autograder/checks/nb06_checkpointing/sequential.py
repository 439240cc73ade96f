"""The checks of `checkpoint_sequential` (torch's segments, its gradients, its saved bytes against torch's)
and of `best_segments` (the segment count whose measured peak is the smallest)."""
import numbers

import torch
import torch.utils.checkpoint as torch_checkpoint
from torch import nn

from autograder import checks
from autograder.checks import GradingError
from autograder.checks.nb06_checkpointing.blocks import FORBIDDEN, TestBlock, block_inputs, upstream
from autograder.checks.saved_counts import SavedCounts
from autograder.learner.device import get_device
from autograder.learner.memory import SavedTensorLedger

TOLERANCE_OF_TORCH = 0.05  # checkpoint_sequential's saved bytes may differ from torch's by 5%


# --- checkpoint_sequential ----------------------------------------------------------------------------
def make_chain(n_blocks, width, *, seed, p=0.3, device=None, dtype=torch.float64):
    """n equal TestBlocks (same shapes, different seeded weights), each counting its calls."""
    return [TestBlock(width, seed=seed + i, p=p, device=device, dtype=dtype) for i in range(n_blocks)]


def reference_sequential(blocks, segments, x):
    """torch.utils.checkpoint.checkpoint_sequential, reentrant: the reference of checkpoint_sequential,
    which is not an answer since the exercise refuses it (FORBIDDEN).

    Why reentrant: it is a torch.autograd.Function that saves the segment inputs with
    ctx.save_for_backward and rebuilds the graph in backward, so the ledger's pack hook sees its
    saved inputs and its recomputation, exactly as for a learner's Function. The non-reentrant
    variant installs saved_tensors_hooks of its own: they sit on top of the ledger's, so the
    tensors recomputed in backward are kept by torch's hooks where the ledger never sees them, and
    the ledger would report less than is held (on a GPU the allocator peak shows the difference).
    """
    return torch_checkpoint.checkpoint_sequential(blocks, segments, x, use_reentrant=True)


def run_sequential(apply, blocks, segments, x, seed):
    """Driver: `apply(blocks, segments, x)` and backward from a seeded upstream gradient, the global RNG
    seeded with `seed` first (set here, where the run happens: the grader's generator is not the
    kernel's); return the output, the saved bytes counted (`SavedCounts`) and each block's calls."""
    for b in blocks:
        b.zero_grad(set_to_none=True)
        b.calls = 0
    x.grad = None
    torch.manual_seed(seed)
    with SavedTensorLedger() as ledger:
        out = apply(blocks, segments, x)
        if not isinstance(out, torch.Tensor):
            return out, None, None
        if out.requires_grad:
            (out * upstream([out], seed)[0]).sum().backward()
    return out.detach(), SavedCounts.of(ledger), [b.calls for b in blocks]


def _sequential_setup(n_blocks, segments, *, width, batch, seed, p, dtype, device, as_sequential):
    device = device or get_device()
    blocks = make_chain(n_blocks, width, seed=seed, p=p, device=device, dtype=dtype)
    x = block_inputs("single", batch, width, seed=seed + 100, device=device, dtype=dtype)[0]
    shown = {"blocks": f"{'nn.Sequential of ' if as_sequential else ''}{n_blocks} blocks "
                       f"(Linear {width}->{2 * width}, GELU, dropout p={p}, Linear back, residual)",
             "segments": segments, "x": x}
    student_blocks = nn.Sequential(*blocks) if as_sequential else blocks
    return blocks, student_blocks, x, shown


def _student_sequential(exercise, student, student_blocks, segments, x, seed, shown, forbid):
    answer = checks.call_student(
        exercise, lambda: run_sequential(student, student_blocks, segments, x, seed), forbid=forbid)
    if not isinstance(answer, (tuple, list)) or len(answer) != 3:
        raise GradingError(f"{exercise}: no readable answer came back from your notebook: {checks.describe(answer)}")
    out, ledger, calls = answer
    if not isinstance(out, torch.Tensor):
        raise GradingError(f"{exercise}: should return a tensor, got {checks.describe(out)}\n  on input:\n"
                           f"{checks.describe_inputs(shown)}")
    if x.grad is None:
        raise GradingError(f"{exercise}: no gradient reached x: does the output require grad?\n  on input:\n"
                           f"{checks.describe_inputs(shown)}")
    return out, ledger, calls


def check_sequential_gradients(exercise, student, n_blocks, segments, *, width=8, batch=4, seed, p=0.3,
                               dtype=torch.float64, device=None, as_sequential=False, forbid=FORBIDDEN):
    """Output, input gradient and every block's parameter gradients equal the plain run's."""
    blocks, student_blocks, x, shown = _sequential_setup(n_blocks, segments, width=width, batch=batch, seed=seed,
                                                         p=p, dtype=dtype, device=device,
                                                         as_sequential=as_sequential)

    def plain(bs, _segments, inp):
        for b in bs:
            inp = b(inp)
        return inp

    out_ref, _, _ = run_sequential(plain, blocks, segments, x, seed)
    grad_ref = x.grad.clone()
    params_ref = [[q.grad.clone() for q in b.parameters()] for b in blocks]
    out, _, _ = _student_sequential(exercise, student, student_blocks, segments, x, seed, shown, forbid)
    checks.expect_close(exercise, out, out_ref, inputs=shown, names=["the output"])
    checks.expect_close(exercise, x.grad, grad_ref, inputs=shown, names=["the gradient of x"])
    for i, (b, expected) in enumerate(zip(blocks, params_ref)):
        for (name, q), e in zip(b.named_parameters(), expected):
            if q.grad is None:
                raise GradingError(f"{exercise}: parameter {name} of block {i} received no gradient\n  on input:\n"
                                   f"{checks.describe_inputs(shown)}")
            checks.expect_close(exercise, q.grad, e, inputs=shown,
                                names=[f"the gradient of block {i}'s {name} (dropout included)"])


def run_expecting_error(fn, *args):
    """Driver: call fn(*args) where the learner's code runs; return the name of the exception it raised,
    or None if it returned."""
    try:
        fn(*args)
    except Exception as err:  # the learner's exception is the answer here
        return type(err).__name__
    return None


def check_sequential_rejects(exercise, student, n_blocks, *, width=4, batch=2, seed=0, device=None):
    """segments outside 1..n_blocks (0 and n_blocks + 1) raise ValueError, as the exercise asks."""
    blocks, _, x, _ = _sequential_setup(n_blocks, 1, width=width, batch=batch, seed=seed, p=0.0,
                                        dtype=torch.float64, device=device, as_sequential=False)
    for segments in (0, n_blocks + 1):
        raised = checks.call_student(exercise, run_expecting_error, student, blocks, segments, x,
                                     names=[exercise, "blocks", "segments", "x"])
        if raised != "ValueError":
            raise GradingError(
                f"{exercise}: with {n_blocks} blocks and segments={segments}, "
                + ("returned without an error" if raised is None else f"raised {raised}")
                + f"; segments must be between 1 and {n_blocks}: raise ValueError otherwise")


def _segments_of(calls):
    """'blocks 0-3 ran twice, blocks 4-7 once' from per-block call counts."""
    parts, start = [], 0
    for i in range(1, len(calls) + 1):
        if i == len(calls) or calls[i] != calls[start]:
            span = f"block {start}" if i - start == 1 else f"blocks {start}-{i - 1}"
            parts.append(f"{span} ran {calls[start]}x")
            start = i
    return ", ".join(parts)


def check_sequential_memory(exercise, student, n_blocks, segments, *, width=16, batch=32, seed, p=0.0,
                            dtype=torch.float32, device=None, forbid=FORBIDDEN, stated=None):
    """Same segments as torch.utils.checkpoint.checkpoint_sequential: every block runs as often as
    it does there (twice in a checkpointed segment, once in the last, plain segment), and the peak
    and total saved bytes are within 5% of torch's (reentrant, see `reference_sequential`).

    `stated`: torch's counts for this very run on the CPU, {"calls": [...], "peak_bytes": ...,
    "total_bytes": ...}, as a visible test states them (tests/test_checkpoint_checks.py measures that
    they are torch's). They stand in for torch's run on the CPU only, where they were measured, so that
    a visible test need not call torch's checkpoint, whose first call in a process imports
    torch._dynamo (seconds); on another device torch's run is the reference."""
    blocks, _, x, shown = _sequential_setup(n_blocks, segments, width=width, batch=batch, seed=seed, p=p,
                                            dtype=dtype, device=device, as_sequential=False)
    if stated is not None and x.device.type == "cpu":
        ref, ref_calls = SavedCounts(stated["total_bytes"], stated["peak_bytes"], 0), list(stated["calls"])
    else:
        _, ref, ref_calls = run_sequential(reference_sequential, blocks, segments, x, seed)
    _, ledger, calls = _student_sequential(exercise, student, blocks, segments, x, seed, shown, forbid)
    if calls != ref_calls:
        raise GradingError(
            f"{exercise}: not torch's segments. With {n_blocks} blocks and segments={segments}, "
            f"torch.utils.checkpoint.checkpoint_sequential gives: {_segments_of(ref_calls)} "
            f"(segments of {n_blocks} // {segments} = {n_blocks // segments} blocks; the first {segments - 1} "
            f"are checkpointed, the last one runs plainly and takes the rest). Yours: {_segments_of(calls)}"
            f"\n  on input:\n{checks.describe_inputs(shown)}")
    for what, got, expected in (("peak", ledger.peak_bytes, ref.peak_bytes),
                                ("total", ledger.total_bytes, ref.total_bytes)):
        if abs(got - expected) > TOLERANCE_OF_TORCH * expected:
            raise GradingError(
                f"{exercise}: {what} saved bytes {got}, torch's checkpoint_sequential {expected} "
                f"({100 * (got - expected) / expected:+.1f}%, allowed ±{100 * TOLERANCE_OF_TORCH:g}%). "
                + ("More than torch: some segment keeps its intermediates (a forward that records a graph?)"
                   if got > expected else
                   "Less than torch: keep the segment inputs with ctx.save_for_backward, where autograd (and this "
                   "count) sees them")
                + f"\n  on input:\n{checks.describe_inputs(shown)}")


# --- best_segments ---------------------------------------------------------------------------------------
def _peak_table(peaks, n):
    """{k: peak in block activations} for n blocks, from `peaks`: a function of n (hidden tests: the answer
    key, which measures it) or {n: [peak for k = 1..n]} (visible tests state it)."""
    table = peaks(n) if callable(peaks) else peaks[n]
    return dict(table) if isinstance(table, dict) else {k: v for k, v in enumerate(table, start=1)}


def check_best_segments(exercise, student, peaks, depths=None):
    """best_segments(n) is a segment count whose peak (in block activations, from `peaks`: see
    `_peak_table`) is the smallest, for every n in `depths` (default: the depths `peaks` lists)."""
    for n in depths if depths is not None else list(peaks):
        got = checks.call_student(exercise, student, n, names=["n_blocks"])
        if not isinstance(got, numbers.Integral) or isinstance(got, bool):
            raise GradingError(f"{exercise}: best_segments({n}) should return an int (a number of segments), "
                               f"got {checks.describe(got)}")
        table = _peak_table(peaks, n)
        best = min(table.values())
        winners = [k for k, v in table.items() if v == best]
        if got not in table:
            raise GradingError(f"{exercise}: best_segments({n}) returned {got}; a segment count is between 1 "
                               f"and {n}")
        if table[got] != best:
            curve = ", ".join(f"{k}: {v:g}" for k, v in table.items())
            raise GradingError(
                f"{exercise}: best_segments({n}) returned {got}, whose measured peak is {table[got]:g} block "
                f"activations, but {' or '.join(map(str, winners))} segments reach {best:g}. sqrt({n}) = "
                f"{n ** 0.5:.2f} is only where the smooth cost k + n/k is lowest; torch's segments are n // k "
                f"blocks, the last one takes the rest and is not checkpointed.\n  measured peak (activations) "
                f"for k = 1..{n}: {curve}")
