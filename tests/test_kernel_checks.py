"""The guard (autograder.checks.kernel_guard) and notebook 09's checks: the guard marks the memory around inputs
and allocations and sees every write there, counts launches, refuses torch maths outside a launch (and not
Triton's own inside one);
the checks accept kernels written here and name the slips of wrong ones. The notebook's catalogue of
wrong and right answers is tests/mutants/nb09_kernels.py; these tests hold the guard itself, each input's
own layout (`layouts`: a grad_out read with x's strides is named by grad_out's layout) and the half-precision
cases (where a float16 or bfloat16 accumulator fails, and float32 sums pass).

Kernels launch on the course's device (Triton's interpreter without CUDA: triton_setup.prepare() runs
before triton is imported); the guard's memory tests also run on every device.
"""
import pytest
import torch

from autograder.learner import triton_setup

TRITON = triton_setup.prepare()
import triton  # noqa: E402  (after prepare(): TRITON_INTERPRET must be set first)
import triton.language as tl  # noqa: E402
from triton.runtime.interpreter import InterpretedFunction, InterpreterBuilder  # noqa: E402

from autograder.checks import GradingError  # noqa: E402
from autograder.checks import kernel_accesses as accesses  # noqa: E402
from autograder.checks import kernel_guard as guard  # noqa: E402
from autograder.checks import kernel_layouts as layouts  # noqa: E402
from autograder.checks import nb09_kernels as kc  # noqa: E402
from autograder.checks.compare import TOLERANCES  # noqa: E402
from autograder.checks.kernel_verdicts import BLOCK_LIMIT, check_rules, check_tensor  # noqa: E402
from autograder.checks.nb09_kernels import rmsnorm  # noqa: E402
from autograder.learner.device import available_devices, get_device  # noqa: E402

# Skipped where Triton cannot launch a kernel, failed instead under CI (tests/conftest.py).
pytestmark = pytest.mark.needs(TRITON.usable, reason=TRITON.message)


@pytest.fixture(params=available_devices())
def device(request):
    return torch.device(request.param)


@triton.jit
def _scale(x_ptr, y_ptr, n, MASKED: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if MASKED:
        tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * 3, mask=offsets < n)
    else:
        tl.store(y_ptr + offsets, tl.load(x_ptr + offsets) * 3)


def scale(x, masked=True, block=64):
    """3 x with one launch (or, with masked=False, a kernel that writes past y)."""
    x = x.contiguous()
    y = torch.empty_like(x)
    if x.numel():
        _scale[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), MASKED=masked, BLOCK=block)
    return y


# --- the marked memory --------------------------------------------------------------------------------
def test_an_input_sits_in_marked_memory_with_its_values(device):
    t = torch.arange(12.0, device=device).reshape(3, 4)
    region = guard.Region.input("x", t)
    assert torch.equal(region.view, t) and region.view.is_contiguous()
    assert region.view.storage_offset() == guard.PAD and not region.written_outside()
    before = guard.bits(region.buffer[: guard.PAD])
    assert bool((before == guard.AROUND[4]).all())


def test_a_gapped_input_has_marked_gaps_between_elements_and_rows(device):
    t = torch.arange(12.0, device=device).reshape(3, 4)
    region = guard.Region.input("x", t, gapped=True)
    assert torch.equal(region.view, t) and not region.view.is_contiguous()
    assert region.view.stride() == (16, 2)
    with pytest.raises(RuntimeError):
        region.view.view(-1)  # no two dimensions merge
    assert torch.isnan(region.buffer[guard.PAD + 1])  # the gap after the first element


@pytest.mark.parametrize("where", ["before", "after", "gap"])
def test_a_write_outside_the_view_is_seen(device, where):
    region = guard.Region.input("x", torch.ones(2, 3, device=device), gapped=True)
    index = {"before": guard.PAD - 1, "after": -1, "gap": guard.PAD + 1}[where]
    region.buffer[index] = 0.0
    assert region.written_outside()


def test_an_edit_of_an_input_is_seen(device):
    region = guard.Region.input("x", torch.ones(5, device=device))
    assert not region.changed()
    region.view[2] = 7.0
    assert region.changed() and not region.written_outside()


