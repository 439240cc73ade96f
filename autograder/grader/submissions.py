"""Take in a class's submissions so that no file, however broken or hostile, stops the others.

What comes in: nbgrader's `submitted/<student>/<assignment>/<assignment>.ipynb`, and LMS downloads
(`<student name>.zip`) unpacked into that layout first. Whatever is wrong with one student's file
(a symbolic link, a truncated zip, an encrypted member, a notebook too large, empty, not UTF-8, not
JSON, of another nbformat) becomes a `Problem` for that student and that assignment: it scores 0
with the reason, and everyone else is graded as usual.

Rules: symbolic links are never followed (a submission that is one points at something of the
grader's). Only the exact notebook name counts (`01_chain_rule.ipynb`); hidden folders and Jupyter
autosaves (`.ipynb_checkpoints/...-checkpoint.ipynb`) are ignored. Two candidates, or an existing
submission that a zip would replace, are reported, never settled silently. Sizes are checked
before anything is read, and reads are bounded, so a small zip cannot unpack into gigabytes.
"""
import dataclasses
import hashlib
import json
import os
import pathlib
import re
import stat
import unicodedata
import zipfile

import nbformat

MAX_NOTEBOOK_BYTES = 32 * 2**20  # a notebook of this course is well under 1 MB; outputs are cleared anyway
_PLAIN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_COMPUTED_ID = re.compile(r".*-[0-9a-f]{8}")  # what student_id makes of a name that is not a plain id
# A folder in submitted/ whose name would break a row of nbgrader's export (which does not quote)
# or a line of a report: control characters, commas and quotes.
_UNSAFE_FOLDER = re.compile(r"[\x00-\x1f\x7f,\"'`]")


class NotGradable(Exception):
    """A submission that cannot be graded; the message says why, in the instructor's words."""


@dataclasses.dataclass(frozen=True)
class Submission:
    student: str
    assignment: str
    path: pathlib.Path


@dataclasses.dataclass(frozen=True)
class Problem:
    """A (student, assignment) that scores 0 because of its files, and why."""
    student: str
    assignment: str
    reason: str
    recorded: bool = True  # False: reported only, never written to the gradebook under this name

def student_id(name: str) -> str:
    """A stable folder name for a student, from an LMS download's file name.

    A name that is already a plain id stays as it is. Any other (spaces, accents, other scripts) gets
    its ASCII letters and digits (accents dropped) plus a short hash of the whole name, so two names
    that read alike never share an id, and the same name always gives the same one. A plain name
    that looks like such an id ("Jose_Alvarez-6c15c012") is hashed too, so no zip can claim the id
    another student's name computes to.
    """
    name = unicodedata.normalize("NFC", name)
    if _PLAIN_ID.fullmatch(name) and not _COMPUTED_ID.fullmatch(name):
        return name
    ascii_ = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^A-Za-z0-9]+", "_", ascii_).strip("_")[:40] or "student"
    return f"{slug}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def describe(path) -> str:
    """A path as the instructor reads it in a message (never its contents)."""
    return repr(str(path))[1:-1]


