"""The checks of `saved_bytes` and `estimate_activation_bytes`: what backward keeps, counted without hooks.

`saved_bytes` is checked against a count that uses no hooks: the finished graph walked from its outputs,
every node's saved variables read. That walk is a correct `saved_bytes` by another route, so it is the answer
key's (`graph_saved_tensors` in `solutions/06_checkpointing/answer_key.py`), passed in by the hidden tests, and
not installed with this package; a visible test states its count instead. The course's own counters (the calls
its rule in `rules.BY_HAND` watches) are what the exercise rebuilds, so the learner's answer may not call them.
"""
import math
import numbers

import torch

from autograder import checks
from autograder.checks import GradingError
from autograder.checks.nb06_checkpointing.rules import BY_HAND
from autograder.checks.rules import guards_of


# --- counting what backward keeps ------------------------------------------------------------------
def storage_key(t):
    return (t.device, t.untyped_storage().data_ptr())


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (a view counts its whole storage, once)."""
    sizes = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            sizes[storage_key(t)] = t.untyped_storage().nbytes()
    return sum(sizes.values())


def describe_saved(walked, limit=12) -> str:
    """What the graph keeps, one line per saved tensor of `walked` ([(node name, attribute, tensor)], as the
    answer key's `graph_saved_tensors` lists them), for feedback messages."""
    lines, counted = [], set()
    for node, name, t in walked[:limit]:
        key = storage_key(t)
        note = "" if key not in counted else " (same storage as above: not counted again)"
        counted.add(key)
        lines.append(f"    {node} keeps {name}: shape {tuple(t.shape)}, {t.dtype}, "
                     f"storage {t.untyped_storage().nbytes()} bytes{note}")
    return "\n".join(lines)


# The course's own counters of saved bytes: saved_bytes is where the learner builds one, so its
# answer may not call them (the notebooks use them everywhere else).


def check_saved_bytes(exercise, student, fn, args, label, expected=None, graph=None):
    """`student(fn, *args)` must equal the bytes of the distinct storages autograd saves while `fn(*args)`
    runs: `expected` where a test states it, else counted here from what `graph` (the answer key's
    `graph_saved_tensors`) finds in the graph; without calling the course's own counters (its rule's guards)."""
    if expected is None and graph is None:
        raise ValueError("check_saved_bytes needs expected= or graph= (the answer key's graph_saved_tensors)")
    inputs = {"fn": label, **{f"input {i}": a for i, a in enumerate(args)}}
    got = checks.call_student(exercise, lambda: student(fn, *args), time_limit=20, **guards_of(BY_HAND, exercise))
    reference_out = fn(*args)
    walked = graph(reference_out) if graph is not None else None
    expected = storage_bytes(t for _, _, t in walked) if expected is None else expected
    valid = isinstance(got, numbers.Real) and not isinstance(got, bool) and float(got).is_integer()
    if not valid:
        raise GradingError(f"{exercise}: should return a whole number of bytes (an int), got "
                           f"{checks.describe(got)}\n  on input:\n{checks.describe_inputs(inputs)}")
    if int(got) != expected:
        hint = ""
        if expected and int(got) % expected == 0 and int(got) > expected:
            hint = ("\n  a multiple of the right count: is a storage saved by two ops, or by one op twice, "
                    "counted more than once?")
        kept = "" if walked is None else f"\n  what the graph keeps:\n{describe_saved(walked) or '    nothing'}"
        raise GradingError(
            f"{exercise}: counted {int(got)} bytes for {label}; autograd saves {expected} bytes "
            f"(distinct storages, each storage's full nbytes)\n  on input:\n{checks.describe_inputs(inputs)}"
            f"{kept}{hint}")


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
