"""Notebook 09: the bugs learners write in Triton kernels and the functions that launch them; correct
answers written differently from the solution.

Every entry is checked by tests/test_mutants.py: a `wrong` one must fail some grade cell of its name
with a GradingError, a `right` one must pass all of them, in plain and in trusted grading. `@triton.jit`
needs a kernel's source, so the kernels live at module level and the entries launch them. The first
wrong entry of `TritonRMSNorm` (the first graded name in sorted order) launches nothing itself: it calls
the notebook's `rmsnorm_forward` and `rmsnorm_backward` (here, the correct ones defined below), so the
nbgrader end-to-end test can paste it beside a perfect submission's functions.

Most bugs are planted through a switch. Each of the kernels `_silu_fwd`, `_silu_bwd`, `_rms_fwd` and
`_rms_bwd` takes `BUG` (a `tl.constexpr`, so each value compiles a kernel of its own), whose values are
that kernel's own constants, defined above it and named after it (`SILU_FWD_NO_PROGRAM_ID`, ..., listed in
`SILU_FWD_BUGS`); without `BUG` it is the right kernel. A comment at each switch says what it changes.
Each kernel is launched with a bug only through its launcher (`_silu`, `_silu_grad`, `_rms_forward`,
`_rms_grad_x`), which refuses another kernel's bug (`MisroutedBug`): no line of this kernel would match
it, so it would compile the right kernel under a wrong entry's name (tests/test_mutants.py misroutes
every entry's bugs to prove it). Other entries are written out whole, as learners write them (labels that
begin "written out", and the last section): a kernel of their own above the function that launches it.

Some kernels here read and write past their tensors (no mask): Triton's interpreter does not fault on
that, it corrupts memory. Launch them only through the checks, which hand out sentinel-padded buffers.
"""
import functools

import torch

from autograder.learner import triton_setup
from mutants import right, wrong

triton_setup.prepare()

import triton  # noqa: E402  (after prepare(): it sets TRITON_INTERPRET=1 where there is no CUDA)
import triton.language as tl  # noqa: E402

NB = "09_kernels"
wrong_ = functools.partial(wrong, NB)
right_ = functools.partial(right, NB)

BLOCK_LIMIT = 4096  # the notebook's rule: a block holds at most this many elements


class MisroutedBug(ValueError):
    """A launcher was handed a bug of another kernel, which its kernel would ignore."""


def _own(bugs, bug):
    """`bug` where it is None (the right kernel) or one of `bugs`, the launched kernel's own."""
    if bug is None or bug.value in [own.value for own in bugs]:
        return bug
    raise MisroutedBug(f"{bug.value!r} is no bug of this kernel, whose bugs are {[own.value for own in bugs]}")


def _blocks(n, block):
    return (triton.cdiv(n, block),)


def _accumulator(dtype):
    """float64 sums for float64 tensors, float32 for the rest (without torch.promote_types: an ATen op)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _launch(kernel, *tensors, out, block=1024, **constexprs):
    """`kernel(*tensors, out, n, BLOCK=block)` over the tensors as they are, one program per block of `out`."""
    if out.numel():
        kernel[_blocks(out.numel(), block)](*tensors, out, out.numel(), BLOCK=block, **constexprs)
    return out


def _elementwise(kernel, *tensors, block=1024, **constexprs):
    """Launch `kernel` over contiguous copies of `tensors`; the output is like the first."""
    tensors = [t.contiguous() for t in tensors]
    return _launch(kernel, *tensors, out=torch.empty_like(tensors[0]), block=block, **constexprs)


@triton.jit
def _wide(x):
    """x in the dtype the kernels below compute in: float16 and bfloat16 widened to float32, float32 and float64
    as they are (the right kernels load through it; tl.store converts back)."""
    if x.dtype == tl.float16 or x.dtype == tl.bfloat16:
        x = x.to(tl.float32)
    return x


# SiLU kernels --------------------------------------------------------------------------------------------
# _silu_fwd's bugs (constexpr globals: a kernel may read no other kind)
SILU_FWD_NO_PROGRAM_ID = tl.constexpr("_silu_fwd: no program id")
SILU_FWD_UNSTABLE_SIGMOID = tl.constexpr("_silu_fwd: unstable sigmoid")
SILU_FWD_FLOAT32_MATHS = tl.constexpr("_silu_fwd: float32 maths")
SILU_FWD_BUGS = (SILU_FWD_NO_PROGRAM_ID, SILU_FWD_UNSTABLE_SIGMOID, SILU_FWD_FLOAT32_MATHS)


@triton.jit
def _silu_fwd(x_ptr, y_ptr, n, BLOCK: tl.constexpr, BUG: tl.constexpr = None):
    """y = x * sigmoid(x) on this program's block; BUG: one of SILU_FWD_BUGS."""
    pid = tl.program_id(0)
    if BUG == SILU_FWD_NO_PROGRAM_ID:
        pid = 0  # bug: every program computes the first block
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = _wide(tl.load(x_ptr + offs, mask=mask))
    if BUG == SILU_FWD_FLOAT32_MATHS:
        x = x.to(tl.float32)  # bug: float64 inputs lose their precision
    s = tl.sigmoid(x)
    if BUG == SILU_FWD_UNSTABLE_SIGMOID:
        s = tl.exp(x) / (1 + tl.exp(x))  # bug: inf / inf = NaN for large x
    tl.store(y_ptr + offs, x * s, mask=mask)


def _silu(x, block=1024, bug=None):
    """silu(x) by one launch of _silu_fwd; `bug`: one of SILU_FWD_BUGS."""
    return _elementwise(_silu_fwd, x, block=block, BUG=_own(SILU_FWD_BUGS, bug))


# _silu_bwd's bugs
SILU_BWD_NO_MASK = tl.constexpr("_silu_bwd: no mask")
SILU_BWD_UNSTABLE_SIGMOID = tl.constexpr("_silu_bwd: unstable sigmoid")
SILU_BWD_NO_PRODUCT_RULE = tl.constexpr("_silu_bwd: no product rule")
SILU_BWD_SIGMOID_DERIVATIVE = tl.constexpr("_silu_bwd: sigmoid derivative")
SILU_BWD_NO_GRAD_OUT = tl.constexpr("_silu_bwd: no grad_out")
SILU_BWD_BUGS = (SILU_BWD_NO_MASK, SILU_BWD_UNSTABLE_SIGMOID, SILU_BWD_NO_PRODUCT_RULE, SILU_BWD_SIGMOID_DERIVATIVE,
                 SILU_BWD_NO_GRAD_OUT)


@triton.jit
def _silu_bwd(x_ptr, g_ptr, dx_ptr, n, BLOCK: tl.constexpr, BUG: tl.constexpr = None):
    """dx = g * silu'(x) on this program's block; BUG: one of SILU_BWD_BUGS."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if BUG == SILU_BWD_NO_MASK:
        x = tl.load(x_ptr + offs)  # bug: no mask, the last block reads past the tensors
        g = tl.load(g_ptr + offs)
    else:
        x = _wide(tl.load(x_ptr + offs, mask=mask))
        g = _wide(tl.load(g_ptr + offs, mask=mask))
    s = tl.sigmoid(x)
    if BUG == SILU_BWD_UNSTABLE_SIGMOID:
        s = tl.exp(x) / (1 + tl.exp(x))  # bug: inf / inf = NaN for large x
    ds = s * (1 + x * (1 - s))  # silu'(x)
    if BUG == SILU_BWD_NO_PRODUCT_RULE:
        ds = s  # bug: no product rule, s taken as a constant
    if BUG == SILU_BWD_SIGMOID_DERIVATIVE:
        ds = s * (1 - s)  # bug: differentiates the sigmoid alone
    dx = g * ds
    if BUG == SILU_BWD_NO_GRAD_OUT:
        dx = ds  # bug: forgets grad_out
    if BUG == SILU_BWD_NO_MASK:
        tl.store(dx_ptr + offs, dx)  # bug: and writes past dx
    else:
        tl.store(dx_ptr + offs, dx, mask=mask)


def _silu_grad(x, grad_out, block=1024, bug=None):
    """grad_out * silu'(x) by one launch of _silu_bwd; `bug`: one of SILU_BWD_BUGS."""
    return _elementwise(_silu_bwd, x, grad_out, block=block, BUG=_own(SILU_BWD_BUGS, bug))


