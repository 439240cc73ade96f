"""Feedback that tells students what failed without giving away the hidden tests.

nbgrader's feedback shows each autograded notebook as it ran, hidden tests and tracebacks
included: one student's feedback would hand the whole class the tests. This preprocessor
keeps every message the checks wrote (which exercise, which input, expected vs got) and removes
the hidden test source, both from the cell and from the tracebacks that quote it.
"""
import re

from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor

from autograder.grader.sanitize import released

NOTE = "# (hidden tests: not shown; their messages appear below)"
BEGIN = re.compile(r"^([ \t]*).*BEGIN HIDDEN TESTS.*$", re.M)


def without_hidden_tests(source: str) -> str:
    """The source with each hidden-test region replaced by one note line: the note goes before the
    region, which nbgrader's ClearHiddenTests then removes (`sanitize.released`). A cell whose regions
    do not pair up (never one of the course's) is shown as the note alone."""
    try:
        return released(BEGIN.sub(lambda m: f"{m.group(1)}{NOTE}\n{m.group(0)}", source))
    except RuntimeError:  # ClearHiddenTests' refusal of an unpaired or nested region
        return NOTE


def short_error(output):
    """An error output whose traceback is only its message: tracebacks quote hidden lines."""
    output.traceback = [f"{output.ename}: {output.evalue}"]
    return output


class HideHiddenTests(NbGraderPreprocessor):
    """Strip hidden tests from grade cells, and their traceback lines from the outputs."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and utils.is_grade(cell):
            cell.source = without_hidden_tests(cell.source)
            cell.outputs = [short_error(o) if o.output_type == "error" else o for o in cell.outputs]
        return cell, resources
