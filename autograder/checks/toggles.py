"""Grading helpers for notebook 04 (the four toggles): seeded models, PyTorch references, checks.

Why a module of its own: the exercises of notebook 04 are judged by what they do to autograd's
*state*, not by one returned tensor. Which parameters end up with `requires_grad`, which `.grad`
buffers change, whether a gradient reaches a tensor, whether a graph outlives the call. So every
check here builds a small seeded model, runs the learner's function on it through
`checks.call_student` (time limit, nothing on stderr, readable errors), then probes what the call
left behind and compares it with the same steps done by PyTorch on an identical copy of the model.
Every failure is a `GradingError` that names the exercise, the case and what differed.

Learner code is called through `call_student`, and wherever more than the bare call is needed,
through a DRIVER: a module-level function here (`walk_graph`, `raised_by`, `distill_leaf_backward`,
`per_loss_run`, `accumulate_run`, `call_with_grads`, `no_graph_run`, `predict_run`) that builds or
receives the inputs, calls the learner's function, does what must happen beside it (backward(), a
saved-tensor ledger, weak references, .grad set beforehand, the grad mode) and returns plain data:
values, gradients, counts, the records below. A driver runs wherever the learner's code runs (in
trusted grading, the notebook's kernel; see autograder/grader/trusted.py), which is where an autograd graph
can live: graphs never cross to the grader, so they are built in the driver, from builders or seeds.
The checks compare that data with the PyTorch reference in their own process, so no verdict is
taken where the learner's code could reach it. `call_student` copies the tensors it is given
positionally (detached), so a driver gets the tensors whose graph or .grad matters through a
closure, or builds them itself.

Weights and data come from `autograder.learner.inputs` (drawn on the CPU from a seed, then moved), so a
check grades the same numbers on every device. `draw_autograd_graph` draws a PyTorch graph for the
notebook.
"""
import collections
import contextlib
import copy
import dataclasses
import gc
import math
import weakref

import graphviz
import torch
import torch.nn.functional as F
from torch import nn

from autograder import checks
from autograder.checks import GradingError, boundary, call_student, expect_close
from autograder.learner import inputs
from autograder.learner.device import get_device
from autograder.learner.memory import SavedTensorLedger

# float32 results that sum the same terms in another order (chunks, kl_div vs a hand formula)
# differ in the last bits; every wrong answer caught here is off by far more.
LOOSE = {torch.float64: (1e-9, 1e-10), torch.float32: (1e-4, 1e-5)}
MEMORY_SHARE = 0.6  # accumulated_grads may hold at most this share of the full batch's saved bytes


# Drivers that build graphs run with gradient tracking on, whatever the notebook's own cells left the
# kernel in (a predict that switched it off loses its own marks, not those of every later exercise).
_GRAD_ON = torch.enable_grad()


def _fail(exercise, what, details=""):
    raise GradingError(f"{exercise}: {what}" + (f"\n{details}" if details else ""))


def _run(exercise, fn, case, *args, **kwargs):
    """checks.call_student, with the case named under any failure it reports."""
    try:
        return call_student(exercise, fn, *args, **kwargs)
    except GradingError as err:
        raise GradingError(f"{err}\n  case: {case}") from None


def _summary(value):
    """checks.describe, but a sequence is shown item by item, tensors by their shape only."""
    if isinstance(value, (list, tuple)):
        items = [f"tensor{tuple(v.shape)}" if isinstance(v, torch.Tensor) else checks.describe(v) for v in value[:6]]
        more = ", ..." if len(value) > 6 else ""
        return f"a {type(value).__name__} of {len(value)}: [{', '.join(items)}{more}]"
    return checks.describe(value)


def _close(exercise, got, expected, *, case, names):
    """expect_close with the float tolerances above; the case is named right under the headline."""
    rtol, atol = LOOSE[expected[0].dtype]
    try:
        expect_close(exercise, tuple(got), tuple(expected), names=names, rtol=rtol, atol=atol)
    except GradingError as err:
        headline, _, details = str(err).partition("\n")
        raise GradingError(f"{headline}\n  case: {case}" + (f"\n{details}" if details else "")) from None


# --- seeded models -------------------------------------------------------------------------------
def seeded(module, seed, dtype=torch.float64, device=None):
    """`module` in `dtype` on `device`, every parameter drawn from `seed` (scaled by 1/sqrt(fan-in)).
    `module` may be a function that builds it: it then runs without touching the global RNG, so that
    grading leaves the notebook's random stream as it found it."""
    device = device or get_device()
    if not isinstance(module, nn.Module):
        with torch.random.fork_rng(devices=[]):
            module = module()
    module.to(dtype=dtype, device=device)
    with torch.no_grad():
        for i, p in enumerate(module.parameters()):
            fan_in = p.shape[-1] if p.dim() > 1 else p.numel()
            p.copy_(inputs.randn(*p.shape, seed=seed * 1000 + i, dtype=dtype, device=device, scale=fan_in ** -0.5))
    return module


def mlp(sizes, seed, dtype=torch.float64, device=None):
    """Linear layers of the given sizes with tanh between them (none after the last)."""
    layers = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(lambda n_in=n_in, n_out=n_out: nn.Linear(n_in, n_out))
        if i < len(sizes) - 2:
            layers.append(nn.Tanh)
    return seeded(lambda: nn.Sequential(*[make() for make in layers]), seed, dtype, device)


class LoRALinear(nn.Module):
    """base(x) + (x A^T) B^T: a full linear layer plus a low-rank update, as in LoRA."""

    def __init__(self, n_in, n_out, rank):
        super().__init__()
        self.base = nn.Linear(n_in, n_out)
        self.lora_A = nn.Parameter(torch.randn(rank, n_in) / n_in ** 0.5)  # LoRA's start: A random,
        self.lora_B = nn.Parameter(torch.zeros(n_out, rank))                # B zero (no change yet)

    def forward(self, x):
        return self.base(x) + (x @ self.lora_A.T) @ self.lora_B.T


class LoRANet(nn.Module):
    """embed -> tanh -> LoRA block (residual) -> LayerNorm -> head: ten named parameters."""

    def __init__(self, n_in=5, hidden=8, n_out=3, rank=2):
        super().__init__()
        self.embed = nn.Linear(n_in, hidden)
        self.block = LoRALinear(hidden, hidden, rank)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, n_out)

    def forward(self, x):
        h = torch.tanh(self.embed(x))
        return self.head(self.norm(h + torch.tanh(self.block(h))))


class TwoHeads(nn.Module):
    """A shared trunk and two heads; returns (trunk features, head a, head b)."""

    def __init__(self, n_in=4, hidden=6):
        super().__init__()
        self.trunk = nn.Linear(n_in, hidden)
        self.head_a = nn.Linear(hidden, 2)
        self.head_b = nn.Linear(hidden, 3)

    def forward(self, x):
        h = torch.tanh(self.trunk(x))
        return h, self.head_a(h), self.head_b(h)


def lora_net(seed, dtype=torch.float64, device=None):
    return seeded(LoRANet, seed, dtype, device)


