"""autograder.checks.nb03_vjp: inputs keep their layout, references are right, guards catch what they
should and leave nothing behind, and each checker accepts a right answer and names a wrong one.

The custom Functions and engines used as fixtures come from the mutation catalogue of notebook 03
(`tests/mutants/nb03_vjp.py`), where they are already sorted into right and wrong.
"""
import dataclasses
import re
import sys
from unittest import mock

import mutation
import pytest
import torch
import torch.nn.functional as F
from mutants import nb03_vjp as catalogue

from autograder import checks
from autograder.checks import GradingError, battery, boundary
from autograder.checks import nb03_vjp as vc
from autograder.checks.nb03_vjp import tensor_engine
from autograder.checks.nb03_vjp.cases import LAYOUTS, is_expanded, private_copy, relayout
from autograder.checks.nb03_vjp.functions import FunctionRun
from autograder.checks.nb03_vjp.tensor_engine import EngineNode, toy_regression
from autograder.checks.nb03_vjp.watch import human_bytes


def softmax_vjp(y, g, dim=-1):
    return y * (g - (g * y).sum(dim, keepdim=True))


def unbroadcast(g, shape):
    while g.dim() > len(shape):
        g = g.sum(0)
    for i, size in enumerate(shape):
        if size == 1:
            g = g.sum(i, keepdim=True)
    return g


# --- inputs --------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4), (5,), (2, 1, 3)])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_relayout_keeps_the_values_and_changes_the_strides(shape, layout):
    t = vc.tensor(shape, seed=1)
    moved = relayout(t, layout)
    assert torch.equal(moved, t)
    if layout == "sliced" or (layout == "transposed" and len(shape) >= 2 and shape[-1] > 1 and shape[-2] > 1):
        assert not moved.is_contiguous()


def test_private_copies_keep_the_strides_and_share_no_memory():
    for layout in ("transposed", "sliced"):
        t = vc.tensor((3, 4), seed=2, layout=layout)
        copy = private_copy(t)
        assert copy.stride() == t.stride() and torch.equal(copy, t)
        copy.add_(1.0)
        assert torch.equal(t, vc.tensor((3, 4), seed=2))


def test_broadcast_patterns_are_valid_and_cover_every_kind():
    pairs = vc.broadcast_patterns(seed=0, count=60)
    kinds = set()
    for target, g_shape in pairs:
        assert torch.broadcast_shapes(target, g_shape) == torch.Size(g_shape)
        leading = len(g_shape) > len(target)
        stretched = any(t == 1 and s != 1 for t, s in zip(target, g_shape[len(g_shape) - len(target):]))
        kinds.add((leading, stretched))
    assert kinds == {(False, False), (True, False), (False, True), (True, True)}


def test_dtype_layouts_cover_the_six_pairs_in_three_cases():
    pairs = {pair for i in range(3) for pair in vc.dtype_layouts(i)}
    assert pairs == {(d, layout) for d in (torch.float64, torch.float32) for layout in LAYOUTS}


@pytest.mark.parametrize("builder, spec", [
    (vc.relu_case, dict(shape=(3, 4), seed=1)),
    (vc.sigmoid_case, dict(shape=(3, 4), seed=2)),
    (vc.linear_case, dict(batch=(2, 3), n=4, m=5, seed=3, layout="transposed")),
    (vc.matmul_case, dict(a_shape=(2, 1, 3, 4), b_shape=(5, 4, 2), seed=4)),
    (vc.unbroadcast_case, dict(target=(3, 1), g_shape=(2, 3, 4), seed=5)),
    (vc.softmax_case, dict(shape=(2, 3, 4), dim=1, seed=6, layout="sliced")),
    (vc.layernorm_case, dict(shape=(2, 3, 5), seed=7, eps=0.1)),
])
def test_expected_values_are_autograds(builder, spec):
    """The references agree with an independent computation (finite-difference-free closed forms)."""
    case = builder(**spec)
    inputs = case.inputs
    if builder is vc.relu_case:
        independent = inputs["g"] * (inputs["x"] > 0)
    elif builder is vc.sigmoid_case:
        independent = inputs["g"] * inputs["y"] * (1 - inputs["y"])
    elif builder is vc.linear_case:
        g2, x2 = inputs["g"].reshape(-1, 5), inputs["x"].reshape(-1, 4)
        independent = (inputs["g"] @ inputs["W"], g2.T @ x2, g2.sum(0))
    elif builder is vc.matmul_case:
        independent = (unbroadcast(inputs["g"] @ inputs["B"].mT, (2, 1, 3, 4)),
                       unbroadcast(inputs["A"].mT @ inputs["g"], (5, 4, 2)))
    elif builder is vc.unbroadcast_case:
        independent = inputs["g"].sum(0).sum(1, keepdim=True)
    elif builder is vc.softmax_case:
        independent = softmax_vjp(inputs["y"], inputs["g"], 1)
    else:
        x, w, g = inputs["x"], inputs["weight"], inputs["g"]
        mean, var = x.mean(-1, keepdim=True), x.var(-1, keepdim=True, unbiased=False)
        xhat = (x - mean) / (var + 0.1).sqrt()
        gh = g * w
        gx = (gh - gh.mean(-1, keepdim=True) - xhat * (gh * xhat).mean(-1, keepdim=True)) / (var + 0.1).sqrt()
        independent = (gx, (g * xhat).sum((0, 1)), g.sum((0, 1)))
    expected = case.expected if isinstance(case.expected, tuple) else (case.expected,)
    independent = independent if isinstance(independent, tuple) else (independent,)
    for a, b in zip(expected, independent):
        torch.testing.assert_close(a, b)


