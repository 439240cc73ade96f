"""A learner's session in a real browser: JupyterLab on loopback, a student notebook run through
the UI in headless Chromium, a quiz answered by clicking, and the drawing and the plot seen on screen.

Why a browser: widgets, drawings and plots are rendered by JupyterLab's JavaScript, which no
headless kernel run exercises. Playwright drives Debian's `chromium` (installed by
`.ci/install-chromium`, which `make test` runs); it never downloads a browser of its own. The test
is skipped, saying why, only where Chromium or Playwright is missing. Screenshots are saved in
test-artifacts/browser/ (gitignored); the path is printed and named in every failure.
"""
import base64
import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts" / "browser"
# 04 shows a graph drawing and plots that render in the student version as shipped (02's drawings
# need the learner's own draw_dot), and has quizzes.
NOTEBOOK = "04_toggles"
RUN_SECONDS = 240        # the whole notebook, through the UI (about a minute on 2 busy cores)
STEP_MS = 60_000         # one page action or one wait

try:
    from playwright import sync_api as playwright_api
except ImportError:
    playwright_api = None


def chromium_path():
    """Debian's chromium (or Ubuntu's chromium-browser), or $CHROMIUM if set."""
    for candidate in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser"):
        found = candidate and shutil.which(candidate)
        if found:
            return found
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_lab_settings(settings: pathlib.Path):
    """Every cell in the page (JupyterLab otherwise attaches cells as they scroll into view), and no
    news or update pop-ups over the notebook."""
    overrides = {"notebook-extension/tracker": {"windowingMode": "none"},
                 "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False,
                                                     "doNotDisturbMode": True}}
    for plugin, values in overrides.items():
        path = settings / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


@pytest.fixture
def lab(tmp_path):
    """JupyterLab on 127.0.0.1 with a token, in temporary HOME and Jupyter folders, serving a copy
    of the student notebook (the original is never opened, so never autosaved); killed at the end."""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(ROOT / "notebooks" / f"{NOTEBOOK}.ipynb", work)
    progress = tmp_path / "progress.json"
    write_lab_settings(tmp_path / "lab-settings")
    env = {**os.environ, "HOME": str(tmp_path / "home"), "COURSE_PROGRESS": str(progress),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"), "JUPYTER_DATA_DIR": str(tmp_path / "jupyter-data"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "jupyter-runtime"), "IPYTHONDIR": str(tmp_path / "ipython"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "lab-settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "lab-workspaces")}
    env.pop("COURSE_PLAIN_QUIZ", None)
    (tmp_path / "home").mkdir()
    port, token = free_port(), secrets.token_hex(16)
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}"]
    if os.geteuid() == 0:
        command.append("--allow-root")
    log_path = tmp_path / "jupyterlab.log"
    with open(log_path, "w") as log:
        # its own process group, so that stopping it reaches everything it runs; its kernels also
        # stop by themselves when their parent server is gone (ipykernel watches JPY_PARENT_PID)
        server = subprocess.Popen(command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited with {server.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer in 90 s:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.5)
        yield {"url": f"http://127.0.0.1:{port}/lab/tree/{NOTEBOOK}.ipynb?token={token}",
               "progress": progress, "notebook": work / f"{NOTEBOOK}.ipynb", "log": log_path}
    finally:
        stop(server)


def stop(server):
    """SIGTERM to the server's process group (it then shuts its kernels down); SIGKILL if it lingers."""
    if server.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            return
        try:
            server.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


# Skipped where either is missing, failed instead under CI (tests/conftest.py).
pytestmark = [
    pytest.mark.needs(playwright_api is not None,
                      reason="Playwright is not installed: `pip install -e './packaging/grader[test]'` brings it"),
    pytest.mark.needs(chromium_path() is not None,
                      reason="Chromium is not installed: run `bash .ci/install-chromium` (Debian/Ubuntu, as root or "
                             "with sudo) or `apt-get install chromium`, or set CHROMIUM to a Chromium executable"),
]


@pytest.fixture
def page():
    executable = chromium_path()
    args = ["--disable-dev-shm-usage"] + (["--no-sandbox"] if os.geteuid() == 0 else [])
    with playwright_api.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=executable, args=args)
        try:
            tab = browser.new_page(viewport={"width": 1400, "height": 1000})
            tab.set_default_timeout(STEP_MS)
            yield tab
        finally:
            browser.close()


