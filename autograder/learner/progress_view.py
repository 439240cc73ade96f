"""Your progress: when your questions come back, and one figure of quiz answers and visible tests.

``show()`` reads the progress file (``autograder.learner.progress_file``). First a table of the review
schedule (``autograder.learner.review``'s FSRS dates): per notebook whose questions you have answered,
how many are due now, when the next falls due, how many more within a week, and how many you have
answered or never answered. Then it draws, for every notebook
with anything recorded, a row of two plots: the share of quiz questions answered right per day (each
question counted once per sitting, as the review schedule counts it, see ``autograder.learner.review``),
and a grid of the test cells you ran × your latest runs of each, passed or failed. The figure carries
a text summary as its alt text. Counts are per *exercise*, a graded name: a notebook's test cells
``freeze_all_but-flags`` and ``freeze_all_but-training`` are two cells of one exercise, which passes
when the latest run of each of its cells passed. An exercise appears once one of its test cells has
run with tracking on (``progress.track_tests(...)`` in the notebook's set-up cell).
"""
import collections
import datetime

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from IPython.display import Markdown, display
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from autograder.learner import plotting, progress_file, quiz_schema, review

RUNS = 8  # latest runs drawn per exercise
SOON = datetime.timedelta(days=7)  # "due within a week" in the schedule table
# colour, hatching and a symbol: each alone tells pass from fail (in greyscale, for colour blindness)
PASS = {"facecolor": plotting.OKABE_ITO["bluish green"], "hatch": "", "symbol": "✓"}
FAIL = {"facecolor": plotting.OKABE_ITO["vermillion"], "hatch": "///", "symbol": "✗"}


def summarise(data=None) -> dict:
    """{notebook: {"days": [(date, right, answered), ...], "tests": {test cell: [passed, ...]}}},
    notebooks in course order, then any others by name; only those with something recorded."""
    data = progress_file.load() if data is None else data
    days = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0]))
    for sitting in review.sittings(data.get("attempts", [])):
        try:
            day = datetime.date.fromisoformat(sitting.day)
        except ValueError:  # an attempt without a readable time cannot go on a time axis
            continue
        counts = days[sitting.notebook][day]
        counts[0] += sitting.right
        counts[1] += 1
    tests = collections.defaultdict(dict)
    for run in data.get("tests", []):
        if not isinstance(run, dict) or not isinstance(run.get("notebook"), str):
            continue
        cell = run.get("cell", run.get("exercise"))  # files from before "cell" existed named the cell "exercise"
        if isinstance(cell, str):
            tests[run["notebook"]].setdefault(cell, []).append(bool(run.get("passed")))
    course = quiz_schema.course_notebooks()
    names = sorted(set(days) | set(tests), key=lambda n: (course.index(n) if n in course else len(course), n))
    return {n: {"days": sorted((d, right, total) for d, (right, total) in days[n].items()),
                "tests": tests.get(n, {})} for n in names}


def exercises_passing(tests: dict) -> dict:
    """{exercise: whether the latest run of every test cell of it that has run passed}, in order."""
    exercises = {}
    for cell, runs in tests.items():
        name = progress_file.exercise_of(cell)
        exercises[name] = exercises.get(name, True) and runs[-1]
    return exercises


def describe(summary: dict) -> str:
    """The figure in words (its alt text): per notebook, the quiz trend and which tests pass now."""
    parts = [f"Your progress in {len(summary)} notebook{'s' * (len(summary) != 1)}."]
    for name, s in summary.items():
        if s["days"]:
            answered = sum(total for _, _, total in s["days"])
            day, right, total = s["days"][-1]
            quiz_text = (f"{answered} quiz answer{'s' * (answered != 1)} over {len(s['days'])} "
                         f"day{'s' * (len(s['days']) != 1)}, "
                         f"{round(100 * right / total)}% right on {day.isoformat()}")
        else:
            quiz_text = "no quiz answers yet"
        latest = exercises_passing(s["tests"])
        if latest:
            failing = [e for e, passed in latest.items() if not passed]
            test_text = (f"visible tests pass for {len(latest) - len(failing)} of the {len(latest)} "
                         f"exercise{'s' * (len(latest) != 1)} run so far")
            test_text += f" (failing: {', '.join(failing)})" if failing else ""
        else:
            test_text = "no test cell run yet"
        parts.append(f"{name}: {quiz_text}; {test_text}.")
    return " ".join(parts)


