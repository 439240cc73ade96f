"""Show graphviz drawings in a notebook, with a text description, or a clear note where `dot` is missing.

Why a description: a drawing is the only place some facts appear (which node feeds which), and
a screen reader cannot read a picture. Every drawing shown with ``show_graph`` carries one
sentence that says what it shows (``describe(graph)``, or your own ``alt=``): as the ``alt`` of
the image in JupyterLab (whose SVG renderer puts the picture in an ``<img>`` without one, so the
drawing goes out as HTML), as the SVG's own ``<title>``, and as the plain-text form of the output.
"""
import html
import re
import shutil
import subprocess
import urllib.parse

import graphviz

INSTALL_HINT = ("Graphviz's `dot` program is not installed, so the drawing cannot be rendered. "
                "Install it (Debian/Ubuntu: `sudo apt-get install graphviz`; conda: "
                "`conda install -c conda-forge graphviz`; macOS: `brew install graphviz`), then re-run "
                "this cell. Meanwhile, here is the graph as text:")

_ID = r'"(?:[^"\\]|\\.)*"|[^\s\[\];,"=-][^\s\[\];,"=]*'
_EDGE = re.compile(rf"^\s*({_ID})(?::\S+)?\s*->\s*({_ID})(?::\S+)?\s*(\[.*\])?\s*;?\s*$", re.S)
_NODE = re.compile(rf"^\s*({_ID})\s*(\[.*\])?\s*;?\s*$", re.S)
_LABEL = re.compile(r'\blabel\s*=\s*("(?:[^"\\]|\\.)*"|<.*>|[^\s,\]]+)', re.S)
_NOT_NODES = ("graph", "node", "edge", "subgraph", "digraph", "strict", "{", "}", "//", "#")
LISTED = 3  # end points named in a description; the rest are counted


def dot_available() -> bool:
    return shutil.which("dot") is not None


def _unquote(name):
    return name[1:-1].replace('\\"', '"') if name.startswith('"') else name


def _label_text(attrs, name):
    """A node's label as plain words: record fields and line breaks become commas."""
    m = _LABEL.search(attrs or "")
    if not m:
        return name
    text = _unquote(m.group(1))
    text = re.sub(r"<[^>]*>", " ", text) if m.group(1).startswith("<") else text
    text = re.sub(r"\\[nlr]|[{}|]", ", ", text)
    text = ", ".join(part.strip() for part in text.split(",") if part.strip())
    return text or name


def graph_parts(graph: graphviz.Digraph):
    """({node: label text}, [(tail, head), ...]) read from the graph's DOT statements."""
    labels, edges = {}, []
    for line in graph.body:
        for statement in line.strip().split("\n"):
            if not statement.strip() or statement.strip().startswith(_NOT_NODES):
                continue
            m = _EDGE.match(statement)
            if m:
                tail, head = _unquote(m.group(1)), _unquote(m.group(2))
                edges.append((tail, head))
                labels.setdefault(tail, tail)
                labels.setdefault(head, head)
                continue
            m = _NODE.match(statement)
            if m:
                name = _unquote(m.group(1))
                labels[name] = _label_text(m.group(2), name)
    return labels, edges


def _named(names, labels):
    shown = [f"'{labels[n]}'" for n in names[:LISTED]]
    if len(names) > LISTED:
        shown.append(f"{len(names) - LISTED} more")
    return ", ".join(shown[:-1]) + (" and " if len(shown) > 1 else "") + shown[-1] if shown else "nowhere"


def describe(graph: graphviz.Digraph) -> str:
    """One sentence on what a drawing shows: its size, direction, and where its arrows start and end."""
    labels, edges = graph_parts(graph)
    if not labels:
        return "An empty graph drawing."
    tails, heads = {t for t, _ in edges}, {h for _, h in edges}
    starts = [n for n in labels if n in tails and n not in heads]
    ends = [n for n in labels if n in heads and n not in tails]
    rankdir = re.search(r"rankdir\s*=\s*\"?(\w+)", graph.source)
    direction = {"LR": "left to right", "RL": "right to left", "BT": "bottom to top"}.get(
        rankdir.group(1).upper() if rankdir else "TB", "top to bottom")
    nodes = f"{len(labels)} node{'s' * (len(labels) != 1)}"
    arrows = f"{len(edges)} arrow{'s' * (len(edges) != 1)}"
    if not edges:
        return f"A graph drawing of {nodes} and no arrows: {_named(list(labels), labels)}."
    return (f"A graph drawing of {nodes} and {arrows}, drawn {direction}; the arrows start at "
            f"{_named(starts, labels)} and end at {_named(ends, labels)}.")


def accessible_svg(svg: str, alt: str) -> str:
    """The SVG with ``alt`` as its ``<title>`` (its accessible name) and ``role="img"``."""
    escaped = html.escape(" ".join(alt.split()), quote=True)
    return re.sub(r"(<svg\b[^>]*?)(/?)>", rf'\1 role="img" aria-label="{escaped}"\2><title>{escaped}</title>',
                  svg, count=1)


class DescribedGraph:
    """A drawing that carries its description; otherwise it behaves like the graphviz graph it wraps."""

    def __init__(self, graph: graphviz.Digraph, alt: str):
        self.graph, self.alt = graph, alt

    def __getattr__(self, name):  # .source, .render(), .pipe(), ... of the graph itself
        return getattr(self.graph, name)

    def _repr_image_svg_xml(self):
        return accessible_svg(self.graph.pipe(format="svg", encoding="utf-8"), self.alt)

    def _repr_mimebundle_(self, include=None, exclude=None):
        try:
            svg = self._repr_image_svg_xml()
        except (graphviz.ExecutableNotFound, graphviz.CalledProcessError, subprocess.CalledProcessError) as err:
            return {"text/plain": f"dot could not draw this graph ({err}). Its DOT text:\n{self.graph.source}"}
        # percent-encoded as JupyterLab's own SVG renderer does, so the source stays readable from the page
        img = f'<img src="data:image/svg+xml,{urllib.parse.quote(svg)}" alt="{html.escape(self.alt, quote=True)}"/>'
        return {"text/html": img, "image/svg+xml": svg, "text/plain": self.alt}

    def __repr__(self):
        return self.alt


class MissingDot:
    """Stands in for a drawing: Jupyter shows the hint, what the drawing shows, and the graph's DOT text."""

    def __init__(self, graph: graphviz.Digraph, alt: str = ""):
        self.source = graph.source
        self.alt = alt or describe(graph)

    def _repr_markdown_(self):
        return f"{INSTALL_HINT}\n\n{self.alt}\n\n```dot\n{self.source}```"

    def __repr__(self):
        return f"{INSTALL_HINT}\n{self.alt}\n{self.source}"


def show_graph(graph: graphviz.Digraph, alt: str = ""):
    """The drawing with its description (``alt``, else ``describe(graph)``) where `dot` can render it,
    else a `MissingDot` note (never an exception)."""
    alt = " ".join((alt or describe(graph)).split())
    return DescribedGraph(graph, alt) if dot_available() else MissingDot(graph, alt)
