"""The by-hand judge reads a submission's source in the grader: it refuses what a rule forbids, however it
was imported or renamed, and what it cannot follow; it refuses nothing of a reference solution, a blank
notebook or a right answer of the mutation catalogue (no false positive)."""
import ast
import importlib
import inspect
import re

import course
import mutants
import nbformat
import pytest
from test_nbgrader_e2e import source_of, submission

from autograder.grader import judge, notebook_code, reading

ROOT = course.ROOT
ANSWERS = {name: {course.nbgrader_meta(c)["grade_id"].removesuffix("_solution"): c.source
                  for c in course.solution_cells(course.read(course.solution_path(name)))}
           for name in course.assignment_names()}
RELU = "def relu_grad(x):\n    return (x > 0).to(x.dtype)"


def notebook(name, answers=None, top=()):
    """The notebook as students receive it, every answer the reference's but `answers`, and `top`: cells of
    the student's own after the set-up cell."""
    nb = submission(course.release_path(name), {**ANSWERS[name], **(answers or {})})
    setup = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "import torch" in c.source)
    nb.cells[setup + 1:setup + 1] = [nbformat.v4.new_code_cell(source) for source in top]
    return nb


def verdicts(name, answers=None, top=()):
    return judge.judge(notebook(name, answers, top), judge.baseline(ROOT, name))


