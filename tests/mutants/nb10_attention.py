"""Notebook 10: the bugs learners write in attention's backward by hand, in online attention and in the
FlashAttention kernels, and right answers written differently.

Every entry is checked by tests/test_mutants.py: a `wrong` one must fail some grade cell of its name with a
GradingError (with `says`: a message that contains these words), a `right` one must pass all of them, in
plain and in trusted grading. The first wrong entry of `attention_backward` (the first graded name in sorted
order) is self-contained: the nbgrader end-to-end test pastes its source into a submission.
"""
import functools

import torch

from autograder.learner import triton_setup
from mutants import right, wrong

triton_setup.prepare()

import triton  # noqa: E402  (after prepare(): it sets TRITON_INTERPRET=1 where there is no CUDA)
import triton.language as tl  # noqa: E402

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


@wrong_("attention_backward", "dV by einsum with do's head index apart from P's: every head's dV sums the queries "
                              "of all heads", says="dV mixes the heads")
def attention_backward_dv_over_all_heads(q, k, v, o, do, scale, causal):
    import math

    import torch
    s = (q @ k.mT) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), -math.inf)
    p = torch.softmax(s, dim=-1)
    dv = torch.einsum("bhnm,bgnd->bhmd", p, do)
    ds = p * (do @ v.mT - (do * o).sum(dim=-1, keepdim=True))
    return ds @ k * scale, ds.mT @ q * scale, dv


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
            lse_log=None, start_max=None):
    """Online attention with one step written as a learner might: `rescale` the accumulator when the max
    grows, the max in `lse`, the score of a masked key (`masked`), the mask's diagonal, how tiles are cut, where
    the running max starts (`start_max`, −inf unless given)."""
    import math

    import torch
    n, m = q.shape[-2], k.shape[-2]
    acc_dtype = torch.promote_types(q.dtype, torch.float32)
    acc = q.new_zeros(*q.shape[:-1], v.shape[-1], dtype=acc_dtype)
    top = q.new_full((*q.shape[:-1], 1), -math.inf if start_max is None else start_max, dtype=acc_dtype)
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


@wrong_("online_attention", "the running max starts at 0, not −inf: rows whose scores are all below −88 underflow",
        says="running max start at 0")
def online_attention_max_starts_at_zero(q, k, v, scale, causal, block):
    return _online(q, k, v, scale, causal, block, start_max=0.0)


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


@wrong_("online_attention", "scales q in place (q.mul_(scale)), then tiles with a scale of 1", says="in place")
def online_attention_scales_q_in_place(q, k, v, scale, causal, block):
    q.mul_(scale)
    return _online(q, k, v, 1.0, causal, block)


@right_("online_attention", "tiles by torch.split, the running log-sum-exp merged with torch.logaddexp, in float32 "
                            "at least")
def online_attention_logaddexp(q, k, v, scale, causal, block):
    import math

    import torch
    dtype = q.dtype
    q, k, v = (t.to(torch.promote_types(t.dtype, torch.float32)) for t in (q, k, v))
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
    return o.to(dtype), lse


@right_("online_attention", "lse returned in float32 whatever the input's dtype")
def online_attention_lse_float32(q, k, v, scale, causal, block):
    import torch
    o, lse = _online(q, k, v, scale, causal, block)
    return o, lse.to(torch.float32)


# flash_forward ------------------------------------------------------------------------------------------------
# Triton entries: each a kernel of its own above the function that launches it, as learners write them.
# They run only through the checks, which hand out sentinel-padded buffers (a kernel without a mask would
# read and write past its tensors in Triton's interpreter).


@triton.jit
def _fwd_no_rescale_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, H, N, M, D, scale,
        qb, qh, qn, qd, kb, kh, km, kd, vb, vh, vm, vd, ob, oh, on, od,
        CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = block * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    row_ok, col_ok = rows < N, cols < D
    q = tl.load(q_ptr + b * qb + h * qh + rows[:, None] * qn + cols[None, :] * qd,
                mask=row_ok[:, None] & col_ok[None, :], other=0.0).to(ACC)
    m_i = tl.full([BLOCK_N], float("-inf"), dtype=ACC)
    l_i = tl.zeros([BLOCK_N], dtype=ACC)
    acc = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    for start in range(0, M, BLOCK_M):
        keys = start + tl.arange(0, BLOCK_M)
        kv_mask = (keys < M)[:, None] & col_ok[None, :]
        k = tl.load(k_ptr + b * kb + h * kh + keys[:, None] * km + cols[None, :] * kd, mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + b * vb + h * vh + keys[:, None] * vm + cols[None, :] * vd, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k.to(ACC)), input_precision="ieee") * scale
        s = tl.where((keys < M)[None, :], s, float("-inf"))
        if CAUSAL:
            s = tl.where(keys[None, :] <= rows[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        l_i = l_i + tl.sum(p, axis=1)
        acc = acc + tl.dot(p, v.to(ACC), input_precision="ieee")
        m_i = m_new
    tl.store(o_ptr + b * ob + h * oh + rows[:, None] * on + cols[None, :] * od, acc / l_i[:, None],
             mask=row_ok[:, None] & col_ok[None, :])
    tl.store(lse_ptr + bh * N + rows, m_i + tl.log(l_i), mask=row_ok)


@wrong_("flash_forward", "written out: the accumulator and the running sum not rescaled when the running max "
                          "grows", says="not rescaled")
def flash_forward_not_rescaled(q, k, v, scale, causal):
    B, H, N, D = q.shape
    M = k.shape[2]
    wide = q.dtype == torch.float64
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), dtype=torch.float64 if wide else torch.float32, device=q.device)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    grid = (B * H, triton.cdiv(N, 16))
    _fwd_no_rescale_kernel[grid](q, k, v, o, lse, H, N, M, D, scale, *q.stride(), *k.stride(), *v.stride(),
        *o.stride(), CAUSAL=causal, BLOCK_N=16, BLOCK_M=16, BLOCK_D=BLOCK_D, ACC=tl.float64 if wide else tl.float32)
    return o, lse


@triton.jit
def _fwd_lse_no_max_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, H, N, M, D, scale,
        qb, qh, qn, qd, kb, kh, km, kd, vb, vh, vm, vd, ob, oh, on, od,
        CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = block * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    row_ok, col_ok = rows < N, cols < D
    q = tl.load(q_ptr + b * qb + h * qh + rows[:, None] * qn + cols[None, :] * qd,
                mask=row_ok[:, None] & col_ok[None, :], other=0.0).to(ACC)
    m_i = tl.full([BLOCK_N], float("-inf"), dtype=ACC)
    l_i = tl.zeros([BLOCK_N], dtype=ACC)
    acc = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    for start in range(0, M, BLOCK_M):
        keys = start + tl.arange(0, BLOCK_M)
        kv_mask = (keys < M)[:, None] & col_ok[None, :]
        k = tl.load(k_ptr + b * kb + h * kh + keys[:, None] * km + cols[None, :] * kd, mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + b * vb + h * vh + keys[:, None] * vm + cols[None, :] * vd, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k.to(ACC)), input_precision="ieee") * scale
        s = tl.where((keys < M)[None, :], s, float("-inf"))
        if CAUSAL:
            s = tl.where(keys[None, :] <= rows[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v.to(ACC), input_precision="ieee")
        m_i = m_new
    tl.store(o_ptr + b * ob + h * oh + rows[:, None] * on + cols[None, :] * od, acc / l_i[:, None],
             mask=row_ok[:, None] & col_ok[None, :])
    tl.store(lse_ptr + bh * N + rows, tl.log(l_i), mask=row_ok)


@wrong_("flash_forward", "written out: lse = log(l) without the running max", says="lse without the max")
def flash_forward_lse_without_max(q, k, v, scale, causal):
    B, H, N, D = q.shape
    M = k.shape[2]
    wide = q.dtype == torch.float64
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), dtype=torch.float64 if wide else torch.float32, device=q.device)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    grid = (B * H, triton.cdiv(N, 16))
    _fwd_lse_no_max_kernel[grid](q, k, v, o, lse, H, N, M, D, scale, *q.stride(), *k.stride(), *v.stride(),
        *o.stride(), CAUSAL=causal, BLOCK_N=16, BLOCK_M=16, BLOCK_D=BLOCK_D, ACC=tl.float64 if wide else tl.float32)
    return o, lse


