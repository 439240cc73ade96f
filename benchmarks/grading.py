"""Grade a simulated class twice, with plain serial `nbgrader autograde` and with `backprop-course grade`.

Run from the repository root: `.venv/bin/python benchmarks/grading.py [--students 40] [NOTEBOOK ...]`
(`--cell-seconds`, 30 by default, is the time limit an endless submission uses up in each run).
The class mixes perfect, partial, blank and hostile submissions: one whose first exercise ends
its kernel (`os._exit`) and one whose first exercise never returns. Every class of 5 or more
students holds each kind. Serial nbgrader exits non-zero on the crashing submission: that is an
outcome to record (printed with its exit status), not a reason to stop. Both rates are over the
whole class. Then: where our run's time went (by phase), and our time per notebook against bare
nbclient execution of the same perfect submission, both measured on their own (one at a time,
best of `--repeats`), so the ratio is what our sandbox, kernel isolation and trusted grading cost.
"""
import argparse
import dataclasses
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import nbformat

from autograder.grader import classgrade, grading_task, isolation
from autograder.grader.execution import SteadyNotebookClient
from autograder.grader.nbgrader_run import nbgrader_env, nbgrader_runner
from autograder.grader.sandbox import Limits

ROOT = pathlib.Path(__file__).resolve().parent.parent
# 11 students: 4 perfect, 3 partial, 2 blank, 1 crash, 1 endless; the hostile kinds come early.
KINDS = ["perfect", "partial", "blank", "crash", "endless", "perfect", "partial", "perfect", "partial", "perfect",
         "blank"]
CELL_SECONDS = 30


def answers_for(kind, perfect):
    first = sorted(perfect)[0]
    if kind == "perfect":
        return perfect
    if kind == "partial":
        return {k: v for k, v in perfect.items() if k != first}
    if kind == "crash":
        return {**perfect, first: f"def {first}(*args, **kwargs):\n    import os\n    os._exit(1)"}
    if kind == "endless":
        return {**perfect, first: f"def {first}(*args, **kwargs):\n    while True:\n        pass"}
    return {}


def build_class(course, names, students):
    """Solutions, the gradebook's assignments and `students` submissions per notebook."""
    shutil.copy(ROOT / "nbgrader_config.py", course)
    run = nbgrader_runner(course)
    for name in names:
        shutil.copytree(ROOT / "solutions" / name, course / "solutions" / name)
        run("generate_assignment", name, "--force")
        solution = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
        perfect = {c.metadata.nbgrader.grade_id.removesuffix("_solution"): c.source for c in solution.cells
                   if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")}
        released = nbformat.read(course / "release" / name / f"{name}.ipynb", as_version=4)
        for i in range(students):
            kind = KINDS[i % len(KINDS)]
            nb = nbformat.from_dict(released)
            given = answers_for(kind, perfect)
            for cell in nb.cells:
                grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
                if grade_id.endswith("_solution") and grade_id.removesuffix("_solution") in given:
                    cell.source = given[grade_id.removesuffix("_solution")]
            folder = course / "submitted" / f"{kind}-{i:03d}" / name
            folder.mkdir(parents=True)
            nbformat.write(nb, folder / f"{name}.ipynb")


def serial_nbgrader(course, names, cell_seconds):
    """Plain `nbgrader autograde` of each notebook, one after the other; (seconds, [exit statuses],
    submissions it recorded)."""
    statuses = []
    began = time.perf_counter()
    for name in names:
        done = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", name, "--create", "--force",
                               f"--Execute.timeout={cell_seconds}", "--log-level=ERROR"],
                              cwd=course, capture_output=True, text=True, env=nbgrader_env())
        statuses.append(done.returncode)
    seconds = time.perf_counter() - began
    recorded = len(list((course / "autograded").glob("*/*/*.ipynb")))  # nbgrader removes what failed
    return seconds, statuses, recorded


def bare_seconds(path):
    nb = nbformat.read(path, as_version=4)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        SteadyNotebookClient(nb, timeout=60, allow_errors=True, kernel_name="python3",
                             resources={"metadata": {"path": workdir}}).execute()
    return time.perf_counter() - began


