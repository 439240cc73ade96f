"""Run solution notebooks on a loaded CPU and print every timing verdict they print, run by run.

Run from the repository root: `.venv/bin/python benchmarks/verdicts_under_load.py [--runs 2]
[--hogs N] [NOTEBOOK ...]`. Why: a notebook's verdict ("A is 1.8x faster than B, beyond the
spread", or "too noisy to tell") must survive a learner's busy laptop. While each notebook runs,
`--hogs` processes (default: one per core) spin on the CPU. Each verdict line is printed with the
run it came from; a notebook whose runs name opposite winners for the same comparison is listed
at the end as contradicting itself, and the script then exits with status 1.
"""
import argparse
import multiprocessing
import os
import pathlib
import re
import sys
import tempfile

import nbformat

from autograder.grader.execution import SteadyNotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
VERDICT = re.compile(r"(too noisy|beyond the spread)")
WINNER = re.compile(r"runs\)\. (.+?) is [\d.]+x (?:faster|smaller) than (.+?), beyond the spread")  # timing.verdict


def spin():
    while True:
        pass


def printed_lines(path, workdir):
    nb = nbformat.read(path, as_version=4)
    SteadyNotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": workdir}}).execute()
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            text = out.get("text", "") if out.get("output_type") == "stream" else ""
            for line in text.splitlines():
                yield index, line.strip()


def verdicts(path, workdir):
    """[(cell index, verdict line)] of one run of the notebook."""
    return [(i, line) for i, line in printed_lines(path, workdir) if VERDICT.search(line)]


def contradictions(runs):
    """Cells whose runs name opposite winners ("A faster than B" in one, "B faster than A" in another)."""
    found = set()
    for a in runs:
        for b in runs:
            for (cell_a, line_a), (cell_b, line_b) in zip(a, b):
                wa, wb = WINNER.search(line_a), WINNER.search(line_b)
                if cell_a == cell_b and wa and wb and (wa[1], wa[2]) == (wb[2], wb[1]):
                    found.add(cell_a)
    return sorted(found)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    names = args.notebooks or sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())
    hogs = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    print(f"{args.hogs} processes spinning on {os.cpu_count()} cores while each notebook runs")
    flipped = []
    try:
        with tempfile.TemporaryDirectory() as workdir:
            os.environ.setdefault("COURSE_PROGRESS", str(pathlib.Path(workdir) / "progress.json"))
            os.environ.setdefault("COURSE_ROOT", str(ROOT))
            for name in names:
                runs = [verdicts(ROOT / "solutions" / name / f"{name}.ipynb", workdir) for _ in range(args.runs)]
                print(f"\n{name}")
                for number, run in enumerate(runs, 1):
                    for cell, line in run:
                        print(f"  run {number}, cell {cell}: {line}")
                flipped += [f"{name} cell {cell}" for cell in contradictions(runs)]
    finally:
        for hog in hogs:
            hog.terminate()
    print("\nverdicts that contradict each other across runs: " + (", ".join(flipped) or "none"))
    return 1 if flipped else 0


if __name__ == "__main__":
    sys.exit(main())
