"""Notebook 01: the bugs learners write in hand-derived gradients, and other correct answers."""
import functools

from mutants import right, wrong

NB = "01_chain_rule"
wrong_ = functools.partial(wrong, NB)
right_ = functools.partial(right, NB)


# numerical_grad(f, x, eps=1e-6) ---------------------------------------------------------------
@wrong_("numerical_grad", "forward differences: O(eps) error instead of O(eps^2)")
def ng_forward(f, x, eps=1e-6):
    import torch
    grad = torch.zeros_like(x)
    base = f(x)
    for i in range(x.numel()):
        step = torch.zeros_like(x).view(-1)
        step[i] = eps
        grad.view(-1)[i] = (f(x + step.view_as(x)) - base) / eps
    return grad


@wrong_("numerical_grad", "divides by eps instead of 2*eps")
def ng_half_step(f, x, eps=1e-6):
    import torch
    grad = torch.zeros_like(x)
    for i in range(x.numel()):
        step = torch.zeros_like(x).view(-1)
        step[i] = eps
        step = step.view_as(x)
        grad.view(-1)[i] = (f(x + step) - f(x - step)) / eps
    return grad


@wrong_("numerical_grad", "finite differences in float32, cast back to float64")
def ng_float32(f, x, eps=1e-6):
    import torch
    x32 = x.float()
    grad = torch.zeros_like(x32)
    for i in range(x32.numel()):
        step = torch.zeros_like(x32).view(-1)
        step[i] = eps
        step = step.view_as(x32)
        grad.view(-1)[i] = (f(x32 + step) - f(x32 - step)) / (2 * eps)
    return grad.double()


@wrong_("numerical_grad", "indexes x[i], which is a whole row when x is not 1-D")
def ng_first_axis_only(f, x, eps=1e-6):
    import torch
    grad = torch.zeros_like(x)
    for i in range(len(x)):
        step = torch.zeros_like(x)
        step[i] = eps
        grad[i] = (f(x + step) - f(x - step)) / (2 * eps)
    return grad


@wrong_("numerical_grad", "perturbs x in place and never puts it back")
def ng_mutates(f, x, eps=1e-6):
    import torch
    grad = torch.zeros_like(x)
    flat = x.view(-1)
    for i in range(flat.numel()):
        flat[i] += eps
        up = f(x)
        flat[i] -= 2 * eps
        down = f(x)
        grad.view(-1)[i] = (up - down) / (2 * eps)
    return grad


@wrong_("numerical_grad", "asks autograd instead of taking differences")
def ng_autograd(f, x, eps=1e-6):
    import torch
    x = x.detach().clone().requires_grad_(True)
    return torch.autograd.grad(f(x), x)[0].detach()


@right_("numerical_grad", "one perturbed copy per element, built with torch.stack")
def ng_stacked(f, x, eps=1e-6):
    import torch
    flat = x.reshape(-1)
    values = []
    for i in range(flat.numel()):
        up, down = flat.clone(), flat.clone()
        up[i] += eps
        down[i] -= eps
        values.append((f(up.view_as(x)) - f(down.view_as(x))) / (2 * eps))
    return torch.stack(values).reshape(x.shape).to(x.dtype)


# two_layer_backward(x, W1, W2) -----------------------------------------------------------------
@wrong_("two_layer_backward", "forgets the sigmoid's derivative")
def tlb_no_sigma_prime(x, W1, W2):
    import torch
    h = torch.sigmoid(W1 @ x)
    y = W2 @ h
    g_a = 2 * y * W2.reshape(-1)
    return W1.T @ g_a, torch.outer(g_a, x), torch.outer(2 * y, h)


@wrong_("two_layer_backward", "forgets the 2 from the square")
def tlb_no_two(x, W1, W2):
    import torch
    a = W1 @ x
    h = torch.sigmoid(a)
    y = W2 @ h
    g_a = y * W2.reshape(-1) * h * (1 - h)
    return W1.T @ g_a, torch.outer(g_a, x), torch.outer(y, h)


@wrong_("two_layer_backward", "returns dL/dW1 transposed, shape (1, 2)")
def tlb_transposed(x, W1, W2):
    import torch
    a = W1 @ x
    h = torch.sigmoid(a)
    y = W2 @ h
    g_a = 2 * y * W2.reshape(-1) * h * (1 - h)
    return W1.T @ g_a, torch.outer(x, g_a), torch.outer(2 * y, h)


