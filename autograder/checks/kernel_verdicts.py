"""What a guarded call's record (`kernel_guard.KernelRun`) says about the learner's kernel, in their terms.

The order is the order of severity: a write outside a tensor first (on a GPU it corrupts another
tensor or crashes the process), then maths outside the kernel (torch's, then NumPy's or Python's, then a
tensor no operation the checks saw made), the number of launches, two programs storing to one element,
elements the kernel never wrote or computed from unset memory, NaN from masked-off lanes or read from
outside an input, and last the values themselves.
"""
import functools

import torch

from autograder import checks
from autograder.checks.compare import REORDERED_TOLERANCES, check_meta, fail
from autograder.checks.kernel_guard import KernelRun, masked_lanes
from autograder.checks.kernel_layouts import run_laid_out

BLOCK_LIMIT = 4096  # the most elements the notebook lets one block hold: rows wider than that loop

ALLOWED_TORCH = ("torch may only allocate (torch.empty_like, torch.empty, torch.zeros), view (.view, .reshape) "
                 "and copy (.contiguous()); every computation runs in your Triton kernel")


def call_guarded(exercise, fn, inputs, layouts=None):
    """`fn(*inputs.values())` inside the guard, each input in its layout (`layouts`: {name: layout}; the
    others contiguous), where `fn` lives (the kernel, in trusted grading)."""
    names = tuple(inputs)
    driver = functools.partial(run_laid_out, fn, names=names, layouts=dict(layouts or {}))
    run = checks.call_student(exercise, driver, *inputs.values(), names=list(names))
    if not isinstance(run, KernelRun):
        fail(exercise, f"no readable answer came back from your notebook: {checks.describe(run)}")
    return run


def where_written(name) -> str:
    if name.startswith("a tensor your code allocated"):
        return (f"your kernel wrote outside {name}: a store without a mask (mask=offsets < n) writes a whole block, "
                "past the end of a tensor whose size is not a multiple of BLOCK. Here the memory around it is "
                "padding the checks put there; in a real program the write lands on other data or crashes")
    return (f"your kernel wrote outside the input {name} (before, after or between its elements), or into its "
            "gaps: a kernel stores only into the output it allocated, and only under a mask")


def check_rules(exercise, run, shown, *, launches, why):
    """The kernel-side rules: nothing written outside a tensor, inputs unchanged, no torch maths
    outside the kernel, a number of launches in `launches` (min, max); `why` says why that many."""
    if run.wrote_outside:
        fail(exercise, where_written(run.wrote_outside[0]), shown)
    if run.changed:
        fail(exercise, f"changed the input {run.changed[0]} in place: a kernel reads its inputs and stores into "
                       "the output your function allocated", shown)
    if run.refused is not None:
        fail(exercise, f"computes with torch ({run.refused}) outside your kernel: in {exercise}, {ALLOWED_TORCH}",
             shown)
    if run.outside is not None:
        fail(exercise, f"{run.outside} outside your kernel: what NumPy or Python computes there is maths outside the "
                       f"kernel as much as torch's; in {exercise}, {ALLOWED_TORCH}", shown)
    if run.unseen is not None:
        fail(exercise, f"{run.unseen} was made by no torch operation of the call the checks saw (it is no input, and "
                       "no tensor the call allocated, viewed or copied): a tensor from NumPy (torch.from_numpy, "
                       "torch.from_dlpack), one made before the call, or one computed while the checks' watch of "
                       f"torch was switched off (torch._C._DisableTorchDispatch). In {exercise}, {ALLOWED_TORCH}",
             shown)
    if run.largest_block is not None and run.largest_block[1] > BLOCK_LIMIT:
        name, value = run.largest_block
        fail(exercise, f"launched a kernel with {name} = {value}: a block holds at most {BLOCK_LIMIT} elements here "
                       "(the course's rule, not Triton's, which allows 1,048,576: a block lives in registers, and a "
                       "larger one leaves fewer programs running at once on each streaming multiprocessor, or spills "
                       "to slower memory). "
                       "Loop over the elements a block at a time inside the program, or launch more programs", shown)
    low, high = launches
    if run.launches < low:
        fail(exercise, "launched no Triton kernel: compute in a @triton.jit kernel of yours, launched as "
                       "kernel[grid](...)", shown)
    if run.launches > high:
        fail(exercise, f"launched {run.launches} Triton kernels; {why}", shown)
    if run.race is not None:
        fail(exercise, f"{run.race} with tl.store: on a GPU the programs of a launch run at the same time, so which "
                       "store lands last changes from run to run, and where programs load, add and store one element, "
                       "updates are lost (Triton's interpreter runs the programs one after another, which hides "
                       "this; these checks look for it)", shown,
             "  give each program elements of its own (offsets from tl.program_id(0)); to add every program's share "
             "into one result, use tl.atomic_add into a zeroed buffer, or store partial sums, one row per program, "
             "and add them up in a second kernel")


