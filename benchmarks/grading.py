"""Grade a simulated class twice, with plain serial `nbgrader autograde` and with `backprop-course grade`.

Run from the repository root: `.venv/bin/python benchmarks/grading.py [--students 40] [NOTEBOOK ...]`.
The class mixes perfect, partial, blank and hostile submissions (a crash and an endless loop in
one exercise). Prints submissions per minute for each grader and their ratio, then our time
per notebook against bare nbclient execution of the same perfect submission, both measured on
their own (one at a time, best of `--repeats`), so the ratio is what our sandbox, kernel
isolation and trusted grading cost.
"""
import argparse
import dataclasses
import os
import pathlib
import shutil
import sys
import tempfile
import time

import nbformat

from autograder.grader import classgrade, isolation
from autograder.grader.execution import SteadyNotebookClient
from autograder.grader.sandbox import Limits

ROOT = pathlib.Path(__file__).resolve().parent.parent
KINDS = ["perfect"] * 4 + ["partial"] * 3 + ["blank"] * 2 + ["crash", "endless"]


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
    run = classgrade.nbgrader_runner(course)
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
    return run


def bare_seconds(path):
    nb = nbformat.read(path, as_version=4)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        SteadyNotebookClient(nb, timeout=60, allow_errors=True, kernel_name="python3",
                             resources={"metadata": {"path": workdir}}).execute()
    return time.perf_counter() - began


def our_seconds(course, sub, limits):
    """`backprop-course grade`'s execution of one sanitized submission, as a worker runs it."""
    nb_json = nbformat.writes(classgrade.sanitized(course, sub))
    hidden = [str(p) for p in isolation.secrets_of(course)]
    began = time.perf_counter()
    classgrade.execute_submission(nb_json, dataclasses.asdict(limits), classgrade.trusted_names(course, sub.assignment),
                                  hidden)
    return time.perf_counter() - began


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*")
    parser.add_argument("--students", type=int, default=40)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=2, help="runs per notebook for the overhead figures")
    args = parser.parse_args()
    names = args.notebooks or sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())
    count = args.students * len(names)
    limits = Limits(cell_seconds=30, threads=max(1, (os.cpu_count() or 1) // args.workers))
    with tempfile.TemporaryDirectory() as tmp:
        serial_course, ours_course = pathlib.Path(tmp) / "serial", pathlib.Path(tmp) / "ours"
        serial_course.mkdir()
        run = build_class(serial_course, names, args.students)
        shutil.copytree(serial_course, ours_course)

        began = time.perf_counter()
        for name in names:
            run("autograde", name, "--create", "--force", "--Execute.timeout=30")
        serial = time.perf_counter() - began

        began = time.perf_counter()
        results = classgrade.grade_class(ours_course, names, workers=args.workers, limits=limits, progress=False)
        ours = time.perf_counter() - began

        print(f"{count} submissions ({args.students} students x {len(names)} notebooks), {args.workers} workers")
        print(f"serial nbgrader autograde: {serial:7.1f} s  {60 * count / serial:6.1f} submissions/min")
        print(f"backprop-course grade:     {ours:7.1f} s  {60 * count / ours:6.1f} submissions/min")
        print(f"speed-up: {serial / ours:.2f}x")
        print(f"{'notebook':<20} {'bare nbclient s':>16} {'ours s':>8} {'ratio':>6}")
        solo = Limits(cell_seconds=30, threads=os.cpu_count() or 1)
        for name in names:
            sub = next(s for s in classgrade.find_submissions(ours_course, [name]) if s.student.startswith("perfect"))
            bare = min(bare_seconds(sub.path) for _ in range(args.repeats))
            mine = min(our_seconds(ours_course, sub, solo) for _ in range(args.repeats))
            print(f"{name:<20} {bare:16.1f} {mine:8.1f} {mine / bare:6.2f}")


if __name__ == "__main__":
    sys.exit(main())
