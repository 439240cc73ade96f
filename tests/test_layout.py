"""The package's shape: no import cycles, imports one way (learner <- checks <- grader), no
module so long that it holds more than one idea unless its docstring says why, no module that reaches
a private name of another; and `autograder.checks` in one shape: the core (the modules at its top) and
one package per notebook of solutions/, named after it (`nb07_by_hand`), that imports no other
notebook's package and exports what its grade cells call, which import it one way only
(`from autograder.checks import nb07_by_hand`, then `nb07_by_hand.check_...(...)`).

Imports are read with `ast` (tests/importgraph.py): function-level ones and literal
`importlib.import_module`/`__import__` calls count. The rules are proven able to fail on small
fake trees at the end of this file.
"""
import ast
import re

import course
import importgraph
import pytest

EDGES = importgraph.imports()
MODULES = importgraph.modules()

# Which parts of the package each part may import; the package's own __init__ ships with the learner.
LAYERS = {"learner": {"learner"}, "checks": {"learner", "checks"}, "grader": {"learner", "checks", "grader"}}

MAX_LINES = 600


def describe_cycle(component) -> str:
    path = importgraph.cycle_path(component, EDGES)
    return "import cycle among " + ", ".join(component) + ":\n  " + "\n  ".join(map(str, path))


def test_no_import_cycle():
    found = importgraph.cycles(EDGES)
    assert not found, "\n".join(describe_cycle(c) for c in found)


def layer(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) == 1:
        return "learner"
    return parts[1] if parts[1] in LAYERS else None


def test_every_module_belongs_to_a_part():
    stray = [m for m in MODULES if layer(m) is None]
    assert stray == [], ("modules outside autograder.learner, autograder.checks and autograder.grader "
                         f"(put each in the part whose users need it): {stray}")


def test_imports_go_one_way():
    """learner imports only learner; checks imports learner and checks; grader anything."""
    against = [str(e) for e in EDGES if layer(e.target) not in LAYERS.get(layer(e.source), set())]
    assert against == [], "imports against learner <- checks <- grader:\n" + "\n".join(against)


def length_is_explained(docstring: str) -> bool:
    """A sentence of the docstring says the module is long (the word 'long' or 'lines') and why
    ('because', 'since' or 'so that')."""
    sentences = re.split(r"(?<=[.!?])\s+", " ".join((docstring or "").split()))
    return any(re.search(r"\b(long|lines)\b", s, re.I) and re.search(r"\b(because|since|so that)\b", s, re.I)
               for s in sentences)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_is_short_or_says_why(module):
    path = MODULES[module]
    source = path.read_text()
    lines = len(source.splitlines())
    explained = length_is_explained(ast.get_docstring(ast.parse(source)))
    assert lines <= MAX_LINES or explained, (
        f"{path.relative_to(importgraph.ROOT)} has {lines} lines (more than {MAX_LINES}): split it into modules "
        "that each hold one idea, or say in its docstring why it is long (a sentence with 'long' or 'lines' "
        "and 'because', 'since' or 'so that')")


def test_length_reason_needs_a_why():
    assert length_is_explained("Checks.\n\nIt is long (700 lines) because the drivers and verdicts of one\n"
                               "exercise read best side by side.")
    assert not length_is_explained("Checks of the lines of draw_dot's Digraph.")
    assert not length_is_explained("This module is long.")
    assert not length_is_explained(None)


def test_no_module_uses_a_private_name_of_another():
    found = importgraph.private_uses()
    assert found == [], ("private names used outside their module (make the name public where it is defined, "
                         "or move what needs it there):\n" + "\n".join(map(str, found)))


# --- autograder.checks: the core and one package per notebook -------------------------------------------------
CHECKS = importgraph.ROOT / "autograder" / "checks"


def package_of(notebook: str) -> str:
    """The checks package of a notebook: `nb` and the notebook's name (a module name cannot start with a digit)."""
    return f"nb{notebook}"


