"""The check of a learner's `draw_dot(root)`: what the drawing says, read back from its DOT text.

The graphs are the grader's own (`GraphNode`s with made-up data and grads, distinct at two
decimals), so the check needs no engine and no reference drawing: it reads the learner's Digraph
with the course's DOT parser (`autograder.learner.dot`) and asks whether every node appears once
with its data and grad, every op appears, every input is linked to its result, and no arrow is
drawn twice. Graphs where nodes are reused level after level (a ladder, `v = v * c + v`) catch a
walk without a set of the nodes already drawn: such a walk redraws a reused node's arrows, and its
number of visits doubles with every level. Reading a node's `_prev` counts against a budget shared
by the graph's nodes, so that walk is stopped after a few thousand reads with a message, long
before it could time out the cell, on every machine and in every grading mode.
"""
import collections
import random
import re

import graphviz

from autograder.checks import GradingError
from autograder.checks.nb02_micrograd import drivers
from autograder.checks.nb02_micrograd.snapshots import reachable_nodes
from autograder.learner.dot import parse_dot

READS_PER_NODE = 10  # a correct walk reads each node's _prev once or twice; this leaves room to spare
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


class WalkedTooFar(BaseException):
    """Raised inside a learner's draw_dot once it has read the graph's `_prev` more often than its
    budget allows (a BaseException, so that a bare `except Exception` in the learner's code does not
    swallow it)."""

    def __init__(self, reads):
        super().__init__(reads)
        self.reads = reads


class WalkBudget:
    """How many times the nodes of one graph may have their `_prev` read, all together."""

    def __init__(self, limit):
        self.limit, self.reads = limit, 0

    def read(self):
        self.reads += 1
        if self.reads > self.limit:
            raise WalkedTooFar(self.reads)


class GraphNode:
    """A bare node with what a drawing needs (data, grad, _prev, _op, label), for grading draw_dot
    independently of the learner's Value. Reading `_prev` spends the graph's walk budget, when
    check_drawing has given it one; the grader itself reads `inputs`."""

    def __init__(self, data, grad, children=(), op="", label=""):
        self.data, self.grad, self.inputs, self._op, self.label = data, grad, set(children), op, label
        self.budget = None
        self._backward = lambda: None

    @property
    def _prev(self):
        if self.budget is not None:
            self.budget.read()
        return self.inputs

    def __repr__(self):
        return f"GraphNode(data={self.data}, grad={self.grad}, _op={self._op!r})"


def graph_nodes(root):
    """Every GraphNode reachable from `root`, each once (the grader's walk: no budget spent)."""
    return reachable_nodes(root, lambda node: list(node.inputs))[0]


def value_graphs(seed):
    """[(root, description)]: GraphNode graphs with data and grad distinct at two decimals — a single
    leaf, a node used twice, a diamond, a random DAG of about 30 nodes, and two ladders
    v = v * c + v (every v used twice): 4 levels, and 30 levels (over a billion paths from the root
    to the first v)."""
    rng = random.Random(seed)
    numbers = iter(rng.sample(range(-2000, 2001), 800))

    def num():
        value = next(numbers)
        while abs(value) < 15:  # away from 0, 0.1 and the like
            value = next(numbers)
        return value / 100

    def node(children=(), op=""):
        return GraphNode(num(), num(), children, op)

    def ladder(levels):
        v = node()
        for _ in range(levels):
            v = node([node([v, node()], "*"), v], "+")
        return v

    graphs = [(node(), "a single leaf")]
    a = node()
    graphs.append((node([a], "+"), "b = a + a (a used twice)"))
    a, b = node(), node()
    graphs.append((node([node([a, b], "*"), node([a], "**2")], "+"), "a diamond, a * b + a ** 2"))
    made = [node() for _ in range(4)]
    for _ in range(26):
        op = rng.choice(["+", "*", "ReLU", "tanh", "**2"])
        children = rng.sample(made, 2) if op in ("+", "*") else [rng.choice(made[-6:])]
        made.append(node(children, op))
    used = {id(c) for n in made for c in n.inputs}
    graphs.append((node([n for n in made if id(n) not in used], "+"), "a random graph of 31 nodes"))
    graphs.append((ladder(4), "v = v * c + v, 4 times (every v used twice)"))
    graphs.append((ladder(30), "v = v * c + v, 30 times (every v used twice)"))
    return graphs


