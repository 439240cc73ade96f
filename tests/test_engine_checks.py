"""autograder.checks.nb02_micrograd: a correct scalar engine passes, a wrong local derivative is named."""
import contextlib
import io
import math
import random
import sys
from unittest import mock

import graphviz
import mutation
import pytest

from autograder.checks import GradingError, nb02_micrograd
from autograder.checks.nb02_micrograd import GraphNode, graph_checks, mlp, snapshots
from autograder.checks.nb02_micrograd import values as engine_values
from autograder.checks.nb02_micrograd.expressions import random_expression, record
from autograder.checks.nb02_micrograd.snapshots import GraphMismatch


def topological_order(root):
    """The tests' own sort for their engines (the checks hold none): inputs first, root last."""
    order, seen, stack = [], {id(root)}, [(root, iter(root._prev))]
    while stack:
        node, pending = stack[-1]
        for child in pending:
            if id(child) not in seen:
                seen.add(id(child))
                stack.append((child, iter(child._prev)))
                break
        else:
            stack.pop()
            order.append(node)
    return order


class Tiny:
    """A small correct engine, micrograd's design, iterative sort."""

    def __init__(self, data, _children=(), _op=""):
        self.data, self.grad, self._prev, self._op = data, 0.0, set(_children), _op
        self._backward = lambda: None

    def _out(self, data, children, op, locals_):
        out = type(self)(data, children, op)
        pairs = list(zip(children, locals_))

        def _backward():
            for child, local in pairs:
                child.grad += local * out.grad
        out._backward = _backward
        return out

    def _lift(self, other):
        return other if isinstance(other, Tiny) else type(self)(other)

    def __add__(self, other):
        other = self._lift(other)
        return self._out(self.data + other.data, (self, other), "+", (1.0, 1.0))

    def __mul__(self, other):
        other = self._lift(other)
        return self._out(self.data * other.data, (self, other), "*", (other.data, self.data))

    def __pow__(self, k):
        return self._out(self.data ** k, (self,), f"**{k}", (k * self.data ** (k - 1),))

    def relu(self):
        return self._out(max(self.data, 0.0), (self,), "ReLU", (float(self.data > 0),))

    def tanh(self):
        t = math.tanh(self.data)
        return self._out(t, (self,), "tanh", (1 - t * t,))

    def exp(self):
        e = math.exp(self.data)
        return self._out(e, (self,), "exp", (e,))

    def log(self):
        return self._out(math.log(self.data), (self,), "log", (1 / self.data,))

    def __neg__(self):
        return self * -1

    def __radd__(self, other):
        return self + other

    def __sub__(self, other):
        return self + (-other)

    def __rsub__(self, other):
        return other + (-self)

    def __rmul__(self, other):
        return self * other

    def __truediv__(self, other):
        return self * other ** -1

    def __rtruediv__(self, other):
        return other * self ** -1

    def backward(self):
        order = topological_order(self)
        self.grad = 1.0
        for node in reversed(order):
            node._backward()


class MulForgetsFactor(Tiny):
    """One wrong local derivative: d(x * y)/dx taken as 1."""

    def __mul__(self, other):
        other = self._lift(other)
        return self._out(self.data * other.data, (self, other), "*", (1.0, self.data))


class Recursive(Tiny):
    def backward(self):
        order, seen = [], set()

        def visit(node):
            if node not in seen:
                seen.add(node)
                for child in node._prev:
                    visit(child)
                order.append(node)
        visit(self)
        self.grad = 1.0
        for node in reversed(order):
            node._backward()


class NoSeed(Tiny):
    def backward(self):
        for node in reversed(topological_order(self)):
            node._backward()


class Assigns(Tiny):
    def _out(self, data, children, op, locals_):
        out = type(self)(data, children, op)
        pairs = list(zip(children, locals_))

        def _backward():
            for child, local in pairs:
                child.grad = local * out.grad
        out._backward = _backward
        return out


class ResetsLeaves(Tiny):
    """Zeroes every grad at the start of backward(): right once, wrong across two passes."""

    def backward(self):
        order = topological_order(self)
        for node in order:
            node.grad = 0.0
        super().backward()


