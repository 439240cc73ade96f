"""Retrieval-practice quizzes in a notebook: ``show_quiz(notebook, section)``, and ``answer``/``rate``
where widgets do not render.

The questions live in ``autograder/learner/quizzes/<notebook>.yaml`` (schema:
``autograder.learner.quiz_schema``). Most ask you to produce an answer (a number, a short answer
such as a shape, an error name or a line of code, or a free-recall explanation), because producing an
answer is what makes it stick; choice questions are kept where telling near-misses apart is the
point. Answers are judged and saved by ``autograder.learner.quiz_answers``; questions shown in a
later notebook's opening review (``autograder.learner.review``) are answered the same way.

With ``COURSE_PLAIN_QUIZ=1`` (or without ipywidgets) every question is shown as text with the exact
call that answers it, naming the question by its number in its notebook (``q7``), never by an id that
could give the answer away: ``answer(notebook, 'q7', 'b')`` (the letter as shown to you),
``answer(notebook, 'q7', '2**-24')``, ``answer(notebook, 'q7', 'X.T @ dY')``, or for free recall
``answer(notebook, 'q7', 'your words')`` and then ``rate('good')``. Calls naming a question by its id
still work, and so does ``rate(notebook, question, 'your words', 2)``. A call that cannot be read (the
placeholder left in, a letter that is not shown, a label that does not exist) prints why, never a
traceback, and saves nothing.
"""
import os

from IPython.display import Markdown, display

from autograder.learner import quiz_answers
from autograder.learner.quiz_answers import AnswerError, Feedback, check_choice, check_typed, rate_recall  # noqa: F401
from autograder.learner.quiz_schema import (  # noqa: F401 - the schema's API, offered here too
    RATINGS,
    SECTIONS,
    Question,
    QuizFileError,
    find_question,
    label,
    load_quiz,
    number,
)

PLAIN_ENV_VAR = "COURSE_PLAIN_QUIZ"
_last_recall = {}  # the last free-recall answer given with answer(): what rate("good") rates


def _widgets_available() -> bool:
    if os.environ.get(PLAIN_ENV_VAR):
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def show_quiz(notebook: str, section: str) -> None:
    """Display one quiz section: widgets where they work, plain text otherwise."""
    title, questions = load_quiz(notebook)[section]
    display(Markdown(f"### {title}"))
    display_questions(questions)


def show_question(notebook: str, question_id: str) -> None:
    """Display one question on its own (a ``derive`` question just before an exercise)."""
    display_questions([find_question(notebook, question_id)])


def display_questions(questions, review: str = "", notes=()) -> None:
    """Display questions, as widgets or as plain text: Q7 for the 7th question of its notebook, or
    R1, R2, ... in a review.

    `review`: the notebook whose opening review shows them; `notes`: a line per question saying why."""
    notes = list(notes) + [""] * (len(questions) - len(notes))
    numbers = range(1, len(questions) + 1) if review else [number(q) for q in questions]
    if _widgets_available():
        from autograder.learner import quiz_widgets  # needs ipywidgets, which plain mode may lack
        for n, question, note in zip(numbers, questions, notes):
            display(quiz_widgets.question_widget(question, n, review=review, note=note))
    else:
        for n, question, note in zip(numbers, questions, notes):
            display(Markdown(plain_text(question, n, review=review, note=note)))


def _call(question, placeholder, review):
    suffix = f", review={review!r}" if review else ""
    return f"`answer({question.notebook!r}, {label(question)!r}, {placeholder!r}{suffix})`"


