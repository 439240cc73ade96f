"""Grading helpers for notebook 06: activation memory and gradient checkpointing.

It is long (over 600 lines) because its five exercises share one set of test blocks, counters and
runs: splitting them would scatter what each check compares with. Why a module of its own:
checkpointing is graded on what an implementation keeps and how often it runs a block, not only on
the numbers it returns. The helpers here

- count what backward keeps in two independent ways: through `saved_tensors_hooks`
  (`autograder.learner.memory.SavedTensorLedger`) and by
  walking the finished graph from its outputs and reading every node's saved variables
  (`graph_saved_bytes`), so that `saved_bytes` is checked against a count that uses no hooks;
- build seeded test blocks with parameters and dropout that count their own forward calls
  (`TestBlock`), run them plainly and through an implementation under test, and compare outputs,
  the gradients of every input and parameter, the saved bytes and the number of calls;
- judge `best_segments` against the peak saved activations of every segment count, which the
  test gives: stated in a visible test, measured by the course's answer key in hidden tests
  (`solutions/06_checkpointing/answer_key.py`: a function that computes that table is an answer).

The other references are PyTorch's own, computed at grading time: `torch.utils.checkpoint` with
`use_reentrant=True`, which keeps what it keeps as saved tensors, as a `torch.autograd.Function`
does, so that the ledger sees both sides alike (see `reference_sequential`); it is the feature the
checkpointing exercises rebuild, and they refuse it (a visible test may state torch's counts for its one
run on the CPU instead, see `check_sequential_memory`). No reference solution lives here: this
package is installed on learners' machines. Student code runs only through
`autograder.checks.call_student` (time limit, no stderr, readable errors), with
`torch.utils.checkpoint` forbidden however it was imported, and `saved_bytes` may not call the
course's own counters (`COUNTERS`): they are what it rebuilds.

Trusted grading (`autograder.grader.trusted`): student code runs only inside drivers (closures named
`run_<what>`, passed to `call_student`) that build the graph, run backward and return plain data:
outputs, call counts, next random numbers, saved bytes as numbers (`SavedCounts`); gradients come
back on the grader's copies of the blocks and inputs. The references and every comparison stay in the
grader. Runs with dropout are seeded explicitly where they happen, the plain reference run here
and the learner's run inside its driver, with the same seed: the grader's random generator is
not the kernel's, so neither run may depend on the state the other side's generator is in.
"""
import dataclasses
import math
import numbers

import torch
import torch.utils.checkpoint as torch_checkpoint
from torch import nn

from autograder import checks
from autograder.checks import GradingError
from autograder.learner.device import get_device
from autograder.learner.memory import SavedTensorLedger, measure, saved_values_by_name

# What a learner must not call when asked to build checkpointing: the function, the sequential
# helper and the reentrant Function behind them (the non-reentrant path starts in `checkpoint`).
# The Function is listed by its forward and backward: `checks.forbidden` given an autograd
# Function class walks its attributes into `_backward_cls` and back, without end.
FORBIDDEN = (torch_checkpoint.checkpoint, torch_checkpoint.checkpoint_sequential,
             torch_checkpoint.CheckpointFunction.forward, torch_checkpoint.CheckpointFunction.backward)
TOLERANCE_OF_TORCH = 0.05  # checkpoint_sequential's saved bytes may differ from torch's by 5%


