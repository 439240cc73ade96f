"""What the learner's package accepts is what CI tests.

pyproject.toml asks for torch and triton as ranges (Colab keeps its own torch). Their lower bounds are
what `make test-floor` installs (.ci/floor.txt) and runs the learner's tests on, in CI after `make test`:
a floor declared lower than that is one nobody tested. Under `make test-floor` (COURSE_FLOOR=1) these
tests also check that the venv, and a kernel it starts, run exactly the floor. The private parts of
torch and Triton that the checks patch are checked on every torch CI runs: the newest pinned one and
the floor.
"""
import importlib.metadata
import os
import pathlib
import subprocess
import sys
import tomllib

import course
import nbformat
import pytest
import torch
from packaging.requirements import Requirement
from packaging.version import Version

from autograder.grader import colab

ROOT = pathlib.Path(__file__).resolve().parent.parent
FLOOR_FILE = ROOT / ".ci" / "floor.txt"
FLOOR_RUN = os.environ.get("COURSE_FLOOR", "") == "1"  # set by `make test-floor`
FLOORED = ("torch", "triton")


def declared(dependencies=None) -> dict:
    """{name: Requirement} of the learner's package (pyproject.toml), or of `dependencies`."""
    if dependencies is None:
        dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {r.name: r for r in map(Requirement, dependencies)}


def floor_pins(text=None) -> dict:
    """{name: Version} of .ci/floor.txt's pins (or of `text`)."""
    lines = (FLOOR_FILE.read_text() if text is None else text).splitlines()
    reqs = [Requirement(line) for line in lines if line.strip() and not line.lstrip().startswith("#")]
    return {r.name: Version(next(iter(r.specifier)).version) for r in reqs}


def floor_of(requirement) -> str | None:
    """The version a `>=` bound names, as written, where that is the requirement's only lower bound."""
    lower = [s for s in requirement.specifier if s.operator in (">=", ">", "==", "~=", "===")]
    return lower[0].version if len(lower) == 1 and lower[0].operator == ">=" else None


def disagreements(requirements: dict, pins: dict) -> dict:
    """{name: (declared floor, what CI installs)} for each floored package where the two differ."""
    found = {name: (floor_of(requirements[name]) if name in requirements else None, pins.get(name))
             for name in FLOORED}
    return {name: pair for name, pair in found.items() if pair[0] is None or Version(pair[0]) != pair[1]}


def test_ci_installs_the_floor_the_package_declares():
    assert disagreements(declared(), floor_pins()) == {}, (
        "pyproject.toml's torch/triton floor is not what .ci/floor.txt installs for `make test-floor`")


def test_a_floor_declared_lower_or_higher_than_what_ci_installs_is_found():
    pins = floor_pins("torch==2.10.0\ntriton==3.6.0\n")
    assert disagreements(declared(["torch>=2.10,<3", "triton>=3.6"]), pins) == {}
    lower = disagreements(declared(["torch>=2.4,<3", "triton>=3.6"]), pins)
    assert lower == {"torch": ("2.4", Version("2.10.0"))}
    higher = disagreements(declared(["torch>=2.10", "triton>=3.9"]), pins)
    assert higher == {"triton": ("3.9", Version("3.6.0"))}
    assert set(disagreements(declared(["torch", "triton>3.6"]), pins)) == {"torch", "triton"}  # no `>=` floor


