"""Where right-looking code breaks: the inputs every notebook's hidden tests try, and the message
that says which of them broke an answer.

An answer can match PyTorch on friendly random inputs and still be wrong: a one-pass variance
(E[x²] - E[x]²) that loses every digit in float32 when a column's mean is large, a softmax that
overflows on large logits, a `.view` that fails on a strided gradient, a `.squeeze()` that drops
a batch of one, a formula that is 0/0 at x = 0, a backward that cannot be differentiated again, a
sum kept in float16 or bfloat16 that overflows or stops growing.
The checks of every notebook draw such inputs from here (`large_mean`, `large_logits`,
`special_points`, `non_contiguous`, `transposed`, `expanded`, `batch_of_one`) and run each one
inside `trying(exercise, stress)`, so that a failure says which input broke the answer and the
usual reason why ("fails for a non-contiguous dout: .view needs contiguous memory; use .reshape").

Nothing here holds an answer: these are inputs and messages. References stay in each check.
"""
import contextlib
import re

import torch

from autograder.checks.compare import GradingError
from autograder.learner import inputs
from autograder.learner.device import get_device

# What each stress is, as the message names it ("fails for <description>: <advice>").
STRESSES = {
    "float32-large-mean": "float32 input whose mean is about 1000 times its spread",
    "large-logits": "float32 logits as large as a few hundred",
    "special-points": "the special points of the function (0 and large |x|)",
    "batch-of-one": "a batch of one",
    "non-contiguous": "a non-contiguous {what}",
    "expanded": "an expanded {what} (a view whose rows share memory)",
    "transposed": "a transposed {what} (stored column by column)",
    "float16": "a float16 {what}",
    "bfloat16": "a bfloat16 {what}",
    "create-graph": "backward(create_graph=True)",
    "empty": "an empty {what} (no elements)",
    "width-one": "rows of width 1",
    "wide-rows": "rows wider than one block (more than 4096 columns)",
}

# (stress, pattern in the failure message, advice): the first match wins; then the stress's default.
_ADVICE = (
    ("non-contiguous", r"view size is not compatible|\.view\(|use \.reshape",
     ".view needs contiguous memory; use .reshape (or .contiguous() first)"),
    ("non-contiguous", r"NaN|loaded outside|never written",
     "a kernel that adds offsets to the data pointer reads the input as if it were contiguous: pass its strides to "
     "the kernel (x.stride(0), x.stride(1)), or call .contiguous() first (a copy, allowed outside the kernel)"),
    ("non-contiguous", r"", "the input is a strided view (a slice or a transpose of a larger tensor), as a gradient "
                           "often is: do not assume contiguous memory (.view, strides, data_ptr)"),
    ("expanded", r"in-place|more than one element of the written-to tensor",
     "an expanded tensor's rows share one memory: never write into an input in place; clone it first"),
    ("expanded", r"view size is not compatible", ".view needs contiguous memory; use .reshape"),
    ("expanded", r"", "an expanded input repeats one row without copying it (stride 0): do not assume each row "
                      "has memory of its own"),
    ("transposed", r"", "a transposed input is stored column by column: pass its own strides to a kernel, or call "
                        ".contiguous() first; .view needs contiguous memory (use .reshape)"),
    ("float16", r"has dtype", "return each result in the input's dtype: allocate it with torch.empty_like(x), or "
                              "with dtype=x.dtype"),
    ("float16", r"Expected dtype", "tl.exp, tl.sqrt and the other maths functions take float32 or float64: convert "
                                   "after loading (x.to(tl.float32)), compute in float32, and store"),
    ("float16", r"", "a half-precision accumulator: float16 holds at most 65504 (x * x is inf once |x| > 256) and "
                     "about 3 significant digits. Load in float16, convert to float32 after the load, accumulate "
                     "and compute in float32, and store the result in float16"),
    ("bfloat16", r"has dtype", "return each result in the input's dtype: allocate it with torch.empty_like(x), or "
                               "with dtype=x.dtype"),
    ("bfloat16", r"Expected dtype", "tl.exp, tl.sqrt and the other maths functions take float32 or float64: "
                                    "convert after loading (x.to(tl.float32)), compute in float32, and store"),
    ("bfloat16", r"", "a half-precision accumulator: bfloat16 keeps 8 significant bits, so a running sum stops "
                      "growing once it is 256 times what it adds (and Triton's CPU interpreter holds bfloat16 as "
                      "16-bit integers, so its bfloat16 arithmetic is wrong altogether). Load in bfloat16, convert "
                      "to float32 after the load, accumulate and compute in float32, and store the result in "
                      "bfloat16"),
    ("float32-large-mean", r"NaN|nan|inf",
     "cancellation in float32: a variance computed as E[x²] - E[x]² loses every digit when the mean is large; "
     "subtract the mean first, then square"),
    ("float32-large-mean", r"", "cancellation in float32: subtracting two large, nearly equal numbers (E[x²] and "
                                "E[x]²) leaves only round-off; subtract the mean first, then square"),
    ("large-logits", r"", "exp of a large logit overflows float32 (exp(89) is already inf): subtract each row's "
                          "largest logit before exp (the result does not change, the overflow does)"),
    ("special-points", r"OverflowError|math range error",
     "exp of a large number overflows (Python's math.exp raises OverflowError past exp(709.78), torch.exp gives inf): "
     "write the formula so that it only takes exp of numbers <= 0, or use the library's own function (math.tanh)"),
    ("special-points", r"relu|ReLU", "relu has a kink at x = 0 and no derivative there: PyTorch (and micrograd) use 0, "
                                     "so the mask is x > 0, not x >= 0"),
    ("special-points", r"", "look for 0/0, inf/inf or inf - inf at x = 0 or at large |x| (a formula that divides "
                            "by x, by sqrt(x²), or takes exp of a large number), and write it so those cancel"),
    ("batch-of-one", r"", "do not .squeeze() the batch dimension away: with a batch of one it goes too; "
                          "squeeze a named dimension (.squeeze(-1)) or reshape to (N,)"),
    ("empty", r"", "an empty tensor has no elements: its grid, triton.cdiv(0, BLOCK), has no program, and a row "
                   "count of 0 is no row; return results of the right shape (allocated with torch.empty_like) "
                   "without dividing by the element count"),
    ("width-one", r"", "a row of one element: the mean of its squares is the square itself, and only one lane of a "
                       "block may load (mask=cols < n_cols); the masked-off lanes must add 0 to a sum"),
    ("wide-rows", r"", "a row wider than one block: loop over the row inside the program, a block of columns at a "
                       "time, adding each block's partial sum, and again to write each block of the result"),
    ("create-graph", r"does not require grad|does not have a grad_fn|leaf Variable|in-place|twice|"
                     r"once_differentiable",
     "under create_graph=True the backward pass is itself recorded: update parameters under torch.no_grad(), "
     "and build gradients with differentiable operations (no .detach(), .data or @once_differentiable)"),
    ("create-graph", r"", "under create_graph=True the backward pass is itself recorded and differentiated: "
                          "every step of it must be a differentiable torch operation"),
)


