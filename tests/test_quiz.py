"""Quizzes: the schema is enforced, answers are read, judged (code by its value) and saved, choices are shuffled
per learner, and nothing a learner sees names a question by an id that gives its answer away."""
import dataclasses
import json
import math
import os
import re
import subprocess
import sys

import pytest
import torch

from autograder.learner import progress_file, quiz, quiz_answers, quiz_schema

QUIZ_FILES = quiz_schema.course_notebooks()


@pytest.fixture(autouse=True)
def private_progress(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    monkeypatch.setenv("COURSE_PROGRESS", str(path))
    return path


def first(notebook, kind):
    return next(q for q in quiz_schema.all_questions(notebook) if q.kind == kind)


def saved(path):
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["type"] == "attempt"]


def letter_of(question, choice_id):
    shown = quiz_answers.shown_choices(question)
    return quiz_answers.LETTERS[[c.id for c in shown].index(choice_id)]


# --- the files ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("notebook", QUIZ_FILES)
def test_every_quiz_file_has_the_three_sections_in_order(notebook):
    sections = quiz.load_quiz(notebook)
    assert tuple(sections)[:3] == quiz.SECTIONS and set(tuple(sections)[3:]) <= {"derive"}
    levels = {q.level for q in sections["retrieve"][1]}
    assert {"factual", "conceptual", "synthetic"} <= levels
    assert len(sections["concept_check"][1]) >= 4


def write_quiz(tmp_path, monkeypatch, text):
    folder = tmp_path / "quizzes"
    folder.mkdir(exist_ok=True)
    (folder / "99_test.yaml").write_text(text)
    monkeypatch.setattr(quiz_schema, "quiz_folder", lambda: folder)


MINIMAL = """notebook: 99_test
sections:
  predict: {title: P, questions: [{id: p1, kind: recall, prompt: "?", answer: "a"}]}
  retrieve: {title: R, questions: [{id: r1, kind: numeric, level: factual, prompt: "?", answer: 1e-3,
             tolerance: {abs: 1e-6}, why: "w"}]}
  concept_check: {title: C, questions: [{id: c1, kind: short, prompt: "?", accept: ["x"], why: "w"}]}
"""


def test_numbers_written_without_a_dot_are_numbers(tmp_path, monkeypatch):
    """PyYAML reads 1e-3 and 1e-6 as strings; the schema's own examples must still work."""
    write_quiz(tmp_path, monkeypatch, MINIMAL)
    (q,) = quiz.load_quiz("99_test")["retrieve"][1]
    assert q.answer == 1e-3 and q.tolerance == (("abs", 1e-6),)


def test_the_sections_come_in_their_order(tmp_path, monkeypatch):
    lines = MINIMAL.splitlines()
    write_quiz(tmp_path, monkeypatch, "\n".join(lines[:2] + lines[3:5] + [lines[2]] + lines[5:]))
    with pytest.raises(quiz.QuizFileError, match="sections are predict, retrieve, concept_check, in that order"):
        quiz.load_quiz("99_test")


@pytest.mark.parametrize("change, message", [
    (("tolerance: {abs: 1e-6}", "tolerence: {abs: 1e-6}"), "unknown field\\(s\\) tolerence"),
    (("tolerance: {abs: 1e-6}", "tolerance: {abs: -1}"), "tolerance is"),
    (("answer: 1e-3", "answer: about one"), "needs a number as its answer"),
    (("level: factual, ", ""), "retrieve question needs a level"),
    (('accept: ["x"]', "accept: []"), "needs accept"),
    (('kind: short, prompt: "?", accept: ["x"], why: "w"', 'kind: short, prompt: "?", accept: ["x"]'), "'why'"),
    (("kind: recall", "kind: essay"), "kind is one of"),
    (('accept: ["x"]', 'accept: ["x"], variables: {X: [3]}'), "value is a Python expression"),
    (('accept: ["x"]', 'value: "X.T", variables: {X: [3, 0]}'), "variables are"),
    (('accept: ["x"]', 'value: "X.T", variables: {X: 3}'), "variables are"),
])
def test_schema_errors_name_the_question_and_the_problem(tmp_path, monkeypatch, change, message):
    write_quiz(tmp_path, monkeypatch, MINIMAL.replace(*change, 1))
    with pytest.raises(quiz.QuizFileError, match=message):
        quiz.load_quiz("99_test")


DERIVE = {"id": "d1", "kind": "numeric", "prompt": "Follow both paths. (exact)", "answer": 0.5,
          "tolerance": {"abs": 1e-9}, "why": "direct 1, through the mean -0.5",
          "misses": [{"answer": 1, "says": "The path through the mean is missing."}],
          "retry": "Follow the direct path and the path through the mean."}


@pytest.mark.parametrize("change, message", [
    ({"misses": [{"answer": "one", "says": "s"}]}, "a miss needs a number as its answer"),
    ({"misses": [{"answer": 1}]}, "misses is a list of \\{answer, says\\}"),
    ({"misses": [{"answer": 1, "says": " "}]}, "a miss needs a number"),
    ({"retry": 3}, "'retry' must be a string"),
])
def test_derive_schema_errors(change, message):
    quiz_schema.parse_question("nb", "derive", DERIVE)
    with pytest.raises(quiz.QuizFileError, match=message):
        quiz_schema.parse_question("nb", "derive", {**DERIVE, **change})
    with pytest.raises(quiz.QuizFileError, match="misses and retry belong to derive questions only"):
        quiz_schema.parse_question("nb", "predict", DERIVE)


