"""Notebook 02: the bugs learners write in a scalar autograd engine, and engines written differently.

`AltValue` is a correct engine written independently of the reference solution: children kept in a
tuple (a node used twice appears twice), `-` and `/` with derivatives of their own, and Kahn's
algorithm (count the uses, release a node when all of them have sent their share) instead of a
depth-first sort. Every wrong `Value` below overrides exactly one method of it, so each entry shows
one bug and nothing else; nodes are made with `type(self)`, so an override reaches every node of a
graph. These entries run in-process only (tests/test_mutants.py injects the class under the name
`Value`).

The MLP grade cells use only the name `MLP` (and the Values it returns), so most MLP entries are
dicts {name: class} built on `AltValue`. The first wrong MLP entry is different on purpose: the
nbgrader end-to-end test pastes the source of the first wrong entry of the first graded name in
sorted order ("MLP") into a submission, renamed by its `def`, so it is a plain function that
carries its own little engine and needs nothing from this module.
"""
import functools

from mutants import right, wrong

NB = "02_micrograd"
wrong_ = functools.partial(wrong, NB)
right_ = functools.partial(right, NB)


# MLP(nin, nouts) -------------------------------------------------------------------------------
@wrong_("MLP", "parameters() leaves out the biases (self-contained: engine and layers inside)")
def mlp_without_biases(nin, nouts):
    import math
    import random

    class V:
        def __init__(self, data, children=(), op=""):
            self.data, self.grad, self._prev, self._op = data, 0.0, set(children), op
            self._backward = lambda: None

        def _wrap(self, other):
            return other if isinstance(other, V) else V(other)

        def __add__(self, other):
            other = self._wrap(other)
            out = V(self.data + other.data, (self, other), "+")

            def back():
                self.grad += out.grad
                other.grad += out.grad
            out._backward = back
            return out

        def __mul__(self, other):
            other = self._wrap(other)
            out = V(self.data * other.data, (self, other), "*")

            def back():
                self.grad += other.data * out.grad
                other.grad += self.data * out.grad
            out._backward = back
            return out

        def __pow__(self, k):
            out = V(self.data ** k, (self,), f"**{k}")

            def back():
                self.grad += k * self.data ** (k - 1) * out.grad
            out._backward = back
            return out

        def relu(self):
            out = V(max(self.data, 0.0), (self,), "ReLU")

            def back():
                self.grad += (out.data > 0) * out.grad
            out._backward = back
            return out

        def tanh(self):
            out = V(math.tanh(self.data), (self,), "tanh")

            def back():
                self.grad += (1 - out.data ** 2) * out.grad
            out._backward = back
            return out

        def backward(self):
            order, seen, stack = [], {self}, [(self, iter(self._prev))]
            while stack:
                node, inputs = stack[-1]
                for child in inputs:
                    if child not in seen:
                        seen.add(child)
                        stack.append((child, iter(child._prev)))
                        break
                else:
                    stack.pop()
                    order.append(node)
            self.grad = 1.0
            for node in reversed(order):
                node._backward()

        __radd__ = __add__
        __rmul__ = __mul__

        def __neg__(self):
            return self * -1

        def __sub__(self, other):
            return self + (-other)

        def __rsub__(self, other):
            return other + (-self)

        def __truediv__(self, other):
            return self * other ** -1

        def __rtruediv__(self, other):
            return other * self ** -1

    class Neuron:
        def __init__(self, n, nonlin):
            self.w = [V(random.uniform(-1, 1)) for _ in range(n)]
            self.b, self.nonlin = V(0.0), nonlin

        def __call__(self, x):
            act = sum((wi * xi for wi, xi in zip(self.w, x)), self.b)
            return act.relu() if self.nonlin else act

    class Model:
        def __init__(self):
            sizes = [nin] + list(nouts)
            self.layers = [[Neuron(sizes[i], i != len(nouts) - 1) for _ in range(sizes[i + 1])]
                           for i in range(len(nouts))]

        def __call__(self, x):
            for layer in self.layers:
                x = [neuron(x) for neuron in layer]
            return x[0] if len(x) == 1 else x

        def parameters(self):
            return [w for layer in self.layers for neuron in layer for w in neuron.w]  # the bug: no biases

        def zero_grad(self):
            for p in self.parameters():
                p.grad = 0.0

    return Model()


