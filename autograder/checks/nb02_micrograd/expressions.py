"""Expressions written once and replayed on any engine: the tape that scalar-engine checks share.

Why a tape: a grade cell writes an expression such as `lambda a, b: (a * b + 2).relu()` once.
Run on symbolic leaves (`Expr`), it records its steps; the steps are then replayed with the
learner's `Value` (in the learner's kernel) and with PyTorch 0-d float64 tensors (in the grader),
so every node has a reference value and gradient. The tape's order is the order the expression
computed its nodes, each after its inputs: the checks compare nodes in reverse tape order, which
is the order a correct backward() visits them, without ever sorting the learner's graph.
"""
import math
import random

# op name -> how it is computed on any engine (learner Values, torch tensors, Exprs)
OPERATIONS = {
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
ARITHMETIC_OPS = ("*", "+", "-", "/", "**", "neg", "relu")  # what micrograd 0.1.0's Value has
TRANSCENDENTAL_OPS = ("tanh", "exp", "log")


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
                nodes.append(OPERATIONS[op](*[nodes[a.index] if isinstance(a, Expr) else a for a in args]))
        return nodes

    def replay_on(self, leaves):
        """Every node, computed from the given leaf nodes (in the tape's leaf order) by their own engine."""
        given = iter(leaves)
        return self.replay(lambda value: next(given))

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


def op_forms(op):
    """Every way of writing `op` (Value with Value, a number on either side): a list of (build,
    domain), where build takes (a, b, g), g carries an upstream gradient other than 1, and the
    domain ("positive" or None) says which values a and b may take."""
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
            nodes.append(OPERATIONS[op](*args))
        sinks = [n for n in nodes if id(n) not in used]
        root = sinks[0]
        for extra in sinks[1:]:
            root = root + extra
        return root

    return build, values[:leaves]
