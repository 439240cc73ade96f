"""Grade a whole class: every submission of one or all notebooks, in parallel, into nbgrader's gradebook.

Three steps. (1) Here, one submission at a time: its file is read without following links and
within a size limit, parsed, and rebuilt from the assignment's source as nbgrader's autograde
would sanitize it (`autograder.grader.submissions`, `autograder.grader.sanitize`); a file that
cannot be read is that student's 0, with the reason. (2) On Dask workers, in parallel: each
notebook runs in a sandbox (`autograder.grader.sandbox`) with time, memory and output limits;
a local Dask cluster by default (TLS on loopback, workers with a memory limit), any scheduler's
address to spread over machines. (3) Here again, as each notebook comes back: its scores go
into the gradebook in one session and its autograded copy into autograded/
(`autograder.grader.recording`), so `nbgrader export`, `generate_feedback` and the formgrader
work as usual. The cluster starts in the background while step (1) runs.
"""
import concurrent.futures
import contextlib
import dataclasses
import ipaddress
import logging
import os
import pathlib
import sys
import tempfile
import threading
import time
import urllib.parse

import nbformat
from nbgrader import utils
from nbgrader.api import Gradebook, MissingEntry

from autograder.grader import cgroup, flags, isolation, keys, recording, sanitize, submissions, trusted
from autograder.grader.nbgrader_run import nbgrader_runner, with_scripts_on_path
from autograder.grader.sandbox import Limits, run_notebook, thread_pool

WORKER_MEMORY_MB = 3072  # the grader's side of a worker (trusted test cells); kernels have their own limit
# The grader's side of a submission is not thread-safe (test cells redirect stdout, references draw from
# the global RNG): a worker process with several threads (a --scheduler cluster's) grades one at a time.
_ONE_SUBMISSION_AT_A_TIME = threading.Lock()


def default_workers() -> int:
    """One worker more than there are cores: a kernel spinning out a wall-clock limit (a loop that
    never ends) then takes a share of a core instead of a whole one, so the rest of the class goes
    on (measured on 2 cores, 40 students of one notebook: 199 s against 236 s with 2 workers)."""
    return (os.cpu_count() or 1) + 1


