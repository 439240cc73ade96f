"""The learner's progress file: quiz attempts and visible-test runs, appended one line at a time.

Why append-only: two kernels (two notebooks open at once) save at the same moment. Rewriting the
whole file lost attempts; appending one complete line per record, under an exclusive lock where the
system offers one, loses none and never needs a temporary file.

The file lives at ``$COURSE_PROGRESS`` if set, else ``~/.backprop-course/progress.json``. It is a
sequence of JSON values, one record per line (JSON Lines):

- ``{"type": "learner", "id": ...}``: the learner's random id (the first one in the file counts);
  it seeds the order in which each choice question shows its options, so that order stays the same
  across re-runs and kernels;
- ``{"type": "attempt", ...}``: one quiz answer (see ``autograder.learner.quiz_answers``);
- ``{"type": "test", ...}``: one run of a visible test cell (see ``autograder.learner.progress``).

A file written by an earlier version of the course (one JSON document ``{"version": 1, "attempts":
[...], "tests": [...]}``) is read as it is, and new records are appended after it: nothing is
converted, so nothing can be lost converting it. Records of a type this version does not know are
skipped (a later version may add some). A file that cannot be read (a line that is not a JSON object,
a document without its lists) is renamed aside (``progress.json.damaged-<time>``), never overwritten;
the records that could be read are copied into a new file and the learner is told, in one line on
stdout. Every write, and every read that may set a file aside, holds the lock, so a last line without its
newline is damage (a write cut short by a crash); where no lock can be had, such a line may be a write
still under way in another kernel, and a read leaves it alone. A record appended after an unfinished
line starts on a line of its own.
"""
import contextlib
import datetime
import json
import os
import pathlib
import secrets

ENV_VAR = "COURSE_PROGRESS"
GRADING_ENV_VAR = "NBGRADER_EXECUTION"  # set by nbgrader while it autogrades or validates
LEGACY_VERSION = 1
RECORD_TYPES = ("learner", "attempt", "test")
_DECODER = json.JSONDecoder()

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None
try:  # Windows
    import msvcrt
except ImportError:
    msvcrt = None


class ProgressFileError(ValueError):
    """A progress file that cannot be read as progress records."""


def progress_path() -> pathlib.Path:
    custom = os.environ.get(ENV_VAR)
    return pathlib.Path(custom) if custom else pathlib.Path.home() / ".backprop-course" / "progress.json"


def now() -> str:
    """The time stamp of a record: local time with its UTC offset, to the second."""
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


# --- reading ----------------------------------------------------------------------------------------
def parse(text: str, locked: bool = True) -> tuple:
    """(records, problems) from a progress file's text: records as ``{"type": ..., ...}`` dicts in file
    order (a legacy document's attempts and tests first), problems as short descriptions.

    `locked`: read under the lock, so an unfinished last line is damage, not a write under way."""
    records, problems, position, first = [], [], 0, True
    while True:
        while position < len(text) and text[position] in " \t\r\n":
            position += 1
        if position >= len(text):
            return records, problems
        line_end = text.find("\n", position)
        try:
            value, end = _DECODER.raw_decode(text, position)
        except ValueError as err:
            if line_end < 0 and not locked:  # an unfinished last line: another kernel may be writing it
                return records, problems
            problems.append(f"line {text.count(chr(10), 0, position) + 1}: {err.msg}")
            position = len(text) if line_end < 0 else line_end + 1
            first = False
            continue
        if first and isinstance(value, dict) and "type" not in value:
            try:
                records += _legacy(value)
            except ProgressFileError as err:
                problems.append(str(err))
        elif isinstance(value, dict) and isinstance(value.get("type"), str):
            if value["type"] in RECORD_TYPES:
                records.append(value)
        else:
            problems.append(f"line {text.count(chr(10), 0, position) + 1}: not a progress record")
        position, first = end, False


def _legacy(document: dict) -> list:
    """The records of a file written as one JSON document (the course's first format)."""
    if not isinstance(document.get("attempts"), list):
        raise ProgressFileError("no list of attempts")
    tests = document.get("tests", [])
    if not isinstance(tests, list):
        raise ProgressFileError("'tests' is not a list")
    return ([{**a, "type": "attempt"} for a in document["attempts"] if isinstance(a, dict)]
            + [{**t, "type": "test"} for t in tests if isinstance(t, dict)])


