"""Grading helpers for notebook 05: underflow, scaled fp16 gradients and a dynamic loss scaler.

Modules, one idea each: `underflow` (underflow_fraction), `fp16_gradients` (scaled_fp16_grads),
`scaler_runs` (DynamicLossScaler against torch.amp.GradScaler). Nothing here is an answer: where
the only reference is one (`underflow_fraction`, plain fp16 gradients), the check takes it as an
argument, which hidden tests fill with the course's answer key
(`solutions/05_loss_scaling/answer_key.py`) and visible tests replace with a stated value.

Trusted grading (`autograder.grader.trusted`): the learner's code runs only inside the drivers
(`fp16_gradients.run_on_callers_model`, `scaler_runs.run_scaler`, `scaler_runs.run_declared_defaults`),
wherever the learner's code runs; they return plain data (tensors, numbers, `StepRecord`s in a
`LearnerRun`). The references (float64 and plain fp16 gradients, GradScaler's run, GradScaler's
defaults) and every comparison stay in the grader's process.

The notebook's prose reaches what its try-it cells use here, at the package level.
"""
from autograder.checks.loss_scaling.scaler_runs import GradientStream, side_by_side

__all__ = ["GradientStream", "side_by_side"]
