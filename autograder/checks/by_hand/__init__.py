"""Grading helpers for notebook 07 (a whole network by hand): the notebook's model, and the checks of
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

The notebook and grade cells use the names below (`from autograder.checks.by_hand import forward,
batchnorm_steps`,
`from autograder.checks import by_hand as bh; bh.check_batchnorm_backward(...)`); `_slipped_loss` and
`_bn_grads` are here for the unit tests that hold the hints' slips to the model.
"""
from autograder.checks.by_hand.batchnorm import (
    BN_SLIPS,
    FLOAT32_SHARE,
    _bn_grads,
    batchnorm_case,
    check_batchnorm_backward,
    reference_batchnorm_backward,
)
from autograder.checks.by_hand.calls import FORBIDDEN_CALLS, FORBIDDEN_KERNELS, guarded, laid_out
from autograder.checks.by_hand.embedding import check_embedding_backward, embedding_case, reference_embedding_backward
from autograder.checks.by_hand.manual_backward import (
    BACKWARD_ORDER,
    MODEL_SLIPS,
    check_manual_backward,
    loss_and_grads,
    model_case,
    random_params,
    reference_grads,
)
from autograder.checks.by_hand.model import EPS, PARAM_NAMES, _slipped_loss, forward, init_params
from autograder.checks.by_hand.running_stats import check_running, reference_running, run_keeping_inputs, running_case
from autograder.checks.by_hand.steps import (
    STEP_GRADS,
    batchnorm_steps,
    check_batchnorm_steps,
    course_cache,
    reference_steps,
    steps_case,
)
from autograder.checks.by_hand.training import check_train_by_hand, run_training, training_case, twin_training
from autograder.checks.by_hand.verdicts import CLOSE

__all__ = ["BACKWARD_ORDER", "BN_SLIPS", "CLOSE", "EPS", "FLOAT32_SHARE", "FORBIDDEN_CALLS", "FORBIDDEN_KERNELS",
           "MODEL_SLIPS", "PARAM_NAMES", "STEP_GRADS", "_bn_grads", "_slipped_loss", "batchnorm_case",
           "batchnorm_steps", "check_batchnorm_backward", "check_batchnorm_steps", "check_embedding_backward",
           "check_manual_backward", "check_running", "check_train_by_hand", "course_cache", "embedding_case",
           "forward", "guarded", "init_params", "laid_out", "loss_and_grads", "model_case", "random_params",
           "reference_batchnorm_backward", "reference_embedding_backward", "reference_grads", "reference_running",
           "reference_steps", "run_keeping_inputs", "run_training", "running_case", "steps_case", "training_case",
           "twin_training"]
