"""Spaced retrieval: the Leitner schedule read from the progress file, and the review at a notebook's top."""
import json

import pytest

from autograder.learner import progress, quiz, review


@pytest.fixture(autouse=True)
def private_progress(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    monkeypatch.setenv("COURSE_PROGRESS", str(path))
    monkeypatch.delenv(quiz.PLAIN_ENV_VAR, raising=False)
    return path


def questions(notebook, kind=None):
    return [q for _, qs in quiz.load_quiz(notebook).values() for q in qs if kind in (None, q.kind)]


def choice(q, correct, day="2025-03-01", review_in=None):
    attempt = {"notebook": q.notebook, "section": q.section, "question": q.id, "kind": "choice",
               "response": 0, "correct": correct, "time": f"{day}T10:00:00"}
    return {**attempt, "review": review_in} if review_in else attempt


def recall(q, rating, day="2025-03-01"):
    return {"notebook": q.notebook, "section": q.section, "question": q.id, "kind": "recall",
            "response": "my words", "rating": rating, "time": f"{day}T10:00:00"}


def keys(cards):
    return [(c.question.notebook, c.question.id) for c in cards]


def test_course_order_is_the_sorted_quiz_files():
    names = review.course_notebooks()
    assert names == sorted(names) and names[0] == "01_chain_rule" and len(names) >= 2
    assert review.earlier_notebooks(names[2]) == names[:2]
    with pytest.raises(ValueError, match="01_chain_rule"):
        review.earlier_notebooks("99_nothing")


def test_without_history_the_concept_checks_come_first_latest_notebook_first():
    due = review.schedule("03_vjp", count=4)
    expected = [quiz.load_quiz("02_micrograd")["concept_check"][1][0], quiz.load_quiz("01_chain_rule")["concept_check"][1][0],
                quiz.load_quiz("02_micrograd")["concept_check"][1][1], quiz.load_quiz("01_chain_rule")["concept_check"][1][1]]
    assert [c.question for c in due] == expected
    assert all(c.note == "not answered yet" and c.box == 1 for c in due)
    assert keys(review.schedule("03_vjp", count=4)) == keys(due)  # deterministic


def test_the_first_notebook_says_so_in_one_line(capsys, monkeypatch):
    shown = []
    monkeypatch.setattr(quiz, "display", shown.append)
    monkeypatch.setattr(review, "display", shown.append)
    review.show("01_chain_rule")
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "first notebook" in out
    assert shown == [] and review.schedule("01_chain_rule") == []


def test_a_missed_question_comes_back_first_and_a_right_one_waits():
    missed, right = questions("01_chain_rule", "choice")[-1], questions("01_chain_rule", "choice")[0]
    due = review.schedule("02_micrograd", count=100, attempts=[choice(right, True), choice(missed, False)])
    assert keys(due[:1]) == [("01_chain_rule", missed.id)]
    assert due[0].note == "you missed it last time"
    states = {c.question.id: c for c in due}
    assert states[right.id].box == 2 and keys(due[-1:]) == [("01_chain_rule", right.id)]  # behind every new question
    assert states[right.id].note == "box 2 of 5, last answered 2025-03-01"


def test_missed_questions_come_back_longest_unseen_first():
    a, b, c = questions("01_chain_rule", "choice")[:3]
    attempts = [choice(b, False, "2025-03-01"), choice(c, False, "2025-03-02"), choice(a, False, "2025-03-03")]
    assert keys(review.schedule("02_micrograd", count=3, attempts=attempts)) == [
        ("01_chain_rule", b.id), ("01_chain_rule", c.id), ("01_chain_rule", a.id)]


@pytest.mark.parametrize("rating, box", [(0, 1), (1, 1), (2, 2), (3, 3)])
def test_recall_ratings_move_the_box(rating, box):
    q = questions("01_chain_rule", "recall")[0]
    (card,) = [c for c in review.cards(["01_chain_rule"], [recall(q, rating)]) if c.question == q]
    assert card.box == box
    if rating <= 1:
        assert card.note == f"you rated it '{quiz.RATINGS[rating]}' last time"


def test_one_move_per_sitting_first_choice_answer_last_rating():
    q, r = questions("01_chain_rule", "choice")[0], questions("01_chain_rule", "recall")[0]
    same_day = [choice(q, False), choice(q, True), recall(r, 0), recall(r, 2)]
    cards = {c.question.id: c for c in review.cards(["01_chain_rule"], same_day)}
    assert cards[q.id].box == 1 and cards[q.id].last_outcome == "wrong"  # the second pick read the feedback
    assert cards[r.id].box == 2  # the corrected rating counts
    next_day = [choice(q, False), choice(q, True, day="2025-03-02")]
    assert {c.question.id: c.box for c in review.cards(["01_chain_rule"], next_day)}[q.id] == 2
    in_a_review = [choice(q, False), choice(q, True, review_in="02_micrograd")]  # same day, another notebook
    assert {c.question.id: c.box for c in review.cards(["01_chain_rule"], in_a_review)}[q.id] == 2


def test_boxes_stop_at_the_top_and_a_miss_goes_back_to_one():
    q = questions("01_chain_rule", "choice")[0]
    days = [f"2025-03-{d:02d}" for d in range(1, 9)]
    climbing = [choice(q, True, day) for day in days]
    assert {c.question.id: c.box for c in review.cards(["01_chain_rule"], climbing)}[q.id] == review.BOXES
    fallen = climbing + [choice(q, False, "2025-03-09")]
    assert {c.question.id: c.box for c in review.cards(["01_chain_rule"], fallen)}[q.id] == 1


def test_a_hand_edited_file_does_not_break_the_schedule():
    q = questions("01_chain_rule", "choice")[0]
    junk = ["text", None, {"notebook": q.notebook}, {**choice(q, True), "correct": "yes"},
            {**recall(questions("01_chain_rule", "recall")[0], 2), "rating": True},
            {**choice(q, False), "question": "no-such-question"}, {**choice(q, False), "kind": "recall"}]
    assert keys(review.schedule("02_micrograd", count=3, attempts=junk)) == keys(review.schedule("02_micrograd", count=3))


def test_count_must_be_a_positive_whole_number():
    with pytest.raises(ValueError, match="whole number"):
        review.schedule("02_micrograd", count=0)


@pytest.mark.parametrize("plain", [True, False])
def test_review_shows_the_scheduled_questions(plain, monkeypatch):
    shown = []
    monkeypatch.setattr(quiz, "display", shown.append)
    monkeypatch.setattr(review, "display", shown.append)
    if plain:
        monkeypatch.setenv(quiz.PLAIN_ENV_VAR, "1")
    review.show("03_vjp", count=3)
    assert len(shown) == 4 and "Review: 3 questions" in shown[0].data
    due = review.schedule("03_vjp", count=3)
    if plain:
        assert f"answer({due[0].question.notebook!r}, {due[0].question.id!r}, 'a', review='03_vjp')" in shown[1].data
        assert f"from {due[0].question.notebook}: not answered yet" in shown[1].data


def test_review_answers_are_saved_as_reviews_and_reschedule(private_progress, capsys):
    missed = review.schedule("03_vjp", count=1)[0].question
    right = next(i for i, c in enumerate(missed.choices) if c.get("correct"))
    quiz.answer(missed.notebook, missed.id, "abcdefgh"[(right + 1) % len(missed.choices)], review="03_vjp")
    assert capsys.readouterr().out.startswith("Not quite.")
    (saved,) = json.loads(private_progress.read_text())["attempts"]
    assert (saved["notebook"], saved["question"], saved["review"], saved["correct"]) == (
        missed.notebook, missed.id, "03_vjp", False)
    # a later notebook's review now puts it first, as missed
    first = review.schedule("04_toggles", count=1)[0]
    assert (first.question, first.note) == (missed, "you missed it last time")
    assert progress.attempts(missed.notebook)[0]["review"] == "03_vjp"


def test_review_recall_answers_in_plain_text(capsys):
    q = questions("01_chain_rule", "recall")[0]
    quiz.answer(q.notebook, q.id, "my words", review="02_micrograd")
    assert "review='02_micrograd'" in capsys.readouterr().out
    quiz.rate(q.notebook, q.id, "my words", 1, review="02_micrograd")
    (saved,) = progress.attempts(q.notebook)
    assert (saved["rating"], saved["review"]) == (1, "02_micrograd")