# --- the VJP checker and its guards ----------------------------------------------------------------
SOFTMAX_CASES = [vc.softmax_case((4, 64), dim=-1, seed=10),
                 vc.softmax_case((3, 5), dim=0, seed=11, dtype=torch.float32)]


def test_a_correct_vjp_passes():
    vc.check_vjp("vjp_softmax", softmax_vjp, SOFTMAX_CASES)


def no_guard_left_behind():
    """After any check: no profile hook, no dispatch mode, autograd usable."""
    assert sys.getprofile() is None
    assert torch._C._len_torch_dispatch_stack() == 0
    leaf = torch.ones(2, requires_grad=True)
    assert torch.equal(torch.autograd.grad((leaf * 3).sum(), leaf)[0], torch.full((2,), 3.0))


def secret_autograd(y, g, dim=-1):
    with torch.enable_grad():
        z = y.log().detach().requires_grad_(True)
        return torch.autograd.grad(torch.softmax(z, dim), z, g)[0]


def backward_kernel(y, g, dim=-1):
    return torch._softmax_backward_data(g, y, dim, y.dtype)


def jacobian(y, g, dim=-1):
    ym, gm = y.movedim(dim, -1), g.movedim(dim, -1)
    J = torch.diag_embed(ym) - ym[..., :, None] * ym[..., None, :]
    return (J @ gm[..., None])[..., 0].movedim(-1, dim)


def forgets_the_dot_product(y, g, dim=-1):
    return y * g


def not_written_yet(y, g, dim=-1):
    raise NotImplementedError()


@pytest.mark.parametrize("fn, message", [
    (secret_autograd, "called autograd"),
    (backward_kernel, "backward kernel aten::_softmax_backward_data"),
    (jacobian, "allocated a tensor of shape (4, 64, 64)"),
    (forgets_the_dot_product, "wrong values in dL/dz"),
    (not_written_yet, "not implemented yet"),
])
def test_wrong_vjps_are_named_and_the_guards_are_removed(fn, message):
    with pytest.raises(GradingError, match=None) as caught:
        vc.check_vjp("vjp_softmax", fn, SOFTMAX_CASES)
    assert message in str(caught.value)
    assert "vjp_softmax" in str(caught.value)
    no_guard_left_behind()


def test_a_forbidden_call_is_caught_however_it_was_bound():
    sum_to = torch.Tensor.sum_to_size
    cases = [vc.unbroadcast_case((3, 1), (2, 3, 4), seed=12)]
    vc.check_vjp("unbroadcast", unbroadcast, cases, forbidden_calls=("sum_to_size",))
    for fn in (lambda g, shape: g.sum_to_size(tuple(shape)), lambda g, shape: sum_to(g, tuple(shape))):
        with pytest.raises(GradingError, match="called sum_to_size"):
            vc.check_vjp("unbroadcast", fn, cases, forbidden_calls=("sum_to_size",))
        no_guard_left_behind()


def test_the_learner_sees_the_layout_and_cannot_touch_the_reference():
    seen = []

    def spy(y, g, dim=-1):
        seen.append((y.is_contiguous(), g.is_contiguous()))
        out = softmax_vjp(y, g, dim)
        y.zero_()  # an in-place edit of the learner's copy
        return out

    cases = [vc.softmax_case((3, 4), dim=-1, seed=13, layout=layout) for layout in LAYOUTS]
    kept = [c.inputs["y"].clone() for c in cases]
    vc.check_vjp("vjp_softmax", spy, cases)
    # a strided case runs after its contiguous twin (same values): a failure there is not the layout's
    assert seen == [(True, True), (True, True), (False, False), (True, True), (False, False)]
    assert all(torch.equal(c.inputs["y"], k) for c, k in zip(cases, kept))


def flattens_with_view(y, g, dim=-1):
    return softmax_vjp(y.view(-1).view(y.shape), g.view(-1).view(g.shape), dim)


