"""Notebook 07's checks (a whole network by hand): the notebook's model, and the checks of
its five exercises.

A package, one idea per module:

- `model`: the notebook's model (`PARAM_NAMES`, `init_params`, `forward`), which the notebook imports
  and the checks differentiate, and its slipped variants, which only hints use;
- `calls`: running an answer by hand (`guarded`: autograd, BatchNorm and backward kernels refused,
  private copies) and the battery's strided and expanded arguments, laid out where the answer runs;
- `verdicts`: references by autograd, an answer's form checked before its values, a hint only for values;
- one module per exercise, with its cases, reference, hints and check: `embedding`
  (`embedding_backward`), `steps` (`batchnorm_steps_backward`, with the course's line-by-line BatchNorm
  forward `batchnorm_steps`), `batchnorm` (`batchnorm_backward`), `running_stats`
  (`batchnorm_update_running`), `manual_backward`, `training` (`train_by_hand`).

This package exports what the notebook's grade cells call; everything else (the model and
`batchnorm_steps`, which the notebook imports, the references and slips the unit tests use) is imported
from its module.
"""
from autograder.checks.nb07_by_hand.batchnorm import batchnorm_case, check_batchnorm_backward
from autograder.checks.nb07_by_hand.embedding import check_embedding_backward, embedding_case
from autograder.checks.nb07_by_hand.manual_backward import check_manual_backward, model_case
from autograder.checks.nb07_by_hand.running_stats import check_running, running_case
from autograder.checks.nb07_by_hand.steps import check_batchnorm_steps, steps_case
from autograder.checks.nb07_by_hand.training import check_train_by_hand, training_case

__all__ = ["batchnorm_case", "check_batchnorm_backward", "check_batchnorm_steps", "check_embedding_backward",
           "check_manual_backward", "check_running", "check_train_by_hand", "embedding_case", "model_case",
           "running_case", "steps_case", "training_case"]
