"""Spaced retrieval: the FSRS schedule read from the progress file, and the review at a notebook's top."""
import datetime
import json
import os

import course
import pytest

from autograder.grader.execution import SteadyNotebookClient
from autograder.learner import progress_file, quiz, quiz_schema, review

UTC = datetime.UTC


@pytest.fixture(autouse=True)
def private_progress(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    monkeypatch.setenv("COURSE_PROGRESS", str(path))
    monkeypatch.delenv(quiz.PLAIN_ENV_VAR, raising=False)
    return path


def questions(notebook, kind=None):
    return [q for q in quiz_schema.all_questions(notebook) if kind in (None, q.kind)]


def at(day, hour=10, minute=0):
    return datetime.datetime.fromisoformat(f"{day}T{hour:02d}:{minute:02d}:00").replace(tzinfo=UTC)


def judged(q, correct, when="2025-03-01", review_in=None, hour=10, minute=0):
    attempt = {"notebook": q.notebook, "section": q.section, "question": q.id, "kind": q.kind,
               "response": "x", "correct": correct, "time": at(when, hour, minute).isoformat()}
    return {**attempt, "review": review_in} if review_in else attempt


def rated(q, rating, when="2025-03-01", hour=10):
    return {"notebook": q.notebook, "section": q.section, "question": q.id, "kind": "recall",
            "response": "my words", "rating": rating, "time": at(when, hour).isoformat()}


def keys(cards):
    return [(c.question.notebook, c.question.id) for c in cards]


def card_of(q, attempts):
    return next(c for c in review.cards([q.notebook], attempts) if c.question == q)


def test_course_order_is_the_sorted_quiz_files():
    names = review.course_notebooks()
    assert names == sorted(names) and names[0] == "01_chain_rule" and len(names) >= 2
    assert review.earlier_notebooks(names[2]) == names[:2]
    with pytest.raises(ValueError, match="01_chain_rule"):
        review.earlier_notebooks("99_nothing")


def test_without_history_the_concept_checks_come_first_latest_notebook_first():
    due = review.schedule("03_vjp", count=4)
    cc = {n: quiz.load_quiz(n)["concept_check"][1] for n in ("01_chain_rule", "02_micrograd")}
    assert [c.question for c in due] == [cc["02_micrograd"][0], cc["01_chain_rule"][0],
                                         cc["02_micrograd"][1], cc["01_chain_rule"][1]]
    assert all(c.note == "not answered yet" and not c.seen for c in due)
    assert keys(review.schedule("03_vjp", count=4)) == keys(due)  # deterministic


def test_the_first_notebook_says_so_in_one_line(capsys, monkeypatch):
    shown = []
    monkeypatch.setattr(quiz, "display", shown.append)
    monkeypatch.setattr(review, "display", shown.append)
    review.show("01_chain_rule")
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "first notebook" in out
    assert shown == [] and review.schedule("01_chain_rule") == []


def test_a_missed_question_comes_back_after_ten_minutes_a_right_one_after_days():
    missed, right = questions("01_chain_rule", "numeric")[:2]
    history = [judged(right, True), judged(missed, False)]
    five_minutes, later = at("2025-03-01", 10, 5), at("2025-03-01", 10, 11)
    assert not card_of(missed, history).is_due(five_minutes) and card_of(missed, history).is_due(later)
    assert keys(review.schedule("02_micrograd", count=1, attempts=history, now=later)) == [("01_chain_rule", missed.id)]
    first = review.schedule("02_micrograd", count=1, attempts=history, now=later)[0]
    assert first.note == "you missed it last time (2025-03-01)"
    good = card_of(right, history)
    assert good.due == at("2025-03-03")  # FSRS: a first "good" is due after 2 days
    shown = keys(review.schedule("02_micrograd", count=100, attempts=history, now=later))
    assert ("01_chain_rule", right.id) not in shown  # not due: not shown at all
    assert ("01_chain_rule", right.id) in keys(review.schedule("02_micrograd", count=100, attempts=history,
                                                              now=at("2025-03-03", 11)))


def test_each_success_sends_a_question_away_for_longer():
    q = questions("01_chain_rule", "numeric")[0]
    history, intervals, when = [], [], at("2025-03-01")
    for _ in range(4):
        history.append({**judged(q, True), "time": when.isoformat()})
        card = card_of(q, history)
        intervals.append((card.due - when).days)
        when = card.due
    assert intervals[:3] == [2, 11, 46] and intervals[3] > intervals[2], intervals  # as review.py's docstring says
    history.append({**judged(q, False), "time": when.isoformat()})  # a later miss: short again
    assert card_of(q, history).due - when == datetime.timedelta(minutes=10)


@pytest.mark.parametrize("rating, due_after", [(0, datetime.timedelta(minutes=10)), (1, datetime.timedelta(minutes=15)),
                                               (2, datetime.timedelta(days=2)), (3, datetime.timedelta(days=8))])
def test_self_ratings_set_the_first_interval(rating, due_after):
    q = questions("01_chain_rule", "recall")[0]
    card = card_of(q, [rated(q, rating)])
    assert card.due - at("2025-03-01") == due_after
    if rating <= 1:
        assert card.note == f"you rated it '{quiz.RATINGS[rating]}' last time (2025-03-01)"


def test_one_grade_per_sitting_first_judged_answer_last_rating():
    q, r = questions("01_chain_rule", "numeric")[0], questions("01_chain_rule", "recall")[0]
    same_sitting = [judged(q, False), judged(q, True, minute=1), rated(r, 0), rated(r, 2, hour=11)]
    assert card_of(q, same_sitting).last_outcome == "wrong" and card_of(q, same_sitting).grades == 1
    assert card_of(r, same_sitting).last_outcome == "good"  # the corrected rating counts
    in_a_review = [judged(q, False), judged(q, True, review_in="02_micrograd", hour=11)]  # same day, another notebook
    assert card_of(q, in_a_review).grades == 2 and card_of(q, in_a_review).last_outcome == "right"


def test_due_questions_come_first_least_likely_recalled_first_taking_turns_between_notebooks():
    a, b = questions("01_chain_rule", "numeric")[:2]
    c = questions("02_micrograd", "numeric")[0]
    history = [judged(a, True, "2025-03-01"), judged(b, False, "2025-03-05"), judged(c, False, "2025-03-05"),
               judged(a, False, "2025-03-05", review_in="02_micrograd")]  # a: right, then missed in a review
    now = at("2025-03-05", 12)
    due = review.schedule("03_vjp", count=3, attempts=history, now=now)
    assert {c.question.notebook for c in due[:2]} == {"01_chain_rule", "02_micrograd"}  # the notebooks take turns
    chances = [c.recall_chance(now) for c in review.rank_due(review.cards(["01_chain_rule"], history), now)]
    assert chances == sorted(chances) and len(chances) == 2
    assert all(c.seen for c in due)  # three due questions, before any new one


def test_new_questions_fill_the_review_after_the_due_ones():
    q = questions("01_chain_rule", "numeric")[0]
    history = [judged(q, False)]
    shown = review.schedule("02_micrograd", count=5, attempts=history, now=at("2025-03-01", 12))
    assert keys(shown[:1]) == [("01_chain_rule", q.id)] and not any(c.seen for c in shown[1:])
    assert len(shown) == 5


def test_files_of_the_first_format_still_count(private_progress):
    """Choice answers saved by position (the first format) grade their question by right or wrong."""
    q = questions("01_chain_rule", "numeric")[0]  # a question that was a choice question then
    old = {"version": 1, "attempts": [{"notebook": "01_chain_rule", "section": "predict", "question": q.id,
                                       "kind": "choice", "response": 0, "correct": True,
                                       "time": "2025-03-01T10:00:00"}]}
    private_progress.write_text(json.dumps(old, indent=1))
    card = card_of(q, None)
    assert card.seen and card.last_outcome == "right" and card.grades == 1
    local = datetime.datetime.fromisoformat("2025-03-01T10:00:00").astimezone(UTC)  # no offset: local time
    assert card.memory.last_review == local


def test_a_hand_edited_file_does_not_break_the_schedule():
    q = questions("01_chain_rule", "numeric")[0]
    junk = ["text", None, {"notebook": q.notebook}, {**judged(q, True), "correct": "yes"},
            {**rated(questions("01_chain_rule", "recall")[0], 2), "rating": True},
            {**judged(q, False), "question": "no-such-question"}, {**judged(q, False), "time": "yesterday"}]
    clean = review.schedule("02_micrograd", count=3)
    assert keys(review.schedule("02_micrograd", count=3, attempts=junk)) == keys(clean)


def test_count_must_be_a_positive_whole_number():
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="whole number"):
            review.schedule("02_micrograd", count=bad)


