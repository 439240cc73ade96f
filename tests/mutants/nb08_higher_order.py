"""Notebook 08: the bugs learners write with double backward, hooks, torch.func and truncated BPTT;
correct answers written differently from the solution.

Every entry is checked by tests/test_mutants.py: a `wrong` one must fail some grade cell of its name
with a GradingError, a `right` one must pass all of them, in plain and in trusted grading. The first
wrong entry of `SmoothAbs` (the first graded name in sorted order) is a plain class with its imports
inside its methods: the nbgrader end-to-end test pastes its source into a submission, and it fails
both of SmoothAbs's grade cells. Other SmoothAbs entries override one method of `_SmoothAbsBase`, a
correct Function, so each shows one bug.
"""
import functools

import torch

from mutants import right, wrong

NB = "08_higher_order"
wrong_ = functools.partial(wrong, NB)
right_ = functools.partial(right, NB)


# SmoothAbs ----------------------------------------------------------------------------------------------
@wrong_("SmoothAbs", "backward returns grad_out * sign(x): the derivative of |x|, not of sqrt(x^2 + eps^2)")
class SmoothAbsSign(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, eps=1e-3):
        import torch
        ctx.save_for_backward(x)
        return torch.sqrt(x * x + eps * eps)

    @staticmethod
    def backward(ctx, grad_out):
        import torch
        (x,) = ctx.saved_tensors
        return grad_out * torch.sign(x), None


class _SmoothAbsBase(torch.autograd.Function):
    """A correct SmoothAbs; the wrong entries below override one method."""

    @staticmethod
    def forward(ctx, x, eps=1e-3):
        ctx.eps = eps
        ctx.save_for_backward(x)
        return torch.sqrt(x * x + eps * eps)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * x / torch.sqrt(x * x + ctx.eps ** 2), None


@wrong_("SmoothAbs", "backward detaches the saved x: right first derivative, no graph for the second")
class SmoothAbsDetached(_SmoothAbsBase):
    @staticmethod
    def backward(ctx, grad_out):
        x = ctx.saved_tensors[0].detach()
        return grad_out * x / torch.sqrt(x * x + ctx.eps ** 2), None


@wrong_("SmoothAbs", "backward computes under torch.no_grad()")
class SmoothAbsNoGrad(_SmoothAbsBase):
    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        with torch.no_grad():
            return grad_out * x / torch.sqrt(x * x + ctx.eps ** 2), None


@wrong_("SmoothAbs", "backward marked @once_differentiable")
class SmoothAbsOnce(_SmoothAbsBase):
    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * x / torch.sqrt(x * x + ctx.eps ** 2), None


@wrong_("SmoothAbs", "saves 1 / sqrt(x^2 + eps^2) computed in forward: a constant to backward, wrong second derivative")
class SmoothAbsSavesIntermediate(_SmoothAbsBase):
    @staticmethod
    def forward(ctx, x, eps=1e-3):
        root = torch.sqrt(x * x + eps * eps)
        ctx.save_for_backward(x, 1 / root)
        return root

    @staticmethod
    def backward(ctx, grad_out):
        x, inverse = ctx.saved_tensors
        return grad_out * x * inverse, None


@wrong_("SmoothAbs", "backward goes through NumPy")
class SmoothAbsNumpy(_SmoothAbsBase):
    @staticmethod
    def backward(ctx, grad_out):
        x = ctx.saved_tensors[0].detach().cpu().numpy()
        slope = torch.from_numpy(x / (x * x + ctx.eps ** 2) ** 0.5).to(grad_out.device, grad_out.dtype)
        return grad_out * slope, None


@wrong_("SmoothAbs", "backward edits the saved x in place (x.mul_(1.0))")
class SmoothAbsInPlace(_SmoothAbsBase):
    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        x.mul_(1.0)
        return grad_out * x / torch.sqrt(x * x + ctx.eps ** 2), None


