"""One submission's grading, as a worker of class grading runs it (`autograder.grader.classgrade` sends it there).

On the worker, in the grader's own process (the student's code runs only in the sandboxed kernel): the
by-hand judge reads the sanitized notebook (`autograder.grader.judge`: the answer program, the verdicts)
and the flags read it too (`autograder.grader.flags`), then the notebook runs in a sandbox, the by-hand
exercises first. What comes back is data: the executed notebook, its verdicts and flags, and the time
each part took, for the benchmark's phases.
"""
import pathlib
import threading
import time

import nbformat
from nbgrader import utils

from autograder.grader import flags, judge, keys, recording, trusted
from autograder.grader.sandbox import ByHandFirst, Limits, run_notebook, thread_pool

# The grader's side of a submission is not thread-safe (test cells redirect stdout, references draw from
# the global RNG): a worker process with several threads (a --scheduler cluster's) grades one at a time.
ONE_SUBMISSION_AT_A_TIME = threading.Lock()
GRADING_STARTED = "course-grading-started"  # the topic of the event a worker logs as it begins to grade a task


def execute_submission(nb_json: str, limits: dict, trusted_names=None, hidden=(), answer_key=None,
                       course_root=None, assignment=None) -> dict:
    """Run on a worker: judge one sanitized notebook, then execute it in a sandbox, in a private folder.

    `trusted_names`: for a notebook graded in trusted mode, the names its answers define;
    `hidden`: paths the kernel must never reach (see autograder/grader/isolation.py); `answer_key`
    (plain mode only): the notebook's answer key, which its hidden tests load in the kernel;
    `course_root`: the course the run was given, where trusted test cells find answer keys (the
    worker's working directory may be anywhere). With `assignment`, the notebook is judged (its
    `verdicts` and `flags` come back) and its by-hand exercises are graded first, in the fresh kernel,
    after the answer program alone. Every output is capped before the notebook leaves the worker. Where
    the grader's side raised (trusted.GraderFailure or anything else), the notebook comes back as far as
    it ran, with `failure`: the cause, this worker, and the grade cells that gave no verdict of their
    own; whose failure it was, a control decides (`classgrade._Grading`).
    """
    began, problems, failure, judged = time.monotonic(), [], None, {}
    with ONE_SUBMISSION_AT_A_TIME:
        worker = grading_starts()
        nb = nbformat.reads(nb_json, as_version=4)
        waiting = nbformat.v4.new_output("error", ename="NotReached", evalue="", traceback=[])
        code = [cell for cell in nb.cells if cell.cell_type == "code"]
        for cell in code:
            cell.outputs = [waiting]  # a cell that runs loses it: whatever still holds it was never reached
        try:
            judged, first = judged_first(nb, course_root, assignment)
            with keys.grading_root(course_root):
                problems = run_notebook(nb, Limits(**limits), trusted_names=trusted_names, hidden=hidden,
                                        answer_key=answer_key, pool=thread_pool(),  # the next kernel starts meanwhile
                                        first=first)
        except Exception as err:  # ours, or a submission's doing: the control says which
            failure = {"cause": cause(err), "worker": worker, "unfinished": _unfinished(nb, waiting)}
    for cell in code:
        cell.outputs = [out for out in cell.outputs if out is not waiting]
    recording.bound_outputs(nb)
    return {"notebook": nbformat.writes(nb), "problems": [(i, recording.capped(p)) for i, p in problems],
            "seconds": time.monotonic() - began, "failure": failure, **judged}


def judged_first(nb, course_root, assignment) -> tuple:
    """({"verdicts", "flags", "judge_seconds"}, ByHandFirst) of a notebook about to run; ({}, None) without
    its course or assignment."""
    if course_root is None or assignment is None:
        return {}, None
    began = time.monotonic()
    base = judge.baseline(pathlib.Path(course_root), assignment)
    examination = judge.examine(nb, base)
    verdicts = judge.cell_verdicts(nb, base, examination)
    flagged = flags.scan(nb, base, examination)
    first = ByHandFirst(tuple(examination.program), tuple(examination.by_hand), tuple(
        (i, verdicts[nb.cells[i].metadata.nbgrader.grade_id]) for i in examination.by_hand
        if nb.cells[i].metadata.nbgrader.grade_id in verdicts))
    return {"verdicts": verdicts, "flags": flagged, "judge_seconds": time.monotonic() - began}, first


def by_hand_first(nb, course_root, assignment):
    """What the fresh kernel runs and grades first: the by-hand answers' program and grade cells (or None)."""
    return judged_first(nb, course_root, assignment)[1]


def cause(err) -> str:
    """What failed, in one capped line (a GraderFailure already names the error it stands for)."""
    text = str(err) if isinstance(err, trusted.GraderFailure) else f"{type(err).__name__}: {err}"
    return recording.capped(text)


def grading_starts():
    """Tell the scheduler that this worker begins to grade this task; return its address (None outside a worker).
    Dask gives up on a task whose workers died twice while it was theirs, whether it ran there or only waited its
    turn: this says which it was (`classgrade._was_grading`)."""
    from distributed import get_worker
    try:
        worker = get_worker()
    except ValueError:
        return None
    worker.log_event(GRADING_STARTED, {"task": str(worker.get_current_task()), "worker": worker.address})
    return worker.address


def _unfinished(nb, waiting) -> list:
    """Indices of the grade cells that gave no verdict of their own when the grader's side raised: those never
    reached, and the one that was running (the last reached) unless it holds an error, its verdict."""
    code = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    reached = [i for i in code if not any(out is waiting for out in nb.cells[i].outputs)]
    running = [i for i in reached[-1:] if not any(out.get("output_type") == "error" for out in nb.cells[i].outputs)]
    return [i for i in code if (i not in reached or i in running) and utils.is_grade(nb.cells[i])]
