"""Grading helpers for scalar autograd engines: notebook 02's `Value`, `MLP` and `draw_dot`.

Why a module of its own: a scalar engine cannot be graded by comparing two tensors. The helpers
here write an expression once, on symbolic stand-ins (`Expr`) that only record the steps, then
replay those steps twice: with the learner's `Value` and with PyTorch 0-d float64 tensors. Every
recorded node then has a reference value and a reference gradient, and the learner's graph is
walked (iteratively, with an explicit stack) in the order a reverse pass visits it, from the root.
The first node whose gradient differs from PyTorch's is reported with its op, its inputs and the
contribution each of its users should have sent, so the message points at the local derivative
that is wrong. The failure keeps the graph: `last_mismatch.draw()` draws it with that node in red.

Drivers and verdicts are kept apart, so that trusted grading (autograder/grader/trusted.py) works: the
learner's objects are touched only by DRIVERS (the `_run_*` functions), which each check runs
through `checks.call_student` (`_drive`). A driver builds the graph, runs backward() and the
like in the learner's kernel and returns plain data: per node its data, grad, op and inputs (a
snapshot of the learner's graph), the MLP's parameters and gradients as lists of floats, the
lines of draw_dot's Digraph. The check then compares that data with PyTorch where the learner's
code cannot reach (in the grader's process under trusted grading). Inside a driver every step
of the learner's code runs through `run_student` (its own time limit, no stderr, readable
errors, `RecursionError` explained); a step that fails after some data was gathered is
returned as an "error" so that the checks still report what went wrong first, as before. All
random draws come from seeded `random.Random` instances, so every grade is reproducible.
"""
import contextlib
import gc
import json
import math
import random
import re

import graphviz
import torch

from autograder import checks
from autograder.checks import GradingError
from autograder.learner.device import get_device

RTOL, ATOL = checks.TOLERANCES[torch.float64]
MAX_DRAWN_NODES = 150  # GraphMismatch.draw() shows at most this many nodes around the culprit

last_mismatch = None  # the GraphMismatch raised most recently, kept so a learner can draw it


class GraphMismatch(GradingError):
    """A wrong value or gradient at one node of the learner's graph; `draw()` shows where.

    `root`, `node` and `culprits` are `LearnerNode`s: a copy of the learner's graph as it was
    when the mismatch was found (data, grad, _op, _prev), so it can be drawn anywhere."""

    def __init__(self, message, root, node, culprits=()):
        super().__init__(message)
        self.root, self.node, self.culprits = root, node, tuple(culprits)

    def draw(self):
        """The learner's graph as a graphviz.Digraph: the wrong node red, the suspect ops orange."""
        root = self.root if self.root is not None else self.node  # a graph that could not be walked
        return draw_graph(root, highlight=self.node, suspects=self.culprits)


class LearnerNode:
    """One node of the learner's graph as it came back from a driver: data, grad, _op, _prev."""

    def __init__(self, data, grad, op="", children=()):
        self.data, self.grad, self._op, self._prev, self.label = data, grad, op, tuple(children), ""
        self._backward = lambda: None

    def __repr__(self):
        return f"Value(data={self.data}, grad={self.grad}, _op={self._op!r})"


# --- symbolic expressions ------------------------------------------------------------------------
_APPLY = {
    "+": lambda x, y: x + y,
    "-": lambda x, y: x - y,
    "*": lambda x, y: x * y,
    "/": lambda x, y: x / y,
    "**": lambda x, y: x ** y,
    "neg": lambda x: -x,
    "relu": lambda x: x.relu(),
    "tanh": lambda x: x.tanh(),
    "exp": lambda x: x.exp(),
    "log": lambda x: x.log(),
}
_INFIX = {"+", "-", "*", "/", "**"}


class Tape:
    """The recorded steps of one expression: ("leaf", value) or (op, operand, ...), in order."""

    def __init__(self):
        self.steps, self.names = [], []

    def leaf(self, value, name=None):
        return self._add(("leaf", float(value)), name)

    def _add(self, step, name=None):
        self.steps.append(step)
        self.names.append(name or f"n{len(self.steps) - 1}")
        return Expr(self, len(self.steps) - 1)

    def formula(self, i):
        """'n4 = n2 * a' (or 'a' for a leaf): how node i was made, one level deep."""
        op, *args = self.steps[i]
        if op == "leaf":
            return self.names[i]
        shown = [self.names[a.index] if isinstance(a, Expr) else repr(a) for a in args]
        if op in _INFIX:
            text = f"{shown[0]} {op} {shown[1]}"
        elif op == "neg":
            text = f"-{shown[0]}"
        else:
            text = f"{shown[0]}.{op}()"
        return f"{self.names[i]} = {text}"

    def expression(self, i, limit=90):
        """Node i written out in full, e.g. '(a * b + c) * a'; None when longer than `limit`."""
        texts = []
        for op, *args in self.steps:
            if op == "leaf":
                texts.append(self.names[len(texts)])
                continue
            shown = [texts[a.index] if isinstance(a, Expr) else repr(a) for a in args]
            if op in _INFIX:
                shown = [f"({t})" if " " in t else t for t in shown]
                texts.append(f"{shown[0]} {op} {shown[1]}")
            elif op == "neg":
                texts.append(f"-({shown[0]})" if " " in shown[0] else f"-{shown[0]}")
            else:
                texts.append(f"({shown[0]}).{op}()" if " " in shown[0] else f"{shown[0]}.{op}()")
            if len(texts[-1]) > 4 * limit:
                texts[-1] = self.names[len(texts) - 1]
        return texts[i] if len(texts[i]) <= limit else None

    def describe(self, i):
        """'n3 = n2 + a, that is (a * b) + a' when the whole expression is short enough."""
        full = self.expression(i)
        formula = self.formula(i)
        return formula if full is None or full == formula.split(" = ")[-1] else f"{formula}, that is {full}"

    def replay(self, make_leaf):
        """Every node, computed by the engine whose leaves `make_leaf(value)` creates."""
        nodes = []
        for op, *args in self.steps:
            if op == "leaf":
                nodes.append(make_leaf(args[0]))
            else:
                nodes.append(_APPLY[op](*[nodes[a.index] if isinstance(a, Expr) else a for a in args]))
        return nodes

    def users(self, i):
        """Indices of the nodes that take node i as an operand (once each)."""
        return [j for j, (op, *args) in enumerate(self.steps)
                if op != "leaf" and any(isinstance(a, Expr) and a.index == i for a in args)]


class Expr:
    """A symbolic scalar: arithmetic on it records a step on its tape instead of computing."""

    __slots__ = ("tape", "index")

    def __init__(self, tape, index):
        self.tape, self.index = tape, index

    def _op(self, op, *args):
        return self.tape._add((op, *args))

    def __add__(self, other): return self._op("+", self, other)
    def __radd__(self, other): return self._op("+", other, self)
    def __sub__(self, other): return self._op("-", self, other)
    def __rsub__(self, other): return self._op("-", other, self)
    def __mul__(self, other): return self._op("*", self, other)
    def __rmul__(self, other): return self._op("*", other, self)
    def __truediv__(self, other): return self._op("/", self, other)
    def __rtruediv__(self, other): return self._op("/", other, self)
    def __pow__(self, exponent): return self._op("**", self, exponent)
    def __neg__(self): return self._op("neg", self)
    def relu(self): return self._op("relu", self)
    def tanh(self): return self._op("tanh", self)
    def exp(self): return self._op("exp", self)
    def log(self): return self._op("log", self)


def record(build, leaf_values, names=None):
    """Run `build(*leaves)` on symbolic leaves; return (tape, index of the root)."""
    tape = Tape()
    names = list(names) if names else [chr(ord("a") + i) if i < 26 else f"x{i}" for i in range(len(leaf_values))]
    leaves = [tape.leaf(v, n) for v, n in zip(leaf_values, names)]
    root = build(*leaves)
    if not isinstance(root, Expr):
        raise TypeError("build must return an expression of its arguments")
    return tape, root.index


