"""Every grader rejects the bugs learners write and accepts correct answers written differently."""
import ast
import inspect
import textwrap

import course
import mutants
import mutation
import pytest

from autograder.checks import GradingError

CATALOGUE = mutants.load_all()
CASES = [(nb, name, kind, label, fn)
         for nb, names in CATALOGUE.items() for name, kinds in names.items()
         for kind, entries in kinds.items() for label, fn in entries]


def case_id(case):
    return f"{case[0]}:{case[1]}:{case[2]}:{case[3]}"


@pytest.mark.parametrize("notebook", course.assignment_names())
def test_catalogue_covers_every_graded_name(notebook):
    names = {course.graded_name(g) for g in mutation.grade_cell_sources(notebook)}
    entries = CATALOGUE.get(notebook, {})
    thin = {n: (len(entries.get(n, {}).get("wrong", [])), len(entries.get(n, {}).get("right", [])))
            for n in names}
    assert {n: c for n, c in thin.items() if c[0] < 3 or c[1] < 1} == {}, \
        "each graded name needs >= 3 wrong and >= 1 right implementations (wrong, right)"
    assert set(entries) <= names, "catalogue entries for names the notebook does not grade"


def key_uses(fn) -> set:
    """(notebook, definition) for each `answer_key("<notebook>").<definition>` in `fn`'s source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return {(node.value.args[0].value, node.attr) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name) and node.value.func.id == "answer_key"
            and len(node.value.args) == 1 and isinstance(node.value.args[0], ast.Constant)}


def answers_no_entry_imports(notebook, key_path, catalogue) -> list:
    """The `@answer` definitions of `key_path` that no wrong entry of `notebook` in `catalogue` calls."""
    used = {use for kinds in catalogue.get(notebook, {}).values() for _, fn in kinds["wrong"] for use in key_uses(fn)}
    return [node.name for node in course.answers(key_path) if (notebook, node.name) not in used]


@pytest.mark.parametrize("notebook", [n for n in course.assignment_names() if course.answer_key_path(n).is_file()])
def test_every_answer_key_definition_has_an_entry_that_imports_it(notebook):
    """An answer that calls the course's answer key must score 0 in both modes (issue 14): one wrong
    entry per `@answer` definition, run by test_wrong_implementation_is_rejected_with_a_message in both,
    proves it for every key, a new one included."""
    missing = answers_no_entry_imports(notebook, course.answer_key_path(notebook), CATALOGUE)
    assert missing == [], (f"no wrong entry of tests/mutants for {notebook} imports these answers of its key: "
                           f"{missing}; add one per name that calls answer_key({notebook!r}).<name>, labelled "
                           "\"imports the course's answer key instead of writing it\"")


def _imports_double(x):
    from autograder.grader.keys import answer_key
    return answer_key("99_demo").double(x)


def _imports_another_notebooks_triple(x):
    from autograder.grader.keys import answer_key
    return answer_key("98_other").triple(x)


def _imports_triple(x):
    from autograder.grader.keys import answer_key
    return answer_key("99_demo").triple(x)


def test_an_answer_no_entry_imports_is_named(tmp_path):
    key = tmp_path / "answer_key.py"
    key.write_text("from autograder.grader.keys import answer\n\n\n@answer\ndef double(x):\n    return 2 * x\n\n\n"
                   "@answer\ndef triple(x):\n    return 3 * x\n\n\n@answer\nclass Engine:\n    pass\n\n\n"
                   "def helper(x):\n    return x\n")
    catalogue = {"99_demo": {"double": {"wrong": [("imports the key", _imports_double),
                                                  ("imports another key", _imports_another_notebooks_triple)],
                                        "right": [("imports the key, but listed as right", _imports_triple)]}}}
    assert answers_no_entry_imports("99_demo", key, catalogue) == ["triple", "Engine"]
    assert answers_no_entry_imports("97_none", key, catalogue) == ["double", "triple", "Engine"]


# "plain": the grade cells run beside the answer, as in the student's kernel and nbgrader;
# "trusted": they reach it only through data-only calls, as `backprop-course grade` runs them.
MODES = ["plain", "trusted"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("notebook", course.assignment_names())
def test_reference_solutions_pass(notebook, mode):
    namespace = mutation.solution_namespace(notebook)
    for name in {course.graded_name(g) for g in mutation.grade_cell_sources(notebook)}:
        results = mutation.run_grade_cells(notebook, name, namespace, trusted_mode=mode == "trusted")
        assert results and all(err is None for err in results.values()), (name, results)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [c for c in CASES if c[2] == "wrong"], ids=case_id)
def test_wrong_implementation_is_rejected_with_a_message(case, mode):
    notebook, name, _, label, fn = case
    results = mutation.run_grade_cells(notebook, name, fn, trusted_mode=mode == "trusted")
    failures = [err for err in results.values() if err is not None]
    assert failures, f"the grade cells of {name} accept a wrong answer: {label}"
    assert any(isinstance(err, GradingError) for err in failures), \
        f"{label}: failed without a grading message: {failures}"
    if fn.says:
        assert any(fn.says in str(err) for err in failures), f"{label}: no message says {fn.says!r}: {failures}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [c for c in CASES if c[2] == "right"], ids=case_id)
def test_alternative_correct_implementation_is_accepted(case, mode):
    notebook, name, _, label, fn = case
    results = mutation.run_grade_cells(notebook, name, fn, trusted_mode=mode == "trusted")
    assert results and all(err is None for err in results.values()), (label, results)
