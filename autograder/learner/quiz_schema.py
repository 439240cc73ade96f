"""The quiz files, ``autograder/learner/quizzes/<notebook>.yaml``, read and checked against the schema.

A file has ``notebook:`` and ``sections:`` with exactly ``predict``, ``retrieve`` and
``concept_check``, in that order, each ``{title, questions}``, and optionally ``derive`` last:
produced-answer questions shown one at a time just before an exercise (``show_question``), each
asking for a key intermediate of the derivation, so that the learner commits to a derivation before
writing code. A derive question's feedback keeps the answer: a wrong answer is told which path or
term it leaves out (``misses``: ``{answer, says}`` for the wrong answers a derivation that drops one
gives) or else what to check (``retry``), never the formula nor the right value, which the
exercise's last hint and its recap give. Every question has an ``id`` (unique in the file), a
``kind``, a ``prompt`` (Markdown), an optional ``code`` (a Python snippet shown above the prompt), a
``why`` (shown after an answer; a choice question has one per choice instead; a derive question's only
after a right one), and in ``retrieve`` a ``level`` (factual, conceptual or synthetic). The kinds:

- ``numeric`` (produced): ``answer`` (a number), ``tolerance: {abs: x}`` or ``{rel: x}`` (default
  ``rel: 1e-6``), optional ``unit``. The prompt states the tolerance in words the learner reads and
  ``stated_tolerances`` reads back: "two decimals" (abs 0.005), "within 1%" (rel 0.01), "within
  ±0.04" (abs 0.04), or "(exact)", "an exact count" (abs 1e-9: only the rounding of float
  arithmetic); a test holds the two to each other;
- ``short`` (produced): ``accept``, the answers that count (compared after lower-casing and removing
  whitespace, backticks, surrounding quotes and a final period), and/or ``value``, a Python expression
  whose value is the answer: then a typed expression with the same value is right too (judged by
  ``quiz_answers.judge_value``), on random float64 tensors of the shapes in ``variables`` (``{X: [5,
  3], dY: [5, 4]}``) where the answer is code, so that ``torch.mm(X.T, dY)`` counts as ``X.T @ dY``.
  ``accept`` then holds only what is not Python (``X^T dY``);
- ``recall`` (produced): ``answer``, the model answer; the learner rates their own recall;
- ``choice`` (recognition): ``choices``, each ``{id, text, why}``, exactly one with ``correct: true``.

Anything else in a question (a misspelt ``tolerence``) is an error that names the question, so a
typo cannot silently change how answers are judged.

In plain text a question is answered by its label, ``q7`` for the 7th question of its notebook (file
order), never by its id: an id such as ``tanh-saves-output`` would give the answer away. The id is
what the progress file keeps; ``find_question`` takes either.
"""
import dataclasses
import importlib.resources
import math
import re

import yaml

SECTIONS = ("predict", "retrieve", "concept_check")
OPTIONAL_SECTIONS = ("derive",)  # after SECTIONS when present
LEVELS = ("factual", "conceptual", "synthetic")
PRODUCED = ("numeric", "short", "recall")
KINDS = PRODUCED + ("choice",)
RATINGS = ("again", "hard", "good", "easy")
DEFAULT_TOLERANCE = {"rel": 1e-6}
EXACT = {"abs": 1e-9}  # what "exact" means in a prompt: only the rounding of a typed expression's float arithmetic
_COMMON = {"id", "kind", "prompt", "code", "why", "level"}
_DERIVE_ONLY = {"misses", "retry"}
_FIELDS = {"numeric": _COMMON | _DERIVE_ONLY | {"answer", "tolerance", "unit"},
           "short": _COMMON | _DERIVE_ONLY | {"accept", "value", "variables"},
           "recall": _COMMON | {"answer"}, "choice": _COMMON | {"choices"}}
_DIGITS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_STATED = (  # (pattern, the tolerance a match states)
    (re.compile(r"\b(one|two|three|four|five|six|[1-6]) decimals?\b", re.I),
     lambda m: ("abs", 0.5 * 10.0 ** -(_DIGITS.get(m[1].lower()) or int(m[1])))),
    (re.compile(r"\bwithin (\d+(?:\.\d+)?) ?%", re.I), lambda m: ("rel", float(m[1]) / 100)),
    (re.compile(r"\bwithin ±(\d+(?:\.\d+)?(?:e-?\d+)?)", re.I), lambda m: ("abs", float(m[1]))),
    (re.compile(r"\(exact\)|\bexact (?:answer|count|number|value)\b", re.I), lambda m: ("abs", EXACT["abs"])),
)
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where built: a review reads every file


class QuizFileError(ValueError):
    """A quiz data file that does not follow the schema."""


@dataclasses.dataclass(frozen=True)
class Choice:
    id: str
    text: str
    why: str
    correct: bool = False


@dataclasses.dataclass(frozen=True)
class Miss:
    """A wrong answer a derive question expects, and what it leaves out (a path, a term; never the formula)."""
    answer: object  # a number (numeric) or a text (short)
    says: str


