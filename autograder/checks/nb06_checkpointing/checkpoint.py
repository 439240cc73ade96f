"""The checks of `checkpoint`: the plain run's outputs and gradients (dropout replayed), what
`torch.autograd.grad` through it does, what it saves, and how often the block runs."""
import torch

from autograder import checks
from autograder.checks import GradingError
from autograder.checks.nb06_checkpointing.blocks import (
    FORBIDDEN,
    KINDS,
    TestBlock,
    as_tuple,
    block_inputs,
    leaves,
    plain_run,
    reset,
    student_forward,
    upstream_loss,
)
from autograder.checks.nb06_checkpointing.saved_bytes import storage_bytes
from autograder.learner.device import get_device
from autograder.learner.memory import SavedTensorLedger


def check_checkpoint_gradients(exercise, student, kind, *, width, batch, seed, p=0.3,
                               dtype=torch.float64, device=None, forbid=FORBIDDEN):
    """`student(block, *args)` gives the plain run's outputs, input gradients and parameter
    gradients, with dropout in the block (the recompute must replay the RNG)."""
    device = device or get_device()
    block = TestBlock(width, seed=seed, p=p, kind=kind, device=device, dtype=dtype)
    args = block_inputs(kind, batch, width, seed=seed + 100, device=device, dtype=dtype)
    outs_ref, grads_ref, params_ref = plain_run(block, args, seed)
    shown = {"block": f"TestBlock {kind!r}: {KINDS[kind]} (width {width}, dropout p={p})",
             **{f"arg {i}": a for i, a in enumerate(args)}}

    def run_forward_backward():
        """Driver: the checkpointed block's outputs, then backward from seeded upstream gradients."""
        reset(block, args)
        outs = student_forward(exercise, student, block, args, seed)
        values = [o.detach().clone() for o in outs]
        upstream_loss(outs, seed).backward()
        return values

    with_dropout = (" (the block has dropout: if the output matches but gradients differ, does the recompute "
                    "replay the random state the forward pass started from?)") if p else ""
    try:
        values = checks.call_student(exercise, run_forward_backward, forbid=forbid)
    except GradingError as err:  # a driver has no arguments to show: say which block and inputs it ran
        raise GradingError(f"{err}\n  on input:\n{checks.describe_inputs(shown)}") from None
    checks.expect_close(exercise, tuple(values), tuple(outs_ref), inputs=shown,
                        names=[f"forward output {i}" for i in range(len(values))])
    for i, (a, expected) in enumerate(zip(leaves(args), grads_ref)):
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
    names = [f"input {i}" for i in range(len(leaves(args)))] + [f"parameter {n}" for n, _ in block.named_parameters()]
    reset(block, args)
    torch.manual_seed(seed)
    expected = torch.autograd.grad(upstream_loss(as_tuple(block(*args)), seed), [*leaves(args), *block.parameters()])
    shown = {"block": f"TestBlock {kind!r}: {KINDS[kind]} (width {width}, dropout p={p})",
             **{f"arg {i}": a for i, a in enumerate(args)},
             "call": "torch.autograd.grad(loss, [inputs that need grad, *block.parameters()], allow_unused=True)"}

    def run_autograd_grad():
        """Driver: the checkpointed block, then torch.autograd.grad for its inputs and parameters; what it raised
        (its type and message) or returned, and which parameters got a .grad on the way."""
        reset(block, args)
        outs = student_forward(exercise, student, block, args, seed)
        try:
            grads = torch.autograd.grad(upstream_loss(outs, seed), [*leaves(args), *block.parameters()],
                                        allow_unused=True)
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
            out = as_tuple(student(block, *args))[0]
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
        reset(block, args)
        out = as_tuple(student(block, *args))[0]
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
        out = apply(second, as_tuple(apply(block, *args))[0])
        as_tuple(out)[0].sum().backward()
        return torch.rand(8, device=device)

    expected = run_two_blocks(lambda b, *a: b(*a))
    got = checks.call_student(exercise, lambda: run_two_blocks(student), forbid=forbid)
    if not torch.equal(got, expected):
        raise GradingError(
            f"{exercise}: after forward and backward through two checkpointed blocks with dropout, the global "
            "random generator is not where the plain run leaves it: the next random numbers differ. Restore "
            "the saved RNG state for the recompute only, and put the generator back afterwards "
            "(torch.random.fork_rng does both)")
