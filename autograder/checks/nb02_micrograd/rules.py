"""Notebook 02's by-hand rules: the engine, the MLP and the drawing without autograd.

Declared once, here: the grader's judge reads these rules from the answer's source, the checks pass them
to the kernel's guards (`autograder.checks.rules`)."""
from autograder.checks.rules import NO_AUTOGRAD

BY_HAND = {name: NO_AUTOGRAD for name in ("Value", "MLP", "draw_dot")}
