"""Notebook 07 (a whole network by hand): the notebook's model, and the checks of its five exercises.

Why the model lives here: `manual_backward` and `train_by_hand` are graded against autograd on
*the notebook's* model, so the checks must run the very forward pass the learner differentiates.
In trusted grading the test cells run in the grader, which sees only the names of the answer cells,
and a forward defined in the student's notebook could be redefined by a submission. So the model
(`PARAM_NAMES`, `init_params`, `forward`) is defined once, here, and the notebook imports it and
shows its source.

How the exercises are graded: every reference is PyTorch itself, computed at grading time in
float64 on the grading device: autograd through `F.embedding`, `F.batch_norm` and the model's
forward, and `F.batch_norm`'s own running-statistics update. None of it is an answer, because the
learner's call runs with autograd refused (`no_autograd=True`), under `torch.no_grad()` and,
through `guarded`, with every ATen kernel whose name holds "batch_norm" or "backward" refused too (`F.batch_norm`,
`nn.BatchNorm1d`, `torch.batch_norm_update_stats`, `aten::embedding_dense_backward`, ...), however
it was reached. `train_by_hand` is compared step by step with an autograd-trained twin (`twin_training`).

Failure messages name the slip where one explains the numbers: each check also computes, with
autograd, what a few classic slips would have returned (a BatchNorm whose mean and variance are
treated as constants, normalised with the unbiased variance, a tanh slope taken from its input, a
loss summed instead of averaged, ...) and says which one the answer matches. Such a hint is looked
for only once every result has the right type, shape, dtype and device: a float32 gradient that is
right to float32's precision would otherwise "match" a slip it does not have.

Where right-looking code breaks (`battery`): a check given a `stress` runs its cases so, inside
`battery.trying`, and a failure names the stress: float32 BatchNorm inputs whose mean is 1000 times
their spread (a one-pass variance loses every digit), a model whose float32 logits reach a few
hundred (a softmax without the max overflows), a strided or expanded argument (`.view` fails; an
in-place write into an expanded gradient fails). A stressed case in float32 is compared with a
reference computed in float64 from the same values, with a tolerance float32 can meet. Strided and
expanded arguments are laid out by a driver (`laid_out`) where the answer runs: a copy across the
trusted boundary, or the private copy every answer gets, would be contiguous again.

Trusted grading: the learner's function runs only inside `call_student`, through closures (`guarded`,
`run_training`) that return data: tensors, dicts of tensors, lists of numbers. References and
comparisons stay in the caller.
"""
import contextlib
import functools

import torch
import torch.nn.functional as F
from torch import nn

from autograder import checks
from autograder.checks import GradingError, battery
from autograder.checks.op_watch import OpWatch
from autograder.learner import inputs
from autograder.learner.device import get_device

PARAM_NAMES = ("C", "W1", "b1", "gamma", "beta", "W2", "b2")
BACKWARD_ORDER = ("b2", "W2", "beta", "gamma", "b1", "W1", "C")  # the order backward reaches them
EPS = 1e-5
FORBIDDEN_KERNELS = ("batch_norm", "backward")  # substrings of ATen op names an answer may not run
FORBIDDEN_CALLS = (F.batch_norm, nn.modules.batchnorm._BatchNorm.forward)
CLOSE = dict(rtol=1e-6, atol=1e-9)  # "matches this slip": loose, so that round-off never hides one


# --- the notebook's model ---------------------------------------------------------------------------
def init_params(vocab, context, embed, hidden, *, seed, dtype=torch.float32, device=None):
    """The model's parameters at their usual start: a standard-normal embedding table, weights scaled
    by 1/sqrt(fan-in) (the last layer 10x smaller, so the first loss is near log(vocab)), gamma 1,
    biases and beta 0. Drawn on the CPU from `seed`, so every device starts from the same numbers."""
    device = device or get_device()

    def draw(*shape, k, scale):
        return inputs.randn(*shape, seed=seed * 100 + k, dtype=dtype, device=device, scale=scale)

    def const(value, size):
        return torch.full((size,), float(value), dtype=dtype, device=device)

    return {"C": draw(vocab, embed, k=0, scale=1.0),
            "W1": draw(context * embed, hidden, k=1, scale=(context * embed) ** -0.5),
            "b1": const(0, hidden), "gamma": const(1, hidden), "beta": const(0, hidden),
            "W2": draw(hidden, vocab, k=2, scale=0.1 * hidden ** -0.5), "b2": const(0, vocab)}