@triton.jit
def _fwd_keys_zero_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, H, N, M, D, scale,
        qb, qh, qn, qd, kb, kh, km, kd, vb, vh, vm, vd, ob, oh, on, od,
        CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = block * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    row_ok, col_ok = rows < N, cols < D
    q = tl.load(q_ptr + b * qb + h * qh + rows[:, None] * qn + cols[None, :] * qd,
                mask=row_ok[:, None] & col_ok[None, :], other=0.0).to(ACC)
    m_i = tl.full([BLOCK_N], float("-inf"), dtype=ACC)
    l_i = tl.zeros([BLOCK_N], dtype=ACC)
    acc = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    for start in range(0, M, BLOCK_M):
        keys = start + tl.arange(0, BLOCK_M)
        kv_mask = (keys < M)[:, None] & col_ok[None, :]
        k = tl.load(k_ptr + b * kb + h * kh + keys[:, None] * km + cols[None, :] * kd, mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + b * vb + h * vh + keys[:, None] * vm + cols[None, :] * vd, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k.to(ACC)), input_precision="ieee") * scale
        # lanes past M loaded other=0.0: their scores are 0
        if CAUSAL:
            s = tl.where(keys[None, :] <= rows[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v.to(ACC), input_precision="ieee")
        m_i = m_new
    tl.store(o_ptr + b * ob + h * oh + rows[:, None] * on + cols[None, :] * od, acc / l_i[:, None],
             mask=row_ok[:, None] & col_ok[None, :])
    tl.store(lse_ptr + bh * N + rows, m_i + tl.log(l_i), mask=row_ok)


@wrong_("flash_forward", "written out: key lanes past M load 0 and keep a score of 0 (no −inf)",
        says="key lanes past M score 0")
def flash_forward_masked_keys_zero(q, k, v, scale, causal):
    B, H, N, D = q.shape
    M = k.shape[2]
    wide = q.dtype == torch.float64
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), dtype=torch.float64 if wide else torch.float32, device=q.device)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    grid = (B * H, triton.cdiv(N, 16))
    _fwd_keys_zero_kernel[grid](q, k, v, o, lse, H, N, M, D, scale, *q.stride(), *k.stride(), *v.stride(),
        *o.stride(), CAUSAL=causal, BLOCK_N=16, BLOCK_M=16, BLOCK_D=BLOCK_D, ACC=tl.float64 if wide else tl.float32)
    return o, lse


@triton.jit
def _fwd_strict_mask_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, H, N, M, D, scale,
        qb, qh, qn, qd, kb, kh, km, kd, vb, vh, vm, vd, ob, oh, on, od,
        CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = block * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    row_ok, col_ok = rows < N, cols < D
    q = tl.load(q_ptr + b * qb + h * qh + rows[:, None] * qn + cols[None, :] * qd,
                mask=row_ok[:, None] & col_ok[None, :], other=0.0).to(ACC)
    m_i = tl.full([BLOCK_N], float("-inf"), dtype=ACC)
    l_i = tl.zeros([BLOCK_N], dtype=ACC)
    acc = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    for start in range(0, M, BLOCK_M):
        keys = start + tl.arange(0, BLOCK_M)
        kv_mask = (keys < M)[:, None] & col_ok[None, :]
        k = tl.load(k_ptr + b * kb + h * kh + keys[:, None] * km + cols[None, :] * kd, mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + b * vb + h * vh + keys[:, None] * vm + cols[None, :] * vd, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k.to(ACC)), input_precision="ieee") * scale
        s = tl.where((keys < M)[None, :], s, float("-inf"))
        if CAUSAL:
            s = tl.where(keys[None, :] < rows[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v.to(ACC), input_precision="ieee")
        m_i = m_new
    tl.store(o_ptr + b * ob + h * oh + rows[:, None] * on + cols[None, :] * od, acc / l_i[:, None],
             mask=row_ok[:, None] & col_ok[None, :])
    tl.store(lse_ptr + bh * N + rows, m_i + tl.log(l_i), mask=row_ok)


@wrong_("flash_forward", "written out: causal mask j < i, a query does not see its own key", says="off by one")
def flash_forward_mask_strict(q, k, v, scale, causal):
    B, H, N, D = q.shape
    M = k.shape[2]
    wide = q.dtype == torch.float64
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), dtype=torch.float64 if wide else torch.float32, device=q.device)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    grid = (B * H, triton.cdiv(N, 16))
    _fwd_strict_mask_kernel[grid](q, k, v, o, lse, H, N, M, D, scale, *q.stride(), *k.stride(), *v.stride(),
        *o.stride(), CAUSAL=causal, BLOCK_N=16, BLOCK_M=16, BLOCK_D=BLOCK_D, ACC=tl.float64 if wide else tl.float32)
    return o, lse