def test_the_summary_says_how_many_are_due():
    a, b = questions("01_chain_rule", "numeric")[:2]
    history = [judged(a, True), judged(b, False)]
    text = review.summary("02_micrograd", attempts=history, now=at("2025-03-01", 12))
    total = len(quiz_schema.all_questions("01_chain_rule"))
    assert text.startswith("**1 question due**") and f"{total - 2} never answered" in text
    assert "next one not yet due comes back on 2025-03-03" in text


@pytest.mark.parametrize("plain", [True, False])
def test_review_shows_the_scheduled_questions(plain, monkeypatch):
    shown = []
    monkeypatch.setattr(quiz, "display", shown.append)
    monkeypatch.setattr(review, "display", shown.append)
    if plain:
        monkeypatch.setenv(quiz.PLAIN_ENV_VAR, "1")
    review.show("03_vjp", count=3)
    assert len(shown) == 4 and "Review: 3 questions" in shown[0].data and "0 questions due" in shown[0].data
    due = review.schedule("03_vjp", count=3)
    if plain:
        assert f"answer({due[0].question.notebook!r}, " in shown[1].data and due[0].question.prompt in shown[1].data
        assert "review='03_vjp'" in shown[1].data
        assert f"from {due[0].question.notebook}: not answered yet" in shown[1].data


