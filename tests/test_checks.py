"""The comparison helpers: right answers pass, each kind of mistake gets a message that names it."""
import pytest
import torch

from autograder import checks
from autograder.learner import inputs
from autograder.learner.device import available_devices


@pytest.fixture(params=available_devices())
def device(request):
    return torch.device(request.param)


def message(fn, *args, **kwargs):
    with pytest.raises(checks.GradingError) as info:
        fn(*args, **kwargs)
    return str(info.value)


def test_equal_tensors_pass(device):
    x = inputs.randn(3, 4, seed=0, device=device)
    checks.expect_close("ex", x.clone(), x)


def test_tolerance_follows_dtype(device):
    x = inputs.randn(5, seed=1, device=device)
    checks.expect_close("ex", x.float() + 1e-6, x.float())  # within float32 tolerance
    text = message(checks.expect_close, "ex", x + 1e-6, x)   # not within float64's
    assert "wrong values" in text and "rtol=1e-07" in text and "max abs error" in text


def test_wrong_values_message_names_exercise_input_and_values(device):
    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, device=device)
    text = message(checks.expect_close, "my_grad", x * torch.tensor([1.0, 1.0, 2.0], dtype=x.dtype, device=device),
                   x, inputs={"x": x})
    assert text.startswith("my_grad: wrong values")
    assert "x = tensor(shape=(3,)" in text
    assert "first mismatch at index (2,): expected 3, got 6" in text
    assert "1 of 3 elements differ" in text


@pytest.mark.parametrize("got, expected_words", [
    (lambda x: x.tolist(), "should be a torch.Tensor, got list"),
    (lambda x: x.reshape(1, -1), "has shape (1, 4), expected (4,)"),
    (lambda x: x.float(), "has dtype torch.float32, expected torch.float64"),
])
def test_type_shape_dtype_are_checked_before_values(got, expected_words, device):
    x = inputs.randn(4, seed=2, device=device)
    assert expected_words in message(checks.expect_close, "ex", got(x), x)


def test_device_is_checked():
    x = inputs.randn(4, seed=3, device="cpu")
    assert "device" in message(checks.expect_close, "ex", x, x.to("meta"))


def test_nan_is_named(device):
    x = inputs.randn(3, seed=4, device=device)
    bad = x.clone()
    bad[1] = float("nan")
    assert "contains NaN" in message(checks.expect_close, "ex", bad, x)


def test_tuples_are_checked_part_by_part(device):
    a, b = inputs.randn(2, seed=5, device=device), inputs.randn(3, seed=6, device=device)
    checks.expect_close("ex", (a, b), (a, b))
    assert "should return 2 values, got 1" in message(checks.expect_close, "ex", (a,), (a, b))
    assert "wrong values in gb" in message(checks.expect_close, "ex", (a, b + 1), (a, b), names=["ga", "gb"])


def test_call_student_reports_unimplemented_and_crashes():
    def stub(x):
        raise NotImplementedError()

    def crash(x):
        return x @ x.T @ torch.ones(7)

    assert "not implemented yet" in message(checks.call_student, "ex", stub, torch.ones(2))
    text = message(checks.call_student, "ex", crash, torch.ones(2, 3), names=["x"])
    assert "raised RuntimeError" in text and "x = tensor(shape=(2, 3)" in text


def test_call_student_stops_an_endless_loop():
    def spin(x):
        while True:
            pass

    assert "did not return within 0.2 s" in message(checks.call_student, "ex", spin, 1, time_limit=0.2)


def test_call_student_silences_warnings_and_stderr(capfd):
    import sys
    import warnings

    def noisy(x):
        warnings.warn("careful", stacklevel=2)
        print("to stderr", file=sys.stderr)
        return x

    assert checks.call_student("ex", noisy, 3) == 3
    assert capfd.readouterr().err == ""


def test_call_student_gives_a_private_copy():
    x = torch.ones(3)
    checks.call_student("ex", lambda t: t.mul_(5), x)
    assert torch.equal(x, torch.ones(3))