# --- counting what backward keeps ------------------------------------------------------------------
def _storage_key(t):
    return (t.device, t.untyped_storage().data_ptr())


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (a view counts its whole storage, once)."""
    sizes = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            sizes[_storage_key(t)] = t.untyped_storage().nbytes()
    return sum(sizes.values())


def graph_saved_tensors(outputs):
    """[(node name, attribute, tensor)] for every tensor saved in the graph behind `outputs`,
    walked with an explicit stack from the outputs' grad_fn through `next_functions`.

    Each node's saved values are read with `autograder.learner.memory.saved_values_by_name` (tuples
    of tensors are opened). One difference from what pack hooks see: a Python number used as an
    operand (`x * 2.0`) is saved as a 0-d double or long tensor that autograd never hands to the
    hooks, and which this count includes; the graded functions use none.
    """
    outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    stack = [o.grad_fn for o in outputs if isinstance(o, torch.Tensor) and o.grad_fn is not None]
    seen, found = set(), []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for name, value in saved_values_by_name(node).items():
            found += [(type(node).__name__, name, t) for t in (value if isinstance(value, (tuple, list)) else (value,))
                      if isinstance(t, torch.Tensor)]
        stack.extend(fn for fn, _ in node.next_functions)
    return found


def graph_saved_bytes(outputs) -> int:
    """Bytes of the distinct storages saved in the graph behind `outputs`: an independent count
    of what `saved_tensors_hooks` see, read from the saved variables of every node."""
    return storage_bytes(t for _, _, t in graph_saved_tensors(outputs))


def describe_saved(outputs, limit=12) -> str:
    """What the graph keeps, one line per saved tensor, for feedback messages."""
    lines, counted = [], set()
    for node, name, t in graph_saved_tensors(outputs)[:limit]:
        key = _storage_key(t)
        note = "" if key not in counted else " (same storage as above: not counted again)"
        counted.add(key)
        lines.append(f"    {node} keeps {name}: shape {tuple(t.shape)}, {t.dtype}, "
                     f"storage {t.untyped_storage().nbytes()} bytes{note}")
    return "\n".join(lines)


# The course's own counters of saved bytes: saved_bytes is where the learner builds one, so its
# answer may not call them (the notebooks use them everywhere else).
COUNTERS = (SavedTensorLedger, measure, storage_bytes, graph_saved_tensors, graph_saved_bytes)


def check_saved_bytes(exercise, student, fn, args, label, expected=None):
    """`student(fn, *args)` must equal the bytes of the distinct storages autograd saves while
    `fn(*args)` runs, counted here from the graph (or `expected`, computed by hand), without
    calling the course's own COUNTERS."""
    inputs = {"fn": label, **{f"input {i}": a for i, a in enumerate(args)}}
    got = checks.call_student(exercise, lambda: student(fn, *args), time_limit=20, forbid=COUNTERS)
    reference_out = fn(*args)
    walked = graph_saved_bytes(reference_out)
    expected = walked if expected is None else expected
    valid = isinstance(got, numbers.Real) and not isinstance(got, bool) and float(got).is_integer()
    if not valid:
        raise GradingError(f"{exercise}: should return a whole number of bytes (an int), got "
                           f"{checks.describe(got)}\n  on input:\n{checks.describe_inputs(inputs)}")
    if int(got) != expected:
        hint = ""
        if expected and int(got) % expected == 0 and int(got) > expected:
            hint = ("\n  a multiple of the right count: is a storage saved by two ops, or by one op twice, "
                    "counted more than once?")
        raise GradingError(
            f"{exercise}: counted {int(got)} bytes for {label}; autograd saves {expected} bytes "
            f"(distinct storages, each storage's full nbytes)\n  on input:\n{checks.describe_inputs(inputs)}\n"
            f"  what the graph keeps:\n{describe_saved(reference_out) or '    nothing'}{hint}")


# --- a number ----------------------------------------------------------------------------------------
def check_number(exercise, student, args, kwargs, expected, rel_tol=1e-12):
    """`student(*args, **kwargs)` is a real number equal to `expected` (relative tolerance `rel_tol`)."""
    names = ["N", "S", "D", "L"][:len(args)] if len(args) <= 4 else [f"arg{i}" for i in range(len(args))]
    inputs = {**dict(zip(names, args)), **kwargs}
    got = checks.call_student(exercise, lambda: student(*args, **kwargs))
    if not isinstance(got, numbers.Real) or isinstance(got, bool):
        raise GradingError(f"{exercise}: should return a number of bytes, got {checks.describe(got)}\n"
                           f"  on input:\n{checks.describe_inputs(inputs)}")
    if not math.isclose(got, expected, rel_tol=rel_tol):
        ratio = got / expected if expected else float("nan")
        hint = ""
        if math.isclose(ratio, 1 / kwargs.get("bytes_per_elem", 2), rel_tol=1e-9):
            hint = "\n  off by exactly bytes_per_elem: that is a count of values, not of bytes"
        elif any(math.isclose(ratio, f, rel_tol=1e-9) for f in (1e-9, 2 ** -30, 1e-6, 2 ** -20)):
            hint = "\n  return bytes, not gigabytes or megabytes"
        raise GradingError(f"{exercise}: expected {expected:,} bytes, got {got:,} ({ratio:.4g} times the "
                           f"expected value){hint}\n  on input:\n{checks.describe_inputs(inputs)}")


