"""Answer key of notebook 05: the references that are themselves answers, for the hidden tests.

Never released (only notebooks are) and never packaged; the hidden tests load it with
`autograder.grader.keys.answer_key("05_loss_scaling")` and pass these functions into the checks of
`autograder.checks.nb05_loss_scaling`. Each refuses to run inside a student's call (`@answer`).
DynamicLossScaler needs no key: its reference is torch.amp.GradScaler, which the exercise refuses.
"""
import copy

from autograder.grader.keys import answer


@answer
def underflow_fraction(t, dtype):
    """Share of the non-zero entries of t that are exactly 0 after t.to(dtype); 0.0 if there are none."""
    nonzero = t != 0
    count = int(nonzero.sum())
    if count == 0:
        return 0.0
    return int(((t.to(dtype) == 0) & nonzero).sum()) / count


@answer
def scaled_fp16_grads(model, loss_fn, x, y, scale):
    """Float32 gradients of an fp16 copy of model: loss in float32, times scale before backward, / scale after.
    At scale 1, the plain fp16 gradients that hidden tests first show to be lost."""
    twin = copy.deepcopy(model).half()
    (loss_fn(twin(x.half()).float(), y) * scale).backward()
    return [p.grad.float() / scale for p in twin.parameters()]
