"""Checks that tests call: compare an answer with PyTorch and name what differs; never hold an answer.

The core every notebook's checks share is re-exported here (`from autograder import checks;
checks.expect_close(...)`): comparisons with readable messages (`compare`) and calls of student
code with a time limit and guards (`student_calls`). Per-notebook checks live in modules of their
own. This package runs in the learner's kernel and in the grader; it imports only
`autograder.learner`.
"""
from autograder.checks.compare import TOLERANCES, GradingError, describe, describe_inputs, expect_close, fail
from autograder.checks.student_calls import (
                                             call_student,
                                             check_cases,
                                             forbidden,
                                             input_change,
                                             recursion_headroom,
                                             run_cases,
)

__all__ = ["TOLERANCES", "GradingError", "call_student", "check_cases", "describe", "describe_inputs",
           "expect_close", "fail",
           "forbidden", "input_change", "recursion_headroom", "run_cases"]
