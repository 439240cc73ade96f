"""The checks of a learner's `Value`: one expression, every op, random expressions, two backward
passes, a deep chain; each against PyTorch's float64 autograd.

An expression is recorded once on a tape (`expressions`), replayed with the learner's Value by a
driver (`drivers.run_graphs`, in the learner's kernel under trusted grading) and with PyTorch here.
The learner's snapshots are then compared node by node: forward values in tape order, gradients in
reverse tape order, which is the order a correct backward() visits them, so every node before the
reported one is right and the mistake lies in how that node's gradient was collected. The first
wrong node raises a `GraphMismatch`, kept as `last_mismatch` so the learner can draw it.
"""
import json
import random

import torch

from autograder.checks import GradingError, battery
from autograder.checks.nb02_micrograd import drivers, hints
from autograder.checks.nb02_micrograd.expressions import op_forms, random_expression, record
from autograder.checks.nb02_micrograd.snapshots import GraphMismatch, Snapshot, read_graph, read_tape, readable
from autograder.checks.nb02_micrograd.values import float_or_none, shown, within_float64_tolerance
from autograder.learner.device import get_device

last_mismatch = None  # the GraphMismatch raised most recently, kept so a learner can draw it


def torch_replay(tape, device):
    """The tape replayed on 0-d float64 tensors that require grad, each keeping its .grad."""
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


def compare_tape(exercise, Value, tape, root_index, *, device=None, time_limit=20.0):
    """compare_graph for an expression already recorded on a tape."""
    compare_tapes(exercise, Value, [(tape, root_index)], device=device, time_limit=time_limit)


def compare_tapes(exercise, Value, tapes, *, device=None, time_limit=20.0):
    """compare_tape for each (tape, root index) in turn, all run by one call into the learner's
    kernel (one round trip instead of one per expression); the first mismatch is reported."""
    tapes = [(tape, root_index) for tape, root_index in tapes]
    if not tapes:
        return
    runs = drivers.drive(exercise, drivers.run_graphs, exercise, Value, tapes, time_limit)
    if not isinstance(runs, (list, tuple)) or not runs:
        raise GradingError(f"{exercise}: no readable answer came back from your notebook (the graphs)")
    for k, (tape, root_index) in enumerate(tapes):
        if k >= len(runs):
            raise GradingError(f"{exercise}: no readable answer came back from your notebook (the graphs)")
        answer = readable(exercise, "the graphs", json.loads, runs[k])
        check_run(exercise, Value, tape, root_index, answer, device=device, time_limit=time_limit)


def check_run(exercise, Value, tape, root_index, answer, *, device=None, time_limit=20.0):
    """The verdict on one expression: the learner's snapshots (`answer`, from `drivers.run_graph`)
    against PyTorch; a GraphMismatch at the first wrong node."""
    global last_mismatch
    device = device or get_device()
    reference = torch_replay(tape, device)
    reference[root_index].backward()
    ref_data = [t.item() for t in reference]
    ref_grad = [0.0 if t.grad is None else t.grad.item() for t in reference]
    n = len(tape.steps)

    before = drivers.part_of(exercise, answer, "before")
    data, ops, texts = readable(exercise, "the nodes' data", read_tape, before, n)
    for i in range(n):  # forward values, in the order they were computed
        if data[i] is None:
            raise GradingError(f"{exercise}: computing {tape.formula(i)} gave {texts[i]}, which has no numeric "
                               f"`.data`: every operation must return a new Value")
        if not within_float64_tolerance(data[i], ref_data[i]):
            message = (f"{exercise}: wrong forward value at {tape.formula(i)} (op {ops[i]!r})\n"
                       f"{hints.whole_expression(tape, root_index)}{hints.inputs_line(tape, i, data)}"
                       f"  expected data {shown(ref_data[i])}, got {shown(data[i])}")
            graph = before.get("graph")
            graph = readable(exercise, "your graph", read_graph, graph, n) if graph is not None else None
            drawn = Snapshot(graph, data, ops)
            last_mismatch = GraphMismatch(message, drawn.root, drawn.node(i))
            raise last_mismatch

    after = Snapshot(readable(exercise, "your graph", read_graph, drivers.part_of(exercise, answer, "after"), n),
                     data, ops)
    for i in range(n):
        if not after.reached(i) and ref_grad[i] != 0.0:
            message = (f"{exercise}: {tape.formula(i)} cannot be reached from the root through `_prev`, "
                       f"yet the root depends on it (PyTorch's grad {shown(ref_grad[i])}): does every operation "
                       "pass its inputs as `_children` when it creates its result?")
            last_mismatch = GraphMismatch(message, after.root, after.node(i))
            raise last_mismatch
    for i in reversed(range(n)):  # the tape's order, reversed: every user of node i comes before it
        if not after.reached(i):
            continue  # not an input of the root: PyTorch's grad is 0 and nothing reads it
        got = after.node(i).grad
        if not within_float64_tolerance(got, ref_grad[i]):
            message, culprits = hints.explain_grad(exercise, tape, Value, i, data, ops, got, ref_grad, reference,
                                                   root_index, time_limit)
            last_mismatch = GraphMismatch(message, after.root, after.node(i), [after.node(j) for j in culprits])
            raise last_mismatch