def deep_stack(seed, dtype=torch.float64, device=None, layers=12, width=3):
    """`layers` Linear+Tanh pairs: parameter names '0.weight', '2.weight', ..., '22.weight'."""
    return seeded(lambda: nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(width, width), nn.Tanh())]),
                  seed, dtype, device)


def two_heads(seed, dtype=torch.float64, device=None):
    return seeded(TwoHeads, seed, dtype, device)


def _batch(model, n, seed, dtype, device):
    n_in = next(m for m in model.modules() if isinstance(m, nn.Linear)).in_features
    return inputs.randn(n, n_in, seed=seed, dtype=dtype, device=device)


def _describe_model(model):
    names = [n for n, _ in model.named_parameters()]
    return f"{type(model).__name__} with parameters {names}"


# --- grad_fn_names -------------------------------------------------------------------------------
def reference_grad_fn_names(t):
    """Class names of the nodes reachable from t.grad_fn, breadth first, each node once."""
    root = t.grad_fn
    if root is None:
        return []
    names, seen, queue = [], {root}, collections.deque([root])
    while queue:
        node = queue.popleft()
        names.append(type(node).__name__)
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                queue.append(child)
    return names


class _Double(torch.autograd.Function):
    """2 x, as a custom Function: its node is called _DoubleBackward."""

    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


def sample_graphs(seed, dtype=torch.float64, device=None):
    """[(description, build)]: graphs that tell a breadth-first walk that visits each node once apart
    from the usual slips (depth first, duplicates, names merged, None entries, roots, leaves).

    `build()` makes the graph afresh from leaves drawn here: a graph cannot be sent to the learner's
    kernel (pickling keeps a tensor's values, not its grad_fn), a builder and its leaves can."""
    device = device or get_device()

    def leaf(*shape, k):
        return inputs.randn(*shape, seed=seed + k, dtype=dtype, device=device).requires_grad_()

    def const(*shape, k):
        return inputs.randn(*shape, seed=seed + k, dtype=dtype, device=device)

    x, w, v = leaf(3, k=0), leaf(3, k=1), leaf(3, k=2)
    c = const(3, k=3)
    net = mlp([3, 4, 2], seed + 5, dtype, device)
    net_in, net_target = const(5, 3, k=6), const(5, 2, k=7)
    W_frozen = const(4, 3, k=8)
    A, B = leaf(2, 3, k=9), leaf(4, 2, k=10)
    lora_in = const(6, 3, k=11)

    def shared():
        h = x * w
        return h.sum() + h.mean()

    def in_place():
        y = x * 2
        y += 1
        return y.sum()

    def ladder():
        h = x
        for _ in range(60):
            h = torch.tanh(h) + h * 0.5  # every step uses the previous node twice
        return h.sum()

    return [
        ("h = x * w; L = h.sum() + h.mean()  (h is shared)", shared),
        ("L = ((x * w) * (w * 3)).sum()  (three different MulBackward0 nodes)", lambda: ((x * w) * (w * 3)).sum()),
        ("L = (x * c + c).sum() with c a constant  (next_functions holds None)", lambda: (x * c + c).sum()),
        ("L = (x.exp() * w).sum() + (w.sin() * v).mean() + v.sum()",
         lambda: (x.exp() * w).sum() + (w.sin() * v).mean() + v.sum()),
        ("y = x * 2; y += 1; L = y.sum()  (an in-place add)", in_place),
        ("L = _Double.apply(x).sum()  (a custom autograd.Function)", lambda: _Double.apply(x).sum()),
        ("F.mse_loss(net(inp), target) for a Linear-Tanh-Linear net, inp without grad",
         lambda: F.mse_loss(net(net_in), net_target)),
        ("(inp @ W.T + (inp @ A.T) @ B.T).pow(2).mean() with W frozen (a LoRA layer)",
         lambda: (lora_in @ W_frozen.T + (lora_in @ A.T) @ B.T).pow(2).mean()),
        ("60 steps of h = tanh(h) + h * 0.5  (2**60 paths, 182 nodes)", ladder),
        ("x itself: a leaf, grad_fn is None", lambda: x),
        ("c * 2 with c a constant: no graph at all", lambda: c * 2),
    ]


@_GRAD_ON
def walk_graph(fn, build):
    """Driver: fn(build()), the graph built where fn runs (in trusted grading, the learner's kernel)."""
    return fn(build())


def _grad_fn_hint(got, expected):
    if any(isinstance(n, str) and n.startswith("torch::") for n in got):
        return ("node.name() spells some classes with their C++ namespace "
                "('torch::autograd::AccumulateGrad'): use type(node).__name__")
    if "NoneType" in got or "None" in got:
        return "next_functions holds (None, 0) for inputs that need no gradient: skip those entries"
    if sorted(got) == sorted(expected):
        return ("the right nodes in the wrong order: visit them breadth first, with a first-in "
                "first-out queue (collections.deque, popleft) and each node's next_functions in order")
    if got and expected and got[0] != expected[0]:
        return "the list starts with the root itself: type(t.grad_fn).__name__"
    if len(got) > len(expected) and set(got) <= set(expected):
        return ("a node reached along two paths must appear once: remember the nodes already queued "
                "(node objects, compared with `is` or kept in a set)")
    if len(got) < len(expected) and set(got) == set(expected):
        return ("two different nodes can have the same class name (several MulBackward0): "
                "deduplicate nodes, not names")
    if "AccumulateGrad" in expected and "AccumulateGrad" not in got:
        return "the AccumulateGrad nodes (one per leaf that requires grad) belong in the list too"
    return ""


def _type_name(value):
    """The class name of a value, or of what it stood for when it came back from the kernel as a stand-in."""
    return value.type_name if isinstance(value, (boundary.Opaque, boundary.Raised)) else type(value).__name__


def check_grad_fn_names(exercise, fn, graphs, time_limit=10.0):
    """Compare fn(t) with the reference walk on every (description, build) of `graphs`, where
    build() makes the tensor t: once here for the reference, once beside fn for fn."""
    for what, build in graphs:
        if not callable(build):
            raise TypeError(f"check_grad_fn_names: the graph of {what} must come as a function that builds it "
                            "(lambda: ...): a graph does not survive the trip to the learner's kernel")
        expected = reference_grad_fn_names(build())
        got = _run(exercise, lambda: walk_graph(fn, build), f"the graph of {what}", time_limit=time_limit)
        if not isinstance(got, (list, tuple)):
            _fail(exercise, f"should return a list of class names, got {_summary(got)}",
                  f"  for the graph of: {what}")
        got = list(got)
        if not all(isinstance(n, str) for n in got):
            bad = next(n for n in got if not isinstance(n, str))
            _fail(exercise, f"the list should hold strings (class names), it holds {_type_name(bad)} {bad!r}",
                  f"  for the graph of: {what}\n  hint: type(node).__name__ is the class name of a node")
        if got != expected:
            first = next((i for i, (g, e) in enumerate(zip(got, expected)) if g != e), min(len(got), len(expected)))
            shown_got = got if len(got) <= 14 else got[:14] + [f"... ({len(got)} names)"]
            shown_exp = expected if len(expected) <= 14 else expected[:14] + [f"... ({len(expected)} names)"]
            hint = _grad_fn_hint(got, expected)
            _fail(exercise, f"wrong list for the graph of: {what}",
                  f"  expected ({len(expected)} nodes, breadth first from t.grad_fn, each node once): {shown_exp}\n"
                  f"  got      ({len(got)} names): {shown_got}\n"
                  f"  first difference at position {first}"
                  + (f"\n  hint: {hint}" if hint else ""))


