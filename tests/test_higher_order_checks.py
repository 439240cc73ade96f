"""autograder.checks.nb08_higher_order: the references and counts are right, correct answers written here
(independently of the notebook's solutions) pass, the classic slips fail with a message that names
them, and the checks work across the trusted boundary."""
import warnings
from unittest import mock

import mutation
import pytest
import torch
import torch.nn.functional as F

from autograder.checks import GradingError, boundary
from autograder.checks import nb08_higher_order as ho
from autograder.checks.nb08_higher_order.hessian_vector import reference_hvp
from autograder.checks.nb08_higher_order.per_sample import (
    counting_model,
    loop_of_single_example_grads,
    per_sample_inputs,
)
from autograder.checks.nb08_higher_order.truncated_bptt import (
    ScalarCell,
    rnn_cell,
    saved_counts_of_tbptt,
    sequence,
    squared_error,
)
from autograder.checks.saved_counts import SavedCounts
from autograder.grader.keys import answer_key
from autograder.learner.device import available_devices

KEY = answer_key("08_higher_order")


@pytest.fixture(params=available_devices())
def device(request):
    return torch.device(request.param)


# --- correct answers, written for these tests --------------------------------------------------------
def hvp(f, x, v):
    leaf = x.detach().clone().requires_grad_(True)
    out = f(leaf)
    if not out.requires_grad:
        return torch.zeros_like(x)
    (g,) = torch.autograd.grad(out, leaf, create_graph=True, allow_unused=True)
    if g is None or not g.requires_grad:
        return torch.zeros_like(x)
    (hv,) = torch.autograd.grad((g * v).sum(), leaf, allow_unused=True)
    return torch.zeros_like(x) if hv is None else hv


def hvp_finite_differences(f, x, v, h=1e-6):
    def gradient(t):
        t = t.detach().requires_grad_(True)
        return torch.autograd.grad(f(t), t)[0]
    return (gradient(x + h * v) - gradient(x - h * v)) / (2 * h)


def hvp_row_by_row(f, x, v):
    leaf = x.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(f(leaf), leaf, create_graph=True)
    rows = [torch.autograd.grad(g.reshape(-1)[i], leaf, retain_graph=True)[0].reshape(-1) for i in range(g.numel())]
    return (torch.stack(rows) @ v.reshape(-1)).reshape(x.shape)


class SmoothAbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, eps=1e-3):
        out = torch.sqrt(x ** 2 + eps ** 2)
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, out = ctx.saved_tensors
        return grad_out * x / out, None


def per_sample_grads(model, loss_fn, x, y):
    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}

    def one(p, x_i, y_i):
        return loss_fn(torch.func.functional_call(model, p, (x_i[None],)), y_i[None])

    return torch.func.vmap(torch.func.grad(one), in_dims=(None, 0, 0))(params, x, y)


def gradient_penalty(critic, real, fake, alpha):
    if isinstance(alpha, torch.Tensor) and alpha.dim():
        alpha = alpha.view(len(alpha), *[1] * (real.dim() - 1))
    x_hat = torch.lerp(fake, real, alpha).detach().requires_grad_(True)
    scores = critic(x_hat)
    (slope,) = torch.autograd.grad(scores, x_hat, torch.ones_like(scores), create_graph=True)
    return (torch.linalg.vector_norm(slope.flatten(1), dim=1) - 1).square().mean()


def tbptt_backward(cell, xs, targets, h0, k, loss_fn):
    h, total, pending = h0, 0.0, []
    for t in range(len(xs)):
        h = cell(xs[t], h)
        pending.append(loss_fn(h, targets[t]))
        if len(pending) == k or t == len(xs) - 1:
            segment = sum(pending)
            segment.backward()
            total, pending, h = total + segment.item(), [], h.detach()
    return total


def attach_step_in_backward(model, lr):
    def step(p):
        p.data.sub_(lr * p.grad)
        p.grad = None
    return [p.register_post_accumulate_grad_hook(step) for p in model.parameters() if p.requires_grad]


def tbptt_at_the_end(cell, xs, targets, h0, k, loss_fn):
    """Right gradients, one backward at the end: the memory check must reject it."""
    h, loss = h0, 0
    for t in range(len(xs)):
        if t and t % k == 0:
            h = h.detach()
        h = cell(xs[t], h)
        loss = loss + loss_fn(h, targets[t])
    loss.backward()
    return loss.item()


# --- hvp --------------------------------------------------------------------------------------------------
def test_the_quadratic_objective_has_the_hessian_written_by_hand():
    case = ho.hvp_case("quadratic", (4,), seed=3, device="cpu")
    f = case["f"]
    hessian = (f.a + f.a.T) / 2  # d^2/dx^2 of 0.5 x.(A x) + b.x
    assert torch.allclose(reference_hvp(f, case["x"], case["v"]), hessian @ case["v"], atol=1e-12)