def test_no_autograd_rejects_every_door_and_restores_them():
    from torch.autograd import grad as bound_early

    def by_backward(x):
        x = x.clone().requires_grad_(True)
        (x ** 2).sum().backward()
        return x.grad

    def by_bound_grad(x):
        x = x.clone().requires_grad_(True)
        return bound_early((x ** 2).sum(), x)[0]

    def by_func(x):
        return torch.func.grad(lambda t: (t ** 2).sum())(x)

    for fn in (by_backward, by_bound_grad, by_func):
        assert "called autograd" in message(checks.call_student, "ex", fn, torch.ones(2), no_autograd=True)
        assert torch.equal(fn(torch.ones(2)), 2 * torch.ones(2))  # restored afterwards


def test_check_cases_runs_every_case(device):
    cases = [{"x": inputs.randn(n, seed=n, device=device)} for n in (1, 3, 5)]
    checks.check_cases("double", lambda x: 2 * x, lambda x: x + x, cases)
    text = message(checks.check_cases, "double", lambda x: 2 * x if x.numel() < 5 else x, lambda x: x + x, cases)
    assert "x = tensor(shape=(5,)" in text


def test_seeded_inputs_repeat_and_differ():
    assert torch.equal(inputs.randn(3, seed=7, device="cpu"), inputs.randn(3, seed=7, device="cpu"))
    assert not torch.equal(inputs.randn(3, seed=7, device="cpu"), inputs.randn(3, seed=8, device="cpu"))
    assert inputs.shapes(0, 4) == inputs.shapes(0, 4) and len(inputs.shapes(0, 4)) == 4


def test_forbid_catches_a_feature_however_it_was_bound_and_reports_it():
    from torch.amp import GradScaler
    from torch.utils.checkpoint import checkpoint as bound_early

    def by_module_path(x):
        return torch.utils.checkpoint.checkpoint(torch.sin, x, use_reentrant=False)

    def by_early_name(x):
        return bound_early(torch.sin, x, use_reentrant=False)

    def by_class(x):
        GradScaler("cpu").get_scale()
        return x

    forbid = (torch.utils.checkpoint.checkpoint, GradScaler)
    for fn in (by_module_path, by_early_name, by_class):
        text = message(checks.call_student, "ex", fn, torch.ones(2), forbid=forbid)
        assert text.startswith("ex: called torch.") and "build that yourself" in text
    assert torch.equal(checks.call_student("ex", torch.sin, torch.zeros(2), forbid=forbid), torch.zeros(2))
    import sys
    assert sys.getprofile() is None  # the watch is removed afterwards


def test_forbidden_block_guards_a_whole_session_of_calls():
    from torch.amp import GradScaler
    with pytest.raises(checks.GradingError, match="GradScaler"):
        with checks.forbidden("scaler", GradScaler):
            GradScaler("cpu", init_scale=4.0).update()  # raises: no scale() first
    with checks.forbidden("scaler", GradScaler):
        torch.ones(3).sum()