# --- freeze_all_but ------------------------------------------------------------------------------
def check_freeze_flags(exercise, fn, build, trainable, *, seed, frozen_before=()):
    """After fn(model, trainable): exactly the named parameters require grad, and fn returned
    exactly those Parameter objects (any order, each once)."""
    _freeze_and_check_flags(exercise, fn, build, trainable, seed=seed, frozen_before=frozen_before)


def _freeze_and_check_flags(exercise, fn, build, trainable, *, seed, frozen_before=()):
    """check_freeze_flags; returns the model and what fn returned."""
    model = build(seed)
    for name, p in model.named_parameters():
        if name in frozen_before:
            p.requires_grad_(False)
    case = (f"{_describe_model(model)}; trainable={trainable!r}"
            + (f"; {sorted(frozen_before)} frozen before the call" if frozen_before else ""))
    got = _run(exercise, lambda: fn(model, trainable), case)
    wanted = set(trainable)
    wrong = [(n, p.requires_grad) for n, p in model.named_parameters() if p.requires_grad != (n in wanted)]
    if wrong:
        details = "\n".join(f"    {n}: requires_grad={flag}, should be {not flag}" for n, flag in wrong)
        _fail(exercise, "wrong requires_grad flags", f"  case: {case}\n{details}{_flags_hint(model, wanted, wrong)}")
    if not isinstance(got, (list, tuple)):
        _fail(exercise, f"should return a list of the trainable parameters, got {_summary(got)}",
              f"  case: {case}")
    by_id = {id(p): n for n, p in model.named_parameters()}
    strangers = [g for g in got if id(g) not in by_id]
    if strangers:
        _fail(exercise, "returned something that is not a parameter of the model: "
                        f"{checks.describe(strangers[0])}",
              f"  case: {case}\n  hint: return the Parameter objects themselves (p, not p.data, a name or a copy), "
              "so that an optimizer built from the list updates the model")
    names = [by_id[id(g)] for g in got]
    if sorted(names) != sorted(wanted) or len(names) != len(set(names)):
        extra = sorted(set(names) - wanted)
        missing = sorted(wanted - set(names))
        twice = sorted({n for n in names if names.count(n) > 1})
        _fail(exercise, "the returned list should hold each trainable parameter exactly once",
              f"  case: {case}\n  returned: {names}"
              + (f"\n  not trainable but returned: {extra}" if extra else "")
              + (f"\n  trainable but missing: {missing}" if missing else "")
              + (f"\n  returned more than once: {twice}" if twice else ""))
    return model, list(got)


def _flags_hint(model, wanted, wrong):
    names = [n for n, _ in model.named_parameters()]
    extra = [n for n, flag in wrong if flag and n not in wanted]
    if len(wrong) == len(names) and wanted:
        return "\n  hint: the flags are the wrong way round: the named parameters train, all others are frozen"
    if extra and len(extra) == len(names) - len(wanted):
        return ("\n  hint: nothing was frozen: set the flag on the parameter itself (p.requires_grad_(False)); "
                "p.data or p.detach() is a new tensor each time, and its flag means nothing to the model")
    if any(t in n for n in extra for t in wanted):
        return "\n  hint: compare whole names ('2.weight' is not '12.weight'), not substrings or endings"
    if any(not flag and n in wanted for n, flag in wrong):
        return "\n  hint: a parameter named in `trainable` must train, even if it was frozen before the call"
    return ""


def _loss_of(model, seed, dtype, device):
    x = _batch(model, 7, seed + 1, dtype, device)
    out = model(x)
    target = inputs.randn(*out.shape, seed=seed + 2, dtype=dtype, device=device)
    return ((out - target) ** 2).mean()


def check_freeze_training(exercise, fn, build, trainable, *, seed, frozen_before=(), dtype=torch.float64):
    """One step of AdamW over *all* model.parameters(): the named parameters receive the gradient
    they would have without freezing and move; every other one gets no .grad and stays bit-identical."""
    device = get_device()
    model, _ = _freeze_and_check_flags(exercise, fn, lambda s: build(s, dtype, device), trainable,
                                       seed=seed, frozen_before=frozen_before)
    case = f"{_describe_model(model)}; trainable={trainable!r}, {dtype}"
    reference = build(seed, dtype, device)
    ref_params = dict(reference.named_parameters())
    wanted = [n for n, _ in model.named_parameters() if n in set(trainable)]
    expected = torch.autograd.grad(_loss_of(reference, seed, dtype, device), [ref_params[n] for n in wanted])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    optimizer.zero_grad()
    _run(exercise, lambda: _loss_of(model, seed, dtype, device).backward(), case)
    for name, p in model.named_parameters():
        if name not in set(trainable) and p.grad is not None:
            _fail(exercise, f"after freeze_all_but, backward() still gave {name} a gradient",
                  f"  case: {case}\n  a frozen parameter must have requires_grad=False, so that autograd skips it")
    missing = [n for n, p in model.named_parameters() if n in set(trainable) and p.grad is None]
    if missing:
        _fail(exercise, f"backward() gave no gradient to the trainable {missing}", f"  case: {case}")
    params = dict(model.named_parameters())
    _close(exercise, [params[n].grad for n in wanted], expected, case=case, names=[f"{n}.grad" for n in wanted])
    optimizer.step()
    for name, p in model.named_parameters():
        moved = not torch.equal(p.detach(), before[name])
        if name in set(trainable) and not moved:
            _fail(exercise, f"the trainable {name} did not change in an optimizer step", f"  case: {case}")
        if name not in set(trainable) and moved:
            change = (p.detach() - before[name]).abs().max().item()
            _fail(exercise, f"the frozen {name} changed in an optimizer step (by up to {change:.3g})",
                  f"  case: {case}")


@dataclasses.dataclass
class Caught:
    """An exception the learner's code raised, as data: its class name, message, and the names of its
    class and every base class (so that the grader can tell a ValueError subclass from anything else)."""
    type_name: str
    message: str
    lineage: tuple


def raised_by(fn, *args):
    """Driver: fn(*args); what it raised as a `Caught`, or None if it returned. NotImplementedError passes
    through, so that an exercise left undone reads as such."""
    try:
        fn(*args)
    except NotImplementedError:
        raise
    except Exception as err:  # the kind of error is judged by the check, outside the learner's call
        return Caught(type(err).__name__, str(err), tuple(c.__name__ for c in type(err).__mro__))
    return None


