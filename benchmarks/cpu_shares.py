"""How much a kernel that spins many processes slows the student graded beside it, with and without
the CPU limit of each kernel's control group.

Run from the repository root, as root (control groups are made only there):
`.venv/bin/python benchmarks/cpu_shares.py [--repeats 3] [--spinners 16] [--workers N]` (`--quick`:
one run of each condition, 4 spinners, 1 worker, as tests/test_benchmarks.py runs it). One honest
student, a perfect submission of 01_chain_rule, is graded as `backprop-course grade` does
(`classgrade.grade_class`: sandboxed, trusted mode, by default its workers and the CPUs per kernel
that follow from them), alone and with a neighbour: a kernel in a sandbox of its own, made as
grading makes them (the same Limits, so the same control group), whose cell starts `--spinners`
`setsid` processes that spin on the CPU. It is started before the honest student's grading and
ended after it, so it spins for the whole run. Each, with the CPU limit (the default) and without
it (`Limits(cpu_limited=False)`, the field that exists for this comparison; it applies to both
kernels). Conditions are interleaved, one round after another. Printed per condition: the honest
student's grading time as its worker measured it (median, min to max), the runs in which it lost
points, and the CPU the neighbour's group used meanwhile (its own count, in CPUs).
"""
import argparse
import contextlib
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import nbformat
from jupyter_client.utils import run_sync

from autograder.grader import classgrade, isolation
from autograder.grader.sandbox import HISTORY, Limits

ROOT = pathlib.Path(__file__).resolve().parent.parent
NAME = "01_chain_rule"
SPIN = ("import subprocess, sys\n"
        "spinners = [subprocess.Popen([sys.executable, '-c', 'while True: pass'], start_new_session=True)\n"
        "            for _ in range({})]")


def build_class(course):
    """The course with 01_chain_rule generated and one perfect submission, by student "honest"."""
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / NAME, course / "solutions" / NAME)
    classgrade.ensure_in_gradebook(course, [NAME], classgrade.nbgrader_runner(course))
    solution = nbformat.read(ROOT / "solutions" / NAME / f"{NAME}.ipynb", as_version=4)
    perfect = {c.metadata.nbgrader.grade_id: c.source for c in solution.cells
               if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")}
    nb = nbformat.read(course / "release" / NAME / f"{NAME}.ipynb", as_version=4)
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in perfect:
            cell.source = perfect[grade_id]
    folder = course / "submitted" / "honest" / NAME
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{NAME}.ipynb")


@contextlib.contextmanager
def neighbour(limits, spinners):
    """A sandboxed kernel whose `spinners` setsid processes spin until it ends; yields its control group."""
    km = isolation.SandboxedKernelManager(kernel_name="python3", sandbox=isolation.Sandbox(limits))
    kc = None
    try:
        run_sync(km.start_kernel)(extra_arguments=list(HISTORY), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        kc = km.blocking_client()
        kc.start_channels()
        kc.wait_for_ready(timeout=120)
        reply = kc.execute(SPIN.format(spinners), reply=True, timeout=120)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"the neighbour's spinners did not start: {reply['content']}")
        yield km.sandbox.cgroup
    finally:
        if kc is not None:
            kc.stop_channels()
        with contextlib.suppress(Exception):
            run_sync(km.shutdown_kernel)(now=True)
        km.sandbox.end()


def grade_honest(template, limits, workers):
    """Grade a fresh copy of the class; (the honest student's seconds, whether it lost points)."""
    with tempfile.TemporaryDirectory() as tmp:
        course = pathlib.Path(tmp) / "course"
        shutil.copytree(template, course)
        result = classgrade.grade_class(course, [NAME], workers=workers, limits=limits, progress=False)
    outcome = result.outcomes[("honest", NAME)]
    if not outcome.graded:
        raise RuntimeError(f"the honest submission was not graded: {outcome.reason}")
    return outcome.seconds, bool(outcome.messages)


def run(template, limits, workers, spinners):
    """One condition's run: (honest seconds, lost points, the neighbour's CPUs or None when alone)."""
    if not spinners:
        return (*grade_honest(template, limits, workers), None)
    with neighbour(limits, spinners) as group:
        used, began = group.cpu_seconds(), time.monotonic()
        seconds, lost = grade_honest(template, limits, workers)
        return seconds, lost, (group.cpu_seconds() - used) / (time.monotonic() - began)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--spinners", type=int, default=16)
    parser.add_argument("--workers", type=int, default=classgrade.default_workers())
    parser.add_argument("--quick", action="store_true", help="one run of each condition, 4 spinners, 1 worker")
    args = parser.parse_args()
    repeats, spinners, workers = (1, 4, 1) if args.quick else (args.repeats, args.spinners, args.workers)
    if isolation.problem():
        return f"no sandbox here: {isolation.problem()}"
    if os.geteuid() != 0:
        return "control groups (and so the CPU limit) are made only where the grader is root"
    threads = classgrade.kernel_threads(workers)
    conditions = {"alone, CPU limit": (True, 0), "alone, no CPU limit": (False, 0),
                  f"{spinners} spinners beside, CPU limit": (True, spinners),
                  f"{spinners} spinners beside, no CPU limit": (False, spinners)}
    runs = {name: [] for name in conditions}
    with tempfile.TemporaryDirectory() as tmp:
        template = pathlib.Path(tmp) / "template"
        template.mkdir()
        build_class(template)
        for _ in range(repeats):
            for name, (limited, beside) in conditions.items():
                limits = Limits(threads=threads, cpu_limited=limited)
                runs[name].append(run(template, limits, workers, beside))
    print(f"{NAME}, one perfect submission graded by backprop-course grade (trusted mode, sandboxed): "
          f"{os.cpu_count()} cores, {workers} worker(s), {threads} CPU(s) per kernel, {repeats} run(s) each")
    for name, results in runs.items():
        seconds = [s for s, _, _ in results]
        lost = sum(lost for _, lost, _ in results)
        used = [c for _, _, c in results if c is not None]
        print(f"  {name:<34} median {statistics.median(seconds):6.1f} s (min {min(seconds):.1f} to max "
              f"{max(seconds):.1f}); lost points in {lost} of {len(results)}"
              + (f"; neighbour's CPUs {statistics.median(used):.2f}" if used else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
