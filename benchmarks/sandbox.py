"""What the kernel sandbox costs: kernel start, and one notebook's grading, with and without it.

Run from the repository root (as root, or where unprivileged user namespaces are allowed):
`.venv/bin/python benchmarks/sandbox.py [--repeats 7] [NOTEBOOK]`. Prints, as medians with the
middle half of the runs (interleaved rounds, `autograder.learner.timing`):
- the time from starting a kernel to its first answer (kernel_info), in a bubblewrap sandbox
  and plainly (jupyter_client, the same environment);
- one solution notebook (default 01_chain_rule) executed as grading does (trusted mode), in the
  sandbox, in the sandbox with a kernel pool (the kernel for the next run starts, and imports
  torch, while the others run: a worker grading back to back), unsandboxed
  (`Limits(unsandboxed=True)`), and by bare nbclient in plain mode.
"""
import argparse
import asyncio
import os
import pathlib
import subprocess
import sys
import tempfile

import nbformat
from jupyter_client.manager import AsyncKernelManager

from autograder.grader import isolation, trusted
from autograder.grader.execution import SteadyNotebookClient
from autograder.grader.sandbox import KernelPool, Limits, run_notebook
from autograder.learner import timing

ROOT = pathlib.Path(__file__).resolve().parent.parent


def kernel_start(sandboxed):
    """Start a kernel, wait for its first answer, shut it down."""
    async def start():
        sandbox = isolation.Sandbox(Limits(), sandboxed=sandboxed)
        km = isolation.SandboxedKernelManager(kernel_name="python3", sandbox=sandbox) if sandboxed else \
            AsyncKernelManager(kernel_name="python3")
        try:
            quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
            await km.start_kernel(**quiet, **({} if sandboxed else {"env": sandbox.env, "cwd": sandbox.workdir}))
            kc = km.client()
            kc.start_channels()
            await kc.wait_for_ready(timeout=60)
            kc.stop_channels()
        finally:
            await km.shutdown_kernel(now=True)
            sandbox.end()
    asyncio.run(start())


def grade(nb, names, limits, pool=None):
    run_notebook(nbformat.from_dict(nb), limits, trusted_names=names, pool=pool)


def bare(nb):
    with tempfile.TemporaryDirectory() as workdir:
        SteadyNotebookClient(nbformat.from_dict(nb), timeout=60, allow_errors=True, kernel_name="python3",
                             resources={"metadata": {"path": workdir}}).execute()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", nargs="?", default="01_chain_rule")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    why = isolation.problem()
    if why:
        return f"no sandbox here: {why}"
    print(f"machine: {os.uname().machine}, {os.cpu_count()} cores, Python {sys.version.split()[0]}")

    starts = timing.wall_times({"sandboxed": lambda: kernel_start(True), "plain": lambda: kernel_start(False)},
                               repeats=args.repeats, device="cpu")
    print("kernel start to first answer:")
    print("  " + timing.verdict("sandboxed", starts["sandboxed"], "plain", starts["plain"]))

    nb = nbformat.read(ROOT / "solutions" / args.notebook / f"{args.notebook}.ipynb", as_version=4)
    names = trusted.student_names(c.source for c in nb.cells if c.cell_type == "code"
                                  and c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    threads = os.cpu_count() or 1
    pool = KernelPool(preload=("torch",))
    runs = timing.wall_times({
        "sandboxed": lambda: grade(nb, names, Limits(cell_seconds=120, threads=threads)),
        "sandboxed, pool": lambda: grade(nb, names, Limits(cell_seconds=120, threads=threads), pool),
        "unsandboxed": lambda: grade(nb, names, Limits(cell_seconds=120, threads=threads, unsandboxed=True)),
        "bare nbclient": lambda: bare(nb),
    }, repeats=args.repeats, device="cpu")
    print(f"{args.notebook}, graded in trusted mode (bare nbclient: plain mode, no limits):")
    for name, spread in runs.items():
        print(f"  {name:<16} {spread.describe()}")
    print("  " + timing.verdict("sandboxed", runs["sandboxed"], "unsandboxed", runs["unsandboxed"]))
    ratio = runs["sandboxed"].median / runs["bare nbclient"].median
    print(f"  sandboxed / bare nbclient, medians: {ratio:.2f}x; with a pool: "
          f"{runs['sandboxed, pool'].median / runs['bare nbclient'].median:.2f}x")
    pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