def check_freeze_unknown_name(exercise, fn, build, *, seed):
    """A name that is not a parameter of the model must raise ValueError or KeyError."""
    model = build(seed)
    typo = next(n for n, _ in model.named_parameters()).replace("weight", "weigth")
    case = f"{_describe_model(model)}; trainable=[{typo!r}]"
    err = _run(exercise, lambda: raised_by(fn, model, [typo]), case)
    if err is None:
        _fail(exercise, f"accepted the unknown name {typo!r} without a word",
              f"  case: {case}\n  a typo would freeze every parameter and train nothing: "
              "raise a ValueError (or KeyError) that names it")
    if not isinstance(err, Caught):  # not what raised_by returns: the answer did not come back as data
        _fail(exercise, f"no readable account of what happened for the unknown name {typo!r}: {_summary(err)}",
              f"  case: {case}")
    if not {"ValueError", "KeyError"} & set(err.lineage):
        _fail(exercise, f"raised {err.type_name} ({err.message}) for the unknown name {typo!r}",
              f"  case: {case}\n  raise a ValueError (or KeyError) that names it"
              + ("; an assert disappears when Python runs with -O" if err.type_name == "AssertionError" else ""))


# --- distill_loss --------------------------------------------------------------------------------
def reference_distill_loss(student_logits, teacher_logits, T=2.0):
    """T^2 * KL(softmax(teacher/T) || softmax(student/T)), summed over classes, mean over the batch."""
    log_p_student = F.log_softmax(student_logits / T, dim=-1)
    log_p_teacher = F.log_softmax(teacher_logits.detach() / T, dim=-1)
    return F.kl_div(log_p_student, log_p_teacher, reduction="batchmean", log_target=True) * T ** 2


def _distill_hint(got, expected, B, C, T):
    if not math.isfinite(got):
        return ("the loss is not finite: take log_softmax of the scaled logits (log(softmax(.)) underflows "
                "to -inf for large logits)")
    if expected == 0:
        return ""
    ratio = got / expected
    for factor, text in ((1 / T ** 2, "the T**2 factor is missing"), (1 / T, "multiplied by T instead of T**2"),
                         (1 / C, "reduction='mean' also divides by the number of classes: use 'batchmean'"),
                         (B, "summed over the batch: average over it ('batchmean')")):
        if factor != 1 and abs(ratio - factor) < 1e-6 * max(1, factor):
            return text
    return ""


def check_distill_value(exercise, fn, *, B, C, T, seed, dtype=torch.float64, scale=3.0, pass_T=True):
    device = get_device()
    s = inputs.randn(B, C, seed=seed, dtype=dtype, device=device, scale=scale)
    t = inputs.randn(B, C, seed=seed + 1, dtype=dtype, device=device, scale=scale)
    case = (f"student and teacher logits of shape ({B}, {C}), {dtype}, entries of size ~{scale:g}, "
            + (f"T={T:g}" if pass_T else "T left at its default"))
    expected = reference_distill_loss(s, t, T if pass_T else 2.0)  # before the call: it may change s or t
    got = _run(exercise, lambda: fn(s, t, T) if pass_T else fn(s, t), case)
    if isinstance(got, torch.Tensor) and got.shape == () and got.dtype == expected.dtype:
        hint = _distill_hint(got.item(), expected.item(), B, C, T if pass_T else 2.0)
    else:
        hint = ""
    try:
        _close(exercise, [got], [expected], case=case, names=["the loss (a 0-d tensor)"])
    except GradingError as err:
        raise GradingError(str(err) + (f"\n  hint: {hint}" if hint else "")) from None


@dataclasses.dataclass
class Backward:
    """What a loss function returned and where backward() sent gradients, observed beside it.

    `loss`: what it returned (a tensor comes back as its value, without its graph); `has_graph`: whether
    that was a tensor with a grad_fn; `grads`: {name: .grad after loss.backward(), or None}, empty when
    backward() was not run (the loss was no 0-d tensor with a graph)."""
    loss: object
    has_graph: bool
    grads: dict


def _logits(B, C, seed, dtype, device, scale):
    return (inputs.randn(B, C, seed=seed, dtype=dtype, device=device, scale=scale),
            inputs.randn(B, C, seed=seed + 1, dtype=dtype, device=device, scale=scale))


def backward_through(loss, tensors):
    """loss.backward() when loss is a 0-d tensor with a graph; then the .grad of each of `tensors`
    ({name: tensor}) as a `Backward`."""
    has_graph = isinstance(loss, torch.Tensor) and loss.grad_fn is not None
    if not (has_graph and loss.shape == ()):
        return Backward(loss, has_graph, {})
    loss.backward()
    return Backward(loss, True, {name: t.grad for name, t in tensors.items()})


@_GRAD_ON
def distill_leaf_backward(fn, B, C, T, seed, dtype, scale):
    """Driver: fn on leaf student and teacher logits that both require grad, then backward()."""
    s, t = (v.requires_grad_() for v in _logits(B, C, seed, dtype, get_device(), scale))
    return backward_through(fn(s, t, T), {"student_logits": s, "teacher_logits": t})


def _distill_networks(seed, dtype, device):
    teacher, student = mlp([4, 6, 5], seed, dtype, device), mlp([4, 3, 5], seed + 1, dtype, device)
    return teacher, student, inputs.randn(8, 4, seed=seed + 2, dtype=dtype, device=device)


@_GRAD_ON
def distill_network_backward(fn, seed, T, dtype):
    """Driver: fn on the logits of a student and a teacher network, then backward()."""
    teacher, student, x = _distill_networks(seed, dtype, get_device())
    params = {**{f"teacher {n}": p for n, p in teacher.named_parameters()},
              **{f"student {n}": p for n, p in student.named_parameters()}}
    return backward_through(fn(student(x), teacher(x), T), params)


def _backward_of(exercise, result, case):
    """The checks on a `Backward` that come before its gradients: a 0-d tensor, with a graph."""
    if not isinstance(result, Backward):  # not what the driver returns: the answer did not come back as data
        _fail(exercise, f"no readable account of the call came back: {_summary(result)}", f"  case: {case}")
    loss = result.loss
    if not isinstance(loss, torch.Tensor) or loss.shape != ():
        _fail(exercise, f"should return a 0-d tensor, got {checks.describe(loss)}", f"  case: {case}")
    if not result.has_graph:
        _fail(exercise, "the loss has no graph: no gradient can reach the student",
              f"  case: {case}\n  hint: detach only the teacher's side; the student's logits must stay in the graph")


def check_distill_gradients(exercise, fn, *, B, C, T, seed, dtype=torch.float64, scale=3.0):
    """Leaf logits that both require grad: after backward the student's .grad is the reference's and
    the teacher's .grad is None."""
    device = get_device()
    s, t = _logits(B, C, seed, dtype, device, scale)
    case = f"leaf student and teacher logits ({B}, {C}) that both require grad, {dtype}, T={T:g}"
    s_ref = s.clone().requires_grad_()
    expected = torch.autograd.grad(reference_distill_loss(s_ref, t, T), s_ref)
    result = _run(exercise, lambda: distill_leaf_backward(fn, B, C, T, seed, dtype, scale), case)
    _backward_of(exercise, result, case)
    s_grad, t_grad = result.grads.get("student_logits"), result.grads.get("teacher_logits")
    if s_grad is None:
        _fail(exercise, "no gradient reached the student logits"
              + (", and one reached the teacher's: the detach is on the wrong side" if t_grad is not None else ""),
              f"  case: {case}")
    if t_grad is not None:
        _fail(exercise, f"a gradient reached the teacher logits (largest entry {t_grad.abs().max().item():.3g})",
              f"  case: {case}\n  the teacher must not learn: use teacher_logits.detach() "
              "(or compute its probabilities under torch.no_grad())")
    _close(exercise, [s_grad], expected, case=case, names=["student_logits.grad"])