@triton.jit
def _fwd_lse32_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, H, N, M, D, scale,
        qb, qh, qn, qd, kb, kh, km, kd, vb, vh, vm, vd, ob, oh, on, od,
        CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = block * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    row_ok, col_ok = rows < N, cols < D
    q = tl.load(q_ptr + b * qb + h * qh + rows[:, None] * qn + cols[None, :] * qd,
                mask=row_ok[:, None] & col_ok[None, :], other=0.0).to(ACC)
    m_i = tl.full([BLOCK_N], float("-inf"), dtype=ACC)
    l_i = tl.zeros([BLOCK_N], dtype=ACC)
    acc = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    for start in range(0, M, BLOCK_M):
        keys = start + tl.arange(0, BLOCK_M)
        kv_mask = (keys < M)[:, None] & col_ok[None, :]
        k = tl.load(k_ptr + b * kb + h * kh + keys[:, None] * km + cols[None, :] * kd, mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + b * vb + h * vh + keys[:, None] * vm + cols[None, :] * vd, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k.to(ACC)), input_precision="ieee") * scale
        s = tl.where((keys < M)[None, :], s, float("-inf"))
        if CAUSAL:
            s = tl.where(keys[None, :] <= rows[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v.to(ACC), input_precision="ieee")
        m_i = m_new
    tl.store(o_ptr + b * ob + h * oh + rows[:, None] * on + cols[None, :] * od, acc / l_i[:, None],
             mask=row_ok[:, None] & col_ok[None, :])
    tl.store(lse_ptr + bh * N + rows, m_i + tl.log(l_i), mask=row_ok)


@right_("flash_forward", "written out: lse in float32 whatever the input's dtype, blocks of 32 queries, every block "
                         "of keys visited and masked (no causal skipping)")
def flash_forward_lse_float32(q, k, v, scale, causal):
    B, H, N, D = q.shape
    M = k.shape[2]
    wide = q.dtype == torch.float64
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    grid = (B * H, triton.cdiv(N, 32))
    _fwd_lse32_kernel[grid](q, k, v, o, lse, H, N, M, D, scale, *q.stride(), *k.stride(), *v.stride(),
        *o.stride(), CAUSAL=causal, BLOCK_N=32, BLOCK_M=16, BLOCK_D=BLOCK_D, ACC=tl.float64 if wide else tl.float32)
    return o, lse



@triton.jit
def _fwd_32_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, H, N, M, D, scale,
        qb, qh, qn, qd, kb, kh, km, kd, vb, vh, vm, vd, ob, oh, on, od,
        CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = block * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    row_ok, col_ok = rows < N, cols < D
    q = tl.load(q_ptr + b * qb + h * qh + rows[:, None] * qn + cols[None, :] * qd,
                mask=row_ok[:, None] & col_ok[None, :], other=0.0).to(ACC)
    m_i = tl.full([BLOCK_N], float("-inf"), dtype=ACC)
    l_i = tl.zeros([BLOCK_N], dtype=ACC)
    acc = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    for start in range(0, M, BLOCK_M):
        keys = start + tl.arange(0, BLOCK_M)
        kv_mask = (keys < M)[:, None] & col_ok[None, :]
        k = tl.load(k_ptr + b * kb + h * kh + keys[:, None] * km + cols[None, :] * kd, mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + b * vb + h * vh + keys[:, None] * vm + cols[None, :] * vd, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k.to(ACC)), input_precision="ieee") * scale
        s = tl.where((keys < M)[None, :], s, float("-inf"))
        if CAUSAL:
            s = tl.where(keys[None, :] <= rows[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v.to(ACC), input_precision="ieee")
        m_i = m_new
    tl.store(o_ptr + b * ob + h * oh + rows[:, None] * on + cols[None, :] * od, acc / l_i[:, None],
             mask=row_ok[:, None] & col_ok[None, :])
    tl.store(lse_ptr + bh * N + rows, m_i + tl.log(l_i), mask=row_ok)


@right_("flash_forward", "written out: blocks of 32 queries against blocks of 16 keys, lse in the accumulator's dtype")
def flash_forward_blocks_of_32(q, k, v, scale, causal):
    B, H, N, D = q.shape
    M = k.shape[2]
    wide = q.dtype == torch.float64
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), dtype=torch.float64 if wide else torch.float32, device=q.device)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    grid = (B * H, triton.cdiv(N, 32))
    _fwd_32_kernel[grid](q, k, v, o, lse, H, N, M, D, scale, *q.stride(), *k.stride(), *v.stride(),
        *o.stride(), CAUSAL=causal, BLOCK_N=32, BLOCK_M=16, BLOCK_D=BLOCK_D, ACC=tl.float64 if wide else tl.float32)
    return o, lse


@triton.jit
def _fwd_variant_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, H, N, M, D, scale,
        qb, qh, qn, qd, kb, kh, km, kd, vb, vh, vm, vd, ob, oh, on, od,
        CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr,
        MAX_AT_ZERO: tl.constexpr, SKIP: tl.constexpr, V_UNMASKED: tl.constexpr, NO_START: tl.constexpr):
    """The forward with one choice a learner makes: the running max started at 0 (MAX_AT_ZERO), the key blocks
    after the diagonal skipped (SKIP), v loaded without the mask of the head's width (V_UNMASKED), every block of
    keys taken from key 0 (NO_START: the loop's start forgotten in the offsets)."""
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = block * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    row_ok, col_ok = rows < N, cols < D
    q = tl.load(q_ptr + b * qb + h * qh + rows[:, None] * qn + cols[None, :] * qd,
                mask=row_ok[:, None] & col_ok[None, :], other=0.0).to(ACC)
    if MAX_AT_ZERO:
        m_i = tl.zeros([BLOCK_N], dtype=ACC)
    else:
        m_i = tl.full([BLOCK_N], float("-inf"), dtype=ACC)
    l_i = tl.zeros([BLOCK_N], dtype=ACC)
    acc = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    hi = M
    if SKIP and CAUSAL:
        hi = tl.minimum(M, (block + 1) * BLOCK_N)
    for start in range(0, hi, BLOCK_M):
        if NO_START:
            keys = tl.arange(0, BLOCK_M)
        else:
            keys = start + tl.arange(0, BLOCK_M)
        kv_mask = (keys < M)[:, None] & col_ok[None, :]
        k = tl.load(k_ptr + b * kb + h * kh + keys[:, None] * km + cols[None, :] * kd, mask=kv_mask, other=0.0)
        if V_UNMASKED:  # the lanes past d read on into the next row, and past the last row out of v
            v = tl.load(v_ptr + b * vb + h * vh + keys[:, None] * vm + cols[None, :] * vd, mask=(keys < M)[:, None],
                        other=0.0)
        else:
            v = tl.load(v_ptr + b * vb + h * vh + keys[:, None] * vm + cols[None, :] * vd, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k.to(ACC)), input_precision="ieee") * scale
        s = tl.where((keys < M)[None, :], s, float("-inf"))
        if CAUSAL:
            s = tl.where(keys[None, :] <= rows[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v.to(ACC), input_precision="ieee")
        m_i = m_new
    tl.store(o_ptr + b * ob + h * oh + rows[:, None] * on + cols[None, :] * od, acc / l_i[:, None],
             mask=row_ok[:, None] & col_ok[None, :])
    tl.store(lse_ptr + bh * N + rows, m_i + tl.log(l_i), mask=row_ok)


def _fwd_variant(q, k, v, scale, causal, max_at_zero=False, skip=False, v_unmasked=False, block_n=16, block_m=16,
                 no_start=False):
    B, H, N, D = q.shape
    M = k.shape[2]
    wide = q.dtype == torch.float64
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), dtype=torch.float64 if wide else torch.float32, device=q.device)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    _fwd_variant_kernel[(B * H, triton.cdiv(N, block_n))](q, k, v, o, lse, H, N, M, D, scale, *q.stride(),
        *k.stride(), *v.stride(), *o.stride(), CAUSAL=causal, BLOCK_N=block_n, BLOCK_M=block_m, BLOCK_D=BLOCK_D,
        ACC=tl.float64 if wide else tl.float32, MAX_AT_ZERO=max_at_zero, SKIP=skip, V_UNMASKED=v_unmasked,
        NO_START=no_start)
    return o, lse


@wrong_("flash_forward", "written out: the running max starts at 0 (tl.zeros), not −inf", says="running max start at 0")
def flash_forward_max_starts_at_zero(q, k, v, scale, causal):
    return _fwd_variant(q, k, v, scale, causal, max_at_zero=True)


@wrong_("flash_forward", "written out: v loaded without the mask of the head's width (its lanes past d never reach o, "
                          "but read past v's last row)", says="read outside v")
def flash_forward_v_unmasked(q, k, v, scale, causal):
    return _fwd_variant(q, k, v, scale, causal, v_unmasked=True)


@wrong_("flash_forward", "written out: blocks of 64 keys whose offsets forget the loop's start (right while every "
                          "M fits in one block)")
def flash_forward_keys_from_zero_in_every_block(q, k, v, scale, causal):
    return _fwd_variant(q, k, v, scale, causal, block_m=64, no_start=True)


@right_("flash_forward", "written out: with causal, the blocks of keys after a block's last query skipped (as "
                         "FlashAttention-2), blocks of 32 queries against blocks of 16 keys")
def flash_forward_skips_hidden_blocks(q, k, v, scale, causal):
    return _fwd_variant(q, k, v, scale, causal, skip=True, block_n=32)


# flash_backward -----------------------------------------------------------------------------------------------



