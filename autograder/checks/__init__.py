"""Checks that tests call: compare an answer with PyTorch and name what differs; never hold an answer.

Two parts, which the layout shows (tests/test_layout.py holds it):

- the core, the modules at this level, which every notebook's checks use: comparisons with readable
  messages and the tolerance tables (`compare`), calls of student code with a time limit and guards
  (`student_calls`, `op_watch`), the inputs where right-looking code breaks (`battery`), the first
  check of a custom Function (`function_class`), seeded models (`seeded`), saved bytes as data
  (`saved_counts`), trusted grading's data format (`boundary`) and the kernel's side of it
  (`responder`). The most used are re-exported here (`from autograder import checks;
  checks.expect_close(...)`);
- one package per notebook, named after it (`nb07_by_hand` for `solutions/07_by_hand`), whose
  `__init__` exports what that notebook's grade cells call (`from autograder.checks import
  nb07_by_hand; nb07_by_hand.check_...(...)`). A notebook's package imports the core and
  `autograder.learner`, never another notebook's package.

This package runs in the learner's kernel and in the grader; it imports only `autograder.learner`.
"""
from autograder.checks.compare import TOLERANCES, GradingError, describe, describe_inputs, expect_close, fail
from autograder.checks.student_calls import (
                                             call_student,
                                             check_cases,
                                             forbidden,
                                             recursion_headroom,
                                             run_cases,
                                             run_input_change,
)

__all__ = ["TOLERANCES", "GradingError", "call_student", "check_cases", "describe", "describe_inputs",
           "expect_close", "fail",
           "forbidden", "recursion_headroom", "run_cases", "run_input_change"]
