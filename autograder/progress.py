"""The learner's local progress file: every quiz attempt, appended, never lost.

The file lives at ``$COURSE_PROGRESS`` if set, else ``~/.backprop-course/progress.json``.
"""
import datetime
import json
import os
import pathlib

ENV_VAR = "COURSE_PROGRESS"
VERSION = 1


def progress_path() -> pathlib.Path:
    custom = os.environ.get(ENV_VAR)
    return pathlib.Path(custom) if custom else pathlib.Path.home() / ".backprop-course" / "progress.json"


def load() -> dict:
    """The saved progress; a damaged file is set aside (renamed), never overwritten."""
    path = progress_path()
    if not path.exists():
        return {"version": VERSION, "attempts": []}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("attempts"), list):
            raise ValueError("no list of attempts")
        return data
    except ValueError as err:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        kept = path.with_name(f"{path.name}.damaged-{stamp}")
        path.rename(kept)
        print(f"Your progress file could not be read ({err}); it was kept as {kept} and a new one started.")
        return {"version": VERSION, "attempts": []}


def record(attempt: dict) -> None:
    """Append one attempt, writing a temporary file first so a crash cannot truncate the file."""
    data = load()
    data["attempts"].append({**attempt, "time": datetime.datetime.now().isoformat(timespec="seconds")})
    path = progress_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(temporary, path)


def attempts(notebook=None) -> list:
    """Saved attempts, optionally only those of one notebook."""
    return [a for a in load()["attempts"] if notebook is None or a.get("notebook") == notebook]