# --- calling the learner's engine ----------------------------------------------------------------
class _RecursionReport(GradingError):
    """A RecursionError in the learner's code, explained; its message is complete as it is."""


def run_student(exercise, fn, *, what, time_limit=20.0):
    """checks.call_student for a zero-argument step of the learner's engine, with `what` it does.

    Meant for drivers (it runs where the learner's objects live); a `RecursionError` becomes a
    GradingError that says how to walk a graph without recursion."""
    def guarded():
        with checks.recursion_headroom():
            try:
                return fn()
            except RecursionError as err:
                raise _RecursionReport(
                    f"{exercise}: {what} raised RecursionError ({err}). A graph can be far deeper than Python's "
                    "recursion limit (a chain of 100,000 nodes is); walk it with a loop and an explicit stack "
                    "instead of a function that calls itself.") from None

    try:
        return checks.call_student(exercise, guarded, names=[], time_limit=time_limit)
    except _RecursionReport as err:
        raise GradingError(str(err)) from None
    except GradingError as err:
        raise GradingError(f"{err}\n  (while running: {what})") from None


def _drive(exercise, driver, *args):
    """Run a driver (a `_run_*` function of this module) on the learner's names through
    checks.call_student: in the learner's kernel under trusted grading, right here otherwise.
    Only the data it returns comes back. No overall time limit: each step inside has its own."""
    return checks.call_student(exercise, driver, *args, names=[], time_limit=None)


def _part(exercise, run, key):
    """run[key] from a driver's answer; if the driver stopped before it, the error that stopped it."""
    if isinstance(run, dict) and key in run:
        return run[key]
    if isinstance(run, dict) and isinstance(run.get("error"), str):
        raise GradingError(run["error"])
    raise GradingError(f"{exercise}: no readable answer came back from your notebook (no {key})")


def _sized(exercise, values, n, what):
    """A list of n items from a driver, or a GradingError (so that no comparison is silently skipped)."""
    if not isinstance(values, (list, tuple)) or len(values) != n:
        raise GradingError(f"{exercise}: no readable answer came back from your notebook ({what})")
    return list(values)


@contextlib.contextmanager
def _automatic_collection_off():
    """Pause Python's automatic cycle collection (it would rescan a growing graph again and again)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _number(x):
    """A learner's data or grad as a float, or None if it is not a number."""
    if isinstance(x, bool) or isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, torch.Tensor) and x.numel() == 1:
        return float(x.item())
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def _float_or_none(x):
    """A number from a driver's answer (None stays None; anything else is not a number)."""
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _text(x, limit=200):
    """repr(x), shortened, never raising: how a learner's object is shown in a message."""
    try:
        text = repr(x)
    except Exception:  # a broken __repr__ must not hide the real problem
        text = f"<{type(x).__name__} object>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _op_of(node):
    """A node's `_op` as text ('?' when it has none)."""
    op = getattr(node, "_op", "?")
    return op if isinstance(op, str) else _text(op, 60)


def _close(got, expected):
    if got is None:
        return False
    if math.isnan(expected):
        return math.isnan(got)
    return abs(got - expected) <= ATOL + RTOL * abs(expected)


def _fmt(x):
    return "None" if x is None else f"{x:.10g}"


def topological_order(root, exercise="Value"):
    """Every node reachable from `root` through `_prev`, each after all of its inputs.

    Iterative (explicit stack), so it works on graphs of any depth; the root comes last.
    """
    def inputs_of(node):
        prev = getattr(node, "_prev", None)
        if prev is None:
            raise GradingError(f"{exercise}: a node of your graph ({_describe(node)}) has no `_prev`: "
                               "every Value must keep the Values it was made from in `_prev`")
        return iter(prev)

    order, visited, stack = [], {id(root)}, [(root, inputs_of(root))]
    while stack:
        node, pending = stack[-1]
        for child in pending:
            if id(child) not in visited:
                visited.add(id(child))
                stack.append((child, inputs_of(child)))
                break
        else:
            stack.pop()
            order.append(node)
    return order


def _describe(node):
    data, grad = getattr(node, "data", "?"), getattr(node, "grad", "?")
    return f"{type(node).__name__}(data={data!r}, grad={grad!r}, _op={getattr(node, '_op', '?')!r})"


# --- snapshots of the learner's graph (taken in the kernel) ---------------------------------------
def _tape_nodes(mine):
    """Data of the nodes a replay made, in tape order: numeric data (None if not a number), every
    node's op, and [index, what it looks like] for each node without numeric data."""
    data = [_number(getattr(node, "data", None)) for node in mine]
    return {"data": data, "op": [_op_of(node) for node in mine],
            "text": [[i, _text(node)] for i, (d, node) in enumerate(zip(data, mine)) if d is None]}


def _graph_nodes(mine, root, exercise):
    """The learner's graph from `root` as data, in the order topological_order walks it (the root
    last): each node's data, grad, op, inputs (indices into that order) and tape index (None for a
    node the learner's engine made on its own); `where` maps tape indices to walk indices and
    `tape_grad` holds every recorded node's grad, reachable or not."""
    order = topological_order(root, exercise)
    index = {id(n): k for k, n in enumerate(order)}
    position = {id(node): i for i, node in enumerate(mine)}
    return {"data": [_number(getattr(n, "data", None)) for n in order],
            "grad": [_number(getattr(n, "grad", None)) for n in order],
            "op": [_op_of(n) for n in order],
            "prev": [[index[id(c)] for c in n._prev] for n in order],
            "tape": [position.get(id(n)) for n in order],
            "where": [index.get(id(node)) for node in mine],
            "tape_grad": [_number(getattr(node, "grad", None)) for node in mine]}


# --- reading snapshots (in the grader) ------------------------------------------------------------
def _readable(exercise, what, read, *args):
    """read(*args); an answer that does not have the shape a driver gives is not graded."""
    try:
        return read(*args)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        raise GradingError(f"{exercise}: no readable answer came back from your notebook ({what})") from None


def _numbers(values, n=None):
    """A list of floats or None (n of them, if n is given) from a snapshot."""
    if not isinstance(values, list) or (n is not None and len(values) != n):
        raise ValueError("not a list of the right length")
    return [_float_or_none(v) for v in values]


def _indices(values, n, bound):
    """A list of n indices below `bound`, or None, from a snapshot."""
    if not isinstance(values, list) or len(values) != n:
        raise ValueError("not a list of the right length")
    if any(k is not None and (type(k) is not int or not 0 <= k < bound) for k in values):
        raise IndexError("index out of range")
    return values


def _texts(values, n):
    if not isinstance(values, list) or len(values) != n:
        raise ValueError("not a list of the right length")
    return [str(v) for v in values]


def _read_tape(packed, n):
    """(data, ops, texts) of the n tape nodes from a `_tape_nodes` snapshot."""
    texts = [""] * n
    for i, text in packed["text"]:
        texts[i] = str(text)
    return _numbers(packed["data"], n), _texts(packed["op"], n), texts


def _read_graph(packed, n):
    """A `_graph_nodes` snapshot of a graph recorded on a tape of n nodes, checked."""
    data = _numbers(packed["data"])
    m = len(data)
    prev = packed["prev"]
    if not isinstance(prev, list) or len(prev) != m:
        raise ValueError("not a list of the right length")
    return {"data": data, "grad": _numbers(packed["grad"], m), "op": _texts(packed["op"], m),
            "prev": [_indices(ks, len(ks) if isinstance(ks, list) else -1, m) for ks in prev],
            "tape": _indices(packed["tape"], m, n), "where": _indices(packed["where"], n, m),
            "tape_grad": _numbers(packed["tape_grad"], n)}


