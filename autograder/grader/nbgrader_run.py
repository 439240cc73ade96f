"""Run nbgrader commands from this environment, for `backprop-course release` and `grade`.

nbgrader runs `alembic` from PATH (when it creates a gradebook), so this environment's scripts
must be findable: in the environment of an nbgrader subprocess, and, only while a gradebook is
opened in this process, on this process's own PATH (put there once, taken away after).
"""
import contextlib
import os
import subprocess
import sys

SCRIPTS = os.path.dirname(sys.executable)


def nbgrader_env(extra: dict | None = None) -> dict:
    """This process's environment with its scripts first on PATH (once), plus `extra`."""
    path = os.environ.get("PATH", "")
    if SCRIPTS not in path.split(os.pathsep):
        path = SCRIPTS + os.pathsep + path
    return {**os.environ, "PATH": path, **(extra or {})}


@contextlib.contextmanager
def with_scripts_on_path():
    """This environment's scripts on PATH while the block runs (nbgrader's Gradebook may call alembic)."""
    before = os.environ.get("PATH")
    os.environ["PATH"] = nbgrader_env()["PATH"]
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = before


def nbgrader_runner(root):
    """A function that runs one nbgrader command in the course root and fails loudly."""

    def run(*args, env=None):
        result = subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=ERROR"], cwd=root,
                                capture_output=True, text=True, env=nbgrader_env(env))
        if result.returncode != 0:
            raise SystemExit(f"nbgrader {' '.join(args)} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
        return result
    return run
