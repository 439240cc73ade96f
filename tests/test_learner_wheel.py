"""The learner's wheel (what `pip install` of this repository and the Colab first cell install)
holds no answer: no grader, no answer key, and no function that is a reference solution written
again. Every module of it imports from an unpacked copy with no checkout beside it.

References are the solution cells of every `solutions/*/*.ipynb` and every `@answer` definition
of every `solutions/*/answer_key.py`. Each function and class (methods and nested functions
included) is normalised: its own name, docstrings, decorators and annotations dropped, every
identifier renamed in order of first use (v0, v1, ...). A function of the wheel whose normalised
form equals a reference's, with 3 or more statements in its body, is a copy; so is a class of the
wheel that equals a reference class. So is a function whose syntax-tree token sequence
(identifiers dropped) is at least 75% the same as a reference's of 60 tokens or more (difflib's
ratio): that finds a copy with a statement added, an expression given a name or a step reordered.
Calibration, on the tree of issue 14: the references that had been copied into the checks scored
0.79 to 1.0 against their solutions; the most similar unrelated pair of 60+ tokens scored 0.64.

A shorter reference (most of 01's and 03's answers are one line) is searched for by what it
computes: its body with its local names inlined (`s = sigmoid(x); return s * (1 - s)` becomes
`sigmoid(x) * (1 - sigmoid(x))`), normalised, found anywhere in the wheel (any expression, or any
run of statements, of any block, with the block's own names inlined the same way). Only where that
is the learner's own arithmetic: an operator (or a statement such as `with`) and 10 tokens or more.
A body that only calls something (`torch.round(x)`, `Checkpoint.apply(fn, *args)`, `model(x)`) or
returns its argument is what the checks legitimately do when they compare with PyTorch or call the
learner's code; such a method is searched as part of its class. Calibration, on the tree this search
was added to: the smallest graded answer searched this way, `g * (x > 0)`, has 10 tokens; what the
checks share with short references is `a + b`, `a * b`, `[]` (6 tokens or fewer) and the calls above.

Syntax misses an answer written another way (issue 37: the saved-tensor ledger was 06's `saved_bytes` with three
lines around it). So the wheel is also searched by behaviour (tests/wheel_behaviour.py): every function and method
of the installed package is called on each graded function's inputs, and by the routes a helper could take (a
context manager around the graded call, a function of its thunk or of its output); one that gives the reference
solution's results, under the exercise's by-hand rule, computes the answer. What it finds today is listed, with
why, in KNOWN_IN_THE_WHEEL; anything else fails.
"""
import ast
import copy
import dataclasses
import difflib
import functools
import itertools
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import typing
import zipfile

import course
import importgraph
import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager
from packaging.version import Version

MIN_STATEMENTS = 3
NEAR_RATIO, NEAR_MIN_TOKENS = 0.75, 60
SHORT_MIN_TOKENS = 10
OPERATORS = (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.AugAssign)
INLINE_MAX_NODES = 100  # a longer value is not inlined, so that chains of names cannot grow without bound


# --- normalising functions ----------------------------------------------------------------------

class Work(typing.NamedTuple):
    """What a short function computes: one expression, or its statements, with its local names inlined."""
    tokens: tuple
    key: str


@dataclasses.dataclass
class Function:
    where: str       # file (and cell) it comes from
    name: str        # qualified name
    line: int
    exact: str       # ast.dump of the normalised function or class
    tokens: tuple    # preorder node types, attribute names and constants, no identifiers
    statements: int
    is_class: bool
    work: Work | None  # for a function of fewer than MIN_STATEMENTS statements whose work is the learner's own

    def __str__(self):
        return f"{self.where}:{self.line} {self.name}"

    @property
    def searched(self) -> bool:
        return self.is_class or self.statements >= MIN_STATEMENTS or self.work is not None