def test_nothing_due_and_nothing_new_says_so(monkeypatch, capsys):
    everything = quiz_schema.all_questions("01_chain_rule")
    history = [judged(q, True) if q.kind != "recall" else rated(q, 3) for q in everything]
    monkeypatch.setattr(progress_file, "load", lambda: {"learner": None, "attempts": history, "tests": []})
    shown = []
    monkeypatch.setattr(review, "display", shown.append)
    monkeypatch.setattr(review, "_now", lambda now: at("2025-03-01", 12))
    review.show("02_micrograd")
    assert "Review: 0 questions" in shown[0].data and "Nothing is due now" in capsys.readouterr().out


def test_review_answers_are_saved_as_reviews_and_reschedule(private_progress, capsys):
    missed = next(c.question for c in review.schedule("03_vjp", count=20) if c.question.kind == "numeric")
    quiz.answer(missed.notebook, missed.id, "123456789", review="03_vjp")
    assert capsys.readouterr().out.startswith("Not quite")
    (saved,) = progress_file.attempts()
    assert (saved["notebook"], saved["question"], saved["review"], saved["correct"]) == (
        missed.notebook, missed.id, "03_vjp", False)
    # ten minutes later, a later notebook's review puts it first, as missed
    later = datetime.datetime.now(UTC) + datetime.timedelta(minutes=11)
    first = review.schedule("04_toggles", count=1, now=later)[0]
    assert first.question == missed and first.note.startswith("you missed it last time")


def test_review_recall_answers_in_plain_text(capsys):
    q = questions("01_chain_rule", "recall")[0]
    quiz.answer(q.notebook, q.id, "my words", review="02_micrograd")
    assert capsys.readouterr().out.startswith("Model answer")
    quiz.rate(q.notebook, q.id, "my words", 1, review="02_micrograd")
    (saved,) = progress_file.attempts(q.notebook)
    assert (saved["rating"], saved["review"]) == (1, "02_micrograd")


# --- every notebook, the last one included: the review notebook ---------------------------------------
def test_every_question_of_every_notebook_has_a_card():
    """No section is left out of the schedule (a question without a card would never come back)."""
    notebooks = review.course_notebooks()
    assert sorted(keys(review.cards(notebooks, []))) == sorted(
        (q.notebook, q.id) for n in notebooks for q in quiz_schema.all_questions(n))


def test_the_last_notebooks_questions_come_back_only_in_the_review_notebook():
    """A notebook's review draws on the notebooks before it, so the last one's never come back there."""
    *_, last = review.course_notebooks()
    q = questions(last, "numeric")[0]
    history = [judged(q, False)]
    later = at("2025-03-01", 10, 11)
    everywhere = [c for n in review.course_notebooks() for c in review.schedule(n, count=1000, attempts=history,
                                                                                now=later)]
    assert all(c.question.notebook != last for c in everywhere)
    first = review.session(attempts=history, now=later)[0]
    assert (first.question, first.note) == (q, "you missed it last time (2025-03-01)")


