"""Retrieval-practice quizzes in a notebook: ``show_quiz(notebook, section)``, and ``answer``/``rate``
where widgets do not render.

The questions live in ``autograder/learner/quizzes/<notebook>.yaml`` (schema:
``autograder.learner.quiz_schema``). Most ask you to produce an answer (a number, a short answer
such as a shape or an error name, or a free-recall explanation), because producing an answer is what
makes it stick; choice questions are kept where telling near-misses apart is the point. Answers are
judged and saved by ``autograder.learner.quiz_answers``; questions shown in a later notebook's
opening review (``autograder.learner.review``) are answered the same way.

With ``COURSE_PLAIN_QUIZ=1`` (or without ipywidgets) every question is shown as text with the exact
call that answers it: ``answer(notebook, id, 'b')`` (the letter as shown to you), ``answer(notebook,
id, '2**-24')``, ``answer(notebook, id, 'torch.Size([3, 4])')``, or for free recall
``answer(notebook, id, 'your words')`` and then ``rate(notebook, id, 'your words', 2)``.
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
    load_quiz,
)

PLAIN_ENV_VAR = "COURSE_PLAIN_QUIZ"


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
    """Display questions one by one (numbered from 1), as widgets or as plain text.

    `review`: the notebook whose opening review shows them; `notes`: a line per question saying why."""
    notes = list(notes) + [""] * (len(questions) - len(notes))
    if _widgets_available():
        from autograder.learner import quiz_widgets  # needs ipywidgets, which plain mode may lack
        for number, (question, note) in enumerate(zip(questions, notes), 1):
            display(quiz_widgets.question_widget(question, number, review=review, note=note))
    else:
        for number, (question, note) in enumerate(zip(questions, notes), 1):
            display(Markdown(plain_text(question, number, review=review, note=note)))


def _call(question, placeholder, review):
    suffix = f", review={review!r}" if review else ""
    return f"`answer({question.notebook!r}, {question.id!r}, {placeholder!r}{suffix})`"


def plain_text(question: Question, number: int, review: str = "", note: str = "") -> str:
    """The question as markdown, with the exact call that answers it."""
    first = quiz_answers.heading(question, number, review, note)
    sep = "\n\n" if review or question.code else " "
    lines = [f"{first}{sep}{quiz_answers.body_markdown(question)}", ""]
    if question.kind == "choice":
        shown = quiz_answers.shown_choices(question)
        lines += [f"- ({letter}) {c.text}" for letter, c in zip(quiz_answers.LETTERS, shown)]
        lines += ["", f"Answer with the letter of your choice in place of `?`: {_call(question, '?', review)}"]
    elif question.kind == "numeric":
        unit = f" (in {question.unit})" if question.unit else ""
        lines += [f"Answer with a number{unit} or a plain arithmetic expression such as `2**-24` or "
                  f"`3*4*8`: {_call(question, '...', review)}"]
    elif question.kind == "short":
        lines += [f"Answer in a few characters (a name, a shape, a dtype, an error): {_call(question, '...', review)}"]
    else:
        lines += [f"Answer in your own words: {_call(question, 'your answer', review)}; "
                  "then you see the model answer and rate yourself."]
    return "\n".join(lines)


def answer(notebook: str, question_id: str, response, review: str = "") -> None:
    """Plain-text answering: the letter shown for a choice, a number or expression, a short answer,
    or your own words for a recall question. Prints the feedback."""
    question = find_question(notebook, question_id)
    if question.kind == "choice":
        letter = str(response).strip().lower()
        shown = quiz_answers.shown_choices(question)
        letters = quiz_answers.LETTERS[:len(shown)]
        if len(letter) != 1 or letter not in letters:
            raise AnswerError(f"answer {question_id!r} with one letter, from a to {letters[-1]}, as shown above it")
        print(check_choice(question, shown[letters.index(letter)].id, review=review).text)
        return
    if question.kind in ("numeric", "short"):
        print(check_typed(question, str(response), review=review).text)
        return
    if not str(response).strip():
        raise AnswerError("write your own answer first: the model answer is shown after it")
    suffix = f", review={review!r}" if review else ""
    print(f"Model answer: {question.answer}")
    if question.why:
        print(question.why)
    print(f"Now rate yourself: rate({notebook!r}, {question_id!r}, {str(response)!r}, N{suffix}) "
          f"with N from 0 to 3 ({', '.join(f'{i} {r}' for i, r in enumerate(RATINGS))}).")


def rate(notebook: str, question_id: str, response: str, rating: int, review: str = "") -> None:
    """Plain-text self-rating of a recall answer."""
    question = find_question(notebook, question_id)
    if question.kind != "recall":
        raise AnswerError(f"{question_id!r} is a {question.kind} question: answer() judges it, nothing to rate")
    rate_recall(question, response, rating, review=review)
    print(f"Saved: {RATINGS[rating]}.")