def layout_problems(checks, notebooks) -> list:
    """What is out of place at the top of `checks`: anything but a core module (a .py file) or the package
    (with its __init__.py) of one of `notebooks`; and each notebook without its package."""
    wanted = {package_of(n) for n in notebooks}
    problems = []
    for entry in sorted(checks.iterdir()):
        if entry.name == "__pycache__" or (entry.is_file() and entry.suffix == ".py"):
            continue
        if not entry.is_dir() or entry.name not in wanted:
            problems.append(f"{entry.name}: neither a core module nor the package of a notebook of solutions/")
        elif not (entry / "__init__.py").is_file():
            problems.append(f"{entry.name}: a notebook's package without an __init__.py (its face)")
    return problems + [f"{package_of(n)}: missing, the package of notebook {n}" for n in notebooks
                       if not (checks / package_of(n)).is_dir()]


def notebook_package(module: str) -> str | None:
    """The notebook package a module of autograder.checks belongs to (None for the core and elsewhere)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "checks" and re.fullmatch(r"nb\d\d_\w+", parts[2]) else None


def reaching_across(edges) -> list:
    """Imports within autograder.checks that reach a notebook's package from outside it: from another
    notebook's package, or from the core."""
    return [e for e in edges if layer(e.source) == "checks" and notebook_package(e.target)
            and notebook_package(e.source) != notebook_package(e.target)]


def cell_import_problems(source: str, package: str) -> list:
    """How a grade cell strays from importing its checks one way, `from autograder.checks import <package>`:
    any other import that reaches autograder.checks (an alias, a name or a module of a package, another
    package, `import autograder...`), or no import of its package at all."""
    problems, found = [], False
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            problems += [f"line {node.lineno}: import {a.name}" for a in node.names
                         if a.name == "autograder" or a.name.startswith("autograder.checks")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and (
                node.module == "autograder" or node.module.startswith("autograder.checks")):
            if node.module == "autograder.checks" and [(a.name, a.asname) for a in node.names] == [(package, None)]:
                found = True
            else:
                names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in node.names)
                problems.append(f"line {node.lineno}: from {node.module} import {names}")
    return problems + ([] if found else [f"never imports {package}"])


def attributes_of(source: str, name: str) -> set:
    """The attributes a cell reads on the name `name` (what it calls on its checks package)."""
    return {n.attr for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == name}