# --- test blocks ------------------------------------------------------------------------------------
class TestBlock(nn.Module):
    """A seeded block with parameters and dropout that counts its forward calls.

    kind "single":  f(x) = x + fc2(dropout(gelu(fc1(x))))
    kind "two":     f(x, h) = fc2(dropout(tanh(fc1(x) + h)))               (two inputs needing grad)
    kind "masked":  f(x, mask, scale) = fc2(dropout(gelu(fc1(x))) * mask) * scale
                    (a tensor input that needs no grad and a Python number)
    kind "tuple":   f(x) = (x + fc2(d), d.sum(-1)) with d = dropout(gelu(fc1(x)))   (two outputs)
    kind "indexed": f(x, idx) = (x + fc2(d))[idx]          (int64 row indices, which cannot require grad)
    kind "argmax":  f(x) = (x + fc2(d), d.argmax(-1))       (a second output of integers, with no gradient)
    """

    __test__ = False  # not a pytest test class

    def __init__(self, width, *, seed, p=0.3, kind="single", device=None, dtype=torch.float64, hidden=None):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.fc1 = nn.Linear(width, hidden or 2 * width, dtype=torch.float64)
            self.fc2 = nn.Linear(hidden or 2 * width, width, dtype=torch.float64)
        self.to(device=device or get_device(), dtype=dtype)
        self.drop = nn.Dropout(p)
        self.kind, self.calls = kind, 0

    def forward(self, x, *extra):
        self.calls += 1
        if self.kind == "two":
            return self.fc2(self.drop(torch.tanh(self.fc1(x) + extra[0])))
        d = self.drop(nn.functional.gelu(self.fc1(x)))
        if self.kind == "masked":
            mask, scale = extra
            return self.fc2(d * mask) * scale
        if self.kind == "tuple":
            return x + self.fc2(d), d.sum(-1)
        if self.kind == "indexed":
            return (x + self.fc2(d))[extra[0]]
        if self.kind == "argmax":
            return x + self.fc2(d), d.argmax(-1)
        return x + self.fc2(d)


KINDS = {  # what a failure message says about the block it ran
    "single": "x + fc2(dropout(gelu(fc1(x))))",
    "two": "fc2(dropout(tanh(fc1(x) + h))), two inputs that need grad",
    "masked": "fc2(dropout(gelu(fc1(x))) * mask) * scale: a mask that needs no grad and a Python number",
    "tuple": "(x + fc2(d), d.sum(-1)) with d = dropout(gelu(fc1(x))): two outputs",
    "indexed": "(x + fc2(dropout(gelu(fc1(x)))))[idx]: idx holds int64 row indices, which need no grad",
    "argmax": "(x + fc2(d), d.argmax(-1)) with d = dropout(gelu(fc1(x))): a second output of int64 indices, "
              "which has no gradient",
}


def block_inputs(kind, batch, width, *, seed, device=None, dtype=torch.float64):
    """The arguments of a TestBlock of `kind`: leaves that need grad, except the mask and the scale."""
    from autograder.learner import inputs as draw
    device = device or get_device()
    x = draw.randn(batch, width, seed=seed, dtype=dtype, device=device).requires_grad_()
    if kind == "two":
        return [x, draw.randn(batch, 2 * width, seed=seed + 1, dtype=dtype, device=device).requires_grad_()]
    if kind == "masked":
        mask = (draw.randn(batch, 2 * width, seed=seed + 2, dtype=dtype, device=device) > 0).to(dtype)
        return [x, mask, 0.5]
    if kind == "indexed":  # every row once, the first twice: its gradient adds up
        return [x, torch.cat([torch.arange(batch - 1, -1, -1), torch.zeros(1, dtype=torch.long)]).to(device)]
    return [x]


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _upstream(outputs, seed):
    """A seeded upstream gradient for each floating-point output (None for an integer one, which has none)."""
    from autograder.learner import inputs as draw
    return [draw.randn(*o.shape, seed=seed + 7 * i, dtype=o.dtype, device=o.device) if o.is_floating_point() else None
            for i, o in enumerate(outputs)]


def _loss(outputs, seed):
    """sum(output * upstream) over the floating-point outputs: backward from it sends each its upstream gradient."""
    return sum((o * u).sum() for o, u in zip(outputs, _upstream(outputs, seed)) if u is not None)


def _leaves(args):
    return [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]