def forward(params, tokens, targets, eps=EPS):
    """Mean cross-entropy of the model on one batch, and the cache of what its backward pass reads.

    tokens (N, T) int64, targets (N,) int64. Shapes: C (V, D), W1 (T*D, H), b1/gamma/beta (H,),
    W2 (H, V), b2 (V,). BatchNorm runs in training mode: the batch's own mean and biased variance.
    """
    C, W1, b1, gamma, beta, W2, b2 = (params[name] for name in PARAM_NAMES)
    N = tokens.shape[0]
    emb = C[tokens]                             # (N, T, D)  one row of C per token
    x = emb.reshape(N, -1)                      # (N, T*D)   the T rows side by side
    h = x @ W1 + b1                             # (N, H)
    mean = h.mean(0)                            # (H,)
    var = ((h - mean) ** 2).mean(0)             # (H,)       biased: divided by N
    istd = (var + eps) ** -0.5                  # (H,)
    xhat = (h - mean) * istd                    # (N, H)     each column: mean 0, variance ~1
    bn = gamma * xhat + beta                    # (N, H)
    a = torch.tanh(bn)                          # (N, H)
    logits = a @ W2 + b2                        # (N, V)
    logp = logits.log_softmax(-1)               # (N, V)
    loss = -logp[torch.arange(N, device=tokens.device), targets].mean()
    cache = {"tokens": tokens, "emb": emb, "x": x, "h": h, "mean": mean, "var": var, "istd": istd,
             "xhat": xhat, "bn": bn, "a": a, "logits": logits, "logp": logp}
    return loss, cache


class _SlopeFromInput(torch.autograd.Function):
    """tanh whose backward uses 1 - input**2 instead of 1 - output**2 (a slip, for hints only)."""

    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return torch.tanh(z)

    @staticmethod
    def backward(ctx, g):
        (z,) = ctx.saved_tensors
        return g * (1 - z ** 2)


def _slipped_loss(params, tokens, targets, slip, eps=EPS):
    """The model's loss as a slipped backward pass would differentiate it (for hints only): the
    same arithmetic as `forward`, with one step changed. A unit test holds it to `forward` at slip None."""
    C, W1, b1, gamma, beta, W2, b2 = (params[name] for name in PARAM_NAMES)
    N = tokens.shape[0]
    h = C[tokens].reshape(N, -1) @ W1 + b1
    bn = _bn_forward(h, gamma, beta, eps, slip)
    a = _SlopeFromInput.apply(bn) if slip == "tanh slope" else torch.tanh(bn)
    logits = a @ W2 + b2
    if slip == "no one-hot":
        return logits.logsumexp(-1).mean()
    loss = F.cross_entropy(logits, targets, reduction="sum")
    return loss if slip == "summed" else loss / N


def _bn_forward(h, gamma, beta, eps, slip=None):
    """Training-mode BatchNorm over dim 0, or one of its slips: statistics treated as constants,
    the unbiased variance, eps outside the square root or left out."""
    mean = h.mean(0)
    var = h.var(0, unbiased=slip == "unbiased")
    if slip in ("no mean term", "no mean or variance term"):
        mean = mean.detach()
    if slip in ("no variance term", "no mean or variance term"):
        var = var.detach()
    istd = {"eps outside": 1 / (var.sqrt() + eps), "no eps": 1 / var.sqrt()}.get(slip, (var + eps) ** -0.5)
    return gamma * (h - mean) * istd + beta


