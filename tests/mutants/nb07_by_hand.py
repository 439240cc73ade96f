"""Notebook 07: the bugs learners write when they backpropagate through a whole network by hand
(embedding, BatchNorm and its running statistics, the full backward pass, the training loop), and
correct answers written differently from the solution (op by op against fused, one-hot products
against index_add_, lerp, ...)."""
import functools

from mutants import right, wrong

NB = "07_by_hand"
wrong_ = functools.partial(wrong, NB)
right_ = functools.partial(right, NB)


# batchnorm_backward(dout, x, gamma, eps=1e-5) ------------------------------------------------------
# (first entry: a plain function, pasted into a submission by the nbgrader end-to-end test)
@wrong_("batchnorm_backward", "treats the mean and the variance as constants: dx = gamma * rstd * dout")
def bn_no_statistics_terms(dout, x, gamma, eps=1e-5):
    mean = x.mean(0)
    var = ((x - mean) ** 2).mean(0)
    rstd = (var + eps) ** -0.5
    x_hat = (x - mean) * rstd
    return gamma * rstd * dout, (dout * x_hat).sum(0), dout.sum(0)


@wrong_("batchnorm_backward", "forgets the term from the mean: dx off by a constant in each channel")
def bn_no_mean_term(dout, x, gamma, eps=1e-5):
    N = x.shape[0]
    mean = x.mean(0)
    rstd = (((x - mean) ** 2).mean(0) + eps) ** -0.5
    x_hat = (x - mean) * rstd
    dbeta, dgamma = dout.sum(0), (dout * x_hat).sum(0)
    return gamma * rstd / N * (N * dout - x_hat * dgamma), dgamma, dbeta


@wrong_("batchnorm_backward", "forgets the term from the variance: dx off by a multiple of x_hat in each channel")
def bn_no_variance_term(dout, x, gamma, eps=1e-5):
    N = x.shape[0]
    mean = x.mean(0)
    rstd = (((x - mean) ** 2).mean(0) + eps) ** -0.5
    x_hat = (x - mean) * rstd
    dbeta, dgamma = dout.sum(0), (dout * x_hat).sum(0)
    return gamma * rstd / N * (N * dout - dbeta), dgamma, dbeta


@wrong_("batchnorm_backward", "normalises with the unbiased variance (torch.var's default), op by op")
def bn_unbiased_variance(dout, x, gamma, eps=1e-5):
    N = x.shape[0]
    mean = x.mean(0)
    c = x - mean
    var = x.var(0)  # unbiased: divides by N - 1
    r = (var + eps) ** -0.5
    x_hat = c * r
    dx_hat = dout * gamma
    dr = (dx_hat * c).sum(0)
    dvar = -0.5 * r ** 3 * dr
    dc = dx_hat * r + 2 / (N - 1) * c * dvar
    return dc - dc.mean(0), (dout * x_hat).sum(0), dout.sum(0)


@wrong_("batchnorm_backward", "sums dgamma and dbeta over the channels (dim 1) instead of the batch")
def bn_wrong_axis(dout, x, gamma, eps=1e-5):
    N = x.shape[0]
    mean = x.mean(0)
    rstd = (((x - mean) ** 2).mean(0) + eps) ** -0.5
    x_hat = (x - mean) * rstd
    dx = gamma * rstd / N * (N * dout - dout.sum(0) - x_hat * (dout * x_hat).sum(0))
    return dx, (dout * x_hat).sum(1), dout.sum(1)


@wrong_("batchnorm_backward", "dgamma and dbeta swapped")
def bn_swapped(dout, x, gamma, eps=1e-5):
    N = x.shape[0]
    mean = x.mean(0)
    rstd = (((x - mean) ** 2).mean(0) + eps) ** -0.5
    x_hat = (x - mean) * rstd
    dbeta, dgamma = dout.sum(0), (dout * x_hat).sum(0)
    return gamma * rstd / N * (N * dout - dbeta - x_hat * dgamma), dbeta, dgamma


@wrong_("batchnorm_backward", "eps added to the standard deviation, not to the variance")
def bn_eps_outside(dout, x, gamma, eps=1e-5):
    N = x.shape[0]
    mean = x.mean(0)
    std = ((x - mean) ** 2).mean(0).sqrt()
    rstd = 1 / (std + eps)
    x_hat = (x - mean) * rstd
    dbeta, dgamma = dout.sum(0), (dout * x_hat).sum(0)
    return gamma * rstd / N * (N * dout - dbeta - x_hat * dgamma), dgamma, dbeta


@wrong_("batchnorm_backward", "ignores the eps argument: 1e-5 written in", says="your answer uses eps = 1e-5 where "
        "the layer's eps is")