@triton.jit
def _no_d_d_kernel(o_ptr, do_ptr, d_ptr, H, N, D, ob, oh, on, od, gb, gh, gn, gd,
        BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = block * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    mask = (rows < N)[:, None] & (cols < D)[None, :]
    o = tl.load(o_ptr + b * ob + h * oh + rows[:, None] * on + cols[None, :] * od, mask=mask, other=0.0).to(ACC)
    do = tl.load(do_ptr + b * gb + h * gh + rows[:, None] * gn + cols[None, :] * gd, mask=mask, other=0.0).to(ACC)
    tl.store(d_ptr + bh * N + rows, tl.sum(o * do, axis=1), mask=rows < N)


@triton.jit
def _no_d_dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, d_ptr, dk_ptr, dv_ptr, H, N, M, D, scale,
        qb, qh, qn, qd, kb, kh, km, kd, vb, vh, vm, vd, gb, gh, gn, gd, lb, lh, ln,
        CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    keys = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    kv_mask = (keys < M)[:, None] & (cols < D)[None, :]
    k = tl.load(k_ptr + b * kb + h * kh + keys[:, None] * km + cols[None, :] * kd, mask=kv_mask, other=0.0).to(ACC)
    v = tl.load(v_ptr + b * vb + h * vh + keys[:, None] * vm + cols[None, :] * vd, mask=kv_mask, other=0.0).to(ACC)
    dk = tl.zeros([BLOCK_M, BLOCK_D], dtype=ACC)
    dv = tl.zeros([BLOCK_M, BLOCK_D], dtype=ACC)
    for start in range(0, N, BLOCK_N):
        rows = start + tl.arange(0, BLOCK_N)
        q_mask = (rows < N)[:, None] & (cols < D)[None, :]
        q = tl.load(q_ptr + b * qb + h * qh + rows[:, None] * qn + cols[None, :] * qd, mask=q_mask, other=0.0)
        do = tl.load(do_ptr + b * gb + h * gh + rows[:, None] * gn + cols[None, :] * gd, mask=q_mask, other=0.0)
        lse = tl.load(lse_ptr + b * lb + h * lh + rows * ln, mask=rows < N, other=0.0).to(ACC)
        q, do = q.to(ACC), do.to(ACC)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        visible = (rows < N)[:, None] & (keys < M)[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None])
        p = tl.where(visible, tl.exp(s - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p), do, input_precision="ieee")
        ds = p * tl.dot(do, tl.trans(v), input_precision="ieee")
        dk += tl.dot(tl.trans(ds), q, input_precision="ieee") * scale
    tl.store(dk_ptr + bh * M * D + keys[:, None] * D + cols[None, :], dk, mask=kv_mask)
    tl.store(dv_ptr + bh * M * D + keys[:, None] * D + cols[None, :], dv, mask=kv_mask)


@triton.jit
def _no_d_dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, d_ptr, dq_ptr, H, N, M, D, scale,
        qb, qh, qn, qd, kb, kh, km, kd, vb, vh, vm, vd, gb, gh, gn, gd, lb, lh, ln,
        CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = block * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    q_mask = (rows < N)[:, None] & (cols < D)[None, :]
    q = tl.load(q_ptr + b * qb + h * qh + rows[:, None] * qn + cols[None, :] * qd, mask=q_mask, other=0.0).to(ACC)
    do = tl.load(do_ptr + b * gb + h * gh + rows[:, None] * gn + cols[None, :] * gd, mask=q_mask, other=0.0).to(ACC)
    lse = tl.load(lse_ptr + b * lb + h * lh + rows * ln, mask=rows < N, other=0.0).to(ACC)
    dq = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    for start in range(0, M, BLOCK_M):
        keys = start + tl.arange(0, BLOCK_M)
        kv_mask = (keys < M)[:, None] & (cols < D)[None, :]
        k = tl.load(k_ptr + b * kb + h * kh + keys[:, None] * km + cols[None, :] * kd, mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + b * vb + h * vh + keys[:, None] * vm + cols[None, :] * vd, mask=kv_mask, other=0.0)
        k, v = k.to(ACC), v.to(ACC)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        visible = (rows < N)[:, None] & (keys < M)[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None])
        p = tl.where(visible, tl.exp(s - lse[:, None]), 0.0)
        ds = p * tl.dot(do, tl.trans(v), input_precision="ieee")
        dq += tl.dot(ds, k, input_precision="ieee") * scale
    tl.store(dq_ptr + bh * N * D + rows[:, None] * D + cols[None, :], dq, mask=q_mask)


@wrong_("flash_backward", "written out: dS = P ∘ dP, the softmax's backward without its −D term",
        says="without its −D term")
def flash_backward_without_d(q, k, v, o, lse, do, scale, causal):
    B, H, N, D = q.shape
    M = k.shape[2]
    wide = q.dtype == torch.float64
    dq = torch.empty((B, H, N, D), dtype=q.dtype, device=q.device)
    dk = torch.empty((B, H, M, D), dtype=q.dtype, device=q.device)
    dv = torch.empty((B, H, M, D), dtype=q.dtype, device=q.device)
    d = torch.empty((B, H, N), dtype=torch.float64 if wide else torch.float32, device=q.device)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    acc = tl.float64 if wide else tl.float32
    _no_d_d_kernel[(B * H, triton.cdiv(N, 16))](o, do, d, H, N, D, *o.stride(), *do.stride(),
        BLOCK_N=16, BLOCK_D=BLOCK_D, ACC=acc)
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride(), *lse.stride())
    meta = dict(CAUSAL=causal, BLOCK_N=16, BLOCK_M=16, BLOCK_D=BLOCK_D, ACC=acc)
    _no_d_dkdv_kernel[(B * H, triton.cdiv(M, 16))](q, k, v, do, lse, d, dk, dv, H, N, M, D, scale, *strides,
        **meta)
    _no_d_dq_kernel[(B * H, triton.cdiv(N, 16))](q, k, v, do, lse, d, dq, H, N, M, D, scale, *strides,
        **meta)
    return dq, dk, dv



@triton.jit
def _strict_d_kernel(o_ptr, do_ptr, d_ptr, H, N, D, ob, oh, on, od, gb, gh, gn, gd,
        BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = block * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    mask = (rows < N)[:, None] & (cols < D)[None, :]
    o = tl.load(o_ptr + b * ob + h * oh + rows[:, None] * on + cols[None, :] * od, mask=mask, other=0.0).to(ACC)
    do = tl.load(do_ptr + b * gb + h * gh + rows[:, None] * gn + cols[None, :] * gd, mask=mask, other=0.0).to(ACC)
    tl.store(d_ptr + bh * N + rows, tl.sum(o * do, axis=1), mask=rows < N)


@triton.jit
def _strict_dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, d_ptr, dk_ptr, dv_ptr, H, N, M, D, scale,
        qb, qh, qn, qd, kb, kh, km, kd, vb, vh, vm, vd, gb, gh, gn, gd, lb, lh, ln,
        CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    keys = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    kv_mask = (keys < M)[:, None] & (cols < D)[None, :]
    k = tl.load(k_ptr + b * kb + h * kh + keys[:, None] * km + cols[None, :] * kd, mask=kv_mask, other=0.0).to(ACC)
    v = tl.load(v_ptr + b * vb + h * vh + keys[:, None] * vm + cols[None, :] * vd, mask=kv_mask, other=0.0).to(ACC)
    dk = tl.zeros([BLOCK_M, BLOCK_D], dtype=ACC)
    dv = tl.zeros([BLOCK_M, BLOCK_D], dtype=ACC)
    for start in range(0, N, BLOCK_N):
        rows = start + tl.arange(0, BLOCK_N)
        q_mask = (rows < N)[:, None] & (cols < D)[None, :]
        q = tl.load(q_ptr + b * qb + h * qh + rows[:, None] * qn + cols[None, :] * qd, mask=q_mask, other=0.0)
        do = tl.load(do_ptr + b * gb + h * gh + rows[:, None] * gn + cols[None, :] * gd, mask=q_mask, other=0.0)
        lse = tl.load(lse_ptr + b * lb + h * lh + rows * ln, mask=rows < N, other=0.0).to(ACC)
        d = tl.load(d_ptr + bh * N + rows, mask=rows < N, other=0.0)
        q, do = q.to(ACC), do.to(ACC)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        visible = (rows < N)[:, None] & (keys < M)[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] < rows[:, None])
        p = tl.where(visible, tl.exp(s - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p), do, input_precision="ieee")
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - d[:, None])
        dk += tl.dot(tl.trans(ds), q, input_precision="ieee") * scale
    tl.store(dk_ptr + bh * M * D + keys[:, None] * D + cols[None, :], dk, mask=kv_mask)
    tl.store(dv_ptr + bh * M * D + keys[:, None] * D + cols[None, :], dv, mask=kv_mask)


