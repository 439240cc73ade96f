"""Execute every solution notebook once and print its wall time and the total.

Run from the repository root: `make benchmark` (or `.venv/bin/python benchmarks/course_runtime.py`).
"""
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


def run(path: pathlib.Path, workdir: str) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    SteadyNotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": workdir}}).execute()
    return time.perf_counter() - start


def main() -> None:
    notebooks = sorted((ROOT / "solutions").glob("*/*.ipynb"))
    device = "CUDA " + torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, {device}, "
          f"Python {sys.version.split()[0]}, torch {torch.__version__}")
    total = 0.0
    with tempfile.TemporaryDirectory() as workdir:
        os.environ.setdefault("COURSE_PROGRESS", str(pathlib.Path(workdir) / "progress.json"))
        os.environ.setdefault("COURSE_ROOT", str(ROOT))  # hidden tests load answer keys from the course
        for path in notebooks:
            seconds = run(path, workdir)
            total += seconds
            print(f"{path.stem:<24} {seconds:6.1f} s  (kernel start included)")
    print(f"{'total':<24} {total:6.1f} s")


if __name__ == "__main__":
    main()
