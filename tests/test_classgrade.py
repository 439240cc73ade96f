"""`backprop-course grade` on a class with broken and hostile submissions.

Every submission answers notebook 01 perfectly except for one exercise (relu_grad, 1 point),
where it misbehaves in its own way. That exercise must score 0 (or full marks where the
misbehaviour is harmless), every other exercise and student is graded normally, the gradebook
stays intact and the run completes.
"""
import csv
import shutil
import zipfile

import course
import nbformat
import pytest
from test_nbgrader_e2e import submission

from autograder.grader import classgrade, isolation, report
from autograder.grader.sandbox import Limits

NAME, VICTIM = "01_chain_rule", "relu_grad"
GOOD = "def relu_grad(x):\n    return (x > 0).to(x.dtype)"

# A wrong answer behind patched comparisons: in the kernel, every check would pass.
CHEAT = """import numpy, torch
import autograder.checks
autograder.checks.expect_close = lambda *a, **k: None
autograder.checks.check_cases = lambda *a, **k: None
torch.allclose = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
numpy.allclose = lambda *a, **k: True
torch.Tensor.any = lambda self, *a, **k: False
def relu_grad(x):
    return x"""

ANSWERS = {  # student -> (relu_grad's cell, expected total)
    "perfect": (GOOD, 12),
    "blank": (None, 0),
    "endless_loop_ignoring_interrupts": (
        "def relu_grad(x):\n    while True:\n        try:\n            while True:\n                pass\n"
        "        except BaseException:\n            pass", 11),
    "os_exit": ("def relu_grad(x):\n    import os\n    os._exit(1)", 11),
    "sys_exit": ("def relu_grad(x):\n    import sys\n    sys.exit(0)", 11),
    "memory_bomb": ("def relu_grad(x):\n    hoard = []\n    while True:\n        hoard.append(bytearray(100 * 2**20))", 11),
    "output_flood": ("def relu_grad(x):\n    for _ in range(20_000):\n        print('spam' * 50)\n"
                     "    return (x > 0).to(x.dtype)", 11),
    "wrong_type": ("def relu_grad(x):\n    return (x > 0).tolist()", 11),
    "nan": ("def relu_grad(x):\n    return x * float('nan')", 11),
    "wrong_shape": ("def relu_grad(x):\n    return (x > 0).to(x.dtype)[None]", 11),
    "wrong_dtype": ("def relu_grad(x):\n    return x > 0", 11),
    "wrong_device": ("def relu_grad(x):\n    return (x > 0).to(x.dtype).to('meta')", 11),
    "warnings_on_stderr": ("import sys, warnings\ndef relu_grad(x):\n    warnings.warn('noisy')\n"
                           "    print('chatter', file=sys.stderr)\n    return (x > 0).to(x.dtype)", 12),
    "renamed_function": ("def relu_gradient(x):\n    return (x > 0).to(x.dtype)", 11),
    "patches_the_checks": (CHEAT, 11),
    "patches_builtins": ("import builtins\nbuiltins.all = lambda *a: True\nbuiltins.any = lambda *a: False\n"
                         "builtins.abs = lambda x: 0\nbuiltins.max = lambda *a, **k: 0\n"
                         "def relu_grad(x):\n    return x", 11),
}
# Submissions that reach for the grader's files; {root} is the class folder. Where kernels cannot be
# isolated (not root, not Linux) these are not graded, and the test that needs them is skipped.
INTRUDERS = {
    "copies_the_solution": (
        "import json\n"
        "def relu_grad(x):\n"
        "    nb = json.load(open('{root}/solutions/01_chain_rule/01_chain_rule.ipynb'))\n"
        "    scope = {{}}\n"
        "    exec([''.join(c['source']) for c in nb['cells'] if 'def relu_grad' in ''.join(c['source'])][0], scope)\n"
        "    return scope['relu_grad'](x)", 11),
    "reads_the_gradebook": ("def relu_grad(x):\n    open('{root}/gradebook.db', 'rb').read()\n"
                            "    return (x > 0).to(x.dtype)", 11),
    "erases_the_gradebook": ("def relu_grad(x):\n    open('{root}/gradebook.db', 'wb').close()\n"
                             "    return (x > 0).to(x.dtype)", 11),
    "overwrites_another_student": (
        "def relu_grad(x):\n    open('{root}/submitted/perfect/01_chain_rule/01_chain_rule.ipynb', 'w').write('{{}}')\n"
        "    return (x > 0).to(x.dtype)", 11),
}
ISOLATED = isolation.available()
EDITS = {  # student -> (how the test cells were tampered with, relu_grad answer, expected total)
    "edited_test": ("edit", None, 11),
    "deleted_test": ("delete", None, 11),
    "duplicated_test": ("duplicate", GOOD, 12),
    "reordered_test": ("move_before_answer", GOOD, 11),
}


