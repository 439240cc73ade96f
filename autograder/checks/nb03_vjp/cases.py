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
from autograder.checks import battery
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


def is_expanded(t):
    """Whether `t` shows one memory location at several indices (a stride of 0 on a dim of size > 1)."""
    return isinstance(t, torch.Tensor) and any(s == 0 and n > 1 for s, n in zip(t.stride(), t.shape))


LAYOUT_WORDS = {"transposed": "last two dims transposed in memory",
                "sliced": "every other element of a wider tensor",
                "strided": "a strided view with gaps in every dimension"}


def describe_layout(case_inputs, layout):
    if layout == "contiguous":
        return "contiguous"
    tensors = {k: v for k, v in case_inputs.items() if isinstance(v, torch.Tensor)}
    expanded = [k for k, v in tensors.items() if is_expanded(v)]
    strided = [k for k, v in tensors.items() if not v.is_contiguous() and k not in expanded]
    parts = [f"{', '.join(expanded)} expanded (one row repeated without a copy: stride 0)"] if expanded else []
    if strided or not expanded:
        parts.append(f"{', '.join(strided) or 'none'} non-contiguous ({LAYOUT_WORDS.get(layout, layout)})")
    return "; ".join(parts)


def private_copy(value):
    """A copy with the same strides (clone() would make a sliced tensor contiguous); an expanded
    tensor stays expanded (its one row copied, then expanded again)."""
    if not isinstance(value, torch.Tensor):
        return value
    value = value.detach()
    if is_expanded(value):
        one = tuple(slice(0, 1) if s == 0 and n > 1 else slice(None) for s, n in zip(value.stride(), value.shape))
        return private_copy(value[one]).expand(value.shape)
    copy = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=value.device)
    copy.copy_(value)
    return copy


def expand_rows(t):
    """`t`'s first row repeated along dim 0 without a copy (stride 0), as the battery's `expanded`."""
    return battery.expanded(t[:1], t.shape[0]) if t.dim() and t.shape[0] > 1 else t


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
    nothing broadcasts), which an intermediate of a correct answer may reach. `stress` names the
    battery's stress the inputs were drawn for (large logits, a batch of one, ...; a non-contiguous
    or expanded layout is read from the inputs), `tolerance` an (rtol, atol) other than the dtype's, and
    `reason` what a failure on that stress means for these inputs, where the battery's usual advice
    would misdiagnose it."""
    inputs: dict
    expected: object
    names: list
    layout: str = "contiguous"
    note: str = ""
    broadcast_bytes: int = 0
    stress: str = ""
    tolerance: tuple = None
    reason: str = ""

    def shown_inputs(self):
        shown = dict(self.inputs)
        shown["layout"] = describe_layout(self.inputs, self.layout)
        if self.note:
            shown["note"] = self.note
        return shown

    def layout_stress(self):
        """("expanded" or "non-contiguous", the inputs that are), or None for contiguous inputs."""
        tensors = {k: v for k, v in self.inputs.items() if isinstance(v, torch.Tensor)}
        for stress, test in (("expanded", is_expanded), ("non-contiguous", lambda t: not t.is_contiguous())):
            names = [k for k, v in tensors.items() if test(v)]
            if names:
                return stress, ", ".join(names)
        return None

    def contiguous_twin(self):
        """The same values in contiguous memory: checked first, so that a failure on the strided
        inputs is the layout's."""
        plain = {k: v.contiguous() if isinstance(v, torch.Tensor) else v for k, v in self.inputs.items()}
        return dataclasses.replace(self, inputs=plain, layout="contiguous")


def stressed(case, stress, names=()):
    """`case` drawn for the battery's `stress`: "non-contiguous" puts the named inputs in strided views
    with gaps in every dimension (`battery.non_contiguous`: the values, hence the reference, stay);
    any other stress (a batch of one, ...) only labels the case, whose inputs were drawn for it."""
    battery.describe(stress)  # an unknown stress fails here
    if stress == "non-contiguous":
        moved = {k: battery.non_contiguous(v) if k in names else v for k, v in case.inputs.items()}
        return dataclasses.replace(case, inputs=moved, layout="strided")
    return dataclasses.replace(case, stress=stress)


