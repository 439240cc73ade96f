"""Notebook 09's checks: the learner's own Triton kernels, forward and backward.

The guard itself is in the core, since notebook 10's kernels are judged under the same rules:

- `kernel_guard`: the call itself, where the learner's code runs. Inputs sit in marked padding (Triton's
  interpreter does not fault on an out-of-bounds access), allocations come from marked buffers,
  launches are counted and torch maths outside the kernel is recorded (`KernelRun`);
- `kernel_verdicts`: what that record says, in the learner's terms (a store without a mask, elements never
  written, NaN loaded from outside an input, torch maths, too many launches), then the values;
- `kernel_layouts`: each tensor input in marked memory in a layout of its own (`run_laid_out`, the driver);
- `kernel_functions`: the autograd Functions run as autograd runs them (`FunctionRun`), gradcheck included.

This package holds `silu` and `rmsnorm`: the cases and the checks the grade cells call.

Hidden tests try where right-looking kernels break, through `autograder.checks.battery`'s stresses:
sizes that are not a multiple of the block, "empty" inputs, each tensor input (x, weight, grad_out,
rstd) "non-contiguous" with gaps, "transposed" or "expanded" while the others are not (the grad_out of
`.sum().backward()` is one number expanded), float32 and float64, then "float16" and "bfloat16" at
their own tolerance on rows where a half-precision accumulator fails, the "special-points" of the
sigmoid (0, tiny, ±1, ±100, ±1e4), "width-one" rows, "wide-rows" wider than `kernel_verdicts.BLOCK_LIMIT`, a
"batch-of-one". References are PyTorch's (`F.silu`, `F.rms_norm`, autograd), in float64.

This package exports what the notebook's grade cells call; everything else is imported from its module.
"""
from autograder.checks.nb09_kernels.rmsnorm import (
    check_rmsnorm_backward,
    check_rmsnorm_forward,
    check_triton_rmsnorm,
    rmsnorm_case,
)
from autograder.checks.nb09_kernels.silu import check_silu_backward, check_silu_forward, check_triton_silu, silu_case

__all__ = ["check_rmsnorm_backward", "check_rmsnorm_forward", "check_silu_backward", "check_silu_forward",
           "check_triton_rmsnorm", "check_triton_silu", "rmsnorm_case", "silu_case"]
