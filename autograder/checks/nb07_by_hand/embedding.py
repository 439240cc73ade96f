"""`embedding_backward(dout, idx, num_embeddings)`: the gradient of an embedding table, against
autograd through `F.embedding`; hints name a table sized from the largest index, and repeated
indices that do not add up.
"""
import torch
import torch.nn.functional as F

from autograder.checks import battery
from autograder.checks.nb07_by_hand.calls import guarded, stressed_case
from autograder.checks.nb07_by_hand.verdicts import CLOSE, autograd_grads, expect_close_with_hint
from autograder.learner import inputs
from autograder.learner.device import get_device


def embedding_case(idx_shape, dim, num_embeddings, *, seed, high=None, dtype=torch.float64, device=None):
    """{dout, idx, num_embeddings}: indices below `high` (default: half the table, so some repeat
    and the last rows are never used), dout of shape idx.shape + (dim,)."""
    device = device or get_device()
    high = high or max(1, num_embeddings // 2)
    idx = inputs.randint(high, *idx_shape, seed=seed, device=device)
    dout = inputs.randn(*idx_shape, dim, seed=seed + 1, dtype=dtype, device=device)
    return {"dout": dout, "idx": idx, "num_embeddings": num_embeddings}


def reference_embedding_backward(dout, idx, num_embeddings):
    """The gradient of the table, by autograd through F.embedding."""
    table = torch.zeros(num_embeddings, dout.shape[-1], dtype=dout.dtype, device=dout.device, requires_grad=True)
    return autograd_grads(F.embedding(idx, table), [table], dout)[0]


def embedding_hint(got, expected, idx):
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        rows = int(idx.max()) + 1 if idx.numel() else 0
        if isinstance(got, torch.Tensor) and got.dim() == 2 and got.shape[0] == rows != expected.shape[0]:
            return (f"your table has {rows} rows (the largest index + 1); it must have num_embeddings = "
                    f"{expected.shape[0]} rows: the rows no token used get a zero gradient")
        return ""
    counts = torch.bincount(idx.reshape(-1), minlength=expected.shape[0])
    wrong = ~torch.isclose(got.double(), expected.double(), **CLOSE).all(-1)
    if wrong.any() and bool((counts[wrong] > 1).all()):
        return ("only rows whose index appears more than once are wrong: repeated indices must add up. "
                "`grad[idx] = dout` and `grad[idx] += dout` both keep one of the repeated rows; "
                "`index_add_` or `index_put_(..., accumulate=True)` add them all")
    return ""


def check_embedding_backward(exercise, fn, cases, stress=None, what="dout"):
    """`fn(dout, idx, num_embeddings)` equals autograd's gradient of the table, for every case; with a
    `stress` ("non-contiguous", "expanded"), the argument `what` (dout or idx) reaches it laid out so."""
    for case in cases:
        case, driver = stressed_case(case, stress, what)
        expected = reference_embedding_backward(*case.values())
        with battery.stressed(exercise, stress, what):
            got = guarded(exercise, fn, list(case.values()), case, driver=driver)
            expect_close_with_hint(exercise, got, expected, case, ["the table's gradient"],
                                   None if stress else lambda: embedding_hint(got, expected, case["idx"]))