def _reset(block, args):
    block.zero_grad(set_to_none=True)
    for a in _leaves(args):
        a.grad = None
    block.calls = 0


def _plain_run(block, args, seed):
    """Outputs, input grads and parameter grads of the block run plainly, RNG seeded with `seed`."""
    _reset(block, args)
    torch.manual_seed(seed)
    outs = _as_tuple(block(*args))
    _loss(outs, seed).backward()
    return ([o.detach() for o in outs], [a.grad for a in _leaves(args)],
            [p.grad.clone() for p in block.parameters()])


def _student_forward(exercise, student, block, args, seed):
    """The outputs of student(block, *args), seeded as the plain run, checked for autograd."""
    torch.manual_seed(seed)
    outs = _as_tuple(student(block, *args))
    for i, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            raise GradingError(f"{exercise}: output {i} should be a tensor, got {checks.describe(o)}")
        if o.is_floating_point() and (not o.requires_grad or o.grad_fn is None):
            raise GradingError(
                f"{exercise}: output {i} does not require grad, so no gradient can flow back to the inputs "
                "and parameters: return the output of your Function's apply, not a detached tensor or one "
                "computed under torch.no_grad() outside it")
    return outs


def check_checkpoint_gradients(exercise, student, kind, *, width, batch, seed, p=0.3,
                               dtype=torch.float64, device=None, forbid=FORBIDDEN):
    """`student(block, *args)` gives the plain run's outputs, input gradients and parameter
    gradients, with dropout in the block (the recompute must replay the RNG)."""
    device = device or get_device()
    block = TestBlock(width, seed=seed, p=p, kind=kind, device=device, dtype=dtype)
    args = block_inputs(kind, batch, width, seed=seed + 100, device=device, dtype=dtype)
    outs_ref, grads_ref, params_ref = _plain_run(block, args, seed)
    shown = {"block": f"TestBlock {kind!r}: {KINDS[kind]} (width {width}, dropout p={p})",
             **{f"arg {i}": a for i, a in enumerate(args)}}

    def run_forward_backward():
        """Driver: the checkpointed block's outputs, then backward from seeded upstream gradients."""
        _reset(block, args)
        outs = _student_forward(exercise, student, block, args, seed)
        values = [o.detach().clone() for o in outs]
        _loss(outs, seed).backward()
        return values

    with_dropout = (" (the block has dropout: if the output matches but gradients differ, does the recompute "
                    "replay the random state the forward pass started from?)") if p else ""
    try:
        values = checks.call_student(exercise, run_forward_backward, forbid=forbid)
    except GradingError as err:  # a driver has no arguments to show: say which block and inputs it ran
        raise GradingError(f"{err}\n  on input:\n{checks.describe_inputs(shown)}") from None
    checks.expect_close(exercise, tuple(values), tuple(outs_ref), inputs=shown,
                        names=[f"forward output {i}" for i in range(len(values))])
    for i, (a, expected) in enumerate(zip(_leaves(args), grads_ref)):
        if a.grad is None:
            raise GradingError(f"{exercise}: input {i} needs grad but received no gradient\n  on input:\n"
                               f"{checks.describe_inputs(shown)}")
        checks.expect_close(exercise, a.grad, expected, inputs=shown,
                            names=[f"gradient of input {i}{with_dropout}"])
    for (name, param), expected in zip(block.named_parameters(), params_ref):
        if param.grad is None:
            raise GradingError(
                f"{exercise}: the block's parameter {name} received no gradient. The recompute in backward "
                "must reach the parameters inside the block: torch.autograd.grad with respect to the inputs "
                "alone misses them, torch.autograd.backward(outputs, grads) accumulates into them")
        checks.expect_close(exercise, param.grad, expected, inputs=shown,
                            names=[f"gradient of parameter {name}{with_dropout}"])


