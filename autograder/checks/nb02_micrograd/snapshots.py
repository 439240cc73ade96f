"""Snapshots of a learner's graph: taken as plain data where the learner's engine runs, rebuilt in
the grader as `LearnerNode`s that a message can point at and a learner's own draw_dot can draw.

Taking a snapshot needs the nodes reachable from the root and what feeds what. The walk that
finds them (`reachable_nodes`) is a plain reachability walk, not a topological order: a node may
come before one of its users. That is deliberate: sorting the graph is part of the exercise
(`Value.backward`), so nothing here may do it for the learner. The checks order their comparisons
by the tape instead (`autograder.checks.nb02_micrograd.expressions`).
"""
from autograder.checks import GradingError
from autograder.checks.nb02_micrograd import values


class LearnerNode:
    """One node of the learner's graph as it came back from a driver: data, grad, _op, _prev."""

    def __init__(self, data, grad, op="", children=()):
        self.data, self.grad, self._op, self._prev, self.label = data, grad, op, tuple(children), ""
        self._backward = lambda: None

    def __repr__(self):
        return f"Value(data={self.data}, grad={self.grad}, _op={self._op!r})"


class GraphMismatch(GradingError):
    """A wrong value or gradient at one node of the learner's graph.

    `root`, `node` and `culprits` are `LearnerNode`s: a copy of the learner's graph as it was when
    the mismatch was found (data, grad, _op, _prev), so the learner can draw it with their own
    `draw_dot(mismatch.root, highlight=mismatch.node)`, anywhere."""

    def __init__(self, message, root, node, culprits=()):
        super().__init__(message)
        self.root, self.node, self.culprits = root, node, tuple(culprits)


# --- taken in the kernel --------------------------------------------------------------------------
def inputs_of(node, exercise):
    """The learner's `node._prev` as a list; a node without `_prev` is a readable failure."""
    prev = getattr(node, "_prev", None)
    if prev is None:
        raise GradingError(f"{exercise}: a node of your graph ({values.describe_node(node)}) has no `_prev`: "
                           "every Value must keep the Values it was made from in `_prev`")
    return list(prev)


def reachable_nodes(root, inputs):
    """(nodes, their inputs): every node reachable from `root` through `inputs(node)`, each once, root
    first, in the order a walk with an explicit stack finds them, and each one's list of inputs.

    A reachability walk, not a topological order (see the module's docstring); iterative, so it
    works on graphs of any depth. Each node's inputs are read once."""
    nodes, prevs, seen, stack = [], [], {id(root)}, [root]
    while stack:
        node = stack.pop()
        children = inputs(node)
        nodes.append(node)
        prevs.append(children)
        for child in children:
            if id(child) not in seen:
                seen.add(id(child))
                stack.append(child)
    return nodes, prevs


def tape_snapshot(mine):
    """Data of the nodes a replay made, in tape order: numeric data (None if not a number), every
    node's op, and [index, what it looks like] for each node without numeric data."""
    data = [values.number(getattr(node, "data", None)) for node in mine]
    return {"data": data, "op": [values.op_of(node) for node in mine],
            "text": [[i, values.text(node)] for i, (d, node) in enumerate(zip(data, mine)) if d is None]}


def graph_snapshot(mine, root, exercise):
    """The learner's graph from `root` as data, in the order `reachable_nodes` finds it (the root
    first): each node's data, grad, op, inputs (indices into that order) and tape index (None for a
    node the learner's engine made on its own); `where` maps tape indices to node indices and
    `tape_grad` holds every recorded node's grad, reachable or not."""
    nodes, prevs = reachable_nodes(root, lambda node: inputs_of(node, exercise))
    index = {id(n): k for k, n in enumerate(nodes)}
    position = {id(node): i for i, node in enumerate(mine)}
    return {"data": [values.number(getattr(n, "data", None)) for n in nodes],
            "grad": [values.number(getattr(n, "grad", None)) for n in nodes],
            "op": [values.op_of(n) for n in nodes],
            "prev": [[index[id(c)] for c in children] for children in prevs],
            "tape": [position.get(id(n)) for n in nodes],
            "where": [index.get(id(node)) for node in mine],
            "tape_grad": [values.number(getattr(node, "grad", None)) for node in mine]}


# --- read in the grader ---------------------------------------------------------------------------
def readable(exercise, what, read, *args):
    """read(*args); an answer that does not have the shape a driver gives is not graded."""
    try:
        return read(*args)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        raise GradingError(f"{exercise}: no readable answer came back from your notebook ({what})") from None


def _numbers(items, n=None):
    """A list of floats or None (n of them, if n is given) from a snapshot."""
    if not isinstance(items, list) or (n is not None and len(items) != n):
        raise ValueError("not a list of the right length")
    return [values.float_or_none(v) for v in items]


def _indices(items, n, bound):
    """A list of n indices below `bound`, or None, from a snapshot."""
    if not isinstance(items, list) or len(items) != n:
        raise ValueError("not a list of the right length")
    if any(k is not None and (type(k) is not int or not 0 <= k < bound) for k in items):
        raise IndexError("index out of range")
    return items


def _texts(items, n):
    if not isinstance(items, list) or len(items) != n:
        raise ValueError("not a list of the right length")
    return [str(v) for v in items]


def read_tape(packed, n):
    """(data, ops, texts) of the n tape nodes from a `tape_snapshot`."""
    texts = [""] * n
    for i, text in packed["text"]:
        texts[i] = str(text)
    return _numbers(packed["data"], n), _texts(packed["op"], n), texts


def read_graph(packed, n):
    """A `graph_snapshot` of a graph recorded on a tape of n nodes, checked."""
    data = _numbers(packed["data"])
    m = len(data)
    prev = packed["prev"]
    if not isinstance(prev, list) or len(prev) != m or m == 0:
        raise ValueError("not a list of the right length")
    return {"data": data, "grad": _numbers(packed["grad"], m), "op": _texts(packed["op"], m),
            "prev": [_indices(ks, len(ks) if isinstance(ks, list) else -1, m) for ks in prev],
            "tape": _indices(packed["tape"], m, n), "where": _indices(packed["where"], n, m),
            "tape_grad": _numbers(packed["tape_grad"], n)}


class Snapshot:
    """One snapshot of the learner's graph, in the grader, as LearnerNodes (the root first), with
    the node made for each tape index."""

    def __init__(self, graph, tape_data, tape_ops):
        graph = graph or {"data": [], "grad": [], "op": [], "prev": [], "where": [], "tape_grad": []}
        self.nodes = [LearnerNode(d, g, op) for d, g, op in zip(graph["data"], graph["grad"], graph["op"])]
        for node, prev in zip(self.nodes, graph["prev"]):
            node._prev = tuple(self.nodes[k] for k in prev)
        self.root = self.nodes[0] if self.nodes else None
        self.where, self.tape_grad = graph["where"], graph["tape_grad"]
        self.tape_data, self.tape_ops = tape_data, tape_ops

    def reached(self, i):
        """Whether tape node i can be reached from the root."""
        return i < len(self.where) and self.where[i] is not None

    def node(self, i):
        """The node for tape index i; one on its own if the walk from the root did not reach it."""
        if self.reached(i):
            return self.nodes[self.where[i]]
        grad = self.tape_grad[i] if i < len(self.tape_grad) else None
        return LearnerNode(self.tape_data[i], grad, self.tape_ops[i])
