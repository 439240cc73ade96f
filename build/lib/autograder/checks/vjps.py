"""Grading helpers for notebook 03 (vector-Jacobian products).

Every VJP exercise is graded the same way. A grade cell lists its cases (shapes, dtype, memory
layout, seed); a case builder here draws the inputs with `autograder.learner.inputs` on `get_device()` and
computes the expected gradients with `torch.autograd.grad` through the PyTorch operation itself
(`F.linear`, `torch.softmax`, `F.layer_norm`, broadcasting, ...). `check_vjp` then runs the learner's
function on a private copy of the inputs (same strides: a transposed or sliced input stays
non-contiguous) under three guards, and compares with tolerances chosen by dtype:

- autograd is switched off (`checks.call_student(..., no_autograd=True)`): an answer that asks
  `torch.autograd.grad`, `.backward()`, `torch.autograd.functional` or `torch.func` fails, saying so;
- a `TorchDispatchMode` sees every ATen operation the answer runs: one of PyTorch's own backward
  kernels (`aten::sigmoid_backward`, `aten::_softmax_backward_data`, ...) or an operation the
  exercise forbids (`aten::logsumexp` in the log-sum-exp forward) fails, and so does allocating a
  tensor much larger than the inputs (a materialised Jacobian, per-example outer products);
- a profile hook sees every C function the answer calls, however it was bound, for the few that
  do an exercise's whole work in one call but decompose before reaching ATen (`Tensor.sum_to_size`).

Custom `torch.autograd.Function`s are graded through `.apply`, and their backward is then called
directly (`output.grad_fn.apply(g)`), without the autograd engine, so the same guards prove that it
is closed-form; `gradcheck` and `gradgradcheck` run afterwards, in float64. The tiny tensor engine
(`Tensor`) is graded on expressions written once as text and evaluated twice: on the learner's
`Tensor`s and on PyTorch tensors that require grad.

Trusted grading (`autograder.grader.trusted`): whatever touches the learner's code (the VJP call, the
"is it a torch.autograd.Function" check, apply() and the direct backward call, the gradient through
the engine, gradcheck, building and differentiating an expression with the learner's `Tensor`) runs
in a driver passed to `checks.call_student`, so in the kernel; drivers return data only (tensors,
`FunctionRun` and `EngineNode` records, gradcheck's verdict), and every comparison with a PyTorch
reference happens in the caller, in the grader's process. References are computed before any call,
from tensors that do not travel (tensors that do may come back changed).
"""
import contextlib
import dataclasses
import math
import sys

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from autograder import checks
from autograder.learner import inputs
from autograder.learner.device import get_device

LAYOUTS = ("contiguous", "transposed", "sliced")
ALLOCATION_FACTOR = 4      # a VJP may allocate tensors up to this many times its largest input...
ALLOCATION_FLOOR = 4096    # ...or this many bytes, whichever is larger
BACKWARD_KERNEL_HINT = "backward"  # ATen ops whose name contains this are PyTorch's own VJPs
DTYPES = (torch.float64, torch.float32)


def dtype_layouts(i):
    """The two (dtype, layout) settings of the i-th case of a list: float64 and float32, the layouts
    taking turns, so that every pair of the six appears once three consecutive cases have run."""
    return [(torch.float64, LAYOUTS[i % 3]), (torch.float32, LAYOUTS[(i + 1) % 3])]




def tolerances(dtype):
    """(rtol, atol) for comparing a learner's VJP with autograd's: the course's, by dtype."""
    return checks.TOLERANCES[dtype]


# --- inputs --------------------------------------------------------------------------------------
def relayout(t, layout):
    """The same values as `t` with other strides: 'transposed' (the last two dims swapped in memory)
    or 'sliced' (every other element of a tensor twice as wide); 'contiguous' returns `t`."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")
    if layout == "contiguous" or t.dim() == 0:
        return t
    if layout == "transposed" and t.dim() >= 2:
        return t.mT.contiguous().mT
    wide = t.new_zeros(*t.shape[:-1], 2 * t.shape[-1])
    wide[..., ::2] = t
    return wide[..., ::2]


def tensor(shape, seed, dtype=torch.float64, layout="contiguous", scale=1.0):
    """A seeded normal tensor on get_device(), in the requested memory layout."""
    return relayout(inputs.randn(*shape, seed=seed, dtype=dtype, scale=scale), layout)


def describe_layout(case_inputs, layout):
    if layout == "contiguous":
        return "contiguous"
    changed = [k for k, v in case_inputs.items() if isinstance(v, torch.Tensor) and not v.is_contiguous()]
    how = "last two dims transposed in memory" if layout == "transposed" else "every other element of a wider tensor"
    return f"{', '.join(changed) or 'none'} non-contiguous ({how})"


def _private_copy(value):
    """A copy with the same strides (clone() would make a sliced tensor contiguous)."""
    if not isinstance(value, torch.Tensor):
        return value
    value = value.detach()
    copy = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=value.device)
    copy.copy_(value)
    return copy


def _leaf(t):
    return t.detach().clone().requires_grad_(True)


def _grads(output, leaves, g):
    """torch.autograd.grad of `output` with upstream `g`, computed where the grader needs it."""
    with torch.enable_grad():
        return tuple(r.detach() for r in torch.autograd.grad(output, leaves, g))


@dataclasses.dataclass
class Case:
    """Inputs for the learner's function (in call order), the expected result, what to call it."""
    inputs: dict
    expected: object
    names: list
    layout: str = "contiguous"
    note: str = ""

    def shown_inputs(self):
        shown = dict(self.inputs)
        shown["layout"] = describe_layout(self.inputs, self.layout)
        if self.note:
            shown["note"] = self.note
        return shown


