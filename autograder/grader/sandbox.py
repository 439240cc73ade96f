"""Run a submitted notebook so that nothing it does can stop the grading of anything else.

Each kernel runs in a sandbox (`autograder.grader.isolation`, built with bubblewrap): no network,
its own processes (all ended with it), an allow-listed filesystem and environment, limits on
processes, file size and memory. A submission may loop forever (even ignoring interrupts), exit
its kernel (`os._exit`), eat all memory, flood its output or send messages the grader cannot read
or hold. nbclient alone would hang, stop at the first dead kernel or bad message, or keep every
byte. Here a cell that runs too long, kills its kernel or breaks its connection gets an error
output that says why (nbgrader scores it 0), the kernel is replaced, the cells that ran before it
are replayed to rebuild the student's definitions (within the submission's own time
limit), and execution goes on with the next cell. Everything stored in the notebook is capped.
"""
import asyncio
import atexit
import contextlib
import dataclasses
import io
import subprocess
import sys
import threading
import time

import nbformat
import psutil
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync
from nbgrader import utils

from autograder.checks import compare
from autograder.grader import isolation, trusted
from autograder.grader.execution import SteadyNotebookClient, poll_in_slices

MESSAGE_CHARS = 10_000  # an error message stored in a notebook (and so in scores.csv) is cut here
NAME_CHARS = 200  # an error's name
HISTORY = ("--HistoryManager.hist_file=:memory:",)  # as nbclient starts kernels: no history file


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one submission may use. Seconds are wall time (fractions allowed); memory is what its
    processes hold together; `scratch_mb` is the size of each of its in-memory folders (working
    folder, /tmp, /dev/shm); `threads` is also how many CPUs its processes may use together (its
    control group's quota); `cpu_limited=False` drops that quota, only for benchmarks/cpu_shares.py's
    comparison; `unsandboxed` runs kernels without a sandbox (an explicit choice).
    Frozen: the default instance is shared by every call that takes it, so none may change it."""
    cell_seconds: float = 60.0
    submission_seconds: float = 900.0
    memory_mb: int = 4096
    output_chars: int = 100_000
    threads: int = 1
    processes: int = 256
    file_mb: int = 256
    scratch_mb: int = 256
    cpu_limited: bool = True
    unsandboxed: bool = False


def capped(text, limit=MESSAGE_CHARS) -> str:
    """`text` cut to `limit` characters (an error message stored in a notebook by default)."""
    return compare.capped(text, limit)


def error_output(ename, evalue):
    ename, evalue = capped(ename, NAME_CHARS), capped(evalue)
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


class MessageFault(DeadKernelError):
    """The kernel's connection can no longer be trusted: it sent a message the grader cannot read
    (unsigned, a signature seen before, not JSON), one over the size limit (the relay cut its
    connection), or one whose handling raised. A DeadKernelError, so that whatever replaces a dead
    kernel (around a trusted call too) replaces this one; its text, the original exception's type
    and text included, becomes the cell's error."""


def _read_exception(task):
    return task.cancelled() or task.exception()


class SandboxClient(SteadyNotebookClient):
    """nbclient with a sandboxed kernel, a time budget per cell (fractions of a second allowed),
    and caps on what a cell may store: its outputs, its error messages, display updates. Nothing
    the kernel sends makes a cell raise anything but a timeout or a dead kernel (`MessageFault`)."""

    output_chars = 100_000
    sandbox = None  # the isolation.Sandbox its kernel runs in
    new_sandbox = None  # makes a sandbox for a kernel of its own
    pool, pool_key = None, None  # where a kernel started ahead may wait (KernelPool)
    # A cell whose output stops arriving fails, never passes silently; the kernel is then replaced,
    # with fresh connections.
    raise_on_iopub_timeout = True
    iopub_timeout = 10
    unreadable = ()  # messages its session refused, named (a list of its own once its client starts)
    _watching_alive = None  # nbclient's task that checks the kernel is alive, during a cell

    async def async_start_new_kernel_client(self):
        """Shell and IOPub name a message they cannot read, and both polls stop at a fault."""
        kc = await super().async_start_new_kernel_client()
        self.unreadable = []
        for channel in (kc.shell_channel, kc.iopub_channel):
            _refuse_unreadable(channel, self.unreadable)
        poll_in_slices(kc.iopub_channel, self.connection_check)
        return kc

    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    def faults(self) -> list:
        """What broke this kernel's connection so far: messages it could not read, cuts of the relay's."""
        return [*self.unreadable, *self.km.relay.faults]

    def connection_check(self):
        if self.faults():
            task = asyncio.current_task()
            if task is not None:  # nbclient leaves the IOPub poll's exception unread where the shell's ends the cell
                task.add_done_callback(_read_exception)
            raise MessageFault(self.faults()[0])

    async def _async_poll_kernel_alive(self):
        self._watching_alive = asyncio.current_task()  # nbclient leaves it running where a cell raises: ended here
        return await super()._async_poll_kernel_alive()

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        try:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        except MessageFault:
            raise
        except (CellTimeoutError, DeadKernelError) as err:
            if not self.faults():
                raise
            raise MessageFault(self.faults()[0]) from err  # the fault came first: it is why
        except Exception as err:
            raise MessageFault(f"the grader could not handle a message from the kernel ({type(err).__name__}: "
                               f"{err})") from err
        finally:
            if self._watching_alive is not None:
                self._watching_alive.cancel()

    execute_cell = run_sync(async_execute_cell)

    def create_kernel_manager(self):
        """A kernel started ahead in the pool if there is one (nbclient then only connects), else a new one."""
        self.km = self.pool.take(self.pool_key) if self.pool is not None else None
        if self.km is None:
            self.km = _new_manager(self.new_sandbox())
        self.sandbox = self.km.sandbox
        return self.km

    def budget(self, seconds):
        """The next cell (or trusted grade cell, all its calls together) may run `seconds`."""
        self.cell_seconds, self.cell_deadline = seconds, time.monotonic() + seconds
        self.timeout_func = lambda cell: max(self.cell_deadline - time.monotonic(), 0.001)

    def forget(self, cell_index):
        """What a cell run aside (the answer program, the reset) printed is not the notebook cell's own."""
        getattr(self, "_kept", {}).pop(cell_index, None)

    def printed(self, cell_index) -> int:
        """Characters of output the cell has sent so far, kept or not."""
        return getattr(self, "_kept", {}).get(cell_index, 0)

    def _charge(self, cell_index, size) -> int:
        self._kept = getattr(self, "_kept", {})
        before = self._kept.get(cell_index, 0)
        self._kept[cell_index] = before + size
        return before

    def process_message(self, msg, cell, cell_index):
        self._current_cell = cell_index
        return super().process_message(msg, cell, cell_index)

    def output(self, outs, msg, display_id, cell_index):
        content = msg["content"]
        if msg["msg_type"] == "error":  # always kept (it is the verdict), but capped
            content.update(ename=capped(content.get("ename", ""), NAME_CHARS), evalue=capped(content.get("evalue", "")),
                           traceback=[capped("\n".join(map(str, content.get("traceback", []))))])
            self._charge(cell_index, sum(map(len, (content["ename"], content["evalue"], content["traceback"][0]))))
            return super().output(outs, msg, display_id, cell_index)
        size = len(str(content.get("text", ""))) + len(str(content.get("data", "")))
        before = self._charge(cell_index, size)
        if before + size <= self.output_chars:
            return super().output(outs, msg, display_id, cell_index)
        if before <= self.output_chars:
            note = f"\n[output stopped here: a cell may keep {self.output_chars:,} characters]\n"
            outs.append(nbformat.v4.new_output("stream", name="stdout", text=note))
        return None

    def handle_comm_msg(self, outs, msg, cell_index):
        """Widget messages are kept in memory: they count toward the cell's cap, and over it are dropped."""
        size = len(str(msg["content"].get("data", ""))) + sum(len(b) for b in msg.get("buffers") or ())
        if self._charge(cell_index, size) + size > self.output_chars:
            return None
        return super().handle_comm_msg(outs, msg, cell_index)

    def _update_display_id(self, display_id, msg):
        """An update rewrites every output with its display id: it is charged to the running cell
        once per output it rewrites, and dropped where that is over the cell's cap."""
        copies = sum(len(indices) for indices in self._display_id_map.get(display_id, {}).values())
        size = len(str(msg["content"].get("data", ""))) * copies
        cell = getattr(self, "_current_cell", None)
        if cell is not None and self._charge(cell, size) + size > self.output_chars:
            return None
        return super()._update_display_id(display_id, msg)


class MemoryWatch:
    """Kill the kernel when its processes hold more than `limit_mb` of memory; remember why.

    The kernel is bubblewrap's child: every process of the sandbox descends from `pid`, double
    forks and new sessions included (they are re-parented to the sandbox's own init). Resident
    sizes are cheap to read but count memory that forked processes share once per process, so
    where their sum is over the limit, the proportional sizes (shared pages split between their
    sharers) decide; reading those is slow, so the watch then polls less often."""

    def __init__(self, pid, limit_mb, interval=0.1, out_of_memory=None):
        self.pid, self.limit, self.interval = pid, limit_mb * 2**20, interval
        self.out_of_memory = out_of_memory  # the control group's word: its OOM killer ended a process
        self.exceeded = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    @staticmethod
    def _proportional(process) -> int:
        try:
            with open(f"/proc/{process.pid}/smaps_rollup") as f:
                return next(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
        except (OSError, StopIteration, ValueError):
            return process.memory_info().rss

    def _used(self, processes, exact) -> int:
        total = 0
        for p in processes:
            with contextlib.suppress(psutil.Error):
                total += self._proportional(p) if exact else p.memory_info().rss
        return total

    def _watch(self):
        try:
            process = psutil.Process(self.pid)
        except psutil.Error:
            return
        interval = self.interval
        while not self._stop.wait(interval):
            try:
                processes = [process, *process.children(recursive=True)]
            except psutil.Error:
                return
            interval = self.interval
            # the group's OOM killer ends the largest process (a daemon that hoards, say), not the kernel:
            # the submission went over its memory all the same, and the kernel ends with it
            killed = self.out_of_memory is not None and self.out_of_memory()
            if not killed and self._used(processes, exact=False) <= self.limit:
                continue
            began = time.monotonic()
            if killed or self._used(processes, exact=True) > self.limit:
                self.exceeded = True
                for p in [*processes[1:], process]:
                    with contextlib.suppress(psutil.Error):
                        p.kill()
                return
            interval = max(self.interval, 2 * (time.monotonic() - began))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _refuse_unreadable(channel, seen: list) -> None:
    """Make `channel` raise MessageFault for a message its session refuses or cannot decode, naming
    the session's exception, after noting it in `seen` (where the other channel's poll finds it)."""

    async def read():  # jupyter_client's ZMQSocketChannel._recv, with the refusal named
        frames = await channel.socket.recv_multipart()
        try:
            return channel.session.deserialize(channel.session.feed_identities(frames)[1])
        except Exception as err:
            seen.append(f"the kernel sent a message the grader cannot read ({type(err).__name__}: {err})")
            raise MessageFault(seen[-1]) from err

    channel._recv = read


def _new_manager(sandbox):
    return isolation.SandboxedKernelManager(kernel_name="python3", sandbox=sandbox)


class KernelPool:
    """Sandboxed kernels started ahead of need: while one notebook runs, the kernel for the next
    one (or for a replacement after a crash) starts, so kernel start-up is off the critical path.

    One spare per configuration (limits, answer key, hidden paths): a spare is a fresh sandbox
    that no submission has touched. `preload`: modules a spare imports while it waits (e.g.
    torch, the slowest import of every notebook), without binding any name the notebook sees.
    Use a pool from one thread: bubblewrap ends a sandbox when the thread that started it ends
    (`--die-with-parent`); `thread_pool()` gives each thread its own. Spares left at exit are
    shut down.
    """

    def __init__(self, preload=()):
        self._spares = {}
        self.arguments = list(HISTORY)
        if preload:
            lines = [f"__import__('importlib').import_module({name!r}) and None" for name in preload]  # no `_`
            self.arguments.append(f"--IPKernelApp.exec_lines={lines!r}")
        atexit.register(self.close)

    def take(self, key):
        """A started kernel's manager for `key`, or None."""
        km = self._spares.pop(key, None)
        if km is not None and not run_sync(km.is_alive)():
            self._discard(km)
            return None
        return km

    def refill(self, key, new_sandbox):
        """Start a kernel for `key` now (it boots while the caller goes on), unless one waits already."""
        if key in self._spares:
            return
        km = _new_manager(new_sandbox())
        try:
            run_sync(km.start_kernel)(extra_arguments=self.arguments, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
        except BaseException:
            km.sandbox.end()
            raise
        self._spares[key] = km

    @staticmethod
    def _discard(km):
        with contextlib.suppress(Exception):
            run_sync(km.shutdown_kernel)(now=True)
        km.sandbox.end()

    def close(self):
        while self._spares:
            self._discard(self._spares.popitem()[1])


_thread_pools = threading.local()


def thread_pool() -> KernelPool:
    """This thread's kernel pool (e.g. a Dask worker's): pass it to `run_notebook` as `pool`. Its
    spares import torch while they wait (every notebook of the course imports it first)."""
    if not hasattr(_thread_pools, "pool"):
        _thread_pools.pool = KernelPool(preload=("torch",))
    return _thread_pools.pool


def _kernel_pid(client):
    provisioner = getattr(client.km, "provisioner", None)
    return getattr(getattr(provisioner, "process", None), "pid", None)


DEFAULT_LIMITS = Limits()


@dataclasses.dataclass(frozen=True)
class ByHandFirst:
    """The by-hand exercises, graded before anything else of the notebook runs (`autograder.grader.judge`):
    a fresh kernel runs `program` (the answers' reach, `reach.ProgramCell`s) and then the grade cells at
    `cells`; only then is its namespace reset and the whole notebook run, those grade cells left out.
    `refused`: (index, the judge's message) of the by-hand grade cells whose answer the judge refused: they run
    after all the others (a refused answer cannot tamper with their checks) and score 0 with that message, first
    among their errors (what the answer met when it ran comes after)."""
    program: tuple
    cells: tuple
    refused: tuple = ()


# Run by the grader in the kernel between the by-hand exercises and the notebook: the namespace as a fresh
# kernel's, and torch's generator as a fresh kernel seeds it.
RESET = ("get_ipython().run_line_magic('reset', '-f')\n"
         "__import__('torch').manual_seed(__import__('torch').Generator().initial_seed()) and None")


def run_notebook(nb, limits=DEFAULT_LIMITS, trusted_names=None, hidden=(), answer_key=None, pool=None,
                 first: ByHandFirst | None = None):
    """Execute `nb` in place within `limits`, each kernel in a sandbox; return a list of
    (cell index, problem) it met. With `first`, the by-hand exercises are graded first (`ByHandFirst`).

    With `trusted_names` (the names the answers define), test cells run here in the grader's
    process instead of the kernel, and reach student code only through calls sent to the kernel
    (see autograder/grader/trusted.py). Otherwise (plain mode, nbgrader's way) the test cells run
    in the kernel; `answer_key` is then the one file of the course (solutions/<nb>/answer_key.py)
    that the kernel may read, as the hidden tests need it: plain mode trusts the kernel with the
    hidden tests and that key. `hidden`: paths a kernel must never reach (the sandbox refuses to
    start if its allow-list would expose one). With a `pool` (`KernelPool`), kernels are taken from
    it where one was started ahead, and the next one is started as soon as a kernel is up.
    Raises `isolation.SandboxUnavailable` where no sandbox can start, unless `limits.unsandboxed`.
    """
    if trusted_names is not None and answer_key is not None:
        raise ValueError("trusted grading never shows the answer key to the kernel")
    sandboxed = not limits.unsandboxed
    if sandboxed and isolation.problem():
        raise isolation.SandboxUnavailable(isolation.stop_message(isolation.problem()))

    def new_sandbox():
        return isolation.Sandbox(limits, sandboxed=sandboxed, answer_key=answer_key, hidden=hidden)

    key = (dataclasses.astuple(limits), str(answer_key), tuple(map(str, hidden)))
    return _run_cells(nb, limits, trusted_names, new_sandbox, pool, key, _steps(nb, first))


@dataclasses.dataclass(frozen=True)
class Step:
    """One thing to run: a notebook cell ("cell"), a by-hand grade cell graded first ("first"), or after those
    where the judge refused its answer ("refused", `source` the verdict), a cell of the answer program ("program",
    `source` at the notebook cell `index`), or the reset between the two ("reset")."""
    kind: str
    index: int = 0
    source: str = ""


def _steps(nb, first) -> list:
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    if first is None or not first.cells:
        return [Step("cell", i) for i in code]
    refused = dict(first.refused)
    graded_first = set(first.cells) | set(refused)
    return [*(Step("program", cell.index, cell.source) for cell in first.program),
            *(Step("first", i) for i in first.cells if i not in refused),
            *(Step("refused", i, refused[i]) for i in first.cells if i in refused),
            Step("reset", code[0] if code else 0), *(Step("cell", i) for i in code if i not in graded_first)]


def _run_aside(client, nb, step) -> None:
    """Run a program or reset step as a cell of its own at its notebook cell's place, leaving that cell as it was
    (outputs, and what it has printed so far)."""
    original = nb.cells[step.index]
    source = RESET if step.kind == "reset" else step.source
    try:
        client.execute_cell(nbformat.v4.new_code_cell(source), step.index)
    finally:
        nb.cells[step.index] = original
        client.forget(step.index)


def _replay(client, nb, steps, deadline, limits) -> None:
    """Run earlier cells (or program steps) again on a fresh kernel to rebuild definitions, keeping their first
    outputs; the time this takes counts toward the submission's limit."""
    for step in steps:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        client.budget(min(limits.cell_seconds, remaining))
        with contextlib.suppress(CellTimeoutError, DeadKernelError):
            if step.kind == "program":
                _run_aside(client, nb, step)
                continue
            original = nb.cells[step.index]
            client.execute_cell(nbformat.from_dict(dict(original, outputs=[])), step.index)
            nb.cells[step.index] = original  # nbclient stores the copy it ran; keep what the student saw first


def _timed_out(client, limits, err) -> tuple:
    """The name and message of a cell that ran out of time, or whose output stopped arriving."""
    if "IOPub" in str(err) or "IOPub" in str(err.__cause__):
        return "OutputLimit", "the cell's output stopped arriving (print less)"
    if client.cell_seconds < limits.cell_seconds:
        return "CellTimeLimit", (f"stopped after {client.cell_seconds:.3g} s: the submission used its whole "
                                 f"{limits.submission_seconds:g} s")
    return "CellTimeLimit", f"stopped after {limits.cell_seconds:g} s: does a loop never end?"


def _run_cells(nb, limits, trusted_names, new_sandbox, pool, key, steps):
    deadline = time.monotonic() + limits.submission_seconds
    replayable, problems, position = [], [], 0
    while position < len(steps):
        client = SandboxClient(nb, allow_errors=True, interrupt_on_timeout=False, kernel_name="python3",
                               shutdown_kernel="immediate", extra_arguments=list(HISTORY))
        client.output_chars, client.new_sandbox, client.pool, client.pool_key = (limits.output_chars, new_sandbox,
                                                                                 pool, key)
        try:
            with client.setup_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
                if pool is not None:
                    pool.refill(key, new_sandbox)  # the next kernel boots while this one works
                with MemoryWatch(_kernel_pid(client), limits.memory_mb,
                                 out_of_memory=client.sandbox.out_of_memory if client.sandbox else None) as watch:
                    _replay(client, nb, replayable, deadline, limits)
                    position = _run_until_a_kernel_ends(client, nb, steps, position, deadline, limits,
                                                        trusted_names, watch, replayable, problems)
        finally:
            left = client.sandbox.end() if client.sandbox is not None else 0
        if left:
            problem = f"{left} process(es) of the submission outlived its kernel and were killed"
            print(f"warning: {problem}", file=sys.stderr)
            problems.append((None, problem))
    return problems


def _run_until_a_kernel_ends(client, nb, steps, position, deadline, limits, trusted_names, watch, replayable,
                             problems):
    """Run steps from `position` until the notebook ends or the kernel has to be replaced; return
    the position to go on from."""
    while position < len(steps):
        step = steps[position]
        index = step.index
        position += 1
        remaining = deadline - time.monotonic()
        if remaining <= 0 and step.kind != "done":
            if step.kind in ("cell", "first", "refused"):
                problem = f"not run: the submission used its whole {limits.submission_seconds:g} s"
                nb.cells[index].outputs = [*_verdict(step), error_output("SubmissionTimeLimit", problem)]
                problems.append((index, problem))
            continue
        if step.kind == "done":
            continue
        client.budget(min(limits.cell_seconds, remaining))
        graded_here = trusted_names is not None and utils.is_grade(nb.cells[index])
        try:
            if step.kind in ("program", "reset"):
                _run_aside(client, nb, step)
            elif graded_here:
                _grade_here(client, nb, index, trusted_names)
            else:
                client.execute_cell(nb.cells[index], index)
        except (CellTimeoutError, trusted.KernelDied, DeadKernelError) as err:
            fault = next((e for e in (err, err.__cause__) if isinstance(e, MessageFault)), None)
            if fault is not None:
                name, problem = "MessageFault", f"{fault}; the kernel was replaced"
            elif isinstance(err, CellTimeoutError) or getattr(err, "timed_out", False):
                name, problem = _timed_out(client, limits, err)
            else:
                problem, name = _death(watch, limits, client.sandbox), "KernelDied"
            if step.kind == "program":  # every by-hand exercise needed it: each fails with what happened
                _program_failed(steps, position, nb, f"cell {index + 1}, which your by-hand answers need, did "
                                                     f"not run to its end when they were graded: {problem}")
            elif step.kind in ("cell", "first", "refused"):
                nb.cells[index].outputs[:0] = _verdict(step)
                nb.cells[index].outputs.append(error_output(name, problem))
            problems.append((index, problem))
            if step.kind == "reset":
                replayable.clear()
            return position
        nb.cells[index].outputs[:0] = _verdict(step)
        if step.kind == "reset":
            replayable.clear()  # a kernel started after this point runs the notebook alone, as a fresh one
        elif step.kind == "program" or (step.kind == "cell" and not utils.is_grade(nb.cells[index])):
            replayable.append(step)
        elif client.printed(index) > limits.output_chars:
            problem = (f"the cell printed {client.printed(index):,} characters; "
                       f"at most {limits.output_chars:,} are allowed")
            nb.cells[index].outputs.append(error_output("OutputLimit", problem))
            problems.append((index, problem))
    return position


def _verdict(step) -> list:
    """The judge's refusal, as the first output of a refused by-hand grade cell (none for any other step)."""
    return [error_output("ByHandRule", step.source)] if step.kind == "refused" else []


def _program_failed(steps, position, nb, message):
    """The answer program stopped: every by-hand grade cell still to come scores 0 with `message`, ungraded."""
    for i, step in enumerate(steps[position:], start=position):
        if step.kind in ("first", "refused"):
            nb.cells[step.index].outputs = [*_verdict(step), error_output("AnswerNotRun", message)]
            steps[i] = Step("done", step.index)


def _death(watch, limits, sandbox=None):
    out_of_memory = watch.exceeded or (sandbox is not None and sandbox.out_of_memory())
    return (f"the cell used more than {limits.memory_mb} MB of memory" if out_of_memory
            else "the cell ended the Python process (os._exit, a crash, a signal, or its CPU time ran out)")


def _grade_here(client, nb, index, names):
    """Run a test cell in this process; its verdict becomes the cell's output, as if it had run."""
    cell = nb.cells[index]
    cell.outputs = []
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        remote = trusted.Remote(client, nb, index, client.sandbox.exchange)
        error = trusted.run_grade_cell(cell.source, names, remote)
    if printed.getvalue():
        cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=capped(printed.getvalue(),
                                                                                      client.output_chars)))
    if error is not None:
        cell.outputs.append(error_output(type(error).__name__, str(error)))