def kernel_threads(workers: int) -> int:
    """Threads each kernel may use, so that the workers' kernels together fit the cores."""
    return max(1, (os.cpu_count() or 1) // workers)


@dataclasses.dataclass
class ClassResult:
    """Every (student, assignment) this run met, and the student ids it gave to zip files."""
    outcomes: dict  # (student, assignment) -> recording.Outcome
    zip_ids: dict  # zip file name -> student id
    seconds: dict = dataclasses.field(default_factory=dict)  # where the run's time went, by phase
    run: str | None = None  # the token of its folder and control groups (a local cluster's run)

    def not_graded(self) -> list:
        return [o for o in self.outcomes.values() if not o.graded]


def db_url(root: pathlib.Path) -> str:
    return f"sqlite:///{root / 'gradebook.db'}"


def open_gradebook(root: pathlib.Path) -> Gradebook:
    with with_scripts_on_path():
        return Gradebook(db_url(root), recording.course_config(root).CourseDirectory.get("course_id", ""))


def ensure_in_gradebook(root: pathlib.Path, names: list, run) -> None:
    """Add an assignment nbgrader has not seen (generate_assignment), as an instructor would."""
    known = set()
    if (root / "gradebook.db").exists():
        with open_gradebook(root) as gb:
            known = {a.name for a in gb.assignments}
    for name in names:
        if name not in known:
            run("generate_assignment", name, "--force")


def prepare(root: pathlib.Path, sub: submissions.Submission, source) -> tuple:
    """(the notebook to run, notes): read safely, parsed, rebuilt from the source; or NotGradable."""
    label = submissions.describe(sub.path.relative_to(root))
    nb = submissions.parse_notebook(submissions.read_bounded(sub.path, label=label), label)
    return sanitize.restore(nb, source)


def execute_submission(nb_json: str, limits: dict, trusted_names=None, hidden=(), answer_key=None,
                       course_root=None) -> dict:
    """Run on a worker: execute one sanitized notebook in a sandbox, in a private folder.

    `trusted_names`: for a notebook graded in trusted mode, the names its answers define;
    `hidden`: paths the kernel must never reach (see autograder/grader/isolation.py); `answer_key`
    (plain mode only): the notebook's answer key, which its hidden tests load in the kernel;
    `course_root`: the course the run was given, where trusted test cells find answer keys (the
    worker's working directory may be anywhere). Every output is capped before the notebook
    leaves the worker. Raises trusted.GraderFailure where the grader's side failed.
    """
    nb = nbformat.reads(nb_json, as_version=4)
    began = time.monotonic()
    with _ONE_SUBMISSION_AT_A_TIME, keys.grading_root(course_root):
        problems = run_notebook(nb, Limits(**limits), trusted_names=trusted_names, hidden=hidden,
                                answer_key=answer_key, pool=thread_pool())  # the next kernel starts meanwhile
    recording.bound_outputs(nb)
    return {"notebook": nbformat.writes(nb), "problems": [(i, recording.capped(p)) for i, p in problems],
            "seconds": time.monotonic() - began}


def _security():
    """Self-signed TLS for the local cluster (mutual authentication: only its own members connect)."""
    from distributed.security import Security
    try:
        return Security.temporary()
    except ImportError:  # `cryptography` missing: loopback only, unauthenticated
        print("note: install `cryptography` so the local Dask cluster authenticates its members (TLS)",
              file=sys.stderr)
        return Security()


def _warn_if_open(address: str) -> None:
    parsed = urllib.parse.urlparse(address if "://" in address else f"tcp://{address}")
    try:
        loopback = ipaddress.ip_address(parsed.hostname or "").is_loopback
    except ValueError:
        loopback = parsed.hostname == "localhost"
    if parsed.scheme != "tls" and not loopback:
        print(f"warning: {address} is not a tls:// address: anyone who reaches it can run code on your workers "
              "(see the README, 'Securing a Dask cluster')", file=sys.stderr)


@contextlib.contextmanager
def dask_client(workers: int, scheduler: str | None, memory_mb: int = WORKER_MEMORY_MB):
    """A client of the given scheduler (its security from Dask's configuration), or of a local
    cluster of `workers` processes that listens on loopback only, with TLS, no dashboard and no
    HTTP routes, each worker restarted past `memory_mb` (its task then fails: that submission only)."""
    import dask
    from distributed import Client, LocalCluster
    if scheduler:
        _warn_if_open(scheduler)
        client = Client(scheduler)  # not `with`: BackgroundClient enters and leaves it in different threads
        try:
            yield client
        finally:
            client.close()
        return
    quiet = {"distributed.scheduler.http.routes": [], "distributed.worker.http.routes": []}
    with dask.config.set(quiet):  # read as the scheduler and the nannies are built (workers get a copy)
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address=None, security=_security(), memory_limit=f"{memory_mb}MiB",
                               scheduler_kwargs={"allowed_failures": 1, "dashboard_address": "127.0.0.1:0"},
                               silence_logs=logging.ERROR)
    with cluster:
        client = Client(cluster)
        try:
            yield client
        finally:
            client.close()


class BackgroundClient:
    """Starts `dask_client` in a thread, so the cluster boots while submissions are read."""

    def __init__(self, workers, scheduler, memory_mb):
        self._stack = contextlib.ExitStack()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self._future = self._pool.submit(self._stack.enter_context, dask_client(workers, scheduler, memory_mb))

    def get(self):
        return self._future.result()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        with contextlib.suppress(Exception):
            self._future.result()
        self._pool.shutdown()
        self._stack.close()


def trusted_names(root: pathlib.Path, name: str):
    """The names the answers of `name` define, if its source opts in to trusted grading; else None."""
    source = nbformat.read(root / "solutions" / name / f"{name}.ipynb", as_version=4)
    if not trusted.opted_in(source):
        return None
    return trusted.student_names(c.source for c in source.cells if c.cell_type == "code" and utils.is_solution(c))


def _record(recorder, outcomes, key, *, executed=None, source=None, reason="", notes=(), seconds=0.0,
            grader_side=False, flagged=()):
    """Record one submission; a failure to record it is that submission's problem only.

    `reason` without `executed`: not graded. Its files were at fault (the student's 0, with the
    reason in the gradebook), or with `grader_side` the grader was (a missing answer key, a worker
    that died): then nothing is written to the gradebook, whatever it held stands, and the report
    says to grade it again."""
    student, assignment = key
    if executed is not None:
        try:
            messages = recorder.graded(student, assignment, executed, source)
            outcomes[key] = recording.Outcome(student, assignment, True, notes=list(notes), messages=messages,
                                              seconds=seconds, flags=list(flagged))
            return
        except Exception as err:  # a database or file error here must not stop the class
            recorder.gb.db.rollback()
            reason, grader_side = f"its scores could not be recorded ({type(err).__name__}: {err})", True
    if not grader_side:
        recorder.not_graded(student, assignment, reason)
    outcomes[key] = recording.Outcome(student, assignment, False, reason=recording.capped(reason),
                                      grader_side=grader_side, notes=list(notes), seconds=seconds,
                                      flags=list(flagged))