@pytest.mark.parametrize("kind, shape", [("softmax", (5,)), ("rosenbrock", (4,)), ("matrix", (2, 3)),
                                         ("mixed", (2, 2, 2)), ("scalar", ()), ("affine", (3,)),
                                         ("affine_weights", (2, 2)), ("counted", (3,))])
def test_every_objective_against_finite_differences(kind, shape):
    case = ho.hvp_case(kind, shape, seed=7, device="cpu")
    expected = reference_hvp(case["f"], case["x"], case["v"])
    if kind.startswith("affine"):
        assert expected.abs().max() == 0
    else:
        assert torch.allclose(hvp_finite_differences(case["f"], case["x"], case["v"]), expected, rtol=1e-6, atol=1e-6)
    assert repr(case["f"]).startswith("f(x) = ")


def test_the_counted_square_counts_passes_through_the_gradients_graph():
    counts = {}
    for name, fn in (("double backward", hvp), ("finite differences", hvp_finite_differences),
                     ("row by row", hvp_row_by_row)):
        case = ho.hvp_case("counted", (4,), seed=1, device="cpu")
        fn(case["f"], case["x"], case["v"])
        counts[name] = len(case["f"].counter)
    assert counts == {"double backward": 1, "finite differences": 0, "row by row": 4}


def test_hvp_checks_pass_a_correct_answer(device):
    cases = [ho.hvp_case(kind, shape, seed=i, device=device) for i, (kind, shape) in
             enumerate([("quadratic", (3,)), ("matrix", (2, 3)), ("affine_weights", (2,)), ("scalar", ())])]
    ho.check_hvp("hvp", hvp, cases + [ho.hvp_case("softmax", (5,), seed=9, dtype=torch.float32, device=device)])
    ho.check_hvp_double_backward("hvp", hvp, shape=(2, 2), seed=4, device=device)


@pytest.mark.parametrize("cheat", [
    lambda f, x, v: torch.autograd.functional.hvp(f, x, v)[1],
    lambda f, x, v: torch.autograd.functional.hessian(f, x).reshape(x.numel(), -1) @ v.reshape(-1),
    lambda f, x, v: torch.func.jvp(torch.func.grad(f), (x,), (v,))[1],
    lambda f, x, v: torch.func.hessian(f)(x) @ v,
], ids=["functional.hvp", "functional.hessian", "func.jvp(grad)", "func.hessian"])
def test_hvp_refuses_torch_func_and_autograd_functional(cheat):
    with pytest.raises(GradingError, match="called torch.* build that yourself"):
        ho.check_hvp("hvp", cheat, [ho.hvp_case("quadratic", (3,), seed=1)])


def test_hvp_refuses_torch_func_bound_under_another_name():
    from torch._functorch.eager_transforms import hessian as renamed
    with pytest.raises(GradingError, match="called torch.func.hessian"):
        ho.check_hvp("hvp", lambda f, x, v: renamed(f)(x) @ v, [ho.hvp_case("quadratic", (3,), seed=1)])


def test_hvp_double_backward_check_names_finite_differences_and_a_full_hessian():
    with pytest.raises(GradingError, match="no backward pass went through the graph of the gradient"):
        ho.check_hvp_double_backward("hvp", hvp_finite_differences, shape=(3,), seed=2)
    with pytest.raises(GradingError, match="3 backward passes .* row by row"):
        ho.check_hvp_double_backward("hvp", hvp_row_by_row, shape=(3,), seed=2)


def test_hvp_check_explains_the_affine_case():
    def no_affine_case(f, x, v):
        x = x.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(f(x), x, create_graph=True)
        return torch.autograd.grad(g, x, v)[0]

    with pytest.raises(GradingError, match="(?s)does not require grad.*f is affine here"):
        ho.check_hvp("hvp", no_affine_case, [ho.hvp_case("affine", (3,), seed=1)])


# --- gradient_penalty -------------------------------------------------------------------------------------
def test_the_closed_form_is_autograds_penalty():
    """The quadratic critic's closed form (used by the visible test) against the answer key."""
    for shape, alpha_kind in (((3,), "vector"), ((2, 4), "column"), ((2,), "float")):
        ho.check_penalty_closed_form("gp", gradient_penalty, batch=4, shape=shape, alpha_kind=alpha_kind, seed=5)


@pytest.mark.parametrize("kind, shape, alpha_kind", [("mlp", (5,), "float"), ("mlp", (2, 3), "column"),
                                                     ("conv", (2, 5), "vector")])
