"""A learner's answer to a quiz question: read, judged, explained and saved to the progress file.

Widgets (``quiz_widgets``) and plain text (``quiz``) both go through here, so they judge alike:

- ``numeric``: the typed text is a number or an arithmetic expression (numbers, ``+ - * / **``,
  parentheses, ``sqrt``, ``exp``, ``log`` (also ``ln``, ``log2``, ``log10``), ``pi`` and ``e``, each
  also with ``math.`` in front, a function applied to a number by a space too, as on paper (``ln 23`` is
  ``ln(23)``); ``2**-24``, ``3*4*8``, ``sqrt(4/3)``, ``math.log(23)``) or a number word (``zero`` to
  ``ten``), evaluated without ``eval``, and right when it is within the question's tolerance of the
  answer (the tolerance its prompt states). A trailing unit (``96 bytes``) is allowed. A wrong number
  that is the answer rounded to fewer digits than the tolerance asks for is told so (give more digits),
  not that its reasoning went wrong.
- ``short``: right when it equals one of the accepted answers once both are lower-cased and stripped
  of all whitespace, backticks, surrounding quotes and a final period (for a True/False question,
  yes and no count as true and false). A call of a named function counts as its name
  (``gradgradcheck()``, ``torch.autograd.gradgradcheck(f, (x,))`` for ``gradgradcheck``). A question
  with a ``value`` is judged by meaning too: the typed text (a number word read as its number) is read
  as a Python expression and right when its value equals the value's, on random tensors of the
  question's ``variables`` (several draws) where it names any; so ``torch.mm(X.T, dY)`` and
  ``(dY.T @ X).T`` are ``X.T @ dY``, and ``[4, 4, 4]``, ``torch.full((3,), 4.)`` and
  ``torch.ones(3) * 4`` are ``tensor([4., 4., 4.])``.
- ``choice``: the options are shown in an order of their own for each learner and question
  (seeded by the learner's id in the progress file, so a re-run or another kernel shows the same
  order), and the answer is saved by the option's id, never by its position.
- ``recall``: the learner writes an answer, sees the model answer, and rates their own recall.

A ``derive`` question's feedback keeps its answer (the exercise after it asks for the formula): right
or wrong, and for a wrong answer which path or term it leaves out (the question's ``misses``) or what
to check (its ``retry``), never the right value nor the explanation, which could give the formula.

The placeholder that plain text shows in an ``answer(...)`` call (``?``, ``...``, ``your answer``) is
not an answer: it is refused with a message, as any text that cannot be read, and nothing is saved.
Every attempt is saved (``progress_file.record``); one given in a later notebook's opening review
also carries ``"review": <that notebook>``.

A typed expression is never given to ``eval``: it is parsed with ``ast``, every node checked against
a short list (names, attributes, calls, indexing, arithmetic, constants, tuples and lists), and
walked here. It reaches only the names it is given (``torch``, the question's tensors, ``tensor``,
``nan`` and ``inf``; no builtins), no attribute that starts with ``_``, attributes of ``torch`` only
where they are tensor operations or dtypes, and attributes of tensors only: not ``torch.save``, not
``X.numpy().tofile``. It runs in the learner's own kernel, on tensors drawn from a generator of its
own, so the kernel's random state is left as it was.
"""
import ast
import dataclasses
import inspect
import math
import operator
import random
import re
import string
import warnings

import torch

from autograder.learner import progress_file
from autograder.learner.quiz_schema import RATINGS, Question

LETTERS = string.ascii_lowercase
MAX_EXPRESSION_CHARS = 200
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos}
# what a numeric answer may call, and name (also as math.sqrt, math.pi, ...)
FUNCTIONS = {"sqrt": math.sqrt, "exp": math.exp, "log": math.log, "ln": math.log, "log2": math.log2,
             "log10": math.log10}
CONSTANTS = {"pi": math.pi, "e": math.e}
NUMBER_WORDS = {w: float(n) for n, w in enumerate("zero one two three four five six seven eight nine ten".split())}
PLACEHOLDERS = ("?", "...", "…", "your answer")  # what plain text shows in an answer(...) call, to be replaced
_NUMERIC_PARTS = "numbers, + - * / ** and parentheses, sqrt, exp, log (ln), pi and e"