def _with_zeros(x):
    return torch.where(x.abs() < 0.3, torch.zeros_like(x), x)  # exact zeros where relu has its kink


def relu_case(shape, seed, dtype=torch.float64, layout="contiguous"):
    x = _with_zeros(tensor(shape, seed, dtype))
    g = tensor(shape, seed + 1, dtype)
    leaf = _leaf(x)
    with torch.enable_grad():
        expected = _grads(torch.relu(leaf), leaf, g)[0]
    case_inputs = {"x": relayout(x, layout), "g": relayout(g, layout)}
    return Case(case_inputs, expected, ["dL/dx"], layout)


def _elementwise_from_output(op, shape, seed, dtype, layout, scale):
    z = tensor(shape, seed, dtype, scale=scale)
    g = tensor(shape, seed + 1, dtype)
    leaf = _leaf(z)
    with torch.enable_grad():
        y = op(leaf)
        expected = _grads(y, leaf, g)[0]
    case_inputs = {"y": relayout(y.detach(), layout), "g": relayout(g, layout)}
    return Case(case_inputs, expected, ["dL/dx"], layout, note=f"y = {op.__name__}(x), x drawn with scale {scale:g}")


def sigmoid_case(shape, seed, dtype=torch.float64, layout="contiguous", scale=3.0):
    return _elementwise_from_output(torch.sigmoid, shape, seed, dtype, layout, scale)


def tanh_case(shape, seed, dtype=torch.float64, layout="contiguous", scale=2.0):
    return _elementwise_from_output(torch.tanh, shape, seed, dtype, layout, scale)


def linear_case(batch, n, m, seed, dtype=torch.float64, layout="contiguous"):
    """y = x @ W.T + b with x (*batch, n), W (m, n), b (m,) and upstream g (*batch, m)."""
    x = tensor((*batch, n), seed, dtype)
    W = tensor((m, n), seed + 1, dtype)
    b = tensor((m,), seed + 2, dtype)
    g = tensor((*batch, m), seed + 3, dtype)
    leaves = [_leaf(t) for t in (x, W, b)]
    with torch.enable_grad():
        expected = _grads(F.linear(*leaves), leaves, g)
    case_inputs = {"x": relayout(x, layout), "W": relayout(W, layout), "b": b, "g": relayout(g, layout)}
    return Case(case_inputs, expected, ["gx", "gW", "gb"], layout)


def matmul_case(a_shape, b_shape, seed, dtype=torch.float64, layout="contiguous"):
    """C = A @ B, batch dimensions broadcast as torch.matmul does; upstream g shaped like C."""
    A, B = tensor(a_shape, seed, dtype), tensor(b_shape, seed + 1, dtype)
    c_shape = torch.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + (a_shape[-2], b_shape[-1])
    g = tensor(c_shape, seed + 2, dtype)
    leaves = [_leaf(A), _leaf(B)]
    with torch.enable_grad():
        expected = _grads(leaves[0] @ leaves[1], leaves, g)
    case_inputs = {"A": relayout(A, layout), "B": relayout(B, layout), "g": relayout(g, layout)}
    return Case(case_inputs, expected, ["gA", "gB"], layout, note=f"C = A @ B has shape {tuple(c_shape)}")


def unbroadcast_case(target, g_shape, seed, dtype=torch.float64, layout="contiguous", shape_as=tuple):
    """g of g_shape, summed down to `target`: the gradient of a tensor of shape `target` that
    broadcasting expanded to g_shape. `shape_as` gives the shape as a tuple, list or torch.Size."""
    target, g_shape = tuple(target), tuple(g_shape)
    g = tensor(g_shape, seed, dtype)
    leaf = _leaf(tensor(target, seed + 1, dtype))
    with torch.enable_grad():
        expected = _grads(leaf.expand(g_shape), [leaf], g)[0]
    case_inputs = {"g": relayout(g, layout), "shape": shape_as(target)}
    return Case(case_inputs, expected, ["the result"], layout)


def broadcast_patterns(seed, count, max_ndim=4, max_size=4):
    """`count` random (target shape, gradient shape) pairs that broadcasting allows: some leading
    dims added, some target dims of size 1 stretched, or both."""
    gen = torch.Generator().manual_seed(seed)

    def draw(high):
        return int(torch.randint(1, high + 1, (1,), generator=gen))

    pairs = []
    for _ in range(count):
        g_shape = [draw(max_size) + 1 for _ in range(draw(max_ndim))]
        lead = int(torch.randint(0, len(g_shape) + 1, (1,), generator=gen))
        target = [1 if float(torch.rand((), generator=gen)) < 0.4 else s for s in g_shape[lead:]]
        pairs.append((tuple(target), tuple(g_shape)))
    return pairs