def tiny_nn(value_class, zero_grad=True):
    """micrograd's nn.py on `value_class`, as an MLP class."""
    class Neuron:
        def __init__(self, nin, nonlin=True):
            self.w = [value_class(random.uniform(-1, 1)) for _ in range(nin)]
            self.b, self.nonlin = value_class(0.0), nonlin

        def __call__(self, x):
            act = sum((wi * xi for wi, xi in zip(self.w, x)), self.b)
            return act.relu() if self.nonlin else act

        def parameters(self):
            return self.w + [self.b]

    class MLP:
        def __init__(self, nin, nouts):
            sizes = [nin] + list(nouts)
            self.layers = [[Neuron(sizes[i], nonlin=i != len(nouts) - 1) for _ in range(sizes[i + 1])]
                           for i in range(len(nouts))]

        def __call__(self, x):
            for layer in self.layers:
                x = [n(x) for n in layer]
            return x[0] if len(x) == 1 else x

        def parameters(self):
            return [p for layer in self.layers for n in layer for p in n.parameters()]

        def zero_grad(self):
            if zero_grad:
                for p in self.parameters():
                    p.grad = 0.0

    return MLP


@contextlib.contextmanager
def no_stderr():
    captured = io.StringIO()
    with contextlib.redirect_stderr(captured):
        yield
    assert captured.getvalue() == "", "a grading helper wrote to stderr"


ALL_OPS = nb02_micrograd.ARITHMETIC_OPS + nb02_micrograd.TRANSCENDENTAL_OPS


def test_a_correct_engine_passes_every_check():
    with no_stderr():
        nb02_micrograd.compare_graph("Value", Tiny, lambda a, b, c: (a * b + c) * a, [2.0, -3.0, 10.0])
        nb02_micrograd.check_each_op("Value", Tiny, ALL_OPS, seed=1, repeats=2)
        nb02_micrograd.check_random_expressions("Value", Tiny, ALL_OPS, seed=2, count=30)
        nb02_micrograd.check_two_passes("Value", Tiny, lambda a, b: a * b, lambda a, b: a + b * b, [1.5, -2.0])
        nb02_micrograd.check_deep_chain("Value", Tiny, n_nodes=20_000)
        nb02_micrograd.check_deep_chain("Value", Tiny, n_nodes=9_000, ladder=True)
        nb02_micrograd.check_mlp_gradients("MLP", tiny_nn(Tiny), 3, [4, 4, 1], seed=3)
        nb02_micrograd.check_mlp_gradients("MLP", tiny_nn(Tiny), 2, [3, 2], seed=4, loss="squared")
        nb02_micrograd.check_zero_grad("MLP", tiny_nn(Tiny), 2, [3, 1], seed=5)


def test_one_wrong_local_derivative_is_named_with_its_op():
    with pytest.raises(GraphMismatch) as caught:
        nb02_micrograd.compare_graph("Value", MulForgetsFactor, lambda a, b, c: (a * b + c) * a, [2.0, -3.0, 10.0])
    message = str(caught.value)
    # from the root down, the first wrong grad is the sum's (a * b + c): the root's * sent it 1, not a = 2
    assert message.splitlines()[0] == "Value: wrong gradient at n4 = n3 + c (op '+')"
    assert "in the expression n5 = ((a * b) + c) * a" in message
    assert "expected grad 2 (PyTorch, float64), got 1" in message
    suspect = [line for line in message.splitlines() if "<-- wrong" in line]
    assert len(suspect) == 1 and "n5 = n4 * a (op '*'" in suspect[0]
    assert caught.value.node.data == 4.0 and [c._op for c in caught.value.culprits] == ["*"]
    assert nb02_micrograd.last_mismatch is caught.value


def test_the_mismatch_keeps_the_graph_for_the_learners_own_draw_dot():
    with pytest.raises(GraphMismatch) as caught:
        nb02_micrograd.compare_graph("Value", MulForgetsFactor, lambda a, b: a * b + a, [2.0, -3.0])
    mismatch = caught.value
    assert "show_graph(draw_dot(nb02_micrograd.last_mismatch.root, highlight=nb02_micrograd.last_mismatch.node))" \
        in str(mismatch)
    assert mismatch.root.data == -4.0 and mismatch.node.data == 2.0  # the root a * b + a, the leaf a
    assert [c.data for c in mismatch.culprits] == [-6.0]  # the product sends a the wrong amount
    drawing = draw(mismatch.root, highlight=mismatch.node)
    red = [line for line in drawing.body if "fillcolor=red" in line]
    assert len(red) == 1 and "data 2.0000" in red[0]


