"""What every test run shares: a private progress file, the GPU tests' skip, missing parts that
fail under CI instead of skipping, per-test time limits, and the order and grouping of `-n 2`.

Markers (registered in pyproject.toml):
- `gpu`: runs on CUDA (`make test-gpu`). Where torch sees no CUDA device, every such test is
  skipped here, at one place, so the summary says it once.
- `needs(present, reason=...)`: the test needs a part of the machine (Graphviz's `dot`, Chromium,
  kernel isolation, root, ...). Where `present` is false it is skipped with `reason`; when the
  environment variable CI is set (`.ci/run` sets it) it FAILS instead, so that CI never passes
  with a part of the course untested. `needs(module="triton", reason=...)`: the part is a Python
  module, present where it can be imported (found without importing it at collection).
"""
import functools
import importlib.util
import os
import pathlib
import tempfile

import pytest

# Notebooks executed by the tests save quiz progress here, never in the tester's home.
os.environ.setdefault("COURSE_PROGRESS", str(pathlib.Path(tempfile.mkdtemp()) / "progress.json"))
# Hidden tests load answer keys (solutions/<notebook>/answer_key.py) from the course directory: notebooks
# the tests execute in temporary folders find it here.
os.environ.setdefault("COURSE_ROOT", str(pathlib.Path(__file__).resolve().parent.parent))

NO_GPU = ("no CUDA device here (torch.cuda.is_available() is False): every GPU test is skipped; "
          "run `make test-gpu` on a machine with an NVIDIA GPU")


@functools.cache
def cuda_available() -> bool:
    import torch
    return torch.cuda.is_available()


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(present: bool, reason: str):
    """Go on if `present`; else skip saying `reason`, or fail under CI (a missing part is a failure there)."""
    if present:
        return
    if in_ci():
        pytest.fail(f"{reason} (CI is set: a part that is missing fails the run instead of skipping)", pytrace=False)
    pytest.skip(reason)


_WATCHDOG = pytest.StashKey[bool]()  # this item's faulthandler timer is set


@functools.cache
def _stderr_fd() -> int:
    """A copy of the real stderr, which no capture redirects (under xdist it reaches the terminal)."""
    from _pytest.faulthandler import get_stderr_fileno
    return os.dup(get_stderr_fileno())


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item, settings):
    """pytest-timeout's "thread" method (pyproject.toml), done by faulthandler: at the limit, the
    stack of every thread goes to the terminal and the process ends, so the test fails (under
    xdist: "worker crashed while running <test>", then the worker is replaced). pytest-timeout's
    own thread method writes its dump where an xdist worker's output is lost, and needs the GIL,
    which a C call that hangs may hold; faulthandler's watchdog needs neither."""
    import faulthandler

    import pytest_timeout
    if settings.method != "thread" or not settings.timeout:
        return None
    if not settings.disable_debugger_detection and pytest_timeout.is_debugging():
        return True
    faulthandler.dump_traceback_later(settings.timeout, exit=True, file=_stderr_fd())
    item.stash[_WATCHDOG] = True
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_cancel_timer(item):
    import faulthandler

    if item.stash.get(_WATCHDOG, False):
        faulthandler.cancel_dump_traceback_later()
        item.stash[_WATCHDOG] = False
        return True
    return None


# Modules whose tests take minutes each, longest first (measured with --durations on 2 loaded cores:
# nbgrader end to end 160-550 s a notebook, class grading 370-440 s for its shared class and 20-150 s
# a trusted reference, the browser 50-80 s, a notebook executed for test_solutions/test_release 10-50 s).
# They run first, so that `-n 2` ends with short tests on both workers, not one long test alone.
SLOW_FIRST = ("test_nbgrader_e2e.py", "test_classgrade.py", "test_benchmarks.py", "test_gpu.py", "test_browser.py",
              "test_solutions.py", "test_release.py")


# Per-test time limits above pyproject.toml's default (300 s, over 3x the slowest other test measured
# under load: 89 s), about twice the longest measured under load (e2e 550 s; the graded class 440 s
# of set-up; the browser 80 s, and it may wait up to 240 s). A test's own @pytest.mark.timeout wins.
LIMITS = {"test_nbgrader_e2e.py": 1200, "test_classgrade.py": 1200, "test_browser.py": 600}


def pytest_collection_modifyitems(config, items):
    """Slow modules first (a stable sort: each module keeps its order), with their own time limits."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))
    for item in items:
        if item.path.name in LIMITS:
            item.add_marker(pytest.mark.timeout(LIMITS[item.path.name]))


def work_unit(nodeid: str) -> str:
    """What one xdist worker runs together: a module's tests with the same parameter id, and its
    unparametrised tests. Tests that share a module-scoped fixture instance (a notebook executed
    once per parameter, a graded class) so run on one worker, which makes it once, while the
    slow parametrised tests (a notebook graded end to end) spread over the workers."""
    path, _, name = nodeid.partition("::")
    return path + (name[name.index("["):] if "[" in name else "")


class CourseScheduling:
    """`pytest -n N` (xdist's default --dist load) schedules work units (work_unit) in collection
    order, longest modules first, a new unit to whichever worker is nearly idle. An explicit
    --dist other than load keeps xdist's own scheduler. (xdist's loadgroup would do this with
    marks, but pytest 9.2's node ids no longer carry its group suffix: pytest-xdist#1386.)"""

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config, log):
        if config.getvalue("dist") != "load":
            return None
        from xdist.scheduler import LoadScopeScheduling

        class ByWorkUnit(LoadScopeScheduling):
            def _split_scope(self, nodeid):
                return work_unit(nodeid)

        config.option.loadscopereorder = False  # keep the slow-first order, not "most tests first"
        return ByWorkUnit(config, log)


def pytest_configure(config):
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(CourseScheduling(), "course-scheduling")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is not None and not cuda_available():
        pytest.skip(NO_GPU)
    for mark in item.iter_markers("needs"):
        reason = mark.kwargs.get("reason") or (mark.args[1] if len(mark.args) > 1 else "a needed part is missing")
        require(_present(mark), reason)


def _present(mark) -> bool:
    """Whether a `needs` mark's part is here: its `present`, or its `module` can be imported."""
    if "module" in mark.kwargs:
        return importlib.util.find_spec(mark.kwargs["module"]) is not None
    return bool(mark.args[0] if mark.args else mark.kwargs["present"])