def _softmax_like(op, shape, dim, seed, dtype, layout, scale):
    z = tensor(shape, seed, dtype, scale=scale)
    g = tensor(shape, seed + 1, dtype)
    leaf = _leaf(z)
    with torch.enable_grad():
        y = op(leaf, dim=dim)
        expected = _grads(y, leaf, g)[0]
    case_inputs = {"y": relayout(y.detach(), layout), "g": relayout(g, layout), "dim": dim}
    return Case(case_inputs, expected, ["dL/dz"], layout, note=f"y = {op.__name__}(z, dim={dim}), z drawn with scale {scale:g}")


def softmax_case(shape, dim, seed, dtype=torch.float64, layout="contiguous", scale=2.0):
    return _softmax_like(torch.softmax, shape, dim, seed, dtype, layout, scale)


def log_softmax_case(shape, dim, seed, dtype=torch.float64, layout="contiguous", scale=2.0):
    return _softmax_like(torch.log_softmax, shape, dim, seed, dtype, layout, scale)


def layernorm_case(shape, seed, dtype=torch.float64, layout="contiguous", eps=1e-5, x_scale=1.0, x_shift=0.0):
    """F.layer_norm over the last dim, with weight and bias; x drawn with scale and shift."""
    n = shape[-1]
    x = tensor(shape, seed, dtype, scale=x_scale) + x_shift
    weight = tensor((n,), seed + 1, dtype)
    bias = tensor((n,), seed + 2, dtype)
    g = tensor(shape, seed + 3, dtype)
    leaves = [_leaf(t) for t in (x, weight, bias)]
    with torch.enable_grad():
        expected = _grads(F.layer_norm(leaves[0], (n,), leaves[1], leaves[2], eps), leaves, g)
    case_inputs = {"x": relayout(x, layout), "weight": weight, "bias": bias, "g": relayout(g, layout), "eps": eps}
    note = f"x drawn with scale {x_scale:g}, shifted by {x_shift:g}" if (x_scale, x_shift) != (1.0, 0.0) else ""
    return Case(case_inputs, expected, ["gx", "gweight", "gbias"], layout, note)


# --- guards --------------------------------------------------------------------------------------
def _nbytes(t):
    try:
        return t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return t.numel() * t.element_size()


