"""The guards inside the learner's kernel notice being switched off (issue 36): a refusal of autograd that did not
take or was undone (a module's `__class__` swapped, a door put back), the profile watch removed (sys.setprofile),
a dispatch watch disabled or popped (torch._C._DisableTorchDispatch, the private mode-stack helpers), the kernel
guard's launch counters put back; and notebook 09's guard refuses NumPy and Python-number maths outside a kernel.
Each test is an attack a hostile learner wrote, and the message that names it; the right answers of 09 and 10 still
pass (tests/test_mutants.py runs the catalogue, tests/test_kernel_checks.py the guard's own right kernels).
"""
import sys
import types

import numpy as np
import pytest
import torch
from torch.utils import _python_dispatch as python_dispatch

from autograder import checks
from autograder.checks import GradingError
from autograder.learner import triton_setup

TRITON = triton_setup.prepare()
import triton  # noqa: E402  (after prepare(): TRITON_INTERPRET must be set first)
import triton.language as tl  # noqa: E402

from autograder.checks import kernel_guard  # noqa: E402
from autograder.checks import nb09_kernels as kc  # noqa: E402
from autograder.checks.nb07_by_hand.calls import guarded  # noqa: E402

REAL_GRAD = torch.autograd.grad
REAL_RUNS = {cls: vars(cls)["run"] for cls in kernel_guard.kernel_classes()}  # Triton's own, before any guard
SWITCHED_OFF = "your code switched off the grader's watch of"


def failure(fn, *args, **options):
    """The message of `call_student` on `fn(*args)`."""
    with pytest.raises(GradingError) as err:
        checks.call_student("ex", fn, *args, **options)
    return str(err.value)


def by_hand_failure(fn, x):
    """The message of 07's guarded call (autograd refused, ATen backward kernels watched) on `fn(x)`."""
    with pytest.raises(GradingError) as err:
        guarded("ex", fn, [x], {"x": x})
    return str(err.value)


def clean_stacks():
    return torch._C._len_torch_dispatch_stack() == 0 and not torch.overrides._get_current_function_mode_stack()


# --- the refusals of autograd -----------------------------------------------------------------------------------
class SetsNothing(types.ModuleType):
    def __setattr__(self, name, value):
        pass


class KeepsGrad(types.ModuleType):
    grad = property(lambda self: REAL_GRAD, lambda self, value: None)


@pytest.mark.parametrize("cls, says", [
    (SetsNothing, "before the call (torch.autograd's class is SetsNothing, whose __setattr__ is not Python's own"),
    (KeepsGrad, "before the call (torch.autograd.grad stayed as it was when the grader replaced it with a refusal"),
])
def test_a_module_whose_class_was_swapped_fails_before_the_call(cls, says):
    def cheat(x):
        x = x.clone().requires_grad_()
        return REAL_GRAD((x ** 2).sum(), x)[0]

    torch.autograd.__class__ = cls
    try:
        text = failure(cheat, torch.ones(2), no_autograd=True)
    finally:
        object.__setattr__(torch.autograd, "__class__", types.ModuleType)  # past SetsNothing's __setattr__
    assert f"ex: {SWITCHED_OFF} autograd {says}" in text
    assert type(torch.autograd) is types.ModuleType and torch.autograd.grad is REAL_GRAD  # as it was


def test_a_door_put_back_during_the_call_fails_and_an_honest_call_still_passes():
    def reopens(x):
        torch.autograd.grad = REAL_GRAD
        return 2 * x

    text = failure(reopens, torch.ones(2), no_autograd=True)
    assert "during the call (torch.autograd.grad no longer held the grader's refusal at the end)" in text
    assert torch.equal(checks.call_student("ex", lambda x: 2 * x, torch.ones(2), no_autograd=True), 2 * torch.ones(2))
    assert torch.autograd.grad is REAL_GRAD


# --- the profile watch of forbidden calls --------------------------------------------------------------------------
def test_the_profile_watch_removed_or_swapped_during_the_call_fails():
    from torch.utils.checkpoint import checkpoint

    def removes(x):
        sys.setprofile(None)
        return checkpoint(torch.sin, x, use_reentrant=False)

    def swaps_and_restores(x):
        watch = sys.getprofile()
        sys.setprofile(None)
        out = checkpoint(torch.sin, x, use_reentrant=False)
        sys.setprofile(watch)
        return out

    def removes_through_c(x):  # no c_call event: the end sees it
        list(map(sys.setprofile, [None]))
        return x

    forbid = (checkpoint,)
    assert "the functions it calls during the call (sys.setprofile called in removes)" in failure(
        removes, torch.ones(2), forbid=forbid)
    assert "sys.setprofile called in swaps_and_restores" in failure(swaps_and_restores, torch.ones(2), forbid=forbid)
    assert "(the grader's profile function gone at the end)" in failure(removes_through_c, torch.ones(2),
                                                                       forbid=forbid)
    assert sys.getprofile() is None
    assert torch.equal(checks.call_student("ex", torch.sin, torch.zeros(2), forbid=forbid), torch.zeros(2))


