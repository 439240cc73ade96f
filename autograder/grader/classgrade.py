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
work as usual. A task that failed (the grader's side raised, or its worker died) is judged by a
control, the assignment's reference notebook graded the same way (`_Grading`): "not graded" only
where that fails too. A run that stops moving (nothing finishes, no worker left) ends (`Watchdog`).
The cluster starts in the background while step (1) runs.
"""
import collections
import contextlib
import dataclasses
import os
import pathlib
import queue
import sys
import tempfile
import time

import nbformat
from nbgrader import utils
from nbgrader.api import Gradebook, MissingEntry

from autograder.grader import cgroup, flags, isolation, judge, keys, recording, sanitize, submissions, trusted
from autograder.grader.cluster import ALLOWED_FAILURES, WORKER_MEMORY_MB, BackgroundClient
from autograder.grader.grading_task import GRADING_STARTED, cause, execute_submission
from autograder.grader.nbgrader_run import nbgrader_runner, with_scripts_on_path
from autograder.grader.sandbox import Limits, error_output

# A class run ends, every submission left marked not graded, when nothing finished for longer than a submission
# may take (each try of it, plus this margin for kernels and workers to start), or when the cluster had no worker
# for WORKERLESS_S (a worker killed for memory is back within seconds).
STALL_MARGIN_S = 300.0
WORKERLESS_S = 120.0
POLL_S = 5.0  # how often a run with nothing finishing looks at its cluster


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
    stopped: dict = dataclasses.field(default_factory=dict)  # (student, assignment) -> why its grading stopped

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


def trusted_names(root: pathlib.Path, name: str):
    """The names the answers of `name` define, if its source opts in to trusted grading; else None."""
    source = nbformat.read(root / "solutions" / name / f"{name}.ipynb", as_version=4)
    if not trusted.opted_in(source):
        return None
    return trusted.student_names(c.source for c in source.cells if c.cell_type == "code" and utils.is_solution(c))


def _record(recorder, outcomes, key, *, executed=None, source=None, reason="", notes=(), seconds=0.0,
            grader_side=False, flagged=(), verdicts=None):
    """Record one submission; a failure to record it is that submission's problem only.

    `reason` without `executed`: not graded. Its files were at fault (the student's 0, with the
    reason in the gradebook), or with `grader_side` the grader was (a missing answer key, a worker
    that died): then nothing is written to the gradebook, whatever it held stands, and the report
    says to grade it again. A notebook that cannot be recorded is judged by a control, as a failed
    grading is (`_Grading`): the grader's failure only where the reference notebook fails too.
    `verdicts`: the judge's, as the worker read them ({grade_id: message}; None: read here)."""
    student, assignment = key
    if executed is not None:
        try:
            messages = recorder.graded(student, assignment, executed, source, verdicts=verdicts)
            outcomes[key] = recording.Outcome(student, assignment, True, notes=list(notes), messages=messages,
                                              seconds=seconds, flags=list(flagged))
            return
        except Exception as err:  # a database or file error, or a notebook that cannot be stored: the control says
            control = recorder.fails_to_record(student, assignment, lambda: nbformat.reads(
                control_notebook(recorder.root, assignment, source), as_version=4), source)
            grader_side = control is not None
            verdict = f"fails too: {control}" if grader_side else "can be: the cause is in this notebook"
            reason = (f"its scores could not be recorded ({cause(err)}); the assignment's reference notebook, "
                      f"recorded the same way, {verdict}")
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
            stopped = {}
            if jobs:
                with clock("wait for the cluster to start"):
                    client = background.get()

                def submit(nb_json, name, **placement):
                    return client.submit(execute_submission, nb_json, dataclasses.asdict(limits), names_of[name],
                                         hidden, key_paths[name], str(root), name, pure=False, **placement)
                patience = (_allowed_failures(client, scheduler) + 1) * limits.submission_seconds + STALL_MARGIN_S
                bar = tqdm(total=len(jobs), unit="notebook", desc="grading", disable=not progress, file=sys.stdout)
                grading = _Grading(root, client, submit, recorder, outcomes, sources, clock, bar,
                                   memory_mb=None if scheduler else worker_memory_mb)
                with clock("run notebooks (parallel), recording each as it returns"):
                    grading.run(jobs, Watchdog(patience, WORKERLESS_S))
                bar.close()
                for what, seconds in sorted(grading.worker_seconds.items()):  # summed over workers, not wall time
                    clock.seconds[f"  the workers' time on {what} (summed)"] = seconds
                stopped = grading.stopped
        finally:
            recorder.close()
    return ClassResult(outcomes, zip_ids, clock.seconds, run_token, stopped)


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


def _prepare_all(root, names, sources, problems) -> tuple:
    """([(key, notebook to run, notes)], {key: why it cannot be graded}, {keys never to record in
    the gradebook}) for every submission (its flags and the judge's verdicts are the worker's to read)."""
    found, more = submissions.find_submissions(root, names)
    blocked = {}
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
        except submissions.NotGradable as err:
            blocked[key] = str(err)
            continue
        except Exception as err:  # whatever else one file does, it is that submission's problem only
            blocked[key] = recording.capped(f"could not be prepared for grading ({type(err).__name__}: {err})")
            continue
        jobs.append((key, nb, notes))
    return jobs, blocked, unrecorded


@dataclasses.dataclass
class Failure:
    """Why a grading task gave no verdict: the grader's side raised on its worker, or its worker died."""
    cause: str
    worker: str | None = None  # where it ran: alive where it raised, gone where it was killed
    killed: bool = False  # its worker died while it ran it, on each try (Dask's KilledWorker)
    notebook: str | None = None  # the notebook as far as it ran
    unfinished: tuple = ()  # indices of its grade cells that gave no verdict of their own


def _returned(future, nb=None) -> tuple:
    """(the executed notebook merged into `nb` (None without one), seconds, None, what the worker judged), or
    (None, seconds, Failure, {}) where the task failed."""
    from distributed import KilledWorker
    try:
        result = future.result()
    except KilledWorker as err:
        tries = getattr(err, "allowed_failures", ALLOWED_FAILURES) + 1
        return None, 0.0, Failure(f"its grading worker died while it ran it, on each of {tries} tries (KilledWorker)",
                                  worker=getattr(getattr(err, "last_worker", None), "address", None), killed=True), {}
    except Exception as err:  # the task could not run, or its result not come back
        return None, 0.0, Failure(cause(err)), {}
    judged = {k: result[k] for k in ("verdicts", "flags", "judge_seconds") if k in result}
    failed = result.get("failure")
    if failed:
        return None, result["seconds"], Failure(failed["cause"], worker=failed["worker"], notebook=result["notebook"],
                                                unfinished=tuple(failed["unfinished"])), judged
    if nb is None:
        return None, result["seconds"], None, judged
    try:
        return recording.merged(nb, nbformat.reads(result["notebook"], as_version=4)), result["seconds"], None, judged
    except Exception as err:
        return None, result["seconds"], Failure(cause(err)), judged


def control_notebook(root: pathlib.Path, name: str, source) -> str:
    """The assignment's reference notebook (solutions/, answers included), rebuilt from the source as a
    submission is: graded the same way, it tells whether the grader can grade the assignment at all."""
    nb = nbformat.read(root / "solutions" / name / f"{name}.ipynb", as_version=4)
    return nbformat.writes(sanitize.restore(nb, source)[0])


def _stopped(nb, failure: Failure, message: str):
    """The submission as far as it was graded, each grade cell that gave no verdict of its own scoring 0 with
    `message` (every one, where nothing came back)."""
    executed, unfinished = recording.merged(nb, nb), range(len(nb.cells))
    if failure.notebook is not None:
        with contextlib.suppress(ValueError):
            executed, unfinished = recording.merged(nb, nbformat.reads(failure.notebook, as_version=4)), \
                set(failure.unfinished)
    for index, cell in enumerate(executed.cells):
        if index in unfinished and cell.cell_type == "code" and utils.is_grade(cell) and not utils.is_solution(cell):
            cell.outputs = [error_output("GradingStopped", message)]
    return executed


def _killed_for_memory(client, address) -> bool:
    """Whether a nanny restarted the worker at `address` for going over its memory limit (Dask logs it)."""
    try:
        events = client.get_events("worker-restart-memory")
    except Exception:
        return False
    return any(isinstance(event, dict) and event.get("worker") == address for _, event in events)


def _was_grading(client, key, address) -> bool:
    """Whether the worker at `address` had begun grading the task `key` (it says so: GRADING_STARTED)."""
    try:
        events = client.get_events(GRADING_STARTED)
    except Exception:
        return False
    return any(isinstance(event, dict) and event.get("task") == str(key) and event.get("worker") == address
               for _, event in events)


def _allowed_failures(client, scheduler) -> int:
    """How often the scheduler lets a task's worker die before it gives up on the task (KilledWorker)."""
    if scheduler is None:
        return ALLOWED_FAILURES
    try:
        return int(client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.allowed_failures))
    except Exception:
        import dask
        return int(dask.config.get("distributed.scheduler.allowed-failures"))


