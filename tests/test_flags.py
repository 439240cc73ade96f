"""Flags: what a submission's own code does to the grader (patches, reflection, the grader's answer keys,
the judge's refusals) is listed for the instructor, read as code (aliases and line continuations hide
nothing); a blank and a reference submission of every notebook are flagged 0 times."""
import course
import nbformat
import pytest
from test_judge import RELU, notebook

from autograder.grader import flags, judge

ROOT = course.ROOT


def scan(*cells, name="01_chain_rule", answers=None):
    return flags.scan(notebook(name, answers, top=cells), judge.baseline(ROOT, name))


# The reflective lines of issue 28's review (one was flagged then), and the patches of the kernel's guards.
@pytest.mark.parametrize("line, what", [
    ("import importlib\nm = importlib.import_module('torch.' + 'autograd')", "uses importlib"),
    ("g = __import__('torch.autograd', fromlist=['grad'])", "uses __import__"),
    ("g = getattr(torch, 'auto' + 'grad')", "uses getattr"),
    ("import autograder\nautograder.\\\n    checks.student_calls._autograd_forbidden = None",
     "changes autograder.checks"),
    ("import sys\nm = vars(sys)['modules']", "uses vars"),
    ("g = __import__('g' + 'c')", "uses __import__"),
    ("import base64\nexec(base64.b64decode('cHJpbnQoMSk='))", "uses exec"),
    ("try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    frame = e.__traceback__.tb_frame", "reaches .__traceback__"),
    ("import sys\nframe = sys._getframe()", "reaches sys._getframe"),
    ("import inspect\nstack = inspect.stack()", "uses inspect"),
    ("subclasses = object.__subclasses__()", "reaches .__subclasses__"),
    ("engine = torch.autograd.variable.Variable._execution_engine",
     "reaches torch.autograd.variable.Variable._execution"),
    ("with torch._C._DisableTorchDispatch():\n    pass", "reaches torch._C"),
    ("import dataclasses\n@dataclasses.dataclass\nclass Record:\n    __module__ = 'autograder.elsewhere'",
     "sets a class's __module__"),
    ("from autograder import checks\nchecks.student_calls._autograd_forbidden = None",
     "changes autograder.checks.student_calls._autograd_forbidden"),
    ("import autograder.checks as c\nsetattr(c, 'expect_close', None)", "uses setattr"),
    ("import autograder.checks as c\ndel c.expect_close", "deletes autograder.checks.expect_close"),
    ("from autograder.grader.keys import answer_key", "uses autograder.grader"),
    ("nb = open('/course/solutions/01_chain_rule/01_chain_rule.ipynb').read()", "names the course's solutions"),
    ("import sys\nsys.setprofile(None)", "reaches sys.setprofile"),
    ("import threading\nthreading.settrace(print)", "uses threading"),
    ("import gc\nobjects = gc.get_objects()", "uses gc"),
    ("import ctypes", "uses ctypes"),
    ("import builtins\nbuiltins.all = lambda *a: True", "uses builtins"),
    ("get_ipython().events.register('pre_run_cell', print)", "uses IPython's get_ipython"),
])
def test_a_line_that_reaches_for_the_grader_is_flagged_with_what_it_reaches(line, what):
    found = scan(line)
    assert any(what in f.what for f in found), found


def test_flags_name_the_cell_and_the_line_the_student_wrote():
    nb = notebook("01_chain_rule", top=["x = 1\nimport gc"])
    cell = next(i for i, c in enumerate(nb.cells, start=1) if c.source == "x = 1\nimport gc")
    found = flags.scan(nb, judge.baseline(ROOT, "01_chain_rule"))
    assert [(f.cell, f.line, f.text) for f in found] == [(cell, 2, "import gc")]


def test_the_judges_refusals_are_flagged():
    found = scan(answers={"relu_grad": "def relu_grad(x):\n    return torch.autograd.grad(x.sum(), x)"})
    assert any("reaches torch.autograd.grad: this exercise is by hand" in f.what for f in found), found


def test_ordinary_code_is_not_flagged():
    assert scan("co_occurrence = torch.ones(2).T @ torch.ones(2)", "import os\nprint(os.getcwd())",
                "%timeit torch.ones(3)", answers={"relu_grad": RELU}) == []


def test_the_notebooks_own_lines_are_not_the_students():
    """The Colab first cell reads sys.modules and imports importlib: the course's lines, whatever the student
    adds beside them."""
    nb = notebook("01_chain_rule")
    colab = next(c for c in nb.cells if c.cell_type == "code" and "google.colab" in c.source)
    colab.source += "\nprint('ready')"
    assert flags.scan(nb, judge.baseline(ROOT, "01_chain_rule")) == []


@pytest.mark.parametrize("name", course.assignment_names())
def test_no_reference_solution_and_no_blank_notebook_is_flagged(name):
    base = judge.baseline(ROOT, name)
    for path in (course.solution_path(name), course.release_path(name)):
        found = flags.scan(course.read(path), base)
        assert found == [], [f"{path.name} cell {f.cell} line {f.line}: {f.what}: {f.text}" for f in found]


def test_a_test_cell_is_the_graders_not_the_students():
    nb = notebook("01_chain_rule")
    nb.cells.append(nbformat.v4.new_code_cell("import gc", metadata={"nbgrader": {"grade": True, "solution": False}}))
    assert flags.scan(nb, judge.baseline(ROOT, "01_chain_rule")) == []
