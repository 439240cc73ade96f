"""Visible-test tracking, the progress figure, and the course's accessible plot style."""
import base64
import datetime
import html
import json
import os
import pathlib
import subprocess
import sys
import types

import matplotlib
import matplotlib.pyplot as plt
import nbformat
import pytest
from IPython.core.events import EventManager, available_events
from IPython.core.interactiveshell import ExecutionInfo, ExecutionResult

from autograder.learner import plotting, progress, progress_view, quiz, quiz_schema, review

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def private_progress(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    monkeypatch.setenv("COURSE_PROGRESS", str(path))
    monkeypatch.delenv(progress.GRADING_ENV_VAR, raising=False)
    return path


def fake_shell():
    shell = types.SimpleNamespace()
    shell.events = EventManager(shell, available_events)
    return shell


def run_cell(shell, source, error=None):
    """What IPython does after a cell: post_run_cell with the cell's ExecutionResult."""
    result = ExecutionResult(ExecutionInfo(source, False, False, True, None))
    result.error_in_exec = error
    shell.events.trigger("post_run_cell", result)


def recorders(shell):
    return [c for c in shell.events.callbacks["post_run_cell"] if getattr(c, "course_test_recorder", False)]


TEST_CELL = '"""vjp_linear: (gx, gW, gb) against autograd"""\nfrom autograder import checks\n'


# --- recognising test cells -----------------------------------------------------------------------
def test_grade_cells_are_recognised_by_their_first_line():
    assert progress.grade_cell_id(TEST_CELL) == "vjp_linear"
    cell = '"""Value-tanh-exp-log: tanh"""\nimport torch\nfrom autograder import checks'
    assert progress.grade_cell_id(cell) == "Value-tanh-exp-log"
    assert progress.grade_cell_id('"""Note: a docstring, no test"""\nx = 1') is None
    assert progress.grade_cell_id("def f():\n    '''vjp_linear: x'''\n    import autograder") is None
    assert progress.grade_cell_id("") is None


@pytest.mark.parametrize("folder", ["notebooks", "solutions"])
def test_every_grade_cell_of_the_course_and_nothing_else_is_recognised(folder):
    paths = sorted((ROOT / folder).glob("**/[0-9][0-9]_*.ipynb"))
    assert paths, f"no notebooks in {folder}/"
    for path in paths:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "code":
                continue
            meta = cell.metadata.get("nbgrader", {})
            expected = meta["grade_id"] if meta.get("grade") and not meta.get("solution") else None
            assert progress.grade_cell_id(cell.source) == expected, f"{path.name}: {cell.source[:80]!r}"


# --- tracking ---------------------------------------------------------------------------------------
def test_test_runs_are_recorded_with_pass_or_the_error(capsys):
    shell = fake_shell()
    progress.track_tests("03_vjp", shell=shell)
    run_cell(shell, "x = 1")  # not a test cell
    run_cell(shell, TEST_CELL, AssertionError("vjp_linear: gW is wrong\nexpected ... got ..."))
    assert capsys.readouterr() == ("", "")  # a failing cell shows its own error; nothing is added
    run_cell(shell, TEST_CELL)
    assert capsys.readouterr() == (progress.pass_line("vjp_linear") + "\n", "")
    runs = progress.test_runs("03_vjp")
    assert [(r["exercise"], r["cell"], r["passed"]) for r in runs] == [("vjp_linear", "vjp_linear", False),
                                                                       ("vjp_linear", "vjp_linear", True)]
    assert (runs[0]["error"], runs[0]["message"]) == ("AssertionError", "vjp_linear: gW is wrong")
    assert "error" not in runs[1] and datetime.datetime.fromisoformat(runs[1]["time"])


def test_a_pass_is_said_in_one_line_on_stdout():
    line = progress.pass_line("grad_fn_names")
    assert line == "✓ grad_fn_names: the visible tests pass (hidden tests run when it is graded)"
    assert "\n" not in line


def test_a_cell_of_a_behaviour_counts_for_its_exercise(capsys):
    shell = fake_shell()
    progress.track_tests("04_toggles", shell=shell)
    run_cell(shell, '"""freeze_all_but-flags: x"""\nfrom autograder import checks\n')
    assert capsys.readouterr().out.startswith("✓ freeze_all_but-flags: the visible tests pass")
    (run,) = progress.test_runs()
    assert (run["exercise"], run["cell"]) == ("freeze_all_but", "freeze_all_but-flags")


def test_silent_while_nbgrader_grades_even_if_tracking_began_before(monkeypatch, capsys):
    shell = fake_shell()
    progress.track_tests("03_vjp", shell=shell)
    monkeypatch.setenv(progress.GRADING_ENV_VAR, "autograde")
    run_cell(shell, TEST_CELL)
    assert capsys.readouterr() == ("", "") and progress.test_runs() == []


def test_tracking_twice_records_once_and_follows_the_last_call():
    shell = fake_shell()
    progress.track_tests("03_vjp", shell=shell)
    progress.track_tests("04_toggles", shell=shell)  # the set-up cell run again (or edited)
    assert len(recorders(shell)) == 1
    run_cell(shell, TEST_CELL)
    assert [r["notebook"] for r in progress.test_runs()] == ["04_toggles"]


REAL_SHELL = """
from IPython.core.interactiveshell import InteractiveShell
from autograder.learner import progress
shell = InteractiveShell.instance()
shell.run_cell("from autograder.learner import progress; progress.track_tests('03_vjp')")  # a set-up cell
shell.run_cell("from autograder.learner import progress; progress.track_tests('03_vjp')")  # run twice
shell.run_cell(TEST_CELL + "assert 1 + 1 == 3, 'vjp_linear: arithmetic'")
shell.run_cell(TEST_CELL + "ok = True")
shell.run_cell("print('an ordinary cell')")
"""


def test_the_pass_line_lands_in_the_test_cells_output_in_a_kernel(tmp_path, private_progress):
    """In a real Jupyter kernel, the line printed after the cell belongs to that cell, on stdout."""
    import nbclient
    import nbformat as nbformat_
    nb = nbformat_.v4.new_notebook(cells=[
        nbformat_.v4.new_code_cell("from autograder.learner import progress\nprogress.track_tests('03_vjp')"),
        nbformat_.v4.new_code_cell(TEST_CELL + "ok = True"),
        nbformat_.v4.new_code_cell("print('next cell')")])
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env={**os.environ, "COURSE_PROGRESS": str(private_progress)})
    outputs = nb.cells[1].outputs
    assert [(o.output_type, o.get("name"), o.get("text")) for o in outputs] == [
        ("stream", "stdout", progress.pass_line("vjp_linear") + "\n")]
    assert [o.text for o in nb.cells[2].outputs] == ["next cell\n"]


