"""Run a submitted notebook so that nothing it does can stop the grading of anything else.

A submission may loop forever (even ignoring interrupts), exit its kernel (`os._exit`), eat all
memory or flood its output. nbclient alone would hang, stop at the first dead kernel or keep
every byte. Here a cell that runs too long or kills its kernel gets an error output that says
why (nbgrader scores it 0), the kernel is replaced, the cells that ran before it are replayed to
rebuild the student's definitions, and execution goes on with the next cell.
"""
import contextlib
import dataclasses
import io
import os
import subprocess
import tempfile
import threading
import time

import nbformat
import psutil
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbgrader import utils

from autograder.grader import isolation, trusted
from autograder.grader.execution import SteadyNotebookClient


@dataclasses.dataclass
class Limits:
    """What one submission may use. Seconds are wall time; memory is the kernel's resident set."""
    cell_seconds: float = 60.0
    submission_seconds: float = 900.0
    memory_mb: int = 4096
    output_chars: int = 100_000
    threads: int = 1


def error_output(ename, evalue):
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


class SandboxClient(SteadyNotebookClient):
    """nbclient with a cap on how much output one cell may keep, whose kernel may be jailed."""

    output_chars = 100_000
    jail_plan = None  # how autograder.grader.jail isolates the kernel, or None to start it plainly
    exchange = None  # the isolation.Exchange that holds the connection file

    def create_kernel_manager(self):
        self.km = isolation.IsolatedKernelManager(kernel_name=self.kernel_name, config=self.config,
                                                  plan=self.jail_plan, exchange=self.exchange)
        return self.km

    def printed(self, cell_index) -> int:
        """Characters of output the cell has sent so far, kept or not."""
        return getattr(self, "_kept", {}).get(cell_index, 0)

    def output(self, outs, msg, display_id, cell_index):
        size = len(str(msg["content"].get("text", ""))) + len(str(msg["content"].get("data", "")))
        self._kept = getattr(self, "_kept", {})
        before = self._kept.get(cell_index, 0)
        self._kept[cell_index] = before + size
        if before + size <= self.output_chars:
            return super().output(outs, msg, display_id, cell_index)
        if before <= self.output_chars:
            note = f"\n[output stopped here: a cell may keep {self.output_chars:,} characters]\n"
            outs.append(nbformat.v4.new_output("stream", name="stdout", text=note))
        return None


class MemoryWatch:
    """Kill the kernel when its processes hold more than `limit_mb` of memory; remember why."""

    def __init__(self, pid, limit_mb, interval=0.1):
        self.pid, self.limit, self.interval = pid, limit_mb * 2**20, interval
        self.exceeded = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _rss(self, process):
        try:
            return sum(p.memory_info().rss for p in [process, *process.children(recursive=True)])
        except psutil.Error:
            return 0

    def _watch(self):
        try:
            process = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self._stop.wait(self.interval):
            if self._rss(process) > self.limit:
                self.exceeded = True
                with contextlib.suppress(psutil.Error):
                    for p in [*process.children(recursive=True), process]:
                        p.kill()
                return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def kernel_env(limits):
    """The kernel's environment: the grader's, with the math libraries held to `threads`."""
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(limits.threads)
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    env["NBGRADER_EXECUTION"] = "autograde"  # as nbgrader sets it: notebooks can tell they are being graded
    return env


def _kernel_pid(client):
    provisioner = getattr(client.km, "provisioner", None)
    return getattr(getattr(provisioner, "process", None), "pid", None)


def _replay(client, nb, indices, seconds):
    """Run earlier cells again on a fresh kernel to rebuild definitions, keeping their first outputs."""
    client.timeout = seconds
    for index in indices:
        original = nb.cells[index]
        with contextlib.suppress(CellTimeoutError, DeadKernelError):
            client.execute_cell(nbformat.from_dict(dict(original, outputs=[])), index)
        nb.cells[index] = original  # nbclient stores the copy it ran; keep what the student saw first