def bn_typed_eps(dout, x, gamma, eps=1e-5):
    N = x.shape[0]
    mean = x.mean(0)
    rstd = (((x - mean) ** 2).mean(0) + 1e-5) ** -0.5
    x_hat = (x - mean) * rstd
    dbeta, dgamma = dout.sum(0), (dout * x_hat).sum(0)
    return gamma * rstd / N * (N * dout - dbeta - x_hat * dgamma), dgamma, dbeta


@wrong_("batchnorm_backward", "dx without the factor gamma")
def bn_no_gamma(dout, x, gamma, eps=1e-5):
    N = x.shape[0]
    mean = x.mean(0)
    rstd = (((x - mean) ** 2).mean(0) + eps) ** -0.5
    x_hat = (x - mean) * rstd
    dbeta, dgamma = dout.sum(0), (dout * x_hat).sum(0)
    return rstd / N * (N * dout - dbeta - x_hat * dgamma), dgamma, dbeta


@wrong_("batchnorm_backward", "takes x_hat from F.batch_norm (forbidden inside the exercise)")
def bn_calls_f_batch_norm(dout, x, gamma, eps=1e-5):
    import torch.nn.functional as F
    N = x.shape[0]
    x_hat = F.batch_norm(x, None, None, training=True, eps=eps)
    rstd = (((x - x.mean(0)) ** 2).mean(0) + eps) ** -0.5
    dbeta, dgamma = dout.sum(0), (dout * x_hat).sum(0)
    return gamma * rstd / N * (N * dout - dbeta - x_hat * dgamma), dgamma, dbeta


@wrong_("batchnorm_backward", "asks autograd")
def bn_autograd(dout, x, gamma, eps=1e-5):
    import torch
    x, gamma = x.clone().requires_grad_(), gamma.clone().requires_grad_()
    beta = torch.zeros_like(gamma, requires_grad=True)
    mean = x.mean(0)
    y = gamma * (x - mean) / torch.sqrt(((x - mean) ** 2).mean(0) + eps) + beta
    return torch.autograd.grad(y, (x, gamma, beta), dout)


@wrong_("batchnorm_backward", "calls PyTorch's backward kernel aten::native_batch_norm_backward directly")
def bn_aten_kernel(dout, x, gamma, eps=1e-5):
    import torch
    mean = x.mean(0)
    invstd = (((x - mean) ** 2).mean(0) + eps) ** -0.5
    return torch.ops.aten.native_batch_norm_backward(dout, x, gamma, None, None, mean, invstd, True, eps,
                                                     [True, True, True])


@right_("batchnorm_backward", "op by op, one line per forward operation (the lines of section 4.2)")
def bn_op_by_op(dout, x, gamma, eps=1e-5):
    N = x.shape[0]
    mean = x.mean(0)
    c = x - mean
    var = (c * c).mean(0)
    r = (var + eps) ** -0.5
    x_hat = c * r
    dx_hat = dout * gamma
    dr = (dx_hat * c).sum(0)
    dvar = -0.5 * r ** 3 * dr
    dc = dx_hat * r + 2 / N * c * dvar
    dmean = -dc.sum(0)
    return dc + dmean / N, (dout * x_hat).sum(0), dout.sum(0)


@right_("batchnorm_backward", "fused with means instead of sums, torch.var_mean and rsqrt")
def bn_means(dout, x, gamma, eps=1e-5):
    import torch
    var, mean = torch.var_mean(x, 0, unbiased=False)
    rstd = torch.rsqrt(var + eps)
    x_hat = (x - mean) * rstd
    dx = gamma * rstd * (dout - dout.mean(0) - x_hat * (dout * x_hat).mean(0))
    return dx, (dout * x_hat).sum(0), dout.sum(0)


# batchnorm_steps_backward(dout, cache, gamma) -------------------------------------------------------------
def _lines(dout, cache, gamma, *, gamma_factor=True, sum_dr=True, half=True, eps_in_r=True, divide_sq=1,
           sq_path=True, mean_sign=-1, mean_path=True, divide_mean=True, typed_eps=None):
    """BatchNorm's backward line by line, with switches that turn one line into a learner's slip
    (`typed_eps`: r's derivative written with that number for eps, `(var + 1e-5) ** -1.5`)."""
    N = dout.shape[0]
    c, r, x_hat = cache["c"], cache["rstd"], cache["x_hat"]
    g = {"dbeta": dout.sum(0), "dgamma": (dout * x_hat).sum(0)}
    g["dx_hat"] = dout * gamma if gamma_factor else dout
    g["drstd"] = (g["dx_hat"] * c).sum(0) if sum_dr else g["dx_hat"] * c
    power = r ** 3 if eps_in_r else cache["var"] ** -1.5
    if typed_eps is not None:
        power = (cache["var"] + typed_eps) ** -1.5
    g["dvar"] = (-0.5 if half else -1.0) * power * g["drstd"]
    g["dsq"] = g["dvar"].expand_as(c) / (N if divide_sq == 1 else N - 1 if divide_sq == "N - 1" else 1)
    g["dc"] = g["dx_hat"] * r + (2 * c * g["dsq"] if sq_path else 0)
    g["dmean"] = mean_sign * g["dc"].sum(0)
    g["dx"] = g["dc"] + ((g["dmean"] / N if divide_mean else g["dmean"]) if mean_path else 0)
    return g


