"""Colab, simulated as far as it can be here: the first cell of every student notebook (run with a
fake `google.colab`, its pip step captured), notebooks that need no local file, README badges
that open the configured repository, and a package built from this tree that has everything the
notebooks import."""
import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import types
import zipfile

import course
import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager
from packaging.requirements import Requirement
from packaging.version import Version

from autograder.grader import cli, colab

NAMES = course.assignment_names()
README = course.ROOT / "README.md"
PYPROJECT = course.ROOT / "pyproject.toml"

# What Colab brings, from googlecolab/backend-info's pip-freeze.gpu.txt (February 2026), and must
# keep: the cell would otherwise replace packages Colab's own kernel and tools are built around
# (google-colab pins ipython==7.34.0). ipywidgets may move to 8: the cell turns on Colab's widget
# manager for it.
COLAB_KEEPS = {"torch": "2.10.0+cu128", "numpy": "2.0.2", "matplotlib": "3.10.0", "ipython": "7.34.0",
               "graphviz": "0.21", "pyyaml": "6.0.3"}


# --- the first cell ------------------------------------------------------------------------------

class FakePip:
    """Stands in for subprocess.run: records each command, answers with `returncode`."""

    def __init__(self, returncode=0, stderr=""):
        self.calls, self.returncode, self.stderr = [], returncode, stderr

    def __call__(self, command, **kwargs):
        self.calls.append(list(command))
        return subprocess.CompletedProcess(command, self.returncode, "", self.stderr)


@pytest.fixture
def fake_pip(monkeypatch):
    pip = FakePip()
    monkeypatch.setattr(subprocess, "run", pip)
    return pip


@pytest.fixture
def fake_colab(monkeypatch):
    """A `google.colab` in sys.modules, as in a Colab kernel; returns the widget-manager calls."""
    enabled = []
    google, colab_module, output = (types.ModuleType(n) for n in ("google", "google.colab", "google.colab.output"))
    output.enable_custom_widget_manager = lambda: enabled.append(True)
    colab_module.output, google.colab = output, colab_module
    for name, module in (("google", google), ("google.colab", colab_module), ("google.colab.output", output)):
        monkeypatch.setitem(sys.modules, name, module)
    return enabled


def run_cell(source):
    exec(compile(source, "<first cell>", "exec"), {"__name__": "__main__"})


def test_first_cell_does_nothing_outside_colab(fake_pip, monkeypatch, capsys):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    run_cell(colab.bootstrap_source())
    assert fake_pip.calls == []
    assert "google.colab" not in sys.modules
    assert capsys.readouterr() == ("", "")


def test_first_cell_in_colab_installs_the_course_and_turns_on_widgets(fake_pip, fake_colab, capsys):
    run_cell(colab.bootstrap_source())
    assert fake_pip.calls == [[sys.executable, "-m", "pip", "install", "--quiet", colab.PACKAGE_SOURCE]]
    assert fake_colab == [True]
    assert capsys.readouterr() == ("", "")


def test_first_cell_in_colab_keeps_colabs_torch(fake_pip, fake_colab):
    """Nothing asks pip for torch or for upgrades; the package's torch range takes Colab's."""
    run_cell(colab.bootstrap_source())
    (command,) = fake_pip.calls
    assert not any(arg in command for arg in ("-U", "--upgrade", "--force-reinstall", "--ignore-installed"))
    assert not any("torch" in arg for arg in command)
    torch = next(Requirement(r) for r in course_requirements() if Requirement(r).name == "torch")
    assert torch.specifier.contains(COLAB_KEEPS["torch"]), f"{torch} would replace Colab's torch"


def test_first_cell_in_colab_says_when_pip_fails(monkeypatch, fake_colab):
    monkeypatch.setattr(subprocess, "run", FakePip(1, "ERROR: Repository not found"))
    with pytest.raises(RuntimeError, match=r"pip could not install git\+https://\S+:\nERROR: Repository not found"):
        run_cell(colab.bootstrap_source())


def test_first_cell_shows_nothing_in_a_real_kernel(tmp_path):
    """Outside Colab (here: an IPython kernel, as in JupyterLab or nbgrader) the cell has no output."""
    path = tmp_path / "first.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[colab.bootstrap_cell()]), path)
    (cell,) = course.execute(path, tmp_path).cells
    assert cell.outputs == [] and cell.execution_count == 1


