"""Notebook 08's by-hand rules: the Hessian-vector product by double backward (no torch.func), and
SmoothAbs's backward by hand.

Declared once, here: the grader's judge reads these rules from the answer's source, the checks pass them
to the kernel's guards (`autograder.checks.rules`)."""
from autograder.checks.rules import NO_AUTOGRAD, NO_FUNC_TRANSFORMS

BY_HAND = {"hvp": NO_FUNC_TRANSFORMS, "SmoothAbs": NO_AUTOGRAD}
