"""`batchnorm_backward(dout, x, gamma, eps)`: training-mode BatchNorm's (dx, dgamma, dbeta), against
autograd through `F.batch_norm`; hints name the slip (`BN_SLIPS`, a sum over the wrong axis, eps in
the wrong place, ...), found by autograd through `model.bn_forward`'s slipped variants.

Under the stress "float32-large-mean" (float32 inputs whose mean is 1000 times their spread, where a
one-pass variance loses every digit) a float32 answer is compared with a reference computed in float64
from the same values, with a tolerance float32 can meet (`FLOAT32_SHARE`).
"""
import torch
import torch.nn.functional as F

from autograder import checks
from autograder.checks import battery
from autograder.checks.nb07_by_hand.calls import guarded, stressed_case
from autograder.checks.nb07_by_hand.model import EPS, bn_forward
from autograder.checks.nb07_by_hand.verdicts import (
    CLOSE,
    autograd_grads,
    check_form,
    eps_text,
    expect_close_with_hint,
    matches,
    typed_eps,
)
from autograder.learner import inputs
from autograder.learner.device import get_device


def batchnorm_case(n, c, *, seed, tiny=(), dtype=torch.float64, device=None, eps=EPS, large_mean=False):
    """{dout, x, gamma, eps} for an (n, c) input; channels listed in `tiny` have a standard deviation
    of 5e-4 or 1.5e-3 (a variance below or near eps), where eps goes matters. `large_mean`: a float32
    x whose columns have a mean 1000 times their spread (`battery.large_mean`), gamma and dout in float32."""
    device = device or get_device()
    if large_mean:
        dtype = torch.float32
        x = battery.large_mean(n, c, seed=seed, dtype=dtype, device=device)
    else:
        x = inputs.randn(n, c, seed=seed, dtype=dtype, device=device, scale=2.0) + 0.5
    for k, channel in enumerate(tiny):
        x[:, channel] = x[:, channel] * (1e-3 if k % 2 == 0 else 3e-3) / 2
    gamma = inputs.randn(c, seed=seed + 1, dtype=dtype, device=device) + 1.0
    dout = inputs.randn(n, c, seed=seed + 2, dtype=dtype, device=device)
    return {"dout": dout, "x": x, "gamma": gamma, "eps": eps}


def bn_grads(dout, x, gamma, eps, slip):
    leaves = [t.detach().clone().requires_grad_() for t in (x, gamma, torch.zeros_like(gamma))]
    with torch.enable_grad():
        if slip is None:
            out = F.batch_norm(leaves[0], None, None, leaves[1], leaves[2], training=True, eps=eps)
        else:
            out = bn_forward(*leaves, eps, slip)
        return autograd_grads(out, leaves, dout)


def reference_batchnorm_backward(dout, x, gamma, eps=EPS):
    """(dx, dgamma, dbeta) by autograd through training-mode F.batch_norm."""
    return tuple(bn_grads(dout, x, gamma, eps, None))


BN_SLIPS = {
    "no mean term": "dx misses the term that comes from the mean depending on every x: your dx differs "
                    "from the reference by a constant in each channel",
    "no variance term": "dx misses the term that comes from the variance depending on every x: your dx "
                        "differs from the reference by a multiple of x_hat in each channel",
    "no mean or variance term": "dx is gamma * rstd * dout: the two terms that come from the mean and the "
                                "variance depending on every x are missing",
    "unbiased": "these are the gradients of BatchNorm normalised with the unbiased variance (divided by "
                "N - 1); training-mode BatchNorm normalises with the biased one (divided by N)",
    "eps outside": "eps is added to the standard deviation; BatchNorm adds it to the variance: 1/sqrt(var + eps)",
    "no eps": "eps is missing: BatchNorm divides by sqrt(var + eps)",
}


