"""The learner's wheel (what `pip install` of this repository and the Colab first cell install)
holds no answer: no grader, no answer key, and no function that is a reference solution written
again. Every module of it imports from an unpacked copy with no checkout beside it.

References are the solution cells of every `solutions/*/*.ipynb` and every `@answer` definition
of every `solutions/*/answer_key.py`. Each function (methods and nested functions included) is
normalised: its own name, docstrings, decorators and annotations dropped, every identifier
renamed in order of first use (v0, v1, ...). A function of the wheel whose normalised form
equals a reference's, with 3 or more statements in its body, is a copy. So is one whose
syntax-tree token sequence (identifiers dropped) is at least 75% the same as a reference's of
60 tokens or more (difflib's ratio): that finds a copy with a statement added, an expression given
a name or a step reordered. Calibration, on the tree of issue 14: the references that had been
copied into the checks scored 0.79 to 1.0 against their solutions; the most similar unrelated
pair of 60+ tokens scored 0.64.
"""
import ast
import copy
import dataclasses
import difflib
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import course
import importgraph
import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager
from packaging.version import Version

MIN_STATEMENTS = 3
NEAR_RATIO, NEAR_MIN_TOKENS = 0.75, 60


# --- normalising functions ----------------------------------------------------------------------

@dataclasses.dataclass
class Function:
    where: str       # file (and cell) it comes from
    name: str        # qualified name
    line: int
    exact: str       # ast.dump of the normalised function
    tokens: tuple    # preorder node types, attribute names and constants, no identifiers
    statements: int

    def __str__(self):
        return f"{self.where}:{self.line} {self.name}"


class _Normalise(ast.NodeTransformer):
    """Drops names, docstrings, decorators, annotations; renames identifiers in order of first use."""

    def __init__(self):
        self.names = {}

    def canonical(self, name):
        return self.names.setdefault(name, f"v{len(self.names)}")

    def _strip(self, node):
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
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


def _tokens(node) -> tuple:
    """Node types in preorder, with attribute names, constants and operators; identifiers left out."""
    out = []
    for child in _preorder(node):
        out.append(type(child).__name__)
        if isinstance(child, ast.Attribute):
            out.append("." + child.attr)
        elif isinstance(child, ast.Constant):
            out.append(repr(child.value)[:40])
    return tuple(out)


def _preorder(node):
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(list(ast.iter_child_nodes(current))))


def normalise(fn: ast.FunctionDef, where: str, name: str) -> Function:
    tree = _Normalise().visit(copy.deepcopy(fn))
    tree.name = "_"
    statements = sum(isinstance(n, ast.stmt) for n in _preorder(tree)) - 1  # the def itself is not its body
    return Function(where, name, fn.lineno, ast.dump(tree), _tokens(tree), statements)


def functions(tree: ast.AST, where: str, prefix: str = "") -> list:
    """Every function and method in `tree`, nested ones included, with qualified names."""
    found = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix + node.name
            found.append(normalise(node, where, name))
            found += functions(node, where, name + ".")
        elif isinstance(node, ast.ClassDef):
            found += functions(node, where, prefix + node.name + ".")
        else:
            found += functions(node, where, prefix)
    return found


# --- the references -----------------------------------------------------------------------------

def _is_answer(decorator) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Name) and target.id == "answer") or \
           (isinstance(target, ast.Attribute) and target.attr == "answer")


def answer_key_functions(path: pathlib.Path, where: str) -> list:
    """The functions of every `@answer` function or class of an answer key (methods included)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and any(_is_answer(d) for d in node.decorator_list):
            holder = ast.Module(body=[node], type_ignores=[])
            found += functions(holder, where)
    return found


def solution_cell_functions(path: pathlib.Path, where: str) -> list:
    found = []
    for cell in course.solution_cells(nbformat.read(path, as_version=4)):
        source = TransformerManager().transform_cell(cell.source)
        cell_id = course.nbgrader_meta(cell).get("grade_id", cell.get("id"))
        found += functions(ast.parse(source), f"{where} [{cell_id}]")
    return found


def references(root=course.ROOT) -> dict:
    """{notebook: [Function]} from its solution notebook and its answer key, where they exist."""
    refs = {}
    for folder in sorted(p for p in (root / "solutions").iterdir() if p.is_dir()):
        found = []
        for nb in sorted(folder.glob("*.ipynb")):
            found += solution_cell_functions(nb, str(nb.relative_to(root)))
        key = folder / "answer_key.py"
        if key.is_file():
            found += answer_key_functions(key, str(key.relative_to(root)))
        refs[folder.name] = [f for f in found if f.statements >= MIN_STATEMENTS]
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
    candidates = []
    for path in sorted(tree.rglob("*.py")):
        where = str(path.relative_to(tree))
        candidates += [f for f in functions(ast.parse(path.read_text(), filename=where), where)
                       if f.statements >= MIN_STATEMENTS]
    found = []
    for ref in refs:
        for fn in candidates:
            if fn.exact == ref.exact:
                found.append(f"{fn} is {ref} written again (same structure, names changed at most)")
            elif near(fn.tokens, ref.tokens):
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
    """A new subpackage (autograder/checks/toggles/, ...) is packaged without anyone listing it."""
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {str(p.relative_to(course.ROOT)) for p in (course.ROOT / "autograder").rglob("*.py")
              if "__pycache__" not in p.parts and "grader" not in p.relative_to(course.ROOT).parts}
    assert sorted(wanted - names) == []


REFERENCES = references()


@pytest.mark.parametrize("notebook", sorted(REFERENCES))
def test_no_reference_solution_is_in_the_wheel(notebook, unpacked):
    refs = REFERENCES[notebook]
    assert refs, f"no reference of {notebook} has {MIN_STATEMENTS}+ statements: the scan would prove nothing"
    found = copies(refs, unpacked)
    assert found == [], "the learner's wheel holds answers:\n" + "\n".join(found)


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
    assert [(f.name, f.statements) for f in found] == [("Engine.step", 3)]