def check_checkpoint_autograd_grad(exercise, student, kind, *, width, batch, seed, p=0.3, dtype=torch.float64,
                                   device=None, forbid=FORBIDDEN):
    """`torch.autograd.grad(loss, [inputs..., parameters...], allow_unused=True)` through `student(block, *args)`
    either raises an exception with a message or returns the plain run's gradients: never None, nor
    other numbers, in silence.

    A checkpoint Function gets the block's parameters' gradients by a backward of its own inside
    backward, which accumulates them into `.grad`; `torch.autograd.grad` reads what backward returns
    for the Function's inputs, and the parameters are none of them. torch's reentrant checkpoint raises
    there (`torch.autograd._is_checkpoint_valid()` is False); its non-reentrant one supports it."""
    device = device or get_device()
    block = TestBlock(width, seed=seed, p=p, kind=kind, device=device, dtype=dtype)
    args = block_inputs(kind, batch, width, seed=seed + 100, device=device, dtype=dtype)
    names = [f"input {i}" for i in range(len(_leaves(args)))] + [f"parameter {n}" for n, _ in block.named_parameters()]
    _reset(block, args)
    torch.manual_seed(seed)
    expected = torch.autograd.grad(_loss(_as_tuple(block(*args)), seed), [*_leaves(args), *block.parameters()])
    shown = {"block": f"TestBlock {kind!r}: {KINDS[kind]} (width {width}, dropout p={p})",
             **{f"arg {i}": a for i, a in enumerate(args)},
             "call": "torch.autograd.grad(loss, [inputs that need grad, *block.parameters()], allow_unused=True)"}

    def run_autograd_grad():
        """Driver: the checkpointed block, then torch.autograd.grad for its inputs and parameters; what it raised
        (its type and message) or returned, and which parameters got a .grad on the way."""
        _reset(block, args)
        outs = _student_forward(exercise, student, block, args, seed)
        try:
            grads = torch.autograd.grad(_loss(outs, seed), [*_leaves(args), *block.parameters()], allow_unused=True)
        except Exception as err:  # the refusal this check accepts
            return "raised", type(err).__name__, str(err)
        filled = [q.grad is not None for q in block.parameters()]
        return "returned", [g if g is None else g.detach() for g in grads], filled

    try:
        answer = checks.call_student(exercise, run_autograd_grad, forbid=forbid)
    except GradingError as err:
        raise GradingError(f"{err}\n  on input:\n{checks.describe_inputs(shown)}") from None
    if not isinstance(answer, (tuple, list)) or len(answer) != 3 or answer[0] not in ("raised", "returned"):
        raise GradingError(f"{exercise}: no readable answer came back from your notebook: {checks.describe(answer)}")
    if answer[0] == "raised":
        if not str(answer[2]).strip():
            raise GradingError(f"{exercise}: under torch.autograd.grad your checkpoint raised {answer[1]} without a "
                               "message: say why, so that whoever calls it knows what to do instead (call .backward())")
        return
    _, grads, filled = answer
    missing = [name for name, g in zip(names, grads) if g is None]
    if missing:
        where = (" Their gradients went into .grad instead, where torch.autograd.grad never looks."
                 if any(filled) else "")
        raise GradingError(
            f"{exercise}: torch.autograd.grad through your checkpoint returned None for {', '.join(missing)}, in "
            f"silence.{where} The block's parameters are not inputs of your Function, so its backward cannot hand "
            "their gradients to torch.autograd.grad (nor to backward(inputs=...)). Refuse that call: in backward, "
            "raise a RuntimeError that says so when torch.autograd._is_checkpoint_valid() is False, as "
            f"torch.utils.checkpoint(use_reentrant=True) does\n  on input:\n{checks.describe_inputs(shown)}")
    checks.expect_close(exercise, tuple(grads), tuple(expected), inputs=shown,
                        names=[f"torch.autograd.grad's gradient of {name}" for name in names])

