"""grad_fn_names: graphs that tell a correct breadth-first walk from the usual slips, and its check.

The reference walk is an answer, so it is not here: a check takes the expected names literally
(visible tests, small graphs) or a reference function (hidden tests: the course's answer key).
"""
import functools

import torch
import torch.nn.functional as F

from autograder import checks
from autograder.checks import GradingError
from autograder.checks.nb04_toggles.cases import GRAD_ON, run_case, summary, type_name
from autograder.checks.nb04_toggles.models import tanh_mlp
from autograder.learner import inputs
from autograder.learner.device import get_device

# Deeper than Python's default recursion limit (1000 nested calls): a walk that recurses once per
# level of the graph stops with a RecursionError, as 02's recursive topological sort would.
DEEP = 4000


class _Double(torch.autograd.Function):
    """2 x, as a custom Function: its node is called _DoubleBackward."""

    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


def autograd_graphs(seed, dtype=torch.float64, device=None):
    """[(description, build)]: autograd graphs that tell a breadth-first walk that visits each node once
    apart from the usual slips (depth first, duplicates, names merged, None entries, roots, leaves,
    recursion that a deep graph exhausts).

    `build()` makes the graph afresh from leaves drawn here: a graph cannot be sent to the learner's
    kernel (pickling keeps a tensor's values, not its grad_fn), a builder and its leaves can."""
    device = device or get_device()

    def leaf(*shape, k):
        return inputs.randn(*shape, seed=seed + k, dtype=dtype, device=device).requires_grad_()

    def const(*shape, k):
        return inputs.randn(*shape, seed=seed + k, dtype=dtype, device=device)

    x, w, v = leaf(3, k=0), leaf(3, k=1), leaf(3, k=2)
    c = const(3, k=3)
    net = tanh_mlp([3, 4, 2], seed + 5, dtype, device)
    net_in, net_target = const(5, 3, k=6), const(5, 2, k=7)
    W_frozen = const(4, 3, k=8)
    A, B = leaf(2, 3, k=9), leaf(4, 2, k=10)
    lora_in = const(6, 3, k=11)

    def shared():
        h = x * w
        return h.sum() + h.mean()

    def in_place():
        y = x * 2
        y += 1
        return y.sum()

    def ladder():
        h = x
        for _ in range(60):
            h = torch.tanh(h) + h * 0.5  # every step uses the previous node twice
        return h.sum()

    def squared():
        h = x * w
        return (h * h).sum()

    def deep():
        h = x
        for _ in range(DEEP):
            h = torch.tanh(h)
        return h.sum()

    return [
        ("h = x * w; L = h.sum() + h.mean()  (h is shared)", shared),
        ("L = ((x * w) * (w * 3)).sum()  (three different MulBackward0 nodes)", lambda: ((x * w) * (w * 3)).sum()),
        ("L = (x * c + c).sum() with c a constant  (next_functions holds None)", lambda: (x * c + c).sum()),
        ("L = (x.exp() * w).sum() + (w.sin() * v).mean() + v.sum()",
         lambda: (x.exp() * w).sum() + (w.sin() * v).mean() + v.sum()),
        ("y = x * 2; y += 1; L = y.sum()  (an in-place add)", in_place),
        ("L = _Double.apply(x).sum()  (a custom autograd.Function)", lambda: _Double.apply(x).sum()),
        ("F.mse_loss(net(inp), target) for a Linear-Tanh-Linear net, inp without grad",
         lambda: F.mse_loss(net(net_in), net_target)),
        ("(inp @ W.T + (inp @ A.T) @ B.T).pow(2).mean() with W frozen (a LoRA layer)",
         lambda: (lora_in @ W_frozen.T + (lora_in @ A.T) @ B.T).pow(2).mean()),
        ("60 steps of h = tanh(h) + h * 0.5  (2**60 paths, 182 nodes)", ladder),
        ("h = x * w; L = (h * h).sum()  (one node twice in the same next_functions)", squared),
        (f"{DEEP} steps of h = tanh(h)  (a graph {DEEP + 2} nodes deep)", deep),
        ("x itself: a leaf, grad_fn is None", lambda: x),
        ("c * 2 with c a constant: no graph at all", lambda: c * 2),
    ]


