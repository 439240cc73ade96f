"""Every notebook's quizzes where widgets do not render (COURSE_PLAIN_QUIZ=1): each `answer(...)` and `rate(...)`
call that a quiz cell prints runs, as printed and with an answer in place of its placeholder, in the namespace the
notebook's set-up cell makes. (09's set-up cell imported neither: every printed call raised NameError.)

The notebooks are the released ones, run in a kernel of their own as a learner runs them: the set-up cells (up to
the first that imports the course's package), then the quiz cells (`show_quiz`, `show_question`, the opening
review), then each printed call in a cell of its own.
"""
import re

import course
import nbformat
import pytest

from autograder.grader.execution import SteadyNotebookClient
from autograder.learner import quiz

QUIZ_CELL = re.compile(r"\s*(?:show_quiz|show_question|review\.show|review\.show_due)\(.*\)\s*", re.S)
PRINTED_CALL = re.compile(r"`((?:answer|rate)\(.*?\))`")
# the placeholder each printed call shows, and an answer a learner types in its place
ANSWERS = {"'?'": "'a'", "'...'": "'1'", "'your answer'": "'my words'"}
NOTEBOOK_NAMES = [*course.assignment_names(), "review"]


def set_up_and_quiz_cells(nb) -> tuple:
    """(the code cells up to the set-up cell, the quiz cells after it), as fresh cells."""
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    set_up = next(i for i, source in enumerate(code) if "autograder.learner" in source)
    quizzes = [source for source in code[set_up + 1:] if QUIZ_CELL.fullmatch(source)]
    return [nbformat.v4.new_code_cell(s) for s in code[:set_up + 1]], [nbformat.v4.new_code_cell(s) for s in quizzes]


def text_of(cell) -> str:
    return "".join(out.get("text", "") or out.get("data", {}).get("text/markdown", "") for out in cell.outputs)


def calls_to_try(printed) -> list:
    """Each printed call as it is, then with an answer in place of its placeholder (and rate('good') after a
    free-recall answer)."""
    calls = []
    for call in printed:
        placeholder = next((p for p in ANSWERS if call.endswith(f"{p})") or f"{p}, review=" in call), None)
        calls.append(call)
        if placeholder:
            calls.append(call.replace(placeholder, ANSWERS[placeholder], 1))
            if placeholder == "'your answer'":
                calls.append("rate('good')")
    return calls


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_every_printed_quiz_call_runs_in_the_notebooks_namespace(name, tmp_path, monkeypatch):
    nb = course.read(course.NOTEBOOKS / f"{name}.ipynb")
    set_up, quizzes = set_up_and_quiz_cells(nb)
    assert quizzes, f"{name}: no quiz cell found after the set-up cell"
    run = nbformat.v4.new_notebook(cells=set_up + quizzes)
    monkeypatch.setenv(quiz.PLAIN_ENV_VAR, "1")
    monkeypatch.setenv("COURSE_PROGRESS", str(tmp_path / "progress.json"))
    client = SteadyNotebookClient(run, timeout=120, kernel_name="python3", allow_errors=True,
                                  resources={"metadata": {"path": str(tmp_path)}})
    with client.setup_kernel():
        for index, cell in enumerate(run.cells):
            client.execute_cell(cell, index)
        for cell in run.cells:
            assert course.failure_text(cell) == "", f"{name}: {cell.source[:60]!r}: {course.failure_text(cell)}"
        printed = [call for cell in quizzes for call in PRINTED_CALL.findall(text_of(cell))]
        assert printed, f"{name}: its quiz cells print no answer(...) call in plain mode"
        failed = []
        for call in calls_to_try(printed):
            cell = nbformat.v4.new_code_cell(call)
            run.cells.append(cell)
            client.execute_cell(cell, len(run.cells) - 1)
            said = text_of(cell)
            if course.failure_text(cell) or not said.strip() or "Traceback" in said:
                failed.append(f"{call}: {course.failure_text(cell) or said or 'printed nothing'}")
    assert not failed, f"{name}: {len(failed)} of the printed calls fail:\n" + "\n".join(failed[:10])


def test_the_printed_calls_are_found_and_given_answers():
    printed = ["answer('03_vjp', 'q1', '?')", "answer('03_vjp', 'q2', '...', review='04_toggles')",
               "answer('03_vjp', 'q3', 'your answer')"]
    assert calls_to_try(printed) == [
        printed[0], "answer('03_vjp', 'q1', 'a')", printed[1], "answer('03_vjp', 'q2', '1', review='04_toggles')",
        printed[2], "answer('03_vjp', 'q3', 'my words')", "rate('good')"]
    markdown = "Answer in place of `?`: `answer('03_vjp', 'q1', '?')`"
    assert PRINTED_CALL.findall(markdown) == ["answer('03_vjp', 'q1', '?')"]
    set_up, quizzes = set_up_and_quiz_cells(course.read(course.NOTEBOOKS / "09_kernels.ipynb"))
    assert "triton_setup" in set_up[-1].source and any("show_question" in c.source for c in quizzes)