def run_notebook(nb, limits=Limits(), trusted_names=None, hidden=()):
    """Execute `nb` in place within `limits`, in a fresh private folder; return a list of
    (cell index, problem) it met.

    With `trusted_names` (the names the answers define), test cells run here in the grader's
    process instead of the kernel, and reach student code only through calls sent to the kernel
    (see autograder/grader/trusted.py). Where the grader is root on Linux, the kernel runs as a user of
    its own that cannot see the `hidden` paths (see autograder/grader/isolation.py).
    """
    run_as = isolation.fresh_uid() if isolation.available() else None
    plan = isolation.jail_plan(run_as, hidden) if run_as is not None else None
    exchange = isolation.Exchange(run_as)
    try:
        with tempfile.TemporaryDirectory(prefix="submission-") as workdir:
            isolation.prepare_workdir(workdir, run_as)
            return _run_cells(nb, limits, workdir, trusted_names, plan, exchange)
    finally:
        exchange.remove()


def _run_cells(nb, limits, workdir, trusted_names, plan, exchange):
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    deadline = time.monotonic() + limits.submission_seconds
    env = isolation.kernel_env(kernel_env(limits), workdir)
    replayable, problems, position = [], [], 0
    while position < len(code):
        client = SandboxClient(nb, timeout=limits.cell_seconds, allow_errors=True, interrupt_on_timeout=False,
                               kernel_name="python3", resources={"metadata": {"path": str(workdir)}})
        client.output_chars, client.jail_plan, client.exchange = limits.output_chars, plan, exchange
        with client.setup_kernel(env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
            with MemoryWatch(_kernel_pid(client), limits.memory_mb) as watch:
                _replay(client, nb, replayable, limits.cell_seconds)
                while position < len(code):
                    index = code[position]
                    position += 1
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        problem = f"not run: the submission used its whole {limits.submission_seconds:g} s"
                        nb.cells[index].outputs = [error_output("SubmissionTimeLimit", problem)]
                        problems.append((index, problem))
                        continue
                    client.timeout = min(limits.cell_seconds, remaining)
                    graded_here = trusted_names is not None and utils.is_grade(nb.cells[index])
                    try:
                        if graded_here:
                            _grade_here(client, nb, index, trusted_names, exchange)
                        else:
                            client.execute_cell(nb.cells[index], index)
                    except (CellTimeoutError, trusted.KernelDied) as err:
                        timed_out = isinstance(err, CellTimeoutError) or err.timed_out
                        if timed_out:
                            problem = f"stopped after {client.timeout:g} s: does a loop never end?"
                            name = "CellTimeLimit"
                        else:
                            problem, name = _death(watch, limits), "KernelDied"
                        nb.cells[index].outputs.append(error_output(name, problem))
                        problems.append((index, problem))
                        break
                    except DeadKernelError:
                        problem = _death(watch, limits)
                        nb.cells[index].outputs.append(error_output("KernelDied", problem))
                        problems.append((index, problem))
                        break
                    if not utils.is_grade(nb.cells[index]):
                        replayable.append(index)
                    elif client.printed(index) > limits.output_chars:
                        problem = f"the cell printed {client.printed(index):,} characters; at most {limits.output_chars:,} are allowed"
                        nb.cells[index].outputs.append(error_output("OutputLimit", problem))
                        problems.append((index, problem))
    return problems


def _death(watch, limits):
    return (f"the cell used more than {limits.memory_mb} MB of memory" if watch.exceeded
            else "the cell ended the Python process (os._exit, a crash, or a signal)")


def _grade_here(client, nb, index, names, exchange):
    """Run a test cell in this process; its verdict becomes the cell's output, as if it had run."""
    cell = nb.cells[index]
    cell.outputs = []
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        error = trusted.run_grade_cell(cell.source, names, trusted.Remote(client, nb, index, exchange))
    if printed.getvalue():
        cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=printed.getvalue()))
    if error is not None:
        cell.outputs.append(error_output(type(error).__name__, str(error)))