# Value(data, _children=(), _op="") ------------------------------------------------------------
class AltValue:
    """A correct engine, written differently from the reference solution."""

    def __init__(self, data, _children=(), _op=""):
        self.data = data
        self.grad = 0
        self._prev = tuple(_children)
        self._op = _op
        self._backward = lambda: None

    def _lift(self, other):
        return other if isinstance(other, AltValue) else type(self)(other)

    def _make(self, data, children, op, local_grads):
        """A result whose _backward sends local_grads[i] * out.grad to children[i]."""
        out = type(self)(data, children, op)

        def _backward():
            for child, local in zip(children, local_grads):
                child.grad += local * out.grad
        out._backward = _backward
        return out

    def __add__(self, other):
        other = self._lift(other)
        return self._make(self.data + other.data, (self, other), "+", (1.0, 1.0))

    def __sub__(self, other):
        other = self._lift(other)
        return self._make(self.data - other.data, (self, other), "-", (1.0, -1.0))

    def __mul__(self, other):
        other = self._lift(other)
        return self._make(self.data * other.data, (self, other), "*", (other.data, self.data))

    def __truediv__(self, other):
        other = self._lift(other)
        return self._make(self.data / other.data, (self, other), "/",
                          (1 / other.data, -self.data / other.data ** 2))

    def __pow__(self, k):
        return self._make(self.data ** k, (self,), f"**{k}", (k * self.data ** (k - 1),))

    def __neg__(self):
        return self._make(-self.data, (self,), "neg", (-1.0,))

    def __radd__(self, other):
        return self._lift(other) + self

    def __rsub__(self, other):
        return self._lift(other) - self

    def __rmul__(self, other):
        return self._lift(other) * self

    def __rtruediv__(self, other):
        return self._lift(other) / self

    def relu(self):
        return self._make(self.data if self.data > 0 else 0.0, (self,), "ReLU", (1.0 if self.data > 0 else 0.0,))

    def tanh(self):
        import math
        t = math.tanh(self.data)
        return self._make(t, (self,), "tanh", (1 - t * t,))

    def exp(self):
        import math
        e = math.exp(self.data)
        return self._make(e, (self,), "exp", (e,))

    def log(self):
        import math
        return self._make(math.log(self.data), (self,), "log", (1 / self.data,))

    def backward(self):
        uses, nodes, stack = {}, {id(self): self}, [self]
        while stack:  # count, for every node, how many times it is used
            node = stack.pop()
            for child in node._prev:
                uses[id(child)] = uses.get(id(child), 0) + 1
                if id(child) not in nodes:
                    nodes[id(child)] = child
                    stack.append(child)
        self.grad = 1
        ready = [self]
        while ready:  # a node is ready once every use has sent its share
            node = ready.pop()
            node._backward()
            for child in node._prev:
                uses[id(child)] -= 1
                if uses[id(child)] == 0:
                    ready.append(child)

    def __repr__(self):
        return f"AltValue(data={self.data}, grad={self.grad})"


right_("Value", "Kahn's algorithm, tuple children, - and / with derivatives of their own")(AltValue)


@wrong_("Value", "assigns (=) instead of adding (+=) in the _backward of + and *")
class ValueAssigns(AltValue):
    def __add__(self, other):
        other = self._lift(other)
        out = type(self)(self.data + other.data, (self, other), "+")

        def _backward():
            self.grad = out.grad
            other.grad = out.grad
        out._backward = _backward
        return out

    def __mul__(self, other):
        other = self._lift(other)
        out = type(self)(self.data * other.data, (self, other), "*")

        def _backward():
            self.grad = other.data * out.grad
            other.grad = self.data * out.grad
        out._backward = _backward
        return out


@wrong_("Value", "* forgets a local derivative factor: self receives out.grad, not other.data * out.grad")
class ValueMulWithoutFactor(AltValue):
    def __mul__(self, other):
        other = self._lift(other)
        return self._make(self.data * other.data, (self, other), "*", (1.0, self.data))


@wrong_("Value", "** derivative k * x**k: the exponent is not lowered")
class ValuePowNotLowered(AltValue):
    def __pow__(self, k):
        return self._make(self.data ** k, (self,), f"**{k}", (k * self.data ** k,))


