"""The kernel sandbox against what a hostile submission did (issue 15).

Each test runs a few real sandboxed kernels, with many attacks batched into one notebook, and
asserts what the kernel saw and what grading recorded. Where no sandbox can start here the tests
are skipped with the reason, and fail instead under CI (tests/conftest.py's `needs`). No test
switches at a moment on the clock: what must come after something waits for it (a file a cell
makes, a process seen running, the grader's own replay step).
"""
import contextlib
import dataclasses
import json
import os
import pathlib
import secrets
import socket
import sys
import threading
import time

import course
import nbformat
import psutil
import pytest

from autograder.grader import bubblewrap, isolation, relay
from autograder.grader.sandbox import DEFAULT_LIMITS, MESSAGE_CHARS, Limits, run_notebook

PROBLEM = isolation.problem()
pytestmark = pytest.mark.needs(PROBLEM is None, reason=f"kernels cannot be sandboxed here: {PROBLEM}")
# Control groups are made where the grader is root (CI runs as root).
AS_ROOT = pytest.mark.needs(os.geteuid() == 0, reason="control groups are made where the grader is root")


def notebook(*sources, grade=()):
    """A notebook of code cells; the cells whose index is in `grade` are nbgrader test cells."""
    nb = nbformat.v4.new_notebook()
    for i, source in enumerate(sources):
        cell = nbformat.v4.new_code_cell(source)
        if i in grade:
            cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 1,
                                         "grade_id": f"test_{i}", "schema_version": 3}
        nb.cells.append(cell)
    return nb


def text(cell) -> str:
    return "".join(o.get("text", "") if o.output_type == "stream" else f"{o.get('ename')}: {o.get('evalue')}"
                   for o in cell.outputs if o.output_type in ("stream", "error"))