def test_tracking_in_a_real_ipython_shell(private_progress):
    # a process of its own: an IPython shell in the test process would change it for later tests
    script = f"TEST_CELL = {TEST_CELL!r}\n" + REAL_SHELL
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COURSE_PROGRESS": str(private_progress)})
    assert done.returncode == 0, done.stderr
    assert [(r["notebook"], r["exercise"], r["passed"], r.get("error")) for r in progress.test_runs()] == [
        ("03_vjp", "vjp_linear", False, "AssertionError"), ("03_vjp", "vjp_linear", True, None)]
    assert done.stdout.count(progress.pass_line("vjp_linear")) == 1 and done.stderr == ""


def test_tracking_does_nothing_outside_ipython_or_while_nbgrader_grades(monkeypatch):
    import IPython
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    assert progress.track_tests("03_vjp") is None  # no shell: nothing to hook, no error
    shell = fake_shell()
    monkeypatch.setenv(progress.GRADING_ENV_VAR, "autograde")
    progress.track_tests("03_vjp", shell=shell)
    assert recorders(shell) == []


def test_a_recorder_that_cannot_write_adds_nothing_but_the_pass_line(private_progress, capsys):
    private_progress.mkdir()  # the file cannot be written: the test cell's output must stay clean
    shell = fake_shell()
    progress.track_tests("03_vjp", shell=shell)
    run_cell(shell, TEST_CELL)
    assert capsys.readouterr() == (progress.pass_line("vjp_linear") + "\n", "")


