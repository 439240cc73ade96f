"""underflow_fraction: the share of non-zero entries that a cast flushes to 0, and its check.

The expected share comes from the test: stated in a visible test, or computed by the course's
answer key in hidden tests (`solutions/05_loss_scaling/answer_key.py`, passed in as `reference`),
since counting what a cast flushes to 0 is the exercise. A wrong answer is told how the entries
split: zeros left out, entries that flush to 0 (from the expected share), entries that survive as
subnormals. Seeded inputs spread over many decades (`log_uniform`) and the values around a
format's edges (`edge_values`) are the test data, also as a strided view (`layout`): a non-contiguous
`t`, or a row expanded to several without a copy, built by the driver `run_on_layout` where the
learner's code runs, since a copy made on the way (nbgrader's private copy, trusted grading's
transfer) would be contiguous.
"""
import math

import torch

from autograder import checks
from autograder.checks import battery
from autograder.learner.device import get_device

LAYOUTS = ("contiguous", "non-contiguous", "expanded")
EXPANDED_ROWS = 5  # an expanded t repeats its one row this many times


def smallest_subnormal(dtype) -> float:
    """The smallest positive number of a floating-point dtype: smallest normal times eps."""
    info = torch.finfo(dtype)
    return info.tiny * info.eps


def _explain_underflow(t, dtype, expected) -> str:
    """How the entries of t split, the count that becomes 0 taken from the expected share."""
    nonzero = int((t != 0).sum())
    cast = t.to(dtype)
    subnormal = int(((cast != 0) & (cast.abs() < torch.finfo(dtype).tiny)).sum())
    text = (f"  the input holds {t.numel()} entries: {t.numel() - nonzero} zero (left out), "
            f"{nonzero} non-zero; cast to {dtype}, {round(expected * nonzero)} of the non-zero ones become exactly 0 "
            f"and {subnormal} become subnormal (not 0, so they do not count)\n"
            f"  {dtype}: smallest subnormal {smallest_subnormal(dtype):.4g}, a value of magnitude up to half "
            f"of it ({smallest_subnormal(dtype) / 2:.4g}) rounds to 0")
    if 0 < t.numel() <= 24:
        pairs = zip(t.flatten().tolist(), cast.flatten().tolist())
        text += "\n  value -> cast: " + ", ".join(f"{v:.6g} -> {c:.6g}" for v, c in pairs)
    return text


def laid_out(t, layout):
    """`t`'s values as `layout` says: itself, a non-contiguous view with gaps (`battery.non_contiguous`),
    or its one row (shape (1, ...)) expanded to EXPANDED_ROWS rows that share that row's memory."""
    if layout == "non-contiguous":
        return battery.non_contiguous(t)
    if layout == "expanded":
        return battery.expanded(t, EXPANDED_ROWS)
    return t


def run_on_layout(fn, t, dtype, layout):
    """Driver: run where the learner's code runs (in trusted grading, the kernel), it calls
    fn(t laid out as `layout`, dtype); the view is made here because any copy on the way is contiguous."""
    view = laid_out(t, layout)
    return fn(view) if dtype is None else fn(view, dtype)


def check_underflow_fraction(exercise, fn, t, dtype=None, *, reference=None, expected=None, what="",
                             layout="contiguous"):
    """Call fn(t) (or fn(t, dtype)) and compare with `expected` (the share the test states) or with
    reference(t, dtype) (hidden tests: the answer key); tolerance 1e-6 on the share. With `layout`
    "non-contiguous" or "expanded" (see `laid_out`), the learner gets `t` as that strided view."""
    if (reference is None) == (expected is None):
        raise TypeError("check_underflow_fraction: give the expected share or a reference, not both")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    args = (t,) if dtype is None else (t, dtype)
    names = ["t"] if dtype is None else ["t", "dtype"]
    if layout == "contiguous":
        got = checks.call_student(exercise, fn, *args, names=names)
    else:
        got = checks.call_student(exercise, run_on_layout, fn, t, dtype, layout,
                                  names=[exercise, "t", "dtype", "layout"])
        t = laid_out(t, layout)
        what = f"{what}, {layout}" if what else layout
    dtype = torch.float16 if dtype is None else dtype
    inputs = {"t": t, "dtype": dtype} if not what else {"t": f"{what}: {checks.describe(t)}", "dtype": dtype}
    if isinstance(got, bool) or not isinstance(got, float):
        checks.fail(exercise, f"should return a Python float, got {type(got).__name__}: {checks.describe(got)}"
                               " (a 0-d tensor becomes one with .item())", inputs)
    expected = float(reference(t, dtype)) if expected is None else expected
    if not abs(got - expected) <= 1e-6:
        checks.fail(exercise, f"expected {expected:.6g}, got {got!r}", inputs, _explain_underflow(t, dtype, expected))


def log_uniform(*shape, seed, low, high, zeros=0.0, dtype=torch.float32, device=None):
    """Random signs and magnitudes spread evenly over the decades [low, high]; a share `zeros` of exact 0."""
    generator = torch.Generator().manual_seed(seed)
    exponent = math.log10(low) + (math.log10(high) - math.log10(low)) * torch.rand(shape, generator=generator,
                                                                                 dtype=torch.float64)
    sign = torch.where(torch.rand(shape, generator=generator) < 0.5, -1.0, 1.0).double()
    values = sign * 10.0 ** exponent
    values[torch.rand(shape, generator=generator) < zeros] = 0.0
    return values.to(dtype).to(device or get_device())


def edge_values(dtype=torch.float16, input_dtype=torch.float32, device=None):
    """Values around the edges of `dtype`, as a tensor of `input_dtype`: both sides of half the
    smallest subnormal, the smallest subnormal and normal, overflow, negatives and zeros."""
    s = smallest_subnormal(dtype)
    info = torch.finfo(dtype)
    values = [s, s / 2, s / 2 * (1 + 2 ** -10), s / 2 * (1 - 2 ** -10), s / 4, s * 1.5, -s / 2, -s, -s * 0.75,
              info.tiny, -info.tiny, info.tiny * 0.5, 0.0, -0.0, 0.0, 1.0, -2.5, info.max * 4]
    return torch.tensor([v for v in values if v == 0 or abs(v) <= torch.finfo(input_dtype).max],
                        dtype=input_dtype, device=device or get_device())
