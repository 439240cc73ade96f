"""A learner's answer to a quiz question: read, judged, explained and saved to the progress file.

Widgets (``quiz_widgets``) and plain text (``quiz``) both go through here, so they judge alike:

- ``numeric``: the typed text is a number or a plain arithmetic expression (numbers, ``+ - * / **``
  and parentheses only; ``2**-24``, ``3*4*8``, ``1e-3``), evaluated without ``eval``, and right when
  it is within the question's tolerance of the answer. A trailing unit (``96 bytes``) is allowed.
- ``short``: right when it equals one of the accepted answers once both are lower-cased and stripped
  of all whitespace, backticks and surrounding quotes.
- ``choice``: the options are shown in an order of their own for each learner and question
  (seeded by the learner's id in the progress file, so a re-run or another kernel shows the same
  order), and the answer is saved by the option's id, never by its position.
- ``recall``: the learner writes an answer, sees the model answer, and rates their own recall.

Every attempt is saved (``progress_file.record``); one given in a later notebook's opening review
also carries ``"review": <that notebook>``.
"""
import ast
import dataclasses
import math
import operator
import random
import string

from autograder.learner import progress_file
from autograder.learner.quiz_schema import RATINGS, Question

LETTERS = string.ascii_lowercase
MAX_EXPRESSION_CHARS = 200
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos}


@dataclasses.dataclass(frozen=True)
class Feedback:
    correct: bool
    text: str


class AnswerError(ValueError):
    """A typed answer that cannot be read (not saved: it is not an answer yet)."""


# --- reading what was typed ---------------------------------------------------------------------------
def _evaluate(node):
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)  # floats throughout: 9**9**9 overflows at once instead of running for hours
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitXor):
        raise AnswerError("write powers with **, as in 2**-24 (^ is not a power in Python)")
    if isinstance(node, ast.Tuple):
        raise AnswerError("write numbers without thousands separators: 3000 or 3_000, not 3,000")
    raise AnswerError("use numbers, + - * / ** and parentheses only")


def _without_unit(text, unit):
    typed = str(text).strip()
    if unit and typed.lower().endswith(unit.lower()):
        typed = typed[:-len(unit)].strip()
    return typed


def read_number(text: str, unit: str = "") -> float:
    """The value of a typed number or arithmetic expression; AnswerError says what is wrong."""
    typed = _without_unit(text, unit)
    if not typed:
        raise AnswerError("type a number first")
    if len(typed) > MAX_EXPRESSION_CHARS:
        raise AnswerError(f"an answer is at most {MAX_EXPRESSION_CHARS} characters")
    try:
        value = _evaluate(ast.parse(typed, mode="eval"))
    except SyntaxError:
        raise AnswerError(f"could not read {typed!r} as a number or an arithmetic expression") from None
    except ZeroDivisionError:
        raise AnswerError("that divides by zero") from None
    except OverflowError:
        raise AnswerError("that number is too large to compute") from None
    if not isinstance(value, float) or not math.isfinite(value):  # (-8) ** 0.5 is complex
        raise AnswerError(f"{typed!r} is not a finite real number")
    return value


def normalise(text: str) -> str:
    """Lower case without whitespace, backticks or surrounding quotes: '`torch.Size([3, 4])`' -> 'torch.size([3,4])'."""
    squeezed = "".join(str(text).lower().split()).replace("`", "")
    return squeezed.strip("'\"")


def show_number(value, within: float = 0.0) -> str:
    """A number as a learner would write it: 3145728, not 3.145728e+06; otherwise with the fewest
    significant digits that stay within `within` of it (all of them, at most 6, if `within` is 0)."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    if within <= 0:
        return f"{value:.6g}"
    for digits in range(1, 18):
        shown = f"{value:.{digits}g}"
        if abs(float(shown) - value) <= within:
            return shown
    return repr(value)


def shown_answer(question: Question) -> str:
    """A numeric question's answer, with as many digits as its tolerance makes meaningful."""
    bound = min(bound if kind == "abs" else bound * abs(question.answer) for kind, bound in question.tolerance)
    return show_number(question.answer, within=bound / 2) if bound > 0 else repr(question.answer)


