"""What a learner reads stands on its own: no prose that leans on a text the learner does not have, and
no visible test cell that imports a name it never uses.

1. The course follows published material, but a learner has none of it: "the book", "the sources",
   "the source chapter", "a textbook", "a cheat sheet among the sources" mean nothing to them. A claim
   taken from elsewhere is stated as a claim ("a common claim is ...", "a widely quoted rule of
   thumb ...") and then run, or it names a publication a reader can find (authors, title, year). The
   scan covers every cell of every solution notebook (the student notebooks are generated from them),
   the quiz files and the mutation catalogue's labels.
2. A grade cell of a student notebook shows its visible test: an import it never uses is noise, and it
   hints at code the learner cannot see (hidden tests are stripped from the release, so a name only
   they use must be imported inside the hidden region). Checked with an AST on the released cells.
3. A file of the repository that a notebook names (in backticks) exists: a path left behind by a move
   sends a learner looking for nothing.
"""
import ast
import re

import course
import pytest

from autograder.learner import quiz_schema

UNNAMED_SOURCES = {
    "the book": r"\bthe books?\b|\bbook's\b",
    "the sources": r"\bthe sources\b|\bsources'",
    "a source chapter": r"\bsource chapters?\b",
    "a textbook": r"\btextbooks?\b",
    "a chapter (the course has notebooks and sections)": r"\bchapters?\b",
    "a cheat sheet": r"\bcheat[- ]?sheets?\b",
    "a numbered practice problem": r"\bpractice problems?\b",
}
PATTERN = re.compile("|".join(f"(?P<p{i}>{p})" for i, p in enumerate(UNNAMED_SOURCES.values())), re.IGNORECASE)


def unnamed_sources(text: str) -> list:
    """[(what, the words around it)] for every place `text` refers to a source the learner does not have."""
    found = []
    for match in PATTERN.finditer(text):
        what = list(UNNAMED_SOURCES)[int(match.lastgroup[1:])]
        start, end = max(0, match.start() - 40), match.end() + 40
        found.append((what, " ".join(text[start:end].split())))
    return found


def test_the_scan_finds_what_the_audit_found():
    """The phrases of issue 16's audit are caught; ordinary words that contain them are not."""
    for text in ("The source chapter of this course warns that", "the production failures from the sources",
                 "a cheat sheet among the sources says", "The textbook's \"about 3 GB\"",
                 "counts values, not bytes (the book's ~3 GB)", "the chapter this course follows",
                 "The sources' most common memory leak", "Practice problem 5: N=8", "A Cheat-Sheet says"):
        assert unnamed_sources(text), text
    for text in ("the bookkeeping per operation", "this notebook's transformer", "a common rule of thumb",
                 "Chen et al. (2016), Training Deep Nets with Sublinear Memory Cost", "resources, sourced"):
        assert not unnamed_sources(text), text


@pytest.mark.parametrize("name", course.assignment_names())
def test_no_notebook_cell_leans_on_a_source_the_learner_does_not_have(name):
    path = course.solution_path(name)
    found = [f"{path.relative_to(course.ROOT)} cell {i} ({cell.cell_type}): {what}: ...{words}..."
             for i, cell in enumerate(course.read(path).cells)
             for what, words in unnamed_sources(cell.source)]
    assert not found, "say it on the course's own terms (a claim to run, or a publication named):\n" + "\n".join(found)


@pytest.mark.parametrize("notebook", quiz_schema.course_notebooks())
def test_no_quiz_question_leans_on_a_source_the_learner_does_not_have(notebook):
    path = quiz_schema.quiz_folder() / f"{notebook}.yaml"
    found = [f"{path.name}:{number}: {what}: ...{words}..."
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             for what, words in unnamed_sources(line)]
    assert not found, "\n".join(found)


def test_no_mutant_label_leans_on_a_source_the_learner_does_not_have():
    """The catalogue's labels name wrong answers in reports; they follow the same rule."""
    found = [f"{path.relative_to(course.ROOT)}:{number}: {what}: ...{words}..."
             for path in sorted((course.ROOT / "tests" / "mutants").glob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             for what, words in unnamed_sources(line)]
    assert not found, "\n".join(found)


# --- visible test cells import only what they use -------------------------------------------------------------
def unused_imports(source: str) -> list:
    """The names a cell imports and never reads (IPython's %magic and !shell lines left out)."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    tree = ast.parse(code)
    imported = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                imported[alias.asname or alias.name.split(".")[0]] = node.lineno
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name != "*":
                    imported[alias.asname or alias.name] = node.lineno
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return sorted(set(imported) - used)


def test_the_unused_import_check_sees_what_it_must():
    assert unused_imports("import torch\nfrom autograder.checks import nb08_higher_order\n"
                          "nb08_higher_order.check(1)\n") == ["torch"]
    assert unused_imports('"""uses torch.autograd in its docstring only"""\nimport torch\n') == ["torch"]
    assert unused_imports("import torch\nx = torch.float32\n") == []
    assert unused_imports("import os.path\nos.path.join('a')\n%time 1\n") == []
    assert unused_imports("from a import b, c as d\nd()\n") == ["b"]


@pytest.mark.parametrize("name", course.assignment_names())
def test_released_grade_cells_import_only_what_they_use(name):
    path = course.release_path(name)
    found = [f"{path.relative_to(course.ROOT)} cell {i} ({course.nbgrader_meta(cell)['grade_id']}): "
             f"imports {', '.join(unused)} and never uses it"
             for i, cell in enumerate(course.read(path).cells)
             if cell.cell_type == "code" and course.nbgrader_meta(cell).get("grade")
             for unused in [unused_imports(cell.source)] if unused]
    assert not found, ("a name only the hidden tests use is imported inside ### BEGIN HIDDEN TESTS:\n"
                       + "\n".join(found))


def test_what_04_quotes_from_the_inference_mode_docstring_is_there_and_gives_no_figure():
    """04 says PyTorch's documentation of inference_mode gives no speed figure, and quotes it."""
    import torch
    quoted = "removes additional overhead by disabling view tracking and version counter bumps"
    notebook = " ".join(c.source for c in course.read(course.solution_path("04_toggles")).cells)
    assert quoted in " ".join(notebook.split())
    documented = " ".join(torch.inference_mode.__doc__.split())
    assert quoted in documented and not re.search(r"\d\s*%", documented)


REPO_PATH = re.compile(r"`((?:autograder|benchmarks|tests|docs|solutions|notebooks)/[\w./-]+)`")


def repository_paths(text: str) -> list:
    """The repository paths `text` names in backticks (`autograder/checks/kernel_verdicts.py`)."""
    return REPO_PATH.findall(text)


def test_the_path_scan_sees_a_named_file():
    assert repository_paths("(`BLOCK_LIMIT` in `autograder/checks/nb09_kernels/verdicts.py`)") == [
        "autograder/checks/nb09_kernels/verdicts.py"]


@pytest.mark.parametrize("name", course.assignment_names())
def test_every_file_a_notebook_names_exists(name):
    """A learner who looks for a named file finds it: a path left behind by a move is caught here."""
    nb = course.read(course.solution_path(name))
    missing = [path for cell in nb.cells for path in repository_paths(cell.source)
               if not (course.ROOT / path.rstrip("/")).exists()]
    assert missing == [], f"{name} names files that do not exist: {missing}"