@dataclasses.dataclass(frozen=True)
class Question:
    notebook: str
    section: str
    id: str
    kind: str
    prompt: str
    why: str = ""
    code: str = ""
    level: str = ""
    choices: tuple = ()  # of Choice, in the file's order (shown shuffled)
    answer: object = None  # a number (numeric) or the model answer (recall)
    tolerance: tuple = ()  # (("abs" or "rel", value), ...)
    unit: str = ""
    accept: tuple = ()
    value: str = ""  # a short question's answer as a Python expression, judged by its value
    variables: tuple = ()  # ((name, shape), ...): the tensors `value` is computed from
    misses: tuple = ()  # of Miss: a derive question's expected wrong answers
    retry: str = ""  # a derive question's word to any other wrong answer: what to check

    @property
    def produced(self) -> bool:
        return self.kind in PRODUCED

    @property
    def right_choice(self) -> Choice:
        return next(c for c in self.choices if c.correct)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number(value):
    """A YAML number, or None. PyYAML reads `1e-6` (no dot) as a string, so such strings count too."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    return value if _is_number(value) else None


def _text(raw, key, where, required=True) -> str:
    value = raw.get(key, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise QuizFileError(f"{where}: '{key}' must be {'a non-empty' if required else 'a'} string")
    return value


def _choices(raw, where) -> tuple:
    choices = raw.get("choices")
    if not isinstance(choices, list) or len(choices) < 2:
        raise QuizFileError(f"{where}: a choice question needs 2+ choices")
    parsed = []
    for c in choices:
        if not isinstance(c, dict) or set(c) - {"id", "text", "why", "correct"}:
            raise QuizFileError(f"{where}: every choice is {{id, text, why}} (and correct: true on one)")
        if not all(isinstance(c.get(k), str) and c[k].strip() for k in ("id", "text", "why")):
            raise QuizFileError(f"{where}: every choice needs an id, a text and a why")
        if c.get("correct", False) not in (True, False):
            raise QuizFileError(f"{where}: choice {c['id']}: correct is true or absent")
        parsed.append(Choice(c["id"], c["text"], c["why"], c.get("correct", False)))
    if sum(c.correct for c in parsed) != 1:
        raise QuizFileError(f"{where}: exactly one choice must be correct")
    if len({c.id for c in parsed}) != len(parsed):
        raise QuizFileError(f"{where}: two choices share an id")
    return tuple(parsed)


def _short(raw, where) -> dict:
    accept, value, variables = raw.get("accept", []), raw.get("value", ""), raw.get("variables", {})
    if not isinstance(accept, list) or not all(isinstance(a, str) and a.strip() or _is_number(a) for a in accept) \
            or not (accept or value):
        raise QuizFileError(f"{where}: a short question needs accept: a list of answers, or a value")
    if not isinstance(value, str) or (variables and not value.strip()):
        raise QuizFileError(f"{where}: value is a Python expression (a string), needed with variables")
    if not isinstance(variables, dict) or not all(
            isinstance(name, str) and name.isidentifier() and isinstance(shape, list)
            and all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 64 for n in shape)
            for name, shape in variables.items()):
        raise QuizFileError(f"{where}: variables are {{name: shape}}, a shape a list of sizes from 1 to 64")
    return {"accept": tuple(str(a) for a in accept), "value": value.strip(),
            "variables": tuple((name, tuple(shape)) for name, shape in variables.items())}


def _tolerance(raw, where) -> tuple:
    tolerance = raw.get("tolerance", DEFAULT_TOLERANCE)
    bounds = {k: _number(v) for k, v in tolerance.items()} if isinstance(tolerance, dict) else {}
    if not bounds or set(bounds) - {"abs", "rel"} or not all(v is not None and v >= 0 for v in bounds.values()):
        raise QuizFileError(f"{where}: tolerance is {{abs: x}} or {{rel: x}} with x >= 0")
    return tuple(sorted(bounds.items()))


def _misses(raw, kind, where) -> tuple:
    misses = raw.get("misses", [])
    if not isinstance(misses, list) or not all(isinstance(m, dict) and set(m) == {"answer", "says"} for m in misses):
        raise QuizFileError(f"{where}: misses is a list of {{answer, says}}")
    parsed = []
    for m in misses:
        answer = _number(m["answer"]) if kind == "numeric" else m["answer"]
        if answer is None or not isinstance(m["says"], str) or not m["says"].strip() \
                or (kind == "short" and not (isinstance(answer, str) and answer.strip())):
            raise QuizFileError(f"{where}: a miss needs {'a number' if kind == 'numeric' else 'a text'} as its "
                                "answer and says: what that answer leaves out")
        parsed.append(Miss(answer, m["says"]))
    return tuple(parsed)


def stated_tolerances(prompt: str) -> list:
    """The tolerances a prompt states, as (kind, bound): [("abs", 0.005)] for "Two decimals are enough"."""
    return [state(m) for pattern, state in _STATED for m in pattern.finditer(prompt)]


def parse_question(notebook: str, section: str, raw) -> Question:
    """One question of `notebook`'s `section`, checked against the schema (see the module doc)."""
    if not isinstance(raw, dict):
        raise QuizFileError(f"{notebook}.yaml, section {section}: a question is a mapping, got {raw!r}")
    where = f"{notebook}.yaml, section {section}, question {raw.get('id', '?')}"
    kind = raw.get("kind")
    if kind not in KINDS:
        raise QuizFileError(f"{where}: kind is one of {', '.join(KINDS)}, not {kind!r}")
    unknown = set(raw) - _FIELDS[kind]
    if unknown:
        raise QuizFileError(f"{where}: unknown field(s) {', '.join(sorted(unknown))} for a {kind} question")
    fields = {"id": _text(raw, "id", where), "prompt": _text(raw, "prompt", where),
              "code": _text(raw, "code", where, required=False),
              "why": _text(raw, "why", where, required=kind in ("numeric", "short"))}
    level = raw.get("level", "")
    if section == "retrieve" and level not in LEVELS:
        raise QuizFileError(f"{where}: a retrieve question needs a level: {', '.join(LEVELS)}")
    if level and level not in LEVELS:
        raise QuizFileError(f"{where}: level is one of {', '.join(LEVELS)}")
    if section == "derive" and kind not in PRODUCED:
        raise QuizFileError(f"{where}: a derive question asks the learner to produce an answer "
                            f"({', '.join(PRODUCED)}), not to pick one")
    if section != "derive" and set(raw) & _DERIVE_ONLY:
        raise QuizFileError(f"{where}: misses and retry belong to derive questions only")
    if kind in ("numeric", "short"):
        fields.update(misses=_misses(raw, kind, where), retry=_text(raw, "retry", where, required=False))
    if kind == "choice":
        fields["choices"] = _choices(raw, where)
    elif kind == "numeric":
        if _number(raw.get("answer")) is None:
            raise QuizFileError(f"{where}: a numeric question needs a number as its answer")
        fields.update(answer=_number(raw["answer"]), tolerance=_tolerance(raw, where),
                      unit=_text(raw, "unit", where, required=False))
    elif kind == "short":
        fields.update(_short(raw, where))
    else:
        fields["answer"] = _text(raw, "answer", where)  # a recall question's model answer
    return Question(notebook, section, kind=kind, level=level, **fields)