@triton.jit
def _stable_sigmoid(x):
    z = tl.exp(-tl.abs(x))  # never overflows: exp of a number <= 0
    return tl.where(x >= 0, 1 / (1 + z), z / (1 + z))


@triton.jit
def _silu_fwd_two_branch(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """y = x * sigmoid(x), the sigmoid in two branches from exp(-|x|)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = _wide(tl.load(x_ptr + offs, mask=mask))
    tl.store(y_ptr + offs, x * _stable_sigmoid(x), mask=mask)


@triton.jit
def _silu_bwd_from_y(x_ptr, g_ptr, dx_ptr, n, BLOCK: tl.constexpr):
    """dx = g * (s + y (1 - s)) with y = x s: silu' written from y, the sigmoid in two branches."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = _wide(tl.load(x_ptr + offs, mask=mask))
    s = _stable_sigmoid(x)
    tl.store(dx_ptr + offs, _wide(tl.load(g_ptr + offs, mask=mask)) * (s + x * s * (1 - s)), mask=mask)



@triton.jit
def _silu_fwd_strided(x_ptr, y_ptr, n, size1, size2, size3, stride0, stride1, stride2, stride3,
                      BLOCK: tl.constexpr):
    """x of up to 4 dims read through its strides; y contiguous."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    i3 = offs % size3
    i2 = (offs // size3) % size2
    i1 = (offs // (size3 * size2)) % size1
    i0 = offs // (size3 * size2 * size1)
    x = _wide(tl.load(x_ptr + i0 * stride0 + i1 * stride1 + i2 * stride2 + i3 * stride3, mask=mask))
    tl.store(y_ptr + offs, x * tl.sigmoid(x), mask=mask)


@triton.jit
def _sigmoid(x_ptr, s_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(s_ptr + offs, tl.sigmoid(tl.load(x_ptr + offs, mask=mask)), mask=mask)


@triton.jit
def _multiply(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=mask) * tl.load(b_ptr + offs, mask=mask), mask=mask)


@triton.jit
def _silu_fwd_and_sigmoid(x_ptr, s_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    s = tl.sigmoid(x)
    tl.store(s_ptr + offs, s, mask=mask)
    tl.store(y_ptr + offs, x * s, mask=mask)


@triton.jit
def _silu_bwd_given_sigmoid(x_ptr, s_ptr, g_ptr, dx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    s = tl.load(s_ptr + offs, mask=mask)
    tl.store(dx_ptr + offs, tl.load(g_ptr + offs, mask=mask) * s * (1 + x * (1 - s)), mask=mask)


# silu_forward(x) -----------------------------------------------------------------------------------------
@triton.jit
def silu_no_mask_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)  # bug: no mask, the last block reads past the tensor
    z = tl.exp(-tl.abs(x))
    s = tl.where(x >= 0, 1 / (1 + z), z / (1 + z))
    tl.store(y_ptr + offsets, x * s)  # and writes past y


@wrong_("silu_forward", "written out: loads and stores without a mask, so the last block reads and writes past the "
                        "tensor", says="wrote outside")
def silu_forward_no_mask(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    if x.numel() == 0:
        return y
    BLOCK = 1024
    silu_no_mask_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK)
    return y


@wrong_("silu_forward", "offsets without the program id: every program computes the first block")
def silu_forward_no_program_id(x):
    return _silu(x, bug=SILU_FWD_NO_PROGRAM_ID)


@wrong_("silu_forward", "sigmoid as exp(x) / (1 + exp(x)): inf / inf = NaN for large x", says="special points")
def silu_forward_unstable_sigmoid(x):
    return _silu(x, bug=SILU_FWD_UNSTABLE_SIGMOID)


@wrong_("silu_forward", "no kernel: x * torch.sigmoid(x)")
def silu_forward_torch(x):
    return x * torch.sigmoid(x)


@wrong_("silu_forward", "a kernel for the sigmoid, then the product in torch")
def silu_forward_kernel_then_torch(x):
    return x * _elementwise(_sigmoid, x)


@wrong_("silu_forward", "two launches: a sigmoid kernel, then a multiply kernel")
def silu_forward_two_launches(x):
    x = x.contiguous()
    return _elementwise(_multiply, x, _elementwise(_sigmoid, x))


@wrong_("silu_forward", "passes a non-contiguous x as it is: flat offsets read the wrong elements",
        says="non-contiguous")
def silu_forward_ignores_strides(x):
    return _launch(_silu_fwd, x, out=torch.empty(x.shape, dtype=x.dtype, device=x.device))


@wrong_("silu_forward", "a grid of n // BLOCK programs: the last, partial block is never computed")
def silu_forward_floor_grid(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    if x.numel() >= 256:
        _silu_fwd[(x.numel() // 256,)](x, y, x.numel(), BLOCK=256)
    return y


@wrong_("silu_forward", "allocates y with torch.empty(x.shape): float32 whatever x's dtype")
def silu_forward_float32_output(x):
    x = x.contiguous()
    return _launch(_silu_fwd, x, out=torch.empty(x.shape, device=x.device))


@wrong_("silu_forward", "stores y over x (y_ptr = x) and returns x: the input is overwritten")
def silu_forward_in_place(x):
    return _launch(_silu_fwd, x, out=x)


@wrong_("silu_forward", "BLOCK = 1000: tl.arange needs a power of two")
def silu_forward_block_1000(x):
    return _silu(x, block=1000)


@wrong_("silu_forward", "computes in float32 (x.to(tl.float32)): float64 inputs lose their precision")
def silu_forward_float32_maths(x):
    return _silu(x, bug=SILU_FWD_FLOAT32_MATHS)


@wrong_("silu_forward", "one program with BLOCK = next_power_of_2(n): a block past BLOCK_LIMIT")
def silu_forward_one_program(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    if x.numel():
        _silu_fwd[(1,)](x, y, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    return y


@right_("silu_forward", "tl.sigmoid, blocks of 256")
def silu_forward_block_256(x):
    return _silu(x, block=256)


@triton.jit
def silu_formula_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if x.dtype != tl.float64:
        x = x.to(tl.float32)  # float16 and bfloat16 computed in float32
    y = x / (1 + tl.exp(-x))  # exp(-x) is inf for very negative x, and x / inf = 0
    tl.store(y_ptr + offsets, y, mask=mask)


@right_("silu_forward", "written out: x / (1 + exp(-x)), where exp(-x) overflows to inf for very negative x, and "
                        "x / inf = 0")
def silu_forward_formula(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    if x.numel() == 0:
        return y
    BLOCK = 1024
    silu_formula_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK)
    return y


@right_("silu_forward", "a stable two-branch sigmoid from exp(-|x|)")
def silu_forward_two_branch(x):
    return _elementwise(_silu_fwd_two_branch, x, block=512)


@right_("silu_forward", "reads x through its strides (up to 4 dims) instead of copying it")
def silu_forward_strided(x):
    if x.dim() > 4:
        x = x.contiguous()
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    sizes = [1] * (4 - x.dim()) + list(x.shape)
    strides = [0] * (4 - x.dim()) + list(x.stride())
    if x.numel():
        _silu_fwd_strided[_blocks(x.numel(), 1024)](x, y, x.numel(), *sizes[1:], *strides, BLOCK=1024)
    return y


# silu_backward(x, grad_out) ------------------------------------------------------------------------------
@wrong_("silu_backward", "drops the product rule: grad_out * sigmoid(x)")
def silu_backward_no_product_rule(x, grad_out):
    return _silu_grad(x, grad_out, bug=SILU_BWD_NO_PRODUCT_RULE)


@wrong_("silu_backward", "the derivative of the sigmoid alone: grad_out * s (1 - s)")
def silu_backward_sigmoid_derivative(x, grad_out):
    return _silu_grad(x, grad_out, bug=SILU_BWD_SIGMOID_DERIVATIVE)


@wrong_("silu_backward", "forgets grad_out: returns silu'(x)")
def silu_backward_no_grad_out(x, grad_out):
    return _silu_grad(x, grad_out, bug=SILU_BWD_NO_GRAD_OUT)


@wrong_("silu_backward", "sigmoid as exp(x) / (1 + exp(x)): NaN for large x", says="special points")
def silu_backward_unstable_sigmoid(x, grad_out):
    return _silu_grad(x, grad_out, bug=SILU_BWD_UNSTABLE_SIGMOID)


@wrong_("silu_backward", "loads and stores without a mask")
def silu_backward_no_mask(x, grad_out):
    return _silu_grad(x, grad_out, bug=SILU_BWD_NO_MASK)


@wrong_("silu_backward", "no kernel: asks autograd for the derivative of F.silu")
def silu_backward_autograd(x, grad_out):
    with torch.enable_grad():
        leaf = x.detach().requires_grad_(True)
        return torch.autograd.grad(torch.nn.functional.silu(leaf), leaf, grad_out)[0]


@wrong_("silu_backward", "two launches: the sigmoid in one kernel, the gradient in another")
def silu_backward_two_launches(x, grad_out):
    x, grad_out = x.contiguous(), grad_out.contiguous()
    return _launch(_silu_bwd_given_sigmoid, x, _elementwise(_sigmoid, x), grad_out, out=torch.empty_like(x))


@wrong_("silu_backward", "passes a non-contiguous x as it is: flat offsets read the wrong elements",
        says="non-contiguous")
def silu_backward_ignores_strides(x, grad_out):
    grad_out = grad_out.contiguous()
    return _launch(_silu_bwd, x, grad_out, out=torch.empty_like(grad_out))


@right_("silu_backward", "s + y (1 - s) with y = x s, a stable two-branch sigmoid, blocks of 512")
def silu_backward_from_y(x, grad_out):
    return _elementwise(_silu_bwd_from_y, x, grad_out, block=512)


@right_("silu_backward", "s (1 + x (1 - s)) with tl.sigmoid, blocks of 128")
def silu_backward_block_128(x, grad_out):
    return _silu_grad(x, grad_out, block=128)


# TritonSiLU ----------------------------------------------------------------------------------------------
class _TritonSiLUBase(torch.autograd.Function):
    """A correct TritonSiLU on the kernels above; the wrong entries below override one method."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _silu(x)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return _silu_grad(x, grad_out)


@wrong_("TritonSiLU", "saves y instead of x, and backward treats it as x")
class TritonSiLUSavesY(_TritonSiLUBase):
    @staticmethod
    def forward(ctx, x):
        y = _silu(x)
        ctx.save_for_backward(y)
        return y


@wrong_("TritonSiLU", "saves x and sigmoid(x): right gradients, but backward reads twice the bytes it needs")
class TritonSiLUSavesSigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        s = torch.empty_like(x)
        y = _launch(_silu_fwd_and_sigmoid, x, s, out=torch.empty_like(x))  # fills s too
        ctx.save_for_backward(x, s)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        x, s = ctx.saved_tensors
        return _launch(_silu_bwd_given_sigmoid, x, s, grad_out.contiguous(), out=torch.empty_like(x))


@wrong_("TritonSiLU", "backward in torch: no kernel for the gradient")
class TritonSiLUTorchBackward(_TritonSiLUBase):
    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad_out * s * (1 + x * (1 - s))


@wrong_("TritonSiLU", "forward by F.silu: no kernel for the forward pass")
class TritonSiLUTorchForward(_TritonSiLUBase):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.silu(x)


@wrong_("TritonSiLU", "backward forgets grad_out")
class TritonSiLUNoGradOut(_TritonSiLUBase):
    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return _silu_grad(x, grad_out, bug=SILU_BWD_NO_GRAD_OUT)


@right_("TritonSiLU", "saves x; the strided forward kernel, the y-based backward kernel")
class TritonSiLUStrided(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return silu_forward_strided(x)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return silu_backward_from_y(x, grad_out)


@right_("TritonSiLU", "saves x; forward and backward with blocks of 256")
class TritonSiLUBlocks(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _silu(x, block=256)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return _silu_grad(x, grad_out, block=256)


# RMSNorm forward kernels: one program per row ------------------------------------------------------------
# _rms_fwd's bugs
RMS_FWD_NO_PROGRAM_ID = tl.constexpr("_rms_fwd: no program id")
RMS_FWD_ONE_BLOCK = tl.constexpr("_rms_fwd: one block")
RMS_FWD_CENTRED = tl.constexpr("_rms_fwd: centred")
RMS_FWD_OTHER_ONE = tl.constexpr("_rms_fwd: other=1.0")
RMS_FWD_MEAN_OVER_BLOCK = tl.constexpr("_rms_fwd: mean over the block")
RMS_FWD_EPS_OUTSIDE = tl.constexpr("_rms_fwd: eps outside the square root")
RMS_FWD_NO_EPS = tl.constexpr("_rms_fwd: no eps")
RMS_FWD_NO_WEIGHT = tl.constexpr("_rms_fwd: no weight")
RMS_FWD_STORE_AT_X_OFFSETS = tl.constexpr("_rms_fwd: stores at x's offsets")
RMS_FWD_BUGS = (RMS_FWD_NO_PROGRAM_ID, RMS_FWD_ONE_BLOCK, RMS_FWD_CENTRED, RMS_FWD_OTHER_ONE, RMS_FWD_MEAN_OVER_BLOCK,
                RMS_FWD_EPS_OUTSIDE, RMS_FWD_NO_EPS, RMS_FWD_NO_WEIGHT, RMS_FWD_STORE_AT_X_OFFSETS)


@triton.jit
def _rms_fwd(x_ptr, w_ptr, y_ptr, rstd_ptr, cols, stride_r, stride_c, eps, BLOCK: tl.constexpr,
             BUG: tl.constexpr = None):
    """rstd = 1 / sqrt(mean(x^2) + eps) of the program's row, read through its strides, and y = x * rstd * w,
    contiguous; a loop over column blocks. BUG: one of RMS_FWD_BUGS."""
    row = tl.program_id(0)
    if BUG == RMS_FWD_NO_PROGRAM_ID:
        row = 0  # bug: every program normalises the first row
    end = cols
    if BUG == RMS_FWD_ONE_BLOCK:
        end = BLOCK  # bug: no loop, columns past the first block are neither counted nor written
    x_row = x_ptr + row * stride_r
    if BUG == RMS_FWD_CENTRED:  # bug: LayerNorm's statistic, the variance about the row's mean
        total = tl.zeros([BLOCK], dtype=x_ptr.dtype.element_ty)
        for start in range(0, end, BLOCK):
            c = start + tl.arange(0, BLOCK)
            total += tl.load(x_row + c * stride_c, mask=c < cols, other=0.0)
        mean = tl.sum(total) / cols
    pad = 0.0
    if BUG == RMS_FWD_OTHER_ONE:
        pad = 1.0  # bug: each padding lane adds 1 to the sum of squares
    acc = _wide(tl.zeros([BLOCK], dtype=x_ptr.dtype.element_ty))
    for start in range(0, end, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = _wide(tl.load(x_row + c * stride_c, mask=c < cols, other=pad))
        if BUG == RMS_FWD_CENTRED:
            x = tl.where(c < cols, x - mean, 0.0)
        acc += x * x
    count = cols
    if BUG == RMS_FWD_MEAN_OVER_BLOCK:
        count = BLOCK  # bug: divides by BLOCK, not by the number of columns
    rstd = 1 / tl.sqrt(tl.sum(acc) / count + eps)
    if BUG == RMS_FWD_EPS_OUTSIDE:
        rstd = 1 / (tl.sqrt(tl.sum(acc) / count) + eps)  # bug: eps outside the square root
    if BUG == RMS_FWD_NO_EPS:
        rstd = 1 / tl.sqrt(tl.sum(acc) / count)  # bug: forgets eps
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, end, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = _wide(tl.load(x_row + c * stride_c, mask=c < cols))
        y = x * rstd * _wide(tl.load(w_ptr + c, mask=c < cols))
        if BUG == RMS_FWD_NO_WEIGHT:
            y = x * rstd  # bug: forgets the weight
        y_offsets = row * cols + c
        if BUG == RMS_FWD_STORE_AT_X_OFFSETS:
            y_offsets = row * stride_r + c * stride_c  # bug: right for a contiguous x, past y for a strided one
        tl.store(y_ptr + y_offsets, y, mask=c < cols)


def _rms_forward(x, weight, eps, block=256, contiguous=True, rstd=None, strides=None, bug=None):
    """Launch _rms_fwd, one program per row; `rstd`: the buffer to fill (default: (rows,), the accumulator's
    dtype); `strides`: the ones the kernel is told instead of x's; `bug`: one of RMS_FWD_BUGS."""
    if contiguous:
        x = x.contiguous()
    weight = weight.contiguous()
    rows, cols = x.shape
    y = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    rstd = torch.empty(rows, dtype=_accumulator(x.dtype), device=x.device) if rstd is None else rstd
    if rows:
        _rms_fwd[(rows,)](x, weight, y, rstd, cols, *(strides or x.stride()), eps, BLOCK=block,
                          BUG=_own(RMS_FWD_BUGS, bug))
    return y, rstd


# rmsnorm_forward(x, weight, eps) -------------------------------------------------------------------------
@wrong_("rmsnorm_forward", "other=1.0 in the masked load of the sum of squares: each padding lane adds 1")
def rmsnorm_forward_other_one(x, weight, eps):
    return _rms_forward(x, weight, eps, bug=RMS_FWD_OTHER_ONE)


@wrong_("rmsnorm_forward", "subtracts the row's mean before squaring: that is LayerNorm's rstd")
def rmsnorm_forward_centred(x, weight, eps):
    return _rms_forward(x, weight, eps, bug=RMS_FWD_CENTRED)


@wrong_("rmsnorm_forward", "eps outside the square root: 1 / (sqrt(mean(x^2)) + eps)")
def rmsnorm_forward_eps_outside(x, weight, eps):
    return _rms_forward(x, weight, eps, bug=RMS_FWD_EPS_OUTSIDE)


@wrong_("rmsnorm_forward", "rstd of shape (rows, 1)")
def rmsnorm_forward_rstd_column(x, weight, eps):
    return _rms_forward(x, weight, eps, rstd=torch.empty((x.shape[0], 1), dtype=x.dtype, device=x.device))


@wrong_("rmsnorm_forward", "rstd allocated with torch.empty(rows): float32 whatever x's dtype")
def rmsnorm_forward_rstd_float32(x, weight, eps):
    return _rms_forward(x, weight, eps, rstd=torch.empty(x.shape[0], device=x.device))


@wrong_("rmsnorm_forward", "one block of 1024 columns and no loop: wider rows lose their tail", says="wide")
def rmsnorm_forward_one_block_1024(x, weight, eps):
    return _rms_forward(x, weight, eps, block=1024, bug=RMS_FWD_ONE_BLOCK)


@wrong_("rmsnorm_forward", "one block of next_power_of_2(cols) and no loop: a block of 8192 for 5000 columns, past "
                           "BLOCK_LIMIT", says="wide")
def rmsnorm_forward_unbounded_block(x, weight, eps):
    return _rms_forward(x, weight, eps, block=triton.next_power_of_2(max(x.shape[1], 1)), bug=RMS_FWD_ONE_BLOCK)


@wrong_("rmsnorm_forward", "forgets eps: 1 / sqrt(mean(x^2))")
def rmsnorm_forward_no_eps(x, weight, eps):
    return _rms_forward(x, weight, eps, bug=RMS_FWD_NO_EPS)


@wrong_("rmsnorm_forward", "stores y at x's strided offsets: past y for a non-contiguous x", says="non-contiguous")
def rmsnorm_forward_stores_with_x_strides(x, weight, eps):
    return _rms_forward(x, weight, eps, contiguous=False, bug=RMS_FWD_STORE_AT_X_OFFSETS)


@wrong_("rmsnorm_forward", "divides the sum of squares by BLOCK, not by the number of columns")
def rmsnorm_forward_mean_over_block(x, weight, eps):
    return _rms_forward(x, weight, eps, bug=RMS_FWD_MEAN_OVER_BLOCK)


@wrong_("rmsnorm_forward", "forgets the weight: y = x * rstd")
def rmsnorm_forward_no_weight(x, weight, eps):
    return _rms_forward(x, weight, eps, bug=RMS_FWD_NO_WEIGHT)


@wrong_("rmsnorm_forward", "row offsets without the program id: every program normalises the first row")
def rmsnorm_forward_no_program_id(x, weight, eps):
    return _rms_forward(x, weight, eps, bug=RMS_FWD_NO_PROGRAM_ID)


@triton.jit
def rmsnorm_scale_kernel(x_ptr, w_ptr, rstd_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    rstd = tl.load(rstd_ptr + row)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * cols + c, mask=c < cols)
        w = tl.load(w_ptr + c, mask=c < cols)
        tl.store(y_ptr + row * cols + c, x * rstd * w, mask=c < cols)


@wrong_("rmsnorm_forward", "written out: rstd in torch (x.pow(2).mean(-1) ...), a kernel only for y",
        says="outside your kernel")
def rmsnorm_forward_torch_rstd(x, weight, eps):
    x = x.contiguous()
    rows, cols = x.shape
    rstd = torch.rsqrt(x.pow(2).mean(-1) + eps)  # bug: torch maths outside the kernel
    y = torch.empty_like(x)
    if rows == 0 or cols == 0:
        return y, rstd
    rmsnorm_scale_kernel[(rows,)](x, weight, rstd, y, cols, BLOCK=min(1024, triton.next_power_of_2(cols)))
    return y, rstd


@wrong_("rmsnorm_forward", "passes a non-contiguous x as it is with row stride = cols", says="non-contiguous")
def rmsnorm_forward_ignores_strides(x, weight, eps):
    return _rms_forward(x, weight, eps, contiguous=False, strides=(x.shape[1], 1))


@right_("rmsnorm_forward", "a loop over column blocks of 256, x read through its strides")
def rmsnorm_forward(x, weight, eps):
    return _rms_forward(x, weight, eps, contiguous=False)


@right_("rmsnorm_forward", "x.contiguous(), one block of next_power_of_2(cols) (looping only past BLOCK_LIMIT)")
def rmsnorm_forward_one_block(x, weight, eps):
    block = min(triton.next_power_of_2(max(x.shape[1], 1)), BLOCK_LIMIT)
    return _rms_forward(x, weight, eps, block=block)


# RMSNorm backward kernels: grad_x = rstd g w - x rstd^3 sum(g w x) / cols; grad_weight = sum over rows of g x rstd
# _rms_bwd's bugs
RMS_BWD_OTHER_ONE = tl.constexpr("_rms_bwd: other=1.0")
RMS_BWD_RSTD_ONCE = tl.constexpr("_rms_bwd: rstd once")
RMS_BWD_NO_MEAN_TERM = tl.constexpr("_rms_bwd: no mean term")
RMS_BWD_WEIGHT_WITHOUT_RSTD = tl.constexpr("_rms_bwd: weight gradient without rstd")
RMS_BWD_BUGS = (RMS_BWD_OTHER_ONE, RMS_BWD_RSTD_ONCE, RMS_BWD_NO_MEAN_TERM, RMS_BWD_WEIGHT_WITHOUT_RSTD)


@triton.jit
def _rms_bwd(g_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_ptr, rows, cols, stride_r, stride_c, ROWS: tl.constexpr,
             BLOCK: tl.constexpr, ATOMIC: tl.constexpr = False, BUG: tl.constexpr = None):
    """ROWS rows per program, x read through its strides; program p adds its rows' g x rstd into row p of
    dw (partial sums), or with ATOMIC into dw itself, by tl.atomic_add. BUG: one of RMS_BWD_BUGS."""
    p = tl.program_id(0)
    pad = 0.0
    if BUG == RMS_BWD_OTHER_ONE:
        pad = 1.0  # bug: the masked loads of the row's sum of g w x pad with ones
    for r in range(ROWS):
        row = p * ROWS + r
        if row < rows:
            x_row = x_ptr + row * stride_r
            rstd = _wide(tl.load(rstd_ptr + row))
            dot = _wide(tl.zeros([BLOCK], dtype=x_ptr.dtype.element_ty))
            for start in range(0, cols, BLOCK):
                c = start + tl.arange(0, BLOCK)
                x = _wide(tl.load(x_row + c * stride_c, mask=c < cols, other=pad))
                g = _wide(tl.load(g_ptr + row * cols + c, mask=c < cols, other=pad))
                dot += g * _wide(tl.load(w_ptr + c, mask=c < cols, other=pad)) * x
            k = rstd * rstd * rstd * tl.sum(dot) / cols
            if BUG == RMS_BWD_RSTD_ONCE:
                k = rstd * tl.sum(dot) / cols  # bug: the mean term scaled by rstd, not rstd^3
            for start in range(0, cols, BLOCK):
                c = start + tl.arange(0, BLOCK)
                x = _wide(tl.load(x_row + c * stride_c, mask=c < cols, other=0.0))
                g = _wide(tl.load(g_ptr + row * cols + c, mask=c < cols, other=0.0))
                dx = rstd * g * _wide(tl.load(w_ptr + c, mask=c < cols))
                if BUG != RMS_BWD_NO_MEAN_TERM:  # the bug drops the mean term
                    dx -= x * k
                tl.store(dx_ptr + row * cols + c, dx, mask=c < cols)
                dw = g * x * rstd
                if BUG == RMS_BWD_WEIGHT_WITHOUT_RSTD:
                    dw = g * x  # bug: forgets rstd
                if ATOMIC:
                    tl.atomic_add(dw_ptr + c, dw, mask=c < cols)
                else:
                    part = tl.load(dw_ptr + p * cols + c, mask=c < cols)
                    tl.store(dw_ptr + p * cols + c, part + dw, mask=c < cols)


@triton.jit
def _sum_rows(partial_ptr, out_ptr, rows, cols, BLOCK: tl.constexpr):
    """out[c] = sum over rows of partial[:, c], one column block per program, cast to out's dtype."""
    c = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=partial_ptr.dtype.element_ty)
    for r in range(rows):
        acc += tl.load(partial_ptr + r * cols + c, mask=c < cols, other=0.0)
    tl.store(out_ptr + c, acc.to(out_ptr.dtype.element_ty), mask=c < cols)


@triton.jit
def _cast(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask).to(dst_ptr.dtype.element_ty), mask=mask)


def _rms_grad_x(grad_out, x, weight, rstd, dw, rows_per_program=1, block=256, strides=None, atomic=False, bug=None):
    """grad_x by one launch of _rms_bwd, which adds grad_weight's terms into `dw` (by atomics with `atomic`);
    `strides`: the ones the kernel is told instead of x's; `bug`: one of RMS_BWD_BUGS."""
    grad_out, weight, rstd = grad_out.contiguous(), weight.contiguous(), rstd.contiguous()
    rows, cols = x.shape
    grad_x = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    if rows:
        _rms_bwd[(triton.cdiv(rows, rows_per_program),)](grad_out, x, weight, rstd, grad_x, dw, rows, cols,
                                                         *(strides or x.stride()), ROWS=rows_per_program,
                                                         BLOCK=block, ATOMIC=atomic, BUG=_own(RMS_BWD_BUGS, bug))
    return grad_x


def _sum_partials(partial, weight, block=256):
    """grad_weight, in weight's dtype: partial's column sums, by a second kernel."""
    grad_weight = torch.empty_like(weight)
    if partial.shape[1]:
        _sum_rows[_blocks(partial.shape[1], block)](partial, grad_weight, *partial.shape, BLOCK=block)
    return grad_weight


def _rms_backward_rows(grad_out, x, weight, rstd, first_only=False, bug=None):
    """One row per program, each with its own row of partial sums of grad_weight, reduced by a second kernel
    (`first_only`: or grad_weight is the first program's partial sum)."""
    partial = torch.zeros(x.shape, dtype=_accumulator(weight.dtype), device=x.device)
    grad_x = _rms_grad_x(grad_out, x.contiguous(), weight, rstd, partial, bug=bug)
    return grad_x, partial[0] if first_only else _sum_partials(partial, weight)


# rmsnorm_backward(grad_out, x, weight, rstd) -------------------------------------------------------------
@wrong_("rmsnorm_backward", "grad_weight is the first program's partial sum: not reduced across programs")
def rmsnorm_backward_first_partial(grad_out, x, weight, rstd):
    return _rms_backward_rows(grad_out, x, weight, rstd, first_only=True)


@wrong_("rmsnorm_backward", "grad_x without the mean term: g * w * rstd")
def rmsnorm_backward_no_mean_term(grad_out, x, weight, rstd):
    return _rms_backward_rows(grad_out, x, weight, rstd, bug=RMS_BWD_NO_MEAN_TERM)


@wrong_("rmsnorm_backward", "the mean term scaled by rstd, not rstd^3")
def rmsnorm_backward_rstd_once(grad_out, x, weight, rstd):
    return _rms_backward_rows(grad_out, x, weight, rstd, bug=RMS_BWD_RSTD_ONCE)


@wrong_("rmsnorm_backward", "other=1.0 in the masked loads of the row's sum of g w x")
def rmsnorm_backward_other_one(grad_out, x, weight, rstd):
    return _rms_backward_rows(grad_out, x, weight, rstd, bug=RMS_BWD_OTHER_ONE)


@triton.jit
def rmsnorm_backward_no_other_kernel(g_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_ptr, cols, x_row, x_col,
                                     BLOCK: tl.constexpr):
    row = tl.program_id(0)
    rstd = tl.load(rstd_ptr + row)
    acc = tl.zeros([BLOCK], dtype=x_ptr.dtype.element_ty)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        g = tl.load(g_ptr + row * cols + c, mask=c < cols)  # bug: no other=0.0 in the loads of the row's sum
        x = tl.load(x_ptr + row * x_row + c * x_col, mask=c < cols)
        w = tl.load(w_ptr + c, mask=c < cols)
        acc += g * w * x
    coupling = tl.sum(acc) * rstd * rstd * rstd / cols
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        mask = c < cols
        g = tl.load(g_ptr + row * cols + c, mask=mask)
        x = tl.load(x_ptr + row * x_row + c * x_col, mask=mask)
        w = tl.load(w_ptr + c, mask=mask)
        tl.store(dx_ptr + row * cols + c, rstd * g * w - coupling * x, mask=mask)
        tl.atomic_add(dw_ptr + c, g * x * rstd, mask=mask)


@wrong_("rmsnorm_backward", "written out: the loads of the row's sum of g w x have a mask and no other=, so on a GPU "
                            "the masked-off lanes add whatever the registers held", says="NaN where PyTorch has none")
def rmsnorm_backward_no_other(grad_out, x, weight, rstd):
    grad_out, weight, rstd = grad_out.contiguous(), weight.contiguous(), rstd.contiguous()
    rows, cols = x.shape
    grad_x = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    grad_weight = torch.zeros(cols, dtype=x.dtype, device=x.device)
    if rows == 0 or cols == 0:
        return grad_x, grad_weight
    BLOCK = min(1024, triton.next_power_of_2(cols))
    rmsnorm_backward_no_other_kernel[(rows,)](grad_out, x, weight, rstd, grad_x, grad_weight, cols, x.stride(0),
                                              x.stride(1), BLOCK=BLOCK)
    return grad_x, grad_weight


@wrong_("rmsnorm_backward", "grad_weight = sum of g x: forgets rstd")
def rmsnorm_backward_weight_without_rstd(grad_out, x, weight, rstd):
    return _rms_backward_rows(grad_out, x, weight, rstd, bug=RMS_BWD_WEIGHT_WITHOUT_RSTD)


@wrong_("rmsnorm_backward", "atomic_add into torch.empty: grad_weight starts from whatever the memory held")
def rmsnorm_backward_atomic_into_empty(grad_out, x, weight, rstd):
    grad_weight = torch.empty_like(weight)
    return _rms_grad_x(grad_out, x.contiguous(), weight, rstd, grad_weight, atomic=True), grad_weight


@wrong_("rmsnorm_backward", "grad_weight in torch: (grad_out * x * rstd[:, None]).sum(0)")
def rmsnorm_backward_torch_weight(grad_out, x, weight, rstd):
    grad_x, _ = _rms_backward_rows(grad_out, x, weight, rstd)
    return grad_x, (grad_out * x * rstd[:, None]).sum(0)


@wrong_("rmsnorm_backward", "passes a non-contiguous x as it is: flat row offsets read the wrong elements",
        says="non-contiguous")
def rmsnorm_backward_ignores_strides(grad_out, x, weight, rstd):
    grad_weight = torch.zeros_like(weight)
    return _rms_grad_x(grad_out, x, weight, rstd, grad_weight, strides=(x.shape[1], 1), atomic=True), grad_weight


@wrong_("rmsnorm_backward", "atomic_add into torch.zeros(cols, dtype=torch.float32), returned as it is: float32 for "
                            "float64 weights")
def rmsnorm_backward_float32_weight_grad(grad_out, x, weight, rstd):
    grad_weight = torch.zeros(x.shape[1], dtype=torch.float32, device=x.device)
    return _rms_grad_x(grad_out, x.contiguous(), weight, rstd, grad_weight, atomic=True), grad_weight


@right_("rmsnorm_backward", "4 rows per program, x read through its strides, partial sums reduced by a second kernel")
def rmsnorm_backward(grad_out, x, weight, rstd):
    rows, cols = x.shape
    partial = torch.zeros((triton.cdiv(rows, 4), cols), dtype=_accumulator(x.dtype), device=x.device)
    grad_x = _rms_grad_x(grad_out, x, weight, rstd, partial, rows_per_program=4, block=128)
    return grad_x, _sum_partials(partial, weight, block=128)


@right_("rmsnorm_backward", "tl.atomic_add into a zeroed float32 (float64 for float64) buffer, cast by a kernel")
def rmsnorm_backward_atomic(grad_out, x, weight, rstd):
    total = torch.zeros(x.shape[1], dtype=_accumulator(weight.dtype), device=x.device)
    grad_x = _rms_grad_x(grad_out, x.contiguous(), weight, rstd, total, block=512, atomic=True)
    if total.dtype == weight.dtype:
        return grad_x, total
    return grad_x, _launch(_cast, total, out=torch.empty_like(weight))


# TritonRMSNorm -------------------------------------------------------------------------------------------
@wrong_("TritonRMSNorm", "forward returns rmsnorm_forward's (y, rstd): apply gives a tuple, not y")
class TritonRMSNormReturnsTuple(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps=1e-6):
        out = rmsnorm_forward(x, weight, eps)
        ctx.save_for_backward(x, weight, out[1])
        return out

    @staticmethod
    def backward(ctx, grad_y, grad_rstd):
        x, weight, rstd = ctx.saved_tensors
        grad_x, grad_weight = rmsnorm_backward(grad_y, x, weight, rstd)
        return grad_x, grad_weight, None


class _TritonRMSNormBase(torch.autograd.Function):
    """A correct TritonRMSNorm on the functions above; the wrong entries below override one method."""

    @staticmethod
    def forward(ctx, x, weight, eps=1e-6):
        y, rstd = rmsnorm_forward(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, rstd = ctx.saved_tensors
        grad_x, grad_weight = rmsnorm_backward(grad_out, x, weight, rstd)
        return grad_x, grad_weight, None


@wrong_("TritonRMSNorm", "backward returns None for the weight's gradient")
class TritonRMSNormNoWeightGrad(_TritonRMSNormBase):
    @staticmethod
    def backward(ctx, grad_out):
        x, weight, rstd = ctx.saved_tensors
        return rmsnorm_backward(grad_out, x, weight, rstd)[0], None, None


@wrong_("TritonRMSNorm", "backward returns no None for eps")
class TritonRMSNormTwoGradients(_TritonRMSNormBase):
    @staticmethod
    def backward(ctx, grad_out):
        x, weight, rstd = ctx.saved_tensors
        return rmsnorm_backward(grad_out, x, weight, rstd)


@wrong_("TritonRMSNorm", "backward passes x where grad_out goes and grad_out where x goes")
class TritonRMSNormSwapped(_TritonRMSNormBase):
    @staticmethod
    def backward(ctx, grad_out):
        x, weight, rstd = ctx.saved_tensors
        grad_x, grad_weight = rmsnorm_backward(x, grad_out, weight, rstd)
        return grad_x, grad_weight, None


@wrong_("TritonRMSNorm", "forward in torch (x * rsqrt(mean(x^2) + eps) * weight): no kernel")
class TritonRMSNormTorchForward(_TritonRMSNormBase):
    @staticmethod
    def forward(ctx, x, weight, eps=1e-6):
        rstd = torch.rsqrt(x.pow(2).mean(-1) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return x * rstd[:, None] * weight


@wrong_("TritonRMSNorm", "saves the LayerNorm rstd: the forward kernel subtracts the mean")
class TritonRMSNormCentred(_TritonRMSNormBase):
    @staticmethod
    def forward(ctx, x, weight, eps=1e-6):
        y, rstd = rmsnorm_forward_centred(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y


@right_("TritonRMSNorm", "saves x, weight and rstd; strided forward, partial sums reduced by a second kernel")
class TritonRMSNormPartials(_TritonRMSNormBase):
    pass


@right_("TritonRMSNorm", "one block per row, x.contiguous() first, grad_weight by atomics")
class TritonRMSNormAtomic(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = rmsnorm_forward_one_block(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, rstd = ctx.saved_tensors
        return *rmsnorm_backward_atomic(grad_out, x, weight, rstd), None


@right_("TritonRMSNorm", "saves x and weight only; backward recomputes rstd with the forward kernel (06's trade)")
class TritonRMSNormRecomputes(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.eps = eps
        ctx.save_for_backward(x, weight)
        return rmsnorm_forward(x, weight, eps)[0]

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        rstd = rmsnorm_forward(x, weight, ctx.eps)[1]
        return *rmsnorm_backward(grad_out, x, weight, rstd), None


# What Triton's interpreter hides and a GPU shows (issue 31), each written out in full as a learner writes it --
@triton.jit
def _rms_bwd_into_one_row(g_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_ptr, cols, stride_r, stride_c,
                          ACC: tl.constexpr, BLOCK: tl.constexpr):
    """One program per row: the row's grad_x, and its share of grad_weight loaded, added and stored back into
    the one grad_weight row that every program shares (plain tl.load and tl.store: a race)."""
    row = tl.program_id(0)
    x_row = x_ptr + row * stride_r
    rstd = tl.load(rstd_ptr + row).to(ACC)
    dot = tl.zeros([BLOCK], dtype=ACC)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + c * stride_c, mask=c < cols, other=0.0).to(ACC)
        g = tl.load(g_ptr + row * cols + c, mask=c < cols, other=0.0).to(ACC)
        dot += g * tl.load(w_ptr + c, mask=c < cols, other=0.0).to(ACC) * x
    k = rstd * rstd * rstd * tl.sum(dot) / cols
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        mask = c < cols
        x = tl.load(x_row + c * stride_c, mask=mask, other=0.0).to(ACC)
        g = tl.load(g_ptr + row * cols + c, mask=mask, other=0.0).to(ACC)
        w = tl.load(w_ptr + c, mask=mask, other=0.0).to(ACC)
        tl.store(dx_ptr + row * cols + c, (rstd * g * w - x * k).to(dx_ptr.dtype.element_ty), mask=mask)
        total = tl.load(dw_ptr + c, mask=mask, other=0.0)  # bug: every program reads and writes this row
        tl.store(dw_ptr + c, total + g * x * rstd, mask=mask)


@triton.jit
def _rms_cast(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n).to(dst_ptr.dtype.element_ty), mask=offs < n)


@wrong_("rmsnorm_backward", "one program per row, each loading, adding and storing its share of grad_weight into the "
                            "one shared row with tl.load and tl.store: a race (right values only in the interpreter, "
                            "which runs the programs one after another)", says="both stored to")
def rmsnorm_backward_shared_row(grad_out, x, weight, rstd):
    grad_out, weight, rstd = grad_out.contiguous(), weight.contiguous(), rstd.contiguous()
    rows, cols = x.shape
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    grad_x = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    total = torch.zeros(cols, dtype=acc, device=x.device)
    grad_weight = torch.empty_like(weight)
    if rows and cols:
        _rms_bwd_into_one_row[(rows,)](grad_out, x, weight, rstd, grad_x, total, cols, x.stride(0), x.stride(1),
                                       ACC=tl.float64 if acc == torch.float64 else tl.float32,
                                       BLOCK=min(triton.next_power_of_2(cols), 1024))
    if cols:
        _rms_cast[(triton.cdiv(cols, 1024),)](total, grad_weight, cols, BLOCK=1024)
    return grad_x, grad_weight


@triton.jit
def _rms_fwd_sum_without_other(x_ptr, w_ptr, y_ptr, rstd_ptr, cols, stride_r, stride_c, eps,
                               ACC: tl.constexpr, BLOCK: tl.constexpr):
    """One program per row: rstd from the sum of squares over column blocks, then y = x * rstd * w."""
    row = tl.program_id(0)
    x_row = x_ptr + row * stride_r
    acc = tl.zeros([BLOCK], dtype=ACC)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + c * stride_c, mask=c < cols).to(ACC)  # bug: no other=, the masked-off lanes are summed
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc) / cols + eps)
    tl.store(rstd_ptr + row, rstd.to(rstd_ptr.dtype.element_ty))
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + c * stride_c, mask=c < cols).to(ACC)
        w = tl.load(w_ptr + c, mask=c < cols).to(ACC)
        tl.store(y_ptr + row * cols + c, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=c < cols)


@wrong_("rmsnorm_forward", "the sum of squares loads x with mask= and no other=: the masked-off lanes, zeros in the "
                           "interpreter, are whatever the registers held on a GPU", says="no other=")
def rmsnorm_forward_sum_without_other(x, weight, eps):
    weight = weight.contiguous()
    rows, cols = x.shape
    y = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    rstd = torch.empty(rows, dtype=x.dtype, device=x.device)
    if rows and cols:
        _rms_fwd_sum_without_other[(rows,)](x, weight, y, rstd, cols, x.stride(0), x.stride(1), eps,
                                            ACC=tl.float64 if x.dtype == torch.float64 else tl.float32,
                                            BLOCK=min(triton.next_power_of_2(cols), 1024))
    return y, rstd


@triton.jit
def _rms_bwd_partial_rows(g_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, part_ptr, rows, cols, stride_r, stride_c,
                          ACC: tl.constexpr, BLOCK: tl.constexpr):
    """Rows pid, pid + programs, ...: the grad_x of each, and their share of grad_weight added into row pid
    of part (this program's own row)."""
    pid = tl.program_id(0)
    for row in range(pid, rows, tl.num_programs(0)):
        x_row = x_ptr + row * stride_r
        rstd = tl.load(rstd_ptr + row).to(ACC)
        dot = tl.zeros([BLOCK], dtype=ACC)
        for start in range(0, cols, BLOCK):
            c = start + tl.arange(0, BLOCK)
            x = tl.load(x_row + c * stride_c, mask=c < cols, other=0.0).to(ACC)
            g = tl.load(g_ptr + row * cols + c, mask=c < cols, other=0.0).to(ACC)
            dot += g * tl.load(w_ptr + c, mask=c < cols, other=0.0).to(ACC) * x
        k = rstd * rstd * rstd * tl.sum(dot) / cols
        for start in range(0, cols, BLOCK):
            c = start + tl.arange(0, BLOCK)
            mask = c < cols
            x = tl.load(x_row + c * stride_c, mask=mask, other=0.0).to(ACC)
            g = tl.load(g_ptr + row * cols + c, mask=mask, other=0.0).to(ACC)
            w = tl.load(w_ptr + c, mask=mask, other=0.0).to(ACC)
            tl.store(dx_ptr + row * cols + c, (rstd * g * w - x * k).to(dx_ptr.dtype.element_ty), mask=mask)
            part = tl.load(part_ptr + pid * cols + c, mask=mask, other=0.0)
            tl.store(part_ptr + pid * cols + c, part + g * x * rstd, mask=mask)


@triton.jit
def _rms_sum_partials(part_ptr, dw_ptr, parts, cols, BLOCK: tl.constexpr):
    """dw[c] = the sum over p of part[p, c], for this program's block of columns."""
    c = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=part_ptr.dtype.element_ty)
    for p in range(0, parts):
        acc += tl.load(part_ptr + p * cols + c, mask=c < cols, other=0.0)
    tl.store(dw_ptr + c, acc.to(dw_ptr.dtype.element_ty), mask=c < cols)


@wrong_("rmsnorm_backward", "partial sums of grad_weight in a buffer from torch.empty: each program adds into its "
                            "own row, which starts from whatever the memory held", says="never initialised")
def rmsnorm_backward_partials_in_empty(grad_out, x, weight, rstd):
    grad_out, weight, rstd = grad_out.contiguous(), weight.contiguous(), rstd.contiguous()
    rows, cols = x.shape
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    grad_x = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    grad_weight = torch.empty_like(weight)
    if rows == 0 or cols == 0:
        return grad_x, torch.zeros_like(weight)
    programs = min(rows, 64)
    partial = torch.empty((programs, cols), dtype=acc, device=x.device)  # bug: torch.zeros
    _rms_bwd_partial_rows[(programs,)](grad_out, x, weight, rstd, grad_x, partial, rows, cols, x.stride(0),
                                       x.stride(1), ACC=tl.float64 if acc == torch.float64 else tl.float32,
                                       BLOCK=min(triton.next_power_of_2(cols), 1024))
    _rms_sum_partials[(triton.cdiv(cols, 128),)](partial, grad_weight, programs, cols, BLOCK=128)
    return grad_x, grad_weight


# Each input in its own layout, and half precision (issue 31) ------------------------------------------------
@triton.jit
def rmsnorm_backward_x_strides_kernel(g_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_ptr, cols, x_row, x_col,
                                      ACC: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    rstd = tl.load(rstd_ptr + row).to(ACC)
    dot = tl.zeros([BLOCK], dtype=ACC)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        mask = c < cols
        g = tl.load(g_ptr + row * x_row + c * x_col, mask=mask, other=0.0).to(ACC)  # bug: grad_out with x's strides
        x = tl.load(x_ptr + row * x_row + c * x_col, mask=mask, other=0.0).to(ACC)
        w = tl.load(w_ptr + c, mask=mask, other=0.0).to(ACC)
        dot += g * w * x
    coupling = tl.sum(dot) * rstd * rstd * rstd / cols
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        mask = c < cols
        g = tl.load(g_ptr + row * x_row + c * x_col, mask=mask).to(ACC)
        x = tl.load(x_ptr + row * x_row + c * x_col, mask=mask).to(ACC)
        w = tl.load(w_ptr + c, mask=mask).to(ACC)
        tl.store(dx_ptr + row * cols + c, rstd * g * w - coupling * x, mask=mask)
        tl.atomic_add(dw_ptr + c, g * x * rstd, mask=mask)


@wrong_("rmsnorm_backward", "written out: reads grad_out with x's strides, right while both share one layout; the "
                            "grad_out of .sum().backward() is one number expanded (strides (0, 0)), and the kernel "
                            "reads past it", says="fails for an expanded grad_out")
def rmsnorm_backward_grad_out_with_x_strides(grad_out, x, weight, rstd):
    weight, rstd = weight.contiguous(), rstd.contiguous()
    rows, cols = x.shape
    wide = x.dtype == torch.float64
    grad_x = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    total = torch.zeros(cols, dtype=torch.float64 if wide else torch.float32, device=x.device)
    if rows and cols:
        rmsnorm_backward_x_strides_kernel[(rows,)](grad_out, x, weight, rstd, grad_x, total, cols, x.stride(0),
                                                   x.stride(1), ACC=tl.float64 if wide else tl.float32,
                                                   BLOCK=min(triton.next_power_of_2(cols), 1024))
    return grad_x, total.to(x.dtype)


@wrong_("TritonRMSNorm", "written out: its backward reads grad_out with x's strides (the rmsnorm_backward above), so "
                         "TritonRMSNorm.apply(x, w, eps).sum().backward() reads past the one number grad_out holds",
        says="fails for an expanded grad_out")
class TritonRMSNormGradOutWithXStrides(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = rmsnorm_forward(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, rstd = ctx.saved_tensors
        grad_x, grad_weight = rmsnorm_backward_grad_out_with_x_strides(grad_out, x, weight, rstd)
        return grad_x, grad_weight, None


@triton.jit
def rmsnorm_forward_input_dtype_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, cols, x_row, x_col, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=x_ptr.dtype.element_ty)  # bug: float16 and bfloat16 rows summed in float16, bfloat16
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * x_row + c * x_col, mask=c < cols, other=0.0)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc) / cols + eps)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        mask = c < cols
        x = tl.load(x_ptr + row * x_row + c * x_col, mask=mask)
        w = tl.load(w_ptr + c, mask=mask)
        tl.store(y_ptr + row * cols + c, x * rstd * w, mask=mask)