def _workers(client) -> int:
    """Workers in the cluster now (none where the scheduler cannot be reached)."""
    try:
        return len(client.nthreads())
    except Exception:
        return 0


class Watchdog:
    """Says when a class run has stopped moving, so that it always ends: nothing finished for `patience_s`
    (longer than a submission can take), or the cluster had no worker for `workerless_s`."""

    def __init__(self, patience_s: float, workerless_s: float, clock=time.monotonic):
        self.patience_s, self.workerless_s, self.clock = patience_s, workerless_s, clock
        self.last_moved = self.last_worker = clock()

    def moved(self):
        self.last_moved = self.clock()

    def stalled(self, workers: int) -> str | None:
        """Why the run should stop waiting, or None."""
        now = self.clock()
        if workers:
            self.last_worker = now
        if now - self.last_worker >= self.workerless_s:
            return f"the cluster had no worker for {now - self.last_worker:.0f} s"
        if now - self.last_moved >= self.patience_s:
            return f"nothing finished for {now - self.last_moved:.0f} s, longer than grading a submission may take"
        return None


class _Grading:
    """Sends every submission to the cluster and records each as it returns.

    A task that failed (the grader's side raised, or its worker died while it graded it) waits for a control:
    the assignment's reference notebook graded the same way (on the same worker where it is alive), at most once
    per assignment per run and only when needed. If the control fails too, the grader is broken: not graded, with
    both causes. If it passes, the failure was the submission's: graded, every grade cell without a verdict of its
    own at 0 with what happened (`stopped`). Dask also gives up on a task that only waited its turn on a worker
    that died twice (KilledWorker): that one is sent again, once, and never blamed."""

    def __init__(self, root, client, submit, recorder, outcomes, sources, clock, bar, memory_mb):
        self.root, self.client, self.submit, self.recorder = root, client, submit, recorder
        self.outcomes, self.sources, self.clock, self.bar, self.memory_mb = outcomes, sources, clock, bar, memory_mb
        self.finished = queue.Queue()
        self.sent = {}  # future -> (a submission's job (key, nb, notes), or an assignment for its control,
        #                            the notebook sent, whether it was sent again)
        self.verdicts = {}  # assignment -> None (its reference notebook passed) or why it failed
        self.waiting = collections.defaultdict(list)  # assignment -> [(job, Failure, seconds)] until its verdict
        self.stopped = {}  # key -> what stopped its grading (graded all the same)
        self.worker_seconds = collections.Counter()  # the workers' time, by what they did

    def _send(self, what, nb_json, again=False, **placement):
        name = what if isinstance(what, str) else what[0][1]
        future = self.submit(nb_json, name, **placement)
        self.sent[future] = (what, nb_json, again)
        future.add_done_callback(self.finished.put)

    def run(self, jobs, watchdog: Watchdog):
        for job in jobs:
            self._send(job, nbformat.writes(job[1]))
        while self.sent:
            try:
                future = self.finished.get(timeout=POLL_S)
            except queue.Empty:
                if why := watchdog.stalled(_workers(self.client)):
                    self._give_up(why)
                    return
                continue
            watchdog.moved()
            what, nb_json, again = self.sent.pop(future)
            control = isinstance(what, str)
            executed, seconds, failure, judged = _returned(future, None if control else what[1])
            self.worker_seconds["judge and flags"] += judged.get("judge_seconds", 0.0)
            self.worker_seconds["controls" if control else "submissions"] += seconds
            waited = failure is not None and failure.killed and not _was_grading(self.client, future.key,
                                                                                  failure.worker)
            if waited and not again:  # it only waited its turn on a worker that another task took down
                self._send(what, nb_json, again=True, **({"priority": 1} if control else {}))
                continue
            if control:
                self._resolve(what, None if failure is None else failure.cause)
            elif failure is None:
                self._record(what, executed=executed, source=self.sources[what[0][1]], seconds=seconds,
                             verdicts=judged.get("verdicts"), flagged=judged.get("flags"))
            elif waited:
                self._record(what, grader_side=True, reason="the grader failed, not the submission: twice, the "
                             "workers it waited on died before they began to grade it (KilledWorker)")
            else:
                self._wait_for_control(what, failure, seconds)

    def _record(self, job, notes=(), flagged=None, **what):
        """Record one submission; its flags are the worker's where it read them, else read here."""
        key, nb, own_notes = job
        with self.clock("  of which recording scores"):
            if flagged is None:
                flagged = flags.scan(nb, judge.baseline(self.root, key[1]))
            _record(self.recorder, self.outcomes, key, notes=[*own_notes, *notes], flagged=flagged, **what)
        self.bar.set_postfix_str(f"{key[0]}/{key[1]} {self.outcomes[key].seconds:.1f} s")
        self.bar.update()

    def _wait_for_control(self, job, failure, seconds):
        name = job[0][1]
        self.waiting[name].append((job, failure, seconds))
        if name in self.verdicts:
            self._resolve(name, self.verdicts[name])
            return
        if name in (what for what, _, _ in self.sent.values()):
            return
        try:
            reference = control_notebook(self.root, name, self.sources[name])
        except Exception as err:
            self._resolve(name, f"it could not be read ({cause(err)})")
            return
        alive = failure.worker if not failure.killed else None
        self._send(name, reference, priority=1, **({"workers": [alive], "allow_other_workers": True} if alive else {}))

    def _resolve(self, name, control):
        """Record every failed submission of `name` by its control's verdict (None: the reference passed)."""
        self.verdicts[name] = control
        for job, failure, seconds in self.waiting.pop(name, []):
            if control is not None:
                self._record(job, seconds=seconds, grader_side=True, reason=(
                    f"the grader failed, not the submission: {failure.cause}; the assignment's reference notebook, "
                    f"graded the same way, fails too: {control}"))
                continue
            what = self._what_happened(failure)
            self.stopped[job[0]] = what
            self._record(job, executed=_stopped(job[1], failure, what), source=self.sources[name], seconds=seconds,
                         notes=[f"its grading stopped: {what} (the reference notebook passed the same grading): "
                                "every exercise without a verdict before then scores 0"])

    def _what_happened(self, failure) -> str:
        if not failure.killed:
            return f"your notebook made the grader fail: {failure.cause}"
        if _killed_for_memory(self.client, failure.worker):
            limit = f"the grader's memory ({self.memory_mb} MB)" if self.memory_mb else "its worker's memory limit"
            return f"the grading worker was killed while it ran your notebook: it exceeded {limit}"
        return "the grading worker died while it ran your notebook"

    def _give_up(self, why):
        """End the run: every submission left is not graded, the grader's side, with `why`."""
        reason = f"the grader stopped waiting for it: {why}; grade it again"
        for what, _, _ in self.sent.values():
            if not isinstance(what, str):
                self._record(what, reason=reason, grader_side=True)
        for waiting in self.waiting.values():
            for job, failure, seconds in waiting:
                self._record(job, seconds=seconds, grader_side=True, reason=(
                    f"{reason} (its grading had failed, {failure.cause}, and the control that would say whose "
                    "failure it was had not finished)"))
        with contextlib.suppress(Exception):
            self.client.cancel(list(self.sent))


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
