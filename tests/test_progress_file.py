"""The progress file: appended one line per record, never losing one, even with two writers at once."""
import json
import os
import subprocess
import sys

import pytest

from autograder.learner import progress_file


@pytest.fixture(autouse=True)
def private_progress(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    monkeypatch.setenv("COURSE_PROGRESS", str(path))
    return path


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_records_are_appended_as_json_lines(private_progress):
    progress_file.record({"notebook": "01_chain_rule", "question": "q", "kind": "numeric", "correct": True})
    progress_file.append("test", {"notebook": "01_chain_rule", "exercise": "relu_grad", "passed": True})
    first, second = lines(private_progress)
    assert (first["type"], first["question"]) == ("attempt", "q")
    assert (second["type"], second["exercise"]) == ("test", "relu_grad")
    assert "T" in first["time"] and first["time"][-6] in "+-"  # local time with its offset
    data = progress_file.load()
    assert [a["question"] for a in data["attempts"]] == ["q"] and "type" not in data["attempts"][0]
    with pytest.raises(ValueError, match="one of"):
        progress_file.append("note", {})


WRITER = """
import sys
from autograder.learner import progress_file
name, count = sys.argv[1], int(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()  # both writers start together
for i in range(count):
    progress_file.record({"notebook": "01_chain_rule", "question": f"{name}-{i}", "kind": "short", "correct": True})
"""


@pytest.mark.parametrize("lock", [True, False], ids=["with the lock", "append only, no lock"])
def test_two_processes_writing_at_once_lose_nothing(private_progress, tmp_path, lock):
    """300 + 300 records from two kernels at the same moment: 600 kept, each once. Without the lock (as
    on a folder that offers none) the single appending write still keeps every record whole."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER if lock else "from autograder.learner import progress_file\n"
                      "progress_file.fcntl = progress_file.msvcrt = None\n" + WRITER)
    env = {**os.environ, "COURSE_PROGRESS": str(private_progress)}
    writers = [subprocess.Popen([sys.executable, str(script), name, "300"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for name in "ab"]
    for w in writers:
        assert w.stdout.readline().strip() == "ready"
    for w in writers:
        w.stdin.write("go\n")
        w.stdin.flush()
    for w in writers:
        _, err = w.communicate(timeout=300)
        assert w.returncode == 0, err
    questions = [a["question"] for a in progress_file.load()["attempts"]]
    switches = sum(a[0] != b[0] for a, b in zip(questions, questions[1:]))
    print(f"{len(questions)} records kept; the writers took turns {switches} times")
    assert switches >= 10, "the two writers did not write at the same time: the test proves nothing"
    assert len(questions) == 600 and set(questions) == {f"{n}-{i}" for n in "ab" for i in range(300)}
    assert not list(private_progress.parent.glob("*.damaged-*")) and not list(private_progress.parent.glob("*.tmp"))


def test_a_damaged_file_is_kept_aside_and_its_readable_records_carried_over(private_progress, capsys):
    good = json.dumps({"type": "attempt", "notebook": "n", "question": "kept", "kind": "short", "correct": True})
    damaged = good + "\n{not json\n" + good.replace("kept", "also kept") + "\n"
    private_progress.write_text(damaged)
    progress_file.record({"notebook": "n", "question": "new"})
    (kept,) = private_progress.parent.glob("progress.json.damaged-*")
    assert kept.read_text() == damaged  # never overwritten, not even appended to
    out = capsys.readouterr().out
    assert "could not be read (line 2" in out and str(kept) in out and "2 records that could be read" in out
    assert [a["question"] for a in progress_file.attempts("n")] == ["kept", "also kept", "new"]


def test_a_file_that_is_not_progress_at_all_is_kept_aside(private_progress, capsys):
    private_progress.write_text("{not json")
    progress_file.record({"notebook": "n", "question": "q"})
    (kept,) = private_progress.parent.glob("progress.json.damaged-*")
    assert kept.read_text() == "{not json"
    assert "could not be read" in capsys.readouterr().out
    assert [a["question"] for a in progress_file.attempts("n")] == ["q"]
    private_progress.write_bytes(b"\xff\xfe garbage")
    progress_file.load()
    # a second one, not a rename over the first
    assert len(list(private_progress.parent.glob("progress.json.damaged-*"))) == 2


def test_a_damaged_legacy_tests_list_is_kept_aside(private_progress, capsys):
    private_progress.write_text(json.dumps({"version": 1, "attempts": [], "tests": "oops"}))
    progress_file.append("test", {"notebook": "01_chain_rule", "exercise": "relu_grad", "passed": False})
    assert "'tests' is not a list" in capsys.readouterr().out
    assert len(list(private_progress.parent.glob("progress.json.damaged-*"))) == 1
    assert [t["exercise"] for t in progress_file.test_runs()] == ["relu_grad"]


def test_a_file_of_the_first_format_is_read_and_appended_to(private_progress):
    """The course's first format: one JSON document, choice answers saved by position."""
    old = {"version": 1,
           "attempts": [{"notebook": "01_chain_rule", "section": "predict", "question": "grad-shape-of-weight-matrix",
                         "kind": "choice", "response": 0, "correct": True, "time": "2025-03-01T10:00:00"}],
           "tests": [{"notebook": "01_chain_rule", "exercise": "relu_grad", "passed": True,
                      "time": "2025-03-01T10:05:00"}]}
    private_progress.write_text(json.dumps(old, indent=1))  # as it was written: no newline at the end
    progress_file.record({"notebook": "01_chain_rule", "question": "new", "kind": "short", "correct": False})
    data = progress_file.load()
    assert data["attempts"][0] == old["attempts"][0] and data["attempts"][1]["question"] == "new"
    assert data["tests"] == old["tests"]
    assert private_progress.read_text().startswith(json.dumps(old, indent=1) + "\n")  # untouched, then appended
    assert not list(private_progress.parent.glob("*.damaged-*"))


def test_an_unfinished_last_line_waits_unless_the_file_is_locked(private_progress):
    record = json.dumps({"type": "attempt", "notebook": "n", "question": "q", "kind": "short", "correct": True})
    text = record + "\n" + record[:20]
    assert progress_file.parse(text, locked=False) == ([json.loads(record)], [])  # another kernel is writing it
    assert progress_file.parse(text, locked=True)[1]  # under the lock nobody is: it is damage
    private_progress.write_text(text)
    progress_file.record({"notebook": "n", "question": "after"})
    (kept,) = private_progress.parent.glob("progress.json.damaged-*")
    assert [a["question"] for a in progress_file.attempts("n")] == ["q", "after"]


def test_records_of_unknown_types_are_skipped_not_damage(private_progress):
    private_progress.write_text(json.dumps({"type": "bookmark", "notebook": "n"}) + "\n")
    assert progress_file.load() == {"learner": None, "attempts": [], "tests": []}
    assert not list(private_progress.parent.glob("*.damaged-*"))


def test_the_learner_id_is_made_once_and_kept(private_progress):
    first = progress_file.learner_id()
    assert first == progress_file.learner_id() and len(first) == 16
    private_progress.write_text(private_progress.read_text()
                                + json.dumps({"type": "learner", "id": "a-later-one"}) + "\n")
    assert progress_file.learner_id() == first  # the first one in the file counts


def test_showing_a_quiz_never_writes_while_graded_nor_fails_where_it_cannot_write(private_progress, monkeypatch):
    monkeypatch.setenv(progress_file.GRADING_ENV_VAR, "autograde")
    graded = progress_file.learner_id()
    assert graded == progress_file.learner_id() and not private_progress.exists()
    monkeypatch.delenv(progress_file.GRADING_ENV_VAR)
    private_progress.mkdir()  # a path that cannot be written as a file
    assert progress_file.learner_id() == graded  # this process's own id, and no exception