def test_a_correct_penalty_passes_the_check_against_the_key(kind, shape, alpha_kind, device):
    ho.check_penalty("gp", gradient_penalty, KEY.gradient_penalty, kind=kind, batch=4, shape=shape,
                     alpha_kind=alpha_kind, seed=3, device=device)


def test_a_penalty_without_create_graph_fails_with_a_message_that_says_so():
    def no_graph(critic, real, fake, alpha):
        x_hat = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
        (slope,) = torch.autograd.grad(critic(x_hat).sum(), x_hat)
        return ((slope.norm(dim=1) - 1) ** 2).mean()

    message = ("the penalty's gradient did not reach the critic's weights: the penalty does not require grad. "
               "Was torch.autograd.grad called without create_graph=True?")
    for check in (lambda: ho.check_penalty_closed_form("gp", no_graph, batch=3, shape=(2,), alpha_kind="float", seed=1),
                  lambda: ho.check_penalty("gp", no_graph, KEY.gradient_penalty, kind="mlp", batch=3, shape=(4,),
                                           alpha_kind="float", seed=1)):
        with pytest.raises(GradingError) as err:
            check()
        assert message in str(err.value)


def test_a_penalty_at_the_wrong_point_is_named():
    def at_fake(critic, real, fake, alpha):
        return gradient_penalty(critic, real, fake, 0.0)

    with pytest.raises(GradingError, match="that is the penalty at fake"):
        ho.check_penalty("gp", at_fake, KEY.gradient_penalty, kind="mlp", batch=4, shape=(3,), alpha_kind="vector",
                         seed=2)


# --- SmoothAbs --------------------------------------------------------------------------------------------
def smooth_cases(device="cpu"):
    return [ho.smooth_abs_case((4,), eps=None, seed=1, device=device), ho.smooth_abs_case((2, 3), eps=0.1, seed=2,
                                                                                          device=device),
            ho.smooth_abs_case((3,), eps=0.05, seed=3, dtype=torch.float32, device=device)]


def test_smooth_abs_checks_pass_a_correct_function(device):
    ho.check_smooth_abs("SmoothAbs", SmoothAbs, smooth_cases(device))
    ho.check_smooth_abs_double_backward("SmoothAbs", SmoothAbs, smooth_cases(device))


class DetachedBackward(SmoothAbs):
    @staticmethod
    def backward(ctx, grad_out):
        x, out = (t.detach() for t in ctx.saved_tensors)
        return grad_out * x / out, None


class SavedIntermediate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, eps=1e-3):
        root = torch.sqrt(x ** 2 + eps ** 2)
        ctx.save_for_backward(x, 1 / root)
        return root

    @staticmethod
    def backward(ctx, grad_out):
        x, inverse = ctx.saved_tensors
        return grad_out * x * inverse, None


class OnceDifferentiable(SmoothAbs):
    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        x, out = ctx.saved_tensors
        return grad_out * x / out, None


class InPlace(SmoothAbs):
    @staticmethod
    def backward(ctx, grad_out):
        x, out = ctx.saved_tensors
        out.div_(1.0)
        return grad_out * x / out, None


@pytest.mark.parametrize("cls, words", [
    (DetachedBackward, "has no graph, even with create_graph=True"),
    (OnceDifferentiable, "@once_differentiable"),
    (SavedIntermediate, "save only inputs and outputs"),
    (InPlace, "edits a tensor in place"),
], ids=["detach", "once_differentiable", "intermediate", "in-place"])
def test_double_backward_failures_name_the_rule(cls, words):
    ho.check_smooth_abs("SmoothAbs", cls, smooth_cases()[:2])  # the first derivative is right for all of them
    with pytest.raises(GradingError, match=words):
        ho.check_smooth_abs_double_backward("SmoothAbs", cls, smooth_cases()[:2])


def test_a_backward_that_asks_autograd_is_refused():
    class AsksAutograd(SmoothAbs):
        @staticmethod
        def backward(ctx, grad_out):
            x, _ = ctx.saved_tensors
            with torch.enable_grad():
                leaf = x.detach().requires_grad_(True)
                return torch.autograd.grad(torch.sqrt(leaf ** 2 + 1e-6), leaf, grad_out)[0], None

    with pytest.raises(GradingError, match="called autograd"):
        ho.check_smooth_abs("SmoothAbs", AsksAutograd, smooth_cases()[:1])


def test_smooth_abs_must_be_a_function_class():
    with pytest.raises(GradingError, match="subclass of torch.autograd.Function"):
        ho.check_smooth_abs("SmoothAbs", lambda x, eps=1e-3: torch.sqrt(x * x + eps * eps), smooth_cases()[:1])


