"""Notebook 10's checks: what its grade cells call (`from autograder.checks import nb10_attention`).

The face of the package: every name a grade cell uses, imported here from the module that holds it (`backward`:
the checks of `attention_backward`; `online`: those of `online_attention`; `cases`: their inputs). Both call the
answer through `calls` and judge it through `verdicts`.
"""
from autograder.checks.nb10_attention.backward import check_attention_backward
from autograder.checks.nb10_attention.cases import backward_case, online_case
from autograder.checks.nb10_attention.online import check_online_attention

__all__ = ["backward_case", "check_attention_backward", "check_online_attention", "online_case"]