def errors(cell) -> list:
    return [f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error"]


def report(cell) -> dict:
    """The JSON a probing cell printed last."""
    return json.loads(text(cell).strip().splitlines()[-1])


def host_processes_with(token) -> list:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(token in part for part in process.info["cmdline"] or ()):
                found.append(process)
    return found


# The probing cells share this helper: every attempt is recorded as "ok: ..." or "<Error>: ...".
ATTEMPT = '''import json, os, socket
seen = {}
def attempt(label, fn):
    try:
        seen[label] = "ok: " + str(fn())[:200]
    except BaseException as err:
        seen[label] = f"{type(err).__name__}: {err}"[:200]
'''


def test_a_kernel_reaches_no_grader_service_no_secret_and_no_file_outside_its_allow_list(tmp_path, monkeypatch):
    token = secrets.token_hex(8)
    monkeypatch.setenv("GRADER_SECRET_TOKEN", token)
    listener = socket.socket()  # a grader-side service (a Dask scheduler listens like this)
    listener.bind(("0.0.0.0", 0))
    listener.listen()
    port = listener.getsockname()[1]
    addresses = sorted({a.address for addrs in psutil.net_if_addrs().values() for a in addrs
                        if a.family == socket.AF_INET})
    unix_path = tmp_path / "scheduler.sock"
    unix_listener = socket.socket(socket.AF_UNIX)
    unix_listener.bind(str(unix_path))
    unix_listener.listen()

    root = tmp_path / "course"  # another course, with its secrets
    (root / "solutions" / "07_fake").mkdir(parents=True)
    (root / "solutions" / "07_fake" / "answer_key.py").write_text(f"SECRET = '{token}'\n")
    (root / "submitted" / "other" / "07_fake").mkdir(parents=True)
    (root / "submitted" / "other" / "07_fake" / "07_fake.ipynb").write_text(token)
    (root / "gradebook.db").write_text(token)
    grader_files = [root / "solutions" / "07_fake" / "answer_key.py", root / "gradebook.db",
                    root / "submitted" / "other" / "07_fake" / "07_fake.ipynb",
                    course.SOLUTIONS / "01_chain_rule" / "01_chain_rule.ipynb", course.ROOT / "tests" / "mutants",
                    course.ROOT / "autograder" / "grader" / "trusted.py", pathlib.Path.home() / ".bashrc",
                    pathlib.Path(sys.prefix).parent / ".git", pathlib.Path("/etc/shadow"), pathlib.Path("/run")]
    package = pathlib.Path(bubblewrap.package_parts()["keep"][0]).parent
    probe = ATTEMPT + f'''
for address in {addresses!r}:
    attempt(f"tcp {{address}}", lambda: socket.create_connection((address, {port}), timeout=2))
attempt("unix", lambda: socket.socket(socket.AF_UNIX).connect({str(unix_path)!r}))
attempt("environment", lambda: os.environ.get("GRADER_SECRET_TOKEN"))
def scan_environ():
    hits = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if {token!r}.encode() in open(f"/proc/{{pid}}/environ", "rb").read():
                hits.append(pid)
        except OSError:
            pass
    return hits
attempt("other environments", scan_environ)
for path in {[str(p) for p in grader_files]!r}:
    attempt(f"read {{path}}", lambda: os.listdir(path) if os.path.isdir(path) else open(path, "rb").read(64))
attempt("grader package", lambda: __import__("autograder.grader.trusted"))
attempt("home", lambda: os.listdir({str(pathlib.Path.home())!r}))
attempt("write python", lambda: open({str(pathlib.Path(sys.prefix) / 'planted.py')!r}, "w"))
attempt("write package", lambda: open({str(package / 'learner' / 'planted.py')!r}, "w"))
attempt("ids", lambda: (os.getuid(), os.getgid(), os.getgroups()))
attempt("privileges", lambda: [line.split()[1] for line in open("/proc/self/status")
                               if line.startswith(("CapEff", "CapBnd", "NoNewPrivs"))])
print(json.dumps(seen))
'''
    try:
        nb = notebook(probe)
        problems = run_notebook(nb, Limits(cell_seconds=60), hidden=isolation.secrets_of(root))
        listener.settimeout(0)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever connected
    finally:
        listener.close()
        unix_listener.close()
    seen = report(nb.cells[0])
    assert problems == [], problems
    assert token not in json.dumps(seen)
    for address in addresses:
        assert seen[f"tcp {address}"].startswith(("ConnectionRefusedError", "OSError: [Errno 101]")), seen
    assert seen["unix"].startswith("FileNotFoundError"), seen
    assert seen["environment"] == "ok: None" and seen["other environments"] == "ok: []"
    for path in grader_files:
        assert seen[f"read {path}"].startswith("FileNotFoundError"), (path, seen[f"read {path}"])
    assert seen["grader package"].startswith("ModuleNotFoundError")
    home_needs = {pathlib.Path(p).relative_to(pathlib.Path.home()).parts[0] for p in bubblewrap.python_paths()
                  if pathlib.Path(p).is_relative_to(pathlib.Path.home())}
    assert set(eval(seen["home"].removeprefix("ok: "))) <= home_needs  # only the way to this Python
    assert seen["write python"].startswith("OSError: [Errno 30] Read-only")
    assert seen["write package"].startswith("OSError: [Errno 30] Read-only")
    uid, gid, groups = eval(seen["ids"].removeprefix("ok: "))
    assert uid not in (0, os.getuid()) and gid != 0 and groups == []
    assert eval(seen["privileges"].removeprefix("ok: ")) == ["0000000000000000", "0000000000000000", "1"]


def test_nothing_a_submission_starts_outlives_its_kernel_and_its_limits_hold(tmp_path):
    token = secrets.token_hex(8)
    limits = Limits(cell_seconds=60, memory_mb=600, processes=48, scratch_mb=32, file_mb=8)
    nb = notebook(
        # a new session, nohup, and a double-forked daemon holding memory
        f"import os, subprocess, sys, time\n"
        f"sleeper = [sys.executable, '-c', 'import time; time.sleep(3600)', '{token}']\n"
        f"subprocess.Popen(sleeper, start_new_session=True)\n"
        f"subprocess.Popen(['nohup', *sleeper], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        f"if os.fork() == 0:\n"
        f"    os.setsid()\n"
        f"    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', 'import time; hoard = bytearray(50 * 2**20); "
        f"time.sleep(3600)', '{token}'])\n"
        f"    os._exit(0)\n"
        f"os.wait()\n"
        f"def marked():  # the daemon shows the token once it has exec'd (until then it is a copy of the kernel)\n"
        f"    count = 0\n"
        f"    for p in filter(str.isdigit, os.listdir('/proc')):\n"
        f"        try:\n"
        f"            count += '{token}' in open(f'/proc/{{p}}/cmdline').read()\n"
        f"        except OSError:\n"
        f"            pass\n"
        f"    return count\n"
        f"while marked() < 3:  # all three run before the next cell (the cell's limit bounds the wait)\n"
        f"    time.sleep(0.01)",
        ATTEMPT + f'''
def fill(folder):
    written = 0
    try:
        for i in range(1000):
            with open(f"{{folder}}/{token}-{{i}}", "wb") as f:
                for _ in range(4):
                    f.write(bytes(2**20))
                    written += 1
    finally:
        seen[folder + " MB"] = written
attempt("big file", lambda: open("big", "wb").write(bytes(9 * 2**20)))
os.remove("big")
for folder in ("/tmp", "/dev/shm", os.getcwd()):
    attempt("fill " + folder, lambda: fill(folder))
def fork_bomb():
    children = []
    try:
        for _ in range(1000):
            pid = os.fork()
            if pid == 0:
                time.sleep(3600)
                os._exit(0)
            children.append(pid)
    finally:
        seen["forked"] = len(children)
        for pid in children:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
attempt("fork bomb", fork_bomb)
attempt("one huge allocation", lambda: len(bytearray(2000 * 2**20)))
attempt("alive", lambda: sum({token!r} in open(f"/proc/{{p}}/cmdline").read() for p in os.listdir("/proc")
                              if p.isdigit()))
print(json.dumps(seen))
''')
    problems = run_notebook(nb, limits)
    seen = report(nb.cells[1])
    assert problems == [], problems
    assert seen["alive"] == "ok: 3", seen  # all three were running while the kernel was
    for folder in ("/tmp", "/dev/shm"):
        assert seen[f"fill {folder}"].startswith("OSError: [Errno 28] No space"), seen
        assert 16 <= seen[f"{folder} MB"] <= 32, seen
    assert seen["big file"].startswith("OSError: [Errno 27] File too large"), seen
    assert seen["fork bomb"].startswith("BlockingIOError"), seen
    assert 0 < seen["forked"] < limits.processes, seen
    assert seen["one huge allocation"].startswith("MemoryError"), seen
    assert host_processes_with(token) == []  # `ps` is clean: nothing of the submission is left
    for folder in (pathlib.Path("/tmp"), pathlib.Path("/dev/shm")):  # its files never reached the machine's
        assert not list(folder.glob(f"{token}-*"))


def test_memory_held_by_a_double_forked_daemon_counts_and_ends_with_the_kernel():
    """The daemon, started by cell 0, hoards only once cell 1 has made the file `go`: its memory is
    counted while cell 1 runs, and only that can end cell 1, which never ends by itself."""
    token = secrets.token_hex(8)
    nb = notebook(
        f"import os, sys\n"
        f"go = os.path.abspath('go')\n"
        f"if os.fork() == 0:\n"
        f"    os.setsid()\n"
        f"    if os.fork() == 0:\n"
        f"        hoard = 'import os, sys, time\\nwhile not os.path.exists(sys.argv[1]):\\n    time.sleep(0.01)\\n'\n"
        f"        hoard += 'hoard = []\\nfor _ in range(40):\\n'\n"
        f"        hoard += '    hoard.append(bytearray(25 * 2**20))\\n    time.sleep(0.05)\\ntime.sleep(3600)'\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', hoard, go, '{token}'])\n"
        f"    os._exit(0)\n"
        f"os.wait()",
        "import time\nopen('go', 'w').close()\ntime.sleep(3600)",
        "print('graded on')")
    problems = run_notebook(nb, Limits(cell_seconds=90, memory_mb=400))
    assert problems == [(1, "the cell used more than 400 MB of memory")]
    assert errors(nb.cells[1]) == ["KernelDied: the cell used more than 400 MB of memory"]
    assert text(nb.cells[2]) == "graded on\n"
    assert host_processes_with(token) == []


def test_huge_and_expanded_answers_are_refused_before_the_grader_materialises_them():
    """A huge exception's message is cut in the kernel instead, so that its type still comes back."""
    answers = ("import torch\n"
               "def expanded(x):\n    return torch.ones(1).expand(250_000_000)\n"
               "def wordy(x):\n    return 'w' * 3_000_000\n"
               "def shouty(x):\n    raise ValueError('s' * 3_000_000)\n"
               "def fine(x):\n    return x * 2")
    check = "import torch\nfrom autograder import checks\n"
    nb = notebook(answers,
                  check + "checks.call_student('expanded', expanded, torch.ones(2))",
                  check + "checks.call_student('wordy', wordy, torch.ones(2))",
                  check + "checks.call_student('shouty', shouty, torch.ones(2))",
                  check + "checks.expect_close('fine', checks.call_student('fine', fine, torch.ones(2)), "
                          "torch.full((2,), 2.0))",
                  grade=(1, 2, 3, 4))
    problems = run_notebook(nb, Limits(cell_seconds=60), trusted_names=["expanded", "fine", "shouty", "wordy"])
    assert problems == []
    assert errors(nb.cells[1]) == ["GradingError: expanded: the answer from your notebook is too large to grade: "
                                   "a tensor of shape (250000000,) has 250,000,000 elements (at most 33,554,432 "
                                   "may come back)"]
    [wordy] = errors(nb.cells[2])
    assert wordy.startswith("GradingError: wordy: the answer from your notebook is too large to grade: a string of ")
    [shouty] = errors(nb.cells[3])
    assert shouty.startswith("GradingError: shouty: raised ValueError: sss") and shouty.endswith(" more characters]")
    assert len(shouty) < MESSAGE_CHARS + 100
    assert errors(nb.cells[4]) == []  # a normal answer still crosses
    assert len(nbformat.writes(nb)) < 50_000


def test_plain_mode_reads_only_its_answer_key_and_trusted_mode_never(tmp_path):
    root = tmp_path / "course"
    folder = root / "solutions" / "07_fake"
    folder.mkdir(parents=True)
    key = folder / "answer_key.py"
    key.write_text("SECRET = 'the key'\n")
    (folder / "07_fake.ipynb").write_text("hidden tests")
    cells = ("from autograder.grader.keys import answer_key\nprint(answer_key('07_fake').SECRET)",
             f"print(open({str(folder / '07_fake.ipynb')!r}).read())",
             "import autograder.grader.trusted",
             "raise ValueError('v' * 3_000_000)")
    plain = notebook(*cells)
    problems = run_notebook(plain, Limits(cell_seconds=60), answer_key=key, hidden=isolation.secrets_of(root))
    assert problems == []
    assert text(plain.cells[0]) == "the key\n"
    assert errors(plain.cells[1])[0].startswith("FileNotFoundError")
    assert errors(plain.cells[2])[0].startswith("ModuleNotFoundError")
    [huge] = errors(plain.cells[3])
    assert len(huge) < MESSAGE_CHARS + 200 and "more characters]" in huge  # capped where it is stored

    trusted = notebook(*cells[:2])
    assert run_notebook(trusted, Limits(cell_seconds=60), trusted_names=[], hidden=isolation.secrets_of(root)) == []
    assert errors(trusted.cells[0])[0].startswith("ModuleNotFoundError") and "the key" not in text(trusted.cells[0])
    with pytest.raises(ValueError, match="never shows the answer key"):
        run_notebook(notebook("pass"), Limits(), trusted_names=[], answer_key=key)


def test_fractional_cell_limits():
    """The cell never ends by itself: only its 1.5 s limit (not 1 s, not 2 s: the message says which
    stopped it) ends it before the submission's 60 s. (That grading goes on after a stopped cell is
    the class run's endless loop, tests/test_classgrade.py: a next cell here would have 1.5 s too.)"""
    nb = notebook("import time\ntime.sleep(3600)")
    problems = run_notebook(nb, Limits(cell_seconds=1.5, submission_seconds=60))
    assert problems == [(0, "stopped after 1.5 s: does a loop never end?")]


def test_the_submission_limit_counts_the_replay_after_a_kernel_death(monkeypatch):
    """Cell 1 kills the kernel; cell 0 is replayed on a new one, and made endless as its replay
    begins (the grader's own step is the switch, not a moment on the clock). The replay's time
    counts toward the submission's 30 s: grading ends then, where the replay alone would otherwise
    have run for cell 0's whole 120 s limit. (Under a load that takes the 30 s before the replay,
    no replay runs, and the outcome is the same.)"""
    from autograder.grader import sandbox
    replay = sandbox._replay

    def endless_replay(client, nb, indices, deadline, limits):
        if indices:
            nb.cells[0].source = "import time\ntime.sleep(3600)"
        return replay(client, nb, indices, deadline, limits)

    monkeypatch.setattr(sandbox, "_replay", endless_replay)
    nb = notebook("x = 1", "import os\nos._exit(1)", "print('reached')")
    limits = Limits(cell_seconds=120, submission_seconds=30)
    began = time.monotonic()
    problems = run_notebook(nb, limits)
    assert time.monotonic() - began < limits.cell_seconds, "the replay ran to the cell's limit"
    assert problems == [(1, "the cell ended the Python process (os._exit, a crash, a signal, or its CPU time ran out)"),
                        (2, "not run: the submission used its whole 30 s")]
    assert errors(nb.cells[2]) == ["SubmissionTimeLimit: not run: the submission used its whole 30 s"]


# What a kernel sends over its connection (the duplicate and the 100 frames of 30 MB were seen in a class run:
# each made the grading worker fail, instead of that cell).
DUPLICATED = ("_k = get_ipython().kernel\nm = _k.session.msg('stream', {'name': 'stdout', 'text': 'x'})\n"
              "_k.session.send(_k.iopub_socket, m)\n_k.session.send(_k.iopub_socket, m)")
MALFORMED = ("_k = get_ipython().kernel\n"  # signed, for the running cell, but no stream has no name
             "_k.session.send(_k.iopub_socket, 'stream', {'text': 'x'}, parent=_k.get_parent())")
HUGE = ("_k = get_ipython().kernel\nbig = memoryview(bytes(30 * 2**20))\n"
        "_k.session.send(_k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'x'}, buffers=[big] * 100)")


def test_what_a_kernel_sends_fails_only_its_own_cell_and_the_kernel_is_replaced():
    nb = notebook("x = 41", DUPLICATED, "print('after', x + 1)", MALFORMED, "print('still', x)", HUGE,
                  "print('graded on', x)")
    problems = run_notebook(nb, Limits(cell_seconds=60))
    assert [index for index, _ in problems] == [1, 3, 5]
    [duplicated], [malformed], [huge] = errors(nb.cells[1]), errors(nb.cells[3]), errors(nb.cells[5])
    assert duplicated.startswith("MessageFault: the kernel sent a message the grader cannot read (ValueError: "
                                 "Duplicate Signature: b'")
    assert text(nb.cells[1]).count("x") <= 1, "the copy is never read"
    assert malformed == ("MessageFault: the grader could not handle a message from the kernel (KeyError: 'name'); "
                         "the kernel was replaced")
    assert huge == (f"MessageFault: the kernel sent a message of more than {isolation.MESSAGE_BYTES:,} bytes (all its "
                    "frames together) on its iopub channel, and its connection was cut; the kernel was replaced")
    assert [text(nb.cells[i]) for i in (2, 4, 6)] == ["after 42\n", "still 41\n", "graded on 41\n"]


GREETING = b"\xff" + bytes(8) + b"\x7f" + bytes([3, 1]) + b"NULL".ljust(20, b"\0") + bytes(32)


def frame(body, more=False, command=False, size=None):
    """One ZMTP 3 frame: flags, a 1- or 8-byte size (`size`: what the header claims), the body."""
    size = len(body) if size is None else size
    flags = relay.MORE * more | relay.COMMAND * command | relay.LONG * (size > 255)
    return bytes([flags]) + size.to_bytes(8 if size > 255 else 1, "big") + body


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_the_relay_cuts_a_message_whose_frames_together_pass_the_limit(chunk):
    """Whatever the chunks the bytes arrive in: one byte at a time as well as many frames at once."""
    def feed(meter, data):
        for at in range(0, len(data), chunk):
            meter.feed(data[at:at + chunk])

    meter = relay.Meter(limit=1000)
    feed(meter, GREETING + frame(bytes(600), more=True) + frame(bytes(400)))  # exactly the limit
    feed(meter, frame(bytes(1000)) + frame(b"READY", command=True) + frame(bytes(1000), command=True))
    with pytest.raises(relay.Cut, match="a message of more than 1,000 bytes"):
        feed(meter, frame(bytes(600), more=True) + frame(bytes(401)))
    many = relay.Meter(limit=1000)
    with pytest.raises(relay.Cut, match="more than 1,000 bytes"):
        feed(many, GREETING + frame(b"x", more=True) * 1000 + frame(b"x"))
    for claim in (1001, 2**63, 2**64 - 1):  # the size a header claims is counted before any of it comes
        with pytest.raises(relay.Cut, match="more than 1,000 bytes"):
            feed(relay.Meter(limit=1000), GREETING + frame(b"", size=claim))
    for garbage in (b"GET / HTTP/1.1\r\n", GREETING[:10] + bytes([2]), GREETING + bytes([0x08, 0]),
                    GREETING + bytes([relay.COMMAND | relay.MORE, 0])):
        with pytest.raises(relay.Cut, match="not ZMTP 3"):
            feed(relay.Meter(limit=1000), garbage)


def receive(end, count) -> bytes:
    data = b""
    while len(data) < count:
        got = end.recv(count - len(data))
        if not got:
            break
        data += got
    return data


def test_the_relay_carries_each_connection_apart_and_cuts_only_the_one_that_passes_its_limit(tmp_path):
    kernel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    kernel.bind(f"{tmp_path}/kernel-7")
    kernel.listen(16)
    kernel.settimeout(30)
    carrier = relay.Relay(tmp_path, f"{tmp_path}/kernel", {"iopub": (7, 1000)})
    try:
        graders, kernels = [], []
        for _ in range(2):
            graders.append(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
            graders[-1].settimeout(30)
            graders[-1].connect(f"{carrier.address}-7")
            kernels.append(kernel.accept()[0])  # the relay connects to the kernel as the grader connects to it
        for i, (grader, end) in enumerate(zip(graders, kernels)):
            grader.sendall(b"subscribe %d" % i)
            assert receive(end, 11) == b"subscribe %d" % i
            end.sendall(GREETING + frame(bytes([i]) * 999, more=True))
            assert receive(grader, 64 + 9 + 999) == GREETING + frame(bytes([i]) * 999, more=True)
        kernels[1].sendall(frame(b"xy"))  # the message's 1,001st byte: never reaches the grader
        assert graders[1].recv(100) == b""
        assert carrier.faults == ["the kernel sent a message of more than 1,000 bytes (all its frames together) on "
                                  "its iopub channel, and its connection was cut"]
        kernels[0].sendall(frame(b"x"))  # the other connection goes on
        assert receive(graders[0], 3) == frame(b"x")
        extra = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(relay.CONNECTIONS)]
        for end in extra:
            end.settimeout(30)
            end.connect(f"{carrier.address}-7")
        assert extra[-1].recv(1) == b"", f"at most {relay.CONNECTIONS} connections per channel"
        kernels[0].close()  # the kernel ends: so does the grader's connection
        assert graders[0].recv(1) == b""
    finally:
        carrier.close()
    assert [t for t in threading.enumerate() if t.name == f"relay to {tmp_path}/kernel"] == []
    with pytest.raises(ConnectionRefusedError):
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(f"{carrier.address}-7")
    carrier.close()  # again: nothing


def test_without_a_sandbox_grading_stops_unless_asked_explicitly(monkeypatch, capsys):
    """The one test that grades unsandboxed (`Limits(unsandboxed=True)`): it shows that this flag,
    and only it, lets grading go on where no sandbox can start."""
    monkeypatch.setattr(bubblewrap, "problem", lambda: "bubblewrap (bwrap) is not installed: run ...")
    with pytest.raises(isolation.SandboxUnavailable, match="(?s)not installed.*--unsandboxed"):
        run_notebook(notebook("print(1)"), Limits())
    with pytest.raises(SystemExit, match="Grading stopped: bubblewrap"):
        isolation.require()
    isolation.require(unsandboxed=True)
    assert "GRADING WITHOUT A SANDBOX" in capsys.readouterr().err
    nb = notebook("import os\nprint(os.getuid())")
    assert run_notebook(nb, Limits(cell_seconds=60, unsandboxed=True)) == []
    assert text(nb.cells[0]) == f"{os.getuid()}\n"  # it really ran as the grader


def test_why_no_sandbox_says_what_to_do(monkeypatch):
    monkeypatch.setattr(bubblewrap.shutil, "which", lambda name: None)
    assert "apt-get install bubblewrap" in bubblewrap.problem.__wrapped__()
    monkeypatch.setattr(bubblewrap.sys, "platform", "darwin")
    assert "only on Linux" in bubblewrap.problem.__wrapped__()


def plan(tmp_path, **changes):
    fields = dict(workdir=isolation.HOME, exchange=str(tmp_path), env={"PATH": "/usr/bin"}, uid=123456789)
    return bubblewrap.Plan(**{**fields, **changes})


def test_a_plan_that_would_expose_a_hidden_path_is_refused(tmp_path):
    with pytest.raises(PermissionError, match="would expose"):
        bubblewrap.command(plan(tmp_path, hidden=(sys.prefix,)), ["python"])
    args = bubblewrap.command(plan(tmp_path, hidden=(str(course.SOLUTIONS),)), ["python"])
    assert "--unshare-net" in args and "--die-with-parent" in args and "--clearenv" in args


def test_gpu_device_nodes_are_bound_where_there_are_some(tmp_path, monkeypatch):
    """Unverified on a real GPU here (no GPU on this machine): only the options are checked."""
    monkeypatch.setattr(bubblewrap, "nvidia_devices", lambda: ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"])
    args = " ".join(bubblewrap.filesystem(plan(tmp_path)))
    for device in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"):
        assert f"--dev-bind {device} {device}" in args
    assert not any(a.startswith("--data") for a in bubblewrap.limits(plan(tmp_path)))
    monkeypatch.setattr(bubblewrap, "nvidia_devices", lambda: [])
    assert "nvidia" not in " ".join(bubblewrap.filesystem(plan(tmp_path)))
    assert any(a.startswith("--data") for a in bubblewrap.limits(plan(tmp_path)))


def test_the_limits_everyone_shares_cannot_change():
    """`run_notebook`'s default Limits is one instance for every caller: no caller may change it."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_LIMITS.memory_mb = 10**6
    assert DEFAULT_LIMITS == Limits() and dataclasses.replace(DEFAULT_LIMITS, memory_mb=1).memory_mb == 1


def test_the_environment_is_an_allow_list(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    env = isolation.kernel_env(isolation.HOME, threads=3)
    assert "AWS_SECRET_ACCESS_KEY" not in env and env["COURSE_DEVICE"] == "cpu"
    assert env["OMP_NUM_THREADS"] == "3" and env["HOME"] == isolation.HOME
    assert env["COURSE_PROGRESS"].startswith(isolation.HOME) and "COURSE_ROOT" not in env


def test_a_kernel_started_ahead_is_a_fresh_sandbox_and_none_outlives_the_pool():
    from autograder.grader.sandbox import KernelPool
    pool = KernelPool(preload=("torch",))
    try:
        first = notebook("import os\nsecret = 42\nopen('/tmp/left-behind', 'w').write('x')\nprint(os.getpid())")
        run_notebook(first, Limits(cell_seconds=60), pool=pool)
        assert len(pool._spares) == 1  # the next kernel was started while this one ran
        [spare] = pool._spares.values()
        second = notebook("import os, sys\nprint(os.path.exists('/tmp/left-behind'), 'secret' in globals(), "
                          "'torch' in sys.modules, sorted(k for k in globals() if not k.startswith('_')))")
        run_notebook(second, Limits(cell_seconds=60), pool=pool)
        names = "['In', 'Out', 'exit', 'get_ipython', 'open', 'os', 'quit', 'sys']"  # no name of the preload
        assert text(second.cells[0]) == f"False False True {names}\n"
        assert spare.sandbox.exchange.folder.exists() is False  # the spare ran that notebook, and was ended
        other = notebook("print('other limits')")
        run_notebook(other, Limits(cell_seconds=30), pool=pool)  # another configuration: a spare of its own
        assert len(pool._spares) == 2
        kernels = [km.provisioner.process.pid for km in pool._spares.values()]
    finally:
        pool.close()
    assert pool._spares == {} and not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                                          for pid in kernels)


def test_the_kernel_imports_the_package_the_grader_imported_even_through_pythonpath(tmp_path):
    """A grader run with PYTHONPATH on a clone once failed with "No module named 'autograder.checks'",
    reported as "the sandbox cannot start": the kernel looked only in the environment's install."""
    import shutil
    shutil.copytree(course.ROOT / "autograder", tmp_path / "clone" / "autograder",
                    ignore=shutil.ignore_patterns("__pycache__"))
    script = ("from autograder.grader.sandbox import Limits, run_notebook\nimport nbformat, autograder\n"
              "nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("
              "'import autograder.checks; print(autograder.checks.__file__)')])\n"
              "run_notebook(nb, Limits(cell_seconds=60))\n"
              "print(autograder.__file__)\nprint(''.join(o.get('text', '') for o in nb.cells[0].outputs))\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "clone")}
    import subprocess
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    grader_copy, kernel_copy = done.stdout.strip().splitlines()[-2:]
    assert grader_copy.startswith(str(tmp_path / "clone")), grader_copy
    assert kernel_copy.startswith(str(tmp_path / "clone" / "autograder" / "checks")), done.stdout


@AS_ROOT
def test_memory_that_no_resident_set_shows_is_counted_and_the_kernel_stopped(tmp_path, monkeypatch):
    """Pages of memfd files are in no process's resident set: a kernel held 2 GB of them under a
    1.5 GB limit and scored full marks while the memory watch polled RSS alone."""
    hoard = ("import os\nheld = []\nfor i in range(40):\n    fd = os.memfd_create(f'm{i}')\n"
             "    os.write(fd, bytes(64 * 2**20))\n    held.append(fd)\nprint('held', len(held) * 64, 'MB')")
    from autograder.grader import cgroup
    run = "memfd" + secrets.token_hex(4)  # this test's groups, told apart from those of tests beside it
    monkeypatch.setenv(cgroup.RUN_ENV_VAR, run)
    nb = notebook(hoard, "print('next cell')")
    problems = run_notebook(nb, Limits(cell_seconds=60, memory_mb=1500))
    assert problems[:1] == [(0, "the cell used more than 1500 MB of memory")], problems
    assert text(nb.cells[1]) == "next cell\n"  # a fresh kernel goes on
    assert cgroup.groups_of_run(run) == []  # each kernel's group ended with it


@AS_ROOT
def test_a_kernels_processes_are_bounded_by_its_control_group():
    """pids.max bounds what a kernel can start, and removing the group kills whatever still runs in it."""
    import subprocess

    from autograder.grader.cgroup import Cgroup
    group = Cgroup.create(memory_mb=512, processes=5)
    assert group is not None
    script = ("import subprocess, time\nstarted = []\ntry:\n    for _ in range(20):\n"
              "        started.append(subprocess.Popen(['sleep', '60'], stdout=subprocess.DEVNULL))\n"
              "except OSError as err:\n    print(len(started), err.strerror, flush=True)\ntime.sleep(60)\n")
    running = subprocess.Popen(group.wrap([sys.executable, "-c", script]), stdout=subprocess.PIPE, text=True)
    try:
        count, said = running.stdout.readline().split(" ", 1)
        assert 1 <= int(count) < 5 and "Resource temporarily unavailable" in said, (count, said)
    finally:
        killed = group.remove()
        running.wait(timeout=30)
    assert killed == int(count) + 1  # the script and every sleep it started, killed with the group
    assert all(not folder.exists() for folder in group.folders)


def fake_cgroups(monkeypatch, tmp_path, own: str, files: dict, links=()) -> pathlib.Path:
    """A control-group root in tmp_path laid out as `files` ({path: text}; `links`: (link, target)),
    with `own` as the grader's /proc/self/cgroup. As in cgroupfs, a new group's folder holds (empty)
    the interface files of its parent's, and removing the folder removes them."""
    from autograder.grader import cgroup
    root = tmp_path / "cgroup"
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    for link, target in links:
        (root / link).symlink_to(target)
    (tmp_path / "own").write_text(own)
    mkdir, rmdir = pathlib.Path.mkdir, pathlib.Path.rmdir

    def made(path, *args, **kwargs):
        mkdir(path, *args, **kwargs)
        if root in path.parents:
            for file in path.parent.iterdir():
                if file.is_file():
                    (path / file.name).write_text("")

    def removed(path):
        if root in path.parents:
            for file in path.iterdir():
                file.unlink()
        rmdir(path)

    monkeypatch.setattr(pathlib.Path, "mkdir", made)
    monkeypatch.setattr(pathlib.Path, "rmdir", removed)
    monkeypatch.setattr(cgroup, "ROOT", root)
    monkeypatch.setattr(cgroup, "OWN", tmp_path / "own")
    return root


def written(folder) -> dict:
    """{file: what was written} of a fake group's files that are not empty."""
    return {f.name: f.read_text().strip() for f in sorted(folder.iterdir()) if f.read_text().strip()}


def joined_and_removed(group, run):
    """The wrapped command starts in every folder of the fake group, and the run's removal kills it
    and removes them all; return how many folders `remove_run` counted."""
    import subprocess
    import threading

    from autograder.grader import cgroup
    sleeper = subprocess.Popen(group.wrap(["sleep", "60"]))

    def leaves_its_groups():  # as in cgroupfs, a process that ended is listed no more (reaped only later)
        os.waitid(os.P_PID, sleeper.pid, os.WEXITED | os.WNOWAIT)
        for folder in group.folders:
            (folder / "cgroup.procs").write_text("")

    watch = threading.Thread(target=leaves_its_groups)
    try:
        for folder in group.folders:  # the shell writes its pid, then becomes `sleep`
            while (folder / "cgroup.procs").read_text() != f"{sleeper.pid}\n":
                assert sleeper.poll() is None, f"the wrapped command ended ({sleeper.returncode}) before joining"
                time.sleep(0.01)
        assert group.processes() == [sleeper.pid]
        assert cgroup.groups_of_run(run) == sorted(group.folders)
        watch.start()
        count = cgroup.remove_run(run)
        assert sleeper.wait(timeout=10) == -9  # killed with its group
    finally:
        sleeper.kill()
        if watch.is_alive():
            watch.join()
    assert cgroup.groups_of_run(run) == [] and not any(folder.exists() for folder in group.folders)
    return count


V2_GRADER = {"cgroup.controllers": "cpuset cpu io memory pids", "grader/cgroup.controllers": "cpu memory pids",
             "grader/cgroup.procs": "", "grader/memory.max": "", "grader/memory.swap.max": "",
             "grader/memory.oom.group": "", "grader/memory.events": "", "grader/pids.max": "", "grader/cpu.weight": "",
             "grader/cpu.max": "", "grader/cpu.stat": ""}


@pytest.mark.parametrize("enabled", ["memory pids cpu", "memory pids"])
@pytest.mark.parametrize("cpus", [2, None])
def test_a_cgroup_v2_group_limits_memory_processes_and_cpus_where_the_hierarchy_has_them(
        tmp_path, monkeypatch, enabled, cpus):
    """cgroup v2 (never mounted on the machine the tests first ran on): one folder beside the grader's,
    every limit in it, the cpu controller asked for where the grader's group does not enable it; without
    it, memory and processes are limited all the same."""
    from autograder.grader import cgroup
    root = fake_cgroups(monkeypatch, tmp_path, "0::/grader\n",
                        {**V2_GRADER, "grader/cgroup.subtree_control": enabled})
    run = "fake" + secrets.token_hex(4)
    monkeypatch.setenv(cgroup.RUN_ENV_VAR, run)
    group = cgroup.Cgroup(memory_mb=512, processes=8, cpus=cpus)
    [folder] = group.folders
    assert group.version == 2 and folder.parent == root / "grader" and folder.name.startswith(f"{cgroup.PREFIX}{run}-")
    limited_cpu = {"cpu.weight": "200", "cpu.max": "200000 100000"} if cpus and "cpu" in enabled else {}
    assert written(folder) == {"memory.max": str(512 * 2**20), "memory.oom.group": "1", "memory.swap.max": "0",
                               "pids.max": "8", **limited_cpu}
    # the fake keeps what the grader wrote: "+cpu", its request to enable the controller, where it was missing
    asked = "+cpu" if cpus and "cpu" not in enabled else enabled
    assert (root / "grader" / "cgroup.subtree_control").read_text().strip() == asked
    assert not group.oom_killed()
    (folder / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert group.oom_killed()
    (folder / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
    assert group.cpu_seconds() == 1.5
    assert joined_and_removed(group, run) == 1


V1_GRADER = {"memory/grader/cgroup.procs": "", "memory/grader/memory.limit_in_bytes": "",
             "memory/grader/memory.memsw.limit_in_bytes": "", "memory/grader/memory.oom_control": "",
             "pids/grader/cgroup.procs": "", "pids/grader/pids.max": ""}
CPU = {"cgroup.procs": "", "cpu.shares": "", "cpu.cfs_period_us": "", "cpu.cfs_quota_us": ""}
CPUACCT = {"cgroup.procs": "", "cpuacct.usage": ""}


@pytest.mark.parametrize("layout", ["cpu and cpuacct apart", "cpu and cpuacct shared", "no cpu hierarchy"])
def test_a_cgroup_v1_group_has_a_folder_in_each_hierarchy_it_limits_or_counts(tmp_path, monkeypatch, layout):
    """cgroup v1: a folder per hierarchy (one where cpu and cpuacct share theirs, as systemd mounts
    them), the kernel's first process in each; where no cpu hierarchy is mounted, memory and
    processes are limited all the same."""
    from autograder.grader import cgroup
    own = "4:memory:/grader\n8:pids:/grader\n0::/\n"
    files, links = dict(V1_GRADER), []
    if layout == "cpu and cpuacct apart":
        own += "1:cpu:/grader\n2:cpuacct:/grader\n"
        files |= {f"cpu/grader/{k}": v for k, v in CPU.items()} | {f"cpuacct/grader/{k}": v for k, v in CPUACCT.items()}
        hierarchies = ["memory", "pids", "cpu", "cpuacct"]
    elif layout == "cpu and cpuacct shared":
        own += "1:cpu,cpuacct:/grader\n"
        files |= {f"cpu,cpuacct/grader/{k}": v for k, v in (CPU | CPUACCT).items()}
        links = [("cpu", "cpu,cpuacct"), ("cpuacct", "cpu,cpuacct")]
        hierarchies = ["memory", "pids", "cpu,cpuacct"]
    else:
        own += "1:cpu,cpuacct:/grader\n"  # listed, but mounted elsewhere than the root
        hierarchies = ["memory", "pids"]
    root = fake_cgroups(monkeypatch, tmp_path, own, files, links)
    run = "fake" + secrets.token_hex(4)
    monkeypatch.setenv(cgroup.RUN_ENV_VAR, run)
    group = cgroup.Cgroup(memory_mb=512, processes=8, cpus=2)
    assert group.version == 1
    assert group.folders == [root / h / "grader" / group.name for h in hierarchies]
    memory, pids, *cpu = group.folders
    limit = str(512 * 2**20)
    assert written(memory) == {"memory.limit_in_bytes": limit, "memory.memsw.limit_in_bytes": limit}
    assert written(pids) == {"pids.max": "8"}
    if cpu:
        assert written(cpu[0]) == {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "200000", "cpu.shares": "2048"}
        (cpu[-1] / "cpuacct.usage").write_text("2500000000\n")
        assert group.cpu_seconds() == 2.5
    assert not group.oom_killed()
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    assert group.oom_killed()
    assert joined_and_removed(group, run) == len(hierarchies)


@AS_ROOT
def test_a_kernels_processes_together_get_no_more_cpu_than_its_limits_give():
    """A kernel's `setsid` children each had a scheduler autogroup of their own, and no control
    group bounded their CPU: a kernel spinning many took as many shares from its neighbours. Its
    group's quota (Limits.threads CPUs) holds them all, measured from the group's own CPU count."""
    import subprocess

    from jupyter_client.utils import run_sync

    from autograder.grader import cgroup
    from autograder.grader.sandbox import HISTORY
    limits = Limits(threads=1)
    km = isolation.SandboxedKernelManager(kernel_name="python3", sandbox=isolation.Sandbox(limits))
    group, kc = km.sandbox.cgroup, None
    [cpu] = [folder for folder in group.folders if (folder / "cpu.cfs_quota_us").exists()]
    read = {name: int((cpu / name).read_text()) for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.shares")}
    assert read == {"cpu.cfs_quota_us": limits.threads * cgroup.PERIOD_US, "cpu.cfs_period_us": cgroup.PERIOD_US,
                    "cpu.shares": 1024 * limits.threads}
    spin = ("import subprocess, sys\nspinners = [subprocess.Popen([sys.executable, '-c', 'while True: pass'], "
            "start_new_session=True) for _ in range(4)]")
    try:
        run_sync(km.start_kernel)(extra_arguments=list(HISTORY), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        kc = km.blocking_client()
        kc.start_channels()
        kc.wait_for_ready(timeout=120)
        reply = kc.execute(spin, reply=True, timeout=120)
        assert reply["content"]["status"] == "ok", reply["content"]
        in_cpu_group = {int(pid) for pid in (cpu / "cgroup.procs").read_text().split()}
        spinners = [p for p in map(psutil.Process, group.processes()) if p.cmdline()[-1:] == ["while True: pass"]]
        assert len(spinners) == 4 and {p.pid for p in spinners} <= in_cpu_group
        assert len({os.getsid(p.pid) for p in spinners}) == 4  # a session (and autogroup) each
        used, began = group.cpu_seconds(), time.monotonic()
        time.sleep(2)  # the window measured (no switch: what is measured is CPU time, not time)
        used, elapsed = group.cpu_seconds() - used, time.monotonic() - began
        assert used <= limits.threads * elapsed * 1.2 + 0.05, (used, elapsed)
    finally:
        if kc is not None:
            kc.stop_channels()
        with contextlib.suppress(Exception):
            run_sync(km.shutdown_kernel)(now=True)
        km.sandbox.end()


def test_no_new_namespaces_mounts_keyrings_or_ptrace_inside_and_the_rest_works():
    """Run as root, a kernel once made user, mount and network namespaces in its sandbox, took every
    capability in them and mounted a 12 GB tmpfs. The seccomp filter refuses those calls (EPERM)."""
    probe = (
        "import ctypes, errno, json, os, subprocess, threading\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def err(result):\n"
        "    return errno.errorcode.get(ctypes.get_errno(), '?') if result == -1 else 'allowed'\n"
        "said = {'unshare(NEWUSER)': err(libc.unshare(0x10000000)), 'unshare(NEWNS)': err(libc.unshare(0x00020000)),\n"
        "        'mount': err(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)),\n"
        "        'keyctl': err(libc.syscall(250, 0, 0, 0, 0, 0)) if os.uname().machine == 'x86_64' else 'EPERM',\n"
        "        'ptrace': err(libc.ptrace(16, os.getppid(), None, None)),\n"
        "        'unshare -U': subprocess.run(['unshare', '-U', 'true'], capture_output=True).returncode != 0}\n"
        "box = []\n"
        "t = threading.Thread(target=lambda: box.append(1)); t.start(); t.join()\n"
        "said['thread'] = box == [1]\n"
        "said['subprocess'] = subprocess.run(['true']).returncode == 0\n"
        "print(json.dumps(said))")
    nb = notebook(probe)
    run_notebook(nb, Limits(cell_seconds=60))
    said = report(nb.cells[0])
    assert said == {"unshare(NEWUSER)": "EPERM", "unshare(NEWNS)": "EPERM", "mount": "EPERM", "keyctl": "EPERM",
                    "ptrace": "EPERM", "unshare -U": True, "thread": True, "subprocess": True}, said


def test_the_filter_is_compiled_for_this_machine(tmp_path):
    from autograder.grader import seccomp
    assert seccomp.compile_filter(tmp_path / "f.bpf") and (tmp_path / "f.bpf").stat().st_size > 100
    with pytest.raises(FileExistsError):  # never written through a file someone prepared
        seccomp.compile_filter(tmp_path / "f.bpf")


def test_each_process_of_a_sandbox_has_a_cpu_time_limit(tmp_path):
    plan = bubblewrap.Plan(workdir=str(tmp_path), exchange=str(tmp_path), env={}, cpu_seconds=960)
    assert "--cpu=960" in bubblewrap.limits(plan)


TRITON_CELL = '''import json, os, time
said = {"interpret": os.environ.get("TRITON_INTERPRET"), "imported": "triton" in __import__("sys").modules}
began = time.perf_counter()
from autograder.learner import triton_setup
status = triton_setup.prepare("cpu")
import torch, triton, triton.language as tl
from triton.runtime.cache import get_cache_manager, get_dump_manager
said["import_s"] = time.perf_counter() - began

@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)

x = torch.arange(10, dtype=torch.float32)
launches = []
for _ in range(3):
    began = time.perf_counter()
    add_one[(triton.cdiv(10, 4),)](x, 10, BLOCK=4)
    launches.append(time.perf_counter() - began)
said.update(mode=status.mode, result=x.tolist(), launch_s=launches, home=os.path.expanduser("~"),
            cache=get_cache_manager("0" * 64).put(b"probe", "probe.bin"),
            dump=get_dump_manager("0" * 64).put(b"probe", "probe.bin"))
print(json.dumps(said))
'''


@pytest.mark.needs(module="triton", reason="Triton is not installed: `pip install triton` (Linux)")
def test_a_triton_kernel_runs_in_the_interpreter_inside_the_sandbox_with_its_cache_in_the_working_folder():
    """Notebook 09's kernels (issue 24): on the CPU, Triton's interpreter; its cache, where a GPU run
    writes compiled kernels and launcher stubs, is the sandbox's private working folder, never the host's home."""
    nb = notebook(TRITON_CELL)
    problems = run_notebook(nb, Limits(cell_seconds=120))
    assert problems == [] and errors(nb.cells[0]) == [], (problems, errors(nb.cells[0]))
    said = report(nb.cells[0])
    assert said["mode"] == "interpreted" and said["result"] == [float(i + 3) for i in range(10)], said
    assert said["imported"] is False and said["home"] == isolation.HOME
    for written in (said["cache"], said["dump"]):
        assert written.startswith(f"{isolation.HOME}/.triton/"), said
    assert not pathlib.Path(pathlib.Path.home(), ".triton", "cache", said["cache"].split("/.triton/cache/")[1]).exists()
    if not bubblewrap.nvidia_devices():  # set by the sandbox, before anything imported triton
        assert said["interpret"] == "1", said


def test_triton_finds_its_interpreter_and_private_folders_in_the_kernels_environment(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    monkeypatch.setattr(bubblewrap, "nvidia_devices", lambda: [])
    env = isolation.kernel_env(isolation.HOME)
    assert env["TRITON_INTERPRET"] == "1" and env["TRITON_HOME"] == isolation.HOME
    assert all(env[f"TRITON_{d}_DIR"].startswith(f"{isolation.HOME}/.triton/") for d in ("CACHE", "DUMP", "OVERRIDE"))
    monkeypatch.setattr(bubblewrap, "nvidia_devices", lambda: ["/dev/nvidia0"])  # a GPU: compiled, unless...
    assert "TRITON_INTERPRET" not in isolation.kernel_env(isolation.HOME)
    monkeypatch.setenv("COURSE_DEVICE", "cpu")  # ...the course runs on the CPU
    assert isolation.kernel_env(isolation.HOME)["TRITON_INTERPRET"] == "1"
    monkeypatch.setenv("COURSE_DEVICE", "cuda:0")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # or the instructor asks for the interpreter
    assert isolation.kernel_env(isolation.HOME)["TRITON_INTERPRET"] == "1"


@AS_ROOT
def test_a_class_run_removes_the_groups_its_workers_left(monkeypatch):
    """A worker's spare kernel (started ahead, never used) is not ended when the worker process
    ends: its group carries the run's token, and the run removes it, killing what runs there."""
    import subprocess

    from autograder.grader import cgroup
    monkeypatch.setenv(cgroup.RUN_ENV_VAR, "testrun" + secrets.token_hex(4))
    group = cgroup.Cgroup.create(memory_mb=256, processes=8)
    sleeper = subprocess.Popen(group.wrap(["sleep", "60"]))
    for folder in group.folders:  # the shell joins each group, then becomes `sleep`
        while str(sleeper.pid) not in (folder / "cgroup.procs").read_text().split():
            assert sleeper.poll() is None, f"the wrapped command ended ({sleeper.returncode}) before joining"
            time.sleep(0.01)
    run = os.environ[cgroup.RUN_ENV_VAR]
    assert cgroup.groups_of_run(run) == sorted(group.folders)
    assert cgroup.remove_run(run) == len(group.folders) and cgroup.groups_of_run(run) == []
    assert sleeper.wait(timeout=10) != 0  # killed with its group