# (notebook, graded name, its answer, what the verdict must say). Each was graded 12/12, 31/31 or 14/14 in a
# real class run before the judge (issue 28), or is an alias of one that was.
ANSWER_ATTACKS = [
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    x = x.detach().requires_grad_()\n"
     "    y = torch.relu(x).sum()\n    torch.autograd.variable.Variable._execution_engine.run_backward(\n"
     "        (y,), (torch.ones_like(y),), False, False, (x,), True)\n    return x.grad",
     r"cell \d+, line 4 .* reaches torch\.autograd\.variable\.Variable\._execution_engine, a private part"),
    ("01_chain_rule", "relu_grad", "from torch.autograd import grad as g\ndef relu_grad(x):\n"
     "    x = x.detach().requires_grad_()\n    return g(torch.relu(x).sum(), x)[0]",
     r"line 4 .* reaches torch\.autograd\.grad: this exercise is by hand"),
    ("01_chain_rule", "relu_grad", "import torch.nn.functional as G\nauto = G.torch.autograd\ndef relu_grad(x):\n"
     "    x = x.detach().requires_grad_()\n    return auto.grad(torch.relu(x).sum(), x)[0]",
     r"reaches torch\.autograd\.grad"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x, m=torch):\n    return m.autograd.grad(x.sum(), x)[0]",
     r"reaches torch\.autograd\.grad"),
    ("01_chain_rule", "relu_grad", "def slope(x):\n    from torch.func import grad\n    return grad(torch.relu)(x)\n"
     "def relu_grad(x):\n    return torch.stack([slope(v) for v in x.flatten()]).view_as(x)",
     r"line 2 .* reaches torch\.func"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    x = x.detach().requires_grad_()\n    y = torch.relu(x)\n"
     "    return y.grad_fn(torch.ones_like(y))", r"calls \.grad_fn"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    return getattr(torch, 'auto' + 'grad').grad(x.sum(), x)",
     r"uses getattr"),
    ("01_chain_rule", "relu_grad", "import importlib\ndef relu_grad(x):\n"
     "    return importlib.import_module('torch.auto' + 'grad').grad(x.sum(), x)", r"uses importlib"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    return __import__('torch.autograd', fromlist=['grad'])",
     r"uses __import__"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    try:\n        raise ValueError\n"
     "    except ValueError as e:\n        e.__traceback__.tb_frame.f_back\n    return (x > 0).to(x.dtype)",
     r"reaches \.__traceback__"),
    ("01_chain_rule", "relu_grad", "import sys\ndef relu_grad(x):\n    sys._getframe(1)\n    return x",
     r"reaches sys\._getframe, a private part"),
    ("01_chain_rule", "relu_grad", "import inspect\ndef relu_grad(x):\n    inspect.stack()\n    return x",
     r"uses inspect"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    ().__class__.__base__.__subclasses__()\n    return x",
     r"reaches \.__base__"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    return vars(__import__('sys'))['modules']", r"uses vars"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    return Out[3](x)", r"uses IPython's Out"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    get_ipython().run_cell('x = 1')\n    return x",
     r"get_ipython\(\)\.run_cell"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    import ctypes\n    return x", r"uses ctypes"),
    ("01_chain_rule", "relu_grad", "def relu_grad(x):\n    import helper_i_wrote\n    return helper_i_wrote.slope(x)",
     r"imports helper_i_wrote, a module the judge does not read"),
    ("03_vjp", "vjp_relu", "def vjp_relu(x, g):\n    with torch._C._DisableTorchDispatch():\n"
     "        return g * (x > 0).to(g.dtype)", r"reaches torch\._C, a private part of torch"),
    ("03_vjp", "vjp_tanh", "def vjp_tanh(y, g):\n    return torch.ops.aten.tanh_backward(g, y)", r"reaches torch\.ops"),
    ("03_vjp", "unbroadcast", "def unbroadcast(g, shape):\n    return g.sum_to_size(shape)", r"calls \.sum_to_size"),
    ("03_vjp", "StableLogSumExp", "class StableLogSumExp(torch.autograd.Function):\n    @staticmethod\n"
     "    def forward(ctx, x):\n        return torch.special.logsumexp(x, -1)\n", r"reaches torch\.special\.logsumexp"),
    ("05_loss_scaling", "DynamicLossScaler", "class DynamicLossScaler(torch.cuda.amp.GradScaler):\n    pass",
     r"reaches torch\.amp\.GradScaler"),
    ("06_checkpointing", "checkpoint", "from torch.utils import checkpoint as c\ndef checkpoint(fn, *args):\n"
     "    return c.checkpoint(fn, *args, use_reentrant=True)", r"reaches torch\.utils\.checkpoint"),
    ("07_by_hand", "batchnorm_backward", "def batchnorm_backward(*args):\n    return F.batch_norm", r"batch_norm"),
    ("08_higher_order", "hvp", "def hvp(f, x, v):\n    return torch.autograd.functional.hvp(f, x, v)[1]",
     r"reaches torch\.autograd\.functional"),
    ("09_kernels", "silu_forward", "@triton.jit\ndef nothing(x_ptr):\n    pass\n\n\ndef silu_forward(x):\n"
     "    nothing[(1,)](x)\n    with torch._C._DisableTorchDispatch():\n        return F.silu(x)",
     r"reaches torch\._C"),
    ("09_kernels", "silu_forward", "import numpy as np\ndef silu_forward(x):\n"
     "    return torch.as_tensor(x.cpu().numpy() / (1 + np.exp(-x.cpu().numpy())))",
     r"uses torch\.as_tensor outside a kernel"),
    ("09_kernels", "silu_forward", "from torch.utils._python_dispatch import _disable_current_modes\n"
     "def silu_forward(x):\n    with _disable_current_modes():\n        return x * torch.sigmoid(x)",
     r"reaches torch\.utils\._python_dispatch, a private part"),
    ("09_kernels", "rmsnorm_backward", "def rmsnorm_backward(grad_out, x, weight, rstd):\n"
     "    return grad_out * x, (grad_out * x).sum(0)", r"calls \.sum\(\) outside a kernel"),
    ("09_kernels", "silu_forward", "@triton.jit\ndef k(x_ptr, y_ptr, BLOCK: tl.constexpr):\n"
     "    i = tl.arange(0, BLOCK)\n    tl.store(y_ptr + i, torch.sigmoid(tl.load(x_ptr + i)))\n\n\n"
     "def silu_forward(x):\n    y = torch.empty_like(x)\n    k[(1,)](x, y, BLOCK=1024)\n    return y",
     r"uses torch\.sigmoid inside a Triton kernel"),
]