def test_a_derive_question_names_the_missing_path_and_keeps_the_answer(private_progress):
    question = quiz_schema.parse_question("01_chain_rule", "derive", {**DERIVE, "code": "x.grad"})
    named, other = quiz_answers.check_numeric(question, "1.004"), quiz_answers.check_numeric(question, "7")
    assert named.text == ("Not yet: you gave 1.004. The path through the mean is missing. Try again, or run the "
                          "snippet to see the value.")
    assert other.text == ("Not yet: you gave 7. Follow the direct path and the path through the mean. Try again, or "
                          "run the snippet to see the value.")
    right = quiz_answers.check_numeric(question, "1/2")
    assert right.correct and right.text == "Correct: 0.5. direct 1, through the mean -0.5"
    assert [a["correct"] for a in saved(private_progress)] == [False, False, True]
    short = quiz_schema.parse_question("01_chain_rule", "derive", {
        "id": "d2", "kind": "short", "prompt": "?", "value": "X.T @ dY", "variables": {"X": [5, 3], "dY": [5, 4]},
        "why": "w", "misses": [{"answer": "dY.T @ X", "says": "Transposed."}]})
    assert quiz_answers.check_short(short, "dY.T @ X").text.endswith("Transposed. Try again.")
    assert "X.T @ dY" not in quiz_answers.check_short(short, "X @ X.T").text
    assert quiz_answers.DEFAULT_RETRY in quiz_answers.check_short(short, "X @ X.T").text


@pytest.mark.parametrize("notebook, question_id, right, wrong", [
    ("03_vjp", "gradgradcheck-purpose", ["gradgradcheck()", "torch.autograd.gradgradcheck(f, (x,))",
                                         "autograd.gradgradcheck", "gradgrad check"],
     ["gradcheck()", "gradcheck", "x.gradgradcheck", "gradgradcheck2()"]),
    ("06_checkpointing", "hook-api", ["torch.autograd.graph.saved_tensors_hooks(pack, unpack)",
                                      "graph.saved_tensors_hooks()"], ["saved_tensors()", "hooks()"]),
    ("06_checkpointing", "tanh-saves-output", ["y", "the output"], ["y(x)", "x"]),
    ("03_vjp", "why-unbroadcast-sums", ["torch.full((3,), 4.)", "torch.ones(3) * 4", "torch.tensor([4., 4., 4.])",
                                        "4 * torch.ones_like(torch.ones(3))", "torch.arange(3) * 0 + 4"],
     ["torch.full((3,), 1.)", "torch.full((4,), 4.)", "torch.arange(3)"]),
    ("07_by_hand", "batch-of-one-normalised", ["zero", "Zero.", "0"], ["one", "ten"]),
])
def test_short_answers_take_calls_numbers_in_words_and_tensors_built_any_way(notebook, question_id, right, wrong):
    question = quiz_schema.find_question(notebook, question_id)
    assert [t for t in right if not quiz_answers.judge_short(question, t)[0]] == []
    assert [t for t in wrong if quiz_answers.judge_short(question, t)[0]] == []


def test_choice_schema_errors():
    right, other = {"id": "a", "text": "a", "why": "w", "correct": True}, {"id": "b", "text": "b", "why": "w"}

    def choice(*choices):
        return {"id": "q1", "kind": "choice", "prompt": "?", "choices": list(choices)}
    quiz_schema.parse_question("nb", "predict", choice(right, other))
    with pytest.raises(quiz.QuizFileError, match="exactly one choice must be correct"):
        quiz_schema.parse_question("nb", "predict", choice(right, {**other, "correct": True}))
    with pytest.raises(quiz.QuizFileError, match="q1: every choice needs an id"):
        quiz_schema.parse_question("nb", "predict", choice({k: v for k, v in right.items() if k != "id"}, other))
    with pytest.raises(quiz.QuizFileError, match="share an id"):
        quiz_schema.parse_question("nb", "predict", choice(right, {**other, "id": "a"}))
    with pytest.raises(quiz.QuizFileError, match="q2: 'answer' must be a non-empty string"):
        quiz_schema.parse_question("nb", "predict", {"id": "q2", "kind": "recall", "prompt": "?"})


# --- reading what was typed -------------------------------------------------------------------------------
@pytest.mark.parametrize("typed, value", [
    ("2**-24", 2.0 ** -24), ("3*4*8", 96.0), ("1e-3", 1e-3), (" -(1 + 2) / 4 ", -0.75), ("3_000", 3000.0),
    ("96 bytes", 96.0), ("0.5", 0.5), ("(3*2**-23*1.557)**(1/3)", (3 * 2 ** -23 * 1.557) ** (1 / 3)),
    ("sqrt(4/3)", (4 / 3) ** 0.5), ("2*exp(1)", 2 * math.e), ("1000 + log(2)", 1000 + math.log(2)),
    ("log(8, 2)", 3.0), ("pi/2", math.pi / 2), ("ln(23)", math.log(23)), ("math.log(23)", math.log(23)),
    ("math.sqrt(4)", 2.0), ("2 * math.pi", 2 * math.pi), ("e**2", math.e ** 2), ("log2(8)", 3.0), ("log10(1e3)", 3.0),
    ("zero", 0.0), ("Zero.", 0.0), ("three", 3.0),
    # issue 37: a function applied by a space, as on paper
    ("ln 23", math.log(23)), ("math.log 23", math.log(23)), ("sqrt 2", 2 ** 0.5), ("exp -1", math.exp(-1)),
    ("ln 23 / 2", math.log(23) / 2), ("2 * ln 2", 2 * math.log(2)), ("log10 1e3", 3.0), ("ln pi", math.log(math.pi))])