def _batchnorm_hint(got, expected, case):
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return ""
    n, c = case["x"].shape
    dx, dgamma, dbeta = got
    if any(isinstance(t, torch.Tensor) and t.shape == (n,) != (c,) for t in (dgamma, dbeta)):
        return "dgamma and dbeta have one value per channel: sum over the batch (dim 0), not over the channels"
    if matches(dgamma, expected[2]) and matches(dbeta, expected[1]):
        return "dgamma and dbeta are swapped: dbeta = sum of dout, dgamma = sum of dout * x_hat"
    if n == c and matches(dbeta, case["dout"].sum(1)):
        return "dbeta is summed over the channels (dim 1); sum over the batch (dim 0)"
    if matches(dx, expected[0] / case["gamma"]):
        return "dx lacks the factor gamma: the output is gamma * x_hat + beta"
    if isinstance(dx, torch.Tensor) and dx.shape == expected[0].shape and dx.device == expected[0].device:
        eps = typed_eps(dx, case, lambda eps: bn_grads(case["dout"], case["x"], case["gamma"], eps, None)[0],
                        left_out=False)  # eps left out is a slip of its own, "no eps"
        if eps is not None:
            return (f"your answer uses eps = {eps_text(eps)} where the layer's eps is {eps_text(case['eps'])}: use "
                    "the eps argument, which the tests vary, not a number written in")
        wrong = ~torch.isclose(dx.double(), expected[0].double(), **CLOSE).all(0)
        small = case["x"].var(0, unbiased=False) < 100 * case["eps"]
        if wrong.any() and bool(small[wrong].all()):
            return (f"only channels whose variance is near eps ({wrong.nonzero().flatten().tolist()}) are wrong: "
                    "BatchNorm divides by sqrt(var + eps), eps added to the biased variance inside the root")
    for slip, hint in BN_SLIPS.items():
        if matches(dx, bn_grads(*case.values(), slip)[0]):
            return hint
    if (isinstance(dx, torch.Tensor) and dx.shape == expected[0].shape and dx.device == expected[0].device
            and not matches(dx, expected[0])
            and torch.allclose(dx.double(), expected[0].double(), rtol=1e-3, atol=1e-6)):
        return ("dx is within 0.1% of the reference but not within round-off: a small systematic difference, "
                "such as eps in another place (BatchNorm divides by sqrt(var + eps), the biased variance) "
                "or a step computed in float32")
    return ""


FLOAT32_SHARE = 3e-3  # a float32 answer's error, as a share of the largest |reference|: the two-pass
# variance stays below 3e-4 at a mean 1000 times the spread, the one-pass one is above 3e-2 (tests)


def _check_in_float32(exercise, fn, case):
    """A float32 answer against autograd in float64 from the same values: each of dx, dgamma and dbeta
    within FLOAT32_SHARE of its largest entry (round-off passes, lost digits do not)."""
    reference = reference_batchnorm_backward(*(v.double() if torch.is_tensor(v) else v for v in case.values()))
    got = guarded(exercise, fn, list(case.values()), case)
    names = ["dx", "dgamma", "dbeta"]
    check_form(exercise, got, tuple(t.float() for t in reference), case, names)
    for name, g, e in zip(names, got, reference):
        checks.expect_close(exercise, g.double(), e, inputs=case, names=[name], rtol=0.0,
                            atol=FLOAT32_SHARE * float(e.abs().max()), dtype=g.dtype)  # the answer's dtype, named


def check_batchnorm_backward(exercise, fn, cases, stress=None, what="dout"):
    """`fn(dout, x, gamma, eps)` returns autograd's (dx, dgamma, dbeta) of training-mode BatchNorm.

    `stress="float32-large-mean"` (cases made with `large_mean=True`): compared with float64 (see
    `_check_in_float32`). "non-contiguous" or "expanded": the argument `what` (dout or x) reaches the
    answer laid out so."""
    for case in cases:
        case, driver = stressed_case(case, stress, what)
        with battery.stressed(exercise, stress, what):
            if stress == "float32-large-mean":
                _check_in_float32(exercise, fn, case)
                continue
            expected = reference_batchnorm_backward(*case.values())
            got = guarded(exercise, fn, list(case.values()), case, driver=driver)
            expect_close_with_hint(exercise, got, expected, case, ["dx", "dgamma", "dbeta"],
                                   None if stress else lambda: _batchnorm_hint(got, expected, case))