# --- per_sample_grads -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, loss", [("mlp", "cross_entropy"), ("frozen", "mse"), ("conv", "cross_entropy")])
def test_per_sample_checks_pass_vmap(kind, loss, device):
    ho.check_per_sample_grads("psg", per_sample_grads, kind, batch=5, loss=loss, seed=1, device=device, vectorised=True)


def test_the_loop_reference_matches_vmap_and_averages_to_the_batch_gradient():
    model = counting_model("frozen", seed=2, device="cpu")
    x, y = per_sample_inputs("frozen", 6, "mse", seed=3, device="cpu")
    loop = loop_of_single_example_grads(model, F.mse_loss, x, y)
    assert sorted(loop) == ["body.2.bias", "body.2.weight"]  # the frozen first layer is left out
    vectorised = per_sample_grads(model, F.mse_loss, x, y)
    for name, grads in loop.items():
        assert torch.allclose(grads, vectorised[name], atol=1e-12)
    model.calls = 0
    per_sample_grads(model, F.mse_loss, x, y)
    assert model.calls == 1  # what the vectorised check relies on


def test_a_loop_earns_the_values_but_not_the_vectorised_point():
    ho.check_per_sample_grads("psg", loop_of_single_example_grads, "mlp", batch=4, loss="mse", seed=4)
    with pytest.raises(GradingError, match="ran the model 4 times for 4 examples"):
        ho.check_per_sample_grads("psg", loop_of_single_example_grads, "mlp", batch=4, loss="mse", seed=4,
                                  vectorised=True)


# --- attach_step_in_backward --------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["mlp", "frozen", "tied"])
def test_step_in_backward_check_passes_hooks(kind, device):
    ho.check_step_in_backward("asib", attach_step_in_backward, kind, lr=0.2, seed=1, device=device)


def test_hooks_that_keep_the_gradient_are_named():
    def keeps(model, lr):
        def step(p):
            p.data.sub_(lr * p.grad)
        return [p.register_post_accumulate_grad_hook(step) for p in model.parameters() if p.requires_grad]

    with pytest.raises(GradingError, match="is still set: once the step is taken the hook must free it"):
        ho.check_step_in_backward("asib", keeps, "mlp", lr=0.1, seed=2)


def test_handles_that_do_not_remove_the_hooks_are_caught():
    class Handle:
        def remove(self):
            pass

    def fake_handles(model, lr):
        attach_step_in_backward(model, lr)
        return [Handle() for p in model.parameters() if p.requires_grad]

    with pytest.raises(GradingError, match="after every returned handle was removed"):
        ho.check_step_in_backward("asib", fake_handles, "mlp", lr=0.1, seed=3)


# --- tbptt_backward -------------------------------------------------------------------------------------------
VISIBLE = dict(xs=[0.5, -1.0, 2.0, 0.3, -0.7], targets=[0.2, -0.3, 0.6, 0.1, -0.4], k=2,
               expected_total=0.2181040457202315,
               expected_grads={"w": 0.38975052784074093, "u": 0.17384058714573675, "b": 0.7279457175863036})


def test_the_visible_literals_are_the_keys_values():
    """The numbers the notebook's visible test states are what the answer key computes."""
    cell = ScalarCell()
    total = KEY.tbptt_backward(cell, torch.tensor(VISIBLE["xs"], dtype=torch.float64),
                               torch.tensor(VISIBLE["targets"], dtype=torch.float64),
                               torch.tensor(0.0, dtype=torch.float64), VISIBLE["k"], squared_error)
    assert total == pytest.approx(VISIBLE["expected_total"], rel=1e-12)
    assert {n: p.grad.item() for n, p in cell.named_parameters()} == pytest.approx(VISIBLE["expected_grads"], rel=1e-12)
    ho.check_tbptt_expected("tb", tbptt_backward, **VISIBLE)
    with pytest.raises(GradingError, match="they are those of full backpropagation through time"):
        ho.check_tbptt_expected("tb", lambda c, xs, ts, h0, k, fn: tbptt_at_the_end(c, xs, ts, h0, len(xs), fn),
                                **VISIBLE)


@pytest.mark.parametrize("options", [dict(steps=7, k=3, loss="mse"), dict(steps=6, k=2, loss="classes", as_list=True),
                                     dict(steps=5, k=2, loss="mse", h0_requires_grad=True, preset_grads=True)])
def test_tbptt_check_passes_an_answer_with_one_backward_at_the_end(options, device):
    """Same gradients as truncated BPTT: only the memory check can tell them apart."""
    ho.check_tbptt("tb", tbptt_at_the_end, KEY.tbptt_backward, "gru", seed=4, device=device, **options)


