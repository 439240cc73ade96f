"""Notebook 10: the bugs learners write in attention's backward by hand and in online attention, and right
answers written differently.

Every entry is checked by tests/test_mutants.py: a `wrong` one must fail some grade cell of its name with a
GradingError (with `says`: a message that contains these words), a `right` one must pass all of them, in
plain and in trusted grading. The first wrong entry of `attention_backward` (the first graded name in sorted
order) is self-contained: the nbgrader end-to-end test pastes its source into a submission.
"""
import functools

from mutants import right, wrong

NB = "10_attention"
wrong_ = functools.partial(wrong, NB)
right_ = functools.partial(right, NB)


# attention_backward -------------------------------------------------------------------------------------------
@wrong_("attention_backward", "dS = P ∘ dP: the softmax's backward without its −D term", says="without its −D term")
def attention_backward_without_d(q, k, v, o, do, scale, causal):
    import math

    import torch
    s = (q @ k.mT) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    p = torch.softmax(s, dim=-1)
    ds = p * (do @ v.mT)
    return ds @ k * scale, ds.mT @ q * scale, p.mT @ do


def _attention_backward(q, k, v, o, do, scale, causal, D=None, q_scale=True, k_scale=True, diagonal=0,
                        stable=True):
    """The by-hand backward with one step written as `D` (a function of p, dp, do, o), the scales and the
    mask's diagonal say."""
    import math

    import torch
    s = (q @ k.mT) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(diagonal + 1), -math.inf)
    if stable:
        p = torch.softmax(s, dim=-1)
    else:
        e = torch.exp(s)
        p = e / e.sum(dim=-1, keepdim=True)
    dp = do @ v.mT
    d_row = (do * o).sum(dim=-1, keepdim=True) if D is None else D(p, dp, do, o)
    ds = p * (dp - d_row)
    return ds @ k * (scale if q_scale else 1.0), ds.mT @ q * (scale if k_scale else 1.0), p.mT @ do


@wrong_("attention_backward", "D summed over the queries (dim=-2) instead of a row's keys",
        says="D summed over the wrong axis")
def attention_backward_d_over_queries(q, k, v, o, do, scale, causal):
    return _attention_backward(q, k, v, o, do, scale, causal, D=lambda p, dp, do, o: (p * dp).sum(-2, keepdim=True))


@wrong_("attention_backward", "one head at a time, D = (dO ∘ O).sum(1) without keepdim: broadcast along the keys",
        says="D broadcast along the wrong axis")
def attention_backward_d_without_keepdim(q, k, v, o, do, scale, causal):
    import torch
    heads = [[_attention_backward(*(t[b, h] for t in (q, k, v, o, do)), scale, causal,
                                  D=lambda p, dp, do, o: (do * o).sum(1)) for h in range(q.shape[1])]
             for b in range(q.shape[0])]
    return tuple(torch.stack([torch.stack([g[i] for g in row]) for row in heads]) for i in range(3))


@wrong_("attention_backward", "forgets the scale in dQ", says="scale is missing from dQ")
def attention_backward_dq_unscaled(q, k, v, o, do, scale, causal):
    return _attention_backward(q, k, v, o, do, scale, causal, q_scale=False)


@wrong_("attention_backward", "forgets the scale in dK", says="scale is missing from dK")
def attention_backward_dk_unscaled(q, k, v, o, do, scale, causal):
    return _attention_backward(q, k, v, o, do, scale, causal, k_scale=False)


@wrong_("attention_backward", "causal mask j < i: a query does not see its own key", says="off by one")
def attention_backward_mask_strict(q, k, v, o, do, scale, causal):
    return _attention_backward(q, k, v, o, do, scale, causal, diagonal=-1)


@wrong_("attention_backward", "causal mask j <= i + 1: a query sees the next key too", says="off by one")
def attention_backward_mask_one_ahead(q, k, v, o, do, scale, causal):
    return _attention_backward(q, k, v, o, do, scale, causal, diagonal=1)


@wrong_("attention_backward", "a softmax without its max: exp of a large score overflows float32",
        says="float32 logits as large as a few hundred")
def attention_backward_unstable_softmax(q, k, v, o, do, scale, causal):
    return _attention_backward(q, k, v, o, do, scale, causal, stable=False)


