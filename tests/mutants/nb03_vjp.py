"""Notebook 03: the bugs learners write in VJPs, custom Functions and a tensor engine; other correct answers.

Every entry is checked by tests/test_mutants.py: a `wrong` one must fail some grade cell of its name
with a GradingError, a `right` one must pass all of them. Besides the classic derivation slips, the
catalogue holds answers that are numerically right but break a rule of the notebook, each of which
must be rejected with a message saying so: a VJP that secretly asks autograd (`torch.autograd.grad`,
`Tensor.backward`, `torch.func.vjp`), one that calls PyTorch's own backward kernel
(`torch.ops.aten.*_backward`), one that builds a Jacobian (or per-example outer products), an
`unbroadcast` that calls `Tensor.sum_to_size`, a log-sum-exp forward that calls `torch.logsumexp`.
And answers that are right on friendly inputs but break on the battery's (`autograder.checks.battery`),
each rejected with a message that names the stress: an in-place write into an expanded `g` or `x`, a
`.view` on a strided input, a `.squeeze(0)` that drops a batch of one, a one-pass variance in float32
rows of large mean, a division by a probability that underflowed (log-softmax through softmax, the
sigmoid's derivative through e^-x), a log-sum-exp shifted by the mean (-inf entries).

Functions carry their imports. The first wrong entry of `StableLogSumExp` (the first graded name in
sorted order) is a plain class with imports inside its methods: the nbgrader end-to-end test pastes
its source into a submission. The tensor engines are subclasses of `AltTensor`, a correct engine
written independently of the reference solution (gradients start as None, Kahn's algorithm instead
of a depth-first sort, einsum-based VJPs, a loop-based unbroadcast); each wrong engine overrides one
method, so it shows one bug and nothing else. They run in-process only.
"""
import collections
import functools

import torch

from mutants import right, wrong

NB = "03_vjp"
wrong_ = functools.partial(wrong, NB)
right_ = functools.partial(right, NB)


# StableLogSumExp ------------------------------------------------------------------------------------
@wrong_("StableLogSumExp", "backward ignores grad_out: returns the softmax alone")
class LSEIgnoresUpstream(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim):
        top = x.amax(dim=dim, keepdim=True)
        out = (top + (x - top).exp().sum(dim=dim, keepdim=True).log()).squeeze(dim)
        ctx.dim = dim
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, out = ctx.saved_tensors
        return (x - out.unsqueeze(ctx.dim)).exp(), None


class _LSEBase(torch.autograd.Function):
    """A correct log-sum-exp; the wrong entries below override one of its methods."""

    @staticmethod
    def forward(ctx, x, dim):
        top = x.amax(dim=dim, keepdim=True)
        out = (top + (x - top).exp().sum(dim=dim, keepdim=True).log()).squeeze(dim)
        ctx.dim = dim
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, out = ctx.saved_tensors
        return grad_out.unsqueeze(ctx.dim) * (x - out.unsqueeze(ctx.dim)).exp(), None


@wrong_("StableLogSumExp", "naive forward log(sum(exp(x))): overflows at x = 1000")
class LSENaive(_LSEBase):
    @staticmethod
    def forward(ctx, x, dim):
        out = x.exp().sum(dim=dim).log()
        ctx.dim = dim
        ctx.save_for_backward(x, out)
        return out


@wrong_("StableLogSumExp", "subtracts each row's max but never adds it back")
class LSENoAddBack(_LSEBase):
    @staticmethod
    def forward(ctx, x, dim):
        top = x.amax(dim=dim, keepdim=True)
        out = (x - top).exp().sum(dim=dim).log()
        ctx.dim = dim
        ctx.save_for_backward(x, out + top.squeeze(dim))
        return out


@wrong_("StableLogSumExp", "subtracts the max of the whole tensor: rows far below it underflow to -inf")
class LSEGlobalMax(_LSEBase):
    @staticmethod
    def forward(ctx, x, dim):
        top = x.max()
        out = top + (x - top).exp().sum(dim=dim).log()
        ctx.dim = dim
        ctx.save_for_backward(x, out)
        return out


@wrong_("StableLogSumExp", "shifts by the row's mean, not its max (the identity holds for any c): a -inf entry "
                           "makes the mean -inf", says="special points")
class LSEShiftsByMean(_LSEBase):
    @staticmethod
    def forward(ctx, x, dim):
        shift = x.mean(dim=dim, keepdim=True)
        out = (shift + (x - shift).exp().sum(dim=dim, keepdim=True).log()).squeeze(dim)
        ctx.dim = dim
        ctx.save_for_backward(x, out)
        return out


@wrong_("StableLogSumExp", "backward returns the unnormalised exp(x - max)")
class LSEUnnormalised(_LSEBase):
    @staticmethod
    def backward(ctx, grad_out):
        x, _ = ctx.saved_tensors
        return grad_out.unsqueeze(ctx.dim) * (x - x.amax(dim=ctx.dim, keepdim=True)).exp(), None


@wrong_("StableLogSumExp", "backward forgets unsqueeze(dim): grad_out broadcasts against the wrong axis")
class LSENoUnsqueeze(_LSEBase):
    @staticmethod
    def backward(ctx, grad_out):
        x, out = ctx.saved_tensors
        return grad_out * (x - out.unsqueeze(ctx.dim)).exp(), None


@wrong_("StableLogSumExp", "backward returns only the gradient of x, no None for dim")
class LSEOneGradient(_LSEBase):
    @staticmethod
    def backward(ctx, grad_out):
        x, out = ctx.saved_tensors
        return grad_out.unsqueeze(ctx.dim) * (x - out.unsqueeze(ctx.dim)).exp()


@wrong_("StableLogSumExp", "backward secretly asks autograd for the gradient of torch.logsumexp")
class LSESecretAutograd(_LSEBase):
    @staticmethod
    def backward(ctx, grad_out):
        x, _ = ctx.saved_tensors
        with torch.enable_grad():
            leaf = x.detach().requires_grad_(True)
            (grad_x,) = torch.autograd.grad(torch.logsumexp(leaf, ctx.dim), leaf, grad_out)
        return grad_x, None