@wrong_("Value", "relu passes the gradient on the wrong side (where the input is negative)")
class ValueReluWrongSide(AltValue):
    def relu(self):
        return self._make(max(self.data, 0.0), (self,), "ReLU", (1.0 if self.data < 0 else 0.0,))


@wrong_("Value", "tanh derivative from the input: 1 - x**2 instead of 1 - tanh(x)**2")
class ValueTanhFromInput(AltValue):
    def tanh(self):
        import math
        return self._make(math.tanh(self.data), (self,), "tanh", (1 - self.data ** 2,))


@wrong_("Value", "micrograd's recursive topological sort: RecursionError on deep graphs")
class ValueRecursiveSort(AltValue):
    def backward(self):
        order, visited = [], set()

        def visit(node):
            if id(node) not in visited:
                visited.add(id(node))
                for child in node._prev:
                    visit(child)
                order.append(node)
        visit(self)
        self.grad = 1
        for node in reversed(order):
            node._backward()


@wrong_("Value", "backward() never seeds the root with 1")
class ValueNoSeed(AltValue):
    def backward(self):
        order, seen, stack = [], {id(self)}, [(self, iter(self._prev))]
        while stack:
            node, inputs = stack[-1]
            for child in inputs:
                if id(child) not in seen:
                    seen.add(id(child))
                    stack.append((child, iter(child._prev)))
                    break
            else:
                stack.pop()
                order.append(node)
        for node in reversed(order):
            node._backward()


@wrong_("Value", "backward() calls the _backward functions in topological order, leaves first")
class ValueForwardOrder(AltValue):
    def backward(self):
        order, seen, stack = [], {id(self)}, [(self, iter(self._prev))]
        while stack:
            node, inputs = stack[-1]
            for child in inputs:
                if id(child) not in seen:
                    seen.add(id(child))
                    stack.append((child, iter(child._prev)))
                    break
            else:
                stack.pop()
                order.append(node)
        self.grad = 1
        for node in order:
            node._backward()


@wrong_("Value", "exp derivative from the input: x * out.grad instead of exp(x) * out.grad")
class ValueExpFromInput(AltValue):
    def exp(self):
        import math
        return self._make(math.exp(self.data), (self,), "exp", (self.data,))


@wrong_("Value", "tanh as (e^2x - 1) / (e^2x + 1), as in the micrograd lecture: OverflowError once e^2x passes "
        "a Python float's range (x > 354)", says="the special points of the function")
class ValueTanhFromExp(AltValue):
    def tanh(self):
        import math
        e = math.exp(2 * self.data)
        t = (e - 1) / (e + 1)
        return self._make(t, (self,), "tanh", (1 - t * t,))


@wrong_("Value", "tanh as (e^x - e^-x) / (e^x + e^-x): OverflowError at |x| > 709",
        says="the special points of the function")
class ValueTanhFromSinhCosh(AltValue):
    def tanh(self):
        import math
        up, down = math.exp(self.data), math.exp(-self.data)
        t = (up - down) / (up + down)
        return self._make(t, (self,), "tanh", (1 - t * t,))


@wrong_("Value", "tanh's derivative as 1 / cosh(x)**2: OverflowError at |x| > 710",
        says="the special points of the function")
class ValueTanhDerivativeFromCosh(AltValue):
    def tanh(self):
        import math
        return self._make(math.tanh(self.data), (self,), "tanh", (1 / math.cosh(self.data) ** 2,))


@wrong_("Value", "relu's derivative 1 where x >= 0: 1 at the kink, where PyTorch has 0",
        says="the special points of the function")
class ValueReluOneAtZero(AltValue):
    def relu(self):
        return self._make(max(self.data, 0.0), (self,), "ReLU", (1.0 if self.data >= 0 else 0.0,))


@wrong_("Value", "** derivative from the output, k * out / x: ZeroDivisionError at x = 0",
        says="the special points of the function")
class ValuePowFromOutput(AltValue):
    def __pow__(self, k):
        out = self.data ** k
        return self._make(out, (self,), f"**{k}", (k * out / self.data,))


@wrong_("Value", "backward() follows the order the course's snapshot walk finds nodes in (not topological)")
class ValueSnapshotOrder(AltValue):
    def backward(self):
        from autograder.checks.nb02_micrograd.snapshots import reachable_nodes
        nodes, _ = reachable_nodes(self, lambda node: list(node._prev))
        self.grad = 1
        for node in nodes:  # the root first, but a node may come before one of its users
            node._backward()


