"""Answer key of notebook 06: the references that are themselves answers, for the hidden tests.

Never released (only notebooks are) and never packaged; the hidden tests load it with
`autograder.grader.keys.answer_key("06_checkpointing")` and pass it into the checks of
`autograder.checks.nb06_checkpointing`. Each refuses to run inside a student's call (`@answer`).
The checkpointing exercises need no key: their reference is torch.utils.checkpoint, which they refuse.
"""
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential

from autograder.grader.keys import answer
from autograder.learner.memory import SavedTensorLedger

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