@wrong_("StableLogSumExp", "forward calls torch.logsumexp instead of writing it")
class LSECallsTorch(_LSEBase):
    @staticmethod
    def forward(ctx, x, dim):
        out = x.logsumexp(dim)
        ctx.dim = dim
        ctx.save_for_backward(x, out)
        return out


@wrong_("StableLogSumExp", "backward detaches its saved tensors: right gradient, wrong second derivative")
class LSEDetachedBackward(_LSEBase):
    @staticmethod
    def backward(ctx, grad_out):
        x, out = ctx.saved_tensors
        return grad_out.unsqueeze(ctx.dim) * (x.detach() - out.detach().unsqueeze(ctx.dim)).exp(), None


@wrong_("StableLogSumExp", "backward saves the softmax computed in forward: not differentiable twice")
class LSESavesSoftmax(_LSEBase):
    @staticmethod
    def forward(ctx, x, dim):
        top = x.amax(dim=dim, keepdim=True)
        shifted = (x - top).exp()
        total = shifted.sum(dim=dim, keepdim=True)
        ctx.dim = dim
        ctx.save_for_backward(shifted / total)
        return (top + total.log()).squeeze(dim)

    @staticmethod
    def backward(ctx, grad_out):
        (softmax,) = ctx.saved_tensors
        return grad_out.unsqueeze(ctx.dim) * softmax, None


@wrong_("StableLogSumExp", "saves exp(x - M) and their sum from forward: right gradient, constants to double backward")
class LSESavesShiftedExponentials(_LSEBase):
    @staticmethod
    def forward(ctx, x, dim):
        top = x.amax(dim=dim, keepdim=True)
        shifted = (x - top).exp()
        total = shifted.sum(dim=dim, keepdim=True)
        ctx.dim = dim
        ctx.save_for_backward(shifted, total)
        return (top + total.log()).squeeze(dim)

    @staticmethod
    def backward(ctx, grad_out):
        shifted, total = ctx.saved_tensors
        return grad_out.unsqueeze(ctx.dim) * shifted / total, None


@right_("StableLogSumExp", "saves only x and recomputes the shifted exponentials in backward")
class LSERecomputes(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim):
        top = x.amax(dim=dim, keepdim=True)
        ctx.dim = dim
        ctx.save_for_backward(x)
        return (top + (x - top).exp().sum(dim=dim, keepdim=True).log()).squeeze(dim)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        shifted = (x - x.amax(dim=ctx.dim, keepdim=True)).exp()
        return grad_out.unsqueeze(ctx.dim) * shifted / shifted.sum(dim=ctx.dim, keepdim=True), None


