"""Every grader rejects the bugs learners write and accepts correct answers written differently."""
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


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [c for c in CASES if c[2] == "right"], ids=case_id)
def test_alternative_correct_implementation_is_accepted(case, mode):
    notebook, name, _, label, fn = case
    results = mutation.run_grade_cells(notebook, name, fn, trusted_mode=mode == "trusted")
    assert results and all(err is None for err in results.values()), (label, results)
