"""Quizzes: data files follow the schema, answers are scored and saved, nothing saved is lost."""
import json
import string

import pytest

from autograder.learner import progress, quiz

QUIZ_FILES = sorted(p.stem for p in (quiz.importlib.resources.files("autograder.learner") / "quizzes").iterdir()
                    if p.name.endswith(".yaml"))


@pytest.fixture(autouse=True)
def private_progress(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    monkeypatch.setenv("COURSE_PROGRESS", str(path))
    return path


def first(notebook, kind):
    return next(q for _, qs in quiz.load_quiz(notebook).values() for q in qs if q.kind == kind)


@pytest.mark.parametrize("notebook", QUIZ_FILES)
def test_every_quiz_file_has_the_three_sections(notebook):
    sections = quiz.load_quiz(notebook)
    assert set(sections) == set(quiz.SECTIONS)
    levels = {q.level for q in sections["retrieve"][1]}
    assert {"factual", "conceptual", "synthetic"} <= levels
    assert len(sections["concept_check"][1]) >= 4


@pytest.mark.parametrize("notebook", QUIZ_FILES)
def test_choice_feedback_explains_and_is_saved(notebook, private_progress):
    question = first(notebook, "choice")
    right = next(i for i, c in enumerate(question.choices) if c.get("correct"))
    wrong = (right + 1) % len(question.choices)
    good, bad = quiz.check_choice(question, right), quiz.check_choice(question, wrong)
    assert good.correct and good.text.startswith("Correct.")
    assert not bad.correct and question.choices[right]["text"] in bad.text
    saved = json.loads(private_progress.read_text())["attempts"]
    assert [(a["question"], a["correct"]) for a in saved] == [(question.id, True), (question.id, False)]


@pytest.mark.parametrize("notebook", QUIZ_FILES)
def test_plain_text_answering_matches_the_widgets(notebook, capsys):
    question = first(notebook, "choice")
    right = next(i for i, c in enumerate(question.choices) if c.get("correct"))
    assert f"answer({notebook!r}, {question.id!r}, 'a')" in quiz.plain_text(question, 1)
    quiz.answer(notebook, question.id, string.ascii_lowercase[right])
    assert capsys.readouterr().out.startswith("Correct.")
    with pytest.raises(ValueError, match="one letter"):
        quiz.answer(notebook, question.id, "banana")


@pytest.mark.parametrize("notebook", QUIZ_FILES)
def test_recall_shows_the_model_answer_and_saves_the_rating(notebook, capsys):
    question = first(notebook, "recall")
    quiz.answer(notebook, question.id, "my attempt")
    assert question.answer in capsys.readouterr().out
    quiz.rate(notebook, question.id, "my attempt", 2)
    (attempt,) = progress.attempts(notebook)
    assert (attempt["kind"], attempt["rating"], attempt["response"]) == ("recall", 2, "my attempt")
    with pytest.raises(ValueError, match="from 0 to 3"):
        quiz.rate_recall(question, "x", 7)


@pytest.mark.parametrize("notebook", QUIZ_FILES)
@pytest.mark.parametrize("plain", [True, False])
def test_show_quiz_displays_every_question(notebook, plain, monkeypatch):
    shown = []
    monkeypatch.setattr(quiz, "display", shown.append)
    if plain:
        monkeypatch.setenv(quiz.PLAIN_ENV_VAR, "1")
    else:
        monkeypatch.delenv(quiz.PLAIN_ENV_VAR, raising=False)
    quiz.show_quiz(notebook, "predict")
    assert len(shown) == 1 + len(quiz.load_quiz(notebook)["predict"][1])


def test_a_damaged_progress_file_is_kept_not_overwritten(private_progress, capsys):
    private_progress.write_text("{not json")
    progress.record({"notebook": "n", "question": "q"})
    kept = list(private_progress.parent.glob("progress.json.damaged-*"))
    assert len(kept) == 1 and kept[0].read_text() == "{not json"
    assert "could not be read" in capsys.readouterr().out
    assert progress.attempts("n")[0]["question"] == "q"


def test_schema_errors_name_the_question():
    with pytest.raises(quiz.QuizFileError, match="exactly one correct"):
        quiz._parse_question("nb", "predict", {"id": "q1", "kind": "choice", "prompt": "?",
                                                "choices": [{"text": "a", "why": "w", "correct": True},
                                                            {"text": "b", "why": "w", "correct": True}]})
    with pytest.raises(quiz.QuizFileError, match="q2: a recall question needs a model answer"):
        quiz._parse_question("nb", "predict", {"id": "q2", "kind": "recall", "prompt": "?"})


# --- the widgets: keyboard and screen readers ------------------------------------------------------
INTERACTIVE = ("Button", "RadioButtons", "Textarea", "ToggleButtons")


def widget_tree(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from widget_tree(child)


@pytest.mark.parametrize("notebook", QUIZ_FILES)
@pytest.mark.parametrize("review", ["", "09_later"])
def test_every_control_is_native_and_names_its_question(notebook, review):
    ipywidgets = pytest.importorskip("ipywidgets")
    from autograder.learner import quiz_widgets
    name = "R3" if review else "Q3"
    for kind in ("choice", "recall"):
        box = quiz_widgets.question_widget(first(notebook, kind), 3, review=review)
        parts = list(widget_tree(box))
        kinds = {type(w).__name__ for w in parts}
        # native controls (radio inputs, <button>, <textarea>) only: Tab reaches them, Space/Enter works them
        assert kinds <= set(INTERACTIVE) | {"VBox", "Output"}, kinds
        controls = [w for w in parts if type(w).__name__ in INTERACTIVE]
        assert controls and all(w.tabbable is not False and not w.disabled for w in controls)
        for w in controls:
            said = f"{w.description} {w.tooltip or ''}"
            assert name in said, f"{type(w).__name__} does not say which question it belongs to: {said!r}"
        for w in controls:
            if isinstance(w, ipywidgets.ToggleButtons):
                assert len(w.tooltips) == len(w.options) and all(w.tooltips)


def test_clicking_check_scores_and_saves_a_review_answer(private_progress):
    from autograder.learner import quiz_widgets
    question = first("01_chain_rule", "choice")
    right = next(i for i, c in enumerate(question.choices) if c.get("correct"))
    box = quiz_widgets.question_widget(question, 1, review="02_micrograd", note="you missed it last time")
    picker, button = (next(w for w in widget_tree(box) if type(w).__name__ == kind) for kind in ("RadioButtons", "Button"))
    button.click()  # nothing picked yet: nothing saved
    assert not private_progress.exists()
    picker.value = right
    button.click()  # what a mouse click, Enter or Space on the focused button does
    (saved,) = progress.attempts("01_chain_rule")
    assert (saved["question"], saved["correct"], saved["review"]) == (question.id, True, "02_micrograd")


def test_revealing_and_rating_a_recall_answer_saves_it(private_progress):
    from autograder.learner import quiz_widgets
    question = first("02_micrograd", "recall")
    box = quiz_widgets.question_widget(question, 2)
    typed, reveal, ratings = (next(w for w in widget_tree(box) if type(w).__name__ == kind)
                              for kind in ("Textarea", "Button", "ToggleButtons"))
    assert ratings.layout.display == "none"
    typed.value = "the chain rule, backwards"
    reveal.click()
    assert ratings.layout.display is None
    ratings.value = 3
    (saved,) = progress.attempts("02_micrograd")
    assert (saved["response"], saved["rating"], "review" in saved) == ("the chain rule, backwards", 3, False)


def test_plain_text_review_questions_say_where_they_come_from():
    question = first("01_chain_rule", "choice")
    text = quiz.plain_text(question, 2, review="03_vjp", note="you missed it last time")
    assert text.startswith("**R2.** *from 01_chain_rule: you missed it last time*")
    assert f"answer('01_chain_rule', {question.id!r}, 'a', review='03_vjp')" in text