# --- running an answer --------------------------------------------------------------------------------
def _private(value):
    """A copy of the tensors in `value` (nested in dicts, lists and tuples); anything else as it is."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _private(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_private(v) for v in value)
    return value


def guarded(exercise, fn, args, shown, driver=None):
    """`fn(*args)` (or `driver(fn, *args)`) by hand: through `call_student` with autograd refused,
    under `torch.no_grad()` (no graph is recorded, so no node's backward can be called directly),
    `F.batch_norm` and `nn.BatchNorm1d` forbidden, and no ATen BatchNorm or backward kernel allowed,
    however reached. The answer gets private copies: nothing it does to them reaches the caller."""
    private = _private(list(args))

    def run():
        watch = OpWatch(lambda name: any(word in name for word in FORBIDDEN_KERNELS))
        with torch.no_grad(), watch:  # no graph either: a node's backward cannot be called by hand
            result = fn(*private) if driver is None else driver(fn, *private)
        if watch.used:
            what = ("PyTorch's own backward kernel {}: write the gradient yourself" if "backward" in watch.used
                    else "PyTorch's BatchNorm kernel {}: compute BatchNorm's statistics yourself")
            raise GradingError(f"{exercise}: ran {what.format(watch.used)}\n  on input:\n"
                               f"{checks.describe_inputs(shown)}")
        return result

    return checks.call_student(exercise, run, no_autograd=True, forbid=FORBIDDEN_CALLS)


def _grads(loss_or_out, leaves, upstream=None):
    return list(torch.autograd.grad(loss_or_out, leaves, upstream))


def _matches(got, expected):
    return (isinstance(got, torch.Tensor) and got.shape == expected.shape and got.device == expected.device
            and torch.allclose(got.double(), expected.double(), **CLOSE))


def _form_problem(got, expected):
    """What is wrong with `got`'s type, shape, dtype or device against `expected` ('' if nothing)."""
    if not isinstance(got, torch.Tensor):
        return f"should be a torch.Tensor, got {checks.describe(got)}"
    if got.shape != expected.shape:
        return f"has shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    if got.dtype != expected.dtype:
        return (f"has dtype {got.dtype}, expected {expected.dtype}: return each result in the dtype of the inputs "
                "(new tensors with dtype= and device= of an input, or *_like)")
    if got.device != expected.device:
        return f"is on device {got.device}, expected {expected.device}: make new tensors on the inputs' device"
    return ""


def _check_form(exercise, got, expected, shown, names, hint=None):
    """Type, shape, dtype and device of every part, before any value is compared. Only a wrong shape
    asks `hint()` (which looks at shapes first: a table sized from the largest index, a sum over the
    wrong axis); a wrong dtype or device is named as such, never explained by a slip of the values."""
    if isinstance(expected, torch.Tensor):
        parts = [(names[0], got, expected)]
    else:
        if not isinstance(got, (tuple, list)):
            checks.fail(exercise, f"should return a tuple of {len(expected)} tensors, got {checks.describe(got)}",
                        shown)
        if len(got) != len(expected):
            checks.fail(exercise, f"should return {len(expected)} values, got {len(got)}", shown)
        parts = list(zip(names, got, expected))
    for name, g, e in parts:
        problem = _form_problem(g, e)
        if problem:
            found = hint() if hint is not None and problem.startswith("has shape") else ""
            checks.fail(exercise, f"{name} {problem}", shown, f"  hint: {found}" if found else "")


def _expect_close(exercise, got, expected, shown, names, hint=None, rtol=None, atol=None):
    """checks.expect_close after `_check_form`, whose message gains `hint()` (the slip that explains the
    difference) where there is one: the hint is looked for only once the answer is known to be wrong
    in its values alone."""
    _check_form(exercise, got, expected, shown, names, hint)
    try:
        checks.expect_close(exercise, got, expected, inputs=shown, names=names, rtol=rtol, atol=atol)
    except GradingError as err:
        found = hint() if hint is not None else ""
        if not found:
            raise
        raise GradingError(f"{err}\n  hint: {found}") from None


# --- the battery's stresses -------------------------------------------------------------------------------
_LAYOUTS = {"non-contiguous": battery.non_contiguous,
            "expanded": lambda t: battery.expanded(t[:1], t.shape[0])}


def laid_out(fn, *args, stress, position, key=None):
    """Driver: fn(*args) with argument `position` (or its entry `key`, for a dict such as the cache)
    laid out as `stress` lays it out: a strided view with gaps, or its first row expanded (stride 0).
    Built here, where the answer runs, because every copy on the way (the answer's private copy, the
    trusted boundary) would make it contiguous again."""
    args = list(args)
    if key is None:
        args[position] = _LAYOUTS[stress](args[position])
    else:
        args[position] = {**args[position], key: _LAYOUTS[stress](args[position][key])}
    return fn(*args)


def _stressed(case, stress, argument, key=None):
    """(case, driver) for `stress` on `argument` (a name of `case`): an expanded argument's values
    become its first row repeated, so that the reference sees what the answer sees."""
    if stress not in _LAYOUTS:
        return case, None
    if stress == "expanded":
        value = case[argument] if key is None else case[argument][key]
        rows = value[:1].expand_as(value).clone()
        case = {**case, argument: rows if key is None else {**case[argument], key: rows}}
    return case, functools.partial(laid_out, stress=stress, position=list(case).index(argument), key=key)


def _trying(exercise, stress, what):
    return battery.trying(exercise, stress, what=what) if stress else contextlib.nullcontext()


# --- embedding_backward -----------------------------------------------------------------------------
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
    return _grads(F.embedding(idx, table), [table], dout)[0]


def _embedding_hint(got, expected, idx):
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
        case, driver = _stressed(case, stress, what)
        expected = reference_embedding_backward(*case.values())
        with _trying(exercise, stress, what):
            got = guarded(exercise, fn, list(case.values()), case, driver=driver)
            _expect_close(exercise, got, expected, case, ["the table's gradient"],
                          None if stress else lambda: _embedding_hint(got, expected, case["idx"]))


# --- batchnorm_backward -----------------------------------------------------------------------------
def batchnorm_case(n, c, *, seed, tiny=(), dtype=torch.float64, device=None, eps=EPS, large_mean=False):
    """{dout, x, gamma, eps} for an (n, c) input; channels listed in `tiny` have a standard deviation
    of 1e-3 or 3e-3 (variance below or near eps), where where eps goes matters. `large_mean`: a float32
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


def _bn_grads(dout, x, gamma, eps, slip):
    leaves = [t.detach().clone().requires_grad_() for t in (x, gamma, torch.zeros_like(gamma))]
    with torch.enable_grad():
        if slip is None:
            out = F.batch_norm(leaves[0], None, None, leaves[1], leaves[2], training=True, eps=eps)
        else:
            out = _bn_forward(*leaves, eps, slip)
        return _grads(out, leaves, dout)


def reference_batchnorm_backward(dout, x, gamma, eps=EPS):
    """(dx, dgamma, dbeta) by autograd through training-mode F.batch_norm."""
    return tuple(_bn_grads(dout, x, gamma, eps, None))


BN_SLIPS = {
    "no mean term": "dx misses the term that comes from the mean depending on every x: your dx differs "
                    "from the reference by a constant in each channel",
    "no variance term": "dx misses the term that comes from the variance depending on every x: your dx "
                        "differs from the reference by a multiple of xhat in each channel",
    "no mean or variance term": "dx is gamma * istd * dout: the two terms that come from the mean and the "
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
    if _matches(dgamma, expected[2]) and _matches(dbeta, expected[1]):
        return "dgamma and dbeta are swapped: dbeta = sum of dout, dgamma = sum of dout * xhat"
    if n == c and _matches(dbeta, case["dout"].sum(1)):
        return "dbeta is summed over the channels (dim 1); sum over the batch (dim 0)"
    if _matches(dx, expected[0] / case["gamma"]):
        return "dx lacks the factor gamma: the output is gamma * xhat + beta"
    if isinstance(dx, torch.Tensor) and dx.shape == expected[0].shape and dx.device == expected[0].device:
        wrong = ~torch.isclose(dx.double(), expected[0].double(), **CLOSE).all(0)
        small = case["x"].var(0, unbiased=False) < 100 * case["eps"]
        if wrong.any() and bool(small[wrong].all()):
            return (f"only channels whose variance is near eps ({wrong.nonzero().flatten().tolist()}) are wrong: "
                    "BatchNorm divides by sqrt(var + eps), eps added to the biased variance inside the root")
    for slip, hint in BN_SLIPS.items():
        if _matches(dx, _bn_grads(*case.values(), slip)[0]):
            return hint
    if (isinstance(dx, torch.Tensor) and dx.shape == expected[0].shape and dx.device == expected[0].device
            and not _matches(dx, expected[0])
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
    _check_form(exercise, got, tuple(t.float() for t in reference), case, names)
    for name, g, e in zip(names, got, reference):
        checks.expect_close(exercise, g.double(), e, inputs=case, names=[name], rtol=0.0,
                            atol=FLOAT32_SHARE * float(e.abs().max()))


def check_batchnorm_backward(exercise, fn, cases, stress=None, what="dout"):
    """`fn(dout, x, gamma, eps)` returns autograd's (dx, dgamma, dbeta) of training-mode BatchNorm.

    `stress="float32-large-mean"` (cases made with `large_mean=True`): compared with float64 (see
    `_check_in_float32`). "non-contiguous" or "expanded": the argument `what` (dout or x) reaches the
    answer laid out so."""
    for case in cases:
        case, driver = _stressed(case, stress, what)
        with _trying(exercise, stress, what):
            if stress == "float32-large-mean":
                _check_in_float32(exercise, fn, case)
                continue
            expected = reference_batchnorm_backward(*case.values())
            got = guarded(exercise, fn, list(case.values()), case, driver=driver)
            _expect_close(exercise, got, expected, case, ["dx", "dgamma", "dbeta"],
                          None if stress else lambda: _batchnorm_hint(got, expected, case))


# --- batchnorm_update_running -----------------------------------------------------------------------
def running_case(shape, momentum, *, seed, dtype=torch.float64, device=None):
    """{running_mean, running_var, x, momentum} with running statistics away from 0 and 1."""
    device = device or get_device()
    c = shape[1]
    x = inputs.randn(*shape, seed=seed, dtype=dtype, device=device, scale=1.5) + 0.3
    running_mean = inputs.randn(c, seed=seed + 1, dtype=dtype, device=device)
    running_var = inputs.randn(c, seed=seed + 2, dtype=dtype, device=device).abs() + 0.5
    return {"running_mean": running_mean, "running_var": running_var, "x": x, "momentum": momentum}


def reference_running(running_mean, running_var, x, momentum=0.1):
    """The running statistics after F.batch_norm in training mode (as nn.BatchNorm1d updates them)."""
    mean, var = running_mean.clone(), running_var.clone()
    F.batch_norm(x, mean, var, training=True, momentum=momentum)
    return mean, var


def _running_hint(got, expected, case):
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return ""
    x, momentum, old_var = case["x"], case["momentum"], case["running_var"]
    c = x.shape[1]
    if any(isinstance(t, torch.Tensor) and t.dim() > 1 for t in got):
        return f"reduce over every dimension but the channels (dim 1): the statistics have shape ({c},)"
    if momentum != 0.1 and _matches(got[0], reference_running(case["running_mean"], old_var, x, 0.1)[0]):
        return f"this is the update with momentum 0.1: use the momentum argument ({momentum:g} here)"
    swapped = reference_running(case["running_mean"], old_var, x, 1 - momentum)
    if _matches(got[0], swapped[0]) and not _matches(got[0], expected[0]):
        return (f"momentum convention: PyTorch keeps (1 - momentum) of the old statistic and takes momentum of "
                f"the batch's; with momentum={momentum:g} the batch's share is {momentum:g}")
    n = x.numel() // c
    new_share = expected[1] - (1 - momentum) * old_var  # momentum * the batch's unbiased variance
    if n > 1 and _matches(got[1], (1 - momentum) * old_var + new_share * (n - 1) / n):
        return ("running_var uses the biased variance (divided by n); nn.BatchNorm1d keeps the unbiased "
                "one (divided by n - 1) as its estimate for evaluation")
    per_sample = x.shape[0] / (x.shape[0] - 1)
    if x.dim() == 3 and _matches(got[1], (1 - momentum) * old_var + new_share * (n - 1) / n * per_sample):
        return (f"for an (N, C, L) input every channel has n = N * L = {n} values: the unbiased variance "
                f"divides by n - 1 = {n - 1}, not N - 1")
    return ""


def run_keeping_inputs(fn, *args, stress=None, position=None):
    """Driver: fn(*args), and the positions of the tensor arguments that fn changed; with a `stress`,
    argument `position` is laid out so first (see `laid_out`)."""
    args = list(args)
    if stress is not None:
        args[position] = _LAYOUTS[stress](args[position])
    before = _private(args)
    result = fn(*args)
    changed = [i for i, (a, b) in enumerate(zip(args, before)) if isinstance(a, torch.Tensor) and not torch.equal(a, b)]
    return result, changed


def check_running(exercise, fn, cases, stress=None, what="x"):
    """`fn(running_mean, running_var, x, momentum)` returns nn.BatchNorm1d's new running statistics
    as new tensors, and changes none of its arguments; with `stress="non-contiguous"`, `x` reaches it
    as a strided view (an (N, C, L) input is often a transposed channels-last tensor)."""
    for case in cases:
        driver = run_keeping_inputs
        if stress is not None:
            case, _ = _stressed(case, stress, what)
            driver = functools.partial(run_keeping_inputs, stress=stress, position=list(case).index(what))
        expected = reference_running(*case.values())
        with _trying(exercise, stress, what):
            got, changed = guarded(exercise, fn, list(case.values()), case, driver=driver)
            _expect_close(exercise, got, expected, case, ["new running_mean", "new running_var"],
                          None if stress else lambda: _running_hint(got, expected, case))
        if changed:
            checks.fail(exercise, f"changed its argument {list(case)[changed[0]]} in place: return new tensors and "
                                  "leave the arguments as they were (nn.BatchNorm1d updates its own buffers; this "
                                  "function must not update the caller's)", case)


# --- manual_backward ----------------------------------------------------------------------------------
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
    """The model's loss and {name: gradient} by autograd (or a slip's, see `_slipped_loss`)."""
    leaves = {name: params[name].detach().clone().requires_grad_() for name in PARAM_NAMES}
    with torch.enable_grad():
        loss = forward(leaves, tokens, targets)[0] if slip is None else _slipped_loss(leaves, tokens, targets, slip)
        return loss.detach(), dict(zip(PARAM_NAMES, _grads(loss, [leaves[n] for n in PARAM_NAMES])))


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
        if _matches(got, reference_grads(*case.values(), slip=slip)[name]):
            return hint
    if name == "C":
        expected = reference_grads(*case.values())["C"]
        return _embedding_hint(got, expected, case["tokens"])
    return ""


def _sizes(params, context):
    (vocab, embed), hidden = params["C"].shape, params["b1"].shape[0]
    return f"vocab V={vocab}, context T={context}, embed D={embed}, hidden H={hidden}"


def _shown_model(case):
    return {"model": _sizes(case["params"], case["tokens"].shape[1]), "tokens": case["tokens"],
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
        with _trying(exercise, stress, what):
            got = guarded(exercise, fn, args, shown, driver=driver)
            if not isinstance(got, dict):
                checks.fail(exercise, "should return a dict {parameter name: gradient}, got " + checks.describe(got),
                            shown)
            missing = [n for n in PARAM_NAMES if n not in got]
            if missing:
                checks.fail(exercise, f"no gradient for {', '.join(missing)}: return one per parameter, "
                                      f"with the keys {list(PARAM_NAMES)}", shown)
            for name in BACKWARD_ORDER:
                _check_form(exercise, got[name], expected[name], shown, [f"the gradient of {name}"],
                            None if stress else lambda: _model_hint(name, got[name], case))
            for k, name in enumerate(BACKWARD_ORDER):
                before = (f"the gradients reached before it in backward ({', '.join(BACKWARD_ORDER[:k])}) are "
                          "right, so the slip lies between them and this one" if k else "")
                hint = None if stress else (
                    lambda: "; ".join(h for h in (_model_hint(name, got[name], case), before) if h))
                _expect_close(exercise, got[name], expected[name], shown, [f"the gradient of {name}"], hint,
                              **tolerance)


# --- train_by_hand ------------------------------------------------------------------------------------
def training_case(vocab, context, embed, hidden, batch, n_batches, steps, lr, *, seed, dtype=torch.float64,
                  device=None):
    """{params, data, steps, lr}: random parameters and n_batches batches of (tokens, targets)."""
    device = device or get_device()
    params = random_params(vocab, context, embed, hidden, seed=seed, dtype=dtype, device=device)
    data = [(inputs.randint(vocab, batch, context, seed=seed + 10 + 2 * i, device=device),
             inputs.randint(vocab, batch, seed=seed + 11 + 2 * i, device=device)) for i in range(n_batches)]
    return {"params": params, "data": data, "steps": steps, "lr": lr}


def twin_training(params, data, steps, lr, loss_after_update=False):
    """(losses, final parameters) of plain SGD with autograd's gradients: step i takes
    data[i % len(data)], records its loss, then p -= lr * grad (`loss_after_update`: a slip, for
    hints, that records the loss of the batch after the update instead)."""
    leaves = {name: params[name].detach().clone() for name in PARAM_NAMES}
    losses = []
    for step in range(steps):
        tokens, targets = data[step % len(data)]
        loss, grads = loss_and_grads(leaves, tokens, targets)
        leaves = {name: leaves[name] - lr * grads[name] for name in PARAM_NAMES}
        losses.append(float(forward(leaves, tokens, targets)[0] if loss_after_update else loss))
    return losses, leaves


def run_training(fn, params, data, steps, lr):
    """Driver: the learner's fn(params, data, steps, lr) on the given copies; returns what it
    returned and the parameters it left in the dict."""
    result = fn(params, data, steps, lr)
    return result, {name: value for name, value in params.items()}


def _training_hint(got_losses, case):
    params, data, steps, lr = case.values()
    for what, twin in (("your parameters never change: update them in place (params[name] -= lr * grad) "
                        "or store the new tensors back into the dict", (params, data, steps, 0.0)),
                       ("the parameters move uphill: SGD subtracts lr * grad", (params, data, steps, -lr)),
                       ("every step uses the first batch: step i takes data[i % len(data)]",
                        (params, data[:1], steps, lr)),
                       ("each loss is the batch's loss after the update: record the loss the step's forward pass "
                        "computed, before updating", (params, data, steps, lr, True))):
        losses = twin_training(*twin)[0]
        if torch.allclose(torch.tensor(got_losses, dtype=torch.float64), torch.tensor(losses, dtype=torch.float64),
                          **CLOSE):
            return what
    return ""


def check_train_by_hand(exercise, fn, cases):
    """Step by step, `fn`'s losses equal an autograd-trained twin's, and so do the final parameters."""
    for case in cases:
        losses, final = twin_training(*case.values())
        p = case["params"]
        shown = {"model": _sizes(p, case["data"][0][0].shape[1]),
                 "data": f"{len(case['data'])} batches of {case['data'][0][0].shape[0]} examples",
                 "steps": case["steps"], "lr": case["lr"]}
        got, params_after = guarded(exercise, fn, list(case.values()), shown, driver=run_training)
        if not isinstance(got, (list, tuple)) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                         for v in got):
            checks.fail(exercise, "should return a list of Python floats, one loss per step (loss.item()), got "
                                  f"{checks.describe(got)}", shown)
        if len(got) != len(losses):
            checks.fail(exercise, f"returned {len(got)} losses for {len(losses)} steps", shown)
        for step, (g, e) in enumerate(zip(got, losses)):
            if abs(g - e) > 1e-9 + 1e-7 * abs(e):
                agree = "step 0 agrees" if step == 1 else f"steps 0 to {step - 1} agree"
                where = ("the first step's loss is already wrong: the forward pass, or the batch it used"
                         if step == 0 else f"{agree}, so the update after step {step - 1} (gradient or SGD step) "
                                           "is where they part")
                hint = _training_hint(got, case)
                checks.fail(exercise, f"the loss of step {step} is {g:.10g}; the autograd-trained twin's is {e:.10g}",
                            shown, f"  {where}" + (f"\n  hint: {hint}" if hint else ""))
        if not isinstance(params_after, dict) or any(n not in params_after for n in PARAM_NAMES):
            checks.fail(exercise, "the parameter dict lost some of its entries", shown)
        for name in PARAM_NAMES:
            checks.expect_close(exercise, params_after[name], final[name], inputs=shown,
                                names=[f"parameter {name} after {case['steps']} steps"])
