"""Answer key of notebook 06: the references that are themselves answers, for the hidden tests.

Never released (only notebooks are) and never packaged; the hidden tests load it with
`autograder.grader.keys.answer_key("06_checkpointing")` and pass it into the checks of
`autograder.checks.nb06_checkpointing`. Each refuses to run inside a student's call (`@answer`).
The checkpointing exercises need no key: their reference is torch.utils.checkpoint, which they refuse.
`saved_bytes` is checked against `graph_saved_tensors`, a count that uses no hooks; it is a correct
`saved_bytes` by another route, so it lives here, not in the checks that learners install (issue 37).
"""
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential

from autograder.grader.keys import answer
from autograder.learner.memory import SavedTensorLedger, saved_values_by_name

ACTIVATION = 256  # elements in one block activation
_measured = {}


@answer
def segment_peaks(n_blocks):
    """{k: peak saved bytes / one activation} of torch's checkpoint_sequential (reentrant) with k segments,
    for k = 1..n_blocks, over n_blocks tanh blocks (each keeps one activation the size of its input),
    measured with the saved-tensor ledger. Its smallest value is what best_segments must reach."""
    if n_blocks not in _measured:
        peaks = {}
        for k in range(1, n_blocks + 1):
            x = torch.linspace(-1, 1, ACTIVATION, requires_grad=True)
            with SavedTensorLedger() as ledger:
                checkpoint_sequential([nn.Tanh() for _ in range(n_blocks)], k, x, use_reentrant=True).sum().backward()
            peaks[k] = ledger.peak_bytes / (ACTIVATION * x.element_size())
        _measured[n_blocks] = peaks
    return dict(_measured[n_blocks])


@answer
def graph_saved_tensors(outputs):
    """[(node name, attribute, tensor)] for every tensor saved in the graph behind `outputs`, walked with an
    explicit stack from the outputs' grad_fn through `next_functions`.

    Each node's saved values are read with `autograder.learner.memory.saved_values_by_name` (tuples of tensors
    are opened). One difference from what pack hooks see: a Python number used as an operand (`x * 2.0`) is
    saved as a 0-d double or long tensor that autograd never hands to the hooks, and which this count includes;
    the hidden tests use none."""
    outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    stack = [o.grad_fn for o in outputs if isinstance(o, torch.Tensor) and o.grad_fn is not None]
    seen, found = set(), []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for name, value in saved_values_by_name(node).items():
            found += [(type(node).__name__, name, t) for t in (value if isinstance(value, (tuple, list)) else (value,))
                      if isinstance(t, torch.Tensor)]
        stack.extend(fn for fn, _ in node.next_functions)
    return found
