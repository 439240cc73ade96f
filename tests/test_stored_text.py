"""What a submission's code sends is stored as text, wherever it is stored, and never stops it being recorded.

A lone surrogate (no file encoding takes one), a NUL byte or a terminal's escape sequence in an exception
message or a print is that submission's own result: made storable (`recording.storable`) in the autograded
notebook, the gradebook and the reports, so that the gradebook, the autograded notebooks and nbgrader's
feedback agree for every student. A notebook that cannot be recorded all the same is judged by a control,
the reference notebook recorded the same way: the grader's failure only where that fails too.
"""
import re

import course
import nbformat
import pytest
from nbgrader import utils
from test_classgrade import CELL_SECONDS, GOOD, NAME, SANDBOXED, TOTAL, VICTIM, new_class, small_class

from autograder.grader import classgrade, recording, report, sanitize
from autograder.grader.sandbox import Limits

# What neither a page, a terminal nor a spreadsheet may receive raw (tab, newline and carriage return aside).
RAW_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
HOSTILE = {  # student -> (what relu_grad prints and raises, as its source writes it; how it is shown)
    "lone_surrogate": ("bad \\ud800 value", "bad \ufffd value"),
    "nul_byte": ("bad \\x00 value", "bad \\x00 value"),
    "clears_the_screen": ("bad \\x1b[2J value", "bad \\x1b[2J value"),
}


@pytest.mark.parametrize("text, shown", [
    ("bad \ud800 value", "bad \ufffd value"),
    ("a\x00b", "a\\x00b"),
    ("x\x1b[2Jy", "x\\x1b[2Jy"),
    ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
    ("line\nnext\ttab\rback", "line\nnext\ttab\\rback"),
    ("\x7f\x85\x9b", "\\x7f\\x85\\x9b"),
    ("plain é ∂", "plain é ∂"),
])
def test_a_message_shows_surrogates_replaced_and_control_characters_escaped(text, shown):
    assert recording.storable(text) == shown
    assert recording.storable(shown) == shown, "storing again changes nothing"
    shown.encode("utf-8")


def test_a_notebook_keeps_carriage_returns_and_colour_codes_and_escapes_the_rest():
    keep = recording.NOTEBOOK_CONTROLS
    assert recording.storable("\x1b[31mError\x1b[39m \x1b[1;32mok\x1b[m", keep) == \
        "\x1b[31mError\x1b[39m \x1b[1;32mok\x1b[m", "IPython's colours: nbconvert renders them"
    assert recording.storable("50%\r100%\n", keep) == "50%\r100%\n"
    assert recording.storable("a\x1b[2Jb\x1bc\x00\ud800", keep) == "a\\x1b[2Jb\\x1bc\\x00\ufffd"


def test_a_message_of_control_characters_fits_its_cap_once_escaped():
    message = recording.capped("\x00" * 2_000)
    assert len(message) <= recording.MESSAGE_CHARS and "\x00" not in message and "more characters]" in message
    assert recording.capped(message) == message


def test_every_text_an_output_carries_is_storable_in_the_notebook():
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="a\x00b\ud800\r\n"),
        nbformat.v4.new_output("error", ename="Value\x1b[2JError", evalue="bad \ud800",
                               traceback=["\x1b[31mValueError\x1b[39m: bad \x00"]),
        nbformat.v4.new_output("display_data", data={"application/json": {"k\ud800": ["v\x00"]}, "text/plain": "\x07"},
                               metadata={"m": "\ud800"}),
    ]
    nb = recording.bound_outputs(nbformat.v4.new_notebook(cells=[cell]))
    nbformat.writes(nb).encode("utf-8")
    stream, error, display = nb.cells[0].outputs
    assert stream.text == "a\\x00b\ufffd\r\n"
    assert (error.ename, error.evalue, error.traceback) == ("Value\\x1b[2JError", "bad \ufffd",
                                                            ["\x1b[31mValueError\x1b[39m: bad \\x00"])
    assert display.data == {"application/json": {"k\ufffd": ["v\\x00"]}, "text/plain": "\\x07"}
    assert display.metadata == {"m": "\ufffd"}


