"""Score executed notebooks and record them in nbgrader's gradebook in one pass, in this process.

`nbgrader autograde` costs seconds per submission even when it only reads a notebook that has
already run (its start-up, a gradebook session and a commit per cell, two notebook conversions);
for a class that was more than our parallel grading saved. Here one gradebook session records
each submission as its notebook comes back: the same rows `autograde` writes (student, submission
with its timestamp, each grade cell's auto score, each answer's "No response." comment, the late
penalty), and the same autograded/ notebook, so `nbgrader export`, `generate_feedback` and the
formgrader read them as usual.

Scores are computed from outputs nothing can stretch: a grade cell scores 0 if it shows an error
or writes to stderr (library warnings aside, as nbgrader_config.py configures), its points
otherwise; a last value that is a number counts as partial credit only between 0 and the
cell's points (nbgrader itself raises on more and gives full marks for less). Every text kept
(outputs in the autograded notebook, gradebook comments, reports) is storable (`storable`: what a
student's code sent is shown, never acted on) and capped. The gradebook and autograded/ get both or
neither: the notebook is encoded and written aside before the scores are committed.
"""
import contextlib
import dataclasses
import math
import os
import pathlib
import re
import shutil
import stat
import uuid
import warnings

import nbformat
import sqlalchemy.exc
from nbgrader import utils
from nbgrader.api import Gradebook
from nbgrader.preprocessors import AssignLatePenalties, NbGraderPreprocessor
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from autograder.checks import compare
from autograder.grader import judge, submissions
from autograder.grader.nbgrader_run import with_scripts_on_path

MESSAGE_CHARS = 500  # a failure message in the gradebook, scores.csv, failures.csv
OUTPUT_CHARS = 20_000  # one output's text in an autograded notebook (feedback shows it)

SURROGATES = re.compile("[\ud800-\udfff]")  # lone halves of a UTF-16 pair: no file encoding takes one
# Control characters a message shows escaped: all but tab and newline (a terminal or spreadsheet acts on them).
MESSAGE_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# In a notebook, carriage returns (progress bars) and ANSI colour codes (IPython's tracebacks) stay: nbconvert
# renders them, in feedback too; any other escape sequence or control character is shown escaped (in HTML a NUL
# or a stray escape is not text).
NOTEBOOK_CONTROLS = re.compile("\x1b(?!\\[[0-9;]*m)|[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f-\x9f]")


def storable(text, controls: re.Pattern = MESSAGE_CONTROLS) -> str:
    """`text` as any file, terminal, spreadsheet or web page can take it: a lone surrogate becomes U+FFFD and
    each of `controls` its escape (`\\x00`, `\\x1b`), so what a student's code sent is shown, never acted on,
    and never stops its notebook or its scores from being stored."""
    text = SURROGATES.sub("\ufffd", str(text))
    return controls.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), text)


def capped(text, limit: int = MESSAGE_CHARS) -> str:
    """`text` storable and cut to `limit` characters (a gradebook or report message by default)."""
    return compare.capped(storable(text), limit)


def _bounded(value, limit: int):
    """A JSON value from a kernel with every string in it, keys included, storable in a notebook and capped."""
    if isinstance(value, str):
        return compare.capped(storable(value, NOTEBOOK_CONTROLS), limit)
    if isinstance(value, dict):
        return type(value)((_bounded(k, limit), _bounded(v, limit)) for k, v in value.items())
    if isinstance(value, list):
        return [_bounded(item, limit) for item in value]
    return value


def bound_outputs(nb, limit: int = OUTPUT_CHARS):
    """Make every text an output carries (error messages, tracebacks, display data and its metadata) storable
    and capped, in place."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if isinstance(out.get("traceback"), list):
                out["traceback"] = out["traceback"][:50]
            for key, value in out.items():
                out[key] = _bounded(value, limit)
    return nb


@dataclasses.dataclass
class Outcome:
    """What this run did with one (student, assignment)."""
    student: str
    assignment: str
    graded: bool
    reason: str = ""  # why it was not graded
    grader_side: bool = False  # the grader failed, not the submission: nothing was written to the gradebook
    flags: list = dataclasses.field(default_factory=list)  # flags.Flag: what in its source reaches for the grader
    notes: list = dataclasses.field(default_factory=list)  # what was restored or ignored
    messages: dict = dataclasses.field(default_factory=dict)  # grade_id -> why it lost points
    seconds: float = 0.0


def course_config(root: pathlib.Path) -> Config:
    """The course's nbgrader configuration (nbgrader_config.py), as nbgrader would load it."""
    if not (root / "nbgrader_config.py").exists():
        return Config()
    return PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()