def test_tbptt_memory_is_flat_for_the_key_and_grows_for_one_backward_at_the_end(device):
    ho.check_tbptt_memory("tb", tbptt_backward, k=3, lengths=(6, 16), seed=1, device=device)
    with pytest.raises(GradingError, match="the peak of saved bytes grows with the sequence"):
        ho.check_tbptt_memory("tb", tbptt_at_the_end, k=3, lengths=(6, 16), seed=1, device=device)


def test_tbptt_peaks_are_exactly_equal_for_the_key():
    peaks = []
    for steps in (6, 13):
        cell = rnn_cell("rnn", seed=2, hidden=8, dtype=torch.float32, device="cpu")
        xs, targets, h0 = sequence("mse", steps, seed=3, hidden=8, dtype=torch.float32, device="cpu", as_list=True)
        peaks.append(saved_counts_of_tbptt(KEY.tbptt_backward, cell, xs, targets, h0, 3, F.mse_loss).peak_bytes)
    assert peaks[0] == peaks[1] > 0


# --- trusted grading: the learner's code in a driver, the comparisons here -----------------------------------
def run_trusted(source, implementation, kernel=mutation.Loopback):
    """A test cell run as trusted grading runs it: `g` is a stand-in reached only through `kernel`;
    returns the cell's error (None if it passed) and every answer that came back."""
    answers = []

    class Recording(kernel):
        def call(self, exercise, fn, args, options):
            answers.append(super().call(exercise, fn, args, options))
            return answers[-1]

    with mock.patch.object(mutation, "Loopback", Recording):
        err = mutation._run_cell(source, "test", {"__name__": "__main__", "g": implementation}, True)
    return err, answers


def flatten(answer):
    if isinstance(answer, (tuple, list)):
        return [leaf for item in answer for leaf in flatten(item)]
    if isinstance(answer, dict):
        return [leaf for item in answer.values() for leaf in flatten(item)]
    return [answer]


CELLS = {
    "hvp": (hvp, "nb08_higher_order.check_hvp('g', g, [nb08_higher_order.hvp_case('softmax', (4,), seed=1, "
                 "device='cpu')])\n"
                 "nb08_higher_order.check_hvp_double_backward('g', g, shape=(3,), seed=2, device='cpu')"),
    "penalty": (gradient_penalty, "nb08_higher_order.check_penalty('g', g, key.gradient_penalty, kind='conv', "
                                  "batch=3, shape=(2, 4), alpha_kind='column', seed=3, device='cpu')"),
    "SmoothAbs": (SmoothAbs, "nb08_higher_order.check_smooth_abs_double_backward('g', g, "
                             "[nb08_higher_order.smooth_abs_case((3,), eps=0.1, seed=4, device='cpu')])"),
    "per_sample": (per_sample_grads, "nb08_higher_order.check_per_sample_grads('g', g, 'conv', batch=3, loss='mse', "
                                     "seed=5, device='cpu', vectorised=True)"),
    "step": (attach_step_in_backward, "nb08_higher_order.check_step_in_backward('g', g, 'tied', lr=0.1, seed=6, "
                                      "device='cpu')"),
    "tbptt": (tbptt_backward, "nb08_higher_order.check_tbptt('g', g, key.tbptt_backward, 'rnn', steps=5, k=2, "
                              "loss='mse', seed=7, h0_requires_grad=True, preset_grads=True, device='cpu')\n"
                              "nb08_higher_order.check_tbptt_memory('g', g, k=2, lengths=(4, 9), seed=8, "
                              "device='cpu')"),
}
PREAMBLE = ("from autograder.checks import nb08_higher_order\nfrom autograder.grader.keys import answer_key\n"
            "key = answer_key('08_higher_order')\n")


@pytest.mark.parametrize("name", CELLS)
def test_trusted_checks_get_data_back_and_pass(name):
    implementation, cell = CELLS[name]
    err, answers = run_trusted(PREAMBLE + cell, implementation)
    assert err is None, err
    leaves = flatten(answers)
    assert answers and not [a for a in leaves if isinstance(a, (boundary.Opaque, boundary.Raised))]
    if name == "tbptt":
        assert [a for a in leaves if isinstance(a, SavedCounts)]


def test_trusted_checks_reject_with_the_same_messages():
    err, _ = run_trusted(PREAMBLE + CELLS["tbptt"][1], tbptt_at_the_end)
    assert isinstance(err, GradingError) and "grows with the sequence" in str(err), err
    err, _ = run_trusted(PREAMBLE + CELLS["SmoothAbs"][1], SavedIntermediate)
    assert isinstance(err, GradingError) and "save only inputs and outputs" in str(err), err
    err, _ = run_trusted(PREAMBLE + CELLS["hvp"][1], hvp_row_by_row)
    assert isinstance(err, GradingError) and "row by row" in str(err), err


