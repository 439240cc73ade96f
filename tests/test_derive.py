"""The learner derives: no answer in the text before an exercise, hints that unfold, and a question
that asks for a key intermediate before the code where the derivation is the lesson.

What counts as the answer is read from the reference solution itself (its expressions, names
normalised) and from the forms the solution cell declares (`metadata.course.answer_forms`: the
formula as the notebook would write it). Expressions the exercise statement must give (a definition,
not a derivation) are declared with the reason in `metadata.course.given`. See tests/derivation.py.
"""
import re
import unicodedata

import course
import derivation
import nbformat
import pytest
import yaml

from autograder.learner import quiz_answers, quiz_schema

NAMES = course.assignment_names()
EXERCISES = [(nb, name) for nb in NAMES for name, _i, _c in derivation.exercises(course.read(course.solution_path(nb)))]
# Where a derivation is the lesson, a produced-answer question asks for a key intermediate first
# (for a group of adjacent exercises, one question before the group is enough).
DERIVED = {
    "01_chain_rule": ["linear_mse_grad", "two_layer_backward", "sigmoid_grad", "softmax_jacobian", "softmax_xent_grad"],
    "03_vjp": ["vjp_relu", "vjp_linear", "unbroadcast", "vjp_matmul", "vjp_softmax", "vjp_layernorm",
               "StableLogSumExp"],
    "07_by_hand": ["embedding_backward", "batchnorm_steps_backward", "batchnorm_backward", "manual_backward"],
    "08_higher_order": ["hvp", "SmoothAbs"],
    "09_kernels": ["silu_backward", "rmsnorm_backward"],
    "10_attention": ["attention_backward", "online_attention", "flash_backward"],
}


def _solution_cell(nb_name, name):
    source = course.read(course.solution_path(nb_name))
    return source.cells[derivation.index_in(source, name)]


def _answer(nb_name, name):
    """(key expressions not given by the statement, declared answer forms) of one exercise."""
    cell = _solution_cell(nb_name, name)
    meta = derivation.course_meta(cell)
    given = {derivation.normalised(expression) for expression in meta.get("given", {})}
    scaffolding = derivation.normalised(derivation.given_code(cell))  # the stub shows it: not the answer
    expressions = {e for e in derivation.key_expressions(derivation.solution_body(cell))
                   if e not in given and e not in scaffolding}
    return expressions, list(meta.get("answer_forms", []))


@pytest.mark.parametrize("nb_name, name", EXERCISES)
def test_no_answer_before_the_exercise(nb_name, name):
    release = course.read(course.release_path(nb_name))
    expressions, forms = _answer(nb_name, name)
    found = derivation.leaks(release, derivation.index_in(release, name), expressions, forms)
    assert not found, (f"{nb_name}: the text before `{name}` shows its answer outside a <details> hint: "
                       + "; ".join(f"cell {number}: {what}" for number, what in found))


@pytest.mark.parametrize("nb_name, name", EXERCISES)
def test_the_answer_forms_are_declared_and_stated_after_or_in_a_hint(nb_name, name):
    """Each exercise names how its answer is written, and that form is really in the notebook (in the
    last hint or the recap): a form that appears nowhere would make the test above unable to fail."""
    _expressions, forms = _answer(nb_name, name)
    assert forms, f"{nb_name}: `{name}`'s solution cell declares no metadata.course.answer_forms"
    release = course.read(course.release_path(nb_name))
    index = derivation.index_in(release, name)
    hints = " ".join(derivation.squeezed(block) for c in release.cells[:index] if c.cell_type == "markdown"
                     for block in derivation.DETAILS.findall(c.source))
    after = " ".join(derivation.squeezed(c.source) for c in release.cells[index + 1:])
    for form in forms:
        assert derivation.squeezed(form) in hints + after, \
            f"{nb_name}: `{name}`'s answer form {form!r} is in no hint before it and nowhere after it"


@pytest.mark.parametrize("nb_name, name", EXERCISES)
def test_given_expressions_are_the_references_own(nb_name, name):
    """`given` exempts only expressions the reference really computes, each with its reason."""
    cell = _solution_cell(nb_name, name)
    given = derivation.course_meta(cell).get("given", {})
    own = derivation.key_expressions(derivation.solution_body(cell))
    for expression, reason in given.items():
        assert derivation.normalised(expression) in own, \
            f"{nb_name}/{name}: given {expression!r} is not the reference's"
        assert len(reason.split()) >= 3, f"{nb_name}/{name}: say why {expression!r} is given"