@wrong_("rmsnorm_forward", "written out: the sum of squares in x's dtype (tl.zeros with dtype=x_ptr.dtype.element_ty), "
                           "a half-precision accumulator for float16 and bfloat16 rows: 300 * 300 overflows float16",
        says="half-precision accumulator")
def rmsnorm_forward_input_dtype_accumulator(x, weight, eps):
    weight = weight.contiguous()
    rows, cols = x.shape
    y = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    rstd = torch.empty(rows, dtype=torch.float64 if x.dtype == torch.float64 else torch.float32, device=x.device)
    if rows and cols:
        rmsnorm_forward_input_dtype_kernel[(rows,)](x, weight, y, rstd, cols, x.stride(0), x.stride(1), eps,
                                                    BLOCK=min(triton.next_power_of_2(cols), 1024))
    return y, rstd


@triton.jit
def rmsnorm_backward_input_dtype_kernel(g_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_ptr, cols, x_row, x_col,
                                        BLOCK: tl.constexpr):
    row = tl.program_id(0)
    rstd = tl.load(rstd_ptr + row).to(x_ptr.dtype.element_ty)  # bug: rstd, and every sum below, in x's dtype
    dot = tl.zeros([BLOCK], dtype=x_ptr.dtype.element_ty)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        mask = c < cols
        g = tl.load(g_ptr + row * cols + c, mask=mask, other=0.0)
        x = tl.load(x_ptr + row * x_row + c * x_col, mask=mask, other=0.0)
        dot += g * tl.load(w_ptr + c, mask=mask, other=0.0) * x
    coupling = tl.sum(dot) * rstd * rstd * rstd / cols
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        mask = c < cols
        g = tl.load(g_ptr + row * cols + c, mask=mask)
        x = tl.load(x_ptr + row * x_row + c * x_col, mask=mask)
        tl.store(dx_ptr + row * cols + c, rstd * g * tl.load(w_ptr + c, mask=mask) - coupling * x, mask=mask)
        tl.atomic_add(dw_ptr + c, g * x * rstd, mask=mask)