def test_without_history_the_session_starts_with_the_concept_checks_last_notebook_first():
    notebooks = review.course_notebooks()
    shown = review.session(count=len(notebooks), attempts=[])
    assert [c.question for c in shown] == [quiz.load_quiz(n)["concept_check"][1][0] for n in reversed(notebooks)]


def test_the_session_puts_the_most_overdue_first_whatever_the_notebook():
    """Notebook reviews take turns between notebooks; the review notebook does not: with a cap, the
    questions most likely forgotten are the ones shown."""
    a, b = questions("01_chain_rule", "numeric")[:2]
    c = questions("02_micrograd", "numeric")[0]
    history = [judged(a, True, "2025-01-01"), judged(b, True, "2025-01-02"), judged(c, True, "2025-02-20")]
    now = at("2025-03-01")
    shown = review.session(count=3, attempts=history, now=now)
    assert keys(shown) == [("01_chain_rule", a.id), ("01_chain_rule", b.id), ("02_micrograd", c.id)]
    assert [x.recall_chance(now) for x in shown] == sorted(x.recall_chance(now) for x in shown)
    assert keys(review.rank_due(review.cards(["01_chain_rule", "02_micrograd"], history), now))[1] == (
        "02_micrograd", c.id)  # where a notebook's review would take turns


def test_the_session_fills_with_new_questions_of_the_notebooks_you_worked_in():
    q = questions("02_micrograd", "numeric")[0]
    shown = review.session(count=1000, attempts=[judged(q, False)], now=at("2025-03-01", 10, 11))
    assert keys(shown[:1]) == [("02_micrograd", q.id)]
    assert {c.question.notebook for c in shown} == {"02_micrograd"}
    assert len(shown) == len(quiz_schema.all_questions("02_micrograd"))


def write_history(path, attempts):
    path.write_text("".join(json.dumps({"type": "attempt", **a}) + "\n" for a in attempts))


def show_due_output(monkeypatch, now, count=review.SESSION_COUNT):
    shown = []
    monkeypatch.setattr(quiz, "display", shown.append)
    monkeypatch.setattr(review, "display", shown.append)
    monkeypatch.setattr(review, "_now", lambda _: now)
    review.show_due(count)
    return shown


def test_the_review_notebook_caps_a_session_and_says_how_to_ask_for_more(private_progress, monkeypatch):
    everything = [q for n in review.course_notebooks() for q in quiz_schema.all_questions(n) if q.kind == "numeric"]
    write_history(private_progress, [judged(q, False) for q in everything[:13]])
    shown = show_due_output(monkeypatch, at("2025-03-01", 11))
    text = shown[0].data
    assert len(shown) == 1 + review.SESSION_COUNT
    assert "Review: 10 questions from all notebooks" in text and "**13 questions due** from all notebooks" in text
    new = sum(len(quiz_schema.all_questions(n)) for n in {q.notebook for q in everything[:13]}) - 13
    assert f"{new} never answered" in text
    assert f"{13 + new - 10} more wait" in text and f"`review.show_due(count={13 + new})`" in text
    assert len(show_due_output(monkeypatch, at("2025-03-01", 11), count=13 + new)) == 1 + 13 + new


def test_running_the_cell_again_after_answering_shows_the_next_ones():
    """What the review notebook says: answered questions, right or wrong, make room for the next ones."""
    everything = [q for n in review.course_notebooks() for q in quiz_schema.all_questions(n) if q.kind == "numeric"]
    history = [judged(q, False) for q in everything[:13]]
    now = at("2025-03-01", 11)
    first = review.session(attempts=history, now=now)
    answered = [{**judged(c.question, k % 2 == 0), "time": (now + datetime.timedelta(minutes=1)).isoformat(),
                 "review": review.REVIEW_NOTEBOOK} for k, c in enumerate(first)]
    again = review.session(attempts=history + answered, now=now + datetime.timedelta(minutes=2))
    assert not set(keys(first)) & set(keys(again))
    assert sum(c.is_due(now) for c in again) == 3  # the three due ones the cap held back come first