@right_("StableLogSumExp", "new-style forward(x, dim) with setup_context; torch.softmax in backward")
class LSESetupContext(torch.autograd.Function):
    @staticmethod
    def forward(x, dim):
        peak = torch.max(x, dim=dim, keepdim=True).values
        return torch.log(torch.sum(torch.exp(x - peak), dim=dim)) + peak.squeeze(dim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, dim = inputs
        ctx.dim = dim
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return torch.softmax(x, dim=ctx.dim) * grad_out.unsqueeze(ctx.dim), None


# StraightThroughRound ----------------------------------------------------------------------------
@wrong_("StraightThroughRound", "backward returns zeros: the true derivative of round")
class STRZeros(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad_out):
        return torch.zeros_like(grad_out)


@wrong_("StraightThroughRound", "backward returns ones, ignoring grad_out")
class STROnes(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad_out):
        return torch.ones_like(grad_out)


@wrong_("StraightThroughRound", "forward floor(x + 0.5): halves round up, not to even")
class STRHalfUp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.floor(x + 0.5)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out


@wrong_("StraightThroughRound", "forward forgets to round")
class STRIdentity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out


@wrong_("StraightThroughRound", "forward returns integers (x.round().long()): no gradient can flow")
class STRInteger(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.round().long()

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out


@wrong_("StraightThroughRound", "backward multiplies by the rounded input")
class STRTimesRounded(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * torch.round(x)


@wrong_("StraightThroughRound", "the detach trick in a plain class, not a torch.autograd.Function")
class STRDetachTrick:
    @staticmethod
    def apply(x):
        return x + (torch.round(x) - x).detach()


@wrong_("StraightThroughRound", "backward asks autograd for the gradient of the identity")
class STRSecretAutograd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            leaf = x.detach().requires_grad_(True)
            return torch.autograd.grad(leaf * 1.0, leaf, grad_out)[0]


@right_("StraightThroughRound", "new-style forward with setup_context, backward returns a clone")
class STRSetupContext(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x.round()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.clone()


# unbroadcast(g, shape) ---------------------------------------------------------------------------
@wrong_("unbroadcast", "sums the added leading dims but forgets the stretched size-1 dims")
def ub_leading_only(g, shape):
    extra = g.dim() - len(shape)
    return g.sum(dim=tuple(range(extra))) if extra > 0 else g


@wrong_("unbroadcast", "sums the stretched size-1 dims without keepdim")
def ub_drops_keepdim(g, shape):
    shape = tuple(shape)
    extra = g.dim() - len(shape)
    if extra > 0:
        g = g.sum(dim=tuple(range(extra)))
    stretched = tuple(i for i, s in enumerate(shape) if s == 1 and g.shape[i] != 1)
    return g.sum(dim=stretched) if stretched else g


@wrong_("unbroadcast", "aligns the shapes from the left: sums the trailing dims away")
def ub_trailing(g, shape):
    shape = tuple(shape)
    while g.dim() > len(shape):
        g = g.sum(dim=-1)
    for i, s in enumerate(shape):
        if s == 1 and g.shape[i] != 1:
            g = g.sum(dim=i, keepdim=True)
    return g


@wrong_("unbroadcast", "g.sum(dim=tuple(range(extra))) also when extra == 0: dim=() sums everything")
def ub_empty_dim(g, shape):
    shape = tuple(shape)
    g = g.sum(dim=tuple(range(g.dim() - len(shape))))
    for i, s in enumerate(shape):
        if s == 1 and g.dim() > i and g.shape[i] != 1:
            g = g.sum(dim=i, keepdim=True)
    return g


@wrong_("unbroadcast", "keepdim=True on the added leading dims too")
def ub_keeps_leading(g, shape):
    shape = tuple(shape)
    extra = g.dim() - len(shape)
    if extra > 0:
        g = g.sum(dim=tuple(range(extra)), keepdim=True)
    for i, s in enumerate(shape):
        if s == 1 and g.shape[extra + i] != 1:
            g = g.sum(dim=extra + i, keepdim=True)
    return g


@wrong_("unbroadcast", "folds the leading dims with .view: fails on a strided gradient", says="non-contiguous")
def ub_view(g, shape):
    shape = tuple(shape)
    lead = g.dim() - len(shape)
    g = g.view(-1, *g.shape[lead:]).sum(0)
    ones = [i for i, size in enumerate(shape) if size == 1]
    return g.sum(ones, keepdim=True) if ones else g


@wrong_("unbroadcast", "averages instead of summing")
def ub_mean(g, shape):
    shape = tuple(shape)
    extra = g.dim() - len(shape)
    if extra > 0:
        g = g.mean(dim=tuple(range(extra)))
    for i, s in enumerate(shape):
        if s == 1 and g.shape[i] != 1:
            g = g.mean(dim=i, keepdim=True)
    return g


@wrong_("unbroadcast", "calls Tensor.sum_to_size, PyTorch's built-in version")
def ub_sum_to_size(g, shape):
    return g.sum_to_size(tuple(shape))


@wrong_("unbroadcast", "asks autograd: expands a leaf and differentiates")
def ub_autograd(g, shape):
    import torch
    with torch.enable_grad():
        leaf = torch.zeros(tuple(shape), dtype=g.dtype, device=g.device, requires_grad=True)
        return torch.autograd.grad(leaf.expand(g.shape), leaf, g)[0]


@right_("unbroadcast", "one dim at a time: sum(0) while too long, then sum(i, keepdim=True) where the target has 1")
def ub_loop(g, shape):
    while g.dim() > len(shape):
        g = g.sum(0)
    for i, size in enumerate(shape):
        if size == 1:
            g = g.sum(i, keepdim=True)
    return g


@right_("unbroadcast", "reshape trick: fold the leading dims into one, sum it, then the size-1 dims")
def ub_reshape(g, shape):
    shape = tuple(shape)
    lead = g.dim() - len(shape)
    g = g.reshape(-1, *g.shape[lead:]).sum(0)
    ones = [i for i, size in enumerate(shape) if size == 1]
    return g.sum(ones, keepdim=True) if ones else g


# vjp_linear(x, W, b, g) ----------------------------------------------------------------------------
@wrong_("vjp_linear", "gW = x.T @ g: the y = W x convention, transposed")
def lin_xT_g(x, W, b, g):
    n, m = x.shape[-1], g.shape[-1]
    gr, xr = g.reshape(-1, m), x.reshape(-1, n)
    return g @ W, (xr.T @ gr).reshape(W.shape), gr.sum(0)


@wrong_("vjp_linear", "gx = g @ W.T: a transpose too many, as in W^T g for columns")
def lin_gx_transposed(x, W, b, g):
    n, m = x.shape[-1], g.shape[-1]
    gr, xr = g.reshape(-1, m), x.reshape(-1, n)
    return g @ W.T, gr.T @ xr, gr.sum(0)


@wrong_("vjp_linear", "bias gradient without the batch sum (gb = g)")
def lin_bias_no_sum(x, W, b, g):
    n, m = x.shape[-1], g.shape[-1]
    gr, xr = g.reshape(-1, m), x.reshape(-1, n)
    return g @ W, gr.T @ xr, g


@wrong_("vjp_linear", "bias gradient averaged over the batch")
def lin_bias_mean(x, W, b, g):
    n, m = x.shape[-1], g.shape[-1]
    gr, xr = g.reshape(-1, m), x.reshape(-1, n)
    return g @ W, gr.T @ xr, gr.mean(0)


@wrong_("vjp_linear", "bias gradient summed over the output axis")
def lin_bias_wrong_axis(x, W, b, g):
    return g @ W, g.T @ x, g.sum(-1)


@wrong_("vjp_linear", "2-D only: g.T @ x and g.sum(0) with batch dims (.T reverses them all)")
def lin_2d_only(x, W, b, g):
    return g @ W, g.T @ x, g.sum(0)


@wrong_("vjp_linear", "per-example outer products, then a sum: B times the memory of W")
def lin_outer_products(x, W, b, g):
    n, m = x.shape[-1], g.shape[-1]
    gr, xr = g.reshape(-1, m), x.reshape(-1, n)
    return g @ W, (gr[:, :, None] * xr[:, None, :]).sum(0), gr.sum(0)


@wrong_("vjp_linear", "flattens the batch dims with .view: fails on a strided x or g", says="non-contiguous")
def lin_view(x, W, b, g):
    n, m = x.shape[-1], g.shape[-1]
    gr, xr = g.view(-1, m), x.view(-1, n)
    return g @ W, gr.T @ xr, gr.sum(0)


@wrong_("vjp_linear", "gx.squeeze(0), meant to give a 1-D x a 1-D gradient: a batch of one loses its batch dim",
        says="a batch of one")
def lin_squeeze_first(x, W, b, g):
    n, m = x.shape[-1], g.shape[-1]
    gr, xr = g.reshape(-1, m), x.reshape(-1, n)
    return (g @ W).squeeze(0), gr.T @ xr, gr.sum(0)


@wrong_("vjp_linear", "torch.func.vjp of F.linear")
def lin_func_vjp(x, W, b, g):
    import torch
    import torch.nn.functional as F
    _, pull = torch.func.vjp(F.linear, x, W, b)
    return pull(g)


@right_("vjp_linear", "einsum with ellipsis for the batch dims")
def lin_einsum(x, W, b, g):
    import torch
    return (torch.einsum("...m,mn->...n", g, W), torch.einsum("...m,...n->mn", g, x),
            torch.einsum("...m->m", g))


@right_("vjp_linear", "flatten to rows, torch.mm and torch.sum, reshape back")
def lin_mm(x, W, b, g):
    import torch
    rows_x = x.reshape(-1, x.shape[-1])
    rows_g = g.reshape(-1, g.shape[-1])
    gx = torch.mm(rows_g, W).reshape(x.shape)
    return gx, torch.mm(rows_g.t(), rows_x), torch.sum(rows_g, dim=0)


# vjp_matmul(A, B, g) -------------------------------------------------------------------------------
def _sum_to(t, shape):
    while t.dim() > len(shape):
        t = t.sum(0)
    for i, size in enumerate(shape):
        if size == 1:
            t = t.sum(i, keepdim=True)
    return t


@wrong_("vjp_matmul", "missing transpose: gA = g @ B, gB = A @ g")
def mm_no_transpose(A, B, g):
    return _sum_to(g @ B, A.shape), _sum_to(A @ g, B.shape)


@wrong_("vjp_matmul", "gB = g.mT @ A: the g.T @ x vs x.T @ g confusion")
def mm_gB_swapped(A, B, g):
    return _sum_to(g @ B.mT, A.shape), _sum_to(g.mT @ A, B.shape)


@wrong_("vjp_matmul", ".T instead of .mT: reverses the batch dims too")
def mm_dot_T(A, B, g):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gA, gB = g @ B.T, A.T @ g
    return _sum_to(gA, A.shape), _sum_to(gB, B.shape)


@wrong_("vjp_matmul", "no unbroadcast: gradients keep the broadcast batch shape")
def mm_no_unbroadcast(A, B, g):
    return g @ B.mT, A.mT @ g


@wrong_("vjp_matmul", "unbroadcast drops keepdim on a stretched batch dim")
def mm_drops_keepdim(A, B, g):
    def reduce(t, shape):
        while t.dim() > len(shape):
            t = t.sum(0)
        for i, size in reversed(list(enumerate(shape))):
            if size == 1 and t.shape[i] != 1:
                t = t.sum(i)
        return t
    return reduce(g @ B.mT, A.shape), reduce(A.mT @ g, B.shape)


@wrong_("vjp_matmul", "Tensor.backward on copies")
def mm_backward(A, B, g):
    import torch
    with torch.enable_grad():
        a, b = A.detach().clone().requires_grad_(True), B.detach().clone().requires_grad_(True)
        (a @ b).backward(g)
    return a.grad, b.grad


@right_("vjp_matmul", "the notebook's recipe: g @ B.mT and A.mT @ g on the broadcast batch, then unbroadcast")
def mm_recipe(A, B, g):
    def unbroadcast(t, shape):
        shape = tuple(shape)
        extra = t.dim() - len(shape)
        if extra > 0:
            t = t.sum(dim=tuple(range(extra)))
        stretched = tuple(i for i, size in enumerate(shape) if size == 1 and t.shape[i] != 1)
        return t.sum(dim=stretched, keepdim=True) if stretched else t
    return unbroadcast(g @ B.mT, A.shape), unbroadcast(A.mT @ g, B.shape)


@right_("vjp_matmul", "einsum over explicitly broadcast operands, then a loop-based reduction")
def mm_einsum(A, B, g):
    import torch
    batch = g.shape[:-2]
    Ab = A.expand(*batch, *A.shape[-2:])
    Bb = B.expand(*batch, *B.shape[-2:])
    gA = torch.einsum("...nm,...km->...nk", g, Bb)
    gB = torch.einsum("...nk,...nm->...km", Ab, g)

    def reduce(t, shape):
        lead = t.dim() - len(shape)
        for _ in range(lead):
            t = t.sum(0)
        for i, size in enumerate(shape):
            if size == 1 and t.shape[i] != 1:
                t = t.sum(i, keepdim=True)
        return t
    return reduce(gA, A.shape), reduce(gB, B.shape)


# vjp_relu, vjp_sigmoid, vjp_tanh -------------------------------------------------------------------
@wrong_("vjp_relu", "mask x >= 0: passes the gradient at exactly 0")
def relu_ge(x, g):
    return g * (x >= 0)


@wrong_("vjp_relu", "returns the mask, forgetting g")
def relu_mask_only(x, g):
    return (x > 0).to(g.dtype)


@wrong_("vjp_relu", "g * relu(x): the value instead of the derivative")
def relu_value(x, g):
    return g * x.clamp(min=0)


@wrong_("vjp_relu", "masks with the sign of g instead of x")
def relu_mask_from_g(x, g):
    return g * (g > 0)


@wrong_("vjp_relu", "zeroes g in place (g.mul_(mask)): writes into the upstream gradient, whose rows may share "
                    "memory", says="an expanded g")
def relu_in_place(x, g):
    return g.mul_(x > 0)


@wrong_("vjp_relu", "calls PyTorch's threshold_backward kernel")
def relu_kernel(x, g):
    import torch
    return torch.ops.aten.threshold_backward(g, x, 0.0)


@wrong_("vjp_relu", "Tensor.backward on a copy")
def relu_backward(x, g):
    import torch
    with torch.enable_grad():
        leaf = x.detach().clone().requires_grad_(True)
        torch.relu(leaf).backward(g)
    return leaf.grad


@right_("vjp_relu", "torch.where with zeros_like")
def relu_where(x, g):
    import torch
    return torch.where(x > 0, g, torch.zeros_like(g))


@wrong_("vjp_sigmoid", "treats the output y as the input: sigmoid(y) * (1 - sigmoid(y))")
def sig_output_as_input(y, g):
    import torch
    s = torch.sigmoid(y)
    return g * s * (1 - s)


@wrong_("vjp_sigmoid", "vice versa: recovers the input x = logit(y), then applies the output form x (1 - x) to it")
def sig_output_formula_on_input(y, g):
    import torch
    x = torch.logit(y)
    return g * x * (1 - x)


@wrong_("vjp_sigmoid", "drops the (1 - y) factor")
def sig_no_one_minus(y, g):
    return g * y


@wrong_("vjp_sigmoid", "forgets to multiply by g")
def sig_no_upstream(y, g):
    return y * (1 - y)


@wrong_("vjp_sigmoid", "sigma' = e^-x sigma^2 with e^-x = 1/y - 1: 0 times inf where y underflows to 0",
        says="the special points")
def sig_via_exp_minus_x(y, g):
    return g * (1 / y - 1) * y * y


@wrong_("vjp_sigmoid", "calls PyTorch's sigmoid_backward kernel")
def sig_kernel(y, g):
    import torch
    return torch.ops.aten.sigmoid_backward(g, y)


@wrong_("vjp_sigmoid", "recovers x with logit and asks autograd")
def sig_autograd(y, g):
    import torch
    with torch.enable_grad():
        x = torch.logit(y).detach().requires_grad_(True)
        return torch.autograd.grad(torch.sigmoid(x), x, g)[0]


@right_("vjp_sigmoid", "expanded: g * y - g * y * y")
def sig_expanded(y, g):
    return g * y - g * y * y


@wrong_("vjp_tanh", "treats the output y as the input: 1 - tanh(y)**2")
def tanh_output_as_input(y, g):
    import torch
    return g * (1 - torch.tanh(y) ** 2)


@wrong_("vjp_tanh", "forgets the square: 1 - y")
def tanh_no_square(y, g):
    return g * (1 - y)


@wrong_("vjp_tanh", "uses the sigmoid's y (1 - y)")
def tanh_sigmoid_formula(y, g):
    return g * y * (1 - y)


@wrong_("vjp_tanh", "calls PyTorch's tanh_backward kernel")
def tanh_kernel(y, g):
    import torch
    return torch.ops.aten.tanh_backward(g, y)


@wrong_("vjp_tanh", "torch.autograd.functional.vjp through atanh(y)")
def tanh_functional_vjp(y, g):
    import torch
    return torch.autograd.functional.vjp(torch.tanh, torch.atanh(y), g)[1]


@right_("vjp_tanh", "factored: g * (1 - y) * (1 + y)")
def tanh_factored(y, g):
    return g * (1 - y) * (1 + y)


# vjp_softmax(y, g, dim), vjp_log_softmax(y, g, dim) -----------------------------------------------
@wrong_("vjp_softmax", "forgets the (g . y) term: y * g")
def sm_diagonal_only(y, g, dim=-1):
    return y * g


@wrong_("vjp_softmax", "forgets the leading y: g - (g . y)")
def sm_no_leading_y(y, g, dim=-1):
    return g - (g * y).sum(dim, keepdim=True)


@wrong_("vjp_softmax", "sums along the last dim whatever dim is")
def sm_ignores_dim(y, g, dim=-1):
    return y * (g - (g * y).sum(-1, keepdim=True))


@wrong_("vjp_softmax", "(g . y) without keepdim: broadcasts along the wrong axis")
def sm_no_keepdim(y, g, dim=-1):
    return y * (g - (g * y).sum(dim))


@wrong_("vjp_softmax", "(g . y) summed over every dim")
def sm_total_sum(y, g, dim=-1):
    return y * (g - (g * y).sum())


@wrong_("vjp_softmax", "subtracts the dot product from g in place: writes into the upstream gradient",
        says="an expanded g")
def sm_in_place(y, g, dim=-1):
    return g.sub_((g * y).sum(dim, keepdim=True)).mul_(y)


@wrong_("vjp_softmax", "builds the Jacobian diag(y) - y y^T with diag_embed")
def sm_jacobian(y, g, dim=-1):
    import torch
    ym, gm = y.movedim(dim, -1), g.movedim(dim, -1)
    J = torch.diag_embed(ym) - ym[..., :, None] * ym[..., None, :]
    return (J @ gm[..., None])[..., 0].movedim(-1, dim)


@wrong_("vjp_softmax", "calls PyTorch's _softmax_backward_data kernel")
def sm_kernel(y, g, dim=-1):
    import torch
    return torch._softmax_backward_data(g, y, dim, y.dtype)


@wrong_("vjp_softmax", "recovers logits as log(y) and asks torch.func.vjp")
def sm_func_vjp(y, g, dim=-1):
    import torch
    _, pull = torch.func.vjp(lambda z: torch.softmax(z, dim), y.log())
    return pull(g)[0]


@right_("vjp_softmax", "dot product as a batched matmul along the moved dim")
def sm_matmul(y, g, dim=-1):
    ym, gm = y.movedim(dim, -1), g.movedim(dim, -1)
    dot = (gm.unsqueeze(-2) @ ym.unsqueeze(-1)).squeeze(-1)
    return (ym * gm - ym * dot).movedim(-1, dim)


@wrong_("vjp_log_softmax", "exp(y) times g, not times sum(g): g - exp(y) * g, the diagonal of the Jacobian only")
def lsm_elementwise(y, g, dim=-1):
    return g - y.exp() * g


@wrong_("vjp_log_softmax", "sum(g) over every dim, not along dim")
def lsm_total_sum(y, g, dim=-1):
    return g - y.exp() * g.sum()


@wrong_("vjp_log_softmax", "forgets the exp: g - y * sum(g)")
def lsm_no_exp(y, g, dim=-1):
    return g - y * g.sum(dim, keepdim=True)


@wrong_("vjp_log_softmax", "the softmax formula with exp(y): exp(y) * (g - (g . exp(y)))")
def lsm_softmax_formula(y, g, dim=-1):
    p = y.exp()
    return p * (g - (g * p).sum(dim, keepdim=True))


@wrong_("vjp_log_softmax", "sum(g) along the last dim whatever dim is")
def lsm_ignores_dim(y, g, dim=-1):
    return g - y.exp() * g.sum(-1, keepdim=True)


@wrong_("vjp_log_softmax", "log after softmax by the chain rule: g / p, then the softmax VJP; inf times 0 where "
                           "p = exp(y) underflows", says="do not divide by p")
def lsm_through_softmax(y, g, dim=-1):
    p = y.exp()
    u = g / p
    return p * (u - (u * p).sum(dim, keepdim=True))


@wrong_("vjp_log_softmax", "calls PyTorch's _log_softmax_backward_data kernel")
def lsm_kernel(y, g, dim=-1):
    import torch
    return torch._log_softmax_backward_data(g, y, dim, y.dtype)


@wrong_("vjp_log_softmax", "autograd's grad bound before grading (from torch.autograd import grad)")
def lsm_bound_grad(y, g, dim=-1):
    import torch
    from torch.autograd import grad
    with torch.enable_grad():
        z = y.detach().clone().requires_grad_(True)   # log_softmax(y) == y: y is its own logits
        return grad(torch.log_softmax(z, dim), z, g)[0]


@right_("vjp_log_softmax", "softmax of the log-probabilities is exp(y): g - softmax(y) * sum(g)")
def lsm_softmax_of_y(y, g, dim=-1):
    import torch
    return g - torch.softmax(y, dim) * g.sum(dim, keepdim=True)


# vjp_layernorm(x, weight, bias, g, eps) -------------------------------------------------------------
def _ln_parts(x, eps, unbiased=False):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=unbiased)
    rstd = (var + eps).rsqrt()
    return (x - mean) * rstd, rstd


@wrong_("vjp_layernorm", "gx misses the mean term (the path through mu)")
def ln_no_mean_term(x, weight, bias, g, eps=1e-5):
    n = x.shape[-1]
    xh, rstd = _ln_parts(x, eps)
    gh = g * weight
    gx = rstd * (gh - xh * (gh * xh).mean(-1, keepdim=True))
    return gx, (g * xh).reshape(-1, n).sum(0), g.reshape(-1, n).sum(0)


@wrong_("vjp_layernorm", "gx misses the x_hat term (the path through sigma)")
def ln_no_var_term(x, weight, bias, g, eps=1e-5):
    n = x.shape[-1]
    xh, rstd = _ln_parts(x, eps)
    gh = g * weight
    gx = rstd * (gh - gh.mean(-1, keepdim=True))
    return gx, (g * xh).reshape(-1, n).sum(0), g.reshape(-1, n).sum(0)


@wrong_("vjp_layernorm", "unbiased variance (divides by n - 1)")
def ln_unbiased(x, weight, bias, g, eps=1e-5):
    n = x.shape[-1]
    xh, rstd = _ln_parts(x, eps, unbiased=True)
    gh = g * weight
    gx = rstd * (gh - gh.mean(-1, keepdim=True) - xh * (gh * xh).mean(-1, keepdim=True))
    return gx, (g * xh).reshape(-1, n).sum(0), g.reshape(-1, n).sum(0)


@wrong_("vjp_layernorm", "eps outside the square root: 1 / (sigma + eps)")
def ln_eps_outside(x, weight, bias, g, eps=1e-5):
    n = x.shape[-1]
    mean = x.mean(-1, keepdim=True)
    rstd = 1 / (x.var(-1, keepdim=True, unbiased=False).sqrt() + eps)
    xh = (x - mean) * rstd
    gh = g * weight
    gx = rstd * (gh - gh.mean(-1, keepdim=True) - xh * (gh * xh).mean(-1, keepdim=True))
    return gx, (g * xh).reshape(-1, n).sum(0), g.reshape(-1, n).sum(0)


@wrong_("vjp_layernorm", "forgets the weight on the way to x: g_hat = g")
def ln_no_weight(x, weight, bias, g, eps=1e-5):
    n = x.shape[-1]
    xh, rstd = _ln_parts(x, eps)
    gx = rstd * (g - g.mean(-1, keepdim=True) - xh * (g * xh).mean(-1, keepdim=True))
    return gx, (g * xh).reshape(-1, n).sum(0), g.reshape(-1, n).sum(0)


@wrong_("vjp_layernorm", "parameter gradients summed over dim 0 only (wrong with several batch dims)")
def ln_sum_dim0(x, weight, bias, g, eps=1e-5):
    xh, rstd = _ln_parts(x, eps)
    gh = g * weight
    gx = rstd * (gh - gh.mean(-1, keepdim=True) - xh * (gh * xh).mean(-1, keepdim=True))
    return gx, (g * xh).sum(0), g.sum(0)


@wrong_("vjp_layernorm", "one-pass variance E[x^2] - E[x]^2: cancels in float32 when the mean is large",
        says="mean is about 1000 times its spread")
def ln_one_pass_variance(x, weight, bias, g, eps=1e-5):
    n = x.shape[-1]
    mean = x.mean(-1, keepdim=True)
    rstd = ((x * x).mean(-1, keepdim=True) - mean * mean + eps).rsqrt()
    x_hat = (x - mean) * rstd
    g_hat = g * weight
    gx = rstd * (g_hat - g_hat.mean(-1, keepdim=True) - x_hat * (g_hat * x_hat).mean(-1, keepdim=True))
    return gx, (g * x_hat).reshape(-1, n).sum(0), g.reshape(-1, n).sum(0)


@wrong_("vjp_layernorm", "centres x in place (x -= mean): writes into an input whose rows may share memory",
        says="an expanded x")
def ln_centres_in_place(x, weight, bias, g, eps=1e-5):
    n = x.shape[-1]
    x -= x.mean(-1, keepdim=True)
    rstd = (x.pow(2).mean(-1, keepdim=True) + eps).rsqrt()
    x_hat = x * rstd
    g_hat = g * weight
    gx = rstd * (g_hat - g_hat.mean(-1, keepdim=True) - x_hat * (g_hat * x_hat).mean(-1, keepdim=True))
    return gx, (g * x_hat).reshape(-1, n).sum(0), g.reshape(-1, n).sum(0)


@wrong_("vjp_layernorm", "builds each row's n x n Jacobian")
def ln_jacobian(x, weight, bias, g, eps=1e-5):
    import torch
    n = x.shape[-1]
    xh, rstd = _ln_parts(x, eps)
    eye = torch.eye(n, dtype=x.dtype, device=x.device)
    J = rstd[..., None] * (eye - 1 / n - xh[..., :, None] * xh[..., None, :] / n)   # (..., n, n)
    gx = ((g * weight)[..., None, :] @ J)[..., 0, :]
    return gx, (g * xh).reshape(-1, n).sum(0), g.reshape(-1, n).sum(0)


@wrong_("vjp_layernorm", "calls PyTorch's native_layer_norm_backward kernel")
def ln_kernel(x, weight, bias, g, eps=1e-5):
    import torch
    n = x.shape[-1]
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [n], weight, bias, eps)
    return torch.ops.aten.native_layer_norm_backward(g, x, [n], mean, rstd, weight, bias, [True, True, True])


@wrong_("vjp_layernorm", "torch.func.vjp of F.layer_norm")
def ln_func_vjp(x, weight, bias, g, eps=1e-5):
    import torch
    import torch.nn.functional as F
    _, pull = torch.func.vjp(lambda a, w, b: F.layer_norm(a, (a.shape[-1],), w, b, eps), x, weight, bias)
    return pull(g)


@right_("vjp_layernorm", "staged backprop through var and mean, as in the classic derivation")
def ln_staged(x, weight, bias, g, eps=1e-5):
    n = x.shape[-1]
    mu = x.mean(-1, keepdim=True)
    xc = x - mu
    var = (xc * xc).mean(-1, keepdim=True)
    std = (var + eps).sqrt()
    xhat = xc / std
    gxhat = g * weight
    gvar = (gxhat * xc).sum(-1, keepdim=True) * -0.5 * (var + eps) ** -1.5
    gmu = (-gxhat / std).sum(-1, keepdim=True) + gvar * (-2 * xc).mean(-1, keepdim=True)
    gx = gxhat / std + gvar * 2 * xc / n + gmu / n
    return gx, (g * xhat).reshape(-1, n).sum(0), g.reshape(-1, n).sum(0)


# Tensor: the tiny engine -----------------------------------------------------------------------------
class AltTensor:
    """A correct engine, written differently from the solution: grads start as None, Kahn's algorithm
    (count each node's users, release it when all have sent their share), einsum for @, a loop for
    unbroadcast, subtraction of a plain tensor not needed."""

    def __init__(self, data, _children=(), _op=""):
        self.data = data if isinstance(data, torch.Tensor) else torch.as_tensor(data, dtype=torch.get_default_dtype())
        self.grad = None
        self._prev = tuple(_children)
        self._op = _op
        self._backward = lambda: None

    def _lift(self, other):
        if isinstance(other, AltTensor):
            return other
        return type(self)(torch.as_tensor(other, dtype=self.data.dtype, device=self.data.device))

    @staticmethod
    def _reduce(g, shape):
        while g.dim() > len(shape):
            g = g.sum(0)
        for i, size in enumerate(shape):
            if size == 1 and g.shape[i] != 1:
                g = g.sum(i, keepdim=True)
        return g

    def _accumulate(self, g):
        g = self._reduce(g, self.data.shape)
        self.grad = g.clone() if self.grad is None else self.grad + g

    def _make(self, data, children, op, backward):
        out = type(self)(data, children, op)
        out._backward = lambda: backward(out.grad)
        return out

    def __add__(self, other):
        other = self._lift(other)

        def backward(g):
            self._accumulate(g)
            other._accumulate(g)
        return self._make(self.data + other.data, (self, other), "+", backward)

    def __mul__(self, other):
        other = self._lift(other)

        def backward(g):
            self._accumulate(g * other.data)
            other._accumulate(g * self.data)
        return self._make(self.data * other.data, (self, other), "*", backward)

    def __matmul__(self, other):
        other = self._lift(other)
        a, b = self.data, other.data

        def backward(g):
            self._accumulate(torch.einsum("...nm,...km->...nk", g, b.expand(*g.shape[:-2], *b.shape[-2:])))
            other._accumulate(torch.einsum("...nk,...nm->...km", a.expand(*g.shape[:-2], *a.shape[-2:]), g))
        return self._make(a @ b, (self, other), "@", backward)

    def relu(self):
        def backward(g):
            self._accumulate(torch.where(self.data > 0, g, torch.zeros_like(g)))
        return self._make(torch.relu(self.data), (self,), "relu", backward)

    def sum(self):
        def backward(g):
            self._accumulate(g * torch.ones_like(self.data))
        return self._make(self.data.sum(), (self,), "sum", backward)

    def mean(self):
        def backward(g):
            self._accumulate(g * torch.ones_like(self.data) / self.data.numel())
        return self._make(self.data.mean(), (self,), "mean", backward)

    def __radd__(self, other):
        return self._lift(other) + self

    def __rmul__(self, other):
        return self._lift(other) * self

    def __rmatmul__(self, other):
        return self._lift(other) @ self

    def _nodes(self):
        """Every node reachable from self, and how many times each is used as an input."""
        users, seen, stack = collections.Counter(), {id(self): self}, [self]
        while stack:
            node = stack.pop()
            for child in node._prev:
                users[id(child)] += 1
                if id(child) not in seen:
                    seen[id(child)] = child
                    stack.append(child)
        return seen, users

    def _order(self):
        seen, users = self._nodes()
        order, ready = [], [self]
        while ready:
            node = ready.pop()
            order.append(node)
            for child in node._prev:
                users[id(child)] -= 1
                if users[id(child)] == 0:
                    ready.append(child)
        return order

    def backward(self):
        self.grad = torch.ones_like(self.data)
        for node in self._order():
            if node.grad is not None:
                node._backward()


right_("Tensor", "Kahn's algorithm, grads start as None, einsum VJPs, loop unbroadcast")(AltTensor)


@right_("Tensor", "depth-first post-order with (node, finished) markers on one stack; grads start at zeros")
class MarkerStackTensor(AltTensor):
    def __init__(self, data, _children=(), _op=""):
        super().__init__(data, _children, _op)
        self.grad = torch.zeros_like(self.data)

    def _accumulate(self, g):
        self.grad += self._reduce(g, self.data.shape)

    def _order(self):
        post, seen, stack = [], set(), [(self, False)]
        while stack:
            node, finished = stack.pop()
            if finished:
                post.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))  # placed once every input below it is placed
            stack.extend((child, False) for child in node._prev if id(child) not in seen)
        return post[::-1]

    def backward(self):
        self.grad = torch.ones_like(self.data)
        for node in self._order():
            node._backward()


