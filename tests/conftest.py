"""What every test run shares: a private progress file, the GPU tests' skip, and missing parts
that fail under CI instead of skipping.

Markers (registered in pyproject.toml):
- `gpu`: runs on CUDA (`make test-gpu`). Where torch sees no CUDA device, every such test is
  skipped here, at one place, so the summary says it once.
- `needs(present, reason=...)`: the test needs a part of the machine (Graphviz's `dot`, Chromium,
  kernel isolation, ...). Where `present` is false it is skipped with `reason`; when the
  environment variable CI is set (`.ci/run` sets it) it FAILS instead, so that CI never passes
  with a part of the course untested.
"""
import functools
import os
import pathlib
import tempfile

import pytest

# Notebooks executed by the tests save quiz progress here, never in the tester's home.
os.environ.setdefault("COURSE_PROGRESS", str(pathlib.Path(tempfile.mkdtemp()) / "progress.json"))

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


_WATCHDOG = pytest.StashKey[bool]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is not None and not cuda_available():
        pytest.skip(NO_GPU)
    for mark in item.iter_markers("needs"):
        present = mark.args[0] if mark.args else mark.kwargs["present"]
        reason = mark.kwargs.get("reason") or (mark.args[1] if len(mark.args) > 1 else "a needed part is missing")
        require(bool(present), reason)
