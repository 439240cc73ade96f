"""Grade a whole class: every submission of one or all notebooks, in parallel, into nbgrader's gradebook.

Three steps. (1) Here, one submission at a time: each notebook is sanitized as nbgrader's
autograde does it (outputs cleared, test cells restored from the gradebook). (2) On Dask
workers, in parallel: each runs in a sandbox (`autograder.grader.sandbox`) with time, memory and output
limits; a local Dask cluster by default, any scheduler's address to spread over machines.
(3) Here again, for each notebook as soon as all its submissions are back (while the workers
go on with the next notebook): `nbgrader autograde` records the scores from the executed
notebooks instead of running them a second time, so the gradebook, `nbgrader export`,
`generate_feedback` and the formgrader work as usual.
"""
import collections
import concurrent.futures
import contextlib
import dataclasses
import logging
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import zipfile

import nbformat
from nbgrader import utils
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import (
    CheckCellMetadata,
    ClearOutput,
    DeduplicateIds,
    NbGraderPreprocessor,
    OverwriteCells,
    OverwriteKernelspec,
)

from autograder.grader import isolation, trusted
from autograder.grader.sandbox import Limits, error_output, run_notebook, thread_pool

EXECUTED_ENV = "COURSE_EXECUTED_DIR"


@dataclasses.dataclass(frozen=True)
class Submission:
    student: str
    assignment: str
    path: pathlib.Path


def db_url(root: pathlib.Path) -> str:
    """The gradebook's address; opening it runs `alembic`, so this environment's scripts go on PATH."""
    from autograder.grader.cli import nbgrader_env
    os.environ["PATH"] = nbgrader_env()["PATH"]
    return f"sqlite:///{root / 'gradebook.db'}"


def find_submissions(root: pathlib.Path, names: list) -> list:
    """nbgrader's layout: submitted/<student>/<assignment>/<assignment>.ipynb."""
    found = []
    for name in names:
        for path in sorted((root / "submitted").glob(f"*/{name}/{name}.ipynb")):
            found.append(Submission(path.parent.parent.name, name, path))
    return found


def student_id(text: str) -> str:
    """A safe folder name for a student, from an LMS download's file name."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._")
    if not cleaned:
        raise ValueError(f"no usable student id in {text!r}")
    return cleaned


def unpack_zips(zips: pathlib.Path, root: pathlib.Path, names: list) -> list:
    """Each <student>.zip (an LMS download) into submitted/<student>/<assignment>/.

    A notebook inside belongs to the assignment whose name its file name contains. Members are
    read, never extracted, so a path like ../../gradebook.db in a zip cannot write anywhere.
    """
    placed = []
    for archive in sorted(zips.glob("*.zip")):
        student = student_id(archive.stem)
        with zipfile.ZipFile(archive) as z:
            for member in z.namelist():
                base = pathlib.PurePosixPath(member).name
                if not base.endswith(".ipynb") or base.startswith("."):
                    continue
                for name in names:
                    if name in base:
                        target = root / "submitted" / student / name / f"{name}.ipynb"
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(z.read(member))
                        placed.append(Submission(student, name, target))
    return placed


def ensure_in_gradebook(root: pathlib.Path, names: list, run) -> None:
    """Add an assignment nbgrader has not seen (generate_assignment), as an instructor would."""
    with Gradebook(db_url(root)) as gb:
        known = {a.name for a in gb.assignments}
    for name in names:
        if name not in known:
            run("generate_assignment", name, "--force")


class DropDuplicateIds(DeduplicateIds):
    """nbgrader's DeduplicateIds leaves a duplicated test cell with empty nbgrader metadata,
    which its own CheckCellMetadata then rejects, failing the whole notebook: drop it instead,
    so the copy runs as an ordinary cell and only the original (restored) test cell scores."""

    def preprocess_cell(self, cell, resources, index):
        cell, resources = super().preprocess_cell(cell, resources, index)
        if cell.metadata.get("nbgrader") == {}:
            del cell.metadata["nbgrader"]
        return cell, resources


SANITIZE = [ClearOutput, DropDuplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata]


def sanitized(root: pathlib.Path, sub: Submission) -> nbformat.NotebookNode:
    """The submission as nbgrader's autograde sees it before running it."""
    nb = nbformat.read(sub.path, as_version=4)
    resources = {"nbgrader": {"student": sub.student, "assignment": sub.assignment,
                              "notebook": sub.assignment, "db_url": db_url(root)}}
    for step in SANITIZE:
        nb, resources = step().preprocess(nb, resources)
    return nb