@pytest.mark.parametrize("nb_name, name", EXERCISES)
def test_every_exercise_has_hints_that_unfold(nb_name, name):
    release = course.read(course.release_path(nb_name))
    hints = derivation.hints_for(release, derivation.index_in(release, name), name)
    assert hints, (f"{nb_name}: no <details><summary>Hint …</summary> block before `{name}` (after the exercise "
                   f"before it; in a group of exercises the summary names `{name}`)")


@pytest.mark.parametrize("nb_name, name", [(nb, name) for nb, names in DERIVED.items() for name in names])
def test_a_derivation_starts_with_a_produced_answer(nb_name, name):
    release = course.read(course.release_path(nb_name))
    asked = derivation.questions_before(release, derivation.index_in(release, name))
    assert asked, f"{nb_name}: no show_question(...) before `{name}` asks for a key intermediate of its derivation"
    for notebook, question_id in asked:
        question = quiz_schema.find_question(notebook, question_id)
        assert notebook == nb_name and question.section == "derive" and question.produced, \
            f"{nb_name}: {question_id} should be a produced-answer question of this notebook's derive section"


# --- the scan itself can fail --------------------------------------------------------------------------
def _notebook(*cells):
    nb = nbformat.v4.new_notebook()
    for kind, source in cells:
        cell = nbformat.v4.new_markdown_cell(source) if kind == "md" else nbformat.v4.new_code_cell(source)
        if kind == "solution":
            cell.metadata["nbgrader"] = {"grade_id": "per_sample_grads_solution", "solution": True}
        nb.cells.append(cell)
    return nb


REFERENCE = """
    def loss_of_one(p, x_i, y_i):
        out = torch.func.functional_call(model, p, (x_i.unsqueeze(0),))
        return loss_fn(out, y_i.unsqueeze(0))
    return torch.func.vmap(torch.func.grad(loss_of_one), in_dims=(None, 0, 0))(params, x, y)
"""
RENAMED = "```python\nper_example = vmap(grad(one), in_dims=(None, 0, 0))(weights, xs, ys)\n```"


@pytest.mark.parametrize("shown, found", [
    (RENAMED, True),                                                        # 08's leak, renamed
    (f"<details><summary>Hint 3</summary>\n\n{RENAMED}\n</details>", False),  # the same in the last hint
    ("Map the one-example gradient over the batch with `vmap`.", False),     # the direction, not the code
])
def test_the_scan_finds_a_renamed_copy_outside_hints(shown, found):
    nb = _notebook(("md", shown), ("solution", "def per_sample_grads(model, loss_fn, x, y):\n    pass"))
    leaks = derivation.leaks(nb, 1, derivation.key_expressions(REFERENCE), [])
    assert bool(leaks) == found


def test_the_scan_finds_a_declared_formula_and_hints_are_counted_per_exercise():
    formula = r"\frac{\gamma r}{N}\Bigl(N\, dout - d\beta - \hat x\, d\gamma\Bigr)"
    nb = _notebook(("md", f"$$dx = {formula}$$"), ("solution", "pass"))
    assert derivation.leaks(nb, 1, set(), [formula.replace(" ", "")])
    assert not derivation.hints_for(nb, 1, "per_sample_grads")
    nb.cells[0].source = f"<details><summary>Hint 1</summary>\n\n$${formula}$$\n</details>"
    assert not derivation.leaks(nb, 1, set(), [formula])
    assert derivation.hints_for(nb, 1, "per_sample_grads") == ["Hint 1"]


def test_every_derive_question_is_shown_somewhere():
    """A derive question no notebook shows is never asked."""
    shown = {found for name in NAMES for c in course.read(course.release_path(name)).cells
             if c.cell_type == "code" for found in derivation.SHOW_QUESTION.findall(c.source)}
    for nb_name in NAMES:
        raw = yaml.safe_load((quiz_schema.quiz_folder() / f"{nb_name}.yaml").read_text())
        for question in raw["sections"].get("derive", {}).get("questions", []):
            assert (nb_name, question["id"]) in shown, f"{nb_name}: derive question {question['id']} is never shown"


