"""A sample of the catalogue graded as a class is: each entry pasted into its cell of the released notebook,
the submission rebuilt from the source (hidden tests included) and run in a sandboxed kernel in trusted mode.

tests/test_mutants.py grades every entry in-process (`mutation.Loopback`), where the answers share the
grader's modules; here they live in a kernel of their own and reach the grader only as data, so what is
pickled by reference (a class, a function, a module's object) crosses as it does in `backprop-course grade`.
Each sampled submission must score what the in-process verdicts of the same code say: a wrong entry loses the
points of exactly the grade cells that reject it there, with the same kind of error (and its `says`), and a
right one keeps full marks.
"""
import inspect

import course
import mutants
import mutation
import pytest
from test_classgrade import CELL_SECONDS, SANDBOXED, trimmed

from autograder.grader import grading_task, judge, recording, sanitize, trusted
from autograder.grader.sandbox import KernelPool, Limits, run_notebook

CATALOGUE = mutants.load_all()


def sample(catalogue, names_of) -> list:
    """(notebook, graded name, kind, label, pasted source): the first wrong entry of each graded name that
    pastes, and the first right entry of each notebook that pastes (graded names in sorted order)."""
    found = []
    for notebook, names in sorted(catalogue.items()):
        right = []
        for name, kinds in sorted(names.items()):
            for kind in ("wrong", "right"):
                pasted = ((label, mutation.pasted_source(fn, name, names_of(notebook))) for label, fn in kinds[kind])
                first = next(((label, source) for label, source in pasted if source is not None), None)
                if first and kind == "wrong":
                    found.append((notebook, name, kind, *first))
                elif first and not right:
                    right.append((notebook, name, kind, *first))
        found += right
    return found


SAMPLE = sample(CATALOGUE, mutation.notebook_names)
SAYS = {(nb, name, label): fn.says for nb, names in CATALOGUE.items() for name, kinds in names.items()
        for label, fn in kinds["wrong"]}


def source_notebook(name) -> sanitize.SourceNotebook:
    """What the gradebook holds about notebook `name` (sanitize.load_source), read from its solution notebook."""
    nb = course.read(course.solution_path(name))
    cells = {}
    for cell in nb.cells:
        meta = course.nbgrader_meta(cell)
        if "grade_id" in meta:
            scored = meta.get("grade") or meta.get("task")
            cells[meta["grade_id"]] = sanitize.SourceCell(
                meta["grade_id"], cell.cell_type, cell.source, bool(meta.get("locked")), meta.get("checksum"),
                grade=bool(meta.get("grade")), solution=bool(meta.get("solution")), task=bool(meta.get("task")),
                points=float(meta["points"]) if scored else None)
    return sanitize.SourceNotebook(name, name, cells, sanitize.DEFAULT_KERNELSPEC)


def in_process(notebook, name, source) -> dict:
    """{grade_id: the error's type name, or None} of every grade cell of `notebook` on `source`, pasted after
    the reference solutions, through the in-process stand-in for trusted grading (an answer other answers
    build on, such as 02's Value under its MLP, costs their cells too)."""
    namespace = mutation.solution_namespace(notebook)
    exec(mutation.compiled(source, f"<pasted {name} of {notebook}>"), namespace)
    results = {}
    for graded in {course.graded_name(grade_id) for grade_id in mutation.grade_cell_sources(notebook)}:
        results.update(mutation.run_grade_cells(notebook, graded, namespace, trusted_mode=True))
    return {grade_id: err and type(err).__name__ for grade_id, err in results.items()}


def graded_in_a_kernel(notebook, name, source, pool) -> dict:
    """({grade_id: (score, message)}, {grade_id: every error it shows}) of the released notebook with the
    reference answers and `source` in `name`'s cell, graded as `backprop-course grade` grades it (restored,
    sandboxed, trusted, the by-hand exercises first, judged)."""
    reference = source_notebook(notebook)
    nb, notes = sanitize.restore(trimmed(notebook, {name: source}), reference)
    assert notes == []
    names = trusted.student_names(c.source for c in course.solution_cells(nb))
    problems = run_notebook(nb, Limits(cell_seconds=CELL_SECONDS), trusted_names=names, pool=pool,
                            first=grading_task.by_hand_first(nb, course.ROOT, notebook))
    assert problems == []
    judge.apply(nb, judge.cell_verdicts(nb, judge.baseline(course.ROOT, notebook)))
    errors = {course.nbgrader_meta(c)["grade_id"]: [f"{o.ename}: {o.evalue}" for o in c.outputs
                                                     if o.output_type == "error"] for c in course.grade_cells(nb)}
    return recording.scores_of(nb, reference), errors


@pytest.fixture(scope="module")
def pool():
    """Kernels started ahead (torch imported), one submission after another."""
    kernels = KernelPool(preload=("torch",))
    yield kernels
    kernels.close()


def test_the_sample_holds_a_wrong_entry_of_every_graded_name_but_those_of_several_names_and_a_right_one_each():
    """Only an entry that is a dict of several names (02's MLP on AltValue) cannot be pasted as one answer."""
    wrong = {(nb, name) for nb, name, kind, *_ in SAMPLE if kind == "wrong"}
    unpasted = {(nb, name) for nb, names in CATALOGUE.items() for name, kinds in names.items()
                if not any(inspect.isfunction(fn) or inspect.isclass(fn) for _, fn in kinds["wrong"])}
    assert wrong == {(nb, name) for nb, names in CATALOGUE.items() for name in names} - unpasted
    assert sorted(nb for nb, _, kind, *_ in SAMPLE if kind == "right") == sorted(CATALOGUE)


@SANDBOXED
@pytest.mark.parametrize("case", SAMPLE, ids=lambda c: f"{c[0]}:{c[1]}:{c[2]}:{c[3]}")
def test_a_sampled_entry_scores_in_a_sandboxed_kernel_what_it_scores_in_process(case, pool):
    notebook, name, kind, label, source = case
    scores, errors = graded_in_a_kernel(notebook, name, source, pool)
    points = {grade_id: cell.points for grade_id, cell in source_notebook(notebook).cells.items() if cell.grade}
    lost = {grade_id: message for grade_id, (score, message) in scores.items() if score != points[grade_id]}
    expected = {grade_id: error for grade_id, error in in_process(notebook, name, source).items() if error}
    if kind == "right":
        assert lost == {} and expected == {}, (label, lost, expected)
        return
    assert expected, f"in-process, the grade cells of {name} accept a wrong answer: {label}"
    assert set(lost) == set(expected), (label, lost, expected)
    # the message kept is the first error: the judge's verdict where it refused the answer, which still ran
    assert all(any(e.startswith(f"{error}: ") for e in errors[grade_id]) for grade_id, error in expected.items()), \
        (label, errors)
    assert any(error == "GradingError" for error in expected.values()), (label, expected)
    says = SAYS[(notebook, name, label)]
    assert not says or any(says in e for grade_id in lost for e in errors[grade_id]), (label, says, errors)
