"""What the checks of notebook 08 share: tolerances, a comparison that names the quantity, and the
battery's stresses (`stressed`), which name the input that broke an answer."""
import contextlib

import torch

from autograder import checks
from autograder.checks import battery

# float32 answers reach the same numbers by other paths (another order of sums, batched kernels)
LOOSE = {torch.float64: (1e-9, 1e-10), torch.float32: (1e-4, 1e-5)}


def close(exercise, got, expected, *, shown, name, tolerances=LOOSE):
    """checks.expect_close with the tolerances above, `name` naming the quantity compared."""
    rtol, atol = tolerances.get(expected.dtype, (None, None))
    checks.expect_close(exercise, got, expected, inputs=shown, names=[name], rtol=rtol, atol=atol)


def is_tensor(value):
    return isinstance(value, torch.Tensor)


def stressed(exercise, stress, what="input"):
    """`battery.trying` for a stress of the battery ("non-contiguous", "batch-of-one", ...): a failure
    inside says which input broke the answer; nothing for None."""
    return battery.trying(exercise, stress, what) if stress else contextlib.nullcontext()


def strided(t, stress):
    """`t` as the stress hands it over: a strided view with gaps for "non-contiguous", else `t`. Drivers
    call it where the learner's code runs, because a copy across the trusted boundary (or the private
    copy every call gets) is contiguous again."""
    return battery.non_contiguous(t) if stress == "non-contiguous" else t
