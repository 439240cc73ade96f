"""Notebook 05's by-hand rule: the dynamic loss scaler without GradScaler.

Declared once, here: the grader's judge reads these rules from the answer's source, the checks pass them
to the kernel's guards (`autograder.checks.rules`)."""
from autograder.checks.rules import NO_GRADSCALER

BY_HAND = {"DynamicLossScaler": NO_GRADSCALER}
