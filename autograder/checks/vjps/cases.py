"""Inputs and expected results for notebook 03's VJP exercises: seeded tensors in a chosen memory
layout, and each case's reference gradients from `torch.autograd.grad` through the PyTorch operation
itself (`F.linear`, `torch.softmax`, `F.layer_norm`, broadcasting, ...), computed where the grader
runs. Autograd is a fair reference: every exercise here refuses it inside the learner's call.
"""
import dataclasses
import math

import torch
import torch.nn.functional as F

from autograder import checks
from autograder.learner import inputs

LAYOUTS = ("contiguous", "transposed", "sliced")


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


def private_copy(value):
    """A copy with the same strides (clone() would make a sliced tensor contiguous)."""
    if not isinstance(value, torch.Tensor):
        return value
    value = value.detach()
    copy = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=value.device)
    copy.copy_(value)
    return copy


def leaf_copy(t):
    return t.detach().clone().requires_grad_(True)


def autograd_grads(output, leaves, g):
    """torch.autograd.grad of `output` with upstream `g`, computed where the grader needs it."""
    with torch.enable_grad():
        return tuple(r.detach() for r in torch.autograd.grad(output, leaves, g))


@dataclasses.dataclass
class Case:
    """Inputs for the learner's function (in call order), the expected result, what to call it, and
    `broadcast_bytes`: the size of the largest input once broadcast against the others (0 where
    nothing broadcasts), which an intermediate of a correct answer may reach."""
    inputs: dict
    expected: object
    names: list
    layout: str = "contiguous"
    note: str = ""
    broadcast_bytes: int = 0

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
    leaf = leaf_copy(x)
    with torch.enable_grad():
        expected = autograd_grads(torch.relu(leaf), leaf, g)[0]
    case_inputs = {"x": relayout(x, layout), "g": relayout(g, layout)}
    return Case(case_inputs, expected, ["dL/dx"], layout)


def _elementwise_from_output(op, shape, seed, dtype, layout, scale):
    z = tensor(shape, seed, dtype, scale=scale)
    g = tensor(shape, seed + 1, dtype)
    leaf = leaf_copy(z)
    with torch.enable_grad():
        y = op(leaf)
        expected = autograd_grads(y, leaf, g)[0]
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
    leaves = [leaf_copy(t) for t in (x, W, b)]
    with torch.enable_grad():
        expected = autograd_grads(F.linear(*leaves), leaves, g)
    case_inputs = {"x": relayout(x, layout), "W": relayout(W, layout), "b": b, "g": relayout(g, layout)}
    return Case(case_inputs, expected, ["gx", "gW", "gb"], layout)


def matmul_case(a_shape, b_shape, seed, dtype=torch.float64, layout="contiguous"):
    """C = A @ B, batch dimensions broadcast as torch.matmul does; upstream g shaped like C."""
    A, B = tensor(a_shape, seed, dtype), tensor(b_shape, seed + 1, dtype)
    batch = torch.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    c_shape = batch + (a_shape[-2], b_shape[-1])
    g = tensor(c_shape, seed + 2, dtype)
    leaves = [leaf_copy(A), leaf_copy(B)]
    with torch.enable_grad():
        expected = autograd_grads(leaves[0] @ leaves[1], leaves, g)
    case_inputs = {"A": relayout(A, layout), "B": relayout(B, layout), "g": relayout(g, layout)}
    # g @ B.mT has A's matrices on C's batch shape (and A.mT @ g B's) before unbroadcast sums it back
    broadcast = max(math.prod(batch) * math.prod(shape[-2:]) for shape in (a_shape, b_shape)) * A.element_size()
    return Case(case_inputs, expected, ["gA", "gB"], layout, note=f"C = A @ B has shape {tuple(c_shape)}",
                broadcast_bytes=broadcast)


def unbroadcast_case(target, g_shape, seed, dtype=torch.float64, layout="contiguous", shape_as=tuple):
    """g of g_shape, summed down to `target`: the gradient of a tensor of shape `target` that
    broadcasting expanded to g_shape. `shape_as` gives the shape as a tuple, list or torch.Size."""
    target, g_shape = tuple(target), tuple(g_shape)
    g = tensor(g_shape, seed, dtype)
    leaf = leaf_copy(tensor(target, seed + 1, dtype))
    with torch.enable_grad():
        expected = autograd_grads(leaf.expand(g_shape), [leaf], g)[0]
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
    leaf = leaf_copy(z)
    with torch.enable_grad():
        y = op(leaf, dim=dim)
        expected = autograd_grads(y, leaf, g)[0]
    case_inputs = {"y": relayout(y.detach(), layout), "g": relayout(g, layout), "dim": dim}
    return Case(case_inputs, expected, ["dL/dz"], layout,
                note=f"y = {op.__name__}(z, dim={dim}), z drawn with scale {scale:g}")


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
    leaves = [leaf_copy(t) for t in (x, weight, bias)]
    with torch.enable_grad():
        expected = autograd_grads(F.layer_norm(leaves[0], (n,), leaves[1], leaves[2], eps), leaves, g)
    case_inputs = {"x": relayout(x, layout), "weight": weight, "bias": bias, "g": relayout(g, layout), "eps": eps}
    note = f"x drawn with scale {x_scale:g}, shifted by {x_shift:g}" if (x_scale, x_shift) != (1.0, 0.0) else ""
    return Case(case_inputs, expected, ["gx", "gweight", "gbias"], layout, note)