def within(question: Question, value: float) -> bool:
    """Whether `value` is within the question's tolerance of its answer (either bound suffices)."""
    error = abs(value - question.answer)
    return any(error <= (bound if kind == "abs" else bound * abs(question.answer))
               for kind, bound in question.tolerance)


# --- choice order -------------------------------------------------------------------------------------
def shown_choices(question: Question, learner: str = None) -> tuple:
    """The choices in the order this learner sees them: shuffled, the same on every call."""
    learner = progress_file.learner_id() if learner is None else learner
    order = list(question.choices)
    random.Random(f"{learner}/{question.notebook}/{question.id}").shuffle(order)
    return tuple(order)


def heading(question: Question, number: int, review: str = "", note: str = "") -> str:
    """'**Q3.**' in a question's own notebook; '**R3.** *from 01_chain_rule: note*' in a review."""
    if not review:
        return f"**Q{number}.**"
    return f"**R{number}.** *from {question.notebook}" + (f": {note}" if note else "") + "*"


def body_markdown(question: Question) -> str:
    """The code snippet (if any) as a Python code block, then the prompt."""
    code = f"```python\n{question.code.rstrip()}\n```\n\n" if question.code else ""
    return code + question.prompt


# --- judging and saving -------------------------------------------------------------------------------
def _save(question, review, **fields):
    attempt = {"notebook": question.notebook, "section": question.section, "question": question.id,
               "kind": question.kind, **fields}
    if review:
        attempt["review"] = review
    progress_file.record(attempt)


def check_choice(question: Question, choice_id: str, review: str = "") -> Feedback:
    """Feedback for the option with id `choice_id`, saved to the progress file.

    `review`: the notebook whose opening review showed the question ('' in its own notebook)."""
    chosen = next((c for c in question.choices if c.id == choice_id), None)
    if chosen is None:
        raise AnswerError(f"{question.id} has no option {choice_id!r}")
    text = ("Correct. " if chosen.correct else "Not quite. ") + chosen.why
    if not chosen.correct:
        right = question.right_choice
        text += f"\n\nThe answer is: {right.text}. {right.why}"
    _save(question, review, response=chosen.id, correct=chosen.correct)
    return Feedback(chosen.correct, text)


def check_numeric(question: Question, typed: str, review: str = "") -> Feedback:
    """Feedback for a typed number or expression (AnswerError, not saved, if it cannot be read)."""
    value = read_number(typed, question.unit)
    correct = within(question, value)
    unit = f" {question.unit}" if question.unit else ""
    answer = shown_answer(question) + unit
    expression, given = _without_unit(typed, question.unit), show_number(value)
    given = given + unit if expression == given else f"{expression} = {given}{unit}"
    if correct:
        text = f"Correct: {answer}. {question.why}"
    else:
        text = f"Not quite: you gave {given}; the answer is {answer}. {question.why}"
    _save(question, review, response=str(typed), value=value, correct=correct)
    return Feedback(correct, text)


def check_short(question: Question, typed: str, review: str = "") -> Feedback:
    """Feedback for a typed short answer (AnswerError, not saved, if nothing was typed)."""
    if not normalise(typed):
        raise AnswerError("type your answer first")
    correct = normalise(typed) in {normalise(a) for a in question.accept}
    first = f"`{question.accept[0]}`"
    text = f"Correct. {question.why}" if correct else f"Not quite: the answer is {first}. {question.why}"
    _save(question, review, response=str(typed), correct=correct)
    return Feedback(correct, text)


def check_typed(question: Question, typed: str, review: str = "") -> Feedback:
    """A numeric or short question's feedback."""
    return (check_numeric if question.kind == "numeric" else check_short)(question, typed, review)


def rate_recall(question: Question, response: str, rating: int, review: str = "") -> None:
    """Save a free-recall attempt with the learner's own rating (0 again ... 3 easy)."""
    if rating not in range(len(RATINGS)) or isinstance(rating, bool):
        raise AnswerError(f"rate yourself from 0 to 3: {', '.join(f'{i} {r}' for i, r in enumerate(RATINGS))}")
    _save(question, review, response=str(response), rating=rating)