def test_old_progress_files_keep_their_attempts(private_progress):
    old = {"version": 1,
           "attempts": [{"notebook": "01_chain_rule", "question": "q", "kind": "choice", "correct": True}]}
    private_progress.write_text(json.dumps(old))
    progress.record_test("01_chain_rule", "relu_grad", True)
    saved = progress.load()
    assert saved["attempts"] == old["attempts"] and [t["exercise"] for t in saved["tests"]] == ["relu_grad"]


def test_a_failing_message_is_cut(private_progress):
    progress.record_test("01_chain_rule", "relu_grad", False, "GradingError", "x" * 1000)
    (run,) = progress.test_runs()
    assert len(run["message"]) == progress.MESSAGE_CHARS


# --- the progress view --------------------------------------------------------------------------------
def attempt(notebook, question, correct, day, **extra):
    return {"notebook": notebook, "section": "retrieve", "question": question, "kind": "choice",
            "response": 0, "correct": correct, "time": f"{day}T09:00:00", **extra}


def sample(private_progress):
    attempts = [attempt("01_chain_rule", "q1", False, "2025-03-01"), attempt("01_chain_rule", "q1", True, "2025-03-01"),
                attempt("01_chain_rule", "q2", True, "2025-03-01"),
                attempt("01_chain_rule", "q1", True, "2025-03-02", review="02_micrograd"),
                {"notebook": "02_micrograd", "section": "retrieve", "question": "r", "kind": "recall",
                 "response": "", "rating": 3, "time": "2025-03-02T10:00:00"}]
    tests = [{"notebook": "01_chain_rule", "exercise": "relu_grad", "passed": False, "time": "2025-03-01T10:00:00"},
             {"notebook": "01_chain_rule", "exercise": "relu_grad", "passed": True, "time": "2025-03-01T10:05:00"},
             {"notebook": "01_chain_rule", "exercise": "sigmoid_grad", "passed": False, "time": "2025-03-01T10:06:00"},
             {"notebook": "03_vjp", "exercise": "vjp_relu", "passed": True, "time": "2025-03-03T10:00:00"}]
    private_progress.write_text(json.dumps({"version": 1, "attempts": attempts, "tests": tests}))


def test_summary_counts_one_answer_per_sitting_and_the_latest_tests(private_progress):
    sample(private_progress)
    summary = progress_view.summarise()
    assert list(summary) == ["01_chain_rule", "02_micrograd", "03_vjp"]
    day1, day2 = datetime.date(2025, 3, 1), datetime.date(2025, 3, 2)
    assert summary["01_chain_rule"]["days"] == [(day1, 1, 2), (day2, 1, 1)]  # the retry after feedback is not counted
    assert summary["02_micrograd"]["days"] == [(day2, 1, 1)] and summary["02_micrograd"]["tests"] == {}
    assert summary["01_chain_rule"]["tests"] == {"relu_grad": [False, True], "sigmoid_grad": [False]}
    text = progress_view.describe(summary)
    assert "01_chain_rule: 3 quiz answers over 2 days, 100% right on 2025-03-02" in text
    assert "visible tests pass for 1 of the 2 exercises run so far (failing: sigmoid_grad)" in text
    assert "02_micrograd: 1 quiz answer over 1 day, 100% right on 2025-03-02; no test cell run yet." in text
    assert "03_vjp: no quiz answers yet; visible tests pass for 1 of the 1 exercise run so far." in text