# --- what the quiz's explanations claim ------------------------------------------------------------------------
def test_the_quiz_claims_about_hooks_hold():
    """08's quiz: a module's full backward hook fires once per call (twice for a module used twice); a
    tensor hook on a leaf runs before .grad is written; a post-accumulate hook runs once, after."""
    layer = torch.nn.Linear(3, 3)
    module_calls, seen_in_tensor_hook, post = [], [], []
    layer.register_full_backward_hook(lambda m, gin, gout: module_calls.append(1))
    layer.weight.register_hook(lambda g: seen_in_tensor_hook.append(layer.weight.grad))
    layer.weight.register_post_accumulate_grad_hook(lambda p: post.append(p.grad is not None))
    layer(layer(torch.randn(2, 3, requires_grad=True))).sum().backward()
    assert len(module_calls) == 2 and seen_in_tensor_hook == [None] and post == [True]


def test_create_graph_is_the_flag_that_records_the_backward_pass():
    x = torch.tensor(2.0, requires_grad=True)
    assert not torch.autograd.grad(x ** 3, x)[0].requires_grad
    assert torch.autograd.grad(x ** 3, x, create_graph=True)[0].requires_grad


def test_an_in_place_step_in_a_hook_needs_no_grad_only_under_create_graph():
    """08's exercise text: hooks of a plain backward run with grad mode off, those of a backward with
    create_graph=True do not, and an in-place step on the leaf is then refused."""
    p = torch.nn.Parameter(torch.ones(3))

    def step(q):
        q.sub_(0.1 * q.grad)
        q.grad = None

    p.register_post_accumulate_grad_hook(step)
    (p * p).sum().backward()
    assert torch.allclose(p.detach(), torch.full((3,), 0.8))
    # PyTorch warns about create_graph=True's reference cycle once per process, so whether it is seen here
    # depends on the tests run before; what the text claims is the refusal.
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad is being used in an in-place"), \
            warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Using backward\\(\\) with create_graph=True", category=UserWarning)
        (p * p).sum().backward(create_graph=True)


# --- the battery's stresses: they reach the learner's code, and each names what broke -----------------------
def seen_layouts(implementation, record):
    """`implementation`, wrapped to record whether each tensor argument it is called with is contiguous."""
    def wrapped(*args):
        record.append(tuple(a.is_contiguous() for a in args if isinstance(a, torch.Tensor)))
        return implementation(*args)
    return wrapped


@pytest.mark.parametrize("mode", ["plain", "trusted"])
def test_strided_inputs_reach_the_learners_code_strided(mode):
    """A copy across the trusted boundary, or the private copy each call gets, is contiguous again: the
    drivers build the strided views where the learner's code runs, in both modes."""
    cells = {"hvp": (hvp, "nb08_higher_order.check_hvp('g', g, [nb08_higher_order.hvp_case('matrix', (3, 4), seed=1, "
                          "stress='non-contiguous', device='cpu')])"),
             "per_sample": (per_sample_grads, "nb08_higher_order.check_per_sample_grads('g', g, 'mlp', batch=4, "
                                              "loss='mse', seed=2, stress='non-contiguous', device='cpu')")}
    for name, (implementation, cell) in cells.items():
        record = []
        wrapped = seen_layouts(implementation, record)
        if mode == "plain":
            exec(PREAMBLE + cell, {"g": wrapped})
        else:
            err, _ = run_trusted(PREAMBLE + cell, wrapped)
            assert err is None, err
        assert record and record[0][0] is False, (name, record)  # x arrives strided ...
        if name == "hvp":
            assert record[0][1] is False  # ... and so does v


def hvp_view(f, x, v):
    leaf = x.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(f(leaf), leaf, create_graph=True)
    return torch.autograd.grad(g.view(-1) @ v.view(-1), leaf)[0]


def test_a_view_of_a_strided_input_is_named():
    ho.check_hvp("hvp", hvp_view, [ho.hvp_case("matrix", (3, 4), seed=1)])  # right on contiguous memory
    with pytest.raises(GradingError, match="fails for a non-contiguous x and v: .view needs contiguous memory"):
        ho.check_hvp("hvp", hvp_view, [ho.hvp_case("matrix", (3, 4), seed=1, stress="non-contiguous")])


