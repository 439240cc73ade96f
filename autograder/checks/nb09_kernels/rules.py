"""Notebook 09's by-hand rule: all the maths in the learner's Triton kernels.

Declared once, here: the grader's judge reads these rules from the answer's source, the checks pass them
to the kernel's guards (`autograder.checks.rules`)."""
from autograder.checks.rules import KERNEL_MATHS

BY_HAND = {name: KERNEL_MATHS for name in ("silu_forward", "silu_backward", "TritonSiLU", "rmsnorm_forward",
                                          "rmsnorm_backward", "TritonRMSNorm")}
