"""Grading helpers for notebook 08: the backward pass as an object (double backward, hooks, torch.func).

A package, one module per exercise, because the six exercises are judged in six different ways:

- `hessian_vector`: `hvp` against `torch.autograd.functional.hessian` (refused, with torch.func,
  inside the learner's call), and the number of passes through the gradient's graph;
- `penalty`: `gradient_penalty`'s value and the gradient it sends to the critic's weights, against a
  closed form (visible) or the answer key (hidden);
- `smooth_abs`: `SmoothAbs` to first order (backward called directly, autograd refused) and to second
  order (the gradient differentiated again, gradcheck, gradgradcheck), naming the broken rule, also at
  the function's special points;
- `per_sample`: `per_sample_grads` against a loop of single-example gradients, and the model's
  forward calls (a loop runs it once per example);
- `step_in_backward`: `attach_step_in_backward` against an SGD step after backward, no .grad left,
  handles that remove the hooks;
- `truncated_bptt`: `tbptt_backward`'s loss and gradients (literal values, or the answer key) and its
  peak of saved bytes for two sequence lengths.

Hidden tests also try where right-looking code breaks, through `autograder.checks.battery` (a
`stress` argument, or a case that carries one): strided x and v for `hvp` and strided inputs for
`per_sample_grads`, the special points of `SmoothAbs`, a batch of one for `gradient_penalty`,
`per_sample_grads` and `tbptt_backward`, `backward(create_graph=True)` for `attach_step_in_backward`;
a failure then says which of them broke the answer.

No reference solution lives here: references that are answers come from
`solutions/08_higher_order/answer_key.py` as arguments. Learner code runs only in drivers passed to
`checks.call_student`, which build what they need where the learner's code runs (the kernel, in
trusted grading) and return data: values, flags, counts, `SavedCounts`; modules and leaves that
require grad come back with their parameters and .grad. Grade cells use the names below
(`from autograder.checks import higher_order as ho; ho.check_hvp(...)`).
"""
from autograder.checks.higher_order.common import LOOSE
from autograder.checks.higher_order.hessian_vector import (
    FORBID_HVP,
    CountedProduct,
    CountedSquare,
    Objective,
    check_hvp,
    check_hvp_double_backward,
    hvp_case,
    reference_hvp,
)
from autograder.checks.higher_order.penalty import (
    PenaltyRun,
    QuadraticCritic,
    check_penalty,
    check_penalty_closed_form,
    critic,
    penalty_inputs,
)
from autograder.checks.higher_order.per_sample import (
    LOSSES,
    MODEL_NOTES,
    CountingModel,
    check_per_sample_grads,
    counting_model,
    loop_of_single_example_grads,
    per_sample_inputs,
)
from autograder.checks.higher_order.smooth_abs import (
    FirstOrderRun,
    SecondOrderRun,
    check_smooth_abs,
    check_smooth_abs_double_backward,
    smooth_abs_case,
    smooth_abs_special_points,
)
from autograder.checks.higher_order.step_in_backward import StepRun, TiedModel, check_step_in_backward, step_model
from autograder.checks.higher_order.truncated_bptt import (
    TBPTT_LOSSES,
    ScalarCell,
    check_tbptt,
    check_tbptt_expected,
    check_tbptt_memory,
    rnn_cell,
    saved_counts_of_tbptt,
    sequence,
    squared_error,
)

__all__ = [
    "FORBID_HVP", "LOOSE", "LOSSES", "MODEL_NOTES", "TBPTT_LOSSES", "CountedProduct", "CountedSquare", "CountingModel",
    "FirstOrderRun", "Objective", "PenaltyRun", "QuadraticCritic", "ScalarCell", "SecondOrderRun", "StepRun",
    "TiedModel", "check_hvp", "check_hvp_double_backward", "check_penalty", "check_penalty_closed_form",
    "check_per_sample_grads", "check_smooth_abs", "check_smooth_abs_double_backward", "check_step_in_backward",
    "check_tbptt", "check_tbptt_expected", "check_tbptt_memory", "counting_model", "critic",
    "loop_of_single_example_grads", "penalty_inputs", "per_sample_inputs", "reference_hvp", "rnn_cell",
    "saved_counts_of_tbptt", "sequence", "smooth_abs_case", "smooth_abs_special_points", "squared_error", "step_model",
    "hvp_case",
]