def _learner_graph(graph):
    """LearnerNodes rebuilt from a snapshot read by `_read_graph`, in walk order (the root last)."""
    nodes = [LearnerNode(d, g, op) for d, g, op in zip(graph["data"], graph["grad"], graph["op"])]
    for node, prev in zip(nodes, graph["prev"]):
        node._prev = tuple(nodes[k] for k in prev)
    return nodes


class _Snapshot:
    """One snapshot of the learner's graph, in the grader: the node made for each tape index."""

    def __init__(self, graph, tape_data, tape_ops):
        self.nodes = _learner_graph(graph) if graph else []
        self.root = self.nodes[-1] if self.nodes else None
        self.tape = graph["tape"] if graph else []
        self.where = graph["where"] if graph else []
        self.tape_grad = graph["tape_grad"] if graph else []
        self.tape_data, self.tape_ops = tape_data, tape_ops

    def node(self, i):
        """The node for tape index i; one on its own if the walk from the root did not reach it."""
        k = self.where[i] if i < len(self.where) else None
        if k is not None:
            return self.nodes[k]
        grad = self.tape_grad[i] if i < len(self.tape_grad) else None
        return LearnerNode(self.tape_data[i], grad, self.tape_ops[i])


# --- comparing one expression --------------------------------------------------------------------
def _torch_replay(tape, device):
    nodes = tape.replay(lambda v: torch.tensor(v, dtype=torch.float64, device=device, requires_grad=True))
    for t in nodes:
        if not t.is_leaf:
            t.retain_grad()
    return nodes


def compare_graph(exercise, Value, build, leaf_values, *, names=None, device=None, time_limit=20.0):
    """Build the same expression with `Value` and with PyTorch (float64), run both backward passes,
    and check every node's data and grad; raise a GraphMismatch at the first wrong one.

    `build(*leaves)` writes the expression with operators and the methods relu/tanh/exp/log, e.g.
    `lambda a, b: (a * b + 2).relu()`; `leaf_values` are the leaves' data. Nodes are checked in
    the order the learner's graph is visited by a reverse pass, from the root: every node before
    the reported one is right, so the mistake lies in how that node's gradient was collected.
    """
    tape, root_index = record(build, leaf_values, names)
    return compare_tape(exercise, Value, tape, root_index, device=device, time_limit=time_limit)


def _run_graph(exercise, Value, tape, root_index, time_limit):
    """Driver: replay the tape with the learner's Value, snapshot the graph, run backward() and
    snapshot it again. {"before": tape data (+ "graph"), "after": graph} or an "error"."""
    mine = run_student(exercise, lambda: tape.replay(Value), what=f"building {tape.describe(root_index)}",
                       time_limit=time_limit)
    root = mine[root_index]
    before = run_student(exercise, lambda: _tape_nodes(mine), what="reading every node's data", time_limit=time_limit)
    run = {"before": before}
    try:  # only for drawing a wrong forward value; a graph that cannot be walked is reported after backward()
        before["graph"] = run_student(exercise, lambda: _graph_nodes(mine, root, exercise),
                                      what="walking your graph from the root", time_limit=time_limit)
    except GradingError:
        before["graph"] = None
    try:
        run_student(exercise, lambda: root.backward(), what=f"{tape.names[root_index]}.backward()",
                    time_limit=time_limit)
        run["after"] = run_student(exercise, lambda: _graph_nodes(mine, root, exercise),
                                   what="walking your graph from the root after backward()", time_limit=time_limit)
    except GradingError as err:  # reported once the forward values have been checked
        run["error"] = str(err)
    return run


def _run_graphs(exercise, Value, tapes, time_limit):
    """Driver: `_run_graph` for each (tape, root index) in turn, up to the first that fails; each
    answer as a JSON string (hundreds of graphs can come back from one call)."""
    runs = []
    for tape, root_index in tapes:
        try:
            run = _run_graph(exercise, Value, tape, root_index, time_limit)
        except GradingError as err:  # the graph could not even be built
            run = {"error": str(err)}
        runs.append(json.dumps(run))  # one string per graph: quick to send, read with json.loads
        if "error" in run:  # that expression fails: the checks stop there
            break
    return runs


def compare_tape(exercise, Value, tape, root_index, *, device=None, time_limit=20.0):
    """compare_graph for an expression already recorded on a tape."""
    compare_tapes(exercise, Value, [(tape, root_index)], device=device, time_limit=time_limit)


def compare_tapes(exercise, Value, tapes, *, device=None, time_limit=20.0):
    """compare_tape for each (tape, root index) in turn, all run by one call into the learner's
    kernel (one round trip instead of one per expression); the first mismatch is reported."""
    tapes = [(tape, root_index) for tape, root_index in tapes]
    if not tapes:
        return
    runs = _drive(exercise, _run_graphs, exercise, Value, tapes, time_limit)
    if not isinstance(runs, (list, tuple)) or not runs:
        raise GradingError(f"{exercise}: no readable answer came back from your notebook (the graphs)")
    for k, (tape, root_index) in enumerate(tapes):
        if k >= len(runs):
            raise GradingError(f"{exercise}: no readable answer came back from your notebook (the graphs)")
        run = _readable(exercise, "the graphs", json.loads, runs[k])
        _check_run(exercise, Value, tape, root_index, run, device=device, time_limit=time_limit)


def _check_run(exercise, Value, tape, root_index, run, *, device=None, time_limit=20.0):
    """The verdict on one expression: the learner's snapshots (`run`, from `_run_graph`) against
    PyTorch; a GraphMismatch at the first wrong node."""
    global last_mismatch
    device = device or get_device()
    reference = _torch_replay(tape, device)
    reference[root_index].backward()
    ref_data = [t.item() for t in reference]
    ref_grad = [0.0 if t.grad is None else t.grad.item() for t in reference]
    n = len(tape.steps)

    before = _part(exercise, run, "before")
    data, ops, texts = _readable(exercise, "the nodes' data", _read_tape, before, n)
    for i in range(n):  # forward values, in the order they were computed
        if data[i] is None:
            raise GradingError(f"{exercise}: computing {tape.formula(i)} gave {texts[i]}, which has no numeric "
                               f"`.data`: every operation must return a new Value")
        if not _close(data[i], ref_data[i]):
            message = (f"{exercise}: wrong forward value at {tape.formula(i)} (op {ops[i]!r})\n"
                       f"{_whole(tape, root_index)}{_inputs_line(tape, i, data)}"
                       f"  expected data {_fmt(ref_data[i])}, got {_fmt(data[i])}")
            graph = before.get("graph")
            graph = _readable(exercise, "your graph", _read_graph, graph, n) if graph is not None else None
            drawn = _Snapshot(graph, data, ops)
            last_mismatch = GraphMismatch(message, drawn.root, drawn.node(i))
            raise last_mismatch

    after = _Snapshot(_readable(exercise, "your graph", _read_graph, _part(exercise, run, "after"), n), data, ops)
    walk_tape = after.tape
    reached = {i for i in walk_tape if i is not None}
    for i in range(n):
        if i not in reached and ref_grad[i] != 0.0:
            message = (f"{exercise}: {tape.formula(i)} cannot be reached from the root through `_prev`, "
                       f"yet the root depends on it (PyTorch's grad {_fmt(ref_grad[i])}): does every operation "
                       "pass its inputs as `_children` when it creates its result?")
            last_mismatch = GraphMismatch(message, after.root, after.node(i))
            raise last_mismatch
    for k in reversed(range(len(after.nodes))):
        i = walk_tape[k]
        if i is None:
            continue  # a node the learner's engine made on its own, e.g. Value(2) for a constant
        got = after.nodes[k].grad
        if not _close(got, ref_grad[i]):
            message, culprits = _explain_grad(exercise, tape, Value, i, data, ops, got, ref_grad, reference,
                                              root_index, time_limit)
            last_mismatch = GraphMismatch(message, after.root, after.nodes[k], [after.node(j) for j in culprits])
            raise last_mismatch