def prompts(page) -> list:
    """The execution prompt of every cell, in order ('' for markdown): '[ ]:', '[*]:', '[12]:'."""
    return page.evaluate("""() => Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell')).map(
        cell => { const p = cell.querySelector('.jp-InputPrompt'); return p ? p.innerText.trim() : ''; })""")


IDLE_JS = """() => Array.from(document.querySelectorAll('.jp-Notebook .jp-InputPrompt')).every(
        p => p.innerText.trim() !== '[*]:')
    && !!document.querySelector(".jp-Notebook-ExecutionIndicator[data-status='idle']")"""


def wait_until_idle(page, deadline):
    """No cell running or queued and the kernel idle, still so a moment later."""
    for _ in range(2):
        left_ms = (deadline - time.monotonic()) * 1000
        if left_ms <= 0:
            raise AssertionError(f"the notebook was still running after {RUN_SECONDS} s")
        page.wait_for_function(IDLE_JS, timeout=left_ms, polling=100)
        time.sleep(0.2)


def run_menu(page, command):
    page.locator(".lm-MenuBar-item", has_text="Run").click()
    page.locator(f".lm-Menu-item[data-command='{command}']").click()


def run_every_cell(page, code_cells):
    """Run All Cells, as a learner would; JupyterLab stops at a failing cell (an exercise not done
    yet), so go on from the next cell not run with 'Run Selected Cell and All Below', to the end."""
    deadline = time.monotonic() + RUN_SECONDS
    start, command = 0, "runmenu:run-all"
    while True:
        shown = prompts(page)
        pending = [i for i in code_cells if i >= start and shown[i] == "[ ]:"]
        if not pending:
            return
        first = pending[0]
        if command != "runmenu:run-all":
            page.locator(".jp-Notebook .jp-Cell").nth(first).locator(".jp-InputPrompt").click()
        run_menu(page, command)
        page.wait_for_function(
            """i => { const p = document.querySelectorAll('.jp-Notebook .jp-Cell')[i].querySelector('.jp-InputPrompt');
                     return p.innerText.trim() !== '[ ]:'; }""", arg=first)
        wait_until_idle(page, deadline)
        start, command = first + 1, "notebook:run-all-below"


def image_bytes(src: str) -> bytes:
    """The bytes of a data: URI (base64 or percent-encoded)."""
    header, _, data = src.partition(",")
    return base64.b64decode(data) if header.endswith(";base64") else urllib.parse.unquote_to_bytes(data)


def saved_attempts(path) -> list:
    """The quiz attempts in the progress file (JSON lines, one record each)."""
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in records if r.get("type") == "attempt"]


def test_learner_runs_a_notebook_and_answers_a_quiz_in_chromium(page, lab):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("*.png"):
        old.unlink()
    print(f"browser test screenshots: {ARTIFACTS}")
    try:
        a_learners_session(lab, page)
    finally:
        page.screenshot(path=ARTIFACTS / "last-state.png")