def test_first_cell_is_short_and_says_what_it_does():
    lines = colab.bootstrap_source().splitlines()
    assert len(lines) <= 20 and max(map(len, lines)) <= 100
    assert lines[0].startswith("# In Google Colab") and "does nothing" in lines[1]
    assert f'COURSE_PACKAGE = "{colab.PACKAGE_SOURCE}"' in lines


def test_package_source_follows_the_configured_repository():
    assert colab.PACKAGE_SOURCE == f"git+https://github.com/{colab.REPOSITORY}@{colab.BRANCH}"
    with pytest.raises(ValueError, match="plain pip requirement"):
        colab.bootstrap_source('x"; import os; os.system("true")  #')


def course_requirements():
    import tomllib
    return tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]


def test_colab_keeps_its_own_packages():
    """pip replaces a package Colab has only where the course asks for a version outside it."""
    replaced = {}
    for line in course_requirements():
        req = Requirement(line)
        have = COLAB_KEEPS.get(req.name.lower())
        if have is not None and not req.specifier.contains(Version(have)):
            replaced[req.name] = f"Colab has {have}, pyproject.toml asks for {req.specifier}"
    assert replaced == {}, "installing the course in Colab would replace its own packages"


# --- putting it into the release -----------------------------------------------------------------

def test_with_bootstrap_puts_one_cell_first_and_replaces_an_old_one():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title", id="md-00"),
                                         nbformat.v4.new_code_cell("x = 1", id="code-01")])
    colab.with_bootstrap(nb)
    colab.with_bootstrap(nb)
    assert [c.id for c in nb.cells] == [colab.CELL_ID, "md-00", "code-01"]
    colab.with_bootstrap(nb, "git+https://github.com/someone/fork@main")
    assert [c.id for c in nb.cells] == [colab.CELL_ID, "md-00", "code-01"]
    assert '"git+https://github.com/someone/fork@main"' in nb.cells[0].source
    nbformat.validate(nb)


@pytest.mark.parametrize("name", NAMES)
def test_every_student_notebook_starts_with_the_colab_cell(name):
    cells = course.read(course.release_path(name)).cells
    assert cells[0].get("id") == colab.CELL_ID and cells[0].source == colab.bootstrap_source(), (
        f"notebooks/{name}.ipynb does not start with the Colab cell of autograder/grader/colab.py: run `make release`")
    assert [c.get("id") for c in cells].count(colab.CELL_ID) == 1


@pytest.fixture
def course_copy(tmp_path):
    """A course directory with the smallest assignment and a README whose badge points elsewhere."""
    name = min(NAMES, key=lambda n: course.solution_path(n).stat().st_size)
    root = tmp_path / "course"
    (root / "solutions" / name).mkdir(parents=True)
    for path in (course.ROOT / "nbgrader_config.py", course.solution_path(name)):
        (root / path.relative_to(course.ROOT)).write_bytes(path.read_bytes())
    (root / "README.md").write_text(
        f"| 01 | [one](notebooks/{name}.ipynb) | [![Open in Colab]({colab.BADGE_IMAGE})]"
        f"(https://colab.research.google.com/github/someone/else/blob/dev/notebooks/{name}.ipynb) |\n")
    return root, name


def test_release_adds_the_cell_and_check_compares_with_it(course_copy, tmp_path, monkeypatch, capsys):
    root, name = course_copy
    (tmp_path / "generated").mkdir()
    (released,) = cli.generate(root, [name], tmp_path / "generated")  # nbgrader, once
    nb = course.read(released)
    assert nb.cells[0].id == colab.CELL_ID and nb.cells[0].source == colab.bootstrap_source()
    assert [c.get("id") for c in nb.cells[1:]] == [c.get("id") for c in course.read(course.solution_path(name)).cells]

    def generate_again(_root, _names, out):  # the same release, without running nbgrader again
        target = out / "release" / name / released.name
        target.parent.mkdir(parents=True)
        shutil.copy(released, target)
        return [target]

    monkeypatch.setattr(cli, "generate", generate_again)
    shipped = root / "notebooks" / released.name
    shipped.parent.mkdir()
    nb.cells = nb.cells[1:]  # notebooks/ as nbgrader alone makes it, and the README badge elsewhere
    nbformat.write(nb, shipped)
    assert cli.release(root, [name], check=True) == 1
    said = capsys.readouterr().out
    assert f"notebooks/{name}.ipynb is stale" in said and "README.md's Open in Colab links" in said

    assert cli.release(root, [name], check=False) == 0
    assert course.read(shipped).cells[0].source == colab.bootstrap_source()
    readme = (root / "README.md").read_text()
    assert colab.colab_links(readme) == [(released.name, colab.colab_url(released.name))]
    assert cli.release(root, [name], check=True) == 0


