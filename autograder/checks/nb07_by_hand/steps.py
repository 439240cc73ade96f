"""`batchnorm_steps_backward(dout, cache, gamma)`: BatchNorm's backward written line by line, one
gradient per intermediate of `batchnorm_steps` (the course's forward, one operation per line), each
compared with autograd's gradient of that very intermediate, in the order backward reaches them. The
first wrong line is named ("dvar is wrong: ..."), with what is missing from it where that can be told:
a path of a value used twice (found by autograd through the forward with the other use detached), a
constant factor (a sign, 2, N, N/(N - 1)), a sum over the batch left out, eps.

Why the forward lives here: in trusted grading the check recomputes the cache it hands to the answer,
so the lines the learner differentiates must be the course's, not a cell a submission could redefine.
"""
import torch

from autograder import checks
from autograder.checks import GradingError, battery
from autograder.checks.nb07_by_hand.batchnorm import batchnorm_case
from autograder.checks.nb07_by_hand.calls import guarded, stressed_case
from autograder.checks.nb07_by_hand.model import EPS
from autograder.checks.nb07_by_hand.verdicts import CLOSE, autograd_grads, eps_text, form_problem, matches, typed_eps

# The gradients the answer returns, in the order backward reaches them, and the value each one is of.
STEP_GRADS = ("dbeta", "dgamma", "dx_hat", "drstd", "dvar", "dsq", "dc", "dmean", "dx")
_OF = {"dbeta": "beta", "dgamma": "gamma", "dx_hat": "x_hat", "drstd": "rstd", "dvar": "var", "dsq": "sq", "dc": "c",
       "dmean": "mean", "dx": "x"}


def batchnorm_steps(x, gamma, beta, eps=EPS):
    """Training-mode BatchNorm over the batch (dim 0) of an (N, C) input, one operation per line.
    Returns (y, cache): the cache holds every intermediate, which the backward pass reads."""
    mean = x.mean(0)              # (C,)    each column's mean over the batch
    c = x - mean                  # (N, C)  the centred values
    sq = c ** 2                   # (N, C)
    var = sq.mean(0)              # (C,)    the biased variance: divided by N
    rstd = (var + eps) ** -0.5    # (C,)    one over the standard deviation
    x_hat = c * rstd              # (N, C)  each column: mean 0, variance just under 1
    y = gamma * x_hat + beta      # (N, C)
    return y, {"x": x, "mean": mean, "c": c, "sq": sq, "var": var, "rstd": rstd, "x_hat": x_hat}


NO_EPS_ARGUMENT = ("eps is not an argument of batchnorm_steps_backward: batchnorm_steps made the cache's rstd = "
                   "(var + eps) ** -0.5 with the layer's eps, and the tests use several; every line can be written "
                   "from the cache")

steps_case = batchnorm_case  # the same inputs as the fused batchnorm_backward's: {dout, x, gamma, eps}


def reference_steps(dout, x, gamma, eps=EPS):
    """{dbeta, ..., dx}: autograd's gradient of each intermediate of `batchnorm_steps`, all paths added."""
    leaves = [t.detach().clone().requires_grad_() for t in (x, gamma, torch.zeros_like(gamma))]
    with torch.enable_grad():
        y, cache = batchnorm_steps(*leaves, eps)
        values = {"x": leaves[0], "gamma": leaves[1], "beta": leaves[2], **cache}
        return dict(zip(STEP_GRADS, autograd_grads(y, [values[_OF[name]] for name in STEP_GRADS], dout)))


def _one_path(case, line, cut):
    """Autograd's gradient of `line` ("dc" or "dx") along one path alone: `batchnorm_steps`'s lines with
    one use detached, "sq" (c reaches y only through x_hat), "x_hat" (only through sq), "mean" (x only
    through c) or "c" (x only through mean)."""
    x, gamma = (t.detach().clone().requires_grad_() for t in (case["x"], case["gamma"]))
    with torch.enable_grad():
        mean = (x.detach() if cut == "mean" else x).mean(0)
        c = (x.detach() if cut == "c" else x) - mean
        rstd = ((c.detach() if cut == "sq" else c) ** 2).mean(0).add(case["eps"]) ** -0.5
        y = gamma * (c.detach() if cut == "x_hat" else c) * rstd
        return autograd_grads(y, [c if line == "dc" else x], case["dout"])[0]


def course_cache(x, gamma, eps=EPS):
    """The cache `batchnorm_steps` returns for `x` (detached): what the answer is given."""
    with torch.no_grad():
        return batchnorm_steps(x, gamma, torch.zeros_like(gamma), eps)[1]


