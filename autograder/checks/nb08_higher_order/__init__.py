"""Notebook 08's checks: the backward pass as an object (double backward, hooks, torch.func).

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
trusted grading) and return data: values, flags, counts, `SavedCounts` (`autograder.checks.saved_counts`);
modules and leaves that require grad come back with their parameters and .grad.

This package exports what the notebook's grade cells call; everything else is imported from its module.
"""
from autograder.checks.nb08_higher_order.hessian_vector import check_hvp, check_hvp_double_backward, hvp_case
from autograder.checks.nb08_higher_order.penalty import check_penalty, check_penalty_closed_form
from autograder.checks.nb08_higher_order.per_sample import check_per_sample_grads
from autograder.checks.nb08_higher_order.smooth_abs import (
    check_smooth_abs,
    check_smooth_abs_double_backward,
    smooth_abs_case,
    smooth_abs_special_points,
)
from autograder.checks.nb08_higher_order.step_in_backward import check_step_in_backward
from autograder.checks.nb08_higher_order.truncated_bptt import check_tbptt, check_tbptt_expected, check_tbptt_memory

__all__ = ["check_hvp", "check_hvp_double_backward", "check_penalty", "check_penalty_closed_form",
           "check_per_sample_grads", "check_smooth_abs", "check_smooth_abs_double_backward", "check_step_in_backward",
           "check_tbptt", "check_tbptt_expected", "check_tbptt_memory", "hvp_case", "smooth_abs_case",
           "smooth_abs_special_points"]