@wrong_("SmoothAbs", "backward asks autograd for the derivative of the formula")
class SmoothAbsAsksAutograd(_SmoothAbsBase):
    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            leaf = x.detach().requires_grad_(True)
            (slope,) = torch.autograd.grad(torch.sqrt(leaf * leaf + ctx.eps ** 2), leaf, grad_out, create_graph=True)
        return slope, None


@wrong_("SmoothAbs", "forward forgets eps: sqrt(x^2), that is |x|")
class SmoothAbsNoEps(_SmoothAbsBase):
    @staticmethod
    def forward(ctx, x, eps=1e-3):
        ctx.eps = eps
        ctx.save_for_backward(x)
        return torch.sqrt(x * x)


@wrong_("SmoothAbs", "backward returns the gradient of x alone, no None for eps")
class SmoothAbsOneGradient(_SmoothAbsBase):
    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * x / torch.sqrt(x * x + ctx.eps ** 2)


@wrong_("SmoothAbs", "backward as sign(x) sqrt(1 - eps^2 / (x^2 + eps^2)): the right slope, whose derivative is "
                    "NaN at x = 0 (sqrt of 0 times the zero derivative of sign)", says="fails for the special points")
class SmoothAbsSignTimesRoot(_SmoothAbsBase):
    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * torch.sign(x) * torch.sqrt(1 - ctx.eps ** 2 / (x * x + ctx.eps ** 2)), None


@right_("SmoothAbs", "saves the output and divides by it (an output carries its history into backward)")
class SmoothAbsSavesOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, eps=1e-3):
        out = (x * x + eps * eps).sqrt()
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, out = ctx.saved_tensors
        return grad_out * x / out, None


@right_("SmoothAbs", "forward with torch.hypot, backward with rsqrt")
class SmoothAbsRsqrt(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, eps=1e-3):
        ctx.save_for_backward(x)
        ctx.eps_squared = eps ** 2
        return torch.hypot(x, torch.full_like(x, eps))

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return x.mul(grad_out).mul(torch.rsqrt(x.square() + ctx.eps_squared)), None


# hvp(f, x, v) --------------------------------------------------------------------------------------------
@wrong_("hvp", "forgets create_graph=True: the second pass has nothing to differentiate")
def hvp_no_create_graph(f, x, v):
    import torch
    x = x.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(f(x), x)
    return torch.autograd.grad(g, x, grad_outputs=v)[0]


@wrong_("hvp", "central finite differences of the gradient (h = 1e-6): approximate, and no double backward")
def hvp_finite_differences(f, x, v):
    import torch

    def gradient(t):
        t = t.detach().requires_grad_(True)
        y = f(t)
        return torch.autograd.grad(y, t, allow_unused=True)[0] if y.requires_grad else torch.zeros_like(t)

    h = 1e-6
    g_plus, g_minus = gradient(x + h * v), gradient(x - h * v)
    return torch.zeros_like(x) if g_plus is None else (g_plus - g_minus) / (2 * h)


@wrong_("hvp", "builds the Hessian row by row (n passes), then multiplies")
def hvp_full_hessian(f, x, v):
    import torch
    x = x.detach().requires_grad_(True)
    y = f(x)
    if not y.requires_grad:
        return torch.zeros_like(x)
    (g,) = torch.autograd.grad(y, x, create_graph=True)
    if not g.requires_grad:
        return torch.zeros_like(x)
    rows = []
    for i in range(g.numel()):
        (row,) = torch.autograd.grad(g.reshape(-1)[i], x, retain_graph=True, allow_unused=True)
        rows.append(torch.zeros_like(x).reshape(-1) if row is None else row.reshape(-1))
    return (torch.stack(rows) @ v.reshape(-1)).reshape(x.shape)


@wrong_("hvp", "calls torch.autograd.functional.hvp")
def hvp_functional(f, x, v):
    import torch
    return torch.autograd.functional.hvp(f, x, v)[1]


@wrong_("hvp", "calls torch.func (forward over reverse), imported under another name")
def hvp_torch_func(f, x, v):
    from torch.func import grad as gradient_of
    from torch.func import jvp as forward_mode
    return forward_mode(gradient_of(f), (x,), (v,))[1]