@wrong_("attention_backward", "flattens the heads with .view: fails on heads transposed from (B, N, H, d)",
        says="non-contiguous q, k and v")
def attention_backward_through_view(q, k, v, o, do, scale, causal):
    B, H = q.shape[:2]
    flat = [t.view(B * H, *t.shape[2:]) for t in (q, k, v, o, do)]
    return tuple(g.view(B, H, *g.shape[1:]) for g in _attention_backward(*flat, scale, causal))


@wrong_("attention_backward", "asks autograd for the gradients", says="called autograd")
def attention_backward_by_autograd(q, k, v, o, do, scale, causal):
    import torch
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    with torch.enable_grad():
        s = torch.softmax((leaves[0] @ leaves[1].mT) * scale, dim=-1)
        return torch.autograd.grad(s @ leaves[2], leaves, do)


@right_("attention_backward", "D as rowsum(P ∘ dP), the softmax's own form, and the mask by index comparison")
def attention_backward_d_from_p(q, k, v, o, do, scale, causal):
    import torch
    s = torch.einsum("bhnd,bhmd->bhnm", q, k) * scale
    if causal:
        rows = torch.arange(s.shape[-2], device=s.device)[:, None]
        cols = torch.arange(s.shape[-1], device=s.device)[None, :]
        s = torch.where(cols <= rows, s, torch.finfo(s.dtype).min)
    p = (s - s.amax(-1, keepdim=True)).exp()
    p = p / p.sum(-1, keepdim=True)
    dp = torch.einsum("bhnd,bhmd->bhnm", do, v)
    ds = p * dp - p * (p * dp).sum(-1, keepdim=True)
    dq = torch.einsum("bhnm,bhmd->bhnd", ds, k) * scale
    dk = torch.einsum("bhnm,bhnd->bhmd", ds, q) * scale
    dv = torch.einsum("bhnm,bhnd->bhmd", p, do)
    return dq, dk, dv


@right_("attention_backward", "one head at a time, from the log-sum-exp of each row")
def attention_backward_per_head(q, k, v, o, do, scale, causal):
    import torch
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            s = q[b, h] @ k[b, h].T * scale
            if causal:
                s = torch.where(torch.ones_like(s, dtype=torch.bool).tril(), s, -float("inf"))
            p = torch.exp(s - torch.logsumexp(s, dim=-1, keepdim=True))
            dv[b, h] = p.T @ do[b, h]
            ds = p * (do[b, h] @ v[b, h].T - (do[b, h] * o[b, h]).sum(1)[:, None])
            dq[b, h], dk[b, h] = scale * ds @ k[b, h], scale * ds.T @ q[b, h]
    return dq, dk, dv


# online_attention ---------------------------------------------------------------------------------------------
def _online(q, k, v, scale, causal, block, rescale=True, with_max=True, masked=None, diagonal=0, tiles=None,
            lse_log=None):
    """Online attention with one step written as a learner might: `rescale` the accumulator when the max
    grows, the max in `lse`, the score of a masked key (`masked`), the mask's diagonal, how tiles are cut."""
    import math

    import torch
    n, m = q.shape[-2], k.shape[-2]
    acc_dtype = torch.promote_types(q.dtype, torch.float32)
    acc = q.new_zeros(*q.shape[:-1], v.shape[-1], dtype=acc_dtype)
    top = q.new_full((*q.shape[:-1], 1), -math.inf, dtype=acc_dtype)
    total = q.new_zeros(*q.shape[:-1], 1, dtype=acc_dtype)
    rows = torch.arange(n, device=q.device)[:, None]
    starts = range(0, m, block) if tiles is None else tiles(m, block)
    for start in starts:
        kt, vt = k[..., start:start + block, :], v[..., start:start + block, :]
        s = (q @ kt.mT).to(acc_dtype) * scale
        if causal:
            cols = torch.arange(start, start + kt.shape[-2], device=q.device)[None, :]
            s = s.masked_fill(cols > rows + diagonal, -math.inf if masked is None else masked)
        new_top = torch.maximum(top, s.amax(-1, keepdim=True))
        p = torch.exp(s - new_top)
        factor = torch.exp(top - new_top)
        total = total * factor + p.sum(-1, keepdim=True)
        acc = (acc * factor if rescale else acc) + p @ vt.to(acc_dtype)
        top = new_top
    lse = (top + total.log() if with_max else total.log()).squeeze(-1)
    if lse_log is not None:
        lse = lse_log(torch.exp(lse))
    return (acc / total).to(q.dtype), lse.to(q.dtype)


