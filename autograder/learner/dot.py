"""Read the nodes, labels and arrows back out of a graphviz drawing: the course's one DOT parser.

Why a parser: a drawing is graded, and described to screen readers, from what it says, not from
how it was built. `graphviz.Digraph` keeps its statements as DOT text (`graph.body`), and a
learner's `draw_dot` may name nodes, quote them, add ports, put several statements on a line or
use HTML labels. This module tokenizes DOT (quoted strings, nested `<...>` labels, comments) and
reads the statements that matter here: node statements with their labels and edge statements,
chains `a -> b -> c` included; attribute statements (`graph [...]`, `rankdir=LR`) are skipped
and subgraphs are read as if their statements stood outside them. Both the drawing's description
(`autograder.learner.drawing`) and the grading of `draw_dot` (`autograder.checks.nb02_micrograd`)
use it.
"""
import re

import graphviz

_TOKEN = re.compile(r"""
      (?P<space>\s+|//[^\n]*|\#[^\n]*|/\*.*?\*/)
    | (?P<quoted>"(?:[^"\\]|\\.)*")
    | (?P<arrow>->|--)
    | (?P<punct>[\[\]{};,=:])
    | (?P<html><)
    | (?P<id>[A-Za-z_\x80-\uffff][\w\x80-\uffff]*|-?(?:\.\d+|\d+(?:\.\d*)?))
    """, re.S | re.X)
_KEYWORDS = {"graph", "node", "edge", "digraph", "subgraph", "strict"}


def _html_end(text, start):
    """The index just past the `>` that closes the HTML string opening at text[start]."""
    depth = 0
    for k in range(start, len(text)):
        depth += {"<": 1, ">": -1}.get(text[k], 0)
        if depth == 0:
            return k + 1
    return len(text)


def _tokens(text):
    """(kind, text) pairs: 'id' (names, numbers, quoted and HTML strings), 'arrow', 'punct'."""
    tokens, k = [], 0
    while k < len(text):
        m = _TOKEN.match(text, k)
        if m is None:  # not DOT: skip the character, as graphviz would refuse it anyway
            k += 1
            continue
        kind = m.lastgroup
        if kind == "html":
            end = _html_end(text, k)
            tokens.append(("id", text[k:end]))
            k = end
            continue
        if kind != "space":
            tokens.append(("id" if kind == "quoted" else kind, m.group()))
        k = m.end()
    return tokens


def _unquoted(token):
    return token[1:-1].replace('\\"', '"') if token.startswith('"') else token


def label_words(raw):
    """A label as plain words: HTML tags dropped, record fields and line breaks made commas."""
    if raw.startswith("<"):
        text = re.sub(r"<[^>]*>", " ", raw[1:-1])
    else:
        text = re.sub(r"\\[nlr]|(?<!\\)[{}|]", ", ", _unquoted(raw))
    return ", ".join(" ".join(part.split()) for part in text.split(",") if part.strip())


def _attributes(tokens, k):
    """({name: raw value}, index after) for the `[...]` lists starting at tokens[k] (maybe none)."""
    attrs = {}
    while k < len(tokens) and tokens[k] == ("punct", "["):
        k += 1
        while k < len(tokens) and tokens[k] != ("punct", "]"):
            if (tokens[k][0] == "id" and k + 2 < len(tokens) and tokens[k + 1] == ("punct", "=")
                    and tokens[k + 2][0] == "id"):
                attrs[_unquoted(tokens[k][1])] = tokens[k + 2][1]
                k += 3
            else:
                k += 1
        k += 1
    return attrs, k


def _node_id(tokens, k):
    """(node name, index after) for a node id at tokens[k], its port (`:port`, `:port:compass`) skipped."""
    name = _unquoted(tokens[k][1])
    k += 1
    while k + 1 < len(tokens) and tokens[k] == ("punct", ":") and tokens[k + 1][0] == "id":
        k += 2
    return name, k


def parse_dot(graph):
    """({node name: label as plain words, or None where it has no label}, [(tail, head), ...]) of a
    graphviz graph, or of the lines of its `body` (as a grading driver returns them). Edges keep
    their order and their repeats: an arrow drawn twice appears twice."""
    lines = graph.body if isinstance(graph, graphviz.Graph | graphviz.Digraph) else graph
    tokens = _tokens("\n".join(str(line) for line in lines))
    labels, edges, k = {}, [], 0
    while k < len(tokens):
        kind, text = tokens[k]
        if kind != "id":  # ; { } and stray punctuation between statements
            k += 1
            continue
        if text.lower() in _KEYWORDS:
            k += 1  # `node [...]`, `subgraph name {`: attribute lists are skipped below, subgraphs read through
            if k < len(tokens) and tokens[k][0] == "id" and text.lower() == "subgraph":
                k += 1
            _, k = _attributes(tokens, k)
            continue
        if k + 1 < len(tokens) and tokens[k + 1] == ("punct", "="):  # rankdir=LR
            k += 3
            continue
        chain = []
        name, k = _node_id(tokens, k)
        chain.append(name)
        while k + 1 < len(tokens) and tokens[k][0] == "arrow" and tokens[k + 1][0] == "id":
            name, k = _node_id(tokens, k + 1)
            chain.append(name)
        attrs, k = _attributes(tokens, k)
        for name in chain:
            labels.setdefault(name, None)
        if len(chain) == 1 and "label" in attrs:
            labels[chain[0]] = label_words(attrs["label"])
        edges.extend(zip(chain, chain[1:]))
    return labels, edges