def test_numbers_and_plain_arithmetic_are_read(typed, value):
    assert quiz_answers.read_number(typed, unit="bytes") == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize("typed, message", [
    ("2^10", "write powers with \\*\\*"), ("3,000", "thousands separators"),
    ("__import__('os')", "numbers, \\+ - \\* / \\*\\*"),
    ("x + 1", "numbers, \\+"), ("9**9**9", "too large"), ("1/0", "divides by zero"), ("(-8)**0.5", "not a finite real"),
    ("", "type a number first"), ("2 +", "could not read"), ("True + 1", "numbers, \\+"), ("9" * 300, "at most 200"),
    ("f", r"sqrt, exp, log \(ln\), pi and e only"), ("sqrt", "sqrt, exp, log"), ("math.sqrt", "sqrt, exp, log"),
    ("os.sqrt(4)", "sqrt, exp, log"), ("math.ln2", "sqrt, exp, log"), ("?", r"type a number first, in place of '\?'"),
    ("...", "in place of '...'"), ("zero point three", "could not read"),
    ("sqrt(4, 3)", "sqrt, exp, log"), ("sqrt(x=4)", "sqrt, exp, log"), ("pi(2)", "sqrt, exp, log"),
    ("sqrt(-1)", "outside the domain of sqrt"), ("log(0)", "outside the domain of log"), ("exp(1000)", "too large"),
    ("__import__('os').getcwd()", "sqrt, exp, log"), ("2 ln 2", "could not read"), ("ln23", "sqrt, exp, log")])
def test_anything_else_is_refused_with_a_reason(typed, message):
    with pytest.raises(quiz_answers.AnswerError, match=message):
        quiz_answers.read_number(typed)


