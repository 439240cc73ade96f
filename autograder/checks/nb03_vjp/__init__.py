"""Notebook 03's checks (vector-Jacobian products).

Every VJP exercise is graded the same way. A grade cell lists its cases (shapes, dtype, memory
layout, seed); a case builder (`cases`) draws the inputs with `autograder.learner.inputs` on
`get_device()` and computes the expected gradients with `torch.autograd.grad` through the PyTorch
operation itself. `check_vjp` (`vjp_checks`) then runs the learner's function on a private copy of
the inputs (same strides: a transposed or sliced input stays non-contiguous) with autograd switched
off and the guards of `watch` (no PyTorch backward kernel, no forbidden op or call, no tensor much
larger than the inputs), and compares with tolerances chosen by dtype. Custom
`torch.autograd.Function`s are checked in `functions`, the tiny tensor engine in `tensor_engine`.

Trusted grading (`autograder.grader.trusted`): whatever touches the learner's code runs in a driver
passed to `checks.call_student`, so in the kernel; drivers return data only (tensors, `FunctionRun`
and `EngineNode` records, gradcheck's verdict), and every comparison with a PyTorch reference
happens in the caller, in the grader's process. References are computed before any call, from
tensors that do not travel (tensors that do may come back changed). No module here holds an answer:
the references are autograd and PyTorch operations that the exercises refuse inside the learner's call.

This package exports what the notebook's grade cells call (and the battery's `large_logits`, which its
hidden tests draw); everything else is imported from its module.
"""
from autograder.checks.battery import large_logits
from autograder.checks.nb03_vjp.cases import (
    broadcast_patterns,
    dtype_layouts,
    layernorm_case,
    linear_case,
    log_softmax_case,
    matmul_case,
    relu_case,
    sigmoid_case,
    softmax_case,
    stressed,
    tanh_case,
    tensor,
    unbroadcast_case,
)
from autograder.checks.nb03_vjp.functions import (
    check_gradchecks,
    check_logsumexp,
    check_straight_through,
    logsumexp_case,
    rounding_cases,
)
from autograder.checks.nb03_vjp.tensor_engine import (
    check_engine_deep,
    check_engine_expression,
    check_engine_mlp,
    check_engine_training,
)
from autograder.checks.nb03_vjp.vjp_checks import check_unbroadcast, check_vjp

__all__ = ["broadcast_patterns", "check_engine_deep", "check_engine_expression", "check_engine_mlp",
           "check_engine_training", "check_gradchecks", "check_logsumexp", "check_straight_through",
           "check_unbroadcast", "check_vjp", "dtype_layouts", "large_logits", "layernorm_case", "linear_case",
           "log_softmax_case", "logsumexp_case", "matmul_case", "relu_case", "rounding_cases", "sigmoid_case",
           "softmax_case", "stressed", "tanh_case", "tensor", "unbroadcast_case"]