@wrong_("hvp", "no case for an affine f: the second torch.autograd.grad raises")
def hvp_no_affine_case(f, x, v):
    import torch
    x = x.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(f(x), x, create_graph=True)
    return torch.autograd.grad(g, x, grad_outputs=v)[0]


@wrong_("hvp", "checks g.requires_grad but forgets allow_unused: an affine f with weights that require grad raises")
def hvp_no_allow_unused(f, x, v):
    import torch
    x = x.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(f(x), x, create_graph=True)
    if not g.requires_grad:
        return torch.zeros_like(x)
    return torch.autograd.grad(g, x, grad_outputs=v)[0]


@wrong_("hvp", "returns the directional derivative g . v instead of H v")
def hvp_directional(f, x, v):
    import torch
    x = x.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(f(x), x)
    return (g * v).sum()


@wrong_("hvp", "the dot product g.view(-1) @ v.view(-1): .view raises for a strided x or v",
        says=".view needs contiguous memory")
def hvp_view_dot(f, x, v):
    import torch
    x = x.detach().requires_grad_(True)
    y = f(x)
    if not y.requires_grad:
        return torch.zeros_like(x)
    (g,) = torch.autograd.grad(y, x, create_graph=True, allow_unused=True)
    if g is None or not g.requires_grad:
        return torch.zeros_like(x)
    (hv,) = torch.autograd.grad(g.view(-1) @ v.view(-1), x, allow_unused=True)
    return torch.zeros_like(x) if hv is None else hv


@right_("hvp", "the dot product g.reshape(-1) @ v.reshape(-1), then its gradient")
def hvp_reshape_dot(f, x, v):
    import torch
    x = x.detach().requires_grad_(True)
    y = f(x)
    if not y.requires_grad:
        return torch.zeros_like(x)
    (g,) = torch.autograd.grad(y, x, create_graph=True, allow_unused=True)
    if g is None or not g.requires_grad:
        return torch.zeros_like(x)
    (hv,) = torch.autograd.grad(g.reshape(-1) @ v.reshape(-1), x, allow_unused=True)
    return torch.zeros_like(x) if hv is None else hv


@right_("hvp", "backward(v) through the gradient's graph, read from x.grad")
def hvp_backward_into_grad(f, x, v):
    import torch
    leaf = x.detach().clone().requires_grad_(True)
    out = f(leaf)
    if not out.requires_grad:
        return torch.zeros_like(x)
    (g,) = torch.autograd.grad(out, leaf, create_graph=True, allow_unused=True)
    if g is None or not g.requires_grad:
        return torch.zeros_like(x)
    leaf.grad = None
    g.backward(v)
    return torch.zeros_like(x) if leaf.grad is None else leaf.grad.detach()


@right_("hvp", "differentiates the scalar (g * v).sum(), with materialize_grads")
def hvp_dot_then_grad(f, x, v):
    import torch
    x = x.detach().requires_grad_(True)
    y = f(x)
    g = torch.autograd.grad(y, x, create_graph=True, materialize_grads=True)[0] if y.requires_grad else None
    if g is None or g.grad_fn is None:
        return torch.zeros_like(x)
    return torch.autograd.grad((g * v).sum(), x, materialize_grads=True)[0]


# gradient_penalty(critic, real, fake, alpha) ---------------------------------------------------------------
@wrong_("gradient_penalty", "forgets create_graph=True: the penalty is a constant to the critic's weights")
def gp_no_create_graph(critic, real, fake, alpha):
    import torch
    a = torch.as_tensor(alpha, dtype=real.dtype, device=real.device)
    a = a.reshape(-1, *[1] * (real.dim() - 1)) if a.dim() else a
    x_hat = (a * real + (1 - a) * fake).requires_grad_(True)
    (slope,) = torch.autograd.grad(critic(x_hat).sum(), x_hat)
    return ((slope.flatten(1).norm(dim=1) - 1) ** 2).mean()