def _is_link(path: pathlib.Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def read_bounded(path: pathlib.Path, limit: int = MAX_NOTEBOOK_BYTES, label: str | None = None) -> bytes:
    """The bytes of a regular file, refusing a symbolic link (not followed) or one over `limit`;
    `label`: how messages name the file (its path by default)."""
    label = label or describe(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        if _is_link(path):
            raise NotGradable(f"{label} is a symbolic link: not followed") from None
        raise NotGradable(f"{label} cannot be opened ({err.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # a folder opens too, then fails to read (IsADirectoryError)
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise NotGradable(f"{label} is {kind}, not a notebook file")
    with os.fdopen(fd, "rb") as f:
        if info.st_size > limit:
            raise NotGradable(f"{label} holds {info.st_size:,} bytes; a notebook may hold {limit:,}")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise NotGradable(f"{label} grew past {limit:,} bytes while it was read")
    return data


def parse_notebook(data: bytes, label: str) -> nbformat.NotebookNode:
    """A notebook from untrusted bytes, or NotGradable saying what is wrong with them."""
    if not data.strip():
        raise NotGradable(f"{label} is empty")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise NotGradable(f"{label} is not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start:,})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise NotGradable(f"{label} is not a complete notebook: its JSON breaks at line {err.lineno}, "
                          f"column {err.colno} ({err.msg}); truncated or not a notebook") from None
    except RecursionError:
        raise NotGradable(f"{label} nests its JSON too deeply to be a notebook") from None
    if not isinstance(raw, dict) or "cells" not in raw and "worksheets" not in raw:
        raise NotGradable(f"{label} is JSON but not a notebook (no cells)")
    version = raw.get("nbformat")
    if version not in (3, 4):
        raise NotGradable(f"{label} says it is nbformat {str(version)[:20]}; this grader reads nbformat 4 "
                          "(and 3, upgraded): save it again from Jupyter")
    try:
        nb = nbformat.reads(text, as_version=4, capture_validation_error={})
        nbformat.validate(nb)
    except Exception as err:  # whatever nbformat objects to: the file is not a notebook we can run
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise NotGradable(f"{label} is not a valid notebook: {first[:300]}") from None
    return nb


def find_submissions(root: pathlib.Path, names: list) -> tuple:
    """nbgrader's layout, submitted/<student>/<assignment>/<assignment>.ipynb; return (submissions,
    problems). A student folder for an assignment without that exact notebook is a problem."""
    found, problems = [], []
    base = root / "submitted"
    if not base.is_dir() or _is_link(base):
        return found, problems
    for folder in sorted(base.iterdir()):
        student = folder.name
        if student.startswith("."):
            continue
        if _UNSAFE_FOLDER.search(student):
            unsafe = (f"the student folder submitted/{describe(student)} has a control character, comma or quote "
                      "in its name, which would break the gradebook's export: rename it to grade it")
            problems += [Problem(describe(student), name, unsafe, recorded=False) for name in names]
            continue
        if _is_link(folder):
            link = f"{describe(folder.relative_to(root))} is a symbolic link: not followed"
            problems += [Problem(student, name, link) for name in names]
            continue
        for name in names:
            where = folder / name
            if _is_link(where):
                problems.append(Problem(student, name, f"{describe(where.relative_to(root))} is a symbolic link: "
                                        "not followed"))
            elif (where / f"{name}.ipynb").exists() or _is_link(where / f"{name}.ipynb"):
                found.append(Submission(student, name, where / f"{name}.ipynb"))  # read_bounded refuses a link
            elif where.is_dir():
                others = sorted(p.name for p in where.glob("*.ipynb"))
                hint = f" (found: {', '.join(others)[:200]}): rename it to grade it" if others else ""
                problems.append(Problem(student, name, f"no {name}.ipynb in {describe(where.relative_to(root))}{hint}"))
    return found, problems


def _hidden(member: str) -> bool:
    """In a hidden folder (.ipynb_checkpoints holds autosaves) or macOS's resource forks."""
    return any(part.startswith(".") and part not in (".", "..") or part == "__MACOSX"
               for part in pathlib.PurePosixPath(member).parts)


def _candidates(z: zipfile.ZipFile, name: str) -> list:
    """Members that are `name`.ipynb, outside hidden folders (autosaves live in .ipynb_checkpoints)."""
    return [info for info in z.infolist() if not info.is_dir() and not _hidden(info.filename)
            and pathlib.PurePosixPath(info.filename).name == f"{name}.ipynb"]


def _near_misses(z: zipfile.ZipFile, name: str, only: bool) -> list:
    """Visible notebooks that are not `name`.ipynb but look meant for it (any, if `only` one is graded)."""
    visible = [i.filename for i in z.infolist() if i.filename.endswith(".ipynb") and not _hidden(i.filename)]
    return [n for n in visible if only or name in pathlib.PurePosixPath(n).name]


def _member_bytes(z: zipfile.ZipFile, info: zipfile.ZipInfo, where: str) -> bytes:
    if info.flag_bits & 0x1:
        raise NotGradable(f"{where} is encrypted: ask for it unencrypted")
    if stat.S_ISLNK(info.external_attr >> 16):
        raise NotGradable(f"{where} is a symbolic link: not followed")
    if info.file_size > MAX_NOTEBOOK_BYTES:
        raise NotGradable(f"{where} unpacks to {info.file_size:,} bytes; a notebook may hold {MAX_NOTEBOOK_BYTES:,}")
    with z.open(info) as member:  # the declared size can lie: never read more than the limit
        data = member.read(MAX_NOTEBOOK_BYTES + 1)
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise NotGradable(f"{where} unpacks to more than {MAX_NOTEBOOK_BYTES:,} bytes")
    return data


def _place(root: pathlib.Path, student: str, name: str, data: bytes, archive: pathlib.Path):
    """Write the notebook as submitted/<student>/<name>/<name>.ipynb, unless a different one is there."""
    folder = root / "submitted" / student / name
    for part in (root / "submitted", root / "submitted" / student, folder, folder / f"{name}.ipynb"):
        if _is_link(part):
            raise NotGradable(f"{describe(part)} is a symbolic link: not followed")
    target = folder / f"{name}.ipynb"
    if target.exists():
        if read_bounded(target) == data:
            return  # the same file, unpacked by an earlier run
        raise NotGradable(f"{describe(archive.name)} would replace the different {describe(target.relative_to(root))} "
                          "already there: neither is graded; remove the one that should not count")
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def unpack_zips(zips: pathlib.Path, root: pathlib.Path, names: list) -> tuple:
    """Each <student>.zip into submitted/<student>/<assignment>/; return (problems, {zip name: student id}).

    Members are read, never extracted, so a member named ../../gradebook.db writes nowhere. An
    unreadable zip is a problem for each assignment it could hold that the student has not already.
    """
    problems, ids, seen = [], {}, {}
    for archive in sorted(zips.glob("*.zip")):
        student = ids[archive.name] = student_id(archive.stem)
        if student in seen:
            for name in names:
                problems.append(Problem(student, name, f"{describe(archive.name)} and {describe(seen[student])} "
                                        "give the same student id: rename one"))
            continue
        seen[student] = archive.name
        problems += _unpack_one(archive, root, student, names)
    return problems, ids


def _unpack_one(archive: pathlib.Path, root: pathlib.Path, student: str, names: list) -> list:
    where = describe(archive.name)
    try:
        if _is_link(archive):
            raise NotGradable(f"{where} is a symbolic link: not followed")
        with zipfile.ZipFile(archive) as z:
            problems = []
            for name in names:
                try:
                    found = _candidates(z, name)
                    if len(found) > 1:
                        raise NotGradable(f"{where} holds {len(found)} copies of {name}.ipynb "
                                          f"({', '.join(i.filename for i in found)[:300]}): which one counts?")
                    if found:
                        data = _member_bytes(z, found[0], f"{found[0].filename} in {where}")
                        _place(root, student, name, data, archive)
                    elif (misnamed := _near_misses(z, name, only=len(names) == 1)) or len(names) == 1:
                        raise NotGradable(f"no {name}.ipynb in {where} " + (
                            f"(found: {', '.join(misnamed)[:200]}): rename it to grade it" if misnamed
                            else "(it holds no notebook)"))
                except NotGradable as err:
                    problems.append(Problem(student, name, str(err)))
            return problems
    except NotGradable as err:
        reason = str(err)
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, NotImplementedError, RuntimeError) as err:
        reason = f"{where} is not a readable zip ({type(err).__name__}: {str(err)[:200]})"
    except Exception as err:  # zlib and friends: whatever the archive does, it is this student's only
        reason = f"{where} could not be unpacked ({type(err).__name__}: {str(err)[:200]})"
    return [Problem(student, name, reason) for name in names
            if not (root / "submitted" / student / name / f"{name}.ipynb").exists()]
