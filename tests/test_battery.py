"""The shared battery: each input has the property that breaks right-looking code, and a failure
under `trying` names the input and the usual reason."""
import importlib
import pathlib
import re

import course
import pytest
import torch

from autograder.checks import GradingError, battery, expect_close


def test_large_mean_breaks_the_one_pass_variance_in_float32_only():
    x = battery.large_mean(64, 3, seed=0, device="cpu")
    assert x.dtype == torch.float32 and (x.mean(0) - 1e3).abs().max() < 1

    def one_pass(t):
        return (t * t).mean(0) - t.mean(0) ** 2

    reference = x.double().var(0, unbiased=False)
    assert ((one_pass(x).double() - reference).abs() / reference).max() > 1e-2   # float32: digits lost
    assert torch.allclose(one_pass(x.double()), reference, rtol=1e-6)            # float64: fine
    assert torch.allclose(((x - x.mean(0)) ** 2).mean(0).double(), reference, rtol=1e-4)  # two-pass: fine


def test_large_logits_overflow_a_softmax_without_the_max():
    z = battery.large_logits(4, 5, seed=1, device="cpu")
    assert z.abs().max() > 100
    naive = z.exp() / z.exp().sum(-1, keepdim=True)
    assert torch.isnan(naive).any()
    assert not torch.isnan(z.softmax(-1)).any()


def test_special_points_hold_zero_and_both_signs_of_large():
    p = battery.special_points(torch.float32, "cpu", large=1e4)
    assert (p == 0).any() and (p == 1e4).any() and (p == -1e4).any() and p.dtype == torch.float32


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 1), (1, 6)])
def test_non_contiguous_keeps_values_and_breaks_view(shape):
    t = torch.arange(torch.Size(shape).numel(), dtype=torch.float64).reshape(shape).requires_grad_()
    s = battery.non_contiguous(t)
    assert torch.equal(s, t) and s.shape == t.shape and s.dtype == t.dtype
    assert not s.is_contiguous() and s.is_leaf and s.requires_grad
    if sum(size > 1 for size in shape) >= 2:  # two dimensions to merge
        with pytest.raises(RuntimeError, match="view"):
            s.view(-1)


def test_transposed_and_expanded_views():
    t = torch.randn(3, 4)
    assert torch.equal(battery.transposed(t), t) and not battery.transposed(t).is_contiguous()
    e = battery.expanded(t[:1], 5)
    assert e.shape == (5, 4) and e.stride(0) == 0
    with pytest.raises(ValueError, match="first dimension is 1"):
        battery.expanded(t, 5)
    assert battery.batch_of_one(t).shape == (1, 4)


def test_trying_names_the_stress_and_the_reason():
    with pytest.raises(GradingError) as err:
        with battery.trying("embedding_backward", "non-contiguous", what="dout"):
            raise GradingError("embedding_backward: raised RuntimeError: view size is not compatible with input "
                               "tensor's size and stride")
    message = str(err.value)
    assert message.startswith("embedding_backward: fails for a non-contiguous dout: .view needs contiguous memory")
    assert "view size is not compatible" in message  # the check's own message follows


def test_trying_explains_a_nan_from_cancellation_and_passes_success_through():
    with battery.trying("ex", "float32-large-mean"):
        expect_close("ex", torch.ones(2), torch.ones(2))
    with pytest.raises(GradingError, match="fails for float32 input whose mean .* subtract the mean first"):
        with battery.trying("ex", "float32-large-mean"):
            expect_close("ex", torch.tensor([float("nan"), 1.0]), torch.ones(2))


def test_nested_trying_names_the_stress_once_and_unknown_stresses_are_refused():
    with pytest.raises(GradingError) as err:
        with battery.trying("ex", "batch-of-one"):
            with battery.trying("ex", "batch-of-one"):
                raise GradingError("ex: wrong shape")
    assert str(err.value).count("fails for a batch of one") == 1
    with pytest.raises(KeyError, match="unknown stress"):
        battery.describe("sideways")


def test_other_errors_pass_through_untouched():
    """Only a grading verdict is relabelled: a bug in a check itself must surface as it is."""
    with pytest.raises(ZeroDivisionError):
        with battery.trying("ex", "expanded"):
            1 / 0  # noqa: B018


@pytest.mark.parametrize("name", course.assignment_names())
def test_every_notebooks_hidden_tests_draw_on_the_battery(name):
    """Issue 22: one shared battery that every notebook's checks draw from, not a copy per notebook."""
    sources = " ".join(c.source for c in course.grade_cells(course.read(course.solution_path(name))))
    modules = set(re.findall(r"from autograder\.checks import (\w+)", sources))
    modules |= set(re.findall(r"from autograder\.checks\.(\w+)", sources))
    texts = [sources]
    for module in modules - {"battery"}:
        imported = importlib.import_module(f"autograder.checks.{module}")
        folder = getattr(imported, "__path__", None)
        files = sorted(pathlib.Path(folder[0]).glob("*.py")) if folder else [pathlib.Path(imported.__file__)]
        texts += [f.read_text() for f in files]
    assert any("battery" in text for text in texts), f"{name}'s hidden tests never use autograder.checks.battery"
