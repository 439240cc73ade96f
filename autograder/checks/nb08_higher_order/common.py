"""What the checks of notebook 08 share: a comparison that names the quantity (float32 answers reach the
same numbers by other paths: another order of sums, batched kernels) and the battery's strided inputs."""
import torch

from autograder import checks
from autograder.checks import battery
from autograder.checks.compare import REORDERED_TOLERANCES


def close(exercise, got, expected, *, shown, name, tolerances=REORDERED_TOLERANCES):
    """checks.expect_close with the tolerances above, `name` naming the quantity compared."""
    rtol, atol = tolerances.get(expected.dtype, (None, None))
    checks.expect_close(exercise, got, expected, inputs=shown, names=[name], rtol=rtol, atol=atol)


def is_tensor(value):
    return isinstance(value, torch.Tensor)


def strided(t, stress):
    """`t` as the stress hands it over: a strided view with gaps for "non-contiguous", else `t`. Drivers
    call it where the learner's code runs, because a copy across the trusted boundary (or the private
    copy every call gets) is contiguous again."""
    return battery.non_contiguous(t) if stress == "non-contiguous" else t