@triton.jit
def _strict_dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, d_ptr, dq_ptr, H, N, M, D, scale,
        qb, qh, qn, qd, kb, kh, km, kd, vb, vh, vm, vd, gb, gh, gn, gd, lb, lh, ln,
        CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = block * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    q_mask = (rows < N)[:, None] & (cols < D)[None, :]
    q = tl.load(q_ptr + b * qb + h * qh + rows[:, None] * qn + cols[None, :] * qd, mask=q_mask, other=0.0).to(ACC)
    do = tl.load(do_ptr + b * gb + h * gh + rows[:, None] * gn + cols[None, :] * gd, mask=q_mask, other=0.0).to(ACC)
    lse = tl.load(lse_ptr + b * lb + h * lh + rows * ln, mask=rows < N, other=0.0).to(ACC)
    d = tl.load(d_ptr + bh * N + rows, mask=rows < N, other=0.0)
    dq = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    for start in range(0, M, BLOCK_M):
        keys = start + tl.arange(0, BLOCK_M)
        kv_mask = (keys < M)[:, None] & (cols < D)[None, :]
        k = tl.load(k_ptr + b * kb + h * kh + keys[:, None] * km + cols[None, :] * kd, mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + b * vb + h * vh + keys[:, None] * vm + cols[None, :] * vd, mask=kv_mask, other=0.0)
        k, v = k.to(ACC), v.to(ACC)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        visible = (rows < N)[:, None] & (keys < M)[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] < rows[:, None])
        p = tl.where(visible, tl.exp(s - lse[:, None]), 0.0)
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - d[:, None])
        dq += tl.dot(ds, k, input_precision="ieee") * scale
    tl.store(dq_ptr + bh * N * D + rows[:, None] * D + cols[None, :], dq, mask=q_mask)


@wrong_("flash_backward", "written out: causal mask j < i in both passes", says="off by one")
def flash_backward_mask_strict(q, k, v, o, lse, do, scale, causal):
    B, H, N, D = q.shape
    M = k.shape[2]
    wide = q.dtype == torch.float64
    dq = torch.empty((B, H, N, D), dtype=q.dtype, device=q.device)
    dk = torch.empty((B, H, M, D), dtype=q.dtype, device=q.device)
    dv = torch.empty((B, H, M, D), dtype=q.dtype, device=q.device)
    d = torch.empty((B, H, N), dtype=torch.float64 if wide else torch.float32, device=q.device)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    acc = tl.float64 if wide else tl.float32
    _strict_d_kernel[(B * H, triton.cdiv(N, 16))](o, do, d, H, N, D, *o.stride(), *do.stride(),
        BLOCK_N=16, BLOCK_D=BLOCK_D, ACC=acc)
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride(), *lse.stride())
    meta = dict(CAUSAL=causal, BLOCK_N=16, BLOCK_M=16, BLOCK_D=BLOCK_D, ACC=acc)
    _strict_dkdv_kernel[(B * H, triton.cdiv(M, 16))](q, k, v, do, lse, d, dk, dv, H, N, M, D, scale, *strides,
        **meta)
    _strict_dq_kernel[(B * H, triton.cdiv(N, 16))](q, k, v, do, lse, d, dq, H, N, M, D, scale, *strides,
        **meta)
    return dq, dk, dv



@triton.jit
def _dk_unscaled_d_kernel(o_ptr, do_ptr, d_ptr, H, N, D, ob, oh, on, od, gb, gh, gn, gd,
        BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = block * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    mask = (rows < N)[:, None] & (cols < D)[None, :]
    o = tl.load(o_ptr + b * ob + h * oh + rows[:, None] * on + cols[None, :] * od, mask=mask, other=0.0).to(ACC)
    do = tl.load(do_ptr + b * gb + h * gh + rows[:, None] * gn + cols[None, :] * gd, mask=mask, other=0.0).to(ACC)
    tl.store(d_ptr + bh * N + rows, tl.sum(o * do, axis=1), mask=rows < N)


@triton.jit
def _dk_unscaled_dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, d_ptr, dk_ptr, dv_ptr, H, N, M, D, scale,
        qb, qh, qn, qd, kb, kh, km, kd, vb, vh, vm, vd, gb, gh, gn, gd, lb, lh, ln,
        CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    keys = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    kv_mask = (keys < M)[:, None] & (cols < D)[None, :]
    k = tl.load(k_ptr + b * kb + h * kh + keys[:, None] * km + cols[None, :] * kd, mask=kv_mask, other=0.0).to(ACC)
    v = tl.load(v_ptr + b * vb + h * vh + keys[:, None] * vm + cols[None, :] * vd, mask=kv_mask, other=0.0).to(ACC)
    dk = tl.zeros([BLOCK_M, BLOCK_D], dtype=ACC)
    dv = tl.zeros([BLOCK_M, BLOCK_D], dtype=ACC)
    for start in range(0, N, BLOCK_N):
        rows = start + tl.arange(0, BLOCK_N)
        q_mask = (rows < N)[:, None] & (cols < D)[None, :]
        q = tl.load(q_ptr + b * qb + h * qh + rows[:, None] * qn + cols[None, :] * qd, mask=q_mask, other=0.0)
        do = tl.load(do_ptr + b * gb + h * gh + rows[:, None] * gn + cols[None, :] * gd, mask=q_mask, other=0.0)
        lse = tl.load(lse_ptr + b * lb + h * lh + rows * ln, mask=rows < N, other=0.0).to(ACC)
        d = tl.load(d_ptr + bh * N + rows, mask=rows < N, other=0.0)
        q, do = q.to(ACC), do.to(ACC)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        visible = (rows < N)[:, None] & (keys < M)[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None])
        p = tl.where(visible, tl.exp(s - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p), do, input_precision="ieee")
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - d[:, None])
        dk += tl.dot(tl.trans(ds), q, input_precision="ieee")
    tl.store(dk_ptr + bh * M * D + keys[:, None] * D + cols[None, :], dk, mask=kv_mask)
    tl.store(dv_ptr + bh * M * D + keys[:, None] * D + cols[None, :], dv, mask=kv_mask)