def perfect_answers():
    solution = course.read(course.solution_path(NAME))
    return {course.nbgrader_meta(c)["grade_id"].removesuffix("_solution"): c.source
            for c in course.solution_cells(solution)}


def tamper(nb, how):
    cells = nb.cells
    index = next(i for i, c in enumerate(cells) if course.nbgrader_meta(c).get("grade_id") == VICTIM)
    answer = next(i for i, c in enumerate(cells) if course.nbgrader_meta(c).get("grade_id") == f"{VICTIM}_solution")
    if how == "edit":
        cells[index].source = "pass"
    elif how == "delete":
        del cells[index]
    elif how == "duplicate":
        cells.insert(index + 1, nbformat.from_dict({**cells[index], "id": "copied-test-cell"}))
    elif how == "move_before_answer":
        cells.insert(answer, cells.pop(index))
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    shutil.copy(course.ROOT / "nbgrader_config.py", root)
    shutil.copytree(course.SOLUTIONS / NAME, root / "solutions" / NAME)
    run = classgrade.nbgrader_runner(root)
    classgrade.ensure_in_gradebook(root, [NAME], run)
    released = root / "release" / NAME / f"{NAME}.ipynb"
    perfect = perfect_answers()

    def place(student, nb):
        folder = root / "submitted" / student / NAME
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{NAME}.ipynb")

    for student, (cell, _) in ANSWERS.items():
        answers = {} if student == "blank" else {**perfect, VICTIM: cell} if cell else perfect
        place(student, submission(released, answers))
    for student, (cell, _) in INTRUDERS.items() if ISOLATED else ():
        place(student, submission(released, {**perfect, VICTIM: cell.format(root=root)}))
    for student, (how, cell, _) in EDITS.items():
        answers = {**perfect, VICTIM: cell} if cell else {k: v for k, v in perfect.items() if k != VICTIM}
        place(student, tamper(submission(released, answers), how))

    zips = root / "lms_downloads"
    zips.mkdir()
    with zipfile.ZipFile(zips / "zipped student.zip", "w") as z:  # a path that tries to climb out
        z.writestr(f"../../../{NAME}_final.ipynb", nbformat.writes(submission(released, perfect)))
        z.writestr("notes.txt", "not a notebook")

    limits = Limits(cell_seconds=15, submission_seconds=300, memory_mb=1500, output_chars=20_000)
    results = classgrade.grade_class(root, [NAME], workers=2, limits=limits, zips=zips, progress=False, run=run)
    run("export")
    return root, results


def test_every_submission_gets_its_intended_score(graded):
    root, results = graded
    with open(root / "grades.csv") as f:
        got = {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)}
    expected = {s: float(v[-1]) for s, v in {**ANSWERS, **EDITS, **(INTRUDERS if ISOLATED else {})}.items()}
    expected["zipped_student"] = 12.0
    assert got == expected
    assert len(results) == len(expected)


def test_failures_say_why(graded):
    root, _ = graded
    messages = {(r["student"], r["exercise"]): r["message"] for r in classgrade.scores(root, [NAME])}
    said = {s: messages[(s, VICTIM)] for s in ("endless_loop_ignoring_interrupts", "os_exit", "memory_bomb",
                                               "output_flood", "wrong_type", "wrong_shape", "wrong_dtype",
                                               "wrong_device", "nan", "renamed_function")}
    assert "stopped after 15 s" in said["endless_loop_ignoring_interrupts"]
    assert "ended the Python process" in said["os_exit"]
    assert "1500 MB" in said["memory_bomb"]
    assert "printed" in said["output_flood"]
    assert "torch.Tensor" in said["wrong_type"]
    assert "NaN" in said["nan"]
    assert "shape" in said["wrong_shape"] and "dtype" in said["wrong_dtype"] and "device" in said["wrong_device"]
    assert "relu_grad" in said["renamed_function"] and "not defined" in said["renamed_function"]