def _with_zeros(x):
    return torch.where(x.abs() < 0.3, torch.zeros_like(x), x)  # exact zeros where relu has its kink


def _expanded(drawn, expand, layout):
    """The drawn inputs with those named in `expand` expanded along dim 0 (`expand_rows`), and the
    layout that describes them: the reference is then computed from these values."""
    unknown = set(expand) - set(drawn)
    if unknown:
        raise ValueError(f"cannot expand {sorted(unknown)}: the inputs are {list(drawn)}")
    return {k: expand_rows(v) if k in expand else v for k, v in drawn.items()}, "expanded" if expand else layout


def _laid_out(t, layout):
    return t if layout == "expanded" else relayout(t, layout)


def relu_case(shape, seed, dtype=torch.float64, layout="contiguous", expand=(), special=False):
    """relu's VJP; `special`: x is the battery's special points (0, tiny, ±1, ±large), shape ignored."""
    x = battery.special_points(dtype) if special else _with_zeros(tensor(shape, seed, dtype))
    drawn, layout = _expanded({"x": x, "g": tensor(tuple(x.shape), seed + 1, dtype)}, expand, layout)
    leaf = leaf_copy(drawn["x"])
    with torch.enable_grad():
        expected = autograd_grads(torch.relu(leaf), leaf, drawn["g"])[0]
    case_inputs = {k: _laid_out(v, layout) for k, v in drawn.items()}
    return Case(case_inputs, expected, ["dL/dx"], layout, stress="special-points" if special else "")


def _elementwise_from_output(op, shape, seed, dtype, layout, scale, expand, special):
    z = battery.special_points(dtype) if special else tensor(shape, seed, dtype, scale=scale)
    as_drawn = {"z" if k == "y" else k for k in expand}  # y = op(z) repeats z's rows
    drawn, layout = _expanded({"z": z, "g": tensor(tuple(z.shape), seed + 1, dtype)}, as_drawn, layout)
    leaf = leaf_copy(drawn["z"])
    with torch.enable_grad():
        y = op(leaf)
        expected = autograd_grads(y, leaf, drawn["g"])[0]
    y = y.detach()
    if "y" in expand:  # op keeps z's rows equal, but not its stride 0
        y = expand_rows(y)
    case_inputs = {"y": _laid_out(y, layout), "g": _laid_out(drawn["g"], layout)}
    note = f"y = {op.__name__}(x), x = " + ("the special points" if special else f"drawn with scale {scale:g}")
    return Case(case_inputs, expected, ["dL/dx"], layout, note=note, stress="special-points" if special else "")


def sigmoid_case(shape, seed, dtype=torch.float64, layout="contiguous", scale=3.0, expand=(), special=False):
    return _elementwise_from_output(torch.sigmoid, shape, seed, dtype, layout, scale, expand, special)


def tanh_case(shape, seed, dtype=torch.float64, layout="contiguous", scale=2.0, expand=(), special=False):
    return _elementwise_from_output(torch.tanh, shape, seed, dtype, layout, scale, expand, special)


def linear_case(batch, n, m, seed, dtype=torch.float64, layout="contiguous", expand=()):
    """y = x @ W.T + b with x (*batch, n), W (m, n), b (m,) and upstream g (*batch, m)."""
    drawn = {"x": tensor((*batch, n), seed, dtype), "W": tensor((m, n), seed + 1, dtype),
             "b": tensor((m,), seed + 2, dtype), "g": tensor((*batch, m), seed + 3, dtype)}
    drawn, layout = _expanded(drawn, expand, layout)
    leaves = [leaf_copy(drawn[k]) for k in ("x", "W", "b")]
    with torch.enable_grad():
        expected = autograd_grads(F.linear(*leaves), leaves, drawn["g"])
    case_inputs = {k: v if k == "b" else _laid_out(v, layout) for k, v in drawn.items()}
    return Case(case_inputs, expected, ["gx", "gW", "gb"], layout)


