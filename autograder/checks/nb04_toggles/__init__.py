"""Notebook 04's checks (the four toggles): seeded models, drivers and checks.

Why a package of its own: the exercises of notebook 04 are judged by what they do to autograd's
*state*, not by one returned tensor: which parameters end up with `requires_grad`, which `.grad`
buffers change, whether a gradient reaches a tensor, whether a graph outlives the call. So every
check builds a small seeded model, runs the learner's function on it through
`checks.call_student` (time limit, nothing on stderr, readable errors), probes what the call left
behind, and compares that with PyTorch on an identical copy. Every failure is a `GradingError`
that names the exercise, the case and what differed.

Learner code runs only inside DRIVERS (functions named `run_<what>`, docstrings starting
"Driver:"): they build or receive the inputs, call the learner's function, do what must happen
beside it (backward(), a saved-tensor ledger, weak references, .grad set beforehand, the grad
mode) and return plain data. A driver runs wherever the learner's code runs (in trusted grading,
the notebook's kernel; see autograder/grader/trusted.py), which is where an autograd graph can
live: graphs never cross to the grader, so drivers build them from builders or seeds. The checks
compare the data in their own process, where the learner's code cannot reach.

Nothing here is an answer. Where the only reference is an answer (`grad_fn_names`, the value of
`distill_loss`, `per_loss_grads`, `train_step`), the check takes it as an argument: hidden tests
pass the course's answer key (`solutions/04_toggles/answer_key.py`), visible tests state the
expected result of a small case literally. Other references are PyTorch itself: the full-batch
gradient, the closed-form gradient of the distillation loss, a plain forward pass.

Modules, one idea each: `cases` (calling the learner and reporting a case), `models` (the seeded
models every check builds), `graph_walk` (grad_fn_names), `freezing` (freeze_all_but),
`distillation` (distill_loss), `per_loss` (per_loss_grads), `accumulation` (accumulated_grads),
`training_step` (train_step), `prediction` (predict). The notebook's prose builds the models of
`models`; it draws graphs with `autograder.learner.autograd_graph`.

This package exports what the notebook's grade cells call; everything else is imported from its module.
"""
from autograder.checks.nb04_toggles.accumulation import check_accumulated_grads
from autograder.checks.nb04_toggles.distillation import (
    check_distill_example,
    check_distill_gradients,
    check_distill_models,
    check_distill_value,
)
from autograder.checks.nb04_toggles.freezing import check_freeze_flags, check_freeze_training, check_freeze_unknown_name
from autograder.checks.nb04_toggles.graph_walk import autograd_graphs, check_grad_fn_names
from autograder.checks.nb04_toggles.models import deep_stack, lora_net
from autograder.checks.nb04_toggles.per_loss import check_per_loss_example, check_per_loss_grads
from autograder.checks.nb04_toggles.prediction import check_predict
from autograder.checks.nb04_toggles.training_step import (
    check_train_step,
    check_train_step_example,
    check_train_step_keeps_no_graph,
)

__all__ = ["autograd_graphs", "check_accumulated_grads", "check_distill_example", "check_distill_gradients",
           "check_distill_models", "check_distill_value", "check_freeze_flags", "check_freeze_training",
           "check_freeze_unknown_name", "check_grad_fn_names", "check_per_loss_example", "check_per_loss_grads",
           "check_predict", "check_train_step", "check_train_step_example", "check_train_step_keeps_no_graph",
           "deep_stack", "lora_net"]
