"""Every solution notebook runs top to bottom and passes every grade cell."""
import course
import pytest

NAMES = course.assignment_names()


@pytest.fixture(scope="module", params=NAMES)
def executed(request, tmp_path_factory):
    name = request.param
    return name, course.execute(course.solution_path(name), tmp_path_factory.mktemp(name))


def test_every_grade_cell_passes(executed):
    name, nb = executed
    failures = {course.nbgrader_meta(c)["grade_id"]: course.failure_text(c) for c in course.grade_cells(nb)}
    assert failures, f"{name} has no grade cells"
    assert {k: v for k, v in failures.items() if v} == {}


def test_no_cell_fails_or_writes_to_stderr(executed):
    name, nb = executed
    broken = [(i, course.failure_text(c)) for i, c in enumerate(nb.cells)
              if c.cell_type == "code" and course.failure_text(c)]
    assert broken == [], f"{name}: cells that error or write to stderr"


def test_grade_cells_end_without_a_value(executed):
    """nbgrader reads a grade cell's numeric last value as partial credit: there must be none."""
    name, nb = executed
    valued = [course.nbgrader_meta(c)["grade_id"] for c in course.grade_cells(nb)
              if any(o.output_type == "execute_result" for o in c.outputs)]
    assert valued == []