@wrong_("gradient_penalty", "the penalty at the real examples, not at x_hat")
def gp_at_real(critic, real, fake, alpha):
    import torch
    x_hat = real.detach().clone().requires_grad_(True)
    (slope,) = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
    return ((slope.flatten(1).norm(dim=1) - 1) ** 2).mean()


@wrong_("gradient_penalty", "alpha weighs fake: x_hat = alpha fake + (1 - alpha) real")
def gp_swapped(critic, real, fake, alpha):
    import torch
    a = torch.as_tensor(alpha, dtype=real.dtype, device=real.device)
    a = a.reshape(-1, *[1] * (real.dim() - 1)) if a.dim() else a
    x_hat = (a * fake + (1 - a) * real).detach().requires_grad_(True)
    (slope,) = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
    return ((slope.flatten(1).norm(dim=1) - 1) ** 2).mean()


@wrong_("gradient_penalty", "one norm over the whole batch instead of one per example")
def gp_batch_norm(critic, real, fake, alpha):
    import torch
    a = torch.as_tensor(alpha, dtype=real.dtype, device=real.device)
    a = a.reshape(-1, *[1] * (real.dim() - 1)) if a.dim() else a
    x_hat = (a * real + (1 - a) * fake).detach().requires_grad_(True)
    (slope,) = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
    return (slope.norm() - 1) ** 2


@wrong_("gradient_penalty", "the squared norm instead of the norm")
def gp_squared_norm(critic, real, fake, alpha):
    import torch
    a = torch.as_tensor(alpha, dtype=real.dtype, device=real.device)
    a = a.reshape(-1, *[1] * (real.dim() - 1)) if a.dim() else a
    x_hat = (a * real + (1 - a) * fake).detach().requires_grad_(True)
    (slope,) = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
    return ((slope.flatten(1).pow(2).sum(1) - 1) ** 2).mean()


@wrong_("gradient_penalty", "backward(create_graph=True) to reach x_hat.grad: fills the critic's .grad too")
def gp_backward_into_grad(critic, real, fake, alpha):
    import torch
    a = torch.as_tensor(alpha, dtype=real.dtype, device=real.device)
    a = a.reshape(-1, *[1] * (real.dim() - 1)) if a.dim() else a
    x_hat = (a * real + (1 - a) * fake).detach().requires_grad_(True)
    critic(x_hat).sum().backward(create_graph=True)
    return ((x_hat.grad.flatten(1).norm(dim=1) - 1) ** 2).mean()


@wrong_("gradient_penalty", "alpha.view(-1, 1): right for (N, D) inputs only")
def gp_rank_two_alpha(critic, real, fake, alpha):
    import torch
    a = torch.as_tensor(alpha, dtype=real.dtype, device=real.device)
    a = a.reshape(-1, 1) if a.dim() else a
    x_hat = (a * real + (1 - a) * fake).detach().requires_grad_(True)
    (slope,) = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
    return ((slope.flatten(1).norm(dim=1) - 1) ** 2).mean()


@wrong_("gradient_penalty", "sums the examples' penalties instead of averaging them")
def gp_sum(critic, real, fake, alpha):
    import torch
    a = torch.as_tensor(alpha, dtype=real.dtype, device=real.device)
    a = a.reshape(-1, *[1] * (real.dim() - 1)) if a.dim() else a
    x_hat = (a * real + (1 - a) * fake).detach().requires_grad_(True)
    (slope,) = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
    return ((slope.flatten(1).norm(dim=1) - 1) ** 2).sum()


@wrong_("gradient_penalty", "scores squeezed to (N,), grad_outputs=torch.ones(N): a batch of one squeezes to a "
                            "scalar and the shapes no longer match", says="fails for a batch of one")
