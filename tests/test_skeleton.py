"""`backprop-course new` lays out a notebook that the course's tests pass as they stand, so that the checklist of
docs/adding_a_notebook.md cannot go stale: the command runs in a copy of the repository, then the tests that read
a notebook's files run there (a pytest of their own), on the new notebook. The command refuses a name that is
taken, and a registry whose shape it does not know, before it writes anything.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import course
import pytest

from autograder.grader import skeleton

NUMBER = max(int(name[:2]) for name in course.assignment_names()) + 1
NAME, TITLE = f"{NUMBER:02d}_skeleton", "A notebook laid out by backprop-course new"
PACKAGE = f"nb{NAME}"
WRITTEN = [f"solutions/{NAME}/{NAME}.ipynb", f"autograder/checks/{PACKAGE}/__init__.py",
           f"autograder/checks/{PACKAGE}/cube.py", f"autograder/checks/{PACKAGE}/rules.py",
           f"autograder/learner/quizzes/{NAME}.yaml", f"tests/mutants/{PACKAGE}.py", "tests/test_derive.py",
           "tests/test_quiz_content.py", "README.md", f"notebooks/{NAME}.ipynb"]
# The tests run in the copy, by module: True runs all of them (they read every notebook's files together), a tuple
# runs those whose id names the new notebook and, by name, the tests listed that read all notebooks at once.
SELECTED = {
    "test_layout.py": True,
    "test_quiz.py": True,
    "test_quiz_content.py": True,
    "test_derive.py": True,
    "test_notation.py": True,
    "test_prose.py": True,
    "test_mutants.py": (),
    "test_solutions.py": (),
    "test_release.py": ("test_every_assignment_is_released_and_the_review_notebook",),
    "test_judge.py": ("test_the_rules_cover_every_grade_cell",),
    "test_flags.py": (),
    "test_battery.py": (),
    "test_plain_quiz.py": (),
    "test_colab.py": ("test_readme_has_a_colab_badge",),
    "test_progress_view.py": ("test_every_grade_cell_of_the_course_and_nothing_else_is_recognised",),
    "test_review.py": ("last_notebook", "the_last_notebook", "starts_with_the_last"),
    "test_learner_wheel.py": ("test_every_solution_cell_and_every_answer_is_searched_for",),
    "test_nbgrader_e2e.py": (),
}
PAGE = course.ROOT / "docs" / "adding_a_notebook.md"


def copy_of_the_repository(to: pathlib.Path) -> pathlib.Path:
    """The repository's files as a clone has them: what .gitignore names (the venv, builds, nbgrader's folders)
    and .git left out."""
    ignored = [line.strip().rstrip("/") for line in (course.ROOT / ".gitignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    shutil.copytree(course.ROOT, to, ignore=shutil.ignore_patterns(".git", ".pytest_cache", *ignored))
    return to


def environment(root: pathlib.Path, tmp: pathlib.Path) -> dict:
    """This environment, with the copy's `autograder` first (for the kernels the tests start too: the installed
    package is the checkout's, which has no checks for the new notebook) and the copy as the course root."""
    return {**os.environ, "PYTHONPATH": str(root), "COURSE_ROOT": str(root),
            "COURSE_PROGRESS": str(tmp / "progress.json")}