def test_the_review_notebook_says_when_nothing_is_due(private_progress, monkeypatch, capsys):
    everything = quiz_schema.all_questions("01_chain_rule")
    write_history(private_progress, [judged(q, True) if q.kind != "recall" else rated(q, 3) for q in everything])
    shown = show_due_output(monkeypatch, at("2025-03-01", 12))
    assert len(shown) == 1 and "**0 questions due**" in shown[0].data and "more wait" not in shown[0].data
    assert "comes back on 2025-03-03" in shown[0].data
    assert "Nothing is due now" in capsys.readouterr().out


@pytest.mark.parametrize("plain", [True, False])
def test_review_notebook_answers_are_saved_as_reviews(plain, monkeypatch, capsys):
    if plain:
        monkeypatch.setenv(quiz.PLAIN_ENV_VAR, "1")
    *_, last = review.course_notebooks()
    shown = show_due_output(monkeypatch, datetime.datetime.now(UTC), count=1)
    first = review.session(count=1)[0].question
    assert first.notebook == last
    if plain:
        assert f"review={review.REVIEW_NOTEBOOK!r}" in shown[1].data and first.prompt in shown[1].data
        assert f"from {last}: not answered yet" in shown[1].data
    else:
        assert type(shown[1]).__name__ == "VBox"
    capsys.readouterr()
    if first.kind == "recall":
        quiz.rate(first.notebook, first.id, "my words", 0, review=review.REVIEW_NOTEBOOK)
    else:
        quiz.answer(first.notebook, first.id, "a" if first.kind == "choice" else "123456789",
                    review=review.REVIEW_NOTEBOOK)
    (saved,) = progress_file.attempts()
    assert saved["review"] == review.REVIEW_NOTEBOOK and saved["question"] == first.id


# --- derive questions (a quiz file's optional last section) --------------------------------------------
DERIVE_QUIZ = """\
notebook: {name}
sections:
  predict:
    title: Predict
    questions:
      - {{id: guess, kind: numeric, prompt: "How many?", answer: 3, why: "Three."}}
  retrieve:
    title: Retrieve
    questions:
      - {{id: name-it, kind: short, level: factual, prompt: "Which error?", accept: [KeyError], why: "A key."}}
  concept_check:
    title: Concept check
    questions:
      - {{id: explain, kind: recall, prompt: "Why?", answer: "Because."}}
"""
DERIVE_SECTION = """\
  derive:
    title: Derive before you code
    questions:
      - {id: shape-of-dw, kind: short, prompt: "Shape of dW for x of shape (4, 3), W of (3, 2)?",
         accept: ["(3, 2)", "torch.Size([3, 2])"], why: "dW = x.T @ dout has W's shape."}
      - {id: value-at-zero, kind: numeric, prompt: "tanh'(0)?", answer: 1, why: "1 - tanh(0)**2."}
      - {id: the-rule, kind: recall, prompt: "The local rule of a product?", answer: "d(ab) = a db + b da"}
"""


@pytest.fixture
def derive_course(tmp_path, monkeypatch):
    """A course of two notebooks whose second has a derive section."""
    folder = tmp_path / "quizzes"
    folder.mkdir()
    (folder / "01_first.yaml").write_text(DERIVE_QUIZ.format(name="01_first"))
    (folder / "02_second.yaml").write_text(DERIVE_QUIZ.format(name="02_second") + DERIVE_SECTION)
    monkeypatch.setattr(quiz_schema, "quiz_folder", lambda: folder)
    return [q for q in quiz_schema.all_questions("02_second") if q.section == "derive"]


def test_derive_questions_are_scheduled_after_retrieve_before_predict(derive_course):
    order = [(q.notebook, q.section) for q in review.default_order(["02_second"])]
    assert order == [("02_second", s) for s in ("concept_check", "retrieve", "derive", "derive", "derive", "predict")]
    assert {c.question for c in review.cards(["02_second"], [])} >= set(derive_course)


def test_a_section_the_order_does_not_name_is_scheduled_last(derive_course, monkeypatch):
    """A later optional section is never left out of the schedule (nor is derive, if the order forgets it)."""
    monkeypatch.setattr(review, "SECTION_ORDER", ("concept_check", "retrieve", "predict"))
    order = [q.section for q in review.default_order(["02_second"])]
    assert order == ["concept_check", "retrieve", "predict", "derive", "derive", "derive"]