def check_checkpoint_memory(exercise, student, *, width, batch, seed, dtype=torch.float32, device=None,
                            forbid=FORBIDDEN):
    """During the forward pass, `student(block, x)` saves no more than the block's inputs; over
    forward and backward its peak stays under inputs + one plain run of the block, and nothing
    saved is still held once backward is done."""
    device = device or get_device()
    block = TestBlock(width, seed=seed, p=0.0, device=device, dtype=dtype, hidden=8 * width)
    args = block_inputs("single", batch, width, seed=seed + 100, device=device, dtype=dtype)
    with SavedTensorLedger() as plain:
        block(*args)
    input_bytes = storage_bytes(args)
    shown = {"block": f"TestBlock(width={width}, hidden={8 * width}), no dropout", "x": args[0]}

    def run_counting_saved():
        """Driver: saved bytes counted during the checkpointed forward, at the peak, and left after backward."""
        with SavedTensorLedger() as ledger:
            out = _as_tuple(student(block, *args))[0]
            during_forward = ledger.total_bytes
            if out.requires_grad:
                out.sum().backward()
            del out
        return during_forward, ledger.peak_bytes, ledger.live_bytes

    during_forward, peak, left = checks.call_student(exercise, run_counting_saved, forbid=forbid)
    if during_forward > input_bytes:
        raise GradingError(
            f"{exercise}: the forward pass saved {during_forward} bytes for backward, more than the "
            f"{input_bytes} bytes of the block's inputs (the plain block saves {plain.total_bytes}). Checkpointing "
            "keeps only the inputs: run the block without recording a graph in forward (a Function's forward "
            f"already does) and save the inputs alone\n  on input:\n{checks.describe_inputs(shown)}")
    if peak > input_bytes + plain.total_bytes:
        raise GradingError(
            f"{exercise}: at its peak, forward and backward held {peak} saved bytes, more than the block's "
            f"inputs ({input_bytes}) plus one plain run of the block ({plain.total_bytes}): is the block's graph "
            f"built twice?\n  on input:\n{checks.describe_inputs(shown)}")
    if left:
        raise GradingError(f"{exercise}: {left} saved bytes are still held after backward: is the recomputed "
                           "graph kept somewhere (on ctx, in a global)?")


def _times(n):
    return "once" if n == 1 else f"{n} times"


def check_checkpoint_recompute(exercise, student, *, width, batch, seed, dtype=torch.float64, device=None,
                               forbid=FORBIDDEN):
    """The block runs once in forward and once more in backward; and two checkpointed blocks with
    dropout leave the global random generator where the plain run leaves it."""
    device = device or get_device()
    block = TestBlock(width, seed=seed, p=0.5, device=device, dtype=dtype)
    args = block_inputs("single", batch, width, seed=seed + 100, device=device, dtype=dtype)
    shown = {"block": f"TestBlock(width={width}, dropout p=0.5)", "x": args[0]}

    def run_counting_calls():
        """Driver: how often the block ran during the checkpointed forward, and in forward and backward."""
        _reset(block, args)
        out = _as_tuple(student(block, *args))[0]
        in_forward = block.calls
        if out.requires_grad:
            out.sum().backward()
        return in_forward, block.calls

    in_forward, in_all = checks.call_student(exercise, run_counting_calls, forbid=forbid)
    if in_forward != 1:
        raise GradingError(f"{exercise}: the block ran {_times(in_forward)} during the forward pass; it should run "
                           f"exactly once there\n  on input:\n{checks.describe_inputs(shown)}")
    if in_all != 2:
        raise GradingError(
            f"{exercise}: the block ran {_times(in_all)} in forward and backward together; checkpointing runs it "
            "exactly twice: once in forward without saving, once in backward to rebuild what it needs"
            + (" (it never ran again: is backward using a graph kept from forward?)" if in_all == 1 else "")
            + f"\n  on input:\n{checks.describe_inputs(shown)}")

    second = TestBlock(width, seed=seed + 1, p=0.5, device=device, dtype=dtype)

    def run_two_blocks(apply):
        """Driver (with the learner's checkpoint as `apply`): two blocks with dropout, forward and
        backward, then the generator's next numbers."""
        torch.manual_seed(seed)
        out = apply(second, _as_tuple(apply(block, *args))[0])
        _as_tuple(out)[0].sum().backward()
        return torch.rand(8, device=device)

    expected = run_two_blocks(lambda b, *a: b(*a))
    got = checks.call_student(exercise, lambda: run_two_blocks(student), forbid=forbid)
    if not torch.equal(got, expected):
        raise GradingError(
            f"{exercise}: after forward and backward through two checkpointed blocks with dropout, the global "
            "random generator is not where the plain run leaves it: the next random numbers differ. Restore "
            "the saved RNG state for the recompute only, and put the generator back afterwards "
            "(torch.random.fork_rng does both)")


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


@dataclasses.dataclass
class SavedCounts:
    """What a `SavedTensorLedger` counted over a run, as numbers: they cross from the kernel to the
    grader as data, where a ledger would come back as an opaque object."""
    total_bytes: int
    peak_bytes: int
    live_bytes: int

    @classmethod
    def of(cls, ledger):
        return cls(ledger.total_bytes, ledger.peak_bytes, ledger.live_bytes)


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
            (out * _upstream([out], seed)[0]).sum().backward()
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