def matmul_case(a_shape, b_shape, seed, dtype=torch.float64, layout="contiguous", expand=()):
    """C = A @ B, batch dimensions broadcast as torch.matmul does; upstream g shaped like C."""
    batch = torch.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    c_shape = batch + (a_shape[-2], b_shape[-1])
    drawn = {"A": tensor(a_shape, seed, dtype), "B": tensor(b_shape, seed + 1, dtype),
             "g": tensor(c_shape, seed + 2, dtype)}
    drawn, layout = _expanded(drawn, expand, layout)
    A, B, g = drawn.values()
    leaves = [leaf_copy(A), leaf_copy(B)]
    with torch.enable_grad():
        expected = autograd_grads(leaves[0] @ leaves[1], leaves, g)
    case_inputs = {k: _laid_out(v, layout) for k, v in drawn.items()}
    # g @ B.mT has A's matrices on C's batch shape (and A.mT @ g B's) before unbroadcast sums it back
    broadcast = max(math.prod(batch) * math.prod(shape[-2:]) for shape in (a_shape, b_shape)) * A.element_size()
    return Case(case_inputs, expected, ["gA", "gB"], layout, note=f"C = A @ B has shape {tuple(c_shape)}",
                broadcast_bytes=broadcast)


def unbroadcast_case(target, g_shape, seed, dtype=torch.float64, layout="contiguous", shape_as=tuple, expand=()):
    """g of g_shape, summed down to `target`: the gradient of a tensor of shape `target` that
    broadcasting expanded to g_shape. `shape_as` gives the shape as a tuple, list or torch.Size."""
    target, g_shape = tuple(target), tuple(g_shape)
    drawn, layout = _expanded({"g": tensor(g_shape, seed, dtype)}, expand, layout)
    leaf = leaf_copy(tensor(target, seed + 1, dtype))
    with torch.enable_grad():
        expected = autograd_grads(leaf.expand(g_shape), [leaf], drawn["g"])[0]
    case_inputs = {"g": _laid_out(drawn["g"], layout), "shape": shape_as(target)}
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


# What breaks a softmax VJP on large logits. It is given the output, so it takes no exp of a logit and
# the battery's "subtract the largest logit" does not apply: the outputs hold probabilities that are
# exactly 0, and a division by them is inf (then 0 * inf = NaN).
UNDERFLOW_REASONS = {
    torch.softmax: "most probabilities y of such logits are exactly 0 in float32 (y is given: nothing here takes "
                   "exp of a logit, so nothing can overflow): do not divide by y; keep y as a factor",
    torch.log_softmax: "y holds log-probabilities (y <= 0, so exp(y) cannot overflow), and p = exp(y) is exactly 0 "
                       "in float32 wherever y < -104, a logit that far below the row's largest: do not divide by p "
                       "(g / p is inf there, and 0 * inf is NaN); keep p as a factor",
}