@wrong_("Value", "lets PyTorch's autograd compute the gradients (a 0-d tensor behind every Value)")
class ValueOnTorchAutograd(AltValue):
    def _make(self, data, children, op, local_grads):
        import torch
        out = type(self)(data, children, op)
        out.tensor = sum((torch.as_tensor(local, dtype=torch.float64) * child._tensor() for child, local
                          in zip(children, local_grads)), torch.zeros((), dtype=torch.float64))
        return out

    def _tensor(self):
        import torch
        if getattr(self, "tensor", None) is None:  # a leaf: a tensor that requires grad
            self.tensor = torch.tensor(float(self.data), dtype=torch.float64, requires_grad=True)
        return self.tensor

    def backward(self):
        import torch
        self.grad = 1
        leaves = [node for node in _nodes(self) if not node._prev]
        grads = torch.autograd.grad(self._tensor(), [leaf._tensor() for leaf in leaves], allow_unused=True)
        for leaf, grad in zip(leaves, grads):
            leaf.grad += 0.0 if grad is None else grad.item()


def _nodes(root):
    seen, stack = {id(root): root}, [root]
    while stack:
        for child in stack.pop()._prev:
            if id(child) not in seen:
                seen[id(child)] = child
                stack.append(child)
    return list(seen.values())


@right_("Value", "micrograd's engine with tanh, exp, log added and its sort made iterative")
class MicroValue:
    def __init__(self, data, _children=(), _op=''):
        self.data = data
        self.grad = 0
        self._backward = lambda: None
        self._prev = set(_children)
        self._op = _op

    def __add__(self, other):
        other = other if isinstance(other, MicroValue) else MicroValue(other)
        out = MicroValue(self.data + other.data, (self, other), '+')

        def _backward():
            self.grad += out.grad
            other.grad += out.grad
        out._backward = _backward
        return out

    def __mul__(self, other):
        other = other if isinstance(other, MicroValue) else MicroValue(other)
        out = MicroValue(self.data * other.data, (self, other), '*')

        def _backward():
            self.grad += other.data * out.grad
            other.grad += self.data * out.grad
        out._backward = _backward
        return out

    def __pow__(self, other):
        assert isinstance(other, (int, float)), "only supporting int/float powers for now"
        out = MicroValue(self.data**other, (self,), f'**{other}')

        def _backward():
            self.grad += (other * self.data**(other-1)) * out.grad
        out._backward = _backward
        return out

    def relu(self):
        out = MicroValue(0 if self.data < 0 else self.data, (self,), 'ReLU')

        def _backward():
            self.grad += (out.data > 0) * out.grad
        out._backward = _backward
        return out

    def tanh(self):
        import math
        out = MicroValue(math.tanh(self.data), (self,), 'tanh')

        def _backward():
            self.grad += (1 - out.data**2) * out.grad
        out._backward = _backward
        return out

    def exp(self):
        import math
        out = MicroValue(math.exp(self.data), (self,), 'exp')

        def _backward():
            self.grad += out.data * out.grad
        out._backward = _backward
        return out

    def log(self):
        import math
        out = MicroValue(math.log(self.data), (self,), 'log')

        def _backward():
            self.grad += (1 / self.data) * out.grad
        out._backward = _backward
        return out

    def backward(self):
        topo, visited, stack = [], set(), [(self, False)]
        while stack:  # two visits per node: expand, then emit once its inputs are emitted
            v, expanded = stack.pop()
            if expanded:
                topo.append(v)
            elif v not in visited:
                visited.add(v)
                stack.append((v, True))
                stack.extend((child, False) for child in v._prev)
        self.grad = 1
        for v in reversed(topo):
            v._backward()

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
        return self * other**-1

    def __rtruediv__(self, other):
        return other * self**-1


# MLP built on AltValue: dicts of names ---------------------------------------------------------
class AltModule:
    def zero_grad(self):
        for p in self.parameters():
            p.grad = 0

    def parameters(self):
        return []


class AltNeuron(AltModule):
    def __init__(self, nin, nonlin=True):
        import random
        self.w = [AltValue(random.uniform(-1, 1)) for _ in range(nin)]
        self.b = AltValue(0)
        self.nonlin = nonlin

    def __call__(self, x):
        act = self.b
        for wi, xi in zip(self.w, x):
            act = act + wi * xi
        return act.relu() if self.nonlin else act

    def parameters(self):
        return [*self.w, self.b]


