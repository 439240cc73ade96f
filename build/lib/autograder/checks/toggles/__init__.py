"""Grading helpers for notebook 04 (the four toggles): seeded models, drivers and checks.

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
`training_step` (train_step), `prediction` (predict), `drawing` (the notebook's graph drawings).
The notebook's prose reaches the drawing and the models here, at the package level.
"""
from autograder.checks.toggles.drawing import draw_autograd_graph
from autograder.checks.toggles.models import LoRALinear, LoRANet, TwoHeads

__all__ = ["LoRALinear", "LoRANet", "TwoHeads", "draw_autograd_graph"]