@wrong_("Tensor", "= instead of += : a tensor used twice keeps only the last contribution")
class AssigningTensor(AltTensor):
    def _accumulate(self, g):
        self.grad = self._reduce(g, self.data.shape)


@wrong_("Tensor", "+ without unbroadcast: a broadcast bias gets a gradient of the wrong shape")
class NoUnbroadcastAdd(AltTensor):
    def __add__(self, other):
        other = self._lift(other)

        def backward(g):
            for node in (self, other):
                node.grad = g.clone() if node.grad is None else node.grad + g
        return self._make(self.data + other.data, (self, other), "+", backward)


@wrong_("Tensor", "backward walks the graph breadth-first from the root: a node may pass its gradient on early")
class BreadthFirstTensor(AltTensor):
    def _order(self):
        order, seen, queue = [], {id(self)}, collections.deque([self])
        while queue:
            node = queue.popleft()
            order.append(node)
            for child in node._prev:
                if id(child) not in seen:
                    seen.add(id(child))
                    queue.append(child)
        return order


@wrong_("Tensor", "micrograd's recursive topological sort: RecursionError on deep graphs")
class RecursiveTensor(AltTensor):
    def _order(self):
        order, seen = [], set()

        def visit(node):
            if id(node) not in seen:
                seen.add(id(node))
                for child in node._prev:
                    visit(child)
                order.append(node)
        visit(self)
        return order[::-1]