@wrong_("rmsnorm_backward", "written out: rstd and the row's sum of g w x in x's dtype, a half-precision accumulator "
                            "for float16 rows, where the sum overflows and rstd cubed underflows",
        says="half-precision accumulator")
def rmsnorm_backward_input_dtype_accumulator(grad_out, x, weight, rstd):
    grad_out, weight, rstd = grad_out.contiguous(), weight.contiguous(), rstd.contiguous()
    rows, cols = x.shape
    grad_x = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    grad_weight = torch.zeros(cols, dtype=x.dtype, device=x.device)
    if rows and cols:
        rmsnorm_backward_input_dtype_kernel[(rows,)](grad_out, x, weight, rstd, grad_x, grad_weight, cols,
                                                     x.stride(0), x.stride(1),
                                                     BLOCK=min(triton.next_power_of_2(cols), 1024))
    return grad_x, grad_weight


@triton.jit
def silu_input_dtype_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)  # bug: computes in x's dtype, float16 and bfloat16 included
    z = tl.exp(-tl.abs(x))
    tl.store(y_ptr + offsets, x * tl.where(x >= 0, 1 / (1 + z), z / (1 + z)), mask=mask)


@wrong_("silu_forward", "written out: computes in x's dtype; tl.exp takes only float32 and float64, so float16 fails",
        says="fails for a float16 x")