def execute_submission(nb_json: str, limits: dict, trusted_names=None, hidden=(), answer_key=None) -> dict:
    """Run on a worker: execute one sanitized notebook in a sandbox, in a private folder.

    `trusted_names`: for a notebook graded in trusted mode, the names its answers define;
    `hidden`: paths the kernel must never reach (see autograder/grader/isolation.py); `answer_key`
    (plain mode only): the notebook's answer key, which its hidden tests load in the kernel.
    """
    nb = nbformat.reads(nb_json, as_version=4)
    began = time.monotonic()
    problems = run_notebook(nb, Limits(**limits), trusted_names=trusted_names, hidden=hidden, answer_key=answer_key,
                            pool=thread_pool())  # the worker's next kernel starts while this one runs
    return {"notebook": nbformat.writes(nb), "problems": problems, "seconds": time.monotonic() - began}


def grade_ids(nb) -> list:
    return [c.metadata.nbgrader.grade_id if utils.is_grade(c) else None for c in nb.cells]


def not_graded(nb_json: str, reason: str) -> dict:
    """A result for a submission the workers could not run: every test cell fails with `reason`."""
    nb = nbformat.reads(nb_json, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and utils.is_grade(cell):
            cell.outputs = [error_output("NotGraded", f"the grading worker failed: {reason}")]
    return {"notebook": nbformat.writes(nb), "problems": [(None, reason)], "seconds": 0.0}


class Recorded(NbGraderPreprocessor):
    """Stands in for nbgrader's Execute: returns the notebook the sandbox already ran."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        path = pathlib.Path(os.environ[EXECUTED_ENV]) / info["student"] / f"{info['notebook']}.ipynb"
        executed = nbformat.read(path, as_version=4)
        if grade_ids(nb) != grade_ids(executed):
            raise RuntimeError(f"{path} does not match the sanitized submission: grade it again")
        return executed, resources


def record_scores(root: pathlib.Path, name: str, executed_dir: pathlib.Path, run) -> None:
    """nbgrader autograde, reading the executed notebooks (see nbgrader_config.py)."""
    run("autograde", name, "--create", "--force", env={EXECUTED_ENV: str(executed_dir)})


@contextlib.contextmanager
def dask_client(workers: int, scheduler: str | None):
    """A client of the given scheduler, or of a local cluster of `workers` processes."""
    from distributed import Client, LocalCluster
    if scheduler:
        with Client(scheduler) as client:
            yield client
        return
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      memory_limit=0, silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        yield client


def trusted_names(root: pathlib.Path, name: str):
    """The names the answers of `name` define, if its source opts in to trusted grading; else None."""
    source = nbformat.read(root / "solutions" / name / f"{name}.ipynb", as_version=4)
    if not trusted.opted_in(source):
        return None
    return trusted.student_names(c.source for c in source.cells if c.cell_type == "code" and utils.is_solution(c))


def grade_class(root: pathlib.Path, names: list, *, workers: int, scheduler=None, limits=Limits(),
                zips=None, progress=True, run=None, plain=False) -> dict:
    """Grade every submission of `names`; return {(student, assignment): result}.

    Notebooks that opt in are graded in trusted mode (test cells run here, see
    autograder/grader/trusted.py) unless `plain`.
    """
    from distributed import as_completed
    from tqdm import tqdm

    run = run or nbgrader_runner(root)
    if zips:
        unpack_zips(zips, root, names)
    ensure_in_gradebook(root, names, run)
    submissions = find_submissions(root, names)
    names_of = {name: None if plain else trusted_names(root, name) for name in names}
    hidden = [str(p) for p in isolation.secrets_of(root)]
    isolation.require(limits.unsandboxed)  # no sandbox: stop and say why, unless explicitly accepted
    keys = {name: str(key) if plain and (key := root / "solutions" / name / "answer_key.py").is_file() else None
            for name in names}
    results = {}
    waiting = collections.Counter(sub.assignment for sub in submissions)
    with tempfile.TemporaryDirectory(prefix="executed-") as staging, dask_client(workers, scheduler) as client, \
            concurrent.futures.ThreadPoolExecutor(max_workers=1) as recorder:
        futures, sent, recorded = {}, {}, []
        for sub in submissions:
            nb_json = sent[sub] = nbformat.writes(sanitized(root, sub))
            future = client.submit(execute_submission, nb_json, dataclasses.asdict(limits),
                                   names_of[sub.assignment], hidden, keys[sub.assignment], pure=False)
            futures[future] = sub
        bar = tqdm(total=len(futures), unit="notebook", desc="grading", disable=not progress, file=sys.stdout)
        for future in as_completed(futures):
            sub = futures[future]
            try:
                result = future.result()
            except Exception as err:  # a worker died or failed: this submission scores 0, the run goes on
                result = not_graded(sent[sub], f"{type(err).__name__}: {err}")
            target = pathlib.Path(staging) / sub.assignment / sub.student / f"{sub.assignment}.ipynb"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(result["notebook"])
            results[(sub.student, sub.assignment)] = result
            bar.set_postfix_str(f"{sub.student}/{sub.assignment} {result['seconds']:.1f} s")
            bar.update()
            waiting[sub.assignment] -= 1
            if waiting[sub.assignment] == 0:  # record this notebook's scores while the others still run
                recorded.append(recorder.submit(record_scores, root, sub.assignment,
                                                pathlib.Path(staging) / sub.assignment, run))
        bar.close()
        for done in recorded:
            done.result()
    return results


def nbgrader_runner(root: pathlib.Path):
    """A function that runs one nbgrader command in the course root and fails loudly."""
    from autograder.grader.cli import nbgrader_env

    def run(*args, env=None):
        result = subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=ERROR"], cwd=root,
                                capture_output=True, text=True, env={**nbgrader_env(), **(env or {})})
        if result.returncode != 0:
            raise SystemExit(f"nbgrader {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
        return result
    return run


def scores(root: pathlib.Path, names: list) -> list:
    """One row per student x exercise from the gradebook, with the failure message if any."""
    rows = []
    with Gradebook(db_url(root)) as gb:
        for name in names:
            try:
                assignment = gb.find_assignment(name)
            except MissingEntry:
                continue
            for submission in assignment.submissions:
                messages = failure_messages(root, submission.student.id, name)
                for grade in sorted(submission.notebooks[0].grades, key=lambda g: g.name):
                    if grade.max_score == 0:
                        continue
                    rows.append({"student": submission.student.id, "notebook": name, "exercise": grade.name,
                                 "score": grade.score, "max_score": grade.max_score,
                                 "message": messages.get(grade.name, "")})
    return rows


def failure_messages(root: pathlib.Path, student: str, name: str) -> dict:
    """{grade_id: the error's name and message} from the autograded notebook."""
    path = root / "autograded" / student / name / f"{name}.ipynb"
    if not path.exists():
        return {}
    found = {}
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "code" and utils.is_grade(cell):
            errors = [o for o in cell.outputs if o.output_type == "error"]
            if errors:
                found[cell.metadata.nbgrader.grade_id] = f"{errors[0].ename}: {errors[0].evalue}"
    return found