def _device(device):
    return torch.device(device) if device is not None else get_device()


def large_mean(*shape, seed, mean=1e3, spread=1.0, dtype=torch.float32, device=None):
    """Random values of `shape` around `mean` with standard deviation `spread` (float32 by default):
    a column of such values has a variance that E[x²] - E[x]² cannot compute in float32."""
    noise = inputs.randn(*shape, seed=seed, dtype=torch.float64, device="cpu")
    return (mean + spread * noise).to(dtype=dtype, device=_device(device))


def large_logits(*shape, seed, scale=500.0, dtype=torch.float32, device=None):
    """Random logits as large as about `scale` in magnitude, each row with one clear winner: exp of
    them overflows float32 unless the row's largest logit is subtracted first."""
    noise = inputs.randn(*shape, seed=seed, dtype=torch.float64, device="cpu")
    return (scale * noise.tanh()).to(dtype=dtype, device=_device(device))


def special_points(dtype=torch.float64, device=None, large=1e4):
    """A 1-D tensor of the points where formulas break: 0, tiny values of both signs, ±1, ±`large`."""
    points = [0.0, 1e-30, -1e-30, 1e-8, -1e-8, 1.0, -1.0, large, -large]
    return torch.tensor(points, dtype=dtype, device=_device(device))


def non_contiguous(t):
    """`t`'s values in a strided view with gaps, as a slice of a larger tensor is: every dimension
    but the first padded by one element and the last read every other element, so that no two
    dimensions can be merged (`.view(-1, D)` fails; `.reshape` copies). Same shape, dtype, device,
    values and requires_grad, as a leaf of its own."""
    if t.dim() == 0:
        return t.clone()
    *outer, last = t.shape
    padded = (*outer[:1], *(size + 1 for size in outer[1:]), 2 * last + 1)
    buffer = torch.zeros(padded, dtype=t.dtype, device=t.device)
    if t.is_floating_point():
        buffer.fill_(float("nan"))  # a read of the gaps shows up as NaN
    view = buffer[(*(slice(0, size) for size in outer), slice(0, 2 * last, 2))]
    with torch.no_grad():
        view.copy_(t)
    return view.requires_grad_(t.requires_grad)


def transposed(t):
    """`t`'s values stored column-major (a transpose's layout): same shape and values, not contiguous."""
    if t.dim() < 2:
        return non_contiguous(t)
    return t.mT.contiguous().mT


def expanded(row, n):
    """`row` (first dimension 1) repeated `n` times along dimension 0 without copying (stride 0)."""
    if row.shape[0] != 1:
        raise ValueError(f"expanded() repeats a tensor whose first dimension is 1, got shape {tuple(row.shape)}")
    return row.expand(n, *row.shape[1:])


def batch_of_one(t):
    """The first example of a batch, keeping the batch dimension: shape (1, ...)."""
    return t[:1]


def describe(stress, what="input"):
    """The stress as a message names it: "a non-contiguous dout"."""
    if stress not in STRESSES:
        raise KeyError(f"unknown stress {stress!r}; the battery has: {', '.join(STRESSES)}")
    return STRESSES[stress].format(what=what)


def advice(stress, message):
    """The usual reason `stress` breaks an answer whose failure says `message`."""
    describe(stress)
    for name, pattern, text in _ADVICE:
        if name == stress and re.search(pattern, message):
            return text
    return ""


@contextlib.contextmanager
def trying(exercise, stress, what="input", reason=None):
    """Run a check on a stressed input; a failure inside names the stress and the usual reason.

    A GradingError (a wrong value, a raised exception, a NaN) becomes
    "<exercise>: fails for <stress>: <advice>" followed by the check's own message. `reason` replaces
    the table's advice where the exercise's inputs make it wrong (a VJP given log-probabilities takes no
    exp of a logit, so "subtract the largest logit" misleads it).
    """
    what_text = describe(stress, what)
    try:
        yield
    except GradingError as err:
        message = str(err)
        if f"fails for {what_text}" in message:  # already named by an inner `trying`
            raise
        why = reason or advice(stress, message)
        raise GradingError(f"{exercise}: fails for {what_text}: {why}\n{message}") from None


def stressed(exercise, stress, what="input", reason=None):
    """`trying` for a stress, or nothing where there is none (`stress` None): the checks that take an
    optional stress run every case inside it."""
    return trying(exercise, stress, what, reason) if stress else contextlib.nullcontext()