def test_a_failure_message_names_the_layout_only_when_the_layout_broke_it():
    """A wrong formula fails on the contiguous twin, with the plain message; an answer that only the
    strides break is told so, with the battery's advice."""
    case = vc.softmax_case((3, 4), dim=-1, seed=14, layout="transposed")
    with pytest.raises(GradingError, match="layout = 'contiguous'") as caught:
        vc.check_vjp("vjp_softmax", forgets_the_dot_product, [case])
    assert "fails for" not in str(caught.value)
    with pytest.raises(GradingError, match="fails for a non-contiguous y, g: .view needs contiguous memory") as caught:
        vc.check_vjp("vjp_softmax", flattens_with_view, [case])
    assert "y, g non-contiguous (last two dims transposed in memory)" in str(caught.value)
    no_guard_left_behind()


def test_the_memory_rule_allows_what_the_notebook_teaches():
    """g @ B.mT lives on C's batch shape before unbroadcast sums it back: as large as A broadcast."""
    def recipe(A, B, g):
        return unbroadcast(g @ B.mT, A.shape), unbroadcast(A.mT @ g, B.shape)

    case = vc.matmul_case((10, 1, 1, 400), (10, 400, 1), seed=15)
    vc.check_vjp("vjp_matmul", recipe, [case])
    assert case.broadcast_bytes == 10 * 10 * 1 * 400 * 8

    def hoards(A, B, g):  # a (B, n, k, m)-sized product per batch: still rejected
        products = A[..., :, :, None] * B[..., None, :, :] * g[..., :, None, :]
        return recipe(A, B, g) if products.numel() else None

    with pytest.raises(GradingError, match="more than 4 times the largest input"):
        vc.check_vjp("vjp_matmul", hoards, [vc.matmul_case((2, 16, 16), (2, 16, 16), seed=16)])
    no_guard_left_behind()


@pytest.mark.parametrize("wrong", [catalogue.ub_empty_dim,
                                   lambda g, shape: [g := g.sum(dim=tuple(range(g.dim() - len(shape)))),
                                                     *[g := g.sum(i, keepdim=True) for i, size in enumerate(shape)
                                                       if size == 1]][-1]])
def test_unbroadcast_names_the_empty_dim_trap(wrong):
    cases = [vc.unbroadcast_case((3,), (2, 3), seed=7), vc.unbroadcast_case((2, 3), (2, 3), seed=8),
             vc.unbroadcast_case((2, 1), (2, 3), seed=9)]
    with pytest.raises(GradingError, match=r"dim=\(\) sums every dimension"):
        vc.check_unbroadcast("unbroadcast", wrong, cases)
    with pytest.raises(GradingError, match=r"dim=\(\) sums every dimension"):  # 0-d, or an error that says why
        vc.check_unbroadcast("unbroadcast", wrong, cases[2:])
    vc.check_unbroadcast("unbroadcast", unbroadcast, cases)


# --- the battery's stresses, as notebook 03 draws them ----------------------------------------------
def test_expanded_inputs_keep_stride_zero_through_a_private_copy_and_their_reference():
    case = vc.linear_case((4,), n=3, m=2, seed=40, expand=("x", "g"))
    x, g = case.inputs["x"], case.inputs["g"]
    assert is_expanded(x) and is_expanded(g) and not is_expanded(case.inputs["W"])
    assert torch.equal(x, x[:1].expand_as(x)) and case.layout_stress() == ("expanded", "x, g")
    copy = private_copy(g)
    assert copy.stride() == g.stride() and torch.equal(copy, g) and copy.data_ptr() != g.data_ptr()
    gx, gW, gb = case.expected
    torch.testing.assert_close(gW, g.T @ x)  # the reference is autograd's on the expanded values
    assert "x, g expanded" in case.shown_inputs()["layout"]


def test_stressed_strided_inputs_keep_their_values_and_reference():
    plain = vc.layernorm_case((2, 3, 4), seed=41)
    case = vc.stressed(plain, "non-contiguous", ("x", "g"))
    assert not case.inputs["x"].is_contiguous() and not case.inputs["g"].is_contiguous()
    assert torch.equal(case.inputs["x"], plain.inputs["x"]) and case.expected is plain.expected
    assert case.layout_stress() == ("non-contiguous", "x, g")
    with pytest.raises(RuntimeError, match="view"):
        case.inputs["x"].view(-1, 4)  # gaps in every dimension: no two of them merge
    with pytest.raises(KeyError, match="unknown stress"):
        vc.stressed(plain, "strided")


