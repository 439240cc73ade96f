import shutil

import graphviz
import pytest

from autograder import drawing


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


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed here")
def test_with_dot_the_graph_renders_to_svg():
    shown = drawing.show_graph(small_graph())
    assert "<svg" in shown._repr_image_svg_xml()