def test_the_reports_show_control_characters_escaped(tmp_path):
    rows = [{"student": "s", "notebook": NAME, "exercise": VICTIM, "score": 0.0, "max_score": 1.0,
             "message": "ValueError: bad \x00 \x1b[2J \ud800 value"}]
    outcome = recording.Outcome("s", NAME, False, reason="could not be read (\x1b]0;title\x07)", notes=["\r=1+1"])
    files = report.write_report(rows, tmp_path, [outcome])
    for path in files:
        if path.suffix == ".csv":
            text = path.read_bytes().decode("utf-8")
            assert not RAW_CONTROL.search(text.replace("\r\n", "\n")), (path.name, text)
    scores = (tmp_path / "scores.csv").read_text(encoding="utf-8")
    assert "ValueError: bad \\x00 \\x1b[2J \ufffd value" in scores
    assert "\\x1b]0;title\\x07" in (tmp_path / "failures.csv").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def course_01(tmp_path_factory):
    """Notebook 01's course, released and in the gradebook, with no submission: tests copy it (`small_class`)."""
    root = tmp_path_factory.mktemp("course_01")
    new_class(root)
    return root


def restored(root, student="student"):
    """(`student`'s submission of notebook 01, restored as for grading, the assignment's source)."""
    with classgrade.open_gradebook(root) as gb:
        source = sanitize.load_source(gb, NAME)
    nb, _ = sanitize.restore(course.read(root / "submitted" / student / NAME / f"{NAME}.ipynb"), source)
    return nb, source


def record(root, nb, source, student="student"):
    """The outcome of recording `nb` as `student`'s submission, as a class run records each one."""
    recorder, outcomes = recording.Recorder(root), {}
    try:
        classgrade._record(recorder, outcomes, (student, NAME), executed=nb, source=source)
    finally:
        recorder.close()
    return outcomes[(student, NAME)]


def by_student(root) -> dict:
    """{student: {exercise: (score, message)}} from the gradebook."""
    found = {}
    for row in classgrade.scores(root, [NAME]):
        found.setdefault(row["student"], {})[row["exercise"]] = (row["score"], row["message"])
    return found


def test_a_notebook_that_cannot_be_stored_where_the_reference_can_is_the_students_zero(course_01, tmp_path):
    """A solution cell's source with a lone surrogate (a submitted file can escape one in its JSON) is no
    output to make storable: the notebook cannot be encoded. The control, the reference notebook recorded
    the same way, can be: the student's 0 with the reason, and nothing of the control is kept."""
    small_class(course_01, tmp_path, {"student": GOOD})
    nb, source = restored(tmp_path)
    next(c for c in nb.cells if utils.is_solution(c)).source += "\n# \ud800"
    outcome = record(tmp_path, nb, source)
    assert not outcome.graded and not outcome.grader_side
    assert outcome.reason.startswith("its scores could not be recorded (UnicodeEncodeError")
    assert outcome.reason.endswith("the assignment's reference notebook, recorded the same way, can be: the cause is "
                                   "in this notebook")
    gradebook = by_student(tmp_path)
    assert list(gradebook) == ["student"], "the control left no row"
    assert {score for score, _ in gradebook["student"].values()} == {0.0}
    assert all(message.startswith("Not graded: its scores could not be recorded (UnicodeEncodeError")
               for _, message in gradebook["student"].values())
    assert not (tmp_path / "autograded" / "student").exists()
    assert list((tmp_path / "autograded").iterdir()) == [], "nothing staged is left"


