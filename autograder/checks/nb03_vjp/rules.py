"""Notebook 03's by-hand rules: every VJP without autograd; unbroadcasting without `sum_to_size`,
log-sum-exp without `logsumexp`.

Declared once, here: the grader's judge reads these rules from the answer's source, the checks pass them
to the kernel's guards (`autograder.checks.rules`)."""
from autograder.checks.rules import NO_AUTOGRAD, NO_LOGSUMEXP, NO_SUM_TO_SIZE

BY_HAND = {
    **{name: NO_AUTOGRAD for name in ("vjp_relu", "vjp_sigmoid", "vjp_tanh", "vjp_linear", "vjp_matmul", "vjp_softmax",
                                     "vjp_log_softmax", "vjp_layernorm", "StraightThroughRound", "Tensor")},
    "unbroadcast": NO_AUTOGRAD + NO_SUM_TO_SIZE,
    "StableLogSumExp": NO_AUTOGRAD + NO_LOGSUMEXP,
}