@pytest.mark.parametrize("name, graded, answer, says", ANSWER_ATTACKS, ids=lambda v: str(v)[:40])
def test_an_answer_that_breaks_its_rule_is_refused_with_the_line_and_the_rule(name, graded, answer, says):
    found = verdicts(name, {graded: answer})
    assert graded in found, f"{graded} not refused: {answer}"
    assert re.search(says, found[graded].message()), found[graded].message()


def test_a_forbidden_call_costs_its_own_exercise_and_those_that_use_it_only():
    """Reflection that the notebook runs at top level (a released cell calls every answer) refuses every
    by-hand exercise; a call the rule forbids refuses the answers that reach it: 09's Functions call its
    forward and backward."""
    assert set(verdicts("01_chain_rule", {"relu_grad": "def relu_grad(x):\n    return torch.func.grad(x)"})) == \
        {"relu_grad"}
    assert set(verdicts("09_kernels", {"silu_forward": "def silu_forward(x):\n    return x * torch.sigmoid(x)"})) == \
        {"silu_forward", "TritonSiLU"}


# Top-level code outside the release that patches or reflects: every by-hand exercise of the notebook is
# refused, with the line.
TOP_LEVEL_ATTACKS = [
    ("01_chain_rule", "from autograder import checks\nimport contextlib\n"
     "checks.student_calls._autograd_forbidden = lambda e: contextlib.nullcontext()",
     r"changes autograder\.checks\.student_calls\._autograd_forbidden"),
    ("01_chain_rule", "enter = torch._C._enter_dual_level\nmake = torch._VF._make_dual", r"reaches torch\._C"),
    ("01_chain_rule", "import autograder\nautograder.\\\n    checks.student_calls._autograd_forbidden = None",
     r"changes autograder\.checks"),
    ("01_chain_rule", "torch.relu = torch.autograd.grad", r"changes torch\.relu"),
    ("01_chain_rule", "import base64\nexec(base64.b64decode('cHJpbnQoMSk='))", r"uses exec"),
    ("01_chain_rule", "import builtins\nbuiltins.all = lambda *a: True", r"uses builtins"),
    ("01_chain_rule", "import sys\nsys.settrace(None)", r"reaches sys\.settrace"),
    ("01_chain_rule", "def patch():\n    setattr(torch, 'relu', None)\npatch()", r"uses setattr"),
    ("01_chain_rule", "%run helper.py", r"runs the magic %run"),
    ("01_chain_rule", "import helper_i_wrote", r"imports helper_i_wrote, a module the judge does not read"),
    ("01_chain_rule", "from unittest import mock\nmock.patch('torch.relu', torch.abs).start()", r"uses unittest"),
    ("01_chain_rule", "import dataclasses\n@dataclasses.dataclass\nclass Record:\n"
     "    __module__ = 'autograder.no_such_module'", r"sets a class's __module__"),
    ("09_kernels", "from torch.utils._python_dispatch import _disable_current_modes",
     r"reaches torch\.utils\._python_dispatch, a private part of torch"),
    ("01_chain_rule", "try:\n    import ctypes\nexcept ImportError:\n    pass", r"uses ctypes"),
    ("09_kernels", "from autograder.checks import kernel_guard\nkernel_guard.run_guarded = lambda *a, **k: None",
     r"changes autograder\.checks\.kernel_guard\.run_guarded"),
]


@pytest.mark.parametrize("name, top, says", TOP_LEVEL_ATTACKS, ids=lambda v: str(v)[:40])
def test_a_notebook_that_patches_or_reflects_at_top_level_has_every_by_hand_exercise_refused(name, top, says):
    found = verdicts(name, top=[top])
    assert set(found) == set(judge.rules_of(name)), found
    assert all(re.search(says, v.message()) and "cannot have its by-hand exercises judged" in v.message()
               for v in found.values()), [v.message() for v in found.values()]


