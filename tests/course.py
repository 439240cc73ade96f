"""What the tests know about the course's files: where notebooks live, how to run and read them."""
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