class _OpWatch(TorchDispatchMode):
    """Record the first forbidden ATen op and the largest storage any op allocates."""

    @classmethod
    def _should_skip_dynamo(cls):
        return False  # keep __torch_dispatch__ unwrapped: wrapping imports torch._dynamo (seconds), mid-grading

    def __init__(self, forbidden_ops):
        super().__init__()
        self.forbidden_ops = tuple(forbidden_ops)
        self.used = None
        self.largest = (0, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        if self.used is None and (BACKWARD_KERNEL_HINT in name or name in self.forbidden_ops):
            self.used = name
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and _nbytes(t) > self.largest[0]:
                self.largest = (_nbytes(t), tuple(t.shape))
        return out


def human_bytes(n):
    """'1.5 MiB': a byte count in binary units."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} EiB"


@contextlib.contextmanager
def watched(exercise, shown, *, forbidden_ops=(), forbidden_calls=(), limit_bytes=None):
    """Fail the exercise if the block calls a PyTorch backward kernel, an op in `forbidden_ops`
    (ATen names such as 'aten::logsumexp'), a C function named in `forbidden_calls` (such as
    'sum_to_size'), or allocates a tensor of more than `limit_bytes` (None: no limit)."""
    called = []

    def profile(frame, event, arg):
        if event == "c_call" and not called and getattr(arg, "__name__", None) in forbidden_calls:
            called.append(arg.__name__)

    watch = _OpWatch(forbidden_ops)
    previous = sys.getprofile()
    if forbidden_calls:
        sys.setprofile(profile)
    try:
        with watch:
            yield
    finally:
        if forbidden_calls:
            sys.setprofile(previous)
        _report(exercise, shown, watch, called, limit_bytes)


def _report(exercise, shown, watch, called, limit_bytes):
    if called:
        checks.fail(exercise, f"called {called[0]}(), which does this exercise's whole job in one call: "
              "write the reduction yourself", shown)
    if watch.used:
        if BACKWARD_KERNEL_HINT in watch.used:
            checks.fail(exercise, f"called PyTorch's own backward kernel {watch.used}: this exercise asks "
                  "you to write the vector-Jacobian product yourself", shown)
        checks.fail(exercise, f"called {watch.used}, which this exercise asks you to build yourself", shown)
    if limit_bytes is not None and watch.largest[0] > limit_bytes:
        checks.fail(exercise, f"allocated a tensor of shape {watch.largest[1]} ({human_bytes(watch.largest[0])}) "
              f"while the largest input holds {human_bytes(limit_bytes // ALLOCATION_FACTOR)}. "
              "A VJP needs no Jacobian and no per-example products: every intermediate can be "
              "the size of an input or an output", shown)


def _allocation_limit(values):
    largest = max((_nbytes(v) for v in values if isinstance(v, torch.Tensor)), default=0)
    return max(ALLOCATION_FACTOR * largest, ALLOCATION_FLOOR)


def call_vjp(exercise, fn, case, *, forbidden_calls=(), forbidden_ops=()):
    """The learner's `fn(*case.inputs.values())`, on private copies with the same strides, without
    autograd, PyTorch's backward kernels, the forbidden calls, or a Jacobian-sized allocation."""
    originals = list(case.inputs.values())
    shown = case.shown_inputs()
    limit = _allocation_limit(originals)

    def run(*_clones):  # call_student's clones lose a sliced layout: use copies that keep it
        private = [_private_copy(v) for v in originals]
        with watched(exercise, shown, forbidden_ops=forbidden_ops, forbidden_calls=forbidden_calls,
                     limit_bytes=limit):
            return fn(*private)

    return checks.call_student(exercise, run, *originals, names=list(case.inputs), no_autograd=True)


def check_vjp(exercise, fn, cases, *, forbidden_calls=()):
    """Run the learner's VJP on every case and compare with autograd, tolerances by dtype."""
    for case in cases:
        got = call_vjp(exercise, fn, case, forbidden_calls=forbidden_calls)
        expected = case.expected
        dtype = (expected if isinstance(expected, torch.Tensor) else expected[0]).dtype
        rtol, atol = tolerances(dtype)
        checks.expect_close(exercise, got, expected, inputs=case.shown_inputs(), names=case.names,
                            rtol=rtol, atol=atol)


# --- custom autograd Functions --------------------------------------------------------------------
# Everything that touches the learner's class runs in a driver, where the learner's code runs (in
# trusted grading, the kernel): the type check, apply(), the direct call of the backward node, the
# engine's gradient and gradcheck. Drivers return data (tensors, names, verdicts); every comparison
# with PyTorch's reference happens here, in the caller, where the learner's code cannot reach.
def function_class_facts(cls):
    """Driver: (whether `cls` is a subclass of torch.autograd.Function, a description of it)."""
    return bool(isinstance(cls, type) and issubclass(cls, torch.autograd.Function)), checks.describe(cls)


def check_function_class(exercise, cls):
    facts = checks.call_student(exercise, function_class_facts, cls, names=["the class"])
    is_function, text = facts if isinstance(facts, tuple) and len(facts) == 2 else (False, checks.describe(facts))
    if is_function is not True:
        checks.fail(exercise, f"should be a subclass of torch.autograd.Function (with static forward and "
              f"backward methods, called through .apply), got {text}")


def _unpack_backward(exercise, result, n_inputs, shown):
    """The gradient for the first input, from what a backward returned; the rest must be None."""
    if isinstance(result, torch.Tensor) and n_inputs == 1:
        return result
    if not isinstance(result, (tuple, list)):
        checks.fail(exercise, f"backward should return a tuple of {n_inputs} values (one per input of forward; "
              f"None for inputs that are not tensors), got {checks.describe(result)}", shown)
    if len(result) != n_inputs:
        checks.fail(exercise, f"backward returned {len(result)} values; forward takes {n_inputs} inputs, so it "
              "must return one gradient per input (None for a non-tensor input such as dim)", shown)
    if any(r is not None for r in result[1:]):
        checks.fail(exercise, "backward should return None for the non-tensor inputs of forward", shown)
    return result[0]


@dataclasses.dataclass
class FunctionRun:
    """What a learner's Function did in the driver, as data: what apply() returned, the type of its
    grad_fn and whether that node is the Function's own backward, what the backward returned."""
    out: object = None
    node: object = None
    own_node: bool = False
    grads: object = None


def _run_function(exercise, cls, x, extra, g, shown, forbidden_ops):
    """apply() on a leaf copy of x, then the node's backward called directly, both without autograd,
    in a driver. Returns (output, gradient from the direct call), checked here."""
    def forward_and_backward(*_clones):
        leaf = _private_copy(x).requires_grad_(True)
        with torch.enable_grad(), watched(exercise, shown, forbidden_ops=forbidden_ops):
            out = cls.apply(leaf, *extra)
        if not isinstance(out, torch.Tensor):
            return FunctionRun(out)
        node = out.grad_fn
        if node is None or not issubclass(getattr(node, "_forward_cls", type(None)), cls):
            return FunctionRun(out, type(node).__name__ if node else None)
        with torch.no_grad(), watched(exercise, shown):
            grads = node.apply(_private_copy(g))
        return FunctionRun(out, type(node).__name__, True, grads)

    run = checks.call_student(exercise, forward_and_backward, x, *extra,
                              names=["x", *[f"arg{i}" for i in range(1, 1 + len(extra))]], no_autograd=True)
    if not isinstance(run, FunctionRun):
        checks.fail(exercise, f"no readable answer came back from your Function (got {checks.describe(run)})", shown)
    if not isinstance(run.out, torch.Tensor):
        checks.fail(exercise, f"forward should return a tensor, got {checks.describe(run.out)}", shown)
    if not run.own_node:
        checks.fail(exercise, f"the output's grad_fn is {run.node}, not this "
              "Function's backward: return the result of forward itself (not a view or a "
              "copy made afterwards) and call the class through .apply", shown)
    return run.out, _unpack_backward(exercise, run.grads, 1 + len(extra), shown)


def _through_engine(exercise, cls, x, extra, g, shown):
    """The gradient of x through the autograd engine: apply() on a fresh leaf copy of x, then
    torch.autograd.grad with upstream g, both in a driver (the graph cannot leave it)."""
    def engine(*_shown):
        leaf = _private_copy(x).requires_grad_(True)
        with torch.enable_grad():
            out = cls.apply(leaf, *extra)
            return torch.autograd.grad(out, leaf, _private_copy(g))[0]

    return checks.call_student(exercise, engine, *shown.values(), names=list(shown))


@dataclasses.dataclass
class FunctionCase:
    x: torch.Tensor
    extra: tuple
    g: torch.Tensor
    expected_out: torch.Tensor
    expected_grad: torch.Tensor
    shown: dict
    rtol: float
    atol: float


def logsumexp_case(shape, dim, seed, dtype=torch.float64, layout="contiguous", scale=1.0, shift=0.0,
                   values=None):
    """x (seeded, or the given `values`) and its log-sum-exp along dim, with autograd's gradient
    for a random upstream g. Far from 0 (|x| ~ 1000) the tolerance grows with the rounding of x."""
    if values is not None:
        x = torch.tensor(values, dtype=dtype, device=get_device())
    else:
        x = tensor(shape, seed, dtype, scale=scale) + shift
    x = relayout(x, layout)
    leaf = _leaf(x)
    with torch.enable_grad():
        out = torch.logsumexp(leaf, dim=dim)
        g = tensor(tuple(out.shape), seed + 1, dtype)
        expected_grad = _grads(out, leaf, g)[0]
    rtol, atol = tolerances(dtype)
    magnitude = float(x.abs().max()) if x.numel() else 0.0
    rtol = max(rtol, 8 * torch.finfo(dtype).eps * magnitude)
    shown = {"x": x, "dim": dim, "g": g, "layout": describe_layout({"x": x}, layout)}
    if values is None and (scale, shift) != (1.0, 0.0):
        shown["note"] = f"x drawn with scale {scale:g}, shifted by {shift:g}"
    return FunctionCase(x, (dim,), g, out.detach(), expected_grad, shown, rtol, atol)


def check_logsumexp(exercise, cls, cases_):
    """Forward against torch.logsumexp (the learner may not call it), backward called directly
    (closed form: no autograd inside) against autograd's gradient of torch.logsumexp, then the
    same gradient through the autograd engine."""
    check_function_class(exercise, cls)
    for case in cases_:
        out, grad = _run_function(exercise, cls, case.x, case.extra, case.g, case.shown,
                                  forbidden_ops=("aten::logsumexp",))
        if not torch.isfinite(out).all() and torch.isfinite(case.expected_out).all():
            checks.fail(exercise, f"forward returned {out.detach().cpu().tolist() if out.numel() <= 12 else 'non-finite values'}"
                  " where torch.logsumexp is finite: exp overflows (or underflows to 0) unless you "
                  "subtract the maximum first", case.shown)
        checks.expect_close(exercise, out.detach(), case.expected_out, inputs=case.shown, names=["logsumexp(x)"],
                            rtol=case.rtol, atol=case.atol)
        checks.expect_close(exercise, grad.detach() if isinstance(grad, torch.Tensor) else grad, case.expected_grad,
                            inputs=case.shown, names=["dL/dx from your backward"], rtol=case.rtol, atol=case.atol)
        through_engine = _through_engine(exercise, cls, case.x, case.extra, case.g, case.shown)
        checks.expect_close(exercise, through_engine, case.expected_grad, inputs=case.shown,
                            names=["dL/dx through loss.backward()"], rtol=case.rtol, atol=case.atol)


GRADCHECK_EXPLANATIONS = {
    "gradcheck": "your backward disagrees with finite differences of your forward",
    "gradgradcheck": "the gradient of your backward is wrong: backward must be built from differentiable "
                     "torch operations on the saved tensors (no .detach(), no .item(), no "
                     "@once_differentiable, no in-place edits)",
}


def gradcheck_verdict(fn, x):
    """Driver: torch.autograd.gradcheck, then gradgradcheck, of fn at a private copy of x (float64).
    None when both pass, else (the check's name, the error's type name, its message's first line)."""
    leaf = _private_copy(x).requires_grad_(True)
    for check in (torch.autograd.gradcheck, torch.autograd.gradgradcheck):
        try:
            with torch.enable_grad():
                check(fn, (leaf,))
        except NotImplementedError:
            raise
        except Exception as err:  # gradcheck's GradcheckError, or whatever backward raised
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            return check.__name__, type(err).__name__, first
    return None


def check_gradchecks(exercise, make_fn, x, *, what):
    """torch.autograd.gradcheck, then gradgradcheck, of make_fn() at float64 x; readable failures.
    Both run in a driver, where the learner's code runs; only their verdict comes back. (gradcheck
    compares the learner's backward with finite differences of the learner's forward: no reference
    of ours takes part.)"""
    shown = {"x": x, "function": what}
    fn = make_fn()  # a test-cell lambda that uses the learner's class: built here, called in the driver

    def run(*_clones):
        return gradcheck_verdict(fn, x)

    verdict = checks.call_student(exercise, run, x, names=["x"])
    if verdict is None:
        return
    if not (isinstance(verdict, tuple) and len(verdict) == 3 and verdict[0] in GRADCHECK_EXPLANATIONS):
        checks.fail(exercise, f"gradcheck gave no readable verdict (got {checks.describe(verdict)})", shown)
    check, error, first = verdict
    checks.fail(exercise, f"{check} failed: {GRADCHECK_EXPLANATIONS[check]}.\n  PyTorch said: {error}: {first}", shown)


def check_straight_through(exercise, cls, cases_):
    """Forward equals torch.round (halves to even, dtype kept); backward, called directly, returns
    the incoming gradient unchanged; through the engine, (cls.apply(3 x) * w).sum() gives 3 w."""
    check_function_class(exercise, cls)
    for x, g, layout in cases_:
        # the references first, from the grader's own tensors: x and g travel to the driver
        expected_out, expected_grad, expected_chain = torch.round(x), g.clone(), 3.0 * g
        shown = {"x": x, "g": g, "layout": describe_layout({"x": x, "g": g}, layout)}
        out, grad = _run_function(exercise, cls, x, (), g, shown, forbidden_ops=())
        checks.expect_close(exercise, out.detach(), expected_out, inputs=shown, names=["forward output"],
                            rtol=0.0, atol=0.0)
        checks.expect_close(exercise, grad.detach() if isinstance(grad, torch.Tensor) else grad, expected_grad,
                            inputs=shown, names=["dL/dx from your backward (should be g itself)"], rtol=0.0, atol=0.0)

        def chained():
            with torch.enable_grad():
                x_leaf = _leaf(x)
                loss = (cls.apply(x_leaf * 3.0) * g).sum()
                return torch.autograd.grad(loss, x_leaf)[0]

        chain_shown = {**shown, "loss": "(StraightThroughRound.apply(3 * x) * g).sum()"}
        checks.expect_close(exercise, checks.call_student(exercise, lambda *_: chained(), *chain_shown.values(),
                                                          names=list(chain_shown)), expected_chain, inputs=chain_shown,
                            names=["dL/dx through the engine"], rtol=0.0, atol=0.0)


def rounding_cases(seed, dtype=torch.float64, layout="contiguous", shape=(4, 6)):
    """(x, g, layout): x with many exact halves (where round-half-to-even matters) and other values."""
    halves = (inputs.randint(9, *shape, seed=seed) - 4).to(dtype) + 0.5
    noise = tensor(shape, seed + 1, dtype, scale=3.0)
    pick = inputs.randint(2, *shape, seed=seed + 2).bool()
    x = torch.where(pick, halves, noise)
    g = tensor(shape, seed + 3, dtype)
    return relayout(x, layout), relayout(g, layout), layout


# --- the tiny tensor engine ------------------------------------------------------------------------
# The learner's Tensors never leave the driver that builds and differentiates the expression: the
# driver hands back each one's .data and .grad (EngineNode), which are compared with PyTorch's here.
@dataclasses.dataclass
class EngineNode:
    """One of the learner's Tensors as data: its .data and .grad, and (when .data is not a tensor)
    how it reads."""
    data: object = None
    grad: object = None
    text: str = ""


def engine_node(node):
    """Driver side: the data of one of the learner's Tensors."""
    data, grad = getattr(node, "data", None), getattr(node, "grad", None)
    text = ""
    if not isinstance(data, torch.Tensor):  # described only when it will be reported
        try:
            text = checks.describe(node)
        except Exception:  # a __repr__ that fails says nothing more than the type
            text = f"a {type(node).__name__}"
    return EngineNode(data, grad, text)


def _engine_nodes(result):
    """(root, {name: leaf}) from what a driver returned: EngineNodes, or nothing usable."""
    root, mine = result if isinstance(result, tuple) and len(result) == 2 else (None, {})
    return root, mine if isinstance(mine, dict) else {}


def _engine_value(exercise, node, what, shown):
    data = getattr(node, "data", None) if isinstance(node, EngineNode) else None
    if not isinstance(data, torch.Tensor):
        got = node.text if isinstance(node, EngineNode) else checks.describe(node)
        checks.fail(exercise, f"{what} should be one of your Tensors, whose .data is a torch tensor; got {got}", shown)
    return data


def _engine_grad(exercise, node, what, shown):
    grad = getattr(node, "grad", None) if isinstance(node, EngineNode) else None
    if not isinstance(grad, torch.Tensor):
        checks.fail(exercise, f"after backward(), {what}.grad should be a torch tensor shaped like its data, got "
              f"{checks.describe(grad)}", shown)
    return grad


def _call_engine(exercise, step, shown, *, time_limit=20.0):
    """checks.call_student for a step of the learner's engine, without autograd, with a recursion
    limit that is the same everywhere; `shown` labels every failure (the expression, the model)."""
    def guarded(*_shown):
        try:
            with checks.recursion_headroom():
                return step()
        except RecursionError as err:
            checks.fail(exercise, f"backward() raised RecursionError ({err}): walk the graph with a loop and "
                  "an explicit stack, not with a function that calls itself", shown)

    return checks.call_student(exercise, guarded, *shown.values(), names=list(shown), no_autograd=True,
                               time_limit=time_limit)


def run_engine(exercise, Tensor, expression, leaves, constants=None, *, shown=None, time_limit=20.0):
    """Evaluate `expression` (text) on the learner's Tensors made from `leaves` (name -> torch
    tensor; `constants` stay plain torch tensors), call backward() on the result, without autograd,
    all in a driver. Returns (EngineNode of the root, {name: EngineNode of that leaf})."""
    shown = shown or {"expression": expression}

    def run():
        mine = {name: Tensor(_private_copy(value)) for name, value in leaves.items()}
        root = eval(expression, {"__builtins__": {}}, {**(constants or {}), **mine})  # noqa: S307 (grader's own text)
        backward = getattr(root, "backward", None)
        if backward is None:
            checks.fail(exercise, f"the expression gave {checks.describe(root)}, not one of your Tensors", shown)
        with watched(exercise, shown):
            backward()
        return engine_node(root), {name: engine_node(node) for name, node in mine.items()}

    return _call_engine(exercise, run, shown, time_limit=time_limit)


def check_engine_expression(exercise, Tensor, expression, shapes, seed, dtype=torch.float64, constants=()):
    """One expression on leaves of the given shapes (and plain-tensor constants): the value of the
    root and every leaf's gradient against PyTorch's."""
    leaves = {name: tensor(shape, seed + i, dtype) for i, (name, shape) in enumerate(shapes.items())}
    plain = {name: tensor(shape, seed + 100 + i, dtype) for i, (name, shape) in enumerate(dict(constants).items())}
    refs = {name: _leaf(value) for name, value in leaves.items()}
    with torch.enable_grad():
        ref_root = eval(expression, {"__builtins__": {}}, {**plain, **refs})  # noqa: S307
        ref_grads = torch.autograd.grad(ref_root, list(refs.values()))
    shown = {"expression": expression, **{f"{n} (a Tensor)": v for n, v in leaves.items()},
             **{f"{n} (a plain torch tensor)": v for n, v in plain.items()}}
    root, mine = _engine_nodes(run_engine(exercise, Tensor, expression, leaves, plain, shown=shown))
    rtol, atol = tolerances(dtype)
    checks.expect_close(exercise, _engine_value(exercise, root, "the result", shown), ref_root.detach(),
                        inputs=shown, names=["the result's data"], rtol=rtol, atol=atol)
    for name, expected in zip(leaves, ref_grads):
        checks.expect_close(exercise, _engine_grad(exercise, mine.get(name), name, shown), expected, inputs=shown,
                            names=[f"{name}.grad"], rtol=rtol, atol=atol)


def _mlp_params(n_in, hidden, n_out, seed, dtype):
    return {"W1": tensor((n_in, hidden), seed, dtype, scale=1 / math.sqrt(n_in)),
            "b1": tensor((hidden,), seed + 1, dtype, scale=0.1),
            "W2": tensor((hidden, n_out), seed + 2, dtype, scale=1 / math.sqrt(hidden)),
            "b2": tensor((n_out,), seed + 3, dtype, scale=0.1)}


def _mlp_loss(x, y, p):
    residual = (x @ p["W1"] + p["b1"]).relu() @ p["W2"] + p["b2"] + y * -1.0
    return (residual * residual).mean()


def check_engine_mlp(exercise, Tensor, n_in, hidden, n_out, batch, seed, dtype=torch.float64):
    """A 2-layer MLP with a mean squared error, x a Tensor too: loss and all five gradients."""
    x = tensor((batch, n_in), seed, dtype)
    y = tensor((batch, n_out), seed + 10, dtype)
    params = _mlp_params(n_in, hidden, n_out, seed + 20, dtype)
    refs = {name: _leaf(v) for name, v in {"x": x, **params}.items()}
    with torch.enable_grad():
        ref_loss = _mlp_loss(refs["x"], y, refs)
        ref_grads = dict(zip(refs, torch.autograd.grad(ref_loss, list(refs.values()))))
    shown = {"model": f"MLP {n_in} -> {hidden} (relu) -> {n_out}, batch {batch}, {dtype}",
             "loss": "r = relu(x @ W1 + b1) @ W2 + b2 + y * -1.0;  loss = (r * r).mean()",
             **{name: v for name, v in {"x": x, **params}.items()}}

    def run():
        mine = {name: Tensor(_private_copy(v)) for name, v in {"x": x, **params}.items()}
        loss = _mlp_loss(mine["x"], y, mine)
        with watched(exercise, shown):
            loss.backward()
        return engine_node(loss), {name: engine_node(node) for name, node in mine.items()}

    loss, mine = _engine_nodes(_call_engine(exercise, run, shown))
    rtol, atol = tolerances(dtype)
    checks.expect_close(exercise, _engine_value(exercise, loss, "the loss", shown), ref_loss.detach(), inputs=shown,
                        names=["the loss"], rtol=rtol, atol=atol)
    for name, expected in ref_grads.items():
        checks.expect_close(exercise, _engine_grad(exercise, mine.get(name), name, shown), expected, inputs=shown,
                            names=[f"{name}.grad"], rtol=rtol, atol=atol)


def toy_regression(n_points=64, seed=0, dtype=torch.float64):
    """x evenly spaced in [-3, 3] (column), y = sin(x) + small noise: the notebook's toy problem."""
    x = torch.linspace(-3, 3, n_points, dtype=dtype, device=get_device())[:, None]
    y = torch.sin(x) + tensor((n_points, 1), seed, dtype, scale=0.05)
    return x, y


def train_with_engine(Tensor, x, y, params, steps, lr):
    """Plain gradient descent with the learner's engine: fresh leaves every step (no zero_grad
    needed), the update done on the torch tensors. Returns (losses, final params)."""
    params = {k: v.clone() for k, v in params.items()}
    losses = []
    for _ in range(steps):
        leaves = {k: Tensor(v.clone()) for k, v in params.items()}
        loss = _mlp_loss(Tensor(x), y, leaves)
        loss.backward()
        losses.append(float(loss.data))
        params = {k: params[k] - lr * leaves[k].grad for k in params}
    return losses, params


def train_with_autograd(x, y, params, steps, lr):
    """The same training loop with PyTorch's autograd: the reference."""
    params = {k: v.clone() for k, v in params.items()}
    losses = []
    for _ in range(steps):
        leaves = {k: _leaf(v) for k, v in params.items()}
        with torch.enable_grad():
            loss = _mlp_loss(x, y, leaves)
            grads = torch.autograd.grad(loss, list(leaves.values()))
        losses.append(float(loss.detach()))
        params = {k: params[k] - lr * gr for k, gr in zip(params, grads)}
    return losses, params


def check_engine_training(exercise, Tensor, hidden=16, steps=150, lr=0.1, seed=0, min_drop=4.0):
    """Train the MLP on the toy regression with the learner's engine and with autograd from the same
    start: every step's loss must match, and the loss must fall by at least `min_drop` times."""
    x, y = toy_regression(seed=seed)
    params = _mlp_params(1, hidden, 1, seed + 1, torch.float64)
    reference, _ = train_with_autograd(x, y, params, steps, lr)
    shown = {"task": f"MLP 1 -> {hidden} (relu) -> 1 on y = sin(x) + noise, 64 points, {steps} steps of "
                     f"gradient descent with lr = {lr:g}, float64"}
    mine, _ = _call_engine(exercise, lambda: train_with_engine(Tensor, x, y, params, steps, lr), shown, time_limit=30.0)
    rtol, atol = tolerances(torch.float64)
    every = max(1, steps // 6)
    trace = "\n".join(f"    step {k:4d}: yours {mine[k]:.8g}, PyTorch {reference[k]:.8g}"
                      for k in list(range(0, steps, every)) + [steps - 1])
    for k, (a, b) in enumerate(zip(mine, reference)):
        if not abs(a - b) <= atol + rtol * abs(b):
            checks.fail(exercise, f"the training loss differs from PyTorch's from step {k} on "
                  f"(yours {a:.10g}, PyTorch {b:.10g}): a gradient is wrong", shown, trace)
    if not mine[-1] * min_drop <= mine[0]:
        checks.fail(exercise, f"the loss fell from {mine[0]:.4g} to {mine[-1]:.4g} only; it should fall by at "
              f"least {min_drop:g} times", shown, trace)


def check_engine_deep(exercise, Tensor, steps=3000, ladder=False, dtype=torch.float64):
    """A chain of 2 * steps operations, then .sum(): t = t * 0.999 + 0.001 (d t_end / d t_0 = 0.999 ** steps),
    or with `ladder`, t = t * 0.5 + t * 0.4999, which uses every node twice (0.9999 ** steps, 3 * steps ops).
    backward must walk it without recursion."""
    start = tensor((3,), 0, dtype)
    step = "t = t * 0.5 + t * 0.4999" if ladder else "t = t * 0.999 + 0.001"
    shown = {"graph": f"{step}, {steps} times, then .sum()"}

    def run():
        first = Tensor(_private_copy(start))
        t = first
        for _ in range(steps):
            t = t * 0.5 + t * 0.4999 if ladder else t * 0.999 + 0.001
        root = t.sum()
        root.backward()
        return engine_node(first)

    first = _call_engine(exercise, run, shown)
    expected = torch.full_like(start, (0.9999 if ladder else 0.999) ** steps)
    checks.expect_close(exercise, _engine_grad(exercise, first, "t_0", shown), expected, inputs=shown,
                        names=["t_0.grad"], rtol=1e-9, atol=tolerances(dtype)[1])