class SignTimesRoot(SmoothAbs):
    """The right slope, sign(x) sqrt(1 - eps^2 / (x^2 + eps^2)), whose derivative is NaN at 0."""

    @staticmethod
    def backward(ctx, grad_out):
        x, out = ctx.saved_tensors
        eps_squared = out * out - x * x
        return grad_out * torch.sign(x) * torch.sqrt(1 - eps_squared / (x * x + eps_squared)), None


def test_the_special_points_pass_a_correct_function_and_name_a_nan_second_derivative():
    cases = [ho.smooth_abs_special_points(eps=0.01, seed=1, device="cpu"),
             ho.smooth_abs_special_points(eps=None, seed=2, device="cpu")]
    assert cases[0]["x"].tolist() == [0.0, 1e-30, -1e-30, 1e-08, -1e-08, 1.0, -1.0, 1e4, -1e4]
    ho.check_smooth_abs("SmoothAbs", SmoothAbs, cases)
    ho.check_smooth_abs_double_backward("SmoothAbs", SmoothAbs, cases)
    ho.check_smooth_abs("SmoothAbs", SignTimesRoot, cases)  # its first derivative is right everywhere
    with pytest.raises(GradingError, match="(?s)fails for the special points.*your backward is nan at x = 0"):
        ho.check_smooth_abs_double_backward("SmoothAbs", SignTimesRoot, cases)


def squeezed_scores(critic, real, fake, alpha):
    x_hat = torch.lerp(fake, real, torch.as_tensor(alpha).reshape(-1, *[1] * (real.dim() - 1))).detach()
    x_hat.requires_grad_(True)
    scores = critic(x_hat).squeeze()
    (slope,) = torch.autograd.grad(scores, x_hat, torch.ones(len(real), dtype=real.dtype), create_graph=True)
    return ((slope.flatten(1).norm(dim=1) - 1) ** 2).mean()


def norm_over_dimension_one(critic, real, fake, alpha):
    x_hat = torch.lerp(fake, real, torch.as_tensor(alpha).reshape(-1, *[1] * (real.dim() - 1))).detach()
    x_hat.requires_grad_(True)
    (slope,) = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
    return ((slope.norm(dim=1) - 1) ** 2).mean()


def test_a_batch_of_one_and_the_norm_over_dimension_one_are_named():
    options = dict(kind="mlp", batch=1, shape=(5,), alpha_kind="vector", seed=3)
    ho.check_penalty("gp", squeezed_scores, KEY.gradient_penalty, **{**options, "batch": 3})  # right for N > 1
    ho.check_penalty("gp", gradient_penalty, KEY.gradient_penalty, **options, stress="batch-of-one")
    with pytest.raises(GradingError, match="gp: fails for a batch of one: do not .squeeze"):
        ho.check_penalty("gp", squeezed_scores, KEY.gradient_penalty, **options, stress="batch-of-one")
    ho.check_penalty("gp", norm_over_dimension_one, KEY.gradient_penalty, kind="mlp", batch=3, shape=(4,),
                     alpha_kind="vector", seed=4)  # right for inputs of shape (N, D)
    for check in (lambda: ho.check_penalty_closed_form("gp", norm_over_dimension_one, batch=3, shape=(2, 4),
                                                       alpha_kind="column", seed=2),
                  lambda: ho.check_penalty("gp", norm_over_dimension_one, KEY.gradient_penalty, kind="conv", batch=3,
                                           shape=(2, 5), alpha_kind="vector", seed=5)):
        with pytest.raises(GradingError, match=r"norm over dimension 1 only .* each example has shape \(2, [45]\)"):
            check()


def step_without_no_grad(model, lr):
    def step(p):
        p.sub_(lr * p.grad)
        p.grad = None
    return [p.register_post_accumulate_grad_hook(step) for p in model.parameters() if p.requires_grad]


@pytest.mark.parametrize("mode", ["plain", "trusted"])
def test_a_step_outside_no_grad_passes_a_plain_backward_and_is_named_under_create_graph(mode):
    cell = "nb08_higher_order.check_step_in_backward('g', g, 'tied', lr=0.1, seed=6, device='cpu', create_graph={})"

    def run(implementation, create_graph):
        source = PREAMBLE + cell.format(create_graph)
        if mode == "trusted":
            return run_trusted(source, implementation)[0]
        try:
            exec(source, {"g": implementation})
        except GradingError as err:
            return err
        return None

    assert run(step_without_no_grad, False) is None
    assert run(attach_step_in_backward, True) is None
    err = run(step_without_no_grad, True)
    assert isinstance(err, GradingError) and "fails for backward(create_graph=True): under create_graph=True the " \
        "backward pass is itself recorded: update parameters under torch.no_grad()" in str(err), err