def our_seconds(course, sub, limits):
    """`backprop-course grade`'s execution of one sanitized submission, as a worker runs it."""
    with classgrade.open_gradebook(course) as gb:
        source = classgrade.sanitize.load_source(gb, sub.assignment)
    nb, _ = classgrade.prepare(course, sub, source)
    hidden = [str(p) for p in isolation.secrets_of(course)]
    began = time.perf_counter()
    grading_task.execute_submission(nbformat.writes(nb), dataclasses.asdict(limits),
                                  classgrade.trusted_names(course, sub.assignment), hidden, None, str(course),
                                  sub.assignment)
    return time.perf_counter() - began


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*")
    parser.add_argument("--students", type=int, default=40)
    parser.add_argument("--workers", type=int, default=classgrade.default_workers())
    parser.add_argument("--repeats", type=int, default=2, help="runs per notebook for the overhead figures")
    parser.add_argument("--no-overhead", action="store_true", help="skip the per-notebook comparison")
    parser.add_argument("--cell-seconds", type=int, default=CELL_SECONDS,
                        help="a cell's time limit, in both runs (the endless submissions take it)")
    args = parser.parse_args()
    names = args.notebooks or sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())
    count = args.students * len(names)
    mix = {kind: sum(1 for i in range(args.students) if KINDS[i % len(KINDS)] == kind) for kind in dict.fromkeys(KINDS)}
    limits = Limits(cell_seconds=args.cell_seconds, threads=classgrade.kernel_threads(args.workers))
    with tempfile.TemporaryDirectory() as tmp:
        serial_course, ours_course = pathlib.Path(tmp) / "serial", pathlib.Path(tmp) / "ours"
        serial_course.mkdir()
        build_class(serial_course, names, args.students)
        shutil.copytree(serial_course, ours_course)

        serial, statuses, recorded = serial_nbgrader(serial_course, names, args.cell_seconds)
        began = time.perf_counter()
        result = classgrade.grade_class(ours_course, names, workers=args.workers, limits=limits, progress=False)
        ours = time.perf_counter() - began

        print(f"{count} submissions ({args.students} students x {len(names)} notebooks; per notebook "
              + ", ".join(f"{n} {kind}" for kind, n in mix.items() if n) + f"), {args.workers} workers, "
              f"{os.cpu_count()} cores")
        print(f"serial nbgrader autograde: {serial:7.1f} s  {60 * count / serial:6.1f} submissions/min  "
              f"(exit status {', '.join(map(str, statuses))}; {recorded} of {count} recorded)")
        print(f"backprop-course grade:     {ours:7.1f} s  {60 * count / ours:6.1f} submissions/min  "
              f"({count - len(result.not_graded())} of {count} graded)")
        print(f"speed-up: {serial / ours:.2f}x")
        by_kind = {}
        for (student, _), outcome in result.outcomes.items():
            by_kind.setdefault(student.split("-")[0], []).append(outcome.seconds)
        total = sum(map(sum, by_kind.values()))
        print("our seconds per submission (as the workers ran them, in parallel): "
              + ", ".join(f"{kind} {sum(v) / len(v):.1f}" for kind, v in by_kind.items()) + f"; total {total:.1f}")
        print("where our time went:")
        for phase, seconds in result.seconds.items():
            print(f"  {phase:<55} {seconds:7.1f} s")
        if args.no_overhead:
            return 0
        print(f"{'notebook':<20} {'bare nbclient s':>16} {'ours s':>8} {'ratio':>6}")
        solo = Limits(cell_seconds=args.cell_seconds, threads=os.cpu_count() or 1)
        for name in names:
            found, _ = classgrade.submissions.find_submissions(ours_course, [name])
            sub = next(s for s in found if s.student.startswith("perfect"))
            bare = min(bare_seconds(sub.path) for _ in range(args.repeats))
            mine = min(our_seconds(ours_course, sub, solo) for _ in range(args.repeats))
            print(f"{name:<20} {bare:16.1f} {mine:8.1f} {mine / bare:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
