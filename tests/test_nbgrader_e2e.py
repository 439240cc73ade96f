"""nbgrader end to end, as an instructor runs it: generate, hand out, autograde, export.

Submissions: perfect, blank, one exercise wrong, one exercise blank with its test cell edited
to pass, and one with that test cell deleted. Edited or deleted tests must not earn points, and
only the edited one is reported (no "checksum has changed" warning for test cells as released).
"""
import csv
import html
import inspect
import re
import shutil
import subprocess
import sys
import textwrap

import course
import mutants
import nbformat
import pytest

from autograder.grader.nbgrader_run import nbgrader_env

NAMES = course.assignment_names()


def nbgrader(workdir, *args, log_level="ERROR"):
    result = subprocess.run([sys.executable, "-m", "nbgrader", *args, f"--log-level={log_level}"],
                            cwd=workdir, capture_output=True, text=True, env=nbgrader_env())
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def source_of(fn, name):
    """A catalogue function's source, renamed to the graded name, ready to paste into a cell."""
    lines = [line for line in textwrap.dedent(inspect.getsource(fn)).splitlines() if not line.startswith("@")]
    return re.sub(r"^(def|class) \w+", rf"\1 {name}", "\n".join(lines), count=1)


def points_by_name(nb):
    points = {}
    for cell in course.grade_cells(nb):
        meta = course.nbgrader_meta(cell)
        name = course.graded_name(meta["grade_id"])
        points[name] = points.get(name, 0) + meta["points"]
    return points


def hidden_lines(solution, released):
    """Distinctive lines of the hidden tests: long enough to be unique, absent from the release."""
    visible = "\n".join(c.source for c in released.cells)
    lines = set()
    for cell in course.grade_cells(solution):
        region = re.findall(r"BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS", cell.source, flags=re.S)
        lines |= {line.strip() for part in region for line in part.splitlines()}
    return {line for line in lines if len(line) >= 25 and line not in visible}


def page_text(path):
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


def submission(released, answers, edit_test=None, delete_test=None):
    nb = course.read(released)
    for cell in course.solution_cells(nb):
        name = course.nbgrader_meta(cell)["grade_id"].removesuffix("_solution")
        if name in answers:
            cell.source = answers[name]
    for cell in course.grade_cells(nb):
        if course.graded_name(course.nbgrader_meta(cell)["grade_id"]) == edit_test:
            cell.source = "pass"
    deleted = [c for c in course.grade_cells(nb)
               if course.graded_name(course.nbgrader_meta(c)["grade_id"]) == delete_test]
    nb.cells = [c for c in nb.cells if c not in deleted]
    return nb


@pytest.mark.parametrize("name", NAMES)
def test_instructor_workflow_scores_submissions(name, tmp_path):
    shutil.copy(course.ROOT / "nbgrader_config.py", tmp_path)
    shutil.copytree(course.SOLUTIONS / name, tmp_path / "solutions" / name)
    for leak in ("notes_with_answers.txt", ".answers", "data/answers.csv", "answers.ipynbx"):
        (tmp_path / "solutions" / name / leak).parent.mkdir(exist_ok=True)
        (tmp_path / "solutions" / name / leak).write_text("must never be released")
    nbgrader(tmp_path, "generate_assignment", name, "--force")
    released = tmp_path / "release" / name / f"{name}.ipynb"
    assert sorted(p.name for p in released.parent.iterdir()) == [f"{name}.ipynb"]

    solution = course.read(course.solution_path(name))
    perfect = {course.nbgrader_meta(c)["grade_id"].removesuffix("_solution"): c.source
               for c in course.solution_cells(solution)}
    points = points_by_name(solution)
    total = sum(points.values())
    victim = sorted(points)[0]
    _, wrong_fn = mutants.load_all()[name][victim]["wrong"][0]
    students = {
        "perfect": (submission(released, perfect), total),
        "blank": (submission(released, {}), 0),
        "one_wrong": (submission(released, {**perfect, victim: source_of(wrong_fn, victim)}), total - points[victim]),
        "edited_test": (submission(released, {k: v for k, v in perfect.items() if k != victim}, edit_test=victim),
                        total - points[victim]),
        "deleted_test": (submission(released, {k: v for k, v in perfect.items() if k != victim}, delete_test=victim),
                         total - points[victim]),
    }
    if name == "01_chain_rule":  # the by-hand judge holds in plain nbgrader too (nbgrader_config.py: ByHandRules)
        around = f"{perfect[victim]}\n\n\ndef {victim}(*args, mine={victim}):\n    torch.autograd.grad\n" \
                 "    return mine(*args)"
        students["breaks_the_rule"] = (submission(released, {**perfect, victim: around}), total - points[victim])
    for student, (nb, _) in students.items():
        folder = tmp_path / "submitted" / student / name
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{name}.ipynb")

    said = nbgrader(tmp_path, "autograde", name, "--create", log_level="WARN")
    said = said.stdout + said.stderr
    assert "checksum" not in said.lower(), "test cells as released (hidden tests removed) are restored silently"
    assert re.search(rf"edited_test, {name}: {victim}[\w-]*: the locked cell was edited", said), said[-2000:]
    nbgrader(tmp_path, "generate_feedback", name)
    nbgrader(tmp_path, "export")

    with open(tmp_path / "grades.csv") as f:
        scores = {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)}
    assert scores == {student: float(expected) for student, (_, expected) in students.items()}
    if "breaks_the_rule" in students:
        ruled = page_text(tmp_path / "feedback" / "breaks_the_rule" / name / f"{name}.html")
        assert f"ByHandRule: {victim}: cell" in ruled and "reaches torch.autograd.grad" in ruled
    feedback = page_text(tmp_path / "feedback" / "one_wrong" / name / f"{name}.html")
    assert f"GradingError: {victim}:" in feedback, "the feedback must show why the exercise failed"
    secrets = hidden_lines(solution, course.read(released))
    assert secrets and not [line for line in secrets if line in feedback], "feedback shows hidden tests"
