"""Execute every solution notebook once, print its wall time and the total, and fail (exit status 1,
naming each) where a notebook took LIMIT_S or more: the course promises that every notebook runs top to
bottom in under 30 s on a laptop CPU.

Run from the repository root: `make benchmark` (or `.venv/bin/python benchmarks/course_runtime.py [NAME ...]`
for some notebooks only).
"""
import argparse
import os
import pathlib
import platform
import sys
import tempfile
import time

import nbformat
import torch

from autograder.grader.execution import SteadyNotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
LIMIT_S = 30.0


def run(path: pathlib.Path, workdir: str) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    SteadyNotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": workdir}}).execute()
    return time.perf_counter() - start


def over_the_limit(seconds: dict) -> str:
    """'' where every notebook ran in under LIMIT_S; else a line that names each one that did not."""
    slow = [f"{name} ({s:.1f} s)" for name, s in seconds.items() if s >= LIMIT_S]
    if not slow:
        return ""
    return (f"over the course's limit of {LIMIT_S:g} s a notebook, kernel start included: " + ", ".join(slow)
            + ": make it faster (smaller cases, fewer steps) or move the slow part out of the notebook")


def notebooks(names=()) -> list:
    """Every solution notebook, and the review notebook's source, or those named."""
    found = [*sorted((ROOT / "solutions").glob("*/*.ipynb")), *sorted((ROOT / "solutions").glob("*.ipynb"))]
    unknown = set(names) - {path.stem for path in found}
    if unknown:
        raise SystemExit(f"no notebook named {', '.join(sorted(unknown))}; the course has: "
                         f"{', '.join(path.stem for path in found)}")
    return [path for path in found if not names or path.stem in names]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="notebook names, e.g. 03_vjp (default: every notebook)")
    args = parser.parse_args(argv)
    device = "CUDA " + torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, {device}, "
          f"Python {sys.version.split()[0]}, torch {torch.__version__}")
    seconds = {}
    with tempfile.TemporaryDirectory() as workdir:
        os.environ.setdefault("COURSE_PROGRESS", str(pathlib.Path(workdir) / "progress.json"))
        os.environ.setdefault("COURSE_ROOT", str(ROOT))  # hidden tests load answer keys from the course
        for path in notebooks(args.notebooks):
            seconds[path.stem] = run(path, workdir)
            print(f"{path.stem:<24} {seconds[path.stem]:6.1f} s  (kernel start included)")
    print(f"{'total':<24} {sum(seconds.values()):6.1f} s")
    problem = over_the_limit(seconds)
    if problem:
        print(problem, file=sys.stderr)
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main())
