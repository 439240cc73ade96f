"""Feedback that tells students what failed without giving away the hidden tests.

nbgrader's feedback shows each autograded notebook as it ran, hidden tests and tracebacks
included: one student's feedback would hand the whole class the tests. This preprocessor
keeps every message the checks wrote (which exercise, which input, expected vs got) and removes
the hidden test source, both from the cell and from the tracebacks that quote it.
"""
from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor

BEGIN, END = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"
NOTE = "# (hidden tests: not shown; their messages appear below)"


def without_hidden_tests(source: str) -> str:
    """The source with each hidden-test region replaced by one note line."""
    kept, hiding = [], False
    for line in source.split("\n"):
        if BEGIN in line:
            hiding = True
            kept.append(line[: len(line) - len(line.lstrip())] + NOTE)
        elif END in line:
            hiding = False
        elif not hiding:
            kept.append(line)
    return "\n".join(kept)


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
