"""Numbers read from a learner's scalar engine, compared with PyTorch's, and shown in messages.

A learner's `.data` or `.grad` may be a float, an int, a bool, a 0-d tensor or something that is
not a number at all; a driver's answer may hold anything a kernel sent. These helpers turn both
into a float or None, never raising, and decide when a learner's number counts as PyTorch's.
"""
import math

import torch

from autograder import checks

RTOL, ATOL = checks.TOLERANCES[torch.float64]


def number(x):
    """A learner's data or grad as a float, or None if it is not a number (read in the kernel)."""
    if isinstance(x, bool) or isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, torch.Tensor) and x.numel() == 1:
        return float(x.item())
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def float_or_none(x):
    """A number from a driver's answer (None stays None; anything else is not a number)."""
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def within_float64_tolerance(got, expected):
    """Whether the learner's number `got` counts as PyTorch's float64 `expected`: within the
    course's float64 tolerances (|got - expected| <= 1e-7 + 1e-7 |expected|), NaN only where
    PyTorch has NaN; a missing number (None) never does."""
    if got is None:
        return False
    if math.isnan(expected):
        return math.isnan(got)
    return abs(got - expected) <= ATOL + RTOL * abs(expected)


def shown(x):
    """A number as a message shows it: 10 significant digits, or None."""
    return "None" if x is None else f"{x:.10g}"


def text(x, limit=200):
    """repr(x), shortened, never raising: how a learner's object is shown in a message."""
    try:
        written = repr(x)
    except Exception:  # a broken __repr__ must not hide the real problem
        written = f"<{type(x).__name__} object>"
    return written if len(written) <= limit else written[:limit - 3] + "..."


def op_of(node):
    """A node's `_op` as text ('?' when it has none)."""
    op = getattr(node, "_op", "?")
    return op if isinstance(op, str) else text(op, 60)


def describe_node(node):
    """'Value(data=..., grad=..., _op=...)' for any engine's node, never raising."""
    data, grad = getattr(node, "data", "?"), getattr(node, "grad", "?")
    return f"{type(node).__name__}(data={text(data, 60)}, grad={text(grad, 60)}, _op={op_of(node)!r})"