def test_exercises_are_graded_names_not_test_cells(private_progress):
    """Notebook 04 has 10 test cells for 7 exercises; an exercise passes when each of its cells passed last."""
    cells = [c for c in ("grad_fn_names", "freeze_all_but-flags", "freeze_all_but-training", "distill_loss-value",
                         "distill_loss-gradients", "accumulated_grads", "per_loss_grads", "predict",
                         "train_step-update", "train_step-no-graph")]
    runs = [{"type": "test", "notebook": "04_toggles", "cell": c, "exercise": c.split("-")[0], "passed": True,
             "time": "2025-03-01T10:00:00"} for c in cells]
    runs.append({**runs[2], "passed": False})  # the latest run of freeze_all_but-training fails
    # an old record, without "cell"
    runs.append({"type": "test", "notebook": "04_toggles", "exercise": "predict", "passed": True})
    private_progress.write_text("".join(json.dumps(r) + "\n" for r in runs))
    summary = progress_view.summarise()
    assert len(summary["04_toggles"]["tests"]) == 10
    text = progress_view.describe(summary)
    assert "visible tests pass for 6 of the 7 exercises run so far (failing: freeze_all_but)" in text
    fig = progress_view.figure(summary)
    assert "6 of 7 exercises pass now" in fig.get_axes()[1].get_title(loc="left")


def test_the_figure_has_labelled_axes_and_a_row_per_notebook(private_progress):
    sample(private_progress)
    fig = progress_view.figure(progress_view.summarise())
    axes = fig.get_axes()
    assert len(axes) == 6
    quiz_ax, tests_ax = axes[0], axes[1]
    assert quiz_ax.get_ylabel() == "answered right (%)" and quiz_ax.get_xlabel() == "day"
    assert [t.get_text() for t in tests_ax.get_yticklabels()] == ["relu_grad", "sigmoid_grad"]
    assert tests_ax.get_xlabel().startswith("test-cell runs")
    assert "1 of 2 exercises pass now" in tests_ax.get_title(loc="left")
    assert quiz_ax.get_lines()[0].get_color() == plotting.COLORS[0]
    assert not axes[4].axison and "no quiz answers yet" in axes[4].texts[0].get_text()  # 03: tests only
    # pass and fail differ in hatching and symbol, not only in colour
    patches = tests_ax.patches
    assert {p.get_hatch() or "" for p in patches} == {"", progress_view.FAIL["hatch"]}
    assert {t.get_text() for t in tests_ax.texts} == {progress_view.PASS["symbol"], progress_view.FAIL["symbol"]}


def test_show_displays_a_png_with_alt_text(private_progress, monkeypatch):
    sample(private_progress)
    shown = []
    monkeypatch.setattr(plotting, "display", lambda bundle, raw: shown.append((bundle, raw)))
    progress_view.show()
    ((bundle, raw),) = shown
    assert raw and bundle["text/plain"].startswith("Your progress in 3 notebooks.")
    assert f'alt="{bundle["text/plain"]}"' in bundle["text/html"]
    assert base64.b64decode(bundle["image/png"]).startswith(b"\x89PNG")


def test_with_nothing_recorded_show_says_so_in_one_line(private_progress, monkeypatch, capsys):
    monkeypatch.setattr(plotting, "display", lambda *a, **k: pytest.fail("nothing should be drawn"))
    progress_view.show()
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "Nothing recorded yet" in out and str(private_progress) in out


def test_quiz_answers_from_the_widgets_reach_the_view(monkeypatch):
    question = next(q for q in quiz_schema.all_questions("01_chain_rule") if q.kind == "choice")
    quiz.check_choice(question, question.choices[0].id)
    (day,) = progress_view.summarise()["01_chain_rule"]["days"]
    assert day[0] == datetime.date.today() and day[2] == 1


# --- when the questions come back -------------------------------------------------------------------
def real_attempt(q, correct, when):
    return {"notebook": q.notebook, "section": q.section, "question": q.id, "kind": q.kind, "response": "x",
            "correct": correct, "time": when.isoformat()}


def numeric(notebook):
    return [q for q in quiz_schema.all_questions(notebook) if q.kind == "numeric"]


