"""Rebuild a submitted notebook from the assignment's source before it runs: only the student's
answers are taken from it, everything nbgrader grades by comes from the gradebook.

nbgrader's own sanitizing trusts the submission's cell metadata and stops the whole class on
a surprise: a grade cell the source does not have (worth 1000 points), a test cell turned into
markdown, a solution cell flipped to a grade cell, metadata that is not a dict. Here each cell is
rebuilt: a cell whose grade_id the source has gets the source's type, flags and points (and, if
locked, the source's text, hidden tests included); any other cell runs as an ordinary cell and
earns nothing; a repeated grade_id counts once (the first). What was changed is returned as notes
for the report, never as a failure of the run.

nbgrader also warns "checksum has changed" for every test cell of every submission, because the
released test cells lack their hidden tests. A test cell that is exactly what was released is
restored silently here; only a real edit is noted.
"""
import dataclasses
import json
import re

import nbformat
from nbgrader.api import Gradebook
from nbgrader.preprocessors import ClearHiddenTests, NbGraderPreprocessor

DEFAULT_KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


@dataclasses.dataclass(frozen=True)
class SourceCell:
    """One cell nbgrader knows from `generate_assignment`."""
    name: str
    cell_type: str
    source: str
    locked: bool
    checksum: str | None
    grade: bool = False
    solution: bool = False
    task: bool = False
    points: float | None = None

    def metadata(self) -> dict:
        meta = {"grade": self.grade, "grade_id": self.name, "locked": self.locked, "schema_version": 3,
                "solution": self.solution, "task": self.task}
        if self.grade or self.task:
            meta["points"] = self.points
        if self.checksum:
            meta["checksum"] = self.checksum
        return meta


@dataclasses.dataclass(frozen=True)
class SourceNotebook:
    assignment: str
    notebook: str
    cells: dict  # name -> SourceCell
    kernelspec: dict

    def graded(self) -> list:
        """Names of the cells that carry points, in name order."""
        return sorted(n for n, c in self.cells.items() if c.grade or c.task)


def load_source(gb: Gradebook, assignment: str, notebook: str | None = None) -> SourceNotebook:
    """What the gradebook holds about one notebook of an assignment (one query per kind of cell)."""
    nb = gb.find_notebook(notebook or assignment, assignment)
    grades = {c.name: c for c in nb.grade_cells}
    solutions = {c.name for c in nb.solution_cells}
    tasks = {c.name: c for c in nb.task_cells}
    cells = {}
    for c in nb.source_cells:
        scored = grades.get(c.name) or tasks.get(c.name)
        cells[c.name] = SourceCell(c.name, c.cell_type, c.source, bool(c.locked), c.checksum,
                                   grade=c.name in grades, solution=c.name in solutions, task=c.name in tasks,
                                   points=float(scored.max_score) if scored is not None else None)
    try:
        kernelspec = json.loads(nb.kernelspec) if nb.kernelspec else DEFAULT_KERNELSPEC
    except (TypeError, ValueError):
        kernelspec = DEFAULT_KERNELSPEC
    return SourceNotebook(assignment, nb.name, cells, kernelspec)


def released(source: str) -> str:
    """A test cell's text as students got it: what nbgrader's generate_assignment leaves of it (its own
    ClearHiddenTests, which drops every hidden-test region)."""
    cell = nbformat.v4.new_code_cell(source)
    ClearHiddenTests(enforce_metadata=False).preprocess_cell(cell, {}, 0)
    return cell.source


def _same(a: str, b: str) -> bool:
    """Equal up to trailing whitespace (editors strip it)."""
    def norm(s):
        return re.sub(r"[ \t]+(?=\n|$)", "", s).rstrip("\n")
    return norm(a) == norm(b)


def _flags_changed(meta: dict, cell: SourceCell) -> list:
    changed = [k for k in ("grade", "solution", "locked", "task") if bool(meta.get(k)) != getattr(cell, k)]
    if cell.grade or cell.task or meta.get("grade") or meta.get("task"):
        try:
            if float(meta.get("points")) != cell.points:
                changed.append("points")
        except (TypeError, ValueError):
            changed.append("points")
    return changed


def _new_cell(cell_type: str, source: str, nbgrader: dict | None, index: int):
    maker = {"code": nbformat.v4.new_code_cell, "markdown": nbformat.v4.new_markdown_cell}.get(
        cell_type, nbformat.v4.new_raw_cell)
    cell = maker(source, metadata={"nbgrader": nbgrader} if nbgrader else {})
    cell.id = f"cell-{index}"
    return cell


def restore(nb, source: SourceNotebook) -> tuple:
    """(the notebook rebuilt from `source` and the student's answers, [notes on what was changed]).

    `nb` is a validated nbformat-4 notebook; nothing else in it is trusted. Outputs are dropped.
    """
    notes, seen, cells = [], set(), []
    for index, cell in enumerate(nb.cells, start=1):
        meta = cell.get("metadata", {}).get("nbgrader")
        if meta is not None and not isinstance(meta, dict):
            notes.append(f"cell {index}: its nbgrader metadata is a {type(meta).__name__}, not a dict: ignored")
            meta = None
        grade_id = meta.get("grade_id") if meta else None
        if isinstance(grade_id, str) and grade_id in source.cells and grade_id not in seen:
            seen.add(grade_id)
            known = source.cells[grade_id]
            text = cell.source
            if known.locked:
                if not (_same(text, known.source) or _same(text, released(known.source))):
                    notes.append(f"{grade_id}: the locked cell was edited; graded with the original")
                text = known.source
            if cell.cell_type != known.cell_type:
                notes.append(f"{grade_id}: turned into a {cell.cell_type} cell; "
                             f"graded as the {known.cell_type} cell it is")
            if changed := _flags_changed(meta, known):
                notes.append(f"{grade_id}: its nbgrader {', '.join(changed)} had been changed; restored")
            cells.append(_new_cell(known.cell_type, text, known.metadata(), index))
            continue
        if meta and (grade_id is not None or any(meta.get(k) for k in ("grade", "solution", "task"))):
            name = str(grade_id)[:60]
            notes.append(f"cell {index} repeats {name!r}: only the first counts, this copy runs as an ordinary cell"
                         if grade_id in seen else
                         f"cell {index} claims to be nbgrader cell {name!r}, which {source.notebook} does not have: "
                         "it runs as an ordinary cell and earns nothing")
        cells.append(_new_cell(cell.cell_type, cell.source, None, index))
    for name in source.graded():
        if name not in seen:
            notes.append(f"{name}: its cell is missing from the notebook; it scores 0")
    restored = nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": dict(source.kernelspec),
                                                               "language_info": {"name": "python"}})
    return restored, notes


class RestoreFromSource(NbGraderPreprocessor):
    """`restore` as a step of plain `nbgrader autograde` (see nbgrader_config.py), in place of
    DeduplicateIds, OverwriteKernelspec and OverwriteCells: notes go to nbgrader's log."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gb:
            source = load_source(gb, info["assignment"], info["notebook"])
        restored, notes = restore(nb, source)
        for note in notes:
            self.log.warning("%s, %s: %s", info["student"], info["notebook"], note)
        return restored, resources
