"""Flags: what a submission's own lines reach for (the grader's internals, hooks, code objects,
answer keys) is listed for the instructor; no reference solution is flagged."""
import course
import nbformat
import pytest

from autograder.grader import flags

RELEASED = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
    "from autograder.checks.by_hand import PARAM_NAMES, forward\nimport torch")])


def _submission(*sources):
    return nbformat.v4.new_notebook(cells=[*RELEASED.cells, *map(nbformat.v4.new_code_cell, sources)])


@pytest.mark.parametrize("line, what", [
    # the one line that switched the "by hand" guard off and scored 12/12
    ("_sc._autograd_forbidden = lambda e: contextlib.nullcontext()\nimport autograder.checks.student_calls as _sc",
     "the grading package's internals"),
    ("from autograder import checks", "the grading package's internals"),
    ("K = answer_key('04_toggles'); K.grad_fn_names.__wrapped__", "an answer key"),
    ("sys.setprofile(None)", "an interpreter hook"),
    ("threading.settrace(lambda *a: None)", "an interpreter hook"),
    ("del sys.modules['autograder']", "sys.modules"),
    ("f.__code__ = f.__code__.replace(co_name='relu_grad')", "a function's code, closure or globals"),
    ("[o for o in gc.get_objects() if callable(o)]", "the garbage collector's object lists"),
    ("import ctypes", "ctypes"),
    ("import builtins; builtins.all = lambda *a: True", "builtins"),
])
def test_a_line_that_reaches_for_the_grader_is_flagged_with_what_it_reaches(line, what):
    found = flags.scan(_submission(line), flags.released_lines(RELEASED))
    assert what in {f.what for f in found}, found
    assert all(f.cell == 2 for f in found)


def test_a_name_that_only_looks_like_a_code_attribute_is_not_flagged():
    assert flags.scan(_submission("co_occurrence = x.T @ x"), flags.released_lines(RELEASED)) == []
    assert flags.scan(_submission("g = f.replace(co_filename='x')"), flags.released_lines(RELEASED))


def test_the_notebooks_own_lines_are_not_the_students():
    """07's set-up cell imports from autograder.checks: the course's line, not a flag."""
    assert flags.scan(_submission("def relu_grad(x):\n    return (x > 0).to(x.dtype)"),
                      flags.released_lines(RELEASED)) == []


@pytest.mark.parametrize("name", course.assignment_names())
def test_no_reference_solution_is_flagged(name):
    solution = course.read(course.solution_path(name))
    found = flags.scan(solution, flags.released_lines(course.read(course.release_path(name))))
    assert found == [], [f"cell {f.cell} line {f.line}: {f.what}: {f.text}" for f in found]