# --- README --------------------------------------------------------------------------------------

def test_readme_has_a_colab_badge_for_every_notebook_from_the_configured_repository():
    rows = [line for line in README.read_text().splitlines() if re.match(r"\| (\d\d|—) \| ", line)]
    found = {}
    for row in rows:
        (notebook,) = re.findall(r"\]\(notebooks/([\w.-]+\.ipynb)\)", row)
        links = colab.colab_links(row)
        assert links == [(notebook, colab.colab_url(notebook))], f"README row of {notebook}: {links}"
        assert f"[![Open in Colab]({colab.BADGE_IMAGE})]({colab.colab_url(notebook)})" in row
        found[notebook] = True
    assert sorted(found) == sorted(p.name for p in course.NOTEBOOKS.glob("*.ipynb"))
    assert len(colab.colab_links(README.read_text())) == len(found), "a Colab link outside the table"


def test_with_current_links_points_a_forks_readme_at_the_fork(monkeypatch):
    text = "[![b](x)](https://colab.research.google.com/github/old/repo/blob/dev/notebooks/02_micrograd.ipynb)"
    monkeypatch.setattr(colab, "REPOSITORY", "fork-owner/fork-name")
    fixed = colab.with_current_links(text)
    assert fixed == ("[![b](x)](https://colab.research.google.com/github/fork-owner/fork-name/blob/main"
                     "/notebooks/02_micrograd.ipynb)")
    assert colab.with_current_links(fixed) == fixed


# --- no local files ------------------------------------------------------------------------------

PATH_SUFFIXES = (".ipynb", ".json", ".yaml", ".yml", ".csv", ".npy", ".npz", ".pt", ".pth", ".pkl",
                 ".png", ".jpg", ".jpeg", ".gif", ".svg", ".txt", ".py")
MAGICS_ON_FILES = ("cd", "pushd", "run", "load", "loadpy")
LOCAL_DIRS = ("../", "./", "assets/", "solutions/", "notebooks/", "release/", "data/", "autograder/")


def looks_like_a_file(text: str) -> bool:
    """A relative path into this repository, a data file's name, or an absolute path outside /tmp."""
    if not text or any(ch.isspace() for ch in text) or "://" in text:
        return False
    return (text.startswith(LOCAL_DIRS) or text.endswith(PATH_SUFFIXES)
            or re.match(r"/(?!tmp/|dev/|proc/)[\w.-]+/", text) is not None)


def local_file_uses(source: str) -> list:
    """What in one code cell would need a file from this repository: a file path in a string,
    open() of a string, a change of sys.path or of the working directory, __file__."""
    tree = ast.parse(TransformerManager().transform_cell(source))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and looks_like_a_file(node.value.strip()):
            found.append(f"file path {node.value.strip()!r}")
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if name == "open" and node.args and isinstance(node.args[0], (ast.Constant, ast.JoinedStr)):
                found.append(f"open() of {ast.unparse(node.args[0])}")
            if name == "chdir" or (name in ("append", "insert", "extend") and "sys.path" in ast.unparse(node.func)):
                found.append(ast.unparse(node))
            if name == "run_line_magic" and node.args and getattr(node.args[0], "value", "") in MAGICS_ON_FILES:
                found.append(f"%{node.args[0].value} {ast.unparse(node.args[1]) if len(node.args) > 1 else ''}")
        elif isinstance(node, ast.Name) and node.id == "__file__":
            found.append("__file__")
    return found