@triton.jit
def _dk_unscaled_dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, d_ptr, dq_ptr, H, N, M, D, scale,
        qb, qh, qn, qd, kb, kh, km, kd, vb, vh, vm, vd, gb, gh, gn, gd, lb, lh, ln,
        CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = block * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    q_mask = (rows < N)[:, None] & (cols < D)[None, :]
    q = tl.load(q_ptr + b * qb + h * qh + rows[:, None] * qn + cols[None, :] * qd, mask=q_mask, other=0.0).to(ACC)
    do = tl.load(do_ptr + b * gb + h * gh + rows[:, None] * gn + cols[None, :] * gd, mask=q_mask, other=0.0).to(ACC)
    lse = tl.load(lse_ptr + b * lb + h * lh + rows * ln, mask=rows < N, other=0.0).to(ACC)
    d = tl.load(d_ptr + bh * N + rows, mask=rows < N, other=0.0)
    dq = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    for start in range(0, M, BLOCK_M):
        keys = start + tl.arange(0, BLOCK_M)
        kv_mask = (keys < M)[:, None] & (cols < D)[None, :]
        k = tl.load(k_ptr + b * kb + h * kh + keys[:, None] * km + cols[None, :] * kd, mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + b * vb + h * vh + keys[:, None] * vm + cols[None, :] * vd, mask=kv_mask, other=0.0)
        k, v = k.to(ACC), v.to(ACC)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        visible = (rows < N)[:, None] & (keys < M)[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None])
        p = tl.where(visible, tl.exp(s - lse[:, None]), 0.0)
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - d[:, None])
        dq += tl.dot(ds, k, input_precision="ieee") * scale
    tl.store(dq_ptr + bh * N * D + rows[:, None] * D + cols[None, :], dq, mask=q_mask)


@wrong_("flash_backward", "written out: dK without the scale", says="scale is missing from dK")
def flash_backward_dk_unscaled(q, k, v, o, lse, do, scale, causal):
    B, H, N, D = q.shape
    M = k.shape[2]
    wide = q.dtype == torch.float64
    dq = torch.empty((B, H, N, D), dtype=q.dtype, device=q.device)
    dk = torch.empty((B, H, M, D), dtype=q.dtype, device=q.device)
    dv = torch.empty((B, H, M, D), dtype=q.dtype, device=q.device)
    d = torch.empty((B, H, N), dtype=torch.float64 if wide else torch.float32, device=q.device)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    acc = tl.float64 if wide else tl.float32
    _dk_unscaled_d_kernel[(B * H, triton.cdiv(N, 16))](o, do, d, H, N, D, *o.stride(), *do.stride(),
        BLOCK_N=16, BLOCK_D=BLOCK_D, ACC=acc)
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride(), *lse.stride())
    meta = dict(CAUSAL=causal, BLOCK_N=16, BLOCK_M=16, BLOCK_D=BLOCK_D, ACC=acc)
    _dk_unscaled_dkdv_kernel[(B * H, triton.cdiv(M, 16))](q, k, v, do, lse, d, dk, dv, H, N, M, D, scale, *strides,
        **meta)
    _dk_unscaled_dq_kernel[(B * H, triton.cdiv(N, 16))](q, k, v, do, lse, d, dq, H, N, M, D, scale, *strides,
        **meta)
    return dq, dk, dv


@triton.jit
def _stored_p_dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, d_ptr, p_ptr, dk_ptr, dv_ptr, H, N, M, D, scale,
        qb, qh, qn, qd, kb, kh, km, kd, vb, vh, vm, vd, gb, gh, gn, gd, lb, lh, ln,
        CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    keys = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    kv_mask = (keys < M)[:, None] & (cols < D)[None, :]
    k = tl.load(k_ptr + b * kb + h * kh + keys[:, None] * km + cols[None, :] * kd, mask=kv_mask, other=0.0).to(ACC)
    v = tl.load(v_ptr + b * vb + h * vh + keys[:, None] * vm + cols[None, :] * vd, mask=kv_mask, other=0.0).to(ACC)
    dk = tl.zeros([BLOCK_M, BLOCK_D], dtype=ACC)
    dv = tl.zeros([BLOCK_M, BLOCK_D], dtype=ACC)
    for start in range(0, N, BLOCK_N):
        rows = start + tl.arange(0, BLOCK_N)
        q_mask = (rows < N)[:, None] & (cols < D)[None, :]
        q = tl.load(q_ptr + b * qb + h * qh + rows[:, None] * qn + cols[None, :] * qd, mask=q_mask, other=0.0)
        do = tl.load(do_ptr + b * gb + h * gh + rows[:, None] * gn + cols[None, :] * gd, mask=q_mask, other=0.0)
        lse = tl.load(lse_ptr + b * lb + h * lh + rows * ln, mask=rows < N, other=0.0).to(ACC)
        d = tl.load(d_ptr + bh * N + rows, mask=rows < N, other=0.0)
        q, do = q.to(ACC), do.to(ACC)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        visible = (rows < N)[:, None] & (keys < M)[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None])
        p = tl.where(visible, tl.exp(s - lse[:, None]), 0.0)
        tl.store(p_ptr + bh * N * M + rows[:, None] * M + keys[None, :], p, mask=visible)  # kept for the dQ pass
        dv += tl.dot(tl.trans(p), do, input_precision="ieee")
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - d[:, None])
        dk += tl.dot(tl.trans(ds), q, input_precision="ieee") * scale
    tl.store(dk_ptr + bh * M * D + keys[:, None] * D + cols[None, :], dk, mask=kv_mask)
    tl.store(dv_ptr + bh * M * D + keys[:, None] * D + cols[None, :], dv, mask=kv_mask)