def gp_squeezed_scores(critic, real, fake, alpha):
    import torch
    a = torch.as_tensor(alpha, dtype=real.dtype, device=real.device)
    a = a.reshape(-1, *[1] * (real.dim() - 1)) if a.dim() else a
    x_hat = (a * real + (1 - a) * fake).detach().requires_grad_(True)
    scores = critic(x_hat).squeeze()
    ones = torch.ones(len(real), dtype=real.dtype, device=real.device)
    (slope,) = torch.autograd.grad(scores, x_hat, grad_outputs=ones, create_graph=True)
    return ((slope.flatten(1).norm(dim=1) - 1) ** 2).mean()


@wrong_("gradient_penalty", "slope.norm(dim=1) without flattening: one example's norm only for inputs of shape (N, D)",
        says="norm over dimension 1 only")
def gp_norm_over_dimension_one(critic, real, fake, alpha):
    import torch
    a = torch.as_tensor(alpha, dtype=real.dtype, device=real.device)
    a = a.reshape(-1, *[1] * (real.dim() - 1)) if a.dim() else a
    x_hat = (a * real + (1 - a) * fake).detach().requires_grad_(True)
    (slope,) = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
    return ((slope.norm(dim=1) - 1) ** 2).mean()


@wrong_("gradient_penalty", "imports the course's answer key instead of writing it")
def gp_imports_the_key(critic, real, fake, alpha):
    from autograder.grader.keys import answer_key
    return answer_key("08_higher_order").gradient_penalty(critic, real, fake, alpha)


@right_("gradient_penalty", "grad_outputs of ones and torch.linalg.vector_norm over the non-batch dimensions")
def gp_vector_norm(critic, real, fake, alpha):
    import torch
    if isinstance(alpha, torch.Tensor) and alpha.dim():
        alpha = alpha.view(alpha.shape[0], *([1] * (real.dim() - 1)))
    x_hat = torch.lerp(fake, real, alpha).detach().requires_grad_(True)
    scores = critic(x_hat)
    (slope,) = torch.autograd.grad(scores, x_hat, grad_outputs=torch.ones_like(scores), create_graph=True)
    norms = torch.linalg.vector_norm(slope, dim=tuple(range(1, slope.dim())))
    return torch.mean((norms - 1) ** 2)


@right_("gradient_penalty", "scores squeezed along their last dimension only, grad_outputs=torch.ones(N)")
def gp_squeeze_last(critic, real, fake, alpha):
    import torch
    a = torch.as_tensor(alpha, dtype=real.dtype, device=real.device)
    a = a.reshape(-1, *[1] * (real.dim() - 1)) if a.dim() else a
    x_hat = (a * real + (1 - a) * fake).detach().requires_grad_(True)
    scores = critic(x_hat).squeeze(-1)
    ones = torch.ones(len(real), dtype=real.dtype, device=real.device)
    (slope,) = torch.autograd.grad(scores, x_hat, grad_outputs=ones, create_graph=True)
    return ((slope.reshape(len(real), -1).norm(dim=1) - 1) ** 2).mean()


@right_("gradient_penalty", "torch.func: vmap over the examples of grad of one example's score")
def gp_torch_func(critic, real, fake, alpha):
    import torch
    from torch.func import grad, vmap
    a = torch.as_tensor(alpha, dtype=real.dtype, device=real.device)
    a = a.reshape(-1, *[1] * (real.dim() - 1)) if a.dim() else a
    x_hat = (a * real + (1 - a) * fake).detach()
    slope = vmap(grad(lambda x_i: critic(x_i.unsqueeze(0)).squeeze()))(x_hat)
    return ((slope.flatten(1).norm(dim=1) - 1) ** 2).mean()


# per_sample_grads(model, loss_fn, x, y) ------------------------------------------------------------------
@wrong_("per_sample_grads", "the batch's mean gradient, repeated for every example")
def psg_batch_mean(model, loss_fn, x, y):
    import torch
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss_fn(model(x), y), [p for _, p in named])
    return {n: g.unsqueeze(0).expand(len(x), *g.shape).clone() for (n, _), g in zip(named, grads)}


