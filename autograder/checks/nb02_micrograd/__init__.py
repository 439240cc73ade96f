"""Notebook 02's checks (a micrograd-style engine): `Value`, `MLP` and `draw_dot`.

Why a package of its own: a scalar engine cannot be graded by comparing two tensors. An
expression is written once, on symbolic stand-ins that only record the steps (`expressions`),
then replayed twice: with the learner's `Value` and with PyTorch 0-d float64 tensors. Every
recorded node then has a reference value and a reference gradient, and the first node whose
gradient differs from PyTorch's is reported with its op, its inputs and what each of its users
should have sent (`graph_checks`, `hints`), so the message points at the local derivative that is
wrong. The failure keeps a copy of the learner's graph (`last_mismatch`), which the learner can
draw with their own `draw_dot`.

The learner's objects are touched only by drivers (`drivers`, `mlp`, `drawing_checks`), which each
check runs through `checks.call_student`: in trusted grading they run in the learner's kernel and
return plain data (`snapshots` of the graph, floats, the Digraph's lines), compared with PyTorch in
the grader, where the learner's code cannot reach. Nothing here is an answer: the graph walks are
reachability walks, never the topological order that backward() must compute, and no module draws
a graph. All random draws come from seeded `random.Random` instances, so every grade is reproducible.

Modules: `expressions` (the tape), `values` (reading and comparing numbers), `snapshots` (the
learner's graph as data), `drivers`, `graph_checks` (the Value checks), `hints` (what a failure
message adds), `mlp` (Neuron, Layer, MLP), `drawing_checks` (draw_dot).

This package exports what the notebook's grade cells call (`__all__`); `last_mismatch` is read here too
(the notebook tells the learner to draw it after a failing check). Everything else is imported from its
module.
"""
from autograder.checks.nb02_micrograd import graph_checks
from autograder.checks.nb02_micrograd.drawing_checks import GraphNode, check_drawing, value_graphs
from autograder.checks.nb02_micrograd.expressions import ARITHMETIC_OPS, TRANSCENDENTAL_OPS
from autograder.checks.nb02_micrograd.graph_checks import (
    check_deep_chain,
    check_each_op,
    check_random_expressions,
    check_special_points,
    check_two_passes,
    compare_graph,
)
from autograder.checks.nb02_micrograd.mlp import check_mlp_gradients, check_zero_grad

__all__ = ["ARITHMETIC_OPS", "TRANSCENDENTAL_OPS", "GraphNode", "check_deep_chain", "check_drawing", "check_each_op",
           "check_mlp_gradients", "check_random_expressions", "check_special_points", "check_two_passes",
           "check_zero_grad", "compare_graph", "value_graphs"]


def __getattr__(name):
    if name == "last_mismatch":  # set by each failing check: read it where it lives, at the time of asking
        return graph_checks.last_mismatch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