@wrong_("Tensor", "mean() forgets to divide by the number of entries")
class MeanWithoutDivide(AltTensor):
    def mean(self):
        def backward(g):
            self._accumulate(g * torch.ones_like(self.data))
        return self._make(self.data.mean(), (self,), "mean", backward)


@wrong_("Tensor", "@ with a missing transpose: g @ B and A @ g")
class MatmulNoTranspose(AltTensor):
    def __matmul__(self, other):
        other = self._lift(other)
        a, b = self.data, other.data

        def backward(g):
            self._accumulate(g @ b)
            other._accumulate(a @ g)
        return self._make(a @ b, (self, other), "@", backward)


@wrong_("Tensor", "relu passes the gradient without the mask")
class UnmaskedRelu(AltTensor):
    def relu(self):
        def backward(g):
            self._accumulate(g)
        return self._make(torch.relu(self.data), (self,), "relu", backward)


@wrong_("Tensor", "* sends each input its own data instead of the other's")
class MulOwnData(AltTensor):
    def __mul__(self, other):
        other = self._lift(other)

        def backward(g):
            self._accumulate(g * self.data)
            other._accumulate(g * other.data)
        return self._make(self.data * other.data, (self, other), "*", backward)


@wrong_("Tensor", "__rmatmul__ computes self @ other: the operands swapped")
class SwappedRmatmul(AltTensor):
    def __rmatmul__(self, other):
        return self @ self._lift(other)