def _softmax_like(op, shape, dim, seed, dtype, layout, scale, expand, large_logits):
    """y = op(z, dim) and autograd's dL/dz. `large_logits`: float32 logits as large as a few hundred
    (`battery.large_logits`), y computed in float32 from them and the reference in float64 from the
    same values; `expand` ("g"): g's first row repeated (y too, if named)."""
    if large_logits:
        z, dtype = battery.large_logits(*shape, seed=seed), torch.float32
    else:
        z = tensor(shape, seed, dtype, scale=scale)
    as_drawn = {"z" if k == "y" else k for k in expand}  # y = op(z) repeats z's rows
    drawn, layout = _expanded({"z": z, "g": tensor(shape, seed + 1, dtype)}, as_drawn, layout)
    leaf = leaf_copy(drawn["z"].double() if large_logits else drawn["z"])
    with torch.enable_grad():
        expected = autograd_grads(op(leaf, dim=dim), leaf, drawn["g"].to(leaf.dtype))[0].to(dtype)
    y = op(drawn["z"], dim=dim)
    if "y" in expand:
        y = expand_rows(y)
    case_inputs = {"y": _laid_out(y, layout), "g": _laid_out(drawn["g"], layout), "dim": dim}
    drawn_as = ("float32, as large as a few hundred (reference in float64)" if large_logits
                else f"drawn with scale {scale:g}")
    return Case(case_inputs, expected, ["dL/dz"], layout, note=f"y = {op.__name__}(z, dim={dim}), z {drawn_as}",
                stress="large-logits" if large_logits else "", reason=UNDERFLOW_REASONS[op] if large_logits else "")


def softmax_case(shape, dim, seed, dtype=torch.float64, layout="contiguous", scale=2.0, expand=(), large_logits=False):
    return _softmax_like(torch.softmax, shape, dim, seed, dtype, layout, scale, expand, large_logits)


def log_softmax_case(shape, dim, seed, dtype=torch.float64, layout="contiguous", scale=2.0, expand=(),
                     large_logits=False):
    return _softmax_like(torch.log_softmax, shape, dim, seed, dtype, layout, scale, expand, large_logits)


# float32 rows whose mean is LARGE_MEAN times their spread: a correct (two-pass) answer keeps about
# eps32 * LARGE_MEAN of relative accuracy, a one-pass variance E[x^2] - E[x]^2 loses every digit.
LARGE_MEAN = 1e3


def layernorm_case(shape, seed, dtype=torch.float64, layout="contiguous", eps=1e-5, x_scale=1.0, x_shift=0.0,
                   expand=(), large_mean=False):
    """F.layer_norm over the last dim, with weight and bias; x drawn with scale and shift.
    `large_mean`: x in float32 with rows around LARGE_MEAN and spread 1 (`battery.large_mean`), the
    reference computed in float64 from the same values, a tolerance that allows float32's rounding
    of the mean (64 eps32 LARGE_MEAN, about 8e-3) but not the cancellation of a one-pass variance."""
    n = shape[-1]
    if large_mean:
        x, dtype = battery.large_mean(*shape, seed=seed, mean=LARGE_MEAN), torch.float32
    else:
        x = tensor(shape, seed, dtype, scale=x_scale) + x_shift
    drawn = {"x": x, "weight": tensor((n,), seed + 1, dtype), "bias": tensor((n,), seed + 2, dtype),
             "g": tensor(shape, seed + 3, dtype)}
    drawn, layout = _expanded(drawn, expand, layout)
    leaves = [leaf_copy(drawn[k].double() if large_mean else drawn[k]) for k in ("x", "weight", "bias")]
    with torch.enable_grad():
        expected = autograd_grads(F.layer_norm(leaves[0], (n,), leaves[1], leaves[2], eps), leaves,
                                  drawn["g"].to(leaves[0].dtype))
    expected = tuple(e.to(dtype) for e in expected)
    case_inputs = {k: _laid_out(v, layout) if k in ("x", "g") else v for k, v in drawn.items()}
    case_inputs["eps"] = eps
    if large_mean:
        note = f"x in float32 around {LARGE_MEAN:g} with spread 1 (reference in float64)"
    else:
        note = f"x drawn with scale {x_scale:g}, shifted by {x_shift:g}" if (x_scale, x_shift) != (1.0, 0.0) else ""
    tolerance = (64 * torch.finfo(torch.float32).eps * LARGE_MEAN,) * 2 if large_mean else None
    return Case(case_inputs, expected, ["gx", "gweight", "gbias"], layout, note,
                stress="float32-large-mean" if large_mean else "", tolerance=tolerance)