# --- a derive question's feedback keeps the answer ---------------------------------------------------------------
# The forms an answer is written in, and the spellings of them that a mechanical rewrite gives: LaTeX commands
# as the symbols they print, unicode as ASCII (NFKC: ᵀ is T, x² is x2), every transpose spelling as T; indices
# (x_i, x₀, x_{0}), products, brackets, spacing and module prefixes dropped:
# `2\,(Wx - y)\,x^\top`, `2 (Wx − y) xᵀ` and `2*(W@x - y)*x.T` are one spelling, `e^{x_i - LSE}` and
# `e^(x₀ − LSE)` another. A form this short (`g @ B.mT`, `gbt`) is looked for as whole words only.
LATEX = {r"\gamma": "γ", r"\beta": "β", r"\mu": "μ", r"\sigma": "σ", r"\varepsilon": "ε", r"\epsilon": "ε",
         r"\delta": "δ", r"\sum": "Σ", r"\hat x": "x̂", r"\hat g": "ĝ", r"\top": "T", r"\odot": "*", r"\cdot": "*",
         r"\times": "*", r"\operatorname": "", r"\Bigl": "", r"\Bigr": "", r"\bigl": "", r"\bigr": "", r"\left": "",
         r"\right": "", r"\dfrac": "frac", r"\,": ""}
INDEX = re.compile(r"_\{?\w\}?|[₀-₉ᵢⱼₖ]")
TRANSPOSE = re.compile(r"\.mT\b|\.T\b|\.t\(\)|\^\{?T\}?")
DROPPED = re.compile(r"torch\.|ctx\.|math\.|\bF\.|[\s*@{}()\\_^·⊙×⋅`]")
SHORT = 6  # characters, spelled: a form shorter than this is looked for as whole words
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e-?\d+)?(?:/\d+)?(?![\w.])")


def spelled(text: str) -> str:
    """`text` in the one spelling the forms are compared in (see above)."""
    text = INDEX.sub("", text)
    for command, symbol in LATEX.items():
        text = text.replace(command, symbol)
    text = TRANSPOSE.sub("T", unicodedata.normalize("NFKC", text).replace("−", "-"))
    return DROPPED.sub("", text).lower()


def word_spans(text: str) -> set:
    """Every run of up to 8 consecutive words of `text`, spelled and joined (punctuation at a word's ends dropped)."""
    words = [spelled(w).strip(".,;:!?") for w in text.split()]
    return {"".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, min(len(words), i + 8) + 1)}


def shows_form(form: str, text: str) -> bool:
    return form in (spelled(text) if len(form) >= SHORT else word_spans(text))


def answer_forms_of(question) -> list:
    """The written forms of the answer of every exercise the question is asked before, and the right-hand side of
    an equation among them, in the spelling above (the shortest dropped: `x` is not an answer)."""
    forms = []
    release = course.read(course.release_path(question.notebook))
    for name, _i, _c in derivation.exercises(course.read(course.solution_path(question.notebook))):
        index = derivation.index_in(release, name)
        if (question.notebook, question.id) in derivation.questions_before(release, index):
            for form in _answer(question.notebook, name)[1]:
                forms += [form, form.split("=")[-1]]
    return sorted({spelled(f) for f in forms if len(spelled(f)) >= 3})


def numbers_in(text: str) -> list:
    """Every number written in `text` (an integer, a decimal, 1e-3, a fraction 2/9), as a float; an index (x₁,
    x̂₁, x_1) is not a number."""
    values = []
    for token in NUMBER.findall(unicodedata.normalize("NFKC", INDEX.sub("", text)).replace("−", "-")):
        top, _, bottom = token.partition("/")
        values.append(float(top) / float(bottom) if bottom and float(bottom) else float(top))
    return values


def gives_away(question, feedback: str, forms) -> list:
    """What of the answer a feedback text shows: a form of it, or (numeric) the right value."""
    found = [f"the answer form {form!r}" for form in forms if shows_form(form, feedback)]
    if question.kind == "numeric":
        found += [f"the right value {value:g}" for value in numbers_in(feedback)
                  if quiz_answers.within(question, value)]
    else:
        found += [f"the model answer {a!r}" for a in (question.value, *question.accept) if a and spelled(a) in
                  spelled(feedback)]
    return found


