"""Helpers shared by the course notebooks and their hidden tests.

Notebooks import from here so that device choice, comparisons with readable messages and
quizzes behave the same in every notebook (and can later move out of the student's kernel).
"""
from autograder.device import get_device

__all__ = ["get_device"]