@dataclasses.dataclass(frozen=True)
class Feedback:
    correct: bool
    text: str


class AnswerError(ValueError):
    """A typed answer that cannot be read (not saved: it is not an answer yet)."""


# --- reading a number ---------------------------------------------------------------------------------
def _math_name(node) -> str:
    """'sqrt' for `sqrt` and for `math.sqrt`; '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "math":
        return node.attr
    return ""


def _evaluate(node):
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)  # floats throughout: 9**9**9 overflows at once instead of running for hours
    if _math_name(node) in CONSTANTS:
        return CONSTANTS[_math_name(node)]
    name = _math_name(node.func) if isinstance(node, ast.Call) else ""
    if name in FUNCTIONS and not node.keywords and 1 <= len(node.args) <= (2 if name == "log" else 1):
        try:
            return float(FUNCTIONS[name](*map(_evaluate, node.args)))
        except ValueError:
            raise AnswerError(f"{ast.unparse(node)} is outside the domain of {name}") from None
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitXor):
        raise AnswerError("write powers with **, as in 2**-24 (^ is not a power in Python)")
    if isinstance(node, ast.Tuple):
        raise AnswerError("write numbers without thousands separators: 3000 or 3_000, not 3,000")
    raise AnswerError(f"use {_NUMERIC_PARTS} only")


def _parse(text: str) -> ast.Expression:
    """ast.parse of an expression, quietly: '1x' would otherwise print a SyntaxWarning before its SyntaxError."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(text, mode="eval")


def _without_unit(text, unit):
    typed = str(text).strip()
    if unit and typed.lower().endswith(unit.lower()):
        typed = typed[:-len(unit)].strip()
    return typed


# A math function applied by juxtaposition, as on paper: `ln 23`, `sqrt 2`, `exp -1`, read as a call of its number (or
# constant) argument; `2 ln 2` stays unreadable (no implicit product), `ln 23 / 2` is ln(23) / 2.
_APPLIED = re.compile(r"(?<![\w.])((?:math\.)?(?:" + "|".join(sorted(FUNCTIONS, key=len, reverse=True))
                      + r"))\s+([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|pi\b|e\b)")


def _applied(typed: str) -> str:
    """`ln 23` as `ln(23)`: a function of the list applied to a number by a space, as written on paper."""
    return _APPLIED.sub(r"\1(\2)", typed)


def read_number(text: str, unit: str = "") -> float:
    """The value of a typed number or arithmetic expression; AnswerError says what is wrong."""
    typed = _without_unit(text, unit)
    if not typed or typed in PLACEHOLDERS:
        raise AnswerError("type a number first" + (f", in place of {typed!r}" if typed else ""))
    if normalise(typed) in NUMBER_WORDS:
        return NUMBER_WORDS[normalise(typed)]
    if len(typed) > MAX_EXPRESSION_CHARS:
        raise AnswerError(f"an answer is at most {MAX_EXPRESSION_CHARS} characters")
    try:
        value = _evaluate(_parse(_applied(typed)))
    except SyntaxError:
        raise AnswerError(f"could not read {typed!r} as a number or an arithmetic expression") from None
    except ZeroDivisionError:
        raise AnswerError("that divides by zero") from None
    except OverflowError:
        raise AnswerError("that number is too large to compute") from None
    if not isinstance(value, float) or not math.isfinite(value):  # (-8) ** 0.5 is complex
        raise AnswerError(f"{typed!r} is not a finite real number")
    return value


# --- reading a short answer ---------------------------------------------------------------------------
_BOOLEANS = {"yes": "true", "no": "false"}


def normalise(text: str) -> str:
    """Lower case without whitespace, backticks, surrounding quotes or a final period:
    '`torch.Size([3, 4])`' -> 'torch.size([3,4])', 'False.' -> 'false'."""
    squeezed = "".join(str(text).lower().split()).replace("`", "")
    return squeezed.rstrip(".").strip("'\"").rstrip(".")


def _canonical(text: str) -> str:
    """normalise(), with yes and no read as true and false."""
    text = normalise(text)
    return _BOOLEANS.get(text, text)


