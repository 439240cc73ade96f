"""The set-up files agree: pyproject's ranges, constraints.txt's pins and environment.yml."""
import pathlib
import re
import tomllib

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = pathlib.Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
GRADER_PYPROJECT = tomllib.loads((ROOT / "packaging" / "grader" / "pyproject.toml").read_text())
OURS = {"backprop-course", "backprop-course-grader"}


def direct_requirements():
    """Every third-party requirement of the learner's and the grader's package, extras included."""
    reqs = []
    for project in (PYPROJECT["project"], GRADER_PYPROJECT["project"]):
        reqs += [Requirement(r) for r in project["dependencies"]]
        for extra in project.get("optional-dependencies", {}).values():
            reqs += [Requirement(r) for r in extra]
    return {canonicalize_name(r.name): r for r in reqs if canonicalize_name(r.name) not in OURS}


def pins(lines):
    found = {}
    for line in lines:
        match = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)==([^\s;#]+)\s*(;.*)?", line)  # a pin, maybe with a marker
        if match:
            found[canonicalize_name(match.group(1))] = match.group(2)
    return found


CONSTRAINTS = pins((ROOT / "constraints.txt").read_text().splitlines())
ENVIRONMENT = yaml.safe_load((ROOT / "environment.yml").read_text())


def environment_pip_lines():
    (pip_section,) = [d["pip"] for d in ENVIRONMENT["dependencies"] if isinstance(d, dict)]
    return pip_section


def test_torch_is_a_range_not_a_pin():
    torch = direct_requirements()["torch"]
    assert not any(spec.operator == "==" for spec in torch.specifier)


def test_every_direct_dependency_is_pinned_within_its_range():
    reqs = direct_requirements()
    missing = sorted(set(reqs) - set(CONSTRAINTS))
    assert missing == [], "run `make lock`"
    outside = {n: CONSTRAINTS[n] for n, r in reqs.items() if CONSTRAINTS[n] not in r.specifier}
    assert outside == {}


def test_environment_yml_lists_the_same_packages_at_the_same_pins():
    env = pins(environment_pip_lines())
    assert set(env) == set(direct_requirements())
    assert {n: v for n, v in env.items() if CONSTRAINTS[n] != v} == {}


def test_environment_yml_installs_a_platform_limited_dependency_on_the_same_platforms():
    """triton has wheels for Linux x86_64 and aarch64 only: conda on a Mac must not try to install it."""
    env = {canonicalize_name(r.name): str(r.marker)
           for r in (Requirement(line) for line in environment_pip_lines() if ";" in line)}
    marked = {n: str(r.marker) for n, r in direct_requirements().items() if r.marker is not None}
    assert "triton" in marked and env == marked


def test_environment_yml_brings_python_and_graphviz():
    conda = [d for d in ENVIRONMENT["dependencies"] if isinstance(d, str)]
    assert any(d.startswith("python") for d in conda) and "graphviz" in conda
    python = next(d for d in conda if d.startswith("python"))
    assert PYPROJECT["project"]["requires-python"] == GRADER_PYPROJECT["project"]["requires-python"] == ">=3.11"
    assert python == "python=3.11", "environment.yml installs the oldest Python the packages claim"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make course" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_the_grader_needs_a_torch_whose_weights_only_load_is_safe():
    """The grader reads every answer with torch.load(weights_only=True): torch <= 2.9.1 could be made
    to corrupt memory or run code through it. (The learner's floor is tests/test_floor.py's.)"""
    from packaging.version import Version
    grader = next(Requirement(r) for r in GRADER_PYPROJECT["project"]["dependencies"] if r.startswith("torch"))
    assert Version("2.9.1") not in grader.specifier and Version("2.10.0") in grader.specifier