def check_each_op(exercise, Value, ops, *, seed, repeats=3):
    """Every way of writing each op in `ops` (Value with Value, with a number on either side),
    at `repeats` random points: forward value and local gradients against PyTorch.

    a is drawn away from 0 (either sign), b is drawn with |b| >= 0.5 (positive where the op
    needs it: log, fractional powers), so no test sits on a kink or a pole.
    """
    rng = random.Random(seed)
    tapes = []
    for op in ops:
        for build, domain in op_forms(op):
            for _ in range(repeats):
                a = rng.choice((-1, 1)) * rng.uniform(0.3, 2.0)
                b = rng.uniform(0.5, 2.0) * (1 if domain == "positive" else rng.choice((-1, 1)))
                g = rng.uniform(0.5, 2.0) * rng.choice((-1, 1))
                tapes.append(record(build, [a, b, g], names=["a", "b", "g"]))
    compare_tapes(exercise, Value, tapes)


# Where right-looking formulas break (the battery's special points), each op times an upstream gradient g:
# relu at its kink (PyTorch's and micrograd's derivative there is 0), powers of 0 (a derivative written from
# the output, k * out / x, divides by 0), tanh where e^(2x) overflows a Python float (math.exp raises
# OverflowError past 709.78). exp and log have no such points that micrograd defines: math.exp(1000) and
# math.log(0) raise, where PyTorch gives inf and -inf.
SPECIAL_POINTS = {
    "relu": [(lambda a, g: a.relu() * g, 0.0), (lambda a, g: (-a).relu() * g, 0.0)],
    "**": [(lambda a, g: (a ** k) * g, 0.0) for k in (1, 2, 3, 1.5)],
    "tanh": [(lambda a, g: a.tanh() * g, x) for x in (20.0, -20.0, 400.0, -400.0, 800.0, -800.0)],
}


def check_special_points(exercise, Value, ops):
    """Every op of `ops` that has special points (SPECIAL_POINTS) at those points, against PyTorch;
    a failure names the stress ("fails for the special points of the function ...")."""
    tapes = [record(build, [a, -1.5], names=["a", "g"]) for op in ops for build, a in SPECIAL_POINTS.get(op, ())]
    with battery.trying(exercise, "special-points"):
        compare_tapes(exercise, Value, tapes)


def check_random_expressions(exercise, Value, ops, *, seed, count=100, leaves=3, steps=12):
    """`count` random DAGs over `ops` (seeded), each compared node by node with PyTorch."""
    tapes = [record(*random_expression(seed * 100_003 + k, ops, leaves=leaves, steps=steps)) for k in range(count)]
    compare_tapes(exercise, Value, tapes)


def check_two_passes(exercise, Value, first, second, leaf_values, *, names=None, device=None):
    """Two expressions over the same leaves, one backward() each and nothing zeroed in between:
    the leaves' grads must hold the sum of both passes, as PyTorch's leaf .grad does."""
    names = list(names) if names else [chr(ord("a") + i) for i in range(len(leaf_values))]
    tape_1, root_1 = record(first, leaf_values, names)
    tape_2, root_2 = record(second, leaf_values, names)
    device = device or get_device()
    leaves_t = [torch.tensor(float(v), dtype=torch.float64, device=device, requires_grad=True) for v in leaf_values]
    for tape, root in ((tape_1, root_1), (tape_2, root_2)):
        tape.replay_on(leaves_t)[root].backward()
    expected = [t.grad.item() for t in leaves_t]

    one, two = tape_1.expression(root_1) or tape_1.formula(root_1), tape_2.expression(root_2) or tape_2.formula(root_2)
    grads = drivers.drive(exercise, drivers.run_two_passes, exercise, Value, [float(v) for v in leaf_values],
                   [(tape_1, root_1), (tape_2, root_2)], f"{one}, then {two}, one backward() each")
    grads = drivers.sized(exercise, grads, len(leaf_values), "the leaves' grads")
    for name, got, e in zip(names, grads, expected):
        got = float_or_none(got)
        if not within_float64_tolerance(got, e):
            raise GradingError(
                f"{exercise}: after backward() on {one} and then on {two} "
                f"(two graphs sharing the leaves, nothing zeroed in between), {name}.grad is {shown(got)}; PyTorch "
                f"accumulates both passes into {shown(e)}. backward() must add to the leaves' grads, not reset them.")


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
    answer = drivers.drive(exercise, drivers.run_deep_chain_data_and_grads, exercise, Value, steps, ladder, c, d, e,
                           n_nodes, shape, time_limit)
    last, root_grad, middle_grad, first_grad = [float_or_none(g) for g in
                                                drivers.sized(exercise, answer, 4, "the chain's data and grads")]
    value = 0.5 * factor ** steps if ladder else 1 - 0.5 * c ** steps
    for what, got, expected in [("the last node's data", last, value),
                                ("the root's grad", root_grad, 1.0),
                                ("the middle node's grad", middle_grad, factor ** (steps - steps // 2)),
                                ("the first node's grad", first_grad, factor ** steps)]:
        if not within_float64_tolerance(got, expected):
            raise GradingError(f"{exercise}: on a chain of {n_nodes:,} nodes ({shape}, {steps:,} times, from "
                               f"v = 0.5), {what} is {shown(got)}, expected {shown(expected)}")