@wrong_("batchnorm_steps_backward", "dc from x_hat's path only: c is also read by sq", says="dc holds only the path "
        "through x_hat")
def st_no_sq_path(dout, cache, gamma):
    from mutants.nb07_by_hand import _lines
    return _lines(dout, cache, gamma, sq_path=False)


@wrong_("batchnorm_steps_backward", "dx = dc: the path through the mean left out", says="dx holds only the path "
        "through c")
def st_no_mean_path(dout, cache, gamma):
    from mutants.nb07_by_hand import _lines
    return _lines(dout, cache, gamma, mean_path=False)


@wrong_("batchnorm_steps_backward", "dx = dc + dmean: the mean's share not divided by N",
        says="the path through mean is N = ")
def st_mean_path_not_divided(dout, cache, gamma):
    from mutants.nb07_by_hand import _lines
    return _lines(dout, cache, gamma, divide_mean=False)


@wrong_("batchnorm_steps_backward", "dvar = -r**3 * dr: the power rule's factor 1/2 forgotten",
        says="dvar is wrong: its values differ")
def st_power_factor(dout, cache, gamma):
    from mutants.nb07_by_hand import _lines
    return _lines(dout, cache, gamma, half=False)


@wrong_("batchnorm_steps_backward", "dvar from var ** -1.5: eps left out of r's derivative",
        says="dvar leaves eps out")
def st_eps_left_out(dout, cache, gamma):
    from mutants.nb07_by_hand import _lines
    return _lines(dout, cache, gamma, eps_in_r=False)


@wrong_("batchnorm_steps_backward", "dvar = -0.5 * (var + 1e-5) ** -1.5 * drstd: eps written in as Karpathy's "
        "lecture does, not the layer's", says="your answer uses eps = 1e-5 where the layer's eps is")
def st_typed_eps(dout, cache, gamma):
    from mutants.nb07_by_hand import _lines
    return _lines(dout, cache, gamma, typed_eps=1e-5)


@wrong_("batchnorm_steps_backward", "dsq = dvar in every row: the mean's 1/N forgotten", says="times too large: a mean "
        "divides by N")
def st_dsq_not_divided(dout, cache, gamma):
    from mutants.nb07_by_hand import _lines
    return _lines(dout, cache, gamma, divide_sq=None)


@wrong_("batchnorm_steps_backward", "dsq = dvar / (N - 1): the unbiased divisor", says="the forward divides by N, "
        "not N - 1")
def st_dsq_unbiased(dout, cache, gamma):
    from mutants.nb07_by_hand import _lines
    return _lines(dout, cache, gamma, divide_sq="N - 1")


@wrong_("batchnorm_steps_backward", "dmean = +sum of dc: c = x - mean subtracts it", says="dmean is wrong")
def st_dmean_sign(dout, cache, gamma):
    from mutants.nb07_by_hand import _lines
    return _lines(dout, cache, gamma, mean_sign=1)


@wrong_("batchnorm_steps_backward", "drstd = dx_hat * c, not summed over the batch",
        says="drstd is wrong: it has shape")
def st_dr_not_summed(dout, cache, gamma):
    from mutants.nb07_by_hand import _lines
    return _lines(dout, cache, gamma, sum_dr=False)


@wrong_("batchnorm_steps_backward", "dx_hat = dout: gamma's factor forgotten", says="dx_hat lacks the factor gamma")
def st_dxhat_without_gamma(dout, cache, gamma):
    from mutants.nb07_by_hand import _lines
    return _lines(dout, cache, gamma, gamma_factor=False)


@wrong_("batchnorm_steps_backward", "asks autograd through the cache's lines, recomputed from x",
        says="called autograd")
def st_autograd(dout, cache, gamma):
    import torch
    x = cache["x"].clone().requires_grad_()
    gamma = gamma.clone().requires_grad_()
    beta = torch.zeros_like(gamma, requires_grad=True)
    mean = x.mean(0)
    c = x - mean
    sq = c ** 2
    var = sq.mean(0)
    r = (var + 1e-5) ** -0.5
    x_hat = c * r
    values = [beta, gamma, x_hat, r, var, sq, c, mean, x]
    grads = torch.autograd.grad(gamma * x_hat + beta, values, dout)
    return dict(zip(["dbeta", "dgamma", "dx_hat", "drstd", "dvar", "dsq", "dc", "dmean", "dx"], grads))


