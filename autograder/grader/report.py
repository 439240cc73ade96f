"""A class's results at a glance: a CSV of every student x exercise, and three plots.

Rows come from the gradebook (`classgrade.scores`), so manual grades entered in the
formgrader show up too. Failure messages are grouped with their numbers blanked out, so "wrong
values in gW" counts once however many students got which values wrong.
"""
import collections
import csv
import pathlib
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the file-only backend)

FIELDS = ["student", "notebook", "exercise", "score", "max_score", "message"]


def message_kind(message: str) -> str:
    """A failure message with its numbers and quoted values blanked, for counting alike failures."""
    first = message.splitlines()[0] if message else ""
    return re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "#", first)[:120]


def write_csv(rows: list, path: pathlib.Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)


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


def write_report(rows: list, folder: pathlib.Path) -> list:
    """scores.csv, failures.csv and the plots in `folder`; return the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(rows, folder / "scores.csv")
    with open(folder / "failures.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["message", "count"])
        writer.writerows(common_failures(rows, top=None))
    return [folder / "scores.csv", folder / "failures.csv", *plot(rows, folder)]
