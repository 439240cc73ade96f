"""What the tests know about the course's files: where notebooks live, how to run and read them."""
import ast
import pathlib

import nbformat

from autograder.grader.execution import SteadyNotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
NOTEBOOKS = ROOT / "notebooks"


def assignment_names() -> list:
    return sorted(p.name for p in SOLUTIONS.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def solution_path(name: str) -> pathlib.Path:
    return SOLUTIONS / name / f"{name}.ipynb"


def release_path(name: str) -> pathlib.Path:
    return NOTEBOOKS / f"{name}.ipynb"


def answer_key_path(name: str) -> pathlib.Path:
    return SOLUTIONS / name / "answer_key.py"


def _is_answer(decorator) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Name) and target.id == "answer") or \
           (isinstance(target, ast.Attribute) and target.attr == "answer")


def answers(path) -> list:
    """The top-level functions and classes of an answer key marked `@answer`, as syntax trees."""
    tree = ast.parse(pathlib.Path(path).read_text(), filename=str(path))
    return [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and any(_is_answer(d) for d in node.decorator_list)]


def read(path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def execute(path, workdir) -> nbformat.NotebookNode:
    """Run a notebook top to bottom as nbgrader would, keeping going past errors."""
    nb = read(path)
    SteadyNotebookClient(nb, timeout=120, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(workdir)}}).execute()
    return nb


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def grade_cells(nb) -> list:
    return [c for c in nb.cells if nbgrader_meta(c).get("grade") and c.cell_type == "code"]


def solution_cells(nb) -> list:
    return [c for c in nb.cells if nbgrader_meta(c).get("solution") and c.cell_type == "code"]


def graded_name(grade_id: str) -> str:
    """The graded function a grade cell tests: its grade_id up to an optional '-behaviour'."""
    return grade_id.split("-")[0]


def failure_text(cell) -> str:
    """Why nbgrader would give the cell 0 (an error or anything on stderr), or '' if it passed."""
    for out in cell.get("outputs", []):
        if out.output_type == "error":
            return f"{out.ename}: {out.evalue}"
        if out.output_type == "stream" and out.name == "stderr":
            return f"wrote to stderr: {out.text}"
    return ""