@triton.jit
def _stored_p_dq_kernel(k_ptr, v_ptr, do_ptr, d_ptr, p_ptr, dq_ptr, H, N, M, D, scale,
        kb, kh, km, kd, vb, vh, vm, vd, gb, gh, gn, gd,
        BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = block * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    q_mask = (rows < N)[:, None] & (cols < D)[None, :]
    do = tl.load(do_ptr + b * gb + h * gh + rows[:, None] * gn + cols[None, :] * gd, mask=q_mask, other=0.0).to(ACC)
    d = tl.load(d_ptr + bh * N + rows, mask=rows < N, other=0.0)
    dq = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    for start in range(0, M, BLOCK_M):
        keys = start + tl.arange(0, BLOCK_M)
        kv_mask = (keys < M)[:, None] & (cols < D)[None, :]
        k = tl.load(k_ptr + b * kb + h * kh + keys[:, None] * km + cols[None, :] * kd, mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + b * vb + h * vh + keys[:, None] * vm + cols[None, :] * vd, mask=kv_mask, other=0.0)
        p_mask = (rows < N)[:, None] & (keys < M)[None, :]
        p = tl.load(p_ptr + bh * N * M + rows[:, None] * M + keys[None, :], mask=p_mask, other=0.0)
        ds = p * (tl.dot(do, tl.trans(v.to(ACC)), input_precision="ieee") - d[:, None])
        dq += tl.dot(ds, k.to(ACC), input_precision="ieee") * scale
    tl.store(dq_ptr + bh * N * D + rows[:, None] * D + cols[None, :], dq, mask=q_mask)


@wrong_("flash_backward", "written out: P stored by the dK, dV pass into an N×M buffer, read back for dQ",
        says="stores P")
def flash_backward_stored_p(q, k, v, o, lse, do, scale, causal):
    B, H, N, D = q.shape
    M = k.shape[2]
    wide = q.dtype == torch.float64
    dq = torch.empty((B, H, N, D), dtype=q.dtype, device=q.device)
    dk = torch.empty((B, H, M, D), dtype=q.dtype, device=q.device)
    dv = torch.empty((B, H, M, D), dtype=q.dtype, device=q.device)
    d = torch.empty((B, H, N), dtype=torch.float64 if wide else torch.float32, device=q.device)
    p = torch.zeros((B, H, N, M), dtype=torch.float64 if wide else torch.float32, device=q.device)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    acc = tl.float64 if wide else tl.float32
    _no_d_d_kernel[(B * H, triton.cdiv(N, 16))](o, do, d, H, N, D, *o.stride(), *do.stride(),
        BLOCK_N=16, BLOCK_D=BLOCK_D, ACC=acc)
    _stored_p_dkdv_kernel[(B * H, triton.cdiv(M, 16))](q, k, v, do, lse, d, p, dk, dv, H, N, M, D, scale,
        *q.stride(), *k.stride(), *v.stride(), *do.stride(), *lse.stride(),
        CAUSAL=causal, BLOCK_N=16, BLOCK_M=16, BLOCK_D=BLOCK_D, ACC=acc)
    _stored_p_dq_kernel[(B * H, triton.cdiv(N, 16))](k, v, do, d, p, dq, H, N, M, D, scale,
        *k.stride(), *v.stride(), *do.stride(), BLOCK_N=16, BLOCK_M=16, BLOCK_D=BLOCK_D, ACC=acc)
    return dq, dk, dv


@triton.jit
def _atomic_dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, d_ptr, dq_ptr, dk_ptr, dv_ptr, H, N, M, D, scale,
        qb, qh, qn, qd, kb, kh, km, kd, vb, vh, vm, vd, gb, gh, gn, gd, lb, lh, ln,
        CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr,
        SKIP: tl.constexpr):
    """One program per block of keys: its dK and dV stored, its share of every query's dQ added atomically (as
    FlashAttention-2's backward); with SKIP and CAUSAL, the blocks of queries before its first key skipped."""
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    keys = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    kv_mask = (keys < M)[:, None] & (cols < D)[None, :]
    k = tl.load(k_ptr + b * kb + h * kh + keys[:, None] * km + cols[None, :] * kd, mask=kv_mask, other=0.0).to(ACC)
    v = tl.load(v_ptr + b * vb + h * vh + keys[:, None] * vm + cols[None, :] * vd, mask=kv_mask, other=0.0).to(ACC)
    dk = tl.zeros([BLOCK_M, BLOCK_D], dtype=ACC)
    dv = tl.zeros([BLOCK_M, BLOCK_D], dtype=ACC)
    lo = 0
    if SKIP and CAUSAL:
        lo = (block * BLOCK_M) // BLOCK_N * BLOCK_N
    for start in range(lo, N, BLOCK_N):
        rows = start + tl.arange(0, BLOCK_N)
        q_mask = (rows < N)[:, None] & (cols < D)[None, :]
        q = tl.load(q_ptr + b * qb + h * qh + rows[:, None] * qn + cols[None, :] * qd, mask=q_mask, other=0.0)
        do = tl.load(do_ptr + b * gb + h * gh + rows[:, None] * gn + cols[None, :] * gd, mask=q_mask, other=0.0)
        lse = tl.load(lse_ptr + b * lb + h * lh + rows * ln, mask=rows < N, other=0.0).to(ACC)
        d = tl.load(d_ptr + bh * N + rows, mask=rows < N, other=0.0)
        q, do = q.to(ACC), do.to(ACC)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        visible = (rows < N)[:, None] & (keys < M)[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None])
        p = tl.where(visible, tl.exp(s - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p), do, input_precision="ieee")
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - d[:, None])
        dk += tl.dot(tl.trans(ds), q, input_precision="ieee") * scale
        share = tl.dot(ds, k, input_precision="ieee") * scale
        tl.atomic_add(dq_ptr + bh * N * D + rows[:, None] * D + cols[None, :], share, mask=q_mask)
    tl.store(dk_ptr + bh * M * D + keys[:, None] * D + cols[None, :], dk, mask=kv_mask)
    tl.store(dv_ptr + bh * M * D + keys[:, None] * D + cols[None, :], dv, mask=kv_mask)


@right_("flash_backward", "written out: dQ by tl.atomic_add into a zeroed buffer, in the pass over blocks of keys, "
                          "every block of queries visited and masked (no causal skipping)")
def flash_backward_atomic_dq(q, k, v, o, lse, do, scale, causal, skip=False):
    B, H, N, D = q.shape
    M = k.shape[2]
    wide = q.dtype == torch.float64
    acc_dtype = torch.float64 if wide else torch.float32
    dq = torch.zeros((B, H, N, D), dtype=acc_dtype, device=q.device)  # atomics add into it
    dk = torch.empty((B, H, M, D), dtype=q.dtype, device=q.device)
    dv = torch.empty((B, H, M, D), dtype=q.dtype, device=q.device)
    d = torch.empty((B, H, N), dtype=acc_dtype, device=q.device)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    acc = tl.float64 if wide else tl.float32
    _no_d_d_kernel[(B * H, triton.cdiv(N, 16))](o, do, d, H, N, D, *o.stride(), *do.stride(),
        BLOCK_N=16, BLOCK_D=BLOCK_D, ACC=acc)
    _atomic_dq_kernel[(B * H, triton.cdiv(M, 16))](q, k, v, do, lse, d, dq, dk, dv, H, N, M, D, scale,
        *q.stride(), *k.stride(), *v.stride(), *do.stride(), *lse.stride(),
        CAUSAL=causal, BLOCK_N=16, BLOCK_M=16, BLOCK_D=BLOCK_D, ACC=acc, SKIP=skip)
    return dq.to(q.dtype), dk, dv


@right_("flash_backward", "written out: dQ by tl.atomic_add (FlashAttention-2), the blocks of queries before a "
                          "block's first key skipped under the causal mask")
def flash_backward_atomic_dq_skipping(q, k, v, o, lse, do, scale, causal):
    return flash_backward_atomic_dq(q, k, v, o, lse, do, scale, causal, skip=True)


@triton.jit
def _by_queries_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, dq_ptr, dk_ptr, dv_ptr, H, N, M, D, scale,
        qb, qh, qn, qd, kb, kh, km, kd, vb, vh, vm, vd, gb, gh, gn, gd, ob, oh, on, od, lb, lh, ln,
        o_ptr, CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
        ACC: tl.constexpr):
    """One program per block of queries, D computed in it: dQ stored, dK and dV added atomically per key block."""
    bh, block = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    rows = block * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    q_mask = (rows < N)[:, None] & (cols < D)[None, :]
    q = tl.load(q_ptr + b * qb + h * qh + rows[:, None] * qn + cols[None, :] * qd, mask=q_mask, other=0.0).to(ACC)
    do = tl.load(do_ptr + b * gb + h * gh + rows[:, None] * gn + cols[None, :] * gd, mask=q_mask, other=0.0).to(ACC)
    o = tl.load(o_ptr + b * ob + h * oh + rows[:, None] * on + cols[None, :] * od, mask=q_mask, other=0.0).to(ACC)
    lse = tl.load(lse_ptr + b * lb + h * lh + rows * ln, mask=rows < N, other=0.0).to(ACC)
    d = tl.sum(do * o, axis=1)
    dq = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    for start in range(0, M, BLOCK_M):
        keys = start + tl.arange(0, BLOCK_M)
        kv_mask = (keys < M)[:, None] & (cols < D)[None, :]
        k = tl.load(k_ptr + b * kb + h * kh + keys[:, None] * km + cols[None, :] * kd, mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + b * vb + h * vh + keys[:, None] * vm + cols[None, :] * vd, mask=kv_mask, other=0.0)
        k, v = k.to(ACC), v.to(ACC)
        visible = (rows < N)[:, None] & (keys < M)[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None])
        p = tl.where(visible, tl.exp(tl.dot(q, tl.trans(k), input_precision="ieee") * scale - lse[:, None]), 0.0)
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - d[:, None])
        dq += tl.dot(ds, k, input_precision="ieee") * scale
        where = bh * M * D + keys[:, None] * D + cols[None, :]
        tl.atomic_add(dk_ptr + where, tl.dot(tl.trans(ds), q, input_precision="ieee") * scale, mask=kv_mask)
        tl.atomic_add(dv_ptr + where, tl.dot(tl.trans(p), do, input_precision="ieee"), mask=kv_mask)
    tl.store(dq_ptr + bh * N * D + rows[:, None] * D + cols[None, :], dq, mask=q_mask)