def merged(sanitized, executed):
    """The sanitized notebook (trusted: built here) with the outputs of its executed copy (not trusted)."""
    if len(executed.cells) != len(sanitized.cells) or any(
            a.cell_type != b.cell_type for a, b in zip(sanitized.cells, executed.cells)):
        raise ValueError("the executed notebook does not match the one sent to be run")
    out = nbformat.from_dict(sanitized)
    for cell, ran in zip(out.cells, executed.cells):
        if cell.cell_type == "code":
            outputs = ran.get("outputs", [])
            cell.outputs = [o for o in outputs if isinstance(o, dict) and "output_type" in o][:200]
            count = ran.get("execution_count")
            cell.execution_count = count if isinstance(count, int) else None
    return bound_outputs(out)


def _partial(out, points):
    """Partial credit from a last value: (score, message)."""
    text = out.get("data", {}).get("text/plain", "")
    text = "".join(text) if isinstance(text, list) else str(text)
    try:
        value = float(text)
    except ValueError:
        return points, ""  # not a number: nbgrader gives full marks
    if math.isnan(value) or not 0 <= value <= points:
        return 0.0, capped(f"the cell's last value {text[:40]} is not a score between 0 and {points:g}")
    return value, ""


def cell_score(cell, points: float, ignore: str | None = None) -> tuple:
    """(score, message) of an executed test cell: errors and stderr first, wherever they appear."""
    outputs = cell.get("outputs", [])
    for out in outputs:
        if out.get("output_type") == "error":
            return 0.0, capped(f"{out.get('ename', 'Error')}: {out.get('evalue', '')}")
    for out in outputs:
        if out.get("output_type") == "stream" and out.get("name") == "stderr":
            if not (ignore and re.search(ignore, str(out.get("text", "")))):
                return 0.0, capped(f"wrote to stderr: {out.get('text', '')}")
    for out in outputs:
        if out.get("output_type") == "execute_result":
            return _partial(out, points)
    return points, ""


def scores_of(nb, source, ignore: str | None = None) -> dict:
    """{grade_id: (auto score or None for a manual grade, message)} for every graded cell of `source`."""
    found = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader") or {}
        known = source.cells.get(meta.get("grade_id"))
        if known is None or not (known.grade or known.task):
            continue
        if known.solution or known.task or cell.cell_type != "code":
            unchanged = known.checksum and known.checksum == utils.compute_checksum(cell)
            found[known.name] = (0.0 if unchanged else None, "")
        else:
            found[known.name] = cell_score(cell, known.points, ignore)
    for name in source.graded():
        found.setdefault(name, (0.0, "its cell is missing from the notebook"))
    return found