class _Normalise(ast.NodeTransformer):
    """Drops names, docstrings, decorators, annotations; renames identifiers in order of first use."""

    def __init__(self):
        self.names = {}

    def canonical(self, name):
        return self.names.setdefault(name, f"v{len(self.names)}")

    def _strip(self, node):
        if _docstring(node):
            node.body = node.body[1:] or [ast.Pass()]
        node.decorator_list = []
        return node

    def visit_FunctionDef(self, node):
        node.name = self.canonical(node.name)
        node.returns = None
        return self.generic_visit(self._strip(node))

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        node.name = self.canonical(node.name)
        return self.generic_visit(self._strip(node))

    def visit_Name(self, node):
        node.id = self.canonical(node.id)
        return node

    def visit_arg(self, node):
        node.arg, node.annotation = self.canonical(node.arg), None
        return node

    def visit_ExceptHandler(self, node):
        if node.name:
            node.name = self.canonical(node.name)
        return self.generic_visit(node)

    def visit_alias(self, node):
        if node.asname:
            node.asname = self.canonical(node.asname)
        return node

    def visit_Global(self, node):
        node.names = [self.canonical(n) for n in node.names]
        return node

    visit_Nonlocal = visit_Global


def _docstring(node) -> bool:
    body = node.body
    return bool(body) and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
        and isinstance(body[0].value.value, str)


def _tokens(node, memo=None) -> tuple:
    """Node types in preorder, with attribute names, constants and operators; identifiers left out.
    `memo`, where given, receives {id(subtree): its tokens} for every subtree on the way."""
    head = (type(node).__name__,)
    if isinstance(node, ast.Attribute):
        head += ("." + node.attr,)
    elif isinstance(node, ast.Constant):
        head += (repr(node.value)[:40],)
    out = head + tuple(itertools.chain.from_iterable(_tokens(c, memo) for c in ast.iter_child_nodes(node)))
    if memo is not None:
        memo[id(node)] = out
    return out


def key(node) -> str:
    """The normalised form of an expression or a list of statements."""
    node = ast.Module(body=node, type_ignores=[]) if isinstance(node, list) else node
    return ast.dump(_Normalise().visit(copy.deepcopy(node)))


class _Inline(ast.NodeTransformer):
    def __init__(self, values):
        self.values = values

    def visit_Name(self, node):
        known = isinstance(node.ctx, ast.Load) and node.id in self.values
        return copy.deepcopy(self.values[node.id]) if known else node


def _sets_a_name(statement) -> bool:
    return isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
        and isinstance(statement.targets[0], ast.Name)


def inlined(block: list) -> list:
    """`block` with each name that a plain `name = value` of it set earlier replaced by that value
    (statements with nothing to replace are the block's own nodes, not copies)."""
    values, out = {}, []
    for statement in block:
        names = [n for n in ast.walk(statement) if isinstance(n, ast.Name)]
        if any(isinstance(n.ctx, ast.Load) and n.id in values for n in names):
            statement = _Inline(values).visit(copy.deepcopy(statement))
        for name in names:
            if not isinstance(name.ctx, ast.Load):
                values.pop(name.id, None)
        if _sets_a_name(statement) and sum(1 for _ in ast.walk(statement.value)) <= INLINE_MAX_NODES:
            values[statement.targets[0].id] = statement.value
        out.append(statement)
    return out


def _work(fn) -> Work | None:
    """What `fn` computes (see the module's docstring), or None where it only calls or returns something."""
    kept = [s for s in inlined(fn.body[1:] if _docstring(fn) else fn.body) if not _sets_a_name(s)]
    if len(kept) == 1 and isinstance(kept[0], ast.Return) and kept[0].value is not None:
        kept = kept[0].value
        own = any(isinstance(n, OPERATORS) for n in ast.walk(kept))
    else:
        own = bool(kept)
    tokens = _tokens(ast.Module(body=kept, type_ignores=[]) if isinstance(kept, list) else kept)
    return Work(tokens, key(kept)) if own and len(tokens) >= SHORT_MIN_TOKENS else None


def normalise(fn: ast.FunctionDef | ast.ClassDef, where: str, name: str) -> Function:
    tree = _Normalise().visit(copy.deepcopy(fn))
    tree.name = "_"
    statements = sum(isinstance(n, ast.stmt) for n in ast.walk(tree)) - 1  # the def itself is not its body
    is_class = isinstance(fn, ast.ClassDef)
    work = None if is_class or statements >= MIN_STATEMENTS else _work(fn)
    return Function(where, name, fn.lineno, ast.dump(tree), _tokens(tree), statements, is_class, work)