def test_a_batch_of_one_passes_a_correct_per_sample_and_tbptt_answer():
    ho.check_per_sample_grads("g", per_sample_grads, "conv", batch=1, loss="cross_entropy", seed=7,
                              stress="batch-of-one")
    ho.check_tbptt("g", tbptt_backward, KEY.tbptt_backward, "gru", steps=5, k=2, loss="classes", seed=7, batch=1,
                   stress="batch-of-one")


# --- what the notebook's prose claims, run here too ------------------------------------------------------------
def test_hvp_keeps_the_memory_of_a_gradient_not_of_x():
    """Section 2.3: the peak of saved bytes follows the function's graph (W's rows), not x, and is a little
    more than one plain gradient's: no n x n matrix, and not the memory of x either."""
    from autograder.learner.memory import SavedTensorLedger

    def peak(run):
        with SavedTensorLedger() as ledger:
            run()
        return ledger.peak_bytes

    def plain_gradient(f, t):
        t = t.detach().requires_grad_(True)
        return torch.autograd.grad(f(t), t)[0]

    x, v = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    peaks = []
    for rows in (10, 1_000, 10_000):
        W = torch.randn(rows, 8, dtype=torch.float64)
        f = lambda t, W=W: torch.logsumexp(W @ torch.tanh(t), 0)  # noqa: E731
        product, gradient = peak(lambda: hvp(f, x, v)), peak(lambda: plain_gradient(f, x))
        assert W.nbytes < product and 1 < product / gradient < 1.5, (rows, product, gradient)
        peaks.append(product)
    assert peaks[0] > x.nbytes and peaks[2] > 100 * peaks[0]


def critic_first_layer_grad(backward):
    """Section 4: the gradient a penalty on a two-layer critic's input slope sends to its first layer, with a
    Function between the layers whose backward is `backward` (log(1 + x^2), derivative 2x / (1 + x^2))."""
    class Between(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.log1p(x * x)

    Between.backward = staticmethod(backward)
    torch.manual_seed(9)
    inner, outer = torch.nn.Linear(3, 8).double(), torch.nn.Linear(8, 1).double()
    points = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    (slope,) = torch.autograd.grad(outer(Between.apply(inner(points))).sum(), points, create_graph=True)
    ((slope.flatten(1).norm(dim=1) - 1) ** 2).mean().backward()
    return inner.weight.grad


def test_inside_a_model_a_cut_backward_is_silently_wrong_and_once_differentiable_raises():
    def right(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2 * x / (1 + x * x)

    def detached(ctx, g):
        x = ctx.saved_tensors[0].detach()
        return g * 2 * x / (1 + x * x)

    def no_grad(ctx, g):
        with torch.no_grad():
            return right(ctx, g)

    truth = critic_first_layer_grad(right)
    for cut in (detached, no_grad):
        assert not torch.allclose(critic_first_layer_grad(cut), truth)  # no error, a wrong gradient
    with pytest.raises(RuntimeError, match="trying to differentiate twice a function that was marked with "
                                           "@once_differentiable"):
        critic_first_layer_grad(torch.autograd.function.once_differentiable(right))


def test_the_last_layers_gradients_are_complete_first_and_ddp_says_it_overlaps():
    """Section 5.2: post-accumulate-grad hooks of the last Linear fire before the first Linear's module hook,
    and the installed DistributedDataParallel documents the overlap the notebook quotes."""
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    events = []
    mlp[0].register_full_backward_hook(lambda *args: events.append("layer 0 done"))
    mlp[2].weight.register_post_accumulate_grad_hook(lambda p: events.append("2.weight complete"))
    mlp(torch.randn(3, 4, requires_grad=True)).sum().backward()
    assert events == ["2.weight complete", "layer 0 done"]
    documentation = " ".join(torch.nn.parallel.DistributedDataParallel.__doc__.split())
    assert "can potentially overlap with backward computation" in documentation


def test_the_derive_questions_answers_are_what_autograd_computes():
    from autograder.learner import quiz_schema
    x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(x[0] ** 2 * x[1] + x[1] ** 3, x, create_graph=True)
    (hv,) = torch.autograd.grad(g @ torch.ones(2, dtype=torch.float64), x)
    t = torch.tensor(0.01, dtype=torch.float64, requires_grad=True)
    (slope,) = torch.autograd.grad(torch.sqrt(t * t + 0.01 ** 2), t, create_graph=True)
    (curvature,) = torch.autograd.grad(slope, t)
    for question_id, value in (("hvp-curvature-along-v", hv[1]), ("smooth-abs-second-derivative", curvature)):
        question = quiz_schema.find_question("08_higher_order", question_id)
        assert question.section == "derive" and question.answer == pytest.approx(value.item(), rel=1e-6)
