"""Google Colab: the first cell of every student notebook, and where Colab gets the course from.

Why: a Colab machine starts bare of this course. It has its own torch (with CUDA), numpy,
matplotlib and ipywidgets, but not the `autograder` package the notebooks import, and it
renders the quizzes' widgets only once its widget manager is switched on. So `backprop-course
release` puts ``bootstrap_cell()`` first in every student notebook: in Colab it pip-installs the
package from ``PACKAGE_SOURCE`` and enables the widget manager; anywhere else (JupyterLab,
nbgrader, the tests) it does nothing and shows nothing. pip keeps Colab's torch, because the
package asks for a range (pyproject.toml), never a pin, whose floor is not above Colab's torch and
is what CI tests (`make test-floor`), and the cell asks for no upgrade.

Forks: this file is the one place to change. Set ``REPOSITORY`` (and ``BRANCH``) to your fork, run
`make release`, and commit notebooks/ and README.md: the first cell of every notebook then installs
from your fork, and the README's "Open in Colab" badges open your fork's notebooks.
"""
import re

REPOSITORY = "backprop-course/backprop-course"  # GitHub owner/name of the course
BRANCH = "main"
# Anything `pip install` accepts; from the same branch as the notebooks, so the two stay in step.
PACKAGE_SOURCE = f"git+https://github.com/{REPOSITORY}@{BRANCH}"

CELL_ID = "colab-bootstrap"  # fixed (a release is the same each time it is made) and reserved for this cell
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
# any Colab link to a notebook of notebooks/, whatever repository and branch it names
_COLAB_LINK = re.compile(r"https://colab\.research\.google\.com/github/[^/\s)]+/[^/\s)]+/blob/[^/\s)]+"
                         r"/notebooks/([\w.-]+\.ipynb)")

_TEMPLATE = '''\
# In Google Colab, this cell installs the course's package and turns on the quiz widgets;
# anywhere else it does nothing. Colab keeps its own torch (the course takes torch 2.10 or later).
import sys

COURSE_PACKAGE = "{source}"


def install_course_package(source):
    import importlib, subprocess
    pip = [sys.executable, "-m", "pip", "install", "--quiet", source]
    done = subprocess.run(pip, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pip could not install {{source}}:\\n{{done.stderr[-3000:]}}")
    importlib.invalidate_caches()  # so that `import autograder` finds it


if "google.colab" in sys.modules:
    install_course_package(COURSE_PACKAGE)
    from google.colab import output
    output.enable_custom_widget_manager()
'''


def bootstrap_source(source: str = PACKAGE_SOURCE) -> str:
    """The text of the first cell: short and commented, since students read it."""
    if '"' in source or "\\" in source or "\n" in source:
        raise ValueError(f"PACKAGE_SOURCE must be a plain pip requirement or URL, not {source!r}")
    return _TEMPLATE.format(source=source).rstrip("\n")


def bootstrap_cell(source: str = PACKAGE_SOURCE):
    """The first cell as an nbformat code cell, with a fixed id."""
    import nbformat  # here: only releasing needs it (the grader's package), not the learner's
    return nbformat.v4.new_code_cell(bootstrap_source(source), id=CELL_ID)


def with_bootstrap(nb, source: str = PACKAGE_SOURCE):
    """`nb` with the bootstrap cell first: added, or replaced where an older one is there."""
    nb.cells = [bootstrap_cell(source)] + [c for c in nb.cells if c.get("id") != CELL_ID]
    return nb


def add_bootstrap(path, source: str = PACKAGE_SOURCE) -> None:
    """Put the bootstrap cell first in the notebook file at `path` (done to every released notebook)."""
    import nbformat
    nb = nbformat.read(path, as_version=4)
    nbformat.write(with_bootstrap(nb, source), path)


def colab_url(notebook_file: str) -> str:
    """Where Colab opens notebooks/<notebook_file> of this repository's branch."""
    return f"https://colab.research.google.com/github/{REPOSITORY}/blob/{BRANCH}/notebooks/{notebook_file}"


def colab_links(text: str) -> list:
    """[(notebook file, url), ...] of the Colab links in a Markdown text, in order."""
    return [(m.group(1), m.group(0)) for m in _COLAB_LINK.finditer(text)]


def with_current_links(text: str) -> str:
    """`text` with every Colab link pointing at REPOSITORY and BRANCH (what `release` does to README.md)."""
    return _COLAB_LINK.sub(lambda m: colab_url(m.group(1)), text)
