"""A class's results at a glance: a CSV of every student x exercise, the submissions that could
not be graded, the lines of submissions that reach for the grader (flags.csv), and three plots.

Rows come from the gradebook (`classgrade.scores`), so manual grades entered in the
formgrader show up too. failures.csv lists each submission this run could not grade (it scored
0) and what was restored or ignored in the ones it graded. Failure messages are grouped with
their numbers blanked out in failure_kinds.csv, so "wrong values in gW" counts once however many
students got which values wrong. Every text a student controls is capped, with its control characters
escaped (a terminal or spreadsheet never acts on them), and a cell that a spreadsheet would read as a
formula is quoted.
"""
import collections
import csv
import pathlib
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the file-only backend)

from autograder.grader.recording import capped, storable  # noqa: E402

FIELDS = ["student", "notebook", "exercise", "score", "max_score", "message"]
FAILURE_FIELDS = ["student", "notebook", "graded", "problem"]
FLAG_FIELDS = ["student", "notebook", "cell", "line", "what", "text"]


def safe_text(value):
    """A CSV cell: capped (control characters escaped, `recording.storable`), and never read as a formula by a
    spreadsheet."""
    if not isinstance(value, str):
        return value
    value = capped(value)
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t") else value


# A number in a message's text, its sign and exponent included: not the digits of a name (b1, W2, float64,
# nb07_by_hand, x_2), which tell one failure from another, nor those after a dot of a dotted name.
_NUMBER = re.compile(r"(?<![\w.])-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")


def message_kind(message: str) -> str:
    """A failure message with its numbers blanked, for counting alike failures: "wrong values in the gradient of
    b1 ... 0.25" and "... 3e-05" are one kind, "the gradient of b1" and "of b2" are two (storable: it labels
    a plot too)."""
    first = storable(message).splitlines()[0] if message else ""
    return _NUMBER.sub("#", first)[:120]


def write_csv(rows: list, path: pathlib.Path, fields=FIELDS) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows({k: safe_text(v) for k, v in row.items()} for row in rows)


def failure_rows(outcomes) -> list:
    """One row per submission not graded (why it scored 0), and per note on one that was graded."""
    rows = []
    for o in sorted(outcomes, key=lambda o: (o.assignment, o.student)):
        if not o.graded:
            rows.append({"student": o.student, "notebook": o.assignment, "graded": "no", "problem": o.reason})
        rows += [{"student": o.student, "notebook": o.assignment, "graded": "yes" if o.graded else "no",
                  "problem": note} for note in o.notes]
    return rows


def flag_rows(outcomes) -> list:
    """One row per line of a submission that reaches for the grader (autograder.grader.flags)."""
    return [{"student": o.student, "notebook": o.assignment, "cell": f.cell, "line": f.line, "what": f.what,
             "text": f.text} for o in sorted(outcomes, key=lambda o: (o.assignment, o.student)) for f in o.flags]


def totals(rows: list) -> dict:
    """{notebook: [percentage score of each student]}."""
    per = collections.defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        per[(r["notebook"], r["student"])][0] += r["score"]
        per[(r["notebook"], r["student"])][1] += r["max_score"]
    out = collections.defaultdict(list)
    for (notebook, _), (score, best) in sorted(per.items()):
        out[notebook].append(100 * score / best if best else 0.0)
    return dict(out)


def pass_rates(rows: list) -> dict:
    """{'notebook: exercise': share of students with full marks, in percent}."""
    seen = collections.defaultdict(list)
    for r in rows:
        seen[f"{r['notebook']}: {r['exercise']}"].append(r["score"] >= r["max_score"])
    return {k: 100 * sum(v) / len(v) for k, v in sorted(seen.items())}


def common_failures(rows: list, top: int = 10) -> list:
    """[(message kind, count)] for the `top` most frequent failures."""
    counts = collections.Counter(message_kind(r["message"]) for r in rows if r["message"])
    return counts.most_common(top)


def plot(rows: list, folder: pathlib.Path) -> list:
    """Save the three plots; return their paths."""
    paths = []
    scores = totals(rows)
    fig, ax = plt.subplots(figsize=(7, 4))
    styles = ["/", "\\", "x", ".", "o", "-"]
    for (notebook, values), hatch in zip(scores.items(), styles * 10):
        ax.hist(values, bins=range(0, 110, 10), alpha=0.6, hatch=hatch, edgecolor="black", label=notebook)
    ax.set(title="Score distribution per notebook", xlabel="score (% of points)", ylabel="students")
    ax.legend()
    paths.append(_save(fig, folder / "score_distribution.png"))

    rates = pass_rates(rows)
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(rates) + 1.5))
    ax.barh(list(rates), list(rates.values()), color="0.5", edgecolor="black")
    ax.set(title="Pass rate per exercise", xlabel="students with full marks (%)", xlim=(0, 100))
    ax.invert_yaxis()
    paths.append(_save(fig, folder / "pass_rate.png"))

    failures = common_failures(rows)
    fig, ax = plt.subplots(figsize=(9, 0.4 * max(len(failures), 1) + 1.5))
    ax.barh([kind for kind, _ in failures], [n for _, n in failures], color="0.5", edgecolor="black")
    ax.set(title="Most common failure messages", xlabel="failed exercises (count)")
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    paths.append(_save(fig, folder / "common_failures.png"))
    return paths


def _save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(rows: list, folder: pathlib.Path, outcomes=(), zip_ids=None) -> list:
    """scores.csv, failures.csv, failure_kinds.csv, the plots (and zip_students.csv when zips were
    unpacked) in `folder`; return the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(rows, folder / "scores.csv")
    outcomes = list(outcomes)
    write_csv(failure_rows(outcomes), folder / "failures.csv", FAILURE_FIELDS)
    write_csv(flag_rows(outcomes), folder / "flags.csv", FLAG_FIELDS)
    kinds = [{"message": kind, "count": n} for kind, n in common_failures(rows, top=None)]
    write_csv(kinds, folder / "failure_kinds.csv", ["message", "count"])
    files = [folder / "scores.csv", folder / "failures.csv", folder / "flags.csv", folder / "failure_kinds.csv"]
    if zip_ids:
        write_csv([{"zip": k, "student": v} for k, v in sorted(zip_ids.items())], folder / "zip_students.csv",
                  ["zip", "student"])
        files.append(folder / "zip_students.csv")
    return [*files, *plot(rows, folder)]