@right_("batchnorm_steps_backward", "(var + eps) ** -1.5, with eps read back from the cache: rstd ** -2 - var")
def st_eps_from_cache(dout, cache, gamma):
    N = dout.shape[0]
    c, var, rstd, x_hat = cache["c"], cache["var"], cache["rstd"], cache["x_hat"]
    eps = rstd ** -2 - var  # rstd = (var + eps) ** -0.5
    dx_hat = dout * gamma
    drstd = (dx_hat * c).sum(0)
    dvar = -0.5 * (var + eps) ** -1.5 * drstd
    dsq = (dvar / N).expand_as(c)
    dc = dx_hat * rstd + 2 * c * dsq
    dmean = -dc.sum(0)
    return {"dbeta": dout.sum(0), "dgamma": (dout * x_hat).sum(0), "dx_hat": dx_hat, "drstd": drstd, "dvar": dvar,
            "dsq": dsq, "dc": dc, "dmean": dmean, "dx": dc + dmean / N}


@right_("batchnorm_steps_backward", "with x_hat, keepdim=True columns and torch.ones_like, squeezed at the end")
def st_keepdim(dout, cache, gamma):
    import torch
    N = dout.shape[0]
    c, x_hat = cache["c"], cache["x_hat"]
    r = cache["rstd"].unsqueeze(0)                                     # (1, C)
    dx_hat = dout * gamma
    dr = (dx_hat * x_hat).sum(0, keepdim=True) / r                    # c = x_hat / r
    dvar = -0.5 * torch.pow(r, 3) * dr
    dsq = torch.ones_like(c) * dvar / N
    dc = r * dx_hat + 2 * c * dsq
    dmean = -dc.sum(0, keepdim=True)
    dx = dc + torch.ones_like(c) * dmean / N
    return {"dbeta": dout.sum(0), "dgamma": (x_hat * dout).sum(0), "dx_hat": dx_hat, "drstd": dr.squeeze(0),
            "dvar": dvar.squeeze(0), "dsq": dsq, "dc": dc, "dmean": dmean.squeeze(0), "dx": dx}


# embedding_backward(dout, idx, num_embeddings) ------------------------------------------------------
@wrong_("embedding_backward", "grad[idx] += dout: repeated indices keep one contribution")
def emb_plus_equals(dout, idx, num_embeddings):
    import torch
    grad = torch.zeros(num_embeddings, dout.shape[-1], dtype=dout.dtype, device=dout.device)
    grad[idx] += dout
    return grad


@wrong_("embedding_backward", "indexed assignment of the flattened rows: the last write wins")
def emb_assign(dout, idx, num_embeddings):
    import torch
    D = dout.shape[-1]
    grad = torch.zeros(num_embeddings, D, dtype=dout.dtype, device=dout.device)
    grad[idx.reshape(-1)] = dout.reshape(-1, D)
    return grad


@wrong_("embedding_backward", "sizes the table from the largest index instead of num_embeddings")
def emb_rows_from_max(dout, idx, num_embeddings):
    import torch
    D = dout.shape[-1]
    grad = torch.zeros(int(idx.max()) + 1, D, dtype=dout.dtype, device=dout.device)
    return grad.index_add_(0, idx.reshape(-1), dout.reshape(-1, D))


@wrong_("embedding_backward", "torch.zeros without dtype and device: a float32 table on the CPU")
def emb_default_dtype(dout, idx, num_embeddings):
    import torch
    D = dout.shape[-1]
    grad = torch.zeros(num_embeddings, D)
    return grad.index_add_(0, idx.reshape(-1).cpu(), dout.reshape(-1, D).float().cpu())


@wrong_("embedding_backward", "assumes a 2-D batch of indices (N, T)")
def emb_assumes_two_dims(dout, idx, num_embeddings):
    import torch
    N, T = idx.shape
    grad = torch.zeros(num_embeddings, dout.shape[-1], dtype=dout.dtype, device=dout.device)
    for n in range(N):
        for t in range(T):
            grad[idx[n, t]] += dout[n, t]
    return grad


@wrong_("embedding_backward", "asks autograd through F.embedding")
def emb_autograd(dout, idx, num_embeddings):
    import torch
    import torch.nn.functional as F
    table = torch.zeros(num_embeddings, dout.shape[-1], dtype=dout.dtype, device=dout.device, requires_grad=True)
    F.embedding(idx, table).backward(dout)
    return table.grad


@wrong_("embedding_backward", "calls PyTorch's kernel aten::embedding_dense_backward")
def emb_aten_kernel(dout, idx, num_embeddings):
    import torch
    D = dout.shape[-1]
    return torch.ops.aten.embedding_dense_backward(dout.reshape(-1, D), idx.reshape(-1), num_embeddings, -1, False)


@wrong_("embedding_backward", "records table[idx] and calls the node's backward by hand (grad_fn(dout))")
def emb_grad_fn_apply(dout, idx, num_embeddings):
    import torch
    table = torch.zeros(num_embeddings, dout.shape[-1], dtype=dout.dtype, device=dout.device, requires_grad=True)
    return table[idx].grad_fn(dout)