def test_a_recording_failure_the_reference_meets_too_is_the_graders_and_leaves_both_as_they_were(
        course_01, tmp_path, monkeypatch):
    """The gradebook fails after the scores went in, before they are committed (as a full disk could make it),
    for the submission and for the control: the grader's failure, not graded; the gradebook and the
    autograded notebook both still hold the earlier grading (never new scores without their notebook)."""
    small_class(course_01, tmp_path, {"student": GOOD})
    nb, source = restored(tmp_path)
    assert record(tmp_path, nb, source).graded
    before, notebook = by_student(tmp_path), tmp_path / "autograded" / "student" / NAME / f"{NAME}.ipynb"
    written = notebook.read_bytes()
    flushed = recording.Recorder._scores

    def fails_before_the_commit(self, *args):
        flushed(self, *args)
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(recording.Recorder, "_scores", fails_before_the_commit)
    nb, source = restored(tmp_path)
    next(c for c in nb.cells if utils.is_grade(c) and not utils.is_solution(c)).outputs = [
        nbformat.v4.new_output("error", ename="ValueError", evalue="a new answer", traceback=[])]
    outcome = record(tmp_path, nb, source)
    assert not outcome.graded and outcome.grader_side
    assert outcome.reason == ("its scores could not be recorded (OSError: [Errno 28] No space left on device); the "
                              "assignment's reference notebook, recorded the same way, fails too: OSError: [Errno 28] "
                              "No space left on device")
    assert by_student(tmp_path) == before and sum(score for score, _ in before["student"].values()) == TOTAL
    assert notebook.read_bytes() == written
    assert sorted(p.name for p in (tmp_path / "autograded").iterdir()) == ["student"], "nothing staged is left"


def answer(text):
    """A relu_grad that prints `text` and raises it (`text` as its source writes it: escapes stay escapes)."""
    return f"def relu_grad(x):\n    print('{text}')\n    raise ValueError('{text}')"


def autograded_scores(root, student) -> dict:
    """{exercise: score} of each test cell of `student`'s autograded notebook, as its outputs say."""
    nb = nbformat.read(root / "autograded" / student / NAME / f"{NAME}.ipynb", as_version=4)
    return {cell.metadata.nbgrader.grade_id: recording.cell_score(cell, cell.metadata.nbgrader.points)[0]
            for cell in nb.cells if utils.is_grade(cell) and not utils.is_solution(cell)
            and cell.metadata.nbgrader.points}


@SANDBOXED
@pytest.mark.timeout(900)
def test_hostile_text_in_an_answer_is_that_students_zero_shown_as_text_everywhere(course_01, tmp_path):
    """A real class run (sandboxed kernels, trusted mode): each answer prints and raises a message with a lone
    surrogate, a NUL byte or the escape that clears a terminal. Each student is graded, 0 on relu_grad with its
    message shown as text; the gradebook and the autograded notebooks agree; nbgrader's feedback is made for
    every student, and no page or report holds a raw control character."""
    run = small_class(course_01, tmp_path, {student: answer(text) for student, (text, _) in HOSTILE.items()})
    result = classgrade.grade_class(tmp_path, [NAME], workers=2, limits=Limits(cell_seconds=CELL_SECONDS),
                                    progress=False, run=run)
    assert result.not_graded() == [], [o.reason for o in result.not_graded()]
    gradebook = by_student(tmp_path)
    for student, (_, shown) in HOSTILE.items():
        score, message = gradebook[student][VICTIM]
        assert score == 0 and f"raised ValueError: {shown}" in message, (student, message)
        assert sum(s for s, _ in gradebook[student].values()) == TOTAL - 1
        assert autograded_scores(tmp_path, student) == {k: s for k, (s, _) in gradebook[student].items()}, student
    run("generate_feedback", NAME)
    for student, (_, shown) in HOSTILE.items():
        page = (tmp_path / "feedback" / student / NAME / f"{NAME}.html").read_bytes().decode("utf-8")
        assert shown in page and not RAW_CONTROL.search(page.replace("\r", "")), student
    reports = report.write_report(classgrade.scores(tmp_path, [NAME]), tmp_path / "reports", result.outcomes.values())
    for path in reports:
        if path.suffix == ".csv":
            assert not RAW_CONTROL.search(path.read_bytes().decode("utf-8").replace("\r\n", "\n")), path.name