def local_links(markdown: str) -> list:
    """Links and images of a markdown cell that point at a file beside the notebook (code is not a link:
    `kernel[grid](...)` is a launch)."""
    markdown = re.sub(r"```.*?```|`[^`]*`", "", markdown, flags=re.S)
    targets = re.findall(r"\]\(\s*<?([^)\s>]+)", markdown) + re.findall(r"""src\s*=\s*["']([^"']+)""", markdown)
    return [t for t in targets if not re.match(r"(https?:|mailto:|#|attachment:|data:)", t)]


def test_local_file_scan_finds_what_would_break_in_colab():
    assert local_file_uses("open('assets/x.png')")
    assert local_file_uses("df = load('../data/train.csv')")
    assert local_file_uses("import sys\nsys.path.append('..')")
    assert local_file_uses("%cd solutions")
    assert local_file_uses("w = torch.load('weights.pt')")
    assert local_file_uses("text = pathlib.Path('/work/main/README.md').read_text()")
    assert local_file_uses("print(__file__)")
    assert local_links("see ![graph](assets/graph.png) and [02](02_micrograd.ipynb)") == [
        "assets/graph.png", "02_micrograd.ipynb"]
    assert local_file_uses("print(f'dL/dW = {g}'); x = 'a/b c'; url = 'https://x.org/a.png'") == []
    assert local_links("[docs](https://pytorch.org) and [above](#the-tape)") == []
    assert local_links("the launch `kernel[grid](...)`, and [02](02_micrograd.ipynb)") == ["02_micrograd.ipynb"]


@pytest.mark.parametrize("name", NAMES)
def test_student_notebook_needs_no_local_file(name):
    found = []
    for i, cell in enumerate(course.read(course.release_path(name)).cells):
        uses = local_file_uses(cell.source) if cell.cell_type == "code" else local_links(cell.source)
        found += [f"cell {i}: {use}" for use in uses]
    assert found == [], f"{name} would not run unchanged in Colab"


# --- the package Colab installs ------------------------------------------------------------------

def autograder_imports(nb) -> dict:
    """{module: [names]} of every `import autograder...` / `from autograder... import ...` in code cells."""
    imports = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(TransformerManager().transform_cell(cell.source))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "autograder":
                imports.setdefault(node.module, set()).update(a.name for a in node.names)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "autograder":
                        imports.setdefault(alias.name, set())
    return {module: sorted(names) for module, names in imports.items()}


def modern_setuptools() -> bool:
    spec = importlib.util.find_spec("setuptools")
    if spec is None:
        return False
    import setuptools
    return Version(setuptools.__version__) >= Version("70.1")  # builds wheels without `wheel`


def test_package_built_from_this_tree_has_what_the_notebooks_import(tmp_path):
    """What `pip install git+...` puts in Colab: a wheel of pyproject.toml and autograder/, used from
    another folder (no checkout beside it)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (src / name).write_bytes((course.ROOT / name).read_bytes())
    subprocess.run(["cp", "-r", str(course.ROOT / "autograder"), str(src)], check=True)
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path / "dist"), str(src)]
    if modern_setuptools():
        command.insert(4, "--no-build-isolation")
    built = subprocess.run(command, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("backprop_course-*.whl")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)

    imports = {}
    for name in NAMES:
        for module, names in autograder_imports(course.read(course.release_path(name))).items():
            imports.setdefault(module, set()).update(names)
    assert "autograder.learner.quiz" in imports, "the notebooks' imports were not found"
    probe = f"""
import importlib, importlib.util, pathlib
import autograder
assert pathlib.Path(autograder.__file__).is_relative_to({str(site)!r}), autograder.__file__
for module, names in {({m: sorted(n) for m, n in imports.items()})!r}.items():
    loaded = importlib.import_module(module)
    for name in names:
        assert hasattr(loaded, name) or importlib.util.find_spec(module + "." + name), (module, name)
from autograder.learner import quiz
for notebook in {NAMES!r}:
    quiz.load_quiz(notebook)
print("ok")
"""
    ran = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(site)})
    assert ran.returncode == 0 and ran.stdout.strip() == "ok", ran.stderr[-3000:]