def grade_class(root: pathlib.Path, names: list, *, workers: int, scheduler=None, limits: Limits | None = None,
                zips=None, progress=True, run=None, plain=False,
                worker_memory_mb: int = WORKER_MEMORY_MB) -> ClassResult:
    """Grade every submission of `names` into the gradebook; return what happened to each.

    Notebooks that opt in are graded in trusted mode (test cells run here, see
    autograder/grader/trusted.py) unless `plain`.
    """
    from distributed import as_completed
    from tqdm import tqdm

    limits = limits or Limits()
    run = run or nbgrader_runner(root)
    isolation.require(limits.unsandboxed)  # no sandbox: stop before anything runs, unless explicitly accepted
    outcomes, zip_ids, problems = {}, {}, []
    clock = Phases()
    with _run_folder(local=scheduler is None) as run_token, \
            BackgroundClient(workers, scheduler, worker_memory_mb) as background:
        with clock("read, check and rebuild submissions"):
            if zips:
                problems, zip_ids = submissions.unpack_zips(pathlib.Path(zips), root, names)
            ensure_in_gradebook(root, names, run)
            recorder = recording.Recorder(root)
        try:
            with clock("read, check and rebuild submissions"):
                sources = {name: sanitize.load_source(recorder.gb, name) for name in names}
                jobs, blocked, unrecorded = _prepare_all(root, names, sources, problems)
            with clock("record submissions not graded"):
                for key, reason in blocked.items():
                    if key in unrecorded:  # a student id the gradebook cannot hold: reported only
                        outcomes[key] = recording.Outcome(*key, False, reason=recording.capped(reason))
                    else:
                        _record(recorder, outcomes, key, reason=reason)
            names_of = {name: None if plain else trusted_names(root, name) for name in names}
            hidden = [str(p) for p in isolation.secrets_of(root)]
            key_paths = {name: str(key) if plain and (key := keys.key_path(name, root)).is_file() else None
                         for name in names}
            futures = {}
            if jobs:
                with clock("wait for the cluster to start"):
                    client = background.get()
                for key, nb, notes, flagged in jobs:
                    future = client.submit(execute_submission, nbformat.writes(nb), dataclasses.asdict(limits),
                                           names_of[key[1]], hidden, key_paths[key[1]], str(root), pure=False)
                    futures[future] = (key, nb, notes, flagged)
            bar = tqdm(total=len(futures), unit="notebook", desc="grading", disable=not progress, file=sys.stdout)
            with clock("run notebooks (parallel), recording each as it returns"):
                for future in as_completed(futures):
                    key, nb, notes, flagged = futures[future]
                    with clock("  of which recording scores"):
                        _collect(future, key, nb, notes, flagged, recorder, outcomes, sources)
                    bar.set_postfix_str(f"{key[0]}/{key[1]} {outcomes[key].seconds:.1f} s")
                    bar.update()
            bar.close()
        finally:
            recorder.close()
    return ClassResult(outcomes, zip_ids, clock.seconds, run_token)


@contextlib.contextmanager
def _run_folder(local: bool):
    """The local cluster's workers make every kernel's exchange folder in one folder of this run's,
    and every control group with this run's token, both removed afterwards with whatever is mounted
    or runs in them: a worker that died, or kept a spare kernel, leaves nothing behind. Workers read
    the environment when they start, inside the block. Yields the run's token (None with a scheduler)."""
    if not local:
        yield None
        return
    folder = pathlib.Path(tempfile.mkdtemp(prefix="course-grade-"))
    run = folder.name.removeprefix("course-grade-")
    before = {name: os.environ.get(name) for name in ("TMPDIR", cgroup.RUN_ENV_VAR)}
    os.environ.update({"TMPDIR": str(folder), cgroup.RUN_ENV_VAR: run})
    try:
        yield run
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        cgroup.remove_run(run)  # the groups of spare kernels a worker started ahead and never used
        isolation.remove_folder(folder)