# What a constant ratio between a line and the reference says (the ratio, then the words).
def _factors(n):
    found = [(-1.0, "its sign is flipped"), (2.0, "it is 2 times too large"), (0.5, "it is half the right value"),
             (-2.0, "it is -2 times the right value: a sign and a factor 2"),
             (-0.5, "it is -1/2 times the right value: a sign and a factor 2")]
    if n > 1:
        found += [(float(n), f"it is N = {n} times too large: a mean divides by N, and so does its backward"),
                  (1.0 / n, f"it is N = {n} times too small: a sum over the batch is not divided by N"),
                  (n / (n - 1), "it is N/(N - 1) times too large: the forward divides by N, not N - 1")]
    return found


_PATHS = {  # line: (the value, its two readers, and the cut that keeps each reader's path alone)
    "dc": ("c", ("x_hat", "sq"), ("sq", "x_hat")),
    "dx": ("x", ("c", "mean"), ("mean", "c")),
}


def _path_hint(line, got, case):
    """What a line with two readers misses: one path, a path with the wrong sign, or the mean's path N
    times too large; '' if none of these explains `got`."""
    value, readers, cuts = _PATHS[line]
    first, second = (_one_path(case, line, cut) for cut in cuts)
    both = f"{value} is read by {readers[0]} and by {readers[1]}, and the gradients of both uses add up"
    n = case["x"].shape[0]
    found = [(first, f"{line} holds only the path through {readers[0]}: {both}"),
             (second, f"{line} holds only the path through {readers[1]}: {both}"),
             (first - second, f"the path through {readers[1]} has the wrong sign: {both}"),
             (second - first, f"the path through {readers[0]} has the wrong sign: {both}")]
    if line == "dx" and n > 1:
        found.append((first + n * second, f"the path through mean is N = {n} times too large: the mean divides by N, "
                                          "and so does its backward"))
    return next((words for expected, words in found if matches(got, expected)), "")


_SHAPES = {  # a gradient of a per-column value returned per entry, or the other way round
    "drstd": "rstd is one number per column, used by all N rows of x_hat: add up the N rows' contributions (a sum over "
          "the batch, dim 0)",
    "dvar": "var is one number per column: its gradient has shape (C,)",
    "dmean": "mean is one number per column, subtracted from all N rows: add up the N rows' contributions (a sum "
             "over the batch, dim 0)",
    "dsq": "sq has one entry per row and column, and each reaches var: dsq has sq's shape (N, C)",
    "dgamma": "gamma and beta have one value per column: sum over the batch (dim 0)",
    "dbeta": "gamma and beta have one value per column: sum over the batch (dim 0)",
}


def _ratio(got, expected):
    """The constant c with got == c * expected (entries where expected is not ~0), or None."""
    if not (isinstance(got, torch.Tensor) and got.shape == expected.shape and got.device == expected.device):
        return None
    got, expected = got.double(), expected.double()
    big = expected.abs() > 1e-6 * float(expected.abs().max())
    if not big.any():
        return None
    ratios = got[big] / expected[big]
    value = float(ratios.median())
    return value if torch.allclose(ratios, torch.full_like(ratios, value), **CLOSE) else None


def _eps_hint(got, expected, case):
    """What a dvar computed with another eps than the case's says: eps written in as a number (Karpathy's
    lecture writes `(var + 1e-5) ** -1.5`), or left out; '' where neither explains `got`."""
    var = case["x"].double().var(0, unbiased=False)
    eps = typed_eps(got, case, lambda eps: -0.5 * (var + eps) ** -1.5 * expected["drstd"].double())
    if eps is None:
        return ""
    if eps == 0:
        return ("dvar leaves eps out: rstd = (var + eps) ** -0.5 holds eps, and so does its derivative; eps is not "
                "an argument, but the cache's rstd was made with it")
    return (f"your answer uses eps = {eps_text(eps)} where the layer's eps is {eps_text(case['eps'])}: eps is not "
            "an argument, and the tests build the cache with several; the cache's rstd = (var + eps) ** -0.5 was "
            "made with the layer's own, so write dvar without a number for eps")


