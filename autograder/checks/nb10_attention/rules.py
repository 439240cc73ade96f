"""Notebook 10's by-hand rules: attention's backward and online attention without autograd; FlashAttention's
maths all in the learner's Triton kernels.

Declared once, here: the grader's judge reads these rules from the answer's source, the checks pass them
to the kernel's guards (`autograder.checks.rules`)."""
from autograder.checks.rules import KERNEL_MATHS, NO_AUTOGRAD

BY_HAND = {
    **{name: NO_AUTOGRAD for name in ("attention_backward", "online_attention")},
    **{name: KERNEL_MATHS for name in ("flash_forward", "flash_backward", "FlashAttention")},
}