def test_allocations_come_from_marked_buffers(device):
    x = torch.ones(4, 5, device=device, dtype=torch.float64)
    with guard.guarded() as watch:
        empty, zeros = torch.empty_like(x), torch.zeros(3, device=device)
    assert [r.view.shape for r in watch.allocated] == [(4, 5), (3,)]
    assert empty.untyped_storage().nbytes() > empty.numel() * 8
    assert guard.unwritten(empty) == (20, 20, 0) and guard.unwritten(zeros) is None
    assert torch.equal(zeros, torch.zeros(3, device=device)) and watch.refused is None
    empty[0, :] = 1.0
    assert guard.unwritten(empty) == (15, 20, 5)


def test_torch_maths_is_recorded_and_views_copies_and_allocations_are_not(device):
    x = torch.randn(6, 4, device=device)
    with guard.guarded() as watch:
        x[::2].contiguous().reshape(-1).view(3, 4).t().to(torch.float64)
        torch.empty(2, device=device).zero_()
    assert watch.refused is None
    with guard.guarded() as watch:
        torch.sigmoid(x)
        x * 2
    assert watch.refused == "aten::sigmoid"


# --- launches ------------------------------------------------------------------------------------------
def test_launches_are_counted_and_triton_s_own_torch_calls_are_not_refused():
    x = torch.randn(100, device=get_device())
    with guard.guarded() as watch:
        y = scale(x)
        scale(y)
    assert watch.launches == 2 and watch.refused is None
    assert torch.allclose(y, 3 * x)
    with guard.guarded() as watch:
        pass
    assert watch.launches == 0


def test_a_store_without_a_mask_lands_in_the_marked_padding_and_is_seen():
    run = guard.run_guarded(lambda x: scale(x, masked=False), torch.randn(100, device=get_device()), names=("x",))
    assert run.launches == 1 and run.wrote_outside == ["a tensor your code allocated (shape (100,), torch.float32)"]
    run = guard.run_guarded(scale, torch.randn(100, device=get_device()), names=("x",))
    assert run.wrote_outside == [] and run.changed == [] and run.unwritten == {}


# --- the checks on kernels written here ---------------------------------------------------------------
def test_a_kernel_for_another_function_is_judged_by_its_values():
    def times_three(x):
        return scale(x)

    with pytest.raises(GradingError, match="wrong values in silu_forward"):
        kc.check_silu_forward("silu_forward", times_three, [kc.silu_case((70,), seed=1)])