@wrong_("two_layer_backward", "uses sigma'(a) = sigma(a) instead of sigma(a)(1 - sigma(a))")
def tlb_wrong_sigma_prime(x, W1, W2):
    import torch
    a = W1 @ x
    h = torch.sigmoid(a)
    y = W2 @ h
    g_a = 2 * y * W2.reshape(-1) * h
    return W1.T @ g_a, torch.outer(g_a, x), torch.outer(2 * y, h)


@wrong_("two_layer_backward", "lets autograd do it")
def tlb_autograd(x, W1, W2):
    import torch
    leaves = [t.detach().clone().requires_grad_(True) for t in (x, W1, W2)]
    loss = ((leaves[2] @ torch.sigmoid(leaves[1] @ leaves[0])) ** 2).sum()
    return tuple(g.detach() for g in torch.autograd.grad(loss, leaves))


@right_("two_layer_backward", "scalar by scalar, with explicit loops")
def tlb_loops(x, W1, W2):
    import math

    import torch
    a = [W1[i, 0].item() * x[0].item() for i in range(2)]
    h = [1 / (1 + math.exp(-v)) for v in a]
    y = sum(W2[0, i].item() * h[i] for i in range(2))
    g_a = [2 * y * W2[0, i].item() * h[i] * (1 - h[i]) for i in range(2)]
    gx = torch.tensor([sum(g_a[i] * W1[i, 0].item() for i in range(2))], dtype=x.dtype, device=x.device)
    gW1 = torch.tensor([[g_a[i] * x[0].item()] for i in range(2)], dtype=x.dtype, device=x.device)
    gW2 = torch.tensor([[2 * y * h[i] for i in range(2)]], dtype=x.dtype, device=x.device)
    return gx, gW1, gW2


# linear_mse_grad(W, x, y) ----------------------------------------------------------------------
@wrong_("linear_mse_grad", "forgets the factor 2")
def lmg_no_two(W, x, y):
    import torch
    return torch.outer(W @ x - y, x)


@wrong_("linear_mse_grad", "mean over outputs instead of the sum")
def lmg_mean(W, x, y):
    import torch
    return 2 * torch.outer(W @ x - y, x) / W.shape[0]


@wrong_("linear_mse_grad", "outer product in the wrong order, transposed back to fit")
def lmg_transposed(W, x, y):
    import torch
    return (2 * torch.outer(x, W @ x - y)).reshape(W.shape)


@wrong_("linear_mse_grad", "sign error: residual y - Wx")
def lmg_sign(W, x, y):
    import torch
    return 2 * torch.outer(y - W @ x, x)


@right_("linear_mse_grad", "broadcasting instead of torch.outer")
def lmg_broadcast(W, x, y):
    return 2 * (W @ x - y)[:, None] * x[None, :]


# sigmoid_grad(x), relu_grad(x) -----------------------------------------------------------------
@wrong_("sigmoid_grad", "returns sigmoid(x) itself")
def sg_value(x):
    import torch
    return torch.sigmoid(x)


@wrong_("sigmoid_grad", "applies y(1 - y) to the input instead of the output")
def sg_from_input(x):
    return x * (1 - x)


@wrong_("sigmoid_grad", "sign slip: y(1 + y)")
def sg_plus(x):
    import torch
    s = torch.sigmoid(x)
    return s * (1 + s)


@wrong_("sigmoid_grad", "asks autograd")
def sg_autograd(x):
    import torch
    x = x.detach().clone().requires_grad_(True)
    return torch.autograd.grad(torch.sigmoid(x).sum(), x)[0]


@wrong_("sigmoid_grad", "e = exp(-x); e / (1 + e)**2: NaN (inf / inf) for float32 x <= -89")
def sg_from_exp(x):
    import torch
    e = torch.exp(-x)
    return e / (1 + e) ** 2


@right_("sigmoid_grad", "sigma(x) * sigma(-x), the same product written symmetrically")
def sg_symmetric(x):
    import torch
    return torch.sigmoid(x) * torch.sigmoid(-x)