def _whole(tape, root_index):
    full = tape.expression(root_index)
    return f"  in the expression {tape.names[root_index]} = {full}\n" if full else ""


def _inputs_line(tape, i, data):
    op, *args = tape.steps[i]
    if op == "leaf":
        return f"  (a leaf with data {_fmt(data[i])})\n"
    parts = [f"{tape.names[a.index]} = {_fmt(data[a.index])}"
             if isinstance(a, Expr) else f"constant {a!r}" for a in args]
    return f"  inputs: {', '.join(parts)}\n"


def _explain_grad(exercise, tape, Value, i, data, ops, got, ref_grad, reference, root_index, time_limit):
    """The message for a wrong grad at tape node i, and the tape indices of the ops that send it
    the wrong amount."""
    lines = [f"{exercise}: wrong gradient at {tape.formula(i)} (op {ops[i]!r})",
             (_whole(tape, root_index) + _inputs_line(tape, i, data)).rstrip("\n"),
             f"  expected grad {_fmt(ref_grad[i])} (PyTorch, float64), got {_fmt(got)}"]
    culprits = []
    if i == root_index:
        lines.append("  This is the root: backward() must start by setting the root's grad to 1 "
                     "(dL/dL = 1) before it calls any node's _backward.")
        return "\n".join(lines), culprits
    lines.append(f"  Nodes are checked from the root down, in the order a correct backward() visits them, and every "
                 f"node before this one is right. So look at what {tape.names[i]} receives from the nodes that use it:")
    users = tape.users(i)
    sent = _learner_contributions(exercise, tape, Value, i, users, ref_grad, time_limit)
    doubled = False
    for j in users:
        expected = _local_share(tape, reference, i, j) * ref_grad[j]
        line = (f"    {tape.formula(j)} (op {ops[j]!r}, grad {_fmt(ref_grad[j])}) "
                f"should send {_fmt(expected)}")
        if sent is not None and sent[j] is not None:
            line += f"; your _backward sends {_fmt(sent[j])}"
            if not _close(sent[j], expected):
                line += "   <-- wrong"
                culprits.append(j)
                twice = sum(1 for a in tape.steps[j][1:] if isinstance(a, Expr) and a.index == i) == 2
                doubled |= twice and _close(sent[j], expected / 2)
        lines.append(line)
    uses = sum(1 for j in users for a in tape.steps[j][1:] if isinstance(a, Expr) and a.index == i)
    if doubled:
        lines.append(f"  That op takes {tape.names[i]} on both sides and passes on only one share: its _backward "
                     "must add (`+=`) both contributions, not overwrite (`=`) the first with the second.")
    elif culprits:
        lines.append("  Check the local derivative in the _backward of the op marked wrong: what it sends is "
                     "(d output / d input) x (the output's grad).")
    elif sent is not None and None not in sent.values() and uses > 1:
        lines.append(f"  Each use sends the right amount, but together they should add up to {_fmt(ref_grad[i])}: "
                     "a node used more than once must accumulate (`+=`) what every use sends, not overwrite (`=`).")
    elif uses > 1:
        lines.append("  This node is used more than once: if its grad equals what a single use sends, "
                     "the _backward functions overwrite (`=`) instead of accumulating (`+=`).")
    elif got == 0.0:
        lines.append("  Nothing reached this node: does every operation set `out._backward`, and does backward() "
                     "call every node's _backward, in reverse topological order (the root first)?")
    lines.append("  See it drawn, this node in red: show_graph(scalar_engine.last_mismatch.draw())")
    return "\n".join(lines), culprits


def _local_share(tape, reference, i, j):
    """d node_j / d node_i along the direct edge(s) only: op j redone on detached copies of its inputs."""
    op, *args = tape.steps[j]
    copies = {a.index: reference[a.index].detach().clone().requires_grad_() for a in args if isinstance(a, Expr)}
    out = _APPLY[op](*[copies[a.index] if isinstance(a, Expr) else a for a in args])
    return torch.autograd.grad(out, copies[i])[0].item()


def _run_contributions(exercise, Value, tape, i, upstream, time_limit):
    """Driver: {user j: what the learner's _backward of node j adds to node i's grad when j's grad
    is upstream[j]}, on a fresh copy of the graph; None per user where that cannot be measured,
    None in all when the graph cannot be rebuilt."""
    try:
        fresh = run_student(exercise, lambda: tape.replay(Value), what="rebuilding the graph", time_limit=time_limit)
    except GradingError:
        return None
    sent = {}
    for j, grad in upstream.items():
        def measure():
            prev = list(getattr(fresh[j], "_prev", ()))
            if not any(p is fresh[i] for p in prev):
                return None  # the learner's engine has a node of its own in between
            saved = [(p, getattr(p, "grad", 0)) for p in prev]
            try:
                for p in prev:
                    p.grad = 0.0
                fresh[j].grad = grad
                fresh[j]._backward()
                return _number(fresh[i].grad)
            finally:
                for p, g in saved:
                    p.grad = g
        try:
            sent[j] = run_student(exercise, measure, what="one node's _backward", time_limit=time_limit)
        except GradingError:
            sent[j] = None
    return sent


def _learner_contributions(exercise, tape, Value, i, users, ref_grad, time_limit):
    """{user j: what the learner's _backward of node j adds to node i's grad, given j's correct grad},
    measured on a fresh copy of the graph (in the learner's kernel). An entry is None where that
    cannot be measured (for instance when the learner's engine puts a node of its own between the
    two, as `a - b` written as `a + (-b)` does); the result is None when the graph cannot even be
    rebuilt. Only runs once the check has failed: the grads it sends are those the message shows."""
    try:
        sent = _drive(exercise, _run_contributions, exercise, Value, tape, i, {j: ref_grad[j] for j in users},
                      time_limit)
    except GradingError:
        return None
    if not isinstance(sent, dict):
        return None
    return {j: _float_or_none(sent.get(j)) for j in users}


# --- the checks the grade cells call -------------------------------------------------------------
# op name -> ways to write it; each is (build taking (a, b, g), domain) where g carries an
# upstream gradient different from 1 and the domain says which values a (and b) may take.
def _forms(op):
    positive = "positive"
    forms = {
        "+": [lambda a, b, g: (a + b) * g, lambda a, b, g: (a + 2.5) * g, lambda a, b, g: (2.5 + a) * g],
        "-": [lambda a, b, g: (a - b) * g, lambda a, b, g: (a - 1.5) * g, lambda a, b, g: (1.5 - a) * g],
        "*": [lambda a, b, g: a * b, lambda a, b, g: (a * b) * g, lambda a, b, g: (a * -2.0) * g,
              lambda a, b, g: (3 * a) * g],
        "/": [lambda a, b, g: (a / b) * g, lambda a, b, g: (a / 4.0) * g, lambda a, b, g: (2 / b) * g],
        "**": [lambda a, b, g: (a ** 2) * g, lambda a, b, g: (a ** 3) * g, lambda a, b, g: (b ** -1) * g,
               lambda a, b, g: (b ** -2) * g, (lambda a, b, g: (b ** 0.5) * g, positive),
               (lambda a, b, g: (b ** -1.5) * g, positive), (lambda a, b, g: (b ** 2.5) * g, positive)],
        "neg": [lambda a, b, g: (-a) * g],
        "relu": [lambda a, b, g: a.relu() * g, lambda a, b, g: (-b).relu() * g],
        "tanh": [lambda a, b, g: a.tanh() * g],
        "exp": [lambda a, b, g: a.exp() * g],
        "log": [(lambda a, b, g: b.log() * g, positive)],
    }[op]
    return [f if isinstance(f, tuple) else (f, None) for f in forms]