def exported(init) -> set:
    """The names in a package's `__all__`, read from its __init__.py."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def test_the_checks_hold_the_core_and_one_package_per_notebook():
    problems = layout_problems(CHECKS, course.assignment_names())
    assert problems == [], ("autograder/checks holds the core (its modules) and one package per notebook, named "
                            "nb<notebook> (nb07_by_hand for solutions/07_by_hand):\n" + "\n".join(problems))


def test_no_notebook_package_imports_another_and_the_core_imports_none():
    found = reaching_across(EDGES)
    assert found == [], ("a notebook's checks import the core and autograder.learner only; what two notebooks "
                         "share belongs in the core:\n" + "\n".join(map(str, found)))


@pytest.mark.parametrize("name", course.assignment_names())
def test_every_grade_cell_imports_its_checks_one_way(name):
    package = package_of(name)
    found = [f"{course.nbgrader_meta(cell)['grade_id']}: {problem}"
             for cell in course.grade_cells(course.read(course.solution_path(name)))
             for problem in cell_import_problems(cell.source, package)]
    assert found == [], (f"a grade cell imports its checks as `from autograder.checks import {package}` and calls "
                         f"`{package}.check_...(...)`, nothing else of autograder.checks:\n" + "\n".join(found))


@pytest.mark.parametrize("name", course.assignment_names())
def test_each_notebook_package_exports_what_its_grade_cells_call(name):
    package = package_of(name)
    called = set().union(*(attributes_of(cell.source, package)
                           for cell in course.grade_cells(course.read(course.solution_path(name)))))
    face = exported(CHECKS / package / "__init__.py")
    assert called == face, (f"{package}/__init__.py's __all__ is what the grade cells call: called but not "
                            f"exported {sorted(called - face)}, exported but never called {sorted(face - called)}")


# --- the helpers find what they should (each rule proven able to fail) -----------------------------

def fake_tree(tmp_path, files: dict):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return importgraph.imports(tmp_path)


def test_the_scan_sees_every_kind_of_import(tmp_path):
    edges = fake_tree(tmp_path, {
        "autograder/__init__.py": "",
        "autograder/learner/__init__.py": "",
        "autograder/learner/a.py": "def f():\n    from autograder.grader import b\n",
        "autograder/learner/c.py": "import importlib\nimportlib.import_module('autograder.checks.d')\n",
        "autograder/learner/e.py": "__import__('autograder.grader.b')\nfrom . import a\nfrom .. import checks\n",
        "autograder/checks/__init__.py": "from autograder.checks.d import thing\n",
        "autograder/checks/d.py": "import autograder.learner.c as c\nthing = 1\n",
        "autograder/grader/__init__.py": "",
        "autograder/grader/b.py": "from autograder.checks import thing\nimport os\n",
    })
    assert {(e.source, e.target, e.line) for e in edges} == {
        ("autograder.learner.a", "autograder.grader.b", 2),
        ("autograder.learner.c", "autograder.checks.d", 2),
        ("autograder.learner.e", "autograder.grader.b", 1),
        ("autograder.learner.e", "autograder.learner.a", 2),
        ("autograder.learner.e", "autograder.checks", 3),
        ("autograder.checks", "autograder.checks.d", 1),
        ("autograder.checks.d", "autograder.learner.c", 1),
        ("autograder.grader.b", "autograder.checks", 1),
    }
    assert importgraph.cycles(edges) == [["autograder.checks.d", "autograder.learner.c"]]
    path = importgraph.cycle_path(["autograder.checks.d", "autograder.learner.c"], edges)
    assert [(e.source, e.target) for e in path] == [("autograder.checks.d", "autograder.learner.c"),
                                                    ("autograder.learner.c", "autograder.checks.d")]
    against = {(e.source, e.target) for e in edges if layer(e.target) not in LAYERS[layer(e.source)]}
    assert against == {("autograder.learner.a", "autograder.grader.b"), ("autograder.learner.c", "autograder.checks.d"),
                       ("autograder.learner.e", "autograder.grader.b"), ("autograder.learner.e", "autograder.checks")}


def test_a_long_cycle_is_one_component_with_its_path(tmp_path):
    edges = fake_tree(tmp_path, {
        "autograder/__init__.py": "",
        "autograder/learner/__init__.py": "",
        **{f"autograder/learner/m{i}.py": f"import autograder.learner.m{(i + 1) % 4}\n" for i in range(4)},
        "autograder/learner/lone.py": "import autograder.learner.m0\n",
    })
    (component,) = importgraph.cycles(edges)
    assert component == [f"autograder.learner.m{i}" for i in range(4)]
    assert len(importgraph.cycle_path(component, edges)) == 4


def test_the_layout_rule_finds_strays_and_missing_packages(tmp_path):
    for name in ("compare.py", "nb01_chain_rule/__init__.py", "nb02_micrograd/values.py", "helpers/__init__.py",
                 "nb09_kernels/__init__.py", "README.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert layout_problems(tmp_path, ["01_chain_rule", "02_micrograd", "03_vjp"]) == [
        "README.md: neither a core module nor the package of a notebook of solutions/",
        "helpers: neither a core module nor the package of a notebook of solutions/",
        "nb02_micrograd: a notebook's package without an __init__.py (its face)",
        "nb09_kernels: neither a core module nor the package of a notebook of solutions/",
        "nb03_vjp: missing, the package of notebook 03_vjp"]
    assert layout_problems(tmp_path, ["01_chain_rule", "09_kernels"])[-1:] == [
        "nb02_micrograd: neither a core module nor the package of a notebook of solutions/"]


def test_the_rules_find_a_package_reaching_into_another_and_a_private_name(tmp_path):
    edges = fake_tree(tmp_path, {
        "autograder/__init__.py": "",
        "autograder/learner/__init__.py": "",
        "autograder/checks/__init__.py": "",
        "autograder/checks/compare.py": "_TABLE = {}\nfrom autograder.checks.nb01_a import check\n",
        "autograder/checks/nb01_a/__init__.py": "from autograder.checks.nb01_a.cases import check\n",
        "autograder/checks/nb01_a/cases.py": ("from autograder.checks import compare\nfrom autograder.checks.nb02_b "
                                              "import helper\ncheck = compare._TABLE\n"),
        "autograder/checks/nb02_b/__init__.py": ("from autograder.checks.compare import _TABLE, __doc__\n"
                                                 "import autograder.checks.nb01_a.cases as c\nhelper = c._x\n"
                                                 "def _own():\n    return _own\n"),
        "autograder/grader/__init__.py": "",
        "autograder/grader/run.py": ("from autograder.checks.nb01_a import check\n"
                                     "from autograder.checks import nb02_b\n"),
    })
    assert {(e.source, e.target) for e in reaching_across(edges)} == {
        ("autograder.checks.compare", "autograder.checks.nb01_a"),
        ("autograder.checks.nb01_a.cases", "autograder.checks.nb02_b"),
        ("autograder.checks.nb02_b", "autograder.checks.nb01_a.cases")}
    assert {(u.source, u.target, u.name) for u in importgraph.private_uses(tmp_path)} == {
        ("autograder.checks.nb01_a.cases", "autograder.checks.compare", "_TABLE"),
        ("autograder.checks.nb02_b", "autograder.checks.compare", "_TABLE"),
        ("autograder.checks.nb02_b", "autograder.checks.nb01_a.cases", "_x")}


def test_the_grade_cell_rule_accepts_one_way_only():
    good = ("import torch\nfrom autograder.checks import nb07_by_hand\nfrom autograder.learner import inputs\n"
            "nb07_by_hand.check_x('x', x, [nb07_by_hand.x_case(seed=1)])\n### BEGIN HIDDEN TESTS\n"
            "from autograder.grader.keys import answer_key\n### END HIDDEN TESTS")
    assert cell_import_problems(good, "nb07_by_hand") == []
    assert attributes_of(good, "nb07_by_hand") == {"check_x", "x_case"}
    for cell, problem in [
        ("from autograder.checks import nb07_by_hand as bh", "line 1: from autograder.checks import nb07_by_hand "
                                                             "as bh"),
        ("from autograder.checks.nb07_by_hand import check_x", "line 1: from autograder.checks.nb07_by_hand import "
                                                               "check_x"),
        ("from autograder.checks import battery, nb07_by_hand", "line 1: from autograder.checks import battery, "
                                                                "nb07_by_hand"),
        ("from autograder import checks", "line 1: from autograder import checks"),
        ("import autograder.checks.nb07_by_hand", "line 1: import autograder.checks.nb07_by_hand"),
        ("from autograder.checks import nb04_toggles", "line 1: from autograder.checks import nb04_toggles"),
    ]:
        assert problem in cell_import_problems(cell, "nb07_by_hand"), cell
    assert cell_import_problems("import torch", "nb07_by_hand") == ["never imports nb07_by_hand"]
    assert cell_import_problems(good + "\nfrom autograder.checks import battery", "nb07_by_hand") == [
        "line 8: from autograder.checks import battery"]


def test_the_face_is_read_from_all(tmp_path):
    init = tmp_path / "__init__.py"
    init.write_text('"""Face."""\nfrom x import a, b\n\n__all__ = ["a", "b"]\n')
    assert exported(init) == {"a", "b"}
    init.write_text("from x import a\n")
    assert exported(init) == set()
