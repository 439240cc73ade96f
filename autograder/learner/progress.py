"""The learner's local progress file: every quiz attempt and visible-test run, appended, never lost.

The file lives at ``$COURSE_PROGRESS`` if set, else ``~/.backprop-course/progress.json``. It holds
``attempts`` (quiz answers, see ``autograder.learner.quiz``; those given in a notebook's opening review
also carry ``"review": <that notebook>``) and ``tests`` (one entry per run of a test cell, recorded
by ``track_tests``). ``autograder.learner.progress_view.show()`` draws both.
"""
import datetime
import json
import os
import pathlib
import re

ENV_VAR = "COURSE_PROGRESS"
VERSION = 1
LISTS = ("attempts", "tests")  # "tests" is optional: files from before it existed stay valid
MESSAGE_CHARS = 300  # of a failing test's message, kept for the progress view


def progress_path() -> pathlib.Path:
    custom = os.environ.get(ENV_VAR)
    return pathlib.Path(custom) if custom else pathlib.Path.home() / ".backprop-course" / "progress.json"


def _empty() -> dict:
    return {"version": VERSION, "attempts": [], "tests": []}


def load() -> dict:
    """The saved progress; a damaged file is set aside (renamed), never overwritten."""
    path = progress_path()
    if not path.exists():
        return _empty()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("attempts"), list):
            raise ValueError("no list of attempts")
        if not isinstance(data.setdefault("tests", []), list):
            raise ValueError("'tests' is not a list")
        return data
    except ValueError as err:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        kept = path.with_name(f"{path.name}.damaged-{stamp}")
        path.rename(kept)
        print(f"Your progress file could not be read ({err}); it was kept as {kept} and a new one started.")
        return _empty()


def _append(key: str, entry: dict) -> None:
    """Append one entry, writing a temporary file first so a crash cannot truncate the file."""
    data = load()
    data[key].append({**entry, "time": datetime.datetime.now().isoformat(timespec="seconds")})
    path = progress_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(temporary, path)


def record(attempt: dict) -> None:
    """Append one quiz attempt."""
    _append("attempts", attempt)


def attempts(notebook=None) -> list:
    """Saved attempts, optionally only those of one notebook."""
    return [a for a in load()["attempts"] if notebook is None or a.get("notebook") == notebook]


# --- visible tests -------------------------------------------------------------------------------
# Every grade cell of the course starts with a docstring that names its grade id,
# '"""vjp_linear: (gx, gW, gb) for ..."""', and imports the autograder package.
_TEST_CELL = re.compile(r'\A\s*[rRuU]?"""\s*([A-Za-z_][\w\-]*)\s*:')
GRADING_ENV_VAR = "NBGRADER_EXECUTION"  # set by nbgrader while it autogrades or validates


def grade_cell_id(source: str):
    """The exercise a test cell checks (its grade id), or None for any other cell."""
    m = _TEST_CELL.match(source or "")
    return m.group(1) if m and "autograder" in source else None


def record_test(notebook: str, exercise: str, passed: bool, error: str = "", message: str = "") -> None:
    """Append one run of a visible test: passed, or the error's type and the start of its message."""
    entry = {"notebook": notebook, "exercise": exercise, "passed": bool(passed)}
    if not passed:
        entry.update(error=error, message=message[:MESSAGE_CHARS])
    _append("tests", entry)


def test_runs(notebook=None) -> list:
    """Saved test runs, optionally only those of one notebook."""
    return [t for t in load()["tests"] if notebook is None or t.get("notebook") == notebook]


class _TestRecorder:
    """An IPython ``post_run_cell`` callback that records the runs of test cells. It never raises and
    never prints: its output would land in the test cell's output (stderr there scores 0 in nbgrader)."""

    course_test_recorder = True  # how track_tests finds an earlier one, even from a reloaded module

    def __init__(self, notebook):
        self.notebook = notebook

    def __call__(self, result):
        try:
            source = getattr(getattr(result, "info", None), "raw_cell", "") or ""
            exercise = grade_cell_id(source)
            if exercise is None:
                return
            error = result.error_in_exec or result.error_before_exec
            message = str(error).strip().splitlines()[0] if error is not None and str(error).strip() else ""
            record_test(self.notebook, exercise, error is None, type(error).__name__ if error else "", message)
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