def plain_text(question: Question, number: int, review: str = "", note: str = "") -> str:
    """The question as markdown, with the exact call that answers it (by its label, not its id)."""
    first = quiz_answers.heading(question, number, review, note)
    sep = "\n\n" if review or question.code else " "
    lines = [f"{first}{sep}{quiz_answers.body_markdown(question)}", ""]
    if question.kind == "choice":
        shown = quiz_answers.shown_choices(question)
        lines += [f"- ({letter}) {c.text}" for letter, c in zip(quiz_answers.LETTERS, shown)]
        lines += ["", f"Answer with the letter of your choice in place of `?`: {_call(question, '?', review)}"]
    elif question.kind == "numeric":
        unit = f" (in {question.unit})" if question.unit else ""
        lines += [f"Answer with a number{unit} or an expression such as `2**-24`, `3*4*8` or `sqrt(4/3)`: "
                  f"{_call(question, '...', review)}"]
    elif question.kind == "short" and question.variables:
        lines += [f"Answer with a Python expression in {quiz_answers.code_names(question)}: "
                  f"{_call(question, '...', review)}"]
    elif question.kind == "short":
        lines += [f"Answer in a few characters (a name, a shape, a value, an error): {_call(question, '...', review)}"]
    else:
        lines += [f"Answer in your own words: {_call(question, 'your answer', review)}; "
                  "then you see the model answer and rate yourself."]
    return "\n".join(lines)


def _not_read(err) -> None:
    """What a plain-text call that cannot be read prints: the reason, not a traceback."""
    print(f"Not read (nothing saved): {err.args[0] if err.args else err}.")


def answer(notebook: str, question_id: str, response, review: str = "") -> None:
    """Plain-text answering of the question labelled `question_id` (``q7``; its id works too): the letter
    shown for a choice, a number or expression, a short answer, or your own words for a recall
    question. Prints the feedback, or why the answer could not be read (then nothing is saved)."""
    try:
        _answer(notebook, question_id, response, review)
    except (AnswerError, QuizFileError, KeyError) as err:
        _not_read(err)


def _answer(notebook, question_id, response, review):
    asked = find_question(notebook, question_id)
    if asked.kind == "choice":
        letter = str(response).strip().lower()
        shown = quiz_answers.shown_choices(asked)
        letters = quiz_answers.LETTERS[:len(shown)]
        if len(letter) != 1 or letter not in letters:
            raise AnswerError(f"answer {question_id!r} with one letter, from a to {letters[-1]}, as shown above it")
        print(check_choice(asked, shown[letters.index(letter)].id, review=review).text)
        return
    if asked.kind in ("numeric", "short"):
        print(check_typed(asked, str(response), review=review).text)
        return
    if not str(response).strip() or str(response).strip().lower() in quiz_answers.PLACEHOLDERS:
        raise AnswerError("write your own answer first: the model answer is shown after it")
    _last_recall.update(question=asked, response=str(response), review=review)
    print(f"Model answer: {asked.answer}")
    if asked.why:
        print(asked.why)
    print(f"Now rate yourself: rate('good'), or {', '.join(repr(r) for r in RATINGS if r != 'good')} "
          f"({', '.join(f'{i} {r}' for i, r in enumerate(RATINGS))}).")


def rate(*given, review: str = "") -> None:
    """Rate your last free-recall answer: ``rate("good")`` ("again", "hard", "good", "easy", or 0 to 3).

    The first form still works: ``rate(notebook, question, your_answer, rating)`` (and a 5th argument,
    the review). A rating that cannot be read prints why, and nothing is saved."""
    try:
        _rate(given, review)
    except (AnswerError, QuizFileError, KeyError) as err:
        _not_read(err)


def _rate(given, review):
    if len(given) == 1:
        if not _last_recall:
            raise AnswerError("nothing to rate yet: answer a free-recall question with answer(...) first")
        asked, response, review = _last_recall["question"], _last_recall["response"], _last_recall["review"]
        rating = given[0]
    elif len(given) in (4, 5):
        notebook, question, response, rating = given[:4]
        review = given[4] if len(given) == 5 else review
        asked = find_question(notebook, question)
        if asked.kind != "recall":
            raise AnswerError(f"{question!r} is a {asked.kind} question: answer() judges it, nothing to rate")
    else:
        raise AnswerError("rate('good') rates your last free-recall answer; or rate(notebook, question, "
                          "your_answer, rating)")
    rating = quiz_answers.read_rating(rating)
    rate_recall(asked, response, rating, review=review)
    print(f"Saved: {RATINGS[rating]}.")