class AltLayer(AltModule):
    neuron_class = AltNeuron

    def __init__(self, nin, nout, **kw):
        self.neurons = [self.neuron_class(nin, **kw) for _ in range(nout)]

    def __call__(self, x):
        outs = [n(x) for n in self.neurons]
        return outs if len(outs) > 1 else outs[0]

    def parameters(self):
        params = []
        for n in self.neurons:
            params.extend(n.parameters())
        return params


class AltMLP(AltModule):
    layer_class = AltLayer

    def __init__(self, nin, nouts):
        sizes = [nin, *nouts]
        self.layers = [self.layer_class(a, b, nonlin=k < len(nouts) - 1)
                       for k, (a, b) in enumerate(zip(sizes, sizes[1:]))]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def parameters(self):
        return [p for layer in self.layers for p in layer.parameters()]

    def zero_grad(self):  # written differently: through the layers and neurons
        for layer in self.layers:
            for n in layer.neurons:
                for p in n.parameters():
                    p.grad = 0.0


class Names(dict):
    """{name: class}: an entry of several names (a dict that can carry the catalogue's `says`)."""


def _mlp_names(neuron=AltNeuron, layer=None, mlp=None, **overrides):
    """{Value, Neuron, Layer, MLP} on AltValue, with some classes replaced."""
    layer = layer or type("Layer", (AltLayer,), {"neuron_class": neuron})
    mlp = mlp or type("MLP", (AltMLP,), {"layer_class": layer, **overrides})
    return Names(Value=AltValue, Neuron=neuron, Layer=layer, MLP=mlp)


right_("MLP", "explicit loops, zero_grad through the layers, on AltValue")(_mlp_names())


class NeuronWithoutBias(AltNeuron):
    def __call__(self, x):
        act = sum(wi * xi for wi, xi in zip(self.w, x))  # the bug: b never enters
        return act.relu() if self.nonlin else act


class NeuronAlwaysRelu(AltNeuron):
    def __call__(self, x):
        act = sum((wi * xi for wi, xi in zip(self.w, x)), self.b)
        return act.relu()  # the bug: the last layer (nonlin=False) gets a ReLU too


class LayerAlwaysList(AltLayer):
    def __call__(self, x):
        return [n(x) for n in self.neurons]  # the bug: a one-neuron layer returns a list


def _zero_grad_does_nothing(self):
    pass  # the bug: gradients are never cleared


def _zero_grad_to_none(self):
    for p in self.parameters():
        p.grad = None  # the bug: the next backward() cannot add to None


wrong_("MLP", "Neuron forgets the bias in w . x + b")(_mlp_names(neuron=NeuronWithoutBias))
wrong_("MLP", "Neuron applies ReLU even when nonlin=False (last layer not linear)")(_mlp_names(neuron=NeuronAlwaysRelu))
wrong_("MLP", "Layer returns a list even for one neuron")(
    _mlp_names(layer=type("Layer", (LayerAlwaysList,), {"neuron_class": AltNeuron})))
wrong_("MLP", "zero_grad() does nothing")(_mlp_names(zero_grad=_zero_grad_does_nothing))
wrong_("MLP", "zero_grad() sets the gradients to None")(_mlp_names(zero_grad=_zero_grad_to_none))


# draw_dot(root) --------------------------------------------------------------------------------
@wrong_("draw_dot", "draws only the root and its direct inputs")
def draw_only_top(root, highlight=None):
    import graphviz
    dot = graphviz.Digraph()
    dot.node(str(id(root)), label=f"{{ data {root.data:.4f} | grad {root.grad:.4f} }}", shape="record")
    for child in root._prev:
        dot.node(str(id(child)), label=f"{{ data {child.data:.4f} | grad {child.grad:.4f} }}", shape="record")
        dot.edge(str(id(child)), str(id(root)), label=root._op)
    return dot


@wrong_("draw_dot", "labels show the data but not the grad")
def draw_without_grad(root, highlight=None):
    import graphviz
    dot = graphviz.Digraph(graph_attr={"rankdir": "LR"})
    seen, stack = {root}, [root]
    while stack:
        node = stack.pop()
        dot.node(str(id(node)), label=f"data {node.data:.4f}", shape="box")
        if node._op:
            dot.node(str(id(node)) + "op", label=node._op)
            dot.edge(str(id(node)) + "op", str(id(node)))
        for child in node._prev:
            dot.edge(str(id(child)), str(id(node)) + "op")
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return dot