def _line_hint(line, got, expected, case):
    """What is missing from `line` (its form right, its values wrong), or ''."""
    found = _eps_hint(got, expected, case) if line == "dvar" else ""
    if found:
        return found
    if line == "dx_hat" and matches(got, case["dout"]):
        return "dx_hat lacks the factor gamma: y = gamma * x_hat + beta"
    if line == "dbeta" and matches(got, expected["dgamma"]) or line == "dgamma" and matches(got, expected["dbeta"]):
        return "dgamma and dbeta are swapped: beta is added to every row, gamma multiplies x_hat"
    found = _path_hint(line, got, case) if line in _PATHS else ""
    if found:
        return found
    ratio = _ratio(got, expected[line])
    for factor, words in _factors(case["x"].shape[0]) if ratio is not None else ():
        if abs(ratio - factor) <= 1e-6 * abs(factor):
            return words
    if not torch.isfinite(got).all() and torch.isfinite(expected[line]).all():
        n = case["x"].shape[0]
        return (f"{line} holds NaN or inf where autograd's is finite" + (
            ": in a batch of one, a division by N - 1 divides by 0; the forward divides by N, and every line is "
            "defined for N = 1"
            if n == 1 else ": look for a division by zero"))
    if got.dim() and got.shape[-1] == case["x"].shape[1]:
        wrong = ~torch.isclose(got.double(), expected[line].double(), rtol=1e-3, atol=0.0)  # far off, not round-off
        wrong = wrong.reshape(-1, got.shape[-1]).any(0)
        small = case["x"].var(0, unbiased=False) < 100 * case["eps"]
        if wrong.any() and bool(small[wrong].all()) and not bool(small.all()):  # some, not every, column
            return (f"only the columns whose variance is near eps ({wrong.nonzero().flatten().tolist()}) are wrong: "
                    "rstd = (var + eps) ** -0.5 holds eps, and so does its derivative")
        if not wrong.any():
            return ("every entry is within 0.1% of autograd's but not within round-off: a small systematic "
                    "difference, such as eps left out or in another place (rstd = (var + eps) ** -0.5 holds it)")
    return ""


def _wrong_line(exercise, line, problem, right, hint, shown, details=""):
    """Fail naming `line` and what is wrong with it, and which lines before it are right."""
    before = (f"{', '.join(right)} {'is' if len(right) == 1 else 'are'} right, so the slip is in the line that "
              f"computes {line}" if right else f"{line} is the first line of the backward pass")
    # the mistake before the inputs and values: class grading keeps a message's first 500 characters
    checks.fail(exercise, "\n".join(part for part in (f"{line} is wrong: {problem}", f"  hint: {hint}" if hint else "",
                                                      f"  ({before})") if part), shown, details)


def _check_lines(exercise, got, expected, case, shown, tolerance, hints):
    """Each line's form, then its values, in backward order: the first wrong line is named."""
    if not isinstance(got, dict):
        checks.fail(exercise, "should return a dict {name: gradient} with the keys " + ", ".join(STEP_GRADS)
                    + ", got " + checks.describe(got), shown)
    missing = [name for name in STEP_GRADS if name not in got]
    if missing:
        checks.fail(exercise, f"no {', '.join(missing)} in the dict it returned: return one gradient per line, with "
                              f"the keys {', '.join(STEP_GRADS)}", shown)
    for k, line in enumerate(STEP_GRADS):
        problem = form_problem(got[line], expected[line])
        if problem:
            hint = _SHAPES.get(line, "") if hints and problem.startswith("has shape") else ""
            _wrong_line(exercise, line, f"it {problem}", STEP_GRADS[:k], hint, shown)
        try:
            checks.expect_close(exercise, got[line], expected[line], inputs=None, names=[line], **tolerance(line))
        except GradingError as err:
            details = str(err).split("\n", 1)[1] if "\n" in str(err) else ""
            hint = _line_hint(line, got[line], expected, case) if hints else ""
            _wrong_line(exercise, line, f"its values differ from autograd's gradient of {_OF[line]}", STEP_GRADS[:k],
                        hint, shown, details)


def check_batchnorm_steps(exercise, fn, cases, stress=None, what="dout"):
    """`fn(dout, cache, gamma)` returns {dbeta, dgamma, dx_hat, drstd, dvar, dsq, dc, dmean, dx}: each the
    gradient of the loss with respect to that intermediate of `batchnorm_steps`, all paths added, equal
    to autograd's; checked line by line in backward order, the first wrong one named.

    A float32 case is compared with autograd in float64 from the same values, each line within 1e-4
    of its largest entry (float32's round-off passes; a line computed in another dtype is named by its
    dtype). `stress` "non-contiguous" or "expanded": `dout` reaches the answer laid out so."""
    for case in cases:
        case, driver = stressed_case(case, stress, what)
        shown = {"dout": case["dout"], "x": case["x"], "gamma": case["gamma"], "eps": case["eps"]}
        cache = course_cache(case["x"], case["gamma"], case["eps"])
        if case["x"].dtype == torch.float64:
            expected = reference_steps(*case.values())

            def tolerance(line):
                return {}
        else:
            reference = reference_steps(*(v.double() if torch.is_tensor(v) else v for v in case.values()))
            expected = {name: g.to(case["x"].dtype) for name, g in reference.items()}

            def tolerance(line, reference=reference):
                return {"rtol": 1e-4, "atol": 1e-4 * float(reference[line].abs().max())}
        with battery.stressed(exercise, stress, what):
            try:
                got = guarded(exercise, fn, [case["dout"], cache, case["gamma"]], shown, driver=driver)
            except GradingError as err:
                if "name 'eps' is not defined" not in str(err).split("\n", 1)[0]:
                    raise
                raise GradingError(f"{err}\n  hint: {NO_EPS_ARGUMENT}") from None
            _check_lines(exercise, got, expected, case, shown, tolerance, hints=stress is None)