# --- the dispatch watch of ATen ops (03, 07, 10) ------------------------------------------------------------------
def test_a_dispatch_watch_disabled_popped_or_left_off_fails_the_call():
    x = torch.randn(4, 3, dtype=torch.float64)

    def disabled(t):
        with torch._C._DisableTorchDispatch():
            return torch.ops.aten.tanh_backward(t, t.tanh())

    def popped(t):
        python_dispatch._pop_mode()
        return torch.ops.aten.tanh_backward(t, t.tanh())

    def functions_disabled(t):
        with torch._C.DisableTorchFunction():
            return t.tanh()

    left = []

    def left_disabled(t):
        left.append(torch._C._DisableTorchDispatch())
        left[0].__enter__()
        return t

    assert (f"{SWITCHED_OFF} the torch operations it runs during the call (torch dispatch disabled, as "
            "torch._C._DisableTorchDispatch() does)") in by_hand_failure(disabled, x)
    assert "(the grader's TorchDispatchMode taken off the mode stack)" in by_hand_failure(popped, x)
    assert "(torch function modes disabled, as torch._C.DisableTorchFunction() does)" in by_hand_failure(
        functions_disabled, x)
    try:
        assert "(torch dispatch disabled" in by_hand_failure(left_disabled, x)
    finally:
        left[0].__exit__(None, None, None)
    assert clean_stacks()
    assert torch.equal(guarded("ex", lambda t: t * 2, [x], {"x": x}), x * 2)  # an honest call passes


# --- notebook 09's kernel guard ---------------------------------------------------------------------------------
needs_triton = pytest.mark.needs(TRITON.usable, reason=TRITON.message)


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


def launched_copy(values, like):
    """`values` copied by one launch into a tensor allocated like `like`: the kernel computes nothing."""
    out = torch.empty_like(like)
    _copy[(triton.cdiv(like.numel(), 64),)](values, out, like.numel(), BLOCK=64)
    return out


def silu_in_numpy(x):
    a = x.contiguous().numpy()
    return launched_copy(torch.from_numpy(a / (1 + np.exp(-a))), x)


def silu_in_python(x):
    values = [v / (1 + np.exp(-v)) for v in x.contiguous().tolist()]
    out = torch.empty_like(x)
    for i, v in enumerate(values):
        out[i] = v
    return launched_copy(out, x)


def silu_from_numbers(x):
    return launched_copy(torch.tensor([0.0] * x.numel(), dtype=x.dtype).view(x.shape), x)


def silu_under_disabled_dispatch(x):
    with torch._C._DisableTorchDispatch():
        y = x * torch.sigmoid(x)
    return launched_copy(y, x)


def silu_under_both_disabled(x):
    launched_copy(x, x)
    with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
        return x * torch.sigmoid(x)


def silu_copied_from_dlpack(x):
    out = launched_copy(x, x)
    out.copy_(torch.from_dlpack(np.zeros(x.shape, dtype=np.float32)))
    return out


def judged(fn):
    with pytest.raises(GradingError) as err:
        kc.check_silu_forward("silu_forward", fn, [kc.silu_case((70,), seed=1)])
    return str(err.value)


@needs_triton
@pytest.mark.parametrize("fn, says", [
    (silu_in_numpy, "reads a tensor's data out of torch (Tensor.numpy) outside your kernel"),
    (silu_in_python, "reads a tensor's data out of torch (Tensor.tolist) outside your kernel"),
    (silu_from_numbers, "builds a tensor from NumPy or Python data (torch.from_numpy, torch.tensor, torch.as_tensor): "
                        "aten::lift_fresh outside your kernel"),
    (silu_copied_from_dlpack, "a tensor your code passed to aten::copy_ was made by no torch operation of the call"),
    (silu_under_both_disabled, "the tensor your code returned was made by no torch operation of the call"),
    (silu_under_disabled_dispatch, f"{SWITCHED_OFF} the torch operations it runs during the call (torch dispatch "
                                   "disabled"),
])
def test_maths_outside_torch_s_watch_is_named(fn, says):
    assert says in judged(fn)
    assert clean_stacks()


@needs_triton
def test_a_launch_counter_taken_off_during_the_call_fails_it():
    def puts_back(x):
        counters = {cls: vars(cls)["run"] for cls in REAL_RUNS}
        for cls, run in REAL_RUNS.items():
            cls.run = run
        out = launched_copy(x, x)
        for cls, run in counters.items():
            cls.run = run
        return out

    def leaves_back(x):
        for cls, run in REAL_RUNS.items():
            cls.run = run
        return launched_copy(x, x)

    assert "its kernel launches during the call (a kernel ran outside the grader's launch counter" in judged(puts_back)
    assert ".run replaced, so launches went uncounted" in judged(leaves_back)
    assert {cls: vars(cls)["run"] for cls in REAL_RUNS} == REAL_RUNS


@needs_triton
def test_an_honest_kernel_uses_shapes_strides_allocations_views_and_copies_freely():
    def honest(x):
        x = x.contiguous().view(-1).view(x.shape)
        assert x.numel() and x.dim() and x.stride() and x.dtype == torch.float32 and x.device.type
        ones = torch.ones_like(x).clone()
        ones.copy_(x)
        return launched_copy(ones, x)

    run = kernel_guard.run_guarded(honest, torch.randn(5, 3), names=("x",))
    assert run.refused is None and run.outside is None and run.unseen is None and run.launches == 1