@pytest.mark.parametrize("top", [
    "%timeit relu_grad(torch.ones(3))", "import sqlite3\nfrom tqdm.auto import tqdm",
    "from __future__ import annotations",
    "torch.backends.cudnn.deterministic = True", "import os\nprint(os.getcwd())",
    "for _ in range(3):\n    pass", "torch.manual_seed(0)\nplt.rcParams['figure.dpi'] = 80",
])
def test_ordinary_notebook_code_is_not_refused(top):
    assert verdicts("01_chain_rule", {"relu_grad": RELU}, top=[top]) == {}


def test_the_released_cells_are_the_courses_even_where_a_student_adds_to_them():
    """The Colab cell reads sys.modules and imports importlib: the course's lines; a line the student adds
    to it is the student's."""
    nb = notebook("01_chain_rule")
    colab = next(c for c in nb.cells if c.cell_type == "code" and "google.colab" in c.source)
    assert judge.judge(nb, judge.baseline(ROOT, "01_chain_rule")) == {}
    colab.source += "\n    sys.modules['torch'].autograd.grad"
    found = judge.judge(nb, judge.baseline(ROOT, "01_chain_rule"))
    assert found and all("reaches sys.modules" in v.message() for v in found.values())


@pytest.mark.parametrize("name", course.assignment_names())
def test_no_reference_solution_and_no_blank_notebook_is_refused(name):
    base = judge.baseline(ROOT, name)
    assert judge.judge(course.read(course.solution_path(name)), base) == {}
    assert judge.judge(course.read(course.release_path(name)), base) == {}


def _judged_entries():
    """(notebook, graded name, label, source) of every right entry of the catalogue that the judge rules on
    and that is written as one function or class (those that build a dict of names are skipped)."""
    found = []
    for notebook_name, names in mutants.load_all().items():
        for graded, kinds in names.items():
            if (notebook_name, graded) in judge.RULES:
                found += [(notebook_name, graded, label, fn) for label, fn in kinds["right"] if callable(fn)]
    return found


@pytest.mark.parametrize("case", _judged_entries(), ids=lambda c: f"{c[0]}:{c[1]}:{c[2]}")
def test_no_right_answer_of_the_catalogue_is_refused(case):
    """Pasted as a student would (its own imports inside); an entry that imports helpers of its catalogue
    module finds them in a cell of their own, as a student's earlier cell would hold them."""
    name, graded, label, fn = case
    answer = source_of(fn, graded)
    helpers = re.findall(r"^\s*from (mutants\.\w+) import .*$", answer, flags=re.M)
    nb = notebook(name, {graded: re.sub(r"^\s*from mutants\.\w+ import .*$", "", answer, flags=re.M)})
    for module in dict.fromkeys(helpers):
        text = inspect.getsource(importlib.import_module(module))
        nb.cells.append(nbformat.v4.new_code_cell(re.sub(r"^@.*$", "", text, flags=re.M), metadata={
            "nbgrader": {"grade": True, "solution": False, "grade_id": "helpers", "points": 0}}))
    found = judge.judge(nb, judge.baseline(ROOT, name))
    assert graded not in found, (label, found[graded].message())


def _refusing(keyword) -> bool:
    """`no_autograd=True`, or `forbid=` some calls (not a parameter passed on, not empty)."""
    value = keyword.value
    if keyword.arg == "no_autograd":
        return isinstance(value, ast.Constant) and value.value is True
    return keyword.arg == "forbid" and not isinstance(value, ast.Name) and not (
        isinstance(value, ast.Tuple) and not value.elts)


def guarding_functions() -> set:
    """Names of the functions of autograder/checks that refuse autograd or forbid a call (`no_autograd=True`,
    `forbid=...`, a run under `guarded`, notebook 09's kernel guard), directly or through another of them
    (by name: a helper of the same name elsewhere counts too, which can only add grade cells to check)."""
    calls, guards = {}, set()
    for path in (ROOT / "autograder" / "checks").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = list(ast.walk(node))
                if any(isinstance(k, ast.keyword) and _refusing(k) for k in inner) or node.name in ("run_guarded",
                                                                                                   "guarded"):
                    guards.add(node.name)
                calls.setdefault(node.name, set()).update(  # called or handed on (functools.partial(run_guarded, ...))
                    n.id if isinstance(n, ast.Name) else n.attr for n in inner
                    if isinstance(n, (ast.Name, ast.Attribute)))
    while True:
        more = {name for name, called in calls.items() if called & guards} - guards
        if not more:
            return guards
        guards |= more