@wrong_("relu_grad", "x >= 0: gradient 1 at exactly zero")
def rg_ge(x):
    return (x >= 0).to(x.dtype)


@wrong_("relu_grad", "returns the boolean mask, not numbers")
def rg_bool(x):
    return x > 0


@wrong_("relu_grad", "torch.where with Python floats: float32 whatever the input")
def rg_where_float(x):
    import torch
    return torch.where(x > 0, 1.0, 0.0).to(x.device)


@wrong_("relu_grad", "returns relu(x) instead of its derivative")
def rg_value(x):
    return x.clamp(min=0)


@right_("relu_grad", "torch.heaviside with 0 at 0")
def rg_heaviside(x):
    import torch
    return torch.heaviside(x, torch.zeros_like(x))


# softmax_jacobian(z) ---------------------------------------------------------------------------
@wrong_("softmax_jacobian", "only the diagonal diag(y)")
def sj_diag(z):
    import torch
    return torch.diag(torch.softmax(z, 0))


@wrong_("softmax_jacobian", "forgets the diagonal: -y y^T")
def sj_outer(z):
    import torch
    y = torch.softmax(z, 0)
    return -torch.outer(y, y)


@wrong_("softmax_jacobian", "y y^T - diag(y): the sign flipped")
def sj_sign(z):
    import torch
    y = torch.softmax(z, 0)
    return torch.outer(y, y) - torch.diag(y)


@wrong_("softmax_jacobian", "y^T y (a number) instead of the outer product")
def sj_inner(z):
    import torch
    y = torch.softmax(z, 0)
    return torch.diag(y) - y @ y


@right_("softmax_jacobian", "element by element: y_i (delta_ij - y_j)")
def sj_loops(z):
    import torch
    y = torch.softmax(z, 0)
    n = y.numel()
    J = torch.empty(n, n, dtype=z.dtype, device=z.device)
    for i in range(n):
        for j in range(n):
            J[i, j] = y[i] * ((1.0 if i == j else 0.0) - y[j])
    return J


# softmax_xent_grad(z, t) -----------------------------------------------------------------------
@wrong_("softmax_xent_grad", "sum over the batch instead of the mean")
def sxg_sum(z, t):
    import torch
    import torch.nn.functional as F
    return torch.softmax(z, 1) - F.one_hot(t, z.shape[1]).to(z.dtype)


@wrong_("softmax_xent_grad", "forgets to subtract the one-hot target")
def sxg_no_target(z, t):
    import torch
    return torch.softmax(z, 1) / z.shape[0]


@wrong_("softmax_xent_grad", "t - y: the sign flipped")
def sxg_sign(z, t):
    import torch
    import torch.nn.functional as F
    return (F.one_hot(t, z.shape[1]).to(z.dtype) - torch.softmax(z, 1)) / z.shape[0]


@wrong_("softmax_xent_grad", "softmax over the batch axis")
def sxg_wrong_axis(z, t):
    import torch
    import torch.nn.functional as F
    return (torch.softmax(z, 0) - F.one_hot(t, z.shape[1]).to(z.dtype)) / z.shape[0]


@right_("softmax_xent_grad", "scatter_ to subtract 1 at each target")
def sxg_scatter(z, t):
    import torch
    g = torch.softmax(z, dim=-1)
    g = g.scatter_add(1, t[:, None], -torch.ones_like(g[:, :1]))
    return g / len(z)


# Answers that ask autograd through other doors than torch.autograd.grad ------------------------
@wrong_("relu_grad", "Tensor.backward on a copy")
def rg_backward(x):
    x = x.detach().clone().requires_grad_(True)
    x.relu().sum().backward()
    return x.grad


@wrong_("softmax_jacobian", "torch.func.jacrev")
def sj_jacrev(z):
    import torch
    return torch.func.jacrev(lambda v: torch.softmax(v, 0))(z)


@wrong_("softmax_xent_grad", "autograd.grad bound before grading, under enable_grad")
def sxg_bound_grad(z, t):
    import torch
    import torch.nn.functional as F
    from torch.autograd import grad
    with torch.enable_grad():
        leaf = z.detach().clone().requires_grad_(True)
        return grad(F.cross_entropy(leaf, t), leaf)[0]