@pytest.mark.parametrize("builder, lowest", [(vc.relu_case, None), (vc.sigmoid_case, 0.0), (vc.tanh_case, -1.0)])
def test_the_special_points_are_the_batterys(builder, lowest):
    case = builder(None, seed=42, special=True)
    assert case.stress == "special-points" and case.inputs["g"].shape == (9,) and torch.isfinite(case.expected).all()
    if lowest is None:
        assert torch.equal(case.inputs["x"], battery.special_points())
    else:  # at x = -1e4 and 1e4 the output saturates to the last bit
        assert case.inputs["y"].min() == lowest and case.inputs["y"].max() == 1.0


def test_large_logits_and_large_means_are_float32_with_a_float64_reference():
    case = vc.log_softmax_case((4, 10), dim=-1, seed=43, large_logits=True)
    y, g = case.inputs["y"], case.inputs["g"]
    assert y.dtype == case.expected.dtype == torch.float32 and case.stress == "large-logits"
    assert (y.exp() == 0).any()  # probabilities that underflow: what a division by them turns into NaN
    y64, g64 = y.double(), g.double()
    torch.testing.assert_close(case.expected, (g64 - y64.exp() * g64.sum(-1, keepdim=True)).float())
    ln = vc.layernorm_case((8, 16), seed=44, large_mean=True)
    assert ln.inputs["x"].dtype == torch.float32 and ln.stress == "float32-large-mean"
    assert ln.inputs["x"].mean() > 900 and ln.tolerance[0] < 1e-2


@pytest.mark.parametrize("wrong, cases, says", [
    (catalogue.relu_in_place, [vc.relu_case((4, 5), seed=45, expand=("g",))], "fails for an expanded g"),
    (catalogue.sig_via_exp_minus_x, [vc.sigmoid_case(None, seed=46, special=True)], "fails for the special points"),
    (catalogue.lsm_through_softmax, [vc.log_softmax_case((4, 10), dim=-1, seed=47, large_logits=True)],
     "fails for float32 logits as large as a few hundred: y holds log-probabilities"),
    (catalogue.ln_one_pass_variance, [vc.layernorm_case((8, 16), seed=48, large_mean=True)],
     "fails for float32 input whose mean is about 1000 times its spread: cancellation"),
    (catalogue.lin_squeeze_first, [vc.stressed(vc.linear_case((1,), n=3, m=2, seed=49), "batch-of-one")],
     "fails for a batch of one: do not .squeeze()"),
    (catalogue.lin_view, [vc.stressed(vc.linear_case((2, 3), n=4, m=3, seed=50), "non-contiguous", ("x", "g"))],
     "fails for a non-contiguous x, g: .view needs contiguous memory"),
])
def test_each_stress_rejects_what_it_is_for_and_names_itself(wrong, cases, says):
    name = wrong.__name__
    exercise = {"relu": "vjp_relu", "sig": "vjp_sigmoid", "lsm": "vjp_log_softmax", "ln_": "vjp_layernorm",
                "lin": "vjp_linear"}[next(k for k in ("relu", "sig", "lsm", "ln_", "lin") if name.startswith(k))]
    right = mutation.solution_namespace("03_vjp")[exercise]
    vc.check_vjp(exercise, right, cases)
    with pytest.raises(GradingError) as caught:
        vc.check_vjp(exercise, wrong, cases)
    assert says in str(caught.value)
    no_guard_left_behind()


@pytest.mark.parametrize("wrong, case, says", [
    (catalogue.lsm_through_softmax, vc.log_softmax_case((3, 8), dim=0, seed=54, large_logits=True), "divide by p"),
    (lambda y, g, dim=-1: (lambda p: p * (g / p - (g * p).sum(dim, keepdim=True) / p) * p)(y),
     vc.softmax_case((3, 8), dim=-1, seed=55, large_logits=True), "do not divide by y"),
])
def test_a_vjp_given_probabilities_is_told_about_the_division_not_the_logits(wrong, case, says):
    """Its inputs are (log-)probabilities, not logits: the battery's "subtract each row's largest logit"
    would send the learner to a fix that is not theirs to make."""
    exercise = "vjp_log_softmax" if "log_softmax" in case.note else "vjp_softmax"
    with pytest.raises(GradingError) as caught:
        vc.check_vjp(exercise, wrong, [case])
    assert says in str(caught.value) and "largest logit before exp" not in str(caught.value)
    no_guard_left_behind()


def test_a_logsumexp_without_the_max_shift_keeps_at_most_one_point_of_four():
    """Large logits are the stress the exercise is about, so they sit in its main grade cell: a naive forward
    passes only the gradcheck cell (its backward is right at small x)."""
    nb = mutation.course.read(mutation.course.solution_path("03_vjp"))
    points = {mutation.course.nbgrader_meta(c)["grade_id"]: mutation.course.nbgrader_meta(c)["points"]
              for c in mutation.course.grade_cells(nb)}
    for naive in (catalogue.LSENaive, catalogue.LSENoAddBack):
        results = mutation.run_grade_cells("03_vjp", "StableLogSumExp", naive)
        kept = sum(points[grade_id] for grade_id, err in results.items() if err is None)
        assert sum(points[grade_id] for grade_id in results) == 4 and kept <= 1, (naive.__name__, results)