def functions(tree: ast.AST, where: str, prefix: str = "") -> list:
    """Every function, method and class in `tree`, nested ones included, with qualified names."""
    found = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = prefix + node.name
            found.append(normalise(node, where, name))
            found += functions(node, where, name + ".")
        else:
            found += functions(node, where, prefix)
    return found


@functools.cache
def read_module(text: str, where: str) -> tuple:
    """A module's functions, and its blocks with their names inlined, each with {id: tokens} of its subtrees
    (read once per run: every notebook's references are searched for in the same wheel)."""
    tree = ast.parse(text, filename=where)
    blocks = []
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                block, memo = inlined(block), {}
                for statement in block:
                    _tokens(statement, memo)
                blocks.append((block, memo))
    return functions(tree, where), blocks


def work_sites(blocks: list, where: str, wanted: set) -> dict:
    """{key: 'file:line'} of every expression and every run of fewer than MIN_STATEMENTS statements of
    `blocks` whose tokens are in `wanted` (the rest cannot match)."""
    sites = {}
    for block, memo in blocks:
        for i, statement in enumerate(block):
            for run in (block[i:i + n] for n in range(1, MIN_STATEMENTS) if i + n <= len(block)):
                if ("Module", *itertools.chain.from_iterable(memo[id(s)] for s in run)) in wanted:
                    sites.setdefault(key(run), f"{where}:{statement.lineno}")
            for expression in ast.walk(statement):
                if isinstance(expression, ast.expr) and memo[id(expression)] in wanted:
                    sites.setdefault(key(expression), f"{where}:{expression.lineno}")
    return sites


# --- the references -----------------------------------------------------------------------------

def answer_key_functions(path: pathlib.Path, where: str) -> list:
    """The functions of every `@answer` function or class of an answer key (methods included)."""
    found = []
    for node in course.answers(path):
        found += functions(ast.Module(body=[node], type_ignores=[]), f"{where} [{node.name}]")
    return found


def solution_cell_functions(path: pathlib.Path, where: str) -> list:
    found = []
    for cell in course.solution_cells(nbformat.read(path, as_version=4)):
        source = TransformerManager().transform_cell(cell.source)
        cell_id = course.nbgrader_meta(cell).get("grade_id", cell.get("id"))
        found += functions(ast.parse(source), f"{where} [{cell_id}]")
    return found


def references(root=course.ROOT) -> dict:
    """{notebook: [Function]} from its solution notebook and its answer key, where they exist (those
    that are not `searched` included, so that a test can see that every cell and key has one that is)."""
    refs = {}
    for folder in sorted(p for p in (root / "solutions").iterdir() if p.is_dir()):
        found = []
        for nb in sorted(folder.glob("*.ipynb")):
            found += solution_cell_functions(nb, str(nb.relative_to(root)))
        key = folder / "answer_key.py"
        if key.is_file():
            found += answer_key_functions(key, str(key.relative_to(root)))
        refs[folder.name] = found
    return refs


# --- comparing ----------------------------------------------------------------------------------

def near(a: tuple, b: tuple) -> bool:
    if min(len(a), len(b)) < NEAR_MIN_TOKENS or 2 * min(len(a), len(b)) / (len(a) + len(b)) < NEAR_RATIO:
        return False
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return matcher.real_quick_ratio() >= NEAR_RATIO and matcher.quick_ratio() >= NEAR_RATIO \
        and matcher.ratio() >= NEAR_RATIO


def copies(refs: list, tree: pathlib.Path) -> list:
    """'wheel function ~ reference' for every function under `tree` that is a reference written again."""
    wanted = {ref.work.tokens for ref in refs if ref.work is not None}
    candidates, sites = [], {}
    for path in sorted(tree.rglob("*.py")):
        where = str(path.relative_to(tree))
        found_here, blocks = read_module(path.read_text(), where)
        candidates += found_here
        sites = work_sites(blocks, where, wanted) | sites  # the first site of each key is kept
    found = []
    for ref in [ref for ref in refs if ref.searched]:
        if ref.work is not None:
            if ref.work.key in sites:
                found.append(f"{sites[ref.work.key]} computes what {ref} does (same code, names changed at most)")
            continue
        for fn in candidates:
            if fn.is_class != ref.is_class:
                continue
            if fn.exact == ref.exact:
                found.append(f"{fn} is {ref} written again (same structure, names changed at most)")
            elif not ref.is_class and fn.statements >= MIN_STATEMENTS and near(fn.tokens, ref.tokens):
                found.append(f"{fn} is {ref} nearly written again ({NEAR_RATIO:.0%}+ of its syntax tree the same)")
    return found