def check_distill_models(exercise, fn, *, seed, T=2.0, dtype=torch.float64):
    """Teacher logits straight out of a teacher network (a non-leaf with a graph): after backward no
    teacher parameter has a gradient, and the student network's gradients are the reference's."""
    device = get_device()
    case = f"logits of a student and a teacher network (both with parameters that require grad), {dtype}, T={T:g}"
    result = _run(exercise, lambda: distill_network_backward(fn, seed, T, dtype), case)
    _backward_of(exercise, result, case)
    teacher, ref_student, x = _distill_networks(seed, dtype, device)
    reached = [n for n, _ in teacher.named_parameters() if result.grads.get(f"teacher {n}") is not None]
    if reached:
        _fail(exercise, f"backward() reached the teacher's parameters {reached}",
              f"  case: {case}\n  detach the teacher's logits, so that no gradient flows into the teacher")
    with torch.no_grad():
        teacher_logits = teacher(x)
    expected = torch.autograd.grad(reference_distill_loss(ref_student(x), teacher_logits, T),
                                   list(ref_student.parameters()))
    names = [n for n, _ in ref_student.named_parameters()]
    got = [result.grads.get(f"student {n}") for n in names]
    if any(g is None for g in got):
        _fail(exercise, "some student parameters received no gradient", f"  case: {case}")
    _close(exercise, got, expected, case=case, names=[f"student {n}.grad" for n in names])


# --- per_loss_grads ------------------------------------------------------------------------------
LOSS_NAMES = ("mse of head a", "cross-entropy of head b", "mean square of the trunk features")


def multitask_losses(model, seed, dtype, device):
    """Three losses of one forward through a TwoHeads model: [mse(a), cross_entropy(b), h.pow(2).mean()]."""
    x = inputs.randn(9, 4, seed=seed + 1, dtype=dtype, device=device)
    h, a, b = model(x)
    target_a = inputs.randn(9, 2, seed=seed + 2, dtype=dtype, device=device)
    target_b = inputs.randint(3, 9, seed=seed + 3, device=device)
    return [F.mse_loss(a, target_a), F.cross_entropy(b, target_b), h.pow(2).mean()]


def reference_per_loss_grads(seed, which, param_names, dtype, device):
    """For each loss, a fresh model and a forward of its own: gradients by separate forwards."""
    result = []
    for i in which:
        model = two_heads(seed, dtype, device)
        named = dict(model.named_parameters())
        params = [named[n] for n in param_names]
        grads = torch.autograd.grad(multitask_losses(model, seed, dtype, device)[i], params, allow_unused=True)
        result.append(tuple(torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)))
    return result


def _per_loss_hint(got, expected, k, which):
    def same(a, b):
        try:
            return all(torch.allclose(x.double(), y.double(), rtol=1e-5, atol=1e-8) for x, y in zip(a, b))
        except Exception:  # a malformed entry: the message above says enough
            return False

    def total(parts):
        return [sum(p[j] for p in parts) for j in range(len(parts[0]))]

    if k > 0 and same(got[k], total(expected[:k + 1])):
        return ("\n  hint: the earlier losses' gradients were added in: backward() adds into .grad, so clear it "
                "between losses, or use torch.autograd.grad, which returns fresh tensors")
    if len(expected) > 1 and same(got[k], total(expected)):
        return "\n  hint: this is the gradient of the sum of all the losses: differentiate each loss on its own"
    for j, other in enumerate(expected):
        if j != k and same(got[k], other):
            return (f"\n  hint: these are the gradients of {LOSS_NAMES[which[j]]}: a tensor you keep from .grad "
                    "changes when .grad does (zero_() works in place); keep copies (.clone()), or use "
                    "torch.autograd.grad")
    if len(expected) > 1:
        return ("\n  hint: each tuple must hold the gradients of its own loss alone, in tensors that nothing "
                "changes afterwards (a tensor taken from .grad changes when .grad is zeroed in place or added to)")
    return ""


def _stale_grads(params, seed, dtype, device):
    """Half the .grad buffers hold an earlier gradient (every other one), the others None."""
    return [inputs.randn(*p.shape, seed=seed + 50 + k, dtype=dtype, device=device) if k % 2 == 0 else None
            for k, p in enumerate(params)]


@_GRAD_ON
def per_loss_run(fn, seed, which, param_names, dtype, stale_grads):
    """Driver: fn(losses, params) on losses of one shared forward through a seeded TwoHeads model, some
    .grad holding an earlier gradient; returns (what fn returned, every param's .grad after the call)."""
    device = get_device()
    model = two_heads(seed, dtype, device)
    named = dict(model.named_parameters())
    params = [named[n] for n in param_names]
    if stale_grads:
        for p, g in zip(params, _stale_grads(params, seed, dtype, device)):
            p.grad = g
    losses = multitask_losses(model, seed, dtype, device)
    got = fn([losses[i] for i in which], list(params))
    return got, [p.grad for p in params]


def check_per_loss_grads(exercise, fn, *, seed, which=(0, 1, 2), param_names=None, dtype=torch.float64,
                         stale_grads=True):
    """fn(losses, params) on losses of one shared forward: each tuple equals the gradients of that
    loss from a forward of its own, and every param's .grad is left exactly as it was."""
    device = get_device()
    model = two_heads(seed, dtype, device)
    named = dict(model.named_parameters())
    param_names = list(param_names or named)
    params = [named[n] for n in param_names]
    before = _stale_grads(params, seed, dtype, device) if stale_grads else [None] * len(params)
    which = tuple(which)
    case = (f"losses [{', '.join(LOSS_NAMES[i] for i in which)}] of one forward through "
            f"{_describe_model(model)}; params {param_names}; {dtype}"
            + ("; some params hold an earlier .grad" if stale_grads else ""))
    result = _run(exercise, lambda: per_loss_run(fn, seed, which, param_names, dtype, stale_grads), case)
    if not (isinstance(result, tuple) and len(result) == 2):  # not what the driver returns
        _fail(exercise, f"no readable account of the call came back: {_summary(result)}", f"  case: {case}")
    got, after = result
    expected = reference_per_loss_grads(seed, which, param_names, dtype, device)
    if not isinstance(got, (list, tuple)) or len(got) != len(which):
        _fail(exercise, f"should return one tuple per loss ({len(which)}), got {_summary(got)}",
              f"  case: {case}")
    for k, (i, g) in enumerate(zip(which, got)):
        if not isinstance(g, (list, tuple)) or len(g) != len(params):
            _fail(exercise, f"entry {k} should hold one gradient per parameter ({len(params)}), got {_summary(g)}",
                  f"  case: {case}")
        try:
            _close(exercise, g, expected[k], case=case, names=[f"d({LOSS_NAMES[i]})/d {n}" for n in param_names])
        except GradingError as err:
            raise GradingError(str(err) + _per_loss_hint(got, expected, k, which)) from None
    for name, grad, old in zip(param_names, after, before):
        if old is None and grad is not None:
            _fail(exercise, f"{name}.grad was None before the call and holds a tensor after it",
                  f"  case: {case}\n  per_loss_grads must leave .grad as it found it: use torch.autograd.grad, "
                  "or save each .grad before and put it back after")
        if old is not None and (not isinstance(grad, torch.Tensor) or grad.shape != old.shape
                                or grad.dtype != old.dtype or not torch.equal(grad, old)):
            _fail(exercise, f"{name}.grad changed during the call",
                  f"  case: {case}\n  per_loss_grads must leave .grad as it found it (an earlier gradient "
                  "may be waiting there for the optimizer): use torch.autograd.grad, or save and restore .grad")