def test_logsumexp_at_minus_infinity_keeps_a_finite_tolerance_and_names_the_stress():
    inf = float("inf")
    case = vc.logsumexp_case(None, dim=1, seed=51, values=[[-inf, 0.0, 1.0], [2.0, -inf, 3.0]], stress="special-points")
    assert case.rtol < 1e-6 and torch.isfinite(case.expected_out).all()
    vc.check_logsumexp("StableLogSumExp", catalogue._LSEBase, [case])
    with pytest.raises(GradingError, match="fails for the special points"):
        vc.check_logsumexp("StableLogSumExp", catalogue.LSEShiftsByMean, [case])


def test_a_backward_that_double_backward_cannot_follow_is_named_a_create_graph_failure():
    with pytest.raises(GradingError, match=re.escape("fails for backward(create_graph=True)")):
        vc.check_gradchecks("StableLogSumExp", lambda: (lambda t: catalogue.LSEDetachedBackward.apply(t, 1)),
                            vc.tensor((3, 4), seed=52), what="apply(x, 1)")
    with pytest.raises(GradingError) as caught:  # a wrong first derivative is not blamed on create_graph
        vc.check_gradchecks("StableLogSumExp", lambda: (lambda t: catalogue.LSEUnnormalised.apply(t, 1)),
                            vc.tensor((3, 4), seed=53), what="apply(x, 1)")
    assert "gradcheck failed" in str(caught.value) and "create_graph" not in str(caught.value)


def test_human_bytes():
    assert human_bytes(512) == "512 bytes"
    assert human_bytes(3 * 1024**2) == "3.0 MiB"
    assert human_bytes(2 * 1024**5) == "2.0 PiB"


# --- custom Functions ------------------------------------------------------------------------------
LSE_CASES = [vc.logsumexp_case((3, 5), dim=1, seed=20), vc.logsumexp_case((2, 3, 4), dim=0, seed=21, layout="sliced"),
             vc.logsumexp_case(None, dim=1, seed=22, dtype=torch.float32, values=[[1000.0, 1000.0], [-1000.0, 1.0]])]


def test_a_correct_logsumexp_passes_every_check():
    for right in (catalogue._LSEBase, catalogue.LSESetupContext):
        vc.check_logsumexp("StableLogSumExp", right, LSE_CASES)
        vc.check_gradchecks("StableLogSumExp", lambda fn=right: (lambda t: fn.apply(t, 1)), vc.tensor((3, 4), seed=23),
                            what="apply(x, 1)")
    no_guard_left_behind()


@pytest.mark.parametrize("cls, message", [
    (catalogue.LSESecretAutograd, "called autograd"),
    (catalogue.LSECallsTorch, "called aten::logsumexp"),
    (catalogue.LSENaive, "exp overflows"),
    (catalogue.LSEOneGradient, "backward should return a tuple of 2 values"),
    (catalogue.STRDetachTrick, "should be a subclass of torch.autograd.Function"),
])
def test_wrong_logsumexps_are_named(cls, message):
    with pytest.raises(GradingError) as caught:
        vc.check_logsumexp("StableLogSumExp", cls, LSE_CASES)
    assert message in str(caught.value)
    no_guard_left_behind()


@pytest.mark.parametrize("cls, cause", [
    (catalogue.LSEDetachedBackward, "compute it from forward's saved input and output"),
    (catalogue.LSESavesShiftedExponentials, "keeps ctx.saved_tensors[0] (shape (3, 4)), ctx.saved_tensors[1] "
                                            "(shape (3, 1)) for backward, and it carries no autograd history"),
    (catalogue.LSESavesSoftmax, "keeps ctx.saved_tensors[0] (shape (3, 4))"),
])
def test_gradgradcheck_names_why_a_backward_is_not_differentiable(cls, cause):
    with pytest.raises(GradingError) as caught:
        vc.check_gradchecks("StableLogSumExp", lambda: (lambda t: cls.apply(t, 1)), vc.tensor((3, 4), seed=24),
                            what="apply(x, 1)")
    message = str(caught.value)
    assert "gradgradcheck failed" in message and "Jacobian mismatch" in message and cause in message
    assert ".detach(), .item()" not in message or cls is catalogue.LSEDetachedBackward