@pytest.mark.needs(ISOLATED, reason="kernels are isolated only when grading as root on Linux")
def test_kernels_cannot_reach_the_grader_files(graded):
    root, _ = graded
    messages = {(r["student"], r["exercise"]): r["message"] for r in classgrade.scores(root, [NAME])}
    for student in INTRUDERS:
        message = messages[(student, VICTIM)]  # in the sandbox the grader's files are not there at all
        assert "FileNotFoundError" in message or "PermissionError" in message, (student, message)
    assert (root / "gradebook.db").stat().st_size > 0
    perfect = nbformat.read(root / "submitted" / "perfect" / NAME / f"{NAME}.ipynb", as_version=4)
    assert course.solution_cells(perfect)


def test_zip_members_cannot_write_outside_the_class_folder(graded):
    root, _ = graded
    assert (root / "submitted" / "zipped_student" / NAME / f"{NAME}.ipynb").exists()
    assert not list(root.parent.glob(f"*{NAME}_final.ipynb")) and not list(root.glob(f"*{NAME}_final.ipynb"))


def test_report_has_every_student_and_exercise(graded, tmp_path):
    root, _ = graded
    rows = classgrade.scores(root, [NAME])
    files = report.write_report(rows, tmp_path)
    assert all(f.exists() and f.stat().st_size > 0 for f in files)
    assert len({r["student"] for r in rows}) == len(ANSWERS) + len(EDITS) + len(INTRUDERS) * ISOLATED + 1
    assert report.pass_rates(rows)[f"{NAME}: {VICTIM}"] < report.pass_rates(rows)[f"{NAME}: sigmoid_grad"]


def test_patched_checks_fool_the_kernel_but_not_the_grader(tmp_path):
    """The same cheating submission, graded in the kernel as nbgrader does and in trusted mode."""
    from autograder.grader import trusted
    from autograder.grader.sandbox import run_notebook

    source = course.read(course.solution_path(NAME))
    names = trusted.student_names(c.source for c in course.solution_cells(source))
    verdicts = {}
    for mode, trusted_names in (("kernel", None), ("trusted", names)):
        nb = submission(course.solution_path(NAME), {**perfect_answers(), VICTIM: CHEAT})
        run_notebook(nb, Limits(cell_seconds=30), trusted_names=trusted_names)
        cell = next(c for c in course.grade_cells(nb) if course.nbgrader_meta(c)["grade_id"] == VICTIM)
        verdicts[mode] = [o.evalue for o in cell.outputs if o.output_type == "error"]
    assert verdicts["kernel"] == []
    assert verdicts["trusted"] and "wrong values" in verdicts["trusted"][0]


def test_a_submission_no_worker_could_run_scores_zero_with_the_reason():
    nb = submission(course.solution_path(NAME), perfect_answers())
    result = classgrade.not_graded(nbformat.writes(nb), "KilledWorker: worker died")
    graded = nbformat.reads(result["notebook"], as_version=4)
    errors = [o.evalue for c in course.grade_cells(graded) for o in c.outputs if o.output_type == "error"]
    assert len(errors) == len(course.grade_cells(graded)) and all("KilledWorker" in e for e in errors)


@pytest.mark.parametrize("name", course.assignment_names())
def test_every_reference_solution_earns_full_marks_in_trusted_mode(name):
    """A real kernel (isolated where possible) answers; every grade cell, hidden tests included,
    passes in the grader's process."""
    from autograder.grader import trusted
    from autograder.grader.sandbox import run_notebook

    source = course.read(course.solution_path(name))
    assert trusted.opted_in(source)
    names = trusted.student_names(c.source for c in course.solution_cells(source))
    problems = run_notebook(source, Limits(cell_seconds=120), trusted_names=names)
    failures = {course.nbgrader_meta(c)["grade_id"]: [o.get("evalue") for o in c.outputs if o.output_type == "error"]
                for c in course.grade_cells(source)}
    assert problems == [] and {k: v for k, v in failures.items() if v} == {}