@right_("embedding_backward", "a one-hot matrix product")
def emb_one_hot(dout, idx, num_embeddings):
    import torch.nn.functional as F
    D = dout.shape[-1]
    return F.one_hot(idx.reshape(-1), num_embeddings).to(dout.dtype).T @ dout.reshape(-1, D)


@right_("embedding_backward", "index_put_ with accumulate=True")
def emb_index_put(dout, idx, num_embeddings):
    import torch
    D = dout.shape[-1]
    grad = torch.zeros(num_embeddings, D, dtype=dout.dtype, device=dout.device)
    return grad.index_put_((idx.reshape(-1),), dout.reshape(-1, D), accumulate=True)


@right_("embedding_backward", "a Python loop with += per position")
def emb_loop(dout, idx, num_embeddings):
    import torch
    D = dout.shape[-1]
    grad = torch.zeros(num_embeddings, D, dtype=dout.dtype, device=dout.device)
    for i, row in zip(idx.reshape(-1).tolist(), dout.reshape(-1, D)):
        grad[i] += row
    return grad


@right_("embedding_backward", "scatter_add_ with the indices expanded along D")
def emb_scatter_add(dout, idx, num_embeddings):
    import torch
    D = dout.shape[-1]
    grad = torch.zeros(num_embeddings, D, dtype=dout.dtype, device=dout.device)
    return grad.scatter_add_(0, idx.reshape(-1, 1).expand(-1, D), dout.reshape(-1, D))


# batchnorm_update_running(running_mean, running_var, x, momentum=0.1) ---------------------------------
@wrong_("batchnorm_update_running", "the running variance takes the biased variance")
def run_biased(running_mean, running_var, x, momentum=0.1):
    dims = [0, *range(2, x.dim())]
    return ((1 - momentum) * running_mean + momentum * x.mean(dims),
            (1 - momentum) * running_var + momentum * x.var(dims, unbiased=False))


@wrong_("batchnorm_update_running", "Keras's momentum convention: momentum is the old value's weight")
def run_momentum_swapped(running_mean, running_var, x, momentum=0.1):
    dims = [0, *range(2, x.dim())]
    return (momentum * running_mean + (1 - momentum) * x.mean(dims),
            momentum * running_var + (1 - momentum) * x.var(dims))


@wrong_("batchnorm_update_running", "updates the caller's buffers in place, as the module does")
def run_in_place(running_mean, running_var, x, momentum=0.1):
    dims = [0, *range(2, x.dim())]
    running_mean.mul_(1 - momentum).add_(momentum * x.mean(dims))
    running_var.mul_(1 - momentum).add_(momentum * x.var(dims))
    return running_mean, running_var


@wrong_("batchnorm_update_running", "(N, C, L): statistics over the batch only, one per channel and position")
def run_batch_dim_only(running_mean, running_var, x, momentum=0.1):
    return ((1 - momentum) * running_mean + momentum * x.mean(0),
            (1 - momentum) * running_var + momentum * x.var(0))


@wrong_("batchnorm_update_running", "(N, C, L): Bessel's correction with N - 1 instead of N * L - 1")
def run_wrong_divisor(running_mean, running_var, x, momentum=0.1):
    dims = [0, *range(2, x.dim())]
    N = x.shape[0]
    var = x.var(dims, unbiased=False) * N / (N - 1)
    return (1 - momentum) * running_mean + momentum * x.mean(dims), (1 - momentum) * running_var + momentum * var


@wrong_("batchnorm_update_running", "ignores the momentum argument (always 0.1)")
def run_fixed_momentum(running_mean, running_var, x, momentum=0.1):
    dims = [0, *range(2, x.dim())]
    return 0.9 * running_mean + 0.1 * x.mean(dims), 0.9 * running_var + 0.1 * x.var(dims)


@wrong_("batchnorm_update_running", "lets F.batch_norm update copies of the buffers")
def run_f_batch_norm(running_mean, running_var, x, momentum=0.1):
    import torch.nn.functional as F
    mean, var = running_mean.clone(), running_var.clone()
    F.batch_norm(x, mean, var, training=True, momentum=momentum)
    return mean, var


@right_("batchnorm_update_running", "torch.lerp, channels last and torch.var_mean")
def run_lerp(running_mean, running_var, x, momentum=0.1):
    import torch
    flat = x.transpose(0, 1).reshape(x.shape[1], -1)  # (C, N * L)
    var, mean = torch.var_mean(flat, dim=1)
    return torch.lerp(running_mean, mean, momentum), torch.lerp(running_var, var, momentum)


@right_("batchnorm_update_running", "sums written out, Bessel's correction by hand")
def run_sums(running_mean, running_var, x, momentum=0.1):
    dims = [0, *range(2, x.dim())]
    n = x.numel() // x.shape[1]
    mean = x.sum(dims) / n
    shape = [1, -1] + [1] * (x.dim() - 2)
    var = ((x - mean.view(shape)) ** 2).sum(dims) / (n - 1)
    return running_mean + momentum * (mean - running_mean), running_var + momentum * (var - running_var)