def test_a_node_used_twice_with_assignment_gets_the_hint():
    with pytest.raises(GraphMismatch, match=r"add \(`\+=`\) both contributions"):
        nb02_micrograd.compare_graph("Value", Assigns, lambda a: a + a, [3.0])
    with pytest.raises(GraphMismatch, match=r"accumulate \(`\+=`\)"):
        nb02_micrograd.compare_graph("Value", Assigns, lambda a, b: a * b + a, [3.0, 2.0])


def test_a_missing_seed_is_reported_at_the_root():
    with pytest.raises(GraphMismatch, match=r"This is the root: backward\(\) must start by setting the root's grad"):
        nb02_micrograd.compare_graph("Value", NoSeed, lambda a, b: a * b, [3.0, 2.0])


def test_recursion_is_explained_on_a_deep_chain():
    with no_stderr(), pytest.raises(GradingError, match="RecursionError.*explicit stack"):
        nb02_micrograd.check_deep_chain("Value", Recursive, n_nodes=20_000)


def test_a_recursion_limit_raised_by_the_kernel_does_not_let_recursion_pass():
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(200_000)
    try:
        with pytest.raises(GradingError, match="RecursionError"):
            nb02_micrograd.check_deep_chain("Value", Recursive, n_nodes=20_000)
        assert sys.getrecursionlimit() == 200_000
    finally:
        sys.setrecursionlimit(previous)


def test_two_passes_must_accumulate_into_the_leaves():
    with pytest.raises(GradingError, match="PyTorch accumulates both passes"):
        nb02_micrograd.check_two_passes("Value", ResetsLeaves, lambda a, b: a * b, lambda a, b: a + b, [1.5, -2.0])


def test_a_wrong_forward_value_is_reported_before_any_gradient():
    class WrongTanh(Tiny):
        def tanh(self):
            return self._out(math.sinh(self.data), (self,), "tanh", (1.0,))

    with pytest.raises(GraphMismatch, match=r"wrong forward value at n1 = a.tanh\(\)"):
        nb02_micrograd.compare_graph("Value", WrongTanh, lambda a: a.tanh() * 2, [0.7])


def test_an_engine_that_is_not_implemented_says_so():
    class Stub(Tiny):
        def __add__(self, other):
            raise NotImplementedError()

    with pytest.raises(GradingError, match="not implemented yet"):
        nb02_micrograd.compare_graph("Value", Stub, lambda a, b: a + b, [1.0, 2.0])


def test_mlp_checks_catch_a_broken_zero_grad_and_restore_the_global_random_state():
    random.seed(123)
    state = random.getstate()
    with pytest.raises(GradingError, match="after model.zero_grad"):
        nb02_micrograd.check_zero_grad("MLP", tiny_nn(Tiny, zero_grad=False), 2, [3, 1], seed=5)
    assert random.getstate() == state


def test_mlp_gradients_name_the_parameter():
    MLP = tiny_nn(Tiny)
    nb02_micrograd.check_mlp_gradients("MLP", MLP, 2, [2, 1], seed=9)

    class MLPBiasAsPlainNumber(MLP):
        """Right outputs, but every bias enters as b.data: its gradient stays 0."""

        def __call__(self, x):
            for layer in self.layers:
                x = [(sum((wi * xi for wi, xi in zip(n.w, x)), 0) + n.b.data) for n in layer]
                x = [v.relu() for v in x] if layer is not self.layers[-1] else x
            return x[0] if len(x) == 1 else x

    bias = (r"wrong gradient for parameter #\d+ \(layer \d, neuron \d, its bias\): "
            r"expected \S+ \(PyTorch, same weights\), got 0")
    with pytest.raises(GradingError, match=bias):
        nb02_micrograd.check_mlp_gradients("MLP", MLPBiasAsPlainNumber, 2, [2, 1], seed=9)


def test_the_snapshot_walk_is_iterative_and_finds_each_node_once():
    node = GraphNode(0.0, 0.0)
    for k in range(50_000):
        node = GraphNode(float(k), 0.0, [node], "+")
    nodes, prevs = snapshots.reachable_nodes(node, lambda n: list(n.inputs))
    assert len(nodes) == 50_001 and nodes[0] is node and prevs[0] == [nodes[1]]
    a = GraphNode(1.0, 0.0)
    b = GraphNode(2.0, 0.0, [a], "**2")
    root = GraphNode(3.0, 0.0, [a, b], "+")
    nodes, _ = snapshots.reachable_nodes(root, lambda n: list(n.inputs))
    assert nodes[0] is root and sorted(map(id, nodes)) == sorted(map(id, (a, b, root)))