def silu_forward_input_dtype(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    if x.numel():
        silu_input_dtype_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y


@triton.jit
def rmsnorm_forward_weight_strided_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, cols, x_row, x_col, w_step, eps,
                                          BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=rstd_ptr.dtype.element_ty)  # rstd's dtype: float32, or float64 for float64 x
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * x_row + c * x_col, mask=c < cols, other=0.0).to(rstd_ptr.dtype.element_ty)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc) / cols + eps)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        mask = c < cols
        x = tl.load(x_ptr + row * x_row + c * x_col, mask=mask).to(rstd_ptr.dtype.element_ty)
        w = tl.load(w_ptr + c * w_step, mask=mask).to(rstd_ptr.dtype.element_ty)
        tl.store(y_ptr + row * cols + c, x * rstd * w, mask=mask)


@right_("rmsnorm_forward", "written out: x and weight read through their own strides, no copy; the sums in rstd's "
                           "dtype, float32 (float64 for float64)")
def rmsnorm_forward_weight_strided(x, weight, eps):
    rows, cols = x.shape
    y = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    rstd = torch.empty(rows, dtype=torch.float64 if x.dtype == torch.float64 else torch.float32, device=x.device)
    if rows and cols:
        rmsnorm_forward_weight_strided_kernel[(rows,)](x, weight, y, rstd, cols, x.stride(0), x.stride(1),
                                                       weight.stride(0), eps,
                                                       BLOCK=min(triton.next_power_of_2(cols), 512))
    return y, rstd