@wrong_("per_sample_grads", "a Python loop of single-example gradients (right values, not vectorised)")
def psg_loop(model, loss_fn, x, y):
    import torch
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    rows = [torch.autograd.grad(loss_fn(model(x[i:i + 1]), y[i:i + 1]), [p for _, p in named]) for i in range(len(x))]
    return {n: torch.stack([row[j] for row in rows]) for j, (n, _) in enumerate(named)}


@wrong_("per_sample_grads", "includes the frozen parameters")
def psg_with_frozen(model, loss_fn, x, y):
    from torch.func import functional_call, grad, vmap
    params = {n: p.detach() for n, p in model.named_parameters()}

    def loss_of_one(p, x_i, y_i):
        return loss_fn(functional_call(model, p, (x_i.unsqueeze(0),)), y_i.unsqueeze(0))

    return vmap(grad(loss_of_one), in_dims=(None, 0, 0))(params, x, y)


@wrong_("per_sample_grads", "forgets the batch dimension of one: model(x_i) (breaks a Flatten)")
def psg_no_unsqueeze(model, loss_fn, x, y):
    from torch.func import functional_call, grad, vmap
    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}

    def loss_of_one(p, x_i, y_i):
        return loss_fn(functional_call(model, p, (x_i,)), y_i)

    return vmap(grad(loss_of_one), in_dims=(None, 0, 0))(params, x, y)


@wrong_("per_sample_grads", "divides each example's gradient by N, as if it were averaged")
def psg_divided(model, loss_fn, x, y):
    from torch.func import functional_call, grad, vmap
    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}

    def loss_of_one(p, x_i, y_i):
        return loss_fn(functional_call(model, p, (x_i.unsqueeze(0),)), y_i.unsqueeze(0)) / len(x)

    return vmap(grad(loss_of_one), in_dims=(None, 0, 0))(params, x, y)


@right_("per_sample_grads", "vmap in chunks of two examples, parameters and buffers passed explicitly")
def psg_chunked(model, loss_fn, x, y):
    import torch
    from torch.func import functional_call, grad, vmap
    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    buffers = {n: b for n, b in model.named_buffers()}
    frozen = {n: p.detach() for n, p in model.named_parameters() if not p.requires_grad}

    def loss_of_one(p, x_i, y_i):
        out = functional_call(model, {**p, **frozen, **buffers}, (x_i[None],))
        return loss_fn(out, y_i[None])

    per_example = vmap(grad(loss_of_one), in_dims=(None, 0, 0), chunk_size=2)(params, x, y)
    return {n: torch.as_tensor(g) for n, g in per_example.items()}


# attach_step_in_backward(model, lr) ------------------------------------------------------------------
@wrong_("attach_step_in_backward", "the hook steps but leaves .grad")
def asib_keeps_grad(model, lr):
    import torch

    def step(p):
        with torch.no_grad():
            p -= lr * p.grad

    return [p.register_post_accumulate_grad_hook(step) for p in model.parameters() if p.requires_grad]


@wrong_("attach_step_in_backward", "a tensor hook (register_hook) steps with the incoming gradient: .grad still fills")
def asib_tensor_hook(model, lr):
    import torch
    handles = []
    for p in model.parameters():
        if p.requires_grad:
            def step(grad, p=p):
                with torch.no_grad():
                    p -= lr * grad
                return grad
            handles.append(p.register_hook(step))
    return handles


@wrong_("attach_step_in_backward", "the hook uses the loop variable p: every hook steps the last parameter")
def asib_late_binding(model, lr):
    import torch
    handles = []
    for p in model.parameters():
        if not p.requires_grad:
            continue

        def step(_param):
            with torch.no_grad():
                p.sub_(lr * p.grad)  # noqa: B023 - the bug: p is the loop's last parameter when this runs
            p.grad = None  # noqa: B023

        handles.append(p.register_post_accumulate_grad_hook(step))
    return handles


@wrong_("attach_step_in_backward", "registers a hook on frozen parameters too: registering raises")
def asib_frozen_too(model, lr):
    import torch

    def step(p):
        with torch.no_grad():
            p -= lr * p.grad
        p.grad = None

    return [p.register_post_accumulate_grad_hook(step) for p in model.parameters()]