@pytest.mark.parametrize("plain", [True, False])
def test_derive_questions_answered_in_their_notebook_come_back_in_reviews(derive_course, plain, monkeypatch,
                                                                           capsys):
    if plain:
        monkeypatch.setenv(quiz.PLAIN_ENV_VAR, "1")
    shape, value, rule = derive_course
    quiz.answer("02_second", shape.id, "(2, 3)")  # in its own notebook, just before the exercise: wrong
    quiz.answer("02_second", value.id, "1")
    quiz.answer("02_second", rule.id, "my words")
    quiz.rate("02_second", rule.id, "my words", 0)
    capsys.readouterr()
    later = datetime.datetime.now(UTC) + datetime.timedelta(minutes=11)
    due = review.session(count=2, now=later)
    assert {c.question for c in due} == {shape, rule} and all(c.is_due(later) for c in due)
    assert not next(c for c in review.cards(["02_second"]) if c.question == value).is_due(later)  # right
    shown = show_due_output(monkeypatch, later, count=2)
    assert "**2 questions due**" in shown[0].data and len(shown) == 3
    if plain:
        (text,) = [s.data for s in shown[1:] if shape.prompt in s.data]
        assert "answer('02_second', " in text and "review='review')" in text
    capsys.readouterr()
    quiz.answer("02_second", shape.id, "torch.Size([3, 2])", review=review.REVIEW_NOTEBOOK)
    assert capsys.readouterr().out.startswith("Correct")
    assert shape not in {c.question for c in review.session(count=10, now=later + datetime.timedelta(minutes=1))
                         if c.is_due(later + datetime.timedelta(minutes=1))}


# --- the review notebook, run top to bottom -------------------------------------------------------------
REVIEW_NOTEBOOK = course.NOTEBOOKS / f"{review.REVIEW_NOTEBOOK}.ipynb"


def run_review_notebook(tmp_path, progress_path, plain):
    nb = course.read(REVIEW_NOTEBOOK)
    env = {k: v for k, v in os.environ.items() if k != quiz.PLAIN_ENV_VAR}
    env.update(COURSE_PROGRESS=str(progress_path), **({quiz.PLAIN_ENV_VAR: "1"} if plain else {}))
    SteadyNotebookClient(nb, timeout=120, kernel_name="python3",
                         resources={"metadata": {"path": str(tmp_path)}}).execute(env=env)
    for cell in nb.cells:
        assert course.failure_text(cell) == "", f"{cell.source[:60]!r}: {course.failure_text(cell)}"
    return nb


def outputs_of(nb, source):
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source == source]
    return cell.outputs


def test_the_review_notebook_serves_due_questions_from_a_history(tmp_path, private_progress):
    *_, last = review.course_notebooks()
    missed, long_ago, recent = questions(last, "numeric")[0], *questions("01_chain_rule", "numeric")[:2]
    now = datetime.datetime.now(UTC)
    history = [{**judged(missed, False), "time": (now - datetime.timedelta(hours=1)).isoformat()},
               {**judged(long_ago, True), "time": (now - datetime.timedelta(days=30)).isoformat()},
               {**judged(recent, True), "time": (now - datetime.timedelta(hours=1)).isoformat()}]
    write_history(private_progress, history)
    nb = run_review_notebook(tmp_path, private_progress, plain=False)
    due = outputs_of(nb, "review.show_due()")
    assert "**2 questions due** from all notebooks" in due[0].data["text/markdown"]
    widgets = [o for o in due[1:] if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(widgets) == review.SESSION_COUNT == len(due) - 1
    schedule, figure = outputs_of(nb, "progress.show()")
    assert "**2 questions due now**" in schedule.data["text/markdown"]
    assert f"| {last} | 1 | — | 0 | 1 |" in schedule.data["text/markdown"]
    assert "image/png" in figure.data


def test_the_review_notebook_without_history_starts_with_the_last_notebook(tmp_path, private_progress):
    *_, last = review.course_notebooks()
    nb = run_review_notebook(tmp_path, private_progress, plain=True)
    first, *shown = outputs_of(nb, "review.show_due()")
    assert "**0 questions due** from all notebooks" in first.data["text/markdown"]
    assert len(shown) == review.SESSION_COUNT
    assert shown[0].data["text/markdown"].startswith(f"**R1.** *from {last}: not answered yet*")
    assert "review='review'" in shown[0].data["text/markdown"]
    (nothing,) = outputs_of(nb, "progress.show()")
    assert nothing.name == "stdout" and nothing.text.startswith("Nothing recorded yet")