def test_too_few_blocks_leave_elements_unwritten_and_the_message_says_so():
    def one_block(x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _scale[(1,)](x, y, x.numel(), MASKED=True, BLOCK=64)
        return y

    with pytest.raises(GradingError, match=r"6 of 70 elements of silu_forward\(x\) were never written"):
        kc.check_silu_forward("silu_forward", one_block, [kc.silu_case((70,), seed=1)])


def test_torch_maths_fails_with_the_op_named():
    with pytest.raises(GradingError, match=r"computes with torch \(aten::sigmoid\) outside your kernel"):
        kc.check_silu_forward("silu_forward", lambda x: x * torch.sigmoid(scale(x)), [kc.silu_case((70,), seed=1)])


def test_a_missing_launch_and_extra_launches_are_named():
    with pytest.raises(GradingError, match="launched no Triton kernel"):
        kc.check_silu_forward("silu_forward", torch.empty_like, [kc.silu_case((70,), seed=1)])
    with pytest.raises(GradingError, match="launched 2 Triton kernels"):
        kc.check_silu_forward("silu_forward", lambda x: scale(scale(x)), [kc.silu_case((70,), seed=1)])


def test_stresses_name_themselves():
    cases = [kc.silu_case((4, 5), seed=1, stress="non-contiguous")]
    with pytest.raises(GradingError, match="fails for a non-contiguous x"):
        kc.check_silu_forward("silu_forward", lambda x: scale(x), cases)
    wide = kc.rmsnorm_case(2, 3, seed=1, stress="wide-rows")
    assert wide["x"].shape == (2, BLOCK_LIMIT + 904) and wide["weight"].shape == (BLOCK_LIMIT + 904,)


def test_a_block_larger_than_the_limit_is_named():
    def one_big_block(x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _scale[(1,)](x, y, x.numel(), MASKED=True, BLOCK=triton.next_power_of_2(x.numel()))
        return y

    one_big_block(torch.ones(5000, device=get_device()))  # right values: only the limit refuses it
    with pytest.raises(GradingError, match="launched a kernel with BLOCK = 8192: a block holds at most 4096"):
        kc.check_silu_forward("silu_forward", one_big_block, [kc.silu_case((5000,), seed=1)])
    with pytest.raises(GradingError, match="wrong values"):  # a block of 4096 is within the limit: 3x is judged
        kc.check_silu_forward("silu_forward", one_big_block, [kc.silu_case((4096,), seed=1)])


def test_where_triton_cannot_run_the_checks_say_why(monkeypatch):
    missing = triton_setup.Triton(False, False, "Triton has no wheel for this platform (Darwin arm64)")
    monkeypatch.setattr(triton_setup, "prepare", lambda device=None: missing)
    with pytest.raises(GradingError, match=r"cannot run here: Triton has no wheel .*graded on Linux"):
        kc.check_silu_forward("silu_forward", scale, [kc.silu_case((8,), seed=1)])


# --- what the interpreter's programs load and store (guard.accesses) -----------------------------------
# These kernels run in Triton's interpreter on the CPU wherever the tests run (InterpretedFunction, not
# triton.jit, which compiles where there is CUDA): the interpreter is what the guard watches.
@InterpretedFunction
def _add_rows_into(x_ptr, out_ptr, cols, ATOMIC: tl.constexpr, BLOCK: tl.constexpr):
    """out += x[row] for the program's row: load, add and store out (a race between rows), or tl.atomic_add."""
    c = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + tl.program_id(0) * cols + c, mask=c < cols, other=0.0)
    if ATOMIC:
        tl.atomic_add(out_ptr + c, x, mask=c < cols)
    else:
        tl.store(out_ptr + c, tl.load(out_ptr + c, mask=c < cols) + x, mask=c < cols)


@InterpretedFunction
def _partial_sums(x_ptr, part_ptr, rows, cols, BLOCK: tl.constexpr):
    """Row p of part += x's rows p, p + programs, ...: each program loads and stores its own row, many times."""
    p = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    for row in range(p, rows, tl.num_programs(0)):
        part = tl.load(part_ptr + p * cols + c, mask=c < cols)
        tl.store(part_ptr + p * cols + c, part + tl.load(x_ptr + row * cols + c, mask=c < cols), mask=c < cols)


@InterpretedFunction
def _column_sums(part_ptr, out_ptr, rows, cols, BLOCK: tl.constexpr):
    c = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for row in range(rows):
        acc += tl.load(part_ptr + row * cols + c, mask=c < cols, other=0.0)
    tl.store(out_ptr + c, acc, mask=c < cols)


@InterpretedFunction
def _sums_of_squares(x_ptr, out_ptr, cols, OTHER: tl.constexpr, BLOCK: tl.constexpr):
    """out[row] = sum of x[row]^2, the masked lanes loaded with other=0.0, or (OTHER False) without other=."""
    c = tl.arange(0, BLOCK)
    if OTHER:
        x = tl.load(x_ptr + tl.program_id(0) * cols + c, mask=c < cols, other=0.0)
    else:
        x = tl.load(x_ptr + tl.program_id(0) * cols + c, mask=c < cols)
    tl.store(out_ptr + tl.program_id(0), tl.sum(x * x))


@InterpretedFunction
def _triple(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """3 x, its masked load without other=: the masked lanes are never used (the store has the same mask)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * 3, mask=offsets < n)


def column_sum(x, how):
    """x.sum(0) of a float32 (rows, 40) x: "race", "atomic", or partial sums in a buffer from torch.zeros or
    torch.empty ("zeros", "empty"), two programs for the rows, then a column-sum kernel."""
    rows, cols = x.shape
    if how in ("race", "atomic"):
        out = torch.zeros(cols)
        _add_rows_into[(rows,)](x, out, cols, ATOMIC=how == "atomic", BLOCK=64)
        return out
    part = (torch.zeros if how == "zeros" else torch.empty)((2, cols))
    _partial_sums[(2,)](x, part, rows, cols, BLOCK=64)
    out = torch.empty(cols)
    _column_sums[(1,)](part, out, 2, cols, BLOCK=64)
    return out


def sums_of_squares(x, other):
    out = torch.empty(x.shape[0])
    _sums_of_squares[(x.shape[0],)](x, out, x.shape[1], OTHER=other, BLOCK=64)
    return out


def triple(x):
    y = torch.empty_like(x)
    _triple[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
    return y


def judged(fn, x, expected):
    """The verdicts on `fn(x)` run in the guard: the kernel-side rules, then the returned tensor."""
    run = guard.run_guarded(fn, x, names=("x",))
    check_rules("sums", run, {"x": x}, launches=(1, 2), why="")
    check_tensor("sums", run, 0, run.result, expected, {"x": x}, "out")
    return run


X = torch.randn(5, 40, generator=torch.Generator().manual_seed(0))


def test_two_programs_storing_to_one_element_are_a_race_and_atomics_or_own_rows_are_not():
    run = guard.run_guarded(lambda x: column_sum(x, "race"), X, names=("x",))
    assert torch.allclose(run.result, X.sum(0))  # the interpreter runs the programs one after another
    assert str(run.race) == "programs 0 and 1 of _add_rows_into both stored to element 0 of out_ptr"
    for how in ("atomic", "zeros"):  # program 0 stores row 0 of part three times: its own row, no race
        run = guard.run_guarded(lambda x, how=how: column_sum(x, how), X, names=("x",))
        assert run.race is None and torch.allclose(run.result, X.sum(0), atol=1e-5), how


def test_a_race_fails_saying_what_a_gpu_does_with_it_and_what_to_do_instead():
    with pytest.raises(GradingError, match=r"(?s)programs 0 and 1 of _add_rows_into both stored to element 0 of "
                                           r"out_ptr with tl.store.*updates are lost.*tl.atomic_add.*partial sums"):
        judged(lambda x: column_sum(x, "race"), X, X.sum(0))
    judged(lambda x: column_sum(x, "atomic"), X, X.sum(0))


def test_masked_off_lanes_of_a_load_without_other_hold_a_marked_nan():
    run = guard.run_guarded(lambda x: sums_of_squares(x, other=False), X, names=("x",))
    assert run.without_other == ["_sums_of_squares"] and run.race is None
    assert bool(guard.masked_lanes(run.result).all())  # the NaN's payload went through x * x and the sum
    run = guard.run_guarded(lambda x: sums_of_squares(x, other=True), X, names=("x",))
    assert run.without_other == [] and torch.allclose(run.result, X.pow(2).sum(1))


def test_a_sum_over_masked_lanes_fails_naming_the_missing_other_and_unused_lanes_cost_nothing():
    with pytest.raises(GradingError, match=r"(?s)out has NaN where PyTorch has none, first at flat index 0: it comes "
                                           r"from the masked-off lanes of a tl.load with mask= and no other= \(in "
                                           r"_sums_of_squares\).*other=0.0 for a sum"):
        judged(lambda x: sums_of_squares(x, other=False), X, X.pow(2).sum(1))
    run = judged(triple, X.flatten()[:100], 3 * X.flatten()[:100])  # 100 elements: the second block is masked
    assert run.without_other == ["_triple"]


def test_masked_lanes_are_found_in_each_float_dtype_and_after_a_cast_but_a_plain_nan_is_not():
    for dtype in guard.FLOATS:
        marked = torch.tensor([guard.MASKED[dtype.itemsize]], dtype=guard.INTEGER_OF_SIZE[dtype.itemsize]).view(dtype)
        assert bool(guard.masked_lanes(marked).all()), dtype
        assert not bool(guard.masked_lanes(torch.tensor([float("nan"), -float("nan"), 1.0], dtype=dtype)).any())
    marked = torch.tensor([guard.MASKED[4]], dtype=torch.int32).view(torch.float32)
    assert bool(guard.masked_lanes(marked.double()).all()) and bool(guard.masked_lanes(marked.half()).all())


def test_a_buffer_from_torch_empty_read_before_anything_was_stored_is_named_as_such():
    run = guard.run_guarded(lambda x: column_sum(x, "empty"), X, names=("x",))
    assert run.unwritten == {} and run.from_unset == {0: (40, 40, 0)}
    assert str(run.read_unset) == "element 0 of part_ptr in _partial_sums"
    with pytest.raises(GradingError, match=r"(?s)40 of 40 elements of out, the first at flat index 0, came from "
                                           r"memory that was never initialised: your kernel read element 0 of "
                                           r"part_ptr in _partial_sums before anything was stored there.*torch.zeros"):
        judged(lambda x: column_sum(x, "empty"), X, X.sum(0))
    run = judged(lambda x: column_sum(x, "zeros"), X, X.sum(0))
    assert run.read_unset is None and run.from_unset == {}


def test_the_interpreter_s_memory_operations_are_watched_only_inside_the_guard():
    """`accesses.watched` patches these methods of Triton's (private) InterpreterBuilder: they must exist
    in every Triton the course accepts (make test-floor runs this file on the floor's), and come back after."""
    originals = {name: vars(InterpreterBuilder)[name] for name in accesses.MEMORY_OPS}
    with guard.guarded():
        assert all(vars(InterpreterBuilder)[name] is not original for name, original in originals.items())
    assert {name: vars(InterpreterBuilder)[name] for name in accesses.MEMORY_OPS} == originals


# --- each input in a layout of its own (issue 31) -----------------------------------------------------------
@pytest.mark.parametrize("layout, expected", [("transposed", (1, 3)), ("expanded", (0, 1)),
                                              ("non-contiguous", (16, 2))])
def test_each_layout_keeps_the_values_in_marked_memory_with_its_own_strides(device, layout, expected):
    t = torch.arange(12.0, device=device).reshape(3, 4)
    if layout == "expanded":
        t = t[:1].expand(3, 4)
    region = layouts.laid_out("x", t, layout)
    assert torch.equal(region.view, t) and region.view.stride() == expected and not region.view.is_contiguous()
    assert not region.written_outside() and not region.changed()
    region.buffer[guard.PAD - 1] = 0.0
    assert region.written_outside()


def test_an_expanded_grad_out_is_one_number_in_memory_and_a_weight_can_be_one_too():
    ones = layouts.laid_out("grad_out", torch.ones(3, 5), "expanded")
    assert ones.view.stride() == (0, 0) and torch.equal(ones.view, torch.ones(3, 5))
    assert bool(torch.isnan(ones.buffer[guard.PAD + 1]))  # what follows the one number is marked
    weight = kc.rmsnorm_case(3, 5, seed=1, stress="expanded", what="weight")["weight"]
    assert layouts.strides(weight, "expanded") == (0,)
    assert layouts.strides(torch.randn(3, 5), "expanded") == (5, 1)  # values that do not repeat stay apart
    with pytest.raises(ValueError, match="two dimensions"):
        layouts.strides(torch.ones(5), "transposed")


@triton.jit
def _rms_backward_one_block(g_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_ptr, cols, g_row, g_col, x_row, x_col,
                            BLOCK: tl.constexpr):
    """One row per program in one block; grad_weight by atomics."""
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    mask = c < cols
    g = tl.load(g_ptr + row * g_row + c * g_col, mask=mask, other=0.0)
    x = tl.load(x_ptr + row * x_row + c * x_col, mask=mask, other=0.0)
    w = tl.load(w_ptr + c, mask=mask, other=0.0)
    rstd = tl.load(rstd_ptr + row)
    coupling = tl.sum(g * w * x) * rstd * rstd * rstd / cols
    tl.store(dx_ptr + row * cols + c, rstd * g * w - coupling * x, mask=mask)
    tl.atomic_add(dw_ptr + c, g * x * rstd, mask=mask)


def rms_backward(grad_out, x, weight, rstd, grad_out_strides=None):
    """RMSNorm's backward for float32 rows of at most 64 columns; `grad_out_strides`: the strides the kernel is
    told for grad_out (its own by default)."""
    weight, rstd = weight.contiguous(), rstd.contiguous()
    rows, cols = x.shape
    grad_x, grad_weight = torch.empty(x.shape), torch.zeros_like(weight)  # empty_like would copy x's layout
    if rows:
        _rms_backward_one_block[(rows,)](grad_out, x, weight, rstd, grad_x, grad_weight, cols,
                                         *(grad_out_strides or grad_out.stride()), *x.stride(), BLOCK=64)
    return grad_x, grad_weight


def rms_backward_reading_grad_out_with_x_strides(grad_out, x, weight, rstd):
    return rms_backward(grad_out, x, weight, rstd, grad_out_strides=x.stride())


@pytest.mark.parametrize("layout, says", [
    ("expanded", r"fails for an expanded grad_out .*strides \(0, 0\): one number in memory for every element, as the "
                 r"grad_out that \.sum\(\)\.backward\(\) hands on.*grad_out.stride\(0\)"),
    ("transposed", r"fails for a transposed grad_out .*strides \(1, 3\): stored column by column"),
    ("non-contiguous", r"fails for a non-contiguous grad_out: grad_out has a layout of its own \(gaps between")])
def test_a_backward_that_reads_grad_out_with_x_strides_fails_naming_grad_out_s_layout(layout, says):
    case = kc.rmsnorm_case(3, 12, seed=1, stress=layout, what="grad_out")
    kc.check_rmsnorm_backward("rmsnorm_backward", rms_backward, [kc.rmsnorm_case(3, 12, seed=2), case])
    with pytest.raises(GradingError, match=f"(?s)^rmsnorm_backward: {says}") as failure:
        kc.check_rmsnorm_backward("rmsnorm_backward", rms_backward_reading_grad_out_with_x_strides, [case])
    assert "fails for a non-contiguous x" not in str(failure.value)


def test_the_other_inputs_of_the_backward_are_tried_in_layouts_of_their_own():
    cases = [kc.rmsnorm_case(3, 12, seed=3, stress="transposed"),
             kc.rmsnorm_case(3, 12, seed=4, stress="expanded", what="weight"),
             kc.rmsnorm_case(3, 12, seed=5, stress="non-contiguous", what="rstd")]
    kc.check_rmsnorm_backward("rmsnorm_backward", rms_backward, cases)

    def weight_as_it_is(grad_out, x, weight, rstd):
        rows, cols = x.shape
        grad_x, grad_weight = torch.empty(x.shape), torch.zeros(cols)
        _rms_backward_one_block[(rows,)](grad_out, x, weight, rstd.contiguous(), grad_x, grad_weight, cols,
                                         *grad_out.stride(), *x.stride(), BLOCK=64)
        return grad_x, grad_weight

    with pytest.raises(GradingError, match=r"fails for an expanded weight .*strides \(0,\)"):
        kc.check_rmsnorm_backward("rmsnorm_backward", weight_as_it_is, cases[1:2])


def test_the_grad_out_of_sum_backward_reaches_the_function_s_backward_expanded():
    seen = []

    class Recorded(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, eps):
            rstd = torch.rsqrt(x.pow(2).mean(-1) + eps)
            ctx.save_for_backward(x, weight, rstd)
            return x * rstd[:, None] * weight

        @staticmethod
        def backward(ctx, grad_out):
            seen.append(grad_out.stride())
            return *rms_backward(grad_out, *ctx.saved_tensors), None

    case = kc.rmsnorm_case(3, 12, seed=6, stress="expanded", what="grad_out")
    with pytest.raises(GradingError, match="launched no Triton kernel"):  # its forward computes in torch
        kc.check_triton_rmsnorm("TritonRMSNorm", Recorded, [case])
    assert seen == [(0, 0)]


# --- half precision (issue 31) -----------------------------------------------------------------------------
@triton.jit
def _rms_forward_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, cols, x_row, x_col, eps, BLOCK: tl.constexpr,
                        ACC: tl.constexpr):
    """One program per row, its sums in ACC."""
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=ACC)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * x_row + c * x_col, mask=c < cols, other=0.0).to(ACC)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc) / cols + eps)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, cols, BLOCK):
        c = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * x_row + c * x_col, mask=c < cols).to(ACC)
        tl.store(y_ptr + row * cols + c, x * rstd * tl.load(w_ptr + c, mask=c < cols).to(ACC), mask=c < cols)


