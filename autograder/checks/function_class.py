"""Whether the learner's answer is a `torch.autograd.Function` at all: the first check of every custom
Function exercise (03's `StableLogSumExp` and `StraightThroughRound`, 08's `SmoothAbs`), before
anything calls its `.apply`."""
import torch

from autograder import checks


def run_class_facts(cls):
    """Driver: (whether `cls` is a subclass of torch.autograd.Function, a description of it)."""
    return bool(isinstance(cls, type) and issubclass(cls, torch.autograd.Function)), checks.describe(cls)


def check_function_class(exercise, cls):
    facts = checks.call_student(exercise, run_class_facts, cls, names=["the class"])
    is_function, text = facts if isinstance(facts, tuple) and len(facts) == 2 else (False, checks.describe(facts))
    if is_function is not True:
        checks.fail(exercise, f"should be a subclass of torch.autograd.Function (with static forward and "
                              f"backward methods, called through .apply), got {text}")