# --- the wheel ----------------------------------------------------------------------------------

def modern_setuptools() -> bool:
    """setuptools 70.1 or newer is here: it builds wheels without the `wheel` package."""
    try:
        import setuptools
    except ImportError:
        return False
    return Version(setuptools.__version__) >= Version("70.1")


def build_wheel(out: pathlib.Path) -> pathlib.Path:
    """The learner's wheel of a copy of this tree (pyproject.toml, README.md, autograder/), as pip builds it."""
    src = out / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(course.ROOT / name, src / name)
    shutil.copytree(course.ROOT / "autograder", src / "autograder", ignore=shutil.ignore_patterns("__pycache__"))
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out / "dist"), str(src)]
    if modern_setuptools():  # offline, with this environment's setuptools; else pip fetches one
        command.insert(4, "--no-build-isolation")
    built = subprocess.run(command, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (out / "dist").glob("backprop_course-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def unpacked(wheel, tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    zipfile.ZipFile(wheel).extractall(site)
    return site


def test_wheel_holds_no_grader_and_no_answer_key(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("autograder/learner/") for n in names) and any(n.startswith("autograder/checks/")
                                                                           for n in names), names
    assert [n for n in names if n.startswith("autograder/grader/") or pathlib.PurePath(n).name == "answer_key.py"
            or n.startswith("solutions/")] == []


def test_every_package_of_the_tree_but_the_grader_is_in_the_wheel(wheel):
    """A new subpackage (autograder/checks/nb04_toggles/, ...) is packaged without anyone listing it."""
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {str(p.relative_to(course.ROOT)) for p in (course.ROOT / "autograder").rglob("*.py")
              if "__pycache__" not in p.parts and "grader" not in p.relative_to(course.ROOT).parts}
    assert sorted(wanted - names) == []


REFERENCES = references()


@pytest.mark.parametrize("notebook", sorted(REFERENCES))
def test_no_reference_solution_is_in_the_wheel(notebook, unpacked):
    refs = REFERENCES[notebook]
    assert refs, f"no reference of {notebook} was read: the scan would prove nothing"
    found = copies(refs, unpacked)
    assert found == [], "the learner's wheel holds answers:\n" + "\n".join(found)


def test_every_solution_cell_and_every_answer_is_searched_for():
    """A cell or `@answer` whose every function is too plain to search for (see the module's docstring)
    would go through the scan unchecked: there is none."""
    searched = {}
    for ref in (ref for refs in REFERENCES.values() for ref in refs):
        searched[ref.where] = searched.get(ref.where, False) or ref.searched
    assert searched and [where for where, any_searched in searched.items() if not any_searched] == []


def wheel_modules(site: pathlib.Path) -> list:
    return sorted(importgraph.modules(site))


def test_every_module_imports_from_the_wheel_alone(unpacked):
    """In a fresh interpreter whose path holds the unpacked wheel and this environment's third-party
    packages, but no checkout and no editable install (-S: no .pth files run)."""
    modules = wheel_modules(unpacked)
    assert "autograder.learner.quiz" in modules and "autograder.checks.compare" in modules, modules
    paths = [str(unpacked)] + sorted({sysconfig.get_paths()[k] for k in ("purelib", "platlib")})
    probe = f"""
import importlib, importlib.util, pathlib, sys, traceback
assert importlib.util.find_spec("autograder.grader") is None, "autograder.grader is importable: not the wheel alone"
failed = []
for module in {modules!r}:
    try:
        loaded = importlib.import_module(module)
        assert pathlib.Path(loaded.__file__).is_relative_to({str(unpacked)!r}), loaded.__file__
    except BaseException:
        failed.append(module + ": " + traceback.format_exc(limit=-3))
failed += [name + " was imported" for name in sys.modules if name.startswith("autograder.grader")]
print("\\n".join(failed) or "ok")
"""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    ran = subprocess.run([sys.executable, "-S", "-P", "-c", probe], cwd=unpacked.parent, capture_output=True,
                         text=True, env={**env, "PYTHONPATH": os.pathsep.join(paths), "MPLBACKEND": "Agg"},
                         timeout=300)
    assert ran.returncode == 0 and ran.stdout.strip() == "ok", (ran.stdout + ran.stderr)[-4000:]


def test_nothing_in_the_wheel_imports_the_grader(unpacked):
    """Read, not run: function-level and importlib imports of autograder.grader count too."""
    found = []
    for module, path in importgraph.modules(unpacked).items():
        tree = ast.parse(path.read_text())
        found += [f"{path.relative_to(unpacked)}:{line}: {name}"
                  for line, name in importgraph.raw_imports(tree, module, path.name == "__init__.py")
                  if name == "autograder.grader" or name.startswith("autograder.grader.")]
    assert found == []


# --- the scans can fail -------------------------------------------------------------------------

def renamed(fn_source: str) -> str:
    """The same function with every identifier renamed, its docstring replaced and a comment added."""
    tree = ast.parse(fn_source)

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node):
            node.id = "renamed_" + node.id
            return node

        def visit_arg(self, node):
            node.arg = "renamed_" + node.arg
            return node

    tree = Rename().visit(tree)
    fn = tree.body[0]
    fn.name = "innocent_helper"
    assert isinstance(fn.body[0].value, ast.Constant), "the reference should have a docstring"
    fn.body[0] = ast.Expr(ast.Constant("Nothing to see here."))
    return "# a helper\n" + ast.unparse(tree) + "\n"


def a_reference_source(notebook="04_toggles", name="grad_fn_names"):
    for cell in course.solution_cells(course.read(course.solution_path(notebook))):
        tree = ast.parse(TransformerManager().transform_cell(cell.source))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return ast.unparse(node)
    raise LookupError(name)


def test_a_planted_reference_is_found(tmp_path):
    refs = REFERENCES["04_toggles"]
    fake = tmp_path / "fake_wheel" / "autograder" / "checks"
    fake.mkdir(parents=True)
    (fake / "helpers.py").write_text("import collections\n\n\n" + renamed(a_reference_source()))
    found = [f for f in copies(refs, tmp_path / "fake_wheel") if "04_toggles.ipynb" in f]  # (the key's is near)
    assert len(found) == 1 and "autograder/checks/helpers.py:" in found[0] and "innocent_helper" in found[0] \
        and "grad_fn_names" in found[0] and "written again (same structure" in found[0], found


def test_a_reference_with_a_named_subexpression_is_nearly_found(tmp_path):
    source = a_reference_source().replace("if t.grad_fn is None:", "root = t.grad_fn\n    if root is None:")
    assert "root = t.grad_fn" in source
    fake = tmp_path / "fake_wheel"
    fake.mkdir()
    (fake / "walk.py").write_text("import collections\n\n\n" + source + "\n")
    found = [f for f in copies(REFERENCES["04_toggles"], fake) if "04_toggles.ipynb" in f]
    assert len(found) == 1 and "nearly written again" in found[0], found


REACHABLE = '''
def reachable_nodes(t):
    """Every autograd node reachable from t.grad_fn, as a set: no order, so not grad_fn_names."""
    found, stack = set(), [t.grad_fn] if t.grad_fn is not None else []
    while stack:
        node = stack.pop()
        if node in found:
            continue
        found.add(node)
        stack.extend(child for child, _ in node.next_functions if child is not None)
    return found
'''


ALL_REFERENCES = [ref for refs in REFERENCES.values() for ref in refs]


def test_a_planted_short_reference_is_found(tmp_path):
    fake = tmp_path / "fake_wheel"
    fake.mkdir()
    source = renamed(a_reference_source("01_chain_rule", "sigmoid_grad"))
    (fake / "helpers.py").write_text("import torch\n\n\n" + source)
    found = copies(ALL_REFERENCES, fake)
    assert len(found) == 1 and found[0].startswith("helpers.py:") and "sigmoid_grad_solution" in found[0] \
        and "computes what" in found[0], found


INLINED_INTO_A_CHECK = {
    "sigmoid_grad": "def check(student, x):\n    expected = torch.sigmoid(x) * (1 - torch.sigmoid(x))\n"
                    "    assert torch.allclose(student(x), expected)\n",
    "vjp_relu": "def check(student, x, g):\n    s = student(x, g)\n    if not torch.equal(s, g * (x > 0)):\n"
                "        raise AssertionError('differs')\n",
    "vjp_tanh": "def check(student, y, g):\n    one = 1\n    want = g * (one - y * y)\n    return want\n",
    "predict": "def check(m, x):\n    assert torch.is_grad_enabled()\n    with torch.inference_mode():\n"
               "        return m(x)\n",
}


@pytest.mark.parametrize("name", sorted(INLINED_INTO_A_CHECK))
def test_a_short_reference_inside_a_check_is_found(name, tmp_path):
    """Written into a larger function, one expression of it, or split over a name the check gives it."""
    fake = tmp_path / "fake_wheel"
    fake.mkdir()
    (fake / "check.py").write_text("import torch\n\n\n" + INLINED_INTO_A_CHECK[name])
    found = copies(ALL_REFERENCES, fake)
    assert len(found) == 1 and f"[{name}_solution]" in found[0], found


LEGITIMATE_CHECK = '''
import torch


class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g


def compare(cls, model, x, g, *extra):
    leaf = x.detach().requires_grad_(True)
    (want,) = torch.autograd.grad(torch.sigmoid(leaf), leaf, g)
    expected_out, expected_grad = torch.round(x), g.clone()
    out = cls.apply(leaf, *extra)
    with torch.no_grad():
        reference = model(x)
    return want, reference, torch.relu(x), torch.softmax(x, dim=-1), out.grad_fn.apply(g), expected_out, expected_grad
'''


def test_what_the_checks_legitimately_do_is_not_found(tmp_path):
    """Comparisons with PyTorch's built-ins and calls of the learner's code are not answers, even where
    a short answer is one such call (StraightThroughRound.forward is torch.round)."""
    fake = tmp_path / "fake_wheel"
    fake.mkdir()
    (fake / "check.py").write_text(LEGITIMATE_CHECK)
    assert copies(ALL_REFERENCES, fake) == []


def test_a_class_of_plain_methods_is_found_as_a_class(tmp_path):
    fake = tmp_path / "fake_wheel"
    fake.mkdir()
    (fake / "check.py").write_text("import torch\n\n\nclass Rounding(torch.autograd.Function):\n"
                                   "    @staticmethod\n    def forward(ctx, t):\n        return torch.round(t)\n\n"
                                   "    @staticmethod\n    def backward(ctx, grad):\n        return grad\n")
    found = copies(ALL_REFERENCES, fake)
    assert len(found) == 1 and "check.py:4 Rounding is" in found[0] and "StraightThroughRound" in found[0], found


def test_a_graph_walk_that_is_not_the_answer_is_not_found(tmp_path):
    """What a check may do for its own purposes (an unordered reachability set) is not a copy."""
    fake = tmp_path / "fake_wheel"
    fake.mkdir()
    (fake / "walk.py").write_text(REACHABLE)
    assert copies(REFERENCES["04_toggles"], fake) == []


def test_answer_key_definitions_are_references(tmp_path):
    key = tmp_path / "answer_key.py"
    key.write_text("from autograder.grader.keys import answer\n\n\n@answer\nclass Engine:\n"
                   "    def step(self, x):\n        y = x + 1\n        z = y * 2\n        return z\n\n\n"
                   "def helper(x):\n    a = 1\n    b = 2\n    return a + b + x\n")
    found = answer_key_functions(key, "answer_key.py")
    assert [(f.where, f.name, f.statements) for f in found] == [("answer_key.py [Engine]", "Engine", 4),
                                                                ("answer_key.py [Engine]", "Engine.step", 3)]


# --- by behaviour: no function of the wheel computes a graded answer ----------------------------------------------
# The syntax scans above find an answer written again; the behaviour search (tests/wheel_behaviour.py) finds one
# written any way: every function and method of the installed package against every graded function it has cases
# for, on the same inputs, in a fresh interpreter with the wheel alone (its docstring says how).

# What the search finds today and why it stays; anything else it finds fails the test. (A check's reference that
# calls the PyTorch feature its exercise refuses, torch.utils.checkpoint, F.batch_norm or torch.autograd.functional,
# is no answer: the rule refuses it, pasted or called.)
KNOWN_IN_THE_WHEEL = {
    "autograder.learner.memory.SavedTensorLedger, a context manager around fn(*inputs), computes 06_checkpointing's "
    "saved_bytes":
        "the course's counter of saved bytes, which notebook 04 uses two notebooks before 06 asks for one (and 08, 09 "
        "and the checks of 04, 06 and 08 after it); any correct counter of a block is saved_bytes with three lines "
        "around it, so none can be installed without this: 06's rule refuses a call to it (NO_COUNTERS), and 06's "
        "last hint hands over the same code. Issue 37 asks for it gone; that needs 04 and 08 to count otherwise",
    "autograder.learner.memory.measure, a function of the thunk and a device, computes 06_checkpointing's saved_bytes":
        "the same ledger around one step (Measurement.saved_bytes), refused by the same rule",
}

PLANTED = '''
import torch


def relu_backward_helper(x, g):
    return g * (x > 0)


def relu_backward_by_autograd(x, g):
    x = x.detach().requires_grad_(True)
    return torch.autograd.grad(torch.relu(x), x, g)[0]


def silu_in_torch(x):
    return x * torch.sigmoid(x)


class CountingHooks:
    def __enter__(self):
        self.sizes, self.counted = {}, 0

        def pack(t):
            self.sizes[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        self.hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self.hooks.__exit__(*exc)
        self.counted = sum(self.sizes.values())
'''


def behaviour_sources() -> dict:
    """{notebook: {"setup": ..., "solutions": [...]}} for the notebooks the search has cases for."""
    sys.path.insert(0, str(course.ROOT / "tests"))
    import wheel_behaviour
    sources = {}
    for notebook in sorted({key[0] for key in [*wheel_behaviour.CASES, *wheel_behaviour.FUNCTIONS]}):
        nb = course.read(course.solution_path(notebook))
        setup = next(c.source for c in nb.cells if c.cell_type == "code")
        sources[notebook] = {"setup": TransformerManager().transform_cell(setup),
                             "solutions": [TransformerManager().transform_cell(c.source)
                                           for c in course.solution_cells(nb)]}
    return sources


@pytest.fixture(scope="module")
def behaviour(unpacked, tmp_path_factory):
    """One search over the wheel and a planted module beside it (what the search must find and must not)."""
    work = tmp_path_factory.mktemp("behaviour")
    (work / "planted").mkdir()
    (work / "planted" / "planted_answers.py").write_text(PLANTED)
    job = work / "job.json"
    job.write_text(__import__("json").dumps({"sources": behaviour_sources(),
                                             "modules": wheel_modules(unpacked) + ["planted_answers"]}))
    paths = [str(unpacked), str(work / "planted")] + sorted({sysconfig.get_paths()[k] for k in ("purelib", "platlib")})
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env.update(PYTHONPATH=os.pathsep.join(paths), MPLBACKEND="Agg", HOME=str(work),
               COURSE_PROGRESS=str(work / "progress.json"),
               CUDA_VISIBLE_DEVICES="")  # the cases' tensors live on the CPU, and 09's and 10's kernels interpreted
    ran = subprocess.run([sys.executable, "-S", "-P", str(course.ROOT / "tests" / "wheel_behaviour.py"), str(job)],
                         cwd=work, capture_output=True, text=True, env=env, timeout=240)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-4000:]
    return __import__("json").loads(ran.stdout.strip().splitlines()[-1])


def test_no_function_of_the_wheel_computes_a_graded_answer(behaviour):
    assert behaviour["candidates"] > 1000 and behaviour["calls"] > 5000, behaviour
    found = [f for f in behaviour["found"] if not f.startswith("planted_answers.")]
    new = [f for f in found if f not in KNOWN_IN_THE_WHEEL]
    assert new == [], "the learner's wheel computes graded answers:\n" + "\n".join(new)


def test_the_known_answers_are_still_there(behaviour):
    """A known entry that the search no longer finds was fixed: take it off the list."""
    assert sorted(set(KNOWN_IN_THE_WHEEL) - set(behaviour["found"])) == []


def test_the_behaviour_search_finds_an_answer_written_any_way(behaviour):
    planted = sorted(f for f in behaviour["found"] if f.startswith("planted_answers."))
    assert planted == ["planted_answers.CountingHooks, a context manager around fn(*inputs), computes "
                       "06_checkpointing's saved_bytes",
                       "planted_answers.relu_backward_helper computes 03_vjp's vjp_relu"], planted
