"""Graph drawings: rendered with a text description (alt text), or a note and the DOT text without `dot`."""
import html
import re
import shutil
import urllib.parse

import graphviz
import pytest
import torch

from autograder.learner import drawing
from autograder.learner.autograd_graph import draw_autograd_graph
from autograder.learner.dot import parse_dot

needs_dot = pytest.mark.needs(shutil.which("dot") is not None, reason="Graphviz's dot is not installed here")


def small_graph():
    g = graphviz.Digraph()
    g.edge("x", "L")
    return g


def test_without_dot_a_note_replaces_the_drawing(monkeypatch):
    monkeypatch.setenv("PATH", "")
    shown = drawing.show_graph(small_graph())
    assert isinstance(shown, drawing.MissingDot)
    text = shown._repr_markdown_()
    assert "apt-get install graphviz" in text and "x -> L" in text
    assert drawing.describe(small_graph()) in text


def test_a_small_graph_is_described_in_one_sentence():
    assert drawing.describe(small_graph()) == (
        "A graph drawing of 2 nodes and 1 arrow, drawn top to bottom; the arrows start at 'x' and end at 'L'.")
    lonely = graphviz.Digraph()
    lonely.node("a", label="only me")
    assert drawing.describe(lonely) == "A graph drawing of 1 node and no arrows: 'only me'."
    assert drawing.describe(graphviz.Digraph()) == "An empty graph drawing."


def micrograd_drawing():
    """relu(a * b) drawn as notebook 02 draws it: a record per value, a node per op."""
    dot = graphviz.Digraph(graph_attr={"rankdir": "LR"})
    for name, data, grad in (("a", 2.0, -3.0), ("b", -3.0, 2.0), ("c", -6.0, 1.0), ("L", 0.0, 1.0)):
        dot.node(name, label=f"{{ data {data:.4f} | grad {grad:.4f} }}", shape="record")
    dot.node("c*", label="*")
    dot.node("Lrelu", label="relu")
    for tail, head in (("a", "c*"), ("b", "c*"), ("c*", "c"), ("c", "Lrelu"), ("Lrelu", "L")):
        dot.edge(tail, head)
    return dot


def test_the_micrograd_drawing_is_described_by_its_values():
    text = drawing.describe(micrograd_drawing())
    assert text.startswith("A graph drawing of 6 nodes and 5 arrows, drawn left to right;")
    assert "'data 2.0000, grad -3.0000'" in text and text.endswith("end at 'data 0.0000, grad 1.0000'.")


def test_the_parser_reads_quoted_names_ports_and_html_labels():
    dot = graphviz.Digraph()
    dot.node("140+", label="+")
    dot.node("140", label="{ data 2.5000 | grad -1.2500 }", shape="record")
    dot.node("n1", label="<<b>3.000</b><br/>grad 0.500>", shape="plaintext")
    dot.node("node1", label="a name that starts like a keyword")
    dot.edge("140+", "140")
    dot.edge("n1:f0", "140+")
    labels, edges = parse_dot(dot)
    assert labels == {"140+": "+", "140": "data 2.5000, grad -1.2500", "n1": "3.000 grad 0.500",
                      "node1": "a name that starts like a keyword"}
    assert edges == [("140+", "140"), ("n1", "140+")]


def test_the_parser_reads_raw_statements_and_keeps_repeated_arrows():
    lines = ['\ta -> b -> c [color=red]; d; e [label="say \\"x\\"\\nthen y"]\n',
             "\trankdir=LR\n\tnode [shape=box]\n\tgraph [rankdir=LR]\n",
             "\tsubgraph cluster_0 { z [label=zz] } // a comment\n", "\ta -> b\n"]
    labels, edges = parse_dot(lines)
    assert labels == {"a": None, "b": None, "c": None, "d": None, "e": 'say "x", then y', "z": "zz"}
    assert edges == [("a", "b"), ("b", "c"), ("a", "b")]


def test_the_autograd_drawing_is_described_by_its_nodes():
    x = torch.ones(3, requires_grad=True)
    graph = draw_autograd_graph((x * 2).sum(), names={"x": x})
    text = drawing.describe(graph)
    assert "start at 'SumBackward0'" in text and "end at 'AccumulateGrad, x 3'" in text


def test_many_end_points_are_counted_not_listed():
    g = graphviz.Digraph()
    for k in range(6):
        g.edge(f"in{k}", "out")
    assert "start at 'in0', 'in1', 'in2' and 3 more and end at 'out'" in drawing.describe(g)


@needs_dot
def test_with_dot_the_drawing_carries_its_description():
    shown = drawing.show_graph(small_graph())
    bundle = shown._repr_mimebundle_()
    alt = drawing.describe(small_graph())
    assert bundle["text/plain"] == alt and repr(shown) == alt
    # JupyterLab shows the HTML: an <img> whose alt is the description
    src = re.search(r'<img src="data:image/svg\+xml,([^"]+)" alt="([^"]*)"', bundle["text/html"])
    assert src and html.unescape(src.group(2)) == alt
    svg = urllib.parse.unquote(src.group(1))
    assert svg == bundle["image/svg+xml"] == shown._repr_image_svg_xml()
    assert re.search(r'<svg\b[^>]*role="img"[^>]*>\s*<title>', svg)
    assert f"<title>{html.escape(alt)}</title>" in svg
    assert shown.source == small_graph().source  # otherwise it is the graph


@needs_dot
def test_an_own_description_replaces_the_generated_one():
    shown = drawing.show_graph(small_graph(), alt='The loss "L" depends on x')
    assert 'alt="The loss &quot;L&quot; depends on x"' in shown._repr_mimebundle_()["text/html"]


@needs_dot
def test_a_graph_dot_cannot_draw_shows_its_text_instead():
    broken = graphviz.Digraph()
    broken.body.append("\tthis is { not dot\n")
    bundle = drawing.show_graph(broken)._repr_mimebundle_()
    assert list(bundle) == ["text/plain"] and "dot could not draw this graph" in bundle["text/plain"]


def test_an_autograd_graph_shows_nodes_saved_tensors_and_named_leaves():
    x = torch.randn(4, 3)
    W = torch.randn(2, 3, requires_grad=True)
    h = torch.tanh(x @ W.T)
    L = (h * h).mean()
    dot = draw_autograd_graph(L, names={"W": W})
    assert isinstance(dot, graphviz.Digraph)
    assert "TanhBackward0\\nsaved result: 4x2" in dot.source and "W 2x3" in dot.source
    L.backward()
    assert "freed" in draw_autograd_graph(L).source
    assert "nothing recorded" in draw_autograd_graph(W).source
