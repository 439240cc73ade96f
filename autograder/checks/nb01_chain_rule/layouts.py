"""Notebook 01's checks where an input's memory layout matters: the learner's function on inputs laid
out as a check built them (a transpose, a slice of a larger tensor), against a reference.

Why a driver: `checks.call_student` hands the learner a private copy made by `clone()`, which keeps a
transpose's strides but makes a sliced tensor contiguous, so a slice would never reach the learner's
code as a slice. `run_as_laid_out` makes its own copies with the original strides where the learner's
code runs (in the kernel, under trusted grading, where pickling keeps the strides too).
"""
import functools

import torch

from autograder import checks
from autograder.checks import battery
from autograder.checks.nb01_chain_rule.rules import BY_HAND
from autograder.checks.rules import guards_of


def strided_copy(value):
    """A private copy of a tensor with the same shape and strides; anything else as it is."""
    if not isinstance(value, torch.Tensor):
        return value
    value = value.detach()
    copy = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=value.device)
    copy.copy_(value)
    return copy


def run_as_laid_out(fn, originals, *_clones):
    """Driver: `fn` on private copies of `originals` that keep their strides (call_student's own
    copies, `_clones`, make a sliced tensor contiguous)."""
    return fn(*[strided_copy(value) for value in originals])


def check_layouts(exercise, fn, reference, cases, *, what, names, **compare):
    """`fn` on every case (a dict of named inputs, the tensors in the layout they were built with:
    `battery.transposed`, `battery.non_contiguous`) against `reference`, autograd refused; a failure
    names the stress ("fails for a non-contiguous x: ...")."""
    for case in cases:
        originals = list(case.values())
        with battery.trying(exercise, "non-contiguous", what=what):
            got = checks.call_student(exercise, functools.partial(run_as_laid_out, fn, originals), *originals,
                                      names=list(case), **guards_of(BY_HAND, exercise))
            checks.expect_close(exercise, got, reference(*originals), inputs=case, names=names, **compare)