def test_the_rules_cover_every_grade_cell_whose_checks_refuse_autograd_or_a_call():
    """A grade cell whose checks ask for no autograd or forbid a call (directly, or through a check helper that
    does) must have its rule here, so that the judge holds it too."""
    guards = guarding_functions()
    assert {"check_vjp", "check_batchnorm_backward", "check_silu_forward", "check_against_gradscaler"} <= guards
    missing = []
    for name in course.assignment_names():
        for cell in course.grade_cells(course.read(course.solution_path(name))):
            graded = course.graded_name(course.nbgrader_meta(cell)["grade_id"])
            called = {c.func.id if isinstance(c.func, ast.Name) else c.func.attr
                      for c in ast.walk(ast.parse(cell.source))
                      if isinstance(c, ast.Call) and isinstance(c.func, (ast.Name, ast.Attribute))}
            if called & guards and (name, graded) not in judge.RULES:
                missing.append((name, graded, sorted(called & guards)))
    assert missing == [], f"grade cells with a by-hand rule the judge does not hold: {missing}"


def test_code_nested_too_deeply_to_read_is_refused_not_a_crash():
    deep = "def relu_grad(x):\n    return " + " + ".join(["x"] * 2000)  # Python compiles it; walking it recurses
    found = verdicts("01_chain_rule", {"relu_grad": deep})
    assert found and all("too deeply" in v.message() for v in found.values())


def test_every_refusal_names_the_cell_and_the_line_it_read():
    nb = notebook("01_chain_rule", {"relu_grad": "def relu_grad(x):\n    return torch.autograd.grad(x.sum(), x)"})
    found = judge.cell_verdicts(nb, judge.baseline(ROOT, "01_chain_rule"))
    cell = next(i for i, c in enumerate(nb.cells, start=1) if c.source.startswith("def relu_grad"))
    assert set(found) == {"relu_grad"}
    assert f"cell {cell}, line 2 (return torch.autograd.grad(x.sum(), x))" in found["relu_grad"]


def test_a_name_is_followed_through_every_way_a_notebook_binds_it():
    """Imports, aliases, assignments, attribute chains, star imports, globals set in a function, nested
    functions, lambdas, methods and decorators: the forbidden call is found wherever the name led."""
    ways = [
        "from torch.autograd import *\ndef relu_grad(x):\n    return grad(x.sum(), x)",
        "import torch.autograd as ag\nslope = ag\ndef relu_grad(x):\n    return slope.grad(x.sum(), x)",
        "def relu_grad(x):\n    def inner(t):\n        return torch.autograd.grad(t.sum(), t)\n    return inner(x)",
        "def relu_grad(x):\n    return (lambda t: torch.autograd.grad(t.sum(), t))(x)",
        "def setup():\n    global g\n    g = torch.autograd.grad\ndef relu_grad(x):\n    return g(x.sum(), x)",
        "class Slope:\n    def of(self, x):\n        return torch.autograd.grad(x.sum(), x)\n"
        "def relu_grad(x):\n    return Slope().of(x)",
        "def with_grad(f):\n    return lambda x: torch.autograd.grad(f(x).sum(), x)\n@with_grad\ndef relu_grad(x):\n"
        "    return torch.relu(x)",
    ]
    for way in ways:
        found = verdicts("01_chain_rule", {"relu_grad": way})
        assert "relu_grad" in found, way


def test_a_finding_knows_its_lines():
    source = "import torch\nx = (torch.\n     _C)"
    cell = notebook_code.Cell(1, source, ast.parse(source), test=False)
    reader = reading.Reader(notebook_code.NotebookCode([cell]))
    reader.read_cell(cell)
    assert [(f.site.line, list(f.lines)) for f in reader.findings] == [(2, [2, 3])]
