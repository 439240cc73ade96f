"""Show graphviz drawings in a notebook, or a clear note where Graphviz's `dot` is missing."""
import shutil

import graphviz

INSTALL_HINT = ("Graphviz's `dot` program is not installed, so the drawing cannot be rendered. "
                "Install it (Debian/Ubuntu: `sudo apt-get install graphviz`; conda: "
                "`conda install -c conda-forge graphviz`; macOS: `brew install graphviz`), then re-run "
                "this cell. Meanwhile, here is the graph as text:")


def dot_available() -> bool:
    return shutil.which("dot") is not None


class MissingDot:
    """Stands in for a drawing: Jupyter shows the hint and the graph's DOT text."""

    def __init__(self, graph: graphviz.Digraph):
        self.source = graph.source

    def _repr_markdown_(self):
        return f"{INSTALL_HINT}\n\n```dot\n{self.source}```"

    def __repr__(self):
        return f"{INSTALL_HINT}\n{self.source}"


def show_graph(graph: graphviz.Digraph):
    """The graph itself where `dot` can render it, else a `MissingDot` note (never an exception)."""
    return graph if dot_available() else MissingDot(graph)