def rms_forward(x, weight, eps, acc=None, rstd_dtype=None):
    """RMSNorm's forward summing in `acc` (by default float32, float64 for float64), rstd in `rstd_dtype` (by
    default the same)."""
    wide = x.dtype == torch.float64
    acc = acc or (tl.float64 if wide else tl.float32)
    y = torch.empty(x.shape, dtype=x.dtype)
    rstd = torch.empty(x.shape[0], dtype=rstd_dtype or (torch.float64 if wide else torch.float32))
    if x.numel():
        _rms_forward_kernel[(x.shape[0],)](x, weight.contiguous(), y, rstd, x.shape[1], *x.stride(), eps, BLOCK=256,
                                           ACC=acc)
    return y, rstd


HALF_CASES = [kc.rmsnorm_case(3, 40, seed=7, stress="float16"), kc.rmsnorm_case(2, 8, seed=8, stress="bfloat16")]


def test_half_precision_cases_are_where_a_half_precision_accumulator_fails():
    x16, x_bf16 = HALF_CASES[0]["x"], HALF_CASES[1]["x"]
    assert x16.dtype == torch.float16 and bool((x16.float().abs() > 256).any(1).all())  # x * x overflows each row
    assert x_bf16.dtype == torch.bfloat16 and x_bf16.shape[1] == BLOCK_LIMIT + rmsnorm.long_row_tail(get_device())
    g16 = HALF_CASES[0]["g"].float()
    assert bool(((g16 * x16.float()).sum(1) > torch.finfo(torch.float16).max).all())  # the backward's sum overflows