def test_the_schedule_says_what_is_due_now_and_when_the_next_fall_due():
    utc = datetime.UTC
    a, b = numeric("01_chain_rule")[:2]
    c = numeric("08_higher_order")[0]
    first = datetime.datetime(2025, 3, 1, 10, tzinfo=utc)
    history = [real_attempt(a, True, first), real_attempt(b, False, first),
               real_attempt(c, True, first - datetime.timedelta(days=30))]
    now = first + datetime.timedelta(hours=2)
    rows = progress_view.due_by_notebook(history, now)
    assert list(rows) == ["01_chain_rule", "08_higher_order"]  # only notebooks with an answered question
    fsrs_due = {card.question: card.due for card in review.cards(["01_chain_rule"], history)}
    assert fsrs_due[a] == first + datetime.timedelta(days=2)  # FSRS: a first "good" comes back after 2 days
    assert rows["01_chain_rule"] == {"due": 1, "next": fsrs_due[a], "soon": 1, "answered": 2,
                                     "never": len(quiz_schema.all_questions("01_chain_rule")) - 2}
    assert rows["08_higher_order"]["due"] == 1 and rows["08_higher_order"]["next"] is None
    text = progress_view.schedule_markdown(rows)
    assert "**2 questions due now**" in text and "`notebooks/review.ipynb`" in text
    assert f"The next falls due on {review.local_time(fsrs_due[a])}; 1 falls due within 7 days." in text
    assert f"| 01_chain_rule | 1 | {review.local_time(fsrs_due[a])} | 1 | 2 |" in text
    assert "| 08_higher_order | 1 | — | 0 | 1 |" in text
    three_days_later = progress_view.due_by_notebook(history, now + datetime.timedelta(days=3))
    assert three_days_later["01_chain_rule"]["due"] == 2 and three_days_later["01_chain_rule"]["next"] is None


def test_the_schedule_counts_what_falls_due_within_a_week_only():
    a, b = numeric("02_micrograd")[:2]
    now = datetime.datetime(2025, 3, 1, 12, tzinfo=datetime.UTC)
    history = [real_attempt(a, True, now), real_attempt(a, True, now + datetime.timedelta(days=2)),
               real_attempt(b, True, now)]  # a: due after 2 + 11 days, b: after 2 days
    (row,) = progress_view.due_by_notebook(history, now + datetime.timedelta(days=2, hours=1)).values()
    assert (row["due"], row["soon"]) == (1, 0)  # b is due; a's 11 days lie beyond the week
    assert "No quiz question answered yet" in progress_view.schedule_markdown({})


def test_show_says_when_the_questions_come_back_before_the_figure(private_progress, monkeypatch):
    q = numeric("03_vjp")[0]
    answered = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    private_progress.write_text(json.dumps({"type": "attempt", **real_attempt(q, False, answered)}) + "\n")
    shown = []
    monkeypatch.setattr(progress_view, "display", lambda markdown: shown.append(markdown.data))
    monkeypatch.setattr(plotting, "display", lambda bundle, raw: shown.append(bundle))
    progress_view.show()
    assert len(shown) == 2 and shown[0].startswith("### When your questions come back")
    assert "**1 question due now**" in shown[0] and "| 03_vjp | 1 | — | 0 | 1 |" in shown[0]
    assert shown[1]["text/plain"].startswith("Your progress in 1 notebook.")


# --- the plot style and alt text ------------------------------------------------------------------------
def test_course_style_is_okabe_ito_with_a_line_style_per_series():
    with matplotlib.rc_context():
        plotting.use_course_style()
        cycle = list(matplotlib.rcParams["axes.prop_cycle"])
        fig, ax = plt.subplots()
        lines = [ax.plot([0, 1], [k, k])[0] for k in range(len(cycle))]
        plt.close(fig)
    assert [c["color"] for c in cycle] == list(plotting.OKABE_ITO.values())
    assert [line.get_color() for line in lines] == plotting.COLORS  # plain plt.plot calls follow it
    assert len({str(c["linestyle"]) for c in cycle}) == len(cycle)  # no two series share a dash pattern
    styles = [plotting.series_style(k) for k in range(len(cycle))]
    assert len({s["marker"] for s in styles}) == len(styles)