@wrong_("draw_dot", "returns the DOT source text instead of the Digraph")
def draw_source_text(root, highlight=None):
    import graphviz
    dot = graphviz.Digraph()
    seen, stack = {root}, [root]
    while stack:
        node = stack.pop()
        dot.node(str(id(node)), label=f"{{ data {node.data:.4f} | grad {node.grad:.4f} }}", shape="record")
        for child in node._prev:
            dot.edge(str(id(child)), str(id(node)), label=node._op)
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return dot.source


@wrong_("draw_dot", "walks the graph as a tree: a node used twice is drawn twice")
def draw_as_tree(root, highlight=None):
    import itertools

    import graphviz
    dot = graphviz.Digraph(graph_attr={"rankdir": "LR"})
    names = itertools.count()
    stack = [(root, None)]
    while stack:
        node, parent_op = stack.pop()
        name = f"n{next(names)}"  # a fresh name at every visit: no memory of what was drawn
        dot.node(name, label=f"{{ data {node.data:.4f} | grad {node.grad:.4f} }}", shape="record")
        if parent_op:
            dot.edge(name, parent_op)
        if node._op:
            dot.node(name + "op", label=node._op)
            dot.edge(name + "op", name)
        stack.extend((child, name + "op") for child in node._prev)
    return dot


@wrong_("draw_dot", "no set of nodes already drawn: a reused node's arrows drawn again, the walk doubles per level")
def draw_without_memory(root, highlight=None):
    import graphviz
    dot = graphviz.Digraph(graph_attr={"rankdir": "LR"})
    stack = [root]
    while stack:
        node = stack.pop()
        uid = str(id(node))
        dot.node(uid, label=f"{{ data {node.data:.4f} | grad {node.grad:.4f} }}", shape="record")
        if node._op:
            dot.node(uid + node._op, label=node._op)
            dot.edge(uid + node._op, uid)
        for child in node._prev:
            dot.edge(str(id(child)), uid + node._op)
            stack.append(child)  # the bug: pushed again each time it is reached
    return dot


@wrong_("draw_dot", "leaves the operations out of the drawing")
def draw_without_ops(root, highlight=None):
    import graphviz
    dot = graphviz.Digraph(graph_attr={"rankdir": "LR"})
    seen, stack = {root}, [root]
    while stack:
        node = stack.pop()
        dot.node(str(id(node)), label=f"{{ data {node.data:.4f} | grad {node.grad:.4f} }}", shape="record")
        for child in node._prev:
            dot.edge(str(id(child)), str(id(node)))
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return dot


@right_("draw_dot", "breadth-first, names from a counter, plain-text labels with two decimals")
def draw_breadth_first(root, highlight=None):
    import collections

    import graphviz
    dot = graphviz.Digraph(graph_attr={"rankdir": "LR"}, node_attr={"shape": "box"})
    names = {}
    queue = collections.deque([root])
    names[id(root)] = "v0"
    while queue:
        node = queue.popleft()
        name = names[id(node)]
        extra = {"color": "red", "style": "filled"} if node is highlight else {}
        dot.node(name, label=f"data={node.data:.2f}\\ngrad={node.grad:.2f}", **extra)
        if node._prev:
            dot.node(name + "_op", label=node._op or "?", shape="circle")
            dot.edge(name + "_op", name)
        for child in node._prev:
            if id(child) not in names:
                names[id(child)] = f"v{len(names)}"
                queue.append(child)
            dot.edge(names[id(child)], name + "_op")
    return dot


@right_("draw_dot", "HTML-like labels, ops as edge-free records next to their result")
def draw_html_labels(root, highlight=None):
    import graphviz
    dot = graphviz.Digraph()
    seen, stack = set(), [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        op = f"<br/><i>{node._op}</i>" if node._op else ""
        dot.node(f"node{id(node)}", label=f"<<b>{node.data:.3f}</b><br/>grad {node.grad:.3f}{op}>", shape="plaintext")
        for child in node._prev:
            dot.edge(f"node{id(child)}", f"node{id(node)}")
            stack.append(child)
    return dot