def test_the_snapshot_walk_is_not_an_answer_to_backward():
    """Its order is not a topological order: an engine that walks it backwards gets a DAG wrong."""
    class WalksTheSnapshotOrder(Tiny):
        def backward(self):
            nodes, _ = snapshots.reachable_nodes(self, lambda n: list(n._prev))
            self.grad = 1.0
            for node in nodes:  # root first, but a node may come before one of its users
                node._backward()

    with pytest.raises(GraphMismatch, match="wrong gradient"):
        nb02_micrograd.check_random_expressions("Value", WalksTheSnapshotOrder, nb02_micrograd.ARITHMETIC_OPS,
                                                seed=7, count=20)


def test_random_expressions_are_seeded_share_nodes_and_stay_in_range():
    ops = nb02_micrograd.ARITHMETIC_OPS + nb02_micrograd.TRANSCENDENTAL_OPS
    tapes = [record(*random_expression(42, ops)) for _ in range(2)]
    assert [t.formula(i) for t, _ in tapes for i in range(len(t.steps))][:len(tapes[0][0].steps)] == \
        [tapes[1][0].formula(i) for i in range(len(tapes[1][0].steps))]
    shared = 0
    for seed in range(40):
        tape, root = record(*random_expression(seed, ops))
        shared += any(len(tape.users(i)) > 1 for i in range(len(tape.steps)))
        values = [t.item() for t in graph_checks.torch_replay(tape, "cpu")]
        assert all(1e-3 < abs(v) < 30 for v in values[:root]), values
    assert shared >= 30, "most random expressions should reuse a node"


def draw(root, highlight=None):
    """A correct draw_dot: one record per value (data and grad), one node per op."""
    dot = graphviz.Digraph()
    seen, stack = {root}, [root]
    while stack:
        node = stack.pop()
        colour = {"style": "filled", "fillcolor": "red"} if node is highlight else {}
        dot.node(str(id(node)), label=f"{{ data {node.data:.4f} | grad {node.grad:.4f} }}", shape="record", **colour)
        if node._op:
            dot.node(str(id(node)) + "op", label=node._op)
            dot.edge(str(id(node)) + "op", str(id(node)))
        for child in node._prev:
            dot.edge(str(id(child)), str(id(node)) + "op")
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return dot


def test_check_drawing_accepts_a_drawing_and_rejects_a_duplicate():
    for root, what in nb02_micrograd.value_graphs(seed=3):
        nb02_micrograd.check_drawing("draw_dot", draw, root, what=what)

    def draw_twice(root):
        dot = draw(root)
        dot.node("copy", label=f"{{ data {root.data:.4f} | grad {root.grad:.4f} }}", shape="record")
        return dot

    root = nb02_micrograd.value_graphs(seed=3)[1][0]
    with pytest.raises(GradingError, match="drawn 2 times"):
        nb02_micrograd.check_drawing("draw_dot", draw_twice, root, what="a + a")


# --- trusted grading: the engine runs in a driver (the kernel), the comparisons here ---------------


class KernelWithoutComparisons(mutation.Loopback):
    """A kernel where the submission has disabled every comparison it can reach."""

    def ask(self, request, response):
        always = lambda *a, **k: True  # noqa: E731
        with mock.patch.object(engine_values, "within_float64_tolerance", always), \
                mock.patch.object(graph_checks, "within_float64_tolerance", always), \
                mock.patch.object(mlp, "within_float64_tolerance", always), \
                mock.patch.object(math, "isclose", always):
            super().ask(request, response)


def run_trusted(source, namespace, kernel=mutation.Loopback):
    """Run a test cell as trusted grading does: the names in `namespace` are stand-ins, reached
    only through `kernel` (data-only answers); return the cell's error (None if it passed) and
    every answer that came back."""
    answers = []

    class Recording(kernel):
        def call(self, exercise, fn, args, options):
            answers.append(super().call(exercise, fn, args, options))
            return answers[-1]

    with mock.patch.object(mutation, "Loopback", Recording), no_stderr():
        err = mutation._run_cell(source, "test", {"__name__": "__main__", **namespace}, True)
    return err, answers


