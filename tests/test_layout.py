"""The package's shape: no import cycles, imports one way (learner <- checks <- grader), no
module so long that it holds more than one idea unless its docstring says why.

Imports are read with `ast` (tests/importgraph.py): function-level ones and literal
`importlib.import_module`/`__import__` calls count. The rules are proven able to fail on small
fake trees at the end of this file.
"""
import ast
import re

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
