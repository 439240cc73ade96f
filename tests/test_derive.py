"""The learner derives: no answer in the text before an exercise, hints that unfold, and a question
that asks for a key intermediate before the code where the derivation is the lesson.

What counts as the answer is read from the reference solution itself (its expressions, names
normalised) and from the forms the solution cell declares (`metadata.course.answer_forms`: the
formula as the notebook would write it). Expressions the exercise statement must give (a definition,
not a derivation) are declared with the reason in `metadata.course.given`. See tests/derivation.py.
"""
import course
import derivation
import nbformat
import pytest
import yaml

from autograder.learner import quiz_schema

NAMES = course.assignment_names()
EXERCISES = [(nb, name) for nb in NAMES for name, _i, _c in derivation.exercises(course.read(course.solution_path(nb)))]
# Where a derivation is the lesson, a produced-answer question asks for a key intermediate first
# (for a group of adjacent exercises, one question before the group is enough).
DERIVED = {
    "01_chain_rule": ["linear_mse_grad", "two_layer_backward", "sigmoid_grad", "softmax_jacobian", "softmax_xent_grad"],
    "03_vjp": ["vjp_relu", "vjp_linear", "unbroadcast", "vjp_matmul", "vjp_softmax", "vjp_layernorm",
               "StableLogSumExp"],
    "07_by_hand": ["embedding_backward", "batchnorm_backward", "manual_backward"],
    "08_higher_order": ["hvp", "SmoothAbs"],
    "09_kernels": ["silu_backward", "rmsnorm_backward"],
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
