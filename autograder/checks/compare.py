"""Compare a student's result with a PyTorch reference and say exactly what differs.

Hidden tests call these helpers instead of bare ``assert``s: every failure names the exercise,
the input, the expected and the received value, and the largest errors. Nothing here runs
student code (see `autograder.checks.student_calls`) or holds an answer.
"""
import torch

# (rtol, atol) by dtype: torch.testing's defaults, written out so grading does not depend on them.
TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
}
# (rtol, atol) for float results that reach the same numbers by another path (another order of sums, batched or
# fused kernels, chunks): they differ in the last bits, and every wrong answer the checks catch is off by far more.
REORDERED_TOLERANCES = {torch.float64: (1e-9, 1e-10), torch.float32: (1e-4, 1e-5)}
SHOWN_ELEMENTS = 12


class GradingError(AssertionError):
    """A failed check whose message tells the learner what to fix."""


def describe(value) -> str:
    """A short, readable description of an input or output."""
    if isinstance(value, torch.Tensor):
        head = f"tensor(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device})"
        if value.numel() <= SHOWN_ELEMENTS:
            return f"{head} = {value.detach().cpu().tolist()}"
        return head
    if callable(value):
        return getattr(value, "__qualname__", None) or repr(value)
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def capped(text, limit: int) -> str:
    """`text` cut to at most `limit` characters, the marker included, saying how many were cut: a
    message from student code can be any length, and wherever it is sent or stored it must stay
    small. Capping again changes nothing (a capped text fits its limit), so a count is never the
    marker's own length."""
    text = str(text)
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(f"… [{len(text):,} more characters]"))  # the longest the marker can be
    return f"{text[:keep]}… [{len(text) - keep:,} more characters]"


def describe_inputs(inputs) -> str:
    if not inputs:
        return ""
    return "\n".join(f"    {name} = {describe(value)}" for name, value in inputs.items())


def fail(exercise, what, inputs=None, details=""):
    """Raise a GradingError that names the exercise, what was wrong and the input it happened on."""
    message = f"{exercise}: {what}"
    if inputs:
        message += f"\n  on input:\n{describe_inputs(inputs)}"
    if details:
        message += "\n" + details
    raise GradingError(message)


def with_inputs(error: GradingError, inputs) -> GradingError:
    """`error` with the input it happened on, where its message shows none: a call whose arguments the
    check's own closure holds (``call_student(exercise, run)``) fails without them, and a learner whose
    function raised needs to see what it raised on. An unimplemented answer needs no input."""
    text = str(error)
    if not inputs or "\n  on input:\n" in text or "not implemented yet" in text.split("\n", 1)[0]:
        return error
    first, _, rest = text.partition("\n")
    return GradingError(f"{first}\n  on input:\n{describe_inputs(inputs)}" + (f"\n{rest}" if rest else ""))


def check_meta(exercise, name, got, expected, inputs):
    """Fail unless `got` is a tensor of `expected`'s shape, dtype and device."""
    if not isinstance(got, torch.Tensor):
        fail(exercise, f"{name} should be a torch.Tensor, got {type(got).__name__}: {describe(got)}", inputs)
    if got.shape != expected.shape:
        fail(exercise, f"{name} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}", inputs)
    if got.dtype != expected.dtype:
        fail(exercise, f"{name} has dtype {got.dtype}, expected {expected.dtype}", inputs)
    if got.device != expected.device:
        fail(exercise, f"{name} is on device {got.device}, expected {expected.device}", inputs)


def _non_finite_words(got_d, exp_d, bad) -> list:
    """What the wrong elements that are NaN or inf on one side say: how many, and the first, by index."""
    nan_got, nan_exp, inf_got = torch.isnan(got_d), torch.isnan(exp_d), torch.isinf(got_d)
    found = []
    for where, what in ((nan_got & ~nan_exp, "NaN where the reference is a number"),
                        (nan_exp & ~nan_got, "a number where the reference is NaN"),
                        (bad & inf_got & ~nan_exp, "an infinity where the reference holds another value")):
        if where.any():
            count, first = int(where.sum()), tuple(int(i) for i in where.nonzero()[0])
            found.append(f"{what}: {count} element{'s' if count > 1 else ''}, the first at index {first}")
    return found