class Phases:
    """Wall time spent in named phases (a phase may be entered several times)."""

    def __init__(self):
        self.seconds = {}

    @contextlib.contextmanager
    def __call__(self, name):
        began = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - began


def released_lines(root: pathlib.Path, name: str) -> set:
    """The lines of the notebook students were given (release/, else the source): not theirs to flag."""
    for path in (root / "release" / name / f"{name}.ipynb", root / "solutions" / name / f"{name}.ipynb"):
        if path.is_file():
            return flags.released_lines(nbformat.read(path, as_version=4))
    return set()


def _prepare_all(root, names, sources, problems) -> tuple:
    """([(key, notebook to run, notes, flags)], {key: why it cannot be graded}, {keys never to record in
    the gradebook}) for every submission."""
    found, more = submissions.find_submissions(root, names)
    blocked, released = {}, {}
    for problem in problems + more:
        blocked.setdefault((problem.student, problem.assignment), problem.reason)
    unrecorded = {(p.student, p.assignment) for p in problems + more if not p.recorded}
    jobs = []
    for sub in found:
        key = (sub.student, sub.assignment)
        if key in blocked:
            continue
        try:
            nb, notes = prepare(root, sub, sources[sub.assignment])
            if sub.assignment not in released:
                released[sub.assignment] = released_lines(root, sub.assignment)
            flagged = flags.scan(nb, released[sub.assignment])
        except submissions.NotGradable as err:
            blocked[key] = str(err)
            continue
        except Exception as err:  # whatever else one file does, it is that submission's problem only
            blocked[key] = recording.capped(f"could not be prepared for grading ({type(err).__name__}: {err})")
            continue
        jobs.append((key, nb, notes, flagged))
    return jobs, blocked, unrecorded


def _collect(future, key, nb, notes, flagged, recorder, outcomes, sources):
    """Record what a worker returned for one submission (or why it returned nothing)."""
    try:
        result = future.result()
        executed = recording.merged(nb, nbformat.reads(result["notebook"], as_version=4))
    except trusted.GraderFailure as err:  # the grader's own side: not graded, with the cause
        _record(recorder, outcomes, key, reason=f"the grader failed, not the submission: {err}", notes=notes,
                grader_side=True, flagged=flagged)
    except Exception as err:  # a worker died or failed while it ran this submission: not graded, the run goes on
        _record(recorder, outcomes, key, reason=f"the grading worker failed: {type(err).__name__}: {err}", notes=notes,
                grader_side=True, flagged=flagged)
    else:
        _record(recorder, outcomes, key, executed=executed, source=sources[key[1]], notes=notes, flagged=flagged,
                seconds=result["seconds"])


def scores(root: pathlib.Path, names: list) -> list:
    """One row per student x exercise from the gradebook, with the failure message if any."""
    rows = []
    config = recording.course_config(root)
    ignore = config.IgnorePattern.get("pattern") if config.IgnorePattern.get("enabled") else None
    with open_gradebook(root) as gb:
        for name in names:
            try:
                assignment = gb.find_assignment(name)
            except MissingEntry:
                continue
            for submission in assignment.submissions:
                student, notebook = submission.student.id, submission.notebooks[0]
                messages = failure_messages(root, student, name, ignore)
                not_graded = next((c.auto_comment for c in notebook.comments
                                   if (c.auto_comment or "").startswith("Not graded:")), None)
                for grade in sorted(notebook.grades, key=lambda g: g.name):
                    if grade.max_score == 0:
                        continue
                    message = not_graded or messages.get(grade.name, "")
                    rows.append({"student": student, "notebook": name, "exercise": grade.name,
                                 "score": grade.score, "max_score": grade.max_score,
                                 "message": recording.capped(message)})
    return rows


def failure_messages(root: pathlib.Path, student: str, name: str, ignore: str | None = None) -> dict:
    """{grade_id: why the cell lost its points} from the autograded notebook."""
    path = root / "autograded" / student / name / f"{name}.ipynb"
    try:
        nb = nbformat.reads(submissions.read_bounded(path).decode("utf-8"), as_version=4)
    except (submissions.NotGradable, UnicodeDecodeError, ValueError):
        return {}
    found = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and utils.is_grade(cell) and not utils.is_solution(cell):
            _, message = recording.cell_score(cell, float(cell.metadata.nbgrader.get("points") or 0), ignore)
            if message:
                found[cell.metadata.nbgrader.grade_id] = message
    return found