# manual_backward(params, cache, targets) -------------------------------------------------------------
def _backward(params, cache, targets, *, divide=True, one_hot=True, slope_from="a", bn_terms=True,
              accumulate=True, view_tokens=False):
    """The model's backward pass, with switches that turn one step into a learner's slip."""
    import torch
    N = targets.shape[0]
    g = {}
    dlogits = cache["logp"].exp()
    if one_hot:
        dlogits[torch.arange(N, device=targets.device), targets] -= 1
    if divide:
        dlogits = dlogits / N
    g["b2"], g["W2"] = dlogits.sum(0), cache["a"].T @ dlogits
    slope = 1 - cache[slope_from] ** 2
    dbn = dlogits @ params["W2"].T * slope
    x_hat, rstd = cache["x_hat"], cache["rstd"]
    g["beta"], g["gamma"] = dbn.sum(0), (dbn * x_hat).sum(0)
    dx_hat = dbn * params["gamma"]
    dh = rstd * (dx_hat - dx_hat.mean(0) - x_hat * (dx_hat * x_hat).mean(0)) if bn_terms else rstd * dx_hat
    g["b1"], g["W1"] = dh.sum(0), cache["x"].T @ dh
    demb = (dh @ params["W1"].T).reshape(-1, cache["emb"].shape[-1])
    g["C"] = torch.zeros_like(params["C"])
    tokens = cache["tokens"].view(-1) if view_tokens else cache["tokens"].reshape(-1)
    if accumulate:
        g["C"].index_add_(0, tokens, demb)
    else:
        g["C"][tokens] = demb
    return g


@wrong_("manual_backward", "dlogits not divided by the batch size")
def mb_not_divided(params, cache, targets):
    from mutants.nb07_by_hand import _backward
    return _backward(params, cache, targets, divide=False)


@wrong_("manual_backward", "softmax without the -1 at the target class")
def mb_no_one_hot(params, cache, targets):
    from mutants.nb07_by_hand import _backward
    return _backward(params, cache, targets, one_hot=False)


@wrong_("manual_backward", "tanh's slope from its input: 1 - bn**2")
def mb_tanh_slope_from_input(params, cache, targets):
    from mutants.nb07_by_hand import _backward
    return _backward(params, cache, targets, slope_from="bn")


@wrong_("manual_backward", "BatchNorm backward without the terms of the mean and the variance")
def mb_bn_without_statistics(params, cache, targets):
    from mutants.nb07_by_hand import _backward
    return _backward(params, cache, targets, bn_terms=False)


@wrong_("manual_backward", "embedding gradient by indexed assignment: repeated tokens keep one contribution")
def mb_embedding_assign(params, cache, targets):
    from mutants.nb07_by_hand import _backward
    return _backward(params, cache, targets, accumulate=False)


@wrong_("manual_backward", "leaves out b1, whose gradient is zero anyway")
def mb_without_b1(params, cache, targets):
    from mutants.nb07_by_hand import _backward
    grads = _backward(params, cache, targets)
    del grads["b1"]
    return grads


@wrong_("manual_backward", "asks autograd, recomputing the forward from the cache's tokens")
def mb_autograd(params, cache, targets):
    import torch

    from autograder.checks.nb07_by_hand.model import forward
    leaves = {k: v.clone().requires_grad_() for k, v in params.items()}
    loss, _ = forward(leaves, cache["tokens"], targets)
    return dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values()))))


@right_("manual_backward", "op-by-op BatchNorm recomputed from h, one-hot matrices for the loss and the table")
def mb_op_by_op(params, cache, targets):
    import torch.nn.functional as F
    N, V = cache["logits"].shape
    dlogits = (cache["logits"].softmax(-1) - F.one_hot(targets, V).to(cache["logits"].dtype)) / N
    dbn = (dlogits @ params["W2"].T) * (1 - cache["a"] ** 2)
    h = cache["h"]
    mean = h.mean(0)
    c = h - mean
    r = ((c * c).mean(0) + 1e-5) ** -0.5
    dx_hat = dbn * params["gamma"]
    dvar = -0.5 * r ** 3 * (dx_hat * c).sum(0)
    dc = dx_hat * r + 2 / N * c * dvar
    dh = dc - dc.sum(0) / N
    demb = (dh @ params["W1"].T).reshape(-1, params["C"].shape[1])
    onehot = F.one_hot(cache["tokens"].reshape(-1), params["C"].shape[0]).to(demb.dtype)
    return {"b2": dlogits.sum(0), "W2": cache["a"].T @ dlogits, "beta": dbn.sum(0),
            "gamma": (dbn * c * r).sum(0), "b1": dh.sum(0), "W1": cache["x"].T @ dh, "C": onehot.T @ demb}