def only_data(answer):
    """Whether an answer is plain data all the way down (no engine objects, nothing opaque)."""
    if isinstance(answer, dict):
        return all(only_data(k) and only_data(v) for k, v in answer.items())
    if isinstance(answer, (list, tuple)):
        return all(only_data(v) for v in answer)
    return answer is None or isinstance(answer, (bool, int, float, str))


ENGINE_CELL = """
from autograder.checks import nb02_micrograd
nb02_micrograd.compare_graph("Value", Value, lambda a, b, c: (a * b + c) * a, [2.0, -3.0, 10.0])
nb02_micrograd.check_each_op("Value", Value, ("*", "+", "relu", "tanh"), seed=1, repeats=1)
nb02_micrograd.check_random_expressions("Value", Value, nb02_micrograd.ARITHMETIC_OPS, seed=2, count=5)
nb02_micrograd.check_two_passes("Value", Value, lambda a, b: a * b, lambda a, b: a + b * b, [1.5, -2.0])
nb02_micrograd.check_deep_chain("Value", Value, n_nodes=20_000)
"""


@pytest.mark.parametrize("kernel", [mutation.Loopback, KernelWithoutComparisons])
@pytest.mark.parametrize("engine, words", [
    (Tiny, None),
    (MulForgetsFactor, "wrong gradient at n4 = n3 + c (op '+')"),
    (NoSeed, "This is the root"),
    (ResetsLeaves, "PyTorch accumulates both passes"),
    (Recursive, "raised RecursionError"),
], ids=lambda v: getattr(v, "__name__", None))
def test_trusted_engine_checks_build_graphs_in_the_kernel_and_compare_here(engine, words, kernel):
    err, answers = run_trusted(ENGINE_CELL, {"Value": engine}, kernel)
    if words is None:
        assert err is None
    else:
        assert isinstance(err, GradingError) and words in str(err), err
    assert answers and all(only_data(a) for a in answers)
    # graphs come back as JSON snapshots, the chain of 20,000 nodes as four numbers
    assert max(len(repr(a)) for a in answers) < 50_000


def test_a_trusted_mismatch_reads_as_in_plain_mode_and_keeps_the_snapshot():
    build, values = "lambda a, b: a * b + a", [2.0, -3.0]
    with pytest.raises(GraphMismatch) as plain:
        nb02_micrograd.compare_graph("Value", MulForgetsFactor, eval(build), values)
    err, answers = run_trusted(f"from autograder.checks import nb02_micrograd\n"
                               f"nb02_micrograd.compare_graph('Value', Value, {build}, {values})",
                               {"Value": MulForgetsFactor})
    assert isinstance(err, GraphMismatch) and str(err) == str(plain.value)
    assert nb02_micrograd.last_mismatch is err  # kept in the grader, where the message is shown
    assert len(answers) == 2  # the graphs, then what each user's _backward sends (only once it failed)
    assert err.node.data == 2.0 and [c.data for c in err.culprits] == [-6.0]
    red = [line for line in draw(err.root, highlight=err.node).body if "fillcolor=red" in line]
    assert len(red) == 1 and "data 2.0000" in red[0]


def test_a_trusted_wrong_forward_value_keeps_the_graph_before_backward():
    class WrongExp(Tiny):
        def exp(self):
            return self._out(self.data, (self,), "exp", (1.0,))

    err, _ = run_trusted("from autograder.checks import nb02_micrograd\n"
                         "nb02_micrograd.compare_graph('Value', Value, lambda a: a.exp() * 3, [0.5])",
                         {"Value": WrongExp})
    assert isinstance(err, GraphMismatch) and "wrong forward value at n1 = a.exp()" in str(err)
    assert err.node.data == 0.5 and err.root.grad == 0.0  # as the graph was before backward()


MLP_CELL = """
from autograder.checks import nb02_micrograd
nb02_micrograd.check_mlp_gradients("MLP", MLP, 2, [3, 1], seed=0, samples=3)
nb02_micrograd.check_mlp_gradients("MLP", MLP, 2, [2, 2], seed=1, samples=3, loss="squared")
nb02_micrograd.check_zero_grad("MLP", MLP, 2, [3, 1], seed=2)
"""