def run_drawing(exercise, draw_dot, root, what):
    """Driver: draw_dot(root); {"type": the type name of what it returned, "body": the Digraph's
    statement lines (only when it is a graphviz.Digraph)}, or {"walked": how many reads of `_prev`
    it had made when its walk budget ran out}."""
    try:
        drawing = drivers.learner_step(exercise, lambda: draw_dot(root), what=f"draw_dot(root) for {what}")
    except WalkedTooFar as stop:
        return {"walked": stop.reads}

    def read():
        if not isinstance(drawing, graphviz.Digraph):
            return {"type": type(drawing).__name__}
        return {"type": type(drawing).__name__, "body": [str(line) for line in drawing.body]}

    return drivers.learner_step(exercise, read, what="reading the drawing")


def _shows(label, value):
    """Whether a label shows `value`, to the two decimals a drawing may round it to."""
    numbers = [float(t) for t in _NUMBER.findall(label or "")]
    return any(abs(n - value) <= 0.006 + 1e-3 * abs(value) for n in numbers)


def _drawn_lines(exercise, drawing, nodes, what):
    """The Digraph's statement lines from run_drawing's answer, or the failure it stands for."""
    if isinstance(drawing, dict) and isinstance(drawing.get("walked"), int):
        raise GradingError(
            f"{exercise}: draw_dot(root) for {what} ({len(nodes)} nodes) had read the nodes' `_prev` "
            f"{drawing['walked']:,} times when it was stopped: it walks a node again every time it reaches it "
            "along another path, and here the number of paths doubles with every level. Keep a set of the "
            "nodes already drawn and visit each node once.")
    if not isinstance(drawing, dict) or "body" not in drawing:
        got = drawing.get("type") if isinstance(drawing, dict) else type(drawing).__name__
        raise GradingError(f"{exercise}: draw_dot(root) should return a graphviz.Digraph, got {got}")
    body = drawing["body"]
    if not isinstance(body, (list, tuple)) or not all(isinstance(line, str) for line in body):
        raise GradingError(f"{exercise}: no readable answer came back from your notebook (the drawing)")
    return body


def check_drawing(exercise, draw_dot, root, *, what):
    """draw_dot(root) must return a graphviz.Digraph that draws every node of the graph exactly once
    with its data and its grad, every op, an edge path from each node to each node it feeds, and no
    arrow twice, walking the graph without visiting a node again for each path that reaches it."""
    nodes = graph_nodes(root)
    budget = WalkBudget(READS_PER_NODE * len(nodes) + 100)
    for n in nodes:
        n.budget = budget
    try:
        drawing = drivers.drive(exercise, run_drawing, exercise, draw_dot, root, what)
    finally:
        for n in nodes:
            n.budget = None
    labels, edges = parse_dot(_drawn_lines(exercise, drawing, nodes, what))
    drawn = {}
    for n in nodes:
        matches = [name for name, label in labels.items() if _shows(label, n.data) and _shows(label, n.grad)]
        if not matches:
            raise GradingError(f"{exercise}: in the drawing of {what}, no node shows data {n.data} and grad {n.grad} "
                               f"(the node {n!r}): every Value must appear with its data and its grad in its label")
        if len(matches) > 1:
            raise GradingError(f"{exercise}: in the drawing of {what}, the node with data {n.data} and grad {n.grad} "
                               f"is drawn {len(matches)} times: draw each Value once, even when it is used twice "
                               "(keep a set of the nodes already drawn)")
        drawn[id(n)] = matches[0]
    every_label = " ".join(label or "" for label in labels.values())
    for n in nodes:
        if n._op and n._op not in every_label:
            raise GradingError(f"{exercise}: in the drawing of {what}, the op {n._op!r} (which made the node with data "
                               f"{n.data}) does not appear: label each result with the op that made it")
    repeated = [(edge, count) for edge, count in collections.Counter(edges).items() if count > 1]
    if repeated:
        (tail, head), count = repeated[0]
        raise GradingError(f"{exercise}: in the drawing of {what}, the arrow from {labels.get(tail) or tail!r} to "
                           f"{labels.get(head) or head!r} is drawn {count} times: a node reached along two paths "
                           "was drawn, with its arrows, once per path. Keep a set of the nodes already drawn and "
                           "visit each node once.")
    linked = {}
    for tail, head in edges:
        linked.setdefault(tail, set()).add(head)
        linked.setdefault(head, set()).add(tail)
    value_names = set(drawn.values())
    for n in nodes:
        for child in n.inputs:
            a, b = drawn[id(child)], drawn[id(n)]
            near = linked.get(a, set())
            if b not in near and not any(b in linked.get(m, set()) for m in near if m not in value_names):
                raise GradingError(f"{exercise}: in the drawing of {what}, the node with data {child.data} feeds "
                                   f"the one with data {n.data} (through {n._op!r}), but no edge (or edge through an "
                                   "op node) connects them")