def quiz_folder():
    return importlib.resources.files("autograder.learner") / "quizzes"


def course_notebooks() -> list:
    """The notebooks that have quizzes, in course order (the sorted names of the quiz files)."""
    return sorted(p.name[:-len(".yaml")] for p in quiz_folder().iterdir() if p.name.endswith(".yaml"))


def load_quiz(notebook: str) -> dict:
    """{section: (title, [Question, ...])} for one notebook, validated."""
    source = quiz_folder() / f"{notebook}.yaml"
    if not source.is_file():
        raise QuizFileError(f"no quiz for a notebook named {notebook!r}; "
                            f"the course's notebooks are: {', '.join(course_notebooks())}")
    raw = yaml.load(source.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)
    if not isinstance(raw, dict) or raw.get("notebook") != notebook or not isinstance(raw.get("sections"), dict):
        raise QuizFileError(f"{notebook}.yaml: needs 'notebook: {notebook}' and 'sections:'")
    found = tuple(raw["sections"])
    if found[:len(SECTIONS)] != SECTIONS or any(s not in OPTIONAL_SECTIONS for s in found[len(SECTIONS):]):
        raise QuizFileError(f"{notebook}.yaml: the sections are {', '.join(SECTIONS)}, in that order "
                            f"(then optionally {', '.join(OPTIONAL_SECTIONS)}); found {', '.join(map(str, found))}")
    quiz, seen = {}, set()
    for section, body in raw["sections"].items():
        if not isinstance(body, dict) or not isinstance(body.get("title"), str) \
                or not isinstance(body.get("questions"), list) or not body["questions"]:
            raise QuizFileError(f"{notebook}.yaml, section {section}: needs a title and a list of questions")
        questions = [parse_question(notebook, section, q) for q in body["questions"]]
        for q in questions:
            if q.id in seen:
                raise QuizFileError(f"{notebook}.yaml: question id {q.id!r} is used twice")
            seen.add(q.id)
        quiz[section] = (body["title"], questions)
    return quiz


def all_questions(notebook: str) -> list:
    """Every question of `notebook`, in file order."""
    return [q for _title, questions in load_quiz(notebook).values() for q in questions]


def find_question(notebook: str, question_id: str) -> Question:
    """The question of `notebook` with this id, or with this label (``q7``: see ``label``)."""
    questions = all_questions(notebook)
    for q in questions:
        if q.id == question_id:
            return q
    numbered = re.fullmatch(r"[qQ](\d+)", str(question_id).strip())
    if numbered and 1 <= int(numbered[1]) <= len(questions):
        return questions[int(numbered[1]) - 1]
    raise KeyError(f"{notebook} has no quiz question {question_id!r}")


def number(question: Question) -> int:
    """The question's place in its notebook's file, from 1 (its heading Q7, its label q7)."""
    ids = [q.id for q in all_questions(question.notebook)]
    return ids.index(question.id) + 1


def label(question: Question) -> str:
    """The neutral name a plain-text answer() call uses: q7, not an id that gives the answer away."""
    return f"q{number(question)}"
