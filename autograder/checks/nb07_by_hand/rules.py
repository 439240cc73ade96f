"""Notebook 07's by-hand rules: every gradient without autograd, BatchNorm without PyTorch's.

Declared once, here: the grader's judge reads these rules from the answer's source, the checks pass them
to the kernel's guards (`autograder.checks.rules`)."""
from autograder.checks.rules import NO_AUTOGRAD, NO_BATCHNORM

BY_HAND = {name: NO_AUTOGRAD + NO_BATCHNORM for name in (
    "embedding_backward", "batchnorm_steps_backward", "batchnorm_backward", "batchnorm_update_running",
    "manual_backward", "train_by_hand")}
