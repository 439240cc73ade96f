"""Instructor command line: `backprop-course release`, `backprop-course grade` and `backprop-course new`.

`release [--check] [NOTEBOOK ...]` regenerates the student notebooks in notebooks/ from the nbgrader source in
solutions/ (solutions replaced by stubs, hidden tests removed, outputs cleared) and puts the Colab
first cell in each (autograder/grader/colab.py; solutions/ never hold it). It works in a temporary course
directory, so the instructor's own gradebook and folders are never touched. It also writes the
notebooks that are not assignments (EXTRAS: the review notebook, from solutions/review.ipynb, a file
beside the assignments' folders, so never an nbgrader assignment and never graded) with their
outputs cleared and the same Colab first cell, and points the README's "Open in Colab" links at the
repository that autograder/grader/colab.py names.

`grade [NOTEBOOK ...]` grades every submission in submitted/ (or a folder of LMS .zip
downloads) in parallel, records the scores in nbgrader's gradebook and writes a report; see
autograder/grader/classgrade.py. A submission that cannot be graded scores 0 with the reason in
reports/failures.csv and the others go on; the exit status is 0 when every submission was graded,
2 when some could not be (the last line says how many), 1 when grading itself failed.

`new NN_name "Title"` lays out a new notebook's skeleton (autograder/grader/skeleton.py): every file the
checklist of docs/adding_a_notebook.md names, around one example exercise, then releases it.
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

from autograder.grader import colab, skeleton
from autograder.grader.nbgrader_run import nbgrader_env

NOT_ALL_GRADED = 2  # exit status: the run finished, but some submissions scored 0 without being graded
EXTRAS = ("review",)  # released from solutions/<name>.ipynb, a file beside the assignments' folders, never graded


def assignments(root: pathlib.Path) -> list:
    return sorted(p.name for p in (root / "solutions").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def extra_source(root: pathlib.Path, name: str) -> pathlib.Path:
    return root / "solutions" / f"{name}.ipynb"


def generate(root: pathlib.Path, names: list, out: pathlib.Path) -> list:
    """Run nbgrader generate_assignment for `names`, then put the Colab first cell in each released
    notebook; return their paths."""
    shutil.copy(root / "nbgrader_config.py", out)
    for name in names:
        shutil.copytree(root / "solutions" / name, out / "solutions" / name,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        result = subprocess.run(
            [sys.executable, "-m", "nbgrader", "generate_assignment", name, "--force", "--log-level=ERROR"],
            cwd=out, capture_output=True, text=True, env=nbgrader_env())
        if result.returncode != 0:
            raise SystemExit(f"nbgrader could not generate {name}:\n{result.stdout}{result.stderr}")
    released = sorted((out / "release").glob("*/*.ipynb"))
    for path in released:
        without_instructor_notes(path)
        colab.add_bootstrap(path)
    return released


def without_instructor_notes(path: pathlib.Path) -> None:
    """Drop each cell's `metadata.course` (the answer's written forms, what the statement gives): it is
    for the course's tests, and a learner can read a cell's metadata."""
    import nbformat  # here, as in colab.py: only releasing needs it
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        cell.metadata.pop("course", None)
    nbformat.write(nb, path)


def generate_extra(root: pathlib.Path, name: str, out: pathlib.Path) -> pathlib.Path:
    """A notebook that is not an assignment, as released: outputs cleared, the Colab first cell added."""
    import nbformat  # here, as in colab.py: only releasing needs it
    nb = nbformat.read(extra_source(root, name), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    path = out / f"{name}.ipynb"
    nbformat.write(colab.with_bootstrap(nb), path)
    return path


def stale_notebooks(root: pathlib.Path, released: list) -> list:
    """Names of notebooks/ files that differ from a fresh release (or are missing)."""
    stale = []
    for path in released:
        shipped = root / "notebooks" / path.name
        if not shipped.exists() or json.loads(shipped.read_text()) != json.loads(path.read_text()):
            stale.append(path.name)
    return stale


def release(root: pathlib.Path, names: list, check: bool) -> int:
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.exists() else ""
    names = names or assignments(root) + list(EXTRAS)
    with tempfile.TemporaryDirectory() as tmp:
        graded = [n for n in names if n not in EXTRAS]
        released = generate(root, graded, pathlib.Path(tmp)) if graded else []
        released += [generate_extra(root, n, pathlib.Path(tmp)) for n in names if n in EXTRAS]
        if check:
            stale = stale_notebooks(root, released)
            for name in stale:
                print(f"notebooks/{name} is stale: run `make release` to regenerate it from solutions/")
            if colab.with_current_links(text) != text:
                stale.append("README.md")
                print(f"README.md's Open in Colab links do not point at {colab.REPOSITORY} ({colab.BRANCH}): "
                      "run `make release`")
            return 1 if stale else 0
        (root / "notebooks").mkdir(exist_ok=True)
        for path in released:
            shutil.copy(path, root / "notebooks" / path.name)
            print(f"wrote notebooks/{path.name}")
    if colab.with_current_links(text) != text:
        readme.write_text(colab.with_current_links(text), encoding="utf-8")
        print(f"README.md: Open in Colab links now point at {colab.REPOSITORY} ({colab.BRANCH})")
    return 0


def grade(args) -> int:
    from autograder.grader import classgrade, report
    from autograder.grader.sandbox import Limits

    root = args.root.resolve()
    names = args.notebooks or assignments(root)
    workers = classgrade.default_workers() if args.workers is None else args.workers
    limits = Limits(cell_seconds=args.cell_seconds, submission_seconds=args.submission_seconds,
                    memory_mb=args.memory_mb, threads=classgrade.kernel_threads(workers),
                    unsandboxed=args.unsandboxed)
    began = time.monotonic()
    result = classgrade.grade_class(root, names, workers=workers, scheduler=args.scheduler, limits=limits,
                                    zips=args.zips, progress=not args.quiet, plain=args.plain,
                                    worker_memory_mb=args.worker_memory_mb)
    minutes = (time.monotonic() - began) / 60
    files = report.write_report(classgrade.scores(root, names), args.report or root / "reports",
                                outcomes=result.outcomes.values(), zip_ids=result.zip_ids)
    total, failed = len(result.outcomes), len(result.not_graded())
    print("report: " + ", ".join(str(f) for f in files))
    print(f"graded {total - failed} of {total} submissions in {minutes:.1f} min "
          f"({total / max(minutes, 1e-9):.1f} per minute); scores are in the gradebook")
    flagged = sum(bool(o.flags) for o in result.outcomes.values())
    if flagged:
        print(f"{flagged} submission{'s' * (flagged != 1)} reach{'es' * (flagged == 1)} for the grader's internals "
              "(hooks, code objects, the checks, answer keys): flags.csv in the report lists each line to read")
    if result.stopped:
        n = len(result.stopped)
        print(f"{n} submission{'s' * (n != 1)} made the grader fail (an error on its side, a worker killed) where the "
              "assignment's reference notebook passed: graded, 0 for each exercise not graded before; failures.csv "
              "says what happened")
    ours = sum(o.grader_side for o in result.not_graded())
    if failed - ours:
        print(f"{failed - ours} submission{'s' * (failed - ours != 1)} could not be graded and scored 0: "
              "failures.csv in the report says why")
    if ours:
        print(f"{ours} submission{'s' * (ours != 1)} not graded because the grader failed (nothing was written "
              "to the gradebook for them): failures.csv says why; fix it and grade them again")
    if failed:
        return NOT_ALL_GRADED
    return 0


def new(args) -> int:
    root = args.root.resolve()
    try:
        written = skeleton.lay_out(root, args.name, args.title)
    except skeleton.SkeletonError as err:
        print(f"backprop-course new: {err}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path.relative_to(root)}")
    status = release(root, [args.name], check=False)
    print(f"{args.name}: a skeleton around one example exercise (cube_backward) that the course's tests pass; "
          "docs/adding_a_notebook.md says what to replace, and which test checks each part")
    return status


def at_least_one(text: str) -> int:
    """A count that must be 1 or more (0 workers would wait for ever)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="backprop-course", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rel = commands.add_parser("release", help="regenerate notebooks/ from solutions/")
    rel.add_argument("notebooks", nargs="*", help=f"assignment names or {', '.join(EXTRAS)} (default: all)")
    rel.add_argument("--check", action="store_true", help="only report stale notebooks (exit 1 if any)")
    rel.add_argument("--root", type=pathlib.Path, default=pathlib.Path.cwd(), help="the course repository")
    gr = commands.add_parser("grade", help="grade every submission in parallel into the gradebook, with a report")
    gr.add_argument("notebooks", nargs="*", help="assignment names (default: all)")
    gr.add_argument("--root", type=pathlib.Path, default=pathlib.Path.cwd(), help="the course directory")
    gr.add_argument("--zips", type=pathlib.Path, help="a folder of <student>.zip downloads to grade")
    gr.add_argument("--workers", type=at_least_one, help="local worker processes (default: one more than the cores)")
    gr.add_argument("--scheduler", help="address of a Dask scheduler (default: a local cluster)")
    gr.add_argument("--cell-seconds", type=float, default=60.0, help="time limit of one cell")
    gr.add_argument("--submission-seconds", type=float, default=900.0, help="time limit of one notebook")
    gr.add_argument("--memory-mb", type=int, default=4096, help="memory limit of one notebook's kernel")
    gr.add_argument("--worker-memory-mb", type=int, default=3072,
                    help="memory limit of one local Dask worker (the grader's side of trusted grading)")
    gr.add_argument("--report", type=pathlib.Path, help="folder for the report (default: reports/)")
    gr.add_argument("--quiet", action="store_true", help="no progress bar")
    gr.add_argument("--plain", action="store_true",
                    help="run test cells in the student's kernel, as nbgrader does, even for notebooks "
                         "that support trusted grading")
    gr.add_argument("--unsandboxed", action="store_true",
                    help="grade even where kernels cannot be sandboxed (no bubblewrap, not Linux): students' "
                         "code then runs as you, with your files and network; never for untrusted submissions")
    nw = commands.add_parser("new", help="lay out a new notebook's skeleton (docs/adding_a_notebook.md)")
    nw.add_argument("name", help="the notebook's name: two digits, an underscore, words (10_attention)")
    nw.add_argument("title", help="its title, as the README's table and its first heading show it")
    nw.add_argument("--root", type=pathlib.Path, default=pathlib.Path.cwd(), help="the course repository")
    args = parser.parse_args(argv)
    if args.command == "grade":
        return grade(args)
    if args.command == "new":
        return new(args)
    return release(args.root.resolve(), args.notebooks, args.check)


if __name__ == "__main__":
    sys.exit(main())
