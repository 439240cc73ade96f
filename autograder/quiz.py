"""Retrieval-practice quizzes: questions live in ``autograder/quizzes/<notebook>.yaml``.

Two kinds of question: ``choice`` (pick one; immediate feedback with the reason) and ``recall``
(type an answer, reveal the model answer, rate yourself 0-3). Every attempt is saved locally
(see ``autograder.progress``). Where widgets cannot render, the same quiz works as plain text.
"""
import dataclasses
import importlib.resources
import os
import string

import yaml
from IPython.display import Markdown, display

from autograder import progress

SECTIONS = ("predict", "retrieve", "concept_check")
RATINGS = ("again", "hard", "good", "easy")
PLAIN_ENV_VAR = "COURSE_PLAIN_QUIZ"


@dataclasses.dataclass(frozen=True)
class Question:
    notebook: str
    section: str
    id: str
    kind: str
    prompt: str
    choices: tuple = ()
    answer: str = ""
    level: str = ""


@dataclasses.dataclass(frozen=True)
class Feedback:
    correct: bool
    text: str


class QuizFileError(ValueError):
    """A quiz data file that does not follow the schema."""


def _parse_question(notebook, section, raw):
    where = f"{notebook}.yaml, section {section}, question {raw.get('id', '?')}"
    kind = raw.get("kind")
    if kind not in ("choice", "recall") or not raw.get("id") or not raw.get("prompt"):
        raise QuizFileError(f"{where}: needs an id, a prompt and kind 'choice' or 'recall'")
    if kind == "choice":
        choices = tuple(raw.get("choices") or ())
        if len(choices) < 2 or sum(bool(c.get("correct")) for c in choices) != 1:
            raise QuizFileError(f"{where}: a choice question needs 2+ choices, exactly one correct")
        if not all(c.get("text") and c.get("why") for c in choices):
            raise QuizFileError(f"{where}: every choice needs a text and a why")
        return Question(notebook, section, raw["id"], kind, raw["prompt"], choices=choices,
                        level=raw.get("level", ""))
    if not raw.get("answer"):
        raise QuizFileError(f"{where}: a recall question needs a model answer")
    return Question(notebook, section, raw["id"], kind, raw["prompt"], answer=raw["answer"],
                    level=raw.get("level", ""))


def load_quiz(notebook: str) -> dict:
    """{section: (title, [Question, ...])} for one notebook, validated."""
    source = importlib.resources.files("autograder") / "quizzes" / f"{notebook}.yaml"
    raw = yaml.safe_load(source.read_text(encoding="utf-8"))
    quiz, seen = {}, set()
    for section, body in raw["sections"].items():
        if section not in SECTIONS:
            raise QuizFileError(f"{notebook}.yaml: unknown section {section!r}; use one of {SECTIONS}")
        questions = [_parse_question(notebook, section, q) for q in body["questions"]]
        for q in questions:
            if q.id in seen:
                raise QuizFileError(f"{notebook}.yaml: question id {q.id!r} is used twice")
            seen.add(q.id)
        quiz[section] = (body["title"], questions)
    return quiz


def find_question(notebook: str, question_id: str) -> Question:
    for _title, questions in load_quiz(notebook).values():
        for q in questions:
            if q.id == question_id:
                return q
    raise KeyError(f"{notebook} has no quiz question {question_id!r}")


def check_choice(question: Question, picked: int) -> Feedback:
    """Feedback for choice number `picked` (0-based), saved to the progress file."""
    if not 0 <= picked < len(question.choices):
        raise ValueError(f"pick a choice between a and {string.ascii_lowercase[len(question.choices) - 1]}")
    chosen = question.choices[picked]
    correct = bool(chosen.get("correct"))
    text = ("Correct. " if correct else "Not quite. ") + chosen["why"]
    if not correct:
        right = next(c for c in question.choices if c.get("correct"))
        text += f"\n\nThe answer is: {right['text']}. {right['why']}"
    progress.record({"notebook": question.notebook, "section": question.section, "question": question.id,
                     "kind": "choice", "response": picked, "correct": correct})
    return Feedback(correct, text)


def rate_recall(question: Question, response: str, rating: int) -> None:
    """Save a free-recall attempt with the learner's own rating (0 again ... 3 easy)."""
    if rating not in range(len(RATINGS)):
        raise ValueError(f"rate yourself from 0 to 3: {', '.join(f'{i} {r}' for i, r in enumerate(RATINGS))}")
    progress.record({"notebook": question.notebook, "section": question.section, "question": question.id,
                     "kind": "recall", "response": response, "rating": rating})


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
    if _widgets_available():
        from autograder import quiz_widgets
        for number, question in enumerate(questions, 1):
            display(quiz_widgets.question_widget(question, number))
    else:
        for number, question in enumerate(questions, 1):
            display(Markdown(plain_text(question, number)))


def plain_text(question: Question, number: int) -> str:
    """The question as markdown, with the exact call that answers it."""
    lines = [f"**Q{number}.** {question.prompt}", ""]
    if question.kind == "choice":
        lines += [f"- ({letter}) {c['text']}" for letter, c in zip(string.ascii_lowercase, question.choices)]
        lines += ["", f"Answer: `answer({question.notebook!r}, {question.id!r}, 'a')`"]
    else:
        lines += [f"Answer in your own words: `answer({question.notebook!r}, {question.id!r}, 'your answer')`"]
    return "\n".join(lines)


def answer(notebook: str, question_id: str, response: str) -> None:
    """Plain-text answering: a letter for a choice question, your own words for a recall one."""
    question = find_question(notebook, question_id)
    if question.kind == "choice":
        letter = response.strip().lower()
        if len(letter) != 1 or letter not in string.ascii_lowercase:
            raise ValueError(f"answer {question_id!r} with one letter, such as 'a'")
        print(check_choice(question, string.ascii_lowercase.index(letter)).text)
        return
    print(f"Model answer: {question.answer}")
    print(f"Now rate yourself: rate({notebook!r}, {question_id!r}, {response!r}, N) "
          f"with N from 0 to 3 ({', '.join(f'{i} {r}' for i, r in enumerate(RATINGS))}).")


def rate(notebook: str, question_id: str, response: str, rating: int) -> None:
    """Plain-text self-rating of a recall answer."""
    rate_recall(find_question(notebook, question_id), response, rating)
    print(f"Saved: {RATINGS[rating]}.")