def _check_values(exercise, name, got, expected, inputs, rtol, atol, dtype=None):
    got_d, exp_d = got.detach().double(), expected.detach().double()
    nan_got, nan_exp = torch.isnan(got_d), torch.isnan(exp_d)
    error = (got_d - exp_d).abs()
    bad = (error > atol + rtol * exp_d.abs()) | (nan_got != nan_exp)
    bad &= ~(nan_got & nan_exp)
    bad |= torch.isinf(got_d) & (got_d != exp_d)
    if not bad.any():
        return
    first = tuple(int(i) for i in bad.nonzero()[0])
    off = bad & torch.isfinite(got_d) & torch.isfinite(exp_d)  # differ as numbers: the errors are measured there
    non_finite = _non_finite_words(got_d, exp_d, bad)
    allowed = f"allowed: atol={atol:g}, rtol={rtol:g} for {dtype or expected.dtype}"
    lines = [f"  first mismatch at index {first}: expected {exp_d[first].item():.6g}, got {got_d[first].item():.6g}"]
    count, numbers = f"  {int(bad.sum())} of {bad.numel()} elements differ", ""
    if off.any():
        relative = off & (exp_d != 0)  # an error relative to an exact 0 says nothing
        max_rel = f"{(error / exp_d.abs())[relative].max().item():.3g}" if relative.any() else "n/a"
        numbers = f"max abs error {error[off].max().item():.3g}, max rel error {max_rel} ({allowed})"
    if not non_finite:  # every wrong element is a number
        lines.append(f"{count}; {numbers}")
    else:  # a NaN or an infinity has no error to measure: say where it is, and measure the rest
        lines += [f"{count}:", *(f"    {words}" for words in non_finite)]
        off_count = int(off.sum())
        if off_count:
            lines.append(f"    {off_count} finite element{'s' if off_count > 1 else ''} off: {numbers}")
        elif int(bad.sum()) < bad.numel():
            lines.append(f"    every other element is within tolerance ({allowed})")
    details = "\n".join(lines)
    if nan_got.any() and not nan_exp.any():
        details += ("\n  your result contains NaN where the reference has none: look for inf / inf, inf - inf or "
                    "0 * inf in an intermediate (exp of a large number overflows to inf)")
    if expected.numel() <= SHOWN_ELEMENTS:
        details += f"\n  expected: {exp_d.cpu().tolist()}\n  got:      {got_d.cpu().tolist()}"
    fail(exercise, f"wrong values in {name}", inputs, details)


def expect_close(exercise, got, expected, *, inputs=None, names=None, rtol=None, atol=None, dtype=None):
    """Check type, shape, dtype and device, then values with tolerances chosen by dtype.

    `expected` is a tensor or a tuple of tensors; `names` labels the parts of a tuple. `dtype`: the dtype the
    answer computed in, which the message names beside the tolerance, where the caller compares it in another
    (a float32 answer cast to float64 to meet a float64 reference); by default `expected`'s.
    """
    if isinstance(expected, torch.Tensor):
        parts_got, parts_exp, names = [got], [expected], names or ["the result"]
    else:
        if not isinstance(got, (tuple, list)):
            fail(exercise, f"should return a tuple of {len(expected)} tensors, got {describe(got)}", inputs)
        if len(got) != len(expected):
            fail(exercise, f"should return {len(expected)} values, got {len(got)}", inputs)
        parts_got, parts_exp = list(got), list(expected)
        names = names or [f"output {i}" for i in range(len(expected))]
    for name, g, e in zip(names, parts_got, parts_exp):
        check_meta(exercise, name, g, e, inputs)
        default_rtol, default_atol = TOLERANCES.get(e.dtype, (0.0, 0.0))
        _check_values(exercise, name, g, e, inputs,
                      default_rtol if rtol is None else rtol, default_atol if atol is None else atol, dtype)