def test_gradgradcheck_names_once_differentiable_and_ctx_attributes():
    from torch.autograd.function import once_differentiable

    class Once(catalogue._LSEBase):
        @staticmethod
        @once_differentiable
        def backward(ctx, grad_out):
            return catalogue._LSEBase.backward(ctx, grad_out)

    class KeepsAnAttribute(catalogue._LSEBase):
        @staticmethod
        def forward(ctx, x, dim):
            out = catalogue._LSEBase.forward(ctx, x, dim)
            ctx.softmax = (x - out.unsqueeze(dim)).exp()
            return out

        @staticmethod
        def backward(ctx, grad_out):
            return grad_out.unsqueeze(ctx.dim) * ctx.softmax, None

    for cls, cause in ((Once, "marked @once_differentiable"), (KeepsAnAttribute, "keeps ctx.softmax (shape (3, 4))")):
        with pytest.raises(GradingError, match=re.escape(cause)):
            vc.check_gradchecks("StableLogSumExp", lambda cls=cls: (lambda t: cls.apply(t, 1)),
                                vc.tensor((3, 4), seed=25), what="apply(x, 1)")
    for right in (catalogue.LSERecomputes, catalogue.LSESetupContext):
        vc.check_gradchecks("StableLogSumExp", lambda right=right: (lambda t: right.apply(t, 1)),
                            vc.tensor((3, 4), seed=26), what="apply(x, 1)")


def test_the_backward_is_called_without_the_engine():
    """The direct call is what proves a closed form: a backward that asks autograd fails even though
    the engine itself is allowed around it (gradcheck runs later, outside the guard)."""
    calls = []

    class Spy(catalogue._LSEBase):
        @staticmethod
        def backward(ctx, grad_out):
            calls.append(torch.is_grad_enabled())
            return catalogue._LSEBase.backward(ctx, grad_out)

    vc.check_logsumexp("StableLogSumExp", Spy, LSE_CASES[:1])
    assert calls[0] is False  # the direct call, under no_grad, then the call through the engine
    assert len(calls) == 2


def test_straight_through_checks():
    cases = [vc.rounding_cases(seed=30), vc.rounding_cases(seed=31, dtype=torch.float32, layout="transposed")]
    vc.check_straight_through("StraightThroughRound", catalogue.STRSetupContext, cases)
    for wrong, message in ((catalogue.STRZeros, "should be g itself"), (catalogue.STRHalfUp, "forward output"),
                           (catalogue.STRInteger, "grad_fn is None")):
        with pytest.raises(GradingError, match=message):
            vc.check_straight_through("StraightThroughRound", wrong, cases)
    x, _, _ = vc.rounding_cases(seed=32)
    assert ((x - x.floor()) == 0.5).any()  # the cases hold exact halves


# --- the tensor engine ------------------------------------------------------------------------------
def test_a_correct_engine_passes_every_check():
    for engine in (catalogue.AltTensor, catalogue.MarkerStackTensor):
        vc.check_engine_expression("Tensor", engine, "((a * b + a).relu() * a).mean()", {"a": (3, 4), "b": (4,)},
                                   seed=40)
        vc.check_engine_expression("Tensor", engine, "(k @ a + 1.0).sum()", {"a": (3, 2)}, seed=41,
                                   dtype=torch.float32, constants={"k": (4, 3)})
        vc.check_engine_mlp("Tensor", engine, n_in=2, hidden=5, n_out=1, batch=6, seed=42)
        vc.check_engine_training("Tensor", engine, hidden=8, steps=40, lr=0.1, seed=43, min_drop=1.5)
        vc.check_engine_deep("Tensor", engine, steps=1500, ladder=True)
    no_guard_left_behind()


def test_a_reference_training_run_lowers_the_loss():
    x, y = toy_regression(seed=0)
    params = tensor_engine._mlp_params(1, 16, 1, 1, torch.float64)
    losses, _ = tensor_engine.autograd_training(x, y, params, steps=150, lr=0.1)
    mine, _ = tensor_engine.run_engine_training(catalogue.AltTensor, x, y, params, steps=150, lr=0.1)
    assert losses[-1] * 4 < losses[0]
    torch.testing.assert_close(torch.tensor(mine), torch.tensor(losses))


@pytest.mark.parametrize("engine, check, message", [
    (catalogue.AssigningTensor, "expression", "wrong values in a.grad"),
    (catalogue.NoUnbroadcastAdd, "mlp", "b1.grad has shape (5, 5), expected (5,)"),
    (catalogue.RecursiveTensor, "deep", "RecursionError"),
    (catalogue.SecretAutogradTensor, "expression", "called autograd"),
    (catalogue.MeanWithoutDivide, "training", "the training loss differs from PyTorch's"),
])
def test_wrong_engines_are_named(engine, check, message):
    run = {"expression": lambda: vc.check_engine_expression("Tensor", engine, "(a * a + a).mean()", {"a": (3,)},
                                                            seed=50),
           "mlp": lambda: vc.check_engine_mlp("Tensor", engine, n_in=2, hidden=5, n_out=1, batch=5, seed=51),
           "deep": lambda: vc.check_engine_deep("Tensor", engine, steps=3000),
           "training": lambda: vc.check_engine_training("Tensor", engine, hidden=8, steps=20, lr=0.1, seed=52)}[check]
    with pytest.raises(GradingError) as caught:
        run()
    assert message in str(caught.value)
    no_guard_left_behind()