def test_torch_dynamo_can_first_be_imported_while_autograd_is_forbidden():
    import subprocess
    import sys
    code = ("import torch\nfrom autograder import checks\n"
            "def fn(x):\n    import torch._dynamo\n    return x\n"
            "checks.call_student('ex', fn, torch.ones(2), no_autograd=True)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def test_forbid_takes_an_autograd_function_class():
    from torch.utils.checkpoint import CheckpointFunction

    def by_function(x):
        return CheckpointFunction.apply(torch.sin, True, x)

    text = message(checks.call_student, "ex", by_function, torch.ones(2, requires_grad=True),
                   forbid=(CheckpointFunction,))
    assert "CheckpointFunction" in text


@pytest.mark.parametrize("length", [499, 500, 501, 523, 5_000, 5_000_000])
def test_capped_fits_its_limit_counts_what_it_cut_and_capping_again_changes_nothing(length):
    """A message capped where it is stored and again where it is reported (scores.csv) once ended
    with "[22 more characters]": the marker's own length, not what was cut."""
    from autograder.checks.compare import capped
    text = "y" * length
    once = capped(text, 500)
    assert len(once) <= 500 and capped(once, 500) == once
    if length > 500:
        kept = once.index("…")
        assert once.endswith(f"[{length - kept:,} more characters]") and kept > 450
    else:
        assert once == text


# --- autograder.checks.nb01_chain_rule.layouts: inputs reach the learner in the layout the check built ---------
LAYOUT_CELL = """
import torch
from autograder.checks import battery
from autograder.checks.nb01_chain_rule import layouts
x = torch.arange(12, dtype=torch.float64).reshape(3, 4)
layouts.check_layouts("layout", layout, lambda x: torch.zeros((), dtype=torch.float64),
                      [{"x": battery.transposed(x)}, {"x": battery.non_contiguous(x)}], what="x", names=["flag"])
"""


def reports_contiguity(x):
    """A learner's function that answers 1.0 when it was handed contiguous memory."""
    return torch.tensor(float(x.is_contiguous()), dtype=torch.float64)


def flattens_with_view(x):
    return (x.view(-1) > 0).to(x.dtype).view(x.shape)


def run_layout_cell(source, fn, trusted):
    """The cell's error (None if it passed), run beside `fn` (plain) or reaching it through data (trusted)."""
    import mutation
    try:
        return mutation._run_cell(source, "layout", {"__name__": "__main__", "layout": fn}, trusted)
    except checks.GradingError as err:
        return err


@pytest.mark.parametrize("trusted", [False, True], ids=["plain", "trusted"])
def test_check_layouts_hands_over_a_transpose_and_a_slice_as_they_are(trusted):
    assert run_layout_cell(LAYOUT_CELL, reports_contiguity, trusted) is None
    mask_cell = LAYOUT_CELL.replace("lambda x: torch.zeros((), dtype=torch.float64)", "lambda x: (x > 0).double()")
    err = run_layout_cell(mask_cell, flattens_with_view, trusted)
    assert "layout: fails for a non-contiguous x: .view needs contiguous memory" in str(err), err


# --- autograder.checks.nb01_chain_rule: the checks 01's grade cells once wrote out ------------------------------
def test_an_example_written_out_is_shown_as_written():
    from autograder.checks import nb01_chain_rule
    example = {"W": [[1.0, 2.0, 3.0]], "x": [1.0, 0.0, -1.0], "y": [0.0]}
    right = lambda W, x, y: 2 * (W @ x - y)[:, None] * x[None, :]  # noqa: E731
    nb01_chain_rule.check_example("linear_mse_grad", right, example, [[-4.0, 0.0, 4.0]], names=["dL/dW"])
    with pytest.raises(checks.GradingError) as wrong:
        nb01_chain_rule.check_example("linear_mse_grad", lambda W, x, y: (W @ x - y)[:, None] * x[None, :], example,
                                      [[-4.0, 0.0, 4.0]], names=["dL/dW"])
    assert "wrong values in dL/dW\n  on input:\n    W = [[1.0, 2.0, 3.0]]\n    x = [1.0, 0.0, -1.0]" in str(wrong.value)


def test_the_checks_of_01_refuse_autograd_name_the_stress_and_see_a_changed_input():
    from autograder.checks import nb01_chain_rule
    by_autograd = lambda x: torch.autograd.grad(torch.relu(x.requires_grad_()).sum(), x)[0]  # noqa: E731
    with pytest.raises(checks.GradingError, match="called autograd"):
        nb01_chain_rule.check_relu_grad("relu_grad", by_autograd, [{"x": torch.randn(3, dtype=torch.float64)}])
    with pytest.raises(checks.GradingError, match="fails for the special points of the function.*x > 0, not x >= 0"):
        nb01_chain_rule.check_relu_grad("relu_grad", lambda x: (x >= 0).to(x.dtype),
                                        [{"x": nb01_chain_rule.special_points()}], stress="special-points")
    nb01_chain_rule.check_numerical_grad("numerical_grad", lambda f, x: 2 * x,
                                         [{"f": nb01_chain_rule.squares_as_a_number, "x": torch.ones(2, 3)}])

    def perturbs_in_place(f, x):
        x += 1e-6
        return torch.zeros_like(x)

    with pytest.raises(checks.GradingError, match="changed the caller's x"):
        nb01_chain_rule.check_keeps_input("numerical_grad", perturbs_in_place,
                                          {"f": nb01_chain_rule.cubic_cosine, "x": torch.ones(2, dtype=torch.float64)})


@pytest.mark.parametrize("failure, words", [
    ("Value: raised OverflowError: math range error", "only takes exp of numbers <= 0"),
    ("relu_grad: wrong values in relu'(x)", "the mask is x > 0, not x >= 0"),
    ("sigmoid_grad: wrong values", "look for 0/0, inf/inf"),
])
def test_special_points_advice_names_overflow_and_the_relu_kink(failure, words):
    from autograder.checks import battery
    with pytest.raises(checks.GradingError) as info, battery.trying("ex", "special-points"):
        raise checks.GradingError(failure)
    assert words in str(info.value)


def test_no_autograd_catches_forward_mode_however_it_was_reached():
    """A notebook 01 computed entirely by forward-mode autograd once scored 12/12."""
    import torch.autograd.forward_ad as fwAD
    from torch.autograd.forward_ad import dual_level, make_dual, unpack_dual
    from torch.func import hessian, jacfwd, jvp, linearize

    def by_dual_numbers(x):
        with dual_level():
            return unpack_dual(torch.sigmoid(make_dual(x, torch.ones_like(x)))).tangent

    def by_module_path(x):
        with fwAD.dual_level():
            return fwAD.unpack_dual(torch.sin(fwAD.make_dual(x, torch.ones_like(x)))).tangent

    def by_jvp(x):
        return jvp(torch.sigmoid, (x,), (torch.ones_like(x),))[1]

    def by_jacfwd(x):
        return jacfwd(torch.sin)(x).diagonal()

    def by_hessian(x):
        return hessian(lambda t: t.sin().sum())(x).diagonal()

    def by_linearize(x):
        return linearize(torch.sin, x)[1](torch.ones_like(x))

    def by_functional(x):
        return torch.autograd.functional.jvp(torch.sin, x, torch.ones_like(x))[1]

    x = torch.linspace(-1, 1, 3)
    for fn in (by_dual_numbers, by_module_path, by_jvp, by_jacfwd, by_hessian, by_linearize, by_functional):
        assert "called autograd" in message(checks.call_student, "ex", fn, x, no_autograd=True), fn.__name__
    assert torch.allclose(by_jvp(x), torch.sigmoid(x) * (1 - torch.sigmoid(x)))  # restored afterwards


def test_forbidden_blocks_nest_and_a_renamed_copy_of_the_code_is_still_seen():
    """An inner watch once replaced the outer one (sys.setprofile without chaining), and a copy of a
    forbidden function's code with another name (`__code__.replace(co_name=...)`) went unseen."""
    import sys

    from torch.utils.checkpoint import checkpoint

    def outer_only(x):
        return torch.utils.checkpoint.checkpoint(torch.sin, x, use_reentrant=False)

    with pytest.raises(checks.GradingError, match="checkpoint"):
        with checks.forbidden("outer", checkpoint):
            with checks.forbidden("inner", torch.amp.GradScaler):
                outer_only(torch.ones(2, requires_grad=True))
    assert sys.getprofile() is None

    import types

    import torch.nn.functional as F
    renamed = types.FunctionType(F.batch_norm.__code__.replace(co_name="harmless", co_qualname="harmless"),
                                 F.batch_norm.__globals__, "harmless", F.batch_norm.__defaults__)
    x = torch.randn(4, 3)
    with pytest.raises(checks.GradingError, match="batch_norm"):
        with checks.forbidden("renamed", F.batch_norm):
            renamed(x, None, None, training=True)