# --- reading and judging a code answer ----------------------------------------------------------------
CODE_DRAWS = 3  # random draws of the question's tensors; an answer must match on every one
_CODE_OPERATORS = {**_OPERATORS, ast.MatMult: operator.matmul, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_CODE_NODES = (ast.Expression, ast.Name, ast.Load, ast.Attribute, ast.Call, ast.keyword, ast.Subscript, ast.Slice,
               ast.BinOp, ast.UnaryOp, ast.Constant, ast.Tuple, ast.List, *_CODE_OPERATORS)
_TORCH_EXTRAS = {"einsum", "tensordot", "tensor", "as_tensor", "Size", "stack", "cat", "zeros", "ones", "eye", "full",
                 "zeros_like", "ones_like", "full_like", "arange", "linspace"}
_CODE_CONSTANTS = {"torch": torch, "tensor": torch.tensor, "nan": math.nan, "inf": math.inf}  # tensor, nan: as printed


def code_names(question: Question) -> str:
    """The names a code answer may use: 'X, dY and torch'."""
    return ", ".join(name for name, _ in question.variables) + " and torch"


def parse_code(text: str, names) -> ast.Expression:
    """`text` as a Python expression made only of the allowed parts and `names` (AnswerError otherwise)."""
    typed = str(text).strip().strip("`").strip()
    if not typed:
        raise AnswerError("type your answer first")
    if len(typed) > MAX_EXPRESSION_CHARS:
        raise AnswerError(f"an answer is at most {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = _parse(typed)
    except SyntaxError:
        raise AnswerError(f"could not read {typed!r} as a Python expression") from None
    for node in ast.walk(tree):
        if not isinstance(node, _CODE_NODES):
            raise AnswerError(f"{typed!r}: use names, attributes, calls, indexing, arithmetic, numbers and tuples "
                              f"only (no {type(node).__name__})")
        if isinstance(node, ast.Name) and node.id not in names:
            raise AnswerError(f"{node.id!r} is not defined here; the names are {', '.join(sorted(names))}")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise AnswerError(f"{typed!r}: no attributes that start with _")
        if isinstance(node, ast.keyword) and node.arg is None:
            raise AnswerError(f"{typed!r}: no ** in a call")
        if isinstance(node, ast.Constant) and isinstance(node.value, (bytes, complex)):
            raise AnswerError(f"{typed!r}: no bytes and no complex numbers")
    return tree


def _attribute(owner, name):
    """owner.name, where owner is torch (tensor operations and dtypes only) or a tensor."""
    if owner is torch:
        found = getattr(torch, name, None)
        if isinstance(found, torch.dtype) or (callable(found) and not inspect.ismodule(found)
                                              and (hasattr(torch.Tensor, name) or name in _TORCH_EXTRAS)):
            return found
        raise AnswerError(f"torch.{name} is not available here: use tensor operations")
    if isinstance(owner, torch.Tensor):
        if not hasattr(owner, name):
            raise AnswerError(f"a tensor has no attribute {name!r}")
        return getattr(owner, name)
    raise AnswerError(f"only torch and tensors have attributes here, not a {type(owner).__name__}")


def _arithmetic(op, *operands):
    if not all(isinstance(x, (int, float, torch.Tensor)) for x in operands):
        raise AnswerError("arithmetic works on numbers and tensors here, not on lists or strings")
    if isinstance(op, ast.Pow) and not any(isinstance(x, torch.Tensor) for x in operands):
        operands = [float(x) for x in operands]  # 9**9**9 overflows at once instead of running for hours
    return _CODE_OPERATORS[type(op)](*operands)


def _run(node, names):
    """The value of a checked expression (parse_code), walked node by node."""
    if isinstance(node, ast.Expression):
        return _run(node.body, names)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return names[node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_run(item, names) for item in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.Attribute):
        return _attribute(_run(node.value, names), node.attr)
    if isinstance(node, ast.Call):
        function = _run(node.func, names)
        if not callable(function):
            raise TypeError(f"{ast.unparse(node.func)} cannot be called")
        return function(*[_run(a, names) for a in node.args], **{k.arg: _run(k.value, names) for k in node.keywords})
    if isinstance(node, ast.Subscript):
        return _run(node.value, names)[_run(node.slice, names)]
    if isinstance(node, ast.Slice):
        return slice(*[None if part is None else _run(part, names) for part in (node.lower, node.upper, node.step)])
    if isinstance(node, ast.BinOp):
        return _arithmetic(node.op, _run(node.left, names), _run(node.right, names))
    return _arithmetic(node.op, _run(node.operand, names))  # UnaryOp, the last node type parse_code lets through


def evaluate_code(text: str, tensors: dict):
    """The value of the expression `text` with `tensors` (name: tensor) and torch (AnswerError if it is
    not allowed; whatever it raises otherwise, as Python would)."""
    names = {**_CODE_CONSTANTS, **tensors}
    tree = parse_code(text, names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return _run(tree, names)
        except ZeroDivisionError:
            raise AnswerError(f"{text!r} divides by zero") from None
        except OverflowError:
            raise AnswerError(f"{text!r} is too large to compute") from None


def draws(question: Question) -> list:
    """The question's tensors, {name: float64 tensor of its declared shape}, for each draw (one if none)."""
    count = CODE_DRAWS if question.variables else 1
    result = []
    for draw in range(count):
        generator = torch.Generator().manual_seed(draw)
        result.append({name: torch.randn(*shape, generator=generator, dtype=torch.float64)
                       for name, shape in question.variables})
    return result


def _as_tensor(value):
    """A dense float64 tensor on the CPU holding `value` (a tensor, number, nested list or tuple, torch.Size),
    or None."""
    try:
        if isinstance(value, torch.Tensor):
            return value.detach().to_dense().to("cpu", torch.float64)
        return torch.as_tensor(value, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError, NotImplementedError):
        return None


def _other_values(where, typed, got, want) -> str:
    """Why a value of the right shape is not the value: NaN where it is a number, or other values (a single
    number has no shape to speak of; the feedback shows the answer anyway)."""
    if torch.isnan(got).any() and not torch.isnan(want).any():
        return f"{where}`{typed}` {'is' if got.numel() == 1 else 'holds'} NaN (not a number) where the value is one"
    if want.numel() == 1:
        return f"{where}`{typed}` has another value" if where else ""
    return f"{where}`{typed}` has the right shape but other values"


def judge_value(question: Question, typed: str) -> tuple:
    """(right, why not) for a short question with a value: does `typed`, read as Python, have the value's
    value (on every draw of the question's tensors)? AnswerError if it cannot be read."""
    where = ("on random " + " and ".join(f"{name} of shape {tuple(shape)}" for name, shape in question.variables)
             + ", ") if question.variables else ""
    parse_code(typed, {**_CODE_CONSTANTS, **dict(question.variables)})  # unreadable: say so before running
    for tensors in draws(question):
        want = _as_tensor(evaluate_code(question.value, tensors))
        try:
            value = evaluate_code(typed, tensors)
        except AnswerError:
            raise
        except Exception as err:  # noqa: BLE001 - an answer that raises is a wrong answer; say how
            message = (str(err).strip().splitlines() or [""])[0][:200]
            return False, f"{where}`{typed.strip()}` raises {type(err).__name__}: {message}"
        got = _as_tensor(value)
        if got is None:
            return False, f"{where}`{typed.strip()}` gives a {type(value).__name__}, not a value to compare"
        if got.shape != want.shape:
            return False, f"{where}`{typed.strip()}` has shape {tuple(got.shape)}, not {tuple(want.shape)}"
        if not torch.allclose(got, want, rtol=1e-5, atol=1e-8, equal_nan=True):
            return False, _other_values(where, typed.strip(), got, want)
    return True, ""


# --- showing numbers, choices and questions -----------------------------------------------------------
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


def within(question: Question, value: float, target: float = None) -> bool:
    """Whether `value` is within the question's tolerance of its answer, or of `target` (either bound
    suffices)."""
    target = question.answer if target is None else target
    error = abs(value - target)
    return any(error <= (bound if kind == "abs" else bound * abs(target)) for kind, bound in question.tolerance)


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
        raise AnswerError(f"this question has no option {choice_id!r}")
    text = ("Correct. " if chosen.correct else "Not quite. ") + chosen.why
    if not chosen.correct:
        right = question.right_choice
        text += f"\n\nThe answer is: {right.text}. {right.why}"
    _save(question, review, response=chosen.id, correct=chosen.correct)
    return Feedback(chosen.correct, text)


MISS_SLACK = 0.01  # a derive question's expected wrong answer, typed rounded (0.98 for 0.98449), is still named
DEFAULT_RETRY = ("That is not what the derivation gives: follow every path from the input to the output, "
                 "and check each factor along it and its sign.")


def _derive_retry(question: Question, miss) -> str:
    """A derive question's word to a wrong answer: what `miss` leaves out, or what to check; then try again."""
    says = miss.says if miss else (question.retry or DEFAULT_RETRY)
    check = ", or run the snippet to see the value" if question.code else ""
    return f"{says} Try again{check}."


_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.(\d*))?|\.(\d+))(?:[eE]([-+]?\d+))?")
_COUNTS = {1: "one decimal", 2: "two decimals", 3: "three decimals", 4: "four decimals", 5: "five decimals",
           6: "six decimals"}


def _last_digit(expression: str):
    """The place of the last digit of a plain typed number (0.01 for 0.73, 1 for 3, 100 for 1.2e3), or None
    for anything else (an expression has no last digit to round at)."""
    found = _PLAIN_NUMBER.fullmatch(expression.strip())
    if not found:
        return None
    decimals = len(found[1] or found[2] or "")
    return 10.0 ** (int(found[3] or 0) - decimals)


def rounded_too_coarsely(question: Question, expression: str, value: float) -> bool:
    """Whether `value` (typed as `expression`) is the answer rounded at its last digit, a digit too coarse for
    the tolerance: 0.2 or 0.20 for 0.2037 within ±0.0005. A number with no digit of the answer (1 for 0.73),
    a zero or the other sign is not a rounding of it."""
    step, answer = _last_digit(expression), question.answer
    if step is None or value == 0 or answer == 0 or (value > 0) != (answer > 0) or step > abs(answer):
        return False
    return abs(value - answer) <= step / 2 * (1 + 1e-9) and not within(question, value)


def precision_asked(question: Question) -> str:
    """What the question's tolerance asks for, as its prompt says it: 'three decimals' for ±0.0005 where the
    prompt counts decimals, else 'a value within ±0.05' or 'a value within 1%' (the loosest where there are several, as
    `within` takes either)."""
    def size(bound):
        kind, value = bound
        return value if kind == "abs" else value * abs(question.answer)
    kind, bound = max(question.tolerance, key=size)
    if kind == "rel":
        return f"a value within {show_number(bound * 100)}%"
    places = -math.log10(2 * bound) if bound > 0 else 0.0
    if "decimal" in question.prompt.lower() and abs(places - round(places)) < 1e-9 and round(places) in _COUNTS:
        return _COUNTS[round(places)]
    return f"a value within ±{show_number(bound)}"


def check_numeric(question: Question, typed: str, review: str = "") -> Feedback:
    """Feedback for a typed number or expression (AnswerError, not saved, if it cannot be read)."""
    value = read_number(typed, question.unit)
    correct = within(question, value)
    unit = f" {question.unit}" if question.unit else ""
    answer = shown_answer(question) + unit
    expression, given = _without_unit(typed, question.unit), show_number(value)
    given = given + unit if expression == given else f"{expression} = {given}{unit}"
    exact_miss = next((m for m in question.misses if within(question, value, m.answer)), None)
    if correct:
        text = f"Correct: {answer}. {question.why}"
    elif exact_miss is None and rounded_too_coarsely(question, expression, value):  # right, with too few digits
        coarse = (f"{expression}{unit} is the right value rounded too coarsely: the question asks for "
                  f"{precision_asked(question)}. Give more digits")
        text = (f"Not yet: {coarse}." if question.section == "derive"
                else f"Not quite: {coarse}; the answer is {answer}. {question.why}")
    elif question.section == "derive":
        miss = exact_miss or next((m for m in question.misses if abs(value - m.answer) <= MISS_SLACK * abs(m.answer)),
                                  None)
        text = f"Not yet: you gave {given}. {_derive_retry(question, miss)}"
    else:
        text = f"Not quite: you gave {given}; the answer is {answer}. {question.why}"
    _save(question, review, response=str(typed), value=value, correct=correct)
    return Feedback(correct, text)


def judge_short(question: Question, typed: str) -> tuple:
    """(right, why not) for a short answer: an accepted spelling (or a call of an accepted function), or
    (for a question with a value) an expression with the same value. AnswerError if nothing was typed,
    or if code in the question's variables is asked for and the text is not such code (``X^T dY`` is not
    Python; accept lists it)."""
    shown = str(typed).strip().strip("`").strip()
    if not normalise(typed) or shown.lower() in PLACEHOLDERS:
        raise AnswerError("type your answer first" + (f", in place of {shown!r}" if shown else ""))
    if _canonical(typed) in {_canonical(a) for a in question.accept} or _calls_an_accepted_function(question, typed):
        return True, ""
    if not question.value:
        return False, ""
    if normalise(typed) in NUMBER_WORDS:
        typed = repr(NUMBER_WORDS[normalise(typed)])
    try:
        return judge_value(question, typed)
    except AnswerError:
        if question.variables:
            raise  # code in the question's names is asked for: say what cannot be read, save nothing
        return False, ""  # a value, asked for in any words: words such as RuntimeError are an answer


_NAMED_CALL = re.compile(r"([a-z_][\w.]*)(?:\(.*\))?")
_MODULE_PATHS = {"torch", "autograd", "nn", "f", "func", "functional", "graph", "utils"}  # as normalise() spells them


def _called_name(text: str) -> str:
    """'torch.autograd.gradgradcheck' for `torch.autograd.gradgradcheck(f, (x,))` or `...gradgradcheck()`
    or the bare name (lower case); '' when the text is no name nor a call of one."""
    found = _NAMED_CALL.fullmatch(normalise(text))
    return found[1] if found else ""


def _same_function(one: str, other: str) -> bool:
    """The same dotted name, or one with a torch module path in front of the other (autograd.gradgradcheck)."""
    longer, shorter = sorted((one, other), key=len, reverse=True)
    return one == other or (longer.endswith("." + shorter) and longer.split(".")[0] in _MODULE_PATHS)


def _calls_an_accepted_function(question: Question, typed: str) -> bool:
    """A call of a function the question accepts by name: `gradgradcheck()` where `gradgradcheck` counts."""
    called = _called_name(typed)
    return bool(called) and any(len(name) > 1 and _same_function(called, name)
                                for name in map(_called_name, question.accept))


def model_answer(question: Question) -> str:
    """A short question's answer as the feedback shows it."""
    return question.value or question.accept[0]


def check_short(question: Question, typed: str, review: str = "") -> Feedback:
    """Feedback for a typed short answer (AnswerError, not saved, if it cannot be read)."""
    correct, reason = judge_short(question, typed)
    if correct:
        text = f"Correct. {question.why}"
    elif question.section == "derive":
        miss = next((m for m in question.misses if _canonical(m.answer) == _canonical(typed)), None)
        text = f"Not yet{f': {reason}' if reason else ''}. {_derive_retry(question, miss)}"
    else:
        text = f"Not quite: {f'{reason}; ' if reason else ''}the answer is `{model_answer(question)}`. {question.why}"
    _save(question, review, response=str(typed), correct=correct)
    return Feedback(correct, text)


def check_typed(question: Question, typed: str, review: str = "") -> Feedback:
    """A numeric or short question's feedback."""
    return (check_numeric if question.kind == "numeric" else check_short)(question, typed, review)


def read_rating(rating) -> int:
    """A self-rating as its number: 0 to 3, or its name ("again", "hard", "good", "easy", any case)."""
    if isinstance(rating, str) and rating.strip().lower() in RATINGS:
        return RATINGS.index(rating.strip().lower())
    if isinstance(rating, str) and rating.strip().isdigit():
        rating = int(rating.strip())
    if isinstance(rating, int) and not isinstance(rating, bool) and rating in range(len(RATINGS)):
        return rating
    raise AnswerError(f"rate yourself with {', '.join(RATINGS)}, or from 0 to 3: "
                      f"{', '.join(f'{i} {r}' for i, r in enumerate(RATINGS))}")


def rate_recall(question: Question, response: str, rating, review: str = "") -> None:
    """Save a free-recall attempt with the learner's own rating (0 again ... 3 easy, or the name)."""
    _save(question, review, response=str(response), rating=read_rating(rating))
