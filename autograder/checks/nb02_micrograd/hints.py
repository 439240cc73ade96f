"""What a failure message says beyond "wrong gradient here": which user of the node sends it the
wrong amount, and the classic bug that explains it.

Only runs once a check has failed. The reference share each user should send comes from PyTorch
(one op redone on detached copies); what the learner's `_backward` actually sends is measured by a
driver on a fresh copy of the learner's graph (`drivers.run_contributions`).
"""
import torch

from autograder.checks import GradingError
from autograder.checks.nb02_micrograd import drivers
from autograder.checks.nb02_micrograd.expressions import OPERATIONS, Expr
from autograder.checks.nb02_micrograd.values import float_or_none, shown, within_float64_tolerance

DRAW_HINT = ("  See the graph your engine built, this node in red, with your own draw_dot (section 3): "
             "show_graph(draw_dot(nb02_micrograd.last_mismatch.root, highlight=nb02_micrograd.last_mismatch.node))")


def whole_expression(tape, root_index):
    full = tape.expression(root_index)
    return f"  in the expression {tape.names[root_index]} = {full}\n" if full else ""


def inputs_line(tape, i, data):
    op, *args = tape.steps[i]
    if op == "leaf":
        return f"  (a leaf with data {shown(data[i])})\n"
    parts = [f"{tape.names[a.index]} = {shown(data[a.index])}"
             if isinstance(a, Expr) else f"constant {a!r}" for a in args]
    return f"  inputs: {', '.join(parts)}\n"


def explain_grad(exercise, tape, Value, i, data, ops, got, ref_grad, reference, root_index, time_limit):
    """The message for a wrong grad at tape node i, and the tape indices of the ops that send it
    the wrong amount."""
    lines = [f"{exercise}: wrong gradient at {tape.formula(i)} (op {ops[i]!r})",
             (whole_expression(tape, root_index) + inputs_line(tape, i, data)).rstrip("\n"),
             f"  expected grad {shown(ref_grad[i])} (PyTorch, float64), got {shown(got)}"]
    culprits = []
    if i == root_index:
        lines.append("  This is the root: backward() must start by setting the root's grad to 1 "
                     "(dL/dL = 1) before it calls any node's _backward.")
        return "\n".join(lines), culprits
    lines.append(f"  Nodes are checked from the root down, in the order a correct backward() visits them, and every "
                 f"node before this one is right. So look at what {tape.names[i]} receives from the nodes that use it:")
    users = tape.users(i)
    sent = learner_contributions(exercise, tape, Value, i, users, ref_grad, time_limit)
    doubled = False
    for j in users:
        expected = local_share(tape, reference, i, j) * ref_grad[j]
        line = (f"    {tape.formula(j)} (op {ops[j]!r}, grad {shown(ref_grad[j])}) "
                f"should send {shown(expected)}")
        if sent is not None and sent[j] is not None:
            line += f"; your _backward sends {shown(sent[j])}"
            if not within_float64_tolerance(sent[j], expected):
                line += "   <-- wrong"
                culprits.append(j)
                twice = sum(1 for a in tape.steps[j][1:] if isinstance(a, Expr) and a.index == i) == 2
                doubled |= twice and within_float64_tolerance(sent[j], expected / 2)
        lines.append(line)
    uses = sum(1 for j in users for a in tape.steps[j][1:] if isinstance(a, Expr) and a.index == i)
    if doubled:
        lines.append(f"  That op takes {tape.names[i]} on both sides and passes on only one share: its _backward "
                     "must add (`+=`) both contributions, not overwrite (`=`) the first with the second.")
    elif culprits:
        lines.append("  Check the local derivative in the _backward of the op marked wrong: what it sends is "
                     "(d output / d input) x (the output's grad).")
    elif sent is not None and None not in sent.values() and uses > 1:
        lines.append(f"  Each use sends the right amount, but together they should add up to {shown(ref_grad[i])}: "
                     "a node used more than once must accumulate (`+=`) what every use sends, not overwrite (`=`).")
    elif uses > 1:
        lines.append("  This node is used more than once: if its grad equals what a single use sends, "
                     "the _backward functions overwrite (`=`) instead of accumulating (`+=`).")
    elif got == 0.0:
        lines.append("  Nothing reached this node: does every operation set `out._backward`, and does backward() "
                     "call every node's _backward, in reverse topological order (the root first)?")
    lines.append(DRAW_HINT)
    return "\n".join(lines), culprits


def local_share(tape, reference, i, j):
    """d node_j / d node_i along the direct edge(s) only: op j redone on detached copies of its inputs."""
    op, *args = tape.steps[j]
    copies = {a.index: reference[a.index].detach().clone().requires_grad_() for a in args if isinstance(a, Expr)}
    out = OPERATIONS[op](*[copies[a.index] if isinstance(a, Expr) else a for a in args])
    return torch.autograd.grad(out, copies[i])[0].item()


def learner_contributions(exercise, tape, Value, i, users, ref_grad, time_limit):
    """{user j: what the learner's _backward of node j adds to node i's grad, given j's correct grad},
    measured on a fresh copy of the graph (in the learner's kernel). An entry is None where that
    cannot be measured (for instance when the learner's engine puts a node of its own between the
    two, as `a - b` written as `a + (-b)` does); the result is None when the graph cannot even be
    rebuilt. Only runs once the check has failed: the grads it sends are those the message shows."""
    try:
        sent = drivers.drive(exercise, drivers.run_contributions, exercise, Value, tape, i,
                             {j: ref_grad[j] for j in users}, time_limit)
    except GradingError:
        return None
    if not isinstance(sent, dict):
        return None
    return {j: float_or_none(sent.get(j)) for j in users}
