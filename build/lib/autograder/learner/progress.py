"""Your progress, as a notebook uses it: visible-test runs recorded and acknowledged, and the figure.

``track_tests(notebook)`` (in every notebook's set-up cell) records each run of a test cell, passed
or failed, in the progress file (``autograder.learner.progress_file``, whose reading and writing
functions this module also offers), and after a test cell passes prints one line that says so: a
passing visible test prints nothing itself, and a learner could not tell a pass from a cell that did
not run. ``show()`` draws everything recorded (``autograder.learner.progress_view``).
"""
import os
import re

from autograder.learner.progress_file import (  # noqa: F401 - the storage's API, offered here too
    ENV_VAR,
    GRADING_ENV_VAR,
    append,
    attempts,
    exercise_of,
    learner_id,
    load,
    progress_path,
    record,
    test_runs,
)

MESSAGE_CHARS = 300  # of a failing test's message, kept for the progress view

# Every grade cell of the course starts with a docstring that names its grade id,
# '"""vjp_linear: (gx, gW, gb) for ..."""', and imports the autograder package.
_TEST_CELL = re.compile(r'\A\s*[rRuU]?"""\s*([A-Za-z_][\w\-]*)\s*:')


def grade_cell_id(source: str):
    """The grade id of a test cell, or None for any other cell."""
    m = _TEST_CELL.match(source or "")
    return m.group(1) if m and "autograder" in source else None


def record_test(notebook: str, cell: str, passed: bool, error: str = "", message: str = "") -> None:
    """Append one run of a visible test cell (its grade id): passed, or the error's type and the
    start of its message."""
    entry = {"notebook": notebook, "exercise": exercise_of(cell), "cell": cell, "passed": bool(passed)}
    if not passed:
        entry.update(error=error, message=message[:MESSAGE_CHARS])
    append("test", entry)


def pass_line(cell: str) -> str:
    return f"✓ {cell}: the visible tests pass (hidden tests run when it is graded)"


class _TestRecorder:
    """An IPython ``post_run_cell`` callback: records the runs of test cells and, after a pass, prints
    one line on stdout (the test cell's own output). It never raises and never writes to stderr (stderr
    in a test cell scores 0 in nbgrader), and stays silent while nbgrader grades."""

    course_test_recorder = True  # how track_tests finds an earlier one, even from a reloaded module

    def __init__(self, notebook):
        self.notebook = notebook

    def __call__(self, result):
        try:
            if os.environ.get(GRADING_ENV_VAR):
                return
            source = getattr(getattr(result, "info", None), "raw_cell", "") or ""
            cell = grade_cell_id(source)
            if cell is None:
                return
            error = result.error_in_exec or result.error_before_exec
            message = str(error).strip().splitlines()[0] if error is not None and str(error).strip() else ""
            if error is None:
                print(pass_line(cell))
            record_test(self.notebook, cell, error is None, type(error).__name__ if error else "", message)
        except Exception:  # noqa: BLE001 - a progress file that cannot be written must not break the cell
            pass


def track_tests(notebook: str, shell=None) -> None:
    """Record, from now on in this kernel, every run of a test cell of ``notebook``: passed or failed.

    Call it once in the notebook's set-up cell. Running that cell again replaces the recorder (no
    double entries). Outside IPython, and while nbgrader grades, it does nothing.
    """
    if os.environ.get(GRADING_ENV_VAR):
        return
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return
        shell = get_ipython()
    if shell is None or not hasattr(shell, "events"):
        return
    for callback in list(shell.events.callbacks.get("post_run_cell", [])):
        if getattr(callback, "course_test_recorder", False):
            shell.events.unregister("post_run_cell", callback)
    shell.events.register("post_run_cell", _TestRecorder(notebook))


def show() -> None:
    """Your progress as one figure (``autograder.learner.progress_view.show``)."""
    from autograder.learner import progress_view  # drawing needs matplotlib; recording does not
    progress_view.show()