@wrong_("online_attention", "the accumulated output not rescaled when the running max grows",
        says="rescaled by exp(m_old − m_new)")
def online_attention_not_rescaled(q, k, v, scale, causal, block):
    return _online(q, k, v, scale, causal, block, rescale=False)


@wrong_("online_attention", "lse = log(l) without the running max", says="lse without the max")
def online_attention_lse_without_max(q, k, v, scale, causal, block):
    return _online(q, k, v, scale, causal, block, with_max=False)


@wrong_("online_attention", "masked scores set to 0 instead of −inf", says="masked scores set to 0")
def online_attention_masked_zero(q, k, v, scale, causal, block):
    return _online(q, k, v, scale, causal, block, masked=0.0)


@wrong_("online_attention", "causal mask j < i: a query does not see its own key", says="off by one")
def online_attention_mask_strict(q, k, v, scale, causal, block):
    return _online(q, k, v, scale, causal, block, diagonal=-1)


@wrong_("online_attention", "lse in base 2", says="base 2")
def online_attention_lse_base2(q, k, v, scale, causal, block):
    import torch
    return _online(q, k, v, scale, causal, block, lse_log=torch.log2)


@wrong_("online_attention", "drops the last tile when N is not a multiple of the block")
def online_attention_whole_tiles_only(q, k, v, scale, causal, block):
    return _online(q, k, v, scale, causal, block, tiles=lambda m, b: range(0, max(m - b + 1, 1), b))


@wrong_("online_attention", "all the scores at once: an N×M tensor, then a softmax", says="N×M")
def online_attention_all_scores(q, k, v, scale, causal, block):
    import math

    import torch
    s = (q @ k.mT) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=q.device).triu(1), -math.inf)
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


@wrong_("online_attention", "exp of the raw scores, no running max: overflows float32",
        says="float32 logits as large as a few hundred")
def online_attention_no_max(q, k, v, scale, causal, block):
    import torch
    acc, total = torch.zeros_like(q[..., :1] * v[..., :1, :]), torch.zeros_like(q[..., :1])
    for start in range(0, k.shape[-2], block):
        p = torch.exp(q @ k[..., start:start + block, :].mT * scale)
        if causal:
            p = p * torch.ones_like(p).tril(-start)
        total, acc = total + p.sum(-1, keepdim=True), acc + p @ v[..., start:start + block, :]
    return acc / total, total.squeeze(-1).log()


@right_("online_attention", "tiles by torch.split, the running log-sum-exp merged with torch.logaddexp")
def online_attention_logaddexp(q, k, v, scale, causal, block):
    import math

    import torch
    n = q.shape[-2]
    lse = q.new_full(q.shape[:-1], -math.inf)
    o = torch.zeros_like(q[..., :1] * v[..., :1, :])
    start = 0
    for kt, vt in zip(torch.split(k, block, dim=-2), torch.split(v, block, dim=-2)):
        s = q @ kt.mT * scale
        if causal:
            keys = torch.arange(start, start + kt.shape[-2], device=q.device)
            future = keys > torch.arange(n, device=q.device)[:, None]
            s = s.masked_fill(future, -math.inf)
        tile_lse = torch.logsumexp(s, dim=-1)
        new = torch.logaddexp(lse, tile_lse)
        keep = torch.exp(lse - new).nan_to_num(0.0)
        o = o * keep[..., None] + torch.exp(s - new[..., None]).nan_to_num(0.0) @ vt
        lse, start = new, start + kt.shape[-2]
    return o, lse


@right_("online_attention", "lse returned in float32 whatever the input's dtype")
def online_attention_lse_float32(q, k, v, scale, causal, block):
    import torch
    o, lse = _online(q, k, v, scale, causal, block)
    return o, lse.to(torch.float32)
