"""An autograd graph drawn node by node, with what each node saved: notebooks 04 and 08 draw with it.

A depth-first walk with an explicit stack collects the nodes to draw; the order in which they are
found does not matter to a drawing (and is not the breadth-first order grad_fn_names asks for).
"""
import graphviz
import torch

from autograder.learner.memory import FREED, saved_values_by_name


def _short(value):
    if isinstance(value, torch.Tensor):
        return "x".join(str(s) for s in value.shape) or "scalar"
    if isinstance(value, str):
        return value
    text = repr(value)
    return text if len(text) <= 16 else text[:13] + "..."


def draw_autograd_graph(t, names=None, show_saved=True):
    """A graphviz.Digraph of the graph behind t: one box per node (its class name, and what it saved),
    leaves named from `names` ({name: tensor}), arrows in the direction gradients flow."""
    names = {id(v): k for k, v in (names or {}).items()}
    dot = graphviz.Digraph(graph_attr={"rankdir": "TB"}, node_attr={"fontsize": "11"})
    if t.grad_fn is None:
        dot.node("leaf", label="no grad_fn: nothing recorded", shape="box")
        return dot
    seen, stack = {t.grad_fn}, [t.grad_fn]
    while stack:
        node = stack.pop()
        label = type(node).__name__
        leaf = getattr(node, "variable", None)
        if leaf is not None:
            label += f"\\n{names.get(id(leaf), 'leaf')} {_short(leaf)}"
            dot.node(str(id(node)), label=label, shape="box", style="filled", fillcolor="lightblue")
        else:
            if show_saved:
                saved = [f"{k}: {_short(v)}" for k, v in saved_values_by_name(node).items()
                         if isinstance(v, torch.Tensor) or v == FREED]
                if saved:
                    label += "\\nsaved " + ", ".join(saved)
            dot.node(str(id(node)), label=label, shape="box")
        for child, _ in node.next_functions:
            if child is None:
                continue
            dot.edge(str(id(node)), str(id(child)))
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return dot