@wrong_("attach_step_in_backward", "steps the wrong way: p += lr * grad")
def asib_ascent(model, lr):
    import torch

    def step(p):
        with torch.no_grad():
            p += lr * p.grad
        p.grad = None

    return [p.register_post_accumulate_grad_hook(step) for p in model.parameters() if p.requires_grad]


@wrong_("attach_step_in_backward", "forgets to return the handles")
def asib_no_handles(model, lr):
    import torch

    def step(p):
        with torch.no_grad():
            p -= lr * p.grad
        p.grad = None

    for p in model.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(step)


@wrong_("attach_step_in_backward", "zeroes .grad instead of freeing it")
def asib_zeroes(model, lr):
    import torch

    def step(p):
        with torch.no_grad():
            p -= lr * p.grad
        p.grad.zero_()

    return [p.register_post_accumulate_grad_hook(step) for p in model.parameters() if p.requires_grad]


@wrong_("attach_step_in_backward", "the step without torch.no_grad(): fine in a plain backward, refused when "
                                   "backward(create_graph=True) runs the hooks with grad mode on",
        says="fails for backward(create_graph=True)")
def asib_no_no_grad(model, lr):
    def step(p):
        p.sub_(lr * p.grad)
        p.grad = None

    return [p.register_post_accumulate_grad_hook(step) for p in model.parameters() if p.requires_grad]


@right_("attach_step_in_backward", "one torch.optim.SGD per parameter, zero_grad(set_to_none=True) in the hook")
def asib_optimizer_per_parameter(model, lr):
    import torch
    handles = []
    for p in model.parameters():
        if p.requires_grad:
            optimizer = torch.optim.SGD([p], lr=lr)

            def step(_param, optimizer=optimizer):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

            handles.append(p.register_post_accumulate_grad_hook(step))
    return handles


@right_("attach_step_in_backward", "p.data.add_ through functools.partial")
def asib_partial(model, lr):
    import functools

    def step(rate, p):
        p.data.add_(p.grad, alpha=-rate)
        p.grad = None

    return [p.register_post_accumulate_grad_hook(functools.partial(step, lr))
            for p in model.parameters() if p.requires_grad]


# tbptt_backward(cell, xs, targets, h0, k, loss_fn) ---------------------------------------------------------
@wrong_("tbptt_backward", "never detaches h: the second segment's backward runs into the freed first graph")
def tb_never_detached(cell, xs, targets, h0, k, loss_fn):
    h, total = h0, 0.0
    for start in range(0, len(xs), k):
        loss = 0
        for t in range(start, min(start + k, len(xs))):
            h = cell(xs[t], h)
            loss = loss + loss_fn(h, targets[t])
        loss.backward()
        total += loss.item()
    return total


@wrong_("tbptt_backward", "detaches h after every step, not every k steps")
def tb_detached_every_step(cell, xs, targets, h0, k, loss_fn):
    h, total = h0, 0.0
    for start in range(0, len(xs), k):
        loss = 0
        for t in range(start, min(start + k, len(xs))):
            h = cell(xs[t], h)
            loss = loss + loss_fn(h, targets[t])
            h = h.detach()
        loss.backward()
        total += loss.item()
    return total


@wrong_("tbptt_backward", "detaches every k steps but calls backward() once, at the end")
def tb_backward_at_the_end(cell, xs, targets, h0, k, loss_fn):
    h, loss = h0, 0
    for t in range(len(xs)):
        if t and t % k == 0:
            h = h.detach()
        h = cell(xs[t], h)
        loss = loss + loss_fn(h, targets[t])
    loss.backward()
    return loss.item()


@wrong_("tbptt_backward", "never detaches, keeping every graph with retain_graph=True")
def tb_retain_graph(cell, xs, targets, h0, k, loss_fn):
    h, total = h0, 0.0
    for start in range(0, len(xs), k):
        loss = 0
        for t in range(start, min(start + k, len(xs))):
            h = cell(xs[t], h)
            loss = loss + loss_fn(h, targets[t])
        loss.backward(retain_graph=True)
        total += loss.item()
    return total