ARITHMETIC_OPS = ("*", "+", "-", "/", "**", "neg", "relu")  # what micrograd 0.1.0's Value has
TRANSCENDENTAL_OPS = ("tanh", "exp", "log")


def check_each_op(exercise, Value, ops, *, seed, repeats=3):
    """Every way of writing each op in `ops` (Value with Value, with a number on either side),
    at `repeats` random points: forward value and local gradients against PyTorch.

    a is drawn away from 0 (either sign), b is drawn with |b| >= 0.5 (positive where the op
    needs it: log, fractional powers), so no test sits on a kink or a pole.
    """
    rng = random.Random(seed)
    tapes = []
    for op in ops:
        for build, domain in _forms(op):
            for _ in range(repeats):
                a = rng.choice((-1, 1)) * rng.uniform(0.3, 2.0)
                b = rng.uniform(0.5, 2.0) * (1 if domain == "positive" else rng.choice((-1, 1)))
                g = rng.uniform(0.5, 2.0) * rng.choice((-1, 1))
                tapes.append(record(build, [a, b, g], names=["a", "b", "g"]))
    compare_tapes(exercise, Value, tapes)


def random_expression(seed, ops, *, leaves=3, steps=12):
    """A random expression DAG over `ops`: (build, leaf values).

    Operands are drawn from every node made so far (recent ones more often, now and then the same
    node on both sides), so sub-expressions are shared; a third of the binary ops take a constant
    instead, on either side. Values stay in safe ranges: no division by |x| < 0.3, log and
    fractional powers of x > 0.2 only, exp of x < 2.5, relu away from its kink, and every node
    between 1e-3 and 30 in size. The root adds up every node that nothing else uses.
    """
    rng = random.Random(seed)
    values = [rng.choice((-1, 1)) * rng.uniform(0.4, 2.0) for _ in range(leaves)]
    program = []  # (op, operands...): an int is a node index, a float a constant; "**" keeps its exponent

    def pick():
        return min(len(values) - 1, int(len(values) * rng.random() ** 0.5))  # recent nodes are likelier

    def attempt():
        op, x = rng.choice(ops), pick()
        xv = values[x]
        if op in ("+", "-", "*", "/"):
            y = x if rng.random() < 0.15 else pick()
            if rng.random() < 0.35:  # a constant, on either side
                y = rng.choice((0.5, 1.5, 2.0, 3.0, -1.25))
            operands = (y, x) if isinstance(y, float) and rng.random() < 0.5 else (x, y)
            first, second = (values[o] if isinstance(o, int) else o for o in operands)
            if op == "/" and abs(second) < 0.3:
                return None
            value = {"+": first + second, "-": first - second, "*": first * second,
                     "/": first / second if op == "/" else 0.0}[op]
            return (op, *operands), value
        if op == "**":
            k = rng.choice((2, 3, -1, 0.5, 1.5))
            if (k < 0 and abs(xv) < 0.3) or (isinstance(k, float) and xv < 0.2):
                return None
            return ("**", x, k), xv ** k
        if op == "relu" and abs(xv) < 1e-3 or op == "exp" and xv > 2.5 or op == "log" and xv < 0.2:
            return None
        value = {"neg": lambda v: -v, "relu": lambda v: max(v, 0.0), "tanh": math.tanh,
                 "exp": math.exp, "log": lambda v: math.log(v)}[op](xv)
        return (op, x), value

    while len(program) < steps:
        made = attempt()
        if made is not None and 1e-3 < abs(made[1]) < 30:
            program.append(made[0])
            values.append(made[1])

    def build(*leaf_exprs):
        nodes, used = list(leaf_exprs), set()
        for op, *args in program:
            if op == "**":
                args = [nodes[args[0]], args[1]]
                used.add(id(args[0]))
            else:
                args = [nodes[a] if isinstance(a, int) else a for a in args]
                used.update(id(a) for a in args if isinstance(a, Expr))
            nodes.append(_APPLY[op](*args))
        sinks = [n for n in nodes if id(n) not in used]
        root = sinks[0]
        for extra in sinks[1:]:
            root = root + extra
        return root

    return build, values[:leaves]


def check_random_expressions(exercise, Value, ops, *, seed, count=100, leaves=3, steps=12):
    """`count` random DAGs over `ops` (seeded), each compared node by node with PyTorch."""
    tapes = [record(*random_expression(seed * 100_003 + k, ops, leaves=leaves, steps=steps)) for k in range(count)]
    compare_tapes(exercise, Value, tapes)



def _run_two_passes(exercise, Value, leaf_values, passes, what):
    """Driver: fresh leaves, each (tape, root) of `passes` replayed on them and backward() once
    each, nothing zeroed in between; the leaves' grads (None where not a number)."""
    def run():
        leaves = [Value(float(v)) for v in leaf_values]
        for tape, root in passes:
            iterator = iter(leaves)
            tape.replay(lambda v: next(iterator))[root].backward()
        return [_number(getattr(leaf, "grad", None)) for leaf in leaves]

    return run_student(exercise, run, what=what)


def check_two_passes(exercise, Value, first, second, leaf_values, *, names=None, device=None):
    """Two expressions over the same leaves, one backward() each and nothing zeroed in between:
    the leaves' grads must hold the sum of both passes, as PyTorch's leaf .grad does."""
    names = list(names) if names else [chr(ord("a") + i) for i in range(len(leaf_values))]
    tape_1, root_1 = record(first, leaf_values, names)
    tape_2, root_2 = record(second, leaf_values, names)
    device = device or get_device()
    leaves_t = [torch.tensor(float(v), dtype=torch.float64, device=device, requires_grad=True) for v in leaf_values]
    for tape, root in ((tape_1, root_1), (tape_2, root_2)):
        iterator = iter(leaves_t)
        tape.replay(lambda v: next(iterator))[root].backward()
    expected = [t.grad.item() for t in leaves_t]

    one, two = tape_1.expression(root_1) or tape_1.formula(root_1), tape_2.expression(root_2) or tape_2.formula(root_2)
    grads = _drive(exercise, _run_two_passes, exercise, Value, [float(v) for v in leaf_values],
                   [(tape_1, root_1), (tape_2, root_2)], f"{one}, then {two}, one backward() each")
    grads = _sized(exercise, grads, len(leaf_values), "the leaves' grads")
    for name, got, e in zip(names, grads, expected):
        got = _float_or_none(got)
        if not _close(got, e):
            raise GradingError(
                f"{exercise}: after backward() on {one} and then on {two} "
                f"(two graphs sharing the leaves, nothing zeroed in between), {name}.grad is {_fmt(got)}; PyTorch "
                f"accumulates both passes into {_fmt(e)}. backward() must add to the leaves' grads, not reset them.")


def _run_deep_chain(exercise, Value, steps, ladder, c, d, e, n_nodes, shape, time_limit):
    """Driver: build the chain (see check_deep_chain) and run backward() from its end, each within
    `time_limit` seconds; [last node's data, its grad, the middle node's grad, the first's grad].
    The graph stays in the kernel: only these four numbers come back."""
    def build():
        first = Value(0.5)
        v, middle = first, None
        for k in range(steps):
            v = v * c + v * e if ladder else v * c + d
            if k == steps // 2 - 1:
                middle = v
        return first, middle, v

    with _automatic_collection_off():  # time the engine, not Python's cycle collector
        first, middle, last = run_student(exercise, build, what=f"building a chain of {n_nodes:,} nodes ({shape})",
                                          time_limit=time_limit)
        run_student(exercise, lambda: last.backward(), what=f"backward() through a chain of {n_nodes:,} nodes",
                    time_limit=time_limit)
    return run_student(exercise, lambda: [_number(getattr(last, "data", None)), _number(getattr(last, "grad", None)),
                                          _number(getattr(middle, "grad", None)), _number(getattr(first, "grad", None))],
                       what="reading the chain's data and grads", time_limit=time_limit)


