"""Notebook 06's by-hand rules: checkpointing without torch.utils.checkpoint, saved bytes without the
course's own counters.

Declared once, here: the grader's judge reads these rules from the answer's source, the checks pass them
to the kernel's guards (`autograder.checks.rules`)."""
from autograder.checks.rules import NO_COUNTERS, NO_TORCH_CHECKPOINT

BY_HAND = {"saved_bytes": NO_COUNTERS, "checkpoint": NO_TORCH_CHECKPOINT, "checkpoint_sequential": NO_TORCH_CHECKPOINT}
