"""`manual_backward(params, cache, targets)`: every parameter's gradient of the notebook's model,
against autograd through `model.forward`; the first wrong one in backward order is named, with the
slip that explains it (`MODEL_SLIPS`, autograd through `model.slipped_loss`). Also the random
parameters and batches that the model's checks run on, and autograd's loss and gradients, which
`training` reuses.
"""
import functools

import torch

from autograder import checks
from autograder.checks import battery
from autograder.checks.nb07_by_hand.calls import guarded, laid_out
from autograder.checks.nb07_by_hand.embedding import embedding_hint
from autograder.checks.nb07_by_hand.model import PARAM_NAMES, forward, init_params, slipped_loss
from autograder.checks.nb07_by_hand.verdicts import autograd_grads, check_form, expect_close_with_hint, matches
from autograder.learner import inputs
from autograder.learner.device import get_device

BACKWARD_ORDER = ("b2", "W2", "beta", "gamma", "b1", "W1", "C")  # the order backward reaches them


def random_params(vocab, context, embed, hidden, *, seed, dtype=torch.float64, device=None):
    """Parameters with every entry drawn at random (gamma around 1, biases and beta non-zero), so that
    no gradient can be right by accident of a symmetric start."""
    params = init_params(vocab, context, embed, hidden, seed=seed, dtype=dtype, device=device)
    for k, name in enumerate(("b1", "gamma", "beta", "b2")):
        noise = inputs.randn(*params[name].shape, seed=seed * 100 + 10 + k, dtype=dtype,
                             device=params[name].device, scale=0.5)
        params[name] = params[name] + noise
    params["W2"] = params["W2"] * 10  # a last layer of ordinary size: logits far from uniform
    return params


def model_case(vocab, context, embed, hidden, n, *, seed, dtype=torch.float64, device=None, logits_scale=None):
    """{params, tokens, targets} for a batch of n; tokens drawn from a few rows so some repeat.
    `logits_scale`: float32 parameters whose last layer is scaled so that the largest |logit| is about
    `logits_scale` (a few hundred: exp of them overflows float32)."""
    device = device or get_device()
    if logits_scale is not None:
        dtype = torch.float32
    params = random_params(vocab, context, embed, hidden, seed=seed, dtype=dtype, device=device)
    tokens = inputs.randint(max(2, vocab // 2), n, context, seed=seed + 1, device=device)
    targets = inputs.randint(vocab, n, seed=seed + 2, device=device)
    if logits_scale is not None:
        largest = forward(params, tokens, targets)[1]["logits"].abs().max()
        params["W2"], params["b2"] = (params[name] * (logits_scale / largest) for name in ("W2", "b2"))
    return {"params": params, "tokens": tokens, "targets": targets}


def loss_and_grads(params, tokens, targets, slip=None):
    """The model's loss and {name: gradient} by autograd (or a slip's, see `slipped_loss`)."""
    leaves = {name: params[name].detach().clone().requires_grad_() for name in PARAM_NAMES}
    with torch.enable_grad():
        loss = forward(leaves, tokens, targets)[0] if slip is None else slipped_loss(leaves, tokens, targets, slip)
        return loss.detach(), dict(zip(PARAM_NAMES, autograd_grads(loss, [leaves[n] for n in PARAM_NAMES])))


def reference_grads(params, tokens, targets, slip=None):
    """{name: gradient} of the model's loss by autograd (or of a slip's loss)."""
    return loss_and_grads(params, tokens, targets, slip)[1]


MODEL_SLIPS = {
    "summed": "every gradient is N times too large: the loss is the MEAN over the batch, so dlogits = "
              "(softmax - one_hot) / N",
    "no one-hot": "dlogits lacks the -1 at each target class: dlogits = (softmax - one_hot(targets)) / N",
    "tanh slope": "the tanh's slope is taken from its input: d tanh(z)/dz = 1 - tanh(z)**2, from the output a",
    "no mean or variance term": "the BatchNorm backward misses the terms from the mean and the variance "
                                "depending on every h (see batchnorm_backward)",
    "no mean term": "the BatchNorm backward misses the term from the mean depending on every h",
    "no variance term": "the BatchNorm backward misses the term from the variance depending on every h",
    "unbiased": "the BatchNorm backward uses the unbiased variance (N - 1); the forward divides by N",
}


def _model_hint(name, got, case):
    for slip, hint in MODEL_SLIPS.items():
        if matches(got, reference_grads(*case.values(), slip=slip)[name]):
            return hint
    if name == "C":
        expected = reference_grads(*case.values())["C"]
        return embedding_hint(got, expected, case["tokens"])
    return ""


def model_sizes(params, context):
    (vocab, embed), hidden = params["C"].shape, params["b1"].shape[0]
    return f"vocab V={vocab}, context T={context}, embed D={embed}, hidden H={hidden}"


def _shown_model(case):
    return {"model": model_sizes(case["params"], case["tokens"].shape[1]), "tokens": case["tokens"],
            "targets": case["targets"]}


def check_manual_backward(exercise, fn, cases, stress=None, what="batch of tokens"):
    """`fn(params, cache, targets)` returns {name: gradient} equal to autograd's for every parameter;
    every gradient's type, shape, dtype and device are checked first, then the values, and the first
    wrong one in backward order is named, with the slip that explains it where one does.

    `stress="large-logits"` (cases made with `logits_scale`): float32 parameters and cache, compared
    with autograd in float64 from the same values, within 1e-3 of each entry plus 1e-4 of the largest
    gradient. `stress="non-contiguous"`: the cache's tokens reach the answer as a strided view (a slice
    of a wider tensor, as a column of a dataset is)."""
    for case in cases:
        shown = _shown_model(case)
        _, cache = forward(case["params"], case["tokens"], case["targets"])
        if stress == "large-logits":
            shown["largest |logit|"] = f"{cache['logits'].abs().max().item():.0f}"
            reference = reference_grads({n: p.double() for n, p in case["params"].items()}, case["tokens"],
                                        case["targets"])
            expected = {n: g.to(case["params"][n].dtype) for n, g in reference.items()}
            tolerance = {"rtol": 1e-3, "atol": 1e-4 * max(float(g.abs().max()) for g in reference.values())}
        else:
            expected, tolerance = reference_grads(*case.values()), {}
        args, driver = [case["params"], cache, case["targets"]], None
        if stress == "non-contiguous":
            driver = functools.partial(laid_out, stress=stress, position=1, key="tokens")
        with battery.stressed(exercise, stress, what):
            got = guarded(exercise, fn, args, shown, driver=driver)
            if not isinstance(got, dict):
                checks.fail(exercise, "should return a dict {parameter name: gradient}, got " + checks.describe(got),
                            shown)
            missing = [n for n in PARAM_NAMES if n not in got]
            if missing:
                checks.fail(exercise, f"no gradient for {', '.join(missing)}: return one per parameter, "
                                      f"with the keys {list(PARAM_NAMES)}", shown)
            for name in BACKWARD_ORDER:
                check_form(exercise, got[name], expected[name], shown, [f"the gradient of {name}"],
                           None if stress else lambda: _model_hint(name, got[name], case))
            for k, name in enumerate(BACKWARD_ORDER):
                before = (f"the gradients reached before it in backward ({', '.join(BACKWARD_ORDER[:k])}) are "
                          "right, so the slip lies between them and this one" if k else "")
                hint = None if stress else (
                    lambda: "; ".join(h for h in (_model_hint(name, got[name], case), before) if h))
                expect_close_with_hint(exercise, got[name], expected[name], shown, [f"the gradient of {name}"], hint,
                                       **tolerance)