# train_by_hand(params, data, steps, lr) --------------------------------------------------------------
@wrong_("train_by_hand", "climbs: p += lr * grad")
def tbh_ascends(params, data, steps, lr):
    from autograder.checks.nb07_by_hand.model import forward
    from mutants.nb07_by_hand import _backward
    losses = []
    for step in range(steps):
        tokens, targets = data[step % len(data)]
        loss, cache = forward(params, tokens, targets)
        for name, g in _backward(params, cache, targets).items():
            params[name] += lr * g
        losses.append(loss.item())
    return losses


@wrong_("train_by_hand", "every step takes the first batch")
def tbh_first_batch(params, data, steps, lr):
    from autograder.checks.nb07_by_hand.model import forward
    from mutants.nb07_by_hand import _backward
    losses = []
    for _ in range(steps):
        tokens, targets = data[0]
        loss, cache = forward(params, tokens, targets)
        for name, g in _backward(params, cache, targets).items():
            params[name] -= lr * g
        losses.append(loss.item())
    return losses


@wrong_("train_by_hand", "rebinds a loop variable: the parameters never change")
def tbh_no_update(params, data, steps, lr):
    from autograder.checks.nb07_by_hand.model import forward
    from mutants.nb07_by_hand import _backward
    losses = []
    for step in range(steps):
        tokens, targets = data[step % len(data)]
        loss, cache = forward(params, tokens, targets)
        grads = _backward(params, cache, targets)
        for name, p in params.items():
            p = p - lr * grads[name]  # the slip: rebinds the loop variable
        losses.append(loss.item())
    return losses


@wrong_("train_by_hand", "updates W2 in place before the gradient that needs the old W2 is computed")
def tbh_update_mid_backward(params, data, steps, lr):
    import torch

    from autograder.checks.nb07_by_hand.model import forward
    from mutants.nb07_by_hand import _backward
    losses = []
    for step in range(steps):
        tokens, targets = data[step % len(data)]
        loss, cache = forward(params, tokens, targets)
        N = targets.shape[0]
        dlogits = cache["logp"].exp()
        dlogits[torch.arange(N, device=targets.device), targets] -= 1
        params["W2"] -= lr * (cache["a"].T @ dlogits / N)  # too early: the rest reads W2
        for name, g in _backward(params, cache, targets).items():
            if name != "W2":
                params[name] -= lr * g
        losses.append(loss.item())
    return losses


@wrong_("train_by_hand", "returns the loss tensors, not Python floats")
def tbh_tensor_losses(params, data, steps, lr):
    from autograder.checks.nb07_by_hand.model import forward
    from mutants.nb07_by_hand import _backward
    losses = []
    for step in range(steps):
        tokens, targets = data[step % len(data)]
        loss, cache = forward(params, tokens, targets)
        for name, g in _backward(params, cache, targets).items():
            params[name] -= lr * g
        losses.append(loss)
    return losses


@wrong_("train_by_hand", "records the loss after the update (a second forward pass)")
def tbh_loss_after_update(params, data, steps, lr):
    from autograder.checks.nb07_by_hand.model import forward
    from mutants.nb07_by_hand import _backward
    losses = []
    for step in range(steps):
        tokens, targets = data[step % len(data)]
        _, cache = forward(params, tokens, targets)
        for name, g in _backward(params, cache, targets).items():
            params[name] -= lr * g
        losses.append(forward(params, tokens, targets)[0].item())
    return losses


@wrong_("train_by_hand", "trains with autograd")
def tbh_autograd(params, data, steps, lr):
    import torch

    from autograder.checks.nb07_by_hand.model import forward
    losses = []
    for step in range(steps):
        leaves = {k: v.detach().requires_grad_() for k, v in params.items()}
        loss, _ = forward(leaves, *data[step % len(data)])
        grads = torch.autograd.grad(loss, list(leaves.values()))
        for (name, p), g in zip(leaves.items(), grads):
            params[name] = (p - lr * g).detach()
        losses.append(loss.item())
    return losses


@right_("train_by_hand", "stores new tensors in the dict instead of updating in place")
def tbh_rebinds_entries(params, data, steps, lr):
    from autograder.checks.nb07_by_hand.model import forward
    from mutants.nb07_by_hand import _backward
    losses = []
    for step in range(steps):
        tokens, targets = data[step % len(data)]
        loss, cache = forward(params, tokens, targets)
        grads = _backward(params, cache, targets)
        params.update({name: params[name] - lr * grads[name] for name in grads})
        losses.append(float(loss))
    return losses


@right_("train_by_hand", "sub_ with alpha, batches taken with itertools.cycle")
def tbh_sub_alpha(params, data, steps, lr):
    import itertools

    from autograder.checks.nb07_by_hand.model import forward
    from mutants.nb07_by_hand import _backward
    losses = []
    for (tokens, targets), _ in zip(itertools.cycle(data), range(steps)):
        loss, cache = forward(params, tokens, targets)
        for name, g in _backward(params, cache, targets).items():
            params[name].sub_(g, alpha=lr)
        losses.append(loss.item())
    return losses


