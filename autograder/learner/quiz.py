"""Retrieval-practice quizzes: questions live in ``autograder/learner/quizzes/<notebook>.yaml``.

Two kinds of question: ``choice`` (pick one; immediate feedback with the reason) and ``recall``
(type an answer, reveal the model answer, rate yourself 0-3). Every attempt is saved locally
(see ``autograder.learner.progress``). Where widgets cannot render, the same quiz works as plain text.
Questions shown in a later notebook's opening review (``autograder.learner.review``) are scored the same
way; their attempts also carry ``"review": <the notebook that showed them>``.
"""
import dataclasses
import importlib.resources
import os
import string

import yaml
from IPython.display import Markdown, display

from autograder.learner import progress

SECTIONS = ("predict", "retrieve", "concept_check")
RATINGS = ("again", "hard", "good", "easy")
PLAIN_ENV_VAR = "COURSE_PLAIN_QUIZ"
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where built: a review reads 5 files


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
    source = importlib.resources.files("autograder.learner") / "quizzes" / f"{notebook}.yaml"
    raw = yaml.load(source.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)
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


def _attempt(question, review, **fields):
    attempt = {"notebook": question.notebook, "section": question.section, "question": question.id, **fields}
    if review:
        attempt["review"] = review
    return attempt


def check_choice(question: Question, picked: int, review: str = "") -> Feedback:
    """Feedback for choice number `picked` (0-based), saved to the progress file.

    `review`: the notebook whose opening review showed the question ('' in its own notebook)."""
    if not 0 <= picked < len(question.choices):
        raise ValueError(f"pick a choice between a and {string.ascii_lowercase[len(question.choices) - 1]}")
    chosen = question.choices[picked]
    correct = bool(chosen.get("correct"))
    text = ("Correct. " if correct else "Not quite. ") + chosen["why"]
    if not correct:
        right = next(c for c in question.choices if c.get("correct"))
        text += f"\n\nThe answer is: {right['text']}. {right['why']}"
    progress.record(_attempt(question, review, kind="choice", response=picked, correct=correct))
    return Feedback(correct, text)


def rate_recall(question: Question, response: str, rating: int, review: str = "") -> None:
    """Save a free-recall attempt with the learner's own rating (0 again ... 3 easy)."""
    if rating not in range(len(RATINGS)):
        raise ValueError(f"rate yourself from 0 to 3: {', '.join(f'{i} {r}' for i, r in enumerate(RATINGS))}")
    progress.record(_attempt(question, review, kind="recall", response=response, rating=rating))


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


def display_questions(questions, review: str = "", notes=()) -> None:
    """Display questions one by one (numbered from 1), as widgets or as plain text.

    `review`: the notebook whose opening review shows them; `notes`: a line per question saying why."""
    notes = list(notes) + [""] * (len(questions) - len(notes))
    if _widgets_available():
        from autograder.learner import quiz_widgets
        for number, (question, note) in enumerate(zip(questions, notes), 1):
            display(quiz_widgets.question_widget(question, number, review=review, note=note))
    else:
        for number, (question, note) in enumerate(zip(questions, notes), 1):
            display(Markdown(plain_text(question, number, review=review, note=note)))


def heading(question: Question, number: int, review: str = "", note: str = "") -> str:
    """'**Q3.**' in a question's own notebook; '**R3.** *from 01_chain_rule: note*' in a review."""
    if not review:
        return f"**Q{number}.**"
    return f"**R{number}.** *from {question.notebook}" + (f": {note}" if note else "") + "*"


def _call_suffix(review):
    return f", review={review!r}" if review else ""


def plain_text(question: Question, number: int, review: str = "", note: str = "") -> str:
    """The question as markdown, with the exact call that answers it."""
    first = heading(question, number, review, note)
    lines = [f"{first}\n\n{question.prompt}" if review else f"{first} {question.prompt}", ""]
    if question.kind == "choice":
        lines += [f"- ({letter}) {c['text']}" for letter, c in zip(string.ascii_lowercase, question.choices)]
        lines += ["", f"Answer: `answer({question.notebook!r}, {question.id!r}, 'a'{_call_suffix(review)})`"]
    else:
        lines += [f"Answer in your own words: `answer({question.notebook!r}, {question.id!r}, 'your answer'"
                  f"{_call_suffix(review)})`"]
    return "\n".join(lines)


def answer(notebook: str, question_id: str, response: str, review: str = "") -> None:
    """Plain-text answering: a letter for a choice question, your own words for a recall one."""
    question = find_question(notebook, question_id)
    if question.kind == "choice":
        letter = response.strip().lower()
        if len(letter) != 1 or letter not in string.ascii_lowercase:
            raise ValueError(f"answer {question_id!r} with one letter, such as 'a'")
        print(check_choice(question, string.ascii_lowercase.index(letter), review=review).text)
        return
    print(f"Model answer: {question.answer}")
    print(f"Now rate yourself: rate({notebook!r}, {question_id!r}, {response!r}, N{_call_suffix(review)}) "
          f"with N from 0 to 3 ({', '.join(f'{i} {r}' for i, r in enumerate(RATINGS))}).")


def rate(notebook: str, question_id: str, response: str, rating: int, review: str = "") -> None:
    """Plain-text self-rating of a recall answer."""
    rate_recall(find_question(notebook, question_id), response, rating, review=review)
    print(f"Saved: {RATINGS[rating]}.")