class MLPBiasAsNumber(tiny_nn(Tiny)):
    """Right outputs, but every bias enters as b.data: its gradient stays 0."""

    def __call__(self, x):
        for layer in self.layers:
            x = [(sum((wi * xi for wi, xi in zip(n.w, x)), 0) + n.b.data) for n in layer]
            x = [v.relu() for v in x] if layer is not self.layers[-1] else x
        return x[0] if len(x) == 1 else x


class MLPAlwaysList(tiny_nn(Tiny)):
    def __call__(self, x):
        out = super().__call__(x)
        return out if isinstance(out, list) else [out]


class MLPNewParameters(tiny_nn(Tiny)):
    def parameters(self):
        return [Tiny(p.data) for p in super().parameters()]


@pytest.mark.parametrize("kernel", [mutation.Loopback, KernelWithoutComparisons])
@pytest.mark.parametrize("mlp, words", [
    (tiny_nn(Tiny), None),
    (MLPBiasAsNumber, "its bias): expected"),
    (MLPAlwaysList, "with one output neuron, model(x) should return that Value itself"),
    (tiny_nn(Tiny, zero_grad=False), "after model.zero_grad()"),
    (MLPNewParameters, "wrong gradient for parameter #0"),
], ids=lambda v: getattr(v, "__name__", None))
def test_trusted_mlp_checks_return_parameters_as_floats(mlp, words, kernel):
    random.seed(7)
    state = random.getstate()
    err, answers = run_trusted(MLP_CELL, {"MLP": mlp}, kernel)
    if words is None:
        assert err is None
    else:
        assert isinstance(err, GradingError) and words in str(err), err
    assert answers and all(only_data(a) for a in answers)
    assert random.getstate() == state


def test_trusted_draw_dot_comes_back_as_the_digraphs_lines():
    def draw_twice(root):
        dot = draw(root)
        dot.node("copy", label=f"{{ data {root.data:.4f} | grad {root.grad:.4f} }}", shape="record")
        return dot

    cell = ("from autograder.checks import nb02_micrograd\n"
            "for root, what in nb02_micrograd.value_graphs(seed=3):\n"
            "    nb02_micrograd.check_drawing('draw_dot', draw_dot, root, what=what)\n")
    for drawer, words in [(draw, None), (draw_twice, "drawn 2 times"),
                          (lambda root: draw(root).source, "should return a graphviz.Digraph, got str")]:
        err, answers = run_trusted(cell, {"draw_dot": drawer})
        assert (err is None) if words is None else (isinstance(err, GradingError) and words in str(err)), err
        assert all(only_data(a) for a in answers)


# --- special points: where right-looking local derivatives break ------------------------------------------
class TanhFromExp(Tiny):
    """tanh as (e^2x - 1) / (e^2x + 1): right until e^2x overflows a Python float."""

    def tanh(self):
        e = math.exp(2 * self.data)
        t = (e - 1) / (e + 1)
        return self._out(t, (self,), "tanh", (1 - t * t,))


class ReluOneAtZero(Tiny):
    def relu(self):
        return self._out(max(self.data, 0.0), (self,), "ReLU", (float(self.data >= 0),))


class PowFromOutput(Tiny):
    """d x^k / dx written from the output, k x^k / x: right except at x = 0."""

    def __pow__(self, k):
        out = self.data ** k
        return self._out(out, (self,), f"**{k}", (k * out / self.data,))


@pytest.mark.parametrize("engine, ops, words", [
    (Tiny, nb02_micrograd.ARITHMETIC_OPS + nb02_micrograd.TRANSCENDENTAL_OPS, None),
    (TanhFromExp, nb02_micrograd.TRANSCENDENTAL_OPS, "OverflowError"),
    (ReluOneAtZero, nb02_micrograd.ARITHMETIC_OPS, "the mask is x > 0, not x >= 0"),
    (PowFromOutput, nb02_micrograd.ARITHMETIC_OPS, "ZeroDivisionError"),
], ids=lambda v: getattr(v, "__name__", None))
def test_special_points_catch_what_random_points_miss(engine, ops, words):
    nb02_micrograd.check_each_op("Value", engine, ops, seed=3, repeats=2)  # every engine here passes these
    if words is None:
        nb02_micrograd.check_special_points("Value", engine, ops)
        return
    with pytest.raises(GradingError) as info:
        nb02_micrograd.check_special_points("Value", engine, ops)
    assert "Value: fails for the special points of the function" in str(info.value) and words in str(info.value)