def test_figures_are_shown_with_escaped_alt_text_and_closed(monkeypatch):
    shown = []
    monkeypatch.setattr(plotting, "display", lambda bundle, raw: shown.append(bundle))
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    plotting.show(fig, alt='The line y = x, from "0" to <1>')
    assert not plt.fignum_exists(fig.number)  # the inline backend will not show it again
    (bundle,) = shown
    assert 'alt="The line y = x, from &quot;0&quot; to &lt;1&gt;"' in bundle["text/html"]
    assert bundle["text/html"].startswith('<img src="data:image/png;base64,')
    with pytest.raises(ValueError, match="text description"):
        plotting.figure_bundle(fig, alt="  ")


def test_a_figure_is_described_by_its_titles_axes_and_legend():
    fig, (left, right) = plt.subplots(1, 2)
    fig.suptitle("Two views")
    left.loglog([1e-8, 1e-2], [1e-3, 1e-9], label="central, float64")
    left.loglog([1e-8, 1e-2], [1e-2, 1e-8], label="_hidden")
    left.set(xlim=(1e-8, 1e-2), ylim=(1e-9, 1e-3), xlabel="step size eps", ylabel="error", title="U-curve")
    for k in range(6):
        right.plot([0, 1], [k, k], label=f"s{k}")
    right.set(xlim=(0, 1), ylim=(0, 5))
    right.legend()
    text = plotting.describe_figure(fig)
    plt.close(fig)
    assert text == ("Figure 'Two views'. Plot 1 of 2 'U-curve': x axis 'step size eps' (log scale) from 1e-08 to 0.01, "
                    "y axis 'error' (log scale) from 1e-09 to 0.001; 1 series: 'central, float64'. "
                    "Plot 2 of 2: unlabelled x axis from 0 to 1, unlabelled y axis from 0 to 5; "
                    "6 series: 's0', 's1', 's2', 's3' and 2 more.")


KERNEL_FIGURES = """
import json
import matplotlib.backend_bases as bases
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_cell("%matplotlib inline")
renders = []
original = bases.FigureCanvasBase.print_figure
bases.FigureCanvasBase.print_figure = lambda self, *a, **k: renders.append(1) or original(self, *a, **k)
shell.run_cell("from autograder.learner import plotting")
shell.run_cell("plotting.describe_all_figures(); plotting.describe_all_figures()")
# a figure pyplot does not hold, so that only the two displays below render it
shell.run_cell("from matplotlib.figure import Figure; fig = Figure(); ax = fig.subplots()")
shell.run_cell("ax.plot([0, 1], label='line'); ax.legend()")
plain, _ = shell.display_formatter.format(shell.user_ns["fig"])
shell.run_cell("plotting.set_alt(fig, 'my own words')")
own, _ = shell.display_formatter.format(shell.user_ns["fig"])
print(json.dumps({"plain": plain, "own": own, "renders": len(renders)}))
"""


def test_every_figure_a_kernel_shows_carries_alt_text_rendered_once():
    done = subprocess.run([sys.executable, "-c", KERNEL_FIGURES], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    plain, own = out["plain"], out["own"]
    assert sorted(plain) == ["image/png", "text/html", "text/plain"] and out["renders"] == 2  # one per display
    assert plain["text/plain"].startswith("A plot: unlabelled x axis") and "1 series: 'line'" in plain["text/plain"]
    assert f'alt="{html.escape(plain["text/plain"], quote=True)}"' in plain["text/html"]
    assert plain["image/png"] in plain["text/html"]  # the same picture, rendered once
    assert own["text/plain"] == "my own words" and 'alt="my own words"' in own["text/html"]


def test_describe_all_figures_does_nothing_outside_ipython(monkeypatch):
    import IPython
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    assert plotting.describe_all_figures() is None


def test_progress_show_is_the_view(monkeypatch):
    calls = []
    monkeypatch.setattr(progress_view, "show", lambda: calls.append("shown"))
    progress.show()
    assert calls == ["shown"]