@pytest.fixture(scope="module")
def laid_out(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("skeleton")
    root = copy_of_the_repository(tmp / "course")
    ran = subprocess.run([sys.executable, "-m", "autograder.grader.cli", "new", NAME, TITLE], cwd=root,
                         capture_output=True, text=True, env=environment(root, tmp))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return root, tmp, ran.stdout


def test_the_command_writes_every_file_of_the_checklist_and_the_page_names_them(laid_out):
    root, _tmp, said = laid_out
    assert re.findall(r"^wrote (\S+)$", said, re.M) == WRITTEN
    page = PAGE.read_text()
    for path in WRITTEN:
        generic = path.replace(NAME, "NN_name").replace(PACKAGE, "nbNN_name")
        assert (root / path).is_file() and generic in page, f"docs/adding_a_notebook.md does not name {generic}"
    assert "docs/adding_a_notebook.md" in (course.ROOT / "README.md").read_text()


def selected(node_id: str) -> bool:
    module, _, test = node_id.removeprefix("tests/").partition("::")
    wanted = SELECTED.get(module)
    return wanted is True or (wanted is not None and (NAME in test or any(name in test for name in wanted)))


@pytest.mark.timeout(900)
def test_the_courses_tests_pass_on_the_new_notebook(laid_out):
    root, tmp, _said = laid_out
    env = environment(root, tmp)
    pytest_in_copy = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
    listed = subprocess.run([*pytest_in_copy, "--collect-only", "-q", *(f"tests/{m}" for m in SELECTED)], cwd=root,
                            capture_output=True, text=True, env=env)
    assert listed.returncode == 0, listed.stdout[-3000:] + listed.stderr[-3000:]
    chosen = [line for line in listed.stdout.splitlines() if "::" in line and selected(line)]
    report = tmp / "report.xml"
    ran = subprocess.run([*pytest_in_copy, "-q", f"--junitxml={report}", *chosen], cwd=root, capture_output=True,
                         text=True, env=env)
    assert ran.returncode == 0, ran.stdout[-6000:] + ran.stderr[-3000:]
    passed = [case.get("classname") for case in ET.parse(report).iter("testcase")
              if not list(case)]  # a skip, a failure or an error is a child element
    assert len(passed) == len(chosen), f"{len(chosen) - len(passed)} selected tests did not pass (skipped?)"
    assert {"tests." + m.removesuffix(".py") for m in SELECTED} == set(passed), "a module ran no test"
    assert sum(NAME in node for node in chosen) >= 30, f"too few tests ran on {NAME}"


def test_the_release_of_the_new_notebook_is_up_to_date(laid_out):
    """What test_release_is_up_to_date checks, for the one notebook the command released (the others are
    the checkout's, which that test checks)."""
    root, tmp, _said = laid_out
    checked = subprocess.run([sys.executable, "-m", "autograder.grader.cli", "release", "--check", NAME], cwd=root,
                             capture_output=True, text=True, env=environment(root, tmp))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_generated_code_passes_the_linter(laid_out):
    root, _tmp, _said = laid_out
    files = [p for p in WRITTEN if p.endswith(".py")]
    ran = subprocess.run([sys.executable, "-m", "ruff", "check", *files], cwd=root, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout + ran.stderr


# --- what the command refuses, before it writes anything ----------------------------------------------------------
def fake_course(root: pathlib.Path, derived="DERIVED = {\n    \"01_a\": [\"f\"],\n}\n") -> pathlib.Path:
    """The files the command reads, as small as they can be."""
    files = {"solutions/01_a/01_a.ipynb": "{}", "autograder/learner/quizzes/01_a.yaml": "notebook: 01_a\n",
             "tests/test_derive.py": derived, "tests/test_quiz_content.py": "HIDDEN_SNIPPETS = {\n}\n",
             "README.md": "| 01 | [A](notebooks/01_a.ipynb) |\n| — | review |\n\n| notebook | exercises | rule |\n"
                          "|---|---|---|\n| 01_a | all | no autograd |\n\nAfter.\n"}
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def contents(root: pathlib.Path) -> dict:
    return {p: p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name, title, says", [
    ("1_attention", "Attention", "not a notebook name"), ("10_Attention", "Attention", "not a notebook name"),
    ("10_attention", "A | B", "without '|'"), ("10_attention", " ", "must be one line"),
    ("01_other", "Other", "notebook 01 exists already: 01_a"),
])
def test_a_bad_or_taken_name_is_refused_and_nothing_is_written(tmp_path, name, title, says):
    root = fake_course(tmp_path)
    before = contents(root)
    with pytest.raises(skeleton.SkeletonError, match=re.escape(says)):
        skeleton.lay_out(root, name, title)
    assert contents(root) == before


def test_a_registry_the_command_cannot_extend_is_named_and_nothing_is_written(tmp_path):
    root = fake_course(tmp_path, derived="DERIVED = {\"01_a\": [\"f\"]}\n")
    before = contents(root)
    with pytest.raises(skeleton.SkeletonError, match=r"tests/test_derive.py: DERIVED's closing brace"):
        skeleton.lay_out(root, "02_b", "B")
    assert contents(root) == before


def test_the_fake_course_takes_a_skeleton_in_every_place(tmp_path):
    """The refusals above are refusals: on the same files, a free name is laid out."""
    root = fake_course(tmp_path)
    written = skeleton.lay_out(root, "02_b", "B")
    readme = (root / "README.md").read_text().splitlines()
    assert readme[1].startswith("| 02 | [B](notebooks/02_b.ipynb) |") and readme[2] == "| — | review |"
    assert readme[-3].startswith("| 02_b | `cube_backward` |") and readme[-1] == "After."
    assert "    \"02_b\": [\"cube_backward\"],\n}" in (root / "tests" / "test_derive.py").read_text()
    rules = root / "autograder" / "checks" / "nb02_b" / "rules.py"
    assert 'BY_HAND = {"cube_backward": NO_AUTOGRAD}' in rules.read_text()
    assert len(written) == 9 and all(p.is_file() for p in written)