def test_the_recursion_limit_is_restored():
    before = sys.getrecursionlimit()
    with pytest.raises(GradingError):
        vc.check_engine_deep("Tensor", catalogue.RecursiveTensor, steps=3000)
    assert sys.getrecursionlimit() == before


def test_layer_norm_reference_uses_the_biased_variance():
    case = vc.layernorm_case((2, 4), seed=60, eps=0.0)
    x, w, b = case.inputs["x"], case.inputs["weight"], case.inputs["bias"]
    y = F.layer_norm(x, (4,), w, b, 0.0)
    xhat = (x - x.mean(-1, keepdim=True)) / x.var(-1, keepdim=True, unbiased=False).sqrt()
    torch.testing.assert_close(y, xhat * w + b)


# --- trusted grading: the learner's code runs in drivers, the comparisons here ------------------------
LSE_CELL = """
from autograder.checks import nb03_vjp
nb03_vjp.check_logsumexp("StableLogSumExp", StableLogSumExp, [nb03_vjp.logsumexp_case((2, 3), dim=1, seed=13)])
nb03_vjp.check_gradchecks("StableLogSumExp", lambda: (lambda t: StableLogSumExp.apply(t, 1)),
                          nb03_vjp.tensor((3, 4), seed=16), what="StableLogSumExp.apply(x, 1)")
"""
STR_CELL = """
from autograder.checks import nb03_vjp
nb03_vjp.check_straight_through("StraightThroughRound", StraightThroughRound,
                                [nb03_vjp.rounding_cases(seed=15, shape=(2, 3))])
"""
ENGINE_CELL = """
from autograder.checks import nb03_vjp
nb03_vjp.check_engine_expression("Tensor", Tensor, "((a * b + a).relu() * a).mean()", {"a": (3, 4), "b": (4,)}, seed=17)
nb03_vjp.check_engine_mlp("Tensor", Tensor, n_in=2, hidden=3, n_out=1, batch=4, seed=18)
nb03_vjp.check_engine_deep("Tensor", Tensor, steps=500)
"""


class PatchedKernel(mutation.Loopback):
    """A kernel where the submission has disabled every comparison it can reach."""

    def ask(self, request, response):
        with mock.patch.object(checks, "expect_close", lambda *a, **k: None), \
                mock.patch.object(torch, "allclose", lambda *a, **k: True), \
                mock.patch.object(torch.testing, "assert_close", lambda *a, **k: None):
            super().ask(request, response)


def run_trusted(source, name, implementation, kernel=mutation.Loopback, forge=None):
    """Run a test cell as trusted grading does (mutation's in-process kernel, or `kernel`); return its
    error (None if it passed) and every answer that came back from the kernel, after `forge`, which
    may rewrite them (a kernel that lies)."""
    answers = []

    class Recording(kernel):
        def call(self, exercise, fn, args, options):
            answer = super().call(exercise, fn, args, options)
            answers.append(answer)
            return forge(answer) if forge else answer

    with mock.patch.object(mutation, "Loopback", Recording):
        err = mutation._run_cell(source, "test", {"__name__": "__main__", name: implementation}, True)
    return err, answers


def flatten(answer):
    if isinstance(answer, (tuple, list)):
        return [leaf for item in answer for leaf in flatten(item)]
    if isinstance(answer, dict):
        return [leaf for item in answer.values() for leaf in flatten(item)]
    if isinstance(answer, (FunctionRun, EngineNode)):
        return [answer, *flatten([getattr(answer, f.name) for f in dataclasses.fields(answer)])]
    return [answer]


@pytest.mark.parametrize("source, name, right, record", [
    (LSE_CELL, "StableLogSumExp", catalogue.LSESetupContext, FunctionRun),
    (STR_CELL, "StraightThroughRound", catalogue.STRSetupContext, FunctionRun),
    (ENGINE_CELL, "Tensor", catalogue.AltTensor, EngineNode),
])
def test_trusted_grading_passes_a_right_answer_and_only_data_comes_back(source, name, right, record):
    err, answers = run_trusted(source, name, right)
    assert err is None
    assert answers
    leaves = [leaf for answer in answers for leaf in flatten(answer)]
    assert not [leaf for leaf in leaves if isinstance(leaf, (boundary.Opaque, boundary.Raised))]
    assert any(isinstance(leaf, record) for leaf in leaves)
    assert any(isinstance(leaf, torch.Tensor) for leaf in leaves)