def _empty(ax, text):
    ax.set_axis_off()
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.3")


def _day_axis(ax, first, last):
    """Whole days on the x axis, with half a day of room on each side (one day alone is a point)."""
    span = (last - first).days
    ax.set_xlim(mdates.date2num(first) - 0.6, mdates.date2num(last) + 0.6)
    ax.xaxis.set_major_locator(mdates.DayLocator(interval=max(1, -(-span // 6))))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%d %b\n%Y"))
    ax.set_xlabel("day")


def _quiz_panel(ax, name, days, k):
    if not days:
        _empty(ax, f"{name}: no quiz answers yet")
        return
    x = [d for d, _, _ in days]
    y = [100 * right / total for _, right, total in days]
    ax.plot(x, y, **plotting.series_style(k))
    for d, share, (_, right, total) in zip(x, y, days):
        ax.annotate(f"{right}/{total}", (d, share), textcoords="offset points", xytext=(0, 7),
                    ha="center", fontsize=8)
    ax.set_ylim(-5, 115)
    ax.set_yticks([0, 25, 50, 75, 100])
    ax.set_ylabel("answered right (%)")
    ax.set_title(f"{name}: quiz, per day (right/answered)", fontsize=10, loc="left")


def _tests_panel(ax, name, tests):
    if not tests:
        _empty(ax, f"{name}: no test cell run yet")
        return
    exercises = list(tests)
    for row, exercise in enumerate(exercises):
        runs = tests[exercise][-RUNS:]
        for col, passed in zip(range(RUNS - len(runs), RUNS), runs):
            style = PASS if passed else FAIL
            ax.add_patch(Rectangle((col + 0.06, row + 0.06), 0.88, 0.88, facecolor=style["facecolor"],
                                   hatch=style["hatch"], edgecolor="white", linewidth=0.5))
            ax.text(col + 0.5, row + 0.5, style["symbol"], ha="center", va="center", fontsize=10,
                    color="black", bbox={"boxstyle": "circle,pad=0.12", "facecolor": "white", "edgecolor": "none"})
    ax.set_xlim(0, RUNS)
    ax.set_ylim(len(exercises), 0)
    ax.set_yticks([r + 0.5 for r in range(len(exercises))], exercises, fontsize=8)
    ax.set_xticks([c + 0.5 for c in range(RUNS)], [f"-{RUNS - 1 - c}" for c in range(RUNS - 1)] + ["latest"],
                  fontsize=8)
    ax.grid(False)
    ax.set_xlabel(f"test-cell runs, latest on the right (last {RUNS})")
    exercises = exercises_passing(tests)
    ax.set_title(f"{name}: visible tests, {sum(exercises.values())} of {len(exercises)} "
                 f"exercise{'s' * (len(exercises) != 1)} pass now", fontsize=10, loc="left")


def figure(summary: dict) -> Figure:
    """The progress figure for a non-empty `summarise()` result."""
    course = quiz_schema.course_notebooks()
    heights = [max(2.4, 0.3 * len(s["tests"]) + 1.3) for s in summary.values()]
    with plt.rc_context(plotting.COURSE_RC):
        fig = Figure(figsize=(12, sum(heights) + 0.6), layout="constrained")
        axes = fig.subplots(len(summary), 2, squeeze=False, height_ratios=heights,
                            gridspec_kw={"width_ratios": [1, 1.2]})
        all_days = [d for s in summary.values() for d, _, _ in s["days"]]
        for (name, s), (ax_quiz, ax_tests) in zip(summary.items(), axes):
            k = course.index(name) if name in course else len(course)
            _quiz_panel(ax_quiz, name, s["days"], k)
            if s["days"]:  # the same days on every row, so rows compare
                _day_axis(ax_quiz, min(all_days), max(all_days))
            _tests_panel(ax_tests, name, s["tests"])
        fig.suptitle("Your progress", fontsize=13)
        fig.legend(handles=[Patch(facecolor=PASS["facecolor"], label="✓ passed"),
                            Patch(facecolor=FAIL["facecolor"], hatch=FAIL["hatch"], label="✗ failed")],
                   loc="outside upper right", ncols=2, fontsize=9)
    return fig


# --- the review schedule ------------------------------------------------------------------------------
def due_by_notebook(attempts=None, now=None) -> dict:
    """{notebook: {"due", "next", "soon", "answered", "never"}} for each notebook with an answered
    question, in course order: how many are due at `now`, the earliest later due date (None if none),
    how many fall due after `now` and within SOON of it, how many were answered, how many never."""
    now = datetime.datetime.now(datetime.UTC) if now is None else now
    by_notebook = {}
    for card in review.cards(review.course_notebooks(), attempts):
        by_notebook.setdefault(card.question.notebook, []).append(card)
    rows = {}
    for name, cards in by_notebook.items():
        seen = [c for c in cards if c.seen]
        if not seen:
            continue
        later = sorted(c.due for c in seen if not c.is_due(now))
        rows[name] = {"due": sum(c.is_due(now) for c in seen), "next": later[0] if later else None,
                      "soon": sum(d <= now + SOON for d in later), "answered": len(seen),
                      "never": len(cards) - len(seen)}
    return dict(sorted(rows.items(), key=lambda item: review.course_notebooks().index(item[0])))


def schedule_markdown(rows: dict) -> str:
    """The schedule as Markdown: what is due now and when the next questions come back, overall and
    per notebook (local time)."""
    heading = "### When your questions come back\n\n"
    if not rows:
        return heading + "No quiz question answered yet, so none is scheduled for review."
    due = sum(r["due"] for r in rows.values())
    upcoming = [r["next"] for r in rows.values() if r["next"] is not None]
    text = (f"**{due} question{'s' * (due != 1)} due now**: review {'them' if due != 1 else 'it'} in the review "
            "notebook (`notebooks/review.ipynb`) or at the top of the next notebook.")
    if upcoming:
        soon = sum(r["soon"] for r in rows.values())
        text += (f" The next falls due on {review.local_time(min(upcoming))}; {soon} fall"
                 f"{'s' * (soon == 1)} due within {SOON.days} days.")
    table = ["| notebook | due now | next due | due within a week | answered | never answered |",
             "|---|---:|---|---:|---:|---:|"]
    for name, r in rows.items():
        when = review.local_time(r["next"]) if r["next"] is not None else "—"
        table.append(f"| {name} | {r['due']} | {when} | {r['soon']} | {r['answered']} | {r['never']} |")
    note = ("Dates are in local time, from FSRS (the rules are in `autograder/learner/review.py`): a miss "
            "comes back in ten minutes, each success stays away longer.")
    return heading + text + "\n\n" + "\n".join(table) + "\n\n" + note


def show() -> None:
    """Show when your questions come back and draw your progress, or say in one line that nothing is
    recorded yet."""
    data = progress_file.load()
    summary = summarise(data)
    if not summary:
        print(f"Nothing recorded yet in {progress_file.progress_path()}: answer a quiz or run a test cell "
              "(with progress.track_tests in the set-up cell), then call show() again.")
        return
    display(Markdown(schedule_markdown(due_by_notebook(data["attempts"]))))
    plotting.show(figure(summary), alt=describe(summary))