@pytest.mark.parametrize("block", [256, 1024, BLOCK_LIMIT])
def test_on_a_gpu_a_bfloat16_running_sum_of_a_long_row_misses_by_more_than_bfloat16_s_tolerance(block):
    """What a GPU computes with a bfloat16 accumulator (every addition rounded to bfloat16; torch's bfloat16
    arithmetic rounds the same way) over the row a GPU is given: lanes of `block`, then their sum."""
    size = torch.cat([torch.full((BLOCK_LIMIT,), 16.0), torch.ones(rmsnorm.long_row_tail("cuda"))])
    squares = (size * size).to(torch.bfloat16)
    lanes = torch.zeros(block, dtype=torch.bfloat16)
    for start in range(0, squares.numel(), block):
        lanes += squares[start:start + block]
    got, exact = lanes.sum(dtype=torch.bfloat16).double(), squares.double().sum()
    assert (exact / got).sqrt() - 1 > 1.5 * TOLERANCES[torch.bfloat16][0]  # rstd off by more than the tolerance


def test_a_half_precision_accumulator_fails_in_both_half_dtypes_and_float32_sums_pass():
    kc.check_rmsnorm_forward("rmsnorm_forward", rms_forward, HALF_CASES)
    with pytest.raises(GradingError, match=r"(?s)fails for a float16 x with \|x\| in the hundreds: a half-precision "
                                           r"accumulator.*rstd is 0 for rows whose squares overflow float16"):
        kc.check_rmsnorm_forward("rmsnorm_forward", lambda x, w, eps: rms_forward(x, w, eps, acc=tl.float16),
                                 HALF_CASES[:1])
    with pytest.raises(GradingError, match="fails for a bfloat16 x with long rows: a half-precision accumulator"):
        kc.check_rmsnorm_forward("rmsnorm_forward", lambda x, w, eps: rms_forward(x, w, eps, acc=tl.bfloat16),
                                 HALF_CASES[1:])


def test_an_rstd_kept_in_half_precision_is_named():
    with pytest.raises(GradingError, match=r"rstd is torch.float16, x's dtype: keep rstd in float32"):
        kc.check_rmsnorm_forward("rmsnorm_forward", lambda x, w, eps: rms_forward(x, w, eps, rstd_dtype=x.dtype),
                                 HALF_CASES[:1])


@triton.jit
def _silu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, WIDEN: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    if WIDEN:
        x = x.to(tl.float32)
    tl.store(y_ptr + offsets, x * tl.sigmoid(x), mask=offsets < n)


def silu(x, widen=True):
    x = x.contiguous()
    y = torch.empty_like(x)
    if x.numel():
        _silu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024, WIDEN=widen)
    return y


@pytest.mark.parametrize("stress", ["float16", "bfloat16"])
def test_silu_in_half_precision_computes_in_float32(stress):
    case = kc.silu_case((1000,), seed=9, stress=stress)
    kc.check_silu_forward("silu_forward", silu, [case])
    with pytest.raises(GradingError, match=f"fails for a {stress} x: tl.exp, tl.sqrt and the other maths functions "
                                           "take float32 or float64"):
        kc.check_silu_forward("silu_forward", lambda x: silu(x, widen=False), [case])