# --- issue 22: where right-looking code breaks ---------------------------------------------------------
@wrong_("batchnorm_backward", "one-pass variance E[x²] - E[x]²: loses every digit in float32 when the mean is large",
        says="float32 input whose mean is about 1000 times its spread")
def bn_one_pass_variance(dout, x, gamma, eps=1e-5):
    N = x.shape[0]
    mean = x.mean(0)
    var = (x * x).mean(0) - mean * mean
    r = (var + eps) ** -0.5
    x_hat = (x - mean) * r
    dbeta, dgamma = dout.sum(0), (dout * x_hat).sum(0)
    return gamma * r / N * (N * dout - dbeta - x_hat * dgamma), dgamma, dbeta


@wrong_("batchnorm_backward", "scales dout by gamma in place: writes into the caller's gradient",
        says="an expanded dout")
def bn_scales_dout_in_place(dout, x, gamma, eps=1e-5):
    mean = x.mean(0)
    r = (((x - mean) ** 2).mean(0) + eps) ** -0.5
    x_hat = (x - mean) * r
    dbeta, dgamma = dout.sum(0), (dout * x_hat).sum(0)
    dout *= gamma  # now d x_hat, in the caller's tensor
    return r * (dout - dout.mean(0) - x_hat * (dout * x_hat).mean(0)), dgamma, dbeta


@wrong_("batchnorm_backward", "dgamma and dbeta accumulated into torch.zeros(C): float32 for float64 inputs",
        says="dtype torch.float32, expected torch.float64")
def bn_float32_accumulators(dout, x, gamma, eps=1e-5):
    import torch
    N, C = x.shape
    mean = x.mean(0)
    r = (((x - mean) ** 2).mean(0) + eps) ** -0.5
    x_hat = (x - mean) * r
    dgamma, dbeta = torch.zeros(C), torch.zeros(C)
    dgamma += (dout * x_hat).sum(0)
    dbeta += dout.sum(0)
    return gamma * r / N * (N * dout - dout.sum(0) - x_hat * (dout * x_hat).sum(0)), dgamma, dbeta


@wrong_("embedding_backward", "flattens dout with .view(-1, D): fails on a strided gradient",
        says="a non-contiguous dout")
def emb_view_dout(dout, idx, num_embeddings):
    import torch
    D = dout.shape[-1]
    grad = torch.zeros(num_embeddings, D, dtype=dout.dtype, device=dout.device)
    return grad.index_add_(0, idx.reshape(-1), dout.view(-1, D))


@wrong_("embedding_backward", "flattens idx with .view(-1): fails on a strided batch of indices",
        says="a non-contiguous idx")
def emb_view_idx(dout, idx, num_embeddings):
    import torch
    D = dout.shape[-1]
    grad = torch.zeros(num_embeddings, D, dtype=dout.dtype, device=dout.device)
    return grad.index_add_(0, idx.view(-1), dout.reshape(-1, D))


@wrong_("manual_backward", "softmax as exp(logits) / sum without subtracting the max: overflows in float32",
        says="float32 logits as large as a few hundred")
def mb_softmax_without_max(params, cache, targets):
    from mutants.nb07_by_hand import _backward
    e = cache["logits"].exp()
    return _backward(params, dict(cache, logp=(e / e.sum(1, keepdim=True)).log()), targets)


@wrong_("manual_backward", "every gradient in float32 (.float()) whatever the parameters' dtype",
        says="dtype torch.float32, expected torch.float64")
def mb_float32_gradients(params, cache, targets):
    from mutants.nb07_by_hand import _backward
    return {name: g.float() for name, g in _backward(params, cache, targets).items()}


@wrong_("manual_backward", "flattens the tokens with .view(-1): fails when they are a slice of a wider tensor",
        says="a non-contiguous batch of tokens")
def mb_view_tokens(params, cache, targets):
    from mutants.nb07_by_hand import _backward
    return _backward(params, cache, targets, view_tokens=True)


@wrong_("batchnorm_steps_backward", "scales dout by gamma in place to get dx_hat: writes into the caller's gradient",
        says="an expanded dout")
def st_scales_dout_in_place(dout, cache, gamma):
    from mutants.nb07_by_hand import _lines
    dbeta, dgamma = dout.sum(0), (dout * cache["x_hat"]).sum(0)
    dout *= gamma  # now dx_hat, in the caller's tensor
    return dict(_lines(dout, cache, 1.0), dbeta=dbeta, dgamma=dgamma)


@wrong_("batchnorm_steps_backward", "every line computed in float64 (.double()) whatever the input's dtype",
        says="it has dtype torch.float64, expected torch.float32")
def st_float64_lines(dout, cache, gamma):
    from mutants.nb07_by_hand import _lines
    return _lines(dout.double(), {name: t.double() for name, t in cache.items()}, gamma.double())
