"""Notebook 01's checks (the chain rule by hand): what its grade cells call, and nothing else.

`exercises` holds one check per exercise against autograd, and the functions and inputs the cases use;
`layouts` hands an input to the learner in the layout a case built (a transpose, a slice with gaps).
The battery's inputs the hidden tests draw (`special_points`, `large_logits`, `batch_of_one`,
`transposed`, `non_contiguous`) are named here too, so that a grade cell imports this package alone.
"""
from autograder.checks.battery import batch_of_one, large_logits, non_contiguous, special_points, transposed
from autograder.checks.nb01_chain_rule.exercises import (
    check_example,
    check_keeps_input,
    check_linear_mse_grad,
    check_numerical_grad,
    check_relu_grad,
    check_sigmoid_grad,
    check_softmax_jacobian,
    check_softmax_xent_grad,
    check_two_layer_backward,
    coupled_tanh,
    cubic_cosine,
    squares_as_a_number,
    with_zeros,
)

__all__ = ["batch_of_one", "check_example", "check_keeps_input", "check_linear_mse_grad", "check_numerical_grad",
           "check_relu_grad", "check_sigmoid_grad", "check_softmax_jacobian", "check_softmax_xent_grad",
           "check_two_layer_backward", "coupled_tanh", "cubic_cosine", "large_logits", "non_contiguous",
           "special_points", "squares_as_a_number", "transposed", "with_zeros"]