def from_unset_memory(exercise, run, name, shown, count=None):
    """Fail: `name` was computed from memory torch.empty left unset (a buffer read before anything stored)."""
    read = f"{run.read_unset}" if run.read_unset is not None else "memory torch.empty allocated"
    some = f"{count[0]} of {count[1]} elements of {name}, the first at flat index {count[2]}," if count else name
    fail(exercise, f"{some} came from memory that was never initialised: your kernel read {read} before anything "
                   "was stored there", shown,
         "  torch.empty does not set its memory (on a GPU it holds whatever was there before; here the checks fill "
         "it with NaN): a buffer that kernels load and add into (partial sums, an atomic_add target) starts from "
         "torch.zeros")


def check_tensor(exercise, run, position, got, expected, shown, name, close=None):
    """One returned tensor: its type, shape, dtype and device, then elements the kernel never wrote,
    NaN from memory outside an input, and its values (within `close`, {rtol, atol}, where given: a
    notebook's own tolerance; else REORDERED_TOLERANCES)."""
    check_meta(exercise, name, got, expected, shown)
    left = run.unwritten.get(position)
    if left:
        count, total, first = left
        fail(exercise, f"{count} of {total} elements of {name} were never written by your kernel (they still hold "
                       f"what torch.empty left there), the first at flat index {first}", shown,
             "  does every program handle its own block (offsets from tl.program_id(0) * BLOCK), and does the grid "
             "cover every element (triton.cdiv(n, BLOCK) programs, or one per row)?")
    if run.from_unset.get(position):
        from_unset_memory(exercise, run, name, shown, run.from_unset[position])
    nan = torch.isnan(got) & ~torch.isnan(expected)
    if nan.any():
        first = int(nan.flatten().nonzero()[0])
        if run.read_unset is not None:
            from_unset_memory(exercise, run, name, shown)
        masked = f"a tl.load with mask= and no other= (in {', '.join(run.without_other)})"
        if (nan & masked_lanes(got)).any():
            fail(exercise, f"{name} has NaN where PyTorch has none, first at flat index {first}: it comes from the "
                           f"masked-off lanes of {masked}, which your kernel used (a sum over a block adds every "
                           "lane)", shown,
                 "  a masked-off lane of a load without other= is undefined: on a GPU it holds whatever the "
                 "registers held, Triton's interpreter gives 0.0 and these checks give NaN. Pass the value that "
                 "leaves the result unchanged: other=0.0 for a sum")
        fail(exercise, f"{name} has NaN where PyTorch has none, first at flat index {first}", shown,
             "  while the checks run, the memory around and between your inputs' elements holds NaN: a NaN here "
             "usually means your kernel loaded outside an input (a tl.load without mask=offsets < n, a mask that "
             "lets lanes past the end through, or offsets that ignore a strided input's strides)"
             + (f", or used the masked-off lanes of {masked}" if run.without_other else "")
             + "; otherwise look for exp of a large number (inf / inf)")
    rtol, atol = REORDERED_TOLERANCES.get(expected.dtype, (None, None))
    close = close or {"rtol": rtol, "atol": atol}
    checks.expect_close(exercise, got, expected, inputs=shown, names=[name], **close)


def launches_for(t, count):
    """(min, max) launches for an input: `count`, or at most that many for an empty one."""
    return (0, count) if t.numel() == 0 else (count, count)