class BoundedPartialCredit(NbGraderPreprocessor):
    """For plain `nbgrader autograde`: a last value outside [0, points] becomes an error output,
    so nbgrader's SaveAutoGrades neither raises on it nor gives full marks for a negative one."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and utils.is_grade(cell) and not utils.is_solution(cell):
            points = float(cell.metadata.nbgrader.get("points", 0))
            for i, out in enumerate(cell.get("outputs", [])):
                if out.get("output_type") == "execute_result":
                    score, message = _partial(out, points)
                    if message:
                        cell.outputs[i] = nbformat.v4.new_output("error", ename="PartialCredit", evalue=message,
                                                                 traceback=[message])
                    break
        return cell, resources


def _timestamp(folder: pathlib.Path):
    """The submission time nbgrader keeps in timestamp.txt, if there is a readable one."""
    try:
        text = submissions.read_bounded(folder / "timestamp.txt", limit=200).decode("utf-8").strip()
        return utils.parse_utc(text) if text else None
    except Exception:  # missing, a link, garbage: nbgrader would fail; the submission is graded untimed
        return None


def _remove_tree(path: pathlib.Path):
    if os.path.lexists(path):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
        else:
            path.unlink()


class Recorder:
    """One gradebook session for a whole run; `graded` and `not_graded` record one submission each."""

    def __init__(self, root: pathlib.Path, config: Config | None = None):
        self.root = root
        self.config = config if config is not None else course_config(root)
        course = self.config.CourseDirectory
        self.ignore = self.config.IgnorePattern.get("pattern") if self.config.IgnorePattern.get("enabled") else None
        self.late = AssignLatePenalties(config=self.config)
        self.late.init_plugin()
        with with_scripts_on_path():
            self.gb = Gradebook(f"sqlite:///{root / 'gradebook.db'}", course.get("course_id", ""))

    def close(self):
        self.gb.close()

    def _submission(self, student, assignment):
        self.gb.update_or_create_student(student)
        folder = self.root / "submitted" / student / assignment
        timestamp = _timestamp(folder)
        kwargs = {"timestamp": timestamp} if timestamp else {}
        with warnings.catch_warnings():  # nbgrader's add_submission trips SQLAlchemy's autoflush warnings
            warnings.simplefilter("ignore", sqlalchemy.exc.SAWarning)
            submission = self.gb.update_or_create_submission(assignment, student, **kwargs)
        return submission, self.gb.find_submission_notebook(assignment, assignment, student)

    def graded(self, student, assignment, nb, source, keep: bool = True, verdicts: dict | None = None) -> dict:
        """Record an executed, merged notebook; write it to autograded/; return {grade_id: message}.
        The by-hand judge (`autograder.grader.judge`) reads its source first: an answer it refuses scores 0.
        Both or neither: the notebook is encoded (what cannot be stored fails here) and written aside before
        the scores are committed, and put in place after. With `keep` False everything is done and nothing
        kept: the control for a submission that could not be recorded (`fails_to_record`). `verdicts`: the
        judge's, where a worker read them already ({grade_id: message})."""
        if verdicts is None:
            verdicts = judge.cell_verdicts(nb, judge.baseline(self.root, assignment))
        judge.apply(nb, verdicts)
        found = scores_of(nb, source, self.ignore)
        text = nbformat.writes(nb).encode("utf-8")
        staged = self.root / "autograded" / f".staged-{uuid.uuid4().hex}"  # a path nbgrader never reads
        staged.mkdir(parents=True)
        try:
            self._stage(staged, student, assignment, text)
            self._scores(student, assignment, nb, source, found)
            if keep:
                self.gb.db.commit()
                folder = self.root / "autograded" / student / assignment
                folder.parent.mkdir(exist_ok=True)
                _remove_tree(folder)
                staged.rename(folder)
        finally:
            self.gb.db.rollback()  # what was not committed: with `keep` False, everything
            _remove_tree(staged)  # gone once put in place
        return {name: message for name, (_, message) in found.items() if message}

    def fails_to_record(self, student, assignment, reference, source) -> str | None:
        """Why the assignment's reference notebook (`reference()` reads it) cannot be recorded as `student`'s
        submission, nothing of it kept, or None where it can: the control that says whose failure it was when a
        notebook could not be recorded (`classgrade._record`)."""
        try:
            self.graded(student, assignment, reference(), source, keep=False)
        except Exception as err:
            return capped(f"{type(err).__name__}: {err}")
        return None

    def _scores(self, student, assignment, nb, source, found):
        """The gradebook rows of one submission, flushed, not committed."""
        submission, notebook = self._submission(student, assignment)
        for grade in notebook.grades:
            score, _ = found.get(grade.name, (0.0, ""))
            grade.auto_score = score
            grade.needs_manual_grade = grade.manual_score is not None or score is None
        cells = {c.metadata.nbgrader["grade_id"]: c for c in nb.cells if "nbgrader" in c.metadata}
        for comment in notebook.comments:
            cell = cells.get(comment.name)
            known = source.cells.get(comment.name)
            unchanged = cell is not None and known is not None and known.checksum == utils.compute_checksum(cell)
            comment.auto_comment = "No response." if unchanged and not known.task else None
        notebook.late_submission_penalty = None
        self.gb.db.flush()
        if submission.total_seconds_late > 0:
            self._late_penalty(submission, notebook, student)

    def not_graded(self, student, assignment, reason: str):
        """Record 0 for every graded cell, the reason as the answers' comment, and no autograded notebook."""
        _, notebook = self._submission(student, assignment)
        for grade in notebook.grades:
            grade.auto_score = 0.0
            grade.needs_manual_grade = grade.manual_score is not None
        for comment in notebook.comments:
            comment.auto_comment = capped(f"Not graded: {reason}")
        notebook.late_submission_penalty = None
        self.gb.db.commit()
        _remove_tree(self.root / "autograded" / student / assignment)  # it described an earlier file

    def _late_penalty(self, submission, notebook, student):
        """As nbgrader's AssignLatePenalties, from the scores just flushed."""
        self.gb.db.refresh(notebook)
        penalty = self.late.plugin_inst.late_submission_penalty(student, notebook.score, submission.total_seconds_late)
        if penalty is not None:
            notebook.late_submission_penalty = min(max(penalty, 0), notebook.score)
            self.gb.db.flush()

    def _stage(self, folder, student, assignment, text: bytes):
        """The autograded folder's files, written in `folder`: the notebook and the submission's timestamp."""
        (folder / f"{assignment}.ipynb").write_bytes(text)
        with contextlib.suppress(submissions.NotGradable, OSError):
            stamp = submissions.read_bounded(self.root / "submitted" / student / assignment / "timestamp.txt", 200)
            (folder / "timestamp.txt").write_bytes(stamp)