@triton.jit
def rmsnorm_backward_own_strides_kernel(g_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_ptr, cols, g_row, g_col, x_row,
                                        x_col, w_step, rstd_step, ACC: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    rstd = tl.load(rstd_ptr + row * rstd_step).to(ACC)
    dot = tl.zeros([BLOCK], dtype=ACC)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        mask = c < cols
        g = tl.load(g_ptr + row * g_row + c * g_col, mask=mask, other=0.0).to(ACC)
        x = tl.load(x_ptr + row * x_row + c * x_col, mask=mask, other=0.0).to(ACC)
        dot += g * tl.load(w_ptr + c * w_step, mask=mask, other=0.0).to(ACC) * x
    coupling = tl.sum(dot) * rstd * rstd * rstd / cols
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        mask = c < cols
        g = tl.load(g_ptr + row * g_row + c * g_col, mask=mask).to(ACC)
        x = tl.load(x_ptr + row * x_row + c * x_col, mask=mask).to(ACC)
        w = tl.load(w_ptr + c * w_step, mask=mask).to(ACC)
        tl.store(dx_ptr + row * cols + c, rstd * g * w - coupling * x, mask=mask)
        tl.atomic_add(dw_ptr + c, g * x * rstd, mask=mask)


@right_("rmsnorm_backward", "written out: every input read through its own strides, no copy (an expanded grad_out "
                            "too); grad_weight by tl.atomic_add into zeroed float32 (float64 for float64)")
def rmsnorm_backward_own_strides(grad_out, x, weight, rstd):
    rows, cols = x.shape
    wide = x.dtype == torch.float64
    grad_x = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    total = torch.zeros(cols, dtype=torch.float64 if wide else torch.float32, device=x.device)
    if rows and cols:
        rmsnorm_backward_own_strides_kernel[(rows,)](grad_out, x, weight, rstd, grad_x, total, cols,
                                                     grad_out.stride(0), grad_out.stride(1), x.stride(0),
                                                     x.stride(1), weight.stride(0), rstd.stride(0),
                                                     ACC=tl.float64 if wide else tl.float32,
                                                     BLOCK=min(triton.next_power_of_2(cols), 1024))
    return grad_x, total.to(x.dtype)


@right_("TritonRMSNorm", "written out: the two functions above, which read every input through its own strides: "
                         "backward takes grad_out as autograd hands it, expanded after .sum()")
class TritonRMSNormOwnStrides(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = rmsnorm_forward_weight_strided(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, rstd = ctx.saved_tensors
        grad_x, grad_weight = rmsnorm_backward_own_strides(grad_out, x, weight, rstd)
        return grad_x, grad_weight, None