@wrong_("tbptt_backward", "returns the last segment's loss, not the total")
def tb_last_loss(cell, xs, targets, h0, k, loss_fn):
    h, loss = h0, 0
    for start in range(0, len(xs), k):
        loss = 0
        for t in range(start, min(start + k, len(xs))):
            h = cell(xs[t], h)
            loss = loss + loss_fn(h, targets[t])
        loss.backward()
        h = h.detach()
    return loss.item()


@wrong_("tbptt_backward", "returns the total as a tensor")
def tb_tensor_total(cell, xs, targets, h0, k, loss_fn):
    import torch
    h, total = h0, torch.zeros(())
    for start in range(0, len(xs), k):
        loss = 0
        for t in range(start, min(start + k, len(xs))):
            h = cell(xs[t], h)
            loss = loss + loss_fn(h, targets[t])
        loss.backward()
        total = total + loss.detach().cpu()
        h = h.detach()
    return total


@wrong_("tbptt_backward", "zeroes the cell's gradients first (zeroing is the caller's)")
def tb_zero_grad(cell, xs, targets, h0, k, loss_fn):
    cell.zero_grad()
    h, total = h0, 0.0
    for start in range(0, len(xs), k):
        loss = 0
        for t in range(start, min(start + k, len(xs))):
            h = cell(xs[t], h)
            loss = loss + loss_fn(h, targets[t])
        loss.backward()
        total += loss.item()
        h = h.detach()
    return total


@wrong_("tbptt_backward", "drops a last segment shorter than k")
def tb_drops_tail(cell, xs, targets, h0, k, loss_fn):
    h, total = h0, 0.0
    for start in range(0, len(xs) - k + 1, k):
        loss = 0
        for t in range(start, start + k):
            h = cell(xs[t], h)
            loss = loss + loss_fn(h, targets[t])
        loss.backward()
        total += loss.item()
        h = h.detach()
    return total


@wrong_("tbptt_backward", "detaches h0 too: no gradient reaches it")
def tb_detaches_h0(cell, xs, targets, h0, k, loss_fn):
    h, total = h0.detach(), 0.0
    for start in range(0, len(xs), k):
        loss = 0
        for t in range(start, min(start + k, len(xs))):
            h = cell(xs[t], h)
            loss = loss + loss_fn(h, targets[t])
        loss.backward()
        total += loss.item()
        h = h.detach()
    return total


@wrong_("tbptt_backward", "imports the course's answer key instead of writing it")
def tb_imports_the_key(cell, xs, targets, h0, k, loss_fn):
    from autograder.grader.keys import answer_key
    return answer_key("08_higher_order").tbptt_backward(cell, xs, targets, h0, k, loss_fn)


@right_("tbptt_backward", "torch.autograd.backward on the list of a segment's step losses")
def tb_autograd_backward(cell, xs, targets, h0, k, loss_fn):
    import torch
    h, total, segment = h0, 0.0, []
    for t in range(len(xs)):
        h = cell(xs[t], h)
        segment.append(loss_fn(h, targets[t]))
        if len(segment) == k or t == len(xs) - 1:
            torch.autograd.backward(segment)
            total += sum(loss.item() for loss in segment)
            segment, h = [], h.detach()
    return total


@right_("tbptt_backward", "detaches at the start of each segment but the first, over zip(xs, targets)")
def tb_detach_at_start(cell, xs, targets, h0, k, loss_fn):
    h, total, loss = h0, 0.0, None
    for t, (x_t, target) in enumerate(zip(xs, targets)):
        if t % k == 0 and t:
            loss.backward()
            total += float(loss)
            h, loss = h.detach(), None
        h = cell(x_t, h)
        loss = loss_fn(h, target) if loss is None else loss + loss_fn(h, target)
    loss.backward()
    return total + float(loss)