# --- accumulated_grads ---------------------------------------------------------------------------
def _regression(seed, dtype, device, n, hidden=16, task="mse"):
    model = mlp([4, hidden, 3], seed, dtype, device)
    x = inputs.randn(n, 4, seed=seed + 1, dtype=dtype, device=device)
    if task == "mse":
        return model, nn.MSELoss(), x, inputs.randn(n, 3, seed=seed + 2, dtype=dtype, device=device)
    return model, F.cross_entropy, x, inputs.randint(3, n, seed=seed + 2, device=device)


def check_accumulated_grads(exercise, fn, *, n, k, seed, dtype=torch.float64, task="mse", frozen=(),
                            hidden=16, memory=False):
    """fn(model, loss_fn, x, y, k) equals the full-batch mean-loss gradient, leaves it in .grad
    (stale gradients discarded, frozen parameters untouched) and, with memory=True, never holds more
    than MEMORY_SHARE of the full batch's saved activations at once."""
    device = get_device()
    model, loss_fn, x, y = _regression(seed, dtype, device, n, hidden, task)
    reference, _, _, _ = _regression(seed, dtype, device, n, hidden, task)
    for m in (model, reference):
        for name, p in m.named_parameters():
            if name in frozen:
                p.requires_grad_(False)
    names = [name for name, p in model.named_parameters() if p.requires_grad]
    params = [p for p in model.parameters() if p.requires_grad]
    for i, p in enumerate(params):  # gradients left over from an earlier backward
        p.grad = inputs.randn(*p.shape, seed=seed + 70 + i, dtype=dtype, device=device)
    stale = [p.grad.clone() for p in params]
    ref_params = [p for p in reference.parameters() if p.requires_grad]
    with SavedTensorLedger() as full:
        full_loss = loss_fn(reference(x), y)
    expected = torch.autograd.grad(full_loss, ref_params)
    case = (f"{n} samples in micro_batches={k} chunks, {task} loss (mean over the batch), {dtype}"
            + (f", {list(frozen)} frozen" if frozen else "") + "; every .grad held an earlier gradient")
    result = _run(exercise, lambda *args: accumulate_run(fn, stale, memory, *args), case, model, loss_fn, x, y, k,
                  names=["model", "loss_fn", "x", "y", "micro_batches"])
    if not isinstance(result, Call):  # not what the driver returns: the answer did not come back as data
        _fail(exercise, f"no readable account of the call came back: {_summary(result)}", f"  case: {case}")
    got = result.returned
    if not isinstance(got, (list, tuple)) or len(got) != len(params):
        _fail(exercise, f"should return one gradient per trainable parameter ({len(params)}: {names}), "
                        f"got {_summary(got)}", f"  case: {case}")
    try:
        _close(exercise, got, expected, case=case, names=[f"gradient of {n_}" for n_ in names])
    except GradingError as err:
        raise GradingError(str(err) + _accumulation_hint(got, reference, loss_fn, x, y, k, stale)) from None
    for name in names:
        if result.grads.get(name) is None:
            _fail(exercise, f"{name}.grad is None after the call: leave the accumulated gradient in .grad, "
                            "where optimizer.step() reads it", f"  case: {case}")
    _close(exercise, [result.grads[n_] for n_ in names], expected, case=case,
           names=[f"{n_}.grad after the call" for n_ in names])
    for name in frozen:
        if result.grads.get(name) is not None:
            _fail(exercise, f"the frozen {name} has a .grad after the call", f"  case: {case}")
    if memory and result.peak_saved_bytes > MEMORY_SHARE * full.peak_bytes:
        _fail(exercise, "the graphs of several chunks were alive at the same time",
              f"  case: {case}\n  saved tensors held at once: {result.peak_saved_bytes / 1024:.1f} KiB, against "
              f"{full.peak_bytes / 1024:.1f} KiB for one forward of the whole batch\n"
              "  hint: call backward() on each chunk's (weighted) loss before running the next chunk; "
              "adding the losses up and calling backward() once keeps every chunk's graph alive")


@dataclasses.dataclass
class Call:
    """What a learner's call returned, and what its driver saw beside it: the .grad of every parameter
    of the model after the call ({name: tensor or None}) and the most bytes of saved tensors held at
    once during the call (measured only when asked: 0 otherwise)."""
    returned: object
    grads: dict
    peak_saved_bytes: int = 0


def _grads_of(model):
    return {name: p.grad for name, p in model.named_parameters()}


@_GRAD_ON
def accumulate_run(fn, stale, memory, model, loss_fn, x, y, micro_batches):
    """Driver: fn(model, loss_fn, x, y, micro_batches) after putting `stale` (one per parameter that
    requires grad) into .grad, under a SavedTensorLedger when `memory`; a `Call`."""
    for p, g in zip([p for p in model.parameters() if p.requires_grad], stale):
        p.grad = g.clone()
    ledger = SavedTensorLedger()
    with ledger if memory else contextlib.nullcontext():
        got = fn(model, loss_fn, x, y, micro_batches)
    return Call(got, _grads_of(model), ledger.peak_bytes)


