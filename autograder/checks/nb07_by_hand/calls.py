"""Running an answer by hand: how a check calls the learner's function, and with what.

`guarded` calls it through `call_student` with the guards of its rule (`rules.BY_HAND`: autograd refused,
`F.batch_norm` and BatchNorm's forward watched), under
`torch.no_grad()` and with every ATen kernel whose name holds "batch_norm" or "backward" refused too
(`F.batch_norm`, `nn.BatchNorm1d`, `torch.batch_norm_update_stats`, `aten::embedding_dense_backward`,
...), however it was reached. The answer gets private copies of its arguments: nothing it does to
them reaches the caller's references.

Where right-looking code breaks (`battery`): a check given a `stress` runs its cases inside
`battery.stressed`, so that a failure names the stress. Strided and expanded arguments are
laid out by a driver (`laid_out`) where the answer runs, because a copy across the trusted boundary,
or the private copy every answer gets, would be contiguous again.

Trusted grading: the learner's function runs only inside `call_student`, through closures and drivers
that return data (tensors, dicts of tensors, lists of numbers). References and comparisons stay in
the caller.
"""
import functools

import torch

from autograder import checks
from autograder.checks import GradingError, battery
from autograder.checks.compare import with_inputs
from autograder.checks.nb07_by_hand.rules import BY_HAND
from autograder.checks.op_watch import OpWatch
from autograder.checks.rules import guards_of

FORBIDDEN_KERNELS = ("batch_norm", "backward")  # substrings of ATen op names an answer may not run


def private_copies(value):
    """A copy of the tensors in `value` (nested in dicts, lists and tuples); anything else as it is."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: private_copies(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(private_copies(v) for v in value)
    return value


def guarded(exercise, fn, args, shown, driver=None):
    """`fn(*args)` (or `driver(fn, *args)`) by hand: through `call_student` with autograd refused,
    under `torch.no_grad()` (no graph is recorded, so no node's backward can be called directly),
    `F.batch_norm` and `nn.BatchNorm1d` forbidden, and no ATen BatchNorm or backward kernel allowed,
    however reached. The answer gets private copies: nothing it does to them reaches the caller. A failure
    of the call (the answer raised, ran too long, asked autograd) names the input `shown`."""
    private = private_copies(list(args))

    def run():
        watch = OpWatch(lambda name: any(word in name for word in FORBIDDEN_KERNELS))
        with torch.no_grad(), watch:  # no graph either: a node's backward cannot be called by hand
            result = fn(*private) if driver is None else driver(fn, *private)
        if watch.used:
            what = ("PyTorch's own backward kernel {}: write the gradient yourself" if "backward" in watch.used
                    else "PyTorch's BatchNorm kernel {}: compute BatchNorm's statistics yourself")
            raise GradingError(f"{exercise}: ran {what.format(watch.used)}\n  on input:\n"
                               f"{checks.describe_inputs(shown)}")
        return result

    try:
        return checks.call_student(exercise, run, **guards_of(BY_HAND, exercise))
    except GradingError as err:  # `run` holds the arguments, so call_student saw none: name them
        raise with_inputs(err, shown) from None


LAYOUTS = {"non-contiguous": battery.non_contiguous,
           "expanded": lambda t: battery.expanded(t[:1], t.shape[0])}


def laid_out(fn, *args, stress, position, key=None):
    """Driver: fn(*args) with argument `position` (or its entry `key`, for a dict such as the cache)
    laid out as `stress` lays it out: a strided view with gaps, or its first row expanded (stride 0).
    Built here, where the answer runs, because every copy on the way (the answer's private copy, the
    trusted boundary) would make it contiguous again."""
    args = list(args)
    if key is None:
        args[position] = LAYOUTS[stress](args[position])
    else:
        args[position] = {**args[position], key: LAYOUTS[stress](args[position][key])}
    return fn(*args)


def stressed_case(case, stress, argument, key=None):
    """(case, driver) for `stress` on `argument` (a name of `case`): an expanded argument's values
    become its first row repeated, so that the reference sees what the answer sees."""
    if stress not in LAYOUTS:
        return case, None
    if stress == "expanded":
        value = case[argument] if key is None else case[argument][key]
        rows = value[:1].expand_as(value).clone()
        case = {**case, argument: rows if key is None else {**case[argument], key: rows}}
    return case, functools.partial(laid_out, stress=stress, position=list(case).index(argument), key=key)