def check_deep_chain(exercise, Value, *, n_nodes=100_000, ladder=False, time_limit=15.0):
    """A chain of about `n_nodes` operations, built and differentiated within `time_limit`
    seconds each, without recursion. The chain is v <- v * c + d (two ops a step), or with
    `ladder=True` v <- v * c + v * e (three ops a step, every v used twice); either way
    d v_end / d v_0 is known in closed form."""
    c, d, e = 1 - 1e-5, 1e-5, 0.0
    if ladder:
        c, e = 0.75, 0.25 - 1e-5  # c + e = 1 - 1e-5
    steps = n_nodes // (3 if ladder else 2)
    factor = c + e
    shape = f"v = v * {c} + v * {e}" if ladder else f"v = v * {c} + {d}"
    got = _drive(exercise, _run_deep_chain, exercise, Value, steps, ladder, c, d, e, n_nodes, shape, time_limit)
    got = [_float_or_none(g) for g in _sized(exercise, got, 4, "the chain's data and grads")]
    value = 0.5 * factor ** steps if ladder else 1 - 0.5 * c ** steps
    for what, got, expected in [("the last node's data", got[0], value),
                                ("the root's grad", got[1], 1.0),
                                ("the middle node's grad", got[2], factor ** (steps - steps // 2)),
                                ("the first node's grad", got[3], factor ** steps)]:
        if not _close(got, expected):
            raise GradingError(f"{exercise}: on a chain of {n_nodes:,} nodes ({shape}, {steps:,} times, from "
                               f"v = 0.5), {what} is {_fmt(got)}, expected {_fmt(expected)}")


# --- MLP -----------------------------------------------------------------------------------------
@contextlib.contextmanager
def _seeded_global_random(seed):
    """Seed Python's global `random` (weights are drawn from it) and put its state back after."""
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)


def _learner_mlp(exercise, MLP, nin, nouts, seed):
    """(model, its parameters(), their data as floats), in the learner's kernel; the weights are drawn
    from the kernel's global `random`, seeded."""
    with _seeded_global_random(seed):
        model = run_student(exercise, lambda: MLP(nin, list(nouts)), what=f"MLP({nin}, {list(nouts)})")
    params = run_student(exercise, lambda: list(model.parameters()), what="model.parameters()")
    values = run_student(exercise, lambda: [_number(getattr(p, "data", None)) for p in params],
                         what="reading the parameters' data")
    return model, params, values


def _param_values(exercise, run, nin, nouts):
    """The learner's parameters' data from a driver's answer: as many as MLP(nin, nouts) has, numbers."""
    values = _part(exercise, run, "params")
    if not isinstance(values, (list, tuple)):
        raise GradingError(f"{exercise}: no readable answer came back from your notebook (the parameters)")
    sizes = [nin] + list(nouts)
    expected = sum((sizes[k] + 1) * sizes[k + 1] for k in range(len(nouts)))
    if len(values) != expected:
        raise GradingError(
            f"{exercise}: MLP({nin}, {list(nouts)}).parameters() returned {len(values)} parameters, expected "
            f"{expected}: every neuron has one weight per input plus one bias, and parameters() must collect "
            "them from every layer and every neuron")
    values = [_float_or_none(v) for v in values]
    if None in values:
        k = values.index(None)
        raise GradingError(f"{exercise}: {_param_name(k, nin, nouts)} of MLP({nin}, {list(nouts)}) has no numeric "
                           "`.data`: parameters() must return the model's Values")
    return values


def _param_name(k, nin, nouts):
    sizes = [nin] + list(nouts)
    for layer in range(len(nouts)):
        per_neuron = sizes[layer] + 1
        block = per_neuron * sizes[layer + 1]
        if k < block:
            neuron, slot = divmod(k, per_neuron)
            what = "its bias" if slot == sizes[layer] else f"weight {slot}"
            return f"parameter #{k} (layer {layer}, neuron {neuron}, {what})"
        k -= block
    return f"parameter #{k}"


class _TorchMLP:
    """The same MLP in PyTorch, float64, its weights copied from the learner's parameters' data
    (`values`) in micrograd's order: layer by layer, neuron by neuron, the neuron's weights then
    its bias."""

    def __init__(self, values, nin, nouts, device):
        sizes, k = [nin] + list(nouts), 0
        self.layers = []
        for n_in, n_out in zip(sizes, sizes[1:]):
            block = torch.tensor(values[k:k + (n_in + 1) * n_out], dtype=torch.float64, device=device)
            block = block.view(n_out, n_in + 1)
            self.layers.append((block[:, :n_in].clone().requires_grad_(), block[:, n_in].clone().requires_grad_()))
            k += (n_in + 1) * n_out
        self.device = device

    def __call__(self, x):
        h = torch.tensor(x, dtype=torch.float64, device=self.device)
        for depth, (W, b) in enumerate(self.layers):
            h = W @ h + b
            if depth < len(self.layers) - 1:
                h = torch.relu(h)
        return list(h)

    def parameters(self):
        """0-d views of every weight and bias, in micrograd's order."""
        return [t for W, b in self.layers for j in range(W.shape[0]) for t in (*W[j], b[j])]

    def grads(self):
        return [g for W, b in self.layers for j in range(W.shape[0])
                for g in (*W.grad[j].tolist(), b.grad[j].item())]


def _samples(seed, count, nin):
    rng = random.Random(seed)
    xs = [[rng.uniform(-2, 2) for _ in range(nin)] for _ in range(count)]
    ys = [rng.choice((-1.0, 1.0)) for _ in range(count)]
    return xs, ys


def _learner_outputs(exercise, model, xs, n_out):
    """model(x) for every x, in the learner's kernel: (lists of n_out learner Values, or None when an
    output has the wrong shape; a report per output: the outputs' data as a list of floats, or,
    for the first one of the wrong shape, a dict saying what it is)."""
    raw = run_student(exercise, lambda: [model(x) for x in xs], what="model(x)")

    def shapes():
        outs, report = [], []
        for out in raw:
            sequence = isinstance(out, (list, tuple))
            if n_out == 1 and not sequence:
                out = [out]
            elif n_out == 1 or not sequence or len(out) != n_out:
                report.append({"sequence": sequence, "type": type(out).__name__,
                               "length": len(out) if sequence else None, "text": _text(out)})
                return None, report
            outs.append(list(out))
            report.append([_number(getattr(s, "data", None)) for s in out])
        return outs, report

    return run_student(exercise, shapes, what="reading the outputs of model(x)")


def _checked_outputs(exercise, report, n_out, count):
    """The outputs' data from a driver's report, once every output has the right shape."""
    if not isinstance(report, (list, tuple)):
        raise GradingError(f"{exercise}: no readable answer came back from your notebook (the outputs)")
    for out in report:
        if isinstance(out, dict):
            if n_out == 1:
                raise GradingError(f"{exercise}: with one output neuron, model(x) should return that Value itself "
                                   f"(as micrograd's Layer does), but it returned a {out.get('type')} of "
                                   f"{out.get('length')}: make Layer.__call__ return out[0] when the layer has one "
                                   "neuron")
            raise GradingError(f"{exercise}: with {n_out} output neurons, model(x) should return a list of {n_out} "
                               f"Values, got {out.get('text')}")
    outs = _sized(exercise, report, count, "the outputs")
    return [[_float_or_none(s) for s in _sized(exercise, out, n_out, "the outputs")] for out in outs]


def _loss(outs, ys, kind, params=(), alpha=1e-3):
    """One loss for learner Values and tensors alike: the mean hinge loss of micrograd's demo, or
    the mean squared error, plus alpha times the sum of squared parameters."""
    total = 0
    for out, y in zip(outs, ys):
        for s in out:
            total = total + ((1 + -y * s).relu() if kind == "hinge" else (s - y) ** 2)
    total = total * (1.0 / len(outs))
    for p in params:
        total = total + alpha * (p * p)
    return total


def _learner_grads(exercise, params):
    return run_student(exercise, lambda: [_number(getattr(p, "grad", None)) for p in params],
                       what="reading the parameters' grads")


def _run_mlp_gradients(exercise, MLP, nin, nouts, seed, xs, ys, loss):
    """Driver: MLP(nin, nouts) (seeded), its outputs on xs, `loss` and loss.backward();
    {"params": data, "outputs": report, "grads": grads}, or an "error" after the data gathered."""
    model, params, values = _learner_mlp(exercise, MLP, nin, nouts, seed)
    run = {"params": values}
    try:
        outs, run["outputs"] = _learner_outputs(exercise, model, xs, nouts[-1])
        if outs is not None:
            total = run_student(exercise, lambda: _loss(outs, ys, loss, params), what=f"the {loss} loss of the outputs")
            run_student(exercise, lambda: total.backward(), what="loss.backward()")
            run["grads"] = _learner_grads(exercise, params)
    except GradingError as err:  # reported after what was gathered before it
        run["error"] = str(err)
    return run


def check_mlp_gradients(exercise, MLP, nin, nouts, *, seed, samples=6, loss="hinge", device=None):
    """Outputs and every parameter's gradient of MLP(nin, nouts) on a seeded batch, against the
    same network in PyTorch with the learner's weights."""
    xs, ys = _samples(seed + 1, samples, nin)
    run = _drive(exercise, _run_mlp_gradients, exercise, MLP, nin, list(nouts), seed, xs, ys, loss)
    values = _param_values(exercise, run, nin, nouts)
    reference = _TorchMLP(values, nin, nouts, device or get_device())
    outs = _checked_outputs(exercise, _part(exercise, run, "outputs"), nouts[-1], len(xs))
    ref_outs = [reference(x) for x in xs]
    for x, out, ref in zip(xs, outs, ref_outs):
        for j, (got, r) in enumerate(zip(out, ref)):
            if not _close(got, r.item()):
                raise GradingError(
                    f"{exercise}: MLP({nin}, {list(nouts)}) on x = {[round(v, 4) for v in x]}: output {j} is "
                    f"{_fmt(got)}, expected {_fmt(r.item())} (the same weights in PyTorch). Each neuron computes "
                    "relu(w . x + b) in the hidden layers and w . x + b in the last one (nonlin=False); "
                    "parameters() lists the weights in micrograd's order: layer by layer, neuron by neuron, "
                    "the weights, then the bias.")
    grads = _sized(exercise, _part(exercise, run, "grads"), len(values), "the parameters' grads")
    _loss(ref_outs, ys, loss, reference.parameters()).backward()
    for k, (got, expected) in enumerate(zip(grads, reference.grads())):
        got = _float_or_none(got)
        if not _close(got, expected):
            raise GradingError(
                f"{exercise}: MLP({nin}, {list(nouts)}), {loss} loss on {samples} samples: wrong gradient for "
                f"{_param_name(k, nin, nouts)}: expected {_fmt(expected)} (PyTorch, same weights), got {_fmt(got)}")


def _run_zero_grad(exercise, MLP, nin, nouts, seed, xs, ys):
    """Driver: MLP(nin, nouts) (seeded); whether parameters() gives the same objects twice; every
    grad set to 0.5, then zero_grad(); then two forward + backward passes without zero_grad().
    {"params", "same", "zeroed": [[grad, its repr]...], "passes": [output reports], "grads"}, or
    an "error" after the data gathered before it."""
    model, params, values = _learner_mlp(exercise, MLP, nin, nouts, seed)
    run = {"params": values}
    try:
        again = run_student(exercise, lambda: list(model.parameters()), what="model.parameters()")
        run["same"] = not any(p is not q for p, q in zip(params, again))

        def leave_grads_behind():  # as if an earlier step had left gradients behind
            for p in params:
                p.grad = 0.5
        run_student(exercise, leave_grads_behind, what="setting every parameter's grad to 0.5")
        run_student(exercise, lambda: model.zero_grad(), what="model.zero_grad()")
        run["zeroed"] = run_student(exercise, lambda: [[_number(getattr(p, "grad", None)), _text(getattr(p, "grad", None))]
                                                       for p in params], what="reading the parameters' grads")
        run["passes"] = []
        for _ in range(2):  # two forward + backward passes, no zero_grad() in between
            outs, report = _learner_outputs(exercise, model, xs, nouts[-1])
            run["passes"].append(report)
            if outs is None:
                return run
            total = run_student(exercise, lambda: _loss(outs, ys, "squared"), what="the squared loss of the outputs")
            run_student(exercise, lambda: total.backward(), what="loss.backward()")
        run["grads"] = _learner_grads(exercise, params)
    except GradingError as err:  # reported after what was gathered before it
        run["error"] = str(err)
    return run


def check_zero_grad(exercise, MLP, nin, nouts, *, seed, samples=4, device=None):
    """parameters() returns the model's own Values; zero_grad() sets every grad to 0; two backward
    passes without zero_grad() in between add up, as they do in PyTorch."""
    xs, ys = _samples(seed + 1, samples, nin)
    run = _drive(exercise, _run_zero_grad, exercise, MLP, nin, list(nouts), seed, xs, ys)
    values = _param_values(exercise, run, nin, nouts)
    if _part(exercise, run, "same") is not True:
        raise GradingError(f"{exercise}: two calls of parameters() returned different objects: it must return the "
                           "model's own Values (the ones training updates), not new ones")
    reference = _TorchMLP(values, nin, nouts, device or get_device())
    _loss([reference(x) for x in xs], ys, "squared").backward()
    single = reference.grads()
    zeroed = _sized(exercise, _part(exercise, run, "zeroed"), len(values), "the parameters' grads")
    for k, entry in enumerate(zeroed):
        grad, text = _sized(exercise, entry, 2, "the parameters' grads")
        if _float_or_none(grad) != 0.0:
            raise GradingError(f"{exercise}: after model.zero_grad(), {_param_name(k, nin, nouts)} has grad "
                               f"{text}: zero_grad() must set every parameter's grad to 0")
    passes = _part(exercise, run, "passes")
    for report in passes if isinstance(passes, (list, tuple)) else [None]:
        _checked_outputs(exercise, report, nouts[-1], len(xs))
    grads = _sized(exercise, _part(exercise, run, "grads"), len(values), "the parameters' grads")
    if len(passes) != 2:
        raise GradingError(f"{exercise}: no readable answer came back from your notebook (the two passes)")
    for k, (got, s) in enumerate(zip(grads, single)):
        got = _float_or_none(got)
        if not _close(got, 2 * s):
            raise GradingError(
                f"{exercise}: two forward + backward passes without zero_grad() should leave twice the gradient "
                f"of one (PyTorch accumulates the same way): {_param_name(k, nin, nouts)} has {_fmt(got)}, "
                f"expected 2 x {_fmt(s)} = {_fmt(2 * s)}")


# --- drawing -------------------------------------------------------------------------------------
class GraphNode:
    """A bare node with what a drawing needs (data, grad, _prev, _op, label), for grading draw_dot
    independently of the learner's Value."""

    def __init__(self, data, grad, children=(), op="", label=""):
        self.data, self.grad, self._prev, self._op, self.label = data, grad, set(children), op, label
        self._backward = lambda: None

    def __repr__(self):
        return f"GraphNode(data={self.data}, grad={self.grad}, _op={self._op!r})"


def draw_graph(root, highlight=None, suspects=()):
    """A drawing of any engine's graph: one record per node (data | grad), one small node per op;
    `highlight` filled red, `suspects` orange. Big graphs are cut to the nodes nearest `highlight`."""
    nodes = topological_order(root)
    if len(nodes) > MAX_DRAWN_NODES:
        nodes = _neighbourhood(nodes, highlight or root)
    keep = {id(n) for n in nodes}
    dot = graphviz.Digraph(graph_attr={"rankdir": "LR"})
    suspect_ids = {id(s) for s in suspects}
    for n in nodes:
        uid = str(id(n))
        colour = {"style": "filled", "fillcolor": "red"} if n is highlight else (
            {"style": "filled", "fillcolor": "orange"} if id(n) in suspect_ids else {})
        dot.node(uid, label=f"{{ data {_short(n.data)} | grad {_short(n.grad)} }}", shape="record", **colour)
        if getattr(n, "_op", ""):
            dot.node(uid + "op", label=str(n._op), **colour)
            dot.edge(uid + "op", uid)
        for child in getattr(n, "_prev", ()):
            if id(child) in keep:
                dot.edge(str(id(child)), uid + "op" if getattr(n, "_op", "") else uid)
    return dot


def _short(x):
    value = _number(x)
    return repr(x) if value is None else f"{value:.4f}"


def _neighbourhood(nodes, centre):
    """The nodes within a few steps of `centre` (either direction), at most MAX_DRAWN_NODES."""
    links = {id(n): [] for n in nodes}
    for n in nodes:
        for c in getattr(n, "_prev", ()):
            links[id(n)].append(c)
            links.setdefault(id(c), []).append(n)
    seen, frontier = {id(centre): centre}, [centre]
    while frontier and len(seen) < MAX_DRAWN_NODES:
        nxt = []
        for n in frontier:
            for m in links.get(id(n), ()):
                if id(m) not in seen and len(seen) < MAX_DRAWN_NODES:
                    seen[id(m)] = m
                    nxt.append(m)
        frontier = nxt
    return [n for n in nodes if id(n) in seen]


_ID = r'"(?:[^"\\]|\\.)*"|[A-Za-z_\x80-\uffff][\w\x80-\uffff]*|-?(?:\.\d+|\d+(?:\.\d*)?)'
_EDGE = re.compile(rf"^\s*({_ID})(?::[^\s\-]*)?\s*->\s*({_ID})(?::\S*)?\s*(\[.*\])?\s*;?\s*$", re.S)
_NODE = re.compile(rf"^\s*({_ID})\s*(\[.*\])?\s*;?\s*$", re.S)
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _unquote(name):
    return name[1:-1].replace('\\"', '"') if name.startswith('"') else name


def _label_of(attrs):
    """The text of a `label=...` attribute (quoted or <html>), or ''."""
    if not attrs:
        return ""
    m = re.search(r"\blabel\s*=\s*", attrs)
    if not m:
        return ""
    rest = attrs[m.end():]
    if rest.startswith('"'):
        q = re.match(r'"((?:[^"\\]|\\.)*)"', rest, re.S)
        return q.group(1) if q else ""
    if rest.startswith("<"):
        depth = 0
        for k, ch in enumerate(rest):
            depth += {"<": 1, ">": -1}.get(ch, 0)
            if depth == 0:
                return re.sub(r"<[^>]*>", " ", rest[1:k])
        return ""
    return re.match(r"[^\s,\]]*", rest).group(0)


def parse_dot(graph):
    """({node name: label text}, {(tail, head)}) from a graphviz.Digraph's statements (or from the
    list of statement lines of its `body`, as a driver returns it)."""
    labels, edges = {}, set()
    for line in graph.body if isinstance(graph, graphviz.Digraph) else graph:
        for statement in line.strip().split("\n"):
            if not statement.strip() or statement.strip().startswith(("graph", "node ", "node[", "edge ", "edge[", "//", "}", "subgraph", "{")):
                continue
            m = _EDGE.match(statement)
            if m:
                tail, head = _unquote(m.group(1)), _unquote(m.group(2))
                edges.add((tail, head))
                labels.setdefault(tail, "")
                labels.setdefault(head, "")
                continue
            m = _NODE.match(statement)
            if m and "=" not in m.group(1):
                labels[_unquote(m.group(1))] = _label_of(m.group(2)) or labels.get(_unquote(m.group(1)), "")
    return labels, edges


def _shows(label, value):
    numbers = [float(t) for t in _NUMBER.findall(label)]
    return any(abs(n - value) <= 0.006 + 1e-3 * abs(value) for n in numbers)




def _run_drawing(exercise, draw_dot, root, what):
    """Driver: draw_dot(root); {"type": the type name of what it returned, "body": the Digraph's
    statement lines (only when it is a graphviz.Digraph)}."""
    drawing = run_student(exercise, lambda: draw_dot(root), what=f"draw_dot(root) for {what}")

    def read():
        if not isinstance(drawing, graphviz.Digraph):
            return {"type": type(drawing).__name__}
        return {"type": type(drawing).__name__, "body": [str(line) for line in drawing.body]}

    return run_student(exercise, read, what="reading the drawing")


def check_drawing(exercise, draw_dot, root, *, what):
    """draw_dot(root) must return a graphviz.Digraph that draws every node of the graph exactly once
    with its data and its grad, every op, and an edge path from each node to each node it feeds."""
    drawing = _drive(exercise, _run_drawing, exercise, draw_dot, root, what)
    if not isinstance(drawing, dict) or "body" not in drawing:
        got = drawing.get("type") if isinstance(drawing, dict) else type(drawing).__name__
        raise GradingError(f"{exercise}: draw_dot(root) should return a graphviz.Digraph, got {got}")
    body = drawing["body"]
    if not isinstance(body, (list, tuple)) or not all(isinstance(line, str) for line in body):
        raise GradingError(f"{exercise}: no readable answer came back from your notebook (the drawing)")
    labels, edges = parse_dot(body)
    nodes = topological_order(root, exercise)
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
    every_label = " ".join(labels.values())
    for n in nodes:
        if n._op and n._op not in every_label:
            raise GradingError(f"{exercise}: in the drawing of {what}, the op {n._op!r} (which made the node with data "
                               f"{n.data}) does not appear: label each result with the op that made it")
    linked = {}
    for tail, head in edges:
        linked.setdefault(tail, set()).add(head)
        linked.setdefault(head, set()).add(tail)
    for n in nodes:
        for child in n._prev:
            a, b = drawn[id(child)], drawn[id(n)]
            near = linked.get(a, set())
            if b not in near and not any(b in linked.get(m, set()) for m in near if m not in drawn.values()):
                raise GradingError(f"{exercise}: in the drawing of {what}, the node with data {child.data} feeds the one "
                                   f"with data {n.data} (through {n._op!r}), but no edge (or edge through an op node) "
                                   "connects them")


def sample_graphs(seed):
    """[(root, description)]: GraphNode graphs with data and grad distinct at two decimals — a single
    leaf, a node used twice, a diamond, and a random DAG of about 30 nodes."""
    rng = random.Random(seed)
    numbers = iter(rng.sample(range(-900, 901), 400))

    def num():
        value = next(numbers)
        while abs(value) < 15:  # away from 0, 0.1 and the like
            value = next(numbers)
        return value / 100

    def node(children=(), op=""):
        return GraphNode(num(), num(), children, op)

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
    used = {id(c) for n in made for c in n._prev}
    graphs.append((node([n for n in made if id(n) not in used], "+"), "a random graph of 31 nodes"))
    return graphs