def _chunk_grads(model, loss_fn, x, y, k):
    """The gradient of each tensor_split chunk's mean loss, and each chunk's size."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [(len(xc), torch.autograd.grad(loss_fn(model(xc), yc), params))
            for xc, yc in zip(torch.tensor_split(x, k), torch.tensor_split(y, k))]


def _accumulation_hint(got, model, loss_fn, x, y, k, stale):
    """Name the slip whose result `got` matches, if it is one of the classic ones."""
    try:
        chunks = _chunk_grads(model, loss_fn, x, y, k)
        n = len(x)
        full = [sum(size / n * g[i] for size, g in chunks) for i in range(len(stale))]
        slips = {
            "each chunk's mean loss was added without weighting: scale it by len(chunk) / len(x) "
            "(with equal chunks, that is dividing by micro_batches)":
                [sum(g[i] for _, g in chunks) for i in range(len(stale))],
            "with chunks of unequal size, dividing each chunk's loss by micro_batches weights the samples of "
            "small chunks more: scale by len(chunk) / len(x) instead":
                [sum(g[i] / k for _, g in chunks) for i in range(len(stale))],
            "the gradients that were in .grad before the call were added in: zero them once, before the "
            "first chunk": [f + s_ for f, s_ in zip(full, stale)],
            "only the last chunk's gradient is left: zero the gradients once before the loop, not inside it":
                [chunks[-1][0] / n * g for g in chunks[-1][1]],
        }
        for text, candidate in slips.items():
            if all(torch.allclose(g.double(), c.double(), rtol=1e-5, atol=1e-7) for g, c in zip(got, candidate)):
                return "\n  hint: " + text
    except Exception:  # a malformed answer: the message above says enough
        return ""
    return ("\n  hint: start from clean gradients (zero them once, before the first chunk), call backward() on "
            "every chunk's loss weighted by len(chunk) / len(x), and cover every sample exactly once")


# --- train_step ----------------------------------------------------------------------------------
def reference_train_step(model, optimizer, loss_fn, x, y, max_norm=1.0):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()


def training_setup(seed, dtype=torch.float64, device=None, optimizer="sgd", target_scale=10.0):
    """A Linear-Tanh-Linear model, its optimizer, MSE loss and a stream of batches whose large targets
    give gradient norms well above 1, so that clipping matters."""
    device = device or get_device()
    model = mlp([5, 8, 2], seed, dtype, device)
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)

    def batch(k):
        x = inputs.randn(6, 5, seed=seed + 100 + k, dtype=dtype, device=device)
        y = inputs.randn(6, 2, seed=seed + 200 + k, dtype=dtype, device=device, scale=target_scale)
        return x, y
    return model, opt, nn.MSELoss(), batch


def _snapshot(model, opt):
    """Deep copies of a model and its optimizer (still tied to each other), .grad buffers included."""
    model_copy, opt_copy = copy.deepcopy((model, opt))
    for p, q in zip(model.parameters(), model_copy.parameters()):
        q.grad = None if p.grad is None else p.grad.clone()
    return model_copy, opt_copy


_STEP_SLIPS = {
    "the gradients left in .grad before the call were added in: call optimizer.zero_grad() first, before "
    "the forward pass": ("keep", "norm"),
    "the step used unclipped gradients: clip between backward() and optimizer.step()": ("zero", None),
    "the gradients were clipped to a norm of 1.0, not to max_norm": ("zero", "norm-1"),
    "each gradient value was clipped (clip_grad_value_), not the norm of all of them together: use "
    "torch.nn.utils.clip_grad_norm_": ("zero", "value"),
    "the weights did not move: no gradient reached them (was the forward pass run under torch.no_grad()?)":
        ("none", None),
}


def _step_slip(model, opt, loss_fn, x, y, max_norm, slip):
    zero, clip = slip
    if zero == "none":
        return
    if zero == "zero":
        opt.zero_grad()
    loss_fn(model(x), y).backward()
    if clip == "norm":
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    elif clip == "norm-1":
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    elif clip == "value":
        nn.utils.clip_grad_value_(model.parameters(), max_norm)
    opt.step()


def _train_step_hint(snapshot, model, loss_fn, x, y, max_norm):
    got = [p.detach() for p in model.parameters()]
    for text, slip in _STEP_SLIPS.items() if snapshot is not None else ():
        try:
            m, o = _snapshot(*snapshot)
            _step_slip(m, o, loss_fn, x, y, max_norm, slip)
            if all(torch.allclose(g, q.detach(), rtol=1e-7, atol=1e-9) for g, q in zip(got, m.parameters())):
                return "\n  hint: " + text
        except Exception:  # a slip that cannot even run here is not the one
            continue
    return ("\n  hint: the reference does optimizer.zero_grad(), forward, backward, "
            "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm), then optimizer.step()")


def check_train_step(exercise, fn, *, seed, optimizer="sgd", steps=3, max_norm=None, dtype=torch.float64,
                     stale_grads=True):
    """Several calls of fn against the reference step on an identical copy: the returned value is
    the loss (a Python float) before the step, and the weights match after every step."""
    device = get_device()
    model, opt, loss_fn, batch = training_setup(seed, dtype, device, optimizer)
    ref_model, ref_opt, _, _ = training_setup(seed, dtype, device, optimizer)
    if stale_grads:  # as if something had called backward() earlier (a metric, a probe)
        for i, (p, q) in enumerate(zip(model.parameters(), ref_model.parameters())):
            p.grad = inputs.randn(*p.shape, seed=seed + 300 + i, dtype=dtype, device=device, scale=5.0)
            q.grad = p.grad.clone()
    names = [n for n, _ in model.named_parameters()]
    norm = max_norm if max_norm is not None else 1.0
    for k in range(steps):
        x, y = batch(k)
        case = (f"step {k + 1} of {steps}: {_describe_model(model)}, {type(opt).__name__}, MSE loss, {dtype}, "
                + (f"max_norm={max_norm:g}" if max_norm is not None else "max_norm left at its default")
                + ("; before step 1 every .grad held a leftover gradient" if stale_grads else ""))
        expected = reference_train_step(ref_model, ref_opt, loss_fn, x, y, norm)
        try:
            snapshot = _snapshot(model, opt)  # for the hint, should this step go wrong
        except Exception:  # something the answer hung on the model (a loss with its graph) cannot be copied
            snapshot = None
        args = (model, opt, loss_fn, x, y) + ((max_norm,) if max_norm is not None else ())
        grads = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
        got = _run(exercise, lambda *a: call_with_grads(fn, grads, *a), case, *args,
                   names=["model", "optimizer", "loss_fn", "x", "y", "max_norm"][:len(args)])
        _check_float(exercise, got, case)
        if not math.isclose(got, expected, rel_tol=1e-9 if dtype == torch.float64 else 1e-5, abs_tol=1e-12):
            _fail(exercise, f"returned {got!r}, expected the loss of this step's forward pass, {expected!r}",
                  f"  case: {case}\n  hint: return loss.item() of the forward pass before the step")
        try:
            _close(exercise, [p.detach() for p in model.parameters()], [p.detach() for p in ref_model.parameters()],
                   case=case, names=[f"{n} after the step" for n in names])
        except GradingError as err:
            raise GradingError(str(err) + _train_step_hint(snapshot, model, loss_fn, x, y, norm)) from None


@_GRAD_ON
def call_with_grads(fn, grads, model, *args):
    """Driver: fn(model, *args) with `grads` in the .grad of model.parameters() first (a .grad does not
    travel with a model sent to the learner's kernel); what fn returned. The model, its optimizer and
    their state come back to the grader's copies by themselves."""
    for p, g in zip(model.parameters(), grads):
        p.grad = None if g is None else g.clone()
    return fn(model, *args)


def _check_float(exercise, got, case):
    if isinstance(got, torch.Tensor):
        _fail(exercise, f"returned a tensor ({checks.describe(got)}), not a Python float",
              f"  case: {case}\n  a loss tensor drags its graph along into every list it is stored in: "
              "return loss.item()")
    if not isinstance(got, float):
        _fail(exercise, f"should return a Python float, got {type(got).__name__}: {got!r}", f"  case: {case}")


@dataclasses.dataclass
class GraphWatch:
    """What a run of training steps left alive, observed beside them.

    `returned`: what each call returned (the run stops after the first that is not a float);
    `live_bytes`: bytes of saved tensors still held after each call (after a gc.collect() where any
    were; the run stops after the first call that leaves some); `loss_calls`/`losses_alive`: how many
    loss tensors loss_fn made, and how many were still alive once the run was over (after gc.collect());
    `outputs`/`outputs_alive`: the same for the model outputs loss_fn was given."""
    returned: list
    live_bytes: list
    loss_calls: int
    losses_alive: int
    outputs: int
    outputs_alive: int


@_GRAD_ON
def no_graph_run(fn, seed, steps, dtype):
    """Driver: `steps` calls of fn on a seeded training setup, a SavedTensorLedger around them and weak
    references to every loss and model output that loss_fn sees; a `GraphWatch`."""
    model, opt, loss_fn, batch = training_setup(seed, dtype, get_device())
    made, predictions = [], []

    def watched_loss_fn(prediction, target):
        loss = loss_fn(prediction, target)
        if isinstance(loss, torch.Tensor):
            made.append(weakref.ref(loss))
        if isinstance(prediction, torch.Tensor):
            predictions.append(weakref.ref(prediction))
        return loss

    watched_loss_fn.__qualname__ = "loss_fn"
    returned, live, got = [], [], None
    with SavedTensorLedger() as ledger:
        for k in range(steps):
            x, y = batch(k)
            got = fn(model, opt, watched_loss_fn, x, y)
            if not isinstance(got, float):
                returned.append(got)
                break
            returned.append(float(got))  # a float subclass (numpy's) as the float it is
            if ledger.live_bytes:
                gc.collect()  # a cycle is not a leak: let the collector have its say first
            live.append(ledger.live_bytes)
            if live[-1]:
                break
    del got
    gc.collect()
    return GraphWatch(returned, live, len(made), sum(ref() is not None for ref in made),
                      len(predictions), sum(ref() is not None for ref in predictions))


def check_train_step_keeps_no_graph(exercise, fn, *, seed, steps=100, dtype=torch.float64):
    """`steps` calls in a row: no tensor saved for backward is still held after a call returns
    (SavedTensorLedger), and once all calls are done no loss tensor made by loss_fn is alive
    (weak references)."""
    model, _, _, _ = training_setup(seed, dtype, get_device())
    case = f"{steps} calls in a row on {_describe_model(model)}, SGD, MSE loss"
    watch = _run(exercise, lambda: no_graph_run(fn, seed, steps, dtype), case, time_limit=20.0 + steps)
    if not isinstance(watch, GraphWatch):  # not what the driver returns: the answer did not come back as data
        _fail(exercise, f"no readable account of the calls came back: {_summary(watch)}", f"  case: {case}")
    for k, got in enumerate(watch.returned):
        _check_float(exercise, got, case)
        held = watch.live_bytes[k] if k < len(watch.live_bytes) else 0
        if held:
            shown = ", ".join(f"{b / 1024:.1f}" for b in watch.live_bytes[max(0, k - 4):k + 1])
            _fail(exercise, f"after call {k + 1}, tensors saved for backward are still held "
                            f"({held / 1024:.1f} KiB)",
                  f"  case: {case}\n  KiB still held after the last calls: {shown}\n"
                  "  something keeps a graph alive that backward() should have freed "
                  "(retain_graph=True, a stored loss or output)")
    if len(watch.returned) < steps:  # the run stopped early, and nothing above says why
        _fail(exercise, f"only {len(watch.returned)} of the {steps} calls were made", f"  case: {case}")
    if not watch.loss_calls:
        _fail(exercise, "never called loss_fn", f"  case: {case}")
    for kind, alive, made in (("loss tensors", watch.losses_alive, watch.loss_calls),
                              ("model outputs", watch.outputs_alive, watch.outputs)):
        if alive > (1 if kind == "model outputs" else 0):  # one output, overwritten at every step, may stay
            _fail(exercise, f"{alive} of the {made} {kind} made during the calls are still alive after "
                            "they returned", f"  case: {case}\n  something keeps them (a list, a default "
                                             "argument, an attribute), and with each one what is left of its graph: "
                                             "keep loss.item(), and store outputs only as .detach() copies")


# --- predict -------------------------------------------------------------------------------------
def predict_run(fn, model, x):
    """Driver: fn(model, x) with gradient tracking switched on, and whether it was still on after the
    call; then the mode is put back as it was before (whatever the notebook's own cells left it at),
    so that what runs next in the same process is not changed by the check."""
    previous = torch.is_grad_enabled()
    torch.set_grad_enabled(True)
    try:
        got = fn(model, x)
    finally:
        grad_is_on = torch.is_grad_enabled()
        torch.set_grad_enabled(previous)
    return got, grad_is_on


def check_predict(exercise, fn, *, seed, model_kind="mlp", dtype=torch.float64, n=5):
    """fn(model, x) returns the model's output, every tensor of it an inference tensor, and leaves
    gradient tracking switched on."""
    device = get_device()
    model = mlp([4, 7, 3], seed, dtype, device) if model_kind == "mlp" else two_heads(seed, dtype, device)
    x = inputs.randn(n, 4, seed=seed + 1, dtype=dtype, device=device)
    with torch.no_grad():
        expected = model(x)
    case = f"{_describe_model(model)}, x of shape ({n}, 4), {dtype}"
    result = _run(exercise, lambda *args: predict_run(fn, *args), case, model, x, names=["model", "x"])
    if not (isinstance(result, tuple) and len(result) == 2):  # not what the driver returns
        _fail(exercise, f"no readable account of the call came back: {_summary(result)}", f"  case: {case}")
    got, grad_is_on = result
    if grad_is_on is not True:
        _fail(exercise, "left gradient tracking switched off after it returned",
              f"  case: {case}\n  everything that ran afterwards would build no graph, training included: "
              "use `with torch.inference_mode():`, which restores the previous mode on the way out")
    expected = expected if isinstance(expected, tuple) else (expected,)
    got_parts = got if isinstance(got, (tuple, list)) and len(expected) > 1 else (got,)
    if len(got_parts) != len(expected):
        _fail(exercise, f"should return what the model returns ({len(expected)} tensors), got {_summary(got)}",
              f"  case: {case}")
    for i, g in enumerate(got_parts):
        label = "the output" if len(expected) == 1 else f"output {i}"
        if not isinstance(g, torch.Tensor):
            _fail(exercise, f"{label} should be a tensor, got {_summary(g)}", f"  case: {case}")
        if not g.is_inference():
            _fail(exercise, f"{label} is not an inference tensor (.is_inference() is False)",
                  f"  case: {case}\n  run the model inside `with torch.inference_mode():` and return its output "
                  "as it is (torch.no_grad() builds no graph either, but its outputs are ordinary tensors; "
                  "a .clone() or .detach() made outside the block is ordinary too)")
    _close(exercise, got_parts, expected, case=case,
           names=["the output"] if len(expected) == 1 else [f"output {i}" for i in range(len(expected))])


# --- drawing -------------------------------------------------------------------------------------
def saved_tensors_of(node):
    """{name: tensor, or the string 'freed'} for what a graph node saved for its backward."""
    saved = {}
    for attr in dir(node):
        if attr.startswith("_saved_"):
            try:
                value = getattr(node, attr)
            except RuntimeError:  # backward() already released it
                value = "freed"
            saved[attr[len("_saved_"):]] = value
    return saved


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
                saved = [f"{k}: {_short(v)}" for k, v in saved_tensors_of(node).items()
                         if isinstance(v, (torch.Tensor, str))]
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
