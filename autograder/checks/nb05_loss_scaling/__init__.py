"""Notebook 05's checks: underflow, scaled fp16 gradients and a dynamic loss scaler.

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

This package exports what the notebook's grade cells call (and the battery's `trying`, which its hidden
tests use); everything else, the stream and table its try-it cells use included, is imported from its module.
"""
from autograder.checks.battery import trying
from autograder.checks.nb05_loss_scaling.fp16_gradients import (
    check_scaled_fp16_grads,
    check_shows_fp16,
    float32_mlp,
    small_cross_entropy,
    small_mse,
)
from autograder.checks.nb05_loss_scaling.scaler_runs import GradientStream, check_against_gradscaler, check_defaults
from autograder.checks.nb05_loss_scaling.underflow import check_underflow_fraction, edge_values, log_uniform

__all__ = ["GradientStream", "check_against_gradscaler", "check_defaults", "check_scaled_fp16_grads",
           "check_shows_fp16", "check_underflow_fraction", "edge_values", "float32_mlp", "log_uniform",
           "small_cross_entropy", "small_mse", "trying"]