def a_learners_session(lab, page):
    where = f"(screenshots in {ARTIFACTS}, server log {lab['log']})"
    nb = nbformat.read(lab["notebook"], as_version=4)
    code_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]

    page.goto(lab["url"])
    page.locator(".jp-Notebook .jp-Cell").first.wait_for()
    # the kernel has started
    page.locator(".jp-StatusBar-TextItem", has_text="| Idle").wait_for(timeout=2 * STEP_MS)
    assert page.locator(".jp-Notebook .jp-Cell").count() == len(nb.cells), "JupyterLab shows every cell"

    run_every_cell(page, code_cells)
    page.screenshot(path=ARTIFACTS / "notebook-after-run.png")
    shown = prompts(page)
    not_run = [i for i in code_cells if not re.fullmatch(r"\[\d+\]:", shown[i])]
    assert not_run == [], f"cells {not_run} did not run {where}"
    assert page.get_by_text(re.compile("Error displaying widget|Loading widget")).count() == 0, (
        f"a widget did not render {where}")

    # A graph drawing (Graphviz's SVG, in an <img>) and a matplotlib plot (a PNG) are on screen.
    drawings = page.locator(".jp-OutputArea-output img[src^='data:image/svg+xml']")
    assert drawings.count() > 0, (
        f"no graph drawing rendered: is Graphviz's dot installed (`bash .ci/install-graphviz`)? {where}")
    drawing = drawings.first
    drawing.scroll_into_view_if_needed()
    drawing.screenshot(path=ARTIFACTS / "graph-drawing.png")
    svg = image_bytes(drawing.get_attribute("src")).decode()
    assert "Generated by graphviz" in svg and 'class="node"' in svg, f"not a Graphviz drawing {where}"
    assert drawing.evaluate("img => img.complete && img.naturalWidth > 50 && img.naturalHeight > 50"), (
        f"the graph drawing did not load {where}")
    plots = page.locator(".jp-OutputArea-output img[src^='data:image/png']")
    assert plots.count() > 0, f"no plot rendered {where}"
    plot = plots.first
    plot.scroll_into_view_if_needed()
    plot.screenshot(path=ARTIFACTS / "plot.png")
    assert b"Matplotlib" in image_bytes(plot.get_attribute("src"))[:400], f"not a matplotlib plot {where}"
    assert plot.evaluate("img => img.complete && img.naturalWidth > 100 && img.naturalHeight > 100"), (
        f"the plot did not load {where}")

    # A choice question answered by clicking: feedback appears, the attempt is saved by choice id. The
    # options are shuffled for each learner, so the clicked label says which option was chosen.
    before = saved_attempts(lab["progress"])
    question = page.locator(".widget-vbox").filter(has=page.locator(".widget-radio-box")).first
    question.scroll_into_view_if_needed()
    label = question.locator(".widget-radio-box label").first
    clicked_text = re.sub(r"^\(a\) ", "", label.inner_text().strip())
    label.click()
    question.get_by_role("button", name="Check").first.click()
    feedback = question.get_by_text(re.compile(r"^\W*(Correct|Not quite)\.")).first
    feedback.wait_for()
    question.screenshot(path=ARTIFACTS / "quiz-feedback.png")
    correct = "Correct." in feedback.inner_text()
    new = wait_for_attempts(lab["progress"], len(before) + 1)[len(before):]
    assert [(a["kind"], a["correct"]) for a in new] == [("choice", correct)], (
        f"{lab['progress']} should record the one answer given {where}")
    chosen = choice_by_id(new[0]["notebook"], new[0]["question"], new[0]["response"])
    assert chosen.text == clicked_text and chosen.correct == correct, (
        f"saved {new[0]['response']!r}, but the label clicked was {clicked_text!r} {where}")
    print(f"answered {new[0]['notebook']}/{new[0]['question']} with (a), option {chosen.id!r}: "
          f"{'correct' if correct else 'wrong'}; screenshots in {ARTIFACTS}")

    # A numeric question answered by typing: an unreadable answer is explained and not saved; a number is.
    typed = page.locator(".widget-vbox").filter(has=page.locator(".widget-text input")).first
    typed.scroll_into_view_if_needed()
    box = typed.locator(".widget-text input").first
    box.fill("2^10")
    typed.get_by_role("button", name="Check").first.click()
    typed.get_by_text(re.compile(r"write powers with \*\*")).first.wait_for()
    box.fill("2**10")
    typed.get_by_role("button", name="Check").first.click()
    typed.get_by_text(re.compile(r"^\W*(Correct|Not quite)")).first.wait_for()
    typed.screenshot(path=ARTIFACTS / "quiz-typed-feedback.png")
    latest = wait_for_attempts(lab["progress"], len(before) + 2)[-1]
    assert (latest["kind"] in ("numeric", "short"), latest["response"]) == (True, "2**10"), (
        f"the typed answer should be saved once, as typed {where}")

    # A recall question: Reveal is disabled until something is typed.
    recall = page.locator(".widget-vbox").filter(has=page.locator("textarea")).first
    recall.scroll_into_view_if_needed()
    reveal = recall.get_by_role("button", name="Reveal").first
    assert reveal.is_disabled(), f"Reveal should wait for an answer {where}"
    recall.locator("textarea").first.fill("what I remember")
    page.wait_for_function("b => !b.disabled", arg=reveal.element_handle())
    reveal.click()
    recall.get_by_text("Model answer:").first.wait_for()
    recall.screenshot(path=ARTIFACTS / "quiz-recall-revealed.png")


def wait_for_attempts(path, count, seconds=STEP_MS / 1000):
    """The attempts saved, once there are `count` (a wait that ends as the file has them; `seconds`
    is its ceiling, a page step's, on a loaded machine)."""
    deadline = time.monotonic() + seconds
    while len(saved_attempts(path)) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    return saved_attempts(path)


def choice_by_id(notebook, question_id, choice_id):
    from autograder.learner import quiz_schema
    question = quiz_schema.find_question(notebook, question_id)
    return next(c for c in question.choices if c.id == choice_id)
