"""Notebook 10's checks: what its grade cells call (`from autograder.checks import nb10_attention`).

The face of the package: every name a grade cell uses, imported here from the module that holds it (`backward`:
the checks of `attention_backward`; `online`: those of `online_attention`; `flash`: those of the Triton kernels
and `FlashAttention`, under notebook 09's kernel guard; `cases`: their inputs). The torch answers are called
through `calls`, the kernels through `autograder.checks.kernel_verdicts`; all are judged through `verdicts`.
"""
from autograder.checks.nb10_attention.backward import check_attention_backward
from autograder.checks.nb10_attention.cases import backward_case, flash_case, online_case
from autograder.checks.nb10_attention.flash import check_flash_attention, check_flash_backward, check_flash_forward
from autograder.checks.nb10_attention.online import check_online_attention

__all__ = ["backward_case", "check_attention_backward", "check_flash_attention", "check_flash_backward",
           "check_flash_forward", "check_online_attention", "flash_case", "online_case"]