def wrong_answers(question) -> list:
    """Answers a derivation that goes wrong gives: each miss the question names, 0, and a value far off."""
    if question.kind == "short":
        return [m.answer for m in question.misses] + ["0", "x"]
    bound = max(b if kind == "abs" else b * abs(question.answer) for kind, b in question.tolerance)
    candidates = [m.answer for m in question.misses] + [0.0, question.answer + 10 * bound + 1, -question.answer - 1]
    return [repr(float(v)) for v in candidates if not quiz_answers.within(question, float(v))]


DERIVE_QUESTIONS = [q for nb in NAMES for q in quiz_schema.all_questions(nb) if q.section == "derive"
                    and q.kind in ("numeric", "short")]


@pytest.fixture
def private_progress(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_PROGRESS", str(tmp_path / "progress.json"))


@pytest.mark.parametrize("question", DERIVE_QUESTIONS, ids=[f"{q.notebook}/{q.id}" for q in DERIVE_QUESTIONS])
def test_a_derive_questions_feedback_keeps_the_answer(question, private_progress):
    """Answering 0 before any hint printed the formula (03's softmax VJP, layer norm, log-sum-exp): a wrong answer
    is told what it leaves out, never the answer in any spelling; the right one's feedback states no formula."""
    forms = answer_forms_of(question)
    assert forms, f"{question.notebook}/{question.id}: asked before no exercise that declares answer_forms"
    for typed in wrong_answers(question):
        feedback = quiz_answers.check_typed(question, typed)
        assert not feedback.correct, f"{question.notebook}/{question.id}: {typed} is taken as right"
        found = gives_away(question, feedback.text, forms)
        assert not found, f"{question.notebook}/{question.id}: answering {typed} shows {found}: {feedback.text!r}"
    right = quiz_answers.check_typed(question, quiz_answers.model_answer(question) if question.kind == "short"
                                     else repr(question.answer))
    assert right.correct
    found = [f for f in forms if shows_form(f, right.text)]
    assert not found, f"{question.notebook}/{question.id}: the right answer's feedback states the formula {found}"


@pytest.mark.parametrize("question", DERIVE_QUESTIONS, ids=[f"{q.notebook}/{q.id}" for q in DERIVE_QUESTIONS])
def test_a_derive_question_names_what_each_expected_wrong_answer_leaves_out(question):
    """Each path of the derivation changes the answer (a miss the question's tolerance would take as right could
    never be named), two misses that say different things are told apart, and any other wrong answer is told
    what to check."""
    assert question.retry.strip(), f"{question.notebook}/{question.id}: no retry (what to check after a wrong answer)"
    assert question.misses, f"{question.notebook}/{question.id}: no misses (the answers that leave out a path)"
    for miss in question.misses:
        if question.kind == "numeric":
            assert not quiz_answers.within(question, float(miss.answer)), \
                f"{question.notebook}/{question.id}: the miss {miss.answer} is within the tolerance of the answer"
            named = quiz_answers.check_numeric(question, repr(float(miss.answer))).text
        else:
            named = quiz_answers.check_short(question, miss.answer).text
        assert miss.says in named, f"{question.notebook}/{question.id}: {miss.answer} is not told {miss.says!r}"


def test_the_derive_feedback_check_finds_the_old_feedback(private_progress):
    """03's softmax question as it was: its feedback for 0 printed `Jᵀg = diag(y) g − y (yᵀg)`, caught however it
    is spelled; and a numeric feedback that names the right value is caught."""
    softmax = quiz_schema.find_question("03_vjp", "softmax-vjp-entry")
    forms = answer_forms_of(softmax)
    old = "Not quite: the answer is -0.15. Jᵀg = diag(y) g - y (yᵀg) = y ⊙ (g - (g · y)). Here g · y = 0.3."
    assert any("answer form" in f for f in gives_away(softmax, old, forms))
    assert gives_away(softmax, r"y \odot \bigl(g - (g \cdot y)\bigr)", forms)
    assert gives_away(softmax, "you gave 0; it is 0.35", forms) == ["the right value 0.35"]
    assert gives_away(softmax, "you gave 0. The path through r is missing.", forms) == []
    lse = quiz_schema.find_question("03_vjp", "lse-gradient-entry")
    assert gives_away(lse, "the same as e^(x_0 - LSE(x)) with LSE(x) = 1000 + log(1 + e^(-1))", answer_forms_of(lse))
    matmul = quiz_schema.find_question("03_vjp", "matmul-broadcast-entry")
    assert gives_away(matmul, "for one pair of matrices it is g Bᵀ, summed", answer_forms_of(matmul))
    assert not gives_away(matmul, "that gives a sum over the batch", answer_forms_of(matmul))
    assert numbers_in("x₀ = 2/9, −0.5 and 1e-3 (not 2x, x̂₁ nor x_1)") == [2 / 9, -0.5, 1e-3]


# --- no worked example of the graded function itself ---------------------------------------------------------------
@pytest.mark.parametrize("nb_name, name", EXERCISES)
def test_no_worked_example_before_an_exercise_is_the_graded_function_itself(nb_name, name):
    """The rule: the values the reference solution computes on its way to the answer (the targets of its
    assignments, less gradients and sizes: `mean`, `var`, `r`, `xhat` for BatchNorm's backward) are its
    forward's intermediates. The text and code before the exercise, outside hints, must not walk backwards
    through all of them, or all but one when there are three or more: a backward step is a LaTeX statement whose
    left side is a gradient (`dr = ...`, `dc \\mathrel{+}= ...`, `\\partial L/\\partial x = ...`) or a code
    assignment to one (`dmean = ...`, `dL_du = ...`), and it walks through every quantity whose gradient it names,
    on either side. Spellings are matched through docs/notation.md ($\\mu$, `mu` and `mean` are one quantity).
    Such a walk is the graded function's backward, op by op: an answer by transcription (07's section 4.1 before
    `batchnorm_backward`). A reference with fewer than two intermediates is a line or two, which
    test_no_answer_before_the_exercise already looks for (its expressions and its declared forms)."""
    cell = _solution_cell(nb_name, name)
    intermediates = derivation.reference_intermediates(derivation.solution_body(cell))
    release = course.read(course.release_path(nb_name))
    walked = derivation.worked_walk_of(release, derivation.index_in(release, name), intermediates,
                                       derivation.notation_aliases())
    assert not derivation.walks_the_reference(intermediates, walked), (
        f"{nb_name}: before `{name}`, outside hints, the text walks backwards through {sorted(walked)} of its "
        f"reference's intermediates {sorted(intermediates)}: that is the graded function's own backward; work "
        "another function there, and move this walk after the exercise (its recap)")


BATCHNORM = """
    mean = x.mean(0)
    var = ((x - mean) ** 2).mean(0)
    r = (var + eps) ** -0.5
    xhat = (x - mean) * r
    return dout.sum(0)
"""
OWN_TABLE = r"""| forward | backward |
|---|---|
| $\hat x = c\,r$ | $dr = \sum_n d\hat x_n\, c_n$; $\;dc \mathrel{+}= d\hat x\, r$ |
| $r = (\sigma^2 + \epsilon)^{-1/2}$ | $d\sigma^2 = -\tfrac12 r^3\, dr$ |
| $\mu = \frac1N \sum_n h_n$ | $dh \mathrel{+}= d\mu / N$ |"""
OTHER_TABLE = r"""| forward | backward |
|---|---|
| $y = s\,q$ | $dq = \sum_n dy_n\, s_n$ |
| $q = (m + \varepsilon)^{-1/2}$ | $dm = -\tfrac12 q^3\, dq$ |"""
OWN_CODE = "dxhat = gamma * dout\ndr = (dxhat * c).sum(0)\ndvar = -0.5 * r ** 3 * dr\ndmean = -(dxhat * r).sum(0)"


@pytest.mark.parametrize("shown, own", [
    (OWN_TABLE, True),                                                        # 07's section 4.1, as it was
    (f"```python\n{OWN_CODE}\n```", True),                                   # the same walk in code
    (OTHER_TABLE, False),                                                     # another normalisation's walk
    (f"<details><summary>Hint 2</summary>\n\n{OWN_TABLE}\n</details>", False),  # the walk in a hint
    (r"$$\mu = \frac1N \sum_n h_n, \qquad r = (\sigma^2 + \varepsilon)^{-1/2}$$", False),  # the forward alone
])
def test_the_worked_example_scan_finds_the_graded_functions_own_walk(shown, own):
    nb = _notebook(("md", shown), ("solution", "pass"))
    intermediates = derivation.reference_intermediates(BATCHNORM)
    assert intermediates == {"mean", "var", "r", "xhat"}
    walked = derivation.worked_walk_of(nb, 1, intermediates, derivation.notation_aliases())
    assert derivation.walks_the_reference(intermediates, walked) == own, walked
