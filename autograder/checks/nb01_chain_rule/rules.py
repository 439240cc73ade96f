"""Notebook 01's by-hand rules: every exercise derives its gradient without autograd.

Declared once, here: the grader's judge reads these rules from the answer's source, the checks pass them
to the kernel's guards (`autograder.checks.rules`)."""
from autograder.checks.rules import NO_AUTOGRAD

BY_HAND = {name: NO_AUTOGRAD for name in (
    "linear_mse_grad", "two_layer_backward", "numerical_grad", "sigmoid_grad", "relu_grad", "softmax_jacobian",
    "softmax_xent_grad")}