@wrong_("Tensor", "secretly keeps a PyTorch graph and calls torch.autograd.backward")
class SecretAutogradTensor:
    def __init__(self, data, _children=(), _op=""):
        self.data = data if isinstance(data, torch.Tensor) else torch.as_tensor(data)
        if not _children:
            self.data = self.data.detach().requires_grad_(True)
        self._leaves = [self] if not _children else [leaf for c in _children for leaf in c._leaves]
        self.grad = None

    def _lift(self, other):
        return other if isinstance(other, SecretAutogradTensor) else SecretAutogradTensor(
            torch.as_tensor(other, dtype=self.data.dtype, device=self.data.device))

    def _op(self, fn, other=None):
        with torch.enable_grad():
            if other is None:
                return SecretAutogradTensor(fn(self.data), (self,))
            other = self._lift(other)
            return SecretAutogradTensor(fn(self.data, other.data), (self, other))

    def __add__(self, other): return self._op(torch.add, other)
    def __radd__(self, other): return self._op(torch.add, other)
    def __mul__(self, other): return self._op(torch.mul, other)
    def __rmul__(self, other): return self._op(torch.mul, other)
    def __matmul__(self, other): return self._op(torch.matmul, other)
    def __rmatmul__(self, other): return self._lift(other)._op(torch.matmul, self)
    def relu(self): return self._op(torch.relu)
    def sum(self): return self._op(torch.sum)
    def mean(self): return self._op(torch.mean)

    def backward(self):
        leaves = list({id(leaf): leaf for leaf in self._leaves}.values())
        torch.autograd.backward(self.data)
        for leaf in leaves:
            leaf.grad = leaf.data.grad