def test_ci_runs_the_learner_tests_on_the_floor():
    """.ci/run runs `make test-floor`, which installs .ci/floor.txt's pins and tests with COURSE_FLOOR=1."""
    assert "make test-floor" in (ROOT / ".ci" / "run").read_text()
    plan = subprocess.run(["make", "--dry-run", "--always-make", "test-floor"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True).stdout.replace("\\\n", " ").splitlines()
    install = next(line for line in plan if "pip install" in line)
    test = next(line for line in plan if "pytest" in line)
    assert any(".ci/floor.txt" in line for line in plan) and "-e ." in install and "COURSE_FLOOR=1" in test
    assert "tests/test_floor.py" in test and "tests/test_solutions.py" in test


def installed(name) -> Version:
    return Version(Version(importlib.metadata.version(name)).base_version)


def test_this_python_runs_what_it_was_installed_with():
    """Under `make test-floor` exactly .ci/floor.txt's pins, and the floor's torch asks for the floor's triton
    (so pip keeps a CUDA build of the lowest torch accepted); anywhere else within the declared ranges."""
    reqs = declared()
    here = [name for name in FLOORED if reqs[name].marker is None or reqs[name].marker.evaluate()]
    assert Version(torch.__version__).base_version == str(installed("torch"))
    if FLOOR_RUN:
        pins = {name: pin for name, pin in floor_pins().items() if name in here or name not in FLOORED}
        assert {name: installed(name) for name in pins} == pins
        needs = [Requirement(r) for r in importlib.metadata.requires("torch") or []]
        triton = [Version(s.version) for r in needs if r.name == "triton" and (r.marker is None or r.marker.evaluate())
                  for s in r.specifier if s.operator == "=="]
        assert triton == [pins["triton"]]
    else:
        assert {name: installed(name) for name in here if installed(name) not in reqs[name].specifier} == {}


def test_a_kernel_started_by_the_tests_runs_the_same_torch(tmp_path):
    """The notebook tests run in Jupyter kernels: under `make test-floor` they must run the floor's torch."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import torch\nprint(torch.__version__)")])
    path = tmp_path / "which.ipynb"
    nbformat.write(nb, path)
    (cell,) = course.execute(path, tmp_path).cells
    said = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream").strip()
    assert said == torch.__version__


def test_the_colab_cell_and_the_readme_state_the_declared_floor():
    """The first cell tells Colab users which torch the course takes; the README's set-up says both floors."""
    torch_floor, triton_floor = (floor_of(declared()[name]) for name in FLOORED)
    assert f"the course takes torch {torch_floor} or later" in colab.bootstrap_source()
    setup = (ROOT / "README.md").read_text().split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert f"torch {torch_floor} or newer" in setup and f"Triton {triton_floor} or newer" in setup
    assert "make test-floor" in setup


def probe(tmp_path, source: str) -> str:
    """The last line `source` prints, run in a fresh Python (what it imports is its own)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "COURSE_DEVICE")}
    done = subprocess.run([sys.executable, "-c", source], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_watching_a_learner_s_ops_imports_no_dynamo(tmp_path):
    """torch 2.13 wraps a TorchDispatchMode's handler in torch._dynamo (an import of seconds, mid-grading)
    unless its `_should_skip_dynamo` says no, as OpWatch's does; torch 2.10 has no such hook and wraps nothing."""
    said = probe(tmp_path, "import sys, torch\nfrom autograder.checks.op_watch import OpWatch\n"
                           "with OpWatch():\n    torch.ones(2).exp()\nprint('torch._dynamo' in sys.modules)")
    assert said == "False"


@pytest.mark.needs(declared()["triton"].marker.evaluate(), reason="Triton has no wheel for this platform")
def test_the_triton_classes_whose_launches_the_guard_counts_are_in_this_triton(tmp_path):
    """Notebook 09's kernel guard (kernel_classes) counts launches by patching `run` of Triton's JITFunction
    (compiled) and InterpretedFunction (interpreter), both private: without them launches go uncounted. A fresh
    Python, so that Triton's interpreter is set before triton is imported (autograder.learner.triton_setup)."""
    said = probe(tmp_path, "from autograder.learner import triton_setup\nassert triton_setup.prepare('cpu').usable\n"
                           "from triton.runtime import interpreter, jit\n"
                           "kinds = ((jit, 'JITFunction'), (interpreter, 'InterpretedFunction'))\n"
                           "print([name for module, name in kinds if 'run' in vars(getattr(module, name, object))])")
    assert said == "['JITFunction', 'InterpretedFunction']"
