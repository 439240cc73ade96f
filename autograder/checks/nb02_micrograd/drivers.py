"""Drivers: the only code that touches a learner's scalar engine, run where the learner's code runs.

Trusted grading (`autograder.grader.trusted`) keeps the learner's objects in the learner's
kernel: a check ships a driver there through `checks.call_student` (`drive`), the driver builds
the graph, runs backward() and the like, and returns plain data (numbers, strings, lists, dicts,
JSON text). The check compares that data with PyTorch in the grader, where the learner's code
cannot reach. In plain grading the same drivers run in-process. Every driver is named `run_<what>`
and its docstring starts with "Driver:". Inside a driver each step of the learner's code runs
through `learner_step`: its own time limit, no stderr, no autograd (the engine is the exercise),
readable errors, `RecursionError` explained. A step that fails after some data was gathered is
returned as an "error", so the checks still report what went wrong first.
"""
import contextlib
import gc
import json

from autograder import checks
from autograder.checks import GradingError
from autograder.checks.nb02_micrograd import snapshots, values
from autograder.checks.nb02_micrograd.rules import BY_HAND
from autograder.checks.rules import guards_of


class _RecursionReport(GradingError):
    """A RecursionError in the learner's code, explained; its message is complete as it is."""


def learner_step(exercise, fn, *, what, time_limit=20.0):
    """checks.call_student for a zero-argument step of the learner's engine, with `what` it does,
    autograd refused (the engine must compute its gradients itself).

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
        return checks.call_student(exercise, guarded, names=[], time_limit=time_limit,
                                   **guards_of(BY_HAND, exercise))
    except _RecursionReport as err:
        raise GradingError(str(err)) from None
    except GradingError as err:
        raise GradingError(f"{err}\n  (while running: {what})") from None


def drive(exercise, driver, *args):
    """Run a driver on the learner's names through checks.call_student: in the learner's kernel
    under trusted grading, right here otherwise. Only the data it returns comes back. No overall
    time limit: each step inside has its own."""
    return checks.call_student(exercise, driver, *args, names=[], time_limit=None)


def part_of(exercise, answer, key):
    """answer[key] from a driver's answer; if the driver stopped before it, the error that stopped it."""
    if isinstance(answer, dict) and key in answer:
        return answer[key]
    if isinstance(answer, dict) and isinstance(answer.get("error"), str):
        raise GradingError(answer["error"])
    raise GradingError(f"{exercise}: no readable answer came back from your notebook (no {key})")


def sized(exercise, items, n, what):
    """A list of n items from a driver, or a GradingError (so that no comparison is silently skipped)."""
    if not isinstance(items, (list, tuple)) or len(items) != n:
        raise GradingError(f"{exercise}: no readable answer came back from your notebook ({what})")
    return list(items)


@contextlib.contextmanager
def automatic_collection_off():
    """Pause Python's automatic cycle collection (it would rescan a growing graph again and again)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def run_graph(exercise, Value, tape, root_index, time_limit):
    """Driver: replay the tape with the learner's Value, snapshot the graph, run backward() and
    snapshot it again. {"before": tape data (+ "graph"), "after": graph} or an "error"."""
    mine = learner_step(exercise, lambda: tape.replay(Value), what=f"building {tape.describe(root_index)}",
                        time_limit=time_limit)
    root = mine[root_index]
    before = learner_step(exercise, lambda: snapshots.tape_snapshot(mine), what="reading every node's data",
                          time_limit=time_limit)
    answer = {"before": before}
    try:  # only to show a wrong forward value; a graph that cannot be walked is reported after backward()
        before["graph"] = learner_step(exercise, lambda: snapshots.graph_snapshot(mine, root, exercise),
                                       what="walking your graph from the root", time_limit=time_limit)
    except GradingError:
        before["graph"] = None
    try:
        learner_step(exercise, lambda: root.backward(), what=f"{tape.names[root_index]}.backward()",
                     time_limit=time_limit)
        answer["after"] = learner_step(exercise, lambda: snapshots.graph_snapshot(mine, root, exercise),
                                       what="walking your graph from the root after backward()", time_limit=time_limit)
    except GradingError as err:  # reported once the forward values have been checked
        answer["error"] = str(err)
    return answer


def run_graphs(exercise, Value, tapes, time_limit):
    """Driver: `run_graph` for each (tape, root index) in turn, up to the first that fails; each
    answer as a JSON string (hundreds of graphs can come back from one call)."""
    answers = []
    for tape, root_index in tapes:
        try:
            answer = run_graph(exercise, Value, tape, root_index, time_limit)
        except GradingError as err:  # the graph could not even be built
            answer = {"error": str(err)}
        answers.append(json.dumps(answer))  # one string per graph: quick to send, read with json.loads
        if "error" in answer:  # that expression fails: the checks stop there
            break
    return answers


def run_contributions(exercise, Value, tape, i, upstream, time_limit):
    """Driver: {user j: what the learner's _backward of node j adds to node i's grad when j's grad
    is upstream[j]}, on a fresh copy of the graph; None per user where that cannot be measured,
    None in all when the graph cannot be rebuilt."""
    try:
        fresh = learner_step(exercise, lambda: tape.replay(Value), what="rebuilding the graph", time_limit=time_limit)
    except GradingError:
        return None
    sent = {}
    for j, grad in upstream.items():
        try:
            sent[j] = learner_step(exercise, lambda j=j, grad=grad: _sent_to(fresh[i], fresh[j], grad),
                                   what="one node's _backward", time_limit=time_limit)
        except GradingError:
            sent[j] = None
    return sent


def _sent_to(node, user, grad):
    """What `user._backward()` adds to `node.grad` when the user's grad is `grad` (None when the
    learner's engine put a node of its own between the two); every grad touched is put back."""
    prev = list(getattr(user, "_prev", ()))
    if not any(p is node for p in prev):
        return None
    saved = [(p, getattr(p, "grad", 0)) for p in prev]
    try:
        for p in prev:
            p.grad = 0.0
        user.grad = grad
        user._backward()
        return values.number(node.grad)
    finally:
        for p, g in saved:
            p.grad = g


def run_two_passes(exercise, Value, leaf_values, passes, what):
    """Driver: fresh leaves, each (tape, root) of `passes` replayed on them and backward() once
    each, nothing zeroed in between; the leaves' grads (None where not a number)."""
    def both():
        leaves = [Value(float(v)) for v in leaf_values]
        for tape, root in passes:
            tape.replay_on(leaves)[root].backward()
        return [values.number(getattr(leaf, "grad", None)) for leaf in leaves]

    return learner_step(exercise, both, what=what)


def run_deep_chain_data_and_grads(exercise, Value, steps, ladder, c, d, e, n_nodes, shape, time_limit):
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

    with automatic_collection_off():  # time the engine, not Python's cycle collector
        first, middle, last = learner_step(exercise, build, what=f"building a chain of {n_nodes:,} nodes ({shape})",
                                           time_limit=time_limit)
        learner_step(exercise, lambda: last.backward(), what=f"backward() through a chain of {n_nodes:,} nodes",
                     time_limit=time_limit)
    return learner_step(exercise, lambda: [values.number(getattr(node, attr, None)) for node, attr in
                                           ((last, "data"), (last, "grad"), (middle, "grad"), (first, "grad"))],
                        what="reading the chain's data and grads", time_limit=time_limit)