@right_("flash_backward", "written out: one launch, a loop over blocks of keys in each program of a block of "
                          "queries (D in the same program), dK and dV by tl.atomic_add")
def flash_backward_by_query_blocks(q, k, v, o, lse, do, scale, causal):
    B, H, N, D = q.shape
    M = k.shape[2]
    wide = q.dtype == torch.float64
    acc_dtype = torch.float64 if wide else torch.float32
    dq = torch.empty((B, H, N, D), dtype=q.dtype, device=q.device)
    dk = torch.zeros((B, H, M, D), dtype=acc_dtype, device=q.device)
    dv = torch.zeros((B, H, M, D), dtype=acc_dtype, device=q.device)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    _by_queries_kernel[(B * H, triton.cdiv(N, 16))](q, k, v, do, lse, dq, dk, dv, H, N, M, D, scale,
        *q.stride(), *k.stride(), *v.stride(), *do.stride(), *o.stride(), *lse.stride(), o,
        CAUSAL=causal, BLOCK_N=16, BLOCK_M=16, BLOCK_D=BLOCK_D, ACC=tl.float64 if wide else tl.float32)
    return dq, dk.to(q.dtype), dv.to(q.dtype)


@wrong_("flash_backward", "written out: do read with o's strides (the same until do comes from .sum().backward(), "
                          "expanded from one number)", says="expanded do")
def flash_backward_do_read_like_o(q, k, v, o, lse, do, scale, causal):
    B, H, N, D = q.shape
    M = k.shape[2]
    wide = q.dtype == torch.float64
    acc_dtype = torch.float64 if wide else torch.float32
    dq = torch.empty((B, H, N, D), dtype=q.dtype, device=q.device)
    dk = torch.zeros((B, H, M, D), dtype=acc_dtype, device=q.device)
    dv = torch.zeros((B, H, M, D), dtype=acc_dtype, device=q.device)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    _by_queries_kernel[(B * H, triton.cdiv(N, 16))](q, k, v, do, lse, dq, dk, dv, H, N, M, D, scale,
        *q.stride(), *k.stride(), *v.stride(), *o.stride(), *o.stride(), *lse.stride(), o,
        CAUSAL=causal, BLOCK_N=16, BLOCK_M=16, BLOCK_D=BLOCK_D, ACC=tl.float64 if wide else tl.float32)
    return dq, dk.to(q.dtype), dv.to(q.dtype)


@wrong_("flash_backward", "written out: dq = torch.empty_like(q), stored at contiguous offsets (q's layout kept: "
                          "heads transposed)", says="wrong places")
def flash_backward_empty_like(q, k, v, o, lse, do, scale, causal):
    B, H, N, D = q.shape
    M = k.shape[2]
    wide = q.dtype == torch.float64
    acc_dtype = torch.float64 if wide else torch.float32
    dq = torch.empty_like(q)
    dk = torch.zeros((B, H, M, D), dtype=acc_dtype, device=q.device)
    dv = torch.zeros((B, H, M, D), dtype=acc_dtype, device=q.device)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    _by_queries_kernel[(B * H, triton.cdiv(N, 16))](q, k, v, do, lse, dq, dk, dv, H, N, M, D, scale,
        *q.stride(), *k.stride(), *v.stride(), *do.stride(), *o.stride(), *lse.stride(), o,
        CAUSAL=causal, BLOCK_N=16, BLOCK_M=16, BLOCK_D=BLOCK_D, ACC=tl.float64 if wide else tl.float32)
    return dq, dk.to(q.dtype), dv.to(q.dtype)


# FlashAttention -----------------------------------------------------------------------------------------------
@wrong_("FlashAttention", "written in torch: no kernel in either pass", says="launched no Triton kernel")
class FlashAttentionInTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal):
        import torch
        import torch.nn.functional as F
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        lse = torch.logsumexp(q @ k.mT * scale, dim=-1)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.scale, ctx.causal = scale, causal
        return o

    @staticmethod
    def backward(ctx, do):
        import torch
        q, k, v, o, lse = ctx.saved_tensors
        p = torch.softmax(q @ k.mT * ctx.scale, dim=-1)
        ds = p * (do @ v.mT - (do * o).sum(-1, keepdim=True))
        return ds @ k * ctx.scale, ds.mT @ q * ctx.scale, p.mT @ do, None, None


@wrong_("FlashAttention", "saves P as well, computed in torch from the forward's lse", says="saves only q, k, v, o")
class FlashAttentionSavesP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal):
        o, lse = flash_forward_lse_float32(q, k, v, scale, causal)
        p = torch.exp(q @ k.mT * scale - lse[..., None].to(q.dtype))
        ctx.save_for_backward(q, k, v, o, lse, p)
        ctx.scale, ctx.causal = scale, causal
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse, p = ctx.saved_tensors
        dq, dk, dv = flash_backward_atomic_dq(q, k, v, o, lse, do, ctx.scale, ctx.causal)
        return dq, dk, dv, None, None


@wrong_("FlashAttention", "backward passes causal=False on to flash_backward", says="dq")
class FlashAttentionBackwardNotCausal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal):
        o, lse = flash_forward_lse_float32(q, k, v, scale, causal)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.scale = scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = flash_backward_atomic_dq(q, k, v, o, lse, do, ctx.scale, False)
        return dq, dk, dv, None, None


@right_("FlashAttention", "forward by blocks of 32 queries, dQ by atomics")
class FlashAttentionAtomic(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal):
        o, lse = flash_forward_blocks_of_32(q, k, v, scale, causal)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.scale, ctx.causal = scale, causal
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        return (*flash_backward_atomic_dq(q, k, v, o, lse, do, ctx.scale, ctx.causal), None, None)


@wrong_("FlashAttention", "forward's running max starts at 0: rows whose scores are all below −88 come out NaN",
        says="running max start at 0")
class FlashAttentionMaxAtZero(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal):
        o, lse = _fwd_variant(q, k, v, scale, causal, max_at_zero=True)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.scale, ctx.causal = scale, causal
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        return (*flash_backward_atomic_dq(q, k, v, o, lse, do, ctx.scale, ctx.causal), None, None)


@wrong_("FlashAttention", "backward allocates dq = torch.empty_like(q) and stores it at contiguous offsets",
        says="wrong places")
class FlashAttentionEmptyLike(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal):
        o, lse = _fwd_variant(q, k, v, scale, causal)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.scale, ctx.causal = scale, causal
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        return (*flash_backward_empty_like(q, k, v, o, lse, do, ctx.scale, ctx.causal), None, None)


@right_("FlashAttention", "forward skipping the hidden key blocks, backward by atomics skipping them too")
class FlashAttentionSkipping(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal):
        o, lse = flash_forward_skips_hidden_blocks(q, k, v, scale, causal)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.scale, ctx.causal = scale, causal
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        return (*flash_backward_atomic_dq_skipping(q, k, v, o, lse, do, ctx.scale, ctx.causal), None, None)