@pytest.mark.parametrize("source, name, wrong, message", [
    (LSE_CELL, "StableLogSumExp", catalogue.LSEIgnoresUpstream, "wrong values in dL/dx from your backward"),
    (LSE_CELL, "StableLogSumExp", catalogue.LSENoAddBack, "wrong values in logsumexp(x)"),
    (LSE_CELL, "StableLogSumExp", catalogue.LSEDetachedBackward, "gradgradcheck failed"),
    (STR_CELL, "StraightThroughRound", catalogue.STRDetachTrick, "should be a subclass of torch.autograd.Function"),
    (STR_CELL, "StraightThroughRound", catalogue.STRZeros, "should be g itself"),
    (STR_CELL, "StraightThroughRound", catalogue.STRInteger, "grad_fn is None"),
    (ENGINE_CELL, "Tensor", catalogue.AssigningTensor, "wrong values in a.grad"),
    (ENGINE_CELL, "Tensor", catalogue.NoUnbroadcastAdd, "b1.grad has shape (4, 3), expected (3,)"),
])
def test_trusted_grading_rejects_a_wrong_answer_even_when_the_kernel_disables_the_comparisons(
        source, name, wrong, message):
    # gradcheck's verdict is the kernel's (it compares the learner's backward with the learner's own
    # forward, and uses torch.allclose there): a patched kernel can silence it, by design
    for kernel in (mutation.Loopback,) if "gradcheck" in message else (mutation.Loopback, PatchedKernel):
        err, _ = run_trusted(source, name, wrong, kernel=kernel)
        assert isinstance(err, GradingError) and message in str(err), (kernel.__name__, err)


def test_trusted_grading_compares_what_comes_back_with_its_own_references():
    """A kernel that sends back wrong numbers for a right answer is caught: the verdict is the grader's."""
    def zero_grads(answer):
        if isinstance(answer, FunctionRun) and isinstance(answer.grads, tuple):
            return dataclasses.replace(answer, grads=(torch.zeros_like(answer.grads[0]), *answer.grads[1:]))
        return answer

    def zero_engine(answer):
        if isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], dict):
            return answer[0], {k: dataclasses.replace(v, grad=torch.zeros_like(v.grad)) for k, v in answer[1].items()}
        return answer

    err, _ = run_trusted(LSE_CELL, "StableLogSumExp", catalogue._LSEBase, forge=zero_grads)
    assert isinstance(err, GradingError) and "wrong values in dL/dx from your backward" in str(err)
    err, _ = run_trusted(ENGINE_CELL, "Tensor", catalogue.AltTensor, forge=zero_engine)
    assert isinstance(err, GradingError) and "wrong values in a.grad" in str(err)


def test_the_grade_cells_in_trusted_mode_give_the_plain_messages():
    for name, wrong in (("StableLogSumExp", catalogue.LSENaive), ("StraightThroughRound", catalogue.STRHalfUp),
                        ("Tensor", catalogue.RecursiveTensor)):
        plain = mutation.run_grade_cells("03_vjp", name, wrong)
        routed = mutation.run_grade_cells("03_vjp", name, wrong, trusted_mode=True)
        assert {k: str(v) for k, v in routed.items()} == {k: str(v) for k, v in plain.items()}
        assert any(isinstance(v, GradingError) for v in routed.values())


STRESSED_CELL = """
from autograder.checks import nb03_vjp
nb03_vjp.check_vjp("vjp_relu", vjp_relu, [nb03_vjp.relu_case((3, 4), seed=70),
                                          nb03_vjp.relu_case((4, 5), seed=71, expand=("g",)),
                                          nb03_vjp.stressed(nb03_vjp.relu_case((2, 3, 4), seed=72), "non-contiguous",
                                                            ("x", "g"))])
"""


@pytest.mark.parametrize("trusted", [False, True])
def test_expanded_and_strided_inputs_reach_the_learners_code_as_they_are(trusted):
    """In trusted grading the inputs are pickled into the kernel: they must arrive expanded and strided
    (with the contiguous twin of each first), or the stresses would test nothing there."""
    def spy(x, g):
        seen.append((is_expanded(g), g.is_contiguous(), x.is_contiguous()))
        return g * (x > 0)

    seen = []
    if trusted:
        err, _answers = run_trusted(STRESSED_CELL, "vjp_relu", spy)
        assert err is None
    else:
        exec(STRESSED_CELL, {"vjp_relu": spy})
    assert seen == [(False, True, True),                          # contiguous
                    (False, True, True), (True, False, True),      # expanded g after its twin
                    (False, True, True), (False, False, False)]    # strided x, g after their twin