def _read_records(path, locked=True) -> list:
    """The records of `path`; a damaged file is set aside and its readable records carried over."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except UnicodeDecodeError as err:
        return _set_aside(path, [], f"not text: {err.reason}")
    records, problems = parse(text, locked)
    if problems:
        return _set_aside(path, records, "; ".join(problems[:3]) + (" ..." if len(problems) > 3 else ""))
    return records


def _set_aside(path, readable, why) -> list:
    """Rename a damaged file (never overwriting anything), start a new one with its readable records."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    kept = path.with_name(f"{path.name}.damaged-{stamp}")
    suffix = 1
    while kept.exists():
        kept, suffix = path.with_name(f"{path.name}.damaged-{stamp}-{suffix}"), suffix + 1
    path.rename(kept)
    if readable:
        _write(path, "".join(_line(r) for r in readable))
    carried = f"; the {len(readable)} records that could be read are in the new file" if readable else ""
    print(f"Your progress file could not be read ({why}); it was kept as {kept}{carried}.")
    return readable


def load() -> dict:
    """Everything saved: ``{"learner": id or None, "attempts": [...], "tests": [...]}``, in file order."""
    path = progress_path()
    with _lock(path) as locked:
        records = _read_records(path, locked)
    return _collect(records)


def _collect(records) -> dict:
    data = {"learner": None, "attempts": [], "tests": []}
    for record in records:
        body = {k: v for k, v in record.items() if k != "type"}
        if record["type"] == "learner":
            if data["learner"] is None and isinstance(record.get("id"), str):
                data["learner"] = record["id"]
        else:
            data[record["type"] + "s"].append(body)
    return data


# --- writing ----------------------------------------------------------------------------------------
def _line(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def _write(path, text: str) -> None:
    """Append `text` with one write call; start on a line of its own if the file's last line is open."""
    data = text.encode("utf-8")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size:
            os.lseek(fd, size - 1, os.SEEK_SET)  # reading only: O_APPEND writes at the end whatever the offset
            if os.read(fd, 1) != b"\n":
                data = b"\n" + data
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


@contextlib.contextmanager
def _lock(path):
    """An exclusive lock on ``<file>.lock`` (a file of its own: the data file may be renamed aside).

    Where the system or the folder offers no lock (some network drives), appends still go through one
    write call on a file opened for appending, which POSIX systems keep whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield False
        return
    try:
        locked = _acquire(fd)
        try:
            yield locked
        finally:
            if locked:
                _release(fd)
    finally:
        os.close(fd)


def _acquire(fd) -> bool:
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return True
        if msvcrt is not None:  # pragma: no cover - Windows: lock the first byte (retries for 10 s)
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
            return True
    except OSError:
        pass
    return False


def _release(fd) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
    elif msvcrt is not None:  # pragma: no cover - Windows
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)


def append(kind: str, entry: dict) -> None:
    """Append one record of type `kind` ("attempt" or "test"), stamped with the time."""
    if kind not in RECORD_TYPES:
        raise ValueError(f"a progress record is one of {RECORD_TYPES}, not {kind!r}")
    path = progress_path()
    with _lock(path) as locked:
        _read_records(path, locked)  # a damaged file is set aside before anything is added to it
        _write(path, _line({"type": kind, **entry, "time": now()}))


_UNSAVED_ID = secrets.token_hex(8)  # this process's id where none can be read or saved


def learner_id() -> str:
    """This learner's random id, made and saved on first use; the same in every kernel from then on.

    Showing a quiz must never fail or write while nbgrader grades, nor where the file cannot be written:
    then the id is this process's own (the order of the options is then stable within the kernel)."""
    if os.environ.get(GRADING_ENV_VAR):
        return _UNSAVED_ID
    path = progress_path()
    try:
        with _lock(path) as locked:
            found = _collect(_read_records(path, locked))["learner"]
            if found is None:
                found = secrets.token_hex(8)
                _write(path, _line({"type": "learner", "id": found, "time": now()}))
    except OSError:
        return _UNSAVED_ID
    return found


def exercise_of(cell: str) -> str:
    """The graded name a test cell checks: its grade id up to an optional '-behaviour'
    ('freeze_all_but-flags' and 'freeze_all_but-training' both check freeze_all_but)."""
    return cell.split("-")[0]


def record(attempt: dict) -> None:
    """Append one quiz attempt."""
    append("attempt", attempt)


def attempts(notebook=None) -> list:
    """Saved attempts, optionally only those of one notebook."""
    return [a for a in load()["attempts"] if notebook is None or a.get("notebook") == notebook]


def test_runs(notebook=None) -> list:
    """Saved test runs, optionally only those of one notebook."""
    return [t for t in load()["tests"] if notebook is None or t.get("notebook") == notebook]