def test_reading_an_answer_prints_no_warning():
    """'1if 1else 2' makes Python's parser warn (invalid decimal literal) as it parses: a learner would see it."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for typed in ("1if 1else 2", "0in X", "1or 2"):
            with pytest.raises(quiz_answers.AnswerError, match="only"):
                quiz_answers.read_number(typed)
            with pytest.raises(quiz_answers.AnswerError, match="only"):
                quiz_answers.judge_short(code_question(), typed)
    assert [str(w.message) for w in caught] == []


def test_short_answers_are_normalised():
    assert quiz_answers.normalise(" `torch.Size([3, 4])` ") == "torch.size([3,4])"
    assert quiz_answers.normalise("'RuntimeError'") == quiz_answers.normalise('"runtimeerror"') == "runtimeerror"
    assert quiz_answers.normalise("RuntimeError.") == "runtimeerror"
    assert quiz_answers.normalise("'False'.") == quiz_answers.normalise("False.") == "false"


@pytest.mark.parametrize("notebook, question_id, right, wrong", [
    ("08_higher_order", "plain-gradient-has-no-graph", ["False", "false", "FALSE.", "no", "No.", " `no` "],
     ["True", "yes", "Yes.", "none"]),
    ("08_higher_order", "grad-mode-in-backward", ["True", "true.", "yes", "YES", "Yes."], ["False", "no"]),
    ("06_checkpointing", "grad-mode-in-function-forward", ["False", "no", "No."], ["True", "yes"])])
def test_a_yes_no_question_takes_yes_no_true_false_in_any_case(notebook, question_id, right, wrong):
    question = quiz_schema.find_question(notebook, question_id)
    assert all(quiz_answers.check_short(question, typed).correct for typed in right)
    assert not any(quiz_answers.check_short(question, typed).correct for typed in wrong)


# --- judging and saving -----------------------------------------------------------------------------------
def numeric_question(**changes):
    base = quiz_schema.Question("01_chain_rule", "predict", "n1", "numeric", "?", why="because", answer=0.32,
                                tolerance=(("abs", 0.0005),), unit="")
    return dataclasses.replace(base, **changes)


def test_numeric_answers_within_tolerance_are_right_and_saved(private_progress):
    q = numeric_question()
    assert quiz_answers.check_numeric(q, "2*0.8*0.2").correct
    wrong = quiz_answers.check_numeric(q, "0.8*0.2")
    assert not wrong.correct and "you gave 0.8*0.2 = 0.16" in wrong.text and "the answer is 0.32" in wrong.text
    assert [(a["kind"], a["response"], a["correct"]) for a in saved(private_progress)] == [
        ("numeric", "2*0.8*0.2", True), ("numeric", "0.8*0.2", False)]
    relative = numeric_question(answer=34359738368, tolerance=(("rel", 1e-9),), unit="numbers")
    assert quiz_answers.check_numeric(relative, "64*1024*1024*512 numbers").correct
    assert not quiz_answers.check_numeric(relative, "64*1024*1024*511").correct
    with pytest.raises(quiz_answers.AnswerError):
        quiz_answers.check_numeric(q, "zero point three")
    assert len(saved(private_progress)) == 4  # an unreadable answer is not an attempt


@pytest.mark.parametrize("notebook, question_id, typed", [
    ("07_by_hand", "batchnorm-dx-every-path", "0.2"), ("07_by_hand", "batchnorm-dx-every-path", "0.20"),
    ("03_vjp", "lse-gradient-entry", "0.73"), ("03_vjp", "lse-gradient-entry", "0.7")])
def test_a_right_value_rounded_too_coarsely_is_asked_for_more_digits(notebook, question_id, typed, private_progress):
    """Issue 37: 0.2 for 0.2037 "to three decimals" was told to add the paths one by one, as a wrong derivation."""
    question = quiz_schema.find_question(notebook, question_id)
    feedback = quiz_answers.check_numeric(question, typed)
    assert not feedback.correct
    assert feedback.text == (f"Not yet: {typed} is the right value rounded too coarsely: the question asks for three "
                             "decimals. Give more digits.")
    assert saved(private_progress)[-1]["correct"] is False


def test_a_coarse_number_that_a_missed_path_gives_is_still_the_missed_path(private_progress):
    lse = quiz_schema.find_question("03_vjp", "lse-gradient-entry")
    assert "The division by the sum is missing" in quiz_answers.check_numeric(lse, "1").text  # a miss, not a rounding
    path = quiz_schema.find_question("07_by_hand", "batchnorm-dx-every-path")
    assert "The path through the mean is missing" in quiz_answers.check_numeric(path, "0.4").text
    for typed in ("0.3", "-0.2", "0.2 + 0.0"):  # another value, the other sign, an expression: no rounding of it
        assert "rounded" not in quiz_answers.check_numeric(path, typed).text
    plain = numeric_question()  # 0.32 within ±0.0005, outside a derive question: the answer is shown as well
    text = quiz_answers.check_numeric(plain, "0.3").text
    assert text.startswith("Not quite: 0.3 is the right value rounded too coarsely: the question asks for a value "
                           "within ±0.0005. Give more digits; the answer is 0.32.")
    assert "rounded" not in quiz_answers.check_numeric(plain, "0").text


def test_a_nan_for_a_one_number_value_is_named_and_no_shape_is_spoken_of(private_progress):
    question = quiz_schema.find_question("07_by_hand", "batch-of-one-normalised")
    nan, other = quiz_answers.check_short(question, "nan"), quiz_answers.check_short(question, "1")
    assert nan.text.startswith("Not quite: `nan` is NaN (not a number) where the value is one; the answer is `0`.")
    assert other.text.startswith("Not quite: the answer is `0`.")
    assert "shape" not in nan.text + other.text


def test_short_answers_accept_any_listed_spelling(private_progress):
    q = first("03_vjp", "short")
    for spelling in q.accept:
        assert quiz_answers.check_short(q, f"  `{spelling}` ").correct
    bad = quiz_answers.check_short(q, "something else")
    assert not bad.correct and quiz_answers.model_answer(q) in bad.text
    with pytest.raises(quiz_answers.AnswerError):
        quiz_answers.check_short(q, " `` ")


@pytest.mark.parametrize("notebook", QUIZ_FILES)
def test_choice_feedback_explains_and_is_saved_by_choice_id(notebook, private_progress):
    question = first(notebook, "choice")
    right = question.right_choice
    wrong = next(c for c in question.choices if not c.correct)
    good, bad = quiz.check_choice(question, right.id), quiz.check_choice(question, wrong.id)
    assert good.correct and good.text.startswith("Correct.")
    assert not bad.correct and right.text in bad.text and wrong.why in bad.text
    assert [(a["question"], a["response"], a["correct"]) for a in saved(private_progress)] == [
        (question.id, right.id, True), (question.id, wrong.id, False)]


# --- code answers, judged by their value --------------------------------------------------------------------
def code_question(**changes):
    return dataclasses.replace(quiz_schema.find_question("07_by_hand", "matmul-weight-gradient"), **changes)


@pytest.mark.parametrize("typed", ["X.T @ dY", "torch.mm(X.T, dY)", "X.T.matmul(dY)", "(dY.T @ X).T", "X.t() @ dY",
                                   "torch.einsum('nk,nm->km', X, dY)", "(X[:, :, None] * dY[:, None, :]).sum(0)",
                                   "`X.transpose(0, 1) @ dY`", "X^T dY", "torch.matmul(X.mT, dY.double())"])
def test_code_that_computes_the_answer_is_right_however_it_is_written(typed, private_progress):
    """These were misses in the review schedule while only listed spellings were accepted."""
    result = quiz_answers.check_short(code_question(), typed)
    assert result.correct, result.text
    (attempt,) = saved(private_progress)
    assert (attempt["response"], attempt["correct"]) == (typed, True)


@pytest.mark.parametrize("typed, says", [
    ("dY.T @ X", "`dY.T @ X` has shape (4, 3), not (3, 4)"),
    ("X.T @ dY * 2", "has the right shape but other values"),
    ("X @ dY", "raises RuntimeError: mat1 and mat2 shapes cannot be multiplied"),
    ("X.T", "has shape (3, 5)"), ("X.shape", "has shape (2,)"), ("X.T.matmul", "gives a builtin_function_or_method"),
    ("torch.ones(3, 4)", "other values")])
def test_code_with_another_value_is_wrong_and_says_how(typed, says, private_progress):
    result = quiz_answers.check_short(code_question(), typed)
    assert not result.correct and says in result.text and "the answer is `X.T @ dY`" in result.text
    assert "on random X of shape (5, 3) and dY of shape (5, 4)" in result.text
    assert [a["correct"] for a in saved(private_progress)] == [False]


@pytest.mark.parametrize("typed, says", [
    ("__import__('os').system('true')", "'__import__' is not defined"),
    ("open('/etc/passwd')", "'open' is not defined"), ("X.__class__.__bases__", "no attributes that start with _"),
    ("torch.save(X, 'x.pt')", "torch.save is not available"),
    ("torch.hub.load('a', 'b')", "torch.hub is not available"),
    ("torch.manual_seed(0)", "not available"), ("X.numpy().tofile('x.bin')", "only torch and tensors have attributes"),
    ("(lambda: X)()", "no Lambda"), ("[x for x in X]", "no ListComp"), ("X if True else dY", "no IfExp"),
    ("(y := X)", "no NamedExpr"), ("f'{X}'", "no JoinedStr"), ("X < dY", "no Compare"),
    ("torch.mm(*[X.T, dY])", "no Starred"), ("torch.mm(**{})", "no ** in a call"),
    ("[1] * 1000000000", "not on lists or strings"), ("9**9**9 * X", "too large"),
    ("X.tranpose(0, 1) @ dY", "a tensor has no attribute 'tranpose'"), ("X.T @ dy", "'dy' is not defined"),
    ("X' dY", "could not read"), ("", "type your answer first"), ("X" * 201, "at most 200")])
def test_code_that_is_not_allowed_is_refused_and_not_saved(typed, says, private_progress):
    with pytest.raises(quiz_answers.AnswerError, match=re.escape(says)):
        quiz_answers.check_short(code_question(), typed)
    assert not private_progress.exists() or saved(private_progress) == []


def test_code_is_checked_on_several_draws(monkeypatch):
    """A constant that equals the answer on the first draw only is wrong; with one draw it would pass."""
    question = code_question(value="2 * X", variables=(("X", (3,)),), accept=())
    first_draw = quiz_answers.draws(question)[0]["X"] * 2
    constant = f"tensor({first_draw.tolist()!r}, dtype=torch.float64)"
    assert len(constant) <= quiz_answers.MAX_EXPRESSION_CHARS
    right, why = quiz_answers.judge_value(question, constant)
    assert not right and "other values" in why
    monkeypatch.setattr(quiz_answers, "CODE_DRAWS", 1)
    assert quiz_answers.judge_value(question, constant) == (True, "")


def test_judging_code_leaves_the_kernels_random_state_alone():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    quiz_answers.judge_short(code_question(), "torch.mm(X.T, dY)")
    assert torch.equal(torch.get_rng_state(), state)


def test_a_value_asked_in_any_words_takes_words_as_wrong_answers(private_progress):
    """Without variables, a value question judges 'RuntimeError' or 'no idea' wrong (saved), not unreadable."""
    question = quiz_schema.find_question("04_toggles", "retained-second-backward")
    for typed in ("RuntimeError", "no idea", "[4., 8.]", "tensor([4, 8])", "(4, 8)"):
        quiz_answers.check_short(question, typed)
    assert [a["correct"] for a in saved(private_progress)] == [False, False, True, True, True]


# --- shuffled choices -------------------------------------------------------------------------------------------
def test_choices_are_shuffled_per_learner_and_stable():
    question = next(q for q in quiz_schema.all_questions("04_toggles") if q.kind == "choice")
    orders = {tuple(c.id for c in quiz_answers.shown_choices(question, learner=f"learner-{i}")) for i in range(40)}
    assert len(orders) > 10  # learners see different orders
    assert all(sorted(order) == sorted(c.id for c in question.choices) for order in orders)
    mine = quiz_answers.shown_choices(question)
    assert quiz_answers.shown_choices(question) == mine  # the same order on every call
    other = next(q for q in quiz_schema.all_questions("04_toggles") if q.kind == "choice" and q.id != question.id)
    positions = {[c.id for c in quiz_answers.shown_choices(q, learner=f"l{i}")].index(q.right_choice.id)
                 for i in range(30) for q in (question, other)}
    assert positions == {0, 1, 2, 3}  # the right answer lands anywhere


SHOW_ORDER = """
from autograder.learner import quiz_answers, quiz_schema
q = next(q for q in quiz_schema.all_questions("04_toggles") if q.kind == "choice")
print(",".join(c.id for c in quiz_answers.shown_choices(q)))
"""


def test_the_order_is_the_same_in_another_kernel(private_progress):
    """A second process (another kernel) reads the learner id from the progress file."""
    runs = [subprocess.run([sys.executable, "-c", SHOW_ORDER], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "COURSE_PROGRESS": str(private_progress)}) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr
    assert runs[0].stdout == runs[1].stdout
    q = next(q for q in quiz_schema.all_questions("04_toggles") if q.kind == "choice")
    assert runs[0].stdout.strip() == ",".join(c.id for c in quiz_answers.shown_choices(q))
    learners = [r for r in map(json.loads, private_progress.read_text().splitlines()) if r["type"] == "learner"]
    assert len(learners) == 1


@pytest.mark.parametrize("notebook", QUIZ_FILES)
def test_plain_text_answering_uses_the_shown_letters(notebook, capsys):
    question = first(notebook, "choice")
    label = quiz.label(question)
    text = quiz.plain_text(question, 1)
    assert f"answer({notebook!r}, {label!r}, '?')" in text and "'a')" not in text
    shown = quiz_answers.shown_choices(question)
    for letter, choice in zip(quiz_answers.LETTERS, shown):
        assert f"- ({letter}) {choice.text}" in text
    quiz.answer(notebook, label, letter_of(question, question.right_choice.id).upper())
    assert capsys.readouterr().out.startswith("Correct.")
    quiz.answer(notebook, question.id, letter_of(question, question.right_choice.id))  # an id still works
    assert capsys.readouterr().out.startswith("Correct.")
    for unreadable in ("banana", "?"):  # the placeholder of the shown call, run as it is
        quiz.answer(notebook, label, unreadable)
        assert capsys.readouterr().out == (f"Not read (nothing saved): answer {label!r} with one letter, from a to d, "
                                           "as shown above it.\n")
    assert len(progress_file.attempts(notebook)) == 2


# --- no id that gives the answer away -----------------------------------------------------------------------
ALL_QUESTIONS = [q for name in QUIZ_FILES for q in quiz_schema.all_questions(name)]


def without_own_text(question, shown: str) -> str:
    """What a display adds to the question's own texts (a choice's id may be a word of its texts: 'raises')."""
    for text in sorted([question.prompt, question.code.rstrip(), *(c.text for c in question.choices)], key=len,
                       reverse=True):
        shown = shown.replace(text, "") if text else shown
    return shown


def ids_in(question, shown: str) -> list:
    added = without_own_text(question, shown)
    return [i for i in (question.id, *(c.id for c in question.choices)) if i in added]


@pytest.mark.parametrize("notebook", QUIZ_FILES)
def test_every_question_is_answered_by_its_label_and_shows_no_id(notebook):
    """`answer('08_higher_order', 'plain-gradient-has-no-graph', ...)` told the learner the answer."""
    for question in quiz_schema.all_questions(notebook):
        label = quiz.label(question)
        assert quiz.find_question(notebook, label) == question == quiz.find_question(notebook, question.id)
        for review in ("", "09_later"):
            text = quiz.plain_text(question, quiz.number(question), review=review)
            assert f"answer({notebook!r}, {label!r}, " in text
            assert not ids_in(question, text), f"{notebook}/{question.id}: {ids_in(question, text)} in {text!r}"


def test_labels_number_the_questions_in_file_order():
    questions = quiz_schema.all_questions("08_higher_order")
    assert [quiz.label(q) for q in questions] == [f"q{n}" for n in range(1, len(questions) + 1)]
    assert quiz.find_question("08_higher_order", "Q2") == questions[1]
    for missing in ("q0", f"q{len(questions) + 1}", "7"):
        with pytest.raises(KeyError, match="no quiz question"):
            quiz.find_question("08_higher_order", missing)
    assert not any(q.id == quiz.label(q) for q in ALL_QUESTIONS)  # an id never shadows another question's label


@pytest.mark.parametrize("plain", [True, False])
def test_a_shown_question_is_headed_by_its_number_in_the_notebook(plain, monkeypatch):
    shown = []
    monkeypatch.setattr(quiz, "display", shown.append)
    monkeypatch.setenv(quiz.PLAIN_ENV_VAR, "1") if plain else monkeypatch.delenv(quiz.PLAIN_ENV_VAR, raising=False)
    quiz.show_quiz("03_vjp", "retrieve")
    retrieve = quiz.load_quiz("03_vjp")["retrieve"][1]
    numbers = [quiz.number(q) for q in retrieve]
    assert numbers[0] == 1 + len(quiz.load_quiz("03_vjp")["predict"][1])
    for n, item in zip(numbers, shown[1:]):
        if plain:
            assert item.data.startswith(f"**Q{n}.**") and f"'q{n}', " in item.data
        else:
            assert f"Q{n}, your answer:" in {getattr(w, "description", "") for w in widget_tree(item)}


@pytest.mark.parametrize("notebook", QUIZ_FILES)
def test_no_widget_shows_an_id(notebook, monkeypatch):
    """Not in a description, a tooltip, a placeholder, the options sent to the browser, nor the prompt."""
    from autograder.learner import quiz_widgets
    displayed = []
    monkeypatch.setattr(quiz_widgets, "display", displayed.append)
    for question in quiz_schema.all_questions(notebook):
        for review in ("", "09_later"):
            displayed.clear()
            box = quiz_widgets.question_widget(question, quiz.number(question), review=review)
            states = json.dumps([w.get_state() for w in widget_tree(box)], default=str, ensure_ascii=False)
            shown = states + "".join(item.data for item in displayed)
            assert question.prompt in shown
            assert not ids_in(question, shown), f"{notebook}/{question.id}: {ids_in(question, shown)}"


def test_the_id_check_can_fail():
    question = first("08_higher_order", "choice")
    assert ids_in(question, f"answer('08_higher_order', {question.id!r}, '?')") == [question.id]
    assert ids_in(question, f"- (a) {question.choices[0].text} [{question.choices[1].id}]") == [question.choices[1].id]


# --- produced answers in plain mode -----------------------------------------------------------------------------
def test_plain_numeric_and_short_answers(capsys, private_progress):
    q = next(q for q in quiz_schema.all_questions("01_chain_rule") if q.id == "sigmoid-backward-from-output")
    assert f"answer('01_chain_rule', 'q{quiz.number(q)}', '...')" in quiz.plain_text(q, 4)
    quiz.answer("01_chain_rule", quiz.label(q), "2*0.8*(1-0.8)")
    assert capsys.readouterr().out.startswith("Correct: 0.32.")
    s = next(q for q in quiz_schema.all_questions("01_chain_rule") if q.kind == "short")
    quiz.answer("01_chain_rule", s.id, "torch.Size([64, 128])")
    assert capsys.readouterr().out.startswith("Correct.")
    assert [a["correct"] for a in saved(private_progress)] == [True, True]
    quiz.rate("01_chain_rule", s.id, "x", 2)
    assert "nothing to rate" in capsys.readouterr().out


@pytest.mark.parametrize("notebook, label, typed, says", [
    ("03_vjp", "q4", "?", "type your answer first, in place of '?'"),
    ("03_vjp", "q4", "...", "type your answer first, in place of '...'"),
    ("03_vjp", "q2", "...", "type a number first, in place of '...'"),
    ("03_vjp", "q2", "3,000", "thousands separators"),
    ("03_vjp", "q3", "your answer", "write your own answer first"),
    ("03_vjp", "q3", "  ", "write your own answer first"),
    ("03_vjp", "q99", "1", "03_vjp has no quiz question 'q99'"),
    ("03_VJP", "q1", "a", "no quiz for a notebook named '03_VJP'"),
    ("07_by_hand", "matmul-weight-gradient", "X' dY", "could not read"),
])
def test_a_plain_answer_that_cannot_be_read_gets_a_message_not_a_traceback(notebook, label, typed, says, capsys,
                                                                             private_progress):
    """`answer('03_vjp', 'q4', '?')` printed a traceback; a placeholder left in the shown call is not an answer."""
    quiz.answer(notebook, label, typed)
    out = capsys.readouterr().out
    assert out.startswith("Not read (nothing saved): ") and says in out and "Traceback" not in out
    assert not private_progress.exists() or saved(private_progress) == []


def test_code_is_shown_above_the_prompt():
    q = next(q for q in quiz_schema.all_questions("02_micrograd") if q.code)
    text = quiz.plain_text(q, 1)
    assert text.index("```python\n") < text.index(q.prompt)


@pytest.mark.parametrize("notebook", QUIZ_FILES)
def test_recall_needs_an_answer_then_shows_the_model_answer_and_saves_the_rating(notebook, capsys):
    question = first(notebook, "recall")
    quiz.answer(notebook, quiz.label(question), "   ")
    assert capsys.readouterr().out.startswith("Not read (nothing saved): write your own answer first")
    quiz.answer(notebook, quiz.label(question), "my attempt")
    out = capsys.readouterr().out
    assert question.answer in out and "rate('good')" in out and "my attempt" not in out
    quiz.rate("good")  # the rating alone: it rates the last free-recall answer
    assert capsys.readouterr().out == "Saved: good.\n"
    (attempt,) = progress_file.attempts(notebook)
    assert (attempt["kind"], attempt["rating"], attempt["response"]) == ("recall", 2, "my attempt")
    with pytest.raises(ValueError, match="from 0 to 3"):
        quiz.rate_recall(question, "x", 7)
    quiz.rate(7)
    assert "from 0 to 3" in capsys.readouterr().out and len(progress_file.attempts(notebook)) == 1


def test_rate_takes_a_name_or_a_number_and_the_old_signature_still_works(private_progress, monkeypatch, capsys):
    monkeypatch.setattr(quiz, "_last_recall", {})
    quiz.rate("good")
    assert "answer a free-recall question" in capsys.readouterr().out
    first_recall, second_recall = [q for q in quiz_schema.all_questions("02_micrograd") if q.kind == "recall"][:2]
    quiz.answer("02_micrograd", quiz.label(first_recall), "first try", review="03_vjp")
    quiz.rate("Again")
    quiz.rate(3)  # a second rating in the same sitting corrects a mis-click
    quiz.answer("02_micrograd", quiz.label(second_recall), "second try")
    quiz.rate(" hard ")
    quiz.rate("02_micrograd", first_recall.id, "typed again", 1)  # the first form, by id
    quiz.rate("02_micrograd", quiz.label(first_recall), "and by label", "easy", "04_toggles")
    assert [(a["question"], a["response"], a["rating"], a.get("review")) for a in progress_file.attempts()] == [
        (first_recall.id, "first try", 0, "03_vjp"), (first_recall.id, "first try", 3, "03_vjp"),
        (second_recall.id, "second try", 1, None), (first_recall.id, "typed again", 1, None),
        (first_recall.id, "and by label", 3, "04_toggles")]
    capsys.readouterr()
    for bad in ("great", 4, True, "", 1.5):
        quiz.rate(bad)
        assert capsys.readouterr().out.startswith("Not read (nothing saved): rate yourself with again, hard, good, "
                                                  "easy, or from 0 to 3")
    quiz.rate("02_micrograd", "good")
    assert "rate('good') rates your last free-recall answer" in capsys.readouterr().out
    assert len(progress_file.attempts()) == 5


@pytest.mark.parametrize("notebook", QUIZ_FILES)
@pytest.mark.parametrize("plain", [True, False])
def test_show_quiz_displays_every_question(notebook, plain, monkeypatch):
    shown = []
    monkeypatch.setattr(quiz, "display", shown.append)
    if plain:
        monkeypatch.setenv(quiz.PLAIN_ENV_VAR, "1")
    else:
        monkeypatch.delenv(quiz.PLAIN_ENV_VAR, raising=False)
    for section in quiz.SECTIONS:
        shown.clear()
        quiz.show_quiz(notebook, section)
        assert len(shown) == 1 + len(quiz.load_quiz(notebook)[section][1])


# --- the widgets: keyboard and screen readers ------------------------------------------------------
INTERACTIVE = ("Button", "RadioButtons", "Textarea", "Text", "ToggleButtons")


def widget_tree(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from widget_tree(child)


def part(box, kind):
    return next(w for w in widget_tree(box) if type(w).__name__ == kind)


@pytest.mark.parametrize("notebook", QUIZ_FILES)
@pytest.mark.parametrize("review", ["", "09_later"])
def test_every_control_is_native_and_names_its_question(notebook, review):
    import ipywidgets

    from autograder.learner import quiz_widgets
    name = "R3" if review else "Q3"
    for kind in ("choice", "recall", "numeric", "short"):
        box = quiz_widgets.question_widget(first(notebook, kind), 3, review=review)
        parts = list(widget_tree(box))
        kinds = {type(w).__name__ for w in parts}
        # native controls (radio inputs, text inputs, <button>, <textarea>) only: Tab reaches them
        assert kinds <= set(INTERACTIVE) | {"VBox", "Output"}, kinds
        controls = [w for w in parts if type(w).__name__ in INTERACTIVE]
        assert controls and all(w.tabbable is not False for w in controls)
        for w in controls:
            said = f"{w.description} {w.tooltip or ''}"
            assert name in said, f"{type(w).__name__} does not say which question it belongs to: {said!r}"
            # the one control that starts disabled says what enables it
            assert not w.disabled or (kind == "recall" and "type your own answer first" in w.tooltip)
        for w in controls:
            if isinstance(w, ipywidgets.ToggleButtons):
                assert len(w.tooltips) == len(w.options) and all(w.tooltips)


def test_clicking_check_scores_and_saves_a_review_answer_by_choice_id(private_progress):
    from autograder.learner import quiz_widgets
    question = first("01_chain_rule", "choice")
    box = quiz_widgets.question_widget(question, 1, review="02_micrograd", note="you missed it last time")
    picker, button = part(box, "RadioButtons"), part(box, "Button")
    assert [label for label, _ in picker.options] == [
        f"({letter}) {c.text}" for letter, c in zip("abcd", quiz_answers.shown_choices(question))]
    button.click()  # nothing picked yet: nothing saved
    assert progress_file.attempts() == []
    picker.value = question.right_choice.id
    button.click()  # what a mouse click, Enter or Space on the focused button does
    (attempt,) = progress_file.attempts("01_chain_rule")
    assert (attempt["question"], attempt["response"], attempt["correct"], attempt["review"]) == (
        question.id, question.right_choice.id, True, "02_micrograd")


def test_typing_a_number_and_checking_it(private_progress, capsys):
    from autograder.learner import quiz_widgets
    question = next(q for q in quiz_schema.all_questions("05_loss_scaling") if q.id == "smallest-fp16")
    box = quiz_widgets.question_widget(question, 2)
    typed, button = part(box, "Text"), part(box, "Button")
    typed.value = "2^-24"
    button.click()  # outside a kernel, the feedback Output widget passes its text through to stdout
    assert progress_file.attempts() == [] and "powers with **" in capsys.readouterr().out
    typed.value = "2**-24"
    button.click()
    (attempt,) = progress_file.attempts()
    assert (attempt["response"], attempt["correct"]) == ("2**-24", True)


def test_reveal_stays_disabled_until_something_is_typed(private_progress):
    from autograder.learner import quiz_widgets
    question = first("02_micrograd", "recall")
    box = quiz_widgets.question_widget(question, 2)
    typed, reveal, ratings = part(box, "Textarea"), part(box, "Button"), part(box, "ToggleButtons")
    assert reveal.disabled and ratings.layout.display == "none"
    reveal.click()  # a disabled button in the browser does nothing; neither does the handler
    assert ratings.layout.display == "none"
    typed.value = "   "
    assert reveal.disabled
    typed.value = "the chain rule, backwards"
    assert not reveal.disabled
    reveal.click()
    assert ratings.layout.display is None
    ratings.value = 3
    (attempt,) = progress_file.attempts("02_micrograd")
    assert (attempt["response"], attempt["rating"], "review" in attempt) == ("the chain rule, backwards", 3, False)


def test_plain_text_review_questions_say_where_they_come_from():
    question = first("01_chain_rule", "choice")
    text = quiz.plain_text(question, 2, review="03_vjp", note="you missed it last time")
    assert text.startswith("**R2.** *from 01_chain_rule: you missed it last time*")
    assert f"answer('01_chain_rule', {quiz.label(question)!r}, '?', review='03_vjp')" in text