@GRAD_ON
def run_graph_walk(fn, build):
    """Driver: fn(build()), the graph built where fn runs (in trusted grading, the learner's kernel)."""
    return fn(build())


def _grad_fn_hint(got, expected):
    if any(isinstance(n, str) and n.startswith("torch::") for n in got):
        return ("node.name() spells some classes with their C++ namespace "
                "('torch::autograd::AccumulateGrad'): use type(node).__name__")
    if "NoneType" in got or "None" in got:
        return "next_functions holds (None, 0) for inputs that need no gradient: skip those entries"
    if sorted(got) == sorted(expected):
        return ("the right nodes in the wrong order: visit them breadth first, with a first-in "
                "first-out queue (collections.deque, popleft) and each node's next_functions in order")
    if got and expected and got[0] != expected[0]:
        return "the list starts with the root itself: type(t.grad_fn).__name__"
    if len(got) > len(expected) and set(got) <= set(expected):
        return ("a node reached along two paths must appear once: remember the nodes already queued "
                "(node objects, compared with `is` or kept in a set)")
    if len(got) < len(expected) and set(got) == set(expected):
        return ("two different nodes can have the same class name (several MulBackward0): "
                "deduplicate nodes, not names")
    if "AccumulateGrad" in expected and "AccumulateGrad" not in got:
        return "the AccumulateGrad nodes (one per leaf that requires grad) belong in the list too"
    return ""


def _shown(names):
    return names if len(names) <= 14 else names[:14] + [f"... ({len(names)} names)"]


def check_grad_fn_names(exercise, fn, graphs, reference=None, time_limit=10.0):
    """Compare fn(t) with the expected names on every graph: `(description, build)` pairs, where build()
    makes the tensor t, and the expected list is `reference(build())` (hidden tests: the answer key);
    or `(description, build, expected_names)` triples (visible tests state the names)."""
    for graph in graphs:
        what, build, *stated = graph
        if not callable(build):
            raise TypeError(f"check_grad_fn_names: the graph of {what} must come as a function that builds it "
                            "(lambda: ...): a graph does not survive the trip to the learner's kernel")
        if not stated and reference is None:
            raise TypeError(f"check_grad_fn_names: no expected names for the graph of {what}: give them, "
                            "or a reference")
        expected = list(stated[0]) if stated else list(reference(build()))
        try:
            got = run_case(exercise, functools.partial(run_graph_walk, fn, build), f"the graph of {what}",
                           time_limit=time_limit)
        except GradingError as err:
            if "RecursionError" not in str(err):
                raise
            raise GradingError(f"{err}\n  hint: a function that calls itself once per level of the graph runs out "
                               "of Python's stack on a deep graph (about 1000 nested calls): walk it with a loop "
                               "and a queue of your own") from None
        if not isinstance(got, (list, tuple)):
            checks.fail(exercise, f"should return a list of class names, got {summary(got)}",
                        details=f"  for the graph of: {what}")
        got = list(got)
        if not all(isinstance(n, str) for n in got):
            bad = next(n for n in got if not isinstance(n, str))
            checks.fail(exercise, f"the list should hold strings (class names), it holds {type_name(bad)} {bad!r}",
                        details=f"  for the graph of: {what}\n  hint: type(node).__name__ is the class name of a node")
        if got != expected:
            first = next((i for i, (g, e) in enumerate(zip(got, expected)) if g != e), min(len(got), len(expected)))
            hint = _grad_fn_hint(got, expected)
            checks.fail(exercise, f"wrong list for the graph of: {what}",
                        details=f"  expected ({len(expected)} nodes, breadth first from t.grad_fn, each node once): "
                                f"{_shown(expected)}\n"
                                f"  got      ({len(got)} names): {_shown(got)}\n"
                                f"  first difference at position {first}"
                                + (f"\n  hint: {hint}" if hint else ""))
