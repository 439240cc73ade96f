"""The student release: generated from solutions/ (the review notebook from solutions/review.ipynb), up to date,
free of answers, no free points."""
import shutil

import course
import nbformat
import pytest
from test_colab import local_file_uses, local_links

from autograder.grader import cli, colab

NAMES = course.assignment_names()
REVIEW = "review"


def test_release_is_up_to_date():
    stale = cli.release(course.ROOT, [], check=True)
    assert stale == 0, "notebooks/ is stale: run `make release`"


def test_every_assignment_is_released_and_the_review_notebook_and_nothing_else():
    assert cli.EXTRAS == (REVIEW,) and REVIEW not in NAMES
    assert sorted(p.stem for p in course.NOTEBOOKS.glob("*.ipynb")) == sorted(NAMES + [REVIEW])


# --- the review notebook: released beside the assignments, never graded --------------------------------
def test_the_review_notebook_is_no_assignment():
    """Its source is not in solutions/, so nbgrader never sees it, and no cell of it is graded."""
    assert not (course.SOLUTIONS / REVIEW).exists()
    for path in (cli.extra_source(course.ROOT, REVIEW), course.release_path(REVIEW)):
        cells = course.read(path).cells
        assert not any("nbgrader" in c.metadata for c in cells)
        assert not any(c.cell_type == "code" and (c.outputs or c.execution_count) for c in cells), path


def test_the_review_notebook_starts_with_the_colab_cell_and_needs_no_local_file():
    cells = course.read(course.release_path(REVIEW)).cells
    assert cells[0].get("id") == colab.CELL_ID and cells[0].source == colab.bootstrap_source()
    uses = [local_file_uses(c.source) if c.cell_type == "code" else local_links(c.source) for c in cells]
    assert [use for found in uses for use in found] == []


def test_release_writes_the_review_notebook_alone_and_finds_it_stale(tmp_path, capsys):
    root = tmp_path / "course"
    (root / "solutions").mkdir(parents=True)
    source = cli.extra_source(root, REVIEW)
    shutil.copy(cli.extra_source(course.ROOT, REVIEW), source)
    assert cli.release(root, [REVIEW], check=True) == 1  # not released yet
    assert "notebooks/review.ipynb is stale" in capsys.readouterr().out
    assert cli.release(root, [REVIEW], check=False) == 0
    assert (root / "notebooks" / "review.ipynb").read_text() == course.release_path(REVIEW).read_text()
    assert cli.release(root, [REVIEW], check=True) == 0
    nb = course.read(source)
    nb.cells[1].source += " One more sentence."
    nbformat.write(nb, source)
    assert cli.release(root, [REVIEW], check=True) == 1


@pytest.mark.parametrize("name", NAMES)
def test_solution_folder_holds_only_the_notebook_and_its_answer_key(name):
    """Only notebooks are released (nbgrader_config.py ignores every other file); an answer key is the
    one other file a source folder may hold."""
    files = sorted(p.name for p in (course.SOLUTIONS / name).iterdir() if p.name not in (".ipynb_checkpoints",
                                                                                          "__pycache__"))
    assert set(files) <= {f"{name}.ipynb", "answer_key.py"} and f"{name}.ipynb" in files


@pytest.mark.parametrize("name", NAMES)
def test_release_hides_solutions_and_hidden_tests(name):
    released = course.release_path(name).read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
        assert marker not in released
    solution = course.read(course.solution_path(name))
    for cell in course.solution_cells(solution):
        body = cell.source.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0].strip()
        assert body not in released


@pytest.mark.parametrize("name", NAMES)
def test_committed_without_outputs(name):
    for path in (course.release_path(name), course.solution_path(name)):
        for cell in course.read(path).cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path} has outputs"


@pytest.fixture(scope="module", params=NAMES)
def executed(request, tmp_path_factory):
    name = request.param
    return name, course.execute(course.release_path(name), tmp_path_factory.mktemp(name))


def test_no_free_points(executed):
    """A student notebook as shipped fails every grade cell, with a message that says why."""
    name, nb = executed
    cells = course.grade_cells(nb)
    assert cells
    passing = [course.nbgrader_meta(c)["grade_id"] for c in cells if not course.failure_text(c)]
    assert passing == []
    for cell in cells:
        assert "not implemented yet" in course.failure_text(cell)


def test_only_exercise_cells_fail(executed):
    """Everything but the exercises and their tests runs in the blank notebook too."""
    name, nb = executed
    graded = {id(c) for c in course.grade_cells(nb) + course.solution_cells(nb)}
    broken = [(i, course.failure_text(c)) for i, c in enumerate(nb.cells)
              if c.cell_type == "code" and id(c) not in graded and course.failure_text(c)
              and "NotImplementedError" not in course.failure_text(c)
              and "not implemented yet" not in course.failure_text(c)]
    assert broken == []


@pytest.mark.parametrize("name", NAMES)
def test_the_release_carries_no_instructor_notes_in_cell_metadata(name):
    """A solution cell's metadata.course holds the answer's written forms (tests/test_derive.py): a
    learner can open a cell's metadata, so the release has none."""
    assert any("course" in c.metadata for c in course.read(course.solution_path(name)).cells)
    assert [i for i, c in enumerate(course.read(course.release_path(name)).cells) if "course" in c.metadata] == []
